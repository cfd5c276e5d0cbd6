"""What `check` found: a `Verdict` an input, and what every output format reads of one.

Problems carry a `location` (file and line) when their reader knows it; the formats
(formats/) point a CI run at the line of the launch script that sets the flag, and at its
column (`column`). Writing is formats/' and safetext's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from ..model.errors import Location, Problem, TopologyError
from ..model.topology import summary

if TYPE_CHECKING:
    from ..model.topology import Topology


def status(p: Problem) -> str:
    """Which view of a verdict a problem is in: error, warning (warnings and notes, which
    do not fail the check either) or skipped (its rule could not decide)."""
    return p.severity if p.severity in ("error", "skipped") else "warning"


@dataclass
class Verdict:
    """What `check` found for one input (`unreadable`: why it could not be read at all).

    One list of `problems`; `errors`, `warnings` and `skipped` are views of it by `status`,
    each in the order found (setting a view replaces that view's problems)."""

    path: str
    topology: Topology | None = None
    problems: list[Problem] = field(default_factory=list)
    summary: dict | None = None
    extra: dict = field(default_factory=dict)  # script reports: values, unresolved, notes
    unreadable: str | None = None
    nothing: str | None = None  # in a batch: why this input has nothing to check (passes)
    memory: dict | None = None  # fit.py: the per-rank memory estimate (or why none)
    internal: bool = False  # `unreadable` is the checker's own failure (internal-error)
    site: Location | None = None  # a launcher's call that launches (launch.Launch.site)

    @property
    def code(self) -> str:
        """The code of an input that has no verdict of its own (`unreadable` set)."""
        return "internal-error" if self.internal else "unreadable"

    def file(self, p: Problem) -> None:
        """A problem into the view of its status."""
        self.problems.append(p)

    def _view(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if status(p) == kind]

    def _set(self, kind: str, ps) -> None:
        self.problems = [p for p in self.problems if status(p) != kind] + list(ps)

    errors = property(lambda self: self._view("error"), lambda self, ps: self._set("error", ps))
    warnings = property(lambda self: self._view("warning"),
                        lambda self, ps: self._set("warning", ps))
    skipped = property(lambda self: self._view("skipped"),
                       lambda self, ps: self._set("skipped", ps))

    def unread(self) -> Problem | None:
        """An input that could not be read, as its coded problem (`code`: unreadable or
        internal-error; unsuppressible, exit 2), else None."""
        if self.unreadable is None:
            return None
        return Problem(self.code, self.unreadable, "check the path")

    def launch_note(self) -> Problem | None:
        """One of several launches of a launcher (or a typer command's), as its coded note
        at the call that starts it (`launch`), else None."""
        if not _launch(self):
            return None
        return Problem("launch", _launch_text(self), "-", (),
                       location=self.site or Location(self.path, 0))

    @property
    def ok(self) -> bool:
        return not self.errors and self.unreadable is None

    def as_dict(self) -> dict:
        d = {
            "ok": self.ok,
            "errors": [p.as_dict() for p in self.errors],
            "warnings": [p.as_dict() for p in self.warnings],
            "topology": self.summary,
        }
        d["skipped"] = [p.as_dict() for p in self.skipped]
        if self.memory is not None:
            d["memory"] = self.memory
        if self.path != "flags":
            d = {"path": self.path, **d}
            if self.unreadable is not None:
                d["unreadable"] = self.unreadable
                if self.internal:
                    d["internal_error"] = True
            if self.nothing is not None:
                d["nothing_to_check"] = self.nothing
            d.update(self.extra)
        return d


def verdict_of(path: str, build: Callable[[], Topology]) -> Verdict:
    """Run `build()` -> Topology and file its outcome; InputError propagates (exit 2)."""
    v = Verdict(path)
    try:
        topo = build()
    except TopologyError as e:
        v.errors, v.warnings, v.summary = list(e.problems), list(e.warnings), e.summary
    else:
        v.topology, v.warnings, v.summary = topo, list(topo.warnings), summary(topo)
    return v


def exit_code(verdicts: list[Verdict]) -> int:
    """2 when an input could not be read, else 1 when one is invalid, else 0."""
    if any(v.unreadable is not None for v in verdicts):
        return 2
    return 0 if all(v.ok for v in verdicts) else 1


def name(v: Verdict) -> str:
    """The input's path; for one of several launches of a Python launcher, which one."""
    return v.path + (f" [{_launch(v)}]" if _launch(v) else "")


def _launch(v: Verdict) -> str:
    """"launch 2 of 12 at run.py:57" for a launcher that starts several (or a typer
    command's); "" for the one launch of an input."""
    got = v.extra.get("launch")
    if not got or (got["of"] == 1 and not got["command"]):
        return ""
    cmd = f", command `{got['command']}`" if got["command"] else ""
    at = f"line {v.site.line}" if v.site and v.site.path == v.path else str(v.site or "?")
    return f"launch {got['index'] + 1} of {got['of']}{cmd}, {at}"


def _launch_text(v: Verdict) -> str:
    s = v.summary or {}
    sizes = f": world {s.get('world_size', '?')}, dp {s.get('dp', '?')}, edp " \
        f"{s.get('edp', '?')}" if s else ": sizes unresolved"
    return f"{_launch(v)}{sizes}, {'OK' if v.ok else 'INVALID'}"


def _problems(v: Verdict) -> list[tuple[str, Problem]]:
    """(severity, problem) of a verdict by file, line and column (unlocated ones first); at
    one place errors, then warnings and notes, then skipped ones. The severity is the
    code's (codes/), or skipped."""
    found = [(p.severity, p) for p in (*v.errors, *v.warnings, *v.skipped)]
    return sorted(found, key=lambda kp: (kp[1].location.path, kp[1].location.line,
                                         column(kp[1]) or 0) if kp[1].location else ("", 0, 0))


SOURCE_MAX = 8 << 20  # bytes of a located file read for columns


@lru_cache(maxsize=64)
def _lines_of(path: str) -> tuple[str, ...]:
    """A file's lines, read again through the gate: only a file it admitted for this run,
    still a regular file, with a bound (never a device or a pipe, a link swapped out)."""
    from ..reading.gate import reread

    text = reread(path, limit=SOURCE_MAX)
    return tuple(text.splitlines()) if text is not None else ()


def column(p: Problem) -> int | None:
    """The 1-based column of a located problem: the one its reader knew (Location.column),
    else where its first flag (or, in a topology YAML, the field's key) is written on that
    line, else the line's first character."""
    from ..reading.flags import field_of

    if p.location is not None and p.location.column is not None:
        return p.location.column
    lines = _lines_of(p.location.path) if p.location else ()
    if not lines or p.location.line > len(lines):
        return None
    text = lines[p.location.line - 1]
    for want in [*p.flags, *(field_of(f) for f in p.flags if field_of(f))]:
        at = text.find(want)
        while at >= 0:
            end = at + len(want)
            if end == len(text) or not (text[end].isalnum() or text[end] in "-_"):
                return at + 1
            at = text.find(want, at + 1)
    return len(text) - len(text.lstrip()) + 1
