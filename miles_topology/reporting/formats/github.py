"""The github format: a workflow annotation a problem (`::error file=F,line=L,col=C,
title=CODE::message`), streamed; the framing is the tool's (`Sink.command`)."""

from __future__ import annotations

from collections import Counter

from ...judging.verdict import Verdict, _launch, _launch_at, _launch_text, _problems, column
from ..safetext import Sink

LEVEL = {"error": "error", "warning": "warning", "note": "notice", "skipped": "notice"}


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink = sink

    def add(self, v: Verdict) -> None:
        if v.unreadable is not None:
            self.sink.command("error", [("file", v.path), ("title", v.code)], v.unreadable)
            return
        if _launch(v):  # one entry per launch of a launcher that starts several
            path, line = _launch_at(v)
            self.sink.command("notice", [("file", path), ("line", line), ("title", "launch")],
                              _launch_text(v))
        for kind, p in _problems(v):
            props: list[tuple[str, object]] = []
            path = p.location.path if p.location else (v.path if v.path != "flags" else None)
            if path is not None:
                props.append(("file", path))
            if p.location is not None and p.location.line > 0:
                props.append(("line", p.location.line))
                col = column(p)
                if col is not None:
                    props.append(("col", col))
            props.append(("title", p.code))
            text = f"{p.message} Fix: {p.fix}" + (" (skipped: depends on an unresolved value)"
                                                  if kind == "skipped" else "")
            self.sink.command(LEVEL[kind], props, text)

    def close(self, seen: list[Verdict], inputs: int, skipped: Counter) -> None:
        """Nothing: each annotation was written as its input was judged."""
