"""A local multi-node Ray cluster on one machine: one raylet per Topology node.

Logical GPUs stand for real ones, so the embedded default behaves like the multi-node
job it stands for. Each raylet carries a `miles_node_<i>` resource, which pins bundles
to nodes deterministically. Sized small: one CPU and a small object store per raylet.
"""

from __future__ import annotations

import os

from miles.startup import mark

NODE_RESOURCE = "miles_node_{}"
OBJECT_STORE_MB = int(os.environ.get("MILES_RAY_OBJECT_STORE_MB", "100"))


def start_local(nodes: int, gpus: int, cpus: int = 1, timeout_s: float = 60.0):
    """Start `nodes` raylets with `gpus` logical GPUs each; returns a ray.cluster_utils.Cluster."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    common = dict(
        num_cpus=cpus,
        num_gpus=gpus,
        object_store_memory=OBJECT_STORE_MB * 2**20,
    )
    try:
        for i in range(nodes):
            extra = dict(include_dashboard=False) if i == 0 else {}
            cluster.add_node(wait=False, resources={NODE_RESOURCE.format(i): 1}, **common, **extra)
        cluster.wait_for_nodes(timeout=timeout_s)
        mark("cluster start-up: nodes up")
    except BaseException:
        cluster.shutdown()
        raise
    return cluster
