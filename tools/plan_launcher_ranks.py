"""Where `plan` ranks the layouts of miles' own MoE launchers (issue 35's held-out check).

Each `scripts/run_*.py` of a miles checkout is checked as a user does (`python -m
miles_topology check --format json`, the checkout first on PYTHONPATH, its default mode,
MASTER_ADDR set: the multi-node launchers assert it);
for a MoE launch (experts, the Megatron backend) `plan` is then given the launch's own flags
as the model (`-- FLAGS`), its node count and GPUs a node, H100, its recompute (full) and
optimizer offload when it sets them, and its --max-tokens-per-gpu; with `--seq-length`, also
the longest sample (--rollout-max-response-len + --rollout-max-prompt-len when both are
given). A line gives the rank of the launcher's (tp, pp, cp, ep, etp), of its tp/pp/ep/etp at
any cp, and the first layout.

    python tools/plan_launcher_ranks.py /tmp/up/radixark+miles [--seq-length]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from miles_topology.judging.memory import gpu_bytes  # noqa: E402
from miles_topology.judging.plan import Options, plan, read_model  # noqa: E402
from miles_topology.model.errors import InputError  # noqa: E402


def _value(argv: list[str], flag: str) -> str | None:
    got = None
    for i, word in enumerate(argv[:-1]):
        if word == flag:
            got = argv[i + 1]
    return got


def _launches(checkout: Path, path: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(ROOT)])}
    got = subprocess.run([sys.executable, "-m", "miles_topology", "check", "--format", "json",
                          "--env", "MASTER_ADDR=10.0.0.1", str(path)], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=300)
    try:
        report = json.loads(got.stdout)
    except ValueError:
        return []
    reports = report if isinstance(report, list) else [report]
    return [r for r in reports if isinstance(r, dict) and r.get("argv") and r.get("topology")]


def rank(report: dict, seq: bool) -> tuple[str, int | None]:
    """The line for one launch, and its rank at any cp (None: dense, refused or absent)."""
    argv, topo = report["argv"], report["topology"]
    want = tuple(topo[k] for k in ("tp", "pp", "cp", "ep", "etp"))
    tokens = _value(argv, "--max-tokens-per-gpu")
    response = _value(argv, "--rollout-max-response-len")
    prompt = _value(argv, "--rollout-max-prompt-len")
    longest = int(response) + int(prompt) if seq and response and prompt and \
        response.isdigit() and prompt.isdigit() else None
    opts = Options(tokens=int(tokens) if tokens and tokens.isdigit() else 8192,
                   recompute=True if _value(argv, "--recompute-granularity") == "full" else None,
                   offload=True if "--optimizer-cpu-offload" in argv else None,
                   seq_length=longest)
    try:
        shape, model = read_model([], argv)
    except InputError as e:
        return f"plan refused the model: {e}", None
    if not model.get("experts"):
        return "dense", None
    got = plan(shape, model, topo["nodes"], topo["gpus_per_node"], gpu_bytes("H100") or 0,
               opts=opts)

    def key(c) -> tuple[int, ...]:  # noqa: ANN001
        t = c.topo.layout
        return (t.tp, t.pp, t.cp, t.ep, t.etp)

    keys = [key(c) for c in got]
    exact = keys.index(want) + 1 if want in keys else None
    anycp = next((i for i, k in enumerate(keys, 1) if k[:2] + k[3:] == want[:2] + want[3:]),
                 None)
    return (f"{topo['nodes']} x {topo['gpus_per_node']}, tokens {opts.tokens}"
            f"{', recompute' if opts.recompute else ''}{', offload' if opts.offload else ''}"
            f"{f', seq {longest}' if longest else ''}: (tp, pp, cp, ep, etp) {want} rank "
            f"{exact or 'absent'}, at any cp {anycp or 'absent'}, of {len(keys)}; first "
            f"{keys[0] if keys else None}"), anycp


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0], "scripts").is_dir():
        print(__doc__)
        return 2
    checkout = Path(argv[0]).resolve()
    ranks: dict[str, int | None] = {}
    for path in sorted(checkout.glob("scripts/run_*.py")):
        reports = _launches(checkout, path)
        if not reports:
            print(f"{path.name}: no launch read")
        for report in reports:
            if _value(report["argv"], "--train-backend") not in (None, "megatron"):
                print(f"{path.name}: not the Megatron backend")
                continue
            line, at = rank(report, "--seq-length" in argv)
            print(f"{path.name}: {line}")
            if not line.startswith(("dense", "plan refused")):
                ranks[path.name] = at if ranks.get(path.name) is None else ranks[path.name]
    placed = [r for r in ranks.values() if r is not None]
    print(f"RESULT moe_launchers {len(ranks)} layout_fits {len(placed)} in_first_five "
          f"{sum(r <= 5 for r in placed)} (tp/pp/ep/etp at any cp; a layout the estimate does "
          "not fit on the launcher's default cluster is absent)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
