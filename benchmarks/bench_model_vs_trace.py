"""The default memory model's allocated peak against the allocation trace, on plans nobody measured.

The allocation trace (:mod:`workbench.allocsim`: a transformers model built on the meta device and trained for a few
DeepSpeed steps in the order of DeepSpeed's own code, every block the CUDA caching allocator would be asked for) gives
the measured ``max_memory_allocated`` of the corpus runs it covers to the byte: 34 recorded allocator histories
(``benchmarks/alloc_history.py``) and the blind batches final27-final28 (``benchmarks/results/alloc_sim_final2*``).
So it can stand in for a measurement where no GPU ran: this script sets the default model
(:func:`workbench.estimate.estimate`, closed-form, what the planner and the widgets use) beside the trace for every
corpus transformers shape under a grid of plans — ZeRO 0-3, the optimizer on the CPU, gradient checkpointing, eager
and sdpa attention, micro-batches 1-4 — most of which were never run on a GPU. Nothing is fitted; the fit and test
sides of ``benchmarks/accuracy_split.json`` are reported apart all the same.

Scope: the trace's (one GPU, bf16, DeepSpeed ZeRO-0 to 3; the optimizer on the CPU at ZeRO-2/3 without gradient
accumulation; no LoRA). Run: ``python benchmarks/bench_model_vs_trace.py [--shapes SUBSTR,...] [--runs]
[--jobs 2]`` (about 1-4 s a plan on one core). Its output is kept in ``benchmarks/results/model_vs_trace.txt``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))
sys.path.insert(2, str(ROOT / "benchmarks" / "corpus"))

SPLIT = ROOT / "benchmarks" / "accuracy_split.json"
STEPS = 3
"""Training steps traced: Adam's states are made at the first step, so the second step's backward and step are the
first with every state alive; the third repeats the second."""

# (ZeRO stage, attn_implementation, gradient checkpointing, micro-batch, optimizer on the CPU)
PLANS = (
    (0, "sdpa", False, 1, False), (1, "sdpa", False, 2, False), (2, "sdpa", False, 1, False),
    (2, "eager", True, 2, False), (2, "sdpa", False, 4, False), (2, "sdpa", False, 1, True),
    (3, "sdpa", False, 1, False), (3, "sdpa", True, 2, False), (3, "eager", True, 1, False),
    (3, "sdpa", False, 1, True),
)


def plan_name(zero, attn, ckpt, mbs, offload) -> str:
    return f"z{zero}/{attn}{'/ckpt' if ckpt else ''}{'/off-cpu' if offload else ''}/mbs{mbs}"


def compare(job) -> dict:
    """One shape under one plan: the default model's allocated peak and the trace's."""
    shape_id, seq_length, config, (zero, attn, ckpt, mbs, offload) = job
    warnings.simplefilter("ignore")
    from bench_accuracy import hf_shape_spec
    from workbench.allocsim import replayed_peaks
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec, ParallelPlan

    out = dict(shape_id=shape_id, plan=plan_name(zero, attn, ckpt, mbs, offload))
    try:
        model = hf_shape_spec(shape_id, config, seq_length, attn)
        plan = ParallelPlan(engine="deepspeed", zero_stage=zero, world_size=1, micro_batch_size=mbs,
                            global_batch_size=mbs, precision="bf16", recompute="full" if ckpt else "none",
                            offload_optimizer="cpu" if offload else "none", adam="fused", overlap_comm=zero >= 3)
        cluster = ClusterSpec(gpu="H200", gpus_per_node=1, host_cpu_cores_per_node=16, cpu_adam_threads=16)
        est = estimate(model, cluster, plan, checks=False)
        traced = replayed_peaks(config, seq_length=seq_length, micro_batch=mbs, zero_stage=zero,
                                attn_implementation=attn, gradient_checkpointing=ckpt, steps=STEPS,
                                offload_optimizer=offload)
    except (ValueError, RuntimeError, MemoryError) as exc:
        return dict(out, error=f"{type(exc).__name__}: {exc}"[:200])
    memory = est.memory.to_dict()
    model_bytes, trace_bytes = memory["allocated_bytes"], traced.peak_allocated_bytes
    return dict(out, model=model_bytes, trace=trace_bytes, error_fraction=(model_bytes - trace_bytes) / trace_bytes,
                phase=memory.get("peak_phase"))


def summary(rows: list) -> str:
    errs = [r["error_fraction"] for r in rows]
    if not errs:
        return "n   0"
    under = [e for e in errs if e < 0]
    return (f"n {len(errs):>4}  median |err| {statistics.median(abs(e) for e in errs):5.1%}  worst "
            f"{max(errs, key=abs):+6.1%}  under {len(under):>3} (worst {min(under, default=0.0):+6.1%})  "
            f"within 2 % {sum(abs(e) <= 0.02 for e in errs):>4}  over 5 % {sum(abs(e) > 0.05 for e in errs):>3}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="", help="comma-separated substrings of the shape ids to run (default all)")
    ap.add_argument("--plans", default="", help="comma-separated substrings of the plan names to run (default all)")
    ap.add_argument("--runs", action="store_true", help="print every plan's figures")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--out", type=Path, help="also write every row as JSON lines")
    args = ap.parse_args(argv)
    from runs import HF_SHAPES

    split = json.loads(SPLIT.read_text())
    fit, test = set(split["fit"]), set(split["test"])
    wanted = [s.strip() for s in args.shapes.split(",") if s.strip()]
    plans = [p for p in PLANS if not args.plans or any(s.strip() in plan_name(*p) for s in args.plans.split(","))]
    jobs = [(sid, int(shape["seq_length"]), shape["config"], p) for sid, shape in HF_SHAPES.items()
            if (sid in fit or sid in test) and (not wanted or any(w in sid for w in wanted)) for p in plans]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(compare, jobs))
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok = [r for r in rows if "error" not in r]
    if args.runs:
        for r in sorted(ok, key=lambda r: r["error_fraction"]):
            side = "fit " if r["shape_id"] in fit else "test"
            print(f"{side} {r['shape_id']:<26} {r['plan']:<26} model {r['model'] / 2**30:7.2f} GiB  trace "
                  f"{r['trace'] / 2**30:7.2f} GiB  {r['error_fraction']:+6.1%}  ({r['phase']})")
    for r in rows:
        if "error" in r:
            print(f"not compared: {r['shape_id']} {r['plan']}: {r['error']}")
    print(f"default model's allocated peak against the allocation trace ({STEPS} steps), transformers models on one "
          f"H200, {len(ok)} plans of {len({r['shape_id'] for r in ok})} shapes:")
    for name, side in (("fit shapes ", fit), ("test shapes", test)):
        print(f"  {name}  {summary([r for r in ok if r['shape_id'] in side])}")
    for stage in range(4):
        print(f"  ZeRO-{stage}      {summary([r for r in ok if r['plan'].startswith(f'z{stage}/')])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
