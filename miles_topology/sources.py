"""Build a Topology from command-line flags, optionally on top of a `--topology` YAML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .config import load_fields
from .errors import Problem, TopologyError
from .flags import flag_of, parse_flags
from .model import Topology


@dataclass
class FlagRead:
    topology: Topology
    passthrough: list[str]  # every argv token that is not a topology flag


def read_flags(argv: list[str], env: Mapping[str, str] | None = None) -> FlagRead:
    """Topology flags -> Topology (all problems in one TopologyError); others pass through.

    `env`, when given, resolves `${oc.env:...}` in a `--topology` YAML (see config.py).
    """
    argv, yaml_path = _take_topology_file(list(argv))
    parsed = parse_flags(argv)
    fields = dict(parsed.fields)
    errors, warnings = list(parsed.errors), list(parsed.warnings)
    if "--sglang-enable-ep-moe" in fields.pop("_renamed", []) and "engine_ep" not in fields:
        fields["engine_ep"] = fields.get("engine_size", 1)
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
                    (parsed.given_by.get(name, flag_of(name)), "--topology")))
        fields = {**base, **fields}
    try:
        topo = Topology(**fields)
    except TopologyError as e:
        raise TopologyError(errors + e.problems, warnings + e.warnings, e.summary) from None
    if errors:
        raise TopologyError(errors, warnings + list(topo.warnings),
                            topo.summary())
    topo._warnings = tuple(warnings) + topo.warnings
    return FlagRead(topo, parsed.passthrough)


def from_flags(argv: list[str]) -> Topology:
    return read_flags(argv).topology


def _take_topology_file(argv: list[str]) -> tuple[list[str], str | None]:
    rest, path = [], None
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--topology" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
            continue
        if tok.startswith("--topology="):
            path = tok.split("=", 1)[1]
        else:
            rest.append(tok)
        i += 1
    return rest, path
