"""The context-parallel all-to-all group: the (a2a, p2p) sizes follow the CP size the user types after the group, so
a group that divides the new CP stays valid instead of keeping the p2p size of the old CP."""
from test_widgets_app import panel
from widgets.app import Workbench


def parallel(app):
    return panel(app, "Parallelism")


def test_changing_cp_recomputes_the_hierarchical_sizes_from_the_a2a_group():
    app = Workbench()
    app.panels[0].preset.value = "llama3-8b"
    par = parallel(app)
    par.controls["tensor_parallel"].value = 2
    par.controls["pipeline_parallel"].value = 1
    par.controls["context_parallel"].value = 4
    par.controls["cp_comm_type"].value = "a2a+p2p"
    par.controls["cp_a2a_group"].value = 2
    assert app.state.valid and app.state.plan.hierarchical_context_parallel_sizes == (2, 2)
    par.controls["context_parallel"].value = 2  # a2a group 2 inside CP 2: (2, 1)
    assert app.state.valid, app.state.error
    assert app.state.plan.context_parallel == 2
    assert app.state.plan.hierarchical_context_parallel_sizes == (2, 1)
    assert par.controls["cp_a2a_group"].value == 2 and par.error.value == ""
    par.controls["tensor_parallel"].value = 1
    par.controls["context_parallel"].value = 8  # and back up: (2, 4)
    assert app.state.valid, app.state.error
    assert app.state.plan.hierarchical_context_parallel_sizes == (2, 4)
    app.close()
