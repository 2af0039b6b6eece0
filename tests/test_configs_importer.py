"""Import of ds_configs and Megatron command lines, the seed guide's examples, and export → import round trips."""
import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from workbench.catalog import gpu, model, model_names
from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config
from workbench.configs.hybrid import hybrid_command, hybrid_ds_config
from workbench.configs.importer import import_any, import_ds_config, import_megatron_args, to_number
from workbench.configs.megatron import megatron_args, megatron_command
from workbench.specs import ClusterSpec, ParallelPlan

DATA = Path(__file__).parent / "data"


def cluster(nodes=1, per_node=8):
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=per_node, num_nodes=nodes)


def same_model(a, b):
    return dataclasses.replace(a, name="x") == dataclasses.replace(b, name="x")


def test_numbers():
    assert to_number("5e8") == 500_000_000 and isinstance(to_number("5e8"), int)
    assert to_number(5e8) == 500_000_000 and to_number("6e-5") == 6e-5 and to_number("1_000") == 1000
    with pytest.raises(ValueError, match="x="):
        to_number("five", "x")


# -- the seed guide's configs ------------------------------------------------------------------------------------
def same_plan(a: ParallelPlan, b: ParallelPlan) -> bool:
    """Equal once ``overlap_comm=None`` (the engine's default) is resolved: an export writes it out explicitly."""
    return a.replace(overlap_comm=a.overlaps_comm) == b.replace(overlap_comm=b.overlaps_comm)


def test_guide_zero3_json():
    imp = import_any(DATA / "guide_zero3.json")
    assert imp.kind == "deepspeed" and imp.lint == []
    assert imp.plan_fields == {"engine": "deepspeed", "global_batch_size": 1024, "precision": "fp16",
                               "zero_stage": 3, "offload_optimizer": "cpu", "overlap_comm": True}
    assert imp.options["allgather_bucket_size"] == 500_000_000 and imp.options["loss_scale_window"] == 1000
    assert imp.options["lr"] == 6e-5 and imp.options["weight_decay"] == 0.01
    m, p = imp.to_specs(model("guide-13b"), cluster(1))
    # DeepSpeed's rule: micro = train_batch / (accumulation * world) = 1024 / (8 * 8)
    assert (p.micro_batch_size, p.gradient_accumulation_steps, p.world_size) == (16, 8, 8)
    assert str(p.offload_optimizer) == "cpu" and int(p.zero_stage) == 3


def test_guide_megatron_tp4_pp2():
    imp = import_any(DATA / "guide_megatron_tp4pp2.sh")
    assert imp.kind == "megatron"
    assert imp.model_fields["num_layers"] == 40 and imp.model_fields["hidden_size"] == 5120
    assert imp.plan_fields["tensor_parallel"] == 4 and imp.plan_fields["pipeline_parallel"] == 2
    # the old per-replica --batch-size is today's micro batch; global = micro x data parallel (1 here)
    assert imp.plan_fields["micro_batch_size"] == 128 and imp.plan_fields["precision"] == "fp16"
    assert imp.options["betas"] == (0.9, 0.95) and imp.options["min_lr"] == 6e-6
    assert any("--batch-size 128" in w for w in imp.warnings)
    m, p = imp.to_specs(cluster=cluster(1))
    assert m.num_parameters > 12e9 and p.data_parallel == 1 and p.global_batch_size == 128


def test_guide_hybrid_with_its_ds_config():
    cmd = import_any(DATA / "guide_hybrid.sh")
    assert cmd.kind == "megatron-deepspeed"
    assert any("--use-deepspeed" in w for w in cmd.warnings)
    assert cmd.options["deepspeed_config"] == "ds_config.json"
    ds = import_any(DATA / "guide_hybrid_ds_config.json")
    assert ds.lint == []
    m, p = cmd.merge(ds).to_specs(model("guide-13b"), cluster(2))
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (4, 2, 2)
    assert int(p.zero_stage) == 1 and p.micro_batch_size == 8 and p.gradient_accumulation_steps == 4
    assert p.global_batch_size == 8 * 4 * 2


# -- DeepSpeed details ------------------------------------------------------------------------------------------
def test_hf_auto_values():
    cfg = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
           "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "weight_decay": "auto"}},
           "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                 "stage3_prefetch_bucket_size": "auto"}}
    imp = import_ds_config(cfg)
    assert "train_batch_size" in imp.options["auto"] and "optimizer.params.lr" in imp.options["auto"]
    assert any("auto" in w for w in imp.warnings)
    assert "micro_batch_size" not in imp.plan_fields and "lr" not in imp.options
    m, p = imp.to_specs(model("llama3-8b"), cluster(1))
    assert int(p.zero_stage) == 3 and p.micro_batch_size == 1  # filled from defaults
    assert imp.deepspeed_options() == DeepSpeedOptions()


def test_strings_and_legacy_forms():
    cfg = json.dumps({"train_batch_size": "64", "train_micro_batch_size_per_gpu": 2,
                      "zero_optimization": {"stage": "2", "reduce_bucket_size": "2e8", "cpu_offload": True},
                      "bfloat16": {"enabled": True}})
    imp = import_ds_config(cfg, world_size=8)
    assert imp.plan_fields["zero_stage"] == 2 and imp.options["reduce_bucket_size"] == 200_000_000
    assert imp.plan_fields["offload_optimizer"] == "cpu" and imp.plan_fields["precision"] == "bf16"
    assert imp.options["gradient_accumulation_steps"] == 4
    m, p = imp.to_specs(model("llama3-8b"))
    assert p.world_size == 8 and p.gradient_accumulation_steps == 4


def test_lint_findings_travel_with_import():
    imp = import_ds_config({"train_batch_size": 8, "zero_optimisation": {"stage": 3}})
    assert any(f.path == "zero_optimisation" for f in imp.lint)
    assert imp.plan_fields["zero_stage"] == 0  # what DeepSpeed would actually run


def test_bad_sources():
    with pytest.raises(ValueError, match="does not exist"):
        import_any("no_such_config.json")
    with pytest.raises(ValueError, match="not valid JSON"):
        import_ds_config("{not json: [")
    with pytest.raises(ValueError, match="num_layers"):
        import_megatron_args("python pretrain_gpt.py --hidden-size 64").to_specs(cluster=cluster())


# -- Megatron details -------------------------------------------------------------------------------------------
def test_megatron_spellings_and_deprecated_flags():
    imp = import_megatron_args(["pretrain_gpt.py", "--num_layers", "24", "--hidden_size=2048",
                                "--num-attention-heads", "16", "--model-parallel-size", "2",
                                "--checkpoint-activations", "--micro_batch_size", "4", "--global-batch-size", "64",
                                "--bf16", "--seq-length", "1024"])
    assert imp.model_fields["num_layers"] == 24 and imp.model_fields["hidden_size"] == 2048
    assert imp.plan_fields["tensor_parallel"] == 2 and imp.plan_fields["recompute"] == "full"
    assert imp.plan_fields["micro_batch_size"] == 4
    assert sum("deprecated" in w for w in imp.warnings) == 2


def test_megatron_deepspeed_script_with_variables():
    script = """#!/bin/bash
TP=2
PP=2
NUM_KV_HEADS=4
ZERO_STAGE=1
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP \\
    --num-layers 24 --hidden-size 2048 --ffn-hidden-size 5504 --num-attention-heads 16 \\
    --num-key-value-heads $NUM_KV_HEADS --seq-length 2048 --max-position-embeddings 2048 \\
    --micro-batch-size 4 --global-batch-size 32 --swiglu --normalization rmsnorm \\
    --use-rotary-position-embeddings --disable-bias-linear --untie-embeddings-and-output-weights \\
    --bf16 --deepspeed --deepspeed_config=ds.json --zero-stage=$ZERO_STAGE  # trailing comment
"""
    imp = import_any(script)
    assert imp.kind == "megatron-deepspeed"
    m, p = imp.to_specs()
    assert (m.num_query_groups, str(m.activation), str(m.normalization), str(m.position_embedding)) == \
        (4, "swiglu", "rmsnorm", "rotary")
    assert (p.world_size, p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (8, 2, 2, 2)
    assert int(p.zero_stage) == 1 and p.gradient_accumulation_steps == 4


# -- round trips ------------------------------------------------------------------------------------------------
def _megatron_plans(m):
    tp = 8 if m.num_query_groups % 8 == 0 else (4 if m.num_query_groups % 4 == 0 else 1)
    yield dict(tensor_parallel=tp, pipeline_parallel=2, sequence_parallel=tp > 1, precision="bf16",
               distributed_optimizer=True, recompute="selective", micro_batch_size=1, global_batch_size=64)
    yield dict(tensor_parallel=1, pipeline_parallel=4 if m.num_layers % 4 == 0 else 2,
               virtual_pipeline=2 if m.num_layers % 8 == 0 else 1,
               precision="fp16", recompute="full", micro_batch_size=2, global_batch_size=64)
    if m.attention == "flash":  # context parallelism runs in Transformer Engine's attention only
        yield dict(tensor_parallel=tp, pipeline_parallel=1, context_parallel=2, precision="fp32", recompute="full",
                   recompute_layers=1, micro_batch_size=1, global_batch_size=16)
        yield dict(tensor_parallel=1, pipeline_parallel=1, context_parallel=4, cp_comm_type="all_gather",
                   micro_batch_size=1, global_batch_size=8)
        if m.num_query_groups % 2 == 0:
            yield dict(tensor_parallel=1, pipeline_parallel=1, context_parallel=4, cp_comm_type="a2a+p2p",
                       hierarchical_context_parallel_sizes=(2, 2), micro_batch_size=1, global_batch_size=8)
        # FP8 (Transformer Engine): recipe, FP8 parameter all-gather, bf16 first/last layers
        yield dict(tensor_parallel=tp, pipeline_parallel=2, sequence_parallel=tp > 1, precision="fp8",
                   distributed_optimizer=True, fp8_param_gather=True, micro_batch_size=1, global_batch_size=64)
        yield dict(tensor_parallel=1, pipeline_parallel=1, precision="fp8", fp8_recipe="tensorwise",
                   fp8_bf16_first_layers=1, fp8_bf16_last_layers=2, micro_batch_size=1, global_batch_size=16)


@pytest.mark.parametrize("name", model_names())
def test_round_trip_megatron(name):
    m = model(name)
    c = cluster(2)
    for kw in _megatron_plans(m):
        p = ParallelPlan(world_size=16, engine="megatron", **kw)
        opts = DeepSpeedOptions(lr=3e-4, min_lr=3e-5, betas=(0.9, 0.98), clip=0.7, train_iters=5000,
                                warmup_iters=100)
        imp = import_any(megatron_command(m, c, p, options=opts))
        m2, p2 = imp.to_specs()
        assert same_model(m2, m), name
        assert same_plan(p2, p), (name, kw)
        o2 = imp.deepspeed_options()
        assert (o2.lr, o2.final_lr, o2.betas, o2.clip, o2.train_iters, o2.warmup_steps) == \
            (3e-4, 3e-5, (0.9, 0.98), 0.7, 5000, 100)
        # the argument list alone (no launcher) needs the cluster for the world size
        _, p3 = import_megatron_args(megatron_args(m, c, p)).to_specs(m, c)
        assert same_plan(p3, p)


DS_PLANS = [
    dict(zero_stage=0, precision="bf16", micro_batch_size=1, global_batch_size=16),
    dict(zero_stage=1, precision="fp16", micro_batch_size=2, global_batch_size=64, recompute="full"),
    dict(zero_stage=2, precision="fp32", offload_optimizer="cpu", micro_batch_size=1, global_batch_size=48),
    dict(zero_stage=3, precision="bf16", offload_optimizer="nvme", offload_params="cpu", micro_batch_size=4,
         global_batch_size=128, recompute="full", recompute_layers=3),
]


@pytest.mark.parametrize("name", ["gpt3-125m", "gpt3-13b", "llama3-8b", "llama2-70b", "mixtral-8x7b"])
@pytest.mark.parametrize("kw", DS_PLANS)
def test_round_trip_deepspeed(name, kw):
    m, c = model(name), cluster(2)
    p = ParallelPlan(world_size=16, **kw)
    cfg = build_ds_config(m, c, p)
    imp = import_ds_config(json.dumps(cfg))
    m2, p2 = imp.to_specs(m, c)
    assert m2 == m and same_plan(p2, p)
    o = imp.deepspeed_options()
    assert o.clipping_for(m) == DeepSpeedOptions().clipping_for(m)
    assert build_ds_config(m2, c, p2, options=o) == cfg  # export → import → export is stable


@pytest.mark.parametrize("tp,pp,zero,nodes", [(4, 2, 1, 2), (2, 1, 2, 1), (8, 1, 3, 4), (2, 4, 0, 2)])
def test_round_trip_hybrid(tp, pp, zero, nodes):
    m, c = model("llama2-13b"), cluster(nodes)
    p = ParallelPlan(world_size=c.world_size, engine="megatron-deepspeed", tensor_parallel=tp, pipeline_parallel=pp,
                     zero_stage=zero, micro_batch_size=2, global_batch_size=2 * 3 * c.world_size // (tp * pp),
                     recompute="full")
    imp = import_any(hybrid_command(m, c, p)).merge(import_ds_config(hybrid_ds_config(m, c, p)))
    m2, p2 = imp.to_specs()
    assert same_model(m2, m) and same_plan(p2, p)


def test_precision_enabled_read_as_deepspeed_reads_it():
    """DeepSpeed's pydantic config models take 1/"yes"/"true" as enabled and refuse other values."""
    assert import_ds_config({"fp16": {"enabled": "yes"}}).plan_fields["precision"] == "fp16"
    assert import_ds_config({"bf16": {"enabled": 1}, "fp16": {"enabled": "off"}}).plan_fields["precision"] == "bf16"
    assert import_ds_config({"bf16": {"enabled": "False"}}).plan_fields["precision"] == "fp32"
    with pytest.raises(ValueError, match=r"^fp16.enabled='maybe' must be true or false"):
        import_ds_config({"fp16": {"enabled": "maybe"}})
    with pytest.raises(ValueError, match=r"^bf16.enabled=2 must be true or false"):
        import_ds_config({"bf16": {"enabled": 2}})
