"""Reading the flag surface and topology YAML files."""

from pathlib import Path

import pytest
from pydantic import ValidationError
from support import ROOT

from miles_topology import Topology, TopologyError
from miles_topology.model.topology import megatron_args
from miles_topology.reading.argscan import Added
from miles_topology.reading.sources import read_flags, to_yaml
from miles_topology.reading.stack import Stack, using


def test_real_defaults():
    topo = Topology.from_flags(["--colocate"])
    assert (topo.layout.nodes, topo.layout.gpus_per_node, topo.layout.node_gpus) == (1, 8, 8)
    assert (topo.layout.tp, topo.layout.pp, topo.layout.cp, topo.layout.ep, topo.layout.etp) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert topo.rollout.engine_size == 1 and topo.placement_group.rollout_engines == 8
    assert topo.layout.order == "tp-cp-ep-dp-pp"


def test_unknown_flags_pass_through_in_order():
    argv = ["--lr", "1e-6", "--colocate", "--hf-checkpoint", "/x", "--use-wandb", "--num-experts",
            "8"]
    read = read_flags(argv)
    assert read.passthrough == ["--lr", "1e-6", "--hf-checkpoint", "/x", "--use-wandb"]
    assert read.topology.model.experts == 8


def test_tp_pp_dp_mapping_selects_order():
    topo = Topology.from_flags(["--colocate", "--use-tp-pp-dp-mapping"])
    assert topo.layout.order == "tp-cp-ep-pp-dp"


def test_etp_implied_and_explicit():
    argv = ["--colocate", "--tensor-model-parallel-size", "2", "--sequence-parallel",
            "--num-experts", "8"]
    implied = Topology.from_flags(argv)
    assert implied.layout.etp == 2 and [w.code for w in implied.warnings] == ["etp-implied"]
    explicit = Topology.from_flags(argv + ["--expert-tensor-parallel-size", "2"])
    assert explicit.layout.etp == 2 and not explicit.warnings


def test_last_occurrence_wins_and_equals_syntax():
    topo = Topology.from_flags(["--colocate", "--tensor-model-parallel-size", "4",
                                "--tensor-model-parallel-size=2"])
    assert topo.layout.tp == 2


def test_missing_value_is_an_error_not_a_traceback():
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(["--colocate", "--expert-model-parallel-size"])
    assert info.value.codes == ["invalid-flag-value"]
    assert "needs a value" in info.value.problems[0].message


def test_renamed_ep_moe_sets_engine_ep():
    # on a stack that still defines the old spelling (an old checkout) it warns and reads
    old = Stack(added={"--sglang-enable-ep-moe": ("an old miles", Added(
        ("--sglang-enable-ep-moe",), False))})
    with using(old):
        topo = Topology.from_flags(["--colocate", "--rollout-num-gpus-per-engine", "4",
                                    "--sglang-enable-ep-moe", "--num-experts", "8"])
    assert topo.rollout.engine_ep == 4
    assert [w.code for w in topo.warnings] == ["deprecated-flag"]
    assert "--sglang-ep-size N" in topo.warnings[0].message


@pytest.mark.parametrize("argv", [["--rollout-num-gpus-per-node", "8"], ["--sglang-enable-ep-moe"],
                                  ["--sglang-enable-deepep-moe"]])
def test_renamed_flag_no_stack_defines_is_refused(argv):
    # no current miles, slime or SGLang defines them (Megatron's parse_args exits:
    # "unrecognized arguments"); the rename is the fix
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(["--colocate", *argv])
    assert info.value.codes == ["unknown-flag"]
    assert "renamed" in info.value.problems[0].message
    assert info.value.problems[0].fix.startswith(f"replace {argv[0]} with --")


def test_vpp_from_layers_per_virtual_stage():
    topo = Topology.from_flags(["--colocate", "--pipeline-model-parallel-size", "2",
                                "--num-layers", "8", "--num-layers-per-virtual-pipeline-stage",
                                "2"])
    assert topo.stages.chunks == 2
    assert topo.stage_layers(0, 0) == (0, 1) and topo.stage_layers(1, 0) == (2, 3)
    assert topo.stage_layers(0, 1) == (4, 5) and topo.stage_layers(1, 1) == (6, 7)
    assert megatron_args(topo)["virtual_pipeline_model_parallel_size"] == 2


def test_moe_layer_freq_list_expression_is_parsed_not_evaluated():
    topo = Topology.from_flags(["--colocate", "--num-layers", "6", "--num-experts", "4",
                                "--moe-layer-freq", "([0]*2+[1]*4)",
                                "--pipeline-model-parallel-size", "2"])
    assert topo.model.moe_pattern == (False, False, True, True, True, True)
    assert topo.stages.replay(0) == (2,) and topo.stages.replay(1) == (3, 4, 5)
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(["--colocate", "--moe-layer-freq", "__import__('os').system('x')"])
    assert info.value.codes == ["invalid-flag-value"]


def test_yaml_round_trip_and_dotlist(tmp_path):
    topo = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                                "--expert-model-parallel-size", "2", "--num-experts", "8",
                                "--colocate", "--moe-layer-freq", "[1,0,1,0]", "--num-layers", "4"])
    path = tmp_path / "t.yaml"
    path.write_text(to_yaml(topo))
    assert Topology.from_yaml(str(path)) == topo
    assert Topology.from_yaml(str(path), ["ep=4"]).layout.ep == 4


def test_yaml_interpolation_from_env(tmp_path, monkeypatch):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: ${oc.env:NNODES,2}\ngpus_per_node: 4\ncolocate: true\n")
    assert Topology.from_yaml(str(path)).world_size == 8
    monkeypatch.setenv("NNODES", "3")
    assert Topology.from_yaml(str(path)).world_size == 12


def test_flag_conflict_between_yaml_and_flag(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 2\ngpus_per_node: 4\nep: 2\ncolocate: true\n")
    same = read_flags(["--topology", str(path), "--expert-model-parallel-size", "2"])
    assert same.topology.layout.ep == 2
    with pytest.raises(TopologyError) as info:
        read_flags(["--topology", str(path), "--expert-model-parallel-size", "4"])
    assert info.value.codes == ["flag-conflict"]
    assert "sets ep: 2 but --expert-model-parallel-size gives 4" in info.value.problems[0].message


def test_unknown_yaml_field_is_reported(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 2\ntensor_parallel: 2\n")
    with pytest.raises(TopologyError) as info:
        Topology.from_yaml(str(path))
    assert info.value.codes == ["unknown-field"]


def test_model_dump_has_sizes():
    d = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                             "--colocate", "--expert-model-parallel-size", "2"]).model_dump()
    assert (d["world_size"], d["dp"], d["edp"]) == (8, 8, 4)


def test_frozen_and_hashable():
    topo = Topology.from_flags(["--colocate"])
    with pytest.raises(AttributeError, match="immutable.*model_copy") as info:
        topo.tp = 2
    assert not isinstance(info.value, ValidationError) and topo.layout.tp == 1
    assert {topo: 1}[Topology.from_flags(["--colocate"])] == 1


def test_uneven_first_last_with_vpp_matches_megatron_offsets():
    topo = Topology(nodes=1, gpus_per_node=4, pp=4, vpp=2, layers=20, first_stage_layers=2,
                    last_stage_layers=2, colocate=True)
    assert topo.stages.counts == (2, 8, 8, 2)
    # chunk v of every stage precedes chunk v+1 of any stage
    assert topo.stage_layers(0, 0) == (0,) and topo.stage_layers(1, 0) == (1, 2, 3, 4)
    assert topo.stage_layers(3, 0) == (9,) and topo.stage_layers(0, 1) == (10,)
    every = sorted(x for p in range(4) for v in range(2) for x in topo.stage_layers(p, v))
    assert every == list(range(20))


def test_engines_spanning_whole_nodes_and_disaggregated_start():
    topo = Topology(nodes=2, gpus_per_node=4, node_gpus=4, rollout_gpus=8, engine_size=8)
    assert topo.placement_group.rollout_engines == 1 and topo.placement_group.nodes == 4
    assert topo.engine_gpus(0) == tuple((n, g) for n in (2, 3) for g in range(4))


def test_yaml_reads_a_given_env_instead_of_the_process_env(tmp_path, monkeypatch):
    from miles_topology.model.errors import InputError

    path = tmp_path / "t.yaml"
    path.write_text("nodes: ${oc.env:NNODES,2}\ngpus_per_node: ${oc.env:GPN}\ncolocate: true\n")
    monkeypatch.setenv("NNODES", "5")
    monkeypatch.setenv("GPN", "8")
    assert read_flags(["--topology", str(path)], {"GPN": "4"}).topology.world_size == 8
    assert read_flags(["--topology", str(path)]).topology.world_size == 40
    with pytest.raises(InputError, match="GPN.*pass --env GPN=VALUE"):
        read_flags(["--topology", str(path)], {})


def test_rank_order_switch_off_keeps_the_default():
    assert Topology.from_flags(["--colocate", "--use-tp-pp-dp-mapping=false"]).layout.order == (
        "tp-cp-ep-dp-pp")


# ---- one table per fact -------------------------------------------------------------


def test_explicit_etp_round_trips_through_yaml(tmp_path):

    for given in (dict(etp=2), dict(etp=1), {}):
        topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, ep=2, experts=8, colocate=True,
                        **given)
        path = tmp_path / "t.yaml"
        path.write_text(to_yaml(topo))
        back = Topology.from_yaml(str(path))
        assert back == topo and back.layout.etp == topo.layout.etp
        assert back.layout.etp_implied == topo.layout.etp_implied == (not given)
        assert [w.code for w in back.warnings] == [w.code for w in topo.warnings]


def test_etp_implied_is_derived_not_a_field():
    from miles_topology.model.parts import FIELDS

    assert "etp_implied" not in FIELDS
    with pytest.raises(TopologyError) as info:
        Topology(etp_implied=False, colocate=True)
    assert info.value.codes == ["unknown-field"]


def test_model_validate_and_copy_validate_and_raise_topology_error():
    good = Topology.model_validate({"nodes": 1, "gpus_per_node": 8, "tp": 2, "colocate": True})
    assert good.dp == 4 and good.layout.etp == 2
    for bad in ({"tp": "x"}, {"tp": 3, "colocate": True}, {"nodes": 0}):
        with pytest.raises(TopologyError) as info:
            Topology.model_validate(bad)
        assert not isinstance(info.value, ValidationError)
    with pytest.raises(TopologyError) as info:
        Topology.model_validate_json('{"tp": 3, "colocate": true}')
    assert "dense-grid-divisibility" in info.value.codes
    with pytest.raises(TopologyError):
        good.model_copy(update={"tp": 3})  # 8 GPUs do not split over tp 3
    with pytest.raises(TopologyError):
        Topology.model_construct(tp=3, colocate=True)
    wider = good.model_copy(update={"tp": 4})
    assert wider.layout.etp == 4 and wider.layout.etp_implied  # an implied etp follows the new tp
    assert good.model_copy(update={"etp": 1}).layout.etp_implied is False


def test_invalid_tp_is_one_problem_not_two():
    with pytest.raises(TopologyError) as info:
        Topology(tp="x", colocate=True)
    assert info.value.codes == ["invalid-flag-value"]


def test_every_field_has_a_group_and_every_flag_reads_its_field():
    from miles_topology.model.parts import FIELDS, GROUPS, facts, fields_in
    from miles_topology.reading.flags import ALIASES, RENAMED, field_of, flag_of, is_switch, known

    assert sorted(n for g in GROUPS for n in fields_in(g)) == sorted(FIELDS)
    for name in FIELDS:
        flag = facts(name)["flag"]
        if flag is None:
            continue
        assert known(flag) and field_of(flag) == name and flag_of(name) == flag
        assert is_switch(flag) == (FIELDS[name].annotation is bool
                                   or "switch" in facts(name))
    for flag, name in ALIASES.items():
        assert field_of(flag) == name and flag_of(name) != flag
    assert set(RENAMED) <= {f for f in RENAMED if known(f)}
    assert not known("--lr") and field_of("--lr") is None


def test_parse_flags_keeps_the_token_objects_that_set_each_field():
    from dataclasses import dataclass

    from miles_topology.reading.flags import parse_flags

    @dataclass
    class Word:
        text: str
        line: int

    words = [Word(t, i + 1) for i, t in enumerate(
        ["--tensor-model-parallel-size", "2", "--lr", "1e-6", "--colocate",
         "--sglang-expert-parallel-size=2", "--topology", "t.yaml"])]
    parsed = parse_flags(words)
    assert parsed.fields == {"tp": 2, "colocate": True, "engine_ep": 2}
    assert parsed.origin["tp"] is words[0] and parsed.origin["colocate"] is words[4]
    assert parsed.origin["engine_ep"].line == 6
    assert parsed.passthrough == [words[2], words[3]]
    assert parsed.topology == "t.yaml"  # (its token, test-only, is no longer kept)
    assert parse_flags(["--topology=x.yaml"]).topology == "x.yaml"


def test_a_topology_flag_without_a_file_is_unreadable_input():
    from miles_topology.model.errors import InputError

    for argv in (["--topology"], ["--topology", "--colocate"]):
        with pytest.raises(InputError, match="--topology needs a topology YAML file"):
            read_flags(argv)


def test_the_topology_option_is_parsed_only_in_flags_py():
    import re

    root = ROOT
    pattern = re.compile(r"""["']--topology=?["']""")
    files = {p.resolve() for d in ("miles_topology", "miles")
             for p in (root / d).rglob("*.py")}
    found = [str(p.relative_to(root)) for p in files if pattern.search(p.read_text())]
    assert found == ["miles_topology/reading/flags.py"]


def test_unknown_flag_is_an_error_with_did_you_mean_and_cached(monkeypatch):
    """miles' parser refuses a flag it does not define; the suggestion comes from difflib
    over the whole surface, once per spelling (a check repeats its unknown flags)."""
    import difflib

    from miles_topology.reading import flags

    calls = []
    real = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches",
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    flags.suggest.cache_clear()
    argv = ["--colocate", "--sglang-mem-fraction-statik", "0.7",
            "--tensor-model-paralel-size", "2", "--opt-12-7", "5", "--lr", "1e-6"]
    first = flags.parse_flags(argv)
    assert [p.code for p in first.errors] == ["unknown-flag"] * 3 and first.warnings == []
    got = [p.message for p in first.errors]
    assert "did you mean --sglang-mem-fraction-static?" in got[0]  # an SGLang flag
    assert "did you mean --tensor-model-parallel-size?" in got[1]
    assert "did you mean" not in got[2]  # nothing close: no guess
    assert all(p.severity == "error" for p in first.errors)
    assert len(calls) == 3
    again = flags.parse_flags(argv)
    assert [p.message for p in again.errors] == got and len(calls) == 3


def test_deprecated_upstream_spellings_warn_and_pass():
    from miles_topology.reading.flags import parse_flags

    got = parse_flags(["--sglang-cuda-graph-bs", "4", "--sglang-prefill-round-robin-balance"])
    assert got.errors == []
    assert [p.code for p in got.warnings] == ["deprecated-flag"] * 2
    assert "now reads --sglang-cuda-graph-bs-decode" in got.warnings[0].message
    assert "has no effect" in got.warnings[1].message


def test_repeat_and_typo_point_at_the_token_that_wrote_them():
    from miles_topology.model.errors import Location
    from miles_topology.reading.flags import parse_flags
    from miles_topology.shell.records import Token

    words = [("--lr", 3), ("1e-6", 3), ("--tensor-model-paralel-size", 4), ("2", 4),
             ("--lr", 9), ("2e-6", 9), ("--colocate", 9)]
    got = parse_flags([Token(t, Location("run.sh", line)) for t, line in words])
    where = {p.code: str(p.location) for p in got.warnings + got.errors}
    assert where == {"unknown-flag": "run.sh:4", "flag-given-twice": "run.sh:9"}
    assert parse_flags([t for t, _ in words]).errors[0].location is None  # plain strings


@pytest.mark.slow
def test_the_trigram_shortlist_finds_what_full_difflib_finds():
    """suggest() compares only 24 shortlisted spellings: on near misses of the surface's
    flags (a letter dropped, doubled or swapped) it agrees with difflib over all of them."""
    import difflib

    from miles_topology.reading import flags

    every = flags._spellings()
    cases = []
    for k, f in enumerate(every[::41]):
        i = 2 + (k * 7) % max(1, len(f) - 3)
        cases += [f[:i] + f[i + 1:], f[:i] + f[i] + f[i:], f[:i] + f[i + 1] + f[i] + f[i + 2:]]
    for typo in cases:
        if typo in every:
            continue
        full = difflib.get_close_matches(typo, every, n=1, cutoff=0.8)
        assert flags.suggest(typo) == (full[0] if full else None), typo


def test_old_loader_paths_are_gone():
    """config.py and namespace.py moved into sources.py (PartialEnv into env.py); their
    shims are gone, so nothing imports the old paths."""
    import importlib.util

    import miles_topology

    package = Path(miles_topology.__file__).parent  # the checkout's, or the installed wheel's
    assert not [old for old in ("config", "namespace") if (package / f"{old}.py").exists()]
    assert not [old for old in ("config", "namespace")
                if importlib.util.find_spec(f"miles_topology.{old}") is not None]


def _undocumented():
    """Public Topology names without a doc: fields without a description, derived members
    without a docstring."""
    import inspect

    from pydantic import BaseModel

    from miles_topology.model.parts import PARTS

    out = []
    for cls in (Topology, *PARTS.values()):
        out += [n for n, f in cls.model_fields.items() if not (f.description or "").strip()]
        for name, obj in vars(cls).items():
            if name.startswith("_") or name in cls.model_fields or hasattr(BaseModel, name):
                continue
            fn = getattr(obj, "wrapped_property", obj)  # a computed field's property
            fn = getattr(fn, "fget", None) or getattr(fn, "func", None) or fn
            if callable(fn) and not inspect.getdoc(fn):
                out.append(name)
    return out


def test_every_public_name_is_documented_and_the_schema_says_it():
    from miles_topology.reading.sources import schema

    assert _undocumented() == []
    props = schema()["properties"]
    assert props["tp"]["description"] == (
        "Tensor-parallel size of the trainer, in GPUs, e.g. 4. "
        "(--tensor-model-parallel-size; group layout)")
    from miles_topology.model.parts import FIELDS

    assert all(FIELDS[n].description.split()[0] in p["description"]
               for n, p in props.items())


# ---- the flat face stays byte for byte ----------------------------------------------------

GOLDEN = ROOT / "tests" / "fixtures" / "topologies"
# The YAML fixtures; each one's `flags`, `show` and `check --format json` output was written
# by the flat Topology before it was split into parts (the schema's is docs/
# topology.schema.json, kept by test_cli.py), so the parts change nothing a user sees.
YAMLS = {
    "moe-2x4": "examples/moe-2x4.topology.yaml",
    "m0003-after": "tests/fixtures/migrations/m0003_consolidate/after.topology.yaml",
    "moe-every-part": "tests/fixtures/topologies/moe-every-part.topology.yaml",
    "fsdp-colocated": "tests/fixtures/topologies/fsdp-colocated.topology.yaml",
}


@pytest.mark.parametrize("command", ["flags", "show", "check"])
@pytest.mark.parametrize("name", YAMLS)
def test_yaml_fixture_output_is_kept_byte_for_byte(name, command, monkeypatch, capsys):
    from miles_topology.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("NNODES", raising=False)
    argv = [command, YAMLS[name]] if command != "check" else [command, "--format", "json",
                                                              YAMLS[name]]
    assert main(argv) == 0
    assert capsys.readouterr().out == (GOLDEN / f"{name}.{command}.golden").read_text()


def test_topology_has_at_most_20_public_names_of_its_own():
    """Fields by concern, docs/design.md section 5's contract, three views, the warnings: nothing
    that only forwards to a part or a view (a flat `topo.tp` is `topo.layout.tp`)."""
    from pydantic import BaseModel

    from miles_topology.model.parts import FIELDS

    topo = Topology.from_flags(["--colocate"])
    own = {n for n in dir(topo) if not n.startswith("_") and not hasattr(BaseModel, n)}
    assert len(own) <= 20, sorted(own)
    assert {"from_flags", "from_yaml", "world_size", "dp", "edp", "rank_groups",
            "local_experts", "placement", "engine_gpus", "stage_layers"} <= own
    assert not own & set(FIELDS) and topo.layout.tp == 1


def test_views_are_named_not_switched():
    topo = Topology.from_flags(["--actor-num-gpus-per-node", "4", "--expert-model-parallel-size",
                                "2", "--colocate"])
    assert topo.grid("expert").groups("ep") == topo.rank_groups("ep", expert=True)
    assert topo.grid("dense").groups("dp") == topo.rank_groups("dp") == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="'dense' and an 'expert' grid"):
        topo.grid(True)  # type: ignore[arg-type]


def test_validation_reads_no_file_and_sources_read_the_sglang_config(tmp_path):
    path = tmp_path / "sglang.yaml"
    path.write_text("sglang:\n  - name: default\n    server_groups:\n"
                    "      - {worker_type: regular, num_gpus: 4}\n")
    argv = ["--colocate", "--actor-num-gpus-per-node", "4", "--sglang-config", str(path)]
    assert Topology.from_flags(argv).rollout.engine_groups == (("default", "regular", 4, 0),)
    built = Topology(colocate=True, gpus_per_node=4, sglang_config=str(path))
    assert built.rollout.engine_groups is None  # the model itself opened nothing
    path.write_text("sglang: [1, 2]\n")  # YAML, but not of that form: the check is skipped
    assert Topology.from_flags(argv).rollout.engine_groups is None
    path.write_text("sglang: [\n")  # not YAML
    assert Topology.from_flags(argv).rollout.engine_groups is None
