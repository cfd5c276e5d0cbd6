"""The step-time model of cost.py against published step times: the fit of its latencies
and a check on runs the fit did not see.

NVIDIA's Megatron-MoE model zoo (yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md)
reports Qwen3-235B-A22B pre-training on 256 H100 (32 x 8, 8 x 400 Gb/s InfiniBand), BF16,
dropless. Sequence 4096, micro-batch 1, global batch 2048 (the fit):

  tp 2 ep 32 pp 8 vpp 4, DeepEP, selective recompute (norm, act): 19.7 s
  tp 2 ep 8  pp 32 vpp 3, alltoall, selective recompute:           24.2 s
  tp 4 ep 8  pp 8 vpp 4, DeepEP, no recompute:                     29.0 s

Long context, tp 4 ep 8 pp 8 vpp 4, DeepEP, global batch 256 (the check): sequence 16k, 32k,
64k, 128k at cp 1, 2, 4, 8: 237, 277, 320, 357 TFLOPS a GPU dropless (295, 335, 368, 389 with
forced balance). Their step time is the step's FLOPs over 256 x that rate; the FLOPs a token
come from the 4,096 runs (their time x rate: 147.6 GFLOPs a token, of which the causal
attention's 18.9 grow with the sequence).

The model is given the same layouts, split as the zoo splits them: the embedding and the loss
counted as a layer each (model_configs/benchmarking/Qwen3-235B-A22B.yaml
--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split;
runtime_configs/benchmarking/runtime.conf: 96 layers), so pp 32 x vpp 3 gives the loss a
virtual stage of its own; no recompute (the selective recompute of norms and activations is
not modelled); NVIDIA's runs compute a fused cross-entropy, not slime's RL loss: the loss is
given 4 bytes a logit, the least any loss moves (the bf16 logit read, its gradient written).

It prints the least-squares fit of (LAYER_LATENCY, EXPERT_LATENCY) to the three 4,096 runs next
to the frozen values of cost.py, each run's modelled and measured time with and without the
latencies, and ``RESULT order_agrees`` (1 when the model orders the three as measured) and
``RESULT long_context_ratio`` (measured over modelled, dropless; 1 is exact).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

from miles_topology.judging.cost import (  # noqa: E402
    EXPERT_LATENCY,
    HARDWARE,
    LAYER_LATENCY,
    step_cost,
)
from miles_topology.judging.memory import Precision, Run, layout_of, shape_from_flags  # noqa: E402
from miles_topology.model.topology import Topology  # noqa: E402

# Qwen3-235B-A22B (its HF config; miles' scripts/models/qwen3-235B-A22B.sh)
FLAGS = ("--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads 64"
         " --num-query-groups 4 --kv-channels 128 --num-layers 94 --hidden-size 4096"
         " --ffn-hidden-size 12288 --normalization RMSNorm --position-embedding-type rope"
         " --swiglu --untie-embeddings-and-output-weights --vocab-size 151936"
         " --moe-ffn-hidden-size 1536 --moe-router-topk 8 --num-experts 128").split()
MEASURED = [  # tp, ep, pp, vpp, dispatcher, seconds a step (sequence 4096, global batch 2048)
    (2, 32, 8, 4, "flex", 19.7),
    (2, 8, 32, 3, "alltoall", 24.2),
    (4, 8, 8, 4, "flex", 29.0),
]
LONG = [(16384, 1, 237), (32768, 2, 277), (65536, 4, 320), (131072, 8, 357)]
GFLOPS_A_TOKEN, ATTENTION_GFLOPS = 147.6, 18.9  # at sequence 4096 (module docstring)
MODEL = {"layers": 94, "heads": 64, "query_groups": 4, "experts": 128, "topk": 8}


def modelled(tp: int, ep: int, pp: int, vpp: int, kind: str, seq: int, cp: int, batch: int,
             latency: tuple[float, float]) -> float:
    shape = shape_from_flags(FLAGS)
    assert shape is not None
    topo = Topology(nodes=32, gpus_per_node=8, node_gpus=8, tp=tp, sp=True, pp=pp, cp=cp,
                    vpp=vpp, ep=ep, etp=1, embedding_in_split=True, loss_in_split=True, **MODEL)
    return step_cost(replace(shape, dispatcher=kind), layout_of(topo), HARDWARE["H100"], 8,
                     Precision(), Run(tokens=seq // cp), batch * seq, seq // 2, loss_bytes=4,
                     latency=latency).total


def fit() -> tuple[float, float]:
    """Least squares of the measured minus the roofline time on the two latencies."""
    runs = [(tp, ep, pp, vpp, kind, 4096, 1, 2048) for tp, ep, pp, vpp, kind, _ in MEASURED]
    base = [modelled(*r, latency=(0.0, 0.0)) for r in runs]
    a = [modelled(*r, latency=(1.0, 0.0)) - b for r, b in zip(runs, base, strict=True)]
    e = [modelled(*r, latency=(0.0, 1.0)) - b for r, b in zip(runs, base, strict=True)]
    y = [m[-1] - b for m, b in zip(MEASURED, base, strict=True)]
    saa, see = sum(x * x for x in a), sum(x * x for x in e)
    sae = sum(x * z for x, z in zip(a, e, strict=True))
    say = sum(x * z for x, z in zip(a, y, strict=True))
    sey = sum(x * z for x, z in zip(e, y, strict=True))
    det = saa * see - sae * sae
    return (say * see - sey * sae) / det, (saa * sey - sae * say) / det


def main() -> None:
    lam, mu = fit()
    print(f"fit: LAYER_LATENCY {lam * 1e3:.3f} ms, EXPERT_LATENCY {mu * 1e3:.4f} ms; "
          f"cost.py: {LAYER_LATENCY * 1e3:.3f} ms, {EXPERT_LATENCY * 1e3:.4f} ms")
    frozen = (LAYER_LATENCY, EXPERT_LATENCY)
    got = []
    for tp, ep, pp, vpp, kind, seconds in MEASURED:
        run = (tp, ep, pp, vpp, kind, 4096, 1, 2048)
        got.append(modelled(*run, latency=frozen))
        print(f"tp {tp} ep {ep} pp {pp} vpp {vpp} {kind}, seq 4096: measured {seconds} s, "
              f"model {got[-1]:.1f} s ({modelled(*run, latency=(0.0, 0.0)):.1f} s without "
              "latencies)")
    ratios = []
    for seq, cp, tflops in LONG:
        flops = (GFLOPS_A_TOKEN - ATTENTION_GFLOPS + ATTENTION_GFLOPS * seq / 4096) * 1e9
        seconds = flops * 256 * seq / (256 * tflops * 1e12)
        run = (4, 8, 8, 4, "flex", seq, cp, 256)
        mine = modelled(*run, latency=frozen)
        ratios.append(seconds / mine)
        print(f"tp 4 ep 8 pp 8 vpp 4 flex, seq {seq} cp {cp}: measured {seconds:.1f} s, model "
              f"{mine:.1f} s ({modelled(*run, latency=(0.0, 0.0)):.1f} s without latencies)")
    measured = [m[-1] for m in MEASURED]
    agree = sorted(range(3), key=lambda i: got[i]) == sorted(range(3), key=lambda i: measured[i])
    print(f"RESULT order_agrees {int(agree)}")
    print(f"RESULT long_context_ratio {statistics.mean(ratios):.2f}")


if __name__ == "__main__":
    main()
