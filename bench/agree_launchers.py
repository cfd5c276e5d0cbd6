"""How many real launches `check` answers as the launcher launched them (issue 36), given
what its messages ask for: the variables it names (``give --env NAME=...``) and, where an
answer that is not valid asks for --nodes / --gpus-per-node, the cluster the launch was
written for (its ``--actor-num-nodes`` x ``--actor-num-gpus-per-node``).

    python bench/agree_launchers.py CHECKOUT SWEEP.json [OUT.json]

SWEEP.json is a ``bench/sweep_launchers.py --cli`` run over CHECKOUT (the first answer of
each launcher); a launcher whose answer asks for something is checked again with it. Each
launch is then counted as:

- agree: no error, every word of its argv resolved (upstream runs these scripts: an error
  would be the checker's), or an error the real stack raises too (`REAL`, each traced to the
  upstream line that refuses);
- refused: no verdict, and the message says why and what to give (exit 2), or words left
  unresolved and named (the report's ``unresolved``);
- wrong: an error on a launch upstream runs, not in `REAL` (listed, to trace).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_launchers import _BOOT  # noqa: E402

# errors the real stack raises on these launches (upstream miles 31f1ca9):
# run_deepseek_v32.py:254/:257 pass the string 'None' to --actor-num-nodes /
# --rollout-num-gpus (type=int, miles/utils/arguments.py:107/:119); run_gemma_4_26b_a4b.py:102
# and run_gemma_4_31b.py:103 ask for a dynamic batch size with the bshd format
# (arguments.py:3514-3518)
REAL = {("scripts/run_deepseek_v32.py", "invalid-flag-value"),
        ("scripts/run_gemma_4_26b_a4b.py", "dynamic-batch-bshd"),
        ("scripts/run_gemma_4_31b.py", "dynamic-batch-bshd")}
_ENV = re.compile(r"--env ([A-Z][A-Z0-9_]*)=\.\.\.")
_CLUSTER = re.compile(r"--nodes N --gpus-per-node N|give --nodes / --gpus-per-node|"
                      r"with --nodes/--gpus-per-node")


def _asks(row: dict) -> list[str]:
    """The options the first answer asks for, with values (the variables as placeholders,
    the cluster the launch was written for)."""
    text = row["report"] + row["stderr"]
    out = []
    for name in dict.fromkeys(_ENV.findall(text)):
        out += ["--env", f"{name}={'10.0.0.1' if name.endswith('ADDR') else 'x'}"]
    if _CLUSTER.search(text) and not all(x.get("ok") for x in _launches(row) or [{}]):
        for launch in _launches(row):
            argv = launch.get("argv") or []
            nodes, gpus = _value(argv, "--actor-num-nodes"), _value(
                argv, "--actor-num-gpus-per-node")
            if nodes and gpus and (nodes, gpus) != ("1", "8"):
                out += ["--nodes", nodes, "--gpus-per-node", gpus]
                break
    return out


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def _launches(row: dict) -> list[dict]:
    try:
        got = json.loads(row["report"]) if row["report"].strip() else []
    except ValueError:
        return []
    return got if isinstance(got, list) else [got]


def _check(checkout: Path, rel: str, extra: list[str]) -> dict:
    import miles_topology

    tree = str(Path(miles_topology.__file__).parent.parent)
    got = subprocess.run([sys.executable, "-c", _BOOT, tree, "check", "--format", "json",
                          "--path", str(checkout), *extra, rel], cwd=checkout,
                         capture_output=True, text=True)
    return {"exit": got.returncode, "report": got.stdout, "stderr": got.stderr, "given": extra}


def classify(rel: str, row: dict) -> list[tuple[str, str]]:
    """(kind, why) for each launch of the launcher's answer."""
    launches = _launches(row)
    if not launches or all(x.get("unreadable") for x in launches):
        why = (row["stderr"] or "").strip().splitlines()[:1] or ["?"]
        kind = "wrong" if "internal error" in why[0] else "refused"
        return [(kind, why[0][:200])]
    out = []
    for x in launches:
        codes = {e.get("code") for e in x.get("errors") or []}
        if x.get("unreadable"):
            out.append(("refused", x["unreadable"][:200]))
        elif codes - {c for r, c in REAL if r == rel}:
            out.append(("wrong", ", ".join(sorted(c for c in codes if c))))
        elif x.get("unresolved"):
            out.append(("refused", "unresolved: " + ", ".join(
                str(u.get("flag") or u.get("word") or u)[:40] for u in x["unresolved"][:4])))
        else:
            out.append(("agree", ", ".join(sorted(c for c in codes if c))))
    return out


def main(checkout: Path, sweep: dict) -> dict:
    rows = {}
    for rel, row in sweep.items():
        extra = _asks(row)
        rows[rel] = _check(checkout, rel, extra) if extra else {**row, "given": []}
    counts: Counter = Counter()
    groups: Counter = Counter()
    for rel, row in rows.items():
        for kind, why in classify(rel, row):
            counts[kind] += 1
            groups[(rel.split("/")[0], kind)] += 1
            if kind != "agree":
                print(f"{kind:8s} {rel}{' ' + ' '.join(row['given']) if row['given'] else ''}"
                      f": {why}")
    launches = sum(len([x for x in _launches(r) if not x.get("unreadable")])
                   for r in rows.values())
    print(f"{sum(counts.values())} answers ({launches} launches, the rest launchers without "
          f"one): {counts['agree']} agree, {counts['refused']} refused honestly, "
          f"{counts['wrong']} wrong")
    for top in sorted({g for g, _ in groups}):
        print(f"  {top}: " + ", ".join(f"{groups[top, k]} {k}" for k in
                                       ("agree", "refused", "wrong")))
    print(f"  {sum(1 for r in rows.values() if r['given'])} launchers checked again with what "
          "their messages ask for")
    return rows


if __name__ == "__main__":
    out = main(Path(sys.argv[1]).resolve(), json.loads(Path(sys.argv[2]).read_text()))
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(out, indent=1))
