"""Check Python launchers in the sandbox: the time from the call to the training argv.

A benchmark, not a timed test. Each fixture launcher is read 5 times (a fresh interpreter
each time, isolated by the kernel: docs/sandbox.md); it prints the median per launcher, with the
CPU time of the child processes (less sensitive than wall time to other work on the machine),
and a last line ``RESULT seconds=...``, the slowest median (the target is < 2 s per launcher);
< 1 s for the upstream-style launchers in the default mode). The upstream-style launchers
import miles' helpers (the stand-ins under tests/fixtures/launchers/upstream, which import
ray, httpx and typer) and torch; they are read in both modes: the default (stand-in modules)
and --real-imports (the installed ones), each against its wall limit. run_router_health.py
starts two servers and waits for them over HTTP (answered in the sandbox's network namespace:
pylaunch/servers.py; target < 0.5 s; server_wait_ratio: its median over run_popen.py's, which
starts no server), and test_short_mooncake.py polls the Mooncake master it
started; the last line also gives the median over every fixture launcher read (target < 0.3 s).
"""

from __future__ import annotations

import importlib.util
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from miles_topology.pylaunch import (  # noqa: E402
    REAL_TIMEOUT_S,
    read_python_launcher,
    read_python_launches,
)

HERE = ROOT / "tests" / "fixtures" / "launchers"
UP = {"PYTHONPATH": str(HERE / "upstream")}
CASES = [("run_moe_argparse.py", ["--num-nodes", "2"]), ("run_torchrun.py", []),
         ("run_popen.py", []), ("run_router_health.py", [])]
UPSTREAM = [("test_tiny_moe_parallel_check.py", []), ("run_from_hf_config.py", []),
            ("test_short_mooncake.py", [])]
try:
    import typer  # noqa: F401

    CASES.append(("run_moe_typer.py", []))
    UPSTREAM.append(("run_qwen3_moe_app.py", ["train"]))
except ImportError:
    print("typer is not installed: run_moe_typer.py and run_qwen3_moe_app.py skipped")


def median(read, n: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        read()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def show(label: str, med: float, times: list[float], limit: float) -> None:
    print(f"{label:48s} median {med:.3f} s  (min {min(times):.3f}, max {max(times):.3f}; "
          f"wall limit {limit:g} s = {limit / med:.0f}x the median)")


worst = 0.0
medians = {}
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
    medians[name] = med
    print(f"{name:24s} median {med:.3f} s  (min {min(times):.3f}, max {max(times):.3f}; "
          f"child CPU {statistics.median(cpu):.3f} s)")
real = all(importlib.util.find_spec(m) for m in ("torch", "ray"))
upstream = 0.0
for mode in (False, True) if real else (False,):
    for name, args in UPSTREAM:
        med, times = median(lambda n=name, a=args, m=mode: read_python_launches(
            str(HERE / n), a, UP, real_imports=m), 3 if mode else 5)
        if not mode:
            upstream = max(upstream, med)
            medians[name] = med
        show(f"{name} {args or ''} ({'--real-imports' if mode else 'stand-ins'})", med, times,
             REAL_TIMEOUT_S if mode else 10)
if not real:
    print("torch or ray is not installed: --real-imports not measured")
print(f"RESULT seconds={worst:.3f} upstream_default_seconds={upstream:.3f} "
      f"server_wait_seconds={medians['run_router_health.py']:.3f} server_wait_ratio="
      f"{medians['run_router_health.py'] / medians['run_popen.py']:.2f} "
      f"fixture_median_seconds={statistics.median(medians.values()):.3f}")
