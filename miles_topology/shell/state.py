"""The shell state a read changes as it runs a script (variables, functions, positional
parameters, exports, directory), kept apart from the interpreter's behaviour so a loop or
subshell can save and put it back in one place."""

from __future__ import annotations

from ..model.errors import Location
from .values import Field, Unk, Var


class Leave(Exception):
    """``exit`` / ``return`` run where the read surely reaches it (no condition, or a way of a
    branch being joined): the script (`kind` "exit") or the function or sourced file
    ("return") goes no further. A way of a branch that leaves is not joined into what follows
    (branches.py); the shell, function or file it ends is where it is caught (interpret.py)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class Either(list):
    """A function defined differently (or not at all: `missing`) in the ways of a branch
    decided at run time: its bodies; which one a call runs is known only then (`cond`: the
    branch), so a call is a branch of its own (branches.Branches.call)."""

    def __init__(self, bodies, cond: Unk, missing: bool):
        super().__init__(bodies)
        self.cond, self.missing = cond, missing


class Shell:
    """What bash itself would hold while running the script."""

    __slots__ = ("vars", "funcs", "func_file", "frames", "positions", "assoc", "exported",
                 "inherited", "cwd", "allexport", "prev_end", "scopes", "written", "taint",
                 "zero", "errexit", "joins")

    def __init__(self, args: list[Field] | None, inherited: set[str]):
        self.vars: dict[str, Var] = {}
        self.funcs: dict[str, list] = {}
        self.func_file: dict[str, str] = {}  # the file each function was defined in
        # positional parameters: the script's, then one list per function call (None: unknown)
        self.frames: list[list[Field] | None] = [args]
        # per function call: [words shifted off, highest argument position read by index]
        self.positions: list[list[int]] = []
        # per function call: the outer values of the names it made local (None: was unset)
        self.scopes: list[dict[str, Var | None]] = []
        self.assoc: set[str] = set()  # declared associative (declare -A)
        self.exported: set[str] = set()  # by export / declare -x
        self.inherited = inherited  # from --env, not set by the script
        self.cwd: str | None = None
        self.allexport = False
        self.prev_end: dict[str, int] = {}  # per file: last line of the previous command
        self.written: dict[str, str | None] = {}  # files the script wrote (None: unknown text)
        # the last source/eval not read: a name unset since then may have been set by it
        self.taint: Unk | None = None
        self.zero: str | None = None  # $0 in a `bash FILE` child: FILE (else the script's)
        self.errexit = False  # `set -e`: a failing command stops the script
        # the conditions of branches being joined (branches.py), by identity: what is set
        # under one of them is set as in a way of its own, not made unknown
        self.joins: list[Unk] = []

    def child_names(self) -> set[str]:
        """The variables a child process gets in its environment: exported (export,
        declare -x, a prefix assignment), every one under ``set -a``, and those the
        environment gave (--env)."""
        return set(self.vars) if self.allexport else self.exported | self.inherited

    def copy_vars(self) -> dict[str, Var]:
        """The variables, to put back after a subshell, a here-document script or a loop
        that cannot be stepped through (associative arrays keep their keys)."""
        return {k: Var(list(v.items), v.array, v.keys) for k, v in self.vars.items()}

    def snapshot(self) -> tuple:
        return (self.copy_vars(), dict(self.funcs), dict(self.func_file), list(self.frames),
                [list(p) for p in self.positions], [dict(s) for s in self.scopes],
                set(self.assoc), set(self.exported), set(self.inherited), self.cwd,
                self.allexport, dict(self.prev_end), dict(self.written), self.taint, self.zero,
                self.errexit)

    def restore(self, saved: tuple):
        (self.vars, self.funcs, self.func_file, self.frames, self.positions, self.scopes,
         self.assoc, self.exported, self.inherited, self.cwd, self.allexport,
         self.prev_end, self.written, self.taint, self.zero, self.errexit) = saved

    def make_local(self, name: str):
        """``local NAME`` in a function: the outer value comes back when the call returns
        (bash's dynamic scope: functions it calls see the local one)."""
        if self.scopes and name not in self.scopes[-1]:
            old = self.vars.get(name)
            self.scopes[-1][name] = None if old is None else Var(list(old.items), old.array,
                                                                 old.keys)

    def leave(self):
        """A function returns: its locals give way to the outer values."""
        for name, old in self.scopes.pop().items():
            if old is None:
                self.vars.pop(name, None)
            else:
                self.vars[name] = old

    def joined(self, cond: Unk) -> bool:
        return any(c is cond for c in self.joins)

    def plain(self, cond: Unk | None) -> Unk | None:
        """The condition an assignment is made under: none in a branch being joined (each
        way sets its values; the join decides what stays known)."""
        return None if cond is not None and self.joined(cond) else cond

    def under(self, cond: Unk | None, make) -> Unk:
        """The condition of a nested branch: `cond`, unless there is none or it is a join's
        (the branch then needs its own: `make()`)."""
        return make() if cond is None or self.joined(cond) else cond

    def join(self, ends: list[tuple], cond: Unk, env: dict[str, str], errexit: bool,
             before: dict[str, Var]):
        """Join the end states of the ways a branch may go (snapshots; the live state is the
        last way) into the live state: a variable the same in every way keeps its value,
        one that differs (or is unset in some) is unknown, or --env's value when given; it
        is located at the last assignment a way made (`before`: the values the ways start
        from)."""
        ways = [e[0] for e in ends] + [self.vars]
        exports = [e[7] for e in ends] + [self.exported]
        # exported in some ways only: a child shell or a launch sees it or not
        moved = set().union(*exports) - set.intersection(*exports)
        out: dict[str, Var] = {}
        for name in dict.fromkeys(k for w in ways for k in w):
            got = [w.get(name) for w in ways]
            if name not in moved and all(_same(got[0], v) for v in got[1:]):
                out[name] = got[0]
            elif name not in moved and all(v is None or v.array and v.keys is None
                                           for v in got) and any(v is not None for v in got):
                out[name] = Var(_either([v.items if v else [] for v in got], cond), True)
            elif name in env and not any(v is not None and v.array for v in got):
                out[name] = Var([Field(env[name], Location("<env>", 0),
                                       text=f"--env {name}={env[name]}")], False)
            else:
                out[name] = _unknown(name, got, cond, before)
        self.vars = out
        self.join_rest(ends, cond, errexit)

    def rejoin(self, ends: list[tuple], left: bool, env: dict[str, str]):
        """The end of a function or sourced file whose `return`s left in the states `ends`
        (each with the condition of its way): they are joined with the state at its end,
        unless it ended by one of them (`left`)."""
        states = [e[0] for e in ends] + ([] if left else [self.snapshot()])
        cond = next((c for _, c in ends if c is not None), None)
        self.restore(states.pop())
        if states and cond is not None:
            self.join(states, cond, env, self.errexit, {})

    def join_rest(self, ends: list[tuple], cond: Unk, errexit: bool):
        """`join` of what is not a variable: a function defined differently (or only) in
        some ways is an Either; names of all ways; a folder, the positional words, a written
        file's text or the outer value a `local` hides that differ are unknown; `set -e`
        that differs is as before the branch (`errexit`)."""
        self.join_funcs([e[1] for e in ends], cond)
        if self.scopes:
            self.join_locals([e[5][-1] for e in ends if e[5]], cond)
        for e in ends:
            (_, _, func_file, frames, _, _, assoc, exported, inherited, cwd,
             allexport, prev_end, written, taint, _, ex) = e
            self.func_file = {**func_file, **self.func_file}
            if frames[-1] is not self.frames[-1] and (frames[-1] is None or self.frames[-1]
                                                      is None or not _same_words(
                                                          frames[-1], self.frames[-1])):
                self.frames[-1] = None
            self.assoc |= assoc
            self.exported |= exported
            self.inherited &= inherited
            self.cwd = self.cwd if cwd == self.cwd else None
            self.allexport = self.allexport or allexport
            for f, end in prev_end.items():
                self.prev_end[f] = max(end, self.prev_end.get(f, end))
            for k in set(written) | set(self.written):
                if written.get(k, False) != self.written.get(k, False):
                    self.written[k] = None
            self.taint = self.taint or taint
            if ex != self.errexit:
                self.errexit = errexit

    def join_funcs(self, ways: list[dict[str, list]], cond: Unk):
        """A function defined differently (or only) in some ways: an Either of its bodies."""
        funcs = ways + [self.funcs]
        for name in dict.fromkeys(k for f in funcs for k in f):
            got = [f.get(name) for f in funcs]
            if not all(_same_body(got[0], b) for b in got[1:]):
                bodies = {id(x): x for b in got if b for x in b}
                self.funcs[name] = Either(list(bodies.values()), cond, any(
                    b is None or getattr(b, "missing", False) for b in got))

    def join_locals(self, ways: list[dict[str, Var | None]], cond: Unk):
        """A name made `local` in some ways only (or hiding different values): the value it
        gets back when the function returns is unknown."""
        scopes = ways + [self.scopes[-1]]
        for name in dict.fromkeys(k for s in scopes for k in s):
            got = [s.get(name, False) for s in scopes]
            if any(v is False or not _same(got[0], v) for v in got):
                self.scopes[-1][name] = _unknown(name, [v or None for v in got], cond, {})


def _unknown(name: str, got: list[Var | None], cond: Unk, before: dict[str, Var]) -> Var:
    """A variable the ways of a branch leave differently: unknown, located at the last
    assignment a way made (an array's words: at the branch)."""
    array = any(v is not None and v.array for v in got)
    src = cond.src if array else next(
        (v.items[0].src for v in reversed(got) if v is not None and v.items and
         not _same(v, before.get(name))), cond.src)
    unk = Unk(name, src, f"{name} is assigned {cond.why}")
    return Var([Field(None, src, unk, name, array)], array)


def _same_body(a: list | None, b: list | None) -> bool:
    """One function definition (the very same nodes), or none in both."""
    return a is b or a is not None and b is not None and type(a) is type(b) and \
        len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _either(ways: list[list[Field]], cond: Unk) -> list[Field]:
    """An array's words after a branch whose ways set it differently: the words they share
    up to a flag, then each way's other words, each there only under the branch's condition
    (``WANDB_ARGS=(--use-wandb ...)`` in one way, ``()`` in the other: --use-wandb may be
    given; no other flag can be)."""
    p = 0
    while all(p < len(w) and _same_words(w[p:p + 1], ways[0][p:p + 1]) for w in ways):
        p += 1
    if any(p < len(w) and not (w[p].value or "").startswith("--") for w in ways):
        # a flag's value that differs: the flag goes with it
        p = next((k for k in range(p - 1, -1, -1) if (ways[0][k].value or "").startswith(
            "--")), p)
    rest = [Field(f.value, f.src, f.unk, f.text, f.extra, f.cond or cond, f.span)
            for w in ways for f in w[p:]]
    return ways[0][:p] + rest


def _same(a: Var | None, b: Var | None) -> bool:
    """Two ways' values of a variable are one value: the same known words (or the very same
    unknown ones, untouched by either way)."""
    if a is b:
        return True
    if a is None or b is None or a.array != b.array or a.keys != b.keys:
        return False
    return _same_words(a.items, b.items)


def _same_words(a: list[Field], b: list[Field]) -> bool:
    return len(a) == len(b) and all(
        x is y or x.unk is None and y.unk is None and x.cond is None and y.cond is None and
        x.value == y.value and x.extra == y.extra for x, y in zip(a, b))
