"""Arguments set outside the command line: the YAML files a launch names by flag.

- `--custom-config-path FILE` (miles): `miles_validate_args` (miles/utils/arguments.py) reads
  the YAML and `setattr`s every top-level key onto the parsed arguments, after `parse_args`
  computed `args.world_size = actor_num_nodes * actor_num_gpus_per_node` and before
  Megatron's `validate_args`. A model, replay or batch key therefore takes effect (it is read
  here as if given last on the command line, its source the YAML line); a layout or rollout
  key is an error: world size and placement were computed from the command line's values
  before it applies, so the job runs a layout that is neither.
- `--yaml-cfg FILE` (Megatron-LM): `parse_args` (megatron/training/arguments.py) replaces the
  whole parsed namespace with the YAML's top-level keys (yaml_arguments.py `load_yaml`, a
  nested mapping becoming a sub-namespace), before miles' parse_args computes world size from
  it: each top-level key is the value that runs (consistently, so it is read as given last, its
  source the YAML line), a command-line size the YAML lacks is dropped (a warning), and a YAML
  without `actor_num_nodes`/`actor_num_gpus_per_node` at top level makes miles' parse_args
  (miles/utils/arguments.py) raise AttributeError reading them (an error; on slime 624b824
  `hf_checkpoint` too, read first by megatron_parse_args). slime then merges back its
  pre-parsed and SGLang arguments (`SLIME_MERGED`, `--sglang-*`): there the command line's
  values of those win over the YAML's.
- SGLang's `--config` does not reach SGLang through miles or slime: both leave `config` out of
  the `--sglang-*` flags they forward (`_SKIPPED_SERVER_ARGS` in
  backends/sglang_utils/arguments.py); miles' own `--sglang-config` is its engine-group file
  (sources.read_engine_groups), so there is no SGLang config channel to read.
- `--megatron-config-path FILE` (slime only): per-role overrides, read in roles.py; the
  actor's parallel sizes there are what the actor trains with, applied last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..model.errors import Location, Problem
from ..model.parts import FIELDS, facts, flag_of
from .flags import is_switch
from .roles import MEGATRON_CONFIG, read_roles
from .sources import WRITTEN, written_name, yaml_values

CUSTOM_CONFIG = "--custom-config-path"
YAML_CFG = "--yaml-cfg"
TRAIN_BACKEND = "--train-backend"
# what the framework reads first from the namespace --yaml-cfg returned: miles' parse_args
# (miles/utils/arguments.py); slime 624b824 backends/megatron_utils/arguments.py
# megatron_parse_args, right after Megatron's parse_args: `if args.hf_checkpoint and ...`
# (:198), then `args.actor_num_nodes * args.actor_num_gpus_per_node` (:206)
YAML_CFG_READ = {"miles": ("actor_num_nodes", "actor_num_gpus_per_node"),
                 "slime": ("hf_checkpoint", "actor_num_nodes", "actor_num_gpus_per_node")}
# slime 624b824 utils/arguments.py parse_args merges back, after Megatron's parse (which
# --yaml-cfg replaces), the pre-parsed namespace (:1627, _pre_parse_mode) and SGLang's
# (:1631, sglang_parse_args: --sglang-*, --prefill-num-servers): their command line wins
SLIME_MERGED = ("--train-backend", "--debug-rollout-only", "--debug-train-only",
                "--load-debug-rollout-data", "--prefill-num-servers")

LAYOUT_GROUPS = ("layout", "rollout")  # what world size and placement are computed from


def _merged_back(flag: str, framework: str) -> bool:
    return framework == "slime" and (flag.startswith("--sglang-") or flag in SLIME_MERGED)


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
                  dirs: Sequence[str] = (), framework: str = "miles",
                  written: Mapping[str, Mapping[str, str]] | None = None
                  ) -> tuple[list[Problem], list[Word]]:
    """Problems of the launch's YAML channels and the words they add to argv. `pairs`:
    the launch's (flag, value or None when unknown, where it is written). `written`: the
    YAML files a Python launcher wrote in its sandbox, as kept when the launch was recorded
    (sources.WRITTEN): what points at one of their lines points at the launcher's line that
    passed it instead, the file being gone."""
    token = WRITTEN.set(written)
    try:
        problems, words = _read(pairs, dirs, framework)
    finally:
        WRITTEN.reset(token)
    gone = {written_name(v, written or ()): at for _, v, at in pairs
            if v in (written or {}) and at}
    if not gone:
        return problems, words
    return ([p.at(gone[p.location.path]) if p.location and p.location.path in gone else p
             for p in problems],
            [Word(w.text, gone.get(w.source.path, w.source)) for w in words])


def _read(pairs, dirs, framework: str) -> tuple[list[Problem], list[Word]]:
    problems: list[Problem] = []
    words: list[Word] = []
    got = _last(pairs, CUSTOM_CONFIG)
    if got is not None:
        problems, words = _custom_config(got[0], got[1], dirs, framework)
    cfg = _last(pairs, YAML_CFG)
    backend = _last(pairs, TRAIN_BACKEND)
    if cfg is not None and (backend is None or backend[0] != "fsdp"):  # fsdp: no Megatron
        more, cfg_words = _yaml_cfg(cfg[0], cfg[1], dirs, pairs, framework)
        problems += more
        words = cfg_words + words  # miles_validate_args' setattr comes after parse_args
    roles = _last(pairs, MEGATRON_CONFIG)
    if roles is not None and framework == "slime":  # miles' parser refuses the flag
        more, actor = read_roles(roles[0], roles[1], dirs, pairs, _by_dest())
        problems += more
        words += _words(actor)  # applied to a copy of the validated arguments
    return problems, words


def _unread(flag: str, code: str, why: str, at: Location | None) -> Problem:
    """A channel whose file cannot be read: what it sets is not checked (skipped)."""
    return Problem(code, f"{flag} {why}; the arguments it sets are not checked.",
                   "pass its value with --env, or give its path as seen from here",
                   (flag,), "skipped", at)


def _yaml_cfg(value: str | None, at: Location | None, dirs: Sequence[str],
              pairs: Sequence[tuple[str, str | None, Location | None]], framework: str
              ) -> tuple[list[Problem], list[Word]]:
    if value is None:
        return [_unread(YAML_CFG, "yaml-cfg-unread", "is not known here", at)], []
    values = yaml_values(value, dirs, base64=False)  # load_yaml opens a path, nothing else
    if isinstance(values, str):
        return [_unread(YAML_CFG, "yaml-cfg-unread", f"{value}: {values}", at)], []
    problems: list[Problem] = []
    keys = {yv.key for yv in values}
    missing = [k for k in YAML_CFG_READ.get(framework, ()) if k not in keys]
    if missing:
        reader = "slime's megatron_parse_args" if framework == "slime" else \
            f"{framework}' parse_args"
        problems.append(Problem(
            "yaml-cfg-incomplete",
            f"{YAML_CFG} {value}: Megatron-LM's parse_args replaces the parsed arguments with "
            f"the YAML's top-level keys (yaml_arguments.py load_yaml), which has no "
            f"{' or '.join(missing)}, so {reader} fails reading "
            f"args.{missing[0]} (AttributeError).",
            f"drop {YAML_CFG} and give the arguments on the command line, or write every "
            f"argument, {', '.join(missing)} included, at the top level of {value}",
            (YAML_CFG,), location=at))
    kept = [yv for yv in values if yv.key in _by_dest()
            and not _merged_back(flag_of(_by_dest()[yv.key]), framework)]
    words = _words(kept)
    sizes = {flag_of(name) for name in _by_dest().values()}
    dropped = sorted({f for f, _, _ in pairs if f in sizes and not _merged_back(f, framework)}
                     - {flag_of(_by_dest()[k]) for k in keys & _by_dest().keys()})
    if dropped:
        problems.append(Problem(
            "yaml-cfg-replaces-flags",
            f"{YAML_CFG} {value}: Megatron-LM's parse_args replaces every parsed argument with "
            f"the YAML's (yaml_arguments.py load_yaml), which does not set "
            f"{', '.join(dropped)}: the command line's value is dropped, not what runs.",
            f"set them at the top level of {value}, or drop {YAML_CFG}",
            tuple(dropped), location=at))
    return problems, words


def _words(values) -> list[Word]:
    """A YAML key's value as the argv words that set it (a switch as --flag=true/false)."""
    words: list[Word] = []
    for yv in values:
        flag = flag_of(_by_dest()[yv.key])
        loc = Location(yv.path, yv.line)
        if is_switch(flag):
            words.append(Word(f"{flag}={'true' if yv.value else 'false'}", loc))
        else:
            words += [Word(flag, loc), Word(str(yv.value), loc)]
    return words


def _custom_config(value: str | None, at: Location | None, dirs: Sequence[str],
                   framework: str = "miles") -> tuple[list[Problem], list[Word]]:
    """miles 31f1ca9 utils/arguments.py miles_validate_args (resolve_file_arg: a path or an
    inline base64: payload); slime 624b824 utils/arguments.py:2013 slime_validate_args does
    the same setattr, after it filled rollout_num_gpus (:1951), but opens a path only."""
    if value is None:
        return [_unread(CUSTOM_CONFIG, "custom-config-unread", "is not known here", at)], []
    values = yaml_values(value, dirs, base64=framework == "miles")
    if isinstance(values, str):
        return [_unread(CUSTOM_CONFIG, "custom-config-unread", f"{value}: {values}", at)], []
    problems, keep = [], []
    for yv in values:
        name = _by_dest().get(yv.key)
        if name is None:
            continue
        flag = flag_of(name)
        loc = Location(yv.path, yv.line)
        if facts(name)["group"] in LAYOUT_GROUPS:
            problems.append(Problem(
                "custom-config-layout",
                f"{yv.key}: {yv.value} in {yv.path}:{yv.line} is set by {framework}_validate_args "
                "after parse_args computed world size and placement from the command line "
                f"({framework}/utils/arguments.py), so it changes a size the job's layout was "
                "already built from.",
                f"give {flag} {yv.value} on the command line and remove {yv.key} from "
                f"{yv.path}", (flag,), location=loc))
            continue
        keep.append(yv)
    return problems, _words(keep)
