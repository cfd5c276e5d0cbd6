"""The tiny seeded MoE policy that rollout engines and train ranks both run.

Every weight is a pure function of (seed, name), so a train rank builds only the shards it
owns without a download. Train ranks compute in float64 (megatron-core's router softmax in
float32). Engines, like SGLang's kernels, do not: they keep float32 weights and activations
and round router logits and mixing weights to bfloat16 (`engine_numerics`), so near-tied
router scores pick different experts on the two sides. That is the cause R3 exists for:
with the engine's routes replayed the log-probs differ only by that rounding; without,
the flipped experts make them differ by far more.

Decoder layer l: h += tanh(causal_mean(h) @ mix_l)   (the only token mixing: an
attention stand-in whose prefix sums make SP/CP gathers real), then an MoE block
(router_l, experts w1_l[E, H, F], w2_l[E, F, H], top-k softmax) or, where
`moe_layer_freq` says dense, an FFN (d1_l, d2_l).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from math import lcm

import torch

from miles_topology import Topology

from .task import VOCAB

DTYPE = torch.float64
# The router is "upcycled": each expert's column is one shared column plus a small spread,
# so the experts' scores sit close together and near-ties are common, as in MoE models
# upcycled from a dense one. The shared part makes the logits' bf16 rounding (relative to
# their size) comparable to the gaps between them. Measured on the default job (seeds 0, 1,
# 3 rollouts each), scale 0.1 / spread 0.003: without replay 0.8-16% of routes flip in every
# rollout; with replay the engine's bf16 mixing weights alone leave |log-prob diff| <= 2.5e-2
# (spread 0.01: same picture; shared 0.3: noise up to 5e-2).
ROUTER_SHARED, ROUTER_SPREAD = 0.1, 0.003


@dataclass(frozen=True)
class Spec:
    """Model shape; layers, experts and top-k come from the Topology."""

    layers: int
    experts: int
    topk: int
    moe: tuple[bool, ...]
    hidden: int = 16
    ffn: int = 16
    max_len: int = 32

    @classmethod
    def of(cls, topo: Topology) -> Spec:
        # F must split over ETP ranks; lcm keeps the default model the same for etp | 16.
        return cls(topo.layers, topo.experts, topo.topk, topo.moe_pattern, ffn=lcm(16, topo.etp))

    @property
    def last(self) -> int:
        return self.layers - 1


def dense_names(spec: Spec, layers: tuple[int, ...]) -> list[str]:
    """Non-expert weights that live with `layers` (embedding with layer 0, head with the last)."""
    out = ["embed", "pos"] if 0 in layers else []
    for layer in layers:
        out.append(f"{layer}.mix")
        out += [f"{layer}.router"] if spec.moe[layer] else [f"{layer}.d1", f"{layer}.d2"]
    if spec.last in layers:
        out.append("head")
    return out


def expert_names(layer: int) -> tuple[str, str]:
    return f"{layer}.w1", f"{layer}.w2"


def shape(spec: Spec, name: str) -> tuple[int, ...]:
    h, f, e = spec.hidden, spec.ffn, spec.experts
    kind = name.rsplit(".", 1)[-1]
    return {
        "embed": (VOCAB, h), "pos": (spec.max_len, h), "head": (h, VOCAB), "mix": (h, h),
        "router": (h, e), "d1": (h, f), "d2": (f, h), "w1": (e, h, f), "w2": (e, f, h),
    }[kind]


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


def f32(x: torch.Tensor) -> torch.Tensor:
    """Round to float32, as a float32 kernel leaves its output (kept in float64 storage)."""
    return x.to(torch.float32).to(DTYPE)


def bf16(x: torch.Tensor) -> torch.Tensor:
    """Round to bfloat16 (round-to-nearest-even on the mantissa), as a bf16 GEMM output."""
    return x.to(torch.float32).to(torch.bfloat16).to(DTYPE)


def engine_route(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's routing kernel: top-k of the router GEMM's bf16 output, softmax over the
    k in float32 (mixing weights). Returns (ids [n, topk], weights [n, topk])."""
    scores, ids = torch.topk(bf16(logits), topk, dim=1)
    return ids, torch.softmax(scores.to(torch.float32), dim=-1).to(DTYPE)


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
