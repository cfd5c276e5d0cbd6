"""`python -m miles.train`: fast refusal without heavy imports, the dry-run plan, defaults."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from miles import train
from miles.defaults import LAYOUT, with_defaults

HEAVY = ("torch", "ray", "megatron")
ACCEPT_BAD = (
    "--actor-num-nodes 1 --actor-num-gpus-per-node 8 --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 2 --expert-model-parallel-size 8 "
    "--expert-tensor-parallel-size 1 --num-experts 64 --num-layers 8 --num-attention-heads 8 "
    "--colocate"
)
ACCEPT_DRY = (
    "--dry-run --actor-num-nodes 2 --actor-num-gpus-per-node 4 --expert-model-parallel-size 2 "
    "--expert-tensor-parallel-size 1 --num-experts 8 --num-layers 4 --num-attention-heads 4 "
    "--colocate"
)
DISAGG = (
    "--actor-num-nodes 2 --actor-num-gpus-per-node 4 --expert-model-parallel-size 8 "
    "--expert-tensor-parallel-size 1 --num-experts 16 --rollout-num-gpus 4 "
    "--rollout-num-gpus-per-engine 4 --num-gpus-per-node 4"
)


def launch(args: str | list[str], *pre: str, timeout: float = 120
           ) -> tuple[subprocess.CompletedProcess, float]:
    argv = args.split() if isinstance(args, str) else args
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, *pre, "-m", "miles.train", *argv], capture_output=True, text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - start


def imported(stderr: str) -> set[str]:
    """Top-level packages named by `python -X importtime` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_acceptance_refusal_is_fast_and_names_the_problem():
    done, wall = launch(ACCEPT_BAD)
    assert done.returncode == 1, done.stderr
    assert "expert-grid-divisibility" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert wall < 3.0, f"refusal took {wall:.2f}s"


def test_refusal_imports_no_torch_ray_or_megatron():
    done, _ = launch(ACCEPT_BAD, "-X", "importtime")
    assert done.returncode == 1
    names = imported(done.stderr)
    assert "miles_topology" in names  # the hook saw the imports
    assert not names & set(HEAVY), names & set(HEAVY)


def test_dry_run_imports_no_torch_ray_or_megatron():
    done, _ = launch(ACCEPT_DRY, "-X", "importtime")
    assert done.returncode == 0, done.stderr
    assert not imported(done.stderr) & set(HEAVY)


def test_every_problem_is_listed_with_code_and_fix():
    bad = (
        "--actor-num-gpus-per-node 8 --tensor-model-parallel-size 3 --expert-model-parallel-size 3"
        " --num-experts 8 --num-attention-heads 4 --moe-router-fusion --use-rollout-routing-replay"
    )
    done, _ = launch(bad)
    assert done.returncode == 1
    for code in ("dense-grid-divisibility", "expert-grid-divisibility",
                 "experts-not-divisible-by-ep", "heads-not-divisible-by-tp", "r3-router-fusion"):
        assert f"[{code}]" in done.stderr, code
    n = done.stderr.count("error [")
    assert done.stderr.count("fix: ") >= n >= 5
    assert f"{n} problems" in done.stderr


def test_acceptance_dry_run_prints_the_plan():
    done, _ = launch(ACCEPT_DRY)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "nothing started" in out
    assert "world 8 = 2 node(s) x 4 GPUs; order tp-cp-ep-dp-pp" in out
    assert "expert etp 1 x ep 2 x edp 4" in out and "dp 8" in out
    assert "node 1" in out and "r7" in out and "e4-7" in out  # map with coords and experts
    assert "etp0 ep1 edp3" in out
    assert "engine 7: node 1 GPU 3" in out
    assert "weight sync" in out and "engine 0 <- ranks" in out


def test_no_flags_is_the_embedded_default():
    done, _ = launch("--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "world 8 = 2 node(s) x 4 GPUs" in out
    assert "ep 2" in out and "(colocated)" in out
    assert "--use-rollout-routing-replay" in out and " ".join(LAYOUT) in out


def test_disaggregated_example_adds_a_rollout_node():
    done, _ = launch("--dry-run " + DISAGG)
    assert done.returncode == 0, done.stderr
    assert "engine 0: node 2 GPU 0-3" in done.stdout
    assert "3 node(s) with GPUs [4, 4, 4]" in done.stdout
    assert "engine 0 <- ranks 0-7" in done.stdout  # EP 8: every rank owns experts it needs


def test_layout_default_only_without_any_cluster_flag(tmp_path):
    full, added = with_defaults([])
    assert added[-len(LAYOUT):] == LAYOUT
    _, added = with_defaults(["--colocate"])
    assert "--actor-num-nodes" not in added and "--num-layers" in added
    _, added = with_defaults(["--num-layers", "8", "--use-routing-replay"])
    assert "--num-layers" not in added and "--use-rollout-routing-replay" not in added
    yaml = tmp_path / "t.yaml"
    yaml.write_text("nodes: 1\ngpus_per_node: 4\nlayers: 2\n")
    _, added = with_defaults(["--topology", str(yaml)])
    assert "--actor-num-nodes" not in added and "--num-layers" not in added


def test_yaml_then_flags_and_conflict(tmp_path):
    yaml = tmp_path / "t.yaml"
    yaml.write_text("nodes: 1\ngpus_per_node: 4\nep: 2\nexperts: 8\nlayers: 4\nheads: 4\n"
                    "colocate: true\n")
    done, _ = launch(["--dry-run", "--topology", str(yaml)])
    assert done.returncode == 0, done.stderr
    assert "world 4 = 1 node(s) x 4 GPUs" in done.stdout
    done, _ = launch(["--topology", str(yaml), "--expert-model-parallel-size", "4"])
    assert done.returncode == 1 and "[flag-conflict]" in done.stderr


@pytest.mark.parametrize("argv", [
    ["--steps", "two"], ["--steps"], ["--dry-run=yes"], ["--topology", "/nonexistent.yaml"],
    ["--metrics-out", "/nonexistent/dir/m.jsonl"], ["--topology"], ["--topology", "--colocate"],
])
def test_usage_and_unreadable_input_exit_2(argv):
    assert train.main(argv) == 2


def test_help_exits_0(capsys):
    assert train.main(["--help"]) == 0
    assert "usage: python -m miles.train" in capsys.readouterr().out


def test_job_flags_and_passthrough():
    job, rest = train.split_job_flags(
        ["--steps", "5", "--seed=7", "--dry-run", "--lr", "1e-6", "--num-layers", "4"])
    assert (job.steps, job.seed, job.dry_run) == (5, 7, True)
    assert rest == ["--lr", "1e-6", "--num-layers", "4"]
    read = train.read_flags(with_defaults(rest)[0])
    assert read.passthrough == ["--lr", "1e-6"]


def test_missing_backend_says_so_and_exits_2(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "miles.backend" else real(name, *a))
    monkeypatch.delitem(sys.modules, "miles.backend", raising=False)
    assert train.main([]) == 2
    assert "miles.backend.run_job" in capsys.readouterr().err


@pytest.mark.slow
def test_full_job_runs_on_a_local_cluster(tmp_path):
    """The real path: local 2x4 Ray cluster, the backend's job, clean shutdown."""
    metrics = tmp_path / "m.jsonl"
    done, _ = launch(["--steps", "1", "--metrics-out", str(metrics)], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step 1" in done.stdout
    assert metrics.exists()


def test_launcher_reports_the_same_flag_problems_as_check(capsys):
    """Typos and repeats (issue 10) come from flags.py, so the launcher agrees with check:
    a flag miles' parser refuses stops it (exit 1), a repeat warns."""
    assert train.main(["--dry-run", "--colocate", "-pp", "2", "--num-experts", "8", "--num-experts",
                 "4", "--num-layers", "4", "--num-attention-heads", "4"]) == 1
    err = capsys.readouterr().err
    assert "error [unknown-flag] -pp" in err and "warning [flag-given-twice] --num-experts" in err
