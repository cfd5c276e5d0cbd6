"""How `check` prints as it goes: each input's result as soon as it is judged, like ruff.

text (default): nothing for a clean input, each problem of the others, then a one-line
summary; `verbose`: every input's full report (values, sources, the map), as `check`
printed before 0.3. concise: one `path:line:col: severity code message` line a problem. github:
workflow annotations, streamed too. json and sarif are one document, written at the end.
Inputs arrive in the order they are checked (files by name), and the problems of one input
are printed by file and line (report._problems). A progress line goes to a terminal's stderr
once a batch has run for a second; it is erased before anything else is printed.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import IO

from .report import (
    Verdict,
    _github,
    _json,
    _problems,
    _sarif,
    _table,
    column,
    name,
    paint,
    text_one,
)
from .safetext import line as _line
from .safetext import printable

FORMATS = ("text", "concise", "json", "github", "sarif")
PROGRESS_AFTER_S = 1.0


def concise(v: Verdict, color: bool = False) -> list[str]:
    """One `path:line:col: severity code message` line per problem (ruff's concise, with the
    severity word after the position)."""
    if v.unreadable is not None:  # every text of a checked file: printable (safetext)
        return [_line(f"{printable(v.path)}:1:1: {paint('unreadable', 'error', color)} "
                     f"{printable(_one_line(v.unreadable))}")]
    out = []
    for kind, p in _problems(v):
        path = p.location.path if p.location else v.path
        at = p.location.line if p.location and p.location.line > 0 else 1
        col = column(p) if p.location else None
        code = paint(p.code, kind, color)
        note = " (skipped: depends on an unresolved value)" if kind == "skipped" else ""
        out.append(_line(f"{printable(path)}:{at}:{col or 1}: {kind} {code} "
                         f"{printable(_one_line(p.message))}{note}"))
    return out


def _one_line(text: str) -> str:
    """A message on one line (a launcher's own error may span several)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


class Printer:
    """Writes verdicts in one format as they come (`add`), then the end (`close`)."""

    def __init__(self, fmt: str, out: IO[str], *, verbose: bool = False, quiet: bool = False,
                 color: bool = False, progress: IO[str] | None = None, total: int = 0):
        self.fmt, self.out, self.verbose, self.quiet, self.color = fmt, out, verbose, quiet, color
        self.progress, self.total = progress, total
        self.seen: list[Verdict] = []
        self.inputs = 0
        self.start = time.monotonic()
        self._shown = False  # a progress line is on the terminal

    def working(self, path: str) -> None:
        """Say which input is being checked, once the batch has taken a second."""
        if self.progress is None or time.monotonic() - self.start < PROGRESS_AFTER_S:
            return
        self.progress.write(f"\r\033[K[{self.inputs + 1}/{self.total}] checking "
                            f"{printable(path)}")
        self.progress.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self.progress.write("\r\033[K")
            self.progress.flush()
            self._shown = False

    def add(self, verdicts: list[Verdict]) -> None:
        """One input's verdicts (a Python launcher may give several): printed now."""
        self.inputs += 1
        self.seen += verdicts
        if self.fmt in ("json", "sarif"):
            return
        self._erase()
        for v in verdicts:
            if self.fmt == "concise":
                for line in concise(v, self.color):
                    print(line, file=self.out)
            elif self.fmt == "github":
                _github([v], self.out)
            elif self.verbose:
                text_one(v, self.out, color=self.color)
            elif v.unreadable is not None or any(True for _ in _problems(v)):
                text_one(v, self.out, True, self.color)
        self.out.flush()

    def close(self, skipped: Counter | None = None) -> None:
        """The document (json, sarif), or the map / table and the one-line summary."""
        self._erase()
        if self.fmt == "json":
            _json(self.seen, self.out)
        elif self.fmt == "sarif":
            _sarif(self.seen, self.out)
        elif self.fmt in ("text", "concise"):
            if self.verbose and self.fmt == "text":
                self._detail()
            if not self.quiet:
                print(summary(self.seen, self.inputs, skipped or Counter()), file=self.out)
        self.out.flush()

    def _detail(self) -> None:
        v = self.seen[0] if len(self.seen) == 1 else None
        if v is not None and v.topology is not None and v.extra and v.summary is not None:
            from .show import text_map

            print("\n" + text_map(v.topology), file=self.out)
        if len(self.seen) > 1:
            _table(self.seen, self.out)


def summary(verdicts: list[Verdict], inputs: int, skipped: Counter) -> str:
    """"All checks passed: 3 inputs" or "Found 2 errors, 1 warning in 5 inputs (1 invalid)",
    with what a folder walk skipped."""
    counts = Counter(kind for v in verdicts for kind, _ in _problems(v))
    lost = sum(v.unreadable is not None for v in verdicts)
    bad = sum(not v.ok and v.unreadable is None for v in verdicts)
    idle = sum(v.nothing is not None for v in verdicts)
    n = f"{inputs} input{'s' if inputs != 1 else ''}"
    parts = [f"{counts[k]} {w}{'s' if counts[k] != 1 else ''}" for k, w in
             (("error", "error"), ("warning", "warning"), ("skipped", "skipped check"))
             if counts[k]]
    parts += [f"{lost} unreadable"] if lost else []
    tail = [f"{bad} invalid"] if bad else []
    tail += [f"{idle} with nothing to check"] if idle else []
    left = sum(skipped.values())
    if left:
        tail.append(f"{left} other file{'s' if left != 1 else ''} skipped (" + ", ".join(
            f"{c} {why}" for why, c in sorted(skipped.items())) + ")")
    head = f"Found {', '.join(parts)} in {n}" if parts else \
        f"All checks passed: {n}"
    return head + (f"; {'; '.join(tail)}" if tail else "") + "."


def stream_for(path: str | None) -> tuple[IO[str], bool]:
    """(where the report goes, whether to close it): --output-file, else stdout."""
    if path is None or path == "-":
        return sys.stdout, False
    from .errors import InputError

    try:
        return open(path, "w", encoding="utf-8"), True
    except OSError as e:
        raise InputError(f"--output-file {path}: cannot write: {e.strerror or e}") from None


__all__ = ["FORMATS", "Printer", "concise", "name", "stream_for", "summary"]
