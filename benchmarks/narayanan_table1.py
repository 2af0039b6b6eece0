"""Narayanan et al. 2021 (arXiv 2104.04473) Table 1 rows, as specs. Shared by the accuracy benchmark and the
calibration script. A100 80GB (DGX A100: 8 GPUs per node), seq 2048, vocab 51200, fp16, full recompute,
Megatron engine; the reported figure is TFLOP/s per GPU including the recompute forward."""
from workbench.catalog import gpu
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

# name, heads, hidden, layers, tp, pp, dp, global batch, micro batch, reported TFLOP/s per GPU
ROWS = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 137.0),
    ("3.6B", 32, 3072, 30, 2, 1, 32, 512, 16, 138.0),
    ("7.5B", 32, 4096, 36, 4, 1, 32, 512, 16, 142.0),
    ("18.4B", 48, 6144, 40, 8, 1, 32, 1024, 8, 135.0),
    ("39.1B", 64, 8192, 48, 8, 2, 32, 1536, 4, 138.0),
]


def specs(row):
    name, heads, hidden, layers, tp, pp, dp, gbs, mbs, _ = row
    model = ModelSpec(name=f"narayanan-{name}", num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      vocab_size=51200, seq_length=2048, attention="fused-softmax")  # Megatron-LM 2021
    world = tp * pp * dp
    cluster = ClusterSpec(gpu=gpu("A100-80GB"), gpus_per_node=8, num_nodes=world // 8)
    plan = ParallelPlan(world_size=world, engine="megatron", tensor_parallel=tp, pipeline_parallel=pp,
                        micro_batch_size=mbs, global_batch_size=gbs, precision="fp16", recompute="full")
    return model, cluster, plan
