"""The replay plan and packer against a plain full-tensor reference, on random topologies.

The reference follows miles' old path literally: every rank holds the full routes of its
samples; per micro-batch it appends the last-token row, pads and splits each sample for CP,
concatenates, pads to tp x pad multiple, takes the SP slice and then its stage's MoE layers.
Stage layers and the MoE pattern are recomputed here from Megatron's formulas, not asked
of the Topology.
"""

import itertools
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miles.replay import replica_bytes, ship
from miles_topology import Topology
from miles_topology.model.replay import PAD, Segment, replay_plan, replay_plans


@st.composite
def cases(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    cp = draw(st.sampled_from([1, 2, 3]))
    pp = draw(st.sampled_from([1, 2, 3]))
    dp = draw(st.sampled_from([1, 2, 3]))
    vpp = draw(st.sampled_from([None, 2])) if pp > 1 else None
    per_chunk = draw(st.integers(1, 3))
    layers = pp * (vpp or 1) * per_chunk
    if draw(st.booleans()):
        freq = draw(st.integers(1, 3))
    else:
        bits = draw(st.lists(st.sampled_from([0, 1]), min_size=layers, max_size=layers))
        bits[draw(st.integers(0, layers - 1))] = 1  # at least one MoE layer
        freq = "[" + ",".join(map(str, bits)) + "]"
    dynamic = draw(st.booleans())
    balance = draw(st.booleans())
    mbs = draw(st.integers(1, 3))
    gbs = draw(st.sampled_from([None, 1, 2])) if not dynamic else draw(st.sampled_from([None, 3]))
    world = tp * cp * pp * dp
    topo = Topology(
        nodes=1, gpus_per_node=world, node_gpus=world, tp=tp, cp=cp, pp=pp, vpp=vpp,
        sp=tp > 1 or draw(st.booleans()), experts=8, topk=draw(st.integers(1, 3)),
        layers=layers, moe_layer_freq=freq, micro_batch_size=mbs, dynamic_batch=dynamic,
        max_tokens_per_gpu=draw(st.integers(4, 40)) if dynamic else None,
        global_batch_size=gbs * dp * mbs if gbs else None, balance_data=balance,
        # etp = tp and ep = 1 here: megatron-core takes pp-not-last only when tp*cp == etp*ep
        order=draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"] if pp == 1 or cp == 1
                                   else ["tp-cp-ep-dp-pp"])),
    )
    tokens = draw(st.lists(st.integers(1, 30), min_size=1, max_size=10))
    if balance or dynamic:  # miles splits into equal parts: a sample count divisible by dp
        tokens = (tokens * dp)[: max(dp, len(tokens) // dp * dp)]
    dtype = draw(st.sampled_from([np.uint8, np.uint16]))
    return topo, tokens, draw(st.integers(1, 3)), dtype, draw(st.booleans())


def make_routes(topo, tokens, dtype, seed=0, layer_major=False):
    """Random routes, C order or layer-major (the layout decode_routes returns)."""
    rng = np.random.default_rng(seed)
    out = [
        rng.integers(0, topo.model.experts, (t - 1, topo.model.layers, topo.model.topk)).astype(
            dtype
        )
        for t in tokens
    ]
    if layer_major:
        out = [np.ascontiguousarray(a.transpose(1, 0, 2)).transpose(1, 0, 2) for a in out]
    return out


# ---- the plain reference ------------------------------------------------------------------


def ref_moe_layers(topo, pp_rank):
    """Megatron: chunk v of stage p holds layers from v*pp*n + p*n; MoE when i % freq == 0."""
    vpp = topo.layout.vpp or 1
    n = topo.model.layers // (topo.layout.pp * vpp)
    freq = topo.model.moe_layer_freq
    moe = [i % freq == 0 for i in range(topo.model.layers)] if isinstance(freq, int) else freq
    return [i for v in range(vpp) for i in range(v * topo.layout.pp * n + pp_rank * n,
                                                    v * topo.layout.pp * n + (pp_rank + 1) * n)
            if moe[i]]


def ref_micro_batches(topo, tokens, dp_rank):
    """Round-robin share, steps of gbs/dp samples, micro-batches of micro_batch_size."""
    mine = [i for i in range(len(tokens)) if i % topo.dp == dp_rank]
    local = topo.batch.global_batch_size // topo.dp if topo.batch.global_batch_size else len(mine)
    out = []
    for at in range(0, len(mine), max(local, 1)):
        group = mine[at:at + local]
        m = topo.batch.micro_batch_size
        out += [group[k:k + m] for k in range(0, len(group), m)]
    return out


def ref_first_fit(lengths, cap):
    """miles' get_minimum_num_micro_batch_size, from its description: first fit, count bins."""
    bins = []
    for n in lengths:
        fit = [b for b in range(len(bins)) if bins[b] + n <= cap]
        if fit:
            bins[fit[0]] += n
        else:
            bins.append(n)
    return len(bins)


def best_max_sum(lengths, k, equal_size):
    """The smallest possible largest part sum (brute force, small inputs)."""
    best = None
    for a in itertools.product(range(k), repeat=len(lengths)):
        sizes = Counter(a)
        if len(sizes) < k or (equal_size and len(set(sizes.values())) > 1):
            continue
        top = max(sum(n for n, p in zip(lengths, a) if p == j) for j in range(k))
        best = top if best is None else min(best, top)
    return best


def reference(topo, tokens, routes, rank, pad_multiple, plan):
    """Per micro-batch replay rows of `rank`, built from the full tensors. Balanced splits
    (--balance-data, dynamic batching) are taken from the plan: their rules are checked
    against miles' in test_schedule_follows_miles_data_rules."""
    c = topo.grid("dense").coord(rank)
    k, dtype = topo.model.topk, routes[0].dtype
    fill = lambda n: np.broadcast_to(np.arange(k, dtype=dtype), (n, topo.model.layers, k))  # noqa: E731
    out = []
    mbs = ref_micro_batches(topo, tokens, c["dp"])
    if topo.batch.dynamic_batch or topo.batch.balance_data:
        mbs = [mb.samples for mb in plan.micro_batches]
    for mb in mbs:
        parts = []
        for s in mb:
            x = np.concatenate([routes[s], fill(1)])  # the unrecorded last token
            if topo.layout.cp > 1:
                x = np.concatenate([x, fill((-len(x)) % (2 * topo.layout.cp))])
                ch = len(x) // (2 * topo.layout.cp)
                r = c["cp"]
                x = np.concatenate(
                    [
                        x[r * ch : (r + 1) * ch],
                        x[(2 * topo.layout.cp - 1 - r) * ch : (2 * topo.layout.cp - r) * ch],
                    ]
                )
            parts.append(x)
        x = np.concatenate(parts)
        x = np.concatenate([x, fill((-len(x)) % (topo.layout.tp * pad_multiple))])
        if topo.layout.sp and topo.layout.tp > 1:
            n = len(x) // topo.layout.tp
            x = x[n * c["tp"]:n * (c["tp"] + 1)]
        out.append(x[:, ref_moe_layers(topo, c["pp"])])
    return out


# ---- properties ---------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_ship_matches_full_tensor_reference(case):
    topo, tokens, pad_multiple, dtype, layer_major = case
    routes = make_routes(topo, tokens, dtype, layer_major=layer_major)
    for rank in range(topo.world_size):
        plan = replay_plan(topo, tokens, rank, pad_multiple)
        got = ship(routes, plan, topk=topo.model.topk, dtype=dtype)
        want = reference(topo, tokens, routes, rank, pad_multiple, plan)
        assert plan.layers == tuple(ref_moe_layers(topo, topo.grid("dense").coord(rank)["pp"]))
        assert len(got.batches) == len(want)
        for m, (g, w) in enumerate(zip(got.batches, want)):
            np.testing.assert_array_equal(g, w)
            for i in range(len(plan.layers)):
                assert got.router(m, i).flags.c_contiguous
                np.testing.assert_array_equal(got.router(m, i), w[:, i])
        assert got.data.dtype == dtype and got.data.flags.c_contiguous
        assert got.data.shape == (len(plan.layers), plan.rows, topo.model.topk)  # layer-major
        assert (
            got.nbytes == plan.rows * len(plan.layers) * topo.model.topk * np.dtype(dtype).itemsize
        )


@settings(max_examples=200, deadline=None)
@given(cases())
def test_plan_partitions_rows_across_replica(case):
    """Every (sample, token, MoE layer) is replayed by exactly one rank of each TP/CP/PP
    position set: once per replica with SP (tp times without), on the rank holding the layer."""
    topo, tokens, pad_multiple, _, _ = case
    plans = replay_plans(topo, tokens, pad_multiple)
    seen = Counter()
    for plan in plans:
        c = topo.grid("dense").coord(plan.rank)
        if not topo.batch.balance_data:
            assert set(plan.samples) == {i for i in range(len(tokens)) if i % topo.dp == c["dp"]}
        assert sorted(s for mb in plan.micro_batches for s in mb.samples) == sorted(plan.samples)
        for mb in plan.micro_batches:
            assert mb.packed % (topo.layout.tp * pad_multiple) == 0
            assert mb.packed >= sum(mb.lengths)
            assert mb.rows == (
                mb.packed // topo.layout.tp if topo.layout.sp and topo.layout.tp > 1 else mb.packed
            )
            for seg in mb.segments:
                assert seg.rows > 0
                if seg.sample == PAD:
                    continue
                assert seg.sample in mb.samples and 0 <= seg.start < seg.stop <= tokens[seg.sample]
                for t in range(seg.start, seg.stop):
                    for layer in plan.layers:
                        seen[seg.sample, t, layer, c["dp"]] += 1
    moe = [i for i in range(topo.model.layers) if topo.model.moe_pattern[i]]
    copies = 1 if topo.layout.sp or topo.layout.tp == 1 else topo.layout.tp
    dp_of = {s: topo.grid("dense").coord(p.rank)["dp"] for p in plans for s in p.samples}
    want = {(s, t, layer, dp_of[s]): copies
            for s, n in enumerate(tokens) for t in range(n) for layer in moe}
    assert dict(seen) == want


@settings(max_examples=150, deadline=None)
@given(cases())
def test_schedule_follows_miles_data_rules(case):
    """Shares, steps and micro-batch counts against miles' documented rules, written out
    here: --balance-data gives equal-size dp parts; a step is gbs/dp consecutive samples
    of a share; dynamic batching uses the first-fit bin count of the full lengths against
    max_tokens_per_gpu x cp, the max over dp, rounded down to a multiple of pp under VPP
    (at least 1). Balanced splits are within 4/3 of the best possible largest part (the
    largest-differencing method's guarantee), checked by brute force."""
    topo, tokens, _, _, _ = case
    plans = replay_plans(topo, tokens, 1)
    shares = {topo.grid("dense").coord(p.rank)["dp"]: p.samples for p in plans}
    assert sorted(s for sh in shares.values() for s in sh) == list(range(len(tokens)))
    if topo.batch.balance_data:
        assert {len(sh) for sh in shares.values()} == {len(tokens) // topo.dp}
        if len(tokens) <= 8 and topo.dp > 1:
            top = max(sum(tokens[s] for s in sh) for sh in shares.values())
            assert 3 * top <= 4 * best_max_sum(tokens, topo.dp, True)
    local = topo.batch.global_batch_size // topo.dp if topo.batch.global_batch_size else None
    for plan in plans:
        mine = list(shares[topo.grid("dense").coord(plan.rank)["dp"]])
        loc = local or max(len(mine), 1)
        steps = [mine[i:i + loc] for i in range(0, len(mine), loc)]
        for step, group in enumerate(steps):
            mbs = [mb.samples for mb in plan.micro_batches if mb.step == step]
            assert sorted(s for mb in mbs for s in mb) == sorted(group)
            if not topo.batch.dynamic_batch:
                continue
            want = max(ref_first_fit([tokens[s] for s in sh[step * loc:(step + 1) * loc]],
                                     topo.batch.max_tokens_per_gpu * topo.layout.cp)
                       for sh in shares.values())
            if (topo.layout.vpp or 1) > 1:
                want = max(1, want // topo.layout.pp * topo.layout.pp)
            assert len(mbs) == want and all(mbs)
            if len(group) <= 8 and want > 1:
                top = max(sum(tokens[s] for s in mb) for mb in mbs)
                assert 3 * top <= 4 * best_max_sum([tokens[s] for s in group], want, False)


def test_plan_refuses_what_it_does_not_model():
    for kw in (dict(allgather_cp=True), dict(qkv_format="bshd")):
        topo = Topology(nodes=1, gpus_per_node=2, cp=2, experts=8, layers=2, **kw)
        with pytest.raises(ValueError, match="not modelled"):
            replay_plan(topo, [3, 4], 0)


def test_data_pad_size_multiplier_defaults_to_miles_128():
    topo = Topology(nodes=1, gpus_per_node=2, tp=2, sp=True, experts=8, layers=2,
                    micro_batch_size=2)
    (mb,) = replay_plan(topo, [5, 9], 0).micro_batches
    assert mb.packed == 256  # 14 tokens padded to tp x 128
    topo = Topology(nodes=1, gpus_per_node=2, tp=2, sp=True, experts=8, layers=2,
                    data_pad_multiplier=4, micro_batch_size=2)
    (mb,) = replay_plan(topo, [5, 9], 0).micro_batches
    assert mb.packed == 16


def test_plan_golden_example():
    """tp 2 + SP, cp 2, dp 2: what rank 5 (tp 1, cp 0, dp 1) replays, worked by hand."""
    topo = Topology(nodes=2, gpus_per_node=4, tp=2, sp=True, cp=2, ep=2, experts=8,
                    layers=4, moe_layer_freq=2, micro_batch_size=2)
    plan = replay_plan(topo, [5, 9, 3, 7, 2], rank=5, pad_multiple=1)
    assert plan.samples == (1, 3) and plan.tokens == (9, 7) and plan.layers == (0, 2)
    (mb,) = plan.micro_batches
    # sample 1: 9 tokens -> 12 rows, chunks of 3; cp 0 takes [0,3) and [9,12) = [9] + 2 pad.
    # sample 3: 7 tokens -> 8 rows, chunks of 2; cp 0 takes [0,2) and [6,8) = [6] + 1 pad.
    # packed: 1[0:3] 1[8:9] pad2 | 3[0:2] 3[6:7] pad1 = 10 rows; tp 1 keeps rows 5..9.
    assert mb.lengths == (6, 4) and mb.packed == 10
    assert mb.segments == (Segment(PAD, 0, 1), Segment(3, 0, 2), Segment(3, 6, 7),
                           Segment(PAD, 0, 1))


def test_pad_rows_get_a_valid_route_never_minus_one():
    topo = Topology(nodes=1, gpus_per_node=4, tp=4, sp=True, experts=8, topk=2, layers=2,
                    micro_batch_size=2)
    tokens = [3, 2]
    routes = make_routes(topo, tokens, np.uint8)
    data = np.concatenate([ship(routes, replay_plan(topo, tokens, r, pad_multiple=8)).batches[0]
                           for r in range(4)])  # the tp ranks' slices, in order
    assert data.shape == (32, 2, 2)  # 5 tokens padded to a multiple of tp x 8
    np.testing.assert_array_equal(data[[0, 1]], routes[0])
    np.testing.assert_array_equal(data[[3]], routes[1])
    assert (data[[2, 4]] == [0, 1]).all() and (data[5:] == [0, 1]).all()  # last tokens, pads


def test_ship_only_this_ranks_share():
    topo = Topology(nodes=4, gpus_per_node=4, tp=2, sp=True, cp=2, pp=2, experts=8, topk=2,
                    layers=8)
    tokens = [64] * 8
    routes = make_routes(topo, tokens, np.uint8)
    plan = replay_plan(topo, tokens, rank=0, pad_multiple=1)
    got = ship(routes, plan)
    assert (
        got.nbytes * topo.layout.tp * topo.layout.cp * topo.layout.pp
        == replica_bytes(routes, plan) * 64 // 63
    )


def test_ship_rejects_mismatched_routes():
    topo = Topology(nodes=1, gpus_per_node=1, experts=8, topk=2, layers=2)
    plan = replay_plan(topo, [4, 5], 0)
    routes = make_routes(topo, [4, 5], np.uint8)
    with pytest.raises(ValueError, match="sample 1 have shape"):
        ship([routes[0], routes[1][:-1]], plan)
    with pytest.raises(ValueError, match="sample 1, which has no routes"):
        ship({0: routes[0]}, plan)
    with pytest.raises(ValueError, match="uint16"):
        ship([routes[0], routes[1].astype(np.uint16)], plan)


def test_plan_rejects_dense_models_and_bad_tokens():
    with pytest.raises(ValueError, match="MoE"):
        replay_plan(Topology(nodes=1, gpus_per_node=1, layers=2), [3], 0)
    topo = Topology(nodes=1, gpus_per_node=1, experts=8, layers=2)
    with pytest.raises(ValueError, match="sample 1 has 0 tokens"):
        replay_plan(topo, [3, 0], 0)
    with pytest.raises(IndexError):
        replay_plan(topo, [3], 1)


def test_plan_is_pure():
    """The plan lives in the light core: importing it pulls in no numpy, torch or ray."""
    code = ("import sys, miles_topology.model.replay; "
            "sys.exit(bool({'numpy', 'torch', 'ray'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
