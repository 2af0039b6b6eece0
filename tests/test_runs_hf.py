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


def _run(tmp_path, family, **plan_fields):
    model = catalog.model(f"hf:{HF / family}", seq_length=32)
    p = plan(2, **plan_fields)
    r = launch(model, cpu_cluster(2), p, steps=STEPS, nproc=2, store=RunStore(tmp_path / "runs.sqlite"),
               run_dir=tmp_path / family)
    r.wait(600)
    rec = r.record()
    assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
    assert len(rec["losses"]) == STEPS and all(5.0 < x < 7.5 for x in rec["losses"])  # ~ ln 512 at random init
    records = [json.loads(line) for line in (r.run_dir / "metrics" / "rank0.jsonl").read_text().splitlines()]
    return model, r, next(x for x in records if x["type"] == "model")


def test_gpt2_zero2_with_gradient_checkpointing(tmp_path):
    model, r, counted = _run(tmp_path, "tiny-gpt2", zero_stage=2, recompute="full")
    run = json.loads((r.run_dir / "run.json").read_text())
    assert run["options"]["hf"]["gradient_checkpointing"] and run["options"]["hf"]["attn_implementation"] == "sdpa"
    assert counted["parameters"] == counted["trainable"] == model.num_parameters
    assert run["predicted"] and (r.run_dir / "hf_config.json").is_file()


def test_llama_zero3_lora(tmp_path):
    model, r, counted = _run(tmp_path, "tiny-llama", zero_stage=3, lora_rank=4)
    adapters = model.num_layers * lora_params_per_layer(model, 4, ("q", "k", "v", "o", "gate", "up", "down"))
    assert counted["trainable"] == adapters  # only the adapters reach the optimizer
    assert counted["parameters"] == model.num_parameters + adapters
