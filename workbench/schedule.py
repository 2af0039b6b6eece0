"""Pipeline schedules as explicit timelines: GPipe, 1F1B and Megatron's interleaved 1F1B.

Each pipeline rank runs a fixed list of operations (forward or backward of one micro-batch on one model chunk) in
the order its schedule prescribes; an operation starts when the rank is free and its input has arrived (the previous
virtual stage's forward, or the next virtual stage's backward, plus ``p2p_seconds`` for the transfer). Simulating
that gives start/end times for every operation — the data a Gantt chart draws — and the bubble.

Orders follow megatron-core ``pipeline_parallel/schedules.py``:

- 1F1B (``forward_backward_pipelining_without_interleaving``): rank r runs min(p−r−1, m) warm-up forwards, then
  alternates one forward and one backward, then drains the remaining backwards.
- interleaved (``..._with_interleaving``): v model chunks per rank (virtual stage k = chunk·p + rank); virtual
  micro-batch k maps to chunk (k // p) mod v and micro-batch (k // (p·v))·p + k mod p; backwards visit chunks in
  reverse; warm-up is 2·(p−r−1) + (v−1)·p operations; m must be a multiple of p.
- GPipe: all forwards, then all backwards.

Analytic bubble (Narayanan et al. 2021, arXiv 2104.04473 §2.2): (p−1)/m for GPipe and 1F1B, (p−1)/(v·m) interleaved.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.npscalar import maximum, minimum, where

KINDS = ("gpipe", "1f1b", "interleaved")


def bubble_fraction(pipeline_parallel, num_microbatches, virtual_pipeline=1):
    """Pipeline bubble time over ideal time: (p−1)/(v·m) (Narayanan et al. 2021 §2.2.1–2.2.2; v=1 for 1F1B/GPipe).
    Works on scalars and numpy arrays."""
    return (pipeline_parallel - 1) / (virtual_pipeline * num_microbatches)


def one_f_one_b_seconds(pipeline_parallel, num_microbatches, first, middle, last):
    """Seconds of a 1F1B pipeline (no interleaving, no p2p time) over m = ``num_microbatches`` micro-batches whose
    stages take ``first`` = (f, b), the forward and backward of one micro-batch on stage 0, ``middle`` on each of
    stages 1 to p−2 and ``last`` on stage p−1 (an uneven split, or the output layer and loss on the last stage).
    Scalars and numpy arrays alike, so the planner prices every plan at once.

    The longest of a family of paths through the schedule's dependencies: the first k_l = min(p − l, m) forwards
    flow through stages 0..l, whose k_l-th ends at F_{<l} + f_l + (k_l − 1)·max_{t≤l} f_t (a flow shop of equal
    jobs); stage l's first backward follows, and its gradient goes back to a stage j ≤ l; stage j then runs the rest
    of its m·(f_j + b_j) without a gap, and its last gradient goes back to stage 0 (B_{<j}). Over the middle stages
    each path is piecewise linear in j and l, so the stages 0, 1, p−2, p−1 and the bend p − m are the only
    candidates. With equal stages it is the textbook (m + p − 1)·(f + b) (Narayanan et al. 2021 §2.2.1). Against the
    event simulation (:func:`pipeline_schedule`) of first/middle/last splits it is never longer and at most a few
    per cent shorter (``tests/test_schedule_uneven.py``); the closed form (m + p − 1) × the slowest stage was up to
    2.2× too long."""
    p, m = pipeline_parallel, num_microbatches
    (f0, b0), (fm, bm), (fl, bl) = first, middle, last

    def stage(j, x0, xm, xl):
        return where(j == 0, x0, where(j == p - 1, xl, xm))

    def before(j, x0, xm, xl):  # the sum over stages 0 .. j-1 (j may be p: all of them)
        return where(j == 0, 0.0, x0 + (minimum(maximum(j, 1), p - 1) - 1) * xm + where(j >= p, xl, 0.0))

    upto_middle = where(p > 2, maximum(f0, fm), f0)
    all_forward, all_backward = before(p, f0, fm, fl), before(p, b0, bm, bl)
    inner = maximum(p - 2, 1)
    candidates = [minimum(c, p - 1) for c in (0, 1, minimum(maximum(p - m, 1), inner), inner, p - 1)]
    # per candidate stage: where its first backward's path arrives from (as the l of a path), and what stage j adds
    # from its first backward on (as the j of a path: the rest of its work without a gap, or its last micro-batch's
    # round trip after its last forward), both less the gradients' way back down to it
    arrives, adds, drains = [], [], []
    for c in candidates:
        k = minimum(p - c, m)
        f, b = stage(c, f0, fm, fl), stage(c, b0, bm, bl)
        slowest_forward = where(c == 0, f0, where(c >= p - 1, maximum(upto_middle, fl), upto_middle))
        back_below = before(c + 1, b0, bm, bl)  # the backwards of stages 0 .. c
        home = back_below - b  # stage c's last gradient back to stage 0
        trip = all_forward + all_backward - before(c + 1, f0, fm, fl) - back_below
        steady = m * (f + b) - k * f + home
        cooldown = where(k < m, (m - k) * (f + b) + trip + b + home, steady)
        arrives.append(before(c, f0, fm, fl) + f + (k - 1) * slowest_forward + back_below)
        adds.append(maximum(steady, cooldown) - back_below)
        drains.append(before(c, f0, fm, fl) + f + (m - 1) * slowest_forward + trip + b + home)
    best = m * (fl + bl)
    for i, (l, arrive) in enumerate(zip(candidates, arrives)):
        best = maximum(best, drains[i])
        for j, add in zip(candidates, adds):
            best = maximum(best, where(j <= l, arrive + add, 0.0))
    return where(p == 1, m * (fl + bl), best)


def bubble_seconds(pipeline_parallel, num_microbatches, virtual_pipeline, first, middle, last):
    """Idle seconds of the slowest stage over one step of Megatron's 1F1B schedule with ``virtual_pipeline`` model
    chunks per rank, for stages of ``first`` / ``middle`` / ``last`` = (forward, backward) of one micro-batch:
    :func:`one_f_one_b_seconds` less m × the slowest stage, divided by v (interleaving divides the idle time by v,
    Narayanan et al. 2021 §2.2.2). Equal stages give the textbook (p−1)/(v·m) of the ideal time
    (:func:`bubble_fraction`). Against the event simulation of first/middle/last splits: 1F1B never longer and at
    most a few per cent shorter; interleaved within −2 / +8 % (``tests/test_schedule_uneven.py``), where (p−1)/v ×
    the slowest stage was up to 24 % long. Scalars and numpy arrays alike."""
    m = num_microbatches
    slowest = maximum(maximum(first[0] + first[1], last[0] + last[1]),
                      where(pipeline_parallel > 2, middle[0] + middle[1], 0.0))
    slowest = where(pipeline_parallel == 1, last[0] + last[1], slowest)
    idle = one_f_one_b_seconds(pipeline_parallel, m, first, middle, last) - m * slowest
    return maximum(idle, 0.0) / virtual_pipeline


def warmup_forwards(pipeline_parallel, stage, num_microbatches, virtual_pipeline=1):
    """Forwards (model-chunk forwards when interleaved) pipeline rank ``stage`` runs before its first backward.

    megatron-core ``pipeline_parallel/schedules.py`` (``get_pp_rank_microbatches``; the same count opens
    ``forward_backward_pipelining_without_interleaving``): without interleaving ``p − stage − 1``; with v model
    chunks ``2·(p − stage − 1) + (v − 1)·g``, where g is ``microbatch_group_size_per_vp_stage`` (Megatron's default,
    and the only value modelled here, is p); either capped at the ``m·v`` forwards the rank has. No pipeline (p = 1)
    gives 0. Scalars and numpy arrays alike.
    """
    p, s, m, v = pipeline_parallel, stage, num_microbatches, virtual_pipeline
    warmup = where(v > 1, 2 * (p - s - 1) + (v - 1) * p, p - s - 1)
    return minimum(warmup, m * v)


def in_flight_microbatches(pipeline_parallel, stage, num_microbatches, virtual_pipeline=1):
    """Micro-batches whose activations rank ``stage`` holds at its peak, in whole-stage units (chunks ÷ v).

    The warm-up forwards (:func:`warmup_forwards`) plus the first steady-state forward are alive before the first
    backward frees one — Megatron's ``max_outstanding_backprops = num_warmup_microbatches + 1`` — capped at the m·v
    chunk-forwards the rank has. 1F1B: ``min(p − stage, m)``; interleaved: ``min(2·(p−stage−1) + (v−1)·p + 1, m·v)
    / v``, for stage 0 Korthikanti et al.'s p·(1 + (p−1)/(p·v)) (arXiv 2205.05198 §4.2.3); no pipeline: 1.
    DeepSpeed's synchronous 1F1B (``runtime/pipe/schedule.py`` ``TrainSchedule.num_pipe_buffers``: ``min(stages −
    stage_id, micro_batches)`` micro-batches between a forward and its backward) keeps the same 1F1B count.
    Scalars and numpy arrays alike.
    """
    m, v = num_microbatches, virtual_pipeline
    return minimum(warmup_forwards(pipeline_parallel, stage, m, v) + 1, m * v) / v


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleEvent:
    """One forward or backward of one micro-batch on one model chunk of one pipeline rank."""

    stage: int
    """Pipeline rank (0 = first)."""
    microbatch: int
    chunk: int
    """Model chunk on this rank (0..v−1); virtual stage = chunk·p + stage."""
    phase: str
    """``fwd`` or ``bwd``."""
    start_s: float
    end_s: float

    def to_dict(self) -> dict:
        return {"stage": self.stage, "microbatch": self.microbatch, "chunk": self.chunk, "phase": self.phase,
                "start_s": self.start_s, "end_s": self.end_s}


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """A simulated pipeline timeline."""

    kind: str
    pipeline_parallel: int
    num_microbatches: int
    virtual_pipeline: int
    forward_seconds: float
    """Forward time of one micro-batch through a whole stage (all its chunks)."""
    backward_seconds: float
    p2p_seconds: float
    events: tuple
    """:class:`ScheduleEvent` in each rank's execution order, rank by rank."""

    @property
    def total_seconds(self) -> float:
        return max(e.end_s for e in self.events) - min(e.start_s for e in self.events)

    @property
    def ideal_seconds(self) -> float:
        """Busy time of one rank: m·(forward + backward)."""
        return self.num_microbatches * (self.forward_seconds + self.backward_seconds)

    @property
    def bubble_seconds(self) -> float:
        return self.total_seconds - self.ideal_seconds

    @property
    def bubble_fraction(self) -> float:
        """Idle time over ideal time, (total − m·(f+b)) / (m·(f+b)) — Narayanan's definition."""
        return self.bubble_seconds / self.ideal_seconds

    def stage_events(self, stage: int) -> list:
        return [e for e in self.events if e.stage == stage]

    def peak_in_flight(self, stage: int) -> float:
        """Most micro-batches (whole-stage units: chunks ÷ v) whose activations are alive on ``stage`` at once —
        an activation lives from its forward until its backward ends."""
        alive = peak = 0
        for e in self.stage_events(stage):
            alive += 1 if e.phase == "fwd" else -1
            peak = max(peak, alive)
        return peak / self.virtual_pipeline

    def to_dict(self) -> dict:
        return {"kind": self.kind, "pipeline_parallel": self.pipeline_parallel,
                "num_microbatches": self.num_microbatches, "virtual_pipeline": self.virtual_pipeline,
                "total_seconds": self.total_seconds, "bubble_fraction": self.bubble_fraction,
                "events": [e.to_dict() for e in self.events]}


def _orders(kind: str, p: int, m: int, v: int) -> list[list[tuple]]:
    """Per rank, the list of (phase, microbatch, chunk) in execution order."""
    orders = []
    for r in range(p):
        if kind == "gpipe":
            ops = [("fwd", i, 0) for i in range(m)] + [("bwd", i, 0) for i in range(m)]
        elif kind == "1f1b":
            warm = int(warmup_forwards(p, r, m))
            ops = [("fwd", i, 0) for i in range(warm)]
            for i in range(m - warm):
                ops += [("fwd", warm + i, 0), ("bwd", i, 0)]
            ops += [("bwd", i, 0) for i in range(m - warm, m)]
        else:  # interleaved
            total = m * v

            def fwd(k):
                return ("fwd", (k // (p * v)) * p + k % p, (k // p) % v)

            def bwd(k):
                return ("bwd", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

            warm = int(warmup_forwards(p, r, m, v))
            ops = [fwd(k) for k in range(warm)]
            for i in range(total - warm):
                ops += [fwd(warm + i), bwd(i)]
            ops += [bwd(k) for k in range(total - warm, total)]
        orders.append(ops)
    return orders


def pipeline_schedule(kind: str, p: int, m: int, v: int = 1, *, forward_seconds: float, backward_seconds: float,
                      p2p_seconds: float = 0.0, stage_seconds=None) -> Schedule:
    """Simulate ``kind`` (``gpipe``, ``1f1b`` or ``interleaved``) with ``p`` stages, ``m`` micro-batches and ``v``
    chunks per rank. ``forward_seconds``/``backward_seconds`` are per micro-batch per whole stage (a chunk takes
    1/v of them); ``p2p_seconds`` is added whenever an activation or gradient moves to another rank.
    ``stage_seconds``: ``(forward, backward)`` per stage where stages differ (an uneven layer split); then
    ``forward_seconds``/``backward_seconds`` should be the slowest stage's, which the ideal time and bubble use."""
    kind = str(kind).lower()
    if kind not in KINDS:
        raise ValueError(f"schedule kind={kind!r} is not one of: {', '.join(KINDS)}")
    for name, value in (("pipeline_parallel", p), ("num_microbatches", m), ("virtual_pipeline", v)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name}={value} must be an integer >= 1")
    if kind != "interleaved" and v != 1:
        raise ValueError(f"virtual_pipeline={v} needs kind='interleaved' (got kind={kind!r})")
    if kind == "interleaved" and m % p:
        raise ValueError(f"interleaved schedule: num_microbatches={m} must be a multiple of pipeline_parallel={p}")
    if forward_seconds < 0 or backward_seconds < 0 or p2p_seconds < 0:
        raise ValueError("forward_seconds, backward_seconds and p2p_seconds must be >= 0")
    if stage_seconds is None:
        stage_seconds = [(forward_seconds, backward_seconds)] * p
    stage_seconds = [(float(a), float(b)) for a, b in stage_seconds]
    if len(stage_seconds) != p or min(min(a, b) for a, b in stage_seconds) < 0:
        raise ValueError(f"stage_seconds needs one (forward, backward) pair >= 0 per stage ({p}); got "
                         f"{len(stage_seconds)}")
    chunk_seconds = [(a / v, b / v) for a, b in stage_seconds]
    nvs = p * v
    orders = _orders(kind, p, m, v)
    done: dict = {}  # (phase, virtual_stage, microbatch) -> end time
    pos = [0] * p
    free = [0.0] * p
    events: list = [[] for _ in range(p)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                phase, mb, chunk = orders[r][pos[r]]
                vs = chunk * p + r
                if phase == "fwd":
                    dep = ("fwd", vs - 1, mb) if vs > 0 else None
                else:
                    dep = ("bwd", vs + 1, mb) if vs < nvs - 1 else ("fwd", vs, mb)
                if dep is not None and dep not in done:
                    break
                ready = 0.0
                if dep is not None:
                    cross = (dep[1] % p) != r
                    ready = done[dep] + (p2p_seconds if cross else 0.0)
                start = max(free[r], ready)
                end = start + chunk_seconds[r][0 if phase == "fwd" else 1]
                done[(phase, vs, mb)] = end
                free[r] = end
                events[r].append(ScheduleEvent(stage=r, microbatch=mb, chunk=chunk, phase=phase,
                                               start_s=start, end_s=end))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for the three schedules; guards against an infinite loop
            raise RuntimeError(f"pipeline schedule {kind} p={p} m={m} v={v} deadlocked")
    return Schedule(kind=kind, pipeline_parallel=p, num_microbatches=m, virtual_pipeline=v,
                    forward_seconds=float(forward_seconds), backward_seconds=float(backward_seconds),
                    p2p_seconds=float(p2p_seconds), events=tuple(e for rank in events for e in rank))
