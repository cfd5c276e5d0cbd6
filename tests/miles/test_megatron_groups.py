"""The Megatron group check inside real Ray train actors, with real gloo groups.

Eight actors are placed once (2 nodes x 4 logical GPUs) with `train_actor_options` and
join each topology in turn (init_and_verify, then teardown), so megatron-core is imported
once per actor. A wrong Topology must stop the job with both sides printed.
"""

from __future__ import annotations

import socket

import pytest

from miles.megatron.groups import GROUPS, compare, expected
from miles_topology import Topology

BASE = "--actor-num-nodes 2 --actor-num-gpus-per-node 4 --num-gpus-per-node 4 --num-layers 8"
TOPOLOGIES = {
    # EP 2 != 4 GPUs per node: an EP group is not a node
    "ep2-per-node-4": BASE + " --expert-model-parallel-size 2 --num-experts 8",
    # PP > 1 with TP and EP
    "tp2-pp2-ep2": BASE + " --tensor-model-parallel-size 2 --sequence-parallel"
    " --pipeline-model-parallel-size 2 --expert-model-parallel-size 2"
    " --expert-tensor-parallel-size 1 --num-experts 8",
    # CP, and an EP group spanning both nodes
    "cp2-ep8": BASE + " --context-parallel-size 2 --expert-model-parallel-size 8"
    " --num-experts 8",
    # the tp-cp-ep-pp-dp order (for the mismatch case, not in the parametrised check)
    "tp2-pp2-ep2-tp-pp-dp": BASE + " --tensor-model-parallel-size 2 --sequence-parallel"
    " --pipeline-model-parallel-size 2 --expert-model-parallel-size 2"
    " --expert-tensor-parallel-size 1 --num-experts 8 --use-tp-pp-dp-mapping",
}


def flags(name: str) -> list[str]:
    return TOPOLOGIES[name].split()


def test_expected_groups_hold_the_rank():
    """Pure: each of the compared groups contains the rank and comes from the Topology."""
    t = Topology.from_flags(flags("tp2-pp2-ep2"))
    for r in range(t.world_size):
        want = expected(t, r)
        assert set(want) == set(GROUPS) and all(r in g for g in want.values())
        assert compare(t, r, want) == []
    bad = dict(expected(t, 0), ep=[0, 2])
    (line,) = compare(t, 0, bad)
    assert "megatron-core [0, 2] != Topology [0, 1]" in line


@pytest.fixture(scope="module")
def actors():
    import ray

    from miles.ray import start_cluster

    class Trainer:  # local, so Ray ships it by value to the workers
        """A train actor: joins a topology, checks megatron-core's groups, leaves it."""

        def check(self, rank: int, line: list[str], port: int | None, verify_line=None):
            import warnings

            warnings.filterwarnings("ignore")
            from miles.megatron import init, teardown, verify

            init(Topology.from_flags(line), rank, port=port)
            try:
                return verify(Topology.from_flags(verify_line or line), rank)
            finally:
                teardown()

    cluster = start_cluster(Topology.from_flags(flags("ep2-per-node-4")))
    trainer = ray.remote(Trainer)
    handles = [trainer.options(**cluster.train_actor_options(r)).remote() for r in range(8)]
    yield cluster, handles
    cluster.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run(actors, name: str, verify_name: str | None = None, first: bool = False):
    import ray

    cluster, handles = actors
    port = None if first else free_port()  # None: MASTER_PORT the placement set
    verify_line = flags(verify_name) if verify_name else None
    refs = [h.check.remote(r, flags(name), port, verify_line) for r, h in enumerate(handles)]
    return ray.get(refs, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ep2-per-node-4", "tp2-pp2-ep2", "cp2-ep8"])
def test_megatron_groups_equal_the_topology_in_ray_actors(actors, name):
    got = run(actors, name, first=name == "ep2-per-node-4")
    t = Topology.from_flags(flags(name))
    for r, groups in enumerate(got):
        assert groups == expected(t, r)
    # the EP group is not "a node" when EP != GPUs per node
    nodes = {tuple(sorted({t.placement(r)[0] for r in g["ep"]})) for g in got}
    assert nodes == ({(0,), (1,)} if t.layout.ep <= t.layout.gpus_per_node else {(0, 1)})


@pytest.mark.slow
def test_a_group_mismatch_stops_the_job_with_both_sides(actors):
    import ray

    # megatron-core initialised in tp-cp-ep-pp-dp order, checked against the same sizes in
    # the default order: the dp and pp groups differ
    with pytest.raises(ray.exceptions.RayTaskError) as e:
        run(actors, "tp2-pp2-ep2-tp-pp-dp", verify_name="tp2-pp2-ep2")
    text = str(e.value)
    assert "GroupMismatch" in text and "megatron-core groups differ from the Topology" in text
    assert "megatron-core [" in text and "!= Topology [" in text
