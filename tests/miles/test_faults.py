"""The main job under faults, end to end: `python -m miles.train` on its local Ray cluster,
interrupted (SIGINT to its process group, as Ctrl-C sends it) in each phase, or with one of
its processes killed (a rank, an engine, a host actor) during a step.

Each case asserts the exit code, the one line the launcher ends with, and that no process
of the job is left: every process of the job carries a tag in its environment (inherited
from the launcher), so the process table is compared before, during and after; the
processes seen during the run (by pid and start time) must all be gone the moment the
launcher exits, and so must Ray's session folders (the job's TMPDIR is a fresh folder).
Phases are hit by the launcher's test markers (MILES_TEST_MARKERS=1), not by sleeps.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from support import ROOT

LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="reads the process table from /proc")
START_S = 300  # a start-up on a loaded 2-core machine can take a minute
EXIT_S = 30  # the launcher must be gone this long after the signal (a few seconds seen)


def _stat(pid: int) -> tuple[int, str, str, int] | None:
    """(ppid, name, state, start time) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, _, rest = f.read().rpartition(")")
    except OSError:
        return None
    fields = rest.split()
    return int(fields[1]), head.partition("(")[2], fields[0], int(fields[19])


def table() -> dict[int, tuple[int, str, str, int]]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (s := _stat(int(d))):
            out[int(d)] = s
    return out


def tagged(tag: str) -> set[tuple[int, int]]:
    """(pid, start time) of the live processes whose environment carries `tag`."""
    found = set()
    for pid, (_, _, state, start) in table().items():
        if state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read():
                    found.add((pid, start))
        except OSError:
            pass
    return found


def alive(procs) -> list[tuple[int, int]]:
    """Those of (pid, start time) still running (same start time: not a reused pid)."""
    out = []
    for pid, start in procs:
        s = _stat(pid)
        if s and s[3] == start and s[2] != "Z":
            out.append((pid, start))
    return out


class Job:
    """The launcher in its own session (so SIGINT to its group is Ctrl-C), its output read
    as it comes, its processes found by descent and by the environment tag."""

    def __init__(self, *flags: str):
        self.base = tempfile.mkdtemp(prefix="mf-", dir="/tmp")  # short: Ray's socket paths
        self.tag = f"MILES_FAULT_TEST={uuid.uuid4().hex}"
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", MILES_TEST_MARKERS="1",
                   TMPDIR=self.base, PYTHONPATH=str(ROOT), MILES_FAULT_TEST=self.tag[17:])
        for k in ("RAY_ADDRESS", "RAY_TMPDIR"):
            env.pop(k, None)
        assert not tagged(self.tag)  # before: nothing of this job exists
        self.p = subprocess.Popen(
            [sys.executable, "-m", "miles.train", "--steps", "40", *flags], cwd=self.base,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.cond = threading.Condition()
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, sink), daemon=True).start()

    def _read(self, stream, sink) -> None:
        for line in stream:
            with self.cond:
                sink.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, marker: str, timeout: float = START_S) -> int:
        """Block until stderr has `miles-test: <marker>`; the stderr line count then."""
        line = f"miles-test: {marker}"
        with self.cond:
            ok = self.cond.wait_for(lambda: line in self.err or self.p.poll() is not None,
                                    timeout)
            assert ok and line in self.err, f"no {line!r}:\n" + "\n".join(self.err[-30:])
            return len(self.err)

    def tree(self) -> dict[int, tuple[int, str, str, int]]:
        """The launcher's live descendants: pid -> (ppid, name, state, start time)."""
        t = table()
        kids: dict[int, list[int]] = {}
        for pid, s in t.items():
            kids.setdefault(s[0], []).append(pid)
        out, todo = {}, [self.p.pid]
        while todo:
            for k in kids.get(todo.pop(), ()):
                if t[k][2] != "Z":
                    out[k] = t[k]
                todo.append(k)
        return out

    def named(self, name: str) -> int:
        """The pid of the role process named `name` (a forked process takes its role's name)."""
        pids = [pid for pid, s in self.tree().items() if s[1] == name]
        assert len(pids) == 1, (name, pids)
        return pids[0]

    def snapshot(self) -> set[tuple[int, int]]:
        """Every process of the job now (by descent and by tag): they must all go."""
        seen = {(pid, s[3]) for pid, s in self.tree().items()} | tagged(self.tag)
        assert alive(seen)
        return seen

    def end(self, timeout: float = EXIT_S) -> float:
        t0 = time.monotonic()
        self.p.wait(timeout)
        return time.monotonic() - t0

    def close(self) -> None:
        if self.p.poll() is None:  # a failed test: stop what it started
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(30)
        for pid, _ in alive(tagged(self.tag)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def job():
    made = []

    def start(*flags):
        made.append(Job(*flags))
        return made[-1]

    yield start
    for j in made:
        j.close()


def _gone(j: Job, seen, at: int, line: str, code: int, took: float) -> None:
    """The launcher exited with `code`, its stderr after line `at` is `line` alone (beside
    test markers), nothing it ran is left, and its temporary folder is gone."""
    err = [x for x in j.err[at:] if not x.startswith("miles-test: ")]
    assert j.p.returncode == code, "\n".join(j.err[-30:])
    assert err == [line], "\n".join(j.err[at:])
    noise = [x for x in j.out + j.err if "Traceback" in x or "(raylet)" in x or "Error" in x]
    assert not noise, noise
    assert not alive(seen), f"left running {took:.1f}s after the signal: {alive(seen)}"
    assert not tagged(j.tag)
    assert os.listdir(j.base) == [], os.listdir(j.base)  # Ray's session folders too
    print(f"exit {code} {took:.1f}s after the signal; {len(seen)} processes of the job "
          "before it, 0 after")


def _ray_folders(j: Job) -> None:
    assert glob.glob(f"{j.base}/miles-*/ray/session_*/sockets"), os.listdir(j.base)


@pytest.mark.slow
def test_interrupt_during_cluster_start_up(job):
    j = job()
    at = j.wait_for("cluster start-up: nodes up")
    seen = j.snapshot()
    assert {"raylet", "gcs_server"} <= {s[1] for s in j.tree().values()}
    _ray_folders(j)
    os.killpg(j.p.pid, signal.SIGINT)
    took = j.end()
    _gone(j, seen, at, "miles: interrupted during cluster start-up", 130, took)


@pytest.mark.slow
def test_interrupt_during_worker_start_up(job):
    j = job()
    at = j.wait_for("worker start-up")
    deadline = time.monotonic() + START_S  # a zygote importing torch: the phase's bulk
    while not any("forkserver" in _cmdline(pid) for pid in j.tree()):
        assert time.monotonic() < deadline and j.p.poll() is None
        time.sleep(0.1)
    seen = j.snapshot()
    os.killpg(j.p.pid, signal.SIGINT)
    took = j.end()
    _gone(j, seen, at, "miles: interrupted during worker start-up", 130, took)


@pytest.mark.slow
def test_interrupt_during_a_step(job):
    j = job()
    at = j.wait_for("step 2")
    seen = j.snapshot()
    os.killpg(j.p.pid, signal.SIGINT)
    took = j.end()
    _gone(j, seen, at, "miles: interrupted during step 2", 130, took)


@pytest.mark.slow
@pytest.mark.parametrize("name, role", [("rank5", "rank 5"), ("engine2", "engine 2"),
                                        ("host", "the host of node 1")])
def test_a_dead_process_names_itself_and_stops_the_job(job, name, role):
    j = job()
    j.wait_for("step 1")
    target = j.named(name if name != "host" else "rank4")
    if name == "host":  # rank 4 (node 1) <- its zygote <- its host actor
        target = _stat(_stat(target)[0])[0]
        assert _cmdline(target).startswith("ray::Host"), _cmdline(target)
    at = j.wait_for("step 2")
    seen = j.snapshot()
    os.kill(target, signal.SIGKILL)
    took = j.end()
    _gone(j, seen, at, f"miles: {role} died (killed by SIGKILL) during step 2; the job "
          "stopped", 4, took)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ---- the pieces, fast (no Ray) ------------------------------------------------------------


def test_exit_codes_read_as_signal_or_status():
    from miles.backend.exits import Died, how

    assert how(-9) == "killed by SIGKILL" and how(-15) == "killed by SIGTERM"
    assert how(0) == "exit status 0" and how(1) == "exit status 1"
    assert how(None) == "exit status unknown"
    assert str(Died("rank 5", -9)) == "rank 5 died (killed by SIGKILL)"
    assert str(Died("the host of node 1", 1, ("rank 4",))) == \
        "the host of node 1 died (exit status 1) (also gone: rank 4)"


def test_a_watch_reads_how_a_process_that_is_not_our_child_ended():
    """A host actor's parent is its raylet; the launcher still learns its exit status."""
    from miles.backend.exits import Watch

    for cmd, want in (("sleep 30", -9), ("sleep 0.3; exit 3", 3)):
        sh = subprocess.Popen(["sh", "-c", f"sh -c '{cmd}' & echo $!; wait"],
                              stdout=subprocess.PIPE, text=True)
        pid = int(sh.stdout.readline())  # a grandchild: waited for by `sh`, not by us
        w = Watch(pid)
        assert w.code() is None  # running
        if want == -9:
            os.kill(pid, signal.SIGKILL)
        sh.wait(10)
        deadline = time.monotonic() + 5
        while (code := w.code()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        w.close()
        if code is None and _kernel() < (6, 15):
            pytest.skip("this kernel has no PIDFD_INFO_EXIT")
        assert code == want


def _kernel() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@pytest.mark.slow
def test_the_sweep_catches_an_orphan_and_removes_the_temp_folder(tmp_path):
    """An orphan (its parent gone, as Ray's agents after a raylet stopped early) is
    re-parented to the launcher, so the sweep still finds and kills it."""
    script = (
        "import os, subprocess, sys\n"
        "from miles.ray.reap import Scope\n"
        "s = Scope(own_tmp=True)\n"
        "print(os.environ['RAY_TMPDIR'], os.environ['TMPDIR'], flush=True)\n"
        "pid = subprocess.run(['sh', '-c', 'sleep 60 >/dev/null 2>&1 & echo $!'],\n"
        "                     capture_output=True, text=True).stdout.strip()\n"
        "print(pid, flush=True)\n"
        "while open(f'/proc/{pid}/comm').read() != 'sleep\\n':  # exec'd\n"
        "    pass\n"
        "print(s.close(), flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                               TMPDIR=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    dirs, orphan, killed = done.stdout.splitlines()
    ray_tmp, tmp = dirs.split()
    assert ray_tmp == tmp and Path(tmp).parent == tmp_path
    assert "sleep" in killed
    assert _stat(int(orphan)) is None
    assert list(tmp_path.iterdir()) == []


def test_phase_markers_only_when_asked(capsys, monkeypatch):
    from miles.startup import Phases

    monkeypatch.delenv("MILES_TEST_MARKERS", raising=False)
    p = Phases()
    p("cluster")
    assert p.current == "worker start-up"
    assert "miles-test" not in capsys.readouterr().err
    monkeypatch.setenv("MILES_TEST_MARKERS", "1")
    p("workers")
    p.enter("step 1")
    err = capsys.readouterr().err.splitlines()
    assert [x for x in err if x.startswith("miles-test")] == \
        ["miles-test: role start-up", "miles-test: step 1"]


@pytest.mark.slow
def test_a_main_thread_stuck_after_ctrl_c_is_ended_by_the_watch(tmp_path):
    """Ray's C++ core can hold the main thread for seconds after the signal; the launcher
    still ends within its grace: swept, folder removed, the line, the exit code."""
    script = (
        "import os, signal, subprocess, sys, time\n"
        "from miles.ray.reap import Scope\n"
        "s = Scope(own_tmp=True)\n"
        "s.watch(lambda n: (130, 'miles: interrupted during a test') if n == 2 else None)\n"
        "subprocess.Popen(['sh', '-c', 'trap \"\" INT; exec sleep 60'],  # Ctrl-C-proof\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "    time.sleep(60)  # stuck in the clean-up\n"
    )
    from miles.ray.reap import GRACE_S

    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path)))
    try:
        assert p.stdout.readline() == "ready\n"
        kids = [pid for pid, s in table().items() if s[0] == p.pid]
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and err == "miles: interrupted during a test\n", err
    assert GRACE_S <= took < GRACE_S + 3, took
    assert kids and all(_stat(k) is None for k in kids)
    assert list(tmp_path.iterdir()) == []
