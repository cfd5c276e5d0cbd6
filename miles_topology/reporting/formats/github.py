"""The github format: a workflow annotation a problem (`::error file=F,line=L,col=C,
title=CODE::message`), streamed; the framing is the tool's (`Sink.command`)."""

from __future__ import annotations

from collections import Counter

from ...judging.verdict import Verdict, _problems, column
from ..safetext import Sink

LEVEL = {"error": "error", "warning": "warning", "note": "notice", "skipped": "notice"}


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink = sink

    def add(self, v: Verdict) -> None:
        unread = v.unread()
        if unread is not None:
            self.sink.command("error", [("file", v.path), ("title", unread.code)],
                              unread.message)
            return
        launch = v.launch_note()
        if launch is not None:  # one entry per launch of a launcher that starts several
            at = launch.location
            self.sink.command("notice", [("file", at.path), ("line", at.line),
                                         ("title", launch.code)], launch.message)
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
