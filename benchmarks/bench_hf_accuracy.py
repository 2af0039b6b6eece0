"""Accuracy of the workbench on the Hugging Face runs of the H200 corpus (``stack`` ``hf-ds``), by split.

The runs (``benchmarks/corpus/h200_runs.jsonl``) train transformers models built from a config dict under
``deepspeed.initialize``: Llama (TinyLlama width), Qwen2 1.5B width and GPT-2 medium width, sdpa and eager,
ZeRO-0/1/2/3, CPU offload, gradient checkpointing on and off, LoRA. Each is translated with ``workbench.hf.import_hf``
and compared through ``bench_accuracy``'s own mapping, prediction and errors (held-out shapes in
``benchmarks/accuracy_split.json``'s ``test`` list). Prints one line per run and median / worst |error| per split.

    python benchmarks/bench_hf_accuracy.py [--corpus PATH] [--refit-time]

``--refit-time`` fits the transformers stack's host-time constants (``workbench/catalog/efficiency.json``
``transformers.op_host_seconds``, host seconds per operator a decoder layer dispatches, counted by
``benchmarks/hf_layer_ops.py``, and ``saved_tensor_host_seconds``, per tensor a checkpointed layer saves; the part
of a layer's host time its kernels do not hide is exposed) on the fit split only, applies them for this run and
prints them: least squares of relative step-time error over the fit-split HF runs with ZeRO 0-2 and no offload
(ZeRO-3 and CPU offload carry engine terms of their own). Paste the values into the catalog with the run count.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_accuracy as B  # noqa: E402


def refit_host_time(fit_runs: list) -> dict:
    """The transformers stack's host constants (catalog ``transformers``), fitted on ``fit_runs`` with ZeRO 0-2 and
    no offload (ZeRO-3 and CPU offload carry engine terms of their own), least squares of relative step-time error
    on a grid (the terms are not linear: the GPU's kernels hide part of the host time):
    ``op_host_seconds`` (per dispatched operator, benchmarks/hf_layer_ops.py's counts) on the runs without
    checkpointing, then ``saved_tensor_host_seconds`` (per tensor a checkpointed layer saves) on those with it.
    Applied to the in-memory calibration and returned."""
    from workbench import timing

    cal = timing.calibration().setdefault("transformers", {})
    used = [r for r in fit_runs if r["measured"].get("step") and int(r["plan"].zero_stage) <= 2
            and str(r["plan"].offload_optimizer) == "none"]
    plain = [r for r in used if str(r["plan"].recompute) == "none"]
    ckpt = [r for r in used if str(r["plan"].recompute) != "none"]

    def loss(runs, key, value):
        cal[key] = value
        return sum(((B.predict(r)["step"] - r["measured"]["step"]) / r["measured"]["step"]) ** 2 for r in runs)

    cal["saved_tensor_host_seconds"] = 0.0
    cal["op_host_seconds"] = min((i * 2e-7 for i in range(301)), key=lambda v: loss(plain, "op_host_seconds", v))
    cal["saved_tensor_host_seconds"] = min((i * 2e-6 for i in range(301)),
                                           key=lambda v: loss(ckpt, "saved_tensor_host_seconds", v))
    print(f"transformers.op_host_seconds = {cal['op_host_seconds']:.4g} s ({len(plain)} fit-split runs without "
          f"checkpointing); saved_tensor_host_seconds = {cal['saved_tensor_host_seconds']:.4g} s ({len(ckpt)} "
          f"checkpointed)")
    return {k: cal[k] for k in ("op_host_seconds", "saved_tensor_host_seconds")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=B.CORPUS)
    ap.add_argument("--refit-time", action="store_true", help="fit transformers.op_host_seconds and "
                    "saved_tensor_host_seconds on the fit split and apply them for this run")
    args = ap.parse_args(argv)
    split = json.loads(B.SPLIT.read_text())
    runs = [r for r in B.corpus_runs(args.corpus) if r["stack"] == "hf-ds" and not r.get("oom")]
    if args.refit_time:
        refit_host_time([r for r in runs if r["shape_id"] not in split["test"]])
    rows = {"fit": [], "test": []}
    print(f"{'run':58s} {'split':5s} {'allocated':>10s} {'device':>8s} {'step':>8s}")
    for run in sorted(runs, key=lambda r: r["run_id"]):
        side = "test" if run["shape_id"] in split["test"] else "fit"
        err = B.errors(run, B.predict(run))
        rows[side].append(err)
        cells = " ".join("       -" if err[q] is None else f"{err[q]:+8.1%}" for q in B.QUANTITIES)
        print(f"{run['run_id']:58s} {side:5s}   {cells}")
    for side, errs in rows.items():
        parts = []
        for q in B.QUANTITIES:
            s = B.summary([e[q] for e in errs])
            parts.append(f"{q} median {s['median']:.1%} worst {s['worst']:.1%}" if s.get("n") else f"{q} -")
        print(f"{side}: {len(errs)} runs; " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
