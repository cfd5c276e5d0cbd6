"""The rules a topology must satisfy, by concern: small named checks, each yielding its
problems.

Every rule reads derived sizes from the Topology (never recomputes them), states the
arithmetic, the rule, and a fix with concrete values that pass. Each declares the codes it
reports, their kind and the upstream code it follows in its `@rule(...)` decorator
(codes.py builds the registry from them); messages name fields and quote their flags
through the field table (`F.tp`, `flag_of`). Importing this package registers the rules
with `codes.RULES`, which the model runs on every construction.

    train_grid   Megatron's dense and expert grids, pipeline groups, TP within a node
    model_shape  experts, heads, layers and the virtual pipeline against the grid
    engines      rollout engines, SGLang sizes, the placement group, eval, --sglang-config
    batch        routing replay and the batch sizes
    fsdp         the FSDP2 mesh and the PPO critic
"""

from __future__ import annotations

from ..codes import RULES, run_rules
from . import batch, engines, fsdp, model_shape, train_grid
from .base import _divisors
from .fsdp import MEGATRON_ONLY_FLAGS, fsdp_undefined_flags

# The order rules run and report in: the grid, then the model shape on it, the engines, the
# batch, then what miles overwrites or FSDP changes (a rule missing here fails at import).
ORDER = (
    "dense_grid_divides", "expert_grid_divides", "pipeline_groups_agree",
    "experts_by_ep", "moe_pattern_length", "heads_by_tp", "layers_by_pp", "vpp_needs_pp",
    "moe_needs_sp",
    "whole_engines", "sglang_dp", "sglang_ep", "sglang_overridden", "fits_cluster",
    "replay_prerequisites", "batch_sizes",
    "etp_stated", "rollout_gpus_given", "groups_within_nodes",
    "critic", "fsdp_mesh",
    "weight_transfer", "eval_engines", "sglang_config_groups",
)
RULES.sort(key=lambda fn: ORDER.index(fn.__name__))
run_checks = run_rules

__all__ = ["MEGATRON_ONLY_FLAGS", "ORDER", "_divisors", "batch", "engines", "fsdp",
           "fsdp_undefined_flags", "model_shape", "run_checks", "train_grid"]
