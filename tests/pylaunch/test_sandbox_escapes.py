"""The sandbox tried as an attacker would: one tiny launcher per way out, each asserting its
effect did not happen; the same launcher run with --trust-launcher (the in-process recorders
alone) shows that the test would see the effect. Every attacker first switches off the
in-process audit hook (walking the frames up to its tables), as the issue's attacker did: what
stops it must be the kernel.

A control run really acts (within tmp_path only): it never signals anything but a process the
test started, and never connects anywhere but to a listener the test opened.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from support import UNHOOK

from miles_topology import pylaunch
from miles_topology.model.errors import InputError
from miles_topology.pylaunch import isolate, read_python_launcher, run_program

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")

INTACT = "intact\n"


@pytest.fixture()
def outside(tmp_path):
    """A folder outside the sandbox with a victim file the attacker wants to change."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "victim.txt").write_text(INTACT)
    (out / "victim.txt").chmod(0o640)
    return out


def state(folder: Path) -> dict:
    return {p.name: (p.read_text() if p.is_file() and not p.is_symlink() else "?",
                     p.stat().st_mode & 0o7777, int(p.stat().st_mtime))
            for p in folder.iterdir()}


def attack(tmp_path, code: str, *args, trust=False, files=None, timeout_s=20, readable=True,
           env=None):
    """Run the attacker's launcher (UNHOOK + `code`) in the sandbox, or trusted. `readable`:
    the test's folder is readable (--read), the worst case for the write attacks."""
    folder = tmp_path / f"launcher-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for name, text in (files or {}).items():
        (folder / name).write_text(textwrap.dedent(text))
    path = folder / "run.py"
    path.write_text(UNHOOK + textwrap.dedent(code))
    return run_program([str(path), *map(str, args)], trust=trust, timeout_s=timeout_s,
                       reads=[str(tmp_path)] if readable else (), env=env)


def done(got) -> list[str]:
    return [line for line in got.stdout.splitlines() if line.startswith("DONE")]


def failed(got) -> int:
    """How many attempts the kernel refused (each attack asserts that all were made)."""
    return got.stdout.count("FAILED")


# ---------------------------------------------------------------- writes outside the work folder


DIR_FD = """
fd = posix.open(sys.argv[1], posix.O_RDONLY)
W = posix.O_CREAT | posix.O_WRONLY
attempt("open", lambda: posix.write(posix.open("marker", W, 0o644, dir_fd=fd), b"x"))
attempt("unlink", posix.unlink, "victim.txt", dir_fd=fd)
attempt("rename", posix.rename, "victim.txt", "moved", src_dir_fd=fd, dst_dir_fd=fd)
attempt("symlink", posix.symlink, "/etc/passwd", "sym", dir_fd=fd)
attempt("mkdir", posix.mkdir, "dir", dir_fd=fd)
attempt("mkfifo", posix.mkfifo, "fifo", dir_fd=fd)
"""


def test_dir_fd_writes_leave_nothing(tmp_path, outside):
    before = state(outside)
    got = attack(tmp_path, DIR_FD, outside)
    assert state(outside) == before and done(got) == [] and failed(got) == 6, got


def test_dir_fd_writes_control(tmp_path, outside):
    got = attack(tmp_path, DIR_FD, outside, trust=True)
    assert "marker" in os.listdir(outside) and len(done(got)) >= 4, got


HARDLINK = """
attempt("link", posix.link, sys.argv[1], "hl")
attempt("write", lambda: posix.write(posix.open("hl", posix.O_WRONLY | posix.O_TRUNC), b"x"))
attempt("symlink", posix.symlink, sys.argv[1], "sl")
attempt("write via symlink", lambda: posix.write(posix.open("sl", posix.O_WRONLY), b"owned"))
attempt("truncate", posix.truncate, sys.argv[1], 0)
"""


def test_hardlink_symlink_and_truncate_leave_the_victim_intact(tmp_path, outside):
    before = state(outside)
    got = attack(tmp_path, HARDLINK, outside / "victim.txt")
    assert state(outside) == before, got
    # the links themselves may be made inside; nothing written through them
    assert not {"DONE write", "DONE write via symlink", "DONE truncate"} & set(done(got))
    assert failed(got) >= 4, got


RACE = """
import threading, time
out = sys.argv[1]
posix.mkdir("real")
stop = time.monotonic() + float(sys.argv[2])  # seconds of racing
def swap():  # d is a folder inside, then a link to the folder outside, and back
    while time.monotonic() < stop:
        try:
            posix.symlink(out, "d.tmp"); posix.rename("d.tmp", "d")
            posix.unlink("d"); posix.symlink("real", "d")
            posix.unlink("d")
        except OSError:
            pass
threading.Thread(target=swap).start()
wrote = 0
while time.monotonic() < stop and not os.path.exists(out + "/raced"):
    try:
        posix.close(posix.open("d/raced", posix.O_CREAT | posix.O_WRONLY)); wrote += 1
    except OSError:
        pass
stop = 0
print("wrote", wrote)
"""


def test_symlink_race(tmp_path, outside):
    """A link swapped under the recorders' path check: the kernel resolves at the open."""
    before = state(outside)
    got = attack(tmp_path, RACE, outside, 1.5)
    assert state(outside) == before and got.stdout.startswith("wrote "), got
    attack(tmp_path, RACE, outside, 8, trust=True)  # control: until it wins (a busy machine)
    assert "raced" in os.listdir(outside)


def test_hardlink_control(tmp_path, outside):
    attack(tmp_path, HARDLINK, outside / "victim.txt", trust=True)
    assert (outside / "victim.txt").read_text() != INTACT


METADATA = """
v = sys.argv[1]
attempt("chmod", posix.chmod, v, 0o777)
attempt("utime", posix.utime, v, (0, 0))
attempt("setxattr", posix.setxattr, v, "user.owned", b"1")
attempt("fchmod", lambda: posix.fchmod(posix.open(v, posix.O_RDONLY), 0o777))
"""


def test_modes_times_and_xattrs_of_outside_files_unchanged(tmp_path, outside):
    """Landlock does not cover chmod/utime/xattrs; the seccomp filter does."""
    before = state(outside)
    got = attack(tmp_path, METADATA, outside / "victim.txt")
    assert state(outside) == before and done(got) == [] and failed(got) == 4, got


def test_metadata_control(tmp_path, outside):
    attack(tmp_path, METADATA, outside / "victim.txt", trust=True)
    assert (outside / "victim.txt").stat().st_mode & 0o777 == 0o777


# ---------------------------------------------------------------- the set-up and its imports


SHADOW = """
import os, posix, sys
posix.system("touch " + os.environ["MARKER"])
fd = posix.open(os.environ["MARKER"] + "-open", posix.O_CREAT | posix.O_WRONLY)
"""


@pytest.mark.parametrize("name", ["shutil.py", "runpy.py", "site.py", "isolate.py",
                                  "sitecustomize.py", "json.py"])
def test_stdlib_named_module_beside_the_launcher(tmp_path, name):
    """The set-up imports nothing from the launcher's folder; were it imported later (by the
    launcher itself), it runs isolated."""
    env = {"MARKER": str(tmp_path / "marker")}
    got = attack(tmp_path, f"import {name[:-3]}\n", files={name: SHADOW}, env=env)
    assert not list(tmp_path.glob("marker*")), got


def test_a_module_beside_the_launcher_control(tmp_path):
    env = {"MARKER": str(tmp_path / "marker")}
    got = attack(tmp_path, "import helper\n", files={"helper.py": SHADOW}, env=env)
    assert not list(tmp_path.glob("marker*")), got
    attack(tmp_path, "import helper\n", files={"helper.py": SHADOW}, trust=True, env=env)
    assert (tmp_path / "marker").exists()


# ---------------------------------------------------------------- programs and the network


@pytest.fixture()
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def connected(server) -> bool:
    time.sleep(0.05)
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


SYSTEM_AND_SOCKET = """
import _socket
def check(status):
    if status != 0:
        raise OSError(status, "failed")
attempt("system", lambda: check(posix.system("touch " + sys.argv[1])))
def send():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("127.0.0.1", int(sys.argv[2])))
    s.send(open("/etc/hostname", "rb").read())
attempt("connect", send)
"""


def test_cleared_hook_then_posix_system_and_raw_socket(tmp_path, listener):
    marker = tmp_path / "marker"
    got = attack(tmp_path, SYSTEM_AND_SOCKET, marker, listener.getsockname()[1])
    assert not marker.exists() and not connected(listener) and done(got) == [], got
    assert failed(got) == 2


def test_cleared_hook_control(tmp_path, listener):
    marker = tmp_path / "marker"
    attack(tmp_path, SYSTEM_AND_SOCKET, marker, listener.getsockname()[1], trust=True)
    assert marker.exists() and connected(listener)


FORK_EXEC = """
import glob, importlib.util, subprocess
path = next(f for d in sys.path for f in glob.glob(os.path.join(d or ".", "_posixsubprocess*")))
spec = importlib.util.spec_from_file_location("harmless._posixsubprocess", path)
evil = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evil)
# a fresh copy of subprocess (the one in sys.modules has the recorder as Popen), given it
sub_spec = importlib.util.spec_from_file_location("harmless.subprocess", subprocess.__file__)
sub = importlib.util.module_from_spec(sub_spec)
sub_spec.loader.exec_module(sub)
sub._fork_exec = evil.fork_exec  # 3.11+
sub._posixsubprocess = evil  # 3.10
real = sub.Popen
attempt("fork_exec", lambda: real(["touch", sys.argv[1]]).wait())
"""


def test_posixsubprocess_under_another_name(tmp_path):
    marker = tmp_path / "marker"
    got = attack(tmp_path, FORK_EXEC, marker)
    assert not marker.exists() and done(got) == [] and failed(got) == 1, got


def test_posixsubprocess_control(tmp_path):
    marker = tmp_path / "marker"
    got = attack(tmp_path, FORK_EXEC, marker, trust=True)
    # the recorders' os.waitpid does not wait: the program may finish after the launcher
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), got


CTYPES = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
nr = {nr}
def call(*a):
    if libc.syscall(*a) < 0:
        raise OSError(ctypes.get_errno(), "")
victim = int(sys.argv[1])
attempt("kill", call, nr["kill"], victim, 15)
attempt("tgkill", call, nr["tgkill"], victim, victim, 15)
if sys.argv[3:] == ["control"]:
    raise SystemExit(0)
attempt("rt_sigqueueinfo", call, nr["rt_sigqueueinfo"], victim, 15,
        ctypes.create_string_buffer(128))
argv = (ctypes.c_char_p * 3)(b"/bin/touch", sys.argv[2].encode(), None)
attempt("execve", call, nr["execve"], b"/bin/touch", argv, None)
attempt("clone", call, nr["clone"], 17, 0, 0, 0, 0)  # SIGCHLD: a fork
attempt("ptrace", call, nr["ptrace"], 16, victim, 0, 0)  # PTRACE_ATTACH
attempt("process_vm_writev", call, nr["process_vm_writev"], victim, 0, 0, 0, 0, 0)
attempt("io_uring_setup", call, nr["io_uring_setup"], 8, ctypes.create_string_buffer(120))
attempt("unshare", call, nr["unshare"], 0x10000000)  # a user namespace of its own
attempt("setsid", call, nr["setsid"])  # out of the process group the checker kills
attempt("pdeathsig", call, nr["prctl"], 1, 0)  # not to die with the supervisor
for family in (1, 16, 40):  # AF_UNIX, AF_NETLINK, AF_VSOCK
    attempt(f"socket {{family}}", call, nr["socket"], family, 1, 0)
"""


@pytest.fixture()
def victim():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_system_calls_through_ctypes(tmp_path, victim):
    nr = isolate._NR[os.uname().machine]
    marker = tmp_path / "marker"
    got = attack(tmp_path, CTYPES.format(nr=nr), victim.pid, marker)
    time.sleep(0.1)
    assert victim.poll() is None and not marker.exists() and done(got) == [], got
    assert failed(got) == 14


def test_system_calls_through_ctypes_control(tmp_path, victim):
    nr = isolate._NR[os.uname().machine]
    attack(tmp_path, CTYPES.format(nr=nr), victim.pid, tmp_path / "marker", "control",
           trust=True)
    assert victim.wait(5) == -signal.SIGTERM


PIDFD = """
import signal
pid = int(sys.argv[1])
attempt("pidfd_open", lambda: signal.pidfd_send_signal(os.pidfd_open(pid), 15))
attempt("/proc/PID", lambda: signal.pidfd_send_signal(posix.open(f"/proc/{pid}", 0), 15))
attempt("posix.kill", posix.kill, pid, 15)
"""


def test_pidfd_send_signal_to_a_process_the_test_started(tmp_path, victim):
    got = attack(tmp_path, PIDFD, victim.pid)
    time.sleep(0.1)
    assert victim.poll() is None and done(got) == [] and failed(got) == 3, got


def test_pidfd_control(tmp_path, victim):
    attack(tmp_path, PIDFD, victim.pid, trust=True)
    assert victim.wait(5) == -signal.SIGTERM


PROC = """
pid, fd, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for via in (f"/proc/{pid}/fd/{fd}", f"/proc/{pid}/root{path}", f"/proc/{pid}/cwd/victim.txt"):
    attempt(via, lambda: posix.write(posix.open(via, posix.O_WRONLY | posix.O_TRUNC), b"owned"))
attempt("mem", lambda: posix.open(f"/proc/{pid}/mem", posix.O_RDWR))
"""


def test_writes_through_another_process_in_proc(tmp_path, outside, monkeypatch):
    monkeypatch.chdir(outside)
    before = state(outside)
    with open(outside / "victim.txt") as held:
        got = attack(tmp_path, PROC, os.getpid(), held.fileno(), outside / "victim.txt")
    assert state(outside) == before and done(got) == [] and failed(got) == 4, got


def test_proc_control(tmp_path, outside, monkeypatch):
    monkeypatch.chdir(outside)
    with open(outside / "victim.txt") as held:
        attack(tmp_path, PROC, os.getpid(), held.fileno(), outside / "victim.txt", trust=True)
    assert (outside / "victim.txt").read_text() == "owned"


UNIX = """
import _socket
def reach(address):
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.connect(address)
    s.send(b"hello")
attempt("abstract", reach, "\\0" + sys.argv[1])
attempt("path", reach, sys.argv[2])
"""


def test_unix_sockets_abstract_and_by_path(tmp_path):
    name = f"miles-topology-test-{uuid.uuid4().hex}"
    servers = []
    for address in ("\0" + name, str(tmp_path / "s.sock")):
        s = socket.socket(socket.AF_UNIX)
        s.bind(address)
        s.listen(4)
        s.setblocking(False)
        servers.append(s)
    try:
        got = attack(tmp_path, UNIX, name, tmp_path / "s.sock")
        assert [connected(s) for s in servers] == [False, False] and done(got) == [], got
        assert failed(got) == 2
        attack(tmp_path, UNIX, name, tmp_path / "s.sock", trust=True)  # control
        assert [connected(s) for s in servers] == [True, True]
    finally:
        for s in servers:
            s.close()


TIOCSTI = """
import fcntl, termios
try:  # no terminal is readable in the sandbox (Landlock: no /dev/pts, no /dev/tty)
    fd = posix.open(sys.argv[1], posix.O_RDONLY | posix.O_NOCTTY)
except OSError as e:
    print("FAILED open", e.errno)
    raise SystemExit(0)
attempt("TIOCSTI", fcntl.ioctl, fd, termios.TIOCSTI, b"!")
"""


def test_no_keystrokes_pushed_into_a_terminal(tmp_path):
    """TIOCSTI queues input on a terminal as if typed there (this kernel allows it,
    dev.tty.legacy_tiocsti); a terminal opened only for reading is enough."""
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)  # a byte pushed is readable at once, no line needed
    os.set_blocking(slave, False)
    try:
        got = attack(tmp_path, TIOCSTI, os.ttyname(slave))
        assert done(got) == [] and failed(got) == 1, got
        with pytest.raises(BlockingIOError):
            os.read(slave, 16)
        got = attack(tmp_path, TIOCSTI, os.ttyname(slave), trust=True)  # control
        if done(got):  # where the kernel lets root push input at all
            assert os.read(slave, 16) == b"!"
    finally:
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------- bombs, hangs, the parent


def processes_naming(text: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(pid))
        except (OSError, ValueError):
            continue
    return out


@pytest.fixture()
def checker_tmp(tmp_path, monkeypatch):
    """The checker's temporary folders go here, to see that they are removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


BOMBS = {  # the launcher, and what the message says
    "fork_bomb": (UNHOOK + "while True:\n    posix.fork()\n", "the sandbox refuses that"),
    "recorded_fork_bomb": ("import os\nwhile True:\n    os.fork()\n", "did not finish"),
    "thread_bomb": ("import threading, time\nwhile True:\n    threading.Thread(target=time."
                    "sleep, args=(60,), daemon=True).start()\n", "thread"),
    "memory_bomb": ("x = b'x' * (64 << 30)\n", "out of memory (limit 2048 MiB)"),
    "endless_output": ("while True:\n    print('x' * 4096)\n", "to 16 MiB"),
    "sleep_forever": ("import time\ntime.sleep(10 ** 6)\n", "did not finish within 3 s"),
    "disk_fill": ("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
                  "    i += 1\n", "work folder holds 256 MiB"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bombs_and_hangs_end_with_exit_2(tmp_path, checker_tmp, monkeypatch, capsys, name):
    from miles_topology.cli import main

    monkeypatch.setattr(pylaunch, "TIMEOUT_S", 3)  # the wall limit check's runs get
    launcher = tmp_path / f"{name}.py"
    code, says = BOMBS[name]
    launcher.write_text(code)
    t0 = time.perf_counter()
    assert main(["check", str(launcher)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"miles-topology: {launcher}: ") and "Traceback" not in err, err
    assert says in err and err.count("\n") == 1, err
    assert time.perf_counter() - t0 < 3 + 10
    assert os.listdir(checker_tmp) == []
    assert processes_naming(str(tmp_path)) == []


def test_shared_memory_bomb_is_bounded_by_what_is_used(tmp_path):
    """MAP_SHARED memory is not counted by RLIMIT_DATA: the supervisor sees it in use."""
    launcher = tmp_path / "shm.py"
    launcher.write_text("import mmap\nm = mmap.mmap(-1, 8 << 30)\n"
                        "for i in range(0, len(m), 4096):\n    m[i] = 1\n")
    with pytest.raises(InputError, match=r"out of memory \(limit 256 MiB\)"):
        read_python_launcher(str(launcher), [], memory_mb=256, timeout_s=20)
    assert processes_naming(str(tmp_path)) == []


def test_shared_memory_control(tmp_path):
    """Without the supervisor (--trust-launcher) RLIMIT_DATA alone lets 512 MiB of shared
    memory through a 256 MiB bound: the launcher runs to its end."""
    launcher = tmp_path / "shm.py"
    launcher.write_text("import mmap\nm = mmap.mmap(-1, 512 << 20)\n"
                        "for i in range(0, len(m), 4096):\n    m[i] = 1\n")
    with pytest.raises(InputError, match="no training launch"):
        read_python_launcher(str(launcher), [], memory_mb=256, timeout_s=20, trust=True)
    with pytest.raises(InputError, match=r"out of memory \(limit 256 MiB\)"):
        read_python_launcher(str(launcher), [], memory_mb=256, timeout_s=20)


KILL_PARENT = UNHOOK + """
import signal
token = sys.argv[1]
for pid in os.listdir("/proc"):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        continue
    if token.encode() in cmd:
        attempt("kill", posix.kill, int(pid), 9)
        attempt("pidfd", lambda: signal.pidfd_send_signal(posix.open(f"/proc/{pid}",
                                                                     posix.O_RDONLY), 9))
attempt("getppid", posix.kill, os.getppid(), 9)
attempt("group", posix.kill, 0, 9)
os.kill(os.getppid(), 9)  # the recorder's
raise SystemExit("the parent is still there")
"""


def test_a_launcher_that_kills_its_parent(tmp_path):
    """The checker runs as its own process here (were the kill to work, it would not be
    pytest that died); it ends with exit 2 and its message, its temporary folder gone."""
    launcher = tmp_path / "run.py"
    launcher.write_text(KILL_PARENT)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    token = f"token-{uuid.uuid4().hex}"
    code = "import sys; from miles_topology.cli import main; sys.exit(main(sys.argv[1:-1]))"
    got = subprocess.run([sys.executable, "-c", code, "check", str(launcher), "--", token,
                          token], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp)})
    assert got.returncode == 2, got
    assert "the parent is still there" in got.stderr
    assert os.listdir(tmp) == []
    assert processes_naming(token) == []


def test_the_sandbox_dies_with_a_killed_checker(tmp_path):
    """A checker killed from outside (SIGKILL: no clean-up of its own) takes the supervisor
    and the launcher with it (parent-death signals)."""
    launcher = tmp_path / "run.py"
    launcher.write_text("import time\ntime.sleep(10 ** 6)\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    checker = subprocess.Popen([sys.executable, "-m", "miles_topology.cli", "check",
                                str(launcher)], env={**os.environ, "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 30
        while len(processes_naming(str(tmp))) < 2:  # the supervisor and the launcher
            assert time.monotonic() < deadline and checker.poll() is None
            time.sleep(0.05)
    finally:
        checker.kill()
        checker.wait()
    deadline = time.monotonic() + 5
    while processes_naming(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_naming(str(tmp)) == []


# ---------------------------------------------------------------- where the kernel cannot


@pytest.mark.parametrize("facility", isolate.FACILITIES)
def test_a_missing_facility_refuses_with_exit_2(tmp_path, monkeypatch, capsys, facility):
    from miles_topology.cli import main

    marker = tmp_path / "marker"
    launcher = tmp_path / "run.py"
    launcher.write_text(f"open({str(marker)!r}, 'w')\nimport os\n"
                        "os.system('python3 train.py --actor-num-gpus-per-node 2 "
                        "--num-layers 4')\n")
    monkeypatch.setenv(pylaunch.DENY_VAR, facility)
    assert main(["check", str(launcher)]) == 2
    err = capsys.readouterr().err
    assert f"lacks {facility}" in err and "--trust-launcher" in err and "\n" == err[-1]
    assert err.count("\n") == 1 and not marker.exists()
    assert run_program(["-c", "print(1)"]).status == "refused"
    # given the trust, it runs with the recorders and says so
    assert main(["check", str(launcher), "--trust-launcher", "--verbose"]) == 0
    assert "in-process recorders only, not isolated by the kernel" in capsys.readouterr().out


def test_the_refusal_names_what_this_kernel_lacks(monkeypatch):
    monkeypatch.setattr(isolate, "landlock_abi", lambda: 2)
    with pytest.raises(isolate.Missing, match="Landlock ABI 3 or newer .this kernel offers 2"):
        isolate.landlock("/nonexistent")


@pytest.mark.parametrize("machine", sorted(isolate._NR))
def test_the_filter_for_each_machine_is_whole(machine):
    """Every call the filter names has a number there (a typo would drop a rule silently),
    and the program is within the kernel's 4096 instructions."""
    nr = isolate._NR[machine]
    always = {"execve", "execveat", "clone", "clone3", "ptrace", "kill", "tgkill", "tkill",
              "pidfd_send_signal", "socket", "ioctl", "prctl", "fchmodat", "fchownat",
              "utimensat", "setxattr", "unshare", "mount", "io_uring_setup"}
    assert always <= set(nr), always - set(nr)
    assert set(isolate._DENY) - set(nr) <= {"fork", "vfork", "chmod", "chown", "lchown",
                                            "utime", "utimes", "futimesat", "iopl", "ioperm"}
    code = isolate.bpf_program(1, machine)
    assert len(code) % 8 == 0 and len(code) // 8 < 4096


# ---------------------------------------------------------------- what must still work


def test_what_a_launcher_needs_still_works(tmp_path):
    got = run_program(["-c", textwrap.dedent("""
        import os, threading, tempfile, json, pathlib, shutil
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        d = tempfile.mkdtemp(); p = pathlib.Path(d, "a.json"); p.write_text(json.dumps([1]))
        shutil.copy(p, pathlib.Path(d, "b.json")); os.rename(p, pathlib.Path(d, "c.json"))
        pathlib.Path(d, "c.json").touch(); os.chmod(pathlib.Path(d, "c.json"), 0o600)
        open(os.devnull, "w").write("x")
        print(sorted(os.listdir(d)), os.getpid())
        """)])
    assert got.status == 0, got
    assert got.stdout.split("]")[0] == "['b.json', 'c.json'"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_import_torch_inside_the_sandbox():
    got = run_program(["-c", "import torch\nprint(torch.ones(2, 3).sum().item())"],
                      timeout_s=240)
    assert (got.status, got.stdout) == (0, "6.0\n"), got


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON) or
                    not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root to become an unprivileged user, and a python outside /root")
def test_the_sandbox_needs_no_root():
    """The child, run as nobody (uid 65534, no capabilities), still isolates itself."""
    import json
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="miles-topology-unprivileged-"))
    try:
        tmp.chmod(0o777)
        work = tmp / "work"
        work.mkdir()
        work.chmod(0o777)
        for name in ("child.py", "isolate.py"):  # where nobody can read them (not /root)
            shutil.copy(pylaunch.CHILD.with_name(name), tmp / name)
        record = tmp / "record.jsonl"
        record.touch()
        record.chmod(0o666)
        code = UNHOOK + (
            "print(os.getuid(), os.getpid(), [l.split()[1] for l in "
            "open('/proc/self/status') if l.startswith(('NoNewPrivs', 'Seccomp:'))])\n"
            f"attempt('open', posix.open, {str(tmp / 'marker')!r}, posix.O_CREAT | 1)\n"
            "print(posix.system('true'))\n")
        (tmp / "config.json").write_text(json.dumps({
            "mode": "code", "launcher": code, "args": [], "work": str(work),
            "record": str(record), "pythonpath": [], "memory_mb": 512, "cpu_s": 10,
            "cwd": str(work), "env": {"HOME": str(work)}}))
        got = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                              "--clear-groups", SYSTEM_PYTHON, "-E", "-B", "-S",
                              str(tmp / "child.py"), str(tmp / "config.json")], cwd=work,
                             capture_output=True, text=True, timeout=60)
        # system() could not start the shell: glibc's status 127
        assert got.stdout.splitlines() == ["65534 1 ['1', '2']", "FAILED open 13",
                                           str(127 << 8)], got
        ends = [json.loads(x) for x in record.read_text().splitlines()]
        assert ends[-1]["end"] == "ok", ends
        assert not (tmp / "marker").exists()
    finally:
        shutil.rmtree(tmp)
