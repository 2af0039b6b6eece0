"""workbench estimate: memory (per term, per stage), time and layout for one model / cluster / plan."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from workbench.commands.common import add_spec_arguments, profile_from_args, specs_from_args
from workbench.defaults import GiB


def _sharding(p) -> str:
    """How the plan shards model states, in the plan line: Megatron's DDP or distributed optimizer, or the ZeRO
    stage with what it offloads."""
    if str(p.engine) == "megatron":
        return "distributed optimizer" if p.distributed_optimizer else "DDP (no sharding)"
    text = f"ZeRO-{int(p.zero_stage)}"
    if str(p.offload_optimizer) != "none":
        text += f", optimizer offloaded to {p.offload_optimizer}"
    if str(p.offload_params) != "none":
        text += f", parameters offloaded to {p.offload_params}"
    return text


def add_parser(sub) -> None:
    parser = sub.add_parser("estimate", help="memory and time for one plan", description=__doc__)
    add_spec_arguments(parser)
    add_simulate_allocator_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def add_simulate_allocator_argument(parser) -> None:
    """``--simulate-allocator/--no-simulate-allocator`` (``estimate`` and ``advise``)."""
    parser.add_argument("--simulate-allocator", action=argparse.BooleanOptionalAction, default=None,
                        help="replay PyTorch's caching allocator over the plan's traced training steps and take its "
                             "peak reserved in place of the constant reserve (DeepSpeed on one GPU: ZeRO 0-2 "
                             "with or without --overlap-comm and ZeRO-3 with it, ZeRO-1 to 3 also with "
                             "--offload-optimizer cpu (ZeRO-3's without accumulation), "
                             "ZeRO-3 also with --offload-params cpu; Hugging Face models (LoRA included) "
                             "from --model hf:PATH, "
                             "needs torch and transformers; "
                             "megatron-core models with --attention unfused, the launcher's local layer spec, "
                             "under those DeepSpeed stages or under megatron-core's own DDP on one GPU (--engine "
                             "megatron --adam torch, plain or distributed optimizer), "
                             "needs torch and megatron-core). Default: replayed wherever the plan is in that scope "
                             "and the libraries import (a few seconds), else the constant, saying why; "
                             "--simulate-allocator: replay or refuse, naming why; --no-simulate-allocator: the "
                             "constant reserve always")


def _gib(n) -> str:
    return f"{n / GiB:8.2f} GiB"


def _stage_split(mem) -> str:
    """``7 / 8 x 14 / 7``: transformer layers on the first, middle and last stages."""
    layers = [s.num_layers for s in mem.stages]
    middle = f" / {layers[1]} x {len(layers) - 2}" if len(layers) > 2 else ""
    return f"{layers[0]}{middle} / {layers[-1]}"


def render(est, replay: Optional[dict] = None) -> str:
    """The readable table (``--json`` prints ``Estimate.to_dict()`` instead); ``replay``: the record of the
    allocator replay (:func:`replay_line`), when the caller decided on it."""
    from workbench.encode import moe_token_factor
    from workbench.specs import builds_in_zero_init, hf_checkpointing_words

    m, c, p, mem = est.model, est.cluster, est.plan, est.memory
    lines = [
        f"model   {m.name}: {m.num_parameters / 1e9:.2f} B parameters, {m.num_layers} layers, hidden {m.hidden_size}, "
        f"{m.num_attention_heads} heads, seq {m.seq_length}",
        f"cluster {c.num_nodes} x {c.gpus_per_node} x {c.gpu.name} ({c.gpu.memory_gib:.1f} GiB each)",
        f"plan    {p.engine}: TP {p.tensor_parallel} x PP {p.pipeline_parallel}"
        + (f" (v={p.virtual_pipeline})" if p.virtual_pipeline > 1 else "")
        + (f" (layers per stage: {_stage_split(mem)})" if p.uneven_stages else "")
        + (f" x Ulysses {p.ulysses} (all-to-all)" if p.is_ulysses else "")
        + (f" x CP {p.context_parallel}" if p.context_parallel > 1 and not p.is_ulysses else "")
        + (f" ({p.cp_comm_type}" + (f" {'x'.join(map(str, p.hierarchical_context_parallel_sizes))}"
                                    if p.hierarchical_context_parallel_sizes else "") + ")"
           if p.context_parallel > 1 and str(p.cp_comm_type) != "p2p" and not p.is_ulysses else "")
        + f" x DP {p.data_parallel}, {_sharding(p)}, recompute {p.recompute}, micro batch "
          f"{p.micro_batch_size}, global batch {p.global_batch_size} (accumulation {p.gradient_accumulation_steps}), "
          f"{p.precision}"
        + (f", LoRA r={p.lora_rank} on {','.join(p.lora_targets)} (base weights frozen)" if p.lora_rank else ""),
        *([f"experts {m.num_experts} per layer, top-{m.moe_top_k}: EP {p.expert_parallel} "
           f"({m.num_experts // p.expert_parallel} per rank) x expert TP {p.expert_tensor_parallel_size} x expert DP {p.expert_data_parallel}, "
           + ("DeepSpeed-MoE (deepspeed.moe.layer.MoE, all-to-all), padded to capacity, capacity factor "
              f"{p.moe_capacity_factor or 1.0:g}" if p.deepspeed_moe else
              f"{p.moe_token_dispatcher} dispatcher{' (overlapped)' if p.moe_overlap_alltoall else ''}, ")
           + ("" if p.deepspeed_moe else "dropless" if p.moe_capacity_factor is None else
              f"capacity factor {p.moe_capacity_factor:g}{' (padded)' if p.moe_pad_to_capacity else ''}")
           + (f", routing load imbalance {p.moe_load_imbalance:g} (busiest rank priced at "
              f"{moe_token_factor(p, m):.2f} x the balanced share)" if p.moe_load_imbalance != 1.0 else "")
           + (f", selective recompute of {p.moe_recompute}" if str(p.moe_recompute) != "none" else "")]
          if m.is_moe else []),
        f"stack   {m.attention} attention, {p.adam} Adam"
        + (" (CPU Adam: optimizer offloaded)" if str(p.offload_optimizer) != "none" else "")
        + f", gradient reduce {'overlapped' if p.overlaps_comm else 'not overlapped'}"
        + (" (engine default)" if p.overlap_comm is None else "")
        + (", expandable-segments allocator" if p.expandable_segments else "")
        + (", pageable offload buffers (pin_memory false)" if p.offloads_to_cpu and not p.pin_memory else "")
        + "".join(f", {label} {value:.3g}" for label, value in (
            ("reduce_bucket_size", p.reduce_bucket_size), ("stage3_prefetch_bucket_size", p.prefetch_bucket_size),
            ("stage3_param_persistence_threshold", p.param_persistence_threshold),
            ("sub_group_size", p.sub_group_size)) if value is not None)
        + ((", model built inside deepspeed.zero.Init" if builds_in_zero_init(m, p) else
            ", model built on the GPU, then partitioned") + (" (default)" if p.zero_init is None else "")
           if str(p.engine) in ("deepspeed", "megatron-deepspeed") and int(p.zero_stage) == 3 else "")
        + (", TP communication overlapped with the GEMMs (Transformer Engine userbuffers)" if p.tp_comm_overlap
           else "")
        + (f", Transformer Engine FP8 ({p.fp8_recipe} recipe"
           + (", FP8 parameter all-gather" if p.fp8_param_gather else "")
           + (f", first {p.fp8_bf16_first_layers} / last {p.fp8_bf16_last_layers} layers in bf16"
              if p.fp8_bf16_first_layers or p.fp8_bf16_last_layers else "") + ")"
           if p.precision.is_fp8 else ""),
        *([f"        transformers: {m.attention} attention "
           f"({'eager' if str(m.attention) == 'unfused' else 'sdpa / flash_attention_2'}), logits up-cast to fp32 "
           f"for the loss, gradient checkpointing {hf_checkpointing_words(m, p)}"
           + (f", {m.experts_implementation} experts" if m.experts_implementation is not None else "")
           + _sliding_window_text(m, p)]
          if str(m.implementation) == "transformers" else []),
        "",
        "memory per GPU" + (" (first / last pipeline stage)" if len(mem.stages) > 1 else ""),
    ]
    stages = [mem.stages[0]] + ([mem.stages[-1]] if len(mem.stages) > 1 else [])
    if mem.peak_stage.stage not in (0, len(mem.stages) - 1):  # an uneven split can peak on a middle stage
        stages.insert(1, mem.peak_stage)
        lines[-1] = f"memory per GPU (first / stage {mem.peak_stage.stage}, the peak / last pipeline stage)"
    for term in ("weights", "gradients", "optimizer", "activations", "buffers", "overhead"):
        lines.append(f"  {term:<12}" + "".join(_gib(getattr(s.terms, term)) for s in stages))
    if est.reserve_fraction is not None:
        reserved = est.replayed_peaks.peak_reserved_bytes
        above = reserved * est.reserve_fraction / (1 + est.reserve_fraction)
        outside = mem.peak_stage.terms.overhead - above  # the rest of the term: the stack's memory outside it
        lines[-1] += (f"  (allocator reserve {100 * est.reserve_fraction:.1f} % (replayed): the replay's peak reserved "
                      f"{reserved / GiB:.2f} GiB, {above / GiB:+.2f} GiB above the allocated terms; outside the "
                      f"allocator {outside / GiB:.2f} GiB)")
    lines.append("  " + "-" * (12 + 12 * len(stages)))
    lines.append(f"  {'total':<12}" + "".join(_gib(s.total_bytes) for s in stages))
    verdict = "fits" if mem.fits_gpu else "DOES NOT FIT"
    if mem.band_high_bytes or mem.band_low_bytes:
        band = f" (+{mem.band_high_bytes / GiB:.1f} / -{mem.band_low_bytes / GiB:.1f} GiB)"
        judged = ", judged on the upper side" if mem.headroom_bytes >= 0 else ""
    else:
        band, judged = "", ""
    lines.append(f"  peak {mem.per_gpu_peak_bytes / GiB:.2f} GiB{band} of {mem.capacity_bytes / GiB:.1f} GiB: {verdict}"
                 f" ({mem.headroom_bytes / GiB:+.2f} GiB headroom{judged}; peak in {mem.peak_stage.peak_phase})")
    lines.append(f"  error band: {mem.band_note}")
    if replay is not None:
        lines.append(replay_line(replay))
    from workbench.memory import memory_notes

    lines += [f"  why: {note}" for note in memory_notes(m, p, mem)]
    if mem.shows_host:
        lines.append(f"  host memory per node {mem.host_bytes_per_node / GiB:.1f} GiB of "
                     f"{mem.host_capacity_bytes_per_node / GiB:.0f} GiB" + ("" if mem.fits_host else ": DOES NOT FIT")
                     + f" (each rank's process {mem.host_bytes_per_gpu / GiB:.1f} GiB resident: "
                     + _host_part(p, mem) + "the process itself)")
    if est.time is not None:
        t = est.time
        low, high, step_note = est.step_band_seconds
        step_band = f" (+{high:.3f} / -{low:.3f})" if low or high else ""
        lines += ["", f"time    {t.step_seconds:.3f}{step_band} s/step, {t.tokens_per_second:,.0f} tokens/s, "
                      f"{t.model_tflops_per_gpu:.0f} model TFLOP/s per GPU, MFU {t.mfu:.1%}"]
        parts = ", ".join(f"{k} {v:.3f}s" for k, v in t.breakdown.items() if v > 0)
        lines.append(f"        {parts}")
        lines.append(f"        host share {t.host_share:.0%} (how much of the step follows the host CPU's speed); "
                     f"error band: {step_note}")
        from workbench.layerops import host_note

        note = host_note(m, p)
        if note:
            lines.append(f"        host: {note}")
    if est.profile is not None:
        lines += ["", f"profile {est.profile['note']}" if est.profile.get("name") else f"note: {est.profile['note']}"]
    if est.layout is not None and est.layout.warnings:
        lines += [""] + [f"warning: {w}" for w in est.layout.warnings]
    for check in est.checks:
        status = getattr(check, "status", None) or (check.get("status") if isinstance(check, dict) else "")
        text = getattr(check, "message", None) or (check.get("message") if isinstance(check, dict) else str(check))
        lines.append(f"check [{status}] {text}")
    return "\n".join(lines)


def _replay_given(args, model, plan):
    """What ``--simulate-allocator`` has :func:`workbench.estimate.estimate` replay the allocator from
    (``simulate_allocator=``): ``True`` for a megatron-core model (traced from its specs), the ``--model hf:PATH``
    config of a transformers model. The estimate checks the plan's scope (:func:`workbench.allocsim.check_scope`)
    before it reads either, so it is not checked here too; a transformers model not imported from a config is
    refused here, after that same check, so that an out-of-scope plan is still named first."""
    from workbench.allocsim import SCOPE, check_scope, is_megatron

    if is_megatron(model):
        return True
    if str(args.model or "").startswith("hf:"):
        return args.model[3:]
    check_scope(model, plan)
    raise ValueError(f"{SCOPE}; this plan's transformers model {model.name} is not imported from a config "
                     f"(--model hf:PATH)")


def _auto_replay(args, model, plan):
    """``(simulate_allocator, skipped)`` when ``--simulate-allocator`` is not given: where
    :func:`workbench.allocsim.auto_replay_skipped` finds nothing against the replay, ``True`` for a megatron-core
    model or the ``--model hf:PATH`` config imported once (an HFModel, which the estimate traces from without
    reading the file again); else ``None`` and why not (one phrase)."""
    from workbench.allocsim import auto_replay_skipped, check_config_model, is_megatron

    hf_path = str(args.model or "").startswith("hf:")
    skipped = auto_replay_skipped(model, plan, has_config=hf_path)
    if skipped is not None:
        return None, skipped
    if is_megatron(model):
        return True, None
    from workbench.hf import import_hf

    imported = import_hf(args.model[3:], seq_length=model.seq_length)
    try:  # a spec changed by flags (--layers, ...) is not the config's model the trace builds
        check_config_model(model, imported.spec)
    except ValueError as exc:
        return None, str(exc).split(": the replay builds")[0]
    return imported, None


def estimate_replayed_or_not(args, model, cluster, plan, profile=None):
    """The estimate and a record of the allocator replay (``allocator_replay`` in ``--json``): asked for
    (``--simulate-allocator``: refused with the reason when it cannot run), turned off, or automatic — replayed where
    it can run, and where the replay itself fails, the constant-reserve estimate with the failure on stderr (the
    plan is not the problem: the estimate without the replay is made the same way). ``profile``: the hardware
    profile ``--profile`` names, resolved once by the caller (``advise`` prices its other plans with it too)."""
    from workbench.estimate import estimate

    if args.simulate_allocator is not None:
        simulate = _replay_given(args, model, plan) if args.simulate_allocator else None
        est = estimate(model, cluster, plan, profile=profile, simulate_allocator=simulate)
        return est, {"mode": "on" if args.simulate_allocator else "off", "replayed": simulate is not None,
                     "skipped": None if simulate is not None else "--no-simulate-allocator"}
    simulate, skipped = _auto_replay(args, model, plan)
    if simulate is not None:
        print("replaying the caching allocator over the plan's traced steps (--no-simulate-allocator skips it)",
              file=sys.stderr)
        try:
            est = estimate(model, cluster, plan, profile=profile, simulate_allocator=simulate)
            return est, {"mode": "auto", "replayed": True, "skipped": None}
        except Exception as exc:  # noqa: BLE001 - the trace runs third-party code; the plan is judged below
            from workbench.allocsim import replay_failure

            skipped = replay_failure(exc)
    est = estimate(model, cluster, plan, profile=profile)
    if simulate is not None:
        print(f"warning: {skipped}; the constant reserve is used", file=sys.stderr)
    return est, {"mode": "auto", "replayed": False, "skipped": skipped}


def _host_part(plan, mem) -> str:
    """What a rank's host memory holds beside the process itself, in words ending in " and ", for the estimate's host
    line (``""``: the process alone): the offloaded states and DeepSpeed's buffers (CPU offload) or its swap buffers
    (NVMe, the states on the drive), and ZeRO-3's defragment of the parameters it keeps on the GPU where that, at
    init, may be more than the rest."""
    from workbench.memory import defragments_through_host
    from workbench.specs import Offload

    defrag = "the rank's parameter partition, which ZeRO-3 defragments through one host buffer at initialization"
    if Offload.NVME in (plan.offload_optimizer, plan.offload_params) and mem.nvme_bytes_per_gpu:
        held = ("DeepSpeed's page-locked NVMe swap buffers, the 16-bit gradient partition and the parameters kept "
                f"in host memory up to max_in_cpu ({mem.nvme_bytes_per_gpu / GiB:.1f} GiB of states on the drive)")
        if defragments_through_host(plan):
            held = f"the larger of {held} and {defrag}"
    elif mem.offloaded_bytes_per_gpu:
        held = (f"{mem.offloaded_bytes_per_gpu / GiB:.1f} GiB of offloaded states, DeepSpeed's host buffers "
                f"(page-locked ones rounded up to a power of two)")
    elif defragments_through_host(plan):
        held = defrag
    else:
        return ""
    return held + " and "


def replay_line(record: dict) -> str:
    """The table's line saying where the allocator reserve came from and, when not replayed, why."""
    if record["replayed"]:
        how = ("asked for" if record["mode"] == "on" else
               "automatic for this one-GPU plan; --no-simulate-allocator: the constant reserve")
        return f"  allocator: replayed over the traced steps ({how})"
    return f"  allocator: constant reserve by engine (not replayed: {record['skipped']})"


def run(args) -> int:
    from workbench.cli import print_json

    model, cluster, plan = specs_from_args(args)
    est, replay = estimate_replayed_or_not(args, model, cluster, plan, profile_from_args(args))
    if args.json:
        print_json({**est.to_dict(), "allocator_replay": replay})
    else:
        print(render(est, replay))
    return 0


def _sliding_window_text(m, p) -> str:
    """The stack line's note on a model's sliding-window layers: how many, and what their sdpa masks keep
    (:func:`workbench.memory.sliding_window_bias_bytes`, with grouped K/V heads also the repeated K and V,
    :func:`workbench.memory.sliding_window_repeat_bytes`), or that the sequence is below the window."""
    from workbench.memory import sliding_window_bias_bytes, sliding_window_kept_bytes, sliding_window_repeat_bytes

    if m.sliding_window is None:
        return ""
    text = f", sliding window {m.sliding_window} tokens on {m.sliding_window_layers} of {m.num_layers} layers"
    sizes = dict(micro_batch=p.micro_batch_size, value_bytes=p.precision.bytes_per_value)
    bias = sliding_window_bias_bytes(m, **sizes)
    if not bias:
        return text + (" (eager: one shared mask)" if str(m.attention) == "unfused" else " (no mask below the window)")
    kept = ("one at a time, checkpointed" if str(p.recompute) == "full"
            else f"{sliding_window_kept_bytes(m, **sizes) / GiB:.2f} GiB in all")
    repeat = sliding_window_repeat_bytes(m, **sizes)
    repeated = f", and K and V repeated to every query head, {repeat / GiB:.2f} GiB" if repeat else ""
    return text + (f" (sdpa keeps each one's mask as a bias, {bias / GiB:.2f} GiB{repeated}: {kept}; with a mask the "
                   f"kernel computes the whole score matrix, not its causal half)")


