"""The trained model: megatron-core ``GPTModel`` with the local layer spec, built from a :class:`ModelSpec`.

This is the architecture the memory model describes (``workbench/params.py``): the same parameter counts, the
vocabulary padded to a multiple of 128·tp (:func:`workbench.params.padded_vocab_size`), unfused attention.
Imports of torch/megatron happen inside the functions so ``workbench.runs`` stays importable without them.
"""
from __future__ import annotations

from workbench.defaults import megatron_recompute
from workbench.params import padded_vocab_size
from workbench.specs import Activation, ModelSpec, Normalization, ParallelPlan, Positions, Precision


def transformer_config_kwargs(model: ModelSpec, plan: ParallelPlan, *, init_method_std: float = 0.02) -> dict:
    """Keyword arguments of megatron-core ``TransformerConfig`` for the specs (pure; testable without megatron)."""
    if model.is_moe:
        raise ValueError(f"num_experts={model.num_experts}: the launcher trains dense models only")
    if plan.sequence_parallel:
        raise ValueError("sequence_parallel=True needs Transformer Engine or Apex LayerNorm; megatron-core's local "
                         "layer spec (the reference model) cannot use it")
    if plan.context_parallel > 1:
        raise ValueError(f"context_parallel={plan.context_parallel}: the local layer spec has no context parallel")
    kwargs = dict(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.head_dim,
        ffn_hidden_size=model.ffn_hidden_size,
        tensor_model_parallel_size=plan.tensor_parallel,
        pipeline_model_parallel_size=plan.pipeline_parallel,
        virtual_pipeline_model_parallel_size=plan.virtual_pipeline if plan.virtual_pipeline > 1 else None,
        sequence_parallel=False,
        use_cpu_initialization=True,
        add_bias_linear=model.add_bias_linear,
        gated_linear_unit=model.activation is Activation.SWIGLU,
        normalization="RMSNorm" if model.normalization is Normalization.RMSNORM else "LayerNorm",
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        init_method_std=init_method_std,
        bf16=plan.precision is Precision.BF16,
        fp16=plan.precision is Precision.FP16,
        masked_softmax_fusion=False,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
    )
    # Megatron's uneven pipeline split: megatron-core builds each stage's layers from these (get_num_layers_to_build)
    if plan.first_stage_layers is not None:
        kwargs["num_layers_in_first_pipeline_stage"] = plan.first_stage_layers
    if plan.last_stage_layers is not None:
        kwargs["num_layers_in_last_pipeline_stage"] = plan.last_stage_layers
    if plan.embedding_in_pipeline_split:
        kwargs["account_for_embedding_in_pipeline_split"] = True
    if plan.loss_in_pipeline_split:
        kwargs["account_for_loss_in_pipeline_split"] = True
    if plan.virtual_pipeline > 1:
        # The interleaved schedule exchanges activations and gradients in both directions at once. With
        # pipeline_parallel=2 the previous and the next stage are the same rank, and megatron-core's default batched
        # exchange (batch_p2p_comm=True) posts the two sends and the two receives to that peer in orders that do not
        # match, so a stage can receive a gradient as an activation (seen on gloo: losses off from the first step).
        # Megatron-LM's training arguments turn overlap_p2p_comm on for interleaving and set
        # batch_p2p_comm = not overlap_p2p_comm; the unbatched exchange keeps the two directions on separate groups.
        kwargs.update(overlap_p2p_comm=True, batch_p2p_comm=False)
    kwargs.update(megatron_recompute(plan))
    return kwargs


def transformer_config(model: ModelSpec, plan: ParallelPlan, kwargs: dict | None = None):
    """megatron-core ``TransformerConfig`` from :func:`transformer_config_kwargs` (or ``kwargs`` already computed,
    e.g. the run directory's ``megatron_args.json``) plus the torch-typed fields JSON cannot carry."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(kwargs) if kwargs is not None else transformer_config_kwargs(model, plan)
    dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(plan.precision, torch.float32)
    # on a GPU, parameters are created on the device (initialise_layout_independent sets their values either way)
    kwargs.update(params_dtype=dtype, pipeline_dtype=dtype, use_cpu_initialization=not torch.cuda.is_available(),
                  activation_func=F.silu if model.activation is Activation.SWIGLU else F.gelu)
    return TransformerConfig(**kwargs)


def build_gpt(model: ModelSpec, plan: ParallelPlan, *, pre_process: bool = True, post_process: bool = True,
              vp_stage=None, config_kwargs: dict | None = None):
    """One GPTModel (or one pipeline chunk of it). Megatron's ``parallel_state`` must be initialised.
    ``config_kwargs``: the ``TransformerConfig`` arguments when already computed (a launched run's
    ``megatron_args.json``)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = transformer_config(model, plan, config_kwargs)
    spec = get_gpt_layer_local_spec(
        normalization="RMSNorm" if model.normalization is Normalization.RMSNORM else "LayerNorm")
    kwargs = dict(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab_size(model.vocab_size, plan.tensor_parallel),
        max_sequence_length=model.seq_length,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=model.tied_embeddings,
        position_embedding_type="rope" if model.position_embedding is Positions.ROTARY else "learned_absolute",
    )
    if vp_stage is not None:
        kwargs["vp_stage"] = vp_stage
    return GPTModel(**kwargs)


def causal_mask(seq_length: int, device=None):
    """Megatron's attention mask: True where a query may NOT attend (the strict upper triangle), [1, 1, s, s]."""
    import torch

    ones = torch.ones(seq_length, seq_length, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1).view(1, 1, seq_length, seq_length)


_LAYER_NAME = None


def global_parameter_name(name: str, chunk, model: ModelSpec) -> str:
    """The name a parameter of one chunk (a pipeline stage or virtual chunk) has in the whole model: local layer
    indices become global ones (``layer_number - 1``); a tied output layer on the last stage is the embedding."""
    import re

    global _LAYER_NAME
    _LAYER_NAME = _LAYER_NAME or re.compile(r"^decoder\.layers\.(\d+)\.")
    m = _LAYER_NAME.match(name)
    if m:
        layer = chunk.decoder.layers[int(m.group(1))]
        return f"decoder.layers.{layer.layer_number - 1}." + name[m.end():]
    if name == "output_layer.weight" and model.tied_embeddings:
        return "embedding.word_embeddings.weight"
    return name


def init_layout_independent(chunk, model: ModelSpec, *, seed: int, tensor_parallel: int, tp_rank: int,
                            init_method_std: float = 0.02) -> None:
    """Re-initialise a chunk so every parameter's values depend only on its global name and the seed, not on the
    parallel layout: each full (unsplit) tensor is drawn from its own generator and this tensor-parallel rank keeps
    its slice, as megatron-core splits a CPU-initialised master weight. Same distributions as megatron-core's
    defaults: N(0, σ) weights, N(0, σ/√(2L)) for the output projections (linear_proj, linear_fc2), zero biases,
    unit norm weights (megatron ``init_method_normal`` / ``scaled_init_method_normal``)."""
    import zlib

    import torch

    scaled_std = init_method_std / (2.0 * model.num_layers) ** 0.5
    for name, param in chunk.named_parameters():
        full_name = global_parameter_name(name, chunk, model)
        shape = list(param.shape)
        split = bool(getattr(param, "tensor_model_parallel", False)) and tensor_parallel > 1
        dim = getattr(param, "partition_dim", 0) if split else None
        if split:
            shape[dim] *= tensor_parallel
        gen = torch.Generator(device=param.device)
        gen.manual_seed(seed * 7919 + zlib.crc32(full_name.encode()))
        if full_name.endswith("bias"):
            full = torch.zeros(shape, device=param.device)
        elif "norm" in full_name.rsplit(".", 2)[-2]:
            full = torch.ones(shape, device=param.device)
        else:
            std = scaled_std if (".linear_proj." in full_name or ".linear_fc2." in full_name) else init_method_std
            full = torch.empty(shape, device=param.device).normal_(0.0, std, generator=gen)
        if split:
            full = torch.chunk(full, tensor_parallel, dim=dim)[tp_rank]
        with torch.no_grad():
            param.copy_(full.to(param.dtype))
