"""Accuracy of the time model against Narayanan et al. 2021 (arXiv 2104.04473) Table 1: predicted vs reported
TFLOP/s per GPU (hardware FLOPs, i.e. including the full-recompute forward), with ONE calibrated A100 efficiency curve
for all rows (workbench/catalog/efficiency.json). Target: median |error| <= 10%.

    python benchmarks/bench_time_accuracy.py
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from narayanan_table1 import ROWS, specs  # noqa: E402
from workbench.timing import estimate_time  # noqa: E402


def main() -> int:
    print("Narayanan et al. 2021 Table 1 (A100 80GB, fp16, full recompute) — TFLOP/s per GPU")
    print(f"{'model':>6} {'t':>2} {'p':>2} {'d':>3} {'gbs':>5} {'mbs':>3} {'predicted':>9} {'reported':>8} "
          f"{'error':>7}  {'step s':>6}  largest non-compute terms")
    errors = []
    for row in ROWS:
        model, cluster, plan = specs(row)
        est = estimate_time(model, cluster, plan)
        reported = row[-1]
        err = est.hardware_tflops_per_gpu / reported - 1
        errors.append(abs(err))
        others = sorted(((v, k) for k, v in est.breakdown.items() if k not in ("compute", "recompute") and v > 0),
                        reverse=True)[:3]
        extra = ", ".join(f"{k} {v:.2f}s" for v, k in others)
        print(f"{row[0]:>6} {plan.tensor_parallel:>2} {plan.pipeline_parallel:>2} {plan.data_parallel:>3} "
              f"{plan.global_batch_size:>5} {plan.micro_batch_size:>3} {est.hardware_tflops_per_gpu:9.1f} "
              f"{reported:8.1f} {err:+7.1%}  {est.step_seconds:6.2f}  {extra}")
    med, worst = statistics.median(errors), max(errors)
    print(f"median |error| {med:.1%}   max |error| {worst:.1%}   (target: median <= 10%)")
    # The curve's efficiency_max was fitted to these same rows; leave-one-out shows the out-of-sample error.
    from calibrate_efficiency import fit
    from workbench.timing import calibration, step_time_terms, time_inputs
    half = calibration()["curves"]["ampere"]["gemm_half_dim"]
    inputs = [time_inputs(*specs(r)) for r in ROWS]
    reported = [r[-1] for r in ROWS]
    loo = []
    for i in range(len(ROWS)):
        rest = [k for k in range(len(ROWS)) if k != i]
        emax, _, _ = fit([inputs[k] for k in rest], [reported[k] for k in rest], half)
        kw = {**inputs[i], "gemm_efficiency_max": emax}
        terms = step_time_terms(**kw)
        gpus = kw["tensor_parallel"] * kw["pipeline_parallel"] * kw["data_parallel"]
        pred = float(terms["hardware_flops"] / terms["step_seconds"] / gpus / 1e12)
        loo.append(abs(pred / reported[i] - 1))
        print(f"  leave-one-out {ROWS[i][0]:>6}: efficiency_max {emax:.3f} -> predicted {pred:6.1f} "
              f"({pred / reported[i] - 1:+.1%})")
    print(f"leave-one-out median |error| {statistics.median(loo):.1%}   max |error| {max(loo):.1%}")
    return 0 if med <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
