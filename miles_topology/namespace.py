"""`Topology.from_namespace(args)`: validate the job miles really runs, from its parsed
arguments.

miles parses its command line with argparse (Megatron's parser plus miles' and the prefixed
SGLang arguments), then `miles_validate_args` and SGLang's `validate_args` rewrite some of
them (the critic sizes under PPO, the rollout GPUs under --colocate, sglang_tp_size,
sglang_dp_size, the global batch from --num-steps-per-rollout). Reading the namespace after
that step checks the values miles will use. An attribute is the flag's argparse dest in
miles' surface (`--actor-num-nodes` -> `actor_num_nodes`, `--sglang-ep` ->
`sglang_ep_size`); a value equal to the parser's default counts as not given, so the model's
own inference applies (`sglang_tp_size` still holds SGLang's default 1 after
`miles_validate_args`); a few attributes that Megatron's own validation fills in are read
first (`ATTRS`).
"""

from __future__ import annotations

from typing import Any

from .flags import RENAMED, table

# field -> attributes read before the flag's own dest (Megatron's validated names)
ATTRS: dict[str, tuple[str, ...]] = {
    "vpp": ("virtual_pipeline_model_parallel_size",),
}
# field -> the parser default that means "not given" (the model infers from its absence)
UNGIVEN: dict[str, object] = {"node_gpus": 8}


def dest(flag: str) -> str:
    """argparse's attribute name for a flag: its dest in miles' surface (an alias shares
    the main flag's: --sglang-ep -> sglang_ep_size), else the flag's own name."""
    from .surface import flag as upstream

    f = upstream(flag)
    return f.dest if f is not None else flag.lstrip("-").replace("-", "_")


_NONE = object()


def upstream_default(flag: str) -> object:
    """The default miles' parser gives the flag (surface.json), or a marker when unknown."""
    from .surface import flag as upstream

    f = upstream(flag)
    if f is None or f.default is None or f.default == "==SUPPRESS==":
        return _NONE
    return f.default


def fields_from(args: Any) -> dict[str, Any]:
    """Model fields read from a parsed-argument namespace (None and absent values skipped)."""
    out: dict[str, Any] = {}
    for flag, spec in table().items():
        if flag in RENAMED or spec.field in out or not spec.field:
            continue
        for attr in (*ATTRS.get(spec.field, ()), dest(flag)):
            value = getattr(args, attr, None)
            if value is None or UNGIVEN.get(spec.field, object()) == value:
                continue
            if attr == dest(flag) and value == upstream_default(flag):
                # the parser's default: nothing was given. sglang_tp_size holds SGLang's 1
                # until sglang_utils' validate_args overwrites it (after miles_validate_args)
                continue
            if spec.kind == "switch":
                value = spec.values[bool(value)] if spec.values else bool(value)
            elif spec.kind == "list":
                value = tuple(str(v) for v in (value if isinstance(value, list | tuple)
                                               else [value]))
            elif isinstance(value, list):
                value = tuple(value)
            out[spec.field] = value
            break
    return out
