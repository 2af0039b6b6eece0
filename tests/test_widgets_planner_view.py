"""PlannerView in-process: the search it shows is the planner's, the scatter carries the ranked plans and the Pareto
front, "use this plan" goes through the reducer, and a search with no feasible plan shows the planner's message."""
import pytest

from widgets.app import Workbench
from widgets.planner_view import COLUMNS, TABLE_ROWS, PlannerView
from workbench.planner import search

GIB = 2**30


@pytest.fixture(scope="module")
def app():
    a = Workbench()
    yield a
    a.close()


def planner(app) -> PlannerView:
    return next(v for v in app.views if isinstance(v, PlannerView))


def open_tab(app, view):
    app.view_tabs.selected_index = app.views.index(view)


def test_opening_the_tab_searches_the_current_specs(app):
    view = planner(app)
    open_tab(app, view)
    s = app.state
    expected = search(s.model, s.cluster, global_batch_size=s.plan.global_batch_size, precision=s.plan.precision,
                      top=60)
    r = view.result
    assert r is not None and r.evaluated == expected.evaluated and r.feasible == expected.feasible
    assert [x.plan for x in r.ranked] == [x.plan for x in expected.ranked]
    assert f"{r.evaluated:,} plans evaluated" in view.status.value
    # table: header + TABLE_ROWS rows, the winner first with its numbers
    assert view.table.value.count("<tr class='wb-planner-row'") == TABLE_ROWS
    assert all(f">{c}</th>" in view.table.value for c in COLUMNS)
    best = r.best
    assert f"{best.tokens_per_second:,.0f}" in view.table.value and f"{best.peak_bytes / GIB:.1f}" in view.table.value
    # scatter: every ranked plan, the Pareto front, the fastest marked, the current plan shown
    assert len(view.fig.data[0].x) == len(r.ranked)
    assert sorted(view.fig.data[1].y) == sorted(p.tokens_per_second for p in r.pareto)
    assert view.fig.data[3].y[0] == pytest.approx(best.tokens_per_second)
    assert view.fig.data[2].y[0] == pytest.approx(s.estimate.time.tokens_per_second)
    # Pareto front: going right (more headroom), throughput never rises
    ys = list(view.fig.data[1].y)
    assert all(a >= b for a, b in zip(ys, ys[1:]))
    assert "Fastest:" in view.explanation.value and "Runner-up" in view.explanation.value


def test_use_this_plan_loads_it_through_the_reducer(app):
    view = planner(app)
    open_tab(app, view)
    revision = app.state.revision
    view.choice.value = 1
    view.use_button.click()
    assert app.state.revision == revision + 1 and app.state.valid
    assert app.state.plan == view.result.ranked[1].plan
    assert f"TP{view.result.ranked[1].plan.tensor_parallel}" in app.banner.value
    # the panels show the loaded plan
    par = next(p for p in app.panels if p.title == "Parallelism")
    assert par.controls["tensor_parallel"].value == app.state.plan.tensor_parallel


def test_no_feasible_plan_is_shown_inline(app):
    view = planner(app)
    view.headroom.value = 99.0
    view.search_button.click()
    assert view.result is None
    assert "no plan fits" in view.error.value and "wb-error" in view.error.value
    assert "Traceback" not in view.error.value
    assert view.use_button.disabled and view.table.value == "" and len(view.fig.data[0].x) == 0
    view.headroom.value = 5.0
    view.global_batch.value = 3  # an odd global batch: only plans with data parallel 1 or 3 remain
    view.search_button.click()
    assert view.result is not None and view.result.global_batch_size == 3


def test_changed_hardware_marks_the_result_stale(app):
    view = planner(app)
    open_tab(app, view)
    view.search_button.click()
    hw = next(p for p in app.panels if p.title == "Hardware")
    hw.controls["gpu"].value = "H100-SXM"
    assert "press Search" in view.status.value
    view.search_button.click()
    assert "press Search" not in view.status.value and view.result.cluster.gpu.name == "H100-SXM"


def test_planner_table_shows_the_whole_plan_text():
    from widgets.planner_view import table_html
    from workbench import catalog
    from workbench.planner import search
    from workbench.specs import ClusterSpec

    result = search(catalog.model("gpt3-1.3b"), ClusterSpec(gpu="A100-80GB", gpus_per_node=8), global_batch_size=64)
    text = table_html(result)
    import html

    for r in result.ranked[:3]:
        assert html.escape(r.describe()) in text  # whole, not cut


def test_risky_plans_are_marked_in_amber_with_their_numbers(monkeypatch):
    """A plan that fits only on the point estimate of memory stays in the table, marked (the same flag the CLI and
    rank_plan show), with the band's numbers on hover and a legend under the table."""
    from widgets.planner_view import table_html
    from workbench import memory as M
    from workbench.catalog import model
    from workbench.specs import ClusterSpec

    wide = {"device": {e: {"n": 5, "shapes": 2, "low_fraction": 0.0, "high_fraction": 10.0}
                       for e in ("deepspeed", "megatron", "megatron-deepspeed")}}
    monkeypatch.setattr(M, "_error_bands", lambda: wide)
    r = search(model("gpt3-1.3b"), ClusterSpec(gpu="H100-SXM", gpus_per_node=8), global_batch_size=16, top=5)
    text = table_html(r)
    rows = [x for x in text.split("<tr class='wb-planner-row'")[1:]]
    assert r.ranked[0].risky and len(rows) == len(r.ranked) and all("color:#8a5300" in x.split(">")[0] for x in rows)
    assert " !</td>" in text and "wb-planner-risky" in text and "fits on the point estimate only" in text


def test_fit_at_the_bands_upper_side_checkbox(app):
    """The Planner's checkbox searches with fit_on='band': no amber plan, the status says how fit was judged."""
    view = planner(app)
    open_tab(app, view)
    view.fit_on_band.value = False
    view.search_button.click()
    point = view.result
    view.fit_on_band.value = True
    view.search_button.click()
    band = view.result
    assert band.fit_on == "band" and band.risky == 0 and band.feasible == point.feasible - point.risky
    assert "fit at the error band's upper side" in view.status.value
    assert "wb-planner-risky" not in view.table.value
    view.fit_on_band.value = False
