"""The values the interpreter computes with: a word (`Field`) that is known, unknown (with
why and where), or an unknown number of words; variables; bash integer arithmetic and the
``${X#p}`` family over literal strings. Sizes are bounded so hostile input stays cheap."""

from __future__ import annotations

import fnmatch
import re
from typing import NamedTuple

from .model import Source

MAX_VALUE = 1 << 20  # characters in one string value; longer becomes unknown
MAX_ITEMS = 1 << 17  # words in one array; more becomes an unknown number of words


class Unk(NamedTuple):
    """Why a value cannot be known statically, and where that comes from."""

    expr: str
    src: Source
    why: str


class Field:
    """One word of an expansion. `extra`: unknown number of words; `cond`: maybe absent;
    `span`: (file, start, end, stmt_line, branch) of the one word that wrote it, or None."""

    __slots__ = ("value", "src", "unk", "text", "extra", "cond", "span")

    def __init__(self, value, src, unk=None, text="", extra=False, cond=None, span=None):
        self.value, self.src, self.unk, self.text = value, src, unk, text
        self.extra, self.cond, self.span = extra, cond, span


class Var:
    """A variable: one field for a string (its source is the line of its last assignment),
    one per element for an array (each keeps the line it was written on)."""

    __slots__ = ("items", "array", "keys")

    def __init__(self, items: list[Field], array: bool, keys: list[str] | None = None):
        self.items, self.array, self.keys = items, array, keys  # keys: associative arrays


class ArithError(Exception):
    pass


OWN = object()  # marks text of the word being expanded (not an item passed on from a list)


_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|[0-9]+)|\$?\{?([A-Za-z_]\w*)\}?|"
                          r"(\*\*|[-+*/%()]))")
INT_LIMIT = 2**63


def arith(text: str, lookup) -> int:
    """Evaluate + - * / % ** and parentheses over ints, as bash does; no eval."""
    toks: list = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _ARITH_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ArithError(f"'{text[pos:].strip()[:20]}' is not supported in $((...))")
        pos = m.end()
        num, name, op = m.groups()
        if num is not None:
            try:
                toks.append(int(num, 16) if num[:2] in ("0x", "0X") else
                            int(num, 8) if len(num) > 1 and num[0] == "0" else int(num))
            except ValueError:
                raise ArithError(f"'{num}' is not a valid number") from None
        elif name is not None:
            toks.append(("name", name))
        else:
            toks.append(op)
    k = 0

    def peek():
        return toks[k] if k < len(toks) else None

    def check(v: int) -> int:
        if abs(v) >= INT_LIMIT:
            raise ArithError("the result overflows 64-bit integers")
        return v

    def expr(depth):
        nonlocal k
        v = term(depth)
        while peek() in ("+", "-"):
            op = toks[k]
            k += 1
            r = term(depth)
            v = check(v + r if op == "+" else v - r)
        return v

    def term(depth):
        nonlocal k
        v = unary(depth)
        while peek() in ("*", "/", "%"):
            op = toks[k]
            k += 1
            r = unary(depth)
            if op == "*":
                v = check(v * r)
            elif r == 0:
                raise ArithError("division by zero")
            else:
                q = abs(v) // abs(r) * (1 if (v >= 0) == (r >= 0) else -1)
                v = q if op == "/" else v - q * r
        return v

    def unary(depth):
        nonlocal k
        if depth > 50:
            raise ArithError("nested too deeply")
        if peek() in ("+", "-"):
            op = toks[k]
            k += 1
            v = unary(depth + 1)
            return -v if op == "-" else v
        v = atom(depth)
        if peek() == "**":
            k += 1
            r = unary(depth + 1)
            if r < 0 or r > 64:
                raise ArithError("exponent out of range")
            v = check(v**r)
        return v

    def atom(depth):
        nonlocal k
        t = peek()
        k += 1
        if type(t) is int:
            return t
        if type(t) is tuple:
            return lookup(t[1])
        if t == "(":
            v = expr(depth + 1)
            if peek() != ")":
                raise ArithError("missing ')'")
            k += 1
            return v
        raise ArithError("incomplete expression" if t is None else f"unexpected '{t}'")

    if not toks:
        return 0
    v = expr(0)
    if k != len(toks):
        raise ArithError(f"unexpected '{toks[k]}'")
    return v


def dirname(p: str) -> str:
    p2 = p.rstrip("/")
    if not p2:
        return "/" if p else "."
    if "/" not in p2:
        return "."
    return p2.rsplit("/", 1)[0].rstrip("/") or "/"


def glob_re(pattern: str) -> re.Pattern:
    return re.compile(fnmatch.translate(pattern).removesuffix(r"\Z").removeprefix("(?s:")
                      .removesuffix(")"), re.S)


def strip(value: str, pattern: str, op: str) -> str:
    """``${X#p}`` ``${X##p}`` ``${X%p}`` ``${X%%p}`` with glob patterns."""
    rng = range(len(value) + 1)
    if op in ("#", "##"):
        for k in (rng if op == "#" else reversed(rng)):
            if fnmatch.fnmatchcase(value[:k], pattern):
                return value[k:]
    else:
        for k in (reversed(rng) if op == "%" else rng):
            if fnmatch.fnmatchcase(value[k:], pattern):
                return value[:k]
    return value


_PRINTF_ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}


def printf(fmt: str, args: list[str]) -> str | None:
    """``printf FORMAT ARGS`` with %s, %d, %% and \\n-style escapes; the format repeats
    while arguments remain, as in bash. None for anything else."""
    specs = [x for x in re.findall(r"%[sd%]|%", fmt) if x != "%%"]
    if "%" in specs:
        return None
    fmt = re.sub(r"\\(.)", lambda m: _PRINTF_ESC.get(m.group(1), m.group(0)), fmt)
    pieces = re.split(r"(%[sd%])", fmt)
    out, k = [], 0
    while True:
        for piece in pieces:
            if piece == "%%":
                out.append("%")
            elif piece in ("%s", "%d"):
                v = args[k] if k < len(args) else ""
                k += 1
                if piece == "%d" and not re.fullmatch(r"\s*-?\d*\s*", v):
                    return None
                out.append(v.strip() or "0" if piece == "%d" else v)
            else:
                out.append(piece)
        if not specs or k >= len(args):
            return "".join(out)
