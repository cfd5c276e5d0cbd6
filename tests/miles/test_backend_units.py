"""Backend pieces in one process: replay through megatron-core, the engine's post-process
guard, the metrics' ability to fail, the task, and the faults."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from miles.backend import metrics, moe  # noqa: E402
from miles.backend.engine import Engine, bf16, engine_route  # noqa: E402
from miles.backend.faults import Faults  # noqa: E402
from miles.backend.policy import DTYPE, Spec, checkpoint, route, weight  # noqa: E402
from miles.backend.task import advantages, reward, target  # noqa: E402
from miles_topology import Topology  # noqa: E402
from miles_topology.model.weightsync import engine_sync  # noqa: E402

ACCEPT = dict(nodes=2, gpus_per_node=4, node_gpus=4, ep=8, etp=1, experts=16, layers=4,
              rollout_gpus=4, engine_size=4)


@pytest.fixture
def layer():
    """One MoE layer holding all 8 experts (EP 1, no process group needed)."""
    moe.forget_routers()
    topo = Topology(layers=4, experts=8, topk=2, nodes=1, gpus_per_node=1, colocate=True)
    spec = Spec.of(topo)
    router = weight(spec, "0.router", 0).requires_grad_()
    w1 = weight(spec, "0.w1", 0).requires_grad_()
    w2 = weight(spec, "0.w2", 0).requires_grad_()
    m = moe.MoELayer(0, router, w1, w2, [0] * 8, topo.local_experts(0), 2,
                     moe.Groups(None, None), moe.Trace())
    yield m, spec
    moe.forget_routers()


def test_replay_forces_the_recorded_experts_and_recompute_replays_them_again(layer):
    m, spec = layer
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, spec.hidden, dtype=DTYPE, generator=g)
    rows = torch.tensor([[7, 3], [0, 1], [5, 2], [4, 6], [1, 7], [2, 3]])
    # plain autograd through a replayed forward
    moe.set_replay([rows])
    xa = x.clone().requires_grad_()
    m(xa, moe.FORWARD).square().sum().backward()
    grads = [p.grad.clone() for p in (xa, *m.params)]
    for p in m.params:
        p.grad = None
    moe.reset_replay()
    # the same through recompute: REPLAY_BACKWARD pops the rows in backward
    moe.set_replay([rows])
    xb = x.clone().requires_grad_()
    moe.recomputed(m, xb).square().sum().backward()
    moe.reset_replay()
    for a, b in zip(grads, [xb.grad, *[p.grad for p in m.params]]):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)
    actions = [c[2] for c in m.trace.calls]
    assert actions == [moe.FORWARD, moe.FORWARD, moe.BACKWARD]
    for *_, ids in m.trace.calls:
        assert (ids == rows.sort(1).values).all()


def test_without_replay_the_router_picks_its_own_top_k(layer):
    m, spec = layer
    x = torch.randn(5, spec.hidden, dtype=DTYPE, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        m(x, None)
    ids = m.trace.calls[-1][-1]
    want = (x @ m.router).topk(2, dim=1).indices.sort(1).values
    assert (ids == want).all()


def _engine():
    return Engine(Topology(**ACCEPT), 0, seed=0)


def test_engine_refuses_to_post_process_until_every_planned_sender_reported():
    eng = _engine()
    senders = eng.plan.senders
    assert len(senders) == 8
    for r in senders[:-1]:
        eng.receive(r, 1, [])
    assert not eng.post_process(1, senders[0], after=senders)
    assert eng.log[-1][4] == (senders[-1],) and eng.version == -1
    eng.receive(senders[-1], 1, [])
    assert eng.post_process(1, senders[0]) and eng.version == 1


def test_shards_arriving_after_post_process_wait_for_the_next_one():
    eng = Engine(Topology(**ACCEPT), 0, seed=0, strict=False)
    (rank, shard), *_ = [(r, s) for r, s in eng.plan.sends if s.kind == "dense"]
    new = np.ones_like(eng.staging["head"])
    eng.post_process(1, rank)  # too early: nothing received
    eng.receive(rank, 1, [("head", -1, 0, 0, 1, new)])
    assert not np.array_equal(eng.live["head"], new)  # served weights are stale
    eng.post_process(2, rank)
    assert np.array_equal(eng.live["head"], new)


def test_early_post_fault_post_processes_on_the_first_upload():
    eng = Engine(Topology(**ACCEPT), 0, seed=0, strict=False)
    first, second = eng.plan.senders[:2]
    eng.receive(first, 1, [], post_if_first=True)
    eng.receive(second, 1, [], post_if_first=True)
    posts = [ev for ev in eng.log if ev[0] == "post"]
    assert len(posts) == 1 and second in posts[0][4]  # asked while `second` was missing


def test_a_post_request_not_ordered_after_every_sender_is_a_race_even_when_in_time():
    """The pre-fix protocol's race is seen on every run: a request ordered after only some
    senders (no barrier) is logged as unordered although every upload had arrived."""
    eng = _engine()
    senders = eng.plan.senders
    for r in senders:
        eng.receive(r, 1, [])
    assert eng.post_process(1, senders[0], after=(senders[0],))  # the timing was benign
    assert eng.log[-1][4] == () and eng.log[-1][5] == senders[1:]
    assert eng.post_process(2, senders[0], after=senders) is False  # nothing of version 2
    eng.receive(senders[0], 3, [])
    eng.post_process(3, senders[0], after=senders)
    assert eng.log[-1][5] == ()  # ordered after all (a barrier): no race


def test_engine_counts_expert_shards_outside_the_plan():
    eng = _engine()
    topo = Topology(**ACCEPT)
    plan = engine_sync(topo, 0)
    rank = next(r for r, s in plan.sends if s.kind == "expert" and 8 in s.experts)
    w = eng.staging["0.w1"][8]
    eng.receive(rank, 1, [("0.w1", 8, 1, 0, 1, w)])
    assert eng.unplanned == 0
    eng.receive(rank, 1, [("0.w1", 0, 1, 0, 1, w)])  # expert 0 is not this rank's to send
    assert eng.unplanned == 1


def test_route_agreement_sees_one_wrong_row():
    routes = {0: np.array([[[0, 1]], [[2, 3]], [[4, 5]]], np.uint8)}
    s, p = np.array([0, 0, 0]), np.array([0, 1, 2])
    good = [(k, 0, a, s, p, np.array([[1, 0], [3, 2], [5, 4]]))
            for k, a in (("old", "replay_forward"), ("train", "replay_forward"),
                         ("train", "replay_backward"))]
    assert metrics.route_agreement(routes, (0,), good) == (9, 9)
    bad = list(good)
    bad[2] = (*good[2][:5], np.array([[1, 0], [3, 2], [5, 6]]))
    assert metrics.route_agreement(routes, (0,), bad) == (8, 9)
    with pytest.raises(RuntimeError, match="routes replayed"):
        metrics.route_agreement(routes, (0,), [(*g[:3], s[:2], p[:2], g[5][:2]) for g in good])


def test_logprob_diff_needs_every_response_token_once():
    lp = {0: [-1.0, -2.0], 1: [-0.5]}
    plens = {0: 3, 1: 2}
    part = (np.array([0, 0, 1]), np.array([3, 4, 2]), np.array([-1.0, -2.0 + 1e-3, -0.5]))
    assert metrics.logprob_diff(lp, plens, [part], "t") == pytest.approx(1e-3)
    with pytest.raises(RuntimeError, match="2 of 3"):
        metrics.logprob_diff(lp, plens, [tuple(a[:2] for a in part)], "t")
    with pytest.raises(RuntimeError, match="twice"):
        metrics.logprob_diff(lp, plens, [part, part], "t")


def test_task_reward_and_group_advantages():
    prompt = (10, 3, 1, 4)
    assert target(prompt) == (4, 1, 3, 11)
    assert reward(prompt, (4, 1, 3, 11)) == 1.0
    assert reward(prompt, (4, 0, 3)) == 0.5
    adv = advantages([1.0, 0.0, 0.5, 0.5], group=2)
    assert adv[0] > 0 > adv[1] and adv[2] == adv[3] == 0.0


def test_ownership_fault_differs_from_topology_only_where_the_old_rule_is_wrong():
    f = Faults(frozenset({"ownership-ignores-grid"}))
    topo = Topology(**ACCEPT)  # EP 8 over nodes of 4
    assert all(f.owned(topo, r) == topo.local_experts(r) for r in range(4))
    assert all(f.owned(topo, r) != topo.local_experts(r) for r in range(4, 8))
    # the default 2 x 4, EP 2 layout: node-local blocks vs the grid's alternating EP ranks
    default = Topology(layers=4, experts=8, nodes=2, gpus_per_node=4, ep=2, etp=1,
                       colocate=True)
    wrong = [r for r in range(8) if f.owned(default, r) != default.local_experts(r)]
    assert wrong == [1, 2, 5, 6]
    with pytest.raises(ValueError, match="unknown fault"):
        Faults(frozenset({"nope"}))


def test_bf16_rounds_to_nearest_even_like_torch():
    ulp = 2.0**-7  # bf16 keeps 8 significant bits
    x = np.array([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 1e-6, -3.3, 1e-3, 7.77e5])
    assert bf16(x)[:3].tolist() == [1.0, 1 + 2 * ulp, 1 + ulp]  # ties go to the even one
    want = torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).to(DTYPE).numpy()
    np.testing.assert_array_equal(bf16(x), want)


def test_engine_and_trainer_routing_split_only_on_near_ties():
    """The engine's bf16 router picks other experts than the float64 trainer exactly where
    two scores are closer than bf16 can tell, and nowhere else."""
    logits = np.array([[3.0, 2.0, 2.0 + 2e-4, -1.0],    # near-tie for the 2nd expert
                       [3.0, 2.0, 1.0, -1.0]])  # clear gaps
    ids, weights = engine_route(logits, 2)
    _, used = route(torch.tensor(logits, dtype=DTYPE), 2)
    trainer = used.nonzero()[:, 1].view(-1, 2)
    assert sorted(ids[0].tolist()) == [0, 1] and trainer[0].tolist() == [0, 2]
    assert sorted(ids[1].tolist()) == trainer[1].tolist() == [0, 1]
    np.testing.assert_allclose(weights.sum(1), 1.0, rtol=1e-6)


def test_engines_start_from_another_checkpoint_than_the_trainers():
    topo = Topology(**ACCEPT)
    eng = Engine(topo, 0, seed=0)
    mine = checkpoint(Spec.of(topo), 0)
    assert all(not np.allclose(eng.live[k], mine[k].numpy()) for k in mine)


def test_minus_one_rows_route_live_and_replay_off_routes_live(layer):
    m, spec = layer
    x = torch.randn(4, spec.hidden, dtype=DTYPE, generator=torch.Generator().manual_seed(3))
    live = (x @ m.router).topk(2, dim=1).indices.sort(1).values
    forced = torch.tensor([[7, 6]] * 4)
    with torch.no_grad():
        moe.set_replay([forced])
        m(x, moe.FORWARD)
        assert (m.trace.calls[-1][-1] == forced.sort(1).values).all()
        moe.reset_replay()
        moe.set_replay([torch.cat([forced[:3], torch.tensor([[-1, -1]])])])
        m(x, moe.FORWARD)  # one -1 row: the whole chunk routes live (miles' old fallback)
        assert (m.trace.calls[-1][-1] == live).all()
        moe.reset_replay()
        m.replaying = False
        moe.set_replay([forced])
        m(x, moe.FORWARD)
        assert (m.trace.calls[-1][-1] == live).all()
        moe.reset_replay()


def test_every_sync_metric_decides():
    ok = dict(logprob_max_abs_diff=1e-3, route_agreement=1.0, early_post_requests=0,
              unplanned_shards=0, engines_agree=True)
    assert metrics.failures(ok) == []
    for key, bad in (("logprob_max_abs_diff", 1.0), ("route_agreement", 0.999),
                     ("early_post_requests", 1), ("unplanned_shards", 3),
                     ("engines_agree", False)):
        assert metrics.failures({**ok, key: bad}), key
