"""The rules a topology must satisfy: small named checks, each returning its problems.

Every check reads derived sizes from the Topology (never recomputes them), states the
arithmetic, the rule, and a fix with concrete values that pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .errors import Problem
from .flags import flag_of

if TYPE_CHECKING:
    from .model import Topology

Check = Callable[["Topology"], Iterator[Problem]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def run_checks(topo: Topology) -> list[Problem]:
    return [p for fn in CHECKS for p in fn(topo)]


def _err(code: str, message: str, fix: str, *fields: str) -> Problem:
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields))


def _warn(code: str, message: str, fix: str, *fields: str) -> Problem:
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields), "warning")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest(candidates: list[int], target: int, k: int = 2) -> list[int]:
    """The k valid values closest to what the user gave, closest first."""
    return sorted(set(candidates), key=lambda c: (abs(c - target), -c))[:k]


def _or(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


def _node_fix(topo: Topology) -> str:
    """A node count (same GPUs per node) at which both grids divide the world."""
    for nodes in list(range(topo.nodes + 1, topo.nodes * 64 + 2)) + list(range(1, topo.nodes)):
        world = nodes * topo.gpus_per_node
        if world % topo.dense_model_size == 0 and world % topo.expert_model_size == 0:
            return f"{nodes} node{'s' if nodes > 1 else ''} of {topo.gpus_per_node} GPUs"
    return ""


def _with_nodes(fix: str, topo: Topology) -> str:
    nodes = _node_fix(topo)
    return f"{fix}, or {nodes} (--actor-num-nodes)" if nodes else fix


@check
def dense_grid(topo: Topology) -> Iterator[Problem]:
    world, m = topo.world_size, topo.dense_model_size
    if world % m == 0:
        return
    fixes = []
    tps = [t for t in _divisors(world) if world % (t * topo.cp * topo.pp) == 0]
    if tps:
        fixes.append(f"--tensor-model-parallel-size {_or(_nearest(tps, topo.tp))}")
    pps = [p for p in _divisors(world) if world % (topo.tp * topo.cp * p) == 0]
    if pps and topo.pp > 1:
        fixes.append(f"--pipeline-model-parallel-size {_or(_nearest(pps, topo.pp))}")
    yield _err(
        "dense-grid-divisibility",
        f"world size {topo.nodes} node(s) x {topo.gpus_per_node} GPUs = {world} is not divisible "
        f"by tp*cp*pp = {topo.tp}*{topo.cp}*{topo.pp} = {m} ({world}/{m} = {world / m:.2f}); "
        "Megatron needs world % (tp*cp*pp) == 0.",
        _with_nodes("try " + ", or ".join(fixes), topo),
        "tp", "cp", "pp", "nodes", "gpus_per_node",
    )


@check
def expert_grid(topo: Topology) -> Iterator[Problem]:
    world, m = topo.world_size, topo.expert_model_size
    if world % m == 0:
        return
    eps = [
        e
        for e in _divisors(world)
        if world % (topo.etp * e * topo.pp) == 0 and (topo.experts is None or topo.experts % e == 0)
    ]
    fix = f"try --expert-model-parallel-size {_or(_nearest(eps, topo.ep))}" if eps else "try"
    if topo.etp > 1:
        etps = [t for t in _divisors(world) if world % (t * topo.ep * topo.pp) == 0]
        if etps:
            fix += f", or --expert-tensor-parallel-size {_or(_nearest(etps, topo.etp))}"
    yield _err(
        "expert-grid-divisibility",
        f"world size {topo.nodes} node(s) x {topo.gpus_per_node} GPUs = {world} is not divisible "
        f"by etp*ep*pp = {topo.etp}*{topo.ep}*{topo.pp} = {m} ({world}/{m} = {world / m:.2f}); "
        "Megatron needs world % (etp*ep*pp) == 0 for the expert grid.",
        _with_nodes(fix, topo),
        "ep", "etp", "pp", "nodes", "gpus_per_node",
    )


@check
def pipeline_groups_agree(topo: Topology) -> Iterator[Problem]:
    """Megatron builds one set of pipeline groups for both grids; with pp not last in the
    order that holds only when the dense and expert data-parallel sizes are equal."""
    if topo.order.endswith("pp") or topo.pp == 1 or not topo.forms_grid or topo.dp == topo.edp:
        return
    yield _err(
        "order-requires-equal-dp",
        f"order {topo.order} (--use-tp-pp-dp-mapping) with pp = {topo.pp} needs the same "
        f"data-parallel size on both grids, but dense dp = {topo.world_size}/(tp*cp*pp) = "
        f"{topo.dp} and expert dp = {topo.world_size}/(etp*ep*pp) = {topo.edp} "
        f"(tp*cp = {topo.tp * topo.cp}, etp*ep = {topo.etp * topo.ep}).",
        "drop --use-tp-pp-dp-mapping, or make etp*ep equal tp*cp (e.g. "
        f"--expert-tensor-parallel-size {max(1, topo.tp * topo.cp // topo.ep)} with "
        f"--expert-model-parallel-size {min(topo.ep, topo.tp * topo.cp)})",
        "order", "ep", "etp", "tp", "cp", "pp",
    )


@check
def experts_by_ep(topo: Topology) -> Iterator[Problem]:
    if topo.experts is None or topo.experts % topo.ep == 0:
        return
    eps = [e for e in _divisors(topo.experts) if topo.world_size % (topo.etp * e * topo.pp) == 0]
    yield _err(
        "experts-not-divisible-by-ep",
        f"{topo.experts} experts cannot be split evenly over ep = {topo.ep} expert-parallel "
        f"ranks ({topo.experts}/{topo.ep} = {topo.experts / topo.ep:.2f}); each EP rank must own "
        "the same number of experts.",
        f"try --expert-model-parallel-size {_or(_nearest(eps, topo.ep))}"
        if eps
        else f"use a number of experts divisible by {topo.ep}",
        "ep", "experts",
    )


@check
def heads_by_tp(topo: Topology) -> Iterator[Problem]:
    for name, count in (("heads", topo.heads), ("query_groups", topo.query_groups)):
        if count is None or count % topo.tp == 0:
            continue
        what = "attention heads" if name == "heads" else "query groups"
        tps = [t for t in _divisors(count) if topo.world_size % (t * topo.cp * topo.pp) == 0]
        yield _err(
            "heads-not-divisible-by-tp",
            f"{count} {what} cannot be split over tp = {topo.tp} "
            f"({count}/{topo.tp} = {count / topo.tp:.2f}); each TP rank needs whole {what}.",
            f"try --tensor-model-parallel-size {_or(_nearest(tps, topo.tp))}",
            "tp", name,
        )


@check
def layers_by_pp(topo: Topology) -> Iterator[Problem]:
    if topo.layers is None or (topo.pp == 1 and topo.vpp is None and topo.vpp_layers is None
                               and topo.first_stage_layers is None
                               and topo.last_stage_layers is None):
        return
    if topo.pp == 1:
        if topo.first_stage_layers is not None or topo.last_stage_layers is not None:
            yield _err(
                "layers-not-divisible-by-pp",
                "uneven first/last pipeline stages were given with pp = 1, where there is "
                "only one stage.",
                "drop --decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers, "
                "or set --pipeline-model-parallel-size 2 or more",
                "first_stage_layers", "last_stage_layers", "pp",
            )
        return  # vpp with pp == 1 is vpp-requires-pp
    counts = topo.stage_counts
    if counts is None:
        if topo.first_stage_layers is None and topo.last_stage_layers is None:
            pps = [
                p for p in _divisors(topo.layers)
                if topo.world_size % (topo.tp * topo.cp * p) == 0
            ]
            yield _err(
                "layers-not-divisible-by-pp",
                f"{topo.layers} layers cannot be split evenly over pp = {topo.pp} stages "
                f"({topo.layers}/{topo.pp} = {topo.layers / topo.pp:.2f}).",
                f"try --pipeline-model-parallel-size {_or(_nearest(pps, topo.pp))}, or give "
                "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers",
                "layers", "pp",
            )
        else:
            given = [x for x in (topo.first_stage_layers, topo.last_stage_layers) if x is not None]
            middle = topo.pp - len(given)
            rest = topo.layers - sum(given)
            yield _err(
                "layers-not-divisible-by-pp",
                f"after the uneven stages ({' + '.join(map(str, given))} layers), {rest} layers "
                f"remain for {middle} middle stage(s), which cannot be split evenly.",
                "choose first/last stage sizes so that the remaining layers divide by the "
                "number of remaining stages",
                "layers", "pp", "first_stage_layers", "last_stage_layers",
            )
        return
    if topo.vpp_layers is not None and topo.layers % (topo.pp * topo.vpp_layers):
        yield _err(
            "layers-not-divisible-by-pp",
            f"{topo.layers} layers do not split into pp = {topo.pp} stages of chunks of "
            f"{topo.vpp_layers} layers ({topo.layers}/({topo.pp}*{topo.vpp_layers}) = "
            f"{topo.layers / (topo.pp * topo.vpp_layers):.2f}).",
            "try --num-layers-per-virtual-pipeline-stage "
            + _or([d for d in _divisors(topo.layers // topo.pp) if d < topo.layers // topo.pp][-2:]
                  or [topo.layers // topo.pp]),
            "layers", "pp", "vpp_layers",
        )
        return
    bad = [c for c in counts if c % topo.chunks]
    if bad:
        yield _err(
            "layers-not-divisible-by-pp",
            f"stage layer counts {list(counts)} do not split into vpp = {topo.chunks} virtual "
            f"stages each ({bad[0]}/{topo.chunks} = {bad[0] / topo.chunks:.2f}).",
            "try --num-virtual-stages-per-pipeline-rank "
            + _or([v for v in _divisors(min(counts)) if all(c % v == 0 for c in counts)][-2:]),
            "layers", "pp", "vpp",
        )


@check
def vpp_needs_pp(topo: Topology) -> Iterator[Problem]:
    if topo.pp == 1 and (topo.vpp is not None or topo.vpp_layers is not None):
        given = "vpp_layers" if topo.vpp_layers is not None else "vpp"
        yield _err(
            "vpp-requires-pp",
            "a virtual pipeline was given but pp = 1: interleaving needs at least two "
            "pipeline stages.",
            f"drop {flag_of(given)}, or set --pipeline-model-parallel-size 2 or more",
            given, "pp",
        )


@check
def moe_needs_sp(topo: Topology) -> Iterator[Problem]:
    if topo.is_moe and topo.tp > 1 and not topo.sp:
        yield _err(
            "moe-tp-requires-sp",
            f"an MoE model with tp = {topo.tp} trains only with sequence parallel on "
            "(Megatron refuses MoE with TP > 1 and no SP).",
            "add --sequence-parallel",
            "sp", "tp",
        )
    if topo.sp and topo.tp == 1:
        yield _warn(
            "sp-ignored",
            "--sequence-parallel has no effect with tp = 1; Megatron drops it.",
            "remove --sequence-parallel, or raise --tensor-model-parallel-size",
            "sp", "tp",
        )


@check
def rollout_engines(topo: Topology) -> Iterator[Problem]:
    gpus, size = topo.rollout_gpu_count, topo.engine_size
    if gpus % size:
        multiples = [size * k for k in (gpus // size, gpus // size + 1) if k > 0]
        yield _err(
            "rollout-gpus-not-multiple-of-engine",
            f"{gpus} rollout GPUs do not make whole engines of {size} GPUs "
            f"({gpus}/{size} = {gpus / size:.2f}).",
            f"try --rollout-num-gpus {_or(multiples)}, or --rollout-num-gpus-per-engine "
            f"{_or(_nearest([d for d in _divisors(gpus)], size))}",
            "rollout_gpus", "engine_size",
        )
        return
    node = topo.engine_node_size
    bad = next((e for e in range(topo.num_engines) if not _engine_aligned(topo, e)), None)
    if bad is not None:
        ok = [d for d in _divisors(node)] + [node * k for k in (2, 4)]
        yield _err(
            "engine-straddles-nodes",
            f"rollout engine {bad} of {size} GPUs would cross a node boundary on nodes of "
            f"{node} GPUs: an engine must fit inside one node or span whole nodes "
            f"({node} % {size} = {node % size}).",
            f"try --rollout-num-gpus-per-engine {_or(_nearest(ok, size))}",
            "engine_size", "node_gpus" if not topo.colocate else "gpus_per_node",
        )


def _engine_aligned(topo: Topology, engine: int) -> bool:
    """Inside one node, or whole nodes starting at GPU 0 (read from `engine_gpus`)."""
    gpus = topo.engine_gpus(engine)
    if len({n for n, _ in gpus}) == 1:
        return True
    return gpus[0][1] == 0 and topo.engine_size % topo.engine_node_size == 0


@check
def sglang_dp(topo: Topology) -> Iterator[Problem]:
    size, dp = topo.engine_size, topo.engine_dp
    if size % dp:
        yield _err(
            "sglang-dp-invalid",
            f"engine DP {dp} does not divide the engine's {size} GPUs (engine TP); in SGLang "
            "DP subdivides the engine, it does not multiply it.",
            f"try --sglang-dp-size {_or(_nearest(_divisors(size), dp))}",
            "engine_dp", "engine_size",
        )
    if dp > 1 and not topo.dp_attention:
        yield _err(
            "sglang-dp-invalid",
            f"engine DP {dp} > 1 needs DP attention.",
            "add --sglang-enable-dp-attention, or set --sglang-dp-size 1",
            "engine_dp", "dp_attention",
        )


@check
def sglang_ep(topo: Topology) -> Iterator[Problem]:
    size, ep = topo.engine_size, topo.engine_ep
    ok = [d for d in _divisors(size) if topo.experts is None or topo.experts % d == 0]
    if size % ep or (topo.experts is not None and topo.experts % ep):
        yield _err(
            "sglang-ep-invalid",
            f"engine EP {ep} must divide the engine's {size} GPUs"
            + (f" and the {topo.experts} experts" if topo.experts is not None else "")
            + f" ({size} % {ep} = {size % ep}"
            + (f", {topo.experts} % {ep} = {topo.experts % ep}" if topo.experts else "")
            + ").",
            f"try --sglang-ep-size {_or(_nearest(ok, ep))}",
            "engine_ep", "engine_size", "experts",
        )


@check
def gpu_budget(topo: Topology) -> Iterator[Problem]:
    if topo.gpus_per_node > topo.node_gpus:
        yield _err(
            "gpu-budget-exceeded",
            f"the actor asks for {topo.gpus_per_node} GPUs per node but nodes have "
            f"{topo.node_gpus} GPUs (--num-gpus-per-node).",
            f"try --actor-num-gpus-per-node {topo.node_gpus} with --actor-num-nodes "
            f"{-(-topo.world_size // topo.node_gpus)}, or --num-gpus-per-node "
            f"{topo.gpus_per_node} if the nodes really have that many",
            "gpus_per_node", "node_gpus",
        )
    if topo.cluster_nodes is not None and topo.nodes_needed > topo.cluster_nodes:
        yield _err(
            "gpu-budget-exceeded",
            f"this job needs {topo.nodes_needed} nodes of {topo.node_gpus} GPUs "
            f"({topo.gpu_budget}) but the cluster has {topo.cluster_nodes}.",
            f"add nodes to the cluster (it needs {topo.nodes_needed}), or shrink the job: "
            "fewer --actor-num-nodes or --rollout-num-gpus, or --colocate",
            "nodes", "rollout_gpus", "cluster_nodes",
        )


@check
def replay_prerequisites(topo: Topology) -> Iterator[Problem]:
    if not topo.routing_replay:
        return
    which = "rollout_routing_replay" if topo.rollout_routing_replay else "routing_replay"
    if not topo.is_moe:
        yield _err(
            "r3-requires-moe",
            "routing replay was asked for, but the model has no MoE layers "
            + ("(no --num-experts)." if topo.experts is None else "(--moe-layer-freq)."),
            f"drop {flag_of(which)}, or give the MoE shape (--num-experts N)",
            which, "experts",
        )
    if topo.rollout_routing_replay and topo.rollout_external:
        yield _warn(
            "r3-external-capture",
            "rollout routing replay with external engines: miles cannot switch on routed-"
            "expert capture for engines it does not start, and without it there is nothing "
            "to replay.",
            "start the external SGLang servers with routed-expert capture on "
            "(--enable-return-routed-experts), or drop --rollout-external",
            "rollout_routing_replay", "rollout_external",
        )
    if topo.router_fusion:
        yield _err(
            "r3-router-fusion",
            "routing replay with fused router top-k: the fused kernel bypasses the replay "
            "hook, so recorded routes would be silently ignored.",
            "remove --moe-router-fusion",
            which, "router_fusion",
        )


@check
def batch_sizes(topo: Topology) -> Iterator[Problem]:
    gbs = topo.global_batch_size
    if gbs is None:
        return
    if topo.rollout_batch_size is not None:
        total = topo.rollout_batch_size * topo.n_samples_per_prompt
        if total % gbs:
            yield _err(
                "rollout-batch-not-multiple-of-global-batch",
                f"rollout_batch_size x n_samples_per_prompt = {topo.rollout_batch_size} x "
                f"{topo.n_samples_per_prompt} = {total} samples is not a multiple of "
                f"global_batch_size {gbs} ({total}/{gbs} = {total / gbs:.2f}).",
                f"try --global-batch-size {_or(_nearest(_divisors(total), gbs))}",
                "rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
            )
    step = topo.dp * topo.micro_batch_size
    if not topo.dynamic_batch and topo.world_size % topo.dense_model_size == 0 and gbs % step:
        yield _err(
            "global-batch-not-divisible-by-dp",
            f"global_batch_size {gbs} is not divisible by dp x micro_batch_size = {topo.dp} x "
            f"{topo.micro_batch_size} = {step} ({gbs}/{step} = {gbs / step:.2f}).",
            f"try --global-batch-size {_or([step * max(1, gbs // step), step * (gbs // step + 1)])}"
            ", or --use-dynamic-batch-size",
            "global_batch_size", "micro_batch_size",
        )


@check
def implied_and_ignored(topo: Topology) -> Iterator[Problem]:
    if topo.etp_implied and topo.tp > 1 and topo.is_moe:
        yield _warn(
            "etp-implied",
            f"--expert-tensor-parallel-size not given and tp = {topo.tp}, so Megatron uses "
            f"etp = tp = {topo.tp}: each expert is split over {topo.tp} GPUs.",
            f"state it: --expert-tensor-parallel-size {topo.tp} to keep this, or "
            "--expert-tensor-parallel-size 1 for whole experts per GPU",
            "etp", "tp",
        )
    if topo.colocate and topo.rollout_gpus is not None and topo.rollout_gpus != topo.world_size:
        yield _warn(
            "colocate-ignores-rollout-gpus",
            f"--rollout-num-gpus {topo.rollout_gpus} is ignored under --colocate: engines use "
            f"the actor's {topo.world_size} GPUs.",
            "remove --rollout-num-gpus, or drop --colocate to give rollout its own GPUs",
            "rollout_gpus", "colocate",
        )
    if not topo.colocate and not topo.rollout_external and not topo.train_only \
            and topo.rollout_gpus is None:
        yield _warn(
            "no-rollout-gpus",
            "neither --colocate nor --rollout-num-gpus is given, so no rollout engine is placed.",
            "add --colocate, or --rollout-num-gpus N for separate rollout GPUs",
            "rollout_gpus", "colocate",
        )


@check
def groups_within_nodes(topo: Topology) -> Iterator[Problem]:
    if topo.world_size % topo.dense_model_size or topo.world_size % topo.expert_model_size:
        return
    for name, size, expert in (("TP", topo.tp, False), ("ETP", topo.etp, True)):
        if size <= 1:
            continue
        group = topo.rank_groups("tp", expert=expert)[0]
        nodes = {topo.placement(r)[0] for r in group}
        if len(nodes) > 1 or size > topo.gpus_per_node:
            yield _warn(
                "tp-group-crosses-nodes",
                f"a {name} group of {size} ranks spans {len(nodes)} nodes of "
                f"{topo.gpus_per_node} GPUs; {name} traffic then crosses the network.",
                f"keep {name} <= GPUs per node ({topo.gpus_per_node}) and a divisor of it",
                "etp" if expert else "tp", "gpus_per_node",
            )
