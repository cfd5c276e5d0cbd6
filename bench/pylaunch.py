"""Check Python launchers in the sandbox: the time from the call to the training argv.

A benchmark, not a timed test. Each fixture launcher is read 5 times (a fresh interpreter
each time, isolated by the kernel: docs/sandbox.md); it prints the median per launcher, with the
CPU time of the child processes (less sensitive than wall time to other work on the machine),
and a last line ``RESULT seconds=...``, the slowest median (the target is < 2 s per launcher).
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from miles_topology.pylaunch import read_python_launcher  # noqa: E402

HERE = ROOT / "tests" / "fixtures" / "launchers"
CASES = [("run_moe_argparse.py", ["--num-nodes", "2"]), ("run_torchrun.py", []),
         ("run_popen.py", [])]
try:
    import typer  # noqa: F401

    CASES.append(("run_moe_typer.py", []))
except ImportError:
    print("typer is not installed: run_moe_typer.py skipped")

worst = 0.0
for name, args in CASES:
    times, cpu = [], []
    for _ in range(5):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        read_python_launcher(str(HERE / name), args)
        times.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    med = statistics.median(times)
    worst = max(worst, med)
    print(f"{name:24s} median {med:.3f} s  (min {min(times):.3f}, max {max(times):.3f}; "
          f"child CPU {statistics.median(cpu):.3f} s)")
print(f"RESULT seconds={worst:.3f}")
