"""Calibration panel: run ``workbench calibrate`` in a background thread, show the measured GEMM rates and
collective times against the fitted curves and the datasheet peak, list measured vs catalog numbers, save the
profile. All numbers come from :mod:`workbench.calibrate`; this file only lays them out."""
from __future__ import annotations

import html
import threading

import ipywidgets as W
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.calibrate import CalibrationSettings, calibrate
from workbench.calibrate.profile import (compare_with_datasheet, fitted_vs_measured, format_value,
                                        user_profiles_dir)
from workbench.catalog import model_names


class CalibratePanel:
    """``CalibratePanel().widget`` is the panel; ``run(blocking=True)`` calibrates in this thread (tests)."""

    def __init__(self, *, name: str = "local", quick: bool = True, nproc: int = 2, model: str = "",
                 settings: dict | None = None):
        self.profile = None
        self._extra = dict(settings or {})
        self._thread = None
        self.name = W.Text(value=name, description="profile")
        self.quick = W.Checkbox(value=quick, description="quick")
        self.nproc = W.BoundedIntText(value=nproc, min=1, max=64, description="processes")
        self.model = W.Dropdown(options=[("default", "")] + [(m, m) for m in model_names()], value=model,
                                description="GEMM shapes")
        self.run_button = W.Button(description="Calibrate", button_style="primary", icon="play")
        self.save_button = W.Button(description="Save profile", icon="save", disabled=True)
        self.status = W.HTML("no profile measured yet: estimates use datasheet numbers")
        self.log = W.Textarea(layout=W.Layout(width="100%", height="8em"), disabled=True)
        self.table = W.HTML()
        self.fig = go.FigureWidget(make_subplots(rows=1, cols=2, subplot_titles=("GEMM TFLOP/s", "collectives")))
        self.fig.update_layout(height=380, margin=dict(l=40, r=10, t=40, b=40))
        self.fig.update_xaxes(type="log", title_text="bytes", row=1, col=2)
        self.fig.update_yaxes(type="log", title_text="seconds", row=1, col=2)
        self.run_button.on_click(lambda _: self.run())
        self.save_button.on_click(lambda _: self._on_save())
        self.widget = W.VBox([W.HBox([self.name, self.quick, self.nproc, self.model]),
                              W.HBox([self.run_button, self.save_button]), self.status, self.log, self.fig,
                              self.table])

    # -- actions ---------------------------------------------------------------------------------------------------
    def settings(self) -> CalibrationSettings:
        return CalibrationSettings(name=self.name.value.strip() or "local", quick=self.quick.value,
                                   nproc=self.nproc.value, model=self.model.value or None, **self._extra)

    def run(self, blocking: bool = False) -> None:
        """Calibrate with the panel's settings (in a background thread unless ``blocking``)."""
        if self._thread is not None and self._thread.is_alive():
            return
        try:
            settings = self.settings()
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            self._error(exc)
            return
        self.log.value = ""
        self.run_button.disabled = True
        self.status.value = "measuring…"
        if blocking:
            self._work(settings)
        else:
            self._thread = threading.Thread(target=self._work, args=(settings,), daemon=True)
            self._thread.start()

    def _work(self, settings) -> None:
        try:
            self.show(calibrate(settings, progress=self._say))
        except Exception as exc:  # noqa: BLE001 - a background thread: shown in the panel, never lost
            self._error(exc)
        finally:
            self.run_button.disabled = False

    def save(self, path=None):
        """Write the profile to ``path`` (default: the user's profiles folder, by name)."""
        if self.profile is None:
            return None
        target = self.profile.save(path or user_profiles_dir() / f"{self.profile.name}.json")
        self.status.value = f"saved <code>{html.escape(str(target))}</code>: use it with --profile {self.profile.name}"
        return target

    def _on_save(self) -> None:
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - a click handler shows the message, never raises
            self._error(exc)

    def close(self) -> None:
        self.widget.close()

    # -- views -----------------------------------------------------------------------------------------------------
    def _say(self, line: str) -> None:
        self.log.value = (self.log.value + line + "\n")[-20000:]

    def _error(self, exc) -> None:
        from widgets.common import error_message

        self.status.value = f"<span style='color:#b00'>error: {html.escape(error_message(exc))}</span>"

    def show(self, profile) -> None:
        """Draw a measured profile (also used to show a loaded one)."""
        self.profile = profile
        data = fitted_vs_measured(profile)
        with self.fig.batch_update():
            self.fig.data = ()
            for prec, g in data["gemm"].items():
                x = list(range(len(g["names"])))
                self.fig.add_scatter(x=x, y=g["measured_tflops"], mode="markers", name=f"{prec} measured",
                                     text=g["names"], row=1, col=1)
                self.fig.add_scatter(x=x, y=g["fitted_tflops"], mode="lines", name=f"{prec} fitted curve",
                                     row=1, col=1)
                self.fig.add_scatter(x=[0, max(x[-1], 1)], y=[g["peak_tflops"]] * 2, mode="lines",
                                     line=dict(dash="dot"), name=f"{prec} peak (catalog)", row=1, col=1)
            for key, c in data["collectives"].items():
                self.fig.add_scatter(x=c["bytes"], y=c["measured_s"], mode="markers", name=f"{key} measured",
                                     row=1, col=2)
                self.fig.add_scatter(x=c["bytes"], y=c["fitted_s"], mode="lines", name=f"{key} fit", row=1, col=2)
        rows = "".join(_row(r) for r in compare_with_datasheet(profile))
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in profile.notes)
        self.table.value = (f"<table><tr><th>quantity</th><th>measured</th><th>catalog</th><th>ratio</th>"
                            f"<th>unit</th></tr>{rows}</table>" + (f"<ul>{notes}</ul>" if notes else ""))
        self.status.value = f"measured: {html.escape(profile.label)}"
        self.save_button.disabled = False



def _row(r: dict) -> str:
    ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
    return (f"<tr><td>{html.escape(r['quantity'])}</td><td>{format_value(r['measured'], r['unit'])}</td>"
            f"<td>{format_value(r['datasheet'], r['unit'])}</td><td>{ratio}</td><td>{html.escape(r['unit'])}</td></tr>")
