"""`miles-topology`: check, show and migrate parallel layouts.

Exit codes: 0 valid (warnings allowed), 1 invalid configuration, 2 unreadable input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, Problem, TopologyError
from .model import Topology
from .sources import read_flags

USAGE = """\
miles-topology check [--format text|json] [--env KEY=VALUE ...]
                     (SCRIPT.sh... | TOPOLOGY.yaml | -- FLAGS...)
miles-topology show  [--svg FILE] [--env KEY=VALUE ...] (SCRIPT.sh | TOPOLOGY.yaml | -- FLAGS...)
miles-topology migrate SCRIPT... [--write] [--check] [--inline] [--env KEY=VALUE ...]"""


@dataclass
class Verdict:
    """What `check` found for one input."""

    path: str
    topology: Topology | None = None
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    summary: dict | None = None
    extra: dict = field(default_factory=dict)  # script reports: values, unresolved, notes

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        d = {
            "ok": self.ok,
            "errors": [p.as_dict() for p in self.errors],
            "warnings": [p.as_dict() for p in self.warnings],
            "topology": self.summary,
        }
        d["skipped"] = [p.as_dict() for p in self.skipped]
        if self.path != "flags":
            d = {"path": self.path, **d}
            d.update(self.extra)
        return d


def verdict_of(path: str, build) -> Verdict:
    """Run `build()` -> Topology and file its outcome; InputError propagates (exit 2)."""
    v = Verdict(path)
    try:
        topo = build()
    except TopologyError as e:
        v.errors, v.warnings, v.summary = list(e.problems), list(e.warnings), e.summary
    else:
        v.topology, v.warnings, v.summary = topo, list(topo.warnings), topo.summary()
    v.skipped = [p for p in v.warnings if p.severity == "skipped"]  # undecidable rules
    v.warnings = [p for p in v.warnings if p.severity != "skipped"]
    return v


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise InputError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _inputs(paths: list[str], flags: list[str] | None, env: dict[str, str]) -> list[Verdict]:
    if flags is not None:
        if paths:
            raise InputError("give either files or `-- FLAGS...`, not both")
        return [verdict_of("flags", lambda: read_flags(flags).topology)]
    if not paths:
        raise InputError("nothing to check: give SCRIPT.sh, TOPOLOGY.yaml or -- FLAGS...")
    out = []
    for p in paths:
        if p.endswith((".yaml", ".yml")):
            out.append(verdict_of(p, lambda p=p: Topology.from_yaml(p)))
        else:
            from .check_script import check_script

            out.append(check_script(p, env))
    return out


def _split_dashdash(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def _print_text(v: Verdict, out) -> None:
    s = v.summary
    state = "OK" if v.ok else "INVALID"
    if v.ok and v.extra.get("unresolved"):
        n = len(v.extra["unresolved"])
        state = f"OK as far as known ({n} unresolved: pass --env KEY=VALUE)"
    sizes = ""
    if s:
        sizes = f"  world {s['world_size']}"
        if "dp" in s:
            sizes += f", dp {s['dp']}, edp {s['edp']}"
        sizes += (
            f" | tp {s['tp']} cp {s['cp']} pp {s['pp']} ep {s['ep']} etp {s['etp']}"
            f" | {s['num_engines']} engine(s) x {s['engine_size']} GPU"
        )
    print(f"{v.path}: {state}{sizes}", file=out)
    for p in v.extra.get("report_lines", []):
        print(f"  {p}", file=out)
    for kind, problems in (("error", v.errors), ("warning", v.warnings), ("skipped", v.skipped)):
        for p in problems:
            for line in p.lines(kind):
                print(f"  {line}", file=out)


def _print_table(verdicts: list[Verdict]) -> None:
    rows = [("input", "verdict", "world", "dp", "edp", "problems")]
    for v in verdicts:
        s = v.summary or {}
        codes = [p.code for p in v.errors] + [f"({p.code})" for p in v.skipped]
        rows.append((v.path, "ok" if v.ok else "INVALID", str(s.get("world_size", "?")),
                     str(s.get("dp", "?")), str(s.get("edp", "?")), " ".join(codes) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print()
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    bad = sum(not v.ok for v in verdicts)
    print(f"\n{len(verdicts)} inputs: {len(verdicts) - bad} valid, {bad} invalid")


def cmd_check(args, flags) -> int:
    verdicts = _inputs(args.inputs, flags, _parse_env(args.env))
    if args.format == "json":
        data = [v.as_dict() for v in verdicts]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        for v in verdicts:
            _print_text(v, sys.stdout)
        if len(verdicts) == 1 and verdicts[0].topology is not None and verdicts[0].extra:
            from .show import text_map

            print("\n" + text_map(verdicts[0].topology))
        if len(verdicts) > 1:
            _print_table(verdicts)
    return 0 if all(v.ok for v in verdicts) else 1


def cmd_show(args, flags) -> int:
    from .show import svg_map, text_map

    verdicts = _inputs(args.inputs, flags, _parse_env(args.env))
    code = 0
    for v in verdicts:
        if v.topology is None:
            _print_text(v, sys.stdout)
            code = 1
            continue
        print(f"{v.path}:")
        print(text_map(v.topology))
        if args.svg:
            Path(args.svg).write_text(svg_map(v.topology))
            print(f"\nwrote {args.svg}")
    return code


def cmd_migrate(args, flags) -> int:
    try:
        from migrations.runner import main as migrate_main
    except ImportError:
        raise InputError("migrate is not available in this build") from None
    return migrate_main(args, _parse_env(args.env))


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Usage errors become exit 2 with our own one-line message."""

    def error(self, message: str):
        raise _Usage(message)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="miles-topology", usage=USAGE)
    sub = top.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for name in ("check", "show", "migrate"):
        p = sub.add_parser(name, usage=USAGE)
        p.add_argument("inputs", nargs="*")
        p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
        if name == "check":
            p.add_argument("--format", choices=("text", "json"), default="text")
        if name == "show":
            p.add_argument("--svg", metavar="FILE")
        if name == "migrate":
            p.add_argument("--write", action="store_true")
            p.add_argument("--check", action="store_true")
            p.add_argument("--inline", action="store_true")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head, flags = _split_dashdash(argv)
    try:
        args = parser().parse_args(head)
        run = {"check": cmd_check, "show": cmd_show, "migrate": cmd_migrate}[args.cmd]
        return run(args, flags)
    except _Usage as e:
        print(f"miles-topology: {e}\nusage:\n{USAGE}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"miles-topology: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug of ours: say so in one line, keep the traceback on request
        if os.environ.get("MILES_TOPOLOGY_DEBUG"):
            raise
        print(f"miles-topology: internal error: {type(e).__name__}: {e} "
              "(set MILES_TOPOLOGY_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
