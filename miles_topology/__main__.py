"""`python -m miles_topology ...`: the same as the `miles-topology` command."""

from .cli import run

run()
