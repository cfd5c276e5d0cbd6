"""`check` as CI runs it on a pull request's launcher (issue 30): with the runner's secrets in
its environment and home folder, its output published as a log and as annotations. One tiny
launcher (or YAML) per attack class, aimed only at this test's scratch folder, process, socket
or fake secret; each asserts the effect did not happen, and a control (--trust-launcher, or
the option that allows it) shows that the test sees the effect where it does happen.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support import UNHOOK

from miles_topology import pylaunch
from miles_topology.cli import main
from miles_topology.model.errors import InputError
from miles_topology.pylaunch import read_python_launcher, read_python_launches, run_program

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")

SECRET = "fake-secret-0123456789abcdef"
TRAIN = "subprocess.run(['python3', 'train.py', '--colocate', {}])\n"


def launcher(folder: Path, code: str, name: str = "run.py", forge: bool = False) -> Path:
    """The attacker's launcher: it first switches the in-process audit hook off (UNHOOK), so
    what stops it must be the kernel or the checker; `forge`: with FORGE's helper."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(UNHOOK + "import subprocess\n" + (FORGE if forge else "") +
                    textwrap.dedent(code))
    return path


def check(capsys, *args) -> tuple[int, str, str]:
    code = main(["check", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- secrets into the report


def test_environment_secrets_never_reach_the_launcher(tmp_path, monkeypatch, capsys):
    """A launcher puts what it finds (its environment, /proc/self/environ) into a flag value,
    which the JSON report prints."""
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET + "-aws")
    run = launcher(tmp_path / "pr", """
        found = [v for v in os.environ.values() if "secret" in v]
        try:
            found.append(open("/proc/self/environ").read().replace("\\0", " "))
        except OSError:
            pass
        subprocess.run(["python3", "train.py", "--colocate", "--num-layers", "4",
                        "--wandb-key", " ".join(found)])
        """)
    code, out, _ = check(capsys, "--format", "json", run)
    assert code == 0 and SECRET not in out and json.loads(out)["ok"]
    # the control: passed on by name, the launcher gets it (and the report shows it)
    code, out, _ = check(capsys, "--format", "json", "--pass-env", "GITHUB_TOKEN", run)
    assert code == 0 and SECRET in out and SECRET + "-aws" not in out


def fake_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY----- {SECRET}\n")
    (home / ".git-credentials").write_text(f"https://u:{SECRET}@github.com\n")
    (home / ".netrc").write_text(f"machine github.com login u password {SECRET}\n")
    return home


STEAL_FILES = """
got = []
for path in sys.argv[1:]:
    try:
        got.append(open(path).read().strip())
    except OSError as e:
        got.append(f"refused {e.errno}")
print("|".join(got))
"""


def test_home_secrets_and_the_checkouts_git_config_are_not_readable(tmp_path, monkeypatch):
    home = fake_home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(f"[http]\n\textraheader = token {SECRET}\n")
    (repo / "model.json").write_text("{}\n")  # its own files stay readable
    run = launcher(repo / "scripts", STEAL_FILES)
    files = [home / ".ssh" / "id_rsa", home / ".git-credentials", home / ".netrc",
             repo / ".git" / "config", repo / "model.json"]
    got = run_program([str(run), *map(str, files)])
    assert got.status == 0 and SECRET not in got.stdout, got
    assert got.stdout.strip().split("|") == ["refused 13"] * 4 + ["{}"]
    got = run_program([str(run), *map(str, files)], trust=True)  # control
    assert got.stdout.count(SECRET) == 4


def test_another_processs_command_line_is_not_visible(tmp_path):
    """The sandbox has a /proc of its own PID namespace: no other process is there."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", SECRET])
    try:
        run = launcher(tmp_path / "pr", """
            seen = []
            for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
                try:
                    seen.append(open(f"/proc/{pid}/cmdline", "rb").read().decode())
                except OSError:
                    pass
            print(len(seen), " ".join(seen).replace("\\0", " "))
            """)
        got = run_program([str(run)])
        assert got.status == 0 and SECRET not in got.stdout, got
        assert got.stdout.startswith("1 ")  # itself, PID 1
        assert SECRET in run_program([str(run)], trust=True).stdout  # control
    finally:
        victim.kill()
        victim.wait()


def test_a_yaml_reads_no_secret_from_the_checkers_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    yaml = tmp_path / "t.topology.yaml"
    yaml.write_text("nodes: 1\ngpus_per_node: 8\ncolocate: true\ntp: ${oc.env:GITHUB_TOKEN}\n")
    for args in (["--batch", "--quiet"], ["--format", "json"], ["--format", "github"]):
        code, out, err = check(capsys, *args, yaml)
        assert SECRET not in out + err, (args, out, err)
    code, out, _ = check(capsys, "--format", "json", yaml)
    data = json.loads(out)
    assert code == 0 and data["topology"] is None  # tp unresolved: no sizes guessed
    assert [u["flag"] for u in data["unresolved"]] == ["--tensor-model-parallel-size"]
    code, out, _ = check(capsys, "--format", "json", "--env", "GITHUB_TOKEN=2", yaml)
    assert json.loads(out)["topology"]["tp"] == 2  # given with --env, it is read
    # the control: at run time, `flags` resolves from the real environment
    assert main(["flags", str(yaml)]) == 1  # tp "fake-secret..." is no size
    assert SECRET in capsys.readouterr().err


def test_no_unix_socket_through_a_socket_pair(tmp_path):
    """socketpair(AF_UNIX, SOCK_DGRAM) + sendto(path) reaches a datagram socket outside."""
    address = str(tmp_path / "d.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(address)
    server.setblocking(False)
    run = launcher(tmp_path / "pr", f"""
        import socket
        try:
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.sendto(b"{SECRET}", sys.argv[1])
            print("sent")
        except OSError as e:
            print("refused", e.errno)
        """)
    try:
        got = run_program([str(run), address])
        assert got.stdout.startswith("refused"), got
        with pytest.raises(BlockingIOError):
            server.recv(100)
        got = run_program([str(run), address], trust=True)  # control
        assert got.stdout == "sent\n" and server.recv(100) == SECRET.encode()
    finally:
        server.close()


def test_no_terminal_to_read_keystrokes_from(tmp_path):
    master, slave = os.openpty()
    try:
        os.write(master, b"typed-password\n")
        run = launcher(tmp_path / "pr", """
            try:
                fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
                print("read", os.read(fd, 100))
            except OSError as e:
                print("refused", e.errno)
            """)
        got = run_program([str(run), os.ttyname(slave)])
        assert got.stdout.startswith("refused") and "typed" not in got.stdout, got
        got = run_program([str(run), os.ttyname(slave)], trust=True)  # control
        assert "typed-password" in got.stdout
    finally:
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------- forged verdicts

# the attacker writes its own lines into every pipe it holds (the record is one of them)
FORGE = """
import json, stat
def forge(*records):
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, "".join(json.dumps(r) + "\\n" for r in records).encode())
        except OSError:
            pass
"""


def test_forged_records_do_not_make_the_verdict(tmp_path):
    """A launch "at" a file outside its checkout, an end saying exit 0 while it exits 3."""
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x = 1\n")
    run = launcher(tmp_path / "pr", forge=True, code=f"""
        forge({{"kind": "subprocess", "argv": ["python3", "train.py", "--colocate"],
                "source": [{str(outside)!r}, 1], "env": {{}}}},
              {{"end": "ok"}})
        os._exit(3)
        """)
    (got,) = read_python_launches(str(run), [])
    assert got.source is None  # not a file of its checkout: no location
    assert "exited with status 3" in " ".join(got.notes), got.notes
    # the control: a forged location inside its own checkout, an end that agrees, are taken
    inside = run.with_name("helper.py")
    inside.write_text("x = 1\n")
    run.write_text(run.read_text().replace(str(outside), str(inside)).replace(
        "os._exit(3)", "os._exit(0)"))
    (got,) = read_python_launches(str(run), [])
    assert got.source == (str(inside), 1) and not got.notes


def test_forged_typer_commands_do_not_make_reruns(tmp_path):
    run = launcher(tmp_path / "pr", forge=True, code="""
        forge({"commands": [f"c{i}" for i in range(1000)]})
        subprocess.run(["python3", "train.py", "--colocate"])
        """)
    t0 = time.perf_counter()
    got = read_python_launches(str(run), [])
    assert [g.command for g in got] == [None] and time.perf_counter() - t0 < 20
    # the control: commands written in its source are each run
    app = launcher(tmp_path / "app", """
        import typer
        app = typer.Typer()
        @app.command()
        def prepare():
            print("nothing to launch")
        @app.command(name="full-train")
        def full_train_cmd():
            subprocess.run(["python3", "train.py", "--colocate", "--num-layers", "8"])
        @app.command()
        def train_only():
            subprocess.run(["python3", "train.py", "--colocate", "--tensor-model-parallel-size",
                            "2"])
        if __name__ == "__main__":
            app()
        """)
    pytest.importorskip("typer")
    got = read_python_launches(str(app), [])
    assert [g.command for g in got] == ["full-train", "train-only"]
    assert any("command `prepare`" in n for n in got[0].notes)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/stdin"])
def test_a_forged_source_is_never_read_by_the_checker(tmp_path, device):
    """The checker reads a located problem's line (report columns): a forged location at
    /dev/zero would fill its memory, /dev/stdin block it."""
    run = launcher(tmp_path / "pr", forge=True, code=f"""
        forge({{"kind": "subprocess", "argv": ["python3", "train.py", "--colocate",
                "--tensor-model-parallel-size", "3", "--actor-num-gpus-per-node", "8"],
                "source": [{device!r}, 1], "env": {{}}}})
        """)
    code = "import sys; from miles_topology.cli import main; sys.exit(main(sys.argv[1:]))"
    with subprocess.Popen([sys.executable, "-c", code, "check", "--format", "github",
                           str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:  # stdin held open: a read of it would block
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 1 and device not in out, out
    assert f"file={run}" in out  # the launcher's own file instead


# ---------------------------------------------------------------- output into the CI log


HOSTILE = "x\n::error file=ci.yml,line=1::pwned\x1b]0;title\x07\x1b[2J::add-mask::y"


def test_nothing_a_launcher_prints_injects_into_the_log(tmp_path, capsys):
    run = launcher(tmp_path / "pr", f"""
        bad = {HOSTILE!r}
        subprocess.run(["python3", "train.py", "--colocate", "--tensor-model-parallel-size",
                        "3", "--actor-num-gpus-per-node", "8", "--bogus" + bad, bad])
        """)
    for fmt in ("text", "github", "json", "sarif"):
        code, out, err = check(capsys, "--format", fmt, run)
        assert code == 1, (fmt, out, err)
        assert "\x1b" not in out + err and "\x07" not in out + err, fmt
        ours = ("::error file=", "::warning file=", "::notice file=") if fmt == "github" else ()
        for line in (out + err).splitlines():
            assert not line.lstrip().startswith("::") or line.startswith(ours), (fmt, line)
            assert "::add-mask::" not in line.lstrip()[:14], (fmt, line)
        if fmt in ("json", "sarif"):  # valid, and the text is all there (the control)
            want = HOSTILE if fmt == "json" else "--bogus" + HOSTILE.split("=")[0]
            assert any(want in t for t in strings(json.loads(out))), fmt
    # stderr: a launcher's failure message is quoted in the one-line error
    fail = launcher(tmp_path / "fail", f"raise SystemExit({'pwned' + HOSTILE[1:]!r})\n")
    code, out, err = check(capsys, fail)
    assert code == 2 and err.count("\n") == 1 and "\x1b" not in err, err
    assert "pwned" in err and not any(x.lstrip().startswith("::") for x in err.splitlines())
    fail.write_text(f"raise SystemExit({'::error ' + HOSTILE[10:]!r})\n")  # ESC on line 1
    code, out, err = check(capsys, fail)
    assert code == 2 and "\x1b" not in err and "\\x1b]0;title" in err, err
    # stdout: a launcher that prints its "usage" there and exits with a status
    said = launcher(tmp_path / "said", "import sys\nprint('usage: run.py M')\n"
                    "print('\\x1b[2J\\x1b]0;title\\x07::error::pwned\\r::add-mask::x')\n"
                    "sys.exit(4)\n")
    for fmt in ("text", "github"):
        code, out, err = check(capsys, "--format", fmt, said)
        text = out + err
        assert code == 2 and "exited with status 4 before it launched training: " in text
        assert "pwned" in text and "\x1b" not in text and "\x07" not in text, text
        assert not any(x.lstrip().startswith(("::error::", "::add-mask::"))
                       for x in text.splitlines()), text
        assert "\r" not in text.replace("\r\n", "\n"), text


def strings(data) -> list[str]:
    if isinstance(data, str):
        return [data]
    items = data.values() if isinstance(data, dict) else data if isinstance(data, list) else ()
    return [s for x in items for s in strings(x)]


# ---------------------------------------------------------------- bounds


LEADER_EXITS = """
import ctypes, mmap, threading
libc = ctypes.CDLL(None)
def hold():
    time.sleep(0.3)  # after the leader has gone
    m = mmap.mmap(-1, 768 << 20)
    for i in range(0, len(m), 4096):
        m[i] = 1
    time.sleep(2)
import time
threading.Thread(target=hold).start()
libc.syscall({exit_nr}, 0)  # exit(2) of the leader thread only; the process goes on
"""


@pytest.mark.slow
def test_memory_held_by_a_thread_after_the_leader_exits_is_counted(tmp_path):
    nr = {"x86_64": 60, "aarch64": 93}.get(os.uname().machine)
    if nr is None:
        pytest.skip("exit(2)'s number is known here for x86-64 and aarch64")
    run = launcher(tmp_path / "pr", LEADER_EXITS.format(exit_nr=nr) + TRAIN.format(""))
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=r"out of memory \(limit 256 MiB\)"):
        read_python_launcher(str(run), [], memory_mb=256, timeout_s=20)
    assert time.perf_counter() - t0 < 20
    # the control: without the supervisor the shared memory goes past the bound unseen
    with pytest.raises(InputError) as e:
        read_python_launcher(str(run), [], memory_mb=256, timeout_s=20, trust=True)
    assert "out of memory" not in str(e.value)


MEMFD = """
try:
    fd = os.memfd_create("hold")
    os.ftruncate(fd, 1 << 20)
    print("memfd made")
except OSError as e:
    print("refused", e.errno)
"""


def test_memfd_is_refused(tmp_path):
    run = launcher(tmp_path / "pr", MEMFD)
    assert run_program([str(run)]).stdout.startswith("refused")
    assert run_program([str(run)], trust=True).stdout == "memfd made\n"  # control


FALLOCATE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    except OSError as e:
        print("open refused", e.errno)
        continue
    r = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(64 << 20))  # KEEP_SIZE
    print("fallocate", r, ctypes.get_errno())
for fd in range(64):  # the descriptors it inherited
    if libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(64 << 20)) == 0:
        print("inherited", fd)
"""


def test_fallocate_puts_nothing_on_the_disk(tmp_path):
    target = tmp_path / "scratch.bin"
    target.write_bytes(b"")
    run = launcher(tmp_path / "pr", FALLOCATE)
    got = run_program([str(run), str(target), "inside.bin"], reads=[str(tmp_path)])
    assert target.stat().st_blocks == 0 and "inherited" not in got.stdout, got
    assert "fallocate 0" not in got.stdout and got.stdout.startswith("open refused"), got
    run_program([str(run), str(target)], trust=True)  # control
    assert target.stat().st_blocks * 512 >= 64 << 20


LOCKS = """
import fcntl, struct
f = open(sys.argv[1])
for what, call in (("flock", lambda: fcntl.flock(f, fcntl.LOCK_SH)),
                   ("fcntl", lambda: fcntl.lockf(f, fcntl.LOCK_SH)),
                   ("lease", lambda: fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)),
                   ("setsig", lambda: fcntl.fcntl(f, fcntl.F_SETSIG, 10)),
                   ("notify", lambda: fcntl.fcntl(os.open(os.path.dirname(sys.argv[1]),
                                                          os.O_RDONLY), fcntl.F_NOTIFY, 1))):
    try:
        call()
        print("done", what)
    except OSError as e:
        print("refused", what, e.errno)
import time
time.sleep(2)  # holding them
"""


def locks_on(path: Path, run) -> tuple[set[str], object]:
    """The kinds of lock /proc/locks lists on `path` while `run()` runs."""
    ino = f":{path.stat().st_ino} "
    seen, got = set(), []
    t = threading.Thread(target=lambda: got.append(run()))
    t.start()
    while t.is_alive():
        for line in Path("/proc/locks").read_text().splitlines():
            if ino in line:
                seen.add(line.split()[1])
        time.sleep(0.01)
    t.join()
    return seen, got[0]


def test_locks_and_leases_on_outside_files_take_no_effect(tmp_path):
    target = tmp_path / "shared.txt"
    target.write_text("data\n")
    run = launcher(tmp_path / "pr", LOCKS)
    seen, got = locks_on(target, lambda: run_program([str(run), str(target)],
                                                     reads=[str(tmp_path)]))
    assert seen == set(), (seen, got)
    assert "refused lease" in got.stdout and "refused setsig" in got.stdout, got
    assert "refused notify" in got.stdout
    with open(target, "w") as f:  # a writer outside is never held up
        f.write("changed\n")
    seen, got = locks_on(target, lambda: run_program([str(run), str(target)], trust=True))
    assert {"FLOCK", "POSIX"} <= seen, (seen, got)  # control


@pytest.mark.slow
def test_many_launches_are_capped_and_the_report_stays_linear(tmp_path, capsys):
    run = launcher(tmp_path / "pr", """
        for i in range(int(sys.argv[1])):
            subprocess.run(["echo", "step", str(i)])
            subprocess.run(["python3", "train.py", "--colocate", "--num-layers", "8"])
        """)
    code, out, _ = check(capsys, "--format", "json", run, "--", "1500")
    data = json.loads(out)
    assert code == 0 and len(data) == 200
    assert "only the first 200 are checked" in " ".join(data[-1]["notes"])
    assert sum(len(d["others"]) for d in data) <= 201  # each action once, not per launch
    assert len(out) < 200 * 8000
    code, out, _ = check(capsys, "--format", "json", run, "--", "150")  # control
    data = json.loads(out)
    assert len(data) == 150 and not any("only the first" in n for n in data[-1]["notes"])


@pytest.mark.slow
def test_one_wall_clock_budget_for_every_run(tmp_path, monkeypatch):
    pytest.importorskip("typer")
    # one command at a time: what fits in the budget does not depend on the cores here
    # (side by side, test_speed.py)
    monkeypatch.setattr(pylaunch, "COMMANDS_AT_ONCE", 1)
    app = launcher(tmp_path / "app", """
        import time, typer
        app = typer.Typer()
        def slow():
            t0 = time.thread_time()  # CPU: the sandbox's clock ends sleeps at once
            while time.thread_time() - t0 < 1.5:
                pass
            subprocess.run(["python3", "train.py", "--colocate", "--num-layers", "8"])
        @app.command()
        def a():
            slow()
        @app.command()
        def b():
            slow()
        @app.command()
        def c():
            slow()
        @app.command()
        def d():
            slow()
        if __name__ == "__main__":
            app()
        """)
    t0 = time.perf_counter()
    got = read_python_launches(str(app), [], timeout_s=4)
    took = time.perf_counter() - t0
    assert took < 4 + 3 and len(got) < 4, took  # one budget, not one per command
    assert any("limit of 4 s for all runs" in n for n in got[0].notes)
    got = read_python_launches(str(app), [], timeout_s=60)  # control
    assert [g.command for g in got] == ["a", "b", "c", "d"]


def test_a_read_model_folder_is_readable_and_nothing_else(tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"num_hidden_layers": 8}')
    other = tmp_path / "other.txt"
    other.write_text("other\n")
    run = launcher(tmp_path / "pr", STEAL_FILES)
    got = run_program([str(run), str(model / "config.json"), str(other)], reads=[str(model)])
    assert got.stdout.strip().split("|") == ['{"num_hidden_layers": 8}', "refused 13"], got
    assert re.search(r"refused 13\|refused 13",
                     run_program([str(run), str(model / "config.json"), str(other)]).stdout)


SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ids = [libc.shmget(0, ctypes.c_size_t(64 << 20), 0o1600) for _ in range(4)]  # IPC_PRIVATE
print("made", sum(i >= 0 for i in ids))
for i in ids:
    if i >= 0:
        libc.shmctl(i, 0, None)  # IPC_RMID
"""


def test_sysv_shared_memory_is_bounded(tmp_path):
    """Unmapped SysV segments are in no process's memory: its IPC namespace bounds them."""
    run = launcher(tmp_path / "pr", SHM)
    assert run_program([str(run)]).stdout == "made 0\n"
    assert run_program([str(run)], trust=True).stdout == "made 4\n"  # control
