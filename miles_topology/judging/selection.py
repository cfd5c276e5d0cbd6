"""Which problems a run reports, as linters decide it: inline directives in the checked files,
`--select`/`--ignore`/`--severity`, and the `[tool.miles-topology]` table of pyproject.toml.

Directives, in a comment of a launch script, Python launcher or topology YAML:
  `# miles-topology: disable=CODE[,CODE]` on a problem's line or the line before it;
  `# miles-topology: disable-file=CODE[,CODE]` anywhere: every report of those codes in that
  file (`all` stands for every code).
A dropped error no longer fails the run, as with ruff's `noqa`; inputs that cannot be read
still exit 2.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from ..codes import CODES
from ..model.errors import InputError, Problem
from ..reading.settings import CLUSTER_KEYS, TABLE, WALK_KEYS, find_pyproject, read_toml

if TYPE_CHECKING:
    from .verdict import Verdict

DIRECTIVE = re.compile(r"#\s*miles-topology:\s*(disable|disable-file)\s*=\s*([\w, -]+)")
LEVELS = ("error", "warning", "note")  # what --severity takes; a skipped check is a note
KEYS = ("select", "ignore", "severity")  # of [tool.miles-topology]


@dataclass(frozen=True)
class Settings:
    select: frozenset[str] | None = None  # None: every code
    ignore: frozenset[str] = frozenset()
    severity: str = "note"  # the lowest level reported
    source: str | None = None  # the pyproject.toml the settings came from
    exclude: tuple[str, ...] | None = None  # None: discover.DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()

    def excluded(self) -> tuple[tuple[str, ...], str | None]:
        """(globs a folder walk leaves out, the folder they are relative to)."""
        from ..reading.discover import DEFAULT_EXCLUDE

        base = os.path.dirname(self.source) if self.source else None
        return (*(DEFAULT_EXCLUDE if self.exclude is None else self.exclude),
                *self.extend_exclude), base

    def reports(self, p: Problem, level: str) -> bool:
        if self.select is not None and p.code not in self.select or p.code in self.ignore:
            return False
        if self.select is None and p.code in CODES and CODES[p.code].off:
            return False
        return LEVELS.index(level) <= LEVELS.index(self.severity)


def codes(values: list[str] | tuple[str, ...], where: str) -> frozenset[str]:
    """Problem codes given as a list or comma-separated, each one a code of the registry."""
    out = set()
    for item in values:
        for code in (c.strip() for c in str(item).split(",")):
            if not code:
                continue
            if code not in CODES and code != "all":
                near = difflib.get_close_matches(code, CODES, n=1)
                hint = f"; did you mean {near[0]}?" if near else \
                    " (`miles-topology rule` lists the codes)"
                raise InputError(f"{where}: {code!r} is not a problem code{hint}")
            out.add(code)
    return frozenset(CODES) if "all" in out else frozenset(out)


def level(value: str, where: str) -> str:
    if value not in LEVELS:
        raise InputError(f"{where}: severity {value!r}: give one of {', '.join(LEVELS)}")
    return value


def settings(start: str, select: list[str] | None, ignore: list[str] | None,
             severity: str | None, isolated: bool = False) -> Settings:
    """The pyproject table found from `start`, with the command-line options over it;
    `isolated` (--isolated, as ruff's): no table is read, only the options count."""
    found = None if isolated else find_pyproject(start)
    table = read_toml(found)["tool"][TABLE] if found else {}
    where = f"{found} [tool.{TABLE}]" if found else ""
    for key in table:
        if key not in KEYS + WALK_KEYS + CLUSTER_KEYS:
            near = difflib.get_close_matches(key, KEYS + WALK_KEYS + CLUSTER_KEYS, n=1)
            hint = f"; did you mean {near[0]}?" if near else \
                f" (keys: {', '.join(KEYS + WALK_KEYS + CLUSTER_KEYS)})"
            raise InputError(f"{where}: unknown key {key!r}{hint}")
    got = Settings(source=str(found) if found else None)
    for key in ("select", "ignore", *WALK_KEYS):
        value = table.get(key)
        if value is not None and not (isinstance(value, list) and
                                      all(isinstance(x, str) for x in value)):
            example = '["sp-ignored"]' if key in KEYS else '["third_party/", "*.old.sh"]'
            raise InputError(f"{where}: {key} must be a list of strings, e.g. {key} = "
                             + example)
    if table.get("exclude") is not None:
        got = replace(got, exclude=tuple(table["exclude"]))
    if table.get("extend-exclude") is not None:
        got = replace(got, extend_exclude=tuple(table["extend-exclude"]))
    if table.get("select") is not None:
        got = replace(got, select=codes(table["select"], where))
    if table.get("ignore") is not None:
        got = replace(got, ignore=codes(table["ignore"], where))
    if table.get("severity") is not None:
        got = replace(got, severity=level(str(table["severity"]), where))
    if select:
        got = replace(got, select=codes(select, "--select"))
    if ignore:
        got = replace(got, ignore=got.ignore | codes(ignore, "--ignore"))
    if severity:
        got = replace(got, severity=level(severity, "--severity"))
    return got


@lru_cache(maxsize=256)
def _parsed(path: str) -> tuple[tuple[int, str, str], ...]:
    """Every (line, kind, code) a directive of the file names, unknown codes included."""
    from ..reading.gate import reread

    text = reread(path)  # a file the gate let in for this run, read again
    if text is None:
        return ()
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for kind, listed in DIRECTIVE.findall(line):
            out += [(n, kind, c.strip()) for c in listed.split(",") if c.strip()]
    return tuple(out)


def suppressor(p: Problem, path: str | None) -> tuple[str, int, str] | None:
    """The directive that turns this report off, as (file, line, code as written), or None:
    in the file the problem is located in (else the checked file), on its line or the line
    before, or for the whole file."""
    where = p.location.path if p.location is not None else path
    if where is None or not os.path.isfile(where):
        return None
    line = p.location.line if p.location is not None else 0
    for n, kind, code in _parsed(where):
        if code not in (p.code, "all"):
            continue
        if kind == "disable-file" or line > 0 and n in (line, line - 1):
            return where, n, code
    return None


def directive_problems(path: str, used: set[tuple[str, int, str]]) -> list[Problem]:
    """The directives of a checked file that name no code, and those that suppressed
    nothing in this run (`used`: what `suppressor` returned)."""
    from ..model.errors import Location

    out = []
    if not os.path.isfile(path):
        return out
    for n, kind, code in _parsed(path):
        at = Location(path, n)
        if code != "all" and code not in CODES:
            near = difflib.get_close_matches(code, CODES, n=1)
            fix = f"write {near[0]}" if near else "use a code `miles-topology rule` lists"
            out.append(Problem("unknown-directive-code", f"`# miles-topology: {kind}={code}`: "
                               f"{code} is not a problem code, so it suppresses nothing"
                               + (f"; did you mean {near[0]}?" if near else "."), fix, (),
                               location=at))
        elif (path, n, code) not in used:
            where = "on this line or the next" if kind == "disable" else "in this file"
            out.append(Problem("unused-suppression", f"`# miles-topology: {kind}={code}` "
                               f"suppresses nothing: no {code} report {where}",
                               "remove the directive (or the code from its list)", (), location=at))
    return out


def apply(verdicts: list[Verdict], chosen: Settings) -> None:
    """Drop, in place, what the settings and the files' directives turn off, and add what
    is wrong with the directives of each checked file (once per file, after all its
    verdicts: one input's launches share its directives)."""
    used: set[tuple[str, int, str]] = set()
    for v in verdicts:
        path = v.path if v.path != "flags" else None

        def keep(p: Problem, level: str, path: str | None = path) -> bool:
            by = suppressor(p, path)
            if by is not None:
                used.add(by)
                return False
            return chosen.reports(p, level)

        v.errors = [p for p in v.errors if keep(p, "error")]
        v.warnings = [p for p in v.warnings  # warnings and notes, each at its code's level
                      if keep(p, p.severity)]
        v.skipped = [p for p in v.skipped if keep(p, "note")]
    seen = set()
    for v in verdicts:
        if v.path == "flags" or v.path in seen or v.unreadable is not None:
            continue
        seen.add(v.path)
        v.warnings += [p for p in directive_problems(v.path, used)
                       if chosen.reports(p, p.severity)]
