"""The fields of a Topology, one frozen part per concern, and the one table of their facts.

Each part (`Layout`, `Rollout`, `Model`, `Replay`, `Batch`) holds the fields of one concern,
each with a comment saying why the topology needs it and a docstring saying what it is (the
JSON Schema's description); a part's derived values that need only its own fields live on it
(`Layout.dp`, `Model.moe_pattern`, ...). The YAML, the flags and the JSON Schema are flat:
`FIELDS` and `GROUP_OF` list every field by its flat name, and `flag_of` gives its flag.
"""

from __future__ import annotations

import difflib
from functools import cache, cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.fields import FieldInfo

from . import layers as _layers
from .grid import ORDERS

GROUPS = ("layout", "rollout", "model", "replay", "batch")
# Megatron's parallel sizes, which FSDP has no use for (dropped under FSDP in `_infer`)
MEGATRON_SIZES = ("tp", "pp", "ep", "etp", "vpp", "vpp_layers", "first_stage_layers",
                  "last_stage_layers")


def fact(flag: str | None, default: Any = 1, *, switch: tuple | None = None,
         factory: Any = None, summary: bool = False, **limits: Any) -> Any:
    """A Topology field with the flag that sets it: the one table of facts.

    Every list of fields (flags, YAML sections, what a migration moves, what `check`
    reports) is derived from these; a field's group is the part that holds it. The
    docstring under a field says what it is, its unit and an example (the JSON Schema's
    description). `switch`: the flag is a switch choosing (off, on); `summary`: `check`
    reports it. Aliases and renamed flags live in flags.py.
    """
    extra: dict[str, Any] = {"flag": flag}
    if summary:
        extra["summary"] = True
    if switch is not None:
        extra["switch"] = list(switch)
    if factory is not None:
        return Field(default_factory=factory, json_schema_extra=extra, **limits)
    return Field(default, json_schema_extra=extra, **limits)


class _Part(BaseModel):
    """One concern of a Topology: frozen, validated, no unknown keys."""

    # defer_build: the validator is built on first use, which keeps `import` light
    # the docstring under each field is its description (`describe_fields`, below)
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True,
                              defer_build=True)

    def __setattr__(self, name: str, value: Any) -> None:
        _immutable(name, value)


def _immutable(name: str, value: Any) -> None:
    raise AttributeError(f"a Topology is immutable; use topo.model_copy(update="
                         f"{{{name!r}: {value!r}}}) for a new, validated one")


class Layout(_Part):
    """The cluster and the trainer's grid (the fields of the YAML beside a migrated script)."""

    # the world size is nodes x gpus_per_node: every grid divides it
    nodes: int = fact("--actor-num-nodes", ge=1, summary=True)
    """Nodes the actor (trainer) asks for, e.g. 2."""
    # the other factor of the world size
    gpus_per_node: int = fact("--actor-num-gpus-per-node", 8, ge=1, summary=True)
    """GPUs per node the actor asks for, e.g. 8; world size = nodes x this."""
    # whose parse_args validates the job: slime keeps a --rollout-num-gpus given with
    # --colocate, miles overwrites it (set from the launch's stack by sources.read_flags)
    framework: Literal["miles", "slime"] = fact(None, "miles")
    """The framework whose parser validates the job: miles (default) or slime."""
    # each dp replica its own Megatron instance: the Megatron world is one replica
    indep_dp: bool = fact("--indep-dp", False)
    """Each data-parallel replica is an independent Megatron instance (world = one replica)."""
    # fault tolerance of the trainer sets indep_dp (`_infer`)
    fault_tolerance: bool = fact("--use-fault-tolerance", False)
    """Fault tolerance on; with the train component it sets indep_dp."""
    # which components are fault tolerant: "train" sets indep_dp (`_infer`)
    ft_components: tuple[str, ...] | None = fact("--ft-components", None)
    """Fault-tolerant components, e.g. [train] (miles' default: [rollout])."""
    # where placement cuts nodes (engines straddling a node, TP groups crossing one)
    node_gpus: int = fact("--num-gpus-per-node", 8, ge=1)
    """Physical GPUs per node as given (miles' default 8); see node_gpus_used."""
    # the GPU budget the job must fit in (gpu-budget-exceeded)
    cluster_nodes: int | None = fact(None, None, ge=1)
    """Nodes of the Ray cluster, when known (YAML only), e.g. 4."""
    # a critic takes its own GPUs in the budget (checks/fsdp.py critic)
    use_critic: bool = fact("--use-critic", False)
    """A PPO critic (old flag; miles now derives it from advantage_estimator)."""
    # what the user asked for the critic, to warn that miles overwrites it
    critic_nodes: int | None = fact("--critic-num-nodes", None, ge=1)
    """Nodes asked for the critic (miles overwrites it with the actor's), e.g. 2."""
    # likewise, the critic's GPUs per node as asked
    critic_gpus_per_node: int | None = fact("--critic-num-gpus-per-node", None, ge=1)
    """GPUs per node asked for the critic (overwritten likewise), e.g. 8."""
    # miles derives use_critic from it (ppo adds a critic)
    advantage_estimator: str | None = fact("--advantage-estimator", None)
    """Advantage estimator, e.g. grpo; ppo adds a critic."""
    # FSDP builds its own mesh and drops Megatron's sizes (`_infer`)
    train_backend: Literal["megatron", "fsdp"] = fact("--train-backend", "megatron")
    """Trainer backend: megatron (default) or fsdp."""
    # the replicate axis of FSDP2's hybrid-shard mesh must divide the world
    dp_replicate: int = fact("--dp-replicate-size", ge=1)
    """FSDP2 hybrid-shard replicas (world = replicas x shards), e.g. 2."""
    # what FSDP dropped, so the check can say it was ignored
    fsdp_ignored: tuple[tuple[str, int], ...] = fact(None, ())
    """Megatron sizes dropped under FSDP, as (field, value) pairs (inferred)."""
    # the dense grid's first axis; heads and query groups split over it
    tp: int = fact("--tensor-model-parallel-size", ge=1, summary=True)
    """Tensor-parallel size of the trainer, in GPUs, e.g. 4."""
    # both grids' pipeline axis; layers split over it
    pp: int = fact("--pipeline-model-parallel-size", ge=1, summary=True)
    """Pipeline-parallel stages of the trainer, e.g. 2."""
    # interleaving: which layers each pipeline rank holds (`stages`)
    vpp: int | None = fact("--num-virtual-stages-per-pipeline-rank", None, ge=1,
                           summary=True)
    """Virtual pipeline stages per pipeline rank (interleaving), e.g. 2."""
    # the other way to ask for interleaving (vpp = layers / (pp x this))
    vpp_layers: int | None = fact("--num-layers-per-virtual-pipeline-stage", None, ge=1)
    """Decoder layers per virtual pipeline stage, e.g. 4."""
    # uneven stages: the first stage's layer count
    first_stage_layers: int | None = fact("--decoder-first-pipeline-num-layers", None, ge=0)
    """Decoder layers of the first pipeline stage (uneven stages), e.g. 3."""
    # uneven stages: the last stage's layer count
    last_stage_layers: int | None = fact("--decoder-last-pipeline-num-layers", None, ge=0)
    """Decoder layers of the last pipeline stage (uneven stages), e.g. 3."""
    # the embedding / the loss counted as one layer each in the pipeline split (megatron-core
    # transformer_block.get_num_layers_to_build): the first / last stage builds one fewer
    embedding_in_split: bool = fact("--account-for-embedding-in-pipeline-split", False)
    """The embedding counts as a layer when layers are split over pipeline stages."""
    loss_in_split: bool = fact("--account-for-loss-in-pipeline-split", False)
    """The loss counts as a layer when layers are split over pipeline stages."""
    # the dense grid's sequence axis; replay rows are cut over it
    cp: int = fact("--context-parallel-size", ge=1, summary=True)
    """Context-parallel size of the trainer, in GPUs, e.g. 2."""
    # the expert grid's expert axis: which experts a rank holds (`local_experts`)
    ep: int = fact("--expert-model-parallel-size", ge=1, summary=True)
    """Expert-parallel size of the trainer, in GPUs, e.g. 8."""
    # the expert grid's first axis; not given: Megatron uses etp = tp (`etp_implied`)
    etp: int = fact("--expert-tensor-parallel-size", factory=lambda d: d.get("tp", 1),
                    summary=True, ge=1)
    """Expert tensor-parallel size, e.g. 1; not given: Megatron uses tp (etp_implied)."""
    # MoE with tp > 1 needs it; replay rows are sliced over tp with it
    sp: bool = fact("--sequence-parallel", False)
    """Sequence parallel on (needed by MoE with tp > 1)."""
    # which ranks share a group: both grids are laid out in this order
    order: Literal[ORDERS] = fact("--use-tp-pp-dp-mapping", ORDERS[0], switch=ORDERS,
                                  summary=True)
    """Megatron's rank order: tp-cp-ep-dp-pp (default) or tp-cp-ep-pp-dp (the flag)."""

    @property
    def etp_implied(self) -> bool:
        """Expert TP was not given, so Megatron uses etp = tp."""
        return "etp" not in self.model_fields_set

    @property
    def node_gpus_given(self) -> bool:
        """--num-gpus-per-node was given (else miles' default 8 is assumed: node_gpus_used)."""
        return "node_gpus" in self.model_fields_set

    @cached_property
    def node_gpus_used(self) -> int:
        """Physical GPUs per node (e.g. 8) miles places on: --num-gpus-per-node when given;
        else the actor's GPUs per node when it spans nodes (what the user evidently has); else
        miles' default 8. (`node_gpus` is the flag as given; `gpus_per_node` the actor's.)"""
        if self.node_gpus_given:
            return self.node_gpus
        return self.gpus_per_node if self.nodes > 1 else max(self.node_gpus, self.gpus_per_node)

    # ---- sizes (each product defined here, once) ------------------------------------

    @cached_property
    def actor_gpus(self) -> int:
        """GPUs of the actor (what it places): nodes x gpus_per_node, e.g. 16."""
        return self.nodes * self.gpus_per_node

    @cached_property
    def world_size(self) -> int:
        """Ranks of the Megatron world, e.g. 16: the actor's GPUs; one replica (tp x cp x pp)
        under indep_dp (miles 31f1ca9 utils/arguments.py:2874 miles_validate_args sets
        args.world_size = compute_megatron_world_size_except_dp(args) before Megatron's
        validate_args derives dp from it: each replica a Megatron instance of dp 1)."""
        return self.dense_model_size if self.indep_dp else self.actor_gpus

    @cached_property
    def dense_model_size(self) -> int:
        """GPUs one dense model replica spans: tp x cp x pp, e.g. 8."""
        return self.tp * self.cp * self.pp

    @cached_property
    def expert_model_size(self) -> int:
        """GPUs one expert model replica spans: etp x ep x pp, e.g. 16."""
        return self.etp * self.ep * self.pp

    @cached_property
    def dp(self) -> int:
        """Dense data-parallel size: world_size / (tp x cp x pp), e.g. 2."""
        return self.world_size // self.dense_model_size

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


# SGLang sets engine EP = engine TP for these all-to-all MoE backends
# (python/sglang/srt/server_args.py ServerArgs._handle_a2a_moe: `self.ep_size = self.tp_size`)
A2A_FORCES_EP = ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")


class Rollout(_Part):
    """The rollout engines: how many GPUs, how each SGLang engine is split, where they run."""

    # engines take the actor's GPUs instead of their own
    colocate: bool = fact("--colocate", False)
    """Rollout engines share the actor's GPUs."""
    # the GPUs the engines take after the trainer's (see Placement.rollout_gpus)
    rollout_gpus: int | None = fact("--rollout-num-gpus", None, ge=0, summary=True)
    """GPUs for rollout engines as given, e.g. 8; see rollout_gpus_used."""
    # GPUs per engine: rollout GPUs split into whole engines of this size
    engine_size: int = fact("--rollout-num-gpus-per-engine", ge=1, summary=True)
    """GPUs per rollout engine (the engine's TP), e.g. 4."""
    # must divide the engine's TP and the experts (sglang-ep-invalid)
    engine_ep: int = fact("--sglang-ep-size", ge=1)
    """Expert-parallel size inside an SGLang engine, e.g. 4."""
    # must divide the engine's TP, and needs DP attention above 1 (sglang-dp-invalid)
    engine_dp: int = fact("--sglang-dp-size", ge=1)
    """Data-parallel size inside an SGLang engine, e.g. 2."""
    # what engine DP > 1 needs
    dp_attention: bool = fact("--sglang-enable-dp-attention", False)
    """SGLang DP attention on (needed for engine DP > 1)."""
    # engines outside the job take no GPUs of its placement group
    rollout_external: bool = fact("--rollout-external", False)
    """Rollout engines run outside this job (no GPUs placed for them)."""
    # engines given by address are external (`_infer`)
    external_addrs: tuple[str, ...] | None = fact("--rollout-external-engine-addrs", None)
    """Addresses of external engines, e.g. [10.0.0.1:30000]."""
    # SGLang's pipeline size inside an engine, checked against its GPUs
    engine_pp: int = fact("--sglang-pp-size", ge=1)
    """Pipeline-parallel size inside an SGLang engine, e.g. 1."""
    # what the user gave, to warn that miles overwrites it (what runs: `sglang_tp_used`)
    sglang_tp: int | None = fact("--sglang-tp-size", None, ge=1)
    """SGLang TP as given (miles overwrites it with engine_size), e.g. 4."""
    # some backends force engine EP = engine TP (`engine_ep_used`)
    a2a_backend: str | None = fact("--sglang-moe-a2a-backend", None)
    """SGLang MoE all-to-all backend, e.g. deepep (forces engine EP = engine TP)."""
    # eval engines take GPUs after the rollout engines
    eval_gpus: int = fact("--eval-num-gpus", 0, ge=0)
    """GPUs for eval engines, after the rollout engines, e.g. 2."""
    # eval engines have their own size (miles' default 1)
    eval_engine_size: int | None = fact("--eval-num-gpus-per-engine", None, ge=1)
    """GPUs per eval engine (miles' default 1), e.g. 2."""
    # prefill/decode disaggregation splits the rollout GPUs into two groups
    prefill_servers: int | None = fact("--prefill-num-servers", None, ge=0)
    """Prefill engines under prefill/decode disaggregation, e.g. 1."""
    # the file that describes the engine groups instead of the flags
    sglang_config: str | None = fact("--sglang-config", None)
    """Path of a --sglang-config YAML (engine groups per model)."""
    # (model, worker type, GPUs, GPUs per engine; 0 = not given) per --sglang-config group,
    # read from the file by sources.py; None: not read
    engine_groups: tuple[tuple[str, str, int, int], ...] | None = fact(None, None)
    """--sglang-config groups read from its file: (model, worker type, GPUs, GPUs per engine; 0 =
    not given); None: not read."""
    # how weights reach the engines decides which sizes must agree
    transfer_mode: Literal["broadcast", "p2p", "disk-delta"] | None = fact(
        "--update-weight-transfer-mode", None)
    """How weights reach the engines: broadcast, p2p or disk-delta."""
    # no engine starts: the rollout GPUs are not placed
    train_only: bool = fact("--debug-train-only", False)
    """Debug: train only, no rollout engine starts."""
    # no trainer: the actor's shape comes from the rollout GPUs (`_infer`)
    rollout_only: bool = fact("--debug-rollout-only", False)
    """Debug: rollout only, no trainer."""

    @property
    def a2a_forces_ep(self) -> bool:
        """SGLang sets engine EP = engine TP for this all-to-all MoE backend (`A2A_FORCES_EP`)."""
        return self.a2a_backend in A2A_FORCES_EP

    # The engine sizes SGLang runs depend on whose launcher sizes the engines: the framework
    # (`Layout.framework`) is an argument, never state of the part
    def sglang_tp_used(self, framework: str) -> int:
        """The TP each engine runs: its GPUs (miles 31f1ca9 backends/sglang_utils/arguments.py
        validate_args), divided by --sglang-pp-size on slime (624b824, same file:173: when PP
        > 1 and it divides them; else slime asserts, `sglang-pp-invalid`)."""
        size, pp = self.engine_size, self.engine_pp
        if framework == "slime" and pp > 1 and size % pp == 0:
            return size // pp
        return size

    def engine_ep_used(self, framework: str) -> int:
        """The engine EP SGLang really runs: the engine TP under an all-to-all backend that
        forces it (`a2a_forces_ep`), else --sglang-ep-size."""
        return self.sglang_tp_used(framework) if self.a2a_forces_ep else self.engine_ep

    @cached_property
    def eval_size(self) -> int:
        """GPUs per eval engine: miles' --eval-num-gpus-per-engine defaults to 1, independent
        of --rollout-num-gpus-per-engine (utils/args/configs eval_num_gpus_per_engine)."""
        return self.eval_engine_size or 1


class Model(_Part):
    """The model's shape, and kernel options that change what the layout must hold."""

    # layers split over pipeline stages (layers-not-divisible-by-pp)
    layers: int | None = fact("--num-layers", None, ge=1)
    """Decoder layers of the model, e.g. 48."""
    # heads split over tp (heads-not-divisible-by-tp)
    heads: int | None = fact("--num-attention-heads", None, ge=1)
    """Attention heads, e.g. 32."""
    # query groups split over tp likewise
    query_groups: int | None = fact("--num-query-groups", None, ge=1)
    """Query (KV) groups of grouped-query attention, e.g. 4."""
    # experts split over ep: the ownership rule (`local_experts`)
    experts: int | None = fact("--num-experts", None, ge=1)
    """Routed experts per MoE layer, e.g. 128; none: a dense model."""
    # the width of a replay row
    topk: int = fact("--moe-router-topk", 2, ge=1)
    """Experts each token is routed to, e.g. 8."""
    # which layers route tokens, so which layers replay (`moe_pattern`)
    moe_layer_freq: int | tuple[int, ...] = fact("--moe-layer-freq")
    """Which layers are MoE: every k-th (an int, e.g. 1) or a 0/1 list per layer."""
    # a fused router bypasses routing replay (r3-router-fusion)
    router_fusion: bool = fact("--moe-router-fusion", False)
    """Fused router top-k kernel (bypasses routing replay)."""
    # MTP layers sit on the last stage and have routers of their own
    mtp_layers: int | None = fact("--mtp-num-layers", None, ge=0)
    """Multi-token-prediction layers, e.g. 1."""

    @field_validator("moe_layer_freq", mode="before")
    @classmethod
    def _parse_freq(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _layers.parse_layer_freq(v)
        if isinstance(v, list):
            return tuple(v)
        return v

    @property
    def is_moe(self) -> bool:
        """An MoE model: experts given and (when layers are known) some MoE layer. An int
        frequency makes layer 0 an MoE layer, so no pattern is built for it."""
        if self.experts is None:
            return False
        if self.layers is None or isinstance(self.moe_layer_freq, int):
            return self.layers is None or self.layers >= 1
        return any(self.moe_layer_freq)

    @cached_property
    def moe_pattern(self) -> tuple[bool, ...]:
        """Per decoder layer, whether it is an MoE layer, e.g. (False, True, True)."""
        if self.experts is None or self.layers is None:
            return ()
        return _layers.moe_pattern(self.layers, self.moe_layer_freq)


class Replay(_Part):
    """Routing replay: the trainer replays routes instead of routing again."""

    # replay needs MoE layers and an unfused router (r3-requires-moe, r3-router-fusion)
    routing_replay: bool = fact("--use-routing-replay", False)
    """Routing replay: the trainer replays recorded routes."""
    # R3: the engines record the routes; implies routing_replay (`_infer`)
    rollout_routing_replay: bool = fact("--use-rollout-routing-replay", False)
    """Rollout routing replay (R3): routes recorded by the engines."""


class Batch(_Part):
    """The batch sizes: how samples split over data-parallel ranks, steps and micro batches."""

    # samples per rollout = this x n_samples_per_prompt
    rollout_batch_size: int | None = fact("--rollout-batch-size", None, ge=1)
    """Prompts per rollout, e.g. 32."""
    # the other factor of the samples per rollout
    n_samples_per_prompt: int = fact("--n-samples-per-prompt", ge=1)
    """Samples per prompt, e.g. 8."""
    # a step's samples split over dp ranks and micro batches
    global_batch_size: int | None = fact("--global-batch-size", None, ge=1)
    """Samples per optimizer step, e.g. 256."""
    # a rank's step splits into micro batches of this size
    micro_batch_size: int = fact("--micro-batch-size", ge=1)
    """Samples per micro batch, e.g. 1."""
    # micro batches packed by tokens instead (replay plan, batch checks)
    dynamic_batch: bool = fact("--use-dynamic-batch-size", False)
    """Micro batches packed by token count (max_tokens_per_gpu)."""
    # what a dynamic micro batch may hold
    max_tokens_per_gpu: int | None = fact("--max-tokens-per-gpu", None, ge=1)
    """Tokens per GPU in a dynamic micro batch, e.g. 16384."""
    # sets global_batch_size (`_infer`)
    steps_per_rollout: int | None = fact("--num-steps-per-rollout", None, ge=1)
    """Optimizer steps per rollout, e.g. 1 (sets global_batch_size)."""
    # the global batch is set per rollout, which needs dynamic_batch
    dynamic_global_batch: bool = fact("--use-dynamic-global-batch-size", False)
    """Global batch set per rollout (needs dynamic_batch)."""
    # a last step may be short, so the batch need not divide the rollout
    partial_train_step: bool = fact("--allow-partial-train-step", False)
    """A last step may take fewer samples than the global batch."""
    # samples are not trimmed to whole steps
    no_trim: bool = fact("--disable-rollout-trim-samples", False)
    """Rollout samples are not trimmed to a multiple of the global batch."""
    # packed sequences are padded to it (replay rows per micro batch)
    data_pad_multiplier: int = fact("--data-pad-size-multiplier", 128, ge=1)
    """Packed sequences are padded to a multiple of this, in tokens, e.g. 128."""
    # samples balanced by length change which rank takes which sample (replay plan)
    balance_data: bool = fact("--balance-data", False)
    """Samples are balanced over data-parallel ranks by length."""
    # all-gather CP slices the sequence differently (the replay plan refuses it)
    allgather_cp: bool = fact("--allgather-cp", False)
    """Context parallel by all-gather (miles --allgather-cp), not two-chunk slices."""
    # bshd is not packed (the replay plan refuses it)
    qkv_format: Literal["thd", "bshd"] = fact("--qkv-format", "thd")
    """Attention input layout: thd (packed, default) or bshd."""


def describe_fields(*models: type[BaseModel]) -> None:
    """The string under each field of `models` (classes of one module) as its description,
    read with one parse of the module's source. pydantic's use_attribute_docstrings does the
    same a class at a time, searching the source for each: a fifth of this package's import
    time. Runs before any schema is built (the models defer theirs)."""
    import ast
    import inspect
    import sys

    try:
        with open(sys.modules[models[0].__module__].__file__ or "", encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return  # no source here (a frozen build): fields stay undescribed, as pydantic's would
    wanted = {m.__name__: m for m in models}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in wanted:
            continue
        fields = wanted[node.name].model_fields
        for a, b in zip(node.body, node.body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and \
                    isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and \
                    isinstance(b.value.value, str) and a.target.id in fields and \
                    fields[a.target.id].description is None:
                fields[a.target.id].description = inspect.cleandoc(b.value.value)


describe_fields(Layout, Rollout, Model, Replay, Batch)
PARTS: dict[str, type[_Part]] = {"layout": Layout, "rollout": Rollout, "model": Model,
                                  "replay": Replay, "batch": Batch}
# every field, flat, in declaration order: field -> its part (the YAML, flags, schema)
GROUP_OF: dict[str, str] = {n: g for g, part in PARTS.items() for n in part.model_fields}
FIELDS: dict[str, FieldInfo] = {n: PARTS[g].model_fields[n] for n, g in GROUP_OF.items()}


def fields_in(*groups: str) -> tuple[str, ...]:
    """Field names of these groups, in declaration order."""
    return tuple(n for n, g in GROUP_OF.items() if g in groups)


def summary_fields() -> tuple[str, ...]:
    """The fields `check` reports (`summary`)."""
    return tuple(n for n in FIELDS if facts(n).get("summary"))


def facts(name: str) -> dict[str, Any]:
    """{"group", "flag"[, "summary", "switch"]} of a field."""
    return {"group": GROUP_OF[name], **FIELDS[name].json_schema_extra}  # type: ignore[dict-item]


@cache
def flag_of(name: str) -> str:
    """The user-facing flag of a model field (what messages quote); else the name itself."""
    info = FIELDS.get(name)
    flag = (info.json_schema_extra or {}).get("flag") if info is not None else None
    return flag or name


def near_field(key: str) -> str | None:
    """The field a YAML key most likely means: the field whose flag the key spells
    (`expert-model-parallel-size`, `expert_model_parallel_size`), else difflib's closest
    field name."""
    spelled = "--" + key.strip("-").replace("_", "-")
    fields = list(FIELDS)
    named = [f for f in fields if flag_of(f) == spelled]
    if named:
        return named[0]
    scored = max((difflib.SequenceMatcher(None, key, f).ratio(), f[:1] == key[:1], f)
                 for f in fields)  # ties go to the field with the same first letter
    return scored[2] if scored[0] >= 0.6 else None
