"""The ``Workbench`` app: input panels on the left, views on the right, one state flowing through
:func:`widgets.state.reduce`.

Every panel change becomes an action; ``dispatch`` computes the new state and every panel and the visible views
show it (figures redraw inside ``batch_update``). Views in hidden tabs redraw when their tab is opened.

Safety for served dashboards: ``allow_launch`` (start training processes) and ``allow_write`` (write config files
on the server) are off unless asked for. :meth:`Workbench.for_dashboard` reads ``WORKBENCH_DASHBOARD_ALLOW_LAUNCH=1``
(launch and write) and ``WORKBENCH_DASHBOARD_ALLOW_WRITE=1`` (write only) from the environment; written files go
into a folder under ``export_dir`` (default ``<data_dir>/exports``), never outside it. Download buttons
are client-side data URLs and need neither. Only with ``allow_launch`` does the app have a Launch tab (a short real
run of the current specs) and a calibration panel in its Profile tab.
"""
from __future__ import annotations

import html
import importlib
import os
import time
from typing import Optional

import ipywidgets as ipw

from widgets.common import error_html, served_bundle_url, sync_figures, use_served_bundle
from widgets.hardware_panel import HardwarePanel
from widgets.memory_view import MemoryView
from widgets.model_panel import ModelPanel
from widgets.parallel_panel import ParallelPanel
from widgets.state import AppState, _default_estimator, initial_state, reduce
from widgets.time_view import TimeView

ENV_ALLOW_LAUNCH = "WORKBENCH_DASHBOARD_ALLOW_LAUNCH"
ENV_ALLOW_WRITE = "WORKBENCH_DASHBOARD_ALLOW_WRITE"


def time_terms_html(breakdown) -> str:
    """The banner's time line: the exposed seconds per step of every non-zero term of the estimate's time
    breakdown, in :data:`workbench.timing.TERMS` order, each with its words (:data:`workbench.timing.TERM_WORDS`)
    as a tooltip; empty when every term is zero."""
    from workbench.timing import TERM_WORDS, TERMS

    parts = [f'<span class="wb-time-term" data-term="{k}" title="{html.escape(TERM_WORDS[k])}">{k} '
             f"{breakdown[k]:.3f} s</span>" for k in TERMS if breakdown.get(k, 0.0) > 0]
    if not parts:
        return ""
    return ('<div class="wb-banner-time" style="font-size:smaller;color:#555">exposed per step: '
            + " · ".join(parts) + "</div>")


# Views shown when their module (and the core piece it draws) is importable, in tab order.
_OPTIONAL_VIEWS = (
    ("widgets.layout_view", "LayoutView"),
    ("widgets.pipeline_view", "PipelineView"),
    ("widgets.config_view", "ConfigView"),
    ("widgets.planner_view", "PlannerView"),
    ("widgets.advisor_view", "AdvisorView"),
    ("widgets.profile_view", "ProfileView"),
)
_LAUNCH_VIEW = ("widgets.launch_view", "LaunchView")
"""Added only when the app allows launching."""
_OPTIONAL_PANELS = (
    ("widgets.import_panel", "ImportPanel"),
)


def _optional(specs):
    out = []
    for module_name, class_name in specs:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # the view's module or its core piece is not installed
            if exc.name and (exc.name == module_name or exc.name.startswith("workbench")):
                continue
            raise
        out.append(getattr(module, class_name))
    return out


class Workbench:
    """Compose the panels and views around one :class:`~widgets.state.AppState`.

    ``Workbench()`` starts on the guide's 13B example (Megatron TP4×PP2, 8×A100-80GB). Display it as the last
    expression of a cell, or use ``.widget``.
    """

    def __init__(self, state: Optional[AppState] = None, *, allow_launch: bool = False, allow_write: bool = False,
                 estimator=_default_estimator, export_dir=None) -> None:
        self.allow_launch = bool(allow_launch)
        self.allow_write = bool(allow_write or allow_launch)
        self.export_dir = export_dir
        """Folder the Config view's "Write files" writes under (default ``<data_dir>/exports``); the folder typed
        in the view must stay inside it."""
        self._estimator = estimator
        self.state = state if state is not None else initial_state(estimator=estimator)
        self.last_update_seconds = 0.0
        self.panels = [ModelPanel(self.dispatch), HardwarePanel(self.dispatch), ParallelPanel(self.dispatch)]
        self.panels += [cls(self.dispatch) for cls in _optional(_OPTIONAL_PANELS)]
        self.memory = MemoryView()
        self.time_view = TimeView()
        self.views = [self.memory, self.time_view]
        for cls in _optional(_OPTIONAL_VIEWS + ((_LAUNCH_VIEW,) if self.allow_launch else ())):
            if cls.available(self.state):
                self.views.append(cls(app=self))
        self.banner = ipw.HTML()
        self.banner.add_class("wb-banner")
        self.panel_tabs = ipw.Tab(children=[p.widget for p in self.panels], titles=[p.title for p in self.panels],
                                  layout=ipw.Layout(width="370px", min_width="370px"))
        self.panel_tabs.selected_index = 2
        self.view_tabs = ipw.Tab(children=[v.widget for v in self.views], titles=[v.title for v in self.views],
                                 layout=ipw.Layout(flex="1 1 auto", min_width="680px"))
        self.view_tabs.selected_index = 0
        self.view_tabs.observe(self._on_tab, names="selected_index")
        self.widget = ipw.VBox([self.banner, ipw.HBox([self.panel_tabs, self.view_tabs],
                                                      layout=ipw.Layout(width="100%"))])
        self.widget.add_class("wb-app")
        self.render()
        for view in self.views[1:]:
            if view.eager:
                view.show(self.state)

    # -- construction helpers ---------------------------------------------------------------------------------
    @classmethod
    def for_dashboard(cls, environ=None, **kwargs) -> "Workbench":
        """The app as a served dashboard: launching and writing stay off unless the environment enables them."""
        env = os.environ if environ is None else environ
        use_served_bundle(served_bundle_url(env))  # one plotly bundle per page instead of one per figure
        allow_launch = env.get(ENV_ALLOW_LAUNCH, "") == "1"
        allow_write = allow_launch or env.get(ENV_ALLOW_WRITE, "") == "1"
        return cls(allow_launch=allow_launch, allow_write=allow_write, **kwargs)

    def require(self, permission: str) -> None:
        """Raise ``PermissionError`` unless ``launch`` or ``write`` was enabled for this app."""
        allowed = {"launch": self.allow_launch, "write": self.allow_write}[permission]
        if not allowed:
            env = ENV_ALLOW_LAUNCH if permission == "launch" else ENV_ALLOW_WRITE
            raise PermissionError(f"{permission} is disabled in this app; create it with allow_{permission}=True "
                                  f"(dashboard: set {env}=1)")

    # -- the update loop --------------------------------------------------------------------------------------
    def dispatch(self, action) -> None:
        start = time.perf_counter()
        self.state = reduce(self.state, action, self._estimator)
        self.render()
        self.last_update_seconds = time.perf_counter() - start

    def render(self) -> None:
        for panel in self.panels:
            panel.show(self.state)
        self.views[self.view_tabs.selected_index or 0].show(self.state)
        self._show_banner()

    def _on_tab(self, change) -> None:
        if change["new"] is not None:
            self.views[change["new"]].show(self.state)

    def _show_banner(self) -> None:
        s = self.state
        est = s.estimate
        parts = [f"<b>{html.escape(s.preset)}</b> ({s.model.num_parameters / 1e9:.2f} B) on "
                 f"{s.cluster.world_size}× {html.escape(s.cluster.gpu.name)} · {s.plan.engine} "
                 f"TP{s.plan.tensor_parallel} PP{s.plan.pipeline_parallel} DP{s.plan.data_parallel}"
                 + (f" ZeRO-{int(s.plan.zero_stage)}" if int(s.plan.zero_stage) else "")]
        t = getattr(est, "time", None)
        if t is not None:
            parts.append(f"{t.step_seconds:.2f} s/step · {t.tokens_per_second:,.0f} tokens/s · MFU {t.mfu:.0%}")
        profile = getattr(est, "profile", None)
        if profile:
            name = profile.get("name")
            parts.append(f'<span class="wb-banner-profile" title="{html.escape(profile.get("note", ""))}">'
                         + (f"profile {html.escape(str(name))}" if name else "datasheet numbers") + "</span>")
        text = " · ".join(parts) + (time_terms_html(t.breakdown) if t is not None else "")
        if s.error:
            text += error_html(f"{s.error} — showing the last valid plan", max_width="900px")
        if self.banner.value != text:
            self.banner.value = text

    # -- display ----------------------------------------------------------------------------------------------
    def static_html(self) -> str:
        """A static snapshot for places without a live kernel (an exported HTML report, nbviewer): the banner and
        the memory per GPU by term for each pipeline stage. Front ends with widgets show the app instead."""
        s = self.state
        memory = getattr(s.estimate, "memory", None)
        parts = [f"<div class='wb-static'><p>{self.banner.value}</p>"]
        if memory is not None:
            stages = list(memory.stages)
            terms = list(stages[0].terms.as_dict()) if stages else []
            head = "".join(f"<th>{html.escape(t)}</th>" for t in ["stage", "layers"] + terms + ["total GiB"])
            rows = "".join(
                "<tr>" + "".join(f"<td>{v}</td>" for v in [st.stage, st.num_layers]
                                 + [f"{b / 2**30:.2f}" for b in st.terms.as_dict().values()]
                                 + [f"{st.total_bytes / 2**30:.2f}"]) + "</tr>" for st in stages)
            parts.append(f"<p>Memory per GPU (GiB) by pipeline stage; capacity {memory.capacity_bytes / 2**30:.1f} "
                         f"GiB, {'fits' if memory.fits else 'does not fit'}.</p><table><tr>{head}"
                         f"</tr>{rows}</table>")
        parts.append("<p><i>Static snapshot of the interactive workbench: open the notebook in JupyterLab or the "
                     "dashboard to change the plan.</i></p></div>")
        return "".join(parts)

    def _repr_mimebundle_(self, **kwargs):
        sync_figures(self.widget)
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):  # HTML exports without widget state show this instead of an empty cell
            bundle["text/html"] = self.static_html()
        return bundle

    def close(self) -> None:
        for item in self.panels + self.views:
            item.close()
        self.widget.close()
