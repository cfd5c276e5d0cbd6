"""`miles-topology check SCRIPT.sh` on every fixture: sizes and verdict equal the expected ones."""

import json
import subprocess
import sys

import pytest
from support import SCRIPTS, bash_launch, flag_values

from miles_topology.cli import main
from miles_topology.judging.check_script import check_script
from miles_topology.model.errors import InputError

HERE = SCRIPTS
FIXTURES = json.loads((HERE / "expected.json").read_text())["fixtures"]
CASES = [
    pytest.param(name, i, case, id=f"{name}#{i}")
    for name, entry in FIXTURES.items()
    for i, case in enumerate(entry["cases"])
]


@pytest.mark.parametrize("name,index,case", CASES)
def test_fixture_verdict(name, index, case):
    if case["entry"] is None:  # not a training job: unreadable as one, with what was found
        with pytest.raises(InputError, match="no training launch found.*found instead"):
            check_script(str(HERE / name), case["env"])
        return
    v = check_script(str(HERE / name), case["env"])
    if "topology" not in case:  # no hand-computed verdict for this case
        if case["unresolved"]:  # sizes only known at run time: reported, never guessed
            assert v.extra["unresolved"] and v.summary is None
        return
    want = case["topology"]
    notes = set(case["notes"])
    assert v.ok == want["ok"], [p.code for p in v.errors]
    assert sorted({p.code for p in v.errors}) == want["errors"]
    assert sorted({p.code for p in v.warnings} - notes) == want["warnings"]
    if "skipped" in want:
        assert sorted({p.code for p in v.skipped}) == want["skipped"]
    if want["forms_grid"] and not v.extra["unresolved"]:
        s = v.summary
        assert (s["world_size"], s["dp"], s["edp"]) == (want["world_size"], want["dp"], want["edp"])
    elif not want["forms_grid"]:  # no dp/edp, but the world size and the sizes given
        assert "dp" not in v.summary and v.summary["world_size"] == want["world_size"]
    listed = {(u["flag"], u["source"].replace(str(HERE) + "/", "")) for u in v.extra["unresolved"]}
    assert {tuple(u) for u in case["unresolved"]} <= listed


def test_every_error_code_has_a_fixture():
    codes = {c for e in FIXTURES.values() for case in e["cases"]
             if "topology" in case
             for c in case["topology"]["errors"] + case["topology"]["warnings"]}
    assert {"expert-grid-divisibility", "dense-grid-divisibility", "experts-not-divisible-by-ep",
            "heads-not-divisible-by-tp", "layers-not-divisible-by-pp", "vpp-requires-pp",
            "rollout-gpus-not-multiple-of-engine", "engine-straddles-nodes", "sglang-dp-invalid",
            "sglang-ep-invalid", "r3-requires-moe", "r3-router-fusion",
            "flag-conflict", "etp-implied", "colocate-ignores-rollout-gpus",
            "deprecated-flag", "moe-layer-freq-length",
            } <= codes  # gpu-budget-exceeded needs a cluster size: test_checks
    assert len(FIXTURES) >= 25


def test_unresolved_sizes_are_skipped_not_failed(capsys):
    # the node count comes from $(scontrol ...): nothing about it is proven wrong
    assert main(["check", "--format", "json", str(HERE / "unresolved.sh")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["topology"] is None
    assert any(u["flag"] == "--actor-num-nodes" and u["source"].endswith("unresolved.sh:7")
               for u in data["unresolved"])
    assert data["values"]["--actor-num-nodes"]["value"] is None


def test_env_resolves_values(capsys):
    argv = ["check", "--format", "json", "--env", "1=2", str(HERE / "unresolved.sh")]
    main(argv)
    data = json.loads(capsys.readouterr().out)
    assert data["values"]["--tensor-model-parallel-size"]["value"] == "2"


def test_many_scripts_give_a_list_and_exit_1_if_any_invalid(capsys):
    paths = [str(HERE / "run-qwen3-4B.sh"), str(HERE / "err-expert-grid.sh")]
    assert main(["check", "--format", "json", *paths]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [d["path"] for d in data] == paths and [d["ok"] for d in data] == [True, False]
    assert main(["check", "--verbose", *paths]) == 1
    assert "2 inputs: 1 valid, 1 invalid" in capsys.readouterr().out


def test_text_report_shows_sources_overrides_and_map(capsys):
    assert main(["check", "--verbose", str(HERE / "flag-given-twice.sh")]) == 0
    out = capsys.readouterr().out
    assert "overrides" in out and "flag-given-twice" in out
    assert "node 0" in out and "gpu 0" in out


def test_a_repeated_flag_is_reported_once_at_the_line_that_wins(capsys):
    path = str(HERE / "flag-given-twice.sh")
    v = check_script(path, {})
    repeats = [p for p in v.errors + v.warnings + v.skipped if "given" in p.message
               and "--tensor-model-parallel-size" in p.message]
    assert [p.code for p in repeats] == ["flag-given-twice"]
    assert str(repeats[0].location) == f"{path}:11"
    assert main(["check", "--format", "github", path]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "tensor-model-parallel" in x]
    assert len(lines) == 1 and lines[0].startswith(f"::warning file={path},line=11")


def test_flags_py_locates_a_repeat_of_a_flag_it_does_not_own(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("A=(--lr 1e-6)\nB=(--lr 2e-6)\n"
                      "python3 train.py --colocate ${A[@]} \\\n  ${B[@]} --num-epochs 1\n")
    v = check_script(str(script), {})
    rep = [p for p in v.warnings if p.code == "flag-given-twice"]
    assert len(rep) == 1 and str(rep[0].location) == f"{script}:2"
    assert "--lr" in rep[0].message and "2e-6" in rep[0].message


def test_unreadable_script_exit_2(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text('ARGS=(\n  --actor-num-nodes "2\n')
    out = subprocess.run([sys.executable, "-m", "miles_topology.cli", "check", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(bad) in out.stderr


def test_missing_model_file_skips_model_checks(tmp_path):
    # the model file is not there: its shape is unknown, so R3's MoE rule cannot fail
    script = tmp_path / "run.sh"
    script.write_text('source "$(dirname "$0")/models/absent.sh"\n'
                      "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                      '--colocate "${MODEL_ARGS[@]}" --use-rollout-routing-replay\n')
    v = check_script(str(script), {})
    assert v.ok and [p.code for p in v.skipped] == ["r3-requires-moe"]
    assert v.summary is None  # MODEL_ARGS may hold any flag: sizes are not printed
    assert "absent.sh" in v.extra["unknown_model_facts"]["why"]


def test_explicit_dense_shape_still_fails_r3(tmp_path):
    # the shape is given and has no experts: that is knowledge, and R3 cannot work
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                      "--colocate --num-layers 4 --num-attention-heads 8 "
                      "--use-rollout-routing-replay\n")
    v = check_script(str(script), {})
    assert not v.ok and [p.code for p in v.errors] == ["r3-requires-moe"]
    assert v.extra["unknown_model_facts"] is None


def test_model_flag_after_unknown_words_is_known(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('read -ra X <<< "$(python3 m.py)"\n'
                      "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
                      '--num-layers 4 "${X[@]}" --num-layers 4 --num-attention-heads 6 '
                      "--tensor-model-parallel-size 4 --use-rollout-routing-replay\n")
    v = check_script(str(script), {})
    # heads 6 % tp 4 is proven (given after the unknown words); the expert count is not:
    # the words may hold --num-experts
    assert [p.code for p in v.errors] == ["heads-not-divisible-by-tp"]
    assert [p.code for p in v.skipped] == ["r3-requires-moe"]
    assert "--num-experts" in v.extra["unknown_model_facts"]["flags"]
    assert "--num-layers" not in v.extra["unknown_model_facts"]["flags"]


def test_no_training_launch_exit_2_names_what_was_found(capsys):
    assert main(["check", str(HERE / "converter-only.sh")]) == 2
    err = capsys.readouterr().err
    assert "no training launch" in err and "convert_hf_to_torch_dist.py" in err
    assert "converter-only.sh:5" in err


RAY_HEAD = 'export TP=4\nRT=$(cat runtime.json)\n'
RAY_JOB = ('ray job submit --address="http://127.0.0.1:8265" {opt} -- python3 train.py '
           '--topology {yaml} --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate\n')


@pytest.mark.parametrize(("opt", "tp"), [
    ("""--runtime-env-json='{"env_vars": {"TP": "2"}}'""", 2),  # the runtime env, not exports
    ("""--runtime-env-json='{"env_vars": {"A": "1"}}'""", 1),  # TP not passed: the default
    ("", 1),  # no runtime env: the entrypoint does not inherit the script's exports
    ('--runtime-env-json="$RT"', None),  # not written literally: unknown
    ("--runtime-env runtime.yaml", None),  # a file this check does not read: unknown
])
def test_topology_yaml_under_ray_job_submit_sees_the_runtime_env(tmp_path, opt, tp):
    yaml = tmp_path / "t.yaml"
    yaml.write_text("tp: ${oc.env:TP,1}\nsp: true\n")
    script = tmp_path / "run.sh"
    script.write_text(RAY_HEAD + RAY_JOB.format(opt=opt, yaml=yaml))
    v = check_script(str(script), {})
    assert v.ok, [p.code for p in v.errors]
    if tp is not None:
        assert v.topology.layout.tp == tp and v.summary["tp"] == tp
        return
    assert v.summary is None  # tp is a reported size: not guessed
    assert any(u["flag"] == "--tensor-model-parallel-size" and "runtime env" in u["why"]
               for u in v.extra["unresolved"])


def test_a_script_launch_still_gives_the_yaml_its_exports(tmp_path):
    yaml = tmp_path / "t.yaml"
    yaml.write_text("tp: ${oc.env:TP,1}\nsp: true\n")
    script = tmp_path / "run.sh"
    script.write_text(f"export TP=4\npython3 train.py --topology {yaml} --colocate\n")
    assert check_script(str(script), {}).topology.layout.tp == 4


def test_an_unknown_used_twice_is_reported_once():
    # the fixture expands the same unread MODEL_ARGS twice (directly and through EXTRA)
    v = check_script(str(HERE / "unresolved-array-before-flags.sh"), {})
    assert [(u["flag"], u["expression"]) for u in v.extra["unresolved"]] == [
        (None, "read -ra MODEL_ARGS")]
    line = next(x for x in v.extra["report_lines"] if x.startswith("unresolved"))
    assert line.startswith("unresolved read -ra MODEL_ARGS  at ")


# -- ground truth: each idiom run under bash, with stand-ins that print what they launch

IDIOMS = HERE / "idioms"
# fixture -> (positional arguments it is run with, flags bash gives that the reader must
# leave unresolved instead: a value only a real run decides)
IDIOM_RUNS = {
    "local-scope.sh": ([], set()),
    "set-positional.sh": ([], set()),
    "args-case.sh": (["--tp", "2", "--nodes", "2", "--junk"], set()),
    "args-getopts.sh": (["-t", "4", "-p2", "--", "--seq-length", "8"], set()),
    "read-heredoc.sh": ([], set()),
    "brace.sh": ([], set()),
    "written-source.sh": ([], set()),
    "arith-default.sh": ([], set()),
    "pipeline-count.sh": ([], set()),
    "depth-cap.sh": ([], {"--tensor-model-parallel-size"}),
    "crlf.sh": ([], set()),
    "pipe-test.sh": ([], set()),
    "gen-source-pid.sh": ([], set()),  # $$ names one file all through the run
    "common-train.sh": (["2", "1", "--colocate"], set()),
    "wrapper-args.sh": (["--colocate"], set()),  # bash FILE ARGS: the wrapped launch
    "source-args.sh": ([], set()),
    "entry-path.sh": ([], set()),
    "known-branch.sh": ([], set()),
    "heredoc-wait.sh": ([], set()),
}


@pytest.mark.parametrize("name", sorted(IDIOM_RUNS))
def test_idiom_reads_as_bash_runs_it(name, tmp_path, capsys):
    args, unknown = IDIOM_RUNS[name]
    truth = flag_values(bash_launch(IDIOMS / name, args, tmp_path))
    main(["check", "--format", "json", str(IDIOMS / name), "--", *args])
    data = json.loads(capsys.readouterr().out)
    got = {f: v["value"] for f, v in data["values"].items()}
    want = {f: (None if f in unknown else v) for f, v in truth.items() if f in got or
            f in unknown}
    assert got == want
    from miles_topology.shell import read_script
    read = read_script(IDIOMS / name, positional=args)
    whole = {fv.flag: fv.value for fv in read.argv}
    assert whole == {f: (None if f in unknown else v) for f, v in truth.items()}


CHECKOUT = HERE / "miles-checkout"
HELPER_RUN = CHECKOUT / "scripts" / "run-qwen3-30B-A3B-r3.sh"


def test_helper_output_reads_as_bash_runs_it(tmp_path):
    # the stand-in python3 runs the real helper: ground truth for what the launch gets
    truth = flag_values(bash_launch(HELPER_RUN, [], tmp_path))
    from miles_topology.shell import read_script
    read = read_script(HELPER_RUN)
    assert {fv.flag: fv.value for fv in read.argv} == truth
    assert truth["--num-experts"] == "128" and truth["--actor-num-gpus-per-node"] == "12"


def test_helper_known_runs_the_moe_checks():
    v = check_script(str(HELPER_RUN), {})
    assert "experts-not-divisible-by-ep" in {p.code for p in v.errors}
    assert v.extra["unknown_model_facts"] is None and not v.skipped


def test_helper_not_found_skips_the_moe_checks_with_its_error(tmp_path):
    script = tmp_path / "run.sh"  # the same script outside a miles checkout
    script.write_text(HELPER_RUN.read_text())
    v = check_script(str(script), {})
    assert "r3-requires-moe" in {p.code for p in v.skipped}  # R3 on a model not known MoE
    assert not v.errors
    gap = [u for u in v.extra["unresolved"] if u["flag"] is None]
    # the helper it names lies outside the script's checkout: never run (gate.py)
    assert gap and "model_args_utils.py" in gap[0]["why"] and "outside" in gap[0]["why"]
    assert "outside the input's checkout" in v.extra["unknown_model_facts"]["why"]


def test_a_failing_helper_leaves_the_value_unresolved_with_its_error(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('TP="$(python3 -c "import sys; sys.exit(\'no model qwen9\')")"\n'
                      "python3 train.py --tensor-model-parallel-size $TP\n")
    read = __import__("miles_topology.shell", fromlist=["x"]).read_script(script)
    assert read.argv[0].value is None
    assert "no model qwen9" in read.unresolved[0].why


def test_absolute_source_falls_back_to_the_same_tail_in_the_checkout(tmp_path):
    script = CHECKOUT / "scripts" / "run-glm-abs-source.sh"
    v = check_script(str(script), {})
    assert v.extra["values"]["--num-layers"]["value"] == "8"
    assert v.extra["values"]["--num-layers"]["source"].endswith("scripts/models/glm4-mini.sh:2")
    moved = [p for p in v.warnings if p.code == "sourced-from-checkout"]
    assert len(moved) == 1 and "/root/slime/scripts/models/glm4-mini.sh" in moved[0].message
    alone = tmp_path / "run.sh"  # no checkout around it: not found, and it says where it looked
    alone.write_text(script.read_text())
    v = check_script(str(alone), {})
    why = [u["why"] for u in v.extra["unresolved"] if u["flag"] is None]
    assert why and "nor does its path's tail" in why[0] and "relative to the script" not in why[0]


def test_no_sizes_printed_that_depend_on_an_unresolved_value(tmp_path, capsys):
    # bash counts 4 GPUs here; the reader cannot (nvidia-smi): no world size, no GPU map
    script = tmp_path / "run.sh"
    script.write_text("NUM_GPUS=$(nvidia-smi -L | wc -l)\n"
                      "python3 train.py --num-layers 4 --actor-num-nodes 1 "
                      "--actor-num-gpus-per-node $NUM_GPUS"
                      " --colocate\n")
    for cmd in (["check", "--verbose"], ["show"]):
        assert main([*cmd, str(script)]) == 0
        out = capsys.readouterr().out
        assert "world" not in out and "gpu 0" not in out and "unresolved" in out
    extra = tmp_path / "extra.sh"  # unknown words after a switch may hold any flag
    extra.write_text("EXTRA=$(cat /etc/extra_args)\npython3 train.py --actor-num-nodes 1 "
                     "--actor-num-gpus-per-node 8 --colocate $EXTRA\n")
    v = check_script(str(extra), {})
    assert v.summary is None and v.extra["values"]["--colocate"]["value"] == ""


def test_a_helper_that_probes_the_machine_is_not_run(tmp_path):
    # run here it would count this machine's GPUs (0), not the cluster's: unresolved
    script = tmp_path / "run.sh"
    script.write_text('NUM_GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")\n'
                      "python3 train.py --actor-num-gpus-per-node $NUM_GPUS --colocate\n")
    v = check_script(str(script), {})
    assert v.extra["values"]["--actor-num-gpus-per-node"]["value"] is None
    assert "probes the machine" in v.extra["unresolved"][0]["why"]


def test_one_severity_per_code_in_every_format(capsys):
    """sourced-from-checkout is a note: `rule`, the text report, GitHub and SARIF all say so
    (it was printed as a warning by `check` and SARIF)."""
    import json

    from miles_topology.cli import main
    from miles_topology.codes import CODES

    assert CODES["sourced-from-checkout"].severity == "note"
    script = str(CHECKOUT / "scripts" / "run-glm-abs-source.sh")
    main(["rule", "sourced-from-checkout"])
    assert capsys.readouterr().out.startswith("sourced-from-checkout (note)")
    main(["check", script])
    text = capsys.readouterr().out
    assert "  note [sourced-from-checkout]" in text
    assert "warning [sourced-from-checkout]" not in text
    main(["check", "--format", "github", script])
    assert "::notice " in capsys.readouterr().out
    main(["check", "--format", "sarif", script])
    run = json.loads(capsys.readouterr().out)["runs"][0]
    [result] = [r for r in run["results"] if r["ruleId"] == "sourced-from-checkout"]
    [rule] = [r for r in run["tool"]["driver"]["rules"] if r["id"] == "sourced-from-checkout"]
    assert result["level"] == rule["defaultConfiguration"]["level"] == "note"


def test_a_report_at_another_severity_than_its_code_is_refused():
    from miles_topology import Problem

    assert Problem("etp-implied", "m", "f").severity == "warning"  # the code's
    assert Problem("r3-requires-moe", "m", "f", (), "skipped").severity == "skipped"
    with pytest.raises(ValueError, match="declared error, not warning"):
        Problem("r3-requires-moe", "m", "f", (), "warning")


def test_an_invalid_value_is_the_error_and_what_its_default_implied_is_skipped(tmp_path):
    """`--actor-num-nodes None` is refused by miles' parser (an error); the expert grid the
    rules checked with the default node count in its place is not proven, so it is skipped."""
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py --actor-num-nodes None --actor-num-gpus-per-node 8 "
                      "--num-layers 4 --expert-model-parallel-size 16 "
                      "--pipeline-model-parallel-size 4 --num-experts 256 --colocate\n")
    v = check_script(str(script), {})
    assert [p.code for p in v.errors] == ["invalid-flag-value"]
    assert "expert-grid-divisibility" in [p.code for p in v.skipped]
    script.write_text(script.read_text().replace("None", "1"))
    v = check_script(str(script), {})
    assert "expert-grid-divisibility" in [p.code for p in v.errors]  # with a real value: proven
