"""The memory model's readings of Megatron's flags (issue 35): each as Megatron decides it."""

from __future__ import annotations

import pytest
from support import FIXTURES, run_cli

from miles_topology import Topology, TopologyError
from miles_topology.judging.fit import judge
from miles_topology.judging.memory import (
    GIB,
    Run,
    gpu_bytes,
    layout_of,
    precision_from_flags,
    reserve_bytes,
    shape_from_flags,
    train_memory,
)
from miles_topology.judging.plan import read_model
from miles_topology.pylaunch.cluster import ClusterModel

MODELS = FIXTURES / "models"
BASE = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8"]


def test_legacy_rope_spelling_has_no_learned_positions():
    assert shape_from_flags(BASE).learned_pos == 4096  # Megatron's default: learned_absolute
    assert shape_from_flags(BASE + ["--use-rotary-position-embeddings"]).learned_pos == 0
    assert shape_from_flags(BASE + ["--position-embedding-type", "learned_absolute",
                                    "--use-rotary-position-embeddings"]).learned_pos == 0


def test_qwen3_4b_model_file_has_its_published_parameter_count():
    shape, model = read_model([str(MODELS / "qwen3-4B.sh")], None)
    est = train_memory(shape, layout_of(Topology(nodes=1, gpus_per_node=1, **model)))
    assert est.stages[0].params.total == 4_022_468_096


@pytest.mark.parametrize("extra, groups", [
    (["--num-query-groups", "2"], 8),  # no --group-query-attention: full multi-head
    (["--group-query-attention"], 1),  # Megatron's default --num-query-groups is 1
    (["--group-query-attention", "--num-query-groups", "2"], 2),
])
def test_query_groups_as_megatron_builds_them(extra, groups):
    assert shape_from_flags(BASE + extra).groups == groups


def test_attention_output_gate_and_shared_expert_gate_are_read():
    s = shape_from_flags(BASE + ["--attention-output-gate", "--moe-shared-expert-gate"])
    assert s.output_gate and s.shared_gate


@pytest.mark.parametrize("argv, grad", [
    ([], 4),  # bf16 (miles' default): fp32 main grads
    (["--grad-reduce-in-bf16"], 2),
    (["--use-precision-aware-optimizer", "--main-grads-dtype", "bf16"], 2),
    (["--main-grads-dtype", "bf16"], 2),
    (["--fp16"], 2),  # fp16: the params' dtype unless accumulated in fp32
    (["--fp16", "--accumulate-allreduce-grads-in-fp32"], 4),
])
def test_main_grads_bytes_follow_megatron(argv, grad):
    assert precision_from_flags(argv).grad == grad


def test_embedding_and_loss_in_the_split_is_no_false_error(capsys):
    base = ["--actor-num-gpus-per-node", "8", "--colocate", "--num-layers", "30",
            "--num-attention-heads", "8", "--pipeline-model-parallel-size", "4"]
    code, out, _ = run_cli(capsys, "check", "--", *base,
                           "--account-for-embedding-in-pipeline-split",
                           "--account-for-loss-in-pipeline-split")
    assert code == 0 and "layers-not-divisible-by-pp" not in out
    code, out, _ = run_cli(capsys, "check", "--", *base,
                           "--account-for-embedding-in-pipeline-split")
    assert code == 1 and "30 layers + 1" in out
    with pytest.raises(TopologyError):  # megatron-core refuses both ways at once
        Topology(nodes=1, gpus_per_node=4, pp=4, layers=30, heads=8, embedding_in_split=True,
                 last_stage_layers=6)
    t = Topology(nodes=1, gpus_per_node=4, pp=4, layers=30, heads=8, embedding_in_split=True,
                 loss_in_split=True)
    assert [len(t.stage_layers(p)) for p in range(4)] == [7, 8, 8, 7]


def test_the_reserve_is_counted_per_gpu():
    h100, b200 = gpu_bytes("H100"), gpu_bytes("B200")
    assert 5 * GIB < reserve_bytes(h100) < reserve_bytes(b200) < 12 * GIB
    assert reserve_bytes(None) == 0
    # colocated: the sleeping engine's process keeps its own CUDA context
    assert reserve_bytes(h100, True) - reserve_bytes(h100) == GIB
    problems, report = judge(Topology.from_flags(BASE + ["--actor-num-gpus-per-node", "8",
                                                         "--colocate"]),
                             BASE + ["--colocate"], ClusterModel.of({"gpu": "H100"}))
    assert report["stages"][0]["reserve_gib"] == round(reserve_bytes(h100, True) / GIB, 2)
    argv = BASE + ["--actor-num-gpus-per-node", "1"]
    topo = Topology.from_flags(argv)
    shape = shape_from_flags(argv)
    plain = train_memory(shape, layout_of(topo)).stages[0]
    held = train_memory(shape, layout_of(topo), run=Run(reserve=reserve_bytes(h100))).stages[0]
    assert held.total - plain.total == reserve_bytes(h100) and held.static == plain.static


def test_a_many_fold_excess_says_exceeds_with_what_was_assumed(tmp_path, capsys):
    """Only a warning where the GPU is assumed (no certain error), but never "near"."""
    qwen = ("--disable-bias-linear --group-query-attention --num-attention-heads 64"
            " --num-query-groups 4 --kv-channels 128 --num-layers 94 --hidden-size 4096"
            " --ffn-hidden-size 12288 --normalization RMSNorm --swiglu --vocab-size 151936"
            " --moe-ffn-hidden-size 1536 --moe-router-topk 8 --num-experts 128"
            " --use-rotary-position-embeddings").split()
    launcher = tmp_path / "run_big.py"
    launcher.write_text("import subprocess\n\nFLAGS = %r\n\nif __name__ == '__main__':\n"
                        "    subprocess.run(['python3', 'train.py', *FLAGS], check=True)\n"
                        % (qwen + ["--actor-num-gpus-per-node", "8", "--colocate",
                                   "--tensor-model-parallel-size", "4", "--sequence-parallel",
                                   "--expert-tensor-parallel-size", "1",
                                   "--expert-model-parallel-size", "8",
                                   "--optimizer-cpu-offload"]))
    code, out, _ = run_cli(capsys, "check", str(launcher))
    assert "memory-near-gpu" in out
    assert "exceeds" in out and "(assumed; give --gpu)" in out
    assert "assumed cluster of 1 x 8 GPUs (give --nodes / --gpus-per-node)" in out
    assert "over 90%" not in out


def test_a_script_gives_its_own_cluster_so_none_is_said_assumed(capsys):
    argv = ["--actor-num-gpus-per-node", "8", "--colocate", "--num-layers", "40",
            "--hidden-size", "8192", "--num-attention-heads", "64", "--vocab-size", "1000",
            "--use-rotary-position-embeddings", "--optimizer-cpu-offload"]
    code, out, _ = run_cli(capsys, "check", "--", *argv)
    assert "memory-near-gpu" in out and "exceeds" in out and "assumed cluster" not in out
