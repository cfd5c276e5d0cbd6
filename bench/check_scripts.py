"""Read 100 generated launch scripts (~200 lines each, with a sourced model file).

A benchmark, not a timed test: it prints per-script timings and ``RESULT`` lines measured in
this run: ``scripts_per_s`` (wall clock), ``scripts_per_cpu_s`` (process CPU time, steadier
on a shared machine) and ``check_ms_median`` (a whole `check`, reading and judging one
script with its model file).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from miles_topology.judging.check_script import check_script  # noqa: E402
from miles_topology.shell import read_script  # noqa: E402

MODEL = """\
# generated MoE model file
N_DENSE=1
N_MOE={moe}
MODEL_ARGS=(
   --num-layers $((N_DENSE + N_MOE))
   --hidden-size 2048 --ffn-hidden-size 6144
   --num-attention-heads 32 --num-query-groups 4
   --num-experts {experts} --moe-router-topk 8
   --moe-layer-freq "[0]*${{N_DENSE}}+[1]*${{N_MOE}}"
{extra})
"""

HEAD = """\
#!/bin/bash
set -ex
pkill -9 sglang
ray stop --force
SCRIPT_DIR="$(cd -- "$(dirname -- "${{BASH_SOURCE[0]}}")" &>/dev/null && pwd)"
source "${{SCRIPT_DIR}}/models/model-{k}.sh"
NNODES=${{NNODES:-{nodes}}}
TP=${{TP:-{tp}}}
EP=$(( {ep} ))
NVLINK=$(nvidia-smi topo -m | grep -c NV)
if [ "$NVLINK" -gt 0 ]; then HAS_NVLINK=1; else HAS_NVLINK=0; fi
"""

TAIL = """\
RUNTIME_ENV_JSON="{{
  \\"env_vars\\": {{\\"PYTHONPATH\\": \\"/root/Megatron-LM/\\", \\"NCCL\\": \\"${{HAS_NVLINK}}\\"}}
}}"
ray start --head --node-ip-address ${{MASTER_ADDR:-127.0.0.1}} --num-gpus 8
ray job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json="${{RUNTIME_ENV_JSON}}" \\
   -- python3 train.py \\
   --actor-num-nodes ${{NNODES}} \\
   --actor-num-gpus-per-node 8 \\
   --colocate \\
   --tensor-model-parallel-size ${{TP}} --sequence-parallel \\
   --expert-model-parallel-size ${{EP}} --expert-tensor-parallel-size 1 \\
{expansions}
"""


def make(root: Path, k: int, rng: random.Random) -> Path:
    extra = "".join(f"   --model-opt-{j} {j}\n" for j in range(20))
    (root / "models" / f"model-{k}.sh").write_text(
        MODEL.format(moe=rng.choice([23, 47]), experts=rng.choice([64, 128]), extra=extra))
    lines = [HEAD.format(k=k, nodes=rng.choice([1, 2]), tp=rng.choice([1, 2, 4]),
                         ep=rng.choice(["4", "8", "2 * 4"]))]
    names = []
    while sum(s.count("\n") for s in lines) < 170:
        name = f"GROUP{len(names)}_ARGS"
        names.append(name)
        body = []
        for j in range(rng.randint(6, 14)):
            r = rng.random()
            if r < 0.15:
                body.append(f"   # --disabled-{j} {j}")
            elif r < 0.25:
                body.append("")
            elif r < 0.4:
                body.append(f"   --switch-{len(names)}-{j}")
            else:
                body.append(f"   --opt-{len(names)}-{j} ${{V{j}:-{rng.randint(1, 999)}}}")
        lines.append(f"{name}=(\n" + "\n".join(body) + "\n)\n")
        if rng.random() < 0.3:
            lines.append(f"{name}+=(--appended-{len(names)} $(( {rng.randint(1, 9)} * 8 )))\n")
    expansions = " \\\n".join(f'   "${{{n}[@]}}"' for n in ["MODEL_ARGS", *names])
    lines.append(TAIL.format(expansions=expansions))
    path = root / f"run-{k:03d}.sh"
    path.write_text("".join(lines))
    return path


def main() -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        paths = [make(root, k, rng) for k in range(100)]
        lines = [p.read_text().count("\n") for p in paths]
        read_script(paths[0])  # warm imports and regex caches
        check_script(str(paths[0]), {})
        times, flags = [], 0
        start, cpu = time.perf_counter(), time.process_time()
        for p in paths:
            t = time.perf_counter()
            read = read_script(p)
            times.append(time.perf_counter() - t)
            flags += len(read.argv)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        checks = []
        for p in paths:
            t = time.perf_counter()
            check_script(str(p), {})
            checks.append((time.perf_counter() - t) * 1000)
    ms = sorted(x * 1000 for x in times)
    print(f"scripts: {len(paths)}, lines per script: {min(lines)}-{max(lines)} "
          f"(+ a {MODEL.count(chr(10)) + 20}-line model file each), flags read: {flags}")
    print(f"per script: median {statistics.median(ms):.2f} ms, p90 {ms[89]:.2f} ms, "
          f"max {ms[-1]:.2f} ms; total {total:.3f} s")
    print(f"RESULT scripts_per_s={len(paths) / total:.1f}")
    print(f"RESULT scripts_per_cpu_s={len(paths) / cpu:.1f}")
    print(f"RESULT check_ms_median={statistics.median(checks):.2f}")


if __name__ == "__main__":
    main()
