"""Long context: the same model priced over sequence lengths and context-parallel sizes, for the lesson and the
advisor's comparisons. Every number comes from :func:`workbench.estimate.estimate` (memory and time models); this
module only chooses the plans and reads the answers."""
from __future__ import annotations

from typing import Sequence

from workbench import timing as T
from workbench.defaults import GiB
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan


def sweep_plan(cluster: ClusterSpec, *, tensor_parallel: int = 1, context_parallel: int = 1,
               cp_comm_type: str = "p2p", recompute: str = "full") -> ParallelPlan:
    """A Megatron plan on the whole cluster: TP (with sequence parallel when > 1) × CP, the rest data parallel,
    distributed optimizer, micro batch 1, one micro-batch per data-parallel rank."""
    t, c = tensor_parallel, context_parallel
    return ParallelPlan(world_size=cluster.world_size, engine="megatron", tensor_parallel=t, context_parallel=c,
                        cp_comm_type=cp_comm_type, sequence_parallel=t > 1, distributed_optimizer=True,
                        recompute=recompute)


def sweep_row(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> dict:
    """One plan's long-context figures: tokens per GPU, activations and peak per GPU (GiB), whether it fits,
    step time, MFU, the context-parallel exchange per step (every byte's time, and what attention does not hide),
    tensor-parallel traffic."""
    from workbench.estimate import estimate

    est = estimate(model, cluster, plan, checks=False)
    t = est.time
    terms = T.step_time_terms(**t.inputs)
    stage_layers = float(terms["stage_layers"])
    transfer = float(terms["cp_layer_transfer_seconds"]) * stage_layers * plan.num_microbatches
    return {"seq": model.seq_length, "tp": plan.tensor_parallel, "cp": plan.context_parallel,
            "cp_comm_type": str(plan.cp_comm_type), "tokens_per_gpu": model.seq_length // plan.context_parallel,
            "activations_gib": est.memory.peak_stage.backward_activation_bytes / GiB,
            "peak_gib": est.memory.per_gpu_peak_bytes / GiB, "fits": bool(est.memory.fits_gpu),
            "step_seconds": t.step_seconds, "mfu": t.mfu, "cp_transfer_seconds": transfer,
            "cp_exposed_seconds": t.breakdown["cp_comm"], "tp_comm_seconds": t.breakdown["tp_comm"]}


def context_parallel_sweep(model: ModelSpec, cluster: ClusterSpec, *, seq_lengths: Sequence[int],
                           cp_sizes: Sequence[int], tensor_parallel: int = 1, cp_comm_type: str = "p2p",
                           recompute: str = "full") -> list:
    """:func:`sweep_row` for every sequence length × CP size (CP × TP must divide the cluster, 2·CP the sequence),
    plus, per sequence, the same GPUs as tensor parallel alone (TP = largest CP × TP, with sequence parallel) when
    the model's heads allow it — the comparison the advisor makes. ``ValueError`` from the specs for a bad input."""
    rows = []
    for s in seq_lengths:
        m = model.replace(seq_length=int(s))
        for c in cp_sizes:
            if cluster.world_size % (c * tensor_parallel) or (c > 1 and s % (2 * c)):
                continue
            rows.append(sweep_row(m, cluster, sweep_plan(cluster, tensor_parallel=tensor_parallel,
                                                         context_parallel=c, cp_comm_type=cp_comm_type,
                                                         recompute=recompute)))
        t_all = tensor_parallel * max(cp_sizes)
        if (max(cp_sizes) > 1 and cluster.world_size % t_all == 0 and m.num_query_groups % t_all == 0
                and t_all <= cluster.gpus_per_node):
            rows.append(sweep_row(m, cluster, sweep_plan(cluster, tensor_parallel=t_all, recompute=recompute)))
    return rows
