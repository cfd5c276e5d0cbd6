"""The `miles-topology` CLI: exit codes, JSON form, no traceback, light import."""

import json
import subprocess
import sys
import time

import pytest
from support import ROOT, SCRIPTS, STEP_FIXTURES

from miles_topology.cli import main
from miles_topology.reading.sources import to_yaml

BAD = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--tensor-model-parallel-size",
       "2", "--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "8",
       "--expert-tensor-parallel-size", "1", "--num-experts", "64", "--colocate"]
GOOD = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--tensor-model-parallel-size",
        "2", "--sequence-parallel", "--expert-model-parallel-size", "2", "--num-experts", "8",
        "--num-attention-heads", "8", "--colocate", "--num-gpus-per-node", "4"]


def run(*argv):
    return subprocess.run([sys.executable, "-m", "miles_topology.cli", *argv],
                          capture_output=True, text=True, timeout=60)


def test_invalid_json_exit_1_with_fix_naming_ep_4_and_2_nodes():
    out = run("check", "--format", "json", "--", *BAD)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is False
    # the grid does not form, yet the sizes the user gave and the world size are reported
    assert "dp" not in data["topology"] and data["topology"]["world_size"] == 8
    assert data["topology"]["ep"] == 8 and data["topology"]["nodes"] == 1
    err = next(e for e in data["errors"] if e["code"] == "expert-grid-divisibility")
    assert "--expert-model-parallel-size" in err["flags"]
    assert "4" in err["fix"].split("--expert-model-parallel-size")[1].split(",")[0]
    assert "2 nodes" in err["fix"]


def test_valid_text_reports_sizes_and_etp_warning():
    out = run("check", "--", *GOOD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "world 8, dp 4, edp 2" in out.stdout
    assert "etp-implied" in out.stdout and "etp = tp = 2" in out.stdout


def test_valid_json(capsys):
    assert main(["check", "--format", "json", "--", *GOOD]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert (data["topology"]["world_size"], data["topology"]["dp"], data["topology"]["edp"]) == (
        8, 4, 2)
    assert [w["code"] for w in data["warnings"]] == ["etp-implied"]
    assert set(data["warnings"][0]) == {"code", "message", "fix", "flags"}


@pytest.mark.parametrize("argv", [
    ["check", "missing.yaml"], ["check"], ["bogus"], ["check", "--format", "xml", "--", "--x"],
    ["check", "--env", "NOEQUALS", "--", "--colocate"],
])
def test_unreadable_or_usage_exit_2_without_traceback(argv):
    out = run(*argv)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    assert out.stderr.startswith("miles-topology:")


def test_bad_yaml_exit_2(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: [1\n")
    out = run("check", str(path))
    assert out.returncode == 2 and "cannot read the topology YAML" in out.stderr
    assert "Traceback" not in out.stderr


def test_yaml_check(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 2\ngpus_per_node: 4\nep: 3\nexperts: 8\ncolocate: true\n")
    out = run("check", str(path))
    assert out.returncode == 1 and "expert-grid-divisibility" in out.stdout


def test_show_map_and_svg(tmp_path, capsys):
    svg = tmp_path / "map.svg"
    argv = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--colocate",
            "--expert-model-parallel-size", "2", "--num-experts", "8",
            "--rollout-num-gpus-per-engine", "2"]
    assert main(["show", "--svg", str(svg), "--", *argv]) == 0
    text = capsys.readouterr().out
    assert "node 1" in text and "etp0 ep1 edp0" in text and "e4-7" in text
    assert "engine 3" in text
    body = svg.read_text()
    assert body.startswith("<svg") and body.count('rx="6"') == 8 and "engine 3" in body


def test_import_stays_light_and_check_is_fast():
    code = ("import sys, miles_topology, miles_topology.cli; "
            "assert not {'torch','ray','megatron','numpy'} & "
            "set(m.split('.')[0] for m in sys.modules), sorted(sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
    start = time.perf_counter()
    out = run("check", "--", *GOOD)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0
    assert elapsed < 2.0, elapsed  # whole interpreter start included; measured ~0.3 s


# ---- ecosystem conventions ----------------------------------------------------------



def test_version_and_python_m_package():
    from miles_topology import __version__

    out = subprocess.run([sys.executable, "-m", "miles_topology", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"miles-topology {__version__}"
    out = subprocess.run([sys.executable, "-m", "miles_topology", "check", "--", *BAD],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "expert-grid-divisibility" in out.stdout


def test_the_command_ends_after_exit_handlers_and_flushed_output():
    """`run` (the console script, `python -m`) ends the process without the interpreter's
    teardown: exit handlers still run (confine's private folder), the report is whole, the
    exit code is main's."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
            "from miles_topology.cli import run\n"
            "sys.argv = ['miles-topology', *sys.argv[1:]]\n"
            "run()\n"
            "print('not reached')\n")
    out = subprocess.run([sys.executable, "-c", code, "check", "--format", "json", "--",
                          *BAD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "not reached" not in out.stdout
    assert json.loads(out.stdout)["errors"]  # whole: the buffered report was flushed
    assert out.stderr.strip() == "exit handler ran"
    out = subprocess.run([sys.executable, "-c", code, "check", "--no-such-option"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "exit handler ran" in out.stderr


@pytest.mark.parametrize("cmd", ["check", "show", "migrate", "schema"])
def test_help_has_a_line_per_option_and_examples(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    text = capsys.readouterr().out
    assert "examples:" in text and f"miles-topology {cmd}" in text.split("examples:")[1]
    options = {"check": ["--format", "--env"], "show": ["--svg", "--env"],
               "migrate": ["--write", "--check", "--inline", "--env"], "schema": []}[cmd]
    for opt in options:  # each option is listed with a help text on its line
        line = next(x for x in text.splitlines() if x.strip().startswith(opt))
        assert len(line.split(None, 2)) == 3, line
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert all(c in top for c in ("check", "show", "migrate", "schema", "--version"))


def test_schema_validates_every_example_and_rejects_a_bad_one(tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from omegaconf import OmegaConf

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "etp_implied" not in schema["properties"] and "world_size" not in schema["properties"]
    assert schema["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    examples = sorted((ROOT / "examples").glob("*.yaml")) + \
        sorted(STEP_FIXTURES.rglob("*.topology.yaml"))
    assert examples
    for path in examples:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        assert not list(validator.iter_errors(data)), path
    for bad in ({"tp": 0}, {"tensor_parallel": 2}, {"order": "dp-tp"}, {"colocate": "yes"}):
        assert list(validator.iter_errors(bad)), bad
    assert (ROOT / "docs" / "topology.schema.json").read_text() == json.dumps(schema, indent=2) \
        + "\n", "docs/topology.schema.json is stale: miles-topology schema > it"


def test_written_yaml_carries_the_schema_comment(tmp_path):
    from miles_topology import Topology
    from miles_topology.reading.sources import schema_comment

    topo = Topology(nodes=1, gpus_per_node=8, tp=2, colocate=True)
    assert to_yaml(topo).splitlines()[0] == schema_comment()
    assert schema_comment().startswith("# yaml-language-server: $schema=")


def test_github_format_points_at_the_file_and_line(capsys):
    path = str(SCRIPTS / "err-expert-grid.sh")
    assert main(["check", "--format", "github", path]) == 1
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if "title=expert-grid-divisibility" in x)
    # --expert-model-parallel-size 16 is written on line 8 of the fixture
    want, col = next((i, t.index("--expert-model-parallel-size") + 1)
                     for i, t in enumerate(open(path), 1) if "--expert-model-parallel-size" in t)
    assert col == 4  # the flag, after the array's indentation
    assert line.startswith(
        f"::error file={path},line={want},col={col},title=expert-grid-divisibility::")
    assert "%25" in line and "\n" not in line  # '%' escaped as GitHub requires


def test_github_format_for_yaml_points_at_the_key(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 1\ngpus_per_node: 8\ncolocate: true\ntp: 3\n")
    assert main(["check", "--format", "github", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"::error file={path},line=4,col=1,title=dense-grid-divisibility::" in out


def test_sarif_format_is_2_1_0_with_rules_and_regions(capsys):
    path = str(SCRIPTS / "err-expert-grid.sh")
    assert main(["check", "--format", "sarif", path, str(SCRIPTS / "flag-given-twice.sh")]) == 1
    log = json.loads(capsys.readouterr().out)
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    (run_,) = log["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(dict.fromkeys(r["ruleId"] for r in run_["results"]))
    for res in run_["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note")
    err = next(r for r in run_["results"] if r["ruleId"] == "expert-grid-divisibility")
    loc = err["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == path and loc["region"]["startLine"] == 8


def test_batch_reports_every_file_and_an_unreadable_one_exits_2(tmp_path, capsys):
    missing = str(tmp_path / "nope.sh")
    good = str(SCRIPTS / "run-qwen3-4B.sh")
    assert main(["check", "--verbose", missing, good]) == 2
    out = capsys.readouterr().out
    assert f"{missing}: UNREADABLE:" in out and f"{good}: OK" in out and "1 unreadable" in out
    assert main(["check", "--format", "json", missing, good]) == 2
    data = json.loads(capsys.readouterr().out)
    assert [d["path"] for d in data] == [missing, good]
    assert "unreadable" in data[0] and data[1]["ok"] is True
    assert main(["check", "--format", "github", missing, good]) == 2
    assert f"::error file={missing},title=unreadable::" in capsys.readouterr().out


def test_broken_pipe_exits_quietly():
    scripts = [str(p) for p in sorted(SCRIPTS.glob("*.sh"))] * 5
    cmd = [sys.executable, "-m", "miles_topology", "check", *scripts]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert err == ""


def test_show_svg_to_a_bad_path_is_a_clear_exit_2(tmp_path, capsys):
    bad = tmp_path / "no" / "such" / "dir" / "map.svg"
    assert main(["show", "--svg", str(bad), "--", *GOOD]) == 2
    err = capsys.readouterr().err
    assert f"--svg {bad}: cannot write" in err and "Traceback" not in err


def test_core_imports_nothing_from_the_cli_or_the_migrations():
    import ast

    pkg = ROOT / "miles_topology"
    roots = {"cli", "migrations", "__main__", "fix"}  # fix.py: check --fix, on migrate's writer
    for path in pkg.glob("*.py"):
        if path.stem in roots:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = (node.module or "").split(".")[0]
                names = {a.name for a in node.names}
                assert not (node.level and (mod in roots or roots & names)), (path, mod)
                assert mod != "miles_topology" or not roots & set(
                    (node.module or "").split(".")[1:2]), path
    for path in (ROOT / "miles_topology" / "migrations").glob("*.py"):
        assert "cli" not in {a.name for n in ast.walk(ast.parse(path.read_text()))
                             if isinstance(n, ast.ImportFrom) for a in n.names}, path
        assert "argparse" not in path.read_text(), path


def _mixed_folder(tmp_path):
    """A folder of a bash script, a Python launcher (with its helper), a YAML, a broken one."""
    import shutil

    launchers = SCRIPTS.parent / "launchers"
    shutil.copy(SCRIPTS / "err-expert-grid.sh", tmp_path / "a.sh")
    shutil.copytree(SCRIPTS / "models", tmp_path / "models")
    shutil.copy(launchers / "run_moe_argparse.py", tmp_path / "b.py")
    (tmp_path / "c.yaml").write_text("nodes: 1\ngpus_per_node: 8\ncolocate: true\ntp: 2\n")
    (tmp_path / "d.sh").write_text("X=(\npython3 train.py\n")  # a launch bash cannot parse
    (tmp_path / "notes.txt").write_text("not an input\n")
    return launchers


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_a_folder_of_mixed_inputs_is_a_batch_in_every_format(tmp_path, capsys, monkeypatch, fmt):
    launchers = _mixed_folder(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(launchers))  # the launcher's helper module
    verbose = ["--verbose"] if fmt == "text" else []
    assert main(["check", "--format", fmt, *verbose, str(tmp_path)]) == 2  # d.sh: unreadable
    out = capsys.readouterr().out
    names = ["a.sh", "b.py", "c.yaml", "d.sh"]
    if fmt == "json":
        data = json.loads(out)
        assert [d["path"] for d in data] == [str(tmp_path / n) for n in names]
        assert [d.get("unreadable") is None for d in data] == [True, True, True, False]
        assert [d["ok"] for d in data] == [False, True, True, False]
        assert data[1]["launcher"] == "ray job submit" and data[1]["topology"]["world_size"] == 16
    elif fmt == "text":
        for n, state in zip(names, ["INVALID", "OK", "OK", "UNREADABLE"]):
            assert f"{tmp_path / n}: {state}" in out
        assert "4 inputs: 2 valid, 1 invalid, 1 unreadable" in out
    elif fmt == "github":
        assert f"::error file={tmp_path / 'a.sh'},line=" in out
        assert f"::error file={tmp_path / 'd.sh'},title=unreadable::" in out
    else:
        uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
                for r in json.loads(out)["runs"][0]["results"] for loc in r["locations"]}
        assert {str(tmp_path / "a.sh"), str(tmp_path / "d.sh")} <= uris
    assert "notes.txt" not in out and f"{tmp_path / 'models'}:" not in out


def test_a_folder_with_nothing_to_check_passes_with_a_warning(tmp_path, capsys):
    """As ruff with no Python file under a path: a warning, exit 0."""
    (tmp_path / "setup-env.sh").write_text("export A=1\n")
    assert main(["check", str(tmp_path)]) == 0
    got = capsys.readouterr()
    assert "no launch script" in got.err
    assert "0 inputs; 1 other file skipped (1 no training launch)" in got.out
