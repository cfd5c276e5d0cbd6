"""miles-topology: one validated Topology for every parallel size of a miles MoE RL job.

Importing this package stays light: no torch, ray or megatron.
"""

from .errors import Problem, TopologyError
from .model import Topology

__all__ = ["Problem", "Topology", "TopologyError"]
