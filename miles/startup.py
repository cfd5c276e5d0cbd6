"""Start-up phase lines: one per phase with its own and the running time, on stderr.

The launcher starts the clock before the cluster and hands it to the backend, so every
phase line (cluster, workers, roles and groups, first sync) counts from the same start.
"""

from __future__ import annotations

import sys
import time


class Phases:
    def __init__(self):
        self.t0 = self.last = time.monotonic()

    def __call__(self, name: str, detail: str = "") -> None:
        now = time.monotonic()
        print(f"start-up: {name} {now - self.last:.1f}s (total {now - self.t0:.1f}s)"
              + (f"; {detail}" if detail else ""), file=sys.stderr, flush=True)
        self.last = now

    def total(self) -> float:
        return time.monotonic() - self.t0
