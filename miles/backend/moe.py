"""One MoE layer on a train rank: megatron-core router replay, all-to-all dispatch, ETP.

Routing goes through megatron-core's `topk_routing_with_score_function` with a
`RouterReplay` per layer (what `moe_enable_routing_replay` builds), so replay is the
library's own code path: REPLAY_FORWARD for the old-policy and training forwards,
REPLAY_BACKWARD when the layer is recomputed in backward (`recomputed`). Each call logs
the experts the router actually selected, so route agreement is measured on what was
used, not on what was shipped. A replay chunk holding a -1 id routes live, as miles' replay
hook did (that is why pad rows must never be -1); `replay=False` (`--no-replay`) routes
every token live, in the trainer's float64.

Tokens travel to the EP rank owning their expert (EP rank e owns [e*E/ep, (e+1)*E/ep),
`Topology.local_experts`) by all-to-all over the expert-parallel group; with ETP > 1 the
received tokens are gathered over the expert-tensor group, each member applies its slice
of the FFN and the partial sums are reduced back (megatron's alltoall dispatcher).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from megatron.core.transformer.moe.router_replay import RouterReplay, RouterReplayAction
from torch.autograd import Function

from . import comm
from .policy import ffn, route

FORWARD = RouterReplayAction.REPLAY_FORWARD
BACKWARD = RouterReplayAction.REPLAY_BACKWARD


@dataclass
class Trace:
    """Experts each router used, per call: (micro-batch tag, layer, action, ids [n, topk])."""

    tag: object = None
    calls: list = field(default_factory=list)


@dataclass
class Groups:
    """The expert-side process groups of one rank (from megatron parallel_state)."""

    ep: object
    etp: object


class MoELayer:
    def __init__(self, layer, router, w1, w2, owner, held, topk, groups: Groups, trace: Trace,
                 replay: bool = True):
        """owner: EP rank of each global expert id (from Topology.local_experts); held: the
        expert ids whose weights w1/w2 hold, in order (Topology.local_experts)."""
        self.layer, self.router, self.w1, self.w2 = layer, router, w1, w2
        self.owner = torch.tensor(owner)
        self.slot = torch.full((len(owner),), -1, dtype=torch.long)  # expert id -> row of w1
        self.slot[list(held)] = torch.arange(len(held))
        self.topk = topk
        self.groups, self.trace = groups, trace
        self.replay = RouterReplay()  # registers in RouterReplay.global_router_replay_instances
        self.replaying = replay

    @property
    def params(self) -> tuple[torch.Tensor, ...]:
        return self.router, self.w1, self.w2

    def __call__(self, x: torch.Tensor, action: RouterReplayAction) -> torch.Tensor:
        self.replay.set_router_replay_action(action)
        probs, used = route(x @ self.router, self.topk, self._replay(action))
        self.trace.calls.append((self.trace.tag, self.layer, action, _ids(used, self.topk)))
        tok, exp = used.nonzero(as_tuple=True)
        owner = self.owner[exp]
        order = torch.argsort(owner, stable=True)
        tok, exp, owner = tok[order], exp[order], owner[order]
        weight = probs[tok, exp]
        ep = self.groups.ep
        send = torch.bincount(owner, minlength=comm.size(ep)).tolist()
        recv = comm.counts(send, ep)
        xs = comm.all_to_all(x[tok], send, recv, ep)
        es = comm.all_to_all(exp, send, recv, ep)
        etp = self.groups.etp
        sizes = comm.sizes(xs.shape[0], etp)
        xs, es = comm.gather(xs, sizes, etp), comm.gather(es, sizes, etp)
        local = self.slot[es]
        y = xs.new_zeros(xs.shape)
        for j in range(self.w1.shape[0]):
            idx = (local == j).nonzero().squeeze(1)
            y = y.index_add(0, idx, ffn(xs[idx], self.w1[j], self.w2[j]))
        y = comm.sum_scatter(y, sizes, etp)
        back = comm.all_to_all(y, recv, send, ep)
        return x.new_zeros(x.shape).index_add(0, tok, back * weight[:, None])


    def _replay(self, action: RouterReplayAction) -> RouterReplay | None:
        """The replay to route with, or None (live routing): replay off, or -1 rows."""
        r = self.replay
        if action == BACKWARD:
            target = r.replay_backward_list[0] if r.replay_backward_list else None
        else:
            target = r.target_topk_idx
        if self.replaying and target is not None and not bool((target < 0).any()):
            return r
        if action == BACKWARD and r.replay_backward_list:
            r.replay_backward_list.pop(0)  # keep the queue aligned with the forwards
        return None


def _ids(used: torch.Tensor, topk: int) -> torch.Tensor:
    """[n, E] routing map -> [n, topk] selected expert ids, ascending."""
    return used.nonzero()[:, 1].view(-1, topk).clone()


class _Recompute(Function):
    """Drop the layer's activations; recompute in backward, replaying the same routes."""

    @staticmethod
    def forward(ctx, layer, x, *params):
        ctx.layer = layer
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return layer(x, FORWARD)

    @staticmethod
    def backward(ctx, g):
        x, *params = ctx.saved_tensors
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            y = ctx.layer(x, BACKWARD)
        grads = torch.autograd.grad(y, [x, *params], g, allow_unused=True)
        return (None, *grads)


def recomputed(layer: MoELayer, x: torch.Tensor) -> torch.Tensor:
    return _Recompute.apply(layer, x, *layer.params)


def set_replay(rows: list[torch.Tensor]) -> None:
    """Hand each router its [n, topk] rows for the next micro-batch (router order)."""
    RouterReplay.set_replay_data(rows)


def reset_replay() -> None:
    RouterReplay.clear_global_indices()


def forget_routers() -> None:
    """Drop every registered router (a rebuilt model registers its own)."""
    RouterReplay.clear_global_router_replay_instances()


def group_ranks(group) -> list[int]:
    return [dist.get_rank()] if group is None else dist.get_process_group_ranks(group)
