"""The rules a topology must satisfy, by concern: small named checks, each yielding its
problems.

Every rule reads derived sizes from the Topology (never recomputes them), states the
arithmetic, the rule, and a fix with concrete values that pass. Each declares the codes it
reports, their kind and the upstream code it follows in its `@rule(...)` decorator
(codes/ builds the registry from them); messages name fields and quote their flags
through the field table (`F.tp`, `flag_of`). Importing this package registers the rules
with `codes.RULES`, which the model runs on every construction.

    train_grid   Megatron's dense and expert grids and their pipeline groups
    model_shape  experts, heads, layers and the virtual pipeline against the grid
    engines      rollout engines, SGLang sizes, the placement group against the cluster
    batch        routing replay and the batch sizes
    overridden   what the stack sets silently: implied etp, colocated GPUs, TP across nodes
    fsdp         the FSDP2 mesh and the PPO critic
    fleet        weight transfer, eval engines, --sglang-config groups
"""

from __future__ import annotations

# The order rules run and report in is the order they register: Megatron's grids, the model
# shape on them, the engines, the batch, what the stack overrides, FSDP and the critic, then
# the engine fleet beyond the rollout engines.
# isort: off
from . import train_grid, model_shape, engines, batch, overridden, fsdp, fleet
# isort: on
from .base import _divisors
from .fsdp import MEGATRON_ONLY_FLAGS, backend_refused, fsdp_undefined_flags

__all__ = ["MEGATRON_ONLY_FLAGS", "_divisors", "backend_refused", "batch", "engines", "fleet",
           "fsdp", "fsdp_undefined_flags", "model_shape", "overridden", "train_grid"]
