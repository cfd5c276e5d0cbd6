"""`check FOLDER` over 150 generated launch scripts: how soon the first result is printed.

A benchmark, not a timed test. The scripts are bench/check_scripts.py's (~200 lines each,
a sourced model file; each has problems, so each prints lines). `check` runs as a user runs
it, in a subprocess, and the time to its first line of output is read off its stdout.
RESULT lines: ``first_result_s`` (the target: under 1 s), ``first_result_cpu_s`` (the CPU
time `check` had used by then, read from /proc: what the wall time is on an idle machine),
``total_s``, and ``first_over_total`` (how much of the run a user waits before seeing
anything; 1.0 would be a report printed only at the end). Bytecode is compiled once before
the measured run (into a temporary PYTHONPYCACHEPREFIX), as an installed wheel has it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from check_scripts import make  # noqa: E402

N = 150


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        for k in range(N):
            make(root, k, rng)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PYTHONPYCACHEPREFIX": str(root / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "miles_topology", "check",
                        str(root / "run-000.sh")], env=env, capture_output=True)  # warm
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "miles_topology", "check",
                                 "--output-format", "concise", str(root)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                text=True, bufsize=1)
        first, files, lines = None, set(), 0
        for line in proc.stdout:
            if first is None:
                first = time.perf_counter() - start
                cpu = _cpu(proc.pid)
            lines += 1
            files.add(line.split(":", 1)[0])
        proc.wait()
        total = time.perf_counter() - start
    print(f"scripts: {N} (+ {N} model files, skipped by content), exit {proc.returncode}, "
          f"{lines} lines of output about {len(files) - 1} files")
    print(f"RESULT first_result_s={first:.3f}")
    print(f"RESULT first_result_cpu_s={cpu:.3f}")
    print(f"RESULT total_s={total:.3f}")
    print(f"RESULT first_over_total={first / total:.3f}")


if __name__ == "__main__":
    main()
