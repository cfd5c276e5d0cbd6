"""The bash reader follows what bash does (issues 28 item 5, 29 item 5): an unresolved
source/eval leaves every variable it may set unknown, $$ is one value all through a run, a
checkout's helper gets its prefix assignments, wrappers pass their arguments on, ``set -o``
takes its option name, and a file may end in a line continuation. Each idiom fixture is
also run by bash with argv-printing stand-ins (test_check_scripts.IDIOM_RUNS)."""

from support import ROOT, SCRIPTS, bash_launch, flag_values

from miles_topology.shell import read_script

IDIOMS = SCRIPTS / "idioms"
CHECKOUT = SCRIPTS / "miles-checkout"


def values(path, **kw) -> dict:
    return {fv.flag: fv.value for fv in read_script(path, **kw).argv}


def test_an_unread_generated_source_leaves_what_it_may_set_unknown(tmp_path):
    script = tmp_path / "run.sh"  # the generator's output is not known here
    script.write_text('TP=2\nGEN="${TMPDIR:-/tmp}/gen_$$.sh"\npython3 make_args.py > "$GEN"\n'
                      'source "$GEN"\nPP=1\npython3 train.py "${PERF_ARGS[@]}" '
                      "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n")
    read = read_script(script)
    got = {fv.flag: fv.value for fv in read.argv}
    assert got == {"--tensor-model-parallel-size": None,  # set before; the file may reset it
                   "--pipeline-model-parallel-size": "1"}  # assigned again after it
    assert read.gaps  # ${PERF_ARGS[@]} may hold any flag: no size is claimed from defaults
    why = " ".join(u.why for u in read.unresolved)
    assert "gen_$$.sh" in why and "may be set by" in why


def test_each_unresolved_source_and_eval_taints(tmp_path):
    for line in ('source "$(cat /etc/model_path)"', "source ./not-here.sh",
                 'eval "$(python3 gen_args.py)"'):
        script = tmp_path / "run.sh"
        script.write_text(f"TP=2\n{line}\npython3 train.py --tensor-model-parallel-size $TP "
                          "--num-layers ${LAYERS:-4}\n")
        assert values(script) == {"--tensor-model-parallel-size": None, "--num-layers": None}
        assert values(script, env={"TP": "4"})["--tensor-model-parallel-size"] == "4"
    script.write_text('TP=2\neval "PP=2"\npython3 train.py --tensor-model-parallel-size $TP\n')
    assert values(script) == {"--tensor-model-parallel-size": "2"}  # a known eval is read


def test_pid_names_one_file_but_is_no_value(tmp_path):
    assert values(IDIOMS / "gen-source-pid.sh")["--tensor-model-parallel-size"] == "4"
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py --save /ckpt/run_$$ --seed $(( $$ % 1000 )) "
                      "--tensor-model-parallel-size 2\n")
    read = read_script(script)
    assert values(script) == {"--save": None, "--seed": None, "--tensor-model-parallel-size": "2"}
    assert all("process id" in u.why for u in read.unresolved)


def test_a_helper_gets_its_prefix_assignment(tmp_path):
    script = CHECKOUT / "scripts" / "run-geo3k-vl.sh"
    truth = flag_values(bash_launch(script, [], tmp_path))
    assert truth["--rotary-base"] == "5000000"  # bash gives the helper the variable
    assert values(script) == truth


def test_a_prefix_assignment_holds_while_a_sourced_file_or_function_runs(tmp_path):
    # upstream's scripts/models/deepseek-v3.sh reads NLAYERS="${MODEL_ARGS_NUM_LAYERS:-61}";
    # `MODEL_ARGS_NUM_LAYERS=4 source it` gives 4 layers, and the variable is gone after it
    models = tmp_path / "models"
    models.mkdir()
    (models / "moe.sh").write_text('N="${MODEL_ARGS_NUM_LAYERS:-61}"\n'
                                   'MODEL_ARGS=(--num-layers "$N" --hidden-size 64)\n')
    script = tmp_path / "run.sh"
    script.write_text('DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
                      'MODEL_ARGS_NUM_LAYERS=4 source "$DIR/models/moe.sh"\n'
                      'TP=1\nperf() { PERF=(--tensor-model-parallel-size "$TP"); }\nTP=2 perf\n'
                      'python3 train.py "${MODEL_ARGS[@]}" "${PERF[@]}" '
                      '--pipeline-model-parallel-size "$TP" '
                      '--seq-length "${MODEL_ARGS_NUM_LAYERS:-0}"\n')
    truth = flag_values(bash_launch(script, [], tmp_path))
    assert truth["--num-layers"] == "4" and truth["--tensor-model-parallel-size"] == "2"
    assert truth["--pipeline-model-parallel-size"] == "1" and truth["--seq-length"] == "0"
    got = values(script)
    assert {k: got[k] for k in truth} == truth


def test_a_wrapper_reads_as_the_wrapped_launch():
    got = values(IDIOMS / "wrapper-args.sh", positional=["--colocate"])
    assert got["--tensor-model-parallel-size"] == "4" and got["--actor-num-nodes"] == "2"
    assert got["--pipeline-model-parallel-size"] == "2" and got["--colocate"] == ""


def test_the_wrapped_shell_sees_exported_variables_only(tmp_path):
    (tmp_path / "inner.sh").write_text("python3 train.py --tensor-model-parallel-size "
                                       '"${TP:-1}" --pipeline-model-parallel-size "${PP:-1}"\n')
    (tmp_path / "outer.sh").write_text('export TP=4\nPP=2\nbash "$(dirname "$0")/inner.sh"\n'
                                       'echo "$TP"\n')
    truth = flag_values(bash_launch(tmp_path / "outer.sh", [], tmp_path))
    assert truth == {"--tensor-model-parallel-size": "4", "--pipeline-model-parallel-size": "1"}
    assert values(tmp_path / "outer.sh") == truth


def test_a_script_run_behind_nohup_or_timeout_is_followed(tmp_path):
    # `nohup bash scripts/run.sh &> train.out &` (a cluster's start script): bash runs the
    # wrapped script as `bash FILE`; it was "no training launch found"
    (tmp_path / "inner.sh").write_text("python3 train.py --tensor-model-parallel-size "
                                       '"${TP:-1}" --pipeline-model-parallel-size "${PP:-1}"\n')
    for wrap in ("nohup", "timeout 3h", "env -u PP"):
        (tmp_path / "outer.sh").write_text(
            f'export TP=4 PP=2\n{wrap} bash "$(dirname "$0")/inner.sh" &> "$HOME/t.out" &\n'
            "wait\n")
        truth = flag_values(bash_launch(tmp_path / "outer.sh", [], tmp_path))
        assert truth["--tensor-model-parallel-size"] == "4"
        assert values(tmp_path / "outer.sh")["--tensor-model-parallel-size"] == "4"


def test_a_prefix_assignment_reaches_the_shell_a_command_starts(tmp_path):
    # `PP=2 bash run.sh`: bash puts PP in that command's environment (a child shell sees it,
    # exported or not), and PP is not set after it; was read as not given (pp 1)
    (tmp_path / "inner.sh").write_text("python3 train.py --tensor-model-parallel-size "
                                       '"${TP:-1}" --pipeline-model-parallel-size "${PP:-1}"\n')
    for run in ('PP=2 bash "$(dirname "$0")/inner.sh"',
                'PP=2 nohup bash "$(dirname "$0")/inner.sh" &> "$HOME/t.out" &\nwait'):
        (tmp_path / "outer.sh").write_text(f"TP=4\n{run}\n")
        truth = flag_values(bash_launch(tmp_path / "outer.sh", [], tmp_path))
        assert truth == {"--tensor-model-parallel-size": "1",  # TP=4 is not exported
                         "--pipeline-model-parallel-size": "2"}
        assert values(tmp_path / "outer.sh") == truth, run
    # after such a command PP is not set: the launch reads its default
    (tmp_path / "after.sh").write_text(
        'PP=2 nohup echo started\npython3 train.py --pipeline-model-parallel-size "${PP:-1}"\n')
    truth = flag_values(bash_launch(tmp_path / "after.sh", [], tmp_path))
    assert truth == {"--pipeline-model-parallel-size": "1"} == values(tmp_path / "after.sh")


def test_set_o_takes_its_option_name(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('set -euo pipefail\nset +o xtrace\npython3 train.py --x "${1:-none}"\n')
    assert flag_values(bash_launch(script, [], tmp_path)) == {"--x": "none"}
    assert values(script, positional=[]) == {"--x": "none"}


def test_a_file_ending_in_a_continuation_reads_as_bash_reads_it(tmp_path):
    for end in ("\\\n", "\\"):
        script = tmp_path / "run.sh"
        script.write_text("python3 train.py --tensor-model-parallel-size 2 " + end)
        assert flag_values(bash_launch(script, [], tmp_path)) == values(script)
    script.write_text("python3 train.py --x a\\\\\n")  # an escaped backslash: a word
    assert values(script) == {"--x": "a\\"}


def test_gpu_probes_are_answered_from_the_modelled_cluster(tmp_path, capsys):
    import json
    import sys

    from miles_topology.cli import main

    script = IDIOMS / "gpu-probes.sh"
    # bash's truth: a stand-in nvidia-smi that prints what a 1 x 4 H200 node prints
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    smi = bin_ / "nvidia-smi"
    root = ROOT
    smi.write_text(f"#!/bin/bash\nexec {sys.executable} -c 'import sys; sys.path.insert(0, "
                   f"\"{root}\"); from miles_topology.pylaunch.cluster import ClusterModel; "
                   "sys.stdout.write(ClusterModel.of(dict(gpus_per_node=4, gpu=\"H200\"))"
                   ".nvidia_smi(sys.argv[1:]).stdout)' \"$@\"\n")
    smi.chmod(0o755)
    truth = flag_values(bash_launch(script, [], tmp_path))
    assert truth["--actor-num-gpus-per-node"] == "4"
    assert truth["--tensor-model-parallel-size"] == "4"
    main(["check", "--format", "json", str(script), "--gpus-per-node", "4", "--gpu", "H200"])
    got = json.loads(capsys.readouterr().out)["values"]
    assert {f: got[f]["value"] for f in got} == {f: truth[f] for f in got}
    main(["check", "--format", "json", str(script)])  # no cluster given: not guessed
    data = json.loads(capsys.readouterr().out)
    assert data["values"]["--actor-num-gpus-per-node"]["value"] is None
    assert any("--gpus-per-node" in u["why"] for u in data["unresolved"])


RAY_STATUS = """\
======== Autoscaler status: 2026-01-01 00:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 1 node_a
 1 node_b
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/256.0 CPU
 0.0/8.0 GPU
 0B/1.50TiB memory
 0B/200.00GiB object_store_memory

Pending Demands:
 (no resource demands)
"""


def test_cluster_probes_are_answered_from_the_modelled_cluster(tmp_path, capsys):
    """scontrol's node list, `ray status`, and python helpers asking torch, Ray and
    nvidia-smi: bash runs them against stand-ins of a 2 x 4-GPU job (written here, not the
    checker's), the checker answers them from --nodes 2 --gpus-per-node 4."""
    import json
    import sys

    from miles_topology.cli import main

    script = IDIOMS / "cluster-probes.sh"
    bin_, site = tmp_path / "bin", tmp_path / "site"
    bin_.mkdir()
    site.mkdir()
    tools = {"scontrol": 'echo node-a; echo node-b',
             "ray": f"cat <<'EOF'\n{RAY_STATUS}EOF",
             "nvidia-smi": 'for i in 0 1 2 3; do echo "GPU $i: NVIDIA H100 80GB HBM3"; done'}
    for name, body in tools.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    (site / "torch.py").write_text("class cuda:\n    device_count = staticmethod(lambda: 4)\n")
    (site / "ray.py").write_text("def init(**kw):\n    pass\n\n\ndef cluster_resources():\n"
                                 "    return {'GPU': 8.0, 'CPU': 256.0}\n")
    truth = flag_values(bash_launch(script, [], tmp_path, {"PYTHONPATH": str(site)}))
    assert truth == {"--actor-num-nodes": "2", "--actor-num-gpus-per-node": "4",
                     "--rollout-num-gpus": "8", "--rollout-num-gpus-per-engine": "2",
                     "--tensor-model-parallel-size": "2"}, sys.executable
    main(["check", "--format", "json", str(script), "--nodes", "2", "--gpus-per-node", "4"])
    got = json.loads(capsys.readouterr().out)["values"]
    assert {f: got[f]["value"] for f in truth} == truth
    main(["check", "--format", "json", str(script)])  # no cluster given: not guessed
    data = json.loads(capsys.readouterr().out)
    assert all(data["values"][f]["value"] is None for f in truth)
    whys = [u["why"] for u in data["unresolved"]]
    assert whys and all("--nodes N --gpus-per-node N" in w for w in whys), whys


def test_ray_status_is_answered_only_for_its_gpu_line():
    from miles_topology.pylaunch.cluster import ClusterModel

    c = ClusterModel.of({"nodes": 2, "gpus_per_node": 4})
    ran, probed = c.answer(None, "ray status | grep GPU | awk '{print $1}' | cut -d/ -f2")
    assert ran.stdout == "8.0\n" and probed
    assert c.answer(None, "ray status | grep CPU") == (None, False)  # not modelled: unknown
    assert c.answer(None, "ray status") == (None, False)


def test_a_start_script_written_by_a_heredoc_is_run_as_bash_runs_it(tmp_path):
    """``cat > start_train.sh <<EOF`` holding ``\\$((WAITED + 2))`` and ``\\$0``, then
    ``bash start_train.sh``: the launch is the start script's, its $0 is start_train.sh."""
    script = IDIOMS / "written-start.sh"
    truth = flag_values(bash_launch(script, [], tmp_path, {"MAX_WAIT": "0"}))  # no waiting
    assert truth["--wandb-group"] == "start_train" and truth["--sglang-router-port"] == "30000"
    assert values(script) == truth


def test_a_backquoted_comment_in_a_continued_command_is_no_word(tmp_path):
    # `# why` is an empty command substitution: bash passes no word for it and the line
    # continues (issue 37; tree-sitter-bash alone reports an unterminated backquote)
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py \\\n"
                      "   --colocate `# engines share the GPUs` \\\n"
                      "   --tensor-model-parallel-size 2   `# tp` \\\n"
                      "   --num-layers 4\n")
    truth = flag_values(bash_launch(script, [], tmp_path))
    assert truth == {"--colocate": "", "--tensor-model-parallel-size": "2", "--num-layers": "4"}
    assert values(script) == truth
