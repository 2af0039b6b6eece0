"""MemoryView: per-GPU memory by term (stacked bars) for each pipeline stage, the GPU capacity line, and a bar for
the host memory that offload needs. Hovering a bar shows its bytes and the core's formula for that term. Under the
summary, for a one-GPU plan in its scope, a button replays the caching allocator (:mod:`widgets.allocator_replay`)."""
from __future__ import annotations

import html

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.allocator_replay import AllocatorReplay
from widgets.common import GIB, View, gib, new_figure, redraw
from workbench.memory_types import TERMS

COLORS = {"weights": "#4c78a8", "gradients": "#f58518", "optimizer": "#e45756", "activations": "#72b7b2",
          "buffers": "#54a24b", "overhead": "#b8b8b8"}
HOST_COLOR = "#9d755d"


def stage_label(stage, show_layers: bool = False) -> str:
    """``stage 0 (emb)``; with ``show_layers`` (an uneven split) the stage's layers too: ``stage 0 (7 layers, emb)``."""
    extra = [x for x, on in (("emb", stage.has_embedding), ("out", stage.has_output)) if on]
    inside = "+".join(extra)
    if show_layers:
        inside = f"{stage.num_layers} layers" + (f", {inside}" if inside else "")
    return f"stage {stage.stage}" + (f" ({inside})" if inside else "")


def memory_traces(memory) -> dict:
    """Plain figure data for a ``MemoryEstimate``: x labels, per-term GiB, bytes and formulas (testable without a
    browser)."""
    stages = list(memory.stages)
    uneven = len({s.num_layers for s in stages}) > 1
    x = [stage_label(s, uneven) for s in stages]
    out = {"x": x, "terms": {}}
    for term in TERMS:
        values = [int(getattr(s.terms, term)) for s in stages]
        formula = memory.formulas.get(term, "")
        out["terms"][term] = {"y": [v / GIB for v in values], "bytes": values, "formula": formula}
    out["capacity_gib"] = memory.capacity_bytes / GIB
    out["host_gib_per_gpu"] = memory.host_bytes_per_gpu / GIB
    return out


def summary_html(memory, plan=None, model=None) -> str:
    peak = memory.per_gpu_peak_bytes
    verdict = ("fits" if memory.fits_gpu else "<b style='color:#b00020'>does not fit</b>")
    head = memory.headroom_bytes
    band = ""
    if memory.band_high_bytes or memory.band_low_bytes:
        band = f" (+{gib(memory.band_high_bytes):.1f} / −{gib(memory.band_low_bytes):.1f} GiB)"
    text = (f'<span class="wb-peak" data-bytes="{int(peak)}">Peak per GPU: <b>{gib(peak):.2f} GiB</b>{band}</span> '
            f"of {gib(memory.capacity_bytes):.2f} GiB on stage {memory.peak_stage.stage} "
            f"({html.escape(memory.peak_stage.peak_phase)}) — {verdict} "
            f"({'+' if head >= 0 else '−'}{abs(gib(head)):.2f} GiB headroom)"
            f'<br><span class="wb-band" style="color:#555">Error band: {html.escape(memory.band_note)}'
            f"{'; fits is judged on the upper side' if band else ''}</span>")
    if memory.shows_host:
        host_ok = "fits" if memory.fits_host else "<b style='color:#b00020'>exceeds host memory</b>"
        text += (f"<br>Host memory (the ranks' processes with what they offload): "
                 f"{gib(memory.host_bytes_per_node):.1f} GiB per node of "
                 f"{gib(memory.host_capacity_bytes_per_node):.0f} GiB — {host_ok}")
    if memory.nvme_bytes_per_gpu:
        nvme_ok = ("fits" if memory.fits_nvme else "<b style='color:#b00020'>exceeds the node's NVMe</b> (set NVMe "
                   "GiB / node in the Hardware panel)")
        text += (f"<br>NVMe for offload: {gib(memory.nvme_bytes_per_node):.1f} GiB per node of "
                 f"{gib(memory.nvme_capacity_bytes_per_node):.0f} GiB — {nvme_ok}")
    if plan is not None and model is not None:
        from workbench.memory import memory_notes

        for note in memory_notes(model, plan, memory):
            text += f'<br><span class="wb-memory-note" style="color:#555">Why: {html.escape(note)}</span>'
    return text


class MemoryView(View):
    """A plotly ``FigureWidget`` and a one-line summary; :meth:`show` redraws inside ``batch_update``."""

    title = "Memory"

    def __init__(self) -> None:
        self.fig = new_figure()
        for term in TERMS:
            self.fig.add_bar(name=term, x=[], y=[], marker_color=COLORS[term],
                             hovertemplate=(f"<b>{term}</b> %{{x}}<br>%{{y:.2f}} GiB = %{{customdata[0]:,}} bytes"
                                            "<br>%{customdata[1]}<extra></extra>"))
        self.fig.add_bar(name="host (offload, per GPU)", x=[], y=[], marker_color=HOST_COLOR, marker_pattern_shape="/",
                         hovertemplate="<b>host memory</b><br>%{y:.2f} GiB = %{customdata[0]:,} bytes per GPU"
                                       "<extra></extra>")
        self.fig.update_layout(barmode="stack", height=420, width=660, margin=dict(l=50, r=20, t=40, b=40),
                               yaxis_title="GiB per GPU", legend=dict(orientation="h", y=-0.15, traceorder="normal"),
                               title="Memory per GPU by pipeline stage")
        self.summary = ipw.HTML()
        self.summary.add_class("wb-memory-summary")
        self.replay = AllocatorReplay()
        self.widget = ipw.VBox([self.summary, self.replay.widget, self.fig])
        self._shown = None

    def show(self, state) -> None:
        est = state.estimate
        memory = getattr(est, "memory", None)
        if memory is None:
            return
        self.replay.show(state)
        if memory is self._shown:
            return
        self._shown = memory
        data = memory_traces(memory)
        n = len(data["x"])
        host = memory.host_bytes_per_gpu if memory.offloaded_bytes_per_gpu else 0
        with redraw(self.fig):
            for i, term in enumerate(TERMS):
                t = data["terms"][term]
                trace = self.fig.data[i]
                trace.x = data["x"]
                trace.y = t["y"]
                trace.customdata = [[b, html.escape(t["formula"])] for b in t["bytes"]]
            host_trace = self.fig.data[len(TERMS)]
            host_trace.x = ["host / GPU"] if host else []
            host_trace.y = [host / GIB] if host else []
            host_trace.customdata = [[int(host)]] if host else []
            cap = data["capacity_gib"]
            self.fig.layout.shapes = [dict(type="line", xref="x", yref="y", x0=-0.5, x1=n - 0.5, y0=cap, y1=cap,
                                           line=dict(color="#b00020", dash="dash", width=2))]
            self.fig.layout.annotations = [dict(x=n - 0.5, y=cap, xref="x", yref="y", xanchor="right",
                                                yanchor="bottom", showarrow=False,
                                                text=f"GPU capacity {cap:.1f} GiB", font=dict(color="#b00020"))]
            top = max([cap] + [sum(data["terms"][t]["y"][i] for t in TERMS) for i in range(n)]
                      + [host / GIB])
            self.fig.layout.yaxis.range = [0, top * 1.1]
        text = summary_html(memory, plan=getattr(est, "plan", None), model=getattr(est, "model", None))
        if self.summary.value != text:
            self.summary.value = text
