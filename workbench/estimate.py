"""The one entry point: ``estimate(model, cluster, plan) -> Estimate`` (memory, time, layout, advisor checks)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from workbench.memory import estimate_memory
from workbench.memory_types import MemoryEstimate
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, check_bool, validate


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
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

    @property
    def step_band_seconds(self) -> tuple:
        """``(low, high, note)``: seconds below and above ``time.step_seconds`` the measured step went on held-out
        model shapes for this engine (:func:`workbench.memory.error_band`); zeros and a note without a band."""
        from workbench.memory import error_band

        band = error_band(self.plan.engine, "step") if self.time is not None else None
        if band is None:
            return 0.0, 0.0, f"no held-out step-time measurements for engine {self.plan.engine}"
        step = self.time.step_seconds
        return step * band[0], step * band[1], band[2]

    def to_dict(self) -> dict:
        counts = self.model.parameter_counts()
        out = {
            "model": {"name": self.model.name, "parameters": counts.total,
                      "parameters_by_component": {"embedding": counts.embedding, "per_layer": counts.per_layer,
                                                  "output": counts.output, "final_norm": counts.final_norm,
                                                  "num_layers": counts.num_layers, "active": counts.active}},
            "cluster": {"gpu": self.cluster.gpu.name, "gpus_per_node": self.cluster.gpus_per_node,
                        "num_nodes": self.cluster.num_nodes, "world_size": self.cluster.world_size},
            "plan": {"engine": str(self.plan.engine), "tensor_parallel": self.plan.tensor_parallel,
                     "pipeline_parallel": self.plan.pipeline_parallel,
                     "virtual_pipeline": self.plan.virtual_pipeline,
                     "context_parallel": self.plan.context_parallel, "data_parallel": self.plan.data_parallel,
                     "sequence_parallel": self.plan.sequence_parallel, "zero_stage": int(self.plan.zero_stage),
                     "offload_optimizer": str(self.plan.offload_optimizer),
                     "offload_params": str(self.plan.offload_params),
                     "distributed_optimizer": self.plan.distributed_optimizer,
                     "recompute": str(self.plan.recompute), "micro_batch_size": self.plan.micro_batch_size,
                     "global_batch_size": self.plan.global_batch_size,
                     "gradient_accumulation_steps": self.plan.gradient_accumulation_steps,
                     "precision": str(self.plan.precision), "attention": str(self.model.attention),
                     "adam": str(self.plan.adam), "overlap_comm": self.plan.overlaps_comm},
            "memory": self.memory.to_dict(),
        }
        if self.time is not None:
            out["time"] = self.time.to_dict()
            low, high, note = self.step_band_seconds
            out["time"]["band_seconds"] = {"low": low, "high": high, "note": note}
        if self.layout is not None:
            out["layout"] = self.layout.to_dict()
        if self.profile is not None:
            out["profile"] = dict(self.profile)
        if self.checks:
            out["checks"] = [c.to_dict() if hasattr(c, "to_dict") else c for c in self.checks]
        return out


def estimate(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, profile=None, *,
             overlap_comm=None) -> Estimate:
    """Memory, time, layout (and advisor checks where available) for one plan. Raises ``ValueError`` naming the
    fields when the specs do not fit together. ``profile``: a :class:`workbench.calibrate.HardwareProfile`, or its
    name or path, whose measurements replace datasheet numbers; without one the estimate says so. ``overlap_comm``
    overrides :attr:`ParallelPlan.overlap_comm` (kept for callers that pass it; ``None``: the plan's)."""
    from workbench.calibrate.profile import no_profile_record, resolve_profile
    from workbench.layout import build_layout
    from workbench.timing import estimate_time

    from workbench.advisor import check_plan

    if overlap_comm is not None:
        overlap_comm = check_bool("overlap_comm", overlap_comm)
    validate(model, cluster, plan)
    if overlap_comm is not None and overlap_comm != plan.overlap_comm:
        plan = plan.replace(overlap_comm=overlap_comm)
    profile = resolve_profile(profile)
    record = profile.applied(cluster, plan.precision) if profile is not None else no_profile_record()
    try:
        memory = estimate_memory(model, cluster, plan, profile=profile, overlap_comm=overlap_comm)
        time = estimate_time(model, cluster, plan, profile=profile)
    except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
        raise ValueError(f"the sizes are out of the models' range ({exc.__class__.__name__}: {exc}): "
                         f"{_size_summary(model, cluster, plan)}") from None
    _check_finite(memory, time, model, cluster, plan)
    return Estimate(model=model, cluster=cluster, plan=plan, memory=memory, time=time,
                    layout=build_layout(cluster, plan, model=model),
                    checks=check_plan(model, cluster, plan, memory=memory, time=time), profile=record)


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
