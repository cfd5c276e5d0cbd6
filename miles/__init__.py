"""miles: the consumers of the Topology (launcher, Ray placement, Megatron groups, backends).

Importing it stays light: torch, ray and megatron are imported inside the functions that
need them, so the launcher validates a job before paying for them.
"""
