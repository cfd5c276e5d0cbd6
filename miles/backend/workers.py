"""Ray actors for train ranks and engines: one generic worker process per role instance.

A worker becomes a Trainer or an Engine on `start`, so a test can keep one set of
processes alive across many topologies (a worker costs seconds to start on a small
machine; reconfiguring it costs milliseconds). A job on the launcher's cluster gets fresh
workers placed by the cluster's per-rank / per-engine actor options.
"""

from __future__ import annotations

import socket
import warnings

import ray

QUIET = [".*Transformer Engine.*", ".*Apex.*", ".*NumPy array is not writable.*"]


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self):
        for msg in QUIET:
            warnings.filterwarnings("ignore", message=msg)
        self.role = None  # torch and megatron load with a trainer role only

    def start(self, kind: str, *args, **kwargs) -> dict:
        """Become a Trainer or an Engine; returns the pid and the seconds spent importing
        and constructing (gloo and megatron groups, for a trainer)."""
        import os
        import time

        t0 = time.monotonic()
        if kind == "trainer":
            import torch

            torch.set_num_threads(1)
            from .trainer import Trainer as cls
        else:
            from .engine import Engine as cls
        t1 = time.monotonic()
        self.role = None
        self.role = cls(*args, **kwargs)
        return {"pid": os.getpid(), "import_s": t1 - t0, "init_s": time.monotonic() - t1}

    def ping(self) -> bool:
        return True

    def call(self, method: str, *args, **kwargs):
        return getattr(self.role, method)(*args, **kwargs)


class Pool:
    """Workers kept across jobs (tests): grown on demand, never placed per topology."""

    def __init__(self):
        self.workers: list = []

    def take(self, n: int) -> list:
        while len(self.workers) < n:
            self.workers.append(Worker.remote())
        return self.workers[:n]

    def close(self) -> None:
        for w in self.workers:
            ray.kill(w)
        self.workers.clear()


def spawn(cluster, topo) -> tuple[list, list, tuple[str, int], bool]:
    """(train workers by rank, engine workers, gloo master (host, port), owned) for one job.

    On the launcher's cluster every train rank gets `train_actor_options(rank)` and every
    engine one process on its leader GPU, `engine_actor_options(engine)` (its other GPUs
    stay reserved by the placement group; this engine is a single process).
    """
    if isinstance(cluster, Pool):
        ws = cluster.take(topo.world_size + topo.num_engines)
        return ws[: topo.world_size], ws[topo.world_size :], ("127.0.0.1", _free_port()), False
    train = [Worker.options(**_options(cluster, "train", r)).remote()
             for r in range(topo.world_size)]
    engines = [Worker.options(**_options(cluster, "engine", e)).remote()
               for e in range(topo.num_engines)]
    master = getattr(cluster, "master", None) or ("127.0.0.1", _free_port())
    return train, engines, tuple(master), True


def _options(cluster, kind: str, index: int) -> dict:
    """`miles.ray.Cluster.{train,engine}_actor_options`; none without a cluster."""
    if cluster is None:
        return {}
    return dict(getattr(cluster, f"{kind}_actor_options")(index))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
