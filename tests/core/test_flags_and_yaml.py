"""Reading the flag surface and topology YAML files."""

import pytest
from pydantic import ValidationError
from support import ROOT

from miles_topology import Topology, TopologyError
from miles_topology.sources import read_flags


def test_real_defaults():
    topo = Topology.from_flags(["--colocate"])
    assert (topo.nodes, topo.gpus_per_node, topo.node_gpus) == (1, 8, 8)
    assert (topo.tp, topo.pp, topo.cp, topo.ep, topo.etp) == (1, 1, 1, 1, 1)
    assert topo.engine_size == 1 and topo.num_engines == 8
    assert topo.order == "tp-cp-ep-dp-pp"


def test_unknown_flags_pass_through_in_order():
    argv = ["--lr", "1e-6", "--colocate", "--hf-checkpoint", "/x", "--use-wandb", "--num-experts",
            "8"]
    read = read_flags(argv)
    assert read.passthrough == ["--lr", "1e-6", "--hf-checkpoint", "/x", "--use-wandb"]
    assert read.topology.experts == 8


def test_tp_pp_dp_mapping_selects_order():
    assert Topology.from_flags(["--colocate", "--use-tp-pp-dp-mapping"]).order == "tp-cp-ep-pp-dp"


def test_etp_implied_and_explicit():
    argv = ["--colocate", "--tensor-model-parallel-size", "2", "--sequence-parallel",
            "--num-experts", "8"]
    implied = Topology.from_flags(argv)
    assert implied.etp == 2 and [w.code for w in implied.warnings] == ["etp-implied"]
    explicit = Topology.from_flags(argv + ["--expert-tensor-parallel-size", "2"])
    assert explicit.etp == 2 and not explicit.warnings


def test_last_occurrence_wins_and_equals_syntax():
    topo = Topology.from_flags(["--colocate", "--tensor-model-parallel-size", "4",
                                "--tensor-model-parallel-size=2"])
    assert topo.tp == 2


def test_missing_value_is_an_error_not_a_traceback():
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(["--colocate", "--expert-model-parallel-size"])
    assert info.value.codes == ["invalid-flag-value"]
    assert "needs a value" in info.value.problems[0].message


def test_renamed_ep_moe_sets_engine_ep():
    topo = Topology.from_flags(["--colocate", "--rollout-num-gpus-per-engine", "4",
                                "--sglang-enable-ep-moe", "--num-experts", "8"])
    assert topo.engine_ep == 4
    assert [w.code for w in topo.warnings] == ["deprecated-flag"]
    assert "--sglang-ep-size N" in topo.warnings[0].message


def test_vpp_from_layers_per_virtual_stage():
    topo = Topology.from_flags(["--colocate", "--pipeline-model-parallel-size", "2",
                                "--num-layers", "8", "--num-layers-per-virtual-pipeline-stage",
                                "2"])
    assert topo.chunks == 2
    assert topo.stage_layers(0, 0) == (0, 1) and topo.stage_layers(1, 0) == (2, 3)
    assert topo.stage_layers(0, 1) == (4, 5) and topo.stage_layers(1, 1) == (6, 7)
    assert topo.megatron_args()["virtual_pipeline_model_parallel_size"] == 2


def test_moe_layer_freq_list_expression_is_parsed_not_evaluated():
    topo = Topology.from_flags(["--colocate", "--num-layers", "6", "--num-experts", "4",
                                "--moe-layer-freq", "([0]*2+[1]*4)",
                                "--pipeline-model-parallel-size", "2"])
    assert topo.moe_pattern == (False, False, True, True, True, True)
    assert topo.replay_layers(0) == (2,) and topo.replay_layers(1) == (3, 4, 5)
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(["--colocate", "--moe-layer-freq", "__import__('os').system('x')"])
    assert info.value.codes == ["invalid-flag-value"]


def test_yaml_round_trip_and_dotlist(tmp_path):
    topo = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                                "--expert-model-parallel-size", "2", "--num-experts", "8",
                                "--colocate", "--moe-layer-freq", "[1,0,1,0]", "--num-layers", "4"])
    path = tmp_path / "t.yaml"
    path.write_text(topo.to_yaml())
    assert Topology.from_yaml(str(path)) == topo
    assert Topology.from_yaml(str(path), ["ep=4"]).ep == 4


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
    assert same.topology.ep == 2
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
    assert not isinstance(info.value, ValidationError) and topo.tp == 1
    assert {topo: 1}[Topology.from_flags(["--colocate"])] == 1


def test_uneven_first_last_with_vpp_matches_megatron_offsets():
    topo = Topology(nodes=1, gpus_per_node=4, pp=4, vpp=2, layers=20, first_stage_layers=2,
                    last_stage_layers=2, colocate=True)
    assert topo.stage_counts == (2, 8, 8, 2)
    # chunk v of every stage precedes chunk v+1 of any stage
    assert topo.stage_layers(0, 0) == (0,) and topo.stage_layers(1, 0) == (1, 2, 3, 4)
    assert topo.stage_layers(3, 0) == (9,) and topo.stage_layers(0, 1) == (10,)
    every = sorted(x for p in range(4) for v in range(2) for x in topo.stage_layers(p, v))
    assert every == list(range(20))


def test_engines_spanning_whole_nodes_and_disaggregated_start():
    topo = Topology(nodes=2, gpus_per_node=4, node_gpus=4, rollout_gpus=8, engine_size=8)
    assert topo.num_engines == 1 and topo.nodes_needed == 4
    assert topo.engine_gpus(0) == tuple((n, g) for n in (2, 3) for g in range(4))


def test_yaml_reads_a_given_env_instead_of_the_process_env(tmp_path, monkeypatch):
    from miles_topology.errors import InputError

    path = tmp_path / "t.yaml"
    path.write_text("nodes: ${oc.env:NNODES,2}\ngpus_per_node: ${oc.env:GPN}\ncolocate: true\n")
    monkeypatch.setenv("NNODES", "5")
    monkeypatch.setenv("GPN", "8")
    assert read_flags(["--topology", str(path)], {"GPN": "4"}).topology.world_size == 8
    assert read_flags(["--topology", str(path)]).topology.world_size == 40
    with pytest.raises(InputError, match="GPN.*pass --env GPN=VALUE"):
        read_flags(["--topology", str(path)], {})


def test_rank_order_switch_off_keeps_the_default():
    assert Topology.from_flags(["--colocate", "--use-tp-pp-dp-mapping=false"]).order == (
        "tp-cp-ep-dp-pp")


# ---- one table per fact -------------------------------------------------------------


def test_explicit_etp_round_trips_through_yaml(tmp_path):
    from miles_topology.sources import to_yaml

    for given in (dict(etp=2), dict(etp=1), {}):
        topo = Topology(nodes=1, gpus_per_node=8, tp=2, sp=True, ep=2, experts=8, colocate=True,
                        **given)
        path = tmp_path / "t.yaml"
        path.write_text(to_yaml(topo))
        back = Topology.from_yaml(str(path))
        assert back == topo and back.etp == topo.etp
        assert back.etp_implied == topo.etp_implied == (not given)
        assert [w.code for w in back.warnings] == [w.code for w in topo.warnings]


def test_etp_implied_is_derived_not_a_field():
    assert "etp_implied" not in Topology.model_fields
    with pytest.raises(TopologyError) as info:
        Topology(etp_implied=False, colocate=True)
    assert info.value.codes == ["unknown-field"]


def test_model_validate_and_copy_validate_and_raise_topology_error():
    good = Topology.model_validate({"nodes": 1, "gpus_per_node": 8, "tp": 2, "colocate": True})
    assert good.dp == 4 and good.etp == 2
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
    assert wider.etp == 4 and wider.etp_implied  # an implied etp follows the new tp
    assert good.model_copy(update={"etp": 1}).etp_implied is False


def test_invalid_tp_is_one_problem_not_two():
    with pytest.raises(TopologyError) as info:
        Topology(tp="x", colocate=True)
    assert info.value.codes == ["invalid-flag-value"]


def test_every_field_has_a_group_and_every_flag_reads_its_field():
    from miles_topology.flags import ALIASES, RENAMED, field_of, flag_of, is_switch, known
    from miles_topology.model import GROUPS, facts, fields_in

    assert sorted(n for g in GROUPS for n in fields_in(g)) == sorted(Topology.model_fields)
    for name in Topology.model_fields:
        flag = facts(name)["flag"]
        if flag is None:
            continue
        assert known(flag) and field_of(flag) == name and flag_of(name) == flag
        assert is_switch(flag) == (Topology.model_fields[name].annotation is bool
                                   or "switch" in facts(name))
    for flag, name in ALIASES.items():
        assert field_of(flag) == name and flag_of(name) != flag
    assert set(RENAMED) <= {f for f in RENAMED if known(f)}
    assert not known("--lr") and field_of("--lr") is None


def test_parse_flags_keeps_the_token_objects_that_set_each_field():
    from dataclasses import dataclass

    from miles_topology.flags import parse_flags

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
    from miles_topology.errors import InputError

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
    assert found == ["miles_topology/flags.py"]


def test_unknown_flag_is_an_error_with_did_you_mean_and_cached(monkeypatch):
    """miles' parser refuses a flag it does not define; the suggestion comes from difflib
    over the whole surface, once per spelling (a check repeats its unknown flags)."""
    import difflib

    from miles_topology import flags

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
    from miles_topology.flags import parse_flags

    got = parse_flags(["--sglang-cuda-graph-bs", "4", "--sglang-prefill-round-robin-balance"])
    assert got.errors == []
    assert [p.code for p in got.warnings] == ["deprecated-flag"] * 2
    assert "now reads --sglang-cuda-graph-bs-decode" in got.warnings[0].message
    assert "has no effect" in got.warnings[1].message


def test_repeat_and_typo_point_at_the_token_that_wrote_them():
    from miles_topology.flags import parse_flags
    from miles_topology.shell.records import Source, Token

    words = [("--lr", 3), ("1e-6", 3), ("--tensor-model-paralel-size", 4), ("2", 4),
             ("--lr", 9), ("2e-6", 9), ("--colocate", 9)]
    got = parse_flags([Token(t, Source("run.sh", line)) for t, line in words])
    where = {p.code: str(p.location) for p in got.warnings + got.errors}
    assert where == {"unknown-flag": "run.sh:4", "flag-given-twice": "run.sh:9"}
    assert parse_flags([t for t, _ in words]).errors[0].location is None  # plain strings


@pytest.mark.slow
def test_the_trigram_shortlist_finds_what_full_difflib_finds():
    """suggest() compares only 24 shortlisted spellings: on near misses of the surface's
    flags (a letter dropped, doubled or swapped) it agrees with difflib over all of them."""
    import difflib

    from miles_topology import flags

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


def test_old_loader_paths_warn_and_still_work():
    """config.py and namespace.py moved into sources.py: old imports work with a warning;
    PartialEnv (now env.py) is still importable from config without one."""
    import warnings

    from miles_topology import config, env, namespace, sources

    with pytest.warns(DeprecationWarning, match="sources.to_yaml"):
        assert config.to_yaml is sources.to_yaml
    with pytest.warns(DeprecationWarning, match="sources.fields_from"):
        assert namespace.fields_from is sources.fields_from
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from miles_topology.config import PartialEnv
    assert PartialEnv is env.PartialEnv
    with pytest.raises(AttributeError):
        config.no_such_name  # noqa: B018


def _undocumented():
    """Public Topology names without a doc: fields without a description, derived members
    without a docstring."""
    import inspect

    from pydantic import BaseModel

    out = [n for n, f in Topology.model_fields.items() if not (f.description or "").strip()]
    for name, obj in vars(Topology).items():
        if name.startswith("_") or name in Topology.model_fields or hasattr(BaseModel, name):
            continue
        fn = getattr(obj, "wrapped_property", obj)  # a computed field's property
        fn = getattr(fn, "fget", None) or getattr(fn, "func", None) or fn
        if callable(fn) and not inspect.getdoc(fn):
            out.append(name)
    return out


def test_every_public_name_is_documented_and_the_schema_says_it():
    from miles_topology.sources import schema

    assert _undocumented() == []
    props = schema()["properties"]
    assert props["tp"]["description"] == (
        "Tensor-parallel size of the trainer, in GPUs, e.g. 4. "
        "(--tensor-model-parallel-size; group layout)")
    assert all(Topology.model_fields[n].description.split()[0] in p["description"]
               for n, p in props.items())
