"""The reference CPU backend: a miniature miles R3 job on Ray, gloo and megatron-core.

`run_job(topo, cluster, steps, metrics_out, seed, extra)` is what `python -m miles.train`
calls; `cluster` is the launcher's cluster, or a `Pool` whose one host
forks the processes of every job it runs (tests).
"""

from .job import run_job
from .workers import Pool

__all__ = ["Pool", "run_job"]
