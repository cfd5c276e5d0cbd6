"""`Topology`: the one immutable, validated description of a miles job's parallel layout.

Unset values are inferred in one step before validation; cross-field rules run once
after it (see checks.py). Everything else (groups, ownership, placement, layers) is
derived here, from the fields, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

from . import layers as _layers
from . import placement as _placement
from .checks import MEGATRON_SIZES as _MEGATRON_SIZES
from .checks import run_checks
from .errors import Problem, TopologyError
from .flags import flag_of
from .grid import EXPERT_AXES, ORDERS, Grid

GROUPS = ("layout", "rollout", "model", "replay", "batch")


def fact(group: str, flag: str | None, default: Any = 1, *, switch: tuple | None = None,
         factory: Any = None, summary: bool = False, **limits: Any) -> Any:
    """A Topology field with its group and the flag that sets it: the one table of facts.

    Every list of fields (flags, YAML sections, what a migration moves, what `check`
    reports) is derived from these. `switch`: the flag is a switch choosing (off, on);
    `summary`: `check` reports it. Aliases and renamed flags live in flags.py.
    """
    extra: dict[str, Any] = {"group": group, "flag": flag}
    if summary:
        extra["summary"] = True
    if switch is not None:
        extra["switch"] = list(switch)
    if factory is not None:
        return Field(default_factory=factory, json_schema_extra=extra, **limits)
    return Field(default, json_schema_extra=extra, **limits)


def fields_in(*groups: str) -> tuple[str, ...]:
    """Field names of these groups, in declaration order."""
    return tuple(n for n, f in Topology.model_fields.items() if facts(n)["group"] in groups)


def summary_fields() -> tuple[str, ...]:
    """The fields `check` reports (`Topology.summary`)."""
    return tuple(n for n in Topology.model_fields if facts(n).get("summary"))


def facts(name: str) -> dict[str, Any]:
    """{"group", "flag"[, "switch"]} of a field."""
    return Topology.model_fields[name].json_schema_extra  # type: ignore[return-value]


class Topology(BaseModel):
    """Every parallel size of a miles job and the model facts they depend on."""

    # defer_build: the validator is built on first use, which keeps `import` light
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True,
                              defer_build=True)

    # layout: cluster and train grid (the fields of the YAML beside a migrated script)
    nodes: int = fact("layout", "--actor-num-nodes", ge=1, summary=True)
    gpus_per_node: int = fact("layout", "--actor-num-gpus-per-node", 8, ge=1, summary=True)
    node_gpus: int = fact("layout", "--num-gpus-per-node", 8, ge=1)  # physical GPUs per node
    cluster_nodes: int | None = fact("layout", None, None, ge=1)  # the Ray cluster, when known
    use_critic: bool = fact("layout", "--use-critic", False)
    critic_nodes: int | None = fact("layout", "--critic-num-nodes", None, ge=1)
    critic_gpus_per_node: int | None = fact("layout", "--critic-num-gpus-per-node", None, ge=1)
    advantage_estimator: str | None = fact("layout", "--advantage-estimator", None)
    train_backend: Literal["megatron", "fsdp"] = fact("layout", "--train-backend", "megatron")
    dp_replicate: int = fact("layout", "--dp-replicate-size", ge=1)  # FSDP2 hybrid shard
    fsdp_ignored: tuple[tuple[str, int], ...] = fact("layout", None, ())  # inferred
    tp: int = fact("layout", "--tensor-model-parallel-size", ge=1, summary=True)
    pp: int = fact("layout", "--pipeline-model-parallel-size", ge=1, summary=True)
    vpp: int | None = fact("layout", "--num-virtual-stages-per-pipeline-rank", None, ge=1,
                           summary=True)
    vpp_layers: int | None = fact("layout", "--num-layers-per-virtual-pipeline-stage", None,
                                  ge=1)
    first_stage_layers: int | None = fact("layout", "--decoder-first-pipeline-num-layers", None,
                                          ge=0)
    last_stage_layers: int | None = fact("layout", "--decoder-last-pipeline-num-layers", None,
                                         ge=0)
    cp: int = fact("layout", "--context-parallel-size", ge=1, summary=True)
    ep: int = fact("layout", "--expert-model-parallel-size", ge=1, summary=True)
    # not given: Megatron uses etp = tp (`etp_implied`)
    etp: int = fact("layout", "--expert-tensor-parallel-size", factory=lambda d: d.get("tp", 1),
                    summary=True, ge=1)
    sp: bool = fact("layout", "--sequence-parallel", False)
    order: Literal[ORDERS] = fact("layout", "--use-tp-pp-dp-mapping", ORDERS[0], switch=ORDERS,
                                  summary=True)
    # rollout engines
    colocate: bool = fact("rollout", "--colocate", False)
    rollout_gpus: int | None = fact("rollout", "--rollout-num-gpus", None, ge=0, summary=True)
    engine_size: int = fact("rollout", "--rollout-num-gpus-per-engine", ge=1, summary=True)
    engine_ep: int = fact("rollout", "--sglang-ep-size", ge=1)
    engine_dp: int = fact("rollout", "--sglang-dp-size", ge=1)
    dp_attention: bool = fact("rollout", "--sglang-enable-dp-attention", False)
    rollout_external: bool = fact("rollout", "--rollout-external", False)
    external_addrs: tuple[str, ...] | None = fact("rollout", "--rollout-external-engine-addrs",
                                                  None)
    engine_pp: int = fact("rollout", "--sglang-pp-size", ge=1)
    sglang_tp: int | None = fact("rollout", "--sglang-tp-size", None, ge=1)  # miles overwrites
    a2a_backend: str | None = fact("rollout", "--sglang-moe-a2a-backend", None)
    eval_gpus: int = fact("rollout", "--eval-num-gpus", 0, ge=0)
    eval_engine_size: int | None = fact("rollout", "--eval-num-gpus-per-engine", None, ge=1)
    prefill_servers: int | None = fact("rollout", "--prefill-num-servers", None, ge=0)
    sglang_config: str | None = fact("rollout", "--sglang-config", None)
    # (model, worker type, GPUs, GPUs per engine; 0 = not given) per --sglang-config group,
    # read from the file; None: not read
    engine_groups: tuple[tuple[str, str, int, int], ...] | None = fact("rollout", None, None)
    transfer_mode: Literal["broadcast", "p2p", "disk-delta"] | None = fact(
        "rollout", "--update-weight-transfer-mode", None)
    train_only: bool = fact("rollout", "--debug-train-only", False)
    rollout_only: bool = fact("rollout", "--debug-rollout-only", False)
    # model shape (and kernel options that change what the layout must hold)
    layers: int | None = fact("model", "--num-layers", None, ge=1)
    heads: int | None = fact("model", "--num-attention-heads", None, ge=1)
    query_groups: int | None = fact("model", "--num-query-groups", None, ge=1)
    experts: int | None = fact("model", "--num-experts", None, ge=1)
    topk: int = fact("model", "--moe-router-topk", 2, ge=1)
    moe_layer_freq: int | tuple[int, ...] = fact("model", "--moe-layer-freq")
    router_fusion: bool = fact("model", "--moe-router-fusion", False)
    mtp_layers: int | None = fact("model", "--mtp-num-layers", None, ge=0)
    # routing replay
    routing_replay: bool = fact("replay", "--use-routing-replay", False)
    rollout_routing_replay: bool = fact("replay", "--use-rollout-routing-replay", False)
    # batch
    rollout_batch_size: int | None = fact("batch", "--rollout-batch-size", None, ge=1)
    n_samples_per_prompt: int = fact("batch", "--n-samples-per-prompt", ge=1)
    global_batch_size: int | None = fact("batch", "--global-batch-size", None, ge=1)
    micro_batch_size: int = fact("batch", "--micro-batch-size", ge=1)
    dynamic_batch: bool = fact("batch", "--use-dynamic-batch-size", False)
    max_tokens_per_gpu: int | None = fact("batch", "--max-tokens-per-gpu", None, ge=1)
    steps_per_rollout: int | None = fact("batch", "--num-steps-per-rollout", None, ge=1)
    dynamic_global_batch: bool = fact("batch", "--use-dynamic-global-batch-size", False)
    partial_train_step: bool = fact("batch", "--allow-partial-train-step", False)
    no_trim: bool = fact("batch", "--disable-rollout-trim-samples", False)
    data_pad_multiplier: int = fact("batch", "--data-pad-size-multiplier", 128, ge=1)
    balance_data: bool = fact("batch", "--balance-data", False)
    allgather_cp: bool = fact("batch", "--allgather-cp", False)
    qkv_format: Literal["thd", "bshd"] = fact("batch", "--qkv-format", "thd")

    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    # ---- construction ------------------------------------------------------------------

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _as_topology_error(e) from None

    # Every way pydantic offers to build a model validates and raises TopologyError.

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> Topology:
        try:
            return super().model_validate(*args, **kwargs)
        except ValidationError as e:
            raise _as_topology_error(e) from None

    @classmethod
    def model_validate_json(cls, *args: Any, **kwargs: Any) -> Topology:
        try:
            return super().model_validate_json(*args, **kwargs)
        except ValidationError as e:
            raise _as_topology_error(e) from None

    @classmethod
    def model_validate_strings(cls, *args: Any, **kwargs: Any) -> Topology:
        try:
            return super().model_validate_strings(*args, **kwargs)
        except ValidationError as e:
            raise _as_topology_error(e) from None

    @classmethod
    def model_construct(cls, _fields_set: Any = None, **values: Any) -> Topology:
        """Validated like any other construction (a Topology is never unchecked)."""
        return cls(**values)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False
                   ) -> Topology:
        """A new, validated Topology: the given values of this one with `update` on top
        (values inferred here, such as an implied etp, are inferred again)."""
        if not update:
            return self
        data = {name: getattr(self, name) for name in self.model_fields_set}
        return type(self)(**{**data, **update})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).model_fields:
            raise AttributeError(f"a Topology is immutable; use topo.model_copy(update="
                                 f"{{{name!r}: {value!r}}}) for a new, validated one")
        super().__setattr__(name, value)

    def __copy__(self) -> Topology:
        return self

    def __deepcopy__(self, memo: dict | None = None) -> Topology:
        return self

    @field_validator("moe_layer_freq", mode="before")
    @classmethod
    def _parse_freq(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _layers.parse_layer_freq(v)
        if isinstance(v, list):
            return tuple(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _infer(cls, data: Any) -> Any:
        """Fill every value the user may leave unset, the way miles and Megatron do."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("train_backend") == "fsdp":  # FSDP builds its own dp x cp mesh
            ignored = tuple((f, data.pop(f)) for f in _MEGATRON_SIZES
                            if data.get(f) not in (None, 1))
            data["fsdp_ignored"] = ignored + tuple(data.get("fsdp_ignored", ()))
        if "etp" in data and data["etp"] is None:  # not given: the field's factory infers it
            del data["etp"]
        if data.get("experts") == 0:  # Megatron-LM validate_args: num_experts 0 means dense
            data["experts"] = None
        if data.get("rollout_routing_replay"):
            data["routing_replay"] = True
        if data.get("advantage_estimator") is not None:  # miles_validate_args
            data["use_critic"] = data["advantage_estimator"] == "ppo"
        if data.get("external_addrs"):  # engines given by address are external
            data["rollout_external"] = True
        if data.get("rollout_only"):
            # miles_validate_args: colocated without rollout GPUs, they are the actor's; else
            # the actor shape is derived from the rollout GPUs; colocate is then switched off
            if data.get("colocate") and not data.get("rollout_gpus"):
                data["rollout_gpus"] = data.get("nodes", 1) * data.get("gpus_per_node", 8)
            elif data.get("rollout_gpus"):
                data["gpus_per_node"] = min(8, data["rollout_gpus"])
                data["nodes"] = max(1, data["rollout_gpus"] // data["gpus_per_node"])
            data["colocate"] = False
        steps, rbs = data.get("steps_per_rollout"), data.get("rollout_batch_size")
        if steps and rbs and data.get("global_batch_size") is None:
            data["global_batch_size"] = rbs * data.get("n_samples_per_prompt", 1) // steps or None
        if data.get("sglang_config") and data.get("engine_groups") is None:
            data["engine_groups"] = _placement.read_engine_groups(data["sglang_config"])
        return data

    @model_validator(mode="after")
    def _validate(self) -> Topology:
        found = run_checks(self)
        errors = [p for p in found if p.severity == "error"]
        warnings = [p for p in found if p.severity != "error"]  # warnings, then skipped
        if errors:
            raise TopologyError(errors, warnings, self.summary() if self.forms_grid else None)
        self._warnings = tuple(warnings)
        return self

    @classmethod
    def from_flags(cls, argv: list[str]) -> Topology:
        from .sources import from_flags

        return from_flags(argv)

    @classmethod
    def from_namespace(cls, args: Any, log: Any = None) -> Topology:
        """The Topology of miles' parsed arguments (after its own validation rewrote them):
        one line in miles' argument parsing validates the real job (namespace.py). `log`,
        e.g. `logger.warning`, gets each warning's text."""
        from .namespace import fields_from

        topo = cls(**fields_from(args))
        for w in topo.warnings if log is not None else ():
            log(str(w))
        return topo

    @classmethod
    def from_yaml(cls, path: str, overrides: list[str] | None = None) -> Topology:
        from .config import from_yaml

        return from_yaml(path, overrides)

    def to_yaml(self) -> str:
        from .config import to_yaml

        return to_yaml(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @cached_property
    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in type(self).model_fields)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return self._warnings

    @property
    def etp_implied(self) -> bool:
        """Expert TP was not given, so Megatron uses etp = tp."""
        return "etp" not in self.model_fields_set

    @property
    def node_gpus_given(self) -> bool:
        """--num-gpus-per-node was given (else miles' default 8 is assumed, see node_size)."""
        return "node_gpus" in self.model_fields_set

    # ---- sizes (each product defined here, once) ------------------------------------

    @computed_field
    @cached_property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @cached_property
    def dense_model_size(self) -> int:
        return self.tp * self.cp * self.pp

    @cached_property
    def expert_model_size(self) -> int:
        return self.etp * self.ep * self.pp

    @computed_field
    @cached_property
    def dp(self) -> int:
        return self.world_size // self.dense_model_size

    @computed_field
    @cached_property
    def edp(self) -> int:
        return self.world_size // self.expert_model_size

    @property
    def forms_grid(self) -> bool:
        return self.world_size % self.dense_model_size == 0 and (
            self.world_size % self.expert_model_size == 0
        )

    @cached_property
    def chunks(self) -> int:
        """Virtual pipeline stages per pipeline rank (1 without interleaving)."""
        if self.vpp is not None:
            return self.vpp
        if self.vpp_layers is not None and self.layers is not None and self.pp > 1:
            return max(1, self.layers // (self.pp * self.vpp_layers))
        return 1

    # ---- grids and groups ----------------------------------------------------------

    @cached_property
    def dense_grid(self) -> Grid:
        return Grid(dict(tp=self.tp, cp=self.cp, ep=1, dp=self.dp, pp=self.pp), self.order)

    @cached_property
    def expert_grid(self) -> Grid:
        sizes = dict(etp=self.etp, ep=self.ep, edp=self.edp, pp=self.pp)
        return Grid(sizes, self.order, EXPERT_AXES)

    def grid(self, expert: bool = False) -> Grid:
        return self.expert_grid if expert else self.dense_grid

    def rank_groups(self, token: str, expert: bool = False) -> list[list[int]]:
        """Groups for `token` exactly as megatron-core RankGenerator.get_ranks(token).

        The expert grid's axes are etp, ep, edp, pp; Megatron's tokens tp and dp name etp
        and edp there (grid.py maps them).
        """
        return self.grid(expert).groups(token)

    def coord(self, rank: int, expert: bool = False) -> dict[str, int]:
        """Coordinates of a global rank: dense {tp,cp,ep,dp,pp}; expert {etp,ep,edp,pp}."""
        return self.grid(expert).coord(rank)

    def rank(self, expert: bool = False, **coord: int) -> int:
        return self.grid(expert).rank(**coord)

    def megatron_args(self) -> dict[str, Any]:
        """Keyword arguments for megatron-core `parallel_state.initialize_model_parallel`."""
        return dict(
            tensor_model_parallel_size=self.tp,
            pipeline_model_parallel_size=self.pp,
            virtual_pipeline_model_parallel_size=self.chunks if self.chunks > 1 else None,
            context_parallel_size=self.cp,
            expert_model_parallel_size=self.ep,
            expert_tensor_parallel_size=self.etp,
            order=self.order,
        )

    # ---- experts --------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        """An MoE model: experts given and (when layers are known) some MoE layer. An int
        frequency makes layer 0 an MoE layer, so no pattern is built for it."""
        if self.experts is None:
            return False
        if self.layers is None or isinstance(self.moe_layer_freq, int):
            return self.layers is None or self.layers >= 1
        return any(self.moe_layer_freq)

    @property
    def a2a_forces_ep(self) -> bool:
        """SGLang sets engine EP = engine TP for these all-to-all MoE backends
        (python/sglang/srt/server_args.py ServerArgs._handle_a2a_moe: `self.ep_size =
        self.tp_size` for deepep, mooncake, ascend_fuseep, flashinfer and mori)."""
        return self.a2a_backend in ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")

    @cached_property
    def engine_ep_used(self) -> int:
        """The engine EP SGLang really runs (see `a2a_forces_ep`)."""
        return self.engine_size if self.a2a_forces_ep else self.engine_ep

    @cached_property
    def experts_per_rank(self) -> int:
        return (self.experts or 0) // self.ep

    def local_experts(self, rank: int) -> tuple[int, ...]:
        """The ownership rule, stated once: the rank at EP coordinate e of the expert grid
        holds global experts [e*E/ep, (e+1)*E/ep) (megatron-core MoELayer's
        local_expert_indices). Placement, replay, dispatch and weight sync all read it here."""
        per = self.experts_per_rank
        e = self.expert_grid.coord(rank)["ep"]
        return tuple(range(e * per, (e + 1) * per))

    # ---- layers ---------------------------------------------------------------------

    @cached_property
    def moe_pattern(self) -> tuple[bool, ...]:
        if self.experts is None or self.layers is None:
            return ()
        return _layers.moe_pattern(self.layers, self.moe_layer_freq)

    @cached_property
    def stage_counts(self) -> tuple[int, ...] | None:
        if self.layers is None:
            return None
        return _layers.stage_counts(
            self.layers, self.pp, self.first_stage_layers, self.last_stage_layers
        )

    def stage_layers(self, pp_rank: int, vpp_rank: int = 0) -> tuple[int, ...]:
        """Global decoder layer ids of virtual stage (pp_rank, vpp_rank)."""
        if self.stage_counts is None:
            raise TopologyError([_needs("layers", "stage_layers")])
        if not (0 <= pp_rank < self.pp and 0 <= vpp_rank < self.chunks):
            raise IndexError(
                f"stage ({pp_rank}, {vpp_rank}) outside pp={self.pp} x vpp={self.chunks}"
            )
        return tuple(_layers.chunk_layers(self.stage_counts, self.chunks, pp_rank, vpp_rank))

    def replay_layers(self, pp_rank: int) -> tuple[int, ...]:
        """MoE layer ids of a pipeline rank in the order its routers consume replay data."""
        return tuple(
            layer
            for v in range(self.chunks)
            for layer in self.stage_layers(pp_rank, v)
            if self.moe_pattern[layer]
        )

    # ---- placement ------------------------------------------------------------------

    @cached_property
    def node_size(self) -> int:
        """Physical GPUs per node: --num-gpus-per-node when given; else the actor's GPUs per
        node when it spans nodes (what the user evidently has); else miles' default 8."""
        if self.node_gpus_given:
            return self.node_gpus
        return self.gpus_per_node if self.nodes > 1 else max(self.node_gpus, self.gpus_per_node)

    def slot(self, index: int) -> tuple[int, int]:
        """(node, GPU) of position `index` of miles' packed placement group (placement.py)."""
        return divmod(index, self.node_size)

    def placement(self, rank: int) -> tuple[int, int]:
        """(node, GPU) of train rank `rank`: rank r takes position r of the placement group."""
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside the world of {self.world_size} ranks")
        return self.slot(rank)

    @computed_field
    @cached_property
    def rollout_gpu_count(self) -> int:
        # miles_validate_args: --debug-train-only sets rollout_num_gpus = 0 after --colocate
        # copied the actor's GPUs into it, so no rollout engine starts either way
        if self.rollout_external or self.train_only:
            return 0
        if self.colocate:
            return self.world_size
        return self.rollout_gpus or 0

    @cached_property
    def eval_size(self) -> int:
        """GPUs per eval engine: miles' --eval-num-gpus-per-engine defaults to 1, independent
        of --rollout-num-gpus-per-engine (utils/args/configs eval_num_gpus_per_engine)."""
        return self.eval_engine_size or 1

    @cached_property
    def engine_group_list(self) -> tuple[_placement.Group, ...]:
        return _placement.groups(self)

    @cached_property
    def all_engines(self) -> int:
        """Rollout engines, then eval engines."""
        return sum(g.engines for g in self.engine_group_list)

    @computed_field
    @cached_property
    def num_engines(self) -> int:
        """Engines that serve rollout and receive weight updates (eval engines excluded)."""
        return sum(g.engines for g in self.engine_group_list if g.model != "eval")

    @cached_property
    def rollout_offset(self) -> int:
        return _placement.layout(self)[1]

    @cached_property
    def placement_gpus(self) -> int:
        """Bundles in miles' one placement group."""
        return _placement.layout(self)[0]

    def engine_gpus(self, engine: int) -> tuple[tuple[int, int], ...]:
        """(node, GPU) of each GPU of engine `engine` (rollout engines first, then eval)."""
        if not 0 <= engine < self.all_engines:
            raise IndexError(f"engine {engine} outside 0..{self.all_engines - 1}")
        start, size = _placement.engine_span(self, engine)
        return tuple(self.slot(i) for i in range(start, start + size))

    @computed_field
    @cached_property
    def nodes_needed(self) -> int:
        return -(-self.placement_gpus // self.node_size)

    @property
    def gpu_budget(self) -> str:
        parts = [f"actor {self.world_size}"]
        if not self.colocate and self.rollout_gpu_count:
            parts.append(f"rollout {self.rollout_gpu_count}")
        if self.eval_gpus:
            parts.append(f"eval {self.eval_gpus}")
        return " + ".join(parts) + " GPUs"

    # ---- reporting ------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The sizes reported by `check --format json` (also for an invalid topology)."""
        d: dict[str, Any] = {"world_size": self.world_size}
        if self.forms_grid:
            d.update(dp=self.dp, edp=self.edp)
        shown = {"vpp": self.chunks, "rollout_gpus": self.rollout_gpu_count}
        for name in summary_fields():
            d[name] = shown.get(name, getattr(self, name))
        d["num_engines"] = self.num_engines
        return d


def _needs(name: str, what: str) -> Problem:
    return Problem(
        "missing-model-fact",
        f"{what} needs {flag_of(name)}, which was not given.",
        f"add {flag_of(name)}",
        (flag_of(name),),
    )


def _as_topology_error(e: ValidationError) -> TopologyError:
    problems: list[Problem] = []
    warnings: list[Problem] = []
    summary = None
    for err in e.errors():
        if err["type"] == "default_factory_not_called":  # follows from another field's error
            continue
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, TopologyError):
            problems += inner.problems
            warnings += inner.warnings
            summary = inner.summary
            continue
        name = str(err["loc"][0]) if err["loc"] else "topology"
        flag = flag_of(name)
        shown = err.get("input")
        if err["type"] == "extra_forbidden":
            from .flags import near_field

            near = near_field(name, Topology.model_fields)
            problems.append(Problem(
                "unknown-field", f"{name} is not a topology field" +
                (f"; did you mean {near}?" if near else "."),
                f"write {near}" if near else
                f"remove {name}; valid fields: {', '.join(Topology.model_fields)}", (name,)))
        else:
            problems.append(Problem(
                "invalid-flag-value", f"{flag} got {shown!r}: {err['msg'].lower()}.",
                f"give {flag} a valid value (e.g. {flag} 1), or drop it to use the default.",
                (flag,)))
    return TopologyError(problems, warnings, summary)
