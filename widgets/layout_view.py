"""LayoutView: every GPU of the cluster as a cell (rows = nodes, columns = GPUs in the node), coloured by the
tensor-, pipeline-, data- or context-parallel group it belongs to. Hover shows the rank's coordinates and groups;
the layout's warnings (a TP group crossing nodes, uneven stages) are listed under the grid. Large clusters are
paged, :data:`MAX_NODES_DRAWN` nodes at a time; only the drawn ranks are computed."""
from __future__ import annotations

import html

import ipywidgets as ipw
import plotly.graph_objects as go

from widgets.common import View, new_figure, redraw

PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#bab0ac"]
COLOUR_BY = {"TP group": "tp", "PP group": "pp", "DP group": "dp", "CP group": "cp", "EP group": "ep",
             "expert DP": "edp"}
EXPERT_COLOURS = ("EP group", "expert DP")
"""Colourings offered only for an MoE model's layout (megatron-core's expert rank order, tp-ep-dp-pp)."""
MAX_NODES_DRAWN = 64
"""Nodes drawn at once; larger clusters are paged (the grid and its hover text grow with the GPUs drawn)."""


def group_index(layout, kind: str, ranks=None) -> dict:
    """rank → index of its group of ``kind`` (groups ordered by their first rank, as the layout lists them), for
    ``ranks`` (default: every rank), by arithmetic."""
    ranks = range(layout.world_size) if ranks is None else ranks
    return {r: _group_of(layout, r, kind, 0)[0] for r in ranks}


def _group_of(layout, r: int, kind: str, limit=None):
    """A dense group (tp, cp, dp, pp) or, for ``ep``/``edp``/``etp``, an expert group of rank ``r``."""
    if kind in ("ep", "edp", "etp"):
        return layout.expert_group_of(r, kind, limit=limit)
    return layout.group_of(r, kind, limit=limit)


def _group_size(layout, kind: str) -> int:
    return layout.expert_sizes[kind] if kind in ("ep", "edp", "etp") else layout.group_size(kind)


def layout_grid(layout, colour_by: str = "tp", first_node: int = 0) -> dict:
    """Plain grid data (testable without a browser) for up to :data:`MAX_NODES_DRAWN` nodes from ``first_node``:
    ``z`` group index per cell, ``text`` labels, ``hover``. Only the drawn ranks are computed."""
    gpn = layout.gpus_per_node
    first = max(0, min(int(first_node), layout.num_nodes - 1))
    nodes = min(layout.num_nodes - first, MAX_NODES_DRAWN)
    kinds = ("tp", "cp", "dp", "pp")
    moe = bool(getattr(layout, "num_experts", None))
    if colour_by in ("ep", "edp") and not moe:
        raise ValueError(f"colour_by={colour_by!r} needs an MoE model's layout (num_experts set)")
    z, text, hover = [], [], []
    for node in range(first, first + nodes):
        zr, tr, hr = [], [], []
        for local in range(gpn):
            r = node * gpn + local
            if r >= layout.world_size:
                zr.append(None), tr.append(""), hr.append("")
                continue
            c = layout.rank(r)
            groups = {k: layout.group_of(r, k, limit=17) for k in kinds}
            if moe:
                groups.update({k: layout.expert_group_of(r, k, limit=17) for k in ("ep", "edp")})
                ex = layout.expert_rank(r)
            zr.append(groups[colour_by][0] % len(PALETTE))
            tr.append(f"r{r}<br>t{c.tp} p{c.pp}<br>d{c.dp}" + (f" c{c.cp}" if layout.context_parallel > 1 else "")
                      + (f"<br>e{ex['ep']}" if moe and layout.expert_parallel > 1 else ""))
            hr.append(f"rank {r} · node {c.node} GPU {c.local_rank}<br>"
                      f"tp {c.tp} · cp {c.cp} · dp {c.dp} · pp {c.pp}<br>"
                      + (f"experts {_experts(ex['experts'])} · ep {ex['ep']} · expert dp {ex['edp']}<br>"
                         if moe else "")
                      + "<br>".join(f"{k} group {groups[k][0]}: ranks "
                                    f"{_ranks(groups[k][1], _group_size(layout, k))}" for k in groups))
        z.append(zr), text.append(tr), hover.append(hr)
    return {"z": z, "text": text, "hover": hover, "nodes_drawn": nodes, "first_node": first,
            "colour_by": colour_by}


KIND_NAMES = {"tp": "tensor-parallel group", "pp": "pipeline group", "dp": "data-parallel group",
              "cp": "context-parallel group", "ep": "expert-parallel group", "edp": "expert-data-parallel group"}


def _experts(experts: list) -> str:
    if not experts:
        return "none"
    return f"{experts[0]}–{experts[-1]}" if len(experts) > 1 else str(experts[0])


def legend_html(layout, colour_by: str = "tp") -> str:
    """The colour key of the grid: one swatch per colour in use, naming the group it marks (with its first ranks)
    or the groups sharing it (colours repeat after len(PALETTE) groups, said so). Groups found by arithmetic from
    rank 0 up, never by enumerating the cluster."""
    size = _group_size(layout, colour_by)
    count = layout.world_size // size
    shown = min(count, len(PALETTE))
    first_members = {}
    r = 0
    while len(first_members) < shown and r < layout.world_size:
        index, members = _group_of(layout, r, colour_by, limit=8)
        first_members.setdefault(index, members)
        r += 1
    what = KIND_NAMES[colour_by]
    items = []
    for colour_index in range(shown):
        members = list(range(colour_index, count, len(PALETTE)))
        if len(members) == 1 and colour_index in first_members:
            label = f"{what} {colour_index}: ranks {html.escape(_ranks(first_members[colour_index], size, 8))}"
        else:
            label = f"{what}s {', '.join(str(i) for i in members[:4])}{', …' if len(members) > 4 else ''}"
        items.append(f'<span class="wb-legend-item" style="display:inline-block;margin:0 12px 2px 0">'
                     f'<span style="display:inline-block;width:12px;height:12px;background:{PALETTE[colour_index]};'
                     f'vertical-align:middle;margin-right:4px"></span>{label}</span>')
    repeat = f" (colours repeat every {len(PALETTE)} of the {count:,} groups)" if count > len(PALETTE) else ""
    return (f'<div class="wb-layout-legend"><b>colour = {what}</b>{repeat}; cell text: rank r, tensor t, '
            f'pipeline p, data d coordinates<br>' + "".join(items) + "</div>")


def _ranks(group, size: int, limit: int = 16) -> str:
    shown = ", ".join(str(r) for r in group[:limit])
    return shown + (f", … ({size:,} ranks)" if size > limit else "")


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
        self.page = ipw.BoundedIntText(value=0, min=0, max=0, step=MAX_NODES_DRAWN, description="first node",
                                       layout=ipw.Layout(width="220px", display="none"))
        self.page.observe(lambda _: self._redraw(), names="value")
        self.fig = new_figure()
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
        self.widget = ipw.VBox([ipw.HBox([self.colour, self.page]), self.fig, self.legend, self.notes])
        self._layout = None

    def show(self, state) -> None:
        layout = getattr(state.estimate, "layout", None)
        if layout is None or layout is self._layout:
            return
        self._layout = layout
        options = [k for k in COLOUR_BY if layout.num_experts or k not in EXPERT_COLOURS]
        if list(self.colour.options) != options:
            value = self.colour.value if self.colour.value in options else "TP group"
            self._layout = None  # no redraw while the options change
            self.colour.options = options
            self.colour.value = value
            self._layout = layout
        paged = layout.num_nodes > MAX_NODES_DRAWN
        self.page.layout.display = "" if paged else "none"
        self.page.max = max(0, layout.num_nodes - 1)
        if self.page.value > self.page.max or not paged:
            self.page.value = 0  # observers redraw
        self._redraw()

    def _redraw(self) -> None:
        layout = self._layout
        if layout is None:
            return
        grid = layout_grid(layout, COLOUR_BY[self.colour.value], first_node=self.page.value)
        with redraw(self.fig):
            trace = self.fig.data[0]
            trace.z = grid["z"]
            trace.text = grid["text"]
            trace.hovertext = grid["hover"]
            trace.x = list(range(layout.gpus_per_node))
            trace.y = list(range(grid["first_node"], grid["first_node"] + grid["nodes_drawn"]))
            self.fig.layout.height = max(220, min(900, 110 + 70 * grid["nodes_drawn"]))
            sizes = layout.sizes
            self.fig.layout.title = dict(text=f"{layout.world_size:,} GPUs = TP {sizes['tp']} × CP {sizes['cp']} × "
                                              f"DP {sizes['dp']} × PP {sizes['pp']} (rank order tp-cp-dp-pp)",
                                         font=dict(size=14))
        legend = legend_html(layout, COLOUR_BY[self.colour.value])
        if self.legend.value != legend:
            self.legend.value = legend
        notes = []
        if grid["nodes_drawn"] < layout.num_nodes:
            last = grid["first_node"] + grid["nodes_drawn"] - 1
            notes.append(f"showing nodes {grid['first_node']:,}–{last:,} of {layout.num_nodes:,} (set 'first node' "
                         f"to page; {MAX_NODES_DRAWN} nodes at a time)")
        spanned = {k: layout.max_nodes_spanned(k) for k in ("tp", "dp", "pp")}
        notes.append(f"{layout.group_count('tp'):,} TP groups of {layout.tensor_parallel}, "
                     f"{layout.group_count('dp'):,} DP groups of {layout.data_parallel:,}, "
                     f"{layout.pipeline_parallel} pipeline stages; one group spans at most "
                     f"{spanned['tp']} node(s) (TP), {spanned['dp']:,} (DP), {spanned['pp']:,} (PP)")
        if layout.num_experts:
            ex = layout.expert_sizes
            notes.append(f"MoE layers number the same ranks tp-ep-dp-pp: {layout.num_experts} experts over EP "
                         f"{ex['ep']} ({layout.num_experts // ex['ep']} per rank) × expert TP {ex['etp']} × expert "
                         f"DP {ex['edp']:,}; one EP group spans at most {layout.expert_nodes_spanned('ep')} node(s): "
                         f"its token all-to-all runs on " + ("the network" if layout.expert_nodes_spanned("ep") > 1
                                                               else "NVLink inside the node"))
        notes += [f"⚠ {html.escape(str(w))}" for w in layout.warnings]
        text = "<br>".join(notes)
        if self.notes.value != text:
            self.notes.value = text
