"""The Import panel fills what a pasted source leaves out from what the other panels show — the values the user
typed, also while another panel's value is refused — and keeps the imported Hugging Face config when a later paste
(a ds_config.json) does not change the model."""
import json
from pathlib import Path

from test_widgets_app import panel
from widgets.app import Workbench
from widgets.import_panel import ImportPanel

DATA = Path(__file__).parent / "data"
DS_CONFIG = json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                        "zero_optimization": {"stage": 2}})


def importer(app) -> ImportPanel:
    return next(p for p in app.panels if isinstance(p, ImportPanel))


def test_hf_import_keeps_the_typed_gpu_count_the_old_plan_refused():
    app = Workbench()
    hw = panel(app, "Hardware")
    hw.controls["gpus_per_node"].value = 1  # the guide's TP4 x PP2 needs 8: refused, the typed 1 stays
    assert not app.state.valid and hw.controls["gpus_per_node"].value == 1
    imp = importer(app)
    imp.text.value = (DATA / "hf" / "qwen2-0_5b" / "config.json").read_text()
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid, s.error
    assert s.cluster.world_size == 1 and s.plan.world_size == 1 and hw.controls["gpus_per_node"].value == 1
    assert str(s.plan.engine) == "deepspeed" and "over 1 GPUs" in imp.report.value
    app.close()


def test_ds_config_import_keeps_typed_model_fields_and_cluster():
    app = Workbench()
    mdl, hw, par = panel(app, "Model"), panel(app, "Hardware"), panel(app, "Parallelism")
    par.controls["tensor_parallel"].value = 3  # refused: the seq length and the nodes typed next are not applied
    mdl.controls["seq_length"].value = 4096
    hw.controls["num_nodes"].value = 2
    assert not app.state.valid and app.state.model.seq_length == 2048 and app.state.cluster.num_nodes == 1
    imp = importer(app)
    imp.text.value = DS_CONFIG
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid, s.error
    assert s.model.seq_length == 4096 and mdl.controls["seq_length"].value == 4096
    assert s.cluster.num_nodes == 2 and s.plan.world_size == 16
    app.close()


def test_ds_config_after_hf_import_keeps_the_hf_config_for_the_replay():
    app = Workbench()
    imp = importer(app)
    imp.text.value = (DATA / "hf" / "qwen2-0_5b" / "config.json").read_text()
    assert imp.load(), imp.error.value
    hf = app.state.hf_model
    assert hf is not None
    imp.text.value = DS_CONFIG
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid and int(s.plan.zero_stage) == 2
    assert s.hf_model is hf and s.model == hf.spec
    app.close()


def test_hf_import_of_a_bfloat16_model_trains_it_in_bf16():
    """The guide's plan is fp16; a config stored in bfloat16 switches the plan to bf16 (where the GPU has it), so
    that the allocator replay, which traces bf16, can run it; a float32 config keeps the plan's precision."""
    app = Workbench()
    assert str(app.state.plan.precision) == "fp16"
    imp = importer(app)
    config = json.loads((DATA / "hf" / "qwen2-0_5b" / "config.json").read_text())
    imp.text.value = json.dumps(dict(config, torch_dtype="bfloat16"))
    assert imp.load(), imp.error.value
    assert str(app.state.plan.precision) == "bf16" and "precision set to bf16" in imp.report.value
    app.close()
    app = Workbench()
    imp = importer(app)
    imp.text.value = json.dumps(dict(config, torch_dtype="float32"))
    assert imp.load(), imp.error.value
    assert str(app.state.plan.precision) == "fp16" and "precision set" not in imp.report.value
    app.close()


def test_a_megatron_command_larger_than_the_cluster_says_to_set_the_hardware_first():
    app = Workbench()
    panel(app, "Hardware").controls["gpus_per_node"].value = 1
    imp = importer(app)
    imp.text.value = (DATA / "guide_megatron_tp4pp2.sh").read_text()
    assert not imp.load()
    assert "needs TP × PP × CP = 8 GPUs" in imp.error.value and "Hardware panel" in imp.error.value
    panel(app, "Hardware").controls["gpus_per_node"].value = 8
    assert imp.load(), imp.error.value
    assert app.state.plan.tensor_parallel == 4 and app.state.plan.pipeline_parallel == 2
    app.close()
