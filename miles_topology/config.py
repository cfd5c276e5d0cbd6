"""Topology YAML files (omegaconf): flat short field names, interpolation, dotlist overrides."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .model import Topology

SKIP = {"etp_implied"}
ENV_REF = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^{}]*))?\}")


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
        if default is None:
            raise InputError(f"{path}: ${{oc.env:{name}}} is not set and has no default; "
                             f"pass --env {name}=VALUE")
        return default.strip().strip("'\"")

    return ENV_REF.sub(value, data)


def from_yaml(path: str | Path, overrides: list[str] | None = None) -> Topology:
    from .model import Topology

    return Topology(**load_fields(path, overrides))


def to_yaml(topo: Topology) -> str:
    """The fields that differ from their defaults; an implied etp stays implied."""
    lines = []
    for name, info in type(topo).model_fields.items():
        value = getattr(topo, name)
        if name in SKIP or (name == "etp" and topo.etp_implied) or value == info.default:
            continue
        if isinstance(value, tuple):
            value = "[" + ", ".join(map(str, value)) + "]"
        elif isinstance(value, bool):
            value = "true" if value else "false"
        lines.append(f"{name}: {value}")
    return "\n".join(lines) + "\n"
