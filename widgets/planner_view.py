"""PlannerView: search every valid parallel plan for the current model, cluster and global batch
(:func:`workbench.planner.search`), list the fastest in a table, plot throughput against memory headroom with the
Pareto front, explain why the winner beats the runner-up, and load a chosen plan into the app.

The search runs in the kernel when "Search" is pressed (about 0.1 s for the guide's 13B example on 8 GPUs) and once
when the tab is first opened. When nothing is valid or nothing fits, the planner's message is shown inline.
"""
from __future__ import annotations

import html

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.common import BOX_MAX, GIB, View, error_html, error_message, new_figure, redraw
from widgets.state import LoadSpecs
from workbench.planner import DEFAULT_HEADROOM, risk_note, search
from workbench.specs import Engine, Offload

TABLE_ROWS = 10
"""Rows of the ranked table (and choices for "use this plan")."""
SCATTER_PLANS = 60
"""Fastest feasible plans drawn in the scatter (the Pareto front is drawn whole)."""
COLUMNS = ("#", "engine", "TP", "PP", "v", "CP", "DP", "ZeRO", "offload", "recompute", "mbs", "GiB/GPU", "s/step",
           "tokens/s", "MFU", "Pareto")


def search_settings(state) -> dict:
    """The keyword arguments of :func:`workbench.planner.search` that carry the current plan's settings the planner
    does not vary (precision, the stack and DeepSpeed's ZeRO sizes, LoRA, the MoE load assumption and megatron-core's
    MoE switches) and the
    hardware profile, so every ranked row is priced as the other views price the current plan and "Use this plan"
    keeps them."""
    p = state.plan
    return dict(precision=p.precision, adam=p.adam, overlap_comm=p.overlap_comm, fp8_recipe=p.fp8_recipe,
                fp8_param_gather=p.fp8_param_gather, grad_reduce_fp32=p.grad_reduce_fp32,
                expandable_segments=p.expandable_segments, pin_memory=p.pin_memory, lora_rank=p.lora_rank,
                lora_targets=p.lora_targets,
                moe_load_imbalance=p.moe_load_imbalance, cross_entropy_fusion=p.cross_entropy_fusion,
                moe_overlap_alltoall=p.moe_overlap_alltoall,
                moe_capacity_factor=None if p.deepspeed_moe else p.moe_capacity_factor,
                moe_pad_to_capacity=p.moe_pad_to_capacity and not p.deepspeed_moe, profile=state.profile,
                reduce_bucket_size=p.reduce_bucket_size, prefetch_bucket_size=p.prefetch_bucket_size,
                param_persistence_threshold=p.param_persistence_threshold, sub_group_size=p.sub_group_size)


def offload_text(plan) -> str:
    parts = []
    if plan.offload_optimizer is not Offload.NONE:
        parts.append(f"opt→{plan.offload_optimizer}")
    if plan.offload_params is not Offload.NONE:
        parts.append(f"params→{plan.offload_params}")
    return ", ".join(parts) or "—"


def zero_text(plan) -> str:
    if plan.engine is Engine.MEGATRON:
        return "dist-opt" if plan.distributed_optimizer else "—"
    return str(int(plan.zero_stage))


def table_row(rank: int, r, on_front: bool) -> list:
    """The ranked table's cells for one :class:`workbench.planner.PlanResult`."""
    p = r.plan
    return [str(rank), str(p.engine), str(p.tensor_parallel) + (" SP" if p.sequence_parallel else "") + (" +ovl" if p.tp_comm_overlap else ""),
            str(p.pipeline_parallel), str(p.virtual_pipeline),
            str(p.context_parallel) + (" Ulysses" if p.is_ulysses else f" {p.cp_comm_type}"
                                       if p.context_parallel > 1 and str(p.cp_comm_type) != "p2p" else ""),
            str(p.data_parallel),
            zero_text(p), offload_text(p), str(p.recompute), f"{p.micro_batch_size}×{p.gradient_accumulation_steps}",
            f"{r.peak_bytes / GIB:.1f}" + (" !" if r.risky else ""), f"{r.step_seconds:.3f}", f"{r.tokens_per_second:,.0f}", f"{r.mfu:.1%}",
            "★" if on_front else ""]


def table_html(result) -> str:
    front = {r.plan for r in result.pareto}
    head = "".join(f"<th style='padding:2px 6px;text-align:right'>{c}</th>" for c in COLUMNS)
    rows = []
    for i, r in enumerate(result.ranked[:TABLE_ROWS], 1):
        cells = table_row(i, r, r.plan in front)
        style = "background:#e8f4ea;font-weight:bold" if i == 1 else ""
        if r.risky:  # fits on the point estimate only: amber, with the numbers on hover
            style += ";color:#8a5300"
        title = html.escape(risk_note(r, result.headroom), quote=True)
        rows.append(f"<tr class='wb-planner-row' style='{style}' title='{title}'>"
                    + "".join(f"<td style='padding:2px 6px;text-align:right'>{html.escape(c)}</td>" for c in cells)
                    + "</tr>"
                    # the whole plan text under its row (never cut): what "Use this plan" loads
                    + f"<tr class='wb-planner-plan' style='{style}'><td></td><td colspan='{len(COLUMNS) - 1}' "
                      f"style='padding:0 6px 4px 6px;text-align:left;color:#555;white-space:normal'>"
                      f"{html.escape(r.describe())}</td></tr>")
    note = ("" if not any(r.risky for r in result.ranked[:TABLE_ROWS]) else
            f"<div class='wb-planner-risky' style='color:#8a5300;font-size:12px'>! (amber): fits on the point estimate "
            f"of memory only; at the upper side of the held-out error band it passes the {result.headroom:.0%} "
            f"headroom ({result.risky:,} of the {result.feasible:,} plans that fit). Hover a row for its numbers.</div>")
    return (f"<table class='wb-planner-table' style='border-collapse:collapse;font-size:12px'>"
            f"<tr style='border-bottom:1px solid #999'>{head}</tr>{''.join(rows)}</table>" + note)


class PlannerView(View):
    """Ranked plans for the app's model and cluster; "Use this plan" sends ``LoadSpecs(plan=...)``."""

    title = "Planner"

    def __init__(self, app=None) -> None:
        self.app = app
        self.global_batch = ipw.BoundedIntText(description="global batch", min=1, max=BOX_MAX, value=1,
                                               style={"description_width": "90px"}, layout=ipw.Layout(width="190px"))
        self.headroom = ipw.BoundedFloatText(description="headroom %", min=0.0, max=99.0, step=1.0,
                                             value=100 * DEFAULT_HEADROOM, style={"description_width": "90px"},
                                             layout=ipw.Layout(width="170px"),
                                             tooltip="GPU memory kept free (fragmentation, allocator spikes)")
        self.offload = ipw.Checkbox(value=True, description="allow CPU offload", indent=False,
                                    layout=ipw.Layout(width="150px"),
                                    tooltip="DeepSpeed offload of the optimizer and parameters to the CPU; where the "
                                            "hardware sets NVMe GiB / node above 0, ZeRO-3 with the optimizer on "
                                            "NVMe (ZeRO-Infinity) is searched too")
        self.fit_on_band = ipw.Checkbox(value=False, description="fit at the error band's upper side", indent=False,
                                        layout=ipw.Layout(width="250px"),
                                        tooltip="judge fit as the Memory view does, at the held-out error band's "
                                                "upper side (no amber plans); off: on the point estimate")
        self.fit_on_band.add_class("wb-planner-fit-on-band")
        self.search_button = ipw.Button(description="Search", icon="search", button_style="primary")
        self.search_button.add_class("wb-planner-search")
        self.search_button.on_click(lambda _: self.run_search())
        self.status = ipw.HTML()
        self.status.add_class("wb-planner-status")
        self.error = ipw.HTML()
        self.error.add_class("wb-planner-error")
        self.table = ipw.HTML()
        self.choice = ipw.Dropdown(description="plan", options=[], layout=ipw.Layout(width="760px"),
                                   style={"description_width": "40px"})
        self.use_button = ipw.Button(description="Use this plan", icon="check", disabled=True)
        self.use_button.add_class("wb-planner-use")
        self.use_button.on_click(lambda _: self.use_plan())
        self.fig = None
        """The scatter (a plotly ``FigureWidget``), made when the tab is first shown: each figure is a browser-side
        model that must start within anywidget's 2 s, so the page does not start figures of tabs nobody opened."""
        self.figure_box = ipw.Box()
        self.explanation = ipw.HTML()
        self.explanation.add_class("wb-planner-explanation")
        self.widget = ipw.VBox([ipw.HBox([self.global_batch, self.headroom, self.offload, self.fit_on_band,
                                          self.search_button]),
                                self.status, self.error, self.table, ipw.HBox([self.choice, self.use_button]),
                                self.figure_box, self.explanation])
        self.widget.add_class("wb-planner")
        self.result = None
        self._state = None
        self._searched_for = None

    def _build_figure(self) -> None:
        self.fig = new_figure()
        self.fig.add_scatter(name="feasible plans", mode="markers", x=[], y=[],
                             marker=dict(color="#9ecae1", size=8, line=dict(width=0.5, color="#3182bd")),
                             hovertemplate="%{text}<br>%{x:.1f} GiB free, %{y:,.0f} tokens/s<extra></extra>")
        self.fig.add_scatter(name="Pareto front", mode="lines+markers", x=[], y=[],
                             line=dict(color="#d62728", shape="hv"), marker=dict(color="#d62728", size=9),
                             hovertemplate="%{text}<br>%{x:.1f} GiB free, %{y:,.0f} tokens/s<extra>Pareto</extra>")
        self.fig.add_scatter(name="current plan", mode="markers", x=[], y=[],
                             marker=dict(symbol="x", color="black", size=12),
                             hovertemplate="%{text}<br>%{x:.1f} GiB free, %{y:,.0f} tokens/s<extra>current</extra>")
        self.fig.add_scatter(name="fastest", mode="markers", x=[], y=[],
                             marker=dict(symbol="star", color="#2ca02c", size=16, line=dict(width=1, color="black")),
                             hovertemplate="%{text}<extra>fastest</extra>")
        self.fig.update_layout(height=400, width=660, margin=dict(l=70, r=20, t=40, b=90),
                               xaxis_title="memory headroom per GPU (GiB free)", yaxis_title="tokens/s",
                               legend=dict(orientation="h", x=0, xanchor="left", y=-0.22, yanchor="top"))
        self.figure_box.children = [self.fig]

    # -- state ----------------------------------------------------------------------------------------------------
    def show(self, state) -> None:
        if self.fig is None:
            self._build_figure()
        previous, self._state = self._state, state
        if previous is None or previous.plan.global_batch_size != state.plan.global_batch_size:
            self.global_batch.value = state.plan.global_batch_size
        if self._searched_for is None:
            self.run_search()
            return
        self._show_current()
        self._set_status(self._searched_for != self._search_key(state))

    def _set_status(self, stale: bool = False) -> None:
        r = self.result
        if r is None:
            text = ""
        else:
            text = (f"{r.evaluated:,} plans evaluated, {r.feasible:,} fit"
                    + (" at the error band's upper side" if r.fit_on == "band" else "")
                    + (f" ({r.risky:,} only on the point estimate of memory)" if r.risky else "")
                    + f", in {r.elapsed_seconds * 1e3:.0f} ms "
                    f"(global batch {r.global_batch_size}, {r.headroom:.0%} headroom on "
                    f"{r.cluster.world_size}× {html.escape(r.cluster.gpu.name)}).")
        if stale:
            text += " <b>The model, hardware or plan settings changed: press Search.</b>"
        if self.status.value != text:
            self.status.value = text

    # -- actions --------------------------------------------------------------------------------------------------
    def run_search(self):
        """Search for the app's current model, cluster and precision; shows the result or the planner's message."""
        s = self._state
        if s is None:
            return None
        self._searched_for = self._search_key(s)
        try:
            result = search(s.model, s.cluster, global_batch_size=int(self.global_batch.value),
                            headroom=float(self.headroom.value) / 100.0, offload=bool(self.offload.value),
                            top=SCATTER_PLANS, fit_on="band" if self.fit_on_band.value else "point",
                            **search_settings(s))
        except Exception as exc:  # noqa: BLE001 - a click handler shows every failure in red, never raises
            self.result = None
            self.error.value = error_html(error_message(exc), max_width="900px")
            self.table.value = self.explanation.value = ""
            self.choice.options = []
            self.use_button.disabled = True
            with redraw(self.fig):
                for trace in self.fig.data[:2] + self.fig.data[3:]:
                    trace.x, trace.y, trace.text = [], [], []
            self._show_current()
            self._set_status()
            return None
        self.result = result
        self.error.value = ""
        self.table.value = table_html(result)
        self.choice.options = [(f"#{i} {r.describe()} — {r.tokens_per_second:,.0f} tokens/s", i - 1)
                               for i, r in enumerate(result.ranked[:TABLE_ROWS], 1)]
        self.choice.value = 0
        self.use_button.disabled = self.app is None
        self.explanation.value = ("<div style='white-space:pre-wrap;font-size:13px;max-width:900px'>"
                                  + html.escape(result.explanation) + "</div>")
        with redraw(self.fig):
            for trace, rows in ((self.fig.data[0], result.ranked), (self.fig.data[1], result.pareto),
                                (self.fig.data[3], result.ranked[:1])):
                rows = sorted(rows, key=lambda r: r.headroom_bytes)
                trace.x = [r.headroom_bytes / GIB for r in rows]
                trace.y = [r.tokens_per_second for r in rows]
                trace.text = [r.describe() for r in rows]
            self.fig.layout.title = (f"{len(result.ranked)} fastest plans of {result.feasible:,} that fit; "
                                     f"Pareto front: {len(result.pareto)}")
        self._show_current()
        self._set_status()
        return result

    @staticmethod
    def _search_key(state) -> tuple:
        """What a search depends on besides the view's own boxes: a change marks the shown result stale."""
        settings = search_settings(state)
        profile = settings.pop("profile")
        return (state.model, state.cluster, tuple(settings.items()), id(profile) if profile is not None else None)

    def use_plan(self, index=None) -> None:
        """Load ranked plan ``index`` (default: the one chosen in the dropdown) into the app, through the reducer."""
        if self.result is None or self.app is None:
            return
        i = self.choice.value if index is None else index
        self.app.dispatch(LoadSpecs(plan=self.result.ranked[i].plan))

    def _show_current(self) -> None:
        s = self._state
        t = getattr(s.estimate, "time", None) if s is not None else None
        trace = self.fig.data[2]
        with redraw(self.fig):
            if t is None or not s.valid:
                trace.x, trace.y, trace.text = [], [], []
            else:
                mem = s.estimate.memory
                trace.x = [(mem.capacity_bytes - mem.per_gpu_peak_bytes) / GIB]
                trace.y = [t.tokens_per_second]
                trace.text = ["current plan"]
