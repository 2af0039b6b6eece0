"""The Memory view's allocator replay in-process: the scope line follows the plan, an imported transformers model
replays from its config and gives the same peak as ``estimate(..., simulate_allocator=...)``, refusals and failures
are shown inline."""
from pathlib import Path

import pytest

from widgets.allocator_replay import AllocatorReplay, replay_source, scope_text
from widgets.app import Workbench
from widgets.import_panel import ImportPanel
from widgets.state import SetCluster, SetModel, SetPlan
from workbench.estimate import estimate
from workbench.hf import read_config

TINY_LLAMA = Path(__file__).resolve().parent / "data" / "hf" / "tiny-llama" / "config.json"


@pytest.fixture
def app():
    a = Workbench()
    yield a
    a.close()


def _one_gpu_hf(app):
    """The tiny Llama config imported through the Import panel, on one H200 at ZeRO-2 without overlap_comm."""
    imp = next(p for p in app.panels if isinstance(p, ImportPanel))
    imp.text.value = TINY_LLAMA.read_text()
    assert imp.load(), imp.error.value
    app.dispatch(SetCluster(changes={"gpu": "H200", "gpus_per_node": 1, "num_nodes": 1}))
    app.dispatch(SetModel(changes={"seq_length": 128}))
    app.dispatch(SetPlan(changes={"zero_stage": 2, "overlap_comm": False, "micro_batch_size": 2,
                                  "global_batch_size": 2, "precision": "bf16", "recompute": "none"}))
    assert app.state.valid, app.state.error
    return app.state


def test_guide_plan_is_out_of_scope_and_says_why(app):
    ok, text = scope_text(app.state)  # the guide's Megatron TP4 x PP2 on 8 A100s
    assert not ok
    assert "world_size=8" in text and "tensor_parallel=4" in text
    replay = app.memory.replay
    assert replay.button.disabled and "world_size=8" in replay.status.value


def test_imported_model_replays_like_the_core(app):
    state = _one_gpu_hf(app)
    assert state.hf_model is not None and state.hf_model.config == read_config(TINY_LLAMA)
    replay = app.memory.replay
    assert not replay.button.disabled, replay.status.value
    replay.replay()
    expected = estimate(state.model, state.cluster, state.plan, checks=False, simulate_allocator=state.hf_model)
    peak = expected.memory.per_gpu_peak_bytes
    assert f'data-bytes="{int(peak)}"' in replay.result.value
    assert "caching allocator replayed" in replay.result.value
    # the replayed peak differs from the constant-reserve estimate the summary shows
    assert peak != state.estimate.memory.per_gpu_peak_bytes
    # a new plan clears the result and keeps the button for a plan still in scope
    app.dispatch(SetPlan(changes={"micro_batch_size": 1, "global_batch_size": 1}))
    assert replay.result.value == "" and not replay.button.disabled


def test_changed_model_fields_are_refused_by_name(app):
    _one_gpu_hf(app)
    app.dispatch(SetModel(changes={"num_layers": app.state.model.num_layers + 1}))
    ok, text = scope_text(app.state)
    assert not ok and "num_layers=" in text and "config.json" in text
    with pytest.raises(ValueError, match="changed since its config.json was imported"):
        replay_source(app.state)


def test_transformers_model_without_config_is_refused(app):
    state = _one_gpu_hf(app)
    import dataclasses

    bare = dataclasses.replace(state, hf_model=None)
    ok, text = scope_text(bare)
    assert not ok and "not imported from a config.json" in text


def test_new_preset_drops_the_imported_config(app):
    from widgets.state import LoadPreset

    _one_gpu_hf(app)
    app.dispatch(LoadPreset(name="gpt3-125m"))
    assert app.state.hf_model is None


def test_failure_is_shown_inline_not_raised(app, monkeypatch):
    state = _one_gpu_hf(app)
    replay = app.memory.replay

    def broken(*args, **kwargs):
        raise RuntimeError("the megatron-core allocation trace failed: boom")

    monkeypatch.setattr("workbench.estimate.estimate", broken)
    replay.replay()
    assert "wb-error" in replay.result.value and "RuntimeError" in replay.result.value
    assert not replay.button.disabled and state.plan.world_size == 1  # still in scope: the user may try again


def test_standalone_control_before_any_state():
    control = AllocatorReplay()
    control.replay()  # nothing shown yet: a click does nothing
    assert control.result.value == ""
    control.close()


def test_memory_view_of_a_bare_estimate_takes_its_specs():
    """Notebooks show one estimate in the Memory view (``MemoryView().show(SimpleNamespace(estimate=est))``): the
    replay line reads the evaluated plan's own specs."""
    from types import SimpleNamespace

    from widgets.memory_view import MemoryView
    from workbench import catalog
    from workbench.specs import ClusterSpec, ParallelPlan

    est = estimate(catalog.model("gpt3-125m"), ClusterSpec(gpu="H200", gpus_per_node=8),
                   ParallelPlan(world_size=8, zero_stage=2))
    view = MemoryView()
    view.show(SimpleNamespace(estimate=est))
    assert view.replay.button.disabled and "world_size=8" in view.replay.status.value
    view.show(SimpleNamespace(estimate=None))  # nothing to show: no error
    view.close()


def test_no_replay_while_an_input_is_refused(app):
    """With a refused input the charts keep the last valid plan; the replay does not run that plan as if it were
    the one the boxes say, and comes back once the field is fixed."""
    _one_gpu_hf(app)
    replay = app.memory.replay
    assert not replay.button.disabled
    app.dispatch(SetPlan(changes={"micro_batch_size": 4096}))
    assert not app.state.valid
    assert replay.button.disabled and "not while an input is refused" in replay.status.value
    app.dispatch(SetPlan(changes={"micro_batch_size": 2}))
    assert app.state.valid and not replay.button.disabled
