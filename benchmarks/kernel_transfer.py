"""Do the Hopper kernel rates measured on the H200 carry to the H100? The time model prices both cards with one
Hopper GEMM curve and one fused-attention curve per head width, measured on an H200, and each card's own datasheet
peaks and bandwidths. This script sets the same measurements from the two cards side by side:

* GEMMs (``gpu_fp8_gemm.py``: bf16 and FP8 ``torch._scaled_mm`` at the same 239 shapes): H100 / H200 TFLOP/s per
  shape, their minimum, median and maximum;
* transformers' sdpa attention core (``gpu_sdpa.py``: cuDNN's flash kernels), per head width and phase: the
  ``efficiency_max`` each card's calls give (median over the kernel-bound calls of 8 k tokens and more).

    python benchmarks/kernel_transfer.py
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"
GEMMS = {"H200": RESULTS / "h200_fp8_gemm.json", "H100": RESULTS / "h100_fp8_gemm.json"}
SDPA = {"H200": RESULTS / "sdpa_h200.jsonl", "H100": RESULTS / "sdpa_h100.jsonl"}


def gemm_ratios(new: list, base: list, key: str) -> list[float]:
    """``key`` TFLOP/s of ``new`` over ``base`` for every (m, n, k) both measured."""
    by_shape = {(g["m"], g["n"], g["k"]): g for g in base}
    return [g[key] / by_shape[(g["m"], g["n"], g["k"])][key] for g in new
            if g.get(key) and by_shape.get((g["m"], g["n"], g["k"]), {}).get(key)]


def gemm_lines() -> list[str]:
    new, base = (json.loads(GEMMS[c].read_text())["gemms"] for c in ("H100", "H200"))
    lines = ["GEMMs, H100 / H200 TFLOP/s at the same shape (gpu_fp8_gemm.py):"]
    for key in ("bf16_tflops", "fp8_tflops"):
        r = sorted(gemm_ratios(new, base, key))
        lines.append(f"  {key.split('_')[0]:<5} {len(r):4d} shapes  min {r[0]:.3f}  median {statistics.median(r):.3f}  "
                     f"max {r[-1]:.3f}   (H100 median {statistics.median(g[key] for g in new if g.get(key)):.0f}, "
                     f"H200 {statistics.median(g[key] for g in base if g.get(key)):.0f} TFLOP/s)")
    return lines


def sdpa_lines() -> list[str]:
    from gpu_provenance import read_records
    from gpu_sdpa import efficiency

    recs = {card: read_records(path) for card, path in SDPA.items()}
    lines = ["sdpa attention core, efficiency_max per head width (gpu_sdpa.py; 989 TFLOP/s peak, half_seq 380):",
             f"  {'head':>4} {'phase':<9} {'H200':>6} {'H100':>6} {'H100/H200':>10}"]
    for head in sorted({r["head_dim"] for r in recs["H200"]} & {r["head_dim"] for r in recs["H100"]}):
        for phase in ("forward", "backward"):
            e = {card: efficiency([r for r in rs if r["head_dim"] == head], phase, 989.0)[0]
                 for card, rs in recs.items()}
            lines.append(f"  {head:>4} {phase:<9} {e['H200']:6.3f} {e['H100']:6.3f} {e['H100'] / e['H200']:10.3f}")
    return lines


def main() -> int:
    print("\n".join(gemm_lines() + [""] + sdpa_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
