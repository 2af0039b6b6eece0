"""Real megatron-core 1F1B runs on the CPU with unequal pipeline stages, against the time model's bubble.

Two processes (gloo, one thread each) train the same 8-layer model (hidden 512, 256 tokens, a 128-token vocabulary
so the output layer is a few per cent of a layer) through ``workbench run --engine megatron --pp 2`` with the layers
split 4/4, 6/2, 2/6, 7/1 and 1/7 (``--decoder-first/last-pipeline-num-layers``), at 2 and 8 micro-batches per step.
Each run's median step (``workbench run --json``: the steps after the first two) is set beside three predictions
made from one number, a layer's forward + backward seconds, taken from the even split at the same micro-batch count
through the textbook (m + p − 1)·(f + b):

* ``schedule``: :func:`workbench.schedule.one_f_one_b_seconds` over the stages as they are (what the time model's
  bubble is, :func:`workbench.schedule.bubble_seconds`);
* ``simulated``: the event simulation of the same schedule (:func:`workbench.schedule.pipeline_schedule`);
* ``closed form``: (m + p − 1) × the slowest stage, the bubble the time model used before.

With ``--vp 2`` the same through Megatron's interleaved schedule (two model chunks per stage; the splits whose
counts divide by 2), the even split's layer taken through m·(f + b) + (p − 1)/v·(f + b) and the closed form
m + (p − 1)/v times the slowest stage.

The backward is taken as twice the forward. The stages' own speeds are not fitted: a split's prediction is its layer
counts times the even split's layer. Run from the repository root (about 8 minutes on 2 cores; keep the machine
otherwise idle)::

    python benchmarks/pipeline_uneven_cpu.py [--steps 6] [--out benchmarks/results/pipeline_uneven_cpu.txt]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.schedule import bubble_seconds, pipeline_schedule  # noqa: E402

LAYERS = 8
SPLITS = ((4, 4), (6, 2), (2, 6), (7, 1), (1, 7))
MICROBATCHES = (2, 8)
BACKWARD_OVER_FORWARD = 2.0
MODEL = ["--layers", str(LAYERS), "--hidden", "512", "--heads", "8", "--ffn", "2048", "--vocab", "128",
         "--seq", "256"]


def measure(first: int, last: int, m: int, steps: int, v: int = 1) -> float:
    """Median step seconds of one real run (``workbench run --json``)."""
    cmd = [sys.executable, "-m", "workbench", "run", "--engine", "megatron", *MODEL, "--pp", "2", "--vp", str(v),
           "--nproc", "2", "--mbs", "1", "--gbs", str(m), "--steps", str(steps), "--precision", "fp32", "--json"]
    if (first, last) != (LAYERS // 2, LAYERS // 2):
        cmd += ["--decoder-first-pipeline-num-layers", str(first)]
        if v == 1:  # interleaved: the first alone (both ends and no middle stage is a split megatron-core can't build)
            cmd += ["--decoder-last-pipeline-num-layers", str(last)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    if record["status"] != "completed":
        raise SystemExit(f"run {first}/{last} m={m} did not complete: {record.get('reason')}")
    return float(record["measured"]["median_step_seconds"])


def predictions(first: int, last: int, m: int, layer_seconds: float, v: int = 1) -> dict:
    f = layer_seconds / (1 + BACKWARD_OVER_FORWARD)
    b = layer_seconds - f
    stages = [(first * f, first * b), (last * f, last * b)]
    slowest = max(first, last) * layer_seconds
    kind = "interleaved" if v > 1 else "1f1b"
    simulated = pipeline_schedule(kind, 2, m, v, forward_seconds=max(s[0] for s in stages),
                                  backward_seconds=max(s[1] for s in stages), stage_seconds=stages).total_seconds
    return {"schedule": m * slowest + float(bubble_seconds(2, m, v, stages[0], stages[0], stages[1])),
            "simulated": simulated, "closed form": (m + 1 / v) * slowest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--vp", type=int, default=1, help="model chunks per stage (2: Megatron's interleaved 1F1B; the "
                    "splits then take 4/4, 6/2 and 2/6, whose counts divide by 2)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args()
    v = args.vp
    splits = [s for s in SPLITS if s[0] % v == 0 and s[1] % v == 0]
    lines = [f"{LAYERS}-layer model, hidden 512, 256 tokens, fp32, PP 2" + (f" VP {v}" if v > 1 else "")
             + f" on 2 CPU processes (gloo, one thread each); median step of {args.steps} steps less the first two",
             f"{'split':>6} {'m':>3} {'measured s':>11} {'schedule':>9} {'error':>7} {'simulated':>10} {'error':>7} "
             f"{'closed form':>12} {'error':>7}"]
    errors = {"schedule": [], "simulated": [], "closed form": []}
    for m in MICROBATCHES:
        even = measure(LAYERS // 2, LAYERS // 2, m, args.steps, v)
        layer = even / ((m + 1 / v) * (LAYERS // 2))  # m (f + b) + (p - 1)/v (f + b) for equal stages
        for first, last in splits:
            measured = (even if (first, last) == (LAYERS // 2, LAYERS // 2)
                        else measure(first, last, m, args.steps, v))
            pred = predictions(first, last, m, layer, v)
            row = f"{first:>3}/{last:<2} {m:>3} {measured:>11.3f}"
            for name, width in (("schedule", 9), ("simulated", 10), ("closed form", 12)):
                err = pred[name] / measured - 1
                if (first, last) != (LAYERS // 2, LAYERS // 2):
                    errors[name].append(abs(err))
                row += f" {pred[name]:>{width}.3f} {err:>+7.1%}"
            lines.append(row)
            print(lines[-1], flush=True)
    summary = "uneven splits: " + "; ".join(
        f"{name} median |error| {statistics.median(v):.1%}, worst {max(v):.1%}" for name, v in errors.items())
    lines.append(summary)
    print("\n".join(lines[:2] + [summary]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
