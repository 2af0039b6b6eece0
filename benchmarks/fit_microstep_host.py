"""Fit the per-layer micro-step host time of megatron-core layers (catalog ``megatron_core.layer_base_host_s``) on
the fit split.

A micro-step of megatron-core layers takes max(host, GPU, forward host + backward GPU) under either engine: the host's Python forward and
backward launches, ``c`` per layer, plus at DeepSpeed ZeRO-2 its per-parameter gradient hooks on every
micro-batch but the last (:func:`workbench.timing.microstep_host`), against the micro-batch's GPU time. The term is
additive in the step, so every run is priced once with the constant at 0 and the grid reads
``step(0) + wait(L·c) + (m − 1)·wait(L·c + hooks)`` (``wait``: :func:`workbench.timing.host_wait`, the
forward's share of the host, ``megatron_core.layer_forward_host_share``, against the layers' forward kernels), with ``c = base + op_host_s · operators``
(:func:`workbench.layerops.layer_host_seconds`: the ATen operators one layer of the run's design dispatches, counted
by benchmarks/count_layer_ops_cpu.py, at catalog ``layer_ops.op_host_s``, fitted on the transformers runs by
benchmarks/fit_hf_host.py and held here); ``base`` is fitted: the Python of megatron-core's module structure.

Runs the constant can move: megatron-core local-spec models (no Transformer Engine) under Megatron and under
DeepSpeed ZeRO-0/1/2 (corpus stacks mcore-ddp, mcore-ds and the launcher). The fit minimises the squared relative step-time error over the fit split's
such runs, each shape weighted alike (a shape's runs share its weight), over a grid of ``base`` 0-10 ms in 0.01 ms
steps;
leave-one-shape-out refits without each fit shape and prints that shape's errors. The test split is only reported,
never fitted on.

    python benchmarks/fit_microstep_host.py            # fit, leave-one-shape-out, fit and test rows it moves
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

GRID_S = np.arange(0.0, 0.010 + 1e-12, 0.00001)


def host_rows(runs: list) -> list[dict]:
    """Per run the constant can move: the measured step, the step priced with the constant at 0, micro-batches,
    layers of the slowest stage, the micro-batch's GPU seconds and the ZeRO-2 hook seconds of a non-last
    micro-batch."""
    from workbench import timing as T
    from workbench.layerops import dispatched_ops
    from workbench.specs import AttentionImpl, Implementation

    op_s = T.calibration()["layer_ops"]["op_host_s"]

    rows = []
    for r in runs:
        plan, model = r["plan"], r["model"]
        if (int(plan.zero_stage) >= 3 or model.implementation is not Implementation.MEGATRON
                or model.attention is AttentionImpl.FLASH or not r["measured"].get("step")):
            continue
        x = T.time_inputs(model, r["cluster"], plan)
        x["layer_host_s"] = 0.0
        terms = T.step_time_terms(**x)
        gpu = terms["host_gpu_microbatch_seconds"]  # the kernels and TP collectives the host competes with
        hooks = x["parameter_tensors"] * x["deepspeed_tensor_seconds"] if int(plan.zero_stage) == 2 else 0.0
        rows.append(dict(run_id=r["run_id"], shape_id=r["shape_id"], measured=float(r["measured"]["step"]),
                         step0=float(terms["step_seconds"]), m=float(x["num_microbatches"]),
                         layers=float(terms["stage_layers"]), gpu=float(gpu), hooks=float(hooks),
                         gpu_forward=float(terms["host_gpu_forward_seconds"]),
                         forward_share=float(x["forward_host_share"]),
                         per_op=op_s * dispatched_ops(model)[0]))
    return rows


def predicted(rows: list, c, with_ops: bool = True) -> np.ndarray:
    """Step seconds of each row (axis 0) for each base constant in ``c`` (axis 1), with the layer's operators
    priced (``with_ops``) or not (the step without any host term: ``c`` 0 and ``with_ops`` False)."""
    from workbench.timing import host_wait

    c = np.atleast_1d(np.asarray(c, dtype=float))
    step0, m, layers, gpu, hooks, per_op, gpu_fwd, share = (
        np.array([r.get(k, 0.0) for r in rows], dtype=float)[:, None]
        for k in ("step0", "m", "layers", "gpu", "hooks", "per_op", "gpu_forward", "forward_share"))
    host = layers * (c[None, :] + (per_op if with_ops else 0.0))
    other = np.where(host > 0, host + hooks, 0.0)  # the model prices the hooks only where it prices the host
    wait = lambda h: host_wait(h, gpu, share * host, gpu_fwd)  # noqa: E731
    return step0 + wait(host) + (m - 1) * wait(other)


def fit(rows: list) -> float:
    """The grid constant with the least shape-weighted squared relative error (the smallest such constant on ties:
    where no run is host-bound the data ask for none)."""
    measured = np.array([r["measured"] for r in rows])[:, None]
    shapes = [r["shape_id"] for r in rows]
    weight = np.array([1.0 / shapes.count(s) for s in shapes])[:, None]
    loss = (weight * (predicted(rows, GRID_S) / measured - 1) ** 2).sum(axis=0)
    return float(GRID_S[int(np.argmin(np.round(loss, 12)))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    import bench_accuracy as B
    from workbench import timing as T

    split = json.loads(B.SPLIT.read_text())
    fit_shapes, test_shapes = set(split["fit"]), set(split["test"])
    runs = [r for r in B.old_runs() + B.corpus_runs(args.corpus)
            if not r.get("oom") and not r["plan"].expandable_segments]
    rows = host_rows(runs)
    fit_rows = [r for r in rows if r["shape_id"] in fit_shapes]
    test_rows = [r for r in rows if r["shape_id"] in test_shapes]
    c = fit(fit_rows)
    print(f"megatron_core.layer_base_host_s fitted on {len(fit_rows)} fit-split megatron-core local-spec runs (Megatron, ZeRO-0/1/2) over "
          f"{len({r['shape_id'] for r in fit_rows})} shapes: {c * 1e3:.2f} ms per layer per micro-batch, plus "
          f"{T.calibration()['layer_ops']['op_host_s'] * 1e6:.2f} us per operator it dispatches")
    print("leave one shape out (constant without the shape; that shape's |error| median / worst, before -> after):")
    for s in sorted({r["shape_id"] for r in fit_rows}):
        cs = fit([r for r in fit_rows if r["shape_id"] != s])
        out = [r for r in fit_rows if r["shape_id"] == s]
        before = np.abs(predicted(out, 0.0, False)[:, 0] / [r["measured"] for r in out] - 1)
        after = np.abs(predicted(out, cs)[:, 0] / [r["measured"] for r in out] - 1)
        print(f"  {s:<24} {cs * 1e3:5.2f} ms  {np.median(before):5.1%} / {before.max():5.1%} -> "
              f"{np.median(after):5.1%} / {after.max():5.1%}  ({len(out)} runs)")
    for title, sel in (("fit", fit_rows), ("test", test_rows)):
        moved = [(r, p0, p1) for r, p0, p1 in zip(sel, predicted(sel, 0.0, False)[:, 0], predicted(sel, c)[:, 0])
                 if p1 > p0 * (1 + 1e-9)]
        print(f"{title} split: {len(moved)} of {len(sel)} runs move (measured ms, error without -> with the term)")
        for r, p0, p1 in moved:
            print(f"  {r['run_id']:<56} {r['measured'] * 1e3:7.1f}  {p0 / r['measured'] - 1:+6.1%} -> "
                  f"{p1 / r['measured'] - 1:+6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
