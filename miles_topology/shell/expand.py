"""Word expansion over known values: parameters (``${X:-d}``, ``${A[@]}``, ``${#A[@]}``,
``${X%p}``...), arithmetic, word splitting, and the command substitutions that only locate
files (``dirname``, ``cd && pwd``, ``realpath``, ``echo``/``printf``). Anything else is an
unknown value that says why and where, never a guess."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex

from ..model.errors import InputError
from ..reading import gate
from ..reading.textfilters import FILTERS, run_pipeline
from ..reading.yamlflags import COMMAND, env_names
from ..reading.yamlflags import text as flags_text
from . import syntax
from .cursor import Cursor
from .findings import Findings
from .provenance import Provenance
from .state import Shell
from .syntax import Arith, Lit, Param, Sub
from .values import (
    INT_LIMIT,
    MAX_ITEMS,
    MAX_VALUE,
    OWN,
    PID,
    ArithError,
    Field,
    Unk,
    Var,
    arith,
    arith_targets,
    brace,
    dirname,
    glob_re,
    printf,
    strip,
)

_BLANK = re.compile(r"[ \t\n]")
_HOLD = 0xE100  # private-use characters that hold a word's parts during brace expansion
_HELD = re.compile("[\ue100-\uf8ff]")
_HELD_SPLIT = re.compile("([\ue100-\uf8ff])")
_NAME_CHARS = re.compile(r"\w+", re.A)
_IFS_JOIN = "\"${A[*]}\" joins the words with the first character of IFS, which is only " \
    "known at run time"


class _Fields:
    """The fields of one word as it is split: `cur` holds the text of the field being built;
    `add` records where its pieces come from, `flush` ends it."""

    __slots__ = ("fields", "owns", "cur", "cond", "has", "src", "unk", "text", "extra",
                 "fcond", "own", "spans", "bare")

    def __init__(self, cond: Unk | None):
        self.fields: list[Field] = []
        self.owns: list[bool] = []
        self.cur: list[str] = []
        self.cond = cond
        self.has, self.src, self.unk, self.text, self.extra = False, None, None, None, True
        self.fcond, self.own, self.spans = cond, False, []
        self.bare = False  # the field is one bare unknown expansion (Field.bare)

    def add(self, f: Field, origin=OWN):
        """`origin`: OWN for text of this word, else the span of a list item passed on."""
        if origin is OWN:
            self.own = True
        else:
            self.spans.append(origin)
        if self.src is None:
            self.src, self.text = f.src, f.text
        if f.unk is not None and self.unk is None:
            self.unk = f.unk
        if not f.extra:
            self.extra = False
        if f.cond is not None and self.fcond is None:
            self.fcond = f.cond
        self.bare = f.bare and not self.has
        self.has = True

    def flush(self):
        if self.has:
            unk, spans = self.unk, self.spans
            self.fields.append(Field(None if unk else "".join(self.cur), self.src, unk,
                                     self.text, unk is not None and self.extra, self.fcond,
                                     spans[0] if len(spans) == 1 and not self.own else None,
                                     self.bare and unk is not None))
            self.owns.append(self.own and not spans)
        self.cur.clear()  # the next field starts as __init__ left the first (one call less)
        self.has, self.src, self.unk, self.text, self.extra = False, None, None, None, True
        self.fcond, self.own, self.spans = self.cond, False, []
        self.bare = False


class Words:
    """Word expansion (Oils' word_eval beside cmd_eval): it reads the shell state and asks
    the cursor where it is; it never runs a command of the script. The interpreter calls
    `expand` (fields), `join` (one field), `substitute`, `filtered`, `stdin`, `path_of`,
    `arith_lookup`, `exports` and `file_key`."""

    def __init__(self, sh: Shell, at: Cursor, found: Findings, prov: Provenance):
        self.sh, self.at, self.found, self.prov = sh, at, found, prov
        self.helpers: dict[tuple, object] = {}  # Python helpers run, by argv, env and cwd
        self.filter_status = 0  # exit status of the last text pipeline evaluated
        self.cluster = None  # answers GPU probes (pylaunch.cluster.Cluster.answer), if given

    def expand(self, word, cond: Unk | None = None) -> list[Field]:
        """A word as the fields bash would pass (word splitting, "${A[@]}", no globbing)."""
        parts = word.parts
        t = word.text
        if "{" in t and ("," in t or ".." in t) and any(
                type(p) is Lit and not p.quoted and "{" in p.text for p in parts):
            got = self.braces(word, cond)
            if got is not None:
                return got
        if len(parts) == 1 and type(parts[0]) is Lit:  # the common case: plain text
            return [Field(parts[0].text, self.at.src(parts[0].line), None, word.text, False,
                          cond, self.at.span(word) if word.start >= 0 else None)]
        if len(parts) == 1:  # one expansion giving one known word: no splitting to do
            part = parts[0]
            items, is_list = self.part(part)
            if not is_list and len(items) == 1 and items[0].unk is None:
                f = items[0]
                v = f.value
                if part.quoted or (v and not _BLANK.search(v)):
                    self.prov.consume(items)
                    return [Field(v, f.src, None, f.text, False, cond or f.cond,
                                  self.at.span(word))]
                if not v:
                    return []
            return self.split(word, cond, [(part, items, is_list)])
        return self.split(word, cond, None)

    def braces(self, word, cond: Unk | None) -> list[Field] | None:
        """Brace expansion, done first as in bash: on the word's unquoted text, with each
        expansion and quoted part held in place by a private character. None when the word
        has no brace to expand. The words it gives are not the file's text (no span)."""
        parts = word.parts
        if len(parts) > 4096:
            return None
        buf = []
        for k, p in enumerate(parts):
            if type(p) is Lit and not p.quoted:
                if _HELD.search(p.text):
                    return None
                buf.append(p.text)
            else:
                buf.append(chr(_HOLD + k))
        text = "".join(buf)
        got = brace(text)
        if got is None:
            return [self.unknown(word, f"brace expansion gives more than {MAX_ITEMS} words",
                                 extra=True)]
        if got == [text]:
            return None
        out: list[Field] = []
        for t in got:
            new: list = []
            for piece in _HELD_SPLIT.split(t):
                if not piece:
                    continue
                if len(piece) == 1 and _HELD.match(piece):
                    new.append(parts[ord(piece) - _HOLD])
                elif new and type(new[-1]) is Param and new[-1].text == "$" + new[-1].name \
                        and _NAME_CHARS.match(piece) and not new[-1].name.isdigit():
                    # $X{a,b} is $Xa $Xb: the name goes on into the text after it
                    q = new.pop()
                    more = _NAME_CHARS.match(piece).group()
                    new.append(Param(name=q.name + more, quoted=q.quoted,
                                     text=q.text + more, line=q.line))
                    if piece[len(more):]:
                        new.append(Lit(text=piece[len(more):], quoted=False, line=word.line))
                else:
                    new.append(Lit(text=piece, quoted=False, line=word.line))
            if new:  # an empty alternative gives no word
                out.extend(self.expand(syntax.Word(parts=new, line=word.line, text=word.text),
                                       cond))
        return out

    def split(self, word, cond: Unk | None, done) -> list[Field]:
        """The general case: parts joined, unquoted results split on blanks."""
        acc = _Fields(cond)
        for part in word.parts:
            if type(part) is Lit:
                acc.cur.append(part.text)
                acc.add(Field(part.text, self.at.src(part.line), text=word.text))
                continue
            if done is not None:  # already expanded by the caller
                _, items, is_list = done[0]
            else:
                items, is_list = self.part(part)
            self.split_part(acc, part, items, is_list)
        acc.flush()
        if len(acc.fields) == 1 and acc.owns[0]:
            acc.fields[0].span = self.at.span(word)
        return acc.fields

    def split_part(self, acc: _Fields, part, items: list[Field], is_list: bool):
        """The fields of one expansion, added to the word being built: "$@" and unquoted
        values split; "${A[*]}" joined by IFS."""
        quoted = part.quoted
        sep = self.ifs_sep() if quoted and not is_list and len(items) > 1 else " "
        for n, f in enumerate(items):
            if n:
                if is_list or not quoted:
                    acc.flush()
                elif sep is None:
                    acc.add(self.unknown(part, _IFS_JOIN))
                else:
                    acc.cur.append(sep)
            if f.unk is not None:
                # an unset variable's unquoted word is dropped (an array's item was split
                # where it was assigned)
                acc.add(Field(None, f.src, f.unk, f.text, f.extra, f.cond,
                              bare=f.bare and (is_list or not quoted)))
            elif f.cond is not None and quoted and not is_list and len(items) > 1:
                # "${A[*]}" is one word whatever A holds: its text is what is unknown
                acc.add(Field(None, f.src, Unk(part.text, f.cond.src, "it includes a value "
                                               f"added {f.cond.why}"), f.text))
            elif quoted:
                acc.cur.append(f.value)
                acc.add(f, f.span if is_list else OWN)
                if not is_list:
                    self.prov.consume((f,))
            else:
                self.split_value(acc, f, is_list)

    def split_value(self, acc: _Fields, f: Field, is_list: bool):
        """An unquoted known value: split on blanks."""
        v = f.value
        pieces = v.split()
        if not pieces:
            if v and acc.has:
                acc.flush()
            return
        if v[0] in " \t\n":
            acc.flush()
        whole = f.span if is_list and len(pieces) == 1 and pieces[0] == v else None
        if whole is None:
            self.prov.consume((f,))
        for k, piece in enumerate(pieces):
            if k:
                acc.flush()
            acc.cur.append(piece)
            acc.add(Field(piece, f.src, None, f.text, False, f.cond), whole if is_list else OWN)
        if v[-1] in " \t\n":
            acc.flush()

    def join(self, word) -> Field:
        """A word without splitting (assignment values, [[ ]], case): one field."""
        out: list[str] = []
        unk = cnd = None
        for part in word.parts:
            if type(part) is Lit:
                out.append(part.text)
                continue
            items, is_list = self.part(part)
            self.prov.consume(items)
            sep = " " if is_list or len(items) < 2 else self.ifs_sep()  # "${A[*]}": IFS
            if sep is None:
                unk = unk or self.unknown(part, _IFS_JOIN).unk
            for n, f in enumerate(items):
                if f.unk is not None:
                    unk = unk or f.unk
                    continue
                if f.cond is not None:
                    cnd = cnd or f.cond
                if n:
                    out.append(sep or "")
                out.append(f.value)
        if unk is None and cnd is not None:
            unk = Unk(word.text, cnd.src, f"it includes a value added {cnd.why}")
        return Field(None if unk else "".join(out), self.at.src(word.line), unk, word.text)

    def ifs_sep(self) -> str | None:
        """What joins the words of "${A[*]}" / "$*": the first character of IFS (a blank
        when IFS is unset), or None when IFS is unknown."""
        var = self.sh.vars.get("IFS")
        if var is None or not var.items:
            return " "
        f = var.items[0]
        return None if f.unk or f.value is None else f.value[:1]

    def part(self, part) -> tuple[list[Field], bool]:
        t = type(part)
        if t is Param:
            return self.param(part)
        if t is Sub:
            if part.proc is not None:  # <(...) as a word: a /dev/fd path made at run time
                return [self.unknown(part, "process substitution is a pipe made at run "
                                           "time")], False
            return [self.substitute(part)], False
        if t is Arith:
            return [self.arith(part)], False
        return [Field(part.text, self.at.src(part.line), text=part.text)], False

    def unknown(self, part, why: str, extra: bool = False) -> Field:
        src = self.at.src(part.line)
        return Field(None, src, Unk(part.text, src, why), part.text, extra)

    def lookup(self, name: str, index, part) -> tuple[list[Field] | None, bool]:
        """(fields, is_list) of a parameter, or (None, False) when it is unset."""
        if not (name[:1].isalpha() or name[:1] == "_") or name == "BASH_SOURCE":
            got = self.special(name, index, part)
            if got is not None:
                return got
        var = self.sh.vars.get(name)
        if var is None:
            taint = self.sh.taint
            if taint is None:
                return None, False
            why = f"{name} is not set here, but {taint.why}"
            return [self.unknown(part, why, extra=index in ("@", "*"))], False
        if index is None:
            if var.array and not var.items:
                return None, False
            self.prov.consume(var.items[:1])
            return var.items[:1], False
        if index in ("@", "*"):
            if var.keys is not None and len(var.items) > 1:
                why = f"{name} is an associative array: bash lists its values in its own order"
                return [self.unknown(part, why, extra=True)], False
            return var.items, index == "@"
        if var.array and len(var.items) == 1 and var.items[0].extra:
            return var.items, False
        got = self.join(index)
        if got.unk:
            return [Field(None, got.src, got.unk, part.text)], False
        if var.keys is not None:
            k = var.keys.index(got.value) if got.value in var.keys else -1
            return ([var.items[k]], False) if k >= 0 else (None, False)
        try:
            k = arith(got.value, self.arith_lookup(part))
        except ArithError as e:
            return [self.unknown(part, f"array index: {e}")], False
        items = var.items
        if k < 0:
            k += len(items)
        self.prov.consume(items[:k + 1] if k >= 0 else items)  # the words before it fix its place
        return ([items[k]], False) if 0 <= k < len(items) else (None, False)

    def special(self, name: str, index, part) -> tuple[list[Field] | None, bool] | None:
        """Positional and special parameters (``$@ $1 $# $$ $0``, ``BASH_SOURCE``); None for
        an ordinary variable."""
        if name in ("@", "*"):
            frame = self.sh.frames[-1]
            if frame is None:
                why = ("positional arguments passed when the script is run (none assumed; "
                       "pass --env 1=VALUE ...)")
                return [self.unknown(part, why, extra=True)], True
            return frame, name == "@"
        if name.isdigit():
            if name == "0":
                return [Field(self.sh.zero or self.at.main_abs, self.at.src(part.line),
                              text=part.text)], False
            frame = self.sh.frames[-1]
            if frame is None:
                why = f"positional argument ${name}: pass --env {name}=VALUE"
                return [self.unknown(part, why)], False
            k = int(name) - 1
            self.prov.read_position(k + 1)
            return ([frame[k]], False) if k < len(frame) else (None, False)
        if name == "#" and self.sh.frames[-1] is not None:
            self.prov.read_position(INT_LIMIT)
            return [Field(str(len(self.sh.frames[-1])), self.at.src(part.line))], False
        if name == "$":  # the same in each use (gen_$$.sh written, then sourced)
            return [Field(PID, self.at.src(part.line), text=part.text)], False
        if name in "#?$!-":
            return [self.unknown(part, f"${name} is only known when the script runs")], False
        if name == "BASH_SOURCE" and (index is None or getattr(index, "text", "").strip() == "0"):
            # the file being read, absolute, so the dirname idioms locate model files
            return [Field(self.at.file_abs, self.at.src(part.line), text=part.text)], False
        return None

    def param(self, p: Param) -> tuple[list[Field], bool]:
        name, op = p.name, p.op
        if op in ("?bad", "@"):
            return [self.unknown(p, "this form of ${...} is not modelled")], False
        items, is_list = self.lookup(name, p.index, p)
        if p.length:
            return [self.length(p, items)], False
        if op is None:
            return self.plain(p, items, is_list)
        if items is not None and any(f.unk for f in items):
            return [f for f in items if f.unk][:1], False
        return self.operator(p, items, is_list)

    def length(self, p: Param, items: list[Field] | None) -> Field:
        """``${#X}``, ``${#A[@]}``."""
        if items is None:
            return Field("0", self.at.src(p.line), text=p.text)
        cause = next((f.unk for f in items if f.unk), None)
        if cause is not None:  # its why says what would make it known (--nodes ...)
            return self.unknown(p, f"length of a value only known at run time ({cause.expr}: "
                                   f"{cause.why})")
        cond = next((f.cond for f in items if f.cond), None)
        if cond is not None:  # words that may be absent: how many is not known
            return self.unknown(p, f"it counts a value added {cond.why}")
        self.prov.consume(items)
        n = len(items) if (p.index in ("@", "*")) else len(items[0].value)
        return Field(str(n), self.at.src(p.line), text=p.text)

    def plain(self, p: Param, items: list[Field] | None,
              is_list: bool) -> tuple[list[Field], bool]:
        """``$X``, ``${A[@]}`` with no operator."""
        name = p.name
        if items is None and p.index in ("@", "*"):
            # arrays are never inherited from the environment: unset is empty in bash,
            # unless a sourced file that was not found may have set it
            if not self.found.missing:
                return [], True
            why = f"{name} is not set here; it may be set by {self.found.missing[-1]}, " \
                  "which was not found"
            return [self.unknown(p, why, extra=True)], False
        if items is None:
            why = f"{name} is not set and has no default: pass --env {name}=VALUE"
            got = self.unknown(p, why)
            got.bare = True  # set nowhere in the script: empty unless the environment sets it
            return [got], False
        return items, is_list

    def operator(self, p: Param, items: list[Field] | None,
                 is_list: bool) -> tuple[list[Field], bool]:
        """``${X:-d}``, ``${X:=d}``, ``${X:?m}``, ``${X:+a}``, ``${X%p}``, ``${X/a/b}``..."""
        name, op = p.name, p.op
        empty = items is None or (not is_list and items[0].value == "")
        if op in (":-", "-", ":=", "="):
            if items is None or (empty and op[0] == ":"):
                got = self.join(p.arg)
                if op in (":=", "="):
                    self.sh.vars[name] = Var([Field(got.value, got.src, got.unk, got.text)], False)
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
                return [Field("", self.at.src(p.line), text=p.text)], False
            got = self.join(p.arg)
            return [Field(got.value, got.src, got.unk, p.text)], False
        if items is None:
            items, is_list = [Field("", self.at.src(p.line), text=p.text)], False
        arg = self.join(p.arg) if p.arg is not None else Field("", self.at.src(p.line))
        if arg.unk:
            return [Field(None, arg.src, arg.unk, p.text)], False
        if op == ":" and (p.index in ("@", "*") or p.name in ("@", "*")):
            return self.slice(items, arg.value, p), is_list
        out = []
        self.prov.consume(items)
        for f in items:
            try:
                v = self.transform(f.value, op, arg.value, p)
            except ArithError as e:
                return [self.unknown(p, f"${{...}} offset: {e}")], False
            out.append(Field(v, f.src, None, f.text, False, f.cond))
        return out, is_list

    def slice(self, items: list[Field], arg: str, p: Param) -> list[Field]:
        """``${A[@]:off:len}`` / ``${@:off:len}``: a slice of the words, not of each word
        (for ``$@`` offset 1 is the first argument)."""
        if any(f.unk for f in items):
            return [self.unknown(p, "a slice of words only known at run time", extra=True)]
        lookup = self.arith_lookup(p)
        off, _, ln = arg.partition(":")
        try:
            a = arith(off, lookup) if off.strip() else 0
            b = arith(ln, lookup) if ln.strip() else None
        except ArithError as e:
            return [self.unknown(p, f"${{...}} offset: {e}", extra=True)]
        words = list(items)
        if p.name in ("@", "*"):  # $0 comes first
            words = [Field(self.at.main_abs, self.at.src(p.line), text=p.text)] + words
        a = max(0, len(words) + a) if a < 0 else a
        end = len(words) if b is None else (a + b if b >= 0 else len(words) + b)
        self.prov.consume(words)
        return words[a:max(a, end)]

    def transform(self, v: str, op: str, arg: str, p: Param) -> str:
        if op in ("#", "##", "%", "%%"):
            return strip(v, arg, op)
        if op in ("^^", "^"):
            return v.upper() if op == "^^" else v[:1].upper() + v[1:]
        if op in (",,", ","):
            return v.lower() if op == ",," else v[:1].lower() + v[1:]
        if op == ":":
            lookup = self.arith_lookup(p)
            off, _, ln = arg.partition(":")
            a = arith(off, lookup)
            a = max(0, len(v) + a) if a < 0 else a
            if not ln:
                return v[a:]
            b = arith(ln, lookup)
            return v[a:a + b] if b >= 0 else v[a:len(v) + b]
        rep = self.join(p.arg2).value if p.arg2 is not None else ""
        rep = rep or ""
        if not arg:
            return v
        rx = glob_re(arg)
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
                raise ArithError(f"{name} is not set: pass --env {name}=VALUE")
            f = items[0]
            if f.unk:
                raise ArithError(f.unk.why)
            if PID in f.value:
                return arith(f.value, None)  # its ArithError says why
            try:
                return int(f.value.strip() or "0")
            except ValueError:
                raise ArithError(f"{name}={f.value!r} is not an integer") from None
        return lookup

    def arith(self, part: Arith) -> Field:
        got = self.join(part.expr)
        if got.unk:
            return Field(None, got.src, got.unk, part.text)
        try:
            v = arith(got.value, self.arith_lookup(part))
        except ArithError as e:
            field = self.unknown(part, f"arithmetic {part.text}: {e}")
            for name in arith_targets(got.value):  # $((i++)): not followed, so i is unknown
                self.sh.vars[name] = Var([Field(None, field.src, Unk(
                    part.text, field.src, f"{name} is assigned in {part.text}, which is not "
                    "followed"), part.text)], False)
            return field
        return Field(str(v), self.at.src(part.line), text=part.text)

    def topology_flags(self, path: str, cwd: str | None) -> tuple[str | None, str]:
        """``$(miles-topology flags FILE.yaml)``: the YAML's flags, read with the variables
        exported here (what that command sees); None and why when that is not known."""
        sh = self.sh
        if not path.startswith("/"):
            if (cwd or sh.cwd) is None:
                return None, "a relative topology path depends on where the script is run"
            path = os.path.join(cwd or sh.cwd, path)
        env = {}
        for k, v in sh.vars.items():
            if (k in sh.exported or k in sh.inherited or sh.allexport) and not v.array:
                f = v.items[0] if v.items else None
                env[k] = None if f is None or f.unk or f.cond else f.value
        try:  # a file the script names: through the gate
            path = str(gate.find(path, self.at.roots, os.path.dirname(self.at.main_abs),
                                 limit=gate.AST_LIMIT))
        except gate.Refused as e:
            return None, str(e)
        except OSError:
            pass  # not there: `flags` says so
        unknown = [k for k in env_names(path) if k in env and env[k] is None]
        if unknown:
            return None, f"{path} reads {', '.join(unknown)}, known only at run time"
        try:
            return flags_text(path, {k: v for k, v in env.items() if v is not None},
                              check=False, sep=" "), ""
        except InputError as e:
            return None, f"miles-topology flags {path} fails: {str(e).splitlines()[0]}"

    def substitute(self, sub: Sub) -> Field:
        """Only the idioms that locate files (dirname, basename, cd && pwd, realpath) and
        echo/printf, after ``IFS=...`` (the substitution is a subshell: it stays there)."""
        saved = self.sh.vars.get("IFS")
        try:
            return self._substitute(sub)
        finally:
            if saved is None:
                self.sh.vars.pop("IFS", None)
            else:
                self.sh.vars["IFS"] = saved

    def _substitute(self, sub: Sub) -> Field:
        probe = _gpu_probe(sub)
        if probe is not None:
            return self.gpus(sub, probe)
        if len(sub.body) == 1 and (type(sub.body[0]) is syntax.Pipe and not sub.body[0].neg or
                                   _filter(sub.body[0])):
            cmds = sub.body[0].cmds if type(sub.body[0]) is syntax.Pipe else sub.body
            got = self.filtered(cmds, sub)
            if got.unk is None:
                got.value = got.value.rstrip("\n")
            return got
        if len(sub.body) == 1 and _python(sub.body[0]):
            return self.helper(sub.body[0], sub)
        cwd, out = None, []
        cmds = []
        for node in sub.body:
            if type(node) is syntax.AndOr and all(op in (None, "&&") for op, _ in node.items):
                cmds.extend(c for _, c in node.items)
            else:
                cmds.append(node)
        ifs = False
        for node in cmds:
            if type(node) is syntax.Simple and node.assigns and not node.words:
                for a in node.assigns:
                    if a.name != "IFS":
                        continue
                    got = self.join(a.value) if a.array is None and a.index is None else \
                        self.unknown(sub, "IFS is set to an array")
                    if got.unk:
                        return Field(None, got.src, got.unk, sub.text)
                    self.sh.vars["IFS"] = Var([Field(got.value, got.src, text=a.text)], False)
                    ifs = True
                continue
            if type(node) is not syntax.Simple or node.assigns or not node.words:
                first = node.cmds[0] if type(node) is syntax.Pipe else node
                what = first.words[0].text if type(first) is syntax.Simple and first.words \
                    else "commands"
                return self.unknown(sub, f"command substitution runs '{what}' (in a pipeline "
                                         "or compound command) when the script runs")
            if ifs and any(type(p) is not Lit and not p.quoted for w in node.words
                           for p in w.parts):
                return self.unknown(sub, "IFS is changed, which changes how the unquoted "
                                         "words are split")
            args = []
            for w in node.words:
                args.extend(self.expand(w))
            for f in args:
                if f.unk:
                    return Field(None, f.src, f.unk, sub.text)
                if f.cond:
                    return Field(None, f.cond.src, Unk(sub.text, f.cond.src, "it includes a "
                                                       f"value added {f.cond.why}"), sub.text)
            if not args:  # the words expanded to nothing: no command runs
                continue
            got = self.idiom(sub, [f.value for f in args], cwd, out)
            if type(got) is Field:
                return got
            cwd = got
        return Field("\n".join(out).rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def idiom(self, sub: Sub, vals: list[str], cwd: str | None, out: list[str]):
        """One command of a substitution that locates files or prints: its output goes to
        `out`; the directory after it (``cd``) is returned, or an unknown Field."""
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
            out.extend(dirname(v) for v in rest)
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
        elif name == "printf" and len(vals) > 1 and vals[1] != "-v":
            got = printf(vals[1], vals[2:])
            if got is None:
                return self.unknown(sub, "printf with a format not modelled")
            out.append(got)
        elif name in ("true", ":"):
            pass
        elif tuple(vals[:2]) == COMMAND and len(vals) == 3:  # our own, see yamlflags.py
            got, why = self.topology_flags(vals[2], cwd)
            if got is None:  # visible: the eval of it would otherwise drop it quietly
                self.found.unknown(sub.text, self.at.src(sub.line), why)
                return self.unknown(sub, why)
            out.append(got)
        else:
            return self.unknown(sub, f"command substitution runs '{name}' when the script "
                                     "runs")
        return cwd

    def gpus(self, sub: Sub, cmds: list) -> Field:
        """``$(nvidia-smi -L | wc -l)``, ``$(nvidia-smi --query-gpu=name ...)``, ``$(ray
        status | grep GPU ...)``, ``$(scontrol show hostnames "$SLURM_JOB_NODELIST")``:
        answered from the modelled cluster (the one Python launchers' probes get), else
        unknown."""
        argvs = []
        for c in cmds:
            words = c.words[:3] if c is cmds[0] and c.words[0].literal() == "scontrol" else \
                c.words  # scontrol show hostnames $SLURM_JOB_NODELIST: the modelled nodes
            args = [f for w in words for f in self.expand(w)]
            bad = next((f for f in args if f.unk or f.cond), None)
            if bad is not None:
                unk = bad.unk or Unk(sub.text, bad.cond.src, f"it includes a value added "
                                     f"{bad.cond.why}")
                return Field(None, unk.src, unk, sub.text)
            argvs.append([f.value for f in args])
        name = os.path.basename(argvs[0][0])
        if self.cluster is None:
            return self.unknown(sub, f"'{name}' asks the machine the script runs on; pass "
                                     "--nodes N --gpus-per-node N (and --gpu) to answer it "
                                     "from the modelled cluster")
        ran, _ = self.cluster.answer(None, " | ".join(shlex.join(a) for a in argvs))
        if ran is None:
            return self.unknown(sub, f"this use of '{name}' is not modelled; what it prints "
                                     "is only known when the script runs")
        self.filter_status = ran.status
        return Field(ran.stdout.rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def filtered(self, cmds: list, at) -> Field:
        """What a pipeline of text filters prints over known text (textfilters.py: echo,
        printf, tr, wc, cut, grep ...; ``cat FILE`` of a file the script wrote), never run;
        unknown when a command is not such a filter or a word is not known."""
        argvs: list[list[str]] = []
        text = ""
        for k, c in enumerate(cmds):
            if type(c) is not syntax.Simple or c.assigns or c.prefix or not c.words or \
                    (k and c.stdin is not None):
                return self.unknown(at, "command substitution runs a pipeline with more than "
                                        "text filters when the script runs")
            args = [f for w in c.words for f in self.expand(w)]
            bad = next((f for f in args if f.unk or f.cond), None)
            if bad is not None:
                unk = bad.unk or Unk(at.text, bad.cond.src, f"it includes a value added "
                                     f"{bad.cond.why}")
                return Field(None, unk.src, unk, at.text)
            argv = [f.value for f in args]
            if k == 0 and c.stdin is not None:
                got = self.stdin(c, argv[0] if argv else "")
                if got.unk:
                    return Field(None, got.src, got.unk, at.text)
                text = got.value
            if k == 0 and argv and argv[0] == "cat" and len(argv) > 1:
                files = [self.written_text(a) for a in argv[1:]]
                if any(f is None for f in files):
                    return self.unknown(at, f"'{' '.join(argv)}' reads a file only known when "
                                            "the script runs")
                text, argv = "".join(files), ["cat"]
            argvs.append(argv)
        ran = run_pipeline(argvs, text)
        if ran is None:
            names = " | ".join(a[0] for a in argvs if a)
            return self.unknown(at, f"'{names}' is not a text filter modelled here; its "
                                    "output is only known when the script runs")
        self.filter_status = ran.status
        return Field(ran.stdout, self.at.src(at.line), text=at.text)

    def stdin(self, n: syntax.Simple, what: str) -> Field:
        """The text a command reads: a here-string's word (plus a newline), the output of
        ``< <(...)`` when it is known, a here-document's text, else unknown."""
        src = self.at.src(n.line)
        got = n.stdin
        if type(got) is syntax.Word:
            f = self.join(got)
            return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
        if type(got) is syntax.Sub:
            f = self.substitute(got)
            return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
        if type(got) is syntax.Heredoc:  # quoted delimiter: as written; else expanded first
            f = self.join(got.word) if got.word is not None else Field(got.text, src,
                                                                        text=got.text)
            return f if f.unk or f.cond else Field(f.value, src, text=what)
        why = "standard input, only known when the script runs" if got is None else \
            "a file, only known when the script runs"
        return Field(None, src, Unk(what, src, f"{what} reads {why}"), what)

    def path_of(self, word) -> str | None:
        """A file name as a word gives it (``$$``, the shell's pid, the same all through
        the script); None when it is not known."""
        got = self.join(word)
        return None if got.unk or got.cond else got.value

    def helper(self, node, sub: Sub) -> Field:
        """``$(python3 .../model_args_utils.py NAME)``, ``$(python3 -c ...)``: a Python
        program run in the launcher sandbox (pylaunch.run_program), with the variables this
        shell exports and its own ``NAME=VALUE`` prefix (miles' geo3k example passes
        ``MODEL_ARGS_ROTARY_BASE=5000000``); what it prints is known text. One that fails
        leaves the value unknown with its error."""
        args = [f for w in node.words for f in self.expand(w)]
        given = [(a.name, self.join(a.value)) for a in node.prefix if a.array is None and
                 a.index is None and a.value is not None]
        bad = next((f for f in args + [g for _, g in given] if f.unk or f.cond), None)
        if bad is not None:
            unk = bad.unk or Unk(sub.text, bad.cond.src, f"it includes a value added "
                                 f"{bad.cond.why}")
            return Field(None, unk.src, unk, sub.text)
        argv = [f.value for f in args[1:]]
        if node.stdin is not None:  # python - <<PY ... PY: the here-document is the code
            code = self.stdin(node, "python3")
            if code.unk or code.cond:
                return self.unknown(sub, "the code python reads from its standard input is "
                                         "only known when the script runs")
            argv = ["-c", code.value]  # (tree-sitter-bash drops the '-' before <<)
        env = self.exports() | {name: f.value for name, f in given}
        cwd = self.sh.cwd or os.path.dirname(self.at.main_abs)
        words = list(argv)
        while words and words[0].startswith("-") and words[0] not in ("-c", "-m", "-"):
            words.pop(0)  # -u, -B: as run_program skips them
        program = words[0] if words and not words[0].startswith("-") else None
        if program is not None:  # its file is one the script names: through the gate
            try:
                gate.admit(os.path.join(cwd, program), self.at.roots)
            except gate.Refused as e:
                return self.unknown(sub, f"the helper is not run: {e}")
            except OSError:
                pass  # not there: run_program says so
        probe = _probe(argv, cwd, self.at.roots)
        if probe and self.cluster is None:  # here it would answer for this machine
            return self.unknown(sub, f"the helper probes the machine it runs on ('{probe}'); "
                                     "pass --nodes N --gpus-per-node N (and --gpu) to answer "
                                     "it from the modelled cluster")
        # a probe runs with the stand-ins Python launchers get (torch, ray, nvidia-smi
        # answered from the model); any other helper with what is installed
        cluster = self.cluster if probe else None
        key = (tuple(argv), tuple(sorted(env.items())), cwd, cluster and cluster.line())
        got = self.helpers.get(key)
        if got is None:
            from ..pylaunch import run_program  # the sandbox: only when a script needs it

            got = self.helpers[key] = run_program(argv, env=env, cwd=cwd, cluster=cluster,
                                                  confine=self.at.roots)
        shown = " ".join(["python3", *argv])
        if len(shown) > 120:
            shown = shown[:117] + "..."
        if got.status != 0 or got.error:
            why = got.error or f"exited with status {got.status}"
            return self.unknown(sub, f"the helper '{shown}' gave no output: {why}")
        if len(got.stdout) > MAX_VALUE:
            return self.unknown(sub, f"the helper '{shown}' printed more than "
                                     f"{MAX_VALUE >> 20} MB")
        return Field(got.stdout.rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def exports(self) -> dict[str, str]:
        """The known variables a child process gets (export, declare -x, set -a, --env)."""
        names = set(self.sh.vars) if self.sh.allexport else self.sh.exported | self.sh.inherited
        out = {}
        for name in names:
            var = self.sh.vars.get(name)
            if var is not None and not var.array and var.items and var.items[0].value \
                    is not None and var.items[0].cond is None:
                out[name] = var.items[0].value
        return out

    def written_text(self, path: str) -> str | None:
        """The text of a file this script wrote (``cat > F <<EOF``, ``echo ... > F``)."""
        return self.sh.written.get(self.file_key(path))

    def file_key(self, path: str) -> str:
        if not path.startswith("/") and self.sh.cwd:
            path = os.path.join(self.sh.cwd, path)
        return os.path.normpath(path)


_PROBES = re.compile(r"\b(torch|cuda|ray|nvidia[-_]smi|pynvml|GPUtil|psutil|subprocess|popen|"
                     r"gethostname|cpu_count|platform|socket|os\.system|sched_getaffinity)\b")


def _probe(argv: list[str], cwd: str, roots=None) -> str | None:
    """What in a helper's code (``-c CODE``, or the FILE itself) asks the machine about its
    GPUs, CPUs or name; None when it asks nothing (its imports are not read)."""
    words = [a for a in argv if not (a.startswith("-") and a not in ("-c", "-m"))]
    if words[:1] == ["-c"] and len(words) > 1:
        text = words[1]
    elif words[:1] == ["-m"]:
        text = words[1] if len(words) > 1 else ""
    elif words:
        path = words[0] if os.path.isabs(words[0]) else os.path.join(cwd, words[0])
        try:
            text = gate.read_text(path, roots)[:1 << 20]
        except (OSError, gate.Refused):
            return None  # not there or refused: `helper` says so
    else:
        return None
    m = _PROBES.search(text)
    return m.group() if m else None


def _gpu_probe(sub: Sub) -> list | None:
    """The commands of ``$(nvidia-smi ... [| filters])`` / ``$(rocm-smi ...)``, else None."""
    if sub.body is None or len(sub.body) != 1:
        return None
    node = sub.body[0]
    cmds = node.cmds if type(node) is syntax.Pipe and not node.neg else [node]
    if not all(type(c) is syntax.Simple and c.words and not c.assigns and c.stdin is None
               for c in cmds):
        return None
    words = [w.literal() for w in cmds[0].words]
    head = os.path.basename(words[0] or "")
    if head == "scontrol" and words[1:3] == ["show", "hostnames"]:
        # the job's nodes: its own list (bash reads $SLURM_JOB_NODELIST; so does scontrol
        # with no list given) is the modelled cluster's
        rest = [w.text.strip('"{}$') for w in cmds[0].words[3:]]
        return cmds if rest in ([], ["SLURM_JOB_NODELIST"], ["SLURM_NODELIST"]) else None
    return cmds if head in ("nvidia-smi", "rocm-smi") or words[:2] == ["ray", "status"] \
        else None


def _python(node) -> bool:
    """``python3 ...`` / ``python ...`` alone in a command substitution."""
    if type(node) is not syntax.Simple or node.assigns or not node.words or \
            any(a.array is not None or a.index is not None for a in node.prefix):
        return False
    head = node.words[0].literal() or ""
    if node.stdin is not None:  # python - <<PY: the code is the here-document
        return type(node.stdin) is syntax.Heredoc and os.path.basename(head) in \
            ("python3", "python") and [w.literal() for w in node.words[1:]] in ([], ["-"])
    return os.path.basename(head) in ("python3", "python") and len(node.words) > 1


def _filter(node) -> bool:
    """A lone command of textfilters' (not echo/printf: their output is read above)."""
    return type(node) is syntax.Simple and bool(node.words) and \
        node.words[0].literal() in FILTERS and node.words[0].literal() not in ("echo", "printf")
