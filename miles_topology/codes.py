"""Every problem code, its kind and when it is reported: the one registry.

docs/problem-codes.md is generated from it (`python -m miles_topology.codes > docs/...`;
a test keeps the two equal), and a test asserts that every code the package can emit is
here. Codes are stable kebab-case strings: add rows, never rename one.
"""

from __future__ import annotations

from functools import cache

# code -> (kind, when). kind: error (the real stack refuses, crashes, hangs or trains wrongly),
# warning (it silently changes or drops something), note (the script reader: bash runs
# something other than what the script appears to say), skipped (a fact the rule needs is
# unknown; absence of a flag is not knowledge when the real stack reads it elsewhere).
CODES: dict[str, tuple[str, str]] = {
    # the first set (DESIGN.md section 5)
    "dense-grid-divisibility": ("error", "world size not divisible by tp*cp*pp"),
    "expert-grid-divisibility": ("error", "world size not divisible by etp*ep*pp"),
    "experts-not-divisible-by-ep": ("error", "num_experts % ep != 0"),
    "ep-requires-moe": (
        "error", "expert parallel > 1 with the model shape given but no `--num-experts` "
        "(Megatron asserts num_experts is set)"),
    "heads-not-divisible-by-tp": (
        "error", "attention heads % tp != 0, or query groups neither a multiple nor a divisor "
        "of tp"),
    "layers-not-divisible-by-pp": ("error", "layers cannot be split over pp (and vpp) as given"),
    "vpp-requires-pp": ("error", "virtual pipeline given with pp == 1"),
    "rollout-gpus-not-multiple-of-engine": ("error", "rollout GPUs % GPUs per engine != 0"),
    "engine-straddles-nodes": (
        "error", "an engine would span a node boundary in a way the engine cannot run (TP not "
        "tiling the nodes it spans); engines may start mid-node where miles' packed placement "
        "puts them"),
    "sglang-dp-invalid": (
        "error", "engine DP does not divide engine TP, or DP > 1 without DP attention"),
    "sglang-ep-invalid": ("error", "engine EP does not divide engine TP or the expert count"),
    "gpu-budget-exceeded": (
        "error", "miles' one packed placement group (actor + rollout + eval GPUs; the critic "
        "shares the actor's) needs more nodes than the cluster given has"),
    "r3-requires-moe": (
        "error", "routing replay asked for on a model with no MoE layers: with rollout R3, "
        "SGLang's routed-expert capturer reads `num_experts_per_tok` from the HF config, so "
        "the engines fail at start-up (skipped when the model shape is read from the "
        "checkpoint: FSDP, or no model flags given)"),
    "r3-router-fusion": ("error", "routing replay with fused router top-k, which bypasses replay"),
    "flag-conflict": (
        "error", "the same size given two different ways (flag vs YAML, alias vs name)"),
    "etp-implied": ("warning", "expert TP not given and tp > 1, so Megatron uses etp = tp"),
    "colocate-ignores-rollout-gpus": ("warning", "`--rollout-num-gpus` given with `--colocate`"),
    "tp-group-crosses-nodes": ("warning", "a TP (or ETP) group spans more than one node"),
    "deprecated-flag": (
        "warning", "a renamed flag was used, or one upstream deprecates (SGLang renamed or "
        "ignores it); the message names the new one"),
    # added since
    "invalid-flag-value": (
        "error", "a flag's value is not a whole number (`None`), or is missing"),
    "unknown-field": ("error", "a topology YAML has a key that is not a field"),
    "moe-tp-requires-sp": ("error", "MoE model with TP > 1 and no `--sequence-parallel`"),
    "order-requires-equal-dp": (
        "error", "`--use-tp-pp-dp-mapping` with pp > 1 and dense dp != expert dp "
        "(megatron-core refuses it)"),
    "rollout-batch-not-multiple-of-global-batch": (
        "warning", "rollout batch x samples per prompt % global batch != 0: miles trims the "
        "remainder (an error when not one global batch is filled; skipped with "
        "`--disable-rollout-trim-samples`)"),
    "global-batch-not-divisible-by-dp": (
        "error", "global batch % (dp x micro batch) != 0 (no dynamic batch)"),
    "moe-layer-freq-length": (
        "error", "a list `--moe-layer-freq` whose length is not `--num-layers` (megatron-core "
        "asserts one entry per layer when it builds the layer specs)"),
    "missing-model-fact": ("error", "a derivation needs a model fact that was not given"),
    "sp-ignored": ("warning", "`--sequence-parallel` with TP 1"),
    "r3-external-capture": (
        "warning", "R3 with `--rollout-external`: a server started without "
        "`--enable-return-routed-experts` returns no routed experts, and the first training "
        "step fails after a full rollout"),
    "no-rollout-gpus": ("warning", "neither `--colocate` nor `--rollout-num-gpus`"),
    "unreadable": (
        "error", "an input cannot be read at all (missing file, bad YAML, bash syntax): exit 2; "
        "in `--format github`/`sarif` and batch output"),
    # flags of miles HEAD and where upstream silently changes something (issue 10)
    "unknown-flag": (
        "error", "a flag miles' train.py does not define (miles, Megatron-LM, SGLang as "
        "`--sglang-*`: miles_topology/surface.json), or a short alias such as `-tp`: its "
        "parser exits at start-up; the message names the closest flag of the surface"),
    "flag-given-twice": (
        "warning", "one flag given twice with different values on a command line; miles' "
        "parser keeps the last"),
    "num-gpus-per-node-default": (
        "warning", "the actor spans nodes of fewer than 8 GPUs, an engine is larger than the "
        "actor's GPUs per node, and `--num-gpus-per-node` is not given: miles sizes that "
        "engine's processes for nodes of 8"),
    "actor-node-shape-ignored": (
        "warning", "`--actor-num-gpus-per-node` differs from `--num-gpus-per-node`: the packed "
        "placement group fills whole nodes in order regardless"),
    "sglang-tp-overridden": (
        "warning", "`--sglang-tp-size` differs from `--rollout-num-gpus-per-engine`, which "
        "miles writes over it"),
    "sglang-ep-overridden": (
        "warning", "`--sglang-moe-a2a-backend deepep` (or mooncake, ascend_fuseep, flashinfer, "
        "mori) makes SGLang set engine EP = engine TP, ignoring the `--sglang-ep-size` given"),
    "critic-placement-overridden": (
        "warning", "PPO critic: `--critic-num-*` differ from the actor's, which miles writes "
        "over them (the critic shares the actor's placement group)"),
    "ppo-requires-megatron": (
        "error", "`--advantage-estimator ppo` with `--train-backend fsdp`"),
    "fsdp-mesh-divisibility": ("error", "FSDP: world % `--dp-replicate-size` != 0"),
    "fsdp-cp-unsupported": (
        "error", "`--train-backend fsdp` with `--context-parallel-size` > 1 (miles asserts "
        "cp == 1)"),
    "fsdp-ignores-megatron-sizes": (
        "warning", "`--train-backend fsdp` with Megatron sizes (TP, PP, EP, ...) it ignores, "
        "given other than by a miles command-line flag (a topology YAML, a Python caller)"),
    "fsdp-unknown-flag": (
        "error", "`--train-backend fsdp` with a Megatron-only flag on the command line "
        "(`--tensor-model-parallel-size`, `--pipeline-model-parallel-size`, "
        "`--expert-model-parallel-size`, `--expert-tensor-parallel-size`, virtual pipeline, "
        "uneven stages, `--sequence-parallel`, `--use-tp-pp-dp-mapping`), whatever its value: "
        "miles' FSDP parser does not define it and exits (unrecognized arguments)"),
    "fsdp-flag-ignored": ("warning", "`--dp-replicate-size` without `--train-backend fsdp`"),
    "transfer-mode-invalid": (
        "error", "`--update-weight-transfer-mode p2p`/`disk-delta` with `--colocate` or "
        "`--prefill-num-servers`"),
    "eval-gpus-not-multiple-of-engine": (
        "error", "`--eval-num-gpus` % `--eval-num-gpus-per-engine` != 0"),
    "eval-gpus-invalid": (
        "error", "`--eval-num-gpus` with external rollout engines or `--colocate`"),
    "engine-groups-invalid": (
        "error", "`--prefill-num-servers` leaves no decode engine or is combined with "
        "`--sglang-config`/external engines; `--sglang-config` groups do not add up to "
        "rollout + eval GPUs, or, with `--eval-num-gpus`, no model named `eval` holds them "
        "(not checked when no engine starts: `--debug-train-only` without eval GPUs)"),
    "engine-groups-unread": (
        "skipped", "`--sglang-config` cannot be read here, so its engine groups are not checked"),
    "steps-per-rollout-conflict": (
        "error", "`--num-steps-per-rollout` and `--global-batch-size` disagree"),
    "dynamic-global-batch-requires-dynamic-batch": (
        "error", "`--use-dynamic-global-batch-size` without `--use-dynamic-batch-size`"),
    "dynamic-batch-requires-max-tokens": (
        "error", "`--use-dynamic-batch-size` without `--max-tokens-per-gpu`"),
    # the script reader (check SCRIPT.sh); notes are reported as warnings
    "missing-line-continuation": (
        "error", "a line starts with flags (or an unresolved `${A[@]}` and flags) but the line "
        "above does not end in `\\`: bash drops them from the launch"),
    "space-after-line-continuation": (
        "note", "a line ends in `\\` followed by spaces, so the command ends there"),
    "crlf-line-ends": (
        "warning", "the script has CR LF line ends: bash keeps each CR in the line's last word, "
        "so flags arrive as `--flag\\r` and `\\` no longer continues a line"),
    "sourced-from-checkout": (
        "note", "a file sourced by an absolute path that does not exist here is read from the "
        "same path inside the script's checkout"),
    "source-cycle": ("note", "a file is sourced again while it is being sourced"),
    "no-launch-command": (
        "note", "no training launch (`train.py`/`train_async.py` by python, `torchrun` or `ray "
        "job submit`); converters, servers and `run.py` wrappers do not count: exit 2"),
    "several-launch-commands": ("note", "more than one launch command; the last one is read"),
    "conditional-launch": ("note", "the launch command runs inside an if/case/loop/&&"),
}

KINDS = ("error", "warning", "note", "skipped")  # skipped: a needed fact is unknown

# Where each code's page is: a row of docs/problem-codes.md, anchored by its code. The
# package's "Documentation" project URL (pyproject [project.urls]) when it has one, else a
# reference relative to the repository root; SARIF helpUri carries it.
PAGES = "docs/problem-codes.md"


@cache
def _pages() -> str:
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("miles-topology").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            return url.strip()
    return PAGES


def page_uri(code: str) -> str:
    return f"{_pages()}#{code}"


def page(code: str) -> str:
    """What `miles-topology rule CODE` prints: the code's kind, when it is reported, and
    how to turn it off."""
    kind, when = CODES[code]
    exits = {"error": "fails the check (exit 1)", "skipped": "is reported as skipped"}.get(
        kind, "is reported; the check still passes")
    return "\n".join([
        f"{code} ({kind})", "", f"Reported when: {when}.", f"A report of it {exits}.", "",
        "Turn it off:",
        f"  on one line       # miles-topology: disable={code}   (on the line or the line "
        "before)",
        f"  in one file       # miles-topology: disable-file={code}",
        f"  in a run          miles-topology check --ignore {code} ...",
        f"  in a project      [tool.miles-topology] ignore = [\"{code}\"]  (pyproject.toml)",
        "", f"Page: {page_uri(code)}", ""])


def markdown() -> str:
    """The text of docs/problem-codes.md."""
    lines = [
        "# Problem codes",
        "",
        "<!-- generated from miles_topology/codes.py: "
        "python -m miles_topology.codes > docs/problem-codes.md -->",
        "",
        "Every problem `miles-topology check`, `show`, `migrate` and the launcher report has a",
        "stable kebab-case code (never renamed). Errors make the configuration invalid (exit 1);",
        "warnings and script-reader notes do not.",
        "",
        "| code | kind | when |",
        "|---|---|---|",
    ]
    for code, (kind, when) in CODES.items():
        lines.append(f'| `{code}` | {kind} | {when.replace("|", "/")} <a id="{code}"></a> |')
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
