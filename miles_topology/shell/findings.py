"""What a read finds, in one collector: the launches, the notes, the values left unknown,
the sourced files not found, and which commands use each located word (for rewriting)."""

from __future__ import annotations

from ..model.errors import Location, Problem
from .records import Unresolved, note

MAX_RECORDS = 1000  # notes and unknowns kept
MAX_KEPT = 8  # launches whose words are kept (the last one found is the one read)


class _Capped(list):
    """A list that keeps its first MAX_RECORDS entries (a script that makes a million
    unknowns reports the first thousand, in bounded memory)."""

    def append(self, item):
        if len(self) < MAX_RECORDS:
            super().append(item)


class Findings:
    __slots__ = ("launches", "notes", "unresolved", "missing", "uses", "machine", "written",
                 "contained", "hidden")

    def __init__(self):
        self.launches: list = []  # launch.Launch, in the order run
        self.notes: list[Problem] = _Capped()
        self.unresolved: list[Unresolved] = _Capped()
        self.missing: list[str] = []  # sourced files that were not found
        self.uses: dict[tuple, set[Location]] = {}  # located word -> the commands using it
        self.machine: set[str] = set()  # sourced absolute paths outside the checkout
        # files it writes from a here-document naming a training entry (a Kubernetes
        # manifest, an sbatch file), another program runs: (where, the file)
        self.written: list[tuple[Location, str]] = []
        # scripts a container runs that are not read (containers.follow): (where, why)
        self.contained: list[tuple[Location, str]] = []
        # `bash -c TEXT` naming a training entry whose TEXT is not known here: (where, why)
        # (launches whose entry word is not known are marked in `launches`)
        self.hidden: list[tuple[Location, str]] = []

    def note(self, code: str, message: str, fix: str, at: Location):
        self.notes.append(note(code, message, fix, at))

    def unknown(self, text: str, at: Location, why: str):
        self.unresolved.append(Unresolved(None, text, at, why))

    def used(self, span: tuple, at: Location):
        self.uses.setdefault(span[:3], set()).add(at)

    def launch(self, got):
        """Keep a launch; only the last MAX_KEPT keep their words (the last one is read)."""
        self.launches.append(got)
        if len(self.launches) > MAX_KEPT:
            k = len(self.launches) - MAX_KEPT - 1
            self.launches[k] = self.launches[k]._replace(argv=None, site=None)

    def mark(self) -> tuple:
        """What to go back to when a loop that cannot be stepped through is undone."""
        return (len(self.launches), len(self.notes), len(self.unresolved), len(self.missing),
                {k: set(v) for k, v in self.uses.items()})

    def undo(self, mark: tuple):
        launches, notes, unresolved, missing, self.uses = mark
        del self.launches[launches:], self.notes[notes:], self.unresolved[unresolved:]
        del self.missing[missing:]
