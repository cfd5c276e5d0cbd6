"""Word expansion over known values: parameters (``${X:-d}``, ``${A[@]}``, ``${#A[@]}``,
``${X%p}``...), arithmetic, brace expansion and word splitting; command substitution through
its collaborator (substitute.py). Anything else is an unknown value that says why and where,
never a guess."""

from __future__ import annotations

import os
import re

from . import syntax
from .cursor import Cursor
from .findings import Findings
from .params import Params
from .provenance import Provenance
from .state import Shell
from .substitute import Substitutions
from .syntax import Arith, Lit, Param, Sub
from .values import (
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
                 "fcond", "own", "spans", "bare", "tail")

    def __init__(self, cond: Unk | None):
        self.fields: list[Field] = []
        self.owns: list[bool] = []
        self.cur: list[str] = []
        self.cond = cond
        self.has, self.src, self.unk, self.text, self.extra = False, None, None, None, True
        self.fcond, self.own, self.spans = cond, False, []
        self.bare = False  # the field is one bare unknown expansion (Field.bare)
        self.tail = ""  # Field.tail of the field being built

    def add(self, f: Field, origin=OWN):
        """`origin`: OWN for text of this word, else the span of a list item passed on."""
        if origin is OWN:
            self.own = True
        else:
            self.spans.append(origin)
        if self.src is None:
            self.src, self.text = f.src, f.text
        if f.unk is not None:
            self.unk = self.unk or f.unk
            self.tail = f.tail
        elif self.unk is not None:
            self.tail += f.value or ""
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
                                     self.bare and unk is not None,
                                     self.tail if unk is not None else ""))
            self.owns.append(self.own and not spans)
        self.cur.clear()  # the next field starts as __init__ left the first (one call less)
        self.has, self.src, self.unk, self.text, self.extra = False, None, None, None, True
        self.fcond, self.own, self.spans = self.cond, False, []
        self.bare, self.tail = False, ""


class Words:
    """Word expansion (Oils' word_eval beside cmd_eval): it reads the shell state and asks
    the cursor where it is; it never runs a command of the script. The interpreter calls
    `expand` (fields), `join` (one field), `path_of`, `arith_lookup` and `file_key`. Its
    collaborators: `params` (params.Params: ``${...}``) and `subs` (substitute.Substitutions:
    ``$(...)``)."""

    def __init__(self, sh: Shell, at: Cursor, found: Findings, prov: Provenance):
        self.sh, self.at, self.found, self.prov = sh, at, found, prov
        self.params = Params(self)  # ${...}: parameters and their operators
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
                              bare=f.bare and (is_list or not quoted), tail=f.tail))
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
        tail = ""  # Field.tail: the known text after the last unknown item
        for part in word.parts:
            if type(part) is Lit:
                out.append(part.text)
                tail += part.text
                continue
            items, is_list = self.part(part)
            self.prov.consume(items)
            sep = " " if is_list or len(items) < 2 else self.ifs_sep()  # "${A[*]}": IFS
            if sep is None:
                unk = unk or self.unknown(part, _IFS_JOIN).unk
            for n, f in enumerate(items):
                if n:
                    tail += sep or ""
                if f.unk is not None:
                    unk, tail = unk or f.unk, f.tail
                    continue
                if f.cond is not None:
                    cnd = cnd or f.cond
                if n:
                    out.append(sep or "")
                out.append(f.value)
                tail += f.value
        if unk is None and cnd is not None:
            unk, tail = Unk(word.text, cnd.src, f"it includes a value added {cnd.why}"), ""
        return Field(None if unk else "".join(out), self.at.src(word.line), unk, word.text,
                     tail=tail if unk else "")

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
            return self.params.param(part)
        if t is Sub:
            if part.body is None:  # syntax._only_in_heredocs
                return [self.unknown(part, "the here-document's expansions are not read here "
                                           "(arithmetic this reader's parser cannot follow)")], \
                    False
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

    def arith_lookup(self, part):
        def lookup(name: str) -> int:
            items, _ = self.params.lookup(name, None, part)
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
