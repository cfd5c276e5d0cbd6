"""Provenance for rewriting: the exact text span of each word, which commands each located
word reaches, and what a launched process sees (variables, exports). Migrations edit only
words pinned here and refuse to move words that other commands also use."""

from __future__ import annotations

import bisect

from . import syntax
from .cursor import Cursor
from .findings import Findings
from .launch import Launch
from .records import LaunchSite, Span
from .state import Shell
from .values import INT_LIMIT, Field


class Provenance:
    """Fills the findings' `uses` and builds spans and the launch site."""

    __slots__ = ("sh", "at", "found")

    def __init__(self, sh: Shell, at: Cursor, found: Findings):
        self.sh, self.at, self.found = sh, at, found

    def consume(self, items):
        """Words taken apart, joined, counted or indexed here (not passed on whole): removing
        one of them would change this command too, so it counts as one of their users."""
        here = None
        for f in items:
            if f.span is not None:
                here = here or self.at.src(self.at.stmt_line)
                self.found.uses.setdefault(f.span[:3], set()).add(here)

    def read_position(self, k: int):
        """The function being run read argument k (1-based, counting shifted ones)."""
        if self.sh.positions and len(self.sh.frames) > 1:
            at = self.sh.positions[-1]
            at[1] = max(at[1], min(INT_LIMIT, at[0] + k))

    def pin(self, args: list[Field], highest: int, n: syntax.Simple):
        """Removing an argument before one the function reads by position would shift it:
        such words count as used by the call too."""
        here = self.at.src(n.line)
        for f in args[:highest]:
            if f.span is not None:
                self.found.used(f.span, here)

    def export(self, n: syntax.Simple, head: str):
        """Track which variables a child process sees (``export``, ``declare -x``, ``set -a``)."""
        opts = "".join(w.text[1:] for w in n.words[1:] if w.text.startswith("-"))
        if head == "export" or (head in ("declare", "typeset", "local") and "x" in opts):
            names = {a.name for a in n.assigns} | {
                w.text for w in n.words[1:] if syntax.NAME.fullmatch(w.text)}
            if "n" in opts and head == "export":
                self.sh.exported -= names
            else:
                self.sh.exported |= names
        elif self.sh.allexport and not n.words:
            self.sh.exported |= {a.name for a in n.assigns}

    def site(self, fields: list[Field], launch: Launch, n: syntax.Simple) -> LaunchSite:
        k = len(fields) - len(launch.argv) - 1
        branch = self.at.branch[-1] if self.at.branch else None
        statement = None
        if n.start >= 0:
            statement = self.span((self.at.where[-1], n.start, n.start, n.line, branch))
        variables = {name: v.items[0].value for name, v in self.sh.vars.items()
                     if not v.array and v.items}
        exported = frozenset((set(variables) if self.sh.allexport else self.sh.exported)
                             | self.sh.inherited)
        return LaunchSite(statement, self.span(fields[k].span) if 0 <= k else None, branch,
                          variables, exported, launch.src, launch.launcher == "ray job submit",
                          launch.job_env)

    def span(self, t: tuple | None) -> Span | None:
        """A Field's (file, start, end, stmt_line, branch) as a Span with lines and columns."""
        if t is None or t[0] not in self.at.newlines:
            return None
        file, start, end, stmt_line, branch = t
        nl = self.at.newlines[file]
        a, b = bisect.bisect_left(nl, start), bisect.bisect_left(nl, end)
        return Span(file, start, end, a + 1, start - (nl[a - 1] + 1 if a else 0), b + 1,
                    end - (nl[b - 1] + 1 if b else 0), stmt_line, branch)
