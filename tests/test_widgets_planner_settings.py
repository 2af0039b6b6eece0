"""The Planner prices every row with the current plan's settings it does not search over (LoRA, the hardware profile,
the stack), as the other views and `workbench plan` do, and "Use this plan" keeps them."""
import pytest

from test_widgets_app import panel
from widgets.app import Workbench
from widgets.planner_view import PlannerView
from widgets.state import SetProfile
from workbench.estimate import estimate


def planner(app) -> PlannerView:
    view = next(v for v in app.views if isinstance(v, PlannerView))
    app.view_tabs.selected_index = app.views.index(view)
    return view


def parallel(app):
    return panel(app, "Parallelism")


def test_lora_fine_tune_is_searched_and_kept_by_use_this_plan():
    app = Workbench()
    app.panels[0].preset.value = "llama2-7b"
    par = parallel(app)
    for name, value in dict(engine="deepspeed", tensor_parallel=1, pipeline_parallel=1, zero_stage=2,
                            precision="bf16", lora_rank=16).items():
        par.controls[name].value = value
    assert app.state.valid and app.state.plan.lora_rank == 16
    view = planner(app)
    assert view.result is not None and view.result.ranked
    assert all(r.plan.lora_rank == 16 for r in view.result.ranked)
    view.use_plan(0)
    assert app.state.valid and app.state.plan.lora_rank == 16
    assert par.controls["lora_rank"].value == 16
    assert app.state.estimate.time.tokens_per_second == pytest.approx(view.result.ranked[0].tokens_per_second)
    # a changed LoRA rank marks the shown search stale
    par.controls["lora_rank"].value = 8
    assert "press Search" in view.status.value
    app.close()


def test_rows_are_priced_with_the_apps_hardware_profile():
    app = Workbench()
    app.panels[1].controls["gpu"].value = "H200"
    app.dispatch(SetProfile(profile="h200"))
    assert app.state.valid and app.state.profile is not None
    view = planner(app)
    best = view.result.ranked[0]
    s = app.state
    expected = estimate(s.model, s.cluster, best.plan, profile=s.profile)
    assert best.step_seconds == pytest.approx(expected.time.step_seconds, rel=1e-9)
    view.use_plan(0)
    assert app.state.estimate.time.step_seconds == pytest.approx(best.step_seconds, rel=1e-9)
    app.dispatch(SetProfile(profile=None))
    assert "press Search" in view.status.value
    app.close()


def test_moe_switches_of_the_current_plan_are_searched_and_kept():
    """The Parallelism panel's all-to-all overlap and capacity factor go into the search, as `workbench plan
    --overlap-moe-expert-parallel-comm --moe-capacity-factor` puts them on every Megatron row that can take them."""
    app = Workbench()
    panel(app, "Model").preset.value = "mixtral-8x7b"
    panel(app, "Model").controls["seq_length"].value = 4096
    hw = panel(app, "Hardware")
    hw.controls["gpu"].value, hw.controls["num_nodes"].value = "H100-SXM", 2  # FP8: Megatron plans only
    par = parallel(app)
    for name, value in dict(engine="megatron", tensor_parallel=1, pipeline_parallel=1, expert_parallel=4,
                            precision="fp8", moe_overlap_alltoall=True, moe_capacity_factor=1.5).items():
        par.controls[name].value = value
    assert app.state.valid, app.state.error
    assert app.state.plan.moe_overlap_alltoall and app.state.plan.moe_capacity_factor == 1.5
    view = planner(app)
    assert view.result is not None and view.result.ranked
    mg = [r.plan for r in view.result.ranked if str(r.plan.engine) == "megatron"]
    assert mg and all(p.moe_capacity_factor == 1.5 for p in mg)
    assert any(p.moe_overlap_alltoall for p in mg)
    app.close()


def test_nvme_in_the_hardware_panel_is_searched_and_kept_by_use_this_plan():
    # one H100 with 64 GiB of host memory cannot hold Llama 2 7B's offloaded optimizer; the node's NVMe can
    app = Workbench()
    app.panels[0].preset.value = "llama2-7b"
    for name, value in dict(engine="deepspeed", tensor_parallel=1, pipeline_parallel=1, zero_stage=3,
                            precision="bf16").items():
        parallel(app).controls[name].value = value
    hw = app.panels[1]
    for name, value in dict(gpu="H100-SXM", gpus_per_node=1, num_nodes=1, host_memory_gib_per_node=64.0).items():
        hw.controls[name].value = value
    assert app.state.valid and app.state.cluster.world_size == 1
    view = planner(app)
    view.global_batch.value = 8
    view.run_search()
    assert view.result is None and "--nvme-gib" in view.error.value
    hw.controls["nvme_gib_per_node"].value = 200.0
    view.run_search()
    best = view.result.ranked[0]
    assert best.plan.nvme_optimizer and "opt→nvme" in view.table.value and "NVMe: the winner swaps" in \
        view.explanation.value
    view.use_plan(0)
    assert app.state.valid and app.state.plan.nvme_optimizer
    memory = app.state.estimate.memory
    assert memory.fits and memory.nvme_bytes_per_node == best.nvme_bytes_per_node
    assert app.state.estimate.time.step_seconds == pytest.approx(best.step_seconds, rel=1e-9)
    app.close()
