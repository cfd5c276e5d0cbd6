"""A launcher that imports its own checkout's package (miles' scripts/run_*.py do `import
miles...`) is checked with that checkout on its import path; where it cannot be found, the
error is one line with the way to give it (PYTHONPATH, or --path DIR)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from miles_topology.cli import main
from miles_topology.pylaunch.checkout import paths, root_of
from miles_topology.pylaunch.outcome import last_words as _tail

# the package lives at the checkout's root; the launcher two folders down imports it
PACKAGE = '''import subprocess


def execute_train(train_args: str):
    subprocess.run(["python3", "train.py", *train_args.split()], check=True)
'''
LAUNCHER = '''import rlstack.utils.command_utils as U


def main():
    U.execute_train("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
                    "--tensor-model-parallel-size 2 --num-layers 4")


if __name__ == "__main__":
    main()
'''


def checkout(root: Path, marker: str | None = ".git") -> Path:
    pkg = root / "rlstack" / "utils"
    pkg.mkdir(parents=True)
    (root / "rlstack" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "command_utils.py").write_text(PACKAGE)
    (root / "scripts").mkdir()
    (root / "scripts" / "run_tiny.py").write_text(LAUNCHER)
    if marker == ".git":
        (root / ".git").mkdir()
    elif marker:
        (root / marker).write_text("")
    return root / "scripts" / "run_tiny.py"


def runs(capsys, *argv) -> tuple[int, str]:
    code = main(["check", *argv])
    got = capsys.readouterr()
    if code == 2 and "sandbox" in got.err and "cannot" in got.err:
        pytest.skip("the launcher sandbox cannot run here: " + got.err)
    return code, got.out + got.err


def test_the_git_root_joins_the_path_when_the_package_lives_there(tmp_path, capsys):
    launcher = checkout(tmp_path / "repo")
    assert root_of(str(launcher)) == str(tmp_path / "repo")
    assert paths(str(launcher)) == [str(tmp_path / "repo")]
    code, out = runs(capsys, str(launcher))
    assert code == 0 and "All checks passed: 1 input." in out


def test_without_git_a_project_file_marks_the_checkout(tmp_path, capsys):
    launcher = checkout(tmp_path / "repo", marker="pyproject.toml")
    assert paths(str(launcher)) == [str(tmp_path / "repo")]


def test_a_checkout_it_cannot_find_gets_a_one_line_hint_and_path_works(tmp_path, capsys):
    launcher = checkout(tmp_path / "repo", marker=None)
    assert paths(str(launcher)) == []  # no .git, no project file: not guessed
    code, out = runs(capsys, str(launcher))
    assert code == 2 and len(out.strip().splitlines()) == 1
    assert "imports rlstack" in out and "PYTHONPATH=" in out and "--path" in out
    code, out = runs(capsys, "--path", str(tmp_path / "repo"), str(launcher))
    assert code == 0, out
    assert main(["check", "--path", str(tmp_path / "nowhere"), str(launcher)]) == 2
    assert "--path" in capsys.readouterr().err


def test_a_package_that_does_not_live_there_is_not_added(tmp_path):
    launcher = checkout(tmp_path / "repo")
    shutil.rmtree(tmp_path / "repo" / "rlstack")
    assert paths(str(launcher)) == []


def test_a_framework_checkout_joins_the_path_for_a_helper_that_imports_it(tmp_path, capsys):
    # the launcher imports only a helper it puts on sys.path; the helper imports the
    # checkout's own slime package (held-out: a slime fork's scripts/run_qwen3_4b_fsdp.py)
    root = tmp_path / "repo"
    checkout(root)
    (root / "rlstack").rename(root / "slime")
    (root / "tests").mkdir()
    (root / "tests" / "helper.py").write_text("from slime.utils.command_utils import *\n")
    launcher = root / "scripts" / "run_helper.py"
    launcher.write_text("import sys\nfrom pathlib import Path\n\n"
                        "sys.path.append(str(Path(__file__).resolve().parents[1] / 'tests'))\n"
                        "import helper as U\n\n" + LAUNCHER.split("\n\n\n", 1)[1])
    assert paths(str(launcher)) == [str(root)]
    code, out = runs(capsys, str(launcher))
    assert code == 0 and "All checks passed: 1 input." in out, out


def test_the_tail_of_a_typer_error_box_is_its_text():
    err = ("╭─ Traceback ─────╮\n│ run.py:3 in <module>            │\n"
           "│ ModuleNotFoundError: No module named 'miles' │\n╰─────────────────╯\n")
    assert _tail(err) == ": ModuleNotFoundError: No module named 'miles'"
