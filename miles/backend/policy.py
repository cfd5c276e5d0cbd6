"""The tiny seeded MoE policy that rollout engines and train ranks both run.

Every weight is a pure function of (seed, name), so a train rank builds only the shards it
owns without a download. Train ranks compute in float64 (megatron-core's router softmax in
float32). Engines, like SGLang's kernels, do not (engine.py): float32 weights and
activations, bf16 router logits, so near-tied router scores pick different experts on the
two sides. That is the cause R3 exists for: with the engine's routes replayed the
log-probs differ only by that rounding; without, the flipped experts make them differ by
far more.

Decoder layer l: h += tanh(causal_mean(h) @ mix_l)   (the only token mixing: an
attention stand-in whose prefix sums make SP/CP gathers real), then an MoE block
(router_l, experts w1_l[E, H, F], w2_l[E, F, H], top-k softmax) or, where
`moe_layer_freq` says dense, an FFN (d1_l, d2_l).
"""

from __future__ import annotations

import zlib

import torch

from .spec import Spec, dense_names, expert_names, shape

__all__ = ["DTYPE", "Spec", "checkpoint", "dense_names", "expert_names", "ffn", "mix", "route",
           "shape", "weight"]

DTYPE = torch.float64
# The router is "upcycled": each expert's column is one shared column plus a small spread,
# so the experts' scores sit close together and near-ties are common, as in MoE models
# upcycled from a dense one. The shared part makes the logits' bf16 rounding (relative to
# their size) comparable to the gaps between them. Measured on the default job (seeds 0, 1,
# 3 rollouts each), shared 0.1 / spread 0.003: without replay up to 16% of a rollout's
# routes flip (most rollouts have some); with replay the engine's bf16 logits leave
# |log-prob diff| <= 3e-2. Plain routers (scale 1, no shared part) flipped 0.3% of routes,
# none at all in some 3-rollout jobs; shared 0.3 doubled the replay noise.
ROUTER_SHARED, ROUTER_SPREAD = 0.1, 0.003


def weight(spec: Spec, name: str, seed: int) -> torch.Tensor:
    """The checkpoint value of one weight: seeded by name, independent of who asks."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    shp = shape(spec, name)
    fan_in = shp[-2] if len(shp) > 1 else 1
    if name.endswith("router"):  # upcycled: every expert's column near one shared column
        shared = torch.randn((shp[0], 1), generator=g, dtype=DTYPE)
        return shared * ROUTER_SHARED + torch.randn(shp, generator=g, dtype=DTYPE) * ROUTER_SPREAD
    scale = {"embed": 1.0, "pos": 0.5}.get(name.rsplit(".", 1)[-1], fan_in**-0.5)
    return torch.randn(shp, generator=g, dtype=DTYPE) * scale


def checkpoint(spec: Spec, seed: int) -> dict[str, torch.Tensor]:
    """Every weight of the model (what an engine loads before its first sync)."""
    names = dense_names(spec, tuple(range(spec.layers)))
    names += [n for layer in range(spec.layers) if spec.moe[layer] for n in expert_names(layer)]
    return {n: weight(spec, n, seed) for n in names}


def mix(mean: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The token mixer applied to the causal mean of the layer input."""
    return torch.tanh(mean @ w)


def ffn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert (or one ETP shard of it: relu is elementwise, so shards sum exactly)."""
    return torch.relu(x @ w1) @ w2


def route(logits: torch.Tensor, topk: int, replay=None) -> tuple[torch.Tensor, torch.Tensor]:
    """megatron-core top-k softmax routing; `replay` is a RouterReplay (record or replay)."""
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    return topk_routing_with_score_function(
        logits, topk, score_function="softmax", router_replay=replay
    )
