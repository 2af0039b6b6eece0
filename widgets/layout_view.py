"""LayoutView: every GPU of the cluster as a cell (rows = nodes, columns = GPUs in the node), coloured by the
tensor-, pipeline-, data- or context-parallel group it belongs to. Hover shows the rank's coordinates and groups;
the layout's warnings (a TP group crossing nodes, uneven stages) are listed under the grid."""
from __future__ import annotations

import html

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.common import View, redraw

PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#bab0ac"]
COLOUR_BY = {"TP group": "tp", "PP group": "pp", "DP group": "dp", "CP group": "cp"}
MAX_NODES_DRAWN = 128
"""Larger clusters draw their first nodes only (the grid and its hover text grow with the GPU count)."""


def group_index(layout, kind: str) -> dict:
    """rank → index of its group of ``kind`` (groups ordered by their first rank, as the layout lists them)."""
    out = {}
    for i, group in enumerate(layout.groups(kind)):
        for r in group:
            out[r] = i
    return out


def layout_grid(layout, colour_by: str = "tp") -> dict:
    """Plain grid data (testable without a browser): ``z`` group index per cell, ``text`` labels, ``hover``."""
    gpn = layout.gpus_per_node
    nodes = min(layout.num_nodes, MAX_NODES_DRAWN)
    kinds = ("tp", "cp", "dp", "pp")
    index = {k: group_index(layout, k) for k in kinds}
    groups = {k: layout.groups(k) for k in kinds}
    z, text, hover = [], [], []
    for node in range(nodes):
        zr, tr, hr = [], [], []
        for local in range(gpn):
            r = node * gpn + local
            if r >= layout.world_size:
                zr.append(None), tr.append(""), hr.append("")
                continue
            c = layout.rank(r)
            zr.append(index[colour_by][r] % len(PALETTE))
            tr.append(f"r{r}<br>t{c.tp} p{c.pp}<br>d{c.dp}" + (f" c{c.cp}" if layout.context_parallel > 1 else ""))
            hr.append(f"rank {r} · node {c.node} GPU {c.local_rank}<br>"
                      f"tp {c.tp} · cp {c.cp} · dp {c.dp} · pp {c.pp}<br>"
                      + "<br>".join(f"{k} group {index[k][r]}: ranks {_ranks(groups[k][index[k][r]])}"
                                    for k in kinds))
        z.append(zr), text.append(tr), hover.append(hr)
    return {"z": z, "text": text, "hover": hover, "nodes_drawn": nodes, "colour_by": colour_by}


KIND_NAMES = {"tp": "tensor-parallel group", "pp": "pipeline group", "dp": "data-parallel group",
              "cp": "context-parallel group"}


def legend_html(layout, colour_by: str = "tp") -> str:
    """The colour key of the grid: one swatch per colour in use, naming the group(s) it marks and their ranks.
    Colours repeat after len(PALETTE) groups (said so)."""
    groups = layout.groups(colour_by)
    what = KIND_NAMES[colour_by]
    items = []
    for colour_index in range(min(len(groups), len(PALETTE))):
        members = list(range(colour_index, len(groups), len(PALETTE)))
        first = groups[members[0]]
        label = (f"{what} {members[0]}: ranks {html.escape(_ranks(first, 8))}" if len(members) == 1
                 else f"{what}s {', '.join(str(i) for i in members[:4])}{', …' if len(members) > 4 else ''}")
        items.append(f'<span class="wb-legend-item" style="display:inline-block;margin:0 12px 2px 0">'
                     f'<span style="display:inline-block;width:12px;height:12px;background:{PALETTE[colour_index]};'
                     f'vertical-align:middle;margin-right:4px"></span>{label}</span>')
    repeat = (f" (colours repeat every {len(PALETTE)} of the {len(groups)} groups)"
              if len(groups) > len(PALETTE) else "")
    return (f'<div class="wb-layout-legend"><b>colour = {what}</b>{repeat}; cell text: rank r, '
            f'tensor t, pipeline p, data d coordinates<br>' + "".join(items) + "</div>")


def _ranks(group, limit: int = 16) -> str:
    shown = ", ".join(str(r) for r in group[:limit])
    return shown + (f", … ({len(group)} ranks)" if len(group) > limit else "")


class LayoutView(View):
    """The GPU grid; a dropdown picks which parallel dimension colours it."""

    title = "Layout"
    eager = True

    @classmethod
    def available(cls, state) -> bool:
        return getattr(state.estimate, "layout", None) is not None

    def __init__(self, app=None) -> None:
        self.colour = ipw.ToggleButtons(options=list(COLOUR_BY), value="TP group",
                                        style={"button_width": "90px"})
        self.colour.observe(lambda _: self._redraw(), names="value")
        self.fig = go.FigureWidget()
        n = len(PALETTE)
        scale = []
        for i, colour in enumerate(PALETTE):
            scale += [[i / n, colour], [(i + 1) / n, colour]]
        self.fig.add_heatmap(z=[], text=[], hovertext=[], texttemplate="%{text}", hoverinfo="text",
                             colorscale=scale, zmin=0, zmax=n, showscale=False, xgap=3, ygap=3,
                             textfont=dict(color="white", size=10))
        self.fig.update_layout(height=360, width=660, margin=dict(l=60, r=20, t=40, b=40),
                               xaxis=dict(title="GPU in node", dtick=1),
                               yaxis=dict(title="node", autorange="reversed", dtick=1))
        self.legend = ipw.HTML()
        self.legend.add_class("wb-layout-legend-box")
        self.notes = ipw.HTML()
        self.notes.add_class("wb-layout-notes")
        self.widget = ipw.VBox([self.colour, self.fig, self.legend, self.notes])
        self._layout = None

    def show(self, state) -> None:
        layout = getattr(state.estimate, "layout", None)
        if layout is None or layout is self._layout:
            return
        self._layout = layout
        self._redraw()

    def _redraw(self) -> None:
        layout = self._layout
        if layout is None:
            return
        grid = layout_grid(layout, COLOUR_BY[self.colour.value])
        with redraw(self.fig):
            trace = self.fig.data[0]
            trace.z = grid["z"]
            trace.text = grid["text"]
            trace.hovertext = grid["hover"]
            trace.x = list(range(layout.gpus_per_node))
            trace.y = list(range(grid["nodes_drawn"]))
            self.fig.layout.height = max(220, min(900, 110 + 70 * grid["nodes_drawn"]))
            sizes = layout.sizes
            self.fig.layout.title = dict(text=f"{layout.world_size} GPUs = TP {sizes['tp']} × CP {sizes['cp']} × "
                                              f"DP {sizes['dp']} × PP {sizes['pp']} (rank order tp-cp-dp-pp)",
                                         font=dict(size=14))
        legend = legend_html(layout, COLOUR_BY[self.colour.value])
        if self.legend.value != legend:
            self.legend.value = legend
        notes = []
        if grid["nodes_drawn"] < layout.num_nodes:
            notes.append(f"showing the first {grid['nodes_drawn']} of {layout.num_nodes} nodes")
        notes += [f"⚠ {html.escape(str(w))}" for w in layout.warnings]
        text = "<br>".join(notes)
        if self.notes.value != text:
            self.notes.value = text
