"""The launcher's reference backend reads flags outside miles' surface; exactly those are
exempt from unknown-flag, and only for the launcher."""

from __future__ import annotations

from miles import train
from miles.backend.job import options
from miles_topology.reading import surface
from miles_topology.reading.flags import parse_flags


def test_backend_flags_are_exactly_the_backend_parsers_own():
    own = {f"--{d.replace('_', '-')}" for d in vars(options([]))}  # dests of its flags
    assert set(train.BACKEND_FLAGS) == {f for f in own if surface.flag(f) is None}


def test_backend_flags_pass_for_the_launcher_only():
    argv = ["--colocate", "--no-replay", "--fault", "replay-shift"]
    assert parse_flags(argv, own=train.BACKEND_FLAGS).errors == []
    assert [p.flags for p in parse_flags(argv).errors] == [("--no-replay",), ("--fault",)]
