"""`miles-topology plan`: the layouts a model can train with on a cluster, best first.

Every candidate (tp over the divisors of a node's GPUs, pp, cp, ep over the expert count,
etp 1 or tp, virtual stages) is built as a Topology, so each passes every check; its memory
is the estimate of memory.py with the reserve of the GPU (CUDA context, NCCL buffers,
fragmentation). Full recompute, optimizer CPU offload and the virtual-stage count are
options of a layout with their costs (unless the user forces the first two): a layout
(tp, pp, cp, ep, etp) is proposed once, with its fastest choice of them. A layout whose
largest rank leaves less than the margin free (10 %, where `check` warns) is dropped; the
rest are ranked by the step time of cost.py (compute, TP / CP / EP / PP / DP communication,
the pipeline bubble, the optimizer).
With --colocate the rollout engines are proposed too: the engine size whose bf16 weights
take at most half of SGLang's static pool, and the static fraction the training process's
reserve and SGLang's own buffers leave.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..model.errors import InputError, TopologyError
from ..model.gpus import GPUS
from ..model.parts import flag_of
from ..model.topology import Topology
from ..reading.flags import parse_flags
from .cost import HARDWARE, TERMS, Cost, spans, step_cost
from .fit import NEAR
from .memory import (
    GIB,
    Counter,
    Estimate,
    Precision,
    Run,
    Shape,
    Sizes,
    engine_memory,
    flag_values,
    gib,
    gpu_bytes,
    layout_of,
    read_hf_config,
    reserve_bytes,
    shape_from_flags,
    train_memory,
    unmodelled,
    vary,
)

MODEL_FIELDS = ("layers", "heads", "query_groups", "experts", "topk", "moe_layer_freq",
                "mtp_layers")
MARGIN = round(1 - NEAR, 6)  # the share of the GPU a proposal leaves free: where check warns
SGLANG_OWN = 0.1  # SGLang's memory outside its static pool (activations, CUDA graphs)
RECOMPUTE = ["--recompute-granularity", "full", "--recompute-method", "uniform",
             "--recompute-num-layers", "1"]
OFFLOAD = ["--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d",
           "--use-precision-aware-optimizer"]
# DeepEP through megatron-core's flex dispatcher (megatron-core >= 0.12, TransformerConfig
# moe_enable_deepep requires moe_token_dispatcher_type 'flex'); slime's cross-node MoE
# scripts set these two (THUDM/slime scripts/run-deepseek-r1.sh, run-kimi-k2-*.sh); slime's
# image builds DeepEP (docker/Dockerfile DEEPEP_COMMIT), miles' starts from SGLang's image
# (docker/Dockerfile FROM lmsysorg/sglang), which SGLang's DeepEP MoE backend runs on. The
# model file's own dispatcher flag comes first, so check notes the pair (flag-given-twice;
# the last, flex, runs), as on slime's DeepSeek script. DeepEP sends a token once to each
# remote node its experts are on, once a rank inside a node, instead of once a routed
# expert: weighed against the model file's dispatcher whenever ep > 1.
DEEPEP = ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"]


@dataclass(frozen=True)
class Options:
    """What the user fixed; None: both ways are considered (recompute, offload)."""

    tokens: int = 8192  # --max-tokens-per-gpu
    recompute: bool | None = None
    offload: bool | None = None
    margin: float = MARGIN
    step_tokens: int | None = None  # None: STEP_SAMPLES samples of `mean_sample` tokens
    seq_length: int | None = None  # the longest sample: cp x tokens must hold it
    colocate: bool = False


@dataclass
class Rollout:
    """The engines proposed with a colocated layout."""

    engine_size: int
    fraction: float
    weights: int
    kv_tokens: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"rollout_num_gpus_per_engine": self.engine_size,
                "sglang_mem_fraction_static": self.fraction,
                "engine_weights_gib": gib(self.weights), "kv_tokens_per_gpu": self.kv_tokens}

    @property
    def flags(self) -> list[str]:
        return ["--colocate", "--rollout-num-gpus-per-engine", str(self.engine_size),
                "--sglang-mem-fraction-static", f"{self.fraction:g}"]


@dataclass
class Candidate:
    topo: Topology
    static: int
    total: int
    tp_in_node: bool
    ep_in_node: bool
    flags: list[str] = field(default_factory=list)
    cost: Cost | None = None
    recompute: bool = False
    offload: bool = False
    estimate: Estimate | None = None
    rollout: Rollout | None = None
    deepep: bool = False  # the flex dispatcher (DeepEP) proposed over the model file's

    def as_dict(self, gpu: int) -> dict[str, Any]:
        t = self.topo.layout
        out = {"tp": t.tp, "pp": t.pp, "cp": t.cp, "ep": t.ep, "etp": t.etp,
               "vpp": self.topo.stages.chunks, "dp": self.topo.dp, "edp": self.topo.edp,
               "last_stage_layers": t.last_stage_layers, "recompute": self.recompute,
               "optimizer_cpu_offload": self.offload, "deepep": self.deepep,
               "static_gib": gib(self.static),
               "total_gib": gib(self.total), "headroom": round(1 - self.total / gpu, 3),
               "tp_in_node": self.tp_in_node, "ep_in_node": self.ep_in_node,
               "flags": self.flags}
        if self.rollout is not None:
            out["rollout"] = self.rollout.as_dict()
        if self.cost is not None:
            out["step_s"] = round(self.cost.total, 4)
            out["micro_batches"] = self.cost.micro_batches
            out["cost_s"] = {k: round(v, 4) for k, v in self.cost.terms.items()}
        return out


# The most GPUs plan searches: each candidate layout is built and placed rank by rank.
MAX_WORLD = 1 << 15


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def flags_of(topo: Topology) -> list[str]:
    """The layout flags a launch script gives for this Topology."""
    lay = topo.layout
    out = [flag_of("nodes"), str(lay.nodes), flag_of("gpus_per_node"), str(lay.gpus_per_node),
           flag_of("tp"), str(lay.tp)]
    if lay.sp:
        out.append(flag_of("sp"))
    out += [flag_of("pp"), str(lay.pp)]
    if lay.last_stage_layers is not None:
        out += [flag_of("last_stage_layers"), str(lay.last_stage_layers)]
    if topo.stages.chunks > 1:
        out += [flag_of("vpp"), str(topo.stages.chunks)]
    out += [flag_of("cp"), str(lay.cp)]
    if topo.model.experts:
        out += [flag_of("ep"), str(lay.ep), flag_of("etp"), str(lay.etp)]
    return out


def candidates(model: dict[str, Any], nodes: int, per_node: int,
               cps: Sequence[int] = (1,), vpps: Sequence[int] = (1,),
               engine_size: int | None = None) -> list[Topology]:
    """Every valid Topology of the model on nodes x per_node GPUs for the given cp and
    virtual-stage counts."""
    world = nodes * per_node
    layers = model["layers"]
    experts = model.get("experts") or 0
    out = []
    for tp in _divisors(per_node, per_node):
        for pp in _divisors(world // tp, layers):
            per = -(-layers // pp)
            last = layers - per * (pp - 1) if layers % pp else None
            if last is not None and last < 1:
                continue
            for cp in cps:
                if (world // (tp * pp)) % cp:
                    continue
                for ep in _divisors(experts, world // pp) if experts else [1]:
                    for etp in sorted({1, tp}) if experts else [tp]:
                        for vpp in vpps if pp > 1 else (1,):
                            if per % vpp or (last is not None and last % vpp):
                                continue
                            try:
                                out.append(Topology(
                                    nodes=nodes, gpus_per_node=per_node, node_gpus=per_node,
                                    tp=tp, sp=tp > 1, pp=pp, cp=cp, last_stage_layers=last,
                                    vpp=vpp if vpp > 1 else None, ep=ep, etp=etp,
                                    colocate=True, engine_size=engine_size or per_node,
                                    **model))
                            except TopologyError:
                                continue
    return out


def _pow2(most: int) -> list[int]:
    out = [1]
    while out[-1] * 2 <= most:
        out.append(out[-1] * 2)
    return out


def propose_rollout(shape: Shape, lay: Sizes, world: int, gpu: int,
                    margin: float) -> Rollout | None:
    """The smallest engine (a power of two dividing the world) whose bf16 weights take at
    most half of SGLang's static pool, with the static fraction left by the margin, the
    training process's reserve (it stays resident while the engines run) and SGLang's
    buffers outside the pool; None when no engine of the cluster holds the weights."""
    fraction = int((1 - margin - reserve_bytes(gpu, True) / gpu - SGLANG_OWN) * 20) / 20
    if fraction <= 0:
        return None
    for g in _pow2(world):
        if world % g:
            continue
        eng = engine_memory(shape, replace(lay, engine_tp=g, engine_ep=1, engine_dp=1,
                                           dp_attention=False), gpu, fraction)
        if eng.weights <= fraction * gpu / 2:
            return Rollout(g, fraction, eng.weights, eng.kv_tokens)
    return None


def parameters(shape: Shape, model: dict[str, Any]) -> int:
    """The model's parameters (one rank holding all of it)."""
    topo = Topology(nodes=1, gpus_per_node=1, **model)
    return train_memory(shape, layout_of(topo)).stages[0].params.total


def plan(shape: Shape, model: dict[str, Any], nodes: int, per_node: int, gpu: int,
         prec: Precision | None = None, run: Run | None = None,
         opts: Options | None = None, gpu_name: str = "H100") -> list[Candidate]:
    """The layouts that fit with the margin, fastest first (see the module docstring).
    `prec` / `run` (older callers): offload and recompute from them when `opts` is None."""
    if opts is None:
        prec, run = prec or Precision(), run or Run()
        opts = Options(tokens=run.tokens or 8192, recompute=run.recompute == "full" or None,
                       offload=bool(prec.offload) or None)
    base = prec or Precision()
    hw = HARDWARE.get(gpu_name.upper(), HARDWARE["H100"])
    world = nodes * per_node
    sample = mean_sample(opts)
    step_tokens = opts.step_tokens or STEP_SAMPLES * sample  # an RL step
    reserve = reserve_bytes(gpu, opts.colocate)
    limit = (1 - opts.margin) * gpu
    context = sample // 2  # causal: a token attends to half its sample on average
    cps = _cps(world, opts)
    recomputes = [True] if opts.recompute else [False, True]
    offloads = [True] if opts.offload else [False, True]
    rollout = None
    engine = None
    if opts.colocate:
        first = candidates(model, 1, 1) or candidates(model, nodes, per_node)
        if first:
            rollout = propose_rollout(shape, layout_of(first[0]), world, gpu, opts.margin)
            engine = rollout.engine_size if rollout else None
    def evaluate(topo: Topology) -> Candidate | None:
        lay = layout_of(topo)
        counter = Counter(shape, lay)
        best: Candidate | None = None
        # the leanest variant first: when it does not fit, none does
        lean = train_memory(shape, lay, replace(base, offload=1.0 if offloads[-1] else 0.0),
                            Run(tokens=opts.tokens, recompute="full" if recomputes[-1]
                                else None, reserve=reserve), counter)
        if max(m.static for m in lean.stages) > gpu or max(
                m.total for m in lean.stages) > limit:
            return None
        for rec in recomputes:
            run = Run(tokens=opts.tokens, recompute="full" if rec else None, reserve=reserve)
            for off in offloads:
                pr = replace(base, offload=1.0 if off else 0.0)
                est = train_memory(shape, lay, pr, run, counter)
                static = max(m.static for m in est.stages)
                total = max(m.total for m in est.stages)
                if static > gpu or total > limit:
                    continue
                cost = step_cost(shape, lay, hw, per_node, pr, run, step_tokens, context,
                                 counter)
                if best is not None and best.cost is not None and \
                        best.cost.total <= cost.total:
                    continue
                best = Candidate(topo, static, total, False, False, [], cost, rec, off, est,
                                 rollout)
        if best is None:
            return None
        where = spans(lay, per_node)
        if topo.model.experts and lay.ep > 1 and shape.dispatcher != "flex":
            flex = step_cost(replace(shape, dispatcher="flex"), lay, hw, per_node,
                             replace(base, offload=1.0 if best.offload else 0.0),
                             Run(tokens=opts.tokens, recompute="full" if best.recompute
                                 else None, reserve=reserve), step_tokens, context, counter)
            if best.cost is not None and flex.total < best.cost.total:
                best.cost, best.deepep = flex, True
        best.tp_in_node = where.tp == 1
        best.ep_in_node = not topo.model.experts or where.ep == 1
        best.flags = _flags(best, opts, rollout)
        return best

    out = []
    # a rank's memory does not depend on cp (the same tokens a rank, the optimizer sharded
    # over dp x cp alike): larger cp sizes are built only for layouts that fit with the
    # smallest cp that holds the longest sample, and kept only when they are faster (the CP
    # ring is a cost; its gain is longer samples, which --seq-length asks for)
    for topo in candidates(model, nodes, per_node, cps[:1], (1, 2, 4), engine):
        got = evaluate(topo)
        if got is None:
            continue
        out.append(got)
        for cp in cps[1:]:
            if (world // (topo.layout.tp * topo.layout.pp)) % cp:
                continue
            try:
                other = evaluate(vary(topo, cp=cp))
            except TopologyError:
                continue
            if other is not None and other.cost and got.cost and \
                    other.cost.total < got.cost.total:
                out.append(other)
    out.sort(key=lambda c: (c.cost.total if c.cost else 0.0, c.total, c.topo.world_size))
    return _fastest_of_each(out)


def _fastest_of_each(ranked: list[Candidate]) -> list[Candidate]:
    """The first (fastest) candidate of each layout (tp, pp, cp, ep, etp): the virtual-stage
    count is a schedule option of a layout, as recompute and offload are, not a layout of its
    own; listing one layout at vpp 1, 2 and 4 would fill the first proposals with it."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for c in ranked:
        t = c.topo.layout
        key = (t.tp, t.pp, t.cp, t.ep, t.etp)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


# The samples of a training step (--global-batch-size, or --rollout-batch-size x
# --n-samples-per-prompt / --num-steps-per-rollout): 256 in four of slime's five large-model
# scripts, 64 in the fifth (THUDM/slime scripts/run-deepseek-r1.sh 128 x 8 / 4,
# run-kimi-k2-Instruct.sh 128 x 8 / 4, run-moonlight-16B-A3B.sh 128 x 8 / 4,
# run-qwen3-30B-A3B.sh --global-batch-size 256, run-qwen3-235B-A22B.sh 64). An RL step does
# not grow with the cluster: its micro-batches a data-parallel replica fall as dp grows.
STEP_SAMPLES = 256


def mean_sample(opts: Options) -> int:
    """Tokens of an average sample: half the longest (responses spread between the prompt
    and the response cap). The longest is --seq-length, else --max-tokens-per-gpu: slime's
    advice sets that to the longest response per CP rank (THUDM/slime
    docs/en/get_started/qa.md: `rollout_max_response_len / cp_size`)."""
    return max(1, (opts.seq_length or opts.tokens) // 2)


def _cps(world: int, opts: Options) -> list[int]:
    """The cp sizes tried, smallest first: powers of two up to 16 whose ring holds the
    longest sample (--seq-length), else the smallest one that does."""
    cps = [c for c in _pow2(min(world, 16))
           if opts.seq_length is None or c * opts.tokens >= opts.seq_length]
    return cps or [c for c in _pow2(world) if c * opts.tokens >= (opts.seq_length or 0)][:1]


def _flags(best: Candidate, opts: Options, rollout) -> list[str]:
    """A candidate's complete flags: its layout, recompute and offload as chosen, dynamic
    batching at the tokens a GPU takes, and the rollout proposed beside it."""
    return flags_of(best.topo) + (RECOMPUTE if best.recompute else []) + (
        OFFLOAD if best.offload else []) + (DEEPEP if best.deepep else []) + [
        "--use-dynamic-batch-size", "--max-tokens-per-gpu", str(opts.tokens)] + (
        rollout.flags if rollout else [])


def read_model(inputs: Sequence[str], flags: list[str] | None) -> tuple[Shape, dict[str, Any]]:
    """The model from an HF config.json, a model script (bash: MODEL_ARGS=(...); Python:
    miles' scripts/models/*.py, run in the sandbox), or flags."""
    if flags is not None and inputs:
        raise InputError("plan: give a config.json, a model script, or `-- MODEL FLAGS`, "
                         "not more than one")
    if flags is None:
        if len(inputs) != 1:
            raise InputError("plan: give one model: config.json, a model script, or "
                             "`-- MODEL FLAGS` (e.g. -- --num-layers 48 --hidden-size 2048 ...)")
        path = inputs[0]
        if path.endswith(".json"):
            try:
                return read_hf_config(path)
            except (OSError, ValueError) as e:
                raise InputError(f"{path}: cannot read an HF config: {e}") from None
        flags = _python_flags(path) if path.endswith(".py") else _script_flags(path)
    shape = shape_from_flags(flags)
    if (why := unmodelled(flag_values(flags))) is not None:
        raise InputError(f"plan: {why}: the parameters of this model would be wrong, so no "
                         "layout is proposed")
    parsed = parse_flags(flags)
    model = {k: v for k, v in parsed.fields.items() if k in MODEL_FIELDS}
    if shape is None or "layers" not in model or "heads" not in model:
        raise InputError("plan: the model needs --num-layers, --hidden-size and "
                         "--num-attention-heads")
    from .memory import MAX_EXPERTS, MAX_LAYERS

    for name, most in (("layers", MAX_LAYERS), ("experts", MAX_EXPERTS)):
        if isinstance(model.get(name), int) and model[name] > most:
            raise InputError(f"plan: {flag_of(name)} {model[name]} is more than {most}, the "
                             "largest value the estimate models")
    return shape, model


# miles' model_args_utils.load_model_args: that module registered as `model_args_utils` (the
# model files import moe_layer_freq from it), the file imported by path, its model_args()
# called, the text split on whitespace (radixark/miles
# miles/utils/external_utils/model_args_utils.py)
_LOAD = ("import importlib.util, sys\n"
         "def load(name, path):\n"
         "    spec = importlib.util.spec_from_file_location(name, path)\n"
         "    module = importlib.util.module_from_spec(spec)\n"
         "    spec.loader.exec_module(module)\n"
         "    return module\n"
         "if sys.argv[2:]:\n"
         "    sys.modules['model_args_utils'] = load('model_args_utils', sys.argv[2])\n"
         "print(' '.join(load('miles_model_args', sys.argv[1]).model_args().split()))\n")
_UTILS = os.path.join("miles", "utils", "external_utils", "model_args_utils.py")


def _python_flags(path: str) -> list[str]:
    """The flags of a Python model file (miles' scripts/models/*.py: `def model_args() ->
    str`), run as miles' model_args_utils.py runs it (found in the checkout the file is in),
    in the launcher sandbox under the per-input budget of a launcher (pylaunch.TIMEOUT_S)."""
    from .. import pylaunch

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such model file")
    full = os.path.abspath(path)
    ups = [os.path.dirname(full)]
    for _ in range(3):
        ups.append(os.path.dirname(ups[-1]))
    utils = next((os.path.join(u, _UTILS) for u in ups if os.path.isfile(os.path.join(u, _UTILS))),
                 None)
    got = pylaunch.run_program(["-c", _LOAD, full, *([utils] if utils else [])],
                               cwd=os.path.dirname(full), timeout_s=pylaunch.TIMEOUT_S,
                               reads=[full, *([utils] if utils else [])])
    if got.status != 0 or not got.stdout.strip():
        why = got.error or "model_args() gave no flags"
        raise InputError(f"{path}: not read as a miles model file (def model_args() -> str): "
                         f"{why}")
    return got.stdout.split()


def _script_flags(path: str) -> list[str]:
    """MODEL_ARGS of a bash model file, read by the script reader (nothing runs)."""
    from ..reading import gate
    from ..shell import ScriptReadError, read_sourced

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such model file")
    try:  # what the model file names: inside its checkout (gate.py)
        with gate.checking(path):
            found = read_sourced([os.path.abspath(path)], '"${MODEL_ARGS[@]}"')
    except ScriptReadError as e:
        raise InputError(f"{path}: {e}") from None
    return [str(t.text) for t in found.tokens()]


def explain(c: Candidate) -> str:
    """The step-time terms of a layout, in seconds (they sum to the ranking key)."""
    assert c.cost is not None
    parts = " + ".join(f"{k} {v:.3f}" for k, v in c.cost.terms.items() if v)
    return (f"step ~{c.cost.total:.3f} s = {parts} ({c.cost.micro_batches} micro-batch(es) "
            "a step)")


def report(cands: list[Candidate], shape: Shape, model: dict[str, Any], nodes: int,
           per_node: int, gpu_name: str, top: int, fmt: str, opts: Options | None = None,
           show_terms: bool = False) -> str:
    opts = opts or Options()
    gpu = gpu_bytes(gpu_name) or 0
    shown = cands[:top]
    total = parameters(shape, model)
    if fmt == "json":
        return json.dumps({
            "cluster": {"nodes": nodes, "gpus_per_node": per_node, "gpu": gpu_name,
                        "gpu_gib": gib(gpu),
                        "reserve_gib": gib(reserve_bytes(gpu, opts.colocate)),
                        "margin": opts.margin},
            "model": {**{k: v for k, v in model.items() if k != "moe_layer_freq"},
                      "hidden": shape.hidden, "vocab": shape.vocab, "parameters": total},
            "cost_model": {"terms": list(TERMS), "hardware": HARDWARE[gpu_name].source
                           if gpu_name in HARDWARE else None},
            "layouts_valid": len(cands),
            "layouts": [c.as_dict(gpu) for c in shown]}, indent=2)
    lines = [f"{total:,} parameters; {len(cands)} layout(s) fit {nodes} x {per_node} "
             f"{gpu_name} ({gib(gpu):g} GiB a GPU, {opts.margin:.0%} kept free, "
             f"{gib(reserve_bytes(gpu, opts.colocate)):g} GiB reserved); "
             f"fastest {len(shown)}:"]
    for i, c in enumerate(shown, 1):
        t = c.topo.layout
        where = ", ".join(w for w, ok in (("tp in node", c.tp_in_node),
                                          ("ep in node", c.ep_in_node)) if ok) or "crosses nodes"
        opt = "".join(w for w, on in ((", recompute", c.recompute),
                                      (", optimizer offload", c.offload),
                                      (", DeepEP", c.deepep)) if on)
        step = f"~{c.cost.total:.2f} s a step, " if c.cost else ""
        lines.append(f"{i:2}. tp {t.tp} pp {t.pp} cp {t.cp} ep {t.ep} etp {t.etp}"
                     + (f" vpp {c.topo.stages.chunks}" if c.topo.stages.chunks > 1 else "")
                     + f" (dp {c.topo.dp}, edp {c.topo.edp}{opt}): {step}"
                     f"{c.total / GIB:.1f} GiB a rank ({c.static / GIB:.1f} static), "
                     f"{1 - c.total / gpu:.0%} free; {where}")
        if show_terms and c.cost:
            lines.append("    " + explain(c))
        lines.append("    " + " ".join(c.flags))
    if shown and shown[0].rollout:
        r = shown[0].rollout
        lines.append(f"rollout (colocated): engines of {r.engine_size} GPU(s), "
                     f"--sglang-mem-fraction-static {r.fraction:g}: bf16 weights "
                     f"{gib(r.weights):g} GiB a GPU, "
                     f"{r.kv_tokens if r.kv_tokens is not None else '?'} KV tokens a GPU")
    if not cands:
        lines.append("none fits: more nodes, a larger GPU (--gpu), fewer tokens a micro-batch "
                     "(--max-tokens-per-gpu) or a smaller --margin")
    return "\n".join(lines)


def gpu_name(name: str | None) -> str:
    name = (name or "H100").upper()
    if name not in GPUS:
        raise InputError(f"--gpu {name}: not a GPU modelled; one of {', '.join(GPUS)}")
    return name
