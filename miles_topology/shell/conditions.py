"""Conditions (Oils' sh_expr_eval / bool_eval): the exit status of a test command (``[ ]``,
``test``, ``[[ ]]``, ``(( ))``, ``true``, ``getopts``, a pipeline of text filters, ``&&``
and ``||`` of those) when known values decide it, else None with why. Nothing runs here: the
interpreter runs the test afterwards, with its real effects."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..reading.textfilters import FILTERS
from . import syntax
from .pattern import fullmatch
from .values import ArithError, Field, Unk, arith


class Conditions:
    """Decides tests over the words (`w`: expand, join, arith_lookup, and its substitution
    collaborator for text filters); `getopts` is the built-in's next step. `why_unknown`
    says what an undecided test depends on; `overlay` holds the assignments of one test's
    ``(( ))`` while it is decided."""

    def __init__(self, w, getopts: Callable):
        self.w, self.getopts = w, getopts
        self.why_unknown = ""
        self.overlay: dict[str, int] | None = None  # assignments of a test's (( )) so far

    def status(self, nodes: list, cond: Unk | None) -> bool | None:
        """Exit status of a test command when it is decided by known values, else None.

        When None, `why_unknown` says which value the test depends on. Nothing is changed:
        the test runs afterwards, so ``((...))`` assignments are kept aside meanwhile.
        """
        top = self.overlay is None
        if top:
            self.overlay = {}
        try:
            return self._status(nodes, cond)
        finally:
            if top:
                self.overlay = None

    def _status(self, nodes: list, cond: Unk | None) -> bool | None:
        self.why_unknown = ""
        if len(nodes) != 1:
            return None
        node = nodes[0]
        t = type(node)
        if t is syntax.Pipe:
            return self.pipe_status(node, cond)
        if t is syntax.AndOr:
            got = self._status([node.items[0][1]], cond)
            for op, cmd in node.items[1:]:
                if got is None:
                    return None
                if got == (op == "&&"):
                    got = self._status([cmd], cond)
            return got
        if t is syntax.ArithCmd:
            return self.arith_status(node)
        if t is not syntax.Simple:
            return None
        if not node.words:  # assignments only: true, unless a $(...) in them decides it
            return None if any(type(p) is syntax.Sub for a in node.assigns if a.value
                               for p in a.value.parts) or not node.assigns else True
        return self.simple_status(node)

    def pipe_status(self, node: syntax.Pipe, cond: Unk | None) -> bool | None:
        if len(node.cmds) > 1 and all(type(c) is syntax.Simple and c.words and
                                      c.words[0].literal() in FILTERS for c in node.cmds):
            # `echo "$M" | grep -q moe` over known text: the status of the last filter
            subs = self.w.subs
            out = subs.filtered(node.cmds, node.cmds[0].words[0])
            got = None if out.unk else subs.filter_status == 0
            if out.unk:
                self.why_unknown = f" ({out.unk.why})"
        else:
            got = self._status(node.cmds[-1:], cond)
        return None if got is None else (not got if node.neg else got)

    def simple_status(self, node: syntax.Simple) -> bool | None:
        """``true``, ``false``, ``getopts``, ``[ ]``, ``test``, ``[[ ]]`` over known words."""
        words = node.words
        head = words[0].text
        if head in ("true", ":"):
            return True
        if head == "false":
            return False
        if head == "getopts":
            got = self.getopts([f for w in words for f in self.w.expand(w)])
            if got is None:
                self.why_unknown = " (getopts over words only known at run time)"
            return None if got is None else got[0]
        if head == "[[":
            vals = [self.w.join(w) for w in words[1:]]
            if not vals or vals[-1].value != "]]":
                return None
            vals, fancy = vals[:-1], True
            if len(vals) == 3 and vals[1].value == "=~":
                return self.matches(vals, words[3])
        elif head in ("[", "test"):
            vals = [f for w in words[1:] for f in self.w.expand(w)]
            if head == "[":
                if not vals or vals[-1].value != "]":
                    return None
                vals = vals[:-1]
            fancy = False
        else:
            return None
        got = test(vals, fancy)
        bad = next((f.unk or f.cond for f in vals if f.unk or f.cond), None)
        if got is None and bad is not None:
            self.why_unknown = f" ({bad.why})"
        return got

    def matches(self, vals: list[Field], pattern: syntax.Word) -> bool | None:
        """``[[ S =~ RE ]]`` over known words: an unquoted pattern is a regular expression
        (Python's re reads the POSIX ERE forms scripts use), a quoted one literal text."""
        bad = next((f.unk or f.cond for f in vals if f.unk or f.cond), None)
        if bad is not None:
            self.why_unknown = f" ({bad.why})"
            return None
        quoted = {p.quoted for p in pattern.parts}
        if len(quoted) > 1:
            return None
        rx = re.escape(vals[2].value) if True in quoted else vals[2].value
        try:
            return re.search(rx, vals[0].value) is not None
        except re.error:
            return None

    def tested_files(self, nodes: list) -> frozenset[str]:
        """The known paths a test requires to exist (``[ -f F ]``, ``[[ -e F ]]``, ``test -r
        F``, alone or joined by ``&&``): the commands it guards run only where they do."""
        out: set[str] = set()
        for node in nodes:
            t = type(node)
            if t is syntax.AndOr:
                if all(op == "&&" for op, _ in node.items[1:]):
                    out |= self.tested_files([c for _, c in node.items])
            elif t is syntax.Pipe and not node.neg and len(node.cmds) == 1:
                out |= self.tested_files(node.cmds)
            elif t is syntax.Simple and node.words:
                words = [w.literal() for w in node.words]
                if words[0] == "[" and words[-1] == "]" or words[0] == "[[" and \
                        words[-1] == "]]":
                    words = words[1:-1]
                elif words[0] == "test":
                    words = words[1:]
                else:
                    continue
                if len(words) == 2 and words[0] in ("-f", "-e", "-r", "-s"):
                    got = self.w.join(node.words[-2] if node.words[-1].literal() in
                                      ("]", "]]") else node.words[-1])
                    if got.unk is None and got.cond is None:
                        out.add(got.value)
        return frozenset(out)

    def arith_status(self, node: syntax.ArithCmd) -> bool | None:
        """The status of ``(( expr ))`` (true when nonzero), computed before it runs: its
        assignments go to `overlay`, shared by the commands of one test (a && b)."""
        got = self.w.join(node.expr)
        if got.unk:
            self.why_unknown = f" ({got.unk.why})"
            return None
        overlay = self.overlay if self.overlay is not None else {}
        base = self.w.arith_lookup(node)
        try:
            return arith(got.value, lambda name: overlay[name] if name in overlay else
                         base(name), overlay.__setitem__) != 0
        except ArithError as e:
            self.why_unknown = f" ({e})"
            return None


_INTS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
         "-gt": int.__gt__, "-ge": int.__ge__}


def test(vals: list[Field], fancy: bool) -> bool | None:
    """``[ ... ]`` / ``[[ ... ]]`` (`fancy`) over known strings; None for anything else."""
    if any(f.unk or f.cond for f in vals):
        return None
    v = [f.value for f in vals]
    for sep in (("||", "-o"), ("&&", "-a")):
        for k in range(len(v) - 1, 0, -1):
            if v[k] in sep:
                a, b = test(vals[:k], fancy), test(vals[k + 1:], fancy)
                if a is None or b is None:
                    return None
                return (a or b) if sep[0] == "||" else (a and b)
    if v and v[0] == "!":
        r = test(vals[1:], fancy)
        return None if r is None else not r
    if len(v) == 1:
        return v[0] != ""
    if len(v) == 2 and v[0] in ("-z", "-n"):
        return (v[1] == "") == (v[0] == "-z")
    if len(v) == 3:
        return _binary(*v, fancy)
    return None


def _binary(a: str, op: str, b: str, fancy: bool) -> bool | None:
    if op in ("=", "==", "!="):
        eq = fullmatch(a, b) if fancy else a == b
        return eq if op != "!=" else not eq
    if op in _INTS:
        try:
            return _INTS[op](int(a), int(b))
        except ValueError:
            return None
    return None
