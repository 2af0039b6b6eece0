"""PipelineView: the simulated schedule as a Gantt chart, the bubble drawn and its fraction stated."""
import dataclasses

import pytest


from widgets.pipeline_view import READABLE_MICROBATCHES, PipelineView, drawn_microbatches, gantt_data
from widgets.state import SetPlan, initial_state, reduce
from workbench.schedule import pipeline_schedule


def test_gantt_idle_time_is_the_bubble():
    s = pipeline_schedule("1f1b", 4, 8, 1, forward_seconds=1.0, backward_seconds=2.0)
    data = gantt_data(s)
    busy = sum(data["fwd"]["x"]) + sum(data["bwd"]["x"])
    idle = sum(data["idle"]["x"])
    assert busy == pytest.approx(4 * 8 * 3.0)
    # every stage spans the whole schedule: busy + idle = p * total
    assert busy + idle == pytest.approx(4 * s.total_seconds)
    assert len(data["fwd"]["x"]) == len(data["bwd"]["x"]) == 4 * 8


def test_view_follows_plan_and_kind():
    state = initial_state()  # guide example: p=2, m=128
    view = PipelineView()
    view.show(state)
    assert "1f1b: p=2, m=128" in view.fig.layout.title.text
    assert "(2−1)/(1·128) = <b>0.8%</b>" in view.notes.value
    assert len(view.fig.data[0].x) == 2 * READABLE_MICROBATCHES  # one forward per drawn micro-batch per stage
    view.kind.value = "gpipe"
    assert view.fig.layout.title.text.startswith("gpipe")
    four = reduce(state, SetPlan(changes={"tensor_parallel": 2, "pipeline_parallel": 4, "virtual_pipeline": 2,
                                          "global_batch_size": 16}))
    assert four.valid, four.error
    view.show(four)
    assert list(view.kind.options) == ["interleaved"]
    assert "interleaved: p=4, m=16, v=2" in view.fig.layout.title.text
    view.close()


def test_long_schedules_are_drawn_shorter_and_say_so():
    assert drawn_microbatches(2, 8, 1) == 8
    assert drawn_microbatches(2, 128, 1) == READABLE_MICROBATCHES  # the guide example: not a solid strip
    assert drawn_microbatches(4, 64, 2) == 8  # interleaved: a multiple of p
    assert drawn_microbatches(16, 1024, 4) == 16  # never fewer than p
    view = PipelineView()
    view.show(initial_state())  # m = 128
    bars_per_stage = (len(view.fig.data[0].x) + len(view.fig.data[1].x)) / 2
    assert bars_per_stage == 2 * READABLE_MICROBATCHES
    assert view.fig.data[0].text  # few enough bars to label each micro-batch
    assert "first m=16 of the plan's m=128" in view.notes.value
    view.close()


def test_seconds_from_the_time_model_and_relative_fallback():
    state = initial_state()  # guide example: p=2, m=128, time model present
    view = PipelineView()
    view.show(state)
    assert view.units.value == "seconds"
    assert view.fig.layout.xaxis.title.text.startswith("seconds")
    b = state.estimate.time.breakdown
    m = state.plan.num_microbatches
    drawn = READABLE_MICROBATCHES  # the chart draws the first 16 of the plan's m micro-batches
    t = state.estimate.time  # the forward and backward the time model computed, not a 1:2 split of the total
    # each stage drawn with its own micro-batch seconds: the last carries the output layer and the loss
    (f0, b0), (f1, b1) = t.stage_microbatch_seconds
    assert (f1, b1) == pytest.approx((t.microbatch_forward_seconds, t.microbatch_backward_seconds))
    assert f0 < f1 and b0 < b1
    fwd = sum(view.fig.data[0].x)  # every drawn forward on both stages
    bwd = sum(view.fig.data[1].x)
    assert fwd == pytest.approx(drawn * (f0 + f1))
    assert bwd == pytest.approx(drawn * (b0 + b1))
    assert m * (f1 + b1) == pytest.approx(b["compute"] + b["tp_comm"] + b["cp_comm"] + b["recompute"])
    # the drawn idle time of the slowest stage is the time model's bubble term
    idle = [x for y, x in zip(view.fig.data[2].y, view.fig.data[2].x) if y == "stage 1"]
    assert sum(idle) == pytest.approx(b["bubble"], rel=1e-6)
    assert "time model's bubble term" in view.notes.value
    view.units.value = "relative"
    assert view.fig.layout.xaxis.title.text.startswith("time (forward of one micro-batch")
    assert sum(view.fig.data[0].x) == pytest.approx(2 * READABLE_MICROBATCHES * 1.0)
    # no time model in the estimate: relative units, said so
    view.units.value = "seconds"
    bare = dataclasses.replace(state, estimate=dataclasses.replace(state.estimate, time=None))
    view.show(bare)
    assert view.fig.layout.xaxis.title.text.startswith("time (forward")
    assert "relative units" in view.notes.value
    view.close()
