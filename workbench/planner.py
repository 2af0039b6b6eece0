"""Planner: every valid parallel plan for (model, cluster, global batch, sequence), ranked by step time.

The search space is built as numpy arrays — one element per candidate plan — and evaluated in one pass through the
same functions that price a single plan: :func:`workbench.memory.stage_terms` for bytes per GPU (first and last
pipeline stage, or every stage with ``all_stages=True``) and :func:`workbench.timing.step_time_terms` for seconds
per step. Nothing here computes memory or time itself.

Axes searched (each axis value is checked with the same rules :class:`~workbench.specs.ParallelPlan` and
:func:`~workbench.specs.validate` apply, so every row is a plan those accept):

- engine: ``deepspeed`` (data + pipeline parallel), ``megatron``, ``megatron-deepspeed``;
- tensor parallel t: divides heads, query groups and the MLP width; its groups stay inside a node
  (:func:`workbench.parallel.group_crosses_nodes`) unless ``allow_cross_node_tp``;
- pipeline parallel p: divides the layers; virtual pipeline v > 1 only with engine ``megatron`` (DeepSpeed's pipeline
  engine has no interleaved schedule) with m a multiple of p;
- context parallel c (engine ``megatron`` with flash attention: Transformer Engine's attention is the one with
  context parallelism): 2c divides the sequence, c ≤ ``max_context_parallel`` (default 16, the largest CP of the
  Llama 3 405B long-context run, arXiv 2407.21783 §3.3.2; seq/32k beyond 512k tokens), and each rank keeps at least
  :data:`MIN_CONTEXT_PARALLEL_TOKENS` tokens (below that the K/V exchange cannot hide behind attention and CP only
  costs); the exchange is every kind of Megatron's ``--cp-comm-type`` (:func:`context_parallel_exchanges`): the ring
  (``p2p``), ``all_gather``, and where heads and query groups per TP rank divide, the all-to-all (``a2a``) and the
  hierarchical ``a2a+p2p``;
- DeepSpeed-Ulysses N (engine ``deepspeed``, TP = PP = 1, dense models): N divides the sequence, the attention
  heads and the K/V heads, the same token floor and largest size as CP; its exchange is the all-to-all (``a2a``
  column, the table's ``cp`` holds N);
- data parallel d = world ÷ (t·p·c) (must divide the global batch);
- ZeRO 0-3 (DeepSpeed engines; ZeRO-2/3 only without pipeline parallel), CPU offload of the optimizer (ZeRO ≥ 1)
  and of the parameters (ZeRO-3); where the cluster declares NVMe (``nvme_gib_per_node`` > 0), ZeRO-3 with the
  optimizer on NVMe and the parameters on the GPU, the CPU or NVMe, or the optimizer on the CPU and the parameters
  on NVMe (ZeRO-Infinity, :data:`NVME_OFFLOADS`; below ZeRO-3 DeepSpeed runs device ``nvme`` as CPU offload, a row
  already searched); Megatron's distributed optimizer
  (engine ``megatron``, DP > 1: at DP = 1 it changes nothing); engine ``megatron-deepspeed`` only with TP, PP or
  CP > 1 (without them it is the ``deepspeed`` plan);
- recompute none / selective / full, micro batch b (divisors of global batch ÷ d), sequence parallel (t > 1).

A plan is feasible when its peak over pipeline stages ≤ (1 − headroom) × GPU memory, its ranks' host memory fits the
node's and what they swap to NVMe fits the node's NVMe. The memory model's held-out error band does not exclude
plans: a feasible plan whose peak at the band's upper side passes that limit is marked ``risky`` (CLI ``!``, the
Planner widget in amber). Feasible plans are ranked by step time; the Pareto front keeps the plans no other plan
beats on both throughput and memory headroom.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from workbench import encode as E
from workbench import memory as M
from workbench import timing as T
from workbench.defaults import GiB
from workbench.flops import flops_per_second_per_gpu
from workbench.encode import ENGINE_CODES
from workbench.parallel import group_crosses_nodes
from workbench.specs import (LORA_TARGETS, ZERO_SIZE_STAGES, ulysses_head_limit, AdamImpl, AttentionImpl, ClusterSpec, Engine, Fp8Recipe, Implementation, ModelSpec, Offload,
                             ParallelPlan, Precision, Recompute, ZeroStage, check_bool, check_float, check_int,
                             tp_comm_overlap_possible, CROSS_ENTROPY_FUSION_CODES, CrossEntropyFusion,
                             check_spec_types, hf_checkpoint_counts, hf_checkpointing_words)

ENGINES = (Engine.DEEPSPEED, Engine.MEGATRON, Engine.MEGATRON_DEEPSPEED)
_ENGINE_BY_CODE = {v: k for k, v in ENGINE_CODES.items()}
_RECOMPUTE_BY_CODE = {0: Recompute.NONE, 1: Recompute.SELECTIVE, 2: Recompute.FULL}
_CP_COMM_BY_CODE = {v: k for k, v in T.CP_COMM_CODES.items()}
_XENT_BY_CODE = {v: k for k, v in CROSS_ENTROPY_FUSION_CODES.items()}
DEFAULT_HEADROOM = 0.05
"""Fraction of GPU memory kept free by default (fragmentation, allocator spikes the model does not see)."""
DEFAULT_MAX_CONTEXT_PARALLEL = 16
"""Largest context-parallel size searched by default up to 512k tokens: CP=16 is what Llama 3 405B used for
128k-token training (Llama 3 herd paper, arXiv 2407.21783 §3.3.2); longer sequences search up to
:data:`CONTEXT_PARALLEL_TOKENS_PER_RANK`-token shares (NeMo trains 1M tokens at CP=32)."""
CONTEXT_PARALLEL_TOKENS_PER_RANK = 32768
"""Beyond 16 × this many tokens the default largest CP grows so each rank keeps at least this many (the NeMo
long-sequence table's 1M-token run keeps 32k per CP rank)."""


def default_max_context_parallel(seq_length: int) -> int:
    """The largest CP the planner searches unless told: 16, or seq_length / 32k for longer sequences."""
    return max(DEFAULT_MAX_CONTEXT_PARALLEL, int(seq_length) // CONTEXT_PARALLEL_TOKENS_PER_RANK)

MIN_CONTEXT_PARALLEL_TOKENS = 512
"""Fewest tokens per context-parallel rank the planner searches: a ring step then attends 256-token chunks, whose
attention lasts microseconds while each K/V send pays a link latency, and the GEMMs of so few rows run far from
peak; Megatron's long-context recipes keep thousands of tokens per CP rank."""

# Columns of the candidate table (all int64 arrays of one length)
_COLUMNS = ("engine", "tp", "pp", "vp", "cp", "dp", "sp", "zero", "off_opt", "off_par", "dist_opt", "recompute",
            "mbs", "nmb", "first_layers", "last_layers", "emb_split", "loss_split", "cp_comm", "cp_a2a", "ep", "etp",
            "tp_ov")
_NVME_COLUMNS = ("nvme_opt", "nvme_par")
"""Columns every candidate table also has: the offloaded optimizer / parameters on NVMe (ZeRO-Infinity) rather than
in host memory (:attr:`ParallelPlan.nvme_optimizer`, :attr:`ParallelPlan.nvme_params`; 1 only at ZeRO-3, with
``off_opt`` / ``off_par`` 1)."""


# ================================================================================================================
# Result types
# ================================================================================================================
@dataclass(frozen=True, kw_only=True, slots=True)
class PlanResult:
    """One evaluated plan."""

    plan: ParallelPlan
    peak_bytes: int
    """Per-GPU peak over pipeline stages (all memory terms, overhead included)."""
    peak_stage: int
    """Pipeline stage holding that peak."""
    capacity_bytes: int
    """GPU memory."""
    host_bytes_per_node: int
    """Host memory a node's ranks hold: their processes, with what they offload (:func:`workbench.memory.
    host_resident_bytes`)."""
    nvme_bytes_per_node: int = 0
    """NVMe a node's ranks swap their offloaded states to (ZeRO-Infinity; 0 unless the plan offloads to NVMe), as
    :attr:`workbench.memory_types.MemoryEstimate.nvme_bytes_per_node` takes it."""
    step_seconds: float
    tokens_per_second: float
    model_tflops_per_gpu: float
    mfu: float
    """Model FLOPs utilisation (model FLOP/s per GPU ÷ dense peak)."""
    time_breakdown: dict
    """Exposed seconds per step by term (keys of :data:`workbench.timing.TERMS`)."""
    memory_breakdown: dict
    """Bytes by term on the peak stage (keys of :data:`workbench.memory_types.TERMS`)."""
    band_high_bytes: int = 0
    """How far above ``peak_bytes`` the device total may be: the upper side of the held-out error band of the plan's
    engine and recompute mode (:func:`workbench.memory.error_band`); 0 without a band."""
    risky: bool = False
    """The plan fits on the point estimate but not at the band's upper side: ranked like any other plan (the band is
    the largest under-estimate seen on held-out shapes, not the expected error), marked so the user keeps margin."""

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    @property
    def headroom_fraction(self) -> float:
        return self.headroom_bytes / self.capacity_bytes

    def describe(self) -> str:
        return describe_plan(self.plan)

    def to_dict(self) -> dict:
        p = self.plan
        return {
            "plan": describe_plan(p),
            "engine": str(p.engine), "tensor_parallel": p.tensor_parallel, "pipeline_parallel": p.pipeline_parallel,
            "virtual_pipeline": p.virtual_pipeline, "context_parallel": p.context_parallel,
            "data_parallel": p.data_parallel, "sequence_parallel": p.sequence_parallel,
            "zero_stage": int(p.zero_stage), "offload_optimizer": str(p.offload_optimizer),
            "offload_params": str(p.offload_params), "distributed_optimizer": p.distributed_optimizer,
            "recompute": str(p.recompute), "recompute_layers": p.recompute_layers,
            "micro_batch_size": p.micro_batch_size, "gradient_accumulation_steps": p.gradient_accumulation_steps, "global_batch_size": p.global_batch_size,
            "precision": str(p.precision), "expert_parallel": p.expert_parallel,
            "expert_tensor_parallel": p.expert_tensor_parallel_size, "expandable_segments": p.expandable_segments,
            "cross_entropy_fusion": str(p.cross_entropy_fusion), "moe_overlap_alltoall": p.moe_overlap_alltoall,
            "moe_capacity_factor": p.moe_capacity_factor, "moe_pad_to_capacity": p.moe_pad_to_capacity,
            "reduce_bucket_size": p.reduce_bucket_size, "prefetch_bucket_size": p.prefetch_bucket_size,
            "param_persistence_threshold": p.param_persistence_threshold, "sub_group_size": p.sub_group_size,
            "peak_bytes": self.peak_bytes, "peak_gib": self.peak_bytes / GiB, "peak_stage": self.peak_stage,
            "capacity_bytes": self.capacity_bytes, "headroom_fraction": self.headroom_fraction,
            "host_bytes_per_node": self.host_bytes_per_node, "nvme_bytes_per_node": self.nvme_bytes_per_node,
            "step_seconds": self.step_seconds, "tokens_per_second": self.tokens_per_second,
            "model_tflops_per_gpu": self.model_tflops_per_gpu, "mfu": self.mfu,
            "time_breakdown": dict(self.time_breakdown), "memory_breakdown": dict(self.memory_breakdown),
            "band_high_bytes": self.band_high_bytes, "risky": self.risky,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanSearch:
    """The planner's answer."""

    model: ModelSpec
    cluster: ClusterSpec
    global_batch_size: int
    headroom: float
    """Fraction of GPU memory kept free."""
    ranked: tuple
    """The fastest feasible plans (:class:`PlanResult`), fastest first."""
    pareto: tuple
    """Feasible plans no other plan beats on both tokens/s and memory headroom, fastest first."""
    explanation: str
    """Why the winner beats the runner-up, in words with the numbers."""
    evaluated: int
    """Candidate plans evaluated."""
    feasible: int
    """Of those, plans that fit GPU (with headroom, on the point estimate of memory or at the band's upper side:
    ``fit_on``) and host memory."""
    elapsed_seconds: float
    profile: Optional[dict] = None
    """The hardware profile every plan was priced with (the record ``estimate`` keeps), or the no-profile record."""
    risky: int = 0
    """Of the feasible plans, those that fit only on the point estimate, not at the error band's upper side
    (:attr:`PlanResult.risky`)."""
    fit_on: str = "point"
    """What feasibility was judged on: the point estimate of the peak or the error band's upper side
    (:func:`search`'s ``fit_on``)."""

    @property
    def best(self) -> PlanResult:
        return self.ranked[0]

    @property
    def plans_per_second(self) -> float:
        return self.evaluated / self.elapsed_seconds if self.elapsed_seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        return {
            "model": self.model.name, "gpu": self.cluster.gpu.name, "gpus_per_node": self.cluster.gpus_per_node,
            "num_nodes": self.cluster.num_nodes, "world_size": self.cluster.world_size,
            "global_batch_size": self.global_batch_size, "seq_length": self.model.seq_length,
            "headroom": self.headroom, "fit_on": self.fit_on, "evaluated": self.evaluated,
            "feasible": self.feasible, "risky": self.risky,
            "elapsed_seconds": self.elapsed_seconds, "plans_per_second": self.plans_per_second,
            "ranked": [r.to_dict() for r in self.ranked], "pareto": [r.to_dict() for r in self.pareto],
            "explanation": self.explanation, "profile": dict(self.profile) if self.profile else None,
        }


def describe_plan(p: ParallelPlan) -> str:
    """Short one-line name, e.g. ``megatron TP8 PP2 v2 CP1 DP64 SP dist-opt mbs1×16 recompute=selective``."""
    parts = [str(p.engine), f"TP{p.tensor_parallel}", f"PP{p.pipeline_parallel}"]
    if p.first_stage_layers is not None or p.last_stage_layers is not None:
        parts[-1] += f"[{p.first_stage_layers or '·'}…{p.last_stage_layers or '·'}]"
    if p.embedding_in_pipeline_split or p.loss_in_pipeline_split:
        parts[-1] += "[" + "+".join(n for n, on in (("emb", p.embedding_in_pipeline_split),
                                                     ("loss", p.loss_in_pipeline_split)) if on) + "]"
    if p.virtual_pipeline > 1:
        parts.append(f"v{p.virtual_pipeline}")
    if p.is_ulysses:
        parts.append(f"Ulysses{p.ulysses}")
    elif p.context_parallel > 1:
        parts.append(f"CP{p.context_parallel}" + ("" if str(p.cp_comm_type) == "p2p" else f"-{p.cp_comm_type}"))
    if p.expert_parallel > 1 or p.expert_tensor_parallel is not None:
        parts.append(f"EP{p.expert_parallel}" + ("-overlap" if p.moe_overlap_alltoall else "")
                     + (f" ETP{p.expert_tensor_parallel_size}"
                        if p.expert_tensor_parallel_size != p.tensor_parallel else ""))
    if p.moe_capacity_factor is not None and not p.deepspeed_moe:  # megatron-core's token drop
        parts.append(f"capacity{p.moe_capacity_factor:g}" + ("-padded" if p.moe_pad_to_capacity else ""))
    parts.append(f"DP{p.data_parallel}")
    if p.sequence_parallel:
        parts.append("SP+TP-overlap" if p.tp_comm_overlap else "SP")
    if p.engine is not Engine.MEGATRON:
        parts.append(f"ZeRO-{int(p.zero_stage)}")
    if p.distributed_optimizer:
        parts.append("dist-opt")
    if p.offload_optimizer is not Offload.NONE:
        parts.append(f"offload-opt={p.offload_optimizer}")
    if p.offload_params is not Offload.NONE:
        parts.append(f"offload-params={p.offload_params}")
    parts.append(f"mbs{p.micro_batch_size}×{p.gradient_accumulation_steps}")
    layers = p.recompute_layers
    parts.append(f"recompute={p.recompute}" + (f"({layers} layer{'s' if layers != 1 else ''})" if layers is not None
                                               else ""))
    if p.cross_entropy_fusion is not CrossEntropyFusion.NONE:  # Megatron's fused loss kernels
        parts.append(f"CE-fusion={p.cross_entropy_fusion}")
    if p.lora_rank:
        parts.append(f"LoRA r={p.lora_rank}")
    return " ".join(parts)


# ================================================================================================================
# Candidate enumeration
# ================================================================================================================
def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def pipeline_splits(num_layers: int, world_size: int) -> list:
    """``(p, first, last, emb, loss)`` pipeline splits the planner searches (``first``/``last`` 0: even;
    ``emb``/``loss`` 1: Megatron's ``--account-for-embedding/loss-in-pipeline-split``): every p dividing both the
    layers and the world size evenly, and, where p does not divide the layers,

    * Megatron's uneven split (``--decoder-first/last-pipeline-num-layers``) that balances the stages — middle
      stages of ⌈L/p⌉ or ⌊L/p⌋ layers, the rest shared by the first and last stage (the last, which also carries
      the output layer and loss, takes the smaller half), neither end more than one layer above a middle stage.
      Llama 3 405B's 126 layers over 16 stages give 7 + 14 × 8 + 7, the layout Meta trained it with (Llama 3
      paper, arXiv 2407.21783 §3.3.2: one layer removed from the first and the last stage);
    * where p divides L + 1 or L + 2, the embedding (and the loss) counted as a layer: the same layer counts, but
      every stage's share (L + 2) / p then splits into interleaved chunks, which a first/last count of one layer
      fewer cannot (126 + 2 = 16 × 8: interleaving by 2, 4 or 8)."""
    L, W = int(num_layers), int(world_size)
    out = []
    for p in range(1, min(L, W) + 1):
        if W % p:
            continue
        if L % p == 0:
            out.append((p, 0, 0, 0, 0))
            continue
        seen = set()
        for k in sorted({-(-L // p), L // p}) if p > 2 else [0]:
            rest = L - (p - 2) * k
            first, last = rest - rest // 2, rest // 2
            if last >= 1 and (p == 2 or max(first, last) <= k + 1) and (first, last) not in seen:
                seen.add((first, last))
                out.append((p, first, last, 0, 0))
        for emb, loss in ((1, 0), (1, 1)):
            per = (L + emb + loss) // p
            if (L + emb + loss) % p == 0 and per - max(emb, loss) >= 1:
                out.append((p, 0, 0, emb, loss))
                break
    return out


def expert_options(model: ModelSpec, world_size: int, tensor_parallel: int, pipeline_parallel: int) -> list:
    """``(expert_parallel, expert_tensor_parallel)`` pairs searched for one (t, p): for a dense model only
    ``(1, t)``; for an MoE model every e dividing num_experts with expert tensor parallel t (megatron-core's default)
    or 1 (experts whole on each rank, what MoE recipes use with EP), where tp_e·e·p divides the world size and tp_e
    the expert width (megatron-core's expert rank generator and ``MoELayer``), and tp_e = 1 when the linear layers
    have biases (megatron-core: "Bias in MoE is only supported when ETP==1"; ``(1, t)`` is always listed, the
    DeepSpeed engines' layout, and the enumeration drops it for Megatron rows where that rule refuses it; DeepSpeed
    rows take the pairs (e, 1) with t = 1 as DeepSpeed-MoE's ep_size, :attr:`ParallelPlan.deepspeed_moe`)."""
    t, p = tensor_parallel, pipeline_parallel
    if not model.is_moe:
        return [(1, t)]
    out = []
    for e in _divisors(model.num_experts):
        for te in sorted({t, 1}, reverse=True):
            # megatron-core: biases in MoE layers only with expert TP 1
            if (e, te) == (1, t) or (world_size % (te * e * p) == 0 and model.moe_ffn_hidden_size % te == 0
                                     and not (model.add_bias_linear and te > 1)):
                out.append((e, te))
    return out


def _settings(engines, zero_stages, offload: bool, recomputes, nvme: bool = False) -> np.ndarray:
    """Rows (engine, sp, zero, off_opt, off_par, dist_opt, recompute, nvme_opt, nvme_par) that the engine rules of
    ``ParallelPlan._check_engine`` accept independent of the layout. ``nvme``: also the ZeRO-3 rows of DeepSpeed
    engines with the optimizer swapped to NVMe (ZeRO-Infinity) and the parameters on the GPU, on the CPU or on NVMe
    too (:data:`NVME_OFFLOADS`); below ZeRO-3 DeepSpeed runs device ``nvme`` as CPU offload, already a row."""
    rows = []
    for e in engines:
        code = ENGINE_CODES[e]
        for sp in (0, 1):
            if e is Engine.DEEPSPEED and sp:
                continue
            for z in (zero_stages if e is not Engine.MEGATRON else (0,)):
                offloads = [(oo, op, 0, 0) for oo in ((0, 1) if offload else (0,))
                            for op in ((0, 1) if offload else (0,))]
                if nvme and offload and z == 3:
                    offloads += list(NVME_OFFLOADS)
                for oo, op, no, np_ in offloads:
                    if e is Engine.MEGATRON and (oo or op):
                        continue
                    if oo and z < 1 or op and z != 3:
                        continue
                    for do in ((0, 1) if e is Engine.MEGATRON else (0,)):
                        for rc in recomputes:
                            rows.append((code, sp, z, oo, op, do, rc, no, np_))
    return np.array(rows, dtype=np.int64).reshape(-1, 9)


NVME_OFFLOADS = ((1, 0, 1, 0), (1, 1, 1, 0), (1, 1, 0, 1), (1, 1, 1, 1))
"""The ZeRO-3 offloads to NVMe the planner searches, as (off_opt, off_par, nvme_opt, nvme_par): the optimizer on
NVMe with the parameters on the GPU, in host memory, or on NVMe; and the optimizer in host memory with the
parameters on NVMe (DeepSpeed's ``offload_optimizer.device`` and ``offload_param.device`` are set apart: stage3.py
``_configure_offloading``, 0.19.8). That last one keeps the optimizer's 16 bytes a parameter on the host and swaps
only the 16-bit parameters, read at every fetch (forward and backward of each micro-batch) and written once a step,
where the optimizer on NVMe swaps 32 bytes a parameter a step: the faster of the two where the host holds the states
but not the parameters beside them, unless many micro-batches multiply the reads."""


def context_parallel_exchanges(model: ModelSpec, tensor_parallel: int, context_parallel: int) -> list:
    """The (``cp_comm`` code, all-to-all size) pairs searched for c = ``context_parallel`` ranks at TP t: every
    kind Megatron's ``--cp-comm-type`` offers — the ring ``p2p`` and ``all_gather`` always; ``a2a`` where the heads
    and query groups per TP rank divide by c; ``a2a+p2p`` for each inner all-to-all size a (1 < a < c, a divides c
    and the heads and query groups per TP rank) with the ring over c/a. ``[(p2p, 1)]`` without CP."""
    codes, c, t = T.CP_COMM_CODES, context_parallel, tensor_parallel
    if c == 1:
        return [(codes["p2p"], 1)]
    heads, groups = model.num_attention_heads // t, model.num_query_groups // t
    out = [(codes["p2p"], 1), (codes["all_gather"], 1)]
    out += [(codes["a2a+p2p"], a) for a in _divisors(c) if 1 < a < c and heads % a == 0 and groups % a == 0]
    if heads % c == 0 and groups % c == 0:
        out.append((codes["a2a"], c))
    return out


def enumerate_candidates(model: ModelSpec, cluster: ClusterSpec, global_batch_size: int, *,
                         engines: Sequence = ENGINES, zero_stages: Sequence[int] = (0, 1, 2, 3),
                         offload: bool = True, recompute: Sequence = ("none", "selective", "full"),
                         allow_cross_node_tp: bool = False,
                         max_context_parallel: Optional[int] = None, tp_comm_overlap: Optional[bool] = None) -> dict:
    """Every valid plan as a table of int64 arrays (keys ``engine, tp, pp, vp, cp, dp, sp, zero, off_opt, off_par,
    dist_opt, recompute, mbs, nmb``, ..., ``nvme_opt, nvme_par``), following the rules listed in the module
    docstring; ``tp_comm_overlap`` as :func:`with_tp_comm_overlap`. With ``offload``, a cluster that declares NVMe
    (``nvme_gib_per_node`` > 0) also has the ZeRO-3 rows offloading to it (:data:`NVME_OFFLOADS`)."""
    W, L, n = cluster.world_size, model.num_layers, cluster.gpus_per_node
    engines = tuple(Engine.parse(e, "engine") for e in engines)
    rc_codes = tuple(sorted({M.RECOMPUTE_CODES[Recompute.parse(r, "recompute")] for r in recompute}))
    settings = _settings(engines, tuple(int(z) for z in zero_stages), offload, rc_codes,
                         nvme=cluster.nvme_gib_per_node > 0)
    s_engine, s_sp, s_zero = settings[:, 0], settings[:, 1], settings[:, 2]
    ds_code, mg_code = ENGINE_CODES[Engine.DEEPSPEED], ENGINE_CODES[Engine.MEGATRON]
    hy_code = ENGINE_CODES[Engine.MEGATRON_DEEPSPEED]

    g = np.gcd(model.num_attention_heads, model.num_query_groups)
    tps = [t for t in _divisors(int(np.gcd(g, model.ffn_hidden_size)))
           if W % t == 0 and (allow_cross_node_tp or not group_crosses_nodes(1, t, n))]
    splits = pipeline_splits(L, W)
    if model.implementation is Implementation.TRANSFORMERS:  # an HF model: ZeRO data parallel, no pipeline
        splits = [(1, 0, 0, 0, 0)]
    if Engine.MEGATRON not in engines:
        splits = [sp for sp in splits if not any(sp[1:])]
    layer_counts = {(p, f, la) for p, f, la, e, lo in splits if f}
    flash = model.attention is AttentionImpl.FLASH
    if max_context_parallel is None:
        max_context_parallel = default_max_context_parallel(model.seq_length)
    s_len = model.seq_length
    room = [c for c in _divisors(W) if c > 1 and c <= max_context_parallel and s_len // c >= MIN_CONTEXT_PARALLEL_TOKENS]
    cps_mg = {c for c in room if flash and Engine.MEGATRON in engines and s_len % (2 * c) == 0}
    # DeepSpeed-Ulysses (engine deepspeed, TP = PP = 1): N divides the sequence, the heads and the K/V heads; a
    # Hugging Face model needs flash attention (DeepSpeed refuses eager)
    cps_ds = {c for c in room if Engine.DEEPSPEED in engines and s_len % c == 0 and ulysses_head_limit(model) % c == 0
              and not model.is_moe and (flash or model.implementation is not Implementation.TRANSFORMERS)}
    cps = [1] + sorted(cps_mg | cps_ds)
    a2a_code = T.CP_COMM_CODES["a2a"]
    chunks = []
    for t in tps:
        for p, first, last, emb, loss in splits:
            for c in cps:
                if W % (t * p * c):
                    continue
                d = W // (t * p * c)
                if global_batch_size % d:
                    continue
                ok = np.ones(len(settings), bool)
                ulysses = c in cps_ds and t == 1 and p == 1
                ok &= (s_engine != ds_code) | ((t == 1) & ((c == 1) | ulysses))
                # Megatron's context parallelism is engine megatron's, Ulysses engine deepspeed's
                ok &= (s_engine == mg_code) | (c == 1) | ((s_engine == ds_code) & ulysses)
                ok &= (s_engine != mg_code) | (c == 1) | (c in cps_mg)
                ok &= (s_sp == 0) | ((t > 1) & (model.seq_length % t == 0))
                ok &= (s_engine == mg_code) | (p == 1) | (s_zero < 2)
                # the distributed optimizer shards over data parallel: at DP = 1 it is the same plan as without
                ok &= (settings[:, 5] == 0) | (d > 1)
                # the hybrid without tensor, pipeline or context parallelism is DeepSpeed ZeRO over data parallel:
                # the same plan, priced the same, as engine deepspeed
                ok &= (s_engine != hy_code) | (t > 1) | (p > 1) | (c > 1)
                if first or emb:  # an uneven split is Megatron's (--decoder-first/last-pipeline-num-layers, ...)
                    ok &= s_engine == mg_code
                rows = settings[ok]
                if not len(rows):
                    continue
                mbs = np.array(_divisors(global_batch_size // d), dtype=np.int64)
                # interleaving: every stage's layers split into v equal chunks (uneven: first, middle and last)
                per_stage = int(np.gcd.reduce([first, last, (L - first - last) // (p - 2) if p > 2 else 0])) \
                    if first else (L + emb + loss) // p
                vps = [1] + ([v for v in _divisors(per_stage) if v > 1] if p > 1 else [])
                if emb and (p, per_stage - emb, per_stage - loss) in layer_counts:
                    vps = vps[1:]  # without interleaving it is the first/last split already searched
                if not vps:
                    continue
                vps = np.array(vps, dtype=np.int64)
                # product rows × mbs × vp
                R, B, V = len(rows), len(mbs), len(vps)
                ri = np.repeat(np.arange(R), B * V)
                bi = np.tile(np.repeat(np.arange(B), V), R)
                vi = np.tile(np.arange(V), R * B)
                r, b, v = rows[ri], mbs[bi], vps[vi]
                nmb = global_batch_size // (b * d)
                keep = (v == 1) | ((r[:, 0] == mg_code) & (nmb % p == 0))
                r, b, v, nmb = r[keep], b[keep], v[keep], nmb[keep]
                k = len(b)
                comms = context_parallel_exchanges(model, t, c)
                for comm, a2a in comms:
                    for e, te in expert_options(model, W, t, p):
                        # expert parallel and a split of the experts other than TP are Megatron's; EP with TP
                        # needs sequence parallel (Megatron-LM's rule)
                        sel = np.ones(k, bool) if (e, te) == (1, t) else (
                            (r[:, 0] == mg_code) & ((e == 1) | (t == 1) | (r[:, 1] == 1)))
                        if e > 1 and t == 1 and te == 1 and (W // p) % e == 0:
                            # DeepSpeed-MoE (ep_size e): experts whole on each rank, ZeRO-1/2 only
                            sel |= (r[:, 0] != mg_code) & (r[:, 2] < 3)
                        if model.is_moe and model.add_bias_linear and te > 1:  # megatron-core: bias needs ETP 1
                            sel &= r[:, 0] != mg_code
                        if c > 1 and (comm, a2a) != (a2a_code, c):  # DeepSpeed-Ulysses is the all-to-all only
                            sel &= r[:, 0] == mg_code
                        if not sel.any():
                            continue
                        n_sel = int(sel.sum())
                        chunks.append(dict(engine=r[sel, 0], tp=np.full(n_sel, t), pp=np.full(n_sel, p), vp=v[sel],
                                           cp=np.full(n_sel, c), dp=np.full(n_sel, d), sp=r[sel, 1], zero=r[sel, 2],
                                           off_opt=r[sel, 3], off_par=r[sel, 4], dist_opt=r[sel, 5],
                                           recompute=r[sel, 6], mbs=b[sel], nmb=nmb[sel],
                                           first_layers=np.full(n_sel, first), last_layers=np.full(n_sel, last),
                                           emb_split=np.full(n_sel, emb), loss_split=np.full(n_sel, loss),
                                           cp_comm=np.full(n_sel, comm), cp_a2a=np.full(n_sel, a2a),
                                           ep=np.full(n_sel, e), etp=np.full(n_sel, te),
                                           tp_ov=np.zeros(n_sel, np.int64), nvme_opt=r[sel, 7],
                                           nvme_par=r[sel, 8]))
    if not chunks:
        return {k: np.zeros(0, np.int64) for k in _COLUMNS + _NVME_COLUMNS}
    table = {k: np.concatenate([ch[k] for ch in chunks]).astype(np.int64) for k in _COLUMNS + _NVME_COLUMNS}
    if model.implementation is Implementation.TRANSFORMERS:
        table = with_hf_checkpoint_counts(table, L)
    # Transformer Engine's layers only (flash attention, megatron-core model): no overlapped rows otherwise
    return with_tp_comm_overlap(table, tp_comm_overlap if tp_comm_overlap_possible(model) else False)


def with_hf_checkpoint_counts(table: dict, num_layers: int) -> dict:
    """The candidate table of a transformers model with a ``recompute_layers`` column: each full-recompute row
    (every decoder layer checkpointed) also as every count transformers' ``every_n_layers`` reaches
    (:func:`workbench.specs.hf_checkpoint_counts`: ⌈L/k⌉ for k = 2 .. L), each recomputing only those layers."""
    full = table["recompute"] == M.RECOMPUTE_CODES[Recompute.FULL]
    out = dict(table)
    out["recompute_layers"] = np.full(len(table["tp"]), num_layers, np.int64)
    counts = [n for n in hf_checkpoint_counts(num_layers) if n < num_layers]
    if not full.any() or not counts:
        return out
    extra = {k: np.repeat(v[full], len(counts)) for k, v in out.items()}
    extra["recompute_layers"] = np.tile(np.array(counts, np.int64), int(full.sum()))
    return {k: np.concatenate([out[k], extra[k]]) for k in out}


def with_moe_stack(table: dict, model: ModelSpec, *, moe_overlap_alltoall: bool = False,
                   moe_capacity_factor: Optional[float] = None, moe_pad_to_capacity: bool = False) -> dict:
    """The candidate table of a mixture-of-experts model with megatron-core's MoE switches a plan sets on every
    Megatron row that can take them: ``moe_ov`` (``--overlap-moe-expert-parallel-comm``, on the rows
    :class:`~workbench.specs.ParallelPlan` accepts it for: expert parallel > 1, recompute other than full, and
    interleaving where there is a pipeline), ``moe_cf`` and ``moe_pad`` (``--moe-expert-capacity-factor`` and
    ``--moe-pad-expert-input-to-capacity``; 0: dropless). DeepSpeed rows keep DeepSpeed-MoE's own capacity. A dense
    model's table is returned as it is."""
    if not model.is_moe:
        return table
    out = dict(table)
    megatron = np.asarray(table["engine"]) == ENGINE_CODES[Engine.MEGATRON]
    overlap_ok = (megatron & (np.asarray(table["ep"]) > 1)
                  & (np.asarray(table["recompute"]) != M.RECOMPUTE_CODES[Recompute.FULL])
                  & ((np.asarray(table["pp"]) == 1) | (np.asarray(table["vp"]) > 1)))
    out["moe_ov"] = (overlap_ok & check_bool("moe_overlap_alltoall", moe_overlap_alltoall)).astype(np.int64)
    if moe_capacity_factor is not None:
        out["moe_cf"] = np.where(megatron, float(moe_capacity_factor), 0.0)
        out["moe_pad"] = (megatron & bool(moe_pad_to_capacity)).astype(np.int64)
    return out


def with_tp_comm_overlap(table: dict, tp_comm_overlap: Optional[bool] = None) -> dict:
    """The candidate table with its ``tp_ov`` column (Transformer Engine ``--tp-comm-overlap``), which only Megatron
    rows with tensor parallel > 1 and sequence parallel may set: ``None`` adds an overlapped copy of each such row
    (both are searched), ``True`` turns it on for them, ``False`` leaves it off everywhere."""
    eligible = ((table["engine"] == ENGINE_CODES[Engine.MEGATRON]) & (table["tp"] > 1) & (table["sp"] == 1))
    out = dict(table)
    out["tp_ov"] = np.zeros(len(table["tp"]), np.int64)
    if tp_comm_overlap is None:
        if eligible.any():
            extra = {k: v[eligible] for k, v in out.items()}
            extra["tp_ov"] = np.ones(int(eligible.sum()), np.int64)
            out = {k: np.concatenate([out[k], extra[k]]) for k in out}
    elif check_bool("tp_comm_overlap", tp_comm_overlap):
        out["tp_ov"] = eligible.astype(np.int64)
    return out


# ================================================================================================================
# Evaluation through the memory and time models
# ================================================================================================================
def memory_codes(table: dict, model: ModelSpec, precision: Precision, *, adam="fused", overlap_comm=None,
                 lora: tuple = (0, LORA_TARGETS), profile=None) -> dict:
    """The keyword arguments of :func:`workbench.memory.stage_terms` as arrays, through the one plan encoder
    (:func:`workbench.encode.memory_inputs`, which ``estimate`` uses for one plan); ``adam`` and ``overlap_comm``
    are :attr:`ParallelPlan.adam` and :attr:`ParallelPlan.overlap_comm` (``None``: each row's engine default) and
    ``lora`` ``(lora_rank, lora_targets)`` of every row."""
    cols = E.complete_columns(table, model, adam=adam, overlap_comm=overlap_comm, lora_rank=lora[0],
                              lora_targets=lora[1])
    return E.memory_inputs(model, cols, precision, profile=profile)


def time_codes(table: dict, model: ModelSpec, cluster: ClusterSpec, precision: Precision,
               lora: tuple = (0, LORA_TARGETS), *, adam="fused", overlap_comm=None, profile=None) -> dict:
    """The keyword arguments of :func:`workbench.timing.step_time_terms` as arrays, through the one plan encoder
    (:func:`workbench.encode.time_inputs`, which ``estimate`` uses for one plan)."""
    cols = E.complete_columns(table, model, adam=adam, overlap_comm=overlap_comm, lora_rank=lora[0],
                              lora_targets=lora[1])
    return E.time_inputs(model, cluster, cols, precision, profile=profile)


def _stage_total(model, stage, codes):
    t = M.stage_terms(model, stage=stage, **codes)
    total = t["weights"] + t["gradients"] + t["optimizer"] + t["activations"] + t["buffers"] + t["overhead"]
    return total, t


def evaluate(table: dict, model: ModelSpec, cluster: ClusterSpec, *, precision: Precision = Precision.BF16,
             all_stages: bool = False, lora: tuple = (0, LORA_TARGETS), adam="fused", overlap_comm=None,
             profile=None) -> dict:
    """Peak bytes per GPU, host and NVMe bytes per node and the time terms for every row of ``table``.

    The peak is taken over pipeline stages. By default stages 0 and p−1 are evaluated: every middle stage holds
    fewer parameters than the first (no embedding) and no more in-flight micro-batches (1F1B: p − stage), so one of
    the two ends always holds the peak — except under an uneven split, whose middle stages hold more layers than
    the ends: there stage 1 (the middle stage with the most in-flight micro-batches) is priced too;
    ``all_stages=True`` evaluates every stage (stage index array) and gives the
    same peaks. ``profile``: a measured :class:`workbench.calibrate.HardwareProfile` whose numbers replace the
    datasheet's, as in ``estimate``.
    """
    k = len(table["tp"])
    codes = memory_codes(table, model, precision, lora=lora, adam=adam, overlap_comm=overlap_comm, profile=profile)
    if all_stages:
        reps = table["pp"]
        row = np.repeat(np.arange(k), reps)
        starts = np.cumsum(reps) - reps
        stage = np.arange(len(row)) - np.repeat(starts, reps)
        rep_codes = {key: (val[row] if isinstance(val, np.ndarray) else val) for key, val in codes.items()}
        total, terms = _stage_total(model, stage, rep_codes)
        peak = np.full(k, -np.inf)
        np.maximum.at(peak, row, total)
        host = np.zeros(k)
        np.maximum.at(host, row, np.asarray(terms["host"], float) * np.ones(len(row)))
        nvme = np.zeros(k)
        np.maximum.at(nvme, row, np.asarray(terms["nvme"], float) * np.ones(len(row)))
        is_peak = total == peak[row]
        peak_stage = np.zeros(k, np.int64)
        peak_stage[row[is_peak][::-1]] = stage[is_peak][::-1]  # first stage reaching the peak
    else:
        first, t0 = _stage_total(model, 0, codes)
        last, t1 = _stage_total(model, table["pp"] - 1, codes)
        peak = np.maximum(first, last)
        peak_stage = np.where(last > first, table["pp"] - 1, 0)
        host = np.maximum(np.asarray(t0["host"], float), np.asarray(t1["host"], float)) * np.ones(k)
        nvme = np.maximum(np.asarray(t0["nvme"], float), np.asarray(t1["nvme"], float)) * np.ones(k)
        # an uneven split puts more layers on the middle stages than on the ends: stage 1 (the middle stage with
        # the most in-flight micro-batches) may then hold the peak; priced only for those rows
        uneven = np.flatnonzero(((np.asarray(table.get("first_layers", 0)) > 0)
                                 | (np.asarray(table.get("emb_split", 0)) > 0)) & (table["pp"] > 2))
        if len(uneven):
            sub = {key: (val[uneven] if isinstance(val, np.ndarray) and val.ndim else val)
                   for key, val in codes.items()}
            middle, _ = _stage_total(model, 1, sub)
            higher = middle > peak[uneven]
            peak[uneven] = np.maximum(peak[uneven], middle)
            peak_stage[uneven] = np.where(higher, 1, peak_stage[uneven])
    inputs = time_codes(table, model, cluster, precision, lora=lora, adam=adam, overlap_comm=overlap_comm,
                        profile=profile)
    terms = T.step_time_terms(**inputs)
    # what a node's ranks swap to NVMe (stage_terms' nvme term: 0 on the rows keeping their offload in host memory),
    # the largest over the stages, as memory_estimate_from takes it
    return dict(peak_bytes=peak, peak_stage=peak_stage, host_bytes_per_node=host * cluster.gpus_per_node,
                nvme_bytes_per_node=nvme * cluster.gpus_per_node, memory_codes=codes,
                step_seconds=np.asarray(terms["step_seconds"]), model_flops=np.asarray(terms["model_flops"]),
                terms=terms, peak_flops=inputs["peak_flops"])


def _split_at(table: dict, key: str, i: int):
    """Row ``i``'s first/last stage layers (``None``: an even share, or a table without the column)."""
    col = table.get(key)
    return int(col[i]) or None if col is not None else None


def _hierarchical_at(table: dict, i: int):
    """Row ``i``'s ``(a2a, p2p)`` sizes when its exchange is ``a2a+p2p``, else ``None``."""
    if "cp_comm" not in table or int(table["cp_comm"][i]) != T.CP_COMM_CODES["a2a+p2p"]:
        return None
    a = int(table["cp_a2a"][i])
    return (a, int(table["cp"][i]) // a)


def _offload_at(table: dict, key: str, nvme_key: str, i: int) -> str:
    """Row ``i``'s offload device of the optimizer (``off_opt``, ``nvme_opt``) or the parameters: ``none``, ``cpu``
    or ``nvme``."""
    if not table[key][i]:
        return "none"
    return "nvme" if nvme_key in table and table[nvme_key][i] else "cpu"


def _plan_at(table: dict, i: int, cluster: ClusterSpec, global_batch_size: int, precision,
             lora: tuple = (0, LORA_TARGETS), stack=None) -> ParallelPlan:
    return ParallelPlan(
        world_size=cluster.world_size, engine=_ENGINE_BY_CODE[int(table["engine"][i])],
        tensor_parallel=int(table["tp"][i]), pipeline_parallel=int(table["pp"][i]),
        virtual_pipeline=int(table["vp"][i]), context_parallel=int(table["cp"][i]),
        cp_comm_type=_CP_COMM_BY_CODE[int(table["cp_comm"][i]) if "cp_comm" in table else 0],
        hierarchical_context_parallel_sizes=_hierarchical_at(table, i),
        sequence_parallel=bool(table["sp"][i]), zero_stage=int(table["zero"][i]),
        offload_optimizer=_offload_at(table, "off_opt", "nvme_opt", i),
        offload_params=_offload_at(table, "off_par", "nvme_par", i),
        distributed_optimizer=bool(table["dist_opt"][i]), recompute=_RECOMPUTE_BY_CODE[int(table["recompute"][i])],
        recompute_layers=_hf_recompute_layers_at(table, i),
        micro_batch_size=int(table["mbs"][i]), global_batch_size=global_batch_size, precision=precision,
        lora_rank=lora[0], lora_targets=lora[1], first_stage_layers=_split_at(table, "first_layers", i),
        last_stage_layers=_split_at(table, "last_layers", i),
        embedding_in_pipeline_split=bool(_split_at(table, "emb_split", i)),
        loss_in_pipeline_split=bool(_split_at(table, "loss_split", i)),
        expert_parallel=int(table["ep"][i]) if "ep" in table else 1,
        expert_tensor_parallel=(int(table["etp"][i]) if "etp" in table and int(table["etp"][i]) != int(table["tp"][i])
                                else None),
        fp8_param_gather=bool(table["fp8_pg"][i]) if "fp8_pg" in table else False,
        grad_reduce_fp32=(bool(table["grad_fp32"][i]) if "grad_fp32" in table and int(table["grad_fp32"][i]) >= 0
                          else None),
        expandable_segments=bool(table["expseg"][i]) if "expseg" in table else False,
        pin_memory=bool(table["pin"][i]) if "pin" in table else True,
        moe_load_imbalance=float(table["moe_imb"][i]) if "moe_imb" in table else 1.0,
        tp_comm_overlap=bool(table["tp_ov"][i]) if "tp_ov" in table else False,
        moe_overlap_alltoall=bool(table["moe_ov"][i]) if "moe_ov" in table else False,
        moe_capacity_factor=float(table["moe_cf"][i]) if "moe_cf" in table and table["moe_cf"][i] > 0 else None,
        moe_pad_to_capacity=bool(table["moe_pad"][i]) if "moe_pad" in table else False,
        cross_entropy_fusion=(_XENT_BY_CODE[int(table["xent"][i])] if "xent" in table else CrossEntropyFusion.NONE),
        **_zero_sizes_at(table, i), **(stack or {}))


ZERO_SIZE_COLUMNS = {"reduce_bucket_size": "rbucket", "prefetch_bucket_size": "pbucket",
                     "param_persistence_threshold": "persist", "sub_group_size": "sgroup"}
"""DeepSpeed's ZeRO sizes a search prices every row with: plan field (:data:`workbench.specs.ZERO_SIZE_STAGES`)
-> table column (:mod:`workbench.encode`'s)."""


def zero_size_columns(count: int, **sizes) -> dict:
    """The table columns of the DeepSpeed ZeRO sizes given (``reduce_bucket_size``, ``prefetch_bucket_size``,
    ``param_persistence_threshold``, ``sub_group_size``; ``None``: DeepSpeed's default, no column), one value for
    every row: a row's plan carries each only where DeepSpeed reads it (:func:`_zero_sizes_at`)."""
    out = {}
    for name, value in sizes.items():
        if value is not None:
            ParallelPlan(world_size=1, zero_stage=3, **{name: value})  # checked as a plan checks it
            out[ZERO_SIZE_COLUMNS[name]] = np.full(count, int(value), np.int64)
    return out


def _zero_sizes_at(table: dict, i: int) -> dict:
    """Row ``i``'s DeepSpeed ZeRO sizes, on a DeepSpeed row at a stage that reads them."""
    engine, zero = int(table["engine"][i]), int(table["zero"][i])
    return {name: int(table[column][i]) for name, column in ZERO_SIZE_COLUMNS.items()
            if column in table and engine != ENGINE_CODES[Engine.MEGATRON] and zero >= ZERO_SIZE_STAGES[name]}


def _hf_recompute_layers_at(table: dict, i: int):
    """Row ``i``'s checkpointed layer count from :func:`with_hf_checkpoint_counts` (``None``: every layer, or a
    table without the column)."""
    if "recompute_layers" not in table or int(table["recompute"][i]) != M.RECOMPUTE_CODES[Recompute.FULL]:
        return None
    n = int(table["recompute_layers"][i])
    return None if n >= int(np.max(table["recompute_layers"])) else n


def _result_at(table, ev, i, model, cluster, gbs, precision, lora=(0, LORA_TARGETS), stack=None) -> PlanResult:
    plan = _plan_at(table, i, cluster, gbs, precision, lora, stack)
    step = float(ev["step_seconds"][i])
    model_flops_per_s = flops_per_second_per_gpu(float(ev["model_flops"][i]), step, cluster.world_size)
    stage = int(ev["peak_stage"][i])
    row = {k: (v[i] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in ev["memory_codes"].items()}
    mt = M.stage_terms(model, stage=stage, **row)  # the evaluated row's codes: no second encoding
    peak = int(round(float(ev["peak_bytes"][i])))
    band_high = int(round(peak * float(ev["band_high"][i]))) if "band_high" in ev else 0
    return PlanResult(
        band_high_bytes=band_high, risky=bool(ev["risky"][i]) if "risky" in ev else False,
        plan=plan, peak_bytes=peak, peak_stage=stage,
        capacity_bytes=cluster.gpu.memory_bytes, host_bytes_per_node=int(round(float(ev["host_bytes_per_node"][i]))),
        nvme_bytes_per_node=int(round(float(ev["nvme_bytes_per_node"][i]))) if "nvme_bytes_per_node" in ev else 0,
        step_seconds=step, tokens_per_second=gbs * model.seq_length / step, model_tflops_per_gpu=model_flops_per_s / 1e12,
        mfu=model_flops_per_s / float(ev["peak_flops"]),
        time_breakdown={k: float(np.asarray(ev["terms"][k])[i]) for k in T.TERMS},
        memory_breakdown={k: int(round(float(mt[k]))) for k in
                          ("weights", "gradients", "optimizer", "activations", "buffers", "overhead")})


# ================================================================================================================
# Search
# ================================================================================================================
def hf_engines(engines) -> list:
    """The engines of ``engines`` a Hugging Face (transformers) model is searched under: DeepSpeed's ZeRO data
    parallel only."""
    return [e for e in engines if Engine.parse(e, "engines") is Engine.DEEPSPEED]


def lora_engines(engines) -> list:
    """The engines of ``engines`` a LoRA search keeps: the DeepSpeed ones (megatron-core's own DDP trains every
    parameter)."""
    return [e for e in engines if Engine.parse(e, "engines") is not Engine.MEGATRON]


def search(model: ModelSpec, cluster: ClusterSpec, *, global_batch_size: int, seq_length: Optional[int] = None,
           top: int = 10, headroom: float = DEFAULT_HEADROOM, engines: Sequence = ENGINES,
           zero_stages: Sequence[int] = (0, 1, 2, 3), offload: bool = True,
           recompute: Sequence = ("none", "selective", "full"), precision="bf16",
           allow_cross_node_tp: bool = False, max_context_parallel: Optional[int] = None,
           all_stages: bool = False, lora_rank: int = 0, lora_targets: Sequence = LORA_TARGETS, adam="fused",
           overlap_comm=None, profile=None, fp8_recipe="delayed", fp8_param_gather: bool = False,
           grad_reduce_fp32: Optional[bool] = None, expandable_segments: bool = False,
           moe_load_imbalance: float = 1.0, tp_comm_overlap: Optional[bool] = None,
           cross_entropy_fusion="none", fit_on: str = "point", moe_overlap_alltoall: bool = False,
           moe_capacity_factor: Optional[float] = None, moe_pad_to_capacity: bool = False,
           pin_memory: bool = True, reduce_bucket_size: Optional[int] = None,
           prefetch_bucket_size: Optional[int] = None,
           param_persistence_threshold: Optional[int] = None,
           sub_group_size: Optional[int] = None) -> PlanSearch:
    """Search every valid plan (see the module docstring) and rank the feasible ones by step time.

    ``profile``: a :class:`workbench.calibrate.HardwareProfile` (or its name or path) whose measurements replace
    datasheet numbers for every plan, exactly as ``estimate`` applies it.

    ``lora_rank`` > 0 searches LoRA fine-tunes (adapters on ``lora_targets``, base weights frozen): DeepSpeed
    engines only. ``adam`` and ``overlap_comm`` describe the stack every candidate runs (:class:`ParallelPlan`
    fields); the attention kernel is the model's (:attr:`ModelSpec.attention`).

    ``precision='fp8'`` searches Megatron plans only (FP8 is modelled as Megatron-LM trains it with Transformer
    Engine), every row with the scaling recipe ``fp8_recipe``; ``fp8_param_gather`` keeps the linear weights in FP8
    and all-gathers them in FP8 on the rows with the distributed optimizer (Megatron-LM ``--fp8-param-gather``).

    ``grad_reduce_fp32`` sets Megatron's main-gradient dtype on every Megatron row (:attr:`ParallelPlan.
    grad_reduce_fp32`; ``None``: Megatron-LM's default, fp32 with bf16).

    ``expandable_segments``: every candidate runs with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
    (:attr:`ParallelPlan.expandable_segments`: a smaller allocator reserve).

    ``pin_memory``: DeepSpeed's offload buffers on every offloading row page-locked (its default) or pageable
    (:attr:`ParallelPlan.pin_memory`: less host memory, slower copies).

    ``reduce_bucket_size``, ``prefetch_bucket_size``, ``param_persistence_threshold``, ``sub_group_size``:
    DeepSpeed's ZeRO sizes every DeepSpeed row runs with (``None``: DeepSpeed's defaults; :class:`ParallelPlan`'s
    fields of those names).

    ``tp_comm_overlap``: Transformer Engine's TP communication overlap on the Megatron rows with TP > 1 and
    sequence parallel (:func:`with_tp_comm_overlap`; ``None``: both with and without it are searched).

    ``cross_entropy_fusion``: Megatron's loss kernels on every Megatron row (:attr:`ParallelPlan.
    cross_entropy_fusion`; other engines compute their own loss).

    ``moe_overlap_alltoall``, ``moe_capacity_factor`` and ``moe_pad_to_capacity`` (a mixture-of-experts model):
    megatron-core's all-to-all overlap and token drop on every Megatron row that can take them
    (:func:`with_moe_stack`; off and dropless by default, as in megatron-core).

    ``fit_on``: what must pass the headroom for a plan to be feasible — ``"point"`` (the point estimate of the
    peak; plans that pass only there are marked risky, :func:`_fits` says why this is the default) or ``"band"``
    (the peak at the held-out error band's upper side, as ``estimate`` and the advisor judge one plan: no risky
    plan is ranked).

    Raises ``ValueError`` naming the constraint that bites when nothing is valid or nothing fits.
    """
    start = _time.perf_counter()
    fit_on = check_fit_on(fit_on)
    check_spec_types(model=model, cluster=cluster)
    global_batch_size = check_int("global_batch_size", global_batch_size)
    headroom = check_float("headroom", headroom, strict=False, below=1.0)
    top = check_int("top", top, maximum=10**6)
    if max_context_parallel is None:
        max_context_parallel = default_max_context_parallel(model.seq_length)
    max_context_parallel = check_int("max_context_parallel", max_context_parallel)
    offload = check_bool("offload", offload)
    allow_cross_node_tp = check_bool("allow_cross_node_tp", allow_cross_node_tp)
    if seq_length is not None:
        seq_length = check_int("seq_length", seq_length)
    if not engines:
        raise ValueError("engines is empty: give at least one of deepspeed, megatron, megatron-deepspeed")
    precision = Precision.parse(precision, "precision")
    stack = dict(adam=AdamImpl.parse(adam, "adam"),
                 overlap_comm=None if overlap_comm is None else check_bool("overlap_comm", overlap_comm))
    if precision is Precision.BF16 and not cluster.gpu.peak_tflops.get("bf16"):
        raise ValueError(f"precision=bf16 is not supported by gpu={cluster.gpu.name}; use fp16")
    if precision.is_fp8:
        if not cluster.gpu.peak_tflops.get("fp8"):
            raise ValueError(f"precision=fp8 is not supported by gpu={cluster.gpu.name} (no FP8 tensor cores); "
                             f"use bf16")
        engines = [e for e in engines if Engine.parse(e, "engines") is Engine.MEGATRON]
        if not engines:
            raise ValueError("precision=fp8 is modelled for engine 'megatron' (Transformer Engine under Megatron-LM); "
                             "engines lists none")
        stack["fp8_recipe"] = Fp8Recipe.parse(fp8_recipe, "fp8_recipe")
    if seq_length is not None and seq_length != model.seq_length:
        model = model.replace(seq_length=seq_length)
    probe = ParallelPlan(world_size=cluster.world_size, lora_rank=lora_rank, lora_targets=lora_targets)
    lora = (probe.lora_rank, probe.lora_targets)
    if model.implementation is Implementation.TRANSFORMERS:  # DeepSpeed ZeRO data parallel only
        engines = hf_engines(engines)
        if not engines:
            raise ValueError(f"{model.name} is a Hugging Face model: it trains under engine 'deepspeed' (ZeRO data "
                             f"parallel); engines lists none")
        # transformers checkpoints whole decoder layers (gradient_checkpointing_enable): no selective recompute
        recompute = [r for r in recompute if Recompute.parse(r, "recompute") is not Recompute.SELECTIVE]
        if not recompute:
            raise ValueError(f"{model.name} is a Hugging Face model: it checkpoints whole decoder layers "
                             f"(recompute 'full') or none; recompute lists only 'selective'")
    if lora[0]:
        engines = lora_engines(engines)
        if not engines:
            raise ValueError(f"lora_rank={lora[0]} needs a DeepSpeed engine; engines lists only megatron")
    table = enumerate_candidates(model, cluster, global_batch_size, engines=engines, zero_stages=zero_stages,
                                 offload=offload, recompute=recompute, allow_cross_node_tp=allow_cross_node_tp,
                                 max_context_parallel=max_context_parallel, tp_comm_overlap=tp_comm_overlap)
    count = len(table["tp"])
    if count == 0:
        raise ValueError(_no_valid_plan_message(model, cluster, global_batch_size))
    from workbench.calibrate.profile import no_profile_record, resolve_profile

    profile = resolve_profile(profile)
    # applied() refuses a profile measured on another GPU, naming both
    profile_record = profile.applied(cluster, precision) if profile is not None else no_profile_record(cluster.gpu.name)
    if precision.is_fp8:  # every row with the recipe (encode.complete_columns keeps a given column)
        table["fp8_recipe"] = np.full(count, E.FP8_RECIPE_CODES[str(stack["fp8_recipe"])], np.int64)
        # --fp8-param-gather where Megatron allows it: the rows with the distributed optimizer
        table["fp8_pg"] = np.asarray(table["dist_opt"], np.int64) * int(check_bool("fp8_param_gather",
                                                                                 fp8_param_gather))
    elif fp8_param_gather:
        raise ValueError(f"fp8_param_gather=True needs precision='fp8' (got precision='{precision}')")
    if grad_reduce_fp32 is not None:
        table["grad_fp32"] = np.where(table["engine"] == ENGINE_CODES[Engine.MEGATRON],
                                      int(check_bool("grad_reduce_fp32", grad_reduce_fp32)), -1)
    xent = CrossEntropyFusion.parse(cross_entropy_fusion, "cross_entropy_fusion")
    table["xent"] = np.where(table["engine"] == ENGINE_CODES[Engine.MEGATRON], CROSS_ENTROPY_FUSION_CODES[xent], 0)
    # the allocator every row runs with (encode.complete_columns keeps a given column)
    table["expseg"] = np.full(count, int(check_bool("expandable_segments", expandable_segments)), np.int64)
    table["pin"] = np.full(count, int(check_bool("pin_memory", pin_memory)), np.int64)  # the offload buffers
    table.update(zero_size_columns(count, reduce_bucket_size=reduce_bucket_size,
                                   prefetch_bucket_size=prefetch_bucket_size,
                                   param_persistence_threshold=param_persistence_threshold,
                                   sub_group_size=sub_group_size))
    if model.is_moe:  # the routing imbalance every MoE row is priced with (encode.moe_rank_load)
        table["moe_imb"] = np.full(count, check_float("moe_load_imbalance", moe_load_imbalance, minimum=1.0,
                                                      strict=False))
    if moe_capacity_factor is not None:
        moe_capacity_factor = check_float("moe_capacity_factor", moe_capacity_factor)
    if moe_pad_to_capacity and moe_capacity_factor is None:
        raise ValueError("moe_pad_to_capacity=True needs moe_capacity_factor (megatron-core pads each expert's "
                         "input to its capacity)")
    given = [f"moe_overlap_alltoall={bool(moe_overlap_alltoall)}"] if moe_overlap_alltoall else []
    given += [f"moe_capacity_factor={moe_capacity_factor:g}"] if moe_capacity_factor is not None else []
    if not model.is_moe and given:
        raise ValueError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} a mixture-of-experts model "
                         f"({model.name} has num_experts={model.num_experts})")
    table = with_moe_stack(table, model, moe_overlap_alltoall=moe_overlap_alltoall,
                           moe_capacity_factor=moe_capacity_factor, moe_pad_to_capacity=bool(moe_pad_to_capacity))
    eval_stack = {k: v for k, v in stack.items() if k != "fp8_recipe"}
    ev = evaluate(table, model, cluster, precision=precision, all_stages=all_stages, lora=lora, profile=profile,
                  **eval_stack)
    fits_gpu, fits_host = _fits(table, ev, cluster, headroom, fit_on)
    feasible = np.flatnonzero(fits_gpu & fits_host)
    if not len(feasible):
        # host memory failing a cluster without NVMe: the same rows with the optimizer on NVMe, priced on demand
        nvme_rows = None if not offload or cluster.nvme_gib_per_node > 0 else (
            lambda: _nvme_alternative(table, model, cluster, headroom, fit_on, precision=precision,
                                      all_stages=all_stages, lora=lora, profile=profile, **eval_stack))
        smaller_rows = None if not offload else (
            lambda: _sub_group_alternative(table, model, cluster, headroom, fit_on, precision=precision,
                                           all_stages=all_stages, lora=lora, profile=profile, **eval_stack))
        message = _nothing_fits_message(table, ev, model, cluster, global_batch_size, headroom, precision,
                                        fits_gpu, engines, offload, fit_on, nvme_rows, smaller_rows)
        if not lora[0]:
            message += _lora_alternative(model, cluster, global_batch_size=global_batch_size, headroom=headroom,
                                         engines=engines, zero_stages=zero_stages, offload=offload,
                                         recompute=recompute, precision=precision, profile=profile,
                                         expandable_segments=expandable_segments, fit_on=fit_on,
                                         pin_memory=pin_memory)
        raise ValueError(message)
    step = ev["step_seconds"][feasible]
    peak = ev["peak_bytes"][feasible]
    order = feasible[np.lexsort((peak, step))]
    # Pareto front over (step time ↓, peak bytes ↓): walk fastest first, keep strictly lower memory
    peaks_in_order = ev["peak_bytes"][order]
    running_min = np.minimum.accumulate(peaks_in_order)
    front = np.ones(len(order), bool)
    front[1:] = peaks_in_order[1:] < running_min[:-1]
    pareto_idx = order[front]
    gbs = int(global_batch_size)
    ranked = tuple(_result_at(table, ev, int(i), model, cluster, gbs, precision, lora, stack) for i in order[:top])
    pareto = tuple(_result_at(table, ev, int(i), model, cluster, gbs, precision, lora, stack) for i in pareto_idx)
    runner_up = ranked[1] if len(ranked) > 1 else None
    explanation = explain(ranked[0], runner_up, model=model, cluster=cluster)
    # the runner-up often differs only in a detail; also compare with the best plan of another layout
    layout_keys = ("engine", "tp", "pp", "cp", "zero", "dist_opt")
    w = int(order[0])
    other = np.zeros(len(order), bool)
    for k in layout_keys:
        other |= table[k][order] != table[k][w]
    if other.any() and (runner_up is None or all(table[k][int(order[1])] == table[k][w] for k in layout_keys)):
        alt = _result_at(table, ev, int(order[np.argmax(other)]), model, cluster, gbs, precision, lora, stack)
        explanation += "\n" + explain(ranked[0], alt, model=model, cluster=cluster, label="Best other layout",
                                       head=False)
    explanation += _long_context_note(model, cluster, ranked[0].plan, profile)
    explanation += cp_exchange_note(table, ev, int(order[0]), feasible)
    explanation += nvme_note(table, ev, int(order[0]), fits_gpu, cluster, gbs, precision)
    if ranked[0].risky:
        explanation += "\nMemory margin: the winner " + risk_note(ranked[0], headroom)
    return PlanSearch(model=model, cluster=cluster, global_batch_size=gbs, headroom=headroom, ranked=ranked,
                      pareto=pareto, explanation=explanation, evaluated=count, feasible=int(len(feasible)),
                      elapsed_seconds=_time.perf_counter() - start, profile=profile_record,
                      risky=int(np.count_nonzero(ev["risky"][feasible])), fit_on=fit_on)


def _long_context_note(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, profile=None) -> str:
    """At long context, the winner's GPUs used the other way (context instead of tensor parallel, or the reverse),
    priced by :func:`workbench.advisor.context_parallel_choice`: a line for the explanation, '' when not relevant."""
    from workbench.advisor import context_parallel_choice, ulysses_choice
    from workbench.estimate import estimate

    if model.seq_length >= 16384 and plan.is_ulysses:  # DeepSpeed-Ulysses against ZeRO-3 + full recompute
        found = ulysses_choice(model, cluster, plan, estimate(model, cluster, plan, profile, checks=False), profile)
        return "" if found is None else "\nLong context: " + found.message
    if model.seq_length < 16384 or plan.tensor_parallel * plan.context_parallel == 1:
        return ""
    found = context_parallel_choice(model, cluster, plan, estimate(model, cluster, plan, profile, checks=False),
                                    profile)
    return "" if found is None else "\nLong context: " + found.message


def cp_exchange_note(table: dict, ev: dict, winner: int, feasible) -> str:
    """Why the winner's context-parallel exchange beat the others: the same plan (every column of ``table`` but
    ``cp_comm`` and ``cp_a2a``) under each searched ``--cp-comm-type``, with its step, the exposed exchange
    (``cp_comm`` term) and its peak memory, fastest first; '' when the winner has no CP or no other kind was
    searched for it."""
    if int(table["cp"][winner]) == 1 or "cp_comm" not in table:
        return ""
    same = np.ones(len(table["tp"]), bool)
    for key in table:  # every column, the searched checkpoint counts of a transformers model included
        if key not in ("cp_comm", "cp_a2a"):
            same &= table[key] == table[key][winner]
    rows = np.flatnonzero(same)
    if len(rows) < 2:
        return ""
    ok = np.zeros(len(table["tp"]), bool)
    ok[np.asarray(feasible, np.int64)] = True
    rows = rows[np.argsort(ev["step_seconds"][rows], kind="stable")]
    cp_term = np.broadcast_to(np.asarray(ev["terms"]["cp_comm"], float), (len(table["tp"]),))
    parts = []
    for i in rows:
        kind = str(_CP_COMM_BY_CODE[int(table["cp_comm"][i])])
        if kind == "a2a+p2p":
            kind += f" {int(table['cp_a2a'][i])}x{int(table['cp'][i]) // int(table['cp_a2a'][i])}"
        parts.append(f"{kind} {ev['step_seconds'][i]:.3f} s (exchange exposed {cp_term[i]:.3f} s, peak "
                     f"{ev['peak_bytes'][i] / GiB:.1f} GiB{'' if ok[i] else ', does not fit'})")
    best = str(_CP_COMM_BY_CODE[int(table["cp_comm"][winner])])
    return (f"\nCP exchange (same plan, each --cp-comm-type): " + "; ".join(parts)
            + f". {best} wins: {_CP_COMM_WORDS[best]}.")


def nvme_note(table: dict, ev: dict, winner: int, fits_gpu, cluster: ClusterSpec, gbs: int, precision) -> str:
    """Why the winner swaps to NVMe: what it puts there, at which rates, and the fastest plan keeping its offload in
    host memory that fits the GPU, with the host memory it would need; '' when the winner does not use NVMe."""
    if not any(key in table and table[key][winner] for key in _NVME_COLUMNS):
        return ""
    offload = float(np.broadcast_to(np.asarray(ev["terms"]["offload"], float), (len(table["tp"]),))[winner])
    text = (f"\nNVMe: the winner swaps {ev['nvme_bytes_per_node'][winner] / GiB:.1f} GiB per node to NVMe (of "
            f"{cluster.nvme_gib_per_node:g} GiB; {cluster.nvme_read_gb_per_s:g} GB/s read, "
            f"{cluster.nvme_write_gb_per_s:g} GB/s write per node: {offload:.3f} s of its "
            f"{float(ev['step_seconds'][winner]):.3f} s step is offload)")
    in_host = np.flatnonzero(fits_gpu & (table["nvme_opt"] == 0) & (table["nvme_par"] == 0))
    if not len(in_host):
        return text + "; no plan that keeps its states in host memory fits the GPU."
    i = int(in_host[np.argmin(ev["step_seconds"][in_host])])
    host = float(ev["host_bytes_per_node"][i])
    if host <= cluster.host_memory_gib_per_node * GiB:
        return text + "."
    return (text + f"; the fastest plan that fits the GPU with its offload in host memory "
                   f"({describe_plan(_plan_at(table, i, cluster, gbs, precision))}, {ev['step_seconds'][i]:.3f} "
                   f"s/step) needs {host / GiB:.1f} GiB of host memory per node, over the node's "
                   f"{cluster.host_memory_gib_per_node:g} GiB.")


def _missing_from_search(table: dict, cols: dict) -> str:
    """Which of a plan's columns the enumeration never pairs with the ones before it (in :data:`_COLUMNS` order), and
    the values it does enumerate there: why :func:`rank_plan` finds no row for the plan."""
    match = np.ones(len(table["tp"]), bool)
    for key in _COLUMNS:
        here = match & (table[key] == int(cols[key]))
        if not here.any():
            names = {"cp_comm": _CP_COMM_BY_CODE, "recompute": _RECOMPUTE_BY_CODE, "engine": _ENGINE_BY_CODE}.get(key)
            label = (lambda v: str(names[v])) if names else str
            seen = sorted({int(v) for v in np.asarray(table[key])[match]})
            shown = ", ".join(label(v) for v in seen[:12]) + (", ..." if len(seen) > 12 else "")
            return (f"{key} {label(int(cols[key]))} is not searched for this layout (with the plan's other settings "
                    f"up to {key}, the planner enumerates {key} {shown})")
        match = here
    for key in _NVME_COLUMNS:
        if key in table and key in cols and not (match & (table[key] == int(cols[key]))).any():
            return (f"{key} {int(cols[key])} is not searched for this layout: the planner offloads to NVMe where the "
                    f"cluster declares NVMe (nvme_gib_per_node > 0, --nvme-gib) and offload is allowed, at ZeRO-3 "
                    f"({'; '.join(_offload_words(o) for o in NVME_OFFLOADS)})")
    return "no row matches"


def _offload_words(codes) -> str:
    """One entry of :data:`NVME_OFFLOADS` in a plan's words: ``optimizer nvme, params cpu``."""
    table = {k: np.array([v]) for k, v in zip(("off_opt", "off_par") + _NVME_COLUMNS, codes)}
    return (f"optimizer {_offload_at(table, 'off_opt', 'nvme_opt', 0)}, "
            f"params {_offload_at(table, 'off_par', 'nvme_par', 0)}")


def risk_note(result: PlanResult, headroom: float) -> str:
    """Why ``result`` is marked risky, with the numbers ('' when it is not)."""
    if not result.risky:
        return ""
    limit = (1.0 - headroom) * result.capacity_bytes
    return (f"fits on the point estimate only: peak {result.peak_bytes / GiB:.1f} GiB, up to "
            f"{(result.peak_bytes + result.band_high_bytes) / GiB:.1f} GiB at the upper side of the held-out error "
            f"band (+{result.band_high_bytes / max(result.peak_bytes, 1):.0%}), over the {limit / GiB:.1f} GiB that "
            f"{headroom:.0%} headroom leaves")


def _band_high(table: dict) -> np.ndarray:
    """Per row, the upper side of the held-out memory error band of its engine and recompute mode (rows with the
    parameters on the host, or DeepSpeed's optimizer alone: that regime's band), as a fraction of the peak
    (:func:`workbench.memory.error_band`; 0 where no held-out run of that engine exists)."""
    band_high = np.zeros(len(table["engine"]))
    expseg = np.asarray(table.get("expseg", 0)) > 0  # the allocator mode the rows run with
    for engine, code in ENGINE_CODES.items():
        for mode, rc in M.RECOMPUTE_CODES.items():
            for expandable in (False, True):
                band = M.error_band(engine, "device", mode, expandable)
                if band is not None:
                    band_high = np.where((table["engine"] == code) & (table["recompute"] == rc)
                                         & (expseg == expandable), band[1], band_high)
    # ZeRO-3 with the parameters on the host: their own band, whatever the recompute mode (error_band takes it before
    # the recompute mode's)
    off_par = np.asarray(table.get("off_par", 0)) > 0
    band = M.error_band(Engine.DEEPSPEED, "device", offload_params=True)
    if band is not None and off_par.any():
        band_high = np.where(off_par, band[1], band_high)
    # DeepSpeed with the optimizer on the host (parameters on the GPU): that regime's whole-device band
    off_opt = (np.asarray(table.get("off_opt", 0)) > 0) & ~off_par & (table["engine"] != ENGINE_CODES[Engine.MEGATRON])
    band = M.error_band(Engine.DEEPSPEED, "device", offload_optimizer=True)
    if band is not None and off_opt.any():
        band_high = np.where(off_opt, band[1], band_high)
    return band_high


FIT_ON = ("point", "band")
"""What the planner judges a plan's fit on (:func:`search`'s ``fit_on``)."""


def check_fit_on(value) -> str:
    """``value`` as one of :data:`FIT_ON`, or ``ValueError`` naming the field and the choices."""
    if value not in FIT_ON:
        raise ValueError(f"fit_on={value!r} must be one of {', '.join(FIT_ON)} (the point estimate of the peak, or "
                         f"the peak at the held-out error band's upper side)")
    return value


def _fits(table: dict, ev: dict, cluster: ClusterSpec, headroom: float, fit_on: str = "point") -> tuple:
    """``(fits_gpu, fits_host)`` boolean arrays: the peak within (1 − headroom) × GPU memory — its point estimate
    with ``fit_on`` ``"point"``, the error band's upper side with ``"band"`` — and the offloaded bytes within the
    node's host memory and, offloaded to NVMe, its NVMe (``nvme_gib_per_node``, as ``MemoryEstimate.fits_nvme``).
    Also writes ``ev["band_high"]`` (the band's upper side, a fraction of the peak) and ``ev["risky"]`` (fits on the
    point estimate, not at the band's upper side; none with ``"band"``).

    Why the point estimate decides by default and the band only marks: the band is the largest under-estimate over
    held-out 1-GPU shapes (one outlier sets it for every plan of that engine), so excluding on it drops plans that
    published runs train with; the headroom is the user's margin, and a risky plan says how much more it could
    need. ``"band"`` is for the user who would rather lose those plans than meet an OOM."""
    limit = (1.0 - headroom) * cluster.gpu.memory_bytes
    ev["band_high"] = _band_high(table)
    fits_gpu = ev["peak_bytes"] <= limit
    ev["risky"] = fits_gpu & (ev["peak_bytes"] * (1.0 + ev["band_high"]) > limit)
    if fit_on == "band":
        fits_gpu = fits_gpu & ~ev["risky"]
        ev["risky"] = np.zeros_like(ev["risky"])
    fits_host = ev["host_bytes_per_node"] <= cluster.host_memory_gib_per_node * GiB
    if "nvme_bytes_per_node" in ev:  # what goes to NVMe must fit the node's (0 on every row that keeps it on the host)
        fits_host = fits_host & (ev["nvme_bytes_per_node"] <= cluster.nvme_gib_per_node * GiB)
    return fits_gpu, fits_host


def _no_valid_plan_message(model, cluster, gbs) -> str:
    W = cluster.world_size
    return (f"no valid plan: global_batch_size={gbs} is not divisible by any data-parallel size world_size({W}) / "
            f"(tensor_parallel · pipeline_parallel · context_parallel) allowed for {model.name} (heads "
            f"{model.num_attention_heads}, query groups {model.num_query_groups}, layers {model.num_layers}); "
            f"use a global batch that is a multiple of {W // _largest_model_parallel(model, cluster)}")


def _largest_model_parallel(model, cluster) -> int:
    W = cluster.world_size
    best = 1
    g = int(np.gcd(np.gcd(model.num_attention_heads, model.num_query_groups), model.ffn_hidden_size))
    for t in _divisors(g):
        if group_crosses_nodes(1, t, cluster.gpus_per_node):
            continue
        for p in _divisors(model.num_layers):
            if W % (t * p) == 0:
                best = max(best, t * p)
    return best


LORA_SUGGESTED_RANK = 16
"""The LoRA rank the planner tries when a full fine-tune fits nowhere (a common default; Hu et al. 2021 find small
ranks enough)."""


def _lora_alternative(model, cluster, **kwargs) -> str:
    """'; LoRA r=16 fits: …' when a LoRA fine-tune of every projection fits where the full fine-tune does not."""
    engines = [e for e in kwargs.pop("engines") if Engine.parse(e, "engine") is not Engine.MEGATRON]
    if not engines:
        return ""
    try:
        found = search(model, cluster, engines=engines, lora_rank=LORA_SUGGESTED_RANK, top=1, **kwargs)
    except ValueError:
        return f"; LoRA r={LORA_SUGGESTED_RANK} on every projection does not fit either"
    best = found.best
    return (f". The full fine-tune does not fit on {cluster.world_size} x {cluster.gpu.name}; LoRA "
            f"r={LORA_SUGGESTED_RANK} does, with {describe_plan(best.plan)} ({best.peak_bytes / GiB:.1f} GiB per GPU, "
            f"{best.step_seconds:.2f} s/step; --lora-rank {LORA_SUGGESTED_RANK})")


def _nvme_alternative(table: dict, model: ModelSpec, cluster: ClusterSpec, headroom: float, fit_on: str,
                      **evaluate_kwargs):
    """For a cluster that declares no NVMe: ``(rows, ev, i)``, the rows of ``table`` that keep the optimizer on the
    CPU at ZeRO-3 with each of :data:`NVME_OFFLOADS` instead, priced by :func:`evaluate`, and the one that needs the
    least NVMe of those that fit the GPU and host memory; ``None`` when none does."""
    on_cpu = np.asarray(table.get("nvme_opt", 0)) == 0
    source = np.flatnonzero((table["engine"] != ENGINE_CODES[Engine.MEGATRON]) & (table["zero"] == 3)
                            & (table["off_opt"] == 1) & (table["off_par"] == 0) & on_cpu)
    if not len(source):
        return None
    variants = len(NVME_OFFLOADS)
    rows = {k: np.repeat(np.asarray(v)[source], variants) if np.ndim(v) else v for k, v in table.items()}
    for j, key in enumerate(("off_opt", "off_par") + _NVME_COLUMNS):
        rows[key] = np.tile(np.array([o[j] for o in NVME_OFFLOADS], np.int64), len(source))
    ev = evaluate(rows, model, cluster, **evaluate_kwargs)
    fits_gpu, _ = _fits(rows, ev, cluster, headroom, fit_on)
    ok = np.flatnonzero(fits_gpu & (ev["host_bytes_per_node"] <= cluster.host_memory_gib_per_node * GiB))
    if not len(ok):
        return None
    return rows, ev, int(ok[np.lexsort((ev["host_bytes_per_node"][ok], ev["nvme_bytes_per_node"][ok]))[0]])


def _sub_group_alternative(table: dict, model: ModelSpec, cluster: ClusterSpec, headroom: float, fit_on: str,
                           **evaluate_kwargs):
    """``(rows, ev, i)``: the rows of ``table`` at ZeRO-3 with the optimizer offloaded whose sub-groups are larger
    than :data:`workbench.advisor.SMALLER_SUB_GROUP_ELEMENTS`, priced by :func:`evaluate` at that
    ``sub_group_size`` (DeepSpeed's host buffers per sub-group shrink with it), and the one that needs the least host
    memory of those that then fit the GPU, host memory and NVMe; ``None`` when none does."""
    from workbench.advisor import SMALLER_SUB_GROUP_ELEMENTS

    count = len(table["tp"])
    sizes = np.broadcast_to(np.asarray(table.get("sgroup", M.DS_SUB_GROUP_ELEMENTS)), (count,))
    source = np.flatnonzero((table["engine"] != ENGINE_CODES[Engine.MEGATRON]) & (table["zero"] == 3)
                            & (table["off_opt"] == 1) & (sizes > SMALLER_SUB_GROUP_ELEMENTS))
    if not len(source):
        return None
    rows = {k: np.asarray(v)[source] if np.ndim(v) else v for k, v in table.items()}
    rows["sgroup"] = np.full(len(source), SMALLER_SUB_GROUP_ELEMENTS, np.int64)
    ev = evaluate(rows, model, cluster, **evaluate_kwargs)
    fits_gpu, fits_host = _fits(rows, ev, cluster, headroom, fit_on)
    ok = np.flatnonzero(fits_gpu & fits_host)
    if not len(ok):
        return None
    return rows, ev, int(ok[np.lexsort((ev["step_seconds"][ok], ev["host_bytes_per_node"][ok]))[0]])


def _nvme_words(nvme_bytes: float) -> str:
    """``--nvme-gib N``: the whole GiB of NVMe per node that holds ``nvme_bytes``."""
    return f"--nvme-gib {int(np.ceil(nvme_bytes / GiB))}"


def _nothing_fits_message(table, ev, model, cluster, gbs, headroom, precision, fits_gpu, engines, offload,
                          fit_on="point", nvme_alternative=None, sub_group_alternative=None) -> str:
    """Which limit bites when no plan fits, with the numbers and what to try. ``nvme_alternative`` and
    ``sub_group_alternative``: calls giving :func:`_nvme_alternative`'s and :func:`_sub_group_alternative`'s
    answers, asked only when host memory is what fails."""
    gpu = cluster.gpu
    cap = gpu.memory_bytes
    point = ev["peak_bytes"] <= (1.0 - headroom) * cap
    if fit_on == "band" and point.any():  # the band's upper side excludes what the point estimate keeps
        i = int(np.flatnonzero(point)[np.argmin((ev["peak_bytes"] * (1.0 + ev["band_high"]))[point])])
        plan = _plan_at(table, i, cluster, gbs, precision)
        return (f"no plan fits at the error band's upper side: {int(np.count_nonzero(point)):,} fit on the point "
                f"estimate of memory; the closest ({describe_plan(plan)}) peaks at {ev['peak_bytes'][i] / GiB:.1f} "
                f"GiB, up to {ev['peak_bytes'][i] * (1.0 + ev['band_high'][i]) / GiB:.1f} GiB at the band's upper "
                f"side, over the {(1 - headroom) * cap / GiB:.1f} GiB that {headroom:.0%} headroom leaves; judge on "
                f"the point estimate (fit_on='point', --fit-on point) with margin, or add GPUs")
    host_cap = cluster.host_memory_gib_per_node * GiB
    on_host = fits_gpu & (ev["host_bytes_per_node"] <= host_cap)
    if on_host.any():  # GPU and host memory fit: what the plans swap to NVMe does not
        i = int(np.flatnonzero(on_host)[np.argmin(ev["nvme_bytes_per_node"][on_host])])
        plan = _plan_at(table, i, cluster, gbs, precision)
        need = float(ev["nvme_bytes_per_node"][i])
        return (f"no plan fits the node's NVMe: the plans that fit on the GPU and in host memory swap their "
                f"optimizer to NVMe and need at least {need / GiB:.1f} GiB of it per node ({describe_plan(plan)}, "
                f"{ev['host_bytes_per_node'][i] / GiB:.1f} GiB of host memory); the nodes have "
                f"{cluster.nvme_gib_per_node:g} GiB of NVMe; give more ({_nvme_words(need)} if the node has it), "
                f"or add host memory or GPUs")
    if fits_gpu.any():  # the GPU is not the problem: host memory for offload is
        i = int(np.flatnonzero(fits_gpu)[np.argmin(ev["host_bytes_per_node"][fits_gpu])])
        plan = _plan_at(table, i, cluster, gbs, precision)
        text = (f"no plan fits host memory: the plans that fit on the GPU need at least "
                f"{ev['host_bytes_per_node'][i] / GiB:.1f} GiB of host memory per node ({describe_plan(plan)}); "
                f"the nodes have {cluster.host_memory_gib_per_node:.0f} GiB; add host memory or GPUs")
        smaller = sub_group_alternative() if sub_group_alternative is not None else None
        if smaller is not None:
            rows, alt, j = smaller
            alt_plan = _plan_at(rows, j, cluster, gbs, precision)
            from workbench.advisor import elements_words

            size = elements_words(alt_plan.sub_group_elements)
            text += (f", or ZeRO-3's sub_group_size {size} (--sub-group-size {size}; DeepSpeed keeps host buffers "
                     f"per optimizer sub-group): "
                     f"{describe_plan(alt_plan)} then holds {alt['host_bytes_per_node'][j] / GiB:.1f} GiB of host "
                     f"memory per node at {alt['step_seconds'][j]:.2f} s/step")
        found = nvme_alternative() if nvme_alternative is not None else None
        if found is None:
            return text
        rows, alt, j = found
        need = float(alt["nvme_bytes_per_node"][j])
        alt_plan = _plan_at(rows, j, cluster, gbs, precision)
        what = " and the ".join(name for key, name in zip(_NVME_COLUMNS, ("optimizer", "parameters"))
                                if rows[key][j])
        return (text + f", or offload the {what} to NVMe (ZeRO-Infinity), which the cluster does not declare "
                       f"(nvme_gib_per_node={cluster.nvme_gib_per_node:g}): {describe_plan(alt_plan)} holds "
                       f"{alt['host_bytes_per_node'][j] / GiB:.1f} GiB of host memory per node and swaps "
                       f"{need / GiB:.1f} GiB per node to NVMe at {alt['step_seconds'][j]:.2f} s/step; give the "
                       f"node's local NVMe ({_nvme_words(need)} or more) and the planner searches it")
    # ties (a peak set by something no option changes, as building the model whole): the least host memory, then
    # full recompute, the plan that needs least once that is solved
    least = np.flatnonzero(ev["peak_bytes"] <= ev["peak_bytes"].min() * (1 + 1e-9))
    full = table["recompute"][least] == M.RECOMPUTE_CODES[Recompute.FULL]
    i = int(least[np.lexsort((~full, ev["host_bytes_per_node"][least]))[0]])
    plan = _plan_at(table, i, cluster, gbs, precision)
    engines = {Engine.parse(e, "engine") for e in engines}
    tries = []
    host = float(ev["host_bytes_per_node"][i])
    host_note = (f"; it also needs {host / GiB:.1f} GiB of host memory per node, of "
                 f"{cluster.host_memory_gib_per_node:.0f} GiB" if host > cluster.host_memory_gib_per_node * GiB else "")
    if not engines & {Engine.DEEPSPEED, Engine.MEGATRON_DEEPSPEED}:
        tries.append("allow a DeepSpeed engine (ZeRO-3 with CPU offload)")
    elif not offload:
        tries.append("allowing CPU offload (`workbench plan` without --no-offload; the Planner tab's 'allow CPU "
                     "offload')")
    elif not (plan.zero_stage == ZeroStage.PARAMETERS and plan.offload_params is not Offload.NONE):
        tries.append("ZeRO-3 with CPU offload")
    if model.attention.materialises_scores and model.seq_length >= 16384:
        from workbench.advisor import score_matrix_bytes

        tries.insert(0, f"attention='flash' (its {model.attention} attention keeps "
                        f"{score_matrix_bytes(model, plan) / GiB:.1f} GiB of s×s scores per layer here; flash "
                        f"attention keeps none and is what context parallelism needs)")
    built = _zero_init_peak(model, cluster, plan)
    if built is not None and built < 0.9 * ev["peak_bytes"][i]:
        verdict = ("within" if built <= (1 - headroom) * cap else "still over") + \
            f" the {(1 - headroom) * cap / GiB:.1f} GiB limit"
        tries.insert(0, f"building the model inside deepspeed.zero.Init (zero_init=True, --zero-init: "
                        f"{built / GiB:.1f} GiB for this plan, {verdict}, where building it whole on each GPU "
                        f"first sets the peak)")
    tries += ["more GPUs", "a shorter sequence" if model.seq_length > 512 else "a smaller model"]
    return (f"no plan fits: the smallest plan needs {ev['peak_bytes'][i] / GiB:.1f} GiB per GPU "
            f"({describe_plan(plan)}){host_note}; the {gpu.name} has {cap / GiB:.1f} GiB "
            f"({(1 - headroom) * cap / GiB:.1f} GiB after the {headroom:.0%} headroom); try {', '.join(tries[:-1])} "
            f"or {tries[-1]}")


def _zero_init_peak(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> Optional[float]:
    """The per-GPU peak of a ZeRO-3 ``plan`` built inside ``deepspeed.zero.Init``, when the plan builds the model
    whole on each GPU first (``None`` otherwise, or when the specs refuse it)."""
    if plan.engine is not Engine.DEEPSPEED or plan.zero_stage != ZeroStage.PARAMETERS or plan.zero_init:
        return None
    from workbench.estimate import estimate

    try:
        return float(estimate(model, cluster, plan.replace(zero_init=True), checks=False).memory.per_gpu_peak_bytes)
    except ValueError:
        return None


# ================================================================================================================
# Explanation
# ================================================================================================================
_CP_COMM_WORDS = {
    "p2p": "the ring hides each K/V send behind the attention of the chunk already received",
    "all_gather": "the whole sequence's K/V gathered before attention, not overlapped",
    "a2a": "all-to-all of Q, K, V and O before and after attention, not overlapped",
    "a2a+p2p": "all-to-all inside the inner group, then the ring across the outer one",
}
"""How each ``--cp-comm-type`` exchanges K/V, in the words the explanation uses."""


def _sequence_split(plan: ParallelPlan) -> str:
    """How a plan splits the sequence, in the explanation's words: ``Ulysses=N``, ``CP=N p2p`` or ``CP=1``."""
    if plan.is_ulysses:
        return f"Ulysses={plan.ulysses}"
    return f"CP={plan.context_parallel}" + (f" {plan.cp_comm_type}" if plan.context_parallel > 1 else "")


def _megatron_cp(plan: ParallelPlan) -> int:
    """Megatron's context-parallel size of a plan (1 for DeepSpeed-Ulysses, which the plan stores as CP N, a2a)."""
    return 1 if plan.is_ulysses else plan.context_parallel


def _pipeline_words(plan: ParallelPlan, num_layers: Optional[int]) -> str:
    """A plan's pipeline for the bubble's reason: p, v, m and the textbook (p−1)/(v·m) of equal stages, with the
    layers on each stage when the split is uneven (the bubble is then the stages' own idle time,
    :func:`workbench.schedule.bubble_seconds`, not that fraction)."""
    p, v, m = plan.pipeline_parallel, plan.virtual_pipeline, plan.num_microbatches
    text = f"PP={p}, v={v}, m={m}"
    if plan.uneven_stages and num_layers is not None:
        return text + f", stages of {'/'.join(map(str, plan.stage_layers(num_layers)))} layers"
    return text + f": (p−1)/(v·m)={(p - 1) / (v * m):.1%}"


def _term_reason(term: str, a: ParallelPlan, b: ParallelPlan, cluster: ClusterSpec,
                 num_layers: Optional[int] = None) -> str:
    """Why ``term`` differs between plan ``a`` (the slower) and ``b``, from the plans' settings (``num_layers``: the
    model's, to name an uneven pipeline split)."""
    n = cluster.gpus_per_node
    if term == "tp_comm":
        if group_crosses_nodes(1, a.tensor_parallel, n):
            return f"TP={a.tensor_parallel} crosses nodes"
        if a.tensor_parallel != b.tensor_parallel:
            return f"TP={a.tensor_parallel} vs TP={b.tensor_parallel}"
        if a.tp_comm_overlap != b.tp_comm_overlap:
            return ("--tp-comm-overlap hides the collectives behind the GEMMs" if b.tp_comm_overlap else
                    "--tp-comm-overlap's chunked GEMMs and the SMs it takes cost more than it hides")
        if a.recompute != b.recompute:
            return f"recompute={a.recompute} repeats the forward all-reduces"
        if a.micro_batch_size != b.micro_batch_size:
            return f"micro batch {a.micro_batch_size} vs {b.micro_batch_size}"
    if term == "bubble":
        if a.uneven_stages or b.uneven_stages:
            return f"{_pipeline_words(a, num_layers)} vs {_pipeline_words(b, num_layers)}"
        fb = (b.pipeline_parallel - 1) / (b.virtual_pipeline * b.num_microbatches)
        return f"{_pipeline_words(a, num_layers)} vs {fb:.1%}"
    if term == "dp_comm":
        bits = []
        if a.zero_stage != b.zero_stage:
            bits.append(f"ZeRO-{int(a.zero_stage)} vs ZeRO-{int(b.zero_stage)}")
        if a.data_parallel != b.data_parallel:
            bits.append(f"DP={a.data_parallel} vs DP={b.data_parallel}")
        if a.num_microbatches != b.num_microbatches and a.zero_stage >= 2:
            bits.append(f"ZeRO-{int(a.zero_stage)} communicates every one of {a.num_microbatches} micro-batches")
        return ", ".join(bits)
    if term == "zero3_hooks":
        bits = []
        if a.zero_stage != b.zero_stage:
            bits.append(f"ZeRO-{int(a.zero_stage)} vs ZeRO-{int(b.zero_stage)} (only ZeRO-3 fetches each module)")
        if a.num_microbatches != b.num_microbatches:
            bits.append(f"every module fetched in each of {a.num_microbatches} vs {b.num_microbatches} micro-batches")
        if a.recompute != b.recompute:
            bits.append(f"recompute={a.recompute} vs {b.recompute} (a recomputed forward fetches again)")
        return ", ".join(bits)
    if term == "recompute":
        if a.recompute != b.recompute:
            return f"recompute={a.recompute} vs {b.recompute}"
        if a.recompute_layers != b.recompute_layers:
            return (f"{a.recompute_layers or 'all'} vs {b.recompute_layers or 'all'} layers recomputed")
        if a.micro_batch_size != b.micro_batch_size:
            return f"micro batch {a.micro_batch_size} vs {b.micro_batch_size} (GEMM shapes)"
        return ""
    if term == "offload":
        if a.nvme_optimizer or a.nvme_params:
            on = " and ".join(n for n, v in (("optimizer", a.nvme_optimizer), ("parameters", a.nvme_params)) if v)
            return (f"{on} swapped to NVMe at the node's {cluster.nvme_read_gb_per_s:g} GB/s read, "
                    f"{cluster.nvme_write_gb_per_s:g} GB/s write, shared by its {cluster.gpus_per_node} GPUs")
        return "optimizer/parameters in host memory over PCIe"
    if term == "cp_comm":
        if a.is_ulysses or b.is_ulysses:
            return f"{_sequence_split(a)} vs {_sequence_split(b)}"
        if a.context_parallel == b.context_parallel and a.cp_comm_type != b.cp_comm_type:
            return f"CP={a.context_parallel} {a.cp_comm_type} vs {b.cp_comm_type} ({_CP_COMM_WORDS[str(a.cp_comm_type)]})"
        return f"CP={a.context_parallel} vs CP={b.context_parallel}"
    if term == "pp_comm":
        return f"PP={a.pipeline_parallel}, v={a.virtual_pipeline} vs PP={b.pipeline_parallel}"
    if term == "compute":
        bits = []
        if a.micro_batch_size != b.micro_batch_size:
            bits.append(f"micro batch {a.micro_batch_size} vs {b.micro_batch_size} (GEMM shapes)")
        if a.tensor_parallel != b.tensor_parallel:
            bits.append(f"TP={a.tensor_parallel} vs {b.tensor_parallel} (GEMM width ÷ TP)")
        if a.pipeline_parallel != b.pipeline_parallel:
            bits.append("the last stage carries the output layer")
        if a.sequence_parallel != b.sequence_parallel:
            bits.append("sequence parallel " + ("off: norms and dropouts run on the whole sequence on every TP rank"
                                                if not a.sequence_parallel else "on"))
        return ", ".join(bits)
    return ""


def explain(winner: PlanResult, runner_up: Optional[PlanResult], *, model: ModelSpec, cluster: ClusterSpec,
            label: str = "Runner-up", head: bool = True) -> str:
    """The winner against the runner-up: what differs, which time terms make the gap (largest first, with seconds
    and percentages) and what each costs in memory. Derived only from the two results."""
    w = winner
    top = (f"Fastest: {w.describe()} — {w.step_seconds:.3f} s/step, {w.tokens_per_second:,.0f} tokens/s, "
            f"MFU {w.mfu:.1%}, peak {w.peak_bytes / GiB:.1f} of {w.capacity_bytes / GiB:.1f} GiB "
            f"({w.headroom_fraction:.0%} free).")
    if model.implementation is Implementation.TRANSFORMERS and w.plan.recompute_layers is not None:
        # some decoder layers checkpointed (validate allows recompute_layers with full recompute only): which ones
        top += f" Its gradient checkpointing is {hf_checkpointing_words(model, w.plan)}; `workbench export` writes it."
    if runner_up is None:
        return top + " It is the only plan that fits."
    r = runner_up
    gap = r.step_seconds / w.step_seconds - 1
    diffs = [f"{name} {fmt(getattr(w.plan, attr))} vs {fmt(getattr(r.plan, attr))}" for name, attr, fmt in (
        ("engine", "engine", str), ("TP", "tensor_parallel", str), ("PP", "pipeline_parallel", str),
        ("v", "virtual_pipeline", str), ("Ulysses", "ulysses", str), ("CP", "context_parallel", str),
        ("CP exchange", "cp_comm_type", str), ("a2a+p2p sizes", "hierarchical_context_parallel_sizes",
                                               lambda x: "x".join(map(str, x)) if x else "none"),
        ("DP", "data_parallel", str),
        ("SP", "sequence_parallel", lambda x: "on" if x else "off"),
        ("TP comm overlap", "tp_comm_overlap", lambda x: "on" if x else "off"),
        ("ZeRO", "zero_stage", lambda x: str(int(x))),
        ("distributed optimizer", "distributed_optimizer", lambda x: "on" if x else "off"),
        ("offload optimizer", "offload_optimizer", str), ("offload params", "offload_params", str),
        ("recompute", "recompute", str),
        ("recomputed layers", "recompute_layers", lambda x: "all" if x is None else str(x)),
        ("micro batch", "micro_batch_size", str))
        if getattr(w.plan, attr) != getattr(r.plan, attr)
        # Ulysses N is stored as CP N with the all-to-all exchange: its own entry says it once
        and not (attr in ("context_parallel", "cp_comm_type") and (w.plan.is_ulysses or r.plan.is_ulysses))
        # a plan without recompute recomputes no layer: the recompute entry says so ("all" would be wrong)
        and not (attr == "recompute_layers" and "none" in (str(w.plan.recompute), str(r.plan.recompute)))]
    if (w.plan.is_ulysses or r.plan.is_ulysses) and _megatron_cp(w.plan) != _megatron_cp(r.plan):
        at = next((i + 1 for i, d in enumerate(diffs) if d.startswith("Ulysses ")), len(diffs))
        diffs.insert(at, f"CP {_megatron_cp(w.plan)} vs {_megatron_cp(r.plan)}")
    lines = ([top] if head else []) + [f"{label}: {r.describe()} — {r.step_seconds:.3f} s/step ({gap:+.1%}); differs in "
                   f"{'; '.join(diffs) if diffs else 'nothing but ordering'}."]
    deltas = sorted(((r.time_breakdown[k] - w.time_breakdown[k], k) for k in T.TERMS), reverse=True)
    reasons = []
    for delta, k in deltas:
        if abs(delta) < 0.005 * w.step_seconds:
            continue
        slow, fast = (r, w) if delta > 0 else (w, r)
        base = fast.time_breakdown[k]
        rel = f" ({abs(delta) / base:+.0%})" if base > 1e-9 else ""
        why = _term_reason(k, slow.plan, fast.plan, cluster, model.num_layers)
        who = label.lower() if delta > 0 else "winner"
        words = ("DeepSpeed-Ulysses all-to-all" if k == "cp_comm" and slow.plan.is_ulysses else T.TERM_WORDS[k])
        reasons.append(f"{why + ': ' if why else ''}{who} +{abs(delta):.3f} s {words}{rel}")
    if reasons:
        lines.append("Where the time goes: " + "; ".join(reasons[:4]) + ".")
    dm = r.peak_bytes - w.peak_bytes
    lines.append(f"Memory: the {label.lower()} peaks at {r.peak_bytes / GiB:.1f} GiB ({dm / GiB:+.1f} GiB vs the winner)"
                 + (f"; the winner buys its speed with {-dm / GiB:.1f} GiB more memory." if dm < 0 else "."))
    return "\n".join(lines)


# ================================================================================================================
# Where a given plan ranks
# ================================================================================================================
@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRank:
    """Where one plan (a published or hand-made layout) stands among the planner's plans for its model, cluster,
    global batch and precision."""

    plan: ParallelPlan
    rank: Optional[int]
    """1-based position among the feasible plans ranked by step time (ties: less memory first); ``None`` when the
    plan is not in the search space or does not fit."""
    in_search_space: bool
    """Whether the planner's enumeration contains this plan at all."""
    fits: bool
    """Whether the planner judges it to fit (the point estimate of the peak within the headroom, host memory for
    offload, the node's NVMe for offload to NVMe)."""
    risky: bool
    """It fits on the point estimate but not at the upper side of the held-out error band (:attr:`PlanResult.risky`)."""
    rank_within_band: Optional[int]
    """The stricter rank when only plans that fit at the band's upper side count (the planner's rule before the
    band became a marker); ``None`` when this plan is risky or does not fit."""
    evaluated: int
    feasible: int
    best: Optional[PlanResult]
    """The planner's fastest feasible plan."""
    result: Optional[PlanResult]
    """This plan as the planner priced it (``None`` outside the search space)."""
    explanation: str
    """Why the planner prefers its winner over this plan, term by term (:func:`explain`), or why the plan is not
    ranked."""

    def to_dict(self) -> dict:
        return {"plan": describe_plan(self.plan), "rank": self.rank, "rank_within_band": self.rank_within_band,
                "risky": self.risky,
                "in_search_space": self.in_search_space,
                "fits": self.fits, "evaluated": self.evaluated, "feasible": self.feasible,
                "best": self.best.to_dict() if self.best else None,
                "result": self.result.to_dict() if self.result else None, "explanation": self.explanation}


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayedRank:
    """One ranked plan re-priced with the caching allocator replayed (:func:`replay_ranked`)."""

    rank: int
    """Its place in :attr:`PlanSearch.ranked` (1 = fastest)."""
    skipped: Optional[str]
    """Why it was not replayed (one phrase, :func:`workbench.allocsim.auto_replay_skipped`); None when it was."""
    constant_peak_bytes: int
    """The planner's peak, with the engine's constant reserve."""
    peak_bytes: Optional[int] = None
    """The peak with the replay's own peak reserved taken whole; None when not replayed."""
    band_high_bytes: int = 0
    """The upper side of the replayed estimate's error band."""
    fits: Optional[bool] = None
    """The replayed peak within the search's headroom; None when not replayed."""
    risky: bool = False
    """Fits on the replayed peak but not at its band's upper side."""

    def to_dict(self) -> dict:
        return {"rank": self.rank, "replayed": self.skipped is None, "skipped": self.skipped,
                "constant_peak_bytes": self.constant_peak_bytes, "peak_bytes": self.peak_bytes,
                "band_high_bytes": self.band_high_bytes, "fits": self.fits, "risky": self.risky}


def replay_ranked(result: PlanSearch, simulate_allocator, *, has_config: bool, limit: Optional[int] = None,
                  profile=None) -> tuple:
    """The first ``limit`` ranked plans of ``result`` (all of them by default) re-priced with PyTorch's caching
    allocator replayed over each plan's traced steps (:func:`workbench.estimate.estimate` with
    ``simulate_allocator``: a megatron-core model's ``True``, a transformers model's config) where the replay can run,
    and judged against the search's headroom as the search judged them (:class:`ReplayedRank`). The search itself
    keeps the constant reserve (the replay takes seconds a plan); this settles the few plans a user would pick.
    ``has_config``: a transformers model's Hugging Face config is given (else its plans are skipped, saying so)."""
    from workbench.allocsim import auto_replay_skipped, replay_failure
    from workbench.estimate import estimate

    limit_bytes = (1.0 - result.headroom) * result.cluster.gpu.memory_bytes
    out = []
    for i, row in enumerate(result.ranked[:limit]):
        skipped = auto_replay_skipped(result.model, row.plan, has_config)
        if skipped is None:
            try:
                mem = estimate(result.model, result.cluster, row.plan, profile, checks=False,
                               simulate_allocator=simulate_allocator).memory
            except Exception as exc:  # noqa: BLE001 - the trace runs third-party code; the plan keeps its rank
                skipped = replay_failure(exc)
        if skipped is not None:
            out.append(ReplayedRank(rank=i + 1, skipped=skipped, constant_peak_bytes=int(row.peak_bytes)))
            continue
        peak, high = int(mem.per_gpu_peak_bytes), int(mem.band_high_bytes)
        out.append(ReplayedRank(rank=i + 1, skipped=None, constant_peak_bytes=int(row.peak_bytes), peak_bytes=peak,
                                band_high_bytes=high, fits=peak <= limit_bytes,
                                risky=peak <= limit_bytes < peak + high))
    return tuple(out)


def rank_plan(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, headroom: float = DEFAULT_HEADROOM,
              max_context_parallel: Optional[int] = None, allow_cross_node_tp: bool = False,
              profile=None, engines: Optional[Sequence] = None, recompute: Optional[Sequence] = None,
              sequence_parallel: Optional[bool] = None, distributed_optimizer: Optional[bool] = None) -> PlanRank:
    """The rank of ``plan`` among every plan :func:`search` evaluates for the same model, cluster, global batch,
    precision and stack (Adam kernel, gradient-reduce overlap, TP communication overlap), ranked as :func:`search`
    ranks them (step time, then peak memory).

    ``engines``, ``recompute``, ``sequence_parallel`` and ``distributed_optimizer`` narrow the plans it competes
    with to the features a run had (a 2021 run had neither sequence parallelism nor selective recompute): ``None``
    keeps every option the planner searches."""
    check_spec_types(model=model, cluster=cluster, plan=plan)
    from workbench.specs import validate

    validate(model, cluster, plan)
    if plan.lora_rank:
        raise ValueError(f"lora_rank={plan.lora_rank}: rank_plan ranks full training plans only")
    if max_context_parallel is None:
        max_context_parallel = default_max_context_parallel(model.seq_length)
    max_context_parallel = max(check_int("max_context_parallel", max_context_parallel), plan.context_parallel)
    # FP8 is modelled as Megatron-LM trains it with Transformer Engine: the Megatron engine only
    engines = ENGINES if engines is None else tuple(Engine.parse(e, "engines") for e in engines)
    if plan.precision.is_fp8:
        engines = (Engine.MEGATRON,)
    if model.implementation is Implementation.TRANSFORMERS:  # as search(): DeepSpeed ZeRO data parallel only
        engines = tuple(e for e in engines if e is Engine.DEEPSPEED)
    if recompute is None:  # what search() offers: transformers checkpoints whole layers, no selective recompute
        recompute = (("none", "full") if model.implementation is Implementation.TRANSFORMERS
                     else ("none", "selective", "full"))
    table = enumerate_candidates(model, cluster, plan.global_batch_size, engines=engines,
                                 recompute=tuple(recompute),
                                 allow_cross_node_tp=allow_cross_node_tp, max_context_parallel=max_context_parallel,
                                 # the plan's stack on every row, as adam and overlap_comm below: TP communication
                                 # overlap on every row that can have it when the plan has it, off otherwise
                                 tp_comm_overlap=plan.tp_comm_overlap)
    keep = np.ones(len(table["tp"]), bool)
    for key, wanted in (("sp", sequence_parallel), ("dist_opt", distributed_optimizer)):
        if wanted is not None:
            keep &= table[key] == int(check_bool(key, wanted))
    if not keep.all():
        table = {k: v[keep] for k, v in table.items()}
    stack = dict(adam=plan.adam, overlap_comm=plan.overlap_comm)
    plan_stack = dict(stack)
    if plan.precision.is_fp8:  # every row with the plan's FP8 recipe (encode.complete_columns keeps given columns)
        table["fp8_recipe"] = np.full(len(table["tp"]), E.FP8_RECIPE_CODES[str(plan.fp8_recipe)], np.int64)
        table["fp8_pg"] = np.asarray(table["dist_opt"], np.int64) * int(plan.fp8_param_gather)
        plan_stack["fp8_recipe"] = plan.fp8_recipe
    if plan.grad_reduce_fp32 is not None:  # the plan's main-gradient dtype on every Megatron row
        table["grad_fp32"] = np.where(table["engine"] == ENGINE_CODES[Engine.MEGATRON], int(plan.grad_reduce_fp32), -1)
    table["expseg"] = np.full(len(table["tp"]), int(plan.expandable_segments), np.int64)  # the plan's allocator
    table["pin"] = np.full(len(table["tp"]), int(plan.pin_memory), np.int64)  # the plan's offload buffers
    table.update(zero_size_columns(len(table["tp"]), reduce_bucket_size=plan.reduce_bucket_size,
                                   prefetch_bucket_size=plan.prefetch_bucket_size,
                                   param_persistence_threshold=plan.param_persistence_threshold,
                                   sub_group_size=plan.sub_group_size))
    if plan.cross_entropy_fusion is not CrossEntropyFusion.NONE:  # the plan's loss kernels on every Megatron row
        table["xent"] = np.where(table["engine"] == ENGINE_CODES[Engine.MEGATRON],
                                 CROSS_ENTROPY_FUSION_CODES[plan.cross_entropy_fusion], 0)
    if model.is_moe:
        table["moe_imb"] = np.full(len(table["tp"]), plan.moe_load_imbalance)  # the plan's routing imbalance
        # the plan's MoE switches (all-to-all overlap, capacity factor) on every Megatron row that can take them
        table = with_moe_stack(table, model, moe_overlap_alltoall=plan.moe_overlap_alltoall,
                               moe_capacity_factor=None if plan.deepspeed_moe else plan.moe_capacity_factor,
                               moe_pad_to_capacity=plan.moe_pad_to_capacity)
    from workbench.calibrate.profile import resolve_profile

    profile = resolve_profile(profile)
    ev = evaluate(table, model, cluster, precision=plan.precision, profile=profile, **stack)
    fits_gpu, fits_host = _fits(table, ev, cluster, headroom)
    ok = fits_gpu & fits_host
    cols = E.plan_columns(plan, model)
    match = np.ones(len(table["tp"]), bool)
    for key in _COLUMNS + tuple(k for k in ("recompute_layers",) + _NVME_COLUMNS if k in table):
        match &= table[key] == int(cols[key])
    rows = np.flatnonzero(match)
    gbs, precision = plan.global_batch_size, plan.precision

    def ranked(mask):
        idx = np.flatnonzero(mask)
        return idx[np.lexsort((ev["peak_bytes"][idx], ev["step_seconds"][idx]))]

    order = ranked(ok)
    best = _result_at(table, ev, int(order[0]), model, cluster, gbs, precision, stack=plan_stack) if len(order) else None
    common = dict(plan=plan, evaluated=len(table["tp"]), feasible=int(len(order)), best=best)
    if not len(rows):
        return PlanRank(rank=None, rank_within_band=None, in_search_space=False, fits=False, risky=False, result=None,
                        explanation=f"{describe_plan(plan)} is not in the planner's search space: "
                                    + _missing_from_search(table, cols), **common)
    i = int(rows[0])
    strict = ranked(ok & ~ev["risky"])
    common["rank_within_band"] = int(np.flatnonzero(strict == i)[0]) + 1 if i in strict else None
    common["risky"] = bool(ev["risky"][i])
    result = _result_at(table, ev, i, model, cluster, gbs, precision, stack=plan_stack)
    if not ok[i]:
        terms = sorted(result.memory_breakdown.items(), key=lambda kv: -kv[1])[:3]
        limit = (1.0 - headroom) * cluster.gpu.memory_bytes
        why = (f"the planner judges it not to fit: peak {result.peak_bytes / GiB:.1f} GiB, "
               f"{(result.peak_bytes - limit) / GiB:.1f} GiB over the {limit / GiB:.1f} GiB that {headroom:.0%} "
               f"headroom leaves of {cluster.gpu.memory_bytes / GiB:.1f} GiB (stage {result.peak_stage}: "
               + ", ".join(f"{k} {v / GiB:.1f}" for k, v in terms) + " GiB)" if not fits_gpu[i]
               else f"its ranks' host memory ({result.host_bytes_per_node / GiB:.1f} GiB per node, the processes "
                    f"with what they offload) does not fit the node's {cluster.host_memory_gib_per_node:.0f} GiB"
               if result.host_bytes_per_node > cluster.host_memory_gib_per_node * GiB
               else f"what its ranks swap to NVMe ({result.nvme_bytes_per_node / GiB:.1f} GiB per node) does not fit "
                    f"the node's {cluster.nvme_gib_per_node:g} GiB of NVMe (--nvme-gib)")
        return PlanRank(rank=None, in_search_space=True, fits=False, result=result, explanation=why, **common)
    rank = int(np.flatnonzero(order == i)[0]) + 1
    text = ("it is the planner's fastest plan" if rank == 1 else
            explain(best, result, model=model, cluster=cluster, label="This plan", head=True))
    if common["risky"]:
        text += "\nMemory margin: it " + risk_note(result, headroom)
    return PlanRank(rank=rank, in_search_space=True, fits=True, result=result, explanation=text, **common)
