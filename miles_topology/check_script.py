"""`check SCRIPT.sh`: what a launch script really launches, judged by the Topology's rules.

The script is read statically (script.py); its flags go through the same `read_flags`
as the launcher, so there is one rule set. A problem that involves a value the reader
could not resolve is reported as skipped, not failed: `ok` is false only when proven.
"""

from __future__ import annotations

from .errors import InputError, Problem
from .flags import FLAGS, RENAMED
from .script import ScriptRead, ScriptReadError, read_script
from .sources import read_flags

TOPOLOGY_FLAGS = set(FLAGS) | set(RENAMED) | {"--topology"}
GRID_FIELDS = {"nodes", "gpus_per_node", "tp", "pp", "cp", "ep", "etp"}


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
        if flag not in TOPOLOGY_FLAGS:
            continue
        last = seen[-1]
        out[flag] = {
            "value": last.value,
            "source": str(last.source),
            "overridden": [{"value": v.value, "source": str(v.source)} for v in seen[:-1]],
        }
    return out


def check_script(path: str, env: dict[str, str]):
    from .cli import verdict_of

    found = read(path, env)
    exported = found.site.environ() if found.site else env  # what a --topology YAML sees
    v = verdict_of(path, lambda: read_flags(found.flags(), exported).topology)
    unknown = {u.flag for u in found.unresolved if u.flag}
    if any(f in FLAGS and FLAGS[f].field in GRID_FIELDS for f in unknown):
        v.summary = None  # the sizes are not known, so they are not reported
    if unknown:
        proven = [p for p in v.errors if not unknown & set(p.flags)]
        v.skipped += [p for p in v.errors if unknown & set(p.flags)]
        v.errors = proven
    v.warnings = [_note(n) for n in found.notes] + v.warnings
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
    return Problem(n.code, f"{n.source}: {n.message}", n.fix, (), "warning")


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
