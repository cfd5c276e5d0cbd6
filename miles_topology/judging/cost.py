"""Step time of a training layout: the ranking key of `plan` (an analytical model).

Every term is the time one training step spends on it on the slowest pipeline stage, so the
terms add up to the key (`Cost.total`); `plan --explain` prints them. The model, per rank:

- compute: the GEMMs of attention, the dense MLP, the router, the shared and the routed
  experts (2 x parameters a token passes through, the routed experts with their real
  matrix shapes: tokens per local expert x hidden x expert width / etp) and flash attention
  (2 x tokens x context x heads x head width / tp, causal), each by the roofline
  max(FLOPs / achievable FLOP/s, bytes / achievable HBM bandwidth); backward is twice the
  forward; the logits and the RL loss's fp32 passes over them (HBM-bound) on the last stage;
- recompute: full recompute runs each layer's forward (compute and its collectives) again;
- tp: per layer, sequence-parallel all-gathers and reduce-scatters of the layer's tokens
  ((tp-1)/tp of tokens x hidden x 2 B each), four in the forward, four in the backward, on
  NVLink inside a node, on the network when tp leaves it;
- cp: the ring exchange of K and V ((cp-1) steps, the backward's twice the forward's),
  what attention's compute does not hide;
- ep: the token all-to-all (dispatch and combine, each token to top-k experts; the share
  that leaves the rank's node on the network) and the etp all-gather / reduce-scatter of
  the dispatched tokens;
- pp_bubble: (pp - 1) / vpp stage times of the 1F1B schedule; pp_p2p: the activations sent
  between stages (vpp times as many with interleaving);
- dp / edp: the distributed optimizer's gradient reduce-scatter (main-grad bytes) and
  parameter all-gather (2 B) over dp x cp (dense) and edp (experts);
- optimizer: Adam on the GPU (HBM-bound), or with CPU offload the PCIe copies (grads
  down, parameters up) pipelined with CPU Adam (the longer of the two).

- latency: a fixed time a layer a micro-batch and a local expert a MoE layer (kernel
  launches, host overhead, collective latency: measured, `LAYER_LATENCY`); full recompute
  runs the forward's third of it again;

Micro-batches a step: the tokens of a step / (dp x cp x tokens a rank's micro-batch). Not
modelled: overlap of communication with compute beyond the CP ring (conservative for
every layout alike), load imbalance among experts, elementwise kernels inside the layers
(they scale like the GEMMs), the RL step's log-prob passes and weight update.

Constants: `HARDWARE` and the efficiencies below, frozen with their sources before any
ranking was compared with an expert's layout; they are not fitted to any answer. Added
while diagnosing the ranks (issue 35), each taken as its source gives it and not varied to
move a rank: DeepEP's efficiencies (its published table), LOSS_BYTES (a count of slime's
loss code), plan's STEP_SAMPLES (slime's scripts), and the latencies (fitted to NVIDIA's
measured step times, kept although they move two of the five expert layouts down).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from .memory import Counter, Precision, Run, Shape, Sizes

GB = 1e9
TB = 1e12


@dataclass(frozen=True)
class Hardware:
    """Peak figures of one GPU of a node: dense BF16 tensor FLOP/s (no sparsity), HBM
    bytes/s, GPU-to-GPU bytes/s inside a node (one direction), network bytes/s per GPU
    (one direction), host link bytes/s (one direction)."""

    flops: float
    hbm: float
    link: float
    net: float
    pcie: float
    source: str


# Frozen. NVLink figures are per direction (half the bidirectional total the datasheets
# give); the network is one NIC per GPU as in the vendor's reference nodes (DGX / OAM
# platforms); PCIe Gen4 x16 = 32 GB/s, Gen5 x16 = 64 GB/s, Gen6 x16 = 128 GB/s a direction.
HARDWARE: dict[str, Hardware] = {
    "A100": Hardware(312 * TB, 2.039 * TB, 300 * GB, 25 * GB, 32 * GB,
                     "NVIDIA A100 datasheet (SXM4 80GB: BF16 312 TFLOPS dense, HBM2e 2,039 "
                     "GB/s, NVLink 600 GB/s); DGX A100: 8 x 200 Gb/s HDR InfiniBand; PCIe Gen4"),
    "H100": Hardware(989 * TB, 3.35 * TB, 450 * GB, 50 * GB, 64 * GB,
                     "NVIDIA H100 datasheet (SXM: BF16 1,979 TFLOPS with sparsity = 989 dense, "
                     "HBM3 3.35 TB/s, NVLink 900 GB/s); DGX H100: 8 x 400 Gb/s ConnectX-7; "
                     "PCIe Gen5"),
    "H200": Hardware(989 * TB, 4.8 * TB, 450 * GB, 50 * GB, 64 * GB,
                     "NVIDIA H200 datasheet (SXM: BF16 989 TFLOPS dense, HBM3e 4.8 TB/s, NVLink "
                     "900 GB/s); DGX H200: 8 x 400 Gb/s ConnectX-7; PCIe Gen5"),
    "H20": Hardware(148 * TB, 4.0 * TB, 450 * GB, 50 * GB, 64 * GB,
                    "NVIDIA H20 product brief (BF16 148 TFLOPS dense, HBM3 4.0 TB/s, NVLink "
                    "900 GB/s); 400 Gb/s a GPU; PCIe Gen5"),
    "B200": Hardware(2250 * TB, 8.0 * TB, 900 * GB, 50 * GB, 64 * GB,
                     "NVIDIA DGX B200 / HGX B200 datasheet (BF16 2.25 PFLOPS dense a GPU, HBM3e "
                     "8 TB/s, NVLink 5 1.8 TB/s); DGX B200: 8 x 400 Gb/s ConnectX-7; PCIe Gen5"),
    "B300": Hardware(2250 * TB, 8.0 * TB, 900 * GB, 100 * GB, 128 * GB,
                     "NVIDIA HGX B300 datasheet (BF16 dense as B200, HBM3e 8 TB/s, NVLink 5 "
                     "1.8 TB/s); ConnectX-8 800 Gb/s a GPU; PCIe Gen6"),
    "GB200": Hardware(2500 * TB, 8.0 * TB, 900 * GB, 50 * GB, 64 * GB,
                      "NVIDIA GB200 NVL72 datasheet (BF16 180 PFLOPS dense / 72 GPUs, HBM3e "
                      "8 TB/s, NVLink 5 1.8 TB/s); 400 Gb/s ConnectX-7 a GPU; NVLink-C2C to "
                      "the Grace CPU taken as PCIe Gen5"),
    "GB300": Hardware(2500 * TB, 8.0 * TB, 900 * GB, 100 * GB, 64 * GB,
                      "NVIDIA GB300 NVL72 datasheet (BF16 dense as GB200, HBM3e 8 TB/s, "
                      "NVLink 5 1.8 TB/s); ConnectX-8 800 Gb/s a GPU"),
    "MI300X": Hardware(1307 * TB, 5.3 * TB, 448 * GB, 50 * GB, 64 * GB,
                       "AMD Instinct MI300X datasheet (BF16 1,307 TFLOPS dense, HBM3 5.3 TB/s, "
                       "7 Infinity Fabric links x 64 GB/s a direction); 400 Gb/s a GPU; "
                       "PCIe Gen5"),
    "MI325X": Hardware(1307 * TB, 6.0 * TB, 448 * GB, 50 * GB, 64 * GB,
                       "AMD Instinct MI325X datasheet (BF16 1,307 TFLOPS dense, HBM3e 6 TB/s, "
                       "Infinity Fabric as MI300X); 400 Gb/s a GPU; PCIe Gen5"),
    "MI350X": Hardware(2300 * TB, 8.0 * TB, 538 * GB, 50 * GB, 64 * GB,
                       "AMD Instinct MI350X datasheet (BF16 2.3 PFLOPS dense, HBM3E 8 TB/s, "
                       "Infinity Fabric 1,075 GB/s); 400 Gb/s a GPU; PCIe Gen5"),
    "MI355X": Hardware(2500 * TB, 8.0 * TB, 538 * GB, 50 * GB, 64 * GB,
                       "AMD Instinct MI355X datasheet (BF16 2.5 PFLOPS dense, HBM3E 8 TB/s, "
                       "Infinity Fabric 1,075 GB/s); 400 Gb/s a GPU; PCIe Gen5"),
}

# Achievable shares of the peaks (frozen, from published measurements):
# - GEMM_EFF: large BF16 GEMMs reach about 70 % of the dense peak on Hopper (cuBLAS / the
#   FlashAttention-3 paper, Shah et al. 2024: 740 of 989 TFLOPS = 75 % in attention; NVIDIA's
#   Transformer Engine GEMM benchmarks 65-75 %);
# - HBM_EFF: STREAM-like kernels reach about 80-90 % of HBM bandwidth; 0.8;
# - COMM_EFF: NCCL bus bandwidth over the link's peak, nccl-tests on DGX H100 (about 360 of
#   450 GB/s on NVLink, 40-45 of 50 GB/s on 400 Gb/s InfiniBand): 0.8;
# - PCIE_EFF: pinned host copies reach about 80 % of PCIe (CUDA bandwidthTest);
# - CPU_ADAM: parameters a second one GPU's share (1/8) of the host CPU updates with a
#   vectorised CPU Adam: ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840, Table 3) updates
#   1e9 parameters in 0.22 s on a DGX-2's CPUs - an order of magnitude.
# - DEEPEP_NVL_EFF / DEEPEP_RDMA_EFF: DeepEP's normal (training) kernels over the link's
#   peak, from its published table (deepseek-ai/DeepEP README, H800 with ~160 GB/s NVLink and
#   a 400 Gb/s CX7 NIC (~50 GB/s) a GPU, 4,096 tokens x 7,168 hidden, top-8): intranode EP8
#   dispatch 153 GB/s / combine 158 GB/s (0.95); internode EP16 43 GB/s both ways, EP32 58 /
#   57, EP64 51 / 50: the lowest, 43 of 50 (0.86), is taken.
GEMM_EFF = 0.7
HBM_EFF = 0.8
COMM_EFF = 0.8
DEEPEP_NVL_EFF = 0.95
DEEPEP_RDMA_EFF = 0.86
# Bytes of HBM traffic the RL loss moves a logit (a token and vocabulary entry of the rank's
# tp share), counted from slime's log-prob and entropy (THUDM/slime slime/utils/ppo_utils.py
# _VocabParallelLogProbEntropy, the path without a keep mask): forward: bf16 -> fp32 copy (2
# read + 4 written), max (4), subtract the max (4 + 4), exp_ (4 + 4), sum (4), div_ (4 + 4),
# entropy's softmax x logits (4 + 4) = 46; backward: neg_ (4 + 4), mul_ (4 + 4), the fp32
# gradient cast back to bf16 (4 + 2) = 22.
LOSS_BYTES = 68
PCIE_EFF = 0.8
CPU_ADAM = 1e9 / 0.22 / 8

# - LAYER_LATENCY / EXPERT_LATENCY: seconds a layer costs a micro-batch (forward and
#   backward) beyond its FLOPs and bytes, and more a local expert of a MoE layer: kernel
#   launches, host overhead, collective latency, small grouped GEMMs. Fitted (least squares,
#   bench/plan_measured.py prints the fit) to the three step times NVIDIA measured for
#   Qwen3-235B-A22B on 256 H100 (yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md:
#   19.7, 24.2, 29.0 s), where the roofline alone misses 5, 11 and 18 s, growing with the
#   layer passes a rank runs and its local experts; not fitted to any expert's RL layout. The
#   same page's long-context runs (seq 16k-128k, not used in the fit) are then 1.5x the model
#   (2x without these terms); the rest is mostly the expert load imbalance it also measures.
LAYER_LATENCY = 2.14e-3
EXPERT_LATENCY = 0.247e-3

# the terms a stage spends on each micro-batch (the rest: once a step)
PER_MICRO_BATCH = ("compute", "recompute", "tp", "cp", "ep", "latency")
TERMS = (*PER_MICRO_BATCH, "pp_bubble", "pp_p2p", "dp", "edp", "optimizer")


@dataclass(frozen=True)
class Spans:
    """How many nodes the first group of each kind spans (1: inside a node)."""

    tp: int = 1
    cp: int = 1
    dp: int = 1  # the dense dp x cp group of the gradients
    pp: int = 1  # adjacent stages on different nodes when > 1
    ep: int = 1  # the expert all-to-all group (etp x ep)
    etp: int = 1
    edp: int = 1
    ep_local: int = 1  # members of an ep group on one node


def spans(lay: Sizes, per_node: int) -> Spans:
    """Nodes each group spans, for megatron-core's default order tp-cp-ep-dp-pp (dense) and
    etp-ep-edp-pp (experts) on ranks packed node by node (miles' placement group)."""
    def nodes(size: int, stride: int) -> int:
        return len({(i * stride) // per_node for i in range(size)})

    return Spans(
        tp=nodes(lay.tp, 1), cp=nodes(lay.cp, lay.tp), dp=nodes(lay.dp * lay.cp, lay.tp),
        pp=nodes(lay.pp, lay.tp * lay.cp * lay.dp), ep=nodes(lay.ep, lay.etp),
        etp=nodes(lay.etp, 1), edp=nodes(lay.edp, lay.etp * lay.ep),
        ep_local=max(1, min(lay.ep, per_node // lay.etp)) if lay.etp <= per_node else 1)


@dataclass(frozen=True)
class Cost:
    """Seconds a step spends on each term (`TERMS`), and the micro-batches it runs."""

    terms: dict[str, float]
    micro_batches: int

    @property
    def total(self) -> float:
        return sum(self.terms.values())


def _gemm(hw: Hardware, m: float, k: float, n: float) -> float:
    """Roofline time of an (m x k) @ (k x n) BF16 GEMM."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    return max(2 * m * k * n / (hw.flops * GEMM_EFF),
               2 * (m * k + k * n + m * n) / (hw.hbm * HBM_EFF))


def _collective(nbytes: float, group: int, span: int, hw: Hardware) -> float:
    """A ring all-gather / reduce-scatter of `nbytes` (the whole) over `group` ranks: each
    rank moves (group-1)/group of it, at NVLink speed inside a node, else the network's."""
    if group <= 1:
        return 0.0
    bw = (hw.link if span <= 1 else hw.net) * COMM_EFF
    return nbytes * (group - 1) / group / bw


def _dispatch(kind: str, own: float, lay: Sizes, sp: Spans, per_node: int,
              hw: Hardware) -> float:
    """One way (dispatch or combine) of a MoE layer's token exchange; `own`: the bytes of
    the rank's own tokens (sequence-parallel share), one copy. megatron-core token
    dispatchers: allgather gathers the tokens of the etp x ep group once each; alltoall
    permutes first (a copy per routed expert), exchanges them over ep and gathers them over
    etp; flex (DeepEP) sends a token once to each rank and each remote node its experts
    are on."""
    if lay.experts == 0 or lay.etp * lay.ep == 1:
        return 0.0
    link, net = hw.link * COMM_EFF, hw.net * COMM_EFF
    k = lay.topk
    if kind == "allgather":
        group = lay.etp * lay.ep
        near = min(group, per_node)
        return max(own * (near - 1) / link, own * (group - near) / net)
    local, ep_nodes = sp.ep_local, sp.ep
    gather = own * k * (lay.etp - 1) / (link if sp.etp <= 1 else net)  # NCCL, over etp
    if kind == "flex":
        link, net = hw.link * DEEPEP_NVL_EFF, hw.net * DEEPEP_RDMA_EFF
        # DeepEP sends a token once to each rank (NVLink) and once to each node (RDMA) that
        # holds any of its experts, whatever number of them are there: its dispatch layout
        # is a token x rank (is_token_in_rank) and a token x RDMA rank map, not a copy a
        # routed expert (deepseek-ai/DeepEP deep_ep/buffer.py get_dispatch_layout)
        ranks = lay.ep * (1 - (1 - 1 / lay.ep) ** k)  # expected distinct ranks a token
        near_bytes = own * ranks * (local - 1) / lay.ep
        nodes = ep_nodes
        far_bytes = own * nodes * (1 - (1 - 1 / nodes) ** k) * (nodes - 1) / nodes \
            if nodes > 1 else 0.0
    else:
        near_bytes = own * k * (local - 1) / lay.ep
        far_bytes = own * k * (lay.ep - local) / lay.ep
    a2a = max(near_bytes / link, far_bytes / net)
    return a2a + gather


def ring_bytes(shape: Shape, lay: Sizes, tokens: int, groups: int) -> float:
    """Bytes of K and V a rank passes on at each step of the CP ring: bf16, its tokens, the
    heads (MLA: K of qk + rope width and V of v width a head) or query groups (K and V of
    kv_channels each) of its TP share. TransformerEngine's P2P context parallelism sends K
    and V both, MLA's too (NVIDIA/TransformerEngine transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py, AttnFuncWithCPAndKVP2P)."""
    t = lay.tp
    if shape.mla:
        return tokens * 2 * (lay.heads / t) * (shape.qk_head + shape.rope_head + shape.v_head)
    kv = shape.kv_channels or shape.hidden // lay.heads
    return tokens * 2 * 2 * max(1, groups // t) * kv


def step_cost(shape: Shape, lay: Sizes, hw: Hardware, per_node: int, prec: Precision,
              run: Run, step_tokens: int, context: int | None = None,
              counter: Counter | None = None, loss_bytes: float = LOSS_BYTES,
              latency: tuple[float, float] = (LAYER_LATENCY, EXPERT_LATENCY)) -> Cost:
    """The step time of `lay` (see the module docstring). `run.tokens`: tokens of a rank's
    micro-batch; `step_tokens`: tokens of a whole step; `context`: the tokens a token
    attends to on average (None: half of `run.tokens`, causal). Samples are packed and attend
    within themselves (slime / miles dynamic batching, THD format), so the context is the
    data's, the same for every layout: cp splits a sample, it does not lengthen it.
    `loss_bytes`: HBM bytes the loss moves a logit (default: slime's RL loss); `latency`: a
    layer's and a local expert's fixed seconds a micro-batch (default: the measured ones)."""
    tokens = run.tokens or 4096
    sp = spans(lay, per_node)
    c = counter or Counter(shape, lay)
    h, t = shape.hidden, lay.tp
    heads = lay.heads
    kv = shape.kv_channels or h // heads
    full = run.recompute == "full"
    groups = c.groups

    # ---- per layer, one micro-batch, forward ----
    if shape.mla:
        qk, v_dim = shape.qk_head + shape.rope_head, shape.v_head
    else:
        qk = v_dim = kv
    ctx = context if context is not None else tokens / 2
    attn_core = 2 * tokens * ctx * (heads / t) * (qk + v_dim) / (hw.flops * GEMM_EFF)
    attn_linear = _gemm(hw, tokens, h, c.attention / h)  # the attention's weights, per token
    dense_mlp = _gemm(hw, tokens, h, c.mlp(shape.ffn_size(), t, False) / h)
    moe_ffn = shape.moe_ffn or shape.ffn_size()
    experts = max(lay.experts, 1)
    local = max(1, lay.experts // lay.ep)
    per_expert = tokens * lay.topk * lay.etp * lay.ep / (t * experts)  # tokens a local expert
    gate = 2 if shape.swiglu else 1
    routed = local * (_gemm(hw, per_expert, h, gate * moe_ffn / lay.etp)
                      + _gemm(hw, per_expert, moe_ffn / lay.etp, h))
    shared = _gemm(hw, tokens, h, c.mlp(shape.shared_ffn, t, False) / h) \
        if shape.shared_ffn else 0.0
    router = _gemm(hw, tokens / t, h, lay.experts)

    act_bytes = tokens * h * 2  # one micro-batch's hidden states, bf16
    # sequence-parallel AG + RS around attention and around a dense MLP (all-reduces without
    # SP move twice as much)
    one_tp = _collective(act_bytes, t, sp.tp, hw) * (1 if lay.sp else 2)
    dispatch = _dispatch(shape.dispatcher, tokens / t * h * 2, lay, sp, per_node, hw)
    # CP ring: K and V of the query groups a TP rank holds, (cp-1) steps
    kv_bytes = ring_bytes(shape, lay, tokens, groups)
    ring = (lay.cp - 1) * kv_bytes / ((hw.link if sp.cp <= 1 else hw.net) * COMM_EFF) \
        if lay.cp > 1 else 0.0
    ring_fwd = max(0.0, ring - attn_core)
    ring_bwd = max(0.0, 2 * ring - 2 * attn_core)

    def layer(moe: bool) -> dict[str, float]:
        mlp = (routed + shared + router) if moe else dense_mlp
        fwd = attn_linear + attn_core + mlp
        tp_fwd = 2 * one_tp + (0 if moe else 2 * one_tp)
        ep_fwd = 2 * dispatch if moe else 0.0
        fixed = latency[0] + (local * latency[1] if moe and lay.experts else 0.0)
        out = {"compute": 3 * fwd, "tp": 2 * tp_fwd, "ep": 2 * ep_fwd,
               "cp": ring_fwd + ring_bwd, "latency": fixed, "recompute": 0.0}
        if full:
            out["recompute"] = fwd + tp_fwd + ep_fwd + ring_fwd + fixed / 3
        return out

    dense_layer, moe_layer = layer(False), layer(True)
    # the output layer's GEMM (forward, two backward) and the loss's passes over a rank's
    # [tokens, vocab / tp] logits, HBM-bound (`loss_bytes` an entry)
    vocab_share = tokens * shape.padded_vocab(t) / t
    logits = 3 * _gemm(hw, tokens, h, shape.padded_vocab(t) / t) + vocab_share * loss_bytes / (
        hw.hbm * HBM_EFF)

    def stage(p: int) -> dict[str, float]:
        got = dict.fromkeys(PER_MICRO_BATCH, 0.0)
        ids = [i for chunk in lay.stages[p] for i in chunk]
        if p == lay.pp - 1:
            ids += [len(lay.moe) - 1] * lay.mtp
        for i in ids:
            for k, v in (moe_layer if lay.moe[i] else dense_layer).items():
                got[k] += v
        if p == lay.pp - 1:
            got["compute"] += logits
        return got

    per = [stage(p) for p in range(lay.pp)]
    slow = max(per, key=lambda d: sum(d.values()))
    t_stage = sum(slow.values())
    m = max(1, ceil(step_tokens / (lay.dp * lay.cp * tokens)))
    terms = {k: m * slow[k] for k in PER_MICRO_BATCH}
    terms["pp_bubble"] = (lay.pp - 1) / lay.vpp * t_stage
    p2p = act_bytes / (t if lay.sp else 1) / ((hw.link if sp.pp <= 1 else hw.net) * COMM_EFF)
    terms["pp_p2p"] = 2 * m * lay.vpp * p2p if lay.pp > 1 else 0.0

    # ---- once a step: gradients, parameters, optimizer ----
    big = max((c.stage(p) for p in range(lay.pp)), key=lambda x: x.total)
    grad_param = prec.grad + prec.weight
    terms["dp"] = _collective(big.dense * grad_param, lay.dp * lay.cp, sp.dp, hw)
    terms["edp"] = _collective(big.expert * grad_param, lay.edp, sp.edp, hw)
    shard = big.dense / (lay.dp * lay.cp) + big.expert / lay.edp if prec.distributed \
        else big.total
    on_cpu = shard * prec.offload
    gpu_adam = (shard - on_cpu) * (2 * prec.optimizer + prec.grad + prec.weight) / (
        hw.hbm * HBM_EFF)
    copies = on_cpu * (prec.grad + prec.weight) / (hw.pcie * PCIE_EFF)
    # with --overlap-cpu-optimizer-d2h-h2d (what plan proposes with offload) megatron-core's
    # HybridDeviceOptimizer keeps a CPU optimizer a parameter, each stepping once its grads
    # are down while the others copy, and copies the result up on another stream: the copies
    # and CPU Adam are pipelined (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)
    terms["optimizer"] = gpu_adam + max(copies, on_cpu / CPU_ADAM)
    return Cost({k: terms[k] for k in TERMS}, m)


__all__ = ["EXPERT_LATENCY", "HARDWARE", "LAYER_LATENCY", "LOSS_BYTES", "TERMS", "Cost",
           "Hardware", "ring_bytes", "spans", "step_cost"]
