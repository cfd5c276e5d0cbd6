"""Megatron-core parallel groups from the Topology, verified before training.

Importing this package does not import torch or megatron; `init_and_verify` does.
"""

from .groups import GroupMismatch, compare, expected, init, init_and_verify, teardown, verify

__all__ = ["GroupMismatch", "compare", "expected", "init", "init_and_verify", "teardown", "verify"]
