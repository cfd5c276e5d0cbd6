"""Megatron-core rank groups from the Topology, checked against what megatron-core built.

`init_and_verify` is what a train actor calls before any training: it starts
torch.distributed (gloo on CPU, NCCL with CUDA), runs megatron-core
`initialize_model_parallel(**megatron_args(topo))`, and compares every group megatron-core
built with the Topology's `rank_groups`. A difference stops the job with both sides shown,
because a silent mismatch would mean experts, replay rows and weight sync disagree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from miles_topology import Topology
from miles_topology.model.topology import megatron_args

GROUPS: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    "tp": ("get_tensor_model_parallel_group", {}, "tp", False),
    "pp": ("get_pipeline_model_parallel_group", {}, "pp", False),
    "dp": ("get_data_parallel_group", {}, "dp", False),
    "dp-cp": ("get_data_parallel_group", {"with_context_parallel": True}, "dp-cp", False),
    "cp": ("get_context_parallel_group", {}, "cp", False),
    "mp": ("get_model_parallel_group", {}, "tp-pp", False),
    "tp-cp": ("get_tensor_and_context_parallel_group", {}, "tp-cp", False),
    "tp-dp-cp": ("get_tensor_and_data_parallel_group", {"with_context_parallel": True},
                 "tp-dp-cp", False),
    "ep": ("get_expert_model_parallel_group", {}, "ep", True),
    "etp": ("get_expert_tensor_parallel_group", {}, "tp", True),
    "etp-ep": ("get_expert_tensor_and_model_parallel_group", {}, "tp-ep", True),
    "etp-ep-pp": ("get_expert_tensor_model_pipeline_parallel_group", {}, "tp-ep-pp", True),
    "edp": ("get_expert_data_parallel_group", {}, "dp", True),
}


class GroupMismatch(RuntimeError):
    """megatron-core built groups that differ from the Topology's."""


def expected(topo: Topology, rank: int) -> dict[str, list[int]]:
    """The group holding `rank` for every name in GROUPS, as the Topology derives it."""
    out = {}
    for name, (_, _, token, expert) in GROUPS.items():
        out[name] = next(g for g in topo.rank_groups(token, expert=expert) if rank in g)
    return out


def built() -> dict[str, list[int]]:
    """The groups megatron-core's parallel_state holds for this process (global ranks)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    out = {}
    for name, (getter, kwargs, _, _) in GROUPS.items():
        group = getattr(ps, getter)(**kwargs)
        if isinstance(group, list):  # pp with a separate comm backend: same ranks twice
            group = group[0]
        out[name] = list(dist.get_process_group_ranks(group))
    return out


def compare(topo: Topology, rank: int, got: Mapping[str, list[int]]) -> list[str]:
    """One line per group where megatron-core and the Topology differ (empty when equal)."""
    want = expected(topo, rank)
    return [
        f"rank {rank} {name} group: megatron-core {list(got[name])} != Topology {want[name]} "
        f"({'expert' if GROUPS[name][3] else 'dense'} grid, token {GROUPS[name][2]!r})"
        for name in GROUPS
        if list(got[name]) != want[name]
    ]


def verify(topo: Topology, rank: int) -> dict[str, list[int]]:
    """Raise GroupMismatch unless every group megatron-core built equals the Topology's."""
    got = built()
    diff = compare(topo, rank, got)
    if diff:
        raise GroupMismatch(
            f"megatron-core groups differ from the Topology ({megatron_args(topo)}):\n  "
            + "\n  ".join(diff)
        )
    return got


def init(topo: Topology, rank: int, addr: str | None = None, port: int | str | None = None,
         backend: str | None = None, timeout_s: float = 300.0) -> None:
    """torch.distributed + megatron-core parallel_state for train rank `rank` of `topo`.

    Rendezvous at tcp://addr:port (defaults: MASTER_ADDR / MASTER_PORT, which the Ray
    placement sets from the Topology). The device is the one the placement made visible.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    addr = addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = port or os.environ["MASTER_PORT"]
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        # one visible device (the Topology's GPU) -> cuda:0; otherwise the node-local index
        n = torch.cuda.device_count()
        torch.cuda.set_device(0 if n == 1 else int(os.environ.get("LOCAL_RANK", 0)))
    if addr in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=topo.world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    ps.initialize_model_parallel(
        **megatron_args(topo), distributed_timeout_minutes=max(1, int(timeout_s // 60))
    )


def init_and_verify(topo: Topology, rank: int, **kw: Any) -> dict[str, list[int]]:
    """`init` then `verify`; returns this rank's groups. Call before any training."""
    init(topo, rank, **kw)
    return verify(topo, rank)


def teardown() -> None:
    """Undo `init` so the process can join another topology (tests reuse actors)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
