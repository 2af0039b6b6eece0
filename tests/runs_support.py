"""Shared pieces of the run tests: tiny specs, a CPU cluster, and the DeepSpeed config for them."""
from __future__ import annotations

import os

from workbench.catalog import gpu
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/work/.cache/torch_extensions")

TINY = ModelSpec(name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=512, seq_length=32,
                 hidden_dropout=0.0, attention_dropout=0.0)  # no dropout: layouts draw different masks


def cpu_cluster(n: int) -> ClusterSpec:
    return ClusterSpec(gpu=gpu("cpu"), gpus_per_node=n, host_memory_gib_per_node=24)


def plan(world: int, **kw) -> ParallelPlan:
    kw.setdefault("precision", "fp32")
    return ParallelPlan(world_size=world, **kw)


def ds_config(p: ParallelPlan) -> dict:
    """The DeepSpeed config the launcher builds for a tiny test plan (torch's Adam unless offloading)."""
    from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config

    cfg = build_ds_config(TINY, cpu_cluster(p.world_size), p,
                          options=DeepSpeedOptions(lr=1e-3, train_iters=10, warmup_iters=1, clip=1.0))
    if str(p.offload_optimizer) == "none":
        cfg["optimizer"]["params"]["torch_adam"] = True
    return cfg
