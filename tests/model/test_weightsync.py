"""Weight-sync plan: every engine receives the whole model once, from ranks that hold it."""

from __future__ import annotations

import pytest

from miles_topology import Topology
from miles_topology.model.weightsync import engine_senders, rank_sends, sync_plan

CASES = {
    "default-ep2-colocated": dict(nodes=2, gpus_per_node=4, ep=2, colocate=True),
    "ep8-over-nodes": dict(nodes=2, gpus_per_node=4, node_gpus=4, ep=8, experts=16,
                           rollout_gpus=4, engine_size=4),
    "etp2-pp2-vpp2": dict(nodes=1, gpus_per_node=8, tp=2, sp=True, etp=2, ep=2, pp=2, vpp=2,
                          layers=8, rollout_gpus=4, engine_size=2),
    "engine-spans-nodes": dict(nodes=2, gpus_per_node=2, node_gpus=2, ep=4, rollout_gpus=4,
                               engine_size=4),
    "cp2-ep2": dict(nodes=1, gpus_per_node=8, cp=2, ep=2, colocate=True, engine_size=2),
}


def topo(**kw) -> Topology:
    base = dict(layers=4, experts=8, topk=2)
    return Topology(**{**base, **kw})


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_every_engine_gets_every_shard_once_from_a_holder(kw):
    t = topo(**kw)
    plan = sync_plan(t)
    assert len(plan) == t.placement_group.rollout_engines > 0
    for sync in plan:
        dense, experts = set(), {}
        for rank, shard in sync.sends:
            c = t.grid("dense").coord(rank)
            x = t.grid("expert").coord(rank)
            assert c["pp"] == shard.pp
            if shard.kind == "dense":
                assert shard.part == c["tp"] and shard.parts == t.layout.tp
                assert (shard.pp, shard.part) not in dense
                dense.add((shard.pp, shard.part))
                assert set(shard.layers) == {
                    layer for v in range(t.stages.chunks) for layer in t.stage_layers(shard.pp, v)}
            else:
                assert shard.part == x["etp"] and shard.parts == t.layout.etp
                assert shard.experts == t.local_experts(rank)  # the one ownership rule
                assert shard.layers == t.stages.replay(shard.pp)
                for e in shard.experts:
                    key = (shard.pp, shard.part, e)
                    assert key not in experts
                    experts[key] = rank
        assert dense == {(p, tp) for p in range(t.layout.pp) for tp in range(t.layout.tp)}
        assert set(experts) == {
            (p, j, e)
            for p in range(t.layout.pp)
            for j in range(t.layout.etp)
            for e in range(t.model.experts)
        }
        assert sync.senders == engine_senders(t, sync.engine)
        assert set(sync.senders) == {r for r, _ in sync.sends}


def test_colocated_engines_take_local_senders_when_they_hold_the_shard():
    t = topo(**CASES["default-ep2-colocated"])
    for sync in sync_plan(t):
        (gpu,) = t.engine_gpus(sync.engine)
        (here,) = [r for r in range(t.world_size) if t.placement(r) == gpu]
        mine = {(s.kind, s.experts) for s in sync.of(here)}
        assert mine == {("dense", ()), ("expert", t.local_experts(here))}


def test_senders_follow_ownership_not_node_size():
    # EP 8 over nodes of 4: the ranks owning experts 8..15 live on node 1; a plan built
    # from rank % gpus_per_node would never ask them.
    t = topo(**CASES["ep8-over-nodes"])
    (sync,) = sync_plan(t)
    owners = {e: r for r, s in sync.sends if s.kind == "expert" for e in s.experts}
    assert {owners[e] for e in range(8, 16)} == {4, 5, 6, 7}
    assert sync.senders == tuple(range(8))


def test_ready_only_when_every_sender_finished():
    t = topo(**CASES["etp2-pp2-vpp2"])
    for sync in sync_plan(t):
        assert len(sync.senders) > 1
        assert not sync.ready([])
        assert not sync.ready(sync.senders[:-1])
        assert sync.missing(sync.senders[:-1]) == sync.senders[-1:]
        assert sync.ready(sync.senders)


def test_rank_sends_partitions_the_plan():
    t = topo(**CASES["engine-spans-nodes"])
    plan = sync_plan(t)
    total = sum(len(s.sends) for s in plan)
    got = sum(len(v) for r in range(t.world_size) for v in rank_sends(plan, r).values())
    assert got == total
