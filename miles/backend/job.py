"""The reference CPU job: rollout with route capture, R3 replay training, weight sync.

Per step: engines sample the toy task and record routes and log-probs; the driver
decodes the routes (`miles.rollout.routes`), plans and packs each rank's replay rows
(`miles_topology.model.replay`, `miles.replay.ship`); train ranks run the old-policy forward,
the training forward/backward with replay and recompute, and the GRPO update; then every
rank uploads its shards to the engines it feeds and each engine post-processes behind its
sender-group barrier. Metrics compare train against rollout per token.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from miles.replay import ship
from miles.rollout.routes import decode_routes
from miles.startup import Phases
from miles_topology import Topology
from miles_topology.model.replay import replay_plans
from miles_topology.model.topology import value

from . import metrics
from .faults import NAMES, Faults
from .task import advantages, make_batch, reward
from .workers import spawn

DEFAULTS = dict(layers=4, experts=8)


@dataclass(frozen=True)
class TrainBatch:
    """What every train rank gets besides its replay rows (all tiny)."""

    tokens: tuple[tuple[int, ...], ...]
    prompt_lens: tuple[int, ...]
    adv: tuple[float, ...]
    step_tokens: dict[int, int]  # optimizer step -> response tokens (loss normaliser)


def options(extra: list[str] | tuple[str, ...]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="miles.train (reference backend)", add_help=False)
    p.add_argument("--fault", action="append", default=[], choices=NAMES,
                   help="test only: inject a known R3 bug")
    p.add_argument("--no-replay", action="store_true",
                   help="train without routing replay, to see what R3 buys (exits 3)")
    p.add_argument("--sync-skew-s", type=float, default=0.0,
                   help="the last sender of every engine sleeps this long before uploading")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--prompts", type=int, default=None,
                   help="prompts per rollout (default --rollout-batch-size, else 8)")
    args, _ = p.parse_known_args(list(extra))
    return args


def prepare(topo: Topology) -> Topology:
    """The topology with the embedded model's defaults filled in, or a clear refusal."""
    missing = {k: v for k, v in DEFAULTS.items() if value(topo, k) is None}
    if missing:
        topo = topo.model_copy(update=missing)  # validated again; an implied etp stays implied
    problems = []
    if not topo.model.is_moe:
        problems.append("the reference backend trains an MoE model: give --num-experts")
    if topo.placement_group.rollout_engines < 1:
        problems.append("it needs rollout engines: --colocate, or --rollout-num-gpus > 0 "
                        "(not --debug-train-only / --rollout-external)")
    if topo.rollout.rollout_only:
        problems.append("--debug-rollout-only is not supported by the reference backend")
    if topo.batch.allgather_cp or topo.batch.qkv_format != "thd":
        problems.append("its replay plan models packed thd batches with two-chunk CP; drop "
                        "--allgather-cp / --qkv-format bshd")
    if topo.layout.use_critic or topo.layout.critic_nodes:
        problems.append("the reference backend has no critic (GRPO); drop --use-critic")
    if problems:
        raise SystemExit("reference backend: " + "; ".join(problems))
    return topo


def run_job(topo: Topology, cluster, steps: int, metrics_out: str | None = None, seed: int = 0,
            extra=(), phases: Phases | None = None) -> list[dict]:
    """Run `steps` R3 steps of the embedded job; one metrics dict per step (also JSONL).
    `phases`: the launcher's start-up clock (a new one otherwise)."""
    opts = options(extra)
    topo = prepare(topo)
    faults = Faults(frozenset(opts.fault))
    group = topo.batch.n_samples_per_prompt
    prompts = opts.prompts or topo.batch.rollout_batch_size
    if prompts is None:  # the embedded default: 8 prompts, rounded up to fill every DP rank
        prompts = 8
        while (prompts * group) % topo.dp:
            prompts += 1
    elif (prompts * group) % topo.dp:
        raise SystemExit(
            f"reference backend: {prompts} prompts x {group} samples = {prompts * group} "
            f"samples do not split over dp = {topo.dp} ranks; give --rollout-batch-size a "
            f"multiple of {topo.dp // math.gcd(topo.dp, group)}")
    if faults.race and (topo.layout.pp > 1 or topo.layout.etp > 1 or not topo.rollout.colocate):
        raise SystemExit("reference backend: the fault weight-sync-race models the colocated "
                         "pre-fix protocol with pp 1 and etp 1")
    replay = not opts.no_replay
    phase = phases or Phases()
    job = spawn(cluster, topo)
    train, engines = job.train, job.engines
    out: list[dict] = []
    sink = open(metrics_out, "w") if metrics_out else None
    try:
        phase("workers", f"one zygote per node imported torch and megatron.core in "
              f"{job.warm():.1f}s")
        size = topo.rollout.engine_size
        took = job.start(
            [dict(topo=topo, engine=i, seed=seed, strict=faults.engine_guard,
                  block_source=i * size if faults.race else None)
             for i in range(len(engines))],
            [dict(topo=topo, rank=r, seed=seed, master=job.master, faults=faults, lr=opts.lr,
                  replay=replay) for r in range(len(train))])
        phase("roles and groups", "slowest trainer "
              f"{max(t['init_s'] for t in took[len(engines):]):.1f}s; slowest engine "
              f"{max(t['init_s'] for t in took[:len(engines)]):.1f}s")
        job.get([w.call("sync", 0, opts.sync_skew_s) for w in train])
        phase("first sync")
        print(f"reference backend: {topo.world_size} train ranks and {len(engines)} engines "
              f"ready, weights synced, {phase.total():.1f}s after start"
              + ("" if replay else "; routing replay OFF (--no-replay)"), file=sys.stderr)
        with _progress(steps) as tick:
            for step in range(1, steps + 2):
                t0 = time.monotonic()
                final = step == steps + 1  # a rollout after the final sync, scored only
                phase.enter("the final scoring" if final else f"step {step}")
                m = _step(topo, step, seed, prompts, group, job, opts, faults, final)
                m["step_time_s"] = round(time.monotonic() - t0, 3)
                out.append(m)
                tick(m)
                if sink:
                    sink.write(json.dumps(m) + "\n")
                    sink.flush()
    finally:
        if sink:
            sink.close()
        job.close()  # also ends processes a failed job left blocked in a collective
    return out


def _step(topo, step, seed, prompts, group, job, opts, faults, final=False) -> dict:
    train, engines, get = job.train, job.engines, job.get
    batch = make_batch(step, prompts, group, seed)
    n = len(batch.prompts)
    shares = [list(range(e, n, len(engines))) for e in range(len(engines))]
    done = get([
        eng.call("generate", ids, [batch.prompts[i] for i in ids], step)
        for eng, ids in zip(engines, shares) if ids
    ])
    tokens, engine_lp, routes = {}, {}, {}
    for s, toks, lps, payload in (x for part in done for x in part):
        tokens[s], engine_lp[s] = toks, lps
        routes[s] = decode_routes(payload, topo, tokens=len(toks), sample=s)
    toks = tuple(tokens[s] for s in range(n))
    plens = {s: len(batch.prompts[s]) for s in range(n)}
    rewards = [reward(batch.prompts[s], toks[s][plens[s]:]) for s in range(n)]
    adv = advantages(rewards, group)
    lengths = [len(t) for t in toks]
    plans = replay_plans(topo, lengths)
    step_of = {s: mb.step for p in plans for mb in p.micro_batches for s in mb.samples}
    step_tokens: dict[int, int] = {}
    for s in range(n):
        step_tokens[step_of[s]] = step_tokens.get(step_of[s], 0) + len(engine_lp[s])
    tb = TrainBatch(toks, tuple(plens[s] for s in range(n)), tuple(adv), step_tokens)
    shipped, route_plans = routes, plans
    if faults.route_pad_to_dp:  # rows padded for dp, tokens for tp
        route_plans = replay_plans(topo, lengths, pad_to=topo.dp)
    if faults.pad_id is not None:
        shipped = {s: r.astype(np.int16) for s, r in routes.items()}
    packs = [ship(shipped, route_plans[r], pad_id=faults.pad_id) for r in range(topo.world_size)]
    moe_layers = tuple(i for i, m in enumerate(topo.model.moe_pattern) if m)
    m = {"step": step, "final": final}
    if final:
        res = get([w.call("score", tb, p) for w, p in zip(train, packs)])
        diff = metrics.logprob_diff(engine_lp, plens, [x for r in res for x in r["old"]], "old")
        passes = metrics.SCORE_PASSES
    else:
        res = get([w.call("train", tb, p) for w, p in zip(train, packs)])
        get([w.call("sync", step, opts.sync_skew_s) for w in train])
        first = [s for s in range(n) if step_of[s] == min(step_of.values())]
        diff_new = metrics.logprob_diff(
            engine_lp, plens, [x for r in res for x in r["new"]], "train", first)
        diff_old = metrics.logprob_diff(
            engine_lp, plens, [x for r in res for x in r["old"]], "old")
        diff = max(diff_new, diff_old)
        passes = metrics.TRAIN_PASSES
    agree, total = metrics.route_agreement(
        routes, moe_layers, [x for r in res for x in r["routes"]], passes)
    reports = get([e.call("report") for e in engines])
    # post-process requests an engine got while a planned sender had not finished, or not
    # ordered after every planned sender's upload (a race even when the timing was benign)
    early = sum(1 for rep in reports for ev in rep["log"] if ev[0] == "post" and (ev[4] or ev[5]))
    digests = [r["digest"] for r in reports]
    m.update({
        "logprob_max_abs_diff": diff,
        "route_agreement": agree / total if total else 1.0,
        "reward_mean": sum(rewards) / n,
        "loss": sum(r.get("loss", 0.0) for r in res),
        "samples": n,
        "response_tokens": sum(step_tokens.values()),
        "routes_checked": total,
        "early_post_requests": early,
        "unplanned_shards": sum(rep["unplanned"] for rep in reports),
        # every engine serves the same model; equal across topologies for the same seed
        "weights_digest": digests[0],
        "engines_agree": max(digests) - min(digests) <= 1e-9 * digests[0],
        "engine_versions": sorted({r["version"] for r in reports}),
    })
    return m


class _progress:
    """A rich progress bar plus one metrics line per step (plain lines when not a TTY)."""

    def __init__(self, steps: int):
        self.steps = steps

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console()  # metrics lines on stdout; the bar only on a terminal
        self.bar = Progress(TextColumn("R3 steps"), BarColumn(), TextColumn("{task.completed}/"
                            "{task.total}"), TimeElapsedColumn(), console=self.console,
                            transient=True)
        self.bar.__enter__()
        self.task = self.bar.add_task("steps", total=self.steps)
        return self.tick

    def tick(self, m: dict) -> None:
        bad = metrics.failures(m)
        what = "after final sync" if m["final"] else f"step {m['step']}"
        extra = "" if m["final"] else f" loss={m['loss']:+.4f}"
        self.bar.console.print(
            f"{what}: logprob_max_abs_diff={m['logprob_max_abs_diff']:.3e} "
            f"route_agreement={m['route_agreement']:.6f} reward_mean={m['reward_mean']:.3f}"
            f"{extra} time={m['step_time_s']:.2f}s "
            + ("OK" if not bad else "MISMATCH (" + ", ".join(bad) + ")"),
            highlight=False, soft_wrap=True,
        )
        self.bar.advance(self.task)

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)
        return False
