"""TimeView: where one optimizer step's seconds go. A horizontal stacked bar of the exposed seconds per term of the
time model (:data:`workbench.timing.TERMS`; hovering a term shows its words, :data:`workbench.timing.TERM_WORDS`),
the step time with its held-out error band as a whisker, and a summary: step time and band, tokens/s, MFU, and for
pipeline plans the forward and backward of one micro-batch on each stage as the time model priced them.

The terms are the time model's ``TimeEstimate.breakdown``; they sum to ``step_seconds``. The band is the estimate's
``step_band_seconds`` (:func:`workbench.memory.error_band`, measured on held-out model shapes)."""
from __future__ import annotations

import html
import math
import textwrap

import ipywidgets as ipw

from widgets.common import View, error_html, error_message, new_figure, redraw
from workbench.layerops import host_note
from workbench.memory import HOST_BOUND_SHARE
from workbench.timing import TERM_WORDS, TERMS

COLORS = {"compute": "#332288", "recompute": "#88ccee", "tp_comm": "#44aa99", "cp_comm": "#117733",
          "ep_comm": "#999933", "pp_comm": "#ddcc77", "dp_comm": "#cc6677", "zero3_hooks": "#882255",
          "offload": "#aa4499", "optimizer": "#555555", "bubble": "#dddddd"}
"""One colour per term: Paul Tol's "muted" scheme (distinct under the common colour-vision deficiencies), the
optimizer step in dark grey, and the bubble (idle time) in pale grey, hatched like the Pipeline view's idle bars."""
HATCHED = ("bubble",)
"""Terms drawn with a hatch pattern (idle time). Only these traces get a ``marker_pattern_shape``: in Voila's
plotly a trace with an empty pattern shape stops taking later updates."""
BAND_COLOR = "#000000"
ROW = 0.0
"""Where the bar sits on the (hidden, numeric) y axis; the band's whisker is drawn just above it."""
BAR_WIDTH = 0.5
BAND_Y = 0.42
"""Height of the band's whisker: above the bar's top (ROW + BAR_WIDTH/2), clear of the labels inside the bar."""
HOVER_WIDTH = 70
"""Characters per line of the band's note in its hover box."""
LISTED_STAGES = 8
"""Pipelines of up to this many stages list each stage's micro-batch seconds; longer ones give the range."""


def _finite(value, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} = {number} is not finite")
    return number


def seconds_text(seconds: float) -> str:
    """Seconds to three significant figures, trailing zeros kept (0.835, 0.800, 18.1, 0.0123); whole seconds from
    100 up (1,234)."""
    if abs(seconds) >= 100:
        return f"{seconds:,.0f}"
    return f"{seconds:#.3g}".rstrip(".")


def band_text(step_seconds: float, low_seconds: float = 0.0, high_seconds: float = 0.0) -> str:
    """``0.835 s (+0.133 / −0.148)``: the step time and how far above / below it measured steps went; the step
    alone when there is no band."""
    text = f"{seconds_text(step_seconds)} s"
    if low_seconds or high_seconds:
        text += f" (+{seconds_text(high_seconds)} / −{seconds_text(low_seconds)})"
    return text


def time_traces(time_estimate, band=None, host_note=None) -> dict:
    """Plain figure data for a ``TimeEstimate`` (testable without a browser).

    ``band``: ``(low_seconds, high_seconds, note)`` as ``EvaluatedPlan.step_band_seconds`` gives it, or ``None``;
    ``host_note``: the layer's host time in words (:func:`workbench.layerops.host_note`), or ``None``.
    Returns ``{"y", "step_seconds", "terms", "dropped", "band", "step_text", "tokens_per_second", "mfu", "hfu",
    "gemm_efficiency", "pipeline", "host_note", "host_share"}``: ``terms`` maps each non-zero term, in :data:`TERMS` order, to its seconds,
    share of the step, words and colour; ``dropped`` lists the zero terms (left out of the bar and the legend);
    ``pipeline`` is ``None`` for one stage, else the micro-batch count, the slowest stage's forward and backward of
    one micro-batch and each stage's ``(forward, backward)``. ``ValueError`` naming the field for an estimate that
    cannot be drawn (none, a term missing, negative or not finite, terms that do not add up to the step)."""
    if time_estimate is None:
        raise ValueError("no time estimate for this plan: the step-time view needs the estimate's time model")
    step = _finite(getattr(time_estimate, "step_seconds", None), "step_seconds")
    if step <= 0:
        raise ValueError(f"step_seconds = {step} must be > 0")
    breakdown = getattr(time_estimate, "breakdown", None) or {}
    missing = [t for t in TERMS if t not in breakdown]
    if missing:
        raise ValueError(f"the time breakdown has no {', '.join(missing)} (terms: {', '.join(TERMS)})")
    tolerance = 1e-9 * step
    seconds = {}
    for term in TERMS:
        value = _finite(breakdown[term], f"breakdown[{term!r}]")
        if value < -tolerance:
            raise ValueError(f"breakdown[{term!r}] = {value:.6g} s is negative: exposed seconds are ≥ 0")
        seconds[term] = max(value, 0.0)
    total = sum(seconds.values())
    if abs(total - step) > 1e-6 * step:
        raise ValueError(f"the time terms add up to {total:.6g} s but step_seconds = {step:.6g} s")
    terms = {t: {"seconds": s, "share": s / step, "words": TERM_WORDS[t], "color": COLORS[t]}
             for t, s in seconds.items() if s > tolerance}
    out = {"y": ROW, "step_seconds": step, "terms": terms, "dropped": [t for t in TERMS if t not in terms]}
    low = high = 0.0
    note = ""
    if band is not None:
        low, high, note = band
        low, high = _finite(low, "band low_seconds"), _finite(high, "band high_seconds")
        if low < 0 or high < 0:
            raise ValueError(f"the step-time band (−{low:.6g} / +{high:.6g} s) must be ≥ 0 on both sides")
    out["band"] = {"low_seconds": low, "high_seconds": high, "note": str(note)}
    out["step_text"] = band_text(step, low, high)
    out["host_note"] = str(host_note) if host_note else None
    share = getattr(time_estimate, "host_share", None)
    out["host_share"] = None if share is None else _finite(share, "host_share")
    out["tokens_per_second"] = time_estimate.tokens_per_second
    out["mfu"], out["hfu"] = time_estimate.mfu, time_estimate.hfu
    out["gemm_efficiency"] = float(getattr(time_estimate, "gemm_efficiency", 0.0) or 0.0)
    stages = [tuple(float(x) for x in pair) for pair in getattr(time_estimate, "stage_microbatch_seconds", ()) or ()]
    out["pipeline"] = None
    if len(stages) > 1:
        out["pipeline"] = {"stages": stages, "num_microbatches": (time_estimate.inputs or {}).get("num_microbatches"),
                           "forward_seconds": float(time_estimate.microbatch_forward_seconds),
                           "backward_seconds": float(time_estimate.microbatch_backward_seconds),
                           "bubble_seconds": seconds["bubble"]}
    return out


def duration_text(seconds: float) -> str:
    """``50.4 ms`` below a second, ``1.47 s`` from one up."""
    return f"{seconds_text(seconds)} s" if seconds >= 1 else f"{seconds_text(seconds * 1e3)} ms"


def summary_html(data: dict) -> str:
    """The summary above the bar: step time with its band, tokens/s, MFU (HFU when recomputation makes it differ),
    the band's provenance, and for a pipeline plan one micro-batch's forward and backward per stage."""
    step = data["step_seconds"]
    util = f"MFU {data['mfu']:.1%}"
    if abs(data["hfu"] - data["mfu"]) > 5e-4:
        util += f" (HFU {data['hfu']:.1%}, with recomputation)"
    text = (f'<span class="wb-step" data-seconds="{step!r}">Step time: '
            f'<b>{html.escape(data["step_text"])}</b></span> · {data["tokens_per_second"]:,.0f} tokens/s · {util}')
    if data["gemm_efficiency"]:
        text += f" · layer GEMMs at {data['gemm_efficiency']:.0%} of peak"
    band = data["band"]
    if band["note"]:
        text += f'<br><span class="wb-band" style="color:#555">Error band: {html.escape(band["note"])}</span>'
    pipe = data["pipeline"]
    if pipe is not None:
        m = pipe["num_microbatches"]
        text += (f'<br><span class="wb-time-pipeline">Pipeline of {len(pipe["stages"])} stages'
                 + (f", {m} micro-batches" if m else "")
                 + f": one micro-batch on the slowest stage takes forward {duration_text(pipe['forward_seconds'])}, "
                 f"backward {duration_text(pipe['backward_seconds'])} (recomputation included); bubble "
                 f"{seconds_text(pipe['bubble_seconds'])} s")
        stages = pipe["stages"]
        if len(set(stages)) > 1 and len(stages) <= LISTED_STAGES:
            text += " — per stage (forward / backward): " + ", ".join(
                f"{i}: {duration_text(f)} / {duration_text(b)}" for i, (f, b) in enumerate(stages))
        elif len(set(stages)) > 1:
            fastest = min(stages, key=sum)
            text += (f" — the fastest stage: forward {duration_text(fastest[0])}, backward "
                     f"{duration_text(fastest[1])}")
        text += "</span>"
    if data.get("host_note"):
        text += f'<br><span class="wb-time-host" style="color:#555">Host: {html.escape(data["host_note"])}</span>'
    if data.get("host_share") is not None:
        bound = "host-bound: its time follows the host CPU's speed" if data["host_share"] >= HOST_BOUND_SHARE \
            else "GPU-bound"
        text += (f'<br><span class="wb-time-share" style="color:#555">Host share: {data["host_share"]:.0%} of the step '
                 f"({bound})</span>")
    if data["dropped"]:
        text += (f'<br><span class="wb-time-zero" style="color:#555">Zero for this plan (not drawn): '
                 f"{html.escape(', '.join(data['dropped']))}</span>")
    return text


class TimeView(View):
    """A plotly ``FigureWidget`` (one horizontal stacked bar and the band's whisker), a summary above it and an
    inline error line; :meth:`show` redraws inside ``batch_update`` when the estimate or the error changes."""

    title = "Step time"
    eager = True

    def __init__(self, app=None) -> None:
        self.fig = new_figure()
        for term in TERMS:
            pattern = {"marker_pattern_shape": "/"} if term in HATCHED else {}
            self.fig.add_bar(name=term, legendgroup=term, orientation="h", y=[], x=[], marker_color=COLORS[term],
                             **pattern, marker_line_color="white", marker_line_width=1, textposition="inside",
                             insidetextanchor="middle", textfont=dict(size=11),
                             hovertemplate=(f"<b>{term}</b>: %{{customdata[0]}}<br>%{{customdata[1]}} per step · "
                                            "%{customdata[2]} of the step<extra></extra>"))
        self.fig.add_scatter(name="step time and error band", y=[], x=[], mode="markers",
                             marker=dict(symbol="line-ns-open", size=22, color=BAND_COLOR, line=dict(width=2)),
                             error_x=dict(type="data", symmetric=False, array=[], arrayminus=[], color=BAND_COLOR,
                                          thickness=1.5, width=10),
                             hovertemplate="<b>step</b> %{customdata[0]}<br>%{customdata[1]}<extra></extra>")
        # a numeric y axis (hidden): the bar at ROW, the band's whisker at BAND_Y just above it
        self.fig.update_layout(barmode="stack", height=320, width=660, margin=dict(l=50, r=20, t=50, b=40),
                               title="Where one step's seconds go (exposed seconds per term)",
                               xaxis=dict(title="seconds per optimizer step", rangemode="tozero"),
                               yaxis=dict(showticklabels=False, showgrid=False, zeroline=False,
                                          range=[-0.45, 0.6], fixedrange=True),
                               uniformtext=dict(minsize=9, mode="hide"),  # a bar too short for its label has none
                               legend=dict(orientation="h", y=-0.36, traceorder="normal"))
        self.error = ipw.HTML()
        self.error.add_class("wb-time-error")
        self.summary = ipw.HTML()
        self.summary.add_class("wb-time-summary")
        self.widget = ipw.VBox([self.error, self.summary, self.fig])
        self.widget.add_class("wb-time-view")
        self._shown = None

    def show(self, state) -> None:
        est = state.estimate
        key = (id(est), state.error)
        if key == self._shown:
            return
        self._shown = key
        message = ""
        try:
            t = getattr(est, "time", None)
            data = time_traces(t, band=est.step_band_seconds if t is not None else None,
                               host_note=host_note(est.model, est.plan) if t is not None else None)
        except Exception as exc:  # noqa: BLE001 - shown in red, the figure keeps what it drew last
            message = error_message(exc)
            data = None
        if not message and state.error:
            message = f"{state.error} — showing the last valid plan"
        text = error_html(message, max_width="900px")
        if self.error.value != text:
            self.error.value = text
        if data is None:
            return
        self._draw(data)
        text = summary_html(data)
        if self.summary.value != text:
            self.summary.value = text

    def _draw(self, data: dict) -> None:
        step = data["step_seconds"]
        band = data["band"]
        with redraw(self.fig):
            for i, term in enumerate(TERMS):
                trace = self.fig.data[i]
                t = data["terms"].get(term)
                if t is None:  # a zero term: no bar, no legend entry
                    trace.visible = False
                    trace.x, trace.y, trace.customdata, trace.text = [], [], [], []
                    continue
                trace.visible = True
                trace.name = f"{term} {seconds_text(t['seconds'])} s"  # the legend says what a thin bar holds
                trace.x, trace.y, trace.width = [t["seconds"]], [data["y"]], [BAR_WIDTH]
                trace.text = [f"{seconds_text(t['seconds'])} s"]
                trace.customdata = [[html.escape(t["words"]), f"{t['seconds']:.4g} s", f"{t['share']:.1%}"]]
            marker = self.fig.data[len(TERMS)]
            marker.x, marker.y = [step], [BAND_Y]
            marker.error_x.array = [band["high_seconds"]]
            marker.error_x.arrayminus = [band["low_seconds"]]
            note = band["note"] or "no error band for this engine"
            # the note wrapped for the hover box (plotly does not wrap it; one long line runs off the figure)
            marker.customdata = [[data["step_text"], "<br>".join(html.escape(line)
                                                                 for line in textwrap.wrap(note, HOVER_WIDTH))]]
            self.fig.layout.xaxis.range = [0, (step + band["high_seconds"]) * 1.05]
