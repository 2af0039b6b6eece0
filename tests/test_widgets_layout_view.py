"""LayoutView: the GPU grid coloured by group, with each rank's coordinates in the hover text."""
import dataclasses

import pytest


from widgets.layout_view import LayoutView, layout_grid
from widgets.state import initial_state
from workbench import catalog
from workbench.layout import build_layout
from workbench.specs import ClusterSpec, ParallelPlan


def two_node_layout():
    cluster = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=8, num_nodes=2)
    plan = ParallelPlan(world_size=16, engine="megatron", tensor_parallel=4, pipeline_parallel=2)
    return build_layout(cluster, plan, model=catalog.model("guide-13b"))


def test_grid_colours_by_group_and_hover_names_coordinates():
    layout = two_node_layout()
    tp = layout_grid(layout, "tp")
    assert len(tp["z"]) == 2 and len(tp["z"][0]) == 8
    # Megatron order: tp fastest, so each run of 4 GPUs is one TP group
    assert tp["z"][0] == [0, 0, 0, 0, 1, 1, 1, 1] and tp["z"][1] == [2, 2, 2, 2, 3, 3, 3, 3]
    pp = layout_grid(layout, "pp")
    # pp is slowest: ranks r and r+8 share a pipeline group, i.e. the same cell on both nodes
    assert pp["z"][0] == pp["z"][1]
    hover = tp["hover"][1][5]  # rank 13
    c = layout.rank(13)
    assert hover.startswith("rank 13 · node 1 GPU 5")
    assert f"tp {c.tp} · cp {c.cp} · dp {c.dp} · pp {c.pp}" in hover
    assert "tp group 3: ranks 12, 13, 14, 15" in hover


def test_view_redraws_from_state_and_toggle():
    state = initial_state()
    layout = two_node_layout()
    est = state.estimate
    state = dataclasses.replace(state, estimate=dataclasses.replace(est, layout=layout))
    view = LayoutView()
    view.show(state)
    heat = view.fig.data[0]
    assert [list(r) for r in heat.z] == layout_grid(layout, "tp")["z"]
    assert "16 GPUs = TP 4 × CP 1 × DP 2 × PP 2" in view.fig.layout.title.text
    view.colour.value = "DP group"
    assert [list(r) for r in view.fig.data[0].z] == layout_grid(layout, "dp")["z"]
    view.close()


def test_large_cluster_is_paged():
    from widgets.layout_view import MAX_NODES_DRAWN

    cluster = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=8, num_nodes=4096)
    plan = ParallelPlan(world_size=cluster.world_size, engine="megatron", tensor_parallel=8, pipeline_parallel=4,
                        global_batch_size=8192)
    layout = build_layout(cluster, plan)
    grid = layout_grid(layout, "dp", first_node=1000)
    assert grid["first_node"] == 1000 and grid["nodes_drawn"] == MAX_NODES_DRAWN
    assert grid["hover"][0][0].startswith("rank 8000 · node 1000 GPU 0")
    assert "… (1,024 ranks)" in grid["hover"][0][0]
    state = initial_state()
    state = dataclasses.replace(state, estimate=dataclasses.replace(state.estimate, layout=layout))
    view = LayoutView()
    view.show(state)
    assert view.page.layout.display == "" and "showing nodes 0–63 of 4,096" in view.notes.value
    view.page.value = 4090
    assert list(view.fig.data[0].y)[0] == 4090 and "showing nodes 4,090–4,095" in view.notes.value
    view.close()


def test_layout_grid_has_a_colour_legend():
    from widgets.layout_view import PALETTE, LayoutView, legend_html
    from widgets.state import initial_state

    state = initial_state()  # TP4 x PP2 on 8 GPUs
    layout = state.estimate.layout
    tp = legend_html(layout, "tp")
    assert "colour = tensor-parallel group" in tp and tp.count("wb-legend-item") == 2
    assert "tensor-parallel group 0: ranks 0, 1, 2, 3" in tp and PALETTE[1] in tp
    assert legend_html(layout, "pp").count("wb-legend-item") == 4  # pipelines {0,4} {1,5} {2,6} {3,7}
    view = LayoutView()
    view.show(state)
    assert "tensor-parallel group 1: ranks 4, 5, 6, 7" in view.legend.value
    view.colour.value = "PP group"
    assert "colour = pipeline group" in view.legend.value
    view.close()
