"""Pack one train rank's R3 replay rows from decoded per-sample routes, following its plan.

miles used to send every rank of a DP replica the full [tokens - 1, layers, topk] routes of
all its samples and let each rank cut out its part. Here the rollout side cuts first: a
rank is shipped only the rows and MoE layers its routers consume
(`miles_topology.model.replay.replay_plan`): one layer-major buffer, a view per micro-batch.
Pad rows (CP/TP padding and each sample's last token, which the engine does not record)
get a valid, deterministic route, experts 0..topk-1, never -1: a -1 row makes a whole
sequence-parallel chunk fall back to live routing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from miles_topology.model.replay import RankReplay

Routes = Mapping[int, np.ndarray] | Sequence[np.ndarray]


@dataclass(frozen=True)
class Shipment:
    """What one rank receives: its rows of its MoE layers, one buffer for all micro-batches.

    `data` is layer-major, [len(layers), rows, topk], so each router's rows of a micro-batch
    are contiguous; `batches` gives the [rows, layers, topk] view of each micro-batch.
    """

    rank: int
    layers: tuple[int, ...]
    data: np.ndarray
    offsets: tuple[int, ...]  # micro-batch i is rows offsets[i]:offsets[i + 1]

    @property
    def batches(self) -> list[np.ndarray]:
        bounds = zip(self.offsets, self.offsets[1:])
        return [self.data[:, a:b].transpose(1, 0, 2) for a, b in bounds]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def router(self, mb: int, i: int) -> np.ndarray:
        """Contiguous [rows, topk] that the router of layers[i] replays for micro-batch mb."""
        return self.data[i, self.offsets[mb] : self.offsets[mb + 1]]


def fill_route(topk: int, dtype: np.dtype) -> np.ndarray:
    """The route given to pad rows: experts 0..topk-1 (valid, distinct, deterministic)."""
    return np.arange(topk, dtype=dtype)


def ship(
    routes: Routes,
    plan: RankReplay,
    *,
    out: np.ndarray | None = None,
    topk: int | None = None,
    dtype: np.dtype | str | None = None,
    pad_id: int | None = None,
) -> Shipment:
    """Copy exactly `plan`'s rows and layers out of `routes` (global sample id -> array).

    Each `routes[s]` is the decoded [tokens - 1, layers, topk] array of sample s (any
    strides; layer-major, as `decode_routes` returns, copies fastest); shapes are checked
    against the plan so a mismatch fails here instead of replaying wrong routes. `out` may
    be a preallocated layer-major [len(plan.layers), plan.rows, topk] array. `pad_id`
    (tests only) fills pad rows with that id instead of a valid route.
    """
    arrays = {}
    for s in plan.samples:
        try:
            arrays[s] = routes[s]
        except (KeyError, IndexError):
            raise ValueError(f"rank {plan.rank} replays sample {s}, which has no routes") from None
    if arrays:
        first = next(iter(arrays.values()))
        topk = first.shape[-1] if topk is None else topk
        dtype = first.dtype if dtype is None else dtype
    if topk is None or dtype is None:
        raise ValueError(f"rank {plan.rank} has no samples: give topk and dtype")
    dtype = np.dtype(dtype)
    need = max(plan.layers, default=-1) + 1
    for s, t in zip(plan.samples, plan.tokens):
        a = arrays[s]
        if a.ndim != 3 or a.shape[0] != t - 1 or a.shape[1] < need or a.shape[2] != topk:
            raise ValueError(
                f"routes of sample {s} have shape {a.shape}; the plan needs "
                f"[{t - 1}, >= {need} layers, {topk}] ({t} tokens)"
            )
        if a.dtype != dtype:
            raise ValueError(f"routes of sample {s} are {a.dtype}, others {dtype}")
    shape = (len(plan.layers), plan.rows, topk)
    if out is None:
        out = np.empty(shape, dtype)
    elif out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out is {out.dtype}{out.shape}, need {dtype}{shape}")
    runs = _runs(plan.layers)
    by_layer = {s: a.transpose(1, 0, 2) for s, a in arrays.items()}  # [layers, rows, topk]
    pads: list[range] = []
    pos = 0
    offsets = [0]
    for mb in plan.micro_batches:
        for seg in mb.segments:
            n = seg.rows
            real = 0
            if not seg.pad:
                a = by_layer[seg.sample]
                real = max(0, min(seg.stop, a.shape[1]) - seg.start)
                for dst, src in runs:
                    out[dst, pos : pos + real] = a[src, seg.start : seg.start + real]
            if real < n:  # pad rows, or the sample's unrecorded last token
                pads.append(range(pos + real, pos + n))
            pos += n
        offsets.append(pos)
    if pads:  # one fancy-index write instead of a call per pad run
        idx = np.fromiter((i for r in pads for i in r), np.intp)
        out[:, idx] = fill_route(topk, dtype) if pad_id is None else pad_id
    return Shipment(plan.rank, plan.layers, out, tuple(offsets))


def replica_bytes(routes: Routes, plan: RankReplay) -> int:
    """Bytes the old scheme sent this rank: every layer of every token of its samples."""
    return sum(routes[s].nbytes for s in plan.samples)


def _runs(layers: Sequence[int]) -> list[tuple[slice, slice]]:
    """Split layer ids into (dst, src) slice pairs of constant stride, so copies stay views."""
    out: list[tuple[slice, slice]] = []
    i = 0
    while i < len(layers):
        j = i + 1
        step = layers[j] - layers[i] if j < len(layers) else 1
        if step <= 0:
            step = 1
            j = i + 1
        else:
            while j < len(layers) and layers[j] - layers[j - 1] == step:
                j += 1
        out.append((slice(i, j), slice(layers[i], layers[j - 1] + 1, step)))
        i = j
    return out
