"""The 1F1B step of unequal stages in closed form (:func:`workbench.schedule.one_f_one_b_seconds`) against the event
simulation of the same schedule (:func:`workbench.schedule.pipeline_schedule`)."""
import random

import numpy as np
import pytest

from workbench.schedule import bubble_fraction, bubble_seconds, one_f_one_b_seconds, pipeline_schedule


def _stages(p, first, middle, last):
    return [last] if p == 1 else [first] + [middle] * (p - 2) + [last]


def _simulated(p, m, first, middle, last):
    stages = _stages(p, first, middle, last)
    return pipeline_schedule("1f1b", p, m, forward_seconds=max(f for f, _ in stages),
                             backward_seconds=max(b for _, b in stages), stage_seconds=stages).total_seconds


@pytest.mark.parametrize("p,m", [(1, 1), (1, 8), (2, 1), (2, 4), (4, 8), (8, 3), (16, 64)])
def test_equal_stages_give_the_textbook_step(p, m):
    f, b = 1.5, 3.25
    assert one_f_one_b_seconds(p, m, (f, b), (f, b), (f, b)) == pytest.approx((m + p - 1) * (f + b))


def test_never_longer_and_within_four_percent_of_the_simulation():
    rng = random.Random(7)
    errors = []
    for _ in range(1500):
        p, m = rng.choice([1, 2, 3, 4, 5, 8, 16]), rng.choice([1, 2, 3, 4, 5, 8, 16, 32])
        ratio = rng.uniform(1.0, 3.0)  # backward over forward
        first, last = [(a, a * rng.uniform(1.0, 3.0)) for a in (rng.uniform(0.2, 3.0), rng.uniform(0.2, 3.0))]
        middle = (1.0, ratio)
        closed = one_f_one_b_seconds(p, m, first, middle, last)
        errors.append((closed - _simulated(p, m, first, middle, last)) / _simulated(p, m, first, middle, last))
    assert max(errors) < 1e-9  # a lower bound: every term is a path through the schedule
    assert min(errors) > -0.04
    assert float(np.median(errors)) == pytest.approx(0.0, abs=1e-9)


def test_uneven_split_of_llama3_405b_layout():
    """Llama 3 405B's 126 layers over 16 stages as 7 + 14 x 8 + 7 with the output layer on the last stage: exact
    against the simulation, where (m + p - 1) x the slowest stage over-counts the idle stages."""
    layer = (1.0, 3.0)  # full recompute: backward = 2 x forward + the recomputed forward
    first, middle, last = (7 * layer[0], 7 * layer[1]), (8 * layer[0], 8 * layer[1]), (7 + 1.2, 21 + 2.4)
    p, m = 16, 32
    closed = one_f_one_b_seconds(p, m, first, middle, last)
    assert closed == pytest.approx(_simulated(p, m, first, middle, last), rel=1e-9)
    assert closed < (m + p - 1) * max(sum(first), sum(middle), sum(last))


def test_arrays_price_every_plan_at_once():
    p = np.array([1, 2, 4, 8, 16])
    m = np.array([4, 4, 8, 16, 32])
    first, middle, last = (np.full(5, 0.5), np.full(5, 1.0)), (np.full(5, 1.0), np.full(5, 2.0)), \
        (np.full(5, 1.25), np.full(5, 2.5))
    out = one_f_one_b_seconds(p, m, first, middle, last)
    for i in range(5):
        one = one_f_one_b_seconds(int(p[i]), int(m[i]), (0.5, 1.0), (1.0, 2.0), (1.25, 2.5))
        assert out[i] == pytest.approx(one)
        assert out[i] == pytest.approx(_simulated(int(p[i]), int(m[i]), (0.5, 1.0), (1.0, 2.0), (1.25, 2.5)),
                                       rel=0.04)


def test_interleaved_bubble_within_a_few_percent_of_the_simulation():
    rng = random.Random(3)
    errors = []
    for _ in range(400):
        p, v = rng.choice([2, 4, 8]), rng.choice([2, 3, 4])
        m = p * rng.choice([1, 2, 4])
        r, n = rng.uniform(1.8, 3.2), rng.choice([2, 4, 8])
        n0 = max(0.5, n + rng.choice([-2, -1, 0, 1]))
        nl = max(0.5, n + rng.choice([-2, -1, 0])) + rng.uniform(0, 2)
        first, middle, last = (n0, n0 * r), (n, n * r), (nl, nl * r)
        stages = _stages(p, first, middle, last)
        slow = max(stages, key=sum)
        sim = pipeline_schedule("interleaved", p, m, v, forward_seconds=slow[0], backward_seconds=slow[1],
                                stage_seconds=stages)
        closed = m * sum(slow) + bubble_seconds(p, m, v, first, middle, last)
        errors.append((closed - sim.total_seconds) / sim.total_seconds)
    assert -0.02 < min(errors) and max(errors) < 0.08


def test_equal_stages_give_the_textbook_bubble():
    for p, m, v in ((1, 4, 1), (4, 8, 1), (4, 8, 2), (8, 16, 4)):
        assert bubble_seconds(p, m, v, (1.0, 2.0), (1.0, 2.0), (1.0, 2.0)) == pytest.approx(
            bubble_fraction(p, m, v) * m * 3.0)
