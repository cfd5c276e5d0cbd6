"""Loops (the loop half of Oils' cmd_eval): a ``for``/``while``/``until`` whose words or
test known values decide is stepped through iteration by iteration, with its real branches,
``break`` and ``continue``; any other loop is read once as run an unknown number of times.
A loop that turns out to depend on a run-time value is undone (a snapshot of the shell state
and the findings) and read that way instead."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..model.errors import Location
from . import syntax
from .assign import walk_called
from .budget import MAX_READ_LOOP_STEPS
from .values import ArithError, Field, Unk, Var, arith, arith_targets

# what ends a loop from inside it; in a function it calls, `return` only ends that function
_LEAVE = frozenset(("break", "exit", "exec", "logout", "source", ".", "eval", "command",
                    "builtin"))

_STEP, _UNSTEPPED, _BARRIER = "step", "unstepped", None  # frames of `Loops.frames`


class _Jump(Exception):
    """``break N`` / ``continue N`` in a loop being stepped through."""

    def __init__(self, kind: str, n: int):
        super().__init__(kind)
        self.kind, self.n = kind, n


class _Unsteppable(Exception):
    """A loop being stepped through depends on something only known at run time: its
    effects are undone and it is read as a loop run an unknown number of times. `whole`:
    the outermost stepped loop gives up (the iteration cap counts nested loops too)."""

    def __init__(self, why: str, whole: bool = False):
        super().__init__(why)
        self.why, self.whole = why, whole


class Loops:
    """The loops of one read; `r` is the interpreter (interpret.Reader: `run`, `testing`,
    its conditions, assignments, words, budget, shell state and cursor)."""

    def __init__(self, r):
        self.r = r
        # loops around the command being run, innermost last: _STEP (stepped through),
        # _UNSTEPPED (run once for an unknown count), _BARRIER (a function, subshell or
        # file that `break` does not reach out of)
        self.frames: list[str | None] = []

    @contextmanager
    def barrier(self) -> Iterator[None]:
        """A function, subshell, here-document script or file: `break` stops here."""
        self.frames.append(_BARRIER)
        try:
            yield
        finally:
            self.frames.pop()

    def loop(self, n: syntax.Loop, cond: Unk | None):
        """A loop: stepped through when it can be, else its body read once under a
        condition that says it runs a number of times known only at run time."""
        r = self.r
        reason = ""
        if r.sh.plain(cond) is None and (n.kind == "for" and (n.words is not None or
                                                  n.header is not None) or n.cond):
            reason = self.step(n)
            if reason is None:
                return
        src = r.at.src(n.line)
        why = f"inside a '{n.kind}' loop at {src}, run a number of times known only at run " \
              "time" + reason
        inner = r.sh.under(cond, lambda: Unk(n.kind, src, why))
        if n.var:
            r.sh.vars[n.var] = Var([Field(None, inner.src, Unk(f"${n.var}", inner.src,
                                                               f"loop variable {n.var}"))],
                                   False)
        for part in n.header or ():
            for name in arith_targets(part.text) if part is not None else ():
                r.assigns.set(name, None, Unk(part.text, src, f"{name} is set by the header "
                                              f"of the loop at {src} ({why})"), src, inner,
                              part.text, part.text)
        self.frames.append(_UNSTEPPED)
        try:
            r.run(n.body, inner)
        finally:
            self.frames.pop()

    def step(self, n: syntax.Loop) -> str | None:
        """Run a ``for`` loop whose words (or ``((...))`` header) are known, each iteration
        with its real branches. None when done; else why not (its effects are undone)."""
        budget = self.r.budget
        outer = _STEP not in self.frames
        if budget.read_loop_steps >= MAX_READ_LOOP_STEPS:
            return f" (this read has stepped through {MAX_READ_LOOP_STEPS} loop iterations " \
                   "already; no more are followed)"
        if outer:
            budget.loop_begins()
        saved = self.snapshot()
        self.frames.append(_STEP)
        try:
            if n.header is not None:
                self.step_c(n)
            elif n.words is not None:
                self.step_words(n)
            else:
                self.step_while(n)
            return None
        except _Unsteppable as e:
            if e.whole and not outer:
                raise
            self.restore(saved)
            return f" ({e.why})"
        finally:
            self.frames.pop()

    def step_words(self, n: syntax.Loop):
        r = self.r
        src = r.at.src(n.line)
        fields: list[Field] = []
        for w in n.words:
            fields.extend(r.w.expand(w))
            bad = next((f.unk or f.cond for f in fields if f.unk or f.cond), None)
            if bad is not None:
                raise _Unsteppable(f"its word {w.text} is not known: {bad.why}")
        for f in fields:
            self.tick()
            if n.var:
                r.sh.inherited.discard(n.var)
                r.assigns.set(n.var, f.value, None, src, None, f.text, f.text)
            if self.iteration(n) == "break":
                return

    def step_c(self, n: syntax.Loop):
        init, test, update = n.header
        if init is not None:
            self.arith_step(init, n)
        while test is None or self.arith_step(test, n):
            self.tick()
            if self.iteration(n) == "break":
                return
            if update is not None:
                self.arith_step(update, n)

    def step_while(self, n: syntax.Loop):
        """``while``/``until`` whose test is decided by known values each time round (the
        ``while [[ $# -gt 0 ]]; do case "$1" ...`` and ``while getopts`` loops)."""
        r = self.r
        body = n.body[len(n.cond):]
        if _endless(n, body, r.sh.funcs):  # stepping it would only spend the budget
            raise _Unsteppable("nothing in it leaves it (no break, exit or return): it runs "
                               "until the process is stopped")
        while True:
            status = r.tests.status(n.cond, None)
            if status is None:
                raise _Unsteppable(f"its test is decided at run time{r.tests.why_unknown}")
            with r.testing():
                r.run(n.cond, None)
            if status == (n.kind == "until"):
                return
            self.tick()
            if self.iteration(n, body) == "break":
                return

    def iteration(self, n: syntax.Loop, body: list | None = None) -> str | None:
        """Run the body once: "break" when a ``break`` ends this loop."""
        try:
            self.r.run(n.body if body is None else body, None)
        except _Jump as e:
            if e.n > 1:
                raise _Jump(e.kind, e.n - 1) from None
            return "break" if e.kind == "break" else None
        return None

    def tick(self):
        why = self.r.budget.loop_over()
        if why is not None:
            raise _Unsteppable(why, whole=True)

    def arith_step(self, word: syntax.Word, n: syntax.Loop) -> int:
        """A part of a ``for ((...))`` header, evaluated with its assignments."""
        r = self.r
        got = r.w.join(word)
        if got.unk:
            raise _Unsteppable(f"((... {word.text} ...)) is not known: {got.unk.why}")
        src = r.at.src(n.line)
        try:
            return arith(got.value, r.w.arith_lookup(word), lambda name, v: r.assigns.arith_set(
                name, v, src, None, word.text))
        except ArithError as e:
            raise _Unsteppable(f"((... {word.text} ...)): {e}") from None

    def jump(self, kind: str, fields: list[Field], where: Location, cond: Unk | None):
        """``break N`` / ``continue N`` at `where`: ends iterations of the loops being
        stepped through. Where it is only known at run time whether (or how far) it jumps,
        a stepped loop it may reach is read as run an unknown number of times instead."""
        frames = self.frames
        if _STEP not in frames:
            return  # no loop is stepped through: each is already read as run at run time
        arg = fields[1].value if len(fields) > 1 else "1"
        count = int(arg) if arg is not None and arg.isdigit() and int(arg) > 0 else None
        at = f"'{kind}' at {where}"
        targets = []
        for k in range(len(frames) - 1, -1, -1):
            frame = frames[k]
            if frame is _BARRIER:
                if _STEP in frames[:k]:
                    raise _Unsteppable(f"{at} is in a function, subshell or sourced file "
                                       "run inside it")
                break
            targets.append(frame)
            if count is not None and len(targets) == count:
                break
        if _STEP not in targets and count is not None:
            return  # it leaves only loops read as run an unknown number of times
        if count is None:
            raise _Unsteppable(f"{at} leaves a number of loops known only at run time")
        if cond is not None or _UNSTEPPED in targets:
            raise _Unsteppable(f"{at} runs {cond.why}" if cond is not None else
                               f"{at} leaves a loop run a number of times known only at "
                               "run time")
        raise _Jump(kind, len(targets))

    def snapshot(self) -> tuple:
        """The state a loop may change, to undo a loop that cannot be stepped through."""
        return self.r.sh.snapshot(), self.r.found.mark()

    def restore(self, saved: tuple):
        shell, found = saved
        self.r.sh.restore(shell)
        self.r.found.undo(found)


def _endless(n: syntax.Loop, body: list, funcs: dict[str, list]) -> bool:
    """``while true`` / ``while :`` / ``until false`` whose body (with the functions it
    calls) has no command that can leave it: bash runs it until the process is stopped (a
    checkpoint poller in a background subshell), so each step is the last one again."""
    test = n.cond[0] if len(n.cond) == 1 else None
    if type(test) is not syntax.Simple or len(test.words) != 1 or test.assigns:
        return False
    word = test.words[0].literal()
    forever = ("false",) if n.kind == "until" else ("true", ":")
    if word not in forever:
        return False
    heads = [(m.words[0].literal() if m.words else "", called)
             for m, called in walk_called(body, funcs) if type(m) is syntax.Simple]
    # a `return` in a function the body calls leaves that function, not the body
    return all(h is not None and h not in _LEAVE and (called or h != "return")
               for h, called in heads)
