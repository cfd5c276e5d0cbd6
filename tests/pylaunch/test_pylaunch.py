"""Python launchers: run in a sandbox, the training command they issue is what is checked."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from support import LAUNCHERS

from miles_topology.model.errors import InputError
from miles_topology.model.topology import Topology
from miles_topology.pylaunch import read_python_launcher
from miles_topology.pylaunch.commands import find, find_in_shell, split_shell

HERE = LAUNCHERS


def fixture(name: str) -> str:
    return str(HERE / name)


def line_of(name: str, text: str) -> int:
    """The line of `text` in a fixture, so that tests do not hard-code line numbers."""
    lines = (HERE / name).read_text().splitlines()
    return next(i for i, x in enumerate(lines, 1) if text in x)


def sizes(argv: list[str]) -> tuple[int, int, int]:
    t = Topology.from_flags(argv)
    return t.world_size, t.dp, t.edp


# ---------------------------------------------------------------- launchers in miles' styles


@pytest.mark.parametrize(("args", "want"), [
    # 2 nodes x 8, tp 2 -> dp 16/2 = 8; ep 8, etp 1 -> edp 16/8 = 2
    (["--num-nodes", "2"], (16, 8, 2)),
    # 1 node x 8, tp 2 -> dp 4; ep 4 -> edp 8/4 = 2
    (["--num-nodes", "1", "--ep", "4"], (8, 4, 2)),
])
def test_dataclass_argparse_launcher_through_a_helper_module(args, want):
    got = read_python_launcher(fixture("run_moe_argparse.py"), args)
    assert (got.launcher, got.entry) == ("ray job submit", "/root/miles/train.py")
    assert sizes(got.argv) == want
    assert got.argv[:2] == ["--num-layers", "8"]  # the helper's model flags come first
    # the call that issued it is in the helper module beside the launcher
    assert got.source == (fixture("launch_utils.py"),
                          line_of("launch_utils.py", "result = subprocess.run("))
    # the entry sees the runtime env, not the submitting shell's exports
    assert got.env == {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                       "MASTER_ADDR": "127.0.0.1"}
    shown = [o.command for o in got.others]
    assert any("pkill -9 sglang" in c for c in shown) and any("ray start" in c for c in shown)
    assert any("huggingface-cli download" in c for c in shown)


def test_typer_launcher():
    pytest.importorskip("typer")
    got = read_python_launcher(fixture("run_moe_typer.py"), [])
    assert sizes(got.argv) == (8, 2, 1)  # 1 x 8 GPUs, tp 4 -> dp 2; ep 8 -> edp 1
    assert got.env["NCCL_DEBUG"] == "WARN"
    got = read_python_launcher(fixture("run_moe_typer.py"),
                               ["--hardware", "GB200", "--num-nodes", "2"])
    assert sizes(got.argv) == (8, 2, 2)  # 2 x 4 GPUs, tp 4 -> dp 2; ep 4 -> edp 2


def test_torchrun_through_os_system_reads_the_environment_given():
    got = read_python_launcher(fixture("run_torchrun.py"), [], {"NPROC": "8"})
    assert (got.launcher, got.entry) == ("torchrun", "train_async.py")
    t = Topology.from_flags(got.argv)
    assert (t.world_size, t.dp, t.layout.tp, t.rollout.engine_size) == (4, 2, 2, 2)
    assert got.source == (fixture("run_torchrun.py"), line_of("run_torchrun.py", "system(cmd)"))
    assert got.env == {"NCCL_DEBUG": "WARN"}  # set on the command line, beyond the launcher's
    assert [(o.kind, o.command) for o in got.others] == [("os.system", "nvidia-smi")]


def test_popen_word_list_and_launcher_args_pass_through():
    got = read_python_launcher(fixture("run_popen.py"), ["--tensor-model-parallel-size", "2"])
    assert (got.launcher, got.entry) == ("python3", "/opt/miles/train.py")
    assert got.argv[-2:] == ["--tensor-model-parallel-size", "2"]
    assert sizes(got.argv)[:2] == (2, 1)


# ---------------------------------------------------------------- what is not a launch


def test_no_training_launch():
    with pytest.raises(InputError, match="no training launch: the launcher ran 2 command"):
        read_python_launcher(fixture("run_converter.py"), [])


def test_missing_package_says_what_to_install():
    with pytest.raises(InputError) as e:
        read_python_launcher(fixture("run_missing_import.py"), [])
    assert str(e.value).startswith(
        "run_missing_import.py imports miles_topology_fixture_absent_pkg, which is not "
        "installed here: pip install miles_topology_fixture_absent_pkg")


def test_a_crash_is_one_line_at_the_launchers_own_line(monkeypatch):
    monkeypatch.delenv("NUM_IB_HCAS", raising=False)
    with pytest.raises(InputError) as e:
        read_python_launcher(fixture("run_crash.py"), [])
    msg = str(e.value)
    assert f"run_crash.py:{line_of('run_crash.py', 'return int(')}: ValueError" in msg
    assert "Traceback" not in msg and "\n" not in msg
    assert "answered with exit 0 and empty output" in msg  # why its output was empty
    assert "--env KEY=VALUE" in msg
    # given the value the launcher would have probed for, it goes on to the launch
    got = read_python_launcher(fixture("run_crash.py"), [], {"NUM_IB_HCAS": "1"})
    assert got.env["NCCL_IB_HCA_COUNT"] == "1" and sizes(got.argv)[0] == 8


def test_a_crash_in_an_installed_helper_names_both_lines(tmp_path):
    launcher = tmp_path / "run.py"
    launcher.write_text("import json\n\njson.loads('{')\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(str(launcher), [])
    msg = str(e.value)
    assert f"{launcher}:3: (in " in msg and "json" in msg and "JSONDecodeError" in msg


def test_a_usage_error_of_the_launcher_is_reported():
    with pytest.raises(InputError, match=r"exited with status 2 .*unrecognized arguments"):
        read_python_launcher(fixture("run_moe_argparse.py"), ["--bogus"])


def test_an_environment_variable_the_launcher_indexes_is_named_whatever_its_case(tmp_path):
    # os.environ["http_proxy"] raised KeyError (held-out: a fork's FSDP test launcher): the
    # lowercase name is an environment variable too, given with --env
    launcher = tmp_path / "run.py"
    launcher.write_text("import os\n\nproxy = os.environ['http_proxy']\nkey = 'Key_Error'\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(str(launcher), [])
    assert str(e.value).endswith("KeyError: 'http_proxy' (give --env http_proxy=...)")
    # raised in os (frozen since Python 3.11: no source line to quote, was
    # "<frozen os>:679: ``"; a file with its line on 3.10)
    assert ("<frozen os>" in str(e.value) or "os.py" in str(e.value)) and "``" not in str(e.value)
    launcher.write_text("raise KeyError('model_name')\n")  # not os.environ's: no --env
    with pytest.raises(InputError) as e:
        read_python_launcher(str(launcher), [])
    assert "--env" not in str(e.value)


def test_a_usage_line_printed_on_stdout_is_the_reason(tmp_path):
    # a hand-rolled dispatcher prints its usage on stdout, then exits 1 (held-out:
    # p2p_weight_transfer/run.py run with no subcommand)
    launcher = tmp_path / "run.py"
    launcher.write_text("import sys\n\nif len(sys.argv) < 2:\n    print('starting')\n"
                        "    print('Usage: python run.py <prepare|run|list> [args...]')\n"
                        "    sys.exit(1)\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(str(launcher), [])
    assert str(e.value).endswith("before it launched training: Usage: python run.py "
                                 "<prepare|run|list> [args...]")
    # the choices listed after the error are not the reason
    launcher.write_text("import sys\n\nprint(\"ERROR: Unknown model 'x'.\")\n"
                        "print('Available:')\nprint('  Qwen3-4B')\nsys.exit(1)\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(str(launcher), [])
    assert str(e.value).endswith(": ERROR: Unknown model 'x'.")


@pytest.mark.parametrize("name", ["run_loop.py", "run_sleep.py"])
def test_timeout_within_the_bound(name):
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="did not finish within 1.5 s"):
        read_python_launcher(fixture(name), [], timeout_s=1.5)
    assert time.perf_counter() - t0 < 1.5 + 5  # the kill is prompt (slack for a busy machine)


def test_memory_bound():
    # the memory limit stops it, not the timeout
    with pytest.raises(InputError, match="out of memory .limit 512 MiB"):
        read_python_launcher(fixture("run_memory.py"), [], memory_mb=512)


def test_missing_file():
    with pytest.raises(InputError, match="no such file"):
        read_python_launcher(fixture("nope.py"), [])


# ---------------------------------------------------------------- nothing leaves the process


def test_sandbox_leaves_the_machine_untouched(tmp_path):
    canary = tmp_path / "canary"
    (canary / "sub").mkdir(parents=True)
    files = {canary / "keep.txt": "keep", canary / "sub" / "deep.txt": "deep"}
    for p, text in files.items():
        p.write_text(text)
        p.chmod(0o640)
    outside = tmp_path / "outside.txt"
    marker = "miles-topology-canary-process"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        # the canary is readable (--read), as a launcher's model folder: what it then tries
        got = read_python_launcher(fixture("run_hostile.py"), [str(canary), str(port),
                                                               str(outside)], reads=[str(canary)])
        with pytest.raises(BlockingIOError):  # nothing ever connected
            server.accept()
        assert victim.poll() is None  # pkill -f did not reach it
    finally:
        server.close()
        victim.kill()
        victim.wait()
    assert {p: p.read_text() for p in files} == files
    assert {p.stat().st_mode & 0o777 for p in files} == {0o640}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary"]
    assert sorted(p.name for p in canary.iterdir()) == ["keep.txt", "sub"]
    # the training command is still recorded
    assert got.argv == ["--actor-num-gpus-per-node", "4", "--colocate",
                        "--tensor-model-parallel-size", "2"]
    kinds = {o.kind for o in got.others}
    # recorders answered these ...
    assert {"subprocess", "os.system", "socket.create_connection", "shutil.rmtree",
            "os.remove", "os.rename", "os.kill", "os.execv", "write"} <= kinds
    # ... and the audit hook refused what went past them (the C functions themselves)
    assert {"refused os.system", "refused os.kill", "refused socket.connect", "refused open",
            "refused import", "refused os.chmod"} <= kinds
    # libc's system() through ctypes is the kernel's to refuse (seccomp: no fork, no execve),
    # not the hook's: the canary above is intact all the same
    assert "refused ctypes.dlsym" not in kinds
    assert any(o.kind == "subprocess" and o.command == f"pkill -f {marker}" for o in got.others)


def test_writes_outside_go_to_the_sandbox_and_inside_work(tmp_path):
    launcher = tmp_path / "w.py"
    lock = tmp_path / "models" / "m.lock"
    launcher.write_text(
        "import fcntl, os, pathlib, subprocess, sys\n"
        "open('here.txt', 'w').write('x')\n"
        "os.makedirs('a/b'); os.rename('here.txt', 'a/b/h.txt'); os.remove('a/b/h.txt')\n"
        # miles' prepare steps lock a file beside the checkpoint they write
        f"lock = pathlib.Path({str(lock)!r}); lock.parent.mkdir(parents=True, exist_ok=True)\n"
        "with open(lock, 'w') as f:\n    fcntl.flock(f, fcntl.LOCK_EX)\n"
        f"fd = os.open({str(tmp_path / 'x')!r}, os.O_WRONLY | os.O_CREAT); os.close(fd)\n"
        "subprocess.run('python3 train.py --actor-num-gpus-per-node 2', shell=True)\n")
    got = read_python_launcher(str(launcher), [])
    assert got.argv == ["--actor-num-gpus-per-node", "2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.py"]
    assert [(o.kind, o.command) for o in got.others] == [
        ("os.mkdir", str(lock.parent)), ("write", str(lock)), ("write", str(tmp_path / "x"))]


# ---------------------------------------------------------------- reading the command


@pytest.mark.parametrize(("cmd", "want"), [
    ("python3 train.py --a 1", ("python3", "train.py", ["--a", "1"], {})),
    ("cd /root/miles && PYTHONPATH=/m python3 -u ./train_async.py --b",
     ("python3", "./train_async.py", ["--b"], {"PYTHONPATH": "/m"})),
    ("pkill -9 sglang; export X=1 && ray job submit --address=http://h:8265 "
     "--runtime-env-json='{\"env_vars\": {\"A\": \"2\"}}' -- python3 /r/train.py --c 'd e'",
     ("ray job submit", "/r/train.py", ["--c", "d e"], {"A": "2"})),
    ("bash -c \"nohup torchrun --nproc-per-node 8 --nnodes 2 train.py --x\"",
     ("torchrun", "train.py", ["--x"], {})),
    ("python -m torch.distributed.run --nproc_per_node 4 train.py --y 2",
     ("python -m torch.distributed.run", "train.py", ["--y", "2"], {})),
    ("ray job submit -- bash -c 'python3 train.py --z'",
     ("ray job submit", "train.py", ["--z"], {})),
    ("python -u -m miles.train --dry-run", ("python", "miles.train", ["--dry-run"], {})),
    # the same command forms as the bash reader: wrappers with options, env, timeout
    ("sudo -u ray env -u HOME A=1 timeout -s INT 2h python3 train.py --q",
     ("python3", "train.py", ["--q"], {"A": "1"})),
    ("ray job submit --runtime-env-json '{\"env_vars\": {\"B\": \"3\"}}' python3 train.py",
     ("ray job submit", "train.py", [], {"B": "3"})),
])
def test_training_launch_forms(cmd, want):
    got = find_in_shell(cmd)
    assert (got.launcher, got.entry, got.argv, got.env) == want


@pytest.mark.parametrize("cmd", [
    "python3 tools/convert_hf_to_torch_dist.py --save /x", "python3 run.py --port 8000 &",
    "echo python3 train.py", "python3 -c 'import train'", "python3 -m miles.serve train.py",
    "ray job submit --address=x -- python3 eval.py", "ray start --head", "",
])
def test_not_training(cmd):
    assert find_in_shell(cmd) is None


def test_split_shell_keeps_quoted_operators():
    assert split_shell("a 'x;y' && b \"p|q\"\nc # d; e") == [["a", "x;y"], ["b", "p|q"], ["c"]]
    assert find(["env", "-i", "A=1", "python3", "train.py"]).env == {"A": "1"}


# ---------------------------------------------------------------- the command


def test_check_command_on_a_launcher(capsys):
    from miles_topology.cli import main

    assert main(["check", "--format", "json", fixture("run_moe_argparse.py"), "--",
                 "--num-nodes", "1", "--ep", "4"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [got["topology"][k] for k in ("world_size", "dp", "edp")] == [8, 4, 2]
    at = f"launch_utils.py:{line_of('launch_utils.py', 'result = subprocess.run(')}"
    assert got["launcher"] == "ray job submit" and got["source"].endswith(at)
    assert main(["check", fixture("run_converter.py")]) == 2
    assert "no training launch" in capsys.readouterr().err
    assert main(["check", fixture("run_missing_import.py")]) == 2
    err = capsys.readouterr().err
    assert "which is not installed here: pip install" in err and "Traceback" not in err


def test_launching_twice_reads_the_first_and_says_so(tmp_path):
    launcher = tmp_path / "twice.py"
    launcher.write_text(
        "import os, shutil\n"
        "shutil.rmtree('/nonexistent/train.py')\n"  # a path named train.py is not a launch
        "for tp in (2, 4):\n"
        "    os.system(f'python3 train.py --actor-num-gpus-per-node 4 "
        "--tensor-model-parallel-size {tp}')\n")
    got = read_python_launcher(str(launcher), [])
    assert got.argv[-1] == "2" and any("more than once" in n for n in got.notes)
    assert [o.kind for o in got.others] == ["shutil.rmtree", "os.system"]


def test_installed_helper_on_pythonpath_and_the_launchers_own_line():
    site = str(HERE / "site")
    with pytest.raises(InputError, match="imports fake_miles, which is not installed"):
        read_python_launcher(fixture("run_installed_helper.py"), [], {"PYTHONPATH": ""})
    got = read_python_launcher(fixture("run_installed_helper.py"), [], {"PYTHONPATH": site})
    assert got.launcher == "ray job submit" and sizes(got.argv)[0] == 4
    # the call happens in the installed helper; the launcher's own line is its call
    assert got.source == (fixture("run_installed_helper.py"),
                          line_of("run_installed_helper.py", "U.execute_train("))


@pytest.mark.parametrize(("tail", "note"), [
    ("while True:\n    pass\n", "stopped after 1.5 s, after its training launch"),
    ("raise RuntimeError('job failed')\n", "failed after its training launch"),
])
def test_what_happens_after_the_launch_is_a_note(tmp_path, tail, note):
    launcher = tmp_path / "after.py"
    launcher.write_text("import os\nos.system('python3 train.py --actor-num-gpus-per-node 2')\n"
                        + tail)
    got = read_python_launcher(str(launcher), [], timeout_s=1.5)
    assert got.argv == ["--actor-num-gpus-per-node", "2"]
    assert any(note in n for n in got.notes), got.notes


def test_a_launcher_run_where_it_reads_relative_files_still_writes_nothing_there(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tp.txt").write_text("4")
    launcher = tmp_path / "rel.py"
    launcher.write_text(
        "import os\ntp = open('models/tp.txt').read()\n"
        "open('run.log', 'w').write('started')\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node 8 "
        "--tensor-model-parallel-size {tp}')\n")
    with pytest.raises(InputError, match="FileNotFoundError.*models/tp.txt"):
        read_python_launcher(str(launcher), [])  # from the sandbox's own folder
    got = read_python_launcher(str(launcher), [], cwd=str(tmp_path))
    assert sizes(got.argv)[:2] == (8, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "rel.py"]
    assert [(o.kind, o.command) for o in got.others] == [("write", str(tmp_path / "run.log"))]


def test_problems_point_at_the_launchers_call(tmp_path, capsys):
    from miles_topology.cli import main

    launcher = tmp_path / "bad.py"
    launcher.write_text("import subprocess\nsubprocess.run(['python3', 'train.py', "
                        "'--actor-num-gpus-per-node', '6', '--tensor-model-parallel-size', "
                        "'4'])\n")
    assert main(["check", "--format", "json", str(launcher)]) == 1
    got = json.loads(capsys.readouterr().out)
    assert got["errors"][0]["code"] == "dense-grid-divisibility"
    assert got["errors"][0]["location"] == {"path": str(launcher), "line": 2}
    assert got["source"] == f"{launcher}:2"


def test_user_site_packages_as_for_the_real_run_and_home_is_the_sandbox(tmp_path):
    home = tmp_path / "home"
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    site.mkdir(parents=True)
    (site / "user_installed_helper.py").write_text("GPUS = 4\n")
    launcher = tmp_path / "u.py"
    launcher.write_text(
        "import os, sys, tempfile\n"
        f"assert os.path.expanduser('~') != {str(home)!r}, 'HOME is the real one'\n"
        "assert tempfile.gettempdir() == os.environ['HOME']\n"
        "here = os.path.join('miles_topology', 'pylaunch')\n"
        "assert not any(p.endswith(here) for p in sys.path), sys.path\n"
        "import user_installed_helper as h\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node {h.GPUS}')\n")
    # the interpreter itself decides whether user site-packages count (not in a venv)
    real = subprocess.run([sys.executable, "-E", "-c", "import user_installed_helper"],
                          env={"HOME": str(home)}, capture_output=True).returncode == 0
    if real:
        got = read_python_launcher(str(launcher), [], {"HOME": str(home)})
        assert got.argv == ["--actor-num-gpus-per-node", "4"]
    else:  # a recording stand-in answered it: the flag built from it is unknown, and said so
        got = read_python_launcher(str(launcher), [], {"HOME": str(home)})
        assert any("imports user_installed_helper, which is not installed here" in n
                   for n in got.notes) and got.argv[-1].startswith("__unknown_")
    assert sorted(p.name for p in home.iterdir()) == [".local"]


def test_model_shape_from_the_checkpoint_is_unknown_not_dense(capsys):
    """As for bash scripts: with no --num-layers the shape comes from the checkpoint, so
    r3-requires-moe (which needs to know whether the model is MoE) is skipped, not failed."""
    from miles_topology.cli import main
    from miles_topology.judging.check_launcher import check_python

    v = check_python(fixture("run_r3_from_checkpoint.py"), [])
    assert v.ok and "r3-requires-moe" in {p.code for p in v.skipped}
    assert "r3-requires-moe" not in {p.code for p in v.errors}
    assert "--num-layers" in v.extra["unknown_model_facts"]["flags"]
    assert "checkpoint" in v.extra["unknown_model_facts"]["why"]
    assert main(["check", "--verbose", fixture("run_r3_from_checkpoint.py")]) == 0
    assert "model shape unknown" in capsys.readouterr().out
    # one fact given, the shape still from the checkpoint: whether the MoE layers need
    # --sequence-parallel is not known, as `check` says of the same bash script
    v = check_python(fixture("run_r3_from_checkpoint.py"), ["--experts", "128", "--no-sp"])
    assert v.ok and {"moe-tp-requires-sp", "r3-requires-moe"} & {p.code for p in v.skipped}
    assert "--num-experts" not in v.extra["unknown_model_facts"]["flags"]
    # a launcher that spells the shape out is judged on it: the MoE job passes, facts known
    v = check_python(fixture("run_moe_argparse.py"), ["--num-nodes", "1", "--ep", "4"])
    assert v.ok and v.extra["unknown_model_facts"] is None


@pytest.mark.parametrize(("opt", "tp"), [
    (["--runtime-env-json", '{"env_vars": {"TP": "2"}}'], 2),
    (["--runtime-env", "runtime.yaml"], None),  # a file: its env is not known here
])
def test_topology_yaml_under_ray_job_submit_as_for_bash(tmp_path, opt, tp):
    """The same rule as `check SCRIPT.sh` (shell.launch.runtime_env): the entrypoint of ray
    job submit sees its runtime env; where that is unknown, so is what the YAML reads."""
    from miles_topology.judging.check_launcher import check_python

    yaml = tmp_path / "t.yaml"
    yaml.write_text("tp: ${oc.env:TP,1}\nsp: true\n")
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os, subprocess\nos.environ['TP'] = '4'\n"
        f"subprocess.run(['ray', 'job', 'submit', *{opt!r}, '--', 'python3', 'train.py', "
        f"'--topology', {str(yaml)!r}, '--colocate'], check=True)\n")
    v = check_python(str(launcher), [])
    assert v.ok, [p.code for p in v.errors]
    if tp is not None:
        assert v.topology.layout.tp == tp and not v.extra["unresolved"]
    else:
        assert v.summary is None
        assert [u["flag"] for u in v.extra["unresolved"]] == ["--tensor-model-parallel-size"]
