"""Where each flag of a launch is spelled in the launcher's code: the string literal (a plain
constant, an f-string part, a list element; in the launcher or a module of its checkout it
imports) whose statement ran, by the marked lines the child recorded (child._compile_marked:
each statement holding a `--` literal notes its line when it runs), so a flag spelled in
both branches of a `match` lands on the branch that was taken. A flag built from pieces
(no literal spells it whole) is not located: its problems stay at the launch call.
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache

from ..reading.pysource import parse

SOURCE_MAX = 4 << 20  # bytes of one traced file parsed


def flags_of(argv: list[str]) -> list[str]:
    """The option words of a launch (``--x`` or ``--x=V``: the ``--x``)."""
    return list(dict.fromkeys(w.partition("=")[0] for w in argv
                              if w.startswith("--") and len(w) > 2))


def locate(argv: list[str], ran: dict[str, set[int]], launcher: str) -> dict[str, tuple]:
    """flag -> (file, line, column) of the literal that spells it, among the statements that
    ran (`ran`: file -> lines run); the launcher's own file first, then its modules; within
    a file the last that ran (the one whose value wins)."""
    want = set(flags_of(argv))
    if not want or not ran:
        return {}
    me = os.path.realpath(launcher)
    files = sorted(ran, key=lambda f: os.path.realpath(f) != me)
    out: dict[str, tuple] = {}
    for f in files:
        got: dict[str, tuple] = {}
        for flag, line, col, span in _spellings(f):
            if flag in want and flag not in out and _ran(span, ran[f]):
                got[flag] = (f, line, col)
        out.update(got)
        if len(out) == len(want):
            break
    return out


def _ran(span: tuple[int, int], lines: set[int]) -> bool:
    first, last = span
    return any(n in lines for n in range(first, last + 1))


@lru_cache(maxsize=64)
def _spellings(path: str) -> tuple[tuple[str, int, int, tuple[int, int]], ...]:
    """(flag, line, column, lines of the statement that holds it) of every ``--flag`` a string
    literal of the file spells, in source order."""
    try:
        with open(path, "rb") as f:
            data = f.read(SOURCE_MAX + 1)
    except OSError:
        return ()
    if len(data) > SOURCE_MAX:
        return ()
    text = data.decode(errors="replace")
    try:
        tree = parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    lines = text.splitlines(keepends=True)
    starts = [0]
    for x in lines:
        starts.append(starts[-1] + len(x))
    out = []
    for node, span in _strings(tree):
        if node.end_lineno is None:
            continue
        a = starts[node.lineno - 1] + _chars(lines[node.lineno - 1], node.col_offset)
        b = starts[node.end_lineno - 1] + _chars(lines[node.end_lineno - 1],
                                                 node.end_col_offset)
        segment = text[a:b]
        for i, flag in _flags_in(segment):
            at = a + i
            line = _line_of(starts, at)
            out.append((flag, line, at - starts[line - 1] + 1, span))
    return tuple(out)


def _chars(line: str, byte_offset: int) -> int:
    """ast's UTF-8 byte column as a character index."""
    return len(line.encode()[:byte_offset].decode(errors="replace"))


def _line_of(starts: list[int], at: int) -> int:
    import bisect

    return bisect.bisect_right(starts, at)


def _flags_in(segment: str):
    """(offset, flag) of each ``--word`` in a literal's source, at a word boundary."""
    i = segment.find("--")
    while i >= 0:
        before = segment[i - 1] if i else " "
        j = i + 2
        while j < len(segment) and (segment[j].isalnum() or segment[j] in "-_."):
            j += 1
        word = segment[i:j].rstrip("-.")
        if len(word) > 2 and word[2].isalpha() and not (before.isalnum() or before in "-_"):
            yield i, word
        i = segment.find("--", j)


def _strings(tree: ast.AST):
    """(outermost string literal, lines of the statement whose running it takes: a simple
    statement's all, a compound one's header)."""
    def visit(node, span):
        if isinstance(node, ast.stmt):
            body = [b for f in ("body", "orelse", "finalbody", "handlers", "cases")
                    for b in getattr(node, f, None) or [] if hasattr(b, "lineno")]
            last = min(b.lineno for b in body) - 1 if body else node.end_lineno
            span = (node.lineno, max(node.lineno, last or node.lineno))
        if isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and \
                isinstance(node.value, str):
            yield node, span
            return
        for child in ast.iter_child_nodes(node):
            yield from visit(child, span)

    yield from visit(tree, (0, 0))
