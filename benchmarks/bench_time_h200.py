"""Accuracy of the time model against our own H200 runs: predicted vs measured step time for every run in
benchmarks/results/gpu_memory_calibration.json (DeepSpeed ZeRO 0-3 × recompute none/full × 1 and 2 GPUs wrapping a
megatron-core GPTModel, local layer spec, bf16; see benchmarks/gpu_memory_calibration.py). Target: median |error|
<= 10%.

    python benchmarks/bench_time_h200.py [results.json]
"""
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import ClusterSpec, ModelSpec, ParallelPlan  # noqa: E402
from workbench.timing import estimate_time  # noqa: E402

DEFAULT = ROOT / "benchmarks" / "results" / "gpu_memory_calibration.json"


def runs(records: list) -> list:
    """One record per run (the slowest rank's step time: the step ends when every rank has finished)."""
    by_key = {}
    for r in records:
        key = (r["gpus"], r["zero"], r["recompute"])
        if key not in by_key or r["step_seconds"] > by_key[key]["step_seconds"]:
            by_key[key] = r
    return [by_key[k] for k in sorted(by_key)]


def specs(run: dict):
    n = run["gpus"]
    model = ModelSpec(**run["model"])
    cluster = ClusterSpec(gpu="H200", gpus_per_node=n)
    plan = ParallelPlan(world_size=n, engine="deepspeed", zero_stage=run["zero"], recompute=run["recompute"],
                        micro_batch_size=run["micro_batch"])
    return model, cluster, plan


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    records = runs(json.loads(path.read_text()))
    print(f"H200 step time, DeepSpeed + megatron-core GPTModel ({len(records)} runs from {os.path.relpath(path)})")
    print(f"{'GPUs':>4} {'ZeRO':>4} {'recompute':>9} {'measured s':>10} {'predicted s':>11} {'error':>7}  "
          f"largest terms")
    errors = []
    for r in records:
        est = estimate_time(*specs(r))
        err = est.step_seconds / r["step_seconds"] - 1
        errors.append(abs(err))
        top = sorted(((v, k) for k, v in est.breakdown.items() if v > 0), reverse=True)[:4]
        terms = ", ".join(f"{k} {v:.3f}" for v, k in top)
        print(f"{r['gpus']:>4} {r['zero']:>4} {r['recompute']:>9} {r['step_seconds']:10.3f} {est.step_seconds:11.3f} "
              f"{err:+7.1%}  {terms}")
    med, worst = statistics.median(errors), max(errors)
    print(f"median |error| {med:.1%}   max |error| {worst:.1%}   (target: median <= 10%)")
    return 0 if med <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
