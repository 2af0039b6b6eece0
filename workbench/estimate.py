"""The one entry point: ``estimate(model, cluster, plan) -> EvaluatedPlan`` (memory, time, layout, advisor checks).

The flow (the planner takes the same path for N plans at once)::

    validate(model, cluster, plan)                      once
    encode.plan_columns(plan)                           the plan as numeric columns
      ├─ encode.memory_inputs → memory.stage_terms      every pipeline stage at once → MemoryEstimate
      └─ encode.time_inputs   → timing.step_time_terms  compute / communication / optimizer / pipeline
                                                        → TimeEstimate
    parallel.parallel_facts                             group sizes, groups leaving the node, parameters per rank
    advisor.check_plan(record)                          reads the numbers above; prices nothing new
    (layout, parallel facts and advisor findings: computed on the record's first read of them)

The :class:`EvaluatedPlan` keeps what the models computed, so consumers (advisor, OOM ladder, pipeline view,
widgets, launcher) read it instead of pricing the plan again.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

from workbench import encode
from workbench.memory import memory_estimate_from, replayed_reserve_over_allocated
from workbench.memory_types import MemoryEstimate
from workbench.parallel import ParallelFacts, parallel_facts
from workbench.specs import (ZERO_SIZE_STAGES, ClusterSpec, ModelSpec, ParallelPlan, ParameterCounts, check_bool,
                             validate)
from workbench.timing import time_estimate_from


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluatedPlan:
    """One plan as the models priced it: memory per stage and term, time per term (with per-layer and per-micro-batch
    forward/backward seconds and the link each collective used), the layout, the derived parallel facts (group
    sizes, which groups leave the node, parameters per rank) and the advisor's findings."""

    model: ModelSpec
    cluster: ClusterSpec
    plan: ParallelPlan
    memory: MemoryEstimate
    time: Optional[Any] = None
    """:class:`workbench.timing.TimeEstimate`."""
    layout: Optional[Any] = None
    """:class:`workbench.layout.Layout`."""
    checks: tuple = ()
    """Advisor findings for this plan."""
    profile: Optional[dict] = None
    """The hardware profile the estimate used: ``{"name", "label", "device", "created", "note"}``, or the
    no-profile record (``name`` None, a note saying datasheet numbers were used)."""
    counts: Optional[ParameterCounts] = None
    """The model's parameter counts (computed once per estimate)."""
    facts: Optional[ParallelFacts] = None
    """Derived parallel facts (:func:`workbench.parallel.parallel_facts`)."""
    reserve_fraction: Optional[float] = None
    """The caching allocator's reserve the overhead term used when it was replayed for this plan
    (``estimate(..., simulate_allocator=...)``, :mod:`workbench.allocsim`): what the replay's peak reserved holds
    above the estimate's allocated peak (:func:`workbench.memory.replayed_reserve_over_allocated`); ``None``: the
    constant's (or a profile's)."""
    replayed_peaks: Optional[Any] = None
    """The replay's own peaks (:class:`workbench.allocsim.ReplayedPeaks`: what ``max_memory_allocated`` and
    ``max_memory_reserved`` would read, DeepSpeed's initialization included) when the allocator was replayed."""
    replay_for: Optional[Any] = None
    """When the allocator was replayed for this plan: ``replay_for(other_plan)`` estimates another plan of the same
    model and cluster with its allocator replayed the same way (an :class:`EvaluatedPlan` without checks, made the
    first time it is asked for and kept), or gives ``None`` for a plan outside the replay's scope
    (:func:`workbench.allocsim.scope_problems`): how the OOM ladder prices its rungs (:class:`PlanReplays`)."""

    @property
    def expandable_twin(self):
        """When the default allocator was replayed for this plan: a call giving the same plan with expandable
        segments estimated with its allocator replayed (``replay_for`` of it: made the first time the advisor asks,
        for a plan near capacity, and kept); else ``None``."""
        if self.replay_for is None or self.plan.expandable_segments:
            return None
        return functools.partial(self.replay_for, self.plan.replace(expandable_segments=True))

    @property
    def parameter_counts(self) -> ParameterCounts:
        return self.counts if self.counts is not None else self.model.parameter_counts()

    @property
    def step_band_seconds(self) -> tuple:
        """``(low, high, note)``: seconds below and above ``time.step_seconds`` the measured step went on held-out
        model shapes for this engine (:func:`workbench.memory.error_band`); zeros and a note without a band."""
        from workbench.memory import error_band

        band = (error_band(self.plan.engine, "step", self.plan.recompute, zero_stage=self.plan.zero_stage,
                           host_share=self.time.host_share, offload_params=self.plan.offload_params,
                           gpu_name=self.cluster.gpu.name)
                if self.time is not None else None)
        if band is None:
            return 0.0, 0.0, f"no held-out step-time measurements for engine {self.plan.engine}"
        step = self.time.step_seconds
        return step * band[0], step * band[1], band[2]

    def _deepspeed_moe_fields(self) -> dict:
        """``deepspeed_moe`` and, when true, DeepSpeed-MoE's expert capacity and token factor."""
        if not (self.model.is_moe and self.plan.deepspeed_moe):
            if not self.model.is_moe:
                return {"deepspeed_moe": False}
            from workbench.encode import moe_token_factor

            # the busiest rank's expert rows over the balanced share (capacity padding or routing imbalance)
            return {"deepspeed_moe": False, "moe_token_factor": moe_token_factor(self.plan, self.model)}
        from workbench import dsmoe

        return {"deepspeed_moe": True, "moe_expert_capacity": dsmoe.expert_capacity_of(self.model, self.plan),
                "moe_token_factor": dsmoe.token_factor(self.model, self.plan)}

    def to_dict(self) -> dict:
        counts = self.parameter_counts
        out = {
            "model": {"name": self.model.name, "parameters": counts.total,
                      "parameters_by_component": {"embedding": counts.embedding, "per_layer": counts.per_layer,
                                                  "output": counts.output, "final_norm": counts.final_norm,
                                                  "num_layers": counts.num_layers, "active": counts.active}},
            "cluster": {"gpu": self.cluster.gpu.name, "gpus_per_node": self.cluster.gpus_per_node,
                        "num_nodes": self.cluster.num_nodes, "world_size": self.cluster.world_size,
                        "host_cpu_cores_per_node": self.cluster.host_cpu_cores_per_node,
                        "cpu_adam_threads": self.cluster.cpu_adam_threads,
                        "cpu_adam_threads_per_rank": self.cluster.cpu_adam_threads_per_rank,
                        # the node's NVMe rates the step was priced with (ZeRO-Infinity's swaps)
                        "nvme_read_gb_per_s": self.cluster.nvme_read_gb_per_s,
                        "nvme_write_gb_per_s": self.cluster.nvme_write_gb_per_s},
            "plan": {"engine": str(self.plan.engine), "tensor_parallel": self.plan.tensor_parallel,
                     "pipeline_parallel": self.plan.pipeline_parallel,
                     "virtual_pipeline": self.plan.virtual_pipeline,
                     "context_parallel": self.plan.context_parallel, "cp_comm_type": str(self.plan.cp_comm_type),
                     "hierarchical_context_parallel_sizes": (list(self.plan.hierarchical_context_parallel_sizes)
                                                             if self.plan.hierarchical_context_parallel_sizes
                                                             else None),
                     "ulysses": self.plan.ulysses,
                     "data_parallel": self.plan.data_parallel,
                     "sequence_parallel": self.plan.sequence_parallel, "zero_stage": int(self.plan.zero_stage),
                     "offload_optimizer": str(self.plan.offload_optimizer),
                     "offload_params": str(self.plan.offload_params),
                     "distributed_optimizer": self.plan.distributed_optimizer,
                     "grad_reduce_fp32": self.plan.reduces_grads_in_fp32,
                     "recompute": str(self.plan.recompute), "micro_batch_size": self.plan.micro_batch_size,
                     "global_batch_size": self.plan.global_batch_size,
                     "gradient_accumulation_steps": self.plan.gradient_accumulation_steps,
                     "precision": str(self.plan.precision), "attention": str(self.model.attention),
                     "experts_implementation": (str(self.model.experts_implementation)
                                                if self.model.experts_implementation is not None else None),
                     "adam": str(self.plan.adam), "overlap_comm": self.plan.overlaps_comm,
                     "expandable_segments": self.plan.expandable_segments, "pin_memory": self.plan.pin_memory,
                     "expert_parallel": self.plan.expert_parallel,
                     "expert_tensor_parallel": self.plan.expert_tensor_parallel_size,
                     "expert_data_parallel": self.plan.expert_data_parallel,
                     "moe_capacity_factor": self.plan.moe_capacity_factor,
                     "moe_pad_to_capacity": self.plan.moe_pad_to_capacity,
                     "moe_load_imbalance": self.plan.moe_load_imbalance,
                     "moe_recompute": str(self.plan.moe_recompute),
                     "cross_entropy_fusion": str(self.plan.cross_entropy_fusion),
                     "moe_token_dispatcher": str(self.plan.moe_token_dispatcher),
                     "moe_overlap_alltoall": self.plan.moe_overlap_alltoall,
                     "tp_comm_overlap": self.plan.tp_comm_overlap,
                     # DeepSpeed's ZeRO sizes as priced (the plan's, else DeepSpeed's defaults); None for Megatron
                     **{name: None if str(self.plan.engine) == "megatron" else self.plan.zero_size(name)
                        for name in ZERO_SIZE_STAGES},
                     **self._deepspeed_moe_fields()},
            "memory": self.memory.to_dict(),
        }
        if self.reserve_fraction is not None:
            out["memory"].update(reserve_fraction=self.reserve_fraction, reserve_source="replayed")
        if self.replayed_peaks is not None:
            out["memory"].update(replayed_peak_allocated_bytes=self.replayed_peaks.peak_allocated_bytes,
                                 replayed_peak_reserved_bytes=self.replayed_peaks.peak_reserved_bytes)
        if self.time is not None:
            out["time"] = self.time.to_dict()
            low, high, note = self.step_band_seconds
            out["time"]["band_seconds"] = {"low": low, "high": high, "note": note}
        if self.facts is not None:
            out["parallel"] = self.facts.to_dict()
        if self.layout is not None:
            out["layout"] = self.layout.to_dict()
        if self.profile is not None:
            out["profile"] = dict(self.profile)
        if self.checks:
            out["checks"] = [c.to_dict() if hasattr(c, "to_dict") else c for c in self.checks]
        return out


class _Deferred:
    """A field's value computed from the record on first read (:class:`_DeferredSlot`)."""

    __slots__ = ("compute",)

    def __init__(self, compute):
        self.compute = compute


class _DeferredSlot:
    """Wraps a slot of :class:`EvaluatedPlan` so that a :class:`_Deferred` stored in it is computed from the record
    on first read and stored in its place: :func:`estimate` leaves the layout, parallel facts and advisor findings
    to whoever reads them (a record that is never shown does not price them); every reader, ``to_dict``,
    ``dataclasses.replace``, equality and pickling included, sees the computed value."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.slot
        value = self.slot.__get__(obj, owner)
        if type(value) is _Deferred:
            value = value.compute(obj)
            self.slot.__set__(obj, value)
        return value

    def __set__(self, obj, value):
        self.slot.__set__(obj, value)

    def __delete__(self, obj):
        self.slot.__delete__(obj)


for _name in ("layout", "facts", "checks"):
    setattr(EvaluatedPlan, _name, _DeferredSlot(EvaluatedPlan.__dict__[_name]))
del _name

Estimate = EvaluatedPlan
"""The record's earlier name."""


def estimate(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, profile=None, *,
             overlap_comm=None, checks: bool = True, simulate_allocator=None) -> EvaluatedPlan:
    """Memory, time, layout, parallel facts and advisor checks for one plan (see the module docstring for the
    flow). Raises ``ValueError`` naming the fields when the specs do not fit together. ``profile``: a
    :class:`workbench.calibrate.HardwareProfile`, or its name or path, whose measurements replace datasheet numbers;
    without one the estimate says so. ``overlap_comm`` overrides :attr:`ParallelPlan.overlap_comm` (kept for callers
    that pass it; ``None``: the plan's). ``checks=False`` leaves the advisor out (what a sweep over many plans
    wants). ``simulate_allocator``: replay PyTorch's caching allocator over building the model and the plan's
    traced training steps (:func:`workbench.allocsim.plan_replayed_peaks`) and take its peak reserved whole
    (DeepSpeed's initialization included) as the device's, beside the memory outside the allocator — for a
    transformers model its Hugging Face config (a :class:`workbench.hf.HFModel`, a ``config.json`` dict, or the path
    of the file or its directory; needs torch and transformers), for a megatron-core model ``True`` (traced from
    the specs; needs torch and megatron-core; anything else is refused); ``None``/``False``: the constant reserve.
    Only one-GPU plans in the replay's scope (:func:`workbench.allocsim.check_scope`: DeepSpeed ZeRO-0 to 3, with or
    without ``overlap_comm`` at ZeRO-1/2, the optimizer on the CPU at ZeRO-1 to 3; megatron-core's DDP; megatron-core
    models with unfused attention)."""
    from workbench.calibrate.profile import no_profile_record, resolve_profile

    if overlap_comm is not None:
        overlap_comm = check_bool("overlap_comm", overlap_comm)
    validate(model, cluster, plan)  # the only validation of this estimate
    if overlap_comm is not None and overlap_comm != plan.overlap_comm:
        plan = plan.replace(overlap_comm=overlap_comm)
    peaks = _replayed_peaks(model, cluster, plan, simulate_allocator)
    profile = resolve_profile(profile)
    record = profile.applied(cluster, plan.precision) if profile is not None else no_profile_record(cluster.gpu.name)
    counts = model.parameter_counts()
    cols = encode.plan_columns(plan, model)
    try:
        codes = encode.memory_inputs(model, cols, plan.precision, profile=profile)
        memory = memory_estimate_from(model, cluster, plan, codes, profile=profile, replayed_peaks=peaks)
        reserve = None if peaks is None else replayed_reserve_over_allocated(model, codes, peaks)
        inputs = encode.time_inputs(model, cluster, cols, plan.precision, profile=profile, counts=counts)
        time = time_estimate_from(model, cluster, plan, inputs, profile=profile)
    except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
        raise ValueError(f"the sizes are out of the models' range ({exc.__class__.__name__}: {exc}): "
                         f"{_size_summary(model, cluster, plan)}") from None
    _check_finite(memory, time, model, cluster, plan)
    replays = None if peaks is None else PlanReplays(model, cluster, profile, simulate_allocator)
    # the layout, parallel facts and advisor findings are computed on first read (:class:`_DeferredSlot`)
    return EvaluatedPlan(model=model, cluster=cluster, plan=plan, memory=memory, time=time, profile=record,
                         counts=counts, layout=_Deferred(_layout_of), facts=_Deferred(_facts_of),
                         checks=_Deferred(_checks_of) if checks else (), replayed_peaks=peaks,
                         reserve_fraction=reserve, replay_for=replays)


class PlanReplays:
    """:attr:`EvaluatedPlan.replay_for` of a replayed plan: other plans of its model and cluster estimated with the
    allocator replayed as it was (same profile, same ``simulate_allocator``), each once and kept; ``None`` for a plan
    outside the replay's scope."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, profile, simulate_allocator):
        self.model, self.cluster, self.profile, self.simulate_allocator = model, cluster, profile, simulate_allocator
        self.kept: dict = {}

    def __call__(self, plan: ParallelPlan) -> Optional[EvaluatedPlan]:
        from workbench.allocsim import scope_problems

        if plan not in self.kept:
            self.kept[plan] = (None if scope_problems(self.model, plan) else
                               estimate(self.model, self.cluster, plan, self.profile, checks=False,
                                        simulate_allocator=self.simulate_allocator))
        return self.kept[plan]


def _replayed_peaks(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, simulate_allocator):
    """The replayed peaks for ``estimate(..., simulate_allocator=...)``, or ``None`` when it is off. The
    plan's scope is checked here, once, before what to trace from is read (an out-of-scope plan is named first), and
    the replay is told so."""
    if simulate_allocator is None or simulate_allocator is False:
        return None
    from workbench import allocsim

    allocsim.check_scope(model, plan)
    config = _replay_config(model, simulate_allocator)
    return allocsim.plan_replayed_peaks(model, cluster, plan, config, scope_checked=True)


def _replay_config(model: ModelSpec, given) -> Optional[dict]:
    """What ``simulate_allocator=given`` (neither ``None`` nor ``False``) has the replay trace ``model`` from, by
    one rule for both kinds of model so that neither path drops what the caller gave: a megatron-core model is
    traced from its specs (``None``; ``given`` must be ``True``, a config given for it is refused rather than
    ignored), a transformers model from its Hugging Face ``config.json`` dict (``given`` an HFModel, the dict or its
    path; ``True`` is refused, naming what to give)."""
    from workbench import allocsim
    from workbench.hf import HFModel, import_hf, read_config

    if allocsim.is_megatron(model):
        if given is not True:
            raise ValueError(f"simulate_allocator is a {type(given).__name__}, but megatron-core model {model.name} "
                             f"is traced from its specs, not from a config: pass simulate_allocator=True")
        return None
    if given is True:
        raise ValueError(f"simulate_allocator=True: give the Hugging Face config of model {model.name} (its "
                         f"HFModel from workbench.hf.import_hf, the config.json dict or its path) to trace")
    imported = given if isinstance(given, HFModel) else import_hf(read_config(given), seq_length=model.seq_length)
    allocsim.check_config_model(model, imported.spec)
    return imported.config


def _layout_of(out: EvaluatedPlan):
    from workbench.layout import build_layout

    return build_layout(out.cluster, out.plan, model=out.model)


def _facts_of(out: EvaluatedPlan) -> ParallelFacts:
    return parallel_facts(out.model, out.cluster, out.plan)


def _checks_of(out: EvaluatedPlan) -> tuple:
    from workbench.advisor import check_plan

    return check_plan(out.model, out.cluster, out.plan, memory=out.memory, time=out.time, facts=out.facts,
                      counts=out.counts, reserve_fraction=out.reserve_fraction,
                      expandable_twin=out.expandable_twin)


def _size_summary(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> str:
    return (f"num_layers={model.num_layers}, hidden_size={model.hidden_size}, seq_length={model.seq_length}, "
            f"world_size={plan.world_size}, micro_batch_size={plan.micro_batch_size}, "
            f"global_batch_size={plan.global_batch_size}")


def _check_finite(memory: MemoryEstimate, time, model, cluster, plan) -> None:
    """The models must answer with finite, non-negative numbers; anything else is an input out of their range."""
    numbers = {"peak memory (bytes)": memory.peak_stage.total_bytes, "host memory (bytes)": memory.host_bytes_per_gpu,
               "step time (seconds)": time.step_seconds}
    for what, value in numbers.items():
        if not math.isfinite(float(value)) or float(value) < 0:
            raise ValueError(f"{what} came out as {value}: the sizes are out of the models' range "
                             f"({_size_summary(model, cluster, plan)})")
