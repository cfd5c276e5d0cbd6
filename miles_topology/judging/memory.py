"""Will it fit? Per-rank GPU memory of a miles job, from the Topology and the model shape.

One pure module: the Topology is read in one place (`layout_of`), the model shape the Topology
does not hold (hidden size, vocabulary, MLA ranks, ...) comes from the launch flags or an HF
config.json (`Shape`). Parameters per rank are exact (tests/test_memory_parity.py builds
megatron-core's GPTModel and compares every rank); bytes follow miles' precision; activations
are an estimate by a published formula.

Sources:
- Parameters: megatron-core 0.16 GPTModel as built by Megatron-LM (embedding on the first
  stage and on the MTP stage; output layer on the last stage unless it is the first and the
  embedding is tied; decoder layers per `Topology.stage_layers`; experts per
  `Topology.local_experts` sharded by etp; router and norms replicated; MTP layers on the last
  virtual stage of the last pipeline stage, built like the last decoder layer).
  Megatron-LM training/theoretical_memory_usage.py compute_weight_and_optimizer_memory
  states the same sums but, up to core_v0.18 (commit a7c9e8c4), divided every parameter by
  tp and pp only: all experts of a layer on every rank (see `megatron_formula`).
- Bytes per parameter: the same file (bf16 weights 2 B, fp32 main grads 4 B, fp32 master
  weights and Adam moments 12 B, sharded by the distributed optimizer); the optimizer shards
  dense state over dp x cp (megatron-core DistributedDataParallel's intra_dp_cp group) and
  expert state over edp (the expert data-parallel group). miles turns the distributed
  optimizer on for Adam and bf16 on unless fp16 (miles backends/megatron_utils/arguments.py
  set_default_megatron_args).
- Activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models" (arXiv 2205.05198), Table 2, as generalised in theoretical_memory_usage.py
  compute_activation_memory (sbh(18 + 4 f/h) per layer with sequence parallel and selective
  recompute; sbh(10 + 24/t) without SP), the MLP's share as megatron-core's keeps it
  (`mlp_ratio`: SwiGLU 6 f/h, a MoE layer's routed token copies 2 k etp; measured on its
  MoELayer); pipeline stage p holds pp - p micro-batches in
  flight, times the interleaving penalty 1 + (pp-1)/(pp vpp); with full recompute each keeps
  only its layers' inputs and the one layer redone in a backward is counted once.
- Rollout: SGLang's static memory (--sglang-mem-fraction-static of the GPU) holds the
  weights and the KV pool (sglang srt/model_executor/model_runner.py profile_max_num_token).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..model.gpus import GPUS
from ..reading.flags import text_of

if TYPE_CHECKING:
    from ..model.topology import Topology

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
               "fp8": 1}


def gpu_bytes(name: str) -> int | None:
    """Memory of a GPU model by name (pylaunch/cluster.py's table), e.g. H100 -> 80 GiB."""
    got = GPUS.get(name.upper())
    return got[1] * MIB if got else None


# ---- the model shape the Topology does not hold ------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Model facts beyond the Topology's, with Megatron-LM's defaults (training/arguments.py).

    `vocab` None: unknown (miles reads it from the tokenizer), counted as 0, so figures are a
    lower bound (`vocab_known`)."""

    hidden: int
    ffn: int | None = None  # None: 4h, or 2/3 of that rounded to 64 with swiglu
    vocab: int | None = None
    vocab_multiple: int = 128  # --make-vocab-size-divisible-by
    kv_channels: int | None = None  # None: hidden / heads
    moe_ffn: int | None = None  # None: ffn
    shared_ffn: int = 0
    shared_gate: bool = False
    swiglu: bool = False
    rms: bool = False
    bias: bool = True  # --add-bias-linear (Megatron's default; --disable-bias-linear)
    qkv_bias: bool = False
    qk_norm: bool = False
    tied: bool = True  # Megatron ties unless --untie-embeddings-and-output-weights
    learned_pos: int = 0  # learned absolute position embeddings: max positions (else 0)
    mla: bool = False
    q_lora: int | None = None
    kv_lora: int = 512
    qk_head: int = 128
    rope_head: int = 64
    v_head: int = 128
    groups: int | None = None  # query groups as Megatron builds them (None: the Topology's)
    output_gate: bool = False  # --attention-output-gate: heads x kv more QKV columns
    dispatcher: str = "allgather"  # --moe-token-dispatcher-type (Megatron's default)

    @property
    def vocab_known(self) -> bool:
        return self.vocab is not None

    def ffn_size(self) -> int:
        if self.ffn is not None:
            return self.ffn
        return int(4 * self.hidden * 2 / 3 / 64) * 64 if self.swiglu else 4 * self.hidden

    def padded_vocab(self, tp: int) -> int:
        """Megatron-LM tokenizer._vocab_size_with_padding: a multiple of multiple x tp."""
        if self.vocab is None:
            return 0
        step = self.vocab_multiple * tp
        return -(-self.vocab // step) * step


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of the weights, main grads and optimizer state (Adam)."""

    weight: int = 2  # bf16
    grad: int = 4  # fp32 main grads
    master: int = 4  # fp32 master weights (0 in fp32 training)
    moments: int = 8  # Adam exp_avg + exp_avg_sq in fp32
    distributed: bool = True  # miles' default for Adam
    offload: float = 0.0  # --optimizer-cpu-offload: the fraction of optimizer state on the CPU

    @property
    def optimizer(self) -> int:
        return self.master + self.moments


@dataclass(frozen=True)
class Run:
    """What sets the activations and the rollout memory; `reserve`: bytes a rank holds beyond
    its tensors (`reserve_bytes`)."""

    tokens: int | None = None  # tokens of one micro-batch on one rank (after cp)
    recompute: str | None = None  # None, "selective" or "full"
    mem_fraction: float | None = None  # --sglang-mem-fraction-static
    reserve: int = 0


# What a training process holds on a GPU beyond weights, grads, optimizer state and
# activations, in GiB (a judgment from the sources, frozen here):
# - CUDA context with PyTorch's kernels, cuBLAS and cuDNN workspaces: about 1 GiB per process
#   on NVIDIA and AMD GPUs alike (PyTorch "CUDA semantics" notes: the context is created
#   lazily and holds hundreds of MiB; larger with more kernels loaded);
# - NCCL communicator buffers: slime's v0.1.0 release post
#   (https://thudm.github.io/slime/blogs/release_v0.1.0.html) measured more than 10 GB on
#   large MoE jobs before its fixes and 3-5 GB after; 4 GiB, the middle;
# - allocator fragmentation: 3 % of the GPU's memory (PyTorch's caching allocator rounds
#   and splits blocks; the share grows with the memory in use).
RESERVE_CONTEXT_GIB = 1.0
RESERVE_NCCL_GIB = 4.0
RESERVE_FRAGMENTATION = 0.03


def reserve_bytes(gpu: int | None, colocated: bool = False) -> int:
    """The per-GPU reserve (see above) for a GPU of `gpu` bytes; 0 when the GPU is unknown.
    `colocated`: a rollout engine's process shares the GPU and keeps its own CUDA context
    while it sleeps during training (SGLang releases its weights and KV cache only)."""
    if not gpu:
        return 0
    contexts = 2 if colocated else 1
    return int((contexts * RESERVE_CONTEXT_GIB + RESERVE_NCCL_GIB) * GIB
               + RESERVE_FRAGMENTATION * gpu)


# ---- reading the Topology: the one adapter -----------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """What the estimate reads from a Topology; `layout_of` is the only place that reads it."""

    world: int
    tp: int
    cp: int
    pp: int
    ep: int
    etp: int
    dp: int
    edp: int
    vpp: int
    sp: bool
    layers: int
    heads: int
    groups: int
    experts: int
    topk: int
    mtp: int
    moe: tuple[bool, ...]
    stages: tuple[tuple[tuple[int, ...], ...], ...]  # [pp][vpp] -> decoder layer ids
    experts_on: tuple[int, ...]  # per pp stage: experts a rank of it holds (local_experts)
    stage_of: Callable[[int], int] = field(compare=False, repr=False)  # rank -> pp stage
    nodes: int = 1
    engine_tp: int = 1
    engine_ep: int = 1
    engine_dp: int = 1
    dp_attention: bool = False
    engines: int = 0


# The largest sizes the estimate models (fit.too_large; docs/sandbox.md "Bounds"): far above
# any real job (~200 layers, ~400 experts), low enough that what is computed per layer or
# stage stays well under a second. Past them the estimate is skipped with the reason.
MAX_LAYERS = 10_000
MAX_EXPERTS = 1 << 16
MAX_STAGES = MAX_LAYERS


def layout_of(topo: Topology) -> Sizes:
    """The one adapter from the Topology: sizes, stage layers (`stage_layers`, uneven
    first/last stages included) and expert ownership (`local_experts`), never re-derived."""
    lay, model, stages, grid = topo.layout, topo.model, topo.stages, topo.grid("dense")
    if model.layers is None or model.heads is None:
        raise ValueError("the memory estimate needs --num-layers and --num-attention-heads")
    layers = tuple(tuple(topo.stage_layers(p, v) for v in range(stages.chunks))
                   for p in range(lay.pp))
    owners = tuple(len(topo.local_experts(grid.rank(pp=p))) if model.is_moe else 0
                   for p in range(lay.pp))
    return Sizes(
        world=topo.world_size, tp=lay.tp, cp=lay.cp, pp=lay.pp, ep=lay.ep, etp=lay.etp,
        dp=topo.dp, edp=topo.edp, vpp=stages.chunks, sp=lay.sp, layers=model.layers,
        heads=model.heads, groups=model.query_groups or model.heads,
        experts=(model.experts or 0) if model.is_moe else 0, topk=model.topk,
        mtp=model.mtp_layers or 0,
        moe=model.moe_pattern or (False,) * model.layers, stages=layers, experts_on=owners,
        stage_of=lambda rank: grid.coord(rank)["pp"], nodes=lay.nodes,
        engine_tp=topo.rollout.engine_size, engine_ep=topo.rollout.engine_ep_used(lay.framework),
        engine_dp=topo.rollout.engine_dp, dp_attention=topo.rollout.dp_attention,
        engines=topo.placement_group.rollout_engines,
    )


def vary(topo: Topology, **sizes: Any) -> Topology:
    """The same job with some layout sizes changed, validated again (every rule runs); what
    was inferred (etp from tp) is inferred again. Raises TopologyError."""
    return topo.model_copy(update=sizes)


# ---- parameters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Parameters on one rank: dense (sharded over dp x cp by the optimizer) and expert
    (sharded over edp)."""

    dense: int = 0
    expert: int = 0

    def __add__(self, other: Params) -> Params:
        return Params(self.dense + other.dense, self.expert + other.expert)

    def __mul__(self, k: int) -> Params:
        return Params(self.dense * k, self.expert * k)

    @property
    def total(self) -> int:
        return self.dense + self.expert


class Counter:
    """Parameter counts of the pieces of the model on one rank of a layout (exact)."""

    def __init__(self, shape: Shape, lay: Sizes):
        self.s, self.l = shape, lay
        self._layers: dict[tuple[bool, int], Params] = {}
        self._stages: dict[int, Params] = {}

    def norm(self, d: int) -> int:
        return d if self.s.rms else 2 * d

    @property
    def groups(self) -> int:
        return self.s.groups or self.l.groups

    def column(self, d_in: int, d_out: int, tp: int, bias: bool) -> int:
        """ColumnParallelLinear: d_out split over tp (its bias too)."""
        return d_in * d_out // tp + (d_out // tp if bias else 0)

    def row(self, d_in: int, d_out: int, tp: int, bias: bool) -> int:
        """RowParallelLinear: d_in split over tp; the bias is whole on every rank."""
        return d_in // tp * d_out + (d_out if bias else 0)

    @cached_property
    def attention(self) -> int:
        s, lay, h, t = self.s, self.l, self.s.hidden, self.l.tp
        if s.mla:  # megatron-core MLASelfAttention with Transformer Engine (what miles runs)
            qh = s.qk_head + s.rope_head
            down_tp = 1  # TELinear(parallel_mode="duplicated"): q/kv down projections whole
            if s.q_lora is None:
                q = self.column(h, lay.heads * qh, t, False)
            else:
                q = (self.column(h, s.q_lora, down_tp, False)
                     + self.column(s.q_lora, lay.heads * qh, t, False)
                     + (self.norm(s.q_lora) if s.qk_norm else 0))
            kv = (self.column(h, s.kv_lora + s.rope_head, down_tp, False)
                  + self.column(s.kv_lora, lay.heads * (s.qk_head + s.v_head), t, False)
                  + (self.norm(s.kv_lora) if s.qk_norm else 0))
            return q + kv + self.row(lay.heads * s.v_head, h, t, s.bias)
        kv = s.kv_channels or h // lay.heads
        # megatron-core SelfAttention: the output gate adds heads x kv_channels columns
        qkv = (lay.heads * (2 if s.output_gate else 1) + 2 * self.groups) * kv
        norms = 2 * self.norm(kv) if s.qk_norm else 0
        return (self.column(h, qkv, t, s.bias or s.qkv_bias) + norms
                + self.row(lay.heads * kv, h, t, s.bias))

    def mlp(self, ffn: int, tp: int, bias: bool) -> int:
        gate = 2 if self.s.swiglu else 1
        return self.column(self.s.hidden, ffn * gate, tp, bias) + self.row(ffn, self.s.hidden,
                                                                          tp, bias)

    def layer(self, moe: bool, local_experts: int) -> Params:
        key = (moe, local_experts)
        if key not in self._layers:
            self._layers[key] = self._layer(moe, local_experts)
        return self._layers[key]

    def _layer(self, moe: bool, local_experts: int) -> Params:
        s, h = self.s, self.s.hidden
        common = self.attention + 2 * self.norm(h)  # input and pre-MLP norms
        if not moe:
            return Params(common + self.mlp(s.ffn_size(), self.l.tp, s.bias))
        router = self.l.experts * h + (self.l.experts if s.bias else 0)
        shared = (self.mlp(s.shared_ffn, self.l.tp, False) if s.shared_ffn else 0) + (
            h if s.shared_ffn and s.shared_gate else 0)
        expert = self.mlp(s.moe_ffn or s.ffn_size(), self.l.etp, s.bias) * local_experts
        return Params(common + router + shared, expert)

    @cached_property
    def embedding(self) -> int:
        return self.s.padded_vocab(self.l.tp) * self.s.hidden // self.l.tp + (
            self.s.learned_pos * self.s.hidden)

    def chunk(self, p: int, v: int) -> Params:
        """One model chunk (pipeline stage p, virtual stage v), as GPTModel builds it."""
        lay, h = self.l, self.s.hidden
        pre = p == 0 and v == 0
        post = p == lay.pp - 1 and v == lay.vpp - 1
        mtp = post and lay.mtp > 0
        ids = lay.stages[p][v]  # two kinds of layer: counted, not summed layer by layer
        moe = sum(1 for i in ids if lay.moe[i])
        got = Params()
        if moe:
            got += self.layer(True, lay.experts_on[p]) * moe
        if len(ids) > moe:
            got += self.layer(False, lay.experts_on[p]) * (len(ids) - moe)
        d = 0
        if pre or mtp:
            d += self.embedding
        if post:
            d += self.norm(h)  # the decoder's final norm
            if not (pre and self.s.tied):  # tied on one stage: the output layer reuses it
                d += self.s.padded_vocab(lay.tp) * h // lay.tp
        if mtp:  # enorm, hnorm, eh_proj (2h -> h, column), final norm, and the layer itself
            one = Params(3 * self.norm(h) + self.column(2 * h, h, lay.tp, False))
            got += (one + self.layer(lay.moe[-1], lay.experts_on[p])) * lay.mtp
        return got + Params(d)

    def stage(self, p: int) -> Params:
        if p not in self._stages:
            got = Params()
            for v in range(self.l.vpp):
                got += self.chunk(p, v)
            self._stages[p] = got
        return self._stages[p]


# ---- bytes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankMemory:
    """Bytes on one train rank; `activations` is an estimate (None: tokens unknown)."""

    stage: int
    params: Params
    weights: int
    grads: int
    optimizer: int
    activations: int | None
    reserve: int = 0  # CUDA context, NCCL buffers, fragmentation (`reserve_bytes`)

    @property
    def static(self) -> int:
        """Weights, grads and optimizer state on the GPU: certain, before any activation."""
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.static + (self.activations or 0) + self.reserve

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "params": self.params.total,
                "expert_params": self.params.expert, "weights_gib": gib(self.weights),
                "grads_gib": gib(self.grads), "optimizer_gib": gib(self.optimizer),
                "activations_gib": None if self.activations is None else gib(self.activations),
                "reserve_gib": gib(self.reserve), "total_gib": gib(self.total)}


def gib(n: float) -> float:
    return round(n / GIB, 2)


def mlp_ratio(shape: Shape, lay: Sizes, moe: bool) -> float:
    """Bytes an MLP keeps for its backward a token of the rank's share, over the hidden
    size (its input aside: Table 2's 18 counts it). Table 2's 4 f/h is a GeLU MLP's: the fc1
    output and the activation's output, 2 B each a unit of width f. A SwiGLU keeps fc1's
    output of 2 f (4 f B) and fc2's input of f (2 f B): 6 f/h. A MoE layer's routed experts
    also keep their copies of the tokens (fc1's input, for its weight gradient: top-k x etp
    rows of h, 2 B each, a token of the sequence-parallel share). Measured on megatron-core
    0.16's MoELayer with the fused weighted SwiGLU (tools/moe_activations.py: 2 k h + 6 k f
    bytes a token; tests/miles/test_moe_activations.py)."""
    per = 6 if shape.swiglu else 4
    if not moe:
        return per * shape.ffn_size() / shape.hidden
    width = lay.topk * (shape.moe_ffn or shape.ffn_size()) + shape.shared_ffn
    return per * width / shape.hidden + 2 * lay.topk * lay.etp


def activations(shape: Shape, lay: Sizes, run: Run, p: int) -> int | None:
    """Activation bytes of pipeline stage p (estimate; see the module docstring)."""
    if run.tokens is None:
        return None
    sbh, t = run.tokens * shape.hidden, lay.tp
    layers = sum(len(c) for c in lay.stages[p])
    if lay.mtp and p == lay.pp - 1:
        layers += lay.mtp

    moe_share = sum(lay.moe[i] for c in lay.stages[p] for i in c) / max(layers, 1)
    ratio = moe_share * mlp_ratio(shape, lay, True) + (1 - moe_share) * mlp_ratio(shape, lay,
                                                                                   False)
    full_layer = sbh * (18 + ratio) / t if lay.sp else sbh * (10 + (8 + ratio) / t)
    one = 0.0
    if run.recompute == "full":
        # every micro-batch in flight keeps only each layer's input; the one layer redone
        # in a backward exists once: backwards run one at a time on a rank (Korthikanti et
        # al. section 4.1: "only the input to each transformer layer is stored"; megatron-core
        # tensor_parallel/random.py CheckpointFunction recomputes inside the backward)
        per = 2 * sbh / (t if lay.sp else 1) * layers
        one = full_layer
    else:
        per = full_layer * layers
    in_flight = lay.pp - p
    if lay.vpp > 1:
        per *= 1 + (lay.pp - 1) / (lay.pp * lay.vpp)
    act = per * in_flight + one
    if p == 0:  # embedding input and dropout, pp micro-batches in flight
        act += (8 * run.tokens + sbh) * lay.pp / (t if lay.sp else 1)
    if p == lay.pp - 1:
        # the output layer's inputs, and the RL loss's logits: a rank's [tokens, vocab / tp],
        # 12 bytes an element at the loss's backward, counted from the code. Each sample's
        # log-prob keeps an fp32 buffer of its slice for the backward (miles:
        # loss_hub/math_utils.py calculate_log_probs_and_entropy takes an fp32 copy that
        # megatron-core's fused cross-entropy turns into exp in place; slime:
        # utils/ppo_utils.py _VocabParallelLogProbEntropy saves its softmax): 4 over the
        # micro-batch. A sample is a slice of the logits (get_responses), and a slice's
        # backward is a zero-filled fp32 tensor of the whole logits, added into the gradient
        # gathered so far: the gradient (4) and the next sample's slice gradient (4) live
        # beside the saved buffers. (The forward holds 8: the fp32 logits megatron-core's
        # Float16Module casts and the saved buffers; not counted: one sample's entropy copies,
        # `--rollout-temperature`'s copy of the logits.)
        act += 4 * sbh / t + 12 * run.tokens * shape.padded_vocab(t) / t
    return int(act)


@dataclass(frozen=True)
class Estimate:
    """Per-stage figures of a layout (every rank of a stage holds the same)."""

    layout: Sizes
    shape: Shape
    stages: tuple[RankMemory, ...]

    def rank(self, rank: int) -> RankMemory:
        return self.stages[self.layout.stage_of(rank)]

    @property
    def largest(self) -> RankMemory:
        return max(self.stages, key=lambda m: (m.total, m.static))

    @property
    def largest_static(self) -> RankMemory:
        return max(self.stages, key=lambda m: m.static)


def train_memory(shape: Shape, lay: Sizes, prec: Precision = Precision(),
                 run: Run = Run(), counter: Counter | None = None) -> Estimate:
    """Per-rank training memory of every pipeline stage: the one function (see module doc).
    `counter`: the layout's Counter, when the caller estimates it more than once."""
    counter = counter or Counter(shape, lay)
    out = []
    for p in range(lay.pp):
        par = counter.stage(p)
        n = par.total
        if prec.distributed:
            opt = par.dense / (lay.dp * lay.cp) + par.expert / lay.edp
        else:
            opt = n
        opt_bytes = int(opt * prec.optimizer * (1 - prec.offload))
        out.append(RankMemory(p, par, n * prec.weight, n * prec.grad, opt_bytes,
                              activations(shape, lay, run, p), run.reserve))
    return Estimate(lay, shape, tuple(out))


def megatron_formula(shape: Shape, lay: Sizes) -> int:
    """Parameters on the most loaded shard as Megatron-LM's theoretical_memory_usage.py
    computed them up to core_v0.18 (commit a7c9e8c4): everything / (tp x pp), experts too."""
    c = Counter(replace(shape, vocab_multiple=shape.vocab_multiple), replace(
        lay, tp=1, etp=1, experts_on=(lay.experts,) * lay.pp))
    block = sum(c.layer(lay.moe[i], lay.experts).total for i in range(lay.layers)) + c.norm(
        shape.hidden)
    mtp = lay.mtp * c.layer(lay.moe[-1], lay.experts).total
    emb = shape.padded_vocab(lay.tp) * shape.hidden
    untied = emb if not shape.tied and lay.pp == 1 else 0
    return int((block / lay.pp + mtp + emb + untied) / lay.tp)


# ---- rollout engines -----------------------------------------------------------------------


@dataclass(frozen=True)
class EngineMemory:
    """One rollout engine GPU: weights and what the static fraction leaves for the KV cache."""

    weights: int
    kv_bytes_per_token: int
    kv_tokens: int | None  # None: --sglang-mem-fraction-static or the GPU unknown
    sizes: tuple[int, int, int] = (1, 1, 1)  # the engine's tp, ep (as SGLang runs it), dp

    def as_dict(self) -> dict[str, Any]:
        tp, ep, dp = self.sizes
        return {"weights_gib": gib(self.weights), "kv_bytes_per_token": self.kv_bytes_per_token,
                "kv_tokens": self.kv_tokens, "tp": tp, "ep": ep, "dp": dp}


def engine_memory(shape: Shape, lay: Sizes, gpu: int | None, fraction: float | None
                  ) -> EngineMemory:
    """Weights per engine GPU (bf16) and KV tokens per GPU.

    SGLang shards attention over tp / dp under DP attention (else tp) and the experts over
    the engine's tp GPUs whether by expert parallel (whole experts per EP rank) or by TP
    (a slice of each): either way 1/tp of them on a GPU. KV per token: K and V of the query
    groups a GPU holds (at least one), or MLA's compressed kv_lora + rope per layer,
    replicated on every GPU (sglang srt/mem_cache/memory_pool.py MLATokenToKVPool)."""
    full = Counter(shape, replace(lay, tp=1, etp=1, experts_on=(lay.experts,) * lay.pp))
    attn_tp = max(1, lay.engine_tp // lay.engine_dp) if lay.dp_attention else lay.engine_tp
    attn = full.attention * lay.layers
    dense_rest = sum(full.layer(m, lay.experts).dense for m in lay.moe) - attn
    expert = sum(full.layer(m, lay.experts).expert for m in lay.moe)
    emb = shape.padded_vocab(1) * shape.hidden * (1 if shape.tied else 2)
    weights = 2 * (attn // attn_tp + (dense_rest + expert + emb) // lay.engine_tp)
    if shape.mla:
        per_token = (shape.kv_lora + shape.rope_head) * lay.layers * 2
    else:
        kv = shape.kv_channels or shape.hidden // lay.heads
        per_token = 2 * max(1, (shape.groups or lay.groups) // attn_tp) * kv * lay.layers * 2
    tokens = None
    if gpu is not None and fraction is not None:
        tokens = max(0, int(gpu * fraction) - weights) // per_token
    return EngineMemory(weights, per_token, tokens,
                        (lay.engine_tp, lay.engine_ep, lay.engine_dp if lay.dp_attention else 1))


# ---- reading the shape: flags and HF config.json --------------------------------------------


# the flags beyond the Topology's that the estimate reads (an unknown one: no estimate)
READS = (
    "--hidden-size", "--ffn-hidden-size", "--vocab-size", "--make-vocab-size-divisible-by",
    "--kv-channels", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--swiglu", "--normalization", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm",
    "--untie-embeddings-and-output-weights", "--position-embedding-type", "--seq-length",
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--optimizer", "--use-precision-aware-optimizer",
    "--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-dynamic-batch-size",
    "--max-tokens-per-gpu", "--rollout-max-response-len", "--rollout-max-prompt-len",
    "--micro-batch-size", "--recompute-granularity", "--sglang-mem-fraction-static",
    "--fp8-param-gather", "--use-megatron-fsdp", "--use-torch-fsdp2", "--spec",
    "--megatron-to-hf-mode", "--moe-latent-size", "--use-rotary-position-embeddings",
    "--group-query-attention", "--moe-shared-expert-gate", "--attention-output-gate",
    "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--fp16",
)


def flag_values(argv: Sequence[str]) -> dict[str, str | None]:
    """--name value / --name=value / --switch -> {name: value or None}; the last one wins."""
    argv = [str(text_of(w)) for w in argv]
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                out[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[name] = argv[i + 1]
                i += 1
            else:
                out[name] = None
        i += 1
    return out


def _int(v: Mapping[str, str | None], name: str) -> int | None:
    """A positive whole number, else None (unknown: Megatron's parser would refuse it)."""
    got = v.get(name)
    try:
        n = int(got) if got is not None else None
    except ValueError:
        return None
    return n if n is not None and n > 0 else None


def unmodelled(given: Mapping[str, str | None]) -> str | None:
    """Why the flags describe layers the estimate does not count (their parameters would be
    wrong): experts on a latent width (--moe-latent-size: two extra projections a MoE layer,
    the experts narrower) or a hybrid stack of Mamba layers (--hybrid-override-pattern)."""
    if "--moe-latent-size" in given or "--hybrid-override-pattern" in given:
        return "latent MoE or hybrid (Mamba) layers are not modelled"
    return None


def shape_from_flags(argv: Sequence[str]) -> Shape | None:
    """The model shape from Megatron's flags (None without --hidden-size)."""
    v = flag_values(argv)
    hidden = _int(v, "--hidden-size")
    if hidden is None:
        return None
    pos = v.get("--position-embedding-type", "learned_absolute")
    if "--use-rotary-position-embeddings" in v:  # Megatron-LM validate_args: legacy RoPE
        pos = "rope"
    # Megatron-LM core_transformer_config_from_args: num_query_groups only with
    # --group-query-attention (else full multi-head attention); its default is 1
    heads = _int(v, "--num-attention-heads")
    if "--group-query-attention" in v:
        groups = _int(v, "--num-query-groups") or 1
    else:
        groups = heads
    return Shape(
        hidden=hidden, ffn=_int(v, "--ffn-hidden-size"), vocab=_int(v, "--vocab-size"),
        vocab_multiple=_int(v, "--make-vocab-size-divisible-by") or 128,
        kv_channels=_int(v, "--kv-channels"), moe_ffn=_int(v, "--moe-ffn-hidden-size"),
        shared_ffn=_int(v, "--moe-shared-expert-intermediate-size") or 0,
        swiglu="--swiglu" in v, rms=v.get("--normalization") == "RMSNorm",
        bias="--disable-bias-linear" not in v, qkv_bias="--add-qkv-bias" in v,
        qk_norm="--qk-layernorm" in v, tied="--untie-embeddings-and-output-weights" not in v,
        # miles: max_position_embeddings = seq_length (default 4096)
        learned_pos=(_int(v, "--seq-length") or 4096) if pos == "learned_absolute" else 0,
        mla="--multi-latent-attention" in v, q_lora=_int(v, "--q-lora-rank"),
        kv_lora=_int(v, "--kv-lora-rank") or 512, qk_head=_int(v, "--qk-head-dim") or 128,
        rope_head=_int(v, "--qk-pos-emb-head-dim") or 64, v_head=_int(v, "--v-head-dim") or 128,
        groups=groups, output_gate="--attention-output-gate" in v,
        shared_gate="--moe-shared-expert-gate" in v,
        dispatcher=v.get("--moe-token-dispatcher-type") or "allgather",
    )


def precision_from_flags(argv: Sequence[str]) -> Precision:
    """miles' precision: bf16 unless --fp16; Megatron's precision-aware optimizer dtypes;
    the distributed optimizer for Adam (miles set_default_megatron_args); CPU offload."""
    v = flag_values(argv)
    optimizer = (v.get("--optimizer") or "adam").lower()
    if "--use-precision-aware-optimizer" in v:
        def b(name: str, default: str) -> int:
            return DTYPE_BYTES.get((v.get(name) or default).lower(), 4)
        grad, master = b("--main-grads-dtype", "fp32"), b("--main-params-dtype", "fp32")
        moments = b("--exp-avg-dtype", "fp32") + b("--exp-avg-sq-dtype", "fp32")
    else:
        master, moments = 4, 8
        grad = DTYPE_BYTES.get((v.get("--main-grads-dtype") or "fp32").lower(), 4)
    # Megatron-LM validate_args: under bf16 (miles' default) main grads are fp32 unless
    # --grad-reduce-in-bf16 or --main-grads-dtype bf16 (accumulate_allreduce_grads_in_fp32
    # set for fp32 main grads); under --fp16 they are the params' fp16 unless
    # --accumulate-allreduce-grads-in-fp32; the DDP grad buffer is fp32 iff it is set
    # (megatron-core DistributedDataParallel: grad_reduce_in_fp32)
    if "--fp16" in v:
        grad = 4 if "--accumulate-allreduce-grads-in-fp32" in v else 2
    elif "--grad-reduce-in-bf16" in v:
        grad = 2
    offload = 0.0
    if "--optimizer-cpu-offload" in v:
        try:
            offload = float(v.get("--optimizer-offload-fraction") or 1.0)
        except ValueError:
            offload = 1.0
        if not 0 <= offload <= 1:  # out of range or nan: Megatron's default, all of it
            offload = 1.0
    # Megatron's --fp8-param-gather keeps the model weights in fp8 (1 B)
    weight = 1 if "--fp8-param-gather" in v else 2
    return Precision(weight=weight, grad=grad, master=master, moments=moments,
                     distributed=optimizer == "adam", offload=offload)


def run_from_flags(argv: Sequence[str], lay: Sizes) -> Run:
    """Tokens of one micro-batch on a rank: --max-tokens-per-gpu with dynamic batches, else
    micro-batch x (prompt + response length, or --seq-length) / cp."""
    v = flag_values(argv)
    tokens = None
    if "--use-dynamic-batch-size" in v and _int(v, "--max-tokens-per-gpu"):
        tokens = _int(v, "--max-tokens-per-gpu")
    else:
        length = _int(v, "--seq-length")
        resp = _int(v, "--rollout-max-response-len")
        if resp is not None:
            length = resp + (_int(v, "--rollout-max-prompt-len") or 0)
        if length is not None:
            tokens = (_int(v, "--micro-batch-size") or 1) * length // lay.cp
    rec = v.get("--recompute-granularity")
    frac = v.get("--sglang-mem-fraction-static")
    try:
        fraction = float(frac) if frac is not None else None
    except ValueError:
        fraction = None
    if fraction is not None and not 0 < fraction <= 1:
        fraction = None
    return Run(tokens=tokens, recompute=rec, mem_fraction=fraction)


HF_KEYS = {  # Shape / Topology fact <- HF config.json keys, first present wins
    "hidden": ("hidden_size",), "ffn": ("intermediate_size",), "vocab": ("vocab_size",),
    "heads": ("num_attention_heads",), "groups": ("num_key_value_heads",),
    "layers": ("num_hidden_layers",), "kv_channels": ("head_dim",),
    "experts": ("n_routed_experts", "num_experts", "num_local_experts"),
    "moe_ffn": ("moe_intermediate_size",), "topk": ("num_experts_per_tok",),
    "q_lora": ("q_lora_rank",), "kv_lora": ("kv_lora_rank",), "qk_head": ("qk_nope_head_dim",),
    "rope_head": ("qk_rope_head_dim",), "v_head": ("v_head_dim",),
}


def from_hf_config(cfg: Mapping[str, Any]) -> tuple[Shape, dict[str, Any]]:
    """(Shape, Topology model fields) from a Hugging Face config.json (Llama/Qwen/DeepSeek
    families: the keys in HF_KEYS, first_k_dense_replace / decoder_sparse_step /
    mlp_only_layers for the MoE layer pattern, n_shared_experts or
    shared_expert_intermediate_size)."""
    cfg = cfg.get("text_config", cfg)
    g: dict[str, Any] = {k: next((cfg[n] for n in names if cfg.get(n) is not None), None)
                         for k, names in HF_KEYS.items()}
    if g["hidden"] is None or g["layers"] is None or g["heads"] is None:
        raise ValueError("config.json lacks hidden_size, num_hidden_layers or "
                         "num_attention_heads")
    layers = int(g["layers"])
    fields: dict[str, Any] = {"layers": layers, "heads": g["heads"],
                              "query_groups": g["groups"] or g["heads"]}
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if g["experts"]:
        dense = int(cfg.get("first_k_dense_replace") or 0)
        step = int(cfg.get("decoder_sparse_step") or 1)
        only = set(cfg.get("mlp_only_layers") or ())  # Qwen MoE: dense layers by id
        fields.update(experts=int(g["experts"]), topk=int(g["topk"] or 2),
                      moe_layer_freq=tuple(int(i >= dense and (i + 1) % step == 0
                                               and i not in only) for i in range(layers)))
        if not shared and cfg.get("n_shared_experts"):
            shared = int(cfg["n_shared_experts"]) * int(g["moe_ffn"] or 0)
    # the MTP layers of the checkpoint (num_nextn_predict_layers) are not counted: miles'
    # and slime's model files for these checkpoints (deepseek-v3, kimi-k2, glm4.5) train
    # without --mtp-num-layers; give the flags to count them
    mla = g["kv_lora"] is not None
    shape = Shape(
        hidden=int(g["hidden"]), ffn=g["ffn"],
        vocab=g["vocab"], kv_channels=g["kv_channels"], moe_ffn=g["moe_ffn"], shared_ffn=shared,
        shared_gate=bool(shared and "shared_expert_intermediate_size" in cfg),
        swiglu=cfg.get("hidden_act", "silu") in ("silu", "swiglu"), rms=True,
        bias=False, qkv_bias=bool(cfg.get("attention_bias") or cfg.get("qkv_bias")),
        qk_norm=mla or "qwen3" in str(cfg.get("model_type", "")),
        tied=bool(cfg.get("tie_word_embeddings", False)), mla=mla, q_lora=g["q_lora"],
        kv_lora=g["kv_lora"] or 512, qk_head=g["qk_head"] or 128, rope_head=g["rope_head"] or 64,
        v_head=g["v_head"] or 128,
        dispatcher="alltoall",  # what miles' and slime's model files for these models use
    )
    return shape, fields


def read_hf_config(path: str) -> tuple[Shape, dict[str, Any]]:
    """An HF config.json: a bounded regular file (gate.py), never a FIFO or a device."""
    import os

    from ..reading import gate

    try:
        text = gate.read_text(path, (gate.Path(os.path.realpath(path)),),
                              limit=gate.AST_LIMIT, errors="strict")
    except gate.Refused as e:
        raise OSError(str(e)) from None
    return from_hf_config(json.loads(text))


__all__ = ["Counter", "Estimate", "Sizes", "Params", "Precision", "RankMemory", "Run",
           "Shape", "engine_memory", "from_hf_config", "gpu_bytes", "layout_of",
           "megatron_formula", "shape_from_flags", "train_memory"]
