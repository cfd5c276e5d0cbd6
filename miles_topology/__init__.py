"""miles-topology: one validated Topology for every parallel size of a miles MoE RL job.

Importing this package stays light: no torch, ray, megatron or numpy.
"""

# checks registers the rules the model runs; sources attaches Topology.from_* (see both)
from .model import checks  # noqa: F401
from .model.errors import Problem, TopologyError
from .model.topology import Topology
from .reading import sources  # noqa: F401

__version__ = "0.2.0"
__all__ = ["Problem", "Topology", "TopologyError", "__version__"]
