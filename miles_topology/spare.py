"""A sandbox child started before the checker has read its options (issue 36).

`check LAUNCHER.py` spends ~0.15 s importing itself and reading its options before it runs
the launcher, and the child's own start (the interpreter, its imports) is ~0.05 s more, one
after the other. `start`, called by the command before anything else, starts the child at
once (``child.py CONFIG --wait FD``): it imports what it needs and waits on FD for its
configuration. The first run whose child would start exactly as this one did (the same
locale: what Python and the C library read at start-up) takes it (`take`); any other run
starts its own. One not taken is ended by `discard` (or sees FD close when the checker ends, and
exits). This module imports nothing of the checker: the command starts the child first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylaunch", "child.py")
# -E: no PYTHON* variables (PYTHONPATH is added by the child itself); -B: no .pyc; -S: no
# site-packages (nor their .pth files) until the child is isolated
FLAGS = ("-E", "-B", "-S")

# The checker's environment a launcher gets: what Python and the C library read (locale,
# PATH, Python's own variables), and the variables miles launchers read for their layout
# (scripts/run_*.py, tests/ci: MASTER_ADDR, SLURM_JOB_NUM_NODES, MILES_SCRIPT_*,
# MODEL_ARGS_*; command_utils.py: NCCL_NVLS_ENABLE). Nothing else: a CI runner's environment
# holds its secrets (GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY). HOME is only read to find the
# user's site-packages; the launcher gets a fresh one.
ENV_NAMES = frozenset((
    "PATH", "LANG", "LANGUAGE", "TZ", "HOME", "USER", "LOGNAME", "PYTHONPATH",
    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS", "VIRTUAL_ENV",
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "NNODES",
    "NPROC", "NPROC_PER_NODE", "GPUS_PER_NODE", "NUM_GPUS", "NUM_IB_HCAS", "RAY_ADDRESS",
    "MLP_WORKER_0_HOST", "MLP_SOCKET_IFNAME"))
ENV_PREFIXES = ("LC_", "MILES_SCRIPT_", "MILES_TEST_", "MODEL_ARGS_", "SLURM_", "NCCL_",
                "NVTE_")
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def launcher_env(env: Mapping[str, str] | None = None, pass_env: Sequence[str] = ()
                 ) -> dict[str, str]:
    """The environment a launcher starts with: the allow-list above of this process's
    (without this machine's device lists, DEVICE_VARS: the modelled cluster's count), each
    `pass_env` name it holds (--pass-env NAME), then `env` (--env KEY=VALUE)."""
    keep = {k: v for k, v in os.environ.items() if k in pass_env or k not in DEVICE_VARS
            and (k in ENV_NAMES or k.startswith(ENV_PREFIXES))}
    return {**keep, **(env or {})}


class Spare:
    """A started child waiting for its configuration in `tmp`/config.json; its record and
    verdict pipes (their numbers in the child: `record_w`, `verdict_w`)."""

    started = False  # go() was called: the run that took it owns its process and pipes

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.tmp = tempfile.mkdtemp(prefix="miles-topology-launcher-")
        self.work = os.path.join(self.tmp, "work")
        os.mkdir(self.work)
        self.record_r, self.record_w = os.pipe()
        self.verdict_r, self.verdict_w = os.pipe()
        go_r, self._go = os.pipe()
        try:
            # its output goes to pipes drained by the checker with a bound, never to an
            # inherited file; its stdin is empty, as the launcher's is
            self.proc = subprocess.Popen(
                [sys.executable, *FLAGS, CHILD, self.config, "--wait", str(go_r)],
                cwd=self.work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(self.record_w, self.verdict_w, go_r),
                start_new_session=True)
        except BaseException:
            for fd in (self.record_r, self.verdict_r, self._go):
                os.close(fd)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        finally:
            for fd in (self.record_w, self.verdict_w, go_r):
                os.close(fd)

    @property
    def config(self) -> str:
        return os.path.join(self.tmp, "config.json")

    def go(self) -> None:
        """Its configuration is written: the child reads it and runs (one that died since
        `take` gets EPIPE here; its end is read as any child's)."""
        try:
            os.write(self._go, b"1")
        except OSError:
            pass
        finally:
            os.close(self._go)
            self._go = -1
            self.started = True

    def discard(self) -> None:
        """End a child not taken (its wait sees the pipe close) and remove its folder."""
        if self._go >= 0:
            os.close(self._go)
            self._go = -1
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()
        for fd in (self.record_r, self.verdict_r):
            os.close(fd)
        shutil.rmtree(self.tmp, ignore_errors=True)


_SPARE: list[Spare] = []
_LOCK = threading.Lock()


def start(argv: Sequence[str]) -> None:
    """Start a spare child when `argv` (the command's words) checks a Python launcher; the
    environment is the one a run without --env / --pass-env gives (`launcher_env`)."""
    if sys.platform != "linux" or not argv or argv[0] != "check" or _SPARE or not any(
            a.endswith(".py") and os.path.isfile(a) for a in argv[1:]):
        return
    try:
        spare = Spare(launcher_env())
    except OSError:  # no room for a process or a folder here: the run starts its own
        return
    with _LOCK:
        _SPARE.append(spare)


# What Python (under -E) and the C library read when the process starts: the locale and
# time zone. Every other name of the allow-list is read when asked for (PYTHONPATH: -E
# ignores it, the child adds it to sys.path), so a run may change it: the child takes the
# run's environment as its own before it reads anything (child.py).
AT_START = ("LANG", "LANGUAGE", "TZ")


def _read_later(name: str) -> bool:
    return (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and name not in AT_START \
        and not name.startswith("LC_")


def take(env: Mapping[str, str]) -> Spare | None:
    """The spare child, for the first run whose environment differs from the one it started
    with only in names read later (`_read_later`: --path's PYTHONPATH, --env MILES_SCRIPT_X);
    with --env LANG=..., --pass-env LD_LIBRARY_PATH and the like the run starts its own."""
    with _LOCK:
        if _SPARE and _SPARE[0].proc.poll() is None and all(
                _read_later(k) for k in {*env, *_SPARE[0].env}
                if env.get(k) != _SPARE[0].env.get(k)):
            return _SPARE.pop()
    return None


def discard() -> None:
    """End the spare child if no run took it."""
    with _LOCK:
        left = list(_SPARE)
        _SPARE.clear()
    for spare in left:
        spare.discard()
