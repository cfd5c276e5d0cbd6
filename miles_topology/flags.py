"""The bridge from the long miles/Megatron/SGLang flag names to the model's short fields.

This is the only place that knows flag spellings. Flags it does not know pass through.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .errors import Problem
from .grid import ORDERS


@dataclass(frozen=True)
class Spec:
    field: str
    kind: str  # "int", "switch", "freq", "str", "list" (one or more values, argparse nargs="+")
    values: tuple | None = None  # a switch: (value off, value on); a str: the allowed choices


# flag -> Spec. The first flag listed for a field is the name quoted in messages.
FLAGS: dict[str, Spec] = {
    "--actor-num-nodes": Spec("nodes", "int"),
    "--actor-num-gpus-per-node": Spec("gpus_per_node", "int"),
    "--num-gpus-per-node": Spec("node_gpus", "int"),
    "--critic-num-nodes": Spec("critic_nodes", "int"),
    "--critic-num-gpus-per-node": Spec("critic_gpus_per_node", "int"),
    "--use-critic": Spec("use_critic", "switch"),
    "--advantage-estimator": Spec("advantage_estimator", "str"),
    "--train-backend": Spec("train_backend", "str", ("megatron", "fsdp")),
    "--dp-replicate-size": Spec("dp_replicate", "int"),
    "--rollout-num-gpus": Spec("rollout_gpus", "int"),
    "--rollout-num-gpus-per-engine": Spec("engine_size", "int"),
    "--colocate": Spec("colocate", "switch"),
    "--rollout-external": Spec("rollout_external", "switch"),
    "--rollout-external-engine-addrs": Spec("external_addrs", "list"),
    "--eval-num-gpus": Spec("eval_gpus", "int"),
    "--eval-num-gpus-per-engine": Spec("eval_engine_size", "int"),
    "--prefill-num-servers": Spec("prefill_servers", "int"),
    "--sglang-config": Spec("sglang_config", "str"),
    "--update-weight-transfer-mode": Spec(
        "transfer_mode", "str", ("broadcast", "p2p", "disk-delta")),
    "--debug-train-only": Spec("train_only", "switch"),
    "--debug-rollout-only": Spec("rollout_only", "switch"),
    "--tensor-model-parallel-size": Spec("tp", "int"),
    "--pipeline-model-parallel-size": Spec("pp", "int"),
    "--num-virtual-stages-per-pipeline-rank": Spec("vpp", "int"),
    "--num-layers-per-virtual-pipeline-stage": Spec("vpp_layers", "int"),
    "--decoder-first-pipeline-num-layers": Spec("first_stage_layers", "int"),
    "--decoder-last-pipeline-num-layers": Spec("last_stage_layers", "int"),
    "--context-parallel-size": Spec("cp", "int"),
    "--expert-model-parallel-size": Spec("ep", "int"),
    "--expert-tensor-parallel-size": Spec("etp", "int"),
    "--sequence-parallel": Spec("sp", "switch"),
    "--use-tp-pp-dp-mapping": Spec("order", "switch", ORDERS),
    "--num-layers": Spec("layers", "int"),
    "--num-attention-heads": Spec("heads", "int"),
    "--num-query-groups": Spec("query_groups", "int"),
    "--num-experts": Spec("experts", "int"),
    "--moe-router-topk": Spec("topk", "int"),
    "--moe-layer-freq": Spec("moe_layer_freq", "freq"),
    "--moe-router-fusion": Spec("router_fusion", "switch"),
    "--mtp-num-layers": Spec("mtp_layers", "int"),
    # SGLang ServerArgs forwarded by miles with the --sglang- prefix (miles
    # backends/sglang_utils/arguments.py add_sglang_arguments: every alias of a ServerArgs flag
    # gets the prefix; validate_args then copies sglang_data_parallel_size -> sglang_dp_size, ...)
    "--sglang-ep-size": Spec("engine_ep", "int"),
    "--sglang-expert-parallel-size": Spec("engine_ep", "int"),
    "--sglang-ep": Spec("engine_ep", "int"),
    "--sglang-dp-size": Spec("engine_dp", "int"),
    "--sglang-data-parallel-size": Spec("engine_dp", "int"),
    "--sglang-pp-size": Spec("engine_pp", "int"),
    "--sglang-pipeline-parallel-size": Spec("engine_pp", "int"),
    "--sglang-tp-size": Spec("sglang_tp", "int"),
    "--sglang-tensor-parallel-size": Spec("sglang_tp", "int"),
    "--sglang-enable-dp-attention": Spec("dp_attention", "switch"),
    "--sglang-moe-a2a-backend": Spec("a2a_backend", "str"),
    "--use-routing-replay": Spec("routing_replay", "switch"),
    "--use-rollout-routing-replay": Spec("rollout_routing_replay", "switch"),
    "--rollout-batch-size": Spec("rollout_batch_size", "int"),
    "--n-samples-per-prompt": Spec("n_samples_per_prompt", "int"),
    "--global-batch-size": Spec("global_batch_size", "int"),
    "--micro-batch-size": Spec("micro_batch_size", "int"),
    "--use-dynamic-batch-size": Spec("dynamic_batch", "switch"),
    "--max-tokens-per-gpu": Spec("max_tokens_per_gpu", "int"),
    "--num-steps-per-rollout": Spec("steps_per_rollout", "int"),
    "--use-dynamic-global-batch-size": Spec("dynamic_global_batch", "switch"),
    "--allow-partial-train-step": Spec("partial_train_step", "switch"),
    "--disable-rollout-trim-samples": Spec("no_trim", "switch"),
}

# old flag -> (new flag, how the old spelling maps onto the model)
RENAMED: dict[str, tuple[str, Spec | None]] = {
    "--rollout-num-gpus-per-node": ("--num-gpus-per-node", Spec("node_gpus", "int")),
    "--sglang-enable-ep-moe": ("--sglang-ep-size N", None),
    "--sglang-enable-deepep-moe": ("--sglang-moe-a2a-backend deepep",
                                   Spec("a2a_backend", "switch", (None, "deepep"))),
}

FIELD_FLAG: dict[str, str] = {}
for _flag, _spec in FLAGS.items():
    FIELD_FLAG.setdefault(_spec.field, _flag)


def flag_of(name: str) -> str:
    """The user-facing flag of a model field (what messages quote)."""
    return FIELD_FLAG.get(name, name)


@dataclass
class Parsed:
    """Fields read from argv, the flags that set them, and what is not ours."""

    fields: dict = field(default_factory=dict)
    given_by: dict[str, str] = field(default_factory=dict)  # field -> flag spelling used
    passthrough: list[str] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


# Short spellings people carry over from other launchers; miles' parser does not know them.
SHORT: dict[str, str] = {
    f"{dash}{short}": flag
    for short, flag in (
        ("tp", "--tensor-model-parallel-size"), ("pp", "--pipeline-model-parallel-size"),
        ("cp", "--context-parallel-size"), ("ep", "--expert-model-parallel-size"),
        ("etp", "--expert-tensor-parallel-size"), ("sp", "--sequence-parallel"),
        ("vpp", "--num-virtual-stages-per-pipeline-rank"),
    )
    for dash in ("-", "--")
}


def _distance(a: str, b: str) -> int:
    """Levenshtein distance, capped at 3 with an early exit: cheap for unrelated names."""
    if abs(len(a) - len(b)) > 2:
        return 3
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > 2:
            return 3
    return min(row[-1], 3)


def suggest(name: str) -> str | None:
    """The known layout flag an unknown flag most likely means, or None (bounded: one pass
    over the flag table, only for unknown flags)."""
    if name in SHORT:
        return SHORT[name]
    if not name.startswith("--") or len(name) < 8:
        return None
    have = Counter(name)
    near = [
        (_distance(name, f), f) for f, counts in _HISTOGRAMS.items()
        if abs(len(f) - len(name)) <= 2
        # each edit changes the letter counts by at most 2: a cheap lower bound first
        and sum((have - counts).values()) + sum((counts - have).values()) <= 4
    ]
    best = min(near, default=(3, None))
    return best[1] if best[0] <= 2 else None


_HISTOGRAMS = {f: Counter(f) for f in list(FLAGS) + list(RENAMED)}


def _typo(name: str, new: str) -> Problem:
    return Problem(
        "unknown-flag",
        f"{name} is not a flag miles knows (its parser refuses or ignores it); did you mean "
        f"{new}?",
        f"write {new}", (name,), "warning",
    )


def _repeated(name: str, first: object, last: object) -> Problem:
    return Problem(
        "flag-repeated",
        f"{name} is given twice, {first} and then {last}; miles' parser keeps the last, {last}.",
        f"give {name} once ({name} {last} is what runs)", (name,), "warning",
    )


def parse_flags(argv: list[str]) -> Parsed:
    """Read topology flags from argv (argparse semantics: the last occurrence wins; a repeat
    with another value and a near-miss of a known flag are reported as warnings)."""
    out = Parsed()
    seen: dict[str, str] = {}  # other flags' values, to report repeats
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        name, eq, inline = token.partition("=")
        if not _is_flag(token) or (name not in FLAGS and name not in RENAMED):
            out.passthrough.append(token)
            if token.startswith("-") and len(token) > 1:
                near = suggest(name)
                if near is not None:
                    out.warnings.append(_typo(name, near))
                elif _is_flag(token):
                    value = inline if eq else (
                        argv[i] if i < len(argv) and not argv[i].startswith("-") else None)
                    if value is not None and seen.get(name, value) != value:
                        out.warnings.append(_repeated(name, seen[name], value))
                    if value is not None:
                        seen[name] = value
            continue
        value: str | None = inline if eq else None
        spec = FLAGS.get(name)
        if name in RENAMED:
            new, spec = RENAMED[name]
            out.warnings.append(
                Problem(
                    "deprecated-flag",
                    f"{name} was renamed; it now reads {new}.",
                    f"replace {name} with {new} (`miles-topology migrate SCRIPT --write` "
                    "does it for a launch script).",
                    (name,),
                    "warning",
                )
            )
            if spec is None:  # a switch with a new meaning
                out.fields.setdefault("_renamed", []).append(name)
                continue
        if spec.kind == "switch":
            if value is not None and value.lower() not in ("true", "1", "false", "0"):
                out.errors.append(
                    _bad_value(name, value, "a switch takes no value", f"write {name} alone.")
                )
                continue
            on = value is None or value.lower() in ("true", "1")
            _set(out, spec.field, spec.values[on] if spec.values else on, name)
            continue
        if value is None:
            if i < len(argv) and not _is_flag(argv[i]):
                value = argv[i]
                i += 1
            else:
                out.errors.append(_bad_value(name, None, "it needs a value"))
                continue
        if spec.kind == "int":
            try:
                parsed: object = int(value)
            except ValueError:
                out.errors.append(_bad_value(name, value, "it must be a whole number"))
                continue
        elif spec.kind == "list":  # argparse nargs="+": every value up to the next flag
            items = [value]
            while i < len(argv) and not _is_flag(argv[i]):
                items.append(argv[i])
                i += 1
            parsed = tuple(items)
        elif spec.values and value not in spec.values:
            out.errors.append(_bad_value(
                name, value, f"it must be one of {', '.join(spec.values)}",
                f"give {name} one of: {', '.join(spec.values)}."))
            continue
        else:
            parsed = value
        _set(out, spec.field, parsed, name)
    return out


def _set(out: Parsed, name: str, value: object, flag: str) -> None:
    earlier = out.given_by.get(name)
    if earlier == flag and out.fields[name] != value:
        out.warnings.append(_repeated(flag, out.fields[name], value))
    if earlier is not None and earlier != flag and out.fields[name] != value:
        out.errors.append(
            Problem(
                "flag-conflict",
                f"{earlier} {out.fields[name]} and {flag} {value} set the same size "
                "to two different values.",
                f"keep one of them: either {earlier} {out.fields[name]} or {flag} {value}.",
                (earlier, flag),
            )
        )
    out.fields[name] = value
    out.given_by[name] = flag


def _bad_value(flag: str, value: str | None, rule: str, fix: str = "") -> Problem:
    shown = "no value" if value is None else f"{value!r}"
    fix = fix or f"give {flag} a whole number (e.g. {flag} 1), or drop it to use the default."
    return Problem("invalid-flag-value", f"{flag} got {shown}; {rule}.", fix, (flag,))
