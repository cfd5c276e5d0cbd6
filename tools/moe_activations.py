"""Bytes megatron-core's MoE layer keeps for its backward, measured on the CPU.

Builds megatron-core's MoELayer (the local spec's SequentialMLP, SwiGLU, the fused weighted
SwiGLU that applies the routing probabilities, allgather dispatcher: alltoall asks for CUDA
streams) in a gloo world of one and counts, with `torch.autograd.graph.saved_tensors_hooks`,
the distinct storages its forward saves for the backward, parameters and its input aside
(Table 2's 18 sbh counts a layer's MLP input). Prints one JSON line: the bytes a token, and
`per_h` (over the hidden size), which `memory.mlp_ratio` models.

    python tools/moe_activations.py TOKENS HIDDEN MOE_FFN EXPERTS TOPK

Needs the training stack (torch, megatron-core 0.16: the `train` extra).
"""

from __future__ import annotations

import json
import os
import sys


def measure(tokens: int, hidden: int, ffn: int, experts: int, topk: int) -> dict:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    # megatron-core's router moves its weight to torch.cuda.current_device(); this is the CPU
    torch.cuda.current_device = lambda: "cpu"
    import megatron.core.transformer.moe.moe_utils as moe_utils
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not hasattr(moe_utils, "te_general_gemm"):  # 0.16 without TransformerEngine
        moe_utils.te_general_gemm = None
    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(0)
    cfg = TransformerConfig(
        num_layers=1, hidden_size=hidden, num_attention_heads=4, ffn_hidden_size=4 * hidden,
        num_moe_experts=experts, moe_router_topk=topk, moe_ffn_hidden_size=ffn,
        moe_token_dispatcher_type="allgather", gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, bias_activation_fusion=True,
        add_bias_linear=False, use_cpu_initialization=True, params_dtype=torch.bfloat16,
        bf16=True, moe_grouped_gemm=False, moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0)
    spec = get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False)
    layer = MoELayer(cfg, spec.submodules.mlp.submodules).to(torch.bfloat16)
    x = torch.randn(tokens, 1, hidden, dtype=torch.bfloat16, requires_grad=True)
    skip = {q.untyped_storage().data_ptr() for q in layer.parameters()}
    skip.add(x.untyped_storage().data_ptr())
    kept: dict[int, int] = {}

    def pack(t):  # noqa: ANN001, ANN202
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            kept[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    per_token = sum(kept.values()) / tokens
    dist.destroy_process_group()
    return {"tokens": tokens, "hidden": hidden, "moe_ffn": ffn, "experts": experts,
            "topk": topk, "bytes_per_token": per_token, "per_h": per_token / hidden}


if __name__ == "__main__":
    if len(sys.argv) != 6:
        print(__doc__)
        sys.exit(2)
    print(json.dumps(measure(*(int(a) for a in sys.argv[1:]))))
