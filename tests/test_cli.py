"""The `miles-topology` CLI: exit codes, JSON form, no traceback, light import."""

import json
import subprocess
import sys
import time

import pytest

from miles_topology.cli import main

BAD = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--tensor-model-parallel-size",
       "2", "--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "8",
       "--expert-tensor-parallel-size", "1", "--num-experts", "64", "--colocate"]
GOOD = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--tensor-model-parallel-size",
        "2", "--sequence-parallel", "--expert-model-parallel-size", "2", "--num-experts", "8",
        "--num-attention-heads", "8", "--colocate", "--num-gpus-per-node", "4"]


def run(*argv):
    return subprocess.run([sys.executable, "-m", "miles_topology.cli", *argv],
                          capture_output=True, text=True, timeout=60)


def test_invalid_json_exit_1_with_fix_naming_ep_4_and_2_nodes():
    out = run("check", "--format", "json", "--", *BAD)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is False and data["topology"] is None
    err = next(e for e in data["errors"] if e["code"] == "expert-grid-divisibility")
    assert "--expert-model-parallel-size" in err["flags"]
    assert "4" in err["fix"].split("--expert-model-parallel-size")[1].split(",")[0]
    assert "2 nodes" in err["fix"]


def test_valid_text_reports_sizes_and_etp_warning():
    out = run("check", "--", *GOOD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "world 8, dp 4, edp 2" in out.stdout
    assert "etp-implied" in out.stdout and "etp = tp = 2" in out.stdout


def test_valid_json(capsys):
    assert main(["check", "--format", "json", "--", *GOOD]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert (data["topology"]["world_size"], data["topology"]["dp"], data["topology"]["edp"]) == (
        8, 4, 2)
    assert [w["code"] for w in data["warnings"]] == ["etp-implied"]
    assert set(data["warnings"][0]) == {"code", "message", "fix", "flags"}


@pytest.mark.parametrize("argv", [
    ["check", "missing.yaml"], ["check"], ["bogus"], ["check", "--format", "xml", "--", "--x"],
    ["check", "--env", "NOEQUALS", "--", "--colocate"],
])
def test_unreadable_or_usage_exit_2_without_traceback(argv):
    out = run(*argv)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    assert out.stderr.startswith("miles-topology:")


def test_bad_yaml_exit_2(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: [1\n")
    out = run("check", str(path))
    assert out.returncode == 2 and "cannot read the topology YAML" in out.stderr
    assert "Traceback" not in out.stderr


def test_yaml_check(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 2\ngpus_per_node: 4\nep: 3\nexperts: 8\ncolocate: true\n")
    out = run("check", str(path))
    assert out.returncode == 1 and "expert-grid-divisibility" in out.stdout


def test_show_map_and_svg(tmp_path, capsys):
    svg = tmp_path / "map.svg"
    argv = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--colocate",
            "--expert-model-parallel-size", "2", "--num-experts", "8",
            "--rollout-num-gpus-per-engine", "2"]
    assert main(["show", "--svg", str(svg), "--", *argv]) == 0
    text = capsys.readouterr().out
    assert "node 1" in text and "etp0 ep1 edp0" in text and "e4-7" in text
    assert "engine 3" in text
    body = svg.read_text()
    assert body.startswith("<svg") and body.count("<rect") == 1 + 8 and "engine 3" in body


def test_import_stays_light_and_check_is_fast():
    code = ("import sys, miles_topology, miles_topology.cli; "
            "assert not {'torch','ray','megatron','numpy'} & "
            "set(m.split('.')[0] for m in sys.modules), sorted(sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
    start = time.perf_counter()
    out = run("check", "--", *GOOD)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0
    assert elapsed < 2.0, elapsed  # whole interpreter start included; measured ~0.3 s
