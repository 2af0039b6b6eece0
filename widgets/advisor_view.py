"""AdvisorView: the advisor's rules checked on the current plan (:func:`workbench.advisor.advise`) — pass / warn /
fail rows with their numbers, the out-of-memory ladder as a waterfall of memory per GPU after each step against the
GPU's capacity (with each step's throughput cost), the low-throughput suggestions, the diagnostic command lines,
and an optional training log pasted into a text box (read by :func:`workbench.logreader.parse_log`; the view never
opens a path on the server).
"""
from __future__ import annotations

import html

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.common import GIB, View, error_html, error_message, new_figure, redraw
from workbench.advisor import advise
from workbench.logreader import parse_log

STATUS_STYLE = {"pass": ("#1a7f37", "#e8f4ea", "✔"), "warn": ("#9a6700", "#fff8c5", "!"),
                "fail": ("#b00020", "#fdecea", "✖")}


def findings_html(findings, css_class: str = "wb-advisor-checks") -> str:
    """One row per :class:`workbench.advisor.Finding`: status, rule, what was found, what to change."""
    rows = []
    for f in findings:
        color, background, mark = STATUS_STYLE[f.status]
        rows.append(f"<tr class='wb-check wb-check-{f.status}' style='background:{background}'>"
                    f"<td style='color:{color};font-weight:bold;padding:2px 6px;white-space:nowrap'>{mark} {f.status}</td>"
                    f"<td style='padding:2px 6px;white-space:nowrap'><code>{html.escape(f.id)}</code></td>"
                    f"<td style='padding:2px 6px'>{html.escape(f.message)}</td>"
                    f"<td style='padding:2px 6px;color:#555'>{html.escape(f.suggestion)}</td></tr>")
    return (f"<table class='{css_class}' style='border-collapse:collapse;font-size:12px;max-width:980px'>"
            f"<tr><th>status</th><th>rule</th><th>found</th><th>suggestion</th></tr>{''.join(rows)}</table>")


def wrap_label(text: str, width: int = 22) -> str:
    """An axis label broken into lines of at most ``width`` characters (``<br>``), never cut."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, width=width, break_long_words=False)) or text


def ladder_bars(peak_bytes: int, ladder) -> dict:
    """Waterfall data: the plan's peak, then each rung's change of peak memory (GiB); text carries the step time
    cost. Rungs that cannot be applied change nothing and say why."""
    x, measure, y, text = ["current plan"], ["absolute"], [peak_bytes / GIB], [f"{peak_bytes / GIB:.1f} GiB"]
    previous = peak_bytes
    for s in ladder:
        x.append(wrap_label(f"{s.step}. {s.action}"))
        measure.append("relative")
        if s.plan is None:
            y.append(0.0)
            text.append("not applicable")
            continue
        y.append((s.peak_bytes - previous) / GIB)
        text.append(f"{s.peak_bytes / GIB:.1f} GiB<br>step time {s.slowdown:+.0%}" + (" ✔ fits" if s.fits else ""))
        previous = s.peak_bytes
    return {"x": x, "measure": measure, "y": y, "text": text}


def suggestions_html(suggestions) -> str:
    if not suggestions:
        return "<i>No exposed time term above 1 % of the step.</i>"
    items = []
    for s in suggestions:
        settings = "".join(f"<li><code>{html.escape(x)}</code></li>" for x in s.settings)
        items.append(f"<li><b>{html.escape(s.term)}</b>: {s.exposed_seconds:.3f} s/step exposed "
                     f"({s.fraction_of_step:.1%} of the step) — {html.escape(s.message)}"
                     + (f"<ul>{settings}</ul>" if settings else "") + "</li>")
    return f"<ol class='wb-advisor-throughput' style='font-size:13px;max-width:980px'>{''.join(items)}</ol>"


def log_summary_html(summary) -> str:
    d = summary.to_dict()
    parts = [f"log kind <b>{html.escape(d['kind'])}</b>, {d['progress_lines']} progress lines"]
    if d["last_loss"] is not None:
        parts.append(f"loss {d['first_loss']:.4g} → {d['last_loss']:.4g}")
    if d["median_step_seconds"] is not None:
        parts.append(f"median {d['median_step_seconds']:.3f} s/iteration")
    if d["median_tflops_per_gpu"] is not None:
        parts.append(f"{d['median_tflops_per_gpu']:.1f} TFLOP/s per GPU")
    if d["max_allocated_bytes"]:
        parts.append(f"max allocated {d['max_allocated_bytes'] / GIB:.2f} GiB")
    if d["skipped_iterations"] or d["overflow_count"]:
        parts.append(f"{max(d['skipped_iterations'], d['overflow_count'])} skipped steps")
    if d["grad_norm_spikes"]:
        parts.append(f"{len(d['grad_norm_spikes'])} gradient-norm spikes")
    if d["oom_errors"]:
        parts.append(f"{len(d['oom_errors'])} out-of-memory errors")
    if d["nccl_errors"]:
        parts.append(f"{len(d['nccl_errors'])} NCCL errors")
    return "<div class='wb-log-summary'>" + "; ".join(parts) + ".</div>"


class AdvisorView(View):
    """Advice for the app's plan, recomputed when the estimate changes and the tab is visible."""

    title = "Advisor"

    def __init__(self, app=None) -> None:
        self.app = app
        self.checks = ipw.HTML()
        self.fig = None
        """The waterfall (a plotly ``FigureWidget``), made at the first redraw: each figure is a browser-side model
        that must start within anywidget's 2 s, so the page does not start figures of tabs nobody opened."""
        self.figure_box = ipw.Box()
        self.ladder_note = ipw.HTML()
        self.ladder_note.add_class("wb-advisor-ladder")
        self.throughput = ipw.HTML()
        self.commands = ipw.HTML()
        self.log_text = ipw.Textarea(placeholder="Paste rank-0 output of a DeepSpeed or Megatron run here "
                                                 "(iteration lines, OVERFLOW / out-of-memory / NCCL messages)",
                                     layout=ipw.Layout(width="900px", height="9em"))
        self.log_button = ipw.Button(description="Read log", icon="file-text")
        self.log_button.add_class("wb-advisor-read-log")
        self.log_button.on_click(lambda _: self.read_log())
        self.log_result = ipw.HTML()
        self.log_result.add_class("wb-advisor-log")
        self.error = ipw.HTML()
        heading = lambda text: ipw.HTML(f"<h4 style='margin:10px 0 2px'>{text}</h4>")  # noqa: E731
        self.widget = ipw.VBox([self.error, heading("Checks (the guide's rules on this plan)"), self.checks,
                                heading("Out of memory: the guide's ladder"), self.ladder_note, self.figure_box,
                                heading("Throughput: what is exposed, what to try"), self.throughput,
                                heading("Diagnostics"), self.commands,
                                heading("Training log"), self.log_text, self.log_button, self.log_result])
        self.widget.add_class("wb-advisor")
        self.advice = None
        self.log_summary = None
        self._state = None

    def show(self, state) -> None:
        if self._state is not None and state.estimate is self._state.estimate and state.options is self._state.options:
            return
        self._state = state
        self._redraw()

    def read_log(self, text=None):
        """Read the pasted log (or ``text``) and match it to the advice; returns the :class:`LogSummary`."""
        if text is not None:
            self.log_text.value = text
        body = self.log_text.value
        try:
            self.log_summary = parse_log(body) if body.strip() else None
        except ValueError as exc:  # shown in red; the previous log's findings must not stay as if they were this one's
            self.log_summary = None
            self._redraw()
            self.log_result.value = ""
            self.error.value = error_html(error_message(exc), max_width="900px")
            return None
        self._redraw()
        return self.log_summary

    def _redraw(self) -> None:
        s = self._state
        if s is None:
            return
        try:
            # the state's estimate is the plan's record: the advisor reads it instead of pricing the plan again
            self.advice = advise(s.model, s.cluster, s.plan, options=s.options, log=self.log_summary,
                                 record=s.estimate, profile=s.profile)
        except Exception as exc:  # noqa: BLE001 - shown in red
            # the previous plan's advice must not stay on screen as if it were this plan's
            self.advice = None
            self.error.value = error_html(error_message(exc), max_width="900px")
            self.checks.value = self.ladder_note.value = self.throughput.value = self.commands.value = ""
            self.log_result.value = ""
            if self.fig is not None:
                if self.fig.data:
                    self.fig.data = ()
                with redraw(self.fig):
                    self.fig.layout.annotations = []
                    self.fig.layout.title = "no advice for this plan (the message above says why)"
            return
        self.error.value = ""
        a = self.advice
        self.checks.value = findings_html(a.findings)
        mem = s.estimate.memory
        capacity = mem.capacity_bytes / GIB
        bars = ladder_bars(int(mem.per_gpu_peak_bytes), a.oom_ladder)
        if self.fig is None:
            self.fig = new_figure()
            # labels wrap (never cut); the capacity label sits in the right margin, clear of the bars
            self.fig.update_layout(height=420, width=860, margin=dict(l=60, r=130, t=50, b=110),
                                   yaxis_title="peak memory per GPU (GiB)", showlegend=False,
                                   xaxis=dict(tickangle=0, tickfont=dict(size=10), automargin=True))
            self.figure_box.children = [self.fig]
        # the waterfall is replaced, not restyled (the number of bars changes with the ladder)
        if self.fig.data:  # (deleting no traces sends an empty deleteTraces the browser's plotly trips on)
            self.fig.data = ()
        self.fig.add_waterfall(x=bars["x"], y=bars["y"], measure=bars["measure"], text=bars["text"],
                               textposition="none", orientation="v",
                               increasing=dict(marker_color="#d62728"), decreasing=dict(marker_color="#2ca02c"),
                               totals=dict(marker_color="#4c78a8"), connector=dict(line=dict(color="#888")),
                               hovertemplate="%{x}<br>%{text}<extra></extra>")
        with redraw(self.fig):
            self.fig.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, y0=capacity, y1=capacity,
                                           line=dict(color="#b00020", dash="dash"))]
            # each bar's text above its top (a saving's text drawn "outside" would sit below the bar, on the axis
            # for the last rung)
            level, tops = 0.0, []
            for dy in bars["y"]:
                tops.append(max(level, level + dy))
                level += dy
            self.fig.layout.annotations = (
                [dict(x=x, y=top, yanchor="bottom", showarrow=False, text=t, font=dict(size=10))
                 for x, top, t in zip(bars["x"], tops, bars["text"])]
                + [dict(xref="paper", x=1.01, y=capacity, xanchor="left", yanchor="middle", showarrow=False,
                        align="left", text=f"{s.cluster.gpu.name}<br>capacity<br>{capacity:.1f} GiB",
                        font=dict(color="#b00020", size=11))])
            top = max([capacity] + [sum(bars["y"][:i + 1]) for i in range(len(bars["y"]))])
            self.fig.layout.yaxis.range = [0, 1.15 * top]
            self.fig.layout.title = ("memory after each step of the ladder vs GPU capacity" if a.oom_ladder
                                     else "the plan fits: no out-of-memory step needed")
        if a.oom_ladder:
            # the ladder's own step numbers (two rungs may share one: selective and full recompute), as the
            # waterfall's labels and the CLI print them
            rungs = "".join(
                f"<li><b>{r.step}.</b> {html.escape(r.action)}: "
                + ("—" if r.plan is None else f"{r.peak_bytes / GIB:.1f} GiB per GPU, {r.step_seconds:.3f} s/step "
                                              f"({r.slowdown:+.1%})" + (" — <b>fits</b>" if r.fits else
                                                                          f" — {r.verdict}: "
                                                                          f"{html.escape(r.limit)}"))
                + (f"<br><code>{html.escape(str(r.settings))}</code>" if r.settings else "") + "</li>"
                for r in a.oom_ladder)
            self.ladder_note.value = f"<ul style='font-size:13px;max-width:980px;list-style:none'>{rungs}</ul>"
        else:
            self.ladder_note.value = (f"Peak {mem.per_gpu_peak_bytes / GIB:.1f} GiB of {capacity:.1f} GiB: the plan "
                                      f"fits, no step of the ladder is needed.")
        self.throughput.value = suggestions_html(a.throughput)
        self.commands.value = ("<pre class='wb-advisor-commands' style='background:#f6f8fa;padding:8px;font-size:12px;"
                               "white-space:pre-wrap;max-width:980px'>"
                               + html.escape("\n".join(a.commands)) + "</pre>")
        if self.log_summary is None:
            self.log_result.value = ""
        else:
            self.log_result.value = (log_summary_html(self.log_summary)
                                     + findings_html(a.log_findings, "wb-advisor-log-findings"))
