"""Place a Topology on Ray: one placement-group bundle per (node, GPU) slot of the Topology.

Every actor's node, GPU, local rank and rendezvous address come from the Topology through
`Cluster`; nothing here computes a rank, node or GPU index from raw sizes.

Environment each actor gets (runtime_env env_vars):
  CUDA_VISIBLE_DEVICES  the one GPU id Ray reserved for the actor's slot, so the process
                        sees a single device: cuda:0 is the Topology's GPU
                        (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 keeps Ray from
                        rewriting it)
  LOCAL_RANK            the Topology's GPU index on its node (for node-local logic; the
                        device to use is cuda:0)
  NODE_RANK             the Topology's node index
  train ranks:          RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  engines:              MILES_ENGINE, MILES_ENGINE_RANK, MILES_ENGINE_SIZE, MILES_ENGINE_ADDR

Engines: one actor per engine GPU (`engine_actor_options(engine, i)`, i < engine_size), so
an engine spanning two nodes is engine_size actors on both nodes; a single-process engine
uses i = 0 only (its leader). Colocated layouts share a slot's GPU fractionally.

The reference backend forks a node's roles from one host actor per node instead
(`node_actor_options`); each role process gets the environment its own actor would have
(`train_env`, `engine_env`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

from miles_topology import Topology, TopologyError
from miles_topology.model.topology import summary

from .local import NODE_RESOURCE, start_local
from .plan import Slot, bind, budget_problems, gpu_key, slots

TRAIN_GPU = {True: 0.5, False: 1.0}  # colocated -> fraction of the slot's GPU
ENGINE_GPU = {True: 0.4, False: 1.0}
PIN = 0.001  # share of a node's pin resource a bundle takes
LOCAL_MAX_NODES = 64  # a local (logical-GPU) cluster larger than this is refused up front
ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "NODE_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "LOCAL_WORLD_SIZE", "MILES_ENGINE", "MILES_ENGINE_RANK", "MILES_ENGINE_SIZE",
    "MILES_ENGINE_ADDR",
)


class PlacementTimeout(RuntimeError):
    """A bounded wait on the cluster ran out; the message says what it waited for."""


class Node:
    def __init__(self, node_id: str, ip: str, gpus: int, pin: str):
        self.id, self.ip, self.gpus, self.pin = node_id, ip, gpus, pin


class Cluster:
    """A Topology placed on Ray. Build it with `start_cluster(topo)`; end with `shutdown()`."""

    def __init__(self, topo: Topology, pg: Any, bundle: dict[Slot, int], gpu: dict[Slot, str],
                 nodes: list[Node], master: tuple[str, int], owns: tuple[Any, bool]):
        self.topo, self.pg = topo, pg
        self.bundle, self.gpu, self.nodes, self.master = bundle, gpu, nodes, master
        self._local, self._owns_conn = owns

    # ---- what the backend asks for ----------------------------------------------------

    def train_actor_options(self, rank: int) -> dict[str, Any]:
        """`.options(**...)` for train rank `rank`: its bundle, GPU share and environment."""
        slot = self.topo.placement(rank)
        return self._options(slot, TRAIN_GPU[self.topo.rollout.colocate], self.train_env(rank))

    def engine_actor_options(self, engine: int, i: int = 0) -> dict[str, Any]:
        """`.options(**...)` for GPU `i` of rollout engine `engine` (i = 0 is its leader)."""
        slot = self.topo.engine_gpus(engine)[i]
        return self._options(
            slot, ENGINE_GPU[self.topo.rollout.colocate], self.engine_env(engine, i)
        )

    def train_env(self, rank: int) -> dict[str, str]:
        """The environment of train rank `rank` (see the module docstring)."""
        t = self.topo
        slot = t.placement(rank)
        return self._env(slot, dict(
            RANK=rank, WORLD_SIZE=t.world_size, LOCAL_WORLD_SIZE=_ranks_on_node(t, slot[0]),
            MASTER_ADDR=self.master[0], MASTER_PORT=self.master[1],
        ))

    def engine_env(self, engine: int, i: int = 0) -> dict[str, str]:
        """The environment of GPU `i` of rollout engine `engine`."""
        gpus = self.topo.engine_gpus(engine)
        return self._env(gpus[i], dict(
            MILES_ENGINE=engine, MILES_ENGINE_RANK=i, MILES_ENGINE_SIZE=len(gpus),
            MILES_ENGINE_ADDR=self.nodes[gpus[0][0]].ip,
        ))

    def node_actor_options(self, node: int) -> dict[str, Any]:
        """`.options(**...)` for a process host on Topology node `node` (no GPU of its own:
        the placement group holds the node's GPUs for the roles it forks, each of which
        gets its slot's environment)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return dict(num_cpus=0, num_gpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            self.nodes[node].id, soft=False))

    def node_id(self, node: int) -> str:
        """Ray node id of Topology node `node`."""
        return self.nodes[node].id

    @property
    def local(self) -> bool:
        """Whether this Cluster started its own local cluster (its processes are on this
        machine, children of the launcher)."""
        return self._local is not None

    def gpu_id(self, slot: Slot) -> str:
        """The GPU id Ray reserved for a (node, GPU) slot of the Topology."""
        return self.gpu[slot]

    def shutdown(self) -> None:
        """Release what this Cluster holds: a local cluster whole, else its placement group.

        Disconnecting before stopping a local cluster keeps the actors' dying words (SIGTERM
        noise) out of the driver's output.
        """
        import ray
        from ray.util.placement_group import remove_placement_group

        if self._local is None and self.pg is not None and ray.is_initialized():
            remove_placement_group(self.pg)
        self.pg = None
        if self._owns_conn and ray.is_initialized():
            ray.shutdown()
        if self._local is not None:
            self._local.shutdown()
            self._local = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _env(self, slot: Slot, env: Mapping[str, object]) -> dict[str, str]:
        node, gpu = slot
        env = dict(
            env, CUDA_VISIBLE_DEVICES=self.gpu[slot], LOCAL_RANK=gpu, NODE_RANK=node,
            RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1,
        )
        return {k: str(v) for k, v in env.items()}

    def _options(self, slot: Slot, share: float, env: dict[str, str]) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return dict(
            num_cpus=0,
            num_gpus=share,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.pg, placement_group_bundle_index=self.bundle[slot]
            ),
            runtime_env={"env_vars": env},
        )


def start_cluster(topo: Topology, address: str | None = None, wait_s: float = 60.0) -> Cluster:
    """Connect (current connection, `address`, RAY_ADDRESS, or a new local cluster) and place.

    Raises TopologyError(gpu-budget-exceeded) at once when the cluster's nodes cannot host
    the Topology, and PlacementTimeout when a bounded wait runs out.
    """
    lay = topo.layout
    import ray

    local, owns_conn = None, False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        if address:
            _wait_reachable(address, wait_s)
        else:
            if topo.placement_group.nodes > LOCAL_MAX_NODES:  # bounded: no attempt at 10^8 raylets
                from miles_topology import Problem

                raise TopologyError(
                    [
                        Problem(
                            "gpu-budget-exceeded",
                            f"this job needs {topo.placement_group.nodes} nodes of "
                            f"{lay.node_gpus_used} GPUs; "
                            f"a local cluster is built for at most {LOCAL_MAX_NODES}.",
                            "point RAY_ADDRESS at a Ray cluster of that size, or shrink the job",
                            ("--actor-num-nodes", "--rollout-num-gpus"),
                        )
                    ],
                    list(topo.warnings),
                )
            local = start_local(topo.placement_group.nodes, lay.node_gpus_used)
            address = local.address
    try:
        if not ray.is_initialized():
            owns_conn = True  # set first: an interrupt inside ray.init leaves it half made
            ray.init(address=address, logging_level="warning")
            _quiet_worker_deaths()
        return _place(topo, wait_s, (local, owns_conn))
    except BaseException:
        if owns_conn:
            ray.shutdown()
        if local is not None:
            local.shutdown()
        raise


def _quiet_worker_deaths() -> None:
    """Drop Ray's "(raylet) A worker died or was killed ..." notice from the driver's output:
    the backend reports a dead host itself, in one line that names its node and exit status
    (`miles.backend.exits`). Ray prints the notices it pushes to the driver through
    `ray._private.worker.print_to_stdstream`; other output is untouched."""
    from ray._private import worker

    show = worker.print_to_stdstream
    if getattr(show, "miles_quiet", False):
        return

    def quiet(data, *args, **kwargs):
        lines = [x for x in data.get("lines", ())
                 if not (data.get("pid") == "raylet" and x.startswith(WORKER_DIED))]
        if lines:
            show({**data, "lines": lines}, *args, **kwargs)

    quiet.miles_quiet = True
    worker.print_to_stdstream = quiet


WORKER_DIED = "A worker died or was killed while executing a task"


def landing() -> dict[str, Any]:
    """Where the calling actor runs: Ray node id, GPU ids Ray reserved, and its env."""
    import ray

    try:  # the raylet's own reservation, independent of the CUDA_VISIBLE_DEVICES we set
        raw = ray._private.worker.global_worker.core_worker.resource_ids()
        gpu = re.compile(r"GPU(_group_[0-9a-f]+)?")
        reserved = sorted({int(i) for k, a in raw.items() if gpu.fullmatch(k) for i, _ in a})
    except Exception:  # private API moved: report nothing rather than a guess
        reserved = None
    return dict(
        node_id=ray.get_runtime_context().get_node_id(),
        gpu_ids=[str(g) for g in ray.get_gpu_ids()],
        reserved=reserved,
        env={k: os.environ.get(k) for k in ENV_KEYS},
        pid=os.getpid(),
    )


# ---- placement ------------------------------------------------------------------------


def _place(topo: Topology, wait_s: float, owns: tuple[Any, bool]) -> Cluster:
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    nodes = _nodes()
    problems = budget_problems(topo, [n.gpus for n in nodes])
    if problems:
        raise TopologyError(problems, list(topo.warnings), summary(topo))
    needed = slots(topo)
    pg = placement_group([{"GPU": 1, nodes[n].pin: PIN} for n, _ in needed], strategy="PACK")
    try:
        _bounded(pg.ready(), wait_s, f"a placement group of {len(needed)} GPU bundles "
                 f"({_per_node(needed)}); other jobs may hold those GPUs")
        rank0 = needed.index(topo.placement(0))  # a bundle on rank 0's node: the master's
        # address and port (the GPU within the node is settled by `bind` below)
        refs = [
            _probe.options(
                num_cpus=0, num_gpus=PIN,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, b),
            ).remote(b == rank0)
            for b in range(len(needed))
        ]
        probed = _bounded(refs, wait_s, f"{len(needed)} probe tasks, one per bundle")
    except BaseException:
        remove_placement_group(pg)
        raise
    index = {n.id: i for i, n in enumerate(nodes)}
    bundle = bind(needed, {b: (index[p[0]], p[2]) for b, p in enumerate(probed)})
    for (n, _), b in bundle.items():
        if index[probed[b][0]] != n:  # the pin resource must have held
            remove_placement_group(pg)
            raise RuntimeError(f"bundle {b} landed on node {index[probed[b][0]]}, not {n}")
    gpu = {s: str(probed[b][2]) for s, b in bundle.items()}
    master = (probed[rank0][1], probed[rank0][3])
    return Cluster(topo, pg, bundle, gpu, nodes, master, owns)


def _nodes() -> list[Node]:
    """Alive nodes with GPUs, in Topology node order: by `miles_node_<i>` label, else by IP."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) > 0]
    labelled: dict[int, Node] = {}
    for n in alive:
        for key in n["Resources"]:
            m = re.fullmatch(NODE_RESOURCE.format(r"(\d+)"), key)
            if m:
                labelled[int(m.group(1))] = Node(
                    n["NodeID"], n["NodeManagerAddress"], int(n["Resources"]["GPU"]), key
                )
    if labelled:
        return [labelled.get(i, Node("", "", 0, "")) for i in range(max(labelled) + 1)]
    ips = [n["NodeManagerAddress"] for n in alive]
    if len(set(ips)) != len(ips):
        raise RuntimeError(
            "several Ray nodes share an IP and carry no miles_node_<i> resource, so nodes "
            "cannot be told apart; start each raylet with --resources '{\"miles_node_<i>\": 1}'"
        )
    alive.sort(key=lambda n: tuple(gpu_key(p) for p in n["NodeManagerAddress"].split(".")))
    return [
        Node(n["NodeID"], n["NodeManagerAddress"], int(n["Resources"]["GPU"]),
             f"node:{n['NodeManagerAddress']}")
        for n in alive
    ]


def _ranks_on_node(topo: Topology, node: int) -> int:
    """Train ranks on `node`: ranks take the first positions of the packed placement group."""
    return len(topo.placement_group.ranks_on(node))


def _per_node(needed: list[Slot]) -> str:
    count: dict[int, int] = {}
    for n, _ in needed:
        count[n] = count.get(n, 0) + 1
    return ", ".join(f"node {n}: {k}" for n, k in sorted(count.items()))


def _bounded(refs: Any, wait_s: float, what: str) -> Any:
    """ray.get with a deadline; says what it waits for when that takes more than a moment."""
    import ray

    many = isinstance(refs, list)
    refs = refs if many else [refs]
    start = time.monotonic()
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=min(5.0, wait_s))
    if len(ready) < len(refs):
        print(f"miles: waiting up to {wait_s:.0f}s for {what}", file=sys.stderr)
        left = max(0.0, wait_s - (time.monotonic() - start))
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
    if len(ready) < len(refs):
        raise PlacementTimeout(f"gave up after {wait_s:.0f}s waiting for {what}")
    out = ray.get(refs)
    return out if many else out[0]


def _wait_reachable(address: str, wait_s: float) -> None:
    """Fail fast when RAY_ADDRESS (host:port) does not answer, instead of hanging in ray.init."""
    m = re.fullmatch(r"(?:ray://)?([^:/]+):(\d+)", address)
    if not m:
        return  # "auto" and other forms: let ray.init resolve them
    deadline = time.monotonic() + min(wait_s, 15.0)
    while True:
        try:
            socket.create_connection((m.group(1), int(m.group(2))), timeout=2).close()
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise PlacementTimeout(
                    f"the Ray cluster at {address} (RAY_ADDRESS) did not answer: {e}"
                ) from None
            time.sleep(0.5)


def _probe_fn(want_port: bool) -> tuple[str, str, str, int]:
    """Run inside a bundle: its node id, node IP, reserved GPU id, and a free port if asked."""
    import ray

    port = 0
    if want_port:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    ids = ray.get_gpu_ids()
    return (
        ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(),
        str(ids[0]) if ids else "", port,
    )


class _Lazy:
    """`ray.remote(_probe_fn)`, made on first use so importing this module stays cheap."""

    fn = None

    def options(self, **kw: Any) -> Any:
        import ray

        if _Lazy.fn is None:
            _Lazy.fn = ray.remote(_probe_fn)
        return _Lazy.fn.options(**kw)


_probe = _Lazy()
