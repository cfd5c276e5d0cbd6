"""Old home of `Topology.from_namespace`'s reader, now in sources.py. Kept so old imports
work: each name warns (DeprecationWarning) and is the one in sources.py."""

from __future__ import annotations

import warnings
from typing import Any

from . import sources as _sources

_MOVED = ("ATTRS", "UNGIVEN", "dest", "fields_from")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(f"miles_topology.namespace.{name} moved to miles_topology.sources.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(_sources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
