"""A YAML a Python launcher writes in its sandbox and names by flag (slime's PPO CI tests:
`--megatron-config-path` of a NamedTemporaryFile): the sandboxed child keeps its text when the
launch is recorded (pylaunch/child.py `_written`), the record carries it (records.py), and
the channels judge it as they judge a checkout's YAML, pointing at the launcher's line
(reading/sources.py `WRITTEN`). Each attack keeps a file out that the guard alone refuses:
the secret's folder is given with --read, so the kernel would let the launcher read it.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from hostile import clean
from support import run_cli

from miles_topology.judging.check_launcher import check_python_all
from miles_topology.pylaunch import read_python_launches, records
from miles_topology.pylaunch.records import RecordReader
from miles_topology.reading import gate

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")

SECRET = "fake-secret-written-0123456789"
ACTOR_TP = "megatron:\n  - name: default\n    role: actor\n    overrides:\n" \
           "      lr: 1e-6\n      tensor_model_parallel_size: 4\n"

# slime's CI-test shape (tests/test_qwen3_4B_ppo.py): a YAML written to a temporary file, its
# name passed in the train args, execute_train running the command line
LAUNCHER = '''\
import os
import posix
import shlex
import subprocess
import tempfile

TRAIN = ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate --num-layers 4 "
         "--tensor-model-parallel-size 2 --advantage-estimator {estimator} ")


def execute_train(train_args):
    subprocess.run(f"python3 /root/slime/train.py {{train_args}}", shell=True, check=True)


def write_config():
    text = {yaml!r}
{body}


def execute():
    name = write_config()
    train_args = f"{flag} {{shlex.quote(name)}} " + TRAIN
    execute_train(train_args)


if __name__ == "__main__":
    execute()
'''
TEMPFILE = """\
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write(text)
    config.close()
    return config.name
"""


def launcher(tmp_path: Path, body: str = TEMPFILE, yaml: str = ACTOR_TP,
             estimator: str = "grpo", flag: str = "--megatron-config-path") -> Path:
    repo = tmp_path / "slime-ci"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    (repo / "tests").mkdir(exist_ok=True)
    path = repo / "tests" / "test_ppo_written.py"
    path.write_text(LAUNCHER.format(estimator=estimator, yaml=yaml, flag=flag,
                                    body=textwrap.indent(textwrap.dedent(body), "    ")))
    return path


def passes(path: Path) -> int:
    """The launcher's line that passes the flag."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1)
                if "train_args = f" in line)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file standing in for a secret, outside the checkout and the sandbox."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "secret.yaml").write_text(
        f"megatron:\n  - role: actor\n    overrides: {{lr: {SECRET}, num_nodes: 2}}\n")
    return folder


def judged(path: Path, *, trust: bool = False, reads=()):
    (v,) = check_python_all(str(path), [], trust=trust, reads=[str(r) for r in reads])
    return v


def said(v) -> str:
    return json.dumps([p.as_dict() for p in v.problems]) + json.dumps(v.extra, default=str)


def ours(v) -> list[tuple[str, str]]:
    return [(p.code, p.severity) for p in v.problems if "config" in p.code]


# ---- what the launcher wrote is judged ------------------------------------------------------


def test_a_role_yaml_written_to_a_tempfile_is_judged_at_the_launcher_line(tmp_path):
    path = launcher(tmp_path)
    v = judged(path)
    assert v.ok and v.summary["tp"] == 4 and v.summary["dp"] == 2, said(v)
    (w,) = [p for p in v.warnings if p.code == "megatron-config-topology"]
    assert w.location.path == str(path) and w.location.line == passes(path)
    assert "<written by the launcher: tmp" in w.message and "/work/" not in w.message


def test_a_critic_on_another_grid_is_the_error_a_checkout_yaml_gives(tmp_path):
    critic = "megatron:\n  - role: critic\n    overrides:\n      tensor_model_parallel_size: 4\n"
    v = judged(launcher(tmp_path, yaml=critic, estimator="ppo"))
    assert "megatron-config-roles-apart" in [p.code for p in v.errors], said(v)
    # the twin: the same YAML in the checkout, named by its path
    (tmp_path / "slime-ci" / "critic.yaml").write_text(critic)
    twin = judged(launcher(tmp_path, body="return os.path.join(os.path.dirname(__file__), "
                           "'..', 'critic.yaml')\n", yaml=critic, estimator="ppo"))
    assert [p.code for p in twin.errors] == [p.code for p in v.errors]


def test_a_custom_config_yaml_goes_through_the_same_reader(tmp_path):
    v = judged(launcher(tmp_path, yaml="tensor_model_parallel_size: 4\n",
                        flag="--custom-config-path"))
    assert "custom-config-layout" in [p.code for p in v.errors], said(v)


def test_a_yaml_written_to_a_fixed_path_outside_the_work_folder_is_its_copy(tmp_path):
    # slime's U.save_to_temp_file writes /tmp/slime_temp_file_<time>_<n>.yaml (624b824
    # slime/utils/external_utils/command_utils.py:246-250): the sandbox put that write in its
    # shadow; the copy this run made is judged, never the real path (left as it was)
    name = f"/tmp/h9-written-{tmp_path.name}.yaml"
    body = f"with open({name!r}, 'w') as f:\n    f.write(text)\nreturn {name!r}\n"
    v = judged(launcher(tmp_path, body=body, yaml="tensor_model_parallel_size: 4\n",
                        flag="--custom-config-path"))
    assert "custom-config-layout" in [p.code for p in v.errors], said(v)
    assert not Path(name).exists()
    # a file already there that this run did not write is not read (the gate's, as before)
    Path(name).write_text(f"lr: {SECRET}\n")
    try:
        (got,) = read_python_launches(str(launcher(tmp_path, body=f"return {name!r}\n",
                                                   flag="--custom-config-path")), [])
        assert got.argv[:2] == ["--custom-config-path", name] and not got.files
    finally:
        Path(name).unlink()


def test_a_relative_name_from_the_launchers_folder_is_judged(tmp_path):
    # `--megatron-config-path m.yaml` written in the launcher's current folder (the work
    # folder), or in a folder it changed to: the name is found from where the command runs
    for body, name in (("""
    with open("m.yaml", "w") as f:
        f.write(text)
    return "m.yaml"
    """, "m.yaml"), ("""
    os.makedirs("run/cfg")
    os.chdir("run")
    with open("cfg/m2.yaml", "w") as f:
        f.write(text)
    return "./cfg/m2.yaml"
    """, "m2.yaml")):
        path = launcher(tmp_path, body)
        v = judged(path)
        assert v.ok and v.summary["tp"] == 4, said(v)
        (w,) = [p for p in v.warnings if p.code == "megatron-config-topology"]
        assert w.location.path == str(path) and f"launcher: {name}>" in w.message


def test_a_relative_name_of_the_checkout_is_read_there_not_captured(tmp_path):
    # nothing of that name in the work folder: the checker reads the checkout's file
    (tmp_path / "slime-ci" / "tests").mkdir(parents=True, exist_ok=True)
    (tmp_path / "slime-ci" / "tests" / "roles.yaml").write_text(ACTOR_TP)
    path = launcher(tmp_path, 'return "roles.yaml"\n')
    v = judged(path)
    assert v.summary["tp"] == 4, said(v)
    (w,) = [p for p in v.warnings if p.code == "megatron-config-topology"]
    assert "written by the launcher" not in w.message


# ---- what the guard keeps out ---------------------------------------------------------------


def unread(v, why: str) -> None:
    (p,) = [p for p in v.problems if p.code == "megatron-config-unread"]
    assert p.severity == "skipped" and why in p.message, p.message
    assert SECRET not in said(v) and v.summary["tp"] == 2


def test_a_link_out_of_the_sandbox_is_not_read(tmp_path, secret):
    last = f"""
    posix.symlink({str(secret / 'secret.yaml')!r}, os.path.join(tempfile.gettempdir(), "m.yaml"))
    return os.path.join(tempfile.gettempdir(), "m.yaml")
    """
    unread(judged(launcher(tmp_path, last), reads=[secret]), "resolves outside")
    folder = f"""
    posix.symlink({str(secret)!r}, os.path.join(tempfile.gettempdir(), "d"))
    return os.path.join(tempfile.gettempdir(), "d", "secret.yaml")
    """  # a folder linked out: O_NOFOLLOW alone would not see it
    unread(judged(launcher(tmp_path, folder), reads=[secret]), "resolves outside")


def test_a_relative_name_linked_out_of_the_sandbox_is_not_read(tmp_path, secret):
    last = f"""
    posix.symlink({str(secret / 'secret.yaml')!r}, "m.yaml")
    return "m.yaml"
    """
    unread(judged(launcher(tmp_path, last), reads=[secret]), "resolves outside")
    folder = f"""
    posix.symlink({str(secret)!r}, "d")
    return "d/secret.yaml"
    """
    unread(judged(launcher(tmp_path, folder), reads=[secret]), "resolves outside")


def test_a_forged_base_outside_the_sandbox_is_ignored(tmp_path, secret):
    work = tmp_path / "launcher-x" / "work"
    launch = {"kind": "subprocess", "argv": ["python3", "train.py"],
              "files": {str(work / "m.yaml"): {"text": "a"}}}
    for base, kept in ((str(work), str(work)), (str(work / "sub"), str(work / "sub")),
                       (str(secret), None), (str(work / ".." / "x"), None), ("work", None)):
        (got,) = RecordReader(str(tmp_path), str(work)).parse(
            json.dumps({**launch, "files_base": base}).encode())
        assert got["files_base"] == kept, base


@pytest.mark.parametrize("trust", [False, True])
def test_a_hard_link_is_not_read(tmp_path, secret, trust):
    # isolated, a link across the tmpfs fails: the launcher links its own file; trusted (no
    # kernel rules, one file system), the secret itself
    source = str(secret / "secret.yaml") if trust else "os.path.join(tempfile.gettempdir(), 'a')"
    body = f"""
    a = os.path.join(tempfile.gettempdir(), "a")
    with open(a, "w") as f:
        f.write(text)
    posix.link({source if not trust else repr(source)}, os.path.join(tempfile.gettempdir(), "b"))
    return os.path.join(tempfile.gettempdir(), "b")
    """
    unread(judged(launcher(tmp_path, body), trust=trust, reads=[secret]), "more than one link")


def test_a_fifo_is_never_opened_and_nothing_hangs(tmp_path):
    body = """
    path = os.path.join(tempfile.gettempdir(), "m.yaml")
    os.mkfifo(path)
    return path
    """
    unread(judged(launcher(tmp_path, body)), "not a regular file")


def test_an_oversized_file_is_not_read(tmp_path):
    body = f"""
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write(text + "#" * {records.TEXT_MAX})
    config.close()
    return config.name
    """
    unread(judged(launcher(tmp_path, body)), "KiB a file the launcher writes may be")
    fits = f"""
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write(text + "#" * ({records.TEXT_MAX} - len(text)))
    config.close()
    return config.name
    """  # the control: at the bound, it is read
    assert judged(launcher(tmp_path, fits)).summary["tp"] == 4


def test_a_hostile_file_name_is_escaped_in_text_and_github(tmp_path, capsys):
    body = """
    path = os.path.join(tempfile.gettempdir(), "m\\x1b[2J\\n::error::pwned\\u202e.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path
    """
    path = launcher(tmp_path, body)
    for fmt in ("text", "github"):
        code, out, err = run_cli(capsys, "check", "--output-format", fmt, str(path))
        assert "megatron-config-topology" in out, out + err
        clean(out + err, commands=fmt == "github")
        assert "\n::error::pwned" not in out + err


def test_a_forged_capture_outside_the_sandbox_is_ignored(tmp_path, secret):
    work = tmp_path / "launcher-x" / "work"
    launch = {"kind": "subprocess", "argv": ["python3", "train.py"]}
    inside, forged = str(work / "m.yaml"), str(secret / "secret.yaml")
    files = {inside: {"text": "a"}, forged: {"text": SECRET},
             str(work / ".." / "x.yaml"): {"text": SECRET}, "m.yaml": {"text": SECRET}}
    (got,) = RecordReader(str(tmp_path), str(work)).parse(
        json.dumps({**launch, "files": files}).encode())
    assert got["files"] == {inside: {"text": "a"}}
    for bad in ({inside: {"text": "a", "why": "size"}}, {inside: {"why": "mine"}},
                {inside: {"text": "x" * (records.TEXT_MAX + 1)}}, {inside: "a"},
                {f"{work}/{i}": {"why": "size"} for i in range(records.FILES_MAX + 1)}):
        assert RecordReader(str(tmp_path), str(work)).parse(
            json.dumps({**launch, "files": bad}).encode()) == [], bad


FORGE = """
import json, sys
_f = sys._getframe()
while _f is not None and "emit" not in _f.f_globals:
    _f = _f.f_back
emit = _f.f_globals["emit"]
emit({{"kind": "subprocess", "argv": ["python3", "/root/slime/train.py", *TRAIN.split(),
      "--megatron-config-path", {forged!r}], "files": {{{forged!r}: {{"text": {yaml!r}}}}}}})
raise SystemExit(0)
"""


def test_a_forged_record_line_cannot_stand_in_for_a_file_outside(tmp_path, secret):
    forged = str(secret / "secret.yaml")
    path = launcher(tmp_path)
    path.write_text(path.read_text().replace(
        'if __name__ == "__main__":\n    execute()',
        FORGE.format(forged=forged, yaml=ACTOR_TP + f"# {SECRET}\n")))
    with gate.checking(path):  # as `check` judges an input
        v = judged(path)
    (p,) = [p for p in v.problems if p.code == "megatron-config-unread"]
    assert "outside the input's checkout" in p.message and v.summary["tp"] == 2, said(v)
    assert SECRET not in said(v)
