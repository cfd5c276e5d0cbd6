"""`check FOLDER` finds files as linters do: recursively, by content, honouring .gitignore and
`exclude`/`extend-exclude`; helpers and model files are skipped and counted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import SCRIPTS

from miles_topology.cli import main
from miles_topology.reading.discover import Ignore, find, kind

LAUNCH = "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate " \
         "--num-layers 4 --num-attention-heads 4 {extra}\n"
MODEL = "MODEL_ARGS=(--num-layers 4 --num-attention-heads 4 --hidden-size 64)\n"
HELPER = '"""Helpers of the example (slime examples/retool/tool_sandbox.py style)."""\n' \
         "def run_tool(code):\n    return eval(code)\n"
DATAPREP = "import json\n\nif __name__ == '__main__':\n    print(json.dumps({}))\n"
LAUNCHER = """import subprocess

def main():
    subprocess.run(["python3", "train.py", "--actor-num-nodes", "1",
                    "--actor-num-gpus-per-node", "8", "--colocate"], check=True)

if __name__ == "__main__":
    main()
"""


def upstream_like(root: Path) -> Path:
    """examples/ as miles has it: an __init__.py at the top, launch scripts two levels down
    (one invalid), model files, helper modules, data preparation, a README."""
    ex = root / "examples"
    for d in ("lora", "retool", "infra/low_precision", "models"):
        (ex / d).mkdir(parents=True)
    (ex / "__init__.py").write_text("")
    (ex / "README.md").write_text("# examples\n")
    (ex / "lora" / "run-lora.sh").write_text("#!/bin/bash\n" + LAUNCH.format(extra=""))
    (ex / "infra" / "low_precision" / "run-fp8.sh").write_text(
        "#!/bin/bash\n" + LAUNCH.format(extra="--tensor-model-parallel-size 3"))  # 8 % 3
    (ex / "models" / "qwen3-4B.sh").write_text(MODEL)
    (ex / "retool" / "tool_sandbox.py").write_text(HELPER)
    (ex / "retool" / "rl_data_preprocess.py").write_text(DATAPREP)
    (ex / "retool" / "retool_rl.sh").write_text("#!/bin/bash\n" + LAUNCH.format(extra=""))
    return ex


def test_kind_by_content(tmp_path):
    files = {"run.sh": LAUNCH.format(extra=""), "model.sh": MODEL, "helper.py": HELPER,
             "prep.py": DATAPREP, "run.py": LAUNCHER, "notes.txt": "python3 train.py\n",
             "moe.topology.yaml": "tp: 2\n", "cfg.yaml": "tp: 2\nep: 2\n",
             "sglang.yaml": "tp: 2\nattention_backend: fa3\n",
             "runner": "#!/usr/bin/env bash\n" + LAUNCH.format(extra=""),
             # miles' train.py: the entry itself, whose message names train_async.py
             "train.py": 'def main(args):\n    assert args, "run train_async.py"\n\n'
                         'if __name__ == "__main__":\n    main(None)\n',
             "mod.sh": "python3 -m miles.train --colocate\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    got = {n: kind(str(tmp_path / n)) for n in files}
    assert got == {"run.sh": "script", "model.sh": None, "helper.py": None, "prep.py": None,
                   "run.py": "launcher", "notes.txt": None, "moe.topology.yaml": "yaml",
                   "cfg.yaml": "yaml", "sglang.yaml": None, "runner": "script",
                   "train.py": None, "mod.sh": "script"}


def test_a_folder_is_walked_recursively_and_the_invalid_script_found(tmp_path, capsys):
    """The issue's `check miles/examples`: it used to check only __init__.py and exit 0."""
    ex = upstream_like(tmp_path)
    assert main(["check", str(ex)]) == 1
    out = capsys.readouterr().out
    assert f"{ex / 'infra' / 'low_precision' / 'run-fp8.sh'}: INVALID" in out
    assert "run-lora.sh" not in out and "retool_rl.sh" not in out  # clean: silent
    assert "UNREADABLE" not in out and "tool_sandbox" not in out
    assert "errors in 3 inputs; 1 invalid; 4 other files skipped (4 no training " \
           "launch)." in out  # __init__.py, the model file, the helper, the data prep


def test_a_folder_of_helpers_and_launch_scripts_is_never_unreadable(tmp_path, capsys):
    """The issue's `check slime/examples/retool`: helpers ran as launchers, UNREADABLE, 2."""
    ex = upstream_like(tmp_path)
    assert main(["check", "--format", "json", str(ex / "retool")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(ex / "retool" / "retool_rl.sh") and data["ok"]


def test_gitignore_and_exclude(tmp_path, capsys):
    ex = upstream_like(tmp_path)
    (tmp_path / ".git").mkdir()  # the work tree's root: .gitignore files up to here count
    (tmp_path / ".gitignore").write_text("# generated\n/examples/lora/\n*.bak.sh\n")
    (ex / "lora" / "run-old.bak.sh").write_text(LAUNCH.format(extra=""))
    (ex / "retool" / ".gitignore").write_text("*.sh\n!retool_rl.sh\n")
    (ex / "retool" / "scratch.sh").write_text(LAUNCH.format(extra=""))
    venv = ex / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "run.sh").write_text(LAUNCH.format(extra=""))
    got = [str(Path(p).relative_to(ex)) for p in find([str(ex)]).inputs]
    assert got == ["infra/low_precision/run-fp8.sh", "retool/retool_rl.sh"]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.miles-topology]\nextend-exclude = ["infra/"]\n')
    assert main(["check", str(ex)]) == 0  # the invalid one is excluded now
    capsys.readouterr()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.miles-topology]\nexclude = ["examples/infra/**"]\n')
    assert main(["check", "--format", "json", str(ex)]) == 0  # .venv no longer excluded
    paths = [Path(d["path"]).relative_to(ex) for d in json.loads(capsys.readouterr().out)]
    assert [str(p) for p in paths] == [".venv/bin/run.sh", "retool/retool_rl.sh"]
    (tmp_path / "pyproject.toml").write_text('[tool.miles-topology]\nexclude = "infra"\n')
    assert main(["check", str(ex)]) == 2
    assert "exclude must be a list of strings" in capsys.readouterr().err


@pytest.mark.parametrize(("pattern", "path", "is_dir", "want"), [
    ("build", "a/build", True, True),
    ("/build", "a/build", True, False),
    ("/build", "build", True, True),
    ("logs/", "x/logs", False, False),
    ("logs/", "x/logs", True, True),
    ("a/**/z.sh", "a/b/c/z.sh", False, True),
    ("a/**/z.sh", "a/z.sh", False, True),
    ("**/tmp", "q/r/tmp", True, True),
    ("*.sh", "dir/x.sh", False, True),
    ("d/*.sh", "d/e/x.sh", False, False),
    ("run-[0-9].sh", "run-7.sh", False, True),
])
def test_gitignore_patterns(tmp_path, pattern, path, is_dir, want):
    rules = Ignore.of([pattern], str(tmp_path))
    assert rules.ignored(str(tmp_path / path), is_dir) is want


def test_named_files_are_checked_as_given(tmp_path):
    """A file named on the command line is read whatever its content (as ruff does)."""
    shutil.copy(SCRIPTS / "run-qwen3-4B.sh", tmp_path / "x.sh")
    (tmp_path / "model.sh").write_text(MODEL)
    got = find([str(tmp_path / "model.sh"), str(tmp_path / "x.sh")])
    assert got.inputs == [str(tmp_path / "model.sh"), str(tmp_path / "x.sh")]
    assert not got.walked and not got.skipped
