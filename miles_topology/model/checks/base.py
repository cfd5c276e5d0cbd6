"""What every rule shares: the problem makers, which take field names and quote each
field's flag (`model.flag_of`), `F` for quoting a flag inside a message, and the arithmetic
of suggestions (divisors near what the user gave, the next node count that fits)."""

from __future__ import annotations

from math import gcd, lcm

from ..errors import Problem
from ..parts import FIELDS, flag_of
from ..topology import Topology


class _Flags:
    """`F.tp` is the flag of field tp (--tensor-model-parallel-size): messages quote flags
    through the field table, never by hand, so a renamed flag is renamed everywhere."""

    def __getattr__(self, name: str) -> str:
        if name not in FIELDS:
            raise AttributeError(f"{name} is not a Topology field")
        return flag_of(name)


F = _Flags()


def _fw(topo: Topology) -> str:
    """The framework whose code the job runs (miles or slime), named in a message where both
    do the same (each rule cites the upstream lines of both)."""
    return topo.layout.framework


def builds_megatron(topo: Topology) -> bool:
    """Whether Megatron validates and builds this training grid and model, so its rules
    apply: the Megatron backend, except slime's --debug-rollout-only, which skips Megatron's
    validate_args (slime 624b824 utils/arguments.py:1637) and whose train actors return from
    init before any process group or model is made (backends/megatron_utils/actor.py:67).
    miles runs validate_args whatever the mode (31f1ca9 utils/arguments.py:2711)."""
    return topo.layout.train_backend == "megatron" and not (
        topo.layout.framework == "slime" and topo.rollout.rollout_only)


def _found(code: str, message: str, fix: str, *fields: str) -> Problem:
    """A rule's finding, at its code's severity (the record's, codes/)."""
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields))


def _skip(code: str, message: str, fix: str, *fields: str) -> Problem:
    """A rule that cannot be decided: a fact it needs is unknown (not a failure)."""
    return Problem(code, message, fix, tuple(flag_of(f) for f in fields), "skipped")


_SMALL = 1 << 16


def _divisors(n: int) -> list[int]:
    """Divisors of n for suggestions, in bounded time: every d <= 2^16 and its cofactor n // d
    (all of them when n <= 2^32), so a size like 10^30 answers at once."""
    small = [d for d in range(1, min(n, _SMALL) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})


def _nearest(candidates: list[int], target: int, k: int = 2) -> list[int]:
    """The k valid values closest to what the user gave, closest first."""
    return sorted(set(candidates), key=lambda c: (abs(c - target), -c))[:k]


def _or(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


def _node_fix(topo: Topology) -> str:
    """The next node count (same GPUs per node) at which both grids divide the world: nodes
    must be a multiple of lcm(dense, expert) / gcd(that, GPUs per node), found in O(1)."""
    need = lcm(topo.layout.dense_model_size, topo.layout.expert_model_size)
    step = need // gcd(need, topo.layout.gpus_per_node)
    nodes = (topo.layout.nodes // step + 1) * step
    if nodes > topo.layout.nodes * 64:  # none within 64x: the smallest count below, if any
        if step >= topo.layout.nodes:
            return ""
        nodes = step
    return f"{nodes} node{'s' if nodes > 1 else ''} of {topo.layout.gpus_per_node} GPUs"


def _with_nodes(fix: str, topo: Topology) -> str:
    nodes = _node_fix(topo)
    return f"{fix}, or {nodes} ({F.nodes})" if nodes else fix
