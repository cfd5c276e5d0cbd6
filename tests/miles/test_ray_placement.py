"""Ray placement: actors land on the node and GPU the Topology says, on a real 3-raylet cluster.

One local cluster (3 raylets x 4 logical GPUs) is shared by the module; each case places
its Topology with `start_cluster` (a placement group on that cluster) and releases it.
"""

from __future__ import annotations

import time

import pytest

from miles.ray.plan import bind, budget_problems, gpu_key, need_per_node, slots
from miles_topology import Topology, TopologyError


def topo(line: str) -> Topology:
    return Topology.from_flags((line + " --num-experts 8 --num-layers 4").split())


COLOCATED = topo("--actor-num-nodes 2 --actor-num-gpus-per-node 4 --num-gpus-per-node 4"
                 " --expert-model-parallel-size 2 --colocate --rollout-num-gpus-per-engine 4")
DISAGG = topo("--actor-num-nodes 2 --actor-num-gpus-per-node 4 --num-gpus-per-node 4"
              " --expert-model-parallel-size 8 --rollout-num-gpus 4"
              " --rollout-num-gpus-per-engine 4")
SPAN_DISAGG = topo("--actor-num-nodes 1 --actor-num-gpus-per-node 4 --num-gpus-per-node 4"
                   " --expert-model-parallel-size 4 --rollout-num-gpus 8"
                   " --rollout-num-gpus-per-engine 8")
SPAN_COLOCATED = topo("--actor-num-nodes 2 --actor-num-gpus-per-node 4 --num-gpus-per-node 4"
                      " --expert-model-parallel-size 2 --colocate --rollout-num-gpus-per-engine 8")
MID_NODE = topo("--actor-num-nodes 1 --actor-num-gpus-per-node 2 --num-gpus-per-node 4"
               " --expert-model-parallel-size 2 --rollout-num-gpus 4"
               " --rollout-num-gpus-per-engine 2")  # engine 0 on node 0 GPUs 2-3, after rank 1
TOO_BIG = topo("--actor-num-nodes 3 --actor-num-gpus-per-node 4 --num-gpus-per-node 4"
               " --expert-model-parallel-size 4 --rollout-num-gpus 4")
TOO_WIDE = topo("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --num-gpus-per-node 8"
                " --expert-model-parallel-size 8 --colocate")


# ---- pure: no cluster -------------------------------------------------------------------


def test_gpu_ids_sort_numerically():
    assert sorted(["10", "9", "1", "11", "2"], key=gpu_key) == ["1", "2", "9", "10", "11"]


def test_bind_gives_the_kth_gpu_to_the_kth_numeric_id():
    needed = [(0, g) for g in range(12)]
    ids = ["3", "10", "0", "9", "1", "11", "2", "4", "5", "6", "7", "8"]  # bundle -> GPU id
    bound = bind(needed, {b: (0, gid) for b, gid in enumerate(ids)})
    assert [ids[bound[(0, g)]] for g in range(12)] == [str(g) for g in range(12)]


def test_mid_node_engine_slots():
    assert slots(MID_NODE) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert MID_NODE.engine_gpus(0) == ((0, 2), (0, 3)) and need_per_node(MID_NODE) == [4, 2]


def test_slots_and_need():
    assert slots(COLOCATED) == [(n, g) for n in range(2) for g in range(4)]
    assert need_per_node(DISAGG) == [4, 4, 4]
    assert need_per_node(SPAN_DISAGG) == [4, 4, 4]


def test_budget_arithmetic():
    (p,) = budget_problems(TOO_BIG, [4, 4, 4])
    assert p.code == "gpu-budget-exceeded"
    assert "4 node(s) with GPUs [4, 4, 4, 4] = 16" in p.message and "node 3 is missing" in p.message
    (p,) = budget_problems(TOO_WIDE, [4, 4, 4])
    assert "node 0 has 4 GPUs (needs 8)" in p.message
    assert not budget_problems(DISAGG, [4, 4, 4])


def test_unlabelled_nodes_order_by_ip_numerically(monkeypatch):
    """A real cluster (RAY_ADDRESS) has no miles_node_<i> labels: nodes order by IP."""
    import ray

    from miles.ray.cluster import _nodes

    def node(ip, gpus=8):
        return {"Alive": True, "NodeID": f"id-{ip}", "NodeManagerAddress": ip,
                "Resources": {"GPU": gpus, f"node:{ip}": 1}}

    fake = [node("10.0.0.10"), node("10.0.0.9"), node("10.0.0.2"), node("10.0.0.1", gpus=0)]
    monkeypatch.setattr(ray, "nodes", lambda: fake)
    got = _nodes()
    assert [n.ip for n in got] == ["10.0.0.2", "10.0.0.9", "10.0.0.10"]  # head w/o GPUs out
    assert got[2].pin == "node:10.0.0.10"


def test_unreachable_ray_address_fails_fast():
    import ray

    from miles.ray import PlacementTimeout, start_cluster

    if ray.is_initialized():
        pytest.skip("a Ray connection is already open in this process")
    start = time.monotonic()
    with pytest.raises(PlacementTimeout, match="did not answer"):
        start_cluster(COLOCATED, address="127.0.0.1:1", wait_s=1)
    assert time.monotonic() - start < 10


# ---- on a real multi-node Ray cluster ---------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    from miles.ray.local import start_local

    local = start_local(3, 4)
    ray.init(address=local.address, logging_level="warning")
    yield local
    ray.shutdown()
    local.shutdown()


def landings(cluster, ranks, engine_gpus):
    """Start one probe actor per train rank and per (engine, i); return where each landed."""
    import ray

    class Where:  # local, so Ray ships it by value to the workers
        def where(self):
            from miles.ray import landing

            return landing()

    where = ray.remote(Where)
    actors = [where.options(**cluster.train_actor_options(r)).remote() for r in ranks]
    actors += [where.options(**cluster.engine_actor_options(e, i)).remote()
               for e, i in engine_gpus]
    got = ray.get([a.where.remote() for a in actors], timeout=180)
    return dict(zip(ranks, got)), dict(zip(engine_gpus, got[len(ranks):]))


def assert_on(cluster, w: dict, slot: tuple[int, int]) -> None:
    node, gpu = slot
    assert w["node_id"] == cluster.node_id(node), (slot, w)
    assert w["reserved"] == [gpu], (slot, w)  # logical ids: k-th GPU of a node is id k
    assert cluster.gpu_id(slot) == str(gpu)
    assert w["env"]["CUDA_VISIBLE_DEVICES"] == str(gpu)
    assert (w["env"]["NODE_RANK"], w["env"]["LOCAL_RANK"]) == (str(node), str(gpu))


def every(t: Topology):
    return list(range(t.world_size)), [(e, i) for e in range(t.placement_group.rollout_engines)
                                       for i in range(t.rollout.engine_size)]


# Each actor is a process; to stay lean a case starts the actors that prove its point.
CASES = {
    "colocated": (COLOCATED, list(range(8)), [(0, 0), (1, 0), (1, 3)]),
    "disaggregated": (DISAGG, [0, 7], [(0, i) for i in range(4)]),
    "engine-spans-2-nodes": (SPAN_DISAGG, [0, 3], [(0, i) for i in range(8)]),
    "engine-starts-mid-node": (MID_NODE, *every(MID_NODE)),
    "colocated-engine-spans-2-nodes": (SPAN_COLOCATED, *every(SPAN_COLOCATED)),
}
SLOW = {"colocated-engine-spans-2-nodes"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in CASES])
def test_actors_land_where_the_topology_says(ray_cluster, name):
    from miles.ray import start_cluster

    t, ranks, engine_gpus = CASES[name]
    with start_cluster(t) as cluster:
        train, engines = landings(cluster, ranks, engine_gpus)
        for r, w in train.items():
            assert_on(cluster, w, t.placement(r))
            env = w["env"]
            assert (env["RANK"], env["WORLD_SIZE"]) == (str(r), str(t.world_size))
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == tuple(map(str, cluster.master))
        for (e, i), w in engines.items():
            assert_on(cluster, w, t.engine_gpus(e)[i])
            assert (w["env"]["MILES_ENGINE"], w["env"]["MILES_ENGINE_RANK"]) == (str(e), str(i))
        if t.rollout.colocate:  # an engine GPU is its train rank's very GPU
            by_slot = {t.placement(r): w["reserved"] for r, w in train.items()}
            for (e, i), w in engines.items():
                assert by_slot[t.engine_gpus(e)[i]] == w["reserved"]
        else:  # engine GPUs are not train GPUs (they may share a node: packed placement)
            assert {t.engine_gpus(e)[i] for e, i in engines}.isdisjoint(
                {t.placement(r) for r in range(t.world_size)})
        if t.rollout.engine_size == 8:  # the engine really spans two nodes
            assert len({w["node_id"] for w in engines.values()}) == 2


@pytest.mark.parametrize("t", [TOO_BIG, TOO_WIDE], ids=["4-nodes-on-3", "8-gpus-on-4"])
def test_more_gpus_than_the_cluster_fails_at_once(ray_cluster, t):
    import ray

    from miles.ray import start_cluster

    start = time.monotonic()
    with pytest.raises(TopologyError) as e:
        start_cluster(t)
    assert time.monotonic() - start < 5
    assert e.value.codes == ["gpu-budget-exceeded"]
    assert "needs" in e.value.problems[0].message
    assert not ray.util.placement_group_table() or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


def test_wait_for_held_gpus_is_bounded_and_says_why(ray_cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    from miles.ray import PlacementTimeout, start_cluster

    blocker = placement_group([{"GPU": 1, "miles_node_0": 0.001}] * 4)
    blocker.wait(30)
    try:
        start = time.monotonic()
        with pytest.raises(PlacementTimeout, match="placement group of 8 GPU bundles"):
            start_cluster(COLOCATED, wait_s=3)
        assert time.monotonic() - start < 10
    finally:
        remove_placement_group(blocker)


@pytest.mark.slow
def test_connects_to_ray_address(ray_cluster, monkeypatch):
    """With RAY_ADDRESS set, start_cluster joins that cluster instead of starting one."""
    import ray

    from miles.ray import start_cluster

    ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    try:
        cluster = start_cluster(COLOCATED)
        assert cluster._local is None and cluster._owns_conn
        assert [n.pin for n in cluster.nodes] == [f"miles_node_{i}" for i in range(3)]
        assert cluster.gpu_id((1, 3)) == "3"
        cluster.shutdown()
        assert not ray.is_initialized()
    finally:
        if not ray.is_initialized():
            ray.init(address=ray_cluster.address, logging_level="warning")


@pytest.mark.slow
def test_backend_hosts_fork_roles_on_their_node_with_their_slot_env(ray_cluster):
    """The reference backend forks a node's roles from one host per node: each host runs on
    its Topology node, each role process sees its own slot's environment, and killing a
    host leaves none of its processes behind."""

    import ray

    from miles.backend.faults import Faults
    from miles.backend.workers import spawn
    from miles.ray import start_cluster

    t = MID_NODE  # ranks 0-1 and engine 0 on node 0, engine 1 on node 1
    with start_cluster(t) as cluster:
        job = spawn(cluster, t)
        assert len(job.hosts) == 2
        for n in (0, 1):
            host = job.engines[n].host  # engine n's leader GPU is on node n
            assert ray.get(host.where.remote()) == cluster.node_id(n)
        assert job.train_env == [cluster.train_env(r) for r in range(t.world_size)]
        assert all(cluster.train_actor_options(r)["runtime_env"]["env_vars"] == job.train_env[r]
                   for r in range(t.world_size))
        started = ray.get([p.host.start.remote(p.name, "engine", env, dict(topo=t, engine=e,
                                                                           seed=0))
                           for e, (p, env) in enumerate(zip(job.engines, job.engine_env))])
        for e, got in enumerate(started):
            want = cluster.engine_env(e)
            assert got["env"] == want
            assert (want["NODE_RANK"], want["CUDA_VISIBLE_DEVICES"]) == \
                (str(e), cluster.gpu_id(t.engine_gpus(e)[0]))
        assert ray.get(job.engines[1].call("report"))["version"] == -1  # it answers
        # rank 0 alone: blocked in the gloo rendezvous, as a failed job's ranks can be
        rank0 = job.train[0]
        rank0.host.start.remote(rank0.name, "trainer", job.train_env[0], dict(
            topo=t, rank=0, seed=0, master=job.master, faults=Faults()), job.engines)
        deadline = time.monotonic() + 30
        while rank0.name not in ray.get(rank0.host.pids.remote()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # well inside the rendezvous
        pids = [s["pid"] for s in started] + [ray.get(rank0.host.pids.remote())[rank0.name]]
        assert all(_alive(p) for p in pids)
        for h in job.hosts:
            ray.kill(h)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False
