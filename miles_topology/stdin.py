"""`check -`: a script read from standard input (an editor's unsaved buffer), as a file.

The readers take paths (a bash script sources files relative to its own folder, a Python
launcher runs in the sandbox, directives and columns are read back from the file), so the
text goes to a hidden temporary file beside `--stdin-filename` (its folder, when writable;
else a temporary folder), and every path in the verdicts is renamed back to that name.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import TYPE_CHECKING

from .model.errors import InputError

if TYPE_CHECKING:
    from .judging.verdict import Verdict

DEFAULT_NAME = "stdin.sh"  # read as a bash script unless --stdin-filename says otherwise


@contextmanager
def staged(name: str | None) -> Iterator[str]:
    """A temporary file holding stdin, named like `name` (its suffix), removed afterwards."""
    text = sys.stdin.read()
    shown = name or DEFAULT_NAME
    folder = os.path.dirname(os.path.abspath(shown))
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        folder = tempfile.gettempdir()
    base = os.path.basename(shown)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.stdin-", suffix=_suffix(base))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        yield tmp
    except OSError as e:
        raise InputError(f"-: cannot stage standard input: {e.strerror or e}") from None
    finally:
        with suppress(OSError):
            os.unlink(tmp)


def _suffix(base: str) -> str:
    for ext in (".topology.yaml", ".topology.yml", ".yaml", ".yml", ".py", ".bash", ".sh"):
        if base.endswith(ext):
            return ext
    return ".sh"


def renamed(verdicts: list[Verdict], tmp: str, name: str) -> list[Verdict]:
    """The verdicts with the staged file's path (as given or absolute) shown as `name`."""
    paths = {tmp, os.path.abspath(tmp), os.path.relpath(tmp)}

    def fix(p):
        if p.location is not None and p.location.path in paths:
            return p.at(replace(p.location, path=name))
        return p

    out = []
    for v in verdicts:
        v.path = name if v.path in paths else v.path
        if v.site is not None and v.site.path in paths:
            v.site = replace(v.site, path=name)
        v.problems = [fix(p) for p in v.problems]
        for key in ("unreadable", "nothing"):
            text = getattr(v, key)
            if text:
                for p in sorted(paths, key=len, reverse=True):
                    text = text.replace(p, name)
                setattr(v, key, text)
        out.append(v)
    return out
