"""A script that runs the training script in a container (``docker run -v "$PWD":/workspace
-w /workspace IMAGE bash /workspace/scripts/run.sh``): the inner ``bash FILE`` is followed
when the command's own mount or working folder maps the container path to a file here,
through the gate as ``bash FILE`` is; any other path is a clear refusal naming the
container and the path, never a file looked for by name (shell/containers.py)."""

import subprocess

import pytest
from support import bash_launch, flag_values

from miles_topology.judging.check_script import check_script
from miles_topology.model.errors import NoTrainingLaunch
from miles_topology.shell import read_script
from miles_topology.shell.containers import host_path, inside

INNER = ('python3 train.py --tensor-model-parallel-size "${TP:-1}" '
         '--pipeline-model-parallel-size "${PP:-1}"\n')


def checkout(tmp_path, line: str, prelude: str = "export TP=4 PP=2\n"):
    """A checkout with scripts/run-x.sh and an outer script that runs it by `line`."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "run-x.sh").write_text(INNER)
    outer = tmp_path / "outer.sh"
    outer.write_text(prelude + line + "\n")
    got = subprocess.run(["bash", "-n", str(outer)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr  # the fixture is bash
    return outer


def sizes(path) -> tuple:
    got = {fv.flag: fv.value for fv in read_script(path).argv}
    return got.get("--tensor-model-parallel-size"), got.get("--pipeline-model-parallel-size")


# each form, and what its shell sees of the outer script's exported TP=4 PP=2: docker,
# podman and enroot pass only their -e/--env words; apptainer, singularity and srun (pyxis,
# slurm's --export=ALL) pass the environment
FOLLOWED = [
    ('docker run --rm --gpus all -v "$PWD":/workspace -w /workspace myimage '
     "bash /workspace/scripts/run-x.sh", ("1", "1")),
    ('docker run --rm -it -e TP -e PP=8 -v "$(pwd):/workspace" -w /workspace myimage '
     "bash scripts/run-x.sh", ("4", "8")),
    ("podman run --volume=$(pwd)/scripts:/s --workdir=/s img:1 bash run-x.sh", ("1", "1")),
    ('docker container run --mount type=bind,source="$PWD",target=/w img '
     "bash /w/scripts/run-x.sh", ("1", "1")),
    ("sudo docker run -v .:/w -e TP=2 img bash /w/scripts/run-x.sh", ("2", "1")),
    ("nohup docker run -v `pwd`:/w -v data:/w/data img bash /w/scripts/run-x.sh &> log &",
     ("1", "1")),
    ("apptainer exec --nv --bind $(pwd):/work image.sif bash /work/scripts/run-x.sh",
     ("4", "2")),
    ('singularity exec -B "/data,$PWD:/work" image.sif bash /work/scripts/run-x.sh',
     ("4", "2")),
    ("apptainer exec image.sif bash scripts/run-x.sh", ("4", "2")),  # the host's cwd
    # apptainer's --workdir is scratch space, not the working folder
    ('apptainer exec --workdir /tmp/scratch "$SIF" bash scripts/run-x.sh', ("4", "2")),
    ('docker run -v "$PWD":/w -w /w "${IMAGE}:latest" bash scripts/run-x.sh', ("1", "1")),
    ("apptainer exec --cleanenv --env TP=3 image.sif bash scripts/run-x.sh", ("3", "1")),
    ('srun -N 1 --container-image=nvcr.io/x --container-mounts="$PWD":/ws:ro '
     "--container-workdir=/ws bash scripts/run-x.sh", ("4", "2")),
    ('enroot start --rw --mount "$PWD:/ws" pytorch bash /ws/scripts/run-x.sh', ("1", "1")),
    # a `bash FILE` in the container's text: FILE mapped by the container's mounts
    ('docker run -e TP=2 -v "$PWD":/w img bash -c "bash /w/scripts/run-x.sh"', ("2", "1")),
    ('docker run -v "$PWD":/w -w /w img bash -lc "cd /w/scripts && bash run-x.sh"',
     ("1", "1")),
    # srun runs the container (the environment passes), the container runs the shell
    ("srun -N 2 --ntasks-per-node=1 apptainer exec --nv --bind $(pwd):/work img.sif "
     "bash /work/scripts/run-x.sh", ("4", "2")),
    ("srun -N 2 apptainer exec img.sif bash -c 'export PP=3; bash scripts/run-x.sh'", ("4", "3")),
    # srun's switches and its options whose value is optional (--kill-on-bad-exit, -K:
    # only after `=`) take no word; -q, -F and --ntasks-per-gpu take the next one
    # (SchedMD/slurm src/common/slurm_opt.c has_arg)
    ("srun --exclusive --kill-on-bad-exit -q normal -F nodes.txt --ntasks-per-gpu 1 "
     "--no-container-mount-home --container-image nvcr.io/x "
     '--container-mounts "$PWD":/ws --container-workdir /ws bash scripts/run-x.sh',
     ("4", "2")),
]


@pytest.mark.parametrize("line,want", FOLLOWED, ids=[x[0].split(" -")[0] for x in FOLLOWED])
def test_each_container_form_is_followed_through_its_mount(tmp_path, line, want):
    assert sizes(checkout(tmp_path, line)) == want


def test_the_innermost_mount_decides():
    c = inside(["docker", "run", "-v", "/a:/w", "-v", "./b:/w/sub", "-v", "vol:/w/data",
                "img", "bash", "/w/sub/x.sh"])
    assert host_path(c, "/w/sub/x.sh") == ("b/x.sh", "")
    assert host_path(c, "/w/x.sh") == ("/a/x.sh", "")
    assert host_path(c, "/w/data/x.sh")[0] is None  # a named volume: no file here
    assert host_path(c, "/w/../etc/x.sh")[0] is None  # normalised first: no mount covers it


UNMAPPED = [
    ("docker exec -it mycont bash /root/slime/scripts/run-x.sh", "mycont",
     "already running"),
    ('docker exec "$CONTAINER" bash /root/slime/scripts/run-x.sh', "$CONTAINER",
     "already running"),
    ('docker run -v "$PWD":/w -w "$WD" img bash scripts/run-x.sh', "img",
     "working folder is not known"),
    ("docker run img bash /root/slime/scripts/run-x.sh", "img", "no mount"),
    ('docker run -v "$PWD":/w img bash scripts/run-x.sh', "img", "image's own working"),
    ("docker run -v data:/w img bash /w/scripts/run-x.sh", "img", "named volume"),
    ('docker run -v "$X":/w img bash /w/scripts/run-x.sh', "img", "not known here"),
    # "$PWD/$B" is not the working folder: never taken for it
    ('docker run -v "$PWD/$B:/w" img bash /w/scripts/run-x.sh', "img", "not known here"),
    ("apptainer exec --containall x.sif bash scripts/run-x.sh", "x.sif", "working folder"),
]


@pytest.mark.parametrize("line,name,why", UNMAPPED, ids=[x[0][:24] for x in UNMAPPED])
def test_an_unmapped_container_path_is_named_never_guessed(tmp_path, line, name, why):
    # the checkout holds scripts/run-x.sh, the same tail as /root/slime/scripts/run-x.sh:
    # still not read, as nothing says the container's file is this one
    outer = checkout(tmp_path, line)
    assert read_script(outer).entry is None
    with pytest.raises(NoTrainingLaunch) as e:
        check_script(str(outer), {})
    said = str(e.value)
    assert f"in the container {name} (" in said and "scripts/run-x.sh" in said
    assert why in said and "outer.sh:2" in said
    assert "$PYTHON" not in said  # not the unrelated hint of a program named by a variable


def test_a_mount_of_a_folder_outside_the_checkout_is_refused_by_the_gate(tmp_path):
    # attack: a pull request mounts the runner's folder at the container's script path
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "run.sh").write_text("python3 train.py --wandb-key SECRET-1\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    for line in (f"docker run -v {secret}:/workspace img bash /workspace/run.sh",
                 f"apptainer exec -B {secret}:/w x.sif bash /w/run.sh",
                 'docker run -v "$PWD/../secret":/w -w /w img bash run.sh'):
        outer = checkout(repo, line)
        with pytest.raises(NoTrainingLaunch, match="outside the input's checkout") as e:
            check_script(str(outer), {})
        assert "SECRET-1" not in str(e.value)
    # /etc mounted: refused, and no file of the checkout is read for it by its tail
    outer = checkout(repo, "docker run -v /etc:/workspace img bash /workspace/scripts/run-x.sh")
    with pytest.raises(NoTrainingLaunch, match=r"is /etc/scripts/run-x\.sh on this machine"):
        check_script(str(outer), {})


def test_a_mapped_script_linked_out_of_the_checkout_is_refused(tmp_path):
    secret = tmp_path / "secret.sh"
    secret.write_text("python3 train.py --wandb-key SECRET-2\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    outer = checkout(repo, 'docker run -v "$PWD":/w img bash /w/scripts/link.sh')
    (repo / "scripts" / "link.sh").symlink_to(secret)
    with pytest.raises(NoTrainingLaunch, match="refused") as e:
        check_script(str(outer), {})
    assert "SECRET-2" not in str(e.value)
    (repo / "scripts" / "link.sh").unlink()  # twin: a link inside the checkout is read
    (repo / "scripts" / "link.sh").symlink_to(repo / "scripts" / "run-x.sh")
    assert sizes(outer) == ("1", "1")


# stand-ins: srun runs its command; apptainer runs its command in the host's working folder
# with the environment passed (its defaults), as the reader assumes
STANDINS = {
    "srun": "while [[ $1 == -* ]]; do case $1 in -N|-n|--nodes) shift 2;; *) shift;; esac; "
            'done\nexec "$@"\n',
    "apptainer": "shift\nwhile [[ $1 == -* ]]; do case $1 in -B|--bind) shift 2;; *) shift;; "
                 'esac; done\nshift\nexec "$@"\n',
}


@pytest.mark.parametrize("line", [
    "srun -N 2 apptainer exec img.sif bash -c 'export PP=3; bash scripts/run-x.sh'",
    "srun -N 2 --exclusive apptainer exec --nv img.sif bash scripts/run-x.sh",
    "srun -N 2 apptainer exec img.sif bash -c 'export TP=5; bash -c \"bash scripts/run-x.sh\"'",
])
def test_srun_running_a_container_is_read_as_bash_runs_it(tmp_path, line):
    outer = checkout(tmp_path, line)
    (tmp_path / "bin").mkdir()
    for name, body in STANDINS.items():
        (tmp_path / "bin" / name).write_text("#!/bin/bash\n" + body)
        (tmp_path / "bin" / name).chmod(0o755)
    truth = flag_values(bash_launch(outer, [], tmp_path))
    assert sizes(outer) == (truth["--tensor-model-parallel-size"],
                            truth["--pipeline-model-parallel-size"])
