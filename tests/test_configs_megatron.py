"""Megatron-LM and Megatron-DeepSpeed command export, and launch scripts."""
import argparse
import shlex

import pytest

from workbench.catalog import gpu, model, model_names
from workbench.configs.hybrid import hybrid_args, hybrid_command
from workbench.configs.launch import deepspeed_launch_script, hostfile, slurm_script, torchrun_script
from workbench.configs.megatron import megatron_args, megatron_command, megatron_parser, validate_megatron_args
from workbench.specs import ClusterSpec, ParallelPlan

CLUSTER = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=2)


def plan_for(m, **kw):
    tp = 8 if m.num_query_groups % 8 == 0 and m.num_attention_heads % 8 == 0 else 1
    base = dict(world_size=16, engine="megatron", tensor_parallel=tp, pipeline_parallel=2,
                sequence_parallel=tp > 1, micro_batch_size=1, global_batch_size=64)
    base.update(kw)
    return ParallelPlan(**base)


def flag(args, name):
    return args[args.index(name) + 1]


def test_guide_13b_tp4_pp2_flags():
    m = model("guide-13b")
    p = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=4, pipeline_parallel=2, precision="fp16",
                     recompute="full", micro_batch_size=1, global_batch_size=128)
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8)
    a = megatron_args(m, c, p)
    assert flag(a, "--tensor-model-parallel-size") == "4" and flag(a, "--pipeline-model-parallel-size") == "2"
    assert flag(a, "--num-layers") == "40" and flag(a, "--hidden-size") == "5120"
    assert flag(a, "--global-batch-size") == "128" and "--fp16" in a
    assert flag(a, "--loss-scale-window") == "1000"
    assert flag(a, "--adam-beta1") == "0.9" and flag(a, "--adam-beta2") == "0.95"
    assert flag(a, "--clip-grad") == "0.5"  # 13B class (guide §5.3)
    assert flag(a, "--recompute-granularity") == "full" and flag(a, "--recompute-method") == "uniform"
    assert "--batch-size" not in a and "--swiglu" not in a


def test_llama_flags():
    m = model("llama3-70b")
    a = megatron_args(m, CLUSTER, plan_for(m, virtual_pipeline=2, distributed_optimizer=True))
    assert "--group-query-attention" in a and flag(a, "--num-query-groups") == "8"
    assert {"--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
            "--use-distributed-optimizer", "--sequence-parallel"} <= set(a)
    assert flag(a, "--normalization") == "RMSNorm" and flag(a, "--position-embedding-type") == "rope"
    assert flag(a, "--num-layers-per-virtual-pipeline-stage") == "20"  # 80 / (2 * 2)


def test_command_is_a_runnable_script():
    m = model("mixtral-8x7b")
    text = megatron_command(m, CLUSTER, plan_for(m))
    assert text.startswith("#!/usr/bin/env bash")
    assert "torchrun --nproc_per_node 8 --nnodes 2" in text
    assert "FILL IN" in text and '"$DATA_PATH"' in text
    assert "# export NCCL_DEBUG=INFO" in text
    # every continuation line ends with a backslash; shlex can split the joined command
    body = text.split("torchrun", 1)[1].replace("\\\n", " ")
    tokens = shlex.split(body)
    assert "--num-experts" in tokens and tokens[tokens.index("--moe-router-topk") + 1] == "2"


def test_validation_with_megatrons_parser_or_reason():
    parser, reason = megatron_parser()
    m = model("llama3-8b")
    ok, message = validate_megatron_args(megatron_args(m, CLUSTER, plan_for(m)))
    if parser is None:
        assert not ok and "flags not validated" in message
        pytest.skip(reason)
    assert ok, message
    bad_ok, bad_message = validate_megatron_args(["--num-layers", "2", "--no-such-flag"])
    assert not bad_ok and "no-such-flag" in bad_message


@pytest.mark.parametrize("name", model_names())
def test_every_catalog_model_parses_with_megatron(name):
    parser, reason = megatron_parser()
    if parser is None:
        pytest.skip(reason)
    m = model(name)
    ok, message = validate_megatron_args(megatron_args(m, CLUSTER, plan_for(m, recompute="full",
                                                                           recompute_layers=2)))
    assert ok, message


def test_engine_mismatch():
    with pytest.raises(ValueError, match="engine='deepspeed'"):
        megatron_args(model("gpt3-125m"), CLUSTER, ParallelPlan(world_size=16))


def test_hybrid_command_matches_guide_section_4():
    m = model("guide-13b")
    p = ParallelPlan(world_size=16, engine="megatron-deepspeed", tensor_parallel=4, pipeline_parallel=2,
                     zero_stage=1, micro_batch_size=8, global_batch_size=64)
    a = hybrid_args(m, CLUSTER, p)
    assert "--deepspeed" in a and flag(a, "--deepspeed_config") == "ds_config.json"
    assert flag(a, "--zero-stage") == "1" and flag(a, "--tensor-model-parallel-size") == "4"
    import deepspeed  # the launcher-side flags parse with DeepSpeed's own parser

    parsed, _ = deepspeed.add_config_arguments(argparse.ArgumentParser()).parse_known_args(a)
    assert parsed.deepspeed and parsed.deepspeed_config == "ds_config.json"
    text = hybrid_command(m, CLUSTER, p)
    assert "Megatron-DeepSpeed" in text and "$MEGATRON_DEEPSPEED/pretrain_gpt.py" in text


def test_hybrid_dialect():
    m = model("llama2-70b")
    p = ParallelPlan(world_size=16, engine="megatron-deepspeed", tensor_parallel=8, pipeline_parallel=1,
                     zero_stage=1, recompute="full")
    a = hybrid_args(m, CLUSTER, p)
    assert flag(a, "--num-key-value-heads") == "8" and "--use-rotary-position-embeddings" in a
    assert flag(a, "--normalization") == "rmsnorm" and "--no-pipeline-parallel" in a
    assert "--deepspeed-activation-checkpointing" in a and "--group-query-attention" not in a


def test_hostfile_parses_with_deepspeeds_reader():
    pytest.importorskip("deepspeed")
    from deepspeed.launcher.runner import _parse_hostfile

    text = hostfile(CLUSTER, ["gpu-a", "gpu-b"])
    assert text == "gpu-a slots=8\ngpu-b slots=8\n"
    assert dict(_parse_hostfile(text.splitlines())) == {"gpu-a": 8, "gpu-b": 8}
    assert dict(_parse_hostfile(hostfile(CLUSTER).splitlines())) == {"node0": 8, "node1": 8}
    with pytest.raises(ValueError, match="num_nodes=2"):
        hostfile(CLUSTER, ["only-one"])


def test_launch_scripts():
    pytest.importorskip("deepspeed")
    from deepspeed.launcher.runner import parse_args

    cmd = ["train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"]
    ds = deepspeed_launch_script(CLUSTER, cmd)
    line = ds.split("\ndeepspeed ", 1)[1].replace("\\\n", " ")
    parsed = parse_args(shlex.split(line))
    assert parsed.hostfile == "hostfile" and parsed.num_nodes == 2 and parsed.num_gpus == 8
    assert parsed.user_script == "train.py" and parsed.user_args[-1] == "ds_config.json"

    tr = torchrun_script(CLUSTER, cmd)
    assert '--nnodes 2 --nproc_per_node 8 --node_rank "$NODE_RANK"' in tr and "--master_addr" in tr
    assert "--rdzv_backend c10d" in torchrun_script(CLUSTER, cmd, rdzv=True)

    sl = slurm_script(CLUSTER, cmd, partition="gpu")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu"):
        assert line in sl.splitlines()
    assert "srun torchrun --nnodes 2 --nproc_per_node 8" in sl
    assert "# export NCCL_DEBUG=INFO" in sl
