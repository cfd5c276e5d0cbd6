"""`Topology`: the one immutable, validated description of a miles job's parallel layout.

The floor of the core: it imports only the arithmetic below it (errors, grid, layers,
placement, codes), never what reads or checks it. Unset values are inferred in one step
before validation; the rules registered in `codes.RULES` (the checks/ package registers them
when `miles_topology` is imported) run once after it. Everything else (groups, ownership,
placement, layers) is derived here, from the fields, and nowhere else. Each field's flag is a
fact of the field (`fact`); `flag_of` maps a field to it for every message. Reading and
writing (`Topology.from_flags`, `from_yaml`, `from_namespace`, `to_yaml`) live above, in
sources.py, which attaches them here.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Mapping
from functools import cache, cached_property
from typing import Any, ClassVar, Literal

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
from .codes import run_rules
from .errors import Problem, TopologyError
from .grid import EXPERT_AXES, ORDERS, Grid

GROUPS = ("layout", "rollout", "model", "replay", "batch")
# Megatron's parallel sizes, which FSDP has no use for (dropped under FSDP in `_infer`)
MEGATRON_SIZES = ("tp", "pp", "ep", "etp", "vpp", "vpp_layers", "first_stage_layers",
                  "last_stage_layers")


def fact(group: str, flag: str | None, default: Any = 1, *, switch: tuple | None = None,
         factory: Any = None, summary: bool = False, **limits: Any) -> Any:
    """A Topology field with its group and the flag that sets it: the one table of facts.

    Every list of fields (flags, YAML sections, what a migration moves, what `check`
    reports) is derived from these. The docstring under a field says what it is, its
    unit and an example (the JSON Schema's description). `switch`: the flag is a switch
    choosing (off, on); `summary`: `check` reports it. Aliases and renamed flags live in
    flags.py.
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


@cache
def flag_of(name: str) -> str:
    """The user-facing flag of a model field (what messages quote); else the name itself."""
    info = Topology.model_fields.get(name)
    flag = (info.json_schema_extra or {}).get("flag") if info is not None else None
    return flag or name


def near_field(key: str) -> str | None:
    """The field a YAML key most likely means: the field whose flag the key spells
    (`expert-model-parallel-size`, `expert_model_parallel_size`), else difflib's closest
    field name."""
    spelled = "--" + key.strip("-").replace("_", "-")
    fields = list(Topology.model_fields)
    named = [f for f in fields if flag_of(f) == spelled]
    if named:
        return named[0]
    scored = max((difflib.SequenceMatcher(None, key, f).ratio(), f[:1] == key[:1], f)
                 for f in fields)  # ties go to the field with the same first letter
    return scored[2] if scored[0] >= 0.6 else None


class Topology(BaseModel):
    """Every parallel size of a miles job and the model facts they depend on."""

    # defer_build: the validator is built on first use, which keeps `import` light
    # use_attribute_docstrings: the docstring under each field is its description
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True,
                              defer_build=True, use_attribute_docstrings=True)

    # layout: cluster and train grid (the fields of the YAML beside a migrated script)
    nodes: int = fact("layout", "--actor-num-nodes", ge=1, summary=True)
    """Nodes the actor (trainer) asks for, e.g. 2."""
    gpus_per_node: int = fact("layout", "--actor-num-gpus-per-node", 8, ge=1, summary=True)
    """GPUs per node the actor asks for, e.g. 8; world size = nodes x this."""
    node_gpus: int = fact("layout", "--num-gpus-per-node", 8, ge=1)
    """Physical GPUs per node as given (miles' default 8); see node_gpus_used."""
    cluster_nodes: int | None = fact("layout", None, None, ge=1)
    """Nodes of the Ray cluster, when known (YAML only), e.g. 4."""
    use_critic: bool = fact("layout", "--use-critic", False)
    """A PPO critic (old flag; miles now derives it from advantage_estimator)."""
    critic_nodes: int | None = fact("layout", "--critic-num-nodes", None, ge=1)
    """Nodes asked for the critic (miles overwrites it with the actor's), e.g. 2."""
    critic_gpus_per_node: int | None = fact("layout", "--critic-num-gpus-per-node", None, ge=1)
    """GPUs per node asked for the critic (overwritten likewise), e.g. 8."""
    advantage_estimator: str | None = fact("layout", "--advantage-estimator", None)
    """Advantage estimator, e.g. grpo; ppo adds a critic."""
    train_backend: Literal["megatron", "fsdp"] = fact("layout", "--train-backend", "megatron")
    """Trainer backend: megatron (default) or fsdp."""
    dp_replicate: int = fact("layout", "--dp-replicate-size", ge=1)
    """FSDP2 hybrid-shard replicas (world = replicas x shards), e.g. 2."""
    fsdp_ignored: tuple[tuple[str, int], ...] = fact("layout", None, ())
    """Megatron sizes dropped under FSDP, as (field, value) pairs (inferred)."""
    tp: int = fact("layout", "--tensor-model-parallel-size", ge=1, summary=True)
    """Tensor-parallel size of the trainer, in GPUs, e.g. 4."""
    pp: int = fact("layout", "--pipeline-model-parallel-size", ge=1, summary=True)
    """Pipeline-parallel stages of the trainer, e.g. 2."""
    vpp: int | None = fact("layout", "--num-virtual-stages-per-pipeline-rank", None, ge=1,
                           summary=True)
    """Virtual pipeline stages per pipeline rank (interleaving), e.g. 2."""
    vpp_layers: int | None = fact("layout", "--num-layers-per-virtual-pipeline-stage", None,
                                  ge=1)
    """Decoder layers per virtual pipeline stage, e.g. 4."""
    first_stage_layers: int | None = fact("layout", "--decoder-first-pipeline-num-layers", None,
                                          ge=0)
    """Decoder layers of the first pipeline stage (uneven stages), e.g. 3."""
    last_stage_layers: int | None = fact("layout", "--decoder-last-pipeline-num-layers", None,
                                         ge=0)
    """Decoder layers of the last pipeline stage (uneven stages), e.g. 3."""
    cp: int = fact("layout", "--context-parallel-size", ge=1, summary=True)
    """Context-parallel size of the trainer, in GPUs, e.g. 2."""
    ep: int = fact("layout", "--expert-model-parallel-size", ge=1, summary=True)
    """Expert-parallel size of the trainer, in GPUs, e.g. 8."""
    # not given: Megatron uses etp = tp (`etp_implied`)
    etp: int = fact("layout", "--expert-tensor-parallel-size", factory=lambda d: d.get("tp", 1),
                    summary=True, ge=1)
    """Expert tensor-parallel size, e.g. 1; not given: Megatron uses tp (etp_implied)."""
    sp: bool = fact("layout", "--sequence-parallel", False)
    """Sequence parallel on (needed by MoE with tp > 1)."""
    order: Literal[ORDERS] = fact("layout", "--use-tp-pp-dp-mapping", ORDERS[0], switch=ORDERS,
                                  summary=True)
    """Megatron's rank order: tp-cp-ep-dp-pp (default) or tp-cp-ep-pp-dp (the flag)."""
    # rollout engines
    colocate: bool = fact("rollout", "--colocate", False)
    """Rollout engines share the actor's GPUs."""
    rollout_gpus: int | None = fact("rollout", "--rollout-num-gpus", None, ge=0, summary=True)
    """GPUs for rollout engines as given, e.g. 8; see rollout_gpus_used."""
    engine_size: int = fact("rollout", "--rollout-num-gpus-per-engine", ge=1, summary=True)
    """GPUs per rollout engine (the engine's TP), e.g. 4."""
    engine_ep: int = fact("rollout", "--sglang-ep-size", ge=1)
    """Expert-parallel size inside an SGLang engine, e.g. 4."""
    engine_dp: int = fact("rollout", "--sglang-dp-size", ge=1)
    """Data-parallel size inside an SGLang engine, e.g. 2."""
    dp_attention: bool = fact("rollout", "--sglang-enable-dp-attention", False)
    """SGLang DP attention on (needed for engine DP > 1)."""
    rollout_external: bool = fact("rollout", "--rollout-external", False)
    """Rollout engines run outside this job (no GPUs placed for them)."""
    external_addrs: tuple[str, ...] | None = fact("rollout", "--rollout-external-engine-addrs",
                                                  None)
    """Addresses of external engines, e.g. [10.0.0.1:30000]."""
    engine_pp: int = fact("rollout", "--sglang-pp-size", ge=1)
    """Pipeline-parallel size inside an SGLang engine, e.g. 1."""
    sglang_tp: int | None = fact("rollout", "--sglang-tp-size", None, ge=1)
    """SGLang TP as given (miles overwrites it with engine_size), e.g. 4."""
    a2a_backend: str | None = fact("rollout", "--sglang-moe-a2a-backend", None)
    """SGLang MoE all-to-all backend, e.g. deepep (forces engine EP = engine TP)."""
    eval_gpus: int = fact("rollout", "--eval-num-gpus", 0, ge=0)
    """GPUs for eval engines, after the rollout engines, e.g. 2."""
    eval_engine_size: int | None = fact("rollout", "--eval-num-gpus-per-engine", None, ge=1)
    """GPUs per eval engine (miles' default 1), e.g. 2."""
    prefill_servers: int | None = fact("rollout", "--prefill-num-servers", None, ge=0)
    """Prefill engines under prefill/decode disaggregation, e.g. 1."""
    sglang_config: str | None = fact("rollout", "--sglang-config", None)
    """Path of a --sglang-config YAML (engine groups per model)."""
    # (model, worker type, GPUs, GPUs per engine; 0 = not given) per --sglang-config group,
    # read from the file; None: not read
    engine_groups: tuple[tuple[str, str, int, int], ...] | None = fact("rollout", None, None)
    """--sglang-config groups read from its file: (model, worker type, GPUs, GPUs per engine; 0 =
    not given); None: not read."""
    transfer_mode: Literal["broadcast", "p2p", "disk-delta"] | None = fact(
        "rollout", "--update-weight-transfer-mode", None)
    """How weights reach the engines: broadcast, p2p or disk-delta."""
    train_only: bool = fact("rollout", "--debug-train-only", False)
    """Debug: train only, no rollout engine starts."""
    rollout_only: bool = fact("rollout", "--debug-rollout-only", False)
    """Debug: rollout only, no trainer."""
    # model shape (and kernel options that change what the layout must hold)
    layers: int | None = fact("model", "--num-layers", None, ge=1)
    """Decoder layers of the model, e.g. 48."""
    heads: int | None = fact("model", "--num-attention-heads", None, ge=1)
    """Attention heads, e.g. 32."""
    query_groups: int | None = fact("model", "--num-query-groups", None, ge=1)
    """Query (KV) groups of grouped-query attention, e.g. 4."""
    experts: int | None = fact("model", "--num-experts", None, ge=1)
    """Routed experts per MoE layer, e.g. 128; none: a dense model."""
    topk: int = fact("model", "--moe-router-topk", 2, ge=1)
    """Experts each token is routed to, e.g. 8."""
    moe_layer_freq: int | tuple[int, ...] = fact("model", "--moe-layer-freq")
    """Which layers are MoE: every k-th (an int, e.g. 1) or a 0/1 list per layer."""
    router_fusion: bool = fact("model", "--moe-router-fusion", False)
    """Fused router top-k kernel (bypasses routing replay)."""
    mtp_layers: int | None = fact("model", "--mtp-num-layers", None, ge=0)
    """Multi-token-prediction layers, e.g. 1."""
    # routing replay
    routing_replay: bool = fact("replay", "--use-routing-replay", False)
    """Routing replay: the trainer replays recorded routes."""
    rollout_routing_replay: bool = fact("replay", "--use-rollout-routing-replay", False)
    """Rollout routing replay (R3): routes recorded by the engines."""
    # batch
    rollout_batch_size: int | None = fact("batch", "--rollout-batch-size", None, ge=1)
    """Prompts per rollout, e.g. 32."""
    n_samples_per_prompt: int = fact("batch", "--n-samples-per-prompt", ge=1)
    """Samples per prompt, e.g. 8."""
    global_batch_size: int | None = fact("batch", "--global-batch-size", None, ge=1)
    """Samples per optimizer step, e.g. 256."""
    micro_batch_size: int = fact("batch", "--micro-batch-size", ge=1)
    """Samples per micro batch, e.g. 1."""
    dynamic_batch: bool = fact("batch", "--use-dynamic-batch-size", False)
    """Micro batches packed by token count (max_tokens_per_gpu)."""
    max_tokens_per_gpu: int | None = fact("batch", "--max-tokens-per-gpu", None, ge=1)
    """Tokens per GPU in a dynamic micro batch, e.g. 16384."""
    steps_per_rollout: int | None = fact("batch", "--num-steps-per-rollout", None, ge=1)
    """Optimizer steps per rollout, e.g. 1 (sets global_batch_size)."""
    dynamic_global_batch: bool = fact("batch", "--use-dynamic-global-batch-size", False)
    """Global batch set per rollout (needs dynamic_batch)."""
    partial_train_step: bool = fact("batch", "--allow-partial-train-step", False)
    """A last step may take fewer samples than the global batch."""
    no_trim: bool = fact("batch", "--disable-rollout-trim-samples", False)
    """Rollout samples are not trimmed to a multiple of the global batch."""
    data_pad_multiplier: int = fact("batch", "--data-pad-size-multiplier", 128, ge=1)
    """Packed sequences are padded to a multiple of this, in tokens, e.g. 128."""
    balance_data: bool = fact("batch", "--balance-data", False)
    """Samples are balanced over data-parallel ranks by length."""
    allgather_cp: bool = fact("batch", "--allgather-cp", False)
    """Context parallel by all-gather (miles --allgather-cp), not two-chunk slices."""
    qkv_format: Literal["thd", "bshd"] = fact("batch", "--qkv-format", "thd")
    """Attention input layout: thd (packed, default) or bshd."""

    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    # attached by sources.py (reading and writing live above the model; see its docstring)
    from_flags: ClassVar[Callable[[list[str]], Topology]]
    from_yaml: ClassVar[Callable[..., Topology]]
    from_namespace: ClassVar[Callable[[Any], Topology]]
    to_yaml: ClassVar[Callable[[Topology], str]]

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
            ignored = tuple((f, data.pop(f)) for f in MEGATRON_SIZES
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
        found = run_rules(self)
        errors = [p for p in found if p.severity == "error"]
        warnings = [p for p in found if p.severity != "error"]  # warnings, then skipped
        if errors:
            raise TopologyError(errors, warnings, self.summary())  # sizes known, grid or not
        self._warnings = tuple(warnings)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @cached_property
    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in type(self).model_fields)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """Warnings found while validating (tuple of Problem), e.g. etp-implied."""
        return self._warnings

    @property
    def etp_implied(self) -> bool:
        """Expert TP was not given, so Megatron uses etp = tp."""
        return "etp" not in self.model_fields_set

    @property
    def node_gpus_given(self) -> bool:
        """--num-gpus-per-node was given (else miles' default 8 is assumed: node_gpus_used)."""
        return "node_gpus" in self.model_fields_set

    # ---- sizes (each product defined here, once) ------------------------------------

    @computed_field
    @cached_property
    def world_size(self) -> int:
        """Train ranks (GPUs of the actor): nodes x gpus_per_node, e.g. 16."""
        return self.nodes * self.gpus_per_node

    @cached_property
    def dense_model_size(self) -> int:
        """GPUs one dense model replica spans: tp x cp x pp, e.g. 8."""
        return self.tp * self.cp * self.pp

    @cached_property
    def expert_model_size(self) -> int:
        """GPUs one expert model replica spans: etp x ep x pp, e.g. 16."""
        return self.etp * self.ep * self.pp

    @computed_field
    @cached_property
    def dp(self) -> int:
        """Dense data-parallel size: world_size / (tp x cp x pp), e.g. 2."""
        return self.world_size // self.dense_model_size

    @computed_field
    @cached_property
    def edp(self) -> int:
        """Expert data-parallel size: world_size / (etp x ep x pp), e.g. 1."""
        return self.world_size // self.expert_model_size

    @property
    def forms_grid(self) -> bool:
        """Both grids divide the world (dp and edp are whole numbers)."""
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
        """The dense grid (axes tp, cp, ep = 1, dp, pp) in Megatron's order."""
        return Grid(dict(tp=self.tp, cp=self.cp, ep=1, dp=self.dp, pp=self.pp), self.order)

    @cached_property
    def expert_grid(self) -> Grid:
        """The expert grid (axes etp, ep, edp, pp) in Megatron's order."""
        sizes = dict(etp=self.etp, ep=self.ep, edp=self.edp, pp=self.pp)
        return Grid(sizes, self.order, EXPERT_AXES)

    def grid(self, expert: bool = False) -> Grid:
        """The expert grid when `expert`, else the dense grid."""
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
        """The global rank at these coordinates of a grid, e.g. rank(tp=1, dp=0) = 1."""
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
        """Experts each EP rank holds: experts / ep, e.g. 16 (0 for a dense model)."""
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
        """Per decoder layer, whether it is an MoE layer, e.g. (False, True, True)."""
        if self.experts is None or self.layers is None:
            return ()
        return _layers.moe_pattern(self.layers, self.moe_layer_freq)

    @cached_property
    def stage_counts(self) -> tuple[int, ...] | None:
        """Decoder layers per pipeline stage, e.g. (12, 12); None without layers."""
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

    def pipeline_layers(self, pp_rank: int) -> tuple[int, ...]:
        """Every decoder layer id pipeline rank `pp_rank` holds, its virtual stages in order
        (e.g. pp 2, vpp 2, 8 layers: rank 0 holds (0, 1, 4, 5))."""
        return tuple(x for v in range(self.chunks) for x in self.stage_layers(pp_rank, v))

    def replay_layers(self, pp_rank: int) -> tuple[int, ...]:
        """MoE layer ids of a pipeline rank in the order its routers consume replay data."""
        return tuple(x for x in self.pipeline_layers(pp_rank) if self.moe_pattern[x])

    # ---- placement ------------------------------------------------------------------

    @cached_property
    def node_gpus_used(self) -> int:
        """Physical GPUs per node (e.g. 8) miles places on: --num-gpus-per-node when given;
        else the actor's GPUs per node when it spans nodes (what the user evidently has); else
        miles' default 8. (`node_gpus` is the flag as given; `gpus_per_node` the actor's.)"""
        if self.node_gpus_given:
            return self.node_gpus
        return self.gpus_per_node if self.nodes > 1 else max(self.node_gpus, self.gpus_per_node)

    @property
    def node_size(self) -> int:
        """Deprecated: `node_gpus_used`."""
        _moved("node_size", "node_gpus_used")
        return self.node_gpus_used

    @cached_property
    def placement_group(self) -> _placement.Placement:
        """miles' one packed placement group, built once: positions, ranks and engines on
        (node, GPU) and back (placement.py)."""
        return _placement.Placement.of(self)

    def placement(self, rank: int) -> tuple[int, int]:
        """(node, GPU) of train rank `rank`: rank r takes position r of the placement group."""
        return self.placement_group.rank_slot(rank)

    def slot(self, index: int) -> tuple[int, int]:
        """Deprecated: `topo.placement_group.slot(index)`."""
        _moved("slot", "placement_group.slot")
        return self.placement_group.slot(index)

    @computed_field
    @cached_property
    def rollout_gpus_used(self) -> int:
        """GPUs rollout engines really take (e.g. 8): the actor's under --colocate, none with
        external engines or --debug-train-only, else --rollout-num-gpus (`rollout_gpus`, as
        given)."""
        # miles_validate_args: --debug-train-only sets rollout_num_gpus = 0 after --colocate
        # copied the actor's GPUs into it, so no rollout engine starts either way
        if self.rollout_external or self.train_only:
            return 0
        if self.colocate:
            return self.world_size
        return self.rollout_gpus or 0

    @property
    def rollout_gpu_count(self) -> int:
        """Deprecated: `rollout_gpus_used`."""
        _moved("rollout_gpu_count", "rollout_gpus_used")
        return self.rollout_gpus_used

    @cached_property
    def eval_size(self) -> int:
        """GPUs per eval engine: miles' --eval-num-gpus-per-engine defaults to 1, independent
        of --rollout-num-gpus-per-engine (utils/args/configs eval_num_gpus_per_engine)."""
        return self.eval_engine_size or 1

    @property
    def engine_group_list(self) -> tuple[_placement.Group, ...]:
        """Deprecated: `topo.placement_group.groups`."""
        _moved("engine_group_list", "placement_group.groups")
        return self.placement_group.groups

    @property
    def all_engines(self) -> int:
        """Deprecated: `topo.placement_group.engines` (rollout engines, then eval engines)."""
        _moved("all_engines", "placement_group.engines")
        return self.placement_group.engines

    @computed_field
    @cached_property
    def num_engines(self) -> int:
        """Engines that serve rollout and receive weight updates (eval engines excluded)."""
        return self.placement_group.rollout_engines

    @property
    def rollout_offset(self) -> int:
        """Position of the first rollout engine in the placement group (0 when colocated)."""
        return self.placement_group.rollout_offset

    @property
    def placement_gpus(self) -> int:
        """Bundles (GPUs) in miles' one placement group."""
        return self.placement_group.bundles

    def engine_gpus(self, engine: int) -> tuple[tuple[int, int], ...]:
        """(node, GPU) of each GPU of engine `engine` (rollout engines first, then eval)."""
        return self.placement_group.engine_gpus(engine)

    @computed_field
    @cached_property
    def nodes_needed(self) -> int:
        """Nodes of `node_gpus_used` GPUs the placement group fills."""
        return self.placement_group.nodes

    @property
    def gpu_budget(self) -> str:
        """The GPUs the job places, as text, e.g. 'actor 8 + rollout 8 GPUs'."""
        parts = [f"actor {self.world_size}"]
        if not self.colocate and self.rollout_gpus_used:
            parts.append(f"rollout {self.rollout_gpus_used}")
        if self.eval_gpus:
            parts.append(f"eval {self.eval_gpus}")
        return " + ".join(parts) + " GPUs"

    # ---- reporting ------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The sizes reported by `check --format json` (also for an invalid topology)."""
        d: dict[str, Any] = {"world_size": self.world_size}
        if self.forms_grid:
            d.update(dp=self.dp, edp=self.edp)
        shown = {"vpp": self.chunks, "rollout_gpus": self.rollout_gpus_used}
        for name in summary_fields():
            d[name] = shown.get(name, getattr(self, name))
        d["num_engines"] = self.num_engines
        return d


def _moved(old: str, new: str) -> None:
    warnings.warn(f"Topology.{old} is deprecated; use topo.{new}", DeprecationWarning,
                  stacklevel=3)


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
            near = near_field(name)
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
