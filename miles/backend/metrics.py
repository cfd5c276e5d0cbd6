"""Per-step R3 metrics, computed on the driver against the engines' own records.

Train ranks report what their routers actually used and the log-probs they computed,
each labelled (sample, position) by their replay plan; here those are looked up in what
the engines recorded. A route shipped to the wrong row, or weights that differ from the
ones the engine sampled with, shows up as disagreement, never as a silent pass. Coverage
is checked too: every response token must be scored, and every recorded (token, MoE
layer) route replayed, in each pass.
"""

from __future__ import annotations

import numpy as np

# The engine computes in float32 with bf16 router logits, the trainer in float64
# (policy.py), so even with every route replayed the log-probs differ by that rounding.
# Measured on the default job, seeds 0 and 1, 3 scored rollouts each: with replay the
# largest |diff| per rollout was 2.9e-3 .. 2.9e-2; without replay (--no-replay) 1.7 .. 7.5
# on rollouts with flipped routes (agreement 0.84-0.99), 7.5 and 4.2 per job; a rollout
# whose ties happen not to flip, or flip experts of near-equal output, stays at the noise
# (2.2e-2, 3.4e-3), which is why route agreement is checked exactly besides. The
# tolerance sits between the regimes: 5x above the largest replay noise seen, 28x below
# the smallest job maximum without replay.
LOGPROB_TOL = 0.15
TRAIN_PASSES = {("old", "replay_forward"), ("train", "replay_forward"),
                ("train", "replay_backward")}
SCORE_PASSES = {("old", "replay_forward")}


def failures(m: dict) -> list[str]:
    """The metrics of one step that say train and rollout disagree (empty when they agree)."""
    bad = []
    if m["logprob_max_abs_diff"] > LOGPROB_TOL:
        bad.append(f"logprob_max_abs_diff > {LOGPROB_TOL:g}")
    if m["route_agreement"] != 1.0:
        bad.append("route_agreement < 1")
    if m["early_post_requests"]:
        bad.append(f"early_post_requests={m['early_post_requests']}")
    if m["unplanned_shards"]:
        bad.append(f"unplanned_shards={m['unplanned_shards']}")
    if not m["engines_agree"]:
        bad.append("engines disagree")
    return bad


def logprob_diff(engine_lp: dict, plens: dict, parts: list, what: str, only=None) -> float:
    """max |train - rollout| over response tokens of samples `only` (default all), each once."""
    seen: set[tuple[int, int]] = set()
    worst = 0.0
    for samples, positions, lps in parts:
        for s, q, lp in zip(samples.tolist(), positions.tolist(), lps.tolist()):
            if (s, q) in seen:
                raise RuntimeError(f"{what}: token {q} of sample {s} scored twice")
            seen.add((s, q))
            worst = max(worst, abs(lp - engine_lp[s][q - plens[s]]))
    want = sum(len(engine_lp[s]) for s in (engine_lp if only is None else only))
    if len(seen) != want:
        raise RuntimeError(f"{what}: {len(seen)} of {want} response tokens scored")
    return worst


def route_agreement(routes: dict, moe_layers: tuple[int, ...], records: list,
                    passes=frozenset(TRAIN_PASSES)) -> tuple[int, int]:
    """(agreeing, total) replayed (token, layer) routes; checks each pass covers all of them."""
    want = sum(len(r) for r in routes.values()) * len(moe_layers)
    per_pass: dict[tuple, int] = {}
    agree = total = 0
    for kind, layer, action, samples, positions, ids in records:
        if len(samples) == 0:
            continue
        rec = np.stack([routes[s][p, layer] for s, p in zip(samples.tolist(), positions.tolist())])
        agree += int((np.sort(rec.astype(np.int64), 1) == np.sort(ids, 1)).all(1).sum())
        total += len(samples)
        key = (kind, action)
        per_pass[key] = per_pass.get(key, 0) + len(samples)
    if want and set(per_pass) != passes:
        raise RuntimeError(f"router passes {sorted(per_pass)}, expected {sorted(passes)}")
    for key, n in per_pass.items():
        if n != want:
            raise RuntimeError(f"{key[0]} pass ({key[1]}): {n} routes replayed, {want} recorded")
    return agree, total
