"""Shared pieces of the run tests: tiny specs, a CPU cluster, and the DeepSpeed config for them."""
from __future__ import annotations

import os

from workbench.catalog import gpu
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/work/.cache/torch_extensions")

TINY = ModelSpec(name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=512, seq_length=32)


def cpu_cluster(n: int) -> ClusterSpec:
    return ClusterSpec(gpu=gpu("cpu"), gpus_per_node=n, host_memory_gib_per_node=24)


def plan(world: int, **kw) -> ParallelPlan:
    kw.setdefault("precision", "fp32")
    return ParallelPlan(world_size=world, **kw)


def ds_config(p: ParallelPlan, **zero) -> dict:
    """The DeepSpeed config for a tiny test plan."""
    try:
        from workbench.configs.deepspeed import build_ds_config
    except ModuleNotFoundError:
        build_ds_config = None
    if build_ds_config is not None:
        return build_ds_config(TINY, cpu_cluster(p.world_size), p, {"torch_adam": True})
    cfg = {
        "train_micro_batch_size_per_gpu": p.micro_batch_size,
        "gradient_accumulation_steps": p.gradient_accumulation_steps,
        "train_batch_size": p.global_batch_size,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": int(p.zero_stage), **zero},
        "bf16": {"enabled": str(p.precision) == "bf16"},
    }
    if str(p.offload_optimizer) != "none":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": str(p.offload_optimizer)}
        cfg["optimizer"]["params"].pop("torch_adam")
    return cfg
