"""The values the interpreter computes with: a word (`Field`) that is known, unknown (with
why and where), or an unknown number of words; variables; bash integer arithmetic and the
``${X#p}`` family over literal strings. Sizes are bounded so hostile input stays cheap."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ..model.errors import Location

MAX_VALUE = 1 << 20  # characters in one string value; longer becomes unknown
MAX_ITEMS = 1 << 17  # words in one array; more becomes an unknown number of words
MAX_SOURCE_DEPTH = 16  # files being sourced inside each other
PID = "\ue0f0"  # the value of $$: the same all through one run, known only when it runs
MAX_CALL_DEPTH = 32  # function calls (and eval / here-document scripts) inside each other


class Unk(NamedTuple):
    """Why a value cannot be known statically, and where that comes from."""

    expr: str
    src: Location
    why: str


class Field:
    """One word of an expansion. `extra`: unknown number of words; `cond`: maybe absent;
    `span`: (file, start, end, stmt_line, branch) of the one word that wrote it, or None.
    `bare`: the value of a variable the script never sets (only the environment may), alone
    and unquoted in its word (``${KEY}``): when it is empty at run time bash drops the word.
    `tail`: of an unknown value, the text known to end it (``$(dirname "$PY")/ray``: "/ray";
    ``$(command -v python3)``: "/python3"), "" when nothing is."""

    __slots__ = ("value", "src", "unk", "text", "extra", "cond", "span", "bare", "tail")

    def __init__(self, value, src, unk=None, text="", extra=False, cond=None, span=None,
                 bare=False, tail=""):
        self.value, self.src, self.unk, self.text = value, src, unk, text
        self.extra, self.cond, self.span, self.bare = extra, cond, span, bare
        self.tail = tail

    def base(self) -> str | None:
        """The last path component of the value when it is known (an unknown folder, a known
        file name: ``"${ROOT}/${ENTRY}"`` with ENTRY=train.py), else None."""
        if self.unk is None:
            return None if self.value is None else self.value.rstrip("/").rsplit("/", 1)[-1]
        return self.tail.rsplit("/", 1)[1] or None if "/" in self.tail else None


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
                          r"(<<=|>>=|\*\*|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&^|]=|"
                          r"[-+*/%()<>=!~&^|?:,]))")
INT_LIMIT = 2**63
_ASSIGN = frozenset(("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="))
_PREC = {op: level for level, ops in enumerate((  # loosest first; all left-associative
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="),
    ("<<", ">>"), ("+", "-"), ("*", "/", "%")), 1) for op in ops}
_TARGET = re.compile(r"([A-Za-z_]\w*)\s*(?:\+\+|--|(?:<<|>>|[-+*/%&^|])?=(?!=))|"
                     r"(?:\+\+|--)\s*([A-Za-z_]\w*)")


@lru_cache(maxsize=256)
def arith_targets(text: str) -> tuple[str, ...]:
    """The variables an arithmetic expression may assign (``x=``, ``x+=``, ``x++``, ``--x``)."""
    return tuple(dict.fromkeys(a or b for a, b in _TARGET.findall(text)))


# BASE#DIGITS (bash's arithmetic constants: `$((10#${STEP}))` reads "0009" as nine, where a
# leading 0 alone would make it octal); the digits may be a variable's value
_BASED = re.compile(r"\s*([0-9]+)#(?:([0-9A-Za-z]+)|\$\{?([A-Za-z_]\w*)\}?)")


def _based(m: re.Match) -> int | tuple:
    """The value of a BASE#DIGITS constant (bases 2 to 36), or a name token for 10#$NAME
    (the lookup reads a variable's digits in base 10)."""
    base, digits, name = int(m.group(1)), m.group(2), m.group(3)
    if not 2 <= base <= 36:
        raise ArithError(f"base {base} is not supported in arithmetic")
    if name is not None:
        if base != 10:
            raise ArithError(f"{base}#${name} is not supported in arithmetic")
        return ("name", name)
    try:
        return int(digits, base)
    except ValueError:
        raise ArithError(f"'{m.group().strip()}': value too great for base") from None


@lru_cache(maxsize=256)
def _tokens(text: str) -> tuple:
    toks: list = []
    pos = 0
    while pos < len(text):
        b = _BASED.match(text, pos)
        if b:
            toks.append(_based(b))
            pos = b.end()
            continue
        m = _ARITH_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ArithError(f"'{text[pos:].strip()[:20]}' is not supported in arithmetic")
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
    return tuple(toks)


def shown(text: str) -> str:
    """A value as the user wrote it: the shell's pid as ``$$``."""
    return text.replace(PID, "$$")


def arith(text: str, lookup, assign=None) -> int:
    """Evaluate a bash arithmetic expression over ints, as bash does; no eval. Operators:
    ``, = += -= *= /= %= <<= >>= &= ^= |= ?: || && | ^ & == != < > <= >= << >> + - * / %
    ** ! ~ ++ --`` and parentheses; variables by bare name through `lookup(name)`.
    `assign(name, value)` stores an assignment; without it an assignment is an ArithError.
    ``&&``, ``||`` and ``?:`` do not evaluate (look up, assign, divide in) the side not taken."""
    if PID in text:
        raise ArithError("$$ (the shell's process id) is only known when it runs")
    toks = _tokens(text.strip())
    if not toks:
        return 0
    ev = _Eval(toks, lookup, assign)
    v = ev.comma(0)
    if ev.k != len(toks):
        raise ArithError(f"unexpected '{toks[ev.k]}'")
    return v


def _check(v: int) -> int:
    if abs(v) >= INT_LIMIT:
        raise ArithError("the result overflows 64-bit integers")
    return v


_OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "&": int.__and__,
        "|": int.__or__, "^": int.__xor__, "==": lambda x, y: int(x == y),
        "!=": lambda x, y: int(x != y), "<": lambda x, y: int(x < y),
        ">": lambda x, y: int(x > y), "<=": lambda x, y: int(x <= y),
        ">=": lambda x, y: int(x >= y)}


class _Eval:
    """One evaluation: recursive descent over the tokens (a class, not closures, so that
    each evaluation leaves no reference cycles behind for the garbage collector)."""

    __slots__ = ("toks", "n", "k", "skip", "lookup", "assign")

    def __init__(self, toks: tuple, lookup, assign):
        self.toks, self.n, self.k, self.skip = toks, len(toks), 0, 0  # skip > 0: not taken
        self.lookup, self.assign = lookup, assign

    def peek(self, at=0):
        k = self.k + at
        return self.toks[k] if k < self.n else None

    def get(self, name: str) -> int:
        return 0 if self.skip else self.lookup(name)

    def put(self, name: str, v: int) -> int:
        if not self.skip:
            if self.assign is None:
                raise ArithError(f"assigning {name} in $((...)) is not followed")
            self.assign(name, _check(v))
        return v

    def binop(self, op: str, a: int, b: int) -> int:
        if op in ("/", "%"):
            if b == 0:
                if self.skip:
                    return 0
                raise ArithError("division by zero")
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if op == "/" else a - q * b
        if op in ("<<", ">>"):
            if not 0 <= b < 64:
                if self.skip:
                    return 0
                raise ArithError("shift count out of range")
            return _check(a << b) if op == "<<" else a >> b
        if op == "**":
            if not 0 <= b <= 64:
                if self.skip:
                    return 0
                raise ArithError("exponent out of range")
            return _check(a**b)
        return _check(_OPS[op](a, b))

    def comma(self, depth):
        v = self.assignment(depth)
        while self.peek() == ",":
            self.k += 1
            v = self.assignment(depth)
        return v

    def assignment(self, depth):
        if depth > 50:
            raise ArithError("nested too deeply")
        t = self.peek()
        if type(t) is tuple and self.peek(1) in _ASSIGN:
            op = self.toks[self.k + 1]
            self.k += 2
            r = self.assignment(depth + 1)
            if op != "=":
                r = self.binop(op[:-1], self.get(t[1]), r)
            return self.put(t[1], r)
        return self.ternary(depth)

    def ternary(self, depth):
        c = self.binary(1, depth)
        if self.peek() != "?":
            return c
        self.k += 1
        self.skip += not c
        a = self.comma(depth + 1)
        self.skip -= not c
        if self.peek() != ":":
            raise ArithError("'?' without ':'")
        self.k += 1
        self.skip += bool(c)
        b = self.ternary(depth + 1)
        self.skip -= bool(c)
        return a if c else b

    def binary(self, least, depth):  # precedence climbing over _PREC
        v = self.power(depth)
        while self.k < self.n:
            op = self.toks[self.k]
            level = _PREC.get(op) if type(op) is str else None
            if level is None or level < least:
                break
            self.k += 1
            if op in ("&&", "||"):
                short = (not v) if op == "&&" else bool(v)
                self.skip += short
                r = self.binary(level + 1, depth)
                self.skip -= short
                v = int(bool(v) or bool(r)) if op == "||" else int(bool(v) and bool(r))
            else:
                v = self.binop(op, v, self.binary(level + 1, depth))
        return v

    def power(self, depth):  # right-associative, below the unary operators: -2**2 is 4
        v = self.unary(depth)
        if self.peek() == "**":
            self.k += 1
            v = self.binop("**", v, self.power(depth + 1))
        return v

    def unary(self, depth):
        if depth > 50:
            raise ArithError("nested too deeply")
        t = self.peek()
        if t in ("++", "--") and type(self.peek(1)) is tuple:
            name = self.toks[self.k + 1][1]
            self.k += 2
            return self.put(name, _check(self.get(name) + (1 if t == "++" else -1)))
        if t in ("+", "-", "!", "~", "++", "--"):
            self.k += 1
            if t in ("++", "--"):  # not before a name: two signs
                return self.unary(depth + 1)
            v = self.unary(depth + 1)
            return _check(-v) if t == "-" else v if t == "+" else int(not v) if t == "!" \
                else ~v
        return self.postfix(depth)

    def postfix(self, depth):
        t = self.peek()
        self.k += 1
        if type(t) is int:
            return t
        if type(t) is tuple:
            if self.peek() in ("++", "--"):
                op = self.toks[self.k]
                self.k += 1
                v = self.get(t[1])
                self.put(t[1], _check(v + (1 if op == "++" else -1)))
                return v
            return self.get(t[1])
        if t == "(":
            v = self.comma(depth + 1)
            if self.peek() != ")":
                raise ArithError("missing ')'")
            self.k += 1
            return v
        raise ArithError("incomplete expression" if t is None else f"unexpected '{t}'")


def dirname(p: str) -> str:
    p2 = p.rstrip("/")
    if not p2:
        return "/" if p else "."
    if "/" not in p2:
        return "."
    return p2.rsplit("/", 1)[0].rstrip("/") or "/"


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


_SEQ = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?|([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?")


def brace(text: str, limit: int = MAX_ITEMS) -> list[str] | None:
    """Bash brace expansion of unquoted text: ``a{b,c}d``, ``{1..3}``, ``{01..10..2}``,
    ``{a..e}``, nested, left to right; a brace with neither ``,`` nor a sequence stays as
    written. None when it would give more than `limit` words."""
    out: list[str] = []
    todo = [(text, 0)]
    while todo:
        word, i = todo.pop()
        got = _brace_once(word, i)
        if got is None:
            out.append(word)
            if len(out) > limit:
                return None
            continue
        if len(got) > limit:
            return None
        todo.extend(reversed(got))
    return out


def _brace_once(text: str, i: int) -> list[tuple[str, int]] | None:
    """The words from the first expandable brace at or after `i` (with where to go on), or
    None when there is none."""
    while True:
        i = text.find("{", i)
        if i < 0:
            return None
        depth, commas, j = 0, [], -1
        for k in range(i, len(text)):
            c = text[k]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    j = k
                    break
            elif c == "," and depth == 1:
                commas.append(k)
        if j < 0:
            return None
        pre, body, post = text[:i], text[i + 1:j], text[j + 1:]
        if commas:
            alts, start = [], i + 1
            for c in [*commas, j]:
                alts.append(text[start:c])
                start = c + 1
            return [(pre + a + post, i) for a in alts]
        seq = _sequence(body)
        if seq is not None:
            return [(pre + v + post, i + len(v)) for v in seq]
        i += 1


def _sequence(body: str) -> list[str] | None:
    m = _SEQ.fullmatch(body)
    if m is None:
        return None
    a, b, step, ca, cb, cstep = m.groups()
    inc = abs(int(step or cstep or 1)) or 1
    if a is not None:
        x, y = int(a), int(b)
        if abs(y - x) // inc > MAX_ITEMS:
            return ["\0"] * (MAX_ITEMS + 1)  # more than followed: the caller gives up
        width = max(len(a), len(b)) if (a.lstrip("-")[:1] == "0" and len(a.lstrip("-")) > 1 or
                                        b.lstrip("-")[:1] == "0" and len(b.lstrip("-")) > 1) \
            else 0
        vals = range(x, y + 1, inc) if x <= y else range(x, y - 1, -inc)
        return [f"{v:0{width}d}" if width else str(v) for v in vals]
    x, y = ord(ca), ord(cb)
    vals = range(x, y + 1, inc) if x <= y else range(x, y - 1, -inc)
    return [chr(v) for v in vals]
