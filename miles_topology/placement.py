"""Where every GPU of a miles job lands: miles' one packed placement group, read as miles reads it.

miles (radixark/miles, miles/ray/placement_group.py: `create_placement_groups`,
`_create_placement_group`, `sort_key`, `_get_placement_group_layout`) makes ONE placement group
of 1-GPU bundles with strategy PACK, asks an `InfoActor` in every bundle for (node IP, GPU id)
and sorts the bundles by that key: node IP numerically, then GPU id. Position i in that order is
"GPU i" here, on node i // n at GPU i % n, n = `Topology.node_gpus_used` (PACK fills whole
nodes). The actor takes positions [0, trainer GPUs); rollout engines start at `rollout_offset`
(the trainer's GPU count, 0 when colocated), so an engine may start mid-node; the PPO critic
shares the actor's positions (`ans["critic"] = ans["actor"]`); eval engines come after the
rollout engines (backends/sglang_utils/sglang_config.py `_compute_raw_sglang_config`: the "eval"
model last). Engine k of a group starts at the group's offset + k * its engine size
(ray/rollout.py `init_rollout_engines`: `reordered_gpu_ids[i * num_gpu_per_engine]` is its
`base_gpu_id`).

`Placement` is that group, built once per Topology (`Topology.placement_group`): positions to
(node, GPU) and back, the train rank on a GPU, the ranks of a node, the engine groups and
each engine's GPUs. Everything that places something (weight sync, show, the Ray plan, the
trainer) asks it. Everything is arithmetic on indices, never a walk over GPUs, so 10^30 GPUs
cost nothing.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from math import gcd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Topology


@dataclass(frozen=True)
class Group:
    """A run of engines of one size: the rollout fleet, a --sglang-config group, or eval."""

    model: str  # "default", a --sglang-config model name, or "eval"
    kind: str  # "regular", "prefill", "decode" or "placeholder" (reserves GPUs, no engine)
    start: int  # first position in the placement group
    gpus: int
    engine_size: int
    first_engine: int  # global index of its first engine

    @property
    def engines(self) -> int:
        return 0 if self.kind == "placeholder" else self.gpus // self.engine_size


def layout(topo: Topology) -> tuple[int, int]:
    """(bundles in the placement group, rollout offset): `_get_placement_group_layout`."""
    trainer = 0 if topo.rollout_only else topo.world_size
    rollout = topo.rollout_gpus_used + topo.eval_gpus
    if topo.train_only:
        return trainer + topo.eval_gpus, trainer
    if topo.rollout_external:
        return trainer, trainer
    if topo.colocate:
        return max(trainer, rollout), 0
    return trainer + rollout, trainer


def groups(topo: Topology) -> tuple[Group, ...]:
    """Engine groups in placement order, each with its offset (sglang_config `_OffsetCursor`)."""
    _, offset = layout(topo)
    raw: list[tuple[str, str, int, int]] = []
    if topo.rollout_gpus_used:
        if topo.engine_groups is not None:
            raw += [(m, k, n, size or topo.engine_size) for m, k, n, size in topo.engine_groups
                    if m != "eval"]
        elif topo.prefill_servers is not None:  # `from_prefill_num_servers`
            prefill = topo.prefill_servers * topo.engine_size
            raw += [("default", "prefill", prefill, topo.engine_size),
                    ("default", "decode", topo.rollout_gpus_used - prefill, topo.engine_size)]
        else:
            raw += [("default", "regular", topo.rollout_gpus_used, topo.engine_size)]
    if topo.eval_gpus and not topo.rollout_external:
        given = [(m, k, n, size or topo.eval_size) for m, k, n, size in topo.engine_groups or ()
                 if m == "eval"]
        raw += given or [("eval", "regular", topo.eval_gpus, topo.eval_size)]
    out, gpu, engine = [], offset, 0
    for model, kind, gpus, size in raw:
        g = Group(model, kind, gpu, max(gpus, 0), size, engine)
        out.append(g)
        gpu += g.gpus
        engine += g.engines
    return tuple(out)


Slot = tuple[int, int]  # (node, GPU within the node)


@dataclass(frozen=True)
class Placement:
    """miles' one packed placement group of a Topology. Position i is GPU i % node_gpus_used of
    node i // node_gpus_used; train rank r holds position r; engines follow (see the module)."""

    node_gpus_used: int  # physical GPUs per node (`Topology.node_gpus_used`), e.g. 8
    ranks: int  # train ranks, at positions [0, ranks) (`Topology.world_size`)
    bundles: int  # 1-GPU bundles in the group (`_get_placement_group_layout`)
    rollout_offset: int  # position of the first rollout engine's first GPU
    groups: tuple[Group, ...]  # engine groups in placement order, eval last

    @classmethod
    def of(cls, topo: Topology) -> Placement:
        bundles, offset = layout(topo)
        return cls(topo.node_gpus_used, topo.world_size, bundles, offset, groups(topo))

    # ---- positions and train ranks ----------------------------------------------------

    def slot(self, position: int) -> Slot:
        """(node, GPU) of a position of the group."""
        return divmod(position, self.node_gpus_used)

    def position(self, slot: Slot) -> int:
        """The position of a (node, GPU): the inverse of `slot`."""
        return slot[0] * self.node_gpus_used + slot[1]

    def slots(self) -> list[Slot]:
        """Every (node, GPU) of the group, in its sorted order (one bundle each)."""
        return [self.slot(i) for i in range(self.bundles)]

    def rank_slot(self, rank: int) -> Slot:
        """(node, GPU) of train rank `rank` (`Topology.placement`)."""
        if not 0 <= rank < self.ranks:
            raise IndexError(f"rank {rank} outside the world of {self.ranks} ranks")
        return self.slot(rank)

    def rank_at(self, slot: Slot) -> int | None:
        """The train rank on a (node, GPU), or None when no rank is there."""
        r = self.position(slot)
        return r if 0 <= slot[1] < self.node_gpus_used and r < self.ranks else None

    def ranks_on(self, node: int) -> range:
        """Train ranks on `node`: ranks take the first positions of the group."""
        first = node * self.node_gpus_used
        return range(min(first, self.ranks), min(first + self.node_gpus_used, self.ranks))

    @property
    def nodes(self) -> int:
        """Nodes the group fills (`Topology.nodes_needed`)."""
        return -(-self.bundles // self.node_gpus_used)

    # ---- engines -----------------------------------------------------------------------

    @cached_property
    def engines(self) -> int:
        """Every engine: rollout engines, then eval engines."""
        return sum(g.engines for g in self.groups)

    @cached_property
    def rollout_engines(self) -> int:
        """Engines that serve rollout and receive weight updates (eval engines excluded)."""
        return sum(g.engines for g in self.groups if g.model != "eval")

    def engine_span(self, engine: int) -> tuple[int, int]:
        """(first position, size) of engine `engine`, found by bisection over the groups."""
        live = self._live
        i = bisect_right([g.first_engine for g in live], engine) - 1
        if i < 0 or engine >= live[i].first_engine + live[i].engines:
            raise IndexError(f"engine {engine} outside 0..{self.engines - 1}")
        g = live[i]
        return g.start + (engine - g.first_engine) * g.engine_size, g.engine_size

    def engine_gpus(self, engine: int) -> tuple[Slot, ...]:
        """(node, GPU) of each GPU of engine `engine` (rollout engines first, then eval)."""
        if not 0 <= engine < self.engines:
            raise IndexError(f"engine {engine} outside 0..{self.engines - 1}")
        start, size = self.engine_span(engine)
        return tuple(self.slot(i) for i in range(start, start + size))

    @cached_property
    def _live(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.engines)


def straddler(group: Group, node: int) -> int | None:
    """The first engine of `group` that SGLang cannot run where the placement puts it, or None.

    SGLang takes GPUs base_gpu_id .. base_gpu_id + tp - 1 of its node (miles passes base_gpu_id
    with NOSET_VISIBLE_DEVICES); an engine larger than a node runs one process per node
    (`nodes_per_engine`), each from GPU base_gpu_id. So an engine fits when it lies inside one
    node, or covers whole nodes starting at GPU 0. Engine k starts at (start + k*size) % node;
    those remainders repeat with period node / gcd(size, node), so only one period is checked.
    """
    size = group.engine_size
    if size > node and size % node:
        return group.first_engine if group.engines else None
    period = node // gcd(size, node)
    for k in range(min(group.engines, period, 1 << 16)):
        at = (group.start + k * size) % node
        if (at + size > node) if size <= node else at:
            return group.first_engine + k
    if group.engines > min(period, 1 << 16) and period > 1 << 16:  # huge nodes: the residues
        # reached are start % g + multiples of g (g = gcd); the largest one decides
        g = gcd(size, node)
        worst = node - g + group.start % g
        if (worst + size > node) if size <= node else worst:
            return group.first_engine  # some engine straddles; its index is not searched for
    return None


def read_engine_groups(path: str) -> tuple[tuple[str, str, int, int], ...] | None:
    """The groups of a --sglang-config YAML, or None when it cannot be read (then skipped).

    Format (sglang_config.py `_RawSglangConfig`): `sglang:` (or `models:`) is a list of models,
    each with `name`, an optional `num_gpus_per_engine` and `server_groups` (or `engine_groups`)
    of `worker_type`, `num_gpus` and an optional `num_gpus_per_engine`. A size of 0 here means
    "not given": the group takes its model's, else --rollout-num-gpus-per-engine.
    """
    try:
        import yaml

        with open(path) as f:
            data = yaml.safe_load(f)
        models = data.get("sglang", data.get("models"))
        out = []
        for m in models:
            size = int(m.get("num_gpus_per_engine") or 0)
            for g in m.get("server_groups", m.get("engine_groups")) or []:
                out.append((str(m["name"]), str(g["worker_type"]), int(g["num_gpus"]),
                            int(g.get("num_gpus_per_engine") or size)))
        return tuple(out)
    except Exception:  # unreadable or not of that form: the check is skipped, not failed
        return None
