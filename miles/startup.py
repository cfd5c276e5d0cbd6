"""Start-up phase lines: one per phase with its own and the running time, on stderr.

The launcher starts the clock before the cluster and hands it to the backend, so every
phase line (cluster, workers, roles and groups, first sync) counts from the same start.
The clock also knows the phase in progress (`current`), which the launcher names when the
job is interrupted or one of its processes dies.

Tests set MILES_TEST_MARKERS=1 to get a `miles-test: <phase>` line on stderr as each phase
begins, so they can signal or kill inside a given phase without guessing with sleeps.
"""

from __future__ import annotations

import os
import sys
import time

# the phase that follows each phase line
NEXT = {"cluster": "worker start-up", "workers": "role start-up",
        "roles and groups": "the first weight sync"}


def mark(what: str) -> None:
    """A test marker line (only with MILES_TEST_MARKERS=1)."""
    if os.environ.get("MILES_TEST_MARKERS") == "1":
        print(f"miles-test: {what}", file=sys.stderr, flush=True)


class Phases:
    def __init__(self):
        self.t0 = self.last = time.monotonic()
        self.current = "cluster start-up"
        mark(self.current)

    def __call__(self, name: str, detail: str = "") -> None:
        now = time.monotonic()
        print(f"start-up: {name} {now - self.last:.1f}s (total {now - self.t0:.1f}s)"
              + (f"; {detail}" if detail else ""), file=sys.stderr, flush=True)
        self.last = now
        if name in NEXT:
            self.enter(NEXT[name])

    def enter(self, what: str) -> None:
        """The job moves on to `what` (e.g. "step 3")."""
        self.current = what
        mark(what)

    def total(self) -> float:
        return time.monotonic() - self.t0
