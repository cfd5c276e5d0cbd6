"""Read a Python launcher (miles' ``scripts/run_*.py``): run it where nothing leaves the process
and take the training command it would have started.

Since miles writes its launchers in Python (a dataclass + typer CLI, a helper building one
flag string, then ``execute_train(...)`` running ``ray job submit ... -- python3 train.py
...`` through subprocess), the flags exist only once the launcher runs. `read_python_launcher`
runs it in a fresh interpreter (``child.py``) isolated by the kernel (``isolate.py``: user,
network, PID, IPC and mount namespaces, Landlock, seccomp; docs/sandbox.md) with a temporary
folder as cwd, HOME and TMPDIR, resource limits and a wall-clock timeout; every command it
starts is recorded, not run. Where the kernel cannot isolate it, it is not run (InputError
naming the facility) unless the caller trusts it (``--trust-launcher``).
"""


from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..model.errors import InputError
from ..spare import launcher_env
from . import typerapp
from .cluster import ClusterModel
from .commands import shown
from .execute import CHILD, DENY_VAR, STDERR_TAIL, Ran, execute, read_paths
from .outcome import (
    _THREADS,
    MAX_LAUNCHES,
    PIP_NAMES,
    PythonLaunch,
    Recorded,
    _at,
    brief,
    capped_note,
    interpret,
    last_words,
    refusal,
    source_of,
    stop_reason,
)

__all__ = ["CHILD", "DENY_VAR", "MAX_LAUNCHES", "MEMORY_MB", "PIP_NAMES", "TIMEOUT_S",
           "UNKNOWN_ENV", "ProgramRun", "PythonLaunch", "Recorded", "brief", "read_paths",
           "read_python_launcher", "read_python_launches", "run_program"]


UNKNOWN_ENV = ("ray job submit's runtime env is not one this check reads (a --runtime-env "
               "file, or not JSON), and the entrypoint sees only the runtime env")
MEMORY_MB = 2048
TIMEOUT_S = 10.0  # the wall limit of one run of a launcher (bench/pylaunch.py: ~30x the median)
# [launchers hook] --real-imports: the installed torch, ray, sglang use more memory (the
# sandbox bounds what is used, not what is mapped) and take seconds to import, not a tenth
REAL_MEMORY_MB, REAL_TIMEOUT_S = 16384, 60.0
TRUSTED = ("run with --trust-launcher: in-process recorders only, not isolated by the "
           "kernel; the launcher could have acted on this machine")


def read_python_launcher(path: str, launcher_args: list[str], env: Mapping[str, str] | None
                         = None, timeout_s: float | None = None, memory_mb: int | None = None,
                         cwd: str | None = None, cluster: ClusterModel | None = None,
                         real_imports: bool = False, trust: bool = False,
                         pass_env: Sequence[str] = (), reads: Sequence[str] = ()
                         ) -> PythonLaunch:
    """Run the launcher at `path` with `launcher_args` in the sandbox and return its training
    launch (the first, when it starts several: see `read_python_launches`). Its environment
    is `launcher_env(env, pass_env)`: an allow-list of this one, never all of it. The
    launcher runs in the sandbox's temporary folder, or in `cwd` when given (for a launcher
    that reads files relative to where it is started; its writes there are redirected all the
    same); it may read its checkout, its import path and `reads` (a model folder), nothing
    else of this machine. Its probes are answered from `cluster` (default:
    `ClusterModel.of({})`); heavy modules are stand-ins unless `real_imports`. `trust`: run it
    with the in-process recorders only, not isolated by the kernel (--trust-launcher). Raises
    InputError when there is no launch, when the launcher cannot run to it, or when the
    kernel here cannot isolate it."""
    budget = _budget(timeout_s, real_imports)
    got = _read(path, launcher_args, env, budget, memory_mb, cwd, cluster, real_imports,
                trust, pass_env, reads)
    return _trusted(interpret(*got), trust)[0]


def read_python_launches(path: str, launcher_args: list[str], env: Mapping[str, str] | None
                         = None, cwd: str | None = None, cluster: ClusterModel | None = None,
                         real_imports: bool = False, trust: bool = False,
                         pass_env: Sequence[str] = (), reads: Sequence[str] = (),
                         timeout_s: float | None = None,
                         meanwhile: Callable[[], object] | None = None) -> list[PythonLaunch]:
    """Every training launch of the launcher, in order: one per call that starts training
    (a test looping over configs launches many; at most MAX_LAUNCHES, with a note), and, for
    a typer app with several commands run with no arguments, those of each command in turn
    (the commands read from its source, `typerapp`; the launcher is run once per command, all
    runs within one wall-clock budget; a command that launches nothing is a note on the
    others). `meanwhile`: called once the first run's child has started, while it runs (what
    the caller will need after it: this process only waits for the child then; a thread
    doing it would fight the runs for the GIL)."""
    budget = _budget(timeout_s, real_imports)
    budget.meanwhile = [meanwhile] if meanwhile is not None else []
    commands = typerapp.commands(path) if not launcher_args and os.path.isfile(path) else None
    if commands is None:
        return _trusted(interpret(*_read(path, launcher_args, env, budget, None, cwd,
                                          cluster, real_imports, trust, pass_env, reads),
                                   every=True), trust)
    out, idle = [], []
    if len(commands) > typerapp.MAX_COMMANDS:
        idle.append(f"the typer app has {len(commands)} commands; the first "
                    f"{typerapp.MAX_COMMANDS} are run")
        commands = commands[:typerapp.MAX_COMMANDS]
    def run(name: str) -> list[PythonLaunch] | str:
        """The command's launches, or why it has none (a note on the others)."""
        if budget.left() <= 0:
            return (f"command `{name}`: not run, the wall-clock limit of "
                    f"{budget.total:g} s for all runs of the launcher was spent")
        try:
            return interpret(*_read(path, [name], env, budget, None, cwd, cluster,
                                     real_imports, trust, pass_env, reads), every=True)
        except InputError as e:
            return f"command `{name}`: {str(e).split(': ', 1)[-1]}"

    for name, runs in zip(commands, _each(run, commands)):
        if isinstance(runs, str):
            idle.append(runs)
            continue
        for r in runs:
            r.command = name
        room = MAX_LAUNCHES - len(out)
        if len(runs) > room:
            if room:
                runs[room - 1].notes.append(capped_note(len(out) + len(runs)))
            runs = runs[:room]
        out += runs
    if not out:
        raise InputError(f"{path}: no command of the typer app ({', '.join(commands)}) "
                         "launches training: " + "; ".join(idle))
    for i, r in enumerate(out):
        r.notes += idle
        r.index = i
    return _trusted(out, trust)


# a typer app's commands run side by side, each in a sandbox of its own (nothing shared;
# the results are taken in the commands' order): its wall time is not their sum
COMMANDS_AT_ONCE = min(4, os.cpu_count() or 1)


def _each(run, names: list[str]) -> list:
    """`run(name)` for each name, in order; up to COMMANDS_AT_ONCE at a time, each in a
    copy of this thread's context (the input's --timeout budget: reading/deadline.py)."""
    if len(names) < 2 or COMMANDS_AT_ONCE < 2:
        return [run(n) for n in names]
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    contexts = [contextvars.copy_context() for _ in names]  # here: a new thread has none
    with ThreadPoolExecutor(max_workers=min(COMMANDS_AT_ONCE, len(names))) as pool:
        return list(pool.map(lambda c, n: c.run(run, n), contexts, names))


@dataclass
class _Budget:
    """One wall-clock limit for every run of one launcher, reruns included."""

    total: float
    end: float
    meanwhile: list = field(default_factory=list)  # read_python_launches's, for one run

    def left(self) -> float:
        return self.end - time.monotonic()

    def take(self) -> Callable[[], object] | None:
        """`meanwhile`, for the first run that asks (runs of commands side by side ask)."""
        try:
            return self.meanwhile.pop()
        except IndexError:
            return None


def _budget(timeout_s: float | None, real_imports: bool) -> _Budget:
    """The launcher's limit, at most what is left of its input's --timeout (reading/deadline.py)."""
    from ..reading import deadline

    if timeout_s is None:
        timeout_s = REAL_TIMEOUT_S if real_imports else TIMEOUT_S
    timeout_s = round(deadline.cap(timeout_s), 1)
    if timeout_s <= 0:
        raise InputError(f"launcher {deadline.spent_why()}")
    return _Budget(timeout_s, time.monotonic() + timeout_s)


def _trusted(launches: list[PythonLaunch], trust: bool) -> list[PythonLaunch]:
    for launch in launches if trust else ():
        launch.notes.insert(0, TRUSTED)
    return launches


def _read(path, launcher_args, env, budget: _Budget, memory_mb, cwd, cluster, real_imports,
          trust, pass_env=(), reads=()):
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    for r in reads:
        if not os.path.exists(r):
            raise InputError(f"--read {r}: no such file or folder")
    if memory_mb is None:
        memory_mb = REAL_MEMORY_MB if real_imports else MEMORY_MB
    cluster = cluster or ClusterModel.of({})
    # the devices a node shows are the modelled ones, not this machine's: its
    # CUDA_VISIBLE_DEVICES is not passed on (given with --env, it is)
    child_env = launcher_env(env, pass_env)
    t0 = time.perf_counter()
    extra = {"cluster": cluster.as_dict(), "real_imports": real_imports}  # [launchers hook]
    got = execute("path", os.path.abspath(path), launcher_args, child_env, cwd,
                   max(budget.left(), 0.0), memory_mb, trust, extra, reads,
                   meanwhile=budget.take())
    # a launcher that says why it stops on stdout (`print("Usage: run.py <run|list>")`, then
    # `sys.exit(1)`): its last line, or the last that says error or usage (a list of choices
    # printed after it), is the reason a failure reports when stderr has none
    said = got.err if last_words(got.err) else \
        f"{got.err}\n{stop_reason(got.stdout[-STDERR_TAIL:])}"
    return (path, got.records, said, got.status, {**child_env, **got.sandbox},
            budget.total, memory_mb, time.perf_counter() - t0, got.end)


@dataclass
class ProgramRun:
    """What a Python program printed when run in the sandbox (``$(python3 helper.py ARG)``)."""

    status: int | str  # exit code, or "timeout" / "memory" / "refused" / "unavailable"
    stdout: str  # what it printed (at most STDOUT_MAX bytes)
    stderr: str  # the tail
    error: str | None  # one line: why it gave no output (missing module, exception, ...)
    records: list = field(default_factory=list)  # the Recorded actions it tried (not run)


def run_program(args: list[str], *, env: Mapping[str, str] | None = None,
                cwd: str | None = None, timeout_s: float = 10, trust: bool = False,
                pass_env: Sequence[str] = (), reads: Sequence[str] = (),
                cluster: ClusterModel | None = None, confine: Sequence = ()) -> ProgramRun:
    """Run ``python3 ARGS...`` in the launcher's sandbox and return what it printed. `args`
    is what follows ``python3``: ``[FILE, ARG...]``, ``["-c", CODE, ARG...]`` or ``["-m",
    MODULE, ARG...]`` (interpreter options before them, such as ``-u``, are skipped). Its
    environment is `launcher_env(env, pass_env)`. Status "unavailable": there is no such file
    or no program given; "refused": the sandbox cannot run it here (the error says why).
    `cluster`: run it with the stand-ins a launcher gets (torch, ray, nvidia-smi answered
    from that model), for a probe of the cluster. `confine`: the roots of the script that runs
    it (gate.py): its program must be a file inside them, and only they are readable."""
    words = list(args)
    while words and words[0].startswith("-") and words[0] not in ("-c", "-m", "-"):
        words.pop(0)  # -u, -B, -O...: nothing the result depends on
    if not words or words[0] == "-" or (words[0] in ("-c", "-m") and len(words) < 2):
        return ProgramRun("unavailable", "", "", "no program given (python3 reading stdin)")
    if words[0] == "-c":
        mode, target, rest = "code", words[1], words[2:]
    elif words[0] == "-m":
        mode, target, rest = "module", words[1], words[2:]
    else:
        mode, target, rest = "path", words[0], words[1:]
        full = os.path.join(cwd, target) if cwd and not os.path.isabs(target) else target
        if not os.path.isfile(full):
            return ProgramRun("unavailable", "", "", f"{target}: no such file")
        if confine:
            from ..reading import gate

            try:
                gate.admit(full, confine)
            except (gate.Refused, OSError) as e:
                return ProgramRun("refused", "", "", str(e))
        target = os.path.abspath(full)
    extra = None if cluster is None else {"cluster": cluster.as_dict(), "real_imports": False}
    from ..reading import deadline

    timeout_s = deadline.cap(timeout_s)  # its share of the input's --timeout
    if timeout_s <= 0:
        return ProgramRun("timeout", "", "", deadline.spent_why())
    got = execute(mode, target, rest, launcher_env(env, pass_env), cwd, timeout_s,
                   MEMORY_MB, trust, extra, reads, confine)
    calls = [r for r in got.records if "kind" in r]
    records = [Recorded(r["kind"], shown(r), source_of(r.get("source"))) for r in calls]
    status, error = _program_status(got, timeout_s)
    return ProgramRun(status, got.stdout, got.err, error, records)


def _program_status(got: Ran, timeout_s: float) -> tuple[int | str, str | None]:
    """(status, error) of a program run for its output: as it exited, or "timeout",
    "memory", "refused", with why."""
    from ..reading import deadline

    end = got.end
    status: int | str
    error = None
    if got.status in ("timeout", -signal.SIGXCPU):
        status, error = "timeout", f"did not finish within {timeout_s:g} s" + (
            "; this input's time budget (--timeout) is spent" if deadline.left() == 0 else "")
    elif end is None:
        status = got.status
        error = f"killed by signal {-got.status}" if isinstance(got.status, int) and \
            got.status < 0 else f"exited with status {got.status}{last_words(got.err)}"
    elif end["end"] == "memory":
        status, error = "memory", f"ran out of memory (limit {MEMORY_MB} MiB)"
    elif end["end"] == "threads":
        status, error = "refused", _THREADS
    elif end["end"] == "refused":
        status, error = "refused", refusal(end)
    elif end["end"] in ("missing", "error"):
        status, error = 1, _at(end)
    elif end["end"] == "exit":
        code = end.get("code")
        status = code if isinstance(code, int) else 0 if code is None else 1
        if isinstance(code, str):
            error = code
    else:
        status = 0
    return status, error
