"""The sarif format: one SARIF 2.1.0 log, written at the end; values exact
(`Sink.document`)."""

from __future__ import annotations

from collections import Counter

from ...codes import CODES, page
from ...judging.verdict import Verdict, _problems, column
from ..safetext import Sink

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink = sink

    def add(self, v: Verdict) -> None:
        """Kept for the log (`close`)."""

    def close(self, seen: list[Verdict], inputs: int, skipped: Counter) -> None:
        self.sink.document(log(seen))


def log(verdicts: list[Verdict]) -> dict:
    from ... import __version__

    rules: dict[str, int] = {}
    results = []
    for v in verdicts:
        found = list(_problems(v))
        if v.unread() is not None:
            found = [("error", v.unread())]
        if v.launch_note() is not None:  # one entry per launch of a launcher with several
            found.insert(0, ("note", v.launch_note()))
        for kind, p in found:
            level = {"error": "error", "warning": "warning"}.get(kind, "note")
            index = rules.setdefault(p.code, len(rules))
            result = {
                "ruleId": p.code,
                "ruleIndex": index,
                "level": level,
                "message": {"text": p.message if p.code == "launch" else
                            f"{p.message} Fix: {p.fix}"},
            }
            path = p.location.path if p.location else (v.path if v.path != "flags" else None)
            if path is not None:
                loc: dict = {"artifactLocation": {"uri": path}}
                if p.location is not None and p.location.line > 0:
                    loc["region"] = {"startLine": p.location.line}
                    col = column(p)
                    if col is not None:
                        loc["region"]["startColumn"] = col
                result["locations"] = [{"physicalLocation": loc}]
            if p.flags:
                result["properties"] = {"flags": list(p.flags)}
            results.append(result)
    driver_rules = []
    for code in rules:  # the code's whole record; no link (the wheel ships no docs/)
        c = CODES[code]
        driver_rules.append({
            "id": code,
            "shortDescription": {"text": c.summary},
            "fullDescription": {"text": c.why},
            "help": {"text": page(code)},
            "defaultConfiguration": {"level": {"error": "error", "warning": "warning"}.get(
                c.severity, "note")},
        })
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "miles-topology", "version": __version__,
                                "rules": driver_rules}},
            "results": results,
        }],
    }
