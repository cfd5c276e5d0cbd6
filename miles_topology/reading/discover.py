"""Which files `check FOLDER` checks, found as linters find them.

A folder is walked recursively in name order; `.gitignore` files met on the way (and the
`exclude` / `extend-exclude` globs of `[tool.miles-topology]`, relative to that
pyproject.toml) leave files out, as ruff does (`--no-respect-gitignore`: the .gitignore
files do not). A file is an input by its content, not its
name: a shell script that starts train.py (or train_async.py, `miles.train`), a Python file
with a `__main__` guard that starts one (miles' scripts/run_*.py call
`U.execute_train`), a topology YAML. The rest (model files that only set MODEL_ARGS,
helpers, data preparation, servers) is skipped and counted, never reported unreadable.
The content test is a cheap filter; the reader still decides what a file launches.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import gate
from .commandline import TRAIN_FILES, TRAIN_MODULES

# folders never walked into (ruff's default `exclude`, those that apply here)
DEFAULT_EXCLUDE = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__",
                   "node_modules", "build", "dist", "site-packages", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", "*.egg-info")
SHELL = (".sh", ".bash")
YAML = (".yaml", ".yml")

_FILES = "|".join(re.escape(n) for n in sorted(TRAIN_FILES))
_MODULES = "|".join(re.escape(m) for m in sorted(TRAIN_MODULES))
# a word naming the training entry: train.py, train_async.py, `-m miles.train`
_TRAINS = re.compile(rf"(?:^|[\s/\"'=])(?:{_FILES})\b|-m\s+[\w.]*\b(?:{_MODULES})\b", re.M)
# a Python launcher starts a process (miles' command_utils.execute_train, subprocess, ...)
_PY_LAUNCH = re.compile(r"execute_train\s*\(")
_PY_PROCESS = re.compile(r"\b(?:subprocess|os\.system|os\.exec\w*|os\.spawn\w*|Popen|"
                         r"exec_command\w*)\b")
_MAIN = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]\s*:""", re.M)
_KEY = re.compile(r"^([A-Za-z_]\w*)\s*:", re.M)  # a top-level key of a YAML mapping


@dataclass
class Found:
    """The inputs to check, in order, and what a walk skipped (reason -> count)."""

    inputs: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    walked: bool = False  # a folder was given: the run is a batch


def kind(path: str, roots=None) -> str | None:
    """"script", "launcher" or "yaml" when the file's content makes it an input, else None.
    `roots`: the walked folder's checkout (gate.py), which a linked entry must stay in."""
    name = path.lower()
    if not name.endswith((*SHELL, ".py", *YAML)) and not _shebang_shell(path, roots):
        return None
    try:
        text = gate.read_text(path, roots)[:1 << 20]
    except (OSError, gate.Refused):
        return None
    if name.endswith(YAML):
        return "yaml" if name.endswith((".topology.yaml", ".topology.yml")) or \
            _topology_keys(text) else None
    if name.endswith(".py"):
        launches = _PY_LAUNCH.search(text) or _PY_PROCESS.search(text) and _TRAINS.search(text)
        return "launcher" if _MAIN.search(text) and launches else None
    return "script" if _TRAINS.search(text) else None


def _topology_keys(text: str) -> bool:
    """A YAML whose top-level keys are Topology fields, two at least, and nothing else."""
    from ..model.parts import FIELDS

    got = set(_KEY.findall(text))
    return len(got) >= 2 and got <= set(FIELDS)


def _shebang_shell(path: str, roots=None) -> bool:
    """An extension-less file that is a bash script by its first line."""
    if os.path.splitext(path)[1]:
        return False
    try:
        head = gate.read_bytes(path, roots)[:64]
    except (OSError, gate.Refused):
        return False
    return head.startswith(b"#!") and (b"bash" in head.split(b"\n")[0]
                                       or head.split(b"\n")[0].endswith(b"/sh"))


def find(paths: list[str], exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
         base: str | None = None, gitignore: bool = True) -> Found:
    """Named files as given; each named folder walked. `exclude`: gitignore-style globs,
    relative to `base` (the pyproject.toml's folder; else matched against any part).
    `gitignore` False (--no-respect-gitignore): no .gitignore file is read."""
    out = Found()
    root_rules = Ignore.of(exclude, base)
    for p in paths:
        if not os.path.isdir(p):
            out.inputs.append(p)
            continue
        out.walked = True
        real = Path(os.path.realpath(p))
        roots = (gate.root_of(real / "_"), *gate.USER.get())  # the folder's checkout
        above = _parent_gitignores(p) if gitignore else []
        for f in _walk(p, [root_rules, *above], roots, gitignore):
            try:  # an entry linked out of the checkout, or to a credential, is not read
                gate.check_path(f, roots)
            except gate.Refused:
                out.skipped["refused by the gate (a link out of the checkout or to a "
                            "credential)"] += 1
                continue
            what = kind(f, roots)
            if what is None:
                out.skipped[_why(f)] += 1
            else:
                out.inputs.append(f)
    return out


def _why(path: str) -> str:
    if path.endswith((*SHELL, ".py")):
        return "no training launch"
    return "not a launch script"


def _walk(top: str, rules: list[Ignore], roots=None, gitignore: bool = True):
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return
    gi = os.path.join(top, ".gitignore")
    if gitignore and os.path.isfile(gi):
        rules = [*rules, Ignore.file(gi, roots)]
    for e in entries:
        is_dir = e.is_dir(follow_symlinks=False)
        if any(r.ignored(e.path, is_dir) for r in rules):
            continue
        if is_dir:
            if gate.hidden_in([e.name]):  # .git, .ssh ...: never walked into
                continue
            yield from _walk(e.path, rules, roots, gitignore)
        elif e.is_file() and (e.name.endswith((*SHELL, ".py", *YAML)) or
                              not os.path.splitext(e.name)[1]):
            yield e.path


def _parent_gitignores(folder: str) -> list[Ignore]:
    """The .gitignore files above a named folder, up to its git work tree's root."""
    here = Path(folder).resolve()
    out = []
    for d in here.parents:
        gi = d / ".gitignore"
        if gi.is_file():
            out.append(Ignore.file(str(gi)))
        if (d / ".git").exists():
            break
    return out[::-1]


# ---------------------------------------------------------------- gitignore patterns


@dataclass
class Ignore:
    """The patterns of one .gitignore (or of `exclude`), relative to `base` (None: a
    pattern without a slash matches a name at any depth, one with a slash nothing)."""

    base: str | None
    rules: list[tuple[re.Pattern, bool, bool]]  # (regex, negated, directories only)

    @classmethod
    def file(cls, path: str, roots=None) -> Ignore:
        try:  # a regular file (never a FIFO that would block), inside the walk's checkout
            lines = gate.read_text(path, roots).splitlines()
        except (OSError, gate.Refused):
            lines = []
        return cls.of(lines, os.path.dirname(os.path.abspath(path)))

    @classmethod
    def of(cls, patterns, base: str | None) -> Ignore:
        rules = []
        for raw in patterns:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            line = line[1:] if neg else line
            if line.startswith("\\"):
                line = line[1:]
            dirs = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            line = line.lstrip("/")
            rx = _glob(line)
            rules.append((re.compile(rx if anchored else rf"(?:.*/)?{rx}"), neg, dirs))
        return cls(os.path.abspath(base) if base else None, rules)

    def ignored(self, path: str, is_dir: bool) -> bool:
        path = os.path.abspath(path)
        if self.base is not None:
            rel = os.path.relpath(path, self.base)
            if rel.startswith(".."):
                return False
        else:
            rel = os.path.basename(path)
        rel = rel.replace(os.sep, "/")
        out = False
        for rx, neg, dirs in self.rules:
            if dirs and not is_dir:
                continue
            if rx.fullmatch(rel):
                out = not neg
        return out


def _glob(pat: str) -> str:
    """A gitignore glob as a regex: `*` and `?` stay in one path part, `**` crosses them."""
    out, i = [], 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
            continue
        if pat.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j].replace("\\", "\\\\")
                out.append(f"[^{body[1:]}]" if body.startswith("!") else f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
