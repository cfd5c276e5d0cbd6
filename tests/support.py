"""Paths and the CLI runner every test module shares (imported by name: pytest puts tests/
on the path, see pyproject's [tool.pytest.ini_options])."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SCRIPTS = FIXTURES / "scripts"
LAUNCHERS = FIXTURES / "launchers"
STEP_FIXTURES = FIXTURES / "migrations"  # each migration step's before/after scripts
SCHEMAS = TESTS / "schemas"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`miles-topology ARGV` in this process: (exit code, stdout, stderr)."""
    from miles_topology.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# the attacker's first step: clear the audit hook's tables and make every path "inside"
UNHOOK = """\
import os, posix, sys
_f = sys._getframe()
while _f is not None and "_NEVER" not in _f.f_globals:
    _f = _f.f_back
if _f is not None:
    for _k in ("_NEVER", "_PATHS", "_BLOCKED_IMPORTS"):
        _f.f_globals[_k].clear()
    _f.f_globals["inside"].__code__ = (lambda path: True).__code__
del _f


def attempt(what, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
        print("DONE", what, flush=True)
    except OSError as e:
        print("FAILED", what, e.errno, flush=True)
"""
