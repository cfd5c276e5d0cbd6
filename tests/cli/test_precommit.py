"""pre-commit itself, with this repository's hooks (.pre-commit-hooks.yaml) at the tag the
README names, over a repository of launch scripts: exactly the invalid script fails.

Offline: the hook repository is a local git repository holding the hooks file, tagged
v<version>; the `-installed` hook (language: system) runs the miles-topology of this
environment, so pre-commit builds no environment and needs no index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

from miles_topology import __version__

pytest.importorskip("pre_commit")

VALID = """#!/bin/bash
set -ex
MODEL_ARGS=(--num-layers 4 --num-attention-heads 4)
python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --tensor-model-parallel-size 2 --sequence-parallel "${MODEL_ARGS[@]}"
"""
INVALID = VALID.replace("--tensor-model-parallel-size", "--tensor-model-paralel-size")
SETUP = """#!/bin/bash
export PYTHONPATH=/root/Megatron-LM:$PYTHONPATH
pip install -e /root/miles --no-deps
"""
SUPPRESSED = """#!/bin/bash
PERF_ARGS=(
   --tensor-model-parallel-size 1
   --sequence-parallel   # miles-topology: disable=sp-ignored
)
python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --num-layers 4 --num-attention-heads 4 "${PERF_ARGS[@]}"
"""


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                    "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.fixture
def repos(tmp_path):
    hooks = tmp_path / "miles-topology"  # this repository's hooks, tagged as the README says
    hooks.mkdir()
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", hooks)
    git(hooks, "init", "-q")
    git(hooks, "add", ".")
    git(hooks, "commit", "-qm", "hooks")
    git(hooks, "tag", f"v{__version__}")
    work = tmp_path / "launchers"
    work.mkdir()
    for name, text in {"run-valid.sh": VALID, "run-typo.sh": INVALID, "setup-env.sh": SETUP,
                       "run-suppressed.sh": SUPPRESSED}.items():
        (work / name).write_text(text)
    (work / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: v{__version__}\n    hooks:\n"
        "      - id: miles-topology-check-installed\n")
    git(work, "init", "-q")
    git(work, "add", ".")
    git(work, "commit", "-qm", "launchers")
    return work, tmp_path / "pre-commit-home"


def pre_commit(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if "PYTHONPATH" in os.environ:  # a checkout under test: its code, not an installed one
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--color", "never",
                           *args], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_suppressed_warning_is_real_without_its_directive(tmp_path, capsys):
    """The suppressed script does warn without the directive (else the case proves nothing),
    and a lone setup script named alone is still no training job (exit 2)."""
    from miles_topology.cli import main

    bare, kept = tmp_path / "bare.sh", tmp_path / "kept.sh"
    bare.write_text(SUPPRESSED.replace("   # miles-topology: disable=sp-ignored", ""))
    kept.write_text(SUPPRESSED)
    assert main(["check", "--quiet", str(bare)]) == 0
    assert "warning [sp-ignored]" in capsys.readouterr().out
    assert main(["check", "--quiet", str(kept)]) == 0
    assert capsys.readouterr().out == ""
    (tmp_path / "setup-env.sh").write_text(SETUP)
    assert main(["check", str(tmp_path / "setup-env.sh")]) == 2
    assert main(["check", "--batch", str(tmp_path / "setup-env.sh")]) == 0


@pytest.mark.slow
def test_pre_commit_fails_exactly_the_invalid_script(repos, capsys):
    work, home = repos
    whole = pre_commit(work, home, "--all-files")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    out = whole.stdout
    assert "run-typo.sh" in out and "did you mean --tensor-model-parallel-size?" in out
    for other in ("run-valid.sh", "setup-env.sh", "run-suppressed.sh"):
        assert other not in out, out  # quiet: a passing file prints nothing
    for name, want in {"run-valid.sh": 0, "run-typo.sh": 1, "setup-env.sh": 0,
                       "run-suppressed.sh": 0}.items():
        one = pre_commit(work, home, "--files", name)
        assert one.returncode == want, (name, one.stdout + one.stderr)
