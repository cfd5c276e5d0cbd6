"""Weight sync plan: which train ranks send which weights to which rollout engine.

An engine may post-process its weights (scale swizzling, repacking) only after every
rank that sends to it has finished uploading; that set follows from expert ownership
and engine placement, so it is derived here and nowhere else (see reference/r3.md).

Every engine needs the whole model: each pipeline stage's dense shards (one per TP rank)
and its experts (one per ETP x EP coordinate). Replicas (DP, CP, expert-DP) hold the same
shard; the sender is taken from the replicas on the engine's own GPUs (colocated: a local
upload), else on the engine's nodes, else from all, rotating by engine index so engines
spread over replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Topology

Key = tuple  # ("dense", pp, tp) or ("expert", pp, etp, ep)


@dataclass(frozen=True)
class Shard:
    """One piece an engine receives: a stage's dense TP shard or an ETP shard of its experts.

    `part` of `parts` is the tp rank (dense) or etp rank (expert) whose slice this is;
    `layers` are the stage's decoder layers (dense) or MoE layers (expert); `experts` the
    global expert ids (expert shards only), read from `Topology.local_experts`.
    """

    kind: str
    pp: int
    part: int
    parts: int
    layers: tuple[int, ...]
    experts: tuple[int, ...] = ()


@dataclass(frozen=True)
class EngineSync:
    """Everything one engine receives per sync, and from whom."""

    engine: int
    senders: tuple[int, ...]
    sends: tuple[tuple[int, Shard], ...]  # (train rank, shard), in key order

    def of(self, rank: int) -> tuple[Shard, ...]:
        """Shards `rank` sends to this engine (empty when it is not a sender)."""
        return tuple(s for r, s in self.sends if r == rank)

    def missing(self, finished: Iterable[int]) -> tuple[int, ...]:
        """Senders that have not finished yet: the engine must not post-process while any."""
        done = set(finished)
        return tuple(r for r in self.senders if r not in done)

    def ready(self, finished: Iterable[int]) -> bool:
        return not self.missing(finished)


def engine_sources(topo: Topology, engine: int) -> dict[Key, int]:
    """Shard key -> the train rank that sends it to `engine`."""
    gpus = set(topo.engine_gpus(engine))
    nodes = {n for n, _ in gpus}
    out: dict[Key, int] = {}
    for key, holders in _holders(topo).items():
        on_gpu = [r for r in holders if topo.placement(r) in gpus]
        on_node = [r for r in holders if topo.placement(r)[0] in nodes]
        pick = on_gpu or on_node or holders
        out[key] = pick[engine % len(pick)]
    return out


def engine_senders(topo: Topology, engine: int) -> tuple[int, ...]:
    """Train ranks that feed `engine`; it must wait for all of them before post-processing."""
    return tuple(sorted(set(engine_sources(topo, engine).values())))


def sync_groups(topo: Topology) -> dict[int, tuple[int, ...]]:
    """engine -> its senders, for every rollout engine."""
    return {e: engine_senders(topo, e) for e in range(topo.num_engines)}


def engine_sync(topo: Topology, engine: int) -> EngineSync:
    """The full sync plan of one engine: every shard of the model and its sender."""
    sources = engine_sources(topo, engine)
    sends = tuple((rank, _shard(topo, key, rank)) for key, rank in sorted(sources.items()))
    return EngineSync(engine, tuple(sorted(set(sources.values()))), sends)


def sync_plan(topo: Topology) -> tuple[EngineSync, ...]:
    """`engine_sync` of every rollout engine, indexed by engine."""
    return tuple(engine_sync(topo, e) for e in range(topo.num_engines))


def rank_sends(plan: Iterable[EngineSync], rank: int) -> dict[int, tuple[Shard, ...]]:
    """engine -> shards that train rank `rank` sends it (engines it does not feed omitted)."""
    return {s.engine: s.of(rank) for s in plan if rank in s.senders}


def _shard(topo: Topology, key: Key, rank: int) -> Shard:
    if key[0] == "dense":
        _, pp, tp = key
        layers = () if topo.layers is None else tuple(
            layer for v in range(topo.chunks) for layer in topo.stage_layers(pp, v)
        )
        return Shard("dense", pp, tp, topo.tp, layers)
    _, pp, etp, _ep = key
    layers = () if topo.layers is None else topo.replay_layers(pp)
    return Shard("expert", pp, etp, topo.etp, layers, topo.local_experts(rank))


@lru_cache(maxsize=4)
def _holders(topo: Topology) -> dict[Key, list[int]]:
    """Every shard key -> the ranks holding it (replicas in rank order); computed once per
    Topology, not once per engine."""
    out: dict[Key, list[int]] = {}
    for r in range(topo.world_size):
        d = topo.coord(r)
        out.setdefault(("dense", d["pp"], d["tp"]), []).append(r)
        if topo.experts:
            x = topo.coord(r, expert=True)
            out.setdefault(("expert", x["pp"], x["etp"], x["ep"]), []).append(r)
    return out
