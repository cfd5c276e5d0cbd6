"""Arguments set outside the command line: the YAML files a launch names by flag.

- `--custom-config-path FILE` (miles): `miles_validate_args` (miles/utils/arguments.py) reads
  the YAML and `setattr`s every top-level key onto the parsed arguments, after `parse_args`
  computed `args.world_size = actor_num_nodes * actor_num_gpus_per_node` and before
  Megatron's `validate_args`. A model, replay or batch key therefore takes effect (it is read
  here as if given last on the command line, its source the YAML line); a layout or rollout
  key is an error: world size and placement were computed from the command line's values
  before it applies, so the job runs a layout that is neither.
- `--yaml-cfg FILE` (Megatron-LM): `parse_args` replaces the whole namespace with the YAML
  (megatron/training/yaml_arguments.py `load_yaml`, "argparse arguments will be ignored"),
  so the command line's sizes are not what runs: a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import Location, Problem
from .flags import is_switch
from .parts import FIELDS, facts, flag_of
from .sources import yaml_values

CUSTOM_CONFIG = "--custom-config-path"
YAML_CFG = "--yaml-cfg"
LAYOUT_GROUPS = ("layout", "rollout")  # what world size and placement are computed from


@dataclass(frozen=True)
class Word:
    """A word a channel adds to the launch's argv, and the YAML line it comes from."""

    text: str
    source: Location


@lru_cache(maxsize=1)
def _by_dest() -> dict[str, str]:
    """argparse dest -> the Topology field its flag sets."""
    from . import surface

    out = {}
    for name in FIELDS:
        flag = flag_of(name)
        if flag:
            f = surface.flag(flag)
            out[f.dest if f is not None else flag[2:].replace("-", "_")] = name
    return out


def _last(pairs: Sequence[tuple[str, Any]], flag: str):
    got = [(v, src) for f, v, src in pairs if f == flag]
    return got[-1] if got else None


def read_channels(pairs: Sequence[tuple[str, str | None, Location | None]],
                  dirs: Sequence[str] = ()) -> tuple[list[Problem], list[Word]]:
    """Problems of the launch's YAML channels and the words they add to argv. `pairs`:
    the launch's (flag, value or None when unknown, where it is written)."""
    problems: list[Problem] = []
    words: list[Word] = []
    got = _last(pairs, CUSTOM_CONFIG)
    if got is not None:
        problems, words = _custom_config(got[0], got[1], dirs)
    cfg = _last(pairs, YAML_CFG)
    if cfg is not None:
        problems.append(Problem(
            "yaml-cfg-replaces-flags",
            f"{YAML_CFG} {cfg[0] or '?'}: Megatron-LM's parse_args replaces every parsed "
            "argument with the YAML's (megatron/training/yaml_arguments.py load_yaml), so "
            "the sizes on the command line are not the ones that run.",
            f"give the sizes on the command line and drop {YAML_CFG}, or check the YAML "
            "itself", (YAML_CFG,), "warning", cfg[1]))
    return problems, words


def _custom_config(value: str | None, at: Location | None, dirs: Sequence[str]
                   ) -> tuple[list[Problem], list[Word]]:
    if value is None:
        return [Problem(
            "custom-config-unread",
            f"{CUSTOM_CONFIG} is not known here, so the arguments its YAML sets after "
            "parsing are not checked.", "pass its value with --env, or check the YAML",
            (CUSTOM_CONFIG,), "skipped", at)], []
    values = yaml_values(value, dirs)
    if isinstance(values, str):
        return [Problem(
            "custom-config-unread",
            f"{CUSTOM_CONFIG} {value}: {values}; the arguments it sets after parsing are "
            "not checked.", "check where the file is, or give its path as seen from here",
            (CUSTOM_CONFIG,), "skipped", at)], []
    problems, words = [], []
    for yv in values:
        name = _by_dest().get(yv.key)
        if name is None:
            continue
        flag = flag_of(name)
        loc = Location(yv.path, yv.line)
        if facts(name)["group"] in LAYOUT_GROUPS:
            problems.append(Problem(
                "custom-config-layout",
                f"{yv.key}: {yv.value} in {yv.path}:{yv.line} is set by miles_validate_args "
                "after parse_args computed world size and placement from the command line "
                "(miles/utils/arguments.py), so it changes a size the job's layout was "
                "already built from.",
                f"give {flag} {yv.value} on the command line and remove {yv.key} from "
                f"{yv.path}", (flag,), "error", loc))
            continue
        if is_switch(flag):
            words.append(Word(f"{flag}={'true' if yv.value else 'false'}", loc))
        else:
            words += [Word(flag, loc), Word(str(yv.value), loc)]
    return problems, words
