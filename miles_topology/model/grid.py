"""Rank groups as a pure function of sizes and order: megatron-core RankGenerator semantics.

Ranks are laid out over the ordered axes with the leftmost axis varying fastest
(prefix-product strides). A group for a token such as "tp-dp" holds the ranks that
differ only along the named axes.
"""

from __future__ import annotations

from itertools import product

ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")  # Megatron's default, --use-tp-pp-dp-mapping

# Each grid's own axis names -> megatron-core RankGenerator's tokens: the one mapping.
# The expert grid has no cp axis (Megatron builds it with cp=1), so its "cp" is size 1.
DENSE_AXES = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp", "pp": "pp"}
EXPERT_AXES = {"etp": "tp", "ep": "ep", "edp": "dp", "pp": "pp"}


class Grid:
    """One factorisation of the world: ordered axis sizes, strides, groups, coordinates.

    `sizes` is keyed by the grid's own axis names (`axes`: name -> Megatron token) and
    `order` is Megatron's token order. Queries accept either spelling; a Megatron token the
    grid does not have (cp on the expert grid) is an axis of size 1.
    """

    def __init__(self, sizes: dict[str, int], order: str, axes: dict[str, str] = DENSE_AXES):
        name_of = {token: name for name, token in axes.items()}
        names = [name_of[t] for t in order.split("-") if t in name_of]
        for name in sizes:  # Megatron appends size-1 axes missing from the order
            if name not in names:
                names.append(name)
        self.names: tuple[str, ...] = tuple(names)
        self.sizes: tuple[int, ...] = tuple(sizes[n] for n in names)
        self._alias = {**name_of, **{n: n for n in names}}
        self._absent = {t for t in DENSE_AXES if t not in self._alias}
        strides, s = [], 1
        for size in self.sizes:
            strides.append(s)
            s *= size
        self.strides: tuple[int, ...] = tuple(strides)
        self.world_size: int = s
        self._cache: dict[str, tuple[tuple[int, ...], ...]] = {}

    def index(self, axis: str) -> int:
        try:
            return self.names.index(self._alias[axis])
        except KeyError:
            valid = ", ".join(self.names)
            raise KeyError(f"unknown axis {axis!r}; valid axes: {valid}") from None

    def size(self, axis: str) -> int:
        return 1 if axis in self._absent else self.sizes[self.index(axis)]

    def groups(self, token: str) -> list[list[int]]:
        """Groups of `token` ("tp", "tp-dp", ...), ordered exactly as RankGenerator.get_ranks."""
        return [list(g) for g in self._groups(token)]

    def _groups(self, token: str) -> tuple[tuple[int, ...], ...]:
        cached = self._cache.get(token)
        if cached is None:
            masked = {self.index(t) for t in token.split("-") if t not in self._absent}
            inside = [i for i in range(len(self.names)) if i in masked]
            outside = [i for i in range(len(self.names)) if i not in masked]
            offsets_in = _offsets(
                [self.sizes[i] for i in inside], [self.strides[i] for i in inside]
            )
            offsets_out = _offsets(
                [self.sizes[i] for i in outside], [self.strides[i] for i in outside]
            )
            cached = tuple(tuple(o + r for r in offsets_in) for o in offsets_out)
            self._cache[token] = cached
        return cached

    def coord(self, rank: int) -> dict[str, int]:
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside the world of {self.world_size} ranks")
        return {n: (rank // st) % sz for n, st, sz in zip(self.names, self.strides, self.sizes)}

    def rank(self, **coord: int) -> int:
        coord = {self._alias.get(k, k): v for k, v in coord.items()}
        unknown = set(coord) - set(self.names)
        if unknown:
            raise KeyError(
                f"unknown axis {sorted(unknown)}; valid axes: {', '.join(self.names)}"
            )
        r = 0
        for n, st, sz in zip(self.names, self.strides, self.sizes):
            c = coord.get(n, 0)
            if not 0 <= c < sz:
                raise IndexError(f"{n} coordinate {c} outside 0..{sz - 1}")
            r += c * st
        return r


def _offsets(sizes: list[int], strides: list[int]) -> list[int]:
    """Rank offsets of every index over these axes, first axis varying fastest."""
    if not sizes:
        return [0]
    ranges = [range(0, sz * st, st) for sz, st in zip(sizes, strides)]
    # itertools.product varies the last iterable fastest, so feed the axes reversed.
    return [sum(p) for p in product(*reversed(ranges))]
