"""DeepSpeed export: every config is accepted by DeepSpeed's own DeepSpeedConfig at the plan's world size."""
import pytest

pytest.importorskip("deepspeed")

from workbench.catalog import gpu, model
from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config, validate_ds_config
from workbench.configs.hybrid import hybrid_ds_config, validate_hybrid
from workbench.specs import ClusterSpec, ParallelPlan


def cluster(world):
    per_node = min(world, 8)
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=per_node, num_nodes=world // per_node)


CASES = [
    # (world, zero, offload_optimizer, offload_params, precision, recompute, mbs, accumulation)
    (1, 0, "none", "none", "bf16", "none", 1, 1),
    (1, 1, "cpu", "none", "fp32", "full", 2, 4),
    (2, 2, "cpu", "none", "fp16", "none", 1, 8),
    (4, 3, "cpu", "cpu", "bf16", "full", 2, 2),
    (8, 3, "nvme", "nvme", "fp16", "full", 1, 16),
    (8, 2, "none", "none", "bf16", "selective", 4, 1),
    (16, 1, "none", "none", "fp32", "none", 1, 2),
    (32, 3, "none", "none", "bf16", "none", 1, 1),
    (64, 2, "nvme", "none", "bf16", "full", 2, 3),
]


@pytest.mark.parametrize("world,zero,off_opt,off_par,prec,rc,mbs,acc", CASES)
def test_export_accepted_by_deepspeed(world, zero, off_opt, off_par, prec, rc, mbs, acc):
    m = model("llama3-8b")
    plan = ParallelPlan(world_size=world, zero_stage=zero, offload_optimizer=off_opt, offload_params=off_par,
                        precision=prec, recompute=rc, micro_batch_size=mbs, global_batch_size=mbs * acc * world)
    cfg = build_ds_config(m, cluster(world), plan)
    validate_ds_config(cfg, world)  # raises on any DeepSpeed or lint error
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * world
    assert cfg["zero_optimization"]["stage"] == zero
    assert ("fp16" in cfg) == (prec == "fp16") and ("bf16" in cfg) == (prec == "bf16")
    assert ("activation_checkpointing" in cfg) == (rc != "none")
    if off_opt != "none":
        assert cfg["zero_optimization"]["offload_optimizer"]["device"] == off_opt
    if "nvme" in (off_opt, off_par):
        assert any(cfg["zero_optimization"].get(k, {}).get("nvme_path") for k in ("offload_optimizer", "offload_param"))
    if zero < 3:
        assert not any(k.startswith("stage3_") for k in cfg["zero_optimization"])


def test_wrong_world_size_is_rejected_with_deepspeeds_message():
    plan = ParallelPlan(world_size=8, zero_stage=2, micro_batch_size=2, global_batch_size=64)
    cfg = build_ds_config(model("llama3-8b"), cluster(8), plan)
    validate_ds_config(cfg, 8)
    with pytest.raises(ValueError, match=r"64 != 2 \* 4 \* 4"):
        validate_ds_config(cfg, 4)


def test_deepspeed_rejects_bad_nested_value():
    plan = ParallelPlan(world_size=2, zero_stage=2, micro_batch_size=1, global_batch_size=2)
    cfg = build_ds_config(model("gpt3-125m"), cluster(2), plan)
    cfg["zero_optimization"]["reduce_bucket_size"] = -5
    with pytest.raises(ValueError, match="reduce_bucket_size"):
        validate_ds_config(cfg, 2)


def test_lint_errors_fail_validation_even_when_deepspeed_accepts():
    plan = ParallelPlan(world_size=2, zero_stage=2, micro_batch_size=1, global_batch_size=2)
    cfg = build_ds_config(model("gpt3-125m"), cluster(2), plan)
    cfg["zero_optimisation"] = cfg.pop("zero_optimization")  # DeepSpeed silently runs stage 0
    with pytest.raises(ValueError, match="zero_optimisation.*did you mean 'zero_optimization'"):
        validate_ds_config(cfg, 2)


def test_unresolved_auto_is_refused():
    cfg = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 1}
    with pytest.raises(ValueError, match="auto"):
        validate_ds_config(cfg, 1)


def test_convergence_settings_follow_the_guide():
    plan = ParallelPlan(world_size=8, precision="fp16", zero_stage=1)
    small = build_ds_config(model("llama3-8b"), cluster(8), plan)
    big = build_ds_config(model("guide-13b"), cluster(8), plan)  # 12.85e9 parameters: "13B class"
    assert small["gradient_clipping"] == 1.0
    assert big["gradient_clipping"] == 0.5
    assert small["optimizer"]["params"]["betas"] == [0.9, 0.95]
    assert small["fp16"]["loss_scale"] == 0 and small["fp16"]["loss_scale_window"] == 1000
    custom = build_ds_config(model("guide-13b"), cluster(8), plan, options=DeepSpeedOptions(clip=0.8, lr=1e-4))
    assert custom["gradient_clipping"] == 0.8 and custom["optimizer"]["params"]["lr"] == 1e-4


def test_megatron_engine_has_no_ds_config():
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=8)
    with pytest.raises(ValueError, match="engine='megatron'"):
        build_ds_config(model("llama3-8b"), cluster(8), plan)


@pytest.mark.parametrize("world,tp,pp,zero", [(8, 4, 2, 1), (16, 4, 2, 1), (16, 2, 1, 2), (64, 8, 4, 1),
                                              (32, 4, 1, 3)])
def test_hybrid_batch_math_uses_data_parallel(world, tp, pp, zero):
    plan = ParallelPlan(world_size=world, engine="megatron-deepspeed", tensor_parallel=tp, pipeline_parallel=pp,
                        zero_stage=zero, micro_batch_size=8, global_batch_size=8 * 4 * (world // (tp * pp)))
    m = model("guide-13b")
    cfg = hybrid_ds_config(m, cluster(world), plan)
    assert cfg["gradient_accumulation_steps"] == 4
    validate_ds_config(cfg, world, model_parallel_size=tp * pp)
    ok, message = validate_hybrid(m, cluster(world), plan)
    assert ok, message


def test_options_validate_their_fields():
    with pytest.raises(ValueError, match="betas"):
        DeepSpeedOptions(betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="warmup_iters"):
        DeepSpeedOptions(train_iters=10, warmup_iters=20)


def test_hf_trainer_export_resolves_as_transformers_does():
    """The "auto" ds_config and its TrainingArguments, resolved by transformers' own HfTrainerDeepSpeedConfig
    (with stand-in arguments and model, no distributed start), equal the workbench's resolution and the plain
    export's values; a non-auto value that disagrees with the arguments is refused as the Trainer refuses it."""
    from types import SimpleNamespace

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

    from workbench.configs.deepspeed import (HF_TRAINER_AUTO_PATHS, _get_path, hf_trainer_ds_config,
                                             hf_training_arguments, resolve_hf_auto)

    m = model("llama2-7b")
    c, p = cluster(8), ParallelPlan(world_size=8, zero_stage=3, micro_batch_size=2, global_batch_size=64,
                                    precision="bf16", recompute="full")
    o = DeepSpeedOptions(lr=2e-5, train_iters=500, warmup_iters=20)
    cfg, targs = hf_trainer_ds_config(m, c, p, options=o), hf_training_arguments(m, c, p, options=o)
    assert targs["gradient_accumulation_steps"] == 4 and targs["activation_checkpointing"]
    cfg["zero_optimization"]["reduce_bucket_size"] = "auto"  # as many user configs write it
    mine = resolve_hf_auto(cfg, targs, world_size=8, hidden_size=m.hidden_size)
    hf = HfTrainerDeepSpeedConfig(cfg)
    try:
        args = SimpleNamespace(world_size=8, save_on_each_node=False, fp16_full_eval=False, bf16_full_eval=False,
                               get_warmup_steps=lambda n: targs["warmup_steps"], **targs)
        hf.trainer_config_process(args)
        hf.trainer_config_finalize(args, SimpleNamespace(config=SimpleNamespace(hidden_size=m.hidden_size)), 500)
        assert hf.config == mine
    finally:
        del hf
        unset_hf_deepspeed_config()
    plain = build_ds_config(m, c, p, options=o)
    assert all(_get_path(mine, k) == _get_path(plain, k) for k in HF_TRAINER_AUTO_PATHS)
    assert mine["zero_optimization"]["reduce_bucket_size"] == m.hidden_size ** 2
    validate_ds_config(mine, 8)
    cfg["gradient_clipping"] = 0.3
    with pytest.raises(ValueError, match="gradient_clipping=0.3 but TrainingArguments give 1.0"):
        resolve_hf_auto(cfg, targs, world_size=8, hidden_size=m.hidden_size)
