"""Live view of a launched run: loss, step time, tokens/s and memory per rank, a progress bar, a stop button, the log
tail; at the end a predicted-vs-measured table and chart.

``RunMonitor(run)`` owns its widgets; a background thread refreshes them (so they move even while the notebook
waits on ``run.wait()``); redraws are batched; errors are shown inline, never raised into the cell.
"""
from __future__ import annotations

import html
import threading

import ipywidgets as w
import plotly.graph_objects as go

from widgets.common import new_figure
from plotly.subplots import make_subplots

from workbench.runs.compare import CPU_STEP_NOTE, comparison_rows, is_cpu_run, metric_series

PANELS = (("loss", "loss"), ("step_seconds", "step time (s)"), ("tokens_per_second", "tokens/s"),
          ("memory_bytes", "peak memory (GiB)"))
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


class RunMonitor:
    def __init__(self, run, *, refresh_seconds: float = 1.0, log_lines: int = 12):
        self.run = run
        self.refresh_seconds = refresh_seconds
        self.log_lines = log_lines
        self.title = w.HTML()
        self.progress = w.IntProgress(min=0, max=max(1, run.steps), value=0, description="steps",
                                      layout=w.Layout(width="60%"))
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(self._on_stop)
        self.error = w.HTML()
        self.figure = go.FigureWidget(make_subplots(rows=2, cols=2, subplot_titles=[t for _, t in PANELS]))
        self.figure.update_layout(height=480, margin=dict(l=40, r=10, t=40, b=30), legend_title_text="rank")
        self._traces: dict = {}
        self.log = w.HTML()
        self.result = w.HTML()
        self.result_figure = new_figure()
        self.result_figure.update_layout(height=260, barmode="group", margin=dict(l=40, r=10, t=30, b=30),
                                         title="predicted vs measured")
        self.result_box = w.VBox([self.result])
        self.panel = w.VBox([self.title, w.HBox([self.progress, self.stop_button]), self.error, self.figure,
                             self.log, self.result_box])
        self._closed = threading.Event()
        self._finished_drawn = False
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="run-monitor", daemon=True)
        self._thread.start()

    # -- wiring --------------------------------------------------------------------------------------------------
    def _ipython_display_(self):
        from IPython.display import display

        display(self.panel)

    def _on_stop(self, _button) -> None:
        try:
            self.run.stop()
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping"
        except Exception as exc:  # noqa: BLE001 - shown inline
            self._show_error(exc)

    def _loop(self) -> None:
        while not self._closed.wait(self.refresh_seconds):
            self.refresh()
            if self._finished_drawn:
                return

    def close(self) -> None:
        self._closed.set()
        self.panel.close()

    def _show_error(self, exc: BaseException) -> None:
        self.error.value = (f"<span style='color:#b00'>monitor: {html.escape(type(exc).__name__)}: "
                            f"{html.escape(str(exc))}</span>")

    # -- drawing -------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """One redraw from the store; safe to call from any thread; never raises."""
        try:
            status = self.run.status
            series = metric_series(self.run.metrics())
            done_steps, total = self.run.progress()
            self.progress.max = max(1, total)
            self.progress.value = min(done_steps, total)
            self.title.value = (f"<b>run {html.escape(self.run.run_id)}</b> — {html.escape(status)} "
                                f"({done_steps}/{total} steps)")
            self._draw_series(series)
            self.log.value = ("<pre style='font-size:11px;max-height:12em;overflow:auto;background:#f7f7f7'>"
                              + html.escape(self.run.log_tail(self.log_lines)) + "</pre>")
            if status != "running" and self.run.done and not self._finished_drawn:
                self._draw_result(self.run.record())
                self.stop_button.disabled = True
                self._finished_drawn = True
            self.error.value = ""
        except Exception as exc:  # noqa: BLE001 - shown inline
            self._show_error(exc)

    def _draw_series(self, series: dict) -> None:
        with self.figure.batch_update():
            for rank, s in sorted(series.items()):
                for i, (key, _title) in enumerate(PANELS):
                    values = s[key]
                    if key == "memory_bytes":
                        values = [None if v is None else v / 2**30 for v in values]
                    trace = self._traces.get((rank, key))
                    if trace is None:
                        self.figure.add_trace(go.Scatter(x=s["step"], y=values, mode="lines+markers",
                                                         name=f"rank {rank}", legendgroup=str(rank),
                                                         showlegend=(i == 0),
                                                         line=dict(color=COLORS[rank % len(COLORS)])),
                                              row=i // 2 + 1, col=i % 2 + 1)
                        self._traces[(rank, key)] = self.figure.data[-1]
                    else:
                        trace.x, trace.y = s["step"], values

    def _draw_result(self, record: dict) -> None:
        rows = comparison_rows(record)
        cells = []
        for r in rows:
            def fmt(v, q=r["quantity"]):
                if v is None:
                    return "—"
                return f"{v / 2**30:.3f} GiB" if "bytes" in q else f"{v:.4f}"

            if r["note"]:
                err = f"<span title='{html.escape(r['note'], quote=True)}'>not comparable (CPU run)</span>"
            else:
                err = "—" if r["error"] is None else f"{100 * r['error']:+.1f}%"
            cells.append(f"<tr><td>{html.escape(r['quantity'])}</td><td>{fmt(r['predicted'])}</td>"
                         f"<td>{fmt(r['measured'])}</td><td>{err}</td></tr>")
        notes = "".join(f"<br><span style='color:#666;font-size:90%'>{html.escape(r['quantity'])}: "
                        f"{html.escape(r['note'])}</span>" for r in rows if r["note"])
        if is_cpu_run(record):
            notes += f"<br><span style='color:#666;font-size:90%'>step seconds: {html.escape(CPU_STEP_NOTE)}</span>"
        reason = record.get("reason") or ""
        warning = record.get("warning") or ""
        self.result.value = (
            f"<b>{html.escape(record['status'])}</b>"
            + (f" — {html.escape(reason)}" if reason else "")
            + (f"<br><span style='color:#a60'>warning: {html.escape(warning)}</span>" if warning else "")
            + "<table style='margin-top:4px'><tr><th>quantity</th><th>predicted</th><th>measured</th>"
              "<th>error</th></tr>" + "".join(cells) + "</table>" + notes)
        labels = ["peak memory (GiB)", "step time (s)"]
        scale = [2**30, 1.0]
        # a prediction that is not comparable gets no bar next to the measurement
        pred = [None if r["predicted"] is None or r["note"] else r["predicted"] / s for r, s in zip(rows, scale)]
        meas = [None if r["measured"] is None else r["measured"] / s for r, s in zip(rows, scale)]
        with self.result_figure.batch_update():
            self.result_figure.data = []
            self.result_figure.add_bar(x=labels, y=pred, name="predicted")
            self.result_figure.add_bar(x=labels, y=meas, name="measured")
        self.result_box.children = [self.result, self.result_figure]
