"""`check --fix` / `--diff` / `--unsafe-fixes`: the mechanical fixes, applied only when the
script reads back as the same launch (and, for a safe fix, the same topology)."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import pytest
from support import LAUNCHERS, SCRIPTS

from miles_topology.cli import main
from miles_topology.migrations import fix

SCRIPT = """#!/bin/bash
MODEL_ARGS=(--num-layers 4 --num-attention-heads 4)
SGLANG_ARGS=(
   --sglang-cuda-graph-max-bs 512
   --rollout-num-gpus-per-engine 2
)
python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --tensor-model-parallel-size 2 --sequence-parallel "${MODEL_ARGS[@]}" \\
   --lr 1e-6 --kl-los-coef 0.01 --lr 2e-6 \\
   --pipeline-model-paralel-size 2 \\
   "${SGLANG_ARGS[@]}"
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT)
    os.chmod(path, 0o750)
    return path


def test_diff_previews_and_writes_nothing(script, capsys):
    assert main(["check", "--diff", str(script)]) == 1
    got = capsys.readouterr()
    assert script.read_text() == SCRIPT
    assert "-   --sglang-cuda-graph-max-bs 512\n+   --sglang-cuda-graph-max-bs-decode 512" \
        in got.out
    assert "+   --kl-loss-coef 0.01 --lr 2e-6" in got.out  # a typo of a passthrough flag
    assert "pipeline-model-parallel-size" not in got.out  # a layout flag's typo: unsafe
    assert "Would fix 3 problems in 1 file (1 more with --unsafe-fixes)." in got.err


def test_fix_applies_the_safe_fixes_in_place(script, capsys):
    assert main(["check", "--fix", str(script)]) == 1  # the layout typo is left: an error
    got = capsys.readouterr()
    text = script.read_text()
    assert "--sglang-cuda-graph-max-bs-decode 512" in text
    assert "   --kl-loss-coef 0.01 --lr 2e-6 \\\n" in text and "1e-6" not in text
    assert "--pipeline-model-paralel-size 2" in text
    assert oct(script.stat().st_mode & 0o777) == "0o750"  # the mode is kept
    assert not list(script.parent.glob("*.bak*"))  # no backup, as ruff --fix
    assert "Fixed 3 problems in 1 file (1 more with --unsafe-fixes)." in got.err
    assert "unknown-flag" in got.out and "deprecated-flag" not in got.out  # what remains
    assert main(["check", "--fix", "--unsafe-fixes", str(script)]) == 0
    assert "--pipeline-model-parallel-size 2" in script.read_text()
    assert main(["check", "--diff", str(script)]) == 0  # nothing left to fix


def test_a_read_only_script_is_left_with_a_message_for_fix_not_migrate(script, capsys):
    os.chmod(script, 0o444)  # held out: "Make it writable (chmod u+w) to migrate it." on --fix
    main(["check", "--fix", str(script)])
    err = capsys.readouterr().err
    assert script.read_text() == SCRIPT
    assert "not fixed: it is read-only (mode 0444)" in err and "to rewrite it" in err
    assert "migrate" not in err


def test_nothing_is_written_when_the_topology_would_change(script, capsys, monkeypatch):
    """The guard behind every fix: a 'safe' fix that changed the layout is refused."""
    real = fix.change_for

    def wrong(p, unsafe):
        c = real(p, unsafe)
        if c is not None and c.old == "--sglang-cuda-graph-max-bs":
            return fix.Change(p, "--sglang-cuda-graph-max-bs", "--context-parallel-size",
                              False, c.line)
        return c

    monkeypatch.setattr(fix, "change_for", wrong)
    assert main(["check", "--fix", str(script)]) == 1
    assert script.read_text() == SCRIPT
    assert "not fixed: the topology would change (cp None -> 512); nothing was written" in \
        capsys.readouterr().err


def test_an_edit_made_meanwhile_is_kept(script, capsys, monkeypatch):
    """Re-read before the replace (migrate's writer): an editor's save wins."""
    real = fix.fix_script

    def then_edited(*a, **k):
        got = real(*a, **k)
        script.write_text(SCRIPT + "# saved by an editor\n")
        return got

    monkeypatch.setattr(fix, "fix_script", then_edited)
    assert main(["check", "--fix", str(script)]) == 1
    assert script.read_text().endswith("# saved by an editor\n")
    assert "changed while it was being migrated" in capsys.readouterr().err


def test_a_suppressed_problem_is_not_fixed(tmp_path, capsys):
    path = tmp_path / "run.sh"
    text = SCRIPT.replace("--sglang-cuda-graph-max-bs 512",
                          "--sglang-cuda-graph-max-bs 512  # miles-topology: "
                          "disable=deprecated-flag")
    path.write_text(text)
    main(["check", "--fix", str(path)])
    assert "--sglang-cuda-graph-max-bs 512  #" in path.read_text()


def test_a_flag_of_several_value_words_is_renamed_with_its_values_kept(tmp_path, capsys):
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT.replace("--sglang-cuda-graph-max-bs 512",
                                   "--sglang-cuda-graph-bs 1 2 4 $(seq 8 8 32) $MORE_BS").replace(
        "MODEL_ARGS=", "MORE_BS='48 64'\nMODEL_ARGS="))
    assert main(["check", "--fix", str(path)]) == 1
    text = path.read_text()
    assert "   --sglang-cuda-graph-bs-decode 1 2 4 $(seq 8 8 32) $MORE_BS\n" in text
    assert main(["check", "--fix", str(path)]) == 1 and path.read_text() == text  # once


def test_a_flag_whose_value_is_known_only_at_run_time_is_renamed(tmp_path, capsys):
    # the value comes from a variable set in a case on an environment variable (held-out:
    # `--sglang-cuda-graph-max-bs ${SGLANG_DECODE_MAX_BS}` was left, "not written in this file")
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT.replace("--sglang-cuda-graph-max-bs 512",
                                   "--sglang-cuda-graph-max-bs ${MAX_BS}").replace(
        "MODEL_ARGS=", 'case "$MODE" in small) MAX_BS=64 ;; *) MAX_BS=512 ;; esac\nMODEL_ARGS='))
    main(["check", "--fix", str(path)])
    assert "   --sglang-cuda-graph-max-bs-decode ${MAX_BS}\n" in path.read_text()
    assert "not fixed" not in capsys.readouterr().err


def test_a_word_from_a_sourced_file_is_left_alone(tmp_path, capsys):
    (tmp_path / "common.sh").write_text("SGLANG_ARGS=(--sglang-cuda-graph-max-bs 512)\n")
    path = tmp_path / "run.sh"
    path.write_text('source "$(dirname "$0")/common.sh"\n' + SCRIPT.split("SGLANG_ARGS=(")[0]
                    + 'python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 '
                      '--colocate "${MODEL_ARGS[@]}" "${SGLANG_ARGS[@]}"\n')
    before = path.read_text()
    main(["check", "--fix", str(path)])
    assert path.read_text() == before
    assert f"not fixed: [deprecated-flag] --sglang-cuda-graph-max-bs ({tmp_path}/common.sh:1): " \
        "a word of it is not written in this file" in capsys.readouterr().err  # says why
    assert (tmp_path / "common.sh").read_text() == \
        "SGLANG_ARGS=(--sglang-cuda-graph-max-bs 512)\n"


def test_a_python_launcher_is_fixed_and_run_again(tmp_path, capsys):
    shutil.copy(LAUNCHERS / "launch_utils.py", tmp_path / "launch_utils.py")
    text = (LAUNCHERS / "run_moe_argparse.py").read_text().replace(
        '"--colocate --use-rollout-routing-replay "',
        '"--colocate --use-rollout-routing-replay --sglang-cuda-graph-max-bs 256 "')
    assert "--sglang-cuda-graph-max-bs 256" in text
    path = tmp_path / "run.py"
    path.write_text(text)
    if main(["check", str(path)]) == 2:
        pytest.skip("the launcher sandbox cannot run here: " + capsys.readouterr().err)
    assert main(["check", "--diff", str(path)]) == 1
    assert "+        \"--colocate --use-rollout-routing-replay --sglang-cuda-graph-max-bs-" \
           "decode 256 \"" in capsys.readouterr().out
    assert main(["check", "--fix", str(path)]) == 0
    assert "--sglang-cuda-graph-max-bs-decode 256" in path.read_text()
    assert not [p for p in tmp_path.iterdir() if ".fix-" in p.name]


def test_a_launcher_whose_words_change_from_run_to_run_is_fixed(tmp_path, capsys):
    """A run id from the clock differs between the two runs; the fix is compared around it."""
    shutil.copy(LAUNCHERS / "launch_utils.py", tmp_path / "launch_utils.py")
    text = (LAUNCHERS / "run_moe_argparse.py").read_text().replace(
        "import argparse\n", "import argparse\nimport time\n").replace(
        '"--colocate --use-rollout-routing-replay "',
        '"--colocate --use-rollout-routing-replay --sglang-cuda-graph-max-bs 256 "\n'
        '        f"--save /root/ckpt/{time.time_ns()} "')
    path = tmp_path / "run.py"
    path.write_text(text)
    if main(["check", str(path)]) == 2:
        pytest.skip("the launcher sandbox cannot run here: " + capsys.readouterr().err)
    assert main(["check", "--fix", str(path)]) == 0
    assert "not fixed" not in capsys.readouterr().err
    assert "--sglang-cuda-graph-max-bs-decode 256" in path.read_text()
    assert not [p for p in tmp_path.iterdir() if ".fix-" in p.name]


@pytest.mark.parametrize(("value", "why"), [
    ("4", None), ("5", "the fixed launcher would launch other words than the fixes intend")])
def test_only_the_words_that_change_between_two_plain_runs_are_not_compared(
        tmp_path, value, why):
    runs = iter(range(10))

    def judge(copy):
        fixed = "fixed" in open(copy).read()
        flag, v = ("--lr-new", value) if fixed else ("--lr-old", "4")
        return [SimpleNamespace(extra={"argv": ["--save", f"/c/{next(runs)}", flag, v]})]

    path = tmp_path / "run.py"
    before = [SimpleNamespace(extra={"argv": ["--save", "/c/x", "--lr-old", "4"]})]
    assert fix._rerun(str(path), "fixed", before, judge, {"--lr-old": "--lr-new"}, [],
                      "plain") == why


def test_rule_says_whether_a_code_is_fixable_and_when_safely(capsys):
    from miles_topology.codes import CODES

    assert set(fix.FIXERS) == {c for c, rec in CODES.items() if rec.fixable}
    assert main(["rule", "deprecated-flag"]) == 0
    out = capsys.readouterr().out
    assert "fixable" in out.splitlines()[0]
    assert "check --fix: safe when it renames the flag" in out
    assert main(["rule", "expert-grid-divisibility"]) == 0
    assert "check --fix" not in capsys.readouterr().out


def test_a_code_is_fixable_because_a_fix_registers_not_because_it_is_declared(
        monkeypatch, capsys):
    """One statement of fixability: registering a fix marks the code's record, and SARIF's
    rule help, read by the formats below migrations/, says so."""
    from miles_topology.codes import CODES

    monkeypatch.setitem(CODES, "expert-grid-divisibility", CODES["expert-grid-divisibility"])
    monkeypatch.setitem(fix.FIXERS, "expert-grid-divisibility", ("never", lambda *a: None))
    assert not CODES["expert-grid-divisibility"].fixable
    fix.fixer("expert-grid-divisibility", "never")(lambda *a: None)
    assert CODES["expert-grid-divisibility"].fixable and fix.fixable("expert-grid-divisibility")
    assert main(["check", "--format", "sarif", str(SCRIPTS / "err-expert-grid.sh")]) == 1
    rules = json.loads(capsys.readouterr().out)["runs"][0]["tool"]["driver"]["rules"]
    help_ = next(r["help"]["text"] for r in rules if r["id"] == "expert-grid-divisibility")
    assert help_.startswith("expert-grid-divisibility (error, fixable)")


def test_a_near_miss_is_safe_only_one_typo_away():
    from miles_topology.model.errors import Problem

    def fixable(flag: str) -> tuple[str | None, bool] | None:
        from miles_topology.reading.flags import _unknown

        c = fix.change_for(_unknown(flag, None), unsafe=True)
        return (c.new, c.unsafe) if c else None

    assert fix.typos("--kl-los-coef", "--kl-loss-coef") == 1
    assert fix.typos("--eps-cilp", "--eps-clip") == 1  # two letters swapped
    assert fixable("--kl-los-coef") == ("--kl-loss-coef", False)
    assert fixable("--tensor-model-paralel-size") == ("--tensor-model-parallel-size", True)
    assert fixable("--use-kitchn-attenton") == ("--use-kitchen-attention", True)  # 2 typos
    # a flag another version defines (slime's patched Megatron-LM) is no typo: no fix at all
    assert fixable("--use-gated-attention") is None
    assert fix.change_for(Problem("unknown-flag", "m", "f", ("--zzzzzz",)), True) is None


def test_a_not_fixed_line_escapes_the_sourced_file_name(tmp_path, capsys):
    # the "not fixed" line prints a path the input chose: through the sink, a control
    # character or a workflow command in it is shown escaped, never written raw
    name = "c\x1b[31m::error::x.sh"
    (tmp_path / name).write_text("SGLANG_ARGS=(--sglang-cuda-graph-max-bs 512)\n")
    path = tmp_path / "run.sh"
    path.write_text(f'source "$(dirname "$0")/{name}"\n' + SCRIPT.split("SGLANG_ARGS=(")[0]
                    + 'python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 '
                      '--colocate "${MODEL_ARGS[@]}" "${SGLANG_ARGS[@]}"\n')
    main(["check", "--fix", str(path)])
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "not fixed: [deprecated-flag]" in x)
    assert "\x1b" not in err and "\\x1b[31m" in line
