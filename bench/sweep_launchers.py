"""Run `check` over the Python launchers of a checkout of upstream (radixark/miles,
THUDM/slime): its ``scripts/**/run_*.py``, ``examples/**/run*.py`` and ``tests/**/test_*.py``
that run something under ``__main__``, each with the checkout on PYTHONPATH and as its cwd.

    python bench/sweep_launchers.py [--timeout S] CHECKOUT [OUT.json]

Prints one line per launcher (launches found or the one-line error, seconds) and a summary:
launches, failures, timeouts, median and slowest time. OUT.json keeps each launch's argv, so
that two runs (before and after a change: PYTHONPATH of the other tree) can be compared with
``--compare A.json B.json``. ``--timeout S`` replaces the 10 s wall limit of one run (on a
loaded machine a slow launcher is not a hanging one; times are reported as measured).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: the tree measured may be another


def launchers(checkout: Path) -> list[Path]:
    found = [*checkout.glob("scripts/**/run_*.py"), *checkout.glob("examples/**/run*.py"),
             *checkout.glob("tests/**/test_*.py")]
    return sorted(p for p in found if "__main__" in p.read_text(errors="replace"))


def sweep(checkout: Path) -> dict:
    from miles_topology.model.errors import InputError
    from miles_topology.pylaunch import read_python_launches

    out = {}
    for path in launchers(checkout):
        rel = str(path.relative_to(checkout))
        t0 = time.perf_counter()
        try:
            got = read_python_launches(str(path), [], {"PYTHONPATH": str(checkout)},
                                       cwd=str(checkout))
            row = {"launches": [[g.entry.rsplit("/", 1)[-1], *g.argv] for g in got],
                   "notes": sorted({n for g in got for n in g.notes})}
        except InputError as e:
            row = {"error": str(e).replace(str(checkout) + "/", "")}
        row["seconds"] = round(time.perf_counter() - t0, 3)
        out[rel] = row
        print(f"{rel:80s} {row['seconds']:6.2f} s  " + (
            f"{len(row['launches'])} launch(es)" if "launches" in row else row["error"][:160]),
            flush=True)
    return out


def summary(rows: dict) -> str:
    times = [r["seconds"] for r in rows.values()]
    launches = sum(len(r.get("launches", ())) for r in rows.values())
    timeouts = sum("did not finish within" in r.get("error", "") for r in rows.values())
    failed = sum("error" in r for r in rows.values())
    return (f"{len(rows)} launchers: {launches} launches, {failed} without a launch "
            f"({timeouts} timeouts); median {statistics.median(times):.2f} s, slowest "
            f"{max(times):.2f} s ({max(rows, key=lambda k: rows[k]['seconds'])})")


# what differs from run to run: the sandbox's temporary folder, tempfile's random names,
# miles' run ids (create_run_id: %y%m%d-%H%M%S-NNN), stand-ins' Unknown markers
_VOLATILE = re.compile(r"miles-topology-launcher-[^/]+|(?:(?<=_)|(?<=tmp))[a-z0-9_]{8}(?=[./]|$)|"
                       r"\d{6}-\d{6}-\d{3}|__unknown_\d+__")


def _same(x: list, y: list) -> bool:
    return [[_VOLATILE.sub("*", w) for w in g] for g in x] == \
        [[_VOLATILE.sub("*", w) for w in g] for g in y]


def compare(a: dict, b: dict) -> None:
    """Launches that agree (up to what differs from run to run), launchers that gained or
    lost launches, and errors that changed."""
    same = 0
    for rel in sorted(set(a) | set(b)):
        x, y = a.get(rel, {}), b.get(rel, {})
        lx, ly = x.get("launches") or [], y.get("launches") or []
        if lx and ly and len(lx) == len(ly) and _same(lx, ly):
            same += len(lx)
            continue
        if not lx and not ly and x.get("error") == y.get("error"):
            continue
        print(f"{rel}:\n  before: {x.get('error') or f'{len(lx)} launch(es)'}"[:400])
        print(f"  after:  {y.get('error') or f'{len(ly)} launch(es)'}"[:400])
    print(f"{same} launches agree before/after")
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
    rows = sweep(Path(sys.argv[1]).resolve())
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(rows, indent=1))
    print(summary(rows))
