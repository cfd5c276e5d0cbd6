"""Test-only faults: each re-creates one way R3 broke upstream, so the metrics are shown able
to fail on the default command, with no helper flag.

- `weight-sync-race`: miles' colocated weight update before the fix (radixark/miles
  `update_weight_from_tensor.py`, `UpdateWeightFromTensor.update_weights`, fixed by
  "Try to fix racing conditions in update weight from tensors", radixark/miles#254 /
  THUDM/slime#929): ranks form blocks of `--rollout-num-gpus-per-engine` consecutive ranks
  whose first rank sends to the block's engine, and rank 0 alone asks *every* engine to
  post-process right after its own sends, with no barrier; no engine guard either. Engines
  whose senders are still uploading post-process a partial update. Caught by
  `early_post_requests` (and the stale experts by `engines_agree` / log-prob difference).
- `early-post-process`: each engine post-processes as soon as the first of its planned
  senders has uploaded (no barrier, no guard), so with two or more senders it always
  serves a partial update. Caught by `early_post_requests` and the stale weights.
- `no-sender-barrier`: the barrier alone is skipped; the engine's guard must then refuse
  (the job stops with an error instead of serving a partial update).
- `routes-pad-dp`: replay rows padded to a multiple of dp x pad multiplier while tokens are
  padded to tp x pad multiplier (the regression reverted upstream). Caught by the trainer's
  shape guard, or by `route_agreement` where sequence parallel slices them.
- `pad-rows-minus-one`: pad rows shipped as -1, so every chunk holding one routes live.
  Caught by `route_agreement` (near-ties flip between engine and trainer numerics).
- `replay-disabled`: the trainers never replay (routing replay left off). Caught by
  `route_agreement` and the log-prob difference.
- `ownership-ignores-grid`: a rank holds the experts of EP rank
  `local_gpu * ep // gpus_per_node` (experts laid over a node's GPUs in contiguous blocks,
  the "an EP group is one node" assumption; `local_gpu % ep` when EP exceeds a node),
  while tokens are still dispatched by the real expert grid. On the default 2 x 4, EP 2
  layout it gives GPUs 1 and 2 of each node the wrong block. Caught by `unplanned_shards`
  and the log-prob difference.
- `replay-shift`: every rank replays its rows shifted by one token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miles_topology import Topology

NAMES = (
    "weight-sync-race", "early-post-process", "no-sender-barrier", "routes-pad-dp",
    "pad-rows-minus-one", "replay-disabled", "ownership-ignores-grid", "replay-shift",
)


@dataclass(frozen=True)
class Faults:
    names: frozenset[str] = frozenset()

    def __post_init__(self):
        bad = sorted(set(self.names) - set(NAMES))
        if bad:
            raise ValueError(f"unknown fault {bad[0]!r}; known: {', '.join(NAMES)}")

    def owned(self, topo: Topology, rank: int) -> tuple[int, ...]:
        """Experts this rank holds: the Topology's block, unless the old rule is injected."""
        if "ownership-ignores-grid" not in self.names:
            return topo.local_experts(rank)
        gpu = topo.placement(rank)[1]
        gpn = topo.layout.gpus_per_node
        e = gpu * topo.layout.ep // gpn if topo.layout.ep <= gpn else gpu % topo.layout.ep
        return topo.local_experts(topo.grid("expert").rank(ep=e))

    def shift(self, rows: np.ndarray) -> np.ndarray:
        if "replay-shift" not in self.names or len(rows) < 2:
            return rows
        return np.concatenate([rows[1:], rows[-1:]])

    @property
    def replay(self) -> bool:
        return "replay-disabled" not in self.names

    @property
    def pad_id(self) -> int | None:
        """The id pad rows are shipped with: None = a valid route (the fix), or -1."""
        return -1 if "pad-rows-minus-one" in self.names else None

    @property
    def route_pad_to_dp(self) -> bool:
        return "routes-pad-dp" in self.names

    @property
    def early_post(self) -> bool:
        return "early-post-process" in self.names

    @property
    def race(self) -> bool:
        return "weight-sync-race" in self.names

    @property
    def engine_guard(self) -> bool:
        return not {"early-post-process", "weight-sync-race"} & self.names

    @property
    def sender_barrier(self) -> bool:
        return not {"early-post-process", "no-sender-barrier", "weight-sync-race"} & self.names
