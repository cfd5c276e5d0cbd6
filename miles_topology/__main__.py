"""`python -m miles_topology ...`: the same as the `miles-topology` command."""

import sys

from .cli import main

sys.exit(main())
