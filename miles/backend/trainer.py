"""One train rank: its pipeline stage's layers, its experts, R3 replay and a GRPO update.

The rank lays out its rows exactly as its replay plan (`miles_topology.model.replay`) says: the
plan's segments name the (sample, position) of every row, so tokens, replayed routes and
log-probs line up by construction, and the mixer gathers the rows of the whole sequence
over the TP-CP group (sequence + context parallel) before taking its own slice back.
Pipeline stages run micro-batch by micro-batch, virtual stages in model order, sending
activations forward and gradients back with gloo p2p.

Dense weights are replicated on every rank of a stage (gradients summed over TP-CP-DP);
experts live only on their owners (gradients summed over expert-DP).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.distributed as dist

from miles_topology import Topology
from miles_topology.model.replay import replay_plans
from miles_topology.model.weightsync import rank_sends, sync_plan

from . import comm, moe
from .faults import Faults
from .policy import DTYPE, Spec, dense_names, expert_names, ffn, mix, weight
from .world import connect

CLIP = 0.2


@dataclass
class Rows:
    """One micro-batch as this rank holds it, and the rows of its whole TP-CP group."""

    sample: torch.Tensor  # [n] global sample id, -1 for pad rows
    pos: torch.Tensor  # [n] token position in the sample
    sizes: list[int]  # rows of each TP-CP member (gather order)
    cell: torch.Tensor  # [n] index into the [samples x length] grid, -1 for pads
    cells_all: torch.Tensor  # same for the gathered rows
    grid: tuple[int, int]

    @property
    def n(self) -> int:
        return self.sample.shape[0]


def _expand(segments) -> tuple[list[int], list[int]]:
    sample, pos = [], []
    for seg in segments:
        sample += [seg.sample] * seg.rows
        pos += list(range(seg.rows)) if seg.pad else list(range(seg.start, seg.stop))
    return sample, pos


def layout(mbs, members: list[int], me: int, lengths: dict[int, int]) -> Rows:
    """Rows of micro-batch `mbs[member]` for every TP-CP member (same samples, own slices)."""
    samples = mbs[me].samples
    slot = {s: i for i, s in enumerate(samples)}
    width = max([lengths[s] for s in samples], default=1)

    def cells(sample, pos):
        return torch.tensor(
            [slot[s] * width + p if s >= 0 else -1 for s, p in zip(sample, pos)], dtype=torch.long
        )

    every = [_expand(mbs[m].segments) for m in members]
    mine = every[members.index(me)]
    return Rows(
        sample=torch.tensor(mine[0], dtype=torch.long),
        pos=torch.tensor(mine[1], dtype=torch.long),
        sizes=[len(s) for s, _ in every],
        cell=cells(*mine),
        cells_all=torch.cat([cells(*e) for e in every]),
        grid=(len(samples), width),
    )


class Trainer:
    def __init__(self, topo: Topology, rank: int, seed: int, master: tuple[str, int], engines: list,
                 faults: Faults, lr: float = 0.02, replay: bool = True):
        torch.set_num_threads(1)
        self.topo, self.rank, self.seed, self.faults = topo, rank, seed, faults
        self.spec = spec = Spec.of(topo)
        self.plan = sync_plan(topo)
        self.sends = rank_sends(self.plan, rank)
        self.engines = engines
        sync_groups = {s.engine: s.senders for s in self.plan}
        if faults.race:  # the pre-fix protocol's blocks of engine_size consecutive ranks
            size = topo.rollout.engine_size
            sync_groups = {-1 - b: tuple(range(b * size, (b + 1) * size))
                           for b in range(topo.world_size // size)}
        self.world = connect(topo, rank, master, sync_groups)
        c, x = topo.grid("dense").coord(rank), topo.grid("expert").coord(rank)
        self.c, self.x = c, x
        self.stages = [topo.stage_layers(c["pp"], v) for v in range(topo.stages.chunks)]
        layers = topo.stages.pipeline(c["pp"])
        self.dense = {n: weight(spec, n, seed).requires_grad_() for n in dense_names(spec, layers)}
        # Experts held: the Topology's block, or the old rank % gpus_per_node rule as a fault.
        self.owned = faults.owned(topo, rank)
        ids = list(self.owned)

        def shard(name: str, dim: int) -> torch.Tensor:  # this rank's ETP slice of the FFN
            full = weight(spec, name, seed)[ids]
            return torch.tensor_split(full, topo.layout.etp, dim)[x["etp"]].clone().requires_grad_()

        self.trace = moe.Trace()
        groups = moe.Groups(self.world.ep, self.world.etp)
        self.moe: dict[int, moe.MoELayer] = {}
        ep_group = next(g for g in topo.rank_groups("ep", expert=True) if rank in g)
        owner = dict(sorted((x, i) for i, r in enumerate(ep_group) for x in topo.local_experts(r)))
        self.experts: dict[str, torch.Tensor] = {}
        for layer in topo.stages.replay(c["pp"]):  # router order = RouterReplay order
            n1, n2 = expert_names(layer)
            self.experts[n1], self.experts[n2] = shard(n1, 2), shard(n2, 1)
            self.moe[layer] = moe.MoELayer(
                layer, self.dense[f"{layer}.router"], self.experts[n1], self.experts[n2],
                list(owner.values()), topo.local_experts(rank), spec.topk, groups, self.trace,
                replay=replay and faults.replay,
            )
        params = list(self.dense.values()) + list(self.experts.values())
        self.opt = torch.optim.Adam(params, lr=lr)

    # ---- pipeline geometry ------------------------------------------------------------

    def _vstage(self, v: int) -> int:
        return v * self.topo.layout.pp + self.c["pp"]

    def _peer(self, vstage: int) -> int:
        c = dict(self.c)
        c["pp"] = vstage % self.topo.layout.pp
        return self.topo.grid("dense").rank(**{k: c[k] for k in ("tp", "cp", "dp", "pp")})

    def _is_first(self, v: int) -> bool:
        return self._vstage(v) == 0

    def _is_last(self, v: int) -> bool:
        return self._vstage(v) == self.topo.layout.pp * self.topo.stages.chunks - 1

    # ---- model ------------------------------------------------------------------------

    def _embed(self, rows: Rows, tokens: list[tuple[int, ...]]) -> torch.Tensor:
        real = rows.sample >= 0
        pairs = zip(rows.sample.tolist(), rows.pos.tolist())
        tok = torch.tensor([tokens[s][p] if s >= 0 else 0 for s, p in pairs], dtype=torch.long)
        h = self.dense["embed"][tok] + self.dense["pos"][torch.where(real, rows.pos, 0)]
        return h * real[:, None].to(DTYPE)

    def _mean(self, h: torch.Tensor, rows: Rows) -> torch.Tensor:
        """Causal mean over each row's sample prefix, across the whole TP-CP group."""
        full = comm.gather(h, rows.sizes, self.world.tpcp)
        ns, width = rows.grid
        keep = rows.cells_all >= 0
        grid = full.new_zeros((ns * width, h.shape[1])).index_add(
            0, rows.cells_all[keep], full[keep]
        )
        prefix = grid.view(ns, width, -1).cumsum(1).view(ns * width, -1)
        real = rows.cell >= 0
        out = prefix[torch.where(real, rows.cell, 0)] / (rows.pos + 1)[:, None].to(DTYPE)
        return out * real[:, None].to(DTYPE)

    def _chunk(self, v: int, h: torch.Tensor, rows: Rows, grad: bool) -> torch.Tensor:
        for layer in self.stages[v]:
            h = h + mix(self._mean(h, rows), self.dense[f"{layer}.mix"])
            if self.spec.moe[layer]:
                m = self.moe[layer]
                h = h + (moe.recomputed(m, h) if grad else m(h, moe.FORWARD))
            else:
                h = h + ffn(h, self.dense[f"{layer}.d1"], self.dense[f"{layer}.d2"])
        return h

    def _logprobs(self, h: torch.Tensor, rows: Rows, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-prob of each row's next token; mask of rows whose next token is a response token."""
        nxt, mask = [], []
        for s, p in zip(rows.sample.tolist(), rows.pos.tolist()):
            ok = s >= 0 and batch.prompt_lens[s] <= p + 1 < len(batch.tokens[s])
            nxt.append(batch.tokens[s][p + 1] if ok else 0)
            mask.append(ok)
        lp = torch.log_softmax(h @ self.dense["head"], dim=-1)
        return lp.gather(1, torch.tensor(nxt, dtype=torch.long)[:, None])[:, 0], torch.tensor(mask)

    # ---- one micro-batch through the pipeline -------------------------------------------

    def _run(self, rows: Rows, batch, train: bool, backward=None):
        """Forward (and backward) of one micro-batch; returns (logprobs, mask) on the last stage."""
        ins, outs, result = [], [], None
        for v in range(self.topo.stages.chunks):
            if self._is_first(v):
                h = self._embed(rows, batch.tokens)
            else:
                h = torch.empty((rows.n, self.spec.hidden), dtype=DTYPE)
                dist.recv(h, self._peer(self._vstage(v) - 1))
                h.requires_grad_(train)
            ins.append(h)
            with torch.set_grad_enabled(train):
                y = self._chunk(v, h, rows, train)
            outs.append(y)
            if self._is_last(v):
                with torch.set_grad_enabled(train):
                    result = self._logprobs(y, rows, batch)
            else:
                dist.send(y.detach().contiguous(), self._peer(self._vstage(v) + 1))
        if not train:
            return result
        for v in reversed(range(self.topo.stages.chunks)):
            if self._is_last(v):
                torch.autograd.backward(backward(*result))
            else:
                g = torch.empty((rows.n, self.spec.hidden), dtype=DTYPE)
                dist.recv(g, self._peer(self._vstage(v) + 1))
                torch.autograd.backward(outs[v], g)
            if not self._is_first(v):
                dist.send(ins[v].grad.contiguous(), self._peer(self._vstage(v) - 1))
        return result

    # ---- a training step on one rollout ---------------------------------------------------

    def train(self, batch, shipment) -> dict:
        """Old-policy forward, then per optimizer step: forward, backward, grad sync, update.

        `shipment` is this rank's packed replay rows (`miles.replay.Shipment`).
        """
        work = self._work(batch, shipment)
        out = {"old": [], "new": [], "routes": [], "loss": 0.0}
        old = []  # old-policy forward (no grad), replaying the rollout's routes
        for i, (_, rows, rep) in enumerate(work):
            self.trace.tag = ("old", i)
            moe.set_replay(rep)
            r = self._run(rows, batch, train=False)
            moe.reset_replay()
            old.append(r)
            if r is not None:
                out["old"].append(_pick(rows, *r))
        steps = sorted({step for step, _, _ in work})
        for step in steps:  # one optimizer step per global batch
            for i, (s, rows, rep) in enumerate(work):
                if s != step:
                    continue
                self.trace.tag = ("train", i)
                adv = torch.tensor([batch.adv[x] if x >= 0 else 0.0 for x in rows.sample.tolist()],
                                   dtype=DTYPE)
                loss = partial(grpo_loss, adv=adv, old=old[i][0] if old[i] else None,
                               norm=batch.step_tokens[step])
                moe.set_replay(rep)
                r = self._run(rows, batch, train=True, backward=loss)
                moe.reset_replay()
                if r is not None:
                    if step == steps[0]:  # weights still identical to the engines'
                        out["new"].append(_pick(rows, *r))
                    out["loss"] += float(loss(r[0].detach(), r[1]))
            self._sync_grads()
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
        out["routes"] = self._routes(work, batch)
        self.trace.calls.clear()
        return out

    def score(self, batch, shipment) -> dict:
        """Forward only, replaying the rollout's routes: scores a rollout sampled after the
        final weight sync (nothing is trained on it)."""
        work = self._work(batch, shipment)
        out = {"old": [], "routes": []}
        for i, (_, rows, rep) in enumerate(work):
            self.trace.tag = ("old", i)
            moe.set_replay(rep)
            r = self._run(rows, batch, train=False)
            moe.reset_replay()
            if r is not None:
                out["old"].append(_pick(rows, *r))
        out["routes"] = self._routes(work, batch)
        self.trace.calls.clear()
        return out

    def _work(self, batch, shipment) -> list:
        """(optimizer step, rows, replay rows per router) of every micro-batch, in order.

        Micro-batch counts are padded to the largest over all ranks with empty ones: every
        rank must join every collective of its groups.
        """
        topo = self.topo
        lengths = {s: len(t) for s, t in enumerate(batch.tokens)}
        plans = replay_plans(topo, list(lengths.values()))
        mine = plans[self.rank]
        if len(mine.micro_batches) + 1 != len(shipment.offsets) or shipment.layers != tuple(
            self.moe
        ):
            raise RuntimeError(f"rank {self.rank}: shipment of {len(shipment.offsets) - 1} "
                               f"micro-batches for layers {shipment.layers}; plan has "
                               f"{len(mine.micro_batches)} for {tuple(self.moe)}")
        members = moe.group_ranks(self.world.tpcp)
        count: dict[int, int] = {}
        for p in plans:
            per = Counter(mb.step for mb in p.micro_batches)
            for step, n in per.items():
                count[step] = max(count.get(step, 0), n)
        work = []
        for step in sorted(count):
            idx = [i for i, mb in enumerate(mine.micro_batches) if mb.step == step]
            for j in range(count[step]):
                if j < len(idx):
                    i = idx[j]
                    mbs = {m: plans[m].micro_batches[i] for m in members}
                    rep = [self.faults.shift(shipment.router(i, k)) for k in range(len(self.moe))]
                else:
                    mbs = {m: _EmptyMB() for m in members}
                    rep = [np.zeros((0, self.spec.topk), np.int64) for _ in self.moe]
                rows = layout(mbs, members, self.rank, lengths)
                bad = [r.shape for r in rep if r.shape != (rows.n, self.spec.topk)]
                if bad:
                    raise RuntimeError(f"rank {self.rank}: replay rows {bad[0]} for "
                                       f"{rows.n} tokens")
                work.append((step, rows, [torch.from_numpy(r.astype(np.int64)) for r in rep]))
        return work

    def _routes(self, work, batch) -> list:
        """(pass, layer, action, samples, positions, ids) of the recorded rows of each call."""
        out = []
        for (kind, i), layer, action, ids in self.trace.calls:
            rows = work[i][1]
            s, p = rows.sample, rows.pos
            last = torch.tensor([len(batch.tokens[x]) - 1 if x >= 0 else 0 for x in s.tolist()])
            keep = (s >= 0) & (p < last)
            out.append((kind, layer, action.value, s[keep].numpy(), p[keep].numpy(),
                        ids[keep].numpy()))
        return out

    def _sync_grads(self) -> None:
        for params, group in ((list(self.dense.values()), self.world.replica),
                              (list(self.experts.values()), self.world.edp)):
            if not params or comm.size(group) == 1:
                continue
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat, group=group)
            i = 0
            for p in params:
                p.grad.copy_(flat[i : i + p.numel()].view_as(p))
                i += p.numel()

    # ---- weight sync ----------------------------------------------------------------

    def payload(self, shards) -> list:
        """(name, expert, dim, part, parts, tensor) entries of the shards this rank sends."""
        out = []
        for sh in shards:
            if sh.kind == "dense":
                for name in dense_names(self.spec, sh.layers):
                    t = torch.tensor_split(self.dense[name].detach(), sh.parts, 0)[sh.part]
                    out.append((name, -1, 0, sh.part, sh.parts, t.numpy().copy()))
                continue
            for layer in sh.layers:
                n1, n2 = expert_names(layer)
                # labelled with the experts this rank believes it holds (the fault's bug)
                w1, w2 = self.experts[n1].detach(), self.experts[n2].detach()
                for slot, e in enumerate(self.owned):
                    out.append((n1, e, 1, sh.part, sh.parts, w1[slot].numpy().copy()))
                    out.append((n2, e, 0, sh.part, sh.parts, w2[slot].numpy().copy()))
        return out

    def sync(self, version: int, skew_s: float = 0.0) -> None:
        """Upload to every engine this rank feeds; its first sender asks it to post-process
        once the barrier over the engine's sender group says every sender has finished."""
        if self.faults.race:
            return self._sync_prefix(version)
        for engine, shards in sorted(self.sends.items()):
            senders = self.plan[engine].senders
            if skew_s and self.rank == senders[-1] and len(senders) > 1:
                time.sleep(skew_s)  # the slow sender of this engine
            self.engines[engine].call("receive", self.rank, version, self.payload(shards),
                                      post_if_first=self.faults.early_post)
            if not self.faults.sender_barrier and not self.faults.early_post \
                    and self.rank == senders[0]:
                self._post(engine, version, after=(self.rank,))  # no barrier: only itself
        if not self.faults.sender_barrier:
            return
        for engine in sorted(self.sends):
            dist.barrier(group=self.world.senders[engine])
            if self.rank == self.plan[engine].senders[0]:  # the barrier joined every sender
                self._post(engine, version, after=self.plan[engine].senders)

    def _sync_prefix(self, version: int) -> None:
        """The fault `weight-sync-race`: miles' colocated update before the fix.

        Every rank all-gathers its stage's experts over the EP group (the export's expert
        gather), the block of engine_size consecutive ranks gathers to its first rank, which
        sends the whole model to the block's engine; rank 0 then asks every engine to
        post-process, with no barrier: engines whose block source is still busy lose it.
        (This engine is one process, so it loads the source's own copy; the block gather is
        kept for its synchronisation, which is what shapes the race.) A race: whether it
        fires depends on timing; when it fires, early_post_requests counts it.
        """
        topo = self.topo
        block = self.rank // topo.rollout.engine_size
        group = self.world.senders[-1 - block]
        src = block * topo.rollout.engine_size
        dense = [(n, -1, 0, 0, 1, self.dense[n].detach().numpy().copy())
                 for n in dense_names(self.spec, topo.stages.pipeline(self.c["pp"]))]
        buckets = [dense] + [self._gathered_experts(layer) for layer in self.moe]
        for i, bucket in enumerate(buckets):  # one update_weights_from_tensor per bucket
            out = [None] * topo.rollout.engine_size if self.rank == src else None
            if topo.rollout.engine_size > 1:
                dist.gather_object(bucket, out, dst=src, group=group)
            if self.rank == src:
                self.engines[block].call("receive", self.rank, version, bucket,
                                         last=i == len(buckets) - 1)
        if self.rank == 0:
            # ordered after its own upload only: nothing joins it with the other blocks
            for e in self.engines:
                e.call("post_process", version, 0, after=(0,))

    def _gathered_experts(self, layer: int) -> list:
        """Every expert of `layer`, all-gathered over the EP group (EP rank order is expert
        id order), as the pre-fix export gathered each expert bucket."""
        out = []
        for name in expert_names(layer):
            mine = self.experts[name].detach().contiguous()
            parts = [mine]
            if comm.size(self.world.ep) > 1:
                parts = [torch.empty_like(mine) for _ in range(comm.size(self.world.ep))]
                dist.all_gather(parts, mine, group=self.world.ep)
            every = torch.cat(parts)
            out += [(name, e, 0, 0, 1, every[e].numpy().copy())
                    for e in range(self.topo.model.experts)]
        return out

    def _post(self, engine: int, version: int, after: tuple[int, ...]) -> None:
        if not self.engines[engine].call("post_process", version, self.rank, after=after):
            raise RuntimeError(f"engine {engine} refused to post-process weights version "
                               f"{version}: senders {self.plan[engine].senders} not all done")


def grpo_loss(lp, mask, *, adv, old, norm):
    """PPO-clipped policy gradient over response tokens, normalised by the step's tokens."""
    ratio = torch.exp(lp - old)
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
    return -(surr * mask.to(DTYPE)).sum() / norm


class _EmptyMB:
    samples: tuple = ()
    segments: tuple = ()


def _pick(rows: Rows, lp: torch.Tensor, mask: torch.Tensor):
    """(sample, position of the predicted token, log-prob) of the response rows."""
    m = mask.bool()
    return rows.sample[m].numpy(), (rows.pos[m] + 1).numpy(), lp[m].detach().numpy()
