"""The json format: one object (a list of them for several inputs), written at the end;
values exact (`Sink.document`)."""

from __future__ import annotations

from collections import Counter

from ...judging.verdict import Verdict
from ..safetext import Sink


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink = sink

    def add(self, v: Verdict) -> None:
        """Kept for the document (`close`)."""

    def close(self, seen: list[Verdict], inputs: int, skipped: Counter) -> None:
        data = [v.as_dict() for v in seen]
        self.sink.document(data[0] if len(data) == 1 else data)
