"""`python -m miles_topology ...`: the same as the `miles-topology` command."""

import sys

from . import spare

spare.start(sys.argv[1:])  # a launcher's sandbox child starts while the rest is imported

from .cli import run  # noqa: E402

run()
