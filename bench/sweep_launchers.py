"""Run `check` over the Python launchers of a checkout of upstream (radixark/miles,
THUDM/slime): its ``scripts/**/run_*.py``, ``examples/**/run*.py`` and ``tests/**/test_*.py``
that run something under ``__main__``, each with the checkout on PYTHONPATH and as its cwd.

    python bench/sweep_launchers.py [--timeout S] [--cli] [--no-tests] CHECKOUT [OUT.json]

Prints one line per launcher (launches found or the one-line error, wall and CPU seconds) and
a summary: launches, failures, timeouts, the median, p90 and max of the wall time and of the
CPU time (user + sys of this process and its children: less sensitive than wall time to other
work on a shared machine), and the load average. ``--cli``: each launcher is checked as a user
does, ``python -m miles_topology check --format json --path CHECKOUT LAUNCHER`` in a fresh
process (start-up, judging and report included); OUT.json then keeps each report, so that two
runs can be diffed for identical verdicts. OUT.json keeps each launch's argv, so
that two runs (before and after a change: PYTHONPATH of the other tree) can be compared with
``--compare A.json B.json``. ``--timeout S`` replaces the 10 s wall limit of one run (on a
loaded machine a slow launcher is not a hanging one; times are reported as measured).
``--no-tests``: only ``scripts/`` and ``examples/`` (what a user launches; 59 in miles 31f1ca9).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: the tree measured may be another


def launchers(checkout: Path, tests: bool = True) -> list[Path]:
    found = [*checkout.glob("scripts/**/run_*.py"), *checkout.glob("examples/**/run*.py"),
             *(checkout.glob("tests/**/test_*.py") if tests else ())]
    return sorted(p for p in found if "__main__" in p.read_text(errors="replace"))


def sweep(checkout: Path, tests: bool = True) -> dict:
    from miles_topology.model.errors import InputError
    from miles_topology.pylaunch import read_python_launches

    out = {}
    for path in launchers(checkout, tests):
        rel = str(path.relative_to(checkout))
        t0, c0 = time.perf_counter(), _cpu()
        try:
            got = read_python_launches(str(path), [], {"PYTHONPATH": str(checkout)},
                                       cwd=str(checkout))
            row = {"launches": [[g.entry.rsplit("/", 1)[-1], *g.argv] for g in got],
                   "notes": sorted({n for g in got for n in g.notes})}
        except InputError as e:
            row = {"error": str(e).replace(str(checkout) + "/", "")}
        row["seconds"] = round(time.perf_counter() - t0, 3)
        row["cpu"] = round(_cpu() - c0, 3)
        out[rel] = row
        print(f"{rel:72s} {row['seconds']:6.2f} s {row['cpu']:5.2f} cpu  " + (
            f"{len(row['launches'])} launch(es)" if "launches" in row else row["error"][:160]),
            flush=True)
    return out


def _cpu() -> float:
    """User + sys seconds of this process and its waited-for children so far."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


_BOOT = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
         "runpy.run_module('miles_topology', run_name='__main__')")


def sweep_cli(checkout: Path, tests: bool = True) -> dict:
    """Each launcher checked by the CLI in a fresh process, its JSON report kept."""
    import miles_topology

    out = {}
    tree = str(Path(miles_topology.__file__).parent.parent)  # the tree measured
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the launcher's own
    for path in launchers(checkout, tests):
        rel = str(path.relative_to(checkout))
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, tree, "check", "--format", "json", "--path",
             str(checkout), rel], cwd=checkout, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        c0 = _cpu()
        stdout, stderr = proc.communicate()
        row = {"exit": proc.returncode, "report": stdout, "stderr": stderr,
               "seconds": round(time.perf_counter() - t0, 3), "cpu": round(_cpu() - c0, 3)}
        out[rel] = row
        print(f"{rel:72s} {row['seconds']:6.2f} s {row['cpu']:5.2f} cpu  exit "
              f"{proc.returncode}", flush=True)
    return out


def _spread(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return f"median {statistics.median(xs):.2f} s, p90 {p90:.2f} s, max {xs[-1]:.2f} s"


def summary(rows: dict) -> str:
    times = [r["seconds"] for r in rows.values()]
    launches = sum(len(r.get("launches", ())) for r in rows.values())
    timeouts = sum("did not finish within" in r.get("error", "") for r in rows.values())
    failed = sum("error" in r for r in rows.values())
    cpu = [r["cpu"] for r in rows.values() if "cpu" in r]
    exits = Counter(r["exit"] for r in rows.values() if "exit" in r)  # --cli
    head = (f"{launches} launches, {failed} without a launch ({timeouts} timeouts)"
            if not exits else ", ".join(f"{exits[c]} exit {c}" for c in sorted(exits)))
    return (f"{len(rows)} launchers: {head}\n  wall: {_spread(times)} "
            f"({max(rows, key=lambda k: rows[k]['seconds'])})"
            + (f"\n  cpu:  {_spread(cpu)} ({max(rows, key=lambda k: rows[k].get('cpu', 0))})"
               if cpu else "") + "\n  load average: "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()))


# what differs from run to run: the sandbox's temporary folder, tempfile's random names,
# miles' run ids (create_run_id: %y%m%d-%H%M%S-NNN), stand-ins' Unknown markers, the time
# a run took ("run in a sandbox in 0.82 s"), where the checker measured is (its stand-ins'
# frames in a launcher's error)
_VOLATILE = re.compile(r"[^\s\"'`(]*/(?=miles_topology/pylaunch/)|miles-topology-launcher-[^/]+|"
                       r"(?:(?<=_)|(?<=tmp))[a-z0-9_]{8}(?=[./]|$)|\d{6}-\d{6}-\d{3}|"
                       r"__unknown_\d+__|(?<=sandbox in )\d+\.\d+(?= s)")


def _same(x: list, y: list) -> bool:
    return [[_VOLATILE.sub("*", w) for w in g] for g in x] == \
        [[_VOLATILE.sub("*", w) for w in g] for g in y]


def compare(a: dict, b: dict) -> None:
    """Launches that agree (up to what differs from run to run), launchers that gained or
    lost launches, and errors that changed."""
    same = 0
    for rel in sorted(set(a) | set(b)):
        x, y = a.get(rel, {}), b.get(rel, {})
        if "report" in x or "report" in y:  # --cli: the reports and exits, byte for byte
            if (x.get("exit"), _VOLATILE.sub("*", x.get("report", ""))) == \
                    (y.get("exit"), _VOLATILE.sub("*", y.get("report", ""))):
                same += 1
            else:
                print(f"{rel}: the report differs")
            continue
        lx, ly = x.get("launches") or [], y.get("launches") or []
        if lx and ly and len(lx) == len(ly) and _same(lx, ly):
            same += len(lx)
            continue
        if not lx and not ly and x.get("error") == y.get("error"):
            continue
        print(f"{rel}:\n  before: {x.get('error') or f'{len(lx)} launch(es)'}"[:400])
        print(f"  after:  {y.get('error') or f'{len(ly)} launch(es)'}"[:400])
    print(f"{same} launches (--cli: reports) agree before/after")
    print("before:", summary(a))
    print("after: ", summary(b))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        compare(*(json.loads(Path(p).read_text()) for p in sys.argv[2:4]))
        sys.exit(0)
    if sys.argv[1:2] == ["--timeout"]:
        import miles_topology.pylaunch as pylaunch

        pylaunch.TIMEOUT_S = float(sys.argv[2])
        del sys.argv[1:3]
    cli = sys.argv[1:2] == ["--cli"]
    if cli:
        del sys.argv[1]
    tests = "--no-tests" not in sys.argv
    if not tests:
        sys.argv.remove("--no-tests")
    rows = (sweep_cli if cli else sweep)(Path(sys.argv[1]).resolve(), tests)
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(rows, indent=1))
    print(summary(rows))
