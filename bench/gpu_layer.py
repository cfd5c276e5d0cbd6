"""One MoE layer pass of a rank, timed on a GPU against what cost.py charges for it (issue 35).

The ranking of single-node layouts (slime's tp 4 / ep 8 against the model's tp 1-2) turns on
two things a single GPU can measure: the compute of a rank's share of a layer at its token
count, and the fixed time a layer pass and a local expert cost (`LAYER_LATENCY`,
`EXPERT_LATENCY`, fitted to three published step times). For each layout this builds the
rank's shapes of one MoE layer as cost.py sees them (the attention's weights and heads of a
tp share over the micro-batch's tokens, causal attention within samples of the step's mean
length, the router over the sequence-parallel share, `experts / ep` local experts with
`tokens x topk x ep / (tp x experts)` rows each, SwiGLU), runs forward and backward with
torch's kernels (SDPA, a batched GEMM for the evenly loaded local experts) and prints the
measured milliseconds beside the model's compute + latency for the same pass. Not measured:
communication (one GPU), TransformerEngine's fused kernels.

    python bench/gpu_layer.py MODEL_FILE --tokens 20480 --layouts 1x4 2x8 4x8 [--sample 10240]
    python bench/gpu_layer.py MODEL_FILE --dry      # tiny shapes on the CPU: the script runs

MODEL_FILE: a bash model file (slime's scripts/models/qwen3-30B-A3B.sh) or a config.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from miles_topology.judging.cost import HARDWARE, step_cost  # noqa: E402
from miles_topology.judging.memory import Counter, Precision, Run, layout_of  # noqa: E402
from miles_topology.judging.plan import read_model  # noqa: E402
from miles_topology.model.topology import Topology  # noqa: E402


@dataclass(frozen=True)
class Pass:
    """A rank's shapes of one MoE layer pass (cost.py's, see `shapes`)."""

    tokens: int  # the micro-batch's tokens (attention's, after the sequence-parallel gather)
    hidden: int
    qkv: int  # output width of the rank's fused QKV projection
    heads: int  # query heads of the rank
    groups: int  # key/value heads of the rank
    head: int  # head width
    experts: int  # local experts
    rows: int  # tokens a local expert
    ffn: int  # an expert's width
    router_rows: int  # the sequence-parallel share the router scores
    router: int  # experts scored

    def flops(self, sample: int) -> float:
        """Forward FLOPs of the pass, as cost.py counts them (attention causal: half the
        sample's context)."""
        t, h, d = self.tokens, self.hidden, self.head
        linear = 2 * t * h * (self.qkv + self.heads * d)
        core = 2 * t * (sample / 2) * self.heads * 2 * d
        experts = 2 * self.experts * self.rows * h * 3 * self.ffn
        return linear + core + experts + 2 * self.router_rows * h * self.router


def topology(model: dict, tp: int, ep: int, layers: int) -> Topology:
    """The model cut to `layers` MoE layers (its --moe-layer-freq pattern dropped)."""
    kept = {k: v for k, v in model.items() if k not in ("layers", "moe_layer_freq")}
    return Topology(nodes=1, gpus_per_node=8, node_gpus=8, tp=tp, sp=tp > 1, pp=1, ep=ep,
                    etp=1, layers=layers, **kept)


def shapes(shape, model: dict, tp: int, ep: int, tokens: int) -> Pass:  # noqa: ANN001
    lay = layout_of(topology(model, tp, ep, 1))
    c = Counter(shape, lay)
    head = shape.kv_channels or shape.hidden // lay.heads
    heads = lay.heads // tp
    experts = max(lay.experts, 1)
    return Pass(tokens=tokens, hidden=shape.hidden, qkv=c.attention // shape.hidden - heads * head,
                heads=heads, groups=max(1, c.groups // tp), head=head,
                experts=experts // ep, rows=tokens * lay.topk * ep // (tp * experts),
                ffn=shape.moe_ffn or shape.ffn_size(), router_rows=tokens // tp,
                router=lay.experts)


def modelled_ms(shape, model: dict, tp: int, ep: int, tokens: int, sample: int,  # noqa: ANN001
                gpu: str, terms: tuple[str, ...] = ("compute", "latency")) -> float:
    """cost.py's `terms` of one MoE layer pass (forward and backward): a two-layer model's
    minus a one-layer model's, a micro-batch."""
    def total(layers: int) -> float:
        lay = layout_of(topology(model, tp, ep, layers))
        cost = step_cost(shape, lay, HARDWARE[gpu], 8, Precision(), Run(tokens=tokens),
                         tokens * lay.dp, sample / 2)
        return sum(cost.terms[k] for k in terms) / cost.micro_batches

    return (total(2) - total(1)) * 1e3


def measure_ms(p: Pass, sample: int, device: str, repeats: int) -> float:
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16 if device == "cuda" else torch.float32
    mk = dict(device=device, dtype=dt)

    def leaf(*size: int, scale: float = 0.02):  # noqa: ANN202
        return (torch.randn(*size, **mk) * scale).requires_grad_()

    x = leaf(p.tokens, p.hidden, scale=1.0)
    w_qkv = leaf(p.hidden, p.qkv + p.heads * p.head)
    w_out = leaf(p.heads * p.head, p.hidden)
    w_router = leaf(p.hidden, p.router)
    w1, w2 = leaf(p.experts, p.hidden, 2 * p.ffn), leaf(p.experts, p.ffn, p.hidden)
    routed = leaf(p.experts, p.rows, p.hidden, scale=1.0)
    n = max(1, p.tokens // sample)

    def once() -> None:
        qkv = x @ w_qkv
        q = qkv[:, : p.heads * p.head].reshape(n, -1, p.heads, p.head).transpose(1, 2)
        kv = qkv[:, p.heads * p.head:].reshape(n, -1, 2 * p.groups, p.head).transpose(1, 2)
        k, v = kv[:, : p.groups], kv[:, p.groups:]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=p.groups != p.heads)
        out = a.transpose(1, 2).reshape(p.tokens, -1) @ w_out
        scores = x[: p.router_rows] @ w_router
        gate, up = torch.bmm(routed, w1).chunk(2, dim=-1)
        y = torch.bmm(F.silu(gate) * up, w2)
        (out.float().sum() + scores.float().sum() + y.float().sum()).backward()

    once()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            once()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            import time

            t0 = time.perf_counter()
            once()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=20480, help="--max-tokens-per-gpu")
    ap.add_argument("--sample", type=int, help="mean sample length (default: tokens / 2)")
    ap.add_argument("--layouts", nargs="+", default=["1x4", "1x8", "2x8", "4x8"],
                    help="TPxEP of each layout")
    ap.add_argument("--gpu", default="H100", help="the model's hardware row")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--dry", action="store_true", help="tiny shapes on the CPU")
    args = ap.parse_args(argv)
    shape, model = read_model([args.model], None)
    sample = args.sample or args.tokens // 2
    device = "cpu"
    if not args.dry:
        import torch

        if not torch.cuda.is_available():
            print("no GPU: run with --dry for the CPU check of the script", file=sys.stderr)
            return 2
        device = "cuda"
    for spec in args.layouts:
        tp, ep = (int(v) for v in spec.split("x"))
        p = shapes(shape, model, tp, ep, args.tokens)
        want = modelled_ms(shape, model, tp, ep, args.tokens, sample, args.gpu)
        print(f"tp {tp} ep {ep}: {p.experts} local experts x {p.rows} rows, {p.tokens} tokens, "
              f"{p.heads} heads" + (" (measured at a sixteenth)" if args.dry else ""))
        if args.dry:  # a sixteenth of every width and the tokens: runs in a second on a CPU
            p = Pass(*(max(1, v // 16) for v in vars(p).values()))
        got = measure_ms(p, min(sample, p.tokens), device, args.repeats)
        print(f"  measured {got:.2f} ms, model (compute + latency) {want:.2f} ms"
              + ("" if args.dry else f", ratio {got / want:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
