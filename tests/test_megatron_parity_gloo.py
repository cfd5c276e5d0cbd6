"""megatron-core initialize_model_parallel(**topo.megatron_args()) builds the Topology's groups.

Real gloo process groups in spawned processes (up to 8). Each process joins every topology
in turn, so megatron-core is imported once per process, not once per topology.
"""

from __future__ import annotations

import os
import warnings

import pytest

from miles_topology import Topology

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
    "cp2-ep4-etp1-pp1-world4": "--actor-num-gpus-per-node 4 --context-parallel-size 2"
    " --expert-model-parallel-size 4 --num-experts 8",
}
WORLD = 8


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
        ps.initialize_model_parallel(**topo.megatron_args())
        got = groups.built()
        results[name] = {"diff": groups.compare(topo, rank, got), "got": got}
        groups.teardown()
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(results, f)


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    import json

    import torch.multiprocessing as mp

    store = tmp_path_factory.mktemp("store")
    out = tmp_path_factory.mktemp("out")
    mp.spawn(_worker, args=(str(store), TOPOLOGIES, str(out)), nprocs=WORLD, join=True)
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)}


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_megatron_builds_the_topology_groups(parity, name):
    topo = Topology.from_flags(TOPOLOGIES[name].split())
    seen = [parity[r][name] for r in range(topo.world_size)]
    assert all(not s["diff"] for s in seen), [d for s in seen for d in s["diff"]]
    # every group megatron-core built, across all ranks, is one of the Topology's groups
    from miles.megatron.groups import GROUPS

    for key, (_, _, token, expert) in GROUPS.items():
        built = {tuple(s["got"][key]) for s in seen}
        assert built == {tuple(g) for g in topo.rank_groups(token, expert=expert)}, key


def test_a_wrong_topology_is_caught(parity):
    """The comparison can fail: groups built for one order do not pass for the other."""
    from miles.megatron.groups import compare

    name = "tp2-pp2-ep2"
    other = Topology.from_flags((TOPOLOGIES[name] + " --use-tp-pp-dp-mapping").split())
    diffs = [d for r in range(8) for d in compare(other, r, parity[r][name]["got"])]
    assert diffs and "megatron-core" in diffs[0] and "Topology" in diffs[0]
