"""The files a read enters (the main script, sourced files, files the script wrote, eval
and here-document text): read through the gate within the size bounds, parsed once each
within the word budget, and pushed on the cursor while their commands run."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from ..model.errors import Location
from ..reading import gate
from . import syntax
from .budget import MAX_FILE, Budget
from .cursor import Cursor
from .findings import Findings
from .records import ScriptReadError
from .values import MAX_SOURCE_DEPTH


class Files:
    """Reading, parsing and entering files for one read; `text` is the main script's text
    when it is given instead of its file (a rewrite checks its result this way). `loops`
    (loops.Loops) puts a barrier for ``break`` around each file."""

    def __init__(self, at: Cursor, found: Findings, budget: Budget, loops):
        self.at, self.found, self.budget, self.loops = at, found, budget, loops
        self.cache: dict[str, list] = {}
        self.text: str | None = None

    def parse_file(self, abs_path: str, disp: str) -> list:
        if abs_path in self.cache:
            return self.cache[abs_path]
        data = self.file_bytes(abs_path, disp)
        self.budget.take_words(data, disp)
        text = data.decode("utf-8", "surrogateescape")
        self.at.newlines[abs_path] = [m.start() for m in re.finditer("\n", text)]
        body = self.parse(data, disp, counted=True)
        self.cache[abs_path] = body
        return body

    def file_bytes(self, abs_path: str, disp: str) -> bytes:
        try:
            if abs_path != self.at.main_abs or self.text is None:
                size = os.stat(abs_path).st_size
                if size > MAX_FILE:
                    raise ScriptReadError(
                        f"{disp}:0: the file is {size / (1 << 20):.0f} MB, over the "
                        f"{MAX_FILE >> 20} MB a launch script can be; it was not read. "
                        "Fix: pass the bash launch script itself.")
                # the script named too: a link out of its checkout is refused (gate.root_of)
                data = gate.read_bytes(abs_path, self.at.roots, limit=MAX_FILE)
            else:
                data = self.text.encode("utf-8", "surrogateescape")
        except OSError as e:
            raise ScriptReadError(f"{disp}:0: cannot read the file ({e.strerror or e}). "
                                  "Fix: check the path and its permissions.") from None
        except gate.Refused as e:
            raise ScriptReadError(f"{disp}:0: {e}. Fix: pass a regular file inside the "
                                  "script's checkout.") from None
        if len(data) > MAX_FILE:
            raise ScriptReadError(f"{disp}:0: the text is over {MAX_FILE >> 20} MB. "
                                  "Fix: pass the bash launch script itself.")
        if b"\0" in data:
            raise ScriptReadError(f"{disp}:1: not a text file (it contains NUL bytes). "
                                  "Fix: pass the bash launch script.")
        return data

    def parse(self, data: bytes, disp: str, located: bool = True, line: int = 1,
              counted: bool = False) -> list:
        if not counted:
            self.budget.take_words(data, disp)
        try:
            body, notes = syntax.parse(data, located, line)
        except syntax.ShellSyntaxError as e:
            raise ScriptReadError(f"{disp}:{e.line}: {e.message}. Fix: {e.fix}.") from None
        for code, at, message, fix in notes:
            self.found.note(code, message, fix, Location(disp, at))
        return body

    @contextmanager
    def entering(self, key: str, disp: str, code_file: str, at: Location | None = None,
                 shown: str = "") -> Iterator[bool]:
        """Push a file while its commands run (its name for sources, its own file for spans,
        a barrier for `break`). A source (`at` given) of a file being read already, or
        nested too deep, is noted and gives False: the nested read is skipped."""
        stack = self.at.stack
        if at is not None and (len(stack) >= MAX_SOURCE_DEPTH or any(key == s for s, _ in stack)):
            self.found.note("source-cycle", f"'{shown}' is sourced again while it is being "
                            "read; the nested read is skipped", "source each model file once", at)
            yield False
            return
        stack.append((key, disp))
        self.at.where.append(code_file)
        try:
            with self.loops.barrier():
                yield True
        finally:
            stack.pop()
            self.at.where.pop()
