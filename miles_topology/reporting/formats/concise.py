"""The concise format: one `path:line:col: severity code message` line a problem (ruff's
concise, with the severity word after the position as shellcheck's gcc format has it; an
unreadable input or internal error is `error`), then the summary line."""

from __future__ import annotations

from collections import Counter

from ...judging.verdict import Verdict, _problems, column
from ..safetext import Paint, Sink
from .text import summary


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink, self.quiet = sink, quiet

    def add(self, v: Verdict) -> None:
        for parts in concise(v):
            self.sink.line(*parts)

    def close(self, seen: list[Verdict], inputs: int, skipped: Counter) -> None:
        if not self.quiet:
            self.sink.line(summary(seen, inputs, skipped))


def concise(v: Verdict) -> list[tuple[str, ...]]:
    """The parts of each line of a verdict (a `Sink.line` each)."""
    unread = v.unread()
    if unread is not None:
        return [(f"{v.path}:1:1: error ", Paint(unread.code, "error"), " ",
                 _one_line(unread.message))]
    out = []
    for kind, p in _problems(v):
        path = p.location.path if p.location else v.path
        at = p.location.line if p.location and p.location.line > 0 else 1
        col = column(p) if p.location else None
        note = " (skipped: depends on an unresolved value)" if kind == "skipped" else ""
        out.append((f"{path}:{at}:{col or 1}: {kind} ", Paint(p.code, kind), " ",
                    _one_line(p.message), note))
    return out


def _one_line(text: str) -> str:
    """A message on one line (a launcher's own error may span several)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())
