"""Simulated pipeline schedules against the analytic bubble (Narayanan et al. 2021 §2.2) and the in-flight
micro-batch counts (Korthikanti et al. 2022 §4.2.3)."""
import numpy as np
import pytest

from workbench.schedule import bubble_fraction, in_flight_microbatches, pipeline_schedule, warmup_forwards


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (4, 16), (8, 8), (3, 5)])
def test_bubble_equals_p_minus_1_over_m(kind, p, m):
    s = pipeline_schedule(kind, p, m, forward_seconds=1.0, backward_seconds=2.0)
    assert s.bubble_fraction == pytest.approx((p - 1) / m, abs=1e-12)
    assert s.total_seconds == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 16, 4), (8, 16, 2), (8, 24, 3)])
def test_interleaved_bubble_equals_p_minus_1_over_vm(p, m, v):
    s = pipeline_schedule("interleaved", p, m, v, forward_seconds=1.0, backward_seconds=2.0)
    assert s.bubble_fraction == pytest.approx((p - 1) / (v * m), abs=1e-9)
    assert s.bubble_fraction == pytest.approx(bubble_fraction(p, m, v), abs=1e-9)


def test_peak_in_flight_1f1b_is_p_minus_stage():
    p, m = 4, 8
    s = pipeline_schedule("1f1b", p, m, forward_seconds=1, backward_seconds=2)
    assert [s.peak_in_flight(i) for i in range(p)] == [4, 3, 2, 1]
    g = pipeline_schedule("gpipe", p, m, forward_seconds=1, backward_seconds=2)
    assert [g.peak_in_flight(i) for i in range(p)] == [8] * 4  # GPipe keeps every micro-batch
    short = pipeline_schedule("1f1b", 4, 2, forward_seconds=1, backward_seconds=2)
    assert [short.peak_in_flight(i) for i in range(4)] == [2, 2, 2, 1]


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 8, 3), (8, 16, 4), (2, 4, 2)])
def test_peak_in_flight_interleaved_matches_formula(p, m, v):
    s = pipeline_schedule("interleaved", p, m, v, forward_seconds=1, backward_seconds=2)
    sim = [s.peak_in_flight(i) for i in range(p)]
    assert sim == pytest.approx([float(in_flight_microbatches(p, i, m, v)) for i in range(p)])
    # Korthikanti et al. 2022: the first stage holds p·(1 + (p−1)/(p·v)) micro-batches' worth
    assert sim[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_in_flight_formula_arrays():
    got = in_flight_microbatches(np.array([4, 4, 8]), np.array([0, 3, 0]), np.array([8, 8, 16]),
                                 np.array([1, 2, 4]))
    assert got.tolist() == [4.0, 2.5, 9.75]


def test_in_flight_microbatches_1f1b_and_interleaved():
    # 1F1B: stage i keeps p - i; interleaved stage 0: p(1 + (p-1)/(p v)) (Korthikanti et al. 2022 §4.2.3)
    assert [in_flight_microbatches(4, i, 16) for i in range(4)] == [4, 3, 2, 1]
    assert in_flight_microbatches(4, 0, 2) == 2  # fewer micro-batches than stages
    for p, v in [(2, 2), (4, 2), (8, 3)]:
        assert in_flight_microbatches(p, 0, 64, v) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert in_flight_microbatches(1, 0, 8) == 1


def test_in_flight_closed_forms_over_the_grid():
    """pp 1-16, vp 1-4, micro-batches 1-64, every stage: the shared function against the two closed forms the
    memory model and the schedule module each carried before they were merged — 1F1B min(p − s, m) (1 with no
    pipeline) and interleaved min(2(p−s−1) + (v−1)p + 1, m·v)/v — on scalars and on arrays alike."""
    rows = [(p, s, m, v) for p in range(1, 17) for v in range(1, 5) for m in range(1, 65) for s in range(p)]
    p, s, m, v = (np.array(c) for c in zip(*rows))
    expected = np.where(v > 1, np.minimum(2 * (p - s - 1) + (v - 1) * p + 1, m * v) / v,
                        np.where(p == 1, 1, np.minimum(p - s, m)))
    got = in_flight_microbatches(p, s, m, v)
    assert got.dtype == np.float64 and np.array_equal(got, expected)
    for i in range(0, len(rows), 97):  # the scalar fast path gives the same numbers
        assert in_flight_microbatches(*rows[i]) == expected[i]
    warm = warmup_forwards(p, s, m, v)
    assert np.array_equal(warm, np.minimum(np.where(v > 1, 2 * (p - s - 1) + (v - 1) * p, p - s - 1), m * v))


@pytest.mark.parametrize("p,m,v", [(1, 3, 1), (2, 1, 1), (4, 3, 1), (5, 12, 1), (2, 2, 4), (3, 6, 2), (4, 4, 3)])
def test_warmup_is_the_simulated_forwards_before_the_first_backward(p, m, v):
    s = pipeline_schedule("interleaved" if v > 1 else "1f1b", p, m, v, forward_seconds=1, backward_seconds=2)
    for stage in range(p):
        phases = [e.phase for e in s.stage_events(stage)]
        # warm-up forwards, then one more before the first backward unless the warm-up already ran them all
        assert phases.index("bwd") == min(warmup_forwards(p, stage, m, v) + 1, m * v)
        assert s.peak_in_flight(stage) == pytest.approx(float(in_flight_microbatches(p, stage, m, v)))


def test_events_respect_dependencies_and_p2p():
    p, m = 4, 4
    s = pipeline_schedule("1f1b", p, m, forward_seconds=1, backward_seconds=2, p2p_seconds=0.25)
    ev = {(e.phase, e.stage, e.microbatch): e for e in s.events}
    for mb in range(m):
        for st in range(1, p):
            assert ev[("fwd", st, mb)].start_s >= ev[("fwd", st - 1, mb)].end_s + 0.25 - 1e-12
        for st in range(p - 1):
            assert ev[("bwd", st, mb)].start_s >= ev[("bwd", st + 1, mb)].end_s + 0.25 - 1e-12
    # no rank runs two things at once
    for st in range(p):
        spans = sorted((e.start_s, e.end_s) for e in s.stage_events(st))
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    assert s.total_seconds > pipeline_schedule("1f1b", p, m, forward_seconds=1, backward_seconds=2).total_seconds
    assert len(s.to_dict()["events"]) == 2 * p * m


def test_bad_input():
    with pytest.raises(ValueError, match="num_microbatches=6 must be a multiple of pipeline_parallel=4"):
        pipeline_schedule("interleaved", 4, 6, 2, forward_seconds=1, backward_seconds=2)
    with pytest.raises(ValueError, match="kind"):
        pipeline_schedule("zb", 4, 8, forward_seconds=1, backward_seconds=2)
    with pytest.raises(ValueError, match="virtual_pipeline=2"):
        pipeline_schedule("1f1b", 4, 8, 2, forward_seconds=1, backward_seconds=2)
