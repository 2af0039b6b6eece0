"""Predicted vs measured, and per-rank metric series, from run records (pure; used by the CLI, widgets and the
GPU validation benchmark)."""
from __future__ import annotations

from typing import Optional


def relative_error(predicted: Optional[float], measured: Optional[float]) -> Optional[float]:
    """(predicted − measured) / measured; None when either is missing or measured is 0."""
    if predicted is None or measured is None or not measured:
        return None
    return (predicted - measured) / measured


CPU_STEP_NOTE = ("CPU run: the time model prices the step's FLOPs and bytes at the catalog 'cpu' device's rates; it "
                 "does not count per-operation overhead (Python, PyTorch dispatch, gloo collectives, rank "
                 "synchronisation), which is most of a tiny model's step on a CPU, so the measured step is typically "
                 "10-100x the prediction. Compare step times on GPUs.")
"""Why a CPU run's predicted step is far below its measured one (shown next to the numbers)."""


def is_cpu_run(record: dict) -> bool:
    """A run on CPU ranks (its memory prediction is marked not comparable: RSS against GPU bytes)."""
    return (record.get("predicted") or {}).get("memory_comparable") is False


def comparison_rows(record: dict) -> list[dict]:
    """Rows ``{"quantity", "predicted", "measured", "error", "note"}`` for peak memory per rank (the largest rank)
    and step seconds (median). A prediction the record marks not comparable (``memory_comparable`` False: a CPU
    run's RSS against GPU bytes) has ``error`` None and the reason in ``note``."""
    predicted = record.get("predicted") or {}
    measured = record.get("measured") or {}
    mem = measured.get("peak_memory_bytes") or {}
    peak = max(mem.values()) if mem else None
    # the allocator counter (max_memory_allocated) does not see the overhead term: compare the allocated part
    predicted_peak = predicted.get("allocated_bytes") or predicted.get("per_gpu_peak_bytes")
    memory_note = ""
    if predicted.get("memory_comparable") is False:
        memory_note = "not comparable: " + (predicted.get("memory_not_comparable_reason") or "no reason recorded")
    rows = [("peak memory per rank (bytes)", predicted_peak, peak, memory_note),
            ("step seconds", predicted.get("step_seconds"), measured.get("median_step_seconds"), "")]
    return [{"quantity": q, "predicted": p, "measured": m, "error": None if note else relative_error(p, m),
             "note": note} for q, p, m, note in rows]


def metric_series(metrics: list[dict]) -> dict:
    """``{rank: {"step": [...], "loss": [...], "step_seconds": [...], "tokens_per_second": [...],
    "memory_bytes": [...]}}`` from store rows."""
    out: dict = {}
    for row in sorted(metrics, key=lambda r: (r["rank"], r["step"])):
        series = out.setdefault(row["rank"], {k: [] for k in ("step", "loss", "step_seconds", "tokens_per_second",
                                                                "memory_bytes")})
        for k in series:
            series[k].append(row.get(k))
    return out
