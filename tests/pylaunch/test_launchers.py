"""Python launchers as miles users have them: upstream's helpers (which import ray and probe
NVLink), typer apps with several commands, test files launching in a loop, launchers reading
a model config; probes answered from the modelled cluster, heavy modules as stand-ins."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from support import LAUNCHERS

from miles_topology.cli import main
from miles_topology.judging.check_launcher import check_python_all
from miles_topology.pylaunch import read_python_launches
from miles_topology.pylaunch.cluster import ClusterModel

HERE = LAUNCHERS
UP = {"PYTHONPATH": str(HERE / "upstream")}  # the stand-in miles helpers, not the checkout's


def fixture(name: str) -> str:
    return str(HERE / name)


def line_of(name: str, text: str) -> int:
    lines = (HERE / name).read_text().splitlines()
    return next(i for i, x in enumerate(lines, 1) if text in x)


def sizes(v) -> tuple | None:
    """(world, dp, edp); an invalid grid keeps its world size but has no dp or edp."""
    s = v.summary
    return (s["world_size"], s.get("dp"), s.get("edp")) if s else None


def sizes_of(d: dict) -> tuple:
    return d["topology"]["world_size"], d["topology"]["dp"], d["topology"]["edp"]


def _real_ok() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("torch", "ray", "typer"))


# default: stand-ins (the answer a machine without torch/ray gives); real: installed modules
MODES = [False, pytest.param(True, marks=pytest.mark.skipif(
    not _real_ok(), reason="--real-imports needs torch, ray and typer installed"))]


# ---------------------------------------------------------------- each style, hand-computed


@pytest.mark.slow
@pytest.mark.parametrize("real", MODES)
def test_typer_app_every_command(real):
    pytest.importorskip("typer")
    vs = check_python_all(fixture("run_qwen3_moe_app.py"), [], UP, real_imports=real)
    # train: 1 node x 8 (H100), tp 4 -> dp 2; ep 8, etp 1 -> edp 1
    # full-train: the same with ep 4 -> edp 2; download launches nothing (a note)
    assert [(v.extra["launch"]["command"], sizes(v), v.ok) for v in vs] == [
        ("train", (8, 2, 1), True), ("full-train", (8, 2, 2), True)]
    line = line_of("run_qwen3_moe_app.py", "U.execute_train(")
    assert [v.extra["source"] for v in vs] == [f"{fixture('run_qwen3_moe_app.py')}:{line}"] * 2
    assert any("command `download`: no training launch" in n for n in vs[0].extra["notes"])
    # upstream's NVLink probe was answered from the model (8 x H100 on NVLink)
    assert all(v.extra["cluster"]["assumed"] == ["nodes", "gpus_per_node", "gpu", "nvlink"]
               for v in vs)


@pytest.mark.slow
@pytest.mark.parametrize("real", MODES)
def test_a_test_file_launching_in_a_loop_is_one_entry_per_launch(real):
    vs = check_python_all(fixture("test_tiny_moe_parallel_check.py"), [], UP, real_imports=real)
    # reference run: 8 GPUs (torch.cuda.device_count() of the model), tp 1 -> dp 8, ep 8 -> edp 1
    # then (gpus, tp, pp, ep): (8,2,1,8) dp 4 edp 1; (8,4,2,4) dp 1 edp 1; (4,1,1,2) dp 4
    # edp 2; (8,1,4,2) dp 2 edp 1; (8,1,1,3): 16 experts over ep 3 -> invalid
    assert [(sizes(v), v.ok) for v in vs] == [
        ((8, 8, 1), True), ((8, 4, 1), True), ((8, 1, 1), True), ((4, 4, 2), True),
        ((8, 2, 1), True), ((8, None, None), False)]
    assert {p.code for p in vs[-1].errors} == {"experts-not-divisible-by-ep",
                                               "expert-grid-divisibility"}
    first = line_of("test_tiny_moe_parallel_check.py", "U.execute_train(")
    loop = line_of("test_tiny_moe_parallel_check.py", "        U.execute_train(")
    assert [v.extra["launch"]["source"].rsplit(":", 1)[1] for v in vs] == \
        [str(first)] + [str(loop)] * 5
    # each problem at the literal that spells its first flag (the loop's --expert-model-...)
    spelled = line_of("test_tiny_moe_parallel_check.py", "--expert-model-parallel-size {ep}")
    assert all(p.location.line == spelled for p in vs[-1].errors)


@pytest.mark.slow
@pytest.mark.parametrize("real", MODES)
def test_a_model_config_that_is_not_here_is_an_unknown_model_fact(real, tmp_path):
    vs = check_python_all(fixture("run_from_hf_config.py"), [], UP, real_imports=real)
    (v,) = vs
    # 8 GPUs from torch.cuda, tp 2 -> dp 4; ep 8 -> edp 1; the shape flags are unknown
    assert sizes(v) == (8, 4, 1) and v.ok
    unresolved = {u["flag"]: u for u in v.extra["unresolved"]}
    assert {"--num-layers", "--num-experts", "--num-attention-heads"} <= set(unresolved)
    assert "/root/models/Qwen3-30B-A3B/config.json" in unresolved["--num-experts"]["expression"]
    assert "--num-experts" in v.extra["unknown_model_facts"]["flags"]
    # the delete and the read were recorded, the launch still read
    kinds = [o["kind"] for o in v.extra["others"]]
    assert "shutil.rmtree" in kinds and "read (no such file)" in kinds
    # given the file, the facts are known: 12 experts do not split over ep 8 (the check the
    # unknown skipped)
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
        "num_key_value_heads": 4, "num_experts": 12, "num_experts_per_tok": 2}))
    (v,) = check_python_all(fixture("run_from_hf_config.py"), ["--hf-dir", str(tmp_path)], UP,
                            real_imports=real, reads=[str(tmp_path)])  # --read MODEL_DIR
    assert not v.ok and [p.code for p in v.errors] == ["experts-not-divisible-by-ep"]
    assert not v.extra["unresolved"]


@pytest.mark.slow
def test_default_mode_never_imports_the_installed_heavy_modules(tmp_path):
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os, sys\nimport torch, ray, sglang.srt.server_args, wandb\n"
        "real = [m for m in ('torch', 'ray') if not getattr(sys.modules[m], '__standin__', 0)]\n"
        "os.system(f'echo real={real}')\n"
        "os.system('python3 train.py --actor-num-gpus-per-node 8')\n")
    (got,) = read_python_launches(str(launcher), [])
    assert got.argv == ["--actor-num-gpus-per-node", "8"] and got.seconds < 5
    assert [o.command for o in got.others] == ["echo real=[]"]
    if _real_ok():
        (got,) = read_python_launches(str(launcher), [], real_imports=True)
        assert got.argv == ["--actor-num-gpus-per-node", "8"]
        ran = [o.command for o in got.others if o.kind == "os.system"]
        assert ran == ["echo real=['torch', 'ray']"]


# ---------------------------------------------------------------- the modelled cluster

PROBES = """\
import os, socket, subprocess
import ray, torch
import miles.utils.external_utils.command_utils as U

def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

per_node = int(sh("nvidia-smi -L | wc -l")) or \
    int(sh("rocm-smi --showproductname | grep -c Series"))
name = sh("nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1")
assert per_node == torch.cuda.device_count(), (per_node, torch.cuda.device_count())
ray.init(address="auto")
nodes = len(ray.nodes())
assert ray.cluster_resources()["GPU"] == nodes * per_node
os.environ["MASTER_ADDR"] = socket.gethostbyname(socket.gethostname())
U.execute_train(f"--actor-num-nodes {nodes} --actor-num-gpus-per-node {per_node} "
                f"--colocate {sh('ibstat -l | head -1')}", per_node, "tiny-dense",
                extra_env_vars={"GPU_NAME": name or torch.cuda.get_device_name(0)})
"""


@pytest.mark.parametrize(("given", "world", "name", "nvls"), [
    ({}, 8, "NVIDIA H100 80GB HBM3", "1"),
    ({"nodes": 2, "gpu": "GB200"}, 8, "NVIDIA GB200", "1"),  # 4 GPUs a GB200 tray
    ({"nodes": 4, "gpus_per_node": 8, "gpu": "B200", "nvlink": False}, 32, "NVIDIA B200", "0"),
    ({"gpu": "MI300X"}, 8, "AMD Instinct MI300X OAM", "0"),  # rocm-smi; no nvidia-smi
])
def test_probes_answer_from_the_modelled_cluster(tmp_path, given, world, name, nvls):
    launcher = tmp_path / "probe.py"
    launcher.write_text(PROBES)
    (v,) = check_python_all(str(launcher), [], UP, ClusterModel.of(given))
    assert v.summary["world_size"] == world and v.ok
    (got,) = read_python_launches(str(launcher), [], UP, cluster=ClusterModel.of(given))
    assert got.env["GPU_NAME"] == name and got.env["NCCL_NVLS_ENABLE"] == nvls
    assert got.env["MASTER_ADDR"] == "10.0.0.1"  # node 0's address, from the hostname
    lines = "\n".join(v.extra["report_lines"])
    assert "not modelled (answered with exit 0 and no output): `ibstat -l | head -1`" in lines
    assert "modelled cluster: " in lines
    assert ("(assumed)" in lines) == (len(given) < 4)


def test_a_command_sent_to_every_node_is_recorded_once_per_node():
    pytest.importorskip("typer")
    (got,) = read_python_launches(fixture("run_qwen3_moe_app.py"), ["full-train"], UP,
                                  cluster=ClusterModel.of({"nodes": 3}))
    convert = [o.command for o in got.others if "convert_hf_to_torch_dist" in o.command]
    assert len(convert) == 3
    assert all("--master-addr 10.0.0.1" in c and "--nnodes=3" in c for c in convert)
    assert [f"--node-rank {r}" in c for r, c in enumerate(convert)] == [True] * 3


def test_a_stand_in_value_makes_the_flags_it_builds_unresolved_not_guessed(tmp_path):
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os\nimport sglang\n"
        "tp = sglang.srt.server_args.ServerArgs().tp_size\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node 8 --num-attention-heads 3 "
        "--num-layers 4 "
        "--tensor-model-parallel-size {tp}')\n")
    (v,) = check_python_all(str(launcher), [])
    assert v.ok and v.summary is None  # world size is known, tp is not: no sizes printed
    (u,) = v.extra["unresolved"]
    assert u["flag"] == "--tensor-model-parallel-size" and "ServerArgs" in u["expression"]
    assert u["source"] == f"{launcher}:4"  # where the flag is built from it
    # the same launch with a number: heads 3 % tp 2 is the error the unknown skipped
    launcher.write_text(launcher.read_text().replace("{tp}", "2"))
    (v,) = check_python_all(str(launcher), [])
    assert [p.code for p in v.errors] == ["heads-not-divisible-by-tp"]



def test_a_flag_with_a_stand_in_value_is_still_judged_for_its_spelling(tmp_path):
    """As in a bash script (one judge): a flag whose value is unknown is left out of the
    rules, but its name is not: a misspelling is an error where its value comes from."""
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os\nimport sglang\n"
        "tp = sglang.srt.server_args.ServerArgs().tp_size\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node 8 --num-attention-heads 4 "
        "--num-layers 4 --tensor-model-paralel-size {tp}')\n")
    (v,) = check_python_all(str(launcher), [])
    (p,) = v.errors
    assert p.code == "unknown-flag" and p.flags == ("--tensor-model-paralel-size",)
    assert (p.location.path, p.location.line) == (str(launcher), 4)


def test_deletes_and_writes_outside_land_in_the_temp_view(tmp_path):
    outside = Path("/tmp") / f"mt-launchers-{uuid.uuid4().hex}"
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os, shutil, tempfile\n"
        f"out = {str(outside)!r}\n"
        "os.makedirs(out + '/ckpt', exist_ok=True)\n"
        "open(out + '/ckpt/latest.txt', 'w').write('4')\n"
        "tp = open(out + '/ckpt/latest.txt').read()\n"  # reads back what it wrote
        "shutil.rmtree(out)\n"
        "gone = not os.path.exists(out + '/ckpt/latest.txt')\n"
        "shutil.copytree('/nonexistent/verifiers/envs', out + '/envs', dirs_exist_ok=True)\n"
        "scratch = tempfile.mkdtemp()\n"
        "shutil.rmtree(scratch)\n"  # its own temp folder: really removed
        "os.system(f'python3 train.py --actor-num-gpus-per-node 8 "
        "--tensor-model-parallel-size {tp} # {gone} {os.path.exists(scratch)}')\n")
    (got,) = read_python_launches(str(launcher), [])
    assert got.argv == ["--actor-num-gpus-per-node", "8", "--tensor-model-parallel-size", "4"]
    kinds = [(o.kind, o.command) for o in got.others]
    assert ("shutil.rmtree", str(outside)) in kinds and ("write", f"{outside}/ckpt/latest.txt") \
        in kinds
    assert ("shutil.copytree", f"/nonexistent/verifiers/envs {outside}/envs") in kinds
    assert not outside.exists()


# ---------------------------------------------------------------- the CLI: flags, table, formats


def test_cluster_flags_and_the_config_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.miles-topology]\nnodes = 2\ngpu = "GB200"\n')
    launcher = tmp_path / "probe.py"
    launcher.write_text(PROBES)
    monkeypatch.setenv("PYTHONPATH", UP["PYTHONPATH"])
    assert main(["check", "--format", "json", str(launcher)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topology"]["world_size"] == 8  # 2 nodes x 4 (GB200) from the table
    assert data["cluster"]["assumed"] == ["nvlink"]
    assert main(["check", "--format", "json", "--gpus-per-node", "8", "--no-nvlink",
                 str(launcher)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topology"]["world_size"] == 16 and data["cluster"]["nvlink"] is False
    (tmp_path / "pyproject.toml").write_text('[tool.miles-topology]\nnodes = 0\n')
    assert main(["check", str(launcher)]) == 2
    err = capsys.readouterr().err
    assert "nodes = 0 in" in err and "at least 1" in err and "Traceback" not in err


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_every_launch_is_an_entry_in_every_format(fmt, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", UP["PYTHONPATH"])
    path = fixture("test_tiny_moe_parallel_check.py")
    first = line_of("test_tiny_moe_parallel_check.py", "U.execute_train(")
    loop = line_of("test_tiny_moe_parallel_check.py", "        U.execute_train(")
    lines = [first] + [loop] * 5
    assert main(["check", "--format", fmt, *(["--verbose"] if fmt == "text" else []), path]) == 1
    out = capsys.readouterr().out
    if fmt == "text":
        for i, line in enumerate(lines, 1):
            assert f"{path} [launch {i} of 6, line {line}]: " in out
        assert "6 inputs: 5 valid, 1 invalid" in out
    elif fmt == "json":
        data = json.loads(out)
        assert [(d["launch"]["index"], d["launch"]["source"]) for d in data] == \
            [(i, f"{path}:{line}") for i, line in enumerate(lines)]
        assert [d["ok"] for d in data] == [True] * 5 + [False]
    elif fmt == "github":
        notices = [x for x in out.splitlines() if x.startswith("::notice") and "title=launch" in x]
        assert [n.split("line=")[1].split(",")[0] for n in notices] == [str(x) for x in lines]
        assert "launch 4 of 6" in notices[3] and "world 4, dp 4, edp 2, OK" in notices[3]
    else:
        results = json.loads(out)["runs"][0]["results"]
        launches = [r for r in results if r["ruleId"] == "launch"]
        assert [r["locations"][0]["physicalLocation"]["region"]["startLine"]
                for r in launches] == lines
        assert {r["ruleId"] for r in results} >= {"experts-not-divisible-by-ep"}


def test_the_command_named_after_dashdash_is_the_one_checked(capsys, monkeypatch):
    pytest.importorskip("typer")
    monkeypatch.setenv("PYTHONPATH", UP["PYTHONPATH"])
    assert main(["check", "--format", "json", fixture("run_qwen3_moe_app.py"), "--",
                 "full-train", "--hardware", "GB200"]) == 1
    data = json.loads(capsys.readouterr().out)
    # 1 x 4 (GB200), tp 4 -> dp 1, ep 4 -> edp 1; its engines of 8 GPUs do not fit in 4
    assert isinstance(data, dict) and sizes_of(data) == (4, 1, 1)
    assert [e["code"] for e in data["errors"]] == ["rollout-gpus-not-multiple-of-engine"]
    assert os.path.basename(data["source"].rsplit(":", 1)[0]) == "run_qwen3_moe_app.py"


def test_cuda_visible_devices_and_calls_into_stand_ins(tmp_path, monkeypatch):
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os\nimport torch, wandb\n"
        "wandb.init(project='moe', mode='offline')\n"
        "n = torch.cuda.device_count()\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node {n}')\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # this machine's: not the model's
    (got,) = read_python_launches(str(launcher), [])
    assert got.argv == ["--actor-num-gpus-per-node", "8"]
    (got,) = read_python_launches(str(launcher), [], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert got.argv == ["--actor-num-gpus-per-node", "4"]  # as the CUDA runtime counts them
    assert [(o.kind, o.command, o.source) for o in got.others] == [
        ("stand-in call", "wandb.init(project='moe', mode='offline')", (str(launcher), 3))]
    (got,) = read_python_launches(str(launcher), [], {"CUDA_VISIBLE_DEVICES": ""},
                                  cluster=ClusterModel.of({"gpus_per_node": 2}))
    assert got.argv == ["--actor-num-gpus-per-node", "0"]


def test_a_program_run_for_its_output_gets_no_stand_ins():
    from miles_topology.pylaunch import run_program

    # its stdout is read as is (`$(python3 -c ...)` in a script): probes answered from the
    # model, but a missing file or module fails as it would, never an Unknown marker
    got = run_program(["-c", "import subprocess\n"
                       "print(subprocess.check_output('nvidia-smi -L | wc -l', shell=True, "
                       "text=True).strip())\nprint(open('/root/models/nope/config.json').read())"])
    assert got.stdout == "8\n" and "FileNotFoundError" in got.error
    got = run_program(["-c", "import miles_topology_fixture_absent_pkg"])
    assert got.status == 1 and "ModuleNotFoundError" in got.error and "__unknown" not in \
        got.stdout


def test_stand_in_ray_runs_tasks_and_actors_inline_on_their_node():
    from miles_topology.pylaunch import standins
    from miles_topology.pylaunch.standins import ray

    standins.CLUSTER = ClusterModel.of({"nodes": 2})
    try:
        @ray.remote(num_gpus=1)
        class Worker:
            def where(self):
                return ray.get_node_ip_address()

        @ray.remote
        def fails():
            raise ValueError("inside the task")

        node = ray.nodes()[1]["NodeID"]
        strategy = ray.NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        w = Worker.options(scheduling_strategy=strategy).remote()
        assert ray.get([w.where.remote(), Worker.remote().where.remote()]) == \
            ["10.0.0.2", "10.0.0.1"]
        ref = fails.remote()  # raised by get, as Ray's RayTaskError is
        with pytest.raises(ValueError, match="inside the task"):
            ray.get(ref)
        assert ray.cluster_resources()["GPU"] == 16.0
    finally:
        standins.CLUSTER = None


def test_a_module_the_launcher_imports_that_is_missing_is_a_stand_in_a_librarys_is_not(tmp_path):
    lib = tmp_path / "venv" / "site-packages"  # an installed library with an optional import
    lib.mkdir(parents=True)
    (lib / "optlib.py").write_text(
        "try:\n    import mt_absent_accel\n    TP = 8\nexcept ImportError:\n    TP = 2\n")
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os\nimport optlib\nimport mt_absent_polars as pl\n"
        "rows = pl.read_parquet('/root/data.parquet').height\n"
        "os.system(f'python3 train.py --actor-num-gpus-per-node 8 "
        "--tensor-model-parallel-size {optlib.TP} --global-batch-size {rows}')\n")
    (got,) = read_python_launches(str(launcher), [], {"PYTHONPATH": str(lib)})
    assert got.argv[:4] == ["--actor-num-gpus-per-node", "8", "--tensor-model-parallel-size",
                            "2"]  # the library's own fallback, as without the check
    assert got.argv[-1].startswith("__unknown_")
    assert got.notes == ["it imports mt_absent_polars, which is not installed here: a "
                         "recording stand-in answered it"]


@pytest.mark.slow
@pytest.mark.skipif(not _real_ok(), reason="--real-imports needs torch, ray and typer installed")
def test_real_imports_flag_on_the_command_line(tmp_path, capsys):
    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os, sys\nimport torch\n"
        "os.system(f'echo standin={hasattr(torch, \"__standin__\")}')\n"
        "os.system(f'python3 train.py --num-layers 8 --actor-num-gpus-per-node "
        "{torch.cuda.device_count()}')\n")
    for flags, standin in (([], "True"), (["--real-imports"], "False")):
        assert main(["check", "--format", "json", "--gpus-per-node", "4", *flags,
                     str(launcher)]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["topology"]["world_size"] == 4  # torch.cuda answered from the model
        assert f"echo standin={standin}" in [o["command"] for o in data["others"]]


# ---------------------------------------------------------------- where each flag is spelled


QWEN = HERE / "upstream" / "scripts" / "run_qwen3_4b.py"


def _line(path: Path, text: str, after: str = "") -> int:
    lines = path.read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if after in x) if after else 0
    return next(i for i, x in enumerate(lines, 1) if i > start and text in x)


@pytest.mark.parametrize("backend", ["megatron", "fsdp"])
def test_a_flag_in_both_branches_of_a_match_lands_on_the_branch_taken(backend):
    """--max-tokens-per-gpu is spelled in both `case`s; the taken one is where it is (traced
    in the child, issue 36); a flag built in a helper module is located there."""
    (got,) = read_python_launches(str(QWEN), [], {**UP, "MILES_SCRIPT_TRAIN_BACKEND": backend})
    f, line, col = got.spelled["--max-tokens-per-gpu"]
    assert f == str(QWEN) and line == _line(QWEN, "--max-tokens-per-gpu", f'case "{backend}"')
    assert QWEN.read_text().splitlines()[line - 1][col - 1:].startswith("--max-tokens-per-gpu")
    helper = HERE / "upstream" / "miles" / "utils" / "external_utils" / "model_args_utils.py"
    assert got.spelled["--num-layers"][:2] == (str(helper), _line(helper, '"tiny-dense"'))


def test_a_typo_inside_an_f_string_is_reported_at_its_line(tmp_path, capsys):
    """concise output puts unknown-flag on the f-string's line and column, not on the
    execute_train call; the severity word follows the position."""
    typo = tmp_path / "scripts" / "run_qwen3_4b.py"
    typo.parent.mkdir()
    typo.write_text(QWEN.read_text().replace('f"--tensor-model-parallel-size',
                                             'f"--tensor-model-paralel-size'))
    line = _line(typo, "--tensor-model-paralel-size")
    col = typo.read_text().splitlines()[line - 1].index("--tensor") + 1
    assert main(["check", "--output-format", "concise", "--env", f"PYTHONPATH={UP['PYTHONPATH']}",
                 str(typo)]) == 1
    out = capsys.readouterr().out
    assert f"{typo}:{line}:{col}: error unknown-flag --tensor-model-paralel-size" in out, out


def test_plan_reads_a_python_model_file(capsys):
    """miles' model files are Python (scripts/models/*.py, `def model_args() -> str`): plan
    runs it in the sandbox, as model_args_utils.py does, and lists layouts."""
    model = HERE / "upstream" / "scripts" / "models" / "tiny-moe.py"
    assert main(["plan", str(model), "--nodes", "1", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["layouts"] and got["model"]["layers"] == 8 and got["model"]["experts"] == 16
    broken = main(["plan", str(HERE / "launch_utils.py"), "--nodes", "1"])
    assert broken == 2 and "not read as a miles model file" in capsys.readouterr().err


def test_an_unknown_gpu_is_a_usage_error(capsys):
    assert main(["check", "--gpu", "A100-40GB", "--", "--num-layers", "2"]) == 2
    assert "did you mean A100?" in capsys.readouterr().err


def test_fix_rewrites_the_flag_in_the_branch_that_ran(tmp_path, capsys):
    """A typo spelled in both branches of a `match`: --fix rewrites the one the launch took
    (its location), re-checks, and leaves the other branch as it was."""
    typo = tmp_path / "scripts" / "run_qwen3_4b.py"
    typo.parent.mkdir()
    typo.write_text(QWEN.read_text().replace("--max-tokens-per-gpu", "--max-tokens-per-gppu"))
    # a layout field's flag: an unsafe fix (fix.FIXERS)
    env = ["--env", f"PYTHONPATH={UP['PYTHONPATH']}", "--unsafe-fixes"]
    assert main(["check", "--diff", *env, str(typo)]) == 1
    assert "+                f\"--max-tokens-per-gpu {args.max_tokens_per_gpu} \"" in \
        capsys.readouterr().out
    assert main(["check", "--fix", *env, str(typo)]) == 0
    capsys.readouterr()
    lines = typo.read_text().splitlines()
    fixed = _line(typo, "--max-tokens-per-gpu ")
    assert fixed == _line(QWEN, "--max-tokens-per-gpu", 'case "megatron"')
    assert "--max-tokens-per-gppu" in lines[_line(QWEN, "--max-tokens-per-gpu", 'case "fsdp"') - 1]


def test_launches_of_a_loop_are_located_each_at_its_own_literal():
    """The first launch's --expert-model-parallel-size is at the first call's literal; the
    loop's launches at the loop's (the marked lines add up: a line run again is not sent
    again, so a loop adds no records)."""
    got = read_python_launches(fixture("test_tiny_moe_parallel_check.py"), [], UP)
    path = HERE / "test_tiny_moe_parallel_check.py"
    first = _line(path, '"--expert-model-parallel-size 8 --save-debug-rollout-data')
    loop = _line(path, 'f"--pipeline-model-parallel-size {pp} --expert-model-parallel-size')
    assert [g.spelled["--expert-model-parallel-size"][1] for g in got] == \
        [first] + [loop] * (len(got) - 1)
    assert got[1].spelled["--tensor-model-parallel-size"][1] == loop - 1


def test_a_launch_without_a_layer_count_is_refused_as_megatron_does(tmp_path):
    """Megatron-LM validate_args asserts "either num_layers or encoder_num_layers should be
    specified" (miles 31f1ca9 utils/arguments.py:2711 runs it for the Megatron backend), as for
    bash scripts; not under FSDP, nor while a word bash expands at run time may hold it (slime's
    execute_train leaves `${MODEL_ARGS[@]}` to `bash -c`)."""
    launcher = tmp_path / "run.py"
    for extra, code in (("", ["missing-num-layers"]), ("--train-backend fsdp", []),
                        ("${MODEL_ARGS[@]}", []), ("--num-layers 4", [])):
        launcher.write_text(
            "import os\n"
            f"os.system('python3 train.py --actor-num-gpus-per-node 8 --colocate {extra}')\n")
        (v,) = check_python_all(str(launcher), [])
        assert [p.code for p in v.errors] == code, extra


def test_a_torchrun_launch_has_torchrun_s_world_and_another_program_is_not_judged(tmp_path):
    """As for bash scripts (check_script.torchrun_actor, not_ours): torchrun starts nnodes x
    nproc_per_node ranks; a train.py of the checkout that builds neither miles' nor slime's
    parser (a vendored Megatron-LM example) is not a miles launch."""
    from miles_topology.model.errors import NoTrainingLaunch

    launcher = tmp_path / "run.py"
    launcher.write_text(
        "import os\n"
        "os.system('torchrun --nnodes 2 --nproc_per_node 2 /root/miles/train.py --num-layers 4"
        " --colocate')\n")
    (v,) = check_python_all(str(launcher), [])
    assert v.summary["world_size"] == 4
    (tmp_path / "mimo").mkdir()
    (tmp_path / "mimo" / "train.py").write_text("from megatron.training import pretrain\n")
    launcher.write_text(launcher.read_text().replace("/root/miles/train.py", "mimo/train.py"))
    with pytest.raises(NoTrainingLaunch, match="builds neither"):
        check_python_all(str(launcher), [])
    # a bare train.py runs from the working folder, which may be another checkout
    launcher.write_text(launcher.read_text().replace("mimo/train.py", "train.py"))
    (tmp_path / "mimo" / "train.py").rename(tmp_path / "train.py")
    (v,) = check_python_all(str(launcher), [])
    assert v.summary["world_size"] == 4


def test_an_array_of_a_file_the_shell_string_sources_is_read(tmp_path, capsys):
    """slime's execute_train runs `source scripts/models/X.sh && ray job submit ... --
    python3 train.py ${MODEL_ARGS[@]} ...` in one shell string: the model's flags are the
    sourced file's array, read as bash reads it (not "from the checkpoint"); a file that is
    not there, or lies outside the checkout, leaves the shape unknown, saying so."""
    ck = tmp_path / "ck"
    (ck / ".git").mkdir(parents=True)
    (ck / "models").mkdir()
    (ck / "models" / "moe6.sh").write_text(
        "LAYERS=2\nMODEL_ARGS=(\n  --num-layers ${LAYERS}\n  --hidden-size 128\n"
        "  --num-attention-heads 4\n  --num-experts 6\n  --moe-router-topk 1\n)\n")
    (tmp_path / "far.sh").write_text("MODEL_ARGS=(--num-layers 2 --wandb-key s3cr3t)\n")
    launcher = ck / "go.py"
    launcher.write_text(
        "import os, subprocess\n"
        "root = os.path.dirname(os.path.abspath(__file__))\n"
        "name = os.environ.get('SHAPE', 'moe6')\n"
        "subprocess.run(f'export A=1; source {root}/models/{name}.sh && '\n"
        "               'python3 train.py ${MODEL_ARGS[@]} --actor-num-gpus-per-node 4 '\n"
        "               '--colocate --expert-model-parallel-size 4', shell=True)\n")
    assert main(["check", "--format", "json", str(launcher)]) == 1
    data = json.loads(capsys.readouterr().out)
    (err,) = data["errors"]
    assert err["code"] == "experts-not-divisible-by-ep" and "6 experts" in err["message"]
    assert not data.get("unresolved") and not data.get("unknown_model_facts")
    for name in ("absent", "../../far"):  # not there; a file outside the checkout
        assert main(["check", "--format", "json", "--env", f"SHAPE={name}",
                     str(launcher)]) == 0
        out = capsys.readouterr().out
        data = json.loads(out)
        (u,) = data["unresolved"]
        assert u["expression"] == "${MODEL_ARGS[@]}" and "not read here" in u["why"]
        facts = data["unknown_model_facts"]
        assert "--num-experts" in facts["flags"] and "checkpoint" not in facts["why"]
        assert "s3cr3t" not in out
