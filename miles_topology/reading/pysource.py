"""Python source to an AST, one parse at a time in this process.

A typer app's commands run side by side (pylaunch `_each`), and each run parses sources (the
launcher's imports, its commands, the literals that spell its flags). CPython 3.11 keeps the
recursion depth of its conversion of a parse into `ast` objects in interpreter-wide state, so
two threads parsing at once can fail with "SystemError: AST constructor recursion depth
mismatch" (seen in CI on 3.11.7, a launcher of 1,000 typer commands). Every parse of reading/
and pylaunch/ goes through `parse`, which makes them take turns.
"""

from __future__ import annotations

import ast
import threading

_TURN = threading.Lock()


def parse(source: str | bytes) -> ast.Module:
    """`ast.parse(source)`, never two at once; raises what it raises."""
    with _TURN:
        return ast.parse(source)
