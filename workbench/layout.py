"""Parallel layout: which GPU holds which slice of the model, and which ranks talk to which.

Megatron numbers ranks with the order ``tp-cp-ep-dp-pp`` (megatron-core ``parallel_state.initialize_model_parallel``,
default ``order="tp-cp-ep-dp-pp"``; expert parallel is 1 for the dense decoder generator), tensor parallel fastest::

    rank = tp + T·(cp + C·(dp + D·pp))

A process group of kind ``"dp"`` holds the ranks that differ only in their dp coordinate; ``"tp-pp"`` (the model
parallel group) the ranks that differ in tp and pp, and so on — the same groups as megatron-core's
``RankGenerator.get_ranks(token)``, in the same order. Ranks fill nodes in order: ``node = rank // gpus_per_node``
(what ``torchrun``/the DeepSpeed launcher do with one process per GPU).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

ORDER = ("tp", "cp", "dp", "pp")
"""Megatron's default rank order without the expert dimension, fastest first."""

GROUP_KINDS = ("tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-pp", "tp-dp", "tp-dp-cp")
"""Group kinds megatron-core builds for the dense decoder (``tp-pp`` is the model-parallel group)."""

_ALIASES = {"mp": "tp-pp", "model": "tp-pp", "model_parallel": "tp-pp", "dp_cp": "dp-cp", "tp_cp": "tp-cp"}


@dataclass(frozen=True, kw_only=True, slots=True)
class RankCoords:
    """Where one rank sits: its node and its coordinate along each parallel dimension."""

    rank: int
    """Global rank."""
    node: int
    """Node index (rank // gpus_per_node)."""
    local_rank: int
    """GPU index inside the node."""
    tp: int
    """Tensor-parallel rank."""
    cp: int
    """Context-parallel rank."""
    dp: int
    """Data-parallel rank."""
    pp: int
    """Pipeline stage."""

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("rank", "node", "local_rank", "tp", "cp", "dp", "pp")}


def _normalise_kind(kind: str) -> tuple[str, ...]:
    key = _ALIASES.get(kind.lower(), kind.lower())
    dims = tuple(key.replace("_", "-").split("-"))
    for d in dims:
        if d not in ORDER:
            raise ValueError(f"group kind={kind!r} is not one of: {', '.join(GROUP_KINDS)} (or 'mp')")
    return tuple(d for d in ORDER if d in dims)


def rank_groups(sizes: dict, kind: str) -> list[list[int]]:
    """Groups of kind ``kind`` for sizes ``{"tp": T, "cp": C, "dp": D, "pp": P}``, as megatron-core's
    ``RankGenerator(order="tp-cp-ep-dp-pp").get_ranks(kind)`` returns them: groups ordered by their first rank,
    ranks ascending inside each group."""
    dims = _normalise_kind(kind)
    shape = tuple(sizes[d] for d in reversed(ORDER))  # (pp, dp, cp, tp): C order puts tp fastest
    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    axes = [list(reversed(ORDER)).index(d) for d in ORDER]  # axis index of tp, cp, dp, pp
    inside = [axes[ORDER.index(d)] for d in ORDER if d in dims]
    outside = [axes[ORDER.index(d)] for d in ORDER if d not in dims]
    # outer loop over the other dims (slowest first), inner over the group's dims (slowest first)
    perm = sorted(outside) + sorted(inside)
    arr = ranks.transpose(perm).reshape(-1, int(np.prod([shape[a] for a in inside])) if inside else 1)
    return sorted([sorted(int(r) for r in row) for row in arr], key=lambda g: g[0])


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Rank coordinates, process groups and node placement for one plan on one cluster."""

    world_size: int
    gpus_per_node: int
    tensor_parallel: int
    context_parallel: int
    data_parallel: int
    pipeline_parallel: int
    coords: tuple
    """:class:`RankCoords` for every rank, indexed by rank."""
    warnings: tuple = ()
    """Plain-language findings about the placement (groups crossing nodes, uneven stages)."""
    _groups: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def sizes(self) -> dict:
        return {"tp": self.tensor_parallel, "cp": self.context_parallel, "dp": self.data_parallel,
                "pp": self.pipeline_parallel}

    @property
    def num_nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def rank(self, r: int) -> RankCoords:
        """Coordinates of global rank ``r``."""
        if not 0 <= int(r) < self.world_size:
            raise ValueError(f"rank={r} is outside 0..{self.world_size - 1}")
        return self.coords[int(r)]

    def groups(self, kind: str) -> list[list[int]]:
        """Process groups of a kind: ``tp``, ``cp``, ``dp``, ``pp``, ``dp-cp``, ``tp-cp``, ``tp-pp`` (alias ``mp``),
        ``tp-dp``, ``tp-dp-cp``."""
        key = "-".join(_normalise_kind(kind))
        if key not in self._groups:
            self._groups[key] = rank_groups(self.sizes, key)
        return [list(g) for g in self._groups[key]]

    def nodes_of(self, ranks) -> list[int]:
        return sorted({self.coords[r].node for r in ranks})

    def max_nodes_spanned(self, kind: str) -> int:
        """The largest number of nodes any one group of this kind touches (1 = every group stays in a node)."""
        return max(len(self.nodes_of(g)) for g in self.groups(kind))

    def stage_nodes(self) -> list[list[int]]:
        """Nodes holding each pipeline stage."""
        return [sorted({c.node for c in self.coords if c.pp == s}) for s in range(self.pipeline_parallel)]

    def to_dict(self) -> dict:
        return {
            "world_size": self.world_size,
            "gpus_per_node": self.gpus_per_node,
            "num_nodes": self.num_nodes,
            "order": "tp-cp-ep-dp-pp",
            "sizes": self.sizes,
            "ranks": [c.to_dict() for c in self.coords],
            "groups": {k: self.groups(k) for k in ("tp", "cp", "dp", "pp", "tp-pp")},
            "nodes_spanned": {k: self.max_nodes_spanned(k) for k in ("tp", "cp", "dp", "pp", "tp-cp")},
            "stage_nodes": self.stage_nodes(),
            "warnings": list(self.warnings),
        }


def build_layout(cluster: ClusterSpec, plan: ParallelPlan, *, model: Optional[ModelSpec] = None) -> Layout:
    """The layout of ``plan`` on ``cluster`` (Megatron order ``tp-cp-ep-dp-pp``; ranks fill nodes in order).

    ``model`` (optional) lets the layout check that pipeline stages get equal numbers of layers.
    """
    if plan.world_size != cluster.world_size:
        raise ValueError(f"plan world_size={plan.world_size} != cluster gpus_per_node({cluster.gpus_per_node}) * "
                         f"num_nodes({cluster.num_nodes}) = {cluster.world_size}")
    t, c, d, p = plan.tensor_parallel, plan.context_parallel, plan.data_parallel, plan.pipeline_parallel
    n = cluster.gpus_per_node
    r = np.arange(plan.world_size)
    coords = tuple(RankCoords(rank=int(k), node=int(k // n), local_rank=int(k % n), tp=int(k % t),
                              cp=int(k // t % c), dp=int(k // (t * c) % d), pp=int(k // (t * c * d)))
                   for k in r)
    layout = Layout(world_size=plan.world_size, gpus_per_node=n, tensor_parallel=t, context_parallel=c,
                    data_parallel=d, pipeline_parallel=p, coords=coords)
    object.__setattr__(layout, "warnings", tuple(_warnings(layout, plan, model)))
    return layout


def _warnings(layout: Layout, plan: ParallelPlan, model: Optional[ModelSpec]) -> list[str]:
    out = []
    n, t, c = layout.gpus_per_node, layout.tensor_parallel, layout.context_parallel
    tp_nodes = layout.max_nodes_spanned("tp")
    if tp_nodes > 1:
        why = (f"tensor_parallel={t} > gpus_per_node={n}" if t > n
               else f"gpus_per_node={n} is not a multiple of tensor_parallel={t}")
        out.append(f"a tensor-parallel group spans {tp_nodes} nodes ({why}): its per-layer all-reduces cross "
                   f"the inter-node network; keep tensor_parallel <= gpus_per_node")
    if c > 1 and tp_nodes == 1:
        tc_nodes = layout.max_nodes_spanned("tp-cp")
        if tc_nodes > 1:
            out.append(f"a tensor×context-parallel group (tp={t} × cp={c} = {t * c} ranks) spans {tc_nodes} nodes: "
                       f"the context-parallel K/V ring crosses the inter-node network")
    if model is not None:
        p, v = plan.pipeline_parallel, plan.virtual_pipeline
        if model.num_layers % (p * v):
            per = model.num_layers / (p * v)
            out.append(f"uneven pipeline stages: num_layers={model.num_layers} over pipeline_parallel({p}) * "
                       f"virtual_pipeline({v}) = {p * v} chunks is {per:.2f} layers per chunk; the slowest "
                       f"stage sets the pace")
        elif p > 1 and model.num_layers // (p * v) == 1 and v > 1:
            out.append(f"one layer per virtual pipeline chunk (num_layers={model.num_layers}, pp={p}, vp={v}): "
                       f"the embedding and output layers make the first and last stages noticeably slower")
    if plan.data_parallel > 1 and layout.max_nodes_spanned("dp") > 1 and layout.num_nodes > 1:
        pass  # data parallel across nodes is the normal case: not a warning
    return out
