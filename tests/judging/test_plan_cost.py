"""`plan` ranks by the step-time model of cost.py (issue 35): its terms, margin and flags."""

from __future__ import annotations

import json

import pytest
from support import FIXTURES, ROOT, run_cli

from miles_topology import Topology
from miles_topology.judging.cost import GEMM_EFF, HARDWARE, TERMS, spans, step_cost
from miles_topology.judging.memory import Precision, Run, gpu_bytes, layout_of
from miles_topology.judging.plan import Options, plan, read_model
from miles_topology.model.gpus import GPUS

MOE = str(FIXTURES / "models" / "qwen3-30B-A3B.sh")
QWEN4B = str(FIXTURES / "models" / "qwen3-4B.sh")


def _plan_json(capsys, *argv) -> dict:
    code, out, err = run_cli(capsys, "plan", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_every_gpu_modelled_has_sourced_hardware_figures():
    assert set(GPUS) <= set(HARDWARE)
    for name, hw in HARDWARE.items():
        assert hw.flops > 1e14 and hw.hbm > 1e12 and hw.link > hw.net > 0 and hw.pcie > 0
        assert "datasheet" in hw.source or "brief" in hw.source, name


def test_explain_terms_sum_to_the_ranking_key(capsys):
    got = _plan_json(capsys, MOE, "--nodes", "1", "--top", "20")
    steps = [x["step_s"] for x in got["layouts"]]
    assert steps == sorted(steps)  # ranked by the step time
    for x in got["layouts"]:
        assert list(x["cost_s"]) == list(TERMS)
        assert sum(x["cost_s"].values()) == pytest.approx(x["step_s"], abs=1e-3)
    code, out, _ = run_cli(capsys, "plan", MOE, "--nodes", "1", "--top", "3", "--explain")
    lines = [w for w in out.splitlines() if w.strip().startswith("step ~")]
    assert len(lines) == 3
    for line in lines:  # the printed terms add up to the printed total
        total = float(line.split("~")[1].split(" s")[0])
        parts = line.split("= ")[1].split(" (")[0].split(" + ")
        assert sum(float(p.split()[1]) for p in parts) == pytest.approx(total, abs=0.01)


def test_the_key_is_the_sum_of_the_terms():
    shape, model = read_model([MOE], None)
    topo = Topology(nodes=2, gpus_per_node=8, tp=2, sp=True, pp=2, cp=2, ep=4, etp=1,
                    **model)
    cost = step_cost(shape, layout_of(topo), HARDWARE["H100"], 8, Precision(offload=1.0),
                     Run(tokens=8192, recompute="full"), 16 * 4 * 8192)
    assert cost.total == sum(cost.terms.values())
    assert all(cost.terms[k] > 0 for k in ("compute", "recompute", "tp", "ep", "pp_bubble",
                                           "optimizer"))


@pytest.mark.parametrize("margin", ["0.1", "0.3"])
def test_no_proposal_leaves_less_than_the_margin_free(capsys, margin):
    got = _plan_json(capsys, MOE, "--nodes", "1", "--top", "200", "--margin", margin)
    assert got["layouts"] and got["cluster"]["margin"] == float(margin)
    assert min(x["headroom"] for x in got["layouts"]) >= float(margin)


def test_proposals_pass_check_on_the_same_cluster_without_a_memory_finding(capsys):
    shape_flags = _model_args(MOE)
    got = _plan_json(capsys, MOE, "--nodes", "1", "--top", "8", "--colocate",
                     "--max-tokens-per-gpu", "16384")
    for x in got["layouts"]:
        assert "--context-parallel-size" in x["flags"]  # every size given
        assert "--rollout-num-gpus-per-engine" in x["flags"]
        code, out, _ = run_cli(capsys, "check", "--gpu", "H100", "--format", "json", "--",
                               *shape_flags, *x["flags"])
        report = json.loads(out)
        codes = [p["code"] for p in report["errors"] + report["warnings"]]
        assert not [c for c in codes if c.startswith("memory")], (x["flags"], codes)
        assert "stages" in report["memory"]


def _model_args(path: str) -> list[str]:
    from miles_topology.judging.plan import _script_flags

    return _script_flags(path)


def test_recompute_offload_vpp_and_cp_are_options():
    shape, model = read_model([MOE], None)
    free = plan(shape, model, 2, 8, gpu_bytes("H100"), opts=Options(tokens=8192))
    assert {c.recompute for c in free} == {False, True}  # weighed, not forced
    assert any(c.topo.stages.chunks > 1 for c in free)  # interleaving proposed
    assert all(c.topo.layout.cp == 1 for c in free)  # samples fit a rank: the ring is a cost
    assert any(not c.offload for c in free) and any(c.offload for c in free)
    forced = plan(shape, model, 2, 8, gpu_bytes("H100"),
                  opts=Options(tokens=8192, recompute=True, offload=True))
    assert all(c.recompute and c.offload for c in forced)
    assert all("--recompute-granularity" in c.flags and "--optimizer-cpu-offload" in c.flags
               for c in forced)
    long = plan(shape, model, 2, 8, gpu_bytes("H100"),
                opts=Options(tokens=8192, seq_length=30000))
    assert long and all(c.topo.layout.cp * 8192 >= 30000 for c in long)


def test_tiny_expert_slices_lose_to_expert_parallel():
    """ep 1 with etp = tp holds as many expert parameters a rank as ep 8 with etp 1, but its
    expert matrix multiplies are 96 columns wide (768 / 8): memory-bound, and the tokens of
    every routed copy are gathered over etp. The model ranks ep 8 etp 1 first."""
    shape, model = read_model([MOE], None)

    def cost(ep: int, etp: int) -> float:
        topo = Topology(nodes=1, gpus_per_node=8, tp=8, sp=True, ep=ep, etp=etp, **model)
        return step_cost(shape, layout_of(topo), HARDWARE["H100"], 8, Precision(),
                         Run(tokens=8192), 8 * 4 * 8192).total

    assert cost(8, 1) < cost(1, 8)


def test_an_all_to_all_across_nodes_costs_more_than_inside_one():
    shape, model = read_model([MOE], None)

    def ep_cost(nodes: int, ep: int) -> float:
        topo = Topology(nodes=nodes, gpus_per_node=8, ep=ep, etp=1, **model)
        return step_cost(shape, layout_of(topo), HARDWARE["H100"], 8, Precision(),
                         Run(tokens=8192), 16 * 4 * 8192).terms["ep"]

    assert ep_cost(2, 16) > 2 * ep_cost(2, 8)


@pytest.mark.parametrize("sizes", [dict(tp=2, cp=2, ep=4, etp=1, pp=2),
                                   dict(tp=8, cp=2, ep=16, etp=1, pp=1),
                                   dict(tp=4, cp=1, ep=4, etp=4, pp=2)])
def test_spans_match_the_topology_groups(sizes):
    _, model = read_model([MOE], None)
    topo = Topology(nodes=4, gpus_per_node=8, sp=sizes["tp"] > 1, **sizes, **model)

    def nodes(token: str, expert: bool = False) -> int:
        return len({topo.placement(r)[0] for r in topo.rank_groups(token, expert)[0]})

    got = spans(layout_of(topo), 8)
    assert (got.tp, got.cp, got.ep, got.edp) == (nodes("tp"), nodes("cp"), nodes("ep", True),
                                                 nodes("dp", True))


def test_json_carries_the_model_parameters_and_the_rollout(capsys):
    got = _plan_json(capsys, QWEN4B, "--nodes", "1", "--colocate", "--top", "1")
    assert got["model"]["parameters"] == 4_022_468_096
    roll = got["layouts"][0]["rollout"]
    assert roll["rollout_num_gpus_per_engine"] >= 1 and 0 < roll[
        "sglang_mem_fraction_static"] < 0.9
    assert roll["engine_weights_gib"] <= roll["sglang_mem_fraction_static"] * 79.65 / 2


def test_bad_plan_options_are_refused(capsys):
    for bad in (["--margin", "1.5"], ["--max-tokens-per-gpu", "0"], ["--seq-length", "-1"]):
        code, _, err = run_cli(capsys, "plan", MOE, "--nodes", "1", *bad)
        assert code == 2 and err.count("\n") == 1, err


def test_deepep_is_weighed_as_a_dispatcher():
    # slime's MoE scripts switch to megatron-core's flex dispatcher with DeepEP
    # (THUDM/slime scripts/run-deepseek-r1.sh); a token then crosses the network once a
    # remote node and NVLink once a rank, not once a routed expert
    shape, model = read_model([MOE], None)
    got = plan(shape, model, 2, 8, gpu_bytes("H100"),
               opts=Options(tokens=8192, recompute=True, offload=True))
    far = [c for c in got if spans(layout_of(c.topo), 8).ep > 1]
    assert far and all(c.deepep and "--moe-enable-deepep" in c.flags for c in far)
    assert not any(c.deepep or "--moe-enable-deepep" in c.flags
                   for c in got if c.topo.layout.ep == 1)
    run = Run(tokens=8192, recompute="full")
    for c in far[:1] + [c for c in got if c.deepep and spans(layout_of(c.topo), 8).ep == 1][:1]:
        a2a = step_cost(shape, layout_of(c.topo), HARDWARE["H100"], 8, Precision(offload=1.0),
                        run, 2**20)
        assert c.cost is not None and c.cost.terms["ep"] < a2a.terms["ep"]


def test_the_cp_ring_passes_k_and_v_of_mla_heads():
    # DeepSeek-V3's MLA: 128 heads, K of 128 + 64 (rope) and V of 128 a head; TE's P2P
    # context parallelism sends K and V both (was counted half)
    from miles_topology.judging.cost import ring_bytes
    from miles_topology.judging.memory import shape_from_flags
    flags = ["--num-layers", "4", "--hidden-size", "7168", "--num-attention-heads", "128",
             "--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512",
             "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128",
             "--ffn-hidden-size", "18432", "--vocab-size", "129280"]
    shape = shape_from_flags(flags)
    assert shape is not None and shape.mla
    topo = Topology(nodes=1, gpus_per_node=8, tp=8, sp=True, cp=1, layers=4, heads=128)
    assert ring_bytes(shape, layout_of(topo), 16384, 128) == 16384 * 2 * 16 * (192 + 128)
    gqa = shape_from_flags(["--num-layers", "4", "--hidden-size", "4096",
                            "--num-attention-heads", "64", "--group-query-attention",
                            "--num-query-groups", "4", "--kv-channels", "128"])
    assert gqa is not None
    topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, layers=4, heads=64,
                    query_groups=4)
    assert ring_bytes(gqa, layout_of(topo), 1000, 4) == 1000 * 2 * 2 * 2 * 128


def test_offload_copies_are_pipelined_with_cpu_adam():
    # --overlap-cpu-optimizer-d2h-h2d: the copies overlap the CPU steps (HybridDeviceOptimizer)
    from miles_topology.judging.cost import CPU_ADAM, PCIE_EFF
    shape, model = read_model([MOE], None)
    topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, ep=4, etp=1, **model)
    lay = layout_of(topo)
    prec = Precision(offload=1.0)
    cost = step_cost(shape, lay, HARDWARE["H100"], 8, prec, Run(tokens=8192), 2**20)
    from miles_topology.judging.memory import Counter
    c = Counter(shape, lay)
    big = max((c.stage(p) for p in range(lay.pp)), key=lambda x: x.total)
    shard = big.dense / (lay.dp * lay.cp) + big.expert / lay.edp
    copies = shard * (prec.grad + prec.weight) / (HARDWARE["H100"].pcie * PCIE_EFF)
    assert cost.terms["optimizer"] == pytest.approx(max(copies, shard / CPU_ADAM))


def test_the_default_step_is_an_rl_batch_that_does_not_grow_with_the_cluster():
    # an RL step is STEP_SAMPLES samples (slime's scripts: 256 in four of five) of half the
    # longest sample; before, 4 micro-batches a GPU made every layout see m = 4 x tp x pp
    from miles_topology.judging.plan import STEP_SAMPLES, mean_sample
    shape, model = read_model([MOE], None)
    opts = Options(tokens=8192, recompute=True, offload=True)
    assert mean_sample(opts) == 4096
    assert mean_sample(Options(tokens=8192, seq_length=30000)) == 15000
    for nodes in (1, 4):
        got = plan(shape, model, nodes, 8, gpu_bytes("H100"), opts=opts)
        for c in got[:5]:
            t = c.topo
            want = -(-STEP_SAMPLES * 4096 // (t.dp * t.layout.cp * 8192))
            assert c.cost is not None and c.cost.micro_batches == want


def test_deepep_moves_tokens_at_its_published_bandwidth():
    # DeepEP's README: 153-158 GB/s on ~160 GB/s NVLink, 43-58 GB/s on ~50 GB/s RDMA; NCCL's
    # all-to-all at COMM_EFF: the same bytes on NVLink take 0.8 / 0.95 of the time with DeepEP
    from dataclasses import replace

    from miles_topology.judging.cost import COMM_EFF, DEEPEP_NVL_EFF
    shape, model = read_model([MOE], None)
    topo = Topology(nodes=1, gpus_per_node=8, tp=1, ep=8, etp=1, **model)
    lay = layout_of(topo)
    nccl = replace(shape, dispatcher="flex")
    cost = step_cost(nccl, lay, HARDWARE["H100"], 8, Precision(), Run(tokens=8192), 2**20)
    own = 8192 * shape.hidden * 2
    ranks = 8 * (1 - (7 / 8) ** lay.topk)
    one = own * ranks * 7 / 8 / (HARDWARE["H100"].link * DEEPEP_NVL_EFF)
    m = cost.micro_batches
    layers = sum(lay.moe)
    assert cost.terms["ep"] == pytest.approx(m * layers * 4 * one)
    assert DEEPEP_NVL_EFF > COMM_EFF


def test_the_rl_loss_passes_over_the_logits_weigh_on_the_last_stage():
    # slime's log-prob and entropy make fp32 passes over a rank's [tokens, vocab / tp]
    # logits (LOSS_BYTES an entry, HBM-bound): on one stage every rank pays them alike; with
    # pp > 1 only the last stage, which then sets the pace of the pipeline
    from miles_topology.judging.cost import HBM_EFF, LOSS_BYTES
    shape, model = read_model([MOE], None)
    hw = HARDWARE["H100"]

    def cost(pp: int, loss: float):
        topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, pp=pp, ep=4, etp=1, **model)
        return step_cost(shape, layout_of(topo), hw, 8, Precision(), Run(tokens=8192),
                         2**21, 2048, loss_bytes=loss)

    one, bare = cost(1, LOSS_BYTES), cost(1, 0)
    per_mb = 8192 * shape.padded_vocab(2) / 2 * LOSS_BYTES / (hw.hbm * HBM_EFF)
    assert one.terms["compute"] - bare.terms["compute"] == pytest.approx(
        one.micro_batches * per_mb)
    two, two_bare = cost(2, LOSS_BYTES), cost(2, 0)
    assert two.terms["compute"] - two_bare.terms["compute"] > 0
    assert (two.total - two_bare.total) > (one.total - bare.total) / 2


def test_latency_is_a_fixed_time_a_layer_and_a_local_expert_a_micro_batch():
    # a layer's fixed seconds, and a local expert's on MoE layers, every micro-batch on the
    # slowest stage; full recompute runs the forward's third again
    shape, model = read_model([MOE], None)
    topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, ep=4, etp=1, **model)
    lay = layout_of(topo)

    def cost(latency, recompute=None):
        return step_cost(shape, lay, HARDWARE["H100"], 8, Precision(),
                         Run(tokens=8192, recompute=recompute), 2**21, latency=latency)

    bare = cost((0.0, 0.0))
    assert bare.terms["latency"] == 0
    m, layers, moe = bare.micro_batches, len(lay.moe), sum(lay.moe)
    assert cost((1.0, 0.0)).terms["latency"] == pytest.approx(m * layers)
    local = lay.experts // lay.ep
    assert cost((0.0, 1.0)).terms["latency"] == pytest.approx(m * moe * local)
    full = cost((1.0, 0.0), "full")
    assert full.terms["recompute"] - cost((0.0, 0.0), "full").terms["recompute"] == \
        pytest.approx(m * layers / 3)


def test_measured_latencies_order_nvidias_runs_as_measured():
    # bench/plan_measured.py: NVIDIA's three Qwen3-235B step times on 256 H100. The roofline
    # alone orders them backwards; the latencies cost.py holds are the least-squares fit of
    # what it misses, and with them the model orders the runs as measured
    import importlib.util

    from miles_topology.judging.cost import EXPERT_LATENCY, LAYER_LATENCY
    path = FIXTURES.parent.parent / "bench" / "plan_measured.py"
    spec = importlib.util.spec_from_file_location("plan_measured", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lam, mu = bench.fit()
    assert lam == pytest.approx(LAYER_LATENCY, rel=0.01)
    assert mu == pytest.approx(EXPERT_LATENCY, rel=0.01)
    measured = [run[-1] for run in bench.MEASURED]

    def order(latency):
        got = [bench.modelled(*run[:5], 4096, 1, 2048, latency=latency)
               for run in bench.MEASURED]
        return sorted(range(3), key=lambda i: got[i])

    want = sorted(range(3), key=lambda i: measured[i])
    assert order((0.0, 0.0)) != want
    assert order((LAYER_LATENCY, EXPERT_LATENCY)) == want


def _gpu_probe():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("gpu_layer", ROOT / "bench" / "gpu_layer.py")
    probe = importlib.util.module_from_spec(spec)
    sys.modules["gpu_layer"] = probe  # its dataclass resolves annotations through it
    spec.loader.exec_module(probe)
    return probe


def test_the_gpu_probe_runs_the_shapes_the_model_charges():
    # bench/gpu_layer.py times a rank's share of one MoE layer on a GPU against cost.py: its
    # shapes must be the model's, so its forward FLOPs x 3 (backward twice) at the roofline's
    # rate are the model's compute for the pass (every GEMM FLOP-bound at 20,480 tokens)
    probe = _gpu_probe()
    shape, model = read_model([str(FIXTURES / "models" / "qwen3-30B-A3B.sh")], None)
    rate = HARDWARE["H100"].flops * GEMM_EFF
    for tp, ep, local, rows in ((1, 4, 32, 5120), (4, 8, 16, 2560)):
        p = probe.shapes(shape, model, tp, ep, 20480)
        assert (p.experts, p.rows, p.heads) == (local, rows, 32 // tp)
        charged = probe.modelled_ms(shape, model, tp, ep, 20480, 10240, "H100", ("compute",))
        assert charged == pytest.approx(3 * p.flops(10240) / rate * 1e3, rel=0.01)


def test_the_gpu_probe_runs_on_the_cpu_with_dry():
    pytest.importorskip("torch")
    probe = _gpu_probe()
    assert probe.main([str(FIXTURES / "models" / "qwen3-30B-A3B.sh"), "--dry", "--repeats", "1",
                       "--layouts", "4x8"]) == 0



def test_a_layout_is_proposed_once_with_its_fastest_virtual_stage_count(monkeypatch):
    """vpp is a schedule option of a layout, like recompute and offload: one proposal a
    (tp, pp, cp, ep, etp), the fastest of its vpp variants (fails when every variant is
    listed, as the first three proposals for Qwen3-30B-A3B on 8 GPUs were)."""
    from miles_topology.judging import plan as planner

    shape, model = read_model([MOE], None)
    opts = Options(tokens=20480, recompute=True, offload=True)

    def key(c) -> tuple[int, ...]:  # noqa: ANN001
        t = c.topo.layout
        return (t.tp, t.pp, t.cp, t.ep, t.etp)

    got = plan(shape, model, 1, 8, gpu_bytes("H100"), opts=opts)
    with monkeypatch.context() as m:
        m.setattr(planner, "_fastest_of_each", list)
        every = plan(shape, model, 1, 8, gpu_bytes("H100"), opts=opts)
    assert len(every) > len(got)  # vpp variants exist
    assert len({key(c) for c in got}) == len(got) and {key(c) for c in every} == \
        {key(c) for c in got}
    for c in got:
        variants = [o for o in every if key(o) == key(c)]
        assert c.cost.total == min(o.cost.total for o in variants)
    assert any(c.topo.stages.chunks > 1 for c in got)  # interleaving still wins somewhere


def test_the_readme_s_plan_example_is_what_plan_prints(capsys, monkeypatch):
    """README.md shows `plan`'s real output: a change of the model or its wording shows there."""
    import shlex

    monkeypatch.chdir(ROOT)  # its path is the checkout's (CI runs the wheel's tests elsewhere)
    text = (ROOT / "README.md").read_text()
    head = "$ miles-topology plan "
    start = text.index(head)
    block = text[start:text.index("\n```", start)]
    command, shown = block.split("\n", 1)
    code, out, _ = run_cli(capsys, *shlex.split(command[len("$ miles-topology "):]))
    assert code == 0 and out.rstrip("\n") == shown.rstrip("\n")


def test_a_model_with_layers_the_estimate_does_not_count_is_refused(capsys):
    """A latent MoE (--moe-latent-size: miles' Nemotron-3 Super model file) or a hybrid Mamba
    stack: its parameter count would be wrong (Nemotron-3 Super's flags counted 1.0e12 for
    a 120B model), so plan proposes nothing (exit 2), as check skips its memory estimate."""
    model = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8",
             "--ffn-hidden-size", "2048", "--num-experts", "16", "--moe-ffn-hidden-size", "512",
             "--moe-router-topk", "2", "--vocab-size", "32000"]
    code, out, _ = run_cli(capsys, "plan", "--nodes", "1", "--", *model)
    assert code == 0 and "parameters;" in out  # the control
    for extra in (["--moe-latent-size", "256"], ["--hybrid-override-pattern", "M*M*M*M*"]):
        code, out, err = run_cli(capsys, "plan", "--nodes", "1", "--", *model, *extra)
        assert code == 2 and "are not modelled" in err and "parameters;" not in out
