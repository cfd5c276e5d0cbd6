"""Where every GPU of a miles job lands: miles' one packed placement group, read as miles reads it.

miles (radixark/miles, miles/ray/placement_group.py: `create_placement_groups`,
`_create_placement_group`, `sort_key`, `_get_placement_group_layout`) makes ONE placement group
of 1-GPU bundles with strategy PACK, asks an `InfoActor` in every bundle for (node IP, GPU id)
and sorts the bundles by that key: node IP numerically, then GPU id. Position i in that order is
"GPU i" here, on node i // n at GPU i % n, n = `Layout.node_gpus_used` (PACK fills whole
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
    from .parts import Layout, Rollout


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


def rollout_num_gpus(lay: Layout, ro: Rollout) -> int | None:
    """args.rollout_num_gpus after the framework's validation (None: not given). Under
    --colocate miles overwrites a given value with the actor's GPUs (miles 31f1ca9
    utils/arguments.py:3312); slime fills it only when not given and keeps a given one (slime
    624b824 utils/arguments.py:1951), engines then take that many GPUs from position 0."""
    if ro.colocate and (lay.framework == "miles" or ro.rollout_gpus is None):
        return lay.actor_gpus
    return ro.rollout_gpus


def rollout_gpus(lay: Layout, ro: Rollout) -> int:
    """GPUs rollout engines really take (e.g. 8): `rollout_num_gpus`, none with external
    engines or --debug-train-only."""
    # _get_placement_group_layout (miles ray/placement_group.py:95): --debug-train-only
    # places the actor alone; args.rollout_num_gpus keeps its value, no engine starts
    if ro.rollout_external or ro.train_only:
        return 0
    return rollout_num_gpus(lay, ro) or 0


def layout(lay: Layout, ro: Rollout) -> tuple[int, int]:
    """(bundles in the placement group, rollout offset): `_get_placement_group_layout`."""
    trainer = 0 if ro.rollout_only else lay.actor_gpus
    rollout = rollout_gpus(lay, ro) + ro.eval_gpus
    if ro.train_only:
        return trainer + ro.eval_gpus, trainer
    if ro.rollout_external:
        return trainer, trainer
    if ro.colocate:
        return max(trainer, rollout), 0
    return trainer + rollout, trainer


def budget(lay: Layout, ro: Rollout) -> str:
    """The GPUs the job places, as text, e.g. 'actor 8 + rollout 8 GPUs'."""
    parts = [f"actor {lay.actor_gpus}"]
    used = rollout_gpus(lay, ro)
    if not ro.colocate and used:
        parts.append(f"rollout {used}")
    if ro.eval_gpus:
        parts.append(f"eval {ro.eval_gpus}")
    return " + ".join(parts) + " GPUs"


def groups(lay: Layout, ro: Rollout) -> tuple[Group, ...]:
    """Engine groups in placement order, each with its offset (sglang_config `_OffsetCursor`)."""
    _, offset = layout(lay, ro)
    used = rollout_gpus(lay, ro)
    raw: list[tuple[str, str, int, int]] = []
    if used:
        if ro.engine_groups is not None:
            raw += [(m, k, n, size or ro.engine_size) for m, k, n, size in ro.engine_groups
                    if m != "eval"]
        elif ro.prefill_servers is not None:  # `from_prefill_num_servers`
            prefill = ro.prefill_servers * ro.engine_size
            raw += [("default", "prefill", prefill, ro.engine_size),
                    ("default", "decode", used - prefill, ro.engine_size)]
        else:
            raw += [("default", "regular", used, ro.engine_size)]
    if ro.eval_gpus and not ro.rollout_external:
        given = [(m, k, n, size or ro.eval_size) for m, k, n, size in ro.engine_groups or ()
                 if m == "eval"]
        raw += given or [("eval", "regular", ro.eval_gpus, ro.eval_size)]
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

    node_gpus_used: int  # physical GPUs per node (`Layout.node_gpus_used`), e.g. 8
    ranks: int  # train ranks, at positions [0, ranks) (`Layout.actor_gpus`: every replica's)
    bundles: int  # 1-GPU bundles in the group (`_get_placement_group_layout`)
    rollout_offset: int  # position of the first rollout engine's first GPU (0 when colocated)
    groups: tuple[Group, ...]  # engine groups in placement order, eval last
    rollout_gpus: int  # GPUs rollout engines really take (`rollout_gpus`)
    budget: str  # the GPUs the job places, as text, e.g. 'actor 8 + rollout 8 GPUs'

    @classmethod
    def of(cls, lay: Layout, ro: Rollout) -> Placement:
        """The placement group of a Topology's layout and rollout engines."""
        bundles, offset = layout(lay, ro)
        return cls(lay.node_gpus_used, lay.actor_gpus, bundles, offset, groups(lay, ro),
                   rollout_gpus(lay, ro), budget(lay, ro))

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
        """Nodes of `node_gpus_used` GPUs the group fills."""
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
