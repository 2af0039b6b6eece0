"""How good is the OOM ladder's answer? For a grid of plans that do not fit (catalog models on one node of 8 GPUs,
DeepSpeed ZeRO-0/1/2 and Megatron layouts, two micro batches), the ladder's first fitting plan is priced against the
planner's fastest plan for the same model, GPUs and global batch judged the same way (at the held-out error band's
upper side, no headroom: ``search(..., fit_on='band', headroom=0)``). Prints how often the ladder ends on a plan that
fits, how far its step time is from the planner's best (median, 90th percentile, worst), and how many of its answers
offload to the CPU, per rung that ended it.

Both sides are the workbench's own models (no measurement): this measures the advice's decisions, not the numbers'
accuracy (``bench_accuracy.py`` does that).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ladder.py
"""
from __future__ import annotations

import itertools
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench import advisor, planner  # noqa: E402
from workbench.catalog import gpu, model  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.specs import ClusterSpec, ParallelPlan  # noqa: E402

MODELS = ("gpt3-2.7b", "gpt3-6.7b", "llama2-7b", "llama3-8b", "mistral-7b", "llama2-13b")
GPUS = ("A100-40GB", "A100-80GB", "H100-SXM")
LAYOUTS = (dict(engine="deepspeed", zero_stage=0), dict(engine="deepspeed", zero_stage=1),
           dict(engine="deepspeed", zero_stage=2), dict(engine="megatron"),
           dict(engine="megatron", tensor_parallel=2, sequence_parallel=True),
           dict(engine="megatron", pipeline_parallel=2))
MICRO_BATCHES = (1, 4)
GLOBAL_BATCH = 64
WORLD = 8


def _rung_kind(step) -> str:
    """What ended the ladder, in a few words."""
    plan = step.plan
    if str(plan.offload_optimizer) != "none":
        return "ZeRO-3 + CPU offload"
    return {0: "allocator", 1: "micro batch", 2: "recompute", 3: "shard states on the GPU"}.get(
        step.step, "ZeRO-3 on the GPU" if int(plan.zero_stage) == 3 else f"step {step.step}")


def main() -> int:
    warnings.simplefilter("ignore")
    gaps, kinds, failed, total = [], {}, [], 0
    for name, g in itertools.product(MODELS, GPUS):
        m = model(name)
        cluster = ClusterSpec(gpu=gpu(g), gpus_per_node=WORLD)
        try:
            best = planner.search(m, cluster, global_batch_size=GLOBAL_BATCH, headroom=0.0, fit_on="band",
                                  top=1).best
        except ValueError:
            best = None
        for layout, mbs in itertools.product(LAYOUTS, MICRO_BATCHES):
            try:
                plan = ParallelPlan(world_size=WORLD, micro_batch_size=mbs, global_batch_size=GLOBAL_BATCH, **layout)
                if estimate(m, cluster, plan, checks=False).memory.fits:
                    continue
                ladder = advisor.oom_ladder(m, cluster, plan)
            except ValueError:
                continue
            total += 1
            last = ladder[-1] if ladder else None
            if last is None or not last.fits:
                failed.append(f"{name} on {g}: {planner.describe_plan(plan)}")
                continue
            kind = _rung_kind(last)
            kinds.setdefault(kind, []).append(last.step_seconds)
            if best is not None:
                gaps.append((last.step_seconds / best.step_seconds - 1, kind, name, g, planner.describe_plan(plan),
                             planner.describe_plan(last.plan), planner.describe_plan(best.plan)))
    print(f"OOM ladder over {total} plans that do not fit ({len(MODELS)} models x {len(GPUS)} GPUs x "
          f"{len(LAYOUTS)} layouts x micro batch {MICRO_BATCHES}, {WORLD} GPUs, global batch {GLOBAL_BATCH})")
    print(f"  ends on a plan that fits: {total - len(failed)} of {total}")
    offload = len(kinds.get("ZeRO-3 + CPU offload", []))
    print(f"  of those, offloading to the CPU: {offload}")
    for kind, values in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        print(f"    ended by {kind:<26} {len(values):>3}")
    if gaps:
        values = sorted(x[0] for x in gaps)
        p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
        print(f"  step time of the ladder's plan over the planner's fastest plan: median {statistics.median(values):+.1%}, "
              f"90th percentile {p90:+.1%}, worst {values[-1]:+.1%} ({len(values)} plans)")
        worst = max(gaps, key=lambda x: x[0])
        print(f"  worst: {worst[2]} on {worst[3]}, {worst[4]} -> {worst[5]} ({worst[1]}); the planner: {worst[6]}")
    for line in failed:
        print(f"  no fitting plan on the ladder: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
