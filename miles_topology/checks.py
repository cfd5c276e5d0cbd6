"""The rules a topology must satisfy: small named checks, each returning its problems.

Every check reads derived sizes from the Topology (never recomputes them), states the
arithmetic, the rule, and a fix with concrete values that pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from math import gcd, lcm

from . import placement as _placement
from .codes import RULES, run_rules
from .errors import Problem
from .model import MEGATRON_SIZES, Topology, flag_of

Check = Callable[[Topology], Iterator[Problem]]

# the fields whose flags only Megatron's parser defines (fsdp_undefined_flags below)
MEGATRON_ONLY_FLAGS = (*MEGATRON_SIZES, "sp", "order")


def check(fn: Check) -> Check:
    RULES.append(fn)
    return fn


run_checks = run_rules


def _err(code: str, message: str, fix: str, *fields: str) -> Problem:
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields))


def _warn(code: str, message: str, fix: str, *fields: str) -> Problem:
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields), "warning")


def _skip(code: str, message: str, fix: str, *fields: str) -> Problem:
    """A rule that cannot be decided: a fact it needs is unknown (not a failure)."""
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields), "skipped")


_SMALL = 1 << 16


def _divisors(n: int) -> list[int]:
    """Divisors of n for suggestions, in bounded time: every d <= 2^16 and its cofactor n // d
    (all of them when n <= 2^32), so a size like 10^30 answers at once."""
    small = [d for d in range(1, min(n, _SMALL) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})


def _nearest(candidates: list[int], target: int, k: int = 2) -> list[int]:
    """The k valid values closest to what the user gave, closest first."""
    return sorted(set(candidates), key=lambda c: (abs(c - target), -c))[:k]


def _or(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


def _node_fix(topo: Topology) -> str:
    """The next node count (same GPUs per node) at which both grids divide the world: nodes
    must be a multiple of lcm(dense, expert) / gcd(that, GPUs per node), found in O(1)."""
    need = lcm(topo.dense_model_size, topo.expert_model_size)
    step = need // gcd(need, topo.gpus_per_node)
    nodes = (topo.nodes // step + 1) * step
    if nodes > topo.nodes * 64:  # none within 64x: the smallest count below, if any
        if step >= topo.nodes:
            return ""
        nodes = step
    return f"{nodes} node{'s' if nodes > 1 else ''} of {topo.gpus_per_node} GPUs"


def _with_nodes(fix: str, topo: Topology) -> str:
    nodes = _node_fix(topo)
    return f"{fix}, or {nodes} (--actor-num-nodes)" if nodes else fix


@check
def dense_grid(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args asserts world % (tp*pp*cp) == 0;
    megatron/core/parallel_state.py initialize_model_parallel raises RuntimeError too."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
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
    """megatron/core/parallel_state.py initialize_model_parallel: RuntimeError unless world %
    (etp*ep*pp) == 0 (expert_tensor_model_pipeline_parallel size)."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
    world, m = topo.world_size, topo.expert_model_size
    if world % m == 0:
        return
    eps = [
        e
        for e in _divisors(world)
        if world % (topo.etp * e * topo.pp) == 0 and (topo.experts is None or topo.experts % e == 0)
    ]
    fixes = [f"--expert-model-parallel-size {_or(_nearest(eps, topo.ep))}"] if eps else []
    if topo.etp > 1:
        etps = [t for t in _divisors(world) if world % (t * topo.ep * topo.pp) == 0]
        if etps:
            fixes.append(f"--expert-tensor-parallel-size {_or(_nearest(etps, topo.etp))}")
    fix = "try " + ", or ".join(fixes) if fixes else "change the sizes"
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
    order that holds only when the dense and expert data-parallel sizes are equal
    (megatron/core/parallel_state.py initialize_model_parallel asserts it)."""
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
    """Megatron-LM training/arguments.py validate_args ("Expert parallelism check"): num_experts
    % expert_model_parallel_size == 0 is asserted."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
    if topo.experts is None and topo.ep > 1 and topo.layers is not None:
        # validate_args: "num_experts must be non None to use expert model parallelism"; only
        # when the model shape is on the command line (else it may come from a model script)
        yield _err(
            "ep-requires-moe",
            f"--expert-model-parallel-size {topo.ep} on a model without experts (--num-layers "
            "is given, --num-experts is not): Megatron asserts num_experts is set for EP > 1.",
            "add --num-experts N, or set --expert-model-parallel-size 1",
            "ep", "experts",
        )
        return
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
def moe_pattern_length(topo: Topology) -> Iterator[Problem]:
    """megatron/core/models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec: a list
    --moe-layer-freq must have one entry per layer (asserted while building the layer specs,
    before training starts). FSDP builds no Megatron layer specs."""
    freq = topo.moe_layer_freq
    if topo.train_backend == "fsdp" or topo.experts is None or topo.layers is None \
            or isinstance(freq, int) or len(freq) == topo.layers:
        return
    yield _err(
        "moe-layer-freq-length",
        f"--moe-layer-freq lists {len(freq)} layers but --num-layers is {topo.layers}: "
        "megatron-core asserts one entry per layer when it builds the layer specs.",
        f"give --moe-layer-freq {topo.layers} entries (e.g. [0]*k+[1]*({topo.layers}-k), "
        f"k dense layers first), or set --num-layers {len(freq)}",
        "moe_layer_freq", "layers",
    )


@check
def heads_by_tp(topo: Topology) -> Iterator[Problem]:
    """megatron-core TransformerConfig.__post_init__ (0.16): num_attention_heads % tp == 0, and
    num_query_groups a multiple OR a divisor of tp (fewer KV groups than TP ranks are
    replicated: Attention.__init__ gives each rank one group), else ValueError."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
    for name, count in (("heads", topo.heads), ("query_groups", topo.query_groups)):
        if count is None or count % topo.tp == 0:
            continue
        if name == "query_groups" and topo.tp % count == 0:
            continue  # KV groups replicated over tp / count ranks each
        what = "attention heads" if name == "heads" else "query groups"
        tps = [t for t in _divisors(count) if topo.world_size % (t * topo.cp * topo.pp) == 0]
        if name == "query_groups":  # multiples of the group count are valid too
            tps += [count * k for k in (2, 4, 8) if topo.world_size % (count * k * topo.cp
                                                                     * topo.pp) == 0]
        rule = (f"each TP rank needs whole {what}" if name == "heads" else
                "query groups must be a multiple or a divisor of tp")
        yield _err(
            "heads-not-divisible-by-tp",
            f"{count} {what} cannot be split over tp = {topo.tp} "
            f"({count}/{topo.tp} = {count / topo.tp:.2f}); {rule}.",
            f"try --tensor-model-parallel-size {_or(_nearest(tps, topo.tp))}",
            "tp", name,
        )


@check
def layers_by_pp(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args (layers % pp without uneven stages; per
    stage % layers per virtual stage), megatron-core TransformerConfig.__post_init__ (uneven
    stages) and transformer_block.get_num_layers_to_build (per stage % vpp); miles
    utils/arguments.py parse_args_and_get_parser asserts no first/last stage sizes with pp 1."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
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
    if 0 in counts:
        # megatron-core TransformerConfig.__post_init__ (uneven PP): first/last stage sizes must
        # be > 0 and middle stages need layers, else ValueError
        yield _err(
            "layers-not-divisible-by-pp",
            f"stage layer counts {list(counts)} leave a pipeline stage without layers; "
            "Megatron refuses an empty first, last or middle stage.",
            "choose --decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers "
            "that leave every stage at least one layer",
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
    """Megatron-LM training/arguments.py validate_args: at most one way to give the virtual
    pipeline; --num-layers-per-virtual-pipeline-stage not with uneven first/last stages; a
    virtual size of 1 becomes None (no interleaving, accepted with any pp); a larger one needs
    pp > 1 (also parallel_state.initialize_model_parallel raises RuntimeError)."""
    if topo.vpp is not None and topo.vpp_layers is not None:
        yield _err(
            "vpp-requires-pp",
            "both --num-virtual-stages-per-pipeline-rank and "
            "--num-layers-per-virtual-pipeline-stage were given: Megatron accepts only one.",
            "keep --num-virtual-stages-per-pipeline-rank, drop the other",
            "vpp", "vpp_layers",
        )
        return
    if topo.vpp_layers is not None and (topo.first_stage_layers is not None
                                        or topo.last_stage_layers is not None):
        yield _err(
            "vpp-requires-pp",
            "--num-layers-per-virtual-pipeline-stage cannot be combined with uneven first/last "
            "pipeline stages: Megatron asserts --num-virtual-stages-per-pipeline-rank instead.",
            "use --num-virtual-stages-per-pipeline-rank N",
            "vpp_layers", "first_stage_layers", "last_stage_layers",
        )
        return
    if topo.pp != 1:
        return
    if topo.vpp == 1:
        return  # validate_args: a virtual size of 1 is no virtual pipeline
    if topo.vpp_layers is not None:
        if topo.layers is None:
            yield _skip(
                "vpp-requires-pp",
                "--num-layers-per-virtual-pipeline-stage with pp = 1: whether it makes more than "
                "one virtual stage (refused) depends on --num-layers, which is not given.",
                "give --num-layers, or drop --num-layers-per-virtual-pipeline-stage",
                "vpp_layers", "layers",
            )
            return
        if topo.layers % topo.vpp_layers == 0 and topo.layers // topo.vpp_layers == 1:
            return  # one chunk per stage: no virtual pipeline
        if topo.layers % topo.vpp_layers:
            yield _err(
                "layers-not-divisible-by-pp",
                f"{topo.layers} layers do not split into chunks of {topo.vpp_layers} layers "
                f"({topo.layers}/{topo.vpp_layers} = {topo.layers / topo.vpp_layers:.2f}); "
                "Megatron asserts layers per stage % layers per virtual stage == 0.",
                "drop --num-layers-per-virtual-pipeline-stage (pp = 1 has no virtual pipeline)",
                "layers", "vpp_layers",
            )
            return
    if topo.vpp is not None or topo.vpp_layers is not None:
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
    """megatron/core/transformer/moe/moe_layer.py MoELayer.forward raises ValueError in training
    when TP > 1 without sequence parallel (ModelParallelConfig only warns); Megatron-LM
    validate_args turns SP off with a warning when tp == 1."""
    if topo.train_backend == "fsdp":  # FSDP builds no Megatron grid
        return
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
    """Whole engines: miles' engine launch slices the rollout bundles into runs of
    --rollout-num-gpus-per-engine (ray/rollout.py; forks raise 'num_rollout_workers must be
    divisible by num_gpus_per_engine'). Straddling: SGLang runs GPUs base_gpu_id ..
    base_gpu_id + tp - 1 of one node (sglang_engine.py passes base_gpu_id), and cross-node
    engines must tile whole nodes."""
    gpus, size = topo.rollout_gpu_count, topo.engine_size
    if topo.engine_groups is None and gpus % size:
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
    node = topo.node_size
    for group in topo.engine_group_list:
        if group.gpus % group.engine_size and group.kind != "placeholder" \
                and topo.engine_groups is not None and group.model != "eval":
            yield _err(
                "rollout-gpus-not-multiple-of-engine",
                f"--sglang-config group {group.model}/{group.kind} has {group.gpus} GPUs, not "
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
        at = topo.engine_gpus(bad)[0] if bad < topo.all_engines else (0, 0)
        s = group.engine_size
        ok = [d for d in _divisors(node) if d <= node] + [node * k for k in (2, 4)]
        yield _err(
            # the packed placement group (placement.py) lets engines start mid-node; SGLang
            # takes base_gpu_id .. base_gpu_id + tp - 1 on one node, so an engine that runs
            # past the node's last GPU (or a multi-node engine not tiling whole nodes) fails
            "engine-straddles-nodes",
            f"rollout engine {bad} of {s} GPUs starts at node {at[0]} GPU {at[1]} "
            f"(engines follow the actor's {topo.rollout_offset} GPUs in miles' packed placement "
            f"group) and would run past the end of its node, on nodes of {node} GPUs: an "
            "engine must fit inside one node from its first GPU, or span whole nodes from GPU 0 "
            f"({node} % {s} = {node % s}).",
            f"try --rollout-num-gpus-per-engine {_or(_nearest(ok, s))}, or an actor GPU count "
            f"that is a multiple of {s} (engines start after the actor's {topo.rollout_offset} "
            "GPUs)",
            "engine_size", "node_gpus", "nodes",
        )
        return


@check
def sglang_dp(topo: Topology) -> Iterator[Problem]:
    size, dp = topo.engine_size, topo.engine_dp
    if size % dp:
        # SGLang python/sglang/srt/server_args.py ServerArgs._handle_data_parallelism: with DP
        # attention `assert self.tp_size % self.dp_size == 0` (engine TP = the engine's GPUs:
        # miles sglang_utils validate_args sets sglang_tp_size = rollout_num_gpus_per_engine);
        # without DP attention miles' assert below fires first
        yield _err(
            "sglang-dp-invalid",
            f"engine DP {dp} does not divide the engine's {size} GPUs (engine TP); in SGLang "
            "DP subdivides the engine, it does not multiply it.",
            f"try --sglang-dp-size {_or(_nearest(_divisors(size), dp))}",
            "engine_dp", "engine_size",
        )
    if dp > 1 and not topo.dp_attention:
        # miles backends/sglang_utils/arguments.py validate_args:
        # `if args.sglang_dp_size > 1: assert args.sglang_enable_dp_attention`
        yield _err(
            "sglang-dp-invalid",
            f"engine DP {dp} > 1 needs DP attention: miles asserts "
            "--sglang-enable-dp-attention whenever --sglang-dp-size "
            "(--sglang-data-parallel-size) is above 1, at start-up.",
            "add --sglang-enable-dp-attention, or set --sglang-dp-size 1",
            "engine_dp", "dp_attention",
        )


@check
def sglang_ep(topo: Topology) -> Iterator[Problem]:
    """SGLang FusedMoE.__init__ asserts num_experts % moe_ep_size == 0; distributed/
    parallel_state.py initialize_model_parallel splits the TP group into tp // ep MoE-TP
    groups (no explicit assert for tp % ep; uneven groups cannot be built)."""
    size, ep = topo.engine_size, topo.engine_ep_used
    ok = [d for d in _divisors(size) if topo.experts is None or topo.experts % d == 0]
    if size % ep or (topo.experts is not None and topo.experts % ep):
        yield _err(
            "sglang-ep-invalid",
            f"engine EP {ep} must divide the engine's {size} GPUs"
            + (f" and the {topo.experts} experts" if topo.experts is not None else "")
            + f" ({size} % {ep} = {size % ep}"
            + (f", {topo.experts} % {ep} = {topo.experts % ep}" if topo.experts else "")
            + ")" + (" (the a2a backend sets engine EP = engine TP)" if topo.a2a_forces_ep
                     else "") + ".",
            f"try --sglang-ep-size {_or(_nearest(ok, ep))}" if not topo.a2a_forces_ep else
            "choose --rollout-num-gpus-per-engine dividing the expert count",
            "engine_ep", "engine_size", "experts",
        )


@check
def sglang_overridden(topo: Topology) -> Iterator[Problem]:
    """Engine sizes miles or SGLang overwrite silently: warnings, with what is really used."""
    if topo.sglang_tp is not None and topo.sglang_tp != topo.engine_size:
        # miles backends/sglang_utils/arguments.py validate_args:
        # `args.sglang_tp_size = args.rollout_num_gpus_per_engine`
        yield _warn(
            "sglang-tp-overridden",
            f"--sglang-tp-size {topo.sglang_tp} is overwritten by miles with "
            f"--rollout-num-gpus-per-engine {topo.engine_size}: each engine runs TP "
            f"{topo.engine_size}.",
            f"drop --sglang-tp-size and set --rollout-num-gpus-per-engine {topo.sglang_tp} if "
            "that is the engine size you meant",
            "sglang_tp", "engine_size",
        )
    if topo.a2a_forces_ep and topo.engine_ep not in (1, topo.engine_size):
        # SGLang python/sglang/srt/server_args.py ServerArgs._handle_a2a_moe (post-init, with a
        # logger.warning): `self.ep_size = self.tp_size` for the backends of `a2a_forces_ep`
        yield _warn(
            "sglang-ep-overridden",
            f"--sglang-moe-a2a-backend {topo.a2a_backend} makes SGLang set engine EP = engine "
            f"TP = {topo.engine_size}, so --sglang-ep-size {topo.engine_ep} is ignored.",
            f"drop --sglang-ep-size, or set it to {topo.engine_size}",
            "engine_ep", "a2a_backend", "engine_size",
        )


@check
def gpu_budget(topo: Topology) -> Iterator[Problem]:
    """miles ray/placement_group.py create_placement_groups: one PACK group of 1-GPU bundles
    (_get_placement_group_layout); its size must fit the cluster or Ray waits forever."""
    node = topo.node_size
    if topo.node_gpus_given and topo.gpus_per_node != node and (
            topo.nodes > 1 or topo.gpus_per_node > node):
        # miles ray/actor_group.py: rank i takes bundle i of the sorted packed group; the
        # per-node count is only multiplied into the world size
        n = -(-topo.world_size // node)
        yield _warn(
            "actor-node-shape-ignored",
            f"the actor asks for {topo.nodes} node(s) x {topo.gpus_per_node} GPUs, but miles "
            f"packs its {topo.world_size} ranks into one placement group: they fill {n} "
            f"node(s) of {node} GPUs (--num-gpus-per-node) in order, not "
            f"{topo.gpus_per_node} per node.",
            f"use --actor-num-gpus-per-node {node} with --actor-num-nodes {n} to say what "
            f"happens, or --num-gpus-per-node {topo.gpus_per_node} if the nodes have that many",
            "gpus_per_node", "node_gpus",
        )
    if not topo.node_gpus_given and topo.nodes > 1 and topo.gpus_per_node < topo.node_gpus:
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
        big = [g for g in topo.engine_group_list
               if g.engines and g.engine_size > topo.gpus_per_node]
        if big:
            g = max(big, key=lambda g: g.engine_size)
            size, npn, node = g.engine_size, topo.node_gpus, topo.gpus_per_node
            what = ("eval engines" if g.model == "eval" else
                    "rollout engines" if g.model == "default" else
                    f"--sglang-config {g.model}/{g.kind} engines")
            if size <= npn:
                happens = (f"miles starts each as one process on {size} GPUs of a single node "
                           f"(min({size}, {npn})), which a node of {node} GPUs does not have")
            elif size % npn:
                happens = (f"miles refuses the size at start-up ({size} is neither <= {npn} "
                           f"nor a multiple of it)")
            else:
                happens = (f"miles starts each as {size // npn} processes of {npn} GPUs, more "
                           f"than a node of {node} GPUs has")
            yield _warn(
                "num-gpus-per-node-default",
                f"the actor uses {topo.nodes} nodes x {node} GPUs but --num-gpus-per-node is "
                f"not given, so miles sizes engines for nodes of {npn}: the {what} of {size} "
                f"GPUs are larger than a node of {node}, and {happens}. This check assumes "
                f"nodes of {node} GPUs.",
                f"add --num-gpus-per-node {node}",
                "node_gpus", "gpus_per_node",
                "eval_engine_size" if g.model == "eval" else
                "engine_size" if topo.engine_groups is None else "sglang_config",
            )
    if topo.cluster_nodes is not None and topo.nodes_needed > topo.cluster_nodes:
        yield _err(
            "gpu-budget-exceeded",
            f"this job needs {topo.nodes_needed} nodes of {node} GPUs "
            f"({topo.gpu_budget}, one packed placement group) but the cluster has "
            f"{topo.cluster_nodes}.",
            f"add nodes to the cluster (it needs {topo.nodes_needed}), or shrink the job: "
            "fewer --actor-num-nodes or --rollout-num-gpus, or --colocate",
            "nodes", "rollout_gpus", "cluster_nodes",
        )


@check
def replay_prerequisites(topo: Topology) -> Iterator[Problem]:
    """Router fusion: megatron/core/transformer/moe/moe_utils.py
    topk_routing_with_score_function returns the fused TE kernel's result before the
    router_replay argument is read, so replayed routes are ignored (trains wrongly). No MoE
    layer: miles itself does not check it, but with rollout routing replay the engines it
    starts capture routed experts (sglang_utils _compute_server_args sets
    enable_return_routed_experts), and SGLang's capturer (python/sglang/srt/state_capturer/
    routed_experts.py RoutedExpertsCapturer.__init__, earlier layers/moe/
    routed_experts_capturer.py; built by model_runner.py init_routed_experts_capturer at engine
    start) reads hf_text_config.num_experts_per_tok, which a dense HF config lacks: the engine
    fails at start-up. Skipped when the shape comes from the checkpoint. External engines: miles
    asks for routes per request (return_routed_experts) but only the server flag
    --enable-return-routed-experts makes SGLang capture them; samples then carry no
    rollout_routed_experts, the train batch has none, and training_utils/replay_data.py
    fill_replay_data raises "rollout_routed_experts is required in rollout_data for replay" at
    the first training step (a warning: how those servers were started is not visible here)."""
    if not topo.routing_replay:
        return
    which = "rollout_routing_replay" if topo.rollout_routing_replay else "routing_replay"
    if not topo.is_moe:
        if topo.train_backend == "fsdp" or (topo.experts is None and topo.layers is None):
            # the model shape is read from the checkpoint (HF config under FSDP, the model
            # script under Megatron), so an absent --num-experts proves nothing
            yield _skip(
                "r3-requires-moe",
                "routing replay was asked for; whether the model has MoE layers is not known "
                + ("(FSDP reads it from the HF checkpoint)." if topo.train_backend == "fsdp"
                   else "(no model shape given: --num-layers, --num-experts)."),
                "give the model shape (--num-layers, --num-experts) to check it",
                which, "experts",
            )
        else:
            why = ("(no --num-experts)" if topo.experts is None else "(--moe-layer-freq)")
            yield _err(
                "r3-requires-moe",
                f"routing replay was asked for, but the model has no MoE layers {why}"
                + (": miles starts the engines with routed-expert capture on, and SGLang's "
                   "capturer reads num_experts_per_tok from the HF config, which a dense model "
                   "lacks, so every engine fails at start-up." if topo.rollout_routing_replay
                   and not topo.rollout_external and topo.experts is None else
                   ": there are no routes to record or replay."),
                f"drop {flag_of(which)}, or give the MoE shape (--num-experts N)",
                which, "experts",
            )
    if topo.rollout_routing_replay and topo.rollout_external:
        yield _warn(
            "r3-external-capture",
            "rollout routing replay with external engines: miles cannot switch on routed-"
            "expert capture for engines it does not start; a server started without "
            "--enable-return-routed-experts returns no routed experts, and the first training "
            "step then fails after a full rollout ('rollout_routed_experts is required in "
            "rollout_data for replay').",
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
    if topo.dynamic_global_batch:
        # miles utils/arguments.py miles_validate_args: needs --use-dynamic-batch-size (unless
        # multi-LoRA); the
        # global batch is then set per rollout (RolloutManager._compute_dynamic_global_batch_size)
        if not topo.dynamic_batch:
            yield _err(
                "dynamic-global-batch-requires-dynamic-batch",
                "--use-dynamic-global-batch-size needs --use-dynamic-batch-size: miles refuses "
                "it at start-up (static micro-batches cannot follow a data-dependent count).",
                "add --use-dynamic-batch-size with --max-tokens-per-gpu N",
                "dynamic_global_batch", "dynamic_batch",
            )
        return
    if topo.dynamic_batch and topo.max_tokens_per_gpu is None:
        yield _err(  # miles utils/arguments.py miles_validate_args asserts it
            "dynamic-batch-requires-max-tokens",
            "--use-dynamic-batch-size needs --max-tokens-per-gpu: miles asserts it at start-up.",
            "add --max-tokens-per-gpu N",
            "dynamic_batch", "max_tokens_per_gpu",
        )
    if topo.rollout_batch_size is not None and topo.steps_per_rollout is not None:
        total = topo.rollout_batch_size * topo.n_samples_per_prompt
        want = total // topo.steps_per_rollout
        if gbs is not None and gbs != want:
            yield _err(  # miles utils/arguments.py miles_validate_args asserts equality
                "steps-per-rollout-conflict",
                f"--num-steps-per-rollout {topo.steps_per_rollout} sets the global batch to "
                f"{topo.rollout_batch_size} x {topo.n_samples_per_prompt} // "
                f"{topo.steps_per_rollout} = {want}, but --global-batch-size is {gbs}; miles "
                "asserts they agree.",
                f"drop --global-batch-size, or set it to {want}",
                "steps_per_rollout", "global_batch_size",
            )
    if gbs is None:
        return
    if topo.rollout_batch_size is not None:
        total = topo.rollout_batch_size * topo.n_samples_per_prompt
        if total < gbs and not topo.no_trim:
            # miles RolloutManager._get_rollout_data (trim to a multiple of the global batch;
            # trim_len == 0 raises): read in an earlier miles, not re-found in HEAD's rollout/
            yield _err(
                "rollout-batch-not-multiple-of-global-batch",
                f"rollout_batch_size x n_samples_per_prompt = {topo.rollout_batch_size} x "
                f"{topo.n_samples_per_prompt} = {total} samples do not fill one global batch of "
                f"{gbs}: miles raises 'Not enough samples' after the first rollout.",
                f"try --global-batch-size {_or(_nearest(_divisors(total), gbs))}",
                "rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
            )
        elif total % gbs and not topo.no_trim:
            # RolloutManager._get_rollout_data trims to a multiple of the global batch
            yield _warn(
                "rollout-batch-not-multiple-of-global-batch",
                f"rollout_batch_size x n_samples_per_prompt = {topo.rollout_batch_size} x "
                f"{topo.n_samples_per_prompt} = {total} samples is not a multiple of "
                f"global_batch_size {gbs} ({total}/{gbs} = {total / gbs:.2f}): miles trims "
                f"every rollout to {total // gbs * gbs} samples, dropping {total % gbs}.",
                f"try --global-batch-size {_or(_nearest(_divisors(total), gbs))}",
                "rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
            )
        elif total % gbs and not topo.partial_train_step:
            yield _skip(
                "rollout-batch-not-multiple-of-global-batch",
                f"{total} samples per rollout are not a multiple of global_batch_size {gbs} and "
                "--disable-rollout-trim-samples keeps the remainder; what training does with a "
                "partial batch is not checked here.",
                f"try --global-batch-size {_or(_nearest(_divisors(total), gbs))}, or "
                "--allow-partial-train-step",
                "rollout_batch_size", "global_batch_size", "no_trim",
            )
    step = topo.dp * topo.micro_batch_size
    # megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator asserts
    # global_batch_size % (micro_batch_size * dp) == 0 (static micro-batches only)
    if (not topo.dynamic_batch and topo.train_backend == "megatron"
            and topo.world_size % topo.dense_model_size == 0 and gbs % step):
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
    """etp: Megatron-LM validate_args sets expert_tensor_parallel_size = tp when not given.
    colocate: miles_validate_args overwrites rollout_num_gpus with the actor's GPUs (logged at
    info). No rollout GPUs: miles leaves rollout_num_gpus None, and placement_group.py
    _get_placement_group_layout then adds None (a crash on a real launch; a warning here, as a
    Topology may describe the trainer only)."""
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
            "neither --colocate nor --rollout-num-gpus is given, so no rollout engine is placed "
            "here; miles itself leaves rollout_num_gpus unset and fails sizing its placement "
            "group unless --debug-train-only or external engines are used.",
            "add --colocate, or --rollout-num-gpus N for separate rollout GPUs",
            "rollout_gpus", "colocate",
        )


@check
def groups_within_nodes(topo: Topology) -> Iterator[Problem]:
    """TP groups are runs of tp consecutive ranks (tp is the fastest axis in every order), and
    rank r sits at position r of the placement group: decided by arithmetic, not by groups.
    Nothing upstream refuses it; a performance warning of the design table (DESIGN.md)."""
    if topo.world_size % topo.dense_model_size or topo.world_size % topo.expert_model_size:
        return
    node = topo.node_size
    for name, size, expert in (("TP", topo.tp, False), ("ETP", topo.etp, True)):
        if size <= 1:
            continue
        if size > node:
            spans = -(-size // node)
        elif node % size and ((node - 1) // size + 1) * size <= topo.world_size:
            spans = 2  # the group holding the node's last GPU runs into the next node
        else:
            continue
        yield _warn(
            "tp-group-crosses-nodes",
            f"a {name} group of {size} ranks spans {spans} nodes of {node} GPUs; {name} "
            "traffic then crosses the network.",
            f"keep {name} <= GPUs per node ({node}) and a divisor of it",
            "etp" if expert else "tp", "gpus_per_node",
        )


# ---- flags of miles HEAD (miles/utils/arguments.py miles_validate_args) -----------------


@check
def critic(topo: Topology) -> Iterator[Problem]:
    """PPO (miles utils/arguments.py miles_validate_args): `args.use_critic =
    args.advantage_estimator == "ppo"`, a ValueError unless the Megatron backend, and
    --critic-num-* overwritten with the actor's; placement_group.py create_placement_groups
    gives the critic the actor's bundles."""
    if topo.use_critic and topo.advantage_estimator is None:
        yield _warn(
            "deprecated-flag",
            "--use-critic is gone from miles: the critic exists exactly when "
            "--advantage-estimator is ppo (miles sets use_critic from it and drops this flag).",
            "replace --use-critic with --advantage-estimator ppo",
            "use_critic",
        )
    if not topo.use_critic:
        return
    if topo.train_backend != "megatron":
        yield _err(
            "ppo-requires-megatron",
            "--advantage-estimator ppo (shared actor/critic) needs the Megatron backend: miles "
            "raises 'Shared Actor/Critic PPO requires the Megatron backend' at start-up.",
            "drop --train-backend fsdp, or use another --advantage-estimator (e.g. grpo)",
            "advantage_estimator", "train_backend",
        )
    asked = [(f, v, a) for f, v, a in (
        ("critic_nodes", topo.critic_nodes, topo.nodes),
        ("critic_gpus_per_node", topo.critic_gpus_per_node, topo.gpus_per_node),
    ) if v is not None and v != a]
    if asked:
        yield _warn(
            "critic-placement-overridden",
            "the critic shares the actor's placement group and miles overwrites "
            + ", ".join(f"{flag_of(f)} {v} with the actor's {a}" for f, v, a in asked) + ".",
            "drop " + " and ".join(flag_of(f) for f, _, _ in asked),
            *(f for f, _, _ in asked),
        )


@check
def fsdp_mesh(topo: Topology) -> Iterator[Problem]:
    """FSDP is pure data parallel in miles HEAD: utils/arguments.py parse_args_and_get_parser
    asserts context_parallel_size == 1 for the FSDP backend, and backends/fsdp_utils
    validate_hybrid_shard_args raises unless world % dp_replicate_size == 0 (replicas x shards)."""
    if topo.train_backend != "fsdp":
        if topo.dp_replicate > 1:
            yield _warn(
                "fsdp-flag-ignored",
                f"--dp-replicate-size {topo.dp_replicate} applies to --train-backend fsdp only; "
                "Megatron ignores it.",
                "drop --dp-replicate-size, or add --train-backend fsdp",
                "dp_replicate", "train_backend",
            )
        return
    world = topo.world_size
    if topo.cp > 1:
        yield _err(
            "fsdp-cp-unsupported",
            f"--context-parallel-size {topo.cp} with --train-backend fsdp: miles asserts "
            "'Context parallelism is not supported for FSDP backend' at start-up.",
            "drop --context-parallel-size, or use the Megatron backend",
            "cp", "train_backend",
        )
    if world % topo.dp_replicate:
        yield _err(
            "fsdp-mesh-divisibility",
            f"world size {world} is not divisible by dp_replicate_size {topo.dp_replicate} "
            f"({world}/{topo.dp_replicate} = {world / topo.dp_replicate:.2f}): FSDP2 hybrid "
            "shard splits the ranks into replicas x shards.",
            f"try --dp-replicate-size {_or(_nearest(_divisors(world), topo.dp_replicate))}",
            "dp_replicate", "nodes", "gpus_per_node",
        )
    if topo.fsdp_ignored:
        # Only sizes that reach the Topology from somewhere other than a miles command line
        # (our topology YAML, a Python caller): on a command line those flags are an error,
        # fsdp-unknown-flag (fsdp_undefined_flags), and are not reported twice.
        shown = ", ".join(f"{flag_of(f)} {v}" for f, v in topo.fsdp_ignored)
        yield _warn(
            "fsdp-ignores-megatron-sizes",
            f"--train-backend fsdp ignores {shown}: FSDP shards every parameter over the "
            "data-parallel ranks and builds no tensor, pipeline or expert groups.",
            "drop them (the FSDP mesh is set by --dp-replicate-size only)",
            "train_backend", *(f for f, _ in topo.fsdp_ignored),
        )


def fsdp_undefined_flags(given_by: dict[str, str]) -> list[Problem]:
    """Megatron-only flags on a miles command line under --train-backend fsdp (called by
    sources.read_flags, which alone knows what was given on the command line).

    miles utils/arguments.py parse_args_and_get_parser (HEAD; parse_args in 00e365d9 does the
    same) takes the FSDP branch to backends/fsdp_utils/arguments.py load_fsdp_args ->
    parse_fsdp_cli: a parser built from the FSDPArgs dataclass fields (context_parallel_size
    and dp_replicate_size, no tensor, pipeline, expert or virtual-pipeline size) plus miles'
    own provider (get_miles_extra_args_provider: its utils/args/configs classes, e.g.
    TrainConfig, TrainerBackendTraitConfig, CustomMegatronPluginsConfig, and in 00e365d9 the
    add_*_arguments, add_sglang_arguments, add_lora_arguments, add_dsv4_arguments, define none
    of these flags; reset_arg adds only batch, checkpoint and optimizer flags), then strict
    `parser.parse_args()`. Megatron's
    parser, which defines them, is never built, so argparse exits at start-up with
    "unrecognized arguments", whatever the value (1 included)."""
    return [
        Problem(
            "fsdp-unknown-flag",
            f"miles' FSDP argument parser does not define {flag}: train.py exits at start-up "
            "with argparse's 'unrecognized arguments', whatever its value.",
            f"drop {flag} (FSDP builds no Megatron groups; its mesh is --dp-replicate-size)",
            (flag, flag_of("train_backend")),
        )
        for name, flag in given_by.items() if name in MEGATRON_ONLY_FLAGS
    ]


@check
def weight_transfer(topo: Topology) -> Iterator[Problem]:
    mode = topo.transfer_mode
    if mode in ("p2p", "disk-delta") and topo.colocate:
        yield _err(  # miles utils/arguments.py miles_validate_args asserts it (p2p, disk-delta)
            "transfer-mode-invalid",
            f"--update-weight-transfer-mode {mode} is refused with --colocate at start-up "
            "(colocated engines take weights through CUDA IPC).",
            "use --update-weight-transfer-mode broadcast, or drop --colocate",
            "transfer_mode", "colocate",
        )
    if mode in ("p2p", "disk-delta") and topo.prefill_servers is not None:  # asserted likewise
        yield _err(
            "transfer-mode-invalid",
            f"--update-weight-transfer-mode {mode} is refused with --prefill-num-servers "
            "(not supported with prefill/decode disaggregation).",
            "use --update-weight-transfer-mode broadcast",
            "transfer_mode", "prefill_servers",
        )


@check
def eval_engines(topo: Topology) -> Iterator[Problem]:
    if not topo.eval_gpus:
        return
    if topo.eval_gpus % topo.eval_size:
        yield _err(  # miles utils/arguments.py miles_validate_args asserts it
            "eval-gpus-not-multiple-of-engine",
            f"--eval-num-gpus {topo.eval_gpus} is not divisible by GPUs per eval engine "
            f"{topo.eval_size} ({topo.eval_gpus}/{topo.eval_size} = "
            f"{topo.eval_gpus / topo.eval_size:.2f}).",
            f"try --eval-num-gpus {topo.eval_size * max(1, topo.eval_gpus // topo.eval_size)}",
            "eval_gpus", "eval_engine_size",
        )
    # miles utils/arguments.py _resolve_rollout_functions asserts no eval fleet with external
    # engines (_compute_rollout_external); miles_validate_args: "Snapshot eval is not
    # supported with --colocate"
    for on, why in ((topo.rollout_external, "external rollout engines"),
                    (topo.colocate, "--colocate (snapshot eval)")):
        if on:
            yield _err(
                "eval-gpus-invalid",
                f"--eval-num-gpus {topo.eval_gpus} cannot be used with {why}: miles asserts "
                "against it at start-up.",
                "drop --eval-num-gpus",
                "eval_gpus", "rollout_external" if topo.rollout_external else "colocate",
            )


@check
def engine_groups(topo: Topology) -> Iterator[Problem]:
    """--prefill-num-servers and --sglang-config: miles utils/arguments.py miles_validate_args
    asserts neither with external engines and not both; backends/sglang_utils/sglang_config.py
    SglangConfig.from_prefill_num_servers asserts decode GPUs > 0. --sglang-config groups:
    sglang_config.py _compute_raw_sglang_config returns no engines at all (the file is not
    even read) unless args.starts_inference_engines (miles_validate_args: not
    --debug-train-only, or eval GPUs > 0; --debug-train-only sets rollout_num_gpus = 0), then
    asserts the groups total rollout + eval GPUs and, with eval GPUs, exactly one model named
    "eval" holding them. (Two models named "eval" are not told apart here: the groups are read
    per model name.)"""
    if topo.prefill_servers is not None:
        if topo.sglang_config is not None or topo.rollout_external:
            yield _err(
                "engine-groups-invalid",
                "--prefill-num-servers cannot be combined with "
                + ("--sglang-config" if topo.sglang_config else "external rollout engines")
                + ": miles refuses it at start-up.",
                "describe prefill/decode groups in --sglang-config only",
                "prefill_servers", "sglang_config",
            )
        elif topo.num_engines <= topo.prefill_servers and topo.rollout_gpu_count:
            n = topo.rollout_gpu_count // topo.engine_size
            yield _err(
                "engine-groups-invalid",
                f"--prefill-num-servers {topo.prefill_servers} leaves no decode engine: "
                f"{n} engine(s) in all; miles asserts engines > prefill servers.",
                f"try --prefill-num-servers {max(0, n - 1)}, or more --rollout-num-gpus",
                "prefill_servers", "rollout_gpus",
            )
    if topo.sglang_config is None:
        return
    if topo.rollout_external:
        yield _err(
            "engine-groups-invalid",
            "--sglang-config cannot be used with external rollout engines (miles asserts it).",
            "drop --sglang-config", "sglang_config", "rollout_external",
        )
        return
    if topo.train_only and not topo.eval_gpus:
        return  # no engine starts: miles does not read the file
    if topo.engine_groups is None:
        yield _skip(
            "engine-groups-unread",
            f"--sglang-config {topo.sglang_config} could not be read here, so the engine "
            "groups (sizes, offsets, prefill/decode) are not checked.",
            "check on the machine where the file is, or pass the file's path as it is seen here",
            "sglang_config",
        )
        return
    total = sum(g[2] for g in topo.engine_groups)
    rollout = 0 if topo.train_only else topo.rollout_gpu_count
    want = rollout + topo.eval_gpus
    if total != want:
        yield _err(
            "engine-groups-invalid",
            f"--sglang-config groups hold {total} GPUs but --rollout-num-gpus + --eval-num-gpus "
            f"= {rollout} + {topo.eval_gpus} = {want}"
            + (" (--debug-train-only starts no rollout engine)" if topo.train_only else "")
            + "; miles asserts they are equal.",
            f"make the groups' num_gpus add up to {want}"
            + ("" if topo.train_only else
               f", or set --rollout-num-gpus {total - topo.eval_gpus}"),
            "sglang_config", "rollout_gpus",
        )
        return
    if topo.eval_gpus:
        held = sum(g[2] for g in topo.engine_groups if g[0] == "eval")
        if held != topo.eval_gpus:
            yield _err(
                "engine-groups-invalid",
                f"--eval-num-gpus {topo.eval_gpus} needs exactly one --sglang-config model named "
                f"'eval' holding {topo.eval_gpus} GPUs, but "
                + (f"its 'eval' groups hold {held}" if held else "no model is named 'eval'")
                + "; miles asserts it at start-up.",
                f"name the eval model 'eval' and give its groups {topo.eval_gpus} GPUs in all",
                "sglang_config", "eval_gpus",
            )
