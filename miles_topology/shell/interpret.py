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
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import Location, Problem
from ..textfilters import FILTERS
from . import launch as launches
from . import syntax
from .builtins import BUILTINS, getopts_next
from .expand import Expander
from .provenance import Provenance
from .records import ScriptReadError, Unresolved, note
from .state import Shell
from .values import (
    MAX_CALL_DEPTH,
    MAX_ITEMS,
    MAX_SOURCE_DEPTH,
    MAX_VALUE,
    ArithError,
    Field,
    Unk,
    Var,
    arith,
    arith_targets,
)

MAX_STEPS = 300_000  # commands run in all (function calls can fan out)
MAX_WORDS = 50_000  # words of text parsed in one read (real launch scripts: a few thousand)
MAX_HELD = 48 << 20  # characters (and 64 per word) the variables may hold in all
MAX_RECORDS = 1000  # notes and unknowns kept
MAX_KEPT = 8  # launches whose words are kept (the last one found is the one read)
MAX_EXPANDED = 2_000_000  # words of the commands run, in all
_WORD = re.compile(rb"\S+")
MAX_FILE = 50 << 20  # bytes; bigger files are refused before they are read
MAX_LOOP_STEPS = 10_000  # iterations stepped through in one outermost loop, nested ones too
MAX_LOOP_COMMANDS = 100_000  # commands run while stepping through one outermost loop
MAX_READ_LOOP_STEPS = 100_000  # iterations stepped through in one read, all loops together
_STEP, _UNSTEPPED, _BARRIER = "step", "unstepped", None  # frames of `Reader.loops`


class _Capped(list):
    """A list that keeps its first MAX_RECORDS entries (a script that makes a million
    unknowns reports the first thousand, in bounded memory)."""

    def append(self, item):
        if len(self) < MAX_RECORDS:
            super().append(item)


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


class Reader(Expander, Provenance):
    """One read of one script: the shell state, the launches found, and what stayed unknown."""

    def __init__(self, path: Path, env: Mapping[str, str],
                 positional: Sequence[str] | None = None):
        self.main_abs = os.path.abspath(path)
        self.main_disp = str(path)
        self.env = {str(k): str(v) for k, v in env.items()}
        env_src = Location("<env>", 0)
        args = []
        while str(len(args) + 1) in self.env:
            v = self.env[str(len(args) + 1)]
            args.append(Field(v, env_src, text=f"--env {len(args) + 1}={v}"))
        if positional is not None:
            args = [Field(v, Location("<args>", 0), text=v) for v in positional]
        self.sh = Shell(args if args or positional is not None else None,
                        {k for k in self.env if not k.isdigit()})
        for k, v in self.env.items():
            if not k.isdigit():
                self.sh.vars[k] = Var([Field(v, env_src, text=f"--env {k}={v}")], False)
        self.cache: dict[str, list] = {}
        self.stack: list[tuple[str, str]] = []  # (abs, display) of the files being run
        self.launches: list[launches.Launch] = []
        self.notes: list[Problem] = _Capped()
        self.unresolved: list[Unresolved] = _Capped()
        self.calls = 0
        self.steps = 0
        self.words = 0  # words parsed (count_words)
        self.expanded = 0  # words of the commands run
        self.held = 0  # what the variables hold (hold)
        self.sources: dict[tuple[str, int], Location] = {}
        self.missing: list[str] = []  # sourced files that were not found
        self.why_unknown = ""
        self.helpers: dict[tuple, object] = {}  # Python helpers run, by argv, env and cwd
        self.filter_status = 0  # exit status of the last text pipeline evaluated
        self.pid_token = False  # $$ reads as itself (while naming a file the script writes)
        # for rewriting: the text of each file, where each word came from
        self.text: str | None = None  # the main script's text, when given instead of its file
        self.newlines: dict[str, list[int]] = {}
        self.where: list[str] = []  # absolute file of the code being run (function bodies too)
        self.stmt_line = 0
        self.branch: list[Location] = []
        self.uses: dict[tuple, set[Location]] = {}
        # loops around the command being run, innermost last: _STEP (stepped through),
        # _UNSTEPPED (run once for an unknown count), _BARRIER (a function, subshell or
        # file that `break` does not reach out of)
        self.loops: list[str | None] = []
        self.loop_steps = 0  # iterations stepped in the current outermost stepped loop
        self.loop_start = 0  # `steps` when the current outermost stepped loop began
        self.read_loop_steps = 0  # iterations stepped in this read (undone ones too)
        self.overlay: dict[str, int] | None = None  # assignments of a test's (( )) so far

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
            if abs_path != self.main_abs or self.text is None:
                size = os.stat(abs_path).st_size
                if size > MAX_FILE:
                    raise ScriptReadError(
                        f"{disp}:0: the file is {size / (1 << 20):.0f} MB, over the "
                        f"{MAX_FILE >> 20} MB a launch script can be; it was not read. "
                        "Fix: pass the bash launch script itself.")
                data = Path(abs_path).read_bytes()
            else:
                data = self.text.encode("utf-8", "surrogateescape")
        except OSError as e:
            raise ScriptReadError(f"{disp}:0: cannot read the file ({e.strerror or e}). "
                                  "Fix: check the path and its permissions.") from None
        if len(data) > MAX_FILE:
            raise ScriptReadError(f"{disp}:0: the text is over {MAX_FILE >> 20} MB. "
                                  "Fix: pass the bash launch script itself.")
        if b"\0" in data:
            raise ScriptReadError(f"{disp}:1: not a text file (it contains NUL bytes). "
                                  "Fix: pass the bash launch script.")
        self.count_words(data, disp)
        text = data.decode("utf-8", "surrogateescape")
        self.newlines[abs_path] = [m.start() for m in re.finditer("\n", text)]
        body = self.parse(data, disp, counted=True)
        self.cache[abs_path] = body
        return body

    def count_words(self, data: bytes, disp: str):
        """All the text a read parses (files, sourced files, eval strings, written files)
        holds at most MAX_WORDS words: memory and time stay bounded on any input."""
        left = MAX_WORDS - self.words
        if len(data) <= 1 << 20:
            n = len(data.split())  # at C speed
        else:  # counted without a list of them
            n = 0
            for _ in _WORD.finditer(data):
                n += 1
                if n > left:
                    break
        if n > left:
            raise ScriptReadError(
                f"{disp}:0: the script (with the files it sources and the text it runs) "
                f"has more than {MAX_WORDS} words, more than a launch script is read "
                "for. Fix: pass the bash launch script itself, or cut it down.")
        self.words += n

    def parse(self, data: bytes, disp: str, located: bool = True, line: int = 1,
              counted: bool = False) -> list:
        if not counted:
            self.count_words(data, disp)
        try:
            body, notes = syntax.parse(data, located, line)
        except syntax.ShellSyntaxError as e:
            raise ScriptReadError(f"{disp}:{e.line}: {e.message}. Fix: {e.fix}.") from None
        for code, at, message, fix in notes:
            self.notes.append(note(code, message, fix, Location(disp, at)))
        return body

    def run_file(self, abs_path: str, cond: Unk | None):
        disp = self.disp(abs_path)
        body = self.parse_file(abs_path, disp)
        self.stack.append((abs_path, disp))
        self.where.append(abs_path)
        self.loops.append(_BARRIER)
        try:
            self.run(body, cond)
        finally:
            self.stack.pop()
            self.where.pop()
            self.loops.pop()

    @property
    def file(self) -> str:
        return self.stack[-1][1]

    def src(self, line: int) -> Location:
        key = (self.stack[-1][1], line)
        got = self.sources.get(key)
        if got is None:
            got = self.sources[key] = Location(*key)
        return got

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
            self.node(n.items[0][1], cond)
            self.branch.append(self.src(_line(n)))
            try:
                self.and_or(n, status, reason, cond)
            finally:
                self.branch.pop()
        elif t is syntax.Pipe:
            for c in n.cmds:
                self.node(c, cond)
        elif t in (syntax.If, syntax.Case, syntax.Loop):
            self.branch.append(self.src(n.line))
            try:
                self.compound(n, cond)
            finally:
                self.branch.pop()
        elif t is syntax.Func:
            self.sh.funcs[n.name] = [n.body]
            self.sh.func_file[n.name] = self.where[-1]
        elif t is syntax.Group:
            if n.subshell:
                saved = self.copy_vars()
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
            why = f"inside a '{n.kind}' loop at {self.src(n.line)}, run a number of times known "\
                  "only at run time" + reason
            inner = cond or Unk(n.kind, self.src(n.line), why)
            if n.var:
                self.sh.vars[n.var] = Var([Field(None, inner.src, Unk(f"${n.var}", inner.src,
                                                                   f"loop variable {n.var}"))],
                                       False)
            src = self.src(n.line)
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
        if self.read_loop_steps >= MAX_READ_LOOP_STEPS:
            return f" (this read has stepped through {MAX_READ_LOOP_STEPS} loop iterations " \
                   "already; no more are followed)"
        if outer:
            self.loop_steps, self.loop_start = 0, self.steps
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
        src = self.src(n.line)
        fields: list[Field] = []
        for w in n.words:
            fields.extend(self.expand(w))
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
        self.loop_steps += 1
        self.read_loop_steps += 1
        if self.loop_steps > MAX_LOOP_STEPS:
            raise _Unsteppable(f"it runs more than {MAX_LOOP_STEPS} times, more than is "
                               "followed", whole=True)
        if self.steps - self.loop_start > MAX_LOOP_COMMANDS:
            raise _Unsteppable(f"it runs more than {MAX_LOOP_COMMANDS} commands, more than is "
                               "followed", whole=True)
        if self.read_loop_steps > MAX_READ_LOOP_STEPS:
            raise _Unsteppable(f"this read has stepped through {MAX_READ_LOOP_STEPS} loop "
                               "iterations already; no more are followed", whole=True)

    def arith_step(self, word: syntax.Word, n: syntax.Loop) -> int:
        """A part of a ``for ((...))`` header, evaluated with its assignments."""
        got = self.join(word)
        if got.unk:
            raise _Unsteppable(f"((... {word.text} ...)) is not known: {got.unk.why}")
        src = self.src(n.line)
        try:
            return arith(got.value, self.arith_lookup(word), lambda name, v: self.arith_set(
                name, v, src, None, word.text))
        except ArithError as e:
            raise _Unsteppable(f"((... {word.text} ...)): {e}") from None

    def arith_set(self, name: str, v: int, src: Location, cond: Unk | None, text: str):
        self.sh.inherited.discard(name)
        self.set(name, str(v), None, src, cond, text, text)

    def arith_cmd(self, n: syntax.ArithCmd, cond: Unk | None):
        """``(( expr ))`` run as a command: its assignments take effect."""
        self.stmt_line = n.line
        self.steps += 1
        if not arith_targets(n.expr.text):  # nothing to assign: its status is all it gives
            return
        src = self.src(n.line)
        got = self.join(n.expr)
        why = got.unk.why if got.unk else ""
        if not got.unk:
            try:
                arith(got.value, self.arith_lookup(n),
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
        where = f"'{kind}' at {self.src(n.line)}"
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
        return (self.sh.snapshot(), len(self.launches), len(self.notes), len(self.unresolved),
                len(self.missing), {k: set(v) for k, v in self.uses.items()})

    def copy_vars(self):
        return self.sh.copy_vars()

    def restore(self, saved: tuple):
        shell, launches, notes, unresolved, missing, self.uses = saved
        self.sh.restore(shell)
        del self.launches[launches:], self.notes[notes:], self.unresolved[unresolved:]
        del self.missing[missing:]

    def if_(self, n: syntax.If, cond: Unk | None):
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

    def case(self, n: syntax.Case, cond: Unk | None):
        word = self.join(n.word)
        inner = cond
        if word.unk:
            why = f"inside a 'case {n.word.text}' at {self.src(n.line)} whose value is only " \
                  "known at run time"
            inner = cond or Unk("case", self.src(n.line), why)
        for pats, body in n.arms:
            if inner is not cond or word.unk:
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
                out = self.filtered(node.cmds, node.cmds[0].words[0])
                got = None if out.unk else self.filter_status == 0
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
        if type(node) is not syntax.Simple or not node.words:
            return None
        words = node.words
        head = words[0].text
        if head in ("true", ":"):
            return True
        if head == "getopts":
            fields = [f for w in words for f in self.expand(w)]
            got = getopts_next(self, fields)
            if got is None:
                self.why_unknown = " (getopts over words only known at run time)"
            return None if got is None else got[0]
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

    def arith_status(self, node: syntax.ArithCmd) -> bool | None:
        """The status of ``(( expr ))`` (true when nonzero), computed before it runs: its
        assignments go to `overlay`, shared by the commands of one test (a && b)."""
        got = self.join(node.expr)
        if got.unk:
            self.why_unknown = f" ({got.unk.why})"
            return None
        overlay = self.overlay if self.overlay is not None else {}
        base = self.arith_lookup(node)
        try:
            return arith(got.value, lambda name: overlay[name] if name in overlay else
                         base(name), overlay.__setitem__) != 0
        except ArithError as e:
            self.why_unknown = f" ({e})"
            return None

    def assign(self, a: syntax.Assign, cond: Unk | None):
        src = self.src(a.line)
        name = a.name
        self.sh.inherited.discard(name)  # --env gave it, but the script sets it itself
        if a.array is not None:
            if any(type(w) is tuple for w in a.array) or name in self.sh.assoc:
                return self.keyed(a, src, cond)
            items: list[Field] = []
            for w in a.array:
                got = self.expand(w)
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
                self.sh.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src,
                                                            f"{name} has more than {MAX_ITEMS} "
                                                            "words; not followed"),
                                             a.text, True)], True)
            else:
                self.hold(0, self.sh.vars.get(name), items)
                self.sh.vars[name] = Var(items, True)
            return
        got = self.join(a.value)
        if a.index is not None and name in self.sh.assoc:
            return self.keyed(syntax.Assign(name, None, True, None, [(a.index, a.value)],
                                            a.line, a.text), src, cond)
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
                key = self.join(syntax.parse_word(w[0]) or syntax.Word([], a.line, w[0]))
                if key.unk or cond:
                    why = cond.why if cond else f"a key of {name} is only known at run time"
                    self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text,
                                                    True)], True)
                    return
                k = key.value if assoc else int(key.value.strip())
                got[k] = self.join(w[1])
                nxt = k + 1 if not assoc else nxt
            else:
                for f in self.expand(w):
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
        """Count what a variable now holds (a string's characters; 64 per array word and
        their characters), less what `old` held: past MAX_HELD the read stops (exit 2)."""
        if items is not None:
            size += 64 * len(items)
            if len(items) == 1:
                size += len(items[0].value or "")
            else:
                size += sum([len(f.value) for f in items if f.value])
        if old is not None and old.items:
            f = old.items[0]
            size -= 64 * len(old.items) if old.array else len(f.value) if f.value else 0
        self.held += size
        if self.held > MAX_HELD:
            raise ScriptReadError(
                f"{self.src(self.stmt_line)}: the script's variables grow past "
                f"{MAX_HELD >> 20} M characters, more than a launch script is read for. "
                "Fix: pass the bash launch script itself, or cut it down.")

    def simple(self, n: syntax.Simple, cond: Unk | None):
        words = n.words
        head = words[0].text if words else ""
        self.stmt_line = n.line
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ScriptReadError(f"{self.src(n.line)}: reading the script runs more than "
                                  f"{MAX_STEPS} commands (recursion without end?). "
                                  "Fix: simplify the script.")
        if not words or head in syntax.DECLARE:
            if head in ("declare", "typeset", "local"):
                self.declare(n, head)
            for a in n.assigns:
                self.assign(a, cond)
            self.export(n, head)
        sh = self.sh
        file = self.stack[-1][1]
        if not words:
            sh.prev_end[file] = n.end
            return
        fields: list[Field] = []
        for w in words:
            fields.extend(self.expand(w))
            if len(fields) > MAX_ITEMS:
                self.too_many(n, f"a command of more than {MAX_ITEMS} words")
        self.expanded += len(fields)
        if self.expanded > MAX_EXPANDED:
            self.too_many(n, f"its commands have more than {MAX_EXPANDED} words in all")
        funcs = sh.funcs
        if fields and fields[0].value not in funcs:  # a call's words are used inside it
            here = None
            for f in fields:
                if f.span is not None:
                    here = here or self.src(n.line)
                    self.uses.setdefault(f.span[:3], set()).add(here)
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
            return
        if name is None:
            return
        if n.stdout is not None:
            self.write(fields, n, cond)
        if name in funcs:  # bash: functions before built-ins
            if self.calls < MAX_CALL_DEPTH:
                self.call(name, fields, n, cond)
            else:
                self.too_deep(name, n)
            return
        handler = BUILTINS.get(name)
        if handler is None or handler(self, fields, n, cond) is False:
            self.command(fields, n, cond)

    def too_many(self, n: syntax.Simple, what: str):
        raise ScriptReadError(f"{self.src(n.line)}: {what}, more than a launch script is read "
                              "for. Fix: pass the bash launch script itself, or cut it down.")

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
        path = self.path_of(word)
        if path is None:
            return
        key = self.file_key(path)
        text = None
        if cond is None and fields[0].value in FILTERS and not n.prefix:
            got = self.filtered([syntax.Simple([], n.words, n.line, n.end, -1, n.stdin)], word)
            text = got.value
        if append and text is not None:
            old = self.sh.written.get(key, "" if key not in self.sh.written and
                                      not os.path.exists(key) else None)
            text = None if old is None else old + text
        if text is not None and len(text) > MAX_VALUE:
            text = None
        self.sh.written[key] = text

    def run_written(self, key: str, n: syntax.Simple, cond: Unk | None):
        """``source F`` of a file the script wrote: its text is read as a sourced file's
        (its words are not the file's own text on disk, so they carry no span)."""
        text = self.sh.written[key]
        where = self.src(n.line)
        if text is None:
            self.unresolved.append(Unresolved(
                None, n.words[1].text, where, f"sourced file '{key}' is written by the script "
                "with text only known when it runs; the flags it defines are unknown"))
            return
        if len(self.stack) >= MAX_SOURCE_DEPTH or any(key == s for s, _ in self.stack):
            self.notes.append(note("source-cycle", f"'{key}' is sourced again while it is "
                                   "being read; the nested read is skipped",
                                   "source each model file once", where))
            return
        try:
            body = self.parse(text.encode("utf-8", "surrogateescape"), key, False)
        except ScriptReadError as e:
            raise ScriptReadError(f"{where}: the file it sources, which the script writes, "
                                  f"is not valid bash: {e}") from None
        self.stack.append((key, key))
        self.where.append(self.where[-1])
        self.loops.append(_BARRIER)
        try:
            self.run(body, cond)
        finally:
            self.stack.pop()
            self.where.pop()
            self.loops.pop()

    def too_deep(self, name: str, n: syntax.Simple, body: list | None = None):
        """A call (or an eval's `body`) past the depth cap is not followed: what it (and the
        functions it calls) may set is unknown from here on."""
        src = self.src(n.line)
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
        self.calls += 1
        sh.frames.append(fields[1:])
        self.where.append(sh.func_file.get(name, self.where[-1]))
        sh.positions.append([0, 0])
        sh.scopes.append({})
        self.loops.append(_BARRIER)
        try:
            self.run(sh.funcs[name], cond)
        finally:
            self.loops.pop()
            sh.frames.pop()
            sh.leave()
            self.where.pop()
            self.calls -= 1
            self.pin(fields[1:], sh.positions.pop()[1], n)

    def command(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """Any other command: a launch, or a shell reading a here-document script."""
        got = launches.find(fields, self.src(n.line), cond)
        if got:
            self.launches.append(got._replace(site=self.site(fields, got, n)))
            if len(self.launches) > MAX_KEPT:  # the last one is read: older words dropped
                k = len(self.launches) - MAX_KEPT - 1
                self.launches[k] = self.launches[k]._replace(argv=None, site=None)
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
            got = self.join(doc.word)
            if got.unk is None and got.cond is None:
                text = got.value
        if not text.strip() or self.calls >= MAX_CALL_DEPTH:
            return
        body = self.parse(text.encode("utf-8", "surrogateescape"), self.file, False, doc.line)
        saved = self.copy_vars()
        self.calls += 1
        self.loops.append(_BARRIER)
        try:
            self.run(body, cond)
        finally:
            self.loops.pop()
            self.calls -= 1
            self.sh.vars = saved

    def orphan(self, n: syntax.Simple, fields: list[Field], prev: int | None):
        flags = [f.value or f.text for f in fields if (f.value or f.text).startswith("-")]
        flags = flags or [n.words[0].text]  # an unresolved ${A[@]}: its words are unknown
        shown = " ".join(flags[:3]) + (" ..." if len(flags) > 3 else "")
        above = f"line {prev}" if prev else "the line above"
        self.notes.append(note(
            "missing-line-continuation",
            f"line {n.line} starts with '{shown}' but {above} does not end in '\\', so bash "
            f"ends the command there and runs line {n.line} on its own "
            f"('{flags[0]}: command not found'); these flags never reach the launch command",
            f"end {above} with ' \\'",
            self.src(n.line)))


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


