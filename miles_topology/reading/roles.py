"""slime's `--megatron-config-path`: per-role (PPO actor / critic) overrides of the parsed
arguments, judged as slime 624b824 applies them.

- `parse_megatron_role_args` (slime/utils/arguments.py) loads the YAML with yaml.safe_load and
  asserts a top-level `megatron` list; an entry is read with `entry.get("role")`, at most one
  entry a role (assert); its `overrides` (or, when that is empty, the alias `args`) is a
  mapping of argparse attribute names. A YAML that breaks this fails when the role is built:
  the actor always (placement_group.py create_actor_model), the critic only when there is one
  (create_training_models: `args.use_critic and args.num_rollout != 0`, and `use_critic` is
  `advantage_estimator == "ppo"`, arguments.py slime_validate_args).
- `_apply_megatron_role_overrides` deep-copies the validated arguments and `setattr`s each key
  (a string coerced to an int/float attribute's type); `num_nodes` / `num_gpus_per_node` are
  skipped with a log line, and placement takes `args.actor_num_nodes` /
  `args.actor_num_gpus_per_node` of the command line (create_actor_model), so resource keys do
  nothing.
- The role's arguments reach Megatron whole: initialize.py `_initialize_distributed` passes
  their tensor/pipeline/context/expert sizes to `mpu.initialize_model_parallel`. A parallel
  size in the actor's overrides is the layout the actor trains with, so it is applied to the
  judged layout (its source the YAML line) and every rule judges it, except a virtual
  pipeline size: only validate_args reads those keys (`VIRTUAL`, a warning; the count it
  derived from the command line stays under an actor's pp, `_virtual`); but Megatron's
  validate_args checked, and derived its values (data_parallel_size, sequence_parallel off at
  tp 1, expert_tensor_parallel_size = tp when not given, the virtual pipeline size) from, the
  command line's sizes before (a warning). The role keeps those: an actor's tp override gets
  the command line's derived sp and etp in the judged layout (`_kept`), and sequence
  parallel on at the role's tp 1 is not switched off, so megatron-core refuses the role's
  TransformerConfig (an error, `_sp_without_tp`).
- With a critic, the rollout manager splits each batch once, by the data-parallel size of the
  role that reported last (train_actor.py set_rollout_manager; the critic is created after the
  actor), every rank asserts that split has its dp size (utils/data.py process_rollout_data),
  and actor rank i gets critic rank i's values (actor_group.py async_train pairs the workers;
  megatron_utils/actor.py reads them on the last pipeline stage only): actor and critic must
  put each rank at the same data-parallel rank and pipeline stage, or the job fails or trains
  the actor on another shard's values (docs/en/advanced/megatron-config.md: different
  parallel topologies are unsupported).

miles has no such flag (its parser refuses it: unknown-flag), so this reads slime's only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model.errors import Location, Problem
from ..model.grid import ORDERS, Grid
from ..model.parts import FIELDS, flag_of
from .flags import field_of, is_switch
from .sources import SANDBOX, YamlValue, yaml_doc

MEGATRON_CONFIG = "--megatron-config-path"
SP_WITHOUT_TP = "megatron-config-sp-without-tp"
ROLES = ("actor", "critic")
# the Megatron grid's sizes: what `_initialize_distributed` and the model read from the
# role's arguments (the layout part's fields that are not placement or backend)
GRID = ("tp", "pp", "vpp", "vpp_layers", "first_stage_layers", "last_stage_layers",
        "embedding_in_split", "loss_in_split", "cp", "ep", "etp", "sp", "order")
# read only by Megatron-LM's validate_args, which derived args.virtual_pipeline_model_parallel_size
# from the command line before the overrides; slime's initialize.py _initialize_distributed
# and Megatron-LM training.get_model (backends/megatron_utils/model.py:293) read that
VIRTUAL = ("vpp", "vpp_layers")
_VIRTUAL_WHY = ("Megatron's validate_args derived virtual_pipeline_model_parallel_size from the "
                "command line before slime applies the overrides (arguments.py "
                "_apply_megatron_role_overrides), and that is what builds the role's pipeline "
                "(initialize.py _initialize_distributed, Megatron-LM training.get_model).")
# what places a rank on the data-parallel axis and a pipeline stage (the dense grid)
DENSE = ("tp", "cp", "pp", "order")
# skipped by _apply_megatron_role_overrides (its `ignored_keys`); placement reads the
# command line's --actor-num-* (create_actor_model). Not actor_num_nodes and the like: those
# are set on the role's arguments (update_weight_from_tensor.py reads them)
RESOURCES = ("num_nodes", "num_gpus_per_node")
SCALARS = (bool, int, float, str)


class _Broken(Exception):
    """The YAML's structure fails parse_megatron_role_args: the message and its line."""

    def __init__(self, why: str, line: int):
        super().__init__(why)
        self.line = line


def read_roles(value: str | None, at: Location | None, dirs: Sequence[str],
               pairs: Sequence[tuple[str, str | None, Location | None]],
               by_dest: Mapping[str, str]) -> tuple[list[Problem], list[YamlValue]]:
    """Problems of the `--megatron-config-path` YAML, and the actor's overrides of the
    parallel layout (to apply after the command line). `by_dest`: argparse dest -> field."""
    if value is None:
        return [_unread("is not known here", at)], []
    got = yaml_doc(value, dirs, base64=False)  # slime open()s a path, nothing else
    if isinstance(got, str):
        if SANDBOX in value:  # written in a launcher's sandbox, its text not kept
            return [_unread(f"{value}: {got}", at, "write it as a plain file of at most 1 MiB "
                            "(no link) in the launcher's temporary folder, or into the "
                            "checkout, to have it checked")], []
        return [_unread(f"{value}: {got}", at)], []
    node, data, where = got
    critic = _has_critic(pairs)
    try:
        roles = _entries(node, data, where, critic is True)
    except _Broken as e:
        return [_broken(e, where, at, "error")], []
    if critic is None:  # the critic's entry is read only if a critic runs
        try:
            _entries(node, data, where, True)
        except _Broken as e:
            return [_broken(e, where, at, "skipped")], []
    grid_dest = {d: n for d, n in by_dest.items() if n in GRID}
    problems = [*_resources(roles, where), *_topology(roles, where, grid_dest)]
    problems += _sp_without_tp(roles, where, pairs, grid_dest)
    problems += _roles_apart(roles, where, grid_dest, pairs, critic, at)
    actor = [yv for yv in roles.get("actor", {}).values()
             if yv.key in grid_dest and grid_dest[yv.key] not in VIRTUAL
             and isinstance(yv.value, SCALARS)]
    virtual, stale = _virtual(roles.get("actor", {}), pairs, grid_dest)
    return problems + virtual, actor + _kept(roles.get("actor", {}), pairs, grid_dest) + stale


def _broken(e: _Broken, where: str, at: Location | None, severity: str) -> Problem:
    unknown = "" if severity == "error" else "; whether a critic runs is known only at run time"
    return Problem(
        "megatron-config-structure",
        f"{MEGATRON_CONFIG} {where}: {e} (slime/utils/arguments.py parse_megatron_role_args "
        f"fails on it when it builds the role's arguments){unknown}.",
        "write `megatron:` as a list of entries `- role: actor` / `- role: critic`, each with "
        "an `overrides:` mapping of argument names (docs/en/advanced/megatron-config.md)",
        (MEGATRON_CONFIG,), severity, Location(where, e.line) if e.line else at)


def _unread(why: str, at: Location | None,
            fix: str = "pass its value with --env, or give its path as seen from here"
            ) -> Problem:
    return Problem("megatron-config-unread",
                   f"{MEGATRON_CONFIG} {why}; the role overrides it sets are not checked.",
                   fix, (MEGATRON_CONFIG,), "skipped", at)


def _last(pairs, name: str) -> tuple[bool, str | None]:
    """(given, value) of the last flag that sets field `name` (value None: unknown)."""
    got = [v for f, v, _ in pairs if field_of(f) == name or f == name]
    return (True, got[-1]) if got else (False, None)


def _on(pairs, name: str) -> bool | None:
    """Whether the command line turns switch `name` on (None: known only at run time)."""
    given, v = _last(pairs, name)
    if given and v is None:
        return None
    return given and v.lower() not in ("false", "0")


def _size(pairs, name: str) -> int | None:
    """The command line's size `name` (its default when not given; None: known only at run
    time, or not a size)."""
    given, v = _last(pairs, name)
    if not given:
        return FIELDS[name].default if FIELDS[name].default is not None else 1
    return _int(v) if v is not None else None


def _has_critic(pairs) -> bool | None:
    """Whether slime builds a critic: `--advantage-estimator ppo` and `--num-rollout` not 0
    (placement_group.py create_training_models); None when a value is known only at run time."""
    given, est = _last(pairs, "advantage_estimator")
    if given and est is None:
        return None
    if est != "ppo":
        return False
    given, rollouts = _last(pairs, "--num-rollout")
    if given and rollouts is None:
        return None
    return not (given and rollouts.strip() in ("0", "+0", "00"))


def _line(node) -> int:
    return node.start_mark.line + 1 if node is not None else 0


def _pairs(node) -> dict[str, Any]:
    """A mapping node's scalar keys -> (key node, value node); {} when not a mapping."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)}


def _entries(node, data, where: str, with_critic: bool) -> dict[str, dict[str, YamlValue]]:
    """role -> its override key -> YamlValue, checked as parse_megatron_role_args reads it:
    the asserts (a `megatron` key, a list, at most one entry a role) and what its
    `entry.get` and `overrides.items()` need (mappings). Raises _Broken."""
    if not isinstance(data, dict) or "megatron" not in data:
        raise _Broken("there is no top-level `megatron` key (its assert: \"megatron config "
                      "must contain a top-level 'megatron' list\")", _line(node))
    key, seq = _pairs(node).get("megatron", (None, None))
    entries = data["megatron"]
    if not isinstance(entries, list):
        raise _Broken("`megatron` is not a list (its assert: \"megatron config 'megatron' "
                      "field must be a list\")", _line(key))
    nodes = list(getattr(seq, "value", ())) if len(getattr(seq, "value", ())) == len(
        entries) else [None] * len(entries)
    for entry, n in zip(entries, nodes, strict=True):
        if not isinstance(entry, dict):
            raise _Broken("an entry of `megatron` is not a mapping (`entry.get(\"role\")` "
                          "raises AttributeError)", _line(n) or _line(key))
    out: dict[str, dict[str, YamlValue]] = {}
    for role in ROLES[:2 if with_critic else 1]:
        mine = [(e, n) for e, n in zip(entries, nodes, strict=True) if e.get("role") == role]
        if len(mine) > 1:
            raise _Broken(f"{len(mine)} entries have role {role} (its assert: \"must contain "
                          f"at most one entry with role={role}\")", _line(mine[1][1]))
        if mine:
            out[role] = _overrides(*mine[0], where, role)
    return out


def _overrides(entry: dict, node, where: str, role: str) -> dict[str, YamlValue]:
    name = "overrides" if entry.get("overrides") else "args"
    got = entry.get(name) or {}
    key, body = _pairs(node).get(name, (None, None))
    if not isinstance(got, dict):
        raise _Broken(f"the {role} entry's `{name}` is not a mapping (`overrides.items()` "
                      "raises AttributeError)", _line(key) or _line(node))
    bad = next((k for k in got if not isinstance(k, str)), None)
    if bad is not None:  # setattr(role_args, key, value) needs a str
        raise _Broken(f"the {role} entry's `{name}` has a key that is not a name "
                      f"({_shown(bad)}; setattr raises TypeError)", _line(key) or _line(node))
    lines = {k: _line(kn) for k, (kn, _) in _pairs(body).items()}
    return {str(k): YamlValue(str(k), v, where, lines.get(str(k), _line(key)))
            for k, v in got.items()}


def _shown(value: Any) -> str:
    """A scalar as written; a collection by its kind (an alias tree is never walked)."""
    return str(value)[:80] if isinstance(value, SCALARS) else type(value).__name__


def _each(roles) -> list[tuple[str, YamlValue]]:
    """(role, override) of every role read, in the YAML's order."""
    return [(role, yv) for role, keys in roles.items() for yv in keys.values()]


def _resources(roles, where: str) -> list[Problem]:
    return [Problem(
        "megatron-config-resources",
        f"{yv.key}: {_shown(yv.value)} in the {role} entry of {where}:{yv.line} does nothing: "
        "slime skips num_nodes and num_gpus_per_node (arguments.py "
        "_apply_megatron_role_overrides) and places both roles with the command line's "
        "--actor-num-nodes and --actor-num-gpus-per-node (placement_group.py "
        "create_actor_model).",
        f"remove {yv.key} from {where}; size the job on the command line",
        (MEGATRON_CONFIG,), location=Location(where, yv.line))
        for role, yv in _each(roles) if yv.key in RESOURCES]


def _topology(roles, where: str, grid_dest: Mapping[str, str]) -> list[Problem]:
    return [Problem(
        "megatron-config-topology",
        f"{yv.key}: {_shown(yv.value)} in the {role} entry of {where}:{yv.line}: "
        + (f"it does nothing: {_VIRTUAL_WHY}" if grid_dest[yv.key] in VIRTUAL else
           f"the {role} trains with it (slime builds the role's grid and model from its own "
           "arguments: initialize.py _initialize_distributed), but it is applied after "
           f"parse_args validated the command line's {flag} (arguments.py "
           "_apply_megatron_role_overrides), and what Megatron's validate_args derived from "
           "that value (data_parallel_size, sequence_parallel, expert_tensor_parallel_size, "
           "the virtual pipeline size) stays."),
        f"{_on_cli(flag, yv.value)} and remove {yv.key} from {where} (slime's "
        "megatron-config.md: keep topology settings on the CLI)",
        (flag,), location=Location(where, yv.line))
        for role, yv in _each(roles) if yv.key in grid_dest
        for flag in [flag_of(grid_dest[yv.key])]]


def _on_cli(flag: str, value: Any) -> str:
    if not is_switch(flag):
        return f"give {flag} {_shown(value)} on the command line"
    return f"give {flag} on the command line" if value else f"leave {flag} off the command line"


def _role_sp_tp(keys: Mapping[str, YamlValue], pairs, grid_dest
                ) -> tuple[bool | None, int | None, YamlValue | None, YamlValue | None]:
    """A role's sequence parallel and tp as Megatron builds its model, and the overrides
    that set them: an override as slime sets it (a string coerced to the attribute's type:
    bool(str) for the switch), else the command line's after validate_args, which turned
    sequence parallel off at tp 1 (Megatron-LM training/arguments.py validate_args)."""
    by = {grid_dest.get(yv.key): yv for yv in keys.values()}
    sp_yv, tp_yv = by.get("sp"), by.get("tp")
    cli_tp = _size(pairs, "tp")
    tp = _yaml_int(tp_yv.value) if tp_yv else cli_tp
    if sp_yv is not None:
        sp = bool(sp_yv.value)
    else:
        cli_sp = _on(pairs, "sp")
        sp = cli_sp and (None if cli_tp is None else cli_tp != 1)
    return sp, tp, sp_yv, tp_yv


def _sp_without_tp(roles, where: str, pairs, grid_dest) -> list[Problem]:
    """Sequence parallel on at a role's tp 1: validate_args ran before the overrides, so
    nothing switches it off; slime builds the role's model config from its arguments
    (backends/megatron_utils/model_provider.py:134 core_transformer_config_from_args), and
    megatron-core 0.16 ModelParallelConfig.__post_init__ (model_parallel_config.py:409-411,
    run by TransformerConfig.__post_init__) raises ValueError."""
    out = []
    for role, keys in roles.items():
        sp, tp, sp_yv, tp_yv = _role_sp_tp(keys, pairs, grid_dest)
        if not (sp is True and tp == 1) or (sp_yv is None and tp_yv is None):
            continue
        yv = sp_yv or tp_yv
        how = (f"{yv.key}: {_shown(yv.value)} turns it on" if yv is sp_yv else
               f"{yv.key}: {_shown(yv.value)} sets tp 1, and the command line's "
               f"{flag_of('sp')} at {flag_of('tp')} {_size(pairs, 'tp')} was validated on")
        out.append(Problem(
            SP_WITHOUT_TP,
            f"the {role} entry of {where}:{yv.line} leaves sequence parallel on at tensor "
            f"parallel size 1 ({how}): slime applies the overrides after Megatron's "
            "validate_args (which switches it off at tp 1 for the command line only), builds "
            "the role's TransformerConfig from them (model_provider.py "
            "core_transformer_config_from_args), and megatron-core raises ValueError \"Cannot "
            "use sequence parallelism without tensor parallelism\" "
            "(model_parallel_config.py ModelParallelConfig.__post_init__) when the "
            f"{role} starts.",
            f"set `sequence_parallel: false` in the {role} entry of {where}, or keep its "
            "tensor_model_parallel_size above 1",
            (flag_of("sp"), flag_of("tp")), location=Location(where, yv.line)))
    return out


def _kept(keys: Mapping[str, YamlValue], pairs, grid_dest) -> list[YamlValue]:
    """What the actor keeps of validate_args' command-line values when its tp override
    changes tp (the judged layout's sp and etp, at the override's line): sequence parallel
    that validate_args switched off at the command line's tp 1 stays off, and etp, when
    the command line does not give it, stays the command line's tp (Megatron-LM
    training/arguments.py validate_args; slime's initialize.py _initialize_distributed
    passes args.expert_tensor_parallel_size to initialize_model_parallel)."""
    sp, tp, sp_yv, tp_yv = _role_sp_tp(keys, pairs, grid_dest)
    cli_tp = _size(pairs, "tp")
    if tp_yv is None or tp is None or cli_tp is None or tp == cli_tp:
        return []
    by = {grid_dest.get(yv.key) for yv in keys.values()}
    out = []
    if sp_yv is None and sp is False and tp > 1 and _on(pairs, "sp"):
        out.append(YamlValue(_dest(grid_dest, "sp"), False, tp_yv.path, tp_yv.line))
    if "etp" not in by and not _last(pairs, "etp")[0]:
        out.append(YamlValue(_dest(grid_dest, "etp"), cli_tp, tp_yv.path, tp_yv.line))
    return out


def _virtual(keys: Mapping[str, YamlValue], pairs, grid_dest
             ) -> tuple[list[Problem], list[YamlValue]]:
    """The actor's virtual pipeline when its override changes pp under the command line's
    --num-layers-per-virtual-pipeline-stage. Megatron-LM validate_args (1dcf0da, slime's
    docker/Dockerfile pin: training/arguments.py:528-556) asserted the command line's layers
    % pp and layers per stage % that value, then set args.virtual_pipeline_model_parallel_size
    = layers // pp // it (None for 1), before slime's overrides; the count stays. The role's
    _initialize_distributed passes it with the role's pp (megatron-core initialize_model_
    parallel raises RuntimeError at pp 1), training.get_model builds that many chunks, and
    transformer_block.get_num_layers_to_build asserts layers // the role's pp % it == 0. The
    judged layout gets the layers per virtual stage that give that count at the role's pp (at
    the override's line); an error where validate_args or that assert fails. Not read: the
    embedding / loss in the split, uneven stages, slime's --debug-rollout-only (no
    validate_args), a value known only at run time."""
    by = {grid_dest.get(yv.key): yv for yv in keys.values()}
    pp_yv, (given, per), n = by.get("pp"), _last(pairs, "vpp_layers"), _last(pairs, "layers")[1]
    cli_pp, pp = _size(pairs, "pp"), _yaml_int(pp_yv.value) if pp_yv else None
    n, per = _int(n or ""), _int(per or "")
    if not given or None in (pp, n, per, cli_pp) or pp == cli_pp or min(pp, per) < 1 \
            or not _even(by, pairs):
        return [], []
    at = Location(pp_yv.path, pp_yv.line)
    flags = (flag_of("pp"), flag_of("vpp_layers"))
    if n % cli_pp or n // cli_pp % per:
        return [Problem(
            "layers-not-divisible-by-pp",
            f"the command line's {n} layers do not split into {flag_of('pp')} {cli_pp} "
            f"stages of chunks of {flag_of('vpp_layers')} {per} layers: Megatron's "
            "validate_args asserts it on the command line's values, before slime applies "
            f"the actor's {pp_yv.key}: {_shown(pp_yv.value)} (arguments.py "
            "_apply_megatron_role_overrides).",
            f"give {flag_of('vpp_layers')} dividing {n} // {cli_pp} layers, or the actor's "
            "pp on the command line", flags[::-1],
            location=next((w for f, _, w in reversed(pairs) if field_of(f) == "vpp_layers"),
                          None) or at)], []
    count = n // cli_pp // per
    if n % pp or (pp == 1 and count > 1):
        return [], []  # the judged layout's layers-not-divisible-by-pp / vpp-requires-pp
    if count == 1 or n // pp % count == 0:
        return [], [YamlValue(_dest(grid_dest, "vpp_layers"), n // pp // count, at.path,
                              at.line)]
    return [Problem(
        "layers-not-divisible-by-pp",
        f"the actor's {pp_yv.key}: {_shown(pp_yv.value)} leaves {n // pp} layers a stage, "
        f"which do not split into the {count} virtual stages Megatron's validate_args "
        f"derived from the command line ({n} // {flag_of('pp')} {cli_pp} // "
        f"{flag_of('vpp_layers')} {per}) before slime applied the override: megatron-core "
        "get_num_layers_to_build asserts it when the actor builds its model.",
        f"give the actor's pp on the command line (with {flag_of('vpp_layers')}), or keep "
        f"a pp whose {n} // pp layers a stage divide by {count}", flags, location=at)], []


def _even(by: Mapping[str | None, YamlValue], pairs) -> bool:
    """Layers split evenly over the stages, no embedding / loss slot, the virtual pipeline
    given by layers only, and validate_args run (not slime's --debug-rollout-only): what
    `_virtual` models."""
    return not any(name in by or _on(pairs, name) is not False
                   for name in ("embedding_in_split", "loss_in_split", "rollout_only")) \
        and not any(name in by or _last(pairs, name)[0]
                    for name in ("first_stage_layers", "last_stage_layers", "vpp"))


def _dest(grid_dest: Mapping[str, str], name: str) -> str:
    """The argparse name that sets field `name` (the words a judged value becomes)."""
    return next(d for d, n in grid_dest.items() if n == name)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _yaml_int(value: Any) -> int | None:
    """An override's size as slime sets it (a string coerced to int; another type kept)."""
    return _int(value) if isinstance(value, int | str) and not isinstance(value, bool) else None


def _dense(pairs, keys: Mapping[str, YamlValue], grid_dest) -> dict[str, Any] | None:
    """A role's tp, cp, pp, order and world size: the command line's, then its overrides
    (a string coerced as slime does); None when one is known only at run time."""
    # from the flags, not a parsed layout: the judged one is parsed after the channels (their
    # words feed it) and holds the actor's overrides; the critic starts from the command line
    got: dict[str, Any] = {n: _size(pairs, n) for n in ("tp", "cp", "pp", "nodes",
                                                         "gpus_per_node")}
    got["order"] = ORDERS[0] if _on(pairs, "order") is False else ORDERS[1]  # given: on
    for yv in keys.values():
        name = grid_dest.get(yv.key)
        if name == "order":  # set as given (a string coerced: bool(str)), read for truth
            got[name] = ORDERS[1] if yv.value else ORDERS[0]
        elif name in DENSE:
            got[name] = _yaml_int(yv.value)
    if any(v is None or (isinstance(v, int) and v < 1) for v in got.values()):
        return None
    return got


def _places(d: dict[str, Any]) -> tuple[tuple[int, bool], ...] | None:
    """Each global rank's (data-parallel rank, last pipeline stage); None: the world does not
    divide (megatron-core initialize_model_parallel raises RuntimeError)."""
    world = d["nodes"] * d["gpus_per_node"]
    model = d["tp"] * d["cp"] * d["pp"]
    if world % model:
        return None
    g = Grid({"tp": d["tp"], "cp": d["cp"], "ep": 1, "dp": world // model, "pp": d["pp"]},
             d["order"])
    return tuple((c["dp"], c["pp"] == d["pp"] - 1) for c in map(g.coord, range(world)))


def _roles_apart(roles, where: str, grid_dest, pairs, critic: bool | None,
                 at: Location | None) -> list[Problem]:
    """With a critic, both roles' dense grids must put every rank at the same data-parallel
    rank and pipeline stage (see the module docstring)."""
    moved = [yv for _, yv in _each(roles) if grid_dest.get(yv.key) in DENSE]
    if critic is False or not moved:
        return []
    loc = Location(where, moved[0].line)
    flags = tuple(dict.fromkeys(flag_of(grid_dest[yv.key]) for yv in moved))
    fix = ("give the parallel sizes once, on the command line, for both roles "
           "(megatron-config.md: actor and critic must share the parallel topology)")
    actor = _dense(pairs, roles.get("actor", {}), grid_dest)
    critic_d = _dense(pairs, roles.get("critic", {}), grid_dest)
    if critic is None or actor is None or critic_d is None:
        return [Problem("megatron-config-roles-apart",
                        f"{where} overrides {', '.join(yv.key for yv in moved)} for a role; "
                        "whether a critic runs, or a size or the world, is known only at run "
                        "time, so whether actor and critic place ranks alike is not checked.",
                        fix, flags, "skipped", loc)]
    a, c = _places(actor), _places(critic_d)
    if a is None or a == c:
        return []  # the actor's own grid: the layout rules judge it
    shown = "tp {tp} cp {cp} pp {pp}"
    if c is None:
        why = (f"the critic's grid ({shown.format(**critic_d)}) does not divide the world of "
               f"{critic_d['nodes'] * critic_d['gpus_per_node']} GPUs: megatron-core "
               "initialize_model_parallel raises RuntimeError when the critic starts")
    else:
        rank = next(r for r, (x, y) in enumerate(zip(a, c, strict=True)) if x != y)
        why = (f"rank {rank} is data-parallel rank {a[rank][0]}"
               f"{' on the last stage' if a[rank][1] else ''} of the actor "
               f"({shown.format(**actor)}) but {c[rank][0]}"
               f"{' on the last stage' if c[rank][1] else ''} of the critic "
               f"({shown.format(**critic_d)}): slime splits each batch once for both roles "
               "and gives actor rank i critic rank i's values (utils/data.py "
               "process_rollout_data asserts the split's dp size; actor_group.py "
               "async_train), so the job fails or the actor trains on another shard's values")
    return [Problem("megatron-config-roles-apart",
                    f"{MEGATRON_CONFIG} {where} gives actor and critic different layouts: "
                    f"{why}.", fix, flags, location=loc)]
