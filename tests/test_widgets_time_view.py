"""TimeView: the step's exposed seconds by term as one stacked bar, the step time's error band, the summary line."""
import dataclasses

import pytest

from widgets.state import SetPlan, initial_state, reduce
from widgets.time_view import COLORS, TimeView, band_text, duration_text, summary_html, time_traces
from workbench.timing import TERM_WORDS, TERMS


@pytest.fixture(scope="module")
def guide():
    return initial_state()  # Megatron TP4 x PP2, 128 micro-batches, 8 x A100-80GB


def drawn(view) -> dict:
    """term -> seconds of the visible bar traces."""
    return {t.legendgroup: t.x[0] for t in view.fig.data[:len(TERMS)] if t.visible}


def test_traces_sum_to_the_step_and_drop_zero_terms(guide):
    t = guide.estimate.time
    data = time_traces(t)
    assert sum(v["seconds"] for v in data["terms"].values()) == pytest.approx(t.step_seconds, rel=1e-12)
    assert sum(v["share"] for v in data["terms"].values()) == pytest.approx(1.0)
    zero = [k for k in TERMS if t.breakdown[k] == 0]
    assert zero and "dp_comm" in zero  # the guide's plan has no data parallelism
    assert data["dropped"] == zero
    assert list(data["terms"]) == [k for k in TERMS if k not in zero]  # drawing order kept
    assert data["terms"]["tp_comm"]["words"] == TERM_WORDS["tp_comm"]
    assert data["terms"]["bubble"]["seconds"] == t.breakdown["bubble"] > 0


def test_band_text_and_the_estimates_band(guide):
    assert band_text(0.835, 0.148, 0.133) == "0.835 s (+0.133 / −0.148)"
    assert band_text(0.8) == "0.800 s"
    assert band_text(18.079, 0.875, 1.6488) == "18.1 s (+1.65 / −0.875)"
    low, high, note = guide.estimate.step_band_seconds
    assert low > 0 and high > 0
    data = time_traces(guide.estimate.time, band=(low, high, note))
    assert data["band"] == {"low_seconds": low, "high_seconds": high, "note": note}
    assert data["step_text"] == band_text(guide.estimate.time.step_seconds, low, high)
    text = summary_html(data)
    assert data["step_text"] in text and html_escaped(note) in text
    assert f"{guide.estimate.time.tokens_per_second:,.0f} tokens/s" in text
    assert f"MFU {guide.estimate.time.mfu:.1%}" in text
    share = guide.estimate.time.host_share
    assert data["host_share"] == share and f"Host share: {share:.0%} of the step" in text
    bound = "host-bound" if share >= 0.5 else "GPU-bound"
    assert f"({bound}" in text


def html_escaped(text: str) -> str:
    import html

    return html.escape(text)


def test_pipeline_figures_only_for_pipeline_plans(guide):
    t = guide.estimate.time
    pipe = time_traces(t)["pipeline"]
    assert pipe["num_microbatches"] == 128 and len(pipe["stages"]) == 2
    assert pipe["forward_seconds"] == t.microbatch_forward_seconds
    assert pipe["backward_seconds"] == t.microbatch_backward_seconds
    text = summary_html(time_traces(t))
    assert f"forward {t.microbatch_forward_seconds * 1e3:#.3g} ms" in text  # 50.4 ms
    assert f"backward {t.microbatch_backward_seconds * 1e3:#.3g} ms" in text
    assert duration_text(1.4712) == "1.47 s" and duration_text(0.0504) == "50.4 ms"
    flat = reduce(guide, SetPlan(changes={"pipeline_parallel": 1, "tensor_parallel": 8}))
    assert flat.valid, flat.error
    data = time_traces(flat.estimate.time)
    assert data["pipeline"] is None and "bubble" in data["dropped"] and "pp_comm" in data["dropped"]
    assert "wb-time-pipeline" not in summary_html(data)


@pytest.mark.parametrize("change, message", [
    (dict(breakdown=None), "the time breakdown has no compute"),
    (dict(step_seconds=0.0), "step_seconds = 0.0 must be > 0"),
    (dict(step_seconds=float("nan")), "step_seconds = nan is not finite"),
])
def test_bad_estimates_raise_naming_the_field(guide, change, message):
    t = dataclasses.replace(guide.estimate.time, **change)
    with pytest.raises(ValueError, match=message):
        time_traces(t)


def test_bad_terms_raise_naming_the_term(guide):
    t = guide.estimate.time
    with pytest.raises(ValueError, match=r"breakdown\['tp_comm'\] = -1 s is negative"):
        time_traces(dataclasses.replace(t, breakdown={**t.breakdown, "tp_comm": -1.0}))
    with pytest.raises(ValueError, match=r"the time terms add up to .* but step_seconds"):
        time_traces(dataclasses.replace(t, breakdown={**t.breakdown, "compute": t.breakdown["compute"] + 1.0}))
    with pytest.raises(ValueError, match="no time estimate"):
        time_traces(None)
    with pytest.raises(ValueError, match="band"):
        time_traces(t, band=(-0.1, 0.2, "note"))


def test_view_draws_the_bars_the_band_and_the_legend(guide):
    view = TimeView()
    view.show(guide)
    t = guide.estimate.time
    bars = drawn(view)
    assert list(bars) == [k for k in TERMS if t.breakdown[k] > 0]
    assert sum(bars.values()) == pytest.approx(t.step_seconds)
    hidden = [d for d in view.fig.data[:len(TERMS)] if not d.visible]
    assert {d.legendgroup for d in hidden} == {k for k in TERMS if t.breakdown[k] == 0}  # not in the legend
    assert view.fig.data[TERMS.index("tp_comm")].name == f"tp_comm {t.breakdown['tp_comm']:#.3g} s"
    compute = view.fig.data[TERMS.index("compute")]
    assert compute.orientation == "h" and compute.marker.color == COLORS["compute"]
    assert compute.customdata[0][0] == TERM_WORDS["compute"] and "compute" in compute.hovertemplate
    low, high, _ = guide.estimate.step_band_seconds
    marker = view.fig.data[len(TERMS)]
    assert marker.x == (t.step_seconds,)
    assert marker.error_x.array == (high,) and marker.error_x.arrayminus == (low,)
    assert view.fig.layout.xaxis.range[1] >= t.step_seconds + high
    assert band_text(t.step_seconds, low, high) in view.summary.value
    assert view.error.value == ""
    assert len(set(COLORS.values())) == len(TERMS) and set(COLORS) == set(TERMS)
    view.close()


def test_view_redraws_on_a_plan_change(guide):
    view = TimeView()
    view.show(guide)
    before = drawn(view)
    more_tp = reduce(guide, SetPlan(changes={"tensor_parallel": 8, "pipeline_parallel": 1}))
    assert more_tp.valid, more_tp.error
    view.show(more_tp)
    after = drawn(view)
    t = more_tp.estimate.time
    assert sum(after.values()) == pytest.approx(t.step_seconds)
    assert after["tp_comm"] == pytest.approx(t.breakdown["tp_comm"]) and after["tp_comm"] != before["tp_comm"]
    assert "bubble" in before and "bubble" not in after  # a zero term leaves the bar and the legend
    assert "wb-time-pipeline" not in view.summary.value
    view.close()


def test_invalid_input_is_a_message_and_the_figure_keeps_the_last_plan(guide):
    view = TimeView()
    view.show(guide)
    before = drawn(view)
    bad = reduce(guide, SetPlan(changes={"tensor_parallel": 3}))
    assert not bad.valid
    view.show(bad)
    assert "tensor_parallel(3)" in view.error.value and "wb-error" in view.error.value
    assert "last valid plan" in view.error.value and "Traceback" not in view.error.value
    assert drawn(view) == before
    view.show(reduce(bad, SetPlan(changes={"tensor_parallel": 4})))
    assert view.error.value == ""
    view.close()


def test_an_estimate_that_cannot_be_drawn_is_a_message(guide):
    broken = dataclasses.replace(guide.estimate.time,
                                 breakdown={**guide.estimate.time.breakdown, "offload": float("inf")})
    state = dataclasses.replace(guide, estimate=dataclasses.replace(guide.estimate, time=broken))
    view = TimeView()
    view.show(guide)
    before = drawn(view)
    view.show(state)
    assert "breakdown['offload'] = inf is not finite" in view.error.value
    assert drawn(view) == before
    no_time = dataclasses.replace(guide, estimate=dataclasses.replace(guide.estimate, time=None))
    view.show(no_time)
    assert "no time estimate" in view.error.value
    view.close()


def test_app_has_the_tab_next_to_memory():
    from widgets.app import Workbench

    app = Workbench()
    try:
        assert [v.title for v in app.views][:3] == ["Memory", "Step time", "Layout"]
        view = app.time_view
        assert sum(drawn(view).values()) == pytest.approx(app.state.estimate.time.step_seconds)  # eager: drawn
        par = next(p for p in app.panels if p.title == "Parallelism")
        app.view_tabs.selected_index = app.views.index(view)
        par.controls["tensor_parallel"].value = 2
        assert app.state.valid
        assert sum(drawn(view).values()) == pytest.approx(app.state.estimate.time.step_seconds)
        par.controls["tensor_parallel"].value = 3
        assert "tensor_parallel(3)" in view.error.value
        par.controls["tensor_parallel"].value = 4
        assert view.error.value == ""
    finally:
        app.close()


def test_the_view_names_the_layer_host_time_where_the_model_prices_one(guide):
    from workbench.layerops import host_note

    view = TimeView()
    view.show(guide)  # the guide's 13B model: Megatron-LM's fused softmax on the local spec, a host floor per layer
    note = host_note(guide.estimate.model, guide.estimate.plan)
    assert note and html_escaped(note) in view.summary.value and "Host: " in view.summary.value
    assert "Host: " not in summary_html(time_traces(guide.estimate.time))  # no note given: no line
