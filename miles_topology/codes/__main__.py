"""`python -m miles_topology.codes > docs/problem-codes.md`: the registry as markdown."""

from miles_topology.codes import markdown
from miles_topology.migrations import fix  # noqa: F401  (its fixers mark their codes fixable)
from miles_topology.reporting.safetext import OUT

OUT.text(markdown(), end="")
