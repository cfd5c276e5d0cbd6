"""pre-commit itself, with this repository's hooks (.pre-commit-hooks.yaml) pinned to a commit
as the README says (the repository has no tags), over a repository of launch scripts.

Offline: the hook repository is this checkout, cloned by pre-commit from file:// at HEAD;
the `-installed` hooks (language: system) run the miles-topology of this environment, so
pre-commit builds no environment and needs no index.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAUNCHERS, ROOT, SCRIPTS

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

MODEL_PY = """import os


def model_args() -> str:
    return f"--num-layers 4 --num-attention-heads {os.environ.get('HEADS', '4')} "
"""


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                    "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args], cwd=cwd,
                   check=True, capture_output=True)


def head() -> str | None:
    """This checkout's HEAD commit, when it is a git checkout whose HEAD has the hooks."""
    got = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    if got.returncode != 0:
        return None
    hooks = subprocess.run(["git", "-C", str(ROOT), "show", "HEAD:.pre-commit-hooks.yaml"],
                           capture_output=True, text=True).stdout
    return got.stdout.strip() if "miles-topology-migrate-check-installed" in hooks else None


def config(rev: str, *hooks: str) -> str:
    ids = "".join(f"      - id: {h}\n" for h in hooks)
    return f"repos:\n  - repo: file://{ROOT}\n    rev: {rev}\n    hooks:\n{ids}"


@pytest.fixture
def repos(tmp_path):
    """A repository of upstream-style launch scripts (a model file sourced from models/, a
    setup script, a suppressed warning, a migrated script) and one with a typo."""
    rev = head()
    if rev is None:
        pytest.skip("not a git checkout with the hooks committed at HEAD")
    work = tmp_path / "launchers"
    work.mkdir()
    shutil.copytree(SCRIPTS / "models", work / "models")
    for name in ("run-qwen3-4B.sh", "run-qwen3-30B-A3B.sh"):
        shutil.copy(SCRIPTS / name, work / name)
    for name, text in {"run-valid.sh": VALID, "run-typo.sh": INVALID, "setup-env.sh": SETUP,
                       "run-suppressed.sh": SUPPRESSED}.items():
        (work / name).write_text(text)
    # Python: a typer launcher, the same with a typo, its helper module and a model file
    # (miles' scripts/models/*.py shape), which the check hook skips without running
    shutil.copy(LAUNCHERS / "launch_utils.py", work / "launch_utils.py")
    launcher = (LAUNCHERS / "run_moe_typer.py").read_text()
    assert '"--tensor-model-parallel-size 4 ' in launcher
    (work / "run_moe.py").write_text(launcher)
    (work / "run_moe_typo.py").write_text(launcher.replace(
        '"--tensor-model-parallel-size 4 ', '"--tensor-model-paralel-size 4 '))
    (work / "models" / "tiny.py").write_text(MODEL_PY)
    shutil.copy(SCRIPTS / "run-qwen3-4B.sh", work / "run-migrated.sh")
    from miles_topology.migrations.runner import migrate, write

    write(migrate(work / "run-migrated.sh"))
    (work / "run-migrated.sh.bak").unlink()
    (work / ".pre-commit-config.yaml").write_text(config(
        rev, "miles-topology-check-installed", "miles-topology-migrate-check-installed"))
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


def _hooks(out: str) -> dict[str, str]:
    """hook name -> Passed / Failed / Skipped, from pre-commit's report."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r"^(miles-topology [^.\n]*?)\.{2,}(Passed|Failed|\(no files to check\)Skipped)$",
        out, re.M)}


@pytest.mark.slow
def test_pre_commit_fails_exactly_the_invalid_script(repos, capsys):
    """Both hooks on: the check fails on the script with the typo alone; migrate-check
    passes (never-migrated scripts and model files are not its business)."""
    work, home = repos
    whole = pre_commit(work, home, "--all-files")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    out = whole.stdout
    assert _hooks(out) == {"miles-topology check (installed)": "Failed",
                           "miles-topology migrate --check (installed)": "Passed"}, out
    assert "run-typo.sh" in out and "did you mean --tensor-model-parallel-size?" in out
    assert "run_moe_typo.py" in out and "--tensor-model-paralel-size" in out  # a launcher
    for other in ("run-valid.sh", "setup-env.sh", "run-suppressed.sh", "run-migrated.sh",
                  "run-qwen3-4B.sh", "models/", "run_moe.py", "launch_utils.py"):
        assert other not in out, out  # quiet: a passing file with no problem prints nothing
    # a passing file with a warning prints it (its --sglang-cuda-graph-bs is deprecated even
    # where some of its values are only known at run time), and does not fail the hook
    assert "run-qwen3-30B-A3B.sh: OK" in out and "warning [deprecated-flag]" in out
    for name, want in {"run-valid.sh": 0, "run-typo.sh": 1, "setup-env.sh": 0,
                       "run-suppressed.sh": 0, "run-migrated.sh": 0, "run_moe.py": 0,
                       "run_moe_typo.py": 1, "models/tiny.py": 0, "launch_utils.py": 0}.items():
        one = pre_commit(work, home, "--files", name)
        assert one.returncode == want, (name, one.stdout + one.stderr)
    (work / "run-typo.sh").unlink()  # without them, the whole repository passes both hooks
    (work / "run_moe_typo.py").unlink()
    git(work, "add", "-A")
    git(work, "commit", "-qm", "the typo's script removed")
    clean = pre_commit(work, home, "--all-files")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert set(_hooks(clean.stdout).values()) == {"Passed"}, clean.stdout


@pytest.mark.slow
def test_migrate_check_fails_exactly_the_script_with_a_layout_flag_to_move(repos):
    """A migrated script that gets a layout flag back fails migrate-check, alone."""
    work, home = repos
    (work / "run-typo.sh").unlink()
    (work / "run_moe_typo.py").unlink()
    text = (work / "run-migrated.sh").read_text()
    launch = 'python3 train.py "${TOPOLOGY_ARGS[@]}" \\\n'
    assert launch in text
    (work / "run-regressed.sh").write_text(
        text.replace(launch, launch + "   --context-parallel-size 1 \\\n"))
    git(work, "add", "-A")
    git(work, "commit", "-qm", "a layout flag written back")
    whole = pre_commit(work, home, "--all-files")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    out = whole.stdout
    assert _hooks(out) == {"miles-topology check (installed)": "Passed",
                           "miles-topology migrate --check (installed)": "Failed"}, out
    assert "run-regressed.sh: pending 0003" in out
    assert "run-migrated.sh" not in out and "models/" not in out and "setup-env" not in out


def test_install_and_hook_examples_name_revisions_that_exist():
    """The README's `pip install git+...@REV` and `rev:` examples, and the hooks file's,
    name no tag the repository does not have (it has none: they pin a commit)."""
    tags = set(subprocess.run(["git", "-C", str(ROOT), "tag"], capture_output=True,
                              text=True).stdout.split())
    for name in ("README.md", ".pre-commit-hooks.yaml"):
        text = (ROOT / name).read_text()
        revs = re.findall(r"rev:\s*(\S+)", text) + re.findall(r"git\+\S*@([^\"\s]+)", text)
        assert revs, name
        for rev in revs:
            assert rev in tags or not re.fullmatch(r"v?\d+(\.\d+)+", rev), (name, rev)
