"""Run a program in the launcher sandbox from this side: the child (``child.py``) started in
a fresh temporary folder (or the spare one, spare.py) with its config, what it may read
(`read_paths`), and its pipes drained with bounds until it ends or its time is up; the
records it wrote come back parsed (records.py). What they say is outcome.py's."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import spare as spare_mod
from . import checkout
from . import records as records_mod
from .child import REFUSED, status_of

CHILD = Path(__file__).with_name("child.py")
DENY_VAR = "MILES_TOPOLOGY_SANDBOX_DENY"  # for tests: a facility to treat as missing


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


STDOUT_MAX = 1 << 20
STDERR_TAIL = 4096


@dataclass
class Ran:
    records: list
    err: str  # the tail of stderr
    status: int | str  # the child's exit status, or "timeout"
    stdout: str
    sandbox: dict  # HOME, TMPDIR, PWD... as the child had them
    end: dict | None = None  # how it ended, where its status agrees (`_end`)


def execute(mode: str, target: str, args, env: dict, cwd: str | None, timeout_s: float,
             memory_mb: int, trust: bool, extra: dict | None = None,
             reads: Sequence[str] = (), confine: Sequence = (),
             meanwhile: Callable[[], object] | None = None) -> Ran:
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
    return Ran(records, err, status, out, sandbox, _end(records, status, verdict))


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
