"""The model's shape against the grid: experts over EP, heads over TP, layers over PP and
the virtual pipeline, the MoE layer pattern, sequence parallel with MoE.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from ..errors import Problem
from ..parts import flag_of
from ..topology import Topology
from .base import F, _divisors, _found, _nearest, _or, _skip, builds_megatron


@rule(
    source="Megatron-LM training/arguments.py validate_args (expert parallelism check)",
    codes={
        "experts-not-divisible-by-ep": ("error", "num_experts % ep != 0",
            "--expert-model-parallel-size 3 --num-experts 8"),
        "ep-requires-moe": (
            "error", f"expert parallel > 1 with the model shape given but no `{F.experts}` "
            "(Megatron asserts num_experts is set)",
                "--expert-model-parallel-size 2 --num-layers 4"),
    },
)
def experts_by_ep(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args ("Expert parallelism check"): num_experts
    % expert_model_parallel_size == 0 is asserted."""
    lay, mod = topo.layout, topo.model
    if not builds_megatron(topo):
        return
    if mod.experts is None and lay.ep > 1 and mod.layers is not None:
        # validate_args: "num_experts must be non None to use expert model parallelism"; only
        # when the model shape is on the command line (else it may come from a model script)
        yield _found(
            "ep-requires-moe",
            f"{F.ep} {lay.ep} on a model without experts ({F.layers} "
            f"is given, {F.experts} is not): Megatron asserts num_experts is set for EP > 1.",
            f"add {F.experts} N, or set {F.ep} 1",
            "ep", "experts",
        )
        return
    if mod.experts is None or mod.experts % lay.ep == 0:
        return
    eps = [e for e in _divisors(mod.experts) if topo.world_size % (lay.etp * e * lay.pp) == 0]
    yield _found(
        "experts-not-divisible-by-ep",
        f"{mod.experts} experts cannot be split evenly over ep = {lay.ep} expert-parallel "
        f"ranks ({mod.experts}/{lay.ep} = {mod.experts / lay.ep:.2f}); each EP rank must own "
        "the same number of experts.",
        f"try {F.ep} {_or(_nearest(eps, lay.ep))}"
        if eps
        else f"use a number of experts divisible by {lay.ep}",
        "ep", "experts",
    )


@rule(
    source="megatron/core/models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec",
    codes={
        "moe-layer-freq-length": (
            "error", f"a list `{F.moe_layer_freq}` whose length is not `{F.layers}` "
            "(megatron-core asserts one entry per layer when it builds the layer specs)",
                "--moe-layer-freq '([0]*2+[1]*6)' --num-experts 8 --num-layers 12"),
    },
)
def moe_pattern_length(topo: Topology) -> Iterator[Problem]:
    """megatron/core/models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec: a list
    --moe-layer-freq must have one entry per layer (asserted while building the layer specs,
    before training starts). FSDP builds no Megatron layer specs."""
    mod = topo.model
    freq = mod.moe_layer_freq
    if not builds_megatron(topo) or mod.experts is None or mod.layers is None \
            or isinstance(freq, int) or len(freq) == mod.layers:
        return
    yield _found(
        "moe-layer-freq-length",
        f"{F.moe_layer_freq} lists {len(freq)} layers but {F.layers} is {mod.layers}: "
        "megatron-core asserts one entry per layer when it builds the layer specs.",
        f"give {F.moe_layer_freq} {mod.layers} entries (e.g. [0]*k+[1]*({mod.layers}-k), "
        f"k dense layers first), or set {F.layers} {len(freq)}",
        "moe_layer_freq", "layers",
    )


@rule(
    source="megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
    codes={
        "heads-not-divisible-by-tp": (
            "error", "attention heads % tp != 0, or query groups neither a multiple nor a "
            "divisor of tp",
                "--tensor-model-parallel-size 16 --num-attention-heads 4"),
    },
)
def heads_by_tp(topo: Topology) -> Iterator[Problem]:
    """megatron-core TransformerConfig.__post_init__ (0.16): num_attention_heads % tp == 0, and
    num_query_groups a multiple OR a divisor of tp (fewer KV groups than TP ranks are
    replicated: Attention.__init__ gives each rank one group), else ValueError."""
    lay, mod = topo.layout, topo.model
    if not builds_megatron(topo):
        return
    for name, count in (("heads", mod.heads), ("query_groups", mod.query_groups)):
        if count is None or count % lay.tp == 0:
            continue
        if name == "query_groups" and lay.tp % count == 0:
            continue  # KV groups replicated over tp / count ranks each
        what = "attention heads" if name == "heads" else "query groups"
        tps = [t for t in _divisors(count) if topo.world_size % (t * lay.cp * lay.pp) == 0]
        if name == "query_groups":  # multiples of the group count are valid too
            tps += [count * k for k in (2, 4, 8) if topo.world_size % (count * k * lay.cp
                                                                     * lay.pp) == 0]
        rule = (f"each TP rank needs whole {what}" if name == "heads" else
                "query groups must be a multiple or a divisor of tp")
        yield _found(
            "heads-not-divisible-by-tp",
            f"{count} {what} cannot be split over tp = {lay.tp} "
            f"({count}/{lay.tp} = {count / lay.tp:.2f}); {rule}.",
            f"try {F.tp} {_or(_nearest(tps, lay.tp))}",
            "tp", name,
        )


@rule(
    source=("Megatron-LM training/arguments.py validate_args; megatron-core "
            "TransformerConfig.__post_init__, transformer_block.get_num_layers_to_build; miles "
            "utils/arguments.py parse_args_and_get_parser"),
    codes={
        "layers-not-divisible-by-pp": (
            "error", "layers cannot be split over pp (and vpp) as given",
                "--pipeline-model-parallel-size 3 --num-layers 8"),
    },
)
def layers_by_pp(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args (layers % pp without uneven stages; per
    stage % layers per virtual stage), megatron-core TransformerConfig.__post_init__ (uneven
    stages) and transformer_block.get_num_layers_to_build (per stage % vpp); miles
    utils/arguments.py parse_args_and_get_parser asserts no first/last stage sizes with pp 1."""
    lay, mod = topo.layout, topo.model
    if not builds_megatron(topo):
        return
    if mod.layers is None or (lay.pp == 1 and lay.vpp is None and lay.vpp_layers is None
                               and lay.first_stage_layers is None
                               and lay.last_stage_layers is None):
        return
    if lay.pp == 1:  # vpp with pp == 1 is vpp-requires-pp
        yield from _one_stage(lay)
    elif topo.stages.counts is None:
        yield from _padded_split(topo) if any(topo.stages.pad) else _uneven_split(topo)
    else:
        yield from _stage_counts(topo)


def _one_stage(lay) -> Iterator[Problem]:
    """Uneven first/last stages with a single pipeline stage (miles' parse_args asserts)."""
    if lay.first_stage_layers is not None or lay.last_stage_layers is not None:
        yield _found(
            "layers-not-divisible-by-pp",
            "uneven first/last pipeline stages were given with pp = 1, where there is "
            "only one stage.",
            f"drop {F.first_stage_layers}/{F.last_stage_layers}, "
            f"or set {F.pp} 2 or more",
            "first_stage_layers", "last_stage_layers", "pp",
        )


def _padded_split(topo: Topology) -> Iterator[Problem]:
    """The embedding or the loss counted as a layer slot (no uneven stage sizes given)."""
    lay, mod, pad = topo.layout, topo.model, topo.stages.pad
    named = [flag for flag, on in ((F.embedding_in_split, pad[0]),
                                   (F.loss_in_split, pad[1])) if on]
    if lay.first_stage_layers is not None or lay.last_stage_layers is not None:
        # megatron-core TransformerConfig.__post_init__ raises ValueError
        yield _found(
            "layers-not-divisible-by-pp",
            f"{' and '.join(named)} cannot be combined with uneven first/last pipeline "
            "stages: megatron-core refuses both at once.",
            f"drop {F.first_stage_layers}/{F.last_stage_layers} or {' / '.join(named)}",
            "first_stage_layers", "last_stage_layers", "pp",
        )
        return
    slots = mod.layers + sum(pad)
    pps = [p for p in _divisors(slots) if topo.world_size % (lay.tp * lay.cp * p) == 0]
    yield _found(
        "layers-not-divisible-by-pp",
        f"{mod.layers} layers + {sum(pad)} ({' and '.join(named)}) = {slots} cannot be "
        f"split evenly over pp = {lay.pp} stages ({slots}/{lay.pp} = "
        f"{slots / lay.pp:.2f}); megatron-core get_num_layers_to_build asserts it.",
        f"try {F.pp} {_or(_nearest(pps, lay.pp))}",
        "layers", "pp",
    )


def _uneven_split(topo: Topology) -> Iterator[Problem]:
    """No stage sizes fit: the layers (or those left after uneven first/last stages)."""
    lay, mod = topo.layout, topo.model
    if lay.first_stage_layers is None and lay.last_stage_layers is None:
        pps = [
            p for p in _divisors(mod.layers)
            if topo.world_size % (lay.tp * lay.cp * p) == 0
        ]
        yield _found(
            "layers-not-divisible-by-pp",
            f"{mod.layers} layers cannot be split evenly over pp = {lay.pp} stages "
            f"({mod.layers}/{lay.pp} = {mod.layers / lay.pp:.2f}).",
            f"try {F.pp} {_or(_nearest(pps, lay.pp))}, or give "
            f"{F.first_stage_layers}/{F.last_stage_layers}",
            "layers", "pp",
        )
    else:
        given = [x for x in (lay.first_stage_layers, lay.last_stage_layers) if x is not None]
        middle = lay.pp - len(given)
        rest = mod.layers - sum(given)
        yield _found(
            "layers-not-divisible-by-pp",
            f"after the uneven stages ({' + '.join(map(str, given))} layers), {rest} layers "
            f"remain for {middle} middle stage(s), which cannot be split evenly.",
            "choose first/last stage sizes so that the remaining layers divide by the "
            "number of remaining stages",
            "layers", "pp", "first_stage_layers", "last_stage_layers",
        )


def _stage_counts(topo: Topology) -> Iterator[Problem]:
    """Stage sizes known: an empty stage, or chunks (vpp) that do not divide them."""
    lay, mod = topo.layout, topo.model
    counts, pad = topo.stages.counts, topo.stages.pad
    if 0 in counts and not any(pad):
        # megatron-core TransformerConfig.__post_init__ (uneven PP): first/last stage sizes must
        # be > 0 and middle stages need layers, else ValueError
        yield _found(
            "layers-not-divisible-by-pp",
            f"stage layer counts {list(counts)} leave a pipeline stage without layers; "
            "Megatron refuses an empty first, last or middle stage.",
            f"choose {F.first_stage_layers}/{F.last_stage_layers} "
            "that leave every stage at least one layer",
            "layers", "pp", "first_stage_layers", "last_stage_layers",
        )
        return
    if lay.vpp_layers is not None and mod.layers % (lay.pp * lay.vpp_layers):
        yield _found(
            "layers-not-divisible-by-pp",
            f"{mod.layers} layers do not split into pp = {lay.pp} stages of chunks of "
            f"{lay.vpp_layers} layers ({mod.layers}/({lay.pp}*{lay.vpp_layers}) = "
            f"{mod.layers / (lay.pp * lay.vpp_layers):.2f}).",
            f"try {F.vpp_layers} "
            + _or([d for d in _divisors(mod.layers // lay.pp) if d < mod.layers // lay.pp][-2:]
                  or [mod.layers // lay.pp]),
            "layers", "pp", "vpp_layers",
        )
        return
    # with the embedding / loss in the split, each stage's layers + pad slots split over vpp
    slots = [(mod.layers + sum(pad)) // lay.pp] * lay.pp if any(pad) else counts
    bad = [c for c in slots if c % topo.stages.chunks]
    if bad:
        yield _found(
            "layers-not-divisible-by-pp",
            f"stage layer counts {list(counts)} do not split into "
            f"vpp = {topo.stages.chunks} virtual "
            f"stages each ({bad[0]}/{topo.stages.chunks} = {bad[0] / topo.stages.chunks:.2f}).",
            f"try {F.vpp} "
            + _or([v for v in _divisors(min(counts)) if all(c % v == 0 for c in counts)][-2:]),
            "layers",
            "pp",
            "vpp",
        )


@rule(
    source=("Megatron-LM training/arguments.py validate_args; megatron/core/parallel_state.py "
            "initialize_model_parallel"),
    codes={
        "vpp-requires-pp": ("error", "virtual pipeline given with pp == 1",
            "--num-virtual-stages-per-pipeline-rank 6"),
    },
    uses=("layers-not-divisible-by-pp",),
)
def vpp_needs_pp(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM training/arguments.py validate_args: at most one way to give the virtual
    pipeline; --num-layers-per-virtual-pipeline-stage not with uneven first/last stages; a
    virtual size of 1 becomes None (no interleaving, accepted with any pp); a larger one needs
    pp > 1 (also parallel_state.initialize_model_parallel raises RuntimeError)."""
    lay, mod = topo.layout, topo.model
    if not builds_megatron(topo):
        return
    if lay.vpp is not None and lay.vpp_layers is not None:
        yield _found(
            "vpp-requires-pp",
            f"both {F.vpp} and "
            f"{F.vpp_layers} were given: Megatron accepts only one.",
            f"keep {F.vpp}, drop the other",
            "vpp", "vpp_layers",
        )
        return
    if lay.vpp_layers is not None and (lay.first_stage_layers is not None
                                        or lay.last_stage_layers is not None):
        yield _found(
            "vpp-requires-pp",
            f"{F.vpp_layers} cannot be combined with uneven first/last "
            f"pipeline stages: Megatron asserts {F.vpp} instead.",
            f"use {F.vpp} N",
            "vpp_layers", "first_stage_layers", "last_stage_layers",
        )
        return
    if lay.pp != 1:
        return
    if lay.vpp == 1:
        return  # validate_args: a virtual size of 1 is no virtual pipeline
    if lay.vpp_layers is not None:
        if mod.layers is None:
            yield _skip(
                "vpp-requires-pp",
                f"{F.vpp_layers} with pp = 1: whether it makes more than "
                f"one virtual stage (refused) depends on {F.layers}, which is not given.",
                f"give {F.layers}, or drop {F.vpp_layers}",
                "vpp_layers", "layers",
            )
            return
        if mod.layers % lay.vpp_layers == 0 and mod.layers // lay.vpp_layers == 1:
            return  # one chunk per stage: no virtual pipeline
        if mod.layers % lay.vpp_layers:
            yield _found(
                "layers-not-divisible-by-pp",
                f"{mod.layers} layers do not split into chunks of {lay.vpp_layers} layers "
                f"({mod.layers}/{lay.vpp_layers} = {mod.layers / lay.vpp_layers:.2f}); "
                "Megatron asserts layers per stage % layers per virtual stage == 0.",
                f"drop {F.vpp_layers} (pp = 1 has no virtual pipeline)",
                "layers", "vpp_layers",
            )
            return
    if lay.vpp is not None or lay.vpp_layers is not None:
        given = "vpp_layers" if lay.vpp_layers is not None else "vpp"
        yield _found(
            "vpp-requires-pp",
            "a virtual pipeline was given but pp = 1: interleaving needs at least two "
            "pipeline stages.",
            f"drop {flag_of(given)}, or set {F.pp} 2 or more",
            given, "pp",
        )


@rule(
    source="megatron/core/transformer/moe/moe_layer.py MoELayer.forward; Megatron-LM validate_args",
    codes={
        "moe-tp-requires-sp": ("error", f"MoE model with TP > 1 and no `{F.sp}`",
            "--tensor-model-parallel-size 6 --num-experts 4"),
        "sp-ignored": ("warning", f"`{F.sp}` with TP 1",
            "--sequence-parallel"),
    },
)
def moe_needs_sp(topo: Topology) -> Iterator[Problem]:
    """megatron/core/transformer/moe/moe_layer.py MoELayer.forward raises ValueError in training
    when TP > 1 without sequence parallel (ModelParallelConfig only warns); Megatron-LM
    validate_args turns SP off with a warning when tp == 1."""
    if not builds_megatron(topo):
        return
    if topo.model.is_moe and topo.layout.tp > 1 and not topo.layout.sp:
        yield _found(
            "moe-tp-requires-sp",
            f"an MoE model with tp = {topo.layout.tp} trains only with sequence parallel on "
            "(Megatron refuses MoE with TP > 1 and no SP).",
            f"add {F.sp}",
            "sp", "tp",
        )
    if topo.layout.sp and topo.layout.tp == 1:
        yield _found(
            "sp-ignored",
            f"{F.sp} has no effect with tp = 1; Megatron drops it.",
            f"remove {F.sp}, or raise {F.tp}",
            "sp", "tp",
        )
