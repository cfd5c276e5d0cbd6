"""Rules follow the framework a script runs: slime and miles differ (the FSDP backend first).

Each slime variant is a small checkout of our own in slime's style, its utils/arguments.py
shaped as the upstream commit it stands for (THUDM/slime history, mirrored):
- 624b824 (and since e4faf63, #1664 "Remove FSDP support"): `_pre_parse_mode` offers
  `--train-backend` choices=["megatron"] only;
- e4faf63^ (from 96118d0, #1600): choices megatron and fsdp, and the FSDP parse drops the
  flags it does not define (`fsdp_parse_args(..., ignore_unknown_args=True)`);
- 96118d0^ (from cfad46f, #282): choices megatron and fsdp, the FSDP parser strict
  (`load_fsdp_args` -> `parser.parse_args()`).
"""

from pathlib import Path

import pytest

from miles_topology.judging.check_script import check_script
from miles_topology.model.errors import TopologyError
from miles_topology.model.topology import Topology
from miles_topology.reading import stack
from miles_topology.reading.sources import to_yaml

FLAGS = ("--train-backend fsdp --actor-num-nodes 1 --actor-num-gpus-per-node 8 "
         "--tensor-model-parallel-size 2 --hf-checkpoint /root/Qwen3-4B --colocate")

PRE_PARSE = '''import argparse


def _pre_parse_mode():
    temp_parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    temp_parser.add_argument("--train-backend", type=str, choices={choices}, default="megatron")
    temp_parser.add_argument("--debug-rollout-only", action="store_true", default=False)
    temp_args, _ = temp_parser.parse_known_args()
    return temp_args


def parse_args(add_custom_arguments=None):
    pre = _pre_parse_mode()
    if pre.train_backend == "megatron":
        from slime.backends.megatron_utils.arguments import megatron_parse_args

        args = megatron_parse_args(extra_args_provider=None)
    else:
        from slime.backends.fsdp_utils.arguments import fsdp_parse_args

        args = fsdp_parse_args(extra_args_provider=None{lenient})
    return args
'''

STRICT = '''import argparse


def get_slime_extra_args_provider(add_custom_arguments=None):
    def add_slime_arguments(parser):
        def add_train_arguments(parser):
            parser.add_argument(
                "--train-backend",
                type=str,
                choices=["megatron", "fsdp"],
                default="megatron",
            )
            return parser

        parser = add_train_arguments(parser)
        return parser

    return add_slime_arguments


def parse_args(add_custom_arguments=None):
    from slime.backends.fsdp_utils.arguments import load_fsdp_args

    args = load_fsdp_args(extra_args_provider=get_slime_extra_args_provider())
    return args
'''


def checkout(root: Path, text: str) -> Path:
    (root / "slime" / "utils").mkdir(parents=True)
    (root / "slime" / "__init__.py").write_text("")
    (root / "slime" / "utils" / "arguments.py").write_text(text)
    return root


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MILES_TOPOLOGY_CACHE", str(tmp_path / "cache"))
    stack._base.cache_clear()
    stack.train_backends.cache_clear()
    yield
    stack._base.cache_clear()
    stack.train_backends.cache_clear()


def judged(tmp_path: Path, entry: str, given: Path | None = None, flags: str = FLAGS):
    """check of `entry FLAGS` in tmp_path/job, on the slime checkout `given` (--stack)."""
    script = tmp_path / "job" / "run.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/bash\npython3 {entry} {flags}\n")
    token = stack.STACK_PATH.set(str(given) if given else None)
    try:
        return check_script(str(script), {})
    finally:
        stack.STACK_PATH.reset(token)


def by_code(v):
    return {p.code: (p.severity, p.message) for p in v.problems}


def test_miles_fsdp_refuses_megatron_only_flags_in_miles_name(tmp_path):
    v = judged(tmp_path, "/root/miles/train.py")
    sev, msg = by_code(v)["fsdp-unknown-flag"]
    assert sev == "error" and msg.startswith("miles' FSDP argument parser does not define "
                                             "--tensor-model-parallel-size")
    assert "train-backend-unsupported" not in by_code(v)


def test_bundled_slime_fsdp_is_skipped_not_refused_in_miles_name(tmp_path):
    # the reproducer: which slime runs is not known (an older slime or a fork may have FSDP)
    v = judged(tmp_path, "/root/slime/train.py")
    got = by_code(v)
    assert "fsdp-unknown-flag" not in got and v.ok
    sev, msg = got["train-backend-unsupported"]
    assert sev == "skipped" and "e4faf63" in msg and "miles" not in msg


def test_a_slime_without_fsdp_refuses_the_backend_citing_its_line(tmp_path):
    root = checkout(tmp_path / "slime-src", PRE_PARSE.format(choices='["megatron"]',
                                                             lenient=""))
    v = judged(tmp_path, "/root/slime/train.py", root)
    got = by_code(v)
    assert "fsdp-unknown-flag" not in got and not v.ok
    sev, msg = got["train-backend-unsupported"]
    where = f"{root / 'slime' / 'utils' / 'arguments.py'}:6"
    assert sev == "error" and where in msg and "invalid choice" in msg
    assert stack.train_backends(str(root), "slime").choices == ("megatron",)


def test_a_slime_with_lenient_fsdp_parse_drops_megatron_sizes_with_a_warning(tmp_path):
    root = checkout(tmp_path / "slime-src", PRE_PARSE.format(
        choices='["megatron", "fsdp"]', lenient=", ignore_unknown_args=True"))
    v = judged(tmp_path, "/root/slime/train.py", root)
    got = by_code(v)
    assert v.ok and "fsdp-unknown-flag" not in got and "train-backend-unsupported" not in got
    assert got["fsdp-ignores-megatron-sizes"][0] == "warning"


def test_a_slime_with_a_strict_fsdp_parser_refuses_in_slime_name(tmp_path):
    root = checkout(tmp_path / "slime-src", STRICT)
    v = judged(tmp_path, "/root/slime/train.py", root)
    sev, msg = by_code(v)["fsdp-unknown-flag"]
    assert sev == "error" and msg.startswith("slime's FSDP argument parser")
    assert "--dp-replicate-size" not in v.errors[0].fix  # slime's FSDP has no such flag


def test_slime_s_pre_parsed_flags_are_slime_flags(tmp_path):
    # slime 624b824 utils/arguments.py:1583 _pre_parse_mode parses them apart and merges
    # them back: no ignored-flag / unknown-flag on a slime script
    v = run(tmp_path, "slime", "--train-backend megatron --debug-rollout-only "
            "--load-debug-rollout-data /data/r_{rollout_id}.pt")
    assert not [p for p in v.problems if p.code.endswith("-flag")], v.problems
    from miles_topology.reading import surface
    for name in ("--train-backend", "--debug-rollout-only", "--debug-train-only",
                 "--load-debug-rollout-data"):
        assert name in surface.slime_names()
    assert surface.slime_table()["--train-backend"].choices == ("megatron",)


def test_a_did_you_mean_on_slime_names_a_flag_slime_has(tmp_path):
    # slime 624b824 utils/arguments.py defines no router switch: a fork's --use-slime-router
    # is dropped there, and so would miles' --use-miles-router be (no fix to suggest); a
    # near miss of a flag slime has still gets its did-you-mean
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\npython3 /root/slime/train.py --actor-num-nodes 1 "
                      "--actor-num-gpus-per-node 8 --colocate --num-layers 4 "
                      "--use-slime-router --rollout-num-gpu-per-engine 2\n")
    got = {p.flags[0]: p for p in check_script(str(script), {}).problems
           if p.code == "ignored-flag"}
    router = got["--use-slime-router"]
    assert "did you mean" not in router.message and "miles-router" not in router.fix
    assert "did you mean --rollout-num-gpus-per-engine?" in \
        got["--rollout-num-gpu-per-engine"].message


@pytest.mark.parametrize("entry, kept", [("/root/slime/train.py", False),
                                         ("/root/miles/train.py", True)])
def test_a_topology_flag_slime_lacks_keeps_its_default_on_slime(tmp_path, entry, kept):
    # slime 624b824 defines no --critic-num-nodes nor --dp-replicate-size (miles 31f1ca9
    # does): slime's Megatron parse (ignore_unknown_args=True) drops them, so no rule reads
    # them as given (miles: critic-placement-overridden, fsdp-flag-ignored)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/bash\npython3 {entry} --actor-num-nodes 1 "
                      "--actor-num-gpus-per-node 8 --colocate --num-layers 4 "
                      "--advantage-estimator ppo --critic-num-nodes 2 --dp-replicate-size 3\n")
    v = check_script(str(script), {})
    got = [p.code for p in v.problems]
    if kept:
        assert "critic-placement-overridden" in got and "fsdp-flag-ignored" in got
        assert "ignored-flag" not in got
    else:
        assert got.count("ignored-flag") == 2 and "critic-placement-overridden" not in got
        assert "fsdp-flag-ignored" not in got
        assert all("slime does not" in p.message for p in v.warnings)


# ---- other rules: what slime 624b824 does where it differs from miles 31f1ca9 -------------

BASE = "--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate --num-layers 4 "


def run(tmp_path: Path, framework: str, flags: str, name: str = "run.sh"):
    script = tmp_path / name
    script.write_text(f"#!/bin/bash\npython3 /root/{framework}/train.py {BASE}{flags}\n")
    return check_script(str(script), {})


def test_slime_asserts_its_engine_pp_divides_the_engine(tmp_path):
    # slime backends/sglang_utils/arguments.py:174; miles has no such assert
    flags = "--rollout-num-gpus-per-engine 4 --sglang-pp-size 3"
    slime, miles = run(tmp_path, "slime", flags), run(tmp_path, "miles", flags, "m.sh")
    assert [p.code for p in slime.errors] == ["sglang-pp-invalid"]
    assert "slime asserts" in slime.errors[0].message
    assert "sglang-pp-invalid" not in [p.code for p in miles.problems]


def test_slime_engine_tp_is_gpus_over_engine_pp(tmp_path):
    # slime :180 sglang_tp_size = GPUs per engine // PP; miles :183 = GPUs per engine
    flags = "--rollout-num-gpus-per-engine 4 --sglang-pp-size 2 --sglang-tp-size 2"
    slime, miles = run(tmp_path, "slime", flags), run(tmp_path, "miles", flags, "m.sh")
    assert "sglang-tp-overridden" not in [p.code for p in slime.problems]
    (w,) = [p for p in miles.warnings if p.code == "sglang-tp-overridden"]
    assert "overwritten by miles" in w.message
    # engine DP must divide the TP slime runs (2), not the engine's 4 GPUs
    bad = run(tmp_path, "slime", "--rollout-num-gpus-per-engine 4 --sglang-pp-size 2 "
              "--sglang-dp-size 4 --sglang-enable-dp-attention", "d.sh")
    (e,) = [p for p in bad.errors if p.code == "sglang-dp-invalid"]
    assert "engine's TP 2" in e.message


@pytest.mark.parametrize("framework, said", [
    ("miles", "the engine's 4 GPUs (engine TP)"),
    ("slime", "the engine's TP 2 (--rollout-num-gpus-per-engine 4 // --sglang-pp-size 2)")])
def test_the_dp_and_ep_rules_name_the_engine_tp_alike(framework, said):
    # sglang-dp-invalid and sglang-ep-invalid say the engine TP in one wording (engines.py
    # _engine_tp): its GPUs, or on slime the TP they make under --sglang-pp-size
    kw = dict(framework=framework, nodes=1, gpus_per_node=8, rollout_gpus=8, engine_size=4,
              engine_pp=2, dp_attention=True, experts=9)
    with pytest.raises(TopologyError) as dp:
        Topology(engine_dp=3, **kw)
    with pytest.raises(TopologyError) as ep:
        Topology(engine_ep=3, **kw)
    for info, code in ((dp, "sglang-dp-invalid"), (ep, "sglang-ep-invalid")):
        (p,) = [p for p in info.value.problems if p.code == code]
        assert said in p.message, p.message


def test_the_engine_tp_and_ep_follow_the_framework_given_not_hidden_state(tmp_path):
    # Rollout.sglang_tp_used and engine_ep_used: one definition, for the rules and the
    # estimate, whose launcher sizes the engines an argument; an a2a backend makes SGLang set
    # EP = the TP it runs (server_args.py _handle_a2a_moe)
    kw = dict(nodes=1, gpus_per_node=8, rollout_gpus=8, engine_size=4, engine_pp=2,
              experts=8, a2a_backend="deepep")
    slime, miles = Topology(framework="slime", **kw), Topology(**kw)
    assert slime.rollout == miles.rollout  # the same part: no framework hidden in it

    def used(topo):
        fw = topo.layout.framework
        return topo.rollout.sglang_tp_used(fw), topo.rollout.engine_ep_used(fw)

    assert (used(slime), used(miles)) == ((2, 2), (4, 4))
    # a copy is validated again and keeps its framework's sizes; switching the framework
    # (or the engine PP) in a copy changes them
    assert [used(t.model_copy(update={"experts": 16})) for t in (slime, miles)] == \
        [(2, 2), (4, 4)]
    assert used(miles.model_copy(update={"framework": "slime"})) == (2, 2)
    assert used(slime.model_copy(update={"engine_pp": 1})) == (4, 4)
    # and one read back from its YAML (the framework is written once, on the layout)
    (tmp_path / "t.yaml").write_text(text := to_yaml(slime))
    assert used(Topology.from_yaml(str(tmp_path / "t.yaml"))) == (2, 2)
    assert not any("_used" in out for out in (text, slime.model_dump_json()))
    # the rules read the same: engine DP 4 divides miles' TP 4, not slime's TP 2
    dp4 = dict(kw, a2a_backend=None, engine_dp=4, dp_attention=True)
    assert Topology(**dp4).rollout.engine_dp == 4
    with pytest.raises(TopologyError, match="sglang-dp-invalid"):
        Topology(framework="slime", **dp4)


@pytest.mark.parametrize("ep, slime_warns, miles_warns", [(2, False, True), (4, True, False)])
def test_an_a2a_backend_overrides_an_ep_that_is_not_the_engine_tp_run(tmp_path, ep,
                                                                     slime_warns, miles_warns):
    # slime runs TP 4 // PP 2 = 2, so an EP of 2 is what SGLang sets anyway; miles runs TP 4
    flags = (f"--rollout-num-gpus-per-engine 4 --sglang-pp-size 2 --sglang-ep-size {ep} "
             "--num-experts 8 --sglang-moe-a2a-backend deepep")
    slime, miles = run(tmp_path, "slime", flags), run(tmp_path, "miles", flags, "m.sh")
    warned = [[p for p in v.warnings if p.code == "sglang-ep-overridden"] for v in (slime, miles)]
    assert [bool(w) for w in warned] == [slime_warns, miles_warns]
    assert all(f"engine TP = {tp}," in w[0].message
               for w, tp in zip(warned, (2, 4), strict=True) if w)


@pytest.mark.parametrize("flags, code, said", [
    ("--rollout-num-gpus-per-engine 4 --sglang-dp-size 2", "sglang-dp-invalid",
     "slime asserts"),
    ("--use-dynamic-batch-size", "dynamic-batch-requires-max-tokens", "slime asserts"),
    ("--rollout-batch-size 4 --n-samples-per-prompt 2 --num-steps-per-rollout 2 "
     "--global-batch-size 2", "steps-per-rollout-conflict", "slime asserts"),
    ("--rollout-batch-size 2 --n-samples-per-prompt 2 --global-batch-size 8",
     "rollout-batch-below-global-batch", "slime asserts 'num_rollouts < global_batch_size'"),
    ("--rollout-batch-size 3 --n-samples-per-prompt 1 --global-batch-size 2",
     "rollout-batch-not-multiple-of-global-batch", "drops the trailing 1 rollouts"),
])
def test_messages_name_the_framework_the_script_runs(tmp_path, flags, code, said):
    v = run(tmp_path, "slime", flags)
    (p,) = [p for p in v.problems if p.code == code]
    assert said in p.message and "miles" not in p.message, p.message
    m = run(tmp_path, "miles", flags, "m.sh")
    (p,) = [p for p in m.problems if p.code == code]
    assert "slime" not in p.message and "miles" in p.message, p.message


def test_ppo_on_a_slime_fsdp_is_not_miles_error(tmp_path):
    # miles raises "Shared Actor/Critic PPO requires the Megatron backend"; no slime does
    root = checkout(tmp_path / "slime-src", PRE_PARSE.format(
        choices='["megatron", "fsdp"]', lenient=", ignore_unknown_args=True"))
    v = judged(tmp_path, "/root/slime/train.py", root,
               f"--train-backend fsdp {BASE}--advantage-estimator ppo")
    assert "ppo-requires-megatron" not in [p.code for p in v.problems]
    miles = run(tmp_path, "miles", "--train-backend fsdp --advantage-estimator ppo", "m.sh")
    assert "ppo-requires-megatron" in [p.code for p in miles.errors]


def test_custom_config_layout_names_slime_s_validation(tmp_path):
    (tmp_path / "c.yaml").write_text("actor_num_nodes: 2\n")
    v = run(tmp_path, "slime", f"--custom-config-path {tmp_path / 'c.yaml'}")
    (p,) = [p for p in v.errors if p.code == "custom-config-layout"]
    assert "slime_validate_args" in p.message and "slime/utils/arguments.py" in p.message


@pytest.mark.parametrize("flags, code", [
    ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --num-layers 4", "no-rollout-gpus"),
    ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --num-layers 4 --prefill-num-servers 1 "
     "--rollout-external-engine-addrs 10.0.0.1:3000", "engine-groups-invalid"),
])
def test_placement_messages_name_slime(tmp_path, flags, code):
    # slime 624b824 utils/arguments.py:1951 and ray/placement_group.py:117 (rollout GPUs);
    # backends/sglang_utils/arguments.py:190 (prefill servers with external engines)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/bash\npython3 /root/slime/train.py {flags}\n")
    (p,) = [p for p in check_script(str(script), {}).problems if p.code == code]
    assert "slime" in p.message and "miles" not in p.message, p.message


def test_r3_with_external_engines_quotes_slime_s_error(tmp_path):
    # slime 624b824 backends/megatron_utils/actor.py:311
    flags = ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --num-layers 4 --num-experts 8 "
             "--use-rollout-routing-replay --rollout-external-engine-addrs 10.0.0.1:3000")
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/bash\npython3 /root/slime/train.py {flags}\n")
    (p,) = [p for p in check_script(str(script), {}).problems if p.code == "r3-external-capture"]
    assert "slime cannot switch" in p.message and "when use_rollout_routing_replay" in p.message


def test_debug_rollout_only_with_external_engines_keeps_slime_s_actor(tmp_path):
    # slime 624b824 utils/arguments.py:1920 `if args.rollout_external: pass`; miles 31f1ca9
    # :3242 derives the actor from --rollout-num-gpus (min(8, 16) x 16 // 8)
    flags = ("--actor-num-nodes 1 --actor-num-gpus-per-node 4 --num-layers 4 "
             "--debug-rollout-only --rollout-num-gpus 16 "
             "--rollout-external-engine-addrs 10.0.0.1:3000")
    got = _on_each_framework(tmp_path, flags)
    assert {fw: v.summary["world_size"] for fw, v in got.items()} == {"slime": 4, "miles": 16}


def _on_each_framework(tmp_path, flags: str) -> dict:
    """The verdict of one command line run as slime's train.py and as miles'."""
    got = {}
    for fw in ("slime", "miles"):
        script = tmp_path / f"{fw}.sh"
        script.write_text(f"#!/bin/bash\npython3 /root/{fw}/train.py {flags}\n")
        got[fw] = check_script(str(script), {})
    return got


def test_debug_rollout_only_on_slime_skips_megatron_s_grid_rules(tmp_path):
    # slime 624b824 utils/arguments.py:1637 runs megatron_validate_args only `if
    # pre.train_backend == "megatron" and not args.debug_rollout_only`, and its train actors
    # return from init before any process group or model (backends/megatron_utils/actor.py:67);
    # miles 31f1ca9 utils/arguments.py:2711 validates the grid in every mode
    flags = ("--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate --num-layers 6 "
             "--num-attention-heads 14 --num-experts 6 --tensor-model-parallel-size 3 "
             "--expert-model-parallel-size 4 --pipeline-model-parallel-size 4 "
             "--num-virtual-stages-per-pipeline-rank 2 --debug-rollout-only")
    codes = {fw: {p.code for p in v.problems if p.severity == "error"}
             for fw, v in _on_each_framework(tmp_path, flags).items()}
    assert codes["slime"] == set()
    assert {"dense-grid-divisibility", "heads-not-divisible-by-tp",
            "experts-not-divisible-by-ep"} <= codes["miles"]
    # without the flag slime's Megatron refuses the same layout
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\npython3 /root/slime/train.py "
                      + flags.replace(" --debug-rollout-only", "") + "\n")
    assert "dense-grid-divisibility" in {p.code for p in check_script(str(script), {}).problems}


def test_a_user_function_s_add_arguments_is_miles_only(tmp_path):
    # miles 31f1ca9 utils/arguments.py:2591 calls the rollout / generate function's
    # add_arguments(parser); no slime commit does, and slime's parser drops what it lacks
    project = tmp_path / "proj"
    (project / "agent").mkdir(parents=True)
    (project / "agent" / "__init__.py").write_text("")
    (project / "agent" / "gen.py").write_text(
        "def generate(args, sample):\n    return sample\n\n\n"
        "def add_arguments(parser):\n    parser.add_argument('--agent-max-turns', type=int)\n\n\n"
        "generate.add_arguments = add_arguments\n")
    got = {}
    for fw in ("slime", "miles"):
        script = project / f"{fw}.sh"
        script.write_text(f"#!/bin/bash\npython3 /root/{fw}/train.py {BASE}"
                          "--custom-generate-function-path agent.gen.generate "
                          "--agent-max-turns 4\n")
        got[fw] = [p.code for p in check_script(str(script), {}).problems]
    assert got["slime"] == ["ignored-flag"] and got["miles"] == [], got


FSDP_ARGS = '''import argparse
import dataclasses
from dataclasses import dataclass


@dataclass
class FSDPArgs:
    lr: float = 2e-5
    context_parallel_size: int = 1


def parse_fsdp_cli(extra_args_provider=None):
    parser = argparse.ArgumentParser("FSDP SFT Training (slime)")
    for f in dataclasses.fields(FSDPArgs):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=f.type, default=f.default)
    return parser.parse_args()
'''


@pytest.mark.parametrize("with_cp, refused", [(False, True), (True, False)])
def test_a_strict_slime_fsdp_parser_takes_cp_only_when_fsdpargs_has_it(tmp_path, with_cp,
                                                                        refused):
    # FSDPArgs.context_parallel_size: THUDM/slime 6d3b33f (#467) to 7785e5b (#1443)
    root = checkout(tmp_path / "slime-src", STRICT)
    if with_cp:
        (root / "slime" / "backends" / "fsdp_utils").mkdir(parents=True)
        (root / "slime" / "backends" / "fsdp_utils" / "arguments.py").write_text(FSDP_ARGS)
    v = judged(tmp_path, "/root/slime/train.py", root,
               f"--train-backend fsdp {BASE}--context-parallel-size 2")
    got = [p.flags[0] for p in v.errors if p.code == "fsdp-unknown-flag"]
    assert got == (["--context-parallel-size"] if refused else []), v.problems
