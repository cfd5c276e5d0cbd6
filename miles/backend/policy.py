"""The tiny seeded MoE policy that rollout engines and train ranks both run.

Every weight is a pure function of (seed, name), so a train rank builds only the shards it
owns and an engine starts from the same "checkpoint" without a download. Both sides call
the float64 functions below, so with identical weights and routes their log-probs agree to
rounding; any difference beyond that is a bug in ownership, replay or weight sync.

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
    scale = {"embed": 1.0, "pos": 0.5, "router": 1.0}.get(name.rsplit(".", 1)[-1], fan_in**-0.5)
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
