"""Launch-script migrations: each step's fixtures, the runner, safety, and the acceptance run
over the checker's fixture scripts (migrate --write, then check, migrate --check, diff)."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support import ROOT, SCRIPTS, STEP_FIXTURES, run_cli

from miles_topology.migrations import common
from miles_topology.migrations.common import (
    LAYOUT,
    MOVES,
    Refused,
    State,
    field_of,
    first_read,
    read,
    renaming,
    verify,
)
from miles_topology.migrations.runner import STEPS, migrate, write
from miles_topology.model.errors import TopologyError
from miles_topology.reading.flags import RENAMED
from miles_topology.reading.sources import read_flags
from miles_topology.reading.stack import current, using

EXPECTED = json.loads((SCRIPTS / "expected.json").read_text())["fixtures"]
CASES = [(n, k) for n, spec in EXPECTED.items() for k in range(len(spec["cases"]))]
BASH = shutil.which("bash")

# Valid for the checker, refused by the migration on purpose (case index -> reason shown).
REFUSED_VALID = {
    ("space-after-backslash.sh", 0): "does not read as one plain launch command",
    ("comment-in-continuation.sh", 0): "does not read as one plain launch command",
    ("several-launches.sh", 0): "does not read as one plain launch command",
    ("several-launches.sh", 1): "runs inside the branch",
    ("several-launches.sh", 2): "runs inside the branch",
}


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def env_args(env: dict) -> list[str]:
    return [x for k, v in env.items() for x in ("--env", f"{k}={v}")]


def bash_ok(path: Path) -> bool:
    return subprocess.run([BASH, "-n", str(path)], capture_output=True).returncode == 0


def step_dir(step) -> Path:
    return STEP_FIXTURES / step.__name__.rsplit(".", 1)[-1]


def staged(src: Path, tmp: Path) -> Path:
    """A step fixture's before.sh as tmp/run.sh, with its model files beside it."""
    if (src / "models").exists():
        shutil.copytree(src / "models", tmp / "models")
    shutil.copy(src / "before.sh", tmp / "run.sh")
    return tmp / "run.sh"


# ---------------------------------------------------------------- the steps


def test_steps_are_numbered_and_self_describing():
    assert [s.ID for s in STEPS] == [f"{k:04d}" for k in range(1, len(STEPS) + 1)]
    for step in STEPS:
        assert step.__name__.rsplit(".", 1)[-1].startswith(f"m{step.ID}_")
        assert step.SUMMARY and "\n" not in step.SUMMARY and callable(step.migrate)
        assert step.__doc__ and step.__doc__.startswith(f"{step.ID}:")
        assert {"before.sh", "after.sh"} <= {p.name for p in step_dir(step).iterdir()}


FORMS = [(s, inline) for s in STEPS for inline in (False, True)
         if (step_dir(s) / ("after-inline.sh" if inline else "after.sh")).exists()]


@pytest.mark.parametrize(("step", "inline"), FORMS,
                         ids=[f"{s.ID}-{'inline' if i else 'yaml'}" for s, i in FORMS])
def test_step_fixture(step, inline, tmp_path):
    src = step_dir(step)
    after = src / ("after-inline.sh" if inline else "after.sh")
    run = staged(src, tmp_path)
    state = State(run, run.read_text(), {}, inline)
    before = first_read(state)
    step.migrate(state, before)
    assert state.text == after.read_text()
    want = {run.with_name("run.topology.yaml").absolute(): (src / "after.topology.yaml")
            .read_text()} if (src / "after.topology.yaml").exists() and not inline else {}
    assert state.files == want
    verify(step.ID, before, read(state))  # the same topology, flags and launch
    assert state.done and not state.kept
    if BASH:
        assert bash_ok(after)


def test_each_step_is_a_no_op_on_its_own_result(tmp_path):
    for step in STEPS:
        d = tmp_path / step.ID
        d.mkdir()
        run = staged(step_dir(step), d)
        first = State(run, run.read_text(), {})
        step.migrate(first, first_read(first))
        run.write_text(first.text)
        for p, text in first.files.items():
            p.write_text(text)
        again = State(run, run.read_text(), {})
        step.migrate(again, first_read(again))
        assert again.text == first.text and again.files in ({}, first.files)


def test_runner_applies_pending_steps_in_order_and_marks_the_script(tmp_path):
    run = staged(step_dir(STEPS[0]), tmp_path)
    out = migrate(run)
    assert out.applied == ["0001", "0003"]  # 0002 finds nothing to do: not applied
    assert out.new.splitlines()[:2] == ["#!/bin/bash", "# miles-topology-migration: 0003"]
    write(out)
    again = migrate(run)
    assert again.applied == [] and again.new == out.new
    # the content decides, not the marker: a script marked 0003 with its layout still
    # in flags gets 0003
    (tmp_path / "b").mkdir()
    run = staged(step_dir(STEPS[2]), tmp_path / "b")
    run.write_text(common.mark(run.read_text(), "0003"))
    assert migrate(run).applied == ["0003"]


def test_wrong_step_is_caught_before_anything_is_written(tmp_path, monkeypatch):
    run = staged(step_dir(STEPS[1]), tmp_path)
    original = run.read_bytes()
    real = STEPS[1].migrate

    def sloppy(state, r):
        real(state, r)
        state.text = state.text.replace("--rollout-num-gpus-per-engine 4",
                                        "--rollout-num-gpus-per-engine 8")

    monkeypatch.setattr(STEPS[1], "migrate", sloppy)
    with pytest.raises(Refused, match=r"step 0002 would change the topology "
                                      r"\(engine_size 4 -> 8\)"):
        migrate(run)
    assert run.read_bytes() == original


# ---------------------------------------------------------------- editing text


@pytest.mark.parametrize(("text", "remove", "want"), [
    ("python3 train.py \\\n   --a 1 \\\n   --b\n", ["--b"], "python3 train.py \\\n   --a 1\n"),
    ("python3 train.py \\\n   --a 1 \\\n   --b\n", ["--a", "1"], "python3 train.py \\\n   --b\n"),
    ("A=(--a 1 --b)\n", ["--a", "1"], "A=(--b)\n"), ("A=(--a 1 --b)\n", ["--b"], "A=(--a 1)\n"),
    ("A=(\n   --a 1   # why\n   --b\n)\n", ["--a", "1"], "A=(\n   # why\n   --b\n)\n"),
    ("x \\\n   --a 1 --b 2 \\\n   --c\n", ["--b", "2"], "x \\\n   --a 1 \\\n   --c\n"),
    ("x \\\n   --a 1 --b 2 \\\n   --c\n", ["--a", "1"], "x \\\n   --b 2 \\\n   --c\n"),
])
def test_deleting_words_keeps_the_shell_structure(text, remove, want, tmp_path):
    spans, pos = [], 0
    for word in remove:
        pos = text.index(word, pos)
        spans.append(common.Edit(pos, pos + len(word), None))
        pos += len(word)
    got = common.apply(text, spans)
    assert got == want
    if BASH:
        (tmp_path / "x.sh").write_text(got)
        assert bash_ok(tmp_path / "x.sh")


def test_overlapping_edits_are_refused():
    with pytest.raises(Refused, match="overlap"):
        common.apply("abcdef", [common.Edit(1, 3, "X"), common.Edit(2, 4, "Y")])


def test_the_same_edit_twice_is_made_once():
    edit = common.Edit(1, 3, "X")
    assert common.apply("abcdef", [edit, common.Edit(1, 3, "X")]) == "aXdef"


# ---------------------------------------------------------------- what stays, what is refused


def write_script(tmp_path: Path, text: str, model: str | None = None) -> Path:
    if model is not None:
        (tmp_path / "models").mkdir(exist_ok=True)
        (tmp_path / "models" / "m.sh").write_text(model)
    path = tmp_path / "run.sh"
    path.write_text(text)
    return path


HEAD = '#!/bin/bash\nD="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"\n'


def test_every_kind_of_layout_flag_moves(tmp_path):
    run = write_script(tmp_path, "#!/bin/bash\n"
                       "python3 train.py --actor-num-nodes 2 --actor-num-gpus-per-node 8 \\\n"
                       "   --use-tp-pp-dp-mapping --pipeline-model-parallel-size 2 \\\n"
                       "   --num-layers-per-virtual-pipeline-stage 2 --num-layers 16 \\\n"
                       "   --use-critic --critic-num-nodes 1 --rollout-num-gpus 8 \\\n"
                       "   --rollout-num-gpus-per-engine 8 --sglang-dp-size 2 \\\n"
                       "   --sglang-enable-dp-attention --colocate=false --global-batch-size 8\n")
    out = migrate(run)
    assert out.new.endswith('python3 train.py "${TOPOLOGY_ARGS[@]}" \\\n   --num-layers 16 \\\n'
                            '   --use-critic \\\n   --global-batch-size 8\n')  # not layout
    assert next(iter(out.files.values())).split("\n")[3:] == [
        "nodes: 2  # --actor-num-nodes", "gpus_per_node: 8  # --actor-num-gpus-per-node",
        "critic_nodes: 1  # --critic-num-nodes", "pp: 2  # --pipeline-model-parallel-size",
        "vpp_layers: 2  # --num-layers-per-virtual-pipeline-stage",
        "order: tp-cp-ep-pp-dp  # --use-tp-pp-dp-mapping", "colocate: false  # --colocate",
        "rollout_gpus: 8  # --rollout-num-gpus", "engine_size: 8  # --rollout-num-gpus-per-engine",
        "engine_dp: 2  # --sglang-dp-size", "dp_attention: true  # --sglang-enable-dp-attention",
        ""]


def test_flag_in_a_sourced_file_stays_with_a_reason(tmp_path):
    run = write_script(tmp_path, HEAD + 'source "$D/models/m.sh"\n'
                       "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 4 "
                       "--colocate ${MODEL_ARGS[@]}\n",
                       "MODEL_ARGS=(--num-layers 4 --tensor-model-parallel-size 2)\n")
    out = migrate(run)
    assert any("--tensor-model-parallel-size" in k and "sourced file" in k for k in out.kept)
    (yaml,) = out.files.values()
    assert "tp:" not in yaml and "gpus_per_node: 4  # --actor-num-gpus-per-node" in yaml
    assert '"$(miles-topology flags "${D}/run.topology.yaml")" || exit 1' in out.new


def test_words_shared_with_another_command_stay(tmp_path):
    run = write_script(tmp_path, "P=(--tensor-model-parallel-size 2)\n"
                       "python3 tools/convert.py ${P[@]}\n"
                       "python3 train.py --actor-num-gpus-per-node 4 --colocate ${P[@]}\n")
    out = migrate(run)
    assert any("also reach the command at" in k for k in out.kept)
    assert "P=(--tensor-model-parallel-size 2)" in out.new
    assert out.new.startswith('# miles-topology-migration: 0003\nMILES_TOPOLOGY_DIR="$(cd -- '
                              '"$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"')
    assert 'miles-topology flags "${MILES_TOPOLOGY_DIR}/run.topology.yaml"' in out.new


def test_flag_in_a_stepped_loop_is_renamed_in_place_and_not_moved(tmp_path):
    # the loop runs twice, so the launch gets the flag twice from the one word in its body
    run = write_script(tmp_path, "ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                       "--colocate --num-layers 4)\nfor x in a b; do\n"
                       "  ARGS+=(--rollout-num-gpus-per-node 8 --tensor-model-parallel-size 2)\n"
                       'done\npython3 train.py "${ARGS[@]}"\n')
    out = migrate(run)
    assert "  ARGS+=(--num-gpus-per-node 8 --tensor-model-parallel-size 2)\n" in out.new
    assert any("--tensor-model-parallel-size" in k and "loop" in k for k in out.kept)
    (yaml,) = out.files.values()
    assert "tp:" not in yaml and "gpus_per_node: 8  #" in yaml


def test_value_changed_after_use_is_computed_where_the_flag_was(tmp_path):
    run = write_script(tmp_path, "TP=2\nP=(--tensor-model-parallel-size $TP)\nTP=4\n"
                       "python3 train.py --actor-num-gpus-per-node 4 --colocate ${P[@]}\n")
    out = migrate(run)
    assert "export TOPO_TP=$TP  # read by run.topology.yaml\nP=()" in out.new
    assert "tp: ${oc.env:TOPO_TP,2}  #" in out.files[run.with_name("run.topology.yaml").absolute()]


@pytest.mark.parametrize(("text", "code", "why"), [
    ("python3 train.py --actor-num-nodes $(nodes)\n", 1, "known only at run time"),
    ('python3 train.py --colocate "$@"\n', 1, "known only at run time"),
    ("python3 train.py --actor-num-gpus-per-node 6 --tensor-model-parallel-size 4\n", 1,
     "topology is invalid"),
    ("python3 train.py --a 'x\n", 2, "cannot read it"), ("echo hi\n", 2, "no training launch"),
])
def test_refusals_leave_the_script_untouched(tmp_path, capsys, text, code, why):
    run = write_script(tmp_path, text)
    got, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert (got, why in err, "refused" in err) == (code, True, True)
    assert run.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["run.sh"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("name", ["run$(touch pwned).sh", "run`touch pwned`.sh", 'run"q.sh',
                                  "run\\x.sh", "run ${X}.sh"])
def test_a_script_name_with_shell_characters_is_named_literally(tmp_path, capsys, name):
    """The YAML's name goes into a double-quoted word of the script: held out, a name with
    `$(...)` ran the command in the migrated script (read back, it was refused with a made-up
    topology change). In real bash the word is the file's own path and runs nothing."""
    run = tmp_path / name
    run.write_text("python3 train.py --actor-num-gpus-per-node 4 --colocate\n")
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    line = next(x for x in run.read_text().splitlines() if "miles-topology flags" in x)
    got = subprocess.run([BASH, "-c", 'miles-topology() { printf "%s" "$2"; }\n'
                          f"MILES_TOPOLOGY_DIR=/D\n{line}\nprintf %s \"$TOPOLOGY_FLAGS\""],
                         cwd=tmp_path, capture_output=True, text=True)
    assert got.stdout == "/D/" + name.removesuffix(".sh") + ".topology.yaml"
    assert not (tmp_path / "pwned").exists()


def test_a_newline_in_a_script_name_does_not_start_a_line_of_its_own(tmp_path, capsys):
    run = tmp_path / "ok\nFound 0 errors.sh"  # printed raw, it forged a line of output
    run.write_text("echo hi\n")
    code, out, err = cli(["migrate", "--write", str(run)], capsys)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(str(tmp_path) + "/ok\\nFound 0 errors.sh: refused: ")


@pytest.mark.parametrize("name", ["r\nvpp: 1\n#.sh", "run\x1b[31m.sh"])
def test_a_script_name_with_a_control_character_is_refused_before_the_yaml(tmp_path, capsys,
                                                                             name):
    """The YAML's name goes into comments of the YAML and the script, where a newline ends
    the line (held out: the read-back refused with a parse error of a temporary file, or a
    made-up topology change `vpp None -> 1`); --inline writes no name and still works."""
    text = "python3 train.py --actor-num-gpus-per-node 4 --colocate\n"
    run = tmp_path / name
    run.write_text(text)
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "its name holds a control character" in err and "/tmp/tmp" not in err
    assert run.read_text() == text and [p.name for p in tmp_path.iterdir()] == [name]
    assert cli(["migrate", "--write", "--inline", str(run)], capsys)[0] == 0


LAUNCHER = ('"""Launch GRPO on one node: 8 GPUs.\n\n'
            'If the model is missing, download it first."""\n'
            "import os\n\n\ndef execute():\n"
            "    os.system('python3 train.py --actor-num-gpus-per-node 8 --colocate "
            "--rollout-num-gpus-per-engine 2')\n\n\nif __name__ == '__main__':\n    execute()\n")


@pytest.mark.parametrize(("name", "text", "why"), [
    ("run.py", LAUNCHER, "it is a Python launcher"),
    ("run.topology.yaml", "tp: 2\npp: 1\n", "it is a YAML file"),
])
def test_a_python_launcher_or_a_yaml_is_refused_by_its_kind(tmp_path, capsys, name, text, why):
    """Read as bash, the docstring's 'If' was a false "'if' is not closed by 'fi'"."""
    path = tmp_path / name
    path.write_text(text)
    for args in ([], ["--write"]):
        got, _, err = cli(["migrate", *args, str(path)], capsys)
        assert (got, why in err, "not closed" in err) == (2, True, False)
    assert cli(["migrate", "--check", str(path)], capsys)[0] == 0  # nothing pending
    assert path.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_paths_with_dots_and_relative_paths(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    run = staged(step_dir(STEPS[2]), tmp_path)
    monkeypatch.chdir(tmp_path / "a")
    out = migrate(Path("..") / "a" / ".." / "run.sh")
    assert list(out.files) == [tmp_path / "run.topology.yaml"]
    write(out)
    assert (tmp_path / "run.topology.yaml").exists() and migrate(run).applied == []


def test_unresolved_layout_value_migrates_once_env_resolves_it(tmp_path):
    run = write_script(tmp_path, "N=$(nproc)\npython3 train.py --actor-num-gpus-per-node $N "
                       "--colocate\n")
    with pytest.raises(Refused, match="--env"):
        migrate(run)
    out = migrate(run, {"N": "4"})
    assert "gpus_per_node: ${oc.env:N,4}  #" in next(iter(out.files.values()))
    assert "export N  # read by run.topology.yaml\nTOPOLOGY_FLAGS=" in out.new


def test_a_problem_of_a_value_known_only_at_run_time_is_not_called_invalid(tmp_path):
    # check skips it (the value is unknown), so migrate does not say "invalid" (held-out: a
    # p2p profile script's --max-tokens-per-gpu ${MAX_TOKENS_PER_GPU}, set in a case)
    run = write_script(tmp_path, 'case "$M" in a) T=4096 ;; *) T=8192 ;; esac\n'
                       "python3 train.py --actor-num-gpus-per-node 8 --colocate "
                       "--use-dynamic-batch-size --max-tokens-per-gpu ${T}\n")
    with pytest.raises(Refused, match=r"cannot be checked: --max-tokens-per-gpu has a value "
                       r"known only at run time \(\[dynamic-batch-requires-max-tokens\]"):
        migrate(run)
    assert migrate(run, {"M": "a"}).files  # known: it migrates


def test_not_utf8_and_missing_files_are_unreadable(tmp_path, capsys):
    (tmp_path / "bad.sh").write_bytes(b"python3 train.py --colocate \xff\n")
    assert cli(["migrate", str(tmp_path / "bad.sh")], capsys)[0] == 2
    assert cli(["migrate", str(tmp_path / "none.sh")], capsys)[0] == 2
    assert cli(["migrate"], capsys)[0] == 2


def test_an_existing_different_yaml_is_not_overwritten(tmp_path):
    run = staged(step_dir(STEPS[2]), tmp_path)
    run.with_name("run.topology.yaml").write_text("tp: 8\n")
    with pytest.raises(Refused, match="exists"):
        migrate(run)


# ---------------------------------------------------------------- the command


def test_default_shows_a_diff_and_writes_nothing(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    original = run.read_text()
    code, out, err = cli(["migrate", str(run)], capsys)
    assert code == 0 and run.read_text() == original
    assert f"--- {run}\n+++ {run}\n" in out and "+++ " + str(tmp_path / "run.topology.yaml") in out
    assert "--- /dev/null" in out and "+nodes: ${oc.env:NNODES,2}" in out
    assert "applied 0003" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "run.sh"]


def test_write_is_atomic_keeps_a_backup_and_the_mode(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    run.chmod(0o755)
    original, planned = run.read_text(), migrate(run)
    code, out, _ = cli(["migrate", "--write", str(run)], capsys)
    assert code == 0 and "wrote" in out
    assert run.with_name("run.sh.bak").read_text() == original
    assert run.stat().st_mode & 0o777 == 0o755
    assert run.read_text() == planned.new
    assert {p: p.read_text() for p in planned.files} == planned.files
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_write_leaves_the_original_and_no_temporary_file(tmp_path, capsys, monkeypatch):
    run = staged(step_dir(STEPS[2]), tmp_path)
    original = run.read_bytes()
    calls = []

    def broken(src, dst):
        calls.append(dst)
        if str(dst).endswith("run.sh"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    real = os.replace
    monkeypatch.setattr(os, "replace", broken)
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "No space left on device" in err and "left as it was" in err
    assert run.read_bytes() == original and calls
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "run.sh"]


def test_check_exit_codes(tmp_path, capsys):
    run = staged(step_dir(STEPS[0]), tmp_path)
    code, out, _ = cli(["migrate", "--check", str(run)], capsys)
    assert code == 1 and "pending 0001" in out
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    code, out, _ = cli(["migrate", "--check", str(run)], capsys)
    assert code == 0 and "up to date" in out
    assert cli(["migrate", "--check", "--write", str(run)], capsys)[0] == 2


def test_dry_run_is_the_default_said_aloud(tmp_path, capsys):
    # `migrate --dry-run` was the top-level usage (exit 2): the flag names the default
    run = staged(step_dir(STEPS[0]), tmp_path)
    original = run.read_bytes()
    dry = cli(["migrate", "--dry-run", str(run)], capsys)
    assert dry == cli(["migrate", str(run)], capsys) and dry[0] == 0 and "+++" in dry[1]
    assert cli(["migrate", "--dry-run", "--check", str(run)], capsys)[0] == 1
    code, _, err = cli(["migrate", "--dry-run", "--write", str(run)], capsys)
    assert code == 2 and "--dry-run writes nothing" in err and "usage" not in err
    assert run.read_bytes() == original and not list(tmp_path.glob("*.bak"))


# ---------------------------------------------------------------- the launcher takes both forms


def test_launcher_accepts_legacy_flags_the_topology_file_and_flags_conflict(tmp_path):
    argv = ["--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "4",
            "--rollout-num-gpus-per-node", "8"]
    with pytest.raises(TopologyError) as e:  # no current stack defines the old spelling
        read_flags(argv)
    assert [p.code for p in e.value.problems] == ["unknown-flag"]
    with using(renaming(current())):  # a stack that still has it (as step 0001 reads it)
        legacy = read_flags(argv)
    (warn,) = [w for w in legacy.topology.warnings if w.code == "deprecated-flag"]
    assert "miles-topology migrate" in warn.fix and "--num-gpus-per-node" in warn.message
    yaml = tmp_path / "t.topology.yaml"
    yaml.write_text("gpus_per_node: ${oc.env:G,4}\nrollout_gpus: 4\nnode_gpus: 8\n")
    assert read_flags(["--topology", str(yaml)], {}).topology == legacy.topology
    with pytest.raises(TopologyError) as e:
        read_flags(["--topology", str(yaml), "--actor-num-gpus-per-node", "2"], {})
    assert [p.code for p in e.value.problems] == ["flag-conflict"]


# ---------------------------------------------------------------- acceptance: checker fixtures

ADDED = re.compile(r"^\s*(# miles-topology-migration: \d{4}|# miles-topology \d{4}: .*"
                   r"|export [A-Za-z_].*  # read by \S+\.topology\.yaml"
                   r"|MILES_TOPOLOGY_DIR\w*=.*  # this script's folder, where \S+ is"
                   r'|TOPOLOGY_FLAGS\w*="\$\(miles-topology flags "[^"\n]*\.topology\.yaml"\)"'
                   r" \|\| exit 1  # .*"
                   r'|eval "TOPOLOGY_ARGS\w*=\(\$\{TOPOLOGY_FLAGS\w*\}\)"  # .*)$')
TOPOLOGY_REF = re.compile(r' --topology "[^"\n]*\.topology\.yaml"| "\$\{TOPOLOGY_ARGS\w*\[@\]\}"'
                          r'| --runtime-env-json="\{\\"env_vars\\": \{[^\n]*?\}\}"'
                          r"| \(miles-topology \d{4}: [^\n]* moved to [^\n]*\)")
# shell words, roughly: $((...)), ${...}, quoted strings and bare runs count as one each
TOKEN = re.compile(r"\$\(\([^\n]*?\)\)|\$\{[^}\n]*\}|\"[^\"\n]*\"|'[^'\n]*'|[^\s()\"'$\\]+|\$\w*")


def layout_word(word: str) -> bool:
    return word.startswith("--") and field_of(word.split("=", 1)[0]) in LAYOUT


NOTE = re.compile(r" \(miles-topology \d{4}: [^\n]* moved to [^\n]*\)")


def moved_comment(line: str, yaml: str) -> str:
    """The line without its trailing comment when that comment moved into the YAML."""
    m = re.match(r"(.*?\S)[ \t]+#[ \t]*([^\n]*)$", line)
    if m and "#" not in m.group(1) and f"; {m.group(2).strip()}" in yaml:
        return m.group(1)
    return line


def assert_only_layout_moved(old: str, new: str, yaml: str = "") -> None:
    """Besides the marker, comments and exports it adds and the topology reference, the
    new script is the old one with layout flags (and their values) taken out; a comment
    that goes is in the YAML."""
    kept = TOPOLOGY_REF.sub("", "\n".join(x for x in new.split("\n") if not ADDED.match(x)))
    old = "\n".join(moved_comment(x, yaml) for x in old.split("\n")
                    if not (x.lstrip().startswith("#") and yaml and
                            x.strip().lstrip("#").strip() in yaml))
    a, b = Counter(TOKEN.findall(old)), Counter(TOKEN.findall(kept))
    assert not b - a, f"new words: {b - a}"
    gone = list((a - b).elements())
    flags = [w for w in gone if w.startswith("--")]
    assert all(layout_word(w) and field_of(w.split("=", 1)[0]) in MOVES for w in flags), flags
    assert len(gone) - len(flags) <= len(flags)  # at most one value word per flag
    comments = [x for x in old.split("\n") if x.lstrip().startswith("#")]
    noted = [NOTE.sub("", x) for x in new.split("\n")]
    assert all(c in noted or c.strip().lstrip("#").strip() in yaml for c in comments)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "case"), CASES, ids=[f"{n}[{k}]" for n, k in CASES])
def test_acceptance_on_checker_fixtures(name, case, tmp_path, capsys):
    env = EXPECTED[name]["cases"][case]["env"]
    d = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, d)
    path = d / name
    if EXPECTED[name]["cases"][case]["entry"] is None:  # not a training job: nothing to move
        code, _, err = cli(["migrate", "--write", *env_args(env), str(path)], capsys)
        assert code == 2 and "no training launch" in err
        assert path.read_text() == (SCRIPTS / name).read_text()
        return
    code, out, _ = cli(["check", "--format", "json", *env_args(env), str(path)], capsys)
    before = json.loads(out)
    unknown = [u for u in before["unresolved"]
               if u["flag"] is None or field_of(u["flag"]) in LAYOUT]
    why = REFUSED_VALID.get((name, case))
    code, out, err = cli(["migrate", "--write", *env_args(env), str(path)], capsys)
    # a flag no current stack defines is an error whose fix is its rename (issue 37), and
    # renaming it is what migration step 1 does: such a script is migrated, not refused
    renamed_only = before["errors"] and all(
        e["code"] == "unknown-flag" and set(e["flags"]) <= set(RENAMED)
        for e in before["errors"])
    if (not before["ok"] and not renamed_only) or unknown or why:
        assert code == 1 and f"{path}: refused: " in err
        assert why is None or why in err
        assert path.read_text() == (SCRIPTS / name).read_text()
        assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in SCRIPTS.iterdir())
        return
    assert code == 0, err
    code, out, _ = cli(["check", "--format", "json", *env_args(env), str(path)], capsys)
    after = json.loads(out)
    sizes = ("world_size", "dp", "edp")
    assert [after["topology"][k] for k in sizes] == [before["topology"][k] for k in sizes]
    assert after["ok"]
    # the whole Topology, read as the launcher reads it, is the one the original meant
    old = State(SCRIPTS / name, (SCRIPTS / name).read_text(), env)
    new = State(path, path.read_text(), env)
    assert common.key(read(new).topology) == common.key(read(old).topology)
    assert cli(["migrate", "--check", str(path)], capsys)[0] == 0
    yaml = path.with_name(path.name.removesuffix(".sh") + ".topology.yaml")
    assert_only_layout_moved((SCRIPTS / name).read_text(), path.read_text(),
                             yaml.read_text() if yaml.exists() else "")
    if BASH:
        assert bash_ok(path)
        ran_same(SCRIPTS / name, path, tmp_path, env)
    written = {p: p.read_bytes() for p in d.iterdir() if p.is_file()}
    code, _, err = cli(["migrate", "--write", *env_args(env), str(path)], capsys)
    assert code == 0 and "up to date" in err
    assert {p: p.read_bytes() for p in d.iterdir() if p.is_file()} == written


def ran_same(original: Path, migrated: Path, tmp_path: Path, env: dict) -> None:
    """Run both under bash with the stand-ins: the migrated one launches what the original
    did. A script bash itself cannot run as given (it needs its --env values as the
    environment, or files that do not exist here) is compared when the original runs."""
    shell_env = {k: v for k, v in env.items() if not k.isdigit()}
    texts = [p.read_text() for p in original.parent.rglob("*.sh")]
    (tmp_path / "run").mkdir()
    bin_, log = stand_ins(tmp_path / "run", flag_words(*texts))
    try:
        before = launched(original, original.parent, bin_, log, **shell_env)
    except AssertionError:
        return  # the original does not run under bash here either
    meant = common.key(read(State(original, original.read_text(), env)).topology)
    try:
        if common.key(read_flags(before["argv"], env).topology) != meant:
            return  # the --env values stand for command output bash does not reproduce here
    except TopologyError:
        return
    after = launched(migrated, migrated.parent, bin_, log, **shell_env)
    same_launch(before, after, env)
    RAN.append(original.name)


RAN: list[str] = []


def test_step_modules_import_without_heavy_dependencies():
    code = ("import sys, miles_topology.migrations.runner, miles_topology.migrations.common; "
            "bad = {'torch', 'ray', 'megatron', 'numpy'} & {m.split('.')[0] for m in sys.modules};"
            "assert not bad, bad")
    subprocess.run([os.sys.executable, "-c", code], check=True, cwd=ROOT)
    assert importlib.import_module("miles_topology.migrations").STEPS == STEPS


def test_rank_order_switch_moves_as_the_order_field(tmp_path, capsys):
    script = tmp_path / "r.sh"
    script.write_text("#!/bin/bash\npython3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node"
                      " 8 --num-layers 4 --colocate --use-tp-pp-dp-mapping\n")
    before = read_flags(["--colocate", "--use-tp-pp-dp-mapping"]).topology
    code, _, _ = cli(["migrate", "--write", str(script)], capsys)
    assert code == 0
    assert "order: tp-cp-ep-pp-dp" in (tmp_path / "r.topology.yaml").read_text()
    assert "--use-tp-pp-dp-mapping" not in script.read_text()
    code, out, _ = cli(["check", "--format", "json", str(script)], capsys)
    assert code == 0 and json.loads(out)["topology"]["order"] == before.layout.order


# ---------------------------------------------------------------- write safety


def test_write_through_a_symlink_edits_the_target_and_keeps_the_link(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    real = run.rename(tmp_path / "run-real.sh")
    link = tmp_path / "run.sh"
    link.symlink_to("run-real.sh")
    original, planned = real.read_text(), migrate(link)
    code, out, err = cli(["migrate", "--write", str(link)], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "run-real.sh"
    assert real.read_text() == planned.new and (tmp_path / "run-real.sh.bak").read_text() \
        == original
    assert not (tmp_path / "run.sh.bak").exists()
    assert (tmp_path / "run.topology.yaml").exists()  # beside the link, which it names


def test_symlink_into_another_folder_is_refused_when_a_yaml_would_be_written(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    real = staged(step_dir(STEPS[2]), tmp_path / "real")
    shutil.copytree(tmp_path / "real" / "models", tmp_path / "models")
    link = tmp_path / "run.sh"
    link.symlink_to(real)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, _, err = cli(["migrate", "--write", str(link)], capsys)
    assert code == 1 and "symbolic link to" in err and "another folder" in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert link.is_symlink()
    # --inline writes no YAML: it edits the target in place of the link
    code, _, err = cli(["migrate", "--write", "--inline", str(link)], capsys)
    assert code == 0, err
    assert link.is_symlink() and "TOPOLOGY_ARGS=(" in real.read_text()


def test_a_topology_yaml_linked_out_of_the_checkout_is_not_written_through(tmp_path, capsys):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "pyproject.toml").write_text("")  # the checkout's root
    run = staged(step_dir(STEPS[2]), tmp_path / "ck")
    (yaml_text,) = migrate(run).files.values()
    victim = tmp_path / "victim.yaml"
    victim.write_text(yaml_text)  # what it would write: only the gate stops it
    run.with_name("run.topology.yaml").symlink_to(victim)
    text = run.read_text()
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "outside the input's checkout" in err
    assert err.count(str(run.with_name("run.topology.yaml"))) == 1  # was named twice
    assert victim.read_text() == yaml_text and run.read_text() == text


def test_backups_are_numbered_never_overwritten(tmp_path, capsys):
    run = staged(step_dir(STEPS[0]), tmp_path)
    run.with_name("run.sh.bak").write_text("an older backup\n")
    run.with_name("run.sh.bak.1").write_text("another\n")
    original = run.read_text()
    code, out, _ = cli(["migrate", "--write", str(run)], capsys)
    assert code == 0 and "previous script in run.sh.bak.2" in out
    assert run.with_name("run.sh.bak").read_text() == "an older backup\n"
    assert run.with_name("run.sh.bak.1").read_text() == "another\n"
    assert run.with_name("run.sh.bak.2").read_text() == original


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_write_keeps_mode_and_owner(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    run.chmod(0o750)
    os.chown(run, 4321, 4322)
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    for p in (run, run.with_name("run.sh.bak"), run.with_name("run.topology.yaml")):
        st = p.stat()
        assert (st.st_uid, st.st_gid) == (4321, 4322), p
    assert run.stat().st_mode & 0o7777 == 0o750


def test_read_only_script_is_refused_and_nothing_changes(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    run.chmod(0o444)
    before = sorted(p.name for p in tmp_path.iterdir())
    original = run.read_bytes()
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "read-only (mode 0444)" in err and "chmod u+w" in err
    assert run.read_bytes() == original and sorted(p.name for p in tmp_path.iterdir()) == before
    code, out, _ = cli(["migrate", "--check", str(run)], capsys)  # not pending: --write refuses
    assert code == 0 and "not migrated" in out and "read-only" in out


def test_hard_linked_script_is_refused(tmp_path, capsys):
    run = staged(step_dir(STEPS[0]), tmp_path)
    os.link(run, tmp_path / "other.sh")
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "2 hard links" in err
    assert (tmp_path / "other.sh").read_text() == run.read_text()


def test_check_pending_is_what_write_would_do(tmp_path, capsys):
    src = step_dir(STEPS[2])
    run = staged(src, tmp_path)
    code, out, _ = cli(["migrate", "--check", str(run)], capsys)
    assert code == 1 and "pending 0003" in out
    # a sourced model file has no launch of its own: nothing to migrate, not pending
    code, out, _ = cli(["migrate", "--check", str(tmp_path / "models" / "moe.sh")], capsys)
    assert code == 0 and "not migrated" in out and "no training launch" in out
    # what --write refuses is not pending either
    (tmp_path / "b").mkdir()
    bad = write_script(tmp_path / "b", "python3 train.py --actor-num-gpus-per-node 6 "
                       "--tensor-model-parallel-size 4\n")
    code, out, _ = cli(["migrate", "--check", str(bad)], capsys)
    assert code == 0 and "topology is invalid" in out
    assert cli(["migrate", "--write", str(bad)], capsys)[0] == 1
    # unreadable input is still exit 2
    assert cli(["migrate", "--check", str(tmp_path / "none.sh")], capsys)[0] == 2


# ---------------------------------------------------------------- the migrated script, run


STAND_IN_TRAIN = """\
import json, os, sys
sys.path.insert(0, ROOT)
try:  # the real flag surface of miles' train.py (surface.py: miles, Megatron-LM, SGLang)
    from miles_topology.reading.surface import parser
    surface = parser()
except (ImportError, OSError):  # not here yet: the flags of the original scripts, no more
    import argparse
    from miles_topology.reading.flags import TOPOLOGY, is_switch
    surface = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for flag in sorted(json.loads(open(KNOWN).read())):
        if flag == TOPOLOGY:
            continue
        if is_switch(flag):
            surface.add_argument(flag, action="store_true")
        else:
            surface.add_argument(flag, nargs="*")
args = sys.argv[1:]
ns = surface.parse_args(args)  # an unknown flag: "unrecognized arguments", exit 2
with open(LOG, "a") as f:
    f.write(json.dumps({"prog": "train.py", "argv": args, "parsed": vars(ns)}) + "\\n")
"""

STAND_IN_PY = """\
import json, os, sys
a = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps({"prog": "python3", "argv": a, "cwd": os.getcwd(),
                        "env": dict(os.environ)}) + "\\n")
i = 0
while i < len(a) and a[i].startswith("-") and a[i] not in ("-c", "-m"):
    i += 1
script = a[i:]
if script[:2] == ["-m", "miles.train"] or script and os.path.basename(script[0]) in (
        "train.py", "train_async.py"):
    rest = script[2:] if script[0] == "-m" else script[1:]
    os.execv(REAL, [REAL, TRAIN, *rest])
os.execv(REAL, [REAL, *a])  # a helper (model_args_utils.py, -c ...): the real thing
"""

STAND_IN_RAY = """\
import json, os, sys
a = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps({"prog": "ray", "argv": a, "env": dict(os.environ)}) + "\\n")
if a[:2] == ["job", "submit"]:
    cut = a.index("--")
    env = {}
    for k, w in enumerate(a[2:cut], 2):
        if w.startswith("--runtime-env-json"):
            got = w.split("=", 1)[1] if "=" in w else a[k + 1]
            env = {k: str(v) for k, v in json.loads(got).get("env_vars", {}).items()}
    # the entrypoint gets the cluster's environment and the runtime env, not the exports
    os.execve(PY, [PY, *a[cut + 2:]] if a[cut + 1] == "python3" else a[cut + 1:],
              {"PATH": os.environ["PATH"], **env})
"""


def stand_ins(tmp_path: Path, known: set[str] = frozenset()) -> tuple[Path, Path]:
    """A bin folder for running launch scripts under bash: `ray` (`job submit -- CMD` runs
    CMD with only the runtime env, as a job's entrypoint gets it), `python3` (runs train.py
    as the stand-in below, anything else with the real Python), the real `miles-topology`,
    and a `train.py` that parses its flags with miles' flag surface. Each records its argv
    (and environment) in a JSON-lines log. `pkill`, `sleep`, `nvidia-smi` are inert."""
    import sys

    bin_, log = tmp_path / "bin", tmp_path / "log.jsonl"
    bin_.mkdir()
    (tmp_path / "known.json").write_text(json.dumps(sorted(known)))
    consts = {"ROOT": str(ROOT), "LOG": str(log), "REAL": sys.executable,
              "TRAIN": str(bin_ / "train.py"), "PY": str(bin_ / "python3"),
              "KNOWN": str(tmp_path / "known.json")}
    head = "".join(f"{k} = {v!r}\n" for k, v in consts.items())
    for name, body in (("train.py", STAND_IN_TRAIN), ("python3.py", STAND_IN_PY),
                       ("ray.py", STAND_IN_RAY)):
        (bin_ / name).write_text(head + body)
    for name in ("python3", "ray"):
        (bin_ / name).write_text(f'#!/bin/bash\nexec {sys.executable} {bin_ / name}.py "$@"\n')
    (bin_ / "miles-topology").write_text(
        f'#!/bin/bash\nPYTHONPATH={ROOT} exec {sys.executable} -m miles_topology "$@"\n')
    for name in ("pkill", "killall", "sleep", "nvidia-smi"):
        (bin_ / name).write_text("#!/bin/bash\nexit 0\n")
    for p in bin_.iterdir():
        p.chmod(0o755)
    return bin_, log


def launched(script: Path, cwd: Path, bin_: Path, log: Path, **env) -> dict:
    """Run the script under bash with the stand-ins; what train.py got (argv, parsed)."""
    log.unlink(missing_ok=True)
    tmp = log.parent / "tmp"  # mktemp's files land here
    tmp.mkdir(exist_ok=True)
    got = subprocess.run([BASH, os.path.relpath(script, cwd)], cwd=cwd, capture_output=True,
                         text=True, env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(cwd),
                                         "TMPDIR": str(tmp), **env}, timeout=120)
    records = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    trains = [r for r in records if r["prog"] == "train.py"]
    assert got.returncode == 0 and len(trains) == 1, (got.returncode, got.stderr[-2000:])
    return trains[0]


def same_launch(a: dict, b: dict, env: dict) -> None:
    """The same topology, and the same values for every flag that is not layout (a file
    the script wrote for --sglang-config: the same text)."""
    ta, tb = read_flags(a["argv"], env).topology, read_flags(b["argv"], env).topology
    ka, kb = common.key(ta), common.key(tb)
    if ka["sglang_config"] != kb["sglang_config"] and "/tmp/tmp." in ka["sglang_config"]:
        ka["sglang_config"], kb["sglang_config"] = (Path(x).read_text() for x in (
            ka["sglang_config"], kb["sglang_config"]))
        a, b = ({**r, "parsed": {**r["parsed"], "sglang_config": t}} for r, t in
                ((a, ka["sglang_config"]), (b, kb["sglang_config"])))
    assert ka == kb
    layout = {flag.lstrip("-").replace("-", "_") for flag in (*a["argv"], *b["argv"])
              if flag.startswith("--") and field_of(flag.split("=", 1)[0]) in MOVES}
    rest = [{k: v for k, v in r["parsed"].items() if k not in layout} for r in (a, b)]
    assert rest[0] == rest[1]


def flag_words(*texts: str) -> set[str]:
    return {w.split("=", 1)[0] for t in texts for w in re.findall(r"--[a-z][\w-]*=?", t)}


def run_bash(script: Path, cwd: Path, bin_: Path, **env) -> None:
    subprocess.run([BASH, os.path.relpath(script, cwd)], cwd=cwd, check=True,
                   capture_output=True, env={"PATH": f"{bin_}:/usr/bin:/bin", **env})


@pytest.mark.slow
@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_values_moved_to_yaml_reach_train_py_under_ray_job_submit(tmp_path, capsys):
    (tmp_path / "job").mkdir()
    run = staged(step_dir(STEPS[2]), tmp_path / "job")
    bin_, log = stand_ins(tmp_path, flag_words(run.read_text(),
                                               (run.parent / "models" / "moe.sh").read_text()))
    before = launched(run, tmp_path, bin_, log, NNODES="4")
    assert read_flags(before["argv"]).topology.layout.nodes == 4  # NNODES=4 reaches the flag
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    text = run.read_text()
    assert "--runtime-env-json=" not in text and "--topology" not in text
    after = launched(run, tmp_path, bin_, log, NNODES="4")
    same_launch(before, after, {})  # and through the YAML, expanded on the submitting side
    assert read_flags(after["argv"]).topology.layout.nodes == 4
    # upstream's parser refuses --topology: the form this step used to write does not run
    bad = run.with_name("bad.sh")
    bad.write_text(text.replace('"${TOPOLOGY_ARGS[@]}"', '--topology "${SCRIPT_DIR}/run'
                                '.topology.yaml"'))
    got = subprocess.run([BASH, str(bad)], capture_output=True, text=True,
                         env={"PATH": f"{bin_}:/usr/bin:/bin"})
    assert got.returncode == 2 and "unrecognized arguments: --topology" in got.stderr


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_an_invalid_layout_stops_the_script_before_ray_job_submit(tmp_path, capsys):
    (tmp_path / "job").mkdir()
    run = staged(step_dir(STEPS[2]), tmp_path / "job")
    bin_, log = stand_ins(tmp_path, flag_words(run.read_text(),
                                               (run.parent / "models" / "moe.sh").read_text()))
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    yaml = run.with_name("run.topology.yaml")
    yaml.write_text(yaml.read_text().replace("tp: 2", "tp: 3"))
    got = subprocess.run([BASH, str(run)], capture_output=True, text=True,
                         env={"PATH": f"{bin_}:/usr/bin:/bin"})
    assert got.returncode == 1 and "dense-grid-divisibility" in got.stderr
    # and `check` of the script says so, with tp 3 read from the YAML (not the defaults)
    code, out, _ = cli(["check", "--format", "json", str(run)], capsys)
    assert code == 1 and "dense-grid-divisibility" in {e["code"] for e in
                                                      json.loads(out)["errors"]}
    assert not log.exists()  # neither ray nor python3 ran
    # without set -e too: the explicit `|| exit 1` stops it
    run.write_text(run.read_text().replace("set -ex\n", ""))
    got = subprocess.run([BASH, str(run)], capture_output=True, text=True,
                         env={"PATH": f"{bin_}:/usr/bin:/bin"})
    assert got.returncode == 1 and not log.exists()


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("folder", [
    "",  # no folder variable at all
    'D="$(dirname "$0")"\n',  # relative: wrong once the script has done a cd
    'cd /tmp\nD="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n',  # set after a cd
])
def test_topology_path_survives_a_cd_before_the_launch(tmp_path, capsys, folder):
    (tmp_path / "sub").mkdir()
    run = write_script(tmp_path / "sub", "#!/bin/bash\n" + folder + "cd /\n"
                       "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 4 "
                       "--tensor-model-parallel-size 2 --colocate\n")
    bin_, log = stand_ins(tmp_path, flag_words(run.read_text()))
    before = launched(run, tmp_path, bin_, log)  # run as `bash sub/run.sh` from tmp_path
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    text = run.read_text()
    assert 'miles-topology flags "${MILES_TOPOLOGY_DIR}/run.topology.yaml"' in text
    after = launched(run, tmp_path, bin_, log)
    same_launch(before, after, {})
    assert read_flags(after["argv"]).topology.dp == 2


def test_a_folder_variable_set_before_any_cd_is_used(tmp_path):
    run = write_script(tmp_path, HEAD + "cd /\npython3 train.py --actor-num-gpus-per-node 4 "
                       "--colocate\n")
    assert 'miles-topology flags "${D}/run.topology.yaml"' in migrate(run).new
    assert "MILES_TOPOLOGY_DIR" not in migrate(run).new


def test_variable_values_move_with_their_variable_or_the_script_is_refused(tmp_path):
    text = ("#!/bin/bash\nN=${N:-2}\nray job submit --address=x --runtime-env-json="
            "'{\"env_vars\": {\"A\": \"1\"}}' -- python3 ENTRY "
            "--actor-num-nodes $N --actor-num-gpus-per-node 4 --colocate\n")
    # upstream train.py: the flags are expanded before ray job submit, from the exports
    run = write_script(tmp_path, text.replace("ENTRY", "train.py"))
    out = migrate(run)
    assert "--actor-num-nodes $N" not in out.new and "export N  # read by" in out.new
    assert "nodes: ${oc.env:N,2}  # --actor-num-nodes" in next(iter(out.files.values()))
    # our launcher reads the file in the job, which gets only its own runtime env: the
    # value cannot follow N there, and leaving it behind would split the layout
    run.write_text(text.replace("ENTRY", "-m miles.train"))
    with pytest.raises(Refused, match=r"--actor-num-nodes .* cannot move with them: .*does "
                                      r"not inherit"):
        migrate(run)


def test_not_a_launch_is_a_type_not_a_message(tmp_path, capsys):
    """--check tells a file with no training launch (not pending) from an unreadable one
    (exit 2) by the error's type: a path that happens to contain the words does not fool it."""
    from miles_topology.judging.check_script import check_script
    from miles_topology.model.errors import InputError, NoTrainingLaunch

    odd = tmp_path / "no training launch here"
    odd.mkdir()
    broken = write_script(odd, 'ARGS=(\n  --actor-num-nodes "2\n')  # bash syntax error
    assert cli(["migrate", "--check", str(broken)], capsys)[0] == 2
    conv = write_script(tmp_path, "python3 tools/convert_hf_to_torch_dist.py --hf x\n")
    with pytest.raises(NoTrainingLaunch, match="no training launch"):
        check_script(str(conv), {})
    assert issubclass(NoTrainingLaunch, InputError)  # check still exits 2 on it
    with pytest.raises(common.NotALaunch):
        migrate(conv, {}, False)
    code, out, _ = cli(["migrate", "--check", str(conv)], capsys)
    assert code == 0 and "not migrated" in out


def test_acceptance_ran_the_migrated_scripts_under_bash():
    """The bash comparison above is not vacuous: most migrated fixtures ran both ways."""
    if BASH is None or not any(n for n, _ in CASES):
        pytest.skip("needs bash")
    if not RAN:
        pytest.skip("run together with test_acceptance_on_checker_fixtures")
    print(f"\nran under bash both ways: {len(RAN)}: {sorted(set(RAN))}")
    assert {"run-qwen3-30B-A3B.sh", "run-qwen3-4B.sh", "vars-defaults.sh"} <= set(RAN), RAN


# ---------------------------------------------------------------- bytes not asked for


def test_a_line_appended_while_write_runs_is_kept(tmp_path, capsys, monkeypatch):
    """An editor saves the script between the read and the replace: nothing is written,
    the edit is kept, and no YAML or backup is left behind (fails without the re-read)."""
    from miles_topology.migrations import runner

    run = staged(step_dir(STEPS[2]), tmp_path)
    real = runner._atomic

    def editor_saves(path, data, *a, **k):
        if path.name.endswith(".bak"):  # after the YAML, before the script is replaced
            with open(run, "a") as f:
                f.write("echo appended by an editor\n")
        return real(path, data, *a, **k)

    monkeypatch.setattr(runner, "_atomic", editor_saves)
    code, _, err = cli(["migrate", "--write", str(run)], capsys)
    assert code == 1 and "changed while it was being migrated" in err
    assert run.read_text().endswith("echo appended by an editor\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "run.sh"]
    monkeypatch.setattr(runner, "_atomic", real)
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0  # again: it goes through
    assert run.read_text().endswith("echo appended by an editor\n")


def test_crlf_script_stays_crlf_and_added_words_carry_no_cr(tmp_path, capsys):
    """Every line of this CRLF script ends in a comment, so bash reads no CR in its words;
    the lines migrate adds end in comments too (a CR after a word would join it)."""
    text = ('#!/bin/bash  # launcher\n'
            'D="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"  # here\n'
            "python3 train.py --actor-num-gpus-per-node 4 --tensor-model-parallel-size 2 "
            "--colocate --save /root/ckpt  # the job\n").replace("\n", "\r\n")
    run = write_script(tmp_path, text)
    out = migrate(run)
    assert out.new.count("\r\n") == out.new.count("\n") and "\r" not in out.new.replace(
        "\r\n", "")
    assert all(x.rstrip("\r").split("  # ")[-1] for x in out.new.split("\n")[:-1])
    assert 'python3 train.py "${TOPOLOGY_ARGS[@]}" --save /root/ckpt  # the job\r\n' in out.new
    (yaml,) = out.files.values()
    assert "\r" not in yaml and "tp: 2  # --tensor-model-parallel-size" in yaml
    if BASH:
        bin_, log = stand_ins(tmp_path / "b" if (tmp_path / "b").mkdir() is None else None,
                              flag_words(text))
        before = launched(run, tmp_path, bin_, log)
        write(out)
        after = launched(run, tmp_path, bin_, log)
        assert not [w for w in after["argv"] if "\r" in w]
        same_launch(before, after, {})
    else:
        write(out)
    r = read(State(run, run.read_text(), {}))
    assert not [w for w in r.script.flags() if "\r" in w]
    assert (r.topology.layout.tp, r.topology.layout.gpus_per_node, r.topology.rollout.colocate) == (
        2,
        4,
        True,
    )


def test_a_layout_flag_added_back_is_pending_and_moves_into_the_yaml(tmp_path, capsys):
    run = staged(step_dir(STEPS[2]), tmp_path)
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    assert cli(["migrate", "--check", str(run)], capsys)[0] == 0
    yaml = run.with_name("run.topology.yaml")
    old_yaml = yaml.read_text()
    # the marker still says 0003; the content says otherwise
    run.write_text(run.read_text().replace("   --save /root/ckpt",
                                           "   --context-parallel-size 2 \\\n   --save /root/ckpt"))
    code, out, _ = cli(["migrate", "--check", str(run)], capsys)
    assert code == 1 and "pending 0003" in out
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    assert "--context-parallel-size" not in run.read_text()
    assert yaml.read_text() == old_yaml + "cp: 2  # --context-parallel-size\n"  # appended
    assert read(State(run, run.read_text(), {})).topology.layout.cp == 2
    assert cli(["migrate", "--check", str(run)], capsys)[0] == 0
    # a value the YAML sets otherwise: refused, both kept
    run.write_text(run.read_text().replace("   --save", "   --pipeline-model-parallel-size 1 "
                                           "--tensor-model-parallel-size 4 \\\n   --save"))
    with pytest.raises(Refused, match="disagrees with its topology file: tp: 2 at run.top"):
        migrate(run)


def test_yaml_values_are_quoted_by_the_yaml_library():
    import yaml

    from miles_topology.migrations.m0003_consolidate import yaml_lines

    rows = [("sglang_config", "cfg: a.yaml", "--sglang-config"), ("order", "tp-cp-ep-pp-dp", "x"),
            ("external_addrs", ("a:1", "b #2"), "y"), ("nodes", "${oc.env:N,2}", "z"),
            ("a2a_backend", "yes", "w")]
    text = "\n".join(yaml_lines(rows)) + "\n"
    assert yaml.safe_load(text) == {"sglang_config": "cfg: a.yaml", "order": "tp-cp-ep-pp-dp",
                                    "external_addrs": ["a:1", "b #2"], "nodes": "${oc.env:N,2}",
                                    "a2a_backend": "yes"}
    assert all(line.split("  # ")[1] for line in text.splitlines())
    # what it used to write does not read back
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load("sglang_config: cfg: a.yaml\n")


def test_flags_command_prints_the_layout_and_refuses_an_invalid_one(tmp_path, capsys):
    y = tmp_path / "t.topology.yaml"
    y.write_text("nodes: ${oc.env:TOPO_TEST_N,2}\ntp: 2\norder: tp-cp-ep-pp-dp\ncolocate: true\n"
                 "sp: false\nexternal_addrs: ['a b', c]\n")
    code, out, _ = cli(["flags", str(y)], capsys)
    assert code == 0 and out.splitlines() == [
        "--actor-num-nodes", "2", "--tensor-model-parallel-size", "2",
        "--use-tp-pp-dp-mapping", "--colocate", "--rollout-external-engine-addrs", "'a b'", "c"]
    y.write_text("tp: 3\ngpus_per_node: 4\n")
    code, out, err = cli(["flags", str(y)], capsys)
    assert code == 1 and out == "" and "dense-grid-divisibility" in err
    assert cli(["flags", str(tmp_path / "none.yaml")], capsys)[0] == 2
    y.write_text("engine_groups: [[a, b, 1, 2]]\n")
    code, _, err = cli(["flags", str(y)], capsys)
    assert code == 2 and "no train.py flag" in err


# ---------------------------------------------------------------- scripts in upstream styles

UPSTREAM = STEP_FIXTURES / "upstream"
STYLES = sorted(p.name for p in UPSTREAM.glob("*.sh"))


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("name", STYLES)
def test_scripts_in_miles_and_slime_styles_migrate_and_launch_the_same(name, tmp_path, capsys):
    """Each script (slime's preamble, nvidia-smi probe, sourced model file, runtime-env JSON;
    miles' wandb branches and a written --sglang-config file; variables and train_async.py)
    is migrated, and run under bash with the stand-ins, the migrated script launches what
    the original launched (train.py parsing with the real flag surface)."""
    d = tmp_path / "scripts"
    shutil.copytree(UPSTREAM, d)
    path = d / name
    texts = [p.read_text() for p in UPSTREAM.rglob("*.sh")]
    bin_, log = stand_ins(tmp_path, flag_words(*texts))
    before = launched(path, d, bin_, log)
    code, out, err = cli(["migrate", "--write", str(path)], capsys)
    assert code == 0, err
    yaml = path.with_name(name.removesuffix(".sh") + ".topology.yaml")
    assert yaml.exists() and "--topology" not in path.read_text()
    after = launched(path, d, bin_, log)
    same_launch(before, after, {})
    code_only = re.sub(r"(^|[ \t])#[^\n]*", "", path.read_text(), flags=re.M)
    moved = [f for f in flag_words(code_only) if field_of(f) in MOVES]
    assert not moved, moved  # the whole layout moved, nothing half left behind
    for flag in ("--advantage-estimator", "--use-rollout-routing-replay", "--sglang-config",
                 "--global-batch-size", "--rollout-batch-size"):
        assert (flag in (UPSTREAM / name).read_text()) == (flag in path.read_text()), flag
    assert_only_layout_moved((UPSTREAM / name).read_text(), path.read_text(), yaml.read_text())
    assert bash_ok(path)
    assert cli(["migrate", "--check", str(path)], capsys)[0] == 0
    code, _, err = cli(["migrate", "--write", str(path)], capsys)
    assert code == 0 and "up to date" in err


def test_a_yaml_valid_only_with_flags_left_behind_is_refused(tmp_path):
    """`miles-topology flags` validates the YAML alone: half a layout would stop the job."""
    run = write_script(tmp_path, HEAD + 'source "$D/models/m.sh"\n'
                       "python3 train.py --actor-num-nodes 1 --tensor-model-parallel-size 3 "
                       "--colocate ${MODEL_ARGS[@]}\n",
                       "MODEL_ARGS=(--num-layers 6 --actor-num-gpus-per-node 6)\n")
    with pytest.raises(Refused, match=r"not valid on its own \(\[dense-grid-divisibility\].*"
                                      r"--actor-num-gpus-per-node .* sourced file"):
        migrate(run)
    assert migrate(run, inline=True).applied == ["0003"]  # one array: nothing validated apart


def test_our_launcher_keeps_reading_the_yaml_with_topology(tmp_path, capsys):
    """python -m miles.train accepts --topology FILE (miles/train.py): it gets that form."""
    d = tmp_path / "s"
    shutil.copytree(SCRIPTS, d)
    path = d / "run-python-m-miles-train.sh"
    assert cli(["migrate", "--write", str(path)], capsys)[0] == 0
    text = path.read_text()
    assert '-m miles.train --topology "${HERE}/run-python-m-miles-train.topology.yaml"' in text
    assert "miles-topology flags" not in text
    assert read(State(path, text, {})).topology == read(
        State(SCRIPTS / path.name, (SCRIPTS / path.name).read_text(), {})).topology


def test_inline_then_a_flag_given_again_joins_the_array(tmp_path):
    run = staged(step_dir(STEPS[2]), tmp_path)
    write(migrate(run, inline=True))
    run.write_text(run.read_text().replace("   --save /root/ckpt",
                                           "   --context-parallel-size 2 --save /root/ckpt"))
    out = migrate(run, inline=True)
    assert out.applied == ["0003"] and "   --context-parallel-size 2\n)" in out.new
    write(out)
    assert migrate(run, inline=True).applied == []
    assert read(State(run, run.read_text(), {})).topology.layout.cp == 2


@pytest.mark.slow
@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_the_bash_comparison_catches_a_changed_launch(tmp_path, capsys):
    """same_launch fails on a non-layout flag changed, or a layout value changed."""
    (tmp_path / "job").mkdir()
    run = staged(step_dir(STEPS[2]), tmp_path / "job")
    bin_, log = stand_ins(tmp_path, flag_words(run.read_text(),
                                               (run.parent / "models" / "moe.sh").read_text()))
    before = launched(run, tmp_path, bin_, log)
    assert cli(["migrate", "--write", str(run)], capsys)[0] == 0
    run.write_text(run.read_text().replace("--global-batch-size 256", "--global-batch-size 128"))
    with pytest.raises(AssertionError):
        same_launch(before, launched(run, tmp_path, bin_, log), {})
    run.write_text(run.read_text().replace("--global-batch-size 128", "--global-batch-size 256"))
    same_launch(before, launched(run, tmp_path, bin_, log), {})
    yaml = run.with_name("run.topology.yaml")
    yaml.write_text(yaml.read_text().replace("engine_size: 8", "engine_size: 4"))
    with pytest.raises(AssertionError):
        same_launch(before, launched(run, tmp_path, bin_, log), {})


@pytest.mark.slow
@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_model_helper_idiom(tmp_path, capsys):
    """miles' `read -ra MODEL_ARGS <<< "$(python3 .../model_args_utils.py NAME)"`: migrated
    and launching the same when the reader knows the helper's output (the bash reader
    issue, through the sandbox); refused, saying what to do, while it does not."""
    d = tmp_path / "checkout"
    shutil.copytree(STEP_FIXTURES / "upstream-helper", d)
    path = d / "scripts" / "run-dense-4B.sh"
    original = path.read_text()
    known = not [u for u in read_script_of(path).unresolved if u.flag is None]
    bin_, log = stand_ins(tmp_path, flag_words(original, "--num-layers --hidden-size "
                                               "--ffn-hidden-size --num-attention-heads "
                                               "--group-query-attention --num-query-groups "
                                               "--vocab-size --swiglu"))
    before = launched(path, d, bin_, log)
    code, _, err = cli(["migrate", "--write", str(path)], capsys)
    if not known:
        assert code == 1 and "Write those words out" in err and path.read_text() == original
        return
    assert code == 0, err
    same_launch(before, launched(path, d, bin_, log), {})


def read_script_of(path: Path):
    from miles_topology.shell import read_script

    return read_script(path, {})


def test_source_of_an_absolute_path_in_the_checkout_migrates(tmp_path):
    """`source /root/miles/scripts/models/X.sh` read from the script's own checkout (the
    bash reader) no longer blocks; its model flags stay where they are."""
    (tmp_path / "scripts" / "models").mkdir(parents=True)
    shutil.copy(STEP_FIXTURES / "upstream" / "models" / "dense-4B.sh",
                tmp_path / "scripts" / "models")
    run = write_script(tmp_path / "scripts", "#!/bin/bash\nset -ex\n"
                       "source /root/miles/scripts/models/dense-4B.sh\ncd /root/miles\n"
                       "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 4 "
                       '--colocate --tensor-model-parallel-size 2 "${MODEL_ARGS[@]}"\n')
    out = migrate(run)
    assert out.applied == ["0003"] and "source /root/miles/scripts/models/dense-4B.sh" in out.new
    back = read(State(run, out.new, {}, files=out.files)).topology
    assert (back.layout.tp, back.layout.gpus_per_node, back.model.layers) == (
        2,
        4,
        36,
    )  # 36: the model file's
    (yaml,) = out.files.values()
    assert "tp: 2  # --tensor-model-parallel-size" in yaml and "num-layers" not in yaml


def test_the_diff_of_a_hostile_script_is_printed_escaped(tmp_path, capsys):
    """A pull request's script is migrated in CI: its text (a comment beside a renamed flag,
    kept as context) must not drive the terminal or make a workflow
    command of its own (safetext, as `check` prints)."""
    text = (step_dir(STEPS[0]) / "before.sh").read_text().replace(
        "ENGINE_GPUS=4",
        "ENGINE_GPUS=4\nNOTE='x\x1b]0;title\x07\x1b[2J\r::error file=ci.yml::pwned\n::add-mask::y'")
    run = tmp_path / "run.sh"
    run.write_text(text)
    code, out, err = cli(["migrate", str(run)], capsys)
    assert code == 0 and "--sglang-enable-deepep-moe" in out, err  # the diff is there
    assert "\x1b" not in out + err and "\r" not in out + err
    assert not any(x.lstrip(" +-").startswith("::") for x in (out + err).splitlines())
    assert "\\x1b]0;title\\x07" in out and "\\r::error" in out and " \\x3a:add-mask" in out
    # the control: the same text unescaped is what the diff held
    assert "\x1b]0;title" in migrate(run).new
    # --check names the file: a file name is a pull request's text too
    named = tmp_path / "pr\x1b[2J" / "run.sh"
    named.parent.mkdir()
    named.write_text(text)
    code, out, err = cli(["migrate", "--check", str(named)], capsys)
    assert code == 1 and "pending" in out and "\x1b" not in out + err
    assert not any(x.startswith("::") for x in (out + err).splitlines())


def test_check_fails_a_script_that_disagrees_with_its_topology_file(tmp_path, capsys):
    # the pre-commit hook exists for this: tp written back as 2 while the YAML says 4
    script = tmp_path / "r.sh"
    script.write_text("#!/bin/bash\npython3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node"
                      " 8 --num-layers 8 --colocate --tensor-model-parallel-size 4\n")
    assert cli(["migrate", "--write", str(script)], capsys)[0] == 0
    text = script.read_text()
    launch = next(i for i, x in enumerate(text.split("\n"), 1) if x.startswith("python3"))
    script.write_text(text.replace('"${TOPOLOGY_ARGS[@]}"',
                                   '"${TOPOLOGY_ARGS[@]}" --tensor-model-parallel-size 2'))
    code, out, err = cli(["migrate", "--check", str(script)], capsys)
    assert code == 1, out + err
    said = out + err
    assert f"--tensor-model-parallel-size 2 at {script}:{launch}" in said
    assert "tp: 4 at r.topology.yaml:" in said
    script.write_text(text.replace('"${TOPOLOGY_ARGS[@]}"',  # the same value: no conflict
                                   '"${TOPOLOGY_ARGS[@]}" --tensor-model-parallel-size 4'))
    _, out, err = cli(["migrate", "--check", str(script)], capsys)
    assert "disagrees" not in out + err


def test_slime_keeps_a_colocated_rollout_gpu_count_so_migrate_does_too(tmp_path):
    """miles overwrites --rollout-num-gpus under --colocate (utils/arguments.py:3312), so m0002
    removes it there; slime keeps it (utils/arguments.py:1951): a slime launch keeps the flag
    (its count moves to the topology file like any layout flag)."""
    for entry, kept in (("/root/miles/train.py", False), ("/root/slime/train.py", True)):
        run = write_script(tmp_path, "#!/bin/bash\n"
                           f"python3 {entry} --actor-num-nodes 1 --actor-num-gpus-per-node 2 "
                           "--colocate --rollout-num-gpus 8 --num-layers 4\n")
        out = migrate(run)
        assert ("rollout_gpus: 8" in "".join(out.files.values())) is kept, entry
