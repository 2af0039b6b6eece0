"""Hugging Face models launched on the CPU under DeepSpeed (gloo, 2 processes, tiny configs of two families)."""
import json
import os
from pathlib import Path

import pytest

from runs_support import cpu_cluster, plan
from workbench import catalog
from workbench.params import lora_params_per_layer
from workbench.runs import RunStore, launch

pytestmark = pytest.mark.slow
os.environ.setdefault("HF_HUB_OFFLINE", "1")
HF = Path(__file__).parent / "data" / "hf"
STEPS = 2


def _run(tmp_path, family, trainer="engine", **plan_fields):
    model = catalog.model(f"hf:{HF / family}", seq_length=32)
    p = plan(2, **plan_fields)
    r = launch(model, cpu_cluster(2), p, steps=STEPS, nproc=2, store=RunStore(tmp_path / "runs.sqlite"),
               run_dir=tmp_path / family, trainer=trainer)
    r.wait(600)
    rec = r.record()
    assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
    assert len(rec["losses"]) == STEPS and all(5.0 < x < 7.5 for x in rec["losses"])  # ~ ln 512 at random init
    records = [json.loads(line) for line in (r.run_dir / "metrics" / "rank0.jsonl").read_text().splitlines()]
    return model, r, next(x for x in records if x["type"] == "model")


def test_gpt2_zero2_hf_trainer_with_gradient_checkpointing(tmp_path):
    """transformers' Trainer resolves the exported "auto" ds_config from TrainingArguments; the run record keeps
    the config the DeepSpeed engine ran with, equal to the workbench's own resolution of the same file."""
    from workbench.configs.deepspeed import HF_TRAINER_AUTO_PATHS, _get_path, resolve_hf_auto

    # one of the two layers checkpointed: the Trainer passes every_n_layers=2 to activation_checkpointing_enable
    model, r, counted = _run(tmp_path, "tiny-gpt2", trainer="hf", zero_stage=2, recompute="full",
                             recompute_layers=1, precision="bf16")
    run = json.loads((r.run_dir / "run.json").read_text())
    hf = run["options"]["hf"]
    assert hf["trainer"] == "hf" and hf["training_args"]["activation_checkpointing"]
    assert hf["training_args"]["activation_checkpointing_kwargs"]["every_n_layers"] == hf["checkpoint_every"] == 2
    assert hf["attn_implementation"] == "sdpa"
    assert counted["parameters"] == counted["trainable"] == model.num_parameters
    assert run["predicted"] and (r.run_dir / "hf_config.json").is_file()
    written = json.loads((r.run_dir / "ds_config.json").read_text())
    autos = [k for k in HF_TRAINER_AUTO_PATHS if _get_path(written, k) is not None]
    assert "bf16.enabled" in autos and all(_get_path(written, k) == "auto" for k in autos)
    resolved = r.record()["measured"]["ds_config"]
    assert resolved["train_batch_size"] == 2 * resolved["train_micro_batch_size_per_gpu"] == 2
    assert resolved["scheduler"]["params"]["total_num_steps"] == STEPS and resolved["bf16"]["enabled"] is True
    expected = resolve_hf_auto(written, hf["training_args"], world_size=2, hidden_size=model.hidden_size)
    assert {k: _get_path(resolved, k) for k in autos} == {k: _get_path(expected, k) for k in autos}


def test_llama_zero3_lora(tmp_path):
    model, r, counted = _run(tmp_path, "tiny-llama", zero_stage=3, lora_rank=4)
    assert counted["built_in_zero_init"] is True  # a transformers model at ZeRO-3: inside deepspeed.zero.Init
    adapters = model.num_layers * lora_params_per_layer(model, 4, ("q", "k", "v", "o", "gate", "up", "down"))
    assert counted["trainable"] == adapters  # only the adapters reach the optimizer
    assert counted["parameters"] == model.num_parameters + adapters


def test_llama_zero3_builds_as_the_plan_says_through_the_trainer(tmp_path):
    """Through the Trainer, ZeRO-3 builds a transformers model inside deepspeed.zero.Init unless the plan says
    zero_init=False; then the whole model is made on the device first, before the Trainer's arguments exist, and
    DeepSpeed partitions it. The model record says which happened (the engine path: test_llama_zero3_lora)."""
    _, _, inside = _run(tmp_path / "a", "tiny-llama", trainer="hf", zero_stage=3)
    _, _, whole = _run(tmp_path / "b", "tiny-llama", trainer="hf", zero_stage=3, zero_init=False)
    assert inside["built_in_zero_init"] is True and whole["built_in_zero_init"] is False
    assert inside["parameters"] == whole["parameters"]


def test_qwen3_moe_eager_experts_zero2(tmp_path):
    """--experts-implementation eager reaches transformers: the run builds the eager experts loop and says so."""
    from workbench.hf import model_from_hf

    model = model_from_hf(str(HF / "qwen3-moe-tiny"), seq_length=32, experts_implementation="eager")
    r = launch(model, cpu_cluster(2), plan(2, zero_stage=2), steps=STEPS, nproc=2,
               store=RunStore(tmp_path / "runs.sqlite"), run_dir=tmp_path / "moe")
    r.wait(600)
    rec = r.record()
    assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
    assert json.loads((r.run_dir / "run.json").read_text())["options"]["hf"]["experts_implementation"] == "eager"
    records = [json.loads(line) for line in (r.run_dir / "metrics" / "rank0.jsonl").read_text().splitlines()]
    counted = next(x for x in records if x["type"] == "model")
    assert counted["experts_implementation"] == "eager" and counted["parameters"] == model.num_parameters
