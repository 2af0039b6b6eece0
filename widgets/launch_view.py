"""LaunchView: start a short real training run of the current specs (:func:`workbench.runs.launch`) on this
machine's GPUs, or on the CPU when there is no CUDA, and follow it in a :class:`widgets.run_monitor.RunMonitor`.

The app adds this tab only when it was created with ``allow_launch=True`` (dashboard:
``WORKBENCH_DASHBOARD_ALLOW_LAUNCH=1``), and :meth:`LaunchView.launch` checks the permission again. The launcher's
own checks (world size = processes, engine rules, fp16 on the CPU, ...) are shown inline.
"""
from __future__ import annotations

import html

import ipywidgets as ipw

from widgets.common import View, error_html, error_message

CPU_MAX_PARAMETERS = 200_000_000
"""Largest model the tab starts without CUDA: building and stepping a bigger model on the CPU ties the machine up
for minutes (a 125M-parameter GPT with Adam needs about 2 GB per rank)."""
DATA_SOURCES = ("synthetic", "learnable")


class LaunchView(View):
    title = "Launch"

    def __init__(self, app=None) -> None:
        self.app = app
        self.steps = ipw.BoundedIntText(description="steps", min=1, max=10_000, value=5,
                                        style={"description_width": "50px"}, layout=ipw.Layout(width="140px"))
        self.data = ipw.Dropdown(description="data", options=DATA_SOURCES, value="synthetic",
                                 style={"description_width": "40px"}, layout=ipw.Layout(width="200px"))
        self.timeout = ipw.BoundedIntText(description="time limit (s)", min=10, max=86_400, value=600,
                                          style={"description_width": "90px"}, layout=ipw.Layout(width="200px"))
        self.button = ipw.Button(description="Launch", icon="play", button_style="warning")
        self.button.add_class("wb-launch-button")
        self.button.on_click(lambda _: self._on_click())
        self.summary = ipw.HTML()
        self.error = ipw.HTML()
        self.monitor_box = ipw.VBox()
        self.widget = ipw.VBox([ipw.HBox([self.steps, self.data, self.timeout, self.button]), self.summary,
                                self.error, self.monitor_box])
        self.run = None
        self.monitor = None
        self._state = None

    def show(self, state) -> None:
        self._state = state
        from workbench.runs.launcher import cuda_available

        where = "this machine's GPUs" if cuda_available() else "the CPU (no CUDA here; gloo)"
        text = (f"Starts {state.cluster.gpus_per_node} process(es) on {where} for "
                f"<b>{html.escape(state.model.name)}</b> ({state.model.num_parameters / 1e6:,.1f} M parameters), "
                f"{state.plan.engine} TP{state.plan.tensor_parallel} PP{state.plan.pipeline_parallel} "
                f"DP{state.plan.data_parallel}, {state.plan.precision}.")
        if self.summary.value != text:
            self.summary.value = text

    def check(self, state) -> None:
        """``ValueError`` for specs this tab will not start (before the launcher's own checks)."""
        from workbench.runs.launcher import cuda_available

        if not state.valid:
            raise ValueError(f"the inputs are invalid ({state.error}); fix them before launching")
        if not cuda_available() and state.model.num_parameters > CPU_MAX_PARAMETERS:
            raise ValueError(f"model {state.model.name} has {state.model.num_parameters / 1e6:,.0f} M parameters; "
                             f"on the CPU this tab runs models up to {CPU_MAX_PARAMETERS / 1e6:,.0f} M (choose a "
                             f"smaller preset or dimensions)")

    def _on_click(self) -> None:
        """The Launch button: a refusal (an app without ``allow_launch``) is shown in red, never raised."""
        try:
            self.launch()
        except PermissionError as exc:
            self.error.value = error_html(str(exc), max_width="900px")

    def launch(self, **kwargs):
        """Start the run for the app's current specs; returns the :class:`workbench.runs.Run` (``None`` on an error,
        which is shown inline). ``kwargs`` go to :func:`workbench.runs.launch`."""
        if self.app is None:
            raise PermissionError("launch is disabled: this view has no app that allows it")
        self.app.require("launch")
        state = self.app.state
        if self.run is not None and not self.run.done:
            self.error.value = error_html(f"run {self.run.run_id} is still running; stop it first", "900px")
            return None
        from workbench.runs import launch

        try:
            self.check(state)
            options = dict(steps=int(self.steps.value), data=self.data.value, nproc=state.cluster.gpus_per_node,
                           timeout_seconds=float(self.timeout.value), **kwargs)
            run = launch(state.model, state.cluster, state.plan, **options)
        except Exception as exc:  # noqa: BLE001 - a click handler shows every failure in red, never raises
            self.error.value = error_html(error_message(exc), max_width="900px")
            return None
        from widgets.run_monitor import RunMonitor

        self.error.value = ""
        if self.monitor is not None:
            self.monitor.close()
        self.run = run
        self.monitor = RunMonitor(run)
        self.monitor_box.children = [self.monitor.panel]
        return run

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
        super().close()
