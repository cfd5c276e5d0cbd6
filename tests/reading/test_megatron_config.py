"""slime's `--megatron-config-path` (per-role PPO overrides, reading/roles.py), judged as slime
624b824 applies it: utils/arguments.py parse_megatron_role_args and
_apply_megatron_role_overrides, ray/placement_group.py create_actor_model and
create_training_models. Fixtures in slime's style: tests/fixtures/stack/megatron-config/ (the
script is scripts/run-qwen3-4B.sh with PPO; ppo.yaml is tests/test_qwen3_4B_ppo.py's YAML).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile import clean
from support import FIXTURES

from miles_topology.judging.check_script import check_script
from miles_topology.model.errors import Location
from miles_topology.reading import gate
from miles_topology.reading.channels import read_channels
from miles_topology.reading.sources import written_name

FIX = FIXTURES / "stack" / "megatron-config"
RUN = str(FIX / "run-qwen3-4B-ppo.sh")
SLIME = "python3 /root/slime/train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 " \
        "--colocate --num-layers 4 --tensor-model-parallel-size 2 --advantage-estimator ppo"
SECRET = "fake-secret-roles-0123456789"


def judge(config: str, estimator: str = "ppo"):
    return check_script(RUN, {"CONFIG": config, "ESTIMATOR": estimator})


def codes(v, kind="errors"):
    return [p.code for p in getattr(v, kind)]


def ours(v) -> list[tuple[str, str]]:
    return [(p.code, p.severity) for p in v.problems if p.code.startswith("megatron-config")]


# ---- what slime's CI runs --------------------------------------------------------------------


def test_slime_ci_role_yaml_passes_and_is_read_only_under_slime():
    v = judge("ppo.yaml")  # tests/test_qwen3_4B_ppo.py's YAML: lr per role, topology on the CLI
    assert v.ok and ours(v) == [] and v.summary["tp"] == 2
    broken = str(FIX / "legacy.yaml")
    pairs = [("--advantage-estimator", "ppo", None), ("--megatron-config-path", broken, None)]
    assert [p.code for p in read_channels(pairs, framework="slime")[0]] == \
        ["megatron-config-structure"]
    assert read_channels(pairs, framework="miles") == ([], [])  # miles' parser refuses the flag


# ---- the actor's overrides are the actor's layout --------------------------------------------


def test_an_actor_size_is_the_judged_layout_with_its_yaml_line_as_source():
    v = judge("actor-tp.yaml", "grpo")
    assert v.ok and v.summary["tp"] == 4 and v.summary["dp"] == 2
    got = v.extra["values"]["--tensor-model-parallel-size"]
    assert got["value"] == "4" and got["source"].endswith("actor-tp.yaml:6")
    assert got["overridden"][0]["value"] == "2"
    (w,) = v.warnings  # no flag-given-twice: the YAML sets an attribute, not a second flag
    assert w.code == "megatron-config-topology" and w.location.line == 6
    assert "--tensor-model-parallel-size 4 on the command line" in w.fix


def test_a_role_virtual_pipeline_size_does_nothing():
    # validate_args derived virtual_pipeline_model_parallel_size from the command line (pp 1:
    # none) before the override; initialize.py and get_model read that, not the override
    v = judge("actor-vpp.yaml", "grpo")
    assert v.ok and ours(v) == [("megatron-config-topology", "warning")]
    assert "does nothing" in v.warnings[0].message and v.summary.get("vpp") in (None, 1)
    assert "vpp-requires-pp" not in codes(v)  # judged on a vpp that never runs, before


def test_an_actor_size_megatron_refuses_is_an_error_at_its_yaml_line():
    v = judge("actor-tp-bad.yaml", "grpo")  # tensor_model_parallel_size: "3", coerced to int
    grid = next(p for p in v.errors if p.code == "dense-grid-divisibility")
    assert grid.location.path.endswith("actor-tp-bad.yaml") and grid.location.line == 5
    assert v.summary["tp"] == 3


# ---- sequence parallel: validate_args ran before the overrides -------------------------------

SP_ERROR = "megatron-config-sp-without-tp"


@pytest.mark.parametrize("config, env, lines", [
    ("actor-tp1.yaml", {"ESTIMATOR": "grpo"}, [5]),  # tp 1 under the CLI's validated SP
    ("actor-sp.yaml", {"TP": "1"}, [5, 9]),  # sp on at the CLI's tp 1; critic: bool("false")
])
def test_sp_a_role_leaves_on_at_tp_1_is_an_error_not_dropped(config, env, lines):
    v = check_script(RUN, {"CONFIG": config, **env})
    assert [(p.code, p.location.line) for p in v.errors] == [(SP_ERROR, n) for n in lines]
    assert "Cannot use sequence parallelism without tensor parallelism" in v.errors[0].message
    assert "sp-ignored" not in codes(v, "warnings")  # not "Megatron drops it"
    assert v.summary["tp"] == 1


def test_sp_overrides_megatron_accepts_are_no_error():
    assert check_script(RUN, {"CONFIG": "actor-sp.yaml", "ESTIMATOR": "grpo"}).ok  # tp 2
    v = check_script(RUN, {"CONFIG": "actor-tp1.yaml", "ESTIMATOR": "grpo", "TP": "1"})
    assert v.ok and "sp-ignored" in codes(v, "warnings")  # validate_args dropped the CLI's


def test_a_critic_sp_error_leaves_the_actors_sp_ignored():
    v = check_script(RUN, {"CONFIG": "critic-sp.yaml", "TP": "1"})
    assert [(p.code, p.location.line) for p in v.errors] == [(SP_ERROR, 9)]
    assert "sp-ignored" in codes(v, "warnings")  # the actor's is the CLI's, dropped


def test_an_actor_tp_keeps_what_validate_args_derived_from_the_command_line(repo):
    (repo / "m.yaml").write_text("megatron:\n  - role: actor\n    overrides:\n"
                                 "      tensor_model_parallel_size: 2\n")
    pairs = [("--tensor-model-parallel-size", "1", None), ("--sequence-parallel", "", None),
             ("--megatron-config-path", "m.yaml", None)]
    problems, words = _channels(pairs, (repo / "m.yaml").read_text())
    assert [w.text for w in words] == ["--tensor-model-parallel-size", "2",
                                       "--sequence-parallel=false",
                                       "--expert-tensor-parallel-size", "1"]
    assert {w.source.line for w in words} == {4}
    moe = "--num-layers 4 --num-experts 8 --tensor-model-parallel-size 1 --sequence-parallel"
    (repo / "run.sh").write_text(f"{SLIME} --megatron-config-path m.yaml {moe}\n")
    v = check_script(str(repo / "run.sh"), {"ESTIMATOR": "grpo"})
    e = next(p for p in v.errors if p.code == "moe-tp-requires-sp")  # MoELayer.forward raises
    assert e.location.path.endswith("m.yaml") and e.location.line == 4
    assert v.summary["etp"] == 1 and v.summary["tp"] == 2
    (repo / "run.sh").write_text(f"{SLIME} {moe} --tensor-model-parallel-size 2\n")
    assert "moe-tp-requires-sp" not in codes(check_script(str(repo / "run.sh"), {}))


VIRTUAL = ("python3 /root/slime/train.py --actor-num-nodes 3 --actor-num-gpus-per-node 8 "
           "--colocate --num-layers 24 --pipeline-model-parallel-size 2 "
           "--advantage-estimator grpo --megatron-config-path m.yaml "
           "--num-layers-per-virtual-pipeline-stage {per}\n")


@pytest.mark.parametrize("per, pp, vpp, error", [
    (3, 3, 4, None),  # 8 layers a stage in the 4 chunks validate_args made (was an error)
    (3, 6, 4, None),  # 4 layers a stage, 4 chunks of 1 (was an error)
    (12, 4, 1, None),  # validate_args: 24 // 2 // 12 = 1, no virtual pipeline (was an error)
    (3, 4, None, "6 layers a stage, which do not split into the 4 virtual stages"),
    (5, 4, None, "the command line's 24 layers do not split"),  # validate_args fails first
])
def test_an_actor_pp_keeps_the_virtual_size_validate_args_derived(repo, per, pp, vpp, error):
    # Megatron-LM validate_args turned the command line's layers per virtual stage into
    # virtual_pipeline_model_parallel_size = 24 // 2 // per before slime's override of pp;
    # get_model builds that many chunks at the role's pp, get_num_layers_to_build asserts
    (repo / "m.yaml").write_text("megatron:\n  - role: actor\n    overrides:\n"
                                 f"      pipeline_model_parallel_size: {pp}\n")
    (repo / "run.sh").write_text(VIRTUAL.format(per=per))
    v = check_script(str(repo / "run.sh"), {})
    if error is None:
        assert v.ok and (v.summary["pp"], v.summary.get("vpp") or 1) == (pp, vpp), codes(v)
        return
    (e,) = [p for p in v.errors if error in p.message]
    assert e.code == "layers-not-divisible-by-pp"
    assert e.location.path.endswith("m.yaml" if per == 3 else "run.sh")


def test_an_actor_pp_with_a_virtual_pipeline_not_modelled_is_left_as_read(repo):
    # the embedding in the split (validate_args counts it as a layer): not modelled here; the
    # judged layout is the command line's with the actor's pp, as before
    (repo / "m.yaml").write_text("megatron:\n  - role: actor\n    overrides:\n"
                                 "      pipeline_model_parallel_size: 3\n")
    pairs = [("--num-layers", "24", None), ("--pipeline-model-parallel-size", "2", None),
             ("--num-layers-per-virtual-pipeline-stage", "3", None),
             ("--megatron-config-path", "m.yaml", None)]
    words = [w.text for w in _channels(pairs, (repo / "m.yaml").read_text())[1]]
    assert words == ["--pipeline-model-parallel-size", "3",
                     "--num-layers-per-virtual-pipeline-stage", "2"]
    embedding = pairs + [("--account-for-embedding-in-pipeline-split", "", None)]
    words = [w.text for w in _channels(embedding, (repo / "m.yaml").read_text())[1]]
    assert words == ["--pipeline-model-parallel-size", "3"]


# ---- actor and critic ------------------------------------------------------------------------


@pytest.mark.parametrize("config, line", [("critic-tp.yaml", 10), ("actor-tp.yaml", 6)])
def test_roles_on_other_dense_grids_are_an_error_with_a_critic(config, line):
    v = judge(config)
    (e,) = v.errors
    assert e.code == "megatron-config-roles-apart" and e.location.line == line
    assert "process_rollout_data" in e.message and "data-parallel rank" in e.message
    assert "megatron-config-roles-apart" not in codes(judge(config, "grpo"))  # no critic


def test_a_critic_expert_size_is_a_warning_not_an_error():
    v = judge("critic-ep.yaml")  # the dense grid (data and values) is the actor's
    assert v.ok and ours(v) == [("megatron-config-topology", "warning")]
    assert judge("critic-ep.yaml", "grpo").problems == []  # no critic: never read


@pytest.mark.parametrize("value, apart", [("1", True), ('"false"', True), ("false", False)])
def test_a_critic_order_is_read_for_truth_as_slime_sets_it(value, apart):
    # 1 is set as is, "false" coerced to bool("false"): both on (initialize.py: `if not
    # args.use_tp_pp_dp_mapping`), so the critic's ranks take another data-parallel rank
    pairs = [("--actor-num-nodes", "1", None), ("--actor-num-gpus-per-node", "8", None),
             ("--pipeline-model-parallel-size", "2", None),
             ("--advantage-estimator", "ppo", None), ("--megatron-config-path", "m.yaml", None)]
    problems, _ = _channels(pairs, "megatron:\n  - role: critic\n    overrides:\n"
                            f"      use_tp_pp_dp_mapping: {value}\n")
    assert ("megatron-config-roles-apart" in [p.code for p in problems if p.severity == "error"]
            ) is apart


def test_a_critic_grid_that_does_not_divide_the_world_is_an_error():
    pairs = [("--actor-num-nodes", "1", None), ("--actor-num-gpus-per-node", "8", None),
             ("--advantage-estimator", "ppo", None),
             ("--megatron-config-path", "m.yaml", None)]
    problems, words = _channels(pairs, "megatron:\n  - role: critic\n    overrides:\n"
                                "      pipeline_model_parallel_size: 3\n")
    assert words == [] and [p.code for p in problems if p.severity == "error"] == \
        ["megatron-config-roles-apart"]
    assert "RuntimeError" in next(p.message for p in problems if p.severity == "error")


# ---- resources, structure, unknown ----------------------------------------------------------


def test_resource_keys_are_ignored_with_a_warning():
    v = judge("resources.yaml")
    assert v.ok and ours(v) == [("megatron-config-resources", "warning")] * 2
    assert [w.location.line for w in v.warnings] == [5, 6] and v.summary["world_size"] == 8


@pytest.mark.parametrize("config, estimator, line", [
    ("legacy.yaml", "grpo", 2), ("two-actors.yaml", "grpo", 6), ("two-critics.yaml", "ppo", 6)])
def test_what_slime_asserts_on_is_an_error(config, estimator, line):
    v = judge(config, estimator)
    (e,) = v.errors
    assert e.code == "megatron-config-structure" and e.location.line == line
    assert "parse_megatron_role_args" in e.message


def test_a_critic_entry_is_read_only_when_a_critic_runs():
    assert judge("two-critics.yaml", "grpo").problems == []
    pairs = [("--advantage-estimator", None, None),
             ("--megatron-config-path", str(FIX / "two-critics.yaml"), None)]
    (p,) = read_channels(pairs, framework="slime")[0]
    assert (p.code, p.severity) == ("megatron-config-structure", "skipped")


def test_an_unknown_or_absent_file_is_skipped_never_defaults():
    v = judge("absent.yaml")
    assert v.ok and ours(v) == [("megatron-config-unread", "skipped")]
    (p,) = read_channels([("--megatron-config-path", None, None)], framework="slime")[0]
    assert (p.code, p.severity) == ("megatron-config-unread", "skipped")
    # slime's PPO CI tests write it to a NamedTemporaryFile inside the launcher's sandbox
    written = "/tmp/miles-topology-launcher-x1/work/tmpab12.yaml"
    (p,) = read_channels([("--advantage-estimator", "ppo", None),
                          ("--megatron-config-path", written, None)], framework="slime")[0]
    assert p.severity == "skipped" and "the launcher writes when it runs" in p.message


def test_two_written_yamls_of_one_basename_keep_their_own_names_and_launcher_lines():
    # a launcher writes a/cfg.yaml (--custom-config-path) and b/cfg.yaml
    # (--megatron-config-path): each finding names its own file and points at the line that
    # passed it (read_channels maps back by sources.written_name, once the basename alone)
    work = "/tmp/miles-topology-launcher-x1/work/"
    custom, roles = work + "a/cfg.yaml", work + "b/cfg.yaml"
    written = {custom: {"text": "tensor_model_parallel_size: 4\n"},
               roles: {"text": "megatron:\n  - name: default\n    role: actor\n    overrides:\n"
                               "      tensor_model_parallel_size: 4\n"}}
    pairs = [("--custom-config-path", custom, Location("l.py", 10)),
             ("--megatron-config-path", roles, Location("l.py", 20))]
    problems, _ = read_channels(pairs, framework="slime", written=written)
    got = {p.code: (p.location.line, p.message) for p in problems}
    assert got["custom-config-layout"][0] == 10 and got["megatron-config-topology"][0] == 20
    assert "<written by the launcher: a/cfg.yaml>:1" in got["custom-config-layout"][1]
    assert "<written by the launcher: b/cfg.yaml>:5" in got["megatron-config-topology"][1]
    # one file of its basename keeps the basename alone
    assert written_name(custom, [custom, work + "b/other.yaml"]) == \
        "<written by the launcher: cfg.yaml>"


# ---- hostile input ---------------------------------------------------------------------------


def _channels(pairs, text: str, tmp: Path | None = None):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, "m.yaml").write_text(text)
        with gate.checking(Path(d, "run.sh")):
            return read_channels(pairs, [d], framework="slime")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"megatron: [{{role: actor, overrides: {{x: {SECRET}}}}}]\n")
    repo = home / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(repo)
    gate._root_of_folder.cache_clear()
    return repo


def _check(repo: Path, cfg: str, *fmt: str) -> tuple[int, str]:
    (repo / "run.sh").write_text(f"{SLIME} --megatron-config-path '{cfg}'\n")
    out = subprocess.run([sys.executable, "-m", "miles_topology", "check", *fmt,
                          str(repo / "run.sh")], capture_output=True, text=True, timeout=60,
                         cwd=repo, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "Traceback" not in out.stderr
    return out.returncode, out.stdout + out.stderr


def test_a_link_out_of_the_checkout_is_not_read(repo):
    (repo / "m.yaml").symlink_to(repo.parent.parent / ".netrc")
    code, out = _check(repo, "m.yaml", "--format", "json")
    (v,) = json.loads(out) if out.startswith("[") else [json.loads(out)]
    assert SECRET not in out and code == 0
    assert [s["code"] for s in v["skipped"]] == ["megatron-config-unread"]
    assert "outside the input's checkout" in v["skipped"][0]["message"]
    (repo / "m.yaml").unlink()  # the twin: the same YAML inside the checkout is read
    (repo / "m.yaml").write_text("megatron:\n  - role: actor\n    overrides: {num_nodes: 2}\n")
    code, out = _check(repo, "m.yaml", "--format", "json")
    assert "megatron-config-resources" in out and "megatron-config-unread" not in out


def test_a_hostile_file_name_is_escaped_in_every_format(repo):
    name = "m\x1b[2J\n::error::pwned\u202e.yaml"
    (repo / name).write_text("critic: {}\n")  # no `megatron` list: the error names the file
    for fmt in ("text", "github", "concise"):
        code, out = _check(repo, name.replace("'", ""), "--output-format", fmt)
        assert code == 1 and "megatron-config-structure" in out
        clean(out, commands=fmt == "github")
        assert "\n::error::pwned" not in out


def test_a_yaml_bomb_a_deep_and_a_huge_file_are_bounded(repo):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (repo / "bomb.yaml").write_text(bomb + "megatron:\n  - role: actor\n    overrides:\n"
                                    "      tensor_model_parallel_size: *i\n      lr: *i\n")
    (repo / "deep.yaml").write_text("megatron: " + "[" * 100_000 + "\n")
    (repo / "huge.yaml").write_text("megatron: []\n" + "#" * (gate.AST_LIMIT + 1))
    t0 = time.monotonic()
    code, out = _check(repo, "bomb.yaml")  # 9**9 leaves if expanded: never walked
    assert time.monotonic() - t0 < 30 and "megatron-config-topology" in out
    assert "tensor_model_parallel_size: list" in out
    for cfg, why in (("deep.yaml", "nests its collections too deeply"), ("huge.yaml", "KiB")):
        code, out = _check(repo, cfg)
        assert code == 0 and "megatron-config-unread" in out and why in out, out


# ---- against slime's own functions, where a checkout of slime 624b824 is at hand -------------

SLIME_CHECKOUT = Path(os.environ.get("SLIME_CHECKOUT", "/tmp/up/THUDM+slime"))


def slime_role_args():
    """slime's parse_megatron_role_args and _apply_megatron_role_overrides, taken from its
    utils/arguments.py with `ast` and run alone (the module imports torch, Ray and Megatron)."""
    import ast
    import copy
    import logging
    import types

    import yaml

    src = SLIME_CHECKOUT / "slime" / "utils" / "arguments.py"
    if not src.is_file():
        pytest.skip("no slime checkout (SLIME_CHECKOUT)")
    tree = ast.parse(src.read_text())
    keep = {"parse_megatron_role_args", "_apply_megatron_role_overrides"}
    mod = ast.Module([n for n in tree.body if isinstance(n, ast.FunctionDef)
                      and n.name in keep], [])
    ns = {"copy": copy, "yaml": yaml, "logger": logging.getLogger("slime")}
    exec(compile(mod, str(src), "exec"), ns)  # noqa: S102 (upstream's own code, a test)
    return lambda path, role: ns["parse_megatron_role_args"](
        types.SimpleNamespace(tensor_model_parallel_size=2, lr=1e-6, kl_coef=0.0,
                              sequence_parallel=False, use_opd=False,
                              custom_advantage_function_path=None,
                              untie_embeddings_and_output_weights=False), str(path), role)


@pytest.mark.parametrize("config", sorted(p.name for p in FIX.glob("*.yaml")))
def test_slime_fails_exactly_where_the_structure_is_an_error(config):
    parse = slime_role_args()
    reported = {p.code for p in judge(config).errors}  # with a critic: both roles read
    try:
        actor = parse(FIX / config, "actor")
        parse(FIX / config, "critic")
    except (AssertionError, AttributeError, TypeError):
        assert "megatron-config-structure" in reported
        return
    assert "megatron-config-structure" not in reported
    assert judge(config, "grpo").summary["tp"] == actor.tensor_model_parallel_size


def test_slime_sets_a_string_sp_override_true():
    parse = slime_role_args()  # the critic's `sequence_parallel: "false"`: bool("false")
    assert parse(FIX / "actor-sp.yaml", "critic").sequence_parallel is True
