"""What the real stack sets or changes without saying so: an implied expert TP, the rollout
GPUs --colocate overwrites, TP groups that cross nodes (warnings, after the errors of the
grid, the model shape, the engines and the batch).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from ..errors import Problem
from ..topology import Topology
from .base import F, _found, _fw


@rule(
    source="Megatron-LM training/arguments.py validate_args (etp = tp when not given)",
    codes={
        "etp-implied": ("warning", "expert TP not given and tp > 1, so Megatron uses etp = tp",
            "--tensor-model-parallel-size 6 --num-experts 4"),
    },
)
def etp_stated(topo: Topology) -> Iterator[Problem]:
    """Megatron-LM validate_args sets expert_tensor_parallel_size = tp when not given."""
    if topo.layout.etp_implied and topo.layout.tp > 1 and topo.model.is_moe:
        yield _found(
            "etp-implied",
            f"{F.etp} not given and tp = {topo.layout.tp}, so Megatron uses "
            f"etp = tp = {topo.layout.tp}: each expert is split over {topo.layout.tp} GPUs.",
            f"state it: {F.etp} {topo.layout.tp} to keep this, or "
            f"{F.etp} 1 for whole experts per GPU",
            "etp", "tp",
        )


@rule(
    source="miles utils/arguments.py miles_validate_args; ray/placement_group.py "
           "_get_placement_group_layout",
    codes={
        "colocate-ignores-rollout-gpus": (
            "warning", f"`{F.rollout_gpus}` given with `{F.colocate}`",
                "--colocate --rollout-num-gpus 3"),
        "no-rollout-gpus": ("warning", f"neither `{F.colocate}` nor `{F.rollout_gpus}`",
            "--actor-num-nodes 1"),
    },
)
def rollout_gpus_given(topo: Topology) -> Iterator[Problem]:
    """colocate: miles_validate_args overwrites rollout_num_gpus with the actor's GPUs (logged at
    info; miles 31f1ca9 utils/arguments.py:3312); slime keeps a given one (slime 624b824
    utils/arguments.py:1951), so a slime launch is not warned.
    No rollout GPUs: miles leaves rollout_num_gpus None, and placement_group.py
    _get_placement_group_layout then adds None (a crash on a real launch; a warning here, as a
    Topology may describe the trainer only); slime 624b824 the same (utils/arguments.py:1951
    fills it only under --colocate; ray/placement_group.py:117 adds it)."""
    ro = topo.rollout
    actor = topo.layout.actor_gpus
    if ro.colocate and ro.rollout_gpus is not None and ro.rollout_gpus != actor \
            and topo.layout.framework == "miles":
        yield _found(
            "colocate-ignores-rollout-gpus",
            f"{F.rollout_gpus} {ro.rollout_gpus} is ignored under {F.colocate}: engines use "
            f"the actor's {actor} GPUs.",
            f"remove {F.rollout_gpus}, or drop {F.colocate} to give rollout its own GPUs",
            "rollout_gpus", "colocate",
        )
    if not ro.colocate and not ro.rollout_external and not ro.train_only \
            and ro.rollout_gpus is None:
        yield _found(
            "no-rollout-gpus",
            f"neither {F.colocate} nor {F.rollout_gpus} is given, so no rollout engine is placed "
            f"here; {_fw(topo)} itself leaves rollout_num_gpus unset and fails sizing its "
            f"placement group unless {F.train_only} or external engines are used.",
            f"add {F.colocate}, or {F.rollout_gpus} N for separate rollout GPUs",
            "rollout_gpus", "colocate",
        )


@rule(
    source="none upstream: a performance warning (miles ray/actor_group.py: rank r, bundle r)",
    codes={
        "tp-group-crosses-nodes": ("warning", "a TP (or ETP) group spans more than one node",
            "--actor-num-nodes 2 --actor-num-gpus-per-node 1 --tensor-model-parallel-size 2"),
    },
)
def groups_within_nodes(topo: Topology) -> Iterator[Problem]:
    """TP groups are runs of tp consecutive ranks (tp is the fastest axis in every order), and
    rank r sits at position r of the placement group: decided by arithmetic, not by groups.
    Nothing upstream refuses it: a performance warning (TP traffic then crosses the network)."""
    lay = topo.layout
    if topo.world_size % lay.dense_model_size or topo.world_size % lay.expert_model_size:
        return
    node = lay.node_gpus_used
    for name, size, expert in (("TP", lay.tp, False), ("ETP", lay.etp, True)):
        if size <= 1:
            continue
        if size > node:
            spans = -(-size // node)
        elif node % size and ((node - 1) // size + 1) * size <= lay.actor_gpus:
            spans = 2  # the group holding the node's last GPU runs into the next node
        else:
            continue
        yield _found(
            "tp-group-crosses-nodes",
            f"a {name} group of {size} ranks spans {spans} nodes of {node} GPUs; {name} "
            "traffic then crosses the network.",
            f"keep {name} <= GPUs per node ({node}) and a divisor of it",
            "etp" if expert else "tp", "gpus_per_node",
        )
