"""FP8 against bf16 GEMM throughput on one CUDA GPU, for the weight GEMMs of transformer layers.

For every (m, n, k) of :func:`workbench.calibrate.measure.model_gemm_shapes` over a few catalog models, tensor
parallel 1-8 and m = 2k-16k tokens (n and k kept within 1024-28672), plus square GEMMs, it times

* ``bf16``: ``torch.matmul`` of bf16 operands (bf16 out);
* ``fp8``: ``torch._scaled_mm`` of e4m3 operands with per-tensor scales (the dequantisation scales of a
  delayed-scaling recipe: ``amax / 448``), bf16 out, the second operand column-major (what cuBLASLt needs);
* ``fp8_cast``: what producing the e4m3 copy of the ``m x k`` input costs each time (``amax``, scale, cast) —
  Transformer Engine pays it for activations that do not arrive in FP8.

Each time is the median of 20 calls timed one by one with CUDA events after 5 warm-up calls; operands rotate over
enough copies that they are not served from the 60 MB L2. Also records whether ``transformer_engine`` imports.

    PYTHONPATH=. python benchmarks/gpu_fp8_gemm.py --out benchmarks/results/h200_fp8_gemm.json

``--dry-run`` runs the bf16 path on the CPU with tiny shapes (checks the code, times nothing useful).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

from gpu_provenance import gpu_provenance  # noqa: E402

MODELS = ["gpt3-1.3b", "llama3-8b", "guide-13b", "llama3-70b", "mixtral-8x7b"]
TP_DEGREES = [1, 2, 4, 8]
TOKENS = [2048, 4096, 8192, 16384]
DIM_RANGE = (1024, 28672)
E4M3_MAX = 448.0
WARMUP, REPEATS = 5, 20


def shapes(tokens=TOKENS, models=MODELS) -> list[dict]:
    from workbench.calibrate.measure import model_gemm_shapes
    from workbench.catalog import model

    seen, out = set(), []
    for name in models:
        for s in model_gemm_shapes(model(name), tensor_parallel_degrees=TP_DEGREES, tokens=tokens):
            key = (s["m"], s["n"], s["k"])
            if key in seen or not all(DIM_RANGE[0] <= d <= DIM_RANGE[1] for d in (s["n"], s["k"])):
                continue
            seen.add(key)
            out.append(s)
    for size in (4096, 8192, 16384):
        out.append({"name": f"square-{size}", "m": size, "n": size, "k": size})
    return out


def time_median(fn, device) -> float:
    import torch

    for _ in range(WARMUP):
        fn()
    if device != "cuda":
        import time

        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def copies_for(nbytes: int) -> int:
    """Operand copies to rotate over so that consecutive calls do not hit the 60 MB L2 (at least 2, at most 8)."""
    return max(2, min(8, -(-180_000_000 // max(nbytes, 1))))


def measure_one(m, n, k, device, fp8: bool) -> dict:
    import torch

    bf = torch.bfloat16
    nrot = copies_for(2 * (m * k + n * k))
    a = [torch.randn(m, k, device=device, dtype=bf) for _ in range(nrot)]
    b = [torch.randn(k, n, device=device, dtype=bf) for _ in range(nrot)]
    it = iter(range(10**9))
    row = {}

    def mm():
        i = next(it) % nrot
        return torch.matmul(a[i], b[i])
    t = time_median(mm, device)
    row["bf16_seconds"] = t
    row["bf16_tflops"] = round(2.0 * m * n * k / t / 1e12, 2)
    if fp8:
        def quant(x):
            amax = x.abs().max().float()
            scale = E4M3_MAX / amax.clamp(min=1e-12)
            return (x.float() * scale).to(torch.float8_e4m3fn), scale.reciprocal()
        qa = [quant(x) for x in a]
        qb = []
        for x in b:  # (k, n) row-major -> an (n, k) row-major tensor seen transposed: column-major (k, n)
            q, s = quant(x.t().contiguous())
            qb.append((q.t(), s))

        def fp8mm():
            i = next(it) % nrot
            return torch._scaled_mm(qa[i][0], qb[i][0], scale_a=qa[i][1], scale_b=qb[i][1], out_dtype=bf)
        ref = torch.matmul(a[0].float(), b[0].float())
        got = fp8mm().float() if nrot == 1 else torch._scaled_mm(qa[0][0], qb[0][0], scale_a=qa[0][1],
                                                                scale_b=qb[0][1], out_dtype=bf).float()
        row["fp8_rel_error"] = float((got - ref).norm() / ref.norm())
        t8 = time_median(fp8mm, device)
        row["fp8_seconds"] = t8
        row["fp8_tflops"] = round(2.0 * m * n * k / t8 / 1e12, 2)
        row["fp8_speedup"] = round(t / t8, 3)

        def cast():
            i = next(it) % nrot
            return quant(a[i])
        row["fp8_cast_seconds"] = time_median(cast, device)
    return row


def provenance() -> dict:
    out = gpu_provenance(script="benchmarks/gpu_fp8_gemm.py")
    try:
        import transformer_engine  # noqa: F401

        out["transformer_engine"] = getattr(transformer_engine, "__version__", "imported (no version)")
    except Exception as exc:
        out["transformer_engine"] = f"not importable: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--dry-run", action="store_true", help="CPU, bf16 only, two tiny shapes")
    args = ap.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print("gpu_fp8_gemm: no CUDA GPU visible (use --dry-run on a CPU)", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    fp8 = cuda and torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")
    todo = shapes() if not args.dry_run else [{"name": "tiny-a", "m": 64, "n": 128, "k": 64},
                                                {"name": "tiny-b", "m": 128, "n": 64, "k": 128}]
    result = {"about": __doc__.split("\n\n")[0].replace("\n", " "), "provenance": provenance(),
              "fp8_format": "e4m3 (torch.float8_e4m3fn) both operands, per-tensor dequantisation scales "
                            "amax/448, bf16 output, torch._scaled_mm", "bf16": "torch.matmul, bf16 in and out",
              "timing": f"median of {REPEATS} calls after {WARMUP} warm-up calls, CUDA events", "gemms": []}
    for s in todo:
        try:
            row = {**s, **measure_one(s["m"], s["n"], s["k"], device, fp8)}
        except (RuntimeError, TypeError, ValueError) as exc:
            row = {**s, "error": str(exc).splitlines()[0][:200]}
        result["gemms"].append(row)
        print(f"{s['name']:>32} m={s['m']:6} n={s['n']:6} k={s['k']:6} bf16 {row.get('bf16_tflops', 0):7.1f} "
              f"fp8 {row.get('fp8_tflops', 0):7.1f} x{row.get('fp8_speedup', 0):.2f} "
              f"cast {1e6 * row.get('fp8_cast_seconds', 0):7.1f} us {row.get('error', '')}", flush=True)
        if args.out:  # written after every shape, so a cut-off run keeps what it measured
            with open(args.out, "w") as fh:
                fh.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
