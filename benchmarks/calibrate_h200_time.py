"""Fit the four DeepSpeed constants of the time model (catalog/efficiency.json "deepspeed") to the H200 runs in
benchmarks/results/gpu_memory_calibration.json, and report split-half and leave-one-out errors.

Everything else (GEMM curve, HBM bandwidth, counted attention/loss/optimizer bytes) is fixed before the fit; the
step time is linear in the four constants, so the fit is a (non-negative) least-squares fit of relative errors:

    step_bytes_per_parameter   DeepSpeed's passes over gradients/parameters around fused Adam (ZeRO-0/1/2/3)
    zero3_fetch_latency_s      ZeRO-3 hook cost per module fetch (forward, backward, recomputed forward)
    zero3_reduce_latency_s     ZeRO-3 hook cost per module gradient reduce-and-partition (backward)
    zero3_collective_call_s    extra per ZeRO-3 fetch/reduce call when the group has more than one rank

    python benchmarks/calibrate_h200_time.py [--write]
"""
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_time_h200 import DEFAULT, runs, specs  # noqa: E402
from workbench.timing import step_time_terms, time_inputs  # noqa: E402

NAMES = ("deepspeed_step_bytes_per_parameter", "zero3_fetch_latency_s", "zero3_reduce_latency_s",
         "zero3_collective_call_s")
KEYS = ("step_bytes_per_parameter", "zero3_fetch_latency_s", "zero3_reduce_latency_s", "zero3_collective_call_s")


def design(records):
    """Per run: step time with all four constants 0, and the step-time derivative for each constant."""
    base, cols = [], []
    for r in records:
        kw = time_inputs(*specs(r))
        zero = {n: 0.0 for n in NAMES}
        b = float(step_time_terms(**{**kw, **zero})["step_seconds"])
        row = []
        for n in NAMES:
            unit = 1.0 if n.startswith("deepspeed") else 1e-3
            row.append((float(step_time_terms(**{**kw, **zero, n: unit})["step_seconds"]) - b) / unit)
        base.append(b)
        cols.append(row)
    return np.array(base), np.array(cols)


def fit(base, cols, measured):
    a = cols / measured[:, None]
    y = (measured - base) / measured
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1
    active = np.ones(a.shape[1], bool)  # least squares, dropping constants that come out negative
    while True:
        x = np.zeros(a.shape[1])
        x[active] = np.linalg.lstsq((a / scale)[:, active], y, rcond=None)[0]
        if (x >= 0).all():
            return x / scale
        active &= x > 0


def errors(base, cols, measured, x):
    return (base + cols @ x) / measured - 1


def main() -> int:
    records = runs(json.loads(DEFAULT.read_text()))
    measured = np.array([r["step_seconds"] for r in records])
    base, cols = design(records)
    x = fit(base, cols, measured)
    for n, v in zip(NAMES, x):
        print(f"{n:38s} {v:.6g}")
    e = errors(base, cols, measured, x)
    print(f"in-sample: median |error| {np.median(np.abs(e)):.1%}, max {np.max(np.abs(e)):.1%}")
    loo = []
    for i in range(len(records)):
        keep = np.arange(len(records)) != i
        xi = fit(base[keep], cols[keep], measured[keep])
        loo.append(errors(base[i:i + 1], cols[i:i + 1], measured[i:i + 1], xi)[0])
    loo = np.abs(loo)
    print(f"leave-one-out: median |error| {np.median(loo):.1%}, max {np.max(loo):.1%}")
    # split half: fit on the runs of one recompute mode, predict the other
    for train in ("none", "full"):
        tr = np.array([r["recompute"] == train for r in records])
        xs = fit(base[tr], cols[tr], measured[tr])
        es = np.abs(errors(base[~tr], cols[~tr], measured[~tr], xs))
        print(f"split half: fit on recompute={train}, predict the other 8: median |error| {np.median(es):.1%}, "
              f"max {np.max(es):.1%}")
    if "--write" in sys.argv:
        path = ROOT / "workbench" / "catalog" / "efficiency.json"
        data = json.loads(path.read_text())
        for k, v in zip(KEYS, x):
            data["deepspeed"][k] = float(f"{v:.4g}")
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
