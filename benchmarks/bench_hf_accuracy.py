"""Accuracy of the workbench on the Hugging Face runs of the H200 corpus (``stack`` ``hf-ds``), by split.

The runs (``benchmarks/corpus/h200_runs.jsonl``) train transformers models built from a config dict under
``deepspeed.initialize``: Llama (TinyLlama width), Qwen2 1.5B width and GPT-2 medium width, sdpa and eager,
ZeRO-0/1/2/3, CPU offload, gradient checkpointing on and off, LoRA. Each is translated with ``workbench.hf.import_hf``
and compared through ``bench_accuracy``'s own mapping, prediction and errors (held-out shapes in
``benchmarks/accuracy_split.json``'s ``test`` list). Prints one line per run and median / worst |error| per split, then
the step time of the ZeRO 0-2 runs without offload alone (the stack's own compute and checkpoint terms).

    python benchmarks/bench_hf_accuracy.py [--corpus PATH] [--refit-time] [--leave-one-shape-out]

``--refit-time`` fits the transformers stack's checkpoint constant (``workbench/catalog/efficiency.json``
``transformers.recompute_layer_overhead_s``, host seconds of the checkpoint machinery per checkpointed layer, on top of
the layer's own host and the recompute's repeat of its forward share; the part the GPU's work on the micro-batch does
not hide is exposed) on the fit split only, applies it for this run and prints it: least squares of relative
step-time error over the fit-split HF runs with ZeRO 0-2 and no offload (ZeRO-3 and CPU offload carry engine terms of
their own), the other host constants (the layer's, ``workbench.layerops.layer_host_seconds``, ``layer_forward_host_share``,
``lora_module_host_s``) kept. ``benchmarks/fit_hf_host.py --refit-checkpoint`` fits it with the layer and LoRA
constants together (what the catalog holds).
``--leave-one-shape-out`` refits it once per fit shape without that shape's runs and prints the value and that
shape's step-time errors under it (does a mechanism hold on a shape it was not fitted on?), then the fit as above.
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


def refit_recompute_overhead(fit_runs: list) -> float:
    """The checkpoint machinery's host seconds per checkpointed layer (``transformers.recompute_layer_overhead_s``)
    that minimise the squared relative step-time error over ``fit_runs`` with ZeRO 0-2 and no offload (a 0.1 ms grid
    up to 30 ms: the term is not linear, the GPU's layer time hides part of it); applied to the in-memory
    calibration."""
    from workbench import timing

    cal = timing.calibration().setdefault("transformers", {})
    used = [r for r in fit_runs if r["measured"].get("step") and int(r["plan"].zero_stage) <= 2
            and str(r["plan"].offload_optimizer) == "none"]

    def loss(value):
        cal["recompute_layer_overhead_s"] = value
        return sum(((B.predict(r)["step"] - r["measured"]["step"]) / r["measured"]["step"]) ** 2 for r in used)

    best = min((i * 1e-4 for i in range(301)), key=loss)
    cal["recompute_layer_overhead_s"] = best
    print(f"transformers.recompute_layer_overhead_s = {best:.4g} s (least squares over {len(used)} fit-split runs)")
    return best


def leave_one_shape_out(fit_runs: list) -> None:
    """Refit ``recompute_layer_overhead_s`` without each fit shape in turn; print the value and the left-out shape's
    step-time errors (ZeRO 0-2, no offload) under it."""
    used = [r for r in fit_runs if r["measured"].get("step") and int(r["plan"].zero_stage) <= 2
            and str(r["plan"].offload_optimizer) == "none"]
    errs = []
    for shape in sorted({r["shape_id"] for r in used}):
        refit_recompute_overhead([r for r in used if r["shape_id"] != shape])
        own = [(B.predict(r)["step"] - r["measured"]["step"]) / r["measured"]["step"] for r in used
               if r["shape_id"] == shape]
        errs += own
        print(f"  without {shape}: its {len(own)} runs " + " ".join(f"{e:+.1%}" for e in own))
    s = B.summary(errs)
    print(f"leave-one-shape-out step error over {s['n']} runs: median {s['median']:.1%} worst {s['worst']:.1%}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=B.CORPUS)
    ap.add_argument("--refit-time", action="store_true", help="fit transformers.recompute_layer_overhead_s on the "
                                                                 "fit split and apply it for this run")
    ap.add_argument("--leave-one-shape-out", action="store_true",
                    help="refit without each fit shape in turn and print that shape's errors (implies --refit-time)")
    args = ap.parse_args(argv)
    split = json.loads(B.SPLIT.read_text())
    from corpus.describe import HF_STACKS

    runs = [r for r in B.corpus_runs(args.corpus) if r["stack"] in HF_STACKS and not r.get("oom")]
    if args.leave_one_shape_out:
        leave_one_shape_out([r for r in runs if r["shape_id"] not in split["test"]])
    if args.refit_time or args.leave_one_shape_out:
        refit_recompute_overhead([r for r in runs if r["shape_id"] not in split["test"]])
    rows = {"fit": [], "test": []}
    plain = {"fit": [], "test": []}  # ZeRO 0-2 without offload: the stack's own compute and checkpoint terms
    print(f"{'run':58s} {'split':5s} {'allocated':>10s} {'device':>8s} {'step':>8s}")
    for run in sorted(runs, key=lambda r: r["run_id"]):
        side = "test" if run["shape_id"] in split["test"] else "fit"
        err = B.errors(run, B.predict(run))
        rows[side].append(err)
        if int(run["plan"].zero_stage) <= 2 and str(run["plan"].offload_optimizer) == "none":
            plain[side].append(err["step"])
        cells = " ".join("       -" if err[q] is None else f"{err[q]:+8.1%}" for q in B.QUANTITIES)
        print(f"{run['run_id']:58s} {side:5s}   {cells}")
    for side, errs in rows.items():
        parts = []
        for q in B.QUANTITIES:
            s = B.summary([e[q] for e in errs])
            parts.append(f"{q} median {s['median']:.1%} worst {s['worst']:.1%}" if s.get("n") else f"{q} -")
        print(f"{side}: {len(errs)} runs; " + "; ".join(parts))
    for side, errs in plain.items():
        s = B.summary(errs)
        if s.get("n"):
            print(f"{side}, ZeRO 0-2 without offload: {s['n']} runs; step median {s['median']:.1%} worst {s['worst']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
