"""Test-only faults: each re-creates one way R3 broke, so the metrics are shown able to fail.

- `ownership-mod-gpus`: a rank loads and exports the experts of EP rank
  `rank % gpus_per_node` (wrapped to ep), the old assumption, while tokens are still
  dispatched by the real EP group.
- `replay-shift`: every rank replays its rows shifted by one token.
- `early-post-process`: no sender barrier and no engine guard; the first sender of each
  engine asks it to post-process as soon as its own upload is done.
- `no-sender-barrier`: the barrier alone is skipped; the engine's guard must then refuse
  (the job stops with an error instead of serving a partial update).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miles_topology import Topology

NAMES = ("ownership-mod-gpus", "replay-shift", "early-post-process", "no-sender-barrier")


@dataclass(frozen=True)
class Faults:
    names: frozenset[str] = frozenset()

    def __post_init__(self):
        bad = sorted(set(self.names) - set(NAMES))
        if bad:
            raise ValueError(f"unknown fault {bad[0]!r}; known: {', '.join(NAMES)}")

    def owned(self, topo: Topology, rank: int) -> tuple[int, ...]:
        """Experts this rank holds: the Topology's block, unless the old rule is injected."""
        if "ownership-mod-gpus" not in self.names:
            return topo.local_experts(rank)
        e = (rank % topo.gpus_per_node) % topo.ep
        return topo.local_experts(topo.rank(expert=True, ep=e))

    def shift(self, rows: np.ndarray) -> np.ndarray:
        if "replay-shift" not in self.names or len(rows) < 2:
            return rows
        return np.concatenate([rows[1:], rows[-1:]])

    @property
    def engine_guard(self) -> bool:
        return "early-post-process" not in self.names

    @property
    def sender_barrier(self) -> bool:
        return not {"early-post-process", "no-sender-barrier"} & self.names
