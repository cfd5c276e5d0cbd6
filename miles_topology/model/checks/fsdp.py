"""FSDP and the critic: the PPO critic's placement, the FSDP2 mesh, the Megatron-only
flags an FSDP parser refuses (miles', and slime's before THUDM/slime 96118d0), and
`--train-backend fsdp` on a slime without FSDP (removed in THUDM/slime e4faf63).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import declare, rule
from ..errors import Problem
from ..parts import MEGATRON_SIZES, flag_of
from ..topology import Topology
from .base import F, _divisors, _found, _nearest, _or

# the fields whose flags only Megatron's parser defines (fsdp_undefined_flags below)
MEGATRON_ONLY_FLAGS = (*MEGATRON_SIZES, "sp", "order")


@rule(
    source=("miles utils/arguments.py miles_validate_args; ray/placement_group.py "
            "create_placement_groups"),
    codes={
        "ppo-requires-megatron": (
            "error", f"`{F.advantage_estimator} ppo` with `{F.train_backend} fsdp`",
                "--use-critic --train-backend fsdp"),
        "critic-placement-overridden": (
            "warning", "PPO critic: `--critic-num-*` differ from the actor's, which miles writes "
            "over them (the critic shares the actor's placement group)",
                "--critic-num-nodes 2 --use-critic"),
    },
    uses=("deprecated-flag",),
)
def critic(topo: Topology) -> Iterator[Problem]:
    """PPO (miles utils/arguments.py miles_validate_args): `args.use_critic =
    args.advantage_estimator == "ppo"`, a ValueError unless the Megatron backend, and
    --critic-num-* overwritten with the actor's; placement_group.py create_placement_groups
    gives the critic the actor's bundles. Not slime's: no slime commit raises that error
    (`git log -S "requires the Megatron backend"` finds none), and its --critic-num-* (4badb74 to
    75af529, #1856) were kept when given, filled from the actor's only when absent
    (utils/arguments.py `if args.critic_num_nodes is None`); slime 624b824 has no such flags
    (its Megatron parse drops them: flags.py `_lacks`)."""
    if topo.layout.use_critic and topo.layout.advantage_estimator is None:
        yield _found(
            "deprecated-flag",
            f"{F.use_critic} is gone from miles: the critic exists exactly when "
            f"{F.advantage_estimator} is ppo (miles sets use_critic from it and drops this flag).",
            f"replace {F.use_critic} with {F.advantage_estimator} ppo",
            "use_critic",
        )
    if not topo.layout.use_critic or topo.layout.framework != "miles":
        return
    if topo.layout.train_backend != "megatron":
        yield _found(
            "ppo-requires-megatron",
            f"{F.advantage_estimator} ppo (shared actor/critic) needs the Megatron backend: miles "
            "raises 'Shared Actor/Critic PPO requires the Megatron backend' at start-up.",
            f"drop {F.train_backend} fsdp, or use another {F.advantage_estimator} (e.g. grpo)",
            "advantage_estimator", "train_backend",
        )
    asked = [(f, v, a) for f, v, a in (
        ("critic_nodes", topo.layout.critic_nodes, topo.layout.nodes),
        ("critic_gpus_per_node", topo.layout.critic_gpus_per_node, topo.layout.gpus_per_node),
    ) if v is not None and v != a]
    if asked:
        yield _found(
            "critic-placement-overridden",
            "the critic shares the actor's placement group and miles overwrites "
            + ", ".join(f"{flag_of(f)} {v} with the actor's {a}" for f, v, a in asked) + ".",
            "drop " + " and ".join(flag_of(f) for f, _, _ in asked),
            *(f for f, _, _ in asked),
        )


@rule(
    source=("miles utils/arguments.py parse_args_and_get_parser; backends/fsdp_utils "
            "validate_hybrid_shard_args"),
    codes={
        "fsdp-cp-unsupported": (
            "error", f"`{F.train_backend} fsdp` with `{F.cp}` > 1 (miles asserts "
            "cp == 1)",
                "--context-parallel-size 16 --train-backend fsdp"),
        "fsdp-mesh-divisibility": ("error", f"FSDP: world % `{F.dp_replicate}` != 0",
            "--actor-num-gpus-per-node 1 --train-backend fsdp --dp-replicate-size 2"),
        "fsdp-ignores-megatron-sizes": (
            "warning", f"`{F.train_backend} fsdp` with Megatron sizes (TP, PP, EP, ...) it "
            "ignores, given other than by a command-line flag its parser refuses (a topology "
            "YAML, a Python caller, or a slime whose FSDP parse drops unknown flags, THUDM/slime "
            "96118d0 to e4faf63)",
                "train_backend: fsdp and tp: 2 in a topology YAML"),
        "fsdp-flag-ignored": ("warning", f"`{F.dp_replicate}` without `{F.train_backend} fsdp`",
            "--dp-replicate-size 3"),
    },
)
def fsdp_mesh(topo: Topology) -> Iterator[Problem]:
    """FSDP is pure data parallel in miles HEAD: utils/arguments.py parse_args_and_get_parser
    asserts context_parallel_size == 1 for the FSDP backend, and backends/fsdp_utils
    validate_hybrid_shard_args raises unless world % dp_replicate_size == 0 (replicas x shards)."""
    lay = topo.layout
    if lay.train_backend != "fsdp":
        if lay.dp_replicate > 1:
            yield _found(
                "fsdp-flag-ignored",
                f"{F.dp_replicate} {lay.dp_replicate} applies to {F.train_backend} fsdp only; "
                "Megatron ignores it.",
                f"drop {F.dp_replicate}, or add {F.train_backend} fsdp",
                "dp_replicate", "train_backend",
            )
        return
    world = topo.world_size
    # miles' assertion (miles 31f1ca9 utils/arguments.py:2702); slime dropped its own copy
    # (THUDM/slime 2235fa2, #1423: FSDP runs context parallelism with ring-flash-attn) before
    # it dropped FSDP (#1664), so a slime fork that still has FSDP takes cp > 1
    if lay.cp > 1 and lay.framework == "miles":
        yield _found(
            "fsdp-cp-unsupported",
            f"{F.cp} {lay.cp} with {F.train_backend} fsdp: miles asserts "
            "'Context parallelism is not supported for FSDP backend' at start-up.",
            f"drop {F.cp}, or use the Megatron backend",
            "cp", "train_backend",
        )
    if world % lay.dp_replicate:
        yield _found(
            "fsdp-mesh-divisibility",
            f"world size {world} is not divisible by dp_replicate_size {lay.dp_replicate} "
            f"({world}/{lay.dp_replicate} = {world / lay.dp_replicate:.2f}): FSDP2 hybrid "
            "shard splits the ranks into replicas x shards.",
            f"try {F.dp_replicate} {_or(_nearest(_divisors(world), lay.dp_replicate))}",
            "dp_replicate", "nodes", "gpus_per_node",
        )
    if lay.fsdp_ignored:
        # Only sizes that reach the Topology from somewhere other than a command line whose
        # FSDP parser refuses them (our topology YAML, a Python caller, a slime between
        # 96118d0 and e4faf63 that drops them: sources.fsdp_refusals): where the parser
        # refuses them they are an error, fsdp-unknown-flag, and are not reported twice.
        shown = ", ".join(f"{flag_of(f)} {v}" for f, v in lay.fsdp_ignored)
        yield _found(
            "fsdp-ignores-megatron-sizes",
            f"{F.train_backend} fsdp ignores {shown}: FSDP shards every parameter over the "
            "data-parallel ranks and builds no tensor, pipeline or expert groups.",
            f"drop them (the FSDP mesh is set by {F.dp_replicate} only)",
            "train_backend", *(f for f, _ in lay.fsdp_ignored),
        )


declare("checks/fsdp.py fsdp_undefined_flags (called by sources.read_flags)", {
    "fsdp-unknown-flag": (
        "error", f"`{F.train_backend} fsdp` with a Megatron-only flag on the command line "
        f"(`{F.tp}`, `{F.pp}`, `{F.ep}`, `{F.etp}`, virtual pipeline, uneven stages, `{F.sp}`, "
        f"`{F.order}`), whatever its value: the FSDP parser of miles (or of a slime before "
        "THUDM/slime 96118d0) does not define it and exits (unrecognized arguments)",
        "--train-backend fsdp --tensor-model-parallel-size 2"),
})

declare("checks/fsdp.py backend_refused (called by sources.read_flags)", {
    "train-backend-unsupported": (
        "error", f"`{F.train_backend} fsdp` on a slime whose parser offers megatron only "
        "(slime since THUDM/slime e4faf63, #1664, which removed the FSDP backend): argparse "
        "exits at start-up (invalid choice); skipped when which slime runs is not known here "
        "(the bundled snapshot: an older slime or a fork may still have FSDP)",
        f"python3 /root/slime/train.py {F.train_backend} fsdp (with --stack a slime checkout)"),
}, source=f"slime 624b824 utils/arguments.py:1592 _pre_parse_mode (`{F.train_backend}` "
          "choices=[\"megatron\"]); THUDM/slime e4faf63 (#1664) removed slime/backends/fsdp_utils")


def fsdp_undefined_flags(given_by: dict[str, str], framework: str = "miles",
                         defined: frozenset[str] | None = None) -> list[Problem]:
    """Megatron-only flags on a command line under --train-backend fsdp (called by
    sources.read_flags, which alone knows what was given on the command line); `defined`:
    on a slime checkout, the flags its own package defines (FSDPArgs' fields, its own
    arguments), which its FSDP parser accepts: any other size flag is refused, context
    parallel included (FSDPArgs had context_parallel_size only from 6d3b33f to 7785e5b).

    miles utils/arguments.py parse_args_and_get_parser (HEAD; parse_args in 00e365d9 does the
    same) takes the FSDP branch to backends/fsdp_utils/arguments.py load_fsdp_args ->
    parse_fsdp_cli: a parser built from the FSDPArgs dataclass fields (context_parallel_size
    and dp_replicate_size, no tensor, pipeline, expert or virtual-pipeline size) plus miles'
    own provider (get_miles_extra_args_provider: its utils/args/configs classes, e.g.
    TrainConfig, TrainerBackendTraitConfig, CustomMegatronPluginsConfig, and in 00e365d9 the
    add_*_arguments, add_sglang_arguments, add_lora_arguments, add_dsv4_arguments, define none
    of these flags; reset_arg adds only batch, checkpoint and optimizer flags), then strict
    `parser.parse_args()`. Megatron's
    parser, which defines them, is never built, so argparse exits at start-up with
    "unrecognized arguments", whatever the value (1 included).

    slime had the same strict parser from its FSDP backend's start (THUDM/slime cfad46f, #282)
    until 96118d0 (#1600): slime/backends/fsdp_utils/arguments.py load_fsdp_args ->
    parse_fsdp_cli, FSDPArgs' fields (optimizer, precision, offload, profiling; no parallel
    size; context_parallel_size from 6d3b33f, #467, to 7785e5b, #1443) plus
    add_slime_arguments, then `parser.parse_args()`."""
    who = "miles'" if framework == "miles" else f"{framework}'s"
    return [
        Problem(
            "fsdp-unknown-flag",
            f"{who} FSDP argument parser does not define {flag}: train.py exits at start-up "
            "with argparse's 'unrecognized arguments', whatever its value.",
            f"drop {flag} (FSDP builds no Megatron groups"
            + (f"; its mesh is {F.dp_replicate})" if framework == "miles" else ")"),
            (flag, flag_of("train_backend")),
        )
        for name, flag in given_by.items()
        if name in MEGATRON_ONLY_FLAGS and (defined is None or flag not in defined)
        or defined is not None and name == "cp" and flag not in defined
    ]


def backend_refused(framework: str, choices: tuple[str, ...] | None, where: str | None,
                    given: str | None = None) -> Problem:
    """`--train-backend fsdp` on a slime without FSDP. slime 624b824 utils/arguments.py:1592
    `_pre_parse_mode`: `temp_parser.add_argument("--train-backend", type=str,
    choices=["megatron"], default="megatron")` then `parse_known_args()`: a value outside
    the choices is an argparse error (exit 2) even there. THUDM/slime e4faf63 (#1664, "Remove
    FSDP support", 2026-03-04) narrowed the choices from ["megatron", "fsdp"] and deleted
    slime/backends/fsdp_utils. `choices` None: which slime runs is not known here (the
    bundled snapshot is 624b824, but an older slime or a fork may have FSDP): skipped."""
    given = given or F.train_backend
    if choices is None:
        return Problem(
            "train-backend-unsupported",
            f"{given} fsdp: slime removed its FSDP backend (THUDM/slime e4faf63, #1664; the "
            "bundled slime 624b824 accepts only megatron and exits at start-up), but which "
            "slime runs here is not known: an older slime or a fork may still have FSDP.",
            "give check --stack the slime checkout (or site-packages) the job runs, or use "
            f"{given} megatron",
            (given,), "skipped")
    return Problem(
        "train-backend-unsupported",
        f"{given} fsdp is not a choice of {framework}'s parser ({where}: choices "
        f"{', '.join(choices)}): train.py exits at start-up with argparse's 'invalid choice'"
        + (" (slime removed its FSDP backend in THUDM/slime e4faf63, #1664)."
           if framework == "slime" else "."),
        f"use {given} megatron, or run a {framework} that has the FSDP backend",
        (given,))
