"""Parses of Python source take turns (reading/pysource.py): a typer app's commands run side
by side, and CPython 3.11 fails two parses at once ("AST constructor recursion depth
mismatch", seen in CI)."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path
from types import SimpleNamespace

from miles_topology.reading import pysource

PKG = Path(pysource.__file__).resolve().parent.parent


def test_every_parse_of_reading_and_pylaunch_goes_through_the_one_turn():
    """A new `ast.parse(` beside the sandbox's threads would bring the race back."""
    direct = [f"{p.relative_to(PKG)}:{n}" for folder in ("reading", "pylaunch")
              for p in sorted((PKG / folder).rglob("*.py"))
              if p.name not in ("pysource.py", "child.py")  # child.py: the one-thread child
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"\bast\.parse\(", line)]
    assert direct == []


def test_parses_take_turns(monkeypatch):
    """Two threads never parse at once, and each gets its own tree."""
    inside, most = 0, 0
    real = ast.parse
    count = threading.Lock()

    def watched(source):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        try:
            return real(source)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(pysource, "ast", SimpleNamespace(parse=watched))  # its own name only
    deep = "x = " + "(" * 60 + "1" + ")" * 60 + "\n"
    trees = []
    threads = [threading.Thread(target=lambda: trees.extend(
        pysource.parse(deep * 20) for _ in range(20))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and len(trees) == 120
    assert all(len(t.body) == 20 for t in trees)
