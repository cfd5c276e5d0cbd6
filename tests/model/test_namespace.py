"""`Topology.from_namespace`: miles' parsed (and already validated) arguments -> Topology."""

from argparse import Namespace

import pytest

from miles_topology import Topology, TopologyError
from miles_topology.model.topology import summary


def miles_args(**over):
    """A namespace as miles has it after parse_args + miles_validate_args + SGLang's
    validate_args: every flag present (defaults included), some rewritten by validation."""
    args = dict(
        # miles cluster arguments
        actor_num_nodes=1, actor_num_gpus_per_node=4, critic_num_nodes=None,
        critic_num_gpus_per_node=None, rollout_num_gpus=12, rollout_num_gpus_per_engine=4,
        num_gpus_per_node=8, colocate=False, rollout_external=False,
        rollout_external_engine_addrs=None, debug_train_only=False, debug_rollout_only=False,
        eval_num_gpus=0, eval_num_gpus_per_engine=1, prefill_num_servers=None,
        sglang_config=None, update_weight_transfer_mode="broadcast",
        advantage_estimator="grpo", use_critic=False, train_backend="megatron",
        # Megatron (validate_args fills expert_tensor_parallel_size and the vpp size)
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None, num_layers_per_virtual_pipeline_stage=None,
        num_virtual_stages_per_pipeline_rank=None, decoder_first_pipeline_num_layers=None,
        decoder_last_pipeline_num_layers=None, context_parallel_size=1,
        expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
        use_tp_pp_dp_mapping=False, num_layers=4, num_attention_heads=4, num_query_groups=None,
        num_experts=8, moe_router_topk=2, moe_layer_freq=[1, 1, 1, 1], moe_router_fusion=False,
        mtp_num_layers=None,
        # SGLang, forwarded with the prefix; validate_args copies the long names
        sglang_tp_size=4, sglang_data_parallel_size=1, sglang_dp_size=1,
        sglang_expert_parallel_size=1, sglang_ep_size=1, sglang_pipeline_parallel_size=1,
        sglang_pp_size=1, sglang_enable_dp_attention=False, sglang_moe_a2a_backend="none",
        # replay and batch
        use_routing_replay=True, use_rollout_routing_replay=True, rollout_batch_size=8,
        n_samples_per_prompt=4, global_batch_size=32, micro_batch_size=1,
        use_dynamic_batch_size=False, max_tokens_per_gpu=None, num_steps_per_rollout=None,
        use_dynamic_global_batch_size=False, allow_partial_train_step=False,
        disable_rollout_trim_samples=False,
        # and everything else miles has, which the Topology ignores
        lr=1e-6, hf_checkpoint="/m", seed=1234,
    )
    args.update(over)
    return Namespace(**args)


def test_the_validated_namespace_gives_the_job_that_runs():
    topo = Topology.from_namespace(miles_args())
    assert (topo.world_size, topo.placement_group.rollout_engines, topo.placement_group.nodes) == (
        4,
        3,
        2,
    )
    assert topo.engine_gpus(0) == ((0, 4), (0, 5), (0, 6), (0, 7))  # shape (a)
    assert topo.model.moe_layer_freq == (1, 1, 1, 1) and topo.replay.rollout_routing_replay
    same = Topology.from_flags([
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "12",
        "--rollout-num-gpus-per-engine", "4", "--num-layers", "4", "--num-attention-heads", "4",
        "--num-experts", "8", "--moe-layer-freq", "[1,1,1,1]", "--use-rollout-routing-replay",
        "--rollout-batch-size", "8", "--n-samples-per-prompt", "4", "--global-batch-size", "32",
        "--advantage-estimator", "grpo", "--update-weight-transfer-mode", "broadcast",
        "--expert-tensor-parallel-size", "1", "--sglang-tp-size", "4",
        "--sglang-moe-a2a-backend", "none", "--eval-num-gpus-per-engine", "1"])
    assert topo.engine_gpus(2) == same.engine_gpus(2) and summary(topo) == summary(same)
    assert not topo.warnings


def test_values_miles_rewrote_raise_no_warning():
    # --colocate: miles set rollout_num_gpus to the actor's; PPO: critic sizes = actor's
    topo = Topology.from_namespace(miles_args(
        colocate=True, rollout_num_gpus=4, advantage_estimator="ppo", use_critic=True,
        critic_num_nodes=1, critic_num_gpus_per_node=4, num_gpus_per_node=4))
    assert topo.layout.use_critic and topo.rollout.colocate and not topo.warnings


def test_megatron_vpp_and_mapping_names_are_read():
    topo = Topology.from_namespace(miles_args(
        actor_num_gpus_per_node=8, pipeline_model_parallel_size=2,
        virtual_pipeline_model_parallel_size=2, use_tp_pp_dp_mapping=True, rollout_num_gpus=8,
        num_layers=8, moe_layer_freq=1))
    assert topo.stages.chunks == 2 and topo.layout.order == "tp-cp-ep-pp-dp"


def test_a_broken_job_raises_every_problem():
    with pytest.raises(TopologyError) as info:
        Topology.from_namespace(miles_args(
            sglang_data_parallel_size=2, sglang_dp_size=2, expert_model_parallel_size=3))
    assert {"sglang-dp-invalid", "expert-grid-divisibility"} <= set(info.value.codes)


def test_nodes_of_four_with_the_default_eight_warn_as_from_flags():
    # engines of 8 on nodes of (at least) 4: miles sizes their processes for nodes of 8
    topo = Topology.from_namespace(miles_args(actor_num_nodes=2, colocate=True,
                                              rollout_num_gpus=8, rollout_num_gpus_per_engine=8,
                                              sglang_tp_size=8))
    assert [w.code for w in topo.warnings] == ["num-gpus-per-node-default"]
    # engines of 4 fit a node of 4: the default changes nothing
    fits = Topology.from_namespace(miles_args(actor_num_nodes=2, colocate=True,
                                              rollout_num_gpus=8))
    assert not fits.warnings
