"""The interpreter: runs a script's syntax tree over a model of bash that knows only literal
values (variables, arrays, functions, ``source``, if/case over known tests, here-strings,
``read``/``mapfile``/``eval`` of known text). What is decided at run time (other command
output, branches on unknown conditions, unset variables) stays unknown with file:line.
The process environment is never read: only the ``env`` given, so a check is reproducible.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..model.errors import Location
from ..reading import gate
from ..reading.textfilters import FILTERS
from . import launch as launches
from . import syntax
from .budget import (
    MAX_EXPANDED,
    MAX_FILE,
    MAX_READ_LOOP_STEPS,
    MAX_STEPS,
    Budget,
    too_many,
)
from .builtins import Builtins
from .cursor import Cursor
from .expand import Words
from .findings import Findings
from .provenance import Provenance
from .records import ScriptReadError
from .state import Shell
from .values import (
    MAX_CALL_DEPTH,
    MAX_ITEMS,
    MAX_SOURCE_DEPTH,
    MAX_VALUE,
    PID,
    ArithError,
    Field,
    Unk,
    Var,
    arith,
    arith_targets,
    shown,
)

_STEP, _UNSTEPPED, _BARRIER = "step", "unstepped", None  # frames of `Reader.loops`


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


class Reader:
    """One read of one script (Oils' cmd_eval): runs commands over the shell state, with word
    expansion (`w`), the built-ins, the position (`at`), the findings, provenance and the
    budget as collaborators."""

    def __init__(self, path: Path, env: Mapping[str, str],
                 positional: Sequence[str] | None = None):
        self.env = {str(k): str(v) for k, v in env.items()}
        self.sh = Shell(_arguments(self.env, positional), {k for k in self.env
                                                          if not k.isdigit()})
        env_src = Location("<env>", 0)
        for k, v in self.env.items():
            if not k.isdigit():
                self.sh.vars[k] = Var([Field(v, env_src, text=f"--env {k}={v}")], False)
        self.at = Cursor(os.path.abspath(path), str(path))
        self.found = Findings()
        self.budget = Budget()
        self.prov = Provenance(self.sh, self.at, self.found)
        self.w = Words(self.sh, self.at, self.found, self.prov)
        self.builtins = Builtins(self, self.w, self.prov)
        self.cache: dict[str, list] = {}
        self.text: str | None = None  # the main script's text, when given instead of its file
        self.why_unknown = ""
        # loops around the command being run, innermost last: _STEP (stepped through),
        # _UNSTEPPED (run once for an unknown count), _BARRIER (a function, subshell or
        # file that `break` does not reach out of)
        self.loops: list[str | None] = []
        self.overlay: dict[str, int] | None = None  # assignments of a test's (( )) so far
        # >0 while a command runs where its failure is tested (an if/while test, before
        # && or ||, a negated pipeline): `set -e` does not stop bash there (bash(1), set -e)
        self.checked = 0

    def parse_file(self, abs_path: str, disp: str) -> list:
        if abs_path in self.cache:
            return self.cache[abs_path]
        data = self.file_bytes(abs_path, disp)
        self.budget.take_words(data, disp)
        text = data.decode("utf-8", "surrogateescape")
        self.at.newlines[abs_path] = [m.start() for m in re.finditer("\n", text)]
        body = self.parse(data, disp, counted=True)
        self.cache[abs_path] = body
        return body

    def file_bytes(self, abs_path: str, disp: str) -> bytes:
        try:
            if abs_path != self.at.main_abs or self.text is None:
                size = os.stat(abs_path).st_size
                if size > MAX_FILE:
                    raise ScriptReadError(
                        f"{disp}:0: the file is {size / (1 << 20):.0f} MB, over the "
                        f"{MAX_FILE >> 20} MB a launch script can be; it was not read. "
                        "Fix: pass the bash launch script itself.")
                main = abs_path == self.at.main_abs  # named by the user: only its own file
                data = gate.read_bytes(abs_path, (Path(os.path.realpath(abs_path)),) if main
                                       else self.at.roots, limit=MAX_FILE)
            else:
                data = self.text.encode("utf-8", "surrogateescape")
        except OSError as e:
            raise ScriptReadError(f"{disp}:0: cannot read the file ({e.strerror or e}). "
                                  "Fix: check the path and its permissions.") from None
        except gate.Refused as e:
            raise ScriptReadError(f"{disp}:0: {e}. Fix: pass a regular file inside the "
                                  "script's checkout.") from None
        if len(data) > MAX_FILE:
            raise ScriptReadError(f"{disp}:0: the text is over {MAX_FILE >> 20} MB. "
                                  "Fix: pass the bash launch script itself.")
        if b"\0" in data:
            raise ScriptReadError(f"{disp}:1: not a text file (it contains NUL bytes). "
                                  "Fix: pass the bash launch script.")
        return data

    def parse(self, data: bytes, disp: str, located: bool = True, line: int = 1,
              counted: bool = False) -> list:
        if not counted:
            self.budget.take_words(data, disp)
        try:
            body, notes = syntax.parse(data, located, line)
        except syntax.ShellSyntaxError as e:
            raise ScriptReadError(f"{disp}:{e.line}: {e.message}. Fix: {e.fix}.") from None
        for code, at, message, fix in notes:
            self.found.note(code, message, fix, Location(disp, at))
        return body

    # -- entering a file: the main script, a sourced file, a file the script wrote

    @contextmanager
    def entering(self, key: str, disp: str, code_file: str, at: Location | None = None,
                 shown: str = "") -> Iterator[bool]:
        """Push a file while its commands run (its name for sources, its own file for spans,
        a barrier for `break`). A source (`at` given) of a file being read already, or
        nested too deep, is noted and gives False: the nested read is skipped."""
        stack = self.at.stack
        if at is not None and (len(stack) >= MAX_SOURCE_DEPTH or any(key == s for s, _ in stack)):
            self.found.note("source-cycle", f"'{shown}' is sourced again while it is being "
                            "read; the nested read is skipped", "source each model file once", at)
            yield False
            return
        stack.append((key, disp))
        self.at.where.append(code_file)
        self.loops.append(_BARRIER)
        try:
            yield True
        finally:
            stack.pop()
            self.at.where.pop()
            self.loops.pop()

    def run_main(self):
        abs_path = self.at.main_abs
        body = self.parse_file(abs_path, self.at.disp(abs_path))
        with self.entering(abs_path, self.at.disp(abs_path), abs_path):
            self.run(body, None)

    def source_file(self, path: str, n: syntax.Simple, cond: Unk | None, shown: str):
        """``source FILE`` of a file found on disk."""
        with self.entering(path, self.at.disp(path), path, self.at.src(n.line), shown) as ok:
            if ok:
                self.run(self.parse_file(path, self.at.disp(path)), cond)

    def run_child(self, path: str, args: list[Field] | None, n: syntax.Simple,
                  cond: Unk | None, shown: str, written: bool = False):
        """``bash FILE ARGS``: another shell runs the file (one on disk, or `written` by the
        script: `path` is its key) with ARGS as $1... and FILE as $0; it sees only the
        exported variables, and nothing it sets comes back here."""
        if self.budget.deep:
            return
        sh = self.sh
        saved = sh.snapshot()
        given = set(sh.vars) if sh.allexport else sh.exported | sh.inherited
        sh.vars = {k: v for k, v in sh.vars.items() if k in given and not v.array}
        sh.funcs, sh.func_file, sh.frames, sh.positions, sh.scopes = {}, {}, [args], [], []
        sh.zero = shown
        self.budget.calls += 1
        try:
            if written:
                self.run_written(path, n, cond)
            else:
                self.source_file(path, n, cond, shown)
        finally:
            self.budget.calls -= 1
            sh.restore(saved)

    def run_written(self, key: str, n: syntax.Simple, cond: Unk | None):
        """``source F`` of a file the script wrote: its text is read as a sourced file's
        (its words are not the file's own text on disk, so they carry no span)."""
        text = self.sh.written[key]
        where = self.at.src(n.line)
        if text is None:
            why = f"sourced file '{shown(key)}' is written by the script with text only " \
                  "known when it runs"
            self.found.unknown(n.words[1].text, where, f"{why}; the flags it defines are "
                               "unknown")
            return self.taint(f"{n.words[0].text} {n.words[1].text}", where, why)
        disp = shown(key)
        with self.entering(key, disp, self.at.where[-1], where, disp) as ok:
            if not ok:
                return
            try:
                body = self.parse(text.encode("utf-8", "surrogateescape"), disp, False)
            except ScriptReadError as e:
                raise ScriptReadError(f"{where}: the file it sources, which the script "
                                      f"writes, is not valid bash: {e}") from None
            self.run(body, cond)

    def taint(self, what: str, at: Location, why: str):
        """A source or eval not read may set any variable: each is unknown from here on
        until it is assigned again (a value given with --env stands)."""
        why = f"it may be set by '{what}' at {at}, which is not read ({why})"
        for name, var in list(self.sh.vars.items()):
            unk = Unk(what, at, f"{name}: {why}")
            if var.array:
                self.sh.vars[name] = Var([Field(None, at, unk, what, True)], True)
            else:
                self.set(name, None, unk, at, None, what, what)  # --env NAME stands
        self.sh.taint = Unk(what, at, why)

    def run_text(self, text: str, line: int, cond: Unk | None, name: str, n: syntax.Simple):
        """``eval TEXT``: parsed and run here, as deep as calls are followed."""
        body = self.parse(text.encode("utf-8", "surrogateescape"), self.at.file, False, line)
        if self.budget.deep:  # not followed: what it may set is unknown from here on
            return self.too_deep(name, n, body)
        self.budget.calls += 1
        try:
            self.run(body, cond)
        finally:
            self.budget.calls -= 1

    def run(self, nodes: list, cond: Unk | None):
        for node in nodes:
            self.node(node, cond)

    def node(self, n, cond: Unk | None):
        t = type(n)
        if t is syntax.Simple:
            self.simple(n, cond)
        elif t is syntax.AndOr:
            status = self.status([n.items[0][1]], cond)
            reason = self.why_unknown
            with self.testing():
                self.node(n.items[0][1], cond)
            self.at.branch.append(self.at.src(_line(n)))
            try:
                self.and_or(n, status, reason, cond)
            finally:
                self.at.branch.pop()
        elif t is syntax.Pipe:
            for k, c in enumerate(n.cmds):
                if n.neg or k < len(n.cmds) - 1:  # only the last one's status counts
                    with self.testing():
                        self.node(c, cond)
                else:
                    self.node(c, cond)
        elif t in (syntax.If, syntax.Case, syntax.Loop):
            self.at.branch.append(self.at.src(n.line))
            try:
                self.compound(n, cond)
            finally:
                self.at.branch.pop()
        elif t is syntax.Func:
            self.sh.funcs[n.name] = [n.body]
            self.sh.func_file[n.name] = self.at.where[-1]
        elif t is syntax.Group:
            if n.subshell:
                saved = self.sh.copy_vars()
                self.loops.append(_BARRIER)
                try:
                    self.run(n.body, cond)
                finally:
                    self.loops.pop()
                self.sh.vars = saved
            else:
                self.run(n.body, cond)
        elif t is syntax.ArithCmd:
            self.arith_cmd(n, cond)

    def and_or(self, n: syntax.AndOr, status: bool | None, reason: str, cond: Unk | None):
        last = len(n.items) - 1
        for k, (op, cmd) in enumerate(n.items[1:], 1):
            if status is None:
                line = _line(n)
                why = f"only if the command before '{op}' at {self.at.src(line)} " + (
                    "succeeds" if op == "&&" else "fails") + reason
                with self.testing(k < last):
                    self.node(cmd, cond or Unk(op, self.at.src(line), why))
                status = None
            elif status == (op == "&&"):
                status = self.status([cmd], cond)
                with self.testing(k < last):
                    self.node(cmd, cond)

    @contextmanager
    def testing(self, on: bool = True):
        """Commands run here have their failure tested (`set -e` ignores it)."""
        self.checked += on
        try:
            yield
        finally:
            self.checked -= on

    def compound(self, n, cond: Unk | None):
        t = type(n)
        if t is syntax.If:
            self.if_(n, cond)
        elif t is syntax.Case:
            self.case(n, cond)
        else:
            reason = ""
            if cond is None and (n.kind == "for" and (n.words is not None or
                                                      n.header is not None) or n.cond):
                reason = self.step(n)
                if reason is None:
                    return
            why = f"inside a '{n.kind}' loop at {self.at.src(n.line)}, run a number of times " \
                  "known only at run time" + reason
            inner = cond or Unk(n.kind, self.at.src(n.line), why)
            if n.var:
                self.sh.vars[n.var] = Var([Field(None, inner.src, Unk(f"${n.var}", inner.src,
                                                                   f"loop variable {n.var}"))],
                                       False)
            src = self.at.src(n.line)
            for part in n.header or ():
                for name in arith_targets(part.text) if part is not None else ():
                    self.set(name, None, Unk(part.text, src, f"{name} is set by the header of "
                                             f"the loop at {src} ({why})"), src, inner,
                             part.text, part.text)
            self.loops.append(_UNSTEPPED)
            try:
                self.run(n.body, inner)
            finally:
                self.loops.pop()

    # -- loops stepped through, iteration by iteration, as bash runs them

    def step(self, n: syntax.Loop) -> str | None:
        """Run a ``for`` loop whose words (or ``((...))`` header) are known, each iteration
        with its real branches. None when done; else why not (its effects are undone)."""
        outer = _STEP not in self.loops
        if self.budget.read_loop_steps >= MAX_READ_LOOP_STEPS:
            return f" (this read has stepped through {MAX_READ_LOOP_STEPS} loop iterations " \
                   "already; no more are followed)"
        if outer:
            self.budget.loop_begins()
        saved = self.snapshot()
        self.loops.append(_STEP)
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
            self.loops.pop()

    def step_words(self, n: syntax.Loop):
        src = self.at.src(n.line)
        fields: list[Field] = []
        for w in n.words:
            fields.extend(self.w.expand(w))
            bad = next((f.unk or f.cond for f in fields if f.unk or f.cond), None)
            if bad is not None:
                raise _Unsteppable(f"its word {w.text} is not known: {bad.why}")
        for f in fields:
            self.tick(n)
            if n.var:
                self.sh.inherited.discard(n.var)
                self.set(n.var, f.value, None, src, None, f.text, f.text)
            if self.iteration(n) == "break":
                return

    def step_c(self, n: syntax.Loop):
        init, test, update = n.header
        if init is not None:
            self.arith_step(init, n)
        while test is None or self.arith_step(test, n):
            self.tick(n)
            if self.iteration(n) == "break":
                return
            if update is not None:
                self.arith_step(update, n)

    def step_while(self, n: syntax.Loop):
        """``while``/``until`` whose test is decided by known values each time round (the
        ``while [[ $# -gt 0 ]]; do case "$1" ...`` and ``while getopts`` loops)."""
        body = n.body[len(n.cond):]
        while True:
            status = self.status(n.cond, None)
            if status is None:
                raise _Unsteppable(f"its test is decided at run time{self.why_unknown}")
            with self.testing():
                self.run(n.cond, None)
            if status == (n.kind == "until"):
                return
            self.tick(n)
            if self.iteration(n, body) == "break":
                return

    def iteration(self, n: syntax.Loop, body: list | None = None) -> str | None:
        """Run the body once: "break" when a ``break`` ends this loop."""
        try:
            self.run(n.body if body is None else body, None)
        except _Jump as e:
            if e.n > 1:
                raise _Jump(e.kind, e.n - 1) from None
            return "break" if e.kind == "break" else None
        return None

    def tick(self, n: syntax.Loop):
        why = self.budget.loop_over()
        if why is not None:
            raise _Unsteppable(why, whole=True)

    def arith_step(self, word: syntax.Word, n: syntax.Loop) -> int:
        """A part of a ``for ((...))`` header, evaluated with its assignments."""
        got = self.w.join(word)
        if got.unk:
            raise _Unsteppable(f"((... {word.text} ...)) is not known: {got.unk.why}")
        src = self.at.src(n.line)
        try:
            return arith(got.value, self.w.arith_lookup(word), lambda name, v: self.arith_set(
                name, v, src, None, word.text))
        except ArithError as e:
            raise _Unsteppable(f"((... {word.text} ...)): {e}") from None

    def arith_set(self, name: str, v: int, src: Location, cond: Unk | None, text: str):
        self.sh.inherited.discard(name)
        self.set(name, str(v), None, src, cond, text, text)

    def arith_cmd(self, n: syntax.ArithCmd, cond: Unk | None):
        """``(( expr ))`` run as a command: its assignments take effect."""
        self.at.stmt_line = n.line
        self.budget.steps += 1
        if not arith_targets(n.expr.text):  # nothing to assign: its status is all it gives
            return
        src = self.at.src(n.line)
        got = self.w.join(n.expr)
        why = got.unk.why if got.unk else ""
        if not got.unk:
            try:
                arith(got.value, self.w.arith_lookup(n),
                      lambda name, v: self.arith_set(name, v, src, cond, n.text))
                return
            except ArithError as e:
                why = str(e)
        for name in arith_targets(n.expr.text if got.unk else got.value):
            self.sh.inherited.discard(name)
            self.set(name, None, Unk(n.text, src, f"{name} is set by {n.text}, which is only "
                                     f"known at run time ({why})"), src, cond, n.text, n.text)

    def jump(self, kind: str, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``break N`` / ``continue N``: ends iterations of the loops being stepped through.
        Where it is only known at run time whether (or how far) it jumps, a stepped loop it
        may reach is read as run an unknown number of times instead."""
        if _STEP not in self.loops:
            return  # no loop is stepped through: each is already read as run at run time
        arg = fields[1].value if len(fields) > 1 else "1"
        count = int(arg) if arg is not None and arg.isdigit() and int(arg) > 0 else None
        where = f"'{kind}' at {self.at.src(n.line)}"
        targets = []
        for k in range(len(self.loops) - 1, -1, -1):
            frame = self.loops[k]
            if frame is _BARRIER:
                if _STEP in self.loops[:k]:
                    raise _Unsteppable(f"{where} is in a function, subshell or sourced file "
                                       "run inside it")
                break
            targets.append(frame)
            if count is not None and len(targets) == count:
                break
        if _STEP not in targets and count is not None:
            return  # it leaves only loops read as run an unknown number of times
        if count is None:
            raise _Unsteppable(f"{where} leaves a number of loops known only at run time")
        if cond is not None or _UNSTEPPED in targets:
            raise _Unsteppable(f"{where} runs {cond.why}" if cond is not None else
                               f"{where} leaves a loop run a number of times known only at "
                               "run time")
        raise _Jump(kind, len(targets))

    def snapshot(self) -> tuple:
        """The state a loop may change, to undo a loop that cannot be stepped through."""
        return self.sh.snapshot(), self.found.mark()

    def restore(self, saved: tuple):
        shell, found = saved
        self.sh.restore(shell)
        self.found.undo(found)

    def if_(self, n: syntax.If, cond: Unk | None):
        inner = cond
        for test, body in n.branches:
            status = self.status(test, inner)
            reason = self.why_unknown
            with self.testing():
                self.run(test, inner)
            if status is True:
                self.run(body, inner)
                return
            if status is None:
                line = test[0].line if test and hasattr(test[0], "line") else n.line
                why = f"inside the 'if' at {self.at.src(line)}, whose condition is decided at " \
                      "run time" + reason
                inner = inner or Unk("if", self.at.src(line), why)
                self.run(body, inner)
        if n.orelse is not None:
            self.run(n.orelse, inner)

    def case(self, n: syntax.Case, cond: Unk | None):
        word = self.w.join(n.word)
        inner = cond
        if word.unk:
            why = f"inside a 'case {n.word.text}' at {self.at.src(n.line)} whose value is only " \
                  "known at run time"
            inner = cond or Unk("case", self.at.src(n.line), why)
        for pats, body in n.arms:
            if inner is not cond or word.unk:
                self.run(body, inner)
                continue
            matched = None
            for p in pats:
                pv = self.w.join(p)
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
                why = f"inside a 'case' arm at {self.at.src(n.line)} whose pattern is only known " \
                      "at run time"
                inner = inner or Unk("case", self.at.src(n.line), why)
                self.run(body, inner)

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
        if type(node) is syntax.Pipe:
            if len(node.cmds) > 1 and all(type(c) is syntax.Simple and c.words and
                                          c.words[0].literal() in FILTERS for c in node.cmds):
                # `echo "$M" | grep -q moe` over known text: the status of the last filter
                out = self.w.filtered(node.cmds, node.cmds[0].words[0])
                got = None if out.unk else self.w.filter_status == 0
                if out.unk:
                    self.why_unknown = f" ({out.unk.why})"
            else:
                got = self._status(node.cmds[-1:], cond)
            return None if got is None else (not got if node.neg else got)
        if type(node) is syntax.AndOr:
            got = self._status([node.items[0][1]], cond)
            for op, cmd in node.items[1:]:
                if got is None:
                    return None
                if got == (op == "&&"):
                    got = self._status([cmd], cond)
            return got
        if type(node) is syntax.ArithCmd:
            return self.arith_status(node)
        if type(node) is not syntax.Simple:
            return None
        if not node.words:  # assignments only: true, unless a $(...) in them decides it
            return None if any(type(p) is syntax.Sub for a in node.assigns if a.value
                               for p in a.value.parts) or not node.assigns else True
        return self.simple_status(node)

    def simple_status(self, node: syntax.Simple) -> bool | None:
        """``true``, ``false``, ``getopts``, ``[ ]``, ``test``, ``[[ ]]`` over known words."""
        words = node.words
        head = words[0].text
        if head in ("true", ":"):
            return True
        if head == "getopts":
            fields = [f for w in words for f in self.w.expand(w)]
            got = self.builtins.getopts_next(fields)
            if got is None:
                self.why_unknown = " (getopts over words only known at run time)"
            return None if got is None else got[0]
        if head == "false":
            return False
        if head == "[[":
            vals = [self.w.join(w) for w in words[1:]]
            if not vals or vals[-1].value != "]]":
                return None
            vals, fancy = vals[:-1], True
            if len(vals) == 3 and vals[1].value == "=~":
                return self.matches(vals, words[3])
        elif head in ("[", "test"):
            vals = []
            for w in words[1:]:
                vals.extend(self.w.expand(w))
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

    def assign(self, a: syntax.Assign, cond: Unk | None):
        src = self.at.src(a.line)
        name = a.name
        self.sh.inherited.discard(name)  # --env gave it, but the script sets it itself
        if a.array is not None:
            if any(type(w) is tuple for w in a.array) or name in self.sh.assoc:
                return self.keyed(a, src, cond)
            return self.assign_array(a, src, cond)
        got = self.w.join(a.value)
        if a.index is not None and name in self.sh.assoc:
            return self.keyed(syntax.Assign(name=name, append=True, array=[(a.index, a.value)],
                                            line=a.line, text=a.text), src, cond)
        if a.index is not None:
            old = self.sh.vars.get(name)
            items = list(old.items) if old else []
            try:
                k = int(a.index)
            except ValueError:
                k = -1
            if cond or got.unk or k < 0 or k > len(items):
                why = cond.why if cond else "array element set at an index known at run time"
                self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text, True)],
                                         True)
                return
            f = Field(got.value, src, None, a.value.text)
            items[k:k + 1] = [f]
            self.sh.vars[name] = Var(items, True)
            return
        value, unk = got.value, got.unk
        old = self.sh.vars.get(name)
        if a.append and not unk:
            if old is not None and old.items and old.items[0].unk:
                unk = old.items[0].unk
            else:
                value = (old.items[0].value if old and old.items else "") + value
        self.set(name, value, unk, src, cond, a.text, a.value.text)

    def assign_array(self, a: syntax.Assign, src: Location, cond: Unk | None):
        """``A=(WORDS)``, ``A+=(WORDS)``."""
        name = a.name
        items: list[Field] = []
        for w in a.array:
            got = self.w.expand(w)
            for f in got:  # unknown words next to unknown words: still just unknown words
                if not (f.extra and f.unk and items and items[-1].extra and items[-1].unk):
                    items.append(f)
        if a.append:
            old = self.sh.vars.get(name)
            if cond:
                items = [Field(f.value, f.src, f.unk, f.text, f.extra, f.cond or cond, f.span)
                         for f in items]
            self.hold(0, None, items)
            if old is not None and old.array:
                old.items.extend(items)  # in place: n appends cost O(n), not O(n^2)
                items = old.items
            else:
                items = (old.items if old else []) + items
            if len(items) > MAX_ITEMS:
                items = [Field(None, src, Unk(a.text + "(...)", src, f"{name} grows past "
                                                  f"{MAX_ITEMS} words; not followed"),
                               a.text, True)]
            self.sh.vars[name] = old if old is not None and old.items is items \
                else Var(items, True)
        elif cond:
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src, cond.why),
                                            a.text, True)], True)
        elif len(items) > MAX_ITEMS:
            why = f"{name} has more than {MAX_ITEMS} words; not followed"
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src, why),
                                            a.text, True)], True)
        else:
            self.hold(0, self.sh.vars.get(name), items)
            self.sh.vars[name] = Var(items, True)

    def keyed(self, a: syntax.Assign, src: Location, cond: Unk | None):
        """``A=([0]=x [3]=y z)`` (indexed: values in index order) and associative arrays
        (``declare -A M=([k]=v)``, ``M[k]=v``)."""
        name = a.name
        old = self.sh.vars.get(name) if a.append else None
        assoc = name in self.sh.assoc or any(type(w) is tuple and not w[0].strip().isdigit()
                                          for w in a.array)
        got: dict = {}
        if old is not None and not any(f.unk for f in old.items):
            got = dict(zip(old.keys, old.items)) if old.keys is not None else \
                dict(enumerate(old.items))
        nxt = max((k for k in got if isinstance(k, int)), default=-1) + 1
        for w in a.array:
            if type(w) is tuple:
                key = self.w.join(syntax.parse_word(w[0]) or
                                  syntax.Word(parts=[], line=a.line, text=w[0]))
                if key.unk or cond:
                    why = cond.why if cond else f"a key of {name} is only known at run time"
                    self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text,
                                                    True)], True)
                    return
                k = key.value if assoc else int(key.value.strip())
                got[k] = self.w.join(w[1])
                nxt = k + 1 if not assoc else nxt
            else:
                for f in self.w.expand(w):
                    got[nxt] = f
                    nxt += 1
        if cond or any(f.unk for f in got.values()):
            why = cond.why if cond else "an element is only known at run time"
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text, True)], True)
        elif assoc:
            self.hold(0, self.sh.vars.get(name), list(got.values()))
            self.sh.vars[name] = Var(list(got.values()), True, [str(k) for k in got])
        else:
            self.hold(0, self.sh.vars.get(name), list(got.values()))
            self.sh.vars[name] = Var([got[k] for k in sorted(got)], True)

    def set(self, name: str, value: str | None, unk: Unk | None, src: Location,
            cond: Unk | None, expr: str, text: str):
        """Set a string variable; under a run-time condition it becomes unknown (unless
        unchanged), and an unknown value is taken from ``env`` when it has the name."""
        old = self.sh.vars.get(name)
        if value is not None and not unk and len(value) > MAX_VALUE:
            unk = Unk(expr, src, f"{name} grows past {MAX_VALUE >> 20} MB; its value is not "
                      "followed")
        if cond and not unk:
            same = old is not None and not old.array and old.items and \
                old.items[0].value == value
            if not same:
                unk = Unk(expr, src, f"{name} is assigned {cond.why}")
        if unk is not None and name in self.env:
            v = self.env[name]
            self.sh.vars[name] = Var([Field(v, Location("<env>", 0), text=f"--env {name}={v}")],
                                     False)
            return
        self.hold(len(value) if value is not None and not unk else 0, old)
        self.sh.vars[name] = Var([Field(None if unk else value, src, unk, text)], False)

    def hold(self, size: int, old: Var | None = None, items: list[Field] | None = None):
        """Count what a variable now holds, less what `old` held (Budget.take_held)."""
        self.budget.take_held(lambda: self.at.src(self.at.stmt_line), size, old, items)

    def simple(self, n: syntax.Simple, cond: Unk | None):
        words = n.words
        head = words[0].text if words else ""
        self.at.stmt_line = n.line
        budget = self.budget
        budget.steps += 1
        if budget.steps > MAX_STEPS:
            budget.over_steps(self.at.src(n.line))
        if not words or head in syntax.DECLARE:
            if head in ("declare", "typeset", "local"):
                self.declare(n, head)
            for a in n.assigns:
                self.assign(a, cond)
            self.prov.export(n, head)
        sh = self.sh
        file = self.at.file
        if not words:
            sh.prev_end[file] = n.end
            return
        fields = self.fields(n)
        prev = sh.prev_end.get(file)
        sh.prev_end[file] = n.end
        if not fields:
            return
        first = fields[0]
        name = first.value
        lead = name if name is not None else first.text
        if lead.startswith("--") and len(lead) > 2 or name is None and _array_first(n) and any(
                (f.value or "").startswith("--") for f in fields[1:]):
            self.orphan(n, fields, prev)
        elif name is not None:
            self.dispatch(name, fields, n, cond)

    def fields(self, n: syntax.Simple) -> list[Field]:
        """A command's words expanded; each located one is used by this command (unless it
        calls a function: the words are used inside it)."""
        fields: list[Field] = []
        for w in n.words:
            got = self.w.expand(w)
            if len(got) == 1 and got[0].unk is not None and _names_py(w):
                got[0].text = _unquoted(w)  # "${ROOT}/slime/train.py": an entry by its name
            fields.extend(got)
            if len(fields) > MAX_ITEMS:
                too_many(self.at.src(n.line), f"a command of more than {MAX_ITEMS} words")
        self.budget.expanded += len(fields)
        if self.budget.expanded > MAX_EXPANDED:
            self.budget.over_expanded(self.at.src(n.line))
        if fields and fields[0].value not in self.sh.funcs:
            here, uses = None, self.found.uses
            for f in fields:
                if f.span is not None:
                    here = here or self.at.src(n.line)
                    uses.setdefault(f.span[:3], set()).add(here)
        return fields

    def dispatch(self, name: str, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """A function, else a built-in, else any other command (bash's order)."""
        if n.stdout is not None:
            self.write(fields, n, cond)
        if name in self.sh.funcs:
            if not self.budget.deep:
                self.call(name, fields, n, cond)
            else:
                self.too_deep(name, n)
            return
        handler = self.builtins.table.get(name)
        if handler is None or handler(fields, n, cond) is False:
            self.command(fields, n, cond)

    def declare(self, n: syntax.Simple, head: str):
        """``local``/``declare``/``typeset``: in a function the names are its own (unless
        ``-g``); ``-A`` makes them associative."""
        opts = "".join(w.text[1:] for w in n.words[1:] if w.text.startswith("-"))
        names = [a.name for a in n.assigns] + [
            w.text for w in n.words[1:] if syntax.NAME.fullmatch(w.text)]
        if self.sh.scopes and "g" not in opts:
            given = {a.name for a in n.assigns}
            for name in names:
                self.sh.make_local(name)
                if name not in given:  # `local X`: unset here until assigned
                    self.sh.vars.pop(name, None)
        if "A" in opts:
            self.sh.assoc |= set(names)

    def write(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``cat > F <<EOF``, ``echo ... > F``, ``printf ... >> F``: the file's text, when the
        command is a text filter over known text (else the file is known to be written, its
        text not)."""
        word, append = n.stdout
        path = self.w.path_of(word)
        if path is None:
            return
        key = self.w.file_key(path)
        text = None
        if cond is None and fields[0].value in FILTERS and not n.prefix:
            alone = syntax.Simple(assigns=[], words=n.words, line=n.line, end=n.end,
                                  stdin=n.stdin)
            got = self.w.filtered([alone], word)
            text = got.value
        if append and text is not None:
            old = self.sh.written.get(key, "" if key not in self.sh.written and
                                      not os.path.exists(key) else None)
            text = None if old is None else old + text
        if text is not None and len(text) > MAX_VALUE:
            text = None
        self.sh.written[key] = text

    def too_deep(self, name: str, n: syntax.Simple, body: list | None = None):
        """A call (or an eval's `body`) past the depth cap is not followed: what it (and the
        functions it calls) may set is unknown from here on."""
        src = self.at.src(n.line)
        why = f"it may be set by '{name}' called at {src} more than {MAX_CALL_DEPTH} calls " \
              "deep, which is not followed"
        for var in sorted(_sets(self.sh.funcs[name] if body is None else body,
                                self.sh.funcs)):
            self.sh.inherited.discard(var)
            old = self.sh.vars.get(var)
            array = old is not None and old.array
            self.sh.vars[var] = Var([Field(None, src, Unk(name, src, f"{var}: {why}"), name,
                                           array)], array)

    def call(self, name: str, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """A function call: its own positional parameters and local variables."""
        sh = self.sh
        self.budget.calls += 1
        sh.frames.append(fields[1:])
        self.at.where.append(sh.func_file.get(name, self.at.where[-1]))
        sh.positions.append([0, 0])
        sh.scopes.append({})
        self.loops.append(_BARRIER)
        try:
            self.run(sh.funcs[name], cond)
        finally:
            self.loops.pop()
            sh.frames.pop()
            sh.leave()
            self.at.where.pop()
            self.budget.calls -= 1
            self.prov.pin(fields[1:], sh.positions.pop()[1], n)

    def command(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """Any other command: a launch, or a shell reading a here-document script."""
        if any(f.value is not None and PID in f.value for f in fields):
            fields = [_pid_unknown(f) if f.value is not None and PID in f.value else f
                      for f in fields]
        got = launches.find(fields, self.at.src(n.line), cond)
        if got:
            self.found.launch(got._replace(site=self.prov.site(fields, got, n)))
        elif type(n.stdin) is syntax.Heredoc and launches.reads_stdin_script(
                [f.value for f in fields]):
            self.heredoc_script(n.stdin, cond)

    def heredoc_script(self, doc: syntax.Heredoc, cond: Unk | None):
        """``bash -s <<'EOF'`` (also behind ``docker run IMAGE``, ``ssh HOST``): the
        here-document is a script another shell runs; read here with this shell's values,
        its variables not kept. An unquoted one is expanded by this shell first (when that
        is unknown, its text is read as written). Its words are not located (as in
        ``eval``)."""
        text = doc.text
        if doc.word is not None:  # unquoted delimiter: this shell expands the text first
            got = self.w.join(doc.word)
            if got.unk is None and got.cond is None:
                text = got.value
        if not text.strip() or self.budget.deep:
            return
        body = self.parse(text.encode("utf-8", "surrogateescape"), self.at.file, False, doc.line)
        saved = self.sh.copy_vars()
        self.budget.calls += 1
        self.loops.append(_BARRIER)
        try:
            self.run(body, cond)
        finally:
            self.loops.pop()
            self.budget.calls -= 1
            self.sh.vars = saved

    def orphan(self, n: syntax.Simple, fields: list[Field], prev: int | None):
        flags = [f.value or f.text for f in fields if (f.value or f.text).startswith("-")]
        flags = flags or [n.words[0].text]  # an unresolved ${A[@]}: its words are unknown
        shown = " ".join(flags[:3]) + (" ..." if len(flags) > 3 else "")
        above = f"line {prev}" if prev else "the line above"
        self.found.note(
            "missing-line-continuation",
            f"line {n.line} starts with '{shown}' but {above} does not end in '\\', so bash "
            f"ends the command there and runs line {n.line} on its own "
            f"('{flags[0]}: command not found'); these flags never reach the launch command",
            f"end {above} with ' \\'",
            self.at.src(n.line))


def _sets(body: list, funcs: dict[str, list]) -> set[str]:
    """The variables commands may assign, the functions they call included (read from
    their text, not run)."""
    out: set[str] = set()
    seen, todo = set(), list(body)
    while todo:
        node = todo.pop()
        t = type(node)
        if t is list:
            todo.extend(node)
        elif t is syntax.Simple:
            out.update(a.name for a in node.assigns)
            words = [w.literal() for w in node.words]
            head = words[0] if words else None
            if head in funcs and head not in seen:
                seen.add(head)
                todo.extend(funcs[head])
            if head in ("read", "mapfile", "readarray", "getopts", "printf", "declare",
                        "local", "export", "typeset"):
                out.update(w for w in words[1:] if w and syntax.NAME.fullmatch(w))
                out.update(("OPTARG", "OPTIND", "MAPFILE", "REPLY"))
            for w in node.words:
                out.update(arith_targets(w.text))
        elif t is syntax.AndOr:
            todo.extend(c for _, c in node.items)
        elif t is syntax.Pipe:
            todo.extend(node.cmds)
        elif t is syntax.If:
            for test, body in node.branches:
                todo.extend(test + body)
            todo.extend(node.orelse or ())
        elif t is syntax.Case:
            for _, body in node.arms:
                todo.extend(body)
        elif t is syntax.Loop:
            out.update((node.var,) if node.var else ())
            todo.extend(node.body)
        elif t is syntax.Group:
            todo.extend(node.body)
        elif t is syntax.ArithCmd:
            out.update(arith_targets(node.expr.text))
    return out


def _line(node) -> int:
    while not hasattr(node, "line"):
        node = node.items[0][1] if type(node) is syntax.AndOr else node.cmds[0]
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


def _array_first(n: syntax.Simple) -> bool:
    """The command starts with ``${A[@]}`` (unknown here, and flags follow): an argument
    array cut off from its command. A known array that holds a command runs as one."""
    parts = n.words[0].parts if n.words else ()
    p = parts[0] if len(parts) == 1 else None
    return type(p) is syntax.Param and p.index in ("@", "*") and p.op is None


def _arguments(env: dict[str, str], positional: Sequence[str] | None) -> list[Field] | None:
    """The script's positional parameters: `positional` (``check S.sh -- ARGS``), else
    ``--env 1=VALUE ...``; None (unknown) when neither gives any."""
    if positional is not None:
        return [Field(v, Location("<args>", 0), text=v) for v in positional]
    env_src = Location("<env>", 0)
    args = []
    while str(len(args) + 1) in env:
        v = env[str(len(args) + 1)]
        args.append(Field(v, env_src, text=f"--env {len(args) + 1}={v}"))
    return args or None


def _pid_unknown(f: Field) -> Field:
    """A word holding ``$$``: a file name it makes is consistent, its value unknown."""
    why = f"'{shown(f.value)}': $$ (the shell's process id) is known only when it runs"
    return Field(None, f.src, Unk(f.text, f.src, why), f.text, False, f.cond, f.span)


def _names_py(w: syntax.Word) -> bool:
    """The word ends in literal text naming a Python file (``"${ROOT}/slime/train.py"``)."""
    last = w.parts[-1] if w.parts else None
    return type(last) is syntax.Lit and last.text.endswith(".py") and len(w.parts) > 1


def _unquoted(w: syntax.Word) -> str:
    return "".join(p.text for p in w.parts)
