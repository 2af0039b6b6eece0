"""DeepSpeed's optimizer step on one CUDA GPU, apart from any model: seconds of ``engine.step()`` and of the
backward's gradient work, as the parameter count and the number of parameter tensors grow.

The corpus' DeepSpeed step times carry DeepSpeed's step inside them, beside the model's kernels; a fitted constant
there cannot tell bytes per parameter from cost per tensor from a fixed cost. This script takes the model away: a
module of ``T`` bf16 parameter tensors holding ``N`` parameters in all, whose "forward" is one reduction per tensor,
trained by ``deepspeed.initialize`` with the ds_config of ``benchmarks/corpus/measure.py`` (bf16, AdamW → DeepSpeed's
FusedAdam, gradient clipping 1.0, ZeRO stage 0, 1 or 2, one process). For each (stage, N, T) it times, after 3
warm-up steps, 10 steps of

* ``backward``: ``engine.backward(loss)`` (autograd's gradient kernels and, at ZeRO-1/2, DeepSpeed's gradient hooks:
  copy into the contiguous bucket, reduce, partition);
* ``step``: ``engine.step()`` (the fp32 gradient flatten and norm, clipping, FusedAdam over the fp32 master, the
  copy back to 16 bits and the per-tensor bookkeeping);

each synchronised, and fits ``seconds = a + b·N + c·T`` per stage and phase by least squares. ``b`` times the HBM
bandwidth is the bytes DeepSpeed moves per parameter in that phase; ``c`` the host seconds per tensor where the GPU
does not hide them. Records (JSON lines, with provenance) go to ``--out``; the fit is printed.

    python benchmarks/gpu_deepspeed_step.py --out deepspeed_step.jsonl
    python benchmarks/gpu_deepspeed_step.py --fit deepspeed_step.jsonl   # the fit again, on any machine
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

M = 2**20
# (parameters, tensors): parameter count at a fixed tensor count, and tensor count at a fixed parameter count
CASES = ((64 * M, 64), (1024 * M, 64), (2048 * M, 64), (256 * M, 8), (256 * M, 1024))
WARMUP, TIMED = 3, 10


def build(parameters: int, tensors: int):
    import torch

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            size = parameters // tensors
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.randn(size, dtype=torch.bfloat16, device="cuda") * 0.02)
                for _ in range(tensors))

        def forward(self, x):
            return sum((w.float() * x).sum() for w in self.weights)

    return Flat()


def one(stage: int, parameters: int, tensors: int) -> dict:
    import deepspeed
    import torch
    from measure import ds_config

    model = build(parameters, tensors)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                           config=ds_config({"zero": stage}))
    x = torch.ones((), device="cuda")
    times = {"backward": [], "step": []}
    for i in range(WARMUP + TIMED):
        loss = engine(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.backward(loss)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= WARMUP:
            times["backward"].append(t1 - t0)
            times["step"].append(t2 - t1)
    out = dict(stage=stage, parameters=sum(p.numel() for p in model.parameters()), tensors=tensors,
               optimizer_class=type(engine.basic_optimizer).__name__ if engine.basic_optimizer else None,
               zero_optimizer_class=type(engine.optimizer).__name__,
               backward_s=statistics.median(times["backward"]), step_s=statistics.median(times["step"]),
               backward_all_s=times["backward"], step_all_s=times["step"])
    del engine, model
    torch.cuda.empty_cache()
    return out


def fit(records: list) -> list[str]:
    """Least squares of seconds = a + b·N + c·T per stage and phase; bytes per parameter at the H200's 4.8 TB/s."""
    import numpy as np

    lines = [f"{'stage':>5} {'phase':<9} {'a (ms)':>8} {'b (ns/param)':>13} {'B/param @4.8TB/s':>17} "
             f"{'c (us/tensor)':>14} {'worst resid':>12}"]
    for stage in sorted({r["stage"] for r in records}):
        sel = [r for r in records if r["stage"] == stage]
        A = np.array([[1.0, r["parameters"], r["tensors"]] for r in sel])
        for phase in ("backward", "step"):
            y = np.array([r[f"{phase}_s"] for r in sel])
            coef, *_ = np.linalg.lstsq(A, y, rcond=None)
            resid = (A @ coef - y) / y
            lines.append(f"{stage:>5} {phase:<9} {coef[0] * 1e3:>8.2f} {coef[1] * 1e9:>13.4f} "
                         f"{coef[1] * 4.8e12:>17.1f} {coef[2] * 1e6:>14.1f} {np.abs(resid).max():>11.1%}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fit", type=Path, help="print the fit of an existing records file and stop")
    ap.add_argument("--stages", default="2,1,0")
    ap.add_argument("--cases", help="N:T pairs, comma-separated (parameters in Mi); default: the script's CASES")
    args = ap.parse_args(argv)
    if args.fit:
        from gpu_provenance import read_records

        print("\n".join(fit(read_records(args.fit))))
        return 0
    import deepspeed
    from gpu_provenance import append_record, gpu_provenance

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    deepspeed.init_distributed(dist_backend="nccl")
    prov = gpu_provenance(deepspeed=deepspeed.__version__)
    records = []
    for stage in (int(s) for s in args.stages.split(",")):
        cases = ([tuple(int(v) for v in c.split(":")) for c in args.cases.split(",")] if args.cases else
                 [(n // M, t) for n, t in CASES])
        for mi, tensors in cases:
            parameters = mi * M
            rec = dict(one(stage, parameters, tensors), provenance=prov)
            records.append(rec)
            print(f"stage {stage} N {rec['parameters'] / 1e6:7.1f} M T {tensors:5d}  backward "
                  f"{rec['backward_s'] * 1e3:7.2f} ms  step {rec['step_s'] * 1e3:7.2f} ms", flush=True)
            append_record(args.out, rec)
    print("\n".join(fit(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
