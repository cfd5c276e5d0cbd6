"""Generate docs/problem-codes.md from the registry (miles_topology/codes/):

    python tools/gen_codes.py > docs/problem-codes.md

Here, not in the registry's package: the fixers of migrations/ mark their codes fixable, and
the registry is the ground floor every layer imports, so it imports none of them.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from miles_topology.codes import markdown  # noqa: E402
from miles_topology.migrations import fix  # noqa: E402, F401  (its fixers mark their codes)
from miles_topology.reporting.safetext import OUT  # noqa: E402

OUT.text(markdown(), end="")
