"""Branches: ``a && b || c``, ``if``, ``case``. A branch decided by known values is the only
one run. One decided only at run time is run from the state before it, each way it may go,
and the ways are joined after it (a data-flow merge): a variable that ends the same in every
way keeps its value, one that differs is unknown from there, with the branch as the reason.
So ``if [ -n "$WANDB_KEY" ]; then WANDB_ARGS=(...); fi`` leaves the layout values known.
Commands in such a branch still run under the condition (a launch there is conditional, a
source there is guarded); only what they set is joined. A way that leaves (``exit``, a
``return``: state.Leave) is not joined into what follows: a return's state is joined where its
function or file ends (interpret.Reader.ending)."""

from __future__ import annotations

from . import syntax
from .assign import may_exit
from .pattern import fullmatch
from .state import Leave
from .values import Unk

_CHAIN = 6  # an and-or list followed way by way up to this many commands after the test
_GUARD = " (the way known values choose exits: bash reaches the launch only another way)"


class Branches:
    """The branches of one read (`r`: interpret.Reader)."""

    def __init__(self, r):
        self.r = r

    def and_or(self, n: syntax.AndOr, status: bool | None, reason: str, cond: Unk | None,
               line: int):
        r = self.r
        last = len(n.items) - 1
        for k, (op, cmd) in enumerate(n.items[1:], 1):
            if status is None and (cond is None or r.sh.joined(cond)) and last - k < _CHAIN:
                return self.chain(n, k, reason, cond, line)
            if status is None:
                why = f"only if the command before '{op}' at {r.at.src(line)} " + (
                    "succeeds" if op == "&&" else "fails") + reason
                inner = r.sh.under(cond, lambda op=op, why=why: Unk(op, r.at.src(line), why))
                with r.testing(k < last):
                    r.node(cmd, inner)
                status = None
            elif status == (op == "&&"):
                status, start = r.tests.status([cmd], cond), self.start(cond, [cmd])
                try:
                    with r.testing(k < last):
                        r.node(cmd, cond)
                except Leave as e:
                    if start is None or e.kind != "exit" or last - k >= _CHAIN:
                        raise
                    r.sh.restore(start)  # `[ -z "${M:-}" ] && { echo need M; exit 1; }`
                    return self.chain(n, k, _GUARD, cond, line)

    def chain(self, n: syntax.AndOr, first: int, reason: str, cond: Unk | None, line: int):
        """The rest of ``a && b || c`` from item `first`, the command before it decided at run
        time: an if of its own (``[ -n "$TP" ] && A="--tp $TP" || A=""``). Each way it may
        go is followed with the status it ends in: a command runs in the ways whose status
        lets it, a status known only at run time splitting the way in two (bash runs `c`
        also when `b` fails, unless `b`'s status is known: an assignment's is 0)."""
        r, sh = self.r, self.r.sh
        last = len(n.items) - 1
        with _Fork(r, cond) as fork:
            ways: list[tuple[tuple, bool | None]] = [(sh.snapshot(), None)]
            for k, (op, cmd) in enumerate(n.items[first:], first):
                runs, nxt = op == "&&", []
                for state, status in ways:
                    if status is not None and status != runs:
                        nxt.append((state, status))  # skipped: its status stands
                        continue
                    sh.restore(state)
                    if status is None:  # the way that skips it, the one that runs it
                        nxt.append((sh.snapshot(), not runs))
                        fork.open(op, line, f"only if the command before '{op}' at "
                                  f"{r.at.src(line)} " + ("succeeds" if runs else "fails") +
                                  reason)
                    status = r.tests.status([cmd], fork.cond)
                    try:
                        with r.testing(k < last):
                            r.node(cmd, fork.cond)
                    except Leave as e:
                        fork.leaves(e)
                        continue
                    nxt.append((sh.snapshot(), status))
                ways = nxt
            if not ways:
                raise fork.left
            sh.restore(ways[-1][0])
            fork.ends.extend(w[0] for w in ways[:-1])
            fork.end()

    def start(self, cond: Unk | None, nodes: list) -> tuple | None:
        """The state before a branch whose way known values choose may exit: then bash
        reaches the launch only another way (the guard ``if [ -z "${MODEL:-}" ]; then echo
        usage; exit 1; fi`` with MODEL unset here, as it is not when the script is run), so
        the branch is read again as decided at run time, from this state."""
        r = self.r
        return r.sh.snapshot() if r.sh.plain(cond) is None and may_exit(nodes, r.sh.funcs) \
            else None

    def if_(self, n: syntax.If, cond: Unk | None):
        start = self.start(cond, [n])
        with _Fork(self.r, cond) as fork:
            try:
                fork.live(lambda: self.ways_of_if(n, fork))
            except Leave as e:
                if start is None or e.kind != "exit" or fork.cond is not fork.entry:
                    raise
                self.r.sh.restore(start)
                fork.live(lambda: self.ways_of_if(n, fork, forced=True))
            fork.end()

    def ways_of_if(self, n: syntax.If, fork: _Fork, forced: bool = False):
        """The ways of an if (`forced`: each test taken as decided at run time)."""
        r = self.r
        for test, body in n.branches:
            status = None if forced else r.tests.status(test, fork.cond)
            reason = _GUARD if forced else r.tests.why_unknown
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
        word, start = r.w.join(n.word), self.start(cond, [n])
        why = f"inside a 'case {n.word.text}' at {r.at.src(n.line)} whose value is only " \
              "known at run time"
        with _Fork(r, cond) as fork:
            if word.unk:
                fork.open("case", n.line, why)
            try:
                fork.live(lambda: self.arms(n, word, fork))
            except Leave as e:
                if start is None or e.kind != "exit" or fork.cond is not fork.entry:
                    raise
                r.sh.restore(start)
                fork.open("case", n.line, why + _GUARD)
                fork.live(lambda: self.arms(n, None, fork))
            fork.end()

    def arms(self, n: syntax.Case, word, fork: _Fork):
        r = self.r
        for pats, body, more in n.arms:
            matched = self.matches(word, pats)
            if matched is True and not more:
                return r.run(body, fork.cond)
            why = f"inside a 'case' arm at {r.at.src(n.line)} whose pattern is only known " \
                  "at run time"
            if matched is True:
                r.run(body, fork.cond)
            elif matched is None and more:  # `;;&`: an if of its own, then the next arms
                with _Fork(r, fork.cond) as arm:
                    arm.open("case", n.line, why)
                    arm.way(body)
                    arm.end()
            elif matched is None:
                fork.open("case", n.line, why)
                fork.way(body)
        return None

    def call(self, name: str, fields: list, n: syntax.Simple, cond: Unk | None):
        """A call of a function defined differently in the ways of a run-time branch
        (state.Either): each definition is a way (and, where a way defined none, a way that
        runs nothing)."""
        r = self.r
        defs = r.sh.funcs[name]
        alts = list(defs) + ([None] if defs.missing else [])
        with _Fork(r, cond) as fork:
            fork.open("call", n.line, f"in the call of '{name}' at {r.at.src(n.line)}, a "
                      f"function defined {defs.cond.why}")

            def one(body):
                return None if body is None else r.call(name, fields, n, fork.cond, [body])
            for body in alts[:-1]:
                fork.way([], lambda b=body: one(b))
            fork.live(lambda: one(alts[-1]))
            fork.end()

    def matches(self, word, pats: list) -> bool | None:
        """Whether a case arm takes the word: None when only known at run time."""
        if word is None or word.unk:  # `*)` takes every value the arms before it did not
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

    __slots__ = ("r", "cond", "joins", "ends", "entry", "errexit", "before", "left")

    def __init__(self, r, cond: Unk | None):
        self.r, self.cond = r, cond
        self.joins = cond is None or r.sh.joined(cond)
        self.ends: list[tuple] = []
        self.entry = cond
        self.errexit = r.sh.errexit
        self.left: Leave | None = None  # how a way left (`return` kept over `exit`)

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

    def way(self, body: list, run=None):
        """One body that may run (or `run()`): from the live state, kept apart when
        joining."""
        sh = self.r.sh
        run = run or (lambda: self.r.run(body, self.cond))
        if not self.joins:
            return run()
        start = sh.snapshot()
        try:
            run()
            self.ends.append(sh.snapshot())
        except Leave as e:  # it goes no further: nothing it sets comes after the branch
            self.leaves(e)
        sh.restore(start)

    def leaves(self, e: Leave):
        if self.left is None or e.kind == "return":
            self.left = e

    def live(self, run):
        """The way past the kept ones (an else, a known arm, no arm): when it leaves, one
        kept way is the live state; when every way leaves, so does the branch."""
        try:
            run()
        except Leave as e:
            self.leaves(e)
            if not self.ends:
                raise self.left from None
            self.r.sh.restore(self.ends.pop())

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
