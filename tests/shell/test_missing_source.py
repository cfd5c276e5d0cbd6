"""`source` of a file inside the script's own checkout that does not exist (issue 37): bash
reports "No such file or directory" with status 1, so under `set -e` it stops there and the
launch never runs (slime scripts/low_precision/run-qwen3-4b-fp8.sh:27 sources
`${SCRIPT_DIR}/../scripts/models/...`, i.e. scripts/scripts/models/...). What bash honours,
the reader honours: `set +e`, a tested source (`|| true`, `if source F`), an unknown working
folder. Each verdict is checked against bash itself (bash_launch)."""

import subprocess

import pytest
from support import bash_launch

from miles_topology.judging.check_script import check_script

LAUNCH = ("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
          "--tensor-model-parallel-size 2 ${MODEL_ARGS[@]}\n")
HEAD = 'SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"\n'


def checkout(tmp_path, body: str):
    """A slime-like checkout: pyproject.toml at its root, scripts/models/qwen3-4B.sh, and
    scripts/low_precision/run.sh with `body` before the launch."""
    root = tmp_path / "slime"
    (root / "scripts" / "models").mkdir(parents=True)
    (root / "scripts" / "low_precision").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'slime'\n")
    (root / "scripts" / "models" / "qwen3-4B.sh").write_text(
        "MODEL_ARGS=(\n   --num-layers 36\n   --hidden-size 2560\n)\n")
    run = root / "scripts" / "low_precision" / "run.sh"
    run.write_text("#!/bin/bash\n" + HEAD + body + LAUNCH)
    return run


def codes(v):
    return {p.code: p.severity for p in [*v.errors, *v.warnings]}


def test_a_missing_source_under_set_e_stops_bash_before_the_launch(tmp_path):
    run = checkout(tmp_path, 'set -ex\nsource "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert not v.ok and codes(v) == {"sourced-file-missing": "error"}
    (p,) = v.errors
    assert "scripts/scripts/models/qwen3-4B.sh" in p.message and p.location.line == 4
    assert "sourced-from-checkout" not in codes(v)  # no other file stands in for it
    with pytest.raises(AssertionError, match="ran no training launch"):
        bash_launch(run, [], tmp_path)  # bash stops at the source


@pytest.mark.parametrize("body", [
    'source "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh"\n',  # no set -e
    'set -e\nset +e\nsource "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh"\n',
    'set -euo pipefail\nsource "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh" || true\n',
    'set -e\nif source "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh"; then :; fi\n',
], ids=["no-set-e", "set+e", "or-true", "if-source"])
def test_a_missing_source_bash_goes_past_is_a_warning(tmp_path, body):
    run = checkout(tmp_path, body)
    v = check_script(str(run), {})
    # bash goes on; what the file would set stays unset, so the launch has no model flags
    # and Megatron's validate_args refuses it (no --num-layers)
    assert codes(v) == {"sourced-file-skipped": "warning", "missing-num-layers": "error"}
    assert bash_launch(run, [], tmp_path)[-2:] == ["--tensor-model-parallel-size", "2"]
    assert v.extra["values"]["--tensor-model-parallel-size"]["value"] == "2"
    assert "--num-layers" not in v.extra["values"]


def test_an_existing_source_and_an_outside_path_are_unchanged(tmp_path):
    run = checkout(tmp_path, 'set -e\nsource "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert v.ok and v.extra["values"]["--num-layers"]["value"] == "36"
    # a container's path outside the checkout: the same tail inside it stands in (a note)
    run = checkout(tmp_path / "b", "set -e\nsource /root/slime/scripts/models/qwen3-4B.sh\n")
    v = check_script(str(run), {})
    assert codes(v) == {"sourced-from-checkout": "note"}
    assert v.extra["values"]["--num-layers"]["value"] == "36"


def test_a_relative_source_from_an_unknown_folder_is_unknown_not_missing(tmp_path):
    run = checkout(tmp_path, 'set -e\ncd "$WORKDIR"\nsource scripts/models/none.sh\n')
    v = check_script(str(run), {})
    assert "sourced-file-missing" not in codes(v) and "sourced-file-skipped" not in codes(v)
    assert any("none.sh" in u["why"] for u in v.extra["unresolved"])


def test_bash_itself_stops_on_a_missing_source_under_set_e(tmp_path):
    # the rule's premise, as this machine's bash has it
    script = tmp_path / "s.sh"
    script.write_text("set -e\nsource ./nope.sh\necho reached\n")
    got = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert got.returncode == 1 and "reached" not in got.stdout


@pytest.mark.parametrize("guard", [
    '[ -f "${SCRIPT_DIR}/.env" ] && source "${SCRIPT_DIR}/.env"\n',
    'if [ -f "${SCRIPT_DIR}/.env" ]; then source "${SCRIPT_DIR}/.env"; fi\n',
])
def test_a_guarded_source_of_an_absent_file_leaves_nothing_unknown(tmp_path, guard):
    # bash skips it (the file is absent in the checkout): no finding, nothing unknown
    run = checkout(tmp_path, "set -e\n" + guard + 'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert v.ok and not codes(v), codes(v)
    assert not v.extra["unresolved"] and v.extra["values"]["--num-layers"]["value"] == "36"
    assert bash_launch(run, [], tmp_path)[-2:] == ["--hidden-size", "2560"]


@pytest.mark.parametrize("guard", [
    "[ -f .env ] && source .env\n",
    "if [ -f ./local_env.sh ]; then\n  source ./local_env.sh\nfi\n",
    "[[ -e .env ]] && [ -r .env ] && . .env\n",
])
def test_a_guarded_relative_source_in_no_folder_of_the_checkout_is_skipped(tmp_path, guard):
    # the working folder is unknown, the file is in no folder of the checkout: an optional
    # file (secrets, local overrides) that bash skips where it is absent
    run = checkout(tmp_path, guard + "TP=2\n" +
                   'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert v.ok and not codes(v) and not v.extra["unresolved"], v.extra["unresolved"]
    assert bash_launch(run, [], tmp_path)[-2:] == ["--hidden-size", "2560"]


def test_a_relative_source_under_another_condition_stays_unknown(tmp_path):
    # only a test that the file exists makes it optional: a branch on another value may
    # source a file that exists in the folder the script is run from
    run = checkout(tmp_path, 'if [ "$MODE" = big ]; then source ./big.sh; fi\n'
                   'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert any("big.sh" in u["why"] for u in v.extra["unresolved"])


@pytest.mark.parametrize("path", [
    "/lianjiakun1/slime/scripts/models/qwen3-4B.sh",  # another machine's absolute path
    "~/slime/scripts/models/qwen3-4B.sh",  # the home folder: known only when it runs
    '"${SLIME_DIR}/scripts/models/qwen3-4B.sh"',  # a folder the environment gives
])
def test_a_model_file_in_a_folder_not_known_here_is_found_by_its_tail(tmp_path, path):
    # as for a container's /root/slime/...: the file of the same tail in the checkout
    run = checkout(tmp_path, f"source {path}\n")
    v = check_script(str(run), {})
    assert codes(v) == {"sourced-from-checkout": "note"}, codes(v)
    assert v.extra["values"]["--num-layers"]["value"] == "36" and not v.extra["unresolved"]


def test_a_tail_of_one_name_is_not_enough(tmp_path):
    run = checkout(tmp_path, 'source "${MODEL_DIR}/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert "sourced-from-checkout" not in codes(v) and v.extra["unresolved"]


@pytest.mark.parametrize("guard", [
    'if [[ -f "${SITE_ENV}" ]]; then\n  source "${SITE_ENV}"\nfi\n',
    '[ -r /opt/site/cluster_env.sh ] && . /opt/site/cluster_env.sh\n',
])
def test_a_guarded_source_of_a_machine_file_outside_the_checkout_is_skipped(tmp_path, guard):
    # a site's optional environment file (held-out: `if [[ -f "${SLIME_ENV_FILE}" ]]; then
    # source ...`): bash runs the script without it where it is absent, so the values set
    # before it stay what the script gives (was: every one unknown, no launch found)
    run = checkout(tmp_path, 'set -euo pipefail\nSITE_ENV="${SITE_ENV:-/opt/site/cluster_env.sh}"\n'
                   'PY="${PY:-python3}"\n' + guard +
                   'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    run.write_text(run.read_text().replace("python3 train.py", '"${PY}" train.py'))
    v = check_script(str(run), {})
    assert v.ok and not codes(v) and not v.extra["unresolved"], v.extra["unresolved"]
    assert v.extra["values"]["--tensor-model-parallel-size"]["value"] == "2"
    assert bash_launch(run, [], tmp_path)[-2:] == ["--hidden-size", "2560"]


def test_a_guarded_machine_file_may_still_set_what_the_script_never_sets(tmp_path):
    # `if [ -f /root/slime/scripts/models/M.sh ]` in a container: MODEL_ARGS, set nowhere
    # else, may come from it, so it is unknown (no missing-num-layers error)
    run = checkout(tmp_path / "c", "if [ -f /opt/slime/models/m.sh ]; then\n"
                   "  source /opt/slime/models/m.sh\nfi\n")
    v = check_script(str(run), {})
    assert "missing-num-layers" not in codes(v), codes(v)
    assert any("m.sh" in u["why"] for u in v.extra["unresolved"]), v.extra["unresolved"]


def test_an_unguarded_source_of_a_machine_file_outside_the_checkout_stays_unknown(tmp_path):
    run = checkout(tmp_path, 'source /opt/site/cluster_env.sh\nTP=2\n'
                   'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    v = check_script(str(run), {})
    assert any("cluster_env.sh" in u["why"] for u in v.extra["unresolved"])


def test_exec_bash_of_a_script_beside_it_is_followed(tmp_path):
    # held-out: a two-node wrapper ends with `exec bash "${SCRIPT_DIR}/run_main.sh" "$@"`
    # (was: no launch found; `bash FILE` was followed, `exec bash FILE` was not)
    run = checkout(tmp_path, 'source "${SCRIPT_DIR}/../models/qwen3-4B.sh"\n')
    wrap = run.parent / "wrap.sh"
    wrap.write_text("#!/bin/bash\n" + HEAD + 'exec bash "${SCRIPT_DIR}/run.sh" "$@"\n'
                    "python3 train.py --never-run 1\n")
    v = check_script(str(wrap), {})
    assert v.ok, [str(p) for p in v.errors]
    assert v.extra["values"]["--tensor-model-parallel-size"]["value"] == "2"
    assert "--never-run" not in v.extra["values"]  # exec replaced the shell


@pytest.mark.parametrize("activate", [
    'source /opt/miniconda3/etc/profile.d/conda.sh\nconda activate rl\n',
    'CONDA_BASE="$(conda info --base)"\nsource "${CONDA_BASE}/etc/profile.d/conda.sh"\n',
    'source .venv/bin/activate\n',  # made by an install, never committed (even under set -e)
], ids=["conda-sh", "conda-sh-unknown-path", "venv"])
def test_an_environment_activation_not_read_leaves_the_scripts_names_known(tmp_path, activate):
    # conda's conda.sh and a venv's bin/activate set up the environment manager (PATH,
    # CONDA_*, VIRTUAL_ENV), never the script's names: the sizes set before them stay known
    # (held-out: a launcher sourcing "${CONDA_SH}" left all of its 37 values unresolved)
    run = checkout(tmp_path, 'set -e\nN=4\n' + activate)
    run.write_text(run.read_text().replace("--colocate", '--rollout-num-gpus "${N}" '
                                           '--hf-checkpoint "${CONDA_PREFIX}/m"'))
    v = check_script(str(run), {})
    assert v.topology is not None and v.topology.rollout.rollout_gpus == 4
    unresolved = v.extra.get("unresolved") or []
    assert [u["flag"] for u in unresolved] == ["--hf-checkpoint"]  # the manager's own name
    assert not any(p.code.startswith("sourced-file") for p in v.problems)


def test_an_unresolved_reason_is_kept_short(tmp_path):
    """A reason that quotes an eval'd program whole (a heredoc of `$(python3 - <<EOF ...)`)
    and nests its causes is cut to 300 characters with its length said (held-out: one
    script's 57 reasons made a 128 kB report)."""
    program = "import sys\n" + "".join(f"print('export V{i}=' + sys.argv[1])\n"
                                        for i in range(60))
    body = ("MODEL_ARGS=(--num-layers 36)\neval \"$(python3 - \"${TRAIN_CONFIG}\" <<'PYEOF'\n"
            f"{program}PYEOF\n)\"\n")
    v = check_script(str(checkout(tmp_path, body)), {})
    got = v.extra["unresolved"]
    assert got and all(len(u["expression"]) < 340 and len(u["why"]) < 340 for u in got), got
    assert any("characters)" in u["expression"] for u in got), got
