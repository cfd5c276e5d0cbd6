"""Rank groups as a pure function of sizes and order: megatron-core RankGenerator semantics.

Ranks are laid out over the ordered axes with the leftmost axis varying fastest
(prefix-product strides). A group for a token such as "tp-dp" holds the ranks that
differ only along the named axes.
"""

from __future__ import annotations

from itertools import product

ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")  # Megatron's default, --use-tp-pp-dp-mapping


class Grid:
    """One factorisation of the world: ordered axis sizes, strides, groups, coordinates."""

    def __init__(self, sizes: dict[str, int], order: str):
        names = order.split("-")
        for name in sizes:  # Megatron appends size-1 axes missing from the order
            if name not in names:
                names.append(name)
        self.names: tuple[str, ...] = tuple(names)
        self.sizes: tuple[int, ...] = tuple(sizes[n] for n in names)
        strides, s = [], 1
        for size in self.sizes:
            strides.append(s)
            s *= size
        self.strides: tuple[int, ...] = tuple(strides)
        self.world_size: int = s
        self._cache: dict[str, tuple[tuple[int, ...], ...]] = {}

    def index(self, axis: str) -> int:
        try:
            return self.names.index(axis)
        except ValueError:
            raise KeyError(f"unknown axis {axis!r}; valid axes: {', '.join(self.names)}") from None

    def groups(self, token: str) -> list[list[int]]:
        """Groups of `token` ("tp", "tp-dp", ...), ordered exactly as RankGenerator.get_ranks."""
        return [list(g) for g in self._groups(token)]

    def _groups(self, token: str) -> tuple[tuple[int, ...], ...]:
        cached = self._cache.get(token)
        if cached is None:
            masked = {self.index(t) for t in token.split("-")}
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
