"""What checking a launcher faster changed (issue 36; bench/sweep_launchers.py has the times,
no test asserts one): a typer app's commands run side by side in the input's context, the
bash reader is not imported for a launcher, a launcher recording in an endless loop runs on
to its limit (its recorders write no more than the checker keeps), and a timeout after a
pipe was closed over its bound is reported as a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from miles_topology import pylaunch
from miles_topology.model.errors import InputError
from miles_topology.pylaunch import read_python_launcher
from miles_topology.reading import deadline


def test_commands_run_side_by_side_in_order_with_the_inputs_budget(monkeypatch):
    monkeypatch.setattr(pylaunch, "COMMANDS_AT_ONCE", 2)
    both = threading.Barrier(2, timeout=20)  # broken unless two runs are in flight at once
    seen = []

    def run(name):
        if name in ("a", "b"):
            both.wait()
        seen.append(deadline.left() is not None)
        return name.upper()

    with deadline.per_input(60):
        assert pylaunch._each(run, ["a", "b", "c"]) == ["A", "B", "C"]
    assert seen == [True, True, True]  # each run sees the input's --timeout budget
    # the control: one at a time, the barrier would break
    monkeypatch.setattr(pylaunch, "COMMANDS_AT_ONCE", 1)
    with pytest.raises(threading.BrokenBarrierError):
        pylaunch._each(run, ["a", "b"])


def test_a_launchers_check_does_not_import_the_bash_reader():
    code = ("import sys, miles_topology.cli, miles_topology.judging.check_launcher\n"
            "print('miles_topology.shell' in sys.modules)\n"
            "from miles_topology.judging import check_script\n"
            "check_script.read\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert got.stdout.split() == ["False"]


def test_a_recording_loop_runs_to_its_limit_not_into_a_closed_pipe(tmp_path):
    """Each command is a ~1 MB record: past 16 MiB the child writes no more (before: the
    checker closed the pipe and the launcher died of EPIPE, 'Broken pipe')."""
    run = tmp_path / "run.py"
    run.write_text("import subprocess\nwhile True:\n"
                   "    subprocess.run(['echo', 'x' * 1_000_000])\n")
    with pytest.raises(InputError, match="did not finish within 3 s") as e:
        read_python_launcher(str(run), [], timeout_s=3)
    assert "Broken pipe" not in str(e.value)


def test_a_timeout_after_a_pipe_closed_over_its_bound_is_a_timeout(tmp_path):
    """stdout closed by the checker over 16 MiB, then the launcher hangs: the second drain
    after the kill polled the closed pipe (EBADF, an internal error)."""
    run = tmp_path / "run.py"
    run.write_text("import sys\ntry:\n    while True:\n        sys.stdout.write('x' * 65536)\n"
                   "        sys.stdout.flush()\nexcept BrokenPipeError:\n    pass\n"
                   "while True:\n    pass\n")
    with pytest.raises(InputError, match="did not finish within 3 s"):
        read_python_launcher(str(run), [], timeout_s=3)


def test_a_librarys_probe_in_a_venv_is_not_the_users_read():
    """In a venv the platform stdlib folder (<venv>/lib/pythonX.Y) is a prefix of
    site-packages: a library's call (pydantic's scan of entry_points.txt) must still count
    as a library's, not as the launcher's own read of a missing file."""
    import importlib.util
    from types import SimpleNamespace

    from miles_topology.pylaunch import CHILD

    spec = importlib.util.spec_from_file_location("mt_child_probe", CHILD)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    venv = "/v/lib/python3.11/"
    child._LIBS = (("/base/lib/python3.11/", venv), (venv + "site-packages/",))

    def frames(*names):
        f = None
        for n in reversed(names):
            f = SimpleNamespace(f_code=SimpleNamespace(co_filename=n), f_back=f)
        return f

    lib = venv + "site-packages/pydantic/plugin/_loader.py"
    stdlib = "/base/lib/python3.11/importlib/metadata/__init__.py"
    assert not child._users_code(frames(stdlib, lib, "/repo/run.py"))
    assert child._users_code(frames(stdlib, "/repo/run.py"))


# ------------------------------------ the spare child, started before the options are read

_ENV_LAUNCHER = (
    "import os, subprocess\n"
    "subprocess.run(['python3', 'train.py', '--actor-num-gpus-per-node', '4',\n"
    "                '--tensor-model-parallel-size', os.environ.get('MILES_SCRIPT_TP', '1'),\n"
    "                '--pipeline-model-parallel-size', os.environ.get('MILES_SCRIPT_GONE', '1'),\n"
    "                '--lang', os.environ.get('LANG', '-')])\n")


@pytest.fixture()
def spare_started(tmp_path, monkeypatch):
    """A launcher reading its environment, and a spare child started for it (with a name
    in its environment the run will not have, and without one the run will)."""
    from miles_topology import spare

    launcher = tmp_path / "run_env.py"
    launcher.write_text(_ENV_LAUNCHER)
    monkeypatch.setenv("MILES_SCRIPT_GONE", "2")
    monkeypatch.delenv("MILES_SCRIPT_TP", raising=False)
    spare.start(["check", str(launcher)])
    assert len(spare._SPARE) == 1
    monkeypatch.delenv("MILES_SCRIPT_GONE")
    yield str(launcher), spare._SPARE[0]
    spare.discard()


def test_the_spare_child_runs_the_launcher_in_the_runs_environment(spare_started,
                                                                   monkeypatch):
    from miles_topology import spare

    launcher, started = spare_started
    want = read_python_launcher(launcher, [], {"MILES_SCRIPT_TP": "4"})  # taken by this run
    assert spare._SPARE == [] and started.proc.returncode == 0  # it ran, and ended
    assert not os.path.exists(started.tmp)  # its folder removed after the run
    # the same launch as a child started for the run gives: the environment is the run's
    # (MILES_SCRIPT_TP given, MILES_SCRIPT_GONE no longer there), not the one it started with
    assert want.argv[3:6:2] == ["4", "1"]
    spare.start(["check", launcher])
    monkeypatch.setattr(subprocess, "Popen", None)  # no new process is needed for the run
    again = read_python_launcher(launcher, [], {"MILES_SCRIPT_TP": "4"})
    assert again.argv == want.argv and again.env == want.env


def test_a_spare_child_started_with_another_locale_is_not_taken(spare_started):
    from miles_topology import spare

    launcher, started = spare_started
    lang = "C.UTF-8" if started.env.get("LANG") != "C.UTF-8" else "en_US.UTF-8"
    got = read_python_launcher(launcher, [], {"LANG": lang})  # Python reads it at start
    assert got.argv[-1] == lang and spare._SPARE == [started]
    assert started.proc.poll() is None  # still waiting
    spare.discard()  # not taken: ended, nothing run, its folder removed
    assert started.proc.returncode == 0 and not os.path.exists(started.tmp)


def test_a_spare_child_that_died_is_not_taken(spare_started):
    from miles_topology import spare

    launcher, started = spare_started
    started.proc.kill()
    started.proc.wait()
    got = read_python_launcher(launcher, [], {"MILES_SCRIPT_TP": "4"})  # a child of its own
    assert got.argv[3] == "4" and spare._SPARE == [started]
    spare.discard()
    assert not os.path.exists(started.tmp)


def test_a_spare_child_is_started_only_for_a_launchers_check(tmp_path):
    from miles_topology import spare

    script = tmp_path / "run.sh"
    script.write_text("python3 train.py\n")
    for argv in (["check", str(script)], ["plan", str(tmp_path / "x.py")],
                 ["check", str(tmp_path / "missing.py")], []):
        spare.start(argv)
        assert spare._SPARE == []


def test_meanwhile_runs_once_while_the_first_child_runs(tmp_path):
    """read_python_launches's `meanwhile` (the judging's constants, built while this process
    only waits): called once for all the commands of a typer app, with a child running."""
    from pathlib import Path

    from miles_topology.pylaunch import read_python_launches

    app = tmp_path / "run_app.py"
    app.write_text(
        "import subprocess, typer\napp = typer.Typer()\n\n"
        "@app.command()\ndef small():\n"
        "    subprocess.run(['python3', 'train.py', '--tensor-model-parallel-size', '2'])\n\n"
        "@app.command()\ndef big():\n"
        "    subprocess.run(['python3', 'train.py', '--tensor-model-parallel-size', '4'])\n\n"
        "if __name__ == '__main__':\n    app()\n")
    seen = []

    def meanwhile():
        kids = [p for t in Path("/proc/self/task").iterdir()
                for p in (t / "children").read_text().split()]
        seen.append(len(kids) > 0)

    got = read_python_launches(str(app), [], meanwhile=meanwhile)
    assert [(g.command, g.argv[-1]) for g in got] == [("small", "2"), ("big", "4")]
    assert seen == [True]
