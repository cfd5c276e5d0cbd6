"""The interpreter: runs a script's syntax tree over a model of bash that knows only literal
values (variables, arrays, functions, ``source``, if/case over known tests, here-strings,
``read``/``mapfile``/``eval`` of known text). What is decided at run time (other command
output, branches on unknown conditions, unset variables) stays unknown with file:line.
The process environment is never read: only the ``env`` given, so a check is reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from ..model.errors import Location
from ..reading.textfilters import FILTERS
from . import containers, syntax
from . import launch as launches
from .assign import Assignments
from .branches import Branches
from .budget import (
    MAX_EXPANDED,
    MAX_STEPS,
    Budget,
    too_many,
)
from .builtins import Builtins
from .conditions import Conditions
from .cursor import Cursor
from .expand import Words
from .files import Files
from .findings import Findings
from .loops import Loops
from .provenance import Provenance
from .records import ScriptReadError
from .state import Either, Leave, Shell
from .texts import Texts
from .values import (
    MAX_ITEMS,
    MAX_VALUE,
    PID,
    Field,
    Unk,
    Var,
    shown,
)


class Reader:
    """One read of one script (Oils' cmd_eval): runs commands over the shell state, with word
    expansion (`w`), conditions (`tests`), loops, assignments (`assigns`), the built-ins, the
    position (`at`), the findings, provenance and the budget as collaborators."""

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
        self.assigns = Assignments(self.sh, self.w, self.env, self.budget, self.at)
        self.loops = Loops(self)
        self.files = Files(self.at, self.found, self.budget, self.loops)
        self.builtins = Builtins(self, self.w, self.prov, self.assigns, self.loops)
        self.tests = Conditions(self.w, self.builtins.getopts_next)
        self.branches = Branches(self)
        self.texts = Texts(self)
        # >0 while a command runs where its failure is tested (an if/while test, before
        # && or ||, a negated pipeline): `set -e` does not stop bash there (bash(1), set -e)
        self.checked = 0
        # paths a run-time test requires to exist, for the commands it guards (`[ -f F ] &&
        # source F`): innermost last
        self.guards: list[frozenset[str]] = []
        # functions and sourced files running in this shell: `return` ends the innermost
        # (elsewhere bash refuses it and goes on)
        self.returns = 0
        # per function, sourced file or other shell running: the states its `return`s left
        # in (with the condition of the branch they ran in), joined where it ends
        self.returned: list[list[tuple]] = []
        self.box: containers.Box | None = None  # in a container: what maps its paths

    def run_main(self):
        abs_path = self.at.main_abs
        body = self.files.parse_file(abs_path, self.at.disp(abs_path))
        with self.files.entering(abs_path, self.at.disp(abs_path), abs_path), \
                self.ending("exit"):
            self.run(body, None)

    @contextmanager
    def ending(self, *kinds: str, scope: bool = False, shell: bool = False):
        """What runs inside ends at an `exit` or `return` of `kinds` (state.Leave).
        `scope`: a function or sourced file (`return` ends it); `shell`: another bash (the
        functions and files it runs in are not this shell's)."""
        saved, left = self.returns, False
        self.returns = 0 if shell else saved + scope
        self.returned.append([])
        try:
            yield
        except Leave as e:
            if e.kind not in kinds:
                raise
            left = True
        finally:
            self.returns = saved
            ends = self.returned.pop()
        if scope and ends:  # bash goes on after the call in each way a `return` ended
            self.sh.rejoin(ends, left, self.env)

    def source_file(self, path: str, n: syntax.Simple, cond: Unk | None, shown: str,
                    child: bool = False):
        """``source FILE`` of a file found on disk (`child`: as another bash runs it)."""
        with self.files.entering(path, self.at.disp(path), path, self.at.src(n.line), shown) as ok:
            if ok:
                with self.ending(*(("exit",) if child else ("return",)), scope=not child,
                                 shell=child):
                    self.run(self.files.parse_file(path, self.at.disp(path)), cond)

    def contained(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``bash FILE`` in a container (`box`): FILE is the container's (containers.script)."""
        containers.script(self, fields, n, cond)

    def run_child(self, path: str, args: list[Field] | None, n: syntax.Simple,
                  cond: Unk | None, shown: str, written: bool = False):
        """``bash FILE ARGS``: another shell runs the file (one on disk, or `written` by the
        script: `path` is its key) with ARGS as $1... and FILE as $0; it sees only the
        exported variables, and nothing it sets comes back here."""
        if self.budget.deep:
            return
        with self.child_shell(args, shown):
            if written:
                self.run_written(path, n, cond, child=True)
            else:
                self.source_file(path, n, cond, shown, child=True)

    @contextmanager
    def child_shell(self, args: list[Field] | None, zero: str):
        """Another bash started by this one: it sees only the exported variables, with
        `args` as $1... and `zero` as $0; nothing it sets comes back here."""
        sh = self.sh
        saved = sh.snapshot()
        given = sh.child_names()
        sh.vars = {k: v for k, v in sh.vars.items() if k in given and not v.array}
        sh.funcs, sh.func_file, sh.frames, sh.positions, sh.scopes = {}, {}, [args], [], []
        sh.zero = zero
        self.budget.calls += 1
        try:
            yield
        finally:
            self.budget.calls -= 1
            sh.restore(saved)

    def run_written(self, key: str, n: syntax.Simple, cond: Unk | None, child: bool = False):
        """``source F`` of a file the script wrote: its text is read as a sourced file's
        (its words are not the file's own text on disk, so they carry no span). Text known
        only at run time run by another shell (`child`: ``bash F``) sets nothing here."""
        text = self.sh.written[key]
        where = self.at.src(n.line)
        if text is None and child:
            return None
        if text is None:
            why = f"sourced file '{shown(key)}' is written by the script with text only " \
                  "known when it runs"
            self.found.unknown(n.words[1].text, where, f"{why}; the flags it defines are "
                               "unknown")
            return self.assigns.taint(f"{n.words[0].text} {n.words[1].text}", where, why)
        disp = shown(key)
        with self.files.entering(key, disp, self.at.where[-1], where, disp) as ok:
            if not ok:
                return
            try:
                body = self.files.parse(text.encode("utf-8", "surrogateescape"), disp, False)
            except ScriptReadError as e:
                raise ScriptReadError(f"{where}: the file it sources, which the script "
                                      f"writes, is not valid bash: {e}") from None
            with self.ending(*(("exit",) if child else ("return",)), scope=not child,
                             shell=child):
                self.run(body, cond)

    def run_text(self, text: str, line: int, cond: Unk | None, name: str, n: syntax.Simple):
        """``eval TEXT``: parsed and run here, as deep as calls are followed."""
        body = self.files.parse(text.encode("utf-8", "surrogateescape"), self.at.file, False, line)
        if self.budget.deep:  # not followed: what it may set is unknown from here on
            return self.assigns.too_deep(name, n, body)
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
            status = self.tests.status([n.items[0][1]], cond)
            reason = self.tests.why_unknown
            with self.testing():
                self.node(n.items[0][1], cond)
            self.at.branch.append(self.at.src(_line(n)))
            self.guards.append(self.tests.tested_files([n.items[0][1]])
                               if status is None and n.items[1][0] == "&&" else frozenset())
            try:
                self.branches.and_or(n, status, reason, cond, _line(n))
            finally:
                self.at.branch.pop()
                self.guards.pop()
        elif t is syntax.Pipe:
            if len(n.cmds) > 1:
                self.pipeline(n, cond)
            else:
                with self.testing(n.neg):
                    self.node(n.cmds[0], cond)
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
                self.subshell(n.body, cond)
            else:
                self.run(n.body, cond)
        elif t is syntax.ArithCmd:
            self.assigns.arith_cmd(n, cond)

    def pipeline(self, n: syntax.Pipe, cond: Unk | None):
        """``a | b``: bash runs each command in a subshell (only the last one's status
        counts); with ``shopt -s lastpipe`` the last one runs in this shell, so what it may
        set is unknown after it (``... | while read -r x; do TP=$x; done``)."""
        last = len(n.cmds) - 1
        for k, c in enumerate(n.cmds):
            with self.testing(n.neg or k < last):
                self.subshell([c], cond)
        self.assigns.too_deep("|", SimpleNamespace(line=_line(n)), [n.cmds[-1]], why=(
            ", the last command of a pipeline (a subshell, or this shell under `shopt -s "
            "lastpipe`)"))

    def subshell(self, body: list, cond: Unk | None, shell: bool = False):
        """``( ... )`` (`shell`: another bash reading a here-document script): a copy of
        this shell; only the files it writes outlast it."""
        sh = self.sh
        saved = sh.snapshot()
        try:
            with self.loops.barrier(), self.ending("exit", *(() if shell else ("return",)),
                                                   shell=shell):
                self.run(body, cond)
        finally:
            written, prev_end = sh.written, sh.prev_end
            sh.restore(saved)
            sh.written, sh.prev_end = written, prev_end

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
            self.branches.if_(n, cond)
        elif t is syntax.Case:
            self.branches.case(n, cond)
        else:
            self.loops.loop(n, cond)

    def simple(self, n: syntax.Simple, cond: Unk | None):
        words = n.words
        head = words[0].text if words else ""
        self.at.stmt_line = n.line
        budget = self.budget
        budget.steps += 1
        if budget.steps > MAX_STEPS:
            budget.over_steps(self.at.src(n.line))
        if not budget.steps & 1023:  # the input's --timeout covers its reading too
            budget.check_clock(self.at.src(n.line))
        if not words or head in syntax.DECLARE:
            if head in ("declare", "typeset", "local"):
                self.assigns.declare(n, head)
            for a in n.assigns:
                self.assigns.assign(a, cond)
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
        elif first.base() is not None:  # "${PYTHON_BIN}": a program only its name is known of
            self.command(fields, n, cond)

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
        # X=4 source F / X=4 func: X set while it runs; X=4 bash F / X=4 nohup bash F / any
        # other program: X in its environment too (a shell it starts sees it)
        here = name in self.sh.funcs or name in ("source", ".")
        other = not here and (name in ("bash", "sh") or name not in self.builtins.table)
        with self.assigns.held(n.prefix if here or other else (), cond, export=other):
            if name in self.sh.funcs:
                if self.budget.deep:
                    self.assigns.too_deep(name, n)
                elif type(self.sh.funcs[name]) is Either:  # defined at run time: each a way
                    self.branches.call(name, fields, n, cond)
                else:
                    self.call(name, fields, n, cond)
                return
            handler = self.builtins.table.get(name)
            if handler is None or handler(fields, n, cond) is False:
                self.command(fields, n, cond)

    def write(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``cat > F <<EOF``, ``echo ... > F``, ``printf ... >> F``: the file's text, when the
        command is a text filter over known text (else the file is known to be written, its
        text not)."""
        word, append = n.stdout
        path = self.w.path_of(word)
        doc = n.stdin if isinstance(n.stdin, syntax.Heredoc) else None
        if doc is not None and any(t in doc.text for t in launches.TRAIN_FILES):
            self.found.written.append((self.at.src(n.line), path or word.text))
        if path is None:
            return
        key = self.w.file_key(path)
        text = None
        if self.sh.plain(cond) is None and fields[0].value in FILTERS and not n.prefix:
            alone = syntax.Simple(assigns=[], words=n.words, line=n.line, end=n.end,
                                  stdin=n.stdin)
            got = self.w.subs.filtered([alone], word)
            text = got.value
        if append and text is not None:
            old = self.sh.written.get(key, "" if key not in self.sh.written and
                                      not os.path.exists(key) else None)
            text = None if old is None else old + text
        if text is not None and len(text) > MAX_VALUE:
            text = None
        self.sh.written[key] = text

    def call(self, name: str, fields: list[Field], n: syntax.Simple, cond: Unk | None,
             body: list | None = None):
        """A function call (of `body`, one of its definitions): its own positional
        parameters and local variables."""
        sh = self.sh
        self.budget.calls += 1
        sh.frames.append(fields[1:])
        self.at.where.append(sh.func_file.get(name, self.at.where[-1]))
        sh.positions.append([0, 0])
        sh.scopes.append({})
        try:
            with self.loops.barrier(), self.ending("return", scope=True):
                self.run(sh.funcs[name] if body is None else body, cond)
        finally:
            sh.frames.pop()
            sh.leave()
            self.at.where.pop()
            self.budget.calls -= 1
            self.prov.pin(fields[1:], sh.positions.pop()[1], n)

    def command(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """Any other command: a launch, or another shell reading a script (a here-document,
        ``bash -c TEXT``, ``bash FILE`` behind a wrapper)."""
        if any(f.value is not None and PID in f.value for f in fields):
            fields = [_pid_unknown(f) if f.value is not None and PID in f.value else f
                      for f in fields]
        if containers.launch(self, fields, n, cond):  # docker run ... IMAGE python3 train.py
            return
        got = launches.find(fields, self.at.src(n.line), cond)
        if got:
            self.found.launch(containers.placed(self, got, fields, n))
        elif type(n.stdin) is syntax.Heredoc and launches.reads_stdin_script(
                [f.value for f in fields]):
            self.texts.heredoc(n.stdin, cond)
        else:  # bash -c '...' (srun ... bash -lc), nohup bash F &, docker run -v ... bash F
            containers.follow(self, fields, n, cond)

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


def _line(node) -> int:
    while not hasattr(node, "line"):
        node = node.items[0][1] if type(node) is syntax.AndOr else node.cmds[0]
    return node.line


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
