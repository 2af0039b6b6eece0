"""Host time of one decoder layer per micro-batch, from the ATen operators the layer dispatches.

In eager PyTorch every operator a layer runs passes through the dispatcher, records an autograd node and (on a GPU)
launches a kernel, on the one host thread that also runs the layer's Python. Layer designs differ a lot in how many
operators they dispatch per training micro-step (forward + backward): megatron-core's local-spec GPT layer (LayerNorm,
GeLU, learned positions) about 145 with its views, its Llama-style layer (RMSNorm, SwiGLU, rotary) about 250, a
transformers GPT-NeoX layer 146, Llama 219, Qwen3 (q/k norms) 277, Gemma 3 about 350. A layer's host seconds are

    base(stack) + op_host_s · operators(layer)

with ``operators`` counted on the CPU from the real modules (``benchmarks/count_layer_ops_cpu.py``: one-layer vs
two-layer models of each corpus shape, forward + loss + backward; views included: they pass the dispatcher and
autograd too) and stored per layer design in catalog ``layer_ops.layers``; ``op_host_s`` and each stack's ``base``
(megatron-core's Python module structure costs more per layer than transformers') are fitted on the fit split
(``benchmarks/fit_hf_host.py``, ``benchmarks/fit_microstep_host.py``). A design the table lacks takes the nearest
counted one (fewest differing features) of the same stack.
"""
from __future__ import annotations

import functools

from workbench.specs import AttentionImpl, Implementation, ModelSpec

FEATURES = ("implementation", "activation", "normalization", "position_embedding", "add_bias_linear", "qkv_bias",
            "qk_norm", "sandwich_norm", "post_norm", "fused_projections", "attention", "dropout", "gqa")
"""What decides a layer's operator count, as :func:`layer_features` reads it from a :class:`ModelSpec`."""


def layer_features(model: ModelSpec) -> dict:
    """The layer design of ``model`` as plain values (keys :data:`FEATURES`): stack, MLP activation, norm, position
    embedding, biases, q/k norms, Gemma's sandwich norms, OLMo's norms after attention and MLP, fused projections,
    attention kernel, dropout on or off, grouped-query attention."""
    groups = model.num_query_groups or model.num_attention_heads
    return dict(implementation=str(model.implementation), activation=str(model.activation),
                normalization=str(model.normalization), position_embedding=str(model.position_embedding),
                add_bias_linear=bool(model.add_bias_linear), qkv_bias=bool(model.qkv_bias),
                qk_norm=bool(model.qk_norm), sandwich_norm=bool(model.sandwich_norm),
                post_norm=bool(model.post_norm),
                fused_projections=bool(model.fused_projections), attention=str(model.attention),
                dropout=bool(model.hidden_dropout > 0 or model.attention_dropout > 0),
                gqa=bool(groups < model.num_attention_heads))


def _constants() -> dict:
    from workbench.timing import calibration

    return calibration()["layer_ops"]


def _nearest(entries, feats: dict):
    """The entry of ``entries`` of the same stack nearest to the layer design ``feats`` (fewest differing
    :data:`FEATURES`, the most counted shapes on ties), or ``None``."""
    best = None
    for entry in entries:
        if entry["implementation"] != feats["implementation"]:
            continue
        differ = sum(entry[f] != feats[f] for f in FEATURES)
        rank = (differ, -len(entry.get("shapes", ())))
        if best is None or rank < best[0]:
            best = (rank, entry)
    return None if best is None else best[1]


@functools.cache
def _memory_match(key: tuple):
    from workbench.timing import calibration

    return _nearest(calibration()["transformers"].get("layer_memory_bytes", ()), dict(zip(FEATURES, key)))


def layer_memory_bytes(model: ModelSpec) -> tuple:
    """``(forward, backward)`` HBM bytes per token that one transformers decoder layer's memory-bound kernels move
    in 16-bit training — norms with their fp32 upcast, rotary embedding, activation and gate product, residual adds,
    casts, and their backwards; not the GEMMs, the attention kernel or eager attention's scores — counted on the meta
    device from the real modules by ``benchmarks/count_layer_bytes_cpu.py`` and stored per layer design as bytes
    per unit of width, ``a_h·h + a_f·f + a_q·q + a_kv·kv`` (catalog ``transformers.layer_memory_bytes``; the nearest
    counted design where this one was not counted). ``(0, 0)`` for other stacks and for MoE models."""
    if model.implementation is not Implementation.TRANSFORMERS or model.is_moe:
        return 0.0, 0.0
    entry = _memory_match(tuple(layer_features(model)[f] for f in FEATURES))
    if entry is None:
        return 0.0, 0.0
    groups = model.num_query_groups or model.num_attention_heads
    widths = dict(h=model.hidden_size, f=model.ffn_hidden_size, q=model.num_attention_heads * model.head_dim,
                  kv=groups * model.head_dim)
    return tuple(float(sum(entry[phase][w] * widths[w] for w in widths)) for phase in ("forward", "backward"))


@functools.cache
def _match(key: tuple) -> tuple:
    """``(operators, entry)`` of the catalog's layer design nearest to ``key`` (the values of :data:`FEATURES`):
    the same design, else the one of the same stack with the fewest differing features (the most measured shapes
    on ties); ``(0.0, None)`` when the stack has none."""
    entry = _nearest(_constants()["layers"], dict(zip(FEATURES, key)))
    if entry is None:
        return 0.0, None
    return float(entry["ops"] + entry["views"]), entry


def dispatched_ops(model: ModelSpec) -> tuple:
    """``(operators, entry)``: ATen operators (views included) one layer of ``model`` dispatches per micro-step,
    forward and backward, and the catalog entry they come from (its features equal :func:`layer_features` when this
    very design was counted; else it is the nearest one)."""
    return _match(tuple(layer_features(model)[f] for f in FEATURES))


def stack_host_constants(model: ModelSpec) -> dict:
    """The catalog's host constants of the model's stack: ``megatron_core`` or ``transformers``."""
    from workbench.timing import calibration

    return calibration()["megatron_core" if model.implementation is Implementation.MEGATRON else "transformers"]


def layer_host_seconds(model: ModelSpec) -> float:
    """Host seconds of one decoder layer per micro-batch (Python forward and backward launches), checkpointed or
    not: ``base`` of the stack (catalog ``megatron_core.layer_base_host_s`` / ``transformers.layer_base_host_s``)
    plus ``layer_ops.op_host_s`` per dispatched operator (:func:`dispatched_ops`). 0 for megatron-core layers on
    Transformer Engine (``attention='flash'``: fused kernels, not measured)."""
    if model.implementation is Implementation.MEGATRON and model.attention is AttentionImpl.FLASH:
        return 0.0
    base = stack_host_constants(model)["layer_base_host_s"]
    ops, _ = dispatched_ops(model)
    return base + _constants()["op_host_s"] * ops


def host_note(model: ModelSpec, plan=None) -> str | None:
    """One line for the estimate: the layer's host seconds, the operators they come from, and, where the design was
    not counted itself, how the counted one differs. ``None`` where no layer host time is priced: Transformer
    Engine layers, and with a ``plan`` DeepSpeed ZeRO-3 (its hooks carry the host time; ``timing.microstep_host``)."""
    from workbench.specs import Engine

    if plan is not None and plan.engine is not Engine.MEGATRON and int(plan.zero_stage) >= 3:
        return None
    host = layer_host_seconds(model)
    if host <= 0:
        return None
    ops, entry = dispatched_ops(model)
    feats = layer_features(model)
    differ = [f"{f}={feats[f]}" for f in FEATURES if entry[f] != feats[f]]
    counted = (f"counted for the nearest layer design, which differs in {', '.join(differ)}" if differ
               else "counted for this layer design")
    return (f"{host * 1e3:.2f} ms of host time per layer per micro-batch ({ops:.0f} ATen operators forward + backward, "
            f"{counted}); the GPU waits only where this outlasts the micro-batch's kernels, or where the forward's "
            f"{stack_host_constants(model).get('layer_forward_host_share', 0.0):.0%} of it outlasts the forward's")
