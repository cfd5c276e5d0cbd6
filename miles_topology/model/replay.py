"""The R3 replay plan: exactly which replay rows each train rank consumes, in router order.

Pure (stdlib only) so that the rollout side can ship each rank only its slice and the train
side can check what it received. A rank's rows follow miles' data path step by step:

1. DP share (radixark/miles `miles/ray/rollout.py`, `_split_train_data_by_dp`): sample i goes
   to dp rank i % dp; with `balance_data`, dp rank j takes part j of a seqlen-balanced split
   into dp parts of equal size (`balanced_partitions`), in sample order.
2. Steps and micro-batches in forward order (`miles/backends/megatron_utils/data.py`,
   `get_data_iterator`): a step holds global_batch_size / dp consecutive samples of the
   rank's share (all of it when unset); within a step the samples form micro-batches of
   `micro_batch_size`; with `dynamic_batch` the step's micro-batch count is the first-fit
   bin count of the samples' full lengths against max_tokens_per_gpu * cp
   (`get_minimum_num_micro_batch_size`), the max over dp ranks, rounded down to a multiple
   of pp with VPP (megatron's microbatch_group_size_per_vp_stage defaults to pp; at least
   1), and the samples are split into that many seqlen-balanced micro-batches.
3. Each sample has one row per token (the engine records tokens - 1 rows; the last row is
   synthesized by the packer). With cp > 1 it is padded to a multiple of 2*cp, cut into 2*cp
   chunks, and cp rank r takes chunks r and 2*cp-1-r (load balanced for causal attention).
4. The cp-local pieces of a micro-batch are concatenated (packed "thd"), padded to a multiple
   of tp * data_pad_size_multiplier (`get_batch`, miles' default 128) and, with sequence
   parallel, tp rank r keeps the r-th contiguous slice.
   Not modelled, so refused: `--allgather-cp` (contiguous CP slices) and `--qkv-format bshd`.
5. Layers: only the MoE layers of the rank's pipeline stage, VPP chunk 0's first
   (`Topology.stages.replay`); every router consumes one [rows, topk] slice per micro-batch.

The same segments describe where the rank's *tokens* come from (rows and tokens line up), so
the trainer can lay out its packed inputs from this plan too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .topology import Topology

PAD = -1


@dataclass(frozen=True)
class Segment:
    """Rows [start, stop) of `sample`; for sample == PAD, `stop - start` pad rows."""

    sample: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def pad(self) -> bool:
        return self.sample == PAD


@dataclass(frozen=True)
class MicroBatch:
    """One forward micro-batch as this rank sees it.

    `segments` are the rank's rows in router order. `lengths` are the cp-local lengths of
    `samples` in the packed sequence (for cu_seqlens) and `packed` its padded length before
    the sequence-parallel slice.
    """

    step: int
    samples: tuple[int, ...]
    segments: tuple[Segment, ...]
    lengths: tuple[int, ...]
    packed: int

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)


@dataclass(frozen=True)
class RankReplay:
    """Everything one train rank replays: its samples, MoE layers and micro-batches."""

    rank: int
    samples: tuple[int, ...]
    tokens: tuple[int, ...]  # token count of each of `samples`
    layers: tuple[int, ...]  # global MoE layer ids, in the order the rank's routers run
    micro_batches: tuple[MicroBatch, ...]

    @property
    def rows(self) -> int:
        return sum(mb.rows for mb in self.micro_batches)


def dp_shares(topo: Topology, sample_tokens: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Global sample ids of every data-parallel rank, as miles splits a rollout."""
    n = len(sample_tokens)
    if topo.batch.balance_data and n:
        if n % topo.dp:
            raise ValueError(f"--balance-data splits {n} samples into {topo.dp} equal parts; "
                             f"give a sample count divisible by dp = {topo.dp}")
        return tuple(tuple(p) for p in balanced_partitions(sample_tokens, topo.dp, True))
    return tuple(tuple(range(d, n, topo.dp)) for d in range(topo.dp))


def dp_share(topo: Topology, sample_tokens: Sequence[int], dp_rank: int) -> tuple[int, ...]:
    """Global sample ids of data-parallel rank `dp_rank`."""
    return dp_shares(topo, sample_tokens)[dp_rank]


def cp_length(tokens: int, cp: int) -> int:
    """Rows one cp rank holds of a sample of `tokens` tokens (two chunks, after padding)."""
    return tokens if cp == 1 else 2 * -(-tokens // (2 * cp))


def first_fit_count(lengths: Sequence[int], cap: int) -> int:
    """Bins first-fit packing needs for `lengths` under `cap` (a longer item stands alone)."""
    bins: list[int] = []
    for n in lengths:
        for i, used in enumerate(bins):
            if used + n <= cap:
                bins[i] += n
                break
        else:
            bins.append(n)
    return len(bins)


def balanced_partitions(lengths: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
    """Indices of `lengths` split into k parts of near-equal sums (largest differencing, the
    method miles' `get_seqlen_balanced_partitions` uses), each part sorted, parts ordered
    by decreasing sum. With `equal_size` every part gets len / k items."""
    if not 0 < k <= len(lengths):
        raise ValueError(f"cannot split {len(lengths)} items into {k} non-empty parts")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    # a state: k parts as (sum, items), largest sum first
    if equal_size:
        if len(lengths) % k:
            raise ValueError(f"{len(lengths)} items do not split into {k} equal parts")
        states = [[(lengths[i], [i]) for i in reversed(order[j:j + k])]
                  for j in range(0, len(order), k)]
    else:
        states = [[(lengths[i], [i])] + [(0, [])] * (k - 1) for i in order]
    while len(states) > 1:
        states.sort(key=lambda st: (st[0][0] - st[-1][0], st[0][0]))
        a, b = states.pop(), states.pop()  # the two with the largest spread
        merged = [(x[0] + y[0], x[1] + y[1]) for x, y in zip(a, reversed(b))]
        states.append(sorted(merged, key=lambda p: p[0], reverse=True))
    return [sorted(items) for _, items in states[0]]


def micro_batches(
    topo: Topology, sample_tokens: Sequence[int], samples: Sequence[int] | int
) -> list[tuple[int, tuple[int, ...]]]:
    """(step, samples) of each micro-batch of a dp rank's share, in forward order.

    `samples` is the rank's share, or its dp rank (needed for dynamic batching, whose
    micro-batch count is the maximum over dp ranks).
    """
    shares = dp_shares(topo, sample_tokens)
    mine = shares[samples] if isinstance(samples, int) else tuple(samples)
    local = _local_batch(topo, len(sample_tokens))
    out: list[tuple[int, tuple[int, ...]]] = []
    for step, i in enumerate(range(0, len(mine), local)):
        group = mine[i : i + local]
        if not topo.batch.dynamic_batch:
            mbs = topo.batch.micro_batch_size
            out += [(step, tuple(group[j : j + mbs])) for j in range(0, len(group), mbs)]
            continue
        count = micro_batch_count(topo, sample_tokens, shares, step)
        if count > len(group):
            raise ValueError(
                f"dynamic batching: a dp rank has {len(group)} sample(s) in step {step} but "
                f"another needs {count} micro-batches; miles splits a rollout into equal dp "
                f"shares: give a sample count divisible by dp = {topo.dp}")
        parts = balanced_partitions([sample_tokens[s] for s in group], count, False)
        out += [(step, tuple(group[j] for j in part)) for part in parts]
    return out


def micro_batch_count(topo: Topology, sample_tokens: Sequence[int], shares, step: int) -> int:
    """Dynamic batching: micro-batches of `step` on every dp rank (miles' rule, see above)."""
    budget = topo.batch.max_tokens_per_gpu
    if budget is None:
        raise ValueError("dynamic batching needs max_tokens_per_gpu (--max-tokens-per-gpu)")
    local = _local_batch(topo, len(sample_tokens))
    count = max(
        first_fit_count([sample_tokens[s] for s in share[step * local : (step + 1) * local]],
                        budget * topo.layout.cp)
        for share in shares
    )
    if topo.stages.chunks > 1:
        count = max(1, count // topo.layout.pp * topo.layout.pp)
    return count


def _local_batch(topo: Topology, samples: int) -> int:
    """Samples of one optimizer step on one dp rank."""
    if topo.batch.global_batch_size is None:
        return max(-(-samples // topo.dp), 1)
    return max(topo.batch.global_batch_size // topo.dp, 1)


def cp_segments(sample: int, tokens: int, cp: int, cp_rank: int) -> list[Segment]:
    """The rows cp rank `cp_rank` holds of one sample: chunks r and 2*cp-1-r, pads marked."""
    if cp == 1:
        return [Segment(sample, 0, tokens)]
    chunk = cp_length(tokens, cp) // 2
    out: list[Segment] = []
    for c in (cp_rank, 2 * cp - 1 - cp_rank):
        lo, hi = c * chunk, (c + 1) * chunk
        if lo < tokens:
            _add(out, Segment(sample, lo, min(hi, tokens)))
        if hi > tokens:
            _add(out, Segment(PAD, 0, hi - max(lo, tokens)))
    return out


def replay_plan(
    topo: Topology, sample_tokens: Sequence[int], rank: int, pad_multiple: int | None = None,
    pad_to: int | None = None,
) -> RankReplay:
    """The replay rows train rank `rank` consumes, for samples of `sample_tokens` tokens.

    `sample_tokens[i]` is the full token count (prompt + response) of global sample i;
    `pad_multiple` overrides the Topology's data_pad_size_multiplier.
    """
    if topo.batch.allgather_cp or topo.batch.qkv_format != "thd":
        raise ValueError(
            "the replay plan models packed thd batches with two-chunk CP slices; "
            "--allgather-cp and --qkv-format bshd are not modelled: drop them")
    if pad_multiple is None:
        pad_multiple = topo.batch.data_pad_multiplier
    if not topo.model.is_moe or topo.model.layers is None:
        raise ValueError("a replay plan needs an MoE model with known layers "
                         "(--num-layers, --num-experts)")
    if pad_multiple < 1:
        raise ValueError(f"pad_multiple must be >= 1, got {pad_multiple}")
    bad = [i for i, t in enumerate(sample_tokens) if t < 1]
    if bad:
        raise ValueError(f"sample {bad[0]} has {sample_tokens[bad[0]]} tokens; need >= 1")
    c = topo.grid("dense").coord(rank)
    samples = dp_share(topo, sample_tokens, c["dp"])
    pad_to = (pad_to or topo.layout.tp) * pad_multiple  # pad_to: tests only (a wrong pad)
    mbs = []
    for step, group in micro_batches(topo, sample_tokens, c["dp"]):
        segs: list[Segment] = []
        lengths = []
        for s in group:
            for seg in cp_segments(s, sample_tokens[s], topo.layout.cp, c["cp"]):
                _add(segs, seg)
            lengths.append(cp_length(sample_tokens[s], topo.layout.cp))
        total = sum(lengths)
        packed = total + (-total) % pad_to
        if packed > total:
            _add(segs, Segment(PAD, 0, packed - total))
        if topo.layout.sp and topo.layout.tp > 1:
            part = packed // topo.layout.tp
            segs = _cut(segs, part * c["tp"], part * (c["tp"] + 1))
        mbs.append(MicroBatch(step, group, tuple(segs), tuple(lengths), packed))
    return RankReplay(
        rank=rank,
        samples=samples,
        tokens=tuple(sample_tokens[s] for s in samples),
        layers=topo.stages.replay(c["pp"]),
        micro_batches=tuple(mbs),
    )


def replay_plans(
    topo: Topology, sample_tokens: Sequence[int], pad_multiple: int | None = None,
    pad_to: int | None = None,
) -> tuple[RankReplay, ...]:
    """`replay_plan` of every train rank, indexed by global rank."""
    return tuple(
        replay_plan(topo, sample_tokens, r, pad_multiple, pad_to) for r in range(topo.world_size)
    )


def _add(segs: list[Segment], seg: Segment) -> None:
    """Append, merging with the previous segment when contiguous (fewer copies later)."""
    if seg.rows <= 0:
        return
    if segs:
        last = segs[-1]
        if last.sample == seg.sample and (seg.pad or last.stop == seg.start):
            segs[-1] = Segment(last.sample, last.start, last.stop + seg.rows)
            return
    segs.append(seg)


def _cut(segs: list[Segment], lo: int, hi: int) -> list[Segment]:
    """Rows [lo, hi) of the concatenation of `segs`."""
    out: list[Segment] = []
    pos = 0
    for seg in segs:
        a, b = max(lo, pos), min(hi, pos + seg.rows)
        if a < b:
            off = seg.start - pos
            _add(out, Segment(PAD, 0, b - a) if seg.pad else Segment(seg.sample, a + off, b + off))
        pos += seg.rows
        if pos >= hi:
            break
    return out
