"""Measure dense matmul TFLOP/s on a CUDA GPU for the GEMM shapes the time model uses (per layer: QKV, output
projection, fc1, fc2; the logits GEMM), for several models and tensor-parallel degrees, plus a large square GEMM.

One command on the GPU machine (prints a table on stderr, the JSON on stdout and into --out):

    PYTHONPATH=. python benchmarks/gpu_gemm.py --out gemm_h200.json

Then, on any machine, store the measurements as the Hopper calibration (workbench/catalog/efficiency.json,
section "h200_measured"; the time model then fits its Hopper GEMM-efficiency curve to them):

    python benchmarks/gpu_gemm.py --install gemm_h200.json

FP8 (``--precision fp8 --peak-tflops 1979``, ``torch._scaled_mm``) is stored with ``--install-fp8 FILE`` as the data of
the Hopper FP8 curve (section "h200_fp8_measured").

Shapes: :func:`workbench.calibrate.measure.model_gemm_shapes` (the measuring code ``workbench calibrate`` uses; that
command measures the user's own model and stores the fit in a hardware profile instead).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = ["gpt3-1.3b", "llama3-8b", "guide-13b", "llama3-70b", "gpt3-175b"]
TP_DEGREES = [1, 2, 4, 8]
TOKENS = [2048, 8192, 16384]


def shapes():
    from workbench.calibrate.measure import model_gemm_shapes
    from workbench.catalog import model

    seen = set()
    for name in MODELS:
        for shape in model_gemm_shapes(model(name), tensor_parallel_degrees=TP_DEGREES, tokens=TOKENS):
            key = (shape["m"], shape["n"], shape["k"])
            if key not in seen:
                seen.add(key)
                yield shape
    for size in (4096, 8192, 16384):
        yield {"name": f"square-{size}", "m": size, "n": size, "k": size}


def run(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_gemm: no CUDA GPU visible", file=sys.stderr)
        return 2
    from workbench.calibrate.measure import measure_gemms

    device = torch.cuda.get_device_name(0)
    rows = measure_gemms(list(shapes()), precision=args.precision, device="cuda", repeats=20,
                         progress=lambda line: print(line, file=sys.stderr))
    result = {"device": device, "precision": args.precision, "peak_tflops": args.peak_tflops,
              "torch": torch.__version__, "gemms": rows}
    from workbench.timing import fit_gemm_curve

    result["fit"] = fit_gemm_curve(rows, peak_tflops=args.peak_tflops)
    print(f"fit: {result['fit']}", file=sys.stderr)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


def install(path) -> int:
    from workbench import timing

    with open(path) as fh:
        measured = json.load(fh)
    for key in ("device", "peak_tflops", "gemms"):
        if key not in measured:
            print(f"gpu_gemm: {path} has no '{key}'", file=sys.stderr)
            return 2
    target = os.path.join(os.path.dirname(timing.__file__), "catalog", "efficiency.json")
    with open(target) as fh:
        data = json.load(fh)
    data["h200_measured"] = measured
    with open(target, "w") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    timing.calibration.cache_clear()
    timing._measured_hopper_curve.cache_clear()
    print(f"stored {len(measured['gemms'])} GEMMs from {measured['device']} in {target}; Hopper curve now "
          f"{timing.efficiency_curve('H200')}")
    return 0


FP8_TFLOPS_KEYS = ("fp8_tflops", "scaled_mm_tflops", "tflops_fp8", "tflops")
"""Where an FP8 measurement row keeps its rate: this script's ``--precision fp8`` rows say ``tflops``; a
``torch._scaled_mm``-vs-bf16 table may name the FP8 column ``fp8_tflops`` or ``scaled_mm_tflops``."""


def fp8_rows(measured: dict) -> list:
    """``[{name, m, n, k, tflops}]`` of the FP8 GEMMs in a measurement JSON (``gemms``, ``rows`` or ``results``)."""
    rows = []
    for row in measured.get("gemms") or measured.get("rows") or measured.get("results") or []:
        rate = next((row[k] for k in FP8_TFLOPS_KEYS if isinstance(row.get(k), (int, float))), None)
        if rate and all(isinstance(row.get(k), int) for k in ("m", "n", "k")):
            rows.append({"name": row.get("name", f"{row['m']}x{row['n']}x{row['k']}"), "m": row["m"], "n": row["n"],
                         "k": row["k"], "tflops": float(rate)})
    return rows


def install_fp8(path) -> int:
    """Store FP8 GEMM measurements as the Hopper FP8 curve's data (``h200_fp8_measured`` in
    workbench/catalog/efficiency.json): the time model then fits its FP8 curve to them
    (:func:`workbench.timing.fp8_efficiency_curve`)."""
    from workbench import timing

    with open(path) as fh:
        measured = json.load(fh)
    rows = fp8_rows(measured)
    if not rows:
        print(f"gpu_gemm: {path} has no FP8 GEMM rows (m, n, k and one of {', '.join(FP8_TFLOPS_KEYS)})",
              file=sys.stderr)
        return 2
    peak = measured.get("fp8_peak_tflops") or (measured.get("peak_tflops") if measured.get("precision") == "fp8"
                                               else None) or 1979.0
    prov = measured.get("provenance") or {}
    stored = {"device": measured.get("device") or prov.get("gpu") or "H200", "peak_tflops": float(peak),
              "method": measured.get("method") or measured.get("fp8_format") or "torch._scaled_mm",
              "torch": measured.get("torch") or prov.get("torch", ""), "date": prov.get("date_utc", ""),
              "source": f"benchmarks/results/{os.path.basename(str(path))}", "gemms": rows}
    stored["fit"] = timing.fit_gemm_curve(rows, peak_tflops=stored["peak_tflops"])
    target = os.path.join(os.path.dirname(timing.__file__), "catalog", "efficiency.json")
    with open(target) as fh:
        data = json.load(fh)
    data["h200_fp8_measured"] = stored
    with open(target, "w") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    timing.calibration.cache_clear()
    print(f"stored {len(rows)} FP8 GEMMs from {stored['device']} in {target}; Hopper FP8 curve now "
          f"{timing.fp8_efficiency_curve('H200')}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=["bf16", "fp16", "fp8"], default="bf16")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense peak of the GPU (H200 bf16: 989)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--install", metavar="FILE", help="store a measured JSON as the Hopper calibration")
    parser.add_argument("--install-fp8", metavar="FILE",
                        help="store measured FP8 GEMMs (this script's --precision fp8 output, or a torch._scaled_mm "
                             "table) as the Hopper FP8 curve's data")
    args = parser.parse_args(argv)
    if args.install_fp8:
        return install_fp8(args.install_fp8)
    return install(args.install) if args.install else run(args)


if __name__ == "__main__":
    sys.exit(main())
