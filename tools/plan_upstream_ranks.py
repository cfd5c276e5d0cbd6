"""Where `plan` ranks the layouts slime's engineers run (issue 35's acceptance).

For each of slime's five large-model scripts, `plan` is given the model file the script
sources, its node count, H100, --recompute, --optimizer-cpu-offload and its
--max-tokens-per-gpu; the line prints the rank of the script's (tp, pp, cp, ep, etp), of its
tp/pp/ep/etp at any cp, and the first layout. `--seq-length` adds the longest sample (the
script's --rollout-max-response-len + 1,024 prompt tokens). `--gap` prints, for each
script, how much slower by the model the upstream layout is than the fifth proposal, and the
terms that make the difference (what a measurement would have to move for it to be listed).

    python tools/plan_upstream_ranks.py /tmp/up/THUDM+slime [--seq-length] [--gap] [--nvidia]

`--nvidia` ranks a second set of expert layouts, chosen for throughput by NVIDIA's performance
team: the H100 presets of Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge
scripts/performance/configs/{qwen/qwen3,deepseek/deepseek,kimi/kimi}_workload_base_configs.py,
`*_PRETRAIN_CONFIG_H100_*_V1`): pre-training at sequence 4,096, micro-batch 1, their GPU count
and global batch, no optimizer offload, selective recompute (not modelled: full recompute is
weighed, not forced). The same model files (slime's) stand in for the architectures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from miles_topology.judging.memory import gpu_bytes  # noqa: E402
from miles_topology.judging.plan import Options, plan, read_model  # noqa: E402

# script, model file, nodes, --max-tokens-per-gpu, response length, (tp, pp, cp, ep, etp)
CASES = [
    ("run-qwen3-235B-A22B.sh", "qwen3-235B-A22B.sh", 8, 16384, 8192, (4, 4, 2, 16, 1)),
    ("run-deepseek-r1.sh", "deepseek-v3.sh", 16, 16384, 32768, (8, 4, 4, 32, 1)),
    ("run-kimi-k2-Instruct.sh", "kimi-k2.sh", 32, 16384, 32768, (8, 8, 4, 32, 1)),
    ("run-qwen3-30B-A3B.sh", "qwen3-30B-A3B.sh", 1, 20480, 8192, (4, 1, 1, 8, 1)),
    ("run-moonlight-16B-A3B.sh", "moonlight.sh", 1, 8192, 4096, (4, 1, 1, 8, 1)),
]


# model file, nodes, global batch (samples of 4,096 tokens), (tp, pp, vpp, ep, etp)
NVIDIA_H100 = [
    ("qwen3-30B-A3B.sh", 2, 1024, (1, 1, 1, 16, 1)),  # QWEN3_30B_A3B ... H100_BF16_V1
    ("qwen3-235B-A22B.sh", 32, 2048, (2, 8, 4, 32, 1)),  # QWEN3_235B_A22B ... H100_BF16_V1
    ("deepseek-v3.sh", 128, 8192, (2, 8, 4, 64, 1)),  # DEEPSEEK_V3 ... H100_V1
    ("kimi-k2.sh", 128, 8192, (8, 16, 2, 64, 1)),  # KIMI_K2 ... H100
]


def _rank(got, want: tuple[int, int, int, int]) -> int | None:  # noqa: ANN001
    """1-based rank of the first layout with this (tp, pp, ep, etp), at any cp and vpp."""
    return next((i for i, c in enumerate(got, 1)
                 if (c.topo.layout.tp, c.topo.layout.pp, c.topo.layout.ep,
                     c.topo.layout.etp) == want), None)


def nvidia(models: Path) -> None:
    for model, nodes, batch, (tp, pp, vpp, ep, etp) in NVIDIA_H100:
        shape, fields = read_model([str(models / model)], None)
        opts = Options(tokens=4096, recompute=None, offload=False, step_tokens=batch * 4096,
                       seq_length=4096)
        got = plan(shape, fields, nodes, 8, gpu_bytes("H100") or 0, opts=opts)
        rank = _rank(got, (tp, pp, ep, etp))
        slower = (got[rank - 1].cost.total / got[0].cost.total - 1) * 100 if rank else None
        t = got[0].topo.layout if got else None
        first = (t.tp, t.pp, t.ep, t.etp) if t else None
        print(f"{model} on {nodes} x 8, batch {batch}: NVIDIA (tp {tp}, pp {pp}, vpp {vpp}, ep "
              f"{ep}, etp {etp}) rank {rank or 'absent'} of {len(got)}"
              + (f", {slower:.0f} % slower than the first" if slower else "")
              + f"; first (tp, pp, ep, etp) {first}")


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0], "scripts", "models").is_dir():
        print(__doc__)
        return 2
    models = Path(argv[0], "scripts", "models")
    seq = "--seq-length" in argv
    if "--nvidia" in argv:
        nvidia(models)
        return 0
    for script, model, nodes, tokens, response, want in CASES:
        shape, fields = read_model([str(models / model)], None)
        opts = Options(tokens=tokens, recompute=True, offload=True,
                       seq_length=response + 1024 if seq else None)
        got = plan(shape, fields, nodes, 8, gpu_bytes("H100") or 0, opts=opts)

        def key(c):  # noqa: ANN001, ANN202
            t = c.topo.layout
            return (t.tp, t.pp, t.cp, t.ep, t.etp)

        exact = next((i for i, c in enumerate(got, 1) if key(c) == want), None)
        anycp = next((i for i, c in enumerate(got, 1)
                      if key(c)[:2] + key(c)[3:] == want[:2] + want[3:]), None)
        first = key(got[0]) if got else None
        print(f"{script}: upstream {want} rank {exact or 'absent'}, at any cp "
              f"{anycp or 'absent'}, of {len(got)}; first {first}")
        if "--gap" in argv and anycp and anycp > 5:
            print("    " + _gap(got[anycp - 1].cost, got[4].cost))
    return 0


def _gap(up, fifth) -> str:  # noqa: ANN001
    """The upstream layout's step time against the fifth proposal's, and the four terms
    that differ most (seconds, upstream minus fifth)."""
    diff = {k: up.terms[k] - fifth.terms[k] for k in up.terms}
    big = sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:4]
    return (f"{up.total:.1f} s a step against the fifth's {fifth.total:.1f} s "
            f"({(up.total / fifth.total - 1) * 100:+.0f} %; micro-batches {up.micro_batches} "
            f"against {fifth.micro_batches}): " + ", ".join(f"{k} {v:+.1f} s" for k, v in big))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
