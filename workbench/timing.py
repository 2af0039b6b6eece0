"""Time model: seconds per term for one optimizer step, and what they add up to.

Everything is a pure function of plain numbers that works on Python scalars and numpy arrays alike;
:func:`step_time_terms` is the array-level core (the planner calls it with arrays of thousands of plans) and
:func:`estimate_time` turns the three specs into its inputs and wraps the answer in a :class:`TimeEstimate`.

Terms (seconds per step on the slowest pipeline stage; each function's docstring has its formula and source):

- ``compute``   forward + backward of every micro-batch: GEMMs at the shape-dependent efficiency of the GPU's
                calibrated curve (:func:`gemm_efficiency`) plus memory-bound element-wise work at HBM bandwidth;
- ``recompute`` the extra forward of activation recomputation (kept apart from compute);
- ``tp_comm``   tensor-parallel all-reduces (or all-gather + reduce-scatter with sequence parallel), not overlapped;
- ``cp_comm``   the exposed part of the context-parallel K/V ring;
- ``pp_comm``   pipeline point-to-point sends;
- ``dp_comm``   the exposed part of the data-parallel gradient reduction / ZeRO gathers;
- ``offload``   ZeRO-Offload PCIe traffic and the CPU Adam step;
- ``optimizer`` the GPU optimizer step (memory bound);
- ``bubble``    pipeline idle time (p−1)/(v·m) of the ideal time.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from workbench.flops import (RECOMPUTE_CODES, attention_core_flops_per_token, layer_gemm_flops_per_token,
                             logits_flops_per_token, model_flops_per_step, recompute_flops_per_step)
from workbench.params import lora_params_per_layer, model_vocab_size
from workbench.schedule import bubble_fraction
from workbench.specs import (AdamImpl, AttentionImpl, ClusterSpec, Engine, ModelSpec, Offload, ParallelPlan, Precision,
                             Recompute, validate)

TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "offload", "optimizer", "bubble")
"""Breakdown keys, in drawing order. All are exposed seconds per optimizer step."""


# ---------------------------------------------------------------------------------------------------------------
# Calibration data
# ---------------------------------------------------------------------------------------------------------------
@functools.cache
def calibration() -> dict:
    """``workbench/catalog/efficiency.json``: efficiency curves per GPU generation, network latencies, CPU Adam
    rate, each with its provenance; plus the optional ``h200_measured`` GEMM table from ``benchmarks/gpu_gemm.py``."""
    text = resources.files("workbench.catalog").joinpath("efficiency.json").read_text()
    return json.loads(text)


def gpu_generation(gpu_name: str) -> str:
    table = calibration()["gpu_generation"]
    return table.get(gpu_name, table.get(gpu_name.upper(), "default"))


def efficiency_curve(gpu_name: str) -> dict:
    """The GEMM-efficiency curve for a GPU: ``{"gemm_efficiency_max", "gemm_half_dim", "memory_passes",
    "hbm_efficiency", "source"}``. For Hopper GPUs, a filled ``h200_measured`` section (the JSON that
    ``benchmarks/gpu_gemm.py`` prints) replaces the stored curve by one fitted to the measurements."""
    cal = calibration()
    gen = gpu_generation(gpu_name)
    if gen in cal["curves"]:
        curve = dict(cal["curves"][gen])
    else:
        curve = dict(cal["curves"]["ampere"])
        curve["source"] = f"uncalibrated for {gen} ({gpu_name}): the A100 curve is reused. " + curve["source"]
    measured = cal.get("h200_measured") or {}
    if gen == "hopper" and measured.get("gemms"):
        note = (f"GEMM curve fitted to {len(measured['gemms'])} GEMMs measured by benchmarks/gpu_gemm.py on "
                f"{measured.get('device', 'H200')}")
        curve.update(_measured_hopper_curve(), source=note + ("; " + curve["source"] if gen in cal["curves"] else ""))
    return curve


@functools.cache
def _measured_hopper_curve() -> dict:
    measured = calibration()["h200_measured"]
    return fit_gemm_curve(measured["gemms"], peak_tflops=measured["peak_tflops"])


def fit_gemm_curve(gemms: list, *, peak_tflops: float) -> dict:
    """Least-squares fit (in log space, by grid search) of :func:`gemm_efficiency`'s two parameters to measured
    GEMMs ``[{"m":…, "n":…, "k":…, "tflops":…}, …]``."""
    m = np.array([g["m"] for g in gemms], float)
    n = np.array([g["n"] for g in gemms], float)
    k = np.array([g["k"] for g in gemms], float)
    eff = np.array([g["tflops"] for g in gemms], float) / peak_tflops
    best = None
    for half in np.geomspace(4, 1024, 160):
        shape = gemm_efficiency(m, n, k, efficiency_max=1.0, half_dim=half)
        # best efficiency_max for this half_dim in log space: exp(mean(log(eff/shape)))
        emax = float(np.exp(np.mean(np.log(eff / shape))))
        err = float(np.mean(np.log(emax * shape / eff) ** 2))
        if best is None or err < best[0]:
            best = (err, emax, float(half))
    return {"gemm_efficiency_max": min(best[1], 1.0), "gemm_half_dim": best[2]}


# ---------------------------------------------------------------------------------------------------------------
# Formulas (scalars or arrays)
# ---------------------------------------------------------------------------------------------------------------
def gemm_efficiency(m, n, k, *, efficiency_max, half_dim):
    """Fraction of dense peak a GEMM of an (m×k)·(k×n) product reaches:

        efficiency = efficiency_max / (1 + half_dim/m + half_dim/n + half_dim/k)

    One smooth curve per GPU generation (parameters in ``catalog/efficiency.json``): large GEMMs approach
    ``efficiency_max``; a small dimension (hidden ÷ TP, few tokens per micro-batch, head_dim in the attention core)
    costs efficiency as tile quantisation and memory traffic start to dominate. ``half_dim`` is the size at which
    one small dimension alone halves the efficiency.
    """
    return efficiency_max / (1.0 + half_dim / m + half_dim / n + half_dim / k)


def gemm_seconds(flops, m, n, k, *, peak_flops, efficiency_max, half_dim):
    """Time of ``flops`` of GEMM work of shape (m, n, k): flops / (peak × :func:`gemm_efficiency`)."""
    return flops / (peak_flops * gemm_efficiency(m, n, k, efficiency_max=efficiency_max, half_dim=half_dim))


def elementwise_bytes_per_layer(*, tokens, hidden_size, num_attention_heads, seq_length, tensor_parallel,
                                sequence_parallel, unfused_attention, bytes_per_value):
    """Bytes of activations the memory-bound kernels of one layer's forward write (norms, dropout, residual adds,
    activation function, softmax): Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 per-layer activation count
    for 16-bit values, sbh·(10 + 24/t + 5·a·s/(h·t)) without sequence parallel and sbh·(34/t + 5·a·s/(h·t)) with
    it; the 5·a·s/h score/softmax/dropout term only for unfused attention. Scaled by bytes_per_value/2."""
    t = tensor_parallel
    replicated = 10 / np.where(np.asarray(sequence_parallel) > 0, t, 1)
    scores = 5 * num_attention_heads * seq_length / hidden_size * np.asarray(unfused_attention, dtype=float)
    return tokens * hidden_size * (replicated + 24 / t + scores / t) * (bytes_per_value / 2)


def attention_score_bytes(*, bytes_per_value, softmax_fusion, attention_dropout):
    """HBM bytes moved per element of the b·a·s·s score matrix by materialised (non-flash) attention, forward and
    backward, counted kernel by kernel from megatron-core's ``DotProductAttention`` (baddbmm into a 16-bit buffer,
    ``FusedScaleMaskSoftmax``, attention dropout, bmm with V); v = bytes_per_value, softmax in fp32 (megatron-core
    ``attention_softmax_in_fp32=True``), the s×s mask lives in L2 and is not counted.

    Unfused softmax (``softmax_fusion`` 0: megatron-core ``masked_softmax_fusion=False``, ``forward_torch_softmax``),
    with ``cast`` = 1 for 16-bit values (the ``.float()``/``.bfloat16()`` pair) and 0 for fp32:

        forward:  v (QKᵀ write) + cast·(v+4) (.float) + 8 (masked_fill_) + 8 (softmax) + cast·(4+v) (cast back)
                  + dropout·(2v+1) (output + 1-byte mask) + v (read by the bmm with V)           = 37 B for bf16
        backward: 2v (dP write, P read for dV) + dropout·(2v+1) + cast·(v+4) + 12 (softmax backward reads dY and
                  Y, writes dX) + 8 (masked_fill backward) + cast·(4+v) + 2v (dS read for dQ and dK) = 45 B for bf16

    Fused softmax (``softmax_fusion`` 1: Megatron-LM's ``scaled_masked_softmax`` kernel, one read and one write of
    16-bit values, backward reads dY and Y and writes dX):

        forward:  v + 2v + dropout·(2v+1) + v;   backward: 2v + dropout·(2v+1) + 3v + 2v

    Returns ``(forward_bytes, backward_bytes)`` per score element (scalars or arrays)."""
    v = np.asarray(bytes_per_value, dtype=float)
    cast = (v < 4).astype(float)
    fused = (np.asarray(softmax_fusion) > 0).astype(float)
    drop = (np.asarray(attention_dropout) > 0).astype(float) * (2 * v + 1)
    fwd_unfused = v + cast * (v + 4) + 8 + 8 + cast * (4 + v) + drop + v
    bwd_unfused = 2 * v + drop + cast * (v + 4) + 12 + 8 + cast * (4 + v) + 2 * v
    fwd_fused = v + 2 * v + drop + v
    bwd_fused = 2 * v + drop + 3 * v + 2 * v
    return fused * fwd_fused + (1 - fused) * fwd_unfused, fused * bwd_fused + (1 - fused) * bwd_unfused


def cross_entropy_bytes(*, bytes_per_value):
    """HBM bytes per logit (token × padded vocabulary entry) of megatron-core's ``vocab_parallel_cross_entropy``
    in fp32, counted from its kernels (megatron/core/tensor_parallel/cross_entropy.py), v = bytes_per_value:

        forward:  v (logits GEMM write) + (v+4) (``.float()``) + 4 (max) + 8 (subtract max, in place) + 8 (exp, in
                  place) + 4 (sum) + 8 (divide by the sum, in place)                                  = 40 B for bf16
        backward: 8 (grad ``mul_`` in place) + (4+v) (cast back to 16 bits) + 2v (read by the two output-layer
                  GEMMs)                                                                              = 18 B for bf16

    Returns ``(forward_bytes, backward_bytes)``."""
    v = np.asarray(bytes_per_value, dtype=float)
    return v + (v + 4) + 4 + 8 + 8 + 4 + 8, 8 + (4 + v) + 2 * v


def collective_seconds(nbytes, group_size, *, gb_per_s, latency_s, kind):
    """Ring/tree cost of one collective over ``group_size`` ranks on a link of ``gb_per_s`` per GPU:

        all_reduce:                  2·(n−1)/n · bytes / bandwidth + 2·log2(n) · latency
        reduce_scatter / all_gather:   (n−1)/n · bytes / bandwidth +   log2(n) · latency

    (bandwidth term of the ring algorithm — Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
    communication operations in MPICH"; NCCL's tree keeps latency logarithmic at scale). ``bytes`` is the full
    tensor (all-reduce, or the gathered/scattered whole). Zero for a group of one.
    """
    n = np.maximum(group_size, 1)
    factor = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}[kind]
    return np.where(n > 1, factor * ((n - 1) / n * nbytes / (gb_per_s * 1e9) + np.log2(n) * latency_s), 0.0)


def p2p_seconds(nbytes, *, gb_per_s, latency_s):
    """One point-to-point send: latency + bytes / bandwidth."""
    return latency_s + nbytes / (gb_per_s * 1e9)


def link_gb_per_s(span_ranks, gpus_per_node, *, intra_node_gb_per_s, inter_node_gb_per_s):
    """Bandwidth of a group whose ranks lie ``span_ranks`` consecutive ranks apart: the inter-node link when that
    span does not fit in one node (or does not tile it), else NVLink/the intra-node link."""
    crosses = (span_ranks > gpus_per_node) | (gpus_per_node % np.minimum(span_ranks, gpus_per_node) != 0)
    return np.where(crosses, inter_node_gb_per_s, intra_node_gb_per_s)


def link_latency_s(span_ranks, gpus_per_node, *, intra_node_latency_s, inter_node_latency_s):
    crosses = (span_ranks > gpus_per_node) | (gpus_per_node % np.minimum(span_ranks, gpus_per_node) != 0)
    return np.where(crosses, inter_node_latency_s, intra_node_latency_s)


def exposed_seconds(comm_seconds, overlappable_seconds, overlap):
    """Communication left on the critical path: max(0, comm − compute it can hide behind) when overlapped,
    all of it otherwise."""
    return np.where(np.asarray(overlap) > 0, np.maximum(0.0, comm_seconds - overlappable_seconds), comm_seconds)


# ---------------------------------------------------------------------------------------------------------------
# The array-level core
# ---------------------------------------------------------------------------------------------------------------
def step_time_terms(*, num_layers, hidden_size, num_attention_heads, head_dim, query_projection_size,
                    kv_projection_size, ffn_hidden_size, gated, experts_per_token, num_experts, seq_length,
                    vocab_size, causal_attention, unfused_attention, softmax_fusion, attention_dropout, num_parameters, parameters_per_layer,
                    tensor_parallel, pipeline_parallel, virtual_pipeline, context_parallel, data_parallel,
                    micro_batch_size, num_microbatches, sequence_parallel, zero_stage, offload_optimizer,
                    offload_params, distributed_optimizer, recompute, recompute_fraction, bytes_per_value,
                    grad_bucket_elements, grad_reduce_bytes_per_value, overlap_comm, peak_flops, hbm_gb_per_s, gpus_per_node,
                    intra_node_gb_per_s, inter_node_gb_per_s, host_link_gb_per_s, intra_node_latency_s,
                    inter_node_latency_s, gemm_efficiency_max, gemm_half_dim, memory_passes, hbm_efficiency,
                    layer_pass_overhead_s,
                    cpu_adam_params_per_second_per_node, optimizer_bytes_per_parameter,
                    deepspeed_step_bytes_per_parameter, zero3_modules_per_layer, zero3_fetch_latency_s,
                    zero3_reduce_latency_s, zero3_collective_call_s, trainable_fraction=1.0,
                    zero3_hbm_bytes_per_parameter=0.0):
    """Seconds per optimizer step by term, for plain numbers or numpy arrays (broadcast together).

    Codes: ``recompute`` 0 none / 1 selective / 2 full (``recompute_fraction`` of layers for full); ``zero_stage``
    0-3; flags (``gated``, ``sequence_parallel``, ``offload_*``, ``distributed_optimizer``, ``causal_attention``,
    ``unfused_attention``, ``overlap_comm``, ``softmax_fusion``) 0/1; ``attention_dropout`` is the probability
    (only > 0 matters). Materialised (unfused) attention adds :func:`attention_score_bytes` per score element at
    ``hbm_efficiency`` × HBM bandwidth, the loss adds :func:`cross_entropy_bytes` per logit; the optimizer moves
    ``optimizer_bytes_per_parameter`` + ``deepspeed_step_bytes_per_parameter`` per shard parameter; every layer
    forward, backward and recomputed forward costs ``layer_pass_overhead_s`` on top of its kernels; ZeRO-3 adds
    per-module hook and collective-call latencies (``zero3_*``, fitted on H200 runs, catalog ``deepspeed``). ``vocab_size`` is the padded vocabulary. ``ffn_hidden_size`` is
    the expert width for MoE (``experts_per_token`` = top-k, ``num_experts`` = E; 1 and 1 for dense).

    Returns a dict with every key of :data:`TERMS`, ``step_seconds``, ``model_flops``, ``hardware_flops`` (whole job
    per step) and ``gemm_efficiency`` (the FLOP-weighted efficiency of the layer GEMMs).
    """
    args = {k: np.asarray(val, dtype=np.float64) for k, val in locals().items()}  # int arrays would overflow
    (num_layers, hidden_size, num_attention_heads, head_dim, query_projection_size, kv_projection_size,
     ffn_hidden_size, gated, experts_per_token, num_experts, seq_length, vocab_size, causal_attention,
     unfused_attention, softmax_fusion, attention_dropout, num_parameters, parameters_per_layer, tensor_parallel, pipeline_parallel, virtual_pipeline,
     context_parallel, data_parallel, micro_batch_size, num_microbatches, sequence_parallel, zero_stage,
     offload_optimizer, offload_params, distributed_optimizer, recompute, recompute_fraction, bytes_per_value,
     grad_bucket_elements, grad_reduce_bytes_per_value, overlap_comm, peak_flops, hbm_gb_per_s, gpus_per_node, intra_node_gb_per_s,
     inter_node_gb_per_s, host_link_gb_per_s, intra_node_latency_s, inter_node_latency_s, gemm_efficiency_max,
     gemm_half_dim, memory_passes, hbm_efficiency, layer_pass_overhead_s, cpu_adam_params_per_second_per_node,
     optimizer_bytes_per_parameter, deepspeed_step_bytes_per_parameter, zero3_modules_per_layer,
     zero3_fetch_latency_s, zero3_reduce_latency_s, zero3_collective_call_s,
     trainable_fraction, zero3_hbm_bytes_per_parameter) = (args[k] for k in _STEP_ARGS)
    t, p, v, c, d = tensor_parallel, pipeline_parallel, virtual_pipeline, context_parallel, data_parallel
    b, m, L, h = micro_batch_size, num_microbatches, num_layers, hidden_size
    q, kv, f, s = query_projection_size, kv_projection_size, ffn_hidden_size, seq_length
    sp = np.asarray(sequence_parallel) > 0
    recompute = np.asarray(recompute)
    full = (recompute == 2).astype(float)
    selective = (recompute == 1).astype(float)
    tokens = b * s / c  # tokens one GPU processes per micro-batch
    layers = L / p  # layers per pipeline stage
    gemm = dict(peak_flops=peak_flops, efficiency_max=gemm_efficiency_max, half_dim=gemm_half_dim)

    # -- compute: one layer's forward on one GPU -------------------------------------------------------------
    expert_tokens = tokens * experts_per_token / num_experts  # rows of each expert GEMM
    fc1_width = f * (1 + np.asarray(gated, dtype=float))
    t_qkv = gemm_seconds(2 * tokens * h * (q + 2 * kv) / t, tokens, (q + 2 * kv) / t, h, **gemm)
    t_proj = gemm_seconds(2 * tokens * q * h / t, tokens, h, q / t, **gemm)
    t_fc1 = gemm_seconds(2 * tokens * experts_per_token * h * fc1_width / t, expert_tokens, fc1_width / t, h, **gemm)
    t_fc2 = gemm_seconds(2 * tokens * experts_per_token * f * h / t, expert_tokens, h, f / t, **gemm)
    core_flops = tokens * attention_core_flops_per_token(seq_length=s, query_projection_size=q,
                                                         causal=causal_attention) / t
    t_core = gemm_seconds(core_flops, s / c, s / c, head_dim, **gemm)
    hbm_bytes_per_s = hbm_gb_per_s * 1e9 * hbm_efficiency
    elementwise = elementwise_bytes_per_layer(tokens=tokens, hidden_size=h, num_attention_heads=num_attention_heads,
                                              seq_length=s, tensor_parallel=t, sequence_parallel=sp,
                                              unfused_attention=0, bytes_per_value=bytes_per_value)
    t_mem = memory_passes * elementwise / hbm_bytes_per_s
    # materialised attention scores (non-flash): counted bytes per score element, forward and backward
    score_elements = tokens * num_attention_heads / t * s / c * np.asarray(unfused_attention, dtype=float)
    score_fwd_b, score_bwd_b = attention_score_bytes(bytes_per_value=bytes_per_value, softmax_fusion=softmax_fusion,
                                                     attention_dropout=attention_dropout)
    t_score_fwd = score_elements * score_fwd_b / hbm_bytes_per_s
    t_score_bwd = score_elements * score_bwd_b / hbm_bytes_per_s
    t_weights_fwd = t_qkv + t_proj + t_fc1 + t_fc2
    # + a fixed cost per layer pass (kernel launches and framework work that does not shrink with the layer's
    # size; fitted per GPU generation, catalog curve "layer_pass_overhead_s")
    layer_fwd = t_weights_fwd + t_core + t_mem + t_score_fwd + layer_pass_overhead_s
    # backward: 2× the forward GEMMs (data- and weight-gradient), element-wise work touches twice as much; frozen
    # weights (LoRA: trainable_fraction = adapters / all parameters) skip their weight-gradient GEMMs
    layer_bwd = ((1 + trainable_fraction) * t_weights_fwd + 2 * (t_core + t_mem) + t_score_bwd
                 + layer_pass_overhead_s)
    t_logits = gemm_seconds(2 * tokens * h * vocab_size / t, tokens, vocab_size / t, h, **gemm)
    ce_fwd_b, ce_bwd_b = cross_entropy_bytes(bytes_per_value=bytes_per_value)
    t_loss = tokens * vocab_size / t * (ce_fwd_b + ce_bwd_b) / hbm_bytes_per_s
    # the last stage carries the output layer and the loss: the slowest stage
    stage_mb = layers * (layer_fwd + layer_bwd) + (2 + trainable_fraction) * t_logits + t_loss
    compute = m * stage_mb

    # -- recompute: the extra forward --------------------------------------------------------------------------
    recompute_mb = layers * (full * recompute_fraction * layer_fwd + selective * (t_core + t_score_fwd))
    recompute_s = m * recompute_mb

    # -- tensor parallel: 2 all-reduces forward + 2 backward per layer (+2 per recomputed forward) ----------------
    tp_bw = link_gb_per_s(t, gpus_per_node, intra_node_gb_per_s=intra_node_gb_per_s,
                          inter_node_gb_per_s=inter_node_gb_per_s)
    tp_lat = link_latency_s(t, gpus_per_node, intra_node_latency_s=intra_node_latency_s,
                            inter_node_latency_s=inter_node_latency_s)
    act_bytes = tokens * h * bytes_per_value
    allreduce = collective_seconds(act_bytes, t, gb_per_s=tp_bw, latency_s=tp_lat, kind="all_reduce")
    # with sequence parallel each all-reduce becomes an all-gather + a reduce-scatter: same bytes, twice the calls
    sp_pair = (collective_seconds(act_bytes, t, gb_per_s=tp_bw, latency_s=tp_lat, kind="all_gather")
               + collective_seconds(act_bytes, t, gb_per_s=tp_bw, latency_s=tp_lat, kind="reduce_scatter"))
    per_collective = np.where(sp, sp_pair, allreduce)
    tp_mb = layers * (4 + 2 * full * recompute_fraction) * per_collective
    tp_comm = m * tp_mb

    # -- context parallel: K/V ring (c−1 exchanges forward, K/V + their gradients backward) ----------------------
    cp_span = t * c
    cp_bw = link_gb_per_s(cp_span, gpus_per_node, intra_node_gb_per_s=intra_node_gb_per_s,
                          inter_node_gb_per_s=inter_node_gb_per_s)
    cp_lat = link_latency_s(cp_span, gpus_per_node, intra_node_latency_s=intra_node_latency_s,
                            inter_node_latency_s=inter_node_latency_s)
    kv_bytes = 2 * tokens * kv / t * bytes_per_value
    ring_step = p2p_seconds(kv_bytes, gb_per_s=cp_bw, latency_s=cp_lat)
    cp_fwd = np.where(c > 1, (c - 1) * ring_step, 0.0)
    cp_layer = (exposed_seconds(cp_fwd, t_core, 1) * (1 + full * recompute_fraction)
                + exposed_seconds(2 * cp_fwd, 2 * t_core, 1))
    cp_mb = layers * cp_layer
    cp_comm = m * cp_mb

    # -- pipeline parallel: activations forward, gradients backward, per micro-batch per chunk ----------------
    pp_span = t * c * d * p  # a pipeline group's ranks lie t·c·d apart: it leaves the node when p·t·c·d > node
    pp_bw = link_gb_per_s(pp_span, gpus_per_node, intra_node_gb_per_s=intra_node_gb_per_s,
                          inter_node_gb_per_s=inter_node_gb_per_s)
    pp_lat = link_latency_s(pp_span, gpus_per_node, intra_node_latency_s=intra_node_latency_s,
                            inter_node_latency_s=inter_node_latency_s)
    send = p2p_seconds(act_bytes / np.where(sp, t, 1), gb_per_s=pp_bw, latency_s=pp_lat)
    pp_comm = np.where(p > 1, 2 * (v * m + p - 1) * send, 0.0)

    # -- data parallel: gradient reduction and ZeRO gathers --------------------------------------------------
    zero = np.asarray(zero_stage)
    grad_group = d * c  # Megatron reduces gradients over the data-parallel × context-parallel group
    dp_span = t * c * d
    dp_bw = link_gb_per_s(dp_span, gpus_per_node, intra_node_gb_per_s=intra_node_gb_per_s,
                          inter_node_gb_per_s=inter_node_gb_per_s)
    dp_lat = link_latency_s(dp_span, gpus_per_node, intra_node_latency_s=intra_node_latency_s,
                            inter_node_latency_s=inter_node_latency_s)
    local_params = num_parameters / (t * p)
    trainable_params = local_params * trainable_fraction  # what has gradients and optimizer states
    grad_bytes = trainable_params * grad_reduce_bytes_per_value  # Megatron reduces its fp32 main grads
    bucket_bytes = np.minimum(grad_bucket_elements * grad_reduce_bytes_per_value, grad_bytes)
    coll = functools.partial(collective_seconds, gb_per_s=dp_bw, latency_s=dp_lat)
    backward_mb = layers * layer_bwd  # compute a gradient reduction can hide behind
    forward_mb = layers * layer_fwd
    sharded = (zero >= 1) | (np.asarray(distributed_optimizer) > 0)
    # ZeRO-0 / Megatron DDP: one all-reduce per step, overlapped with the last micro-batch's backward
    allreduce_dp = coll(grad_bytes, grad_group, kind="all_reduce")
    overlap = np.asarray(overlap_comm) > 0
    # with overlap the last bucket is reduced after the backward ends: it stays exposed (without overlap all of
    # the reduction is exposed already)
    dp_plain = (exposed_seconds(allreduce_dp, backward_mb, overlap_comm)
                + overlap * coll(bucket_bytes, grad_group, kind="all_reduce"))
    # ZeRO-1 / distributed optimizer: reduce-scatter once per step (overlapped), all-gather of the updated params
    rs = coll(grad_bytes, grad_group, kind="reduce_scatter")
    ag = coll(trainable_params * bytes_per_value, grad_group, kind="all_gather")  # the updated 16-bit parameters
    ag_all = coll(local_params * bytes_per_value, grad_group, kind="all_gather")  # ZeRO-3: frozen ones too
    rs_bucket = overlap * coll(bucket_bytes, grad_group, kind="reduce_scatter")
    dp_zero1 = exposed_seconds(rs, backward_mb, overlap_comm) + rs_bucket + ag
    # ZeRO-2: DeepSpeed reduce-scatters every micro-batch (stage_1_and_2.py, partition_gradients) + all-gather
    dp_zero2 = m * exposed_seconds(rs, backward_mb, overlap_comm) + rs_bucket + ag
    # ZeRO-3: per micro-batch all-gather forward and backward + reduce-scatter; the first layer's gather is exposed
    layer_bytes = parameters_per_layer / t * bytes_per_value
    dp_zero3 = (m * (exposed_seconds(ag_all, forward_mb, overlap_comm) + exposed_seconds(ag_all + rs, backward_mb,
                                                                                          overlap_comm))
                + overlap * coll(layer_bytes, grad_group, kind="all_gather") + rs_bucket)
    # ZeRO-3 per-module work (DeepSpeed stage 3 hooks, deepspeed/runtime/zero/parameter_offload.py and stage3.py):
    # every submodule holding partitioned parameters is fetched (all-gather, then released) before each forward,
    # each backward and each recomputed forward, and its gradients are reduced and partitioned once per backward;
    # each call costs a hook latency, plus a collective call when the group has more than one rank (on one GPU the
    # collectives are skipped, the hooks and copies remain). Per pass: layers × modules_per_layer + the embedding.
    modules_pass = layers * zero3_modules_per_layer + 1
    fetches = modules_pass * (2 + full * recompute_fraction)
    multi = (grad_group > 1).astype(float)
    zero3_calls = m * (fetches * (zero3_fetch_latency_s + multi * zero3_collective_call_s)
                       + modules_pass * (zero3_reduce_latency_s + multi * zero3_collective_call_s))
    # ... and the bytes those hooks move through HBM (gather into the full parameter, copy of each gradient into the
    # fp32 partition), per local parameter and pass, so the cost scales with the model and not only with its count
    # of modules (zero3_hbm_bytes_per_parameter, fitted with the latencies)
    zero3_calls = zero3_calls + m * (fetches / modules_pass + 1) * local_params * zero3_hbm_bytes_per_parameter \
        / hbm_bytes_per_s
    dp_comm = np.where(zero == 3, dp_zero3 + zero3_calls,
                       np.where(zero == 2, dp_zero2, np.where(sharded, dp_zero1, dp_plain)))

    # -- offload: PCIe traffic and CPU Adam ------------------------------------------------------------------
    shard = trainable_params / np.where(sharded, grad_group, 1)
    off_opt = np.asarray(offload_optimizer) > 0
    off_par = np.asarray(offload_params) > 0
    host_bps = host_link_gb_per_s * 1e9
    cpu_rate = cpu_adam_params_per_second_per_node / gpus_per_node
    offload_opt_s = np.where(off_opt, 2 * shard * bytes_per_value / host_bps + shard / cpu_rate, 0.0)
    offload_par_s = np.where(off_par, m * 3 * local_params / grad_group * bytes_per_value / host_bps, 0.0)
    offload = offload_opt_s + offload_par_s

    # -- optimizer step on the GPU (memory bound) ------------------------------------------------------------
    # fused Adam on the shard, plus the engine's own passes over the gradients and parameters around it (DeepSpeed:
    # flatten / up-cast of gradients, norm, clipping, copy back to 16 bits; 0 for Megatron)
    optimizer = np.where(off_opt, 0.0, shard * (optimizer_bytes_per_parameter + deepspeed_step_bytes_per_parameter)
                         / hbm_bytes_per_s)

    # -- pipeline bubble: (p−1)/(v·m) of the ideal time --------------------------------------------------------
    per_mb = stage_mb + recompute_mb + tp_mb + cp_mb
    bubble = bubble_fraction(p, m, v) * m * per_mb

    step = compute + recompute_s + tp_comm + cp_comm + pp_comm + dp_comm + offload + optimizer + bubble

    # -- FLOPs (whole job, per step) ---------------------------------------------------------------------------
    layer_gemm = layer_gemm_flops_per_token(hidden_size=h, query_projection_size=q, kv_projection_size=kv,
                                            ffn_hidden_size=f, gated=gated, experts_per_token=experts_per_token)
    core = attention_core_flops_per_token(seq_length=s, query_projection_size=q, causal=causal_attention)
    step_tokens = b * m * d * s
    model_f = model_flops_per_step(tokens=step_tokens, num_layers=L, layer_gemm_per_token=layer_gemm,
                                   attention_core_per_token=core,
                                   logits_per_token=logits_flops_per_token(hidden_size=h, vocab_size=vocab_size))
    # frozen weights (LoRA) need no weight-gradient GEMMs: 2 + trainable_fraction of the 3 weight passes remain
    model_f = model_f * (2 + trainable_fraction) / 3
    extra_f = recompute_flops_per_step(tokens=step_tokens, num_layers=L, layer_gemm_per_token=layer_gemm,
                                       attention_core_per_token=core, recompute=recompute,
                                       recomputed_layers=L * recompute_fraction)
    weight_flops = np.asarray(2 * tokens * (h * (q + 2 * kv) + q * h + experts_per_token * h * (fc1_width + f)) / t)
    return {
        "compute": compute, "recompute": recompute_s, "tp_comm": tp_comm, "cp_comm": cp_comm, "pp_comm": pp_comm,
        "dp_comm": dp_comm, "offload": offload, "optimizer": optimizer, "bubble": bubble, "step_seconds": step,
        "model_flops": model_f, "hardware_flops": model_f + extra_f,
        "gemm_efficiency": weight_flops / (t_weights_fwd * peak_flops),
    }


_STEP_ARGS = step_time_terms.__code__.co_varnames[:step_time_terms.__code__.co_kwonlyargcount]


# ---------------------------------------------------------------------------------------------------------------
# Spec level
# ---------------------------------------------------------------------------------------------------------------
DEEPSPEED_BUCKET_ELEMENTS = 5e8
"""DeepSpeed ``reduce_bucket_size`` default (elements; deepspeed/runtime/zero/config.py)."""
MEGATRON_BUCKET_ELEMENTS = 4e7
"""megatron-core DDP ``bucket_size`` default max(40,000,000, 1,000,000·dp) elements
(megatron/core/distributed/distributed_data_parallel_config.py); the time model uses the 40 M floor."""


def trainable_fraction(model: ModelSpec, plan: ParallelPlan) -> float:
    """Parameters with gradients over all parameters: 1 for a full fine-tune; with LoRA the adapters over the
    model (:func:`workbench.params.lora_params_per_layer`)."""
    if not plan.lora_rank:
        return 1.0
    adapters = model.num_layers * lora_params_per_layer(model, plan.lora_rank, plan.lora_targets)
    return adapters / model.num_parameters


def time_inputs(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, overlap_comm: bool | None = None,
                bucket_elements: float | None = None, profile=None) -> dict:
    """The plain-number keyword arguments of :func:`step_time_terms` for one (model, cluster, plan).
    ``overlap_comm`` ``None``: the plan's (:attr:`ParallelPlan.overlaps_comm`).
    A measured ``profile`` (:class:`workbench.calibrate.HardwareProfile`) replaces the datasheet-derived inputs it
    measured (GEMM curve, memory bandwidth, links, host link, CPU Adam rate)."""
    if overlap_comm is None:
        overlap_comm = plan.overlaps_comm
    gpu = cluster.gpu
    curve = efficiency_curve(gpu.name)
    net = calibration()["network"]
    counts = model.parameter_counts()
    if bucket_elements is None:
        bucket_elements = MEGATRON_BUCKET_ELEMENTS if plan.engine is Engine.MEGATRON else DEEPSPEED_BUCKET_ELEMENTS
    layers_per_stage = model.num_layers // plan.pipeline_parallel
    ds = calibration()["deepspeed"]
    deepspeed = plan.engine is not Engine.MEGATRON
    if plan.recompute is Recompute.FULL:
        fraction = 1.0 if plan.recompute_layers is None else plan.recompute_layers / layers_per_stage
    else:
        fraction = 0.0
    inputs = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        head_dim=model.head_dim, query_projection_size=model.query_projection_size,
        kv_projection_size=model.kv_projection_size,
        ffn_hidden_size=model.moe_ffn_hidden_size if model.is_moe else model.ffn_hidden_size,
        gated=int(model.is_gated), experts_per_token=model.moe_top_k if model.is_moe else 1,
        num_experts=model.num_experts if model.is_moe else 1, seq_length=model.seq_length,
        vocab_size=model_vocab_size(model, plan.tensor_parallel),
        causal_attention=int(model.attention is AttentionImpl.FLASH),
        unfused_attention=int(model.attention.materialises_scores),
        # Megatron-LM's fused scale-mask-softmax kernel (--masked-softmax-fusion) is attention='fused-softmax'
        softmax_fusion=int(model.attention is AttentionImpl.FUSED_SOFTMAX),
        attention_dropout=model.attention_dropout,
        num_parameters=counts.total, parameters_per_layer=counts.per_layer,
        tensor_parallel=plan.tensor_parallel, pipeline_parallel=plan.pipeline_parallel,
        virtual_pipeline=plan.virtual_pipeline, context_parallel=plan.context_parallel,
        data_parallel=plan.data_parallel, micro_batch_size=plan.micro_batch_size,
        num_microbatches=plan.num_microbatches, sequence_parallel=int(plan.sequence_parallel),
        zero_stage=int(plan.zero_stage), offload_optimizer=int(plan.offload_optimizer is not Offload.NONE),
        offload_params=int(plan.offload_params is not Offload.NONE),
        distributed_optimizer=int(plan.distributed_optimizer), recompute=RECOMPUTE_CODES[plan.recompute],
        recompute_fraction=fraction, bytes_per_value=plan.precision.bytes_per_value,
        grad_bucket_elements=bucket_elements, overlap_comm=int(overlap_comm),
        # Megatron with bf16 accumulates and reduces fp32 main gradients (DDP grad_reduce_in_fp32; Megatron-LM turns
        # --accumulate-allreduce-grads-in-fp32 on for bf16); fp16 reduces 16-bit gradients
        grad_reduce_bytes_per_value=(4.0 if plan.engine is Engine.MEGATRON and plan.precision is Precision.BF16
                                     else plan.precision.bytes_per_value),
        peak_flops=gpu.peak_flops(plan.precision), hbm_gb_per_s=gpu.hbm_gb_per_s,
        gpus_per_node=cluster.gpus_per_node,
        intra_node_gb_per_s=cluster.intra_node_gb_per_s * net["intra_node_bandwidth_efficiency"],
        inter_node_gb_per_s=cluster.inter_node_gb_per_s * net["inter_node_bandwidth_efficiency"],
        host_link_gb_per_s=gpu.host_link_gb_per_s, intra_node_latency_s=net["intra_node_latency_s"],
        inter_node_latency_s=net["inter_node_latency_s"], gemm_efficiency_max=curve["gemm_efficiency_max"],
        gemm_half_dim=curve["gemm_half_dim"], memory_passes=curve["memory_passes"],
        hbm_efficiency=curve["hbm_efficiency"], layer_pass_overhead_s=curve.get("layer_pass_overhead_s", 0.0),
        cpu_adam_params_per_second_per_node=calibration()["cpu_adam"]["params_per_second_per_node"],
        optimizer_bytes_per_parameter=calibration()["gpu_optimizer"][
            "bytes_per_parameter" if plan.adam is AdamImpl.FUSED else "torch_foreach_bytes_per_parameter"],
        deepspeed_step_bytes_per_parameter=ds["step_bytes_per_parameter"] if deepspeed else 0.0,
        zero3_modules_per_layer=zero3_modules_per_layer(model),
        zero3_fetch_latency_s=ds["zero3_fetch_latency_s"], zero3_reduce_latency_s=ds["zero3_reduce_latency_s"],
        zero3_collective_call_s=ds["zero3_collective_call_s"],
        zero3_hbm_bytes_per_parameter=ds.get("zero3_hbm_bytes_per_parameter", 0.0),
        trainable_fraction=trainable_fraction(model, plan),
    )
    if profile is not None:
        inputs.update(profile.time_overrides(cluster, plan.precision)[0])
    return inputs


def zero3_modules_per_layer(model: ModelSpec) -> int:
    """Submodules of one transformer layer whose parameters ZeRO-3 partitions and fetches separately: the QKV and
    output projections and the two MLP linears (megatron-core local spec; norms and biases stay below DeepSpeed's
    ``stage3_param_persistence_threshold`` of 1e5 elements and are not partitioned). MoE: the router and two linears
    per expert instead of the MLP's two."""
    mlp = 1 + 2 * model.num_experts if model.is_moe else 2
    return 2 + mlp


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeEstimate:
    """The time model's answer for one (model, cluster, plan). Seconds per optimizer step unless named."""

    step_seconds: float
    """Wall time of one optimizer step (global batch)."""
    tokens_per_step: int
    """global_batch_size × seq_length."""
    samples_per_step: int
    world_size: int
    model_flops_per_step: float
    """Model FLOPs of one step, whole job (no recompute)."""
    hardware_flops_per_step: float
    """FLOPs executed per step including recomputation."""
    peak_flops_per_gpu: float
    """Dense peak of one GPU for the plan's precision."""
    breakdown: dict
    """term → exposed seconds per step (keys of :data:`TERMS`); they sum to ``step_seconds``."""
    gemm_efficiency: float
    """FLOP-weighted fraction of peak the layer GEMMs reach on this plan's shapes."""
    calibration_source: str = ""

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def samples_per_second(self) -> float:
        return self.samples_per_step / self.step_seconds

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_seconds / self.world_size / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flops_per_step / self.step_seconds / self.world_size / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOP/s per GPU over dense peak."""
        return self.model_tflops_per_gpu * 1e12 / self.peak_flops_per_gpu

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: executed FLOP/s (with recompute) per GPU over dense peak."""
        return self.hardware_tflops_per_gpu * 1e12 / self.peak_flops_per_gpu

    def train_seconds(self, tokens: float) -> float:
        """Wall time to train on ``tokens`` tokens."""
        return tokens / self.tokens_per_second

    def gpu_hours(self, tokens: float) -> float:
        return self.train_seconds(tokens) * self.world_size / 3600.0

    def cost(self, tokens: float, price_per_gpu_hour: float) -> float:
        """Cost of training on ``tokens`` tokens at ``price_per_gpu_hour`` (same currency)."""
        if price_per_gpu_hour < 0:
            raise ValueError(f"price_per_gpu_hour={price_per_gpu_hour} must be >= 0")
        return self.gpu_hours(tokens) * price_per_gpu_hour

    def to_dict(self) -> dict:
        return {
            "step_seconds": self.step_seconds, "tokens_per_second": self.tokens_per_second,
            "samples_per_second": self.samples_per_second, "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "gemm_efficiency": self.gemm_efficiency, "tokens_per_step": self.tokens_per_step,
            "breakdown": dict(self.breakdown), "calibration_source": self.calibration_source,
        }


def microbatch_phase_seconds(*, compute_seconds, recompute_seconds, tp_comm_seconds, cp_comm_seconds,
                             num_microbatches):
    """Forward and backward seconds of one micro-batch on the slowest pipeline stage, from a step's terms.

    ``compute``, ``tp_comm`` and ``cp_comm`` of :func:`step_time_terms` are m × the per-micro-batch stage time; the
    forward takes 1/3 of it and the backward 2/3 (the backward runs the data- and weight-gradient GEMMs, twice the
    forward's, as in ``step_time_terms``); the recomputed forward runs inside the backward. The two add up to the
    per-micro-batch time the ``bubble`` term multiplies, so a 1F1B schedule simulated with them has an idle time per
    stage equal to that term: (p−1)·(forward + backward). Works on scalars and numpy arrays.
    Returns ``(forward_seconds, backward_seconds)``."""
    per_mb = (np.asarray(compute_seconds) + tp_comm_seconds + cp_comm_seconds) / num_microbatches
    return per_mb / 3.0, 2.0 * per_mb / 3.0 + np.asarray(recompute_seconds) / num_microbatches


def estimate_time(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, overlap_comm: bool | None = None,
                  bucket_elements: float | None = None, profile=None) -> TimeEstimate:
    """Step time, throughput and utilisation of ``plan`` for ``model`` on ``cluster`` (see module docstring).
    Validates the three specs together first (``ValueError`` naming fields and numbers).

    ``overlap_comm`` (DeepSpeed ``overlap_comm`` / Megatron ``overlap_grad_reduce``; ``None``: the engine's
    default, :attr:`ParallelPlan.overlaps_comm`) lets the data-parallel reduction hide behind backward compute; ``bucket_elements`` defaults to DeepSpeed's ``reduce_bucket_size`` or
    Megatron's DDP bucket. ``profile``: a measured :class:`workbench.calibrate.HardwareProfile` (see
    :func:`time_inputs`); ``calibration_source`` then names it."""
    validate(model, cluster, plan)
    inputs = time_inputs(model, cluster, plan, overlap_comm=overlap_comm, bucket_elements=bucket_elements,
                         profile=profile)
    terms = step_time_terms(**inputs)
    return TimeEstimate(
        step_seconds=float(terms["step_seconds"]),
        tokens_per_step=plan.global_batch_size * model.seq_length,
        samples_per_step=plan.global_batch_size, world_size=plan.world_size,
        model_flops_per_step=float(terms["model_flops"]), hardware_flops_per_step=float(terms["hardware_flops"]),
        peak_flops_per_gpu=float(inputs["peak_flops"]),
        breakdown={k: float(terms[k]) for k in TERMS}, gemm_efficiency=float(terms["gemm_efficiency"]),
        calibration_source=(profile.applied(cluster, plan.precision)["note"] if profile is not None
                            else efficiency_curve(cluster.gpu.name).get("source", "")),
    )
