"""Derive a whole 8192-rank layout and compare with megatron-core RankGenerator, in one run.

Ours: build the Topology (validation included), then every dense and expert group, the
expert ownership of every rank and the placement of every rank. Megatron: RankGenerator
producing the same groups only. Prints `RESULT ours_s=... megatron_s=... ratio=...`.

Then the whole `python -m miles.train --dry-run` plan (GPU map, stages, engines, weight-sync
plan) for the same 8192-GPU job and for a 1024-GPU one (128 nodes, EP 64 kept): the cost per GPU
of the two should be about equal (linear). Prints `RESULT dry_run_8192_s=... dry_run_1024_s=...
per_gpu_ratio=...`.
"""

import subprocess
import sys
import time

from megatron.core.parallel_state import RankGenerator

from miles_topology import Topology

DENSE = ["tp", "cp", "dp", "pp", "tp-cp", "dp-cp", "tp-pp", "tp-dp", "tp-dp-cp", "tp-cp-ep-dp-pp"]
EXPERT = ["tp", "ep", "dp", "pp", "tp-ep", "tp-ep-pp"]
SIZES = dict(nodes=1024, gpus_per_node=8, tp=8, sp=True, pp=8, vpp=2, ep=64, etp=1,
             experts=256, layers=64, heads=64, colocate=True)


def ours():
    topo = Topology(**SIZES)
    groups = [topo.rank_groups(t) for t in DENSE] + [
        topo.rank_groups(t, expert=True) for t in EXPERT
    ]
    owned = [topo.local_experts(r) for r in range(topo.world_size)]
    where = [topo.placement(r) for r in range(topo.world_size)]
    return groups, owned, where


def megatron():
    world = SIZES["nodes"] * SIZES["gpus_per_node"]
    tp, pp, ep, etp = SIZES["tp"], SIZES["pp"], SIZES["ep"], SIZES["etp"]
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp), pp=pp, cp=1, order="tp-cp-ep-dp-pp")
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1,
                           order="tp-cp-ep-dp-pp")
    return [dense.get_ranks(t) for t in DENSE] + [expert.get_ranks(t) for t in EXPERT]


def best_of(fn, repeat=5):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main():
    ours_s, (groups, owned, where) = best_of(ours)
    megatron_s, theirs = best_of(megatron)
    assert groups == theirs, "groups differ from megatron-core"
    n = sum(len(g) for g in groups)
    print(f"world 8192 ranks: {len(groups)} tokens, {n} groups, {len(owned)} ownerships, "
          f"{len(where)} placements")
    print(f"ours (groups + ownership + placement, validation included): {ours_s * 1e3:.1f} ms")
    print(f"megatron-core RankGenerator (groups only):                 {megatron_s * 1e3:.1f} ms")
    print(f"RESULT ours_s={ours_s:.4f} megatron_s={megatron_s:.4f} ratio={ours_s / megatron_s:.3f}")


def dry_run_argv(nodes):
    return [
        sys.executable, "-m", "miles.train", "--dry-run", "--actor-num-nodes", str(nodes),
        "--actor-num-gpus-per-node", "8", "--num-gpus-per-node", "8",
        "--tensor-model-parallel-size", "8", "--sequence-parallel",
        "--pipeline-model-parallel-size", "8", "--num-virtual-stages-per-pipeline-rank", "2",
        "--expert-model-parallel-size", "64", "--expert-tensor-parallel-size", "1",
        "--num-experts", "256", "--num-layers", "64", "--num-attention-heads", "64",
        "--colocate", "--rollout-num-gpus-per-engine", "8",
    ]


def dry_run(nodes):
    start = time.perf_counter()
    subprocess.run(dry_run_argv(nodes), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
    big, small = dry_run(1024), dry_run(128)
    print(f"python -m miles.train --dry-run, 8192 GPUs: {big:.2f} s; 1024 GPUs: {small:.2f} s")
    print(f"RESULT dry_run_8192_s={big:.3f} dry_run_1024_s={small:.3f} "
          f"per_gpu_ratio={(big / 8192) / (small / 1024):.3f}")
