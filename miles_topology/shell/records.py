"""What reading a launch script yields: flags with their sources and the exact text they
occupy (spans, for migrations), what stayed unknown, and notes. Plain data, no parsing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from miles_topology.model.errors import Location, Problem
from miles_topology.reading.env import PartialEnv
from miles_topology.reading.flags import is_switch

__all__ = ["FlagValue", "LaunchSite", "ScriptRead", "ScriptReadError", "Span", "Token",
           "Unresolved", "is_switch", "note"]


class ScriptReadError(Exception):
    """The script cannot be read or bash would reject its syntax (the CLI exits 2)."""


@dataclass(frozen=True)
class Token:
    """One argv word as `flags.parse_flags` reads it, with the line of the flag it belongs
    to: flags.py's problems (a repeat, a typo) then point at the script's line."""

    text: str
    source: Location


@dataclass(frozen=True)
class Span:
    """The exact text a word occupies, so a rewrite can edit that word and nothing else.

    `file` is absolute; `start`/`end` are character offsets into its text; `line` and
    `end_line` are 1-based, `col` and `end_col` 0-based. `stmt_line` is the line where the
    command or assignment holding the word starts, and `branch` the if/case/loop/&& it runs
    under (None at the top level), because moving a word out of a branch changes its meaning.
    """

    file: str
    start: int
    end: int
    line: int
    col: int
    end_line: int
    end_col: int
    stmt_line: int = 0
    branch: Location | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.file, self.start, self.end)


@dataclass(frozen=True)
class FlagValue:
    """One flag after the entry script; `value` is "" for a switch, None when unknown.

    `tokens` holds the value words as they reach argv (several for ``nargs='+'`` flags,
    none for a switch); `value` is them joined by spaces. `span` is where the flag word is
    written (the whole word for ``--flag=value``) and `value_spans` where each value word is;
    None where a word cannot be pinned to text of its own (for example one of several flags
    held in one string variable, or the output of a command substitution).
    """

    flag: str
    value: str | None
    source: Location
    unresolved: str | None = None
    tokens: tuple[str, ...] = field(default=(), compare=False, repr=False)
    span: Span | None = field(default=None, compare=False, repr=False)
    value_spans: tuple[Span | None, ...] = field(default=(), compare=False, repr=False)
    joined: bool = field(default=False, compare=False, repr=False)  # written --flag=value
    # its one value word is an unquoted expansion alone (``--wandb-key ${WANDB_KEY}``) whose
    # value is unknown: empty at run time, bash drops it and the flag gets no value
    bare: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class LaunchSite:
    """Where the launch command is and what the shell holds when it runs.

    `statement` marks where the command starts and `entry` the entry script word
    (``train.py``), both None when not pinned to the file's text; `variables` are the string
    variables at the launch (None: known only at run time) and `exported` the names a child
    process sees, which is what a topology YAML's ``${oc.env:VAR}`` reads.
    """

    statement: Span | None
    entry: Span | None
    branch: Location | None
    variables: Mapping[str, str | None]
    exported: frozenset[str]
    command: Location | None = None  # as in `ScriptRead.uses`
    # `ray job submit`: the entrypoint does not inherit the script's exports; it gets the
    # runtime env's env_vars (`job_env`; None when not written literally in the script)
    job: bool = False
    job_env: Mapping[str, str] | None = None
    # run in a container (shell/containers.py): what its command passes the process, and
    # why more may be set (an --env-file), None when that is all
    box_env: tuple[Mapping[str, str], str | None] | None = None

    def environ(self) -> dict[str, str]:
        """The environment the launched process gets, as far as it is known (under ray job
        submit, a `PartialEnv` when the runtime env is not known: its names are unknown; in
        a container, what the container passes)."""
        if self.job:
            if self.job_env is None:
                return PartialEnv(why="ray job submit's runtime env is not written literally "
                                  "in the script (the entrypoint sees only the runtime env)")
            return dict(self.job_env)
        if self.box_env is not None:
            env, why = self.box_env
            return PartialEnv(env, why=why) if why else dict(env)
        return {k: v for k, v in self.variables.items() if k in self.exported and v is not None}


@dataclass(frozen=True)
class Unresolved:
    flag: str | None
    expression: str
    source: Location
    why: str


def note(code: str, message: str, fix: str, where: Location) -> Problem:
    """What the reader says about the script (its code's severity: a note, or an error
    bash makes of it), at a file as the user named it (sourced files relative to the
    script's folder) and a 1-based line; values given by ``env`` are at ``<env>``:0."""
    return Problem(code, message, fix, location=where)


@dataclass
class ScriptRead:
    path: str
    launcher: str | None
    entry: str | None
    argv: list[FlagValue]
    unresolved: list[Unresolved]
    notes: list[Problem]
    site: LaunchSite | None = None
    # Span.key -> the commands (file:line) whose words a located word reached
    uses: dict[tuple[str, int, int], frozenset[Location]] = field(default_factory=dict)
    # argv positions before which an unknown number of words is passed (an unresolved
    # ``${A[@]}``, ``$@``...): they may hold any flag, so a flag only given before the
    # last of them may be overridden, and one not given at all may be set there
    gaps: list[int] = field(default_factory=list)
    # python/torchrun/ray commands found that are not a training launch (file:line, what)
    others: list[tuple[Location, str]] = field(default_factory=list)
    # a torchrun launch's (nnodes, nproc_per_node) from its expanded options; None: unknown
    world: tuple[int, int] | None = None
    # the framework the job's machine has where the script sources a file of its checkout
    # there (`source /root/slime/scripts/models/M.sh`: slime), as stack.entry_framework
    # reads `/root/slime/train.py`; empty when none or both
    frameworks: tuple[str, ...] = ()
    # files it writes from a here-document naming train.py, another program runs (where, file)
    written: list[tuple[Location, str]] = field(default_factory=list)
    # scripts a container runs that are not read (a path no mount maps here): (where, why)
    contained: list[tuple[Location, str]] = field(default_factory=list)
    # what may launch training but is not known here (where, why): a `bash -c TEXT` naming
    # train.py whose TEXT is unknown, a python/ray launch whose entry word is unknown
    hidden: list[tuple[Location, str]] = field(default_factory=list)
    # the launch runs in a container: (how it is said, the file of this machine its entry
    # is, None when none is known: why) (shell/containers.py)
    box: tuple[str, str | None, str] | None = None

    def flags(self) -> list[str]:
        """argv as plain strings for ``Topology.from_flags``; unknown values drop their flag."""
        return [t.text for t in self.tokens()]

    def tokens(self) -> list[Token]:
        """`flags()` as words that know their line (what `check` hands to flags.py)."""
        out: list[Token] = []
        for fv in self.argv:
            if fv.value is None:
                continue
            if fv.joined and is_switch(fv.flag):  # --colocate=false is not --colocate false
                out.append(Token(f"{fv.flag}={fv.value}", fv.source))
                continue
            if fv.flag:
                out.append(Token(fv.flag, fv.source))
            out.extend(Token(t, fv.source) for t in fv.tokens)
        return out

    def values(self) -> dict[str, list[FlagValue]]:
        """Every occurrence of each flag, in order (the last one wins)."""
        out: dict[str, list[FlagValue]] = {}
        for fv in self.argv:
            if fv.flag:
                out.setdefault(fv.flag, []).append(fv)
        return out
