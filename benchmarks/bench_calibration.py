"""Predictions with a measured hardware profile vs datasheet-only, against measured GPU runs.

The runs are benchmarks/results/gpu_memory_calibration.json (DeepSpeed ZeRO 0-3 on 1-2 H200, megatron-core GPTModel,
bf16, with and without full recompute): measured GPU memory in use at the peak (``max_memory_reserved`` + memory
outside the allocator) and the median step time. Each run is predicted twice with
:func:`workbench.estimate.estimate`: without a profile (datasheet peaks, catalog efficiency curve, the memory model's
constants) and with the profile (``workbench calibrate`` on the same machine). Prints one row per run and the median
and worst |error| before and after.

    python benchmarks/bench_calibration.py --profile h200            # a name or a .json path
    python benchmarks/bench_calibration.py                           # datasheet-only column alone
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "benchmarks" / "results" / "gpu_memory_calibration.json"
GiB = 2**30


def runs(path=RUNS) -> list:
    """One record per (GPUs, ZeRO stage, recompute): the slowest rank's step and the largest memory."""
    merged = {}
    for r in json.loads(Path(path).read_text()):
        key = (r["gpus"], r["zero"], r["recompute"])
        total = r["max_reserved"] + r["outside_allocator"]
        prev = merged.get(key)
        if prev is None or total > prev["measured_bytes"]:
            merged[key] = {**r, "measured_bytes": total,
                           "step_seconds": max(r["step_seconds"], prev["step_seconds"]) if prev else r["step_seconds"]}
    return [merged[k] for k in sorted(merged)]


def predict(run: dict, profile=None) -> tuple[float, float]:
    """(GPU bytes at the peak, step seconds) predicted for a run."""
    from workbench import ClusterSpec, ModelSpec, ParallelPlan
    from workbench.estimate import estimate

    n = run["gpus"]
    m = ModelSpec(**run["model"])
    c = ClusterSpec(gpu="H200", gpus_per_node=n)
    plan = ParallelPlan(world_size=n, zero_stage=run["zero"], recompute=run["recompute"],
                        micro_batch_size=run["micro_batch"], global_batch_size=run["micro_batch"] * n)
    est = estimate(m, c, plan, profile=profile)
    return float(est.memory.per_gpu_peak_bytes), float(est.time.step_seconds)


def _summary(errors: list) -> str:
    if not errors:
        return "-"
    a = [abs(e) for e in errors]
    return f"median {statistics.median(a):.1%}, worst {max(a):.1%}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="hardware profile measured on the H200 machine (name or .json path)")
    parser.add_argument("--runs", default=str(RUNS), help="measured runs (JSON list)")
    args = parser.parse_args(argv)
    from workbench.calibrate import load_profile

    profile = load_profile(args.profile) if args.profile else None
    print(f"runs: {args.runs}")
    print(f"profile: {profile.label if profile else 'none given (datasheet-only column alone)'}")
    print(f"| GPUs | ZeRO | recompute | measured GiB | datasheet GiB | err | profile GiB | err | measured s | "
          f"datasheet s | err | profile s | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    err = {"mem_before": [], "mem_after": [], "time_before": [], "time_after": []}
    for r in runs(args.runs):
        mem0, t0 = predict(r)
        e_m0, e_t0 = mem0 / r["measured_bytes"] - 1, t0 / r["step_seconds"] - 1
        err["mem_before"].append(e_m0)
        err["time_before"].append(e_t0)
        cells_mem, cells_t = "- | -", "- | -"
        if profile is not None:
            mem1, t1 = predict(r, profile)
            e_m1, e_t1 = mem1 / r["measured_bytes"] - 1, t1 / r["step_seconds"] - 1
            err["mem_after"].append(e_m1)
            err["time_after"].append(e_t1)
            cells_mem, cells_t = f"{mem1 / GiB:.2f} | {e_m1:+.1%}", f"{t1:.3f} | {e_t1:+.1%}"
        print(f"| {r['gpus']} | {r['zero']} | {r['recompute']} | {r['measured_bytes'] / GiB:.2f} | "
              f"{mem0 / GiB:.2f} | {e_m0:+.1%} | {cells_mem} | {r['step_seconds']:.3f} | {t0:.3f} | {e_t0:+.1%} | "
              f"{cells_t} |")
    print(f"\nmemory |error|  datasheet-only: {_summary(err['mem_before'])}   "
          f"with profile: {_summary(err['mem_after'])}")
    print(f"step   |error|  datasheet-only: {_summary(err['time_before'])}   "
          f"with profile: {_summary(err['time_after'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
