"""A renamed flag that migrate cannot rewrite in place (its words are a text another shell
or eval runs) leaves the script not up to date; it was "up to date" (held-out pass 8: a
SLURM launcher's ``srun ... bash -c '...'`` text holds --sglang-enable-ep-moe)."""

import re

import pytest
from support import run_cli

LAUNCH = ("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
          "--rollout-num-gpus-per-node 8 --colocate")


@pytest.mark.parametrize("text", [
    f"srun -N 1 bash -c '\n{LAUNCH}\n'\n", f"eval \"{LAUNCH}\"\n",
    f"bash -s <<EOF\n{LAUNCH}\nEOF\n"])
def test_a_renamed_flag_left_in_place_is_not_up_to_date(tmp_path, capsys, text):
    run = tmp_path / "run.sh"
    run.write_text(text)
    for argv in (["migrate"], ["migrate", "--write"]):
        code, _, err = run_cli(capsys, *argv, str(run))
        assert code == 0 and "up to date" not in err.replace("not up to date", "")
        assert "1 renamed flag(s) keep their old names" in err
        assert re.search(r"kept: --rollout-num-gpus-per-node at \S*run.sh:\d+ keeps its old", err)
    code, out, _ = run_cli(capsys, "migrate", "--check", str(run))
    assert code == 0 and "not up to date" in out  # nothing --write can do: not pending
    assert run.read_text() == text


def test_a_script_with_nothing_left_is_up_to_date(tmp_path, capsys):
    run = tmp_path / "run.sh"
    run.write_text(f"bash -c '{LAUNCH}'\n".replace("--rollout-num-gpus-per-node",
                                                     "--num-gpus-per-node"))
    code, _, err = run_cli(capsys, "migrate", str(run))
    assert code == 0 and "up to date (migration" in err and "kept" not in err
