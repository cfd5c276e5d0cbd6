"""What `check` found, and every way it is printed: text, JSON, GitHub annotations, SARIF.

A `Verdict` is one input's outcome; `render` writes a list of them in one format. Problems
carry a `location` (file and line) when their reader knows it; the GitHub and SARIF forms
use it so a CI run points at the line of the launch script that sets the flag.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import IO, TYPE_CHECKING

from .codes import CODES, page
from .errors import Location, Problem, TopologyError
from .model import summary
from .safetext import line as _line
from .safetext import printable

if TYPE_CHECKING:
    from .model import Topology

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


@dataclass
class Verdict:
    """What `check` found for one input (`unreadable`: why it could not be read at all)."""

    path: str
    topology: Topology | None = None
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    summary: dict | None = None
    extra: dict = field(default_factory=dict)  # script reports: values, unresolved, notes
    unreadable: str | None = None
    nothing: str | None = None  # in a batch: why this input has nothing to check (passes)
    memory: dict | None = None  # fit.py: the per-rank memory estimate (or why none)

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
    v.skipped = [p for p in v.warnings if p.severity == "skipped"]  # undecidable rules
    v.warnings = [p for p in v.warnings if p.severity != "skipped"]
    return v


def exit_code(verdicts: list[Verdict]) -> int:
    """2 when an input could not be read, else 1 when one is invalid, else 0."""
    if any(v.unreadable is not None for v in verdicts):
        return 2
    return 0 if all(v.ok for v in verdicts) else 1


def render(verdicts: list[Verdict], fmt: str, out: IO[str], *, quiet: bool = False,
           color: bool = False) -> None:
    """Write the verdicts in one format; `quiet` and `color` shape the text format only."""
    if fmt == "text":
        _text(verdicts, out, quiet, color)
    else:
        {"json": _json, "github": _github, "sarif": _sarif}[fmt](verdicts, out)


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
    path, _, line = got["source"].rpartition(":")
    at = f"line {line}" if path == v.path else got["source"]
    return f"launch {got['index'] + 1} of {got['of']}{cmd}, {at}"


def _launch_at(v: Verdict) -> tuple[str, int]:
    path, _, line = v.extra["launch"]["source"].rpartition(":")
    return (path, int(line)) if line.isdigit() else (v.path, 0)


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


# ---------------------------------------------------------------- text


# ANSI SGR colours of the text format on a terminal (no dependency: the core stays light)
COLORS = {"error": "31", "warning": "33", "skipped": "36", "note": "36", "INVALID": "1;31",
          "UNREADABLE": "1;31", "OK": "32", "nothing": "2"}


def paint(text: str, what: str, color: bool) -> str:
    return f"\033[{COLORS[what]}m{text}\033[0m" if color and what in COLORS else text


def _text(verdicts: list[Verdict], out: IO[str], quiet: bool = False,
          color: bool = False) -> None:
    """A report per input; `quiet`: only inputs with a problem, without values and map,
    and no batch table (what a pre-commit hook prints)."""
    for v in verdicts:
        if quiet and v.unreadable is None and not any(True for _ in _problems(v)):
            continue
        text_one(v, out, quiet, color)
    if quiet:
        return
    if len(verdicts) == 1 and verdicts[0].topology is not None and verdicts[0].extra and \
            verdicts[0].summary is not None:  # no map of sizes that depend on unknowns
        from .show import text_map

        print("\n" + text_map(verdicts[0].topology), file=out)
    if len(verdicts) > 1:
        _table(verdicts, out)


def text_one(v: Verdict, out: IO[str], quiet: bool = False, color: bool = False) -> None:
    # every text here may come from the checked files: printable, and no line a workflow
    # command (safetext)
    if v.unreadable is not None:
        print(_line(f"{printable(v.path)}: {paint('UNREADABLE', 'UNREADABLE', color)}: "
                    f"{printable(v.unreadable)}"), file=out)
        return
    if v.nothing is not None:
        print(_line(f"{printable(v.path)}: {paint('nothing to check', 'nothing', color)} "
                    f"({printable(v.nothing)})"), file=out)
        return
    s = v.summary
    state = paint("OK" if v.ok else "INVALID", "OK" if v.ok else "INVALID", color)
    if v.ok and v.extra.get("unresolved"):
        n = len(v.extra["unresolved"])
        # a value from a Python launcher's stand-in module or missing file is no --env's
        how = "pass --env KEY=VALUE" if any("kind" not in u for u in v.extra["unresolved"]) \
            else "see below"
        state = f"OK as far as known ({n} unresolved: {how})"
    sizes = ""
    if s:
        sizes = f"  world {s['world_size']}"
        if "dp" in s:
            sizes += f", dp {s['dp']}, edp {s['edp']}"
        sizes += (
            f" | tp {s['tp']} cp {s['cp']} pp {s['pp']} ep {s['ep']} etp {s['etp']}"
            f" | {s['num_engines']} engine(s) x {s['engine_size']} GPU"
        )
    print(_line(f"{printable(name(v))}: {state}{sizes}"), file=out)
    for line in [] if quiet else v.extra.get("report_lines", []):
        print(_line(f"  {printable(line)}"), file=out)
    if not quiet and v.memory is not None:
        for line in memory_lines(v.memory):
            print(f"  {line}", file=out)
    for kind, p in _problems(v):
        first, *rest = p.lines(kind)
        word, _, tail = first.partition(" ")
        print(_line(f"  {paint(word, kind, color)} {printable(tail)}"), file=out)
        for line in rest:
            print(_line(f"  {printable(line)}"), file=out)


def memory_lines(report: dict | None) -> list[str]:
    """The text of a memory estimate (fit.py's `Verdict.memory`)."""
    if not report:
        return []
    if "skipped" in report:
        return [f"memory: not estimated ({report['skipped']})"]
    big = report["stages"][report["largest_stage"]]
    acts = "?" if big["activations_gib"] is None else big["activations_gib"]
    gpu = f"{report['gpu_gib']:g} GiB {report['gpu']}" + (" (assumed)" if report["gpu_assumed"]
                                                          else "")
    out = [f"memory (largest rank, pipeline stage {big['stage']}): weights "
           f"{big['weights_gib']:g} + grads {big['grads_gib']:g} + optimizer "
           f"{big['optimizer_gib']:g} + activations ~{acts} = {big['total_gib']:g} GiB of "
           f"{gpu}" + ("" if report["vocab_known"] else " (vocabulary unknown)")]
    if len(report["stages"]) > 1:
        out.append("memory per rank, by pipeline stage (its ranks alike): " + ", ".join(
            f"pp{m['stage']} {m['total_gib']:g}" for m in report["stages"]) + " GiB")
    eng = report.get("engine")
    if eng:
        kv = "KV cache tokens unknown (no --sglang-mem-fraction-static)" \
            if eng["kv_tokens"] is None else f"KV cache ~{eng['kv_tokens']:,} tokens"
        out.append(f"rollout engine GPU (engine tp {eng['tp']}, ep {eng['ep']}, dp "
                   f"{eng['dp']}): weights {eng['weights_gib']:g} GiB (bf16), {kv}")
    return out


def _table(verdicts: list[Verdict], out: IO[str]) -> None:
    rows = [("input", "verdict", "world", "dp", "edp", "problems")]
    for v in verdicts:
        s = v.summary or {}
        codes = [p.code for p in v.errors] + [f"({p.code})" for p in v.skipped]
        state = "UNREADABLE" if v.unreadable is not None else "nothing to check" \
            if v.nothing is not None else "ok" if v.ok else "INVALID"
        rows.append((printable(name(v)), state, str(s.get("world_size", "?")),
                     str(s.get("dp", "?")), str(s.get("edp", "?")), " ".join(codes) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print(file=out)
    for r in rows:
        print(_line("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]),
              file=out)
    bad = sum(not v.ok and v.unreadable is None for v in verdicts)
    lost = sum(v.unreadable is not None for v in verdicts)
    idle = sum(v.nothing is not None for v in verdicts)
    tail = f", {lost} unreadable" if lost else ""
    tail += f", {idle} with nothing to check" if idle else ""
    valid = len(verdicts) - bad - lost - idle
    print(f"\n{len(verdicts)} inputs: {valid} valid, {bad} invalid{tail}", file=out)


def _json(verdicts: list[Verdict], out: IO[str]) -> None:
    data = [v.as_dict() for v in verdicts]
    print(json.dumps(data[0] if len(data) == 1 else data, indent=2), file=out)


SOURCE_MAX = 8 << 20  # bytes of a located file read for columns


@lru_cache(maxsize=64)
def _lines_of(path: str) -> tuple[str, ...]:
    """A file's lines, read again through the gate: only a file it admitted for this run,
    still a regular file, with a bound (never a device or a pipe, a link swapped out)."""
    from .gate import reread

    text = reread(path, limit=SOURCE_MAX)
    return tuple(text.splitlines()) if text is not None else ()


def column(p: Problem) -> int | None:
    """The 1-based column of a located problem: where its first flag (or, in a topology
    YAML, the field's key) is written on that line; else the line's first character."""
    from .flags import field_of

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


# ---------------------------------------------------------------- GitHub workflow commands


_LEVEL = {"error": "error", "warning": "warning", "note": "notice", "skipped": "notice"}


def _escape(text: str, prop: bool = False) -> str:
    text = printable(text, keep_newlines=True)  # no ESC into the log; newlines are %0A
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _github(verdicts: list[Verdict], out: IO[str]) -> None:
    """`::error file=F,line=L,title=CODE::message` per problem (GitHub Actions annotations)."""
    for v in verdicts:
        if v.unreadable is not None:
            print(f"::error file={_escape(v.path, True)},title=unreadable::"
                  f"{_escape(v.unreadable)}", file=out)
            continue
        if _launch(v):  # one entry per launch of a launcher that starts several
            path, line = _launch_at(v)
            print(f"::notice file={_escape(path, True)},line={line},title=launch::"
                  f"{_escape(_launch_text(v))}", file=out)
        for kind, p in _problems(v):
            props = []
            path = p.location.path if p.location else (v.path if v.path != "flags" else None)
            if path is not None:
                props.append(f"file={_escape(path, True)}")
            if p.location is not None and p.location.line > 0:
                props.append(f"line={p.location.line}")
                col = column(p)
                if col is not None:
                    props.append(f"col={col}")
            props.append(f"title={_escape(p.code, True)}")
            text = f"{p.message} Fix: {p.fix}" + (" (skipped: depends on an unresolved value)"
                                                  if kind == "skipped" else "")
            print(f"::{_LEVEL[kind]} {','.join(props)}::{_escape(text)}", file=out)


# ---------------------------------------------------------------- SARIF 2.1.0


def _sarif(verdicts: list[Verdict], out: IO[str]) -> None:
    from . import __version__

    rules: dict[str, int] = {}
    results = []
    for v in verdicts:
        found = list(_problems(v))
        if v.unreadable is not None:
            found = [("error", Problem("unreadable", v.unreadable, "check the path"))]
        if _launch(v):  # one entry per launch of a launcher that starts several
            path, line = _launch_at(v)
            found.insert(0, ("note", Problem("launch", _launch_text(v), "-", (),
                                             location=Location(path, line))))
        for kind, p in found:
            level = {"error": "error", "warning": "warning"}.get(kind, "note")
            index = rules.setdefault(p.code, len(rules))
            result = {
                "ruleId": p.code,
                "ruleIndex": index,
                "level": level,
                "message": {"text": p.message if p.code == "launch" else
                            f"{p.message} Fix: {p.fix}"},
            }
            path = p.location.path if p.location else (v.path if v.path != "flags" else None)
            if path is not None:
                loc: dict = {"artifactLocation": {"uri": path}}
                if p.location is not None and p.location.line > 0:
                    loc["region"] = {"startLine": p.location.line}
                    col = column(p)
                    if col is not None:
                        loc["region"]["startColumn"] = col
                result["locations"] = [{"physicalLocation": loc}]
            if p.flags:
                result["properties"] = {"flags": list(p.flags)}
            results.append(result)
    driver_rules = []
    for code in rules:  # the code's whole record; no link (the wheel ships no docs/)
        c = CODES[code]
        driver_rules.append({
            "id": code,
            "shortDescription": {"text": c.summary},
            "fullDescription": {"text": c.why},
            "help": {"text": page(code)},
            "defaultConfiguration": {"level": {"error": "error", "warning": "warning"}.get(
                c.severity, "note")},
        })
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "miles-topology", "version": __version__,
                                "rules": driver_rules}},
            "results": results,
        }],
    }
    print(json.dumps(log, indent=2), file=out)
