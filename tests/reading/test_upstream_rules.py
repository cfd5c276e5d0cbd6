"""Rules read from miles / SGLang HEAD, each on a command line in upstream's style, with the
verdict computed by hand from upstream's code (file + function named in checks.py)."""

import pytest

from miles_topology import Topology, TopologyError
from miles_topology.reading.sources import read_flags, to_yaml


def codes(problems, severity=None):
    return [p.code for p in problems if severity is None or p.severity == severity]


def refused(argv):
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(argv)
    return info.value


# ---- the three real-world shapes --------------------------------------------------------


def test_a_engines_continue_mid_node_after_the_actor():
    # placement_group.py: one PG of 4 + 12 = 16 bundles, rollout offset 4; engine i at 4 + 4i
    topo = Topology.from_flags([
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "12",
        "--rollout-num-gpus-per-engine", "4", "--num-gpus-per-node", "8"])
    assert (
        topo.placement_group.nodes == 2
        and topo.placement_group.bundles == 16
        and topo.placement_group.rollout_offset == 4
    )
    assert topo.engine_gpus(0) == ((0, 4), (0, 5), (0, 6), (0, 7))
    assert topo.engine_gpus(1) == ((1, 0), (1, 1), (1, 2), (1, 3))
    assert topo.engine_gpus(2) == ((1, 4), (1, 5), (1, 6), (1, 7))
    assert not topo.warnings


def test_b_engine_larger_than_nodes_of_four_without_num_gpus_per_node_warns():
    # ray/specs/inference.py _compute_spec_inference_engine: an engine of 8 with the default
    # --num-gpus-per-node 8 is one process holding 8 GPU slots of one node (min(8, 8))
    two_by_four = ["--colocate", "--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4"]
    topo = Topology.from_flags(two_by_four + ["--rollout-num-gpus-per-engine", "8"])
    (w,) = [p for p in topo.warnings if p.code == "num-gpus-per-node-default"]
    assert "--num-gpus-per-node" in w.flags and "--rollout-num-gpus-per-engine" in w.flags
    assert "one process on 8 GPUs of a single node" in w.message
    assert w.fix == "add --num-gpus-per-node 4"
    fixed = Topology.from_flags(two_by_four + ["--rollout-num-gpus-per-engine", "8",
                                               "--num-gpus-per-node", "4"])
    assert "num-gpus-per-node-default" not in codes(fixed.warnings)
    # engines that fit the node are launched the same with 4 or 8 per node: no warning
    for size in ("1", "2", "4"):
        fits = Topology.from_flags(two_by_four + ["--rollout-num-gpus-per-engine", size])
        assert "num-gpus-per-node-default" not in codes(fits.warnings)
    # 12 is neither <= 8 nor a multiple of 8: miles asserts (with 4 per node it tiles 3 nodes)
    twelve = Topology.from_flags(["--actor-num-nodes", "3", "--actor-num-gpus-per-node", "4",
                                  "--colocate", "--rollout-num-gpus-per-engine", "12"])
    (w,) = [p for p in twelve.warnings if p.code == "num-gpus-per-node-default"]
    assert "refuses the size" in w.message
    # an eval engine larger than the node counts too
    ev = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                              "--rollout-num-gpus", "4", "--eval-num-gpus", "8",
                              "--eval-num-gpus-per-engine", "8"])
    (w,) = [p for p in ev.warnings if p.code == "num-gpus-per-node-default"]
    assert "eval engines of 8" in w.message and "--eval-num-gpus-per-engine" in w.flags


def test_c_engine_dp_without_dp_attention_is_the_error_miles_asserts():
    argv = ["--colocate", "--rollout-num-gpus-per-engine", "2", "--sglang-data-parallel-size", "2"]
    e = refused(argv)
    assert codes(e.problems) == ["sglang-dp-invalid"]
    assert "--sglang-enable-dp-attention" in e.problems[0].fix
    assert Topology.from_flags(argv + ["--sglang-enable-dp-attention"]).rollout.engine_dp == 2


# ---- FSDP ------------------------------------------------------------------------------

# miles tests/e2e/fsdp/r3/_common.py with the Qwen3-30B-A3B case (8 GPUs, engines of 2): the
# model shape comes from --hf-checkpoint, no Megatron model flag is given
FSDP_R3 = (
    "--hf-checkpoint /root/models/Qwen3-30B-A3B --prompt-data /root/d.jsonl --input-key prompt "
    "--label-key label --apply-chat-template --rollout-shuffle --rm-type math --num-rollout 2 "
    "--rollout-batch-size 8 --n-samples-per-prompt 8 --rollout-max-response-len 1024 "
    "--rollout-temperature 1 --global-batch-size 32 --optimizer adam --lr 1e-6 "
    "--advantage-estimator grpo --kl-loss-coef 0.00 --kl-coef 0.00 --train-backend fsdp "
    "--gradient-checkpointing --update-weight-buffer-size 536870912 --use-dynamic-batch-size "
    "--max-tokens-per-gpu 8192 --use-rollout-routing-replay --rollout-num-gpus-per-engine 2 "
    "--sglang-mem-fraction-static 0.8 --attn-implementation flash_attention_3 --ci-test "
    "--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate"
).split()


def test_fsdp_r3_command_of_miles_is_not_failed():
    topo = Topology.from_flags(FSDP_R3)
    assert topo.layout.train_backend == "fsdp" and topo.placement_group.rollout_engines == 4
    assert codes(topo.warnings, "skipped") == ["r3-requires-moe"]
    assert codes(topo.warnings, "warning") == []


def test_fsdp_mesh_rules_replace_megatron_grid_rules():
    # fsdp_utils/arguments.py validate_hybrid_shard_args: (world / cp) % dp_replicate == 0
    base = ["--train-backend", "fsdp", "--actor-num-gpus-per-node", "8", "--colocate"]
    assert Topology.from_flags(base + ["--dp-replicate-size", "2"]).layout.dp_replicate == 2
    e = refused(base + ["--dp-replicate-size", "3"])
    assert codes(e.problems) == ["fsdp-mesh-divisibility"]
    assert "world size 8 is not divisible by dp_replicate_size 3" in e.problems[0].message
    # a size that reaches the Topology from elsewhere (a Python caller, our YAML) is ignored
    topo = Topology(train_backend="fsdp", gpus_per_node=8, colocate=True, tp=3)
    assert topo.layout.tp == 1 and codes(topo.warnings) == ["fsdp-ignores-megatron-sizes"]
    assert "--tensor-model-parallel-size 3" in topo.warnings[0].message
    assert "context" not in topo.warnings[0].fix


def test_fsdp_refuses_megatron_only_flags_on_the_command_line(tmp_path):
    # miles utils/arguments.py parse_args -> fsdp_utils/arguments.py parse_fsdp_cli: FSDPArgs
    # fields + miles' provider, strict parse_args; Megatron's flags are not defined there
    base = ["--train-backend", "fsdp", "--actor-num-gpus-per-node", "8", "--colocate"]
    for argv in (["--tensor-model-parallel-size", "1"], ["--pipeline-model-parallel-size", "2"],
                 ["--expert-model-parallel-size", "8"], ["--expert-tensor-parallel-size", "1"],
                 ["--num-virtual-stages-per-pipeline-rank", "2"],
                 ["--num-layers-per-virtual-pipeline-stage", "2"],
                 ["--decoder-first-pipeline-num-layers", "2"],
                 ["--decoder-last-pipeline-num-layers", "2"], ["--sequence-parallel"],
                 ["--use-tp-pp-dp-mapping"]):
        e = refused(base + argv)
        (p,) = e.problems
        assert p.code == "fsdp-unknown-flag" and p.flags[0] == argv[0]
        assert "unrecognized arguments" in p.message and p.fix.startswith(f"drop {argv[0]}")
        assert "fsdp-ignores-megatron-sizes" not in codes(e.warnings)  # not reported twice
    # the same flags are fine under Megatron; FSDP's own mesh flags are fine under FSDP
    assert Topology.from_flags(["--colocate", "--tensor-model-parallel-size", "1"]).layout.tp == 1
    assert Topology.from_flags(base + ["--dp-replicate-size", "2"]).layout.dp_replicate == 2
    # a size from our topology YAML is not a miles flag: still the warning
    yaml = tmp_path / "t.yaml"
    yaml.write_text("tp: 2\n")
    topo = Topology.from_flags(base + ["--topology", str(yaml)])
    assert codes(topo.warnings) == ["fsdp-ignores-megatron-sizes"]


def test_r3_on_a_dense_model_fails_engine_start_and_external_capture_fails_training():
    # SGLang state_capturer/routed_experts.py RoutedExpertsCapturer.__init__ reads
    # hf_text_config.num_experts_per_tok at engine start (miles turns capture on for R3)
    e = refused(["--colocate", "--use-rollout-routing-replay", "--num-layers", "4"])
    (p,) = e.problems
    assert p.code == "r3-requires-moe" and "num_experts_per_tok" in p.message
    assert "fails at start-up" in p.message
    # external servers: training_utils/replay_data.py fill_replay_data raises at the first step
    topo = Topology.from_flags(["--rollout-external", "--use-rollout-routing-replay",
                                "--num-experts", "8"])
    (w,) = [p for p in topo.warnings if p.code == "r3-external-capture"]
    assert "first training step then fails after a full rollout" in w.message
    assert "rollout_routed_experts is required" in w.message


# ---- PPO critic ------------------------------------------------------------------------


def test_ppo_critic_shares_the_actor_placement_group():
    base = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "8",
            "--num-gpus-per-node", "8"]
    topo = Topology.from_flags(base + ["--advantage-estimator", "ppo"])
    assert (
        topo.layout.use_critic
        and topo.placement_group.nodes == 2
        and topo.placement_group.bundles == 16
    )
    over = Topology.from_flags(base + ["--advantage-estimator", "ppo", "--critic-num-nodes", "2"])
    (w,) = over.warnings
    assert w.code == "critic-placement-overridden"
    assert "--critic-num-nodes 2 with the actor's 1" in w.message
    assert not Topology.from_flags(base + ["--advantage-estimator", "grpo"]).layout.use_critic
    old = Topology.from_flags(base + ["--use-critic"])
    assert codes(old.warnings) == ["deprecated-flag"]
    assert "--advantage-estimator ppo" in old.warnings[0].fix
    e = refused(base + ["--advantage-estimator", "ppo", "--train-backend", "fsdp"])
    assert codes(e.problems) == ["ppo-requires-megatron"]


# ---- SGLang flags forwarded with the --sglang- prefix -------------------------------------


def test_sglang_aliases_map_onto_the_engine_sizes():
    base = ["--colocate", "--rollout-num-gpus-per-engine", "4", "--num-experts", "8"]
    for flag in ("--sglang-ep-size", "--sglang-expert-parallel-size", "--sglang-ep"):
        assert Topology.from_flags(base + [flag, "2"]).rollout.engine_ep == 2
    for flag in ("--sglang-dp-size", "--sglang-data-parallel-size"):
        topo = Topology.from_flags(base + [flag, "2", "--sglang-enable-dp-attention"])
        assert topo.rollout.engine_dp == 2
    for flag in ("--sglang-pp-size", "--sglang-pipeline-parallel-size"):
        assert Topology.from_flags(base + [flag, "2"]).rollout.engine_pp == 2


def test_sglang_tp_is_overwritten_by_the_engine_size():
    base = ["--colocate", "--rollout-num-gpus-per-engine", "2"]
    topo = Topology.from_flags(base + ["--sglang-tp-size", "4"])
    assert codes(topo.warnings) == ["sglang-tp-overridden"]
    assert "each engine runs TP 2" in topo.warnings[0].message
    assert not Topology.from_flags(base + ["--sglang-tp-size", "2"]).warnings


def test_deepep_sets_engine_ep_to_engine_tp():
    base = ["--colocate", "--rollout-num-gpus-per-engine", "4", "--num-experts", "8",
            "--sglang-moe-a2a-backend", "deepep"]
    topo = Topology.from_flags(base + ["--sglang-ep-size", "2"])
    assert topo.rollout.engine_ep_used("miles") == 4
    assert codes(topo.warnings) == ["sglang-ep-overridden"]
    assert not Topology.from_flags(base).warnings
    e = refused(["--colocate", "--rollout-num-gpus-per-engine", "4", "--num-experts", "6",
                 "--sglang-moe-a2a-backend", "deepep"])
    assert codes(e.problems) == ["sglang-ep-invalid"]


# ---- weight transfer, eval, prefill/decode, --sglang-config, external engines ------------


DISAGG = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--num-gpus-per-node", "8",
          "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "4"]


def test_transfer_mode_rules():
    assert Topology.from_flags(DISAGG + ["--update-weight-transfer-mode", "p2p"])
    e = refused(["--colocate", "--update-weight-transfer-mode", "disk-delta"])
    assert codes(e.problems) == ["transfer-mode-invalid"]
    e = refused(["--colocate", "--update-weight-transfer-mode", "nccl"])
    assert codes(e.problems) == ["invalid-flag-value"] and "broadcast" in e.problems[0].message


def test_eval_engines_follow_the_rollout_engines():
    topo = Topology.from_flags(DISAGG + ["--eval-num-gpus", "4", "--eval-num-gpus-per-engine", "2"])
    # PG = 4 actor + 8 rollout + 4 eval; eval engines at positions 12, 14
    assert (
        topo.placement_group.rollout_engines == 2
        and topo.placement_group.engines == 4
        and topo.placement_group.nodes == 2
    )
    assert topo.engine_gpus(2) == ((1, 4), (1, 5)) and topo.engine_gpus(3) == ((1, 6), (1, 7))
    assert codes(refused(DISAGG + ["--eval-num-gpus", "5", "--eval-num-gpus-per-engine", "2"])
                 .problems) == ["eval-gpus-not-multiple-of-engine"]
    assert codes(refused(["--colocate", "--eval-num-gpus", "2"]).problems) == ["eval-gpus-invalid"]


def test_prefill_servers_need_a_decode_engine():
    topo = Topology.from_flags(DISAGG + ["--prefill-num-servers", "1"])
    assert [g.kind for g in topo.placement_group.groups] == ["prefill", "decode"]
    e = refused(DISAGG + ["--prefill-num-servers", "2"])
    assert codes(e.problems) == ["engine-groups-invalid"]


def test_sglang_config_groups_of_different_sizes(tmp_path):
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text(
        "sglang:\n"
        "  - name: actor\n"
        "    server_groups:\n"
        "      - {worker_type: prefill, num_gpus: 4, num_gpus_per_engine: 2}\n"
        "      - {worker_type: decode, num_gpus: 8, num_gpus_per_engine: 4}\n")
    argv = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--num-gpus-per-node",
            "8", "--sglang-config", str(cfg)]
    topo = Topology.from_flags(argv + ["--rollout-num-gpus", "12"])
    assert [topo.engine_gpus(e) for e in range(2)] == [((0, 4), (0, 5)), ((0, 6), (0, 7))]
    assert (
        topo.engine_gpus(2) == ((1, 0), (1, 1), (1, 2), (1, 3))
        and topo.placement_group.rollout_engines == 4
    )
    e = refused(argv + ["--rollout-num-gpus", "16"])
    assert codes(e.problems) == ["engine-groups-invalid"]
    assert "hold 12 GPUs" in e.problems[0].message
    missing = Topology.from_flags(argv[:-1] + [str(tmp_path / "absent.yaml"),
                                               "--rollout-num-gpus", "12"])
    assert codes(missing.warnings, "skipped") == ["engine-groups-unread"]


def test_sglang_config_eval_model_and_train_only(tmp_path):
    # sglang_config.py _compute_raw_sglang_config: with eval GPUs, exactly one model named
    # 'eval' holding them; nothing is checked when no engine starts (starts_inference_engines)
    def cfg(text):
        path = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(text)
        return str(path)

    two = cfg("sglang:\n"
              "  - name: actor\n    server_groups:\n"
              "      - {worker_type: regular, num_gpus: 8, num_gpus_per_engine: 4}\n"
              "  - name: judge\n    server_groups:\n"
              "      - {worker_type: regular, num_gpus: 4, num_gpus_per_engine: 4}\n")
    argv = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--num-gpus-per-node",
            "8", "--rollout-num-gpus", "8", "--eval-num-gpus", "4", "--eval-num-gpus-per-engine",
            "4", "--sglang-config"]
    e = refused(argv + [two])  # 12 == 8 + 4, but no model is named 'eval'
    (p,) = e.problems
    assert p.code == "engine-groups-invalid" and "no model is named 'eval'" in p.message
    named = cfg("sglang:\n"
                "  - name: actor\n    server_groups:\n"
                "      - {worker_type: regular, num_gpus: 8, num_gpus_per_engine: 4}\n"
                "  - name: eval\n    server_groups:\n"
                "      - {worker_type: regular, num_gpus: 4, num_gpus_per_engine: 4}\n")
    assert Topology.from_flags(argv + [named]).placement_group.engines == 3
    # --debug-train-only: rollout_num_gpus = 0; without eval GPUs the file is not read at all
    train_only = ["--debug-train-only", "--colocate", "--actor-num-gpus-per-node", "4"]
    topo = Topology.from_flags(train_only + ["--sglang-config", str(tmp_path / "absent.yaml")])
    assert not topo.warnings and topo.placement_group.rollout_engines == 0
    placed = Topology.from_flags(train_only + ["--sglang-config", two]).placement_group
    assert placed.rollout_engines == 0
    # ...with eval GPUs only the eval fleet starts: the groups must total the eval GPUs
    e = refused(["--debug-train-only", "--actor-num-gpus-per-node", "4", "--eval-num-gpus",
                 "4", "--eval-num-gpus-per-engine", "4", "--sglang-config", named])
    assert codes(e.problems) == ["engine-groups-invalid"]
    assert "= 0 + 4 = 4" in e.problems[0].message


def test_external_engine_addrs_take_every_value():
    read = read_flags(["--actor-num-gpus-per-node", "4", "--rollout-external-engine-addrs",
                       "h:1", "h:2", "--lr", "1"])
    assert (
        read.topology.rollout.external_addrs == ("h:1", "h:2")
        and read.topology.rollout.rollout_external
    )
    assert read.passthrough == ["--lr", "1"] and read.topology.placement_group.rollout_engines == 0


# ---- engines, batches ------------------------------------------------------------------


def test_engine_straddling_a_node_is_refused_but_mid_node_starts_are_not():
    six = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "6", "--num-gpus-per-node", "8",
           "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "4"]
    e = refused(six)
    assert codes(e.problems) == ["engine-straddles-nodes"]
    assert "engine 0 of 4 GPUs starts at node 0 GPU 6" in e.problems[0].message
    assert Topology.from_flags(DISAGG).engine_gpus(0) == ((0, 4), (0, 5), (0, 6), (0, 7))


def test_trimmed_samples_warn_and_a_short_rollout_errors():
    base = ["--colocate", "--rollout-batch-size", "6", "--n-samples-per-prompt", "2",
            "--global-batch-size", "8"]
    trimmed = Topology.from_flags(base)
    assert codes(trimmed.warnings) == ["rollout-batch-not-multiple-of-global-batch"]
    kept = Topology.from_flags(base + ["--disable-rollout-trim-samples"])
    assert codes(kept.warnings, "skipped") == ["rollout-batch-not-multiple-of-global-batch"]
    assert not Topology.from_flags(base + ["--disable-rollout-trim-samples",
                                           "--allow-partial-train-step"]).warnings


def test_steps_per_rollout_sets_the_global_batch():
    base = ["--colocate", "--rollout-batch-size", "8", "--n-samples-per-prompt", "4",
            "--num-steps-per-rollout", "2"]
    assert Topology.from_flags(base).batch.global_batch_size == 16
    assert codes(refused(base + ["--global-batch-size", "8"]).problems) == [
        "steps-per-rollout-conflict"]


def test_dynamic_global_batch_needs_dynamic_batch():
    e = refused(["--colocate", "--use-dynamic-global-batch-size", "--global-batch-size", "7"])
    assert codes(e.problems) == ["dynamic-global-batch-requires-dynamic-batch"]
    ok = Topology.from_flags(["--colocate", "--use-dynamic-global-batch-size",
                              "--global-batch-size", "7", "--use-dynamic-batch-size",
                              "--max-tokens-per-gpu", "4096"])
    assert ok.batch.dynamic_global_batch and not ok.warnings


def test_mtp_layers_and_rollout_only_shape():
    assert Topology.from_flags(["--colocate", "--mtp-num-layers", "1"]).model.mtp_layers == 1
    topo = Topology.from_flags(["--debug-rollout-only", "--rollout-num-gpus", "16"])
    assert (topo.layout.nodes, topo.layout.gpus_per_node) == (2, 8)  # miles_validate_args


# ---- typos and repeats (flags.py, used by `check` and the launcher alike) -----------------


def test_near_miss_and_short_alias_are_errors_with_did_you_mean():
    with pytest.raises(TopologyError) as e:
        Topology.from_flags(["--colocate", "--expert-model-paralel-size", "2", "-tp", "2"])
    typos = [p for p in e.value.problems if p.code == "unknown-flag"]
    assert [p.flags for p in typos] == [("--expert-model-paralel-size",), ("-tp",)]
    assert "did you mean --expert-model-parallel-size?" in typos[0].message
    assert "did you mean --tensor-model-parallel-size?" in typos[1].message
    assert e.value.summary["ep"] == 1  # not applied: the flag was not recognised
    # real miles flags far from the table are not flagged
    assert "unknown-flag" not in codes(Topology.from_flags(FSDP_R3).warnings)


def test_repeated_flag_with_two_values_is_reported_last_wins():
    topo = Topology.from_flags(["--colocate", "--expert-model-parallel-size", "2",
                                "--expert-model-parallel-size", "4", "--num-experts", "8",
                                "--lr", "1e-6", "--lr", "2e-6"])
    assert topo.layout.ep == 4
    rep = [w for w in topo.warnings if w.code == "flag-given-twice"]
    assert [w.flags for w in rep] == [("--expert-model-parallel-size",), ("--lr",)]
    assert "2 and then 4" in rep[0].message and "keeps the last, 4" in rep[0].message
    same = Topology.from_flags(["--colocate", "--lr", "1", "--lr", "1"])
    assert not same.warnings


def test_inferred_engine_groups_and_fsdp_sizes_round_trip_through_yaml(tmp_path):
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("sglang:\n  - name: actor\n    server_groups:\n"
                   "      - {worker_type: regular, num_gpus: 8, num_gpus_per_engine: 4}\n")
    for argv in (["--actor-num-gpus-per-node", "4", "--num-gpus-per-node", "8",
                  "--rollout-num-gpus", "8", "--sglang-config", str(cfg)],
                 None):
        topo = (Topology.from_flags(argv) if argv is not None else
                Topology(train_backend="fsdp", tp=2, colocate=True))
        path = tmp_path / "t.yaml"
        path.write_text(to_yaml(topo))
        again = Topology.from_yaml(str(path))
        assert again == topo and [w.code for w in again.warnings] == [
            w.code for w in topo.warnings]


# ---- audit against upstream (each verdict computed by hand from the cited code) ----------


def test_fewer_query_groups_than_tp_ranks_is_accepted():
    # megatron-core TransformerConfig.__post_init__: query groups a multiple OR a divisor of tp;
    # Qwen3-30B-A3B (32 heads, 4 KV groups) on tp 8: 8 % 4 == 0, each group replicated twice
    qwen = ["--colocate", "--tensor-model-parallel-size", "8", "--sequence-parallel",
            "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "4"]
    assert Topology.from_flags(qwen).layout.tp == 8
    # 3 groups on tp 2: 3 % 2 = 1 and 2 % 3 = 2, neither: ValueError in Megatron
    e = refused(["--colocate", "--tensor-model-parallel-size", "2", "--num-attention-heads", "6",
                 "--num-query-groups", "3"])
    assert codes(e.problems) == ["heads-not-divisible-by-tp"]
    assert "multiple or a divisor of tp" in e.problems[0].message


def test_virtual_pipeline_of_one_stage_needs_no_pp():
    # Megatron validate_args: virtual size 1 -> None, so pp = 1 is fine (no interleaving)
    base = ["--colocate", "--num-layers", "8"]
    one = Topology.from_flags(base + ["--num-virtual-stages-per-pipeline-rank", "1"])
    assert one.stages.chunks == 1
    # 8 layers / 8 per virtual stage = 1 chunk: also None
    assert Topology.from_flags(base + ["--num-layers-per-virtual-pipeline-stage", "8"])
    # 8 / 4 = 2 chunks with pp = 1: asserted (pp must be > 1)
    e = refused(base + ["--num-layers-per-virtual-pipeline-stage", "4"])
    assert codes(e.problems) == ["vpp-requires-pp"]
    # 8 % 3 != 0: asserted before the pp rule
    e = refused(base + ["--num-layers-per-virtual-pipeline-stage", "3"])
    assert codes(e.problems) == ["layers-not-divisible-by-pp"]
    # both spellings at once: "No more than one of the following arguments"
    e = refused(base + ["--pipeline-model-parallel-size", "2", "--actor-num-gpus-per-node", "8",
                        "--num-virtual-stages-per-pipeline-rank", "2",
                        "--num-layers-per-virtual-pipeline-stage", "2"])
    assert codes(e.problems) == ["vpp-requires-pp"]


def test_uneven_stage_without_layers_is_refused():
    # TransformerConfig: 4 layers, pp 3, first 2 + last 2 leaves the middle stage 0 layers
    # ("Mismatch: 0 middle layers remaining but 1 middle PP stages"); first 0 is "must be > 0"
    pp3 = ["--colocate", "--actor-num-gpus-per-node", "6", "--pipeline-model-parallel-size", "3",
           "--num-layers", "4"]
    e = refused(pp3 + ["--decoder-first-pipeline-num-layers", "2",
                       "--decoder-last-pipeline-num-layers", "2"])
    assert codes(e.problems) == ["layers-not-divisible-by-pp"]
    e = refused(pp3 + ["--decoder-first-pipeline-num-layers", "0"])
    assert codes(e.problems) == ["layers-not-divisible-by-pp"]
    assert Topology.from_flags(pp3 + ["--decoder-first-pipeline-num-layers", "2"]).stages.counts \
        == (2, 1, 1)
    # uneven stages with layers-per-virtual-stage: validate_args asserts the other spelling
    e = refused(["--colocate", "--pipeline-model-parallel-size", "2", "--num-layers", "8",
                 "--decoder-first-pipeline-num-layers", "2",
                 "--num-layers-per-virtual-pipeline-stage", "2"])
    assert "vpp-requires-pp" in codes(e.problems)


def test_eval_engines_default_to_one_gpu_each():
    # miles eval_num_gpus_per_engine defaults to 1, not --rollout-num-gpus-per-engine; 2 eval
    # GPUs with engines of 4 are two 1-GPU eval engines (2 % 1 == 0), at positions 12 and 13
    topo = Topology.from_flags(DISAGG + ["--eval-num-gpus", "2"])
    assert topo.placement_group.engines - topo.placement_group.rollout_engines == 2
    assert topo.engine_gpus(2) == ((1, 4),) and topo.engine_gpus(3) == ((1, 5),)


@pytest.mark.parametrize("backend", ["mooncake", "ascend_fuseep", "flashinfer", "mori"])
def test_every_a2a_backend_that_sets_ep_to_tp_warns(backend):
    # SGLang ServerArgs._handle_a2a_moe sets ep_size = tp_size for each of these backends
    topo = Topology.from_flags(["--colocate", "--rollout-num-gpus-per-engine", "4",
                                "--num-experts", "8", "--sglang-moe-a2a-backend", backend,
                                "--sglang-ep-size", "2"])
    assert topo.rollout.engine_ep_used("miles") == 4
    assert codes(topo.warnings) == ["sglang-ep-overridden"]
    plain = Topology.from_flags(["--colocate", "--rollout-num-gpus-per-engine", "4",
                                 "--num-experts", "8", "--sglang-moe-a2a-backend", "none",
                                 "--sglang-ep-size", "2"])
    assert plain.rollout.engine_ep_used("miles") == 2 and not plain.warnings


def test_fsdp_refuses_context_parallel():
    # miles parse_args_and_get_parser (FSDP branch): assert context_parallel_size == 1
    base = ["--train-backend", "fsdp", "--actor-num-gpus-per-node", "8", "--colocate"]
    e = refused(base + ["--context-parallel-size", "2"])
    assert codes(e.problems) == ["fsdp-cp-unsupported"]
    # slime removed that assertion (THUDM/slime 2235fa2) while it still had FSDP: a slime
    # fork's FSDP takes cp > 1
    slime = Topology(train_backend="fsdp", gpus_per_node=8, colocate=True, cp=2,
                     framework="slime")
    assert "fsdp-cp-unsupported" not in codes(slime.warnings)
    # validate_hybrid_shard_args: 8 % 4 == 0 -> two shards of four replicas is fine
    assert Topology.from_flags(base + ["--dp-replicate-size", "4"]).layout.dp_replicate == 4


def test_num_experts_zero_is_dense_and_ep_needs_experts():
    # Megatron-LM validate_args: num_experts == 0 -> None (a dense model), not a bad value
    topo = Topology.from_flags(["--colocate", "--num-layers", "4", "--num-experts", "0"])
    assert topo.model.experts is None and not topo.model.is_moe
    # ...and EP > 1 then asserts "num_experts must be non None to use expert model parallelism"
    e = refused(["--colocate", "--num-layers", "4", "--expert-model-parallel-size", "2"])
    assert codes(e.problems) == ["ep-requires-moe"]
    # no model flags at all: the shape may come from a model script, so nothing is claimed
    assert Topology.from_flags(["--colocate", "--expert-model-parallel-size", "2"]).layout.ep == 2


def test_rollout_only_switches_colocate_off():
    # miles_validate_args (debug_rollout_only): colocated with no --rollout-num-gpus, rollout
    # takes the actor's 2 x 8 = 16 GPUs; with --rollout-num-gpus 4 the actor shape becomes
    # min(8, 4) = 4 GPUs x 4 // 4 = 1 node; either way colocate ends up False
    topo = Topology.from_flags(["--debug-rollout-only", "--colocate", "--actor-num-nodes", "2"])
    assert (
        not topo.rollout.colocate
        and topo.placement_group.rollout_gpus == 16
        and topo.placement_group.bundles == 16
    )
    topo = Topology.from_flags(["--debug-rollout-only", "--colocate", "--rollout-num-gpus", "4"])
    assert (topo.layout.nodes, topo.layout.gpus_per_node, topo.placement_group.rollout_gpus) == (
        1,
        4,
        4,
    )
    assert "colocate-ignores-rollout-gpus" not in codes(topo.warnings)


def test_a_moe_layer_list_of_the_wrong_length_is_refused():
    # megatron-core gpt_layer_specs.py: len(moe_layer_pattern) == num_layers is asserted
    base = ["--actor-num-gpus-per-node", "8", "--colocate", "--num-experts", "64",
            "--num-layers", "48"]
    e = refused(base + ["--moe-layer-freq", "[0]*1+[1]*46"])
    assert codes(e.problems) == ["moe-layer-freq-length"]
    assert "lists 47 layers but --num-layers is 48" in e.problems[0].message
    ok = Topology.from_flags(base + ["--moe-layer-freq", "[0]*2+[1]*46"])
    assert sum(ok.model.moe_pattern) == 46
    every2 = Topology.from_flags(base + ["--moe-layer-freq", "2"])
    assert every2.model.moe_pattern[:2] == (True, False)
