"""The train grid: Megatron's dense and expert grids divide the world, their pipeline
groups agree, TP groups stay in a node, and an implied expert TP is said.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from ..errors import Problem
from ..topology import Topology
from .base import F, _divisors, _found, _nearest, _or, _with_nodes, builds_megatron


@rule(
    source=("Megatron-LM training/arguments.py validate_args; megatron/core/parallel_state.py "
            "initialize_model_parallel"),
    codes={
        "dense-grid-divisibility": ("error", "world size not divisible by tp*cp*pp",
            "--context-parallel-size 64"),
    },
)
def dense_grid_divides(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args asserts world % (tp*pp*cp) == 0;
    megatron/core/parallel_state.py initialize_model_parallel raises RuntimeError too."""
    lay = topo.layout
    if not builds_megatron(topo):
        return
    world, m = topo.world_size, lay.dense_model_size
    if world % m == 0:
        return
    fixes = []
    tps = [t for t in _divisors(world) if world % (t * lay.cp * lay.pp) == 0]
    if tps:
        fixes.append(f"{F.tp} {_or(_nearest(tps, lay.tp))}")
    pps = [p for p in _divisors(world) if world % (lay.tp * lay.cp * p) == 0]
    if pps and lay.pp > 1:
        fixes.append(f"{F.pp} {_or(_nearest(pps, lay.pp))}")
    yield _found(
        "dense-grid-divisibility",
        f"world size {lay.nodes} node(s) x {lay.gpus_per_node} GPUs = {world} is not divisible "
        f"by tp*cp*pp = {lay.tp}*{lay.cp}*{lay.pp} = {m} ({world}/{m} = {world / m:.2f}); "
        "Megatron needs world % (tp*cp*pp) == 0.",
        _with_nodes("try " + ", or ".join(fixes), topo),
        "tp", "cp", "pp", "nodes", "gpus_per_node",
    )


@rule(
    source="megatron/core/parallel_state.py initialize_model_parallel",
    codes={
        "expert-grid-divisibility": ("error", "world size not divisible by etp*ep*pp",
            "--actor-num-gpus-per-node 1 --expert-tensor-parallel-size 8"),
    },
)
def expert_grid_divides(topo: Topology) -> Iterator[Problem]:
    """megatron/core/parallel_state.py initialize_model_parallel: RuntimeError unless world %
    (etp*ep*pp) == 0 (expert_tensor_model_pipeline_parallel size)."""
    lay, mod = topo.layout, topo.model
    if not builds_megatron(topo):
        return
    world, m = topo.world_size, lay.expert_model_size
    if world % m == 0:
        return
    eps = [
        e
        for e in _divisors(world)
        if world % (lay.etp * e * lay.pp) == 0 and (mod.experts is None or mod.experts % e == 0)
    ]
    fixes = [f"{F.ep} {_or(_nearest(eps, lay.ep))}"] if eps else []
    if lay.etp > 1:
        etps = [t for t in _divisors(world) if world % (t * lay.ep * lay.pp) == 0]
        if etps:
            fixes.append(f"{F.etp} {_or(_nearest(etps, lay.etp))}")
    fix = "try " + ", or ".join(fixes) if fixes else "change the sizes"
    yield _found(
        "expert-grid-divisibility",
        f"world size {lay.nodes} node(s) x {lay.gpus_per_node} GPUs = {world} is not divisible "
        f"by etp*ep*pp = {lay.etp}*{lay.ep}*{lay.pp} = {m} ({world}/{m} = {world / m:.2f}); "
        "Megatron needs world % (etp*ep*pp) == 0 for the expert grid.",
        _with_nodes(fix, topo),
        "ep", "etp", "pp", "nodes", "gpus_per_node",
    )


@rule(
    source="megatron/core/parallel_state.py initialize_model_parallel",
    codes={
        "order-requires-equal-dp": (
            "error", f"`{F.order}` with pp > 1 and dense dp != expert dp "
            "(megatron-core refuses it)",
            "--pipeline-model-parallel-size 2 --expert-model-parallel-size 2 "
            "--use-tp-pp-dp-mapping"),
    },
)
def pipeline_groups_agree(topo: Topology) -> Iterator[Problem]:
    """Megatron builds one set of pipeline groups for both grids; with pp not last in the
    order that holds only when the dense and expert data-parallel sizes are equal
    (megatron/core/parallel_state.py initialize_model_parallel asserts it)."""
    lay = topo.layout
    if not builds_megatron(topo) or lay.order.endswith("pp") or lay.pp == 1 \
            or not lay.forms_grid or topo.dp == topo.edp:
        return
    yield _found(
        "order-requires-equal-dp",
        f"order {lay.order} ({F.order}) with pp = {lay.pp} needs the same "
        f"data-parallel size on both grids, but dense dp = {topo.world_size}/(tp*cp*pp) = "
        f"{topo.dp} and expert dp = {topo.world_size}/(etp*ep*pp) = {topo.edp} "
        f"(tp*cp = {lay.tp * lay.cp}, etp*ep = {lay.etp * lay.ep}).",
        f"drop {F.order}, or make etp*ep equal tp*cp (e.g. "
        f"{F.etp} {max(1, lay.tp * lay.cp // lay.ep)} with "
        f"{F.ep} {min(lay.ep, lay.tp * lay.cp)})",
        "order", "ep", "etp", "tp", "cp", "pp",
    )
