"""Every problem code, its kind and when it is reported: the one registry.

docs/problem-codes.md is generated from it (`python -m miles_topology.codes > docs/...`;
a test keeps the two equal), and a test asserts that every code the package can emit is
here. Codes are stable kebab-case strings: add rows, never rename one.
"""

from __future__ import annotations

# code -> (kind, when). kind: error (the real stack refuses, crashes, hangs or trains wrongly),
# warning (it silently changes or drops something), note (the script reader: bash runs
# something other than what the script appears to say).
CODES: dict[str, tuple[str, str]] = {
    # the first set (DESIGN.md section 5)
    "dense-grid-divisibility": ("error", "world size not divisible by tp*cp*pp"),
    "expert-grid-divisibility": ("error", "world size not divisible by etp*ep*pp"),
    "experts-not-divisible-by-ep": ("error", "num_experts % ep != 0"),
    "heads-not-divisible-by-tp": ("error", "attention heads or query groups % tp != 0"),
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
        "error", "actor + rollout (+ critic) GPUs exceed nodes * GPUs per node of the cluster "
        "given"),
    "r3-requires-moe": ("error", "routing replay asked for on a model with no MoE layers"),
    "r3-router-fusion": ("error", "routing replay with fused router top-k, which bypasses replay"),
    "flag-conflict": (
        "error", "the same size given two different ways (flag vs YAML, alias vs name)"),
    "etp-implied": ("warning", "expert TP not given and tp > 1, so Megatron uses etp = tp"),
    "colocate-ignores-rollout-gpus": ("warning", "`--rollout-num-gpus` given with `--colocate`"),
    "tp-group-crosses-nodes": ("warning", "a TP (or ETP) group spans more than one node"),
    "deprecated-flag": ("warning", "a renamed flag was used; the message names the new one"),
    # added since
    "invalid-flag-value": (
        "error", "a flag's value is not a whole number (`None`), or is missing"),
    "unknown-field": ("error", "a topology YAML has a key that is not a field"),
    "moe-tp-requires-sp": ("error", "MoE model with TP > 1 and no `--sequence-parallel`"),
    "order-requires-equal-dp": (
        "error", "`--use-tp-pp-dp-mapping` with pp > 1 and dense dp != expert dp "
        "(megatron-core refuses it)"),
    "rollout-batch-not-multiple-of-global-batch": (
        "error", "rollout batch x samples per prompt % global batch != 0"),
    "global-batch-not-divisible-by-dp": (
        "error", "global batch % (dp x micro batch) != 0 (no dynamic batch)"),
    "missing-model-fact": ("error", "a derivation needs a model fact that was not given"),
    "sp-ignored": ("warning", "`--sequence-parallel` with TP 1"),
    "r3-external-capture": (
        "warning", "R3 with `--rollout-external`: the external engines must capture routed "
        "experts"),
    "no-rollout-gpus": ("warning", "neither `--colocate` nor `--rollout-num-gpus`"),
    "unreadable": (
        "error", "an input cannot be read at all (missing file, bad YAML, bash syntax): exit 2; "
        "in `--format github`/`sarif` and batch output"),
    # the script reader (check SCRIPT.sh); notes are reported as warnings
    "missing-line-continuation": (
        "error", "a line starts with flags (or an unresolved `${A[@]}` and flags) but the line "
        "above does not end in `\\`: bash drops them from the launch"),
    "space-after-line-continuation": (
        "note", "a line ends in `\\` followed by spaces, so the command ends there"),
    "flag-given-twice": ("note", "a topology flag is given more than once; the last one wins"),
    "source-cycle": ("note", "a file is sourced again while it is being sourced"),
    "no-launch-command": (
        "note", "no training launch (`train.py`/`train_async.py` by python, `torchrun` or `ray "
        "job submit`); converters, servers and `run.py` wrappers do not count: exit 2"),
    "several-launch-commands": ("note", "more than one launch command; the last one is read"),
    "conditional-launch": ("note", "the launch command runs inside an if/case/loop/&&"),
}

KINDS = ("error", "warning", "note")


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
        lines.append(f"| `{code}` | {kind} | {when.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
