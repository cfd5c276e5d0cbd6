"""`miles-topology plan`: the layouts a model can train with on a cluster, best first.

Every candidate (tp over the divisors of a node's GPUs, pp, ep over the expert count, etp 1
or tp) is built as a Topology, so each passes every check; its memory is the estimate of
memory.py. Layouts where a rank's weights, grads and optimizer state, or its estimate with
activations, pass the GPU are dropped. The rest are ranked by keeping the tp and ep groups
inside a node (their all-reduce / all-to-all off the network), then by memory headroom.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError, TopologyError
from .flags import parse_flags
from .memory import (
    GIB,
    Precision,
    Run,
    Shape,
    gib,
    gpu_bytes,
    layout_of,
    read_hf_config,
    shape_from_flags,
    train_memory,
)
from .model import Topology
from .parts import flag_of
from .pylaunch.cluster import GPUS

MODEL_FIELDS = ("layers", "heads", "query_groups", "experts", "topk", "moe_layer_freq",
                "mtp_layers")


@dataclass
class Candidate:
    topo: Topology
    static: int
    total: int
    tp_in_node: bool
    ep_in_node: bool
    flags: list[str] = field(default_factory=list)

    def as_dict(self, gpu: int) -> dict[str, Any]:
        t = self.topo.layout
        return {"tp": t.tp, "pp": t.pp, "ep": t.ep, "etp": t.etp, "dp": t.dp, "edp": t.edp,
                "last_stage_layers": t.last_stage_layers, "static_gib": gib(self.static),
                "total_gib": gib(self.total), "headroom": round(1 - self.total / gpu, 3),
                "tp_in_node": self.tp_in_node, "ep_in_node": self.ep_in_node,
                "flags": self.flags}


# The most GPUs plan searches: each candidate layout is built and placed rank by rank.
MAX_WORLD = 1 << 15


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def _in_node(topo: Topology, token: str, expert: bool) -> bool:
    """Whether the first group of `token` sits on one node (groups are translates)."""
    group = topo.rank_groups(token, expert=expert)[0]
    return len({topo.placement(r)[0] for r in group}) == 1


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
    if topo.model.experts:
        out += [flag_of("ep"), str(lay.ep), flag_of("etp"), str(lay.etp)]
    return out


def candidates(model: dict[str, Any], nodes: int, per_node: int) -> list[Topology]:
    """Every valid Topology of the model on nodes x per_node GPUs (cp 1, no virtual stages)."""
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
            for ep in _divisors(experts, world // pp) if experts else [1]:
                for etp in sorted({1, tp}) if experts else [tp]:
                    try:
                        out.append(Topology(
                            nodes=nodes, gpus_per_node=per_node, node_gpus=per_node, tp=tp,
                            sp=tp > 1, pp=pp, last_stage_layers=last, ep=ep, etp=etp,
                            colocate=True, engine_size=per_node, **model))
                    except TopologyError:
                        continue
    return out


def plan(shape: Shape, model: dict[str, Any], nodes: int, per_node: int, gpu: int,
         prec: Precision | None = None, run: Run | None = None) -> list[Candidate]:
    """The layouts that fit, best first (see the module docstring)."""
    prec, run = prec or Precision(), run or Run()
    out = []
    for topo in candidates(model, nodes, per_node):
        est = train_memory(shape, layout_of(topo), prec, run)
        static = max(m.static for m in est.stages)
        total = max(m.total for m in est.stages)
        if static > gpu or total > gpu:
            continue
        out.append(Candidate(topo, static, total, _in_node(topo, "tp", False),
                             not topo.model.experts or _in_node(topo, "ep", True),
                             flags_of(topo)))
    out.sort(key=lambda c: (not c.tp_in_node, not c.ep_in_node, c.total, c.topo.world_size))
    return out


def read_model(inputs: Sequence[str], flags: list[str] | None) -> tuple[Shape, dict[str, Any]]:
    """The model from an HF config.json, a model script (bash: MODEL_ARGS=(...)), or flags."""
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
        flags = _script_flags(path)
    shape = shape_from_flags(flags)
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


def _script_flags(path: str) -> list[str]:
    """MODEL_ARGS of a bash model file, read by the script reader (nothing runs)."""
    from .shell import ScriptReadError, read_script

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such model file")
    with tempfile.TemporaryDirectory() as tmp:
        launch = os.path.join(tmp, "plan.sh")
        with open(launch, "w") as f:
            f.write(f'source "{os.path.abspath(path)}"\npython3 train.py "${{MODEL_ARGS[@]}}"\n')
        try:
            found = read_script(launch, {})
        except ScriptReadError as e:
            raise InputError(f"{path}: {e}") from None
    return [str(t.text) for t in found.tokens()]


def report(cands: list[Candidate], shape: Shape, model: dict[str, Any], nodes: int,
           per_node: int, gpu_name: str, top: int, fmt: str) -> str:
    gpu = gpu_bytes(gpu_name) or 0
    shown = cands[:top]
    if fmt == "json":
        return json.dumps({
            "cluster": {"nodes": nodes, "gpus_per_node": per_node, "gpu": gpu_name,
                        "gpu_gib": gib(gpu)},
            "model": {**{k: v for k, v in model.items() if k != "moe_layer_freq"},
                      "hidden": shape.hidden, "vocab": shape.vocab},
            "layouts_valid": len(cands),
            "layouts": [c.as_dict(gpu) for c in shown]}, indent=2)
    lines = [f"{len(cands)} layout(s) fit {nodes} x {per_node} {gpu_name} "
             f"({gib(gpu):g} GiB a GPU); best {len(shown)}:"]
    for i, c in enumerate(shown, 1):
        t = c.topo.layout
        where = ", ".join(w for w, ok in (("tp in node", c.tp_in_node),
                                          ("ep in node", c.ep_in_node)) if ok) or "crosses nodes"
        lines.append(f"{i:2}. tp {t.tp} pp {t.pp} ep {t.ep} etp {t.etp} (dp {t.dp}, edp {t.edp})"
                     f": {c.total / GIB:.1f} GiB a rank ({c.static / GIB:.1f} static), "
                     f"{1 - c.total / gpu:.0%} headroom; {where}")
        lines.append("    " + " ".join(c.flags))
    if not cands:
        lines.append("none fits: more nodes, a larger GPU (--gpu), or optimizer offload "
                     "(--optimizer-cpu-offload)")
    return "\n".join(lines)


def gpu_name(name: str | None) -> str:
    name = (name or "H100").upper()
    if name not in GPUS:
        raise InputError(f"--gpu {name}: not a GPU modelled; one of {', '.join(GPUS)}")
    return name
