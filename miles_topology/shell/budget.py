"""Every counter a read keeps against a cap, in one object: a read of any input (a fuzzed
script, a loop of a million iterations, a file of 50 MB) stays bounded in time and memory,
and each cap's message says what to do."""

from __future__ import annotations

import re

from .records import ScriptReadError
from .values import MAX_CALL_DEPTH, Field, Var

MAX_STEPS = 300_000  # commands run in all (function calls can fan out)
MAX_WORDS = 50_000  # words of text parsed in one read (real launch scripts: a few thousand)
MAX_HELD = 48 << 20  # characters (and 64 per word) the variables may hold in all
MAX_EXPANDED = 2_000_000  # words of the commands run, in all
MAX_FILE = 50 << 20  # bytes; bigger files are refused before they are read
MAX_LOOP_STEPS = 10_000  # iterations stepped through in one outermost loop, nested ones too
MAX_LOOP_COMMANDS = 100_000  # commands run while stepping through one outermost loop
MAX_READ_LOOP_STEPS = 100_000  # iterations stepped through in one read, all loops together
_WORD = re.compile(rb"\S+")
_CUT = "Fix: pass the bash launch script itself, or cut it down."


class Budget:
    """The counters of one read; each `take_*` raises ScriptReadError (exit 2) past its cap,
    except `loop_over`, which says why a loop is no longer stepped through."""

    __slots__ = ("steps", "words", "expanded", "held", "calls", "loop_steps", "loop_start",
                 "read_loop_steps")

    def __init__(self):
        self.steps = 0  # commands run
        self.words = 0  # words parsed
        self.expanded = 0  # words of the commands run
        self.held = 0  # what the variables hold
        self.calls = 0  # function calls, evals and here-document scripts inside each other
        self.loop_steps = 0  # iterations stepped in the current outermost stepped loop
        self.loop_start = 0  # `steps` when the current outermost stepped loop began
        self.read_loop_steps = 0  # iterations stepped in this read (undone ones too)

    @property
    def deep(self) -> bool:
        """As many calls inside each other as are followed."""
        return self.calls >= MAX_CALL_DEPTH

    def over_steps(self, where):
        """Called when `steps` (counted by the caller, on the hot path) passes MAX_STEPS."""
        raise ScriptReadError(f"{where}: reading the script runs more than {MAX_STEPS} "
                              "commands (recursion without end?). Fix: simplify the script.")

    def check_clock(self, where):
        """Past the input's time budget (deadline.py, --timeout), reading stops."""
        from ..reading import deadline

        if deadline.left() == 0:
            raise ScriptReadError(f"{where}: reading the script took the whole time budget of "
                                  "this input (--timeout). Fix: pass --timeout SECONDS, or "
                                  "simplify the script.")

    def take_words(self, data: bytes, disp: str):
        """All the text a read parses (files, sourced files, eval strings, written files)
        holds at most MAX_WORDS words: memory and time stay bounded on any input."""
        left = MAX_WORDS - self.words
        if len(data) <= 1 << 20:
            n = len(data.split())  # at C speed
        else:  # counted without a list of them
            n = 0
            for _ in _WORD.finditer(data):
                n += 1
                if n > left:
                    break
        if n > left:
            raise ScriptReadError(
                f"{disp}:0: the script (with the files it sources and the text it runs) "
                f"has more than {MAX_WORDS} words, more than a launch script is read "
                f"for. {_CUT}")
        self.words += n

    def over_expanded(self, where):
        """Called when `expanded` (counted by the caller) passes MAX_EXPANDED."""
        too_many(where, f"its commands have more than {MAX_EXPANDED} words in all")

    def take_held(self, where, size: int, old: Var | None = None,
                  items: list[Field] | None = None):
        """Count what a variable now holds (a string's characters; 64 per array word and
        their characters), less what `old` held: past MAX_HELD the read stops (exit 2)."""
        if items is not None:
            size += 64 * len(items)
            if len(items) == 1:
                size += len(items[0].value or "")
            else:
                size += sum([len(f.value) for f in items if f.value])
        if old is not None and old.items:
            f = old.items[0]
            size -= 64 * len(old.items) if old.array else len(f.value) if f.value else 0
        self.held += size
        if self.held > MAX_HELD:
            raise ScriptReadError(
                f"{where()}: the script's variables grow past {MAX_HELD >> 20} M characters, "
                f"more than a launch script is read for. {_CUT}")

    def loop_begins(self):
        self.loop_steps, self.loop_start = 0, self.steps

    def loop_over(self) -> str | None:
        """Count one iteration stepped through; past a cap, why no more are."""
        self.loop_steps += 1
        self.read_loop_steps += 1
        if self.loop_steps > MAX_LOOP_STEPS:
            return f"it runs more than {MAX_LOOP_STEPS} times, more than is followed"
        if self.steps - self.loop_start > MAX_LOOP_COMMANDS:
            return f"it runs more than {MAX_LOOP_COMMANDS} commands, more than is followed"
        return self.loops_spent()

    def loops_spent(self) -> str | None:
        if self.read_loop_steps > MAX_READ_LOOP_STEPS:
            return f"this read has stepped through {MAX_READ_LOOP_STEPS} loop iterations " \
                   "already; no more are followed"
        return None


def too_many(where, what: str):
    raise ScriptReadError(f"{where}: {what}, more than a launch script is read for. {_CUT}")
