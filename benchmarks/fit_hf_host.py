"""Fit the micro-step host time of transformers models (catalog ``layer_ops.op_host_s``, ``transformers``:
``layer_base_host_s``, ``lora_module_host_s``, ``recompute_layer_overhead_s``) on the fit split.

A micro-step lasts max(host, GPU, forward host + backward GPU): the host queues the micro-batch's kernels ahead of
the GPU, so only the host time beyond the micro-batch's GPU time, or the forward's beyond the forward's, is exposed (:func:`workbench.timing.microstep_host`,
:func:`workbench.timing.hf_checkpoint_host`). Per micro-batch of a stage of L decoder layers, f of them checkpointed,
n LoRA-adapted projections per layer and, for an MoE model, ``moe_block_host_s`` = e per layer, the host works

    L·(c + e) + L·(1 + f)·n·lora_module_host_s + L·f·(recompute_layer_overhead_s + s·(c + e)),
    c = layer_base_host_s + op_host_s · operators


(every layer's own forward and backward, c seconds: a base plus a cost per ATen operator the layer dispatches,
counted per layer design by benchmarks/count_layer_ops_cpu.py, :func:`workbench.layerops.layer_host_seconds`; a
checkpointed layer's adapters run twice, in the forward and in the
recompute; its recompute repeats the forward's share s of the layer's host, ``layer_forward_host_share``, measured by
benchmarks/gpu_hf_layer_host.py and held here, and the checkpoint machinery adds ``recompute_layer_overhead_s``),
plus DeepSpeed ZeRO-2's gradient hooks in every micro-batch but the last. The terms are additive in the step, so
every run is priced once with the three constants and ``moe_block_host_s`` at 0 and the grid reads
``step(0) + wait(host) + (m − 1)·wait(host + hooks)``, ``wait`` being :func:`workbench.timing.host_wait`
(``max(0, host − gpu, s·host − gpu_forward)``: the forward's share ``s`` of the layers' host against the layers'
forward kernels).

Runs the constants can move: Hugging Face runs (corpus stack ``hf-ds``) with ZeRO 0-2 and no CPU offload (its own CPU
Adam terms), of the fit split's shapes only. ZeRO-3 runs are left out: their per-module hooks have their own host term
(``deepspeed.zero3_*``), which the layer floor does not join. The fit minimises the squared relative step-time error,
each shape weighted alike, over a grid (base 0-4 ms in 0.05 ms, operator 0-40 us in 0.25 us, checkpoint
machinery 0-20 ms in 0.1 ms, LoRA projection 0-1 ms in 0.02 ms); leave-one-shape-out refits without each fit shape and prints that shape's errors. By
default the checkpoint machinery's constant is held at the catalog's value and only the other two are fitted;
``--refit-checkpoint`` fits all three (what the catalog holds). The test split is only reported, never fitted on.

    python benchmarks/fit_hf_host.py                      # fit, leave-one-shape-out, fit and test rows
    python benchmarks/fit_hf_host.py --refit-checkpoint   # the same with the checkpoint machinery refitted
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BASE_GRID_S = np.arange(0.0, 0.004 + 1e-12, 0.00005)
OP_GRID_S = np.arange(0.0, 40e-6 + 1e-12, 0.25e-6)
RECOMPUTE_GRID_S = np.arange(0.0, 0.020 + 1e-12, 0.0001)
LORA_GRID_S = np.arange(0.0, 0.001 + 1e-12, 0.00002)
ZEROED = ("hf_layer_host_s", "hf_lora_module_host_s", "hf_recompute_layer_s", "moe_block_host_s")


def usable(run) -> bool:
    """A Hugging Face run the fit may use (ZeRO 0-2, no offload, a measured step; either allocator: it does not
    change the host's work)."""
    from corpus.describe import HF_STACKS

    plan = run["plan"]
    return (run["stack"] in HF_STACKS and not run.get("oom") and bool(run["measured"].get("step"))
            and int(plan.zero_stage) <= 2 and str(plan.offload_optimizer) == "none")


def host_rows(runs: list) -> list[dict]:
    """Per usable run: the measured step, the step priced with the three constants and the MoE block's host at 0,
    micro-batches, layers of the slowest stage, the checkpointed share f, adapted projections per layer, the
    micro-batch's GPU seconds, the ZeRO-2 hook seconds of a non-last micro-batch, the MoE block's host seconds per
    layer and the forward's share of a layer's host."""
    from workbench import timing as T
    from workbench.layerops import dispatched_ops

    rows = []
    for r in runs:
        if not usable(r):
            continue
        x = T.time_inputs(r["model"], r["cluster"], r["plan"])
        moe = float(x["moe_block_host_s"])
        x.update({k: 0.0 for k in ZEROED})
        terms = T.step_time_terms(**x)
        gpu = terms["host_gpu_microbatch_seconds"]  # the kernels and TP collectives the host competes with
        layers = terms["stage_layers"]
        hooks = T.zero2_hook_seconds(T.StepInputs(**x), layers) if int(r["plan"].zero_stage) == 2 else 0.0
        f = float(x["recompute_fraction"]) if int(x["recompute"]) == 2 else 0.0
        rows.append(dict(run_id=r["run_id"], shape_id=r["shape_id"], measured=float(r["measured"]["step"]),
                         step0=float(terms["step_seconds"]), m=float(x["num_microbatches"]),
                         ops=dispatched_ops(r["model"])[0],
                         layers=float(layers), f=f, lora=float(x["lora_modules_per_layer"]),
                         gpu=float(gpu), hooks=float(hooks), moe=moe,
                         gpu_forward=float(terms["host_gpu_forward_seconds"]),
                         share=float(x["forward_host_share"])))
    return rows


def predicted(rows: list, base, op, lora, recompute) -> np.ndarray:
    """Step seconds of each row (axis 0) for each constant quadruple (axis 1; the four broadcast together), as
    :func:`workbench.timing.compute_terms` prices them."""
    base, op, lora, recompute = (np.atleast_1d(np.asarray(v, dtype=float))[None, :]
                                 for v in (base, op, lora, recompute))
    from workbench.timing import host_wait

    step0, m, layers, f, n, gpu, hooks, moe, share, ops, gpu_fwd = (
        np.array([r.get(k, 0.0) for r in rows], dtype=float)[:, None]
        for k in ("step0", "m", "layers", "f", "lora", "gpu", "hooks", "moe", "share", "ops", "gpu_forward"))
    layer = base + op * ops
    floor = layers * (layer + moe + (1 + f) * n * lora)
    other = floor + np.where(layer > 0, hooks, 0.0)  # the model prices the hooks only where it prices the host
    checkpoint = layers * f * (recompute + share * (layer + moe))
    wait = lambda host: host_wait(host, gpu, share * floor, gpu_fwd)  # noqa: E731
    return step0 + wait(floor + checkpoint) + (m - 1) * wait(other + checkpoint)


def fit(rows: list, recompute_s=None) -> tuple:
    """``(base, op, lora, recompute)`` seconds with the least shape-weighted squared relative error (the smallest
    constants on ties: where no run is host-bound the data ask for none); ``recompute_s`` given: the checkpoint
    machinery's constant is held at it and only the other three are fitted."""
    measured = np.array([r["measured"] for r in rows])[:, None]
    shapes = [r["shape_id"] for r in rows]
    weight = np.array([1.0 / shapes.count(s) for s in shapes])[:, None]
    grid = RECOMPUTE_GRID_S if recompute_s is None else np.array([float(recompute_s)])
    best = (np.inf, 0.0, 0.0, 0.0, 0.0)
    for recompute in grid:
        base, op = (g.ravel() for g in np.meshgrid(BASE_GRID_S, OP_GRID_S, indexing="ij"))
        for lora in LORA_GRID_S:
            loss = np.round((weight * (predicted(rows, base, op, lora, recompute) / measured - 1) ** 2).sum(axis=0),
                            12)
            i = int(np.argmin(loss))
            if loss[i] < best[0]:
                best = (loss[i], float(base[i]), float(op[i]), float(lora), float(recompute))
    return best[1:]


def _ms(c: tuple) -> str:
    return (f"layer base {c[0] * 1e3:.2f} ms + {c[1] * 1e6:.2f} us per operator, LoRA projection {c[2] * 1e3:.2f} ms, "
            f"checkpoint machinery {c[3] * 1e3:.1f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl")
    ap.add_argument("--refit-checkpoint", action="store_true",
                    help="fit recompute_layer_overhead_s, the checkpoint machinery, too (default: held at the "
                         "catalog's value)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    import bench_accuracy as B
    from workbench import timing as T

    held = None if args.refit_checkpoint else T.calibration()["transformers"]["recompute_layer_overhead_s"]

    split = json.loads(B.SPLIT.read_text())
    fit_shapes, test_shapes = set(split["fit"]), set(split["test"])
    rows = host_rows(B.corpus_runs(args.corpus))
    fit_rows = [r for r in rows if r["shape_id"] in fit_shapes]
    test_rows = [r for r in rows if r["shape_id"] in test_shapes]
    c = fit(fit_rows, held)
    print(("" if held is None else "checkpoint machinery held at the catalog's value; ")
          + f"transformers host constants fitted on {len(fit_rows)} fit-split Hugging Face runs (ZeRO 0-2, no offload) "
          f"over {len({r['shape_id'] for r in fit_rows})} shapes: {_ms(c)}")
    print("leave one shape out (constants without the shape; that shape's |error| median / worst, zero -> fitted):")
    for s in sorted({r["shape_id"] for r in fit_rows}):
        cs = fit([r for r in fit_rows if r["shape_id"] != s], held)
        out = [r for r in fit_rows if r["shape_id"] == s]
        measured = np.array([r["measured"] for r in out])
        before = np.abs(predicted(out, 0.0, 0.0, 0.0, 0.0)[:, 0] / measured - 1)
        after = np.abs(predicted(out, *cs)[:, 0] / measured - 1)
        print(f"  {s:<20} {_ms(cs)}  {np.median(before):5.1%} / {before.max():5.1%} -> "
              f"{np.median(after):5.1%} / {after.max():5.1%}  ({len(out)} runs)")
    for title, sel in (("fit", fit_rows), ("test", test_rows)):
        if not sel:
            continue
        p0, p1 = predicted(sel, 0.0, 0.0, 0.0, 0.0)[:, 0], predicted(sel, *c)[:, 0]
        m = np.array([r["measured"] for r in sel])
        print(f"{title} split: {len(sel)} runs, |error| median / worst {np.median(np.abs(p0 / m - 1)):.1%} / "
              f"{np.abs(p0 / m - 1).max():.1%} without the host terms -> {np.median(np.abs(p1 / m - 1)):.1%} / "
              f"{np.abs(p1 / m - 1).max():.1%} with them (measured ms, error without -> with)")
        for r, a, b in zip(sel, p0, p1):
            print(f"  {r['run_id']:<56} {r['measured'] * 1e3:7.1f}  {a / r['measured'] - 1:+6.1%} -> "
                  f"{b / r['measured'] - 1:+6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
