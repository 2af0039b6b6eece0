"""The composed app in-process: set widget values, check the state, the figures and the inline errors."""
import pytest

from widgets.app import ENV_ALLOW_LAUNCH, ENV_ALLOW_WRITE, Workbench
from workbench import catalog
from workbench.estimate import estimate
from workbench.memory_types import TERMS

GIB = 2**30


@pytest.fixture(scope="module")
def app():
    a = Workbench()
    yield a
    a.close()


def panel(app, title):
    return next(p for p in app.panels if p.title == title)


def memory_figure_total_gib(app, stage):
    return sum(app.memory.fig.data[i].y[stage] for i in range(len(TERMS)))


def test_starts_on_the_guide_example(app):
    s = app.state
    assert s.valid and s.preset == "guide-13b"
    assert (s.plan.tensor_parallel, s.plan.pipeline_parallel, s.cluster.world_size) == (4, 2, 8)
    fig = app.memory.fig
    assert [t.name for t in fig.data[:len(TERMS)]] == list(TERMS)
    assert list(fig.data[0].x) == ["stage 0 (emb)", "stage 1 (out)"]
    expected = estimate(s.model, s.cluster, s.plan).memory
    assert memory_figure_total_gib(app, 0) == pytest.approx(expected.stages[0].total_bytes / GIB)
    assert fig.layout.shapes[0].y0 == pytest.approx(expected.capacity_bytes / GIB)
    assert f'data-bytes="{expected.per_gpu_peak_bytes}"' in app.memory.summary.value
    # hover carries the bytes and the core's formula for the term
    assert fig.data[0].customdata[0][0] == expected.stages[0].terms.weights
    assert fig.data[0].customdata[0][1].startswith(expected.formulas["weights"][:10])


def test_tensor_parallel_change_redraws(app):
    par = panel(app, "Parallelism")
    before = memory_figure_total_gib(app, 0)
    par.controls["tensor_parallel"].value = 2
    s = app.state
    assert s.valid and s.plan.tensor_parallel == 2 and s.plan.data_parallel == 2
    expected = estimate(s.model, s.cluster, s.plan).memory
    assert memory_figure_total_gib(app, 0) == pytest.approx(expected.stages[0].total_bytes / GIB)
    assert memory_figure_total_gib(app, 0) != pytest.approx(before)
    assert "DP 2" in par.derived.value
    par.controls["tensor_parallel"].value = 4
    assert app.state.plan.tensor_parallel == 4


def test_invalid_value_shown_inline_and_figures_keep_last_valid(app):
    par = panel(app, "Parallelism")
    before = list(app.memory.fig.data[0].y)
    par.controls["tensor_parallel"].value = 3
    assert not app.state.valid
    assert "tensor_parallel(3)" in par.error.value and "wb-error" in par.error.value
    assert "Traceback" not in par.error.value
    assert "tensor_parallel(3)" in app.banner.value
    assert list(app.memory.fig.data[0].y) == before
    assert par.controls["tensor_parallel"].value == 3  # what the user typed stays
    par.controls["tensor_parallel"].value = 4
    assert app.state.valid and par.error.value == "" and "wb-error" not in app.banner.value


def test_refused_cp_a2a_group_stays_typed_and_clears(app):
    par = panel(app, "Parallelism")
    par.controls["cp_a2a_group"].value = 7
    assert not app.state.valid and "hierarchical_context_parallel_sizes=[7, 1]" in par.error.value
    assert par.controls["cp_a2a_group"].value == 7  # what the user typed stays, so typing 0 clears it
    par.controls["cp_a2a_group"].value = 0
    assert app.state.valid and par.error.value == ""


def test_engine_rule_inline(app):
    par = panel(app, "Parallelism")
    par.controls["zero_stage"].value = 1
    assert "zero_stage=1 needs engine" in par.error.value
    par.controls["engine"].value = "megatron-deepspeed"
    assert app.state.valid and int(app.state.plan.zero_stage) == 1 and par.error.value == ""
    par.controls["zero_stage"].value = 0
    par.controls["engine"].value = "megatron"
    assert app.state.valid


def test_zero_stage_lowers_memory_in_deepspeed():
    app = Workbench()
    par = panel(app, "Parallelism")
    hw = panel(app, "Hardware")
    mdl = panel(app, "Model")
    mdl.preset.value = "gpt3-1.3b"
    par.controls["pipeline_parallel"].value = 1
    par.controls["tensor_parallel"].value = 1
    par.controls["engine"].value = "deepspeed"
    par.controls["global_batch_size"].value = 64
    assert app.state.valid, app.state.error
    peaks, allocated = [], []
    for stage in range(4):
        par.controls["zero_stage"].value = stage
        assert app.state.valid, app.state.error
        mem = app.state.estimate.memory
        peaks.append(mem.per_gpu_peak_bytes)
        allocated.append(mem.per_gpu_peak_bytes - mem.peak_stage.terms.overhead)
        assert memory_figure_total_gib(app, 0) == pytest.approx(peaks[-1] / GIB)
    # each stage partitions more of what is allocated; ZeRO-3's allocator keeps a larger reserve above it (its
    # fit-split median), so on the whole device it is below ZeRO-1, not necessarily below ZeRO-2
    assert allocated[0] > allocated[1] > allocated[2] > allocated[3]
    assert peaks[0] > peaks[1] > peaks[2] and peaks[3] < peaks[1]
    # offload puts a host bar on the chart
    par.controls["zero_stage"].value = 3
    par.controls["offload_optimizer"].value = "cpu"
    assert app.state.valid, app.state.error
    host = app.memory.fig.data[len(TERMS)]
    assert list(host.x) == ["host / GPU"]
    assert host.y[0] == pytest.approx(app.state.estimate.memory.host_bytes_per_gpu / GIB) and host.y[0] > 0
    # CPU Adam's threads reach the time model: one thread makes the offloaded step slower
    assert hw.controls["cpu_adam_threads"].value == 0  # the launcher's default: cores / GPUs per node
    default = app.state.estimate.time.breakdown["offload"]
    hw.controls["cpu_adam_threads"].value = 1
    assert app.state.cluster.cpu_adam_threads == 1
    assert app.state.estimate.time.inputs["cpu_adam_threads"] == 1
    assert app.state.estimate.time.breakdown["offload"] >= default  # 8 ranks share the node's memory-bound cap
    hw.controls["gpu"].value = "H100-SXM"
    assert app.state.cluster.gpu.name == "H100-SXM"
    assert "H100-SXM" in hw.info.value
    app.close()


def test_model_panel_preset_and_fields(app):
    mdl = panel(app, "Model")
    mdl.preset.value = "llama3-8b"
    assert app.state.model.num_query_groups == catalog.model("llama3-8b").num_query_groups
    assert mdl.controls["num_query_groups"].value == app.state.model.num_query_groups
    assert "8.03 B" in mdl.parameters.value
    mdl.controls["num_layers"].value = 30  # not divisible by PP 2? 30/2 = 15: fine
    assert app.state.valid and app.state.model.num_layers == 30 and mdl.preset.value == "custom"
    mdl.controls["num_layers"].value = 31
    assert "num_layers=31" in panel(app, "Parallelism").error.value
    mdl.controls["hidden_size"].value = 4100
    assert "hidden_size=4100" in mdl.error.value
    mdl.preset.value = "guide-13b"
    assert app.state.valid and app.state.model.num_layers == 40


def test_update_is_fast(app):
    par = panel(app, "Parallelism")
    times = []
    for value in (2, 4) * 10:
        par.controls["tensor_parallel"].value = value
        times.append(app.last_update_seconds)
    assert sorted(times)[len(times) // 2] < 0.05


def test_dashboard_cannot_launch_or_write_by_default():
    app = Workbench.for_dashboard(environ={})
    assert not app.allow_launch and not app.allow_write
    for permission in ("launch", "write"):
        with pytest.raises(PermissionError, match=f"set WORKBENCH_DASHBOARD_ALLOW_{permission.upper()}=1"):
            app.require(permission)
    app.close()
    app = Workbench.for_dashboard(environ={ENV_ALLOW_WRITE: "1"})
    assert app.allow_write and not app.allow_launch
    app.close()
    app = Workbench.for_dashboard(environ={ENV_ALLOW_LAUNCH: "1"})
    assert app.allow_launch and app.allow_write
    app.require("launch")
    app.close()
    app = Workbench.for_dashboard(environ={ENV_ALLOW_LAUNCH: "yes"})  # only "1" enables
    assert not app.allow_launch
    app.close()


def test_time_and_layout_are_shown(app):
    t = app.state.estimate.time
    assert f"{t.tokens_per_second:,.0f} tokens/s" in app.banner.value
    assert [v.title for v in app.views][:3] == ["Memory", "Step time", "Layout"]


def test_fp8_plan_is_edited_and_its_memory_terms_shown():
    app = Workbench()
    par, hw, mdl = panel(app, "Parallelism"), panel(app, "Hardware"), panel(app, "Model")
    mdl.controls["attention"].value = "flash"
    par.controls["engine"].value = "megatron"
    par.controls["precision"].value = "fp8"
    assert not app.state.valid and "gpu=A100-80GB: it has no FP8 tensor cores" in par.error.value
    hw.controls["gpu"].value = "H100-SXM"
    assert app.state.valid, app.state.error
    assert "FP8 (delayed recipe): weights +" in app.memory.summary.value
    par.controls["distributed_optimizer"].value = True
    par.controls["fp8_param_gather"].value = True
    assert app.state.valid and app.state.plan.fp8_param_gather, app.state.error
    assert "--fp8-param-gather" in app.memory.summary.value
    par.controls["fp8_recipe"].value = "mxfp8"
    assert "needs a Blackwell GPU" in par.error.value
    app.close()


def test_tp_comm_overlap_checkbox_needs_sequence_parallel():
    app = Workbench()
    par, mdl = panel(app, "Parallelism"), panel(app, "Model")
    par.controls["engine"].value = "megatron"
    par.controls["tensor_parallel"].value = 2
    par.controls["tp_comm_overlap"].value = True
    assert not app.state.valid and "tp_comm_overlap=True needs" in par.error.value
    par.controls["sequence_parallel"].value = True
    if not app.state.valid:  # the default model's attention kernel has no Transformer Engine layers
        assert "Transformer Engine's linear layers" in app.state.error
        mdl.controls["attention"].value = "flash"
    assert app.state.valid and app.state.plan.tp_comm_overlap, app.state.error
    assert "userbuffers" in app.state.estimate.memory.to_dict()["formulas"]["overhead"]
    app.close()


def test_parallelism_panel_groups_every_control_once_in_sections():
    from widgets.parallel_panel import GROUPS, ParallelPanel

    panel = ParallelPanel()
    placed = [n for _, names in GROUPS for n in names]
    assert sorted(placed) == sorted(panel.controls) and len(placed) == len(set(placed))
    assert panel.groups.titles == tuple(t for t, _ in GROUPS) and panel.groups.selected_index == 0
    for section, (_, names) in zip(panel.groups.children, GROUPS):
        assert list(section.children) == [panel.controls[n] for n in names]
    assert list(panel.widget.children) == [panel.groups, panel.derived, panel.error]  # always visible


def test_banner_names_each_time_term_and_zero3_hooks_apart_from_dp_comm():
    from widgets.state import SetCluster, SetPlan
    from workbench.timing import TERM_WORDS, TERMS

    assert set(TERM_WORDS) == set(TERMS)
    app = Workbench()
    b = app.state.estimate.time.breakdown
    for term in TERMS:  # the guide's Megatron plan: every non-zero term, none of the zero ones
        assert (f'data-term="{term}"' in app.banner.value) is (b[term] > 0)
    assert f"tp_comm {b['tp_comm']:.3f} s" in app.banner.value
    app.dispatch(SetCluster(changes={"gpus_per_node": 1, "num_nodes": 1}))
    app.dispatch(SetPlan(changes={"engine": "deepspeed", "zero_stage": 3, "tensor_parallel": 1,
                                  "pipeline_parallel": 1}))
    assert app.state.valid and app.state.plan.world_size == 1
    b = app.state.estimate.time.breakdown
    assert b["zero3_hooks"] > 0 and b["dp_comm"] == 0.0
    assert f"zero3_hooks {b['zero3_hooks']:.3f} s" in app.banner.value and 'data-term="dp_comm"' not in app.banner.value
    assert f'title="{TERM_WORDS["zero3_hooks"]}"' in app.banner.value
    assert "zero3_hooks" in app.static_html()
    app.close()
