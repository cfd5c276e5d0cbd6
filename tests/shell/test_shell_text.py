"""``bash -c TEXT`` is a script another shell runs (held-out pass 8: SLURM launchers start
every node with ``srun ... bash -lc '...'``; the launch inside was "no training launch
found"). Each case is also run by bash, with an ``srun`` stand-in that runs its command (no
login shell there: its profile would reset PATH and with it the stand-ins)."""

import pytest
from support import bash_launch, flag_values

from miles_topology.model.errors import NoTrainingLaunch
from miles_topology.reading.commandline import command_form
from miles_topology.shell import read_script, require_launch

SRUN = """#!/bin/bash
while [[ $1 == -* ]]; do case $1 in -N|-n|-w|--nodes|--ntasks) shift 2;; *) shift;; esac; done
exec "$@"
"""


def both(tmp_path, text: str, env: dict | None = None) -> tuple[dict, dict]:
    """(what bash launches, what the reader reads) for a script of `text`."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    srun = tmp_path / "bin" / "srun"
    srun.write_text(SRUN)
    srun.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(text)
    truth = flag_values(bash_launch(script, [], tmp_path, env))
    got = {fv.flag: fv.value for fv in read_script(script, env=env or {}).argv}
    return truth, got


@pytest.mark.parametrize("head", [
    "srun --nodes=2 --ntasks-per-node=1 --container-image=img:tag --export=ALL bash -xc",
    'srun -N 2 --ntasks="$N" bash -c', "bash -o pipefail -ec", "nohup bash --norc -e -c"])
def test_the_text_of_bash_c_is_read_as_another_shell_runs_it(tmp_path, head):
    text = (f"export TP=4 N=2\nPP=2\n{head} '\nset -e\n"
            'python3 train.py --tp "$TP" --pp "${PP:-none}" --zero "$0" --one "${1:-none}"\n'
            "' node a\n")
    truth, got = both(tmp_path, text)
    # exported TP reaches it, PP (not exported) does not; NAME is $0, ARGS are $1...
    assert truth == {"--tp": "4", "--pp": "none", "--zero": "node", "--one": "a"}
    assert got == truth


def test_what_bash_c_sets_stays_in_its_shell(tmp_path):
    truth, got = both(tmp_path, "bash -c 'PP=2; cd /'\npython3 train.py --pp ${PP:-none}\n")
    assert truth == got == {"--pp": "none"}


def test_a_bash_c_text_not_known_here_says_what_to_pass(tmp_path):
    # a node count spliced into the text ('...'"$SLURM_NNODES"'...') is known at run time
    text = ("srun bash -ec '\npython3 train.py --actor-num-nodes '\"$SLURM_NNODES\"' --tp 2\n'\n")
    script = tmp_path / "run.sh"
    script.write_text(text)
    with pytest.raises(NoTrainingLaunch, match="not known here: SLURM_NNODES .*--env "
                       "SLURM_NNODES="):
        require_launch(read_script(script))
    truth, got = both(tmp_path, text, env={"SLURM_NNODES": "3"})
    assert truth == got == {"--actor-num-nodes": "3", "--tp": "2"}


@pytest.mark.parametrize("words,entry", [
    (["bash", "-lc", "T"], 2), (["sh", "-o", "pipefail", "-c", "T", "n"], 4),
    (["bash", "-c", "-x", "T"], 3), (["bash", "run.sh", "-c", "T"], None),
    (["bash", "+o", "c", "T"], None), (["bash", "-lc", None], 2), (["bash", None, "T"], None)])
def test_the_text_of_a_shell_is_its_first_word_after_the_options(words, entry):
    # bash(1): with -c (alone or in a cluster), commands are read from the first non-option
    # argument; a script's own -c is its argument
    form = command_form(words)
    assert (form.entry if form is not None and form.shell else None) == entry


def test_srun_runs_its_command():
    form = command_form(["srun", "-N", "2", "-w", "node1", "--gpus-per-node", "8",
                         "--container-mounts=/a:/b", "python3", "train.py", "--tp", "2"])
    assert (form.launcher, form.entry) == ("python3", 9)


def test_python_reading_its_program_from_stdin_names_no_script(tmp_path):
    # `python - "$src" "$dst" <<'PY'` (a data converter): "$src" is the program's argument;
    # it was "found instead: python /data/train.parquet"
    assert command_form(["python", "-", "/data/train.parquet", "out.jsonl"]) is None
    script = tmp_path / "run.sh"
    script.write_text("python - /data/train.parquet out.jsonl <<'PY'\nimport sys\nPY\n")
    with pytest.raises(NoTrainingLaunch) as e:
        require_launch(read_script(script))
    assert "train.parquet" not in str(e.value)


def test_a_forks_own_training_driver_is_named_as_such(tmp_path):
    # slime-n's `ray job submit ... -- python3 train_multi_policy.py`: it was "a converter,
    # server or wrapper is not a training job"
    script = tmp_path / "run.sh"
    script.write_text("ray job submit --address=http://127.0.0.1:8265 -- python3 "
                      "/root/slime-n/train_multi_policy.py --config policies.yaml\n")
    with pytest.raises(NoTrainingLaunch, match="train_multi_policy.py is not an entry known "
                       r"here \(train.py, train_async.py, .*a fork's own training driver"):
        require_launch(read_script(script))


def test_a_launch_whose_entry_is_not_known_says_so(tmp_path):
    # `python3 "${TRAIN_ENTRYPOINT}"` set by a file not read here: it was "found instead:
    # ... A converter, server or wrapper is not a training job"
    script = tmp_path / "run.sh"
    script.write_text('source "${ARGS:-/opt/args.sh}"\nray job submit -- python3 '
                      '"${TRAIN_ENTRYPOINT}" --tp 2\n')
    with pytest.raises(NoTrainingLaunch, match=r"run.sh:2 may launch training, but what it "
                       "runs is not known here: TRAIN_ENTRYPOINT .*may be set by 'source") as e:
        require_launch(read_script(script))
    assert "converter" not in str(e.value) and "found instead" not in str(e.value)


def test_a_python_launcher_running_bash_lc_is_read_the_same_way(tmp_path, capsys):
    from support import run_cli

    launcher = tmp_path / "launch.py"
    launcher.write_text("import subprocess\nsubprocess.run(['bash', '-lc', 'python3 train.py "
                        "--actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                        "--tensor-model-parallel-size 2 --num-layers 2 --hidden-size 64 "
                        "--num-attention-heads 4 --colocate'], check=True)\n")
    code, out, err = run_cli(capsys, "check", "--verbose", str(launcher))
    assert code == 0 and "tp 2" in out, err


def test_a_source_of_an_unknown_path_is_named_as_written(tmp_path):
    # the path's variable unknown because of an earlier unread source: the reason quoted
    # "source source ..." (the earlier command's text in place of this word)
    script = tmp_path / "run.sh"
    script.write_text('source "${A:-/opt/a.sh}"\nsource "$B"\npython3 train.py --tp "$TP"\n')
    why = next(u.why for u in read_script(script).unresolved if u.flag == "--tp")
    assert "may be set by 'source \"$B\"' at" in why and "source source" not in why


@pytest.mark.parametrize("head,want", [
    # pyxis's srun passes the environment (--export=ALL); docker only its -e words
    ('srun -N 2 --container-image=nvcr.io/x --container-mounts="$PWD":/ws bash -lc',
     {"--tp": "4", "--pp": "8"}),
    ("docker run --rm -e TP=2 img bash -c", {"--tp": "2", "--pp": "1"})])
def test_a_bash_c_text_in_a_container_gets_what_the_container_passes(tmp_path, head, want):
    script = tmp_path / "run.sh"
    script.write_text(f"export TP=4 PP=8\n{head} 'python3 train.py --tp ${{TP:-1}} "
                      "--pp ${PP:-1}'\n")
    assert {fv.flag: fv.value for fv in read_script(script).argv} == want
