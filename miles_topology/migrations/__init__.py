"""Numbered, self-describing migration steps for miles launch scripts.

Each step module (``m0001_rename_flags``, ``m0002_explicit_and_dead``, ``m0003_consolidate``)
has an ``ID`` ("0001"...), a one-line ``SUMMARY``, a ``migrate(state, reading)`` that
rewrites the script (and the files beside it), and its own before/after fixtures under
``tests/fixtures/migrations/<module>/`` (test data, not shipped). ``runner`` runs every step,
in order (a step that finds nothing to do is not applied: what is pending is read from the
content, not from the ``# miles-topology-migration: 0003`` marker it writes), and proves each
one left the job unchanged. The step list lives in ``runner.STEPS`` so that it is there
however the package is imported.
"""

from .runner import STEPS, migrate

__all__ = ["STEPS", "migrate"]
