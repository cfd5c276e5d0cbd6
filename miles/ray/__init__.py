"""Ray placement of a Topology: bundles per (node, GPU) slot, actor options, a local cluster.

Importing this package does not import ray; `start_cluster` does.
"""

from .cluster import Cluster, PlacementTimeout, landing, start_cluster

__all__ = ["Cluster", "PlacementTimeout", "landing", "start_cluster"]
