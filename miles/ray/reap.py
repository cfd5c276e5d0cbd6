"""Leave nothing behind: every process the launcher started, and Ray's session folders.

Ray's own shutdown misses processes when it is interrupted half way: a raylet stopped while
its agents start leaves the dashboard and runtime-env agents orphaned to init, and a killed
host actor leaves its multiprocessing folder. So the launcher (`Scope`):

- becomes a child sub-reaper (Linux `PR_SET_CHILD_SUBREAPER`): an orphaned descendant is
  re-parented to it instead of init, so every process of the job stays its descendant;
- gives the job its own temporary folder (RAY_TMPDIR and TMPDIR point into it, so Ray's
  session folders, `ray_current_cluster` and multiprocessing's folders land there);
- on exit, after Ray's own shutdown, kills every descendant it did not have at the start,
  reaps them, and removes the folder;
- after SIGINT or SIGTERM, gives the main thread `GRACE_S` to unwind: Python handles a
  signal only between bytecodes, and a blocking call into Ray's C++ core (a node
  registering, a GCS lookup) can hold the main thread for seconds. Past that, a thread woken
  by the signal (`signal.set_wakeup_fd`) sweeps, prints the line and exits itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 3.0


def children_of() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (Linux)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            kids.setdefault(ppid, []).append(int(d))
    return kids


def descendants(root: int) -> list[int]:
    kids, out, todo = children_of(), [], [root]
    while todo:
        for k in kids.get(todo.pop(), ()):
            out.append(k)
            todo.append(k)
    return out


def _name(pid: int) -> str:
    """The process's name, '' for a zombie (already dead) or a process gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, _, rest = f.read().rpartition(")")
        return "" if rest.split()[0] == "Z" else head.partition("(")[2]
    except OSError:
        return ""


class Scope:
    """The launcher's hold on its job's processes and temporary folder (see the module)."""

    def __init__(self, own_tmp: bool):
        self.linux = sys.platform.startswith("linux")
        self.kept = set(descendants(os.getpid())) if self.linux else set()
        if self.linux:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.tmp = None
        if own_tmp:  # a local cluster: Ray's temp root (default /tmp/ray) becomes ours
            base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
            self.tmp = tempfile.mkdtemp(prefix="miles-", dir=base)
            os.environ["RAY_TMPDIR"] = os.environ["TMPDIR"] = self.tmp
        self._ending = threading.Lock()
        self._finished = threading.Event()

    def watch(self, ending: Callable[[int], tuple[int, str] | None],
              grace_s: float = GRACE_S) -> None:
        """After a signal with a Python handler, wait `grace_s` for `finish`; past that, end
        the job from a thread: `ending(signum)` gives (exit code, line), or None to
        ignore that signal. Call from the main thread."""
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(r, ending, grace_s), daemon=True,
                         name="miles-reap").start()

    def _watch(self, fd: int, ending, grace_s: float) -> None:
        while True:
            got = ending(os.read(fd, 1)[0])
            if got is not None:
                break
        if self._finished.wait(grace_s):
            return
        with self._ending:
            if self._finished.is_set():
                return
            self._finished.set()
            self.close()
            code, line = got
            print(line, file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(code)

    def finish(self, line: str) -> None:
        """The main thread's last word (once its clean-up is done)."""
        with self._ending:
            self._finished.set()
            if line:
                print(line, file=sys.stderr, flush=True)

    def sweep(self, wait_s: float = 5.0) -> list[str]:
        """SIGKILL every descendant started since the Scope began, until none is left (new
        ones may still be forked meanwhile); reap those re-parented here. Returns the
        names of the live ones it killed."""
        if not self.linux:
            return []
        killed: dict[int, str] = {}
        deadline = time.monotonic() + wait_s
        while True:
            left = [p for p in descendants(os.getpid()) if p not in self.kept]
            for pid in left:
                name = _name(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                    if name:
                        killed.setdefault(pid, name)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(pid, os.WNOHANG)  # ours when re-parented here
                except ChildProcessError:
                    pass
            if not left or time.monotonic() > deadline:
                return list(killed.values())
            time.sleep(0.02)

    def close(self) -> list[str]:
        """Sweep, then remove the job's temporary folder; the processes that were left."""
        n = self.sweep()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        return n
