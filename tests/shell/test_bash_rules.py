"""What bash itself knows, the reader knows (issue 37, "unknowns bash does not have"): a launch
whose program and entry come through variables, branches on run-time tests that agree, a
here-document body tree-sitter cannot parse, torchrun's world given by variables. Each script
is written in slime's and miles' own style (scripts/run-*.sh) inside a slime-like checkout,
and where bash can run it here, the launch bash really runs is the one read (bash_launch)."""

from __future__ import annotations

import pytest
from support import bash_launch, flag_values
from support import slime_checkout as checkout

from miles_topology.judging.check_script import check_script
from miles_topology.shell.read import read_script

PERF = """\
PERF_ARGS=(
   --tensor-model-parallel-size 2
   --sequence-parallel
   --pipeline-model-parallel-size 1
   --context-parallel-size 1
)
"""


def ray_stand_in(tmp_path):
    """A `ray` that runs what follows `--`, as `ray job submit` does (bash_launch keeps it)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    ray = bin_ / "ray"
    ray.write_text('#!/bin/bash\nwhile [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done\n'
                   'shift\nexec "$@"\n')
    ray.chmod(0o755)


def values(v) -> dict:
    return {k: d["value"] for k, d in v.extra["values"].items()}


# -- a launch through variables ------------------------------------------------------------

RAY_VARS = PERF + """\
PYTHON_BIN="${PYTHON_BIN:-$(command -v python3)}"
RAY_BIN="$(dirname "${PYTHON_BIN}")/ray"
TRAIN_ENTRYPOINT="${TRAIN_ENTRYPOINT:-train.py}"

CMD=(
   "${PYTHON_BIN}" "${SLIME_ROOT}/${TRAIN_ENTRYPOINT}"
   --actor-num-nodes 1
   --actor-num-gpus-per-node 8
   --colocate
   "${MODEL_ARGS[@]}"
   "${PERF_ARGS[@]}"
)

"${RAY_BIN}" job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json='{"env_vars": {"PYTHONPATH": "/root/Megatron-LM/"}}' \\
   -- "${CMD[@]}"
"""


def test_a_ray_launch_whose_program_and_entry_are_variables(tmp_path):
    # RAY_BIN's folder is known only at run time, its name is ray; CMD's first word is the
    # python PATH finds: the program each runs is known, so the launch is
    run = checkout(tmp_path, RAY_VARS)
    found = read_script(run)
    assert found.launcher == "ray job submit" and found.entry.endswith("/train.py")
    v = check_script(str(run), {})
    assert v.ok and not v.extra["unresolved"], v.extra["unresolved"]
    assert v.summary["world_size"] == 8 and v.summary["dp"] == 4
    ray_stand_in(tmp_path)
    truth = flag_values(bash_launch(run, [], tmp_path))
    assert truth["--tensor-model-parallel-size"] == values(v)["--tensor-model-parallel-size"]


PY_VARS = PERF + """\
[ -f "${SLIME_ROOT}/.env" ] && source "${SLIME_ROOT}/.env"
if [ -f "${SCRIPT_DIR}/local_env.sh" ]; then
   source "${SCRIPT_DIR}/local_env.sh"
fi
[ -f .env.local ] && source .env.local
SLIME_PYTHON="${SLIME_PYTHON:-$(which python3)}"
REPO_DIR="${REPO_DIR:-$(cd "${SCRIPT_DIR}/.." && pwd)}"
TRAIN_ENTRYPOINT=train.py

"${SLIME_PYTHON}" "${REPO_DIR}/${TRAIN_ENTRYPOINT}" \\
   --actor-num-nodes 1 --actor-num-gpus-per-node 4 --colocate \\
   "${MODEL_ARGS[@]}" "${PERF_ARGS[@]}"
"""


def test_a_python_launch_through_variables_after_guarded_optional_sources(tmp_path):
    run = checkout(tmp_path, PY_VARS)
    v = check_script(str(run), {})
    # each guarded file is in no folder of the checkout: bash skips it, nothing is unknown
    assert v.ok and not v.extra["unresolved"], v.extra["unresolved"]
    assert values(v)["--tensor-model-parallel-size"] == "2"
    assert v.extra["entry"].endswith("/train.py") if "entry" in v.extra else True
    truth = flag_values(bash_launch(run, [], tmp_path))
    assert truth["--actor-num-gpus-per-node"] == values(v)["--actor-num-gpus-per-node"]


def test_a_program_only_its_folder_is_known_of_is_not_a_launch(tmp_path):
    # "$PY" set nowhere (the environment's): which program runs is not known, so no launch
    from miles_topology.model.errors import NoTrainingLaunch

    run = checkout(tmp_path, '"${PY}" "${SLIME_ROOT}/train.py" --actor-num-nodes 1\n')
    assert read_script(run).entry is None
    with pytest.raises(NoTrainingLaunch, match="pass it with --env") as e:
        check_script(str(run), {})
    assert "converter" not in str(e.value)  # nothing else was found to blame
    v = check_script(str(run), {"PY": "python3"})
    assert v.extra["values"]["--actor-num-nodes"]["value"] == "1"


def test_a_launch_written_into_a_file_another_program_runs_is_named(tmp_path):
    # a Kubernetes Job written from a here-document, then `kubectl apply -f` (held-out: a
    # slime fork's k8s launcher): bash runs no train.py here; the refusal names the file
    from miles_topology.model.errors import NoTrainingLaunch

    run = checkout(tmp_path, 'JOB=$(mktemp /tmp/job.XXXXXX.yaml)\ncat > "${JOB}" <<EOF\n'
                   'command: ["bash", "-c", "python3 train.py --actor-num-nodes 1"]\nEOF\n'
                   'kubectl apply -f "${JOB}"\n')
    with pytest.raises(NoTrainingLaunch, match=r'writes a training launch into "\$\{JOB\}" '
                       r"at .*\.sh:\d+ \(a here-document\)") as e:
        check_script(str(run), {})
    assert "pass it with --env" not in str(e.value)
    # a file written from another file or a here-string is no here-document (upstream's
    # selfdistill scripts: `envsubst < eval.yaml > "${EVAL_CONFIG}"`)
    run = checkout(tmp_path / "b", 'envsubst < eval.yaml > out.yaml\n'
                   'cat <<< "train.py" > x.txt\npython3 train.py --actor-num-nodes 1\n')
    assert read_script(run).entry.endswith("train.py")


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_the_written_file_named_in_the_refusal_is_printed_escaped(tmp_path, capsys, fmt):
    # the name of the written file is the script's own text: an attacker's bytes, printed
    # through the sink (an ESC sequence and a workflow command after a newline stay inert)
    from hostile import clean
    from support import run_cli

    name = "job\x1b[31m\n::error::pwned\u202e.yaml"
    run = checkout(tmp_path, f'cat > "{name}" <<EOF\n'
                   'command: ["python3", "train.py", "--actor-num-nodes", "1"]\nEOF\n'
                   f'kubectl apply -f "{name}"\n')
    code, out, err = run_cli(capsys, "check", "--format", fmt, str(run))
    assert code == 2 and "writes a training launch into" in err
    clean(out + err, commands=fmt == "github")


# -- branches on run-time tests that agree -------------------------------------------------

WANDB = PERF + """\
if [ -n "${WANDB_API_KEY}" ]; then
   WANDB_ARGS=(--use-wandb --wandb-project slime-dev --wandb-key "${WANDB_API_KEY}")
   TP=2
else
   WANDB_ARGS=()
   TP=2
fi
if [ "$(nvidia-smi -L | grep -c H100)" -gt 0 ]; then
   EP=1
fi

python3 "${SLIME_ROOT}/train.py" \\
   --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   "${MODEL_ARGS[@]}" --tensor-model-parallel-size "${TP}" \\
   "${WANDB_ARGS[@]}"
"""


def test_branches_that_agree_on_the_layout_leave_it_known(tmp_path):
    run = checkout(tmp_path, WANDB)
    v = check_script(str(run), {})
    # TP is 2 whichever way the test goes; WANDB_ARGS differs (unknown); EP is not used
    assert values(v)["--tensor-model-parallel-size"] == "2"
    assert v.summary["world_size"] == 8 and v.summary["dp"] == 4
    assert all("WANDB_ARGS" in u["expression"] or "wandb" in u["why"].lower()
               for u in v.extra["unresolved"]), v.extra["unresolved"]
    for env in ({"WANDB_API_KEY": ""}, {"WANDB_API_KEY": "k"}):
        truth = flag_values(bash_launch(run, [], tmp_path, env))
        assert truth["--tensor-model-parallel-size"] == "2"


CASE = """\
case "${1:-}" in
   debug)
      TP=4; PP=1
      ;;
   *)
      TP=4; PP=2
      ;;
esac
if [ "${2:-}" = no-pp ]; then
   PP=1
fi

python3 "${SLIME_ROOT}/train.py" \\
   --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   "${MODEL_ARGS[@]}" --tensor-model-parallel-size ${TP} \\
   --pipeline-model-parallel-size ${PP}
"""


def test_a_value_that_differs_between_branches_stays_unknown(tmp_path):
    run = checkout(tmp_path, CASE)
    found = read_script(run)
    got = {fv.flag: fv.value for fv in found.argv}
    # every arm sets TP=4 (`*)` takes the rest: no way skips the case); PP differs
    assert got["--tensor-model-parallel-size"] == "4"
    assert got["--pipeline-model-parallel-size"] is None
    (u,) = [u for u in found.unresolved if u.flag == "--pipeline-model-parallel-size"]
    assert "'if'" in u.why or "case" in u.why
    for args in ([], ["debug"], ["x", "no-pp"]):
        assert flag_values(bash_launch(run, args, tmp_path))[
            "--tensor-model-parallel-size"] == "4"


def test_a_branch_nested_in_a_joined_one_and_an_and_list_inside_it(tmp_path):
    run = checkout(tmp_path, """\
if [ -n "${1:-}" ]; then
   if [ -n "${2:-}" ]; then TP=2; else TP=2; fi
   [ -n "${3:-}" ] && CP=2
else
   TP=2
fi
python3 "${SLIME_ROOT}/train.py" --actor-num-nodes 1 --actor-num-gpus-per-node 8 \\
   --colocate "${MODEL_ARGS[@]}" --tensor-model-parallel-size ${TP} \\
   --context-parallel-size ${CP:-1}
""")
    got = {fv.flag: fv.value for fv in read_script(run).argv}
    assert got["--tensor-model-parallel-size"] == "2"
    assert got["--context-parallel-size"] is None  # set only if $3 is: 2 or 1


def test_an_and_list_on_a_run_time_test_is_joined_like_an_if(tmp_path):
    run = checkout(tmp_path, """\
TP=2
WANDB_ARGS=()
[ -n "${WANDB_API_KEY}" ] && WANDB_ARGS=(--use-wandb --wandb-key "${WANDB_API_KEY}")
[ -n "${WANDB_API_KEY}" ] && TP=2
[ -z "${SMALL}" ] || CP=2
python3 "${SLIME_ROOT}/train.py" --actor-num-nodes 1 --actor-num-gpus-per-node 8 \\
   --colocate "${MODEL_ARGS[@]}" --tensor-model-parallel-size ${TP} "${WANDB_ARGS[@]}" \\
   --context-parallel-size ${CP:-1}
""")
    found = read_script(run)
    got = {fv.flag: fv.value for fv in found.argv}
    assert got["--tensor-model-parallel-size"] == "2" and got["--context-parallel-size"] is None
    assert {u.flag for u in found.unresolved} == {"--use-wandb", "--wandb-key",
                                                  "--context-parallel-size"}
    for env in ({"WANDB_API_KEY": "", "SMALL": ""}, {"WANDB_API_KEY": "k", "SMALL": "1"}):
        assert flag_values(bash_launch(run, [], tmp_path, env))[
            "--tensor-model-parallel-size"] == "2"


# -- here-documents --------------------------------------------------------------------------

WAIT = """\
cat > /tmp/wait_for_router_$$.sh <<EOF
WAITED=0
until curl -s http://127.0.0.1:3000/health; do
   sleep 2
   WAITED=$(( (WAITED + 2) * 1 ))
done
EOF
bash /tmp/wait_for_router_$$.sh
""" + PERF + """\
python3 "${SLIME_ROOT}/train.py" --actor-num-nodes 1 --actor-num-gpus-per-node 8 \\
   --colocate "${MODEL_ARGS[@]}" "${PERF_ARGS[@]}"
"""


def test_a_here_document_body_the_parser_misreads_is_text_run_later(tmp_path):
    # tree-sitter-bash reads $(( (A + 2) * 1 )) in a here-document as $( (A + 2) * 1 ):
    # valid bash, written to a file another bash runs; nothing it sets comes back
    run = checkout(tmp_path, WAIT)
    v = check_script(str(run), {})
    assert v.ok and not v.extra["unresolved"], v.extra["unresolved"]
    assert values(v)["--tensor-model-parallel-size"] == "2"


@pytest.mark.parametrize("body", [
    "cat <<EOF\nW=$(( (A + 2) / 2 ))\nEOF\n",
    "bash -s <<EOF\necho $(( (A + 2) / 2 ))\nEOF\n",
])
def test_the_body_s_value_is_unknown_not_refused(tmp_path, body):
    run = checkout(tmp_path, body + 'python3 "${SLIME_ROOT}/train.py" --actor-num-nodes 1 '
                   '--actor-num-gpus-per-node 8 --colocate "${MODEL_ARGS[@]}"\n')
    assert read_script(run).entry is not None


def test_an_error_outside_a_here_document_is_still_refused(tmp_path):
    from miles_topology.shell.records import ScriptReadError

    run = checkout(tmp_path, "cat <<EOF\nok\nEOF\nif true; then\n")
    with pytest.raises(ScriptReadError):
        read_script(run)


# -- torchrun's world ------------------------------------------------------------------------

TORCHRUN = """\
NNODES=${NNODES:-1}
GPUS_PER_NODE=4
torchrun --nnodes ${NNODES} --nproc_per_node ${GPUS_PER_NODE} --master_addr ${MASTER_ADDR} \\
   "${SLIME_ROOT}/train.py" "${MODEL_ARGS[@]}" --tensor-model-parallel-size 2 --colocate
"""


def test_a_torchrun_world_given_by_known_variables(tmp_path):
    v = check_script(str(checkout(tmp_path, TORCHRUN)), {})
    assert v.summary["world_size"] == 4 and v.summary["dp"] == 2
    v = check_script(str(checkout(tmp_path / "b", TORCHRUN)), {"NNODES": "2"})
    assert v.summary["world_size"] == 8


def test_a_torchrun_world_known_only_at_run_time_stays_unknown(tmp_path):
    run = checkout(tmp_path, TORCHRUN.replace("NNODES=${NNODES:-1}",
                                              "NNODES=$(cat /etc/nnodes)"))
    v = check_script(str(run), {})
    assert v.summary is None or "world_size" not in v.summary
    assert any("torchrun" in u["why"] for u in v.extra["unresolved"])
