"""`Topology.from_namespace` on a namespace built the way miles builds it: miles' real
argument definitions (the generated surface's dests and defaults), read at the README's
place, right after `miles_validate_args` (before SGLang's validate_args)."""

from __future__ import annotations

import pytest

from miles_topology import Topology, TopologyError
from miles_topology.reading import surface

QWEN3_30B_A3B = [  # scripts/models/qwen3-30B-A3B.sh, on one node of 8, colocated
    "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate",
    "--tensor-model-parallel-size", "4", "--sequence-parallel",
    "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1",
    "--num-layers", "48", "--hidden-size", "2048", "--num-attention-heads", "32",
    "--group-query-attention", "--num-query-groups", "4", "--num-experts", "128",
    "--moe-router-topk", "8", "--rollout-num-gpus-per-engine", "8",
    "--rollout-batch-size", "32", "--n-samples-per-prompt", "8", "--global-batch-size", "256",
]


def miles_args(argv: list[str]):
    """parse_args with miles' surface (every dest, upstream's defaults), the values typed as
    argparse's int converters would, then what miles_validate_args rewrites for the layout
    (miles/utils/arguments.py: use_critic from the estimator; the rollout GPUs under
    --colocate)."""
    args = surface.parser().parse_args(argv)
    for name, value in vars(args).items():
        if isinstance(value, str) and value.lstrip("-").isdigit():
            setattr(args, name, int(value))
    args.use_critic = args.advantage_estimator == "ppo"
    if args.colocate:
        args.rollout_num_gpus = args.actor_num_gpus_per_node * args.actor_num_nodes
    return args


def test_the_namespace_has_miles_real_dests():
    args = miles_args(QWEN3_30B_A3B)
    assert args.sglang_tp_size == 1  # SGLang's default: sglang's validate_args comes later
    assert args.sglang_ep_size == 1 and args.rollout_num_gpus == 8
    assert len(vars(args)) > 1500


def test_a_valid_job_passes_without_a_false_sglang_tp_warning():
    topo = Topology.from_namespace(miles_args(QWEN3_30B_A3B))
    assert (topo.world_size, topo.layout.tp, topo.layout.ep, topo.rollout.engine_size) == (
        8,
        4,
        8,
        8,
    )
    assert "sglang-tp-overridden" not in [w.code for w in topo.warnings]


def test_a_given_sglang_tp_size_still_warns():
    """Only the parser's default is taken for "not given": a value the user wrote warns."""
    topo = Topology.from_namespace(miles_args([*QWEN3_30B_A3B, "--sglang-tp-size", "4"]))
    assert "sglang-tp-overridden" in [w.code for w in topo.warnings]


def test_an_alias_reads_through_its_shared_dest():
    topo = Topology.from_namespace(miles_args([*QWEN3_30B_A3B, "--sglang-ep", "2"]))
    assert topo.rollout.engine_ep == 2


def test_ep_16_on_8_gpus_is_refused_with_a_fix():
    argv = [*QWEN3_30B_A3B]
    argv[argv.index("--expert-model-parallel-size") + 1] = "16"
    with pytest.raises(TopologyError) as e:
        Topology.from_namespace(miles_args(argv))
    (p,) = [p for p in e.value.problems if p.code == "expert-grid-divisibility"]
    assert "--expert-model-parallel-size 8" in p.fix


def test_the_one_liner_logs_the_warnings():
    seen: list[str] = []
    args = miles_args([*QWEN3_30B_A3B, "--sglang-tp-size", "4"])
    topo = Topology.from_namespace(args, log=seen.append)  # in miles: log=logger.warning
    assert [w.code for w in topo.warnings] == ["sglang-tp-overridden"]
    assert len(seen) == 1 and seen[0].startswith("[sglang-tp-overridden]")
    assert Topology.from_namespace(miles_args(QWEN3_30B_A3B), log=seen.append).warnings == ()
    assert len(seen) == 1
