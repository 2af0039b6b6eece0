"""A model made dense in the Model panel takes the plan's MoE settings back to their defaults in the same update,
so that an expert-parallel size typed for the MoE model does not leave the dense one refused."""
from test_widgets_app import panel
from widgets.app import Workbench


def test_experts_set_to_zero_reset_the_expert_parallel_settings():
    app = Workbench()
    mdl, par = panel(app, "Model"), panel(app, "Parallelism")
    mdl.preset.value = "mixtral-8x7b"
    par.controls["pipeline_parallel"].value = 1
    par.controls["tensor_parallel"].value = 2
    par.controls["sequence_parallel"].value = True
    par.controls["expert_parallel"].value = 4
    assert app.state.valid, app.state.error
    assert app.state.plan.expert_parallel == 4
    mdl.controls["num_experts"].value = 0
    s = app.state
    assert s.valid, s.error
    assert not s.model.is_moe and s.plan.expert_parallel == 1 and par.controls["expert_parallel"].value == 1
    app.close()
