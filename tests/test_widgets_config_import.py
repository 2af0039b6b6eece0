"""ConfigView and ImportPanel in-process: exports follow the plan, pasted guide configs load into the panels."""
import base64
import html
import json

import pytest


from widgets.app import Workbench
from widgets.config_view import ConfigView, export_files
from widgets.import_panel import ImportPanel, parse_pasted
from widgets.parallel_panel import ParallelPanel
from workbench.configs import build_ds_config, megatron_command

GUIDE_ZERO3 = """{
  "train_batch_size": 1024, "gradient_accumulation_steps": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": 6e-5, "weight_decay": 0.01}},
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                        "allgather_partitions": true, "allgather_bucket_size": 5e8, "overlap_comm": true,
                        "reduce_scatter": true},
  "fp16": {"enabled": true, "loss_scale_window": 1000}
}"""
GUIDE_MEGATRON = """python pretrain_gpt.py \\
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 \\
    --num-layers 40 --hidden-size 5120 --num-attention-heads 40 \\
    --batch-size 128 --seq-length 2048 --lr 6e-5 --train-iters 100000 --lr-decay-iters 99000 \\
    --lr-decay-style cosine --min-lr 6e-6 --weight-decay 0.01 --adam-beta1 0.9 --adam-beta2 0.95 --fp16
"""


@pytest.fixture
def app():
    a = Workbench()
    yield a
    a.close()


def view_of(app, cls):
    return next(v for v in app.views if isinstance(v, cls))


def panel_of(app, cls):
    return next(p for p in app.panels if isinstance(p, cls))


def open_tab(app, view):
    app.view_tabs.selected_index = app.views.index(view)


def test_megatron_plan_exports_megatron_command(app):
    view = view_of(app, ConfigView)
    open_tab(app, view)
    view.section.value = "Megatron command"
    s = app.state
    assert list(view.files) == ["pretrain_megatron.sh"]
    assert view.files["pretrain_megatron.sh"] == megatron_command(s.model, s.cluster, s.plan)
    assert "--tensor-model-parallel-size 4" in view.files["pretrain_megatron.sh"]
    # the download link carries the same text, client-side
    href = view.downloads.value.split('base64,')[1].split('"')[0]
    assert base64.b64decode(href).decode() == view.files["pretrain_megatron.sh"]
    # a DeepSpeed config for a pure Megatron plan: the core says why not, inline
    view.section.value = "ds_config.json"
    assert view.files == {} and "engine='megatron'" in view.error.value


def test_deepspeed_plan_exports_ds_config_and_follows_changes(app):
    par = next(p for p in app.panels if p.title == "Parallelism")
    view = view_of(app, ConfigView)
    open_tab(app, view)
    view.section.value = "ds_config.json"
    par.controls["tensor_parallel"].value = 1
    par.controls["pipeline_parallel"].value = 1
    par.controls["engine"].value = "deepspeed"
    par.controls["zero_stage"].value = 3
    assert app.state.valid, app.state.error
    cfg = json.loads(view.files["ds_config.json"])
    s = app.state
    assert cfg == build_ds_config(s.model, s.cluster, s.plan)
    assert cfg["zero_optimization"]["stage"] == 3
    par.controls["zero_stage"].value = 2
    assert json.loads(view.files["ds_config.json"])["zero_optimization"]["stage"] == 2
    view.section.value = "launch script"
    assert "deepspeed --num_gpus 8" in view.files["launch_deepspeed.sh"]
    view.launcher.value = "SLURM"
    assert "#SBATCH --nodes=1" in view.files["launch_slurm.sbatch"]


def test_import_guide_zero3_json(app):
    imp = panel_of(app, ImportPanel)
    imp.text.value = GUIDE_ZERO3
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid, s.error
    assert str(s.plan.engine) == "deepspeed" and int(s.plan.zero_stage) == 3
    assert str(s.plan.offload_optimizer) == "cpu" and str(s.plan.precision) == "fp16"
    assert s.plan.global_batch_size == 1024 and s.plan.gradient_accumulation_steps == 8
    assert s.model.num_layers == 40  # the model stays the current one (a ds_config names none)
    par = next(p for p in app.panels if p.title == "Parallelism")
    assert par.controls["zero_stage"].value == 3 and par.controls["offload_optimizer"].value == "cpu"
    assert s.options is not None and s.options.lr == pytest.approx(6e-5)
    assert "deepspeed" in imp.report.value


def test_import_guide_megatron_command(app):
    imp = panel_of(app, ImportPanel)
    mdl = next(p for p in app.panels if p.title == "Model")
    mdl.preset.value = "gpt3-1.3b"
    imp.text.value = GUIDE_MEGATRON
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid, s.error
    assert (s.model.num_layers, s.model.hidden_size, s.model.num_attention_heads) == (40, 5120, 40)
    assert (s.plan.tensor_parallel, s.plan.pipeline_parallel) == (4, 2)
    assert mdl.controls["num_layers"].value == 40


def test_import_hugging_face_config(app):
    from pathlib import Path

    imp = panel_of(app, ImportPanel)
    mdl = next(p for p in app.panels if p.title == "Model")
    plan_before = app.state.plan
    imp.text.value = (Path(__file__).parent / "data" / "hf" / "qwen3-0_6b" / "config.json").read_text()
    assert imp.load(), imp.error.value
    s = app.state
    assert s.valid, s.error
    assert s.model.num_parameters == 596_049_920 and s.model.qk_norm and s.model.head_dim == 128
    assert mdl.controls["num_layers"].value == 28 and mdl.controls["qk_norm"].value is True
    assert str(plan_before.engine) == "megatron"  # the guide's default plan: an HF model needs DeepSpeed
    assert str(s.plan.engine) == "deepspeed" and int(s.plan.zero_stage) == 3 and s.plan.world_size == 8
    assert "DeepSpeed ZeRO-3" in imp.report.value
    assert "Hugging Face" in imp.report.value and "qwen3" in imp.report.value
    imp.text.value = '{"model_type": "bert", "hidden_size": 8}'
    assert not imp.load() and "model_type" in imp.error.value and "bert" in imp.error.value
    gemma2 = json.loads((Path(__file__).parent / "data" / "hf" / "gemma2-2b" / "config.json").read_text())
    imp.text.value = json.dumps({**gemma2, "attn_implementation": "sdpa"})
    assert not imp.load() and "attn_implementation=" in imp.error.value and "sdpa" in imp.error.value
    assert "gemma2" in imp.error.value and "eager" in imp.error.value


def test_import_hugging_face_config_keeps_a_layer_count_every_n_layers_reaches(app):
    """transformers checkpoints every k-th decoder layer: a recompute layer count it reaches for the imported model
    (Qwen3 0.6B, 28 layers: 14 with k=2) stays, another is set back to all layers, with the reason."""
    from pathlib import Path

    from widgets.state import LoadPreset, SetPlan

    imp = panel_of(app, ImportPanel)
    config = (Path(__file__).parent / "data" / "hf" / "qwen3-0_6b" / "config.json").read_text()
    for layers, kept in ((14, 14), (20, None)):
        app.dispatch(LoadPreset(name="guide-13b"))  # 40 layers: any count is a valid plan before the import
        app.dispatch(SetPlan(changes={"engine": "deepspeed", "zero_stage": 3, "tensor_parallel": 1,
                                      "pipeline_parallel": 1, "recompute": "full", "recompute_layers": layers}))
        imp.text.value = config
        assert imp.load(), imp.error.value
        assert app.state.valid and str(app.state.plan.recompute) == "full"
        assert app.state.plan.recompute_layers == kept
        if kept is None:
            assert "recompute layers set to all 28" in imp.report.value and "20 is not a count" in imp.report.value


def test_bad_paste_is_shown_not_raised(app):
    imp = panel_of(app, ImportPanel)
    before = app.state
    imp.text.value = '{"zero_optimization": {"stage": 7}}'
    assert not imp.load()
    assert "wb-error" in imp.error.value and app.state is before
    imp.text.value = ""
    assert not imp.load() and "nothing to import" in imp.error.value


def test_paste_never_reads_a_path(tmp_path):
    secret = tmp_path / "ds.json"
    secret.write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}')
    with pytest.raises(ValueError):
        parse_pasted(str(secret))  # a path is parsed as a (meaningless) command line, never opened


def test_write_needs_permission(app, tmp_path):
    view = view_of(app, ConfigView)
    assert view.write_button is None  # no write control unless allowed
    with pytest.raises(PermissionError):
        view.write_files(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    writer = Workbench(allow_write=True, export_dir=tmp_path / "exports")
    v = view_of(writer, ConfigView)
    open_tab(writer, v)
    v.section.value = "Megatron command"
    written = v.write_files("out")
    assert [p.rsplit("/", 1)[1] for p in written] == ["pretrain_megatron.sh"]
    assert (tmp_path / "exports" / "out" / "pretrain_megatron.sh").read_text() == v.files["pretrain_megatron.sh"]
    # confined to the export directory: absolute paths and .. are refused, shown in red by the button
    for outside in (str(tmp_path / "elsewhere"), "../elsewhere", "a/../../elsewhere", "/etc"):
        with pytest.raises(ValueError, match="outside the export directory"):
            v.write_files(outside)
        v.write_folder.value = outside
        v.write_button.click()
        assert "wb-error" in v.write_status.value and "outside the export directory" in v.write_status.value
    assert not (tmp_path / "elsewhere").exists()
    writer.close()


def test_data_directory_is_not_created_by_looking(tmp_path, monkeypatch):
    from workbench import paths

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    assert paths.data_dir() == tmp_path / "home" and paths.exports_dir() == tmp_path / "home" / "exports"
    app = Workbench.for_dashboard(environ={})
    assert not (tmp_path / "home").exists()
    app.close()


def test_export_files_unknown_section():
    with pytest.raises(KeyError):
        export_files("nope", None, None, None)


@pytest.mark.parametrize("text, expected", [
    ('{"train_micro_batch_size_per_gpu": 1e999}', "is not a finite number"),
    ('{"a": ' * 5000 + '1' + '}' * 5000, "nested too deeply"),
    ('{"optimizer": {"type": "AdamW", "params": {"betas": 3}}}', "betas=3"),
    ("python pretrain_gpt.py --micro-batch-size 0", "--micro-batch-size 0 must be >= 1"),
    ("# GPT-NeoX\n{\n  \"num-layers\": 4,\n  \"hidden-size\": 64,\n}", "GPT-NeoX YAML config"),
])
def test_import_panel_shows_bad_input_in_red_and_never_raises(app, text, expected):
    panel = panel_of(app, ImportPanel)
    panel.text.value = text
    panel.button.click()  # a click handler must not raise
    assert "wb-error" in panel.error.value and expected in html.unescape(panel.error.value)


def test_import_panel_shows_unexpected_failures_too(app, monkeypatch):
    import widgets.import_panel as module

    def broken(text):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(module, "parse_pasted", broken)
    panel = panel_of(app, ImportPanel)
    panel.text.value = "anything"
    panel.button.click()
    assert "ZeroDivisionError: division by zero" in panel.error.value


def test_a_pasted_source_the_estimate_refuses_is_refused_in_the_import_panel(app):
    """An uneven split past the model's layers: refused in red where it was pasted, and every other panel keeps
    the user's inputs (it used to report success and leave the error in the Parallelism panel)."""
    imp = next(p for p in app.panels if isinstance(p, ImportPanel))
    before = app.state
    imp.text.value = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 40 --hidden-size 5120 "
                      "--num-attention-heads 40 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers "
                      "30 --decoder-last-pipeline-num-layers 30 --micro-batch-size 1 --global-batch-size 8")
    assert imp.load() is False
    assert "place 60 layers, more than num_layers=40" in imp.error.value and imp.report.value == ""
    assert app.state.valid and app.state.plan == before.plan and app.state.model == before.model


def test_configs_tab_says_when_its_files_are_not_for_the_plan_typed_or_would_not_fit(app):
    from widgets.state import SetPlan

    view = next(v for v in app.views if isinstance(v, ConfigView))
    app.view_tabs.selected_index = app.views.index(view)
    assert view.note.value == ""
    app.dispatch(SetPlan(changes={"tensor_parallel": 3}))
    assert "These files are for the last valid plan: an input is refused (tensor_parallel(3)" in view.note.value
    app.dispatch(SetPlan(changes={"tensor_parallel": 1, "pipeline_parallel": 1}))  # 13B whole on each A100
    assert app.state.valid and "does not fit the GPU (Memory tab)" in view.note.value


def test_imported_pageable_offload_reaches_the_advisor_view(app):
    """A pasted ds_config with pin_memory false: the import report lints it, the plan takes it (the Parallelism
    panel's box unticked), and the Advisor view lists the pageable_offload finding with what it costs."""
    from widgets.advisor_view import AdvisorView

    imp = panel_of(app, ImportPanel)
    imp.text.value = GUIDE_ZERO3.replace('"pin_memory": true', '"pin_memory": false')
    assert imp.load(), imp.error.value
    assert app.state.plan.pin_memory is False
    assert panel_of(app, ParallelPanel).controls["pin_memory"].value is False
    assert "pin_memory" in imp.report.value and "pageable" in imp.report.value
    view = view_of(app, AdvisorView)
    open_tab(app, view)
    found = {f.id: f for f in view.advice.findings}
    # the guide's ZeRO-3 over many GPUs offloads a small shard each: priced, and under 10 % of the step here
    assert "with page-locked buffers" in found["pageable_offload"].message
    assert found["pageable_offload"].status == "pass" and not found["pageable_offload"].suggestion
    assert "pageable" in html.unescape(view.checks.value)
