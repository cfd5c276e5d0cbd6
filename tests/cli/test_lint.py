"""The checker behaves like the linters miles users run: directives, --select/--ignore/
--severity, [tool.miles-topology], --quiet, colour, `rule CODE`, SARIF that validates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from support import TESTS, run_cli

from miles_topology.cli import main
from miles_topology.codes import CODES

HERE = TESTS
SCRIPTS = HERE / "fixtures" / "scripts"
SARIF_SCHEMA = json.loads((HERE / "schemas" / "sarif-schema-2.1.0.json").read_text())

# TP 1 with --sequence-parallel (sp-ignored, a warning) and TP 3 on 8 GPUs (an error)
SCRIPT = """#!/bin/bash
PERF_ARGS=(
   --tensor-model-parallel-size {tp}
   --sequence-parallel{same}
)
{before}python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --num-layers 4 --num-attention-heads 12 "${{PERF_ARGS[@]}}"
"""


def script(tmp_path, tp=1, same="", before="", name="run.sh") -> str:
    path = tmp_path / name
    path.write_text(SCRIPT.format(tp=tp, same=same, before=before))
    return str(path)


def reported(capsys, *argv) -> tuple[int, list[str]]:
    code, out, _ = run_cli(capsys, "check", "--format", "json", *argv)
    data = json.loads(out)
    data = data if isinstance(data, list) else [data]
    return code, [p["code"] for d in data for k in ("errors", "warnings", "skipped")
                  for p in d[k]]


def test_disable_on_the_line_or_the_line_before(tmp_path, capsys):
    plain = script(tmp_path)
    assert reported(capsys, plain) == (0, ["sp-ignored"])
    same = script(tmp_path, same="  # miles-topology: disable=sp-ignored", name="a.sh")
    assert reported(capsys, same) == (0, [])
    other = script(tmp_path, same="  # miles-topology: disable=etp-implied", name="b.sh")
    assert reported(capsys, other) == (0, ["sp-ignored"])  # another code stays


def test_disabled_error_passes_and_file_directive_covers_every_line(tmp_path, capsys):
    bad = script(tmp_path, tp=3)
    code, got = reported(capsys, bad)
    assert code == 1 and "dense-grid-divisibility" in got
    assert got == ["dense-grid-divisibility", "expert-grid-divisibility"]
    line_before = script(tmp_path, tp=3, name="c.sh")
    text = Path(line_before).read_text().replace(
        "   --tensor-model-parallel-size 3",
        "   # miles-topology: disable=sp-ignored, dense-grid-divisibility\n"
        "   --tensor-model-parallel-size 3")
    Path(line_before).write_text(text)
    # the expert grid's flags are not written in the script: it has no line to disable on
    assert reported(capsys, line_before) == (1, ["expert-grid-divisibility"])
    whole = script(tmp_path, tp=3, name="d.sh",
                   before="# miles-topology: disable-file=all\n")
    assert reported(capsys, whole) == (0, [])


def test_select_ignore_severity_and_unknown_codes(tmp_path, capsys):
    bad = script(tmp_path, tp=3)
    code, got = reported(capsys, bad)
    assert code == 1 and "sp-ignored" not in got  # TP 3: no sp-ignored, errors only
    plain = script(tmp_path, name="p.sh")
    assert reported(capsys, "--ignore", "sp-ignored", plain) == (0, [])
    assert reported(capsys, "--select", "dense-grid-divisibility", plain) == (0, [])
    assert reported(capsys, "--severity", "error", plain) == (0, [])
    assert reported(capsys, "--severity", "warning", plain) == (0, ["sp-ignored"])
    both = "dense-grid-divisibility,expert-grid-divisibility"
    assert reported(capsys, "--ignore", both, bad) == (0, [])  # an ignored error passes
    assert main(["check", "--ignore", "sp-ignord", plain]) == 2
    assert "did you mean sp-ignored?" in capsys.readouterr().err


def test_pyproject_table_found_upward_and_overridden_by_options(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.miles-topology]\nignore = ["sp-ignored"]\n')
    deep = tmp_path / "scripts" / "rl"
    deep.mkdir(parents=True)
    plain = script(deep)
    assert reported(capsys, plain) == (0, [])
    assert reported(capsys, "--select", "sp-ignored", plain) == (0, [])  # still ignored
    (tmp_path / "pyproject.toml").write_text('[tool.miles-topology]\nignor = ["x"]\n')
    assert main(["check", plain]) == 2
    assert "unknown key 'ignor'; did you mean ignore?" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text('[tool.miles-topology]\nseverity = "error"\n')
    assert reported(capsys, plain) == (0, [])
    assert reported(capsys, "--severity", "note", plain) == (0, ["sp-ignored"])


def test_quiet_prints_only_problems_and_colour_only_when_asked(tmp_path, capsys):
    plain = script(tmp_path)
    good = str(SCRIPTS / "run-qwen3-4B.sh")
    assert main(["check", "--quiet", good]) == 0
    assert capsys.readouterr().out == ""
    assert main(["check", "--quiet", plain, good]) == 0
    out = capsys.readouterr().out
    assert "sp-ignored" in out and good not in out and "launch:" not in out
    assert "\033[" not in out  # not a terminal: no colour
    assert main(["check", "--color", "always", plain]) == 0
    out = capsys.readouterr().out
    assert "\033[33mwarning\033[0m [sp-ignored]" in out and "\033[32mOK\033[0m" in out


def test_rule_prints_the_page_of_a_code(capsys):
    assert main(["rule", "unknown-flag"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unknown-flag (error, fixable)") and CODES["unknown-flag"].summary in out
    assert CODES["unknown-flag"].source in out and CODES["unknown-flag"].example in out
    assert "Page:" not in out and "docs/" not in out  # the wheel ships no docs/
    assert "# miles-topology: disable=unknown-flag" in out
    assert main(["rule"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(CODES)
    assert main(["rule", "unknown-flg"]) == 2
    assert "did you mean unknown-flag?" in capsys.readouterr().err


def test_sarif_of_fixtures_validates_against_the_oasis_schema(capsys):
    paths = [str(SCRIPTS / "err-expert-grid.sh"), str(SCRIPTS / "flag-given-twice.sh")]
    assert main(["check", "--format", "sarif", *paths]) == 1
    log = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    docs = (HERE.parent / "docs" / "problem-codes.md").read_text()
    for rule in rules:  # the rule's whole text, and no link (no docs/ in the wheel)
        assert "helpUri" not in rule and f"\n## {rule['id']}\n" in docs
        assert rule["fullDescription"]["text"] == CODES[rule["id"]].why
        assert rule["help"]["text"].startswith(f"{rule['id']} (") and "Why:" in rule["help"]["text"]
    err = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "expert-grid-divisibility")
    region = err["locations"][0]["physicalLocation"]["region"]
    line = Path(paths[0]).read_text().splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1:].startswith("--expert-model-parallel-size")


def test_the_schema_refuses_a_broken_log():
    """The validation is real: a region with column 0 is not SARIF."""
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [
        {"message": {"text": "m"}, "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": "a.sh"}, "region": {"startLine": 1, "startColumn": 0}}}]}
    ]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(bad)


def test_yaml_keys_get_did_you_mean_and_messages_name_the_keys(tmp_path, capsys):
    path = tmp_path / "t.topology.yaml"
    path.write_text("nodes: 1\ngpus_per_node: 8\ncolocate: true\nepp: 2\n"
                    "expert-model-parallel-size: 4\nexperts: 8\nlayers: 4\nheads: 4\n")
    assert main(["check", "--format", "json", str(path)]) == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert [(e["code"], e["location"]["line"]) for e in errors] == [("unknown-field", 4),
                                                                    ("unknown-field", 5)]
    assert errors[0]["message"].endswith("did you mean ep?") and errors[0]["fix"] == "write ep"
    assert "did you mean ep?" in errors[1]["message"]  # a flag written as a key
    assert len(errors[0]["message"]) < 80  # not the list of every field
    path.write_text("nodes: 1\ngpus_per_node: 8\ncolocate: true\nep: 16\nexperts: 16\n"
                    "layers: 4\nheads: 4\n")
    assert main(["check", "--format", "json", str(path)]) == 1
    (err,) = json.loads(capsys.readouterr().out)["errors"]
    assert err["code"] == "expert-grid-divisibility" and err["location"]["line"] == 4
    assert "--" not in err["message"] + err["fix"]  # keys, not flags
    assert err["fix"].startswith("try ep 8 or 4") and err["flags"][0] == "ep"


def test_colour_on_a_terminal_follows_no_color_and_force_color(tmp_path, capsys, monkeypatch):
    from miles_topology.cli import _color

    plain = script(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert _color("auto") and not _color("never")
    assert main(["check", plain]) == 0 and "\033[33m" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    assert not _color("auto") and _color("always")


def test_a_folder_with_a_setup_script_passes_and_says_nothing_to_check(tmp_path, capsys):
    script(tmp_path, name="run.sh")
    (tmp_path / "setup-env.sh").write_text("#!/bin/bash\nexport PYTHONPATH=/root/Megatron-LM\n")
    assert main(["check", str(tmp_path)]) == 0  # a folder: found by content, skipped
    out = capsys.readouterr().out
    assert "setup-env.sh" not in out and "1 other file skipped (1 no training launch)" in out
    named = [str(tmp_path / "run.sh"), str(tmp_path / "setup-env.sh")]
    assert main(["check", "--verbose", *named]) == 0  # named in a batch: read, and passes
    out = capsys.readouterr().out
    assert "setup-env.sh: nothing to check (no training launch" in out
    assert "2 inputs: 1 valid, 0 invalid, 1 with nothing to check" in out
    assert main(["check", "--format", "json", *named]) == 0
    data = {Path(d["path"]).name: d for d in json.loads(capsys.readouterr().out)}
    assert data["setup-env.sh"]["ok"] is True and "nothing_to_check" in data["setup-env.sh"]
    assert main(["check", str(tmp_path / "setup-env.sh")]) == 2  # named alone: no job


def test_a_misspelled_code_in_a_directive_is_a_warning_naming_it(tmp_path, capsys):
    """`disable=sp-ignord` used to be ignored in silence; it suppresses nothing and says so."""
    typo = script(tmp_path, same="  # miles-topology: disable=sp-ignord")
    code, got = reported(capsys, typo)
    assert code == 0 and sorted(got) == ["sp-ignored", "unknown-directive-code"]
    main(["check", "--output-format", "concise", typo])
    line = next(x for x in capsys.readouterr().out.splitlines() if "unknown-directive" in x)
    assert f"{typo}:4:" in line and "sp-ignord is not a problem code" in line
    assert line.endswith("did you mean sp-ignored?")
    whole = script(tmp_path, name="w.sh", before="# miles-topology: disable-file=nothing-such\n")
    assert sorted(reported(capsys, whole)[1]) == ["sp-ignored", "unknown-directive-code"]
    assert reported(capsys, "--ignore", "unknown-directive-code", typo)[1] == ["sp-ignored"]


def test_an_unused_suppression_is_reported_only_when_selected(tmp_path, capsys):
    """Like ruff's RUF100: its own code, off by default; a directive that suppresses a report
    (on its line, the line after, or in the whole file) is used."""
    used = script(tmp_path, same="  # miles-topology: disable=sp-ignored", name="used.sh")
    unused = script(tmp_path, tp=2, same="  # miles-topology: disable=sp-ignored",
                    name="unused.sh")  # tp 2: no sp-ignored to suppress
    whole = script(tmp_path, tp=2, name="whole.sh",
                   before="# miles-topology: disable-file=sp-ignored,dense-grid-divisibility\n")
    for path in (used, unused, whole):
        assert "unused-suppression" not in reported(capsys, path)[1]
    on = ["--select", "unused-suppression"]
    assert reported(capsys, *on, used)[1] == []
    assert reported(capsys, *on, unused)[1] == ["unused-suppression"]
    assert reported(capsys, *on, whole)[1] == ["unused-suppression", "unused-suppression"]
    assert reported(capsys, "--select", "all", unused)[1] == ["unused-suppression"]
    main(["check", "--select", "unused-suppression", "--output-format", "concise", unused])
    out = capsys.readouterr().out
    assert f"{unused}:4:" in out and "disable=sp-ignored` suppresses nothing" in out


def test_off_by_default_is_the_code_records_word(tmp_path, capsys, monkeypatch):
    """Which codes are off unless selected is said once, on the record (`Code.off`): turning
    a record's `off` on silences its code the same way."""
    from dataclasses import replace

    from miles_topology.codes import CODES

    assert [c.code for c in CODES.values() if c.off] == ["unused-suppression"]
    typo = script(tmp_path, same="  # miles-topology: disable=sp-ignord", name="typo.sh")
    assert "unknown-directive-code" in reported(capsys, typo)[1]
    monkeypatch.setitem(CODES, "unknown-directive-code",
                        replace(CODES["unknown-directive-code"], off=True))
    assert "unknown-directive-code" not in reported(capsys, typo)[1]


def test_a_misspelled_flag_whose_value_is_unknown_points_at_the_flag(tmp_path, capsys):
    """Its value is known only at run time (`$((64#...))` the reader does not compute), so
    the flag stays out of the flag reader's words and is judged apart: at the line and column
    where it is written, not at the assignment its value comes from."""
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/bash\nM=$((64#@@_z))\n\npython3 train.py --actor-num-nodes 1 "
                    "--actor-num-gpus-per-node 8 --colocate --num-layers 2 --hidden-size 8 "
                    "--num-attention-heads 2 --tensor-model-paralel-size $M\n")
    assert main(["check", "--output-format", "concise", str(path)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "unknown-flag" in x)
    col = path.read_text().splitlines()[3].index("--tensor-model-paralel-size") + 1
    assert line.startswith(f"{path}:4:{col}: error unknown-flag --tensor-model-paralel-size")
