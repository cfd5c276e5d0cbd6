"""The R3 replay plan: exactly which replay rows each train rank consumes, in router order.

Pure (stdlib only) so that the rollout side can ship each rank only its slice and the train
side can check what it received. A rank's rows follow miles' data path step by step:

1. DP share: sample i goes to dp rank i % dp (miles' round-robin split, no balancing).
2. Steps and micro-batches in forward order: a step holds `global_batch_size` consecutive
   global samples (all samples when unset); within a step a rank's samples form micro-batches
   of `micro_batch_size`, or, with `dynamic_batch`, consecutive groups whose cp-local token
   count stays within `max_tokens_per_gpu` (order preserving; a longer sample stands alone).
3. Each sample has one row per token (the engine records tokens - 1 rows; the last row is
   synthesized by the packer). With cp > 1 it is padded to a multiple of 2*cp, cut into 2*cp
   chunks, and cp rank r takes chunks r and 2*cp-1-r (load balanced for causal attention).
4. The cp-local pieces of a micro-batch are concatenated (packed "thd"), padded to a multiple
   of tp * pad_multiple and, with sequence parallel, tp rank r keeps the r-th contiguous slice.
5. Layers: only the MoE layers of the rank's pipeline stage, VPP chunk 0's first
   (`Topology.replay_layers`); every router consumes one [rows, topk] slice per micro-batch.

The same segments describe where the rank's *tokens* come from (rows and tokens line up), so
the trainer can lay out its packed inputs from this plan too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Topology

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


def dp_share(topo: Topology, samples: int, dp_rank: int) -> tuple[int, ...]:
    """Global sample ids of data-parallel rank `dp_rank` (round robin, as miles splits)."""
    return tuple(range(dp_rank, samples, topo.dp))


def cp_length(tokens: int, cp: int) -> int:
    """Rows one cp rank holds of a sample of `tokens` tokens (two chunks, after padding)."""
    return tokens if cp == 1 else 2 * -(-tokens // (2 * cp))


def micro_batches(
    topo: Topology, sample_tokens: Sequence[int], samples: Sequence[int]
) -> list[tuple[int, tuple[int, ...]]]:
    """(step, samples) of each micro-batch of a rank's `samples`, in forward order."""
    gbs = topo.global_batch_size or max(len(sample_tokens), 1)
    steps: dict[int, list[int]] = {}
    for s in samples:
        steps.setdefault(s // gbs, []).append(s)
    out: list[tuple[int, tuple[int, ...]]] = []
    for step, group in steps.items():
        if not topo.dynamic_batch:
            mbs = topo.micro_batch_size
            out += [(step, tuple(group[i : i + mbs])) for i in range(0, len(group), mbs)]
            continue
        budget = topo.max_tokens_per_gpu
        if budget is None:
            raise ValueError("dynamic batching needs max_tokens_per_gpu (--max-tokens-per-gpu)")
        cur: list[int] = []
        used = 0
        for s in group:
            n = cp_length(sample_tokens[s], topo.cp)
            if cur and used + n > budget:
                out.append((step, tuple(cur)))
                cur, used = [], 0
            cur.append(s)
            used += n
        if cur:
            out.append((step, tuple(cur)))
    return out


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
    topo: Topology, sample_tokens: Sequence[int], rank: int, pad_multiple: int = 1,
    pad_to: int | None = None,
) -> RankReplay:
    """The replay rows train rank `rank` consumes, for samples of `sample_tokens` tokens.

    `sample_tokens[i]` is the full token count (prompt + response) of global sample i;
    `pad_multiple` is miles' data_pad_size_multiplier.
    """
    if not topo.is_moe or topo.layers is None:
        raise ValueError("a replay plan needs an MoE model with known layers "
                         "(--num-layers, --num-experts)")
    if pad_multiple < 1:
        raise ValueError(f"pad_multiple must be >= 1, got {pad_multiple}")
    bad = [i for i, t in enumerate(sample_tokens) if t < 1]
    if bad:
        raise ValueError(f"sample {bad[0]} has {sample_tokens[bad[0]]} tokens; need >= 1")
    c = topo.coord(rank)
    samples = dp_share(topo, len(sample_tokens), c["dp"])
    pad_to = (pad_to or topo.tp) * pad_multiple  # pad_to: tests only (a wrong pad)
    mbs = []
    for step, group in micro_batches(topo, sample_tokens, samples):
        segs: list[Segment] = []
        lengths = []
        for s in group:
            for seg in cp_segments(s, sample_tokens[s], topo.cp, c["cp"]):
                _add(segs, seg)
            lengths.append(cp_length(sample_tokens[s], topo.cp))
        total = sum(lengths)
        packed = total + (-total) % pad_to
        if packed > total:
            _add(segs, Segment(PAD, 0, packed - total))
        if topo.sp and topo.tp > 1:
            part = packed // topo.tp
            segs = _cut(segs, part * c["tp"], part * (c["tp"] + 1))
        mbs.append(MicroBatch(step, group, tuple(segs), tuple(lengths), packed))
    return RankReplay(
        rank=rank,
        samples=samples,
        tokens=tuple(sample_tokens[s] for s in samples),
        layers=topo.replay_layers(c["pp"]),
        micro_batches=tuple(mbs),
    )


def replay_plans(
    topo: Topology, sample_tokens: Sequence[int], pad_multiple: int = 1,
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
