"""Judging a launch: the verdict of a script or launcher, the memory fit and its cost model,
plan ranking and the project's selection of codes."""
