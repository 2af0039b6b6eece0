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


def sequence_split_plans(cluster: ClusterSpec, size: int, *, global_batch_size: int,
                         recompute: str = "full") -> dict:
    """The plans that split one long sequence over ``size`` ranks of ``cluster``, by layout name: ``ulysses``
    (DeepSpeed-Ulysses N = ``size`` under ZeRO-3), and Megatron context parallelism of ``size`` with each
    ``--cp-comm-type`` (``p2p`` ring, ``all_gather``, ``a2a``; ``a2a+p2p`` with the largest inner all-to-all group
    below ``size`` that divides it — hierarchical sizes (a, size/a)). Every plan keeps ``global_batch_size``,
    ``recompute`` and TP = PP = 1, so only the split differs. Plans are built, not validated: a size the model's heads
    do not allow raises in :func:`workbench.specs.validate`."""
    n, plans = int(size), {}
    common = dict(world_size=cluster.world_size, global_batch_size=global_batch_size, recompute=recompute)
    plans["ulysses"] = ParallelPlan(engine="deepspeed", zero_stage=3, ulysses=n, **common)
    for kind in ("p2p", "all_gather", "a2a", "a2a+p2p"):
        extra = {}
        if kind == "a2a+p2p":
            inner = max((a for a in range(2, n) if n % a == 0), default=None)
            if inner is None:
                continue
            extra["hierarchical_context_parallel_sizes"] = (inner, n // inner)
        plans[kind] = ParallelPlan(engine="megatron", context_parallel=n, cp_comm_type=kind,
                                   distributed_optimizer=True, **common, **extra)
    return plans


def sequence_split_comparison(model: ModelSpec, cluster: ClusterSpec, *, sizes: Sequence[int],
                              global_batch_size: int = 0, recompute: str = "full") -> list:
    """One long-sequence model on the same GPUs, split three ways: DeepSpeed ZeRO-3 with ``recompute`` and no
    sequence split (the baseline, first row), DeepSpeed-Ulysses N, and Megatron context parallelism N under each
    ``--cp-comm-type``, for every N in ``sizes`` (:func:`sequence_split_plans`). Each row is :func:`sweep_row`'s
    figures plus ``layout`` (a label), ``engine``, ``size`` and ``error``: where the rules refuse a plan (Ulysses or
    ``a2a`` beyond gcd(heads, K/V heads), a size not dividing the GPUs or the sequence), the row keeps the
    core's ``ValueError`` message and no numbers. ``global_batch_size`` 0 means the GPU count (one sequence per GPU
    under ZeRO-3). Every number comes from :func:`workbench.estimate.estimate`."""
    from workbench.specs import validate

    gbs = int(global_batch_size) or cluster.world_size
    blank = {k: None for k in ("tp", "cp", "cp_comm_type", "tokens_per_gpu", "activations_gib", "peak_gib", "fits",
                               "step_seconds", "mfu", "cp_transfer_seconds", "cp_exposed_seconds",
                               "tp_comm_seconds")}

    def row(layout: str, engine: str, size: int, build) -> dict:
        try:
            plan = build()
            validate(model, cluster, plan)
        except ValueError as e:
            return {"layout": layout, "engine": engine, "size": size, "seq": model.seq_length, **blank,
                    "error": str(e)}
        return {"layout": layout, "engine": engine, "size": size, **sweep_row(model, cluster, plan), "error": ""}

    rows = [row(f"ZeRO-3 + {recompute} recompute", "deepspeed", 1,
                lambda: ParallelPlan(world_size=cluster.world_size, engine="deepspeed", zero_stage=3,
                                     global_batch_size=gbs, recompute=recompute))]
    for n in sizes:
        n = int(n)
        try:
            plans = sequence_split_plans(cluster, n, global_batch_size=gbs, recompute=recompute)
        except ValueError as e:  # the size itself is refused (does not divide the GPUs, the batch)
            rows.append({"layout": f"size {n}", "engine": "", "size": n, "seq": model.seq_length, **blank,
                         "error": str(e)})
            continue
        for kind, plan in plans.items():
            label = f"Ulysses {n}" if kind == "ulysses" else f"CP {n} {kind}" + (
                f" {plan.hierarchical_context_parallel_sizes[0]}x{plan.hierarchical_context_parallel_sizes[1]}"
                if kind == "a2a+p2p" else "")
            rows.append(row(label, str(plan.engine), n, lambda plan=plan: plan))
    return rows
