"""Old home of the topology-YAML loader, now in sources.py (one module reads and writes every
source). Kept so old imports work: each name warns (DeprecationWarning) and is the one in
sources.py. `PartialEnv` (now env.py) is re-exported without a warning: the script readers
import it from here."""

from __future__ import annotations

import warnings
from typing import Any

from . import sources as _sources
from .env import PartialEnv

__all__ = ["PartialEnv"]

_MOVED = ("SCHEMA_URL", "ENV_REF", "load_fields", "from_yaml", "to_yaml", "yaml_value",
          "schema_comment", "schema", "key_lines")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(f"miles_topology.config.{name} moved to miles_topology.sources.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(_sources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
