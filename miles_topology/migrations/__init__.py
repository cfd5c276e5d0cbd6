"""Numbered, self-describing migration steps for miles launch scripts.

Each step module (``m0001_rename_flags``, ``m0002_explicit_and_dead``, ``m0003_consolidate``)
has an ``ID`` ("0001"...), a one-line ``SUMMARY``, a ``migrate(state, reading)`` that
rewrites the script (and the files beside it), and its own before/after fixtures under
``migrations/fixtures/<module>/``. ``runner`` applies the steps a script has not had yet, in
order, proves each one left the topology unchanged, and records the last applied ID in the
script (``# miles-topology-migration: 0003``). The step list lives in ``runner.STEPS`` so
that it is there however the package is imported.
"""

from .runner import STEPS, migrate

__all__ = ["STEPS", "migrate"]
