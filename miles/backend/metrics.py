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

LOGPROB_TOL = 1e-5  # float rounding; the engine and the trainer run the same float64 model


def exact(m: dict) -> bool:
    """Did a step's train and rollout agree: log-probs at rounding, every route replayed?"""
    return m["logprob_max_abs_diff"] <= LOGPROB_TOL and m["route_agreement"] == 1.0


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


def route_agreement(routes: dict, moe_layers: tuple[int, ...], records: list) -> tuple[int, int]:
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
    passes = {("old", "replay_forward"), ("train", "replay_forward"), ("train", "replay_backward")}
    if want and set(per_pass) != passes:
        raise RuntimeError(f"router passes {sorted(per_pass)}, expected {sorted(passes)}")
    for key, n in per_pass.items():
        if n != want:
            raise RuntimeError(f"{key[0]} pass ({key[1]}): {n} routes replayed, {want} recorded")
    return agree, total
