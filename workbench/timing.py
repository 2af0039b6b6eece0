"""Time model: seconds per term for one optimizer step, and what they add up to.

Everything is a pure function of plain numbers that works on Python scalars and numpy arrays alike;
:func:`step_time_terms` is the array-level core (the planner calls it with arrays of thousands of plans), split by
concern into :func:`compute_terms`, :func:`communication_terms`, :func:`optimizer_terms` and :func:`pipeline_terms`
over one :class:`StepInputs`; :func:`workbench.encode.time_inputs` builds those inputs from plans (one or many) and
:func:`time_estimate_from` wraps one plan's answer in a :class:`TimeEstimate` that keeps the per-layer and
per-micro-batch seconds and the links alongside the totals.

Terms (seconds per step on the slowest pipeline stage; each function's docstring has its formula and source):

- ``compute``   forward + backward of every micro-batch: GEMMs at the shape-dependent efficiency of the GPU's
                calibrated curve (:func:`gemm_efficiency`) plus memory-bound element-wise work at HBM bandwidth;
- ``recompute`` the extra forward of activation recomputation (kept apart from compute);
- ``tp_comm``   tensor-parallel all-reduces (or all-gather + reduce-scatter with sequence parallel), not overlapped;
                (with FP8 delayed scaling also the per-micro-batch amax all-reduce over the stage's ranks);
- ``cp_comm``   the exposed part of the context-parallel K/V ring;
- ``ep_comm``   MoE token dispatch and combine (all-to-all over the expert-parallel group, or all-gather /
                reduce-scatter), not overlapped;
- ``pp_comm``   pipeline point-to-point sends;
- ``dp_comm``   the exposed part of the data-parallel gradient reduction / ZeRO gathers (their transfers), and
                each micro-batch's gradient accumulation into the reduce buffer;
- ``zero3_hooks`` ZeRO-3's per-module parameter fetch / release and gradient reduce-and-partition: the hooks'
                host time beyond the kernels and their HBM copies (none of it crosses a link; 0 below ZeRO-3);
- ``offload``   ZeRO-Offload PCIe traffic and the CPU Adam step;
- ``optimizer`` the GPU optimizer step (memory bound);
- ``bubble``    pipeline idle time of the slowest stage: (p−1)/(v·m) of the ideal time with equal stages, less
                where the stages differ (:func:`workbench.schedule.bubble_seconds`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from workbench import defaults, dsmoe
from workbench.flops import (attention_core_flops_per_token, layer_gemm_flops_per_token, logits_flops_per_token,
                             flops_per_second_per_gpu, model_flops_per_step, recompute_flops_per_step)
from workbench.npscalar import any_true, asarray, maximum, minimum, ndim, where
from workbench.parallel import GROUP_SHAPES, group_crosses_nodes
from workbench.params import hf_gpt_layer, qk_norm_widths
from workbench.schedule import bubble_seconds
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, validate

TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_hooks", "offload",
         "optimizer", "bubble")
"""Breakdown keys, in drawing order. All are exposed seconds per optimizer step."""

TERM_WORDS = {
    "compute": "compute", "recompute": "recomputation", "tp_comm": "tensor-parallel all-reduce",
    "cp_comm": "context-parallel K/V exchange", "ep_comm": "expert all-to-all", "pp_comm": "pipeline sends",
    "dp_comm": "data-parallel gradient traffic",
    "zero3_hooks": "ZeRO-3 per-module fetch / release hooks (host) and their copies",
    "offload": "CPU offload traffic", "optimizer": "optimizer step", "bubble": "pipeline bubble",
}
"""Each :data:`TERMS` key in words (the planner's explanation, the app's time line)."""


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


def gpu_kernel_constants(gpu_name: str) -> dict:
    """The layer-kernel constants measured on this GPU itself (catalog ``gpu_kernels``, written by
    ``benchmarks/gpu_layer_kernels.py --write-calibration`` from a record of that GPU), as :class:`StepInputs` fields:
    its transformers layers' ``weight_gemm_time_scale``, and ``layer_hbm_scale``, how much more of its datasheet
    bandwidth its memory-bound layer kernels reach than the H200's on the same fit shapes (its measured efficiency
    over the catalog ``transformers`` one, which the counted transformers bytes keep, so that they move at the GPU's
    own measured fraction), ``score_hbm_scale``, the same for unfused attention's score kernels where they were
    measured apart, and ``moe_block_hbm_scale`` for transformers' MoE blocks where their efficiency was measured on
    it (each else ``layer_hbm_scale``), and ``optimizer_hbm_scale``, the same for the fused optimizer step (fused
    Adam and DeepSpeed's passes around it), where ``benchmarks/gpu_deepspeed_step.py --scale`` measured it (else 1:
    the optimizer is not a layer kernel). ``{}`` for a GPU without a measurement of its own: it takes the H200's
    constants."""
    entry = (calibration().get("gpu_kernels") or {}).get(gpu_name)
    if not entry:
        return {}
    hf = calibration()["transformers"]
    layer_scale = entry["layer_memory_hbm_efficiency"] / hf["layer_memory_hbm_efficiency"]
    moe = entry.get("moe_block_hbm_efficiency")
    return dict(weight_gemm_time_scale=entry["weight_gemm_time_scale"], layer_hbm_scale=layer_scale,
                score_hbm_scale=entry.get("score_hbm_scale", layer_scale),
                moe_block_hbm_scale=layer_scale if moe is None else moe / hf["moe_block_hbm_efficiency"],
                optimizer_hbm_scale=entry.get("optimizer_hbm_scale", 1.0))


def _generation_curve(curves: dict, gen: str, gpu_name: str, *, fallback: str, fallback_name: str) -> dict:
    """A copy of the catalog curve of GPU generation ``gen``; for a generation without one, the ``fallback``
    generation's, its source saying so."""
    if gen in curves:
        return dict(curves[gen])
    curve = dict(curves[fallback])
    curve["source"] = f"uncalibrated for {gen} ({gpu_name}): the {fallback_name} curve is reused. " + curve["source"]
    return curve


def _measured_gemms(cal: dict, section: str, gen: str) -> dict:
    """The catalog's measured-GEMM ``section`` when it applies (a Hopper GPU, GEMMs filled in), else ``{}``."""
    measured = cal.get(section) or {}
    return measured if gen == "hopper" and measured.get("gemms") else {}


def efficiency_curve(gpu_name: str) -> dict:
    """The GEMM-efficiency curve for a GPU: ``{"gemm_efficiency_max", "gemm_half_dim", "memory_passes",
    "hbm_efficiency", "source"}``. For Hopper GPUs, a filled ``h200_measured`` section (the JSON that
    ``benchmarks/gpu_gemm.py`` prints) replaces the stored curve by one fitted to the measurements."""
    cal = calibration()
    gen = gpu_generation(gpu_name)
    curve = _generation_curve(cal["curves"], gen, gpu_name, fallback="ampere", fallback_name="A100")
    measured = _measured_gemms(cal, "h200_measured", gen)
    if measured:
        note = (f"GEMM curve fitted to {len(measured['gemms'])} GEMMs measured by benchmarks/gpu_gemm.py on "
                f"{measured.get('device', 'H200')}")
        curve.update(_measured_hopper_curve(), source=note + ("; " + curve["source"] if gen in cal["curves"] else ""))
    return curve


def fp8_efficiency_curve(gpu_name: str) -> dict:
    """The FP8 GEMM-efficiency curve of a GPU (``{"gemm_efficiency_max", "gemm_half_dim", "source"}``, relative to
    its FP8 peak): catalog ``fp8_curves`` by generation; for Hopper a filled ``h200_fp8_measured`` section (installed
    by ``benchmarks/gpu_gemm.py --install-fp8``) replaces it by a fit to the measured FP8 GEMMs."""
    cal = calibration()
    gen = gpu_generation(gpu_name)
    curve = _generation_curve(cal.get("fp8_curves") or {}, gen, gpu_name, fallback="hopper",
                              fallback_name="Hopper FP8")
    measured = _measured_gemms(cal, "h200_fp8_measured", gen)
    if measured:
        curve.update(fit_gemm_curve(measured["gemms"], peak_tflops=measured["peak_tflops"]),
                     source=f"FP8 GEMM curve fitted to {len(measured['gemms'])} FP8 GEMMs "
                            f"({measured.get('method', 'torch._scaled_mm')}) measured on "
                            f"{measured.get('device', 'H200')}")
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
    replicated = 10 / where(asarray(sequence_parallel) > 0, t, 1)
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
    fused = (asarray(softmax_fusion) > 0).astype(float)
    drop = (asarray(attention_dropout) > 0).astype(float) * (2 * v + 1)
    fwd_unfused = v + cast * (v + 4) + 8 + 8 + cast * (4 + v) + drop + v
    bwd_unfused = 2 * v + drop + cast * (v + 4) + 12 + 8 + cast * (4 + v) + 2 * v
    fwd_fused = v + 2 * v + drop + v
    bwd_fused = 2 * v + drop + 3 * v + 2 * v
    return fused * fwd_fused + (1 - fused) * fwd_unfused, fused * bwd_fused + (1 - fused) * bwd_unfused


def rope_bytes(*, bytes_per_value, fused):
    """HBM bytes per query or key element of one layer's rotary position embedding, ``(forward, backward)``,
    counted kernel by kernel (v = bytes_per_value). Unfused, as megatron-core's ``_apply_rotary_pos_emb_bshd``
    without ``apply_rope_fusion`` and transformers' ``apply_rotary_pos_emb`` run it, ``t·cos + rotate_half(t)·sin``:

        forward:  rotate_half's neg of one half (v) and cat (2v), the two products (2v each), the sum (3v), the
                  concatenation with the unrotated part (2v)                                          = 12v
        backward: the two products' gradients (2v each), the neg and chunk gradients (v + 2v), the sum of the
                  two branches (3v)                                                                   = 10v

    Fused (Transformer Engine / Apex ``fused_apply_rotary_pos_emb``: one read and one write): 2v and 2v."""
    v = np.asarray(bytes_per_value, dtype=float)
    f = np.asarray(fused, dtype=float)
    return f * 2 * v + (1 - f) * 12 * v, f * 2 * v + (1 - f) * 10 * v


def cross_entropy_bytes(*, bytes_per_value, cross_entropy_fusion=0):
    """HBM bytes per logit (token × padded vocabulary entry) of megatron-core's loss, by ``cross_entropy_fusion``
    code (0 none, 1 native, 2 te; :class:`~workbench.specs.CrossEntropyFusion`), counted from the kernels,
    v = bytes_per_value. Every variant starts with the logits GEMM's write (v) and ends with the two output-layer
    GEMMs reading the 16-bit logit gradient (2v).

    none — ``vocab_parallel_cross_entropy`` in fp32 (megatron/core/tensor_parallel/cross_entropy.py), one eager
    kernel per step:

        forward:  v + (v+4) (``.float()``) + 4 (max) + 8 (subtract max, in place) + 8 (exp, in place) + 4 (sum)
                  + 8 (divide by the sum, in place)                                                    = 40 B for bf16
        backward: 8 (grad ``mul_`` in place) + (4+v) (cast back to 16 bits) + 2v                      = 18 B for bf16

    native — ``fused_vocab_parallel_cross_entropy`` (megatron/core/fusions/fused_cross_entropy.py): the same steps
    in three compiled (``jit_fuser``) functions, each one pass that writes its in-place result back:

        forward:  v + (v+4) (cast, max) + 8 (subtract, exp, sum) + 8 (divide)                         = 24 B for bf16
        backward: 8 (softmax read, the in-place update written back) + v (16-bit gradient) + 2v       = 14 B for bf16

    te — Transformer Engine ``parallel_cross_entropy`` (transformer_engine/pytorch/triton/cross_entropy.py,
    NVIDIA/TransformerEngine 1b2b4a8e, the 2.x layout): ``online_softmax_kernel`` reads the logits once for each
    row's max and sum, ``cross_entropy_kernel`` reads them again and writes the gradient over them in place, still in
    the forward; backward, ``element_mul_kernel`` scales that gradient in place by the incoming one (megatron-core's
    loss is per token, so the "grad_output is 1.0" shortcut does not apply):

        forward:  v + v + 2v                                                                            = 8 B for bf16
        backward: 2v + 2v                                                                               = 8 B for bf16

    Returns ``(forward_bytes, backward_bytes)``."""
    v = np.asarray(bytes_per_value, dtype=float)
    code = np.asarray(cross_entropy_fusion)
    forward = np.where(code == 2, 4 * v, np.where(code == 1, v + (v + 4) + 8 + 8, v + (v + 4) + 4 + 8 + 8 + 4 + 8))
    backward = np.where(code == 2, 4 * v, np.where(code == 1, 8 + v + 2 * v, 8 + (4 + v) + 2 * v))
    return forward, backward


def soft_cap_bytes(*, bytes_per_value):
    """HBM bytes per element of transformers' soft-capping ``torch.tanh(x / cap) * cap`` (Gemma 2's scores and
    logits, ``models/gemma2/modeling_gemma2.py``), three unfused kernels in the model dtype, v = bytes_per_value:

        forward:  2v (divide) + 2v (tanh) + 2v (multiply)                                            = 12 B for bf16
        backward: 2v (multiply's backward) + 3v (tanh's: reads its output and the gradient) + 2v (divide's) = 14 B

    Returns ``(forward_bytes, backward_bytes)``."""
    v = np.asarray(bytes_per_value, dtype=float)
    return 6 * v, 7 * v


def collective_seconds(nbytes, group_size, *, gb_per_s, latency_s, kind):
    """Ring/tree cost of one collective over ``group_size`` ranks on a link of ``gb_per_s`` per GPU:

        all_reduce:                  2·(n−1)/n · bytes / bandwidth + 2·log2(n) · latency
        reduce_scatter / all_gather:   (n−1)/n · bytes / bandwidth +   log2(n) · latency

    (bandwidth term of the ring algorithm — Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
    communication operations in MPICH"; NCCL's tree keeps latency logarithmic at scale). ``bytes`` is the full
    tensor (all-reduce, or the gathered/scattered whole). Zero for a group of one.
    """
    n = maximum(group_size, 1)
    factor = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}[kind]
    return where(n > 1, factor * ((n - 1) / n * nbytes / (gb_per_s * 1e9) + np.log2(n) * latency_s), 0.0)


def p2p_seconds(nbytes, *, gb_per_s, latency_s):
    """One point-to-point send: latency + bytes / bandwidth."""
    return latency_s + nbytes / (gb_per_s * 1e9)


def exposed_seconds(comm_seconds, overlappable_seconds, overlap):
    """Communication left on the critical path: max(0, comm − compute it can hide behind) when overlapped,
    all of it otherwise."""
    return where(asarray(overlap) > 0, maximum(0.0, comm_seconds - overlappable_seconds), comm_seconds)


TE_UB_MARGIN_SMS = 16
"""SMs Transformer Engine gives a ``pipeline`` or ``bulk`` userbuffer overlap by default (``num_sm`` 16 with
``set_sm_margin``: the overlapped GEMM runs on the device's SMs less these); ``ring_exchange`` overlaps take 1 SM
and no margin, their copies run on the copy engines (``use_ce``). transformer_engine/pytorch/module/base.py
``initialize_ub`` ``get_default_config`` (NVIDIA/TransformerEngine d0067d0d). NVIDIA's H100 recipes tune these per
GEMM (Megatron-Bridge src/megatron/bridge/training/comm_overlap.py ``userbuffers_*_h100_*``: 2-24 SMs for the bulk
overlaps, 8-24 for pipelined reduce-scatters, ring exchange for them in FP8); the workbench prices TE's defaults."""

GPU_SM_COUNT = {"H100-SXM": 132, "H100-PCIe": 114, "H200": 132, "H800": 132, "H20": 78, "B200": 148,
                "A100-40GB": 108, "A100-80GB": 108, "A800-80GB": 108, "L40S": 142, "RTX-4090": 128,
                "V100-16GB": 80, "V100-32GB": 80}
"""Streaming multiprocessors per GPU (NVIDIA architecture whitepapers: H100 SXM5 132, H100 PCIe 114 — NVIDIA H100
Tensor Core GPU Architecture, 2022; A100 108 — NVIDIA A100 Tensor Core GPU Architecture, 2020; B200 148, H20 78,
L40S 142, RTX 4090 128, V100 80 from the product datasheets). A GPU not listed is priced as Hopper (132)."""


def gpu_sm_count(gpu_name: str) -> int:
    """SMs of ``gpu_name`` (:data:`GPU_SM_COUNT`; 132 when unknown)."""
    return GPU_SM_COUNT.get(str(gpu_name), 132)


TE_UB_PIPELINE_SPLITS = 4
"""Chunks a ``pipeline`` (GEMM + reduce-scatter) userbuffer overlap splits its GEMM into by default (``num_splits``
4; ``ring_exchange`` uses tp_size chunks): TE ``initialize_ub`` ``get_default_config``."""


TE_UB_COMPUTE_STREAMS = 3
"""Compute streams the userbuffer overlaps spread their GEMM chunks over (``_NUM_MAX_UB_STREAMS``,
transformer_engine/pytorch/cpp_extensions/gemm.py; chunk i on stream i % 3 in ``CommOverlapBase::split_overlap_rs``
and ``CommOverlapP2PBase::split_overlap_ag``, common/comm_gemm_overlap/comm_gemm_overlap.cpp)."""


def tp_overlap_exposed_seconds(comm_seconds, gemm_seconds, *, sm_fraction=0.0, chunked_gemm_seconds=None):
    """Seconds one userbuffer-overlapped TP collective adds to its GEMM (``--tp-comm-overlap``): the GEMM runs as
    chunks (``chunked_gemm_seconds``: the chunks' sum on the efficiency curve, default the whole GEMM) on the SMs
    the communication leaves it, 1 − ``sm_fraction`` of them (0 for ``ring_exchange``, which takes no SM margin),
    so it takes g' = g_chunks / (1 − f); the collective is hidden behind it and only max(0, comm − g') is exposed.
    Returns (g' − g) + max(0, comm − g'), g the unsplit GEMM the compute term already counts."""
    chunks = gemm_seconds if chunked_gemm_seconds is None else chunked_gemm_seconds
    slowed = chunks / (1.0 - sm_fraction)
    return (slowed - gemm_seconds) + maximum(0.0, comm_seconds - slowed)


def zero3_fetch_bytes_per_parameter(bytes_per_value, group_ranks, offload_params):
    """HBM bytes one ZeRO-3 module fetch moves per local parameter: the 16-bit partition read and the gathered
    parameter written (``2 · bytes_per_value``) when the partition group has more than one rank or the parameters
    live on the host (their partition is copied in). On one rank with the parameters on the GPU nothing is copied:
    DeepSpeed 0.19.8 ``Init.all_gather_coalesced`` takes ``_no_gather_coalesced`` when every partition world size
    is 1, and its ``NoGatherHandle`` sets ``param.data`` to a view of the rank's own partition
    (``deepspeed/runtime/zero/partition_parameters.py``)."""
    copies = (asarray(group_ranks) > 1) | (asarray(offload_params) > 0)
    return where(copies, 2.0 * bytes_per_value, 0.0)


def zero3_hook_seconds(fetches, modules, multi, *, fetch_latency_s, reduce_latency_s, collective_call_s,
                       hooks=None):
    """Host seconds of ZeRO-3's hooks in one step: each module hook call (``hooks``: DeepSpeed runs its pre- and
    post-forward and backward hooks on every submodule, parameters or not; ``None``: one per fetch) costs
    ``fetch_latency_s``, each fetch of partitioned parameters and each module's gradient reduce-and-partition
    (``reduce_latency_s``) ``collective_call_s`` more when the group has more than one rank (``multi`` 1)."""
    hooks = fetches if hooks is None else hooks
    return (hooks * fetch_latency_s + fetches * multi * collective_call_s
            + modules * (reduce_latency_s + multi * collective_call_s))


_ERFC = np.vectorize(math.erfc, otypes=[float])


def expected_excess_seconds(host_seconds, hidden_seconds, spread):
    """Expected host time left on the critical path, ``E[max(0, Z·host − hidden)]``, when the host's speed varies
    between processes: ``Z`` lognormal with median 1 and log standard deviation ``spread``. Closed form (the
    lognormal partial expectation): ``host·exp(s²/2)·Φ(d₁) − hidden·Φ(d₁ − s)``,
    ``d₁ = (ln(host/hidden) + s²)/s``.
    ``spread`` 0 gives ``max(0, host − hidden)``. Used for ZeRO-3's hook time, whose per-fetch cost differs up to
    ~2x between processes of one configuration (``benchmarks/bench_accuracy.py``'s REPEATABILITY table)."""
    if ndim(spread) == 0 and float(spread) == 0.0:
        return maximum(0.0, host_seconds - hidden_seconds)
    s = np.maximum(np.asarray(spread, dtype=float), 1e-12)
    a = np.maximum(np.asarray(host_seconds, dtype=float), 1e-300)
    b = np.maximum(np.asarray(hidden_seconds, dtype=float), 1e-300)
    d1 = (np.log(a / b) + s * s) / s
    cdf = lambda x: 0.5 * _ERFC(-x / math.sqrt(2.0))  # noqa: E731  (the standard normal CDF)
    out = np.maximum(0.0, a * np.exp(0.5 * s * s) * cdf(d1) - b * cdf(d1 - s))
    out = np.where(asarray(host_seconds) > 0, out, 0.0)
    return out if out.ndim else np.float64(out)


# ---------------------------------------------------------------------------------------------------------------
# The array-level core
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class StepInputs:
    """The plain numbers :func:`step_time_terms` prices, each a scalar or a numpy array (broadcast together).

    Codes: ``recompute`` 0 none / 1 selective / 2 full (``recompute_fraction`` of layers for full); ``zero_stage``
    0-3; flags (``gated``, ``sequence_parallel``, ``offload_*``, ``distributed_optimizer``, ``causal_attention``,
    ``unfused_attention``, ``overlap_comm``, ``softmax_fusion``) 0/1; ``attention_dropout`` is the probability
    (only > 0 matters). ``vocab_size`` is the padded vocabulary; ``ffn_hidden_size`` is the expert width for MoE
    (``experts_per_token`` = top-k, ``num_experts`` = E; 1 and 1 for dense). :func:`workbench.encode.time_inputs`
    builds them from plans."""

    # model
    num_layers: object
    hidden_size: object
    num_attention_heads: object
    head_dim: object
    query_projection_size: object
    kv_projection_size: object
    ffn_hidden_size: object
    gated: object
    experts_per_token: object
    num_experts: object
    seq_length: object
    vocab_size: object
    causal_attention: object
    unfused_attention: object
    softmax_fusion: object
    attention_dropout: object
    num_parameters: object
    parameters_per_layer: object
    # plan
    tensor_parallel: object
    pipeline_parallel: object
    virtual_pipeline: object
    context_parallel: object
    data_parallel: object
    micro_batch_size: object
    num_microbatches: object
    sequence_parallel: object
    zero_stage: object
    offload_optimizer: object
    offload_params: object
    distributed_optimizer: object
    recompute: object
    recompute_fraction: object
    bytes_per_value: object
    grad_bucket_elements: object
    grad_reduce_bytes_per_value: object
    overlap_comm: object
    # hardware and calibration
    peak_flops: object
    hbm_gb_per_s: object
    gpus_per_node: object
    intra_node_gb_per_s: object
    inter_node_gb_per_s: object
    host_link_gb_per_s: object
    intra_node_latency_s: object
    inter_node_latency_s: object
    gemm_efficiency_max: object
    gemm_half_dim: object
    memory_passes: object
    hbm_efficiency: object
    layer_pass_overhead_s: object
    cpu_adam_params_per_second_per_node: object
    optimizer_bytes_per_parameter: object
    deepspeed_step_bytes_per_parameter: object
    zero3_modules_per_layer: object
    zero3_fetch_latency_s: object
    zero3_reduce_latency_s: object
    zero3_collective_call_s: object
    trainable_fraction: object = 1.0
    """Parameters with gradients over all parameters (LoRA: adapters / all; 1 for a full fine-tune)."""
    masked_attention_share: object = 0.0
    """The share of layers whose fused attention gets an explicit mask and so computes every block of the scores
    (:func:`workbench.memory.sliding_window_masked_share`): their core is not halved by ``causal_attention``."""
    zero3_hooked_modules_per_layer: object = None
    """Submodules of one layer whose DeepSpeed ZeRO-3 hooks run each pass, parameters or not
    (:func:`zero3_hooked_modules_per_layer`); ``None``: ``zero3_modules_per_layer``."""
    hf_recompute_layer_s: object = 0.0
    """transformers' gradient checkpointing: host seconds per checkpointed decoder layer of the checkpoint machinery
    itself (non-reentrant ``torch.utils.checkpoint``: the RNG-state save and restore, the saved-tensor pack and
    unpack hooks, the recompute's contexts), on top of the layer's own host time and the recompute's repeat of its
    forward (:func:`hf_checkpoint_host`; catalog ``transformers.recompute_layer_overhead_s``; 0 for other stacks)."""
    hf_layer_host_s: object = 0.0
    """transformers models: host seconds per decoder layer per micro-batch, checkpointed or not (the layer's Python
    forward and the launches of its autograd backward; :func:`microstep_host`;
    :func:`workbench.layerops.layer_host_seconds`: the stack's base plus a cost per ATen operator the layer's design
    dispatches; 0 for other stacks)."""
    forward_host_share: object = 0.0
    """Share of a layer's host time (``layer_host_s`` or ``hf_layer_host_s``, LoRA and an MoE layer's
    ``moe_block_host_s`` included) spent in its forward. Two uses: a transformers layer checkpointed runs that share
    again in its recompute (:func:`hf_checkpoint_host`); and the host runs ahead of the GPU across the whole
    micro-step, but the backward's kernels cannot be queued before the forward's host work is done, so a forward
    whose host outlasts its kernels leaves the GPU waiting even when the micro-step's total host time is hidden
    (:func:`host_wait`). Catalog ``megatron_core.layer_forward_host_share`` (benchmarks/gpu_depth_overlap.py
    --forward-share) and ``transformers.layer_forward_host_share`` (benchmarks/gpu_hf_layer_host.py), both measured;
    0 leaves the plain ``max(host, GPU)``."""
    hf_lora_module_host_s: object = 0.0
    """transformers models with LoRA: host seconds per adapted projection per forward pass (peft's Python around
    ``lora_B(lora_A(dropout(x))) * scaling`` and its backward launches; a checkpointed layer runs it twice);
    catalog ``transformers.lora_module_host_s``."""
    lora_modules_per_layer: object = 0.0
    """Projections of one layer carrying a LoRA adapter (:func:`workbench.params.lora_modules_per_layer`; 0 for a
    full fine-tune)."""
    cross_entropy_fusion: object = 0
    """Megatron's loss kernels, a :data:`~workbench.specs.CROSS_ENTROPY_FUSION_CODES` code (0 none, 1 native, 2 te;
    :func:`cross_entropy_bytes`)."""
    soft_cap: object = 0.0
    """1 where the model soft-caps its attention scores (eager only: flash kernels cap in-kernel) and its logits,
    ``tanh(x / cap) · cap`` (Gemma 2 in transformers): three more element-wise passes over each (:func:`soft_cap_bytes`)."""
    flash_forward_efficiency_max: object = 0.0
    """Fused attention's forward rate as a fraction of peak (catalog ``flash_attention``; 0: price the attention
    core on the GEMM curve)."""
    flash_backward_efficiency_max: object = 0.0
    flash_half_seq: object = 1.0
    flash_backward_flops_ratio: object = 2.0
    cp_comm_type: object = 0
    """Context-parallel exchange (:data:`CP_COMM_CODES`: 0 p2p ring, 1 a2a, 2 all_gather, 3 a2a+p2p)."""
    cp_a2a_size: object = 1
    """Ranks of the all-to-all level of context parallelism (c for a2a, the inner size for a2a+p2p, else 1)."""
    zero3_hbm_bytes_per_parameter: object = 0.0
    """ZeRO-3: HBM bytes the hooks move per local parameter per fetch pass and per gradient partition pass (the
    gather into the full parameter, the copy into the fp32 partition); fitted with the latencies."""
    fp8_layer_fraction: object = 0.0
    """Share of the layers whose linear GEMMs run in FP8 (Transformer Engine FP8 training; 0: none)."""
    fp8_bf16_first: object = 0
    """Megatron's bf16 first layers of an FP8 run (``--num-layers-at-start-in-bf16``): global layers [0, F), built
    on the first stage (:func:`fp8_stage_shares`)."""
    fp8_bf16_last: object = 0
    """Megatron's bf16 last layers (``--num-layers-at-end-in-bf16``): global layers [L − B, L), on the last stage."""
    fp8_peak_flops: object = 1.0
    """Dense FP8 peak FLOP/s of the GPU (used where ``fp8_layer_fraction`` > 0)."""
    fp8_gemm_efficiency_max: object = 1.0
    """:func:`gemm_efficiency` parameters of FP8 GEMMs (their own curve, relative to the FP8 peak)."""
    fp8_gemm_half_dim: object = 1.0
    fp8_activation_bytes: object = 1.0
    """Bytes per FP8 value with its recipe's scales (:data:`workbench.memory.FP8_ACTIVATION_BYTES`)."""
    fp8_weight_cast_bytes_per_parameter: object = 0.0
    """HBM bytes per FP8 linear weight per step to (re)build its FP8 copies (once per step: Transformer Engine reuses
    them over the micro-batches)."""
    fp8_amax_reductions: object = 0.0
    """All-reduces of the FP8 amaxes per micro-batch (delayed scaling: one after the forward, one after the
    backward, over the stage's TP×CP×DP ranks; 0 for the current-scaling recipes)."""
    fp8_amax_bytes: object = 0.0
    """Bytes of one amax all-reduce (4 bytes per FP8 tensor of the stage)."""
    param_gather_bytes_per_value: object = None
    """Bytes per parameter of the distributed optimizer's parameter all-gather (``None``: ``bytes_per_value``; FP8
    with ``--fp8-param-gather`` sends the linear weights as FP8)."""
    first_stage_layers: object = None
    """Transformer layers on the first pipeline stage (an uneven split, Megatron
    ``--decoder-first-pipeline-num-layers`` / ``--account-for-embedding-in-pipeline-split``); ``None``: every stage
    holds num_layers / p."""
    middle_stage_layers: object = None
    """Transformer layers on each middle stage (``None``: num_layers / p)."""
    last_stage_layers: object = None
    """Transformer layers on the last stage (``None``: num_layers / p)."""
    expert_parallel: object = 1.0
    """MoE expert-parallel size e (1: every expert on every rank)."""
    expert_tensor_parallel: object = None
    """Ranks splitting one expert (``None``: tensor_parallel)."""
    expert_data_parallel: object = None
    """Ranks expert gradients are reduced over, world ÷ (tp_e·e·p) (``None``: data × context parallel)."""
    expert_parameters: object = 0.0
    """Routed-expert parameters of the whole model (all layers, all experts; 0 for a dense model)."""
    moe_token_factor: object = 1.0
    """Token copies per expert over the balanced average: the capacity factor when inputs are padded to capacity,
    else 1 (:func:`workbench.memory.moe_expert_tokens`)."""
    moe_allgather: object = 0.0
    """1: megatron-core's allgather token dispatcher; 0: alltoall."""
    moe_overlap_alltoall: object = 0.0
    """1: the all-to-alls overlap another micro-batch's compute (``--overlap-moe-expert-parallel-comm``)."""
    tp_comm_overlap: object = 0.0
    """1: Transformer Engine overlaps each sequence-parallel all-gather / reduce-scatter with its TP GEMM
    (``--tp-comm-overlap``; :func:`tp_overlap_exposed_seconds`)."""
    tp_overlap_sm_fraction: object = 0.0
    """Fraction of the GPU's SMs a pipelined / bulk userbuffer overlap takes from its GEMM
    (:data:`TE_UB_MARGIN_SMS` ÷ :func:`gpu_sm_count`)."""
    moe_recompute: object = 0.0
    """Selective recompute's MoE modules (:attr:`workbench.specs.ParallelPlan.moe_recompute`): 1 ``moe_act`` — the
    experts' activation runs again in the backward; 2 ``moe`` — the whole MoE block's forward (permutation, expert
    GEMMs, activation, and its all-to-alls) runs again. Only with selective recompute."""
    moe_deepspeed: object = 0.0
    """1: DeepSpeed-MoE layers (``deepspeed.moe.layer.MoE``), whose gate and combine run in fp32."""
    moe_shared_ffn_hidden_size: object = 0.0
    """MoE with an always-on shared expert (Qwen2-MoE): its MLP width (0: none); it runs on every token beside the
    routed experts, split over tensor parallelism like a dense MLP."""
    moe_block_host_s: object = 0.0
    """Host seconds one MoE layer's experts block adds to a micro-batch beyond a dense MLP's, forward + backward
    (:func:`moe_block_host`; catalog ``transformers.moe_block_host_s``; 0 for other stacks)."""
    hf_moe_experts: object = 0.0
    """1: transformers' ``grouped_mm`` experts (``grouped_mm_experts_forward``), whose indexing, activation,
    weighting and un-permute kernels are priced by :func:`hf_moe_block_bytes` at ``moe_block_hbm_efficiency``;
    2: transformers' ``eager`` experts (a Python loop over the experts hit), the same per routed copy plus
    :func:`hf_eager_experts_bytes` per expert hit."""
    moe_expert_host_s: object = 0.0
    """Host seconds per expert hit per MoE layer and micro-batch, forward + backward (transformers' ``eager``
    experts: :func:`moe_block_host`; catalog ``transformers.moe_eager_expert_host_s``; 0 otherwise)."""
    moe_block_hbm_efficiency: object = 1.0
    """Fraction of the HBM bandwidth (``hbm_gb_per_s``) the transformers ``grouped_mm`` MoE block's non-GEMM kernels
    reach (catalog ``transformers.moe_block_hbm_efficiency``; measured by benchmarks/gpu_hf_moe_host.py
    --gpu-time)."""
    stage_parameters: object = None
    """Parameters one rank of the largest pipeline stage holds (:func:`workbench.memory.stage_params_per_rank`: its
    layers, the embedding on the first stage, the output layer on the last): what that rank's data-parallel
    reduction, ZeRO gathers and optimizer step move. ``None``: num_parameters / (t·p)."""
    step_overhead_s: object = 0.0
    """Fixed seconds per optimizer step outside the layers (the engine's step bookkeeping, the launches of the
    gradient-norm, clipping and optimizer kernels); fitted per GPU generation with ``layer_pass_overhead_s``."""
    cpu_adam_threads: object = 1.0
    """Threads of each rank's CPU optimizer (optimizer offload; ``OMP_NUM_THREADS``)."""
    cpu_adam_params_per_second_per_thread: object = np.inf
    """CPU Adam parameters per second on one thread (optimizer offload); the node's memory bandwidth caps the sum
    (``cpu_adam_params_per_second_per_node``, which the encoder sets to the catalog's cap per host core × the
    cluster's ``host_cpu_cores_per_node``)."""
    cpu_adam_serial_seconds_per_parameter: object = 0.0
    """Host seconds per offloaded parameter that more threads do not shorten (the serial part of the step around
    CPU Adam)."""
    offload_zero3_host_factor: object = 0.0
    """ZeRO-3 with optimizer offload: host work per parameter beyond ZeRO-2's, as a fraction of the CPU Adam step
    (stage3.py runs the gradient norm, the unscale/clip pass and the fp32 → 16-bit copy-back over the host copies)."""
    offload_param_host_factor: object = 0.0
    """The same fraction with the parameters on the host too (``offload_param``): the 16-bit copy-back is a host to
    host cast into the pinned partition instead of a blocking host-cast upload (stage3.py
    ``_reassign_or_swap_out_partitioned_parameters``)."""
    param_offload_copy_back_s: object = 0.0
    """Host seconds per parameter of ZeRO-3's copy-back with the parameters on the host and the optimizer on the GPU:
    ``fp16_partitioned_groups_flat[i].data.copy_(fp32_partitioned_groups_flat[i].data)`` copies GPU fp32 into the
    host's 16-bit partition, a blocking copy with a dtype change, which torch runs through a fresh pageable fp32
    host buffer and a cast on the host (aten/src/ATen/native/cuda/Copy.cu ``copy_kernel_cuda``)."""
    pin_memory: object = 1
    """DeepSpeed's offload buffers page-locked (1, :attr:`workbench.specs.ParallelPlan.pin_memory`) or pageable (0)."""
    nvme_optimizer: object = 0
    """The offloaded optimizer states on NVMe (1: ``offload_optimizer.device`` ``nvme``, ZeRO-Infinity) rather than in
    host memory (0)."""
    nvme_params: object = 0
    """The offloaded ZeRO-3 parameters on NVMe (1: ``offload_param.device`` ``nvme``) rather than in host memory."""
    nvme_read_gb_per_s: object = np.inf
    """Read rate of a node's NVMe through DeepSpeed's async_io, GB/s, shared by the node's ranks
    (:attr:`workbench.specs.ClusterSpec.nvme_read_gb_per_s`)."""
    nvme_write_gb_per_s: object = np.inf
    """Write rate of a node's NVMe, GB/s, shared likewise (:attr:`workbench.specs.ClusterSpec.nvme_write_gb_per_s`)."""
    pageable_copy_gb_per_s: object = np.inf
    """Host↔GPU GB/s of DeepSpeed's offload copies when its buffers are pageable: the driver stages each copy
    through its own page-locked memory, so the host's memory copies, not the link, set the rate (capped by
    ``host_link_gb_per_s``)."""
    parameter_tensors: object = 0.0
    """Parameter tensors one rank of the largest stage holds (:func:`workbench.params.parameter_tensors` ÷ p)."""
    deepspeed_tensor_seconds: object = 0.0
    """DeepSpeed: seconds per parameter tensor per optimizer step (its per-tensor gradient hooks, norms and
    bookkeeping in Python; 0 for Megatron, whose buffers are flat)."""
    score_hbm_efficiency: object = 0.8
    """Fraction of the datasheet HBM bandwidth the materialised-score kernels (softmax, mask, dropout, casts over
    the b·a·s·s scores) reach; fitted per GPU generation (the curve's ``score_hbm_efficiency``, else its
    ``hbm_efficiency``)."""
    grad_accumulate_bytes_per_parameter: object = 0.0
    """HBM bytes per trainable parameter and micro-batch of accumulating its gradient into the engine's reduce
    buffer (encoded per engine: Megatron DDP's ``main_grad.add_`` in the reduce dtype, read and written, plus the
    16-bit gradient read; DeepSpeed ZeRO-1/2's copy into the contiguous bucket and in-place average, 4v)."""
    rope_forward_bytes: object = 0.0
    """Rotary position embedding: HBM bytes per query and key element of one layer's forward (0 without rotary
    positions; :func:`rope_bytes`)."""
    rope_backward_bytes: object = 0.0
    """... and of its backward."""
    layer_memory_bytes_forward: object = 0.0
    """transformers models: HBM bytes per token of one layer's memory-bound kernels in the forward, counted from the
    real modules (:func:`workbench.layerops.layer_memory_bytes`, rotary embedding included); 0 prices them by
    :func:`elementwise_bytes_per_layer` × ``memory_passes`` and :func:`rope_bytes` instead."""
    layer_memory_bytes_backward: object = 0.0
    """... and in the backward (counted too, not taken as twice the forward's)."""
    layer_memory_hbm_efficiency: object = 1.0
    """Fraction of the datasheet HBM bandwidth at which those counted bytes move (catalog
    ``transformers.layer_memory_hbm_efficiency``, measured by ``benchmarks/gpu_layer_kernels.py`` on fit shapes)."""
    layer_hbm_scale: object = 1.0
    """How much more of its datasheet HBM bandwidth this GPU's memory-bound layer kernels reach than the GPU the
    layer constants were measured on (the H200): every bandwidth of :func:`compute_terms`' memory-bound kernels
    (element-wise passes, rotary, counted transformers bytes, MoE permutations, the loss) is multiplied by it, the
    materialised scores' by ``score_hbm_scale`` and transformers' MoE blocks' by ``moe_block_hbm_scale``. 1 where the
    GPU has no measurement of its own (:func:`gpu_kernel_constants`)."""
    score_hbm_scale: object = 1.0
    """The same for the materialised-score kernels of unfused attention (softmax, mask, dropout and casts over the
    b·a·s·s scores), measured apart: on the H100 they gain less over the H200 than a layer's other memory-bound
    kernels (:func:`gpu_kernel_constants`)."""
    moe_block_hbm_scale: object = 1.0
    """The same for the non-GEMM kernels of transformers' grouped_mm MoE blocks (``moe_block_hbm_efficiency``), where
    this GPU's were measured on it (:func:`gpu_kernel_constants`)."""
    optimizer_hbm_scale: object = 1.0
    """How much more of its datasheet HBM bandwidth this GPU's fused optimizer step (fused Adam and DeepSpeed's passes
    around it) reaches than the H200's, where it was measured apart (:func:`gpu_kernel_constants`); 1 for torch's
    foreach AdamW, whose H100 step the unscaled bandwidth prices within 3 %."""
    weight_gemm_time_scale: object = 1.0
    """Measured over priced time of a layer's weight GEMMs and the logits GEMM for the stack (catalog
    ``transformers.weight_gemm_time_scale``, ``benchmarks/gpu_layer_kernels.py`` on fit shapes: transformers' plain
    ``nn.Linear`` GEMMs run faster than the isolated-GEMM curve gives; 1 elsewhere)."""
    zero3_hook_overlap: object = 1.0
    """ZeRO-3: fraction of the stage's forward/backward GPU time the host-side hook work can run behind (1: the
    host runs ahead of the GPU until its hooks take longer than the kernels they launch)."""
    zero3_host_spread: object = 0.0
    """ZeRO-3: log standard deviation of the hooks' host speed between processes (:func:`expected_excess_seconds`;
    0: every process as fast as the fitted constants say)."""
    layer_host_s: object = 0.0
    """megatron-core local-spec layers (no Transformer Engine): host seconds per transformer layer per micro-batch
    (the layer's Python forward and the launches of its autograd backward), under either engine; the part the
    micro-batch's GPU work does not hide is exposed (:func:`microstep_host`;
    :func:`workbench.layerops.layer_host_seconds`: ``megatron_core.layer_base_host_s`` plus a cost per ATen operator
    the layer's design dispatches; 0 for Transformer Engine layers, unmeasured, for transformers models, which have
    ``hf_layer_host_s``, and at ZeRO-3, whose hooks have their own term)."""


_STEP_ARGS = tuple(f.name for f in dataclasses.fields(StepInputs))


def step_time_terms(**inputs):
    """Seconds per optimizer step by term, for plain numbers or numpy arrays (broadcast together); the keyword
    arguments are the fields of :class:`StepInputs`.

    Five concerns, each its own function: :func:`compute_terms` (layer forward/backward, logits and loss, the
    recomputed forward), :func:`host_wait_terms` (the GPU waiting for the host's launches, against the kernels and
    the tensor-parallel collectives of :func:`tensor_parallel_terms`), :func:`communication_terms` (tensor-,
    context-, pipeline- and data-parallel collectives on the link each group uses), :func:`optimizer_terms` (GPU
    optimizer step, ZeRO-Offload) and :func:`pipeline_terms` (forward/backward of one micro-batch on the slowest
    stage, the bubble).

    Materialised (unfused) attention adds :func:`attention_score_bytes` per score element at
    ``score_hbm_efficiency`` × HBM bandwidth, the loss adds :func:`cross_entropy_bytes` per logit; the optimizer
    moves ``optimizer_bytes_per_parameter`` + ``deepspeed_step_bytes_per_parameter`` (catalog ``deepspeed``; ZeRO-0
    its own ``zero0_step_bytes_per_parameter``, measured apart by ``benchmarks/gpu_deepspeed_step.py``) per shard
    parameter of the largest stage (``stage_parameters``), plus ``step_overhead_s`` and DeepSpeed's ``deepspeed_tensor_seconds`` per
    parameter tensor; every layer forward, backward and recomputed forward costs ``layer_pass_overhead_s`` on top of
    its kernels; ZeRO-3 adds its gathers and gradient copies in counted bytes and its per-module host hooks
    (``zero3_*``), exposed only where they outlast the kernels; optimizer offload prices CPU Adam by the rank's
    threads (``cpu_adam_threads``) up to the node's cap. Constants: fitted on H200 runs of the fit split, catalog
    ``curves.hopper``, ``deepspeed`` and ``cpu_adam``.

    Returns a dict with every key of :data:`TERMS`, ``step_seconds``, ``model_flops``, ``hardware_flops`` (whole job
    per step), ``gemm_efficiency`` (the FLOP-weighted efficiency of the layer GEMMs), the per-layer
    ``layer_forward_seconds`` / ``layer_backward_seconds``, the slowest stage's ``microbatch_forward_seconds`` /
    ``microbatch_backward_seconds`` (their sum times the bubble fraction is the bubble) and, per collective group
    (``tp``, ``cp``, ``pp``, ``dp``), ``{group}_crosses_nodes`` and the ``{group}_gb_per_s`` and
    ``{group}_latency_s`` of the link it used.
    """
    x = StepInputs(**{k: _float64(v) for k, v in inputs.items() if v is not None})  # int arrays would overflow
    comp = compute_terms(x)
    tp = tensor_parallel_terms(x, comp)
    comp = {**comp, **host_wait_terms(x, comp, tp)}
    comm = communication_terms(x, comp, tp)
    opt = optimizer_terms(x)
    pipe = pipeline_terms(x, comp, comm)
    step = (comp["compute"] + comp["recompute"] + comm["tp_comm"] + comm["cp_comm"] + comm["ep_comm"]
            + comm["pp_comm"] + comm["dp_comm"] + comm["zero3_hooks"] + opt["offload"] + opt["optimizer"]
            + pipe["bubble"])
    return {**comp, **comm, **opt, **pipe, "step_seconds": step, **_flops(x, comp)}


def _float64(value):
    """One input as float64: a numpy scalar for a plain number (cheaper arithmetic than a 0-d array, same
    values), an array otherwise."""
    t = type(value)
    if t is np.float64:
        return value
    if t in _SCALAR_TYPES:
        return np.float64(value)
    return np.asarray(value, dtype=np.float64)


_SCALAR_TYPES = frozenset({float, int, bool, np.float64, np.int64, np.bool_})


def _shape(x: StepInputs) -> dict:
    """Per-GPU shape quantities every concern uses."""
    recompute = x.recompute
    return dict(tokens=x.micro_batch_size * x.seq_length / x.context_parallel,  # tokens per GPU per micro-batch
                layers=x.num_layers / x.pipeline_parallel,  # layers per pipeline stage
                full=(recompute == 2).astype(float), selective=(recompute == 1).astype(float),
                sp=x.sequence_parallel > 0, hbm_bytes_per_s=x.hbm_gb_per_s * 1e9 * x.hbm_efficiency,
                fc1_width=x.ffn_hidden_size * (1 + x.gated))


def stage_parameters(x: StepInputs):
    """Parameters one rank of the largest pipeline stage holds: ``stage_parameters`` when the encoder gave it (the
    exact per-stage count), else the average num_parameters / (t·p)."""
    if x.stage_parameters is None:
        return x.num_parameters / (x.tensor_parallel * x.pipeline_parallel)
    return x.stage_parameters


def compute_terms(x: StepInputs) -> dict:
    """``compute`` and ``recompute`` seconds per step on the slowest (last) stage, with the pieces they are made
    of: one layer's forward and backward, the core-attention time, the logits GEMM and the loss."""
    g = _shape(x)
    t, m, h, s = x.tensor_parallel, x.num_microbatches, x.hidden_size, x.seq_length
    q, kv, f, c = x.query_projection_size, x.kv_projection_size, x.ffn_hidden_size, x.context_parallel
    tokens, layers, fc1_width = g["tokens"], g["layers"], g["fc1_width"]
    gemm = dict(peak_flops=x.peak_flops, efficiency_max=x.gemm_efficiency_max, half_dim=x.gemm_half_dim)
    # the weight and logits GEMMs at the stack's measured time scale (1: the curve as it is)
    gemm_w = dict(gemm, peak_flops=x.peak_flops / x.weight_gemm_time_scale)

    # one layer's forward on one GPU
    # MLP / experts: X = tokens/t · k · tp_e · token_factor copies on the rank's E/e local experts, each GEMM
    # (X·e/E) × (f/tp_e) × h (dense: X = tokens, one expert of f/t); FLOPs per rank 2·X·h·f/tp_e per matrix
    etp = _expert_tp(x)
    copies = tokens / t * x.experts_per_token * etp * x.moe_token_factor
    expert_tokens = copies * x.expert_parallel / x.num_experts  # rows of each expert GEMM
    t_qkv = gemm_seconds(2 * tokens * h * (q + 2 * kv) / t, tokens, (q + 2 * kv) / t, h, **gemm_w)
    t_proj = gemm_seconds(2 * tokens * q * h / t, tokens, h, q / t, **gemm_w)
    t_fc1 = gemm_seconds(2 * copies * h * fc1_width / etp, expert_tokens, fc1_width / etp, h, **gemm_w)
    t_fc2 = gemm_seconds(2 * copies * f * h / etp, expert_tokens, h, f / etp, **gemm_w)
    core_flops = tokens * attention_core_flops_per_token(seq_length=s, query_projection_size=q,
                                                         causal=executed_causal_share(x)) / t
    t_core = gemm_seconds(core_flops, s / c, s / c, x.head_dim, **gemm)
    t_core_bwd = 2 * t_core
    # fused (flash) attention with its own measured rate where the catalog has one (Transformer Engine on Hopper):
    # the kernel never writes the s×s scores, so the GEMM curve's small head_dim is not what limits it
    # an explicitly masked layer's kernel (its whole s×s, counted in core_flops) also runs slower than the causal one
    masked_flops = tokens * x.masked_attention_share * attention_core_flops_per_token(
        seq_length=s, query_projection_size=q, causal=0) / t
    flash_fwd, flash_bwd = flash_attention_seconds(core_flops + (MASKED_SDPA_SLOWDOWN - 1) * masked_flops, s / c,
                                                   peak_flops=x.peak_flops,
                                                   forward_efficiency_max=x.flash_forward_efficiency_max,
                                                   backward_efficiency_max=x.flash_backward_efficiency_max,
                                                   half_seq=x.flash_half_seq,
                                                   backward_flops_ratio=x.flash_backward_flops_ratio)
    flash_kernel = (asarray(x.flash_forward_efficiency_max) > 0) & (asarray(x.unfused_attention) == 0)
    t_core = where(flash_kernel, flash_fwd, t_core)
    t_core_bwd = where(flash_kernel, flash_bwd, t_core_bwd)
    hbm = g["hbm_bytes_per_s"] * x.layer_hbm_scale  # the layer's memory-bound kernels on this GPU
    elementwise = elementwise_bytes_per_layer(tokens=tokens, hidden_size=h, num_attention_heads=x.num_attention_heads,
                                              seq_length=s, tensor_parallel=t, sequence_parallel=g["sp"],
                                              unfused_attention=0, bytes_per_value=x.bytes_per_value)
    t_mem = x.memory_passes * elementwise / hbm
    # rotary position embedding on the layer's queries and keys (counted bytes, :func:`rope_bytes`)
    rope_elements = tokens * (q + kv) / t
    t_rope_fwd, t_rope_bwd = (rope_elements * x.rope_forward_bytes / hbm,
                              rope_elements * x.rope_backward_bytes / hbm)
    # transformers layers: their memory-bound kernels' bytes counted from the real modules (rotary included), at the
    # bandwidth those kernels reach; the backward's counted too
    counted = asarray(x.layer_memory_bytes_forward) > 0
    counted_hbm = x.hbm_gb_per_s * 1e9 * x.layer_memory_hbm_efficiency * x.layer_hbm_scale
    t_mem = where(counted, tokens * x.layer_memory_bytes_forward / counted_hbm, t_mem)
    t_mem_bwd_counted = tokens * x.layer_memory_bytes_backward / counted_hbm
    t_rope_fwd, t_rope_bwd = where(counted, 0.0, t_rope_fwd), where(counted, 0.0, t_rope_bwd)
    # MoE token permutation: permute (read the tokens, write the copies) and unpermute (read the copies, write the
    # tokens) in the forward, 4·v·X·h bytes; the backward moves the same. transformers' grouped_mm experts instead:
    # every non-GEMM kernel of the block (gather, activation on strided halves, weighting, un-permute, their
    # backwards), forward and backward together, a third of it in the forward pass as the layer's convention has it
    hf_block = hf_moe_block_bytes(copies=copies, hidden_size=h, ffn_hidden_size=f, gated=x.gated,
                                  value_bytes=x.bytes_per_value) / 3
    # transformers' eager experts add, per expert hit, the backward's full-size gradient buffers and their sums
    # (:func:`hf_eager_experts_bytes`): streaming kernels at the curve's HBM efficiency
    eager_bytes = where(asarray(x.hf_moe_experts) == 2, hf_eager_experts_bytes(
        tokens=tokens, experts_hit=experts_hit(tokens=tokens, experts=x.num_experts, top_k=x.experts_per_token),
        num_experts=x.num_experts, hidden_size=h, ffn_hidden_size=f, gated=x.gated, value_bytes=x.bytes_per_value,
        trainable_experts=where(asarray(x.lora_modules_per_layer) > 0, 0.0, 1.0)), 0.0) / 3
    t_perm = where(asarray(x.hf_moe_experts) > 0,
                   hf_block / (x.hbm_gb_per_s * 1e9 * x.moe_block_hbm_efficiency * x.moe_block_hbm_scale)
                   + eager_bytes / hbm,
                   4 * copies * h * x.bytes_per_value / hbm)
    t_mem = t_mem + where(x.num_experts > 1, t_perm, 0.0)
    # DeepSpeed-MoE: its fp32 gate input and fp32 weighted combine (:func:`workbench.dsmoe.extra_hbm_bytes`)
    t_mem = t_mem + where(asarray(x.moe_deepspeed) > 0, dsmoe.extra_hbm_bytes(
        tokens=tokens / t, hidden_size=h, top_k=x.experts_per_token, value_bytes=x.bytes_per_value) / hbm, 0.0)
    # materialised attention scores (non-flash): counted bytes per score element, forward and backward
    score_elements = tokens * x.num_attention_heads / t * s / c * x.unfused_attention
    score_fwd_b, score_bwd_b = attention_score_bytes(bytes_per_value=x.bytes_per_value,
                                                     softmax_fusion=x.softmax_fusion,
                                                     attention_dropout=x.attention_dropout)
    score_hbm = x.hbm_gb_per_s * 1e9 * x.score_hbm_efficiency * x.score_hbm_scale
    cap_fwd_b, cap_bwd_b = soft_cap_bytes(bytes_per_value=x.bytes_per_value)
    t_score_fwd = score_elements * (score_fwd_b + x.soft_cap * cap_fwd_b) / score_hbm
    t_score_bwd = score_elements * (score_bwd_b + x.soft_cap * cap_bwd_b) / score_hbm
    # MoE: the router's logits GEMM (tokens/t × E × h) and the shared expert's MLP (Qwen2-MoE) on every token
    t_router = where(x.num_experts > 1, gemm_seconds(2 * tokens / t * h * x.num_experts, tokens / t, x.num_experts, h,
                                                     **gemm), 0.0)
    fs = maximum(asarray(x.moe_shared_ffn_hidden_size), 1.0)  # (1: a placeholder width where there is none)
    shared_fc1 = fs * (1 + x.gated)
    t_shared = where(asarray(x.moe_shared_ffn_hidden_size) > 0,
                     gemm_seconds(2 * tokens * h * shared_fc1 / t, tokens, shared_fc1 / t, h, **gemm)
                     + gemm_seconds(2 * tokens * fs * h / t, tokens, h, fs / t, **gemm), 0.0)
    t_fc1, t_fc2 = t_fc1 + t_router + t_shared, t_fc2
    t_weights_fwd = t_qkv + t_proj + t_fc1 + t_fc2
    # FP8 layers (Transformer Engine): the four linear GEMMs on the FP8 curve and peak; the casts to FP8 of their
    # inputs (forward) and output gradients (backward) are extra memory-bound kernels (:func:`fp8_cast_bytes`).
    # A layer's times are linear in the FP8 share: priced at share 0 and 1, each stage mixes them by its own share
    # (Megatron's bf16 first/last layers sit on the first and last stage: :func:`fp8_stage_shares`)
    t_weights_bf16 = t_weights_fwd
    fp8 = 1.0
    gemm8 = dict(peak_flops=x.fp8_peak_flops, efficiency_max=x.fp8_gemm_efficiency_max, half_dim=x.fp8_gemm_half_dim)
    q8_qkv = gemm_seconds(2 * tokens * h * (q + 2 * kv) / t, tokens, (q + 2 * kv) / t, h, **gemm8)
    q8_proj = gemm_seconds(2 * tokens * q * h / t, tokens, h, q / t, **gemm8)
    q8_fc1 = gemm_seconds(2 * copies * h * fc1_width / etp, expert_tokens, fc1_width / etp, h, **gemm8)
    q8_fc2 = gemm_seconds(2 * copies * f * h / etp, expert_tokens, h, f / etp, **gemm8)
    t_weights_fp8 = q8_qkv + q8_proj + q8_fc1 + q8_fc2
    # --tp-comm-overlap runs the overlapped GEMMs in chunks of rows (TE initialize_ub defaults: ring_exchange in
    # tp_size chunks for the all-gather side, pipeline in TE_UB_PIPELINE_SPLITS for the reduce-scatter side), issued
    # round-robin on up to TE_UB_COMPUTE_STREAMS streams, so that many chunks share the GPU at once: priced as one
    # GEMM of min(parts, streams)/parts of the rows on the same efficiency curve (bf16, FP8)
    ring, pipe = t, TE_UB_PIPELINE_SPLITS

    def chunked(flops, m, n, k, parts, curve):
        return gemm_seconds(flops, m * minimum(parts, TE_UB_COMPUTE_STREAMS) / parts, n, k, **curve)

    ub_chunks = {
        name: (chunked(fl, mm, nn, kk, parts, gemm), chunked(fl, mm, nn, kk, parts, gemm8))
        for name, (fl, mm, nn, kk, parts) in {
            "qkv": (2 * tokens * h * (q + 2 * kv) / t, tokens, (q + 2 * kv) / t, h, ring),
            "proj": (2 * tokens * q * h / t, tokens, h, q / t, pipe),
            "proj_dgrad": (2 * tokens * q * h / t, tokens, q / t, h, ring),
            "fc1": (2 * copies * h * fc1_width / etp, expert_tokens, fc1_width / etp, h, ring),
            "fc2": (2 * copies * f * h / etp, expert_tokens, h, f / etp, pipe),
            "fc2_dgrad": (2 * copies * f * h / etp, expert_tokens, f / etp, h, ring)}.items()}
    t_weights_fwd = where(fp8 > 0, (1 - fp8) * t_weights_fwd + fp8 * t_weights_fp8, t_weights_fwd)
    cast_fwd_b, cast_bwd_b = fp8_cast_bytes(tokens=tokens, hidden_size=h, query_projection_size=q,
                                            kv_projection_size=kv, ffn_hidden_size=f, gated=x.gated,
                                            experts_per_token=x.experts_per_token, tensor_parallel=t,
                                            sequence_parallel=g["sp"], bytes_per_value=x.bytes_per_value,
                                            fp8_bytes=x.fp8_activation_bytes,
                                            expert_copies=where(x.num_experts > 1, copies, 0.0))
    t_cast_fwd = where(fp8 > 0, fp8 * cast_fwd_b / g["hbm_bytes_per_s"], 0.0)
    t_cast_bwd = where(fp8 > 0, fp8 * cast_bwd_b / g["hbm_bytes_per_s"], 0.0)
    # + a fixed cost per layer pass (kernel launches and framework work that does not shrink with the layer's
    # size; fitted per GPU generation, catalog curve "layer_pass_overhead_s")
    layer_fwd = t_weights_fwd + t_core + t_mem + t_score_fwd + t_cast_fwd + t_rope_fwd + x.layer_pass_overhead_s
    # backward: 2× the forward GEMMs (data- and weight-gradient), element-wise work touches twice as much; frozen
    # weights (LoRA: trainable_fraction = adapters / all parameters) skip their weight-gradient GEMMs
    tf = x.trainable_fraction
    t_mem_bwd = where(counted, t_mem_bwd_counted, 2 * t_mem)
    layer_bwd = ((1 + tf) * t_weights_fwd + t_core_bwd + t_mem_bwd + t_score_bwd + t_cast_bwd + t_rope_bwd
                 + x.layer_pass_overhead_s)
    t_logits = gemm_seconds(2 * tokens * h * x.vocab_size / t, tokens, x.vocab_size / t, h, **gemm_w)
    ce_fwd_b, ce_bwd_b = cross_entropy_bytes(bytes_per_value=x.bytes_per_value,
                                             cross_entropy_fusion=x.cross_entropy_fusion)
    logits_per_gpu = tokens * x.vocab_size / t
    t_loss_fwd = logits_per_gpu * (ce_fwd_b + x.soft_cap * cap_fwd_b) / hbm
    t_loss_bwd = logits_per_gpu * (ce_bwd_b + x.soft_cap * cap_bwd_b) / hbm
    # selective recompute's MoE modules: moe_act reads fc1's output and writes the activation (3·v·X·f/tp_e, gated:
    # 2f in, f out; else f in, f out) again; moe runs the block's forward again — the permutation and the expert
    # GEMMs (their all-to-alls are in expert_parallel_terms)
    moe_rc = g["selective"] * (asarray(x.num_experts) > 1)
    act_bytes = copies * (fc1_width + f) / etp * x.bytes_per_value
    t_moe_perm = 4 * copies * h * x.bytes_per_value / hbm
    t_moe_rc_bf16 = moe_rc * where(x.moe_recompute >= 2, t_fc1 + t_fc2 + t_moe_perm + act_bytes / hbm,
                                   where(x.moe_recompute == 1, act_bytes / hbm, 0.0))
    t_moe_rc_fp8 = moe_rc * where(x.moe_recompute >= 2,
                                  gemm_seconds(2 * copies * h * fc1_width / etp, expert_tokens, fc1_width / etp, h,
                                               **gemm8)
                                  + gemm_seconds(2 * copies * f * h / etp, expert_tokens, h, f / etp, **gemm8)
                                  + t_moe_perm + act_bytes / hbm,
                                  where(x.moe_recompute == 1, act_bytes / hbm, 0.0))
    # the extra forward of activation recomputation per layer (full: that fraction of the layers; selective: the core
    # and the MoE modules)
    recompute_layer = (g["full"] * x.recompute_fraction * layer_fwd
                       + g["selective"] * (t_core + t_score_fwd) + t_moe_rc_fp8)
    # the layer at FP8 share 1 (above) and at share 0 (bf16): a stage with share a takes (1−a)·bf16 + a·FP8
    bf16_fwd = t_weights_bf16 + t_core + t_mem + t_score_fwd + t_rope_fwd + x.layer_pass_overhead_s
    bf16_bwd = ((1 + tf) * t_weights_bf16 + t_core_bwd + t_mem_bwd + t_score_bwd + t_rope_bwd
                + x.layer_pass_overhead_s)
    bf16_rc = (g["full"] * x.recompute_fraction * bf16_fwd
               + g["selective"] * (t_core + t_score_fwd) + t_moe_rc_bf16)
    fp8_on = asarray(x.fp8_layer_fraction) > 0

    def mix(share, at_fp8, at_bf16):
        return where(fp8_on, share * at_fp8 + (1 - share) * at_bf16, at_bf16)

    # the slowest stage sets the pace of the pipeline: the last stage carries the output layer and the loss on top
    # of its layers; with an uneven split (stage_layers), or bf16 layers on the first stage of an FP8 run, another
    # stage may be slower
    last_layers, other_layers = stage_layers(x)
    share_first, share_middle, share_last = fp8_stage_shares(x)
    p = x.pipeline_parallel
    middle_layers = x.num_layers / p if x.middle_stage_layers is None else x.middle_stage_layers
    first_layers = x.num_layers / p if x.first_stage_layers is None else x.first_stage_layers

    def stage_seconds(share):
        return mix(share, layer_fwd + layer_bwd + recompute_layer, bf16_fwd + bf16_bwd + bf16_rc)
    # the busiest stage other than the last: the first, or (p > 2) a middle one if it takes longer
    first_s = first_layers * stage_seconds(share_first)
    middle_s = where(p > 2, middle_layers * stage_seconds(share_middle), 0.0)
    middle_wins = middle_s > first_s
    other_layers = where(p > 1, where(middle_wins, middle_layers, first_layers), 0.0)
    share_other = where(middle_wins, share_middle, share_first)
    # what the last stage adds to its layers: the output layer and the loss
    out_fwd, out_bwd = t_logits + t_loss_fwd, (1 + tf) * t_logits + t_loss_bwd
    last_layer_fwd, last_layer_bwd = mix(share_last, layer_fwd, bf16_fwd), mix(share_last, layer_bwd, bf16_bwd)
    last_fwd = last_layers * last_layer_fwd + out_fwd
    last_bwd = last_layers * last_layer_bwd + out_bwd
    last_slowest = (last_fwd + last_bwd + last_layers * mix(share_last, recompute_layer, bf16_rc)
                    >= other_layers * stage_seconds(share_other))
    layers = where(last_slowest, last_layers, other_layers)
    share = where(last_slowest, share_last, share_other)  # the slowest stage's FP8 share
    fp8 = where(fp8_on, share, 0.0)
    fp8_fwd, fp8_bwd = layer_fwd, layer_bwd
    layer_fwd, layer_bwd = mix(share, layer_fwd, bf16_fwd), mix(share, layer_bwd, bf16_bwd)
    recompute_layer = mix(share, recompute_layer, bf16_rc)
    t_weights_fwd = mix(share, t_weights_fwd, t_weights_bf16)
    t_cast_fwd, t_cast_bwd = mix(share, t_cast_fwd, 0.0), mix(share, t_cast_bwd, 0.0)
    stage_fwd = where(last_slowest, last_fwd, other_layers * layer_fwd)
    stage_bwd = where(last_slowest, last_bwd, other_layers * layer_bwd)
    recompute_mb = layers * recompute_layer
    # transformers' gradient checkpointing: the host work of each checkpointed layer (:func:`hf_checkpoint_host`)
    # runs while the GPU executes the micro-batch's queued forward, recompute and backward kernels; only what
    # outlasts them is exposed (ZeRO-3's hooks then hide behind that exposed time too: the host is busy either way)
    hf_host_mb = hf_checkpoint_host(x, layers)
    # a micro-step takes at least its host time (:func:`microstep_host`): thin layers in small micro-batches
    # (gradient accumulation at fixed tokens) leave the GPU waiting on the host (:func:`host_wait_terms` adds the wait)
    host_last_mb, host_other_mb = microstep_host(x, layers)
    moe_host_mb = moe_block_host(x, layers)
    host_last_mb, host_other_mb = host_last_mb + moe_host_mb, host_other_mb + moe_host_mb
    # FP8 weight copies are rebuilt once per step (Transformer Engine caches them over the micro-batches)
    # (one layer's parameters on the rank: routed experts split over tp_e·e, the rest over t)
    expert_layer = x.expert_parameters / x.num_layers
    layer_params = (x.parameters_per_layer - expert_layer) / t + expert_layer / (_expert_tp(x) * x.expert_parallel)
    weight_cast = where(fp8 > 0, fp8 * layers * layer_params
                           * x.fp8_weight_cast_bytes_per_parameter / g["hbm_bytes_per_s"], 0.0)
    return {"compute": m * (stage_fwd + stage_bwd) + weight_cast, "recompute": m * recompute_mb,
            "fp8_cast_seconds": m * layers * (t_cast_fwd + t_cast_bwd) + weight_cast,
            "stage_layers": layers, "last_stage_slowest": last_slowest, "recompute_layer_seconds": recompute_layer,
            "output_forward_seconds": out_fwd, "output_backward_seconds": out_bwd,
            "layer_forward_seconds": layer_fwd, "layer_backward_seconds": layer_bwd,
            "stage_forward_seconds": stage_fwd, "stage_backward_seconds": stage_bwd,
            "recompute_microbatch_seconds": recompute_mb, "hf_checkpoint_host_microbatch_seconds": hf_host_mb,
            "host_microbatch_seconds": host_other_mb, "host_last_microbatch_seconds": host_last_mb,
            "core_attention_seconds": t_core,
            # each TP linear's forward GEMM at the slowest stage's FP8 share (what --tp-comm-overlap hides behind)
            "qkv_gemm_seconds": mix(share, q8_qkv, t_qkv), "proj_gemm_seconds": mix(share, q8_proj, t_proj),
            "fc1_gemm_seconds": mix(share, q8_fc1, t_fc1), "fc2_gemm_seconds": mix(share, q8_fc2, t_fc2),
            **{f"{name}_ub_chunked_seconds": mix(share, at_fp8, at_bf16)
               for name, (at_bf16, at_fp8) in ub_chunks.items()},
            "core_attention_backward_seconds": t_core_bwd,
            "layer_weight_gemm_seconds": t_weights_fwd, "fp8_stage_share": fp8,
            # what one layer saves running in FP8 instead of bf16 (0 without FP8): per-stage times in the pipeline view
            "fp8_layer_forward_gain_seconds": where(fp8_on, bf16_fwd - fp8_fwd, 0.0),
            "fp8_layer_backward_gain_seconds": where(fp8_on, bf16_bwd - fp8_bwd, 0.0)}


def host_wait_terms(x: StepInputs, comp: dict, tp: dict) -> dict:
    """The GPU's wait for the host in each micro-batch, and the :func:`compute_terms` entries it lengthens.

    The host issues every kernel of the micro-step, the tensor-parallel collectives' included (``tp``: the
    ``tp_forward_microbatch_seconds`` / ``tp_backward_microbatch_seconds`` of :func:`tensor_parallel_terms`), so the
    GPU's busy time it competes with is the stage's forward, backward and recompute kernels plus those collectives:
    :func:`host_wait` of the layers' host (:func:`microstep_host`, an MoE layer's :func:`moe_block_host`), with the
    forward's share of it (``forward_host_share``) against the forward's kernels and collectives. What the forward
    makes the GPU wait is counted in the forward, the rest in the backward (the pipeline view and the bubble see the
    longer phases); what transformers' checkpointed layers add (:func:`hf_checkpoint_host`, run on the same host
    thread) is the recompute's share of the wait."""
    m, layers = x.num_microbatches, comp["stage_layers"]
    host_last, host_other = comp["host_last_microbatch_seconds"], comp["host_microbatch_seconds"]
    hf_host = comp["hf_checkpoint_host_microbatch_seconds"]
    gpu_fwd = layers * comp["layer_forward_seconds"] + tp["tp_forward_microbatch_seconds"]
    gpu = (comp["stage_forward_seconds"] + comp["stage_backward_seconds"] + comp["recompute_microbatch_seconds"]
           + tp["tp_forward_microbatch_seconds"] + tp["tp_backward_microbatch_seconds"])
    host_fwd = x.forward_host_share * host_last
    wait = lambda host: host_wait(host, gpu, host_fwd, gpu_fwd)  # noqa: E731
    others = maximum(m - 1, 0.0)
    wait_last, wait_other = wait(host_last), wait(host_other)
    exposed = wait_last + others * wait_other
    hf_exposed = (wait(host_last + hf_host) - wait_last + others * (wait(host_other + hf_host) - wait_other))
    forward_wait = m * maximum(0.0, host_fwd - gpu_fwd)  # host_wait is never below it
    per_layer = m * maximum(layers, 1e-30)
    return {"host_exposed_seconds": exposed, "host_forward_wait_seconds": forward_wait,
            # what the host's launches competed with, per micro-batch: all its GPU work, and the forward's
            "host_gpu_microbatch_seconds": gpu, "host_gpu_forward_seconds": gpu_fwd,
            "compute": comp["compute"] + exposed, "recompute": comp["recompute"] + hf_exposed,
            "stage_forward_seconds": comp["stage_forward_seconds"] + forward_wait / m,
            "layer_forward_seconds": comp["layer_forward_seconds"] + forward_wait / per_layer,
            "stage_backward_seconds": comp["stage_backward_seconds"] + (exposed - forward_wait) / m,
            "layer_backward_seconds": comp["layer_backward_seconds"] + (exposed - forward_wait) / per_layer,
            "recompute_microbatch_seconds": comp["recompute_microbatch_seconds"] + hf_exposed / m,
            "recompute_layer_seconds": comp["recompute_layer_seconds"] + hf_exposed / per_layer}


def hf_moe_block_bytes(*, copies, hidden_size, ffn_hidden_size, gated, value_bytes):
    """HBM bytes the non-GEMM kernels of one transformers ``grouped_mm`` MoE layer move, forward and backward
    together, for ``copies`` X = tokens·top-k routed rows of width h (experts of width f; v = value bytes).

    transformers/integrations/moe.py ``grouped_mm_experts_forward`` (5.x), per routed copy (the router's
    token-sized kernels, the sort and the histogram are left to the efficiency):

    * forward, v·(7h + 5f) gated: the gather ``hidden_states[perm // top_k]`` (reads and writes h), the activation
      on the chunked fc1 output ``act_fn(gate) * up`` (the activation reads and writes f, the product reads 2f and
      writes f), the weighting ``proj_out * sample_weights_g`` (reads and writes h: Qwen's routing weights are cast
      to the model dtype), the un-permute ``weighted_out[inv_perm]`` (reads and writes h) and the top-k sum (reads h);
    * backward, v·(11h + 13f) gated: the un-permute's index backward (zero-fills, reads and writes h), the
      weighting's two gradients (the copy's gradient reads and writes h; the weight's reads the gradient and the
      output, writes and sums a product: 4h), the product's two gradients (read 4f, write 2f), the activation's
      (reads 2f, writes f), the chunk's concatenation of the halves (reads and writes 2f) and the gather's index
      backward (reads and accumulates h).

    A plain activation (no gate) moves 2f forward and 3f backward instead of 5f and 13f. 18·v·(h + f) per copy
    gated. Mixtral's routing weights stay fp32, so its weighting and un-permute move fp32 outputs: more bytes
    than counted here."""
    h, f, v = hidden_size, ffn_hidden_size, value_bytes
    act = where(asarray(gated) > 0, 5.0 + 13.0, 2.0 + 3.0)
    return copies * v * ((7 + 11) * h + act * f)


def hf_checkpoint_host(x: StepInputs, layers):
    """Host seconds per micro-batch that transformers' gradient checkpointing adds on a stage of ``layers`` layers,
    per checkpointed decoder layer (``recompute_fraction`` of them under full recompute; 0 for other stacks):

        hf_recompute_layer_s + forward_host_share · (hf_layer_host_s + moe_block_host_s)

    The recompute runs the layer's forward again inside the backward (transformers ``GradientCheckpointingLayer``
    wraps ``forward`` in non-reentrant ``torch.utils.checkpoint``): its Python and kernel launches a second time,
    an MoE layer's experts block included (``moe_block_host_s``, at ZeRO 0-2 where that term is priced), plus the
    checkpoint machinery itself (``hf_recompute_layer_s``: ``preserve_rng_state`` saves the CPU and CUDA RNG states
    before the forward and restores them in ``fork_rng`` before the recompute, and every tensor the layer's autograd
    graph saves passes through a pack hook in the forward and in the recompute and an unpack hook in the backward).
    The layer's own forward and backward host stays :func:`microstep_host`'s. A checkpointed layer thus costs
    (1 + share) times a plain layer's host plus the machinery, not a constant of its own.

    The host queues kernels ahead of the GPU, so this work competes with the GPU time of the whole micro-batch
    (every layer's forward, recompute and backward, the logits and the loss), not with the checkpointed layer's
    own kernels: a large vocabulary or wide layers hide it, thin layers with a small vocabulary expose it."""
    full = where(x.recompute == 2, 1.0, 0.0)
    moe = where(x.zero_stage < 3, x.moe_block_host_s, 0.0)
    per_layer = x.hf_recompute_layer_s + x.forward_host_share * (x.hf_layer_host_s + moe)
    return full * x.recompute_fraction * layers * per_layer


def experts_hit(*, tokens, experts, top_k):
    """Expected distinct experts a micro-batch of ``tokens`` tokens reaches when each picks ``top_k`` of ``experts``
    uniformly: E·(1 − (1 − k/E)^tokens) — every expert once tokens·k is a few times E (any training batch)."""
    e = maximum(np.asarray(experts, dtype=float), 1.0)
    return e * (1.0 - (1.0 - minimum(np.asarray(top_k, dtype=float), e) / e) ** tokens)


def hf_eager_experts_bytes(*, tokens, experts_hit, num_experts, hidden_size, ffn_hidden_size, gated, value_bytes,
                           trainable_experts=1.0):
    """HBM bytes one transformers ``eager`` experts layer (``MixtralExperts.forward`` / ``Qwen3MoeExperts.forward``
    in transformers 5: a loop over the experts hit) moves beyond the per-copy kernels :func:`hf_moe_block_bytes`
    counts, forward and backward together. Each expert's ``hidden_states[token_idx]`` is an index whose backward
    (``IndexBackward0``) zero-fills a gradient of the whole input, tokens × h, and ``gate_up_proj[e]`` /
    ``down_proj[e]`` are selects whose backward (``SelectBackward0``, torch's ``select_backward``) zero-fills a
    gradient of the whole 3-D weight, E·(fc1 + f)·h; autograd sums the experts' gradients of each tensor into one
    buffer (read two, write one). Per expert hit ≈ 4·v·(tokens·h + E·(fc1 + f)·h): O(E²) weight bytes per layer.
    Frozen experts (``trainable_experts`` 0: LoRA) have no weight gradients.

    On one H200 (benchmarks/gpu_hf_moe_host.py --eager, Qwen3-MoE h 768, f 384, 8192 tokens, all 128 experts hit)
    the zero-fills and sums took 31.1 ms, 122 GB by this count: 3.9 TB/s."""
    h, f, v = hidden_size, ffn_hidden_size, value_bytes
    fc1 = where(asarray(gated) > 0, 2.0, 1.0) * f
    return 4.0 * v * experts_hit * (tokens * h + trainable_experts * num_experts * (fc1 + f) * h)


def moe_block_host(x: StepInputs, layers):
    """Host seconds per micro-batch that a stage's ``layers`` MoE layers add beyond dense MLPs.

    * transformers' ``grouped_mm`` experts: ``moe_block_host_s`` each (router, fp32 softmax and top-k, sort,
      gather, histogram, two grouped GEMMs, weighted combine and un-permute, ~150 kernels forward and backward
      whatever the expert count; measured by benchmarks/gpu_hf_moe_host.py);
    * transformers' ``eager`` experts: ``moe_block_host_s`` + ``moe_expert_host_s`` per expert hit
      (:func:`experts_hit`): the loop runs a gather, two linears, the activation, the weighting and an
      ``index_add_`` per expert, with two host-device synchronisations (``torch.where`` on the expert's mask,
      the ``expert_idx == num_experts`` test), and their backwards.

    Part of the micro-step's host time (:func:`microstep_host`), of which only what the micro-batch's GPU time does
    not hide is exposed; at ZeRO-3, whose hooks' host time is priced against the GPU's kernels by ``zero3_*``, only
    the eager loop's per-expert part remains (the loop runs inside one hooked module)."""
    tokens = x.micro_batch_size * x.seq_length / x.context_parallel  # per GPU per micro-batch, as in _shape
    hit = experts_hit(tokens=tokens, experts=x.num_experts, top_k=x.experts_per_token)
    loop = hit * x.moe_expert_host_s
    return layers * (where(x.zero_stage < 3, x.moe_block_host_s, 0.0) + loop)


def microstep_host(x: StepInputs, layers) -> tuple:
    """Host seconds of one micro-batch, ``(last, other)``: the last micro-batch of the step and each other one.

    * megatron-core local-spec layers: ``layer_host_s`` per layer of the stage (the layer's Python forward and the
      launches of its autograd backward; the same under Megatron and DeepSpeed);
    * transformers models: ``hf_layer_host_s`` per layer, checkpointed or not (what checkpointing adds, the
      recompute's second forward and the checkpoint machinery, is :func:`hf_checkpoint_host`'s, added to this one
      by the caller), and with LoRA ``hf_lora_module_host_s`` per adapted projection per forward pass (peft's
      ``Linear.forward`` adds ``lora_B(lora_A(dropout(x))) * scaling`` in Python; a checkpointed layer runs it
      again in its recompute).

    DeepSpeed ZeRO-2 adds its per-parameter gradient hooks to every micro-batch but the last
    (``deepspeed_tensor_seconds`` per parameter tensor: stage_1_and_2.py reduces and partitions gradients in every
    micro-step's hooks at ZeRO-2, at the accumulation boundary only at ZeRO-1, and the optimizer term already
    counts one pass of them). 0 at ZeRO-3 (its hooks are priced by ``zero3_*``) and where the encoder gives 0
    (Transformer Engine layers: not measured).

    The host queues a micro-batch's kernels ahead of the GPU, so a micro-step lasts max(host, GPU, forward host +
    backward GPU): only the host time beyond the micro-batch's GPU time (forward, backward, recompute, logits and
    loss, tensor-parallel collectives), or the forward's share of it beyond the forward's, is exposed, once per
    micro-batch (:func:`host_wait`, applied by :func:`host_wait_terms`). Large micro-batches hide it; the same
    tokens cut into gradient-accumulation micro-batches of thin layers pay it each micro-step (GPT-2 small, 12
    layers, one H200, megatron-core DDP: 8192 tokens as one micro-batch 73 ms, as two 113 ms, as four 187 ms)."""
    checkpointed = (x.recompute == 2) * x.recompute_fraction  # share of the stage's layers checkpointed
    per_layer = (x.layer_host_s + x.hf_layer_host_s
                 + (1 + checkpointed) * x.lora_modules_per_layer * x.hf_lora_module_host_s)
    on = ((x.layer_host_s > 0) | (x.hf_layer_host_s > 0)) & (x.zero_stage < 3)
    last = where(on, layers * per_layer, 0.0)
    hooks = where(on & (x.zero_stage == 2), zero2_hook_seconds(x, layers), 0.0)
    return last, last + hooks


def host_wait(host, gpu, host_forward, gpu_forward):
    """Seconds the GPU waits for the host in one micro-step: ``max(0, host − gpu, host_forward − gpu_forward)``.

    The host issues the micro-step's kernels in order and runs ahead of the GPU, which starts each kernel once it is
    issued and the one before it has finished. The micro-step ends at the latest of: the last kernel issued plus its
    run (``host``, the GPU then has nothing left but a tail), all kernels run back to back (``gpu``), or, at the
    point where the host turns from the forward to the backward, the forward's host work followed by every kernel
    of the backward (``host_forward + gpu − gpu_forward``). With both phases linear in their kernels these are the
    only corners of ``max_k(host issued up to k + GPU from k on)``: a forward that is host-bound while the whole
    micro-step is not (a forward's Python and launches outweigh its kernels more than the backward's autograd
    launches do theirs) costs its excess once."""
    return maximum(0.0, maximum(host - gpu, host_forward - gpu_forward))


def zero2_hook_seconds(x: StepInputs, layers):
    """Host seconds of DeepSpeed ZeRO-1/2's gradient hooks in one micro-step: ``deepspeed_tensor_seconds`` per
    trainable parameter tensor of the stage (stage_1_and_2.py hooks only the ``requires_grad`` parameters of its
    flat groups: with LoRA the two adapter matrices A and B of each adapted projection, else every parameter
    tensor)."""
    tensors = where(x.lora_modules_per_layer > 0, 2 * x.lora_modules_per_layer * layers, x.parameter_tensors)
    return tensors * x.deepspeed_tensor_seconds


def _expert_tp(x: StepInputs):
    """Expert tensor-parallel size (the dense tensor-parallel size when unset)."""
    return x.tensor_parallel if x.expert_tensor_parallel is None else x.expert_tensor_parallel


def local_parameters(x: StepInputs) -> tuple:
    """``(dense, experts, expert_group)``: parameters one rank of the largest stage holds outside the routed experts
    (:func:`stage_parameters` less its experts), the routed experts it holds (÷ tp_e·e·p) and the expert-data-parallel
    group their gradients and optimizer states are
    reduced and sharded over. Without expert parallelism and with tp_e = t the experts are priced with the rest
    (``experts`` 0, one gradient reduction over data × context parallel, as before the split)."""
    t, p = x.tensor_parallel, x.pipeline_parallel
    group = x.data_parallel * x.context_parallel if x.expert_data_parallel is None else x.expert_data_parallel
    local = stage_parameters(x)  # everything the rank holds, its local experts included
    if not any_true(x.expert_parameters > 0):  # a dense model
        return local, 0.0, group
    etp = _expert_tp(x)
    split = (x.expert_parallel > 1) | (etp != t)
    experts = where(split, x.expert_parameters / (etp * x.expert_parallel * p), 0.0)
    return local - experts, experts, group


def alltoall_seconds(nbytes, group_size, ranks_in_node, *, intra_gb_per_s, inter_gb_per_s, latency_s):
    """One all-to-all in which every rank sends ``nbytes`` in all, an equal share to each of the ``group_size``
    members (its own share stays): the ``ranks_in_node − 1`` peers in the node are reached over the intra-node link
    and the others over the network at the same time, so the slower of the two sets the time,

        max((r−1)/n · bytes / intra, (n−r)/n · bytes / inter) + latency

    (n = group size, r = members per node). NCCL's all-to-all is one grouped send/receive to every peer
    (``ncclGroupStart``/``ncclSend``/``ncclRecv``; megatron-core ``_AllToAll``), one latency deep. 0 for one rank."""
    n = maximum(group_size, 1)
    r = minimum(maximum(ranks_in_node, 1), n)
    intra = (r - 1) / n * nbytes / (intra_gb_per_s * 1e9)
    inter = (n - r) / n * nbytes / (inter_gb_per_s * 1e9)
    return where(n > 1, maximum(intra, inter) + latency_s, 0.0)


def expert_parallel_terms(x: StepInputs, comp: dict, full_rc) -> dict:
    """MoE token dispatch and combine per micro-batch on the slowest stage (exposed: megatron-core runs them on the
    compute stream unless its optional overlap schedules are on), ``ep_comm`` per step and the links used.

    Per MoE layer and pass, with v·T·k·f bytes of token copies leaving each rank (T = tokens/t entering the layer,
    f the token factor of :func:`workbench.memory.moe_expert_tokens`):

    * alltoall dispatcher (megatron-core ``MoEAlltoAllTokenDispatcher``): dispatch and combine are each one
      all-to-all over the expert-parallel group (:func:`alltoall_seconds`; the group's ranks are tp_e apart in
      megatron-core's expert rank order tp-ep-dp-pp), and with tp_e > 1 an all-gather (dispatch) and a
      reduce-scatter (combine) of the received copies over the expert-tensor-parallel group;
    * allgather dispatcher (``MoEAllGatherTokenDispatcher``): an all-gather of the hidden states v·T·h over the
      tp_e·e ranks (dispatch) and a reduce-scatter of the same size (combine).

    The backward repeats the forward's collectives (the gradients travel the same way back); a fully recomputed
    layer (or, under selective recompute, a recomputed MoE block) repeats its forward ones. With
    ``moe_overlap_alltoall`` only the part beyond one forward and one backward
    of compute stays exposed."""
    t, e, n = x.tensor_parallel, x.expert_parallel, x.gpus_per_node
    etp = _expert_tp(x)
    layers = comp["stage_layers"]
    if not any_true(x.num_experts > 1):  # a dense model: nothing to dispatch (the planner's common case, kept fast)
        zero = np.zeros_like(layers * 1.0)
        return {"ep_forward_microbatch_seconds": zero, "ep_backward_microbatch_seconds": zero,
                "ep_alltoall_seconds": zero, "ep_comm": zero, "ep_crosses_nodes": np.zeros_like(zero, bool),
                "ep_gb_per_s": x.intra_node_gb_per_s, "ep_latency_s": x.intra_node_latency_s}
    moe = (x.num_experts > 1).astype(float)
    tokens_in = x.micro_batch_size * x.seq_length / x.context_parallel / t
    copies_bytes = tokens_in * x.experts_per_token * x.moe_token_factor * x.hidden_size * x.bytes_per_value
    out = {}

    def link(stride, size):
        crosses = group_crosses_nodes(stride, size, x.gpus_per_node)
        return (crosses, where(crosses, x.inter_node_gb_per_s, x.intra_node_gb_per_s),
                where(crosses, x.inter_node_latency_s, x.intra_node_latency_s))

    ep_cross, ep_bw, ep_lat = link(etp, e)
    # members of one expert-parallel group inside a node: all of them unless the group leaves it; then the node's
    # n / tp_e expert-parallel neighbours
    in_node = where(ep_cross, maximum(1, minimum(e, n // maximum(etp, 1))), e)
    a2a = alltoall_seconds(copies_bytes, e, in_node, intra_gb_per_s=x.intra_node_gb_per_s,
                           inter_gb_per_s=x.inter_node_gb_per_s, latency_s=ep_lat)
    _, etp_bw, etp_lat = link(1, etp)
    gathered = copies_bytes * etp
    etp_pair = (collective_seconds(gathered, etp, kind="all_gather", gb_per_s=etp_bw, latency_s=etp_lat)
                + collective_seconds(gathered, etp, kind="reduce_scatter", gb_per_s=etp_bw, latency_s=etp_lat))
    alltoall_pass = 2 * a2a + etp_pair
    _, ag_bw, ag_lat = link(1, etp * e)
    hidden_gathered = tokens_in * x.hidden_size * x.bytes_per_value * etp * e
    allgather_pass = (collective_seconds(hidden_gathered, etp * e, kind="all_gather", gb_per_s=ag_bw,
                                         latency_s=ag_lat)
                      + collective_seconds(hidden_gathered, etp * e, kind="reduce_scatter", gb_per_s=ag_bw,
                                           latency_s=ag_lat))
    per_pass = moe * where(x.moe_allgather > 0, allgather_pass, alltoall_pass)
    # --overlap-moe-expert-parallel-comm (megatron-core's combined 1F1B, pipeline_parallel/combined_1f1b.py): one
    # micro-batch's forward runs beside another's backward, each one's all-to-alls during the other's compute; what
    # is left exposed is the micro-batch's communication beyond the compute of a forward and a backward
    # selective recompute of the whole MoE block (moe_recompute 2) runs its forward all-to-alls again
    moe_rc = (asarray(x.recompute) == 1) * (asarray(x.moe_recompute) >= 2)
    total = layers * (2 + full_rc + moe_rc) * per_pass
    compute = comp["stage_forward_seconds"] + comp["stage_backward_seconds"]
    kept = where(x.moe_overlap_alltoall > 0, exposed_seconds(total, compute, 1) / maximum(total, 1e-30), 1.0)
    out["ep_forward_microbatch_seconds"] = layers * per_pass * kept
    out["ep_backward_microbatch_seconds"] = layers * (1 + full_rc + moe_rc) * per_pass * kept
    out["ep_alltoall_seconds"] = moe * a2a
    out["ep_comm"] = x.num_microbatches * (out["ep_forward_microbatch_seconds"] + out["ep_backward_microbatch_seconds"])
    out["ep_crosses_nodes"], out["ep_gb_per_s"], out["ep_latency_s"] = ep_cross, ep_bw, ep_lat
    return out


def fp8_cast_bytes(*, tokens, hidden_size, query_projection_size, kv_projection_size, ffn_hidden_size, gated,
                   experts_per_token, tensor_parallel, sequence_parallel, bytes_per_value, fp8_bytes,
                   expert_copies=0.0):
    """HBM bytes FP8 training adds to one layer's forward and backward, for ``tokens`` tokens on one rank, by
    Transformer Engine's quantize kernels (each reads the bf16 tensor, v bytes, and writes it in FP8 row-wise and
    column-wise, 2·a bytes with a = ``fp8_bytes``; the column-wise copy is what the weight-gradient GEMM reads):

    * forward: the inputs of the attention projection (a·d per token ÷ t) and of fc2 (f·k ÷ t) are cast by their own
      kernels; the QKV and fc1 inputs come out of the fused norm-and-cast kernel, which writes 2·a instead of v
      bytes per value (h per token, ÷ t with sequence parallel). In an MoE layer (``expert_copies`` > 0: the token
      copies the rank's experts receive, :func:`compute_terms`' X) the norm's bf16 output goes to the router and the
      permutation instead, and the experts' fc1 input is the permuted copies, cast by the grouped linear's own
      quantize kernel: v + 2·a bytes per value of X·h (megatron-core ``TEGroupedMLP`` over Transformer Engine's
      ``GroupedLinear``, which quantizes each expert's rows of the permuted input);
    * backward: the output gradients of the four GEMMs are cast (QKV (a+2g)·d ÷ t, projection h, fc1 f'·k ÷ t and
      fc2 h·k per token; f' = 2f gated, k = experts per token).

    Returns ``(forward_bytes, backward_bytes)``."""
    t, h, k = tensor_parallel, hidden_size, experts_per_token
    v, a = bytes_per_value, fp8_bytes
    rep = where(asarray(sequence_parallel) > 0, 1.0 / t, 1.0)
    fc1_width = ffn_hidden_size * (1 + asarray(gated))
    cast = v + 2 * a
    moe = (asarray(expert_copies) > 0).astype(float)
    forward = (tokens * (cast * (query_projection_size + ffn_hidden_size * k) / t + (2 * a - v) * (2 - moe) * h * rep)
               + moe * cast * asarray(expert_copies) * h)
    backward = tokens * cast * ((query_projection_size + 2 * kv_projection_size) / t + h
                                + k * (fc1_width / t + h))
    return forward, backward


def fp8_stage_shares(x: StepInputs):
    """``(first, middle, last)``: the share of each stage's layers that run in FP8 — ``fp8_layer_fraction`` of the
    layers that are not Megatron's bf16 first/last layers, which megatron-core places by global layer number
    (:func:`workbench.memory.bf16_layers_on_stage`): on the first and last stage (a middle stage only when a stage
    has fewer layers than F or B, or with interleaving)."""
    from workbench.memory import bf16_layers_on_stage

    p, L = x.pipeline_parallel, x.num_layers
    n = [L / p if v is None else v for v in (x.first_stage_layers, x.middle_stage_layers, x.last_stage_layers)]
    split = (n[0], n[1], n[2]) if x.first_stage_layers is not None else (None, None, None)
    out = []
    for stage, count in zip((0, minimum(1, p - 1), p - 1), n):
        bf16 = bf16_layers_on_stage(L, p, x.virtual_pipeline, stage, x.fp8_bf16_first, x.fp8_bf16_last, *split)
        out.append(x.fp8_layer_fraction * (1.0 - bf16 / maximum(count, 1)))
    return tuple(out)


def stage_layers(x: StepInputs):
    """``(last, other)``: transformer layers on the last pipeline stage and the most on any other stage (0 when
    p = 1), from the uneven split's ``first/middle/last_stage_layers`` or num_layers / p."""
    p = x.pipeline_parallel
    if x.first_stage_layers is None:
        even = x.num_layers / p
        return even, where(p > 1, even, 0.0)
    other = where(p > 2, maximum(x.first_stage_layers, x.middle_stage_layers), x.first_stage_layers)
    return x.last_stage_layers, where(p > 1, other, 0.0)


def tensor_parallel_terms(x: StepInputs, comp: dict) -> dict:
    """Each process group's link (``<group>_crosses_nodes``, ``_gb_per_s``, ``_latency_s``: the one
    :func:`workbench.parallel.group_crosses_nodes` gives it) and the tensor-parallel collectives: ``tp_comm`` per
    step and ``tp_forward_microbatch_seconds`` / ``tp_backward_microbatch_seconds`` per micro-batch of the slowest
    stage. Apart from :func:`communication_terms` because the host's wait (:func:`host_wait_terms`) needs them: they
    run on the GPU between the layers' kernels. ``comp`` is :func:`compute_terms` (the GEMMs --tp-comm-overlap
    hides behind; none of what it reads depends on the host's wait)."""
    g = _shape(x)
    t, p, v, c, d = x.tensor_parallel, x.pipeline_parallel, x.virtual_pipeline, x.context_parallel, x.data_parallel
    m, h, tokens, sp = x.num_microbatches, x.hidden_size, g["tokens"], g["sp"]
    layers = comp["stage_layers"]  # the slowest stage's layers
    full_rc = g["full"] * x.recompute_fraction
    grad_group = d * c  # Megatron reduces gradients over the data-parallel × context-parallel group
    cp_a2a = where(x.cp_comm_type == CP_COMM_CODES["all_gather"], 1.0, x.cp_a2a_size)
    links = {"tp": (1, t), "cp": (t, c), "pp": (t * c * d, p), "dp": (t, grad_group),  # (stride, size)
             "cp_a2a": (t, cp_a2a), "cp_ring": (t * cp_a2a, c / cp_a2a)}  # the two levels of context parallel
    out = {}
    for name, (stride, size) in links.items():
        crosses = group_crosses_nodes(stride, size, x.gpus_per_node)
        out[f"{name}_crosses_nodes"] = crosses
        out[f"{name}_gb_per_s"] = where(crosses, x.inter_node_gb_per_s, x.intra_node_gb_per_s)
        out[f"{name}_latency_s"] = where(crosses, x.inter_node_latency_s, x.intra_node_latency_s)

    # tensor parallel: 2 all-reduces forward + 2 backward per layer (+2 per recomputed forward)
    tp = dict(gb_per_s=out["tp_gb_per_s"], latency_s=out["tp_latency_s"])
    act_bytes = tokens * h * x.bytes_per_value
    allreduce = collective_seconds(act_bytes, t, kind="all_reduce", **tp)
    # with sequence parallel each all-reduce becomes an all-gather + a reduce-scatter: same bytes, twice the calls
    # FP8 layers gather their norm's output already quantized (Transformer Engine's LayerNormLinear casts before the
    # sequence-parallel all-gather): a bytes instead of v per value; the reduce-scatters stay in bf16
    fp8_gather = 1.0 - comp["fp8_stage_share"] * (1.0 - x.fp8_activation_bytes / x.bytes_per_value)
    sp_pair = (collective_seconds(act_bytes * fp8_gather, t, kind="all_gather", **tp)
               + collective_seconds(act_bytes, t, kind="reduce_scatter", **tp))
    per_collective = where(sp, sp_pair, allreduce)
    # an MoE layer's MLP needs no tensor-parallel collective of its own: its token dispatcher gathers and scatters
    # the tokens (``ep_comm``), so only the attention's pair remains
    pairs = 2 - (x.num_experts > 1).astype(float)
    # --tp-comm-overlap (Transformer Engine userbuffers, TE initialize_ub's default methods): forward, the all-gather
    # runs inside QKV / FC1 (ring_exchange) and the reduce-scatter inside proj / FC2 (pipeline, SMs given away);
    # backward, the output-gradient all-gather inside the proj / FC2 dgrad GEMM (ring_exchange) and the input-gradient
    # reduce-scatter inside the QKV / FC1 wgrad GEMM (bulk, SMs given away)
    gather = collective_seconds(act_bytes * fp8_gather, t, kind="all_gather", **tp)
    scatter = collective_seconds(act_bytes, t, kind="reduce_scatter", **tp)
    f_sm = x.tp_overlap_sm_fraction
    dense_mlp = 1.0 - (x.num_experts > 1).astype(float)

    def ub(comm, name, gemm_name=None, **kw):
        return tp_overlap_exposed_seconds(comm, comp[f"{gemm_name or name}_gemm_seconds"],
                                          chunked_gemm_seconds=comp[f"{name}_ub_chunked_seconds"], **kw)
    ov_fwd = (ub(gather, "qkv") + ub(scatter, "proj", sm_fraction=f_sm)
              + dense_mlp * (ub(gather, "fc1") + ub(scatter, "fc2", sm_fraction=f_sm)))
    # the bulk reduce-scatter of the input gradient runs beside the whole (unsplit) wgrad GEMM
    ov_bwd = (ub(gather, "proj_dgrad", "proj")
              + tp_overlap_exposed_seconds(scatter, x.trainable_fraction * comp["qkv_gemm_seconds"], sm_fraction=f_sm)
              + dense_mlp * (ub(gather, "fc2_dgrad", "fc2")
                             + tp_overlap_exposed_seconds(scatter, x.trainable_fraction * comp["fc1_gemm_seconds"],
                                                          sm_fraction=f_sm)))
    overlapped = (asarray(x.tp_comm_overlap) > 0) & asarray(sp)
    layer_fwd_tp = where(overlapped, ov_fwd, pairs * per_collective)
    layer_bwd_tp = where(overlapped, ov_bwd + full_rc * ov_fwd, pairs * (1 + full_rc) * per_collective)
    out["tp_overlap_hidden_seconds"] = where(overlapped, m * layers * (pairs * (2 + full_rc) * per_collective
                                                                       - ov_fwd * (1 + full_rc) - ov_bwd), 0.0)
    # FP8 delayed scaling: the amaxes of the stage's FP8 tensors are all-reduced over its TP×CP×DP ranks after the
    # forward and after the backward of each micro-batch (Transformer Engine's amax reduction group); latency-bound,
    # it blocks the stage like the tensor-parallel collectives, so it is counted with them
    stage_ranks = t * c * d
    amax_crosses = group_crosses_nodes(1, stage_ranks, x.gpus_per_node)
    amax = where(x.fp8_amax_reductions > 0, collective_seconds(
        x.fp8_amax_bytes, stage_ranks, kind="all_reduce",
        gb_per_s=where(amax_crosses, x.inter_node_gb_per_s, x.intra_node_gb_per_s),
        latency_s=where(amax_crosses, x.inter_node_latency_s, x.intra_node_latency_s)), 0.0)
    out["fp8_amax_microbatch_seconds"] = x.fp8_amax_reductions * amax
    out["tp_forward_microbatch_seconds"] = layers * layer_fwd_tp + x.fp8_amax_reductions / 2 * amax
    out["tp_backward_microbatch_seconds"] = layers * layer_bwd_tp + x.fp8_amax_reductions / 2 * amax
    out["tp_comm"] = m * (out["tp_forward_microbatch_seconds"] + out["tp_backward_microbatch_seconds"])
    return out


def communication_terms(x: StepInputs, comp: dict, tp: dict) -> dict:
    """``tp_comm``, ``cp_comm``, ``pp_comm`` and ``dp_comm`` seconds per step (exposed), each group on its link,
    and ``zero3_hooks`` (ZeRO-3's per-module host hooks and HBM copies, priced beside its gathers); ``comp`` is
    :func:`compute_terms` with the host's wait (what overlapped communication hides behind), ``tp`` is
    :func:`tensor_parallel_terms` (the links and the tensor-parallel collectives)."""
    g = _shape(x)
    t, p, v, m = x.tensor_parallel, x.pipeline_parallel, x.virtual_pipeline, x.num_microbatches
    tokens, sp, layers = g["tokens"], g["sp"], comp["stage_layers"]  # the slowest stage's layers
    full_rc = g["full"] * x.recompute_fraction
    grad_group = x.data_parallel * x.context_parallel  # Megatron reduces gradients over data × context parallel
    act_bytes = tokens * x.hidden_size * x.bytes_per_value
    out = dict(tp)

    # context parallel: the K/V exchange of the attention core (ring P2P, all-to-all, all-gather or hierarchical)
    cp = context_parallel_seconds(x, comp["core_attention_seconds"], tokens, out,
                                  core_backward_seconds=comp["core_attention_backward_seconds"])
    out.update(cp)
    out["cp_forward_microbatch_seconds"] = layers * cp["cp_layer_forward_seconds"]
    out["cp_backward_microbatch_seconds"] = layers * (cp["cp_layer_forward_seconds"] * full_rc
                                                      + cp["cp_layer_backward_seconds"])
    out["cp_comm"] = m * (out["cp_forward_microbatch_seconds"] + out["cp_backward_microbatch_seconds"])

    # pipeline parallel: activations forward, gradients backward, per micro-batch per chunk
    send = p2p_seconds(act_bytes / where(sp, t, 1), gb_per_s=out["pp_gb_per_s"], latency_s=out["pp_latency_s"])
    out["pp_comm"] = where(p > 1, 2 * (v * m + p - 1) * send, 0.0)

    out.update(expert_parallel_terms(x, comp, full_rc))

    # data parallel: gradient reduction and ZeRO gathers; routed experts (expert parallel) are reduced over their
    # own expert-data-parallel group, which shares the backward they hide behind in proportion to their bytes
    zero = x.zero_stage
    dense_params, expert_params, expert_group = local_parameters(x)
    local_params = dense_params + expert_params
    backward_mb = layers * comp["layer_backward_seconds"]  # compute a gradient reduction can hide behind
    forward_mb = layers * comp["layer_forward_seconds"]
    share = dense_params / maximum(local_params, 1e-30) if any_true(expert_params > 0) else 1.0
    dense_dp = _data_parallel_seconds(x, dense_params, grad_group, (t, grad_group), share * backward_mb,
                                      share * forward_mb)
    expert_dp = 0.0
    if any_true(expert_params > 0):  # routed experts priced on their own group
        expert_cross = group_crosses_nodes(_expert_tp(x) * x.expert_parallel, expert_group, x.gpus_per_node)
        expert_link = dict(gb_per_s=where(expert_cross, x.inter_node_gb_per_s, x.intra_node_gb_per_s),
                           latency_s=where(expert_cross, x.inter_node_latency_s, x.intra_node_latency_s))
        expert_dp = where(expert_params > 0,
                             _data_parallel_seconds(x, expert_params, expert_group, None, (1 - share) * backward_mb,
                                                    (1 - share) * forward_mb, link=expert_link), 0.0)
    out["dp_expert_seconds"] = expert_dp
    trainable_params = local_params * x.trainable_fraction
    # ZeRO-3 per-module work (DeepSpeed stage 3: deepspeed/runtime/zero/parameter_offload.py hooks,
    # partitioned_param_coordinator.py fetch/release, stage3.py gradient reduce-and-partition): every submodule
    # holding partitioned parameters is fetched (all-gather into a full buffer, released after use) before each
    # forward, each backward and each recomputed forward, and its gradients are reduced and copied into the fp32
    # partition once per backward.
    # - HBM bytes (GPU), counted: each fetch reads the 16-bit partition and writes the gathered parameter (2v per
    #   parameter; :func:`zero3_fetch_bytes_per_parameter`: nothing on one rank, whose fetch only points the
    #   parameter at its own partition); each backward's reduce flattens the gradients into the bucket (2v),
    #   averages them in place (2v) and copies the partition into the fp32 gradient (v + 4): 5v + 4 per trainable
    #   parameter;
    # - host work (CPU): each submodule's hook call in each pass costs zero3_fetch_latency_s whether it holds
    #   parameters or not (:func:`zero3_hooked_modules_per_layer`), each module's reduce zero3_reduce_latency_s, and
    #   each gathering fetch and reduce zero3_collective_call_s more when the group has more than one rank. The host
    #   runs ahead of the GPU, so only the hook time beyond the stage's forward/backward kernels (times
    #   zero3_hook_overlap) reaches the step.
    modules_pass = layers * x.zero3_modules_per_layer + 1
    fetches = modules_pass * (2 + full_rc)
    hooked = (x.zero3_modules_per_layer if x.zero3_hooked_modules_per_layer is None
              else x.zero3_hooked_modules_per_layer)
    hook_calls = (layers * hooked + 1) * (2 + full_rc)
    multi = (grad_group > 1).astype(float)
    hook_seconds = zero3_hook_seconds(m * fetches, m * modules_pass, multi, fetch_latency_s=x.zero3_fetch_latency_s,
                                      reduce_latency_s=x.zero3_reduce_latency_s,
                                      collective_call_s=x.zero3_collective_call_s, hooks=m * hook_calls)
    kernel_seconds = m * (comp["stage_forward_seconds"] + comp["stage_backward_seconds"]
                          + comp["recompute_microbatch_seconds"])
    zero3_calls = expected_excess_seconds(hook_seconds, x.zero3_hook_overlap * kernel_seconds, x.zero3_host_spread)
    v = x.bytes_per_value
    fetch_bytes = zero3_fetch_bytes_per_parameter(v, grad_group, x.offload_params)
    zero3_bytes = m * ((2 + full_rc) * fetch_bytes * local_params + (5 * v + 4) * trainable_params)
    zero3_calls = zero3_calls + (zero3_bytes + m * (2 + full_rc + 1) * local_params * x.zero3_hbm_bytes_per_parameter
                                 ) / (x.hbm_gb_per_s * 1e9 * x.hbm_efficiency)
    # every micro-batch's gradients are accumulated into the engine's reduce buffer through HBM:
    # grad_accumulate_bytes_per_parameter per trainable parameter (Megatron DDP's fp32 main_grad += grad; DeepSpeed
    # ZeRO-1/2's copy into the contiguous bucket and the in-place average; counted above for ZeRO-3)
    accumulate = (m * trainable_params * x.grad_accumulate_bytes_per_parameter
                  / (x.hbm_gb_per_s * 1e9 * x.hbm_efficiency))
    out["dp_comm"] = dense_dp + expert_dp + accumulate
    out["zero3_hooks"] = where(zero == 3, zero3_calls, 0.0)
    return out


def flash_attention_seconds(core_flops, kv_tokens, *, peak_flops, forward_efficiency_max, backward_efficiency_max,
                            half_seq, backward_flops_ratio):
    """Forward and backward seconds of a fused (flash) attention kernel doing ``core_flops`` forward FLOPs (the
    causal count, :func:`workbench.flops.attention_core_flops_per_token`) over ``kv_tokens`` keys per call:
    rate = peak × efficiency_max × n / (n + half_seq), the backward executing ``backward_flops_ratio`` × the
    forward's FLOPs at its own rate (catalog ``flash_attention``: FlashAttention-3, arXiv 2407.08608, cuDNN on
    H100). Zero efficiency (no catalog entry) gives infinite time; callers select the GEMM-curve price instead."""
    n = np.asarray(kv_tokens, dtype=float)
    shape = n / (n + half_seq)
    with np.errstate(divide="ignore", invalid="ignore"):
        fwd = core_flops / (peak_flops * forward_efficiency_max * shape)
        bwd = backward_flops_ratio * core_flops / (peak_flops * backward_efficiency_max * shape)
    return fwd, bwd


def _data_parallel_seconds(x: StepInputs, local_params, group, stride_size, backward_mb, forward_mb, *,
                           link=None):
    """Exposed gradient-reduction (and ZeRO gather) seconds per step for ``local_params`` parameters on one rank,
    reduced over ``group`` ranks; ``backward_mb`` / ``forward_mb`` is the compute of one micro-batch the
    collectives can hide behind. ``link`` (``gb_per_s``, ``latency_s``) defaults to the data-parallel group's
    (``stride_size``: its rank stride and size)."""
    if link is None:
        crosses = group_crosses_nodes(stride_size[0], stride_size[1], x.gpus_per_node)
        link = dict(gb_per_s=where(crosses, x.inter_node_gb_per_s, x.intra_node_gb_per_s),
                    latency_s=where(crosses, x.inter_node_latency_s, x.intra_node_latency_s))
    zero, m, t = x.zero_stage, x.num_microbatches, x.tensor_parallel
    grad_group = group
    coll = functools.partial(collective_seconds, **link)
    trainable_params = local_params * x.trainable_fraction  # what has gradients and optimizer states
    grad_bytes = trainable_params * x.grad_reduce_bytes_per_value  # Megatron reduces its fp32 main grads
    bucket_bytes = minimum(x.grad_bucket_elements * x.grad_reduce_bytes_per_value, grad_bytes)
    sharded = (zero >= 1) | (x.distributed_optimizer > 0)
    overlap_comm = x.overlap_comm
    overlap = overlap_comm > 0
    # ZeRO-0 / Megatron DDP: one all-reduce per step, overlapped with the last micro-batch's backward; with overlap
    # the last bucket is reduced after the backward ends: it stays exposed (without overlap all of it is exposed)
    allreduce_dp = coll(grad_bytes, grad_group, kind="all_reduce")
    dp_plain = (exposed_seconds(allreduce_dp, backward_mb, overlap_comm)
                + overlap * coll(bucket_bytes, grad_group, kind="all_reduce"))
    # ZeRO-1 / distributed optimizer: reduce-scatter once per step (overlapped), all-gather of the updated params
    rs = coll(grad_bytes, grad_group, kind="reduce_scatter")
    # the updated 16-bit parameters (FP8 linear weights with --fp8-param-gather)
    gather_bytes = x.bytes_per_value if x.param_gather_bytes_per_value is None else x.param_gather_bytes_per_value
    ag = coll(trainable_params * gather_bytes, grad_group, kind="all_gather")
    ag_all = coll(local_params * x.bytes_per_value, grad_group, kind="all_gather")  # ZeRO-3: frozen ones too
    rs_bucket = overlap * coll(bucket_bytes, grad_group, kind="reduce_scatter")
    dp_zero1 = exposed_seconds(rs, backward_mb, overlap_comm) + rs_bucket + ag
    # ZeRO-2: DeepSpeed reduce-scatters every micro-batch (stage_1_and_2.py, partition_gradients) + all-gather
    dp_zero2 = m * exposed_seconds(rs, backward_mb, overlap_comm) + rs_bucket + ag
    # ZeRO-3: per micro-batch all-gather forward and backward + reduce-scatter; the first layer's gather is exposed
    layer_bytes = x.parameters_per_layer / t * x.bytes_per_value
    dp_zero3 = (m * (exposed_seconds(ag_all, forward_mb, overlap_comm) + exposed_seconds(ag_all + rs, backward_mb,
                                                                                          overlap_comm))
                + overlap * coll(layer_bytes, grad_group, kind="all_gather") + rs_bucket)
    return where(zero == 3, dp_zero3, where(zero == 2, dp_zero2, where(sharded, dp_zero1, dp_plain)))


CP_COMM_CODES = {"p2p": 0, "a2a": 1, "all_gather": 2, "a2a+p2p": 3}
"""Numeric codes of :class:`workbench.specs.CPCommType` in :class:`StepInputs` ``cp_comm_type``."""


def all_to_all_seconds(nbytes, group_size, *, gb_per_s, latency_s):
    """One all-to-all over ``group_size`` ranks, ``nbytes`` the tensor each rank holds: it keeps 1/n of it and
    sends (n−1)/n, receiving as much, at the same time on every rank: (n−1)/n · bytes / bandwidth + latency.
    Zero for a group of one."""
    n = maximum(group_size, 1)
    return where(n > 1, (n - 1) / n * nbytes / (gb_per_s * 1e9) + latency_s, 0.0)


A2A_CALLS_PER_DIRECTION = 4
"""All-to-all calls of the head/sequence exchange per layer and direction (Q, K, V before attention, O after it;
backward their gradients): DeepSpeed ``sequence/layer.py`` ``DistributedAttention.forward``, Transformer Engine
``context_parallel.py`` ``flash_attn_a2a_communicate``."""


def context_parallel_seconds(x: StepInputs, core_seconds, tokens, links: dict, core_backward_seconds=None) -> dict:
    """Exposed context-parallel communication of one layer's forward and backward for one micro-batch, by
    ``cp_comm_type`` (Transformer Engine ``attention/dot_product_attention/context_parallel.py``, through
    megatron-core ``TEDotProductAttention``). c = context_parallel, a = ``cp_a2a_size`` (the all-to-all group),
    r = c / a the ring; each rank holds s/c tokens (Megatron splits the sequence into 2c chunks and gives rank i
    chunks i and 2c−1−i, so every ring step does the same causal work: ``core_seconds``/r per step).
    K/V of one rank: kv = 2 · (b·s/c) · kv_projection/t · bytes_per_value; Q (and O): q = (b·s/c) · q_projection/t · v.

    * ``p2p`` (ring, a = 1): r − 1 steps forward, each sending kv to the next rank while the chunk received before
      is attended; a step is exposed only by what its transfer exceeds its compute:
      (r−1)·max(0, send(kv) − core/r). Backward sends K/V and their gradients: (r−1)·max(0, send(2kv) −
      core_backward/r) (``core_backward_seconds``, default 2·core).
      With GQA kv is small next to the attention work, so the ring hides until s/c gets short.
    * ``a2a`` (Ulysses, a = c): all-to-all of Q, K, V before attention and of O after it (forward q+kv+q bytes in
      :data:`A2A_CALLS_PER_DIRECTION` calls, each with its latency; backward the same for dO, dQ, dK, dV), not
      overlapped.
    * ``all_gather``: all-gather the whole sequence's K/V (c·kv) before attention; backward gathers them again and
      reduce-scatters their gradients; not overlapped (Llama 3 §3.3.2, TE ``AttnFuncWithCPAndKVAllGather``).
    * ``a2a+p2p``: the all-to-all over a (inner group, consecutive CP ranks), then the ring over r = c/a.

    Each part is priced on its group's link (``links``: ``cp_ring_*`` and ``cp_a2a_*`` bandwidth and latency, as
    :func:`communication_terms` sets them). Returns per-layer seconds: ``cp_layer_forward_seconds``,
    ``cp_layer_backward_seconds`` (exposed) and ``cp_layer_transfer_seconds`` (every byte's time, hidden or not,
    forward + backward)."""
    c, t, v = x.context_parallel, x.tensor_parallel, x.bytes_per_value
    kind = x.cp_comm_type
    gather = kind == CP_COMM_CODES["all_gather"]
    a = where(gather, 1.0, x.cp_a2a_size)
    r = where(gather, 1.0, c / a)
    kv = 2 * tokens * x.kv_projection_size / t * v
    q = tokens * x.query_projection_size / t * v
    ring = dict(gb_per_s=links["cp_ring_gb_per_s"], latency_s=links["cp_ring_latency_s"])
    hop_fwd, hop_bwd = p2p_seconds(kv, **ring), p2p_seconds(2 * kv, **ring)
    steps = maximum(r - 1, 0)
    ring_fwd = steps * maximum(0.0, hop_fwd - core_seconds / r)
    core_bwd = 2 * core_seconds if core_backward_seconds is None else core_backward_seconds
    ring_bwd = steps * maximum(0.0, hop_bwd - core_bwd / r)
    # four all-to-alls each way (Q, K, V; O), each paying the collective's latency: DeepSpeed's
    # DistributedAttention calls _SeqAllToAll once per tensor (sequence/layer.py), Transformer Engine's
    # flash_attn_a2a_communicate one all_to_all_single per tensor
    a2a = all_to_all_seconds(2 * q + kv, a, gb_per_s=links["cp_a2a_gb_per_s"], latency_s=links["cp_a2a_latency_s"]) \
        + where(a > 1, (A2A_CALLS_PER_DIRECTION - 1) * links["cp_a2a_latency_s"], 0.0)
    cp_link = dict(gb_per_s=links["cp_gb_per_s"], latency_s=links["cp_latency_s"])
    ag = where(gather, collective_seconds(c * kv, c, kind="all_gather", **cp_link), 0.0)
    rs = where(gather, collective_seconds(c * kv, c, kind="reduce_scatter", **cp_link), 0.0)
    on = c > 1
    fwd = where(on, ring_fwd + a2a + ag, 0.0)
    bwd = where(on, ring_bwd + a2a + ag + rs, 0.0)
    transfer = where(on, steps * (hop_fwd + hop_bwd) + 2 * a2a + 2 * ag + rs, 0.0)
    return {"cp_layer_forward_seconds": fwd, "cp_layer_backward_seconds": bwd, "cp_layer_transfer_seconds": transfer}


def cpu_adam_seconds_per_parameter(threads, per_thread, serial, per_node, ranks_per_node=1):
    """Host seconds of DeepSpeedCPUAdam per parameter for one rank: ``threads`` OpenMP threads each updating
    ``per_thread`` parameters per second plus ``serial`` seconds per parameter that threads do not shorten, until
    the ``ranks_per_node`` ranks of a node together reach the node's memory-bound ``per_node`` rate (the catalog's
    ``cpu_adam`` constants, or those scaled by a hardware profile's DeepSpeedCPUAdam speed; scalars or arrays)."""
    return maximum(1 / (threads * per_thread) + serial, ranks_per_node / per_node)


def optimizer_terms(x: StepInputs) -> dict:
    """``offload`` (ZeRO-Offload PCIe traffic and the CPU Adam step) and ``optimizer`` (the GPU optimizer step)
    seconds per step, over the parameter shard one rank of the largest stage updates.

    CPU Adam (DeepSpeedCPUAdam: OpenMP over the rank's ``OMP_NUM_THREADS``) updates
    min(threads × ``cpu_adam_params_per_second_per_thread``, ``cpu_adam_params_per_second_per_node`` ÷ ranks on
    the node) parameters per second — compute bound per thread until the node's memory bandwidth is shared out —
    × (1 + ``offload_zero3_host_factor``) at ZeRO-3, whose stage3.py also runs the gradient norm, the unscale/clip
    pass and the copy back to 16 bits over the host partition; the gradients cross the host link in fp32 and the
    updated parameters in 16 bits (4 + v bytes per parameter: torch's ``copy_`` between devices converts the dtype
    on the GPU when non-blocking, as DeepSpeed's gradient copy is, and on the host when blocking, as its parameter
    copy back is). These copies cross at ``host_link_gb_per_s`` from page-locked buffers and at
    ``pageable_copy_gb_per_s`` from pageable ones (``pin_memory`` off: the driver stages each copy through its own
    page-locked memory, so the host's memory copies set the rate; fitted on the corpus's fit13 batch). With
    gradient accumulation ZeRO-1/2 also move each gradient's running sum across the link (below)."""
    t, p, c, d, m = x.tensor_parallel, x.pipeline_parallel, x.context_parallel, x.data_parallel, x.num_microbatches
    dense_params, expert_params, expert_group = local_parameters(x)
    local_params = dense_params + expert_params
    sharded = (x.zero_stage >= 1) | (x.distributed_optimizer > 0)
    # what has optimizer states (routed experts sharded over their expert-data-parallel group)
    shard = (dense_params / where(sharded, d * c, 1)
             + expert_params / where(sharded, expert_group, 1)) * x.trainable_fraction
    off_opt = x.offload_optimizer > 0
    off_par = x.offload_params > 0
    # page-locked buffers cross at the link's rate; pageable ones (pin_memory off) at the host's staged-copy rate
    host_bps = where(x.pin_memory > 0, x.host_link_gb_per_s,
                     minimum(x.host_link_gb_per_s, x.pageable_copy_gb_per_s)) * 1e9
    # CPU Adam (DeepSpeedCPUAdam, OpenMP over the rank's OMP_NUM_THREADS): each thread updates
    # cpu_adam_params_per_second_per_thread, until the ranks of a node together reach what its memory bandwidth
    # allows (cpu_adam_params_per_second_per_node); ZeRO-3 adds host passes over the same partition
    ranks_per_node = minimum(t * p * c * d, x.gpus_per_node)
    cpu_seconds_per_param = cpu_adam_seconds_per_parameter(
        x.cpu_adam_threads, x.cpu_adam_params_per_second_per_thread, x.cpu_adam_serial_seconds_per_parameter,
        x.cpu_adam_params_per_second_per_node, ranks_per_node)
    host_passes = 1 + (x.zero_stage == 3) * where(off_par, x.offload_param_host_factor, x.offload_zero3_host_factor)
    # the gradients go down in fp32 (DeepSpeed's non-blocking copy_ into its fp32 host buffer converts on the GPU)
    # and the updated parameters come up in 16 bits (its blocking copy_ back converts on the host): 4 + v bytes;
    # with the parameters on the host they stay there (4 bytes)
    offload_opt_s = where(off_opt, shard * (4.0 + where(off_par, 0.0, x.bytes_per_value)) / host_bps
                             + shard * host_passes * cpu_seconds_per_param, 0.0)
    # ZeRO-1/2 with gradient accumulation keep each gradient's running sum on the host
    # (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu, DeepSpeed 0.19.8): every micro-batch's hooks copy the
    # 16-bit gradient down and, after the first, the sum so far up through the GPU staging buffer to add it there,
    # (2m - 1) v bytes a parameter a step at ZeRO-2; ZeRO-1 reduces at the boundary alone, one copy each way (2v)
    accumulated = off_opt & (m > 1) & (x.zero_stage >= 1) & (x.zero_stage <= 2)
    offload_opt_s = offload_opt_s + where(
        accumulated, shard * where(x.zero_stage == 2, 2 * m - 1, 2) * x.bytes_per_value / host_bps, 0.0)
    # parameters on the host: each micro-batch's forward copies them in (ZeRO-3's coordinator keeps most of them
    # gathered until their backward: :func:`workbench.memory.zero3_gathered_walk`), and with the optimizer on
    # the GPU each step casts the updated fp32 partition back into the host's 16-bit copy
    offload_par_s = where(off_par, m * local_params / (d * c) * x.bytes_per_value / host_bps
                          + where(off_opt, 0.0, shard * x.param_offload_copy_back_s), 0.0)
    nvme_s = nvme_swap_seconds(x, shard, local_params / (d * c), ranks_per_node)
    # fused Adam on the shard, plus the engine's own passes over the gradients and parameters around it (DeepSpeed:
    # flatten / up-cast of gradients, norm, clipping, copy back to 16 bits; 0 for Megatron)
    hbm = x.hbm_gb_per_s * 1e9 * x.hbm_efficiency * x.optimizer_hbm_scale
    optimizer = where(off_opt, 0.0, shard * (x.optimizer_bytes_per_parameter
                                                + x.deepspeed_step_bytes_per_parameter) / hbm)
    # + the step's fixed cost (kernel launches and bookkeeping that do not grow with the parameter count) and
    # DeepSpeed's per-tensor work
    optimizer = optimizer + x.step_overhead_s + x.parameter_tensors * x.deepspeed_tensor_seconds
    return {"offload": offload_opt_s + offload_par_s + nvme_s, "optimizer": optimizer}


NVME_OPTIMIZER_READ_BYTES = 16
"""Bytes per optimizer-partition parameter DeepSpeed reads from NVMe each step with the optimizer states there: the
fp32 master weight, Adam's two moments and the fp32 gradient (``PartitionedOptimizerSwapper.swap_in_optimizer_state``
reads every tensor of the sub-group's swap info and its gradient; deepspeed/runtime/swap_tensor, 0.19.8)."""
NVME_OPTIMIZER_WRITE_BYTES = 16
"""Bytes per optimizer-partition parameter written to NVMe each step: the fp32 gradient at the accumulation boundary
(stage3.py ``_swap_out_offload_fp32_gradients``) and, after CPU Adam, the master weight and the two moments
(``swap_out_optimizer_state``)."""
NVME_PARAMS_IN_CPU = defaults.DEEPSPEED_NVME_PARAMS_IN_CPU
"""``offload_param.max_in_cpu`` (:data:`workbench.defaults.DEEPSPEED_NVME_PARAMS_IN_CPU`): the part of a rank's 16-bit
partition ZeRO-3 keeps in host memory with the parameters offloaded to NVMe; only what lies beyond is swapped."""


def nvme_swap_seconds(x: StepInputs, shard, partition, ranks_per_node):
    """Seconds per step of ZeRO-Infinity's NVMe swaps on one rank, the node's NVMe rates shared by its ranks.

    * Optimizer states on NVMe: each step reads :data:`NVME_OPTIMIZER_READ_BYTES` and writes
      :data:`NVME_OPTIMIZER_WRITE_BYTES` per parameter of the rank's optimizer partition ``shard`` (the sub-groups
      one after another: swap in, CPU Adam, swap out; DeepSpeed's default ``pipeline_read/pipeline_write`` off),
      on top of the host link's copies and CPU Adam that CPU offload already costs.
    * Parameters on NVMe: only the part of the rank's 16-bit partition ``partition`` beyond
      :data:`NVME_PARAMS_IN_CPU` stays there; every fetch of it (forward and backward of each micro-batch, and the
      recomputed forward with full recompute) reads its 16-bit values and each step writes them back once.

    Counted whole, not hidden behind the kernels (DeepSpeed's prefetch of NVMe parameters overlaps some of the
    reads)."""
    read_bps = x.nvme_read_gb_per_s * 1e9 / ranks_per_node
    write_bps = x.nvme_write_gb_per_s * 1e9 / ranks_per_node
    opt = where(x.nvme_optimizer > 0, shard * (NVME_OPTIMIZER_READ_BYTES / read_bps
                                               + NVME_OPTIMIZER_WRITE_BYTES / write_bps), 0.0)
    on_nvme = maximum(partition - NVME_PARAMS_IN_CPU, 0.0) * x.bytes_per_value
    fetches = x.num_microbatches * (2 + (x.recompute == 2))
    par = where(x.nvme_params > 0, on_nvme * (fetches / read_bps + 1 / write_bps), 0.0)
    return opt + par


def pipeline_terms(x: StepInputs, comp: dict, comm: dict) -> dict:
    """Forward and backward seconds of one micro-batch on the slowest stage (compute, the recomputed forward inside
    the backward, and the tensor/context-parallel communication of each pass) and the ``bubble``: the slowest
    stage's idle time in a schedule of the stages as they are (:func:`workbench.schedule.bubble_seconds`; with
    equal stages (p−1)/(v·m) of the ideal time, bubble_fraction × m × (forward + backward))."""
    fwd = (comp["stage_forward_seconds"] + comm["tp_forward_microbatch_seconds"]
           + comm["cp_forward_microbatch_seconds"] + comm["ep_forward_microbatch_seconds"])
    bwd = (comp["stage_backward_seconds"] + comp["recompute_microbatch_seconds"]
           + comm["tp_backward_microbatch_seconds"] + comm["cp_backward_microbatch_seconds"]
           + comm["ep_backward_microbatch_seconds"])
    m = x.num_microbatches
    # one layer's share of a micro-batch on a stage, its tensor/context-parallel communication included, so a stage
    # of n layers takes n × that (+ the output layer and loss on the last): what the pipeline view draws per stage
    n = comp["stage_layers"]
    per_layer_fwd = comp["layer_forward_seconds"] + (comm["tp_forward_microbatch_seconds"]
                                                      + comm["cp_forward_microbatch_seconds"]
                                                      + comm["ep_forward_microbatch_seconds"]) / n
    per_layer_bwd = (comp["layer_backward_seconds"] + comp["recompute_layer_seconds"]
                     + (comm["tp_backward_microbatch_seconds"] + comm["cp_backward_microbatch_seconds"]
                        + comm["ep_backward_microbatch_seconds"]) / n)
    # the schedule over the stages as they are: an uneven split, or the output layer and loss on the last stage,
    # idles less than (p−1) × the slowest stage (:func:`workbench.schedule.bubble_seconds`)
    first, middle, last = _stage_pairs(x, comp, per_layer_fwd, per_layer_bwd)
    return {"microbatch_forward_seconds": fwd, "microbatch_backward_seconds": bwd,
            "layer_microbatch_forward_seconds": per_layer_fwd, "layer_microbatch_backward_seconds": per_layer_bwd,
            "bubble": bubble_seconds(x.pipeline_parallel, m, x.virtual_pipeline, first, middle, last)}


def _stage_pairs(x: StepInputs, comp: dict, per_layer_fwd, per_layer_bwd) -> tuple:
    """``(first, middle, last)`` (forward, backward) of one micro-batch on stage 0, a middle stage and the last, as
    :func:`stage_microbatch_seconds` prices each stage for the pipeline view: its layers × the slowest stage's layer
    (communication and recompute included), less the FP8 gain of the layers it runs in bf16 beyond that stage's
    share, and the output layer and loss on the last."""
    p, L = x.pipeline_parallel, x.num_layers
    counts = [L / p if n is None else n for n in (x.first_stage_layers, x.middle_stage_layers, x.last_stage_layers)]
    share = comp["fp8_stage_share"]
    gain_f, gain_b = comp["fp8_layer_forward_gain_seconds"], comp["fp8_layer_backward_gain_seconds"]
    pairs = []
    for n, own, out in zip(counts, fp8_stage_shares(x), (False, False, True)):
        more = where(asarray(share) > 0, n * (share - own), 0.0)  # layers in bf16 beyond the slowest stage's
        pairs.append((n * per_layer_fwd + more * gain_f + (comp["output_forward_seconds"] if out else 0.0),
                      n * per_layer_bwd + more * gain_b + (comp["output_backward_seconds"] if out else 0.0)))
    return tuple(pairs)


MASKED_SDPA_SLOWDOWN = 1.68
"""How much longer cuDNN's fused attention takes per FLOP with an explicit mask than causal without one (sdpa with a
b·1·s·s bias, ``is_causal=False``): the masked call over twice the causal call's time, forward plus backward, 1.51 /
1.68 / 1.97 for StarCoder2 7B's (s 4 k), Mistral 7B's (8 k) and Gemma 3 4B's (8 k, head 256) attention on an H100,
the median taken (``benchmarks/gpu_sdpa.py --masked``, ``results/sdpa_masked_h100.txt``; the kernel reads the bias
besides its doubled work). Applied where the fused kernel's catalog rate prices attention."""


def executed_causal_share(x: StepInputs):
    """The share of layers whose attention kernel skips the masked upper half of the scores: the causal flash
    layers (``causal_attention``) less those that get an explicit mask (``masked_attention_share``, a transformers
    sliding-window layer from its window on: sdpa with ``is_causal=False`` computes the whole s×s)."""
    return x.causal_attention * (1 - x.masked_attention_share)


def _flops(x: StepInputs, comp: dict) -> dict:
    """Model and hardware FLOPs of the whole job per step, and the FLOP-weighted efficiency of the layer GEMMs."""
    h, q, kv, f, s = x.hidden_size, x.query_projection_size, x.kv_projection_size, x.ffn_hidden_size, x.seq_length
    L, t = x.num_layers, x.tensor_parallel
    layer_gemm = layer_gemm_flops_per_token(hidden_size=h, query_projection_size=q, kv_projection_size=kv,
                                            ffn_hidden_size=f, gated=x.gated, experts_per_token=x.experts_per_token)
    core = attention_core_flops_per_token(seq_length=s, query_projection_size=q, causal=x.causal_attention)
    step_tokens = x.micro_batch_size * x.num_microbatches * x.data_parallel * s
    # what the kernels execute (model FLOPs stay causal)
    core_run = attention_core_flops_per_token(seq_length=s, query_projection_size=q, causal=executed_causal_share(x))
    logits = logits_flops_per_token(hidden_size=h, vocab_size=x.vocab_size)
    # frozen weights (LoRA) need no weight-gradient GEMMs: 2 + trainable_fraction of the 3 weight passes remain
    model_f, run_f = (model_flops_per_step(tokens=step_tokens, num_layers=L, layer_gemm_per_token=layer_gemm,
                                           attention_core_per_token=c, logits_per_token=logits)
                      * (2 + x.trainable_fraction) / 3 for c in (core, core_run))
    extra_f = recompute_flops_per_step(tokens=step_tokens, num_layers=L, layer_gemm_per_token=layer_gemm,
                                       attention_core_per_token=core_run, recompute=x.recompute,
                                       recomputed_layers=L * x.recompute_fraction)
    tokens = x.micro_batch_size * s / x.context_parallel
    fc1_width = f * (1 + x.gated)
    weight_flops = 2 * tokens * (h * (q + 2 * kv) + q * h + x.experts_per_token * h * (fc1_width + f)) / t
    t_weights_fwd = comp["layer_weight_gemm_seconds"]
    # relative to the peak the layer GEMMs run at (FP8 layers: the FP8 peak)
    fp8 = comp["fp8_stage_share"]
    gemm_peak = where(fp8 > 0, (1 - fp8) * x.peak_flops + fp8 * x.fp8_peak_flops, x.peak_flops)
    return {"model_flops": model_f, "hardware_flops": run_f + extra_f,
            "gemm_efficiency": weight_flops / (t_weights_fwd * gemm_peak)}


# ---------------------------------------------------------------------------------------------------------------
# Spec level
# ---------------------------------------------------------------------------------------------------------------
def time_inputs(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, overlap_comm: bool | None = None,
                bucket_elements: float | None = None, profile=None, counts=None) -> dict:
    """The plain-number keyword arguments of :func:`step_time_terms` for one (model, cluster, plan), through the
    one plan encoder (:func:`workbench.encode.time_inputs`, which the planner uses for its arrays too).
    ``overlap_comm`` ``None``: the plan's own answer (:attr:`ParallelPlan.overlaps_comm`).
    A measured ``profile`` (:class:`workbench.calibrate.HardwareProfile`) replaces the datasheet-derived inputs it
    measured (GEMM curve, memory bandwidth, links, host link, CPU Adam rate)."""
    from workbench import encode

    if overlap_comm is not None:
        plan = plan.replace(overlap_comm=bool(overlap_comm))
    return encode.time_inputs(model, cluster, encode.plan_columns(plan, model), plan.precision, profile=profile,
                              bucket_elements=bucket_elements, counts=counts)


ZERO3_PERSISTENCE_THRESHOLD = defaults.DEEPSPEED_PERSISTENCE_THRESHOLD
"""DeepSpeed's default ``stage3_param_persistence_threshold``: a parameter of at most this many elements is marked
persistent (``ds_persist``; deepspeed/runtime/zero/parameter_offload.py ``mark_persistent_parameters``:
``param.ds_numel <= param_threshold``), stays gathered on every rank and is never fetched. A plan may set its own
(:attr:`workbench.specs.ParallelPlan.param_persistence_threshold`)."""


def _fetched(*numels, threshold=ZERO3_PERSISTENCE_THRESHOLD) -> int:
    """1 when a module whose direct parameters have these element counts is fetched by ZeRO-3 (one of them is above
    the persistence ``threshold``), else 0."""
    return int(max(numels) > threshold)


def zero3_modules_per_layer(model: ModelSpec, threshold=ZERO3_PERSISTENCE_THRESHOLD) -> int:
    """Submodules of one transformer layer whose parameters ZeRO-3 partitions and fetches separately (DeepSpeed's
    per-module pre-forward / pre-backward hooks fetch a module's own parameters; parameters of at most
    :data:`ZERO3_PERSISTENCE_THRESHOLD` elements stay persistent: norms, biases, Q/K norms, small routers).

    megatron-core (local spec): the QKV and output projections and the two MLP linears; MoE: the router and two
    linears per expert (``SequentialMLP``) instead of the MLP's two.

    Hugging Face transformers 5 (the modules ``AutoModelForCausalLM.from_config`` builds; tests/test_hf_moe.py counts
    them on the meta device): GPT-2 (``c_attn``, ``c_proj``, ``c_fc``, ``c_proj``) and GPT-NeoX
    (``query_key_value``, ``dense``, ``dense_h_to_4h``, ``dense_4h_to_h``) fuse Q, K and V — four modules;
    StarCoder2 (``separate_qkv``: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``c_fc``, ``c_proj``) six; the
    RMSNorm families (Llama, Mistral, Qwen2/3, Gemma 1-3) have ``q_proj``, ``k_proj``,
    ``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``, seven. Their MoE layers (Mixtral, Qwen2-MoE,
    Qwen3-MoE) keep all experts in ONE module with fused 3-D weights ``gate_up_proj`` [E, 2f, h] and ``down_proj``
    [E, h, f] (``MixtralExperts``; transformers/models/mixtral/modeling_mixtral.py), one fetch whatever E is; the
    router (``*TopKRouter``, [E, h]) is fetched only above the threshold; Qwen2-MoE's shared expert adds its three
    linears and its h→1 ``shared_expert_gate``. Phi-3 (``fused_projections``: ``qkv_proj``, ``o_proj``,
    ``gate_up_proj``, ``down_proj``) has four. ``threshold``: ``stage3_param_persistence_threshold``."""
    from workbench.specs import Implementation

    def fetched(*numels):
        return _fetched(*numels, threshold=threshold)

    h, q, kv = model.hidden_size, model.query_projection_size, model.kv_projection_size
    if model.implementation is not Implementation.TRANSFORMERS:
        mlp = 1 + 2 * model.num_experts if model.is_moe else 2
        return 2 + mlp
    if hf_gpt_layer(model):  # GPT-2, GPT-NeoX: fused QKV, two-matrix MLP
        return fetched(h * (q + 2 * kv)) + fetched(q * h) + 2 * fetched(h * model.ffn_hidden_size)
    if model.fused_projections:  # Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj
        f = model.ffn_hidden_size
        return fetched(h * (q + 2 * kv)) + fetched(q * h) + fetched(2 * f * h) + fetched(f * h)
    attention = 2 * fetched(h * q) + 2 * fetched(h * kv) + sum(fetched(w) for w in qk_norm_widths(model))
    if not model.is_moe:
        return attention + (2 + model.is_gated) * fetched(h * model.ffn_hidden_size)
    e, f = model.num_experts, model.moe_ffn_hidden_size
    mlp = fetched(e * h * (1 + model.is_gated) * f, e * h * f) + fetched(e * h)
    if model.shared_expert_ffn_hidden_size is not None:
        mlp += (2 + model.is_gated) * fetched(h * model.shared_expert_ffn_hidden_size) + fetched(h)
    return attention + mlp


def zero3_hooked_modules_per_layer(model: ModelSpec) -> int:
    """Submodules of one transformer layer (the layer itself included) on which DeepSpeed ZeRO-3 runs its hooks:
    ``DeepSpeedZeRoOffload._register_deepspeed_module`` (deepspeed/runtime/zero/parameter_offload.py) registers the
    pre- and post-forward and backward hooks on every module recursively, and each call does the coordinator's
    bookkeeping (trace, fetch of whatever is not available, prefetch, release) whether the module holds parameters or
    not; :func:`zero3_modules_per_layer` counts the ones that gather parameters.

    megatron-core local spec (``get_gpt_layer_local_spec``, counted on ``GPTModel``): the layer, input_layernorm,
    self_attention, its core_attention (with scale_mask_softmax and attention_dropout), linear_qkv, linear_proj,
    q_layernorm and k_layernorm (identity), pre_cross_attn_layernorm, cross_attention, cross_attn_bda (identity),
    pre_mlp_layernorm, mlp, linear_fc1, linear_fc2: 17; an MoE layer: the MoE layer, its router, the experts and
    their module list and three per expert (``SequentialMLP``) instead of the MLP's three.

    transformers 5 (counted on ``AutoModelForCausalLM.from_config``, tests/test_hf_moe.py): the Llama families'
    layer, self_attn, q/k/v/o_proj, mlp, gate/up/down_proj, act_fn and two norms: 13, +2 with Q/K norms (Qwen3,
    Gemma 3), +2 with sandwich norms (Gemma 2, 3); GPT-2: 13 (its attention and residual dropouts), GPT-NeoX: 12;
    their MoE layers: the block, the router, the experts module and its activation in place of the MLP's five: 12
    (+2 Q/K norms), +6 for Qwen2-MoE's shared expert (the MLP's five and its gate); Phi-3 (``fused_projections``):
    the layer, self_attn, qkv_proj, o_proj, mlp, gate_up_proj, down_proj, activation_fn, two norms and the two
    residual dropouts (``resid_attn_dropout``, ``resid_mlp_dropout``): 12."""
    from workbench.specs import Implementation, Normalization, Positions

    if model.implementation is not Implementation.TRANSFORMERS:
        return 14 + (4 + 3 * model.num_experts if model.is_moe else 3)
    if model.normalization is Normalization.LAYERNORM:
        return 13 if model.position_embedding is Positions.LEARNED else 12
    norms = 2 * model.qk_norm + 2 * model.sandwich_norm
    if model.fused_projections:
        return 12
    if not model.is_moe:
        return 13 + norms
    return 12 + norms + (6 if model.shared_expert_ffn_hidden_size is not None else 0)


LORA_CALLED_MODULES = 4
"""Modules a peft LoRA ``Linear`` calls in its forward beside itself (peft ``tuners/lora/layer.py``
``Linear.forward``): ``base_layer``, ``lora_dropout['default']`` (``Dropout``, ``Identity`` at dropout 0),
``lora_A['default']`` and ``lora_B['default']``. Its ``ModuleDict`` and ``ParameterDict`` containers (``lora_A``,
``lora_B``, ``lora_dropout``, ``lora_embedding_A/B``, ``lora_magnitude_vector``) are never called, so the hooks ZeRO-3
registers on them never fire: a Llama layer with adapters on q, k, v and o has 53 modules (13 without; counted on
the meta device, tests/test_hf_moe.py) of which 29 run."""


def zero3_lora_modules_per_layer(model: ModelSpec, rank: int, targets, threshold=ZERO3_PERSISTENCE_THRESHOLD) -> tuple:
    """ZeRO-3's extra modules per layer with LoRA adapters: ``(fetched, hooked)``. Hooked: each adapted projection's
    :data:`LORA_CALLED_MODULES` (:func:`workbench.params.lora_modules_per_layer` counts the projections); the
    wrapper keeps the projection's own place in :func:`zero3_hooked_modules_per_layer`, its ``base_layer`` the
    frozen weight that :func:`zero3_modules_per_layer` already fetches. Fetched: an adapter matrix (``lora_A``:
    r x in, ``lora_B``: out x r) above the persistence ``threshold`` (DeepSpeed's default
    :data:`ZERO3_PERSISTENCE_THRESHOLD`: a width above 6,250 at r=16) is gathered like any other weight; smaller ones
    stay persistent. (0, 0) without LoRA."""
    from workbench.params import lora_modules_per_layer, lora_target_shapes

    wrapped = lora_modules_per_layer(model, rank, targets)
    if not wrapped:
        return 0, 0
    shapes = lora_target_shapes(model)
    if hf_gpt_layer(model) or model.fused_projections:  # peft wraps a fused projection whole: one adapter for it
        h, q, kv = model.hidden_size, model.query_projection_size, model.kv_projection_size
        modules = {}
        for t in targets:
            if t in ("q", "k", "v"):  # GPT-2's c_attn, GPT-NeoX's query_key_value, Phi-3's qkv_proj
                modules["qkv"] = (h, q + 2 * kv, 1)
            elif model.fused_projections and t in ("gate", "up"):  # Phi-3's gate_up_proj
                fan_in, fan_out, copies = shapes["up"]
                modules["gate_up"] = (fan_in, 2 * fan_out, copies)
            else:
                modules[t] = shapes[t]
        modules = list(modules.values())
    else:
        modules = [shapes[t] for t in set(targets)]
    fetched = sum(copies * (_fetched(rank * fan_in, threshold=threshold)
                            + _fetched(fan_out * rank, threshold=threshold)) for fan_in, fan_out, copies in modules)
    return fetched, LORA_CALLED_MODULES * wrapped


HOST_SECONDS_INPUTS = ("layer_host_s", "hf_layer_host_s", "hf_recompute_layer_s", "hf_lora_module_host_s",
                       "moe_block_host_s", "moe_expert_host_s", "deepspeed_tensor_seconds", "zero3_fetch_latency_s",
                       "zero3_reduce_latency_s", "zero3_collective_call_s")
"""The :class:`StepInputs` that are seconds of one host CPU core's work (Python, kernel launches, DeepSpeed's and
ZeRO-3's hooks), all measured on the H200 machine's host: what a slower or faster host stretches or shrinks. The CPU
Adam step of offloaded optimizers is not among them (many threads, bound by host memory bandwidth)."""

def scale_host_seconds(inputs: dict, factor) -> dict:
    """``inputs`` (keyword arguments of :func:`step_time_terms`) with every :data:`HOST_SECONDS_INPUTS` multiplied by
    ``factor``: the step of a host that issues work ``factor`` times as slowly as the fit host."""
    return {k: (v * factor if k in HOST_SECONDS_INPUTS else v) for k, v in inputs.items()}


HOST_REFERENCE_LAUNCH_US = 8.36
"""Host microseconds per tiny CUDA launch (:func:`workbench.calibrate.measure.launch_microseconds`) on the host the
:data:`HOST_SECONDS_INPUTS` were fitted on: the median over the 30 fit-split H200 corpus runs that carry host probes
(each run's mean of its probes before and after its timed steps; ``benchmarks/bench_accuracy.py``'s HOST DISPATCH
table). A hardware profile that measured its own host's launch cost scales those inputs by the ratio
(:attr:`workbench.calibrate.profile.HardwareProfile.host_seconds_scale`)."""

HOST_SHARE_PROBE = 0.2
"""Relative change of every :data:`HOST_SECONDS_INPUTS` with which :func:`host_share` probes the step."""


def host_share(inputs: dict, step_seconds: float) -> float:
    """How much of a step follows the host's single-core speed: the step's elasticity to the host's seconds,
    ``ln(step(host × 1.2) / step) / ln 1.2`` with every :data:`HOST_SECONDS_INPUTS` stretched by
    :data:`HOST_SHARE_PROBE` — 0 when the GPU's work hides all host work, 1 when the step is host work alone.

    Why it matters: the host's speed is not steady. On the H200 machine the corpus was measured on, a fixed
    pure-Python loop took 31-68 ms and a tiny CUDA launch 6.3-11.4 µs from one moment to the next with nothing else
    running, and three host-bound configurations measured in 7-8 fresh processes each spread 25-59 % in step time
    (benchmarks/step_noise.py, results/step_noise_h200.txt); the held-out step-time error grows with this share
    (bench_accuracy.py's table by host share), so the step-time band is chosen by it
    (:func:`workbench.memory.error_band`)."""
    if not step_seconds or step_seconds <= 0:
        return 0.0
    slower = scale_host_seconds(inputs, 1 + HOST_SHARE_PROBE)
    ratio = float(step_time_terms(**slower)["step_seconds"]) / float(step_seconds)
    return float(min(1.0, max(0.0, math.log(max(ratio, 1.0)) / math.log1p(HOST_SHARE_PROBE))))


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
    """FLOP-weighted fraction of peak the layer GEMMs reach on this plan's shapes (FP8 layers: of the FP8 peak)."""
    calibration_source: str = ""
    layer_forward_seconds: float = 0.0
    """One transformer layer's forward for one micro-batch on one GPU (kernels + per-pass overhead)."""
    layer_backward_seconds: float = 0.0
    """One transformer layer's backward for one micro-batch on one GPU."""
    microbatch_forward_seconds: float = 0.0
    """Forward of one micro-batch through the slowest (last) stage: its layers, the logits and loss, and the
    tensor/context-parallel communication of the forward."""
    microbatch_backward_seconds: float = 0.0
    """Backward of one micro-batch through that stage, recomputed forward and backward communication included;
    with equal stages ``bubble`` = bubble fraction × m × (forward + backward)."""
    stage_microbatch_seconds: tuple = ()
    """``(forward, backward)`` of one micro-batch on each pipeline stage, from its own layer count (an uneven split
    gives unequal stages; the last adds the output layer and loss); the slowest is ``microbatch_*_seconds``."""
    fp8_cast_seconds: float = 0.0
    """FP8 training: seconds per step of Transformer Engine's quantize kernels (inputs and output gradients of the
    FP8 GEMMs, the weights' FP8 copies), included in ``compute``; 0 otherwise."""
    fp8_amax_seconds: float = 0.0
    """FP8 delayed scaling: seconds per step of the amax all-reduces, included in ``tp_comm``; 0 otherwise."""
    links: dict = field(default_factory=dict)
    """Collective group (``tp``, ``cp``, ``pp``, ``dp``, and ``ep`` for an MoE model) → ``{"group_size", "link",
    "gb_per_s", "latency_s"}``: the
    link each group's collectives were priced on (``link`` is ``"intra-node"`` or ``"inter-node"``)."""
    inputs: dict = field(default_factory=dict, repr=False, compare=False)
    """The :func:`step_time_terms` keyword arguments this estimate was priced with (to price a variant, change one
    and call it again)."""

    @property
    def host_share(self) -> float:
        """:func:`host_share` of this step: 0 (the GPU's work hides the host's) to 1 (the step is host work alone).
        Priced when read (one more evaluation of the time model), not with every estimate."""
        return host_share(self.inputs, self.step_seconds) if self.inputs else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def samples_per_second(self) -> float:
        return self.samples_per_step / self.step_seconds

    @property
    def model_tflops_per_gpu(self) -> float:
        return flops_per_second_per_gpu(self.model_flops_per_step, self.step_seconds, self.world_size) / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return flops_per_second_per_gpu(self.hardware_flops_per_step, self.step_seconds, self.world_size) / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOP/s per GPU over dense peak."""
        return flops_per_second_per_gpu(self.model_flops_per_step, self.step_seconds,
                                        self.world_size) / self.peak_flops_per_gpu

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: executed FLOP/s (with recompute) per GPU over dense peak."""
        return flops_per_second_per_gpu(self.hardware_flops_per_step, self.step_seconds,
                                        self.world_size) / self.peak_flops_per_gpu

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
            "layer_forward_seconds": self.layer_forward_seconds,
            "layer_backward_seconds": self.layer_backward_seconds,
            "microbatch_forward_seconds": self.microbatch_forward_seconds,
            "microbatch_backward_seconds": self.microbatch_backward_seconds,
            "stage_microbatch_seconds": [list(pair) for pair in self.stage_microbatch_seconds],
            "links": {k: dict(v) for k, v in self.links.items()},
            "fp8_cast_seconds": self.fp8_cast_seconds, "fp8_amax_seconds": self.fp8_amax_seconds,
            "host_share": self.host_share,
        }


def estimate_time(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, overlap_comm: bool | None = None,
                  bucket_elements: float | None = None, profile=None) -> TimeEstimate:
    """Step time, throughput and utilisation of ``plan`` for ``model`` on ``cluster`` (see module docstring).
    Validates the three specs together first (``ValueError`` naming fields and numbers).

    ``overlap_comm`` (DeepSpeed ``overlap_comm`` / Megatron ``overlap_grad_reduce``; ``None``: the plan's own
    answer, :attr:`ParallelPlan.overlaps_comm`) lets the data-parallel reduction hide behind backward compute;
    ``bucket_elements`` defaults to DeepSpeed's ``reduce_bucket_size`` or Megatron's DDP bucket. ``profile``: a
    measured :class:`workbench.calibrate.HardwareProfile` (see :func:`time_inputs`); ``calibration_source`` then
    names it."""
    validate(model, cluster, plan)
    inputs = time_inputs(model, cluster, plan, overlap_comm=overlap_comm, bucket_elements=bucket_elements,
                         profile=profile)
    return time_estimate_from(model, cluster, plan, inputs, profile=profile)


def time_estimate_from(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, inputs: dict, *,
                       profile=None) -> TimeEstimate:
    """The :class:`TimeEstimate` of one plan from its encoded ``inputs`` (:func:`workbench.encode.time_inputs`):
    the totals, and what the model computed on the way (per-layer and per-micro-batch seconds, the links)."""
    terms = step_time_terms(**inputs)
    t, c, d, p = plan.tensor_parallel, plan.context_parallel, plan.data_parallel, plan.pipeline_parallel

    def link(group: str, group_size: int) -> dict:
        return {"group_size": group_size, "link": "inter-node" if terms[f"{group}_crosses_nodes"] else "intra-node",
                "gb_per_s": float(terms[f"{group}_gb_per_s"]), "latency_s": float(terms[f"{group}_latency_s"])}

    links = {group: link(group, int(GROUP_SHAPES[kind](t, c, d, p)[1]))
             for group, kind in (("tp", "tp"), ("cp", "cp"), ("pp", "pp"), ("dp", "dp-cp"))}
    if model.is_moe:  # the expert-parallel group: tp_e apart in megatron-core's expert rank order
        links["ep"] = link("ep", plan.expert_parallel)
    return TimeEstimate(
        step_seconds=float(terms["step_seconds"]),
        tokens_per_step=plan.global_batch_size * model.seq_length,
        samples_per_step=plan.global_batch_size, world_size=plan.world_size,
        model_flops_per_step=float(terms["model_flops"]), hardware_flops_per_step=float(terms["hardware_flops"]),
        peak_flops_per_gpu=float(inputs["peak_flops"]),
        breakdown={k: float(terms[k]) for k in TERMS}, gemm_efficiency=float(terms["gemm_efficiency"]),
        calibration_source=(profile.applied(cluster, plan.precision)["note"] if profile is not None
                            else efficiency_curve(cluster.gpu.name).get("source", "")),
        layer_forward_seconds=float(terms["layer_forward_seconds"]),
        layer_backward_seconds=float(terms["layer_backward_seconds"]),
        microbatch_forward_seconds=float(terms["microbatch_forward_seconds"]),
        microbatch_backward_seconds=float(terms["microbatch_backward_seconds"]),
        stage_microbatch_seconds=stage_microbatch_seconds(terms, plan.stage_layers(model.num_layers),
                                                          _fp8_layers_per_stage(model, plan)),
        fp8_cast_seconds=float(terms["fp8_cast_seconds"]),
        fp8_amax_seconds=float(plan.num_microbatches * terms["fp8_amax_microbatch_seconds"]),
        links=links, inputs=dict(inputs),
    )


def _fp8_layers_per_stage(model, plan):
    """Layers running in FP8 on each pipeline stage (``None`` without FP8): all but Megatron's bf16 first/last ones,
    placed by :func:`workbench.memory.bf16_layers_on_stage`."""
    if not plan.precision.is_fp8:
        return None
    from workbench.memory import bf16_layers_on_stage

    layers = plan.stage_layers(model.num_layers)
    p = len(layers)
    split = (layers[0], layers[1] if p > 2 else layers[0], layers[-1])
    return tuple(n - float(bf16_layers_on_stage(model.num_layers, p, plan.virtual_pipeline, i,
                                                plan.fp8_bf16_first_layers, plan.fp8_bf16_last_layers, *split))
                 for i, n in enumerate(layers))


def stage_microbatch_seconds(terms: dict, layers_per_stage, fp8_layers_per_stage=None) -> tuple:
    """``((forward, backward), ...)`` per pipeline stage for one plan's :func:`step_time_terms` result: the stage's
    layers × one layer's micro-batch time, plus the output layer and loss on the last stage. An FP8 plan's layer time
    is the slowest stage's (its FP8 share); a stage with another count of FP8 layers (``fp8_layers_per_stage``:
    Megatron's bf16 first/last layers sit on the first and last stage) differs by the FP8 gain of each layer."""
    f, b = float(terms["layer_microbatch_forward_seconds"]), float(terms["layer_microbatch_backward_seconds"])
    share = float(terms.get("fp8_stage_share", 0.0))
    gain_f = float(terms.get("fp8_layer_forward_gain_seconds", 0.0))
    gain_b = float(terms.get("fp8_layer_backward_gain_seconds", 0.0))
    out = []
    for i, n in enumerate(layers_per_stage):
        last = i == len(layers_per_stage) - 1
        more = 0.0 if fp8_layers_per_stage is None else n * share - fp8_layers_per_stage[i]  # FP8 layers fewer
        out.append((n * f + more * gain_f + (float(terms["output_forward_seconds"]) if last else 0.0),
                    n * b + more * gain_b + (float(terms["output_backward_seconds"]) if last else 0.0)))
    return tuple(out)
