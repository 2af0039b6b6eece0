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

import functools
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from workbench.parallel import group_crosses_nodes
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

ORDER = ("tp", "cp", "dp", "pp")
"""Megatron's default rank order without the expert dimension, fastest first."""

EXPERT_ORDER = ("etp", "ep", "edp", "pp")
"""The same ranks as MoE layers number them: megatron-core's expert ``RankGenerator(tp=expert_tensor_parallel,
ep=expert_parallel, dp=expert_data_parallel, pp=pp, cp=1, order="tp-cp-ep-dp-pp")``, expert tensor parallel
fastest: ``rank = etp + TE·(ep + E·(edp + DE·pp))``."""

EXPERT_KINDS = ("etp", "ep", "edp", "etp-ep")
"""Expert group kinds: expert tensor parallel, expert parallel (the all-to-all group), expert data parallel (the
expert gradients' reduction and distributed-optimizer group), and tensor×expert parallel (the allgather
dispatcher's group)."""

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


def _normalise_kind(kind: str, order=ORDER) -> tuple[str, ...]:
    key = _ALIASES.get(kind.lower(), kind.lower())
    dims = tuple(key.replace("_", "-").split("-"))
    for d in dims:
        if d not in order:
            kinds = GROUP_KINDS if order == ORDER else EXPERT_KINDS
            raise ValueError(f"group kind={kind!r} is not one of: {', '.join(kinds)}"
                             f"{' (or mp)' if order == ORDER else ''}")
    return tuple(d for d in order if d in dims)


def rank_groups(sizes: dict, kind: str, order=ORDER) -> list[list[int]]:
    """Groups of kind ``kind`` for sizes ``{"tp": T, "cp": C, "dp": D, "pp": P}``, as megatron-core's
    ``RankGenerator(order="tp-cp-ep-dp-pp").get_ranks(kind)`` returns them: groups ordered by their first rank,
    ranks ascending inside each group. ``order=EXPERT_ORDER`` with sizes ``{"etp", "ep", "edp", "pp"}`` gives the
    expert generator's groups."""
    dims = _normalise_kind(kind, order)
    shape = tuple(sizes[d] for d in reversed(order))  # (pp, dp, cp, tp): C order puts tp fastest
    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    axes = [list(reversed(order)).index(d) for d in order]  # axis index of tp, cp, dp, pp
    inside = [axes[order.index(d)] for d in order if d in dims]
    outside = [axes[order.index(d)] for d in order if d not in dims]
    # outer loop over the other dims (slowest first), inner over the group's dims (slowest first)
    perm = sorted(outside) + sorted(inside)
    arr = ranks.transpose(perm).reshape(-1, int(np.prod([shape[a] for a in inside])) if inside else 1)
    return sorted([sorted(int(r) for r in row) for row in arr], key=lambda g: g[0])


@functools.lru_cache(maxsize=512)
def _small_rank_groups(shape: tuple, kind: str, order: tuple) -> tuple:
    """:func:`rank_groups` as tuples, remembered per sizes (``shape``: the sizes in ``order``) and kind; for worlds
    of up to :data:`LIST_RANKS_UP_TO` GPUs (every estimate's ``to_dict`` lists their groups)."""
    return tuple(tuple(g) for g in rank_groups(dict(zip(order, shape)), kind, order))


def _groups_of(sizes: dict, kind: str, order=ORDER):
    """The groups :func:`rank_groups` gives, remembered for small worlds (rows are not to be changed in place)."""
    shape = tuple(sizes[d] for d in order)
    if math.prod(shape) <= LIST_RANKS_UP_TO:
        return _small_rank_groups(shape, kind, tuple(order))
    return rank_groups(sizes, kind, order)


LIST_RANKS_UP_TO = 1024
"""``Layout.to_dict`` lists every rank and group only up to this many GPUs; beyond it the summary (sizes, group
counts, nodes spanned, stage node ranges) stands alone."""

MAX_ENUMERATED = 2**20
"""Largest world whose ranks or groups are enumerated on request (``coords``, ``groups``); everything the estimate
needs is arithmetic and works at any size."""



def _group_of(rank: int, coords: dict, sizes: dict, order, dims, limit: Optional[int]) -> tuple[int, list[int]]:
    """``(index, members)`` of the group over ``dims`` holding ``rank`` (coordinates ``coords`` in ``order``, fastest
    first): the group's index among its kind, by first rank, and its members ascending (the first ``limit`` only)."""
    strides = _strides(sizes, order)
    index, radix = 0, 1
    for d in order:
        if d not in dims:
            index += coords[d] * radix
            radix *= sizes[d]
    base = rank - sum(coords[d] * strides[d] for d in dims)
    total = math.prod(sizes[d] for d in dims)
    members = []
    for j in range(total if limit is None else min(int(limit), total)):  # mixed radix over dims: ranks ascend
        offset, rest = 0, j
        for d in dims:
            offset += (rest % sizes[d]) * strides[d]
            rest //= sizes[d]
        members.append(base + offset)
    return index, members

def _strides(sizes: dict, order=ORDER) -> dict:
    """Rank stride of each dimension: tp 1, cp T, dp T·C, pp T·C·D."""
    out, step = {}, 1
    for d in order:
        out[d] = step
        step *= sizes[d]
    return out


def _residues(dims, sizes: dict, strides: dict, n: int) -> np.ndarray:
    """Distinct values mod ``n`` of ``sum(coord_d * stride_d)`` over the dims ``dims`` (at most ``n`` values)."""
    values = np.zeros(1, dtype=np.int64)
    for d in dims:
        g = math.gcd(strides[d] % n or n, n)
        steps = min(sizes[d], n // g)
        mine = (np.arange(steps, dtype=np.int64) * (strides[d] % n)) % n
        values = np.unique(np.add.outer(values, mine).ravel() % n)
    return values


def nodes_spanned(sizes: dict, kind: str, gpus_per_node: int, order=ORDER) -> int:
    """The largest number of nodes one process group of ``kind`` touches, by arithmetic (no rank enumeration).

    A group is ``base + {sum(i_d * stride_d) for d in the group's dims}``; the nodes it touches depend only on
    ``base mod gpus_per_node``, which takes at most ``gpus_per_node`` values. When no step between consecutive
    members exceeds a node, the group covers a contiguous node interval; when every step is at least a node, each
    member sits on its own node; otherwise (rare shapes) the members of one group per residue are counted."""
    key = (tuple(sizes.items()), kind, gpus_per_node, order)
    try:
        return _nodes_spanned_of(key)
    except TypeError:  # an unhashable order or size: computed without the cache
        return _nodes_spanned(sizes, kind, gpus_per_node, order)


@functools.lru_cache(maxsize=4096)
def _nodes_spanned_of(key: tuple) -> int:
    """:func:`nodes_spanned` remembered per (sizes, kind, GPUs per node, order): a pure function of them."""
    sizes, kind, gpus_per_node, order = key
    return _nodes_spanned(dict(sizes), kind, gpus_per_node, order)


def _nodes_spanned(sizes: dict, kind: str, gpus_per_node: int, order) -> int:
    n = gpus_per_node
    dims = [d for d in _normalise_kind(kind, order) if sizes[d] > 1]
    if not dims:
        return 1
    strides = _strides(sizes, order)
    outside = [d for d in order if d not in dims and sizes[d] > 1]
    bases = _residues(outside, sizes, strides, n)
    size = math.prod(sizes[d] for d in dims)
    span = sum((sizes[d] - 1) * strides[d] for d in dims)  # last member - first member
    gaps = [strides[d] - sum((sizes[e] - 1) * strides[e] for e in dims[:k]) for k, d in enumerate(dims)]
    if max(gaps) <= n:
        return int(((bases + span) // n - bases // n).max()) + 1
    if min(gaps) >= n:
        return size
    members = np.zeros(1, dtype=np.int64)
    for d in dims:
        members = np.add.outer(np.arange(sizes[d], dtype=np.int64) * strides[d], members).ravel()
    return max(len(np.unique((int(b) + members) // n)) for b in bases)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Rank coordinates, process groups and node placement for one plan on one cluster.

    Everything is arithmetic on the sizes (``rank``, ``group_of``, ``max_nodes_spanned``, ``to_dict``), so a layout
    of a million GPUs costs what one of eight does; ``coords`` and ``groups`` enumerate on request (up to
    :data:`MAX_ENUMERATED` ranks)."""

    world_size: int
    gpus_per_node: int
    tensor_parallel: int
    context_parallel: int
    data_parallel: int
    pipeline_parallel: int
    expert_parallel: int = 1
    """MoE expert-parallel size e."""
    expert_tensor_parallel: Optional[int] = None
    """MoE expert-tensor-parallel size (``None``: tensor_parallel)."""
    num_experts: Optional[int] = None
    """Experts per MoE layer (``None``: a dense model; the expert view then has nothing to place)."""
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

    def _check_enumerable(self, what: str) -> None:
        if self.world_size > MAX_ENUMERATED:
            raise ValueError(f"{what} of world_size={self.world_size:,} would list every rank (more than "
                             f"{MAX_ENUMERATED:,}); use rank(r), group_of(r, kind) or to_dict() instead")

    @property
    def coords(self) -> tuple:
        """:class:`RankCoords` for every rank, indexed by rank (enumerated; see :meth:`rank` for one)."""
        self._check_enumerable("coords")
        return tuple(self.rank(r) for r in range(self.world_size))

    def rank(self, r: int) -> RankCoords:
        """Coordinates of global rank ``r``: ``rank = tp + T·(cp + C·(dp + D·pp))``, ``node = rank // gpus_per_node``."""
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= int(r) < self.world_size:
            raise ValueError(f"rank={r!r} is outside 0..{self.world_size - 1}")
        k, t, c, d = int(r), self.tensor_parallel, self.context_parallel, self.data_parallel
        n = self.gpus_per_node
        return RankCoords(rank=k, node=k // n, local_rank=k % n, tp=k % t, cp=k // t % c, dp=k // (t * c) % d,
                          pp=k // (t * c * d))

    def group_count(self, kind: str) -> int:
        """How many groups of this kind there are (world size ÷ group size)."""
        return self.world_size // self.group_size(kind)

    def group_size(self, kind: str) -> int:
        return math.prod(self.sizes[d] for d in _normalise_kind(kind))

    def group_of(self, r: int, kind: str, limit: Optional[int] = None) -> tuple[int, list[int]]:
        """``(index, members)`` of rank ``r``'s group of ``kind``: the index in the order :meth:`groups` lists
        them (by first rank) and the members ascending (the first ``limit`` only when given)."""
        dims = _normalise_kind(kind)
        c = self.rank(r)
        coords = {"tp": c.tp, "cp": c.cp, "dp": c.dp, "pp": c.pp}
        return _group_of(c.rank, coords, self.sizes, ORDER, dims, limit)

    def groups(self, kind: str) -> list[list[int]]:
        """Process groups of a kind: ``tp``, ``cp``, ``dp``, ``pp``, ``dp-cp``, ``tp-cp``, ``tp-pp`` (alias ``mp``),
        ``tp-dp``, ``tp-dp-cp`` (enumerated; up to :data:`MAX_ENUMERATED` ranks)."""
        key = "-".join(_normalise_kind(kind))
        self._check_enumerable("groups")
        if key not in self._groups:
            self._groups[key] = _groups_of(self.sizes, key)
        return [list(g) for g in self._groups[key]]

    # -- MoE: the expert rank order ---------------------------------------------------------------------------
    @property
    def expert_sizes(self) -> dict:
        """``{"etp", "ep", "edp", "pp"}``: expert tensor parallel, expert parallel, expert data parallel
        (world ÷ (etp·ep·pp)) and pipeline parallel, the dimensions of :data:`EXPERT_ORDER`."""
        te = self.tensor_parallel if self.expert_tensor_parallel is None else self.expert_tensor_parallel
        e, p = self.expert_parallel, self.pipeline_parallel
        return {"etp": te, "ep": e, "edp": self.world_size // (te * e * p), "pp": p}

    def expert_rank(self, r: int) -> dict:
        """Expert coordinates of rank ``r``: ``{"etp", "ep", "edp", "pp"}`` from
        ``rank = etp + TE·(ep + E·(edp + DE·pp))``, and ``experts``, the MoE experts it holds (num_experts / e
        consecutive ones, megatron-core ``local_expert_indices``; empty for a dense model)."""
        k = self.rank(r).rank
        sz = self.expert_sizes
        te, e, de = sz["etp"], sz["ep"], sz["edp"]
        ep = k // te % e
        local = (self.num_experts or 0) // e
        return {"etp": k % te, "ep": ep, "edp": k // (te * e) % de, "pp": k // (te * e * de),
                "experts": list(range(ep * local, (ep + 1) * local))}

    def expert_group_of(self, r: int, kind: str, limit: Optional[int] = None) -> tuple[int, list[int]]:
        """``(index, members)`` of rank ``r``'s expert group of ``kind`` (:data:`EXPERT_KINDS`), as
        :meth:`group_of` does for the dense groups: the index in :meth:`expert_groups`' order, members ascending
        (the first ``limit`` only when given). Arithmetic, any size."""
        dims = _normalise_kind(kind, EXPERT_ORDER)
        coords = self.expert_rank(r)
        return _group_of(int(r), coords, self.expert_sizes, EXPERT_ORDER, dims, limit)

    def expert_groups(self, kind: str) -> list[list[int]]:
        """Expert process groups of a kind (:data:`EXPERT_KINDS`: ``etp``, ``ep``, ``edp``, ``etp-ep``), as
        megatron-core's expert rank generator lists them (enumerated; up to :data:`MAX_ENUMERATED` ranks)."""
        key = "e:" + "-".join(_normalise_kind(kind, EXPERT_ORDER))
        self._check_enumerable("expert groups")
        if key not in self._groups:
            self._groups[key] = _groups_of(self.expert_sizes, kind, EXPERT_ORDER)
        return [list(g) for g in self._groups[key]]

    def expert_nodes_spanned(self, kind: str) -> int:
        """The largest number of nodes one expert group of ``kind`` touches (arithmetic, any size)."""
        return nodes_spanned(self.expert_sizes, kind, self.gpus_per_node, EXPERT_ORDER)

    def nodes_of(self, ranks) -> list[int]:
        return sorted({int(r) // self.gpus_per_node for r in ranks})

    def max_nodes_spanned(self, kind: str) -> int:
        """The largest number of nodes any one group of this kind touches (1 = every group stays in a node)."""
        return nodes_spanned(self.sizes, kind, self.gpus_per_node)

    def stage_node_range(self, stage: int) -> tuple[int, int]:
        """First and last node holding pipeline stage ``stage`` (its ranks are contiguous: stage·T·C·D onward)."""
        per = self.tensor_parallel * self.context_parallel * self.data_parallel
        return stage * per // self.gpus_per_node, ((stage + 1) * per - 1) // self.gpus_per_node

    def stage_nodes(self) -> list[list[int]]:
        """Nodes holding each pipeline stage."""
        return [list(range(a, b + 1)) for a, b in (self.stage_node_range(s) for s in range(self.pipeline_parallel))]

    def to_dict(self) -> dict:
        """The summary (sizes, group counts and sizes, nodes spanned, stage node ranges, warnings); the lists of
        ranks and groups are added up to :data:`LIST_RANKS_UP_TO` GPUs."""
        kinds = ("tp", "cp", "dp", "pp", "tp-pp")
        out = {
            "world_size": self.world_size,
            "gpus_per_node": self.gpus_per_node,
            "num_nodes": self.num_nodes,
            "order": "tp-cp-ep-dp-pp",
            "rank_formula": "rank = tp + T*(cp + C*(dp + D*pp)); node = rank // gpus_per_node",
            "sizes": self.sizes,
            "group_counts": {k: self.group_count(k) for k in kinds},
            "nodes_spanned": {k: self.max_nodes_spanned(k) for k in ("tp", "cp", "dp", "pp", "tp-cp")},
            "stage_node_ranges": [list(self.stage_node_range(s)) for s in range(self.pipeline_parallel)],
            "warnings": list(self.warnings),
        }
        if self.world_size <= LIST_RANKS_UP_TO:
            out["ranks"] = [self.rank(r).to_dict() for r in range(self.world_size)]
            out["groups"] = {k: self.groups(k) for k in kinds}
            out["stage_nodes"] = self.stage_nodes()
        if self.num_experts:
            ex = {"order": "tp-ep-dp-pp (expert tensor parallel, expert parallel, expert data parallel, pipeline)",
                  "rank_formula": "rank = etp + TE*(ep + E*(edp + DE*pp))", "sizes": self.expert_sizes,
                  "num_experts": self.num_experts, "experts_per_rank": self.num_experts // self.expert_parallel,
                  "nodes_spanned": {k: self.expert_nodes_spanned(k) for k in ("etp", "ep", "edp")}}
            if self.world_size <= LIST_RANKS_UP_TO:
                ex["groups"] = {k: self.expert_groups(k) for k in ("etp", "ep", "edp")}
                ex["experts_of_rank"] = [self.expert_rank(r)["experts"] for r in range(self.world_size)]
            out["expert"] = ex
        return out


def build_layout(cluster: ClusterSpec, plan: ParallelPlan, *, model: Optional[ModelSpec] = None) -> Layout:
    """The layout of ``plan`` on ``cluster`` (Megatron order ``tp-cp-ep-dp-pp``; ranks fill nodes in order).

    ``model`` (optional) lets the layout check that pipeline stages get equal numbers of layers.
    """
    if plan.world_size != cluster.world_size:
        raise ValueError(f"plan world_size={plan.world_size} != cluster gpus_per_node({cluster.gpus_per_node}) * "
                         f"num_nodes({cluster.num_nodes}) = {cluster.world_size}")
    layout = Layout(world_size=plan.world_size, gpus_per_node=cluster.gpus_per_node,
                    tensor_parallel=plan.tensor_parallel, context_parallel=plan.context_parallel,
                    data_parallel=plan.data_parallel, pipeline_parallel=plan.pipeline_parallel,
                    expert_parallel=plan.expert_parallel, expert_tensor_parallel=plan.expert_tensor_parallel_size,
                    num_experts=model.num_experts if model is not None and model.is_moe else None)
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
            kind = str(plan.cp_comm_type)
            what = {"a2a": "all-to-all of Q, K, V and O", "all_gather": "K/V all-gather",
                    "a2a+p2p": "K/V ring between all-to-all groups"}.get(kind, "K/V ring")
            out.append(f"a tensor×context-parallel group (tp={t} × cp={c} = {t * c} ranks) spans {tc_nodes} nodes: "
                       f"the context-parallel {what} crosses the inter-node network")
        a2a = plan.cp_a2a_size
        if a2a > 1 and bool(group_crosses_nodes(t, a2a, n)):
            out.append(f"the context-parallel all-to-all group (stride tp={t}, {a2a} ranks) crosses nodes: every "
                       f"layer's all-to-all goes over the inter-node network; keep tp × a2a <= gpus_per_node "
                       f"(a2a+p2p keeps the all-to-all inside a node and puts the ring across nodes)")
    if layout.expert_parallel > 1:
        ep_nodes = layout.expert_nodes_spanned("ep")
        if ep_nodes > 1:
            sz = layout.expert_sizes
            out.append(f"an expert-parallel group (ep={sz['ep']}, ranks {sz['etp']} apart) spans {ep_nodes} nodes: "
                       f"every MoE layer's token all-to-all (2 forward, 2 backward) crosses the inter-node network")
    if model is not None:
        p, v = plan.pipeline_parallel, plan.virtual_pipeline
        try:
            layers = plan.stage_layers(model.num_layers)
        except ValueError:
            layers = None
        if layers is None and model.num_layers % (p * v):
            per = model.num_layers / (p * v)
            out.append(f"uneven pipeline stages: num_layers={model.num_layers} over pipeline_parallel({p}) * "
                       f"virtual_pipeline({v}) = {p * v} chunks is {per:.2f} layers per chunk; the slowest "
                       f"stage sets the pace")
        elif layers is not None and len(set(layers)) > 1:
            middle = f", {layers[1]} on each middle stage" if p > 2 else ""
            out.append(f"uneven pipeline stages: {layers[0]} transformer layers on the first stage{middle}, "
                       f"{layers[-1]} on the last (num_layers={model.num_layers}, pp={p}); the slowest stage sets "
                       f"the pace")
        elif p > 1 and model.num_layers // (p * v) == 1 and v > 1:
            out.append(f"one layer per virtual pipeline chunk (num_layers={model.num_layers}, pp={p}, vp={v}): "
                       f"the embedding and output layers make the first and last stages noticeably slower")
    return out
