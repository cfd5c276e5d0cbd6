"""The whole job plan as text, for `python -m miles.train --dry-run`: nothing is started.

Everything shown is read from the Topology (and its weight-sync plan), so the plan is
exactly what the Ray placement and the Megatron groups will do.
"""

from __future__ import annotations

from miles_topology import Topology
from miles_topology.model.weightsync import sync_plan
from miles_topology.reporting.show import header, text_map
from miles_topology.reporting.show import too_big as show_too_big

from .ray.plan import need_per_node, slots


def spans(ids: list[int] | tuple[int, ...]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out: list[tuple[int, int]] = []
    for i in sorted(ids):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def stages(topo: Topology) -> list[str]:
    if topo.stages.counts is None:
        return ["pipeline stages: layers unknown (no --num-layers)"]
    out = [f"pipeline stages ({topo.model.layers} layers, vpp {topo.stages.chunks}):"]
    for p in range(topo.layout.pp):
        ids = topo.stages.pipeline(p)
        moe = [i for i in ids if topo.model.moe_pattern and topo.model.moe_pattern[i]]
        out.append(f"  pp{p}: layers {spans(ids)}" + (f"; MoE {spans(moe)}" if moe else ""))
    return out


def engines(topo: Topology) -> list[str]:
    ro = topo.rollout
    if not topo.placement_group.rollout_engines:
        return ["rollout engines: none"]
    where = "on the train GPUs (colocated)" if ro.colocate else "on their own GPUs"
    out = [
        f"rollout engines: {topo.placement_group.rollout_engines} x {ro.engine_size} GPUs {where}"
    ]
    for e in range(topo.placement_group.rollout_engines):
        gpus = topo.engine_gpus(e)
        by_node = {n: [g for m, g in gpus if m == n] for n in dict.fromkeys(m for m, _ in gpus)}
        out.append(f"  engine {e}: " + "; ".join(
            f"node {n} GPU {spans(g)}" for n, g in by_node.items()))
    return out


def weight_sync(topo: Topology) -> list[str]:
    if not topo.placement_group.rollout_engines:
        return []
    out = ["weight sync (engine <- train ranks; an engine post-processes only after all of "
           "its senders finish):"]
    for sync in sync_plan(topo):
        parts = []
        for r in sync.senders:
            what = [
                f"dense pp{s.pp} tp{s.part}" if s.kind == "dense"
                else f"experts {spans(s.experts)} pp{s.pp}" + (f" etp{s.part}" * (s.parts > 1))
                for s in sync.of(r)
            ]
            parts.append(f"r{r} ({', '.join(what)})")
        out.append(f"  engine {sync.engine} <- ranks {spans(sync.senders)}: " + "; ".join(parts))
    return out


# The plan lists every GPU, engine and layer; past these sizes it prints the sizes only, so a
# dry run of any size answers at once (the per-GPU listing is linear in GPUs below them).
MAX_LAYERS = 1 << 17


def too_big(topo: Topology) -> str | None:
    """Why the per-GPU plan is not printed, or None."""
    mod = topo.model
    if show_too_big(topo):
        return show_too_big(topo)
    if mod.layers is not None and mod.layers > MAX_LAYERS:
        return f"{mod.layers} layers is more than the {MAX_LAYERS} a dry run lists one by one"
    return None


def plan_text(topo: Topology, added: list[str] | None = None) -> str:
    big = too_big(topo)
    if big is not None:
        lines = ["miles job plan (dry run: nothing started)", "", header(topo), "",
                 f"per-GPU plan not listed: {big}; the sizes above are validated "
                 "(`miles-topology check` gives the same verdict).",
                 f"ray: {topo.placement_group.nodes} node(s) of {topo.layout.node_gpus_used} GPUs, "
                 f"{topo.placement_group.bundles} placement bundles"]
    else:
        need = need_per_node(topo)
        lines = ["miles job plan (dry run: nothing started)", "", text_map(topo), ""]
        lines += stages(topo) + [""] + engines(topo) + [""] + weight_sync(topo)
        lines += [
            "",
            f"ray: {len(need)} node(s) with GPUs {need}, {len(slots(topo))} placement bundles "
            "(one per node x GPU); a local cluster unless RAY_ADDRESS is set",
        ]
    if added:
        lines.append("embedded defaults used: " + " ".join(added))
    if topo.warnings:
        lines += [""] + [line for w in topo.warnings for line in w.lines()]
    return "\n".join(lines)
