"""Whole-model parameter counts of dense models in upstream's style equal megatron-core's.

Each model file (tests/fixtures/models, bash MODEL_ARGS as upstream's scripts/models/*.sh)
and each flag combination the estimate reads (legacy RoPE, query groups with and without
--group-query-attention, learned positions, --attention-output-gate, --moe-shared-expert-gate)
is read by `plan`'s model reader and counted by memory.py; megatron-core 0.16's GPTModel is
built on the meta device (one process, tp = pp = 1, no memory, no network) from the same
shape and its parameters summed. The embedding / loss in the pipeline split is compared with
megatron-core's own get_num_layers_to_build and get_transformer_layer_offset.
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from miles_topology import Topology
from miles_topology.judging.memory import Shape, layout_of, train_memory
from miles_topology.judging.plan import read_model

MODELS = FIXTURES / "models"
# the published totals (Hugging Face model cards / safetensors index) as a second witness
PUBLISHED = {"qwen3-4B.sh": 4_022_468_096, "qwen3-8B.sh": 8_190_735_360,
             "qwen3-32B.sh": 32_762_123_264, "qwen2.5-7B.sh": 7_615_616_512,
             "llama3.1-8B.sh": 8_030_261_248}

SMALL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8",
         "--ffn-hidden-size", "128", "--vocab-size", "1000", "--swiglu",
         "--normalization", "RMSNorm", "--disable-bias-linear"]
COMBOS = {
    "mha: query groups without --group-query-attention":
        SMALL + ["--num-query-groups", "4", "--use-rotary-position-embeddings"],
    "gqa without --num-query-groups: one group":
        SMALL + ["--group-query-attention", "--position-embedding-type", "rope"],
    "learned absolute positions (Megatron's default)": SMALL + ["--seq-length", "96"],
    "legacy rope over a learned default":
        SMALL + ["--position-embedding-type", "learned_absolute",
                 "--use-rotary-position-embeddings"],
    "attention output gate": SMALL + ["--attention-output-gate", "--group-query-attention",
                                      "--num-query-groups", "2",
                                      "--use-rotary-position-embeddings"],
    "moe shared expert gate": SMALL + ["--num-experts", "4", "--moe-ffn-hidden-size", "32",
                                       "--moe-shared-expert-intermediate-size", "48",
                                       "--moe-shared-expert-gate", "--moe-router-topk", "2",
                                       "--use-rotary-position-embeddings",
                                       "--untie-embeddings-and-output-weights"],
    "moe without the gate": SMALL + ["--num-experts", "4", "--moe-ffn-hidden-size", "32",
                                     "--moe-shared-expert-intermediate-size", "48",
                                     "--use-rotary-position-embeddings"],
}


def estimate(shape: Shape, model: dict) -> int:
    topo = Topology(nodes=1, gpus_per_node=1, **model)
    return train_memory(shape, layout_of(topo)).stages[0].params.total


def build(shape: Shape, model: dict) -> int:
    """megatron-core GPTModel on the meta device, tp = pp = 1 (one gloo process)."""
    import os
    import tempfile

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_layer_local_spec,
    )
    from megatron.core.transformer import TransformerConfig

    moe = bool(model.get("experts"))
    kw = dict(
        num_layers=model["layers"], hidden_size=shape.hidden,
        num_attention_heads=model["heads"], num_query_groups=shape.groups,
        ffn_hidden_size=shape.ffn_size(), kv_channels=shape.kv_channels,
        gated_linear_unit=shape.swiglu, activation_func=F.silu if shape.swiglu else F.gelu,
        normalization="RMSNorm" if shape.rms else "LayerNorm", add_bias_linear=shape.bias,
        add_qkv_bias=shape.qkv_bias, qk_layernorm=shape.qk_norm,
        attention_output_gate=shape.output_gate, use_cpu_initialization=True,
        perform_initialization=False, pipeline_dtype=torch.float32)
    if moe:
        kw.update(num_moe_experts=model["experts"], moe_ffn_hidden_size=shape.moe_ffn,
                  moe_router_topk=model.get("topk", 2),
                  moe_shared_expert_intermediate_size=shape.shared_ffn or None,
                  moe_shared_expert_gate=shape.shared_gate)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0,
                                world_size=1)
        try:
            ps.initialize_model_parallel(create_gloo_process_groups=False)
            config = TransformerConfig(**kw)
            spec = (get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                               normalization=config.normalization) if moe else
                    get_gpt_layer_local_spec(qk_layernorm=shape.qk_norm,
                                             normalization=config.normalization))
            with torch.device("meta"):
                gpt = GPTModel(
                    config=config, transformer_layer_spec=spec,
                    vocab_size=shape.padded_vocab(1),
                    max_sequence_length=shape.learned_pos or 4096,
                    share_embeddings_and_output_weights=shape.tied,
                    position_embedding_type="learned_absolute" if shape.learned_pos
                    else "rope")
            return sum(p.numel() for p in gpt.parameters())
        finally:
            ps.destroy_model_parallel()
            dist.destroy_process_group()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_dense_model_files_equal_megatron_core(name):
    shape, model = read_model([str(MODELS / name)], None)
    assert shape.learned_pos == 0  # --use-rotary-position-embeddings: rope
    ours = estimate(shape, model)
    assert ours == build(shape, model) == PUBLISHED[name]


@pytest.mark.parametrize("what", sorted(COMBOS))
def test_flag_combinations_equal_megatron_core(what):
    shape, model = read_model([], COMBOS[what])
    assert estimate(shape, model) == build(shape, model)


def test_the_combinations_change_the_count():
    """Each flag the estimate reads changes the count (so the comparison above can fail)."""
    def count(argv):
        return estimate(*read_model([], argv))

    mha = count(COMBOS["mha: query groups without --group-query-attention"])
    gqa = count(SMALL + ["--num-query-groups", "4", "--group-query-attention",
                         "--use-rotary-position-embeddings"])
    one = count(COMBOS["gqa without --num-query-groups: one group"])
    assert mha > gqa > one
    assert count(COMBOS["learned absolute positions (Megatron's default)"]) == \
        count(SMALL + ["--use-rotary-position-embeddings"]) + 96 * 64
    assert count(COMBOS["moe shared expert gate"]) - count(
        COMBOS["moe without the gate"] + ["--untie-embeddings-and-output-weights"]) == 2 * 64


@pytest.mark.parametrize("layers, pp, vpp, pad", [
    (30, 4, None, (1, 1)), (31, 4, None, (1, 0)), (31, 4, None, (0, 1)), (14, 2, 2, (1, 1)),
    (6, 2, 2, (1, 1)), (7, 4, None, (1, 0)),
])
def test_embedding_and_loss_in_the_pipeline_split_as_megatron_core(layers, pp, vpp, pad):
    import torch
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    config = TransformerConfig(
        num_layers=layers, hidden_size=8, num_attention_heads=1,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
        account_for_embedding_in_pipeline_split=bool(pad[0]),
        account_for_loss_in_pipeline_split=bool(pad[1]), pipeline_dtype=torch.float32)
    topo = Topology(nodes=1, gpus_per_node=pp, pp=pp, vpp=vpp, layers=layers, heads=1,
                    embedding_in_split=bool(pad[0]), loss_in_split=bool(pad[1]))
    for p in range(pp):
        for v in range(vpp or 1):
            vp = v if vpp else None
            n = get_num_layers_to_build(config, vp_stage=vp, pp_rank=p)
            first = get_transformer_layer_offset(config, vp_stage=vp, pp_rank=p)
            assert topo.stage_layers(p, v) == tuple(range(first, first + n)), (p, v)
