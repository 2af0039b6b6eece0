"""The app state's pure reducers: valid changes, invalid ones kept with the core's message, presets, imports."""
import pytest

from widgets.state import (LoadPreset, LoadSpecs, SetCluster, SetModel, SetPlan, initial_state, reduce, resolved)
from workbench import catalog
from workbench.specs import ClusterSpec, ParallelPlan


def specs_only(model, cluster, plan):
    """Estimator double for reducer tests: hands back the specs it was given, so tests see what was estimated."""
    return (model, cluster, plan)


@pytest.fixture
def state():
    return initial_state(estimator=specs_only)


def step(state, action):
    return reduce(state, action, specs_only)


def test_initial_state_is_the_guide_example(state):
    assert state.model.num_layers == 40 and state.model.hidden_size == 5120
    assert (state.plan.tensor_parallel, state.plan.pipeline_parallel, state.plan.data_parallel) == (4, 2, 1)
    assert state.cluster.gpu.name == "A100-80GB" and state.cluster.world_size == 8
    assert state.plan.global_batch_size == 128 and state.plan.num_microbatches == 128
    assert state.estimate == (state.model, state.cluster, state.plan)
    assert state.valid


def test_valid_change_updates_specs_and_estimate(state):
    new = step(state, SetPlan(changes={"tensor_parallel": 8, "pipeline_parallel": 1}))
    assert new.valid and new.plan.tensor_parallel == 8 and new.plan.data_parallel == 1
    assert new.estimate[2] is new.plan
    assert new.revision == state.revision + 1
    assert state.plan.tensor_parallel == 4  # the old state is untouched


def test_invalid_change_keeps_last_valid_with_message(state):
    bad = step(state, SetPlan(changes={"tensor_parallel": 3}))
    assert not bad.valid and bad.error_source == "plan"
    assert "tensor_parallel(3)" in bad.error and "world_size=8" in bad.error
    assert bad.plan is state.plan and bad.estimate is state.estimate
    assert bad.plan_inputs["tensor_parallel"] == 3  # the panel keeps showing what the user typed
    # a later change is tried together with the still-invalid input ...
    still = step(bad, SetPlan(changes={"pipeline_parallel": 1}))
    assert not still.valid and "tensor_parallel(3)" in still.error
    # ... and fixing it makes everything valid again
    fixed = step(still, SetPlan(changes={"tensor_parallel": 8}))
    assert fixed.valid and (fixed.plan.tensor_parallel, fixed.plan.pipeline_parallel) == (8, 1)


def test_cross_spec_error_names_heads(state):
    bad = step(state, SetModel(changes={"num_attention_heads": 20, "hidden_size": 5120}))
    assert bad.valid  # 4 divides 20
    bad = step(state, SetModel(changes={"num_attention_heads": 10, "hidden_size": 5120}))
    assert bad.error == "tensor_parallel=4 does not divide num_attention_heads=10"


def test_model_error_source(state):
    bad = step(state, SetModel(changes={"hidden_size": 5100}))
    assert bad.error_source == "model" and "does not divide hidden_size=5100" in bad.error


def test_engine_rule_message(state):
    bad = step(state, SetPlan(changes={"zero_stage": 2}))
    assert bad.error_source == "plan" and "zero_stage=2" in bad.error


def test_derived_fields_follow_until_set(state):
    wider = step(state, SetModel(changes={"hidden_size": 6400}))
    assert wider.model.ffn_hidden_size == 4 * 6400 and resolved(wider, "model", "ffn_hidden_size") == 25600
    explicit = step(wider, SetModel(changes={"ffn_hidden_size": 10000}))
    assert step(explicit, SetModel(changes={"hidden_size": 5120})).model.ffn_hidden_size == 10000
    assert wider.preset == "custom"


def test_preset_loads_catalog_model(state):
    new = step(state, LoadPreset(name="llama3-8b"))
    assert new.preset == "llama3-8b"
    assert new.model_inputs["num_query_groups"] == catalog.model("llama3-8b").num_query_groups
    unknown = step(state, LoadPreset(name="llama9"))
    assert unknown.error_source == "model" and "unknown model" in unknown.error


def test_gpu_change_resets_bandwidths(state):
    custom = step(state, SetCluster(changes={"intra_node_gb_per_s": 100.0}))
    assert custom.cluster.intra_node_gb_per_s == 100.0
    h100 = step(custom, SetCluster(changes={"gpu": "H100-SXM"}))
    assert h100.cluster.intra_node_gb_per_s == catalog.gpu("H100-SXM").intra_node_gb_per_s
    bad = step(state, SetCluster(changes={"gpu": "H1000"}))
    assert bad.error_source == "cluster" and "unknown gpu" in bad.error


def test_world_size_follows_cluster(state):
    two = step(state, SetCluster(changes={"num_nodes": 2}))
    assert two.valid and two.plan.world_size == 16 and two.plan.data_parallel == 2


def test_load_specs(state):
    cluster = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=4, num_nodes=1)
    plan = ParallelPlan(world_size=4, engine="deepspeed", zero_stage=3, micro_batch_size=2, global_batch_size=64)
    new = step(state, LoadSpecs(model=catalog.model("gpt3-1.3b"), cluster=cluster, plan=plan))
    assert new.valid and new.plan == plan and new.cluster.gpu.name == "H100-SXM" and new.preset == "gpt3-1.3b"


def test_unknown_field_is_a_programming_error(state):
    with pytest.raises(KeyError):
        step(state, SetPlan(changes={"tensor_paralel": 2}))


def test_app_caps_cluster_size_with_a_clear_message():
    from widgets.state import DASHBOARD_MAX_NODES, SetCluster, initial_state, reduce

    state = initial_state()
    for changes, expected in (({"num_nodes": 10**9}, "num_nodes=1000000000 is larger than the largest supported"),
                              ({"num_nodes": DASHBOARD_MAX_NODES + 1}, "num_nodes=65,537 is above the workbench "
                                                                      "app's limit of 65,536"),
                              ({"gpus_per_node": 128}, "gpus_per_node=128 is above"),
                              ({"num_nodes": 65_536, "gpus_per_node": 16}, "world size=1,048,576 is above"),
                              ({"inter_node_gb_per_s": float("inf")}, "inter_node_gb_per_s=inf must be a finite")):
        new = reduce(state, SetCluster(changes=changes))
        assert new.error_source == "cluster" and expected in new.error, new.error
        assert new.cluster == state.cluster  # the last valid cluster stays
    from widgets.state import SetPlan

    state = reduce(state, SetPlan(changes={"global_batch_size": None}))
    big = reduce(state, SetCluster(changes={"num_nodes": DASHBOARD_MAX_NODES}))
    assert not big.error and big.cluster.world_size == 8 * DASHBOARD_MAX_NODES


def test_overlap_comm_dropdown_shows_the_engine_default_and_round_trips():
    """ipywidgets shows a Dropdown value of None as a blank box: the panel shows "engine default" for the plan's None
    and sends None back for it."""
    from widgets.app import Workbench

    app = Workbench()
    from widgets.parallel_panel import ParallelPanel

    panel = next(p for p in app.panels if isinstance(p, ParallelPanel))
    box = panel.controls["overlap_comm"]
    assert app.state.plan.overlap_comm is None
    assert box.label == "engine default"
    box.value = False
    assert app.state.plan.overlap_comm is False
    box.value = "default"
    assert app.state.plan.overlap_comm is None and box.label == "engine default"
