"""The hybrid of the DeepSpeed-vs-Megatron practitioner's guide §4: Megatron tensor/pipeline parallelism with
DeepSpeed ZeRO over data parallel.

It runs Microsoft's Megatron-DeepSpeed ``pretrain_gpt.py`` with ``--deepspeed --deepspeed_config ds_config.json``;
DeepSpeed receives Megatron's ``mpu`` and so sees the data-parallel group as its world (batch arithmetic with
``plan.data_parallel``). Flags use Megatron-DeepSpeed's names (its ``megatron/arguments.py``), which differ from
Megatron-LM's in a few places (``--num-key-value-heads``, ``--use-rotary-position-embeddings``, ``--no-pipeline-parallel``,
``--zero-stage``, ``--deepspeed-activation-checkpointing``).
"""
from __future__ import annotations

import argparse
from typing import Optional

from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config, deepspeed_version, validate_ds_config
from workbench.configs.megatron import (format_flags, model_flags, placeholder_lines, plan_summary, rendezvous_lines,
                                        torchrun_prefix, training_flags)
from workbench.configs.launch import allocator_lines
from workbench.defaults import megatron_recompute_flags
from workbench.specs import ClusterSpec, Engine, ModelSpec, ParallelPlan, Recompute, validate

HYBRID_PLACEHOLDER = ("MEGATRON_DEEPSPEED", "/path/to/Megatron-DeepSpeed",
                      "a Megatron-DeepSpeed checkout (holds pretrain_gpt.py)")


def _check(plan: ParallelPlan) -> None:
    if plan.engine is not Engine.MEGATRON_DEEPSPEED:
        raise ValueError(f"engine='{plan.engine}' is not the hybrid; use engine='megatron-deepspeed'")
    if plan.context_parallel > 1:
        raise ValueError(f"context_parallel={plan.context_parallel} is not supported by Megatron-DeepSpeed "
                         f"(it has DeepSpeed-Ulysses sequence parallelism instead); use engine='megatron'")


def hybrid_ds_config(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                     options: Optional[DeepSpeedOptions] = None) -> dict:
    """The ``ds_config.json`` of the hybrid: ZeRO (the guide uses stage 1) over the data-parallel group, bucket
    sizes, micro batch and accumulation (``train_batch_size = micro × accumulation × data_parallel``)."""
    validate(model, cluster, plan)
    _check(plan)
    return build_ds_config(model, cluster, plan, options=options)


def hybrid_args(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                options: Optional[DeepSpeedOptions] = None, ds_config_path: str = "ds_config.json") -> list[str]:
    """Megatron-DeepSpeed ``pretrain_gpt.py`` arguments for the hybrid plan."""
    validate(model, cluster, plan)
    _check(plan)
    o = options or DeepSpeedOptions()
    a = model_flags(model, dialect="megatron-deepspeed")
    if model.is_moe:
        a += ["--expert-interval", "1"]  # Megatron-DeepSpeed puts experts in every 2nd layer by default
        if plan.deepspeed_moe:  # its DeepSpeed-MoE layers' ep_size, capacity_factor and min_capacity
            from workbench import dsmoe

            a += ["--moe-expert-parallel-size", str(plan.expert_parallel),
                  "--moe-train-capacity-factor", f"{dsmoe.capacity_factor(plan):g}",
                  "--moe-eval-capacity-factor", f"{dsmoe.capacity_factor(plan):g}",
                  "--moe-min-capacity", str(dsmoe.MIN_CAPACITY),
                  "--create-moe-param-group"]  # expert param groups ZeRO partitions over expert data parallel
    a += ["--tensor-model-parallel-size", str(plan.tensor_parallel),
          "--pipeline-model-parallel-size", str(plan.pipeline_parallel)]
    if plan.pipeline_parallel == 1:
        a += ["--no-pipeline-parallel"]  # else DeepSpeed's pipeline engine wraps the model
    if plan.virtual_pipeline > 1:
        a += ["--num-layers-per-virtual-pipeline-stage",
              str(model.num_layers // (plan.pipeline_parallel * plan.virtual_pipeline))]
    if plan.sequence_parallel:
        a += ["--sequence-parallel"]
    if plan.recompute is Recompute.FULL:
        a += ["--deepspeed-activation-checkpointing"]
    a += megatron_recompute_flags(plan)
    a += ["--micro-batch-size", str(plan.micro_batch_size), "--global-batch-size", str(plan.global_batch_size)]
    a += training_flags(model, plan, o)
    a += ["--data-path", "$DATA_PATH", "--split", "949,50,1", "--tokenizer-type", "HFTokenizer",
          "--tokenizer-model", "$TOKENIZER_MODEL", "--save", "$CHECKPOINT_DIR", "--load", "$CHECKPOINT_DIR",
          "--save-interval", "1000", "--log-interval", "10", "--eval-interval", "1000", "--eval-iters", "10"]
    a += ["--deepspeed", "--deepspeed_config", ds_config_path, "--zero-stage", str(int(plan.zero_stage))]
    return a


def hybrid_command(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                   options: Optional[DeepSpeedOptions] = None, ds_config_path: str = "ds_config.json") -> str:
    """A bash script running Megatron-DeepSpeed's ``pretrain_gpt.py`` with ``torchrun`` on every node; the
    DeepSpeed config it names is :func:`hybrid_ds_config` (``workbench export hybrid --out DIR`` writes both)."""
    args = hybrid_args(model, cluster, plan, options=options, ds_config_path=ds_config_path)
    name, example, what = HYBRID_PLACEHOLDER
    lines = [
        "#!/usr/bin/env bash",
        f"# Megatron-DeepSpeed hybrid: {plan_summary(model, cluster, plan)}, ZeRO-{int(plan.zero_stage)} over DP",
        f"# Needs {ds_config_path} next to this script. Run it on every node with NODE_RANK set; fill in FILL IN.",
        "set -euo pipefail",
        f'{name}="${{{name}:-{example}}}"  # FILL IN: {what}',
        *placeholder_lines(["DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"]),
        *rendezvous_lines(cluster),
        "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        *allocator_lines(plan),
        "# export NCCL_DEBUG=INFO  # uncomment to see NCCL's topology and errors "
        "(the DeepSpeed-vs-Megatron practitioner's guide §5.1)",
        "",
        torchrun_prefix(cluster) + " \\",
        f'    "${name}/pretrain_gpt.py" \\',
    ]
    flag_lines = format_flags(args)
    lines += [line + " \\" for line in flag_lines[:-1]] + [flag_lines[-1]]
    return "\n".join(lines) + "\n"


def validate_hybrid(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                    options: Optional[DeepSpeedOptions] = None) -> tuple[bool, str]:
    """Check the hybrid export: the ds_config with DeepSpeed's ``DeepSpeedConfig`` for the data-parallel group, and
    the ``--deepspeed``/``--deepspeed_config`` flags with DeepSpeed's own ``add_config_arguments`` parser.
    Megatron-DeepSpeed itself is not a package, so its model flags are not parsed."""
    import deepspeed

    cfg = hybrid_ds_config(model, cluster, plan, options=options)
    try:
        validate_ds_config(cfg, plan.world_size, model_parallel_size=plan.model_parallel_size)
    except ValueError as exc:
        return False, str(exc)
    parser = deepspeed.add_config_arguments(argparse.ArgumentParser(allow_abbrev=False))
    parsed, _ = parser.parse_known_args(hybrid_args(model, cluster, plan, options=options))
    if not parsed.deepspeed or parsed.deepspeed_config != "ds_config.json":
        return False, "the command does not pass --deepspeed --deepspeed_config ds_config.json"
    return True, (f"ds_config accepted by DeepSpeed {deepspeed_version()} for data-parallel size "
                  f"{plan.data_parallel}; --deepspeed flags parsed by deepspeed.add_config_arguments "
                  f"(Megatron-DeepSpeed's own flags not parsed: it is not an installable package)")
