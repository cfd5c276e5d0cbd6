"""One wall-clock budget per input (`--timeout SECONDS`), shared by everything that input
makes the checker run: the bash helpers of a script (``$(python3 helper.py)``), the runs of
a Python launcher, the helpers of a sourced model file. Each of those still has its own
limit (pylaunch.TIMEOUT_S); it gets at most what is left of the input's budget, and once
the budget is spent what would have run stays unknown with a message naming --timeout. The
CPU limit of a child follows its wall limit (pylaunch), so the budget bounds CPU too.

The budget is per input, in the thread that judges it (a ContextVar: inputs judged side
by side each have their own)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

DEFAULT_S = 60.0  # one input: a script and all its helpers, a launcher and all its runs
SECONDS: float | None = None  # --timeout of this command (cli); None: DEFAULT_S
_END: ContextVar[float | None] = ContextVar("input_deadline", default=None)


@contextmanager
def per_input(seconds: float | None = None) -> Iterator[None]:
    """The budget of one input, from now (nested: the outer one holds)."""
    if _END.get() is not None:
        yield
        return
    total = seconds if seconds is not None else SECONDS if SECONDS is not None else DEFAULT_S
    token = _END.set(time.monotonic() + total)
    try:
        yield
    finally:
        _END.reset(token)


def left() -> float | None:
    """Seconds left of this input's budget (0 when spent); None outside one."""
    end = _END.get()
    return None if end is None else max(0.0, end - time.monotonic())


def cap(seconds: float) -> float:
    """A child's own limit, no more than what is left of the input's budget."""
    rest = left()
    return seconds if rest is None else min(seconds, rest)


def spent_why() -> str:
    total = SECONDS if SECONDS is not None else DEFAULT_S
    return (f"not run: this input's time budget ({total:g} s, --timeout) was spent by what "
            "it ran before; pass --timeout SECONDS for more")
