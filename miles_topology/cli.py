"""`miles-topology`: check, show and migrate parallel layouts; print the YAML schema.

The CLI is the composition root: it reads the inputs, builds verdicts (judging/), runs the
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from . import __version__
from .judging.verdict import Verdict, exit_code, verdict_of
from .model.errors import InputError, Location, NoTrainingLaunch, Problem
from .reporting.formats import FORMATS
from .reporting.safetext import ERR, OUT, Sink

USAGE = """\
miles-topology check [--output-format text|concise|json|github|sarif] [--env KEY=VALUE ...]
                     [--quiet | --verbose] [--output-file FILE] [--exit-zero]
                     [--fix | --diff] [--unsafe-fixes]
                     [--select CODES] [--ignore CODES] [--severity error|warning|note]
                     [--color auto|always|never] [--batch] [--stdin-filename NAME]
                     [--nodes N] [--gpus-per-node N] [--gpu NAME] [--[no-]nvlink]
                     [--real-imports] [--path DIR] [--pass-env NAME ...] [--read PATH ...]
                     [--isolated] [--no-respect-gitignore] [--timeout SECONDS]
                     (SCRIPT.sh... [-- SCRIPT ARGS] | LAUNCHER.py [-- ARGS] | TOPOLOGY.yaml...
                      | FOLDER... | - | -- FLAGS...)
miles-topology show  [--svg FILE] [--color-by engine|ep|pp|dp|memory] [--gpu NAME]
                     [--env KEY=VALUE ...] [--isolated] [--timeout SECONDS]
                     (SCRIPT.sh | TOPOLOGY.yaml | -- FLAGS...)
miles-topology migrate SCRIPT... [--dry-run | --write] [--check [--quiet] [--only-migrated]]
                       [--inline] [--env KEY=VALUE ...]
miles-topology plan  (CONFIG.json | MODEL.sh | MODEL.py | -- MODEL FLAGS...) --nodes N
                     [--gpus-per-node N] [--gpu NAME] [--top K] [--max-tokens-per-gpu T]
                     [--recompute] [--optimizer-cpu-offload] [--margin SHARE] [--tokens-per-step T]
                     [--seq-length L] [--colocate] [--explain] [--format text|json]
                     [--timeout SECONDS]
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
  miles-topology check .                                    # every launch script below .
  miles-topology check scripts/ --output-format concise     # path:line:col: severity code message
  miles-topology check run.sh --verbose                     # values, sources and the map
  miles-topology check run.sh --diff                        # the mechanical fixes, as a diff
  miles-topology check run.sh --fix                         # ... applied in place
  cat run.sh | miles-topology check - --stdin-filename scripts/run.sh
  miles-topology check scripts/*.sh --format github        # annotations in a GitHub workflow
  miles-topology check run.sh --env NNODES=4 --format json
  miles-topology check run.topology.yaml
  miles-topology check --batch --quiet scripts/*.sh         # what the pre-commit hook runs
  miles-topology check --isolated --no-respect-gitignore --nodes 4 --gpu H100 \\
      --format github scripts/                              # CI on a pull request
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
  miles-topology migrate run.sh                  # show the diff, write nothing (--dry-run)
  miles-topology migrate --write run.sh          # apply it (keeps run.sh.bak)
  miles-topology migrate --check scripts/*.sh    # exit 1 while a step is pending (CI)
  miles-topology migrate --check --quiet --only-migrated scripts/*.sh   # the pre-commit hook
  miles-topology migrate --inline run.sh         # one TOPOLOGY_ARGS array, no YAML file""",
    "flags": """\
examples:
  miles-topology flags run.topology.yaml         # the layout as train.py flags
  # in a launch script (an invalid layout stops it before ray job submit):
  TOPOLOGY_FLAGS="$(miles-topology flags "${SCRIPT_DIR}/run.topology.yaml")" || exit 1
  eval "TOPOLOGY_ARGS=(${TOPOLOGY_FLAGS})"
  python3 train.py "${TOPOLOGY_ARGS[@]}" ...""",
    "plan": """\
examples:
  miles-topology plan DeepSeek-V3/config.json --nodes 128 --gpu H100
  miles-topology plan scripts/models/qwen3-30B-A3B.sh --nodes 2 --format json
  miles-topology plan scripts/models/qwen3-30B-A3B.sh --nodes 1 --recompute \
      --optimizer-cpu-offload --max-tokens-per-gpu 20480 --colocate --explain
  miles-topology plan --nodes 1 --gpu H200 -- --num-layers 48 --hidden-size 2048 \\
      --num-attention-heads 32 --num-query-groups 4 --num-experts 128 --moe-ffn-hidden-size 768""",
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
    "plan": "list the layouts a model trains with on a cluster, fastest first by an "
            "estimated step time (a tenth of the GPU kept free), with their flags",
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
    from .reading.flags import field_of

    return FLAG.sub(lambda m: field_of(m.group()) or m.group(), text)


def _yaml_verdict(path: str, env: dict[str, str] | None = None) -> Verdict:
    """`env`: at check time, the only names its ${oc.env:NAME} reads (--env; else the
    default written); the fields that read another are unresolved (env.AT_RUN_TIME)."""
    from .judging.launch import env_unresolved, skip_unknown
    from .model.topology import Topology
    from .reading.env import AT_RUN_TIME, PartialEnv
    from .reading.flags import field_of
    from .reading.sources import gated, key_lines, load_fields, with_files

    partial = PartialEnv(env, why=AT_RUN_TIME, defaults=True) if env is not None else None
    v = verdict_of(path, lambda: Topology(**with_files(load_fields(gated(path), env=partial))))
    unresolved = env_unresolved(partial, path) if partial is not None else []
    if unresolved:
        v.extra = {"unresolved": unresolved, "report_lines": [
            f"unresolved {u['expression']}: {u['why']}" for u in unresolved]}
        skip_unknown(v, {u["flag"] for u in unresolved}, set())
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
    from .reading.deadline import per_input

    with per_input():  # one time budget for the input and all it runs (--timeout)
        return _judge(path, env, py)


def _judge(path: str, env: dict[str, str], py: dict | None = None) -> list[Verdict]:
    from . import pylaunch  # noqa: F401  (loaded once, not per child)
    from .judging.check_script import check_script
    from .pylaunch import confine
    from .pylaunch.cluster import cluster_for
    from .reading.gate import checking

    if path.endswith(".py"):  # a launcher: it runs in its own sandbox, its checkout gated
        return _python(path, [], env, py)
    with checking(path):  # what it names is read only inside its checkout (gate.py)
        # the static reading, under the kernel's read rules for that checkout (confine.py)
        note = confine.missing_note()
        if note:  # where the kernel cannot: said once (docs/sandbox.md)
            ERR.line(f"miles-topology: note: {note}")
        if path.endswith((".yaml", ".yml")):  # check and show read no name of os.environ
            return confine.run(path, lambda: [_yaml_verdict(path, env)])
        # the project's settings (pyproject.toml of the script's folder or the current one)
        # are the checker's own: read here, before the reading is confined to the checkout
        cluster = cluster_for(path, (py or {}).get("cluster") or {})
        return confine.run(path, lambda: [check_script(path, env, cluster=cluster)])


def _python(path: str, args: list[str], env: dict[str, str], py: dict | None) -> list[Verdict]:
    """A Python launcher: one verdict per launch, on the cluster the flags and the
    ``[tool.miles-topology]`` table give (pylaunch/cluster.py)."""
    from .judging.check_launcher import check_python_all
    from .model.errors import InputError
    from .pylaunch.cluster import cluster_for
    from .reading.deadline import per_input
    from .reading.gate import Refused, admit, checking

    py = py or {}
    with checking(path), per_input():  # its checkout; one time budget for all its runs
        try:  # a launcher named that links out of its checkout is not run (gate.root_of)
            admit(path)
        except Refused as e:
            raise InputError(f"{e}") from None
        except OSError:
            pass  # not there: the launcher's reader says so
        return check_python_all(path, args, env, cluster_for(path, py.get("cluster") or {}),
                                bool(py.get("real_imports")), bool(py.get("trust")),
                                py.get("pass_env") or (), py.get("reads") or ())


def _expand(paths: list[str], chosen=None, gitignore: bool = True):
    """The inputs named, each folder walked for the files that launch (discover.py);
    `gitignore` False: --no-respect-gitignore."""
    from .reading.discover import DEFAULT_EXCLUDE, find

    exclude, base = chosen.excluded() if chosen is not None else ((), None)
    return find(paths, exclude or DEFAULT_EXCLUDE, base, gitignore)


def _inputs(paths: list[str], flags: list[str] | None, env: dict[str, str],
            batch: bool = False, py: dict | None = None) -> list[Verdict]:
    """Every verdict of `_each`, as one list (show)."""
    return [v for _, vs in _each(_expand(paths), flags, env, batch, py) for v in vs]


def _each(found, flags: list[str] | None, env: dict[str, str], batch: bool = False,
          py: dict | None = None):
    """(input, its verdicts) one input at a time, in order (a folder: each launch script,
    launcher and topology YAML found in it; a Python launcher: one verdict per launch). In a
    batch (several inputs, a folder, or `--batch`) an unreadable input is an entry of its own
    and one with no training launch has nothing to check; a single named input raises
    InputError."""
    paths = found.inputs
    batch = batch or found.walked or len(paths) > 1
    if not batch and paths and paths[0].endswith(".py"):  # LAUNCHER.py [-- LAUNCHER ARGS]
        yield paths[0], _guarded(paths[0], lambda: _python(paths[0], flags or [], env, py))
        return
    if not batch and paths and flags is not None and not paths[0].endswith((".yaml", ".yml")):
        from .judging.check_script import (
            check_script,  # SCRIPT.sh -- ARGS: its positional arguments
        )
        from .pylaunch.cluster import cluster_for
        from .reading.deadline import per_input
        from .reading.gate import checking

        def judge_script() -> list[Verdict]:
            with checking(paths[0]), per_input():
                return [check_script(paths[0], env, flags,
                                     cluster_for(paths[0], (py or {}).get("cluster") or {}))]

        yield paths[0], _guarded(paths[0], judge_script)
        return
    if flags is not None:
        if paths or found.walked:
            raise InputError("give either files or `-- FLAGS...`, not both")
        from .judging.check_script import flag_pairs
        from .judging.fit import apply
        from .pylaunch.cluster import cluster_for
        from .reading.sources import read_flags
        from .reading.stack import for_launch, using

        cluster = cluster_for(os.getcwd(), (py or {}).get("cluster") or {})

        def given() -> list[Verdict]:
            with using(for_launch(None, None, flag_pairs(flags))):  # installed, --stack, ...
                v = verdict_of("flags", lambda: read_flags(flags, env).topology)
            return [apply(v, flags, cluster)]

        yield "flags", _guarded("flags", given)
        return
    if not paths and not found.walked:
        raise InputError("nothing to check: give SCRIPT.sh, TOPOLOGY.yaml or -- FLAGS...")
    if not batch:
        yield paths[0], _guarded(paths[0], lambda: _one(paths[0], env, py))
        return

    def judged(p: str) -> list[Verdict]:
        if p.endswith(".py") and not found.walked and _not_launcher(p):
            # pre-commit names every .py file: a model file or helper is not run (discover.kind)
            return [Verdict(p, nothing="no training launch: a Python file with no `__main__` "
                              "that starts training (a model file, a helper)")]
        try:
            return _guarded(p, lambda: _one(p, env, py))
        except NoTrainingLaunch as e:  # a setup or data-prep script beside the launchers
            return [Verdict(p, nothing=str(e).removeprefix(f"{p}: "))]
        except InputError as e:
            return [Verdict(p, unreadable=str(e))]

    # Python launchers wait on their sandboxed child: they run side by side, and each result
    # is still given in order, as soon as it and those before it are done
    launchers = [p for p in paths if p.endswith(".py")]
    pool = ThreadPoolExecutor(max_workers=JOBS) if len(launchers) > 1 and JOBS > 1 else None
    # each in a copy of this context: --stack and the gate's user roots hold in the threads
    ahead = {p: pool.submit(contextvars.copy_context().run, judged, p)
             for p in launchers} if pool else {}
    try:
        for p in paths:
            yield p, ahead[p].result() if p in ahead else judged(p)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


JOBS = min(8, os.cpu_count() or 1)  # Python launchers checked at once in a batch


def _guarded(path: str, judge) -> list[Verdict]:
    """`judge()`, where a bug of ours (any exception but InputError, which stays the
    input's own unreadable or usage error) is this input's verdict: internal-error, exit 2,
    and the batch goes on to the next input. MILES_TOPOLOGY_DEBUG=1 raises it instead."""
    try:
        return judge()
    except InputError:
        raise
    except Exception as e:
        if os.environ.get("MILES_TOPOLOGY_DEBUG"):
            raise
        return [Verdict(path, internal=True, unreadable=(
            f"internal error: {type(e).__name__}: {e} (a bug of miles-topology; "
            "MILES_TOPOLOGY_DEBUG=1 shows the traceback)"))]


def _gpu(name: str) -> str:
    """--gpu NAME: a GPU the cluster model knows (pylaunch/cluster.py's table; memory checks
    need its size), else a usage error with a did-you-mean."""
    import difflib

    from .model.gpus import GPUS

    if name.upper() in GPUS:
        return name
    near = difflib.get_close_matches(name.upper(), GPUS, n=1, cutoff=0.3) or \
        [k for k in GPUS if name.upper().startswith(k)][:1]
    hint = f"did you mean {near[0]}? " if near else ""
    raise argparse.ArgumentTypeError(f"{name!r} is not a GPU modelled; {hint}one of "
                                     f"{', '.join(GPUS)}")


def _not_launcher(path: str) -> bool:
    """A Python file that discover.kind does not take for a launcher (it exists: a missing
    one stays unreadable)."""
    from .reading.discover import kind

    return os.path.isfile(path) and kind(path) != "launcher"


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


def _env(args) -> dict[str, str]:
    """--env KEY=VALUE, and --path DIR before the PYTHONPATH Python launchers import from."""
    env = _parse_env(args.env)
    extra = [os.path.abspath(d) for d in getattr(args, "path", None) or []]
    if extra:
        for d in extra:
            if not os.path.isdir(d):
                raise InputError(f"--path {d}: no such folder")
        now = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join([*extra, *([now] if now else [])])
    return env


def _settings(args):
    from .judging.selection import settings

    start = next((p for p in args.inputs if os.path.exists(p)), os.getcwd())
    return settings(start, args.select, args.ignore, args.severity, args.isolated)


def _stack_path(args) -> None:
    """`--stack PATH` for this command (stack.STACK_PATH; `main` resets it when it returns)."""
    from .reading.stack import STACK_PATH, framework_in

    if args.stack is None:
        return
    if framework_in(Path(args.stack)) is None:
        raise InputError(f"--stack {args.stack}: no miles/ or slime/ with utils/arguments.py "
                         "there, nor a train.py that builds a fork's parser (from "
                         "PACKAGE.utils.arguments import parse_args); give a checkout or a "
                         "site-packages folder that holds one")
    STACK_PATH.set(args.stack)


def cmd_check(args, flags) -> int:
    from .judging.selection import apply
    from .reporting.formats import Printer, stream_for

    if "-" in args.inputs:
        return _check_stdin(args, flags)
    chosen = _settings(args)
    _stack_path(args)
    py = {"cluster": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                      "gpu": args.gpu, "nvlink": args.nvlink, "isolated": args.isolated},
          "real_imports": args.real_imports, "trust": args.trust_launcher,
          "pass_env": args.pass_env, "reads": args.read}
    found = _expand(args.inputs, chosen, not args.no_respect_gitignore)
    if args.fix or args.diff:
        said = _fix(args, flags, found, chosen, py)
        if args.diff:
            return 1 if said else 0
    if found.walked and not found.inputs and flags is None:
        ERR.line("miles-topology: warning: no launch script, Python launcher or topology YAML "
                 f"found under {', '.join(args.inputs)}")
    out, owned = stream_for(args.output_file)
    _fixers(args.format)
    printer = Printer(args.format, out, verbose=args.verbose, quiet=args.quiet,
                      color=_color(args.color) and not owned,
                      progress=sys.stderr if sys.stderr.isatty() and len(found.inputs) > 1
                      else None,
                      total=len(found.inputs))
    verdicts: list[Verdict] = []
    try:
        for _, got in _each(found, flags, _env(args), args.batch, py):
            apply(got, chosen)
            verdicts += got
            printer.add(got)
            if len(verdicts) < len(found.inputs):
                printer.working(found.inputs[printer.inputs])
        printer.close(found.skipped)
    finally:
        if owned:
            out.close()
    code = exit_code(verdicts)
    return 0 if args.exit_zero and code == 1 else code


def _fix(args, flags, found, chosen, py) -> int:
    """--fix / --diff: fix each input (fix.py) and say what was done; returns the number of
    fixes applied (--fix) or that would be (--diff). The diff goes to the report's stream."""
    from .judging.selection import _parsed, apply
    from .judging.verdict import _lines_of
    from .migrations import fix
    from .migrations.runner import Refused
    from .reporting.formats import stream_for

    if flags is not None and not found.inputs:
        raise InputError("--fix and --diff edit files; `-- FLAGS...` has none")
    env = _env(args)
    out, owned = stream_for(args.output_file) if args.diff else (sys.stderr, False)
    sink = Sink(out)
    fixes = files = held = 0
    try:
        for path, got in _each(found, flags, env, args.batch, py):
            if any(v.unreadable is not None or v.nothing is not None for v in got) or \
                    path.endswith((".yaml", ".yml")):
                continue
            apply(got, chosen)
            if path.endswith(".py"):
                f = fix.fix_launcher(path, got, lambda p: _python(p, flags or [], env, py),
                                     args.unsafe_fixes)
            else:
                f = fix.fix_script(path, got[0], env, args.unsafe_fixes)
            if f is None:
                continue
            held += f.left
            for k in f.kept:  # a fixable problem not fixed says why
                ERR.line(f"{path}: not fixed: {k}")
            if f.why is not None:
                ERR.line(f"{path}: not fixed: {f.why}; nothing was written")
                continue
            if f.new == f.old:
                continue
            if args.diff:
                sink.diff(fix.diff(f))
            else:
                try:
                    fix.write(f)
                except Refused as e:
                    ERR.line(f"{path}: not fixed: {e.reason}")
                    continue
                for line in f.done if args.verbose else ():
                    ERR.line(f"{path}: fixed {line}")
            fixes, files = fixes + len(f.done), files + 1
    finally:
        if owned:
            out.close()
    verb = "Would fix" if args.diff else "Fixed"
    more = f" ({held} more with --unsafe-fixes)" if held else ""
    if fixes or held:
        ERR.line(f"{verb} {fixes} problem{'s' if fixes != 1 else ''} in {files} "
                 f"file{'s' if files != 1 else ''}{more}.")
    _parsed.cache_clear()  # the files changed: read their directives and lines again
    _lines_of.cache_clear()
    return fixes


def _fixers(fmt: str) -> None:
    """SARIF's rule help says which codes `--fix` rewrites: the fixers mark them when they
    register (migrations/fix.py), loaded here, above the formats that read the records."""
    if fmt == "sarif":
        from .migrations import fix  # noqa: F401


def _check_stdin(args, flags) -> int:
    """`check -`: one script from standard input, named by --stdin-filename."""
    from .judging.selection import apply
    from .reporting.formats import Printer, stream_for
    from .stdin import renamed, staged

    if args.inputs != ["-"]:
        raise InputError("`-` (standard input) is checked alone; give the files separately")
    if args.fix or args.diff:
        raise InputError("--fix and --diff edit files; give the file itself, not `-`")
    name = args.stdin_filename or "-"
    args.inputs = [args.stdin_filename] if args.stdin_filename else []
    chosen = _settings(args)
    py = {"cluster": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                      "gpu": args.gpu, "nvlink": args.nvlink, "isolated": args.isolated},
          "real_imports": args.real_imports, "trust": args.trust_launcher,
          "pass_env": args.pass_env, "reads": args.read}
    with staged(args.stdin_filename) as tmp:
        from .reading.discover import Found

        got = [v for _, vs in _each(Found([tmp]), flags, _env(args), args.batch, py)
               for v in vs]
        apply(got, chosen)
        got = renamed(got, tmp, name)
    out, owned = stream_for(args.output_file)
    _fixers(args.format)
    printer = Printer(args.format, out, verbose=args.verbose, quiet=args.quiet,
                      color=_color(args.color) and not owned)
    try:
        printer.add(got)
        printer.close()
    finally:
        if owned:
            out.close()
    code = exit_code(got)
    return 0 if args.exit_zero and code == 1 else code


def cmd_rule(args, flags) -> int:
    import difflib

    from .codes import CODES, page
    from .migrations.fix import FIXERS  # registered, they mark their codes fixable

    if args.code is None:
        width = max(map(len, CODES))
        for code, c in CODES.items():
            OUT.line(f"{code.ljust(width)}  {c.severity}{'  fixable' if c.fixable else ''}")
        return 0
    if args.code not in CODES:
        near = difflib.get_close_matches(args.code, CODES, n=1)
        hint = f"; did you mean {near[0]}?" if near else " (`miles-topology rule` lists them)"
        raise InputError(f"{args.code!r} is not a problem code{hint}")
    OUT.text(page(args.code), end="")
    if args.code in FIXERS:
        OUT.line(f"check --fix: {FIXERS[args.code][0]} (--unsafe-fixes for the others)")
    return 0


def cmd_show(args, flags) -> int:
    from .judging.fit import rank_gib
    from .reporting.formats.text import memory_lines, text_one
    from .reporting.show import svg_map, text_map, too_big

    py = {"cluster": {"gpu": args.gpu, "isolated": args.isolated}}
    verdicts = _inputs(args.inputs, flags, _parse_env(args.env), py=py)
    code = exit_code(verdicts)
    for v in verdicts:
        if v.topology is None or v.summary is None:  # sizes that depend on unknowns: no map
            text_one(v, OUT)
            continue
        mem = None if too_big(v.topology) else rank_gib(v.topology, v.memory)  # per rank
        if args.svg:
            gpu = (v.memory or {}).get("gpu_gib")
            try:
                Path(args.svg).write_text(svg_map(v.topology, args.color_by, mem=mem,
                                                  gpu_gib=gpu))
            except OSError as e:
                raise InputError(f"--svg {args.svg}: cannot write: {e.strerror or e}") from None
        OUT.line(v.path, ":")
        OUT.text(text_map(v.topology, mem))
        for mline in memory_lines(v.memory):
            OUT.line(mline)
        if args.svg:
            OUT.line()
            OUT.line(f"wrote {args.svg}")
    return code


def cmd_plan(args, flags) -> int:
    from .judging.memory import gpu_bytes
    from .judging.plan import MAX_WORLD, Options, gpu_name, plan, read_model, report
    from .reading.deadline import per_input

    with per_input():  # a model script's helpers
        shape, model = read_model(args.inputs, flags)
    gpu = gpu_name(args.gpu)
    for key in ("nodes", "gpus_per_node", "top", "max_tokens_per_gpu", "tokens_per_step",
                "seq_length"):
        value = getattr(args, key)
        if value is not None and value < 1:
            raise InputError(f"--{key.replace('_', '-')} {value}: give 1 or more")
    if not 0 <= args.margin < 1:
        raise InputError(f"--margin {args.margin}: give a share of the GPU in [0, 1)")
    if args.nodes * args.gpus_per_node > MAX_WORLD:  # every layout is built rank by rank
        raise InputError(f"--nodes {args.nodes} x --gpus-per-node {args.gpus_per_node}: "
                         f"plan searches layouts of at most {MAX_WORLD} GPUs")
    opts = Options(tokens=args.max_tokens_per_gpu, recompute=args.recompute or None,
                   offload=args.optimizer_cpu_offload or None, margin=args.margin,
                   step_tokens=args.tokens_per_step, seq_length=args.seq_length,
                   colocate=args.colocate)
    found = plan(shape, model, args.nodes, args.gpus_per_node, gpu_bytes(gpu), opts=opts,
                 gpu_name=gpu)
    text = report(found, shape, model, args.nodes, args.gpus_per_node, gpu, args.top,
                  args.format, opts, args.explain)
    if args.format == "json":  # a document: its values exact (safetext)
        OUT.document(json.loads(text))
    else:
        OUT.text(text)
    return 0 if found else 1


def cmd_migrate(args, flags) -> int:
    if flags is not None:
        raise InputError("migrate takes launch scripts, not `-- FLAGS...`")
    if args.dry_run and args.write:
        raise InputError("migrate: --dry-run writes nothing; give it without --write")
    from .migrations.runner import main as migrate_main

    _stack_path(args)
    return migrate_main(args.inputs, _parse_env(args.env), write=args.write, check=args.check,
                        inline=args.inline, quiet=args.quiet, only_migrated=args.only_migrated)


def cmd_flags(args, flags) -> int:
    from .model.errors import TopologyError
    from .reading.yamlflags import text

    if flags is not None:
        raise InputError("flags takes one topology YAML, not `-- FLAGS...`")
    try:
        OUT.text(text(args.yaml), end="")
    except TopologyError as e:
        for p in e.problems:
            ERR.line(f"{args.yaml}: error [{p.code}] {p.message} Fix: {p.fix}")
        return 1
    return 0


def cmd_schema(args, flags) -> int:
    from .reading.sources import schema

    OUT.document(schema())
    return 0


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Usage errors become exit 2 with our own one-line message."""

    def error(self, message: str):
        raise _Usage(message)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text}: give seconds between 0 and 86400")
    return value


def _timeout_option(p: argparse.ArgumentParser) -> None:
    from .reading.deadline import DEFAULT_S

    p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                   help="wall-clock budget of one input, shared by every helper and launcher "
                        f"run it makes (default {DEFAULT_S:g}); what is left when it is spent "
                        "stays unknown")


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="miles-topology", usage=USAGE,
        description="One validated Topology for every parallel size of a miles MoE RL job.",
        epilog=EXIT, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"miles-topology {__version__}")
    sub = top.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")
    for name in ("check", "show", "migrate", "flags", "schema", "rule", "plan"):
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
        if name == "plan":
            p.add_argument("inputs", nargs="*", metavar="MODEL",
                           help="an HF config.json or a bash model file (MODEL_ARGS=(...)); or "
                                "`-- MODEL FLAGS` after the options")
            p.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes")
            p.add_argument("--gpus-per-node", type=int, default=8, metavar="N",
                           help="GPUs a node (default 8)")
            p.add_argument("--gpu", metavar="NAME", type=_gpu,
                           help="the GPU: H100 (default), H200, B200, MI300X, ...")
            p.add_argument("--top", type=int, default=10, metavar="K",
                           help="layouts to print (default 10)")
            p.add_argument("--max-tokens-per-gpu", type=int, default=8192, metavar="T",
                           help="tokens of a micro-batch on a rank, for activations "
                                "(default 8192)")
            p.add_argument("--recompute", action="store_true",
                           help="full activation recompute (--recompute-granularity full; "
                                "else both ways are weighed)")
            p.add_argument("--optimizer-cpu-offload", action="store_true",
                           help="optimizer state on the CPU (else both ways are weighed)")
            p.add_argument("--margin", type=float, default=0.1, metavar="SHARE",
                           help="share of the GPU a layout leaves free (default 0.1, where "
                                "check warns)")
            p.add_argument("--tokens-per-step", type=int, metavar="T",
                           help="tokens of a training step, for the micro-batch count "
                                "(default an RL batch: 256 samples of half --seq-length, "
                                "else of half --max-tokens-per-gpu)")
            p.add_argument("--seq-length", type=int, metavar="L",
                           help="the longest sample (prompt + response): cp x "
                                "--max-tokens-per-gpu must hold it")
            p.add_argument("--colocate", action="store_true",
                           help="rollout engines on the training GPUs: propose their size "
                                "and --sglang-mem-fraction-static")
            p.add_argument("--explain", action="store_true",
                           help="print each step-time term of every layout shown")
            p.add_argument("--format", choices=("text", "json"), default="text",
                           metavar="FORMAT", help="text (default) or json")
            _timeout_option(p)
            continue
        what = "launch scripts to rewrite" if name == "migrate" else \
            "launch scripts (.sh), Python launchers (.py), topology files (.yaml), folders " \
            "(walked for them), `-` (standard input); or `-- FLAGS...` after the options"
        p.add_argument("inputs", nargs="*", metavar="INPUT", help=what)
        p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                       help="a value the script reads from its environment (repeatable)")
        if name in ("check", "show"):
            _timeout_option(p)
        if name in ("check", "migrate"):
            p.add_argument("--stack", metavar="PATH",
                           help="the user's stack: a checkout or site-packages holding miles "
                                "or slime (default: installed, beside the script, else the "
                                "bundled snapshot)")
        if name in ("check", "show"):
            p.add_argument("--isolated", action="store_true",
                           help="read no configuration file: no [tool.miles-topology] table "
                                "(select, ignore, exclude, cluster keys); only the options "
                                "given count (CI on a pull request)")
        if name == "check":
            p.add_argument("--no-respect-gitignore", action="store_true",
                           help="a folder walk does not read .gitignore files: every file "
                                "that launches is checked")
            p.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                           help="Python launchers: pass this variable of the environment on "
                                "(they get an allow-list of it, never all: docs/sandbox.md)")
            p.add_argument("--read", action="append", default=[], metavar="PATH",
                           help="Python launchers: a file or folder they may read beyond "
                                "their checkout and import path (a model folder)")
            p.add_argument("--trust-launcher", action="store_true",
                           help="run Python launchers with in-process recorders only, where "
                                "the kernel cannot isolate them (docs/sandbox.md)")
            p.add_argument("--format", "--output-format", choices=FORMATS, default="text",
                           metavar="FORMAT", dest="format",
                           help="text (default), concise (one "
                                "`path:line:col: severity code message` "
                                "line a problem), json (one object, a list for several "
                                "inputs), github (workflow annotations), sarif (2.1.0)")
            p.add_argument("-q", "--quiet", action="store_true",
                           help="text, concise: no summary line (only the problems)")
            p.add_argument("-v", "--verbose", action="store_true",
                           help="text: every input's full report (values and where they are "
                                "set, the map), clean ones too")
            p.add_argument("-o", "--output-file", metavar="FILE",
                           help="write the report to FILE instead of standard output")
            p.add_argument("--exit-zero", action="store_true",
                           help="exit 0 even when an input is invalid (2 stays for inputs "
                                "that cannot be read)")
            p.add_argument("--stdin-filename", metavar="NAME",
                           help="with `-`: the name of the script read from standard input "
                                "(its folder: sourced files, settings; its suffix: the kind)")
            p.add_argument("--fix", action="store_true",
                           help="apply the safe fixes in place (renamed or deprecated flags, "
                                "a unique near-miss spelling one typo away, the overridden "
                                "occurrence of a flag given twice), atomically; the topology "
                                "must not change")
            p.add_argument("--diff", action="store_true",
                           help="print the fixes --fix would apply as a unified diff; write "
                                "nothing (exit 1 when there are any)")
            p.add_argument("--unsafe-fixes", action="store_true",
                           help="with --fix or --diff: also the fixes that may change what "
                                "the script means (a near-miss spelling further away or of a "
                                "layout flag; removing a flag upstream ignores)")
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
            p.add_argument("--gpu", metavar="NAME", type=_gpu,
                           help="the GPU memory is judged on, and Python launchers' probes "
                                "answered for, e.g. H100 (default), B200, MI300X")
            p.add_argument("--nvlink", action=argparse.BooleanOptionalAction, default=None,
                           help="Python launchers: GPUs of a node on NVLink (default: yes)")
            p.add_argument("--path", action="append", metavar="DIR",
                           help="Python launchers: a folder to import from, before "
                                "PYTHONPATH (the checkout a launcher's package lives in; "
                                "repeatable)")
            p.add_argument("--real-imports", action="store_true",
                           help="Python launchers: import the installed ray, torch, ... "
                                "instead of the recording stand-ins (slower)")
        if name == "show":
            p.add_argument("--svg", metavar="FILE", help="also draw the map into FILE as SVG")
            p.add_argument("--color-by", choices=("engine", "ep", "pp", "dp", "memory"),
                           default="engine", metavar="ROLE",
                           help="SVG: colour the GPUs by rollout engine (default), EP group, "
                                "pipeline stage (pp), data-parallel replica (dp) or the "
                                "train rank's estimated memory (memory)")
            p.add_argument("--gpu", metavar="NAME", type=_gpu,
                           help="the GPU the memory estimate is judged on, e.g. H100 "
                                "(default, assumed), H200, B200, MI300X")
        if name == "migrate":
            p.add_argument("--write", action="store_true",
                           help="apply the steps (atomically; keeps SCRIPT.bak)")
            p.add_argument("--dry-run", action="store_true",
                           help="show the diff, write nothing: what migrate does without "
                                "--write (the default, accepted when said)")
            p.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 while a step is pending")
            p.add_argument("--inline", action="store_true",
                           help="gather the layout flags in one TOPOLOGY_ARGS array instead "
                                "of a YAML file")
            p.add_argument("-q", "--quiet", action="store_true",
                           help="--check: print only the scripts with a pending step; files "
                                "that launch nothing (model files, helpers) are not read")
            p.add_argument("--only-migrated", action="store_true",
                           help="--check: look only at scripts migrated before (they carry "
                                "the `# miles-topology-migration:` line); keeps them migrated")
    return top


def main(argv: list[str] | None = None) -> int:
    # in a context of its own: what a command sets (`--stack`) ends with it
    return contextvars.copy_context().run(_main, argv)


def run() -> NoReturn:
    """The command (`miles-topology`, `python -m miles_topology`): `main`, then the exit
    handlers and the streams flushed, and the process ends there: the interpreter's own
    teardown frees every module and object one by one, ~30 ms of a 0.5 s launcher check
    that nothing needs (an embedding caller uses `main`). A launcher's sandbox child is
    started first, to start up while the checker does (spare.py)."""
    from . import spare

    spare.start(sys.argv[1:])
    try:
        code = main()
    finally:
        spare.discard()  # not taken: ended, its folder removed
    import atexit

    atexit._run_exitfuncs()  # confine's private folder
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left: nothing more to say
            pass
    os._exit(code if isinstance(code, int) else 0)


def _main(argv: list[str] | None) -> int:
    from .reading import deadline, sources

    argv = list(sys.argv[1:] if argv is None else argv)
    head, flags = _split_dashdash(argv)
    try:
        args = parser().parse_args(head)
        from .reading.gate import add_user_roots

        add_user_roots([*(getattr(args, "read", None) or []), getattr(args, "stack", None),
                        *(getattr(args, "path", None) or [])])  # the gate's roots the user gave
        run = {"check": cmd_check, "show": cmd_show, "migrate": cmd_migrate,
               "flags": cmd_flags, "schema": cmd_schema, "rule": cmd_rule,
               "plan": cmd_plan}[args.cmd]
        # an input's ${oc.env:...} reads --env and the script's exports, never this
        # process's environment (a CI runner's secrets); `flags` runs in the launch itself
        sources.SEALED = args.cmd in ("check", "show", "plan", "migrate")
        deadline.SECONDS = getattr(args, "timeout", None)
        code = run(args, flags)
        sys.stdout.flush()
        return code
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    except _Usage as e:
        ERR.line(f"miles-topology: {e}")
        ERR.text(f"usage:\n{USAGE}")
        return 2
    except InputError as e:  # may quote a checked file or a launcher's output: printable
        ERR.line(f"miles-topology: {e}")
        return 2
    except BrokenPipeError:  # `miles-topology ... | head`: the reader left, stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as e:  # a bug of ours: say so in one line, keep the traceback on request
        if os.environ.get("MILES_TOPOLOGY_DEBUG"):
            raise
        ERR.line(f"miles-topology: internal error: {type(e).__name__}: {e} "
                 "(set MILES_TOPOLOGY_DEBUG=1 for the traceback)")
        return 2
    finally:
        sources.SEALED = False
        deadline.SECONDS = None


if __name__ == "__main__":
    run()
