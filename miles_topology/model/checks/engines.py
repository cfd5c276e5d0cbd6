"""Rollout and engines: whole engines that SGLang can run where miles places them, engine
DP/EP, what miles or SGLang overwrite, and the placement group against the cluster (weight
transfer, eval engines and --sglang-config groups are fleet.py's).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from .. import placement as _placement
from ..errors import Problem
from ..topology import Topology
from .base import F, _divisors, _found, _fw, _nearest, _or


@rule(
    source="miles ray/rollout.py init_rollout_engines; sglang_engine.py (base_gpu_id)",
    codes={
        "rollout-gpus-not-multiple-of-engine": ("error", "rollout GPUs % GPUs per engine != 0",
            "--rollout-num-gpus-per-engine 6 --rollout-num-gpus 64"),
        "engine-straddles-nodes": (
            "error", "an engine would span a node boundary in a way the engine cannot run (TP "
            "not tiling the nodes it spans); engines may start mid-node where miles' packed "
            "placement puts them",
                "--actor-num-gpus-per-node 1 --eval-num-gpus-per-engine 2 --eval-num-gpus 16"),
    },
)
def whole_engines(topo: Topology) -> Iterator[Problem]:
    """Whole engines: miles' engine launch slices the rollout bundles into runs of
    --rollout-num-gpus-per-engine (ray/rollout.py; forks raise 'num_rollout_workers must be
    divisible by num_gpus_per_engine'). Straddling: SGLang runs GPUs base_gpu_id ..
    base_gpu_id + tp - 1 of one node (sglang_engine.py passes base_gpu_id), and cross-node
    engines must tile whole nodes."""
    lay, ro = topo.layout, topo.rollout
    gpus, size = topo.placement_group.rollout_gpus, ro.engine_size
    if ro.engine_groups is None and gpus % size:
        multiples = [size * k for k in (gpus // size, gpus // size + 1) if k > 0]
        yield _found(
            "rollout-gpus-not-multiple-of-engine",
            f"{gpus} rollout GPUs do not make whole engines of {size} GPUs "
            f"({gpus}/{size} = {gpus / size:.2f}).",
            f"try {F.rollout_gpus} {_or(multiples)}, or {F.engine_size} "
            f"{_or(_nearest([d for d in _divisors(gpus)], size))}",
            "rollout_gpus", "engine_size",
        )
        return
    node = lay.node_gpus_used
    for group in topo.placement_group.groups:
        if group.gpus % group.engine_size and group.kind != "placeholder" \
                and ro.engine_groups is not None and group.model != "eval":
            yield _found(
                "rollout-gpus-not-multiple-of-engine",
                f"{F.sglang_config} group {group.model}/{group.kind} has {group.gpus} GPUs, not "
                f"whole engines of {group.engine_size} ({group.gpus}/{group.engine_size} = "
                f"{group.gpus / group.engine_size:.2f}).",
                "give the group a multiple of its num_gpus_per_engine GPUs",
                "sglang_config",
            )
            continue
        if group.gpus % group.engine_size:
            continue  # reported by its own rule
        bad = _placement.straddler(group, node)
        if bad is None:
            continue
        at = topo.engine_gpus(bad)[0] if bad < topo.placement_group.engines else (0, 0)
        s, offset = group.engine_size, topo.placement_group.rollout_offset
        ok = [d for d in _divisors(node) if d <= node] + [node * k for k in (2, 4)]
        yield _found(
            # the packed placement group (placement.py) lets engines start mid-node; SGLang
            # takes base_gpu_id .. base_gpu_id + tp - 1 on one node, so an engine that runs
            # past the node's last GPU (or a multi-node engine not tiling whole nodes) fails
            "engine-straddles-nodes",
            f"rollout engine {bad} of {s} GPUs starts at node {at[0]} GPU {at[1]} "
            f"(engines follow the actor's {offset} GPUs in {_fw(topo)}'s packed placement "
            f"group) and would run past the end of its node, on nodes of {node} GPUs: an "
            "engine must fit inside one node from its first GPU, or span whole nodes from GPU 0 "
            f"({node} % {s} = {node % s}).",
            f"try {F.engine_size} {_or(_nearest(ok, s))}, or an actor GPU count "
            f"that is a multiple of {s} (engines start after the actor's {offset} "
            "GPUs)",
            "engine_size",
            "node_gpus",
            "nodes",
        )
        return


def _engine_tp(topo: Topology) -> str:
    """The engine TP as a message names it: the engine's GPUs, or on slime with
    --sglang-pp-size its TP and how it follows from them (`Rollout.sglang_tp_used`)."""
    ro = topo.rollout
    tp = ro.sglang_tp_used(_fw(topo))
    if tp == ro.engine_size:
        return f"the engine's {tp} GPUs (engine TP)"
    return f"the engine's TP {tp} ({F.engine_size} {ro.engine_size} // {F.engine_pp} " \
        f"{ro.engine_pp})"


@rule(
    source=("sglang python/sglang/srt/server_args.py ServerArgs._handle_data_parallelism; miles "
            "and slime backends/sglang_utils/arguments.py validate_args"),
    codes={
        "sglang-dp-invalid": (
            "error", "engine DP does not divide engine TP, or DP > 1 without DP attention",
                "--sglang-data-parallel-size 6"),
        "sglang-pp-invalid": (
            "error", f"slime: `{F.engine_pp}` > 1 does not divide `{F.engine_size}` (slime "
            "asserts it; miles passes the size to SGLang as given)",
                "framework: slime, engine_size: 3, engine_pp: 2 in a topology YAML"),
    },
)
def sglang_dp(topo: Topology) -> Iterator[Problem]:
    """Engine DP and, on slime, engine PP: slime 624b824 backends/sglang_utils/arguments.py
    validate_args:174 `assert args.rollout_num_gpus_per_engine % args.sglang_pp_size == 0`
    when --sglang-pp-size > 1, then engine TP = GPUs per engine // PP (miles 31f1ca9 has no
    such assert and runs TP = GPUs per engine)."""
    ro = topo.rollout
    size, dp = ro.sglang_tp_used(_fw(topo)), ro.engine_dp
    if _fw(topo) == "slime" and ro.engine_pp > 1 and ro.engine_size % ro.engine_pp:
        yield _found(
            "sglang-pp-invalid",
            f"{F.engine_pp} {ro.engine_pp} does not divide {F.engine_size} "
            f"{ro.engine_size} ({ro.engine_size} % {ro.engine_pp} = "
            f"{ro.engine_size % ro.engine_pp}): slime asserts it at start-up (each engine "
            "runs TP = its GPUs // PP).",
            f"try {F.engine_pp} {_or(_nearest(_divisors(ro.engine_size), ro.engine_pp))}",
            "engine_pp", "engine_size",
        )
        return
    if size % dp:
        # SGLang python/sglang/srt/server_args.py ServerArgs._handle_data_parallelism: with DP
        # attention `assert self.tp_size % self.dp_size == 0` (engine TP = the engine's GPUs:
        # miles sglang_utils validate_args sets sglang_tp_size = rollout_num_gpus_per_engine;
        # slime divides it by --sglang-pp-size, Rollout.sglang_tp_used); without DP attention
        # the framework's assert below fires first
        yield _found(
            "sglang-dp-invalid",
            f"engine DP {dp} does not divide {_engine_tp(topo)}; in SGLang DP subdivides the "
            "engine, it does not multiply it.",
            f"try {F.engine_dp} {_or(_nearest(_divisors(size), dp))}",
            "engine_dp", "engine_size",
        )
    if dp > 1 and not topo.rollout.dp_attention:
        # miles backends/sglang_utils/arguments.py validate_args (slime 624b824 the same,
        # backends/sglang_utils/arguments.py:183):
        # `if args.sglang_dp_size > 1: assert args.sglang_enable_dp_attention`
        yield _found(
            "sglang-dp-invalid",
            f"engine DP {dp} > 1 needs DP attention: {_fw(topo)} asserts "
            f"{F.dp_attention} whenever {F.engine_dp} "
            "(--sglang-data-parallel-size) is above 1, at start-up.",
            f"add {F.dp_attention}, or set {F.engine_dp} 1",
            "engine_dp", "dp_attention",
        )


@rule(
    source="sglang FusedMoE.__init__; distributed/parallel_state.py initialize_model_parallel",
    codes={
        "sglang-ep-invalid": ("error", "engine EP does not divide engine TP or the expert count",
            "--sglang-ep-size 8"),
    },
)
def sglang_ep(topo: Topology) -> Iterator[Problem]:
    """SGLang FusedMoE.__init__ asserts num_experts % moe_ep_size == 0; distributed/
    parallel_state.py initialize_model_parallel splits the TP group into tp // ep MoE-TP
    groups (no explicit assert for tp % ep; uneven groups cannot be built)."""
    ro, mod = topo.rollout, topo.model
    size, ep = ro.sglang_tp_used(_fw(topo)), ro.engine_ep_used(_fw(topo))
    ok = [d for d in _divisors(size) if mod.experts is None or mod.experts % d == 0]
    if size % ep or (mod.experts is not None and mod.experts % ep):
        yield _found(
            "sglang-ep-invalid",
            f"engine EP {ep} must divide {_engine_tp(topo)}"
            + (f" and the {mod.experts} experts" if mod.experts is not None else "")
            + f" ({size} % {ep} = {size % ep}"
            + (f", {mod.experts} % {ep} = {mod.experts % ep}" if mod.experts else "")
            + ")" + (" (the a2a backend sets engine EP = engine TP)" if ro.a2a_forces_ep
                     else "") + ".",
            f"try {F.engine_ep} {_or(_nearest(ok, ep))}" if not ro.a2a_forces_ep else
            f"choose {F.engine_size} dividing the expert count",
            "engine_ep", "engine_size", "experts",
        )


@rule(
    source=("miles backends/sglang_utils/arguments.py validate_args; sglang server_args.py "
            "ServerArgs._handle_a2a_moe"),
    codes={
        "sglang-tp-overridden": (
            "warning", f"`{F.sglang_tp}` differs from `{F.engine_size}`, which "
            "miles writes over it",
                "--sglang-tensor-parallel-size 8"),
        "sglang-ep-overridden": (
            "warning", f"`{F.a2a_backend} deepep` (or mooncake, ascend_fuseep, "
            "flashinfer, mori) makes SGLang set engine EP = engine TP, ignoring the "
            f"`{F.engine_ep}` given",
                "--sglang-ep 64 --sglang-moe-a2a-backend deepep"),
    },
)
def sglang_overridden(topo: Topology) -> Iterator[Problem]:
    """Engine sizes miles, slime or SGLang overwrite silently: warnings, with what is really
    used."""
    ro = topo.rollout
    tp = ro.sglang_tp_used(_fw(topo))
    if ro.sglang_tp is not None and ro.sglang_tp != tp:
        # miles backends/sglang_utils/arguments.py validate_args:
        # `args.sglang_tp_size = args.rollout_num_gpus_per_engine`; slime 624b824 (same
        # file:180) `args.rollout_num_gpus_per_engine // args.sglang_pp_size` when PP > 1
        pp = f" // {F.engine_pp} {ro.engine_pp}" if tp != ro.engine_size else ""
        yield _found(
            "sglang-tp-overridden",
            f"{F.sglang_tp} {ro.sglang_tp} is overwritten by {_fw(topo)} with "
            f"{F.engine_size} {ro.engine_size}{pp}: each engine runs TP {tp}.",
            f"drop {F.sglang_tp} and set {F.engine_size} {ro.sglang_tp * (ro.engine_size // tp)} "
            "if that is the engine TP you meant",
            "sglang_tp", "engine_size",
        )
    if ro.a2a_forces_ep and ro.engine_ep not in (1, tp):
        # SGLang python/sglang/srt/server_args.py ServerArgs._handle_a2a_moe (post-init, with a
        # logger.warning): `self.ep_size = self.tp_size` for the backends of `a2a_forces_ep`
        # (the TP the engine runs: GPUs // --sglang-pp-size on slime)
        yield _found(
            "sglang-ep-overridden",
            f"{F.a2a_backend} {ro.a2a_backend} makes SGLang set engine EP = engine "
            f"TP = {tp}, so {F.engine_ep} {ro.engine_ep} is ignored.",
            f"drop {F.engine_ep}, or set it to {tp}",
            "engine_ep", "a2a_backend", "engine_size",
        )


@rule(
    source="miles ray/placement_group.py create_placement_groups, _get_placement_group_layout",
    codes={
        "actor-node-shape-ignored": (
            "warning", f"`{F.gpus_per_node}` differs from `{F.node_gpus}`: the "
            "packed placement group fills whole nodes in order regardless",
                "--num-gpus-per-node 3"),
        "gpu-budget-exceeded": (
            "error", "miles' one packed placement group (actor + rollout + eval GPUs; the critic "
            "shares the actor's) needs more nodes than the cluster given has",
                "cluster_nodes: 1 and nodes: 2 in a topology YAML"),
        "num-gpus-per-node-default": (
            "warning", "the actor spans nodes of fewer than 8 GPUs, an engine is larger than the "
            f"actor's GPUs per node, and `{F.node_gpus}` is not given: miles sizes that "
            "engine's processes for nodes of 8",
            "--actor-num-gpus-per-node 1 --actor-num-nodes 2 --rollout-num-gpus 48 "
            "--rollout-num-gpus-per-engine 3"),
    },
)
def fits_cluster(topo: Topology) -> Iterator[Problem]:
    """miles ray/placement_group.py create_placement_groups: one PACK group of 1-GPU bundles
    (_get_placement_group_layout); its size must fit the cluster or Ray waits forever."""
    lay, ro = topo.layout, topo.rollout
    node = lay.node_gpus_used
    if lay.node_gpus_given and lay.gpus_per_node != node and (
            lay.nodes > 1 or lay.gpus_per_node > node):
        # miles ray/actor_group.py: rank i takes bundle i of the sorted packed group; the
        # per-node count is only multiplied into the world size
        n = -(-lay.actor_gpus // node)
        yield _found(
            "actor-node-shape-ignored",
            f"the actor asks for {lay.nodes} node(s) x {lay.gpus_per_node} GPUs, but {_fw(topo)} "
            f"packs its {lay.actor_gpus} ranks into one placement group: they fill {n} "
            f"node(s) of {node} GPUs ({F.node_gpus}) in order, not "
            f"{lay.gpus_per_node} per node.",
            f"use {F.gpus_per_node} {node} with {F.nodes} {n} to say what "
            f"happens, or {F.node_gpus} {lay.gpus_per_node} if the nodes have that many",
            "gpus_per_node", "node_gpus",
        )
    if not lay.node_gpus_given and lay.nodes > 1 and lay.gpus_per_node < lay.node_gpus:
        # miles ray/specs/inference.py _compute_spec_inference_engine sizes each engine with
        # --num-gpus-per-node (default 8): max(1, size // npn) processes ("workers") per engine,
        # each holding min(size, npn) consecutive GPU slots from its first slot's node
        # (utils/workers/ray_worker_manager.py gpu_ids), and it asserts size <= npn or size %
        # npn == 0; sglang_config.py counts engine offsets with min(size, npn) too. An engine
        # that fits the actor's GPUs per node (a lower bound of the real node) is launched the
        # same whatever npn is, so only a larger engine is placed differently: a process of
        # more GPUs than the node has, or a refused size. A warning: the real node size is not
        # known here (engines get their node's own IP since the worker manager replaced the
        # rank-based address allocation, so colocation alone no longer matters).
        big = [g for g in topo.placement_group.groups
               if g.engines and g.engine_size > lay.gpus_per_node]
        if big:
            g = max(big, key=lambda g: g.engine_size)
            size, npn, node = g.engine_size, lay.node_gpus, lay.gpus_per_node
            what = ("eval engines" if g.model == "eval" else
                    "rollout engines" if g.model == "default" else
                    f"{F.sglang_config} {g.model}/{g.kind} engines")
            fw = _fw(topo)
            if size <= npn:
                happens = (f"{fw} starts each as one process on {size} GPUs of a single node "
                           f"(min({size}, {npn})), which a node of {node} GPUs does not have")
            elif size % npn and fw == "slime":
                # slime 624b824 ray/rollout.py:896 checks nothing: `_gpus_per_engine //
                # args.num_gpus_per_node` nodes per engine, min(size, npn) GPUs on each (:107)
                happens = (f"slime spans each over {size // npn} node(s) of {npn} GPUs "
                           f"({size} // {npn}), not the {size} GPUs asked")
            elif size % npn:
                happens = (f"miles refuses the size at start-up ({size} is neither <= {npn} "
                           f"nor a multiple of it)")
            else:
                happens = (f"{fw} starts each as {size // npn} processes of {npn} GPUs, more "
                           f"than a node of {node} GPUs has")
            yield _found(
                "num-gpus-per-node-default",
                f"the actor uses {lay.nodes} nodes x {node} GPUs but {F.node_gpus} is "
                f"not given, so {fw} sizes engines for nodes of {npn}: the {what} of {size} "
                f"GPUs are larger than a node of {node}, and {happens}. This check assumes "
                f"nodes of {node} GPUs.",
                f"add {F.node_gpus} {node}",
                "node_gpus", "gpus_per_node",
                "eval_engine_size" if g.model == "eval" else
                "engine_size" if ro.engine_groups is None else "sglang_config",
            )
    if lay.cluster_nodes is not None and topo.placement_group.nodes > lay.cluster_nodes:
        yield _found(
            "gpu-budget-exceeded",
            f"this job needs {topo.placement_group.nodes} nodes of {node} GPUs "
            f"({topo.placement_group.budget}, one packed placement group) but the cluster has "
            f"{lay.cluster_nodes}.",
            f"add nodes to the cluster (it needs {topo.placement_group.nodes}), or shrink the job: "
            f"fewer {F.nodes} or {F.rollout_gpus}, or {F.colocate}",
            "nodes", "rollout_gpus", "cluster_nodes",
        )
