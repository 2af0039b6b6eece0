"""PipelineView: the simulated schedule as a Gantt chart, the bubble drawn and its fraction stated."""
import dataclasses

import pytest


from widgets.pipeline_view import PipelineView, drawn_microbatches, gantt_data
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
    assert len(view.fig.data[0].x) == 2 * 128  # one forward per micro-batch per stage
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
    assert drawn_microbatches(2, 128, 1) == 128
    m = drawn_microbatches(16, 1024, 4)
    assert m % 16 == 0 and 2 * 16 * m * 4 <= 6000
