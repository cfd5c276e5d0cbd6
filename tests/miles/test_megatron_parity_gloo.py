"""megatron-core initialize_model_parallel(**megatron_args(topo)) builds the Topology's groups.

Real gloo process groups in fresh processes (8, and 4 for the small set), started from a
forkserver that imported megatron-core once; each process joins every topology in turn.
"""

from __future__ import annotations

import os
import warnings

import pytest

from miles_topology import Topology
from miles_topology.model.topology import megatron_args

TOPOLOGIES = {
    "ep2-on-2x4": "--actor-num-nodes 2 --actor-num-gpus-per-node 4 --expert-model-parallel-size 2"
    " --expert-tensor-parallel-size 1 --num-experts 8",
    "tp2-pp2-ep2": "--actor-num-gpus-per-node 8 --tensor-model-parallel-size 2 --sequence-parallel"
    " --pipeline-model-parallel-size 2 --expert-model-parallel-size 2"
    " --expert-tensor-parallel-size 1 --num-experts 8 --num-layers 4",
    "tp2-cp2-ep4-tp-pp-dp": "--actor-num-gpus-per-node 8 --tensor-model-parallel-size 2"
    " --sequence-parallel --context-parallel-size 2 --expert-model-parallel-size 4"
    " --expert-tensor-parallel-size 1 --num-experts 8 --use-tp-pp-dp-mapping",
    "etp2-ep2-pp2-vpp2": "--actor-num-gpus-per-node 8 --tensor-model-parallel-size 2"
    " --sequence-parallel --expert-model-parallel-size 2 --pipeline-model-parallel-size 2"
    " --num-virtual-stages-per-pipeline-rank 2 --num-layers 8 --num-experts 4",
    "pp2-ep3-on-3x2": "--actor-num-nodes 3 --actor-num-gpus-per-node 2"
    " --pipeline-model-parallel-size 2 --expert-model-parallel-size 3 --num-experts 6"
    " --num-layers 4",
}
# on 4 processes: includes the order swap the negative case needs
SMALL = {
    "cp2-ep4-world4": "--actor-num-gpus-per-node 4 --context-parallel-size 2"
    " --expert-model-parallel-size 4 --num-experts 8",
    "pp2-dp2-world4": "--actor-num-nodes 2 --actor-num-gpus-per-node 2"
    " --pipeline-model-parallel-size 2 --num-experts 4 --num-layers 4 --use-tp-pp-dp-mapping",
}


def _worker(rank: int, store_dir: str, flags: dict[str, str], out_dir: str) -> None:
    warnings.filterwarnings("ignore")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import json

    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from miles.megatron import groups

    results = {}
    for i, (name, line) in enumerate(flags.items()):
        topo = Topology.from_flags(line.split())
        if rank >= topo.world_size:
            continue
        dist.init_process_group(
            "gloo", init_method=f"file://{store_dir}/store{i}", rank=rank,
            world_size=topo.world_size,
        )
        ps.initialize_model_parallel(**megatron_args(topo))
        got = groups.built()
        results[name] = {"diff": groups.compare(topo, rank, got), "got": got}
        groups.teardown()
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(results, f)


def spawn(tmp_path_factory, flags: dict[str, str], world: int) -> dict[int, dict]:
    """Fresh processes from a forkserver that imported megatron-core once (not per process)."""
    import json
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(["megatron.core.parallel_state", "miles.megatron"])
    store = tmp_path_factory.mktemp("store")
    out = tmp_path_factory.mktemp("out")
    mp.start_processes(_worker, args=(str(store), flags, str(out)), nprocs=world, join=True,
                       start_method="forkserver")
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(world)}


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    return spawn(tmp_path_factory, TOPOLOGIES, 8)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return spawn(tmp_path_factory, SMALL, 4)


def check(results: dict[int, dict], line: str, name: str) -> None:
    from miles.megatron.groups import GROUPS

    topo = Topology.from_flags(line.split())
    seen = [results[r][name] for r in range(topo.world_size)]
    assert all(not s["diff"] for s in seen), [d for s in seen for d in s["diff"]]
    # every group megatron-core built, across all ranks, is one of the Topology's groups
    for key, (_, _, token, expert) in GROUPS.items():
        built = {tuple(s["got"][key]) for s in seen}
        assert built == {tuple(g) for g in topo.rank_groups(token, expert=expert)}, key


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SMALL))
def test_megatron_builds_the_topology_groups_4_procs(small, name):
    check(small, SMALL[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_megatron_builds_the_topology_groups_8_procs(parity, name):
    check(parity, TOPOLOGIES[name], name)


def test_a_wrong_topology_is_caught(small):
    """The comparison can fail: groups built for one order do not pass for the other."""
    from miles.megatron.groups import compare

    name = "pp2-dp2-world4"
    other = Topology.from_flags(SMALL[name].replace(" --use-tp-pp-dp-mapping", "").split())
    diffs = [d for r in range(4) for d in compare(other, r, small[r][name]["got"])]
    assert diffs and "megatron-core" in diffs[0] and "Topology" in diffs[0]


def test_topology_refuses_what_megatron_refuses():
    from miles_topology import TopologyError

    with pytest.raises(TopologyError):
        Topology.from_flags("--actor-num-gpus-per-node 4 --pipeline-model-parallel-size 2"
                            " --expert-model-parallel-size 2 --num-experts 4 --num-layers 4"
                            " --use-tp-pp-dp-mapping".split())
