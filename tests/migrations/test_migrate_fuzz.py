"""Mutated launch scripts through `migrate`: always a result or a clean refusal, never a
traceback; a result keeps bash's syntax, reads as the same job and is final."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation import mutated
from support import SCRIPTS, STEP_FIXTURES

from miles_topology.migrations.common import Refused
from miles_topology.migrations.runner import migrate, write

STEPS = STEP_FIXTURES
TEXTS = [p.read_text() for p in sorted(SCRIPTS.glob("*.sh"))] + \
    [p.read_text() for p in sorted(STEPS.glob("*/before.sh"))]
SNIPPETS = ["--tensor-model-parallel-size 2", "--colocate", "--rollout-num-gpus 4",
            "--rollout-num-gpus-per-node 8", "--sglang-enable-ep-moe", "--sglang-enable-deepep-moe",
            "--expert-model-parallel-size=$EP", "--actor-num-gpus-per-node ${G:-8}", "--topology x",
            " \\", "\\\n", "\n", "#", "'", '"', "$(", ")", "(", "${A[@]}", "A=(", "EP=4", "fi",
            "if true; then", "export TP", "&&", ";", "$((2*2))", "\t", "TOPOLOGY_ARGS=(x)",
            "# miles-topology-migration: 0002\n", "\0", "\xff"]
BASH = shutil.which("bash")


MUTATED = mutated(TEXTS, SNIPPETS, 0, 4)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(SCRIPTS / "models", d / "models")
    for model in STEPS.glob("*/models/*.sh"):
        shutil.copy(model, d / "models" / model.name)
    return d


def bash_ok(path: Path) -> bool:
    return subprocess.run([BASH, "-n", str(path)], capture_output=True).returncode == 0


def check(workdir: Path, text: str, env: dict, inline: bool) -> None:
    for p in workdir.iterdir():
        if p.is_file():
            p.unlink()
    path = workdir / "run.sh"
    path.write_text(text, errors="surrogateescape")
    try:
        out = migrate(path, env, inline)
    except Refused as e:
        assert e.code in (1, 2) and e.reason
        assert path.read_text(errors="surrogateescape") == text
        return
    if not out.applied:
        return
    syntax_was_ok = BASH is not None and bash_ok(path)
    write(out)
    assert migrate(path, env, inline).applied == []  # final: a second run is a no-op
    if syntax_was_ok:
        assert bash_ok(path), out.new


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MUTATED, inline=st.booleans(),
       env=st.dictionaries(st.sampled_from(["TP", "EP", "NNODES", "ASYNC", "1"]),
                           st.sampled_from(["1", "2", "4", "", "x"]), max_size=2))
def test_mutated_scripts_migrate_or_are_refused(workdir, text, inline, env):
    check(workdir, text, env, inline)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(SNIPPETS + ["python3 train.py", "--actor-num-nodes", "1",
                                                 "2", "X=2", "$X", "${X}", "P=(", ")",
                                                 "${P[@]}", "source models/qwen3-4B.sh"]),
                     max_size=30).map(" ".join))
def test_shell_soup_migrates_or_is_refused(workdir, text):
    check(workdir, text, {}, False)
