"""One case per problem code: the code fires, and its message and fix carry the numbers."""

import pytest
from support import ROOT

from miles_topology import Topology, TopologyError

BASE = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate"]

ERRORS = [
    ("dense-grid-divisibility", ["--tensor-model-parallel-size", "3"],
     ["= 8 is not divisible", "tp*cp*pp = 3*1*1 = 3", "8/3 = 2.67"],
     ["--tensor-model-parallel-size 4 or 2", "3 nodes of 8 GPUs"]),
    ("expert-grid-divisibility",
     ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--pipeline-model-parallel-size",
      "2", "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1",
      "--num-experts", "64"],
     ["etp*ep*pp = 1*8*2 = 16", "8/16 = 0.50"],
     ["--expert-model-parallel-size 4 or 2", "2 nodes of 8 GPUs"]),
    ("experts-not-divisible-by-ep", ["--expert-model-parallel-size", "4", "--num-experts", "6"],
     ["6 experts", "ep = 4", "6/4 = 1.50"], ["--expert-model-parallel-size 2 or 1"]),
    ("heads-not-divisible-by-tp",
     ["--tensor-model-parallel-size", "4", "--num-attention-heads", "6"],
     ["6 attention heads", "tp = 4", "6/4 = 1.50"], ["--tensor-model-parallel-size 2 or 1"]),
    ("layers-not-divisible-by-pp",
     ["--pipeline-model-parallel-size", "4", "--num-layers", "10"],
     ["10 layers", "pp = 4", "10/4 = 2.50"], ["--pipeline-model-parallel-size 2 or 1"]),
    ("vpp-requires-pp", ["--num-virtual-stages-per-pipeline-rank", "2", "--num-layers", "8"],
     ["pp = 1"], ["drop --num-virtual-stages-per-pipeline-rank",
                  "--pipeline-model-parallel-size 2"]),
    ("rollout-gpus-not-multiple-of-engine",
     ["--actor-num-nodes", "1", "--rollout-num-gpus", "6", "--rollout-num-gpus-per-engine", "4",
      "--colocate=false"],
     ["6 rollout GPUs", "engines of 4 GPUs", "6/4 = 1.50"], ["--rollout-num-gpus 4 or 8"]),
    ("engine-straddles-nodes",
     ["--rollout-num-gpus", "12", "--rollout-num-gpus-per-engine", "3", "--colocate=false"],
     ["engine 2 of 3 GPUs", "nodes of 8 GPUs", "8 % 3 = 2"],
     ["--rollout-num-gpus-per-engine 4 or 2"]),
    ("sglang-dp-invalid",
     ["--rollout-num-gpus-per-engine", "4", "--sglang-dp-size", "3",
      "--sglang-enable-dp-attention"],
     ["engine DP 3 does not divide the engine's 4 GPUs"], ["--sglang-dp-size 4 or 2"]),
    ("sglang-ep-invalid",
     ["--rollout-num-gpus-per-engine", "4", "--sglang-ep-size", "3", "--num-experts", "8"],
     ["engine EP 3 must divide", "4 % 3 = 1", "8 % 3 = 2"], ["--sglang-ep-size 4 or 2"]),
    ("r3-requires-moe", ["--use-rollout-routing-replay", "--num-layers", "4"],
     ["no MoE layers", "no --num-experts"], ["drop --use-rollout-routing-replay"]),
    ("r3-router-fusion",
     ["--use-rollout-routing-replay", "--num-experts", "8", "--moe-router-fusion"],
     ["fused router top-k", "bypasses the replay"], ["remove --moe-router-fusion"]),
    ("flag-conflict", ["--sglang-ep-size", "2", "--sglang-expert-parallel-size", "4"],
     ["--sglang-ep-size 2 and --sglang-expert-parallel-size 4"],
     ["keep one of them"]),
    ("order-requires-equal-dp",
     ["--actor-num-gpus-per-node", "4", "--pipeline-model-parallel-size", "2",
      "--expert-model-parallel-size", "2", "--num-experts", "4", "--use-tp-pp-dp-mapping"],
     ["order tp-cp-ep-pp-dp", "dense dp = 4/(tp*cp*pp) = 2", "expert dp = 4/(etp*ep*pp) = 1"],
     ["drop --use-tp-pp-dp-mapping", "--expert-tensor-parallel-size 1 with "
      "--expert-model-parallel-size 1"]),
    ("moe-tp-requires-sp",
     ["--tensor-model-parallel-size", "2", "--num-experts", "8"],
     ["MoE model with tp = 2"], ["add --sequence-parallel"]),
    ("invalid-flag-value", ["--tensor-model-parallel-size", "None"],
     ["--tensor-model-parallel-size got 'None'", "whole number"],
     ["--tensor-model-parallel-size 1"]),
    ("rollout-batch-below-global-batch",
     ["--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--global-batch-size", "8"],
     ["2 x 2 = 4 samples do not fill one global batch of 8", "Not enough samples"],
     ["--global-batch-size 4 or 2"]),
    # a spelling miles renamed that no current miles, slime or SGLang defines: Megatron's
    # strict parse_args exits ("unrecognized arguments"); the rename is the fix
    ("unknown-flag", ["--rollout-num-gpus-per-node", "8"],
     ["--rollout-num-gpus-per-node is not a flag", "refuses it", "--num-gpus-per-node"],
     ["replace --rollout-num-gpus-per-node with --num-gpus-per-node", "miles-topology migrate"]),
    # miles_validate_args (miles 31f1ca9 utils/arguments.py): "Dynamic batch size is not
    # supported for bshd format"; "LoRA weight sync is not supported for p2p (RDMA) ..."
    ("dynamic-batch-bshd",
     ["--qkv-format", "bshd", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "4096"],
     ["not supported for bshd format"], ["--micro-batch-size N", "--qkv-format thd"]),
    ("lora-weight-transfer",
     ["--colocate=false", "--rollout-num-gpus", "8", "--lora-rank", "16",
      "--update-weight-transfer-mode", "p2p"],
     ["--lora-rank 16 with --update-weight-transfer-mode p2p", "not supported for p2p"],
     ["broadcast"]),
    ("global-batch-not-divisible-by-dp",
     ["--global-batch-size", "12", "--micro-batch-size", "1"],
     ["dp x micro_batch_size = 8 x 1 = 8", "12/8 = 1.50"], ["--global-batch-size 8 or 16"]),
]

WARNINGS = [
    ("etp-implied", ["--tensor-model-parallel-size", "2", "--sequence-parallel",
                     "--num-experts", "8"],
     ["etp = tp = 2"], ["--expert-tensor-parallel-size 2", "--expert-tensor-parallel-size 1"]),
    ("colocate-ignores-rollout-gpus", ["--rollout-num-gpus", "4"],
     ["--rollout-num-gpus 4 is ignored", "actor's 8 GPUs"], ["remove --rollout-num-gpus"]),
    ("tp-group-crosses-nodes",
     ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2", "--tensor-model-parallel-size",
      "4"],
     ["TP group of 4 ranks spans 2 nodes"], ["keep TP <= GPUs per node (2)"]),
    ("deprecated-flag", ["--sglang-cuda-graph-bs", "8"],
     ["--sglang-cuda-graph-bs is deprecated upstream", "--sglang-cuda-graph-bs-decode"],
     ["replace --sglang-cuda-graph-bs with --sglang-cuda-graph-bs-decode"]),
    ("r3-external-capture",
     ["--colocate=false", "--rollout-external", "--use-rollout-routing-replay",
      "--num-experts", "8"],
     ["external engines", "routed-expert capture"], ["--enable-return-routed-experts"]),
    ("sp-ignored", ["--sequence-parallel"], ["no effect with tp = 1"],
     ["remove --sequence-parallel"]),
    ("no-rollout-gpus", ["--colocate=false"], ["no rollout engine"], ["--rollout-num-gpus N"]),
    ("rollout-batch-not-multiple-of-global-batch",
     ["--rollout-batch-size", "6", "--n-samples-per-prompt", "2", "--global-batch-size", "8"],
     ["6 x 2 = 12 samples", "12/8 = 1.50", "trims every rollout to 8 samples, dropping 4"],
     ["--global-batch-size 6 or 12"]),
    ("actor-node-shape-ignored", ["--actor-num-gpus-per-node", "16", "--num-gpus-per-node", "8"],
     ["1 node(s) x 16 GPUs", "fill 2 node(s) of 8 GPUs"],
     ["--actor-num-gpus-per-node 8 with --actor-num-nodes 2"]),
]


def _only(problems, code):
    found = [p for p in problems if p.code == code]
    assert found, [p.code for p in problems]
    return found[0]


@pytest.mark.parametrize("code,argv,message,fix", ERRORS, ids=[c[0] for c in ERRORS])
def test_error_message_and_fix(code, argv, message, fix):
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(BASE + argv)
    p = _only(info.value.problems, code)
    assert p.severity == "error" and p.flags
    for text in message:
        assert text in p.message
    for text in fix:
        assert text in p.fix


@pytest.mark.parametrize("code,argv,message,fix", WARNINGS, ids=[c[0] for c in WARNINGS])
def test_warning_message_and_fix(code, argv, message, fix):
    topo = Topology.from_flags(BASE + argv)
    p = _only(topo.warnings, code)
    assert p.severity == "warning"
    for text in message:
        assert text in p.message
    for text in fix:
        assert text in p.fix


def test_every_design_code_is_covered():
    design = {
        "dense-grid-divisibility", "expert-grid-divisibility", "experts-not-divisible-by-ep",
        "heads-not-divisible-by-tp", "layers-not-divisible-by-pp", "vpp-requires-pp",
        "rollout-gpus-not-multiple-of-engine", "engine-straddles-nodes", "sglang-dp-invalid",
        "sglang-ep-invalid", "gpu-budget-exceeded", "r3-requires-moe", "r3-router-fusion",
        "flag-conflict", "etp-implied", "colocate-ignores-rollout-gpus", "tp-group-crosses-nodes",
        "deprecated-flag",
    }
    dedicated = {"gpu-budget-exceeded"}  # test_gpu_budget_with_cluster_size
    assert design <= {c[0] for c in ERRORS + WARNINGS} | dedicated


def test_all_problems_collected_at_once():
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(BASE + ["--tensor-model-parallel-size", "3", "--num-experts", "6",
                                    "--expert-model-parallel-size", "4", "--sequence-parallel",
                                    "--num-attention-heads", "4"])
    codes = set(info.value.codes)
    assert {"dense-grid-divisibility", "experts-not-divisible-by-ep",
            "heads-not-divisible-by-tp"} <= codes
    assert isinstance(info.value, ValueError)


def test_sglang_dp_needs_dp_attention():
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(BASE + ["--rollout-num-gpus-per-engine", "4", "--sglang-dp-size", "2"])
    assert "--sglang-enable-dp-attention" in _only(info.value.problems, "sglang-dp-invalid").fix


def test_gpu_budget_with_cluster_size():
    with pytest.raises(TopologyError) as info:
        Topology(nodes=2, gpus_per_node=8, rollout_gpus=16, cluster_nodes=3)
    p = _only(info.value.problems, "gpu-budget-exceeded")
    assert "needs 4 nodes of 8 GPUs (actor 16 + rollout 16 GPUs" in p.message
    assert "the cluster has 3" in p.message


def test_uneven_stages_with_remainder():
    argv = BASE + ["--pipeline-model-parallel-size", "4", "--num-layers", "10",
                   "--decoder-first-pipeline-num-layers"]
    assert Topology.from_flags(argv + ["1"]).stages.counts == (1, 3, 3, 3)
    with pytest.raises(TopologyError) as info:
        Topology.from_flags(argv + ["2"])
    p = _only(info.value.problems, "layers-not-divisible-by-pp")
    assert "(2 layers), 8 layers remain for 3 middle stage(s)" in p.message


# ---- the problem code registry ------------------------------------------------------


def _emitted_codes(extra=()):
    """Every code literal the package can emit: the first argument of Problem(...), Note(...)
    and the check helpers, and the first item of the script reader's note tuples."""
    import ast

    root = ROOT
    files = {p.resolve() for d in ("miles_topology", "miles")
             for p in (root / d).rglob("*.py") if "fixtures" not in p.parts} | set(extra)
    makers = {"Problem", "Note", "_found", "_skip", "_problem", "_note"}
    found = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            first = None
            if isinstance(node, ast.Call) and node.args:
                fn = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else None
                if fn in makers:
                    first = node.args[0]
                elif fn == "append" and isinstance(node.args[0], ast.Tuple) and \
                        len(node.args[0].elts) == 4:  # the bash reader's (code, line, msg, fix)
                    first = node.args[0].elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(first.value, path.name)
    return found


def test_every_code_the_package_can_emit_is_registered():
    from miles_topology.codes import CODES

    found = _emitted_codes()
    assert len(found) >= 30  # the scan sees the checks, flags, model and script reader
    assert found["gpu-budget-exceeded"] and "flag-conflict" in found  # miles/ray, flags.py
    missing = {c: f for c, f in found.items() if c not in CODES}
    assert not missing, f"declare these (a rule's codes=, or codes.declare): {missing}"
    from miles_topology.codes import SEVERITIES

    assert all(c.severity in SEVERITIES and c.summary and c.why and c.by
               for c in CODES.values())


def _rule_codes(path):
    """(rule name, codes its body reports, codes its decorator declares or uses) per rule."""
    import ast

    out = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        deco = [d for d in node.decorator_list if isinstance(d, ast.Call)
                and getattr(d.func, "id", None) == "rule"]
        if not deco:
            continue
        said = set()
        for kw in deco[0].keywords:
            if kw.arg == "codes":
                said |= {k.value for k in kw.value.keys}
            if kw.arg == "uses":
                said |= {e.value for e in kw.value.elts}
        body = {c.args[0].value for c in ast.walk(node) if isinstance(c, ast.Call)
                and getattr(c.func, "id", None) in ("_found", "_skip", "Problem")
                and c.args and isinstance(c.args[0], ast.Constant)}
        out.append((node.name, body, said))
    return out


# The order rules ran in when it was kept by hand (checks.ORDER): registration order keeps it,
# so problems are reported in the same order as before.
ORDER = (
    "dense_grid_divides", "expert_grid_divides", "pipeline_groups_agree",
    "experts_by_ep", "moe_pattern_length", "heads_by_tp", "layers_by_pp", "vpp_needs_pp",
    "moe_needs_sp",
    "whole_engines", "sglang_dp", "sglang_ep", "sglang_overridden", "fits_cluster",
    "replay_prerequisites", "batch_sizes",
    "etp_stated", "rollout_gpus_given", "groups_within_nodes",
    "critic", "fsdp_mesh",
    "weight_transfer", "eval_engines", "sglang_config_groups",
)


def test_rules_run_in_registration_order():
    from miles_topology.codes import RULES

    assert tuple(fn.__name__ for fn in RULES) == ORDER


def test_each_rule_declares_every_code_it_reports():
    rules = [r for p in (ROOT / "miles_topology" / "model" / "checks")
             .glob("*.py") for r in _rule_codes(p)]
    assert sorted(name for name, _, _ in rules) == sorted(ORDER)
    bad = {name: body - said for name, body, said in rules if body - said}
    assert not bad, f"add to the rule's @rule(codes=...) or uses=: {bad}"


def test_rules_are_not_named_like_topology_members():
    from miles_topology.codes import RULES
    from miles_topology.model.placement import Placement

    assert len(RULES) >= 20
    assert not [f.__name__ for f in RULES
                if hasattr(Topology, f.__name__) or hasattr(Placement, f.__name__)]


def test_a_rule_reporting_an_undeclared_code_is_caught(tmp_path):
    new = tmp_path / "rule.py"
    new.write_text("@rule(source='s', codes={'a-code': ('error', 'w')})\n"
                   "def r(topo):\n    yield _found('a-code', 'm', 'f')\n"
                   "    yield _found('other-code', 'm', 'f')\n")
    [(name, body, said)] = _rule_codes(new)
    assert body - said == {"other-code"}


def test_a_code_declared_twice_is_refused():
    from miles_topology.codes import declare

    with pytest.raises(ValueError, match="declared twice"):
        declare("a test", {"dense-grid-divisibility": ("error", "again")})
    with pytest.raises(ValueError, match="severity"):
        declare("a test", {"made-up-code-x": ("fatal", "w")})
    with pytest.raises(ValueError, match="severity"):  # skipped is a status, not a severity
        declare("a test", {"made-up-code-y": ("skipped", "w")})


def _hand_flags(path):
    """Fields' own flags spelled by hand in a module's strings (docstrings, comments and a
    code's example aside: an example is input, and the test above runs it; an alias, quoted
    as such, is not a field's flag)."""
    import ast
    import re

    from miles_topology.model.parts import FIELDS, flag_of

    own = {flag_of(n) for n in FIELDS} - set(FIELDS)
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    docs |= {id(d.values[i].elts[2]) for d in ast.walk(tree) if isinstance(d, ast.Dict)
             for i in range(len(d.values)) if isinstance(d.values[i], ast.Tuple)
             and len(d.values[i].elts) == 3}  # (severity, summary, example) of a code
    return {m for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docs
            and isinstance(n.value, str)
            for m in re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*[a-z0-9]", n.value) if m in own}


def test_rule_messages_quote_flags_through_the_field_table(tmp_path):

    root = ROOT / "miles_topology" / "model" / "checks"
    spelled = {p.name: _hand_flags(p) for p in root.glob("*.py") if _hand_flags(p)}
    assert not spelled, f"quote these as F.<field> (checks/base.py): {spelled}"
    bad = tmp_path / "bad.py"
    bad.write_text('"""Doc: --tensor-model-parallel-size is fine here."""\n'
                   'MSG = "try --tensor-model-parallel-size 2 or --not-ours"\n')
    assert _hand_flags(bad) == {"--tensor-model-parallel-size"}


def test_registry_catches_an_unregistered_code(tmp_path):
    """The scan above sees a new check's code that nobody registered."""
    from miles_topology.codes import CODES

    new = tmp_path / "new_check.py"
    new.write_text("def rule(topo):\n    yield _found('made-up-code', 'm', 'f', 'tp')\n"
                   "notes.append(('made-up-note', 1, 'm', 'f'))\n")
    found = _emitted_codes([new])
    assert {"made-up-code", "made-up-note"} <= set(found) and "made-up-code" not in CODES


def test_problem_codes_doc_is_generated_from_the_registry():

    from miles_topology.codes import CODES, markdown
    from miles_topology.migrations import fix  # noqa: F401  (the fixers mark their codes)

    doc = (ROOT / "docs" / "problem-codes.md").read_text()
    assert doc == markdown(), "regenerate: python tools/gen_codes.py > docs/problem-codes.md"
    assert all(f"| [`{code}`](#{code}) |" in doc and f"\n## {code}\n" in doc for code in CODES)


def test_every_rule_code_has_a_record_and_its_example_reports_it():
    """Each code a rule declares carries its why (the rule's docstring), its upstream source
    and an example; an example written as flags reports that very code."""
    import shlex

    from miles_topology.codes import CODES, RULES

    rule_codes = [c for fn in RULES for c in fn.declares]
    assert len(rule_codes) >= 40
    for code in rule_codes:
        c = CODES[code]
        assert c.why and c.source and c.example, code
        if not c.example.startswith("--"):  # a YAML-only field (cluster_nodes, FSDP sizes)
            continue
        try:
            topo = Topology.from_flags(shlex.split(c.example))
            found = list(topo.warnings)
        except TopologyError as e:
            found = e.problems + e.warnings
        assert code in [p.code for p in found], (code, c.example)


def test_no_report_site_restates_its_codes_severity():
    """A code's severity is its record's (codes/): a report names it only to say `skipped`
    (a rule that could not decide); the checks report through one `_found`."""
    import ast

    said = []
    for path in (ROOT / "miles_topology").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Problem"):
                continue
            given = [*node.args[4:5], *(k.value for k in node.keywords if k.arg == "severity")]
            said += [f"{path.name}:{node.lineno}" for g in given
                     if isinstance(g, ast.Constant) and g.value != "skipped"]
    assert said == []
