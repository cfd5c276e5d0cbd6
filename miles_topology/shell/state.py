"""The shell state a read changes as it runs a script (variables, functions, positional
parameters, exports, directory), kept apart from the interpreter's behaviour so a loop or
subshell can save and put it back in one place."""

from __future__ import annotations

from .values import Field, Unk, Var


class Shell:
    """What bash itself would hold while running the script."""

    __slots__ = ("vars", "funcs", "func_file", "frames", "positions", "assoc", "exported",
                 "inherited", "cwd", "allexport", "prev_end", "scopes", "written", "taint",
                 "zero", "errexit")

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
