"""`check`'s memory findings: does the layout fit the GPU, and which layout change makes it.

memory-exceeds-gpu (error) is certain: weights, main grads and optimizer state alone, before
any activation, exceed the GPU on some rank (the vocabulary left out when unknown, so a lower
bound). memory-near-gpu (warning): with the activation estimate and the GPU's reserve (CUDA
context, NCCL buffers, fragmentation: memory.reserve_bytes) the largest rank passes 90 % of
the GPU; past the whole GPU the message says "exceeds" and what was assumed. Otherwise the
report carries the largest rank's figures (`Verdict.memory`).
The GPU is `check --gpu` (pylaunch/cluster.py's table); when it is assumed, the error is
judged against the largest GPU of the table, so no real cluster can make it wrong.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..model.errors import Problem
from ..model.gpus import GPUS
from ..model.parts import GROUP_OF, flag_of
from .memory import (
    READS,
    Estimate,
    Precision,
    Run,
    Shape,
    engine_memory,
    flag_values,
    gib,
    gpu_bytes,
    layout_of,
    precision_from_flags,
    reserve_bytes,
    run_from_flags,
    shape_from_flags,
    train_memory,
    unmodelled,
    vary,
)

if TYPE_CHECKING:
    from ..model.topology import Topology
    from ..pylaunch.cluster import ClusterModel
    from .verdict import Verdict

NEAR = 0.9
LARGEST = max(GPUS, key=lambda g: GPUS[g][1])


@dataclass(frozen=True)
class Gpu:
    name: str
    bytes: int
    assumed: bool

    @property
    def text(self) -> str:
        return f"{gib(self.bytes):g} GiB of an {self.name}" + (" (assumed; give --gpu)"
                                                               if self.assumed else "")


def gpu_of(cluster: ClusterModel | None) -> Gpu | None:
    """The GPU judged on; None when its name is not in the table (memory unknown)."""
    name = (cluster.gpu if cluster is not None else "H100").upper()
    assumed = cluster is None or "gpu" in cluster.assumed
    size = gpu_bytes(name)
    return Gpu(name, size, assumed) if size else None


def _skip_reason(topo: Topology, argv: Sequence[str]) -> str | None:
    """Why no estimate applies: the trainer is not Megatron's full-parameter Adam."""
    given = flag_values(argv)
    if topo.layout.train_backend == "fsdp":
        return "FSDP backend"
    if topo.rollout.rollout_only:
        return "no trainer (--debug-rollout-only)"
    if any(w.startswith(("--lora", "--multi-lora")) for w in given):
        return "LoRA (frozen base weights)"
    if given.get("--megatron-to-hf-mode") == "bridge":
        return "the model is built by Megatron-Bridge from the HF checkpoint, not the flags"
    if (why := unmodelled(given)) is not None:
        return why
    if "--use-megatron-fsdp" in given or "--use-torch-fsdp2" in given:
        return "FSDP inside Megatron shards weights and grads (not modelled)"
    if topo.model.layers is None or topo.model.heads is None:
        return "--num-layers / --num-attention-heads not given"
    return too_large(topo)


def too_large(topo: Topology) -> str | None:
    """Why a size is beyond what the estimate models (memory.MAX_*): it is computed stage by
    stage and layer by layer, so a size of 10^30 would run for ever (or not fit in memory)."""
    from .memory import MAX_EXPERTS, MAX_LAYERS, MAX_STAGES

    m, lay = topo.model, topo.layout
    for flag, value, most in (("--num-layers", m.layers, MAX_LAYERS),
                              ("--num-experts", m.experts, MAX_EXPERTS),
                              ("--pipeline-model-parallel-size", lay.pp, MAX_STAGES),
                              ("--mtp-num-layers", m.mtp_layers, MAX_LAYERS)):
        if value is not None and value > most:
            return f"{flag} {value} is more than the {most} the estimate models"
    return None


def breakdown(est: Estimate, stage: int, prec: Precision) -> str:
    """The arithmetic of one stage's static memory, for a message."""
    m, lay = est.stages[stage], est.layout
    p = m.params
    opt = (f"{prec.optimizer} B x ({p.dense / 1e9:.2f}e9 / dp x cp {lay.dp * lay.cp} + "
           f"{p.expert / 1e9:.2f}e9 / edp {lay.edp})" if prec.distributed
           else f"{prec.optimizer} B x {p.total / 1e9:.2f}e9")
    if prec.offload:
        opt += f" x {1 - prec.offload:g} left on the GPU"
    vocab = "" if est.shape.vocab_known else " (vocabulary unknown: embeddings not counted)"
    return (f"pipeline stage {stage} holds {p.total / 1e9:.2f}e9 parameters "
            f"({p.expert / 1e9:.2f}e9 in {lay.experts_on[stage]} experts a layer){vocab}: "
            f"weights {prec.weight} B + main grads {prec.grad} B a parameter = "
            f"{gib(m.weights + m.grads):g} GiB, optimizer {opt} = {gib(m.optimizer):g} GiB; "
            f"{gib(m.static):g} GiB")


def estimate(topo: Topology, shape: Shape, prec: Precision, run: Run) -> Estimate:
    return train_memory(shape, layout_of(topo), prec, run)


def fixes(topo: Topology, shape: Shape, prec: Precision, run: Run, limit: float,
          static: bool, most: int = 2) -> list[str]:
    """The smallest layout changes that bring the largest rank under `limit` bytes (static
    alone, or with activations), each still a valid Topology (every rule passes): more ep,
    more pp, optimizer CPU offload, the distributed optimizer, more nodes; fewest GPUs
    first, then fewest changes."""
    from itertools import product

    from ..model.errors import TopologyError

    def doubles(v: int, top: int) -> list[int]:
        out = [v]
        while out[-1] * 2 <= top:
            out.append(out[-1] * 2)
        return out

    lay = layout_of(topo)
    nodes = doubles(lay.nodes, lay.nodes * 8)
    eps = doubles(lay.ep, lay.world * 8) if lay.experts else [lay.ep]
    pps = doubles(lay.pp, min(lay.layers, lay.world * 8))
    precs = [prec] + [replace(prec, distributed=True)] * (not prec.distributed) + \
        [replace(prec, offload=1.0)] * (prec.offload < 1)
    found: list[tuple[int, int, str]] = []
    for n, ep, pp, pr in product(nodes, eps, pps, precs):
        change = [(n != lay.nodes, f"{flag_of('nodes')} {n}"),
                  (ep != lay.ep, f"{flag_of('ep')} {ep}"),
                  (pp != lay.pp, f"{flag_of('pp')} {pp}"),
                  (pr.distributed != prec.distributed, "--use-distributed-optimizer"),
                  (pr.offload != prec.offload,
                   "--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d")]
        said = [text for changed, text in change if changed]
        if not said:
            continue
        try:
            t = vary(topo, nodes=n, ep=ep, pp=pp)
        except TopologyError:
            continue
        est = estimate(t, shape, pr, run)
        if max((m.static if static else m.total) for m in est.stages) <= limit:
            found.append((est.layout.world, len(said), " ".join(said)))
    return [text for _, _, text in sorted(found)[:most]]


def judge(topo: Topology, argv: Sequence[str], cluster: ClusterModel | None,
          launcher: bool = False) -> tuple[list[Problem], dict[str, Any] | None]:
    """(problems, report) of the memory of a valid Topology launched with `argv`;
    `launcher`: a Python launcher that sizes its job from the cluster it runs on."""
    shape = shape_from_flags(argv)
    why = _skip_reason(topo, argv) or (None if shape else "--hidden-size not given")
    if why:
        return [], {"skipped": why}
    assert shape is not None
    lay = layout_of(topo)
    gpu = gpu_of(cluster)
    if gpu is None:
        return [], {"skipped": f"GPU {cluster.gpu if cluster else '?'} is not modelled (its "
                               f"memory is unknown; one of {', '.join(GPUS)})"}
    prec = precision_from_flags(argv)
    run = replace(run_from_flags(argv, lay),
                  reserve=reserve_bytes(gpu.bytes, topo.rollout.colocate))
    est = train_memory(shape, lay, prec, run)
    certain = gpu.bytes if not gpu.assumed else gpu_bytes(LARGEST) or gpu.bytes
    top = est.largest_static
    problems = []
    where = (f"{gib(certain):g} GiB of an {LARGEST}, the largest GPU modelled (no --gpu "
             "given)" if gpu.assumed else gpu.text)
    flags = ("--expert-model-parallel-size", "--pipeline-model-parallel-size")
    custom = "--spec" in flag_values(argv)  # a plugin's layers: the standard ones estimated
    if top.static > certain and not custom:
        got = fixes(topo, shape, prec, run, certain, True)
        problems.append(Problem(
            "memory-exceeds-gpu",
            f"{breakdown(est, top.stage, prec)} > {where}, before any activation: every rank "
            f"of that stage runs out of memory at start-up.",
            ("try " + ", or ".join(got)) if got else
            "more GPUs (nodes), a larger GPU, or a smaller model: no ep/pp on this cluster "
            "brings it under",
            flags))
    else:
        big = est.largest
        if big.total > NEAR * gpu.bytes or top.static > certain:
            got = fixes(topo, shape, prec, run, NEAR * gpu.bytes, False)
            acts = "unknown" if big.activations is None else f"{gib(big.activations):g} GiB"
            over = (f"exceeds {gpu.text} ({big.total / gpu.bytes:.1f} x)"
                    if big.total > gpu.bytes else f"over {NEAR:.0%} of {gpu.text}")
            problems.append(Problem(
                "memory-near-gpu",
                f"pipeline stage {big.stage}: {gib(big.static):g} GiB of weights, grads and "
                f"optimizer + {acts} of activations (estimate) + {gib(big.reserve):g} GiB "
                f"reserved (CUDA context, NCCL, fragmentation) = {gib(big.total):g} GiB, "
                f"{over}{_assumed_cluster(cluster) if launcher else ''}" + (
                    " (--spec: a plugin's layers, estimated as Megatron's standard ones)"
                    if custom else "") + ".",
                ("try " + ", or ".join(got)) if got else
                "recompute (--recompute-granularity full), fewer tokens a micro-batch "
                "(--max-tokens-per-gpu), or more GPUs",
                flags))
    report = {
        "gpu": gpu.name, "gpu_gib": gib(gpu.bytes), "gpu_assumed": gpu.assumed,
        "vocab_known": shape.vocab_known, "largest_stage": est.largest.stage,
        "stages": [m.as_dict() for m in est.stages],
        "activations": "estimate (Korthikanti et al. 2022, Table 2)",
        "exact_parameters": not custom,
    }
    if lay.engines:
        report["engine"] = engine_memory(shape, lay, gpu.bytes, run.mem_fraction).as_dict()
    return problems, report


def _assumed_cluster(cluster: ClusterModel | None) -> str:
    """Where the cluster a launcher sized its job from was assumed: the flags that give it."""
    if cluster is None:
        return ""
    missing = [k for k in ("nodes", "gpus_per_node") if k in cluster.assumed]
    if not missing:
        return ""
    return (f", on the assumed cluster of {cluster.nodes} x {cluster.gpus_per_node} GPUs "
            f"(give {' / '.join('--' + k.replace('_', '-') for k in missing)})")


def rank_gib(topo: Topology, report: dict[str, Any] | None) -> dict[int, float] | None:
    """Estimated GiB per train rank from a verdict's memory report (for `show`); None when
    there is no estimate."""
    if not report or "stages" not in report:
        return None
    stage_of = layout_of(topo).stage_of
    return {r: report["stages"][stage_of(r)]["total_gib"] for r in range(topo.world_size)}


def apply(v: Verdict, argv: Sequence[Any], cluster: ClusterModel | None,
          unknown: Collection[str | None] = (), launcher: bool = False) -> Verdict:
    """Add the memory findings and figures to a verdict whose Topology was built. `unknown`:
    the flags whose value is known only at run time (None: words that may hold any flag); one
    the estimate reads, or unknown sizes (no summary), and there is no estimate."""
    if v.topology is None:
        return v
    reads = set(READS) | {flag_of(n) for n in GROUP_OF}
    hit = sorted(f or "a word list" for f in unknown
                 if f is None or f in reads)
    if hit or v.summary is None:
        v.memory = {"skipped": f"{', '.join(hit) or 'the sizes'}: known only at run time"}
        return v
    problems, v.memory = judge(v.topology, argv, cluster, launcher)
    v.errors += [p for p in problems if p.severity == "error"]
    v.warnings += [p for p in problems if p.severity == "warning"]
    return v
