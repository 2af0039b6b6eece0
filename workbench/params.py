"""Parameter counts of megatron-core's GPTModel (local layer spec), component by component.

Source: megatron-core ``GPTModel`` + ``get_gpt_layer_local_spec()`` — per layer: input norm, ``linear_qkv``
(h → a·d + 2·g·d), ``linear_proj`` (a·d → h), pre-MLP norm, ``linear_fc1`` (h → f, or 2f when gated),
``linear_fc2`` (f → h); biases on every linear when ``add_bias_linear``; a bias-free router (h·E) for MoE.
Embedding V·h (+ s·h learned positions), final norm, output layer V·h when untied.
The formulas work on Python ints and on numpy arrays alike.
"""
from __future__ import annotations

import functools

from workbench.specs import Implementation, ModelSpec, Normalization, ParameterCounts


def norm_params(hidden_size, normalization: Normalization):
    """LayerNorm has a weight and a bias (2h); RMSNorm a weight only (h)."""
    return (2 if normalization is Normalization.LAYERNORM else 1) * hidden_size


def qk_norm_widths(m: ModelSpec) -> tuple:
    """Widths of the query and key norms, ``(q, k)``: one head's d each (``qk_norm``: Qwen3, Gemma 3), the whole
    projections a·d and g·d (``qk_norm_projection``: OLMo 2 and 3), ``(0, 0)`` without them."""
    if not m.qk_norm:
        return 0, 0
    if m.qk_norm_projection:
        return m.query_projection_size, m.kv_projection_size
    return m.head_dim, m.head_dim


def qk_norm_params(m: ModelSpec) -> int:
    """Parameters of the query and key norms (:func:`qk_norm_widths`)."""
    return sum(norm_params(w, m.normalization) for w in qk_norm_widths(m))


def attention_params(m: ModelSpec) -> int:
    """Norm + QKV projection (h·(a·d + 2·g·d)) + output projection (a·d·h), with biases when present; the query/key
    norms (:func:`qk_norm_params`) and the norm on the attention output (``sandwich_norm``) when present."""
    qkv_out = m.query_projection_size + 2 * m.kv_projection_size
    weights = m.hidden_size * qkv_out + m.query_projection_size * m.hidden_size
    biases = (qkv_out if m.qkv_bias else 0) + (m.hidden_size if m.add_bias_linear else 0)
    norms = (2 if m.sandwich_norm else 1) * norm_params(m.hidden_size, m.normalization)
    return norms + weights + biases + qk_norm_params(m)


def mlp_expert_params(hidden_size, ffn_hidden_size, gated: bool, bias: bool):
    """One MLP (or expert): fc1 h→f (2f when gated) and fc2 f→h, with biases when present."""
    fc1_out = (2 if gated else 1) * ffn_hidden_size
    weights = hidden_size * fc1_out + ffn_hidden_size * hidden_size
    biases = (fc1_out + hidden_size) if bias else 0
    return weights + biases


def mlp_params(m: ModelSpec, active_only: bool = False) -> int:
    """Norm + MLP; for MoE the router (h·E) and E experts (top-k experts when ``active_only``)."""
    norm = (2 if m.sandwich_norm else 1) * norm_params(m.hidden_size, m.normalization)
    if not m.is_moe:
        return norm + mlp_expert_params(m.hidden_size, m.ffn_hidden_size, m.is_gated, m.add_bias_linear)
    experts = m.moe_top_k if active_only else m.num_experts
    one = mlp_expert_params(m.hidden_size, m.moe_ffn_hidden_size, m.is_gated, m.add_bias_linear)
    return norm + m.hidden_size * m.num_experts + experts * one + shared_expert_params(m)


def shared_expert_params(m: ModelSpec) -> int:
    """Qwen2-MoE's shared expert: one MLP of ``shared_expert_ffn_hidden_size`` and its h→1 gate (0 without one)."""
    if m.shared_expert_ffn_hidden_size is None:
        return 0
    return (mlp_expert_params(m.hidden_size, m.shared_expert_ffn_hidden_size, m.is_gated, m.add_bias_linear)
            + m.hidden_size)


def parameter_tensors(m: ModelSpec) -> int:
    """Parameter tensors of the whole model (what per-tensor work — DeepSpeed's gradient hooks and per-tensor norms
    — loops over): per layer the linears' weights and biases (:func:`layer_linear_tensors`), two norms (LayerNorm:
    weight and bias; +2 with ``sandwich_norm``, +2 for ``qk_norm``); the word and learned position embeddings, the
    final norm and the untied output layer."""
    norm = 2 if m.normalization is Normalization.LAYERNORM else 1
    per_layer = layer_linear_tensors(m) + norm * (2 + (2 if m.sandwich_norm else 0) + (2 if m.qk_norm else 0))
    from workbench.specs import Positions

    extra = 1 + (1 if m.position_embedding is Positions.LEARNED else 0) + norm + (0 if m.tied_embeddings else 1)
    return m.num_layers * per_layer + extra


def layer_linear_tensors(m: ModelSpec) -> int:
    """Weight and bias tensors of one layer's linear layers.

    megatron-core (local spec): ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2`` (an MoE layer: the
    router and fc1, fc2 per expert of ``SequentialMLP``), a bias on each when ``add_bias_linear`` (none on the
    router), the QKV bias alone when ``qkv_bias``.

    transformers 5: GPT-2 and GPT-NeoX (LayerNorm) fuse Q, K, V into one projection: four linears with biases.
    StarCoder2 (LayerNorm, ``separate_qkv``) and the RMSNorm families keep ``q_proj``, ``k_proj``, ``v_proj``,
    ``o_proj`` and the MLP's ``gate_proj``, ``up_proj``, ``down_proj`` (StarCoder2: ``c_fc``, ``c_proj``) apart;
    their MoE layers hold a router weight [E, h] and ONE experts module with two fused 3-D
    tensors, ``gate_up_proj`` [E, 2f, h] and ``down_proj`` [E, h, f] (``MixtralExperts``,
    transformers/models/mixtral/modeling_mixtral.py; Qwen2/3-MoE alike), plus Qwen2-MoE's shared expert (three
    linears) and its h→1 gate. Q/K/V biases with ``qkv_bias``; the others with ``add_bias_linear``. Phi-3
    (``fused_projections``) fuses them into ``qkv_proj`` and ``gate_up_proj``: four linears, without biases."""
    bias = m.add_bias_linear
    if m.implementation is not Implementation.TRANSFORMERS or hf_gpt_layer(m):
        linears = 2 + (1 + 2 * m.num_experts if m.is_moe else 2)
        return (linears * (2 if bias else 1) - (1 if m.is_moe and bias else 0)
                + (1 if m.qkv_bias and not bias else 0))
    if m.fused_projections:  # qkv_proj, o_proj, gate_up_proj, down_proj (Phi3Attention, Phi3MLP)
        return 4 * (2 if bias else 1) + (1 if m.qkv_bias and not bias else 0)
    mlp_linears = 3 if m.is_gated else 2
    attention = 4 + (3 if m.qkv_bias else 0) + (1 if bias else 0)
    if not m.is_moe:
        return attention + mlp_linears * (2 if bias else 1)
    shared = 0 if m.shared_expert_ffn_hidden_size is None else mlp_linears * (2 if bias else 1) + 1
    return attention + 1 + 2 * (2 if bias else 1) + shared


def weight_tensor_sizes(m: ModelSpec, tensor_parallel: int = 1) -> list:
    """Element counts of the model's weight tensors on one tensor-parallel rank, in the order its modules register
    them (what DeepSpeed's flat groups and ZeRO-3's sub-groups walk): the word (and learned position) embedding,
    each layer's projections as :func:`layer_linear_tensors` lists them (norms and biases, small, left out), the
    untied output layer. MoE: megatron-core's per-expert linears, transformers' router and fused 3-D expert
    weights (and Qwen2-MoE's shared expert)."""
    from workbench.specs import Positions

    h, t = m.hidden_size, tensor_parallel
    q, kv = m.query_projection_size, m.kv_projection_size
    vocab = model_vocab_size(m, t)
    gated = 2 if m.is_gated else 1
    hf = m.implementation is Implementation.TRANSFORMERS and not hf_gpt_layer(m)
    layer = []
    if hf and not m.fused_projections:
        layer += [h * q / t, h * kv / t, h * kv / t, q * h / t]
    else:
        layer += [h * (q + 2 * kv) / t, q * h / t]
    if m.is_moe:
        f = m.moe_ffn_hidden_size
        if m.implementation is Implementation.TRANSFORMERS:
            layer += [h * m.num_experts, m.num_experts * gated * f * h / t, m.num_experts * h * f / t]
        else:
            layer += [h * m.num_experts] + [gated * f * h / t, f * h / t] * m.num_experts
        if m.shared_expert_ffn_hidden_size:
            sf = m.shared_expert_ffn_hidden_size
            layer += ([h * sf / t] * gated + [sf * h / t, h]) if hf else [gated * h * sf / t, sf * h / t, h]
    elif hf and m.is_gated and not m.fused_projections:
        layer += [h * m.ffn_hidden_size / t] * 2 + [m.ffn_hidden_size * h / t]
    else:
        layer += [gated * h * m.ffn_hidden_size / t, m.ffn_hidden_size * h / t]
    out = [vocab * h / t]
    if m.position_embedding is Positions.LEARNED:
        out.append(m.position_table_size * h)
    out += layer * m.num_layers
    if not m.tied_embeddings:
        out.append(vocab * h / t)
    return out


def embedding_params(m: ModelSpec, vocab_size: int | None = None) -> int:
    """Word embedding V·h plus the learned absolute position table (max_position_embeddings, else s, rows of h)."""
    vocab = m.vocab_size if vocab_size is None else vocab_size
    return vocab * m.hidden_size + m.position_table_size * m.hidden_size


def padded_vocab_size(vocab_size, tensor_parallel=1, divisible_by: int = 128):
    """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by (128) × tp``
    (megatron/training/tokenizer: ``_vocab_size_with_padding``)."""
    multiple = divisible_by * tensor_parallel
    return ((vocab_size + multiple - 1) // multiple) * multiple


def model_vocab_size(m: ModelSpec, tensor_parallel=1):
    """Rows of the embedding and output layer as trained: megatron-core pads the vocabulary to 128·t
    (:func:`padded_vocab_size`); a transformers model keeps the config's ``vocab_size``."""
    if m.implementation is Implementation.TRANSFORMERS:
        return m.vocab_size
    return padded_vocab_size(m.vocab_size, tensor_parallel)


@functools.lru_cache(maxsize=256)
def parameter_counts(m: ModelSpec) -> ParameterCounts:
    """The model's :class:`ParameterCounts` (remembered per model: a frozen spec's counts never change)."""
    return ParameterCounts(
        embedding=embedding_params(m),
        attention_per_layer=attention_params(m),
        mlp_per_layer=mlp_params(m),
        final_norm=norm_params(m.hidden_size, m.normalization),
        output=0 if m.tied_embeddings else m.vocab_size * m.hidden_size,
        num_layers=m.num_layers,
        active_mlp_per_layer=mlp_params(m, active_only=True),
    )


def hf_gpt_layer(m: ModelSpec) -> bool:
    """Whether a transformers model's layer is laid out as GPT-2's (``c_attn``, ``c_proj``, ``c_fc``, ``c_proj``) and
    GPT-NeoX's (``query_key_value``, ``dense``, ``dense_h_to_4h``, ``dense_4h_to_h``): LayerNorm, q, k and v in ONE
    projection, a two-matrix MLP: the supported LayerNorm families but StarCoder2, which keeps ``q_proj``,
    ``k_proj``, ``v_proj``, ``o_proj`` apart (:attr:`~workbench.specs.ModelSpec.separate_qkv`)."""
    return (m.implementation is Implementation.TRANSFORMERS and m.normalization is Normalization.LAYERNORM
            and not m.separate_qkv)


def hf_fused_qkv(m: ModelSpec) -> bool:
    """Whether a transformers model computes q, k and v in one projection that peft wraps as one LoRA module:
    GPT-2 (``c_attn``) and GPT-NeoX (``query_key_value``), :func:`hf_gpt_layer`, and Phi-3 (``qkv_proj``:
    :attr:`~workbench.specs.ModelSpec.fused_projections`)."""
    return hf_gpt_layer(m) or (m.implementation is Implementation.TRANSFORMERS and m.fused_projections)


def lora_modules_per_layer(m: ModelSpec, rank: int, targets) -> int:
    """Projections of one layer that peft wraps in a LoRA ``Linear`` (each forward runs the frozen projection and
    then, in Python, ``lora_B(lora_A(dropout(x))) * scaling`` added to it: peft ``tuners/lora/layer.py``
    ``Linear.forward``): one per attention target, the MLP targets once per expert (``gate`` only in gated MLPs),
    as :func:`lora_params_per_layer` counts them. A fused projection is one module: GPT-2's ``c_attn``, GPT-NeoX's
    ``query_key_value`` and Phi-3's ``qkv_proj`` wrap q, k and v (:func:`hf_fused_qkv`), Phi-3's ``gate_up_proj``
    gate and up (peft targets them whole: :func:`workbench.hf.lora_target_modules`). 0 without LoRA."""
    if not rank:
        return 0
    targets = set(targets)
    if m.fused_projections:
        return (bool(targets & {"q", "k", "v"}) + ("o" in targets) + bool(targets & {"gate", "up"})
                + ("down" in targets))
    if hf_fused_qkv(m):
        targets = (targets - {"k", "v"}) | ({"q"} if targets & {"q", "k", "v"} else set())
    experts = m.num_experts if m.is_moe else 1
    per_target = {"q": 1, "k": 1, "v": 1, "o": 1, "gate": experts if m.is_gated else 0, "up": experts,
                  "down": experts}
    return sum(per_target[t] for t in targets)


def lora_params_per_layer(m: ModelSpec, rank: int, targets) -> int:
    """LoRA adapter parameters of one layer: r·(in + out) per target projection (Hu et al. 2021, eq. 3: ΔW = B·A
    with A r×in and B out×r; peft's ``LoraLayer`` has no adapter biases). Targets: q (h → a·d), k and v (h → g·d),
    o (a·d → h), gate and up (h → f; gate only in gated MLPs), down (f → h); MLP targets repeat per expert.
    A fused projection (GPT-2's ``c_attn``, GPT-NeoX's ``query_key_value``, Phi-3's ``qkv_proj``) carries one
    adapter r·(h + a·d + 2·g·d) for q, k and v together; this count keeps them apart (r·h more per extra target).
    """
    if not rank:
        return 0
    shapes = lora_target_shapes(m)
    return rank * sum(copies * (fan_in + fan_out) for fan_in, fan_out, copies in (shapes[t] for t in targets))


def lora_target_shapes(m: ModelSpec) -> dict:
    """Each LoRA target's projection in one layer, kept apart: ``(in, out, copies)`` — q (h → a·d), k and v
    (h → g·d), o (a·d → h), gate and up (h → f; gate only in gated MLPs, 0 copies otherwise), down (f → h); the MLP
    targets once per expert. Its adapter is A (r × in) and B (out × r) per copy."""
    h, q, kv = m.hidden_size, m.query_projection_size, m.kv_projection_size
    f = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
    experts = m.num_experts if m.is_moe else 1
    return {"q": (h, q, 1), "k": (h, kv, 1), "v": (h, kv, 1), "o": (q, h, 1),
            "gate": (h, f, experts if m.is_gated else 0), "up": (h, f, experts), "down": (f, h, experts)}
