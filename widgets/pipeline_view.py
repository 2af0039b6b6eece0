"""PipelineView: a Gantt chart of the pipeline schedule (GPipe, 1F1B or interleaved 1F1B) for the plan, with the
idle time (the bubble) drawn in grey. The schedule is simulated by :func:`workbench.schedule.pipeline_schedule`.

Durations are seconds from the time model when the estimate carries one: the forward and backward of one
micro-batch on the slowest stage as the time model computed them (``TimeEstimate.microbatch_forward_seconds`` /
``microbatch_backward_seconds``), so the drawn idle time is the time model's ``bubble`` term. Without a time estimate (or with "relative" chosen) they are in units of one micro-batch's forward
through a stage, with the backward taking twice as long (the usual 1:2 ratio of forward to backward GEMM work); the
bubble fraction does not depend on the unit.
"""
from __future__ import annotations

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.common import View, new_figure, redraw
from workbench.schedule import bubble_fraction, pipeline_schedule

FORWARD_UNITS = 1.0
BACKWARD_UNITS = 2.0
READABLE_MICROBATCHES = 16
"""At most this many micro-batches (per model chunk) are drawn: beyond it a stage's bars merge into a solid strip.
The steady state repeats, and the bubble's seconds ((p−1)·(f+b)/v) do not depend on m, so the drawn chart shows the
plan's warm-up, steady state, cool-down and bubble; the note under it gives the plan's m."""
PHASE_COLORS = {"fwd": "#4c78a8", "bwd": "#f58518"}
UNITS = ("seconds", "relative")
RELATIVE_AXIS = "time (forward of one micro-batch through a stage = 1)"


def phase_durations(state, units: str = "seconds") -> tuple:
    """``(forward, backward, axis title)`` per micro-batch per stage: seconds from the estimate's time model, or the
    relative 1:2 units when asked for or when the estimate has no time model."""
    t = getattr(state.estimate, "time", None)
    if units == "seconds" and t is not None:
        return t.microbatch_forward_seconds, t.microbatch_backward_seconds, "seconds (time model: slowest stage)"
    return FORWARD_UNITS, BACKWARD_UNITS, RELATIVE_AXIS


def stage_durations(state, p: int, units: str = "seconds"):
    """``(forward, backward)`` per stage where the plan's stages are unequal: in seconds the time model's per-stage
    micro-batch seconds (``TimeEstimate.stage_microbatch_seconds``: an uneven layer split, and the output layer and
    loss on the last stage), the stages the time model's bubble is priced on; in relative units scaled by each
    stage's layers; ``None`` when every stage is alike."""
    est = state.estimate
    t = getattr(est, "time", None)
    if units == "seconds" and t is not None and len(t.stage_microbatch_seconds) == p:
        stages = t.stage_microbatch_seconds
        return stages if len(set(stages)) > 1 else None
    memory = getattr(est, "memory", None)
    layers = [st.num_layers for st in memory.stages] if memory is not None else []
    if len(layers) != p or len(set(layers)) == 1:
        return None
    top = max(layers)
    return [(FORWARD_UNITS * n / top, BACKWARD_UNITS * n / top) for n in layers]


def schedule_kinds(virtual_pipeline: int) -> list:
    return ["interleaved"] if virtual_pipeline > 1 else ["1f1b", "gpipe"]


def drawn_microbatches(p: int, m: int, v: int) -> int:
    """The plan's micro-batch count, or fewer when the chart would be unreadable: at most
    :data:`READABLE_MICROBATCHES` per chunk, a multiple of p for the interleaved schedule, never fewer than p."""
    limit = max(1, READABLE_MICROBATCHES // max(1, v))
    if m <= limit:
        return m
    fit = limit if v == 1 else limit // p * p
    return min(m, max(p, fit))


def idle_intervals(schedule) -> list:
    """(stage, start, end) where a stage waits, between the schedule's first start and last end."""
    begin = min(e.start_s for e in schedule.events)
    finish = max(e.end_s for e in schedule.events)
    out = []
    for stage in range(schedule.pipeline_parallel):
        t = begin
        for e in sorted(schedule.stage_events(stage), key=lambda e: e.start_s):
            if e.start_s > t + 1e-12:
                out.append((stage, t, e.start_s))
            t = max(t, e.end_s)
        if finish > t + 1e-12:
            out.append((stage, t, finish))
    return out


def gantt_data(schedule) -> dict:
    """Bars for each phase and for the idle time: ``{name: {"y", "base", "x", "text"}}`` (x = duration)."""
    out = {}
    for phase in ("fwd", "bwd"):
        ev = [e for e in schedule.events if e.phase == phase]
        out[phase] = {"y": [f"stage {e.stage}" for e in ev], "base": [e.start_s for e in ev],
                      "x": [e.end_s - e.start_s for e in ev],
                      "text": [f"{e.microbatch}" + (f".{e.chunk}" if schedule.virtual_pipeline > 1 else "")
                               for e in ev]}
    idle = idle_intervals(schedule)
    out["idle"] = {"y": [f"stage {s}" for s, _, _ in idle], "base": [a for _, a, _ in idle],
                   "x": [b - a for _, a, b in idle], "text": ["" for _ in idle]}
    return out


class PipelineView(View):
    """The schedule of the current plan's pipeline (nothing to draw when pipeline_parallel = 1)."""

    title = "Pipeline"
    eager = True

    def __init__(self, app=None) -> None:
        self.kind = ipw.ToggleButtons(options=["1f1b", "gpipe"], value="1f1b", style={"button_width": "90px"})
        self.kind.observe(lambda _: self._redraw(), names="value")
        self.units = ipw.ToggleButtons(options=UNITS, value="seconds", style={"button_width": "80px"},
                                       tooltip="seconds from the time model, or relative units (forward = 1)")
        self.units.observe(lambda _: self._redraw(), names="value")
        self.kind.add_class("wb-pipeline-kind")
        self.units.add_class("wb-pipeline-units")
        self.fig = new_figure()
        names = {"fwd": "forward", "bwd": "backward", "idle": "idle (bubble)"}
        for key in ("fwd", "bwd", "idle"):
            # Only the idle bars get a pattern: a trace with marker_pattern_shape="" never takes its later
            # updates in Voila's plotly (the chart stays empty).
            pattern = {"marker_pattern_shape": "/"} if key == "idle" else {}
            self.fig.add_bar(name=names[key], orientation="h", y=[], x=[], base=[],
                             marker_color=PHASE_COLORS.get(key, "#d9d9d9"), **pattern,
                             marker_line_width=0.5, marker_line_color="white", textposition="inside",
                             insidetextanchor="middle", textfont=dict(size=9),
                             hovertemplate=(f"{names[key]}" + (" micro-batch %{text}" if key != "idle" else "")
                                            + "<br>%{base:.4g} → %{customdata:.4g}<extra>%{y}</extra>"))
        self.fig.update_layout(barmode="overlay", height=320, width=660, margin=dict(l=70, r=20, t=70, b=50),
                               xaxis_title=RELATIVE_AXIS,
                               yaxis=dict(autorange="reversed"),
                               legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"))
        self.notes = ipw.HTML()
        self.notes.add_class("wb-pipeline-notes")
        self.widget = ipw.VBox([ipw.HBox([self.kind, self.units]), self.fig, self.notes])
        self._plan = None
        self._state = None

    def show(self, state) -> None:
        if self._state is not None and state.estimate is self._state.estimate:
            return
        self._state = state
        plan = self._plan = state.plan
        kinds = schedule_kinds(plan.virtual_pipeline)
        if list(self.kind.options) != kinds:
            self.kind.options = kinds
            self.kind.value = kinds[0]
        self._redraw()

    def _redraw(self) -> None:
        plan = self._plan
        if plan is None or self.kind.value is None:
            return
        p, m, v = plan.pipeline_parallel, plan.num_microbatches, plan.virtual_pipeline
        m_drawn = drawn_microbatches(p, m, v)
        fwd, bwd, axis = phase_durations(self._state, self.units.value)
        stages = stage_durations(self._state, p, self.units.value)
        schedule = pipeline_schedule(self.kind.value, p, m_drawn, v, forward_seconds=fwd, backward_seconds=bwd,
                                     stage_seconds=stages)
        data = gantt_data(schedule)
        with redraw(self.fig):
            for i, key in enumerate(("fwd", "bwd", "idle")):
                d = data[key]
                trace = self.fig.data[i]
                trace.y, trace.base, trace.x = d["y"], d["base"], d["x"]
                few = len(schedule.events) <= 12 * READABLE_MICROBATCHES
                trace.text = d["text"] if few else None
                trace.marker.line.width = 0.5 if few else 0
                trace.customdata = [b + x for b, x in zip(d["base"], d["x"])]
            self.fig.layout.height = max(220, 120 + 45 * p)
            self.fig.layout.xaxis.title.text = axis
            self.fig.layout.title = (f"{schedule.kind}: p={p}, m={m}" + (f", v={v}" if v > 1 else "")
                                     + (f" (first {m_drawn} drawn)" if m_drawn < m else "")
                                     + f" · bubble {bubble_fraction(p, m, v):.1%} of ideal time")
        notes = [f"Analytic bubble for the plan (p−1)/(v·m) = ({p}−1)/({v}·{m}) = "
                 f"<b>{bubble_fraction(p, m, v):.1%}</b> (Narayanan et al. 2021)."]
        if axis != RELATIVE_AXIS and p > 1:
            notes.append(f"Per micro-batch on a stage: forward {fwd * 1e3:.3g} ms, backward {bwd * 1e3:.3g} ms "
                         f"(recomputation included); drawn bubble {schedule.bubble_seconds:.3g} s"
                         + f", the time model's bubble term {self._state.estimate.time.breakdown['bubble']:.3g} s.")
        elif axis == RELATIVE_AXIS and self.units.value == "seconds":
            notes.append("No time estimate for this plan: relative units.")
        if plan.uneven_stages and p > 1:
            layers = [st.num_layers for st in self._state.estimate.memory.stages]
            middle = f", {layers[1]} on each middle stage" if p > 2 else ""
            notes.append(f"Uneven stages: {layers[0]} layers on the first{middle}, {layers[-1]} on the last (with "
                         f"the output layer and loss); each stage's bars are its own length, the slowest sets "
                         f"the pace.")
        if p == 1:
            notes = ["pipeline_parallel = 1: no pipeline, no bubble."]
        if m_drawn < m:
            notes.append(f"Drawn with the first m={m_drawn} of the plan's m={m} micro-batches: the steady state "
                         f"repeats, and the bubble's seconds do not depend on m.")
        text = " ".join(notes)
        if self.notes.value != text:
            self.notes.value = text
