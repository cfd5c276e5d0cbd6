"""miles-topology: one validated Topology for every parallel size of a miles MoE RL job.

Importing this package stays light: no torch, ray, megatron or numpy.
"""

from .errors import Problem, TopologyError
from .model import Topology

__version__ = "0.2.0"
__all__ = ["Problem", "Topology", "TopologyError", "__version__"]
