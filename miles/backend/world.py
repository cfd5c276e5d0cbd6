"""A train rank's gloo world: megatron parallel_state plus the groups the backend adds.

`miles.megatron.init_and_verify` starts gloo and megatron-core's parallel_state and checks
every group against `Topology.rank_groups`; the backend uses those groups as built. The
only groups added here are each engine's weight-sync sender group. Each rank is a fresh
process (forked per job), so there is never a previous world to tear down.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from megatron.core import parallel_state as ps

from miles.megatron import init_and_verify
from miles_topology import Topology


@dataclass
class World:
    tpcp: object  # dense tp-cp: the rows a sequence's tokens are spread over (SP x CP)
    replica: object  # dense tp-cp-dp: every holder of this stage's dense weights
    ep: object
    etp: object
    edp: object
    senders: dict[int, object]  # engine -> group of its weight-sync senders (members only)


def connect(topo: Topology, rank: int, master: tuple[str, int],
            senders: dict[int, tuple[int, ...]]) -> World:
    """Join the gloo world at `master` (host, port); build the sender groups."""
    init_and_verify(topo, rank, addr=master[0], port=master[1])
    world = World(
        tpcp=ps.get_tensor_and_context_parallel_group(),
        replica=ps.get_tensor_and_data_parallel_group(with_context_parallel=True),
        ep=ps.get_expert_model_parallel_group(),
        etp=ps.get_expert_tensor_parallel_group(),
        edp=ps.get_expert_data_parallel_group(),
        senders={},
    )
    for engine, members in sorted(senders.items()):  # every rank creates every group, in order
        group = dist.new_group(list(members))
        if rank in members:
            world.senders[engine] = group
    return world
