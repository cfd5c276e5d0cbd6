"""A rollout engine: serves the weights it received, samples, records routes and log-probs.

Like SGLang it starts from its own checkpoint (`ENGINE_SEED_OFFSET`: not the trainers'
initial weights, so a sync that misses a shard shows), receives shards from the train
ranks into a staging copy, and serves only what `post_process` (standing for
re-quantisation / scale swizzling) built from the staging copy. Shards that arrive after
post-processing are not served until the next one, which is exactly how an early
post-process corrupts a rollout. The engine itself refuses to post-process while any
planned sender (from `miles_topology.model.weightsync`) has not reported, unless a fault turns
the guard off.

Numerics are the engine's own, not the trainer's (`policy.engine_route`, `f32`, `bf16`):
float32 weights and activations, bf16 router logits and mixing weights. Decoding is
incremental (running prefix sums are the KV cache) and records, for every token it feeds
through the model, the top-k expert ids of every MoE layer: [tokens - 1, layers, topk]
per sample. No torch or megatron here (numpy only): an SGLang engine does not run Megatron.
(The engine's process is forked from its node's zygote, which has them imported for the
trainers; that costs the engine nothing, and this code never calls them.)
"""

from __future__ import annotations

import time

import numpy as np

from miles.rollout.routes import encode_routes
from miles_topology import Topology
from miles_topology.model.weightsync import engine_sync

from .spec import Spec, dense_names, expert_names, shape
from .task import EOS, MAX_NEW

ENGINE_SEED_OFFSET = 1  # the engines' starting checkpoint differs from the trainers' weights


class Engine:
    def __init__(self, topo: Topology, engine: int, seed: int, strict: bool = True,
                 block_source: int | None = None):
        """`block_source`: the pre-fix protocol's single sender of this engine (the fault
        `weight-sync-race`), which sends the whole model; else the Topology's plan."""
        self.topo, self.engine, self.seed, self.strict = topo, engine, seed, strict
        self.spec = Spec.of(topo)
        self.plan = engine_sync(topo, engine)
        self.block_source = block_source
        self.staging = start_checkpoint(self.spec, seed + ENGINE_SEED_OFFSET)
        self.live = {k: v.copy() for k, v in self.staging.items()}
        self.version = -1
        self.got: dict[int, set[int]] = {}
        self.log: list[tuple] = []
        self.unplanned = 0

    # ---- weight sync ----------------------------------------------------------------

    def receive(self, rank: int, version: int, payload: list, last: bool = True,
                post_if_first: bool = False) -> int:
        """Stage one upload (numpy arrays); `last` marks the sender's final bucket of this
        version. `post_if_first` (fault early-post-process): the first sender to finish
        has the engine post-process at once."""
        shards = self.plan.of(rank)
        for name, expert, dim, part, parts, t in payload:
            target = self.staging[name] if expert < 0 else self.staging[name][expert]
            np.array_split(target, parts, dim)[part][...] = t
            if expert >= 0 and self.block_source is None:
                layer = int(name.split(".")[0])
                if not any(s.kind == "expert" and layer in s.layers and expert in s.experts
                           and s.part == part for s in shards):
                    self.unplanned += 1
        if last:
            self.got.setdefault(version, set()).add(rank)
        self.log.append(("recv", version, rank, time.monotonic(), last))
        if post_if_first and last and len(self.got[version]) == 1:
            self.post_process(version, rank, after=(rank,))
        return len(payload)

    def post_process(self, version: int, by: int, after: tuple[int, ...] = ()) -> bool:
        """Build the served weights from staging, only once every planned sender reported.

        `after`: the senders whose final upload the requester is ordered after (its own, or
        those a barrier joined it with). A request not ordered after every planned sender is
        a race whether or not the uploads happened to be done in time, so the log records
        the unordered senders too: the race is seen on every run, not only when it bites
        (happens-before, as a race detector reasons, not wall-clock luck)."""
        done = self.got.get(version, set())
        if self.block_source is None:
            planned = self.plan.senders
            missing = self.plan.missing(done)
        else:
            planned = (self.block_source,)
            missing = () if self.block_source in done else (self.block_source,)
        unordered = tuple(r for r in planned if r not in after)
        self.log.append(("post", version, by, time.monotonic(), missing, unordered))
        if missing and self.strict:
            return False
        self.live = {k: v.copy() for k, v in self.staging.items()}
        self.version = version
        return True

    def report(self) -> dict:
        """Sync log, shards outside the plan, served version and a digest of served weights."""
        digest = sum(float(np.abs(v, dtype=np.float64).sum()) for v in self.live.values())
        return {"log": list(self.log), "unplanned": self.unplanned, "version": self.version,
                "digest": digest}

    # ---- rollout ----------------------------------------------------------------------

    def generate(self, samples: list[int], prompts: list[tuple[int, ...]], step: int) -> list:
        """Sample a response per prompt; returns (sample, tokens, logprobs, routes payload)."""
        spec = self.spec
        w = {k: v.astype(np.float64) for k, v in self.live.items()}  # float32 values
        # one stream per sample: a rollout does not depend on which engine served it
        gens = [np.random.default_rng(self.seed * 104_729 + step * 7_919 + s) for s in samples]
        b = len(prompts)
        toks = [list(p) for p in prompts]
        plen = [len(p) for p in prompts]
        done = [False] * b
        lps: list[list[float]] = [[] for _ in range(b)]
        rows: list[list[np.ndarray]] = [[] for _ in range(b)]
        sums = [np.zeros((b, spec.hidden)) for _ in range(spec.layers)]
        fill = np.arange(spec.topk, dtype=np.int32)
        for t in range(max(plen) + MAX_NEW - 1):
            active = [not done[i] and t < len(toks[i]) for i in range(b)]
            if not any(active):
                break
            tok = np.array([toks[i][t] if t < len(toks[i]) else 0 for i in range(b)])
            h = f32(w["embed"][tok] + w["pos"][t])
            rec = np.tile(fill, (b, spec.layers, 1))
            for layer in range(spec.layers):
                sums[layer] += h
                h = f32(h + f32(np.tanh(f32(sums[layer] / (t + 1)) @ w[f"{layer}.mix"])))
                if not spec.moe[layer]:
                    h = f32(h + f32(_ffn(h, w[f"{layer}.d1"], w[f"{layer}.d2"])))
                    continue
                ids, weights = engine_route(h @ w[f"{layer}.router"], spec.topk)
                rec[:, layer] = ids
                y = np.zeros_like(h)
                for e in range(spec.experts):
                    tok_i, slot = (ids == e).nonzero()
                    part = f32(_ffn(h[tok_i], w[f"{layer}.w1"][e], w[f"{layer}.w2"][e]))
                    np.add.at(y, tok_i, f32(part * weights[tok_i, slot][:, None]))
                h = f32(h + f32(y))
            logits = f32(h @ w["head"])
            top = logits.max(axis=1, keepdims=True)
            lp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
            for i in range(b):
                if not active[i]:
                    continue
                rows[i].append(rec[i])
                if t + 1 < plen[i]:
                    continue
                p = np.exp(lp[i])
                nxt = int(gens[i].choice(len(p), p=p / p.sum()))
                toks[i].append(nxt)
                lps[i].append(float(lp[i, nxt]))
                if nxt == EOS or len(toks[i]) >= plen[i] + MAX_NEW:
                    done[i] = True
        out = []
        for i, s in enumerate(samples):
            routes = np.stack(rows[i]) if rows[i] else np.zeros((0, spec.layers, spec.topk))
            out.append((s, tuple(toks[i]), lps[i], encode_routes(routes)))
        return out


def f32(x: np.ndarray) -> np.ndarray:
    """Round to float32, as a float32 kernel leaves its output (kept in float64)."""
    return np.asarray(x, np.float32).astype(np.float64)


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16, as a bf16 GEMM output: round-to-nearest-even on the float32 bits
    (add 0x7FFF plus the lowest kept bit, drop the low 16 bits). Finite inputs only."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) \
        & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def engine_route(logits: np.ndarray, topk: int) -> tuple[np.ndarray, np.ndarray]:
    """The engine's routing kernel: top-k of the router GEMM's bf16 output (ties to the lower
    id), softmax over the k in float32 (mixing weights). Returns (ids, weights) [n, topk]."""
    lg = bf16(logits)
    ids = np.argsort(-lg, axis=1, kind="stable")[:, :topk]
    scores = np.take_along_axis(lg, ids, axis=1).astype(np.float32)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return ids, (e / e.sum(axis=1, keepdims=True)).astype(np.float64)


def _ffn(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w1, 0.0) @ w2


def start_checkpoint(spec: Spec, seed: int) -> dict[str, np.ndarray]:
    """The engine's own starting weights (float32), unlike the trainers' initial ones."""
    rng = np.random.default_rng(seed)
    names = dense_names(spec, tuple(range(spec.layers)))
    names += [n for layer in range(spec.layers) if spec.moe[layer] for n in expert_names(layer)]
    return {n: (rng.standard_normal(shape(spec, n)) * 0.25).astype(np.float32) for n in names}
