"""Topology YAML files (omegaconf): flat short field names, interpolation, dotlist overrides."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .model import Topology

# Where editors find the JSON Schema of a topology YAML (`miles-topology schema` prints it).
SCHEMA_URL = ("https://raw.githubusercontent.com/radixark/miles-topology/main/docs/"
              "topology.schema.json")
ENV_REF = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^{}]*))?\}")


class PartialEnv(dict):
    """An environment known only in part (a ray job's runtime env the script does not spell
    out): a name not in it is unknown, not unset. `load_fields` leaves out every top-level
    field whose value reads an unknown name and lists it in `dropped`, so that a check skips
    what needs it instead of taking a default."""

    def __init__(self, known=(), why: str = ""):
        super().__init__(known)
        self.why = why
        self.dropped: list[str] = []


class _Unknown(Exception):
    pass


def load_fields(
    path: str | Path, overrides: list[str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Read a topology YAML into plain field values, interpolations resolved.

    With `env`, `${oc.env:VAR,default}` reads `env` (what a launch script exports) instead
    of this process's environment, so reading a script's topology file is reproducible.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = Path(path)
    try:
        cfg = OmegaConf.load(path)
        if env is not None:
            raw = OmegaConf.to_container(cfg, resolve=False)
            if isinstance(env, PartialEnv) and isinstance(raw, dict):
                raw = _known_fields(raw, env, path)
            cfg = OmegaConf.create(_substitute_env(raw, env, path))
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        data = OmegaConf.to_container(cfg, resolve=True)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OmegaConfBaseException, YAMLError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: cannot read the topology YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a topology YAML must be a mapping of field: value")
    return data


def _known_fields(raw: dict, env: PartialEnv, path: Path) -> dict:
    out = {}
    for key, value in raw.items():
        try:
            out[key] = _substitute_env(value, env, path)
        except _Unknown:
            env.dropped.append(str(key))
    return out


def _substitute_env(data: Any, env: Mapping[str, str], path: Path) -> Any:
    if isinstance(data, dict):
        return {k: _substitute_env(v, env, path) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute_env(v, env, path) for v in data]
    if not isinstance(data, str):
        return data

    def value(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if isinstance(env, PartialEnv):
            raise _Unknown(name)
        if default is None:
            raise InputError(f"{path}: ${{oc.env:{name}}} is not set and has no default; "
                             f"pass --env {name}=VALUE")
        return default.strip().strip("'\"")

    return ENV_REF.sub(value, data)


def from_yaml(path: str | Path, overrides: list[str] | None = None) -> Topology:
    from .model import Topology

    return Topology(**load_fields(path, overrides))


def to_yaml(topo: Topology) -> str:
    """The fields that differ from their defaults, by group; an implied etp stays implied."""
    from .model import GROUPS, fields_in

    lines = [schema_comment()]
    for group in GROUPS:
        body = []
        for name in fields_in(group):
            info = type(topo).model_fields[name]
            value = getattr(topo, name)
            if info.default_factory is not None and name not in topo.model_fields_set:
                continue  # inferred from other fields, so it stays inferred
            if info.default_factory is None and value == info.default:
                continue
            body.append(f"{name}: {yaml_value(value)}")
        if body:
            lines += [f"# {group}"] + body
    return "\n".join(lines) + "\n"


def yaml_value(value: Any) -> str:
    if isinstance(value, tuple):  # nested tuples (engine groups) as nested flow lists
        return "[" + ", ".join(map(yaml_value, value)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def schema_comment() -> str:
    """The first line of a topology YAML we write: editors validate the file against it."""
    return f"# yaml-language-server: $schema={SCHEMA_URL}"


def schema() -> dict[str, Any]:
    """The JSON Schema of a topology YAML: the model's input fields (derived sizes excluded),
    each described by its flag; any value may also be an omegaconf interpolation."""
    from .flags import table
    from .model import Topology, facts

    free = {spec.field for spec in table().values() if spec.kind == "str"}  # parsed from text
    out = Topology.model_json_schema()
    for name, prop in out["properties"].items():
        f = facts(name)
        for key in ("group", "flag", "summary", "switch"):
            prop.pop(key, None)
        shown = f["flag"] or "no flag (YAML only)"
        prop["description"] = f"{shown}; group {f['group']}"
        body = {k: prop.pop(k) for k in list(prop) if k not in ("title", "description",
                                                                  "default")}
        text = {"type": "string"} if name in free else {"type": "string", "pattern": r"\$\{"}
        prop["anyOf"] = [body, text]
    out["title"] = "miles-topology topology YAML"
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return out


def key_lines(path: str | Path) -> dict[str, int]:
    """Top-level key -> its 1-based line in a YAML file (for problems' locations)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:", line)  # a flag-like key too
        if m:
            out.setdefault(m.group(1), n)
    return out
