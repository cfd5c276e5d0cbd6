"""`Topology`: the one immutable, validated description of a miles job's parallel layout.

Unset values are inferred in one step before validation; cross-field rules run once
after it (see checks.py). Everything else (groups, ownership, placement, layers) is
derived here, from the fields, and nowhere else.
"""

from __future__ import annotations

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
from .checks import run_checks
from .errors import Problem, TopologyError
from .flags import flag_of
from .grid import ORDERS, Grid

Pos = Field(default=1, ge=1)
_MEGATRON_SIZES = ("tp", "pp", "ep", "etp", "vpp", "vpp_layers", "first_stage_layers",
                   "last_stage_layers")

class Topology(BaseModel):
    """Every parallel size of a miles job and the model facts they depend on."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # cluster
    nodes: int = Pos
    gpus_per_node: int = Field(default=8, ge=1)
    node_gpus: int = Field(default=8, ge=1)  # physical GPUs per node (--num-gpus-per-node)
    node_gpus_given: bool = False  # inferred: --num-gpus-per-node was given
    cluster_nodes: int | None = Field(default=None, ge=1)
    use_critic: bool = False
    critic_nodes: int | None = Field(default=None, ge=1)
    critic_gpus_per_node: int | None = Field(default=None, ge=1)
    advantage_estimator: str | None = None
    train_backend: Literal["megatron", "fsdp"] = "megatron"
    dp_replicate: int = Pos  # FSDP2 hybrid-shard replicas (--dp-replicate-size)
    fsdp_ignored: tuple[tuple[str, int], ...] = ()  # inferred: Megatron sizes FSDP ignores
    # train grid
    tp: int = Pos
    pp: int = Pos
    vpp: int | None = Field(default=None, ge=1)
    vpp_layers: int | None = Field(default=None, ge=1)
    cp: int = Pos
    ep: int = Pos
    etp: int = Pos  # inferred = tp when not given
    etp_implied: bool = False
    sp: bool = False
    order: Literal[ORDERS] = ORDERS[0]
    # rollout
    colocate: bool = False
    rollout_gpus: int | None = Field(default=None, ge=0)
    engine_size: int = Pos
    engine_ep: int = Pos
    engine_dp: int = Pos
    dp_attention: bool = False
    rollout_external: bool = False
    external_addrs: tuple[str, ...] | None = None
    engine_pp: int = Pos
    sglang_tp: int | None = Field(default=None, ge=1)  # overwritten by engine_size in miles
    a2a_backend: str | None = None
    eval_gpus: int = Field(default=0, ge=0)
    eval_engine_size: int | None = Field(default=None, ge=1)
    prefill_servers: int | None = Field(default=None, ge=0)
    sglang_config: str | None = None
    # (model, worker type, GPUs, GPUs per engine) per --sglang-config group; None: not read
    engine_groups: tuple[tuple[str, str, int, int], ...] | None = None
    transfer_mode: Literal["broadcast", "p2p", "disk-delta"] | None = None
    train_only: bool = False
    rollout_only: bool = False
    # model shape
    layers: int | None = Field(default=None, ge=1)
    heads: int | None = Field(default=None, ge=1)
    query_groups: int | None = Field(default=None, ge=1)
    experts: int | None = Field(default=None, ge=1)
    topk: int = Field(default=2, ge=1)
    moe_layer_freq: int | tuple[int, ...] = 1
    first_stage_layers: int | None = Field(default=None, ge=0)
    last_stage_layers: int | None = Field(default=None, ge=0)
    mtp_layers: int | None = Field(default=None, ge=0)
    # routing replay
    routing_replay: bool = False
    rollout_routing_replay: bool = False
    router_fusion: bool = False
    # batch
    rollout_batch_size: int | None = Field(default=None, ge=1)
    n_samples_per_prompt: int = Pos
    global_batch_size: int | None = Field(default=None, ge=1)
    micro_batch_size: int = Pos
    dynamic_batch: bool = False
    max_tokens_per_gpu: int | None = Field(default=None, ge=1)
    steps_per_rollout: int | None = Field(default=None, ge=1)
    dynamic_global_batch: bool = False
    partial_train_step: bool = False
    no_trim: bool = False

    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    # ---- construction ------------------------------------------------------------------

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _as_topology_error(e) from None

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
        if data.get("etp") is None:
            data["etp"] = data.get("tp", 1)
            data["etp_implied"] = True
        if "node_gpus" in data:
            data["node_gpus_given"] = True
        if data.get("rollout_routing_replay"):
            data["routing_replay"] = True
        if data.get("advantage_estimator") is not None:  # miles_validate_args
            data["use_critic"] = data["advantage_estimator"] == "ppo"
        if data.get("external_addrs"):  # engines given by address are external
            data["rollout_external"] = True
        if data.get("rollout_only") and data.get("rollout_gpus") and not data.get("colocate"):
            # miles_validate_args: the actor shape is derived from the rollout GPUs
            data["gpus_per_node"] = min(8, data["rollout_gpus"])
            data["nodes"] = max(1, data["rollout_gpus"] // data["gpus_per_node"])
        steps, rbs = data.get("steps_per_rollout"), data.get("rollout_batch_size")
        if steps and rbs and data.get("global_batch_size") is None:
            data["global_batch_size"] = rbs * data.get("n_samples_per_prompt", 1) // steps or None
        if data.get("sglang_config") and data.get("engine_groups") is None:
            from .placement import read_engine_groups

            data["engine_groups"] = read_engine_groups(data["sglang_config"])
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
        return Grid(dict(tp=self.etp, cp=1, ep=self.ep, dp=self.edp, pp=self.pp), self.order)

    def grid(self, expert: bool = False) -> Grid:
        return self.expert_grid if expert else self.dense_grid

    def rank_groups(self, token: str, expert: bool = False) -> list[list[int]]:
        """Groups for `token` exactly as megatron-core RankGenerator.get_ranks(token).

        On the expert grid "tp" means etp and "dp" means edp ("etp"/"edp" are accepted).
        """
        if expert:
            token = "-".join({"etp": "tp", "edp": "dp"}.get(t, t) for t in token.split("-"))
        return self.grid(expert).groups(token)

    def coord(self, rank: int, expert: bool = False) -> dict[str, int]:
        """Coordinates of a global rank: dense {tp,cp,ep,dp,pp}; expert {etp,ep,edp,pp}."""
        c = self.grid(expert).coord(rank)
        if not expert:
            return c
        return {"etp": c["tp"], "ep": c["ep"], "edp": c["dp"], "pp": c["pp"]}

    def rank(self, expert: bool = False, **coord: int) -> int:
        if expert:
            coord = {{"etp": "tp", "edp": "dp"}.get(k, k): v for k, v in coord.items()}
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
        """SGLang sets engine EP = engine TP for the all-to-all MoE backends deepep, mooncake."""
        return self.a2a_backend in ("deepep", "mooncake")

    @cached_property
    def engine_ep_used(self) -> int:
        """The engine EP SGLang really runs (see `a2a_forces_ep`)."""
        return self.engine_size if self.a2a_forces_ep else self.engine_ep

    @cached_property
    def experts_per_rank(self) -> int:
        return (self.experts or 0) // self.ep

    def ep_rank(self, rank: int) -> int:
        return self.expert_grid.coord(rank)["ep"]

    def ep_experts(self, ep_rank: int) -> tuple[int, ...]:
        """The ownership rule, stated once: EP rank e owns [e*E/ep, (e+1)*E/ep) (megatron-core)."""
        per = self.experts_per_rank
        return tuple(range(ep_rank * per, (ep_rank + 1) * per))

    @cached_property
    def expert_ep_ranks(self) -> tuple[int, ...]:
        """The EP rank owning each global expert id: `ep_experts` inverted, for dispatch."""
        owner = [0] * (self.experts or 0)
        for e in range(self.ep):
            for expert in self.ep_experts(e):
                owner[expert] = e
        return tuple(owner)

    def local_experts(self, rank: int) -> tuple[int, ...]:
        """Global expert ids held by global rank `rank`."""
        return self.ep_experts(self.ep_rank(rank))

    def expert_owners(self, expert: int) -> tuple[int, ...]:
        """Every global rank holding `expert` (one per expert-DP replica, ETP rank, stage)."""
        if self.experts is None or not 0 <= expert < self.experts:
            raise IndexError(f"expert {expert} outside 0..{(self.experts or 0) - 1}")
        e = self.expert_ep_ranks[expert]
        return tuple(sorted(g[e] for g in self.expert_grid._groups("ep")))

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
        if self.colocate:
            return self.world_size
        if self.rollout_external or self.train_only:
            return 0
        return self.rollout_gpus or 0

    @cached_property
    def eval_size(self) -> int:
        return self.eval_engine_size or self.engine_size

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
        d = {"world_size": self.world_size}
        if self.forms_grid:
            d.update(dp=self.dp, edp=self.edp)
        d.update(
            tp=self.tp, cp=self.cp, pp=self.pp, vpp=self.chunks, ep=self.ep, etp=self.etp,
            order=self.order, nodes=self.nodes, gpus_per_node=self.gpus_per_node,
            rollout_gpus=self.rollout_gpu_count, engine_size=self.engine_size,
            num_engines=self.num_engines,
        )
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
            problems.append(Problem(
                "unknown-field", f"{name} is not a topology field.",
                f"remove {name}; valid fields: {', '.join(Topology.model_fields)}", (name,)))
        else:
            problems.append(Problem(
                "invalid-flag-value", f"{flag} got {shown!r}: {err['msg'].lower()}.",
                f"give {flag} a valid value (e.g. {flag} 1), or drop it to use the default.",
                (flag,)))
    return TopologyError(problems, warnings, summary)
