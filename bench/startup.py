"""Start-up benchmark: time from `python -m miles.train` to the first step, against a floor.

- startup_s: wall time from launching the default job (`--steps 0`: start, first sync, one
  scored rollout) until it prints that its train ranks and engines are ready and synced.
- floor_s: the part no launcher can avoid, measured in the same run: starting the two
  local raylets and connecting (miles.ray.local.start_local + ray.init), then one
  `import torch, megatron.core` in a fresh interpreter.
- ratio = startup_s / floor_s. Target <= 1.5. The phase lines the launcher prints
  (cluster, workers, roles and groups, first sync) are echoed so the split is visible.

The machine's load moves both numbers; compare ratios from one run, not across runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def floor() -> float:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    code = (
        "import ray\n"
        "from miles.ray.local import start_local\n"
        "c = start_local(2, 4)\n"
        "ray.init(address=c.address, logging_level='error')\n"
        "ray.shutdown(); c.shutdown()\n"
    )
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    cluster = time.monotonic() - t0
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, megatron.core"], check=True, env=env,
                   capture_output=True)
    return cluster + time.monotonic() - t0


def startup() -> float:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "miles.train", "--steps", "0"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = None
    for line in p.stderr:
        if line.startswith("start-up:"):
            print("  " + line.rstrip())
        if "ready, weights synced" in line and ready is None:
            ready = time.monotonic() - t0
    if p.wait() != 0 or ready is None:
        raise SystemExit(f"the default job failed (exit {p.returncode})")
    return ready


def main() -> None:
    f = floor()
    s = startup()
    print(f"RESULT startup_s={s:.1f} floor_s={f:.1f} ratio={s / f:.2f}")


if __name__ == "__main__":
    main()
