"""The corpus's transformers.Trainer stack (``hf-trainer``): its run ids and "auto" ds_config
(benchmarks/corpus/runs.py, measure.py) and how describe.py maps a record of it, with the ZeRO sizes the Trainer
resolved, to a workbench plan."""
import importlib.util
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "benchmarks" / "corpus"
HIDDEN = 2048


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def corpus(monkeypatch):
    """measure.py (with runs.py and describe.py, which it imports by their plain names) loaded from the corpus
    folder, sys.path and sys.modules restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("runs", "describe", "step_stats", "host_probe", "gpu_provenance"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    measure = _load("corpus_measure_trainer_under_test", CORPUS / "measure.py")
    yield measure, sys.modules["runs"], sys.modules["describe"]
    for name in ("runs", "describe", "step_stats", "host_probe", "gpu_provenance"):
        sys.modules.pop(name, None)


def _record(stage: int, **over) -> dict:
    """A finished hf-trainer record of a Llama-like shape as measure.py writes one, its ZeRO sizes the Trainer's
    "auto" resolved from the hidden size."""
    h = HIDDEN
    zero = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": h * h}
    if stage == 3:
        zero.update(stage3_prefetch_bucket_size=int(0.9 * h * h), stage3_param_persistence_threshold=10 * h)
    config = dict(model_type="llama", hidden_size=h, intermediate_size=5632, num_hidden_layers=2,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                  rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
    rec = dict(run_id=f"hf-trainer/hf-llama-h2048/z{stage}/sdpa/mbs1", shape_id="hf-llama-h2048",
               stack="hf-trainer", status="ok", world_size=1, options=dict(zero=stage, attn="sdpa", mbs=1),
               hf_config=config, seq_length=1024, attn_implementation="sdpa", built_in_zero_init=stage == 3,
               zero_config_resolved=dict(zero), ds_config={"zero_optimization": dict(zero)},
               provenance={"gpu": "NVIDIA H100 80GB HBM3", "host_cpu_cores": 16})
    rec.update(over)
    return rec


def test_trainer_runs_get_their_own_stack_and_id(corpus):
    _, runs, describe = corpus
    plain = runs._hf("hf-llama-h2048", 3, "sdpa", ckpt=True, lora=16)
    trainer = runs._hf("hf-llama-h2048", 3, "sdpa", ckpt=True, lora=16, trainer=True)
    assert plain["stack"] == "hf-ds" and trainer["stack"] == "hf-trainer"
    assert {k: v for k, v in trainer.items() if k != "stack"} == {k: v for k, v in plain.items() if k != "stack"}
    assert runs.run_id(trainer) == "hf-trainer/" + runs.run_id(plain).removeprefix("hf-ds/")
    assert set(describe.HF_STACKS) == {"hf-ds", "hf-trainer"}


def test_trainer_ds_config_leaves_the_trainers_values_auto_and_shares_the_offload(corpus):
    measure, runs, _ = corpus
    cfg = runs._hf("hf-llama-h2048", 3, "sdpa", trainer=True, offload="cpu", offload_params="cpu", pin=False)
    written = measure.ds_config_trainer(cfg)
    zero = written["zero_optimization"]
    assert written["train_batch_size"] == written["train_micro_batch_size_per_gpu"] == "auto"
    assert written["gradient_accumulation_steps"] == written["gradient_clipping"] == "auto"
    assert written["bf16"] == {"enabled": "auto"} and set(written["optimizer"]["params"].values()) == {"auto"}
    assert zero["reduce_bucket_size"] == zero["stage3_prefetch_bucket_size"] == "auto"
    assert zero["stage3_param_persistence_threshold"] == "auto" and zero["overlap_comm"] is True
    hand = measure.ds_config(cfg)["zero_optimization"]  # one definition of the offload sub-dicts
    assert zero["offload_optimizer"] == hand["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert zero["offload_param"] == hand["offload_param"]
    two = measure.ds_config_trainer(runs._hf("hf-llama-h2048", 2, "sdpa", trainer=True))["zero_optimization"]
    assert not any(k.startswith("stage3_") for k in two) and "offload_optimizer" not in two


def _plan_fields_or_skip():
    from workbench.specs import ParallelPlan

    need = {"reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold"}
    missing = need - set(ParallelPlan.__dataclass_fields__)
    if missing:
        pytest.skip(f"ParallelPlan has no {', '.join(sorted(missing))} yet")


def test_describe_maps_a_trainer_record_to_the_zero_sizes_it_resolved(corpus):
    _plan_fields_or_skip()
    _, _, describe = corpus
    h = HIDDEN
    plan = describe.description(_record(3))["plan"]
    assert plan["reduce_bucket_size"] == h * h
    assert plan["prefetch_bucket_size"] == int(0.9 * h * h)
    assert plan["param_persistence_threshold"] == 10 * h
    assert plan["overlap_comm"] is True and plan["zero_init"] is True and plan["zero_stage"] == 3
    # without the engine's resolved ZeRO settings, the resolved ds_config's
    assert describe.description(_record(3, zero_config_resolved=None))["plan"] == plan
    two = describe.description(_record(2))["plan"]
    assert two["reduce_bucket_size"] == h * h and two["overlap_comm"] is True
    assert two["prefetch_bucket_size"] is None and two["param_persistence_threshold"] is None
    assert two["zero_init"] is None
    # the same record under measure.py's own loop keeps the description it had: no sizes from the record
    own = describe.description(_record(3, stack="hf-ds", run_id="hf-ds/hf-llama-h2048/z3/sdpa/mbs1"))["plan"]
    assert own["reduce_bucket_size"] is None and own["prefetch_bucket_size"] is None
    assert {k: v for k, v in own.items() if k not in ("reduce_bucket_size", "prefetch_bucket_size",
                                                      "param_persistence_threshold", "overlap_comm", "zero_init")} \
        == {k: v for k, v in plan.items() if k not in ("reduce_bucket_size", "prefetch_bucket_size",
                                                       "param_persistence_threshold", "overlap_comm", "zero_init")}


def test_zero_plan_fields_leave_out_what_the_plan_lacks(corpus, monkeypatch):
    """Until ParallelPlan has the bucket fields, describe.py passes only those it has."""
    _, _, describe = corpus
    from workbench.specs import ParallelPlan

    fields = {k: v for k, v in ParallelPlan.__dataclass_fields__.items()
              if k not in ("reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold")}
    monkeypatch.setattr(ParallelPlan, "__dataclass_fields__", fields)
    got = describe.zero_plan_fields(_record(3))
    assert not {"reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold"} & set(got)
    assert got.get("overlap_comm", True) is True
