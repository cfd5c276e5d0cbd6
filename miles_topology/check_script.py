"""`check SCRIPT.sh`: what a launch script really launches, judged by the Topology's rules.

The script is read statically (script.py); its flags go through the same `read_flags`
as the launcher, so there is one rule set. A problem that involves a value the reader
could not resolve is reported as skipped, not failed: `ok` is false only when proven.
"""

from __future__ import annotations

from .errors import InputError, Location, Problem
from .flags import field_of, flag_of, known
from .model import summary_fields
from .report import Verdict, verdict_of
from .script import ScriptRead, ScriptReadError, read_script
from .sources import read_flags


def read(path: str, env: dict[str, str]) -> ScriptRead:
    """Read a script or raise InputError (exit 2) saying why."""
    try:
        found = read_script(path, env)
    except ScriptReadError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if found.entry is None:
        raise InputError(
            f"{path}: no training launch found (python3 train.py, train_async.py, torchrun, "
            "or ray job submit ... -- python3 train.py)"
        )
    return found


def values_report(found: ScriptRead) -> dict:
    """Each topology flag's final value with its source, and the earlier places it was set."""
    out = {}
    for flag, seen in found.values().items():
        if not known(flag):
            continue
        last = seen[-1]
        out[flag] = {
            "value": last.value,
            "source": str(last.source),
            "overridden": [{"value": v.value, "source": str(v.source)} for v in seen[:-1]],
        }
    return out


def check_script(path: str, env: dict[str, str]) -> Verdict:
    found = read(path, env)
    exported = found.site.environ() if found.site else env  # what a --topology YAML sees
    v = verdict_of(path, lambda: read_flags(found.flags(), exported).topology)
    unknown = {u.flag for u in found.unresolved if u.flag}
    if any(field_of(f) in summary_fields() for f in unknown):
        v.summary = None  # the sizes are not known, so they are not reported
    if unknown:
        proven = [p for p in v.errors if not unknown & set(p.flags)]
        v.skipped += [p for p in v.errors if unknown & set(p.flags)]
        v.errors = proven
    v.warnings = [_note(n) for n in found.notes] + v.warnings
    where = _where(found)
    v.errors, v.warnings, v.skipped = (
        [p.at(_locate(p, where)) if p.location is None else p for p in ps]
        for ps in (v.errors, v.warnings, v.skipped))
    values = values_report(found)
    v.extra = {
        "launcher": found.launcher,
        "entry": found.entry,
        "values": values,
        "unresolved": [
            {"flag": u.flag, "expression": u.expression, "source": str(u.source), "why": u.why}
            for u in found.unresolved
        ],
        "report_lines": _lines(values, found),
    }
    return v


def _note(n) -> Problem:
    return Problem(n.code, n.message, n.fix, (), "warning", Location(n.source.path, n.source.line))


def _where(found: ScriptRead) -> dict[str, Location]:
    """Flag (and, for a --topology file, each field's flag) -> where its final value is set."""
    out = {}
    for flag, seen in found.values().items():
        src = seen[-1].source
        if src.line > 0:
            out[flag] = Location(src.path, src.line)
            name = field_of(flag)
            if name:  # problems quote a field's own flag, the script may use another spelling
                out.setdefault(flag_of(name), out[flag])
    return out


def _locate(p: Problem, where: dict[str, Location]) -> Location | None:
    """The line that sets the first of the problem's flags the script sets."""
    return next((where[f] for f in p.flags if f in where), None)


def _lines(values: dict, found: ScriptRead) -> list[str]:
    lines = [f"launch: {found.launcher or '?'} {found.entry}"]
    for flag, info in values.items():
        shown = {"": "(switch)", None: "?"}.get(info["value"], info["value"])
        lines.append(f"{flag} {shown}  <- {info['source']}")
        for old in info["overridden"]:
            lines.append(f"    overrides {old['value'] or '(switch)'} at {old['source']}")
    for u in found.unresolved:
        lines.append(f"unresolved {u.flag or ''} = {u.expression}  at {u.source}: {u.why}")
    return lines
