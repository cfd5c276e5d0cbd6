"""The project's settings: the `[tool.miles-topology]` table of the closest pyproject.toml.

Its keys by who reads them: `select`, `ignore`, `severity` (judging/selection.py), the walk's
`exclude`, `extend-exclude` (discover.py) and the cluster Python launchers are checked on
(pylaunch/cluster.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..model.errors import InputError

TABLE = "miles-topology"
# the files a folder walk leaves out (discover.py), globs relative to the pyproject.toml
WALK_KEYS = ("exclude", "extend-exclude")
# the cluster Python launchers are checked on (pylaunch/cluster.py reads them)
CLUSTER_KEYS = ("nodes", "gpus-per-node", "gpu", "nvlink")


def find_pyproject(start: str) -> Path | None:
    """The closest pyproject.toml with a [tool.miles-topology] table, from `start` (a file
    or folder) upward."""
    here = Path(start).resolve()
    here = here if here.is_dir() else here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and TABLE in read_toml(candidate).get("tool", {}):
            return candidate
    return None


def read_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    from . import gate

    try:  # a bounded regular file: never a FIFO or a device in the checked tree
        return tomllib.loads(gate.read_text(path, (gate.Path(os.path.realpath(path)),),
                                            errors="strict"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, gate.Refused) as e:
        raise InputError(f"{path}: cannot read as TOML: {e}") from None
