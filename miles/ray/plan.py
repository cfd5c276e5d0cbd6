"""What the job needs from a Ray cluster, as pure data (no ray import).

Slots are the (node, GPU) positions of miles' one packed placement group, in the order miles
sorts its bundles (node IP, then GPU id): the actor's ranks first, then the rollout and eval
engines. One bundle per slot; every actor on a slot shares its bundle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from miles_topology import Problem, Topology
from miles_topology.model.parts import flag_of

Slot = tuple[int, int]
# what sizes the placement group: the flags a gpu-budget-exceeded problem names
_BUDGET = tuple(flag_of(f) for f in ("nodes", "gpus_per_node", "rollout_gpus", "node_gpus"))
_SHRINK = (f"fewer {flag_of('nodes')} or {flag_of('rollout_gpus')}, or {flag_of('colocate')}")


def slots(topo: Topology) -> list[Slot]:
    """Every (node, GPU) of miles' one packed placement group, in its sorted order
    (miles/ray/placement_group.py; see miles_topology/placement.py `Placement`)."""
    return topo.placement_group.slots()


def need_per_node(topo: Topology) -> list[int]:
    """GPUs each Topology node must have (index = Topology node id)."""
    need = [0] * topo.placement_group.nodes
    for n, g in slots(topo):
        need[n] = max(need[n], g + 1)
    return need


def gpu_key(gpu_id: object) -> tuple:
    """Numeric order for GPU ids ("10" after "9", not after "1")."""
    s = str(gpu_id)
    return (0, int(s), s) if s.isdigit() else (1, 0, s)


def budget_problems(topo: Topology, have: Sequence[int]) -> list[Problem]:
    """`gpu-budget-exceeded` when the cluster's nodes (GPUs each, in node order) cannot host it."""
    lay, pg = topo.layout, topo.placement_group
    if pg.nodes > max(len(have), 1 << 12):  # decided without listing every node
        return [
            Problem(
                "gpu-budget-exceeded",
                f"this job needs {pg.nodes} node(s) of {lay.node_gpus_used} GPUs "
                f"({pg.budget}) but the Ray cluster has {len(have)} node(s) with GPUs "
                f"{list(have)}.",
                f"give the cluster {pg.nodes} nodes of "
                f"{lay.node_gpus_used} GPUs (or point "
                f"RAY_ADDRESS at one), or shrink the job: {_SHRINK}",
                _BUDGET,
            )
        ]
    need = need_per_node(topo)
    short = [n for n, k in enumerate(need) if n >= len(have) or have[n] < k]
    if not short:
        return []
    want, got = sum(need), sum(have)
    n = short[0]
    where = f"node {n} is missing" if n >= len(have) else f"node {n} has {have[n]} GPUs"
    where += f" (needs {need[n]})"
    return [Problem(
        "gpu-budget-exceeded",
        f"this job needs {len(need)} node(s) with GPUs {need} = {want} GPUs ({pg.budget}) "
        f"but the Ray cluster has {len(have)} node(s) with GPUs {list(have)} = {got}: {where}.",
        f"give the cluster {len(need)} nodes of {max(need)} GPUs (or point RAY_ADDRESS at one), "
        f"or shrink the job: {_SHRINK}",
        _BUDGET,
    )]


def bind(needed: Iterable[Slot], probed: Mapping[int, tuple[int, object]]) -> dict[Slot, int]:
    """Slot -> bundle: on each node the k-th needed GPU takes the bundle with the k-th id.

    `probed` maps bundle -> (node, the GPU id Ray reserved for it). Ids sort numerically.
    """
    by_node: dict[int, list[int]] = {}
    for b, (n, _) in probed.items():
        by_node.setdefault(n, []).append(b)
    out: dict[Slot, int] = {}
    for n in sorted({n for n, _ in needed}):
        gpus = sorted(g for m, g in needed if m == n)
        bundles = sorted(by_node.get(n, []), key=lambda b: gpu_key(probed[b][1]))
        if len(bundles) != len(gpus):
            raise RuntimeError(f"node {n}: {len(gpus)} GPUs needed, {len(bundles)} bundles there")
        out.update({(n, g): b for g, b in zip(gpus, bundles)})
    return out
