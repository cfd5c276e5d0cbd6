"""R3 packing benchmark: what each train rank is shipped, how fast it is packed and decoded.

A realistic batch: 256 samples of about 4096 tokens, 48 layers (all MoE), top-8 of 128
experts, tp 4 with SP, pp 4, cp 2, dp 2 (world 64), uint8 routes.

- shipped_ratio: the largest bytes shipped to any rank over what the old scheme sent it
  (every rank of a DP replica got all layers of all tokens of the replica's samples).
  Target <= 1 / (pp x cp x tp) x 1.05.
- pack_vs_copy: packing every rank of one DP replica into preallocated per-rank buffers,
  against np.copyto of the same bytes from contiguous sources into the same buffers; best of
  several runs in this process. Target >= 0.5. One monolithic copy of all those bytes is
  printed too: it is about twice as fast again because libc switches to non-temporal stores
  for copies far larger than any one rank's buffer.
- decode_GBps: int32 payload bytes decoded per second (base64 -> validated uint8 array).
"""

from __future__ import annotations

import time

import numpy as np

from miles.replay import replica_bytes, ship
from miles.rollout import decode_routes, encode_routes
from miles_topology import Topology
from miles_topology.model.replay import replay_plan

SAMPLES, TOKENS, LAYERS, TOPK, EXPERTS = 256, 4096, 48, 8, 128


def best(fn, runs=5):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    topo = Topology(
        nodes=8, gpus_per_node=8, tp=4, sp=True, pp=4, cp=2, ep=8, etp=1, experts=EXPERTS,
        topk=TOPK, layers=LAYERS, micro_batch_size=4, global_batch_size=128,
    )
    rng = np.random.default_rng(0)
    tokens = rng.integers(TOKENS - 512, TOKENS + 512, SAMPLES).tolist()
    spread = np.arange(TOPK, dtype=np.uint8) * (EXPERTS // TOPK)
    # Distinct ids per row, stored layer-major as decode_routes stores them (checked below).
    routes = [
        ((rng.integers(0, EXPERTS, (LAYERS, t - 1, 1), dtype=np.uint8) + spread) % EXPERTS)
        .transpose(1, 0, 2)
        for t in tokens
    ]
    print(
        f"topology: world {topo.world_size}, tp {topo.layout.tp} (sp), "
        f"pp {topo.layout.pp}, cp {topo.layout.cp}, "
        f"dp {topo.dp}; {SAMPLES} samples, {sum(tokens)} tokens, {LAYERS} layers, top-{TOPK}"
    )

    t0 = time.perf_counter()
    plans = [replay_plan(topo, tokens, r) for r in range(topo.world_size)]
    plan_s = time.perf_counter() - t0
    print(f"plans for all {topo.world_size} ranks: {plan_s * 1e3:.0f} ms")

    ratios = []
    for plan in plans:
        shipped = plan.rows * len(plan.layers) * TOPK  # uint8
        ratios.append(shipped / replica_bytes(routes, plan))
    ratio = max(ratios)
    target = 1 / (topo.layout.pp * topo.layout.cp * topo.layout.tp)
    one = ship(routes, plans[0])
    print(f"rank 0: shipped {one.nbytes / 2**20:.1f} MiB vs all-layers-all-tokens "
          f"{replica_bytes(routes, plans[0]) / 2**20:.1f} MiB; worst rank ratio {ratio:.5f} "
          f"(1/(pp*cp*tp) = {target:.5f}, target <= {target * 1.05:.5f})")

    replica = [p for p in plans if topo.grid("dense").coord(p.rank)["dp"] == 0]
    outs = [np.empty((len(p.layers), p.rows, TOPK), np.uint8) for p in replica]
    total = sum(o.nbytes for o in outs)

    def pack_replica():
        for p, o in zip(replica, outs):
            ship(routes, p, out=o)

    srcs = [np.ones(o.shape, np.uint8) for o in outs]

    def copy_replica():  # the same bytes into the same per-rank buffers, plain copies
        for src, o in zip(srcs, outs):
            np.copyto(o, src)

    big, big_dst = np.ones(total, np.uint8), np.empty(total, np.uint8)
    pack_s = best(pack_replica)
    copy_s = best(copy_replica)
    big_s = best(lambda: np.copyto(big_dst, big))
    pack_vs_copy = copy_s / pack_s
    print(f"pack {len(replica)} ranks of a replica ({total / 2**20:.0f} MiB): "
          f"{total / pack_s / 1e9:.2f} GB/s; plain np.copyto of the same bytes into the same "
          f"per-rank buffers: {total / copy_s / 1e9:.2f} GB/s; ratio {pack_vs_copy:.2f}")
    print(f"  (one monolithic {total / 2**20:.0f} MiB np.copyto, which libc does with "
          f"non-temporal stores: {total / big_s / 1e9:.2f} GB/s; ratio {big_s / pack_s:.2f})")
    alloc_s = best(lambda: ship(routes, replica[0]))
    print(f"  one rank with a fresh output buffer: {outs[0].nbytes / alloc_s / 1e9:.2f} GB/s")

    sub = 32
    payloads = [encode_routes(r) for r in routes[:sub]]
    raw = sum(r.size * 4 for r in routes[:sub])

    def decode_all():
        for i, p in enumerate(payloads):
            decode_routes(p, topo, tokens=tokens[i], sample=i)

    got = decode_routes(payloads[0], topo, tokens=tokens[0], sample=0)
    assert np.array_equal(got, routes[0]) and got.strides == routes[0].strides

    dec_s = best(decode_all, runs=3)
    decode = raw / dec_s / 1e9
    print(f"decode {sub} samples ({raw / 2**20:.0f} MiB of int32): {decode:.2f} GB/s")
    print(f"RESULT shipped_ratio={ratio:.5f} pack_vs_copy={pack_vs_copy:.2f} "
          f"decode_GBps={decode:.2f}")


if __name__ == "__main__":
    main()
