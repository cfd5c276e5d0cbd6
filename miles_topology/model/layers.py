"""Which decoder layers live on which pipeline stage, and which of them are MoE layers.

Megatron's layout: every pipeline rank holds `vpp` chunks; chunk v of every stage comes
before chunk v+1 of any stage, so chunk (pp_rank p, vpp_rank v) starts after
v * (layers of one chunk round) + the v-th chunks of stages 0..p-1.
"""

from __future__ import annotations

import re
from functools import lru_cache

_DEEPEST = 64  # parentheses and brackets inside each other
_LONGEST = 100_000  # list items; the list is built before the layer count is compared
_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


def parse_layer_freq(text: str) -> int | tuple[int, ...]:
    """Parse `--moe-layer-freq`: an int, or a list expression like `([0]*3+[1]*45)`.

    Scripts are untrusted, so this is a small parser for ints, list literals, `*` by an
    int, `+` and parentheses; it never evaluates Python.
    """
    tokens: list[str | int] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        tokens.append(int(m.group(1)) if m.group(1) is not None else m.group(2))
        pos = m.end()
    tokens = [t for t in tokens if not (isinstance(t, str) and t.isspace())]
    parser = _Parser(tokens, text)
    value = parser.expr()
    if parser.pos != len(tokens):
        raise ValueError(f"unexpected {tokens[parser.pos]!r} in moe_layer_freq {text!r}")
    if isinstance(value, list):
        if any(v not in (0, 1) for v in value):
            raise ValueError(f"moe_layer_freq list {text!r} may hold only 0 and 1")
        return tuple(value)
    if value < 1:
        raise ValueError(f"moe_layer_freq {value} must be >= 1")
    return value


class _Parser:
    def __init__(self, tokens: list, text: str):
        self.tokens, self.pos, self.text, self.depth = tokens, 0, text, 0

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, want=None):
        tok = self._peek()
        if tok is None or (want is not None and tok != want):
            raise ValueError(f"cannot read moe_layer_freq {self.text!r}: expected {want!r}")
        self.pos += 1
        return tok

    def expr(self):
        value = self.term()
        while self._peek() == "+":
            self._take("+")
            right = self.term()
            if not (isinstance(value, list) and isinstance(right, list)):
                if isinstance(value, int) and isinstance(right, int):
                    value = value + right
                    continue
                raise ValueError(f"cannot add a list and an int in {self.text!r}")
            value = value + right
        return value

    def term(self):
        value = self.atom()
        while self._peek() == "*":
            self._take("*")
            right = self.atom()
            if isinstance(value, list) and isinstance(right, list):
                raise ValueError(f"cannot multiply two lists in {self.text!r}")
            items = value if isinstance(value, list) else right
            times = right if isinstance(value, list) else value
            if isinstance(items, list) and len(items) * max(times, 0) > _LONGEST:
                raise ValueError(f"moe_layer_freq {self.text!r} is implausibly long")
            if isinstance(value, list) and isinstance(right, int):
                value = value * right
            elif isinstance(value, int) and isinstance(right, list):
                value = right * value
            elif isinstance(value, int) and isinstance(right, int):
                value = value * right
            else:
                raise ValueError(f"cannot multiply two lists in {self.text!r}")
            if isinstance(value, list) and len(value) > _LONGEST:
                raise ValueError(f"moe_layer_freq {self.text!r} is implausibly long")
        return value

    def atom(self):
        tok = self._peek()
        if isinstance(tok, int):
            self.pos += 1
            return tok
        if tok in ("(", "["):
            self.depth += 1
            if self.depth > _DEEPEST:  # recursive descent: bounded before Python's stack
                raise ValueError(f"moe_layer_freq {self.text[:40]!r}... nests deeper than "
                                 f"{_DEEPEST} levels")
        if tok == "(":
            self._take("(")
            value = self.expr()
            self._take(")")
            self.depth -= 1
            return value
        if tok == "[":
            self._take("[")
            items: list[int] = []
            while self._peek() != "]":
                item = self.expr()
                if not isinstance(item, int):
                    raise ValueError(f"nested lists are not allowed in {self.text!r}")
                items.append(item)
                if self._peek() == ",":
                    self._take(",")
            self._take("]")
            self.depth -= 1
            return items
        raise ValueError(f"cannot read moe_layer_freq {self.text!r}")


@lru_cache(maxsize=32)  # every Topology a fit tries holds the same pattern
def moe_pattern(num_layers: int, freq: int | tuple[int, ...]) -> tuple[bool, ...]:
    """Per decoder layer: is it an MoE layer (Megatron: layer i is MoE when i % freq == 0)."""
    if isinstance(freq, int):
        return tuple(i % freq == 0 for i in range(num_layers))
    return tuple(bool(x) for x in freq)


def stage_counts(
    num_layers: int, pp: int, first: int | None, last: int | None,
    pad: tuple[int, int] = (0, 0),
) -> tuple[int, ...] | None:
    """Layers per pipeline stage, or None when they cannot be split as given. `pad`: the
    embedding and the loss counted as a layer each (--account-for-*-in-pipeline-split):
    megatron-core get_num_layers_to_build splits layers + pad evenly and builds one fewer
    on the first (last) stage; TransformerConfig refuses it with uneven first/last stages."""
    if any(pad):
        if first is not None or last is not None:
            return None
        slots = num_layers + sum(pad)
        if slots % pp:
            return None
        counts = [slots // pp] * pp
        counts[0] -= pad[0]
        counts[-1] -= pad[1]
        return tuple(counts) if min(counts) >= 0 else None
    if pp == 1:
        return (num_layers,) if first is None and last is None else None
    head = [first] if first is not None else []
    tail = [last] if last is not None else []
    middle_stages = pp - len(head) - len(tail)
    middle_layers = num_layers - sum(head) - sum(tail)
    if middle_layers < 0 or (middle_stages == 0 and middle_layers != 0):
        return None
    if middle_stages == 0:
        return tuple(head + tail)
    if middle_layers % middle_stages:
        return None
    return tuple(head + [middle_layers // middle_stages] * middle_stages + tail)


def chunk_layers(counts: tuple[int, ...], vpp: int, pp_rank: int, vpp_rank: int,
                 pad: tuple[int, int] = (0, 0)) -> range:
    """Global layer ids of chunk (pp_rank, vpp_rank); each stage count divides by vpp.
    With `pad` (see stage_counts) the layers + pad slots are cut into pp x vpp equal chunks,
    virtual stage major (megatron-core get_transformer_layer_offset); slot 0 is the
    embedding, the last slot the loss."""
    if any(pad):
        layers = sum(counts)
        per = (layers + sum(pad)) // (len(counts) * vpp)
        start = (vpp_rank * len(counts) + pp_rank) * per
        lo = max(0, start - pad[0])
        return range(lo, min(layers, start + per - pad[0]))
    per_chunk = [c // vpp for c in counts]
    start = vpp_rank * sum(per_chunk) + sum(per_chunk[:pp_rank])
    return range(start, start + per_chunk[pp_rank])
