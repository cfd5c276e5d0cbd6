"""Will it fit: the estimate's arithmetic, `check`'s memory findings, `show` and `plan`."""

from __future__ import annotations

import json

import pytest
from support import FIXTURES, SCRIPTS, run_cli

from miles_topology import Topology
from miles_topology.judging.fit import judge
from miles_topology.judging.memory import (
    GIB,
    Precision,
    Run,
    Shape,
    engine_memory,
    gpu_bytes,
    layout_of,
    precision_from_flags,
    read_hf_config,
    reserve_bytes,
    shape_from_flags,
    train_memory,
    vary,
)
from miles_topology.pylaunch.cluster import ClusterModel

UPSTREAM = sorted((SCRIPTS / "memory").glob("*.sh"))
DSV3 = str(FIXTURES / "hf" / "deepseek-v3.config.json")

# Qwen3-235B-A22B's shape (radixark/miles scripts/models/qwen3-235B-A22B.sh)
QWEN235 = ("--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads 64"
           " --num-query-groups 4 --kv-channels 128 --num-layers 94 --hidden-size 4096"
           " --ffn-hidden-size 12288 --normalization RMSNorm --position-embedding-type rope"
           " --swiglu --untie-embeddings-and-output-weights --vocab-size 151936"
           " --moe-ffn-hidden-size 1536 --moe-router-topk 8 --num-experts 128").split()
ON_8 = ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --tensor-model-parallel-size 4"
        " --sequence-parallel --expert-tensor-parallel-size 1 --colocate"
        " --rollout-num-gpus-per-engine 8").split()


def topo_of(argv: list[str]) -> Topology:
    return Topology.from_flags(argv)


# ---- the estimate --------------------------------------------------------------------------


def test_deepseek_v3_has_671b_parameters_without_mtp():
    """config.json's MTP layer is not counted: miles' and slime's deepseek-v3 model files
    train without --mtp-num-layers."""
    shape, model = read_hf_config(DSV3)
    assert "mtp_layers" not in model
    est = train_memory(shape, layout_of(Topology(nodes=1, gpus_per_node=1, **model)))
    assert round(est.stages[0].params.total / 1e9) == 671


def test_optimizer_shards_dense_over_dp_cp_and_experts_over_edp():
    argv = QWEN235 + ON_8[:4] + ["--context-parallel-size", "2", "--sequence-parallel",
                                 "--expert-model-parallel-size", "8",
                                 "--expert-tensor-parallel-size", "1",
                                 "--tensor-model-parallel-size", "2"]
    topo = topo_of(argv)
    assert (topo.dp, topo.layout.cp, topo.edp) == (2, 2, 1)
    lay, shape = layout_of(topo), shape_from_flags(argv)
    m = train_memory(shape, lay).stages[0]
    assert m.optimizer == int((m.params.dense / 4 + m.params.expert / 1) * 12)
    plain = train_memory(shape, lay, Precision(distributed=False)).stages[0]
    assert plain.optimizer == m.params.total * 12
    off = train_memory(shape, lay, Precision(offload=1.0)).stages[0]
    assert off.optimizer == 0 and off.weights == m.weights and off.grads == m.grads


def test_precision_flags():
    p = precision_from_flags(["--use-precision-aware-optimizer", "--main-grads-dtype", "bf16",
                              "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"])
    assert (p.grad, p.master, p.moments) == (2, 4, 4)
    assert not precision_from_flags(["--optimizer", "sgd"]).distributed
    assert precision_from_flags(["--optimizer-cpu-offload"]).offload == 1.0


def test_activations_follow_recompute_sp_and_pipeline_depth():
    argv = QWEN235 + ["--actor-num-gpus-per-node", "8", "--pipeline-model-parallel-size", "2",
                      "--tensor-model-parallel-size", "4", "--sequence-parallel",
                      "--expert-model-parallel-size", "2", "--expert-tensor-parallel-size", "1"]
    lay, shape = layout_of(topo_of(argv)), shape_from_flags(argv)
    full = train_memory(shape, lay, run=Run(tokens=4096, recompute="full"))
    none = train_memory(shape, lay, run=Run(tokens=4096))
    half = train_memory(shape, lay, run=Run(tokens=2048))
    assert full.stages[0].activations < none.stages[0].activations
    # stage 0 holds pp = 2 micro-batches in flight, the last stage one (plus its logits)
    assert none.stages[0].activations > none.stages[1].activations
    assert half.stages[0].activations < none.stages[0].activations
    assert train_memory(shape, lay).stages[0].activations is None  # tokens unknown


def test_full_recompute_redoes_one_layer_once_whatever_the_pipeline_depth():
    # micro-batches in flight keep their layers' inputs only; the layer redone in a backward
    # exists once on a rank, not once a micro-batch in flight
    from miles_topology import Topology
    shape = shape_from_flags(["--num-layers", "8", "--hidden-size", "4096",
                              "--num-attention-heads", "32", "--ffn-hidden-size", "11008",
                              "--swiglu", "--vocab-size", "32000"])
    assert shape is not None
    run = Run(tokens=4096, recompute="full")
    got = {pp: train_memory(shape, layout_of(Topology(
        nodes=1, gpus_per_node=8, tp=2, sp=True, pp=pp, layers=8, heads=32)), run=run)
        for pp in (2, 4)}
    inputs = 2 * 4096 * 4096 / 2  # a layer's input a micro-batch, bf16, over tp with SP
    # stages 1 and 2 of pp 4 (neither embedding nor logits) hold 3 and 2 micro-batches
    # of 2 layers' inputs: they differ by one micro-batch's inputs, not by the redone layer
    four = got[4].stages
    assert four[1].activations - four[2].activations == pytest.approx(2 * inputs, abs=8)
    assert four[2].activations > 2 * 2 * inputs  # the redone layer, once


def test_the_last_stage_holds_the_rl_losss_backward_over_the_logits():
    # slime's and miles' log-prob backward: the fp32 buffers the samples' log-probs keep, the
    # gradient gathered so far and one sample's slice gradient of the whole logits,
    # [tokens, vocab / tp] fp32 each (was 8 bytes: the forward's logits and softmax)
    from miles_topology import Topology

    def last(vocab: int) -> int:
        shape = shape_from_flags(["--num-layers", "2", "--hidden-size", "1024",
                                  "--num-attention-heads", "8", "--vocab-size", str(vocab)])
        assert shape is not None
        lay = layout_of(Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, layers=2, heads=8))
        got = train_memory(shape, lay, run=Run(tokens=4096, recompute="full")).stages[-1]
        assert got.activations is not None
        return got.activations

    assert last(2 * 65536) - last(65536) == pytest.approx(12 * 4096 * 65536 / 2, abs=8)


def test_engine_kv_cache_tokens():
    argv = QWEN235 + ON_8
    topo, shape = topo_of(argv), shape_from_flags(argv)
    eng = engine_memory(shape, layout_of(topo), gpu_bytes("H200"), 0.8)
    # GQA: K and V of 4 query groups over engine tp 8 -> one group a GPU, 94 layers, bf16
    assert eng.kv_bytes_per_token == 2 * 1 * 128 * 94 * 2
    assert eng.kv_tokens == (int(gpu_bytes("H200") * 0.8) - eng.weights) // eng.kv_bytes_per_token
    assert engine_memory(shape, layout_of(topo), None, 0.8).kv_tokens is None
    mla = Shape(hidden=64, mla=True, kv_lora=16, rope_head=8, vocab=100)
    t = Topology(nodes=1, gpus_per_node=8, layers=2, heads=4, engine_size=8, colocate=True)
    assert engine_memory(mla, layout_of(t), None, None).kv_bytes_per_token == (16 + 8) * 2 * 2


def test_vary_rebuilds_and_validates():
    topo = topo_of(QWEN235 + ON_8 + ["--expert-model-parallel-size", "1"])
    assert vary(topo, ep=8).layout.ep == 8
    from miles_topology import TopologyError

    with pytest.raises(TopologyError):
        vary(topo, ep=3)


# ---- check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("script", UPSTREAM, ids=lambda p: p.name)
def test_upstream_big_moe_scripts_print_per_rank_figures_and_pass(capsys, script):
    code, out, _ = run_cli(capsys, "check", "--verbose", str(script))
    assert code == 0, out
    assert "memory (largest rank" in out and "memory per rank, by pipeline stage" in out
    code, out, _ = run_cli(capsys, "check", "--format", "json", str(script))
    got = json.loads(out)
    topo = got["topology"]
    assert len(got["memory"]["stages"]) == topo["pp"]
    assert all(0 < s["total_gib"] < 80 for s in got["memory"]["stages"])
    assert not [e for e in got["errors"] if e["code"].startswith("memory")]


def test_235b_moe_with_ep_1_on_8_gpus_is_an_error_with_the_arithmetic(capsys):
    code, out, _ = run_cli(capsys, "check", "--gpu", "H100", "--", *QWEN235, *ON_8,
                           "--expert-model-parallel-size", "1")
    assert code == 1
    assert "error [memory-exceeds-gpu]" in out
    assert "229.13e9 parameters (227.10e9 in 128 experts a layer)" in out
    assert "weights 2 B + main grads 4 B a parameter = 1280.38 GiB" in out
    assert "> 79.65 GiB of an H100" in out
    fix = out.split("fix: try ")[1].split(", or ")[0].split()
    # the first fix, applied, passes: the suggestion is real
    fixed = QWEN235 + ON_8 + ["--expert-model-parallel-size", "1"] + [
        w for w in fix if w.startswith("--") and w not in ("--optimizer-cpu-offload",
                                                           "--overlap-cpu-optimizer-d2h-h2d")]
    fixed = _with_values(fixed, fix)
    code, out, _ = run_cli(capsys, "check", "--gpu", "H100", "--", *fixed)
    assert "memory-exceeds-gpu" not in out, out


def _with_values(argv: list[str], fix: list[str]) -> list[str]:
    """argv with the fix's `--flag value` pairs and switches applied (the last one wins)."""
    out = list(argv)
    i = 0
    while i < len(fix):
        if i + 1 < len(fix) and not fix[i + 1].startswith("--"):
            out += [fix[i], fix[i + 1]]
            i += 2
        else:
            out.append(fix[i])
            i += 1
    return out


def test_the_error_is_certain_without_a_gpu_given():
    """No --gpu: judged against the largest GPU modelled, so an H200 cluster is never told it
    runs out of memory on the assumed H100's figures; the H100 given makes it an error."""
    argv = QWEN235 + ON_8 + ["--expert-model-parallel-size", "8", "--optimizer-cpu-offload"]
    topo = topo_of(argv)
    static = max(m.static for m in train_memory(
        shape_from_flags(argv), layout_of(topo), precision_from_flags(argv)).stages)
    assert gpu_bytes("H100") < static < gpu_bytes("MI355X")
    assumed, _ = judge(topo, argv, ClusterModel.of({}))
    given, _ = judge(topo, argv, ClusterModel.of({"gpu": "H100"}))
    assert [p.code for p in given] == ["memory-exceeds-gpu"]
    assert [(p.code, p.severity) for p in assumed] == [("memory-near-gpu", "warning")]


def test_the_warning_starts_at_90_percent_with_activations():
    argv = QWEN235 + ["--actor-num-nodes", "4", "--actor-num-gpus-per-node", "8",
                      "--tensor-model-parallel-size", "4", "--sequence-parallel",
                      "--expert-model-parallel-size", "32", "--expert-tensor-parallel-size", "1",
                      "--optimizer-cpu-offload"]
    topo = topo_of(argv)
    lay, shape, prec = layout_of(topo), shape_from_flags(argv), precision_from_flags(argv)
    gpu = gpu_bytes("H100")

    def total(tokens: int) -> int:
        return train_memory(shape, lay, prec, Run(tokens=tokens, reserve=reserve_bytes(
            gpu_bytes("H100")))).largest.total

    lo, hi = 1, 1 << 20  # the fewest tokens whose estimate passes 90 % of the GPU
    assert total(lo) <= 0.9 * gpu < total(hi)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(mid) <= 0.9 * gpu else (lo, mid)
    h100 = ClusterModel.of({"gpu": "H100"})
    below, _ = judge(topo, argv + ["--use-dynamic-batch-size", "--max-tokens-per-gpu", str(lo)],
                     h100)
    above, report = judge(topo, argv + ["--use-dynamic-batch-size", "--max-tokens-per-gpu",
                                        str(hi)], h100)
    assert below == [] and [p.code for p in above] == ["memory-near-gpu"]
    assert report["stages"][report["largest_stage"]]["total_gib"] >= round(0.9 * gpu / GIB, 2)


@pytest.mark.parametrize("extra, why", [
    (["--megatron-to-hf-mode", "bridge"], "Megatron-Bridge"),
    (["--lora-rank", "16"], "LoRA"),
    (["--moe-latent-size", "1024"], "latent MoE"),
    (["--use-megatron-fsdp"], "FSDP inside Megatron"),
])
def test_no_estimate_where_the_flags_do_not_describe_the_trained_model(extra, why):
    argv = QWEN235 + ON_8 + ["--expert-model-parallel-size", "1"] + extra
    problems, report = judge(topo_of(QWEN235 + ON_8), argv, ClusterModel.of({"gpu": "H100"}))
    assert problems == [] and why in report["skipped"]


def test_a_custom_spec_is_never_an_error(capsys):
    code, out, _ = run_cli(capsys, "check", "--gpu", "H100", "--", *QWEN235, *ON_8,
                           "--expert-model-parallel-size", "1", "--spec", "plugin", "get_spec")
    assert "memory-exceeds-gpu" not in out and "memory-near-gpu" in out and "--spec" in out


def test_unresolved_shape_flag_skips_the_estimate(tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\npython3 train.py --actor-num-gpus-per-node 8 "
                      "--num-layers 4 --num-attention-heads 8 --hidden-size $HIDDEN\n")
    code, out, _ = run_cli(capsys, "check", "--format", "json", str(script))
    assert "--hidden-size" in json.loads(out)["memory"]["skipped"]


# ---- show ----------------------------------------------------------------------------------


def test_show_prints_memory_per_rank_and_colours_the_svg(tmp_path, capsys):
    svg = tmp_path / "m.svg"
    code, out, _ = run_cli(capsys, "show", "--gpu", "H100", "--svg", str(svg), "--color-by",
                           "memory", "--", *QWEN235, *ON_8, "--expert-model-parallel-size", "1")
    assert out.count(" GiB  ") + out.count(" GiB\n") >= 8  # one figure under each rank
    text = svg.read_text()
    assert "over 100 %: out of memory" in text and "#e57373" in text
    code, out, err = run_cli(capsys, "show", "--svg", str(svg), "--color-by", "memory", "--",
                             "--actor-num-gpus-per-node", "8")
    assert code == 2 and "no memory estimate" in err


# ---- plan ----------------------------------------------------------------------------------


def test_plan_lists_valid_layouts_that_fit_best_first(capsys):
    code, out, _ = run_cli(capsys, "plan", DSV3, "--nodes", "128", "--format", "json",
                           "--top", "50")
    assert code == 0
    got = json.loads(out)
    assert got["layouts"] and got["cluster"]["gpu"] == "H100"
    keys = [x["step_s"] for x in got["layouts"]]  # fastest first (tests/judging/test_plan_cost)
    assert keys == sorted(keys)
    shape, model = read_hf_config(DSV3)
    for x in got["layouts"][:5]:  # its flags are a valid layout whose largest rank fits
        topo = Topology.from_flags(x["flags"] + ["--num-layers", "61",
                                                 "--num-attention-heads", "128",
                                                 "--num-experts", "256"])
        assert (topo.layout.tp, topo.layout.pp, topo.layout.ep) == (x["tp"], x["pp"], x["ep"])
        assert x["total_gib"] <= 0.9 * gpu_bytes("H100") / GIB


def test_plan_from_a_model_script_and_flags(tmp_path, capsys):
    model = tmp_path / "model.sh"
    model.write_text("N=24\nMODEL_ARGS=(\n  --num-layers $N --hidden-size 1024"
                     " --num-attention-heads 16 --num-experts 32 --moe-ffn-hidden-size 512\n"
                     "  --vocab-size 32000 --swiglu\n)\n")
    code, out, _ = run_cli(capsys, "plan", str(model), "--nodes", "1")
    assert code == 0 and "--expert-model-parallel-size" in out
    code, out, _ = run_cli(capsys, "plan", "--nodes", "1", "--", "--num-layers", "24",
                           "--hidden-size", "1024", "--num-attention-heads", "16")
    assert code == 0 and "layout(s) fit" in out


def test_plan_says_when_nothing_fits_and_refuses_bad_input(capsys):
    code, out, _ = run_cli(capsys, "plan", DSV3, "--nodes", "1")
    assert code == 1 and "none fits" in out
    code, _, err = run_cli(capsys, "plan", "--nodes", "1", "--", "--num-layers", "2")
    assert code == 2 and err.count("\n") == 1 and "--hidden-size" in err
    code, _, err = run_cli(capsys, "plan", DSV3, "--nodes", "1", "--gpu", "X9")
    assert code == 2 and "not a GPU modelled" in err


@pytest.mark.parametrize("bad", [
    ["--hidden-size", "0"], ["--hidden-size", "-4"], ["--hidden-size", "x"],
    ["--hidden-size", "64", "--optimizer-cpu-offload", "--optimizer-offload-fraction", "nan"],
    ["--hidden-size", "64", "--sglang-mem-fraction-static", "7"],
    ["--hidden-size", "64", "--max-tokens-per-gpu", "-1", "--use-dynamic-batch-size"],
])
def test_odd_values_never_break_the_check(capsys, bad):
    code, out, err = run_cli(capsys, "check", "--format", "json", "--",
                             "--actor-num-gpus-per-node", "8", "--num-layers", "2",
                             "--num-attention-heads", "4", "--colocate", *bad)
    assert code in (0, 1) and not err, err
    got = json.loads(out)
    memory = got.get("memory")  # none where the flags build no Topology
    assert (memory is None and got["topology"] is None) or "skipped" in memory or all(
        s["total_gib"] >= 0 for s in memory["stages"])


def test_hf_config_of_a_qwen3_moe():
    from miles_topology.judging.memory import from_hf_config

    shape, model = from_hf_config({
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "moe_intermediate_size": 768,
        "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [0],
        "vocab_size": 151936, "tie_word_embeddings": False, "hidden_act": "silu"})
    assert model == {"layers": 4, "heads": 32, "query_groups": 4, "experts": 128, "topk": 8,
                     "moe_layer_freq": (0, 1, 1, 1)}
    assert (shape.kv_channels, shape.moe_ffn, shape.qk_norm, shape.tied, shape.swiglu) == (
        128, 768, True, False, True)


def test_an_unknown_gpu_is_a_usage_error_not_a_silent_skip(capsys):
    """Memory checks need the GPU's size: an unknown --gpu used to switch them off silently
    (issue 36); now it is refused with the GPUs modelled and a did-you-mean."""
    code, out, err = run_cli(capsys, "check", "--gpu", "L40S", "--format", "json", "--",
                             *QWEN235, *ON_8, "--expert-model-parallel-size", "1")
    assert code == 2 and out == "" and "'L40S' is not a GPU modelled" in err and "H100" in err
    code, _, err = run_cli(capsys, "check", "--gpu", "A100-40GB", "--", *QWEN235, *ON_8)
    assert code == 2 and "did you mean A100?" in err


def test_a_launcher_on_the_assumed_cluster_skips_the_oom_and_errs_on_a_given_one(tmp_path,
                                                                                   capsys):
    """A Python launcher sizes its job from the cluster it runs on: on the assumed one (no
    --nodes) the certain-OOM error is skipped with what to pass; on a cluster the user names
    it is the error again (the arithmetic is the same: only the proof differs)."""
    launcher = tmp_path / "run_big.py"
    launcher.write_text("import subprocess\n\nFLAGS = %r\n\nif __name__ == '__main__':\n"
                        "    subprocess.run(['python3', 'train.py', *FLAGS], check=True)\n"
                        % (QWEN235 + ON_8 + ["--expert-model-parallel-size", "1"]))
    code, out, _ = run_cli(capsys, "check", "--format", "json", str(launcher))
    got = json.loads(out)
    got = got[0] if isinstance(got, list) else got
    assert code == 0, out
    assert "memory-exceeds-gpu" in [p["code"] for p in got["skipped"]]
    assert "--nodes" in next(p["fix"] for p in got["skipped"] if p["code"] == "memory-exceeds-gpu")
    code, out, _ = run_cli(capsys, "check", "--format", "json", "--nodes", "1",
                           "--gpus-per-node", "8", "--gpu", "H100", str(launcher))
    got = json.loads(out)
    got = got[0] if isinstance(got, list) else got
    assert code == 1 and "memory-exceeds-gpu" in [p["code"] for p in got["errors"]], out
