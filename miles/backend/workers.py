"""The job's processes on Ray: one `Host` actor per node, forking that node's ranks and engines.

A Ray actor per rank and engine meant 16 Python workers, each importing torch and
megatron.core: ~5 s of CPU apiece, the bulk of start-up on a small machine. A host instead
keeps a zygote (multiprocessing forkserver) that imports them once per node
(`proc.PRELOAD`) and forks each role process from it; the role's environment is the one its
own Ray actor would get (`Cluster.train_env` / `engine_env`: GPU, ranks, rendezvous), and
the host sits on the role's node (`Cluster.node_actor_options`). The host relays calls to
its processes and their calls to peers (`proc.Peer`). `Proc` names one process; its
`call` returns an ObjectRef, like a Ray actor method.

Tests keep one `Pool` host for many jobs: a job forks fresh processes (milliseconds) and
stops them when it ends, so no job sees another's gloo or megatron state.

A process that dies (a rank or an engine, or a whole host) makes the peers that wait for it
fail too, and the first error to reach the driver is often one of theirs ("PeerError",
a gloo connection reset). So when a call fails, `Job.get` first asks every host which of
its processes ended on their own, and raises `exits.Died` naming the dead one.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import ray

from . import proc
from .exits import Died, Watch

DEATH_WAIT_S = 1.0  # after a failed call: how long to wait for a dead process to show


class ProcError(RuntimeError):
    """A role process failed: the message names the process and its error; `detail` holds
    the process's traceback."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail

    def __reduce__(self):  # Ray pickles it back to the driver
        return type(self), (str(self), self.detail)


@dataclass
class _Child:
    name: str
    process: object
    conn: object
    peers: list
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False  # it ended as asked or after reporting its error: not a death


@ray.remote(num_cpus=0, max_concurrency=256)
class Host:
    """A node's zygote and the role processes forked from it (calls run in threads: every
    rank of a collective must be inside its call at once)."""

    def __init__(self):
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(proc.PRELOAD)
        self.children: dict[str, _Child] = {}
        self.reaping = threading.Lock()  # one thread at a time reads an exit status
        # start() runs in threads of its own and may still be forking while stop() runs:
        # the table changes under `guard`, and a process forked after stop() is killed
        self.guard = threading.Lock()
        self.stopping = False

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> str:
        """The Ray node id this host runs on."""
        return ray.get_runtime_context().get_node_id()

    def pids(self) -> dict[str, int]:
        """Process name -> pid of every role process forked here."""
        return {name: c.process.pid for name, c in self._children()}

    def warm(self) -> float:
        """Seconds until the zygote has imported the roles' modules (the first call starts it)."""
        t0 = time.monotonic()
        p = self.ctx.Process(target=proc.ready)
        p.start()
        p.join()
        return time.monotonic() - t0

    def open(self) -> None:
        """A job begins: starts are taken again (a Pool's host serves job after job; its
        stop() refuses only the starts of the job being stopped)."""
        with self.guard:
            self.stopping = False

    def start(self, name: str, kind: str, env: dict[str, str], kwargs: dict,
              peers: list | None = None) -> dict:
        """Fork process `name` and make it a `kind` role; returns its pid and init seconds."""
        here, there = self.ctx.Pipe()
        p = self.ctx.Process(target=proc.serve, name=name,
                             args=(there, kind, env, kwargs, len(peers or ()), name))
        p.start()
        there.close()
        child = _Child(name, p, here, list(peers or ()))
        with self.guard:
            late = self.stopping
            if not late:
                self.children[name] = child
        if late:  # the job is being stopped: this process must not outlive it
            child.done = True
            p.kill()
            p.join(5)
            raise ProcError(f"{name}: started while its host was stopping")
        with child.lock:
            try:
                return self._answer(child)
            except ProcError:
                child.done = True  # a failed start ends the process
                raise

    def call(self, name: str, method: str, *args, **kwargs):
        child = self.children[name]
        with child.lock:
            child.conn.send((method, args, kwargs))
            return self._answer(child)

    def stop(self) -> None:
        """End every process of this host (a failed job's may be blocked in a collective)."""
        with self.guard:
            self.stopping = True
            children = list(self.children.values())
            self.children.clear()
        for child in children:
            child.done = True
            child.process.kill()
        for child in children:
            with self.reaping:
                child.process.join(5)
            child.conn.close()

    def deaths(self, wait_s: float = 0.0) -> list[tuple[str, int | None]]:
        """(name, exit code) of the processes that ended on their own: not stopped, not
        after reporting an error. Waits up to `wait_s` for a first one."""
        live = [c for _, c in self._children() if not c.done]
        with self.reaping:
            if wait_s and live and all(c.process.exitcode is None for c in live):
                mp.connection.wait([c.process.sentinel for c in live], wait_s)
            return [(c.name, c.process.exitcode) for c in live if c.process.exitcode is not None]

    def _children(self) -> list[tuple[str, _Child]]:
        with self.guard:
            return list(self.children.items())

    def _answer(self, child: _Child):
        """The process's reply to the last message, forwarding its peer calls meanwhile."""
        while True:
            try:
                msg = child.conn.recv()
            except (EOFError, OSError):
                with self.reaping:
                    child.process.join(1)
                raise ProcError(f"{child.name} exited (code {child.process.exitcode})") from None
            if msg[0] == "peer":
                _, i, method, args, kwargs = msg
                try:
                    child.conn.send(("ok", ray.get(child.peers[i].call(method, *args, **kwargs))))
                except Exception as e:
                    child.conn.send(("err", f"{type(e).__name__}: {e}"))
                continue
            if msg[0] == "err":
                raise ProcError(f"{child.name}: {msg[1]}", msg[2])
            return msg[1]


@dataclass(frozen=True)
class Proc:
    """One role process: its host and name."""

    host: object
    name: str

    def call(self, method: str, *args, **kwargs):
        """Call `method` of the role; an ObjectRef to its result."""
        return self.host.call.remote(self.name, method, *args, **kwargs)


class Pool:
    """One host kept across jobs (tests); every job's processes are forked from it."""

    def __init__(self):
        self.host = None

    def take(self):
        if self.host is None:
            self.host = Host.remote()
        return self.host

    def close(self) -> None:
        if self.host is not None:
            ray.kill(self.host)
            self.host = None


@dataclass
class Job:
    """A job's hosts and processes: `train[rank]`, `engines[engine]`."""

    hosts: list  # distinct Host actors
    train: list[Proc]
    engines: list[Proc]
    master: tuple[str, int]
    owned: bool  # hosts made for this job (killed at the end), not a Pool's
    train_env: list[dict]  # each role's environment, as its own Ray actor would get it
    engine_env: list[dict]
    nodes: list = field(default_factory=list)  # the Topology node of each host (None: a Pool's)
    watches: list = field(default_factory=list)  # an exits.Watch per host on this machine

    def warm(self) -> float:
        """Wait for every host's zygote; the slowest one's seconds."""
        return max(self.get([h.warm.remote() for h in self.hosts]))

    def start(self, engine_kwargs: list[dict], train_kwargs: list[dict]) -> list[dict]:
        """Start every role at once (the train ranks rendezvous over gloo while starting);
        engines first in the result."""
        ray.get([h.open.remote() for h in self.hosts])
        refs = [p.host.start.remote(p.name, "engine", env, kw)
                for p, env, kw in zip(self.engines, self.engine_env, engine_kwargs)]
        refs += [p.host.start.remote(p.name, "trainer", env, kw, self.engines)
                 for p, env, kw in zip(self.train, self.train_env, train_kwargs)]
        return self.get(refs)  # one rank failing to start leaves the others in rendezvous

    def get(self, refs: list) -> list:
        """`ray.get(refs)`; when one fails, the job's processes are stopped first (the others
        may wait for it in a collective) and every ref is collected, so the failure is
        reported once, by the caller, not again as Ray's unhandled errors."""
        try:
            return ray.get(refs)
        except Exception:
            died = self.casualty()
            self.stop()
            for ref in refs:
                try:
                    ray.get(ref)
                except Exception:
                    pass
            if died is not None:
                raise died from None
            raise

    def casualty(self, wait_s: float = DEATH_WAIT_S) -> Died | None:
        """The process of the job that died, if one did (a host before its processes,
        which die with it); None when every process is still there."""
        refs = [h.deaths.remote(wait_s) for h in self.hosts]
        dead: list[tuple[str, int | None]] = []
        for i, ref in enumerate(refs):
            try:
                dead += [(_role(name), code) for name, code in ray.get(ref, timeout=wait_s + 30)]
            except ray.exceptions.RayActorError:
                dead.insert(0, (self._host_role(i), self._host_code(i, wait_s)))
            except ray.exceptions.GetTimeoutError:
                pass
        if not dead:
            return None
        return Died(*dead[0], also=tuple(role for role, _ in dead[1:]))

    def _host_role(self, i: int) -> str:
        node = self.nodes[i] if i < len(self.nodes) else None
        return "the pool's host" if node is None else f"the host of node {node}"

    def _host_code(self, i: int, wait_s: float) -> int | None:
        watch = self.watches[i] if i < len(self.watches) else None
        if watch is None:
            return None
        deadline = time.monotonic() + wait_s  # its raylet may not have reaped it yet
        while (code := watch.code()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def stop(self) -> None:
        """End every process of every host still there."""
        refs = [h.stop.remote() for h in self.hosts]
        for ref in refs:
            try:
                ray.get(ref, timeout=30)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass  # a dead host's processes died with it

    def close(self) -> None:
        self.stop()
        if self.owned:
            for h in self.hosts:
                ray.kill(h)
        for w in self.watches:
            if w is not None:
                w.close()


def spawn(cluster, topo) -> Job:
    """The hosts of a job: one per Topology node on the launcher's cluster, a Pool's otherwise."""
    rank_node = [topo.placement(r)[0] for r in range(topo.world_size)]
    engine_node = [
        topo.engine_gpus(e)[0][0] for e in range(topo.placement_group.rollout_engines)
    ]  # its leader's
    nodes = sorted(set(rank_node) | set(engine_node))
    watches: list = []
    if isinstance(cluster, Pool):
        host = cluster.take()
        by_node, hosts, host_nodes = {n: host for n in nodes}, [host], [None]
        master, owned = ("127.0.0.1", _free_port()), False
        train_env, engine_env = [{} for _ in rank_node], [{} for _ in engine_node]
    else:
        by_node = {n: Host.options(**cluster.node_actor_options(n)).remote() for n in nodes}
        hosts, host_nodes = list(by_node.values()), list(by_node)
        master, owned = tuple(cluster.master), True
        train_env = [cluster.train_env(r) for r in range(topo.world_size)]
        engine_env = [cluster.engine_env(e) for e in range(topo.placement_group.rollout_engines)]
        if getattr(cluster, "local", False):  # its hosts run here: watch how they end
            watches = [Watch(pid) for pid in ray.get([h.pid.remote() for h in hosts])]
    train = [Proc(by_node[n], f"rank{r}") for r, n in enumerate(rank_node)]
    engines = [Proc(by_node[n], f"engine{e}") for e, n in enumerate(engine_node)]
    return Job(hosts, train, engines, master, owned, train_env, engine_env, host_nodes, watches)


def _role(name: str) -> str:
    """ "rank3" -> "rank 3", "engine0" -> "engine 0"."""
    stem = name.rstrip("0123456789")
    return f"{stem} {name[len(stem):]}" if stem != name else name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
