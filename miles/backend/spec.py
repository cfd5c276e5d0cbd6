"""The policy's shape and weight names: pure Python, shared by train ranks and engines
(an engine process imports no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm

from miles_topology import Topology

from .task import VOCAB


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
        return cls(
            topo.model.layers,
            topo.model.experts,
            topo.model.topk,
            topo.model.moe_pattern,
            ffn=lcm(16, topo.layout.etp),
        )

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
