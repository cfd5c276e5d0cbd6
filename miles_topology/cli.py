"""`miles-topology`: check, show and migrate parallel layouts; print the YAML schema.

The CLI is the composition root: it reads the inputs, builds verdicts (report.py), runs the
migrations (miles_topology/migrations/) and prints. Exit codes: 0 valid (warnings allowed),
1 invalid configuration, 2 unreadable input or usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .errors import InputError, Location, Problem
from .report import FORMATS, Verdict, exit_code, render, text_one, verdict_of

USAGE = """\
miles-topology check [--format text|json|github|sarif] [--env KEY=VALUE ...]
                     (SCRIPT.sh... | TOPOLOGY.yaml... | -- FLAGS...)
miles-topology show  [--svg FILE] [--env KEY=VALUE ...] (SCRIPT.sh | TOPOLOGY.yaml | -- FLAGS...)
miles-topology migrate SCRIPT... [--write] [--check] [--inline] [--env KEY=VALUE ...]
miles-topology flags TOPOLOGY.yaml
miles-topology schema
miles-topology --version"""

EXIT = """\
exit codes: 0 valid (warnings allowed), 1 invalid configuration, 2 unreadable input or usage
error. Problem codes: docs/problem-codes.md."""

EXAMPLES = {
    "check": """\
examples:
  miles-topology check run-qwen3-30B-A3B.sh
  miles-topology check scripts/*.sh --format github        # annotations in a GitHub workflow
  miles-topology check run.sh --env NNODES=4 --format json
  miles-topology check run.topology.yaml
  miles-topology check -- --actor-num-nodes 2 --actor-num-gpus-per-node 8 \\
      --expert-model-parallel-size 8 --num-experts 64 --colocate""",
    "show": """\
examples:
  miles-topology show examples/moe-2x4.topology.yaml
  miles-topology show run.sh --svg map.svg
  miles-topology show -- --actor-num-nodes 2 --actor-num-gpus-per-node 4 \\
      --expert-model-parallel-size 2 --num-experts 8 --colocate""",
    "migrate": """\
examples:
  miles-topology migrate run.sh                  # show the diff, write nothing
  miles-topology migrate --write run.sh          # apply it (keeps run.sh.bak)
  miles-topology migrate --check scripts/*.sh    # exit 1 while a step is pending (CI)
  miles-topology migrate --inline run.sh         # one TOPOLOGY_ARGS array, no YAML file""",
    "flags": """\
examples:
  miles-topology flags run.topology.yaml         # the layout as train.py flags
  # in a launch script (an invalid layout stops it before ray job submit):
  TOPOLOGY_FLAGS="$(miles-topology flags "${SCRIPT_DIR}/run.topology.yaml")" || exit 1
  eval "TOPOLOGY_ARGS=(${TOPOLOGY_FLAGS})"
  python3 train.py "${TOPOLOGY_ARGS[@]}" ...""",
    "schema": """\
examples:
  miles-topology schema > topology.schema.json
  # then, first line of a topology YAML:
  # yaml-language-server: $schema=./topology.schema.json""",
}

HELP = {
    "check": "validate launch scripts, topology YAML files or flags",
    "show": "print the rank / GPU / expert map (and draw it as SVG)",
    "migrate": "rewrite launch scripts: renamed flags, implied values, one topology file",
    "flags": "validate a topology YAML and print it as train.py flags, one shell-quoted "
             "word per line",
    "schema": "print the JSON Schema of the topology YAML",
}


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise InputError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _yaml_verdict(path: str) -> Verdict:
    from .config import key_lines
    from .flags import field_of
    from .model import Topology

    v = verdict_of(path, lambda: Topology.from_yaml(path))
    lines = key_lines(path)

    def at(p: Problem) -> Problem:
        names = [field_of(f) or f for f in p.flags]
        line = next((lines[n] for n in names if n in lines), 0)
        return p.at(Location(path, line)) if line else p

    v.errors, v.warnings = [at(p) for p in v.errors], [at(p) for p in v.warnings]
    return v


def _one(path: str, env: dict[str, str]) -> Verdict:
    if path.endswith((".yaml", ".yml")):
        return _yaml_verdict(path)
    if path.endswith(".py"):
        from .pylaunch import check_python

        return check_python(path, [], env)
    from .check_script import check_script

    return check_script(path, env)


INPUTS = (".sh", ".bash", ".py", ".yaml", ".yml")  # what a folder given to `check` holds


def _expand(paths: list[str]) -> tuple[list[str], bool]:
    """A folder stands for its own launch scripts, launchers and YAML files (not its
    subfolders: sourced model files live there), in name order; (paths, whether a batch)."""
    out = []
    for p in paths:
        if not os.path.isdir(p):
            out.append(p)
            continue
        got = sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(INPUTS)
                     and os.path.isfile(os.path.join(p, n)))
        if not got:
            raise InputError(f"{p}: a folder with no launch script, launcher or topology YAML "
                             f"({', '.join(INPUTS)}) in it; give the files to check")
        out += got
    return out, len(out) > 1 or any(os.path.isdir(p) for p in paths)


def _inputs(paths: list[str], flags: list[str] | None, env: dict[str, str]) -> list[Verdict]:
    """One verdict per input (a folder: each of its inputs). With several inputs an
    unreadable one is an entry of its own; a single unreadable input raises InputError."""
    paths, batch = _expand(paths)
    if not batch and paths and paths[0].endswith(".py"):  # LAUNCHER.py [-- LAUNCHER ARGS]
        from .pylaunch import check_python

        return [check_python(paths[0], flags or [], env)]
    if flags is not None:
        if paths:
            raise InputError("give either files or `-- FLAGS...`, not both")
        from .sources import read_flags

        return [verdict_of("flags", lambda: read_flags(flags).topology)]
    if not paths:
        raise InputError("nothing to check: give SCRIPT.sh, TOPOLOGY.yaml or -- FLAGS...")
    if not batch:
        return [_one(paths[0], env)]
    out = []
    for p in paths:
        try:
            out.append(_one(p, env))
        except InputError as e:
            out.append(Verdict(p, unreadable=str(e)))
    return out


def _split_dashdash(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def cmd_check(args, flags) -> int:
    verdicts = _inputs(args.inputs, flags, _parse_env(args.env))
    render(verdicts, args.format, sys.stdout)
    return exit_code(verdicts)


def cmd_show(args, flags) -> int:
    from .show import svg_map, text_map

    verdicts = _inputs(args.inputs, flags, _parse_env(args.env))
    code = exit_code(verdicts)
    for v in verdicts:
        if v.topology is None:
            text_one(v, sys.stdout)
            continue
        if args.svg:
            try:
                Path(args.svg).write_text(svg_map(v.topology))
            except OSError as e:
                raise InputError(f"--svg {args.svg}: cannot write: {e.strerror or e}") from None
        print(f"{v.path}:")
        print(text_map(v.topology))
        if args.svg:
            print(f"\nwrote {args.svg}")
    return code


def cmd_migrate(args, flags) -> int:
    if flags is not None:
        raise InputError("migrate takes launch scripts, not `-- FLAGS...`")
    from .migrations.runner import main as migrate_main

    return migrate_main(args.inputs, _parse_env(args.env), write=args.write, check=args.check,
                        inline=args.inline)


def cmd_flags(args, flags) -> int:
    from .errors import TopologyError
    from .yamlflags import text

    if flags is not None:
        raise InputError("flags takes one topology YAML, not `-- FLAGS...`")
    try:
        sys.stdout.write(text(args.yaml))
    except TopologyError as e:
        for p in e.problems:
            print(f"{args.yaml}: error [{p.code}] {p.message} Fix: {p.fix}", file=sys.stderr)
        return 1
    return 0


def cmd_schema(args, flags) -> int:
    from .config import schema

    print(json.dumps(schema(), indent=2))
    return 0


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Usage errors become exit 2 with our own one-line message."""

    def error(self, message: str):
        raise _Usage(message)


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="miles-topology", usage=USAGE,
        description="One validated Topology for every parallel size of a miles MoE RL job.",
        epilog=EXIT, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"miles-topology {__version__}")
    sub = top.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")
    for name in ("check", "show", "migrate", "flags", "schema"):
        p = sub.add_parser(name, prog=f"miles-topology {name}", help=HELP[name],
                           description=HELP[name],
                           epilog=EXAMPLES[name] + "\n\n" + EXIT,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "schema":
            continue
        if name == "flags":
            p.add_argument("yaml", metavar="TOPOLOGY.yaml", help="the topology YAML to expand")
            continue
        what = "launch scripts to rewrite" if name == "migrate" else \
            "launch scripts (.sh), Python launchers (.py), topology files (.yaml) or folders " \
            "of them; or `-- FLAGS...` after the options"
        p.add_argument("inputs", nargs="*", metavar="INPUT", help=what)
        p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                       help="a value the script reads from its environment (repeatable)")
        if name == "check":
            p.add_argument("--format", choices=FORMATS, default="text", metavar="FORMAT",
                           help="text (default), json (one object, a list for several "
                                "inputs), github (workflow annotations), sarif (2.1.0)")
        if name == "show":
            p.add_argument("--svg", metavar="FILE", help="also draw the map into FILE as SVG")
        if name == "migrate":
            p.add_argument("--write", action="store_true",
                           help="apply the steps (atomically; keeps SCRIPT.bak)")
            p.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 while a step is pending")
            p.add_argument("--inline", action="store_true",
                           help="gather the layout flags in one TOPOLOGY_ARGS array instead "
                                "of a YAML file")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head, flags = _split_dashdash(argv)
    try:
        args = parser().parse_args(head)
        run = {"check": cmd_check, "show": cmd_show, "migrate": cmd_migrate,
               "flags": cmd_flags, "schema": cmd_schema}[args.cmd]
        code = run(args, flags)
        sys.stdout.flush()
        return code
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    except _Usage as e:
        print(f"miles-topology: {e}\nusage:\n{USAGE}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"miles-topology: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `miles-topology ... | head`: the reader left, stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as e:  # a bug of ours: say so in one line, keep the traceback on request
        if os.environ.get("MILES_TOPOLOGY_DEBUG"):
            raise
        print(f"miles-topology: internal error: {type(e).__name__}: {e} "
              "(set MILES_TOPOLOGY_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
