"""Weight sync plan: which train ranks send which weights to which rollout engine.

An engine may post-process its weights (scale swizzling, repacking) only after every
rank that sends to it has finished uploading; that set follows from expert ownership
and engine placement, so it is derived here and nowhere else (README, "What caused the
reported R3 spikes").

Every engine needs the whole model: each pipeline stage's dense shards (one per TP rank)
and its experts (one per ETP x EP coordinate). Replicas (DP, CP, expert-DP) hold the same
shard; the sender is taken from the replicas on the engine's own GPUs (colocated: a local
upload), else on the engine's nodes, else from all, rotating by engine index so engines
spread over replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .topology import Topology

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
        return self._by_rank.get(rank, ())

    @cached_property
    def _by_rank(self) -> dict[int, tuple[Shard, ...]]:
        """sends grouped by sender once, so asking every sender is linear in the sends."""
        out: dict[int, list[Shard]] = {}
        for r, s in self.sends:
            out.setdefault(r, []).append(s)
        return {r: tuple(v) for r, v in out.items()}

    def missing(self, finished: Iterable[int]) -> tuple[int, ...]:
        """Senders that have not finished yet: the engine must not post-process while any."""
        done = set(finished)
        return tuple(r for r in self.senders if r not in done)

    def ready(self, finished: Iterable[int]) -> bool:
        return not self.missing(finished)


def engine_sources(topo: Topology, engine: int) -> dict[Key, int]:
    """Shard key -> the train rank that sends it to `engine`.

    Replicas are looked up through per-node indexes (the rank on a GPU is arithmetic:
    `Placement.rank_at`), never by scanning every holder:
    the whole plan stays linear in GPUs.
    """
    gpus = topo.engine_gpus(engine)
    nodes = sorted({n for n, _ in gpus})
    keys_of, by_node = _index(topo)
    on_gpu: dict[Key, list[int]] = {}
    ranks = (topo.placement_group.rank_at(gpu) for gpu in gpus)
    for r in sorted(r for r in ranks if r is not None):
        for key in keys_of[r]:
            on_gpu.setdefault(key, []).append(r)
    out: dict[Key, int] = {}
    for key, holders in _holders(topo).items():
        pick = on_gpu.get(key)
        if not pick:  # ranks ascend with nodes, so node order keeps rank order
            pick = [r for n in nodes for r in by_node[key].get(n, ())] or holders
        out[key] = pick[engine % len(pick)]
    return out


def engine_senders(topo: Topology, engine: int) -> tuple[int, ...]:
    """Train ranks that feed `engine`; it must wait for all of them before post-processing."""
    return tuple(sorted(set(engine_sources(topo, engine).values())))


def sync_groups(topo: Topology) -> dict[int, tuple[int, ...]]:
    """engine -> its senders, for every rollout engine."""
    return {e: engine_senders(topo, e) for e in range(topo.placement_group.rollout_engines)}


def engine_sync(topo: Topology, engine: int) -> EngineSync:
    """The full sync plan of one engine: every shard of the model and its sender."""
    sources = engine_sources(topo, engine)
    sends = tuple((rank, _shard(topo, key)) for key, rank in sorted(sources.items()))
    return EngineSync(engine, tuple(sorted(set(sources.values()))), sends)


def sync_plan(topo: Topology) -> tuple[EngineSync, ...]:
    """`engine_sync` of every rollout engine, indexed by engine."""
    return tuple(engine_sync(topo, e) for e in range(topo.placement_group.rollout_engines))


def rank_sends(plan: Iterable[EngineSync], rank: int) -> dict[int, tuple[Shard, ...]]:
    """engine -> shards that train rank `rank` sends it (engines it does not feed omitted)."""
    return {s.engine: s.of(rank) for s in plan if rank in s.senders}


def _shard(topo: Topology, key: Key) -> Shard:
    """The shard of `key`; every holder of a key holds the same shard, so it is built once
    per key (its experts are those of the key's EP rank: `Topology.local_experts`)."""
    return _shards(topo)[key]


@lru_cache(maxsize=4)
def _shards(topo: Topology) -> dict[Key, Shard]:
    dense: dict[int, tuple[int, ...]] = {}
    moe: dict[int, tuple[int, ...]] = {}
    if topo.model.layers is not None:
        for p in range(topo.layout.pp):
            dense[p] = topo.stages.pipeline(p)
            moe[p] = topo.stages.replay(p)
    out: dict[Key, Shard] = {}
    for key in _holders(topo):
        if key[0] == "dense":
            _, pp, tp = key
            out[key] = Shard("dense", pp, tp, topo.layout.tp, dense.get(pp, ()))
        else:
            _, pp, etp, _ep = key
            experts = topo.local_experts(_holders(topo)[key][0])  # the same for every holder
            out[key] = Shard("expert", pp, etp, topo.layout.etp, moe.get(pp, ()), experts)
    return out


@lru_cache(maxsize=4)
def _index(topo: Topology) -> tuple[list[list[Key]], dict[Key, dict[int, list[int]]]]:
    """Per train rank the keys it holds, and per key its holders grouped by node."""
    keys_of: list[list[Key]] = [[] for _ in range(topo.world_size)]
    by_node: dict[Key, dict[int, list[int]]] = {}
    for key, holders in _holders(topo).items():
        nodes = by_node.setdefault(key, {})
        for r in holders:
            keys_of[r].append(key)
            nodes.setdefault(topo.placement(r)[0], []).append(r)
    return keys_of, by_node


@lru_cache(maxsize=4)
def _holders(topo: Topology) -> dict[Key, list[int]]:
    """Every shard key -> the ranks holding it (replicas in rank order); computed once per
    Topology, not once per engine."""
    out: dict[Key, list[int]] = {}
    for r in range(topo.world_size):
        d = topo.grid("dense").coord(r)
        out.setdefault(("dense", d["pp"], d["tp"]), []).append(r)
        if topo.model.experts:
            x = topo.grid("expert").coord(r)
            out.setdefault(("expert", x["pp"], x["etp"], x["ep"]), []).append(r)
    return out
