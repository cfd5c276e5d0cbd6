"""`miles-topology`: check, show and migrate parallel layouts; print the YAML schema.

The CLI is the composition root: it reads the inputs, builds verdicts (report.py), runs the
migrations (miles_topology/migrations/) and prints. Exit codes: 0 valid (warnings allowed),
1 invalid configuration, 2 unreadable input or usage error.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from . import __version__
from .errors import InputError, Location, NoTrainingLaunch, Problem
from .report import FORMATS, Verdict, exit_code, render, text_one, verdict_of

USAGE = """\
miles-topology check [--format text|json|github|sarif] [--env KEY=VALUE ...] [--quiet]
                     [--select CODES] [--ignore CODES] [--severity error|warning|note]
                     [--color auto|always|never] [--batch]
                     [--nodes N] [--gpus-per-node N] [--gpu NAME] [--[no-]nvlink]
                     [--real-imports]
                     (SCRIPT.sh... [-- SCRIPT ARGS] | LAUNCHER.py [-- ARGS] | TOPOLOGY.yaml...
                      | -- FLAGS...)
miles-topology show  [--svg FILE] [--color-by engine|ep|pp|dp] [--env KEY=VALUE ...]
                     (SCRIPT.sh | TOPOLOGY.yaml | -- FLAGS...)
miles-topology migrate SCRIPT... [--write] [--check] [--inline] [--env KEY=VALUE ...]
miles-topology flags TOPOLOGY.yaml
miles-topology schema
miles-topology rule [CODE]
miles-topology --version"""

EXIT = """\
exit codes: 0 valid (warnings allowed), 1 invalid configuration, 2 unreadable input or usage
error. Problem codes: docs/problem-codes.md (`miles-topology rule CODE`). Settings:
[tool.miles-topology] in pyproject.toml (select, ignore, severity); directives in the
checked files: # miles-topology: disable=CODE[,CODE] / disable-file=CODE[,CODE]."""

EXAMPLES = {
    "check": """\
examples:
  miles-topology check run-qwen3-30B-A3B.sh
  miles-topology check scripts/*.sh --format github        # annotations in a GitHub workflow
  miles-topology check run.sh --env NNODES=4 --format json
  miles-topology check run.topology.yaml
  miles-topology check --batch --quiet scripts/*.sh         # what the pre-commit hook runs
  miles-topology check run.sh --ignore sp-ignored --severity warning
  miles-topology check -- --actor-num-nodes 2 --actor-num-gpus-per-node 8 \\
      --expert-model-parallel-size 8 --num-experts 64 --colocate""",
    "show": """\
examples:
  miles-topology show examples/moe-2x4.topology.yaml
  miles-topology show run.sh --svg map.svg
  miles-topology show run.sh --svg ep.svg --color-by ep   # which GPUs exchange tokens
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
    "rule": """\
examples:
  miles-topology rule unknown-flag     # what it means and how to turn it off
  miles-topology rule                  # every code""",
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
    "rule": "print a problem code's page (every code without one)",
}


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise InputError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def keys(text: str) -> str:
    """A message about a topology YAML speaks of its keys: each topology flag in it becomes
    the field's key (`--expert-model-parallel-size 8` -> `ep 8`)."""
    from .flags import field_of

    return FLAG.sub(lambda m: field_of(m.group()) or m.group(), text)


def _yaml_verdict(path: str) -> Verdict:
    from .flags import field_of
    from .model import Topology
    from .sources import key_lines

    v = verdict_of(path, lambda: Topology.from_yaml(path))
    lines = key_lines(path)

    def at(p: Problem) -> Problem:
        names = [field_of(f) or f for f in p.flags]
        line = next((lines[n] for n in names if n in lines), 0)
        p = replace(p, message=keys(p.message), fix=keys(p.fix),
                    flags=tuple(field_of(f) or f for f in p.flags))
        return p.at(Location(path, line)) if line else p

    v.errors, v.warnings = [at(p) for p in v.errors], [at(p) for p in v.warnings]
    return v


def _one(path: str, env: dict[str, str], py: dict | None = None) -> list[Verdict]:
    if path.endswith((".yaml", ".yml")):
        return [_yaml_verdict(path)]
    if path.endswith(".py"):
        return _python(path, [], env, py)
    from .check_script import check_script

    return [check_script(path, env)]


def _python(path: str, args: list[str], env: dict[str, str], py: dict | None) -> list[Verdict]:
    """A Python launcher: one verdict per launch, on the cluster the flags and the
    ``[tool.miles-topology]`` table give (pylaunch/cluster.py)."""
    from .check_launcher import check_python_all
    from .pylaunch.cluster import cluster_for

    py = py or {}
    return check_python_all(path, args, env, cluster_for(path, py.get("cluster") or {}),
                            bool(py.get("real_imports")), bool(py.get("trust")))


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


def _inputs(paths: list[str], flags: list[str] | None, env: dict[str, str],
            batch: bool = False, py: dict | None = None) -> list[Verdict]:
    """One verdict per input (a folder: each of its inputs; a Python launcher: each of its
    launches). In a batch (several inputs, a folder, or `--batch`) an unreadable input is an
    entry of its own and one with no training launch has nothing to check; a single named
    input raises InputError."""
    paths, many = _expand(paths)
    batch = batch or many
    if not batch and paths and paths[0].endswith(".py"):  # LAUNCHER.py [-- LAUNCHER ARGS]
        return _python(paths[0], flags or [], env, py)
    if not batch and paths and flags is not None and not paths[0].endswith((".yaml", ".yml")):
        from .check_script import check_script  # SCRIPT.sh -- ARGS: its positional arguments

        return [check_script(paths[0], env, flags)]
    if flags is not None:
        if paths:
            raise InputError("give either files or `-- FLAGS...`, not both")
        from .check_script import flag_pairs
        from .sources import read_flags
        from .stack import for_launch, using

        with using(for_launch(None, None, flag_pairs(flags))):  # installed, --stack, functions
            return [verdict_of("flags", lambda: read_flags(flags).topology)]
    if not paths:
        raise InputError("nothing to check: give SCRIPT.sh, TOPOLOGY.yaml or -- FLAGS...")
    if not batch:
        return _one(paths[0], env, py)
    out = []
    for p in paths:
        try:
            out += _one(p, env, py)
        except NoTrainingLaunch as e:  # a setup or data-prep script beside the launchers
            out.append(Verdict(p, nothing=str(e).removeprefix(f"{p}: ")))
        except InputError as e:
            out.append(Verdict(p, unreadable=str(e)))
    return out


def _split_dashdash(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def _color(choice: str) -> bool:
    """--color auto: on a terminal, unless NO_COLOR is set (FORCE_COLOR forces it)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def _settings(args):
    from .selection import settings

    start = next((p for p in args.inputs if os.path.exists(p)), os.getcwd())
    return settings(start, args.select, args.ignore, args.severity)


def _stack_path(args) -> None:
    """`--stack PATH` for this command (stack.STACK_PATH; `main` resets it when it returns)."""
    from .stack import STACK_PATH, framework_in

    if args.stack is None:
        return
    if framework_in(Path(args.stack)) is None:
        raise InputError(f"--stack {args.stack}: no miles/ or slime/ with utils/arguments.py "
                         "there; give a checkout or a site-packages folder that holds one")
    STACK_PATH.set(args.stack)


def cmd_check(args, flags) -> int:
    from .selection import apply

    chosen = _settings(args)
    _stack_path(args)
    py = {"cluster": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                      "gpu": args.gpu, "nvlink": args.nvlink},
          "real_imports": args.real_imports, "trust": args.trust_launcher}
    verdicts = _inputs(args.inputs, flags, _parse_env(args.env), args.batch, py)
    apply(verdicts, chosen)
    render(verdicts, args.format, sys.stdout, quiet=args.quiet, color=_color(args.color))
    return exit_code(verdicts)


def cmd_rule(args, flags) -> int:
    import difflib

    from .codes import CODES, page

    if args.code is None:
        width = max(map(len, CODES))
        for code, c in CODES.items():
            print(f"{code.ljust(width)}  {c.severity}{'  fixable' if c.fixable else ''}")
        return 0
    if args.code not in CODES:
        near = difflib.get_close_matches(args.code, CODES, n=1)
        hint = f"; did you mean {near[0]}?" if near else " (`miles-topology rule` lists them)"
        raise InputError(f"{args.code!r} is not a problem code{hint}")
    print(page(args.code), end="")
    return 0


def cmd_show(args, flags) -> int:
    from .show import svg_map, text_map

    verdicts = _inputs(args.inputs, flags, _parse_env(args.env))
    code = exit_code(verdicts)
    for v in verdicts:
        if v.topology is None or v.summary is None:  # sizes that depend on unknowns: no map
            text_one(v, sys.stdout)
            continue
        if args.svg:
            try:
                Path(args.svg).write_text(svg_map(v.topology, args.color_by))
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

    _stack_path(args)
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
    from .sources import schema

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
    for name in ("check", "show", "migrate", "flags", "schema", "rule"):
        p = sub.add_parser(name, prog=f"miles-topology {name}", help=HELP[name],
                           description=HELP[name],
                           epilog=EXAMPLES[name] + "\n\n" + EXIT,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "schema":
            continue
        if name == "flags":
            p.add_argument("yaml", metavar="TOPOLOGY.yaml", help="the topology YAML to expand")
            continue
        if name == "rule":
            p.add_argument("code", nargs="?", metavar="CODE", help="a problem code")
            continue
        what = "launch scripts to rewrite" if name == "migrate" else \
            "launch scripts (.sh), Python launchers (.py), topology files (.yaml) or folders " \
            "of them; or `-- FLAGS...` after the options"
        p.add_argument("inputs", nargs="*", metavar="INPUT", help=what)
        p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                       help="a value the script reads from its environment (repeatable)")
        if name in ("check", "migrate"):
            p.add_argument("--stack", metavar="PATH",
                           help="the user's stack: a checkout or site-packages holding miles "
                                "or slime (default: installed, beside the script, else the "
                                "bundled snapshot)")
        if name == "check":
            p.add_argument("--trust-launcher", action="store_true",
                           help="run Python launchers with in-process recorders only, where "
                                "the kernel cannot isolate them (docs/sandbox.md)")
            p.add_argument("--format", choices=FORMATS, default="text", metavar="FORMAT",
                           help="text (default), json (one object, a list for several "
                                "inputs), github (workflow annotations), sarif (2.1.0)")
            p.add_argument("-q", "--quiet", action="store_true",
                           help="text: print only the inputs with a problem, and only the "
                                "problems")
            p.add_argument("--select", action="append", metavar="CODES",
                           help="report only these codes (comma-separated, repeatable)")
            p.add_argument("--ignore", action="append", metavar="CODES",
                           help="do not report these codes (an ignored error passes)")
            p.add_argument("--severity", choices=("error", "warning", "note"),
                           metavar="LEVEL", help="the lowest level reported: error, "
                                                 "warning or note (default: note)")
            p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                           metavar="WHEN", help="colour the text report: auto (on a "
                                                "terminal, unless NO_COLOR), always, never")
            p.add_argument("--batch", action="store_true",
                           help="judge the inputs as a batch even when there is one: a file "
                                "with no training launch has nothing to check and passes "
                                "(pre-commit)")
            # the cluster a Python launcher's probes are answered from (pylaunch/cluster.py)
            p.add_argument("--nodes", type=int, metavar="N",
                           help="Python launchers: nodes of the modelled cluster (default 1)")
            p.add_argument("--gpus-per-node", type=int, metavar="N",
                           help="Python launchers: GPUs a node (default 8; GB200/GB300: 4)")
            p.add_argument("--gpu", metavar="NAME",
                           help="Python launchers: the GPU, e.g. H100 (default), B200, MI300X")
            p.add_argument("--nvlink", action=argparse.BooleanOptionalAction, default=None,
                           help="Python launchers: GPUs of a node on NVLink (default: yes)")
            p.add_argument("--real-imports", action="store_true",
                           help="Python launchers: import the installed ray, torch, ... "
                                "instead of the recording stand-ins (slower)")
        if name == "show":
            p.add_argument("--svg", metavar="FILE", help="also draw the map into FILE as SVG")
            p.add_argument("--color-by", choices=("engine", "ep", "pp", "dp"),
                           default="engine", metavar="ROLE",
                           help="SVG: colour the GPUs by rollout engine (default), EP group, "
                                "pipeline stage (pp) or data-parallel replica (dp)")
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
    # in a context of its own: what a command sets (`--stack`) ends with it
    return contextvars.copy_context().run(_main, argv)


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head, flags = _split_dashdash(argv)
    try:
        args = parser().parse_args(head)
        run = {"check": cmd_check, "show": cmd_show, "migrate": cmd_migrate,
               "flags": cmd_flags, "schema": cmd_schema, "rule": cmd_rule}[args.cmd]
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
