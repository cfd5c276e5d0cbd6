"""The acceptance commands, end to end through the launcher: a local multi-node Ray cluster,
placement per the Topology, the reference backend, metrics in JSONL. Slow (each starts a
fresh cluster, and one host per node whose zygote imports torch and megatron-core)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from miles.backend.metrics import LOGPROB_TOL

ACCEPT = [
    [],
    ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
     "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1",
     "--num-experts", "16", "--rollout-num-gpus", "4", "--rollout-num-gpus-per-engine", "4",
     "--num-gpus-per-node", "4"],
]


@pytest.mark.slow
@pytest.mark.parametrize("flags", ACCEPT, ids=["default", "ep8-over-nodes-of-4"])
def test_acceptance_command(tmp_path, flags):
    out = tmp_path / "m.jsonl"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "miles.train", "--steps", "2", "--metrics-out", str(out), *flags],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2, 3] and steps[-1]["final"]
    for m in steps:
        assert m["logprob_max_abs_diff"] <= LOGPROB_TOL, m
        assert m["route_agreement"] == 1.0, m
        assert m["early_post_requests"] == 0 and m["unplanned_shards"] == 0, m
        assert m["engines_agree"], m
        assert 0.0 <= m["reward_mean"] <= 1.0
    assert done.stdout.count("route_agreement=1.000000") == 3
    assert done.stdout.count(" OK") == 3
    for phase in ("cluster", "workers", "roles and groups", "first sync"):
        assert f"start-up: {phase}" in done.stderr


def _launch(tmp_path, *flags):
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "miles.train", "--steps", "1", *flags],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )


@pytest.mark.slow
def test_a_job_whose_replay_is_wrong_exits_3(tmp_path):
    done = _launch(tmp_path, "--fault", "replay-shift")
    assert done.returncode == 3, done.stderr[-3000:]
    assert "MISMATCH" in done.stdout and "R3 is not exact" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flags, metric", [
    (["--no-replay"], "route_agreement < 1"),
    (["--fault", "early-post-process"], "early_post_requests="),
    (["--fault", "routes-pad-dp"], "replay rows"),
    (["--fault", "weight-sync-race"], "early_post_requests="),
], ids=["no-replay", "early-post-process", "routes-pad-dp", "weight-sync-race"])
def test_the_default_command_fails_with_the_metric_that_caught_it(tmp_path, flags, metric):
    done = _launch(tmp_path, *flags)
    assert done.returncode == 3, done.stderr[-3000:]
    assert metric in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
