"""The text format (default): nothing for a clean input, each problem of the others, then a
one-line summary; `verbose`: every input's full report (values, sources, the map or, for a
batch, a table), clean ones too."""

from __future__ import annotations

from collections import Counter

from ...judging.verdict import Verdict, _problems, name
from ..safetext import Paint, Sink


class Writer:
    def __init__(self, sink: Sink, verbose: bool = False, quiet: bool = False):
        self.sink, self.verbose, self.quiet = sink, verbose, quiet

    def add(self, v: Verdict) -> None:
        if self.verbose:
            text_one(v, self.sink)
        elif v.unreadable is not None or any(True for _ in _problems(v)):
            text_one(v, self.sink, True)

    def close(self, seen: list[Verdict], inputs: int, skipped: Counter) -> None:
        if self.verbose:
            v = seen[0] if len(seen) == 1 else None
            if v is not None and v.topology is not None and v.extra and \
                    v.summary is not None:  # no map of sizes that depend on unknowns
                from ..show import text_map

                self.sink.text("\n" + text_map(v.topology))
            if len(seen) > 1:
                table(seen, self.sink)
        if not self.quiet:
            self.sink.line(summary(seen, inputs, skipped))


def text_one(v: Verdict, sink: Sink, quiet: bool = False) -> None:
    """One input's report; `quiet`: its problems only, without values."""
    if v.unreadable is not None:
        label = "INTERNAL ERROR" if v.internal else "UNREADABLE"
        sink.line(v.path, ": ", Paint(label, "UNREADABLE"), ": ", v.unreadable)
        return
    if v.nothing is not None:
        sink.line(v.path, ": ", Paint("nothing to check", "nothing"), f" ({v.nothing})")
        return
    s = v.summary
    state = Paint("OK" if v.ok else "INVALID", "OK" if v.ok else "INVALID")
    if v.ok and v.extra.get("unresolved"):
        n = len(v.extra["unresolved"])
        # a value from a Python launcher's stand-in module or missing file is no --env's
        how = "pass --env KEY=VALUE" if any("kind" not in u for u in v.extra["unresolved"]) \
            else "see below"
        state = f"OK as far as known ({n} unresolved: {how})"
    sizes = ""
    if s:
        sizes = f"  world {s['world_size']}"
        if "dp" in s:
            sizes += f", dp {s['dp']}, edp {s['edp']}"
        sizes += (
            f" | tp {s['tp']} cp {s['cp']} pp {s['pp']} ep {s['ep']} etp {s['etp']}"
            f" | {s['num_engines']} engine(s) x {s['engine_size']} GPU"
        )
    sink.line(name(v), ": ", state, sizes)
    for line in [] if quiet else v.extra.get("report_lines", []):
        sink.line("  ", line)
    if not quiet and v.memory is not None:
        for line in memory_lines(v.memory):
            sink.line("  ", line)
    for kind, p in _problems(v):
        first, *rest = p.lines(kind)
        word, _, tail = first.partition(" ")
        sink.line("  ", Paint(word, kind), " ", tail)
        for line in rest:
            sink.line("  ", line)


def memory_lines(report: dict | None) -> list[str]:
    """The text of a memory estimate (fit.py's `Verdict.memory`)."""
    if not report:
        return []
    if "skipped" in report:
        return [f"memory: not estimated ({report['skipped']})"]
    big = report["stages"][report["largest_stage"]]
    acts = "?" if big["activations_gib"] is None else big["activations_gib"]
    gpu = f"{report['gpu_gib']:g} GiB {report['gpu']}" + (" (assumed)" if report["gpu_assumed"]
                                                          else "")
    out = [f"memory (largest rank, pipeline stage {big['stage']}): weights "
           f"{big['weights_gib']:g} + grads {big['grads_gib']:g} + optimizer "
           f"{big['optimizer_gib']:g} + activations ~{acts} + reserve "
           f"{big.get('reserve_gib', 0):g} = {big['total_gib']:g} GiB of "
           f"{gpu}" + ("" if report["vocab_known"] else " (vocabulary unknown)")]
    if len(report["stages"]) > 1:
        out.append("memory per rank, by pipeline stage (its ranks alike): " + ", ".join(
            f"pp{m['stage']} {m['total_gib']:g}" for m in report["stages"]) + " GiB")
    eng = report.get("engine")
    if eng:
        kv = "KV cache tokens unknown (no --sglang-mem-fraction-static)" \
            if eng["kv_tokens"] is None else f"KV cache ~{eng['kv_tokens']:,} tokens"
        out.append(f"rollout engine GPU (engine tp {eng['tp']}, ep {eng['ep']}, dp "
                   f"{eng['dp']}): weights {eng['weights_gib']:g} GiB (bf16), {kv}")
    return out


def table(verdicts: list[Verdict], sink: Sink) -> None:
    """A batch's verdicts, one row an input, then the counts."""
    from ..safetext import printable

    rows = [("input", "verdict", "world", "dp", "edp", "problems")]
    for v in verdicts:
        s = v.summary or {}
        codes = [p.code for p in v.errors] + [f"({p.code})" for p in v.skipped]
        state = ("INTERNAL ERROR" if v.internal else "UNREADABLE") \
            if v.unreadable is not None else "nothing to check" \
            if v.nothing is not None else "ok" if v.ok else "INVALID"
        # escaped before the widths are taken, so that the columns line up
        rows.append((printable(name(v)), state, str(s.get("world_size", "?")),
                     str(s.get("dp", "?")), str(s.get("edp", "?")), " ".join(codes) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    sink.line()
    for r in rows:
        sink.line("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    bad = sum(not v.ok and v.unreadable is None for v in verdicts)
    lost = sum(v.unreadable is not None for v in verdicts)
    idle = sum(v.nothing is not None for v in verdicts)
    tail = f", {lost} unreadable" if lost else ""
    tail += f", {idle} with nothing to check" if idle else ""
    valid = len(verdicts) - bad - lost - idle
    sink.line()
    sink.line(f"{len(verdicts)} inputs: {valid} valid, {bad} invalid{tail}")


def summary(verdicts: list[Verdict], inputs: int, skipped: Counter) -> str:
    """"All checks passed: 3 inputs" or "Found 2 errors, 1 warning in 5 inputs (1 invalid)",
    with what a folder walk skipped."""
    counts = Counter(kind for v in verdicts for kind, _ in _problems(v))
    lost = sum(v.unreadable is not None and not v.internal for v in verdicts)
    bugs = sum(v.internal for v in verdicts)
    bad = sum(not v.ok and v.unreadable is None for v in verdicts)
    idle = sum(v.nothing is not None for v in verdicts)
    n = f"{inputs} input{'s' if inputs != 1 else ''}"
    parts = [f"{counts[k]} {w}{'s' if counts[k] != 1 else ''}" for k, w in
             (("error", "error"), ("warning", "warning"), ("skipped", "skipped check"))
             if counts[k]]
    parts += [f"{lost} unreadable"] if lost else []
    parts += [f"{bugs} internal error{'s' if bugs != 1 else ''}"] if bugs else []
    tail = [f"{bad} invalid"] if bad else []
    tail += [f"{idle} with nothing to check"] if idle else []
    left = sum(skipped.values())
    if left:
        tail.append(f"{left} other file{'s' if left != 1 else ''} skipped (" + ", ".join(
            f"{c} {why}" for why, c in sorted(skipped.items())) + ")")
    head = f"Found {', '.join(parts)} in {n}" if parts else \
        f"All checks passed: {n}"
    return head + (f"; {'; '.join(tail)}" if tail else "") + "."
