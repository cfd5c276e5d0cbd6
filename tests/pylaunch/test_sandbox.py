"""The sandbox Python programs run in: `run_program` (the bash reader's
``$(python3 helper.py NAME)``) and, tried as an attacker would, the kernel's isolation."""

from __future__ import annotations

import pytest

from miles_topology.pylaunch import run_program

# A helper in the style of miles' miles/utils/external_utils/model_args_utils.py: given a model
# name it prints that model's architecture flags on one line (the scripts read them with
# MODEL_ARGS_LINE="$(python3 .../model_args_utils.py NAME)"; read -ra MODEL_ARGS <<< ...).
MODEL_ARGS_UTILS = '''\
import sys

MODELS = {
    "qwen3-4B": dict(num_layers=36, hidden_size=2560, num_attention_heads=32),
    "qwen3-30B-A3B": dict(num_layers=48, hidden_size=2048, num_attention_heads=32,
                          num_experts=128, moe_router_topk=8),
}


def model_args(name: str) -> str:
    spec = MODELS[name]
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in spec.items())


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODELS:
        print(f"usage: model_args_utils.py {{{','.join(MODELS)}}}", file=sys.stderr)
        sys.exit(2)
    print(model_args(sys.argv[1]))
'''


@pytest.fixture()
def helper(tmp_path):
    path = tmp_path / "miles" / "utils" / "external_utils" / "model_args_utils.py"
    path.parent.mkdir(parents=True)
    path.write_text(MODEL_ARGS_UTILS)
    for d in (path.parent, path.parent.parent, path.parent.parent.parent):
        (d / "__init__.py").touch()  # a regular package, as miles' own
    return path


def test_run_program_prints_a_helpers_flags(helper, tmp_path):
    got = run_program([str(helper), "qwen3-30B-A3B"])
    assert (got.status, got.error, got.records) == (0, None, [])
    assert got.stdout.split() == ["--num-layers", "48", "--hidden-size", "2048",
                                  "--num-attention-heads", "32", "--num-experts", "128",
                                  "--moe-router-topk", "8"]
    # relative to cwd, as the scripts call it after `cd /root/miles`
    got = run_program(["-u", "miles/utils/external_utils/model_args_utils.py", "qwen3-4B"],
                      cwd=str(tmp_path))
    assert got.status == 0 and got.stdout.startswith("--num-layers 36 ")
    got = run_program([str(helper), "nope"])
    assert got.status == 2 and got.stdout == "" and "usage: model_args_utils.py" in got.stderr


def test_run_program_code_and_module(helper, tmp_path):
    got = run_program(["-c", "from miles.utils.external_utils.model_args_utils import "
                       "model_args\nprint(model_args('qwen3-4B'))"],
                      env={"PYTHONPATH": str(tmp_path)})
    assert got.status == 0 and got.stdout.split()[:2] == ["--num-layers", "36"]
    got = run_program(["-m", "miles.utils.external_utils.model_args_utils", "qwen3-4B"],
                      cwd=str(tmp_path))
    assert got.status == 0 and got.stdout.split()[:2] == ["--num-layers", "36"]
    got = run_program(["-c", "import sys; print(sys.argv)", "a", "b"])
    assert got.stdout == "['-c', 'a', 'b']\n"


def test_run_program_records_what_it_tried_and_why_it_failed(tmp_path):
    got = run_program(["-c", "import os, subprocess\nos.system('nvidia-smi -L')\n"
                       "print(subprocess.run(['nproc'], capture_output=True).returncode)\n"
                       "import helper_that_is_absent"])
    assert got.status == 1 and got.stdout == "0\n"
    assert [(r.kind, r.command) for r in got.records] == [("os.system", "nvidia-smi -L"),
                                                          ("subprocess", "nproc")]
    assert "ModuleNotFoundError" in got.error and "helper_that_is_absent" in got.error
    assert run_program([str(tmp_path / "absent.py")]).status == "unavailable"
    assert run_program(["-"]).status == "unavailable"
    got = run_program(["-c", "import time; time.sleep(30)"], timeout_s=1)
    assert got.status == "timeout" and "1 s" in got.error
    got = run_program(["-c", "import sys; sys.exit('bad name')"])
    assert (got.status, got.error) == (1, "bad name")
