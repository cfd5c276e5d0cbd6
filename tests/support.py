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
