"""Predictions with a measured hardware profile vs datasheet-only, against the measured H200 runs.

Each run of benchmarks/h200_runs.py is predicted twice with :func:`workbench.estimate.estimate`: without a profile
(datasheet peaks, the catalog's Hopper curve and constants, the memory model's overheads) and with the profile
(``workbench calibrate`` on the same machine).

What is compared:

* memory — GPU memory in use at the peak: measured ``max_memory_reserved`` + memory outside the caching allocator
  (CUDA context, libraries, NCCL buffers; ``total − free − reserved``), against the whole prediction (allocated
  terms + the ``overhead`` term: context, NCCL with > 1 rank, allocator reserve). Only the 16 DeepSpeed
  calibration runs recorded reserved and outside bytes; the launcher runs recorded ``max_memory_allocated`` only,
  which the profile does not change (compare those in bench_h200_accuracy.py). The profile measures the context
  and NCCL buffers in a bare process; on a GPU they act as lower bounds of the training-run constants
  (:meth:`workbench.calibrate.HardwareProfile.memory_overheads`), so only its reserve fraction can move the totals.
* step time — the median step of every run (all 32).

Prints one row per run and the median and worst |error| before and after.

    python benchmarks/bench_calibration.py --profile h200            # a name or a .json path
    python benchmarks/bench_calibration.py                           # datasheet-only column alone
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GiB = 2**30


def predict(run: dict, profile=None) -> tuple[float, float]:
    """(GPU bytes in use at the peak, step seconds) predicted for a run."""
    from workbench.estimate import estimate

    # the calibration runs kept DeepSpeed's own overlap_comm default; the launcher writes overlap_comm: true
    overlap = None if run["group"] == "deepspeed" else True
    est = estimate(run["model"], run["cluster"], run["plan"], profile=profile, overlap_comm=overlap)
    return float(est.memory.per_gpu_peak_bytes), float(est.time.step_seconds)


def _summary(errors: list) -> str:
    if not errors:
        return "-"
    a = [abs(e) for e in errors]
    return f"median {statistics.median(a):.1%}, worst {max(a):.1%}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="hardware profile measured on the H200 machine (name or .json path)")
    args = parser.parse_args(argv)
    from h200_runs import all_runs
    from workbench.calibrate import load_profile

    profile = load_profile(args.profile) if args.profile else None
    print(f"profile: {profile.label if profile else 'none given (datasheet-only column alone)'}")
    if profile is not None:
        print("profile overheads applied: " + "; ".join(profile.memory_overheads()[1]))
    print("| run | GPUs | measured GiB (reserved+outside) | datasheet GiB | err | profile GiB | err | measured s | "
          "datasheet s | err | profile s | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    err = {"mem_before": [], "mem_after": [], "time_before": [], "time_after": []}
    for r in all_runs():
        mem0, t0 = predict(r)
        measured_mem = (r["reserved_bytes"] + r["outside_bytes"]) if r["reserved_bytes"] is not None else None
        e_t0 = t0 / r["step_seconds"] - 1
        err["time_before"].append(e_t0)
        cells_mem0 = "- | - | -"
        if measured_mem:
            e_m0 = mem0 / measured_mem - 1
            err["mem_before"].append(e_m0)
            cells_mem0 = f"{measured_mem / GiB:.2f} | {mem0 / GiB:.2f} | {e_m0:+.1%}"
        cells_mem1, cells_t1 = "- | -", "- | -"
        if profile is not None:
            mem1, t1 = predict(r, profile)
            e_t1 = t1 / r["step_seconds"] - 1
            err["time_after"].append(e_t1)
            cells_t1 = f"{t1:.3f} | {e_t1:+.1%}"
            if measured_mem:
                e_m1 = mem1 / measured_mem - 1
                err["mem_after"].append(e_m1)
                cells_mem1 = f"{mem1 / GiB:.2f} | {e_m1:+.1%}"
        print(f"| {r['name']} | {r['plan'].world_size} | {cells_mem0} | {cells_mem1} | {r['step_seconds']:.3f} | "
              f"{t0:.3f} | {e_t0:+.1%} | {cells_t1} |")
    print(f"\nmemory in use |error| ({len(err['mem_before'])} runs)  datasheet-only: {_summary(err['mem_before'])}   "
          f"with profile: {_summary(err['mem_after'])}")
    print(f"step time     |error| ({len(err['time_before'])} runs)  datasheet-only: {_summary(err['time_before'])}   "
          f"with profile: {_summary(err['time_after'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
