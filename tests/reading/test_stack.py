"""Know the user's own stack: slime vs miles, forks, user functions' add_arguments, other
versions, YAML channels; an error only where the real parser refuses.

The real parsers cannot run here: miles and slime import torch.distributed, Ray, SGLang and
Megatron-LM's `megatron.training`, which the megatron-core wheel installed here does not ship
(only `megatron/core`). So `test_real_argparse_*` build miles' parser as upstream composes it
(surface.parser: argparse with Megatron's allow_abbrev=False, from the bundled surface) and
call the fixtures' own `add_arguments` on it, as miles' add_user_provided_function_arguments
does, then parse the launch's real argv: argparse itself confirms each verdict.
"""

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import FIXTURES, ROOT

from miles_topology.judging.check_script import check_script
from miles_topology.reading import stack, surface
from miles_topology.reading.flags import parse_flags
from miles_topology.shell import read_script

FIX = FIXTURES / "stack"
AGENT = FIX / "agent-project"
FORK = FIX / "slime-fork"


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MILES_TOPOLOGY_CACHE", str(tmp_path / "cache"))
    stack._base.cache_clear()
    yield tmp_path / "cache"
    stack._base.cache_clear()


def codes(v, kind="errors"):
    return [p.code for p in getattr(v, kind)]


def real_parser(plugin: str | None = None) -> argparse.ArgumentParser:
    """miles' parser from the bundled surface, plus a plugin's own add_arguments, run."""
    p = surface.parser()
    if plugin is not None:
        sys.path.insert(0, str(AGENT))
        try:
            mod, _, attr = plugin.rpartition(".")
            getattr(importlib.import_module(mod), attr).add_arguments(p)
        finally:
            sys.path.remove(str(AGENT))
    return p


def argv_of(path: Path, env=None) -> list[str]:
    return read_script(path, env or {}).flags()


# ---- user functions' add_arguments -------------------------------------------------------


def test_plugin_flags_are_read_from_the_function_the_launch_names():
    v = check_script(str(AGENT / "scripts" / "run-agent.sh"), {})
    assert v.ok and not v.warnings and not v.skipped, [str(p) for p in v.errors + v.skipped]


def test_real_argparse_accepts_the_plugin_flags_and_refuses_the_near_miss():
    p = real_parser("agent_rollout.generate.generate")
    p.parse_args(argv_of(AGENT / "scripts" / "run-agent.sh"))
    with pytest.raises(SystemExit):
        p.parse_args(argv_of(AGENT / "scripts" / "run-agent-typo.sh"))
    with pytest.raises(SystemExit):  # without the function's add_arguments, refused too
        real_parser().parse_args(argv_of(AGENT / "scripts" / "run-agent.sh"))


def test_a_near_miss_of_a_plugin_flag_is_an_error_with_did_you_mean():
    v = check_script(str(AGENT / "scripts" / "run-agent-typo.sh"), {})
    (p,) = v.errors
    assert p.code == "unknown-flag" and "did you mean --agent-max-turns?" in p.message


@pytest.mark.parametrize("script", ["run-agent-unread.sh", "run-agent-missing.sh"])
def test_an_unreadable_function_makes_its_flags_skipped_not_errors(script):
    v = check_script(str(AGENT / "scripts" / script), {})
    assert v.ok
    assert codes(v, "skipped") == ["unverified-flag"] * 3
    assert "add_arguments" in v.skipped[0].message


def test_miles_own_generate_functions_are_bundled():
    # miles' generate_hub adds --max-seq-len / --custom-agent-function-path (issue 28)
    got = parse_flags(["--max-seq-len", "4096"])
    assert codes(got) == ["unknown-flag"]
    st = stack.with_functions(stack.BUNDLED, [(
        "--custom-generate-function-path",
        "miles.rollout.generate_hub.agentic_tool_call.generate")])
    with stack.using(st):
        assert parse_flags(["--max-seq-len", "4096", "--custom-agent-function-path",
                            "a.b"]).errors == []


# ---- slime, forks, --stack ---------------------------------------------------------------


def test_a_slime_script_is_checked_against_slime():
    v = check_script(str(FIX / "run-slime-image.sh"), {})
    assert v.ok and not v.warnings, [str(p) for p in v.errors + v.warnings]
    assert v.extra["stack"].startswith("THUDM/slime")


def test_a_function_path_under_slime_makes_a_bare_train_py_slime_s(tmp_path):
    # `python3 train.py` names no framework; `--custom-rm-path slime.x.f` is imported by the
    # job's load_function, so slime is installed there: its parser drops a flag it lacks
    head = ("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
            "--num-layers 4 ")
    run = tmp_path / "run.sh"
    run.write_text(head + "--my-own-flag 1 --custom-rm-path slime.rollout.rm_hub.f\n")
    v = check_script(str(run), {})
    assert v.extra["stack"].startswith("THUDM/slime")
    assert [p.code for p in v.errors] == [] and "ignored-flag" in [p.code for p in v.warnings]
    # a miles path, or none: miles' parser refuses it
    for tail in ("--custom-rm-path miles.rollout.rm_hub.f\n", "\n"):
        run.write_text(head + "--my-own-flag 1 " + tail)
        assert [p.code for p in check_script(str(run), {}).errors] == ["unknown-flag"]
    assert stack.named_frameworks([("--a-path", "slime.x.f"), ("--b-path", "miles.y.g")]) == ()


def test_a_list_of_function_paths_under_slime_makes_train_py_slime_s(tmp_path):
    # a slime fork's `--slime-router-middleware-paths slime.router.x.M` (nargs="+", each
    # loaded with load_function): slime is what runs, not miles (held-out: a slime fork's
    # --use-slime-router was miles' unknown-flag)
    run = tmp_path / "run.sh"
    run.write_text("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                   "--colocate --num-layers 4 --use-my-router "
                   "--my-router-middleware-paths slime.router.mw.A slime.router.mw.B\n")
    v = check_script(str(run), {})
    assert v.extra["stack"].startswith("THUDM/slime")
    assert [p.code for p in v.errors] == [], [str(p) for p in v.errors]
    assert stack.named_frameworks([("--x-paths", "miles.a.f slime.b.g")]) == ()


@pytest.mark.parametrize("framework, codes", [("slime", ([], ["ignored-flag"])),
                                               ("miles", (["unknown-flag"], []))])
def test_a_model_file_sourced_from_the_machines_checkout_names_its_framework(
        tmp_path, framework, codes):
    # `source /root/slime/scripts/models/M.sh`: the job's machine holds slime's checkout, as
    # `/root/slime/train.py` says (held-out: a slime fork's bare train.py with its own flags)
    run = tmp_path / "run.sh"
    run.write_text(f"source /root/{framework}/scripts/models/m.sh\n"
                   "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                   "--colocate --num-layers 4 --my-own-flag 1\n")
    v = check_script(str(run), {})
    assert v.extra["stack"].startswith("THUDM/slime" if framework == "slime" else "radixark")
    assert ([p.code for p in v.errors], [p.code for p in v.warnings]) == codes


def test_a_fork_is_checked_against_its_own_parser():
    v = check_script(str(FORK / "scripts" / "run-qwen3-4B-prm.sh"), {})
    assert v.ok and not v.warnings, [str(p) for p in v.errors + v.warnings]
    assert str(FORK) in v.extra["stack"]
    typo = check_script(str(FORK / "scripts" / "run-qwen3-4B-prm-typo.sh"), {})
    (p,) = typo.errors
    assert p.code == "unknown-flag" and "did you mean --prm-enable?" in p.message


FIELD_LOOP = '''import argparse
import dataclasses
from dataclasses import dataclass


@dataclass
class FSDPArgs:
    gradient_checkpointing: bool = False
    fsdp_shard_groups: int | None = None


def parse_fsdp_cli():
    parser = argparse.ArgumentParser()
    for f in dataclasses.fields(FSDPArgs):
        if f.type is bool:
            parser.add_argument(f"--{f.name.replace('_', '-')}", action="store_true")
        else:
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=str)
    return parser.parse_args()
'''


def test_a_fork_s_flags_from_a_loop_over_dataclass_fields(tmp_path):
    # slime's FSDP backend before it dropped FSDP (as miles' fsdp_utils/arguments.py
    # parse_fsdp_cli): one flag a field of FSDPArgs, a bool one a switch
    fork = tmp_path / "fork"
    shutil.copytree(FORK, fork)
    (fork / "slime" / "backends" / "fsdp_utils").mkdir(parents=True)
    (fork / "slime" / "backends" / "fsdp_utils" / "arguments.py").write_text(FIELD_LOOP)
    got = stack.for_launch(str(fork / "scripts" / "x.sh"), None, [])
    assert got.flag("--gradient-checkpointing").nargs == 0
    assert got.flag("--fsdp-shard-groups").takes_value
    assert got.flag("--fsdp-shard_groups") is None and got.other("--gradient-checkpointing") is None


def test_the_fork_s_flags_are_cached_per_version(tmp_path, tmp_cache):
    fork = tmp_path / "fork"
    shutil.copytree(FORK, fork)
    first = stack.for_launch(str(fork / "scripts" / "x.sh"), None, [])
    assert first.flag("--prm-enable") is not None and list(tmp_cache.glob("flags-slime-*"))
    args = fork / "slime" / "utils" / "arguments.py"
    args.write_text(args.read_text().replace("--prm-model-path", "--prm-model-dir"))
    stack._base.cache_clear()
    again = stack.for_launch(str(fork / "scripts" / "x.sh"), None, [])
    assert again.flag("--prm-model-dir") is not None and again.flag("--prm-model-path") is None
    assert len(list(tmp_cache.glob("flags-slime-*"))) == 2


def test_stack_option_points_at_the_user_s_checkout(tmp_path, tmp_cache):
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
                      "--num-layers 4 --colocate --prm-enable\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MILES_TOPOLOGY_CACHE": str(tmp_cache)}

    def run(*extra):
        return subprocess.run([sys.executable, "-m", "miles_topology", "check", "--format",
                               "json", *extra, str(script)], capture_output=True, text=True,
                              env=env, timeout=120)
    plain, given = run(), run("--stack", str(FORK))
    assert plain.returncode == 1 and "unknown-flag" in plain.stdout
    assert given.returncode == 0, given.stdout + given.stderr
    assert "slime of" in json.loads(given.stdout)["stack"]
    bad = run("--stack", str(tmp_path))
    assert bad.returncode == 2 and "no miles/ or slime/" in bad.stderr


VLLM = FIX / "slime-vllm-fork"


def test_a_fork_under_its_own_package_name_reads_its_own_arguments(capsys):
    """The fork's train.py builds its parser from slime_vllm.utils.arguments, which imports its
    --vllm-* flags from its vLLM backend: read there, not judged against miles' surface."""
    from miles_topology.cli import main

    v = check_script(str(VLLM / "scripts" / "run-qwen3-4B-vllm.sh"), {})
    assert v.ok and not v.warnings, [str(p) for p in v.errors + v.warnings]
    assert "slime_vllm (a slime fork) of" in v.extra["stack"]
    st = stack.for_launch(str(VLLM / "scripts" / "x.sh"), str(VLLM / "train.py"), [])
    assert (st.framework, st.package) == ("slime", "slime_vllm") and st.drops_unknown
    assert st.flag("--vllm-max-num-seqs") is not None and st.flag("--vllm-max-seqs") is None
    # `--stack` of the fork is accepted (it has no miles/ or slime/ folder)
    assert main(["check", "--stack", str(VLLM), "--", "--actor-num-nodes", "1",
                 "--colocate", "--num-layers", "2", "--vllm-tensor-parallel-size", "2"]) == 0
    assert "ignored-flag" not in capsys.readouterr().out


def test_a_fork_s_own_validation_decides_the_ranges_of_its_values():
    """The fork's --critic-train-only takes --actor-num-nodes 0 (its slime_validate_args): our
    range (miles' actor needs a node) is not proven wrong there, so it is skipped."""
    v = check_script(str(VLLM / "scripts" / "run-qwen3-4B-critic-only.sh"), {})
    assert v.ok and not v.errors
    assert [p.code for p in v.skipped] == ["invalid-flag-value"]
    assert "slime_vllm's own validation decides" in v.skipped[0].message


def test_a_fork_under_slime_s_name_decides_ranges_once_its_own_flag_is_given(tmp_path):
    """A checkout's slime that adds --critic-train-only (held-out: a slime fork's critic-only
    PPO test launch with --actor-num-nodes 0): its own validation decides the range, as for a
    fork under its own name; without a flag of the fork's own the range refusal stands."""
    script = FORK / "scripts" / "run-qwen3-4B-critic-only.sh"
    v = check_script(str(script), {})
    assert v.ok and not v.errors
    assert sorted(p.flags[0] for p in v.skipped if p.code == "invalid-flag-value") == [
        "--actor-num-gpus-per-node", "--actor-num-nodes"]
    assert "which adds --critic-train-only, decides" in v.skipped[0].message
    plain = tmp_path / "scripts" / "run.sh"
    plain.parent.mkdir()
    plain.write_text(script.read_text().replace(" --critic-train-only", ""))
    (tmp_path / "train.py").write_text((FORK / "train.py").read_text())
    (tmp_path / "slime").symlink_to(FORK / "slime")
    v = check_script(str(plain), {})
    assert {p.code for p in v.errors} == {"invalid-flag-value"}


def test_another_program_s_train_py_is_not_judged_as_a_miles_launch():
    """A vendored Megatron-LM's examples/mimo/train.py builds Megatron's parser, not miles' or
    slime's: its launch has nothing to check (no unknown-flag --model-provider, no world)."""
    from miles_topology.model.errors import NoTrainingLaunch

    script = FIX / "vendored-megatron" / "Megatron-LM" / "examples" / "mimo" / "run.sh"
    with pytest.raises(NoTrainingLaunch, match="builds neither miles' nor slime's parser"):
        check_script(str(script), {})


def test_an_entry_python_cannot_parse_here_is_judged_as_its_name_says(tmp_path):
    (tmp_path / "train.py").write_text("print 'a python 2 file'\n")
    script = tmp_path / "run.sh"
    script.write_text("python3 ./train.py --num-layers 4 --colocate "
                      "--tensor-model-paralel-size 2\n")
    assert codes(check_script(str(script), {})) == ["unknown-flag"]


def test_a_torchrun_launch_of_a_miles_entry_has_torchrun_s_world(tmp_path):
    """torchrun starts nnodes x nproc_per_node ranks (torch/distributed/run.py; defaults 1
    and 1); the actor flags, when given, still say what miles places."""
    script = tmp_path / "run.sh"
    for opts, argv, world in (("--nproc_per_node 2 --nnodes=2", "", 4),
                              ("--nproc-per-node=2", "", 2),
                              ("--nproc_per_node 2", "--actor-num-gpus-per-node 4", 4),
                              ("--nproc_per_node $N", "", None),  # unknown stays unknown
                              ("--nproc_per_node $N", "--actor-num-gpus-per-node 4", 4)):
        script.write_text(f"torchrun {opts} \\\n  /root/miles/train.py --num-layers 4 "
                          f"--colocate {argv}\n")
        v = check_script(str(script), {})
        assert (v.summary or {}).get("world_size") == world, opts


# ---- versions ------------------------------------------------------------------------------


def test_a_flag_of_a_newer_sglang_warns_naming_it():
    v = check_script(str(FIX / "run-newer-sglang.sh"), {})
    assert v.ok and codes(v, "warnings") == ["flag-of-other-version"]
    assert "SGLang 0.5.23" in v.warnings[0].message


def test_slime_s_patched_megatron_flag_warns_on_miles_and_passes_on_slime():
    got = parse_flags(["--use-gated-attention"])
    assert not got.errors and "patched Megatron-LM" in got.warnings[0].message
    with stack.using(stack.Stack("slime")):
        assert parse_flags(["--use-gated-attention"]).warnings == []


def test_the_true_errors_of_upstream_s_own_scripts_stay_errors():
    # miles' Kimi-K2.5 LoRA example: nothing defines it; p2p run.py: one word with a space
    assert codes(parse_flags(["--filter-zero-reward-samples"])) == ["unknown-flag"]
    (p,) = parse_flags(["--sglang-load-format dummy"]).errors
    assert p.code == "unknown-flag" and "did you mean --sglang-load-format?" in p.message


# ---- a typo whatever its value -----------------------------------------------------------


def test_a_misspelt_flag_with_an_unresolved_value_is_an_error():
    v = check_script(str(FIX / "run-typo-unresolved.sh"), {})
    (p,) = v.errors
    assert p.code == "unknown-flag" and "did you mean --expert-model-parallel-size?" in p.message
    assert p.location is not None and p.location.line == 7
    known = check_script(str(FIX / "run-typo-unresolved.sh"), {"EP": "4"})
    assert codes(known) == ["unknown-flag"]


# ---- channels -------------------------------------------------------------------------------


def test_a_layout_key_in_the_custom_config_is_an_error_at_its_line():
    v = check_script(str(FIX / "custom-config" / "run.sh"), {})
    (p,) = v.errors
    assert p.code == "custom-config-layout" and p.location.line == 4
    assert "world size and placement" in p.message and p.location.path.endswith("custom.yaml")


def test_other_custom_config_keys_apply_with_the_yaml_line_as_source():
    v = check_script(str(FIX / "custom-config" / "run.sh"), {"CONFIG": "custom-ok.yaml"})
    assert v.ok
    got = v.extra["values"]["--num-layers"]
    assert got["value"] == "30" and got["source"].endswith("custom-ok.yaml:3")
    assert got["overridden"][0]["value"] == "28"
    assert v.topology.model.layers == 30


def test_an_unreadable_custom_config_is_skipped(tmp_path):
    v = check_script(str(FIX / "custom-config" / "run.sh"), {"CONFIG": "absent.yaml"})
    assert v.ok and codes(v, "skipped") == ["custom-config-unread"]


YAML_CFG = FIX / "yaml-cfg"


def megatron_load_yaml(path: Path):
    """What Megatron-LM's parse_args returns for --yaml-cfg (yaml_arguments.py load_yaml: the
    YAML's top-level keys as the namespace, nested mappings as sub-namespaces). The module
    itself imports torch and megatron.training, absent here, so its one step is done here."""
    import types

    import yaml

    return json.loads(json.dumps(yaml.safe_load(path.read_text())),
                      object_hook=lambda d: types.SimpleNamespace(**d))


def test_a_complete_yaml_cfg_sets_the_sizes_with_the_yaml_line_as_source():
    v = check_script(str(YAML_CFG / "run.sh"), {"CONFIG": "full.yaml"})
    assert v.ok and v.summary["tp"] == 4 and v.summary["dp"] == 2
    got = v.extra["values"]["--tensor-model-parallel-size"]
    assert got["value"] == "4" and got["source"].endswith("full.yaml:5")
    ns = megatron_load_yaml(YAML_CFG / "full.yaml")  # what runs: the YAML's value
    assert ns.tensor_model_parallel_size == 4 and ns.actor_num_nodes * \
        ns.actor_num_gpus_per_node == v.summary["world_size"]


def test_a_yaml_cfg_without_miles_world_size_keys_is_an_error():
    v = check_script(str(YAML_CFG / "run.sh"), {"CONFIG": "megatron-style.yaml"})
    assert codes(v) == ["yaml-cfg-incomplete"] and v.errors[0].location.line == 8
    assert "actor_num_nodes" in v.errors[0].message
    # the command line's sizes are dropped, and said so
    assert codes(v, "warnings") == ["yaml-cfg-replaces-flags"]
    assert "--tensor-model-parallel-size" in v.warnings[0].message
    ns = megatron_load_yaml(YAML_CFG / "megatron-style.yaml")
    with pytest.raises(AttributeError):  # miles' parse_args: args.actor_num_nodes * ...
        ns.actor_num_nodes  # noqa: B018
    assert ns.model_parallel.tensor_model_parallel_size == 4  # nested, not args.<name>


def test_an_unreadable_yaml_cfg_is_skipped():
    v = check_script(str(YAML_CFG / "run.sh"), {"CONFIG": "absent.yaml"})
    assert v.ok and codes(v, "skipped") == ["yaml-cfg-unread"]


def test_yaml_cfg_is_not_read_as_base64_and_not_on_fsdp(tmp_path):
    from miles_topology.reading.channels import read_channels

    inline = "base64:dGVuc29yX21vZGVsX3BhcmFsbGVsX3NpemU6IDQK"  # a custom-config form only
    problems, words = read_channels([("--yaml-cfg", inline, None)])
    assert [p.code for p in problems] == ["yaml-cfg-unread"] and words == []
    cfg = str(YAML_CFG / "megatron-style.yaml")
    assert read_channels([("--train-backend", "fsdp", None), ("--yaml-cfg", cfg, None)]) \
        == ([], [])
    # slime 624b824 reads args.hf_checkpoint (backends/megatron_utils/arguments.py:198) and
    # the actor's sizes (:206) right after Megatron's parse_args, before it merges its
    # pre-parsed and SGLang arguments back (utils/arguments.py:1627): an error there too
    problems, _ = read_channels([("--yaml-cfg", cfg, None)], framework="slime")
    (p,) = [p for p in problems if p.code == "yaml-cfg-incomplete"]
    assert "slime's megatron_parse_args fails reading args.hf_checkpoint" in p.message


def test_slime_merges_its_sglang_and_pre_parsed_flags_back_over_a_yaml_cfg(tmp_path):
    # slime 624b824 utils/arguments.py:1627-1633: after Megatron's parse (which --yaml-cfg
    # replaces), setattr of the pre-parsed and the SGLang namespaces: the command line wins
    from miles_topology.reading.channels import read_channels

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("hf_checkpoint: /m\nactor_num_nodes: 1\nactor_num_gpus_per_node: 8\n"
                   "sglang_dp_size: 4\ntensor_model_parallel_size: 2\n")
    pairs = [("--yaml-cfg", str(cfg), None), ("--sglang-dp-size", "2", None),
             ("--sglang-enable-dp-attention", None, None),
             ("--pipeline-model-parallel-size", "2", None)]
    for fw, applied in (("slime", False), ("miles", True)):
        problems, words = read_channels(pairs, framework=fw)
        texts = [w.text for w in words]
        assert ("--sglang-dp-size" in texts) is applied, (fw, texts)
        assert "--tensor-model-parallel-size" in texts
        (p,) = [p for p in problems if p.code == "yaml-cfg-replaces-flags"]
        assert ("--sglang-enable-dp-attention" in p.flags) is applied, (fw, p.message)
        assert "--pipeline-model-parallel-size" in p.flags


# ---- migrate ---------------------------------------------------------------------------------


def test_migrate_moves_the_layout_of_a_script_with_flags_of_its_own(tmp_path):
    from miles_topology.migrations.runner import migrate

    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\npython3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 \\\n"
        "   --colocate --tensor-model-parallel-size 2 --rollout-num-gpus-per-engine 2 \\\n"
        "   --prm-enable --rollout-min-p 0.1 --num-layers 28 --num-attention-heads 16\n")
    out = migrate(script, {})
    assert out.applied and "--prm-enable --rollout-min-p 0.1" in out.new
    assert sorted(p.flags[0] for p in out.beside) == ["--prm-enable", "--rollout-min-p"]


def test_an_installed_megatron_s_own_flags_are_known(tmp_path, monkeypatch):
    # a newer Megatron-LM on PYTHONPATH (miles' image: /root/Megatron-LM) defines a flag
    # the bundled snapshot does not have: the user's stack accepts it
    mg = tmp_path / "Megatron-LM" / "megatron" / "training"
    mg.mkdir(parents=True)
    (mg / "arguments.py").write_text(
        "def _add_network_size_args(parser):\n"
        "    group = parser.add_argument_group(title='network size')\n"
        "    group.add_argument('--use-shiny-attention', action='store_true')\n"
        "    return parser\n")
    assert codes(parse_flags(["--use-shiny-attention"])) == ["unknown-flag"]
    monkeypatch.syspath_prepend(str(tmp_path / "Megatron-LM"))
    st = stack.for_launch(None, None, [])
    assert st.flag("--use-shiny-attention") is not None
    with stack.using(st):
        assert parse_flags(["--use-shiny-attention"]).errors == []


def test_add_arguments_are_followed_through_imports_and_classes():
    # miles' session_verify_agent style: its add_arguments calls the base function's first
    from miles_topology.reading.argscan import Resolver

    src = {
        "pkg.base": "import argparse\nasync def generate(x): ...\n"
                    "def _add(parser):\n    parser.add_argument('--base-turns', type=int)\n"
                    "generate.add_arguments = _add\n",
        "pkg.agent": "from pkg.base import generate as _base_generate\n"
                     "async def generate(x): ...\n"
                     "def _add_arguments(parser):\n"
                     "    _base_generate.add_arguments(parser)\n"
                     "    parser.add_argument('--cycles', type=int, default=3)\n"
                     "    parser.add_argument('--strict', action='store_true')\n"
                     "generate.add_arguments = _add_arguments\n",
        "pkg.cls": "class RolloutFn:\n    @staticmethod\n    def add_arguments(parser):\n"
                   "        parser.add_argument('--rollout-knob', type=float)\n",
        "pkg.reexport": "from pkg.agent import generate\n",
        "pkg.plain": "def generate(x):\n    return x\n",
    }
    r = Resolver(src.get)
    got = {n: a.takes_value for a in r.function_arguments("pkg.reexport.generate")
           for n in a.names}
    assert got == {"--base-turns": True, "--cycles": True, "--strict": False}
    assert [a.names for a in r.function_arguments("pkg.cls.RolloutFn")] == [("--rollout-knob",)]
    assert r.function_arguments("pkg.plain.generate") == []  # resolved, adds nothing
    assert r.function_arguments("pkg.absent.generate") is None  # unresolved


def test_plain_flags_are_judged_against_the_stack_too(capsys):
    from support import run_cli

    flags = ["--", "--actor-num-nodes", "1", "--colocate", "--prm-enable"]
    assert run_cli(capsys, "check", *flags)[0] == 1
    assert run_cli(capsys, "check", "--stack", str(FORK), *flags)[0] == 0
    fn = ["--custom-generate-function-path", "miles.rollout.generate_hub.multi_turn.generate"]
    code, out, _ = run_cli(capsys, "check", "--", "--colocate", *fn, "--generate-max-turns", "3")
    assert code == 0, out
    assert stack.STACK_PATH.get() is None  # --stack ends with its command


def test_from_flags_without_a_stack_judges_the_layout_only():
    # miles examples/retool_v2/run_retool_multi_turn.py passes its user functions' flags:
    # the core API must not refuse what the user's miles accepts (issue 37)
    from miles_topology import Topology, TopologyError

    user = ["--custom-agent-function-path", "retool.agent", "--session-verify-cycles", "3",
            "--generate-tool-specs-path", "tools.json"]
    topo = Topology.from_flags(["--colocate", "--tensor-model-parallel-size", "2", *user])
    assert topo.layout.tp == 2 and not topo.warnings
    with pytest.raises(TopologyError) as e:  # a near miss of a layout flag: tp silently 1
        Topology.from_flags(["--colocate", "--tensor-model-paralel-size", "2", *user])
    assert e.value.codes == ["unknown-flag"]
    assert "--tensor-model-parallel-size" in e.value.problems[0].message
    with pytest.raises(TopologyError) as e:  # judged against a stack only when one is given
        Topology.from_flags(["--colocate", *user], stack=stack.BUNDLED)
    assert set(e.value.codes) == {"unknown-flag"}
    with stack.using(stack.BUNDLED):  # a stack the caller set counts as given
        with pytest.raises(TopologyError):
            Topology.from_flags(["--colocate", *user])


def test_a_fork_naming_neither_parent_reads_its_own_leniency_and_passthrough(tmp_path):
    """A fork whose arguments name neither miles nor slime (vime, slime served by vLLM: taken
    for a miles fork) drops what its Megatron parse does not know when its source says so
    (ignore_unknown_args=True), and its vLLM flags come from vLLM's own parser
    (`AsyncEngineArgs.add_cli_args(parser)`), not read here: unverified, not refused."""
    pkg = tmp_path / "vfork"
    for sub in ("utils", "backends/megatron_utils", "backends/engine_utils"):
        (pkg / sub).mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text("from vfork.utils.arguments import parse_args\n"
                                       "args = parse_args()\n")
    (pkg / "utils" / "arguments.py").write_text(
        "from vfork.backends.megatron_utils.arguments import parse_args as mp\n"
        "from vfork.backends.engine_utils.arguments import add_engine_arguments\n\n\n"
        "def add_vfork_arguments(parser):\n"
        "    parser.add_argument('--actor-num-nodes', type=int, default=1)\n"
        "    parser.add_argument('--actor-num-gpus-per-node', type=int, default=8)\n"
        "    parser.add_argument('--colocate', action='store_true')\n"
        "    return add_engine_arguments(parser)\n\n\n"
        "def parse_args():\n    return mp(extra_args_provider=add_vfork_arguments)\n")
    (pkg / "backends" / "megatron_utils" / "arguments.py").write_text(
        "from megatron.training.arguments import parse_args as _parse\n\n\n"
        "def parse_args(extra_args_provider=None):\n"
        "    return _parse(extra_args_provider=extra_args_provider, ignore_unknown_args=True)\n")
    (pkg / "backends" / "engine_utils" / "arguments.py").write_text(
        "from vllm.engine.arg_utils import AsyncEngineArgs\n\n\n"
        "def add_engine_arguments(parser):\n"
        "    AsyncEngineArgs.add_cli_args(parser)\n    return parser\n")
    script = tmp_path / "run.sh"
    script.write_text("python3 train.py --actor-num-gpus-per-node 8 --colocate --num-layers 2 "
                      "--vllm-max-num-seqs 8 --tensor-model-paralel-size 2\n")
    st = stack.for_launch(str(script), str(tmp_path / "train.py"), [])
    assert (st.framework, st.package) == ("miles", "vfork") and st.drops_unknown
    assert st.unresolved == ("vllm.engine.arg_utils.AsyncEngineArgs.add_cli_args",)
    v = check_script(str(script), {})
    assert v.ok and not v.errors, [str(p) for p in v.errors]
    assert [(p.code, p.flags[0]) for p in v.skipped] == [
        ("unverified-flag", "--vllm-max-num-seqs")]
    (typo,) = [p for p in v.warnings if p.code == "ignored-flag"]  # dropped, not refused
    assert "--tensor-model-parallel-size" in typo.message
    # miles itself hands its parser to SGLang's router (31f1ca9 utils/arguments.py:1897),
    # whose flags are known: its unknown flags stay refused
    ms = tmp_path / "ms"
    (ms / "miles" / "utils").mkdir(parents=True)
    (ms / ".git").mkdir()
    (ms / "miles" / "utils" / "arguments.py").write_text(
        "from sglang_router.launch_router import RouterArgs\n\n\n"
        "def add(parser):\n    RouterArgs.add_cli_args(parser, use_router_prefix=True)\n")
    st = stack.for_launch(str(ms / "run.sh"), None, [])
    assert (st.framework, st.unresolved, st.drops_unknown) == ("miles", (), False)
