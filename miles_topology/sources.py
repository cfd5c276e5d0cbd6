"""Build a Topology from command-line flags, optionally on top of a `--topology` YAML."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import MEGATRON_ONLY_FLAGS, fsdp_undefined_flags
from .config import load_fields
from .errors import Problem, TopologyError
from .flags import TOPOLOGY, Parsed, flag_of, parse_flags
from .model import Topology


@dataclass
class FlagRead:
    topology: Topology
    passthrough: list  # every argv token that is not a topology flag, as given
    parsed: Parsed  # which token set each field (`Parsed.origin`)


def read_flags(argv: Sequence[Any], env: Mapping[str, str] | None = None,
               own: Collection[str] = ()) -> FlagRead:
    """Topology flags -> Topology (all problems in one TopologyError); others pass through.

    `env`, when given, resolves `${oc.env:...}` in a `--topology` YAML (see config.py);
    `own`: flags outside miles' surface that the caller reads itself (a launcher's).
    """
    parsed = parse_flags(argv, own)
    yaml_path = parsed.topology
    fields = dict(parsed.fields)
    errors, warnings = list(parsed.errors), list(parsed.warnings)
    if fields.get("train_only") and fields.get("rollout_only"):
        errors.append(Problem(
            "flag-conflict", "--debug-train-only and --debug-rollout-only exclude each other.",
            "keep at most one of --debug-train-only and --debug-rollout-only",
            ("--debug-train-only", "--debug-rollout-only")))
    if yaml_path is not None:
        base = load_fields(yaml_path, env=env)
        for name, value in fields.items():
            if name in base and base[name] != value:
                errors.append(Problem(
                    "flag-conflict",
                    f"{yaml_path} sets {name}: {base[name]} but {parsed.given_by.get(name, name)} "
                    f"gives {value}.",
                    f"keep one: edit {name} in {yaml_path}, or drop "
                    f"{parsed.given_by.get(name, flag_of(name))} from the command line",
                    (parsed.given_by.get(name, flag_of(name)), TOPOLOGY)))
        fields = {**base, **fields}
    else:
        base = {}
    if fields.get("train_backend") == "fsdp":
        # miles' FSDP parser refuses Megatron-only flags (checks.fsdp_undefined_flags); the
        # size a refused flag gave is not applied (a YAML value of it still is, and warns)
        refused = fsdp_undefined_flags(parsed.given_by)
        errors += refused
        for name in (n for n in parsed.given_by if n in MEGATRON_ONLY_FLAGS):
            if name in base:
                fields[name] = base[name]
            else:
                fields.pop(name, None)
    try:
        topo = Topology(**fields)
    except TopologyError as e:
        raise TopologyError(errors + e.problems, warnings + e.warnings, e.summary) from None
    if errors:
        raise TopologyError(errors, warnings + list(topo.warnings),
                            topo.summary())
    topo._warnings = tuple(warnings) + topo.warnings
    return FlagRead(topo, parsed.passthrough, parsed)


def from_flags(argv: list[str]) -> Topology:
    return read_flags(argv).topology
