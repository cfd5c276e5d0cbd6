"""Topology YAML files (omegaconf): flat short field names, interpolation, dotlist overrides."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .model import Topology

SKIP = {"etp_implied"}


def load_fields(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Read a topology YAML into plain field values, interpolations resolved."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = Path(path)
    try:
        cfg = OmegaConf.load(path)
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


@contextmanager
def interpolation_env(env: Mapping[str, str]) -> Iterator[None]:
    """Inside, ${oc.env:VAR} reads `env` alone (what a launch script exports), not this
    process's own environment, so reading a script's topology file is reproducible."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


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
