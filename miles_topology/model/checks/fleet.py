"""The engine fleet beyond the rollout engines: how weights reach them, eval engines, and
the groups of a --sglang-config (checked after FSDP's mesh and the critic).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from ..errors import Problem
from ..topology import Topology
from .base import F, _found, _fw, _skip


@rule(
    source="miles utils/arguments.py miles_validate_args",
    codes={
        "transfer-mode-invalid": (
            "error", f"`{F.transfer_mode} p2p`/`disk-delta` with `{F.colocate}` or "
            f"`{F.prefill_servers}`",
                "--prefill-num-servers 0 --update-weight-transfer-mode disk-delta"),
    },
)
def weight_transfer(topo: Topology) -> Iterator[Problem]:
    ro = topo.rollout
    mode = ro.transfer_mode
    if mode in ("p2p", "disk-delta") and ro.colocate:
        yield _found(  # miles utils/arguments.py miles_validate_args asserts it (p2p, disk-delta)
            "transfer-mode-invalid",
            f"{F.transfer_mode} {mode} is refused with {F.colocate} at start-up "
            "(colocated engines take weights through CUDA IPC).",
            f"use {F.transfer_mode} broadcast, or drop {F.colocate}",
            "transfer_mode", "colocate",
        )
    if mode in ("p2p", "disk-delta") and ro.prefill_servers is not None:  # asserted likewise
        yield _found(
            "transfer-mode-invalid",
            f"{F.transfer_mode} {mode} is refused with {F.prefill_servers} "
            "(not supported with prefill/decode disaggregation).",
            f"use {F.transfer_mode} broadcast",
            "transfer_mode", "prefill_servers",
        )


@rule(
    source="miles utils/arguments.py miles_validate_args, _resolve_rollout_functions",
    codes={
        "eval-gpus-not-multiple-of-engine": (
            "error", f"`{F.eval_gpus}` % `{F.eval_engine_size}` != 0",
                "--eval-num-gpus-per-engine 6 --eval-num-gpus 16"),
        "eval-gpus-invalid": (
            "error", f"`{F.eval_gpus}` with external rollout engines or `{F.colocate}`",
                "--rollout-external-engine-addrs 10.0.0.1:3000 --eval-num-gpus 1"),
    },
)
def eval_engines(topo: Topology) -> Iterator[Problem]:
    ro = topo.rollout
    if not ro.eval_gpus:
        return
    if ro.eval_gpus % ro.eval_size:
        yield _found(  # miles utils/arguments.py miles_validate_args asserts it
            "eval-gpus-not-multiple-of-engine",
            f"{F.eval_gpus} {ro.eval_gpus} is not divisible by GPUs per eval engine "
            f"{ro.eval_size} ({ro.eval_gpus}/{ro.eval_size} = "
            f"{ro.eval_gpus / ro.eval_size:.2f}).",
            f"try {F.eval_gpus} {ro.eval_size * max(1, ro.eval_gpus // ro.eval_size)}",
            "eval_gpus", "eval_engine_size",
        )
    # miles utils/arguments.py _resolve_rollout_functions asserts no eval fleet with external
    # engines (_compute_rollout_external); miles_validate_args: "Snapshot eval is not
    # supported with --colocate"
    for on, why in ((ro.rollout_external, "external rollout engines"),
                    (ro.colocate, f"{F.colocate} (snapshot eval)")):
        if on:
            yield _found(
                "eval-gpus-invalid",
                f"{F.eval_gpus} {ro.eval_gpus} cannot be used with {why}: miles asserts "
                "against it at start-up.",
                f"drop {F.eval_gpus}",
                "eval_gpus", "rollout_external" if ro.rollout_external else "colocate",
            )


@rule(
    source="miles utils/arguments.py miles_validate_args; backends/sglang_utils/sglang_config.py",
    codes={
        "engine-groups-invalid": (
            "error", f"`{F.prefill_servers}` leaves no decode engine or is combined with "
            f"`{F.sglang_config}`/external engines; `{F.sglang_config}` groups do not add up to "
            f"rollout + eval GPUs, or, with `{F.eval_gpus}`, no model named `eval` holds them "
            f"(not checked when no engine starts: `{F.train_only}` without eval GPUs)",
                "--prefill-num-servers 0 --rollout-external-engine-addrs 10.0.0.1:3000"),
        "engine-groups-unread": (  # always reported as skipped: the check could not run
            "note", f"`{F.sglang_config}` cannot be read here, so its engine groups are not "
            "checked (reported as skipped)",
                "--sglang-config /no/such/sglang.yaml"),
    },
)
def sglang_config_groups(topo: Topology) -> Iterator[Problem]:
    """--prefill-num-servers and --sglang-config: miles utils/arguments.py miles_validate_args
    asserts neither with external engines and not both; backends/sglang_utils/sglang_config.py
    SglangConfig.from_prefill_num_servers asserts decode GPUs > 0. --sglang-config groups:
    sglang_config.py _compute_raw_sglang_config returns no engines at all (the file is not
    even read) unless args.starts_inference_engines (miles_validate_args: not
    --debug-train-only, or eval GPUs > 0; --debug-train-only sets rollout_num_gpus = 0), then
    asserts the groups total rollout + eval GPUs and, with eval GPUs, exactly one model named
    "eval" holding them. (Two models named "eval" are not told apart here: the groups are read
    per model name.) slime 624b824 asserts the same: backends/sglang_utils/arguments.py:190-200
    (not with external engines, not both), sglang_config.py:188 (decode GPUs > 0) and
    ray/rollout.py:1135 (the groups total rollout_num_gpus; slime has no eval GPUs)."""
    ro = topo.rollout
    if ro.prefill_servers is not None:
        if ro.sglang_config is not None or ro.rollout_external:
            yield _found(
                "engine-groups-invalid",
                f"{F.prefill_servers} cannot be combined with "
                + (f"{F.sglang_config}" if ro.sglang_config else "external rollout engines")
                + f": {_fw(topo)} refuses it at start-up.",
                f"describe prefill/decode groups in {F.sglang_config} only",
                "prefill_servers", "sglang_config",
            )
        elif (
            topo.placement_group.rollout_engines <= ro.prefill_servers
            and topo.placement_group.rollout_gpus
        ):
            n = topo.placement_group.rollout_gpus // ro.engine_size
            yield _found(
                "engine-groups-invalid",
                f"{F.prefill_servers} {ro.prefill_servers} leaves no decode engine: "
                f"{n} engine(s) in all; {_fw(topo)} asserts engines > prefill servers.",
                f"try {F.prefill_servers} {max(0, n - 1)}, or more {F.rollout_gpus}",
                "prefill_servers", "rollout_gpus",
            )
    if ro.sglang_config is None:
        return
    if ro.rollout_external:
        yield _found(
            "engine-groups-invalid",
            f"{F.sglang_config} cannot be used with external rollout engines ({_fw(topo)} "
            "asserts it).",
            f"drop {F.sglang_config}", "sglang_config", "rollout_external",
        )
        return
    if ro.train_only and not ro.eval_gpus:
        return  # no engine starts: miles does not read the file
    if ro.engine_groups is None:
        yield _skip(
            "engine-groups-unread",
            f"{F.sglang_config} {ro.sglang_config} could not be read here, so the engine "
            "groups (sizes, offsets, prefill/decode) are not checked.",
            "check on the machine where the file is, or pass the file's path as it is seen here",
            "sglang_config",
        )
        return
    total = sum(g[2] for g in ro.engine_groups)
    rollout = 0 if ro.train_only else topo.placement_group.rollout_gpus
    want = rollout + ro.eval_gpus
    if total != want:
        yield _found(
            "engine-groups-invalid",
            f"{F.sglang_config} groups hold {total} GPUs but {F.rollout_gpus} + {F.eval_gpus} "
            f"= {rollout} + {ro.eval_gpus} = {want}"
            + (f" ({F.train_only} starts no rollout engine)" if ro.train_only else "")
            + f"; {_fw(topo)} asserts they are equal.",
            f"make the groups' num_gpus add up to {want}"
            + ("" if ro.train_only else
               f", or set {F.rollout_gpus} {total - ro.eval_gpus}"),
            "sglang_config", "rollout_gpus",
        )
        return
    if ro.eval_gpus:
        held = sum(g[2] for g in ro.engine_groups if g[0] == "eval")
        if held != ro.eval_gpus:
            yield _found(
                "engine-groups-invalid",
                f"{F.eval_gpus} {ro.eval_gpus} needs exactly one {F.sglang_config} model named "
                f"'eval' holding {ro.eval_gpus} GPUs, but "
                + (f"its 'eval' groups hold {held}" if held else "no model is named 'eval'")
                + "; miles asserts it at start-up.",
                f"name the eval model 'eval' and give its groups {ro.eval_gpus} GPUs in all",
                "sglang_config", "eval_gpus",
            )
