"""Differentiable gloo collectives for the trainer: all-to-all, gather, sum-scatter.

gloo on this torch supports all_to_all_single with uneven splits, all_gather and
all_reduce on CPU tensors, empty ones included, which is all the MoE dispatch and the
sequence/context-parallel gathers need. Sizes that every rank can derive from the replay
plan are passed in, not exchanged; only data-dependent counts (tokens per expert owner)
travel.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.autograd import Function


def size(group) -> int:
    return 1 if group is None else dist.get_world_size(group)


def counts(send: list[int], group) -> list[int]:
    """Exchange per-destination counts: returns how many rows arrive from each member."""
    if size(group) == 1:
        return list(send)
    out = torch.empty(len(send), dtype=torch.int64)
    dist.all_to_all_single(out, torch.tensor(send, dtype=torch.int64), group=group)
    return out.tolist()


def sizes(n: int, group) -> list[int]:
    """Every member's row count (data-dependent sizes, e.g. tokens received per ETP rank)."""
    if size(group) == 1:
        return [n]
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(size(group))]
    dist.all_gather(out, torch.tensor([n], dtype=torch.int64), group=group)
    return [int(t) for t in out]


def _a2a(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    out = x.new_empty((sum(recv), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
    return out


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.args = (send, recv, group)
        return _a2a(x, send, recv, group)

    @staticmethod
    def backward(ctx, g):
        send, recv, group = ctx.args
        return _a2a(g, recv, send, group), None, None, None


def all_to_all(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    """Rows x[sum(send[:i]):sum(send[:i+1])] go to member i; differentiable."""
    if size(group) == 1:
        return x
    if x.requires_grad:
        return _AllToAll.apply(x, send, recv, group)
    return _a2a(x, send, recv, group)


def _gather(x: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    top = max(sizes)
    pad = torch.cat([x, x.new_zeros((top - x.shape[0], *x.shape[1:]))]) if top > x.shape[0] else x
    parts = [x.new_empty((top, *x.shape[1:])) for _ in sizes]
    dist.all_gather(parts, pad.contiguous(), group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


def _own(full: torch.Tensor, sizes: list[int], me: int) -> torch.Tensor:
    start = sum(sizes[:me])
    return full[start : start + sizes[me]]


class _Gather(Function):
    @staticmethod
    def forward(ctx, x, sizes, group):
        ctx.args = (sizes, group)
        return _gather(x, sizes, group)

    @staticmethod
    def backward(ctx, g):
        # Every member used the gathered rows; the rows' gradient is the sum of their uses.
        sizes, group = ctx.args
        g = g.contiguous().clone()
        dist.all_reduce(g, group=group)
        return _own(g, sizes, dist.get_rank(group)).clone(), None, None


def gather(x: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    """Concatenate every member's rows (member i has sizes[i]); differentiable."""
    if size(group) == 1:
        return x
    if x.requires_grad:
        return _Gather.apply(x, sizes, group)
    return _gather(x, sizes, group)


class _SumScatter(Function):
    @staticmethod
    def forward(ctx, y, sizes, group):
        ctx.args = (sizes, group)
        y = y.contiguous().clone()
        dist.all_reduce(y, group=group)
        return _own(y, sizes, dist.get_rank(group)).clone()

    @staticmethod
    def backward(ctx, g):
        sizes, group = ctx.args
        me = dist.get_rank(group)
        full = g.new_zeros((sum(sizes), *g.shape[1:]))
        start = sum(sizes[:me])
        full[start : start + sizes[me]] = g
        dist.all_reduce(full, group=group)
        return full, None, None


def sum_scatter(y: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    """Sum partial results over the group, each member keeping its own block of rows."""
    if size(group) == 1:
        return y
    if y.requires_grad:
        return _SumScatter.apply(y, sizes, group)
    y = y.contiguous().clone()
    dist.all_reduce(y, group=group)
    return _own(y, sizes, dist.get_rank(group)).clone()
