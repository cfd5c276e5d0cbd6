"""The model: a `Topology` (its parts, grid, layers and placement), the rules it is checked by
(checks/), the GPU table, and what is computed from it alone (replay, weight sync).
Imports the standard library, pydantic and `codes` only."""
