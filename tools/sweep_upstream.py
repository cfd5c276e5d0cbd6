"""Run `check` over upstream's own launch commands and count what it refuses.

An error there that upstream's CI does not hit is a bug in a rule (docs/dev: severity). The
inputs are miles' and slime's example scripts, launchers and CI tests, in checkouts of
radixark/miles and THUDM/slime (`git archive HEAD | tar -x -C DIR` of the fetched mirrors):

    scripts/*.sh  scripts/**/run_*.py  examples/**/*.sh  tests/**/*.sh
    examples/**/*.py and tests/**/*.py that start training (name train.py or execute_train)

Each file is checked by its own `python -m miles_topology check --format json` with the
checkout first on PYTHONPATH (its launchers import it) and the checkout as working directory.
A file with no training launch (exit 2) is not a command and is counted apart.

    python tools/sweep_upstream.py /tmp/up/radixark+miles /tmp/up/THUDM+slime [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
LAUNCHES = re.compile(r"execute_train|train\.py|train_async")


def inputs(root: Path) -> list[Path]:
    out = set(root.glob("scripts/*.sh")) | set(root.glob("scripts/**/run_*.py"))
    for top in ("examples", "tests"):
        out |= set(root.glob(f"{top}/**/*.sh"))
        out |= {p for p in root.glob(f"{top}/**/*.py")
                if p.is_file() and LAUNCHES.search(p.read_text(errors="replace"))}
    return sorted(p for p in out if p.is_file())


def check(root: Path, path: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(root), str(HERE)))}
    env.pop("MILES_TOPOLOGY_STACK", None)
    cmd = [sys.executable, "-m", "miles_topology", "check", "--format", "json",
           str(path.relative_to(root))]
    try:
        got = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"path": str(path), "rc": "timeout", "verdicts": []}
    verdicts = []
    if got.stdout.strip():
        try:
            data = json.loads(got.stdout)
            verdicts = data if isinstance(data, list) else [data]
        except json.JSONDecodeError:
            pass
    return {"path": str(path), "rc": got.returncode, "verdicts": verdicts,
            "stderr": got.stderr.strip()[-300:]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("roots", nargs="+", type=Path)
    p.add_argument("--json", help="write every file's result here")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120)
    a = p.parse_args()
    results = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futs = [pool.submit(check, root.resolve(), f, a.timeout)
                for root in a.roots for f in inputs(root.resolve())]
        results = [f.result() for f in futs]
    commands = [v for r in results for v in r["verdicts"]]
    refused = [v for v in commands if v.get("errors")]
    codes = collections.Counter(e["code"] for v in commands for e in v.get("errors", ()))
    warn = collections.Counter(e["code"] for v in commands for e in v.get("warnings", ()))
    skipped = collections.Counter(e["code"] for v in commands for e in v.get("skipped", ()))
    print(f"files {len(results)}, commands checked {len(commands)}, "
          f"no launch / unreadable {sum(not r['verdicts'] for r in results)}, "
          f"commands with an error {len(refused)}")
    for name, counter in (("errors", codes), ("warnings", warn), ("skipped", skipped)):
        print(f"{name}: " + ", ".join(f"{c} {n}" for c, n in counter.most_common()))
    for v in refused:
        for e in v["errors"]:
            print(f"  {v['path']}: {e['code']}: {e['message'][:160]}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
