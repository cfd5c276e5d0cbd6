"""Read what a bash launch script really passes to the training entry point, statically.

The script is parsed (see ``bash.py``) and interpreted over a model of bash that knows
only literal values: variables, arrays, ``${X:-default}`` and friends, integer
arithmetic, ``source`` of model files, and the ``dirname``/``cd && pwd`` idioms that
locate them. Anything decided at run time (other command substitutions, branches on
unknown conditions, positional arguments, unset variables) is reported as unresolved
with the expression and its file:line, never guessed. Only the ``env`` passed in is used
to resolve variables; the process environment is never read, so a check is reproducible.
"""

from __future__ import annotations

import bisect
import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from miles_topology import bash
from miles_topology.bash import Arith, Lit, Param, Sub
from miles_topology.flags import is_switch

__all__ = ["FlagValue", "LaunchSite", "Note", "ScriptRead", "ScriptReadError", "Source", "Span",
           "Unresolved", "is_switch", "read_script"]

MAX_SOURCE_DEPTH = 16
MAX_CALL_DEPTH = 32


class ScriptReadError(Exception):
    """The script cannot be read or bash would reject its syntax (the CLI exits 2)."""


@dataclass(frozen=True)
class Source:
    """A file as the user named it (sourced files relative to the script's folder) and a
    1-based line; values given by ``env`` have path ``<env>`` and line 0."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Span:
    """The exact text a word occupies, so a rewrite can edit that word and nothing else.

    `file` is absolute; `start`/`end` are character offsets into its text; `line` and
    `end_line` are 1-based, `col` and `end_col` 0-based. `stmt_line` is the line where the
    command or assignment holding the word starts, and `branch` the if/case/loop/&& it runs
    under (None at the top level), because moving a word out of a branch changes its meaning.
    """

    file: str
    start: int
    end: int
    line: int
    col: int
    end_line: int
    end_col: int
    stmt_line: int = 0
    branch: Source | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.file, self.start, self.end)


@dataclass(frozen=True)
class FlagValue:
    """One flag after the entry script; `value` is "" for a switch, None when unknown.

    `tokens` holds the value words as they reach argv (several for ``nargs='+'`` flags,
    none for a switch); `value` is them joined by spaces. `span` is where the flag word is
    written (the whole word for ``--flag=value``) and `value_spans` where each value word is;
    None where a word cannot be pinned to text of its own (for example one of several flags
    held in one string variable, or the output of a command substitution).
    """

    flag: str
    value: str | None
    source: Source
    unresolved: str | None = None
    tokens: tuple[str, ...] = field(default=(), compare=False, repr=False)
    span: Span | None = field(default=None, compare=False, repr=False)
    value_spans: tuple[Span | None, ...] = field(default=(), compare=False, repr=False)
    joined: bool = field(default=False, compare=False, repr=False)  # written --flag=value


@dataclass(frozen=True)
class LaunchSite:
    """Where the launch command is and what the shell holds when it runs.

    `statement` marks where the command starts and `entry` the entry script word
    (``train.py``), both None when not pinned to the file's text; `variables` are the string
    variables at the launch (None: known only at run time) and `exported` the names a child
    process sees, which is what a topology YAML's ``${oc.env:VAR}`` reads.
    """

    statement: Span | None
    entry: Span | None
    branch: Source | None
    variables: Mapping[str, str | None]
    exported: frozenset[str]
    command: Source | None = None  # as in `ScriptRead.uses`

    def environ(self) -> dict[str, str]:
        """The environment the launched process gets, as far as it is known."""
        return {k: v for k, v in self.variables.items() if k in self.exported and v is not None}


@dataclass(frozen=True)
class Unresolved:
    flag: str | None
    expression: str
    source: Source
    why: str


@dataclass(frozen=True)
class Note:
    code: str
    message: str
    fix: str
    source: Source


@dataclass
class ScriptRead:
    path: str
    launcher: str | None
    entry: str | None
    argv: list[FlagValue]
    unresolved: list[Unresolved]
    notes: list[Note]
    site: LaunchSite | None = None
    # Span.key -> the commands (file:line) whose words a located word reached
    uses: dict[tuple[str, int, int], frozenset[Source]] = field(default_factory=dict)

    def flags(self) -> list[str]:
        """argv as plain strings for ``Topology.from_flags``; unknown values drop their flag."""
        out: list[str] = []
        for fv in self.argv:
            if fv.value is None:
                continue
            if fv.joined and is_switch(fv.flag):  # --colocate=false is not --colocate false
                out.append(f"{fv.flag}={fv.value}")
                continue
            if fv.flag:
                out.append(fv.flag)
            out.extend(fv.tokens)
        return out

    def values(self) -> dict[str, list[FlagValue]]:
        """Every occurrence of each flag, in order (the last one wins)."""
        out: dict[str, list[FlagValue]] = {}
        for fv in self.argv:
            if fv.flag:
                out.setdefault(fv.flag, []).append(fv)
        return out


# ---------------------------------------------------------------- values


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

    __slots__ = ("items", "array")

    def __init__(self, items: list[Field], array: bool):
        self.items, self.array = items, array


class _ArithError(Exception):
    pass


_OWN = object()  # marks text of the word being expanded (not an item passed on from a list)


_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|[0-9]+)|\$?\{?([A-Za-z_]\w*)\}?|"
                          r"(\*\*|[-+*/%()]))")
_INT_LIMIT = 2**63


def _arith(text: str, lookup) -> int:
    """Evaluate + - * / % ** and parentheses over ints, as bash does; no eval."""
    toks: list = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _ARITH_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _ArithError(f"'{text[pos:].strip()[:20]}' is not supported in $((...))")
        pos = m.end()
        num, name, op = m.groups()
        if num is not None:
            try:
                toks.append(int(num, 16) if num[:2] in ("0x", "0X") else
                            int(num, 8) if len(num) > 1 and num[0] == "0" else int(num))
            except ValueError:
                raise _ArithError(f"'{num}' is not a valid number") from None
        elif name is not None:
            toks.append(("name", name))
        else:
            toks.append(op)
    k = 0

    def peek():
        return toks[k] if k < len(toks) else None

    def check(v: int) -> int:
        if abs(v) >= _INT_LIMIT:
            raise _ArithError("the result overflows 64-bit integers")
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
                raise _ArithError("division by zero")
            else:
                q = abs(v) // abs(r) * (1 if (v >= 0) == (r >= 0) else -1)
                v = q if op == "/" else v - q * r
        return v

    def unary(depth):
        nonlocal k
        if depth > 50:
            raise _ArithError("nested too deeply")
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
                raise _ArithError("exponent out of range")
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
                raise _ArithError("missing ')'")
            k += 1
            return v
        raise _ArithError("incomplete expression" if t is None else f"unexpected '{t}'")

    if not toks:
        return 0
    v = expr(0)
    if k != len(toks):
        raise _ArithError(f"unexpected '{toks[k]}'")
    return v


def _dirname(p: str) -> str:
    p2 = p.rstrip("/")
    if not p2:
        return "/" if p else "."
    if "/" not in p2:
        return "."
    return p2.rsplit("/", 1)[0].rstrip("/") or "/"


def _glob_re(pattern: str) -> re.Pattern:
    return re.compile(fnmatch.translate(pattern).removesuffix(r"\Z").removeprefix("(?s:")
                      .removesuffix(")"), re.S)


def _strip(value: str, pattern: str, op: str) -> str:
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


# ---------------------------------------------------------------- the reader

_PY = re.compile(r"python(?:[0-9](?:\.[0-9]+)?)?$")
_PREFIX = frozenset(("exec", "nohup", "time", "command", "builtin", "nice"))
_TORCHRUN_SWITCHES = frozenset(("--standalone", "--no-python", "--no_python", "--run-path",
                                "--run_path", "--module", "-m"))


class Launch(NamedTuple):
    launcher: str
    entry: str
    argv: list
    src: Source
    cond: Unk | None
    site: LaunchSite | None = None


class _Reader:
    def __init__(self, path: Path, env: Mapping[str, str]):
        self.main_abs = os.path.abspath(path)
        self.main_disp = str(path)
        self.env = {str(k): str(v) for k, v in env.items()}
        self.vars: dict[str, Var] = {}
        env_src = Source("<env>", 0)
        for k, v in self.env.items():
            if not k.isdigit():
                self.vars[k] = Var([Field(v, env_src, text=f"--env {k}={v}")], False)
        args = []
        while str(len(args) + 1) in self.env:
            v = self.env[str(len(args) + 1)]
            args.append(Field(v, env_src, text=f"--env {len(args) + 1}={v}"))
        self.frames: list[list[Field] | None] = [args if args else None]
        self.funcs: dict[str, list] = {}
        self.cache: dict[str, list] = {}
        self.stack: list[tuple[str, str]] = []  # (abs, display) of the files being run
        self.prev_end: dict[str, int] = {}
        self.cwd: str | None = None
        self.launches: list[Launch] = []
        self.notes: list[Note] = []
        self.unresolved: list[Unresolved] = []
        self.calls = 0
        self.why_unknown = ""
        # for rewriting: the text of each file, where each word came from, and the shell state
        self.text: str | None = None  # the main script's text, when given instead of its file
        self.newlines: dict[str, list[int]] = {}
        self.where: list[str] = []  # absolute file of the code being run (function bodies too)
        self.func_file: dict[str, str] = {}
        self.stmt_line = 0
        self.branch: list[Source] = []
        self.uses: dict[tuple, set[Source]] = {}
        self.exported: set[str] = set()  # by export / declare -x
        self.inherited = {k for k in self.env if not k.isdigit()}  # from --env, not set here
        self.allexport = False
        # per function call: [words shifted off, highest argument position read by index]
        self.positions: list[list[int]] = []

    # -- files

    def disp(self, abs_path: str) -> str:
        if abs_path == self.main_abs:
            return self.main_disp
        try:
            rel = os.path.relpath(abs_path, os.path.dirname(self.main_abs))
        except ValueError:
            return abs_path
        return os.path.normpath(os.path.join(os.path.dirname(self.main_disp), rel))

    def parse_file(self, abs_path: str, disp: str) -> list:
        if abs_path in self.cache:
            return self.cache[abs_path]
        try:
            data = Path(abs_path).read_bytes() if abs_path != self.main_abs or self.text is None \
                else self.text.encode("utf-8", "surrogateescape")
        except OSError as e:
            raise ScriptReadError(f"{disp}:0: cannot read the file ({e.strerror or e}). "
                                  "Fix: check the path and its permissions.") from None
        if b"\0" in data:
            raise ScriptReadError(f"{disp}:1: not a text file (it contains NUL bytes). "
                                  "Fix: pass the bash launch script.")
        text = data.decode("utf-8", errors="replace")
        self.newlines[abs_path] = [m.start() for m in re.finditer("\n", text)]
        try:
            body, notes = bash.parse(text)
        except bash.BashSyntaxError as e:
            raise ScriptReadError(f"{disp}:{e.line}: {e.message}. Fix: {e.fix}.") from None
        for code, line, message, fix in notes:
            self.notes.append(Note(code, message, fix, Source(disp, line)))
        self.cache[abs_path] = body
        return body

    def run_file(self, abs_path: str, cond: Unk | None):
        disp = self.disp(abs_path)
        body = self.parse_file(abs_path, disp)
        self.stack.append((abs_path, disp))
        self.where.append(abs_path)
        try:
            self.run(body, cond)
        finally:
            self.stack.pop()
            self.where.pop()

    @property
    def file(self) -> str:
        return self.stack[-1][1]

    def src(self, line: int) -> Source:
        return Source(self.stack[-1][1], line)

    # -- expansion

    def expand(self, word, cond: Unk | None = None) -> list[Field]:
        """A word as the fields bash would pass (word splitting, "${A[@]}", no globbing)."""
        fields: list[Field] = []
        owns: list[bool] = []
        cur: list[str] = []
        st = {"has": False, "src": None, "unk": None, "text": None, "extra": True,
              "cond": cond, "any": False, "own": False, "spans": []}

        def add(f: Field, origin=_OWN):
            """`origin`: _OWN for text of this word, else the span of a list item passed on."""
            if origin is _OWN:
                st["own"] = True
            else:
                st["spans"].append(origin)
            if st["src"] is None:
                st["src"], st["text"] = f.src, f.text
            if f.unk is not None and st["unk"] is None:
                st["unk"] = f.unk
            if not f.extra:
                st["extra"] = False
            if f.cond is not None and st["cond"] is None:
                st["cond"] = f.cond
            st["has"] = True
            st["any"] = True

        def flush():
            if st["has"]:
                unk = st["unk"]
                spans = st["spans"]
                fields.append(Field(None if unk else "".join(cur), st["src"], unk,
                                    st["text"], unk is not None and st["extra"], st["cond"],
                                    spans[0] if len(spans) == 1 and not st["own"] else None))
                owns.append(st["own"] and not spans)
            cur.clear()
            st.update(has=False, src=None, unk=None, text=None, extra=True, cond=cond, own=False,
                      spans=[])

        for part in word.parts:
            t = type(part)
            if t is Lit:
                cur.append(part.text)
                add(Field(part.text, self.src(part.line), text=word.text))
                continue
            items, is_list = self.part(part)
            quoted = part.quoted
            for n, f in enumerate(items):
                if n:
                    if is_list or not quoted:
                        flush()
                    else:
                        cur.append(" ")
                if f.unk is not None:
                    add(Field(None, f.src, f.unk, f.text, f.extra, f.cond))
                    continue
                v = f.value
                if quoted:
                    cur.append(v)
                    add(f, f.span if is_list else _OWN)
                    if not is_list:
                        self.consume((f,))
                    continue
                pieces = v.split()
                if not pieces:
                    if v and st["has"]:
                        flush()
                    continue
                if v[0] in " \t\n":
                    flush()
                whole = f.span if is_list and len(pieces) == 1 and pieces[0] == v else None
                if whole is None:
                    self.consume((f,))
                for k, piece in enumerate(pieces):
                    if k:
                        flush()
                    cur.append(piece)
                    add(Field(piece, f.src, None, f.text, False, f.cond),
                        whole if is_list else _OWN)
                if v[-1] in " \t\n":
                    flush()
        flush()
        if len(fields) == 1 and owns[0] and word.start >= 0 and self.where:
            branch = self.branch[-1] if self.branch else None
            fields[0].span = (self.where[-1], word.start, word.end, self.stmt_line, branch)
        return fields

    def join(self, word) -> Field:
        """A word without splitting (assignment values, [[ ]], case): one field."""
        out: list[str] = []
        unk = cnd = None
        for part in word.parts:
            if type(part) is Lit:
                out.append(part.text)
                continue
            items, _ = self.part(part)
            self.consume(items)
            for n, f in enumerate(items):
                if f.unk is not None:
                    unk = unk or f.unk
                    continue
                if f.cond is not None:
                    cnd = cnd or f.cond
                if n:
                    out.append(" ")
                out.append(f.value)
        if unk is None and cnd is not None:
            unk = Unk(word.text, cnd.src, f"it includes a value added {cnd.why}")
        return Field(None if unk else "".join(out), self.src(word.line), unk, word.text)

    def part(self, part) -> tuple[list[Field], bool]:
        t = type(part)
        if t is Param:
            return self.param(part)
        if t is Sub:
            return [self.substitute(part)], False
        if t is Arith:
            return [self.arith(part)], False
        return [Field(part.text, self.src(part.line), text=part.text)], False

    def unknown(self, part, why: str, extra: bool = False) -> Field:
        src = self.src(part.line)
        return Field(None, src, Unk(part.text, src, why), part.text, extra)

    def lookup(self, name: str, index, part) -> tuple[list[Field] | None, bool]:
        """(fields, is_list) of a parameter, or (None, False) when it is unset."""
        if name in ("@", "*"):
            frame = self.frames[-1]
            if frame is None:
                why = ("positional arguments passed when the script is run (none assumed; "
                       "pass --env 1=VALUE ...)")
                return [self.unknown(part, why, extra=True)], True
            return frame, name == "@"
        if name.isdigit():
            if name == "0":
                return [Field(self.main_abs, self.src(part.line), text=part.text)], False
            frame = self.frames[-1]
            if frame is None:
                why = f"positional argument ${name}: pass --env {name}=VALUE"
                return [self.unknown(part, why)], False
            k = int(name) - 1
            self.read_position(k + 1)
            return ([frame[k]], False) if k < len(frame) else (None, False)
        if name == "#" and self.frames[-1] is not None:
            self.read_position(_INT_LIMIT)
            return [Field(str(len(self.frames[-1])), self.src(part.line))], False
        if name in "#?$!-":
            return [self.unknown(part, f"${name} is only known when the script runs")], False
        if name == "BASH_SOURCE" and (index is None or getattr(index, "text", "").strip() == "0"):
            # the file being read, absolute, so the dirname idioms locate model files
            return [Field(self.stack[-1][0], self.src(part.line), text=part.text)], False
        var = self.vars.get(name)
        if var is None:
            return None, False
        if index is None:
            if var.array and not var.items:
                return None, False
            self.consume(var.items[:1])
            return var.items[:1], False
        if index in ("@", "*"):
            return var.items, index == "@"
        if var.array and len(var.items) == 1 and var.items[0].extra:
            return var.items, False
        got = self.join(index)
        if got.unk:
            return [Field(None, got.src, got.unk, part.text)], False
        try:
            k = _arith(got.value, self.arith_lookup(part))
        except _ArithError as e:
            return [self.unknown(part, f"array index: {e}")], False
        items = var.items
        if k < 0:
            k += len(items)
        self.consume(items[:k + 1] if k >= 0 else items)  # the words before it fix its place
        return ([items[k]], False) if 0 <= k < len(items) else (None, False)

    def param(self, p: Param) -> tuple[list[Field], bool]:
        name, op = p.name, p.op
        if op in ("?bad", "@"):
            return [self.unknown(p, "this form of ${...} is not modelled")], False
        items, is_list = self.lookup(name, p.index, p)
        if p.length:
            if items is None:
                return [Field("0", self.src(p.line), text=p.text)], False
            if any(f.unk for f in items):
                return [self.unknown(p, "length of a value only known at run time")], False
            self.consume(items)
            n = len(items) if (p.index in ("@", "*")) else len(items[0].value)
            return [Field(str(n), self.src(p.line), text=p.text)], False
        unknown = items is not None and any(f.unk for f in items)
        if op is None:
            if items is None:
                why = f"{name} is not set and has no default: pass --env {name}=VALUE"
                return [self.unknown(p, why)], False
            return items, is_list
        if unknown:
            return [f for f in items if f.unk][:1], False
        empty = items is None or (not is_list and items[0].value == "")
        if op in (":-", "-", ":=", "="):
            if items is None or (empty and op[0] == ":"):
                got = self.join(p.arg)
                if op in (":=", "="):
                    self.vars[name] = Var([Field(got.value, got.src, got.unk, got.text)], False)
                return [Field(got.value, got.src, got.unk, p.text, cond=got.cond)], False
            return items, is_list
        if op in (":?", "?"):
            if items is None or (empty and op == ":?"):
                msg = p.arg.text if p.arg is not None and p.arg.text else "null or not set"
                why = f"{name} must be set ({msg}): pass --env {name}=VALUE"
                return [self.unknown(p, why)], False
            return items, is_list
        if op in (":+", "+"):
            if items is None or (empty and op == ":+"):
                return [Field("", self.src(p.line), text=p.text)], False
            got = self.join(p.arg)
            return [Field(got.value, got.src, got.unk, p.text)], False
        if items is None:
            items, is_list = [Field("", self.src(p.line), text=p.text)], False
        arg = self.join(p.arg) if p.arg is not None else Field("", self.src(p.line))
        if arg.unk:
            return [Field(None, arg.src, arg.unk, p.text)], False
        out = []
        self.consume(items)
        for f in items:
            try:
                v = self.transform(f.value, op, arg.value, p)
            except _ArithError as e:
                return [self.unknown(p, f"${{...}} offset: {e}")], False
            out.append(Field(v, f.src, None, f.text, False, f.cond))
        return out, is_list

    def transform(self, v: str, op: str, arg: str, p: Param) -> str:
        if op in ("#", "##", "%", "%%"):
            return _strip(v, arg, op)
        if op in ("^^", "^"):
            return v.upper() if op == "^^" else v[:1].upper() + v[1:]
        if op in (",,", ","):
            return v.lower() if op == ",," else v[:1].lower() + v[1:]
        if op == ":":
            lookup = self.arith_lookup(p)
            off, _, ln = arg.partition(":")
            a = _arith(off, lookup)
            a = max(0, len(v) + a) if a < 0 else a
            if not ln:
                return v[a:]
            b = _arith(ln, lookup)
            return v[a:a + b] if b >= 0 else v[a:len(v) + b]
        rep = self.join(p.arg2).value if p.arg2 is not None else ""
        rep = rep or ""
        if not arg:
            return v
        rx = _glob_re(arg)
        if op == "/#":
            m = rx.match(v)
            return rep + v[m.end():] if m else v
        if op == "/%":
            for k in range(len(v) + 1):
                if fnmatch.fnmatchcase(v[k:], arg):
                    return v[:k] + rep
            return v
        return rx.sub(lambda m: rep, v, count=0 if op == "//" else 1)

    def arith_lookup(self, part):
        def lookup(name: str) -> int:
            items, _ = self.lookup(name, None, part)
            if not items:
                raise _ArithError(f"{name} is not set: pass --env {name}=VALUE")
            f = items[0]
            if f.unk:
                raise _ArithError(f.unk.why)
            try:
                return int(f.value.strip() or "0")
            except ValueError:
                raise _ArithError(f"{name}={f.value!r} is not an integer") from None
        return lookup

    def arith(self, part: Arith) -> Field:
        got = self.join(part.expr)
        if got.unk:
            return Field(None, got.src, got.unk, part.text)
        try:
            v = _arith(got.value, self.arith_lookup(part))
        except _ArithError as e:
            return self.unknown(part, f"arithmetic {part.text}: {e}")
        return Field(str(v), self.src(part.line), text=part.text)

    def substitute(self, sub: Sub) -> Field:
        """Only the idioms that locate files: dirname, basename, cd && pwd, realpath, echo."""
        cwd, out = None, []
        cmds = []
        for node in sub.body:
            if type(node) is bash.AndOr and all(op in (None, "&&") for op, _ in node.items):
                cmds.extend(c for _, c in node.items)
            else:
                cmds.append(node)
        ifs = False
        for node in cmds:
            if type(node) is bash.Simple and node.assigns and not node.words:
                ifs = ifs or any(a.name == "IFS" for a in node.assigns)
                continue
            if type(node) is not bash.Simple or node.assigns or not node.words:
                first = node.cmds[0] if type(node) is bash.Pipe else node
                what = first.words[0].text if type(first) is bash.Simple and first.words \
                    else "commands"
                return self.unknown(sub, f"command substitution runs '{what}' (in a pipeline "
                                         "or compound command) when the script runs")
            args = []
            for w in node.words:
                args.extend(self.expand(w))
            for f in args:
                if f.unk:
                    return Field(None, f.src, f.unk, sub.text)
                if f.cond:
                    return Field(None, f.cond.src, Unk(sub.text, f.cond.src, "it includes a "
                                                       f"value added {f.cond.why}"), sub.text)
            if ifs:
                return self.unknown(sub, "IFS is changed, which changes how words are joined")
            vals = [f.value for f in args]
            name, rest = vals[0], [v for v in vals[1:] if not v.startswith("-")]
            if name == "cd" and len(rest) == 1:
                target = rest[0]
                if not target.startswith("/"):
                    if cwd is None:
                        return self.unknown(sub, "relative 'cd' depends on where the script is "
                                                 "run from")
                    target = os.path.join(cwd, target)
                cwd = os.path.normpath(target)
            elif name == "pwd" and cwd is not None:
                out.append(cwd)
            elif name == "dirname" and rest:
                out.extend(_dirname(v) for v in rest)
            elif name == "basename" and rest:
                out.append(os.path.basename(rest[0].rstrip("/")).removesuffix(
                    rest[1] if len(rest) > 1 else "\0"))
            elif name in ("realpath", "readlink") and len(rest) == 1 and (
                    name == "realpath" or any(v in ("-f", "-e", "-m") for v in vals)):
                p = rest[0]
                if not p.startswith("/"):
                    if cwd is None:
                        return self.unknown(sub, f"'{name}' of a relative path depends on where "
                                                 "the script is run from")
                    p = os.path.join(cwd, p)
                out.append(os.path.normpath(p))
            elif name == "echo":
                while vals[1:] and vals[1] in ("-n", "-e", "-E"):
                    vals.pop(1)
                out.append(" ".join(vals[1:]))
            elif name in ("true", ":"):
                pass
            else:
                return self.unknown(sub, f"command substitution runs '{name}' when the script "
                                         "runs")
        return Field("\n".join(out).rstrip("\n"), self.src(sub.line), text=sub.text)

    # -- commands

    def run(self, nodes: list, cond: Unk | None):
        for node in nodes:
            self.node(node, cond)

    def node(self, n, cond: Unk | None):
        t = type(n)
        if t is bash.Simple:
            self.simple(n, cond)
        elif t is bash.AndOr:
            status = self.status([n.items[0][1]], cond)
            reason = self.why_unknown
            self.node(n.items[0][1], cond)
            self.branch.append(self.src(_line(n)))
            try:
                self.and_or(n, status, reason, cond)
            finally:
                self.branch.pop()
        elif t is bash.Pipe:
            for c in n.cmds:
                self.node(c, cond)
        elif t in (bash.If, bash.Case, bash.Loop):
            self.branch.append(self.src(n.line))
            try:
                self.compound(n, cond)
            finally:
                self.branch.pop()
        elif t is bash.Func:
            self.funcs[n.name] = [n.body]
            self.func_file[n.name] = self.where[-1]
        elif t is bash.Group:
            if n.subshell:
                saved = dict(self.vars)
                self.run(n.body, cond)
                self.vars = saved
            else:
                self.run(n.body, cond)

    def and_or(self, n: bash.AndOr, status: bool | None, reason: str, cond: Unk | None):
        for op, cmd in n.items[1:]:
            if status is None:
                line = _line(n)
                why = f"only if the command before '{op}' at {self.src(line)} " + (
                    "succeeds" if op == "&&" else "fails") + reason
                self.node(cmd, cond or Unk(op, self.src(line), why))
                status = None
            elif status == (op == "&&"):
                status = self.status([cmd], cond)
                self.node(cmd, cond)

    def compound(self, n, cond: Unk | None):
        t = type(n)
        if t is bash.If:
            self.if_(n, cond)
        elif t is bash.Case:
            self.case(n, cond)
        else:
            why = f"inside a '{n.kind}' loop at {self.src(n.line)}, run a number of times known "\
                  "only at run time"
            inner = cond or Unk(n.kind, self.src(n.line), why)
            if n.var:
                self.vars[n.var] = Var([Field(None, inner.src, Unk(f"${n.var}", inner.src,
                                                                   f"loop variable {n.var}"))],
                                       False)
            self.run(n.body, inner)

    def if_(self, n: bash.If, cond: Unk | None):
        inner = cond
        for test, body in n.branches:
            status = self.status(test, inner)
            reason = self.why_unknown
            self.run(test, inner)
            if status is True:
                self.run(body, inner)
                return
            if status is None:
                line = test[0].line if test and hasattr(test[0], "line") else n.line
                why = f"inside the 'if' at {self.src(line)}, whose condition is decided at " \
                      "run time" + reason
                inner = inner or Unk("if", self.src(line), why)
                self.run(body, inner)
        if n.orelse is not None:
            self.run(n.orelse, inner)

    def case(self, n: bash.Case, cond: Unk | None):
        word = self.join(n.word)
        inner = cond
        if word.unk:
            why = f"inside a 'case {n.word.text}' at {self.src(n.line)} whose value is only " \
                  "known at run time"
            inner = cond or Unk("case", self.src(n.line), why)
        for pats, body in n.arms:
            if inner is not cond:
                self.run(body, inner)
                continue
            matched = None
            for p in pats:
                pv = self.join(p)
                if pv.unk:
                    matched = None
                    break
                if fnmatch.fnmatchcase(word.value, pv.value):
                    matched = True
                    break
                matched = False
            if matched is True:
                self.run(body, inner)
                return
            if matched is None:
                why = f"inside a 'case' arm at {self.src(n.line)} whose pattern is only known " \
                      "at run time"
                inner = inner or Unk("case", self.src(n.line), why)
                self.run(body, inner)

    def status(self, nodes: list, cond: Unk | None) -> bool | None:
        """Exit status of a test command when it is decided by known values, else None.

        When None, `why_unknown` says which value the test depends on.
        """
        self.why_unknown = ""
        if len(nodes) != 1:
            return None
        node = nodes[0]
        if type(node) is bash.Pipe:
            got = self.status(node.cmds[-1:], cond)
            return None if got is None else (not got if node.neg else got)
        if type(node) is bash.AndOr:
            got = self.status([node.items[0][1]], cond)
            for op, cmd in node.items[1:]:
                if got is None:
                    return None
                if got == (op == "&&"):
                    got = self.status([cmd], cond)
            return got
        if type(node) is not bash.Simple or not node.words:
            return None
        words = node.words
        head = words[0].text
        if head in ("true", ":"):
            return True
        if head == "false":
            return False
        if head == "[[":
            vals = [self.join(w) for w in words[1:]]
            if not vals or vals[-1].value != "]]":
                return None
            vals, fancy = vals[:-1], True
        elif head in ("[", "test"):
            vals = []
            for w in words[1:]:
                vals.extend(self.expand(w))
            if head == "[":
                if not vals or vals[-1].value != "]":
                    return None
                vals = vals[:-1]
            fancy = False
        else:
            return None
        got = _test(vals, fancy)
        bad = next((f.unk or f.cond for f in vals if f.unk or f.cond), None)
        if got is None and bad is not None:
            self.why_unknown = f" ({bad.why})"
        return got

    def assign(self, a: bash.Assign, cond: Unk | None):
        src = self.src(a.line)
        name = a.name
        self.inherited.discard(name)  # --env gave it, but the script sets it itself
        if a.array is not None:
            items: list[Field] = []
            for w in a.array:
                items.extend(self.expand(w))
            if a.append:
                old = self.vars.get(name)
                base = list(old.items) if old else []
                if cond:
                    items = [Field(f.value, f.src, f.unk, f.text, f.extra, f.cond or cond, f.span)
                             for f in items]
                self.vars[name] = Var(base + items, True)
            elif cond:
                self.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src, cond.why),
                                             a.text, True)], True)
            else:
                self.vars[name] = Var(items, True)
            return
        got = self.join(a.value)
        if a.index is not None:
            old = self.vars.get(name)
            items = list(old.items) if old else []
            try:
                k = int(a.index)
            except ValueError:
                k = -1
            if cond or got.unk or k < 0 or k > len(items):
                why = cond.why if cond else "array element set at an index known at run time"
                self.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text, True)], True)
                return
            f = Field(got.value, src, None, a.value.text)
            items[k:k + 1] = [f]
            self.vars[name] = Var(items, True)
            return
        value, unk = got.value, got.unk
        old = self.vars.get(name)
        if a.append and not unk:
            if old is not None and old.items and old.items[0].unk:
                unk = old.items[0].unk
            else:
                value = (old.items[0].value if old and old.items else "") + value
        self.set(name, value, unk, src, cond, a.text, a.value.text)

    def set(self, name: str, value: str | None, unk: Unk | None, src: Source,
            cond: Unk | None, expr: str, text: str):
        """Set a string variable; under a run-time condition it becomes unknown (unless
        unchanged), and an unknown value is taken from ``env`` when it has the name."""
        old = self.vars.get(name)
        if cond and not unk:
            same = old is not None and not old.array and old.items and \
                old.items[0].value == value
            if not same:
                unk = Unk(expr, src, f"{name} is assigned {cond.why}")
        if unk is not None and name in self.env:
            v = self.env[name]
            self.vars[name] = Var([Field(v, Source("<env>", 0), text=f"--env {name}={v}")], False)
            return
        self.vars[name] = Var([Field(None if unk else value, src, unk, text)], False)

    def printf_v(self, fields: list[Field], n: bash.Simple, cond: Unk | None):
        """``printf -v NAME FORMAT ARGS``: only %s, %d and %% are formatted statically."""
        name, src = fields[2].value, self.src(n.line)
        self.inherited.discard(name)
        expr = " ".join(f.text if f.unk else f.value for f in fields)
        bad = next((f.unk for f in fields[3:] if f.unk), None)
        value = None
        if bad is None and len(fields) > 3:
            fmt, args = fields[3].value, [f.value for f in fields[4:]]
            specs = re.findall(r"%[sd%]|%", fmt)
            if "%" not in specs and len([x for x in specs if x != "%%"]) == len(args):
                it = iter(args)
                value = re.sub(r"%[sd%]", lambda m: "%" if m.group() == "%%" else next(it), fmt)
        if value is None and bad is None:
            bad = Unk(expr, src, f"{name} is formatted by printf at run time")
        self.set(name, value, bad, src, cond, expr, expr)

    def simple(self, n: bash.Simple, cond: Unk | None):
        words = n.words
        head = words[0].text if words else ""
        self.stmt_line = n.line
        if not words or head in bash.DECLARE:
            for a in n.assigns:
                self.assign(a, cond)
            self.export(n, head)
        if not words:
            self.prev_end[self.file] = n.end
            return
        fields: list[Field] = []
        for w in words:
            fields.extend(self.expand(w))
        if fields and fields[0].value not in self.funcs:  # a call's words are used inside it
            here = self.src(n.line)
            for f in fields:
                if f.span is not None:
                    self.uses.setdefault(f.span[:3], set()).add(here)
        prev = self.prev_end.get(self.file)
        self.prev_end[self.file] = n.end
        if not fields:
            return
        first = fields[0]
        name = first.value
        lead = name if name is not None else first.text
        if lead.startswith("--") and len(lead) > 2:
            self.orphan(n, fields, prev)
            return
        if name is None:
            return
        if name in ("source", "."):
            self.source(fields[1:], n, cond)
        elif name == "set":
            for f in fields[1:]:
                v = f.value or ""
                if v[:1] in "-+" and v[1:2] != "-" and "a" in v:
                    self.allexport = v[0] == "-"
            if [f.value for f in fields[1:3]] in (["-o", "allexport"], ["+o", "allexport"]):
                self.allexport = fields[1].value == "-o"
        elif name == "unset":
            for f in fields[1:]:
                if f.value and not f.value.startswith("-"):
                    self.vars.pop(f.value, None)
        elif name == "cd":
            rest = [f for f in fields[1:] if not (f.value or "-").startswith("-")]
            target = rest[0].value if rest else None
            if target and target.startswith("/") and not cond:
                self.cwd = os.path.normpath(target)
            else:
                self.cwd = None
        elif name == "printf" and len(fields) > 2 and fields[1].value == "-v" and fields[2].value:
            self.printf_v(fields, n, cond)
        elif name == "shift":
            frame = self.frames[-1]
            k = fields[1].value if len(fields) > 1 else "1"
            if frame is not None and k is not None and k.isdigit():
                self.frames[-1] = frame[int(k):]
                if self.positions:
                    self.positions[-1][0] += int(k)
            else:
                self.read_position(_INT_LIMIT)
        elif name in ("read", "mapfile", "readarray"):
            names = [f.value for f in fields[1:] if f.value and not f.value.startswith("-")]
            if name != "read":
                names = names[-1:]
            for v in names:
                s = self.src(n.line)
                self.vars[v] = Var([Field(None, s, Unk(f"{name} {v}", s,
                                                       f"{v} is read when the script runs"),
                                          extra=name != "read")], name != "read")
        elif name in self.funcs and self.calls < MAX_CALL_DEPTH:
            self.calls += 1
            self.frames.append(fields[1:])
            self.where.append(self.func_file.get(name, self.where[-1]))
            self.positions.append([0, 0])
            try:
                self.run(self.funcs[name], cond)
            finally:
                self.frames.pop()
                self.where.pop()
                self.calls -= 1
                self.pin(fields[1:], self.positions.pop()[1], n)
        else:
            launch = self.launch(fields, n, cond)
            if launch:
                self.launches.append(launch._replace(site=self.site(fields, launch, n)))

    def consume(self, items):
        """Words taken apart, joined, counted or indexed here (not passed on whole): removing
        one of them would change this command too, so it counts as one of their users."""
        here = None
        for f in items:
            if f.span is not None:
                here = here or self.src(self.stmt_line)
                self.uses.setdefault(f.span[:3], set()).add(here)

    def read_position(self, k: int):
        """The function being run read argument k (1-based, counting shifted ones)."""
        if self.positions and len(self.frames) > 1:
            at = self.positions[-1]
            at[1] = max(at[1], min(_INT_LIMIT, at[0] + k))

    def pin(self, args: list[Field], highest: int, n: bash.Simple):
        """Removing an argument before one the function reads by position would shift it:
        such words count as used by the call too."""
        here = self.src(n.line)
        for f in args[:highest]:
            if f.span is not None:
                self.uses.setdefault(f.span[:3], set()).add(here)

    def export(self, n: bash.Simple, head: str):
        """Track which variables a child process sees (``export``, ``declare -x``, ``set -a``)."""
        opts = "".join(w.text[1:] for w in n.words[1:] if w.text.startswith("-"))
        if head == "export" or (head in ("declare", "typeset", "local") and "x" in opts):
            names = {a.name for a in n.assigns} | {
                w.text for w in n.words[1:] if bash._NAME.fullmatch(w.text)}
            if "n" in opts and head == "export":
                self.exported -= names
            else:
                self.exported |= names
        elif self.allexport and not n.words:
            self.exported |= {a.name for a in n.assigns}

    def site(self, fields: list[Field], launch: Launch, n: bash.Simple) -> LaunchSite:
        k = len(fields) - len(launch.argv) - 1
        branch = self.branch[-1] if self.branch else None
        statement = None
        if n.start >= 0:
            statement = self.span((self.where[-1], n.start, n.start, n.line, branch))
        variables = {name: v.items[0].value for name, v in self.vars.items()
                     if not v.array and v.items}
        exported = frozenset((set(variables) if self.allexport else self.exported)
                             | self.inherited)
        return LaunchSite(statement, self.span(fields[k].span) if 0 <= k else None, branch,
                          variables, exported, launch.src)

    def span(self, t: tuple | None) -> Span | None:
        """A Field's (file, start, end, stmt_line, branch) as a Span with lines and columns."""
        if t is None or t[0] not in self.newlines:
            return None
        file, start, end, stmt_line, branch = t
        nl = self.newlines[file]
        a, b = bisect.bisect_left(nl, start), bisect.bisect_left(nl, end)
        return Span(file, start, end, a + 1, start - (nl[a - 1] + 1 if a else 0), b + 1,
                    end - (nl[b - 1] + 1 if b else 0), stmt_line, branch)

    def orphan(self, n: bash.Simple, fields: list[Field], prev: int | None):
        flags = [f.value or f.text for f in fields if (f.value or f.text).startswith("-")]
        shown = " ".join(flags[:3]) + (" ..." if len(flags) > 3 else "")
        above = f"line {prev}" if prev else "the line above"
        self.notes.append(Note(
            "missing-line-continuation",
            f"line {n.line} starts with '{shown}' but {above} does not end in '\\', so bash "
            f"ends the command there and runs line {n.line} on its own "
            f"('{flags[0]}: command not found'); these flags never reach the launch command",
            f"end {above} with ' \\'",
            self.src(n.line)))

    def source(self, args: list[Field], n: bash.Simple, cond: Unk | None):
        if not args:
            return
        f = args[0]
        where = self.src(n.line)
        if f.value is None:
            self.unresolved.append(Unresolved(None, f.text, f.unk.src,
                                              f"cannot tell which file is sourced: {f.unk.why}"))
            return
        tried = []
        if f.value.startswith("/"):
            tried.append(os.path.normpath(f.value))
        else:
            if self.cwd:
                tried.append(os.path.join(self.cwd, f.value))
            here = os.path.dirname(self.stack[-1][0])
            tried.append(os.path.join(here, f.value))
            d = os.path.dirname(self.main_abs)
            while True:
                cand = os.path.join(d, f.value)
                if cand not in tried:
                    tried.append(cand)
                up = os.path.dirname(d)
                if up == d:
                    break
                d = up
        found = next((os.path.normpath(p) for p in tried if os.path.isfile(p)), None)
        if found is None:
            self.unresolved.append(Unresolved(
                None, n.words[1].text if len(n.words) > 1 else f.text, where,
                f"sourced file '{f.value}' not found (looked for it relative to the script "
                "and the directories above it); the flags it defines are unknown"))
            return
        if len(self.stack) >= MAX_SOURCE_DEPTH or any(found == s for s, _ in self.stack):
            self.notes.append(Note("source-cycle", f"'{f.value}' is sourced again while it is "
                                   "being read; the nested read is skipped",
                                   "source each model file once", where))
            return
        self.run_file(found, cond)

    # -- launch commands

    def launch(self, fields: list[Field], n: bash.Simple, cond: Unk | None) -> Launch | None:
        vals = [f.value if f.value is not None else f.text for f in fields]
        k = 0
        while k < len(vals):
            v = vals[k]
            if v in _PREFIX:
                k += 1
            elif v == "env":
                k += 1
                while k < len(vals) and ("=" in vals[k] or vals[k].startswith("-")):
                    k += 2 if vals[k] in ("-u", "--unset", "-C", "--chdir") else 1
            elif v == "timeout":
                k += 1
                while k < len(vals) and vals[k].startswith("-"):
                    k += 2 if vals[k] in ("-s", "-k", "--signal", "--kill-after") else 1
                k += 1
            else:
                break
        if k >= len(vals):
            return None
        base = os.path.basename(vals[k])
        src = self.src(n.line)
        if base == "ray":
            if vals[k + 1:k + 3] != ["job", "submit"]:
                return None
            rest = vals[k + 3:]
            j = rest.index("--") + 1 if "--" in rest else 0
            j += k + 3
            while j < len(vals):
                got = self.entry(fields, vals, j)
                if got:
                    return Launch("ray job submit", got[1], got[2], src, cond)
                j += 1
            return None
        got = self.entry(fields, vals, k)
        return Launch(got[0], got[1], got[2], src, cond) if got else None

    def entry(self, fields, vals, k) -> tuple[str, str, list] | None:
        """(launcher, entry, argv) when vals[k] starts a python or torchrun launch."""
        base = os.path.basename(vals[k])
        if _PY.match(base):
            i = k + 1
            while i < len(vals):
                v = vals[i]
                if v == "-c":
                    return None
                if v == "-m" and i + 1 < len(vals):
                    mod = vals[i + 1]
                    if mod in ("torch.distributed.run", "torch.distributed.launch"):
                        return self.torchrun(fields, vals, i + 2, f"{base} -m {mod}")
                    return base, mod, fields[i + 2:]
                if v in ("-X", "-W", "-Q"):
                    i += 2
                elif v.startswith("-"):
                    i += 1
                else:
                    return base, v, fields[i + 1:]
            return None
        if base == "torchrun":
            return self.torchrun(fields, vals, k + 1, "torchrun")
        return None

    def torchrun(self, fields, vals, i, launcher) -> tuple[str, str, list] | None:
        """Skip torchrun's own options (``--opt value``, ``--opt=value``, switches)."""
        while i < len(vals):
            v = vals[i]
            if v.startswith("-"):
                i += 1 if ("=" in v or v in _TORCHRUN_SWITCHES) else 2
            else:
                return launcher, v, fields[i + 1:]
        return None


def _line(node) -> int:
    while not hasattr(node, "line"):
        node = node.items[0][1] if type(node) is bash.AndOr else node.cmds[0]
    return node.line


def _test(vals: list[Field], fancy: bool) -> bool | None:
    """``[ ... ]`` / ``[[ ... ]]`` over known strings; None for anything else."""
    if any(f.unk or f.cond for f in vals):
        return None
    v = [f.value for f in vals]
    for sep in (("||", "-o"), ("&&", "-a")):
        for k in range(len(v) - 1, 0, -1):
            if v[k] in sep:
                a, b = _test(vals[:k], fancy), _test(vals[k + 1:], fancy)
                if a is None or b is None:
                    return None
                return (a or b) if sep[0] == "||" else (a and b)
    if v and v[0] == "!":
        r = _test(vals[1:], fancy)
        return None if r is None else not r
    if len(v) == 1:
        return v[0] != ""
    if len(v) == 2 and v[0] in ("-z", "-n"):
        return (v[1] == "") == (v[0] == "-z")
    if len(v) == 3:
        a, op, b = v
        if op in ("=", "==", "!="):
            eq = fnmatch.fnmatchcase(a, b) if fancy else a == b
            return eq if op != "!=" else not eq
        ints = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
                "-gt": int.__gt__, "-ge": int.__ge__}
        if op in ints:
            try:
                return ints[op](int(a), int(b))
            except ValueError:
                return None
    return None


# ---------------------------------------------------------------- argv



def _is_flag(f: Field) -> bool:
    v = f.value
    return v is not None and len(v) > 2 and v.startswith("--")


def _argv(fields: list, unresolved: list[Unresolved], span=lambda t: None) -> list[FlagValue]:
    out: list[FlagValue] = []
    i, n = 0, len(fields)
    while i < n:
        f = fields[i]
        i += 1
        if f.cond is not None:
            flag = f.value.partition("=")[0] if _is_flag(f) else None
            text = [f.value or f.text]
            while flag and i < n and not _is_flag(fields[i]) and fields[i].cond \
                    and not fields[i].extra:
                text.append(fields[i].value or fields[i].text)
                i += 1
            if flag:
                out.append(FlagValue(flag, None, f.src, unresolved=" ".join(text)))
            unresolved.append(Unresolved(flag, " ".join(text), f.cond.src, f.cond.why))
            continue
        if f.unk is not None:
            unresolved.append(Unresolved(None, f.unk.expr, f.unk.src, f.unk.why))
            continue
        if not _is_flag(f):
            out.append(FlagValue("", f.value, f.src, tokens=(f.value,), span=span(f.span)))
            continue
        flag, eq, val = f.value.partition("=")
        if eq:
            out.append(FlagValue(flag, val, f.src, tokens=(val,), span=span(f.span),
                                 joined=True))
            continue
        vals: list[Field] = []
        while i < n and not _is_flag(fields[i]) and not fields[i].extra \
                and fields[i].cond is None:
            vals.append(fields[i])
            i += 1
        bad = next((v for v in vals if v.unk is not None), None)
        if bad is not None:
            text = " ".join(v.text if v.unk else v.value for v in vals)
            out.append(FlagValue(flag, None, f.src, unresolved=text))
            unresolved.append(Unresolved(flag, bad.unk.expr, bad.unk.src, bad.unk.why))
            continue
        toks = tuple(v.value for v in vals)
        out.append(FlagValue(flag, " ".join(toks), f.src, tokens=toks, span=span(f.span),
                             value_spans=tuple(span(v.span) for v in vals)))
    return out


def read_script(path: str | Path, env: Mapping[str, str] | None = None,
                text: str | None = None) -> ScriptRead:
    """Read a launch script statically: the flags after its entry script, with sources.

    `text`, when given, is read as the script's content in place of the file's (a rewrite
    checks its result this way before writing it); files it sources are read from disk.
    """
    r = _Reader(Path(path), env or {})
    r.text = text
    abs_path = r.main_abs
    if text is None and not os.path.isfile(abs_path):
        raise ScriptReadError(f"{path}:0: no such file. Fix: check the script path.")
    r.run_file(abs_path, None)
    unresolved = list(r.unresolved)
    notes = list(r.notes)
    train = [x for x in r.launches if os.path.basename(x.entry).startswith("train")
             or x.entry.endswith(".train")]
    pool = train or r.launches
    launch = pool[-1] if pool else None
    argv: list[FlagValue] = []
    where = Source(str(path), 1)
    if launch is None:
        notes.append(Note("no-launch-command", "no 'python ... train.py', 'torchrun ...' or "
                          "'ray job submit ... -- python ...' command was found",
                          "check that the launch command is not inside a function that is "
                          "never called", where))
    else:
        argv = _argv(launch.argv, unresolved, r.span)
        if len(pool) > 1:
            others = ", ".join(str(x.src) for x in pool[:-1])
            notes.append(Note("several-launch-commands",
                              f"{len(pool)} launch commands found ({others} and {launch.src}); "
                              f"the last one, at {launch.src}, is read",
                              "keep one launch command per script", launch.src))
        if launch.cond is not None:
            notes.append(Note("conditional-launch", f"the launch command at {launch.src} runs "
                              f"only {launch.cond.why}", "pass --env to decide the branch",
                              launch.src))
    read = ScriptRead(str(path), launch.launcher if launch else None,
                      launch.entry if launch else None, argv, unresolved, notes,
                      launch.site if launch else None,
                      {k: frozenset(v) for k, v in r.uses.items()})
    for flag, occ in read.values().items():
        if len(occ) > 1:
            shown = ", ".join(f"{o.value if o.value is not None else o.unresolved!s} at "
                              f"{o.source}" for o in occ)
            last = occ[-1]
            notes.append(Note("flag-given-twice",
                              f"{flag} is given {len(occ)} times ({shown}); the last one "
                              f"({last.value if last.value is not None else last.unresolved} at "
                              f"{last.source}) wins",
                              f"remove all but one {flag}", last.source))
    return read
