"""Branches: ``a && b || c``, ``if``, ``case``. A branch decided by known values is the only
one run. One decided only at run time is run from the state before it, each way it may go,
and the ways are joined after it (a data-flow merge): a variable that ends the same in every
way keeps its value, one that differs is unknown from there, with the branch as the reason.
So ``if [ -n "$WANDB_KEY" ]; then WANDB_ARGS=(...); fi`` leaves the layout values known.
Commands in such a branch still run under the condition (a launch there is conditional, a
source there is guarded); only what they set is joined."""

from __future__ import annotations

from . import syntax
from .pattern import fullmatch
from .values import Unk


class Branches:
    """The branches of one read (`r`: interpret.Reader)."""

    def __init__(self, r):
        self.r = r

    def and_or(self, n: syntax.AndOr, status: bool | None, reason: str, cond: Unk | None,
               line: int):
        r = self.r
        last = len(n.items) - 1
        if status is None and last == 1 and (cond is None or r.sh.joined(cond)):
            op, cmd = n.items[1]  # `test && X=1`: an if of its own
            with _Fork(r, cond) as fork:
                fork.open(op, line, f"only if the command before '{op}' at "
                          f"{r.at.src(line)} " + ("succeeds" if op == "&&" else "fails") +
                          reason)
                fork.way([cmd])
                return fork.end()
        for k, (op, cmd) in enumerate(n.items[1:], 1):
            if status is None:
                why = f"only if the command before '{op}' at {r.at.src(line)} " + (
                    "succeeds" if op == "&&" else "fails") + reason
                inner = r.sh.under(cond, lambda op=op, why=why: Unk(op, r.at.src(line), why))
                with r.testing(k < last):
                    r.node(cmd, inner)
                status = None
            elif status == (op == "&&"):
                status = r.tests.status([cmd], cond)
                with r.testing(k < last):
                    r.node(cmd, cond)

    def if_(self, n: syntax.If, cond: Unk | None):
        with _Fork(self.r, cond) as fork:
            self.ways_of_if(n, fork)
            fork.end()

    def ways_of_if(self, n: syntax.If, fork: _Fork):
        r = self.r
        for test, body in n.branches:
            status = r.tests.status(test, fork.cond)
            reason = r.tests.why_unknown
            with r.testing():
                r.run(test, fork.cond)
            if status is True:
                return r.run(body, fork.cond)
            if status is None:
                line = test[0].line if test and hasattr(test[0], "line") else n.line
                fork.open("if", line, f"inside the 'if' at {r.at.src(line)}, whose condition "
                          "is decided at run time" + reason)
                r.guards.append(r.tests.tested_files(test))
                try:
                    fork.way(body)
                finally:
                    r.guards.pop()
        if n.orelse is not None:
            r.run(n.orelse, fork.cond)
        return None

    def case(self, n: syntax.Case, cond: Unk | None):
        r = self.r
        word = r.w.join(n.word)
        with _Fork(r, cond) as fork:
            if word.unk:
                fork.open("case", n.line, f"inside a 'case {n.word.text}' at "
                          f"{r.at.src(n.line)} whose value is only known at run time")
            for pats, body in n.arms:
                matched = self.matches(word, pats)
                if matched is True:
                    r.run(body, fork.cond)
                    break
                if matched is None:
                    fork.open("case", n.line, f"inside a 'case' arm at {r.at.src(n.line)} "
                              "whose pattern is only known at run time")
                    fork.way(body)
            fork.end()

    def matches(self, word, pats: list) -> bool | None:
        """Whether a case arm takes the word: None when only known at run time."""
        if word.unk:  # `*)` takes every value the arms before it did not
            return True if any(p.literal() == "*" and p.text == "*" for p in pats) else None
        for p in pats:
            pv = self.r.w.join(p)
            if pv.unk:
                return None
            if fullmatch(word.value, pv.value):
                return True
        return False


class _Fork:
    """The ways one branch command may go. Before the first test decided at run time there
    is one way; after it, each body is run from the state it starts in and its end state
    kept, and the way past them (the else, or no arm) goes on in the live state; `end` joins
    them. A branch under a condition that is not a join's (a loop run an unknown number of
    times, ``x && { ... }``) is not joined: what it sets is unknown there (assign.py)."""

    __slots__ = ("r", "cond", "joins", "ends", "entry", "errexit", "before")

    def __init__(self, r, cond: Unk | None):
        self.r, self.cond = r, cond
        self.joins = cond is None or r.sh.joined(cond)
        self.ends: list[tuple] = []
        self.entry = cond
        self.errexit = r.sh.errexit

    def open(self, kind: str, line: int, why: str):
        """A test decided at run time: what follows runs under a condition (the first one
        met names it)."""
        if self.cond is self.entry:
            src = self.r.at.src(line)
            self.cond = self.r.sh.under(self.entry, lambda: Unk(kind, src, why)) \
                if self.joins else self.entry or Unk(kind, src, why)
            if self.joins:
                self.r.sh.joins.append(self.cond)
                self.before = self.r.sh.copy_vars()

    def way(self, body: list):
        """One body that may run: from the live state, kept apart when joining."""
        sh = self.r.sh
        if not self.joins:
            return self.r.run(body, self.cond)
        start = sh.snapshot()
        self.r.run(body, self.cond)
        self.ends.append(sh.snapshot())
        sh.restore(start)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Its condition is no longer a join's, whether it ended or an exception left it
        (a loop undone because its `break` runs only in one way; a limit)."""
        if self.cond is not self.entry and self.joins:
            self.r.sh.joins[:] = [c for c in self.r.sh.joins if c is not self.cond]

    def end(self):
        """The live state is the last way; the kept ones are joined into it."""
        sh = self.r.sh
        if self.ends:
            sh.join(self.ends, self.cond, self.r.env, self.errexit, self.before)
