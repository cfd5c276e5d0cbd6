"""Hostile sizes (issue 33 item 5): glob operations on a 2^19-character value and checks of
absurd numeric flags. A benchmark, not a timed test (tests/cli/test_bounds.py bounds them
loosely): it prints the CPU seconds of each, the best of 3, and ``RESULT`` lines.

Before the bounds: ``${X#*b}`` on 2^17 characters took 77 s (2^19: minutes), a check of
``--num-layers 10^30`` crashed and 10^7 layers ran for minutes.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from miles_topology.cli import main  # noqa: E402
from miles_topology.shell import pattern  # noqa: E402

N = 1 << 19
HUGE = str(10**30)
BASE = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate",
        "--num-attention-heads", "8", "--hidden-size", "1024"]


def best(fn, runs: int = 3) -> float:
    out = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return min(out)


def check(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        main(["check", "--verbose", "--", *BASE, *argv])


def run() -> None:
    values = {"a": "a" * N, "ab": "ab" * (N // 2)}
    for name, value in values.items():
        for op, pat in (("#", "*b"), ("##", "*b"), ("%", "b*"), ("%%", "*a*")):
            s = best(lambda v=value, op=op, pat=pat: pattern.strip(v, pat, op))
            print(f"RESULT strip_{op}{pat}_{name}_cpu_s {s:.3f}")
        for op, pat in (("/", "*b"), ("//", "a*b"), ("/%", "a*")):
            s = best(lambda v=value, op=op, pat=pat: pattern.replace(v, pat, "c", op))
            print(f"RESULT replace_{op}{pat}_{name}_cpu_s {s:.3f}")
    for flag, value in (("--num-layers", HUGE), ("--num-experts", HUGE),
                        ("--actor-num-nodes", HUGE), ("--num-layers", "10000")):
        s = best(lambda f=flag, v=value: check("--num-layers", "8", f, v))
        print(f"RESULT check_{flag.lstrip('-')}_{len(value)}digits_cpu_s {s:.3f}")


if __name__ == "__main__":
    run()
