"""Advisor: the DeepSpeed-vs-Megatron practitioner's guide's rules of thumb, computed on the user's plan.

The guide (``guide_deepspeed_vs_megatron_zh``, "DeepSpeed与Megatron-LM实战指南") gives rules as text; here each rule is a
:class:`Finding` that passes, warns or fails for *this* plan with the numbers the memory and time models give:

- §2.2 strategy tier by GPU count (1-8: ZeRO-2/3 first; 8-32: DeepSpeed + Megatron hybrid; 32+: Megatron model
  parallel as the base); ZeRO-3 needs room for at least one layer's parameters per GPU; a 7B-class model wants
  ≥ 40 GB cards;
- §4 TP inside a node, reduce/all-gather bucket sizes matched to the network, ``overlap_comm`` on InfiniBand;
- §5.1 low throughput: what is exposed (ranked by the time model) and the commands to look closer (NCCL_DEBUG=INFO,
  ``nsys profile``);
- §5.2 out of memory, in the guide's order: smaller micro batch with more accumulation, activation checkpointing,
  (the states sharded on the GPU: a higher ZeRO stage or the distributed optimizer, before) ZeRO-3 CPU offload
  (:func:`oom_ladder`);
- long context (≥ 16k tokens): materialised attention's s² scores, and context vs tensor parallelism priced both
  ways (:func:`long_context_attention`, :func:`context_parallel_choice`);
- Megatron's loss kernels: Transformer Engine's fused cross entropy where it saves memory or step time on this
  plan, priced by re-estimating it (:func:`cross_entropy_fusion_advice`);
- §5.3 convergence: gradient clipping 0.5-1.0 for ≥ 13B, loss-scale window and monitoring for fp16, Adam betas
  0.9/0.95 — read from the :class:`~workbench.configs.deepspeed.DeepSpeedOptions` the exports write.

:func:`check_plan` is the cheap part (it reads an existing estimate; ``estimate()`` fills ``checks`` with it);
:func:`advise` adds the OOM ladder, the throughput suggestions and the commands.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional


from workbench import memory as M
from workbench import timing as T
from workbench.defaults import MEGATRON_BUCKET_ELEMENTS, GiB, megatron_recompute_flags
from workbench.parallel import group_crosses_nodes
from workbench.configs.deepspeed import (LARGE_MODEL_PARAMETERS, DeepSpeedOptions, nvme_param_buffer_size,
                                         pageable_offload_cost)
from workbench.specs import (CROSS_ENTROPY_FUSION_CODES, NO_PIPELINE, ClusterSpec, CrossEntropyFusion, Engine,
                             Implementation, ModelSpec, Normalization, Offload, ParallelPlan, Precision, Recompute,
                             ZeroStage, hf_checkpoint_counts, hf_checkpoint_every, ulysses_head_limit, validate)

STATUSES = ("pass", "warn", "fail")
CARD_GB_FOR_7B = 40.0
"""Guide §2.2: "for a 7B-parameter model, at least 40 GB of memory per card is recommended"."""
SEVEN_B_CLASS_PARAMETERS = 6e9
"""Models from this size on count as 7B-class for the card-size rule (Llama-2-7B has 6.74e9 parameters)."""
BUCKET_RATIO_RANGE = (0.25, 4.0)
"""A bucket's transfer time should be within this factor of one layer's backward compute: much shorter and the
per-call latency dominates, much longer and the last bucket (always exposed) grows."""


# ================================================================================================================
# Result types
# ================================================================================================================
@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One rule checked on one plan."""

    id: str
    """Stable key, e.g. ``tp_within_node``."""
    status: str
    """``pass``, ``warn`` or ``fail``."""
    message: str
    """What was found, with the numbers."""
    suggestion: str = ""
    """What to change (empty when nothing needs to)."""
    numbers: dict = field(default_factory=dict)
    """The numbers behind the message, for JSON readers (empty for most findings; ``to_dict`` adds it when set)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of: {', '.join(STATUSES)}")

    def to_dict(self) -> dict:
        out = {"id": self.id, "status": self.status, "message": self.message, "suggestion": self.suggestion}
        if self.numbers:
            out["numbers"] = dict(self.numbers)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class LadderStep:
    """One rung of the out-of-memory ladder (guide §5.2), priced by the memory and time models."""

    step: int
    """0 the expandable-segments allocator, 1 micro batch, 2 activation checkpointing, 3 ZeRO-3 CPU offload."""
    action: str
    """What changes, in words."""
    plan: Optional[ParallelPlan]
    """The plan after this rung (``None`` when the rung cannot be applied; ``action`` says why)."""
    peak_bytes: int = 0
    host_bytes_per_node: int = 0
    fits: bool = False
    fits_point_estimate: bool = False
    """Whether the point estimate of the peak fits (GPU and host): a rung that fits there but not at the error band's
    upper side, which ``fits`` judges, is one the planner would rank and mark as risky."""
    step_seconds: float = 0.0
    slowdown: float = 0.0
    """Step time relative to the original plan minus 1 (0.25 = 25 % slower)."""
    limit: str = ""
    """What the plan runs out of when it does not fit (GPU or host memory, with the numbers); '' when it fits."""
    settings: dict = field(default_factory=dict)
    """The config keys / flags that make this change."""
    replayed: bool = False
    """The rung's reserve above the allocated peak is the allocator replayed for its plan (else the constant)."""

    @property
    def verdict(self) -> str:
        """The rung in words: fits, fits on the point estimate only (the error band's upper side, which the ladder
        judges by, passes the limit; the planner ranks such a plan and marks it), or does not fit."""
        if self.fits:
            return "fits"
        return "fits on the point estimate only" if self.fits_point_estimate else "does not fit"

    def to_dict(self) -> dict:
        return {"step": self.step, "action": self.action,
                "plan": None if self.plan is None else _plan_text(self.plan), "peak_bytes": self.peak_bytes,
                "peak_gib": self.peak_bytes / GiB, "host_bytes_per_node": self.host_bytes_per_node,
                "fits": self.fits, "fits_point_estimate": self.fits_point_estimate, "limit": self.limit,
                "step_seconds": self.step_seconds,
                "slowdown": self.slowdown, "settings": dict(self.settings), "replayed": self.replayed}


@dataclass(frozen=True, kw_only=True, slots=True)
class Suggestion:
    """A low-throughput remedy, for a time term the model says is exposed."""

    term: str
    """Key of :data:`workbench.timing.TERMS`."""
    exposed_seconds: float
    fraction_of_step: float
    message: str
    settings: tuple = ()
    """Settings or flags to try."""
    predicted_step_seconds: Optional[float] = None
    """Step time after the change, when the change is a plan the models can price."""

    def to_dict(self) -> dict:
        return {"term": self.term, "exposed_seconds": self.exposed_seconds, "fraction_of_step": self.fraction_of_step,
                "message": self.message, "settings": list(self.settings),
                "predicted_step_seconds": self.predicted_step_seconds}


@dataclass(frozen=True, kw_only=True, slots=True)
class Advice:
    findings: tuple
    """:class:`Finding` per rule."""
    oom_ladder: tuple = ()
    """:class:`LadderStep` rungs tried, when the plan does not fit (empty when it does)."""
    throughput: tuple = ()
    """:class:`Suggestion` ranked by exposed seconds."""
    commands: tuple = ()
    """Shell lines to diagnose this run (NCCL debug output, an Nsight Systems profile)."""
    log_findings: tuple = ()
    """Findings from a training log, matched to the advice (see :mod:`workbench.logreader`)."""

    def to_dict(self) -> dict:
        return {"findings": [f.to_dict() for f in self.findings],
                "oom_ladder": [s.to_dict() for s in self.oom_ladder],
                "throughput": [s.to_dict() for s in self.throughput], "commands": list(self.commands),
                "log_findings": [f.to_dict() for f in self.log_findings]}


def _plan_text(p: ParallelPlan) -> str:
    from workbench.planner import describe_plan

    return describe_plan(p)


# ================================================================================================================
# Checks (cheap: read an estimate, no re-evaluation)
# ================================================================================================================
def _gb(nbytes) -> str:
    return f"{nbytes / GiB:.1f} GiB"


def strategy_tier(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, memory) -> Finding:
    """Guide §2.2 tiers by GPU count: ≤ 8 ZeRO-2/3; 9-32 the DeepSpeed+Megatron hybrid; > 32 Megatron model
    parallel (TP/PP) as the base. ZeRO partitions over the data-parallel ranks: a one-GPU plan passes, the finding
    saying what cuts memory there instead."""
    W, e = plan.world_size, plan.engine
    mp = plan.tensor_parallel * plan.pipeline_parallel
    fit = f"this plan peaks at {_gb(memory.per_gpu_peak_bytes)} of {_gb(memory.capacity_bytes)}"
    if W == 1:  # ZeRO partitions over data-parallel ranks: on one GPU it splits nothing
        ok = True
        tier, want = "1-8 GPUs", ("DeepSpeed ZeRO-2 or ZeRO-3 first, but on one GPU ZeRO splits "
                                  "nothing: CPU/NVMe offload, recompute or LoRA are what cut memory")
        fix = ""
    elif W <= 8:
        ok = e is not Engine.MEGATRON and plan.zero_stage >= ZeroStage.GRADIENTS
        tier, want = "1-8 GPUs", "DeepSpeed ZeRO-2 or ZeRO-3 first"
        fix = "try engine=deepspeed with zero_stage=2 (or 3 when it does not fit)"
    elif W <= 32:
        ok = e is Engine.MEGATRON_DEEPSPEED
        tier, want = "8-32 GPUs", "the DeepSpeed + Megatron hybrid (Megatron TP/PP with ZeRO over data parallel)"
        fix = "try engine=megatron-deepspeed with TP inside a node and ZeRO-1"
    else:
        ok = e is not Engine.DEEPSPEED and mp > 1
        tier, want = "32+ GPUs", "Megatron model parallel (TP/PP) as the base"
        fix = f"try engine=megatron or megatron-deepspeed with TP up to {cluster.gpus_per_node} and PP across nodes"
    now = (f"engine={e}, TP={plan.tensor_parallel}, PP={plan.pipeline_parallel}, ZeRO-{int(plan.zero_stage)}"
           + (", distributed optimizer" if plan.distributed_optimizer else ""))
    msg = f"{W} GPUs is the guide's {tier} tier: {want}; plan has {now}; {fit}"
    if (not ok and e is Engine.MEGATRON and plan.tensor_parallel == 4 and plan.pipeline_parallel == 2
            and model.num_layers == 40 and model.hidden_size == 5120):
        msg += ("; note: this is the guide's own Megatron example (§3.2: 13B, TP 4 × PP 2), so the tier rule is a "
                "preference here, not a fault")
    return Finding(id="strategy_tier", status="pass" if ok else "warn", message=msg,
                   suggestion="" if ok else fix + " (`workbench plan` ranks them by step time)")


def zero3_layer_room(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """Guide §2.2: with ZeRO-3 each GPU must hold at least one whole layer's parameters (they are gathered layer
    by layer). Room = GPU memory − everything else at the peak (the gathered-parameter buffers excluded)."""
    if plan.zero_stage != ZeroStage.PARAMETERS:
        return None
    layer = float(M.layer_params_per_rank(model, plan.tensor_parallel)) * plan.precision.bytes_per_value
    terms = memory.breakdown
    others = memory.per_gpu_peak_bytes - terms.buffers
    room = memory.capacity_bytes - others
    ok = layer <= room
    return Finding(id="zero3_layer_fits", status="pass" if ok else "fail",
                   message=f"ZeRO-3 gathers one layer at a time: a layer is {_gb(layer)} of {plan.precision} "
                           f"parameters (TP={plan.tensor_parallel}); with the rest of the step at {_gb(others)} the "
                           f"{_gb(memory.capacity_bytes)} GPU has {_gb(room)} left for it",
                   suggestion="" if ok else "raise tensor_parallel to split each layer, or use GPUs with more memory")


def card_size(model: ModelSpec, cluster: ClusterSpec, num_parameters: Optional[int] = None) -> Optional[Finding]:
    """Guide §2.2: a 7B model wants ≥ 40 GB per card (applied to models ≥ 6e9 parameters)."""
    n = model.num_parameters if num_parameters is None else num_parameters
    if n < SEVEN_B_CLASS_PARAMETERS:
        return None
    gb = cluster.gpu.memory_gib * GiB / 1e9
    ok = gb >= CARD_GB_FOR_7B
    return Finding(id="card_size", status="pass" if ok else "warn",
                   message=f"{model.name} has {n / 1e9:.1f} B parameters; the guide wants ≥ {CARD_GB_FOR_7B:.0f} GB "
                           f"cards for 7B-class models; {cluster.gpu.name} has {cluster.gpu.memory_gib:.1f} GiB = "
                           f"{gb:.1f} GB (GB = 10^9 bytes, as in the guide and card names; GiB = 2^30 bytes, as in "
                           f"every other figure here)",
                   suggestion="" if ok else "expect ZeRO-3 + offload or deep model parallelism; prefer ≥ 40 GB cards")


def tp_within_node(cluster: ClusterSpec, plan: ParallelPlan, time) -> Finding:
    """Guide §4: tensor parallel inside a node (its all-reduces run every layer); "inside" is the one rule of
    :func:`workbench.parallel.group_crosses_nodes`."""
    t, n = plan.tensor_parallel, cluster.gpus_per_node
    ok = not bool(group_crosses_nodes(1, t, n))
    tp_s = time.breakdown["tp_comm"] if time is not None else 0.0
    share = tp_s / time.step_seconds if time is not None else 0.0
    where = "inside one node" if ok else f"across nodes (gpus_per_node={n})"
    return Finding(id="tp_within_node", status="pass" if ok else "fail",
                   message=f"TP={t} runs {where}: tensor-parallel all-reduce {tp_s:.3f} s/step ({share:.1%} of the "
                           f"step)",
                   suggestion="" if ok else f"keep tensor_parallel ≤ {n} (a divisor of gpus_per_node) and add "
                                            f"pipeline parallel across nodes")


def _dp_link(time):
    """The data-parallel (× context-parallel) gradient group's link as the time model priced it."""
    link = time.links["dp"]
    return link["gb_per_s"], link["latency_s"], link["link"] == "inter-node"


def bucket_sizes(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time,
                 options: DeepSpeedOptions) -> Optional[Finding]:
    """Guide §4: match ``reduce_bucket_size`` / ``allgather_bucket_size`` to the bandwidth. A bucket's collective
    (ring cost of :func:`workbench.timing.collective_seconds` on the data-parallel link) should take about as long
    as one layer's backward compute: the recommended size is the element count whose transfer equals it."""
    if plan.data_parallel * plan.context_parallel == 1 or time is None:
        return None
    group = plan.data_parallel * plan.context_parallel
    bw, lat, crosses = _dp_link(time)
    v = plan.precision.bytes_per_value
    layer_s = time.layer_backward_seconds  # one layer's backward for one micro-batch, as the time model priced it
    local = time.inputs["num_parameters"] / (plan.tensor_parallel * plan.pipeline_parallel)  # as the model priced
    if plan.engine is Engine.MEGATRON:
        named = {"Megatron DDP bucket (--ddp-bucket-size)": MEGATRON_BUCKET_ELEMENTS}
        kinds = {"Megatron DDP bucket (--ddp-bucket-size)": "reduce_scatter" if plan.distributed_optimizer
                 else "all_reduce"}
    else:
        named = {"reduce_bucket_size": (options.reduce_bucket_size if plan.reduce_bucket_size is None
                                        else plan.reduce_bucket_size)}
        kinds = {"reduce_bucket_size": "all_reduce" if plan.zero_stage == 0 else "reduce_scatter"}
        if ZeroStage.OPTIMIZER <= plan.zero_stage <= ZeroStage.GRADIENTS:
            named["allgather_bucket_size"] = options.allgather_bucket_size
            kinds["allgather_bucket_size"] = "all_gather"
    factor = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}
    parts, bad, recs = [], False, {}
    for name, elements in named.items():
        elems = min(float(elements), local)
        secs = float(T.collective_seconds(elems * v, group, gb_per_s=bw, latency_s=lat, kind=kinds[name]))
        ratio = secs / layer_s if layer_s > 0 else float("inf")
        per_elem = factor[kinds[name]] * (group - 1) / group * v / (bw * 1e9)
        rec = float(f"{min(layer_s / per_elem, local):.1g}")
        recs[name] = int(rec)
        lo, hi = BUCKET_RATIO_RANGE
        off = not lo <= ratio <= hi
        bad |= off
        parts.append(f"{name}={elements:.2g} elements → {secs * 1e3:.1f} ms per {kinds[name].replace('_', '-')} "
                     f"({ratio:.1f}× one layer's backward, {layer_s * 1e3:.1f} ms)")
    link = f"{bw:.0f} GB/s {'inter-node' if crosses else 'intra-node'} link over {group} ranks"
    sugg = ", ".join(f"{k} ≈ {v:.2g}" for k, v in recs.items())
    return Finding(id="bucket_sizes", status="warn" if bad else "pass",
                   message=f"{'; '.join(parts)} on the {link}",
                   suggestion=f"set {sugg} (transfer ≈ one layer's backward)" if bad else "")


def overlap_comm(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time, *,
                 detailed: bool = False) -> Optional[Finding]:
    """Guide §4: enable overlap on InfiniBand (multi-node data parallel). Reads the plan's answer
    (:attr:`ParallelPlan.overlaps_comm`), which the time model priced and the exports write. With ``detailed``
    the step is priced once more with overlap flipped, for the comparison."""
    if plan.data_parallel * plan.context_parallel == 1 or time is None:
        return None
    _, _, crosses = _dp_link(time)
    on = plan.overlaps_comm
    if plan.engine is Engine.MEGATRON:
        name = ("--overlap-grad-reduce on" if on else "--overlap-grad-reduce off (Megatron's default)")
    else:
        name = f"overlap_comm={str(on).lower()}"
    dp_s = time.breakdown["dp_comm"]
    extra = f"; exposed data-parallel traffic {dp_s:.3f} s/step {'with' if on else 'without'} overlap"
    if detailed and time.inputs:
        flipped = T.step_time_terms(**{**time.inputs, "overlap_comm": 0 if on else 1})
        with_s, without_s = (dp_s, float(flipped["dp_comm"])) if on else (float(flipped["dp_comm"]), dp_s)
        gain = abs(float(flipped["step_seconds"]) - time.step_seconds)
        extra = (f"; exposed data-parallel traffic {without_s:.3f} s/step without overlap, {with_s:.3f} s "
                 f"with it ({gain:.3f} s/step {'hidden' if on else 'to gain'})")
    where = "crosses nodes (InfiniBand/Ethernet)" if crosses else "stays inside a node"
    status = "pass" if on else ("fail" if crosses else "warn")
    return Finding(id="overlap_comm", status=status,
                   message=f"{name}; the data-parallel group ({plan.data_parallel * plan.context_parallel} ranks) "
                           f"{where}{extra}",
                   suggestion="" if on else ("set overlap_comm=True on the plan (exports --overlap-grad-reduce, "
                                             "and --overlap-param-gather with the distributed optimizer)"
                                             if plan.engine is Engine.MEGATRON
                                             else "set overlap_comm=True on the plan "
                                                  "(zero_optimization.overlap_comm: true)"))


def fits_memory(plan: ParallelPlan, memory) -> Finding:
    peak, cap = memory.per_gpu_peak_bytes, memory.capacity_bytes
    ok_gpu, ok_host, ok_nvme = memory.fits_gpu, memory.fits_host, memory.fits_nvme
    msg = (f"peak {_gb(peak)} per GPU on pipeline stage {memory.peak_stage.stage} ({memory.peak_stage.peak_phase}) "
           f"of {_gb(cap)}: {peak / cap:.0%} used")
    if memory.shows_host:
        msg += (f"; host memory {_gb(memory.host_bytes_per_node)} per node of "
                f"{_gb(memory.host_capacity_bytes_per_node)}")
    if memory.nvme_bytes_per_gpu:
        msg += (f"; NVMe {_gb(memory.nvme_bytes_per_node)} per node of "
                f"{_gb(memory.nvme_capacity_bytes_per_node)}"
                + (" (none given: --nvme-gib, ClusterSpec(nvme_gib_per_node=...))"
                   if not memory.nvme_capacity_bytes_per_node else ""))
    if not ok_gpu and memory.peak_stage.peak_phase == "initialization" and int(plan.zero_stage) == 3:
        suggestion = (f"the peak is DeepSpeed's initialization, not training: the whole 16-bit model "
                      f"({_gb(memory.peak_stage.terms.buffers)} with the parameter being partitioned) is built on "
                      f"each GPU before ZeRO-3 partitions it to the host; build it inside deepspeed.zero.Init "
                      f"(--zero-init, ParallelPlan(zero_init=True); what the HF Trainer does with a ZeRO-3 config), "
                      f"which partitions each module as it is made")
    elif not ok_gpu and memory.peak_stage.peak_phase == "initialization":
        clone = memory.peak_stage.terms.buffers
        suggestion = (f"the peak is DeepSpeed's initialization, not training: ZeRO-{int(plan.zero_stage)} with the "
                      f"optimizer on the CPU makes the fp32 master from a {_gb(clone)} GPU clone of the rank's 16-bit "
                      f"partition beside the flat buffer (stage_1_and_2.py); more data-parallel GPUs shrink the "
                      f"clone (1/N of the parameters each), ZeRO-3 with offload_param partitions the parameters "
                      f"themselves")
    elif not ok_gpu:
        suggestion = "follow the OOM ladder (`workbench advise` lists each step's memory and cost)"
    elif not ok_host and not memory.offloaded_bytes_per_gpu and M.defragments_through_host(plan):
        suggestion = ("ZeRO-3 keeping its parameters on the GPU passes each rank's 16-bit partition through one host "
                      "buffer at initialization (DeepSpeed's defragment): more host memory per node, fewer ranks per "
                      "node or more data-parallel ranks to shard the parameters over")
    elif not ok_host:
        suggestion = "more host memory per node, NVMe offload, or fewer offloaded states"
    else:
        suggestion = ("" if ok_nvme else "give the node's local NVMe (--nvme-gib) or offload to the CPU; DeepSpeed "
                                         "swaps the offloaded states to the nvme_path it is given")
    return Finding(id="fits_memory", status="pass" if ok_gpu and ok_host and ok_nvme else "fail", message=msg,
                   suggestion=suggestion)


HOST_MEMORY_WARN_FRACTION = 0.85
"""With states offloaded to the CPU, a host-memory estimate (the ranks' resident sets,
:func:`workbench.memory.host_resident_bytes`) above this share of the node's memory is warned about: the node's
other processes and the kernel need the rest. Measured on the H200 machine's 126 GiB host (ZeRO-3, one rank,
DeepSpeed 0.19.8, corpus batch final42): the runs that completed with the optimizer (and the parameters) on the CPU
are estimated at 91.3 and 104.9 GiB (72 % and 83 %), the three the kernel killed (exit -9) at 128.2-129.6 GiB
(102-103 %)."""

HOST_RESIDENT_MEASURED = dict(offload_runs=56, median=0.001, worst=0.018)
"""The host-memory estimate against the training process's peak resident set (``VmHWM``) of the corpus's runs with
CPU offload that record it (H200 machine, 126 GiB host, DeepSpeed 0.19.8, one rank; ZeRO-1/2 with the optimizer
there, with and without accumulation, ZeRO-3 with the optimizer, the parameters or both, LoRA, ``pin_memory`` off;
``benchmarks/bench_accuracy.py --host``): median |error| 0.1 %, worst 1.8 % (-1.8 % to +0.1 %); not blind (the
estimate's form was read off DeepSpeed's and PyTorch's sources with these runs in view; final51's 8 blind runs were
within -1.8 / +12.1 % before ZeRO-1's accumulation buffer was dropped)."""


def host_memory_margin(plan: ParallelPlan, memory) -> Optional[Finding]:
    """How close a plan with CPU offload comes to the node's host memory (:data:`HOST_MEMORY_WARN_FRACTION`); None
    without CPU offload or when the host does not fit at all (:func:`fits_memory` fails then)."""
    if not plan.offloads_to_cpu or not memory.fits_host:
        return None
    used, cap = memory.host_bytes_per_node, memory.host_capacity_bytes_per_node
    if not cap:
        return None
    r = HOST_RESIDENT_MEASURED
    msg = (f"host memory {_gb(used)} per node of {_gb(cap)} ({used / cap:.0%}): each rank's process with "
           f"{_gb(memory.offloaded_bytes_per_gpu)} of offloaded states, DeepSpeed's host buffers (page-locked ones "
           f"rounded up to a power of two) and itself, within {r['worst']:.1%} of the peak resident set of "
           f"{r['offload_runs']} measured one-rank offload runs; beyond {HOST_MEMORY_WARN_FRACTION:.0%} the node's "
           f"other processes decide whether it runs")
    if used / cap <= HOST_MEMORY_WARN_FRACTION:
        return Finding(id="host-memory-margin", status="pass", message=msg)
    return Finding(id="host-memory-margin", status="warn",
                   message=msg + " (on a 126 GiB host, runs estimated at 72 % and 83 % of it completed and three at "
                                 "102-103 % were killed by the kernel)",
                   suggestion="more host memory per node, more ranks to shard the offloaded states over, the "
                              "parameters on the GPU (offload_param off) or NVMe offload")


def _tight_host_saving(memory, alternative_host_bytes) -> Optional[tuple]:
    """``(saved per rank, saved per node, host per node then, node's host memory)`` when the node's host memory is
    past :data:`HOST_MEMORY_WARN_FRACTION` (or over it) and the alternative that ``alternative_host_bytes()`` prices
    (one rank's host memory) saves at least 1 GiB per rank; else None (the alternative is priced only when tight)."""
    used, cap = memory.host_bytes_per_node, memory.host_capacity_bytes_per_node
    if not cap or used / cap <= HOST_MEMORY_WARN_FRACTION:
        return None
    saved = memory.host_bytes_per_gpu - alternative_host_bytes()
    if saved < GiB:
        return None
    per_node = saved * used / memory.host_bytes_per_gpu
    return saved, per_node, used - per_node, cap


def pinned_host_buffers(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """With DeepSpeed's CPU offload and the node's host memory past :data:`HOST_MEMORY_WARN_FRACTION` (or over it),
    what its page-locked buffers cost beyond their contents: PyTorch's pinned-memory allocator rounds each request up
    to a power of two (:func:`workbench.memory.pinned_bytes`), so a 9.7 GiB fp32 partition holds 16 GiB. ``"pin_memory":
    false`` keeps them pageable at their own sizes (:func:`workbench.memory.pageable_host_bytes`); None when the plan
    has them pageable already, when that saves less than 1 GiB per rank or when the host is not tight."""
    if not plan.offloads_to_cpu or not plan.pin_memory:
        return None
    saving = _tight_host_saving(memory, lambda: M.pageable_host_bytes(model, plan))
    if saving is None:
        return None
    saved, per_node, then, cap = saving
    in_cpu = (("optimizer", plan.optimizer_in_host_memory), ("param", plan.offload_params is Offload.CPU))
    sections = " and ".join(f"offload_{kind}" for kind, there in in_cpu if there)
    return Finding(id="pinned_host_buffers", status="warn",
                   message=f"DeepSpeed's page-locked offload buffers hold {_gb(saved)} per rank beyond their contents "
                           f"({_gb(per_node)} per node): PyTorch's pinned-memory allocator rounds each up to a power "
                           f"of two",
                   suggestion=f'"pin_memory": false in zero_optimization.{sections} (--no-pin-memory): '
                              f"{_gb(then)} per node of {_gb(cap)} ({then / cap:.0%}); copies between host and GPU "
                              f"then go through pageable memory: {pageable_offload_cost()}")


SMALLER_SUB_GROUP_ELEMENTS = 100_000_000
"""The ``sub_group_size`` the advisor prices against DeepSpeed's 1e9 when a ZeRO-3 offload plan's host memory is
tight: one tenth of the default."""


def elements_words(n: int) -> str:
    """A count of elements as a ZeRO size flag takes it: ``1e8`` for 100,000,000, else the integer."""
    text = f"{n:.0e}".replace("e+0", "e").replace("e+", "e")
    return text if float(text) == n else str(int(n))


def sub_group_host_buffers(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """ZeRO-3 with the optimizer offloaded and the node's host memory past :data:`HOST_MEMORY_WARN_FRACTION` (or
    over it): DeepSpeed keeps host buffers per optimizer sub-group (with CPU offload a page-locked fp32 gradient per
    sub-group, rounded up to a power of two; on NVMe the swapper's page-locked buffers of the largest sub-group,
    :func:`workbench.memory.host_resident_bytes`), so ``sub_group_size`` sets them. Priced once more at
    :data:`SMALLER_SUB_GROUP_ELEMENTS`; None when the plan's sub-groups are no larger already, when that saves less
    than 1 GiB per rank, or when the host is not tight."""
    if plan.engine is Engine.MEGATRON or int(plan.zero_stage) < 3 or plan.offload_optimizer is Offload.NONE:
        return None
    if plan.sub_group_elements <= SMALLER_SUB_GROUP_ELEMENTS:
        return None
    saving = _tight_host_saving(memory, lambda: M.host_bytes_with(model, plan,
                                                                 sub_group_elements=SMALLER_SUB_GROUP_ELEMENTS))
    if saving is None:
        return None
    saved, _, then, cap = saving
    held = ("the NVMe swapper's page-locked buffers of the largest sub-group" if plan.nvme_optimizer else
            "a page-locked fp32 gradient per sub-group, each rounded up to a power of two")
    return Finding(id="sub_group_host_buffers", status="warn",
                   message=f"DeepSpeed ZeRO-3 keeps host buffers per optimizer sub-group ({held}); at sub_group_size "
                           f"{elements_words(plan.sub_group_elements)} they hold {_gb(saved)} per rank more than at "
                           f"{elements_words(SMALLER_SUB_GROUP_ELEMENTS)}",
                   suggestion=f'"sub_group_size": {SMALLER_SUB_GROUP_ELEMENTS} in zero_optimization '
                              f"(--sub-group-size {elements_words(SMALLER_SUB_GROUP_ELEMENTS)}): {_gb(then)} per node "
                              f"of {_gb(cap)} ({then / cap:.0%}); the optimizer then steps in ten times as many pieces "
                              f"(the time model does not price the count)")


def nvme_param_buffer(model: ModelSpec, plan: ParallelPlan, options: Optional[DeepSpeedOptions] = None
                      ) -> Optional[Finding]:
    """ZeRO-3 with the parameters on NVMe: DeepSpeed swaps each parameter partition in through buffers of
    ``offload_param.buffer_size`` elements and refuses the run at start-up when one is larger ("More elements N than
    buffer size M", ``partitioned_param_swapper.py``). A failure when the options' buffer (an imported config's, or
    DeepSpeed's default where it sets none) is too small; without one, a pass naming the size the export writes where
    DeepSpeed's default 1e8 would be refused (nvme80's GPT-NeoX h2048 was); None otherwise."""
    if plan.offload_params is not Offload.NVME or not plan.nvme_params:
        return None
    largest = int(M.largest_param_partition(model, plan.tensor_parallel, plan.data_parallel * plan.context_parallel))
    own = (options or _default_options()).param_buffer_size
    if own is not None and own < largest:
        return Finding(id="nvme_param_buffer", status="fail",
                       message=f"zero_optimization.offload_param.buffer_size={own:,} is smaller than the largest "
                               f"parameter partition a rank swaps in, {largest:,} elements: DeepSpeed refuses the run "
                               f'at start-up ("More elements {largest} than buffer size {own}")',
                       suggestion=f'"buffer_size": {largest} or more in zero_optimization.offload_param (each of '
                                  f"its {M.DS_NVME_PARAM_BUFFERS} page-locked buffers holds that many 16-bit elements)")
    if own is not None or largest <= M.DS_NVME_PARAM_BUFFER_ELEMENTS:
        return None
    return Finding(id="nvme_param_buffer", status="pass",
                   message=f"the largest parameter partition a rank swaps in from NVMe is {largest:,} elements, above "
                           f"DeepSpeed's default offload_param.buffer_size {M.DS_NVME_PARAM_BUFFER_ELEMENTS:,}, which "
                           f"it would refuse at start-up; the exported config sets buffer_size "
                           f"{nvme_param_buffer_size(model, plan)} and the host memory is priced with it")


def pageable_offload(plan: ParallelPlan, time=None) -> Optional[Finding]:
    """DeepSpeed CPU offload with ``"pin_memory": false`` (:attr:`ParallelPlan.pin_memory` off, as an imported
    ds_config can set it): every copy between host and GPU is staged by the driver through its own page-locked
    memory, at the host's pageable rate, and the transfers DeepSpeed issues as non-blocking wait for the host. The
    time model prices that rate (``pageable_copy_gb_per_s``); with the time estimate this prices the step once more
    with page-locked buffers and says what they would save (a warning from 10 % of the step). None without CPU
    offload or with ``pin_memory`` on."""
    if not plan.offloads_to_cpu or plan.pin_memory:
        return None
    suggestion = ('"pin_memory": true in the offload sections (--pin-memory) when the host has room for the '
                  "page-locked buffers (the host-memory check prices them both ways)")
    if time is None or not time.inputs:
        return Finding(id="pageable_offload", status="warn",
                       message=f'"pin_memory": false with CPU offload: the copies between host and GPU go through '
                               f"pageable memory; {pageable_offload_cost()}", suggestion=suggestion)
    pinned = float(T.step_time_terms(**{**time.inputs, "pin_memory": 1})["step_seconds"])
    extra = time.step_seconds - pinned
    slow = extra > 0.1 * time.step_seconds
    return Finding(id="pageable_offload", status="warn" if slow else "pass",
                   message=f'"pin_memory": false with CPU offload: {time.step_seconds:.3f} s per step with the '
                           f"copies between host and GPU through pageable memory, {pinned:.3f} s with page-locked "
                           f"buffers ({extra:.3f} s more per step); {pageable_offload_cost()}",
                   suggestion=suggestion if slow else "")


def _nvme_swap_split(time) -> tuple:
    """``(swap seconds, step seconds with the same states in host memory)`` of a time estimate with NVMe offload:
    the step priced once more without the swaps."""
    in_host = float(T.step_time_terms(**{**time.inputs, "nvme_optimizer": 0, "nvme_params": 0})["step_seconds"])
    return time.step_seconds - in_host, in_host


def nvme_swaps(cluster: ClusterSpec, plan: ParallelPlan, time=None) -> Optional[Finding]:
    """ZeRO-Infinity's offload to NVMe: what DeepSpeed's swaps of the optimizer states (and of the parameters beyond
    ``max_in_cpu``) add to the step at the node's NVMe rates (:func:`workbench.timing.nvme_swap_seconds`), priced
    once more with the same states in host memory. A warning when the swaps are more than half the step, and for
    NVMe at ZeRO-1/2, which DeepSpeed runs as CPU offload. None without NVMe offload (or, at ZeRO-3, without the
    time estimate)."""
    if Offload.NVME not in (plan.offload_optimizer, plan.offload_params):
        return None
    if not (plan.nvme_optimizer or plan.nvme_params):  # ZeRO-1/2: DeepSpeed swaps nothing
        return Finding(id="nvme_swaps", status="warn",
                       message=f"offload to NVMe at ZeRO-{int(plan.zero_stage)}: DeepSpeed's ZeRO-1/2 keep the "
                               "offloaded states in host memory whatever the device says (stage_1_and_2.py; only "
                               "ZeRO-3 swaps to NVMe), so this plan is priced, and runs, as CPU offload",
                       suggestion='"device": "cpu" to say what runs, or ZeRO-3 to put the states on the NVMe')
    if time is None or not time.inputs:
        return None
    swaps, in_host = _nvme_swap_split(time)
    ranks = min(cluster.world_size, cluster.gpus_per_node)
    default = cluster.nvme_rates_assumed
    rates = (f"{cluster.nvme_read_gb_per_s:g} GB/s read, {cluster.nvme_write_gb_per_s:g} GB/s write per node, shared "
             f"by its {ranks} rank{'s' if ranks > 1 else ''}"
             + (" (the default rates: give your node's with --nvme-read-gbps / --nvme-write-gbps, "
                "ClusterSpec(nvme_read_gb_per_s=..., nvme_write_gb_per_s=...))" if default else ""))
    heavy = swaps > 0.5 * time.step_seconds
    return Finding(id="nvme_swaps", status="warn" if heavy else "pass",
                   message=f"NVMe offload: DeepSpeed's swaps take {swaps:.3f} s of the {time.step_seconds:.3f} s step "
                           f"({in_host:.3f} s with the same states in host memory) at {rates}",
                   suggestion=("CPU offload where the host memory holds the states (the host-memory check prices "
                               "it), or more NVMe bandwidth per rank (more drives striped, fewer ranks per node)"
                               if heavy else ""))


NEAR_CAPACITY_FRACTION = 0.90
"""A plan whose whole-device peak at the error band's upper side reaches this share of the GPU's memory is near
capacity: the allocator's reserve decides whether it runs."""
EXPANDABLE_SEGMENTS_MEASURED = dict(runs=24, reserve_default=0.33, reserve_expandable=0.12, step_ratio=0.98,
                                    mcore_step_low=-0.05, mcore_step_high=0.004)
"""PyTorch's expandable-segments allocator measured on one H200 (corpus group ``expseg``, 2026-12-01: 24
configurations of ``benchmarks/corpus/h200_runs.jsonl`` repeated with ``PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True``): reserve above the allocated peak, median over the 24, 33 % with the default allocator and
12 % with expandable segments; peak allocated the same within 0.02 GiB; step time median ratio 0.98 (the 13
megatron-core runs without ZeRO-3 or offload -5 % to +0.4 %; host-bound ZeRO-3 / transformers runs vary both ways
between processes with either allocator)."""


def expandable_segments_advice(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan,
                               memory, *, reserve_fraction: Optional[float] = None,
                               expandable_twin=None) -> Optional[Finding]:
    """With PyTorch's default allocator and a whole-device peak near the GPU's capacity at the band's upper side
    (:data:`NEAR_CAPACITY_FRACTION`): advise expandable segments with the measured numbers
    (:data:`EXPANDABLE_SEGMENTS_MEASURED`) and what it saves for this plan: the peak stage's allocated bytes times
    the engine's default reserve less :data:`workbench.memory.RESERVE_FRACTION_EXPANDABLE` (the memory model's
    constants; with ``reserve_fraction``, the reserve the allocator replay gave this plan's memory, in place of the
    default allocator's constant, and no hint to replay it), and the expandable mode's error band.
    ``expandable_twin`` (with ``reserve_fraction``): a call giving this plan with expandable segments, replayed
    (:attr:`workbench.estimate.EvaluatedPlan.expandable_twin`); the saving is then the two replays' peak reserved
    apart, judged on the replayed band. ``None`` when the plan is far from capacity, peaks at DeepSpeed's
    initialization (no reserve above it) or, replayed, reserves no less with expandable segments."""
    from workbench.memory import (RESERVE_FRACTION_EXPANDABLE, ZERO3_STREAM_RESERVE_REGIMES, error_band,
                                  overhead_bytes, plan_engine_key, plan_overheads, plan_reserve_key)

    cap = memory.capacity_bytes
    if plan.expandable_segments:
        key = plan_engine_key(plan)
        return Finding(id="expandable_segments", status="pass",
                       message=f"PyTorch's expandable-segments allocator: reserve "
                               f"{RESERVE_FRACTION_EXPANDABLE[key]:.0%} of allocated priced (fit split, H200)")
    upper = memory.per_gpu_peak_bytes + memory.band_high_bytes
    if not cap or upper < NEAR_CAPACITY_FRACTION * cap:
        return None
    if memory.peak_stage.peak_phase == "initialization":  # fresh segments of exact sizes: no reserve to cut
        return None
    # the reserve is a fraction of the allocated peak (under ZeRO-3 with offload, of the CUDA streams' caches: what
    # the overhead holds beyond the memory outside the allocator): the saving needs no second estimate
    terms = memory.peak_stage.terms
    allocated = memory.per_gpu_peak_bytes - terms.overhead
    own = {on: plan_overheads(plan, on) for on in (0, 1)}
    default_reserve = allocated * own[0]["reserve_fraction"]
    if reserve_fraction is not None:  # the replayed reserve is the default allocator's, for this very plan
        default_reserve = allocated * reserve_fraction
    elif plan_reserve_key(plan) in ZERO3_STREAM_RESERVE_REGIMES:
        outside = float(overhead_bytes(0.0, plan.world_size, **own[0]))  # the memory model's own formula for it
        default_reserve = max(terms.overhead - outside, 0.0)
    replayed_twin = reserve_fraction is not None and expandable_twin is not None
    if replayed_twin:  # both allocators replayed for this very plan
        saves = allocated * (1 + reserve_fraction) - expandable_twin().replayed_peaks.peak_reserved_bytes
    else:
        saves = default_reserve - allocated * own[1]["reserve_fraction"]
    if saves <= 0:
        return None
    peak = memory.per_gpu_peak_bytes - saves
    band = error_band(plan.engine, "device", plan.recompute, True, replayed=replayed_twin,
                      zero_stage=plan.zero_stage, offload_params=plan.offload_params,
                      offload_optimizer=plan.offload_optimizer)
    new_upper = peak * (1 + (band[1] if band else 0.0))
    m = EXPANDABLE_SEGMENTS_MEASURED
    return Finding(
        id="expandable_segments", status="warn",
        message=f"peak {_gb(memory.per_gpu_peak_bytes)} per GPU, {_gb(upper)} at the error band's upper side: "
                f"{upper / cap:.0%} of {_gb(cap)} with PyTorch's default caching allocator, whose reserve above the "
                f"allocated peak is what the measured under-estimates come from",
        suggestion=f"run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (plan expandable_segments=True, "
                   f"--expandable-segments; the export and `workbench run` set it): on {m['runs']} H200 runs the "
                   f"reserve above allocated fell from a median {m['reserve_default']:.0%} to "
                   f"{m['reserve_expandable']:.0%} with the same allocated memory and the step time unchanged within "
                   f"noise (median ratio {m['step_ratio']:.2f}); for this plan the estimate drops by {_gb(saves)} "
                   f"to {_gb(peak)} ({_gb(new_upper)} at the band's upper side, {new_upper / cap:.0%} of {_gb(cap)})"
                   + ("; then it fits at the upper side" if new_upper <= cap < upper else "")
                   # the reserve decides it when the peak without it fits: then this plan's own reserve is worth having
                   + (_replay_hint(model, plan) if reserve_fraction is None
                      and memory.per_gpu_peak_bytes - default_reserve <= cap else ""))


def _replay_hint(model: ModelSpec, plan: ParallelPlan) -> str:
    """For a plan the allocator replay covers (:func:`workbench.allocsim.check_scope`): where to get this plan's own
    reserve instead of the constant, with the study's numbers; ``""`` otherwise."""
    from workbench import allocsim

    try:
        allocsim.check_scope(model, plan)
    except ValueError:
        return ""
    study = allocsim.REPLAY_STUDY
    (rm, rw), (cm, cw) = study["replayed"], study["constant"]
    command = ("`workbench estimate` with this plan's flags, which replays it by default" if allocsim.is_megatron(model)
               else "`workbench estimate --model hf:PATH` with this plan's flags, which replays it by default")
    return (f"; or replay the caching allocator on this very plan ({command}): on {study['test_runs']} held-out "
            f"H200 runs the whole-device error went from {cm:.1%} median, {cw:+.1%} worst with the constant reserve "
            f"to {rm:.1%}, {rw:+.1%}")


LONG_CONTEXT_TOKENS = 16384
"""From this sequence length on the attention core and the sequence-long activations dominate a layer: the advisor
checks how attention is computed and what context parallelism does."""


def score_matrix_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Bytes one layer's materialised attention scores take for one micro-batch on one rank (unfused or
    fused-softmax attention): what the layer keeps for backward (:func:`workbench.memory.layer_activation_bytes`,
    full minus selective) plus megatron-core's score buffer, a·(s/c)·s·b/t elements. 0 with flash attention."""
    if not model.attention.materialises_scores:
        return 0.0
    kw = dict(micro_batch=plan.micro_batch_size, tensor_parallel=plan.tensor_parallel,
              sequence_parallel=plan.sequence_parallel, context_parallel=plan.context_parallel,
              value_bytes=plan.precision.bytes_per_value)
    full = M.layer_activation_bytes(model, recompute=0, **kw)[0]
    selective = M.layer_activation_bytes(model, recompute=1, **kw)[0]
    buffer = M.buffer_bytes(model, engine=0, zero_stage=0, tensor_parallel=plan.tensor_parallel,
                            micro_batch=plan.micro_batch_size, context_parallel=plan.context_parallel,
                            value_bytes=plan.precision.bytes_per_value)
    return float(full - selective + buffer)


def long_context_attention(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """At ≥ :data:`LONG_CONTEXT_TOKENS` tokens: materialised attention (``unfused`` / ``fused-softmax``) holds
    a·s²-sized scores per layer — say how large against the GPU, and that flash attention removes them (and is what
    context parallelism needs); with flash attention, how many tokens each rank's activations cover."""
    s = model.seq_length
    if s < LONG_CONTEXT_TOKENS:
        return None
    if model.attention.materialises_scores:
        scores = score_matrix_bytes(model, plan)
        share = scores / memory.capacity_bytes
        return Finding(id="long_context_attention", status="fail" if share > 0.25 else "warn",
                       message=f"attention='{model.attention}' at {s:,} tokens materialises the "
                               f"{model.num_attention_heads} x {s:,} x {s:,} score matrix: {_gb(scores)} per layer "
                               f"and micro-batch on each GPU (a·s²·b/(t·c) scores; {share:.0%} of the GPU), "
                               f"growing with the square of the sequence",
                       suggestion="attention='flash' (Transformer Engine / FlashAttention: no s×s tensor, "
                                  "--attention-backend flash); it is also what context parallelism needs")
    c = plan.context_parallel
    act = memory.peak_stage.backward_activation_bytes
    return Finding(id="long_context_attention", status="pass",
                   message=f"flash attention at {s:,} tokens: each GPU keeps activations of {s // c:,} tokens "
                           f"(CP={c}{', ' + str(plan.cp_comm_type) if c > 1 else ''}), "
                           f"{_gb(act)} at its peak stage")


def context_parallel_choice(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record,
                            profile=None) -> Optional[Finding]:
    """At long context, the same GPUs used the other way — context parallel instead of tensor parallel or the
    reverse — priced with the models: activations per GPU and step time of both, so the choice is explained with
    numbers ("at 131,072 tokens CP=8 keeps 18 GiB of activations per GPU; TP=8 alone would need 19 GiB ..."). The
    alternative moves all of CP into TP (with sequence parallel) — or, where the heads do not split that far, gives
    CP's ranks to data parallel — or all of TP into CP (ring exchange); ``None`` when the sequence is short,
    attention is not flash, the engine is not Megatron or no swap is a valid plan."""
    t, c, s = plan.tensor_parallel, plan.context_parallel, model.seq_length
    if (s < LONG_CONTEXT_TOKENS or model.attention.materialises_scores or plan.engine is not Engine.MEGATRON
            or t * c == 1):
        return None
    if c > 1:  # all of CP into TP; if the heads do not allow it, CP's ranks as data parallel instead
        no_cp = dict(context_parallel=1, cp_comm_type="p2p", hierarchical_context_parallel_sizes=None)
        options = [dict(tensor_parallel=t * c, sequence_parallel=True, **no_cp), no_cp]
    else:
        options = [dict(tensor_parallel=1, context_parallel=t, sequence_parallel=False)]
    for changes in options:
        try:
            other = plan.replace(**changes)
            alt = _evaluated(model, cluster, other, profile)
            break
        except ValueError:
            continue
    else:
        return None
    mine, theirs = record.memory, alt.memory
    a_mine, a_theirs = (m.peak_stage.backward_activation_bytes for m in (mine, theirs))
    def name(p):
        parts = ([f"TP={p.tensor_parallel}" + (" + SP" if p.sequence_parallel else "")] if p.tensor_parallel > 1
                 else []) + ([f"CP={p.context_parallel}"] if p.context_parallel > 1 else [])
        if other.data_parallel != plan.data_parallel:  # CP folded into DP: say so on both sides
            parts.append(f"DP={p.data_parallel}")
        return " x ".join(parts)
    better_time = record.time.step_seconds <= alt.time.step_seconds
    fits_alt = theirs.fits_gpu
    message = (f"at {s:,} tokens, {name(plan)} keeps {_gb(a_mine)} of activations per GPU (peak {_gb(mine.per_gpu_peak_bytes)}"
               f", {record.time.step_seconds:.2f} s/step); {name(other)} would keep {_gb(a_theirs)} (peak "
               f"{_gb(theirs.per_gpu_peak_bytes)}{'' if fits_alt else ', does not fit'}, "
               f"{alt.time.step_seconds:.2f} s/step: tensor-parallel traffic {alt.time.breakdown['tp_comm']:.2f} s "
               f"vs context-parallel {alt.time.breakdown['cp_comm']:.2f} s exposed)")
    if mine.fits_gpu:
        good = better_time or not fits_alt
        why = "is faster here"
    else:  # this plan does not fit: the swap is the advice if it does
        good = not fits_alt
        why = "fits here (CP shards activations only; TP also shards weights, gradients and optimizer states)" \
            if c > 1 else "fits here"
    return Finding(id="context_parallel_choice", status="pass" if good else "warn", message=message,
                   suggestion="" if good else f"{name(other)} {why}: {_plan_text(other)}")


def _fit_words(memory) -> str:
    """", does not fit" when the point estimate of the peak is over the GPU; ", fits on the point estimate only (…)"
    when only the held-out error band's upper side is (the planner ranks such a plan and marks it); "" when it fits."""
    if memory.fits_gpu:
        return ""
    if memory.headroom_bytes < 0:
        return ", does not fit"
    return (f", fits on the point estimate only: up to {_gb(memory.per_gpu_peak_bytes + memory.band_high_bytes)} "
            f"at the error band's upper side")


def ulysses_choice(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record,
                   profile=None) -> Optional[Finding]:
    """At long context on engine ``deepspeed`` (dense model): DeepSpeed-Ulysses against ZeRO-3 with full recompute on
    the same GPUs, both priced by the models, and whether the heads cap Ulysses. With Ulysses N: the plan without it
    at ZeRO-3 + full recompute (peak, step, the all-to-all it saves). Without Ulysses: the largest N the heads, the
    sequence and the world allow (ZeRO-3 + full recompute kept), when the plan does not fit. Either way, when the
    heads stop N below the GPUs (N = gcd(heads, K/V heads)), say so: beyond it a sequence needs Megatron's ring CP.
    ``None`` when not relevant or no alternative is a valid plan."""
    s = model.seq_length
    if s < LONG_CONTEXT_TOKENS or plan.engine is not Engine.DEEPSPEED or model.is_moe or plan.pipeline_parallel > 1:
        return None
    limit = ulysses_head_limit(model)
    n = plan.ulysses
    if n > 1:
        changes = dict(ulysses=1, context_parallel=1, cp_comm_type="p2p", zero_stage=3, recompute="full",
                       offload_params=plan.offload_params)
    else:
        sizes = [k for k in range(2, plan.world_size + 1) if plan.world_size % k == 0 and limit % k == 0
                 and s % k == 0]
        if record.memory.fits_gpu or not sizes:
            return None
        changes = dict(ulysses=max(sizes), zero_stage=3, recompute="full")
    try:
        other = plan.replace(**changes)
        validate(model, cluster, other)
        alt = _evaluated(model, cluster, other, profile)
    except ValueError:
        return None
    u, base = (record, alt) if n > 1 else (alt, record)
    up, bp = (plan, other) if n > 1 else (other, plan)
    capped = (f"; the heads cap Ulysses at {limit} ranks (gcd of {model.num_attention_heads} heads and "
              f"{model.num_query_groups} K/V heads: the all-to-all splits both), so a longer sequence needs "
              f"Megatron's ring context parallelism (engine megatron, --cp, cp_comm_type p2p)"
              if up.ulysses == limit and limit < plan.world_size else "")
    message = (f"at {s:,} tokens, Ulysses={up.ulysses} keeps {_gb(u.memory.peak_stage.backward_activation_bytes)} of "
               f"activations per GPU (peak {_gb(u.memory.per_gpu_peak_bytes)}"
               f"{_fit_words(u.memory)}, {u.time.step_seconds:.2f} s/step, all-to-all "
               f"{u.time.breakdown['cp_comm']:.2f} s exposed); ZeRO-{int(bp.zero_stage)} + recompute={bp.recompute} "
               f"without it keeps {_gb(base.memory.peak_stage.backward_activation_bytes)} (peak "
               f"{_gb(base.memory.per_gpu_peak_bytes)}{_fit_words(base.memory)}, "
               f"{base.time.step_seconds:.2f} s/step){capped}")
    mine, theirs = (u, base) if n > 1 else (base, u)
    good = (mine.memory.fits_gpu and (not theirs.memory.fits_gpu or record.time.step_seconds
                                      <= alt.time.step_seconds))
    why = ("fits here" if theirs.memory.fits_gpu and not mine.memory.fits_gpu else
           "faster here" if theirs.memory.fits_gpu else "")
    return Finding(id="ulysses_choice", status="pass" if good else "warn", message=message,
                   suggestion=f"{_plan_text(other)} ({why})" if why and not good else "")


def gradient_clipping(model: ModelSpec, options: DeepSpeedOptions, num_parameters: Optional[int] = None) -> Finding:
    """Guide §5.3: max_norm 0.5-1.0 for models above 13B."""
    n = model.num_parameters if num_parameters is None else num_parameters
    clip = options.clipping_for(model, n)
    large = n >= LARGE_MODEL_PARAMETERS
    if clip <= 0:
        return Finding(id="gradient_clipping", status="warn",
                       message=f"gradient clipping is off for a {n / 1e9:.1f} B model",
                       suggestion="clip at 1.0 (0.5-1.0 from 13B on)")
    ok = 0.5 <= clip <= 1.0 if large else clip <= 1.0
    # The guide (§5.3) says 13B以上 ("13B parameters and up"); 13B-class starts at LARGE_MODEL_PARAMETERS here, so
    # that its own 13B example (12.85 B parameters) is one. Say which threshold applied.
    cls = (f"13B-class models (≥ {LARGE_MODEL_PARAMETERS / 1e9:g} B parameters here, so the guide's own 13B "
           f"example at 12.85 B counts)")
    rule = (f"the guide's 0.5-1.0 for {cls}" if large
            else f"≤ 1.0 (the guide's 0.5-1.0 applies to {cls})")
    return Finding(id="gradient_clipping", status="pass" if ok else "warn",
                   message=f"gradient_clipping={clip:g} for {n / 1e9:.1f} B parameters; {rule}",
                   suggestion="" if ok else ("set gradient clipping to 0.5-1.0" if large else "set clipping to 1.0"))


def loss_scaling(plan: ParallelPlan, options: DeepSpeedOptions) -> Finding:
    """Guide §3/§5.3: fp16 needs dynamic loss scaling (window 1000) and watching the scale."""
    if plan.precision is not Precision.FP16:
        return Finding(id="loss_scale", status="pass",
                       message=f"precision={plan.precision}: no loss scaling needed (bf16/fp32 keep fp32's range"
                               + ("; FP8 recipes scale each tensor themselves)" if plan.precision.is_fp8 else ")"))
    w = options.loss_scale_window
    ok = w >= 1000
    return Finding(id="loss_scale", status="pass" if ok else "warn",
                   message=f"fp16 dynamic loss scale: start 2^{options.initial_scale_power}, doubles after {w} steps "
                           f"without overflow, halves after {options.hysteresis} overflows, floor "
                           f"{options.min_loss_scale:g}; watch 'OVERFLOW! ... Skipping step' (DeepSpeed) or 'number "
                           f"of skipped iterations' (Megatron): `workbench advise --log train.log` counts them",
                   suggestion="" if ok else f"loss_scale_window={w} retries a higher scale every {w} steps; use 1000 "
                                            "(guide) or switch to bf16")


def adam_betas(model: ModelSpec, options: DeepSpeedOptions) -> Finding:
    """Guide §3/§5.3: Adam β1=0.9, β2=0.95."""
    b1, b2 = options.betas
    ok = (b1, b2) == (0.9, 0.95)
    horizon = 1 / (1 - b2)
    return Finding(id="adam_betas", status="pass" if ok else "warn",
                   message=f"Adam betas ({b1:g}, {b2:g}): the second moment averages ~{horizon:.0f} steps "
                           f"(1/(1−β2)); the guide uses (0.9, 0.95)",
                   suggestion="" if ok else "set betas to (0.9, 0.95) (--adam-beta1 0.9 --adam-beta2 0.95); a short "
                                            "β2 horizon reacts faster to gradient spikes")


@functools.cache
def _default_options() -> DeepSpeedOptions:
    """The default :class:`DeepSpeedOptions` (frozen: one validated instance serves every check)."""
    return DeepSpeedOptions()


def check_plan(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, memory, time=None,
               options: Optional[DeepSpeedOptions] = None, detailed: bool = False, facts=None, counts=None,
               reserve_fraction: Optional[float] = None, expandable_twin=None) -> tuple:
    """The guide's rules as :class:`Finding` s for one plan, read off its memory (and time) estimate — the links,
    per-layer seconds and overlap the models used; nothing is priced again unless ``detailed`` (which prices the
    step once more with overlap flipped), except the FP8 check, which prices the step's inputs once more in the other
    precision (:func:`fp8_payoff`), and a LoRA plan with dropout, whose memory is priced with and without it
    (:func:`lora_dropout_memory`). ``facts``: the plan's :class:`workbench.parallel.ParallelFacts`;
    ``counts``: the model's parameter counts (computed here when not given); ``reserve_fraction``: the allocator
    reserve over allocated the allocator replay gave this plan's memory (``None``: the constant reserve);
    ``expandable_twin``: a call replaying the plan with expandable segments (:func:`expandable_segments_advice`)."""
    o = options or _default_options()
    n = (counts or model.parameter_counts()).total
    found = [fits_memory(plan, memory), host_memory_margin(plan, memory), pinned_host_buffers(model, plan, memory),
             sub_group_host_buffers(model, plan, memory), nvme_param_buffer(model, plan, o),
             pageable_offload(plan, time), nvme_swaps(cluster, plan, time),
             expandable_segments_advice(model, cluster, plan, memory, reserve_fraction=reserve_fraction,
                                        expandable_twin=expandable_twin),
             strategy_tier(model, cluster, plan, memory),
             zero3_layer_room(model, plan, memory), card_size(model, cluster, n),
             long_context_attention(model, plan, memory)]
    if time is not None:
        found += [tp_within_node(cluster, plan, time), bucket_sizes(model, cluster, plan, time, o),
                  overlap_comm(model, cluster, plan, time, detailed=detailed)]
        found.append(fp8_payoff(model, cluster, plan, time))
        found.append(tp_comm_overlap_payoff(model, cluster, plan, time, memory))
        found.append(expert_alltoall(model, cluster, plan, time))
    found.append(moe_capacity(model, plan, cluster))
    found += [gradient_clipping(model, o, n), loss_scaling(plan, o), adam_betas(model, o),
              cpu_adam_threads(plan, cluster=cluster, time=time), offload_held_gradients(model, plan, memory),
              sliding_window_masks(model, plan, memory), lora_dropout_memory(model, cluster, plan)]
    return tuple(f for f in found if f is not None)


LORA_DROPOUT_WARN_FRACTION = 0.05
"""LoRA dropout's kept copies above this share of the peak are reported as a warning."""


def lora_dropout_memory(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> Optional[Finding]:
    """peft's ``lora_dropout`` > 0 keeps, per adapter module, a dropped copy of the module's input and its mask from
    the forward to the backward (:func:`workbench.memory.lora_activation_bytes_per_token`; counted storage by storage
    on the CPU, and the allocator replay of the corpus's LoRA runs, all with dropout 0.05, traced them exactly): what
    the plan's peak would be with peft's default, 0, priced both ways with the constant reserve. Layers that are
    checkpointed recompute their copies, so the cost falls with gradient checkpointing."""
    if not plan.lora_rank or not plan.lora_dropout:
        return None
    peak = M.estimate_memory(model, cluster, plan).per_gpu_peak_bytes
    without = M.estimate_memory(model, cluster, plan.replace(lora_dropout=0.0)).per_gpu_peak_bytes
    cost = peak - without
    words = (f"lora_dropout={plan.lora_dropout:g} keeps a dropped copy of each adapter's input and its mask until the "
             f"backward: priced with the constant allocator reserve, the peak is {peak / GiB:.1f} GiB with it, "
             f"{without / GiB:.1f} GiB with peft's default 0 ({cost / GiB:+.2f} GiB, {cost / peak:.0%} of the peak)")
    numbers = {"peak_bytes": int(peak), "peak_without_dropout_bytes": int(without)}
    if cost < LORA_DROPOUT_WARN_FRACTION * peak:
        return Finding(id="lora_dropout_memory", status="pass", message=words, numbers=numbers)
    return Finding(id="lora_dropout_memory", status="warn", message=words,
                   suggestion="lora_dropout=0 (peft's default; --lora-dropout 0) where the regularisation is not "
                              "needed, or gradient checkpointing, which recomputes the copies",
                   numbers=numbers)


def offload_held_gradients(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """ZeRO-2 with the optimizer on the CPU and gradient accumulation keeps each gradient larger than
    ``reduce_bucket_size`` on the GPU to the end of every backward before the boundary
    (:func:`workbench.memory.offload_accumulation_held_bytes`); the Hugging Face Trainer's ``"auto"`` bucket, hidden²,
    makes nearly every weight that large, so the whole 16-bit gradient sits on the GPU beside the parameters
    (measured: Nemotron Nano 4B's width, 4.6 GiB held, the run's peak). A bucket at least as large as the largest
    weight keeps them in the bucket."""
    from workbench import memory as M
    from workbench.encode import ENGINE_CODES
    from workbench.params import weight_tensor_sizes

    if plan.engine is Engine.MEGATRON or plan.lora_rank:
        return None
    held = float(M.offload_accumulation_held_bytes(
        model, engine=ENGINE_CODES[plan.engine], zero_stage=int(plan.zero_stage),
        offload_optimizer=int(plan.offload_optimizer is not Offload.NONE), num_microbatches=plan.num_microbatches,
        tensor_parallel=plan.tensor_parallel, value_bytes=plan.precision.bytes_per_value, lora=False,
        reduce_bucket_elements=plan.reduce_bucket_elements))
    if held <= 0:
        return None
    largest = int(max(weight_tensor_sizes(model)))
    peak = memory.peak_stage.terms
    return Finding(id="offload_held_gradients", status="warn",
                   message=f"ZeRO-2 with the optimizer on the CPU and gradient accumulation "
                           f"{plan.gradient_accumulation_steps}: every weight above reduce_bucket_size="
                           f"{plan.reduce_bucket_elements:.3g} elements keeps its 16-bit gradient on the GPU to the "
                           f"end of each backward before the boundary, {held / GiB:.2f} GiB at once (the estimate's "
                           f"peak holds {peak.gradients / GiB:.2f} GiB of gradients)",
                   suggestion=f"set zero_optimization.reduce_bucket_size to at least the largest weight, {largest:.3g} "
                              f"elements (not \"auto\", which the Hugging Face Trainer fills with hidden²)",
                   numbers={"held_bytes": int(held), "largest_weight_elements": largest})


SLIDING_WINDOW_MASK_WARN_FRACTION = 0.05
"""The sliding-window layers' kept mask biases above this share of the peak are reported."""


def sliding_window_masks(model: ModelSpec, plan: ParallelPlan, memory) -> Optional[Finding]:
    """A transformers model's sliding-window layers under sdpa keep their boolean mask as a b·s² bias each, from
    the forward to that layer's backward (:func:`workbench.memory.sliding_window_bias_bytes`; an H200's allocator
    history, and final62 blind), and with grouped K/V heads K and V repeated to every query head
    (:func:`workbench.memory.sliding_window_repeat_bytes`). FlashAttention 2/3 apply the window inside the kernel
    and take the grouped heads as they are, keeping neither; checkpointing
    keeps one at a time. Reported when the kept biases pass :data:`SLIDING_WINDOW_MASK_WARN_FRACTION` of the peak."""
    from workbench import memory as M

    sizes = dict(micro_batch=plan.micro_batch_size, value_bytes=plan.precision.bytes_per_value)
    kept = M.sliding_window_kept_bytes(model, **sizes)
    if not kept or plan.recompute is Recompute.FULL:
        return None
    bias = M.sliding_window_bias_bytes(model, **sizes)
    repeat = M.sliding_window_repeat_bytes(model, **sizes)
    peak = memory.per_gpu_peak_bytes
    if kept < SLIDING_WINDOW_MASK_WARN_FRACTION * peak:
        return None
    repeated = (f" (and, its K/V heads grouped, K and V repeated to every query head: {repeat / GiB:.2f} GiB more "
                f"a layer)" if repeat else "")
    return Finding(id="sliding_window_masks", status="warn",
                   message=f"{model.sliding_window_layers} sliding-window layers ({model.sliding_window} tokens) at "
                           f"{model.seq_length} tokens: sdpa keeps each one's mask as a {bias / GiB:.2f} GiB bias "
                           f"until its backward{repeated}, {kept / GiB:.2f} GiB in all ({kept / peak:.0%} of the "
                           f"{peak / GiB:.1f} GiB peak)",
                   suggestion="attn_implementation='flash_attention_2' applies the window in the kernel and keeps "
                              "no mask (--attn-implementation flash_attention_2); gradient checkpointing keeps one "
                              "at a time",
                   numbers={"bias_bytes_per_layer": int(bias), "repeat_bytes_per_layer": int(repeat),
                            "kept_bytes": int(kept)})


EP_COMM_WARN_FRACTION = 0.10
"""Token dispatch and combine above this share of the step, on a group that leaves the node, is reported."""


def expert_alltoall(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time) -> Optional[Finding]:
    """MoE token traffic: the exposed dispatch + combine seconds (:func:`workbench.timing.expert_parallel_terms`,
    two all-to-alls forward and two backward per MoE layer and micro-batch), the link the expert-parallel group
    used, and whether keeping it inside a node (e·tp_e ≤ GPUs per node) would take it off the network."""
    if not model.is_moe or time is None:
        return None
    seconds = time.breakdown.get("ep_comm", 0.0)
    share = seconds / time.step_seconds if time.step_seconds else 0.0
    link = time.links.get("ep", {})
    e, te, n = plan.expert_parallel, plan.expert_tensor_parallel_size, cluster.gpus_per_node
    what = (f"{plan.moe_token_dispatcher} dispatch + combine of EP={e} (expert TP {te}) on the "
            f"{link.get('link', 'intra-node')} link: {seconds:.3f} s/step exposed ({share:.1%} of the step)")
    if e == 1 and te == 1:
        return Finding(id="expert-alltoall", status="pass",
                       message=f"EP=1: every rank holds all {model.num_experts} experts; no token all-to-all "
                               f"(the experts' weights and optimizer states are not split)")
    if link.get("link") == "inter-node" and share > EP_COMM_WARN_FRACTION:
        fits = [k for k in range(e, 0, -1) if model.num_experts % k == 0 and k * te <= n]
        hint = (f"EP={fits[0]} with expert TP {te} keeps the group in one node ({fits[0] * te} <= {n} GPUs); "
                if fits else "")
        return Finding(id="expert-alltoall", status="warn",
                       message=f"the expert-parallel group crosses nodes: {what}",
                       suggestion=hint + "or let `workbench plan` weigh EP against the experts' memory")
    return Finding(id="expert-alltoall", status="pass", message=what)


def moe_capacity(model: ModelSpec, plan: ParallelPlan, cluster: Optional[ClusterSpec] = None) -> Optional[Finding]:
    """What the capacity factor and the routing imbalance mean for this plan: dropless routing is priced at
    :attr:`ParallelPlan.moe_load_imbalance` × the balanced share on the busiest expert-parallel rank (1: balanced;
    a skewed router raises that rank's memory and time, which every rank waits for — with a ``cluster`` the finding
    names what the given imbalance costs over balanced routing, priced twice by :func:`workbench.estimate.estimate`);
    a capacity factor without padding drops the tokens above factor × average (below 1, even perfectly balanced
    routing drops 1 − factor of the token copies) and caps the imbalance; with padding every expert computes and
    exchanges factor × average."""
    if not model.is_moe:
        return None
    if plan.deepspeed_moe:
        return deepspeed_moe_capacity(model, plan)
    from workbench.encode import moe_token_factor

    f, imbalance = plan.moe_capacity_factor, plan.moe_load_imbalance
    load = moe_token_factor(plan, model)
    knobs = ("a capacity factor (--moe-expert-capacity-factor C) caps the busiest rank at C × the average by "
             "dropping the tokens above it; a larger aux-loss coefficient (--moe-aux-loss-coeff) or another "
             "--moe-router-load-balancing-type evens the routing")
    if f is None:
        if imbalance == 1.0:
            return Finding(id="moe-capacity", status="pass",
                           message="dropless routing: memory and time are priced for balanced routing (tokens·top-k / "
                                   "experts per expert); a skewed router puts more tokens on some ranks, whose expert "
                                   "activations and GEMMs then exceed the estimate",
                           suggestion=("pass --moe-load-imbalance F (the busiest expert-parallel rank's tokens over "
                                       "the mean, from the router's tokens-per-expert counts) to price it"
                                       if plan.expert_parallel > 1 else None))
        if plan.expert_parallel == 1:
            return Finding(id="moe-capacity", status="pass",
                           message=f"moe_load_imbalance={imbalance:g} has no effect with expert_parallel=1: the "
                                   f"one rank holds all {model.num_experts} experts and computes every routed copy "
                                   f"whatever the balance")
        return _imbalance_cost(model, plan, cluster, load, knobs)
    if f < 1:
        return Finding(id="moe-capacity", status="warn",
                       message=f"moe_capacity_factor={f:g} < 1: even perfectly balanced routing drops "
                               f"{1 - f:.0%} of the token copies (each expert takes at most {f:g} × its average)",
                       suggestion="use a factor >= 1 (1.0-1.25 is usual) or dropless routing")
    if plan.moe_pad_to_capacity:
        return Finding(id="moe-capacity", status="pass",
                       message=f"inputs padded to capacity: every expert computes and exchanges {f:g} × its average "
                               f"token count ({f - 1:.0%} padding priced in compute, all-to-all and activations)"
                               + (f"; moe_load_imbalance={imbalance:g} changes nothing (padded shapes)"
                                  if imbalance != 1.0 else ""))
    if imbalance > f and plan.expert_parallel > 1:
        return Finding(id="moe-capacity", status="warn",
                       message=f"capacity factor {f:g} below the routing imbalance {imbalance:g}: the busiest rank "
                               f"computes {load:.2f} × its balanced share and drops the copies above it (about "
                               f"{1 - f / imbalance:.0%} of that rank's), priced at the cap",
                       suggestion="even the routing (--moe-aux-loss-coeff) or raise the capacity factor if dropped "
                                  "tokens hurt the loss")
    return Finding(id="moe-capacity", status="pass",
                   message=f"capacity factor {f:g}: tokens routed above {f:g} × an expert's average are dropped "
                           + (f"(none at the routing imbalance {imbalance:g}, which the estimate prices)"
                              if imbalance != 1.0 else "(none under balanced routing, which the estimate prices)"))


def _imbalance_cost(model: ModelSpec, plan: ParallelPlan, cluster: Optional[ClusterSpec], load: float,
                    knobs: str) -> Finding:
    """The dropless plan's routing imbalance: what pricing the busiest rank at ``load`` × the balanced share costs
    in peak memory and step time over balanced routing (both estimates made here, without a hardware profile)."""
    what = (f"dropless routing with load imbalance {plan.moe_load_imbalance:g}: the busiest expert-parallel rank "
            f"computes, keeps and exchanges {load:.2f} × its balanced share of the routed tokens, and every rank "
            f"waits for it")
    if cluster is None:
        return Finding(id="moe-capacity", status="pass", message=what, suggestion=knobs)
    from workbench.estimate import estimate

    skewed = estimate(model, cluster, plan, checks=False)
    even = estimate(model, cluster, plan.replace(moe_load_imbalance=1.0), checks=False)
    dt = skewed.time.step_seconds - even.time.step_seconds
    dm = skewed.memory.per_gpu_peak_bytes - even.memory.per_gpu_peak_bytes
    share = dt / even.time.step_seconds
    return Finding(id="moe-capacity", status="warn" if share > 0.05 else "pass",
                   message=f"{what}: +{dt:.3f} s/step ({share:+.1%}) and +{dm / GiB:.2f} GiB peak over balanced "
                           f"routing", suggestion=knobs)


def deepspeed_moe_capacity(model: ModelSpec, plan: ParallelPlan) -> Finding:
    """DeepSpeed-MoE pads every expert to its capacity C (:func:`workbench.dsmoe.expert_capacity`) and drops the
    tokens above it: the padding costs expert activations, GEMMs and all-to-all bytes whatever the routing; a
    factor below 1 drops tokens even when routing is balanced. Names the activation memory one micro-batch's layers
    on a stage spend on capacity above the balanced average (factor 1)."""
    from workbench import dsmoe
    from workbench import memory as M

    f, c = dsmoe.capacity_factor(plan), dsmoe.expert_capacity_of(model, plan)
    tf = dsmoe.token_factor(model, plan)
    tokens = dsmoe.rank_tokens(model, plan)
    kw = dict(tokens=tokens, tensor_parallel=1, sequence_parallel=False, expert_tensor_parallel=1,
              value_bytes=plan.precision.bytes_per_value, deepspeed=1)
    # full recompute keeps one layer's expert activations at a time (the one recomputed for its backward)
    layers = 1 if plan.recompute is Recompute.FULL else max(plan.stage_layers(model.num_layers))
    balanced = dsmoe.token_factor(model, plan.replace(moe_capacity_factor=1.0))
    padding = layers * float(M.moe_activation_bytes(model, token_factor=tf, **kw)
                             - M.moe_activation_bytes(model, token_factor=balanced, **kw))
    what = (f"DeepSpeed-MoE capacity C = {c} tokens per expert (capacity_factor {f:g}, min_capacity "
            f"{dsmoe.MIN_CAPACITY}, top-{model.moe_top_k} of {model.num_experts} over {tokens:g} tokens per "
            f"micro-batch): every expert computes and exchanges {tf:.2f} × its balanced share, padded rows included")
    if f < 1:
        return Finding(id="moe-capacity", status="warn",
                       message=f"{what}; capacity_factor={f:g} < 1 drops {1 - f:.0%} of the token copies even "
                               f"under balanced routing",
                       suggestion="use capacity_factor >= 1 (DeepSpeed's default 1.0)")
    if padding > 0.05 * GiB:
        return Finding(id="moe-capacity", status="pass",
                       message=f"{what}; the padding above factor 1 keeps {padding / GiB:.2f} GiB of expert "
                               f"activations per in-flight micro-batch on the largest stage"
                               + (" (one recomputed layer's)" if plan.recompute is Recompute.FULL else ""),
                       suggestion="a smaller capacity_factor (down to 1.0) saves that memory and the padded "
                                  "all-to-all and GEMM work, at the cost of more dropped tokens when routing is "
                                  "skewed")
    return Finding(id="moe-capacity", status="pass",
                   message=f"{what}; tokens routed above C are dropped (none under balanced routing, which the "
                           f"estimate prices)")


FP8_MIN_SPEEDUP = 0.10
"""Below this estimated step-time gain FP8 is reported as not paying: the gain is within the time model's band and
FP8 brings its own risks (scaling recipes, loss divergence to watch)."""


def fp8_gain(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time) -> Optional[tuple]:
    """``(bf16_seconds, fp8_seconds, gemm_share)``: the step in bf16 and in FP8 and the share of the bf16 step spent
    in the linear GEMMs FP8 speeds up, from the plan's priced inputs with the FP8 GEMMs, casts and FP8 all-gather
    switched on or off (one more call of :func:`workbench.timing.step_time_terms`). ``None`` where FP8 is not an
    option: plans other than FP8 or bf16 Megatron with flash attention, GPUs without FP8 tensor cores."""
    from workbench import encode

    candidate = (plan.precision is Precision.BF16 and plan.engine is Engine.MEGATRON
                 and str(model.attention) == "flash" and cluster.gpu.peak_tflops.get("fp8")
                 and str(model.implementation) == "megatron")
    if not (plan.precision.is_fp8 or candidate) or time is None or not time.inputs:
        return None
    inputs = dict(time.inputs)
    if plan.precision.is_fp8:
        fp8_step = time.step_seconds
        inputs.update(fp8_layer_fraction=0.0, fp8_amax_reductions=0.0, param_gather_bytes_per_value=2.0)
        bf16_terms = T.step_time_terms(**inputs)
        bf16_step = float(bf16_terms["step_seconds"])
    else:
        bf16_step = time.step_seconds
        bf16_terms = T.step_time_terms(**inputs)
        fp8_plan = plan.replace(precision="fp8", fp8_recipe="delayed")
        inputs.update(encode.fp8_time_inputs(model, cluster, encode.plan_columns(fp8_plan, model),
                                             model.parameter_counts()))
        fp8_step = float(T.step_time_terms(**inputs)["step_seconds"])
    # forward + data-gradient + weight-gradient GEMMs of the slowest stage's layers, every micro-batch
    gemm = bf16_terms["stage_layers"] * bf16_terms["layer_weight_gemm_seconds"] * 3 * plan.num_microbatches
    return bf16_step, fp8_step, float(gemm) / bf16_step


def fp8_payoff(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time) -> Optional[Finding]:
    """For an FP8 plan: whether FP8 pays (:func:`fp8_gain` ≥ :data:`FP8_MIN_SPEEDUP` of the bf16 step). FP8 speeds up
    only the transformer layers' linear GEMMs; where those are a small part of the step (small hidden sizes with
    memory-bound element-wise work, long sequences dominated by attention, exposed communication) the quantize
    kernels eat most of the gain."""
    if not plan.precision.is_fp8:
        return None
    found = fp8_gain(model, cluster, plan, time)
    if found is None:
        return None
    bf16_step, fp8_step, share = found
    gain = 1 - fp8_step / bf16_step
    numbers = (f"bf16 {bf16_step:.3f} s/step, FP8 {fp8_step:.3f} s/step ({gain:.1%} of the step saved); the linear "
               f"GEMMs FP8 speeds up are {share:.0%} of the bf16 step (hidden {model.hidden_size}, TP "
               f"{plan.tensor_parallel})")
    if gain >= FP8_MIN_SPEEDUP:
        return Finding(id="fp8_payoff", status="pass", message=f"FP8 pays: {numbers}")
    return Finding(id="fp8_payoff", status="warn",
                   message=f"FP8 does not pay here (< {FP8_MIN_SPEEDUP:.0%}): {numbers}; attention, element-wise "
                           f"work, communication and the FP8 casts are the rest",
                   suggestion="train in bf16 (it needs no more memory unless --fp8-param-gather saved some), or "
                              "make the GEMMs larger (larger micro batch, smaller TP)")


TP_OVERLAP_MIN_GAIN = 0.01
"""Transformer Engine's TP communication overlap is suggested when it saves at least this share of the step."""


def tp_comm_overlap_payoff(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time,
                           memory) -> Optional[Finding]:
    """For a Megatron plan with TP > 1 and sequence parallel: whether ``--tp-comm-overlap`` pays, the step priced
    once more with it flipped (:func:`workbench.timing.step_time_terms` on the plan's inputs) against the
    userbuffers it allocates outside the allocator (:func:`workbench.memory.userbuffer_bytes`). ``None`` where it
    does not apply."""
    from workbench.specs import tp_comm_overlap_possible

    if (plan.engine is not Engine.MEGATRON or plan.tensor_parallel == 1 or not plan.sequence_parallel
            or not tp_comm_overlap_possible(model) or time is None or not time.inputs):
        return None
    inputs = dict(time.inputs, tp_comm_overlap=0 if plan.tp_comm_overlap else 1)
    other = float(T.step_time_terms(**inputs)["step_seconds"])
    on, off = (time.step_seconds, other) if plan.tp_comm_overlap else (other, time.step_seconds)
    gain = 1 - on / off
    ub = float(M.userbuffer_bytes(seq_length=model.seq_length, micro_batch=plan.micro_batch_size,
                                  hidden_size=model.hidden_size, context_parallel=plan.context_parallel,
                                  value_bytes=plan.precision.bytes_per_value, fp8=int(plan.precision.is_fp8),
                                  fp8_bf16=plan.fp8_bf16_first_layers + plan.fp8_bf16_last_layers,
                                  tp_comm_overlap=1))
    numbers = (f"{off:.3f} s/step without, {on:.3f} s/step with TP communication overlap ({gain:.1%} of the step "
               f"saved) for {_gb(ub)} of Transformer Engine userbuffers per GPU outside the allocator (TP "
               f"{plan.tensor_parallel}, hidden {model.hidden_size}, {plan.micro_batch_size}×{model.seq_length} "
               f"tokens per micro-batch)")
    if plan.tp_comm_overlap:
        if gain > 0:
            return Finding(id="tp_comm_overlap", status="pass", message=f"--tp-comm-overlap pays: {numbers}")
        return Finding(id="tp_comm_overlap", status="warn",
                       message=f"--tp-comm-overlap does not pay here: {numbers}; the GEMMs already hide little "
                               f"communication or lose more to the SMs it takes",
                       suggestion="drop --tp-comm-overlap (it also frees the userbuffers)")
    room = memory is None or memory.headroom_bytes >= ub
    if gain >= TP_OVERLAP_MIN_GAIN and room:
        return Finding(id="tp_comm_overlap", status="warn",
                       message=f"tensor-parallel communication is exposed: {numbers}",
                       suggestion="add --tp-comm-overlap (Megatron-LM with Transformer Engine; Megatron-Bridge "
                                  "CommOverlapConfig(tp_comm_overlap=True))")
    why = ("the userbuffers do not fit the headroom" if gain >= TP_OVERLAP_MIN_GAIN
           else f"it would save less than {TP_OVERLAP_MIN_GAIN:.0%}")
    return Finding(id="tp_comm_overlap", status="pass", message=f"--tp-comm-overlap off; {why}: {numbers}")


XENT_TE_MIN_GAIN = 0.02
"""Transformer Engine's fused cross entropy is suggested when it lowers the per-GPU peak or the step by at least this
share (or makes a plan that does not fit fit): 2 % is beyond the memory model's worst allocated-bytes error (1.5 %)
and the time model's median step error (1.8 %) on the megatron-core fit-split shapes (``benchmarks/
bench_accuracy.py``), so the difference the advice quotes is larger than the models' own scatter on the terms the
option changes. A Llama-3-8B-wide model at 8k tokens on TP=2 over 8 H100s clears it with a 152k vocabulary (3.5 %
of the peak) and stays below it with a 32k one (0.3 %)."""

XENT_TE_FLAGS = "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te"
"""Megatron-LM's flags for Transformer Engine's fused cross entropy (what :func:`workbench.configs.megatron.
megatron_args` writes for ``cross_entropy_fusion='te'``)."""


def cross_entropy_fusion_advice(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record, *,
                                headroom: float = 0.0, profile=None) -> Optional[Finding]:
    """For an engine-``megatron`` plan whose loss is not yet Transformer Engine's fused cross entropy: the plan
    re-estimated with ``cross_entropy_fusion='te'`` (both models, every stage), and what that saves — the per-GPU
    peak (whole device and allocated) and the step seconds. The unfused and ``native`` losses keep the fp32 softmax
    beside the 16-bit logits, v + 4 bytes per logit of s·b·V/t on the last stage; ``te`` keeps the 16-bit logits
    only, with the gradient written over them (:func:`workbench.memory.megatron_loss_bytes_per_logit`), and moves
    fewer bytes (:func:`workbench.timing.cross_entropy_bytes`). A warning with the flags to add where it saves at
    least :data:`XENT_TE_MIN_GAIN` of the peak or of the step, or where the plan does not fit and would with it;
    ``None`` otherwise, where it is already on, and for engines without the flag (DeepSpeed and Megatron-DeepSpeed
    compute their own loss, as do Hugging Face models)."""
    if plan.engine is not Engine.MEGATRON or plan.cross_entropy_fusion is CrossEntropyFusion.TE:
        return None
    te_plan, priced = _try(model, cluster, plan, profile, cross_entropy_fusion=CrossEntropyFusion.TE)
    if te_plan is None:
        return None
    te_time, te_mem = priced
    mem, t = record.memory, record.time
    peak, te_peak = mem.per_gpu_peak_bytes, te_mem.per_gpu_peak_bytes
    saves = peak - te_peak
    saves_allocated = (peak - mem.breakdown.overhead) - (te_peak - te_mem.breakdown.overhead)
    step, te_step = t.step_seconds, te_time.step_seconds
    memory_gain, step_gain = saves / peak, 1 - te_step / step
    fits, te_fits = _fits_with_headroom(mem, headroom), _fits_with_headroom(te_mem, headroom)
    if not (memory_gain >= XENT_TE_MIN_GAIN or step_gain >= XENT_TE_MIN_GAIN or (te_fits and not fits)):
        return None
    v = plan.precision.bytes_per_value
    kept, kept_te = (float(M.megatron_loss_bytes_per_logit(CROSS_ENTROPY_FUSION_CODES[x], v))
                     for x in (plan.cross_entropy_fusion, CrossEntropyFusion.TE))
    last = len(mem.stages) - 1
    where_peak = ("" if mem.peak_stage.stage == last or saves > 0 else
                  f"; the peak is on pipeline stage {mem.peak_stage.stage}, not the last, so it stays")
    loss = ("megatron-core's native fused cross entropy" if plan.cross_entropy_fusion is CrossEntropyFusion.NATIVE
            else "the unfused vocab-parallel cross entropy")
    message = (f"{loss} keeps {kept:g} bytes per logit on the last pipeline stage (vocabulary {model.vocab_size:,}, "
               f"{model.seq_length // plan.context_parallel:,} tokens × micro batch {plan.micro_batch_size}, TP "
               f"{plan.tensor_parallel}); Transformer Engine's fused cross entropy keeps {kept_te:g}. Re-estimated "
               f"with it: peak {_gb(peak)} → {_gb(te_peak)} per GPU ({_gb(saves)}, {memory_gain:.1%} saved; "
               f"allocated {_gb(saves_allocated)}){where_peak}; step {step:.3f} → {te_step:.3f} s "
               f"({step - te_step:.3f} s, {step_gain:.1%} saved)")
    fit_note = ("; then the plan fits" if te_fits and not fits else
                "" if fits else f"; it still needs {_gb(te_peak)} per GPU: follow the OOM ladder too")
    return Finding(id="cross_entropy_fusion", status="warn", message=message,
                   suggestion=(f"add {XENT_TE_FLAGS}" if plan.cross_entropy_fusion is CrossEntropyFusion.NONE else
                               "change --cross-entropy-fusion-impl native to te")
                              + f" (plan cross_entropy_fusion='te', --cross-entropy-fusion te; "
                              f"megatron-core TransformerConfig cross_entropy_loss_fusion=True, "
                              f"cross_entropy_fusion_impl='te'; needs Transformer Engine installed){fit_note}",
                   numbers={"peak_bytes": int(peak), "te_peak_bytes": int(te_peak), "saves_bytes": int(saves),
                            "saves_allocated_bytes": int(saves_allocated), "step_seconds": float(step),
                            "te_step_seconds": float(te_step), "fits": fits, "te_fits": te_fits})


def cpu_adam_threads(plan: ParallelPlan, omp_num_threads: Optional[str] = None, *,
                     cluster: Optional[ClusterSpec] = None, time=None) -> Optional[Finding]:
    """CPU optimizer offload runs DeepSpeed's CPU Adam on ``OMP_NUM_THREADS`` threads per rank, and torchrun sets
    ``OMP_NUM_THREADS=1`` when it is unset. Measured on H200 (one rank, optimizer offload): 3.2 s per step at one
    thread, 1.1 s with the node's cores. The threads the job will see: the cluster's ``cpu_adam_threads`` when set,
    else ``omp_num_threads`` (default: this process's environment). With the plan's ``time`` estimate the finding
    prices the step at one thread and at the threads the estimate assumed, through the time model."""
    if plan.offload_optimizer is Offload.NONE:
        return None
    if cluster is not None and cluster.cpu_adam_threads:
        threads = cluster.cpu_adam_threads
    else:
        if omp_num_threads is None:
            omp_num_threads = os.environ.get("OMP_NUM_THREADS")
        try:
            threads = int(omp_num_threads) if omp_num_threads else None
        except ValueError:
            threads = None
    ok = threads is not None and threads > 1
    shown = "unset (torchrun then sets 1)" if threads is None else str(threads)
    if time is not None and time.inputs:
        from workbench import timing as T

        assumed = int(time.inputs["cpu_adam_threads"])
        one = float(T.step_time_terms(**{**time.inputs, "cpu_adam_threads": 1})["step_seconds"])
        cost = (f"at 1 thread the step takes {one:.3g} s instead of {time.step_seconds:.3g} s at {assumed} "
                f"(the time model)")
    else:
        cost = "at 1 thread the step is ~3x slower (H200: 3.2 s vs 1.1 s)"
    return Finding(id="cpu_adam_threads", status="pass" if ok else "warn",
                   message=f"optimizer offload to {plan.offload_optimizer}: CPU Adam runs on OMP_NUM_THREADS="
                           f"{shown} threads per rank; {cost}",
                   suggestion="" if ok else "export OMP_NUM_THREADS=<CPU cores per GPU> before launching "
                                            "(workbench run sets it)")


HOST_MACHINES_MEASURED = dict(gpu="H100 80GB HBM3", date="2026-12-05", near=(-0.067, 0.101), over=(0.25, 0.55),
                              launch_us=(5.9, 8.0, 15.0), pageable_gb_per_s=((11.0, 15.0), (6.0, 9.0)),
                              batches="final52 and fit13 on one machine, final53 on another")
"""Two H100 machines of one type (the same CPU model string, cores and software; ``benchmarks/corpus/h100_runs.jsonl``):
the estimate put one machine's page-locked CPU-offload steps within -6.7 / +10.1 % (fit13's and final52's) and every
run of the other 25-55 % over (blind, ``benchmarks/results/final53_blind_h100.txt``), whose host was faster: CUDA
launches 5.9 against 8-15 µs, pageable copies 11-15 against 6-9 GB/s to the GPU (the records' probes)."""

HOST_WORK_SHARE_WARN = 0.5
"""A plan whose step is at least this share host work (CPU Adam, the offload copies, the Python launches the GPU
waits for) is told that its time follows the machine it runs on."""


def host_work_share(time) -> float:
    """The share of the priced step that is the host's work: the offload term (CPU Adam and the copies across the
    host link, :func:`workbench.timing.optimizer_terms`) and the part that follows the host CPU's speed
    (:attr:`~workbench.estimate.TimeEstimate.host_share`); 0 without a time estimate."""
    if time is None or not time.step_seconds:
        return 0.0
    return min(1.0, float(time.breakdown.get("offload", 0.0)) / time.step_seconds + float(time.host_share or 0.0))


def host_dependent_step(plan: ParallelPlan, time, profile_name: Optional[str] = None,
                        cpu_adam_measured: bool = False) -> Optional[Finding]:
    """A step that is mostly the host's work follows the machine, not the GPU: two machines of one type ran the same
    CPU-offload plans 25-55 % apart from the estimate (:data:`HOST_MACHINES_MEASURED`). Plans that offload to the
    CPU only (host-bound launches have their own findings, ``zero3_host_bound`` and ``microstep_host_bound``). Without a
    hardware profile the estimate prices the fit hosts' constants, so the finding asks for ``workbench calibrate`` (CPU
    Adam, host link, pageable copies measured on the user's node); with one (``profile_name``, the estimate's profile
    record) it says the step was priced with it, and still warns when the profile's CPU Adam is not applied
    (``cpu_adam_measured``: :attr:`workbench.calibrate.profile.HardwareProfile.applies_cpu_adam`) while the plan
    offloads the optimizer. ``None`` below :data:`HOST_WORK_SHARE_WARN`."""
    if not plan.offloads_to_cpu:  # host-bound launches alone: zero3_host_bound's and microstep_host_bound's
        return None
    share = host_work_share(time)
    if share < HOST_WORK_SHARE_WARN:
        return None
    offload = float(time.breakdown.get("offload", 0.0))
    what = (f"{share:.0%} of this {time.step_seconds:.3g} s step is host work (CPU Adam and the offload copies "
            f"{offload:.3g} s, Python launches {float(time.host_share or 0.0):.0%} of the step)")
    r = HOST_MACHINES_MEASURED
    adam = plan.offload_optimizer is not Offload.NONE
    if profile_name and (cpu_adam_measured or not adam):
        return Finding(id="host_dependent_step", status="pass",
                       message=f"{what}, priced with hardware profile {profile_name}'s measured host link"
                               + (" and CPU Adam" if adam else ""),
                       numbers=dict(host_work_share=round(share, 3)))
    if profile_name:
        return Finding(id="host_dependent_step", status="warn",
                       message=f"{what}; hardware profile {profile_name} timed no DeepSpeedCPUAdam, so its CPU Adam "
                               f"is the catalog's",
                       suggestion="run `workbench calibrate --cpu-adam deepspeed` on a node of the cluster",
                       numbers=dict(host_work_share=round(share, 3), offload_seconds=round(offload, 4)))
    return Finding(
        id="host_dependent_step", status="warn",
        message=(f"{what}: it follows the machine's CPU and memory, not the GPU. On two {r['gpu']} machines of one "
                 f"type the estimate put one's page-locked offload steps within {r['near'][0]:+.1%} / "
                 f"{r['near'][1]:+.1%} and every one of the other's {r['over'][0]:.0%}-{r['over'][1]:.0%} over "
                 f"({r['date']}; CUDA launches {r['launch_us'][0]} "
                 f"against {r['launch_us'][1]:g}-{r['launch_us'][2]:g} µs, pageable copies "
                 f"{r['pageable_gb_per_s'][0][0]:g}-{r['pageable_gb_per_s'][0][1]:g} against "
                 f"{r['pageable_gb_per_s'][1][0]:g}-{r['pageable_gb_per_s'][1][1]:g} GB/s); without a profile this "
                 f"estimate prices the fit hosts' constants"),
        suggestion="run `workbench calibrate --cpu-adam deepspeed` on a node of the cluster (it times DeepSpeedCPUAdam, "
                   "the host link, its pageable copies and the host's CUDA launches) and pass its profile (--profile)",
        numbers=dict(host_work_share=round(share, 3), offload_seconds=round(offload, 4)))


def param_offload_optimizer(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record, *,
                            headroom: float = 0.0, profile=None) -> Optional[Finding]:
    """ZeRO-3 with the parameters on the host but the optimizer on the GPU: each optimizer step copies the updated
    fp32 partition into the host's 16-bit copy through a pageable host buffer and a cast on the host (torch's
    blocking copy with a dtype change; stage3.py ``_reassign_or_swap_out_partitioned_parameters``), which the time
    model prices per parameter (:func:`workbench.timing.optimizer_terms`). Measured on H200 (corpus final33, one
    GPU): Phi-3 mini at 24 layers 8.3 s per step at micro-batch 2 this way against 1.9 s at micro-batch 1 with the
    optimizer on the CPU too, and Llama 2 13B's width at 8 layers 8.3 s against 1.8 s: more than twice the tokens per
    second with both offloaded, and the GPU no longer holds the fp32 master, gradients and Adam states. The plan
    re-estimated with ``offload_optimizer`` on the parameters' device; a warning with both steps and peaks, ``None``
    for other plans."""
    if plan.zero_stage is not ZeroStage.PARAMETERS or plan.offload_params is Offload.NONE \
            or plan.offload_optimizer is not Offload.NONE:
        return None
    both, priced = _try(model, cluster, plan, profile, offload_optimizer=plan.offload_params)
    if both is None:
        return None
    both_time, both_mem = priced
    mem, t = record.memory, record.time
    copy_back = float(t.breakdown.get("offload", 0.0))
    fits = _fits_with_headroom(both_mem, headroom) and both_mem.fits_host
    message = (f"parameters offloaded to {plan.offload_params} with the optimizer on the GPU: every step copies the "
               f"updated fp32 partition back into host memory through a pageable buffer (the host copies: {copy_back:.3g} "
               f"s of the {t.step_seconds:.3g} s step). With offload_optimizer {plan.offload_params} too: step "
               f"{both_time.step_seconds:.3g} s, peak {_gb(mem.per_gpu_peak_bytes)} → "
               f"{_gb(both_mem.per_gpu_peak_bytes)} per GPU, host {_gb(both_mem.host_bytes_per_node)} per node "
               f"(measured on H200: 8.3 s per step this way against 1.8-1.9 s with both offloaded)")
    return Finding(id="param_offload_optimizer", status="warn", message=message,
                   suggestion=(f'add "offload_optimizer": {{"device": "{plan.offload_params}", "pin_memory": true}} '
                               f"to zero_optimization (--offload-optimizer {plan.offload_params})"
                               + ("" if fits else "; it then needs more host memory or GPU room than this cluster "
                                                  "has: check the estimate")),
                   numbers={"step_seconds": float(t.step_seconds), "both_step_seconds": float(both_time.step_seconds),
                            "peak_bytes": int(mem.per_gpu_peak_bytes),
                            "both_peak_bytes": int(both_mem.per_gpu_peak_bytes), "both_fits": bool(fits)})


# ================================================================================================================
# OOM ladder (guide §5.2)
# ================================================================================================================
def _evaluated(model, cluster, plan, profile=None):
    """The plan priced once by the models (no advisor checks): the record every rung reads."""
    from workbench.estimate import estimate

    return estimate(model, cluster, plan, profile, checks=False)


REPLAY_SKIP_MARGIN = 0.05
"""The OOM ladder replays the allocator for a rung (:func:`_price`) unless the rung's allocated peak, this much
lower, is already over the limit: no reserve could make it fit. 5 %: the allocated-memory model's worst error on
held-out shapes (4.7 % on both the H200 and the H100 corpus's test split, ``benchmarks/bench_accuracy.py``)."""


def _price(model, cluster, plan, base_seconds, headroom, record=None, profile=None, replay=None):
    """One plan priced for the ladder: ``record`` when given, else the models with the constant reserve, or —
    with ``replay`` (:attr:`workbench.estimate.EvaluatedPlan.replay_for`) and the plan in the replay's scope —
    the allocator replayed for it, unless its allocated peak rules it out anyway (:data:`REPLAY_SKIP_MARGIN`) or
    it runs out of host memory; a replay that fails (its trace refused or broken) leaves the constant's price."""
    if record is None:
        record = _evaluated(model, cluster, plan, profile)
        allocated = record.memory.per_gpu_peak_bytes - record.memory.breakdown.overhead
        if (replay is not None and record.memory.fits_host
                and allocated * (1 - REPLAY_SKIP_MARGIN) <= (1 - headroom) * record.memory.capacity_bytes):
            try:
                record = replay(plan) or record
            except (ValueError, RuntimeError):  # the rung stays priced with the constant, shown unmarked
                pass
    mem, t = record.memory, record.time
    # judged as the fits_memory check and `workbench estimate` judge it: the peak at the error band's upper side
    fits_gpu = mem.per_gpu_peak_bytes + mem.band_high_bytes <= (1 - headroom) * mem.capacity_bytes
    fits = fits_gpu and mem.fits_host
    point = mem.per_gpu_peak_bytes <= (1 - headroom) * mem.capacity_bytes and mem.fits_host
    return dict(plan=plan, peak_bytes=int(mem.per_gpu_peak_bytes), host_bytes_per_node=int(mem.host_bytes_per_node),
                fits=bool(fits), fits_point_estimate=bool(point), step_seconds=t.step_seconds,
                slowdown=t.step_seconds / base_seconds - 1,
                limit=_limit_text(mem, fits_gpu, headroom), replayed=record.replayed_peaks is not None)


def _limit_text(mem, fits_gpu: bool, headroom: float) -> str:
    """What a plan that does not fit runs out of: the GPU (over its capacity less the headroom) or, with offload, the
    node's host memory; '' when it fits."""
    if not fits_gpu:
        upper = (f" ({_gb(mem.per_gpu_peak_bytes + mem.band_high_bytes)} at the error band's upper side)"
                 if mem.band_high_bytes else "")
        return (f"GPU memory: {_gb(mem.per_gpu_peak_bytes)}{upper} per GPU over the "
                f"{_gb((1 - headroom) * mem.capacity_bytes)} that {headroom:.0%} headroom leaves" if headroom else
                f"GPU memory: {_gb(mem.per_gpu_peak_bytes)}{upper} per GPU of {_gb(mem.capacity_bytes)}")
    if not mem.fits_host:
        return (f"host memory: {_gb(mem.host_bytes_per_node)} per node of "
                f"{_gb(mem.host_capacity_bytes_per_node)} for the ranks' processes and what they offload")
    return ""


def oom_ladder(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, headroom: float = 0.0,
               record=None, profile=None) -> tuple:
    """The guide's out-of-memory steps in its order, each priced with the memory and time models; stops at the
    first plan that fits (peak ≤ (1 − headroom) × GPU memory, host memory too). Empty when the plan fits.

    0. PyTorch's expandable-segments allocator when the plan runs the default one (no cost in step time on the
       measured runs, :data:`EXPANDABLE_SEGMENTS_MEASURED`; kept by every later rung);
    1. smaller micro batch, more accumulation, same global batch (tries each divisor of the micro batch, largest
       first); 2. activation checkpointing: selective, then full recompute (DeepSpeed ``activation_checkpointing``
       with ``partition_activations`` over TP and ``contiguous_memory_optimization``; Megatron
       ``--recompute-granularity``; a transformers model: every k-th decoder layer, fewest layers first, then every
       layer, :func:`_hf_checkpoint_rungs`); 3. the model states sharded over data parallel with nothing offloaded:
       a higher ZeRO stage, Megatron's distributed optimizer (:func:`_shard_rungs`; the guide's ladder goes from
       checkpointing to offload, but sharding on the GPU costs far less step time, so it comes first); 4. ZeRO-3
       under DeepSpeed (from Megatron through Megatron-DeepSpeed, with nothing offloaded first), with CPU offload of
       the optimizer, then of the parameters too (pipeline parallel folded into data parallel since DeepSpeed pairs
       ZeRO-3 with no PP);
    for an MoE model a rung before it (4, ZeRO-3 becoming 5) raises expert parallelism (Megatron's, or DeepSpeed-MoE's
    ep_size), each larger EP the experts and GPUs allow, smallest first;
    :func:`lora_option` prices the fine-tuning alternative (LoRA) next to it.

    When ``record`` was estimated with the allocator replayed, each rung in the replay's scope is replayed too
    (:attr:`workbench.estimate.EvaluatedPlan.replay_for`; :attr:`LadderStep.replayed` says which), the others take
    the constant reserve.
    """
    if record is None:
        validate(model, cluster, plan)
    base = _price(model, cluster, plan, 1.0, headroom, record, profile)
    if base["fits"]:
        return ()
    base_s = base["step_seconds"]
    steps: list[LadderStep] = []
    current = plan

    replay = getattr(record, "replay_for", None)  # record: None or an EvaluatedPlan; set when it was replayed

    def rung(step, action, p, settings):
        r = _price(model, cluster, p, base_s, headroom, profile=profile, replay=replay)
        steps.append(LadderStep(step=step, action=action, settings=settings, **r))
        return r["fits"]

    # 0 — the allocator: PyTorch's expandable segments cost no step time (measured), so every later rung keeps it
    if not plan.expandable_segments:
        current = plan.replace(expandable_segments=True)
        if rung(0, "expandable-segments allocator (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): a smaller "
                   "reserve above the allocated peak, the same allocated memory and step time", current,
                {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "--expandable-segments": True}):
            return tuple(steps)
    # 1 — micro batch
    b = plan.micro_batch_size
    smaller = [k for k in range(b - 1, 0, -1) if b % k == 0]
    if not smaller:
        steps.append(LadderStep(step=1, action=f"micro batch is already 1 (accumulation "
                                               f"{plan.gradient_accumulation_steps})", plan=None))
    for k in smaller:
        p = current.replace(micro_batch_size=k)
        current = p
        if rung(1, f"micro batch {b} → {k}, gradient accumulation {plan.gradient_accumulation_steps} → "
                   f"{p.gradient_accumulation_steps} (global batch {plan.global_batch_size} kept)", p,
                {"train_micro_batch_size_per_gpu": k, "gradient_accumulation_steps": p.gradient_accumulation_steps,
                 "--micro-batch-size": k}):
            return tuple(steps)
        if k != smaller[-1]:
            steps.pop()  # report only the rung that fits or the smallest tried
    # 2 — activation checkpointing
    ds_ckpt = {"activation_checkpointing": {"partition_activations": plan.tensor_parallel > 1,
                                            "contiguous_memory_optimization": True}}
    hf = model.implementation is Implementation.TRANSFORMERS  # checkpoints whole layers: no selective recompute
    levels = [r for r in (Recompute.SELECTIVE, Recompute.FULL)
              if r.rank > current.recompute.rank and not hf]
    if hf:
        current = _hf_checkpoint_rungs(model, current, rung, steps)
        if steps and steps[-1].fits:
            return tuple(steps)
    elif not levels:
        steps.append(LadderStep(step=2, action="full activation recompute is already on", plan=None))
    for r in levels:
        p = current.replace(recompute=r, recompute_layers=None)
        mg = megatron_recompute_flags(p)  # the flags the Megatron export writes for this plan
        flags = {**dict(zip(mg[::2], mg[1::2])), **(ds_ckpt if r is Recompute.FULL else {})}
        current = p
        if rung(2, f"activation checkpointing: recompute {r}", p, flags):
            if r is Recompute.FULL:  # fewer layers may do: Megatron's block method
                fewer = _block_recompute_rung(model, cluster, p, base_s, headroom, profile, replay)
                if fewer is not None:
                    steps[-1] = fewer
                    current = fewer.plan
            return tuple(steps)
    # 3 — shard the model states over data parallel, still on the GPU: a higher ZeRO stage (DeepSpeed), the
    # distributed optimizer (Megatron); far cheaper in step time than offloading them to the CPU
    current = _shard_rungs(model, cluster, current, base_s, headroom, profile, steps, replay)
    if steps and steps[-1].fits:
        return tuple(steps)
    # 4 (MoE under Megatron) — more expert parallelism: fewer experts per GPU, their states sharded further
    ep_step, zero_step = 4, 4
    if model.is_moe and current.engine is Engine.MEGATRON:
        zero_step = 5
        e, te = current.expert_parallel, current.expert_tensor_parallel_size
        larger = [k for k in range(e + 1, model.num_experts + 1) if model.num_experts % k == 0
                  and current.world_size % (te * k * current.pipeline_parallel) == 0]
        if not larger:
            steps.append(LadderStep(step=ep_step, action=f"expert parallel is already the largest the experts and "
                                                         f"GPUs allow (EP={e}, {model.num_experts} experts)",
                                    plan=None))
        for k in larger:
            p = current.replace(expert_parallel=k, sequence_parallel=current.sequence_parallel
                                or current.tensor_parallel > 1)
            if rung(ep_step, f"expert parallel {e} → {k} ({model.num_experts // k} experts per GPU, expert data "
                             f"parallel {current.expert_data_parallel} → {p.expert_data_parallel})", p,
                    {"--expert-model-parallel-size": k}):
                return tuple(steps)
            if k != larger[-1]:
                steps.pop()  # report only the rung that fits or the largest tried
    # 4 (MoE under DeepSpeed, TP 1, ZeRO-1/2) — DeepSpeed-MoE's ep_size: experts split over ep consecutive ranks,
    # their states partitioned over world / (pp · ep)
    if (model.is_moe and current.engine is not Engine.MEGATRON and current.tensor_parallel == 1
            and current.zero_stage < ZeroStage.PARAMETERS):
        zero_step = 5
        e, stride = current.expert_parallel, current.world_size // current.pipeline_parallel
        larger = [k for k in range(e + 1, model.num_experts + 1) if model.num_experts % k == 0 and stride % k == 0]
        if not larger:
            steps.append(LadderStep(step=ep_step, action=f"DeepSpeed-MoE ep_size is already the largest the experts "
                                                         f"and GPUs allow (EP={e}, {model.num_experts} experts)",
                                    plan=None))
        for k in larger:
            p = current.replace(expert_parallel=k)
            if rung(ep_step, f"DeepSpeed-MoE ep_size {e} → {k} ({model.num_experts // k} experts per GPU, expert "
                             f"data parallel {current.expert_data_parallel} → {p.expert_data_parallel}; capacity "
                             f"factor {p.moe_capacity_factor or 1.0:g})", p, {"MoE(ep_size=...)": k}):
                return tuple(steps)
            if k != larger[-1]:
                steps.pop()
    # 4 (5 after an MoE rung) — ZeRO-3 (+ CPU offload) under DeepSpeed (which keeps every expert on every rank:
    # DeepSpeed-MoE refuses ZeRO-3, so the model's own MoE block)
    engine = Engine.MEGATRON_DEEPSPEED if current.engine is Engine.MEGATRON else current.engine
    if current.engine is Engine.DEEPSPEED and current.tensor_parallel > 1:
        engine = Engine.MEGATRON_DEEPSPEED
    if current.context_parallel > 1:
        steps.append(LadderStep(step=zero_step, action=f"ZeRO-3 with CPU offload runs under DeepSpeed (engine "
                                                       f"{engine}), which "
                                               f"has no Megatron context parallelism (CP={current.context_parallel}): "
                                               f"not available for this plan", plan=None))
        return tuple(steps)
    dp = current.world_size // (current.tensor_parallel * current.context_parallel)
    if current.global_batch_size % (current.micro_batch_size * dp):
        steps.append(LadderStep(step=zero_step, action=f"ZeRO-3 needs pipeline_parallel=1: data parallel becomes {dp}, "
                                               f"which does not divide global_batch_size={current.global_batch_size} "
                                               f"× micro batch {current.micro_batch_size}", plan=None))
        return tuple(steps)
    # from Megatron, ZeRO-3 with nothing offloaded first (a DeepSpeed plan tried it at step 3)
    offloads = ("optimizer", "optimizer and parameters")
    if not (current.engine is engine and current.zero_stage == ZeroStage.PARAMETERS):
        offloads = ("nothing",) + offloads
    for what in offloads:
        # the parameters on the host: built inside deepspeed.zero.Init, never whole on a GPU (memory.zero3_build_bytes)
        built = (dict(zero_init=True) if what == "optimizer and parameters" and engine is Engine.DEEPSPEED
                 and current.zero_init is None else {})
        p = current.replace(engine=engine, **NO_PIPELINE, zero_stage=3, **built,
                            distributed_optimizer=False,
                            offload_optimizer=Offload.NONE if what == "nothing" else Offload.CPU,
                            offload_params=Offload.CPU if what == "optimizer and parameters" else Offload.NONE,
                            recompute_layers=None, expert_parallel=1, expert_tensor_parallel=None,
                            moe_overlap_alltoall=False, moe_capacity_factor=None, moe_pad_to_capacity=False)
        settings = {"zero_optimization": {"stage": 3, **({"offload_optimizer": {"device": "cpu", "pin_memory": True}}
                                                         if what != "nothing" else {}),
                                          **({"offload_param": {"device": "cpu", "pin_memory": True}}
                                             if what == "optimizer and parameters" else {})}}
        pp_note = f", pipeline {current.pipeline_parallel} → 1" if current.pipeline_parallel > 1 else ""
        action = (f"ZeRO-3 with nothing offloaded (engine {engine}{pp_note})" if what == "nothing" else
                  f"ZeRO-3 with CPU offload of the {what} (engine {engine}{pp_note}"
                  + (", the model built inside deepspeed.zero.Init" if built else "") + ")")
        if rung(zero_step, action, p, settings):
            return tuple(steps)
    return tuple(steps)


def _ordinal(n: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _block_recompute_rung(model, cluster, full, base_s, headroom, profile, replay=None):
    """For a Megatron plan (Megatron or Megatron-DeepSpeed, no virtual pipeline) whose full recompute of every
    layer fits: the fewest layers per stage that Megatron's block method (``--recompute-method block
    --recompute-num-layers N``: the first N layers of each stage recomputed, the others keeping their activations)
    recomputes and still fits, found by bisection (memory falls and step time rises with N), as a
    :class:`LadderStep`; ``None`` when only every layer fits or the plan is not such a plan."""
    if full.engine is Engine.DEEPSPEED or full.virtual_pipeline > 1:
        return None
    stage = max(full.stage_layers(model.num_layers))
    lo, hi, found = 1, stage - 1, None
    while lo <= hi:
        n = (lo + hi) // 2
        try:
            p = full.replace(recompute_layers=n)
            validate(model, cluster, p)
        except ValueError:
            return found
        r = _price(model, cluster, p, base_s, headroom, profile=profile, replay=replay)
        if r["fits"]:
            found, hi = (n, r), n - 1
        else:
            lo = n + 1
    if found is None:
        return None
    n, r = found
    mg = megatron_recompute_flags(r["plan"])
    return LadderStep(step=2, action=f"activation checkpointing: recompute full, block method, the first {n} of "
                                     f"{stage} layers of each stage (the rest keep their activations)",
                      settings=dict(zip(mg[::2], mg[1::2])), **r)


def _hf_checkpoint_rungs(model, current, rung, steps) -> ParallelPlan:
    """The ladder's step 2 for a transformers model: decoder layers checkpointed as ``every_n_layers`` allows
    (:func:`workbench.specs.hf_checkpoint_every`), fewest first — every k-th layer recomputes only ⌈L/k⌉ layers,
    so the first count that fits costs the least step time — up to every layer. ``rung`` prices and appends one; only
    the rung that fits, or the last tried (every layer), is kept. Returns the plan the next rungs start from."""
    layers = model.num_layers
    now = (current.recompute_layers or layers) if current.recompute is Recompute.FULL else 0
    counts = [n for n in hf_checkpoint_counts(layers) if n > now]
    if not counts:
        steps.append(LadderStep(step=2, action="every decoder layer is already checkpointed", plan=None))
        return current
    for n in counts:
        every = hf_checkpoint_every(layers, n, name=model.name)
        p = current.replace(recompute=Recompute.FULL, recompute_layers=None if n == layers else n)
        kwargs = {"use_reentrant": False, **({"every_n_layers": every} if every > 1 else {})}
        action = ("activation checkpointing: recompute full (every decoder layer)" if every == 1 else
                  f"activation checkpointing of every {_ordinal(every)} decoder layer ({n} of {layers}; "
                  f"activation_checkpointing_enable(every_n_layers={every}), transformers >= 5.24)")
        current = p
        if rung(2, action, p, {"activation_checkpointing": True, "activation_checkpointing_kwargs": kwargs}):
            return current
        if n != counts[-1]:
            steps.pop()  # report only the rung that fits or every layer
    return current


def _shard_rungs(model, cluster, current, base_s, headroom, profile, steps, replay=None) -> ParallelPlan:
    """The ladder's step 3, appended to ``steps``: the model states sharded over data parallel with nothing
    offloaded — each higher ZeRO stage DeepSpeed allows for the layout (ZeRO-2 and 3 not with DeepSpeed's pipeline
    engine; ZeRO-3 with pipeline parallel folded into data parallel when the global batch allows it, as the offload
    rung does; not past ZeRO-2 for an MoE model at TP 1, whose DeepSpeed-MoE rung comes first), or Megatron's
    distributed optimizer. Only the rung that fits, or the last one tried, is kept. Returns the plan the next rungs
    start from (the last one tried)."""
    candidates = []
    if current.engine is Engine.MEGATRON:
        if not current.distributed_optimizer and current.data_parallel > 1:
            candidates.append((current.replace(distributed_optimizer=True),
                               f"distributed optimizer (optimizer states sharded over data parallel "
                               f"{current.data_parallel})", {"--use-distributed-optimizer": True}))
    else:
        # an MoE model under DeepSpeed at TP 1 raises DeepSpeed-MoE's ep_size (step 4, ZeRO-1/2 only) before ZeRO-3
        top = 2 if model.is_moe and current.tensor_parallel == 1 else 3
        for stage in range(int(current.zero_stage) + 1, top + 1):
            fold = stage == 3 and current.pipeline_parallel > 1
            try:
                p = current.replace(zero_stage=stage, **(dict(NO_PIPELINE, recompute_layers=None) if fold else {}))
                validate(model, cluster, p)
            except ValueError:
                continue
            what = {1: "optimizer states", 2: "optimizer states and gradients",
                    3: "optimizer states, gradients and parameters"}[stage]
            fold_note = f", pipeline {current.pipeline_parallel} → 1" if fold else ""
            where = (f"sharded over data parallel {p.data_parallel}" if p.data_parallel > 1 else
                     "on one data-parallel rank, nothing to shard (DeepSpeed's ZeRO stages keep different buffers)")
            candidates.append((p, f"ZeRO-{int(current.zero_stage)} → ZeRO-{stage}: {what} {where}, nothing "
                                  f"offloaded{fold_note}",
                               {"zero_optimization": {"stage": stage}}))
    for i, (p, action, settings) in enumerate(candidates):
        r = _price(model, cluster, p, base_s, headroom, profile=profile, replay=replay)
        steps.append(LadderStep(step=3, action=action, settings=settings, **r))
        current = p
        if r["fits"]:
            break
        if i < len(candidates) - 1:
            steps.pop()  # report only the rung that fits or the last tried
    return current


PLANNER_GAP = 0.10
"""The planner's fastest fitting plan is named beside the OOM ladder when it is at least this much faster than the
plan the ladder ends on (the ladder keeps the user's layout; the planner may change it)."""


def planner_alternative(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, ladder, *,
                        headroom: float = 0.0, profile=None) -> Optional[Finding]:
    """For a plan that does not fit (``ladder`` non-empty): the planner's fastest plan for the same model, GPUs,
    global batch, precision, stack and LoRA, judged as the ladder judges fit (at the error band's upper side, with
    the expandable-segments allocator the ladder starts with), when it is :data:`PLANNER_GAP` faster than the
    ladder's answer or the ladder finds none; ``None`` otherwise."""
    from workbench.planner import describe_plan, search

    if not ladder:
        return None
    end = ladder[-1] if ladder[-1].fits else None
    try:
        best = search(model, cluster, global_batch_size=plan.global_batch_size, top=1, headroom=headroom,
                      precision=plan.precision, lora_rank=plan.lora_rank, lora_targets=plan.lora_targets,
                      adam=plan.adam, overlap_comm=plan.overlap_comm, expandable_segments=True, profile=profile,
                      **({"fp8_recipe": plan.fp8_recipe} if plan.precision.is_fp8 else {}),
                      fit_on="band").best
    except ValueError:  # nothing fits at the band's upper side either
        return None
    if end is not None and best.step_seconds > (1 - PLANNER_GAP) * end.step_seconds:
        return None
    what = (f"the OOM ladder keeps this layout and ends at {end.step_seconds:.3f} s/step "
            f"({describe_plan(end.plan)}); the planner's fastest plan that fits takes "
            f"{1 - best.step_seconds / end.step_seconds:.0%} less time per step" if end is not None else
            "the OOM ladder keeps this layout and finds no plan that fits; the planner's fastest plan that fits")
    return Finding(id="planner_alternative", status="warn",
                   message=f"{what}: {describe_plan(best.plan)}, {best.step_seconds:.3f} s/step, "
                           f"{_gb(best.peak_bytes)} per GPU",
                   suggestion=f"`workbench plan --gbs {plan.global_batch_size} --fit-on band` with this model and "
                              f"cluster lists it and its runners-up (the Planner tab: 'fit at the error band's upper "
                              f"side')")


NVME_OPTION_UNBOUNDED_GIB = 1e9
"""NVMe per node the :func:`nvme_option` pricing assumes, so that what the drive must hold is measured rather than
judged: the finding then names what the node needs (``--nvme-gib``) against what the cluster declares."""


def nvme_option(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, headroom: float = 0.0, record=None,
                profile=None) -> Optional[Finding]:
    """For a DeepSpeed plan without pipeline parallelism that fits the GPU but not the node's host memory: the same
    plan at ZeRO-3 with what it offloads swapped to NVMe instead (ZeRO-Infinity) — the optimizer, with the parameters
    where the plan keeps them or on NVMe too; and where the plan offloads its parameters to the host, those alone,
    the optimizer staying in host memory (it swaps the 16-bit parameters at every fetch, not the optimizer's 32
    bytes a parameter a step) — priced on this cluster (its NVMe rates) with as much NVMe as each needs; the fastest
    that fits, with its host memory, the NVMe per node (``--nvme-gib``), the step and the swaps' share of it. ``None``
    when the plan fits host memory, does not fit the GPU, already swaps to NVMe, or no such plan fits."""
    if (plan.engine is Engine.MEGATRON or plan.pipeline_parallel > 1 or plan.nvme_optimizer or plan.nvme_params
            or plan.lora_rank):
        return None
    mem = (record or _evaluated(model, cluster, plan, profile)).memory
    cap = (1 - headroom) * mem.capacity_bytes
    if mem.fits_host or mem.per_gpu_peak_bytes + mem.band_high_bytes > cap:
        return None
    roomy = cluster.replace(nvme_gib_per_node=max(cluster.nvme_gib_per_node, NVME_OPTION_UNBOUNDED_GIB))
    options = [(Offload.NVME, plan.offload_params), (Offload.NVME, Offload.NVME)]
    if plan.offload_params is Offload.CPU and plan.offload_optimizer is Offload.CPU:
        options.append((Offload.CPU, Offload.NVME))
    fits = []
    for optimizer, params in options:
        try:
            p = plan.replace(zero_stage=3, offload_optimizer=optimizer, offload_params=params,
                             overlap_comm=None if plan.zero_stage != 3 else plan.overlap_comm)
            validate(model, roomy, p)
        except ValueError:
            continue
        est = _evaluated(model, roomy, p, profile)
        if est.memory.per_gpu_peak_bytes + est.memory.band_high_bytes <= cap and est.memory.fits_host:
            fits.append((est.time.step_seconds, p, est))
    if not fits:
        return None
    _, p, est = min(fits, key=lambda f: f[0])
    m, t = est.memory, est.time
    swaps, _ = _nvme_swap_split(t)
    need_gib = -(-m.nvme_bytes_per_node // GiB)
    declared = (f"the cluster declares {cluster.nvme_gib_per_node:g} GiB" if cluster.nvme_gib_per_node else
                "the cluster declares none")
    if not p.nvme_optimizer:
        what = "the parameters swapped to NVMe (ZeRO-3, ZeRO-Infinity, the optimizer kept in host memory)"
    else:
        what = f"the optimizer swapped to NVMe (ZeRO-3, ZeRO-Infinity{', the parameters too' * p.nvme_params})"
    message = (f"host memory is what this plan runs out of ({_gb(mem.host_bytes_per_node)} per node of "
               f"{_gb(mem.host_capacity_bytes_per_node)}); with {what} it holds {_gb(m.host_bytes_per_node)} of host "
               f"memory and {_gb(m.nvme_bytes_per_node)} of NVMe per node ({declared}), {_gb(m.per_gpu_peak_bytes)} "
               f"per GPU, {t.step_seconds:.3f} s/step: {swaps:.3f} s of it the swaps at "
               f"{cluster.nvme_read_gb_per_s:g} GB/s read, {cluster.nvme_write_gb_per_s:g} GB/s write per node")
    flags = (["--zero 3", f"--offload-optimizer {p.offload_optimizer}"]
             + ([f"--offload-params {p.offload_params}"] if p.offload_params is not plan.offload_params else []))
    suggestion = (" ".join(flags) + f" --nvme-gib {need_gib} (the node's local NVMe; --nvme-path DIR, the "
                  "ds_config's nvme_path, names its mount)")
    if cluster.nvme_rates_assumed:
        message += " (the default rates, an assumed single PCIe 4.0 drive)"
        suggestion += "; `workbench calibrate --nvme-dir DIR` measures the drive's rates"
    return Finding(id="nvme_option", status="warn", message=message, suggestion=suggestion)


LORA_LADDER_RANK = 16
"""Rank of the LoRA alternative the advisor prices (a common choice; Hu et al. 2021 find small ranks enough)."""


def lora_option(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, headroom: float = 0.0, record=None,
                profile=None):
    """For a full fine-tune that does not fit: the fastest LoRA r=16 plan that fits — ZeRO-2 or ZeRO-3 without
    offload, with the plan's micro batch and recompute or with micro batch 1 and full recompute — as a finding;
    ``None`` when the plan fits, is already LoRA, or pipelines with Megatron. When ``record`` was estimated with the
    allocator replayed (:attr:`workbench.estimate.EvaluatedPlan.replay_for`), the plans are replayed fastest first
    (as the OOM ladder's rungs, :func:`_price`) until one fits; the slower ones are not priced then."""
    if plan.lora_rank or (plan.engine is not Engine.DEEPSPEED and plan.pipeline_parallel > 1):
        return None
    base = _price(model, cluster, plan, 1.0, headroom, record, profile)
    if base["fits"]:
        return None
    engine = Engine.DEEPSPEED if plan.tensor_parallel == 1 else Engine.MEGATRON_DEEPSPEED
    tried = []
    for stage in (2, 3):
        for mbs, recompute in ((plan.micro_batch_size, plan.recompute), (1, Recompute.FULL)):
            try:
                p = plan.replace(engine=engine, zero_stage=stage, distributed_optimizer=False,
                                 offload_optimizer=Offload.NONE, offload_params=Offload.NONE, micro_batch_size=mbs,
                                 recompute=recompute, recompute_layers=None, lora_rank=LORA_LADDER_RANK)
                validate(model, cluster, p)
            except ValueError:
                continue
            tried.append(_price(model, cluster, p, base["step_seconds"], headroom, profile=profile))
    if not tried:
        return None
    replay = getattr(record, "replay_for", None)
    if replay is not None:  # fastest first, each replayed unless its allocated peak rules it out, to the first fit
        ordered, tried = sorted(tried, key=lambda r: r["step_seconds"]), []
        for r in ordered:
            tried.append(_price(model, cluster, r["plan"], base["step_seconds"], headroom, profile=profile,
                                replay=replay))
            if tried[-1]["fits"]:
                break
    fitting = [r for r in tried if r["fits"]]
    if not fitting:
        low = min(tried, key=lambda r: r["peak_bytes"])
        return Finding(id="lora_option", status="warn",
                       message=f"LoRA r={LORA_LADDER_RANK} does not fit either: at least {_gb(low['peak_bytes'])} per "
                               f"GPU ({_plan_text(low['plan'])})", suggestion="the OOM ladder's offload steps, or more GPUs")
    best = min(fitting, key=lambda r: r["step_seconds"])
    bp = best["plan"]
    return Finding(id="lora_option", status="warn",
                   message=f"the full fine-tune does not fit on {cluster.world_size} x {cluster.gpu.name} "
                           f"({_gb(base['peak_bytes'])} per GPU); LoRA r={LORA_LADDER_RANK} does, with "
                           f"ZeRO-{int(bp.zero_stage)}: {_gb(best['peak_bytes'])} per GPU"
                           f"{' (allocator replayed)' if best['replayed'] else ''}, {best['step_seconds']:.3f} "
                           f"s/step ({_plan_text(bp)})",
                   suggestion=f"if a fine-tune is the goal: --lora-rank {LORA_LADDER_RANK} --zero {int(bp.zero_stage)} "
                              f"--mbs {bp.micro_batch_size} --recompute {bp.recompute} (peft "
                              f"LoraConfig(r={LORA_LADDER_RANK}, target_modules='all-linear'))")


# ================================================================================================================
# Host-bound ZeRO-3 (DeepSpeed's per-module hooks)
# ================================================================================================================
ZERO3_HOST_SHARE_WARN = 0.15
"""A ZeRO-3 plan whose hook host time left exposed (:func:`zero3_host_seconds`) is at least this share of the step
is reported as host-bound. Chosen on the corpus's repeated ZeRO-3 configurations (one H200, one rank; groups
``fit3``, ``repeat`` and ``z3long`` with the earlier runs of the same configurations, 2026-12-01), with the time
model as of that day, ZeRO-3 host constants refitted on 93 fit configurations (``python
benchmarks/zero3_host_share.py`` prints the table): every configuration whose step time spread more than 20 %
between fresh processes (9 of 14: 25-80 %) had a host share of 19-68 % of the predicted step (``mc-h1024-gelu`` ZeRO-3
the lowest, 19 %, spread 43 %); the two whose host term the kernels hide (share 0 %: ``mc-h3072-gqa`` and
``mc-h2560-gqa-fit``) spread 7 % and 19.5 %. 15 % sits in that gap with room for the next refit. Three
configurations with shares of 44-60 % spread only 12-16 % over their two processes each: a large share makes a wide
spread likely, not certain."""

ZERO3_REPEAT_MEASURED = dict(
    gpu="H200", date="2026-12-01", groups="repeat, z3long", configurations=14, runs=38, spread_median=0.31,
    spread_worst=0.80, spread_stable=0.07,
    worst_config="hf-qwen3-h1024 (transformers) ZeRO-3, checkpointing, micro-batch 4", worst_ms=(155, 280),
    worst_processes=4,
    stable_config="mc-h3072-gqa (megatron-core) ZeRO-3, micro-batch 1", stable_ms=(120, 129),
    within_low=0.05, within_high=0.20, zero2_within_median=0.013, megatron_within_median=0.003)
"""Step-time repeatability of ZeRO-3 on one H200 (``benchmarks/corpus/h200_runs.jsonl``, groups ``repeat`` and
``z3long``, 2026-12-01; ``benchmarks/bench_accuracy.py``'s REPEATABILITY table): 14 configurations measured in 2-4
fresh processes (38 runs) spread slowest/fastest − 1 by a median 31 %, the worst 80 % (``hf-qwen3-h1024`` ZeRO-3
checkpointed, 155-280 ms over four processes), the most stable 7 % (``mc-h3072-gqa`` ZeRO-3, 120-129 ms); the timed
steps of one process spread 5-20 %; pinning the process to cores 0-7 (``taskset``) did not narrow it. The timed steps
of one ZeRO-2 process spread by a median 1.3 %, of one Megatron process 0.3 %."""

ZERO3_HOST_INPUTS = ("zero3_fetch_latency_s", "zero3_reduce_latency_s", "zero3_collective_call_s")
"""The time model's host seconds per ZeRO-3 hook (:func:`workbench.timing.zero3_hook_seconds`)."""


def zero3_host_seconds(time) -> tuple:
    """``(exposed_seconds, host_seconds)`` of ZeRO-3's per-module hooks in the priced step: ``host_seconds`` the
    hooks' host time (:func:`workbench.timing.zero3_hook_seconds`; the step priced with none of it hidden, less the
    step with the hook constants at 0), ``exposed_seconds`` what of it the GPU's kernels do not hide (the step less the
    step with the hook constants at 0). Two more calls of :func:`workbench.timing.step_time_terms` on the plan's
    inputs; ``(0, 0)`` without them."""
    if not time.inputs:
        return 0.0, 0.0
    base = float(T.step_time_terms(**{**time.inputs, **{k: 0.0 for k in ZERO3_HOST_INPUTS}})["step_seconds"])
    unhidden = float(T.step_time_terms(**{**time.inputs, "zero3_hook_overlap": 0.0})["step_seconds"])
    return max(0.0, time.step_seconds - base), max(0.0, unhidden - base)


ZERO3_ATTENTION_MODULES = frozenset({"QKV", "q projection", "k projection", "v projection", "output projection"})
"""The attention modules among :func:`zero3_module_weights`' names."""


def zero3_module_weights(model: ModelSpec, tensor_parallel: int = 1) -> tuple:
    """``(name, parts)`` for each module of one dense layer that the time model counts as fetched
    (:func:`workbench.timing.zero3_modules_per_layer`), ``parts`` the elements of each weight tensor it holds per
    tensor-parallel rank — DeepSpeed decides persistence per tensor. megatron-core: QKV, output projection, fc1
    (gated: gate and up fused), fc2; a ``transformers`` model of the RMSNorm (Llama) families: q, k, v, output, gate,
    up and down projections, each its own module; GPT-2 and GPT-NeoX fuse QKV as megatron-core does, and Phi-3
    (``fused_projections``: ``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``) fuses gate and up too, as
    megatron-core's fc1. The attention modules come first (:data:`ZERO3_ATTENTION_MODULES` names them)."""
    h, t, ffn = model.hidden_size, tensor_parallel, model.ffn_hidden_size
    q, kv = model.query_projection_size, model.kv_projection_size
    if (model.implementation is Implementation.TRANSFORMERS and model.normalization is not Normalization.LAYERNORM
            and not model.fused_projections):
        mlp = (("gate projection", (h * ffn // t,)),) if model.is_gated else ()
        return (("q projection", (h * q // t,)), ("k projection", (h * kv // t,)), ("v projection", (h * kv // t,)),
                ("output projection", (q * h // t,)), *mlp, ("up projection", (h * ffn // t,)),
                ("down projection", (ffn * h // t,)))
    fc1 = (2 if model.is_gated else 1) * ffn
    return (("QKV", (h * (q + 2 * kv) // t,)), ("output projection", (q * h // t,)), ("fc1", (h * fc1 // t,)),
            ("fc2", (ffn * h // t,)))


def zero3_persistent_bytes(elements_per_layer: float, layers: int, plan: ParallelPlan) -> float:
    """GPU bytes that keeping ``elements_per_layer`` parameters of every layer gathered adds
    (``stage3_param_persistence_threshold``; DeepSpeed 0.19.8 ``partitioned_param_coordinator.py``: a ``ds_persist``
    parameter is all-gathered once and never released, and its partition stays for the optimizer): the whole 16-bit
    parameter on every rank (none on one rank, whose gathered parameter is a view of its own partition:
    :func:`workbench.timing.zero3_fetch_bytes_per_parameter`); with parameter offload its partition moves onto the
    GPU too (``partition_parameters.py`` allocates a persistent partition on the local device)."""
    full = float(elements_per_layer) * layers * plan.precision.bytes_per_value
    gathered = full if plan.data_parallel > 1 else 0.0
    return gathered + (full / plan.data_parallel if plan.offload_params is not Offload.NONE else 0.0)


def _fits_with_headroom(memory, headroom: float, extra_bytes: float = 0.0) -> bool:
    """Whether a plan's peak (plus ``extra_bytes``) stays within (1 − headroom) of the GPU and its host memory fits."""
    return bool(memory.per_gpu_peak_bytes + extra_bytes <= (1 - headroom) * memory.capacity_bytes
                and memory.fits_host)


def _larger_micro_batch(model, cluster, plan, headroom, profile=None):
    """The plan with a larger micro batch at the same global batch (micro batch × k for every k dividing the
    accumulation) that is fastest among those that fit, else the smallest valid one; ``(plan, record)`` or None."""
    m, b = plan.num_microbatches, plan.micro_batch_size
    larger = []
    for k in range(2, m + 1):
        if m % k:
            continue
        try:
            p = plan.replace(micro_batch_size=b * k)
            validate(model, cluster, p)
        except ValueError:
            continue
        larger.append((p, _evaluated(model, cluster, p, profile)))
    if not larger:
        return None
    fitting = [x for x in larger if _fits_with_headroom(x[1].memory, headroom)]
    return min(fitting, key=lambda x: x[1].time.step_seconds) if fitting else larger[0]


def zero3_host_bound(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record, *,
                     options: Optional[DeepSpeedOptions] = None, headroom: float = 0.0,
                     profile=None) -> Optional[Finding]:
    """DeepSpeed ZeRO-3 whose per-module hooks (fetch and release of every submodule's parameters in Python, each
    forward, backward and recomputed forward; the gradients' reduce-and-partition) leave at least
    :data:`ZERO3_HOST_SHARE_WARN` of the step exposed: the step is host-bound, and measured such steps do not repeat
    (:data:`ZERO3_REPEAT_MEASURED`). Options, each priced by re-estimating the plan (``record``: its
    :class:`workbench.estimate.EvaluatedPlan`):

    - ZeRO-2 (no parameter partitioning, no hooks; optimizer offload kept), with its peak and whether it fits;
    - a larger micro batch at the same global batch (fewer module fetches per token): the fastest multiple whose
      accumulation still divides, that fits;
    - ``stage3_param_persistence_threshold`` raised to the attention projections' size (dense models): those
      parameters stay gathered — the step re-priced with fewer fetched modules per layer, and the memory they add
      (:func:`zero3_persistent_bytes`, which the memory model does not hold) added to the peak;
    - ``stage3_prefetch_bucket_size``: DeepSpeed 0.19.8 (``partitioned_param_coordinator.fetch_sub_module``), once
      the first step has traced the module order, all-gathers up to that many upcoming elements in one coalesced
      call; it hides the gathers' transfer, but every module still runs its fetch and release hooks, so it does not
      shorten a host-bound step (not modelled).

    ``None`` for other plans, and for ZeRO-3 plans whose hooks the kernels hide."""
    if plan.engine is Engine.MEGATRON or plan.zero_stage != ZeroStage.PARAMETERS:
        return None
    t = record.time
    exposed, host = zero3_host_seconds(t)
    step = t.step_seconds
    share = exposed / step if step > 0 else 0.0
    if share < ZERO3_HOST_SHARE_WARN:
        return None
    o = options or _default_options()
    inputs = t.inputs
    m = plan.num_microbatches
    modules = int(inputs["zero3_modules_per_layer"])
    passes = 2 + (plan.recompute is Recompute.FULL)
    fetches = m * passes * (model.num_layers * modules + 1)
    band = M.error_band(plan.engine, "step", plan.recompute, zero_stage=3, gpu_name=cluster.gpu.name)
    ms = lambda s: f"{s * 1e3:.0f} ms" if s < 10 else f"{s:.1f} s"  # noqa: E731
    r = ZERO3_REPEAT_MEASURED
    message = (f"ZeRO-3 is host-bound here: DeepSpeed's per-module hooks (about {fetches:,} module fetches per step: "
               f"{m} micro-batch{'es' if m > 1 else ''} × {passes} passes × {model.num_layers * modules + 1} "
               f"modules) take "
               f"{ms(host)} of host time per step; {ms(exposed)} of it ({share:.0%} of the {ms(step)} step) is "
               f"beyond what the GPU's kernels hide (host-bound from {ZERO3_HOST_SHARE_WARN:.0%}). Measured "
               f"({r['gpu']}, corpus groups {r['groups']}, {r['date']}): such steps do not repeat — "
               f"{r['configurations']} ZeRO-3 configurations run in fresh processes spread by a median "
               f"{r['spread_median']:.0%}, up to {r['spread_worst']:.0%} "
               f"({r['worst_config']}: {r['worst_ms'][0]}-{r['worst_ms'][1]} ms over {r['worst_processes']} "
               f"processes), the steps of one process {r['within_low']:.0%}-{r['within_high']:.0%}, and pinning to "
               f"CPU cores did not narrow it; where the kernels hide the hooks it was "
               f"{r['spread_stable']:.0%} ({r['stable_config']}: {r['stable_ms'][0]}-"
               f"{r['stable_ms'][1]} ms), and ZeRO-2 / Megatron steps repeat within "
               f"~{max(r['zero2_within_median'], r['megatron_within_median']):.0%}")
    if band:
        message += f"; the ZeRO-3 step-time band on held-out runs is −{abs(band[0]):.1%} / +{abs(band[1]):.1%}"
    alternatives, options_text = [], []

    def priced(kind, p, extra_bytes=0.0, step_seconds=None, note="", rec=None):
        rec = rec or _evaluated(model, cluster, p, profile)
        peak = rec.memory.per_gpu_peak_bytes + extra_bytes
        fits = _fits_with_headroom(rec.memory, headroom, extra_bytes)
        s = rec.time.step_seconds if step_seconds is None else step_seconds
        alt = dict(option=kind, plan=_plan_text(p), step_seconds=s, peak_bytes=int(peak), fits=bool(fits),
                   speedup=step / s - 1 if s > 0 else 0.0)
        alternatives.append(alt)
        return (f"{ms(s)}/step ({s / step - 1:+.0%}), peak {_gb(peak)} "
                f"({'fits' if fits else 'does NOT fit'}{note})")

    # ZeRO-2: gradients and optimizer states partitioned, parameters whole on every rank: no per-module hooks
    try:
        z2 = plan.replace(zero_stage=2, offload_params=Offload.NONE)
        validate(model, cluster, z2)
        options_text.append(f"ZeRO-2 (zero_optimization.stage 2): {priced('zero2', z2)}")
    except ValueError as exc:
        options_text.append(f"ZeRO-2 is not a valid plan here ({exc})")
    # a larger micro batch: the same fetches per micro-batch carry more tokens
    b = plan.micro_batch_size
    larger = _larger_micro_batch(model, cluster, plan, headroom, profile)
    if larger:
        p, rec = larger
        fewer = p.num_microbatches * passes * (model.num_layers * modules + 1)
        options_text.append(f"micro batch {b} → {p.micro_batch_size} (accumulation {m} → {p.num_microbatches}, "
                            f"global batch {plan.global_batch_size} kept, {fewer:,} module fetches per step): "
                            f"{priced('micro_batch', p, rec=rec)}")
    else:
        options_text.append(f"a larger micro batch needs accumulation > 1 at the same global batch (now {m})"
                            if m == 1 else f"no larger micro batch divides the accumulation of {m}")
    # stage3_param_persistence_threshold: keep the attention projections gathered
    if model.is_moe:
        options_text.append("stage3_param_persistence_threshold keeps small parameters gathered (fewer fetches, "
                            "more memory): not modelled for MoE layers")
    else:
        weights = zero3_module_weights(model, plan.tensor_parallel)
        threshold = max(p for n, parts in weights if n in ZERO3_ATTENTION_MODULES for p in parts)  # their largest
        kept = [(n, sum(parts)) for n, parts in weights if max(parts) <= threshold]
        left = modules - len(kept)
        elements = sum(e for _, e in kept)
        extra = zero3_persistent_bytes(elements, model.num_layers, plan)
        s = float(T.step_time_terms(**{**inputs, "zero3_modules_per_layer": left})["step_seconds"])
        now = (f", though the configured {o.stage3_param_persistence_threshold:,} already covers them, which the "
               f"estimate does not price" if o.stage3_param_persistence_threshold >= threshold else "")
        if model.implementation is Implementation.TRANSFORMERS:
            fused = model.hidden_size * (model.query_projection_size + 2 * model.kv_projection_size)
            now += f" (a model that fuses QKV, as GPT-2 and GPT-NeoX do, needs {fused // plan.tensor_parallel:,})"
        memory_words = (f"+{_gb(extra)} of 16-bit parameters per GPU, which the memory model does not hold and is "
                        f"added here" if extra else "no more memory on one rank, whose gathered parameter is a view "
                                                    "of its own partition")
        options_text.append(
            f"stage3_param_persistence_threshold {o.stage3_param_persistence_threshold:,} → {threshold:,} elements "
            f"keeps {', '.join(n for n, _ in kept)} gathered on every GPU ({left} of {modules} modules per layer "
            f"left to fetch, {memory_words}): "
            + priced("persistence_threshold", plan, extra_bytes=extra, step_seconds=s,
                     note=", the optimistic end: the kept modules' hooks still run, without gather or release",
                     rec=record)
            + now)
        alternatives[-1].update(threshold_elements=int(threshold), persistent_bytes=int(extra),
                                modules_per_layer=left)
    options_text.append(f"stage3_prefetch_bucket_size (now {o.stage3_prefetch_bucket_size:,} elements) sets how much "
                        f"is all-gathered ahead in one coalesced call: it hides transfers, not the per-module hooks, "
                        f"so it does not shorten a host-bound step (not modelled)")
    numbers = dict(host_seconds=host, exposed_seconds=exposed, share=share, threshold=ZERO3_HOST_SHARE_WARN,
                   step_seconds=step, module_fetches=fetches, alternatives=alternatives, measured=dict(r))
    return Finding(id="zero3_host_bound", status="warn", message=message,
                   suggestion="; ".join(f"({i}) {x}" for i, x in enumerate(options_text, 1)), numbers=numbers)


# ================================================================================================================
# Low throughput (guide §5.1)
# ================================================================================================================
def _try(model, cluster, plan, profile=None, **changes):
    try:
        p = plan.replace(**changes)
        validate(model, cluster, p)
    except ValueError:
        return None, None
    r = _evaluated(model, cluster, p, profile)
    return p, (r.time, r.memory)


def _fewer_checkpointed_layers(model, cluster, plan, profile=None):
    """For a transformers plan with checkpointing that cannot be turned off (it would not fit): the fewest
    checkpointed decoder layers that still fit, as every_n_layers reaches them (:func:`workbench.specs.
    hf_checkpoint_every`) — ``((plan, (time, memory)), settings)``, or ``None`` when no fewer count fits."""
    layers = model.num_layers
    now = plan.recompute_layers or layers
    for n in (n for n in hf_checkpoint_counts(layers) if n < now):
        p, priced = _try(model, cluster, plan, profile, recompute_layers=n)
        if priced is not None and priced[1].fits:
            every = hf_checkpoint_every(layers, n, name=model.name)
            return (p, priced), [f"checkpoint every {_ordinal(every)} decoder layer only ({n} of {layers}): "
                                 f"TrainingArguments activation_checkpointing_kwargs={{'every_n_layers': {every}}} "
                                 f"(transformers >= 5.24)"]
    return None


def throughput_suggestions(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, time,
                           options: Optional[DeepSpeedOptions] = None, *, min_fraction: float = 0.01,
                           profile=None) -> tuple:
    """What to try, ranked by the exposed seconds the time model attributes to each non-compute term; where the
    remedy is another plan, that plan is priced too."""
    o = options or _default_options()
    step = time.step_seconds
    n = cluster.gpus_per_node
    out = []
    for term in ("tp_comm", "dp_comm", "zero3_hooks", "bubble", "offload", "recompute", "pp_comm", "cp_comm",
                 "optimizer"):
        secs = time.breakdown[term]
        if secs < min_fraction * step:
            continue
        msg, settings, alt = "", [], None
        if term == "tp_comm":
            if group_crosses_nodes(1, plan.tensor_parallel, n):
                msg = f"TP={plan.tensor_parallel} crosses nodes: keep TP ≤ {n}, use pipeline parallel across nodes"
                settings = [f"--tensor-model-parallel-size {n}"]
            elif not plan.sequence_parallel:
                msg = "tensor-parallel all-reduces are exposed; sequence parallel splits norms/dropout over TP"
                settings = ["--sequence-parallel"]
                alt = _try(model, cluster, plan, profile, sequence_parallel=True)
            else:
                msg = f"TP={plan.tensor_parallel} all-reduces every layer; a smaller TP with more PP/DP may be faster"
                settings = ["--tp-comm-overlap (Transformer Engine)"]
        elif term == "dp_comm":
            msg = (f"data-parallel traffic is exposed (ZeRO-{int(plan.zero_stage)}, DP={plan.data_parallel}); "
                   "check NCCL bandwidth, bucket sizes and overlap")
            settings = ["NCCL_DEBUG=INFO", f"reduce_bucket_size / allgather_bucket_size (now "
                        f"{plan.reduce_bucket_size or o.reduce_bucket_size:.2g} / {o.allgather_bucket_size:.2g})",
                        "overlap_comm: true"]
            if plan.zero_stage >= ZeroStage.GRADIENTS and plan.engine is not Engine.MEGATRON:
                alt = _try(model, cluster, plan, profile, zero_stage=1, offload_params=Offload.NONE)
                settings.append("zero_optimization.stage 1 (one reduce-scatter per step instead of per micro-batch"
                                + (", no parameter gathers" if plan.zero_stage >= ZeroStage.PARAMETERS else "") + ")")
        elif term == "zero3_hooks":
            # host time and HBM copies on each rank: nothing here crosses a link, so NCCL settings do not touch it
            msg = ("ZeRO-3's per-module parameter fetch / release hooks are exposed: host (Python) time beyond the "
                   "kernels, and their HBM copies; no data-parallel traffic (see zero3_host_bound)")
            alt = _try(model, cluster, plan, profile, zero_stage=2, offload_params=Offload.NONE)
            settings = ["zero_optimization.stage 2 (parameters whole on every rank: no per-module hooks)",
                        "a larger micro batch at the same global batch (fewer module fetches per token)",
                        "stage3_param_persistence_threshold (small parameters stay gathered: fewer fetches)"]
        elif term == "bubble":
            msg = (f"pipeline bubble (p−1)/(v·m) = ({plan.pipeline_parallel}−1)/({plan.virtual_pipeline}·"
                   f"{plan.num_microbatches}): more micro-batches or interleaving shrink it")
            if plan.uneven_stages:  # the stages' own idle time (schedule.bubble_seconds), not the textbook fraction
                msg = (f"pipeline bubble of stages with {'/'.join(map(str, plan.stage_layers(model.num_layers)))} "
                       f"layers at m={plan.num_microbatches}, v={plan.virtual_pipeline} (the textbook (p−1)/(v·m) is "
                       f"for equal stages): more micro-batches, interleaving or a more even split shrink it")
            doubled = plan.virtual_pipeline * 2
            if plan.engine is Engine.MEGATRON and plan.uneven_stages \
                    and all(n % doubled == 0 for n in plan.stage_layers(model.num_layers)) \
                    and plan.num_microbatches % plan.pipeline_parallel == 0:
                alt = _try(model, cluster, plan, profile, virtual_pipeline=doubled)
                settings.append(f"--num-virtual-stages-per-pipeline-rank {doubled}")
            elif plan.engine is Engine.MEGATRON and not plan.uneven_stages \
                    and (model.num_layers // plan.pipeline_parallel) % 2 == 0 \
                    and plan.num_microbatches % plan.pipeline_parallel == 0:
                alt = _try(model, cluster, plan, profile, virtual_pipeline=plan.virtual_pipeline * 2)
                settings.append(f"--num-layers-per-virtual-pipeline-stage "
                                f"{model.num_layers // (plan.pipeline_parallel * plan.virtual_pipeline * 2)}")
            elif plan.micro_batch_size > 1:
                alt = _try(model, cluster, plan, profile, micro_batch_size=plan.micro_batch_size // 2
                           if plan.micro_batch_size % 2 == 0 else 1)
                settings.append("smaller micro batch, more accumulation (same global batch)")
        elif term == "offload":
            msg = "ZeRO-Offload moves optimizer/parameter traffic over PCIe and runs Adam on the CPU"
            alt = _try(model, cluster, plan, profile, offload_optimizer=Offload.NONE, offload_params=Offload.NONE)
            settings = ["offload_optimizer.device none (if it fits)"]
        elif term == "recompute":
            msg = f"recompute={plan.recompute} repeats forward work"
            if plan.recompute is Recompute.FULL and model.implementation is not Implementation.TRANSFORMERS:
                alt = _try(model, cluster, plan, profile, recompute=Recompute.SELECTIVE, recompute_layers=None)
                settings = ["--recompute-granularity selective instead of full"]
                if alt[1] is not None and not alt[1][1].fits and plan.recompute_layers is None:
                    block = _block_recompute_rung(model, cluster, plan, time.step_seconds, 0.0, profile)
                    if block is not None:  # fewer layers recomputed with Megatron's block method
                        alt = _try(model, cluster, plan, profile, recompute_layers=block.plan.recompute_layers)
                        settings = [" ".join(f"{k} {v}" for k, v in block.settings.items())
                                    + f" (the first {block.plan.recompute_layers} layers of each stage)"]
            elif plan.recompute is Recompute.FULL:  # transformers: whole layers, every k-th of them or all
                alt = _try(model, cluster, plan, profile, recompute=Recompute.NONE, recompute_layers=None)
                settings = ["gradient checkpointing off (TrainingArguments activation_checkpointing=False), "
                            "if it fits"]
                if alt[1] is not None and not alt[1][1].fits:
                    fewer = _fewer_checkpointed_layers(model, cluster, plan, profile)
                    if fewer is not None:
                        alt, settings = fewer
            else:
                alt = _try(model, cluster, plan, profile, recompute=Recompute.NONE)
                settings = ["no recompute (if it fits)"]
        elif term == "pp_comm":
            msg = "pipeline sends are exposed; fewer stages or keeping a pipeline group inside fewer nodes helps"
        elif term == "cp_comm":
            kind, c = str(plan.cp_comm_type), plan.context_parallel
            if kind == "all_gather":
                msg = (f"the context-parallel K/V all-gather (CP={c}) is not overlapped with attention; the ring "
                       f"(p2p) hides each K/V send behind the attention of the chunk before it")
                settings = ["--cp-comm-type p2p"]
                alt = _try(model, cluster, plan, profile, cp_comm_type="p2p")
            elif kind == "a2a":
                msg = (f"the context-parallel all-to-alls of Q, K, V and O (CP={c}) are not overlapped; the ring "
                       f"(p2p) can hide behind attention at long sequence")
                settings = ["--cp-comm-type p2p"]
                alt = _try(model, cluster, plan, profile, cp_comm_type="p2p")
            else:
                crosses = group_crosses_nodes(plan.tensor_parallel, c, n)
                msg = (f"the context-parallel K/V ring (CP={c}, {model.seq_length // c:,} tokens per rank) is not "
                       f"hidden behind attention: each send outlasts the attention of its chunk"
                       + (" — the ring crosses nodes" if crosses else ""))
                if (c > 1 and (model.num_attention_heads // plan.tensor_parallel) % c == 0
                        and (model.num_query_groups // plan.tensor_parallel) % c == 0):
                    settings = ["--cp-comm-type a2a"]
                    alt = _try(model, cluster, plan, profile, cp_comm_type="a2a")
                else:
                    settings = ["a smaller --context-parallel-size (longer chunks per rank)"]
        elif term == "optimizer":
            msg = "the optimizer step is memory bound; shard it (ZeRO-1 / distributed optimizer)"
        predicted = None
        if alt is not None and alt[0] is not None:
            p2, (t2, m2) = alt
            predicted = t2.step_seconds
            fits = "fits" if m2.fits else "does NOT fit"
            msg += (f"; predicted {t2.step_seconds:.3f} s/step ({t2.step_seconds / step - 1:+.1%}), peak "
                    f"{_gb(m2.per_gpu_peak_bytes)} ({fits})")
        out.append(Suggestion(term=term, exposed_seconds=secs, fraction_of_step=secs / step, message=msg,
                              settings=tuple(settings), predicted_step_seconds=predicted))
    found = fp8_gain(model, cluster, plan, time) if plan.precision is Precision.BF16 else None
    if found is not None and 1 - found[1] / found[0] >= FP8_MIN_SPEEDUP:
        bf16_step, fp8_step, share = found
        out.append(Suggestion(term="compute", exposed_seconds=bf16_step - fp8_step,
                              fraction_of_step=1 - fp8_step / bf16_step,
                              message=f"FP8 (Transformer Engine) runs the linear GEMMs, {share:.0%} of this step, at "
                                      f"up to twice the bf16 rate on {cluster.gpu.name}: predicted {fp8_step:.3f} "
                                      f"s/step ({fp8_step / step - 1:+.1%}); compare the loss with a bf16 run",
                              settings=("--fp8-format hybrid", "--fp8-recipe delayed",
                                        "--transformer-impl transformer_engine"),
                              predicted_step_seconds=fp8_step))
    out.sort(key=lambda s: -s.exposed_seconds)
    return tuple(out)


def diagnostic_commands(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> tuple:
    """Shell lines for this run: NCCL's own report, and an Nsight Systems capture of a few steps (guide §5.1)."""
    n, N = cluster.gpus_per_node, cluster.num_nodes
    # a file name: the model directory's last part for an imported model (hf:path/to/Qwen3-0.6B), no separators
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(str(model.name).rstrip("/"))).strip("_") or "model"
    out_name = f"profile_{stem}_tp{plan.tensor_parallel}_pp{plan.pipeline_parallel}_dp{plan.data_parallel}"
    if plan.engine is Engine.MEGATRON:
        launch = (f"torchrun --nproc_per_node {n} --nnodes {N} pretrain_gpt.py "
                  f"--tensor-model-parallel-size {plan.tensor_parallel} --pipeline-model-parallel-size "
                  f"{plan.pipeline_parallel} --micro-batch-size {plan.micro_batch_size} --global-batch-size "
                  f"{plan.global_batch_size} --profile --profile-step-start 10 --profile-step-end 12")
        note = "# Megatron's --profile calls cudaProfilerStart/Stop around steps 10-12"
    else:
        launch = (f"deepspeed --num_gpus {n} --num_nodes {N} --hostfile hostfile train.py "
                  f"--deepspeed_config ds_config.json")
        note = ("# train.py: call torch.cuda.profiler.start() before step 10 and stop() after step 12; set "
                "\"wall_clock_breakdown\": true for DeepSpeed's forward/backward/step timers")
    return ("export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET   # topology, transport (IB/socket) and errors",
            note,
            f"nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop "
            f"-o {shlex.quote(out_name)} {launch}")


# ================================================================================================================
# Host-bound micro-steps (gradient accumulation on thin layers)
# ================================================================================================================
MICROSTEP_HOST_SHARE_WARN = 0.10
"""A plan whose micro-steps wait on the host (:func:`workbench.timing.microstep_host`) for at least this share of
the step is reported as host-bound."""

MICROSTEP_HOST_MEASURED = dict(gpu="H200", model="GPT-2 small width (h768, 12 layers, megatron-core local spec)",
                               tokens=8192, groups="gasfit, fit3", date="2026-12-01",
                               megatron_ms=(73, 113, 187), zero2_ms=(79, 168, 297))
"""The corpus runs that show it (one H200, ``benchmarks/corpus/h200_runs.jsonl``): the same 8192 tokens per step in
1, 2 and 4 micro-batches, megatron-core DDP with the distributed optimizer and DeepSpeed ZeRO-2."""


HOST_SPEED_MEASURED = dict(gpu="H200", loop_ms=(31, 68), launch_us=(6.3, 11.4), spread=(0.14, 0.59),
                           date="2026-12-02", source="benchmarks/step_noise.py")
"""The step-noise study (``benchmarks/corpus/noise_h200.jsonl``): on the H200 machine with nothing else running, a fixed
Python loop took 31-68 ms and a tiny CUDA launch 6.3-11.4 µs from one moment to the next, and three host-bound
configurations measured in fresh processes spread by 14-59 % in step time, following the launch cost."""


def microstep_host_bound(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, record, *,
                         headroom: float = 0.0, profile=None) -> Optional[Finding]:
    """Micro-steps whose host time (each layer's Python forward and backward launches; ZeRO-2's gradient hooks in
    every accumulated micro-step) outlasts their GPU work for at least :data:`MICROSTEP_HOST_SHARE_WARN` of the
    step: small micro-batches of thin layers leave the GPU waiting. Options, each priced by re-estimating the plan
    (``record``: its :class:`workbench.estimate.EvaluatedPlan`): a larger micro batch at the same global batch (the
    fastest that fits), and at ZeRO-2 with accumulation ZeRO-1, whose hooks reduce only at the accumulation
    boundary. ``None`` when the host wait is below the share (and for plans the time model gives no host time:
    Transformer Engine layers, ZeRO-3, whose own finding is ``zero3_host_bound``)."""
    t = record.time
    if t is None or not t.inputs:
        return None
    terms = T.step_time_terms(**t.inputs)
    exposed = float(terms["host_exposed_seconds"])
    step = t.step_seconds
    share = exposed / step if step > 0 else 0.0
    if share < MICROSTEP_HOST_SHARE_WARN:
        return None
    ms = lambda s: f"{s * 1e3:.0f} ms" if s < 10 else f"{s:.1f} s"  # noqa: E731
    m, b = plan.num_microbatches, plan.micro_batch_size
    host = float(terms["host_microbatch_seconds"])
    r = MICROSTEP_HOST_MEASURED
    zero2_accumulating = plan.engine is not Engine.MEGATRON and plan.zero_stage == ZeroStage.GRADIENTS and m > 1
    gpu = float(terms["host_gpu_microbatch_seconds"])
    against = ("against less GPU work" if host > gpu else
               f"against {ms(gpu)} of GPU work, but their forward's host outlasts the forward's kernels")
    message = (f"the micro-steps are host-bound: {m} micro-batch{'es' if m > 1 else ''} of {b} on "
               f"{int(terms['stage_layers'])} layers per GPU take about {ms(host)} of host time each (Python forward, "
               f"backward launches{', ZeRO-2 gradient hooks' if zero2_accumulating else ''}) {against}; "
               f"the GPU waits {ms(exposed)} per step ({share:.0%} of the {ms(step)} step). "
               f"Measured ({r['gpu']}, {r['model']}, corpus groups {r['groups']}, {r['date']}): {r['tokens']} tokens "
               f"per step in 1, 2 and 4 micro-batches took {'/'.join(map(str, r['megatron_ms']))} ms under "
               f"megatron-core DDP and {'/'.join(map(str, r['zero2_ms']))} ms under ZeRO-2. A host-bound step also "
               f"follows the host CPU's speed ({t.host_share:.0%} of this step does), which moves from moment to "
               f"moment: on the {HOST_SPEED_MEASURED['gpu']} machine a fixed Python loop took "
               f"{HOST_SPEED_MEASURED['loop_ms'][0]}-{HOST_SPEED_MEASURED['loop_ms'][1]} ms and one configuration's "
               f"step {HOST_SPEED_MEASURED['spread'][0]:.0%}-{HOST_SPEED_MEASURED['spread'][1]:.0%} apart in fresh "
               f"processes ({HOST_SPEED_MEASURED['source']}), so its step-time band is wider")
    alternatives, options_text = [], []

    def priced(kind, p, rec):
        peak = rec.memory.per_gpu_peak_bytes
        fits = _fits_with_headroom(rec.memory, headroom)
        s = rec.time.step_seconds
        alternatives.append(dict(option=kind, plan=_plan_text(p), step_seconds=s, peak_bytes=int(peak),
                                 fits=bool(fits), speedup=step / s - 1 if s > 0 else 0.0))
        return f"{ms(s)}/step ({s / step - 1:+.0%}), peak {_gb(peak)} ({'fits' if fits else 'does NOT fit'})"

    larger = _larger_micro_batch(model, cluster, plan, headroom, profile)
    if larger:
        p, rec = larger
        options_text.append(f"micro batch {b} → {p.micro_batch_size} (accumulation {m} → {p.num_microbatches}, "
                            f"global batch {plan.global_batch_size} kept): {priced('micro_batch', p, rec)}")
    else:
        options_text.append("a larger micro batch at the same global batch needs accumulation > 1 (now 1): a larger "
                            "global batch, or fewer GPUs sharing it" if m == 1
                            else f"no larger micro batch divides the accumulation of {m}")
    if zero2_accumulating:
        try:
            z1 = plan.replace(zero_stage=1)
            validate(model, cluster, z1)
            options_text.append(f"ZeRO-1 (its hooks reduce at the accumulation boundary only): "
                                f"{priced('zero1', z1, _evaluated(model, cluster, z1, profile))}")
        except ValueError as exc:
            options_text.append(f"ZeRO-1 is not a valid plan here ({exc})")
    numbers = dict(host_microbatch_seconds=host, exposed_seconds=exposed, share=share,
                   threshold=MICROSTEP_HOST_SHARE_WARN, step_seconds=step, microbatches=m,
                   alternatives=alternatives, measured=dict(r), host_share=t.host_share,
                   host_speed_measured=dict(HOST_SPEED_MEASURED))
    return Finding(id="microstep_host_bound", status="warn", message=message,
                   suggestion="; ".join(f"({i}) {x}" for i, x in enumerate(options_text, 1)), numbers=numbers)


def advise(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, options: Optional[DeepSpeedOptions] = None,
           headroom: float = 0.0, log=None, record=None, profile=None) -> Advice:
    """Everything: checks (priced in detail), the OOM ladder when the plan does not fit, low-throughput
    suggestions, diagnostic commands, and — with ``log`` (a :class:`workbench.logreader.LogSummary`) — the
    log's findings matched to this advice. ``record``: the plan's :class:`workbench.estimate.EvaluatedPlan` when
    the caller has it (the app's state does), so the plan is not priced again; ``profile``: the hardware profile
    it and every alternative are priced with (a name or path is read once, here)."""
    from workbench.calibrate.profile import resolve_profile

    profile = resolve_profile(profile)
    o = options or _default_options()
    if record is None or record.plan != plan or record.model != model or record.cluster != cluster:
        record = _evaluated(model, cluster, plan, profile)  # validates once
    mem, t = record.memory, record.time
    findings = check_plan(model, cluster, plan, memory=mem, time=t, options=o, detailed=True, facts=record.facts,
                          counts=record.counts, reserve_fraction=record.reserve_fraction,
                          expandable_twin=record.expandable_twin)
    ladder = oom_ladder(model, cluster, plan, headroom=headroom, record=record, profile=profile)
    if ladder and not ladder[-1].fits:
        last = ladder[-1]
        findings += (Finding(id="oom_ladder", status="fail",
                             message=f"the guide's three OOM steps are not enough: the last one needs "
                                     f"{_gb(last.peak_bytes)} per GPU of {_gb(mem.capacity_bytes)}"
                                     + (f" and runs out of {last.limit}" if last.limit.startswith("host") else ""),
                             suggestion=("more host memory per node, more nodes (the offloaded states shard over "
                                         "them), or NVMe offload" if last.limit.startswith("host") else
                                         "more GPUs (more TP/PP), a shorter sequence, or larger GPUs")),)
    other = planner_alternative(model, cluster, plan, ladder, headroom=headroom, profile=profile)
    if other is not None:
        findings += (other,)
    lora = lora_option(model, cluster, plan, headroom=headroom, record=record, profile=profile)
    if lora is not None:
        findings += (lora,)
    nvme = nvme_option(model, cluster, plan, headroom=headroom, record=record, profile=profile)
    if nvme is not None:
        findings += (nvme,)
    cp_choice = context_parallel_choice(model, cluster, plan, record, profile)
    if cp_choice is not None:
        findings += (cp_choice,)
    sp_choice = ulysses_choice(model, cluster, plan, record, profile)
    if sp_choice is not None:
        findings += (sp_choice,)
    host_bound = zero3_host_bound(model, cluster, plan, record, options=o, headroom=headroom, profile=profile)
    if host_bound is not None:
        findings += (host_bound,)
    microstep = microstep_host_bound(model, cluster, plan, record, headroom=headroom, profile=profile)
    if microstep is not None:
        findings += (microstep,)
    xent = cross_entropy_fusion_advice(model, cluster, plan, record, headroom=headroom, profile=profile)
    if xent is not None:
        findings += (xent,)
    offload = param_offload_optimizer(model, cluster, plan, record, headroom=headroom, profile=profile)
    if offload is not None:
        findings += (offload,)
    host = host_dependent_step(plan, t, profile_name=(record.profile or {}).get("name"),
                               cpu_adam_measured=profile is not None and profile.applies_cpu_adam)
    if host is not None:
        findings += (host,)
    log_findings = ()
    if log is not None:
        from workbench.logreader import match_advice

        log_findings = match_advice(log, model=model, cluster=cluster, plan=plan, memory=mem, time=t, options=o)
    return Advice(findings=findings, oom_ladder=ladder, throughput=throughput_suggestions(model, cluster, plan, t, o, profile=profile),
                  commands=diagnostic_commands(model, cluster, plan), log_findings=log_findings)
