"""Test modules that need the training stack are left out where it is not installed.

The core (`miles_topology`) needs none of torch, ray, megatron-core, numpy or the `miles/`
consumer layer of the checkout; CI runs the core tests in a venv holding the wheel alone.
A test module is left out (listed in the header) when it imports one of those, at any
depth, and that module cannot be found.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

HEAVY = ("torch", "ray", "megatron", "numpy", "miles")
LEFT_OUT: list[str] = []


@cache
def _missing(root: str) -> bool:
    try:
        return importlib.util.find_spec(root) is None
    except (ImportError, ValueError):
        return True


def _needs(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return set()
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return {r for r in roots if r in HEAVY}


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    p = Path(collection_path)
    if "fixtures" in p.parts:  # launchers in slime's style are named test_*.py too
        return True
    if p.suffix != ".py" or not p.name.startswith("test_"):
        return None
    absent = sorted(r for r in _needs(p) if _missing(r))
    if absent:
        LEFT_OUT.append(f"{p.name} (needs {', '.join(absent)})")
        return True
    return None


def pytest_report_header(config) -> list[str]:
    absent = [r for r in HEAVY if _missing(r)]
    return [f"not installed, so their test modules are left out: {', '.join(absent)}"] \
        if absent else []


def pytest_terminal_summary(terminalreporter) -> None:
    if LEFT_OUT:
        terminalreporter.write_line("left out (training stack not installed): "
                                    + "; ".join(LEFT_OUT))
