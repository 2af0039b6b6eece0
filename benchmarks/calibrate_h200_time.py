"""Fit the time model's H200 constants to all 32 measured H200 runs (benchmarks/h200_runs.py: 16 DeepSpeed
calibration runs, 5 launcher runs, 11 megatron-core/hybrid runs), and report leave-one-out and per-group errors.

Fixed before the fit: the GEMM curve (fitted to the 270 GEMMs of results/gemm_h200.json), the counted bytes of
the attention scores, the loss and the optimizers (fused Adam, torch's foreach Adam), the collectives. Fitted:

    layer_pass_overhead_s      fixed seconds per layer forward, backward or recomputed forward (kernel launches,
                               framework work), every engine; the Hopper curve's "layer_pass_overhead_s"
    step_bytes_per_parameter   DeepSpeed's passes over gradients/parameters around the optimizer (ZeRO-0/1/2/3)
    zero3_fetch_latency_s      ZeRO-3 hook cost per module fetch (forward, backward, recomputed forward)
    zero3_reduce_latency_s     ZeRO-3 hook cost per module gradient reduce-and-partition (backward)
    zero3_collective_call_s    extra per ZeRO-3 fetch/reduce call when the group has more than one rank

The step time is linear in the five constants (non-negative least squares of relative errors). The HBM
efficiency stays at the curve's assumed 0.8 unless ``--fit-hbm`` searches a grid for it (the fit gives 0.79).

    python benchmarks/calibrate_h200_time.py [--write] [--fit-hbm]
"""
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from h200_runs import all_runs  # noqa: E402
from workbench import timing  # noqa: E402
from workbench.timing import step_time_terms, time_inputs  # noqa: E402

NAMES = ("layer_pass_overhead_s", "deepspeed_step_bytes_per_parameter", "zero3_fetch_latency_s",
         "zero3_reduce_latency_s", "zero3_collective_call_s", "zero3_hbm_bytes_per_parameter")
KEYS = (None, "step_bytes_per_parameter", "zero3_fetch_latency_s", "zero3_reduce_latency_s",
        "zero3_collective_call_s", "zero3_hbm_bytes_per_parameter")
HBM_GRID = np.round(np.arange(0.40, 0.951, 0.01), 2) if "--fit-hbm" in sys.argv else (0.8,)


def design(records, hbm_efficiency):
    """Per run: step time with the four DeepSpeed constants 0, and its derivative for each constant."""
    base, cols = [], []
    for r in records:
        kw = {**time_inputs(r["model"], r["cluster"], r["plan"]), "hbm_efficiency": hbm_efficiency}
        zero = {n: 0.0 for n in NAMES}
        b = float(step_time_terms(**{**kw, **zero})["step_seconds"])
        row = []
        for n in NAMES:
            unit = 1.0 if n.endswith("bytes_per_parameter") else 1e-3
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
        if active.any():
            x[active] = np.linalg.lstsq((a / scale)[:, active], y, rcond=None)[0]
        if (x >= 0).all():
            return x / scale
        active &= x > 0


def errors(base, cols, measured, x):
    return (base + cols @ x) / measured - 1


def fit_all(designs, measured, keep):
    """Best (hbm_efficiency, constants, rms) over the grid, fitted on the runs where ``keep``."""
    best = None
    for hbm, (base, cols) in designs.items():
        x = fit(base[keep], cols[keep], measured[keep])
        e = errors(base[keep], cols[keep], measured[keep], x)
        rms = float(np.sqrt(np.mean(e ** 2)))
        if best is None or rms < best[2]:
            best = (hbm, x, rms)
    return best


def leave_one_out_errors(designs, measured) -> np.ndarray:
    """Signed relative error of each run when the constants are refitted without it."""
    out = []
    for i in range(len(measured)):
        keep = np.arange(len(measured)) != i
        h, x, _ = fit_all(designs, measured, keep)
        b, c = designs[h]
        out.append(errors(b[i:i + 1], c[i:i + 1], measured[i:i + 1], x)[0])
    return np.array(out)


def main() -> int:
    records = all_runs()
    measured = np.array([r["step_seconds"] for r in records])
    groups = np.array([r["group"] for r in records])
    designs = {hbm: design(records, hbm) for hbm in HBM_GRID}
    everyone = np.ones(len(records), bool)
    hbm, x, rms = fit_all(designs, measured, everyone)
    print(f"hbm_efficiency                         {hbm:.2f}{'' if len(HBM_GRID) > 1 else ' (fixed)'}")
    for n, v in zip(NAMES, x):
        print(f"{n:38s} {v:.6g}")
    base, cols = designs[hbm]
    e = errors(base, cols, measured, x)
    print(f"in-sample ({len(records)} runs): median |error| {np.median(np.abs(e)):.1%}, max {np.max(np.abs(e)):.1%}")
    for g in dict.fromkeys(groups):
        sel = groups == g
        print(f"  {g:9s} ({sel.sum():2d}): median {np.median(np.abs(e[sel])):.1%}, max {np.max(np.abs(e[sel])):.1%}")
    loo = np.abs(leave_one_out_errors(designs, measured))
    print(f"leave-one-out: median |error| {np.median(loo):.1%}, max {np.max(loo):.1%}")
    # fit on one group, predict the others
    for g in dict.fromkeys(groups):
        tr = groups == g
        if g != "deepspeed":
            continue
        hg, xg, _ = fit_all(designs, measured, tr)
        bg, cg = designs[hg]
        es = np.abs(errors(bg[~tr], cg[~tr], measured[~tr], xg))
        print(f"fit on the {tr.sum()} {g} runs only (hbm_efficiency {hg:.2f}), predict the other {(~tr).sum()}: "
              f"median |error| {np.median(es):.1%}, max {np.max(es):.1%}")
    if "--write" in sys.argv:
        write_constants(hbm, x)
    return 0


def write_constants(hbm, x, source=None) -> None:
    """Store fitted constants in workbench/catalog/efficiency.json (``source``: replaces the deepspeed note)."""
    path = ROOT / "workbench" / "catalog" / "efficiency.json"
    data = json.loads(path.read_text())
    for k, v in zip(KEYS, x):
        if k is not None:
            data["deepspeed"][k] = float(f"{v:.4g}")
    if source:
        data["deepspeed"]["source"] = source
    hopper = data["curves"].setdefault("hopper", dict(data["curves"]["ampere"]))
    hopper["hbm_efficiency"] = float(hbm)
    hopper["layer_pass_overhead_s"] = float(f"{x[0]:.4g}")
    path.write_text(json.dumps(data, indent=2) + "\n")
    timing.calibration.cache_clear()
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
