"""When the advisor cannot advise on a new plan, the Advisor view shows its message and no longer shows the previous
plan's checks, ladder and suggestions as if they were this plan's."""
import widgets.advisor_view as advisor_view
from widgets.advisor_view import AdvisorView
from widgets.app import Workbench


def test_a_failed_advice_clears_the_previous_plans_advice(monkeypatch):
    app = Workbench()
    view = next(v for v in app.views if isinstance(v, AdvisorView))
    app.view_tabs.selected_index = app.views.index(view)
    assert "wb-check" in view.checks.value and view.error.value == ""
    assert view.fig is not None and len(view.fig.data) == 1

    def refuse(*args, **kwargs):
        raise ValueError("first_stage_layers=18 cannot be advised on")

    monkeypatch.setattr(advisor_view, "advise", refuse)
    par = next(p for p in app.panels if p.title == "Parallelism")
    par.controls["micro_batch_size"].value = 2  # a new valid plan the (patched) advisor refuses
    assert app.state.valid
    assert "first_stage_layers=18" in view.error.value and "wb-error" in view.error.value
    assert view.advice is None
    assert "wb-check" not in view.checks.value  # not the previous plan's rows
    assert view.throughput.value == "" and view.ladder_note.value == "" and view.commands.value == ""
    assert len(view.fig.data) == 0 and not view.fig.layout.annotations
    monkeypatch.undo()
    par.controls["micro_batch_size"].value = 1
    assert "wb-check" in view.checks.value and view.error.value == "" and len(view.fig.data) == 1
    app.close()
