"""Framework defaults and units, in one place: every module that needs one of these imports it from here.

Each value names the framework setting it mirrors and where that default is defined.
"""
from __future__ import annotations

from workbench.specs import Engine, ParallelPlan, Recompute, default_overlap_comm

GiB = 2**30
"""Bytes in a gibibyte (what ``nvidia-smi`` and ``torch.cuda.memory_*`` report as "GB")."""
GB = 10**9
"""Bytes in a gigabyte (link bandwidths are quoted in GB/s)."""

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ZeRO ``reduce_bucket_size`` default, elements (deepspeed/runtime/zero/config.py: 5e8)."""
DEEPSPEED_PREFETCH_BUCKET_ELEMENTS = 50_000_000
"""DeepSpeed ZeRO-3 ``stage3_prefetch_bucket_size`` default, elements (deepspeed/runtime/zero/config.py: 5e7)."""
DEEPSPEED_NVME_PARAMS_IN_CPU = int(1e9)
"""DeepSpeed ZeRO-3 ``offload_param.max_in_cpu`` default, elements (deepspeed/runtime/zero/offload_config.py: 1e9):
with the parameters offloaded to NVMe, ZeRO-3 moves up to this many of a rank's 16-bit partition elements into a
page-locked host buffer for good (stage3.py ``_create_param_groups_fp16_flat_cpu_memory`` and
``_move_to_flat_buffer``, "Swapping in ... permanently to CPU"); only what lies beyond stays on the drive."""
DEEPSPEED_NVME_PARAM_BUFFER_ELEMENTS = 100_000_000
"""DeepSpeed ZeRO-3 ``offload_param.buffer_size`` default, elements (deepspeed/runtime/zero/offload_config.py: 1e8):
with the parameters on NVMe, each page-locked swap buffer, which must hold the largest parameter partition."""
DEEPSPEED_PERSISTENCE_THRESHOLD = 100_000
"""DeepSpeed ZeRO-3 ``stage3_param_persistence_threshold`` default, elements (deepspeed/runtime/zero/config.py: 1e5):
parameters of at most this many elements are never partitioned."""
DEEPSPEED_SUB_GROUP_ELEMENTS = 1_000_000_000
"""DeepSpeed ZeRO-3 ``sub_group_size`` default, elements (deepspeed/runtime/zero/config.py: 1e9): the optimizer steps
the partition one sub-group at a time; ``_create_fp16_sub_groups`` closes a sub-group once it reaches this size."""
DEEPSPEED_ZERO_SIZES = {"reduce_bucket_size": DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
                        "prefetch_bucket_size": DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
                        "param_persistence_threshold": DEEPSPEED_PERSISTENCE_THRESHOLD,
                        "sub_group_size": DEEPSPEED_SUB_GROUP_ELEMENTS}
"""DeepSpeed's default of each ZeRO size a plan may set (:data:`workbench.specs.ZERO_SIZE_STAGES`), by plan field."""
DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ZeRO-1/2 ``allgather_bucket_size`` default, elements (deepspeed/runtime/zero/config.py: 5e8)."""
DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS = 250_000_000
"""ZeRO-3 with optimizer offload takes an offloaded gradient's norm in pieces of this many elements, each through its
own fp64 copy (deepspeed/runtime/zero/stage3.py ``_constant_buffered_norm2``, ``buffer_size`` default)."""
MEGATRON_BUCKET_ELEMENTS = 40_000_000
"""megatron-core DDP ``bucket_size`` default max(40,000,000, 1,000,000·dp) elements
(megatron/core/distributed/distributed_data_parallel_config.py); the time model uses the 40 M floor."""


def grad_bucket_elements(engine: Engine) -> int:
    """Elements per gradient-reduction bucket of an engine's data-parallel reduction: Megatron's DDP bucket, or
    DeepSpeed's ``reduce_bucket_size`` (DeepSpeed and the Megatron-DeepSpeed hybrid)."""
    return MEGATRON_BUCKET_ELEMENTS if Engine(engine) is Engine.MEGATRON else DEEPSPEED_REDUCE_BUCKET_ELEMENTS


# The overlap default per engine lives with the plan that it completes: :func:`workbench.specs.default_overlap_comm`
# (DeepSpeed engines on, as the exported ds_config writes ``overlap_comm: true``; Megatron off, as Megatron-LM's
# ``--overlap-grad-reduce`` and megatron-core's ``DistributedDataParallelConfig.overlap_grad_reduce`` default), and
# :attr:`workbench.specs.ParallelPlan.overlaps_comm` is the one answer for a plan that the time and memory models,
# the config exports and the advisor read.
__all__ = ["GiB", "GB", "DEEPSPEED_REDUCE_BUCKET_ELEMENTS", "DEEPSPEED_PREFETCH_BUCKET_ELEMENTS",
           "DEEPSPEED_NVME_PARAMS_IN_CPU", "DEEPSPEED_PERSISTENCE_THRESHOLD", "DEEPSPEED_ZERO_SIZES",
           "DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS",
           "DEEPSPEED_SUB_GROUP_ELEMENTS", "DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS",
           "MEGATRON_BUCKET_ELEMENTS", "grad_bucket_elements", "default_overlap_comm", "megatron_recompute",
           "megatron_recompute_flags"]


def megatron_recompute(plan: ParallelPlan) -> dict:
    """Megatron's activation-recomputation settings for a plan, as megatron-core ``TransformerConfig`` fields
    (``recompute_granularity``, ``recompute_method``, ``recompute_num_layers``; empty for no recompute).
    Selective recomputes the attention core; full with ``recompute_layers=None`` is ``uniform``/1 (every layer's
    input is kept and each layer recomputed), full with N layers is ``block``/N (the first N layers of each
    pipeline stage); an MoE plan's ``moe_recompute`` adds ``recompute_modules`` (``core_attn`` and it). Megatron-LM's
    command-line flags are the same names with dashes
    (:func:`megatron_recompute_flags`)."""
    if plan.recompute is Recompute.SELECTIVE:
        if str(plan.moe_recompute) != "none":  # the MoE module beside the attention core (recompute_modules)
            return {"recompute_granularity": "selective", "recompute_modules": ["core_attn", str(plan.moe_recompute)]}
        return {"recompute_granularity": "selective"}
    if plan.recompute is Recompute.FULL:
        if plan.recompute_layers is None:
            return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
        return {"recompute_granularity": "full", "recompute_method": "block",
                "recompute_num_layers": int(plan.recompute_layers)}
    return {}


def megatron_recompute_flags(plan: ParallelPlan) -> list[str]:
    """:func:`megatron_recompute` as ``pretrain_gpt.py`` arguments (``--recompute-granularity full`` …)."""
    out: list[str] = []
    for key, value in megatron_recompute(plan).items():
        out += ["--" + key.replace("_", "-"), *(map(str, value) if isinstance(value, list) else [str(value)])]
    return out
