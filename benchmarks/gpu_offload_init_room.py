"""Does a plan fit a smaller GPU? One corpus configuration run on an H200 of which another process holds all but
``F`` GiB, for each ``F`` given: the run sees a GPU with ``F`` GiB free, as on a smaller card (NVML's free memory,
which DeepSpeed's ZeRO-1/2 consult before they flatten the parameters on the GPU, and the allocator's real limit).

Written for DeepSpeed ZeRO-2 with the optimizer on the CPU, whose initialization needs the flat 16-bit buffer and a GPU
clone of the rank's partition at once (``workbench.memory.deepspeed_init_bytes``) where its training steps need
less: below that room the run must fail at initialization, above it run. Prints, and writes with ``--out``, per
``F``: the status (ok / oom), the failing request's line, the peaks, and the estimate's verdict for a GPU of that
size (no reserve above the initialization; the steps with the engine's constant reserve).

Run on the GPU machine: ``python benchmarks/gpu_offload_init_room.py --run-id RUN_ID --free-gib 13.9 17 --out
results/x.json`` (about a minute per ``F``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOG = """
import sys, time, torch
keep = int(float(sys.argv[1]) * 2**30)
free, total = torch.cuda.mem_get_info()
hog = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
open(sys.argv[2], "w").write(f"{free} {total}")
time.sleep(3600)
"""


def leave_free(gib: float, ready: Path) -> subprocess.Popen:
    """A process holding all of the GPU but ``gib`` GiB (and its own CUDA context), once ``ready`` exists."""
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(gib), str(ready)])
    for _ in range(600):
        if ready.exists() and ready.read_text().strip():
            return proc
        if proc.poll() is not None:
            raise SystemExit(f"the memory-holding process stopped (exit code {proc.returncode})")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the memory-holding process did not start")


def measured(run_id: str, out: Path) -> dict:
    """The corpus configuration ``run_id`` run once by ``benchmarks/corpus/measure.py``: its record."""
    out.unlink(missing_ok=True)
    subprocess.run([sys.executable, "measure.py", "--per-process", "--groups", group_of(run_id), "--only", run_id,
                    "--out", str(out), "--ahead", "0"], cwd=ROOT / "benchmarks" / "corpus", check=False)
    recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    return recs[-1] if recs else {"status": "no record"}


def group_of(run_id: str) -> str:
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    from runs import all_runs

    for r in all_runs():
        if r["run_id"] == run_id:
            return r["group"]
    raise SystemExit(f"no corpus configuration {run_id!r}")


def predicted(run_id: str, free_bytes: int) -> dict:
    """The estimate of the configuration on a GPU of ``free_bytes`` (its peak, phase and verdict)."""
    import dataclasses

    for path in (ROOT, ROOT / "benchmarks", ROOT / "benchmarks" / "corpus"):
        sys.path.insert(0, str(path))
    from bench_accuracy import corpus_run
    from runs import HF_SHAPES, MCORE_SHAPES, all_runs
    from workbench.estimate import estimate

    cfg = next(r for r in all_runs() if r["run_id"] == run_id)
    rec = {"run_id": run_id, "shape_id": cfg["shape_id"], "stack": cfg["stack"], "options": cfg, "status": "ok",
           "peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "outside_allocator_bytes": 1}

    if cfg["shape_id"] in HF_SHAPES:
        rec.update(hf_config=HF_SHAPES[cfg["shape_id"]]["config"], seq_length=HF_SHAPES[cfg["shape_id"]]["seq_length"],
                   attn_implementation=cfg.get("attn"))
    else:
        rec["model_dims"] = {k: v for k, v in MCORE_SHAPES[cfg["shape_id"]].items() if k != "like"}
    run = corpus_run(rec)
    gpu = dataclasses.replace(run["cluster"].gpu, memory_gib=free_bytes / 2**30)
    est = estimate(run["model"], run["cluster"].replace(gpu=gpu), run["plan"], checks=False)
    mem = est.memory
    return dict(peak_bytes=mem.per_gpu_peak_bytes, phase=mem.peak_stage.peak_phase, fits=mem.fits_gpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--free-gib", type=float, nargs="+", required=True)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for gib in args.free_gib:
        ready = Path(f"/tmp/leave_free_{os.getpid()}")
        hog = leave_free(gib, ready)
        try:
            free, total = (int(x) for x in ready.read_text().split())
            rec = measured(args.run_id, Path(f"/tmp/offload_init_room_{os.getpid()}.jsonl"))
        finally:
            hog.kill()
            hog.wait()
        row = dict(free_gib_asked=gib, free_bytes=free, total_bytes=total, status=rec.get("status"),
                   error=rec.get("error"), peak_allocated_bytes=rec.get("peak_allocated_bytes"),
                   peak_reserved_bytes=rec.get("peak_reserved_bytes"),
                   allocated_after_init_bytes=rec.get("allocated_after_init_bytes"),
                   step_seconds_median=rec.get("step_seconds_median"), provenance=rec.get("provenance"),
                   estimate=predicted(args.run_id, free))
        rows.append(row)
        est = row["estimate"]
        print(f"free {free / 2**30:6.2f} GiB: {row['status']:5s} "
              f"alloc {(row['peak_allocated_bytes'] or 0) / 2**30:6.2f} GiB  estimate {est['peak_bytes'] / 2**30:6.2f} "
              f"GiB ({est['phase']}) {'fits' if est['fits'] else 'DOES NOT FIT'}  {(row['error'] or '')[:160]}",
              flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(run_id=args.run_id, rows=rows), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
