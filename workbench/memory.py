"""Memory model: bytes per GPU, per term, per pipeline stage, for DeepSpeed ZeRO 0-3, Megatron and the hybrid.

Every formula is a small function that works on Python numbers and on numpy arrays alike (the planner evaluates
whole grids of plans through these same functions). :func:`estimate_memory` applies them to one
(model, cluster, plan) and returns a :class:`~workbench.memory_types.MemoryEstimate`.

What is modelled is what ``torch.cuda.max_memory_allocated`` sees for megatron-core's ``GPTModel`` built with the
local layer spec, trained by DeepSpeed (``deepspeed.initialize``) or by megatron-core's DDP + optimizer, plus an
``overhead`` term for the CUDA context and the caching allocator's reserve that the allocator counter does not see.
Constants below were measured on H200 GPUs (``benchmarks/gpu_memory_calibration.py`` and its table).
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import numpy as np

from workbench import dsmoe
from workbench import params as P
from workbench.defaults import (DEEPSPEED_NVME_PARAMS_IN_CPU, DEEPSPEED_PERSISTENCE_THRESHOLD,
                               DEEPSPEED_PREFETCH_BUCKET_ELEMENTS)
from workbench.defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS as DS_REDUCE_BUCKET_ELEMENTS
from workbench.defaults import DEEPSPEED_SUB_GROUP_ELEMENTS as DS_SUB_GROUP_ELEMENTS
from workbench.defaults import DEEPSPEED_NVME_PARAM_BUFFER_ELEMENTS
from workbench.defaults import DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS as DS_ZERO3_NORM_CHUNK_ELEMENTS
from workbench.defaults import GiB
# the codes' home is the encoder
from workbench.encode import ENGINE_CODES, FP8_RECIPE_CODES, RECOMPUTE_CODES  # noqa: F401
from workbench.npscalar import any_true, asarray, maximum, minimum, ndim, where, where_item
from workbench.memory_types import MemoryEstimate, MemoryTerms, StageMemory
from workbench.schedule import in_flight_microbatches
from workbench.specs import (AdamImpl, AttentionImpl, ClusterSpec, Engine, Implementation, ModelSpec, Offload,
                             ParallelPlan, Precision, Recompute, validate)

DS_OFFLOAD_NORM_BYTES_PER_VALUE = 8
"""DeepSpeed ZeRO-1/2 with optimizer offload take each reduced gradient's L2 norm on the GPU before copying it to
the host, in fp64 where the accelerator supports it (``stage_1_and_2.py`` ``set_norm_for_param_grad_in_gpu``:
``accumulated_grad.data.to(get_norm_dtype()).norm(2)``; ``zero/utils.py`` ``get_norm_dtype`` returns
``torch.double`` on CUDA): an 8-byte copy of the gradient beside its 16-bit self, freed before the fp32 cast that
is copied to the host (4 bytes per value), so the larger of the two."""

HF_LOSS_BYTES_PER_LOGIT = 12.0
"""Bytes per logit at the loss of a transformers causal LM: saved fp32 log-softmax + fp32 gradients of the
log-probabilities and of the logits (see :func:`output_activation_bytes`)."""

# -- DeepSpeed defaults (deepspeed/runtime/zero/config.py, DeepSpeed 0.19) ---------------------------------------
DS_PREFETCH_BUCKET_ELEMENTS = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS
"""``stage3_prefetch_bucket_size`` default (elements; :data:`workbench.defaults.DEEPSPEED_PREFETCH_BUCKET_ELEMENTS`)."""
DS_NVME_OPTIMIZER_BUFFERS = 4
"""``offload_optimizer.buffer_count`` default: with the optimizer states on NVMe, DeepSpeed's swapper keeps this many
page-locked fp32 buffers, each the size of the largest optimizer sub-group (``OptimizerSwapper``'s
``SwapBufferManager(num_elems=largest_numel, count=buffer_count)``, deepspeed/runtime/swap_tensor, 0.19.8): a
sub-group's master weight, two moments and gradient are swapped in through them."""
DS_NVME_PARAM_BUFFERS = 5
DS_NVME_PARAM_BUFFER_ELEMENTS = DEEPSPEED_NVME_PARAM_BUFFER_ELEMENTS
"""``offload_param.buffer_count`` × ``buffer_size`` defaults: with the parameters on NVMe, the page-locked 16-bit
buffers parameters are swapped in through (``AsyncPartitionedParameterSwapper``)."""
DS_NVME_PARAMS_IN_CPU = DEEPSPEED_NVME_PARAMS_IN_CPU
"""``offload_param.max_in_cpu`` default (:data:`workbench.defaults.DEEPSPEED_NVME_PARAMS_IN_CPU`)."""

# -- measured constants ------------------------------------------------------------------------------------------
CUDA_CONTEXT_BYTES = int(1.66 * GiB)
"""The smallest memory outside the caching allocator measured for one training process on one GPU (CUDA context,
cuBLAS workspaces, kernels): ``total − free − memory_reserved`` after training steps, 1.66 GiB on H200 (torch 2.11,
CUDA 13). The estimate uses each engine's own median, :data:`OUTSIDE_ALLOCATOR_BYTES`."""
NCCL_BYTES_BY_ENGINE = {"deepspeed": int(6.33 * GiB), "megatron": int(5.52 * GiB)}
"""Extra memory outside the allocator per GPU once a training process has NCCL communicators (2 H200 over NVLink,
NVLS off): the median outside the allocator of the fit split's two-rank runs less the engine's one-rank median
(:data:`OUTSIDE_ALLOCATOR_BYTES`), printed by ``benchmarks/bench_accuracy.py --overheads``: DeepSpeed 12 runs
(8.23-8.51 GiB outside), megatron-core 4 runs (DDP, distributed optimizer, TP=2, PP=2: 7.84-9.03 GiB). A
two-rank process holds about the same outside the allocator with either engine; the per-engine figures differ by
the one-rank baseline. Measured with two ranks only: NCCL's buffers grow with the peers a rank connects to, so on 8
GPUs this is a lower bound."""
NCCL_BYTES = NCCL_BYTES_BY_ENGINE["deepspeed"]
ZERO0_STEP_BYTES_PER_PARAM = 8.0
"""DeepSpeed ZeRO-0 with bf16/fp16: extra bytes per parameter during the optimizer step (flattened fp32 gradients
and the up-cast temporaries of its 16-bit optimizer wrapper), measured on H200 (calibration table)."""
SOFTMAX_BYTES_PER_SCORE = 4
"""megatron-core computes the unfused softmax in fp32 (``attention_softmax_in_fp32=True``) and keeps that output."""
UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE = 16
"""Bytes per attention score alive while the unfused softmax of one layer is back-propagated (megatron-core local
spec, ``attention_softmax_in_fp32``): the fp32 softmax output kept for it (4), the fp32 gradient of the probabilities
(4, the backward of ``probs.bfloat16()``), the product ``grad * output`` that PyTorch's CUDA ``softmax_backward``
allocates before its kernel runs (4, ``aten/src/ATen/native/cuda/SoftMax.cu`` ``softmax_backward_cuda_out``) and the
gradient of the scores (4). The dropout mask and the dropped probabilities are freed by then. A CPU trace of
megatron-core's ``DotProductAttention`` (``benchmarks/trace_activations_cpu.py``: live tensor storage per op) shows
12 plus the 2-byte score buffer at that op, the CUDA temporary being the difference; the fit-split H200 runs with
full recompute (mc-h1024-gelu, mc-h3072-gqa) hold 16-18."""
DROPOUT_MASK_BYTES_PER_SCORE = 1
"""Attention dropout keeps a 1-byte boolean mask per score for backward (``torch.native_dropout``; Korthikanti et al.
count 1). Measured on H200: megatron-core runs at micro batch 4 hold 6.07 GiB more than the model without it, the
mask of 24 layers × 16 heads × 2048² × 4 is 6.0 GiB (``benchmarks/results/h200_accuracy.md``)."""
TORCH_ADAM_STEP_BYTES_PER_PARAM = 4.0
"""``torch.optim.Adam``/``AdamW`` with ``foreach`` (torch's default on CUDA; megatron-core's fallback without
Apex/Transformer Engine, DeepSpeed's ``torch_adam``) allocates ``exp_avg_sq.sqrt()`` for all parameters of a group
at once (``torch/optim/adam.py`` ``_multi_tensor_adam``): 4 bytes per fp32 master parameter during the step.
Fused Adam kernels (Apex, Transformer Engine, DeepSpeed ``FusedAdam``) work in place: 0."""

def _where(cond, a, b):
    return where_item(cond, a, b)


# -- FP8 (Transformer Engine under Megatron-LM) ----------------------------------------------------------------
FP8_ACTIVATION_BYTES = np.array([1.0, 1.0, 1.0 + 4 / 128, 1.0 + 1 / 32])
"""Bytes per FP8 value a recipe stores, scales included, by recipe code: one fp32 scale per tensor (delayed,
tensorwise: nothing per value), one fp32 scale per 1×128 tile (blockwise), one 8-bit power-of-two scale per 32
values (mxfp8). Transformer Engine ``Float8Tensor`` / ``Float8BlockwiseQTensor`` / ``MXFP8Tensor``."""
FP8_WEIGHT_COPY_BYTES = np.array([2.0, 2.0, 2.0 + 2 * 4 / (128 * 128), 2.0 * (1.0 + 1 / 32)])
"""Bytes per linear weight of the FP8 copies Transformer Engine caches between micro-batches (Megatron passes
``is_first_microbatch``): the weight quantized row-wise for the forward GEMM and column-wise (transposed) for the
data-gradient GEMM — cuBLAS FP8 GEMMs on Hopper take only the TN layout, so both orientations are kept; blockwise
adds one fp32 scale per 128×128 block in each orientation, mxfp8 one 8-bit scale per 32 values."""
FP8_AMAX_HISTORY_LEN = 1024
"""Amax history of the delayed recipe as the workbench exports it (``--fp8-amax-history-len 1024
--fp8-amax-compute-algo max``, the setting of Megatron-LM's and NeMo's FP8 examples; Megatron's own default is 1)."""


def fp8_linear_params_per_layer(m: ModelSpec, tensor_parallel, expert_parallel=1, expert_tensor_parallel=None):
    """Weights of one transformer layer's linear layers on one tensor-parallel rank — the GEMMs Transformer Engine
    runs in FP8 (QKV, attention output, fc1, fc2, every local expert's two — num_experts / expert_parallel of them,
    split over ``expert_tensor_parallel``, default t —, a shared expert's); norms, biases and the MoE router stay
    in bf16."""
    h = m.hidden_size
    qkv_out = m.query_projection_size + 2 * m.kv_projection_size
    f, experts = (m.moe_ffn_hidden_size, m.num_experts) if m.is_moe else (m.ffn_hidden_size, 1)
    fc1_out = (2 if m.is_gated else 1) * f
    shared = 0
    if m.is_moe and m.shared_expert_ffn_hidden_size:
        fs = m.shared_expert_ffn_hidden_size
        shared = h * (2 if m.is_gated else 1) * fs + fs * h
    etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
    routed = experts * (h * fc1_out + f * h)
    if m.is_moe:  # the routed experts: num_experts / e on the rank, split over the expert-tensor-parallel group
        return ((h * qkv_out + m.query_projection_size * h + shared) / tensor_parallel
                + routed / expert_parallel / etp)
    return (h * qkv_out + m.query_projection_size * h + routed + shared) / tensor_parallel


def fp8_linear_modules_per_layer(m: ModelSpec) -> int:
    """FP8 GEMM modules of one layer, each with its own scaling state: QKV, projection, and fc1/fc2 of the MLP,
    of every expert and of a shared expert."""
    experts = m.num_experts if m.is_moe else 1
    return 2 + 2 * experts + (2 if m.is_moe and m.shared_expert_ffn_hidden_size else 0)


def fp8_weight_bytes(m: ModelSpec, *, tensor_parallel, fp8_layers, recipe, param_gather, value_bytes,
                     expert_parallel=1, expert_tensor_parallel=None):
    """Bytes FP8 training adds to (or, with ``--fp8-param-gather``, takes from) a rank's weights for ``fp8_layers``
    FP8 layers on its stage.

    Without param gather the bf16 weights stay and Transformer Engine adds their cached FP8 copies
    (:data:`FP8_WEIGHT_COPY_BYTES` per linear weight). With ``--fp8-param-gather`` (TE ``fp8_model_init``) the linear
    weights exist only as FP8 tensors with their transpose (megatron-core ``fp8_utils`` creates it after each
    all-gather): the copies replace the bf16 weight, so the term is copies − v per linear weight.

    Source: Transformer Engine ``pytorch/module/linear.py`` — v1.8 casts the weight into a workspace cached under
    ``"weight"`` with ``with_transpose=torch.is_grad_enabled()`` whenever megatron-core passes ``is_first_microbatch``
    (``get_fp8_workspace``); v2.8 quantizes it with ``weight_quantizer.set_usage(rowwise=True, columnwise=...)`` and
    keeps both usages on the cached tensor (on Hopper the column-wise data is the transpose). Main of 2026-08
    (d0067d0d) is the same: ``Linear.forward`` caches under ``cache_name = "weight"`` whenever ``is_first_microbatch``
    is given, in ``self._fp8_workspaces``, which megatron-core's ``TELinear.forward`` passes unless
    ``disable_parameter_transpose_cache``. With param gather megatron-core keeps FP8 parameters as ``uint8`` in its
    parameter buffer (``param_and_grad_buffer.py``) and builds the transpose in
    ``fp8_utils.post_all_gather_processing``."""
    recipe = np.asarray(recipe, dtype=int)
    copies = FP8_WEIGHT_COPY_BYTES[recipe]
    per_param = copies - where(param_gather > 0, value_bytes, 0.0)
    return fp8_layers * fp8_linear_params_per_layer(m, tensor_parallel, expert_parallel,
                                                    expert_tensor_parallel) * per_param


def fp8_scaling_state_bytes(m: ModelSpec, *, fp8_layers, recipe):
    """Delayed scaling's state per FP8 layer: for each FP8 GEMM module Transformer Engine's ``fp8_meta`` holds an fp32
    amax history of :data:`FP8_AMAX_HISTORY_LEN` entries plus a scale and its inverse for the three forward tensors
    (input, weight, output) and the two backward ones (output gradient, input gradient). Current-scaling recipes
    keep no history (0 here; their per-block scales are in the FP8 tensors' bytes). Source: Transformer Engine
    ``pytorch/module/base.py`` (``fp8_meta["scaling_fwd"]`` / ``["scaling_bwd"]``: ``scale``, ``scale_inv`` and
    ``amax_history`` of ``amax_history_len`` rows per GEMM tensor)."""
    per_module = 5 * (FP8_AMAX_HISTORY_LEN + 2) * 4
    return where(asarray(recipe) == FP8_RECIPE_CODES["delayed"],
                    fp8_layers * fp8_linear_modules_per_layer(m) * per_module, 0.0)


def fp8_activation_delta_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                               value_bytes, recipe, expert_tensor_parallel=None, moe_token_factor=1.0,
                               moe_recompute=0):
    """How one FP8 layer's saved activations differ from the bf16 layer's (:func:`layer_activation_bytes`), for one
    micro-batch on one rank (usually negative).

    Transformer Engine saves the input of each FP8 linear for its weight-gradient GEMM as FP8 (column-wise, a
    bytes per value, :data:`FP8_ACTIVATION_BYTES`) instead of bf16: the QKV and fc1 inputs (``LayerNormLinear``
    writes the norm's output in FP8; the norm's bf16 input is still kept) and the fc2 input (the activation's output;
    the activation keeps its bf16 input). The attention output: flash attention keeps it in bf16 for its backward;
    under delayed scaling the projection keeps an FP8 copy beside it, while with any other recipe megatron-core
    makes the projection save its original input instead (``set_save_original_input(self.linear_proj)`` when
    ``fp8_recipe != 'delayed'`` and TE ≥ 2.6, megatron/core/transformer/attention.py ``Attention.__init__``, from
    core_r0.14.0 to 0.16.1: "the output of the fused core_attn is saved by itself, and linear_proj also saves the
    quantized tensor of this output ... save the original input tensors to avoid the extra memory usage"), the
    tensor flash attention already holds, so nothing is added. MoE: the experts' grouped GEMMs keep the permuted
    token copies (:func:`moe_expert_tokens`) and their fc2 inputs in FP8, while the norm's output stays bf16 (the
    router and the permutation read it).

    Source: Transformer Engine ``pytorch/module/linear.py`` — v1.8 saves ``inputmat_t`` (the FP8 transpose) or, with
    sequence parallel, the FP8 ``inputmat`` instead of the bf16 input; v2.8 drops the row-wise data of the quantized
    input (``update_usage(rowwise_usage=False, columnwise_usage=True)``) before saving it — one byte per value
    either way. ``layernorm_linear.py`` saves the bf16 ``inputmat``, ``mu``, ``rsigma`` and the FP8 ``ln_out``;
    ``layernorm_mlp.py`` (not used by megatron-core's layer spec) keeps the same: bf16 ``fc1_out``, FP8 ``act_out``.
    Main of 2026-08 (d0067d0d) is the same: without sequence parallel ``LayerNormLinear`` drops the row-wise data of
    ``ln_out`` before saving it; with sequence parallel and per-tensor scaling it quantizes ``ln_out`` row-wise only
    (FP8 column-wise data cannot be all-gathered) and saves the local shard, re-gathered in backward."""
    a = FP8_ACTIVATION_BYTES[np.asarray(recipe, dtype=int)]
    s = m.seq_length / context_parallel
    sb = s * micro_batch
    rep = where(sequence_parallel, 1.0 / tensor_parallel, 1.0)
    # the projection's FP8 copy of the attention output: delayed scaling only (see above)
    proj_copy = where(asarray(recipe) == FP8_RECIPE_CODES["delayed"], a, 0.0)
    attention = ((a - value_bytes) * sb * m.hidden_size * rep
                 + proj_copy * sb * m.query_projection_size / tensor_parallel)
    if m.is_moe:
        etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
        x = moe_expert_tokens(sb, top_k=m.moe_top_k, tensor_parallel=tensor_parallel, expert_tensor_parallel=etp,
                              token_factor=moe_token_factor)
        # selective recompute's MoE modules (``moe_recompute``): moe_act keeps no fc2 input, moe no expert input
        code = asarray(moe_recompute)
        kept_widths = where(code >= 2, 0.0, m.hidden_size + where(code == 1, 0.0, m.moe_ffn_hidden_size / etp))
        return attention + (a - value_bytes) * x * kept_widths
    return attention + (a - value_bytes) * sb * (m.hidden_size * rep + m.ffn_hidden_size / tensor_parallel)


# ================================================================================================================
# Parameters held by one rank of a pipeline stage
# ================================================================================================================
_NUMBER_TYPES = frozenset({int, float, bool, type(None), np.int64, np.float64, np.bool_})


def _memoised_on_numbers(fn):
    """``fn(model, *numbers)`` remembered per model and argument (value and type: an int and a float of the same
    value are kept apart, as their results' types may differ) when every argument after the model is a plain
    number; with an array among them ``fn`` itself runs. For pure functions of their arguments only."""
    cached = functools.lru_cache(maxsize=4096, typed=True)(fn)

    @functools.wraps(fn)
    def call(m, *args, **kwargs):
        if kwargs:
            return fn(m, *args, **kwargs)
        for a in args:
            if type(a) not in _NUMBER_TYPES:
                return fn(m, *args)
        return cached(m, *args)

    call.cache_clear = cached.cache_clear
    return call


def _per_distinct(fn, *arrays):
    """``fn(*values)`` over broadcast ``arrays``, called once per distinct tuple of values (plain Python numbers)
    rather than once per element: a planner's sweep holds few distinct TP sizes, recompute modes or data-parallel
    sizes among tens of thousands of plans."""
    cols = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in arrays))
    flat = [c.ravel() for c in cols]
    combined = np.zeros(cols[0].size, dtype=np.int64)  # each element's tuple as one code, kept below its size
    for c in flat:
        values, codes = np.unique(c, return_inverse=True)
        combined = np.unique(combined * len(values) + codes.ravel(), return_inverse=True)[1].ravel()
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    out = np.array([float(fn(*(float(c[i]) for c in flat))) for i in first.tolist()], dtype=float)
    return out[inverse.ravel()].reshape(cols[0].shape)[()]


@_memoised_on_numbers
def layer_params_per_rank(m: ModelSpec, tensor_parallel, expert_parallel=1, expert_tensor_parallel=None):
    """Parameters of one transformer layer on one tensor-parallel rank.

    Column/row-parallel weights, the QKV and fc1 biases are split by t; the norms, the row-parallel biases
    (projection, fc2) and an MoE router are replicated (megatron-core ``ColumnParallelLinear``/``RowParallelLinear``).
    MoE experts are split as :func:`expert_params_per_rank` says (expert parallel e, expert tensor parallel, by
    default t).
    """
    h, bias = m.hidden_size, m.add_bias_linear
    norm = P.norm_params(h, m.normalization) * (2 if m.sandwich_norm else 1)
    qkv_out = m.query_projection_size + 2 * m.kv_projection_size
    attn_split = h * qkv_out + m.query_projection_size * h + (qkv_out if m.qkv_bias else 0)
    head_norms = P.qk_norm_params(m)
    if m.is_moe:
        router, dense_mlp = h * m.num_experts, 0
    else:
        fc1_out = (2 if m.is_gated else 1) * m.ffn_hidden_size
        router = 0
        dense_mlp = h * fc1_out + m.ffn_hidden_size * h + (fc1_out if bias else 0)
    replicated = 2 * norm + ((h + (0 if m.is_moe else h)) if bias else 0) + router  # norms, proj/fc2 bias, router
    shared = P.shared_expert_params(m) if m.is_moe else 0  # Qwen2-MoE shared expert, split like the dense MLP
    etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
    return ((attn_split + dense_mlp + shared) / tensor_parallel + replicated + head_norms
            + expert_params_per_rank(m, expert_parallel, etp))


def expert_params_per_rank(m: ModelSpec, expert_parallel=1, expert_tensor_parallel=1):
    """Routed-expert parameters of one MoE layer on one rank (0 for a dense model): num_experts / e local experts
    (megatron-core ``MoELayer``: ``num_local_experts = num_moe_experts // ep_size``), each fc1 (h → f, 2f gated) and
    fc2 (f → h) split over the expert-tensor-parallel group, the fc2 bias replicated in it."""
    if not m.is_moe:
        return 0.0
    h, f = m.hidden_size, m.moe_ffn_hidden_size
    fc1_out = (2 if m.is_gated else 1) * f
    split = h * fc1_out + f * h + (fc1_out if m.add_bias_linear else 0)
    local = m.num_experts / expert_parallel
    return local * (split / expert_tensor_parallel + (h if m.add_bias_linear else 0))


def hf_fused_experts_tensor(m: ModelSpec) -> int:
    """Elements of a transformers MoE layer's largest expert weight: transformers 5 keeps all routed experts of a
    layer as 3-D parameters (``gate_up_proj``: experts × 2f × h for a gated MLP, ``down_proj``: experts × h × f;
    ``Qwen2MoeExperts``, ``MixtralExperts``), so one gradient, one staging copy and one fp64 norm copy span every
    expert (a Mixtral 8x7B layer's ``gate_up_proj``: 940 M elements, above DeepSpeed's 500 M bucket). 0 for
    megatron-core models (one linear per expert) and dense models."""
    if not m.is_moe or m.implementation is not Implementation.TRANSFORMERS:
        return 0
    return m.num_experts * (2 if m.is_gated else 1) * m.moe_ffn_hidden_size * m.hidden_size


@_memoised_on_numbers
def largest_module_params(m: ModelSpec, tensor_parallel=1):
    """The largest single module one rank gathers under ZeRO-3: the (vocab-parallel) embedding or an MLP linear
    (a transformers MoE layer's experts module: both fused expert weights, :func:`hf_fused_experts_tensor`)."""
    vocab = P.model_vocab_size(m, tensor_parallel)
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    fc1 = m.hidden_size * (2 if m.is_gated else 1) * f
    qkv = m.hidden_size * (m.query_projection_size + 2 * m.kv_projection_size)
    experts = hf_fused_experts_tensor(m)
    experts = experts + experts // (2 if m.is_gated else 1)
    return maximum(maximum(maximum(vocab * m.hidden_size, fc1), qkv), experts) / tensor_parallel


DS_MAX_LIVE_PARAMETERS = int(1e9)
"""``stage3_max_live_parameters`` default (elements): the ZeRO-3 prefetcher fetches ahead only while fewer are
gathered (deepspeed/runtime/zero/config.py)."""
DS_MAX_REUSE_DISTANCE = int(1e9)
"""``stage3_max_reuse_distance`` default (elements): a module's parameters stay gathered when the trace uses them
again within this many parameter elements (deepspeed/runtime/zero/config.py)."""
DS_PERSISTENCE_THRESHOLD = DEEPSPEED_PERSISTENCE_THRESHOLD
"""``stage3_param_persistence_threshold`` default: parameters of at most this many elements are never released
(:data:`workbench.defaults.DEEPSPEED_PERSISTENCE_THRESHOLD`)."""


def zero3_module_trace(m: ModelSpec, tensor_parallel=1, full_recompute=False) -> tuple:
    """``(order, numel)`` of the modules ZeRO-3 fetches in one training step, as its trace records them: each
    weight of :func:`workbench.params.weight_tensor_sizes` is one module's parameter (a linear, an embedding; norms
    and biases are persistent), the forward in registration order (embeddings, each layer, the output layer, which
    is the embedding itself when tied), then the backward in reverse, each layer re-run forward first when it is
    fully recomputed (gradient checkpointing). ``order`` is a list of ``("F"|"R"|"B", parameter id)``: forward,
    a layer's recomputed forward inside backward, backward."""
    from workbench.specs import Positions

    sizes = P.weight_tensor_sizes(m, int(tensor_parallel))
    head = 2 if m.position_embedding is Positions.LEARNED else 1
    tail = 0 if m.tied_embeddings else 1
    per = (len(sizes) - head - tail) // max(m.num_layers, 1)
    numel = {f"e{i}": sizes[i] for i in range(head)}
    layers = []
    for layer in range(m.num_layers):
        ids = []
        for k in range(per):
            n = sizes[head + layer * per + k]
            if n > DS_PERSISTENCE_THRESHOLD:
                numel[f"{layer}.{k}"] = n
                ids.append(f"{layer}.{k}")
        layers.append(ids)
    out = "e0"
    if tail:
        numel["out"] = sizes[-1]
        out = "out"
    heads = [f"e{i}" for i in range(head) if numel[f"e{i}"] > DS_PERSISTENCE_THRESHOLD]
    order = [("F", i) for i in heads + [x for ids in layers for x in ids] + [out]]
    order.append(("B", out))
    for ids in reversed(layers):
        order += [("R", x) for x in (ids if full_recompute else [])] + [("B", x) for x in reversed(ids)]
    order += [("B", i) for i in reversed(heads)]
    return order, numel


class Zero3Coordinator:
    """DeepSpeed ZeRO-3's ``PartitionedParameterCoordinator`` (deepspeed/runtime/zero/partitioned_param_coordinator.py,
    0.19) once its trace is recorded (every step after the first): which parameters each module fetch gathers and
    each module release frees. ``trace``: the module keys in the order their fetches happened over one forward and
    backward; ``params_of[key]``: the ids of that module's own parameters that are not persistent (above
    ``stage3_param_persistence_threshold``); ``numel[id]``: their elements.

    Fetching a module gathers its parameters, pops their entries off the trace's parameter queue (each popped entry
    marks its parameter as fetched for that entry's step) and prefetches the next not-yet-gathered ones up to
    ``prefetch`` elements while fewer than ``max_live`` are gathered (popping and marking every entry it passes). A
    module's parameters are released after it runs unless an entry marks them for a later step or the trace uses
    them again within ``max_reuse`` elements: parameters that backward uses again are therefore mostly kept
    through the forward."""

    def __init__(self, trace: list, params_of: dict, numel: dict, *, max_live=DS_MAX_LIVE_PARAMETERS,
                 prefetch=DS_PREFETCH_BUCKET_ELEMENTS, max_reuse=DS_MAX_REUSE_DISTANCE):
        import collections

        self.trace, self.params_of, self.numel = list(trace), params_of, numel
        self.max_live, self.prefetch, self.max_reuse = max_live, prefetch, max_reuse
        self._entries = collections.deque((pid, step) for step, key in enumerate(self.trace)
                                          for pid in sorted(params_of[key]))
        self._marked = collections.defaultdict(lambda: -1)
        self.gathered, self.live, self.step = set(), 0.0, 0

    def fetch(self, key) -> list:
        """The ids gathered by this fetch of module ``key`` (its own not yet gathered, then the prefetched)."""
        own = sorted(self.params_of[key])
        new = [pid for pid in own if pid not in self.gathered]
        waiting = [pid for pid in own if self._marked[pid] < self.step]
        for _ in waiting:  # their own entries, unless a prefetch already popped them
            if self._entries:
                pid, at = self._entries.popleft()
                self._marked[pid] = at
        budget, fetched, queued = min(self.max_live - (self.live + sum(self.numel[p] for p in new)), self.prefetch), \
            0.0, []
        while self._entries and fetched < budget:
            pid, at = self._entries.popleft()
            self._marked[pid] = max(self._marked[pid], at)
            if pid not in self.gathered and pid not in new and pid not in queued:
                queued.append(pid)
                fetched += self.numel[pid]
        for pid in new + queued:
            self.gathered.add(pid)
            self.live += self.numel[pid]
        self.step += 1
        return new + queued

    def copy(self) -> "Zero3Coordinator":
        """A coordinator that goes on from this one's state without changing it (the trace, the modules' parameters
        and their sizes, which no step changes, are shared)."""
        import collections

        other = copy.copy(self)
        other._entries = collections.deque(self._entries)
        other._marked = collections.defaultdict(lambda: -1, self._marked)
        other.gathered = set(self.gathered)
        return other

    def release(self, key) -> list:
        """The ids freed after module ``key`` ran."""
        candidates = [pid for pid in sorted(self.params_of[key]) if self._marked[pid] <= self.step]
        if not candidates:  # a container, or every parameter marked for a later step: nothing to look ahead for
            return []
        reused, seen = set(), 0.0
        for at in range(self.step, len(self.trace)):  # not a slice: a copy of the rest at every release
            if seen >= self.max_reuse:
                break
            for pid in self.params_of[self.trace[at]]:
                reused.add(pid)
                seen += self.numel[pid]
        freed = [pid for pid in candidates if pid not in reused and pid in self.gathered]
        for pid in freed:
            self.gathered.discard(pid)
            self.live -= self.numel[pid]
        return freed


def zero3_gathered_walk(order: list, numel: dict, **limits) -> dict:
    """Elements of gathered parameters on one rank over a training step once ZeRO-3 has recorded its trace
    (:class:`Zero3Coordinator` over ``order``, a list of ``("F"|"R"|"B", parameter id)`` module fetches of one
    parameter each, :func:`zero3_module_trace`): ``at_backward``, when backward starts (the output layer fetched
    for its backward), ``peak``, the most at any module, and ``after_backward_fetch``, each module's elements just
    after its last backward fetch. TinyLlama's 1.1 B parameters at 22 layers (2.05 GiB in
    bf16) under DeepSpeed 0.19.8 with offload_param on H200: the allocator history's gathered copies peak at 1.927
    GiB, as this walk's ``peak`` (1.927 GiB; benchmarks/results/alloc_history/poff/).

    ``after_first_backward``: once the first back-propagated module (the output layer) is released and the next
    two fetches (the model's container, the final norm) have prefetched, before any layer's backward. ``aliased_after_backward_fetch``: at the moments of ``after_backward_fetch``, the elements of
    released parameters whose blocks a
    layer's recomputed forward (``"R"``) still holds for their backward (where the checkpointing keeps them:
    :func:`recompute_keeps_released_weights`)."""
    keys = [pid for _, pid in order]
    coordinator = Zero3Coordinator(keys, {pid: (pid,) for pid in keys}, numel, **limits)
    peak, at_backward = 0.0, None
    after_backward_fetch, aliased_after = {}, {}
    aliased = {}  # parameter id -> elements of the block its recompute's saved alias keeps
    after_first_backward = None
    for phase, pid in order:
        coordinator.fetch(pid)
        peak = max(peak, coordinator.live)
        if phase == "B":
            if at_backward is None:
                at_backward = coordinator.live
            after_backward_fetch[pid] = coordinator.live  # each module's last backward fetch is kept
            aliased_after[pid] = sum(aliased.values())
        freed = coordinator.release(pid)
        if phase == "B" and after_first_backward is None:
            # the modules fetched next are the model's container and its final norm (parameters persistent): two
            # fetches that gather nothing of their own and each prefetch ahead, before the norm's gradient hook
            ahead = coordinator.copy()
            ahead.params_of = dict(coordinator.params_of, **{"": ()})
            for _ in range(2):
                ahead.fetch("")
            after_first_backward = ahead.live
        if phase == "R":
            aliased.update((q, numel[q]) for q in freed)
        elif phase == "B":
            aliased.pop(pid, None)  # its backward has run: the saved alias is dropped
    return {"at_backward": at_backward or 0.0, "peak": peak, "after_backward_fetch": after_backward_fetch,
            "aliased_after_backward_fetch": aliased_after, "after_first_backward": after_first_backward or 0.0}


@_memoised_on_numbers
def _zero3_model_walk(m: ModelSpec, tensor_parallel: int, full_recompute: bool,
                      prefetch: int = DS_PREFETCH_BUCKET_ELEMENTS) -> dict:
    """:func:`zero3_gathered_walk` over the model's :func:`zero3_module_trace` with ``stage3_prefetch_bucket_size``
    ``prefetch``, once per model and arguments."""
    return zero3_gathered_walk(*zero3_module_trace(m, tensor_parallel, full_recompute), prefetch=prefetch)


@_memoised_on_numbers
def zero3_gathered_elements(m: ModelSpec, tensor_parallel=1, full_recompute=0, prefetch=DS_PREFETCH_BUCKET_ELEMENTS):
    """Elements of gathered 16-bit parameters one ZeRO-3 rank holds when backward starts, where it gathers at all
    (more than one rank in the partition, or parameters offloaded): :func:`zero3_gathered_walk` over
    :func:`zero3_module_trace`. A sweep of ``tensor_parallel`` or ``full_recompute`` takes each distinct value
    once."""
    if ndim(tensor_parallel) or ndim(full_recompute) or ndim(prefetch):
        return _per_distinct(lambda t, r, f: zero3_gathered_elements(m, int(t), int(r), int(f)), tensor_parallel,
                             full_recompute, prefetch)
    return float(_zero3_model_walk(m, int(tensor_parallel), bool(full_recompute), int(prefetch))["at_backward"])


def recompute_keeps_released_weights(m: ModelSpec) -> bool:
    """Whether a fully recomputed layer keeps, until their backward, the blocks of the ZeRO-3 parameters that its
    recomputed forward used and the coordinator then released. transformers' gradient checkpointing as the
    workbench and its corpus run it (``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant":
    False})``) recomputes under ``torch.utils.checkpoint``'s saved-tensor hooks, which store each saved tensor as
    ``x.detach()``: a second tensor on the gathered block, so DeepSpeed's ``free_param`` (``param.data =
    torch.empty(0)``) leaves the block alive until the weight's backward unpacks it, and a parameter the coordinator
    gathers again meanwhile has two blocks. megatron-core's ``tensor_parallel.checkpoint`` recomputes with autograd
    saving the parameter itself, whose block the release frees. (Mistral Large 2's width at 1 layer, both offloads,
    checkpointed, micro-batch 2, replayed: q/k/v/o_proj and a second gate_proj block, 1.27 GiB, alive beside the
    coordinator's three MLP weights when down_proj's gradient is handed to the host; the run measured 10.27 GiB
    allocated, the estimate without them 9.02.)"""
    return m.implementation is Implementation.TRANSFORMERS


@_memoised_on_numbers
def zero3_layer_backward_gathered(m: ModelSpec, tensor_parallel=1, full_recompute=0, aliases=1,
                                  prefetch=DS_PREFETCH_BUCKET_ELEMENTS) -> tuple:
    """Elements of gathered parameters when each layer's backward starts, last layer first: the coordinator's walk
    (:class:`Zero3Coordinator` over :func:`zero3_module_trace`) just after it fetches the layer's first
    back-propagated module (its last forward one; under full recompute that module's second fetch in backward,
    after the layer's recompute), the output layer's and the later layers' parameters released by then. A
    reduction that fires in a layer's first gradient hook runs beside these, not beside the larger set of
    :func:`zero3_gathered_elements` (the output layer still gathered): on Qwen3 8B's width at 12 layers with
    offload_param, 0.81 GiB against the allocator replay's 0.91 when the 1.16 GiB output layer's gradient is handed
    to the host, where the backward's start holds 1.88. Under full recompute of a model whose checkpointing keeps
    released weights (:func:`recompute_keeps_released_weights`) the blocks the layer's recompute still holds are
    counted too (``aliases=0``: not, for a moment before the layer's recompute)."""
    walk = _zero3_model_walk(m, int(tensor_parallel), bool(full_recompute), int(prefetch))
    after_backward_fetch = walk["after_backward_fetch"]
    keeps = aliases and full_recompute and recompute_keeps_released_weights(m)
    aliased = walk["aliased_after_backward_fetch"] if keeps else {}
    last_module = {}
    for pid in after_backward_fetch:
        if "." in pid:
            layer, k = (int(x) for x in pid.split("."))
            last_module[layer] = max(last_module.get(layer, k), k)
    return tuple(after_backward_fetch[f"{layer}.{k}"] + aliased.get(f"{layer}.{k}", 0.0)
                 for layer, k in sorted(last_module.items(), reverse=True))


def zero3_layer_backward_gathered_bytes(m: ModelSpec, *, tensor_parallel, value_bytes, layers_done, data_parallel=None,
                                        offload_params=0, recompute=0, aliases=1,
                                        prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS):
    """16-bit bytes a ZeRO-3 rank holds gathered when the layer ``layers_done`` layers before the last starts its
    backward (:func:`zero3_layer_backward_gathered`; ``aliases`` 0 leaves out the released blocks a recomputed
    layer still holds; ``layers_done`` −1: once the output layer's backward has released it, before any layer's,
    the walk's ``after_first_backward``), at least one layer's largest weight with a prefetch bucket; 0 where
    nothing is gathered (one rank without offloaded parameters, as :func:`zero3_gathered_bytes`). Arrays
    allowed."""
    def at(tp, full, done, keep, pf):  # one walk per distinct (TP, recompute, prefetch), remembered
        if done < 0:
            return _zero3_model_walk(m, int(tp), bool(full), int(pf))["after_first_backward"]
        seq = zero3_layer_backward_gathered(m, int(tp), bool(full), int(keep), int(pf)) or (0.0,)
        return seq[min(max(int(done), 0), len(seq) - 1)]

    walk = _per_distinct(at, tensor_parallel, asarray(recompute) >= RECOMPUTE_CODES[Recompute.FULL], layers_done,
                         asarray(aliases) > 0, prefetch_bucket_elements)
    big = largest_layer_param_tensor(m, tensor_parallel)
    live = maximum(walk, big + minimum(prefetch_bucket_elements, big))
    return where(_zero3_gathers(data_parallel, offload_params), value_bytes * live, 0.0)


@_memoised_on_numbers
def largest_layer_param_tensor(m: ModelSpec, tensor_parallel=1):
    """Elements of a transformer layer's biggest weight on one rank — megatron-core fuses QKV and the gated MLP's
    fc1 into one tensor each; transformers models keep q/k/v and gate/up apart (Phi-3 fuses them as megatron-core
    does, ``fused_projections``: ``qkv_proj``, ``gate_up_proj``), but fuse a MoE layer's experts
    (:func:`hf_fused_experts_tensor`)."""
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    if m.implementation is Implementation.TRANSFORMERS and not m.fused_projections:
        layer = max(m.hidden_size * f, m.hidden_size * m.query_projection_size, hf_fused_experts_tensor(m))
        if m.is_moe and m.shared_expert_ffn_hidden_size:
            layer = max(layer, m.hidden_size * m.shared_expert_ffn_hidden_size)
    else:
        layer = max(m.hidden_size * (2 if m.is_gated else 1) * f,
                    m.hidden_size * (m.query_projection_size + 2 * m.kv_projection_size))
    return layer / tensor_parallel


def embedding_elements(m: ModelSpec, tensor_parallel=1):
    """Elements of the (vocab-parallel, padded) word embedding on one tensor-parallel rank; an untied output layer
    has as many (arrays allowed)."""
    return P.model_vocab_size(m, tensor_parallel) * m.hidden_size / tensor_parallel


@_memoised_on_numbers
def largest_param_tensor(m: ModelSpec, tensor_parallel=1):
    """Elements of the largest single parameter tensor on one rank: the (vocab-parallel) embedding or output
    weight, or a layer's biggest weight (:func:`largest_layer_param_tensor`)."""
    return maximum(embedding_elements(m, tensor_parallel), largest_layer_param_tensor(m, tensor_parallel))


def layers_on_stage(m: ModelSpec, pipeline_parallel, stage, first_stage_layers=None, middle_stage_layers=None,
                    last_stage_layers=None):
    """Transformer layers pipeline stage ``stage`` builds: the first, middle and last stage counts of an uneven
    split (:func:`workbench.encode.stage_layer_columns`, megatron-core's ``get_num_layers_to_build``), or
    num_layers / p when they are not given."""
    even = m.num_layers / pipeline_parallel
    if first_stage_layers is None:
        return even
    return where(stage == 0, first_stage_layers,
                    where(stage == pipeline_parallel - 1, last_stage_layers, middle_stage_layers))


def bf16_layers_on_stage(num_layers, pipeline_parallel, virtual_pipeline, stage, bf16_first, bf16_last,
                         first_stage_layers=None, middle_stage_layers=None, last_stage_layers=None):
    """How many of Megatron's bf16 layers of an FP8 run (``--first-last-layers-bf16`` with
    ``--num-layers-at-start-in-bf16 F`` / ``--num-layers-at-end-in-bf16 B``) pipeline stage ``stage`` builds.

    megatron-core (``fp8_utils.is_first_last_bf16_layer``, 0.16 and 0.19) tests the *global* layer number: layers
    [0, F) and [L − B, L) run without the FP8 context. Layers are numbered as megatron-core's
    ``get_transformer_layer_offset`` assigns them: virtual chunk j of stage s (v chunks per stage, interleaved
    schedule) starts at j·L/v + Σ_{s'<s} n_{s'}/v, with n_s the stage's layers (:func:`layers_on_stage`; uneven
    splits included). Without interleaving the F layers sit on the first stage and the B on the last (spilling to
    the next stage only when a stage has fewer layers than F or B). Every argument may be a numpy array."""
    if ndim(bf16_first) == 0 and ndim(bf16_last) == 0 and not bf16_first and not bf16_last:
        return 0.0  # no bf16 layers (every plan without FP8): skip the per-chunk arithmetic
    L, p = num_layers, asarray(pipeline_parallel)
    v = maximum(asarray(virtual_pipeline), 1)
    stage = asarray(stage)
    if first_stage_layers is None:
        n = L / p
        before = stage * n
    else:
        n = where(stage == 0, first_stage_layers,
                     where(stage == p - 1, last_stage_layers, middle_stage_layers))
        before = where(stage == 0, 0, first_stage_layers + maximum(stage - 1, 0) * middle_stage_layers)
    total = 0.0
    for j in range(int(np.max(v))):
        start = j * L / v + before / v
        size = n / v
        end = start + size
        head = np.clip(minimum(end, bf16_first) - start, 0, size)
        tail = np.clip(end - maximum(start, L - asarray(bf16_last)), 0, size)
        total = total + where(j < v, head + tail, 0.0)
    return total


@_memoised_on_numbers
def stage_params_per_rank(m: ModelSpec, tensor_parallel, pipeline_parallel, stage, layers_in_stage=None,
                          expert_parallel=1, expert_tensor_parallel=None):
    """Parameters one rank of pipeline stage ``stage`` holds (``layers_in_stage`` transformer layers, default
    num_layers / p; embedding on the first stage; output layer, or the tied embedding copy Megatron keeps when
    p > 1, and the final norm on the last); MoE experts split over ``expert_parallel`` × ``expert_tensor_parallel``
    (default t)."""
    vocab = P.model_vocab_size(m, tensor_parallel)
    if layers_in_stage is None:
        layers_in_stage = m.num_layers / pipeline_parallel
    layers = layers_in_stage * layer_params_per_rank(m, tensor_parallel, expert_parallel, expert_tensor_parallel)
    positions = m.position_table_size * m.hidden_size
    embedding = vocab * m.hidden_size / tensor_parallel + positions
    first = stage == 0
    last = stage == pipeline_parallel - 1
    output_copy = where(m.tied_embeddings, where(pipeline_parallel > 1, 1, 0), 1)
    output = output_copy * vocab * m.hidden_size / tensor_parallel
    final_norm = P.norm_params(m.hidden_size, m.normalization)
    return layers + where(first, embedding, 0) + where(last, output + final_norm, 0)


# ================================================================================================================
# Model states: weights, gradients, optimizer (bytes per parameter)
# ================================================================================================================
def zero3_sub_groups(numels: list, sub_group_elements: int = DS_SUB_GROUP_ELEMENTS) -> list:
    """The element counts of DeepSpeed ZeRO-3's optimizer sub-groups for parameters of ``numels`` (in group order):
    ``_create_fp16_sub_groups`` closes a sub-group once it reaches ``sub_group_elements`` or at the last
    parameter; one sub-group when the whole group is no larger."""
    if sum(numels) <= sub_group_elements:
        return [sum(numels)] if numels else []
    out, run = [], 0
    for i, n in enumerate(numels):
        run += n
        if run >= sub_group_elements or i == len(numels) - 1:
            out.append(run)
            run = 0
    return out


@_memoised_on_numbers
def zero3_largest_sub_group(m: ModelSpec, tensor_parallel=1, data_parallel=1, sub_group_elements=DS_SUB_GROUP_ELEMENTS):
    """Elements of DeepSpeed ZeRO-3's largest optimizer sub-group on one rank (:func:`zero3_sub_groups` over the
    rank's partition of each weight, :func:`workbench.params.weight_tensor_sizes`, at ``sub_group_size``
    ``sub_group_elements``): what its optimizer step flattens and casts at once. A sub-group closes at the first
    weight that takes it to ``sub_group_size`` or beyond, so it can pass the size by most of a weight (Llama 3 70B's
    width at 2 layers: the second layer's rest with the output layer, 1.9 G elements)."""
    if ndim(tensor_parallel) or ndim(data_parallel) or ndim(sub_group_elements):  # a sweep: each distinct set once
        return _per_distinct(lambda t, d, s: zero3_largest_sub_group(m, int(t), int(d), int(s)), tensor_parallel,
                             data_parallel, sub_group_elements)
    sizes = [e / data_parallel for e in P.weight_tensor_sizes(m, int(tensor_parallel))]
    return float(max(zero3_sub_groups(sizes, int(sub_group_elements)), default=0.0))


def model_state_bytes(n_params, *, engine, zero_stage, data_parallel, param_bytes, fp16=0, offload_optimizer=0,
                      offload_params=0, distributed_optimizer=0, fp32_grad_partition=1, fused_kernels=1,
                      main_grad_fp32=None, sub_group_elements=DS_SUB_GROUP_ELEMENTS, overlap_comm=0):
    """(weights, gradients, optimizer, host, step) bytes for ``n_params`` parameters on one rank; ``step`` is what
    exists only during the optimizer step (when activations are already freed).

    Step temporaries with torch's foreach Adam (``fused_kernels=0``): :data:`TORCH_ADAM_STEP_BYTES_PER_PARAM` per
    parameter of Megatron's optimizer shard (DeepSpeed frees more than that before its optimizer runs).

    Mixed precision with Adam, ψ = n_params, N = data_parallel, v = bytes per parameter (2 for bf16/fp16, 4 fp32):

    * DeepSpeed (ZeRO paper, Rajbhandari et al. 2020, §3 and Fig. 1; DeepSpeed's own estimators
      ``estimate_zero2/3_model_states_mem_needs``): 16-bit weights 2ψ and gradients 2ψ, fp32 master 4ψ + Adam
      moments 8ψ, plus the fp32 gradient partition DeepSpeed's ZeRO optimizer builds for the step (4ψ/N, counted
      since DeepSpeed PR #5099: "2ψ + 18ψ/N" for ZeRO-2).
      ZeRO-0: 2ψ + 2ψ + 12ψ (+4ψ fp32 gradient copy at the step); ZeRO-1 partitions the optimizer (12ψ/N + 4ψ/N);
      ZeRO-2 also the gradients (2ψ/N); ZeRO-3 also the weights (2ψ/N) and keeps gradients only as the fp32
      partition: 18ψ/N in all, as DeepSpeed's ZeRO-3 estimator counts.
      fp32 training has no master copy: 4ψ weights, 4ψ gradients, 8ψ Adam.
      Optimizer offload moves master, moments and the fp32 gradient partition to host memory (and, for ZeRO-2/3,
      the 16-bit gradient partition: DeepSpeed's estimator gives 2ψ on the GPU for ZeRO-2 + offload); parameter
      offload (ZeRO-3) moves the 16-bit weight partition too. ``fp32_grad_partition=0`` gives the ZeRO paper's
      theoretical K=12 accounting.
    * Megatron DDP + optimizer (Megatron-LM docs, distributed optimizer table): bf16 weights 2ψ + fp32 main
      gradients 4ψ + fp32 master and Adam 12ψ = 18ψ; distributed optimizer 6ψ + 12ψ/N. fp16: 20ψ / 4ψ + 16ψ/N.
      fp32: 16ψ / 8ψ + 8ψ/N.
    """
    n = n_params
    dp = data_parallel
    mixed = param_bytes < 4
    is_megatron = engine == ENGINE_CODES[Engine.MEGATRON]

    # --- DeepSpeed / hybrid -------------------------------------------------------------------------------------
    opt_full = where(mixed, 12.0, 8.0) * n  # fp32 master + Adam moments (no master for fp32 training)
    fp32_grad = where(mixed & (fp32_grad_partition > 0), 4.0, 0.0) * n  # fp32 gradient (partition)
    w_div = where(zero_stage >= 3, dp, 1)
    g_div = where(zero_stage >= 2, dp, 1)
    o_div = where(zero_stage >= 1, dp, 1)
    off_opt = offload_optimizer > 0
    off_par = offload_params > 0
    ds_weights = param_bytes * n / w_div
    # ZeRO-3 reduces each bucket straight into its flat gradient partition, which lives through backward; it is
    # kept in ``gradient_accumulation_dtype``, which DeepSpeed sets to the model's dtype unless the config's
    # ``data_types.grad_accum_dtype`` says otherwise (engine.py ``get_data_types``; stage3.py
    # ``grad_partitions_flat_buffer``): 16-bit for bf16/fp16 training. ZeRO-0/1/2 keep 16-bit gradients and build
    # the fp32 copy only for the optimizer step.
    zero3_fp32 = (zero_stage >= 3) & mixed & (fp32_grad_partition > 0)
    ds_grads_lp = where(zero3_fp32, 0.0, param_bytes * n / g_div)
    zero3_partition = param_bytes * n / dp
    ds_grads_fp32 = fp32_grad / o_div
    ds_opt = opt_full / o_div
    ds_host = where(off_opt, ds_opt + ds_grads_fp32, 0) + where(off_par, ds_weights, 0)
    ds_opt_gpu = where(off_opt, 0, ds_opt)
    # with optimizer offload, each 16-bit gradient reduced from its hook streams to the host as it is reduced
    ds_grads_gpu = where(off_opt, where(reduces_from_hooks(zero_stage, overlap_comm), 0, ds_grads_lp),
                            ds_grads_lp + where(zero3_fp32, zero3_partition, 0))
    ds_weights_gpu = where(off_par, 0, ds_weights)
    # optimizer-step temporaries. ZeRO-1/2 (stage_1_and_2.py ``step``): the 16-bit gradients of the partition are
    # flattened into a new buffer and that is cast to the fp32 gradient partition, both alive at once (2ψ/N + 4ψ/N);
    # the reduce buckets are released at the end of backward (``_release_ipg_buffers``, see :func:`stage_terms`).
    # ZeRO-3 (stage3.py ``_prepare_fp32_grad_for_sub_group``): the same flatten + cast, one sub-group at a time.
    # ZeRO-0: DeepSpeed's 16-bit optimizer wrapper flattens and up-casts all gradients (measured 8 bytes/param on
    # H200, ZERO0_STEP_BYTES_PER_PARAM)
    flat_and_fp32 = where(mixed & (fp32_grad_partition > 0), param_bytes + 4.0, 0.0)
    # ZeRO-3 keeps its 16-bit gradient partition through the step, so torch's foreach Adam (``fused_kernels=0``)
    # runs its temporary (:data:`TORCH_ADAM_STEP_BYTES_PER_PARAM`) beside the sub-group's fp32 gradient, after the
    # flat copy is freed: the larger of the two moments
    zero3_adam = where(mixed & (fp32_grad_partition > 0) & (fused_kernels <= 0),
                       4.0 + TORCH_ADAM_STEP_BYTES_PER_PARAM, 0.0)
    zero3_step = maximum(flat_and_fp32, zero3_adam) * minimum(n / dp, sub_group_elements)
    ds_step = where(off_opt, 0.0,
                       where(zero3_fp32, zero3_step,
                                # ZeRO-1 first frees the 16-bit gradients of parameters outside its partition
                                # (``free_grad_in_param_list(params_not_in_partition)``): 2ψ − 2ψ/N fewer
                                where(zero_stage >= 1, flat_and_fp32 * n / o_div - (ds_grads_lp - param_bytes * n
                                                                                       / o_div),
                                         where(mixed & (fp32_grad_partition > 0),
                                                  ZERO0_STEP_BYTES_PER_PARAM * n, 0.0))))
    # torch's foreach Adam under DeepSpeed: ZeRO-1/2 free the 16-bit gradients and their flat copy before calling
    # the optimizer (stage_1_and_2.py ``step``), which covers its 4ψ/N temporary; measured on H200 (hybrid TP=2,
    # ZeRO-1, full recompute: 14.44 GiB at the step, 14.41 without it), so it is not added for DeepSpeed
    torch_adam = where(fused_kernels > 0, 0.0, TORCH_ADAM_STEP_BYTES_PER_PARAM)

    # --- Megatron -----------------------------------------------------------------------------------------------
    # bf16: fp32 main grads (accumulate_allreduce_grads_in_fp32); fp16: fp16 grads, the optimizer keeps an fp32 copy
    mg_weights = param_bytes * n
    # ``main_grad_fp32`` (ParallelPlan.grad_reduce_fp32; None: 1 unless fp16) = 0 with bf16: 16-bit main grads
    # (--grad-reduce-in-bf16, DDP grad_reduce_in_fp32=False); the optimizer then casts its shard's gradients to fp32
    # at the step (megatron-core distrib_optimizer.py ``_copy_model_grads_to_main_grads``: ``shard_main_param.grad =
    # shard_model_grad.float()``, freed by ``zero_grad(set_to_none=True)`` before the next backward): a step term
    half_grads = (fp16 > 0) if main_grad_fp32 is None else mixed & (asarray(main_grad_fp32) <= 0)
    bf16_half_grads = half_grads & (fp16 <= 0)
    mg_grads = where(half_grads, 2.0, 4.0) * n
    mg_opt_full = (where(mixed, 12.0, 8.0) + where(fp16 > 0, 4.0, 0.0)) * n
    mg_opt = mg_opt_full / where(distributed_optimizer > 0, dp, 1)

    weights = where(is_megatron, mg_weights, ds_weights_gpu)
    grads = where(is_megatron, mg_grads, ds_grads_gpu)
    optimizer = where(is_megatron, mg_opt, ds_opt_gpu)
    host = where(is_megatron, 0, ds_host)
    mg_step = (torch_adam + where(bf16_half_grads, 4.0, 0.0)) * n / where(distributed_optimizer > 0, dp, 1)
    step = where(is_megatron, mg_step, ds_step)
    return weights, grads, optimizer, host, step


# ---------------------------------------------------------------------------------------------------------------
# Host memory: what one rank's process holds resident
# ---------------------------------------------------------------------------------------------------------------
HOST_PROCESS_BYTES = 2_143_649_792
"""Host memory (resident set) one training process holds before any offloaded state: Python, torch with its CUDA
libraries and context, DeepSpeed or megatron-core, transformers. The peak resident set (``VmHWM``) of the corpus's
fit-split runs without offload, median of six (1.98-2.00 GiB; H200, torch 2.11 + CUDA 13.0, one process per GPU,
``benchmarks/bench_accuracy.py --host``)."""


def pinned_bytes(nbytes):
    """Host memory a page-locked buffer of ``nbytes`` takes: PyTorch's pinned-memory allocator rounds each request up
    to a power of two and keeps a freed block cached rather than returning it
    (``aten/src/ATen/core/CachingHostAllocator.h``: ``PowerOf2Ceil``); 0 stays 0. Arrays allowed."""
    x = np.asarray(nbytes, dtype=float)
    return np.where(x > 0, np.exp2(np.ceil(np.log2(np.maximum(x, 1.0)))), 0.0)[()]


_HOST_TENSOR_SUMS = ("bf16_partitions", "fp32_sub_groups", "largest_sub_group", "largest_tensor")


@_memoised_on_numbers
def _host_tensor_sums(m: ModelSpec, tensor_parallel: int, data_parallel: int,
                      sub_group_elements: int = DS_SUB_GROUP_ELEMENTS) -> tuple:
    """:data:`_HOST_TENSOR_SUMS` over the model's weight tensors on one rank
    (:func:`workbench.params.weight_tensor_sizes`, each partitioned over ``data_parallel``): the pinned bytes of each
    tensor's 16-bit partition, summed; the pinned bytes of each ZeRO-3 optimizer sub-group's fp32 gradient
    (:func:`zero3_sub_groups` at ``sub_group_size`` ``sub_group_elements``), summed; the largest sub-group's
    elements; the largest tensor's elements (whole)."""
    sizes = np.asarray(P.weight_tensor_sizes(m, int(tensor_parallel)), dtype=float)
    if not sizes.size:
        return 0.0, 0.0, 0.0, 0.0
    parts = sizes / data_parallel
    groups = np.asarray(zero3_sub_groups(parts.tolist(), int(sub_group_elements)), dtype=float)
    return (float(pinned_bytes(2.0 * parts).sum()), float(pinned_bytes(4.0 * groups).sum()), float(groups.max()),
            float(sizes.max()))


def host_tensor_sum(m: ModelSpec, tensor_parallel, data_parallel, name: str,
                    sub_group_elements=DS_SUB_GROUP_ELEMENTS):
    """One of :func:`_host_tensor_sums` by name; ``tensor_parallel``, ``data_parallel`` and ``sub_group_elements``
    may be arrays (each distinct set computed once)."""
    kind = _HOST_TENSOR_SUMS.index(name)
    if ndim(tensor_parallel) or ndim(data_parallel) or ndim(sub_group_elements):
        return _per_distinct(lambda t, d, s: _host_tensor_sums(m, int(t), int(d), int(s))[kind], tensor_parallel,
                             data_parallel, sub_group_elements)
    return _host_tensor_sums(m, int(tensor_parallel), int(data_parallel), int(sub_group_elements))[kind]


def nvme_param_buffer_elements(m: ModelSpec, tensor_parallel=1, data_parallel=1):
    """Elements of each of ZeRO-3's parameter swap buffers with the parameters on NVMe: DeepSpeed's
    ``offload_param.buffer_size`` must hold the largest parameter partition a rank swaps in
    (``partitioned_param_swapper.py`` ``get_buffer`` asserts "More elements N than buffer size M" at start-up: the
    corpus's GPT-NeoX h2048, whose 50,304 x 2,048 input embedding is 103 M elements, was refused at DeepSpeed's
    default, nvme80), so the workbench's export writes the larger of that default
    (:data:`DS_NVME_PARAM_BUFFER_ELEMENTS`) and the largest partition, and the host model prices that size. Arrays
    allowed."""
    return maximum(float(DS_NVME_PARAM_BUFFER_ELEMENTS), largest_param_partition(m, tensor_parallel, data_parallel))


def largest_param_partition(m: ModelSpec, tensor_parallel=1, data_parallel=1):
    """Elements of the largest weight's partition on one rank: its tensor-parallel shard
    (:func:`workbench.params.weight_tensor_sizes`) split over ``data_parallel`` as ZeRO-3 pads it, rounded up."""
    return np.ceil(host_tensor_sum(m, tensor_parallel, data_parallel, "largest_tensor") / data_parallel)


def host_resident_bytes(m: ModelSpec, offloaded, *, engine, zero_stage, offload_optimizer, offload_params,
                        tensor_parallel, data_parallel, trainable, params, lora, value_bytes, num_microbatches,
                        defrag, expert_parallel=1, expert_tensor_parallel=None, pinned=1, nvme_optimizer=0,
                        nvme_params=0, sub_group_elements=DS_SUB_GROUP_ELEMENTS):
    """Host memory one rank's process holds at its peak: :data:`HOST_PROCESS_BYTES` plus, under DeepSpeed's CPU
    offload with 16-bit training, the buffers DeepSpeed 0.19.8 makes on the host, page-locked ones taken as
    :func:`pinned_bytes` takes them (``pin_memory``, which the workbench's ds_config sets). ``offloaded``: the
    offloaded states of :func:`model_state_bytes`, kept for what this does not cover (fp32 training). ``trainable``
    and ``params``: the rank's trainable and all parameters (of its pipeline stage) before ZeRO's partitioning over
    ``data_parallel``; the per-tensor sums are taken at the stage's share of the model's parameters
    (``expert_parallel`` and ``expert_tensor_parallel`` split an MoE model's experts, :func:`stage_params_per_rank`).

    - ZeRO-1/2 with the optimizer offloaded (``stage_1_and_2.py``), P = trainable / data_parallel: the fp32 master
      partition and the fp32 gradient partition pinned, a pinned 16-bit copy of the partition
      (``param_buffer_of_bit16_for_cpu_offload_groups``) and of the largest parameter
      (``temp_grad_buffer_for_cpu_offload``), and CPU Adam's two fp32 moments (pageable): pinned(4P) × 2 +
      pinned(2P) + pinned(2 × largest) + 8P; ZeRO-2 with gradient accumulation each parameter's pinned 16-bit
      accumulation buffer too (``accumulated_grads_in_cpu``, made by ``copy_grads_in_partition`` when
      ``micro_step_id > 0`` or before the boundary). ZeRO-1 makes none: it releases its buckets only at the boundary,
      so ``setup_buckets`` counts one micro-step per optimizer step and its one copy, at the boundary, sees
      ``micro_step_id`` 0 (H200, the corpus's SmolLM3 ZeRO-1 run with accumulation, final51: +12.1 % with the
      buffer, blind; -0.1 % without it, not blind).
    - ZeRO-3 (``stage3.py``): with the optimizer offloaded, the fp32 master and Adam's moments (pageable, 12P), the
      pinned 16-bit gradient partition (``grad_partitions_flat_buffer``) and a pinned fp32 gradient per optimizer
      sub-group; with the parameters offloaded, each parameter's pinned 16-bit partition (made at partitioning,
      freed into the allocator's cache when the flat buffer takes them) and the pinned flat buffer
      (``param_groups_fp16_flat_cpu_memory``). A blocking copy between host and GPU that changes the dtype converts
      on the host (``aten/src/ATen/native/cuda/Copy.cu``), a transient the size of the largest sub-group: 16-bit
      when the step copies the fp32 master back to the GPU's partition (optimizer offloaded alone), fp32 when the
      GPU's master is made from the host's partition (parameters offloaded alone).
    - ZeRO-3 offloading to NVMe (``nvme_optimizer`` / ``nvme_params``, ZeRO-Infinity): the optimizer's fp32 states
      live on the drive and the host holds :data:`DS_NVME_OPTIMIZER_BUFFERS` page-locked fp32 buffers of the
      largest sub-group in their place, and at start-up, when ``initialize_optimizer_states`` first steps each
      sub-group, Adam's two fp32 moments of it in pageable memory until their first swap-out (8 bytes a parameter
      of the largest sub-group: what the first six NVMe runs' peak resident sets held beyond the rest, 7.5-7.9,
      H200, 2026-12-07, ``results/nvme79_blind_h200.txt``, found on them: not blind); the parameters' 16-bit
      partition stays in a page-locked host buffer up to
      :data:`DS_NVME_PARAMS_IN_CPU` elements, beside the parameter swapper's buffers
      (:data:`DS_NVME_PARAM_BUFFERS` × :func:`nvme_param_buffer_elements`), and no per-parameter partitions.
      Read off DeepSpeed 0.19.8's swap_tensor and stage3.py sources.
    - ZeRO-3 with the parameters on the GPU (offloading nothing, or the optimizer alone): at init DeepSpeed moves
      every trained parameter's partition into one pageable CPU buffer and back to the GPU as one flat buffer
      (``_create_fp16_partitions_with_defragmentation`` -> ``zero/utils.py`` ``defragment``), a host peak of
      value_bytes × P before any offloaded state exists (``defrag``, :func:`zero3_defrag_host_bytes`, as the caller
      has it); the larger of that and the steady state counts. The
      corpus's OLMo 2 1B ZeRO-3 run without offload (final50): peak resident set 4.36 GiB, 2.10 GiB at the end;
      this gives 4.76 GiB (+9 %: the process holds less than :data:`HOST_PROCESS_BYTES` that early; not blind).

    Against the peak resident set of the corpus's runs that record it (H200; ``benchmarks/bench_accuracy.py --host``)
    this is within -1.8 / +0.1 % on all 56 ZeRO-1/2 and ZeRO-3 offload runs; the form was read off the sources above
    and checked on those runs, fit and test split alike (not blind; final51's 8 were blind, -1.8 / +12.1 % before
    ZeRO-1 lost the accumulation buffer). LoRA takes one adapter tensor for the largest (final51's Granite LoRA run:
    -1.8 %), pipeline stages the stage's share of the tensor sums (no run has checked). ``pinned=False``: DeepSpeed's
    ``pin_memory`` off, every buffer pageable at its own size (what the advisor prices against the pinned figure)."""
    ds = engine != ENGINE_CODES[Engine.MEGATRON]
    mixed = value_bytes < 4
    off_opt, off_par = offload_optimizer > 0, offload_params > 0
    p_opt = trainable / data_parallel
    if not any_true(ds & mixed & (off_opt | off_par)):  # nothing offloaded that this models (most of a sweep)
        return HOST_PROCESS_BYTES + maximum(offloaded, defrag)
    lora = asarray(lora) > 0
    p_all = params / data_parallel
    stage_share = params / stage_params_per_rank(m, tensor_parallel, 1, 0, m.num_layers, expert_parallel,
                                                 expert_tensor_parallel)
    pinned = asarray(pinned) > 0

    def held(nbytes):  # pageable buffers take their own sizes
        return where(pinned, pinned_bytes(nbytes), nbytes)

    def tensors(name):
        summed = host_tensor_sum(m, tensor_parallel, data_parallel, name, sub_group_elements) * stage_share
        if name == "bf16_partitions":
            return where(pinned, summed, 2.0 * p_all)
        if name == "fp32_sub_groups":
            return where(pinned, summed, 4.0 * p_opt)
        return summed

    largest = where(lora, 0.0, host_tensor_sum(m, tensor_parallel, data_parallel, "largest_tensor"))
    accumulate = where(lora, held(2.0 * p_opt), tensors("bf16_partitions"))
    zero12 = (2 * held(4.0 * p_opt) + held(2.0 * p_opt) + held(2.0 * largest) + 8.0 * p_opt
              + where((num_microbatches > 1) & (zero_stage >= 2), accumulate, 0.0))
    sub_groups = where(lora, held(4.0 * p_opt), tensors("fp32_sub_groups"))
    largest_group = where(lora, minimum(p_opt, maximum(sub_group_elements, 1.0)),
                          host_tensor_sum(m, tensor_parallel, data_parallel, "largest_sub_group", sub_group_elements))
    # on NVMe (ZeRO-Infinity) the fp32 states live on the drive: the host holds the swapper's page-locked buffers
    # instead (DS_NVME_OPTIMIZER_BUFFERS of the largest sub-group, page-locked by DeepSpeed's own allocator at their
    # size), and of the parameters the page-locked flat buffer up to max_in_cpu and the parameter swap buffers
    nvme_opt, nvme_par = asarray(nvme_optimizer) > 0, asarray(nvme_params) > 0
    # (+ Adam's two fp32 moments, made in pageable memory for one sub-group at a time when stage3.py's
    # initialize_optimizer_states first steps it and released after its first swap-out: a peak at start-up)
    opt_states = where(nvme_opt, (DS_NVME_OPTIMIZER_BUFFERS * 4.0 + 8.0) * largest_group, 12.0 * p_opt + sub_groups)
    par_states = where(nvme_par, held(2.0 * minimum(p_all, DS_NVME_PARAMS_IN_CPU))
                       + held(2.0 * DS_NVME_PARAM_BUFFERS
                              * nvme_param_buffer_elements(m, tensor_parallel, data_parallel)),
                       held(2.0 * p_all) + tensors("bf16_partitions"))
    zero3 = (where(off_opt, opt_states + held(2.0 * p_opt), 0.0)
             + where(off_par, par_states, 0.0)
             + where(off_opt & ~off_par, 2.0 * largest_group, where(off_par & ~off_opt, 4.0 * largest_group, 0.0)))
    modelled = where(ds & mixed & (zero_stage >= 3) & (off_opt | off_par), zero3,
                     where(ds & mixed & (zero_stage >= 1) & (zero_stage <= 2) & off_opt, zero12, offloaded))
    return HOST_PROCESS_BYTES + maximum(modelled, defrag)


def zero3_defrag_host_bytes(*, engine, zero_stage, offload_params, value_bytes, trainable, data_parallel):
    """Host bytes one rank holds at DeepSpeed ZeRO-3's init when its parameters stay on the GPU (offloading nothing,
    the optimizer alone, to CPU or NVMe): every trained parameter's partition copied into one pageable CPU buffer and
    back to the GPU as one flat buffer (``_create_fp16_partitions_with_defragmentation`` -> ``zero/utils.py``
    ``defragment``), value_bytes × trainable / data_parallel, before any offloaded state exists; 0 elsewhere
    (:func:`defragments_through_host`)."""
    return where(zero3_defragments(engine, zero_stage, offload_params), value_bytes * trainable / data_parallel, 0.0)


def zero3_defragments(engine, zero_stage, offload_params):
    """Whether the ranks pass their 16-bit parameter partition through one host buffer at initialization: DeepSpeed
    ZeRO-3 keeping its parameters on the GPU (:func:`zero3_defrag_host_bytes`). Arrays allowed."""
    return (engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage >= 3) & ~(asarray(offload_params) > 0)


def defragments_through_host(plan) -> bool:
    """:func:`zero3_defragments` of a plan (the ``defrag`` term of :func:`host_resident_bytes`)."""
    engine, zero_stage, _, offload_params = _plan_codes(plan)
    return bool(zero3_defragments(engine, zero_stage, offload_params))


def lora_split(stage_params, adapter_params, lora):
    """(trainable, frozen) parameters of a rank: with LoRA the adapters train and every base weight is frozen;
    without, everything trains."""
    return where(lora, adapter_params, stage_params), where(lora, stage_params, 0.0)


def frozen_weight_bytes(n_frozen, *, zero_stage, data_parallel, param_bytes):
    """Frozen (``requires_grad=False``) weights: 16-bit (the engine casts the whole module), no gradient, no
    optimizer state. ZeRO-3 partitions every module parameter, frozen or not (stage3.py partitions through the
    module hooks); ZeRO-1/2 build their flat fp32 groups and gradient partitions from the trainable parameters
    only (stage_1_and_2.py keeps ``param.requires_grad`` parameters), so frozen weights stay whole on every rank."""
    return param_bytes * n_frozen / where(zero_stage >= 3, data_parallel, 1)


def lora_late_buckets(held, output, layer_transient, buffers, *, last, engine, zero_stage, lora, buckets=None):
    """``(activations, buffers, late)`` at the backward peak of a LoRA rank under DeepSpeed ZeRO-1/2 (``late``:
    where this applies; elsewhere the caller's sum stands). ``held``: the activations kept through backward,
    ``output``: the loss transient, ``layer_transient``: the last layer's backward working set.

    ZeRO-1/2 allocate their reduce buckets in ``setup_buckets`` when the first gradient hook fires
    (``stage_1_and_2.py`` ``process_gradients``). With LoRA the output layer and every base weight are frozen, so
    no hook fires during the loss backward: the first is an adapter of the last layer, after the logits' fp32
    gradients are freed. The peak is then the larger of ``held + output`` without the buckets and
    ``held + layer_transient + buffers``. No constant: it follows from that order (H200, fit split: the Llama LoRA
    run was over-estimated by 31 % with the loss and the buckets counted at once). A transformers model's full
    fine-tune is ordered the same way (``lora`` is then true for it too): the loss backward's fp32 logits gradients
    are freed before the output layer's weight gradient (untied) or the last layer's (tied) fires the first hook,
    and so is a megatron-core model's under DeepSpeed (its fit-split ZeRO-2 runs were over-estimated by up to 6 % with
    the buckets counted at the loss); ``lora`` is then true for every model where the buckets do not persist from
    an earlier micro-batch."""
    late = lora & (engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage >= 1) & (zero_stage <= 2) & last
    # ``buckets``: the reduce buckets within ``buffers`` (what is allocated from init on, such as the CPU-offload
    # staging buffer, stays in the loss phase); None: all of ``buffers``
    early = 0.0 if buckets is None else buffers - buckets
    loss_wins = held + output + early > held + layer_transient + buffers
    acts = where(loss_wins, held + output, held + layer_transient)
    return acts, where(loss_wins, early, buffers), late


def zero3_offload_copy_bytes(elements, value_bytes):
    """Bytes DeepSpeed ZeRO-3 with the optimizer on the CPU holds while it hands one reduced gradient slice of
    ``elements`` values to the host (``stage3.py`` ``partition_grads``): the 16-bit GPU copy of the slice's host
    buffer (``grad_buffer.to(device)``), beside the larger of its L2 norm's fp64 pieces (at most
    :data:`DS_ZERO3_NORM_CHUNK_ELEMENTS` elements at a time, :data:`DS_OFFLOAD_NORM_BYTES_PER_VALUE` per value) and
    the fp32 cast for the copy to the host, which come one after the other (arrays allowed)."""
    return value_bytes * elements + maximum(
        DS_OFFLOAD_NORM_BYTES_PER_VALUE * minimum(elements, DS_ZERO3_NORM_CHUNK_ELEMENTS), 4.0 * elements)


def zero3_nvme_gradient_list_bytes(bucket_elements, counted_elements, *, data_parallel=1, nvme_optimizer=0,
                                   counted_first=False, value_bytes=2):
    """Bytes ZeRO-3 with the optimizer on NVMe (ZeRO-Infinity) adds to one bucket reduction's copies: the fp32 casts
    of the bucket's gradient slices, which it keeps on the GPU until the bucket's last slice is handed over and then
    swaps out together (``stage3.py`` ``partition_grads``: ``_offload_grad_partition_at_boundary`` appends
    ``grad_buffer.to(fp32)`` to a list per optimizer sub-group, ``_swap_out_offload_fp32_gradients`` writes the
    lists after the loop), where CPU offload copies each cast to the host at once. ``bucket_elements``: the bucket's
    gradients, whole (the rank's slices are a ``data_parallel``-th); ``counted_elements``: the slice whose copies
    :func:`zero3_offload_copy_bytes` already counts. The bucket's slices are handed over in the parameters' creation
    order (``params_in_bucket.sort(key=ds_id)``): with the counted slice last (an untied output layer, or the
    largest weight as a bound) the list holds every other slice beside its copies; with it first (a tied embedding)
    the list grows after its copies are gone and ends at every slice's cast. 0 without NVMe (arrays allowed).
    (fit15, one H200, 2026-12-07: a 395 M-parameter Llama-style model at micro-batch 1, every gradient in one bucket
    reduced after backward, measured 20.7 % above the model without this list, found there: not blind.)"""
    rest = 4.0 * maximum(bucket_elements / data_parallel - counted_elements, 0.0)
    everything = 4.0 * bucket_elements / data_parallel
    first = maximum(everything - zero3_offload_copy_bytes(counted_elements, value_bytes), 0.0)
    return where(asarray(nvme_optimizer) > 0, where(counted_first, first, rest), 0.0)


def zero12_early_partition_bytes(m: ModelSpec, *, held, kept_per_layer, layer_transient, layers, last,
                                 tensor_parallel, data_parallel, engine, zero_stage, value_bytes, num_microbatches,
                                 offload_optimizer, pipeline_parallel, trainable, lora, overlap_comm,
                                 reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS, gathered_at=None,
                                 full_recompute=0, recomputed_layer=0.0, mlp_block=0.0, mlp_second_pending=0.0,
                                 mlp_norm=0.0, mlp_fc1_input=0.0, nvme_optimizer=0):
    """``(gradient_bytes, activation_bytes, gathered_bytes)`` of DeepSpeed ZeRO-1/2 at the moment its 16-bit gradient
    partition is allocated, or zeros where that moment is not during the layers' backward. ``gathered_at(
    layers_done, aliases)``: ZeRO-3's gathered parameters at that moment (:func:`zero3_layer_backward_gathered_bytes`; the
    caller counts them in that moment's buffers in place of the backward's own gathered set; ``aliases``: 0 for a
    moment before the layer is recomputed); 0 if not given.

    With ``contiguous_gradients`` (the default) ZeRO-1/2 copy each reduced gradient of the rank's partition into
    one flat buffer of the whole partition, ``grads_in_partition`` (v·ψ/N bytes), allocated at the first bucket
    reduction (``stage_1_and_2.py`` ``reduce_ipg_grads`` → ``copy_grads_in_partition``). A reduction runs when the
    next gradient would overflow ``reduce_bucket_size``; a gradient larger than the bucket bypasses it and is
    reduced at the next hook (``extra_large_param_to_reduce``). So when the untied output layer alone exceeds the
    bucket (a 152k vocabulary at h=3584: 545 M elements), the partition appears before the first transformer
    layer is back-propagated, beside every layer's activations and the output layer's own 16-bit gradient; with a
    smaller output layer after ``k = (bucket − output) / layer`` layers, whose activations are freed by then.
    ZeRO-1 reduces during backward only with ``overlap_comm`` (``process_gradients``); without it every gradient
    waits for ``reduce_gradients`` after backward (:func:`untied_output_gradient_bytes`). With gradient accumulation
    the same moment comes in every micro-batch after the first, beside the partition of the earlier ones
    (:func:`backward_gradient_bytes` counts that one): at the end of each backward DeepSpeed 0.19 keeps the
    partition alive through its per-parameter views (``independent_gradient_partition_epilogue``:
    ``all_grad_tensors``) and drops only its own reference (``_release_ipg_buffers``: ``grads_in_partition =
    None``), so the next micro-batch's first reduction allocates a second one.
    With optimizer offload there is no partition on the GPU (each gradient's fp64 norm is taken, then it is cast to
    fp32 and copied to the host); when the output layer exceeds the bucket, its 16-bit gradient and that fp64 copy
    (:data:`DS_OFFLOAD_NORM_BYTES_PER_VALUE`) are the moment's extra, beside every layer's activations: the
    reduction runs at the next gradient hook (the final norm's), before any transformer layer is back-propagated.
    ZeRO-3 with optimizer offload reduces the same way (``stage3.py`` ``reduce_independent_p_g_buckets_and_remove_grads``:
    a gradient that does not fit the bucket is reduced alone at the next hook) and hands the rank's slice of each
    reduced gradient to the host through a 16-bit GPU copy of its host buffer (``partition_grads``:
    ``grad_buffer.to(device)``), beside which it takes the norm through fp64 pieces of at most
    :data:`DS_ZERO3_NORM_CHUNK_ELEMENTS` elements, then the fp32 cast for the host.

    Where in its layer the reduction fires matters: a layer's weights get their gradients MLP first (fc2, then fc1
    or gate and up), then attention (the output projection, then QKV), and a gradient that would overflow the bucket
    reduces it first (``reduce_independent_p_g_buckets_and_remove_grads``). When the bucket's room at the layer's
    start holds all its MLP weights, the trigger is an attention weight, and the layer's MLP block has been
    back-propagated and its kept activations freed (``mlp_block``, :func:`mlp_block_activation_bytes`, freed so for
    layers not recomputed; a recomputed layer's block comes off its recomputed activations). (Phi-3 medium's width at 2 layers, ZeRO-2 with the optimizer on the CPU, replayed: the bucket
    reduced at the last layer's ``qkv_proj`` hook, its MLP's 0.5 GiB gone beside ``gate_up_proj``'s 1.37 GiB fp64
    copy; counted alive, +8.9 % allocated.)"""
    vocab = P.model_vocab_size(m, tensor_parallel)
    untied_output = (not m.tied_embeddings) | (pipeline_parallel > 1)
    output_elems = where(last & untied_output & ~asarray(lora), vocab * m.hidden_size / tensor_parallel, 0.0)
    per_layer = maximum(layer_params_per_rank(m, tensor_parallel), 1.0)
    done = where(output_elems > reduce_bucket_elements, 0.0,
                    np.floor((reduce_bucket_elements - output_elems) / per_layer))
    offload = offload_optimizer > 0
    zero3_offload = (zero_stage == 3) & offload
    reduces_in_backward = (zero_stage == 2) | ((zero_stage == 1) & (overlap_comm > 0)) | zero3_offload
    extra_large = output_elems > reduce_bucket_elements
    applies_base = ((engine != ENGINE_CODES[Engine.MEGATRON]) & reduces_in_backward
                    & ~asarray(lora) & (pipeline_parallel == 1) & (value_bytes < 4))
    applies = applies_base & (done < layers) & (~offload | (output_elems > 0))
    partition = where(offload, 0.0, value_bytes * trainable / data_parallel)
    # the output layer's 16-bit gradient while it is reduced (only when it bypasses the bucket); with offload its
    # fp64 copy for the norm, then its fp32 cast for the copy to the host
    # (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``: ``src_tensor.to(fp32)``), one after the other, exist
    # beside it, also when it went through the bucket (the norm is taken of its slice of the bucket when the bucket
    # is reduced, after ``done`` layers)
    offload_copy = max(DS_OFFLOAD_NORM_BYTES_PER_VALUE, 4.0) * output_elems
    # ZeRO-3: the rank's slice, its 16-bit GPU copy beside the fp64 pieces, then the fp32 cast; a bucket of several
    # gradients is first concatenated into one new 16-bit block (``reduce_scatter_coalesced``), alive through them
    # (traced on one H200: Pythia 6.9B's width at 4 layers, 0.89 GiB beside the output layer's copies)
    rank_slice = output_elems / data_parallel
    coalesced = value_bytes * reduce_bucket_elements
    zero3_copy = zero3_offload_copy_bytes(rank_slice, value_bytes)
    # (with the optimizer on NVMe the bucket's other fp32 casts wait beside them: the output layer is its last slice)
    nvme_list = zero3_nvme_gradient_list_bytes(reduce_bucket_elements, rank_slice, data_parallel=data_parallel,
                                               nvme_optimizer=nvme_optimizer, value_bytes=value_bytes)
    zero3_copy = zero3_copy + where(extra_large, 0.0, coalesced + nvme_list)
    momentary = (where(extra_large, value_bytes * output_elems, 0.0)
                 + where(offload, where(zero3_offload, zero3_copy, offload_copy), 0.0))
    # the reduction fires in the hook of the first weight that does not fit the bucket. When that is the next layer's
    # first back-propagated weight (its MLP output projection) and the layer is recomputed (``full_recompute``), its
    # backward has just begun and its recomputed activations (``recomputed_layer``) are all alive beside the copies
    # (an H200 history replayed: Llama 2 13B at 10 layers, checkpointed, micro-batch 2, both offloads, the 1.25 GiB
    # fp64 copy of the output layer's gradient beside layer 9's recomputed MLP); the layer's own backward transient
    # (an s x s attention core's, later in the layer) comes after them: the larger of the two. Without recompute
    # those activations are already in ``held``; a later weight finds part of the layer freed: the larger of the
    # transient and the copies. (final35, blind: Yi 34B at 4 layers through transformers, checkpointed, -12 to -20 %
    # without this moment; with the transient in place of the recomputed activations, eager +12.6 % and
    # megatron-core's unfused attention +22 to +27 %)
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    first_weight = 0.0 if m.is_moe else f * m.hidden_size / tensor_parallel
    mlp_weights = (0.0 if m.is_moe else
                   P.mlp_expert_params(m.hidden_size, f, m.is_gated, m.add_bias_linear) / tensor_parallel)

    def mlp_freed(bypassed, room_left):  # the reduction fires at an attention weight: the MLP block already freed
        # (a recomputed layer's kept activations are its input alone: nothing of the block to free)
        return where(~bypassed & (room_left >= mlp_weights) & ~(asarray(full_recompute) > 0), mlp_block, 0.0)

    room = reduce_bucket_elements - output_elems - done * per_layer
    # (ZeRO-2 with the optimizer on the CPU fires its reductions at the same hooks, stage_1_and_2.py
    # ``reduce_independent_p_g_buckets_and_remove_grads``, so these moments hold there too: final47's Yi-1.5 9B at 8
    # layers through transformers, eager, checkpointed, replayed: the bucket of the output layer and one layer reduced
    # at the next layer's up_proj hook, beside that recomputed layer's attention tensors (768 MiB) and the output
    # layer's 2000 MiB fp64 copy; -13.3 % allocated, blind, when they were ZeRO-3's alone)
    def reduced_in_layer(bypassed, room_left, moment):
        """``(activations beside the reduction, fired inside a recomputed layer)`` when the bucket reduction whose
        copies are ``moment`` fires with ``room_left`` elements left in the bucket at the next layer's start; a
        ``bypassed`` gradient (larger than the bucket) reduces at once instead."""
        recomputed = offload & ~bypassed & (asarray(full_recompute) > 0)
        # at the layer's first weight (its MLP output projection): all its recomputed activations are alive
        at_layer_start = recomputed & (first_weight > room_left)
        # a later weight of the recomputed layer's MLP (its first fits the bucket, not all of them): the recomputed
        # layer is alive but for its MLP block (``mlp_block``), back-propagated by then (final40's Codestral 22B at 3
        # layers, both offloads, checkpointed, replayed: the bucket reduced at the last layer's third MLP weight
        # beside eleven hidden-state tensors and none of the MLP's intermediates; -15.2 % allocated, blind, without
        # it)
        in_recomputed_mlp = recomputed & (first_weight <= room_left) & (room_left < mlp_weights)
        # ... and when only that first weight fits, the trigger is the MLP's second weight, whose hook comes before
        # the gate's branch is back-propagated: two f-sized tensors of a gated block still alive
        # (``mlp_second_pending``; Llama 2 70B's width at 2 layers through transformers, both offloads,
        # checkpointed, replayed: the bucket of the output layer and down_proj reduced at up_proj's hook beside two
        # 224 MiB MLP tensors; -9.0 % allocated, blind on final44, without them)
        # The pre-MLP norm is back-propagated after the whole MLP block, so its kept tensors (``mlp_norm``: its
        # input and a transformers RMSNorm's fp32 copy) are alive at any MLP weight's hook, and fc1's input
        # (``mlp_fc1_input``, the norm's output) until the last weight that reads it (a gated block's gate_proj) has
        # run: at the second weight of a gated block it is alive too. (Codestral 22B's width at 3 layers and Llama 2
        # 70B's at 2 through transformers, both offloads, checkpointed, replayed: the post-attention norm's 96 + 192
        # MiB alive at gate_proj's hook, its 64 + 128 + 64 MiB at up_proj's.)
        second = in_recomputed_mlp & (room_left < 2 * first_weight)
        pending = where(second, mlp_second_pending, 0.0)
        mlp_kept = mlp_norm + where(second & (mlp_second_pending > 0), mlp_fc1_input, 0.0)
        added = where(at_layer_start, maximum(layer_transient, recomputed_layer + moment),
                      where(in_recomputed_mlp, maximum(layer_transient,
                                                       recomputed_layer - mlp_block + mlp_kept + pending + moment),
                            maximum(layer_transient, moment)))
        return added, at_layer_start | in_recomputed_mlp

    added, in_layer = reduced_in_layer(extra_large, room, momentary)
    # the hook's own weight: its 16-bit gradient waits beside the reduction it triggers (an MLP weight here)
    trigger_grad = where(in_layer, value_bytes * first_weight, 0.0)
    acts = held - done * kept_per_layer - mlp_freed(extra_large, room) + added
    # with offload, a layer's largest weight goes through the same copies when its bucket is reduced: at once when
    # it exceeds the bucket (a transformers MoE layer's fused experts, :func:`hf_fused_experts_tensor`: Mixtral
    # 8x7B's 940 M-element gate_up_proj, its fp64 copy 7 GiB beside every layer's activations), else at the first
    # reduction of layers, after ``done`` layers (or as many as fill the bucket when the output layer went alone)
    big = largest_layer_param_tensor(m, tensor_parallel)
    big_extra = big > reduce_bucket_elements
    big_slice = big / data_parallel
    big_list = zero3_nvme_gradient_list_bytes(reduce_bucket_elements, big_slice, data_parallel=data_parallel,
                                              nvme_optimizer=nvme_optimizer, value_bytes=value_bytes)
    big_copy = where(zero3_offload, zero3_offload_copy_bytes(big_slice, value_bytes)
                     + where(big_extra, 0.0, coalesced + big_list), max(DS_OFFLOAD_NORM_BYTES_PER_VALUE, 4.0) * big)
    done_big = where(big_extra, 0.0, where(extra_large, np.floor(reduce_bucket_elements / per_layer), done))
    # the weight's own 16-bit gradient beside its copies when it bypasses the bucket: ZeRO-1/2 here; ZeRO-3 counts
    # it with its module's backward already (the buffers' largest layer weight, :func:`stage_terms`). ZeRO-3 with
    # transformers' fused experts: autograd makes both expert gradients before either hook fires and DeepSpeed
    # reduces ``gate_up_proj`` first, so the ``down_proj`` gradient waits beside that reduction (an H200 history of
    # Mixtral 8x22B's width at ZeRO-3 with the optimizer on the CPU, corpus group final30-history: its 1.5 GiB
    # ``down_proj`` gradient alive at the 6 GiB fp32 cast of ``gate_up_proj``'s, the run's peak)
    fused = hf_fused_experts_tensor(m) / tensor_parallel
    fused_rest = where((big == fused) & (fused > 0), fused / (2 if m.is_gated else 1), 0.0)
    big_grad = where(big_extra, where(zero3_offload, value_bytes * fused_rest, value_bytes * big), 0.0)
    room_big = where(extra_large, reduce_bucket_elements - done_big * per_layer, room)
    # where in the recomputed layer the reduction fires, as above (traced on one H200: Granite 3 2B at 40 layers,
    # tied, ZeRO-3 with the optimizer on the CPU, checkpointed: the first bucket of eight layers reduced at the
    # ninth's first weight, beside its recomputed layer)
    added_big, _ = reduced_in_layer(big_extra, room_big, big_grad + big_copy)
    acts_big = held - minimum(done_big, layers) * kept_per_layer - mlp_freed(big_extra, room_big) + added_big
    applies_big = applies_base & offload & (big_extra | (done_big < layers))
    # the output layer reduced alone (``extra_large``) is handed over at the final norm's hook, once the output
    # layer's backward has released it and before any layer is recomputed: the walk's state then, none of a
    # recomputed layer's released blocks (:func:`recompute_keeps_released_weights`) yet
    gathered, gathered_big = ((gathered_at(where(extra_large, -1, done), where(extra_large, 0, 1)),
                               gathered_at(minimum(done_big, maximum(layers - 1, 0)), 1))
                              if gathered_at is not None else (0.0, 0.0))
    acts = where(applies, acts, 0.0)
    gathered = where(applies, gathered, 0.0)
    big_wins = applies_big & (acts_big + gathered_big > acts + gathered)
    acts, gathered = where(big_wins, acts_big, acts), where(big_wins, gathered_big, gathered)
    grads = where(applies | applies_big, partition, 0.0) + where(applies & ~big_wins, trigger_grad, 0.0)
    return grads, acts, gathered


def reduces_from_hooks(zero_stage, overlap_comm):
    """Whether DeepSpeed reduces each gradient from its backward hook (arrays allowed): ZeRO-2 and 3, and ZeRO-1 with
    ``overlap_comm`` (``stage_1_and_2.py`` ``process_gradients``: ``partition_gradients or overlap_comm``); ZeRO-1
    without it keeps every 16-bit gradient until the end of backward (final49's EuroLLM run, 28 % high when its
    gradients were kept so with ``overlap_comm`` on)."""
    return (zero_stage >= 2) | ((zero_stage == 1) & (asarray(overlap_comm) > 0))


def deepspeed_offload12(engine, zero_stage, offload_optimizer):
    """Whether a plan runs DeepSpeed ZeRO-1/2 with the optimizer on the CPU (``stage_1_and_2.py``'s ``cpu_offload``
    path; arrays allowed): the plans the offload staging buffer, the initialization clone and the tied embeddings'
    end-of-backward norm copy apply to."""
    return ((engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage >= 1) & (zero_stage <= 2)
            & (offload_optimizer > 0))


def deepspeed_init_bytes(*, weights, trainable, data_parallel, value_bytes, engine, zero_stage, offload_optimizer):
    """Bytes DeepSpeed ZeRO-1/2 with the optimizer on the CPU allocate at initialization, whatever the room: the flat
    16-bit buffer (``weights``) and a GPU clone of the rank's 16-bit partition, from which the fp32 master is made on
    the host (``stage_1_and_2.py``: ``parallel_partitioned_bit16_groups[i][partition_id].detach().clone().to(
    device=self.device, dtype=...)``, the clone on the GPU, then its copy to the host), before any gradient, bucket or
    activation. A requirement: with too little free memory the engine moves the flatten to the CPU
    (:func:`deepspeed_flatten_bytes`), not the clone. With the optimizer on the CPU the training steps need little
    more than the weights, so on one GPU (the partition is all trainable weights) this is the run's peak when the
    steps need less than twice the weights (H200, Mistral 7B at 16 layers, checkpointed: 14.00 GiB measured, twice
    its 7.00 GiB of bf16 weights, where the steps needed 11.4). The allocator cuts fresh segments for both: no
    reserve above them. 0 for other engines and stages and without optimizer offload (the fp32 master is then kept
    on the GPU, which the training terms count)."""
    return where(deepspeed_offload12(engine, zero_stage, offload_optimizer),
                 weights + value_bytes * trainable / data_parallel, 0.0)


def zero3_build_bytes(m: ModelSpec, *, engine, zero_stage, offload_params, zero_init, weights_whole, value_bytes,
                      tensor_parallel=1):
    """Bytes DeepSpeed ZeRO-3 with the parameters on the host allocates at initialization when the model was built
    whole on the GPU (not inside ``deepspeed.zero.Init``): the rank's 16-bit weights (``weights_whole``) while
    ``deepspeed.initialize`` partitions them to the host one parameter at a time, beside one more parameter's
    16-bit bytes (the largest tensor, the one in hand). Training then needs less than that on models whose
    activations and buffers are small beside their weights: measured on StarCoder2 3B at its 30 layers (H100, both
    offloads, checkpointed: 5.93 GiB, the 5.65 GiB built plus its 288 MiB tied embedding) and SmolLM3 3B (H200: 6.32
    GiB, 5.83 plus its 501 MiB embedding); read off those two runs (``allocated_after_build_bytes`` of the corpus
    records), not blind. 0 for megatron-core's own engine, other stages and plans, and when the model is built
    inside ``zero.Init`` (``zero_init``: :func:`workbench.specs.builds_in_zero_init`, always so for
    Megatron-DeepSpeed at ZeRO-3). Arrays allowed."""
    built_whole = ((engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage >= 3) & (asarray(offload_params) > 0)
                   & ~(asarray(zero_init) > 0))
    return where(built_whole, weights_whole + value_bytes * largest_param_tensor(m, tensor_parallel), 0.0)


def deepspeed_init_cached_bytes(m: ModelSpec, *, init, weights, trainable, value_bytes, tensor_parallel=1,
                                expandable_segments=0):
    """Bytes the caching allocator keeps reserved, beyond what is allocated, after DeepSpeed ZeRO-1/2 with the
    optimizer on the CPU initialised (where :func:`deepspeed_init_bytes` is not 0): flattening on the GPU makes the
    flat 16-bit buffer while the parameters still hold their own blocks, then turns the parameters into views of it
    (``_update_model_bit16_weights``), so their blocks — one segment per large parameter, the trainable 16-bit
    weights — are freed into the cache; the partition's GPU clone needs one block of its own size, which none of those
    segments holds unless the largest parameter is at least as large (then it is cut from that one). On one H200 the
    reserved peak of such runs was 3.00-3.01 × the 16-bit weights wherever training needed less (Llama 2 7B and 13B
    widths at 6 layers, Mistral 7B at 16, Pythia 12B at 4, GPT-NeoX 20B's width at 3; ``peak_reserved_bytes`` of the
    corpus): the flat buffer, the clone and the parameters' cached blocks. Training allocates from those cached
    segments first, so they set the reserved peak only where it is larger than training's own. Each of those blocks
    is a whole free segment, which the caching allocator releases when a request does not fit
    (``release_cached_blocks``, then it retries): what a GPU with room shows, not what must fit
    (:attr:`workbench.memory_types.MemoryEstimate.releasable_cached_bytes`). 0 with PyTorch's
    expandable segments (the parameters' freed blocks are one contiguous range there, which the clone reuses) and
    where there is no initialization peak to price."""
    clone = init - weights
    params = value_bytes * trainable  # the parameters' own blocks: every ZeRO-1/2 rank flattens all its 16-bit weights
    fits = value_bytes * largest_param_tensor(m, tensor_parallel) >= clone
    return where((init > 0) & (asarray(expandable_segments) == 0), where(fits, params - clone, params), 0.0)


@_memoised_on_numbers
def _zero3_embedding_bucket_residue(m: ModelSpec, tensor_parallel: int, reduce_bucket_elements: float) -> float:
    sizes = P.weight_tensor_sizes(m, tensor_parallel)
    fill = 0.0
    for size in reversed(sizes[1:]):  # the word embedding is first; its gradient comes last
        if size > reduce_bucket_elements:  # reduced alone, its own block
            fill = 0.0
        elif fill + size > reduce_bucket_elements:  # reduces the bucket first
            fill = size
        else:
            fill += size
    return fill


def zero3_embedding_bucket_residue(m: ModelSpec, tensor_parallel=1,
                                   reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS):
    """Elements of other gradients in ZeRO-3's bucket when the input embedding's gradient reaches it at the end of
    backward (arrays of ``tensor_parallel`` allowed). The gradients reach the bucket in the reverse of their
    registration order (:func:`workbench.params.weight_tensor_sizes`: the untied output layer first, at the loss,
    then the layers from the last, MLP before attention), the embedding's last (a tied weight's hook fires once the
    embedding's backward has added to it); a gradient that would overflow the bucket reduces it first, one larger
    than the bucket is reduced alone (``stage3.py`` ``__add_grad_to_ipg_bucket``). Norms and biases, small, are
    left out. Only a bucket of several gradients is concatenated into a new block for its reduction
    (``reduce_scatter_coalesced``): the embedding's gradient is reduced in one with these when it fits beside them,
    else they are reduced as it arrives and it goes alone. (Traced on one H200: Granite 3.0 8B's width at 10 layers,
    tied 49 k vocabulary, both offloads: four buckets of 451-493 M elements, then the 201 M-element embedding with
    the last 147 M of layer 0, a 664 MiB block beside its fp64 norm copy, where a full bucket's 954 MiB was
    priced.)"""
    if ndim(tensor_parallel) or ndim(reduce_bucket_elements):
        return _per_distinct(lambda t, b: _zero3_embedding_bucket_residue(m, int(t), float(b)), tensor_parallel,
                             reduce_bucket_elements)
    return _zero3_embedding_bucket_residue(m, int(tensor_parallel), float(reduce_bucket_elements))


def offload_accumulation_held_bytes(m: ModelSpec, *, engine, zero_stage, offload_optimizer, num_microbatches,
                                    tensor_parallel, value_bytes, lora,
                                    reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS):
    """DeepSpeed ZeRO-2 with the optimizer on the CPU and gradient accumulation: the 16-bit gradients alive at the
    end of a micro-batch's backward before the accumulation boundary. A gradient larger than ``reduce_bucket_size``
    bypasses the bucket and is replaced by its own clone (the offload's gradient safety); before the boundary that
    clone only goes to its host accumulation buffer and is not freed until the backward ends, so every oversized
    weight's gradient is alive together then, with the last one's original beside its clone (the input
    embedding's, back-propagated last). Read off the allocator history of a Trainer run whose ``reduce_bucket_size``
    "auto" (hidden²) made every large weight oversized (Nemotron Nano 4B's width at 12 layers, accumulation 2: the
    attention, MLP, embedding and output weights' gradients, 3.9 GiB, and one more embedding gradient at the peak,
    benchmarks/results/alloc_history/trainer_h100/); with DeepSpeed's default 5e8 bucket only an embedding of more
    than 500 M elements is oversized. A tied embedding adds one more copy: autograd's input buffer keeps the output
    layer's gradient until the embedding's own arrives and sums the two into a new tensor (four embedding-sized
    blocks at the peak of the replayed trace of StarCoder2 3B's width, tied, through the Trainer: final61, whose
    allocated was -7.4 % without it). 0 elsewhere, and under LoRA (its adapters are small). Arrays allowed but for
    the model."""
    applies = ((engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage == 2) & (offload_optimizer > 0)
               & (num_microbatches > 1) & ~asarray(lora) & (tensor_parallel == 1))
    if not any_true(applies):  # (most plans: the model's weight list is not walked)
        return where(applies, 0.0, 0.0)
    sizes = np.asarray(P.weight_tensor_sizes(m, 1), dtype=float)  # (one tensor-parallel rank: DeepSpeed has no TP)
    held = value_bytes * (_elements_above(sizes, reduce_bucket_elements)
                          + _held_embedding_elements(m, reduce_bucket_elements))
    return where(applies, held, 0.0)


def _elements_above(sizes, bucket):
    """The elements of the tensors of ``sizes`` larger than ``bucket`` (a scalar or an array of buckets, each summed
    on its own), in ``bucket``'s shape."""
    bucket = np.asarray(bucket, dtype=float)
    over = np.where(sizes[..., None] > np.ravel(bucket), sizes[..., None], 0.0).sum(axis=0)
    return over.reshape(np.shape(bucket)) if np.ndim(bucket) else float(over[0])


def _held_embedding_elements(m: ModelSpec, bucket):
    """Embedding-sized gradients held beyond the embedding's own entry among the weights, under ZeRO-2 offload with
    accumulation: the input embedding's original beside its clone, and with a tied weight also the input buffer's sum
    of its two contributions (:func:`offload_accumulation_held_bytes`); none when the embedding fits the bucket."""
    embedding = embedding_elements(m, 1)
    copies = 2.0 if m.tied_embeddings else 1.0  # (the tied weight is among the weights once)
    return where(embedding > np.asarray(bucket, dtype=float), copies * embedding, 0.0)


def offload_accumulation_pending_bytes(m: ModelSpec, *, value_bytes, reduce_bucket_elements):
    """Of :func:`offload_accumulation_held_bytes`, what is not yet alive while the last decoder layer (the first
    one, back-propagated last) is still in its backward: that layer's own oversized gradients and the input
    embedding's (with its extra copy when tied), which come after it. Its working set (with checkpointing, the
    recomputed layer) is alive then instead, and can make that moment the peak: final62's Phi-3 mini run with
    its released window (ZeRO-2 offload, accumulation 2, checkpointed, the Trainer's hidden² bucket) peaked there,
    7 of 8 layers' gradients held beside the recomputed layer (the replayed trace, exact against the GPU; the
    estimate at the end of backward was -7.8 %, blind). Arrays allowed but for the model."""
    sizes = np.asarray(P.weight_tensor_sizes(m, 1), dtype=float)
    layer_sizes = sizes[sizes != embedding_elements(m, 1)]  # the decoder layers' (not the embedding, nor the output)
    return value_bytes * (_elements_above(layer_sizes, reduce_bucket_elements) / m.num_layers
                          + _held_embedding_elements(m, reduce_bucket_elements))


def offload_end_reduction_bytes(m: ModelSpec, *, engine, zero_stage, offload_optimizer, pipeline_parallel,
                                tensor_parallel, value_bytes, lora, overlap_comm=0,
                                reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS, data_parallel=1, nvme_optimizer=0):
    """Bytes DeepSpeed with the optimizer on the CPU adds at the end of backward on one stage, when no activation is
    left (ZeRO-1/2/3). Tied embeddings: the shared weight's gradient hook fires last, once the embedding's
    backward has added to it; its gradient's L2 norm is taken in fp64 (:data:`DS_OFFLOAD_NORM_BYTES_PER_VALUE` per
    value, ``set_norm_for_param_grad_in_gpu``) beside the buckets, and when the weight is larger than
    ``reduce_bucket_size`` its 16-bit gradient bypasses the bucket and is still alive (ZeRO-2, and ZeRO-1 with
    ``overlap_comm``, which reduces from the hooks as ZeRO-2 does; ZeRO-1 without it counts its gradients already).
    Replayed on Gemma 3 27B's width (262 k tied vocabulary, 3 layers, H200): 10.5 GiB of fp64
    beside the 2.6 GiB gradient, the run's peak, 21.68 GiB allocated as measured. Untied embeddings: the last
    reductions, below. 0 for other engines and stages, without offload, for LoRA models and for pipeline stages."""
    elems = embedding_elements(m, tensor_parallel)
    zero3_offload = (engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage == 3) & (offload_optimizer > 0)
    hooks_reduce = reduces_from_hooks(zero_stage, overlap_comm)  # ZeRO-3 takes its own branch below
    applies = ((deepspeed_offload12(engine, zero_stage, offload_optimizer) | zero3_offload)
               & (pipeline_parallel == 1) & ~asarray(lora) & (value_bytes < 4))
    layers_total = m.num_layers * layer_params_per_rank(m, tensor_parallel)
    # ZeRO-3 (one rank's slices): the last bucket's gradients concatenated into one new block
    # (``reduce_scatter_coalesced``, :func:`zero12_early_partition_bytes`)
    coalesced = value_bytes * minimum(reduce_bucket_elements, elems + layers_total)
    # ZeRO-3: the embedding's gradient (its own block when larger than the bucket, else the concatenated bucket when
    # it shares one with what is left of the layers: :func:`zero3_embedding_bucket_residue`), the 16-bit copy of its
    # slice, then the fp64 pieces or the fp32 cast, the larger (:func:`zero3_offload_copy_bytes`)
    residue = zero3_embedding_bucket_residue(m, tensor_parallel, reduce_bucket_elements)
    shares = (residue > 0) & (residue + elems <= reduce_bucket_elements)
    zero3_embedding = (where(elems > reduce_bucket_elements, value_bytes * elems,
                             where(shares, value_bytes * (residue + elems), 0.0))
                       + zero3_offload_copy_bytes(elems, value_bytes))
    # ZeRO-3 with the optimizer on NVMe: that bucket's fp32 casts (:func:`zero3_nvme_gradient_list_bytes`). The
    # input embedding is its first slice; an untied output layer, of the same size, its last when the whole model's
    # gradients share the bucket
    end_bucket = where(shares, residue + elems, elems)
    output_last = ~asarray(m.tied_embeddings) & (2 * elems + layers_total <= reduce_bucket_elements)
    # (this function counts whole gradients' copies; the list holds the rank's slices, a data_parallel-th)
    zero3_embedding = zero3_embedding + zero3_nvme_gradient_list_bytes(
        end_bucket, elems / data_parallel, data_parallel=data_parallel, nvme_optimizer=nvme_optimizer,
        counted_first=~output_last, value_bytes=value_bytes)
    if m.tied_embeddings:
        bypass = where(hooks_reduce & (elems > reduce_bucket_elements), value_bytes, 0.0)
        # ZeRO-3: the shared weight's hand-off (traced on one H200: Gemma 3 27B's width at 3 layers, 10.5 GiB beside
        # the flat weights and the bucket, the run's peak)
        return where(applies, where(zero3_offload, zero3_embedding,
                                    (DS_OFFLOAD_NORM_BYTES_PER_VALUE + bypass) * elems), 0.0)
    # untied: the input embedding's gradient comes last. When it overflows the bucket, the bucket is reduced while
    # that gradient still has its own block; each gradient in the bucket is taken to fp64 in turn — the output
    # layer's when no reduction ran before (output and every layer within one bucket), else a layer's largest
    # weight. Then the embedding's own reduction at the end of backward (its fp64 copy; its own block too when it
    # is larger than the bucket). (Traced on one H200: Pythia 2.8B's width at 4 layers, 3.50 GiB at that moment,
    # where the backward's layers peak at 3.1.)
    # ZeRO-1 without overlap_comm keeps every 16-bit gradient until the end of backward and counts them (its term):
    # the embedding's own block is not added again (replayed on Qwen2.5 72B's width at 2 layers: the fp64 copy of
    # the 1.25 G-element embedding gradient beside all the gradients, 28.42 GiB allocated as measured)
    not_counted = (zero_stage != 1) | hooks_reduce
    layer = largest_layer_param_tensor(m, tensor_parallel)
    output_in_last = elems + layers_total <= reduce_bucket_elements
    overflow = (elems + layers_total + elems > reduce_bucket_elements) & not_counted
    reduced = where(output_in_last, elems, layer)
    # ZeRO-3: beside the concatenated bucket, the slice's 16-bit copy, its fp64 pieces, then its fp32 cast; the
    # bucket the embedding's arrival reduces holds what is left of the layers (:func:`zero3_embedding_bucket_residue`)
    zero3_copy = zero3_offload_copy_bytes(reduced, value_bytes)
    trigger_bucket = where((residue > 0) & ~shares, residue, minimum(reduce_bucket_elements, elems + layers_total))
    zero3_trigger = value_bytes * trigger_bucket
    # (NVMe: the bucket's other fp32 casts, the output layer its last slice, a layer's largest weight as a bound)
    zero3_copy = zero3_copy + zero3_nvme_gradient_list_bytes(trigger_bucket, reduced / data_parallel,
                                                             data_parallel=data_parallel,
                                                             nvme_optimizer=nvme_optimizer, value_bytes=value_bytes)
    trigger = (where(overflow, value_bytes * elems, 0.0)
               + where(zero3_offload, zero3_trigger + zero3_copy, DS_OFFLOAD_NORM_BYTES_PER_VALUE * reduced))
    own = where((elems > reduce_bucket_elements) & not_counted, value_bytes, 0.0)
    # ZeRO-3 hands the untied embedding's slice over as the tied one's (fp64 in pieces of at most
    # DS_ZERO3_NORM_CHUNK_ELEMENTS), not as ZeRO-1/2's whole fp64 copy (DeepSeek LLM 67B's width at 2 layers, both
    # offloads, replayed: 1.56 GiB gradient, its 1.56 GiB copy and 3.13 GiB fp32 cast at the end of backward, 8.81 GiB
    # allocated as measured; the whole-tensor copy priced it 1.6 GiB higher)
    last = where(zero3_offload, zero3_embedding, (DS_OFFLOAD_NORM_BYTES_PER_VALUE + own) * elems)
    return where(applies, maximum(trigger, last), 0.0)


def untied_output_gradient_bytes(m: ModelSpec, *, tensor_parallel, pipeline_parallel, last, engine, zero_stage,
                                 overlap_comm, num_microbatches, value_bytes, lora):
    """The untied output layer's 16-bit weight gradient, alive through every transformer layer's backward under
    DeepSpeed ZeRO-0 and ZeRO-1 without ``overlap_comm``: their gradient hooks do not reduce
    (``stage_1_and_2.py`` ``process_gradients``; ZeRO-0 has no hooks), so the gradient of the output layer — the
    first weight back-propagated — stays as ``.grad`` until the reduction after backward. At the start of backward
    no other gradient exists (:func:`backward_gradient_bytes`), so this one is added to the layer's transient.
    With accumulation the gradients already persist; 0 for the Megatron engine, ZeRO-2/3, LoRA, tied
    embeddings on one stage (:func:`stage_terms` counts that gradient itself) and non-last stages."""
    vocab = P.model_vocab_size(m, tensor_parallel)
    untied = (not m.tied_embeddings) | (pipeline_parallel > 1)
    applies = ((engine != ENGINE_CODES[Engine.MEGATRON])
               & ((zero_stage == 0) | ((zero_stage == 1) & (overlap_comm <= 0)))
               & (num_microbatches <= 1) & last & untied & ~asarray(lora))
    return where(applies, value_bytes * vocab * m.hidden_size / tensor_parallel, 0.0)


def unreduced_gradient_growth_bytes(m: ModelSpec, *, layers, kept_per_layer, tensor_parallel, engine, zero_stage,
                                    overlap_comm, num_microbatches, value_bytes, lora):
    """What the layers' 16-bit weight gradients add to the backward peak where nothing reduces them during backward
    (DeepSpeed ZeRO-0, ZeRO-1 without ``overlap_comm``: ``stage_1_and_2.py`` ``process_gradients`` only sets up the
    buckets; the reduction waits for the end of backward), beyond the start of backward that
    :func:`backward_gradient_bytes` prices.

    While layer j of the stage's L layers (counted in backward order) is back-propagated, j layers' gradients exist
    (v·p each, p = :func:`layer_params_per_rank`) and j layers' kept activations are freed, beside the same layer
    transient: ``held − j·kept + j·v·p + transient``. That is largest at j = 0 or at j = L − 1, so the growth over
    the start is ``max(0, (L − 1)·(v·p − kept))``. Without recompute a layer keeps far more than its gradient and
    the growth is 0; with full recompute it keeps only its input, and the first layer's backward runs beside the
    other layers' gradients. 0 with gradient accumulation (the gradients already persist), LoRA (adapter gradients
    only), the Megatron engine (its gradient buffer always counts), ZeRO-2/3 and ZeRO-1 with ``overlap_comm``
    (they reduce during backward)."""
    applies = ((engine != ENGINE_CODES[Engine.MEGATRON])
               & ((zero_stage == 0) | ((zero_stage == 1) & (overlap_comm <= 0)))
               & (num_microbatches <= 1) & ~asarray(lora))
    per_layer = value_bytes * layer_params_per_rank(m, tensor_parallel)
    growth = maximum(0.0, (layers - 1) * (per_layer - kept_per_layer))
    return where(applies & (layers > 1), growth, 0.0)


def backward_gradient_bytes(gradient_bytes, *, engine, zero_stage, num_microbatches, param_bytes,
                            offload_optimizer=0, fp32_grad_partition=1):
    """How much of :func:`model_state_bytes`'s ``gradients`` is allocated at the backward peak (its first layer).

    DeepSpeed ZeRO-0/1/2 set the 16-bit ``.grad`` tensors to ``None`` after each step (``zero_grad(
    set_to_none=True)``) and backward allocates them layer by layer while it frees activations, so at the start of
    backward — the activation peak — none exist unless an earlier micro-batch of the same step (gradient
    accumulation) left them. Measured on H200: ZeRO-1 and ZeRO-2 on 2 GPUs peak at the same 39.6 GiB without
    recompute, and every ZeRO-0/1/2 run without recompute lies within 0.3% once they are left out. Megatron's DDP
    gradient buffer and ZeRO-3's flat gradient partition are allocated once and always count."""
    mixed = param_bytes < 4
    zero3_flat = (zero_stage >= 3) & mixed & (fp32_grad_partition > 0) & (offload_optimizer <= 0)
    persistent = (engine == ENGINE_CODES[Engine.MEGATRON]) | zero3_flat | (num_microbatches > 1)
    return where(persistent, gradient_bytes, 0.0)


# ================================================================================================================
# Activations (Korthikanti et al. 2022, generalised)
# ================================================================================================================
def hf_softmax_in_model_dtype(m: ModelSpec) -> bool:
    """Whether a transformers model's eager attention computes its softmax in the model dtype: GPT-2
    (``models/gpt2/modeling_gpt2.py`` ``eager_attention_forward``: ``softmax(attn_weights)`` then ``.type(value
    .dtype)``), the one supported family with a learned position table; every other supported family calls
    ``softmax(..., dtype=torch.float32).to(query.dtype)`` (transformers 5.x)."""
    return m.implementation is Implementation.TRANSFORMERS and m.position_embedding == "learned"


def _hf_norm_extra_bytes_per_element(m: ModelSpec, *, value_bytes, frozen_norms=0.0):
    """What a transformers RMSNorm keeps per element beyond its 16-bit input (:func:`hf_layer_extra_bytes_per_token`:
    the fp32 input, the weight product's operand w unless frozen, less the v counted generically); 0 for LayerNorm."""
    from workbench.specs import Normalization

    if m.normalization is not Normalization.RMSNORM:
        return 0.0
    w = 4.0 if m.sandwich_norm or m.post_norm else value_bytes  # Gemma 2/3, OLMo 2/3: the weight product in fp32
    return 4 + w * (1.0 - np.asarray(frozen_norms, dtype=float)) - value_bytes


def _hf_mlp_extra_bytes_per_token(m: ModelSpec, *, value_bytes):
    """What a transformers dense MLP keeps per token beyond the generic count (:func:`hf_layer_extra_bytes_per_token`):
    a gated MLP one v·f more, GPT-2's op-by-op ``gelu_new`` three; 0 for MoE layers."""
    if m.is_moe:
        return 0.0
    if m.is_gated:
        return value_bytes * m.ffn_hidden_size
    if m.gelu_unfused:  # GPT-2's gelu_new (ModelSpec.gelu_unfused)
        return 3 * value_bytes * m.ffn_hidden_size
    return 0.0


def hf_layer_extra_bytes_per_token(m: ModelSpec, *, value_bytes, frozen_norms=0.0):
    """Bytes per token one transformers decoder layer keeps for backward beyond :func:`layer_activation_bytes`'
    generic count (which is the fused-kernel count: a norm keeps its 16-bit input, the linears their 16-bit inputs,
    the gated MLP its fc1 output and fc2 input). transformers runs these ops unfused in eager PyTorch, and each
    op's autograd node keeps its own inputs (v = value bytes; w = the norm's weight-product operand; ``frozen_norms``
    = 1 when the norm weights do not train, as under LoRA, so the weight product keeps nothing for them):

    * RMSNorm, Llama style (``models/llama/modeling_llama.py`` ``LlamaRMSNorm``: ``x.to(float32)``, ``pow(2).mean``,
      ``x * rsqrt(...)``, ``weight * x.to(dtype)``): the fp32 input (4 bytes, kept by pow and mul), the 16-bit
      down-cast (v, kept for the weight's gradient) and the 16-bit output (v, kept by the next linears):
      4 + v·(1 − frozen) + v per element instead of 2v; Gemma 2/3 (``Gemma2RMSNorm``: the product with
      ``1 + weight`` in fp32) keep the fp32 normalised value instead of the down-cast (w = 4). Post-attention and
      post-MLP norms (Gemma 2/3 ``sandwich_norm``) feed the residual, not a linear: 4 + w·(1 − frozen) instead of v.
      Per-head Q/K norms (Qwen3, Gemma 3) keep 4 + w·(1 − frozen) per element of q and k instead of v.
    * gated MLP (``down_proj(act_fn(gate_proj(x)) * up_proj(x))``): the activation keeps the gate output, the
      product keeps the activation's output and the up output, down_proj keeps the product: 4·v·f, one v·f more.
    * GPT-2's ``gelu_new`` (``NewGELUActivation``: ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` op by op) keeps
      three more f-wide tensors, and under SDPA its q and k are made contiguous copies (``c_attn`` output split):
      3·v·f + 2·v·q. Eager attention's ``torch.matmul`` copies q, k and v into its batched matmuls (the copies it
      keeps are :func:`layer_activation_bytes`' Q, K and V) and nothing else keeps the split views: 3·v·f (counted
      by ``benchmarks/hf_lora_saved_tensors_cpu.py``).
    * Gemma 2's eager attention soft-caps the scores (``tanh(scores / cap) · cap``): tanh keeps its output, v per
      score (a·s per token).
    * eager attention with grouped-query heads (1 < kv heads < heads): ``repeat_kv`` expands K and V to every query
      head (``expand`` then ``reshape``, a copy unless one kv head makes it a view) and the two matmuls keep those
      copies, not the kv-sized ones: 2·v·(q − kv) more. SDPA takes the grouped heads as they are (``enable_gqa``).
    * Phi-3's fused ``qkv_proj`` (``fused_projections``) under SDPA: the kernel keeps v, a view of the fused output,
      so the q and k parts of that storage stay alive beside the rotated copies it keeps too: v·(q + kv) more (eager
      attention's matmuls copy v and keep no view). On H200 the Phi-3 sdpa runs of the corpus were 2.9-6.5 % under
      without it (24 MiB per layer at 2k tokens for Phi-3 mini, the gap the allocator replay shows per layer).

    Checked on the CPU by counting every tensor alive after one layer's forward (2 layers less 1) for toy configs
    of Llama, Qwen3, Gemma 2, GPT-2, GPT-NeoX and Phi-3 with and without LoRA, eager attention: per layer within
    0.5 %. MoE layers: only the norms."""
    from workbench.specs import Positions

    v = value_bytes
    per_norm = _hf_norm_extra_bytes_per_element(m, value_bytes=v, frozen_norms=frozen_norms)
    extra = 2 * m.hidden_size * per_norm  # the two norms that feed linears
    if m.sandwich_norm:
        extra = extra + 2 * m.hidden_size * per_norm
    if m.qk_norm:
        extra = extra + (m.query_projection_size + m.kv_projection_size) * per_norm
    extra = extra + _hf_mlp_extra_bytes_per_token(m, value_bytes=v)
    if (not m.is_moe and not m.is_gated and m.position_embedding is Positions.LEARNED
            and not m.attention.materialises_scores):  # GPT-2 under SDPA: q and k made contiguous
        extra = extra + 2 * v * m.query_projection_size
    from workbench.hf import soft_capped

    if soft_capped(m) and m.attention is AttentionImpl.UNFUSED:  # Gemma 2's soft-capped scores
        extra = extra + v * m.num_attention_heads * m.seq_length
    if m.fused_projections and not m.attention.materialises_scores:  # Phi-3's qkv storage, held by SDPA's v view
        extra = extra + v * (m.query_projection_size + m.kv_projection_size)
    groups = m.num_query_groups or m.num_attention_heads
    if m.attention is AttentionImpl.UNFUSED and 1 < groups < m.num_attention_heads:
        # eager attention's repeat_kv: K and V expanded to every query head are copies its matmuls keep
        extra = extra + 2 * v * (m.query_projection_size - m.kv_projection_size)
    return extra


def dense_mlp_bytes_per_token(m: ModelSpec, *, value_bytes):
    """Bytes per token a dense MLP's intermediates keep for backward (before tensor parallel; the generic count of
    :func:`layer_activation_bytes`): GeLU v·f (fc1 out) + v·f (fc2 in), SwiGLU v·2f + v·f."""
    v, f = value_bytes, m.ffn_hidden_size
    mlp = v * (2 if m.is_gated else 1) * f + v * f
    if m.is_gated and m.attention is AttentionImpl.UNFUSED and m.implementation is not Implementation.TRANSFORMERS:
        # megatron-core's local layer spec without fused kernels (bias_activation_fusion off, the unfused
        # stack): its glu computes silu(x_glu) * (x_linear + glu_linear_offset); the sum is a new tensor the
        # product keeps beside the activation's output, and the product is fc2's input (transformer/mlp.py,
        # 0.16 and 0.19). The fused bias-SwiGLU kernel and Transformer Engine keep only fc1's output and fc2's
        # input.
        mlp = mlp + 2 * v * f
    return mlp


def mlp_block_activation_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                               value_bytes):
    """The part of a dense layer's :func:`layer_activation_bytes` (no recompute) that its MLP block keeps: the
    pre-MLP norm's input and fc1's input (2·v·sbh, ÷t with sequence parallel), the intermediates
    (:func:`dense_mlp_bytes_per_token`) and, for a transformers model, what its unfused norm and MLP ops keep
    beyond them (:func:`hf_layer_extra_bytes_per_token`'s share of one norm and the MLP). Backward frees it before
    the attention block's weights get their gradients. 0 for MoE models."""
    if m.is_moe:
        return 0.0
    s, b, t, v, h = m.seq_length / context_parallel, micro_batch, tensor_parallel, value_bytes, m.hidden_size
    rep = where(sequence_parallel, 1.0 / t, 1.0)
    per_token = dense_mlp_bytes_per_token(m, value_bytes=v) / t + 2 * v * h * rep
    if m.implementation is Implementation.TRANSFORMERS:
        per_token = per_token + (_hf_norm_extra_bytes_per_element(m, value_bytes=v) * h
                                 + _hf_mlp_extra_bytes_per_token(m, value_bytes=v)) / t
    return per_token * s * b


def mlp_block_norm_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                         value_bytes) -> dict:
    """The parts of :func:`mlp_block_activation_bytes` that are not the MLP's own intermediates:
    ``{"mlp_norm": the pre-MLP norm's 16-bit input and what a transformers RMSNorm keeps beyond it,
    "mlp_fc1_input": fc1's input}`` (÷t with sequence parallel, as there). 0 for MoE models."""
    if m.is_moe:
        return dict(mlp_norm=0.0, mlp_fc1_input=0.0)
    s, b, t, v, h = m.seq_length / context_parallel, micro_batch, tensor_parallel, value_bytes, m.hidden_size
    rep = where(sequence_parallel, 1.0 / t, 1.0)
    norm = v * h * rep
    if m.implementation is Implementation.TRANSFORMERS:
        norm = norm + _hf_norm_extra_bytes_per_element(m, value_bytes=v) * h / t
    return dict(mlp_norm=norm * s * b, mlp_fc1_input=v * h * rep * s * b)


def mlp_second_weight_pending_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel,
                                    context_parallel, value_bytes):
    """Bytes of a gated MLP block still alive when its second weight gets its gradient: backward runs the output
    projection, then the product, then the up projection's branch (created last in the forward, so run first by
    autograd) before the gate's; at the up projection's gradient hook the gate projection's output (saved for the
    activation's backward) and the gradient flowing into the activation, two f-sized tensors per token, are alive.
    0 for a non-gated or an MoE block (its second weight, fc1, needs only the block's input)."""
    if m.is_moe or not m.is_gated:
        return 0.0
    s, b, t = m.seq_length / context_parallel, micro_batch, tensor_parallel
    return 2.0 * value_bytes * m.ffn_hidden_size / t * s * b


def layer_activation_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                           recompute, value_bytes, softmax_bytes=SOFTMAX_BYTES_PER_SCORE,
                           dropout_mask_bytes=DROPOUT_MASK_BYTES_PER_SCORE, expert_tensor_parallel=None,
                           moe_token_factor=1.0, moe_deepspeed=0, frozen_norms=0.0, moe_recompute=0):
    """Activation bytes one transformer layer keeps for backward, for one micro-batch, on one rank.

    Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 — ``sbh(10 + 24/t + 5as/(ht))`` for 16-bit activations,
    GeLU MLP (f = 4h), multi-head attention, dropout on — generalised term by term:

    * replicated inside the TP group (divided by t with sequence parallel): two norm inputs 2·v·sbh, QKV and fc1
      inputs 2·v·sbh, two hidden-dropout masks 2·sbh (1 byte each, only when hidden dropout > 0);
    * split by t: Q v·sb·a·d, K and V 2·v·sb·g·d (GQA), projection input v·sb·a·d, MLP: GeLU v·sbf (fc1 out) +
      v·sbf (fc2 in), SwiGLU v·sb·2f + v·sbf;
    * attention core (unfused only): softmax output, plus dropout mask and output (v·as²b) when attention dropout
      > 0. The paper's 5as²b is a 16-bit softmax (2) + 1-byte mask + 16-bit output (``softmax_bytes=2,
      dropout_mask_bytes=1``); megatron-core keeps an fp32 softmax and the H200 calibration shows 4 + v bytes per
      score (the defaults). Flash attention keeps only a softmax statistic 4·asb;
    * context parallel divides the local sequence by cp (attention scores become (s/cp)·s);
    * MoE (:func:`moe_activation_bytes`) replaces the MLP's intermediates by the experts' and adds the router's;
      DeepSpeed-MoE (``moe_deepspeed``) adds its gate's fp32 input and its combine's copies
      (:func:`workbench.dsmoe.extra_activation_bytes`);
    * selective recompute drops the attention core, and with ``moe_recompute`` (1 ``moe_act``, 2 ``moe``) what
      :func:`moe_recomputed_bytes` says; full recompute keeps only the layer input v·sbh (÷t with SP);
    * a transformers model adds what its unfused ops keep (:func:`hf_layer_extra_bytes_per_token`; ``frozen_norms``
      1 under LoRA).
    """
    s = m.seq_length / context_parallel
    s_full = m.seq_length
    b = micro_batch
    h = m.hidden_size
    t = tensor_parallel
    v = value_bytes
    rep = where(sequence_parallel, 1.0 / t, 1.0)
    hidden_mask = 1.0 if m.hidden_dropout > 0 else 0.0
    sbh = s * b * h
    norm_inputs = 2 * v * sbh * rep if m.sandwich_norm else 0.0  # the post-attention and post-MLP norms
    replicated = (4 * v + 2 * hidden_mask) * sbh * rep + norm_inputs
    qkv = v * s * b * (m.query_projection_size + 2 * m.kv_projection_size) / t
    if m.attention.materialises_scores and m.implementation is not Implementation.TRANSFORMERS:
        # megatron-core's DotProductAttention repeats K and V to all heads (repeat_interleave) before its two
        # matmuls, which keep those copies: Q, K and V at a heads each
        qkv = v * s * b * 3 * m.query_projection_size / t
    if m.qk_norm:  # the per-head norms keep their inputs (the q and k projections' outputs)
        qkv = qkv + v * s * b * (m.query_projection_size + m.kv_projection_size) / t
    proj_in = v * s * b * m.query_projection_size / t
    moe_dropped = 0.0
    if m.is_moe:
        moe_kw = dict(tokens=s * b, tensor_parallel=t, sequence_parallel=sequence_parallel,
                      expert_tensor_parallel=t if expert_tensor_parallel is None else expert_tensor_parallel,
                      token_factor=moe_token_factor, value_bytes=v)
        mlp = moe_activation_bytes(m, **moe_kw, deepspeed=moe_deepspeed)
        if any_true(asarray(moe_recompute) > 0):
            moe_dropped = moe_recomputed_bytes(m, **moe_kw, moe_recompute=moe_recompute)
        if any_true(asarray(moe_deepspeed) > 0):
            mlp = mlp + where(asarray(moe_deepspeed) > 0,
                                 dsmoe.extra_activation_bytes(m, tokens=s * b, value_bytes=v), 0.0)
    else:
        mlp = dense_mlp_bytes_per_token(m, value_bytes=v) * s * b / t
    if m.attention.materialises_scores:
        # the softmax output kept for its backward: fp32 unfused (softmax_bytes), 16-bit fused-softmax; then what
        # probs x V keeps: the dropout mask + its 16-bit output, or, without dropout, the 16-bit probabilities
        # (unfused casts its fp32 softmax down; fused-softmax's output is that tensor already)
        # transformers' GPT-2 eager attention takes the softmax in the model dtype (the other families up-cast to
        # fp32 first): like fused-softmax, one 16-bit tensor that probs x V keeps too
        fused = m.attention is AttentionImpl.FUSED_SOFTMAX or hf_softmax_in_model_dtype(m)
        kept_softmax = v if fused else softmax_bytes
        if m.attention_dropout > 0:
            per_score = kept_softmax + dropout_mask_bytes + v
        else:
            per_score = kept_softmax + (0 if fused else v)
        core = per_score * m.num_attention_heads * s * s_full * b / t
    else:
        core = 4.0 * m.num_attention_heads * s * b / t
    full_layer = replicated + qkv + proj_in + mlp + core
    if m.implementation is Implementation.TRANSFORMERS:
        full_layer = full_layer + s * b * hf_layer_extra_bytes_per_token(m, value_bytes=v,
                                                                         frozen_norms=frozen_norms) / t
    selective = full_layer - core - moe_dropped
    checkpoint_only = v * sbh * rep
    return _where(recompute >= 2, checkpoint_only, _where(recompute == 1, selective, full_layer)), full_layer


def zero3_linear_keeps_inputs(m: ModelSpec) -> bool:
    """Whether DeepSpeed ZeRO-3's own linear (``LinearFunctionForZeroStage3``, in place of ``F.linear`` for every
    ZeRO-3 run) makes a model's frozen projections keep their inputs (:func:`lora_activation_bytes_per_token`'s
    ``inputs_kept``): for every transformers family but GPT-2, whose ``Conv1D`` projections call ``torch.addmm``,
    which the replacement does not touch (autograd then keeps no input of a frozen weight). Found after the reveal
    of final59: a GPT-2-type LoRA plan at ZeRO-3 priced +33.8 % allocated with them kept."""
    from workbench.specs import Positions

    return not (m.implementation is Implementation.TRANSFORMERS and m.position_embedding is Positions.LEARNED)


def sliding_window_bias_bytes(m: ModelSpec, *, micro_batch, value_bytes) -> float:
    """Bytes one sliding-window layer of a transformers model keeps from its forward to its backward under sdpa
    (``ModelSpec.sliding_window``): once the sequence reaches the window, transformers passes the layer a boolean
    mask of ``b x 1 x s x s`` (masking_utils ``_ignore_causal_mask_sdpa`` skips it only below the window), and
    PyTorch's ``scaled_dot_product_attention`` converts it into an additive bias in the query's dtype
    (``convert_boolean_attn_mask``) that the kernel saves for its backward: b·s²·v per layer. Read off an H200's
    allocator history (Gemma 3 4B's width, two sliding layers at 4 k tokens: a 32 MiB block per layer from the
    forward's attention to that layer's backward, ``benchmarks/results/alloc_history/replay_miss/``). 0 without a
    window, below it, or with eager attention (whose additive mask transformers builds once for all layers)."""
    if not sliding_window_masked(m):
        return 0.0
    return micro_batch * float(m.seq_length) ** 2 * value_bytes


def sliding_window_masked(m: ModelSpec) -> bool:
    """Whether a transformers model's sliding-window layers get an explicit mask under sdpa: a window, sdpa (the
    flash attention setting; eager builds one shared additive mask, FlashAttention 2/3 apply the window in the
    kernel) and a sequence that reaches the window (masking_utils skips the mask below it)."""
    from workbench.specs import AttentionImpl

    return (m.sliding_window is not None and m.attention is AttentionImpl.FLASH
            and m.seq_length >= m.sliding_window)


def sliding_window_repeat_bytes(m: ModelSpec, *, micro_batch, value_bytes) -> float:
    """Bytes one sliding-window layer of a transformers model with grouped K/V heads (1 < kv heads < heads) keeps
    beyond the generic count once it gets its mask under sdpa (:func:`sliding_window_bias_bytes`' condition):
    transformers hands SDPA the grouped heads as they are (``enable_gqa``) only without a mask; with one,
    ``use_gqa_in_sdpa`` is false on CUDA and ``repeat_kv`` copies K and V to every query head before the kernel,
    which keeps those copies for its backward (transformers/integrations/sdpa_attention.py, 5.17):
    b·s·2·v·(q − kv). One kv head makes the repeat a view (no copy). Found on a blind batch's allocator replay
    after its reveal (edge63: StarCoder2 7B, 36/4 heads, every layer windowed at 4 k tokens, its allocated peak
    6.5 % over the default model's, 128 MiB a layer at micro-batch 2); 0 where the bias is."""
    groups = m.num_query_groups or m.num_attention_heads
    if not 1 < groups < m.num_attention_heads or not sliding_window_masked(m):
        return 0.0
    return micro_batch * float(m.seq_length) * 2 * value_bytes * (m.query_projection_size - m.kv_projection_size)


def sliding_window_layer_bytes(m: ModelSpec, *, micro_batch, value_bytes) -> float:
    """What one sliding-window layer keeps beyond the generic count under sdpa once the sequence reaches its
    window: its mask's bias (:func:`sliding_window_bias_bytes`) and, with grouped K/V heads, K and V repeated to
    every query head (:func:`sliding_window_repeat_bytes`)."""
    sizes = dict(micro_batch=micro_batch, value_bytes=value_bytes)
    return sliding_window_bias_bytes(m, **sizes) + sliding_window_repeat_bytes(m, **sizes)


def sliding_window_masked_share(m: ModelSpec) -> float:
    """The share of a transformers model's layers whose sdpa call gets an explicit mask (its sliding-window layers
    once the sequence reaches the window, :func:`sliding_window_bias_bytes`' condition): transformers then calls
    ``scaled_dot_product_attention`` with ``is_causal=False`` (sdpa_attention.py: causal only without a mask), so the
    kernel computes every block of the s×s scores where a causal call skips the upper half. 0 otherwise."""
    return m.sliding_window_layers / m.num_layers if sliding_window_masked(m) else 0.0


def sliding_window_kept_bytes(m: ModelSpec, *, micro_batch, value_bytes) -> float:
    """What every sliding-window layer of a micro-batch keeps together without checkpointing:
    :func:`sliding_window_layer_bytes` times ``sliding_window_layers`` (a transformers model runs unpipelined)."""
    layer = sliding_window_layer_bytes(m, micro_batch=micro_batch, value_bytes=value_bytes)
    return layer * m.sliding_window_layers if layer else 0.0  # (no window: sliding_window_layers is None)


def lora_adapters_in_fp32(m: ModelSpec, *, zero_stage, zero_init, engine=0):
    """Whether LoRA's adapters train in fp32: a transformers model built inside ``deepspeed.zero.Init`` (ZeRO-3's
    default for them, the Trainer's way) gets its adapters from peft after the build, in fp32 (peft's
    ``autocast_adapter_dtype``), and DeepSpeed 0.19.8's engine leaves every parameter of such a model uncast
    (``_cast_module_mixed_precision``: "ZeRO-Init params are already at the configured dtype"); peft then casts each
    adapter's input to fp32 (``_cast_input_dtype``) and adds the fp32 adapter output. Elsewhere the engine casts the
    adapters to the model's 16 bits. (Allocator histories of two Trainer LoRA plans at ZeRO-3, final59: fp32 copies
    of every adapted input and output, 6-15 % of the peak; benchmarks/results/alloc_history/trainer_h100/.) Arrays
    allowed."""
    return ((np.asarray(zero_stage) >= 3) & (np.asarray(zero_init) > 0)
            & (np.asarray(engine) != ENGINE_CODES[Engine.MEGATRON])
            & (m.implementation is Implementation.TRANSFORMERS))[()]


def lora_activation_bytes_per_token(m: ModelSpec, *, rank, targets, dropout, value_bytes, inputs_kept=False,
                                    adapter_bytes=None):
    """Bytes per token that LoRA adds to (or, negative, takes from) one layer's :func:`layer_activation_bytes`
    (full fine-tune count, t = 1; ``frozen_norms`` is that function's own part).

    peft's ``Linear.forward`` (``tuners/lora/layer.py``) runs the frozen projection, then
    ``lora_B(lora_A(dropout(x))) * scaling`` in Python; GPT-2's ``Conv1D`` is wrapped alike (``fan_in_fan_out``).
    In a transformers model the frozen projection is a plain ``F.linear``/``addmm`` whose weight needs no gradient,
    so autograd keeps no copy of its input (only the weight, a parameter). Per projection group — q/k/v (input h),
    o (a·d), the MLP's first projections (h) and its down projection (f; dense MLPs) — the layer then keeps:

    * no adapter in the group: nothing (the full-fine-tune count's v per input value goes), except o's input under
      SDPA/flash attention, which is the attention kernel's own output (transformers' ``sdpa_attention_forward``
      transposes it back to a view) and which the kernel keeps for its backward; eager attention's o input is a
      fresh copy (``attn_output.transpose(1, 2)`` then ``reshape``) that only o keeps;
    * adapters without dropout: the input once, v per value, which every adapter's A keeps (the same tensor);
    * adapters with ``dropout`` > 0: per adapter module, the dropped copy (v, kept by A) and its 1-byte mask
      (``torch.native_dropout`` on a GPU);

    and per adapter module A's output, r values (kept by B). Fused projections are one module: GPT-2's ``c_attn``
    and GPT-NeoX's ``query_key_value`` (:func:`workbench.params.hf_fused_qkv`), Phi-3's ``qkv_proj`` and ``gate_up_proj``; gate and
    up count as two in the other gated MLPs.

    Counted on the CPU, storage by storage (``benchmarks/hf_lora_saved_tensors_cpu.py``, toy GPT-2 with
    ``c_attn`` + ``c_proj`` targets and Llama with q, k, v, o, lora_dropout 0.05, eager attention): exactly the
    difference with and without LoRA. A megatron-core layer keeps its linears' inputs whether their weights train
    or not (``LinearWithGradAccumulationAndAsyncCommunication`` saves them unconditionally), so other
    implementations add only the adapters' own tensors: the dropped copies and r values per target, all charged
    v + 1 bytes.

    ``inputs_kept``: the frozen projections keep their inputs all the same, as under DeepSpeed ZeRO-3, whose own
    linear (``LinearFunctionForZeroStage3``, which ``deepspeed.zero.Init`` and the engine's ``Init(module=model)``
    put in place of ``F.linear``) saves its input whether the weight trains or not: a transformers layer then keeps
    the full fine-tune's inputs and adds only the adapters' dropped copies, masks and r values (allocator histories
    of two LoRA plans at ZeRO-3, ``benchmarks/results/alloc_history/lora_z3_h100/``).

    ``adapter_bytes``: the adapters' own dtype where it differs from the model's (4: fp32 adapters,
    :func:`lora_adapters_in_fp32`): peft casts each adapter's input to it, a copy per adapter module that A keeps
    (dropped or not) in place of the shared 16-bit input, and A's r outputs are kept at that width."""
    if not rank:
        return 0.0
    v = value_bytes
    a = v if adapter_bytes is None else adapter_bytes
    h, q = m.hidden_size, m.query_projection_size
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    targets = set(targets)
    if m.implementation is not Implementation.TRANSFORMERS:
        k = m.moe_top_k if m.is_moe else 1
        inputs = {"q": h, "k": h, "v": h, "o": q, "gate": h * k if m.is_gated else 0, "up": h * k, "down": f * k}
        live = [t for t in targets if inputs[t]]
        return (rank * len(live) + (sum(inputs[t] for t in live) if dropout > 0 else 0)) * (v + 1)
    qkv = len(targets & {"q", "k", "v"})
    # (input width, adapter modules, whether another op keeps that input anyway)
    kept = bool(inputs_kept)
    groups = [(h, min(qkv, 1) if P.hf_fused_qkv(m) else qkv, kept),
              (q, int("o" in targets), kept or not m.attention.materialises_scores)]
    if not m.is_moe:  # MoE experts are fused 3-D weights peft does not wrap; their inputs are moe_activation_bytes'
        fc1 = len(targets & ({"gate", "up"} if m.is_gated else {"up"}))
        fc1 = min(fc1, 1) if m.fused_projections else fc1  # Phi-3's gate_up_proj: one peft module
        groups += [(h, fc1, kept), (f, int("down" in targets), kept)]
    total = 0.0
    for width, modules, shared in groups:
        if dropout > 0:
            adapters = modules * (a + 1) * width
        elif a != v:  # a cast copy per adapter module, kept by its A
            adapters = modules * a * width
        else:
            adapters = v * width if modules and not shared else 0.0
        total += adapters - (0.0 if shared else v * width) + modules * rank * a
    return total


def lora_frees_down_input(m: ModelSpec, *, rank, targets, inputs_kept=False) -> bool:
    """Whether a transformers model under LoRA keeps nothing of its dense MLP's down-projection input (the frozen
    projection keeps no input and no adapter sits on it: :func:`lora_activation_bytes_per_token`), so a recomputed
    layer's backward frees nothing before its MLP's gradients (:func:`hf_recomputed_working_bytes_per_token`).
    ``inputs_kept``: the frozen projections keep their inputs (DeepSpeed ZeRO-3's linear), so it never does."""
    return (bool(rank) and not inputs_kept and m.implementation is Implementation.TRANSFORMERS and not m.is_moe
            and "down" not in set(targets))


def hf_recomputed_working_bytes_per_token(m: ModelSpec, *, value_bytes, lora_free_down=0):
    """Bytes per token (t = 1) a recomputed transformers layer's backward holds on top of its saved tensors (its
    :func:`layer_activation_bytes` with LoRA's part): the gradients of its MLP's f-wide intermediates once the
    product's has been consumed — down_proj's input gradient and the two the product's backward makes, less the
    product itself, which down_proj kept and has released: 2·v·f gated, v·f otherwise (counted on the CPU for a toy
    Mistral layer with LoRA at the peak after the first adapter gradient). ``lora_free_down`` (1 under LoRA when
    nothing kept the product, :func:`lora_frees_down_input`): nothing was released, one v·f more (a toy Llama with
    q, k, v, o adapters and SDPA, ``benchmarks/hf_lora_saved_tensors_cpu.py --recompute``: at its peak, in the
    product's backward, the gate, up and SiLU outputs beside three f-wide gradients)."""
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    return (1 + m.is_gated + lora_free_down) * value_bytes * f


def moe_expert_tokens(tokens, *, top_k, tensor_parallel, expert_tensor_parallel, token_factor=1.0):
    """Token copies one rank's local experts process per micro-batch: the ``tokens`` (s·b/cp) of the layer, split
    over the tensor-parallel group (sequence parallel; megatron-core requires it with expert parallel and TP),
    routed to top-k experts, gathered again over the expert-tensor-parallel group — ``tokens/t · k · tp_e`` on
    average whichever dispatcher moves them (alltoall: each expert-parallel rank sends 1/e of its copies to each
    other rank and receives as many; allgather: the rank keeps the copies routed to its E/e experts out of the
    gathered e·tp_e·tokens/t), times ``token_factor``: dropless, the busiest rank's routing load
    (:func:`workbench.encode.moe_rank_load`, 1 balanced); the capacity factor when inputs are padded to capacity
    (megatron-core ``get_capacity``: ⌈tokens·k/E · factor⌉ per expert)."""
    return tokens / tensor_parallel * top_k * expert_tensor_parallel * token_factor


def moe_router_bytes_per_token(m: ModelSpec, *, value_bytes):
    """What megatron-core's router and token permutation keep for backward per token of one MoE layer (unfused
    path, ``moe_router_load_balancing_type='aux_loss'``, router in the model dtype — ``moe_router_dtype`` None, the
    default; 'fp32' makes the E- and k-wide probabilities 4 bytes), from megatron-core 0.16 ``moe_utils`` /
    ``router.py`` / ``token_dispatcher.py`` (the same calls in Megatron-LM's main branch, 0.20 dev):

    * ``compute_routing_scores_for_aux_loss``: the fp32 softmax over all E logits, kept by the aux loss (4·E), and
      its top-k indices (int64, 8·k);
    * ``topk_routing_with_score_function``: the top-k indices kept by the scatter into the E-wide probabilities
      (8·k) and the fp32 softmax over the k chosen logits (4·k);
    * ``permute``: ``probs.T.contiguous().masked_select(routing_map)`` keeps the transposed probabilities (v·E) and
      the boolean routing map (E); ``index_select`` keeps the sorted token indices (int64, 8·k, reused by
      ``unpermute``'s scatter-add); the experts' activation keeps the permuted probabilities (v·k).

    (5 + v)·E + (28 + v)·k bytes; the router GEMM keeps only its input (the norm's output, counted with the layer's
    norms) and the logits are not kept. Counted on the CPU by ``benchmarks/moe_saved_tensors_cpu.py``."""
    v, e, k = value_bytes, m.num_experts, m.moe_top_k
    return (4 + v + 1) * e + (8 + 8 + 4 + 8 + v) * k


def moe_expert_intermediates(m: ModelSpec, *, deepspeed=0):
    """f-wide tensors (in units of v·f per routed token copy) one megatron-core expert keeps for backward beyond
    fc1's output (2f gated, f otherwise) and fc2's input (f):

    * the unfused stack (megatron-core ``MLP.forward`` with ``bias_activation_fusion`` off — what the workbench's
      unfused attention stands for, as in :func:`layer_activation_bytes`): the glu keeps the activation's output
      and the sum ``x_linear + offset`` (2 gated; the activation's output, 1, otherwise), and the routing
      probabilities are applied after the activation (``intermediate * per_token_scale``), which keeps the
      activation's product as well as fc2's input: 3 gated, 1 otherwise;
    * the fused stack (``weighted_bias_swiglu_impl`` in ``MLP`` and ``TEGroupedMLP``: one kernel takes fc1's output
      and the probabilities): 0 gated; a non-gated expert multiplies its activation by the probabilities in
      PyTorch (TEGroupedMLP ``bias_act_func``), 1;
    * DeepSpeed-MoE (``deepspeed`` > 0) weights the experts' outputs in its combine
      (:func:`workbench.dsmoe.extra_activation_bytes`): the glu's sum and product, 2 gated, 0 otherwise;
    * transformers' MoE blocks (``grouped_mm_experts_forward`` and the eager loop alike: ``act_fn(gate) * up`` on
      the chunked fc1 output):
      the product keeps the activation's output beside the up half, 1 (gated; the rest of what the block keeps is
      :func:`hf_moe_router_bytes_per_token`'s and :func:`hf_moe_copy_bytes`').

    Counted on the CPU (unfused stack) by ``benchmarks/moe_saved_tensors_cpu.py``: 6·v·f per copy, gated."""
    if m.implementation is Implementation.TRANSFORMERS:
        return 1.0 if m.is_gated else 0.0
    unfused = m.attention is AttentionImpl.UNFUSED
    megatron = (3.0 if unfused else 0.0) if m.is_gated else 1.0
    return where(asarray(deepspeed) > 0, 2.0 if m.is_gated else 0.0, megatron)


def hf_moe_router_bytes_per_token(m: ModelSpec):
    """What a transformers MoE block's router keeps for backward per token (transformers 5.x
    ``Qwen3MoeTopKRouter`` / ``Qwen2MoeTopKRouter`` / ``MixtralTopKRouter``: ``F.linear``, ``softmax(...,
    dtype=float32)``, ``topk``, ``router_top_value /= router_top_value.sum(-1)``): the fp32 softmax over all E
    logits (4·E, kept by softmax), the top-k indices (int64, 8·k, kept by topk) and the normalisation's fp32
    top-k values and their sum (4·k + 4, kept by the division). The bf16 logits are not kept (the aux loss is off:
    ``output_router_logits=False``, the configs' default and the measured runs'); Qwen2-MoE's default
    ``norm_topk_prob=False`` skips the division, 4·k + 4 bytes fewer, which this count keeps as an upper bound."""
    e, k = m.num_experts, m.moe_top_k
    return 4 * e + 8 * k + 4 * k + 4


def hf_moe_copy_bytes(m: ModelSpec, *, value_bytes):
    """Bytes per routed token copy a transformers MoE block keeps beyond the permuted (gathered) fc1 input and the
    f-wide tensors of :func:`moe_activation_bytes`, by ``m.experts_implementation``:

    * ``grouped_mm`` (``grouped_mm_experts_forward``, transformers 5.x ``integrations/moe.py``): the down
      projection's output v·h and the routing weight v (both kept by the weighting product
      ``proj_out * sample_weights_g``; Mixtral's weights stay fp32, 2 bytes more), and three int64 index vectors
      (8 bytes a copy each): ``torch.sort``'s permutation, the gather index ``perm // top_k`` and the un-permute
      index ``inv_perm``;
    * ``eager`` (the experts class's loop, e.g. ``Qwen3MoeExperts.forward``): per expert the down projection's output
      and the gathered weight (kept by ``current_hidden_states * top_k_weights[...]``), the weighted output (kept by
      ``index_add_``, whose backward expands it), v·h + v·h + v, and ``torch.where``'s (top-k position, token)
      index pair, one int64 [n, 2] storage: 16 bytes a copy.

    Counted on the CPU by ``benchmarks/hf_moe_saved_tensors_cpu.py`` (``--experts-implementation``)."""
    from workbench.specs import ExpertsImpl

    v = value_bytes
    if m.experts_implementation is ExpertsImpl.EAGER:
        return 2 * v * m.hidden_size + v + 2 * 8
    return v * m.hidden_size + v + 3 * 8


def moe_activation_bytes(m: ModelSpec, *, tokens, tensor_parallel, sequence_parallel, expert_tensor_parallel,
                         token_factor, value_bytes, deepspeed=0):
    """What one MoE layer's MLP block keeps for backward on one rank, per micro-batch (``tokens`` = s·b/cp):

    * router and permutation metadata, :func:`moe_router_bytes_per_token` per token (tokens ÷ t with SP);
      DeepSpeed-MoE (``deepspeed`` > 0): fp32 logits and probabilities, 8·E per token; transformers' blocks:
      :func:`hf_moe_router_bytes_per_token`, plus :func:`hf_moe_copy_bytes` per routed copy;
    * experts, for the :func:`moe_expert_tokens` X copies the rank's experts process: the permuted fc1 input v·X·h,
      fc1 output v·X·f (2f gated) and fc2 input v·X·f, the f-wide ones split over the expert-tensor-parallel group,
      plus :func:`moe_expert_intermediates` (what the activation and the routing probabilities keep);
    * a shared expert (Qwen2-MoE): a dense MLP on every token, fc1 output and fc2 input split over t (plus the glu's
      sum and product on the unfused stack), and its sigmoid gate's product keeps the MLP's output, v·(h + 1) per
      token (÷ t with SP).

    Dropless with top-k = 1, e = 1 and tp_e = t the expert part is the dense MLP's v·sbf·(3, gated)/t plus the
    permuted copy v·X·h. Korthikanti et al.'s dense counting, applied to the routed copies."""
    rep = where(sequence_parallel, 1.0 / tensor_parallel, 1.0)
    v, h, f = value_bytes, m.hidden_size, m.moe_ffn_hidden_size
    x = moe_expert_tokens(tokens, top_k=m.moe_top_k, tensor_parallel=tensor_parallel,
                          expert_tensor_parallel=expert_tensor_parallel, token_factor=token_factor)
    simple_router = 8.0 * m.num_experts
    hf = m.implementation is Implementation.TRANSFORMERS
    if hf:
        router = hf_moe_router_bytes_per_token(m) * tokens * rep
    else:
        router = where(asarray(deepspeed) > 0, simple_router,
                       moe_router_bytes_per_token(m, value_bytes=v)) * tokens * rep
    intermediates = (2 if m.is_gated else 1) * f + f + moe_expert_intermediates(m, deepspeed=deepspeed) * f
    experts = v * x * intermediates / expert_tensor_parallel + v * x * h
    if hf:
        experts = experts + x * hf_moe_copy_bytes(m, value_bytes=v)
    shared = 0.0
    if m.shared_expert_ffn_hidden_size is not None:  # Qwen2-MoE's shared expert: a dense MLP on every token
        fs = m.shared_expert_ffn_hidden_size
        widths = (2 if m.is_gated else 1) * fs + fs
        if m.is_gated:  # what the dense MLP keeps beyond fc1's output and fc2's input (layer_activation_bytes)
            if m.implementation is Implementation.TRANSFORMERS:
                widths = widths + fs  # the up projection's output beside the activation's
            elif m.attention is AttentionImpl.UNFUSED:
                widths = widths + 2 * fs  # the glu's sum and product (megatron-core MLP without fusion)
        # its sigmoid gate (megatron-core SharedExpertMLP.forward: output * sigmoid(linear(x))) keeps the MLP's
        # h-wide output and the gate score
        shared = v * tokens * widths / tensor_parallel + v * tokens * rep * (h + 1)
    return router + experts + shared


def moe_recomputed_bytes(m: ModelSpec, *, tokens, tensor_parallel, sequence_parallel, expert_tensor_parallel,
                         token_factor, value_bytes, moe_recompute):
    """What selective recompute's MoE modules drop from one MoE layer's saved tensors (per micro-batch, one rank):

    * ``moe_recompute`` 1 (``moe_act``, megatron-core ``GroupedMLP``/``TEGroupedMLP``: the activation runs under
      ``CheckpointWithoutOutput``, whose output — fc2's input — is freed after fc2 and recomputed before the
      backward): fc2's input and the activation's own saved tensors, v·X·(1 + :func:`moe_expert_intermediates`)·f
      / tp_e; fc1's output (the checkpoint's input) stays;
    * 2 (``moe``, ``MoELayer.forward`` under ``tensor_parallel.checkpoint``): the whole of
      :func:`moe_activation_bytes` — only the block's input, the norm's output the layer count already has, is kept.
    """
    v, f = value_bytes, m.moe_ffn_hidden_size
    x = moe_expert_tokens(tokens, top_k=m.moe_top_k, tensor_parallel=tensor_parallel,
                          expert_tensor_parallel=expert_tensor_parallel, token_factor=token_factor)
    act = v * x * (1 + moe_expert_intermediates(m)) * f / expert_tensor_parallel
    whole = moe_activation_bytes(m, tokens=tokens, tensor_parallel=tensor_parallel,
                                 sequence_parallel=sequence_parallel, expert_tensor_parallel=expert_tensor_parallel,
                                 token_factor=token_factor, value_bytes=value_bytes)
    code = asarray(moe_recompute)
    return where(code >= 2, whole, where(code == 1, act, 0.0))


def attention_backward_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                             value_bytes, softmax_bytes=SOFTMAX_BYTES_PER_SCORE,
                             dropout_mask_bytes=DROPOUT_MASK_BYTES_PER_SCORE):
    """``(pre_core, working_set)``: bytes of one layer alive while its attention core is back-propagated, for one
    micro-batch on one rank — the layer's tensors saved before the core (the attention norm's and the QKV
    projection's inputs, Q/K/V as :func:`layer_activation_bytes` counts them), and the core's own working set.
    Everything the layer saved after the core (projection, MLP) is freed by then.

    Working set per score: unfused :data:`UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE`; fused-softmax (Megatron's
    ``scaled_upper_triang_masked_softmax``, which writes the gradient in place) the core's kept bytes plus one 16-bit
    gradient of the probabilities; flash attention keeps no s×s tensor (0, its per-row statistics are in the kept
    bytes). With an unfused core this is the largest moment of a layer's backward; it replaces the layer's own kept
    core in the peak."""
    s = m.seq_length / context_parallel
    b = micro_batch
    t = tensor_parallel
    v = value_bytes
    rep = where(sequence_parallel, 1.0 / t, 1.0)
    sbh = s * b * m.hidden_size
    q_heads = m.query_projection_size
    kv = 3 * q_heads if (m.attention.materialises_scores and m.implementation is not Implementation.TRANSFORMERS) \
        else q_heads + 2 * m.kv_projection_size
    pre_core = 2 * v * sbh * rep + v * s * b * kv / t
    scores = m.num_attention_heads * s * m.seq_length * b / t
    if not m.attention.materialises_scores:
        return pre_core, 0.0
    if m.attention is AttentionImpl.FUSED_SOFTMAX:
        kept = v + ((dropout_mask_bytes + v) if m.attention_dropout > 0 else 0)
        return pre_core, (kept + v) * scores
    if hf_softmax_in_model_dtype(m):
        # the same four tensors as the fp32 softmax's backward, each in the model dtype
        return pre_core, UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE / 4 * v * scores
    return pre_core, UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE * scores


def embedding_activation_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel):
    """First stage: the embedding-dropout mask s·b·h (1 byte, ÷t with SP) per in-flight micro-batch
    (Korthikanti et al. 2022 §4.3)."""
    s = m.seq_length / context_parallel
    rep = where(sequence_parallel, 1.0 / tensor_parallel, 1.0)
    return (1.0 if m.hidden_dropout > 0 else 0.0) * s * micro_batch * m.hidden_size * rep


def megatron_loss_bytes_per_logit(cross_entropy_fusion, value_bytes):
    """Peak bytes per logit of megatron-core's loss on the last stage, v = value_bytes, by
    ``cross_entropy_fusion`` code (0 none, 1 native, 2 te; :class:`~workbench.specs.CrossEntropyFusion`):

    * none (``tensor_parallel/cross_entropy.py`` ``VocabParallelCrossEntropy``): ``calculate_logits_max`` casts the
      16-bit logits to fp32, the max is subtracted and the exponent and the division by the sum run in place, and
      that fp32 softmax is saved for backward; the 16-bit logits are alive beside it until the loss returns, and in
      backward the fp32 gradient (built in place over the softmax) is cast to a 16-bit one: v + 4.
    * native (``fusions/fused_cross_entropy.py``): the same steps under ``jit_fuser``, the same fp32 softmax saved
      (``ctx.save_for_backward(exp_logits, ...)``) beside the 16-bit logits: v + 4.
    * te (Transformer Engine ``CrossEntropyFunction``, ``pytorch/cross_entropy.py`` and
      ``pytorch/triton/cross_entropy.py``): an online softmax reads the logits once for each row's max and sum
      (3 fp32 values per token, not per logit), a second kernel writes the gradient over the logits in place, and
      that one 16-bit tensor is what backward scales in place and hands to the output layer: v.
    """
    return where(asarray(cross_entropy_fusion) == 2, value_bytes, value_bytes + 4)


def output_activation_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, sequence_parallel, context_parallel,
                            value_bytes, cross_entropy_fusion=0):
    """Last stage, one micro-batch: the final-norm input and output-layer input (v·sbh each; the latter gathered
    with SP) and the logits.

    A transformers model (``implementation='transformers'``) computes the loss in ``ForCausalLMLoss``
    (transformers/loss/loss_utils.py): ``logits.float()`` then ``F.cross_entropy``, whose log-softmax output (fp32)
    is saved for backward; backward then holds that output, the fp32 gradient of the log-probabilities and the
    fp32 gradient of the logits at once — :data:`HF_LOSS_BYTES_PER_LOGIT` = 12 bytes per logit (the forward's
    v + 4 + 4 is no larger). No chunked loss in the causal-LM heads of the supported families. Gemma 2 soft-caps
    the logits first (``Gemma2ForCausalLM``: ``tanh(logits / final_logit_softcapping) · final_logit_softcapping``),
    and tanh keeps its 16-bit output for backward: v more per logit (counted on the CPU: 14.85 vs 12.85 bytes per
    logit at the peak of a toy Gemma 2 with and without the cap).

    Logits: megatron-core's loss, :func:`megatron_loss_bytes_per_logit` bytes per logit of s·b·V/t with V the padded
    vocabulary (``cross_entropy_fusion``: a :data:`~workbench.specs.CROSS_ENTROPY_FUSION_CODES` code or array of
    them). fp32 logits over a large vocabulary are often the largest single tensor of a step.
    """
    s = m.seq_length / context_parallel
    rep = where(sequence_parallel, 1.0 / tensor_parallel, 1.0)
    sbh = s * micro_batch * m.hidden_size
    vocab = P.model_vocab_size(m, tensor_parallel)
    if m.implementation is Implementation.TRANSFORMERS:
        per_logit = HF_LOSS_BYTES_PER_LOGIT
        from workbench.hf import soft_capped

        if soft_capped(m):  # Gemma 2's final logit soft-capping
            per_logit = per_logit + value_bytes
    else:
        per_logit = megatron_loss_bytes_per_logit(cross_entropy_fusion, value_bytes)
    logits = per_logit * s * micro_batch * vocab / tensor_parallel
    return value_bytes * sbh * rep + value_bytes * sbh + logits


# ================================================================================================================
# Buffers and overhead
# ================================================================================================================
def reduce_bucket_bytes(*, zero_stage, value_bytes, overlap_comm=1, reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS,
                        engine=None):
    """DeepSpeed ZeRO-1/2's contiguous reduce buckets (``stage_1_and_2.py`` ``setup_buckets``): one of
    ``reduce_bucket_size`` 16-bit elements, two with ``overlap_comm``; 0 for ZeRO-0/3 and for the Megatron engine.
    They are allocated at the first gradient hook of each backward (``process_gradients``) and released at its end
    (``independent_gradient_partition_epilogue`` → ``_release_ipg_buffers``): not alive at the optimizer step."""
    buckets = where((zero_stage >= 1) & (zero_stage < 3), (1 + overlap_comm) * reduce_bucket_elements * value_bytes,
                       0)
    if engine is not None:
        buckets = where(engine == ENGINE_CODES[Engine.MEGATRON], 0, buckets)
    return buckets


def _zero3_gathers(data_parallel, offload_params):
    """Whether a ZeRO-3 rank gathers parameters: more than one rank in the partition, or parameters offloaded
    (``data_parallel=None``: taken as gathering)."""
    return True if data_parallel is None else (data_parallel > 1) | (offload_params > 0)


def zero3_gathered_bytes(m: ModelSpec, *, tensor_parallel, value_bytes, data_parallel=None, offload_params=0,
                         recompute=0, prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS):
    """16-bit parameters a ZeRO-3 rank holds gathered when backward starts: what its coordinator keeps through the
    forward (:func:`zero3_gathered_elements`, full recompute re-running each layer in backward), and at least the
    largest module with a prefetch bucket (the live set inside a layer's backward). With one rank in the partition
    group nothing is gathered (``all_gather_coalesced`` takes ``_no_gather_coalesced`` and the parameter is its own
    partition, ``partition_parameters.py`` ``NoGatherHandle``: ``ds_tensor.data.to(device)``, no copy on the GPU)
    unless parameters are offloaded, when that copy is the gathered one. Released by the end of backward: not alive
    at the optimizer step."""
    largest = largest_module_params(m, tensor_parallel)
    live = maximum(zero3_gathered_elements(m, tensor_parallel, asarray(recompute) >= RECOMPUTE_CODES[Recompute.FULL],
                                           prefetch_bucket_elements),
                   largest + minimum(prefetch_bucket_elements, largest))
    return where(_zero3_gathers(data_parallel, offload_params), value_bytes * live, 0.0)


def zero3_reduction_gathered_bytes(m: ModelSpec, *, tensor_parallel, value_bytes, data_parallel=None,
                                    offload_params=0, recompute=0,
                                    prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS):
    """16-bit bytes a ZeRO-3 rank holds gathered while a gradient larger than ``reduce_bucket_size`` is reduced on
    its own, outside any layer's backward: the input embedding's, in its module's backward at the end (the
    coordinator's walk just after the embedding's backward fetch, :func:`zero3_gathered_walk`'s
    ``after_backward_fetch`` of the first head, its weight among them), and an untied output layer's, at the loss,
    once that layer's backward has released its weight and the next fetches have prefetched (the walk's
    ``after_first_backward``), the larger. Both gradients are the same size untied, so one moment prices both.
    (The allocator replay of OLMo 2 13B's width at 4 layers, both offloads, checkpointed: the 514 M-element output
    layer's gradient reduced beside 1.18 GiB gathered, where the backward's start holds 1.88 with that layer's
    weight, 6.17 GiB allocated as measured on one H200. On DeepSeek LLM 67B's width at 2 layers the walk's set at
    the 839 M-element embedding's reduction is its own 1.56 GiB weight: -0.7 % allocated against the measurement.)
    0 where nothing is gathered (:func:`zero3_gathered_bytes`). Arrays allowed."""
    def pick(walk):
        head = walk["after_backward_fetch"].get("e0", 0.0)
        return max(head, 0.0 if m.tied_embeddings else walk["after_first_backward"])

    return _walk_gathered_bytes(m, pick, tensor_parallel=tensor_parallel, value_bytes=value_bytes,
                                data_parallel=data_parallel, offload_params=offload_params, recompute=recompute,
                                prefetch_bucket_elements=prefetch_bucket_elements)


def _walk_gathered_bytes(m: ModelSpec, pick, *, tensor_parallel, value_bytes, data_parallel, offload_params, recompute,
                         prefetch_bucket_elements):
    """16-bit bytes of the gathered set ``pick(walk)`` (elements) takes from the coordinator's walk
    (:func:`_zero3_model_walk`) at each distinct setting; 0 where nothing is gathered (:func:`zero3_gathered_bytes`).
    Arrays allowed."""
    live = _per_distinct(lambda tp, full, pf: pick(_zero3_model_walk(m, int(tp), bool(full), int(pf))),
                         tensor_parallel, asarray(recompute) >= RECOMPUTE_CODES[Recompute.FULL],
                         prefetch_bucket_elements)
    return where(_zero3_gathers(data_parallel, offload_params), value_bytes * live, 0.0)


def zero3_epilogue_gathered_bytes(m: ModelSpec, *, tensor_parallel, value_bytes, data_parallel=None,
                                   offload_params=0, recompute=0,
                                   prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS):
    """16-bit bytes a ZeRO-3 rank holds gathered while the last bucket is reduced after backward
    (``independent_gradient_partition_epilogue``), with an untied input embedding: that module's post-backward
    release never runs — DeepSpeed counts a module's pending backward over its inputs that require a gradient
    (``parameter_offload.py`` ``PostBackwardFunctionModule``: ``if output_in.requires_grad``), and the embedding's
    input is the token ids — so the weight its backward fetched stays gathered until the coordinator releases
    everything after the step's backward (the coordinator's set just after that fetch,
    :func:`zero3_gathered_walk`'s ``after_backward_fetch`` of the first head). The allocator replay's trace holds it
    so (``_Zero3ParamFetcher.finish``): GPT-NeoX h2048 with both offloads at micro-batch 1 keeps a 196 MiB block
    gathered through the final reduction. A tied weight is the output layer's too, released by its backward (traced
    on one H200: Granite 3.0 8B's width with both offloads): 0. 0 where nothing is gathered
    (:func:`zero3_gathered_bytes`). Arrays allowed."""
    if m.tied_embeddings:
        return 0.0 * asarray(tensor_parallel)
    return _walk_gathered_bytes(m, lambda walk: walk["after_backward_fetch"].get("e0", 0.0),
                                tensor_parallel=tensor_parallel, value_bytes=value_bytes, data_parallel=data_parallel,
                                offload_params=offload_params, recompute=recompute,
                                prefetch_bucket_elements=prefetch_bucket_elements)


def buffer_bytes(m: ModelSpec, *, engine, zero_stage, tensor_parallel, micro_batch, context_parallel, value_bytes,
                 reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS, overlap_comm=1,
                 prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS, data_parallel=None, offload_params=0,
                 recompute=0):
    """Communication buckets and scratch buffers.

    * DeepSpeed ZeRO-1/2 (``stage_1_and_2.py`` ``setup_buckets``): with contiguous gradients, one reduce bucket of
      ``reduce_bucket_size`` 16-bit elements, two when ``overlap_comm`` (``overlap_comm=1``, the default, is what
      the workbench's DeepSpeed config export writes; ``None`` gives DeepSpeed's own default, on for ZeRO-3 only).
    * DeepSpeed ZeRO-3 (``stage3.py``): the contiguous-gradient bucket (reduce_bucket_size) plus the gathered
      parameters when backward starts (:func:`zero3_gathered_bytes`; ``recompute`` as :data:`RECOMPUTE_CODES`) and
      the largest module's full gradient before it is reduce-scattered (DeepSpeed's estimator counts 4 bytes ×
      largest layer).
    * unfused attention: megatron-core's global memory buffer holding one layer's scores, v·a·s²·b/t
      (transformers' eager attention has no such buffer).
    """
    is_ds = engine != ENGINE_CODES[Engine.MEGATRON]
    overlap = where(zero_stage >= 3, 1, 0) if overlap_comm is None else overlap_comm
    ds12 = reduce_bucket_bytes(zero_stage=zero_stage, value_bytes=value_bytes, overlap_comm=overlap,
                               reduce_bucket_elements=reduce_bucket_elements)
    largest = largest_module_params(m, tensor_parallel)
    ds3 = (reduce_bucket_elements * value_bytes
           + zero3_gathered_bytes(m, tensor_parallel=tensor_parallel, value_bytes=value_bytes,
                                  data_parallel=data_parallel, offload_params=offload_params, recompute=recompute,
                                  prefetch_bucket_elements=prefetch_bucket_elements)
           + value_bytes * largest)
    zero_buffers = where(is_ds, where(zero_stage >= 3, ds3, ds12), 0)
    if m.attention.materialises_scores and m.implementation is not Implementation.TRANSFORMERS:
        s = m.seq_length / context_parallel
        scores = value_bytes * m.num_attention_heads * s * m.seq_length * micro_batch / tensor_parallel
    else:
        scores = 0.0
    return zero_buffers + scores


def moe_dispatch_buffer_bytes(m: ModelSpec, *, micro_batch, context_parallel, expert_parallel, expert_tensor_parallel,
                              tensor_parallel, value_bytes, allgather):
    """The allgather token dispatcher gathers the hidden states of the whole tensor×expert-parallel group into
    megatron-core's global memory buffer (``gather_from_sequence_parallel_region(..., use_global_buffer=True)``):
    v · tp_e·e · s·b/(cp·t) · h bytes, allocated once and reused by every layer. 0 for the alltoall dispatcher, a
    dense model, or when the group is one rank."""
    if not m.is_moe:
        return 0.0
    group = expert_tensor_parallel * expert_parallel
    tokens = m.seq_length / context_parallel * micro_batch / tensor_parallel
    return where((asarray(allgather) > 0) & (group > 1), value_bytes * group * tokens * m.hidden_size, 0.0)


def context_parallel_buffer_bytes(m: ModelSpec, *, micro_batch, tensor_parallel, context_parallel, value_bytes,
                                  cp_comm_type=0, cp_a2a_size=1):
    """Working buffers of one layer's context-parallel attention on one rank, alive during that layer's backward
    (the larger phase), from Transformer Engine's ``context_parallel.py``; kv = K and V of the rank's s/c tokens,
    2·(b·s/c)·kv_projection/t·v bytes, q = (b·s/c)·q_projection/t·v:

    * ``p2p`` ring: two receive buffers, each K/V and their gradients (dK/dV travel with them in the backward),
      4·kv, plus the fp32 accumulation of dQ, 2·q (4-byte values);
    * ``all_gather``: the whole sequence's K/V gathered and their gradients before the reduce-scatter, 2·c·kv;
    * ``a2a``: the all-to-all copies of Q, K, V and O in the head-split layout, 2·q + kv;
    * ``a2a+p2p``: both the all-to-all copies and the ring's buffers.

    0 without context parallelism. Activations kept for backward do not grow: each rank stores its own s/c tokens'
    Q, K, V, output and softmax statistics (:func:`layer_activation_bytes`)."""
    c = context_parallel
    tokens = m.seq_length / c * micro_batch
    kv = 2 * tokens * m.kv_projection_size / tensor_parallel * value_bytes
    q = tokens * m.query_projection_size / tensor_parallel * value_bytes
    ring = 4 * kv + 2 * q * 4 / value_bytes
    a2a = 2 * q + kv
    out = where(cp_comm_type == 2, 2 * c * kv,
                   where(cp_comm_type == 1, a2a, where(cp_comm_type == 3, a2a + ring, ring)))
    return where(c > 1, out, 0.0)


OUTSIDE_ALLOCATOR_BYTES = {"deepspeed": int(2.04 * GiB), "megatron": int(2.93 * GiB)}
"""Memory outside the caching allocator of one training process on one GPU (CUDA context, cuBLAS/cuDNN workspaces,
loaded kernels, DeepSpeed's or megatron-core's own): ``total − free − memory_reserved`` after training steps, the
median over the one-GPU runs of the fit split of ``benchmarks/accuracy_split.json`` on H200 as it was on 2026-12-01
(DeepSpeed 51 runs, 2.04 GiB, range up to 3.06; megatron-core DDP 9 runs, 2.93 GiB, up to 3.44), printed by
``benchmarks/bench_accuracy.py --overheads``. The hybrid counts as DeepSpeed. The grown fit split gives 1.66 and
2.42 GiB, and per stack (:data:`STACK_OUTSIDE_ALLOCATOR_BYTES`) transformers models under ZeRO-0/1/2 hold 1.30 GiB;
the estimate with the constant reserve keeps these figures all the same: with the per-stack medians in their place
the test split's whole-device error went from 5.22 % to 4.86 % in the median but from 152 to 194 of 720 runs more
than 5 % under (2026-12-04, not blind), since the reserve's median fraction under-estimates half the runs and the
up to 0.74 GiB these figures hold above a stack's own covers part of that. The estimate whose allocator is replayed,
whose reserve is the plan's own, takes the per-stack figure."""
STACK_OUTSIDE_ALLOCATOR_BYTES = {
    ("transformers", "deepspeed"): int(1.30 * GiB), ("transformers", "deepspeed-offload"): int(1.33 * GiB),
    ("transformers", "deepspeed-zero3"): int(1.68 * GiB), ("transformers", "deepspeed-zero3-offload"): int(1.70 * GiB),
    ("megatron", "deepspeed"): int(1.66 * GiB), ("megatron", "deepspeed-offload"): int(1.93 * GiB),
    ("megatron", "deepspeed-zero3"): int(2.04 * GiB), ("megatron", "deepspeed-zero3-offload"): int(2.06 * GiB),
    ("megatron", "megatron"): int(2.42 * GiB)}
"""Memory outside the caching allocator of one training process on one GPU by the stack that runs it
(:func:`stack_outside_key`: the code that builds the model, and the engine with DeepSpeed's ZeRO-3 and offload
apart): the median over the one-GPU runs of the fit split of ``benchmarks/accuracy_split.json`` on H200 of
``total − free − memory_reserved`` after training steps, less what other processes held on the GPU when the run
started (``benchmarks/bench_accuracy.py --overheads``, 2026-12-04). Unlike the allocator's reserve this memory hardly
varies within a stack (the CUDA context, the kernels a stack loads, cuBLAS's and DeepSpeed's handles): transformers
under ZeRO-0/1/2 1.30 GiB (45 runs, 10th-90th percentile 1.28-1.30), megatron-core 1.66 GiB (34 runs); ZeRO-3
loads 0.38 GiB more (25 and 18 runs), megatron-core's own DDP and optimizer 0.76 GiB more (22 runs); the
offload regimes rest on 4-16 runs. Taken by the estimate
whose allocator is replayed (:func:`memory_estimate_from`): there the reserve is the plan's own and this is what is
left of the device. The constant-reserve estimate keeps :data:`OUTSIDE_ALLOCATOR_BYTES` (see there)."""


def plan_engine_key(plan) -> str:
    """The key of the per-engine tables (:data:`OUTSIDE_ALLOCATOR_BYTES`, :data:`NCCL_BYTES_BY_ENGINE`,
    :data:`RESERVE_FRACTION_EXPANDABLE`) for the engine that runs ``plan``: ``megatron`` for megatron-core's own
    DDP, ``deepspeed`` for DeepSpeed and the hybrid."""
    return "megatron" if plan.engine is Engine.MEGATRON else "deepspeed"


def stack_outside_key(model: ModelSpec, plan) -> tuple:
    """The :data:`STACK_OUTSIDE_ALLOCATOR_BYTES` key of a plan: ``(implementation, regime)``, the regime being
    :func:`plan_reserve_key`'s with ZeRO-3's offloads together (parameters or optimizer)."""
    key = plan_reserve_key(plan)
    key = "deepspeed-zero3-offload" if key == "deepspeed-zero3-param-offload" else key
    return (str(model.implementation), key)


def stack_outside_bytes(model: ModelSpec, plan) -> int:
    """One process's memory outside the allocator for ``plan``'s stack (:data:`STACK_OUTSIDE_ALLOCATOR_BYTES`);
    a combination the table lacks (a transformers model under megatron-core's DDP) takes its engine's
    :data:`OUTSIDE_ALLOCATOR_BYTES`."""
    return STACK_OUTSIDE_ALLOCATOR_BYTES.get(stack_outside_key(model, plan),
                                            OUTSIDE_ALLOCATOR_BYTES[plan_engine_key(plan)])


RESERVE_FRACTION = {"deepspeed": 0.166, "deepspeed-offload": 0.312, "deepspeed-zero3": 0.249,
                    "deepspeed-zero3-offload": 0.150, "deepspeed-zero3-param-offload": 0.199, "megatron": 0.102}
"""Caching-allocator reserve above the allocated peak (``max_memory_reserved / max_memory_allocated − 1``), median
over the same fit-split runs, DeepSpeed's per regime (:func:`reserve_regime`; ``benchmarks/bench_accuracy.py
--overheads``, 2026-12-04, after the fit9 batch added CPU-offload runs on three 1.9-2.9 B widths and host1 repeated
one of them): ZeRO-0/1/2 16.6 % (85 runs, 90th percentile 37.2 %), with the optimizer on the host 25.1 % (11 runs,
31.3 %); ZeRO-3 24.9 % (45 runs, 39.1 %), with the optimizer on the host 33.2 % (9 runs, 59.7 %; 28.3 % on the 8
before the repeat, the value final44 was judged with), with the parameters there too 35.2 % (7 runs, 110.7 %); megatron-core 10.9 % (9 runs, 26.4 %, an earlier fit split's).
Refitted after the fit11 batch added six runs with activation recompute to each of two regimes whose fit runs had
one and four (2026-12-04): ZeRO-1/2 with the optimizer on the host 31.2 % (17 runs, 50.5 %), megatron-core 10.2 %
(22 runs, 22.2 %). With recompute these regimes keep more above their allocated peak (fit split: 45.9 % against
21.2 % without, 15.9 % against 6.7 %: a recomputed layer's activations are freed and cut again between the blocks
that stay), but no regime of its own is taken for it: measured in pairs of one configuration with and without
recompute (49 pairs in the corpus) the reserved peak is never higher with it, and a larger fraction on a smaller
allocated peak would say a recompute costs memory. On the test split (not blind) the 51 ZeRO-1/2 offload runs
without recompute went from 12 more than 5 % under to 6 and the 19 with it from 8 to 6; megatron-core's DDP from
4.7 % median to 4.6 %, with 9 -> 11 runs more than 5 % under.
With the parameters on the host the fraction is taken on :func:`zero3_offload_reserve_base` instead of the
allocated peak — the default stream's larger of the model built whole and the allocated peak, plus the all-gather
and reduction streams' caches, which PyTorch keeps per stream: 10.4 % on the same 7 runs (2026-12-04, after final44's
reveal: the test split's 40 such runs went from 23.7 % median / 44.2 % worst whole-device error to 6.9 % / 28.5 %, not
blind; final45's five, blind: +5.5, +0.8, -2.7, -23.5, -10.2 %, where 35.2 % of allocated gave -15.0 to -46.2 %), then
19.9 % once the fit10 batch added four runs with the parameters alone on the host (11 runs, 90th percentile 31.3 %).
ZeRO-3 with the optimizer alone on the host takes its fraction on the same base (:data:`ZERO3_STREAM_RESERVE_REGIMES`;
no model built whole beyond its allocated weights, nothing gathered on one GPU): 15.0 % over the same 9 fit runs
(90th percentile 21.0 %), 33.2 % of allocated before; its 46 test-split runs 8.7 % / 24.6 % (23 more than 5 % under)
-> 6.7 % / 35.1 % (16), not blind. With the optimizer or the parameters on the
host the allocated peak loses the states that stay put, while the transient copies the offload makes (fp64 norm
pieces, fp32 casts, staging buffers, gathered parameters) stay, so more of what is reserved is cached free blocks.
ZeRO-3 frees and re-allocates module-sized gradient and partition
tensors all through backward between the activations' frees, so more of what it freed is left in blocks the next
request does not fit. The reserve is what PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) keeps
of segments it cut for earlier requests: large blocks rounded to 2 MiB, a request that no cached free block fits
gets a new segment, freed blocks are cached, not returned. Terms built on the transients the model knows — the
largest freed block (fp32 scores, fp32 logits, the step's fp32 gradient partition), score-sized blocks, the
memory freed and re-allocated at another size (activations vs. persistent states), recompute — were fitted on the
fit split and tried on the test split (``benchmarks/bench_accuracy.py``): none lowered the held-out worst case or
the under-estimates below a median fraction (a 16 k-token shape's 80 GB score working set left 18-26 GB reserved,
a 152 k-vocabulary's 14 GB logits 0.3-4 GB): the reserve depends on the order of allocations, which a
shape-level model does not see, and the error band carries its 4-60 % spread.

The order of allocations does set it: ``benchmarks/alloc_sim.py`` replays the caching allocator's policy (512 B
rounding; 2 MiB small-pool segments; 20 MiB segments for 1-10 MiB requests, larger ones rounded to 2 MiB; best fit
among cached blocks; a split when more than 1 MiB is left; freed blocks cached) over the allocation trace of the run
itself — the model built on the meta device (a transformers model from the record's config, or megatron-core's
``GPTModel`` with the local layer spec as the launcher builds it), its forward and backward as CUDA runs them
(cuDNN's attention blocks as an H200 allocates them or eager attention's tensors, softmax backward's temporary, dropout's 1-byte mask), and DeepSpeed
ZeRO-0/1/2's own allocations in the order of its source (the flat bf16 buffer after ``empty_cache()``, the fp32
master through a bf16 clone, the ``ipg`` bucket and its reductions into the gradient partition during backward, each
gradient cast to fp64 for the clipping norm, the fp32 gradient partition, Adam's states at the first step; with the
optimizer on the CPU each gradient's fp64 and fp32 copies on its way to the host), six steps. Nothing in it is
fitted. On the corpus's in-scope one-GPU runs (``benchmarks/results/alloc_sim_h200.txt``), peak reserved from the
measured allocated peak: test split 395 runs (megatron-core's own DDP among them), median error 0.0 %, worst
−12.2 %, 1 more than 5 % under (the engines' constants: 4.1 %, −30.8 %, 105); the estimate's whole device with the
replay's own peak reserved taken whole: test 1.4 %, worst +13.6 %, 1 more than 5 % under (the constants: 4.1 %,
−31.6 %, 80); fit split (103 runs) 3.3 %, +18.3 % (7.8 %, −18.7 %); blind, final25 and final26 (25 in-scope runs)
1.2 %, every run within −4.0 / +4.9 %. Four
batches declared before they ran scored the replay as it stood before its traces took cuBLAS's workspaces,
megatron-core's fused RMSNorm and in-place initialisation, blind: final17 (15 in-scope runs) 1.7 %, −9.4 % (1.6 %, −14.5 %),
final18 (14, five with CPU offload) 1.1 %, −14.6 % (6.7 %, −31.6 %), final19 (12) 2.5 %, −12.9 % (2.5 %, +9.6 %),
final20 (14) 2.9 %, −12.6 % (2.5 %, −9.7 %). DeepSpeed ZeRO-3 (its partitions, per-sub-group fp32 master and
gradient, bucket and gradient partitions, reductions on ``overlap_comm``'s side stream, whose freed blocks the policy
keeps for that stream) joined from eight fit-split histories: its 102 test runs 3.3 %, +17.8 %, 4 under (the ZeRO-3
constant: 6.2 %, −26.2 %, 41); blind, final27 (13 runs) 3.4 %, every run within −1.4 / +4.4 %. The policy itself is PyTorch's: replayed over the allocator's real
event history of twenty-two fit-split runs (``benchmarks/alloc_history.py``) it gives their measured peaks to the
byte; the replay's errors are its traces' (cuDNN attention, fused RMSNorm, cuBLAS workspaces, initialisation,
DeepSpeed's offload staging buffer, autograd's in-place gradient sums, ZeRO-0/1's reduction buckets, CUDA's
reduction staging buffers: each now traced as the histories show). It needs torch and the model's library
(transformers, or megatron-core in a child process) and 1-6 s a plan, so it is a per-configuration check, not a term
the planner evaluates over thousands of plans; this constant stays the shape-level estimate, and ``estimate
--simulate-allocator`` (:mod:`workbench.allocsim`, where the policy and the traces live) takes the replay's own
peak reserved whole in its place for one plan on request (DeepSpeed's initialization flatten included,
:func:`replayed_reserve_over_allocated`)."""


RESERVE_FRACTION_EXPANDABLE = {"deepspeed": 0.1174, "megatron": 0.0946}
"""Caching-allocator reserve above the allocated peak with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
(:attr:`workbench.specs.ParallelPlan.expandable_segments`), median over the fit-split runs of the corpus's
``expseg`` group (one H200, torch 2.11, 2026-12-01), printed by ``benchmarks/bench_accuracy.py --overheads``:
DeepSpeed 11.74 % (12 runs, ZeRO-0 to 3, megatron-core and transformers models: 3.1-19.9 %; the same
configurations with the default allocator 1.6-43.9 %). megatron-core's DDP has only 2 such fit runs (4.9 %, 5.6 %),
fewer than :data:`MIN_FIT_RUNS`, so it takes the median of all 14 fit runs, 9.46 %. With expandable segments the
allocator maps more physical pages onto one growing segment per stream instead of cutting new fixed-size segments,
so a freed block can be reused by a larger request; the peak allocated and the memory outside the allocator are
unchanged (the same 24 configurations with either allocator: allocated within 0.02 GiB)."""
MIN_FIT_RUNS = 5
"""An engine's own fitted allocator reserve needs at least this many fit-split runs; with fewer the pooled median
of every engine's runs is used."""


def reserve_regime(engine=None, zero_stage=None, offload_optimizer=0, offload_params=0) -> dict:
    """DeepSpeed's regimes with a :data:`RESERVE_FRACTION` of their own beyond the engine's ("deepspeed", ZeRO-0/1/2
    with nothing offloaded), as ``{key: 0/1 mask}`` (arrays allowed), at most one mask true per plan: the optimizer
    on the host below ZeRO-3, ZeRO-3, ZeRO-3 with the optimizer on the host, ZeRO-3 with the parameters there (the
    optimizer wherever it is). Megatron's DDP is in none of them."""
    deepspeed = ~(asarray(engine) == ENGINE_CODES[Engine.MEGATRON]) if engine is not None else asarray(True)
    zero3 = deepspeed & (asarray(zero_stage) >= 3) if zero_stage is not None else asarray(False)
    param_offload = zero3 & (asarray(offload_params) > 0)
    offload = deepspeed & (asarray(offload_optimizer) > 0) & ~param_offload
    return {"deepspeed-offload": offload & ~zero3, "deepspeed-zero3": zero3 & ~offload & ~param_offload,
            "deepspeed-zero3-offload": zero3 & offload, "deepspeed-zero3-param-offload": param_offload}


def engine_overheads(engine=None, zero_stage=None, expandable_segments=0, offload_optimizer=0,
                     offload_params=0) -> dict:
    """The training-run constants of ``engine`` (an engine code, arrays allowed; the hybrid counts as DeepSpeed):
    ``{context_bytes, nccl_bytes, reserve_fraction}`` from :data:`OUTSIDE_ALLOCATOR_BYTES`,
    :data:`NCCL_BYTES_BY_ENGINE` and :data:`RESERVE_FRACTION` (DeepSpeed's by its regime, :func:`reserve_regime`:
    ZeRO-0/1/2 or ZeRO-3, each with or without the optimizer on the host, ZeRO-3 with the parameters there);
    with ``expandable_segments`` (0/1, arrays allowed) the reserve is :data:`RESERVE_FRACTION_EXPANDABLE`."""
    megatron = asarray(engine) == ENGINE_CODES[Engine.MEGATRON] if engine is not None else False
    pick = lambda table: where(megatron, table["megatron"], table["deepspeed"])  # noqa: E731
    default_reserve = pick(RESERVE_FRACTION)
    for key, mask in reserve_regime(engine, zero_stage, offload_optimizer, offload_params).items():
        default_reserve = where(mask, RESERVE_FRACTION[key], default_reserve)
    return dict(context_bytes=pick(OUTSIDE_ALLOCATOR_BYTES), nccl_bytes=pick(NCCL_BYTES_BY_ENGINE),
                reserve_fraction=where(asarray(expandable_segments) > 0, pick(RESERVE_FRACTION_EXPANDABLE),
                                          default_reserve))


def _plan_codes(plan) -> tuple:
    """``(engine, zero_stage, offload_optimizer, offload_params)`` of a plan as :func:`engine_overheads` takes them."""
    return (ENGINE_CODES[plan.engine], int(plan.zero_stage), int(plan.offload_optimizer is not Offload.NONE),
            int(plan.offload_params is not Offload.NONE))


def plan_reserve_key(plan) -> str:
    """The :data:`RESERVE_FRACTION` key of a plan's regime (:func:`reserve_regime`; default allocator)."""
    if plan.engine is Engine.MEGATRON:
        return "megatron"
    return next((key for key, on in reserve_regime(*_plan_codes(plan)).items() if on), "deepspeed")


def plan_overheads(plan, expandable_segments=None) -> dict:
    """:func:`engine_overheads` of a :class:`~workbench.specs.ParallelPlan` (its engine, ZeRO stage and offloads;
    ``expandable_segments`` as given, else the plan's)."""
    expandable = plan.expandable_segments if expandable_segments is None else expandable_segments
    engine, zero_stage, offload_optimizer, offload_params = _plan_codes(plan)
    return {k: float(v) for k, v in engine_overheads(engine, zero_stage, int(expandable), offload_optimizer,
                                                     offload_params).items()}


ZERO3_STREAM_RESERVE_REGIMES = ("deepspeed-zero3-offload", "deepspeed-zero3-param-offload")
"""The :data:`RESERVE_FRACTION` regimes whose reserve is taken on the CUDA streams' caches together
(:func:`zero3_offload_reserve_base`) rather than on the allocated peak: ZeRO-3 with the optimizer on the host, and
with the parameters there too."""


def zero3_offload_stream_bytes(m: ModelSpec, *, tensor_parallel, data_parallel, value_bytes, recompute,
                               offload_optimizer, offload_params, zero_init, weights_whole,
                               reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS,
                               prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS) -> dict:
    """What DeepSpeed ZeRO-3 with offload leaves cached on each CUDA stream, beside the default stream's allocated
    peak. PyTorch's caching allocator keeps a freed block for the stream it was cut for (``CUDACachingAllocator.cpp``:
    a block pool per stream), so each stream's cache grows to its own peak and the reserve is their sum, not the
    peak of their sum:

    * ``init``: with the parameters on the host, the default stream's blocks of the model built whole on the GPU
      before ``deepspeed.initialize`` partitions it there (``weights_whole``, the rank's 16-bit weights; 0 when it
      is built inside ``deepspeed.zero.Init``, ``zero_init``), cached free afterwards; 0 with the parameters on the
      GPU (its weights are in the allocated peak);
    * ``gathered``: the parameter copies the coordinator gathers on its all-gather stream, at their most
      (:func:`zero3_gathered_walk`'s ``peak``), where it gathers (parameters on the host, or more than one rank);
    * ``reduction``: the reduction stream's blocks — the bucket's coalesced copy, and with the optimizer on the host
      the 16-bit copy, fp64 norm pieces and fp32 cast of the largest slice it hands over
      (:func:`zero3_offload_copy_bytes`; the output layer's when it goes alone).

    Replayed on H200 traces (Llama 3.1 8B's width at 16 layers, both offloads, checkpointed: 15.4 + 4.8 + 4.0 GiB
    cached on the three streams, whose own allocated peaks are 8.5, 2.9 and 2.8 GiB). Arrays allowed."""
    full = asarray(recompute) >= RECOMPUTE_CODES[Recompute.FULL]
    t = asarray(tensor_parallel)
    peak = _per_distinct(lambda tp, rc, pf: _zero3_model_walk(m, int(tp), bool(rc), int(pf))["peak"], t, full,
                         prefetch_bucket_elements)
    vocab = P.model_vocab_size(m, tensor_parallel)
    output = 0.0 if m.tied_embeddings else vocab * m.hidden_size / tensor_parallel
    slice_elems = maximum(output, largest_layer_param_tensor(m, tensor_parallel)) / data_parallel
    coalesced = where(output > reduce_bucket_elements, 0.0, value_bytes * reduce_bucket_elements)
    copies = where(asarray(offload_optimizer) > 0, zero3_offload_copy_bytes(slice_elems, value_bytes), 0.0)
    on_host = asarray(offload_params) > 0
    return dict(init=where(on_host & ~(asarray(zero_init) > 0), weights_whole, 0.0),
                gathered=where(_zero3_gathers(data_parallel, offload_params), value_bytes * peak, 0.0),
                reduction=coalesced + copies)


def zero3_offload_reserve_base(allocated, streams: dict):
    """The bytes the ZeRO-3 offload regimes' reserve fractions (:data:`ZERO3_STREAM_RESERVE_REGIMES`) multiply: the
    default stream's larger of the model built whole and the allocated peak, plus the all-gather and reduction
    streams' caches (:func:`zero3_offload_stream_bytes`)."""
    return maximum(streams["init"], allocated) + streams["gathered"] + streams["reduction"]


def plan_zero3_offload_reserve_base(model: ModelSpec, plan, allocated) -> float:
    """:func:`zero3_offload_reserve_base` of a one-stage plan (pipeline stage 0) for an ``allocated`` peak: what the
    fit of those regimes' reserves (``benchmarks/bench_accuracy.py --overheads``) divides measured reserves by."""
    c = plan_codes(plan, model)
    n = stage_params_per_rank(model, c["tensor_parallel"], c["pipeline_parallel"], 0, c["first_stage_layers"],
                              c["expert_parallel"], c["expert_tensor_parallel"])
    streams = zero3_offload_stream_bytes(
        model, tensor_parallel=c["tensor_parallel"], data_parallel=c["data_parallel"] * c["context_parallel"],
        value_bytes=c["value_bytes"], recompute=c["recompute"], offload_optimizer=c["offload_optimizer"],
        offload_params=c["offload_params"], zero_init=c["zero_init"], weights_whole=c["value_bytes"] * n,
        reduce_bucket_elements=c["reduce_bucket_elements"], prefetch_bucket_elements=c["prefetch_bucket_elements"])
    return float(zero3_offload_reserve_base(allocated, streams))


TE_UB_ALL_GATHER_BUFFERS = 8
"""Userbuffers ``initialize_ub`` registers on the all-gather side of the TP GEMMs (``qkv_fprop``, ``qkv_dgrad``,
``proj_dgrad``, ``proj_wgrad``, ``fc1_fprop``, ``fc1_dgrad``, ``fc2_dgrad``, ``fc2_wgrad``: its
``layers_all_gather_overlap``), held in FP8 (``fp8_buf``, one byte a value) when the run quantizes
(transformer_engine/pytorch/module/base.py ``initialize_ub``, NVIDIA/TransformerEngine d0067d0d)."""
TE_UB_REDUCE_SCATTER_BUFFERS = 4
"""Userbuffers on the reduce-scatter side (``proj_fprop``, ``fc2_fprop``, ``qkv_wgrad``, ``fc1_wgrad``:
``layers_reduce_scatter_overlap``), always in the 16-bit dtype; TE's default methods (``pipeline`` for the
forward reduce-scatters, ``bulk`` for the wgrad ones) allocate one buffer of the full shape each (``CommOverlapBase``
in transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp)."""


def userbuffer_bytes(*, seq_length, micro_batch, hidden_size, context_parallel, value_bytes, fp8=0, fp8_bf16=0,
                     tp_comm_overlap=0):
    """Bytes of Transformer Engine's tensor-parallel userbuffers on each rank (``--tp-comm-overlap``), allocated
    by ``initialize_ub`` outside PyTorch's caching allocator (``register_user_buffer_collective``), once per process.

    Megatron-LM passes the shape ``[seq_length · micro_batch / context_parallel, hidden_size]``
    (megatron/training/initialize.py ``_initialize_tp_communicators``, NVIDIA/Megatron-LM d98e8a64): each buffer
    holds the whole gathered activation, not a 1/t shard. One buffer per GEMM name and quantization mode:
    :data:`TE_UB_ALL_GATHER_BUFFERS` in FP8 (1 byte) when the run trains in FP8, else in the 16-bit dtype, and
    :data:`TE_UB_REDUCE_SCATTER_BUFFERS` in the 16-bit dtype — 12·2 = 24 bytes per element of the shape in bf16,
    8 + 4·2 = 16 in FP8; with FP8 and bf16 first/last layers Megatron-LM adds the unquantized set too (a second
    ``UserBufferQuantizationMode``), 40. TE's default methods are modelled (``pipeline`` / ``bulk`` / ``external``:
    the full shape); a recipe that switches a reduce-scatter to ``ring_exchange`` holds (2t−1)/t of it for that
    GEMM (``CommOverlapP2PBase::initialize``), which is not modelled. 0 without the overlap."""
    elements = seq_length * micro_batch / context_parallel * hidden_size
    quantized = asarray(fp8) > 0
    ag_bytes = where(quantized, 1.0, value_bytes)
    per_mode = TE_UB_ALL_GATHER_BUFFERS * ag_bytes + TE_UB_REDUCE_SCATTER_BUFFERS * value_bytes
    unquantized = where(quantized & (asarray(fp8_bf16) > 0),
                        (TE_UB_ALL_GATHER_BUFFERS + TE_UB_REDUCE_SCATTER_BUFFERS) * value_bytes, 0.0)
    return where(asarray(tp_comm_overlap) > 0, elements * (per_mode + unquantized), 0.0)


def overhead_bytes(allocated_bytes, world_size=1, *, engine=None, context_bytes=None, nccl_bytes=None,
                   reserve_fraction=None, floor=False, zero_stage=None, expandable_segments=0, offload_optimizer=0,
                   offload_params=0, reserve_replayed=False):
    """Outside the allocator (one process: :data:`OUTSIDE_ALLOCATOR_BYTES` of its engine; its NCCL buffers when
    there is more than one rank) + the caching allocator's reserve above the allocated peak (:data:`RESERVE_FRACTION`,
    or :data:`RESERVE_FRACTION_EXPANDABLE` with ``expandable_segments``) — :func:`engine_overheads`. ``engine`` is
    an engine code (:data:`ENGINE_CODES`, arrays allowed). A hardware profile
    (:meth:`workbench.calibrate.HardwareProfile.memory_overheads`) supplies its own figures; with ``floor`` (a GPU
    profile measured in a bare process) each is only a lower bound and the engine's constant is used where it is
    larger. A profile's reserve was measured with the default allocator, so with ``expandable_segments`` the
    expandable reserve is used in its place; ``reserve_replayed``: ``reserve_fraction`` is the allocator replay's for
    this very plan (:class:`workbench.allocsim.ExpandableAllocator` with expandable segments) and is kept."""
    own = engine_overheads(engine, zero_stage, expandable_segments, offload_optimizer, offload_params)
    if reserve_fraction is not None and not reserve_replayed and any_true(asarray(expandable_segments) > 0):
        reserve_fraction = where(asarray(expandable_segments) > 0, own["reserve_fraction"], reserve_fraction)
    given = dict(context_bytes=context_bytes, nccl_bytes=nccl_bytes, reserve_fraction=reserve_fraction)
    used = {k: own[k] if v is None else (maximum(v, own[k]) if floor else v) for k, v in given.items()}
    return (used["context_bytes"] + where(world_size > 1, used["nccl_bytes"], 0)
            + used["reserve_fraction"] * allocated_bytes)


# ================================================================================================================
# One stage, all terms
# ================================================================================================================
def stage_terms(m: ModelSpec, *, stage, engine, zero_stage, tensor_parallel, pipeline_parallel, virtual_pipeline,
                context_parallel, sequence_parallel, data_parallel, micro_batch, num_microbatches, recompute,
                recompute_layers, value_bytes, fp16=0, offload_optimizer=0, offload_params=0, cp_comm_type=0,
                cp_a2a_size=1,
                distributed_optimizer=0, fused_kernels=1, overlap_comm=1, overheads=None, lora_params_per_layer=0,
                lora_bytes_per_token=0.0, lora_free_down=0, first_stage_layers=None, middle_stage_layers=None,
                last_stage_layers=None, fp8=0, fp8_recipe=0, fp8_param_gather=0, fp8_layer_fraction=1.0,
                fp8_bf16_first=0, fp8_bf16_last=0,
                expert_parallel=1, expert_tensor_parallel=None, expert_data_parallel=None, moe_token_factor=1.0,
                moe_allgather=0, main_grad_fp32=None, moe_deepspeed=0, expandable_segments=0, moe_recompute=0,
                tp_comm_overlap=0, cross_entropy_fusion=0, init_phase=1, zero_init=0, pinned_host=1,
                reduce_bucket_elements=DS_REDUCE_BUCKET_ELEMENTS, prefetch_bucket_elements=DS_PREFETCH_BUCKET_ELEMENTS,
                nvme_optimizer=0, nvme_params=0, sub_group_elements=DS_SUB_GROUP_ELEMENTS):
    """All six terms (and host bytes) for one rank of ``stage``; every argument may be a numpy array.
    ``reduce_bucket_elements``, ``prefetch_bucket_elements`` and ``sub_group_elements``: DeepSpeed's
    ``reduce_bucket_size``, ``stage3_prefetch_bucket_size`` and ``sub_group_size``.
    ``pinned_host``: DeepSpeed's offload buffers page-locked (``pin_memory``, :func:`host_resident_bytes`).
    ``init_phase``: price DeepSpeed's initialization where it can be the peak (:func:`deepspeed_init_bytes`; 0 where
    a replayed allocation trace already holds it).
    ``first/middle/last_stage_layers``: an uneven pipeline split (:func:`layers_on_stage`; default even).
    ``fp8`` (Transformer Engine FP8 training): ``fp8_layer_fraction`` of the stage's layers that are not among
    Megatron's bf16 first/last layers (``fp8_bf16_first`` / ``fp8_bf16_last``, placed by :func:`bf16_layers_on_stage`:
    on the first and last stage) run their GEMMs in FP8, adding :func:`fp8_weight_bytes` to the weights,
    :func:`fp8_scaling_state_bytes` to the buffers and :func:`fp8_activation_delta_bytes` to each FP8 layer's
    activations.
    MoE: ``expert_parallel`` e and ``expert_tensor_parallel`` (default t) split the experts
    (:func:`expert_params_per_rank`); their gradients and optimizer states are sharded over the
    ``expert_data_parallel`` group (default data_parallel; megatron-core's distributed optimizer shards expert
    parameters over the expert-data-parallel group, and DeepSpeed ZeRO-1/2 partitions a DeepSpeed-MoE model's expert
    param groups over theirs); ``moe_token_factor`` and ``moe_allgather`` as in :func:`moe_activation_bytes` and
    :func:`buffer_bytes`; ``moe_deepspeed`` (DeepSpeed-MoE layers) adds :func:`workbench.dsmoe.extra_activation_bytes`
    to each layer and :func:`workbench.dsmoe.transient_bytes` to the buffers.

    Two candidate peaks, the larger wins:

    * backward (its first layer): model states allocated by then (:func:`backward_gradient_bytes`) + buffers + activations: the kept layers × in-flight micro-batches (+ the embedding
      mask on the first stage) + the largest transient of the backward's start. That transient is, on the last
      stage, the output layer and logits of one micro-batch (:func:`output_activation_bytes`, whose loss term
      follows ``cross_entropy_fusion``); on other stages
      without recompute, one layer's backward working set — the gradients of its score-sized intermediates are as
      large as the layer's full activations (measured on H200: 1F1B stage 0 of PP=2 holds one layer more than its
      stored activations); with full recompute, the recomputed layer's full activations (plus the logits on the
      last stage).
    * optimizer step: all model states + the step temporaries (fp32 gradient copies, torch Adam's foreach
      temporaries) + buffers, activations freed.

    At a step peak the ``gradients`` term includes the temporaries and ``activations`` is 0
    (``backward_activations`` keeps the backward figure); at a backward peak ``gradients`` is what exists then.
    """
    layers = layers_on_stage(m, pipeline_parallel, stage, first_stage_layers, middle_stage_layers,
                             last_stage_layers)
    etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
    edp = data_parallel * context_parallel if expert_data_parallel is None else expert_data_parallel
    n = stage_params_per_rank(m, tensor_parallel, pipeline_parallel, stage, layers, expert_parallel, etp)
    lora = lora_params_per_layer > 0
    # routed experts keep their own states, sharded over the expert-data-parallel group (LoRA: all frozen)
    n_experts = where(lora, 0.0, layers * expert_params_per_rank(m, expert_parallel, etp))
    trainable, frozen = lora_split(n - n_experts, layers * lora_params_per_layer / tensor_parallel, lora)
    # Megatron shards its distributed optimizer over the data-parallel group *with* context parallel (megatron-core
    # ``get_data_parallel_group(with_context_parallel=True)``): CP ranks hold the same weights, so they share the
    # shards as data-parallel ranks do; DeepSpeed-Ulysses (engine deepspeed, c = N) likewise partitions ZeRO over its
    # sequence-data-parallel group (deepspeed/runtime/engine.py: dp_process_group=self.seq_data_parallel_group)
    overlap = where(zero_stage >= 3, 1, 0) if overlap_comm is None else overlap_comm
    states = dict(engine=engine, zero_stage=zero_stage, param_bytes=value_bytes, fp16=fp16,
                  offload_optimizer=offload_optimizer, offload_params=offload_params,
                  distributed_optimizer=distributed_optimizer, fused_kernels=fused_kernels, main_grad_fp32=main_grad_fp32,
                  overlap_comm=overlap)
    weights, grads, optimizer, host, step = model_state_bytes(trainable, data_parallel=data_parallel
                                                              * context_parallel, **states)
    if m.is_moe:
        expert = model_state_bytes(n_experts, data_parallel=edp, **states)
        weights, grads, optimizer, host, step = (a + b for a, b in
                                                 zip((weights, grads, optimizer, host, step), expert))
    # DeepSpeed ZeRO-3 steps one optimizer sub-group at a time (stage3.py ``_create_fp16_sub_groups``), the largest
    # of which can pass ``sub_group_size`` (:func:`zero3_largest_sub_group`); a MoE model's experts share the
    # sub-groups of the rest: one transient, not one per kind of parameter
    zero3_ds = (engine != ENGINE_CODES[Engine.MEGATRON]) & (zero_stage >= 3)
    if any_true(zero3_ds):
        dp_states = data_parallel * context_parallel
        one_sub_group = model_state_bytes(
            trainable + n_experts, data_parallel=dp_states, **states,
            sub_group_elements=zero3_largest_sub_group(m, tensor_parallel, dp_states, sub_group_elements))[4]
        step = where(zero3_ds, one_sub_group, step)
    frozen_weights = frozen_weight_bytes(frozen, zero_stage=zero_stage, data_parallel=data_parallel,
                                         param_bytes=value_bytes)
    weights = weights + where(offload_params > 0, 0.0, frozen_weights)
    host = host + where(offload_params > 0, frozen_weights, 0.0)
    offloaded = host  # the offloaded states themselves
    # what goes to the drive with NVMe offload: the optimizer's states (its fp32 master, moments and gradient
    # partition) when they go there, the parameters' 16-bit partition when they do; either side alone with the
    # other in host memory
    nvme_opt, nvme_par = asarray(nvme_optimizer) > 0, asarray(nvme_params) > 0
    nvme = 0.0
    if any_true(nvme_opt | nvme_par):
        no_params = dict(states, offload_params=0)
        host_optimizer = model_state_bytes(trainable, data_parallel=data_parallel * context_parallel,
                                           **no_params)[3]
        if m.is_moe:
            host_optimizer = host_optimizer + model_state_bytes(n_experts, data_parallel=edp, **no_params)[3]
        nvme = where(nvme_opt, host_optimizer, 0.0) + where(nvme_par, host - host_optimizer, 0.0)
    host_init = zero3_defrag_host_bytes(engine=engine, zero_stage=zero_stage, offload_params=offload_params,
                                        value_bytes=value_bytes, trainable=trainable + n_experts,
                                        data_parallel=data_parallel * context_parallel)
    host = host_resident_bytes(m, host, engine=engine, zero_stage=zero_stage, offload_optimizer=offload_optimizer,
                               offload_params=offload_params, tensor_parallel=tensor_parallel,
                               data_parallel=data_parallel * context_parallel, trainable=trainable + n_experts,
                               params=n, lora=lora, value_bytes=value_bytes, num_microbatches=num_microbatches,
                               defrag=host_init,
                               expert_parallel=expert_parallel, expert_tensor_parallel=etp, pinned=pinned_host,
                               nvme_optimizer=nvme_optimizer, nvme_params=nvme_params,
                               sub_group_elements=sub_group_elements)
    bf16_here = bf16_layers_on_stage(m.num_layers, pipeline_parallel, virtual_pipeline, stage, fp8_bf16_first,
                                     fp8_bf16_last, first_stage_layers, middle_stage_layers, last_stage_layers)
    fp8_layer_fraction = fp8_layer_fraction * (1.0 - bf16_here / maximum(layers, 1))  # this stage's FP8 share
    fp8_layers = where(fp8 > 0, layers * fp8_layer_fraction, 0.0)
    weights = weights + fp8_weight_bytes(m, tensor_parallel=tensor_parallel, fp8_layers=fp8_layers,
                                         recipe=fp8_recipe, param_gather=fp8_param_gather, value_bytes=value_bytes,
                                         expert_parallel=expert_parallel, expert_tensor_parallel=etp)
    grads_bwd = backward_gradient_bytes(grads, engine=engine, zero_stage=zero_stage, param_bytes=value_bytes,
                                        num_microbatches=num_microbatches, offload_optimizer=offload_optimizer)

    kw = dict(micro_batch=micro_batch, tensor_parallel=tensor_parallel, sequence_parallel=sequence_parallel,
              context_parallel=context_parallel)
    moe_kw = dict(expert_tensor_parallel=etp, moe_token_factor=moe_token_factor, moe_deepspeed=moe_deepspeed,
                  frozen_norms=lora.astype(float) if isinstance(lora, np.ndarray) else float(lora))
    # selective recompute's MoE modules apply under selective recompute only
    moe_kw["moe_recompute"] = where(recompute == 1, moe_recompute, 0)
    kept, full_layer = layer_activation_bytes(m, recompute=recompute, value_bytes=value_bytes, **kw, **moe_kw)
    # FP8 layers keep their linear inputs in FP8 (the share of FP8 layers on the stage, averaged per layer)
    fp8_share = where(fp8 > 0, fp8_layer_fraction, 0.0)
    fp8_kw = dict(value_bytes=value_bytes, recipe=fp8_recipe, **kw, expert_tensor_parallel=etp,
                  moe_token_factor=moe_token_factor)
    fp8_delta = fp8_share * fp8_activation_delta_bytes(m, **fp8_kw)
    fp8_kept = (fp8_share * fp8_activation_delta_bytes(m, **fp8_kw, moe_recompute=moe_kw["moe_recompute"])
                if any_true(asarray(moe_recompute) > 0) else fp8_delta)
    kept = kept + where(recompute >= 2, 0.0, fp8_kept)
    full_layer = full_layer + fp8_delta
    # LoRA (:func:`lora_activation_bytes_per_token`): the adapters' saved tensors, less the frozen linears' inputs
    lora_act = lora_bytes_per_token * m.seq_length / context_parallel * micro_batch / tensor_parallel
    kept = kept + where(recompute >= 2, 0.0, lora_act)
    full_layer = full_layer + lora_act
    # sliding-window layers under sdpa keep their mask's bias and, with grouped K/V heads, repeated K and V
    # (:func:`sliding_window_layer_bytes`): the layers' share of it in each kept layer, the whole of it in a
    # recomputed one
    window_layer = sliding_window_layer_bytes(m, micro_batch=micro_batch, value_bytes=value_bytes)
    if window_layer:
        kept = kept + where(recompute >= 2, 0.0, window_layer * m.sliding_window_layers / m.num_layers)
        full_layer = full_layer + window_layer
    recomputed = where(recompute >= 2, minimum(recompute_layers, layers), 0)
    per_microbatch = recomputed * kept + (layers - recomputed) * full_layer
    per_microbatch = where(recompute >= 2, per_microbatch, layers * kept)
    in_flight = in_flight_microbatches(pipeline_parallel, stage, num_microbatches, virtual_pipeline)
    activations = per_microbatch * in_flight
    activations = activations + where(stage == 0, embedding_activation_bytes(m, **kw) * in_flight, 0)
    last = stage == pipeline_parallel - 1
    output = where(last, output_activation_bytes(m, value_bytes=value_bytes,
                                                 cross_entropy_fusion=cross_entropy_fusion, **kw), 0.0)
    # selective recompute: the recomputed attention core is alive again beside the layer's backward working set
    # (measured on H200, fit-split shapes: 18 % under-estimated without it); full recompute's recomputed layer is
    # already the transient's first copy
    core = full_layer - fp8_delta - layer_activation_bytes(m, recompute=1, value_bytes=value_bytes, **kw,
                                                           **moe_kw)[0]
    # DeepSpeed ZeRO-1/2's reduce buckets (in ``buffers``) are released at the end of each backward, so the
    # optimizer step runs without them. (At the loss, before the first gradient hook, they should not exist yet
    # either, but the transformers runs of the fit split hold as much at that moment: not subtracted.)
    buckets = reduce_bucket_bytes(zero_stage=zero_stage, value_bytes=value_bytes, overlap_comm=overlap, engine=engine,
                                  reduce_bucket_elements=reduce_bucket_elements)
    logits_phase = output
    output_grad = untied_output_gradient_bytes(m, tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel,
                                               last=last, engine=engine, zero_stage=zero_stage, overlap_comm=overlap,
                                               num_microbatches=num_microbatches, value_bytes=value_bytes, lora=lora)
    # transformers' gradient_checkpointing_enable() checkpoints the decoder layers only: the loss and the output
    # layer's backward end before the last layer is recomputed, so the two transients do not overlap
    hf_working = (where(recompute >= 2, hf_recomputed_working_bytes_per_token(m, value_bytes=value_bytes,
                                                                              lora_free_down=lora_free_down)
                        * m.seq_length / context_parallel * micro_batch / tensor_parallel, 0.0)
                  if m.implementation is Implementation.TRANSFORMERS else 0.0)
    recomputed_transient = (maximum(output, full_layer + hf_working) if m.implementation is Implementation.TRANSFORMERS
                            else full_layer + output)
    plain_transient = maximum(logits_phase, full_layer + output_grad)  # a layer back-propagated without recompute
    if m.implementation is Implementation.TRANSFORMERS:
        # every_n_layers > 1 (:func:`workbench.specs.hf_checkpoint_every`): the layers left out back-propagate as
        # without checkpointing, after the loss as the last layer may be one of them
        recomputed_transient = where(recomputed < layers, maximum(recomputed_transient, plain_transient),
                                     recomputed_transient)
    transient = where(recompute >= 2, recomputed_transient,
                         where(recompute == 1, maximum(output, full_layer + output_grad) + core, plain_transient))
    # ZeRO-3 on a transformers model with tied embeddings: the output layer's share of the tied weight's 16-bit
    # gradient, alive through every layer's backward, is priced with the buffers (``zero3_tied`` below)
    hf_tied = bool(m.tied_embeddings) and m.implementation is Implementation.TRANSFORMERS
    zero3_tied = where(zero3_ds & hf_tied & ~lora & (pipeline_parallel == 1),
                       value_bytes * embedding_elements(m, tensor_parallel), 0.0)
    if m.attention.materialises_scores:
        # megatron-core (or transformers' eager attention) with an s×s core: the peak is either the logits (on the
        # last stage) or the first back-propagated layer's attention core — its saved tensors before the core plus the core's working set
        # (:func:`attention_backward_bytes`), in place of what that layer kept (a recomputed layer kept only its
        # input, which stays counted)
        pre_core, working = attention_backward_bytes(m, value_bytes=value_bytes, **kw)
        all_recomputed = (recompute >= 2) & (recomputed >= layers)
        last_kept = where(all_recomputed, 0.0, where(recompute >= 2, full_layer, kept))
        # tied embeddings on one stage: the output layer's 16-bit weight gradient waits in autograd's input buffer
        # of the shared weight until the embedding's backward adds to it (the weight's gradient hook fires once,
        # at the end), so it is alive through every layer's backward
        # (where ZeRO-3's buffers price it, ``zero3_tied``, it is left out here: counted once)
        tied_grad = where(m.tied_embeddings & (pipeline_parallel == 1),
                             value_bytes * embedding_elements(m, tensor_parallel),
                             0.0) - zero3_tied
        layer_transient = pre_core + working - last_kept + tied_grad + output_grad
        # the layer's moment against the logits' with that gradient counted (the logits come before it exists)
        layer_peaks = layer_transient + zero3_tied > logits_phase
        transient = where(layer_peaks, layer_transient, logits_phase)
    else:
        layer_transient = where(recompute == 1, full_layer + core, full_layer) + output_grad
        layer_peaks = transient > logits_phase
    held = activations
    activations = activations + transient

    buffers = buffer_bytes(m, engine=engine, zero_stage=zero_stage, tensor_parallel=tensor_parallel,
                           micro_batch=micro_batch, context_parallel=context_parallel, value_bytes=value_bytes,
                           overlap_comm=overlap_comm, data_parallel=data_parallel, offload_params=offload_params,
                           recompute=recompute, reduce_bucket_elements=reduce_bucket_elements,
                           prefetch_bucket_elements=prefetch_bucket_elements)
    # ZeRO-3's gathered parameters are all released by the end of backward: not there at the optimizer step
    zero3_gathered = where(zero3_ds,
                           zero3_gathered_bytes(m, tensor_parallel=tensor_parallel, value_bytes=value_bytes,
                                                data_parallel=data_parallel, offload_params=offload_params,
                                                recompute=recompute,
                                                prefetch_bucket_elements=prefetch_bucket_elements), 0.0)
    buffers = buffers + context_parallel_buffer_bytes(m, micro_batch=micro_batch, tensor_parallel=tensor_parallel,
                                                      context_parallel=context_parallel, value_bytes=value_bytes,
                                                      cp_comm_type=cp_comm_type, cp_a2a_size=cp_a2a_size)
    buffers = buffers + fp8_scaling_state_bytes(m, fp8_layers=fp8_layers, recipe=fp8_recipe)
    # DeepSpeed ZeRO-1/2 with optimizer offload: a GPU staging buffer of the largest parameter's size in the model
    # dtype, allocated at init (stage_1_and_2.py ``temp_grad_buffer_for_gpu_offload``), the largest trainable one:
    # its groups hold only parameters that require gradients, so with LoRA an adapter's (bounded here by a layer's
    # adapters; replayed on Granite 3.0 8B's width with LoRA r=16, 5.75 GiB allocated as measured, where the 384 MiB
    # embedding's size priced it +5.1 %)
    staging = where(lora, lora_params_per_layer, largest_param_tensor(m, tensor_parallel))
    buffers = buffers + where(deepspeed_offload12(engine, zero_stage, offload_optimizer), value_bytes * staging, 0.0)
    if m.is_moe:
        buffers = buffers + moe_dispatch_buffer_bytes(m, micro_batch=micro_batch,
                                                      context_parallel=context_parallel,
                                                      expert_parallel=expert_parallel,
                                                      expert_tensor_parallel=etp, tensor_parallel=tensor_parallel,
                                                      value_bytes=value_bytes, allgather=moe_allgather)
        buffers = buffers + where(asarray(moe_deepspeed) > 0, dsmoe.transient_bytes(
            m, tokens=m.seq_length / context_parallel * micro_batch, value_bytes=value_bytes,
            token_factor=moe_token_factor), 0.0)
    # ZeRO-3: a parameter's full 16-bit gradient exists only while its module is back-propagated, before it is copied
    # into the reduce bucket (buffer_bytes counts the largest module's): at a layer's backward that layer's largest
    # weight; at the logits' peak none yet (the output layer's gradient comes once the fp32 logits are freed);
    # at the optimizer step none
    zero3_module_grad = where(zero3_ds,
                              value_bytes * largest_module_params(m, tensor_parallel), 0.0)
    zero3_grad_at_peak = where((zero3_module_grad > 0) & layer_peaks,
                               value_bytes * largest_layer_param_tensor(m, tensor_parallel), 0.0)
    # ... but a tied weight's: the output layer's share of its 16-bit gradient is made at the loss and waits for the
    # embedding's to be added to it, its hook firing only then (at the end of backward, where its reduction is
    # ``offload_end_reduction_bytes``'s), so it is alive through every layer's backward. (Traced on one H200:
    # Granite 3.0 8B's width at 10 layers, both offloads, 384 MiB beside the first bucket's reduction, the run's peak;
    # Granite 3 2B's, 192 MiB.)
    # (transformers models; megatron-core's measured tied runs hold no such gradient at their layers' peak)
    # (``zero3_tied``, computed above)
    zero3_tied_at_peak = where(layer_peaks, zero3_tied, 0.0)
    zero3_grad_at_peak = zero3_grad_at_peak + zero3_tied_at_peak
    buffers = buffers - zero3_module_grad + zero3_grad_at_peak
    # the last layer's backward after the first gradient hook: with an s×s attention core (eager attention) its
    # core's backward working set (``layer_transient``, :func:`attention_backward_bytes`) when that is larger
    late_layer = full_layer + hf_working
    if m.attention.materialises_scores:
        late_layer = maximum(late_layer, layer_transient)
    # every model's loss backward ends before the first gradient hook allocates the buckets; ZeRO-1 with
    # accumulation still holds the buckets of the micro-batch before (it reduces and releases them at the
    # accumulation boundary only, engine.py ``allreduce_gradients``; ZeRO-2 at the end of every backward)
    late_order = (zero_stage == 2) | (num_microbatches <= 1)
    late_acts, late_buffers, late = lora_late_buckets(held, output, late_layer, buffers, last=last,
                                                      engine=engine, zero_stage=zero_stage, lora=late_order,
                                                      buckets=buckets)
    # (transformers: the per-layer count of hf_layer_extra_bytes_per_token and this ordering belong together; either
    # alone moved the Hugging Face runs' allocated error the wrong way)
    activations, buffers_bwd = where(late, late_acts, activations), where(late, late_buffers, buffers)
    # gradients that nothing reduces during backward (ZeRO-0, ZeRO-1 without overlap_comm) grow as layers finish;
    # they peak at the last layer's backward, beside that layer's transient, not the loss's: where the logits phase
    # outweighs the layer's transient, the growth first has to make up the difference (final47's Qwen1.5 1.8B,
    # ZeRO-1, checkpointed, replayed: the peak is the loss's three fp32 logits blocks beside the output layer's
    # gradient alone; +14.9 % allocated, blind, with the growth added to them)
    growth = unreduced_gradient_growth_bytes(
        m, layers=layers, kept_per_layer=where(recompute >= 2, kept, per_microbatch / maximum(layers, 1)),
        tensor_parallel=tensor_parallel, engine=engine, zero_stage=zero_stage, overlap_comm=overlap,
        num_microbatches=num_microbatches, value_bytes=value_bytes, lora=lora)
    layer_moment = layer_transient + hf_working  # (hf_working: 0 unless a transformers layer is recomputed)
    grads_bwd = grads_bwd + maximum(0.0, growth - maximum(0.0, transient - layer_moment))
    backward_peak = weights + grads_bwd + optimizer + activations + buffers_bwd
    # ZeRO-1/2: the 16-bit gradient partition can appear while most activations are still alive
    early_grads, early_acts, early_gathered = zero12_early_partition_bytes(
        m, held=held, kept_per_layer=where(recompute >= 2, kept, per_microbatch / maximum(layers, 1)),
        layer_transient=layer_transient, layers=layers, last=last, tensor_parallel=tensor_parallel,
        # DeepSpeed partitions ZeRO over the sequence-data-parallel group (Ulysses: dp × c), as for the states above
        data_parallel=data_parallel * context_parallel, engine=engine, zero_stage=zero_stage, value_bytes=value_bytes,
        num_microbatches=num_microbatches, offload_optimizer=offload_optimizer, pipeline_parallel=pipeline_parallel,
        trainable=trainable, lora=lora, overlap_comm=overlap, reduce_bucket_elements=reduce_bucket_elements,
        gathered_at=(lambda done, aliases: where(
            zero3_ds, zero3_layer_backward_gathered_bytes(m, tensor_parallel=tensor_parallel, value_bytes=value_bytes,
                                                          layers_done=done, data_parallel=data_parallel,
                                                          offload_params=offload_params, recompute=recompute,
                                                          aliases=aliases,
                                                          prefetch_bucket_elements=prefetch_bucket_elements), 0.0))
        if any_true(zero3_ds & (asarray(offload_optimizer) > 0)) else None,
        full_recompute=recompute >= RECOMPUTE_CODES[Recompute.FULL], recomputed_layer=full_layer,
        mlp_block=mlp_block_activation_bytes(m, value_bytes=value_bytes, **kw),
        mlp_second_pending=mlp_second_weight_pending_bytes(m, value_bytes=value_bytes, **kw),
        nvme_optimizer=nvme_optimizer, **mlp_block_norm_bytes(m, value_bytes=value_bytes, **kw))
    # that moment is a bucket's reduction: the buckets are alive, also where the loss phase (before them) is the
    # backward's peak; ZeRO-3's gathered parameters are the moment's own
    # (ZeRO-3 with the optimizer on the CPU: the moment's gradient is its trigger weight's, in place of the one the
    # backward's own peak counts)
    early_buffers = (buffers - zero3_gathered + early_gathered
                     - where(zero3_ds & (early_grads > 0), zero3_grad_at_peak - zero3_tied_at_peak, 0.0)
                     + zero3_tied - zero3_tied_at_peak)
    early_peak = weights + grads_bwd + early_grads + optimizer + early_acts + early_buffers
    early = (early_acts > 0) & (early_peak > backward_peak)
    grads_bwd = where(early, grads_bwd + early_grads, grads_bwd)
    activations = where(early, early_acts, activations)
    buffers_bwd = where(early, early_buffers, buffers_bwd)
    backward_peak = maximum(backward_peak, where(early_acts > 0, early_peak, 0.0))
    # ZeRO-1/2 with the optimizer on the CPU: the embeddings' norm copies at the end of backward
    tied_end = offload_end_reduction_bytes(m, engine=engine, zero_stage=zero_stage, offload_optimizer=offload_optimizer,
                                           pipeline_parallel=pipeline_parallel, tensor_parallel=tensor_parallel,
                                           value_bytes=value_bytes, lora=lora, overlap_comm=overlap,
                                           reduce_bucket_elements=reduce_bucket_elements,
                                           data_parallel=data_parallel * context_parallel,
                                           nvme_optimizer=nvme_optimizer)
    # (a tied weight's gradient is in its reduction's bucket by then: ``tied_end`` counts it. When the embedding's
    # gradient went into the bucket, ZeRO-3 reduces it after backward, every gathered module released, the
    # embedding's too: traced on one H200, Granite 3.0 8B's width at 10 layers with both offloads, 1.35 GiB beside the
    # reduction's blocks where 2.82 were priced. One larger than the bucket is reduced alone beside what the
    # coordinator holds then, :func:`zero3_reduction_gathered_bytes`, not the backward's start's set: DeepSeek LLM
    # 67B's width at 2 layers, both offloads, measured, went from +2.5 to -6.2 % allocated with none; OLMo 2 13B's
    # width at 4 layers, +7.6 % with the backward's start's set, its output layer's weight among it.)
    in_bucket = asarray(embedding_elements(m, tensor_parallel) <= reduce_bucket_elements)
    gathered_kw = dict(tensor_parallel=tensor_parallel, value_bytes=value_bytes, data_parallel=data_parallel,
                       offload_params=offload_params, recompute=recompute,
                       prefetch_bucket_elements=prefetch_bucket_elements)
    # (an untied input embedding's weight stays gathered through that reduction: zero3_epilogue_gathered_bytes)
    end_gathered = where(zero3_ds, where(~in_bucket, zero3_reduction_gathered_bytes(m, **gathered_kw),
                                         zero3_epilogue_gathered_bytes(m, **gathered_kw)), 0.0)
    end_buffers = buffers - zero3_tied_at_peak - zero3_gathered + end_gathered + tied_end
    end_peak = weights + grads + optimizer + end_buffers
    end = (tied_end > 0) & (end_peak > backward_peak)
    activations = where(end, 0.0, activations)
    grads_bwd = where(end, grads, grads_bwd)
    buffers_bwd = where(end, end_buffers, buffers_bwd)
    backward_peak = maximum(backward_peak, where(end, end_peak, 0.0))
    # ZeRO-2 with the optimizer on the CPU and accumulation: the oversized gradients held to the end of a backward
    # before the boundary (:func:`offload_accumulation_held_bytes`), every activation freed by then
    held = offload_accumulation_held_bytes(m, engine=engine, zero_stage=zero_stage, offload_optimizer=offload_optimizer,
                                           num_microbatches=num_microbatches, tensor_parallel=tensor_parallel,
                                           value_bytes=value_bytes, lora=lora,
                                           reduce_bucket_elements=reduce_bucket_elements)
    held_buffers = buffers - zero3_tied_at_peak - zero3_gathered
    # the end of that backward, every activation freed, or the last layer's backward before it, that layer's working
    # set beside all but its own and the embedding's held gradients (:func:`offload_accumulation_pending_bytes`)
    holds = held > 0
    pending = (where(holds, offload_accumulation_pending_bytes(m, value_bytes=value_bytes,
                                                               reduce_bucket_elements=reduce_bucket_elements), 0.0)
               if any_true(holds) else 0.0)  # (most plans: the model's weight list is not walked)
    at_last_layer = holds & (late_layer > pending)
    held_acts = where(at_last_layer, late_layer, 0.0)
    held = where(at_last_layer, held - pending, held)
    held_peak = weights + grads + held + held_acts + optimizer + held_buffers
    held_wins = holds & (held_peak > backward_peak)
    activations = where(held_wins, held_acts, activations)
    grads_bwd = where(held_wins, grads + held, grads_bwd)
    buffers_bwd = where(held_wins, held_buffers, buffers_bwd)
    backward_peak = maximum(backward_peak, where(held_wins, held_peak, 0.0))
    step_total = weights + grads + step + optimizer + buffers - buckets - zero3_grad_at_peak - zero3_gathered
    step_peak = step_total > backward_peak
    buffers = where(step_peak, buffers - buckets - zero3_grad_at_peak - zero3_gathered, buffers_bwd)
    world = tensor_parallel * pipeline_parallel * context_parallel * data_parallel
    grads_at_peak = where(step_peak, grads + step, grads_bwd)
    acts_at_peak = where(step_peak, 0.0, activations)
    allocated = maximum(step_total, backward_peak)
    # overheads: a profile's
    # ZeRO-3 with offload: the engine's reserve is taken on the streams' caches together
    # (:func:`zero3_offload_reserve_base`), each stream keeping its own freed blocks; a replayed or profiled reserve
    # (``overheads``' reserve_fraction) is a fraction of the allocated peak itself
    regimes = reserve_regime(engine, zero_stage, offload_optimizer, offload_params)
    by_streams = (np.logical_or.reduce([regimes[k] for k in ZERO3_STREAM_RESERVE_REGIMES])
                  & ~(asarray(expandable_segments) > 0))
    if any_true(by_streams) and (overheads or {}).get("reserve_fraction") is None:
        streams = zero3_offload_stream_bytes(
            m, tensor_parallel=tensor_parallel, data_parallel=data_parallel * context_parallel,
            value_bytes=value_bytes, recompute=recompute, offload_optimizer=offload_optimizer,
            offload_params=offload_params, zero_init=zero_init, weights_whole=value_bytes * n,
            reduce_bucket_elements=reduce_bucket_elements, prefetch_bucket_elements=prefetch_bucket_elements)
        reserve_base = where(by_streams, zero3_offload_reserve_base(allocated, streams), allocated)
    else:
        reserve_base = allocated
    overhead = overhead_bytes(reserve_base, world, engine=engine, zero_stage=zero_stage,
                              expandable_segments=expandable_segments, offload_optimizer=offload_optimizer,
                              offload_params=offload_params, **(overheads or {})) + (reserve_base - allocated)
    # ZeRO-1/2 with the optimizer on the CPU can peak before training: deepspeed_init_bytes, no reserve above it;
    # so can ZeRO-3 partitioning a model built whole on the GPU to the host (zero3_build_bytes)
    init12 = deepspeed_init_bytes(weights=weights, trainable=trainable, data_parallel=data_parallel * context_parallel,
                                  value_bytes=value_bytes, engine=engine, zero_stage=zero_stage,
                                  offload_optimizer=offload_optimizer) * (asarray(init_phase) > 0)
    init = maximum(init12, zero3_build_bytes(m, engine=engine, zero_stage=zero_stage, offload_params=offload_params,
                                             zero_init=zero_init, weights_whole=value_bytes * n,
                                             value_bytes=value_bytes, tensor_parallel=tensor_parallel)
                   * (asarray(init_phase) > 0))
    outside = overhead_bytes(0.0, world, engine=engine, zero_stage=zero_stage,
                             expandable_segments=expandable_segments, **(overheads or {}))
    init_reserved = init + deepspeed_init_cached_bytes(
        m, init=init12, weights=weights, trainable=trainable, value_bytes=value_bytes, tensor_parallel=tensor_parallel,
        expandable_segments=expandable_segments)
    # the initialization is the allocated peak; the device needs the larger of it (no reserve above its fresh
    # segments) and training's allocated peak with its reserve
    init_peak = (init > 0) & (init >= allocated)
    required = maximum(where(init > 0, init + outside, 0.0), allocated + overhead)
    # what a GPU with room shows beyond that requirement: the parameters' blocks the flatten left cached are whole
    # free segments, which the allocator releases and retries with when a request does not fit
    releasable = maximum(maximum(allocated + overhead, init_reserved + outside) - required, 0.0)
    grads_at_peak = where(init_peak, 0.0, grads_at_peak)
    acts_at_peak = where(init_peak, 0.0, acts_at_peak)
    buffers = where(init_peak, init - weights, buffers)
    overhead = where(init_peak, required - init, overhead)
    # Transformer Engine's TP userbuffers (--tp-comm-overlap): outside the allocator, no reserve above them
    overhead = overhead + userbuffer_bytes(seq_length=m.seq_length, micro_batch=micro_batch,
                                           hidden_size=m.hidden_size, context_parallel=context_parallel,
                                           value_bytes=value_bytes, fp8=fp8, fp8_bf16=fp8_bf16_first + fp8_bf16_last,
                                           tp_comm_overlap=tp_comm_overlap)
    return dict(weights=weights, gradients=grads_at_peak, optimizer=optimizer, activations=acts_at_peak,
                buffers=buffers, overhead=overhead, host=host, offloaded=offloaded, nvme=nvme,
                in_flight=in_flight,
                step_peak=step_peak,
                init_peak=init_peak, releasable=releasable, backward_activations=activations)


def host_bytes_with(model: ModelSpec, plan: ParallelPlan, **changes) -> float:
    """Host memory one rank holds at its peak with :func:`stage_terms`' arguments ``changes`` in place of the plan's:
    the largest over the plan's pipeline stages, as :attr:`MemoryEstimate.host_bytes_per_gpu` is for the plan itself
    (what the advisor compares a plan's host memory with)."""
    codes = {**plan_codes(plan, model), **changes}
    return max(float(stage_terms(model, stage=s, **codes)["host"])
               for s in range(plan.pipeline_parallel))


def pageable_host_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Host memory one rank holds at its peak with DeepSpeed's ``pin_memory`` off (every offload buffer pageable at
    its own size, :func:`host_resident_bytes` with ``pinned`` 0), whatever the plan's :attr:`ParallelPlan.pin_memory`
    says (what the advisor's ``pinned_host_buffers`` compares a page-locked plan with)."""
    return host_bytes_with(model, plan, pinned_host=0)


def plan_codes(plan: ParallelPlan, model: ModelSpec) -> dict:
    """The numeric arguments :func:`stage_terms` takes, read off a plan (the one encoder,
    :func:`workbench.encode.memory_inputs`)."""
    from workbench import encode

    return encode.memory_inputs(model, encode.plan_columns(plan, model), plan.precision)


FORMULAS = {
    "weights": "16-bit weights 2ψ (fp32: 4ψ); ZeRO-3 shards them 2ψ/N — Rajbhandari et al. 2020 §5",
    "gradients": "2ψ 16-bit grads (ZeRO-2/3: 2ψ/N; ZeRO-3 keeps its partition in the model dtype); at the step "
                 "a 16-bit flat copy + its fp32 cast, 6ψ/N (ZeRO-3: per optimizer sub-group, sub_group_size); "
                 "Megatron fp32 main grads 4ψ — DeepSpeed stage_1_and_2.py / stage3.py, Megatron-LM docs",
    "optimizer": "fp32 master + Adam moments 12ψ (ZeRO-1+: 12ψ/N; Megatron distributed optimizer 12ψ/d); 0 when "
                 "offloaded — ZeRO paper Fig. 1, Megatron-LM docs",
    "activations": "Korthikanti et al. 2022 Table 2, per layer × in-flight micro-batches (1F1B p−stage, interleaved "
                   "(2(p−i−1)+(v−1)p+1)/v) + embedding mask + the larger of the logits (v+4)·sbV/t and the first "
                   "back-propagated layer's attention core (unfused: 16 bytes per score)",
    "buffers": "DeepSpeed reduce buckets (×2 with overlap_comm), ZeRO-3's gathered parameters as its coordinator keeps "
               "them through the forward (none with one rank unless offloaded), "
               "megatron-core's attention-score buffer v·as²b/t (unfused), context-parallel K/V exchange buffers",
    "overhead": f"outside the allocator {OUTSIDE_ALLOCATOR_BYTES['deepspeed'] / GiB:.2f} GiB (DeepSpeed) / "
                f"{OUTSIDE_ALLOCATOR_BYTES['megatron'] / GiB:.2f} GiB (megatron-core) per process (+ NCCL "
                f"{NCCL_BYTES / GiB:.1f} GiB with >1 rank) + allocator reserve {RESERVE_FRACTION['deepspeed']:.0%} "
                f"(DeepSpeed ZeRO-0/1/2; {RESERVE_FRACTION['deepspeed-offload']:.0%} with the optimizer on the host) / "
                f"{RESERVE_FRACTION['deepspeed-zero3']:.0%} (ZeRO-3) / {RESERVE_FRACTION['megatron']:.0%} "
                f"(megatron-core) of allocated; ZeRO-3 with the optimizer on the host "
                f"{RESERVE_FRACTION['deepspeed-zero3-offload']:.0%}, with the parameters there too "
                f"{RESERVE_FRACTION['deepspeed-zero3-param-offload']:.0%}, of the CUDA streams' caches together "
                f"(the model built whole or the allocated peak, the gathered peak, the offload's copies) (H200, fit "
                f"split)",
}


ERROR_BAND_FILE = Path(__file__).resolve().parent / "catalog" / "error_band.json"


@functools.lru_cache(maxsize=1)
def _error_bands() -> dict:
    return json.loads(ERROR_BAND_FILE.read_text()) if ERROR_BAND_FILE.exists() else {}


MIN_BAND_RUNS = 5
"""A recompute mode's own band needs at least this many held-out runs; with fewer the engine's band is used."""


EXPANDABLE_BAND_SUFFIX = "expandable-segments"
"""Band-file key suffix of the runs with ``expandable_segments:True`` (``deepspeed/expandable-segments``)."""


REPLAYED_BAND_SUFFIX = "replayed-allocator"
"""Whole-device band key suffix of the held-out runs scored with the caching allocator replayed
(``deepspeed/replayed-allocator``, written by ``benchmarks/alloc_sim.py --write-band``): the band of an estimate
whose reserve was replayed (``estimate(..., simulate_allocator=...)``) instead of the constant's."""


ZERO3_BAND_SUFFIX = "zero3"
"""Step-time band key suffix of DeepSpeed ZeRO-3's held-out runs (``deepspeed/zero3``): its step time varies
between processes far more than other stacks' (``bench_accuracy.py``'s REPEATABILITY table), so it has its own band,
at least as wide as that process-to-process noise."""


PARAM_OFFLOAD_BAND_SUFFIX = "param-offload"
"""Band key suffix (every quantity) of DeepSpeed ZeRO-3's held-out runs with the parameters on the host
(``offload_param``): their caching allocator reserves far more above what is allocated (34-121 % on H200) than
other runs, and the time of their host copies differs, so a plan with parameter offload takes their band."""

OPTIMIZER_OFFLOAD_BAND_SUFFIX = "optimizer-offload"
"""Whole-device band key suffix of DeepSpeed's held-out runs with the optimizer on the host and the parameters on the
GPU: with the optimizer states gone the allocated peak is small beside the transient copies the offload makes (fp64
norm pieces, fp32 casts, staging buffers), so the caching allocator reserves more above it than in other runs (on
H200 a median 29 % at ZeRO-1/2 and 40 % at ZeRO-3 of the test split, against 17-21 % without offload), which the
engine's constant reserve does not follow: a plan with optimizer offload takes their band."""


ZERO3_OPTIMIZER_OFFLOAD_BAND_SUFFIX = "zero3-optimizer-offload"
"""Replayed whole-device band key suffix (``ENGINE/replayed-allocator/zero3-optimizer-offload``) of DeepSpeed's
held-out ZeRO-3 runs with the optimizer on the host and the parameters on the GPU: the replay falls further short of
their reserve (up to 7.9 % of the device on H200) than of ZeRO-1/2's with the optimizer there, whose
``.../optimizer-offload`` entry is theirs alone."""


OFFLOAD_BAND_RUNS = {PARAM_OFFLOAD_BAND_SUFFIX: "runs with the parameters on the host",
                     OPTIMIZER_OFFLOAD_BAND_SUFFIX: "runs with the optimizer on the host",
                     ZERO3_OPTIMIZER_OFFLOAD_BAND_SUFFIX: "ZeRO-3 runs with the optimizer on the host"}
"""What each offload regime's band is drawn from, in words (the band's note)."""


def _offloaded(value, field) -> bool:
    """Whether ``value`` (a bool, an :class:`Offload` or its name, or ``None``) puts something on the host."""
    return value if isinstance(value, bool) else value is not None and Offload.parse(value, field) is not Offload.NONE


def replayed_offload_regime(offload_params, offload_optimizer, zero_stage=None) -> str | None:
    """The offload regime whose replayed whole-device band (``ENGINE/replayed-allocator/REGIME``) a plan takes:
    :data:`PARAM_OFFLOAD_BAND_SUFFIX` with the parameters on the host; with the optimizer alone there
    :data:`ZERO3_OPTIMIZER_OFFLOAD_BAND_SUFFIX` at ZeRO-3, else :data:`OPTIMIZER_OFFLOAD_BAND_SUFFIX`; ``None``
    without offload. ``benchmarks/alloc_sim.py --write-band`` sorts the held-out runs by the same rule."""
    if _offloaded(offload_params, "offload_params"):
        return PARAM_OFFLOAD_BAND_SUFFIX
    if _offloaded(offload_optimizer, "offload_optimizer"):
        return (ZERO3_OPTIMIZER_OFFLOAD_BAND_SUFFIX if zero_stage is not None and int(zero_stage) >= 3
                else OPTIMIZER_OFFLOAD_BAND_SUFFIX)
    return None


HOST_BOUND_SUFFIX = "host-bound"
"""Step-time band key suffix of the held-out runs below ZeRO-3 whose predicted step is at least
:data:`HOST_BOUND_SHARE` host work (:func:`workbench.timing.host_share`): their error follows the host's speed."""

GPU_BOUND_SUFFIX = "gpu-bound"
"""Step-time band key suffix of the held-out runs below ZeRO-3 whose predicted step is less than
:data:`HOST_BOUND_SHARE` host work."""

HOST_BOUND_SHARE = 0.5
"""A step is host-bound when at least half of it follows the host's speed (:func:`workbench.timing.host_share`)."""


def step_regime_suffix(host_share, zero_stage=None):
    """The step-time band regime of a plan below ZeRO-3 by its host share (:data:`HOST_BOUND_SUFFIX` or
    :data:`GPU_BOUND_SUFFIX`); ``None`` at ZeRO-3 (its own band) or without a share."""
    if host_share is None or (zero_stage is not None and int(zero_stage) >= 3):
        return None
    return HOST_BOUND_SUFFIX if float(host_share) >= HOST_BOUND_SHARE else GPU_BOUND_SUFFIX


def error_band(engine, quantity: str = "device", recompute=None, expandable_segments: bool = False,
               zero_stage=None, replayed: bool = False, host_share=None, offload_params=False,
               offload_optimizer=False, gpu_name: str = ""):
    """``(low_fraction, high_fraction, note)``: how far below and above the point estimate the measured value went
    on the held-out (test-split) model shapes for ``engine`` — ``quantity`` ``allocated``, ``device`` or ``step``
    — as written by ``benchmarks/bench_accuracy.py --write-band`` into ``workbench/catalog/error_band.json``;
    ``None`` when no held-out run of that engine exists. With ``recompute`` the runs of that recompute mode are
    used when there are at least :data:`MIN_BAND_RUNS`. With ``expandable_segments`` the engine's runs with PyTorch's
    expandable-segments allocator (``ENGINE/expandable-segments``) when there are at least :data:`MIN_BAND_RUNS`,
    else as without. With ``zero_stage`` 3 the ``ENGINE/zero3`` entry (step time only) when it has at least
    :data:`MIN_BAND_RUNS` runs, before the recompute mode's. With ``replayed`` (the estimate's reserve came from the
    allocator replay) the ``ENGINE/replayed-allocator`` entry (whole device only) when it has at least
    :data:`MIN_BAND_RUNS` runs, that of the plan's offload regime before it (``ENGINE/replayed-allocator/
    param-offload``, ``.../optimizer-offload`` at ZeRO-1/2 or ``.../zero3-optimizer-offload`` with ``zero_stage`` 3,
    as below). With ``host_share``
    (:func:`workbench.timing.host_share`; step time below ZeRO-3) the
    ``ENGINE/host-bound`` or ``ENGINE/gpu-bound`` entry (:func:`step_regime_suffix`) when it has at least
    :data:`MIN_BAND_RUNS` runs: a host-bound step's error is the host's speed as much as the model's. With
    ``offload_params`` (DeepSpeed ZeRO-3 with the parameters on the host) the ``ENGINE/param-offload`` entry of any
    quantity, before all others but a replayed reserve's, when it has at least :data:`MIN_BAND_RUNS` runs; with
    ``offload_optimizer`` (and the parameters on the GPU) the ``ENGINE/optimizer-offload`` entry (whole device only:
    :data:`OPTIMIZER_OFFLOAD_BAND_SUFFIX`) next. The hybrid uses its own runs, else DeepSpeed's. With ``gpu_name``
    a GPU whose own held-out runs wrote a band for ``quantity`` (the file's ``gpus`` section, ``benchmarks/
    bench_accuracy.py --write-gpu-band``: the H100's step time) takes that GPU's entries, else the H200's."""
    own_gpu = ((_error_bands().get("gpus") or {}).get(gpu_name) or {}).get(quantity)
    if own_gpu:
        found = _band_from(own_gpu, gpu_name, engine, quantity, recompute, expandable_segments, zero_stage, replayed,
                           host_share, offload_params, offload_optimizer)
        if found is not None:
            return found
    return _band_from(_error_bands().get(quantity) or {}, _error_bands().get("gpu", "H200"), engine, quantity,
                      recompute, expandable_segments, zero_stage, replayed, host_share, offload_params,
                      offload_optimizer)


def _band_from(bands: dict, gpu: str, engine, quantity, recompute, expandable_segments, zero_stage, replayed,
               host_share, offload_params, offload_optimizer):
    """:func:`error_band` over one table of entries (``bands``: one quantity's, written from ``gpu``'s runs)."""
    key = str(Engine.parse(engine, "engine"))
    if key == str(Engine.MEGATRON_DEEPSPEED) and not any(k.startswith(key) for k in bands):
        key = str(Engine.DEEPSPEED)

    def runs(e, what="runs"):
        return f"band from {e['n']} held-out {what} ({e['shapes']} model shapes never fitted on) of {key}"

    # a regime's own held-out runs first, where the regime applies and has at least MIN_BAND_RUNS of them: the
    # replay's residuals for a replayed reserve; the expandable-segments runs (the allocator's reserve is most of the
    # device error); ZeRO-3's runs, widened by its process-to-process noise
    step_regime = step_regime_suffix(host_share, zero_stage)

    # a replayed reserve: its offload regime's own replay residuals first (the parameters' or the optimizer's
    # offload buffers leave the replay further from the measured reserve), then the engine's
    regime = replayed_offload_regime(offload_params, offload_optimizer, zero_stage)
    param_offload = regime == PARAM_OFFLOAD_BAND_SUFFIX
    optimizer_offload = regime in (OPTIMIZER_OFFLOAD_BAND_SUFFIX, ZERO3_OPTIMIZER_OFFLOAD_BAND_SUFFIX)
    regimes = ((replayed and regime is not None, f"{REPLAYED_BAND_SUFFIX}/{regime}",
                lambda e: f"{runs(e, OFFLOAD_BAND_RUNS[regime])} on {gpu} with the caching allocator replayed"),
               (replayed, REPLAYED_BAND_SUFFIX, lambda e: f"{runs(e)} on {gpu} with the caching allocator replayed"),
               (param_offload, PARAM_OFFLOAD_BAND_SUFFIX,
                lambda e: f"{runs(e, OFFLOAD_BAND_RUNS[PARAM_OFFLOAD_BAND_SUFFIX])} on {gpu}"),
               (optimizer_offload, OPTIMIZER_OFFLOAD_BAND_SUFFIX,
                lambda e: f"{runs(e, OFFLOAD_BAND_RUNS[OPTIMIZER_OFFLOAD_BAND_SUFFIX])} on {gpu}"),
               (expandable_segments, EXPANDABLE_BAND_SUFFIX, lambda e: f"{runs(e)} with expandable segments on {gpu}"),
               (zero_stage is not None and int(zero_stage) >= 3, ZERO3_BAND_SUFFIX,
                lambda e: f"{runs(e, 'ZeRO-3 runs')} on {gpu}, at least as wide as the spread of one ZeRO-3 "
                          f"configuration measured in separate processes"),
               (step_regime == HOST_BOUND_SUFFIX, HOST_BOUND_SUFFIX,
                lambda e: f"{runs(e, 'host-bound runs')} on {gpu}: half the step or more is host CPU work, whose "
                          f"speed varies from moment to moment"),
               (step_regime == GPU_BOUND_SUFFIX, GPU_BOUND_SUFFIX,
                lambda e: f"{runs(e, 'GPU-bound runs')} on {gpu}"))
    for applies, suffix, note in regimes:
        own = bands.get(f"{key}/{suffix}") if applies else None
        if own and own.get("n", 0) >= MIN_BAND_RUNS:
            return float(own["low_fraction"]), float(own["high_fraction"]), note(own)
    entry = None
    if recompute is not None:  # runs of the same recompute mode when there are enough (its terms differ most)
        entry = bands.get(f"{key}/{Recompute.parse(recompute, 'recompute')}")
        if entry and entry.get("n", 0) < MIN_BAND_RUNS:
            entry = None
    entry = entry or bands.get(key)
    if not entry:
        return None
    note = (f"band from {entry['n']} held-out runs ({entry['shapes']} model shapes never fitted on) of "
            f"{entry.get('engine', key)} on {gpu}")
    return float(entry["low_fraction"]), float(entry["high_fraction"]), note


def estimate_memory(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, profile=None,
                    overlap_comm=None) -> MemoryEstimate:
    """Per-stage memory for the plan (validated first). A measured ``profile``
    (:class:`workbench.calibrate.HardwareProfile`) supplies the overhead term's context, NCCL and reserve.
    ``overlap_comm``: DeepSpeed's ``zero_optimization.overlap_comm`` (two reduce buckets for ZeRO-1/2); ``None``
    takes the plan's (:attr:`ParallelPlan.overlaps_comm`)."""
    validate(model, cluster, plan)
    codes = plan_codes(plan, model)
    if overlap_comm is not None:
        codes["overlap_comm"] = int(overlap_comm)
    return memory_estimate_from(model, cluster, plan, codes, profile=profile)


_SCALAR_STAGES = 2
"""Up to this many pipeline stages :func:`memory_estimate_from` prices each stage in its own scalar call of
:func:`stage_terms` (same numbers: every operation is element-wise); more stages go in one call on arrays."""


def memory_estimate_from(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, codes: dict, *,
                         profile=None, replayed_peaks=None) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of every pipeline stage from the encoded ``codes``
    (:func:`workbench.encode.memory_inputs`), all stages priced in one call of :func:`stage_terms`.
    ``replayed_peaks``: the caching allocator replayed for this one-GPU plan
    (:func:`workbench.allocsim.plan_replayed_peaks`); its peak reserved is taken whole, DeepSpeed's initialization
    included: the overhead term's reserve becomes what it holds above the estimate's allocated peak
    (:func:`replayed_reserve_over_allocated`), in place of :data:`RESERVE_FRACTION` or a profile's."""
    codes = dict(codes)
    formulas = dict(FORMULAS)
    reserve_fraction = None if replayed_peaks is None else replayed_reserve_over_allocated(model, codes, replayed_peaks)
    if replayed_peaks is not None:  # the replay's peak already holds DeepSpeed's initialization
        codes["init_phase"] = 0
    if profile is not None and "overheads" not in codes:
        codes["overheads"], _ = profile.memory_overheads()
    if reserve_fraction is not None:  # the replayed reserve replaces the constant's (or the profile's)
        o = dict(codes.get("overheads") or {})
        if o.get("floor"):  # a bare-process profile's figures are lower bounds: keep its own, measured ones only
            o = {k: v for k, v in o.items() if k in ("context_bytes", "nccl_bytes") and v is not None}
            o = {k: max(float(v), plan_overheads(plan)[k]) for k, v in o.items()}
        if profile is None:  # the stack's own memory outside the allocator: the replay leaves nothing to cover
            o["context_bytes"] = stack_outside_bytes(model, plan)
        codes["overheads"] = {**o, "reserve_fraction": float(reserve_fraction), "reserve_replayed": True}
    if profile is not None:
        o = codes["overheads"]
        expandable = int(plan.expandable_segments)
        own = plan_overheads(plan)
        used = {k: own[k] if o.get(k) is None or (expandable and k == "reserve_fraction" and reserve_fraction is None)
                else (max(float(o[k]), own[k]) if o.get("floor") else float(o[k])) for k in own}
        formulas["overhead"] = (f"context {used['context_bytes'] / 2**20:.0f} MiB (+ NCCL "
                                f"{used['nccl_bytes'] / 2**20:.0f} MiB with >1 rank) + allocator reserve "
                                f"{used['reserve_fraction']:.1%}{' (replayed)' if reserve_fraction is not None else ''}"
                                f" of allocated (profile {profile.name}"
                                f"{'; its bare-process figures are lower bounds' if o.get('floor') else ''}"
                                f"{'; expandable segments' if expandable else ''})")
    elif reserve_fraction is not None:
        reserved = replayed_peaks.peak_reserved_bytes
        formulas["overhead"] = (f"outside the allocator {stack_outside_bytes(model, plan) / GiB:.2f} GiB per process "
                                f"({'/'.join(stack_outside_key(model, plan))}) "
                                f"+ what the caching allocator reserves above the allocated terms "
                                f"({reserved * reserve_fraction / (1 + reserve_fraction) / GiB:+.2f} GiB, "
                                f"{float(reserve_fraction):.1%} (replayed) of allocated): PyTorch's caching allocator "
                                f"replayed over building the model and the plan's traced training steps "
                                f"(workbench.allocsim) reserves {reserved / GiB:.2f} GiB at its peak (its allocated "
                                f"peak {replayed_peaks.peak_allocated_bytes / GiB:.2f} GiB, DeepSpeed's "
                                f"initialization included), taken whole")
    elif plan.expandable_segments:
        engine = plan_engine_key(plan)
        formulas["overhead"] = (f"outside the allocator {OUTSIDE_ALLOCATOR_BYTES[engine] / GiB:.2f} GiB per process "
                                f"(+ NCCL {NCCL_BYTES_BY_ENGINE[engine] / GiB:.1f} GiB with >1 rank) + allocator "
                                f"reserve {RESERVE_FRACTION_EXPANDABLE[engine]:.1%} of allocated with "
                                "expandable_segments:True (H200, fit split)")
    if plan.tp_comm_overlap:
        ub = float(userbuffer_bytes(seq_length=model.seq_length, micro_batch=plan.micro_batch_size,
                                    hidden_size=model.hidden_size, context_parallel=plan.context_parallel,
                                    value_bytes=plan.precision.bytes_per_value, fp8=int(plan.precision.is_fp8),
                                    fp8_bf16=plan.fp8_bf16_first_layers + plan.fp8_bf16_last_layers,
                                    tp_comm_overlap=1))
        formulas["overhead"] += (f"; + Transformer Engine TP userbuffers {ub / GiB:.2f} GiB outside the allocator "
                                 f"(--tp-comm-overlap: 12 buffers of s·b/c × h, TE initialize_ub)")
    stages = []
    host_per_gpu = offloaded_per_gpu = nvme_per_gpu = 0
    p = plan.pipeline_parallel
    stage_layers = plan.stage_layers(model.num_layers)
    if p <= _SCALAR_STAGES:  # one scalar call per stage: cheaper than numpy on arrays of one or two elements
        per_stage = [stage_terms(model, stage=stage, **codes) for stage in range(p)]
    else:
        every = stage_terms(model, stage=np.arange(p), **codes)  # every stage at once
        every = {k: (v.tolist() if ndim(v) else [v] * p) for k, v in every.items()}
        per_stage = [{k: v[stage] for k, v in every.items()} for stage in range(p)]
    for stage, t in enumerate(per_stage):
        terms = MemoryTerms(**{k: int(round(float(t[k]))) for k in
                               ("weights", "gradients", "optimizer", "activations", "buffers", "overhead")})
        stages.append(StageMemory(stage=stage, num_layers=stage_layers[stage],
                                  has_embedding=stage == 0, has_output=stage == plan.pipeline_parallel - 1,
                                  terms=terms, in_flight_microbatches=float(t["in_flight"]),
                                  peak_phase=("initialization" if bool(t["init_peak"]) else
                                              "optimizer step" if bool(t["step_peak"]) else "backward"),
                                  backward_activation_bytes=int(round(float(t["backward_activations"]))),
                                  releasable_cached_bytes=int(round(float(t["releasable"])))))
        host_per_gpu = max(host_per_gpu, int(round(float(t["host"]))))
        offloaded_per_gpu = max(offloaded_per_gpu, int(round(float(t["offloaded"]))))
        # the states swapped to the drive (the host's swap buffers are host_resident_bytes'; ZeRO-1/2 keep them in
        # host memory whatever the device says, ParallelPlan.nvme_optimizer)
        nvme_per_gpu = max(nvme_per_gpu, int(round(float(t["nvme"]))))
    peak = max(st.total_bytes for st in stages)
    if any(st.peak_phase == "initialization" for st in stages):
        formulas["buffers"] = (formulas.get("buffers", "") + "; at initialization, this plan's peak: the GPU clone of "
                               "the rank's 16-bit partition DeepSpeed makes the fp32 master from on the host, beside "
                               "the flat 16-bit buffer (weights; stage_1_and_2.py, deepspeed_init_bytes)")
    if plan.nvme_optimizer:
        formulas["buffers"] = (formulas.get("buffers", "") + "; with the optimizer on NVMe, each reduced bucket's "
                               "fp32 gradient casts, held until they are swapped out together (stage3.py "
                               "partition_grads, zero3_nvme_gradient_list_bytes)")
    band = error_band(plan.engine, "device", plan.recompute, plan.expandable_segments, zero_stage=plan.zero_stage,
                      replayed=reserve_fraction is not None, offload_params=plan.offload_params,
                      offload_optimizer=plan.offload_optimizer)
    low, high, note = (0.0, 0.0, f"no held-out measurements for engine {plan.engine}") if band is None else band
    return MemoryEstimate(
        band_low_bytes=int(round(peak * low)), band_high_bytes=int(round(peak * high)), band_note=note,
        stages=tuple(stages),
        capacity_bytes=cluster.gpu.memory_bytes,
        host_bytes_per_gpu=host_per_gpu,
        host_bytes_per_node=host_per_gpu * cluster.gpus_per_node,
        host_capacity_bytes_per_node=int(cluster.host_memory_gib_per_node * GiB),
        nvme_bytes_per_gpu=nvme_per_gpu,
        nvme_bytes_per_node=nvme_per_gpu * cluster.gpus_per_node,
        nvme_capacity_bytes_per_node=int(cluster.nvme_gib_per_node * GiB),
        offloaded_bytes_per_gpu=offloaded_per_gpu,
        formulas=formulas,
    )


def fp8_memory_terms(model: ModelSpec, plan: ParallelPlan) -> dict:
    """What FP8 changes on one rank of the first pipeline stage, in bytes, for an FP8 plan (``{}`` otherwise):
    ``weight_copies`` (the cached FP8 weights, net of the bf16 weights ``--fp8-param-gather`` drops; part of
    ``weights``), ``scaling_state`` (delayed scaling's amax histories; part of ``buffers``) and ``activations`` (the
    change of the stored activations at the backward peak, negative: linear inputs kept in FP8)."""
    if not plan.precision.is_fp8:
        return {}
    from workbench import encode

    codes = encode.memory_inputs(model, encode.plan_columns(plan, model), plan.precision)
    first = plan.stage_layers(model.num_layers)[0]
    layers = (first - bf16_layers_on_stage(model.num_layers, plan.pipeline_parallel, plan.virtual_pipeline, 0,
                                           plan.fp8_bf16_first_layers, plan.fp8_bf16_last_layers,
                                           codes["first_stage_layers"], codes["middle_stage_layers"],
                                           codes["last_stage_layers"]))
    kw = dict(micro_batch=plan.micro_batch_size, tensor_parallel=plan.tensor_parallel,
              sequence_parallel=plan.sequence_parallel, context_parallel=plan.context_parallel)
    stored = 0 if plan.recompute is Recompute.FULL else layers
    in_flight = in_flight_microbatches(plan.pipeline_parallel, 0, plan.num_microbatches, plan.virtual_pipeline)
    moe_kw = {k: codes[k] for k in ("expert_tensor_parallel", "moe_token_factor") if k in codes}
    ep_kw = {k: codes[k] for k in ("expert_parallel", "expert_tensor_parallel") if k in codes}
    delta = fp8_activation_delta_bytes(model, value_bytes=2, recipe=codes["fp8_recipe"], **kw, **moe_kw)
    return {"weight_copies": float(fp8_weight_bytes(model, tensor_parallel=plan.tensor_parallel, fp8_layers=layers,
                                                    recipe=codes["fp8_recipe"],
                                                    param_gather=codes["fp8_param_gather"], value_bytes=2,
                                                    **ep_kw)),
            "scaling_state": float(fp8_scaling_state_bytes(model, fp8_layers=layers, recipe=codes["fp8_recipe"])),
            "activations": float(delta * (stored * in_flight + 1))}


def deepspeed_flatten_bytes(plan: ParallelPlan, memory) -> int:
    """Bytes DeepSpeed ZeRO-1/2 holds on a GPU while it flattens the 16-bit parameters at initialization — the
    parameters and the flat buffer, two copies (``stage_1_and_2.py``: ``flatten_dense_tensors_aligned`` on the
    accelerator when the free memory allows, the parameters becoming views of it afterwards) — where that is more than
    the estimate's peak (the peak stage's allocated terms: training's, or the offload clone's of
    :func:`deepspeed_init_bytes`, which on one GPU is as large); 0 otherwise, for other engines and stages, for
    LoRA (only the adapters are flattened) and without a ``memory`` estimate. Not a requirement: without the room
    DeepSpeed flattens on the CPU."""
    if memory is None or plan.engine is Engine.MEGATRON or int(plan.zero_stage) not in (1, 2) or plan.lora_rank:
        return 0
    init = 2 * memory.peak_stage.terms.weights
    return int(init) if init > _training_allocated_bytes(memory) else 0


def _training_allocated_bytes(memory) -> float:
    """The peak stage's allocated terms of training (weights, gradients, optimizer states, activations, buffers)."""
    t = memory.peak_stage.terms
    return t.weights + t.gradients + t.optimizer + t.activations + t.buffers


def replayed_reserve_over_allocated(model: ModelSpec, codes: dict, replayed_peaks) -> float:
    """The reserve fraction that puts a one-GPU plan's device peak at its memory outside the allocator + the
    replayed peak reserved (:class:`workbench.allocsim.ReplayedPeaks`): ``peak reserved / A − 1``, ``A`` the
    estimate's allocated peak (weights, gradients, optimizer states, activations and buffers of
    :func:`stage_terms`), so that the overhead term holds what the replay reserved above it — its own reserve and
    whatever it allocated beyond the training peak the terms price (DeepSpeed's initialization flatten).
    ``benchmarks/alloc_sim.py`` scores exactly this whole-device figure (``device_error_replay_peak``)."""
    t = stage_terms(model, stage=0, **{**codes, "init_phase": 0})  # the training terms: the replay holds the rest
    allocated = sum(float(t[k]) for k in ("weights", "gradients", "optimizer", "activations", "buffers"))
    return replayed_peaks.peak_reserved_bytes / allocated - 1.0


def memory_notes(model: ModelSpec, plan: ParallelPlan, memory=None) -> list:
    """Where the estimate rises although a saver was switched on — each is what DeepSpeed really allocates
    (read in ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py``, measured on H200,
    ``benchmarks/results/gpu_memory_calibration.json``), so the Memory view says why instead of hiding it. With the
    plan's :class:`MemoryEstimate` (``memory``) a note about ZeRO-1/2's reduce buckets is left out where the peak
    does not hold them (they live through the backward only: a peak in the optimizer step has none)."""
    notes = []
    fp8 = fp8_memory_terms(model, plan)
    if fp8:
        copies = ("its FP8 weight and transpose replace the bf16 weight (--fp8-param-gather)" if plan.fp8_param_gather
                  else "Transformer Engine caches each linear weight in FP8 row-wise and column-wise beside the bf16 "
                       "weight")
        notes.append(f"FP8 ({plan.fp8_recipe} recipe): weights {fp8['weight_copies'] / GiB:+.2f} GiB ({copies}); "
                     f"activations {fp8['activations'] / GiB:+.2f} GiB (linear inputs saved in FP8 for the "
                     f"weight-gradient GEMMs)"
                     + (f"; amax history {fp8['scaling_state'] / 2**20:.1f} MiB" if fp8["scaling_state"] else ""))
    if plan.engine is Engine.MEGATRON:
        return notes
    stage = int(plan.zero_stage)
    at_init = memory is not None and memory.peak_stage.peak_phase == "initialization"
    if at_init:
        t = memory.peak_stage.terms
        notes.append(f"this plan peaks at initialization: ZeRO-{stage} with the optimizer on the CPU makes the fp32 "
                     f"master on the host from a GPU clone of the 16-bit partition ({t.buffers / GiB:.1f} GiB) "
                     f"beside the flat 16-bit buffer ({t.weights / GiB:.1f} GiB), before any gradient or activation "
                     f"(stage_1_and_2.py); DeepSpeed has no fallback for it, so it must fit; more GPUs shrink the "
                     f"partition (H200, Mistral 7B at 16 layers, checkpointed: 14.00 GiB measured, twice its bf16 "
                     f"weights)")
    if memory is not None and memory.releasable_cached_bytes > 0:
        notes.append(f"on a GPU with room the device will show {memory.observed_peak_bytes / GiB:.1f} GiB, "
                     f"{memory.releasable_cached_bytes / GiB:.1f} GiB more than this plan needs: ZeRO-{stage} with the "
                     f"optimizer on the CPU flattens the 16-bit parameters on the GPU, so their own blocks stay cached "
                     f"beside the flat buffer and the partition's GPU clone (stage_1_and_2.py; H200: 3.00-3.01x the "
                     f"16-bit weights on one GPU); they are whole free segments, which PyTorch's allocator releases "
                     f"when a request does not fit, so they are not needed to fit")
    if stage in (1, 2) and not at_init and (memory is None or memory.peak_stage.terms.buffers > 0):
        buckets = 2 if plan.overlaps_comm else 1
        bucket_gib = buckets * plan.reduce_bucket_elements * plan.precision.bytes_per_value / GiB
        notes.append(f"ZeRO-{stage} allocates its gradient reduce bucket{'s' if buckets > 1 else ''} at "
                     f"reduce_bucket_size ({plan.reduce_bucket_elements:.0e} elements: {bucket_gib:.2f} GiB"
                     f"{' with overlap_comm' if buckets > 1 else ''}) whatever the model size (setup_buckets), so "
                     f"for a small model ZeRO-1 can need more than ZeRO-0 (H200, 1.3B model, 1 GPU: 46.1 GiB "
                     f"ZeRO-0, 47.0 GiB ZeRO-1); lower reduce_bucket_size for small models")
    init = deepspeed_flatten_bytes(plan, memory)
    if init:
        steps = _training_allocated_bytes(memory)
        notes.append(f"at initialization ZeRO-{stage} flattens the 16-bit parameters into one buffer while they still "
                     f"hold their own storage (stage_1_and_2.py): {init / GiB:.1f} GiB, above this plan's "
                     f"{steps / GiB:.1f} GiB allocated peak, when that much is free (else it flattens on the CPU, a "
                     f"slower start), so max_memory_allocated can read {init / GiB:.1f} GiB; the estimate prices what "
                     f"must fit (on one GPU with the optimizer on the CPU the fp32 master's GPU clone at "
                     f"initialization is as large, and priced)")
    # ZeRO shards over data x context parallel (DeepSpeed-Ulysses' sequence-data-parallel group), as stage_terms does
    # (without offload: with the optimizer on the host the fp32 gradient partition is there too)
    if (stage == 3 and plan.data_parallel * plan.context_parallel <= 2 and plan.offload_optimizer is Offload.NONE
            and plan.offload_params is Offload.NONE):
        notes.append("ZeRO-3 keeps the fp32 gradient partition through backward plus the gathered and prefetched "
                     "layers; at data parallel <= 2 that outweighs sharding the weights (H200, 1.3B model: 47.0 -> "
                     "49.4 GiB at 1 GPU, 39.6 -> 41.5 GiB at 2 GPUs from ZeRO-2 to ZeRO-3)")
    if plan.world_size > 1:
        notes.append(f"with more than one rank NCCL's communicators hold {NCCL_BYTES / GiB:.1f} GiB outside the "
                     f"allocator on each GPU (H200, NVLink, NVLS off: 8.2-8.5 GiB outside with 2 ranks, 2.2 GiB "
                     f"with 1; measured on 2 GPUs, more peers need more)")
    return notes

