"""One launch record, one judgement: `judge` runs check's steps for a bash script's launch
and a Python launcher's alike, and a verdict holds one list of problems seen by status."""

from __future__ import annotations

from support import LAUNCHERS, SCRIPTS

from miles_topology.judging import check_script, launch
from miles_topology.judging.verdict import Verdict
from miles_topology.model.errors import Location, Problem


def test_a_verdict_is_one_list_of_problems_seen_by_status():
    v = Verdict("x.sh")
    err = Problem("unknown-flag", "m", "f", ("--x",))
    skip = Problem("unknown-flag", "m", "f", ("--y",), severity="skipped")
    v.file(err)
    v.file(skip)
    assert v.errors == [err] and v.skipped == [skip] and v.warnings == [] and not v.ok
    v.errors = []  # a view set replaces that view's problems only
    assert v.problems == [skip] and v.ok


def test_the_script_check_is_judge_over_the_scripts_launch(monkeypatch):
    seen = []
    real = launch.judge

    def spy(got, cluster):
        seen.append(got)
        return real(got, cluster)

    monkeypatch.setattr(check_script, "judge", spy)
    v = check_script.check_script(str(SCRIPTS / "err-expert-grid.sh"), {})
    assert len(seen) == 1 and isinstance(seen[0], launch.Launch)
    assert seen[0].site is None and seen[0].values is not None
    at = seen[0].at["--expert-model-parallel-size"]
    assert at == Location(at.path, at.line) and at.column == 4  # `   --expert-...`
    assert [p.code for p in v.errors] == ["expert-grid-divisibility"]
    assert v.errors[0].location.column == 4 and "stack" in v.extra


def test_the_launcher_check_is_the_same_judge_over_the_launchers_launch(monkeypatch):
    """A Python launcher's launch goes through the same `judge`: it names its stack as a
    script's report does, and a problem is at the literal that spells its flag, with the
    column the locator found."""
    from miles_topology.judging import check_launcher

    seen = []
    real = launch.judge
    monkeypatch.setattr(check_launcher, "judge",
                        lambda got, cluster: seen.append(got) or real(got, cluster))
    v = check_launcher.check_python(str(LAUNCHERS / "run_moe_argparse.py"),
                                    ["--num-nodes", "1", "--ep", "3"])
    assert len(seen) == 1 and seen[0].sized_by_cluster and seen[0].site is not None
    assert "stack" in v.extra and v.site == seen[0].site
    located = [p for p in v.problems if p.location is not None and p.location.column]
    assert located, v.problems


def test_a_launchers_notes_are_coded_problems_at_its_launch(tmp_path):
    """What the sandbox saw beyond the launch (here: an import a stand-in answered) is a
    `launcher-note` problem at the call that launches, with a fix; a note, so it passes."""
    from miles_topology.judging import check_launcher

    run = tmp_path / "run.py"
    run.write_text("import os\nimport mt_absent_polars as pl\nn = pl.x\n"
                   "os.system('python3 train.py --num-layers 4 --actor-num-nodes 1 "
                   "--actor-num-gpus-per-node 8 --tensor-model-parallel-size 2 --colocate')\n")
    v = check_launcher.check_python(str(run), [])
    (note,) = [p for p in v.problems if p.code == "launcher-note"]
    assert note.severity == "note" and "mt_absent_polars" in note.message
    assert note.location.line == 4 and "PYTHONPATH" in note.fix
    assert v.ok and note in v.warnings
    lines = v.extra["report_lines"]
    assert lines and not any(line.startswith("note:") for line in lines)  # once, as a problem


def test_a_skipped_finding_names_the_flags_it_rests_on_that_are_not_known(tmp_path, capsys):
    # the rule's message is worded from the defaults standing in for unknown values ("tp =
    # 1", "neither ... is given" of `--rollout-num-gpus "$N"`): the skipped finding says so.
    # The unknown words are an attacker's bytes; only the rule's own flag names are added
    from hostile import NASTY, clean
    from support import run_cli

    script = tmp_path / "run.sh"
    nasty = NASTY.replace("\x00", "")  # a NUL makes no text file at all
    script.write_bytes(f'N="$(cat /etc/{nasty})"\npython3 train.py --actor-num-nodes 1 '
                      '--actor-num-gpus-per-node 4 --num-layers 4 --hidden-size 64 '
                      '--num-attention-heads 4 --rollout-num-gpus "$N" --sequence-parallel '
                      '--tensor-model-parallel-size "$N"\n'.encode("utf-8", "surrogateescape"))
    v = check_script.check_script(str(script), {})
    got = {p.code: p.message for p in v.skipped}
    assert got["sp-ignored"].endswith(
        "(not proven: --tensor-model-parallel-size: value not known here)")
    assert got["no-rollout-gpus"].endswith("(not proven: --rollout-num-gpus: value not known "
                                           "here)")
    for fmt in ("text", "github"):
        code, out, err = run_cli(capsys, "check", "--format", fmt, str(script))
        assert "not proven" in out
        clean(out + err, commands=fmt == "github")
