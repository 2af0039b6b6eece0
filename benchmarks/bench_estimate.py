"""One estimate (memory + time + layout) for the DeepSpeed-vs-Megatron practitioner's guide's 13B example: target ≤ 1 ms. Prints the figures."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench import ClusterSpec, ParallelPlan, catalog  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.memory import estimate_memory  # noqa: E402

model = catalog.model("guide-13b")
cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8)
plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=4, pipeline_parallel=2, global_batch_size=64)


def bench(fn, n=2000):
    for _ in range(50):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(0.95 * len(samples))] * 1e3


mem_med, mem_p95 = bench(lambda: estimate_memory(model, cluster, plan))
full_med, full_p95 = bench(lambda: estimate(model, cluster, plan))
print(f"memory estimate: median {mem_med:.3f} ms, p95 {mem_p95:.3f} ms")
print(f"full estimate (memory+time+layout): median {full_med:.3f} ms, p95 {full_p95:.3f} ms  (target <= 1 ms)")

# Cost must not grow with the cluster: the layout is arithmetic on the sizes, never a list of ranks.
for gpus in (131_072, 1_048_576, 16_777_216):
    big = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=gpus // 8)
    big_plan = ParallelPlan(world_size=gpus, engine="megatron", tensor_parallel=8, pipeline_parallel=4,
                            global_batch_size=gpus // 32)
    med, p95 = bench(lambda: estimate(model, big, big_plan).to_dict(), n=20)
    print(f"estimate + to_dict on {gpus:,} GPUs: median {med:.1f} ms, p95 {p95:.1f} ms  (target well under 1 s)")
