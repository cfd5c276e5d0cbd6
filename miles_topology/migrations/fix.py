"""`check --fix` / `--diff`: the fixes `check` states as mechanical, applied to the text.

- `deprecated-flag`: a spelling upstream renamed (surface.json `renamed_to`) or miles renamed
  plainly (flags.RENAMED: --rollout-num-gpus-per-node) is written under its new name; one
  upstream ignores is removed (unsafe: the flag goes).
- `unknown-flag` of a spelling miles renamed (flags.RENAMED, which no current stack defines):
  written under its new name, as a `deprecated-flag`.
- `unknown-flag` with a unique near miss (flags.suggest): the spelling is corrected. Safe
  only for one typo (`--kl-los-coef`); unsafe when the flag it becomes sets the topology
  (the job's layout changes) or is further away (`--use-gated-attention` is not a typo of
  `--use-kitchen-attention`: it may be a flag of the user's own Megatron).
- `flag-given-twice` (bash): the earlier occurrences, which the last overrides, are removed.

Each fix edits only the words the problem is about (a bash script's word spans from the
reader; a Python launcher's flag word at the literal that spells it, pylaunch/locate.py).
The result is read back, the way `check` reads it, before anything is written: the launch
must pass the same words but for the fixed ones, and, for a safe fix, set the same topology;
else nothing is written. Writing is migrate's (migrations/runner.py): atomic, the file
re-read just before it is replaced, mode and owner kept; no backup (like ruff --fix).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..codes import CODES
from ..model.errors import InputError, NoTrainingLaunch, Problem

if TYPE_CHECKING:
    from ..judging.verdict import Verdict

_NAME = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass
class Change:
    """One fix: the flag `old` becomes `new` (None: the occurrence is removed)."""

    problem: Problem
    old: str
    new: str | None
    unsafe: bool
    line: int


@dataclass
class Fixed:
    """A file's fixes, not yet written (`why`: they were refused, nothing is written)."""

    path: str
    old: str
    new: str
    done: list[str] = field(default_factory=list)
    why: str | None = None
    left: int = 0  # fixes that need --unsafe-fixes
    kept: list[str] = field(default_factory=list)  # fixes left for a person, with why


# code -> (when its fix is safe, the fix): each fix registers beside itself with `fixer`,
# which marks the code's record (codes/) fixable: one statement of it
FIXERS: dict[str, tuple[str, Callable[[Problem, str, int], Change | None]]] = {}


def fixer(code: str, safety: str):
    """Register the fix of `code` (problem, its first flag, its line -> Change or None) with
    when it is safe (`rule CODE` prints it)."""
    def register(fn):
        FIXERS[code] = (safety, fn)
        CODES[code] = replace(CODES[code], fixable=True)
        return fn
    return register


def fixable(code: str) -> bool:
    """Whether `--fix` rewrites a code: a fix of it is registered."""
    return code in FIXERS


def change_for(p: Problem, unsafe: bool) -> Change | None:
    """The mechanical fix of a problem, or None (not fixable, or unsafe and not allowed)."""
    if not fixable(p.code) or not p.flags:
        return None
    return FIXERS[p.code][1](p, p.flags[0], p.location.line if p.location else 0)


@fixer("deprecated-flag", "safe when it renames the flag; unsafe when it removes one "
                          "upstream ignores")
def _renamed(p: Problem, name: str, line: int) -> Change | None:
    """The spelling upstream (surface.json `renamed_to`) or miles (flags.RENAMED) renamed it
    to; a flag upstream removed and ignores is removed."""
    from ..reading import surface
    from ..reading.flags import RENAMED

    r, f = RENAMED.get(name), surface.flag(name)
    new = r.new if r is not None else f.renamed_to if f is not None else None
    if new is not None and _NAME.fullmatch(new):
        return Change(p, name, new, False, line)
    if r is None and f is not None and f.removed:
        return Change(p, name, None, True, line)
    return None


@fixer("unknown-flag", "safe when the one near-miss spelling is one typo away (a letter "
                       "missing, extra, wrong or two swapped) and not a layout flag; unsafe "
                       "otherwise (the layout changes, or the flag may be the user's own)")
def _near_miss(p: Problem, name: str, line: int) -> Change | None:
    """A renamed spelling as `deprecated-flag`'s; else the one near miss."""
    from ..reading.flags import RENAMED, field_of, suggest

    if name in RENAMED:
        return _renamed(p, name, line)
    near = suggest(name)
    if near is not None and _NAME.fullmatch(near) and _NAME.fullmatch(name):
        risky = field_of(near) is not None or typos(name, near) > 1
        return Change(p, name, near, risky, line)
    return None


@fixer("flag-given-twice", "safe in a bash script: the occurrences the last one overrides "
                           "are removed")
def _repeated(p: Problem, name: str, line: int) -> Change | None:
    return Change(p, name, None, False, line)


def typos(a: str, b: str) -> int:
    """Edits from `a` to `b`: a letter inserted, deleted or changed, two adjacent swapped."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def plan(v: Verdict, unsafe: bool) -> tuple[list[Change], int]:
    """(the fixes of a verdict's problems that may be applied, how many need --unsafe-fixes)."""
    out, held = [], 0
    for p in [*v.errors, *v.warnings]:
        c = change_for(p, unsafe)
        if c is None:
            continue
        if c.unsafe and not unsafe:
            held += 1
            continue
        out.append(c)
    return out, held


# ---------------------------------------------------------------- bash scripts


def fix_script(path: str, v: Verdict, env: dict[str, str], unsafe: bool) -> Fixed | None:
    """The fixed text of a launch script (None: nothing to fix)."""
    from ..shell import ScriptReadError, read_script
    from .common import apply
    from .runner import Refused, load

    changes, held = plan(v, unsafe)
    if not changes:
        return Fixed(path, "", "", left=held) if held else None
    try:
        text = load(Path(path))
        before = read_script(path, env, text=text)
    except (Refused, ScriptReadError, OSError):
        return None
    here = os.path.abspath(path)
    edits, done, renamed, dropped, kept = [], [], {}, set(), []
    for c in changes:
        got = _edits_for(c, before, text, here)
        if got is None:  # not written as words of its own in this file: left for a person
            loc = c.problem.location
            at = f" ({loc.path}:{loc.line})" if loc and loc.line else ""
            kept.append(f"[{c.problem.code}] {c.old}{at}: a word of it is not written in this "
                        "file (a sourced file, a variable's value), or a removal would take "
                        "several value words; left to you")
            continue
        edits += got[0]
        renamed.update(got[1])
        dropped |= got[2]
        done.append(_said(c))
    if not edits:
        return Fixed(path, text, text, left=held, kept=kept)
    try:
        new = apply(text, edits)
    except Refused as e:
        return Fixed(path, text, text, why=e.reason, left=held)
    out = Fixed(path, text, new, done, left=held, kept=kept)
    try:
        after = read_script(path, env, text=new)
    except ScriptReadError as e:
        out.why = f"the fixed script does not read back ({e})"
        return out
    out.why = _read_back(before, after, renamed, dropped, changes)
    return out


def _edits_for(c: Change, before, text: str, here: str) -> tuple[list, dict, set] | None:
    """The edits one change makes to the words that spell its flag, with the argv positions
    it renames and drops; None when they are not words of their own in this file."""
    from .common import Edit, delete, words

    occurrences = [fv for fv in before.argv if fv.flag == c.old]
    if c.problem.code == "flag-given-twice":  # all but the last (the one that runs)
        targets = occurrences[:-1]
    else:
        targets = [fv for fv in occurrences if not c.line or fv.source.line == c.line]
    # a rename edits the flag's own word only, so its value stays as written: several words
    # (held-out: `--sglang-cuda-graph-bs 1 2 4 8 $(seq 16 8 256)` was left unrenamed) or a
    # variable set elsewhere or at run time (`--sglang-cuda-graph-max-bs ${MAX_BS}`, likewise)
    spans = [(fv, words(fv) if c.new is None else [fv.span]) for fv in targets]
    if not targets or any(s is None or s.file != here for _, ws in spans for s in ws) or \
            c.new is None and any(len(fv.tokens) > 1 for fv in targets):
        return None
    edits, renamed, dropped = [], {}, set()
    for fv, ws in spans:
        i = next(k for k, x in enumerate(before.argv) if x is fv)
        if c.new is None:
            edits += [delete(s) for s in ws]
            dropped.add(i)
        else:
            word = text[fv.span.start:fv.span.end]
            if not word.startswith(c.old):
                continue  # quoted: left as written
            edits.append(Edit(fv.span.start, fv.span.start + len(c.old), c.new))
            renamed[i] = c.new
    return edits, renamed, dropped


def _read_back(before, after, renamed: dict, dropped: set, changes: list[Change]
               ) -> str | None:
    """Why the fixed script may not be written (None: it launches the words the fixes
    intend, reads with no new note and keeps the layout)."""
    want = [(renamed.get(i, fv.flag), fv.value) for i, fv in enumerate(before.argv)
            if i not in dropped]
    got = [(fv.flag, fv.value) for fv in after.argv]
    if (after.launcher, after.entry) != (before.launcher, before.entry) or got != want:
        return "the fixed script would launch other words than the fixes intend"
    if {n.code for n in after.notes} - {n.code for n in before.notes}:
        return "the fixed script would read differently (a new note)"
    return _layout_changed(before.flags(), after.flags(), changes)


def _layout_changed(old: list[str], new: list[str], changes: list[Change]) -> str | None:
    """Why the fix is refused when the layout the flags set changes (a safe fix must keep
    it; an unsafe one may change only the fields of the flags it corrects)."""
    from ..reading.flags import field_of, parse_flags

    a, b = parse_flags(old).fields, parse_flags(new).fields
    allowed = {field_of(c.new) for c in changes if c.unsafe and c.new}
    moved = [f"{k} {a.get(k)} -> {b.get(k)}" for k in {*a, *b}
             if a.get(k) != b.get(k) and k not in allowed]
    return f"the topology would change ({', '.join(sorted(moved))})" if moved else None


def _said(c: Change) -> str:
    at = f"line {c.line}: " if c.line else ""
    if c.problem.code == "flag-given-twice":
        return f"{at}{c.old} given once (the earlier occurrences, overridden, removed)"
    if c.new is None:
        return f"{at}removed {c.old} ({c.problem.code})"
    return f"{at}{c.old} -> {c.new} ({c.problem.code}{', unsafe' if c.unsafe else ''})"


# ---------------------------------------------------------------- Python launchers


def fix_launcher(path: str, v: list[Verdict], judge: Callable[[str], list[Verdict]],
                 unsafe: bool) -> Fixed | None:
    """The fixed text of a Python launcher: a flag word at the line of the launcher that
    spells it (its problem's location: the literal among the statements that ran, so a flag
    in both branches of a `match` is fixed in the branch taken), else written exactly once in
    the launcher, renamed; helpers are not edited, removals are left to a person. The result
    is run in the sandbox again and must launch the same words but the renamed ones."""
    from .runner import Refused, load

    changes, held = [], 0
    for one in v:
        got, h = plan(one, unsafe)
        changes += [c for c in got if c.new is not None]
        held += h
    if not changes:
        return Fixed(path, "", "", left=held) if held else None
    try:
        text = load(Path(path))
    except Refused:
        return None
    new_text, done, renames, kept = text, [], {}, []
    me = os.path.realpath(path)
    for old, new, risky, line in dict.fromkeys(
            (c.old, c.new, c.unsafe, c.line if c.problem.location and os.path.realpath(
                c.problem.location.path) == me else 0) for c in changes):
        hits = list(re.finditer(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new_text))
        if line:  # located (the literal that spells it, among what ran: pylaunch/locate.py)
            hits = [h for h in hits if new_text.count("\n", 0, h.start()) + 1 == line]
        if len(hits) != 1:  # written twice on its line, or built from pieces: left for a person
            kept.append(f"{old} -> {new}: not written exactly once "
                        f"{f'on line {line}' if line else 'in this file'}; left to you")
            continue
        s = hits[0].start()
        new_text = new_text[:s] + new + new_text[s + len(old):]
        renames[old] = new
        line = new_text.count("\n", 0, s) + 1
        done.append(f"line {line}: {old} -> {new}{' (unsafe)' if risky else ''}")
    out = Fixed(path, text, new_text, done, left=held, kept=kept)
    if new_text == text:
        return out
    out.why = _rerun(path, new_text, v, judge, renames, changes, text)
    return out


def _run_copy(path: str, text: str, judge) -> list[Verdict] | str:
    """Run `text` as a hidden copy beside the launcher: its launches, or why it failed."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.fix-",
                               suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            return judge(tmp)
        except (InputError, NoTrainingLaunch) as e:
            return f"the fixed launcher does not run as before ({e})"
    finally:
        with suppress(OSError):
            os.unlink(tmp)


def _steady(old: list[list[str]], twice: list[list[str]], words: list[list[str]]
            ) -> list[list[str]]:
    """`words` with each word the unfixed launcher spells differently from run to run (a
    timestamped run id, a path built from its own file name) blanked; `old` and `twice`
    are two runs of it."""
    if [len(a) for a in old] != [len(b) for b in twice]:
        return []  # no word-for-word match: nothing is steady
    return [[w if i < len(a) and a[i] == b[i] else "" for i, w in enumerate(ws)]
            for a, b, ws in zip(old, twice, words)]


def _rerun(path: str, text: str, before: list[Verdict], judge, renames: dict[str, str],
           changes: list[Change], original: str) -> str | None:
    """Run the fixed launcher (a hidden copy beside it) and compare its launches; words the
    unfixed launcher itself changes between runs (run again the same way) are not compared
    (held-out: a run id from the clock in --save was a refusal every time)."""
    after = _run_copy(path, text, judge)
    if isinstance(after, str):
        return after

    def renamed(argv: list[str]) -> list[str]:
        out = []
        for w in argv:
            name, eq, rest = w.partition("=")
            out.append(renames.get(name, name) + eq + rest)
        return out

    old = [v.extra.get("argv") or [] for v in before]
    new = [v.extra.get("argv") or [] for v in after]
    want = [renamed(a) for a in old]
    if want != new:
        again = _run_copy(path, original, judge)
        twice = [] if isinstance(again, str) else [v.extra.get("argv") or [] for v in again]
        steady = _steady(old, twice, want)
        if len(new) != len(old) or not steady or steady != _steady(old, twice, new):
            return "the fixed launcher would launch other words than the fixes intend"
    for a, b in zip(old, new):
        why = _layout_changed(a, b, changes)
        if why:
            return why
    return None


# ---------------------------------------------------------------- writing


def write(fixed: Fixed) -> None:
    """Replace the file atomically (migrate's writer: re-read first, mode and owner kept)."""
    from .runner import Outcome, replace_in_place

    replace_in_place(Outcome(Path(fixed.path), fixed.old, fixed.new))


def diff(fixed: Fixed) -> str:
    from .runner import _udiff

    return _udiff(fixed.old, fixed.new, fixed.path, fixed.path)
