"""Training started directly in a container (``docker run --gpus all -v "$PWD":/w -w /w IMAGE
python3 train.py --tensor-model-parallel-size 2``): a launch whose words are the container's
command, whose environment is what the container passes, and whose entry is a path of the
container: its stack is read only from the file a mount maps it to, through the gate, never
from a host file found by the path's tail (shell/containers.py `launch`, `placed`). Each
fixture is bash (bash -n); with a ``docker``/``srun`` stand-in that records its argv, bash
gives the container the flags the reader reads."""

import json
import subprocess

import pytest
from support import flag_values

from miles_topology.judging.check_script import check_script
from miles_topology.model.errors import NoTrainingLaunch
from miles_topology.reading.env import PartialEnv
from miles_topology.shell import read_script

FLAGS = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size $PP"
# a train.py that builds no miles or slime parser: read, it makes the launch "nothing to
# check" (judging.launch.not_ours); a file not read is judged as miles' training
ALIEN = "import argparse\nargparse.ArgumentParser().parse_args()\n"


def outer(tmp_path, line: str, prelude: str = "export PP=4 SEEN=host\nHIDDEN=x\n"):
    (tmp_path / "pyproject.toml").write_text("")
    path = tmp_path / "outer.sh"
    path.write_text(prelude + line + "\n")
    got = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr  # the fixture is bash
    return path


def recorded(tmp_path, path, head: str) -> list[str]:
    """The words bash gives the stand-in `head` (docker, srun, ...), which records them."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp_path / "argv.json"
    stand = bin_ / head
    stand.write_text('#!/bin/bash\npython3 -c \'import json,sys; print(json.dumps(sys.argv[1:]))\''
                     f' "$@" > {log}\n')
    stand.chmod(0o755)
    subprocess.run(["bash", str(path)], cwd=tmp_path, timeout=60, check=True,
                   env={"PATH": f"{bin_}:/usr/bin:/bin"})
    return json.loads(log.read_text())


FORMS = [
    ("docker", 'docker run --rm --gpus all --ipc host -v "$PWD":/w -w /w nvcr.io/x:1 '
     f"python3 train.py {FLAGS}", "python3", "train.py"),
    ("podman", f"podman run --device nvidia.com/gpu=all img python3 /root/miles/train.py {FLAGS}",
     "python3", "/root/miles/train.py"),
    ("docker", f"docker exec -it mycont ray job submit --address http://x:8265 -- "
     f"python3 /root/miles/train.py {FLAGS}", "ray job submit", "/root/miles/train.py"),
    ("apptainer", f"apptainer exec --nv img.sif python3 train.py {FLAGS}", "python3",
     "train.py"),
    ("singularity", f"singularity exec --nv -B /data img.sif torchrun --nproc-per-node 8 "
     f"/opt/miles/train.py {FLAGS}", "torchrun", "/opt/miles/train.py"),
    ("srun", f"srun -N 2 --container-image=nvcr.io/x --container-mounts=/data:/data "
     f"python3 /root/miles/train.py {FLAGS}", "python3", "/root/miles/train.py"),
    ("srun", f"srun -N 2 apptainer exec img.sif python3 -m miles.train {FLAGS}", "python3",
     "miles.train"),
    ("enroot", f"enroot start --rw pytorch python3 /workspace/train.py {FLAGS}", "python3",
     "/workspace/train.py"),
]


@pytest.mark.parametrize("head,line,launcher,entry", FORMS, ids=[x[1][:20] for x in FORMS])
def test_each_container_form_is_a_launch_with_its_flags(tmp_path, head, line, launcher,
                                                         entry):
    path = outer(tmp_path, line)
    got = read_script(path)
    assert (got.launcher, got.entry) == (launcher, entry)
    assert got.box is not None and "in the container" in got.box[0]
    flags = {fv.flag: fv.value for fv in got.argv}
    truth = recorded(tmp_path, path, head)  # the words bash gives the container
    k = truth.index(entry)
    assert flag_values(truth[k + 1:]) == flags == {
        "--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "4"}


ENV = [  # docker, podman, enroot: only their -e words; apptainer, srun: the exported ones
    ("docker run -e SEEN -e NEW=1 img python3 /r/train.py", {"SEEN": "host", "NEW": "1"}),
    ("podman run --env=NEW=1 img python3 /r/train.py", {"NEW": "1"}),
    ("enroot start -e NEW=1 img python3 /r/train.py", {"NEW": "1"}),
    ("apptainer exec x.sif python3 /r/train.py", {"SEEN": "host", "PP": "4"}),
    ("apptainer exec --cleanenv --env NEW=1 x.sif python3 /r/train.py", {"NEW": "1"}),
    ("srun --container-image=x python3 /r/train.py", {"SEEN": "host", "PP": "4"}),
]


@pytest.mark.parametrize("line,want", ENV, ids=[x[0][:16] for x in ENV])
def test_the_launch_gets_what_its_container_passes(tmp_path, line, want):
    env = read_script(outer(tmp_path, line)).site.environ()
    assert not isinstance(env, PartialEnv)
    assert {k: v for k, v in env.items() if k in ("SEEN", "NEW", "PP", "HIDDEN")} == want


def test_an_env_file_leaves_the_environment_known_in_part(tmp_path):
    env = read_script(outer(tmp_path, "docker run --env-file e.list -e A=1 img python3 "
                            "/r/train.py")).site.environ()
    assert isinstance(env, PartialEnv) and env == {"A": "1"} and "--env-file" in env.why


def test_an_unmapped_entry_is_not_read_by_its_tail(tmp_path):
    # the checkout holds a train.py of another program: the container's /workspace/train.py
    # (no mount) is not that file, so it is judged as miles' training, on the bundled stack
    (tmp_path / "train.py").write_text(ALIEN)
    path = outer(tmp_path, f"docker run img python3 /workspace/train.py {FLAGS}")
    v = check_script(str(path), {})
    stack = v.extra["stack"]
    assert "(bundled)" in stack and "no mount of the command covers it" in stack
    assert "the image's own stack is not known here" in stack
    assert any("container: `python3 /workspace/train.py" in x
               for x in v.extra["report_lines"])
    # twin: mounted, the entry is that file, read: another program's train.py
    path = outer(tmp_path, f'docker run -v "$PWD":/workspace img python3 '
                 f"/workspace/train.py {FLAGS}")
    with pytest.raises(NoTrainingLaunch, match="builds neither"):
        check_script(str(path), {})
    # and a launch on the host reads it too (the same rule as before)
    with pytest.raises(NoTrainingLaunch, match="builds neither"):
        check_script(str(outer(tmp_path, f"python3 ./train.py {FLAGS}")), {})


def test_a_mount_from_outside_the_checkout_maps_the_entry_but_the_gate_refuses_it(tmp_path):
    # attack: the container's entry is mounted from the runner's folder; the stack must not
    # come from it (a fork's parser there would decide which flags are known)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "train.py").write_text(ALIEN + "# SECRET-3\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    for line in (f"docker run -v {secret}:/w img python3 /w/train.py {FLAGS}",
                 f'docker run -v "$PWD/../secret":/w -w /w img python3 train.py {FLAGS}',
                 f"apptainer exec -B {secret}:/w x.sif python3 /w/train.py {FLAGS}"):
        path = outer(repo, line)
        got = read_script(path)
        assert got.box[1] is None and "refused" in got.box[2]
        v = check_script(str(path), {})  # not read: not "builds neither" (ALIEN unread)
        assert "outside the input's checkout" in v.extra["stack"]
        assert "SECRET-3" not in json.dumps(v.extra)


def test_a_launch_in_a_container_text_is_the_container_s(tmp_path):
    # bash -c TEXT in the container: its launch is the container's too, its entry mapped
    (tmp_path / "train.py").write_text(ALIEN)
    path = outer(tmp_path, "docker run -v \"$PWD\":/w img bash -c 'cd /w && "
                 f"python3 train.py {FLAGS.replace('$PP', '3')}'")
    got = read_script(path)
    assert got.box is not None and got.box[1] == str(tmp_path / "train.py")
    with pytest.raises(NoTrainingLaunch, match="builds neither"):
        check_script(str(path), {})
    path = outer(tmp_path, "docker run img bash -c 'cd /w && "
                 f"python3 train.py {FLAGS.replace('$PP', '3')}'")
    got = read_script(path)
    assert got.box[1] is None and "no mount" in got.box[2]
    assert check_script(str(path), {}).ok is not None  # judged, on the bundled stack


@pytest.mark.parametrize("line,why", [
    ("docker exec mycont ray job submit -- python3 /root/miles/train.py", "already running"),
    ("docker run img python3 /root/miles/train.py", "no mount of the command covers it"),
    ('docker run -v "$PWD":/w img python3 train.py', "image's own working folder"),
    ("srun --container-image=x python3 -m miles.train", "(as miles/train.py)"),
    ('docker run -v "$PWD":/w -w "$WD" img python3 train.py', "working folder is not known"),
])
def test_an_entry_nothing_maps_says_why(tmp_path, line, why):
    (tmp_path / "train.py").write_text(ALIEN)  # the same tail here: not taken for it
    got = read_script(outer(tmp_path, f"{line} {FLAGS}"))
    assert got.box[1] is None and why in got.box[2]


def test_a_converter_in_a_container_is_found_instead(tmp_path):
    with pytest.raises(NoTrainingLaunch, match="found instead: python3 tools/convert.py"):
        check_script(str(outer(tmp_path, "docker run -v \"$PWD\":/w -w /w img python3 "
                               "tools/convert.py --hf-checkpoint x")), {})
