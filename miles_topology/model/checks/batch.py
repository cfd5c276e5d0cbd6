"""Batch and replay: routing replay's prerequisites, and the rollout, global and micro
batch sizes against data parallelism.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...codes import rule
from ..errors import Problem
from ..parts import flag_of
from ..topology import Topology
from .base import F, _divisors, _found, _fw, _nearest, _or, _skip


@rule(
    source=("megatron/core/transformer/moe/moe_utils.py topk_routing_with_score_function; sglang "
            "RoutedExpertsCapturer.__init__"),
    codes={
        "r3-external-capture": (
            "warning", f"R3 with `{F.rollout_external}`: a server started without "
            "`--enable-return-routed-experts` returns no routed experts, and the first training "
            "step fails after a full rollout",
                "--use-rollout-routing-replay --rollout-external"),
        "r3-router-fusion": (
            "error", "routing replay with fused router top-k, which bypasses replay",
                "--moe-router-fusion --use-rollout-routing-replay"),
        "r3-requires-moe": (
            "error", "routing replay asked for on a model with no MoE layers: with rollout R3, "
            "SGLang's routed-expert capturer reads `num_experts_per_tok` from the HF config, so "
            "the engines fail at start-up (skipped when the model shape is read from the "
            "checkpoint: FSDP, or no model flags given)",
                "--num-layers 32 --use-routing-replay"),
    },
)
def replay_prerequisites(topo: Topology) -> Iterator[Problem]:
    """Router fusion: megatron/core/transformer/moe/moe_utils.py
    topk_routing_with_score_function returns the fused TE kernel's result before the
    router_replay argument is read, so replayed routes are ignored (trains wrongly). No MoE
    layer: miles itself does not check it, but with rollout routing replay the engines it
    starts capture routed experts (sglang_utils _compute_server_args sets
    enable_return_routed_experts), and SGLang's capturer (python/sglang/srt/state_capturer/
    routed_experts.py RoutedExpertsCapturer.__init__, earlier layers/moe/
    routed_experts_capturer.py; built by model_runner.py init_routed_experts_capturer at engine
    start) reads hf_text_config.num_experts_per_tok, which a dense HF config lacks: the engine
    fails at start-up. Skipped when the shape comes from the checkpoint. External engines: miles
    asks for routes per request (return_routed_experts) but only the server flag
    --enable-return-routed-experts makes SGLang capture them; samples then carry no
    rollout_routed_experts, the train batch has none, and training_utils/replay_data.py
    fill_replay_data raises "rollout_routed_experts is required in rollout_data for replay" at
    the first training step (a warning: how those servers were started is not visible here)."""
    lay, ro, mod, rep = topo.layout, topo.rollout, topo.model, topo.replay
    if not rep.routing_replay:
        return
    which = "rollout_routing_replay" if rep.rollout_routing_replay else "routing_replay"
    if not mod.is_moe:
        if lay.train_backend == "fsdp" or (mod.experts is None and mod.layers is None):
            # the model shape is read from the checkpoint (HF config under FSDP, the model
            # script under Megatron), so an absent --num-experts proves nothing
            yield _skip(
                "r3-requires-moe",
                "routing replay was asked for; whether the model has MoE layers is not known "
                + ("(FSDP reads it from the HF checkpoint)." if lay.train_backend == "fsdp"
                   else f"(no model shape given: {F.layers}, {F.experts})."),
                f"give the model shape ({F.layers}, {F.experts}) to check it",
                which, "experts",
            )
        else:
            why = (f"(no {F.experts})" if mod.experts is None else f"({F.moe_layer_freq})")
            yield _found(
                "r3-requires-moe",
                f"routing replay was asked for, but the model has no MoE layers {why}"
                + (f": {_fw(topo)} starts the engines with routed-expert capture on, and SGLang's "
                   "capturer reads num_experts_per_tok from the HF config, which a dense model "
                   "lacks, so every engine fails at start-up." if rep.rollout_routing_replay
                   and not ro.rollout_external and mod.experts is None else
                   ": there are no routes to record or replay."),
                f"drop {flag_of(which)}, or give the MoE shape ({F.experts} N)",
                which, "experts",
            )
    if rep.rollout_routing_replay and ro.rollout_external:
        yield _found(
            "r3-external-capture",
            # slime 624b824: sglang_engine.py:569 sets enable_return_routed_experts on the
            # engines it starts; megatron_utils/actor.py:311 raises at the first step
            f"rollout routing replay with external engines: {_fw(topo)} cannot switch on "
            "routed-expert capture for engines it does not start; a server started without "
            "--enable-return-routed-experts returns no routed experts, and the first training "
            "step then fails after a full rollout ('rollout_routed_experts is required in "
            + ("rollout_data when use_rollout_routing_replay is set')." if _fw(topo) == "slime"
               else "rollout_data for replay')."),
            "start the external SGLang servers with routed-expert capture on "
            f"(--enable-return-routed-experts), or drop {F.rollout_external}",
            "rollout_routing_replay", "rollout_external",
        )
    if mod.router_fusion:
        yield _found(
            "r3-router-fusion",
            "routing replay with fused router top-k: the fused kernel bypasses the replay "
            "hook, so recorded routes would be silently ignored.",
            f"remove {F.router_fusion}",
            which, "router_fusion",
        )


@rule(
    source=("miles utils/arguments.py miles_validate_args; Megatron-LM training/arguments.py "
            "validate_args"),
    codes={
        "dynamic-batch-requires-max-tokens": (
            "error", f"`{F.dynamic_batch}` without `{F.max_tokens_per_gpu}`",
                "--use-dynamic-batch-size"),
        "global-batch-not-divisible-by-dp": (
            "error", "global batch % (dp x micro batch) != 0 (no dynamic batch)",
                "--actor-num-nodes 4 --global-batch-size 48"),
        "dynamic-batch-bshd": (
            "error", f"`{F.dynamic_batch}` with `{F.qkv_format} bshd`: miles asserts dynamic "
            "batches are not supported for bshd",
                "--qkv-format bshd --use-dynamic-batch-size --max-tokens-per-gpu 4096"),
        "dynamic-global-batch-requires-dynamic-batch": (
            "error", f"`{F.dynamic_global_batch}` without `{F.dynamic_batch}`",
                "--use-dynamic-global-batch-size"),
        "steps-per-rollout-conflict": (
            "error", f"`{F.steps_per_rollout}` and `{F.global_batch_size}` disagree",
                "--num-steps-per-rollout 32 --global-batch-size 4 --rollout-batch-size 1"),
        "rollout-batch-not-multiple-of-global-batch": (
            "warning", "rollout batch x samples per prompt % global batch != 0: miles trims the "
            f"remainder (skipped with `{F.no_trim}`)",
                "--rollout-batch-size 3 --global-batch-size 2"),
        "rollout-batch-below-global-batch": (
            "error", "rollout batch x samples per prompt < global batch: not one global batch "
            "is filled, and miles raises 'Not enough samples' after the first rollout",
                "--rollout-batch-size 2 --n-samples-per-prompt 2 --global-batch-size 8"),
    },
)
def batch_sizes(topo: Topology) -> Iterator[Problem]:
    lay, bat = topo.layout, topo.batch
    gbs = bat.global_batch_size
    if bat.dynamic_global_batch:
        # miles utils/arguments.py miles_validate_args: needs --use-dynamic-batch-size (unless
        # multi-LoRA); the
        # global batch is then set per rollout (RolloutManager._compute_dynamic_global_batch_size)
        if not bat.dynamic_batch:
            yield _found(
                "dynamic-global-batch-requires-dynamic-batch",
                f"{F.dynamic_global_batch} needs {F.dynamic_batch}: miles refuses "
                "it at start-up (static micro-batches cannot follow a data-dependent count).",
                f"add {F.dynamic_batch} with {F.max_tokens_per_gpu} N",
                "dynamic_global_batch", "dynamic_batch",
            )
        return
    if bat.dynamic_batch and bat.qkv_format == "bshd":
        yield _found(  # miles 31f1ca9 utils/arguments.py miles_validate_args, `if
            # args.qkv_format == "bshd"`: "Dynamic batch size is not supported for bshd format"
            "dynamic-batch-bshd",
            f"{F.dynamic_batch} with {F.qkv_format} bshd: miles refuses it at start-up "
            "(\"Dynamic batch size is not supported for bshd format\"); bshd batches are "
            "padded to fixed micro-batches.",
            f"drop {F.dynamic_batch} and give {F.micro_batch_size} N, or use "
            f"{F.qkv_format} thd",
            "dynamic_batch", "qkv_format",
        )
    if bat.dynamic_batch and bat.max_tokens_per_gpu is None:
        # miles utils/arguments.py miles_validate_args asserts it; slime 624b824 too
        # (utils/arguments.py:1868 slime_validate_args)
        yield _found(
            "dynamic-batch-requires-max-tokens",
            f"{F.dynamic_batch} needs {F.max_tokens_per_gpu}: {_fw(topo)} asserts it at "
            "start-up.",
            f"add {F.max_tokens_per_gpu} N",
            "dynamic_batch", "max_tokens_per_gpu",
        )
    if bat.rollout_batch_size is not None and bat.steps_per_rollout is not None:
        total = bat.rollout_batch_size * bat.n_samples_per_prompt
        want = total // bat.steps_per_rollout
        if gbs is not None and gbs != want:
            # miles utils/arguments.py miles_validate_args asserts equality; slime 624b824
            # too (utils/arguments.py:1971-1978)
            yield _found(
                "steps-per-rollout-conflict",
                f"{F.steps_per_rollout} {bat.steps_per_rollout} sets the global batch to "
                f"{bat.rollout_batch_size} x {bat.n_samples_per_prompt} // "
                f"{bat.steps_per_rollout} = {want}, but {F.global_batch_size} is {gbs}; "
                f"{_fw(topo)} asserts they agree.",
                f"drop {F.global_batch_size}, or set it to {want}",
                "steps_per_rollout", "global_batch_size",
            )
    if gbs is None:
        return
    if bat.rollout_batch_size is not None:
        total = bat.rollout_batch_size * bat.n_samples_per_prompt
        slime = _fw(topo) == "slime"
        if total < gbs and not bat.no_trim:
            # miles 31f1ca9 ray/rollout/rollout_data_conversion.py:43 (trim to a multiple of
            # the global batch; trim_len == 0 raises "Not enough samples"); slime 624b824
            # counts the global batch in rollouts and asserts one step's worth
            # (utils/dp_schedule.py:136 build_dp_schedule, "num_rollouts (N) <
            # global_batch_size (G)")
            yield _found(
                "rollout-batch-below-global-batch",
                f"rollout_batch_size x n_samples_per_prompt = {bat.rollout_batch_size} x "
                f"{bat.n_samples_per_prompt} = {total} samples do not fill one global batch of "
                f"{gbs}: "
                + ("slime asserts 'num_rollouts < global_batch_size' at the first training "
                   "step (after the first rollout)." if slime else
                   "miles raises 'Not enough samples' after the first rollout."),
                f"try {F.global_batch_size} {_or(_nearest(_divisors(total), gbs))}",
                "rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
            )
        elif total % gbs and not bat.no_trim:
            # RolloutManager._get_rollout_data trims to a multiple of the global batch
            yield _found(
                "rollout-batch-not-multiple-of-global-batch",
                f"rollout_batch_size x n_samples_per_prompt = {bat.rollout_batch_size} x "
                f"{bat.n_samples_per_prompt} = {total} samples is not a multiple of "
                f"global_batch_size {gbs} ({total}/{gbs} = {total / gbs:.2f}): "
                + (f"slime trains {total // gbs} step(s) of {gbs} and drops the trailing "
                   f"{total % gbs} rollouts (utils/dp_schedule.py build_dp_schedule)."
                   if slime else f"miles trims every rollout to {total // gbs * gbs} samples, "
                   f"dropping {total % gbs}."),
                f"try {F.global_batch_size} {_or(_nearest(_divisors(total), gbs))}",
                "rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
            )
        elif total % gbs and not bat.partial_train_step:
            yield _skip(
                "rollout-batch-not-multiple-of-global-batch",
                f"{total} samples per rollout are not a multiple of global_batch_size {gbs} and "
                f"{F.no_trim} keeps the remainder; what training does with a "
                "partial batch is not checked here.",
                f"try {F.global_batch_size} {_or(_nearest(_divisors(total), gbs))}, or "
                f"{F.partial_train_step}",
                "rollout_batch_size", "global_batch_size", "no_trim",
            )
    step = topo.dp * bat.micro_batch_size
    # megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator asserts
    # global_batch_size % (micro_batch_size * dp) == 0 (static micro-batches only)
    if (not bat.dynamic_batch and lay.train_backend == "megatron"
            and topo.world_size % lay.dense_model_size == 0 and gbs % step):
        yield _found(
            "global-batch-not-divisible-by-dp",
            f"global_batch_size {gbs} is not divisible by dp x micro_batch_size = {topo.dp} x "
            f"{bat.micro_batch_size} = {step} ({gbs}/{step} = {gbs / step:.2f}).",
            f"try {F.global_batch_size} "
            f"{_or([step * max(1, gbs // step), step * (gbs // step + 1)])}, or {F.dynamic_batch}",
            "global_batch_size", "micro_batch_size",
        )
