"""The 32 measured H200 runs as (model, cluster, plan, measured) records, from the three committed result files:

* ``results/gpu_memory_calibration.json`` — 16 DeepSpeed runs (ZeRO 0-3 × recompute none/full × 1-2 GPUs; 24 layers,
  h 2048, seq 2048, micro batch 2, DeepSpeed's FusedAdam), group ``deepspeed``;
* ``results/gpu_validation_h200.json`` — 5 runs through ``workbench.runs.launch`` (torch Adam), group ``launcher``;
* ``results/gpu_validation_megatron_h200.json`` — 11 megatron-core and hybrid runs through the launcher, group
  ``megatron``.

Measured memory is ``torch.cuda.max_memory_allocated`` of the largest rank; step time the median step (slowest
rank). The launcher runs execute megatron-core's local layer spec without Apex/Transformer Engine and torch's Adam,
so their models carry ``attention="unfused"`` and their plans ``adam="torch"``; the calibration runs used DeepSpeed's
FusedAdam (``adam="fused"``) and the megatron-core model's unfused softmax.
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
CALIBRATION = RESULTS / "gpu_memory_calibration.json"
LAUNCHER = RESULTS / "gpu_validation_h200.json"
MEGATRON = RESULTS / "gpu_validation_megatron_h200.json"


def _deepspeed_runs(path: Path) -> list[dict]:
    from workbench import ClusterSpec, ModelSpec, ParallelPlan

    merged = {}
    for r in json.loads(path.read_text()):
        key = (r["gpus"], r["zero"], r["recompute"])
        prev = merged.get(key)
        if prev is None:
            merged[key] = dict(r)
        else:  # largest rank's memory, slowest rank's step
            for k in ("max_allocated", "max_reserved", "outside_allocator", "step_seconds"):
                prev[k] = max(prev[k], r[k])
    out = []
    for (n, zero, rc), r in sorted(merged.items()):
        plan = ParallelPlan(world_size=n, engine="deepspeed", zero_stage=zero, recompute=rc,
                            micro_batch_size=r["micro_batch"], adam="fused",
                            overlap_comm=zero >= 3)  # these configs kept DeepSpeed's own default
        out.append(dict(group="deepspeed", name=f"ds-z{zero}-{rc}-{n}gpu-mbs{r['micro_batch']}",
                        model=ModelSpec(**r["model"]), cluster=ClusterSpec(gpu="H200", gpus_per_node=n), plan=plan,
                        allocated_bytes=r["max_allocated"], step_seconds=r["step_seconds"],
                        reserved_bytes=r["max_reserved"], outside_bytes=r["outside_allocator"]))
    return out


def _launcher_runs(path: Path, group: str) -> list[dict]:
    from workbench import ClusterSpec, ParallelPlan
    from workbench.catalog import model as catalog_model

    data = json.loads(path.read_text())
    model = catalog_model(data["model"], attention="unfused")
    out = []
    for r in data["runs"]:
        if r.get("status") != "completed":
            continue
        plan = ParallelPlan(world_size=r["gpus"], precision="bf16", adam="torch", **r["plan"])
        out.append(dict(group=group, name=r["name"], model=model,
                        cluster=ClusterSpec(gpu=data["gpu"], gpus_per_node=r["gpus"]), plan=plan,
                        allocated_bytes=r["measured_peak_bytes"], step_seconds=r["measured_step_seconds"],
                        reserved_bytes=None, outside_bytes=None))
    return out


def all_runs() -> list[dict]:
    """Every measured run: ``{group, name, model, cluster, plan, allocated_bytes, step_seconds, reserved_bytes,
    outside_bytes}`` (the last two only for the calibration runs, which recorded them)."""
    return (_deepspeed_runs(CALIBRATION) + _launcher_runs(LAUNCHER, "launcher")
            + _launcher_runs(MEGATRON, "megatron"))
