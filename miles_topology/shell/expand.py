"""Word expansion over known values: parameters (``${X:-d}``, ``${A[@]}``, ``${#A[@]}``,
``${X%p}``...), arithmetic, brace expansion and word splitting; command substitution through
its collaborator (substitute.py). Anything else is an unknown value that says why and where,
never a guess."""

from __future__ import annotations

import fnmatch
import os
import re

from . import syntax
from .cursor import Cursor
from .findings import Findings
from .provenance import Provenance
from .state import Shell
from .substitute import Substitutions
from .syntax import Arith, Lit, Param, Sub
from .values import (
    INT_LIMIT,
    MAX_ITEMS,
    OWN,
    PID,
    ArithError,
    Field,
    Unk,
    Var,
    arith,
    arith_targets,
    brace,
    glob_re,
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
    `expand` (fields), `join` (one field), `path_of`, `arith_lookup` and `file_key`; command
    substitution is its collaborator `subs` (substitute.Substitutions)."""

    def __init__(self, sh: Shell, at: Cursor, found: Findings, prov: Provenance):
        self.sh, self.at, self.found, self.prov = sh, at, found, prov
        self.subs = Substitutions(self)  # $(...): the commands it can know without running

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
            return [self.subs.substitute(part)], False
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

    def path_of(self, word) -> str | None:
        """A file name as a word gives it (``$$``, the shell's pid, the same all through
        the script); None when it is not known."""
        got = self.join(word)
        return None if got.unk or got.cond else got.value

    def file_key(self, path: str) -> str:
        if not path.startswith("/") and self.sh.cwd:
            path = os.path.join(self.sh.cwd, path)
        return os.path.normpath(path)
