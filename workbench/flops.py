"""Floating-point operations of one training step of a decoder-only transformer.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
(arXiv 2104.04473), appendix "Floating-point operations", and its generalisation in Megatron-LM's
``num_floating_point_operations`` (megatron/training/training.py: GQA via num_query_groups, SwiGLU via a 3/2 factor
on the MLP, MoE via top-k routed experts, ``kv_channels`` different from h/a, optional causal halving of the
attention score/value products).

Counting convention: a GEMM of an (m×k) by (k×n) matrix costs 2·m·k·n; every GEMM runs three times per step (forward,
backward data-gradient, backward weight-gradient), so a training step costs 3 × the forward. Element-wise work
(norms, softmax, activations) and the MoE router are not counted, as in Megatron.

*Model* FLOPs are what the model needs; *hardware* FLOPs add what recomputation executes again: full recompute a
second forward of the recomputed transformer layers, selective recompute a second forward of the attention core
(QKᵀ and score·V) — Korthikanti et al. 2022 (arXiv 2205.05198) §5.

Every function takes plain numbers and works on Python scalars and numpy arrays alike.
"""
from __future__ import annotations

import numpy as np

from workbench.params import padded_vocab_size
from workbench.specs import AttentionImpl, ModelSpec, ParallelPlan, Recompute

RECOMPUTE_CODES = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
"""Numeric codes for recompute modes in array evaluations: 0 none, 1 selective, 2 full."""


def layer_gemm_flops_per_token(*, hidden_size, query_projection_size, kv_projection_size, ffn_hidden_size,
                               gated, experts_per_token=1):
    """Forward FLOPs of one layer's weight GEMMs per token:
    QKV 2·h·(q + 2·kv) + output projection 2·q·h + MLP 2·h·f·(3 if gated else 2)·experts_per_token.

    ``q`` = heads·head_dim, ``kv`` = query_groups·head_dim; gated (SwiGLU) MLPs have fc1 of width 2f.
    """
    h, q, kv, f = hidden_size, query_projection_size, kv_projection_size, ffn_hidden_size
    attention = 2 * h * (q + 2 * kv) + 2 * q * h
    mlp = 2 * h * f * (2 + np.asarray(gated, dtype=float)) * experts_per_token
    return attention + mlp


def attention_core_flops_per_token(*, seq_length, query_projection_size, causal=False):
    """Forward FLOPs per token of the attention core: QKᵀ (2·s·q) plus scores·V (2·s·q) = 4·s·q; half of it when
    only the causal (lower) triangle is computed (``causal``; flash kernels skip masked blocks, the unfused
    softmax path computes the whole s×s matrix)."""
    return 4 * seq_length * query_projection_size * (1 - 0.5 * np.asarray(causal, dtype=float))


def logits_flops_per_token(*, hidden_size, vocab_size):
    """Forward FLOPs per token of the output layer: 2·h·V (V the padded vocabulary)."""
    return 2 * hidden_size * vocab_size


def flops_per_second_per_gpu(flops_per_step, step_seconds, world_size):
    """FLOP/s each GPU sustains: a step's FLOPs over its seconds and its GPUs. Over the GPU's dense peak it is the
    FLOPs utilisation (MFU with model FLOPs, HFU with the executed ones: Korthikanti et al. 2022, §6)."""
    return flops_per_step / step_seconds / world_size


def model_flops_per_step(*, tokens, num_layers, layer_gemm_per_token, attention_core_per_token, logits_per_token):
    """Model FLOPs of one optimizer step: 3 × forward = 3·tokens·(L·(GEMMs + attention core) + logits)
    (Narayanan et al. 2021 eq. without recompute: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for GPT layers)."""
    return 3.0 * tokens * (num_layers * (layer_gemm_per_token + attention_core_per_token) + logits_per_token)


def recompute_flops_per_step(*, tokens, num_layers, layer_gemm_per_token, attention_core_per_token, recompute,
                             recomputed_layers=None):
    """FLOPs executed again by activation recomputation in one step.

    ``recompute`` code 2 (full): one more forward of each recomputed layer, tokens·recomputed_layers·(GEMMs + core)
    (Narayanan et al. 2021: 96 instead of 72, logits not recomputed); code 1 (selective): one more attention core
    per layer, tokens·L·core (Korthikanti et al. 2022 §5); code 0: nothing.
    ``recomputed_layers`` defaults to all layers.
    """
    recompute = np.asarray(recompute)
    layers_full = num_layers if recomputed_layers is None else recomputed_layers
    full = 1.0 * tokens * layers_full * (layer_gemm_per_token + attention_core_per_token)
    selective = 1.0 * tokens * num_layers * attention_core_per_token
    return np.where(recompute == 2, full, np.where(recompute == 1, selective, 0.0))


# ---------------------------------------------------------------------------------------------------------------
# Spec-level wrappers
# ---------------------------------------------------------------------------------------------------------------
def model_terms_per_token(model: ModelSpec, *, tensor_parallel: int = 1, causal: bool | None = None) -> dict:
    """Per-token forward FLOPs of ``model``: layer GEMMs, attention core and logits (padded vocabulary).

    ``causal`` None means: halve the attention core only for flash attention, which skips masked blocks.
    """
    if causal is None:
        causal = model.attention is AttentionImpl.FLASH
    if model.is_moe:
        ffn, experts = model.moe_ffn_hidden_size, model.moe_top_k
    else:
        ffn, experts = model.ffn_hidden_size, 1
    return {
        "layer_gemm": layer_gemm_flops_per_token(
            hidden_size=model.hidden_size, query_projection_size=model.query_projection_size,
            kv_projection_size=model.kv_projection_size, ffn_hidden_size=ffn, gated=model.is_gated,
            experts_per_token=experts),
        "attention_core": attention_core_flops_per_token(
            seq_length=model.seq_length, query_projection_size=model.query_projection_size, causal=causal),
        "logits": logits_flops_per_token(hidden_size=model.hidden_size,
                                         vocab_size=padded_vocab_size(model.vocab_size, tensor_parallel)),
    }


def step_flops(model: ModelSpec, plan: ParallelPlan, *, causal: bool | None = None) -> dict:
    """Model and hardware FLOPs of one optimizer step of ``plan`` (all GPUs together).

    Returns ``{"model": ..., "recompute": ..., "hardware": ...}`` in FLOPs.
    """
    terms = model_terms_per_token(model, tensor_parallel=plan.tensor_parallel, causal=causal)
    tokens = plan.global_batch_size * model.seq_length
    model_f = model_flops_per_step(tokens=tokens, num_layers=model.num_layers,
                                   layer_gemm_per_token=terms["layer_gemm"],
                                   attention_core_per_token=terms["attention_core"],
                                   logits_per_token=terms["logits"])
    layers = None
    if plan.recompute is Recompute.FULL and plan.recompute_layers is not None:
        layers = plan.recompute_layers * plan.pipeline_parallel
    extra = recompute_flops_per_step(tokens=tokens, num_layers=model.num_layers,
                                     layer_gemm_per_token=terms["layer_gemm"],
                                     attention_core_per_token=terms["attention_core"],
                                     recompute=RECOMPUTE_CODES[plan.recompute], recomputed_layers=layers)
    return {"model": float(model_f), "recompute": float(extra), "hardware": float(model_f + extra)}
