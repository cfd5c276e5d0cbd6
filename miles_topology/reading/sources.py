"""Where a Topology comes from and goes to: flags, a topology YAML, miles' parsed arguments.

The model (model.py) is the floor of the core and imports none of this; reading and writing
live here, one level above it. So that `Topology.from_flags`, `from_yaml` and `from_namespace`
stay where users look for them without the model importing upward, this
module attaches them to the class when it is imported (the package `__init__` imports it, so
they are there before any user code runs; model.py declares them as class variables).

- flags: `read_flags` (a `--topology` YAML under the other topology flags).
- YAML (omegaconf): flat short field names, interpolation, dotlist overrides; `to_yaml`, and
  the JSON Schema editors validate it against (`schema`).
- namespace: miles parses its command line with argparse (Megatron's parser plus miles' and
  the prefixed SGLang arguments), then `miles_validate_args` and SGLang's `validate_args`
  rewrite some of them (the critic sizes under PPO, the rollout GPUs under --colocate,
  sglang_tp_size, sglang_dp_size, the global batch from --num-steps-per-rollout). Reading the
  namespace after that step checks the values miles will use. An attribute is the flag's
  argparse dest (`--actor-num-nodes` -> `actor_num_nodes`); aliases are read when the main
  name is absent or None; a few attributes that Megatron's own validation fills in are read
  first (`ATTRS`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.checks import MEGATRON_ONLY_FLAGS, backend_refused, fsdp_undefined_flags
from ..model.errors import InputError, Problem, TopologyError
from ..model.parts import FIELDS, GROUPS, facts, fields_in, flag_of
from ..model.topology import Topology, summary
from .env import AT_RUN_TIME, PartialEnv
from .flags import RENAMED, TOPOLOGY, Parsed, parse_flags, table, text_of

# ---- flags ------------------------------------------------------------------------------


@dataclass
class FlagRead:
    topology: Topology
    passthrough: list  # every argv token that is not a topology flag, as given
    parsed: Parsed  # which token set each field (`Parsed.origin`)


def read_flags(argv: Sequence[Any], env: Mapping[str, str] | None = None,
               own: Collection[str] = ()) -> FlagRead:
    """Topology flags -> Topology (all problems in one TopologyError); others pass through.

    `env`, when given, resolves `${oc.env:...}` in a `--topology` YAML (see `load_fields`);
    `own`: flags outside miles' surface that the caller reads itself (a launcher's).
    """
    from .stack import current

    parsed = parse_flags(argv, own)
    yaml_path = parsed.topology
    fields = dict(parsed.fields)
    if current().framework != "miles":  # whose parse_args validates the job (placement.py)
        fields["framework"] = current().framework
    errors, warnings = list(parsed.errors), list(parsed.warnings)
    if fields.get("train_only") and fields.get("rollout_only"):
        both = (flag_of("train_only"), flag_of("rollout_only"))
        errors.append(Problem(
            "flag-conflict", "{} and {} exclude each other.".format(*both),
            "keep at most one of {} and {}".format(*both), both))
    errors += lora_refusals(parsed, fields)
    if yaml_path is not None:
        base = load_fields(gated(yaml_path), env=env)
        for name, value in fields.items():
            if name in base and base[name] != value:
                errors.append(Problem(
                    "flag-conflict",
                    f"{yaml_path} sets {name}: {base[name]} but {parsed.given_by.get(name, name)} "
                    f"gives {value}.",
                    f"keep one: edit {name} in {yaml_path}, or drop "
                    f"{parsed.given_by.get(name, flag_of(name))} from the command line",
                    (parsed.given_by.get(name, flag_of(name)), TOPOLOGY)))
        fields = {**base, **fields}
    else:
        base = {}
    if fields.get("train_backend") == "fsdp":
        found, drop = fsdp_refusals(parsed, current())
        errors += [p for p in found if p.severity == "error"]
        warnings += [p for p in found if p.severity != "error"]
        # the size a refused flag gave is not applied (a YAML value of it still is, and warns)
        for name in (n for n in parsed.given_by if n in MEGATRON_ONLY_FLAGS and drop):
            if name in base:
                fields[name] = base[name]
            else:
                fields.pop(name, None)
    try:
        topo = Topology.model_validate(with_files(fields), context={"read": warnings})
    except TopologyError as e:
        raise TopologyError(errors + e.problems, warnings + e.warnings, e.summary) from None
    if errors:
        raise TopologyError(errors, list(topo.warnings), summary(topo))
    return FlagRead(topo, parsed.passthrough, parsed)


def fsdp_refusals(parsed: Parsed, stack: Any) -> tuple[list[Problem], bool]:
    """What the launch's stack does with `--train-backend fsdp` and the Megatron-only flags
    beside it, and whether their sizes are dropped (refused, or the run never starts):

    - miles (31f1ca9 utils/arguments.py:263 offers fsdp): its FSDP parser refuses them
      (checks.fsdp_undefined_flags);
    - a slime read here (--stack, its checkout, installed) whose `--train-backend` choices
      lack fsdp (624b824 utils/arguments.py:1592, since THUDM/slime e4faf63): the value is
      refused (checks.backend_refused); a slime that offers it parses FSDP strictly (before
      96118d0: refused as miles does, unless its own package defines them) or drops unknown
      flags (96118d0 to e4faf63: the sizes then reach the FSDP warning, not applied);
    - a slime not read here (the bundled snapshot): skipped, the slime version unknown."""
    if stack.framework == "miles":
        return fsdp_undefined_flags(parsed.given_by), True
    given = parsed.given_by.get("train_backend", flag_of("train_backend"))
    got = stack.backends()
    if got is None:
        return [backend_refused(stack.framework, None, None, given)], True
    if "fsdp" not in got.choices:
        return [backend_refused(stack.framework, got.choices, f"{got.path}:{got.line}",
                                given)], True
    if got.lenient_fsdp:
        return [], False
    own = frozenset(n for n, (by, _) in stack.added.items()
                    if by.startswith(f"{stack.package or stack.framework} of "))
    return fsdp_undefined_flags(parsed.given_by, stack.framework, own), True


def gated(path: str | Path, limit: int | None = None) -> str:
    """A file a flag names (--topology, a YAML channel), through the gate (gate.py) while an
    input is judged: resolved inside its checkout, or InputError with the reason (what it
    sets is then unknown: the caller's `verdict_of` makes it the input's unreadable note)."""
    from . import gate

    if gate.current() is None:  # the library's own use (miles.train --topology): the user's
        return str(path)
    try:
        return str(gate.find(str(path), limit=limit or gate.AST_LIMIT))
    except gate.Refused as e:
        raise InputError(f"{e}") from None
    except OSError:
        return str(path)  # not there: the reader says so


def refused_topology(tokens: Sequence) -> tuple[list, list[tuple[str, str]]]:
    """`tokens` without each `--topology FILE` the gate refuses (gate.py), and (FILE, why)
    of each: what it would set is left unknown, with the reason; the input is still judged
    (as for a --topology whose value is unknown)."""
    from . import gate

    if gate.current() is None:
        return list(tokens), []
    def text(t) -> str:
        return t if isinstance(t, str) else getattr(t, "text", str(t))  # shell Token

    out, refused, i = [], [], 0
    while i < len(tokens):
        t = text(tokens[i])
        value, n = (text(tokens[i + 1]), 2) if t == TOPOLOGY and i + 1 < len(tokens) else \
            (t.split("=", 1)[1], 1) if t.startswith(TOPOLOGY + "=") else (None, 1)
        if value is not None:
            try:
                gate.find(value, limit=gate.AST_LIMIT)
            except gate.Refused as e:
                refused.append((value, f"{e}; the fields it sets are unknown"))
                i += n
                continue
            except OSError:
                pass  # not there: read_flags says so
        out.append(tokens[i])
        i += 1
    return out, refused


def passed(parsed: Parsed, flag: str) -> str | None:
    """The value the last `flag VALUE` / `flag=VALUE` among the passed-through tokens gives
    (argparse: the last wins), or None."""
    words = [text_of(t) for t in parsed.passthrough]
    got = None
    for i, w in enumerate(words):
        name, eq, inline = w.partition("=")
        if name == flag:
            got = inline if eq else words[i + 1] if i + 1 < len(words) else None
    return got


def lora_refusals(parsed: Parsed, fields: dict) -> list[Problem]:
    """miles 31f1ca9 utils/arguments.py miles_validate_args: under
    `--update-weight-transfer-mode p2p` (and disk-delta), `assert args.lora_rank <= 0, "LoRA
    weight sync is not supported for p2p (RDMA) weight transfer."`."""
    mode = fields.get("transfer_mode")
    rank = passed(parsed, "--lora-rank")
    if mode not in ("p2p", "disk-delta") or rank is None:
        return []
    try:
        if int(rank) <= 0:
            return []
    except ValueError:
        return []
    flag = parsed.given_by.get("transfer_mode", flag_of("transfer_mode"))
    return [Problem(
        "lora-weight-transfer",
        f"--lora-rank {rank} with {flag} {mode}: miles refuses it at start-up (\"LoRA weight "
        f"sync is not supported for {'p2p (RDMA)' if mode == 'p2p' else mode} weight "
        "transfer\").",
        f"use {flag} broadcast for a LoRA run, or drop --lora-rank",
        ("--lora-rank", flag))]


def from_flags(argv: list[str], stack: Any = None) -> Topology:
    """The Topology of a miles command line, e.g. ["--actor-num-nodes", "2", ...].

    Without a stack (`stack=None`, and none set by the caller with `stack.using`) it judges
    the layout only: a flag that is none of ours is not judged against any stack, so a user
    function's flag (`--custom-agent-function-path`) passes, but a near miss of one of ours
    (`--tensor-model-paralel-size 2`, which would leave tp silently 1) is still refused.
    `stack`: a `stack.Stack`, or a checkout / site-packages path, resolved as `check --stack
    PATH` resolves it; flags are then judged against that stack."""
    from .stack import CURRENT, LAYOUT_ONLY, for_launch, using

    if stack is None:
        stack = CURRENT.get() or LAYOUT_ONLY
    elif not hasattr(stack, "framework"):
        stack = for_launch(None, None, [(text_of(t), None) for t in argv],
                           stack_path=str(stack))
    with using(stack):
        return read_flags(argv).topology


# ---- topology YAML ----------------------------------------------------------------------

# Where editors find the JSON Schema of a topology YAML (`miles-topology schema` prints it).
SCHEMA_URL = ("https://raw.githubusercontent.com/radixark/miles-topology/main/docs/"
              "topology.schema.json")
# The names a YAML's ${oc.env:NAME} reads, for listing them (`yamlflags.env_names`); the
# value itself is only ever read through `_resolvers` (whatever the spelling).
ENV_REF = re.compile(r"\$\{\s*oc\.env\s*:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*"
                     r"(?:,([^{}]*))?\}")

# Set while a command judges inputs (check, show, plan, migrate): a YAML resolved with no
# `env` then reads none of this process's environment either (cli.main sets it).
SEALED = False


class _Unknown(Exception):
    pass


class _Unset(Exception):
    pass


_LOCK = threading.RLock()


@contextmanager
def _resolvers(env: Mapping[str, str | None] | None, missing: list):
    """omegaconf's resolvers while a YAML resolves. `env` None (and not SEALED): omegaconf's
    own, so `flags` and `from_yaml` read the process environment at run time. Otherwise only
    omegaconf's built-in resolvers, with `oc.env` replaced by one that reads `env` alone: the
    name arrives parsed (spaces, quotes, a nested ${...}, oc.decode all end here), so no
    spelling reaches os.environ; a custom resolver registered in this process is not offered.
    A name whose value is None in `env`, or not in a PartialEnv, is unknown (`missing`)."""
    if env is None and not SEALED:
        with _LOCK:  # never while another thread's resolve has the table swapped
            yield
        return
    from omegaconf import OmegaConf
    from omegaconf.basecontainer import BaseContainer
    from omegaconf.omegaconf import register_default_resolvers

    env = env if env is not None else PartialEnv(why=AT_RUN_TIME, defaults=True)
    marker = object()

    def oc_env(key: Any, default: Any = marker) -> str | None:
        key = str(key)
        if key in env and env[key] is not None:
            return str(env[key])
        partial = isinstance(env, PartialEnv)
        if key in env or (partial and not (env.defaults and default is not marker)):
            missing.append(key)
            raise _Unknown(key)
        if default is marker:
            missing.append(key)
            raise _Unset(key)
        return None if default is None else str(default)

    with _LOCK:  # the table is omegaconf's, class-wide: swapped for this resolve only
        saved = BaseContainer._resolvers
        try:
            BaseContainer._resolvers = {}
            register_default_resolvers()
            OmegaConf.register_resolver("oc.env", oc_env, replace=True)
            yield
        finally:
            BaseContainer._resolvers = saved


def load_fields(
    path: str | Path, overrides: list[str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Read a topology YAML into plain field values, interpolations resolved.

    With `env`, `${oc.env:VAR,default}` reads `env` (what a launch script exports) instead
    of this process's environment, so reading a script's topology file is reproducible; with
    a `PartialEnv`, a top-level field that reads a name it does not know is left out and
    listed in its `dropped`. Without `env`, the process environment (run time), unless
    SEALED (`_resolvers`).
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = Path(path)
    if env is None and SEALED:
        env = PartialEnv(why=AT_RUN_TIME, defaults=True)
    missing: list[str] = []
    try:
        cfg = OmegaConf.load(path)
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        with _resolvers(env, missing):
            if isinstance(env, PartialEnv) and isinstance(cfg, DictConfig):
                data = _known_fields(cfg, env, missing)
            else:
                data = OmegaConf.to_container(cfg, resolve=True)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OmegaConfBaseException, YAMLError, ValueError, OSError) as e:
        if missing:
            name = missing[-1]
            if env is not None and name in env:
                raise InputError(f"{path} reads {name}, known only at run time") from None
            raise InputError(f"{path}: ${{oc.env:{name}}} is not set and has no default; "
                             f"pass --env {name}=VALUE") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: cannot read the topology YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a topology YAML must be a mapping of field: value")
    return data


def _known_fields(cfg, env: PartialEnv, missing: list) -> dict:
    """Each top-level field resolved on its own: one that reads an unknown name is dropped."""
    from omegaconf import Container, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    out = {}
    for key in cfg:
        try:
            value = cfg[key]
            out[key] = (OmegaConf.to_container(value, resolve=True)
                        if isinstance(value, Container) else value)
        except OmegaConfBaseException:
            if not missing:
                raise
            env.dropped.append(str(key))
            missing.clear()
    return out


def from_yaml(path: str | Path, overrides: list[str] | None = None) -> Topology:
    """The Topology of a topology YAML, with omegaconf dotlist overrides (e.g. ["tp=2"])."""
    return Topology(**with_files(load_fields(path, overrides)))


def to_yaml(topo: Topology) -> str:
    """The fields that differ from their defaults, by group; an implied etp stays implied."""
    lines = [schema_comment()]
    for group in GROUPS:
        body = []
        part = getattr(topo, group)
        for name in fields_in(group):
            info = FIELDS[name]
            value = getattr(part, name)
            if info.default_factory is not None and name not in part.model_fields_set:
                continue  # inferred from other fields, so it stays inferred
            if info.default_factory is None and value == info.default:
                continue
            body.append(f"{name}: {yaml_value(value)}")
        if body:
            lines += [f"# {group}"] + body
    return "\n".join(lines) + "\n"


def yaml_value(value: Any) -> str:
    if isinstance(value, tuple):  # nested tuples (engine groups) as nested flow lists
        return "[" + ", ".join(map(yaml_value, value)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def schema_comment() -> str:
    """The first line of a topology YAML we write: editors validate the file against it."""
    return f"# yaml-language-server: $schema={SCHEMA_URL}"


def schema() -> dict[str, Any]:
    """The JSON Schema of a topology YAML: the model's input fields (derived sizes excluded),
    each described by its docstring and its flag; any value may also be an omegaconf
    interpolation."""
    free = {spec.field for spec in table().values() if spec.kind == "str"}  # parsed from text
    import inspect

    from ..model.parts import PARTS

    props: dict[str, Any] = {}
    for group in GROUPS:  # the parts' fields side by side: the YAML is flat
        part = PARTS[group].model_json_schema()
        assert "$defs" not in part and not part.get("required"), "a flat part has no refs"
        props.update(part["properties"])
    out = {"additionalProperties": False, "description": inspect.cleandoc(Topology.__doc__),
           "properties": props, "title": "Topology", "type": "object"}
    for name, prop in out["properties"].items():
        f = facts(name)
        for key in ("flag", "summary", "switch"):
            prop.pop(key, None)
        shown = f["flag"] or "no flag (YAML only)"
        doc = " ".join(FIELDS[name].description.split())
        prop["description"] = f"{doc} ({shown}; group {f['group']})"
        body = {k: prop.pop(k) for k in list(prop) if k not in ("title", "description",
                                                                  "default")}
        text = {"type": "string"} if name in free else {"type": "string", "pattern": r"\$\{"}
        prop["anyOf"] = [body, text]
    out["title"] = "miles-topology topology YAML"
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return out


def key_lines(path: str | Path) -> dict[str, int]:
    """Top-level key -> its 1-based line in a YAML file (for problems' locations)."""
    from .gate import reread

    text = reread(path)  # the YAML the gate let in, read again for lines
    if text is None:
        return {}
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:", line)  # a flag-like key too
        if m:
            out.setdefault(m.group(1), n)
    return out


# ---- miles' parsed arguments (argparse namespace) ----------------------------------------

# field -> attributes read before the flag's own dest (Megatron's validated names)
ATTRS: dict[str, tuple[str, ...]] = {
    "vpp": ("virtual_pipeline_model_parallel_size",),
}
# field -> the parser default that means "not given" (the model infers from its absence)
UNGIVEN: dict[str, object] = {"node_gpus": 8}


def dest(flag: str) -> str:
    """argparse's attribute name for a flag: its dest in miles' surface (an alias shares
    the main flag's: --sglang-ep -> sglang_ep_size), else the flag's own name."""
    from .surface import flag as upstream

    f = upstream(flag)
    return f.dest if f is not None else flag.lstrip("-").replace("-", "_")


_NONE = object()


def upstream_default(flag: str) -> object:
    """The default miles' parser gives the flag (surface.json), or a marker when unknown."""
    from .surface import flag as upstream

    f = upstream(flag)
    if f is None or f.default is None or f.default == "==SUPPRESS==":
        return _NONE
    return f.default


def fields_from(args: Any) -> dict[str, Any]:
    """Model fields read from a parsed-argument namespace (None and absent values skipped)."""
    out: dict[str, Any] = {}
    for flag, spec in table().items():
        if flag in RENAMED or spec.field in out or not spec.field:
            continue
        for attr in (*ATTRS.get(spec.field, ()), dest(flag)):
            value = getattr(args, attr, None)
            if value is None or UNGIVEN.get(spec.field, object()) == value:
                continue
            if attr == dest(flag) and value == upstream_default(flag):
                # the parser's default: nothing was given. sglang_tp_size holds SGLang's 1
                # until sglang_utils' validate_args overwrites it (after miles_validate_args)
                continue
            if spec.kind == "switch":
                value = spec.values[bool(value)] if spec.values else bool(value)
            elif spec.kind == "list":
                value = tuple(str(v) for v in (value if isinstance(value, list | tuple)
                                               else [value]))
            elif isinstance(value, list):
                value = tuple(value)
            out[spec.field] = value
            break
    return out


def from_namespace(args: Any, log: Any = None) -> Topology:
    """The Topology of miles' parsed arguments (after its own validation rewrote them): one
    line in miles' argument parsing validates the real job. `log`, e.g. `logger.warning`,
    gets each warning's text."""
    topo = Topology(**with_files(fields_from(args)))
    for w in topo.warnings if log is not None else ():
        log(str(w))
    return topo


# ---- files a topology names ---------------------------------------------------------------


def with_files(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with what the files they name hold: a --sglang-config's engine groups (read
    here, so that validating a Topology reads no file)."""
    path = fields.get("sglang_config")
    if path and fields.get("engine_groups") is None:
        fields = {**fields, "engine_groups": read_engine_groups(path)}
    return fields


def read_engine_groups(path: str) -> tuple[tuple[str, str, int, int], ...] | None:
    """The groups of a --sglang-config YAML, or None when it cannot be read (the check that
    needs them is then skipped).

    Format (sglang_config.py `_RawSglangConfig`): `sglang:` (or `models:`) is a list of models,
    each with `name`, an optional `num_gpus_per_engine` and `server_groups` (or `engine_groups`)
    of `worker_type`, `num_gpus` and an optional `num_gpus_per_engine`. A size of 0 here means
    "not given": the group takes its model's, else --rollout-num-gpus-per-engine.
    """
    import yaml

    from . import gate

    try:
        data = yaml.safe_load(gate.read_text(gate.find(path, limit=gate.AST_LIMIT),
                                             limit=gate.AST_LIMIT, errors="strict"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, gate.Refused):  # not here, not YAML
        return None
    try:
        models = data.get("sglang", data.get("models"))
        out = []
        for m in models:
            size = int(m.get("num_gpus_per_engine") or 0)
            for g in m.get("server_groups", m.get("engine_groups")) or []:
                out.append((str(m["name"]), str(g["worker_type"]), int(g["num_gpus"]),
                            int(g.get("num_gpus_per_engine") or size)))
    except (AttributeError, KeyError, TypeError, ValueError):  # YAML, but not of that form
        return None
    return tuple(out)


# ---- the model's doors (see the module docstring) ---------------------------------------

Topology.from_flags = staticmethod(from_flags)
Topology.from_yaml = staticmethod(from_yaml)
Topology.from_namespace = staticmethod(from_namespace)


# ---- channels: YAML files that set arguments after the command line is parsed -------------


@dataclass(frozen=True)
class YamlValue:
    """One top-level `key: value` of a YAML file and the line it is written on."""

    key: str
    value: Any
    path: str
    line: int


def yaml_values(value: str, dirs: Sequence[str | Path] = (), base64: bool = True
                ) -> list[YamlValue] | str:
    """The top-level keys of the YAML a flag names (a path, looked up as given and under
    `dirs`, or, with `base64`, miles' inline `base64:<payload>`: miles/utils/file_arg_utils.py
    resolve_file_arg), read with yaml.safe_load as miles and Megatron-LM's load_yaml read it;
    or why it cannot be read."""
    import yaml

    got = yaml_doc(value, dirs, base64)
    if isinstance(got, str):
        return got
    node, data, where = got
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        return f"{where} is not a mapping of key: value"
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value
             if isinstance(k, yaml.ScalarNode)}
    return [YamlValue(str(k), v, where, lines.get(str(k), 0)) for k, v in data.items()]


# the folder a Python launcher runs in (pylaunch/execute.py, spare.py: its TMPDIR)
SANDBOX = "/miles-topology-launcher-"
# The YAML files a Python launch's flags name in its sandbox's work folder, gone when the
# checker reads the launch: their text as the sandboxed child read it when the launch was
# recorded (pylaunch/child.py _written), {"text": ...}, or why it did not, {"why": ...}; by
# path. Set by read_channels for one launch. The text is the launcher's to choose, as argv is.
WRITTEN: ContextVar[Mapping[str, Mapping[str, str]] | None] = ContextVar("written",
                                                                        default=None)
WRITTEN_BY = "<written by the launcher: "


def written_name(path: str, written: Iterable[str] = ()) -> str:
    """How a YAML the launcher wrote is named: not by its path, which no longer exists, but by
    its shortest tail no other file the launch wrote (`written`) ends in: `cfg.yaml`, or
    `a/cfg.yaml` beside `b/cfg.yaml` (read_channels maps findings back by this name). A
    relative name (`--yaml-cfg cfg.yaml`) is another key of a file, named as that file
    (pylaunch.outcome._files keeps its path under "as"); only the files' own paths count."""
    if isinstance(written, Mapping):
        path = (written.get(path) or {}).get("as", path)
    parts = path.split("/")
    others = [o.split("/") for o in written if o != path and o.startswith("/")]
    n = next((n for n in range(1, len(parts)) if all(o[-n:] != parts[-n:] for o in others)),
             len(parts))
    return f"{WRITTEN_BY}{'/'.join(parts[-n:])}>"


def yaml_doc(value: str, dirs: Sequence[str | Path] = (), base64: bool = True
             ) -> tuple[Any, Any, str] | str:
    """The YAML a flag names as (its node tree, for lines; yaml.safe_load's data; its name),
    read through the gate (inside the input's checkout, bounded; aliases stay shared, never
    expanded), or, for a file a launcher wrote in its sandbox, the text kept (`WRITTEN`,
    never a path opened); or why it cannot be read: not found, refused, not YAML, nested too
    deeply, written in a sandbox now gone."""
    import binascii
    from base64 import b64decode

    import yaml

    kept = (WRITTEN.get() or {}).get(value) or {}
    if isinstance(kept.get("text"), str):
        text, where = kept["text"], written_name(value, WRITTEN.get() or ())
    elif base64 and value.startswith("base64:"):
        try:
            text, where = b64decode(value[7:], validate=True).decode(), "<base64>"
        except (binascii.Error, UnicodeDecodeError) as e:
            return f"its base64 payload does not decode: {e}"
    else:
        from . import gate

        cands = [Path(value)] + [Path(d) / value for d in dirs if not Path(value).is_absolute()]
        refused = None
        for c in cands:  # through the gate: inside the input's checkout, bounded
            try:
                text, where = gate.read_text(gate.find(str(c), limit=gate.AST_LIMIT),
                                             limit=gate.AST_LIMIT), value
                break
            except gate.Refused as e:
                refused = refused or str(e)
            except OSError:
                continue
        else:
            if SANDBOX in value or kept:  # slime's PPO CI tests write a NamedTemporaryFile
                why = f"; it was not read when the launch was recorded: {kept['why']}" \
                    if kept.get("why") else ""
                return f"a file the launcher writes when it runs, gone when its sandbox ends{why}"
            return refused or f"{value} is not found here"
    try:
        return yaml.compose(text), yaml.safe_load(text), where
    except yaml.YAMLError as e:
        return f"{where} is not valid YAML: {str(e).splitlines()[0]}"
    except RecursionError:  # PyYAML composes nested collections recursively
        return f"{where} nests its collections too deeply to read"
