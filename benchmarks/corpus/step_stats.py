"""How a measured training run's per-step wall times become one steady-state step time (measure.py writes it, the
accuracy benchmark reads it; one definition for both).

The protocol follows the per-step traces of the corpus (``step_seconds`` of every record, warm-up included),
not any model's residuals. Against the fastest of a run's steps 4-6, the second step is 1.00-1.07 x (median per
regime) under megatron-core DDP and DeepSpeed ZeRO 0-2, but 1.41 x under megatron-core + ZeRO-3 and 2.69 x under
Hugging Face + ZeRO-3 (90th percentile 3.5 x): ZeRO-3 records its module trace in the first step and prefetches
from the second, so its warm-up lasts a step longer. From step 3 on the slowest step is spread evenly over steps
3-6 at ZeRO-3 as elsewhere (step 3 slowest in 21 of 61 ZeRO-3 runs, 64 of 198 others), but 7 of the 61 ZeRO-3
runs were still getting faster at step 6 (GPT-2-small width with 12 layers: 237, 206, 200, 156 ms), so six steps
cannot show their steady state. Hence ZeRO-3 runs get twice the steps with the last half timed.
"""
from __future__ import annotations

import statistics

STEPS = 6
"""Steps of a run that is not ZeRO-3."""
TIMED = 3
"""Of :data:`STEPS`, the last this many are timed (before them: allocator growth, kernel selection, JIT)."""
ZERO3_STEPS = 12
"""Steps of a ZeRO-3 run (module-trace recording and prefetch warm-up take a step longer, and some thin models
are still speeding up at step 6)."""
ZERO3_TIMED = 6
"""Of :data:`ZERO3_STEPS`, the last this many are timed."""
SETTLED_SPREAD = 0.10
"""A run's timed steps have settled when the slowest is at most this much above the fastest."""


def step_protocol(zero_stage: int) -> tuple[int, int]:
    """``(steps, timed)`` for a run at DeepSpeed ZeRO stage ``zero_stage`` (0 for runs without DeepSpeed)."""
    return (ZERO3_STEPS, ZERO3_TIMED) if int(zero_stage) >= 3 else (STEPS, TIMED)


def spread(values) -> float:
    """How far apart measurements of one thing fall: slowest / fastest − 1."""
    return max(values) / min(values) - 1


def steady_seconds(step_seconds, timed: int) -> float:
    """The steady-state step time of one rank: the median of its last ``timed`` steps."""
    if timed < 1 or not step_seconds:
        raise ValueError(f"steady_seconds: timed={timed} steps of a list of {len(step_seconds)}")
    return statistics.median(step_seconds[-timed:])


def timed_summary(step_seconds, timed: int) -> dict:
    """What a record says about its timed steps: their spread and whether they settled (:data:`SETTLED_SPREAD`)."""
    tail = step_seconds[-timed:]
    s = spread(tail) if len(tail) > 1 and min(tail) > 0 else 0.0
    return dict(timed_spread=s, settled=bool(s <= SETTLED_SPREAD))
