"""Derived parallel facts, one owner: group sizes, which process groups leave the node, parameters per rank.

Everything here is arithmetic on the plan's sizes (no rank is enumerated), so it answers as fast for a million
GPUs as for eight, and it works on numpy arrays (the planner asks for thousands of plans at once).

Ranks follow Megatron's order ``tp-cp-ep-dp-pp``, tensor parallel fastest (see :mod:`workbench.layout`), and fill
nodes in order. A group kind whose dimensions are adjacent in that order has its ranks ``stride`` apart, ``size``
of them, and its groups tile aligned blocks of ``stride × size`` consecutive ranks:

==========  =============  ==========
kind        stride         size
==========  =============  ==========
``tp``      1              t
``cp``      t              c
``tp-cp``   1              t·c
``dp``      t·c            d
``dp-cp``   t              c·d  (the gradient-reduction group)
``pp``      t·c·d          p
==========  =============  ==========

MoE layers number the same ranks a second time, in megatron-core's expert order ``tp-ep-dp-pp`` with the expert
tensor-parallel size tp_e, expert parallel e and expert data parallel d_e = world ÷ (tp_e·e·p) (no cp: the expert
rank generator has cp = 1): ``etp`` stride 1 size tp_e, ``ep`` stride tp_e size e, ``edp`` stride tp_e·e size d_e.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

GROUP_SHAPES = {
    "tp": lambda t, c, d, p: (1, t),
    "cp": lambda t, c, d, p: (t, c),
    "tp-cp": lambda t, c, d, p: (1, t * c),
    "dp": lambda t, c, d, p: (t * c, d),
    "dp-cp": lambda t, c, d, p: (t, c * d),
    "pp": lambda t, c, d, p: (t * c * d, p),
}
"""``(stride, size)`` of each group kind from the sizes ``(t, c, d, p)``."""


def expert_group_shapes(expert_tensor_parallel, expert_parallel, expert_data_parallel) -> dict:
    """``(stride, size)`` of the expert groups (``etp``, ``ep``, ``edp``) in megatron-core's expert rank order."""
    te, e, de = expert_tensor_parallel, expert_parallel, expert_data_parallel
    return {"etp": (1, te), "ep": (te, e), "edp": (te * e, de)}


_NUMBER = frozenset({int, float, np.int64, np.float64})


def group_crosses_nodes(stride, size, gpus_per_node):
    """The one rule for "does a group of this kind leave the node?" (True when at least one of its groups spans
    two nodes). A group of ``size`` ranks ``stride`` apart lives in an aligned block of ``B = stride × size``
    consecutive ranks; with more than one rank, some group crosses a node boundary exactly when that block does
    not fit in a node (``B > gpus_per_node``) or does not tile it (``gpus_per_node mod B ≠ 0``: a node boundary
    then falls inside a block, between two members of one of its groups). Scalars or numpy arrays."""
    if type(stride) in _NUMBER and type(size) in _NUMBER and type(gpus_per_node) in _NUMBER:  # one plan: no numpy
        block = stride * size
        return size > 1 and (block > gpus_per_node or gpus_per_node % min(block, gpus_per_node) != 0)
    block = np.asarray(stride) * np.asarray(size)
    n = np.asarray(gpus_per_node)
    return (np.asarray(size) > 1) & ((block > n) | (n % np.minimum(block, n) != 0))


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelFacts:
    """What a plan's layout implies, computed once: group sizes, which groups cross nodes, parameters per rank."""

    world_size: int
    gpus_per_node: int
    num_nodes: int
    group_sizes: dict
    """kind → ranks in one group (``tp``, ``cp``, ``tp-cp``, ``dp``, ``dp-cp``, ``pp``; with an MoE model also the
    expert groups ``etp``, ``ep``, ``edp``)."""
    crosses_nodes: dict
    """kind → whether a group of that kind spans more than one node (:func:`group_crosses_nodes`)."""
    parameters_per_rank: tuple
    """Parameters one rank of each pipeline stage holds (:func:`workbench.memory.stage_params_per_rank`)."""
    layer_parameters_per_rank: float
    """Parameters of one transformer layer on one tensor-parallel rank."""

    def link(self, kind: str) -> str:
        """``"inter-node"`` or ``"intra-node"``: the link a group of this kind communicates over."""
        return "inter-node" if self.crosses_nodes[kind] else "intra-node"

    def to_dict(self) -> dict:
        return {"group_sizes": dict(self.group_sizes), "crosses_nodes": dict(self.crosses_nodes),
                "parameters_per_rank": [int(round(x)) for x in self.parameters_per_rank],
                "layer_parameters_per_rank": int(round(self.layer_parameters_per_rank))}


def parallel_facts(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> ParallelFacts:
    """The :class:`ParallelFacts` of ``plan`` on ``cluster`` for ``model`` (arithmetic only)."""
    from workbench import memory as M

    t, c, d, p = plan.tensor_parallel, plan.context_parallel, plan.data_parallel, plan.pipeline_parallel
    n = cluster.gpus_per_node
    sizes, crosses = {}, {}
    for kind, shape in GROUP_SHAPES.items():
        stride, size = shape(t, c, d, p)
        sizes[kind] = size
        crosses[kind] = bool(group_crosses_nodes(stride, size, n))
    if model.is_moe:
        for kind, (stride, size) in expert_group_shapes(plan.expert_tensor_parallel_size, plan.expert_parallel,
                                                        plan.expert_data_parallel).items():
            sizes[kind] = size
            crosses[kind] = bool(group_crosses_nodes(stride, size, n))
    try:  # each stage's own layers (an uneven split); a plan that splits no whole layers: the even share
        layers = np.asarray(plan.stage_layers(model.num_layers), dtype=float)
    except ValueError:
        layers = None
    ex = (plan.expert_parallel, plan.expert_tensor_parallel_size)
    if p <= 2:  # stage by stage on plain numbers (remembered per model and shape), else every stage at once
        stages = [M.stage_params_per_rank(model, t, p, i, None if layers is None else layers[i], *ex) for i in range(p)]
    else:
        stages = M.stage_params_per_rank(model, t, p, np.arange(p), layers, *ex)
    return ParallelFacts(world_size=plan.world_size, gpus_per_node=n, num_nodes=cluster.num_nodes,
                         group_sizes=sizes, crosses_nodes=crosses,
                         parameters_per_rank=tuple(float(x) for x in np.broadcast_to(stages, (p,))),
                         layer_parameters_per_rank=float(M.layer_params_per_rank(
                             model, t, plan.expert_parallel, plan.expert_tensor_parallel_size)))
