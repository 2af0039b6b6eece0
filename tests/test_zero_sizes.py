"""DeepSpeed's ZeRO sizes on the plan (reduce_bucket_size, stage3_prefetch_bucket_size,
stage3_param_persistence_threshold): checked, priced by the memory and time models and the allocator replay, read from
a ds_config (the Hugging Face Trainer's "auto" filled from the hidden size), written back, and set from the CLI."""
import json
from pathlib import Path

import pytest

from workbench.catalog import model
from workbench.cli import main
from workbench.configs import build_ds_config
from workbench.configs.deepspeed import hf_auto_zero_sizes
from workbench.configs.importer import import_ds_config
from workbench.defaults import (DEEPSPEED_PERSISTENCE_THRESHOLD, DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
                                DEEPSPEED_REDUCE_BUCKET_ELEMENTS)
from workbench.estimate import estimate
from workbench.hf import import_hf
from workbench.specs import ClusterSpec, ParallelPlan

DATA = Path(__file__).parent / "data"
CLUSTER = ClusterSpec(gpu="H100-SXM", gpus_per_node=8)


def test_defaults_are_deepspeeds_and_explicit_defaults_change_nothing():
    plan = ParallelPlan(world_size=8, zero_stage=3)
    assert (plan.reduce_bucket_elements, plan.prefetch_bucket_elements, plan.persistence_threshold) == (
        DEEPSPEED_REDUCE_BUCKET_ELEMENTS, DEEPSPEED_PREFETCH_BUCKET_ELEMENTS, DEEPSPEED_PERSISTENCE_THRESHOLD) == (
        500_000_000, 50_000_000, 100_000)
    m = model("llama2-7b")
    explicit = plan.replace(reduce_bucket_size=500_000_000, prefetch_bucket_size=50_000_000,
                            param_persistence_threshold=100_000, lora_rank=16)
    a, b = estimate(m, CLUSTER, plan.replace(lora_rank=16)), estimate(m, CLUSTER, explicit)
    assert a.memory.per_gpu_peak_bytes == b.memory.per_gpu_peak_bytes
    assert a.time.step_seconds == b.time.step_seconds


@pytest.mark.parametrize("fields,words", [
    (dict(zero_stage=2, reduce_bucket_size=0), "reduce_bucket_size=0 must be >= 1"),
    (dict(zero_stage=0, reduce_bucket_size=2 ** 24), "reduce_bucket_size=16777216 needs zero_stage >= 1"),
    (dict(zero_stage=2, prefetch_bucket_size=10), "prefetch_bucket_size=10 needs zero_stage >= 3"),
    (dict(zero_stage=2, param_persistence_threshold=10), "param_persistence_threshold=10 needs zero_stage >= 3"),
    (dict(zero_stage=3, reduce_bucket_size=2.5), "reduce_bucket_size=2.5 must be an integer"),
    (dict(engine="megatron", reduce_bucket_size=10), "engine='megatron'"),
])
def test_bad_sizes_are_named(fields, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)").replace("'", "'")):
        ParallelPlan(world_size=8, **fields)


def test_deepspeed_float_form_is_read_as_a_whole_number():
    assert ParallelPlan(world_size=8, zero_stage=2, reduce_bucket_size=2e8).reduce_bucket_size == 200_000_000


def test_zero2_buckets_follow_reduce_bucket_size():
    """ZeRO-2 with overlap_comm holds two buckets of reduce_bucket_size 16-bit elements through backward: the
    Trainer's "auto" (h²) for Llama 2 7B is 16.8 M elements against DeepSpeed's 500 M."""
    m = model("llama2-7b")
    base = ParallelPlan(world_size=8, zero_stage=2, overlap_comm=True)
    h2 = m.hidden_size ** 2
    default, small = estimate(m, CLUSTER, base), estimate(m, CLUSTER, base.replace(reduce_bucket_size=h2))
    shrink = default.memory.peak_stage.terms.buffers - small.memory.peak_stage.terms.buffers
    assert shrink == pytest.approx(2 * 2 * (500_000_000 - h2))


def test_zero3_persistence_threshold_decides_whether_lora_adapters_are_fetched():
    """LoRA r=16 on Llama 2 7B's width: each adapter matrix has 65,536 elements, persistent under DeepSpeed's 1e5
    threshold and fetched like any weight under the Trainer's "auto" (10·h = 40,960): more hook time per step."""
    from workbench import timing

    m = model("llama2-7b")
    targets = ("q", "k", "v", "o")
    assert timing.zero3_lora_modules_per_layer(m, 16, targets) == (0, 16)
    assert timing.zero3_lora_modules_per_layer(m, 16, targets, 10 * m.hidden_size) == (8, 16)
    hf = import_hf(DATA / "hf" / "llama2-7b").spec  # a transformers layer: seven linears, each fetched
    assert (timing.zero3_modules_per_layer(hf), timing.zero3_modules_per_layer(hf, 10 ** 9)) == (7, 0)
    plan = ParallelPlan(world_size=8, zero_stage=3, lora_rank=16, lora_targets=targets)
    auto = plan.replace(param_persistence_threshold=10 * m.hidden_size)
    assert estimate(m, CLUSTER, auto).time.step_seconds > estimate(m, CLUSTER, plan).time.step_seconds


def test_trainer_auto_sizes_come_from_the_hidden_size():
    assert hf_auto_zero_sizes(4096, 3) == {"zero_optimization.reduce_bucket_size": 16_777_216,
                                           "zero_optimization.stage3_prefetch_bucket_size": 15_099_494,
                                           "zero_optimization.stage3_param_persistence_threshold": 40_960}
    assert hf_auto_zero_sizes(4096, 2) == {"zero_optimization.reduce_bucket_size": 16_777_216}
    imp = import_ds_config(DATA / "import" / "hf_trainer_zero3_auto.json")
    assert not {"reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold"} & set(imp.plan_fields)
    assert any("filled from the model's hidden size" in w for w in imp.warnings)
    m, plan = imp.to_specs(model("llama2-7b"), CLUSTER)
    assert (plan.reduce_bucket_size, plan.prefetch_bucket_size, plan.param_persistence_threshold) == (
        16_777_216, 15_099_494, 40_960)


def test_import_reads_explicit_sizes_and_export_writes_them_back():
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 3, "reduce_bucket_size": 2e8, "stage3_prefetch_bucket_size": 1e7,
                                 "stage3_param_persistence_threshold": 0}}
    m, plan = import_ds_config(json.dumps(cfg), world_size=8).to_specs(model("llama2-7b"), CLUSTER)
    assert (plan.reduce_bucket_size, plan.prefetch_bucket_size, plan.param_persistence_threshold) == (
        200_000_000, 10_000_000, 0)
    zero = build_ds_config(m, CLUSTER, plan)["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
            zero["stage3_param_persistence_threshold"]) == (200_000_000, 10_000_000, 0)
    # a stage-3 size in a ZeRO-2 config is not read by DeepSpeed, nor put on the plan
    cfg["zero_optimization"]["stage"] = 2
    _, plan2 = import_ds_config(json.dumps(cfg), world_size=8).to_specs(model("llama2-7b"), CLUSTER)
    assert plan2.reduce_bucket_size == 200_000_000 and plan2.prefetch_bucket_size is None


def test_cli_auto_and_numbers(capsys):
    argv = ["estimate", "--model", "llama2-7b", "--gpu", "H100-SXM", "--gpus-per-node", "8", "--zero", "3",
            "--json"]
    assert main(argv + ["--reduce-bucket-size", "auto", "--prefetch-bucket-size", "1.5e7",
                        "--param-persistence-threshold", "auto"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["reduce_bucket_size"], plan["prefetch_bucket_size"], plan["param_persistence_threshold"]) == (
        16_777_216, 15_000_000, 40_960)
    with pytest.raises(SystemExit):
        main(argv + ["--reduce-bucket-size", "lots"])
    err = capsys.readouterr().err
    assert "--reduce-bucket-size 'lots'" in err and "Traceback" not in err
    assert main(argv[:-2] + ["2", "--prefetch-bucket-size", "auto"]) != 0
    err = capsys.readouterr().err
    assert "prefetch_bucket_size=15099494 needs zero_stage >= 3" in err and "Traceback" not in err


def test_replay_traces_the_plans_reduce_bucket():
    """The allocator replay allocates ZeRO-2's bucket at the plan's size: a smaller bucket, a lower traced peak."""
    from workbench import allocsim
    from workbench.hf import read_config

    cfg = read_config(DATA / "hf" / "tiny-llama")
    kw = dict(seq_length=128, micro_batch=2, steps=2, zero_stage=2)
    big = allocsim.replayed_peaks(cfg, **kw)
    small = allocsim.replayed_peaks(cfg, reduce_bucket_elements=1_000_000, **kw)
    assert small.peak_allocated_bytes == pytest.approx(big.peak_allocated_bytes - 2 * (500_000_000 - 1_000_000),
                                                       rel=0.02)


def test_planner_prices_every_deepspeed_row_with_the_sizes_and_estimate_agrees(capsys):
    from workbench.planner import search

    hf = import_hf(DATA / "hf" / "llama2-7b", seq_length=2048).spec
    sizes = dict(reduce_bucket_size=4096 ** 2, prefetch_bucket_size=int(0.9 * 4096 ** 2),
                 param_persistence_threshold=40_960)
    result = search(hf, CLUSTER, global_batch_size=64, lora_rank=16, zero_stages=(1, 3), **sizes)
    stages = set()
    for r in result.ranked[:6]:
        p = r.plan
        stages.add(int(p.zero_stage))
        assert p.reduce_bucket_size == 4096 ** 2
        assert p.param_persistence_threshold == (40_960 if int(p.zero_stage) == 3 else None)
        e = estimate(hf, CLUSTER, p, checks=False, simulate_allocator=False)
        assert (r.step_seconds, r.peak_bytes) == (e.time.step_seconds, e.memory.per_gpu_peak_bytes)
    argv = ["plan", "--model", f"hf:{DATA / 'hf' / 'llama2-7b'}", "--seq", "2048", "--gpu", "H100-SXM",
            "--gpus-per-node", "8", "--gbs", "64", "--lora-rank", "16", "--top", "2", "--json"]
    assert main(argv + ["--reduce-bucket-size", "auto", "--param-persistence-threshold", "auto"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    assert ranked and all(r["reduce_bucket_size"] == 4096 ** 2 for r in ranked)
