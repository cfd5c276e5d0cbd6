"""How `check` prints as it goes: each input's result as soon as it is judged, like ruff.

One module a format, each a `Writer(sink, verbose, quiet)` with `add(verdict)` (an input's
result, as it is judged) and `close(seen, inputs, skipped)` (the end): text (text.py),
concise, github (streamed), json and sarif (one document, written at the end). Every byte
goes through a `safetext.Sink`. Inputs arrive in the order they are checked (files by name),
and the problems of one input are printed by file and line (report._problems). A progress
line goes to a terminal's stderr once a batch has run for a second; it is erased before
anything else is printed.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import IO

from ...judging.verdict import Verdict
from ..safetext import Sink
from . import concise, github, json, sarif, text

WRITERS = {"text": text.Writer, "concise": concise.Writer, "json": json.Writer,
           "github": github.Writer, "sarif": sarif.Writer}
FORMATS = tuple(WRITERS)
PROGRESS_AFTER_S = 1.0


class Printer:
    """Writes verdicts in one format as they come (`add`), then the end (`close`)."""

    def __init__(self, fmt: str, out: IO[str], *, verbose: bool = False, quiet: bool = False,
                 color: bool = False, progress: IO[str] | None = None, total: int = 0):
        self.sink = Sink(out, color)
        self.writer = WRITERS[fmt](self.sink, verbose, quiet)
        self.progress = Sink(progress) if progress is not None else None
        self.total = total
        self.seen: list[Verdict] = []
        self.inputs = 0
        self.start = time.monotonic()
        self._shown = False  # a progress line is on the terminal

    def working(self, path: str) -> None:
        """Say which input is being checked, once the batch has taken a second."""
        if self.progress is None or time.monotonic() - self.start < PROGRESS_AFTER_S:
            return
        self.progress.status(f"[{self.inputs + 1}/{self.total}] checking {path}")
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self.progress.clear()
            self._shown = False

    def add(self, verdicts: list[Verdict]) -> None:
        """One input's verdicts (a Python launcher may give several): printed now."""
        self.inputs += 1
        self.seen += verdicts
        self._erase()
        for v in verdicts:
            self.writer.add(v)
        self.sink.flush()

    def close(self, skipped: Counter | None = None) -> None:
        """The document (json, sarif), or the map / table and the one-line summary."""
        self._erase()
        self.writer.close(self.seen, self.inputs, skipped or Counter())
        self.sink.flush()


def stream_for(path: str | None) -> tuple[IO[str], bool]:
    """(where the report goes, whether to close it): --output-file, else stdout."""
    if path is None or path == "-":
        return sys.stdout, False
    from ...model.errors import InputError

    try:
        return open(path, "w", encoding="utf-8"), True
    except OSError as e:
        raise InputError(f"--output-file {path}: cannot write: {e.strerror or e}") from None


__all__ = ["FORMATS", "Printer", "stream_for"]
