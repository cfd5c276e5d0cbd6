"""`plan` for a 671B-parameter MoE (DeepSeek-V3's config.json) on 1024 GPUs (128 x 8 H100).

A benchmark, not a timed test: it prints the time of a whole plan (every candidate layout
built as a Topology and estimated), the best of 3 runs, and ``RESULT`` lines measured in this
run: ``plan_s`` (wall clock), ``plan_cpu_s`` (process CPU time, steadier on a shared machine),
and the target ratio ``plan_s / 2 s``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from miles_topology.judging.memory import GIB, gpu_bytes, read_hf_config  # noqa: E402
from miles_topology.judging.plan import Options, candidates, plan  # noqa: E402

CONFIG = ROOT / "tests" / "fixtures" / "hf" / "deepseek-v3.config.json"


def main() -> None:
    shape, model = read_hf_config(str(CONFIG))
    walls, cpus = [], []
    for _ in range(3):
        w, c = time.perf_counter(), time.process_time()
        found = plan(shape, model, 128, 8, gpu_bytes("H100"), opts=Options(tokens=8192))
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    tried = len(candidates(model, 128, 8, (1, 2, 4, 8, 16), (1, 2, 4)))
    best = found[0]
    print(f"671B MoE on 128 x 8 H100: {tried} valid layouts built, {len(found)} fit; best "
          f"tp {best.topo.layout.tp} pp {best.topo.layout.pp} cp {best.topo.layout.cp} ep "
          f"{best.topo.layout.ep} at {best.total / GIB:.1f} GiB a rank, "
          f"~{best.cost.total:.1f} s a step")
    print(f"RESULT plan_s {min(walls):.3f}")
    print(f"RESULT plan_cpu_s {min(cpus):.3f}")
    print(f"RESULT plan_s_over_target_2s {min(walls) / 2:.3f}")


if __name__ == "__main__":
    main()
