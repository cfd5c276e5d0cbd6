"""The launcher's own checkout on its import path, as its users run it from there.

miles' scripts/run_*.py are run from the checkout's root (`python scripts/run_x.py`, the
package installed with `pip install -e .`), so `import miles` works for them and not for a
checker that runs the file from elsewhere. When a package the launcher imports lives at the
root of the checkout that holds the launcher (its git work tree; without git, the nearest
folder above with a pyproject.toml or setup.py), that root goes last on the sandbox's
sys.path: a package installed or on PYTHONPATH (`--path`) still comes first, as it does
for `python scripts/run_x.py`. When an import still fails, `hint` says how to give the path.
"""

from __future__ import annotations

import ast
import os
import re

from ..reading.gate import git_root, project_root
from ..reading.pysource import parse


def root_of(launcher: str) -> str | None:
    """The checkout holding `launcher`: its git root, else the nearest project folder
    (gate.git_root, gate.project_root: the one root finding)."""
    here = os.path.dirname(os.path.abspath(launcher))
    return git_root(here) or project_root(here)


def imported(launcher: str) -> set[str]:
    """The top-level modules the launcher's own text imports (absolute imports only)."""
    try:
        with open(launcher, encoding="utf-8", errors="replace") as f:
            tree = parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def paths(launcher: str) -> list[str]:
    """[the checkout root] when a package the launcher imports lives there, else []."""
    root = root_of(launcher)
    if root is None or root == os.path.dirname(os.path.abspath(launcher)):
        return []  # the launcher's own folder is sys.path[0] already
    # or a checkout of miles or slime itself: the launcher may reach its package through a
    # helper it puts on sys.path (a slime fork's scripts/run_qwen3_4b_fsdp.py appends tests/
    # and imports command_utils, which does `from slime.utils.misc import exec_command`)
    found = any(os.path.isfile(os.path.join(root, name, "__init__.py"))
                or os.path.isfile(os.path.join(root, f"{name}.py"))
                for name in imported(launcher) | {"miles", "slime"})
    return [root] if found else []


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def hint(module: str) -> str:
    """How to make a launcher's own package importable, in one line."""
    top = module.split(".")[0]
    return (f"if {top} is the launcher's own checkout, put that checkout's root on the "
            f"path: PYTHONPATH=/path/to/checkout miles-topology check ..., or --path "
            f"/path/to/checkout")


def missing_in(text: str) -> str | None:
    """The module a "No module named 'X'" line names, if any."""
    m = _NO_MODULE.search(text)
    return m.group(1) if m else None
