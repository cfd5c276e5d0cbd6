"""Routed experts recorded by a rollout engine: decode, validate, encode.

The engine returns, per sample, base64 of int32 expert ids shaped [tokens - 1, layers, topk].
`np.frombuffer` over the decoded bytes is read-only (torch.from_numpy then warns), so the
one copy we make anyway, the cast to the smallest dtype that holds the expert ids (stored
layer-major, see `decode_routes`), is the writable array we keep. A payload that does not
fit the Topology raises `RoutesError` naming the sample: a wrong route replayed silently is
worse than a failed step.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Hashable

import numpy as np

from miles_topology import Topology


class RoutesError(ValueError):
    """A routed-experts payload that cannot be replayed; `sample` names the sample."""

    def __init__(self, sample: Hashable | None, message: str):
        self.sample = sample
        super().__init__(f"routed experts of sample {sample}: {message}")


def route_dtype(experts: int) -> np.dtype:
    """Smallest unsigned dtype holding ids 0..experts-1 (uint8 up to 256 experts)."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if experts - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    raise ValueError(f"{experts} experts do not fit in 32 bits")


def encode_routes(routes: np.ndarray) -> str:
    """Base64 of int32 ids, C order: the engine's wire format."""
    return base64.b64encode(np.ascontiguousarray(routes, dtype="<i4").tobytes()).decode("ascii")


def decode_routes(
    payload: str | bytes,
    topo: Topology,
    *,
    tokens: int | None = None,
    sample: Hashable | None = None,
) -> np.ndarray:
    """Decode one sample's payload into a writable [tokens - 1, layers, topk] array.

    Shape and expert range come from `topo` (layers, topk, experts). With `tokens` the row
    count is checked too. Only MoE layers are validated; dense layers carry whatever the
    engine wrote and are never replayed. The array is a transposed view of a fresh
    layer-major buffer: `a[:, layer]` is contiguous.
    """
    layers, topk, experts = topo.model.layers, topo.model.topk, topo.model.experts
    if layers is None or experts is None:
        raise ValueError("decoding routes needs --num-layers and --num-experts")
    if tokens is not None and tokens < 1:
        raise RoutesError(sample, f"a sample has at least 1 token, got tokens={tokens}")
    try:
        raw = binascii.a2b_base64(payload, strict_mode=True)  # C, validates characters
    except (binascii.Error, ValueError, TypeError) as e:
        raise RoutesError(sample, f"not valid base64 ({e})") from None
    if len(raw) % 4:
        raise RoutesError(sample, f"{len(raw)} bytes is not a whole number of int32 ids")
    ids = np.frombuffer(raw, dtype="<i4")  # read-only view, no copy
    per_row = layers * topk
    if tokens is not None:
        want = (tokens - 1) * per_row
        if ids.size != want:
            raise RoutesError(sample, _shape_hint(ids.size, tokens, layers, topk))
    elif ids.size % per_row:
        raise RoutesError(
            sample,
            f"{ids.size} ids are not a whole number of rows of layers x topk = "
            f"{layers} x {topk} = {per_row}",
        )
    ids = ids.reshape(-1, layers, topk)
    runs = _moe_runs(topo.model.moe_pattern)  # strided views: validation copies nothing
    for sl in runs:
        check = ids[:, sl]
        if check.size and (check.min() < 0 or check.max() >= experts):
            row, i, j = np.argwhere((check < 0) | (check >= experts))[0]
            raise RoutesError(
                sample,
                f"expert id {int(check[row, i, j])} at token {row}, layer "
                f"{sl.start + i * sl.step} is outside 0..{experts - 1}",
            )
    # The one copy: cast to the compact dtype, stored layer-major so that a pipeline stage's
    # layers are one contiguous block (packing then moves long runs, not 8-byte pieces).
    store = np.empty((layers, ids.shape[0], topk), route_dtype(experts))
    np.copyto(store, ids.transpose(1, 0, 2), casting="unsafe")
    out = store.transpose(1, 0, 2)
    for sl in runs:
        dup = _duplicate_row(out[:, sl])
        if dup is not None:
            row, i = dup
            layer = sl.start + i * sl.step
            raise RoutesError(
                sample,
                f"duplicate expert ids {out[row, layer].tolist()} at token {row}, layer "
                f"{layer}: the top-k ids of one token must be distinct",
            )
    return out


def _moe_runs(pattern: tuple[bool, ...]) -> list[slice]:
    """MoE layers as few constant-stride slices (one for `--moe-layer-freq N`)."""
    ids = [i for i, moe in enumerate(pattern) if moe]
    out: list[slice] = []
    i = 0
    while i < len(ids):
        j = i + 1
        if j < len(ids):
            step = ids[j] - ids[i]
            while j < len(ids) and ids[j] - ids[j - 1] == step:
                j += 1
        else:
            step = 1
        out.append(slice(ids[i], ids[j - 1] + 1, step))
        i = j
    return out


def _duplicate_row(a: np.ndarray) -> tuple[int, int] | None:
    """(token, layer) of the first row with a repeated id; pairwise column compares."""
    k = a.shape[-1]
    if k < 2 or a.size == 0:
        return None
    bad = np.zeros(a.shape[:-1], dtype=bool)
    eq = np.empty_like(bad)
    for i in range(k - 1):
        for j in range(i + 1, k):
            np.equal(a[..., i], a[..., j], out=eq)
            bad |= eq
    if not bad.any():
        return None
    row, layer = np.argwhere(bad)[0]
    return int(row), int(layer)


def _shape_hint(n: int, tokens: int, layers: int, topk: int) -> str:
    """Say which dimension is off: the payload is flat, so name every shape it would fit."""
    rows = tokens - 1
    msg = (f"{n} ids, expected (tokens - 1) x layers x topk = {rows} x {layers} x {topk} = "
           f"{rows * layers * topk}")
    fits = []
    if rows > 0 and n % (rows * topk) == 0 and n // (rows * topk) != layers:
        fits.append(f"{n // (rows * topk)} layers (the model has {layers})")
    if rows > 0 and n % (rows * layers) == 0 and n // (rows * layers) != topk:
        fits.append(f"top-{n // (rows * layers)} routes (the model routes top-{topk})")
    if n % (layers * topk) == 0 and n // (layers * topk) != rows:
        fits.append(f"{n // (layers * topk)} token rows (a {tokens}-token sample has {rows})")
    return f"{msg}; it fits {' or '.join(fits)}" if fits else msg
