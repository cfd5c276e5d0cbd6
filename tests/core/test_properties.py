"""Hypothesis properties of the derived layout (1,200+ examples in total)."""

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from miles_topology import Topology

AXES = ["tp", "cp", "ep", "dp", "pp"]


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def topologies(draw):
    nodes = draw(st.integers(1, 6))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    world = nodes * gpn
    tp = draw(st.sampled_from(_divisors(world)))
    cp = draw(st.sampled_from(_divisors(world // tp)))
    pp = draw(st.sampled_from(_divisors(world // (tp * cp))))
    etp = draw(st.sampled_from(_divisors(world // pp)))
    ep = draw(st.sampled_from(_divisors(world // (pp * etp))))
    experts = ep * draw(st.integers(1, 4))
    colocate = draw(st.booleans())
    if colocate:  # engines inside a node, or whole nodes that divide the world
        engine = draw(st.sampled_from(_divisors(gpn) + [gpn * k for k in _divisors(nodes)]))
        rollout = None
    else:  # rollout GPUs follow the actor's in the packed placement group (nodes of gpn)
        engine = draw(st.sampled_from(_divisors(gpn) + [gpn * 2, gpn * 4]))
        rollout = engine * draw(st.integers(1, 4))
    return Topology(
        nodes=nodes, gpus_per_node=gpn, node_gpus=gpn, tp=tp, cp=cp, pp=pp, etp=etp, ep=ep,
        sp=tp > 1, experts=experts, colocate=colocate, rollout_gpus=rollout,
        engine_size=engine,
        order=draw(st.sampled_from(
            ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"] if pp == 1 or tp * cp == etp * ep
            else ["tp-cp-ep-dp-pp"])),
    )


def tokens(names):
    return ["-".join(c) for k in range(1, len(names) + 1) for c in combinations(names, k)]


@settings(max_examples=300, deadline=None)
@given(topologies(), st.data())
def test_groups_partition_the_world(topo, data):
    for expert in (False, True):
        token = data.draw(st.sampled_from(tokens(AXES)))
        groups = topo.rank_groups(token, expert=expert)
        flat = [r for g in groups for r in g]
        assert sorted(flat) == list(range(topo.world_size))
        size = 1
        for axis in token.split("-"):
            size *= topo.grid("expert" if expert else "dense").size(axis)
        assert all(len(g) == size for g in groups)


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_coord_and_rank_are_inverse(topo):
    for kind in ("dense", "expert"):
        grid = topo.grid(kind)
        for r in range(topo.world_size):
            assert grid.rank(**grid.coord(r)) == r


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_every_expert_owned_once_per_ep_group(topo):
    owners = {e: [r for r in range(topo.world_size) if e in topo.local_experts(r)]
              for e in range(topo.model.experts)}
    for e in range(topo.model.experts):
        # one owner per (edp replica, etp rank, pp stage): world / ep owners in all
        assert len(owners[e]) == topo.world_size // topo.layout.ep
        assert len({topo.grid("expert").coord(r)["ep"] for r in owners[e]}) == 1
    for group in topo.rank_groups("ep", expert=True):
        owned = [e for r in group for e in topo.local_experts(r)]
        assert sorted(owned) == list(range(topo.model.experts))


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_placement_is_a_bijection_onto_the_gpus(topo):
    spots = [topo.placement(r) for r in range(topo.world_size)]
    assert len(set(spots)) == topo.world_size
    assert set(spots) == {
        (n, g) for n in range(topo.layout.nodes) for g in range(topo.layout.gpus_per_node)
    }
    engine_spots = [
        s for e in range(topo.placement_group.rollout_engines) for s in topo.engine_gpus(e)
    ]
    assert len(set(engine_spots)) == len(engine_spots) == topo.placement_group.rollout_gpus
    for e in range(topo.placement_group.rollout_engines):
        gpus = topo.engine_gpus(e)
        # engine e holds positions offset + e*size .. of the packed placement group
        first = topo.placement_group.rollout_offset + e * topo.rollout.engine_size
        assert gpus == tuple(divmod(i, topo.layout.node_gpus_used)
                             for i in range(first, first + topo.rollout.engine_size))
        # an engine fits in one node or spans whole nodes
        assert (
            len({n for n, _ in gpus}) == 1
            or topo.rollout.engine_size % topo.layout.node_gpus_used == 0
        )
    if topo.rollout.colocate:
        assert set(engine_spots) == set(spots)
    else:
        assert not set(engine_spots) & set(spots)


@settings(max_examples=200, deadline=None)
@given(topologies(), st.booleans())
def test_yaml_round_trip_keeps_the_topology_and_what_was_given(topo, explicit_etp):
    import tempfile

    from miles_topology.reading.sources import to_yaml

    if explicit_etp:
        topo = topo.model_copy(update={"etp": topo.layout.etp})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(to_yaml(topo))
        f.flush()
        back = Topology.from_yaml(f.name)
    assert back == topo and back.layout.etp_implied == topo.layout.etp_implied
    assert [w.code for w in back.warnings] == [w.code for w in topo.warnings]
