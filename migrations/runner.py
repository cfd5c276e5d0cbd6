"""`miles-topology migrate SCRIPT...`: apply the pending steps, then show, write or check.

Nothing is written unless every pending step passed and the result reads as the same job:
the same Topology, the same other flags, the same launch. Writes are atomic (a temporary
file in the same folder, then os.replace), the topology YAML before the script that names
it, and the script's previous text stays in SCRIPT.bak.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from . import m0001_rename_flags, m0002_explicit_and_dead, m0003_consolidate
from .common import Refused, State, first_read, mark, read, verify, version

STEPS = (m0001_rename_flags, m0002_explicit_and_dead, m0003_consolidate)  # in order
LATEST = STEPS[-1].ID


@dataclass
class Outcome:
    """A migrated script, not yet written."""

    path: Path
    old: str
    new: str
    files: dict[Path, str] = field(default_factory=dict)  # absolute path -> new text
    applied: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.new != self.old or any(
            not p.exists() or p.read_text() != t for p, t in self.files.items())


def load(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Refused(f"cannot read it: {e.strerror or e}", 2) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("it is not UTF-8 text, so it cannot be edited byte for byte", 2) from None


def pending(text: str) -> list:
    return [s for s in STEPS if int(s.ID) > version(text)]


def migrate(path: str | Path, env: dict[str, str] | None = None, inline: bool = False) -> Outcome:
    """Run the pending steps on a script in memory; raises Refused, never writes."""
    path = Path(path)
    text = load(path)
    todo = pending(text)
    out = Outcome(path, text, text)
    if not todo:
        return out
    state = State(path, text, dict(env or {}), inline)
    before = current = first_read(state)
    for step in todo:
        step.migrate(state, current)
        if step is todo[-1]:
            state.text = mark(state.text, step.ID)
        try:
            current = read(state)
        except Refused as e:
            raise Refused(f"step {step.ID} would leave a script that does not read back "
                          f"({e.reason}); nothing was written.") from None
        verify(step.ID, before, current)
        out.applied.append(step.ID)
    out.new, out.files, out.done, out.kept = state.text, state.files, state.done, state.kept
    return out


def write(out: Outcome) -> list[Path]:
    """Write the YAML first, then the script (keeping SCRIPT.bak); on failure undo what was
    created and leave the script as it was. Returns the files written."""
    written, created = [], []
    try:
        for p, text in out.files.items():
            if p.exists() and p.read_text() == text:
                continue
            if not p.exists():
                created.append(p)
            _atomic(p, text.encode(), 0o644)
            written.append(p)
        mode = out.path.stat().st_mode & 0o7777
        bak = out.path.with_name(out.path.name + ".bak")
        if not bak.exists():
            created.append(bak)
        _atomic(bak, out.old.encode(), mode)
        _atomic(out.path, out.new.encode(), mode)
        written.append(out.path)
    except OSError as e:
        for p in created:
            with suppress(OSError):
                p.unlink()
        raise Refused(f"cannot write ({e.strerror or e}); the script was left as it was") \
            from None
    return written


def _atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def diff(out: Outcome) -> str:
    """A unified diff of the script and of each file written beside it."""
    parts = [_udiff(out.old, out.new, str(out.path), str(out.path))]
    for p, text in out.files.items():
        shown = os.path.join(os.path.dirname(str(out.path)), p.name)
        old = p.read_text() if p.exists() else ""
        parts.append(_udiff(old, text, shown if p.exists() else "/dev/null", shown))
    return "".join(parts)


def _udiff(a: str, b: str, fa: str, fb: str) -> str:
    lines = difflib.unified_diff(a.splitlines(True), b.splitlines(True), fa, fb)
    return "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n"
                   for x in lines)


def report(out: Outcome, stream) -> None:
    print(f"{out.path}: applied {', '.join(out.applied)}", file=stream)
    for line in out.done:
        print(f"  {line}", file=stream)
    for line in out.kept:
        print(f"  kept: {line}", file=stream)


def main(inputs: list[str], env: dict[str, str], *, write: bool = False, check: bool = False,
         inline: bool = False) -> int:
    """The `migrate` subcommand; returns the exit code (0 done, 1 pending or refused, 2 unreadable
    input or usage)."""
    if check and write:
        print("miles-topology migrate: --check only reports; give it without --write",
              file=sys.stderr)
        return 2
    if not inputs:
        print("miles-topology migrate: give the launch scripts to migrate", file=sys.stderr)
        return 2
    code = 0
    for name in inputs:
        try:
            code = max(code, _one(Path(name), env, write, check, inline))
        except Refused as e:
            print(f"{name}: refused: {e.reason}", file=sys.stderr)
            code = max(code, e.code)
    return code


def _one(path: Path, env: dict[str, str], write_: bool, check: bool, inline: bool) -> int:
    if check:
        todo = pending(load(path))
        if not todo:
            print(f"{path}: up to date (migration {LATEST})")
            return 0
        print(f"{path}: pending {', '.join(f'{s.ID} ({s.SUMMARY})' for s in todo)}; run "
              f"`miles-topology migrate --write {path}`")
        return 1
    out = migrate(path, env, inline)
    if not out.applied:
        print(f"{path}: up to date (migration {LATEST})", file=sys.stderr)
        return 0
    if not write_:
        sys.stdout.write(diff(out))
        report(out, sys.stderr)
        return 0
    written = write(out)
    report(out, sys.stdout)
    print(f"  wrote {', '.join(str(p) for p in written)} (previous script in "
          f"{out.path.name}.bak)")
    return 0
