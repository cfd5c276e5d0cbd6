"""Test modules that need the training stack are left out where it is not installed.

The core (`miles_topology`) needs none of torch, ray, megatron-core, numpy or the `miles/`
consumer layer of the checkout; CI runs the core tests in a venv holding the wheel alone.
A test module is left out (listed in the header) when it imports one of those, at any
depth, and that module cannot be found.
"""

from __future__ import annotations

import ast
import importlib.util
import time
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
from support import LAUNCHERS, SCRIPTS, run_cli

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


# Wall time per phase (the folder under tests/ that mirrors a part of the package), printed
# at the end of every run so CI's log shows where the suite's time goes.
PHASES: dict[str, float] = defaultdict(float)
_T0 = time.monotonic()


def pytest_runtest_logreport(report) -> None:
    # the node id is relative to the rootdir (this checkout), wherever pytest was started
    parts = report.nodeid.split("::")[0].split("/")
    PHASES[parts[1] if len(parts) > 2 and parts[0] == "tests" else "(top)"] += report.duration


@pytest.fixture()
def cli(capsys):
    """`cli("check", "--", ...)` -> (exit code, stdout, stderr) of miles-topology, in-process."""
    return lambda *argv: run_cli(capsys, *argv)


@pytest.fixture()
def scripts():
    return SCRIPTS


@pytest.fixture()
def launchers():
    return LAUNCHERS


def pytest_terminal_summary(terminalreporter) -> None:
    if any(v >= 0.5 for v in PHASES.values()):
        took = ", ".join(f"{k} {v:.0f}s" for k, v in sorted(PHASES.items(), key=lambda kv: -kv[1])
                         if v >= 0.5)
        terminalreporter.write_line(f"wall time by phase: {took} "
                                    f"(session {time.monotonic() - _T0:.0f}s)")
    if LEFT_OUT:
        terminalreporter.write_line("left out (training stack not installed): "
                                    + "; ".join(LEFT_OUT))
