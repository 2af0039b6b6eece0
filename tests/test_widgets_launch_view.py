"""Launch tab: absent unless launching is allowed (the dashboard default), refuses to start without the permission,
explains refused specs inline, and starts a real short run of the current specs followed by a RunMonitor."""
import pytest

import runs_support  # noqa: F401  (TORCH_EXTENSIONS_DIR default)
from widgets.app import ENV_ALLOW_LAUNCH, Workbench
from widgets.launch_view import LaunchView
from widgets.state import LoadSpecs
from runs_support import TINY, cpu_cluster, plan
from workbench.catalog import gpu
from workbench.specs import ClusterSpec


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))


def launch_views(app):
    return [v for v in app.views if isinstance(v, LaunchView)]


def test_dashboard_default_has_no_launch_tab_or_button():
    app = Workbench.for_dashboard(environ={})
    assert launch_views(app) == [] and "Launch" not in app.view_tabs.titles
    stack, buttons = [app.widget], []
    while stack:
        w = stack.pop()
        stack.extend(getattr(w, "children", ()) or ())
        if hasattr(w, "description") and w.__class__.__name__ == "Button":
            buttons.append(w.description)
    assert "Launch" not in buttons and "Calibrate" not in buttons
    with pytest.raises(PermissionError, match="launch is disabled"):
        app.require("launch")
    # a LaunchView wired to this app refuses too
    view = LaunchView(app=app)
    with pytest.raises(PermissionError):
        view.launch()
    view.close()
    app.close()


def test_launch_tab_with_permission_and_inline_refusals():
    app = Workbench.for_dashboard(environ={ENV_ALLOW_LAUNCH: "1"})
    (view,) = launch_views(app)
    assert app.view_tabs.titles[-1] == "Launch"
    app.view_tabs.selected_index = app.views.index(view)
    assert "13" in view.summary.value or "guide-13b" in view.summary.value
    # the guide's 13B on this CPU-only machine is refused inline, nothing starts
    assert view.launch() is None
    assert "on the CPU this tab runs models up to" in view.error.value and view.run is None
    # invalid inputs (fp16 on the CPU device) are not launched
    app.dispatch(LoadSpecs(model=TINY, cluster=cpu_cluster(1), plan=plan(1, engine="deepspeed", precision="fp16")))
    assert not app.state.valid
    assert view.launch() is None and "inputs are invalid" in view.error.value and "fp16" in view.error.value
    # two nodes without a host list: the launcher's own check, inline
    two_nodes = ClusterSpec(gpu=gpu("cpu"), gpus_per_node=1, num_nodes=2, host_memory_gib_per_node=24)
    app.dispatch(LoadSpecs(model=TINY, cluster=two_nodes, plan=plan(2, engine="deepspeed")))
    assert app.state.valid, app.state.error
    assert view.launch() is None and "num_nodes=2: pass hosts" in view.error.value and view.run is None
    app.close()


@pytest.mark.slow
def test_launch_tab_runs_the_current_specs(tmp_path):
    from workbench.runs import RunStore

    app = Workbench(allow_launch=True)
    (view,) = launch_views(app)
    app.dispatch(LoadSpecs(model=TINY, cluster=cpu_cluster(1), plan=plan(1, engine="deepspeed", global_batch_size=4)))
    assert app.state.valid, app.state.error
    view.steps.value = 3
    run = view.launch(store=RunStore(tmp_path / "s.sqlite"), run_dir=tmp_path / "run")
    assert run is not None, view.error.value
    assert view.monitor is not None and view.monitor_box.children == (view.monitor.panel,)
    assert run.wait(300) == "completed"
    record = run.record()
    assert len(record["losses"]) == 3
    assert record["predicted"]["per_gpu_peak_bytes"] > 0
    view.monitor.refresh()
    assert view.monitor.progress.value == 3
    app.close()
