"""Where a read is: the file being read, the code's own file, the command's line and the
branch it runs in. The interpreter moves it; word expansion asks it where a word comes from
(the one thing expansion needs from command execution)."""

from __future__ import annotations

import os

from ..model.errors import Location


class Cursor:
    __slots__ = ("main_abs", "main_disp", "stack", "where", "stmt_line", "branch", "sources",
                 "newlines", "roots")

    def __init__(self, main_abs: str, main_disp: str):
        self.main_abs, self.main_disp = main_abs, main_disp
        self.stack: list[tuple[str, str]] = []  # (abs, display) of the files being run
        self.where: list[str] = []  # absolute file of the code being run (function bodies too)
        self.stmt_line = 0  # the line of the command being run
        self.branch: list[Location] = []  # the if/case/loop/&& around it, innermost last
        self.sources: dict[tuple[str, int], Location] = {}
        self.newlines: dict[str, list[int]] = {}  # per file read: offsets of its newlines
        # where the files it names may be read (gate.py): the script's checkout, --read...
        from ..reading import gate

        self.roots = gate.current() or gate.roots_for(main_abs)

    @property
    def file(self) -> str:
        """The displayed name of the file being read."""
        return self.stack[-1][1]

    @property
    def file_abs(self) -> str:
        return self.stack[-1][0]

    def src(self, line: int) -> Location:
        key = (self.stack[-1][1], line)
        got = self.sources.get(key)
        if got is None:
            got = self.sources[key] = Location(*key)
        return got

    def span(self, word) -> tuple | None:
        """Where a word of the file's own text is: (file, start, end, line of its command,
        branch), or None for text that is not the file's (eval strings)."""
        if word.start < 0 or not self.where:
            return None
        return (self.where[-1], word.start, word.end, self.stmt_line,
                self.branch[-1] if self.branch else None)

    def disp(self, abs_path: str) -> str:
        """A file as the user would name it: relative to the main script's displayed path."""
        if abs_path == self.main_abs:
            return self.main_disp
        try:
            rel = os.path.relpath(abs_path, os.path.dirname(self.main_abs))
        except ValueError:
            return abs_path
        return os.path.normpath(os.path.join(os.path.dirname(self.main_disp), rel))
