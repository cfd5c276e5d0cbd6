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

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import spare as spare_mod
from ..model.errors import InputError, NoTrainingLaunch
from ..spare import launcher_env
from . import checkout, typerapp
from . import records as records_mod
from .child import REFUSED, status_of
from .cluster import ClusterModel
from .commands import launch_of, shown
from .locate import locate

CHILD = Path(__file__).with_name("child.py")
UNKNOWN_ENV = ("ray job submit's runtime env is not one this check reads (a --runtime-env "
               "file, or not JSON), and the entrypoint sees only the runtime env")
MEMORY_MB = 2048
TIMEOUT_S = 10.0  # the wall limit of one run of a launcher (bench/pylaunch.py: ~30x the median)
# [launchers hook] --real-imports: the installed torch, ray, sglang use more memory (the
# sandbox bounds what is used, not what is mapped) and take seconds to import, not a tenth
REAL_MEMORY_MB, REAL_TIMEOUT_S = 16384, 60.0
DENY_VAR = "MILES_TOPOLOGY_SANDBOX_DENY"  # for tests: a facility to treat as missing
TRUSTED = ("run with --trust-launcher: in-process recorders only, not isolated by the "
           "kernel; the launcher could have acted on this machine")
_THREADS = "the launcher started more threads than the sandbox allows (a thread bomb?); stopped"

# What the import name does not say: the name to pip install.
PIP_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "cv2":
             "opencv-python", "dateutil": "python-dateutil", "google": "protobuf"}


def refusal(end: dict) -> str:
    """The one line saying why the launcher was not run, and how to proceed."""
    return (f"not run: the kernel here cannot isolate a launcher, it lacks "
            f"{end.get('missing')}. `check` runs Python launchers only in a sandbox the "
            "kernel enforces; to run this one anyway with in-process recorders only (which "
            "the launcher can get around), give --trust-launcher if you trust its code")


@dataclass
class Recorded:
    """A command the launcher tried to run (or a network/file action it tried), not run."""

    kind: str  # "subprocess", "os.system", "os.execv", "socket.connect", "shutil.rmtree"...
    command: str  # as one line
    source: tuple[str, int] | None  # the launcher's own file:line of the call


@dataclass
class PythonLaunch:
    """The training command a Python launcher issues, as `check` reads it."""

    path: str
    argv: list[str]  # the flags after train.py / train_async.py
    entry: str  # the train script as the command names it
    launcher: str  # "python", "torchrun" or "ray job submit"
    source: tuple[str, int] | None  # the launcher's file:line of the call that issued it
    # what the launch sets in the entry's environment beyond the one the launcher ran with;
    # under ray job submit, its runtime env (the entrypoint inherits nothing else from it)
    env: dict[str, str] = field(default_factory=dict)
    others: list[Recorded] = field(default_factory=list)  # everything else it tried
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    env_known: bool = True  # False: the runtime env of its ray job submit is not literal
    command: str | None = None  # the typer command it was run with, when one was named
    index: int = 0  # which launch of the run (0: the first)
    unknowns: dict = field(default_factory=dict)  # marker id -> {"what", "source"}
    assumed: list[str] = field(default_factory=list)  # branches on stand-in values
    probes: list[dict] = field(default_factory=list)  # captured commands, how answered
    # servers its commands were started to serve, answered in the sandbox (servers.py):
    # {"server", "port", "node", "flag", "command", "source", "polls"}
    servers: list[dict] = field(default_factory=list)
    # flag -> (file, line, column) of the literal that spells it (locate.py), where one does
    spelled: dict = field(default_factory=dict)
    world: tuple[int, int] | None = None  # torchrun's (nnodes, nproc_per_node)
    # the YAML files its flags name in the sandbox's work folder, as the child read them
    # when the launch was recorded: path -> {"text": ...} or {"why": records.UNREAD key}
    files: dict = field(default_factory=dict)


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
    return _trusted(_interpret(*got), trust)[0]


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
        return _trusted(_interpret(*_read(path, launcher_args, env, budget, None, cwd,
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
            return _interpret(*_read(path, [name], env, budget, None, cwd, cluster,
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
                runs[room - 1].notes.append(_capped(len(out) + len(runs)))
            runs = runs[:room]
        out += runs
    if not out:
        raise InputError(f"{path}: no command of the typer app ({', '.join(commands)}) "
                         "launches training: " + "; ".join(idle))
    for i, r in enumerate(out):
        r.notes += idle
        r.index = i
    return _trusted(out, trust)


MAX_LAUNCHES = 200  # launches checked per launcher file (a report entry each)
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


def _capped(n: int) -> str:
    return (f"it launches training {n} times or more; only the first {MAX_LAUNCHES} are "
            "checked (the most `check` reads of one launcher)")


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


def read_paths(target: str | None, cwd: str | None, env: Mapping[str, str],
               reads: Sequence[str] = (), work: str = "", confine: Sequence = ()
               ) -> tuple[str, list[str]]:
    """(the checkout, every path the launcher may read beneath): its checkout (`target`'s, or
    the folder it runs in; `-c CODE` run in `work` has none), that folder, the import path it
    is given (PYTHONPATH, this interpreter's prefixes and sys.path, this package) and `reads`
    (--read). isolate.landlock adds the system's libraries and leaves .git and credential
    files out of each. `confine`: a helper of a script (gate.py's roots of that script): its
    checkout is the first of them, and the folder it runs in and PYTHONPATH entries (the
    script's to choose: `cd /`, `PYTHONPATH=/`) are readable only inside them."""
    from ..reading import gate

    # its checkout (checkout.root_of), else its own folder; never $HOME or /
    root = (checkout.root_of(target or os.path.join(cwd, "")) or os.path.dirname(
        os.path.abspath(target or os.path.join(cwd, "")))) if target or cwd else work
    if gate._too_wide(Path(os.path.realpath(root))):
        root = target or work
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    mine = [*([cwd] if cwd else []), *pythonpath]
    if confine:
        root = str(confine[0])
        mine = [p for p in mine if gate.inside(Path(os.path.realpath(p)), confine)]
    paths = [root, *mine, sys.prefix, sys.base_prefix,
             sys.exec_prefix, sys.base_exec_prefix, *(p for p in sys.path if p),
             str(Path(__file__).resolve().parent.parent), *reads]
    return root, list(dict.fromkeys(os.path.abspath(p) for p in paths))


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
    got = _execute("path", os.path.abspath(path), launcher_args, child_env, cwd,
                   max(budget.left(), 0.0), memory_mb, trust, extra, reads,
                   meanwhile=budget.take())
    # a launcher that says why it stops on stdout (`print("Usage: run.py <run|list>")`, then
    # `sys.exit(1)`): its last line, or the last that says error or usage (a list of choices
    # printed after it), is the reason a failure reports when stderr has none
    said = got.err if _tail(got.err) else f"{got.err}\n{_reason(got.stdout[-STDERR_TAIL:])}"
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


STDOUT_MAX = 1 << 20
STDERR_TAIL = 4096


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
    got = _execute(mode, target, rest, launcher_env(env, pass_env), cwd, timeout_s,
                   MEMORY_MB, trust, extra, reads, confine)
    calls = [r for r in got.records if "kind" in r]
    records = [Recorded(r["kind"], shown(r), _where(r.get("source"))) for r in calls]
    status, error = _program_status(got, timeout_s)
    return ProgramRun(status, got.stdout, got.err, error, records)


def _program_status(got: _Ran, timeout_s: float) -> tuple[int | str, str | None]:
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
            got.status < 0 else f"exited with status {got.status}{_tail(got.err)}"
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


@dataclass
class _Ran:
    records: list
    err: str  # the tail of stderr
    status: int | str  # the child's exit status, or "timeout"
    stdout: str
    sandbox: dict  # HOME, TMPDIR, PWD... as the child had them
    end: dict | None = None  # how it ended, where its status agrees (`_end`)


def _execute(mode: str, target: str, args, env: dict, cwd: str | None, timeout_s: float,
             memory_mb: int, trust: bool, extra: dict | None = None,
             reads: Sequence[str] = (), confine: Sequence = (),
             meanwhile: Callable[[], object] | None = None) -> _Ran:
    """Run `target` (a file, code or a module name, by `mode`) in a fresh temporary folder
    (the spare child's, when it started with this environment: spare.py)."""
    spare = spare_mod.take(env)
    with _folder(spare) as tmp:
        work = Path(tmp, "work")
        work.mkdir(exist_ok=spare is not None)
        # set in the child once it has started, so that its user site-packages (found from
        # the real HOME) are there as they are for the real launcher
        sandbox = {k: str(work) for k in ("HOME", "TMPDIR", "TMP", "TEMP")}
        sandbox["PWD"] = os.path.abspath(cwd) if cwd is not None else str(work)
        root, paths = read_paths(target if mode == "path" else None, cwd, env, reads,
                                 str(work), confine)
        records, err, status, out, verdict = _run(
            mode, target, args, env, sandbox, Path(tmp), work, timeout_s, memory_mb, trust,
            {**(extra or {}), "reads": paths}, spare, meanwhile)
        records = records_mod.RecordReader(root, str(work)).parse(records)
    return _Ran(records, err, status, out, sandbox, _end(records, status, verdict))


@contextmanager
def _folder(spare: spare_mod.Spare | None):
    """The run's temporary folder, removed after it: the spare child's, or a new one."""
    if spare is None:
        with tempfile.TemporaryDirectory(prefix="miles-topology-launcher-") as tmp:
            yield tmp
        return
    try:
        yield spare.tmp
    finally:
        if spare.started:
            shutil.rmtree(spare.tmp, ignore_errors=True)
        else:  # the run failed before it started the child: ended, its folder removed
            spare.discard()


def _end(records: list[dict], status, verdict: dict | None) -> dict | None:
    """How the launcher ended: the supervisor's verdict (memory, threads) when it gave one,
    else the last end record, kept only when the exit status (from the wait, which the
    launcher cannot write) is the one that end gives."""
    if verdict is not None:
        return verdict
    end = next((r for r in reversed(records) if "end" in r), None)
    if end is None or not isinstance(status, int) or status < 0:
        return None
    return end if status == (REFUSED if end["end"] == "refused" else status_of(end)) else None


def _run(mode, target, args, env, sandbox: dict, tmp: Path, work: Path, timeout_s: float,
         memory_mb: int, trust: bool, extra: dict, spare: spare_mod.Spare | None = None,
         meanwhile: Callable[[], object] | None = None):
    """(record bytes, stderr tail, status, stdout, the supervisor's verdict); `meanwhile`
    called once the child has started (its time counts in the child's limit)."""
    if sys.platform != "linux" and not trust:
        line = json.dumps({"end": "refused", "missing": f"Linux (namespaces, Landlock, "
                           f"seccomp); this is {sys.platform}"})
        return line.encode(), "", REFUSED, "", None
    if spare is not None:
        record_r, record_w, verdict_r, verdict_w = (spare.record_r, spare.record_w,
                                                    spare.verdict_r, spare.verdict_w)
    else:
        record_r, record_w = os.pipe()
        verdict_r, verdict_w = os.pipe()
    cfg = tmp / "config.json"
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    cfg.write_text(json.dumps({
        "mode": mode, "launcher": target, "args": list(args), "work": str(work),
        "record_fd": record_w, "verdict_fd": verdict_w,
        "pythonpath": [os.path.abspath(p) for p in pythonpath],
        "memory_mb": memory_mb, "cpu_s": int(timeout_s) + 1, "cwd": sandbox["PWD"],
        "env": sandbox, "trust": trust, "deny": os.environ.get(DENY_VAR, ""),
        "package": str(Path(__file__).resolve().parent.parent),
        # the launcher's own checkout, last on sys.path: where its package lives (checkout.py)
        "checkout": checkout.paths(target) if mode == "path" else [],
        # a spare child started with another environment takes this one (spare.take)
        **({"environ": env} if spare is not None else {}), **extra}))
    started = time.monotonic()
    if spare is not None:
        proc = spare.proc
        spare.go()
    else:
        try:
            # spare.FLAGS: -E, -B, -S; its output goes to pipes drained here with a bound,
            # never to an inherited file
            proc = subprocess.Popen([sys.executable, *spare_mod.FLAGS, str(CHILD), str(cfg)],
                                    cwd=work, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(record_w, verdict_w), start_new_session=True)
        finally:
            os.close(record_w)
            os.close(verdict_w)
    files = [proc.stdout, proc.stderr, os.fdopen(record_r, "rb", 0),
             os.fdopen(verdict_r, "rb", 0)]
    streams = {f.fileno(): _Head(f, keep, tail) for f, keep, tail in zip(files, (
        STDOUT_MAX, STDERR_TAIL, records_mod.RECORD_MAX, 4096), (False, True, False, False))}
    try:
        if meanwhile is not None:
            meanwhile()
        ended = _drain(proc, streams, timeout_s - (time.monotonic() - started))
        if not ended:
            _kill(proc)
            _drain(proc, streams, 1.0)
        status = proc.wait() if ended else "timeout"
    finally:
        for f in files:
            f.close()
    out, err, rec, ver = (h.data for h in streams.values())  # in the order put in
    verdict = None
    try:
        v = json.loads(ver.decode().splitlines()[0]) if ver.strip() else None
        if isinstance(v, dict) and v.get("end") in ("memory", "threads"):
            verdict = v
    except (ValueError, IndexError, UnicodeDecodeError):
        pass
    return (rec, err.decode(errors="replace"), status,
            out.decode(errors="replace"), verdict)


OUTPUT_MAX = 16 << 20  # what one stream may carry in all; then it is closed (EPIPE there)


class _Head:
    """The first `limit` bytes of a pipe (or the last, `tail`); the rest is read and dropped,
    up to OUTPUT_MAX in all, when the pipe is closed: the writer gets EPIPE, not a hang."""

    def __init__(self, pipe, limit: int, tail: bool = False):
        self.pipe, self.limit, self.tail, self.data, self.seen = pipe, limit, tail, b"", 0

    def add(self, chunk: bytes) -> bool:
        """Keep what fits; False once the stream has carried more than OUTPUT_MAX."""
        self.seen += len(chunk)
        if self.tail:
            self.data = (self.data + chunk)[-self.limit:]
        elif len(self.data) < self.limit:
            self.data += chunk[:self.limit - len(self.data)]
        return self.seen <= max(OUTPUT_MAX, self.limit)


def _drain(proc: subprocess.Popen, streams: dict, timeout_s: float) -> bool:
    """Read the child's pipes until they close and it has ended, within `timeout_s`;
    whether it ended."""
    deadline = time.monotonic() + timeout_s
    poll = select.poll()
    open_fds = set()
    for fd in streams:
        if streams[fd].pipe.closed:  # closed over its bound in an earlier call: not polled
            continue
        poll.register(fd, select.POLLIN)
        open_fds.add(fd)
    try:
        pidfd = os.pidfd_open(proc.pid)
        poll.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        pidfd = None
    ended = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return ended or proc.poll() is not None
            ready = poll.poll(min(left, 0.05 if pidfd is None else left) * 1000)
            for fd, _ in ready:
                if fd == pidfd:
                    ended = True
                    poll.unregister(pidfd)
                    continue
                if fd not in open_fds:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk or not streams[fd].add(chunk):
                    poll.unregister(fd)
                    open_fds.discard(fd)
                    if chunk:  # over the bound: closed, so the writer fails at once
                        streams[fd].pipe.close()
            if pidfd is None and proc.poll() is not None:
                ended = True
            if ended and not open_fds:
                return True
            if ended and not ready:  # pipes still open after the end: a grace, then go
                deadline = min(deadline, time.monotonic() + 1.0)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill(proc: subprocess.Popen) -> None:
    """Kill the child's process group (its supervisor and the sandboxed process, which may
    not leave the group) and wait until the group is gone, not only the supervisor."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.005)


def _where(src) -> tuple[str, int] | None:
    return (src[0], int(src[1])) if src else None


def _interpret(path, records, err, status, child_env, timeout_s, memory_mb, seconds, end,
               every: bool = False) -> list[PythonLaunch]:
    calls = [r for r in records if "kind" in r]
    _mark_ran(records)
    found, others, launches = _split(calls, child_env, every)
    name = os.path.basename(path)
    notes = []
    # [launchers hook] modules the launcher's own code imports that are not installed here
    absent = list(dict.fromkeys(r["missing_module"] for r in records if "missing_module" in r))
    notes += [f"it imports {m}, which is not installed here: a recording stand-in answered it"
              for m in absent[:MAX_NOTES]]
    cut = next((r["cut"] for r in records if "cut" in r), 0)
    if cut:
        notes.append(f"it recorded more than {records_mod.ACTIONS_MAX} actions; the "
                     f"{cut} after them are not read (the most `check` reads of one run)")
    quiet_end = end is not None and (end["end"] == "ok" or end["end"] == "exit" and
                                     end.get("code") in (None, 0))
    if found is None and absent and quiet_end and not any(_runs(r["kind"]) for r in calls):
        # it ran nothing: what it would run went through the absent module
        raise InputError(f"{name} imports {absent[0]}, which is not installed here: pip install "
                         f"{PIP_NAMES.get(absent[0], absent[0])} (or put it on PYTHONPATH); a "
                         "recording stand-in answered it, and the launcher launched no "
                         f"training; {checkout.hint(absent[0])}")
    try:
        return _launches(path, found, launches, others, calls, records, notes, err, status,
                         child_env, timeout_s, memory_mb, seconds, every, end)
    except InputError as e:
        if not absent:
            raise
        raise type(e)(f"{e} (it also imports {', '.join(absent[:MAX_NOTES])}, not installed "
                      "here and answered by recording stand-ins)") from None


def _mark_ran(records: list[dict]) -> None:
    """Each action that runs a program carries the lines of the user's code run before it
    (`_ran`, for locate.py)."""
    ran: dict[str, set[int]] = {}
    for r in records:
        if r.get("ran"):
            ran.setdefault(r["ran"][0], set()).update(r["lines"])
        elif "kind" in r and _runs(r["kind"]):
            r["_ran"] = {f: set(lines) for f, lines in ran.items()}


def _split(calls: list[dict], child_env: dict, every: bool) -> tuple:
    """(the first training launch and its record or None, the other actions, each launch
    with its record and the actions recorded since the one before)."""
    found, others, launches, since = None, [], [], []
    for r in calls:
        env = r.get("env")
        if env is None:
            env = {k: v for k, v in {**child_env, **(r.get("env_changes") or {})}.items()
                   if v is not None}
        got = launch_of({**r, "env": env}) if _runs(r["kind"]) else None
        if got is not None:
            launches.append((got, r, since))
            since = []
        if got is not None and found is None:
            found = (got, r)
        elif got is None or not every:
            others.append(Recorded(r["kind"], shown(r), _where(r.get("source"))))
            since.append(r)
    if launches:  # what follows the last launch is reported with it
        launches[-1][2].extend(since)
    return found, others, launches


MAX_NOTES = 32  # distinct notes of one kind (assumed values, absent modules) per launcher
# Characters of one free-form text a launcher recorded that every launch of it carries
# (assumed values, servers): the report stays linear in what was sent, not launches x text
NOTE_MAX = 300


def brief(text: str) -> str:
    return text if len(text) <= NOTE_MAX else f"{text[:NOTE_MAX]}... ({len(text)} characters)"


def _launches(path, found, launches, others, calls, records, notes, err, status, child_env,
              timeout_s, memory_mb, seconds, every, end) -> list[PythonLaunch]:
    _outcome(path, found, calls, notes, err, status, child_env, timeout_s, memory_mb, end)
    if found is None:
        ran = f"ran {len(calls)} command(s)" if calls else "ran no command"
        raise NoTrainingLaunch(f"{path}: no training launch: the launcher {ran}, none of them "
                         "starts train.py or train_async.py (python3, torchrun, or ray job "
                         "submit ... -- python3 train.py)")
    if len(launches) > 1 and not every:
        notes.append("it launches training more than once; the first launch is the one read")
    chosen = launches if every else launches[:1]
    if len(chosen) > MAX_LAUNCHES:
        chosen = chosen[:MAX_LAUNCHES]
        chosen[-1][2].append({"kind": "capped"})  # the others of the rest are not reported
        notes.append(_capped(len(launches)))
    unknowns = {r["unknown"]: {"what": r["what"], "source": _where(r.get("source"))}
                for r in records if "unknown" in r}
    assumed = list(dict.fromkeys(brief(f"{r['assumed']} taken as {r['as']}")
                                 for r in records if "assumed" in r))[:MAX_NOTES]
    servers = _servers(records)
    out = []
    for i, (launch, rec, since) in enumerate(chosen):
        env = {k: v for k, v in launch.env.items() if launch.launcher == "ray job submit"
               or child_env.get(k) != v}
        # each launch carries what was recorded since the one before it (all of it, for
        # the one launch read): the report stays linear in the launches
        mine = others if not every else [
            Recorded(r["kind"], shown(r), _where(r.get("source"))) for r in since
            if r["kind"] != "capped"]
        probes = [_probe(r) for r in (calls if not every else since)
                  if r.get("captured") or r.get("answer") == "cluster"]
        marks = {n: unknowns[n] for n in _marks(launch.argv) if n in unknowns}
        out.append(PythonLaunch(path, launch.argv, launch.entry, launch.launcher,
                                _where(rec.get("source")), env, mine, list(notes), seconds,
                                launch.env_known, None, i, marks, assumed, probes,
                                servers, locate(launch.argv, rec.get("_ran") or {}, path),
                                launch.world, _files(rec.get("files") or {}, rec.get("files_base"),
                                                           launch.argv)))
    return out


def _files(files: dict, base: str | None, argv) -> dict:
    """The YAML files a launch carries, each with its text or why it was not read; by path,
    and by each relative name of `argv` (`--yaml-cfg cfg.yaml`) that is one of them from
    `base`, the folder the child found them from (records.py keeps it in the work folder)."""
    out = {k: {"why": records_mod.UNREAD[x["why"]]} if "why" in x else x
           for k, x in files.items()}
    for w in argv if base else ():
        for name in (w, w.partition("=")[2]) if isinstance(w, str) else ():
            full = os.path.normpath(os.path.join(base, name)) if name else None
            if full in files and not os.path.isabs(name):
                out[name] = {**out[full], "as": full}  # the file it names (sources.written_name)
    return out


def _outcome(path, found, calls, notes, err, status, child_env, timeout_s, memory_mb, end
             ) -> None:
    """How the launcher's run ended: an InputError when it ended before a training launch
    was recorded, else a note saying how it ended after (in `notes`)."""
    if status in ("timeout", -signal.SIGXCPU):  # the wall clock, or RLIMIT_CPU
        if found is None:
            raise InputError(f"{path}: the launcher did not finish within {timeout_s:g} s and "
                             "recorded no training launch (an endless loop, or waiting for "
                             "something the sandbox never starts; the time of one input is "
                             "bounded by --timeout)")
        notes.append(f"the launcher was stopped after {timeout_s:g} s, after its training "
                     "launch was recorded")
    elif end is None:
        why = f"killed by signal {-status}" if isinstance(status, int) and status < 0 else \
            f"exited with status {status}"
        if found is None:
            raise InputError(f"{path}: the launcher was {why} before it launched training "
                             f"(memory limit {memory_mb} MiB, CPU limit {timeout_s:g} s)"
                             + _tail(err))
        notes.append(f"the launcher was {why} after its training launch was recorded")
    else:
        _ended(path, found, calls, notes, err, child_env, memory_mb, end)


def _ended(path, found, calls, notes, err, child_env, memory_mb, end: dict) -> None:
    """The child's own end record (`end`): refused, out of threads or memory, a module
    missing, an error, a wait, an exit."""
    if end["end"] == "refused":
        raise InputError(f"{path}: {refusal(end)}")
    elif end["end"] == "threads":
        raise InputError(f"{path}: {_THREADS}")
    elif end["end"] == "memory":
        if found is None:
            raise InputError(f"{path}: the launcher ran out of memory (limit {memory_mb} MiB) "
                             "before it launched training")
        notes.append(f"the launcher ran out of memory (limit {memory_mb} MiB) afterwards")
    elif end["end"] == "missing":
        pkg = (end.get("module") or "?").split(".")[0]
        raise InputError(f"{os.path.basename(path)} imports {pkg}, which is not installed "
                         f"here: pip install {PIP_NAMES.get(pkg, pkg)} (or put it on PYTHONPATH); "
                         + checkout.hint(pkg))
    elif end["end"] == "error":
        if found is None and end.get("sizes"):
            raise InputError(f"{path}: the launcher's check of the cluster it expects failed "
                             f"before it launched training: {_at(end)}; {_sizes(end['sizes'])}")
        if found is None:
            raise InputError(f"{path}: the launcher failed before it launched training: "
                             f"{_at(end)}{_limit(end)}{_hint(calls)}"
                             f"{_unset(end.get('error') or '', child_env, _at(end))}")
        notes.append(f"the launcher failed after its training launch: {_at(end)}")
    elif end["end"] == "waiting":
        if found is None:
            raise InputError(f"{path}: {_waiting(end)}")
        notes.append(f"the launcher was stopped after its training launch: {_waiting(end)}")
    elif end["end"] == "exit" and isinstance(end.get("code"), str) and found is None:
        raise InputError(f"{path}: the launcher stopped before it launched training: "
                         f"{_said(end['code'], child_env)}")
    elif end["end"] == "exit" and end.get("code") not in (None, 0):
        if found is None:
            gone = checkout.missing_in(err)  # typer prints the ImportError in a box, then exits
            raise InputError(f"{path}: the launcher exited with status {end['code']} before "
                             f"it launched training{_tail(err)}"
                             + (f"; {checkout.hint(gone)}" if gone else ""))
        notes.append(f"the launcher exited with status {end['code']} after its training "
                     "launch was recorded")


def _probe(r: dict) -> dict:
    return {"command": _probe_text(r), "answer": r.get("answer"), "node": r.get("node"),
            "source": _where(r.get("source"))}


def _marks(argv: list[str]) -> list[int]:
    """The stand-in Unknowns a launch's words hold (standins.unknowns_in)."""
    from .standins import unknowns_in

    return [n for w in argv for n in unknowns_in(w)]


def _servers(records: list[dict]) -> list[dict]:
    """The modelled servers of a run, each with how often the launcher connected to it."""
    out = {(r["node"], r["port"]): {**{k: brief(v) if isinstance(v, str) else v
                                       for k, v in r.items()}, "polls": 0}
           for r in records if "server" in r and "kind" not in r}
    for r in records:
        if r.get("answer") == "server" and (r.get("node"), r.get("port")) in out:
            out[r["node"], r["port"]]["polls"] += 1
    return list(out.values())[:MAX_NOTES]  # each launch's report lists them


def _waiting(end: dict) -> str:
    """Why a launcher that polled the same thing again and again was stopped (servers.py)."""
    kind, what = (end.get("poll") or ["?", "?"])[:2]
    if kind == "connect":
        return (f"the launcher waits for a server at {what[0] if what else '?'}, which none of "
                f"its recorded commands serves (it connected {end.get('times')} times, "
                "refused each time; a server is modelled on the port its command is started "
                "with: --port, --rpc-port, a listen address, its own default, or for a command "
                "sent to the background the port polled next)")
    said = " ".join((end.get("answer") or "").split())[:80] or "nothing"
    nodes, gpus = (end.get("cluster") or ["?", "?"])[:2]
    return (f"the launcher waits for the cluster to change: it ran `{what[:160]}` "
            f"{end.get('times')} times, sleeping between, and the modelled cluster ({nodes} "
            f"node(s) x {gpus} GPUs) answered `{said}` each time; if it waits for more nodes "
            "or GPUs, model the cluster it expects with --nodes N --gpus-per-node N (and "
            "--gpu NAME)")


def _sizes(sizes: list[dict]) -> str:
    """Which of the launcher's options size the cluster it asserts, and how to pass them."""
    given = ", ".join(f"{s['flag']} ({s['value']!r})" for s in sizes)
    example = " ".join(f"{s['flag']} N" for s in sizes)
    return (f"it reads its options {given}: pass the ones the launch needs after `--` (e.g. "
            f"`-- {example}`), with --nodes/--gpus-per-node to model the same cluster")


def _said(message: str, child_env: dict) -> str:
    """A launcher's exit message, its first line, with the sandbox's HOME shown as ``~`` (a
    file it looked for there is not the user's), and the variables to give (`_unset`)."""
    home = child_env.get("HOME")
    first = next((x.strip() for x in message.splitlines() if x.strip()), message)
    if home:
        first = first.replace(home, "~")
    return f"{first}{_unset(message, child_env)}"


def _unset(message: str, child_env: dict, at: str = "") -> str:
    """The environment variables a launcher's message names that are not set, to give with
    --env (its API key: DAYTONA_API_KEY; any name, whatever its case, whose os.environ[NAME]
    raised the KeyError `at` that place: http_proxy)."""
    names = re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", message)
    if re.search(r"<frozen os>|[/\\]os\.py", at):
        names = re.findall(r"KeyError: '([A-Za-z_][A-Za-z0-9_]*)'", message) + names
    names = [n for n in dict.fromkeys(names) if n not in child_env]
    return f" (give {', '.join(f'--env {n}=...' for n in names)})" if names else ""


def _probe_text(r: dict) -> str:
    """A probe as its shell text (``bash -c TEXT`` is TEXT)."""
    argv = r.get("argv") or []
    if r.get("shell") is None and len(argv) == 3 and argv[1] in ("-c", "-lc"):
        return argv[2]
    return shown(r)


def _runs(kind: str) -> bool:
    """Whether a recorded call starts a program (the others touch files or the network)."""
    return kind in ("subprocess", "os.system") or kind.startswith(
        ("os.exec", "os.spawn", "os.posix_spawn"))


def _at(end: dict) -> str:
    where, inner = end.get("where"), end.get("inner")
    at = f"{where[0]}:{where[1]}: " if where else ""
    if inner:
        at += f"(in {inner[2]}, {inner[0]}:{inner[1]}: `{inner[3]}`) "
    return f"{at}{end.get('error')}"


# what the sandbox's bounds look like from inside, as the launcher saw them fail
_LIMITS = {"[Errno 27]": "the sandbox bounds each file it writes, its output included, to "
                          "16 MiB",
           "[Errno 28]": "the sandbox's work folder holds 256 MiB",
           "[Errno 1]": "the sandbox refuses that: docs/sandbox.md",
           "[Errno 32]": "the sandbox bounds its output, stdout and stderr each, to 16 MiB",
           "[Errno 13]": "the sandbox reads only the launcher's checkout, its import path and "
                         "each --read PATH (a model folder): docs/sandbox.md",
           "can't start new thread": "the sandbox bounds memory, thread stacks included, and "
                                     "threads"}


def _limit(end: dict) -> str:
    """Name the sandbox's bound behind a failure, where it is one."""
    why = next((v for k, v in _LIMITS.items() if k in (end.get("error") or "")), None)
    return f" ({why})" if why else ""


def _hint(calls: list[dict]) -> str:
    """When a launcher fails on a command's output, say that the sandbox gave it none."""
    if not calls or not calls[-1].get("captured") or calls[-1].get("answer"):
        return ""  # [launchers hook] an answered probe's output was not empty
    last = calls[-1]
    return (f" (the sandbox runs no command: the last one, `{shown(last)[:120]}`, was "
            "answered with exit 0 and empty output; where the launcher can take that value "
            "from the environment, give it with --env KEY=VALUE)")


_BOX = "│╭╮╰╯─┃┏┓┗┛━ |"  # rich's (typer's) frames around an error: no text of their own


def _reason(out: str) -> str:
    """The line of a launcher's stdout that says why it stopped (see _read)."""
    lines = [x for x in out.splitlines() if x.strip()]
    said = [x for x in lines if re.search(r"\b(error|usage)\b", x, re.I)]
    return (said or lines or [""])[-1]


def _tail(err: str) -> str:
    lines = [x.strip(_BOX).strip() for x in err.splitlines()]
    lines = [x for x in lines if any(c.isalnum() for c in x)]
    return f": {lines[-1]}" if lines else ""
