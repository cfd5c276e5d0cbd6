"""`Topology`: the one immutable, validated description of a miles job's parallel layout.

The floor of the core: it imports only what lies below it (errors, grid, layers, codes, the
parts and placement), never what reads or checks it. A Topology holds one frozen part per
concern (`layout`, `rollout`, `model`, `replay`, `batch`: parts.py, each field commented
with why it exists); it is built from flat field values (the YAML, the flags and the JSON
Schema are flat), which are inferred in one step, split into the parts and validated; the rules
registered in `codes.RULES` (the checks/ package registers them when `miles_topology` is
imported) then run once. What crosses parts is a view built here, once: `grid("dense" |
"expert")`, `stages`, `placement_group`. Each field's flag is a fact of the field (`fact`);
`flag_of` maps a field to it for every message. Reading and writing (`Topology.from_flags`,
`from_yaml`, `from_namespace`; `sources.to_yaml`) live above, in sources.py, which attaches
the doors here. Validation reads no file: sources.py reads a --sglang-config's groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    computed_field,
    model_validator,
)

from ..codes import run_rules
from . import layers as _layers
from . import placement as _placement
from .errors import Problem, TopologyError
from .grid import EXPERT_AXES, Grid
from .parts import (
    FIELDS,
    GROUP_OF,
    GROUPS,
    MEGATRON_SIZES,
    Batch,
    Layout,
    Model,
    Replay,
    Rollout,
    _immutable,
    describe_fields,
    flag_of,
    near_field,
    summary_fields,
)


@dataclass(frozen=True)
class Stages:
    """Which decoder layers each pipeline stage holds: the pipeline view of a Topology
    (megatron-core's layout of layers over pp ranks and their virtual stages)."""

    pp: int
    chunks: int  # virtual pipeline stages per pipeline rank (1 without interleaving)
    counts: tuple[int, ...] | None  # decoder layers per pipeline stage; None without layers
    model: Model = field(compare=False, repr=False)  # its moe_pattern, built when read
    pad: tuple[int, int] = (0, 0)  # the embedding / loss counted as a layer in the split

    @property
    def moe_pattern(self) -> tuple[bool, ...]:
        """Per decoder layer, whether it is an MoE layer (built on first use: a stage's
        sizes are arithmetic, so --num-layers 10^30 answers without it)."""
        return self.model.moe_pattern

    @classmethod
    def of(cls, layout: Layout, model: Model) -> Stages:
        chunks = 1
        if layout.vpp is not None:
            chunks = layout.vpp
        elif layout.vpp_layers is not None and model.layers is not None and layout.pp > 1:
            chunks = max(1, model.layers // (layout.pp * layout.vpp_layers))
        pad = (int(layout.embedding_in_split), int(layout.loss_in_split))
        counts = None if model.layers is None else _layers.stage_counts(
            model.layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers, pad)
        return cls(layout.pp, chunks, counts, model, pad)

    def layers(self, pp_rank: int, vpp_rank: int = 0) -> tuple[int, ...]:
        """Global decoder layer ids of virtual stage (pp_rank, vpp_rank)."""
        if self.counts is None:
            raise TopologyError([_needs("layers", "stage_layers")])
        if not (0 <= pp_rank < self.pp and 0 <= vpp_rank < self.chunks):
            raise IndexError(
                f"stage ({pp_rank}, {vpp_rank}) outside pp={self.pp} x vpp={self.chunks}"
            )
        return tuple(_layers.chunk_layers(self.counts, self.chunks, pp_rank, vpp_rank,
                                          self.pad))

    def pipeline(self, pp_rank: int) -> tuple[int, ...]:
        """Every decoder layer id pipeline rank `pp_rank` holds, its virtual stages in order
        (e.g. pp 2, vpp 2, 8 layers: rank 0 holds (0, 1, 4, 5))."""
        return tuple(x for v in range(self.chunks) for x in self.layers(pp_rank, v))

    def replay(self, pp_rank: int) -> tuple[int, ...]:
        """MoE layer ids of a pipeline rank in the order its routers consume replay data."""
        return tuple(x for x in self.pipeline(pp_rank) if self.moe_pattern[x])


class Topology(BaseModel):
    """Every parallel size of a miles job and the model facts they depend on."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # Each part is built from flat values under an alias no user writes, so a YAML key such
    # as `model:` stays an unknown field, as it always was.
    layout: Layout = Field(default_factory=Layout, alias="part:layout")
    """The cluster and the trainer's dense and expert grids."""
    rollout: Rollout = Field(default_factory=Rollout, alias="part:rollout")
    """The rollout (and eval) engines."""
    model: Model = Field(default_factory=Model, alias="part:model")
    """The model's shape."""
    replay: Replay = Field(default_factory=Replay, alias="part:replay")
    """Routing replay."""
    batch: Batch = Field(default_factory=Batch, alias="part:batch")
    """The batch sizes."""

    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    # attached by sources.py (reading lives above the model; see its docstring)
    from_flags: ClassVar[Callable[[list[str]], Topology]]
    from_yaml: ClassVar[Callable[..., Topology]]
    from_namespace: ClassVar[Callable[[Any], Topology]]

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
        """A new, validated Topology: the given values of this one with `update` (flat field
        names) on top (values inferred here, such as an implied etp, are inferred again)."""
        if not update:
            return self
        return type(self)(**{**_given(self), **update})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FIELDS or name in type(self).model_fields:
            _immutable(name, value)
        super().__setattr__(name, value)

    def __copy__(self) -> Topology:
        return self

    def __deepcopy__(self, memo: dict | None = None) -> Topology:
        return self

    @model_validator(mode="before")
    @classmethod
    def _infer(cls, data: Any) -> Any:
        """Fill every value the user may leave unset, the way miles and Megatron do, then
        split the flat values into the parts (an unknown key stays, and is refused)."""
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
        if data.get("framework") == "slime":  # slime 624b824 has no indep_dp nor ft_components
            data.pop("indep_dp", None)
            data.pop("ft_components", None)
        if data.get("fault_tolerance") and "train" in (data.get("ft_components") or ()):
            # miles 31f1ca9 utils/arguments.py:2857 miles_validate_args ("train" in
            # ft_components sets indep_dp; _resolve_ft_components: none without the switch)
            data["indep_dp"] = True
        if data.get("external_addrs"):  # engines given by address are external
            data["rollout_external"] = True
        if data.get("rollout_only"):
            # miles_validate_args: colocated without rollout GPUs, they are the actor's; else
            # the actor shape is derived from the rollout GPUs; colocate is then switched off.
            # slime 624b824 utils/arguments.py:1919 slime_validate_args first leaves the actor
            # as given when the engines are external (`if args.rollout_external: pass`)
            if data.get("framework") == "slime" and data.get("rollout_external"):
                pass
            elif data.get("colocate") and not data.get("rollout_gpus"):
                data["rollout_gpus"] = data.get("nodes", 1) * data.get("gpus_per_node", 8)
            elif data.get("rollout_gpus"):
                data["gpus_per_node"] = min(8, data["rollout_gpus"])
                data["nodes"] = max(1, data["rollout_gpus"] // data["gpus_per_node"])
            data["colocate"] = False
        steps, rbs = data.get("steps_per_rollout"), data.get("rollout_batch_size")
        if steps and rbs and data.get("global_batch_size") is None:
            data["global_batch_size"] = rbs * data.get("n_samples_per_prompt", 1) // steps or None
        out: dict[str, Any] = {f"part:{g}": {} for g in GROUPS}
        for key, given in data.items():
            if key in GROUP_OF:
                out[f"part:{GROUP_OF[key]}"][key] = given
            else:
                out[key] = given
        return out

    @model_validator(mode="after")
    def _validate(self, info: ValidationInfo) -> Topology:
        found = run_rules(self)
        errors = [p for p in found if p.severity == "error"]
        warnings = [p for p in found if p.severity != "error"]  # warnings, then skipped
        if errors:
            raise TopologyError(errors, warnings, summary(self))  # sizes known, grid or not
        # what its reader found (`model_validate(..., context={"read": [...]})`: a YAML value
        # the command line also gives) comes first
        self._warnings = tuple((info.context or {}).get("read", ())) + tuple(warnings)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @cached_property
    def _key(self) -> tuple:
        return tuple(getattr(getattr(self, g), n) for n, g in GROUP_OF.items())

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """Warnings found while validating (tuple of Problem), e.g. etp-implied."""
        return self._warnings

    # ---- sizes (docs/design.md's contract; defined once, on the layout) --------------------

    @computed_field
    @property
    def world_size(self) -> int:
        """Ranks of the Megatron world: the actor's nodes x gpus_per_node, e.g. 16 (one
        replica under --indep-dp: `Layout.world_size`)."""
        return self.layout.world_size

    @computed_field
    @property
    def dp(self) -> int:
        """Dense data-parallel size: world_size / (tp x cp x pp), e.g. 2."""
        return self.layout.dp

    @computed_field
    @property
    def edp(self) -> int:
        """Expert data-parallel size: world_size / (etp x ep x pp), e.g. 1."""
        return self.layout.edp

    # ---- views ---------------------------------------------------------------------

    def grid(self, kind: Literal["dense", "expert"] = "dense") -> Grid:
        """Megatron's dense grid (axes tp, cp, ep = 1, dp, pp) or expert grid (axes etp, ep,
        edp, pp), in Megatron's order, e.g. `topo.grid("expert").coord(rank)`."""
        if kind not in ("dense", "expert"):
            raise ValueError(f"grid {kind!r}: a Topology has a 'dense' and an 'expert' grid")
        return self._grids[kind]

    @cached_property
    def _grids(self) -> dict[str, Grid]:
        lay = self.layout
        return {
            "dense": Grid(dict(tp=lay.tp, cp=lay.cp, ep=1, dp=lay.dp, pp=lay.pp), lay.order),
            "expert": Grid(dict(etp=lay.etp, ep=lay.ep, edp=lay.edp, pp=lay.pp), lay.order,
                           EXPERT_AXES),
        }

    @cached_property
    def stages(self) -> Stages:
        """The pipeline view: layers per stage, virtual stages (`chunks`), replay order."""
        return Stages.of(self.layout, self.model)

    @cached_property
    def placement_group(self) -> _placement.Placement:
        """miles' one packed placement group, built once: positions, ranks and engines on
        (node, GPU) and back, the rollout GPUs and the nodes it fills (placement.py)."""
        return _placement.Placement.of(self.layout, self.rollout)

    # ---- docs/design.md's queries --------------------------------------------------------

    def rank_groups(self, token: str, expert: bool = False) -> list[list[int]]:
        """Groups for `token` exactly as megatron-core RankGenerator.get_ranks(token).

        The expert grid's axes are etp, ep, edp, pp; Megatron's tokens tp and dp name etp
        and edp there (grid.py maps them).
        """
        return self.grid("expert" if expert else "dense").groups(token)

    def local_experts(self, rank: int) -> tuple[int, ...]:
        """The ownership rule, stated once: the rank at EP coordinate e of the expert grid
        holds global experts [e*E/ep, (e+1)*E/ep) (megatron-core MoELayer's
        local_expert_indices). Placement, replay, dispatch and weight sync all read it here."""
        per = (self.model.experts or 0) // self.layout.ep
        e = self.grid("expert").coord(rank)["ep"]
        return tuple(range(e * per, (e + 1) * per))

    def stage_layers(self, pp_rank: int, vpp_rank: int = 0) -> tuple[int, ...]:
        """Global decoder layer ids of virtual stage (pp_rank, vpp_rank)."""
        return self.stages.layers(pp_rank, vpp_rank)

    def placement(self, rank: int) -> tuple[int, int]:
        """(node, GPU) of train rank `rank`: rank r takes position r of the placement group."""
        return self.placement_group.rank_slot(rank)

    def engine_gpus(self, engine: int) -> tuple[tuple[int, int], ...]:
        """(node, GPU) of each GPU of engine `engine` (rollout engines first, then eval)."""
        return self.placement_group.engine_gpus(engine)


describe_fields(Topology)


def megatron_args(topo: Topology) -> dict[str, Any]:
    """Keyword arguments for megatron-core `parallel_state.initialize_model_parallel`."""
    lay, chunks = topo.layout, topo.stages.chunks
    return dict(
        tensor_model_parallel_size=lay.tp,
        pipeline_model_parallel_size=lay.pp,
        virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
        context_parallel_size=lay.cp,
        expert_model_parallel_size=lay.ep,
        expert_tensor_parallel_size=lay.etp,
        order=lay.order,
    )


def summary(topo: Topology) -> dict[str, Any]:
    """The sizes reported by `check --format json` (also for an invalid topology)."""
    lay = topo.layout
    d: dict[str, Any] = {"world_size": lay.world_size}
    if lay.forms_grid:
        d.update(dp=lay.dp, edp=lay.edp)
    # rollout_gpus: args.rollout_num_gpus as the parser leaves it (kept under
    # --debug-train-only, where no engine starts: num_engines 0)
    shown = {"vpp": topo.stages.chunks, "rollout_gpus": 0 if topo.rollout.rollout_external
             else _placement.rollout_num_gpus(topo.layout, topo.rollout) or 0}
    for name in summary_fields():
        d[name] = shown.get(name, getattr(getattr(topo, GROUP_OF[name]), name))
    d["num_engines"] = topo.placement_group.rollout_engines
    return d


def value(topo: Topology, name: str) -> Any:
    """The value of a field by its flat name (what the YAML and the flags call it)."""
    return getattr(getattr(topo, GROUP_OF[name]), name)


def _given(topo: Topology) -> dict[str, Any]:
    """The flat values given (or inferred from what was given) to build `topo`."""
    return {n: getattr(part, n) for g in GROUPS
            for part in [getattr(topo, g)] for n in part.model_fields_set}


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
    found = None
    for err in e.errors():
        if err["type"] == "default_factory_not_called":  # follows from another field's error
            continue
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, TopologyError):
            problems += inner.problems
            warnings += inner.warnings
            found = inner.summary
            continue
        loc = err["loc"]
        if len(loc) > 1 and str(loc[0]).startswith("part:"):  # a part's field: its flat name
            loc = loc[1:]
        name = str(loc[0]) if loc else "topology"
        flag = flag_of(name)
        shown = err.get("input")
        if err["type"] == "extra_forbidden":
            near = near_field(name)
            problems.append(Problem(
                "unknown-field", f"{name} is not a topology field" +
                (f"; did you mean {near}?" if near else "."),
                f"write {near}" if near else
                f"remove {name}; valid fields: {', '.join(FIELDS)}", (name,)))
        else:
            problems.append(Problem(
                "invalid-flag-value", f"{flag} got {shown!r}: {err['msg'].lower()}.",
                f"give {flag} a valid value (e.g. {flag} 1), or drop it to use the default.",
                (flag,)))
    return TopologyError(problems, warnings, found)

