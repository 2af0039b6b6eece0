"""The one adapter from plans to model inputs: plan → columns → memory-model and time-model arguments.

A plan is first written as *columns* (:func:`plan_columns`): the numeric codes of its fields under short names,
``engine, tp, pp, vp, cp, dp, sp, zero, off_opt, off_par, dist_opt, recompute, recompute_layers, mbs, nmb,
fused_adam, overlap_comm, lora_rank, lora_targets``, the FP8 stack ``fp8_recipe, fp8_pg, fp8_bf16`` (recipe code,
FP8 parameter all-gather, bf16 first+last layers), the MoE columns ``ep, etp, edp`` (expert parallel, expert
tensor parallel, expert data parallel), ``moe_tf`` (token factor: the capacity factor when padded, DeepSpeed-MoE's E·C/(k·S), else the busiest rank's
routing load, 1 when balanced; the planner's float column ``moe_imb`` carries the plan's imbalance), ``moe_ds``
(1: DeepSpeed-MoE layers) and
``moe_ag`` (1: allgather dispatcher), ``expseg`` (1: PyTorch's expandable-segments allocator), ``pin`` (1: DeepSpeed's
offload buffers page-locked, ``pin_memory``), DeepSpeed's ZeRO sizes in elements ``rbucket`` (``reduce_bucket_size``),
``pbucket`` (``stage3_prefetch_bucket_size``), ``persist`` (``stage3_param_persistence_threshold``) and ``sgroup``
(``sub_group_size``), one number for every plan of a table, ``moe_ov`` (1: all-to-all overlapped, combined 1F1B),
``moe_rc`` (MoE selective recompute: 0 none, 1 moe_act, 2 moe), ``xent`` (Megatron's loss kernels: 0 none, 1
native, 2 te), and the pipeline split ``first_layers, last_layers`` (0: an even share) and ``emb_split,
loss_split``, from which :func:`stage_layer_columns` derives the layers of the first, middle and last stages.
A single plan gives scalars; the planner's candidate table gives the same columns as numpy arrays (one element per
plan). :func:`memory_inputs` and :func:`time_inputs` turn columns — scalar or array, with or without a measured
hardware profile — into the keyword arguments of :func:`workbench.memory.stage_terms` and
:func:`workbench.timing.step_time_terms`. ``estimate`` is a batch of one, the planner a batch of N; both go through
these two functions, so they price a plan with the same numbers.

Adding a plan field: declare it on :class:`~workbench.specs.ParallelPlan`, add its column in :func:`plan_columns`
(and, if the planner should search it, in the planner's table), and read the column where the model input it
changes is encoded below.
"""
from __future__ import annotations

import functools

import numpy as np

from workbench import defaults
from workbench.flops import RECOMPUTE_CODES
from workbench.timing import CP_COMM_CODES
from workbench.hf import soft_capped
from workbench.layerops import layer_host_seconds, layer_memory_bytes, stack_host_constants
from workbench.npscalar import asarray, isin, maximum, minimum, ndim, where
from workbench.params import (lora_modules_per_layer, lora_params_per_layer,
                              model_vocab_size, parameter_tensors)
from workbench.specs import (CROSS_ENTROPY_FUSION_CODES, LORA_TARGETS, MOE_RECOMPUTE_CODES, AdamImpl, AttentionImpl, ClusterSpec, Engine, ExpertsImpl, Fp8Recipe, Implementation,
                             ModelSpec, MoEDispatcher, Offload, ParallelPlan, Precision, Recompute,
                             builds_in_zero_init, builds_in_zero_init_by_default, default_overlap_comm)

FP8_RECIPE_CODES = {"delayed": 0, "tensorwise": 1, "blockwise": 2, "mxfp8": 3}
"""Column codes of :class:`~workbench.specs.Fp8Recipe` (the memory and time models index their per-recipe
constants with them)."""

ENGINE_CODES = {Engine.DEEPSPEED: 0, Engine.MEGATRON: 1, Engine.MEGATRON_DEEPSPEED: 2}
ENGINE_BY_CODE = {v: k for k, v in ENGINE_CODES.items()}
RECOMPUTE_BY_CODE = {v: k for k, v in RECOMPUTE_CODES.items()}
MEGATRON = ENGINE_CODES[Engine.MEGATRON]


def default_zero_init_column(model: ModelSpec, cols: dict):
    """Whether plans given as columns without ``zinit`` (the planner's tables) build the model inside
    ``deepspeed.zero.Init``: :func:`workbench.specs.builds_in_zero_init`'s default, a transformers model under
    DeepSpeed ZeRO-3 and any model under Megatron-DeepSpeed at ZeRO-3 (0/1, arrays allowed)."""
    engine, zero3 = np.asarray(cols["engine"]), np.asarray(cols["zero"]) >= 3
    inside = engine == ENGINE_CODES[Engine.MEGATRON_DEEPSPEED]
    if builds_in_zero_init_by_default(model):
        inside = inside | (engine == ENGINE_CODES[Engine.DEEPSPEED])
    return (inside & zero3).astype(int)[()]


def plan_columns(plan: ParallelPlan, model: ModelSpec) -> dict:
    """One plan as scalar columns (see the module docstring); ``overlap_comm`` is resolved here, once
    (:attr:`ParallelPlan.overlaps_comm`)."""
    cols = dict(engine=ENGINE_CODES[plan.engine], tp=plan.tensor_parallel, pp=plan.pipeline_parallel,
                vp=plan.virtual_pipeline, cp=plan.context_parallel, dp=plan.data_parallel,
                cp_comm=CP_COMM_CODES[str(plan.cp_comm_type)], cp_a2a=plan.cp_a2a_size,
                sp=int(plan.sequence_parallel), zero=int(plan.zero_stage),
                off_opt=int(plan.offload_optimizer is not Offload.NONE),
                off_par=int(plan.offload_params is not Offload.NONE), dist_opt=int(plan.distributed_optimizer),
                nvme_opt=int(plan.nvme_optimizer), nvme_par=int(plan.nvme_params),
                recompute=RECOMPUTE_CODES[plan.recompute],
                first_layers=plan.first_stage_layers or 0, last_layers=plan.last_stage_layers or 0,
                emb_split=int(plan.embedding_in_pipeline_split), loss_split=int(plan.loss_in_pipeline_split),
                mbs=plan.micro_batch_size, nmb=plan.num_microbatches, fused_adam=int(plan.adam is AdamImpl.FUSED),
                overlap_comm=int(plan.overlaps_comm), lora_rank=plan.lora_rank, lora_targets=plan.lora_targets,
                lora_dropout=plan.lora_dropout, fp8_recipe=FP8_RECIPE_CODES[str(plan.fp8_recipe)],
                fp8_pg=int(plan.fp8_param_gather), fp8_bf16=plan.fp8_bf16_first_layers + plan.fp8_bf16_last_layers,
                fp8_bf16_first=plan.fp8_bf16_first_layers, fp8_bf16_last=plan.fp8_bf16_last_layers,
                ep=plan.expert_parallel, etp=plan.expert_tensor_parallel_size, edp=plan.expert_data_parallel,
                moe_tf=moe_token_factor(plan, model), moe_ds=int(plan.deepspeed_moe and model.is_moe),
                moe_ag=int(plan.moe_token_dispatcher is MoEDispatcher.ALLGATHER),
                moe_ov=int(plan.moe_overlap_alltoall), moe_rc=MOE_RECOMPUTE_CODES[plan.moe_recompute],
                grad_fp32=int(plan.reduces_grads_in_fp32),
                expseg=int(plan.expandable_segments), pin=int(plan.pin_memory), tp_ov=int(plan.tp_comm_overlap),
                xent=CROSS_ENTROPY_FUSION_CODES[plan.cross_entropy_fusion],
                zinit=int(builds_in_zero_init(model, plan)), rbucket=plan.reduce_bucket_elements,
                pbucket=plan.prefetch_bucket_elements, persist=plan.persistence_threshold,
                sgroup=plan.sub_group_elements)
    cols["recompute_layers"] = plan.recompute_layers or max(stage_layer_columns(model.num_layers, cols))
    return cols


def complete_columns(table: dict, model: ModelSpec, *, adam=AdamImpl.FUSED, overlap_comm=None, lora_rank=0,
                     lora_targets=LORA_TARGETS, lora_dropout=0.0, fp8_recipe=Fp8Recipe.DELAYED,
                     fp8_param_gather=False, expandable_segments=False) -> dict:
    """The planner's table with the columns it does not search: the stack every row runs (``adam``,
    ``overlap_comm`` — ``None``: each row's engine default —, LoRA, the FP8 recipe; ``fp8_param_gather`` applies to
    the rows with the distributed optimizer) and every layer of a stage recomputed under full recompute."""
    out = dict(table)
    out.setdefault("fp8_recipe", FP8_RECIPE_CODES[str(Fp8Recipe.parse(fp8_recipe, "fp8_recipe"))])
    out.setdefault("fp8_pg", np.asarray(table["dist_opt"]) * int(bool(fp8_param_gather)))
    out.setdefault("fp8_bf16", 0)
    out.setdefault("fp8_bf16_first", 0)
    out.setdefault("fp8_bf16_last", 0)
    out.setdefault("expseg", int(bool(expandable_segments)))  # the allocator every row runs with
    out.setdefault("pin", 1)  # DeepSpeed's offload buffers page-locked (its default) unless the table sets them
    out.setdefault("tp_ov", 0)  # Transformer Engine TP communication overlap: off unless the table searches it
    out.setdefault("xent", 0)  # Megatron's loss kernels: the unfused cross entropy unless the table sets them
    out.setdefault("grad_fp32", -1)  # Megatron's main-gradient dtype: -1, Megatron-LM's default for the precision
    for key in ("first_layers", "last_layers", "emb_split", "loss_split", "cp_comm"):
        out.setdefault(key, 0)
    out.setdefault("cp_a2a", 1)
    out.setdefault("recompute_layers", np.maximum.reduce(stage_layer_columns(model.num_layers, out)))
    out.setdefault("fused_adam", int(AdamImpl.parse(adam, "adam") is AdamImpl.FUSED))
    if overlap_comm is None:
        # as ParallelPlan.overlaps_comm: DeepSpeed's pipeline engine turns overlap_comm off
        out.setdefault("overlap_comm", where(np.asarray(table["engine"]) == MEGATRON,
                                                int(default_overlap_comm(Engine.MEGATRON)),
                                                where(np.asarray(table["pp"]) > 1, 0,
                                                         int(default_overlap_comm(Engine.DEEPSPEED)))))
    else:
        out.setdefault("overlap_comm", int(bool(overlap_comm)))
    out.setdefault("lora_rank", int(lora_rank))
    out.setdefault("lora_targets", tuple(lora_targets))
    out.setdefault("lora_dropout", float(lora_dropout))
    # MoE: no expert parallelism unless the table searches it; experts split like the dense layers
    out.setdefault("ep", 1)
    out.setdefault("etp", out["tp"])
    out.setdefault("edp", np.asarray(out["dp"]) * np.asarray(out["cp"]) * np.asarray(out["tp"])
                   // (np.asarray(out["etp"]) * np.asarray(out["ep"])))
    # DeepSpeed engines with expert parallel rows train DeepSpeed-MoE layers at its default capacity factor
    if model.is_moe:
        from workbench import dsmoe

        ds_moe = (np.asarray(out["engine"]) != MEGATRON) & (np.asarray(out["ep"]) > 1)
        out.setdefault("moe_ds", ds_moe.astype(np.int64))
        load = moe_rank_load(out.get("moe_imb", 1.0), expert_parallel=out["ep"], num_experts=model.num_experts,
                             top_k=model.moe_top_k)
        if "moe_cf" in out:  # a capacity factor (0: dropless) caps the load, or pads every expert to it
            cf = np.asarray(out["moe_cf"], dtype=float)
            pad = (np.asarray(out.get("moe_pad", 0)) > 0) & (cf > 0)
            load = where(pad, cf, where(cf > 0, np.minimum(load, np.maximum(cf, 1.0)), load))
        out.setdefault("moe_tf", where(ds_moe, dsmoe.token_factor_of(model, micro_batch=out["mbs"],
                                                                        context_parallel=out["cp"]), load))
    out.setdefault("moe_tf", 1.0)
    out.setdefault("moe_ds", 0)
    out.setdefault("moe_ag", 0)
    out.setdefault("moe_ov", 0)
    out.setdefault("moe_rc", 0)
    return out


def moe_token_factor(plan: ParallelPlan, model: ModelSpec) -> float:
    """The ``moe_tf`` column: expert rows of the busiest rank over the balanced routed token copies —
    DeepSpeed-MoE's capacity padding (:func:`workbench.dsmoe.token_factor`), megatron-core's capacity factor when
    inputs are padded to it, else the routing imbalance (:func:`moe_rank_load`), which a capacity factor (at least
    1) caps: tokens above it are dropped."""
    if not model.is_moe:
        return 1.0
    if plan.deepspeed_moe:
        from workbench import dsmoe

        return dsmoe.token_factor(model, plan)
    if plan.moe_pad_to_capacity:
        return plan.moe_capacity_factor
    load = float(moe_rank_load(plan.moe_load_imbalance, expert_parallel=plan.expert_parallel,
                               num_experts=model.num_experts, top_k=model.moe_top_k))
    if plan.moe_capacity_factor is not None:
        load = min(load, max(plan.moe_capacity_factor, 1.0))
    return load


def moe_rank_load(imbalance, *, expert_parallel, num_experts, top_k):
    """Routed token copies on the busiest expert-parallel rank over the balanced average, for a router whose busiest
    rank gets ``imbalance`` × the mean (:attr:`ParallelPlan.moe_load_imbalance`), capped by what routing can do:
    each token sends its top-k copies to k distinct experts, at most min(k, E/e) of them on one rank, so one rank
    receives at most e·min(k, E/e)/k × the mean (1 when e = 1: that rank holds every expert and computes every
    copy whatever the balance). Scalars or arrays (the planner's rows)."""
    e = np.asarray(expert_parallel, dtype=float)
    most = e * np.minimum(float(top_k), num_experts / e) / top_k
    load = np.minimum(np.asarray(imbalance, dtype=float), most)
    return float(load) if load.ndim == 0 else load


def stage_layer_columns(num_layers: int, cols: dict):
    """Transformer layers on the first, a middle and the last pipeline stage, ``(first, middle, last)``, for
    columns (scalars or arrays) already accepted by :func:`workbench.specs.pipeline_stage_layers` — the same split,
    written on arrays: ``first_layers`` / ``last_layers`` (0: not set) fix those stages and the middle stages share
    the rest; else each stage holds (L + emb_split + loss_split) / p, less the embedding on the first and the loss
    on the last. With p = 1 the one stage holds every layer (first = middle = last = L); with p = 2 there is no
    middle stage and ``middle`` repeats the larger end."""
    key = (num_layers, cols["pp"], cols.get("first_layers", 0), cols.get("last_layers", 0), cols.get("emb_split", 0),
           cols.get("loss_split", 0))
    if all(type(k) is int for k in key):  # one plan: the same split, remembered
        return _stage_layer_split_of_one(*key)
    return _stage_layer_split(*key)


def _stage_layer_split(L, pp, first_layers, last_layers, emb_split, loss_split):
    """:func:`stage_layer_columns` on its six columns (scalars or arrays)."""
    p = np.asarray(pp)
    first, last = np.asarray(first_layers), np.asarray(last_layers)
    emb, loss = np.asarray(emb_split), np.asarray(loss_split)
    uneven = (first > 0) | (last > 0)
    middle_stages = p - (first > 0) - (last > 0)
    rest = L - first - last
    mid_uneven = where(middle_stages > 0, rest // maximum(middle_stages, 1), 0)
    per = (L + emb + loss) // p
    f = where(first > 0, first, where(uneven, mid_uneven, per - emb))
    la = where(last > 0, last, where(uneven, mid_uneven, per - loss))
    mid = where(uneven, mid_uneven, per)
    mid = where(p > 2, mid, maximum(f, la))
    one = p == 1
    f, mid, la = where(one, L, f), where(one, L, mid), where(one, L, la)
    if ndim(f) == 0:
        return int(f), int(mid), int(la)
    return f, mid, la


_stage_layer_split_of_one = functools.lru_cache(maxsize=4096)(_stage_layer_split)


def expert_parameters(model: ModelSpec) -> float:
    """Routed-expert parameters of the whole model (every layer's experts; 0 for a dense model)."""
    from workbench.memory import expert_params_per_rank

    return float(model.num_layers * expert_params_per_rank(model, 1, 1))


def lora_params(model: ModelSpec, cols: dict) -> float:
    """Adapter parameters per layer of the columns' LoRA (0 without)."""
    return lora_params_per_layer(model, cols["lora_rank"], cols["lora_targets"]) if cols["lora_rank"] else 0


def trainable_fraction(model: ModelSpec, cols: dict, counts=None) -> float:
    """Parameters with gradients over all parameters: 1 for a full fine-tune; with LoRA the adapters over the
    model (:func:`workbench.params.lora_params_per_layer`)."""
    if not cols["lora_rank"]:
        return 1.0
    total = counts.total if counts is not None else model.num_parameters
    return model.num_layers * lora_params(model, cols) / total


def hf_host_inputs(model: ModelSpec, cols: dict, constants: dict) -> dict:
    """The host-time fields of :class:`workbench.timing.StepInputs` for transformers models (per layer
    :func:`workbench.layerops.layer_host_seconds`; catalog ``transformers``: the checkpoint machinery per
    checkpointed layer, per LoRA-adapted projection; 0 for other stacks; the forward's share of the layer's host is
    ``forward_host_share``, set for both stacks)."""
    hf = model.implementation is Implementation.TRANSFORMERS
    lora = lora_modules_per_layer(model, cols["lora_rank"], cols["lora_targets"])
    return dict(hf_recompute_layer_s=constants.get("recompute_layer_overhead_s", 0.0) if hf else 0.0,
                hf_layer_host_s=layer_host_seconds(model) if hf else 0.0,
                hf_lora_module_host_s=constants.get("lora_module_host_s", 0.0) if hf else 0.0,
                lora_modules_per_layer=lora)


def layer_memory_inputs(model: ModelSpec, precision: Precision, constants: dict, gpu_name: str = "") -> dict:
    """transformers models: the counted memory-bound bytes per token of a layer (:func:`workbench.layerops.
    layer_memory_bytes`, counted in bf16: 16-bit training only), the bandwidth they move at and the weight GEMMs'
    measured time scale (catalog ``transformers``); other stacks keep the per-layer activation count and the curve.
    Every stack: the layer kernels' bandwidth scale of ``gpu_name`` where that GPU's layers were measured
    (:func:`workbench.timing.gpu_kernel_constants`, which also gives its own GEMM time scale)."""
    from workbench.timing import gpu_kernel_constants

    hf = model.implementation is Implementation.TRANSFORMERS
    constants = {**constants, **gpu_kernel_constants(gpu_name)}
    fwd, bwd = layer_memory_bytes(model) if hf and precision.bytes_per_value == 2 else (0.0, 0.0)
    return dict(layer_memory_bytes_forward=fwd, layer_memory_bytes_backward=bwd,
                layer_memory_hbm_efficiency=constants.get("layer_memory_hbm_efficiency", 1.0),
                weight_gemm_time_scale=constants.get("weight_gemm_time_scale", 1.0) if hf else 1.0,
                layer_hbm_scale=constants.get("layer_hbm_scale", 1.0),
                score_hbm_scale=constants.get("score_hbm_scale", 1.0),
                moe_block_hbm_scale=constants.get("moe_block_hbm_scale", 1.0))


def largest_stage_parameters(model: ModelSpec, cols: dict, first, middle, last):
    """Parameters one rank of the pipeline stage holding the most of them (:func:`workbench.memory.
    stage_params_per_rank` for the first, a middle and the last stage, with their layers): what that rank's
    data-parallel reduction, ZeRO gathers and optimizer step move. With p = 1 the one stage holds everything."""
    from workbench.memory import stage_params_per_rank

    t, p = cols["tp"], cols["pp"]
    ex = (cols.get("ep", 1), cols.get("etp"))  # MoE: the rank's local experts only
    if ndim(p) == 0 and p == 1:
        return float(stage_params_per_rank(model, t, 1, 0, model.num_layers, *ex))
    head = stage_params_per_rank(model, t, p, 0, first, *ex)
    tail = stage_params_per_rank(model, t, p, asarray(p) - 1, last, *ex)
    mid = where(asarray(p) > 2, stage_params_per_rank(model, t, p, 1, middle, *ex), 0.0)
    out = maximum(maximum(head, tail), mid)
    return float(out) if ndim(out) == 0 else out


def _rope(model: ModelSpec, precision: Precision) -> tuple:
    """Rotary embedding bytes per query/key element (:func:`workbench.timing.rope_bytes`): fused where megatron-core
    runs Transformer Engine (flash attention), unfused in the local spec and in transformers; 0 without rotary."""
    from workbench.specs import Positions
    from workbench.timing import rope_bytes

    if model.position_embedding is not Positions.ROTARY:
        return 0.0, 0.0
    fused = model.implementation is Implementation.MEGATRON and model.attention is AttentionImpl.FLASH
    fwd, bwd = rope_bytes(bytes_per_value=precision.bytes_per_value, fused=fused)
    return float(fwd), float(bwd)


def main_grad_fp32(cols: dict, precision: Precision):
    """Column ``grad_fp32`` (1: Megatron accumulates and reduces fp32 main gradients, 0: 16-bit) with -1 (the
    planner's table: the default) resolved as :attr:`ParallelPlan.reduces_grads_in_fp32` does: fp32 with bf16 (and
    FP8's bf16 base), 16-bit with fp16."""
    col = cols.get("grad_fp32", -1)
    return _where(np.less(col, 0), int(precision.base is Precision.BF16), col)


def grad_accumulate_bytes(megatron, zero, fused_adam, precision: Precision, main_fp32=None):
    """HBM bytes per trainable parameter and micro-batch of putting its gradient into the engine's reduce buffer,
    counted from the engines' hooks. Megatron DDP without Apex/Transformer Engine (``adam="torch"``: megatron-core's
    local spec, megatron/core/distributed/distributed_data_parallel.py ``main_grad.add_(grad)``): read and write the
    main gradient (4 bytes with bf16, whose gradients are reduced in fp32; v with fp16) and read the 16-bit
    gradient; with them (``adam="fused"``) Megatron-LM's gradient-accumulation fusion has the weight-gradient GEMM
    accumulate into the main gradient itself (0). DeepSpeed ZeRO-1/2 (stage_1_and_2.py, contiguous gradients): copy
    into the bucket (2v) and average it in place (2v); ZeRO-0 keeps the gradient where autograd wrote it and ZeRO-3's
    copies are counted with its other terms (0)."""
    v = float(precision.bytes_per_value)
    main = (4.0 if precision is Precision.BF16 else v) if main_fp32 is None else _where(np.greater(main_fp32, 0), 4.0, v)
    return _where(megatron, _where(fused_adam, 0.0, 2 * main + v), _where(isin(zero, (1, 2)), 4 * v, 0.0))


def memory_inputs(model: ModelSpec, cols: dict, precision: Precision, *, profile=None) -> dict:
    """Keyword arguments of :func:`workbench.memory.stage_terms` (all but ``stage``) for columns ``cols``;
    a measured ``profile`` supplies the overhead constants."""
    from workbench.memory import (lora_activation_bytes_per_token, lora_adapters_in_fp32, lora_frees_down_input,
                                  zero3_linear_keeps_inputs)

    precision = Precision.parse(precision, "precision")
    first, middle, last = stage_layer_columns(model.num_layers, cols)
    zero3 = np.equal(cols["zero"], 3) & np.not_equal(cols["engine"], MEGATRON)
    zinit = cols["zinit"] if "zinit" in cols else default_zero_init_column(model, cols)
    # LoRA's saved tensors: at ZeRO-3 the frozen projections keep their inputs (DeepSpeed's own linear; not GPT-2's
    # Conv1D), and built inside zero.Init the adapters run in fp32
    keeps = zero3_linear_keeps_inputs(model)
    fp32 = lora_adapters_in_fp32(model, zero_stage=cols["zero"], zero_init=zinit, engine=cols["engine"])

    def lora_tokens(kept, adapter_bytes=None):
        return lora_activation_bytes_per_token(model, rank=cols["lora_rank"], targets=cols["lora_targets"],
                                               dropout=cols["lora_dropout"], value_bytes=precision.bytes_per_value,
                                               inputs_kept=kept, adapter_bytes=adapter_bytes)
    out = dict(first_stage_layers=first, middle_stage_layers=middle, last_stage_layers=last, engine=cols["engine"], zero_stage=cols["zero"], tensor_parallel=cols["tp"],
               pipeline_parallel=cols["pp"], virtual_pipeline=cols["vp"], context_parallel=cols["cp"],
               cp_comm_type=cols.get("cp_comm", 0), cp_a2a_size=cols.get("cp_a2a", 1),
               sequence_parallel=np.asarray(cols["sp"]).astype(bool) if ndim(cols["sp"]) else bool(cols["sp"]),
               data_parallel=cols["dp"], micro_batch=cols["mbs"], num_microbatches=cols["nmb"],
               recompute=cols["recompute"], recompute_layers=cols["recompute_layers"],
               value_bytes=precision.bytes_per_value, fp16=int(precision is Precision.FP16),
               offload_optimizer=cols["off_opt"], offload_params=cols["off_par"],
               distributed_optimizer=cols["dist_opt"], fused_kernels=cols["fused_adam"],
               overlap_comm=cols["overlap_comm"], lora_params_per_layer=lora_params(model, cols),
               lora_bytes_per_token=_where(fp32, lora_tokens(keeps, 4),
                                           _where(zero3, lora_tokens(keeps), lora_tokens(False))),
               lora_free_down=_where(zero3, *(int(lora_frees_down_input(
                   model, rank=cols["lora_rank"], targets=cols["lora_targets"], inputs_kept=kept))
                   for kept in (keeps, False))),
               fp8=int(precision.is_fp8), fp8_recipe=cols.get("fp8_recipe", 0),
               fp8_param_gather=cols.get("fp8_pg", 0), fp8_bf16_first=cols.get("fp8_bf16_first", 0),
               fp8_bf16_last=cols.get("fp8_bf16_last", 0),
               expert_parallel=cols.get("ep", 1), expert_tensor_parallel=cols.get("etp"),
               expert_data_parallel=cols.get("edp"), moe_token_factor=cols.get("moe_tf", 1.0),
               moe_allgather=cols.get("moe_ag", 0), main_grad_fp32=main_grad_fp32(cols, precision),
               moe_deepspeed=cols.get("moe_ds", 0), expandable_segments=cols.get("expseg", 0),
               moe_recompute=cols.get("moe_rc", 0), tp_comm_overlap=cols.get("tp_ov", 0),
               cross_entropy_fusion=cols.get("xent", 0), pinned_host=cols.get("pin", 1),
               nvme_optimizer=cols.get("nvme_opt", 0), nvme_params=cols.get("nvme_par", 0),
               zero_init=zinit,
               reduce_bucket_elements=cols.get("rbucket", defaults.DEEPSPEED_REDUCE_BUCKET_ELEMENTS),
               prefetch_bucket_elements=cols.get("pbucket", defaults.DEEPSPEED_PREFETCH_BUCKET_ELEMENTS),
               sub_group_elements=cols.get("sgroup", defaults.DEEPSPEED_SUB_GROUP_ELEMENTS))
    if profile is not None:
        out["overheads"], _ = profile.memory_overheads()
    return out


def fp8_layer_fraction(model: ModelSpec, cols: dict):
    """Share of the model's transformer layers whose GEMMs run in FP8: all but Megatron's bf16 first/last layers
    (``--first-last-layers-bf16``). Whole-model figures (the FP8 parameter all-gather's bytes) read it; per stage
    the memory and time models place the bf16 layers where Megatron builds them
    (:func:`workbench.memory.bf16_layers_on_stage`: the first and last stage)."""
    return 1.0 - np.divide(cols.get("fp8_bf16", 0), model.num_layers)


def _where(cond, a, b):
    """``np.where`` for a column of plans, a plain ``if`` for one plan (a scalar column stays a Python number)."""
    if ndim(cond) == 0:
        return a if cond else b
    return where(cond, a, b)


def flash_attention_inputs(model: ModelSpec, gpu) -> dict:
    """The fused-attention rate (:func:`workbench.timing.flash_attention_seconds`) of a model with flash attention
    on a GPU generation the catalog ``flash_attention`` section measures: a Megatron model's Transformer Engine fused
    attention (the generation's entry), a Hugging Face model's PyTorch SDPA (the ``<generation>_sdpa`` entry, per
    head width: :func:`sdpa_efficiency`). Zero efficiency otherwise: the attention core stays on the GEMM curve
    (eager attention, megatron-core's local spec, generations without an entry)."""
    from workbench import timing as T

    from workbench.specs import Implementation

    none = dict(flash_forward_efficiency_max=0.0, flash_backward_efficiency_max=0.0, flash_half_seq=1.0,
                flash_backward_flops_ratio=2.0)
    if model.attention is not AttentionImpl.FLASH:
        return none
    table = T.calibration().get("flash_attention") or {}
    gen = T.gpu_generation(gpu.name)
    if model.implementation is Implementation.TRANSFORMERS:
        entry = table.get(f"{gen}_sdpa")
        if not entry:
            return none
        forward, backward = sdpa_efficiency(entry["by_head_dim"], model.head_dim)
        return dict(flash_forward_efficiency_max=forward, flash_backward_efficiency_max=backward,
                    flash_half_seq=entry["half_seq"], flash_backward_flops_ratio=entry["backward_flops_ratio"])
    entry = table.get(gen)
    if not entry or model.implementation is not Implementation.MEGATRON:
        return none
    return dict(flash_forward_efficiency_max=entry["forward_efficiency_max"],
                flash_backward_efficiency_max=entry["backward_efficiency_max"], flash_half_seq=entry["half_seq"],
                flash_backward_flops_ratio=entry["backward_flops_ratio"])


def sdpa_efficiency(by_head_dim: dict, head_dim) -> tuple:
    """(forward, backward) ``efficiency_max`` of PyTorch SDPA at ``head_dim`` from the catalog's measured head
    widths (keys are widths as strings): linear between the two measured widths around it, the nearest measured
    one outside their range."""
    points = sorted((int(k), v["forward_efficiency_max"], v["backward_efficiency_max"]) for k, v in by_head_dim.items())
    d = float(head_dim)
    if d <= points[0][0]:
        return points[0][1], points[0][2]
    for (d0, f0, b0), (d1, f1, b1) in zip(points, points[1:]):
        if d <= d1:
            w = (d - d0) / (d1 - d0)
            return f0 + w * (f1 - f0), b0 + w * (b1 - b0)
    return points[-1][1], points[-1][2]


def time_inputs(model: ModelSpec, cluster: ClusterSpec, cols: dict, precision: Precision, *, profile=None,
                bucket_elements=None, counts=None) -> dict:
    """Keyword arguments of :func:`workbench.timing.step_time_terms` for columns ``cols`` (scalars or arrays).

    ``bucket_elements`` (default: the engine's, :func:`workbench.defaults.grad_bucket_elements`) is the gradient
    bucket; ``counts`` the model's :class:`~workbench.specs.ParameterCounts` when the caller has them already.
    A measured ``profile`` replaces the datasheet-derived inputs it measured (GEMM curve, memory bandwidth, links,
    host link, CPU Adam rate) and scales the host's seconds by its host's dispatch speed."""
    from workbench import memory as M
    from workbench import timing as T

    precision = Precision.parse(precision, "precision")
    gpu = cluster.gpu
    cal = T.calibration()
    curve = T.efficiency_curve(gpu.name)
    net, ds = cal["network"], cal["deepspeed"]
    counts = counts or model.parameter_counts()
    engine, pp = cols["engine"], cols["pp"]
    # ZeRO-3's persistence threshold: one for every plan of a table (the planner's column holds one value)
    persist = int(np.max(cols.get("persist", defaults.DEEPSPEED_PERSISTENCE_THRESHOLD)))
    lora_zero3 = T.zero3_lora_modules_per_layer(model, cols["lora_rank"], cols["lora_targets"], persist)
    megatron = np.equal(engine, MEGATRON)
    fused_adam = np.greater(cols["fused_adam"], 0)
    recompute = cols["recompute"]
    first, middle, last = stage_layer_columns(model.num_layers, cols)
    largest = maximum(maximum(first, middle), last)
    stage_params = largest_stage_parameters(model, cols, first, middle, last)
    fraction = _where(np.equal(recompute, RECOMPUTE_CODES[Recompute.FULL]),
                      minimum(np.divide(cols["recompute_layers"], largest), 1.0), 0.0)
    if bucket_elements is None:
        bucket_elements = _where(megatron, defaults.MEGATRON_BUCKET_ELEMENTS,
                                 cols.get("rbucket", defaults.DEEPSPEED_REDUCE_BUCKET_ELEMENTS))
    inputs = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        head_dim=model.head_dim, query_projection_size=model.query_projection_size,
        kv_projection_size=model.kv_projection_size,
        ffn_hidden_size=model.moe_ffn_hidden_size if model.is_moe else model.ffn_hidden_size,
        gated=int(model.is_gated), experts_per_token=model.moe_top_k if model.is_moe else 1,
        num_experts=model.num_experts if model.is_moe else 1, seq_length=model.seq_length,
        vocab_size=model_vocab_size(model, cols["tp"]),
        causal_attention=int(model.attention is AttentionImpl.FLASH),
        masked_attention_share=M.sliding_window_masked_share(model),
        unfused_attention=int(model.attention.materialises_scores),
        # Megatron-LM's fused scale-mask-softmax kernel (--masked-softmax-fusion) is attention='fused-softmax'
        softmax_fusion=int(model.attention is AttentionImpl.FUSED_SOFTMAX),
        attention_dropout=model.attention_dropout,
        num_parameters=counts.total, parameters_per_layer=counts.per_layer, stage_parameters=stage_params,
        first_stage_layers=first, middle_stage_layers=middle, last_stage_layers=last,
        tensor_parallel=cols["tp"], pipeline_parallel=pp, virtual_pipeline=cols["vp"], context_parallel=cols["cp"],
        cp_comm_type=cols.get("cp_comm", 0), cp_a2a_size=cols.get("cp_a2a", 1),
        data_parallel=cols["dp"], micro_batch_size=cols["mbs"], num_microbatches=cols["nmb"],
        sequence_parallel=cols["sp"], zero_stage=cols["zero"], offload_optimizer=cols["off_opt"],
        offload_params=cols["off_par"], distributed_optimizer=cols["dist_opt"], recompute=recompute,
        recompute_fraction=fraction, bytes_per_value=precision.bytes_per_value,
        grad_bucket_elements=bucket_elements, overlap_comm=cols["overlap_comm"],
        # Megatron with bf16 accumulates and reduces fp32 main gradients (DDP grad_reduce_in_fp32; Megatron-LM turns
        # --accumulate-allreduce-grads-in-fp32 on for bf16); fp16 reduces 16-bit gradients
        # (--grad-reduce-in-bf16 / grad_reduce_in_fp32=False: 16-bit, ParallelPlan.grad_reduce_fp32)
        grad_reduce_bytes_per_value=_where(megatron & np.greater(main_grad_fp32(cols, precision), 0), 4.0,
                                           float(precision.bytes_per_value)),
        # FP8 training runs everything but the FP8 GEMMs in bf16: that peak prices the rest (and MFU)
        peak_flops=gpu.peak_flops(precision.base), hbm_gb_per_s=gpu.hbm_gb_per_s,
        gpus_per_node=cluster.gpus_per_node,
        intra_node_gb_per_s=cluster.intra_node_gb_per_s * net["intra_node_bandwidth_efficiency"],
        inter_node_gb_per_s=cluster.inter_node_gb_per_s * net["inter_node_bandwidth_efficiency"],
        host_link_gb_per_s=gpu.host_link_gb_per_s, intra_node_latency_s=net["intra_node_latency_s"],
        inter_node_latency_s=net["inter_node_latency_s"], gemm_efficiency_max=curve["gemm_efficiency_max"],
        gemm_half_dim=curve["gemm_half_dim"], memory_passes=curve["memory_passes"],
        hbm_efficiency=curve["hbm_efficiency"], layer_pass_overhead_s=curve.get("layer_pass_overhead_s", 0.0),
        step_overhead_s=curve.get("step_overhead_s", 0.0),
        score_hbm_efficiency=curve.get("score_hbm_efficiency", curve["hbm_efficiency"]),
        # the node's memory-bound CPU Adam cap grows with the host: per core of the cluster's nodes
        cpu_adam_params_per_second_per_node=(cal["cpu_adam"]["params_per_second_per_core"]
                                             * cluster.host_cpu_cores_per_node
                                             if "params_per_second_per_core" in cal["cpu_adam"]
                                             else cal["cpu_adam"]["params_per_second_per_node"]),
        cpu_adam_params_per_second_per_thread=cal["cpu_adam"].get("params_per_second_per_thread", np.inf),
        cpu_adam_threads=cluster.cpu_adam_threads_per_rank,
        offload_zero3_host_factor=cal["cpu_adam"].get("zero3_host_factor", 0.0),
        offload_param_host_factor=cal["cpu_adam"].get("zero3_param_offload_host_factor", 0.0),
        param_offload_copy_back_s=cal["cpu_adam"].get("param_offload_copy_back_seconds_per_parameter", 0.0),
        pin_memory=cols.get("pin", 1),
        nvme_optimizer=cols.get("nvme_opt", 0), nvme_params=cols.get("nvme_par", 0),
        nvme_read_gb_per_s=cluster.nvme_read_gb_per_s, nvme_write_gb_per_s=cluster.nvme_write_gb_per_s,
        pageable_copy_gb_per_s=cal["cpu_adam"].get("pageable_copy_gb_per_s", np.inf),
        cpu_adam_serial_seconds_per_parameter=cal["cpu_adam"].get("serial_seconds_per_parameter", 0.0),
        optimizer_bytes_per_parameter=_where(fused_adam, cal["gpu_optimizer"]["bytes_per_parameter"],
                                             cal["gpu_optimizer"]["torch_foreach_bytes_per_parameter"]),
        # ZeRO-0's step (the bf16 engine's FP16_Optimizer, no flattened partition) moves fewer bytes: measured apart
        deepspeed_step_bytes_per_parameter=_where(megatron, 0.0, _where(
            np.equal(cols["zero"], 0), ds.get("zero0_step_bytes_per_parameter", ds["step_bytes_per_parameter"]),
            ds["step_bytes_per_parameter"])),
        # the fused step's bandwidth where it was measured on this GPU; torch's foreach AdamW keeps the curve's
        optimizer_hbm_scale=_where(fused_adam, T.gpu_kernel_constants(gpu.name).get("optimizer_hbm_scale", 1.0), 1.0),
        zero3_modules_per_layer=T.zero3_modules_per_layer(model, persist) + lora_zero3[0],
        zero3_hooked_modules_per_layer=T.zero3_hooked_modules_per_layer(model) + lora_zero3[1],
        zero3_fetch_latency_s=ds["zero3_fetch_latency_s"], zero3_reduce_latency_s=ds["zero3_reduce_latency_s"],
        zero3_collective_call_s=ds["zero3_collective_call_s"],
        zero3_hbm_bytes_per_parameter=ds.get("zero3_hbm_bytes_per_parameter", 0.0),
        zero3_hook_overlap=ds.get("zero3_hook_overlap", 1.0), zero3_host_spread=ds.get("zero3_host_spread", 0.0),
        **dict(zip(("rope_forward_bytes", "rope_backward_bytes"), _rope(model, precision))),
        grad_accumulate_bytes_per_parameter=grad_accumulate_bytes(megatron, cols["zero"], fused_adam, precision,
                                                                    main_grad_fp32(cols, precision)),
        parameter_tensors=parameter_tensors(model) / pp,
        deepspeed_tensor_seconds=_where(megatron, 0.0, ds.get("tensor_seconds", 0.0)),
        # measured on megatron-core's local layer spec only (no Transformer Engine): 0 for TE (flash) layers
        layer_host_s=layer_host_seconds(model) if model.implementation is Implementation.MEGATRON else 0.0,
        forward_host_share=stack_host_constants(model).get("layer_forward_host_share", 0.0),
        trainable_fraction=trainable_fraction(model, cols, counts),
        soft_cap=float(soft_capped(model)),
        **flash_attention_inputs(model, gpu),
        **hf_host_inputs(model, cols, cal.get("transformers", {})),
        **layer_memory_inputs(model, precision, cal.get("transformers", {}), gpu.name),
        expert_parallel=cols.get("ep", 1), expert_tensor_parallel=cols.get("etp"),
        expert_data_parallel=cols.get("edp"), expert_parameters=expert_parameters(model),
        moe_token_factor=cols.get("moe_tf", 1.0), moe_allgather=cols.get("moe_ag", 0),
        moe_overlap_alltoall=cols.get("moe_ov", 0), moe_deepspeed=cols.get("moe_ds", 0),
        moe_recompute=cols.get("moe_rc", 0),
        cross_entropy_fusion=cols.get("xent", 0),
        moe_shared_ffn_hidden_size=float(model.shared_expert_ffn_hidden_size or 0),
        **hf_moe_inputs(model, cal.get("transformers", {})),
        tp_comm_overlap=cols.get("tp_ov", 0), tp_overlap_sm_fraction=T.TE_UB_MARGIN_SMS / T.gpu_sm_count(gpu.name),
    )
    inputs.update(fp8_time_inputs(model, cluster, cols, counts) if precision.is_fp8 else dict(
        fp8_layer_fraction=0.0, fp8_bf16_first=0, fp8_bf16_last=0, fp8_peak_flops=1.0,
        fp8_gemm_efficiency_max=1.0, fp8_gemm_half_dim=1.0,
        fp8_activation_bytes=1.0, fp8_weight_cast_bytes_per_parameter=0.0, fp8_amax_reductions=0.0,
        fp8_amax_bytes=0.0, param_gather_bytes_per_value=float(precision.bytes_per_value)))
    if profile is not None:
        inputs.update(profile.time_overrides(cluster, precision.base)[0])
        host_scale = profile.host_seconds_scale
        if host_scale is not None:  # the profile's host issues work faster or slower than the fit host
            inputs = T.scale_host_seconds(inputs, host_scale)
        measured = profile.gemm.get("fp8") if precision.is_fp8 else None
        if measured:
            scale = measured["peak_tflops"] * 1e12 / gpu.peak_flops("fp8")
            inputs.update(fp8_gemm_efficiency_max=measured["efficiency_max"] * scale,
                          fp8_gemm_half_dim=measured["half_dim"])
    return inputs


def hf_moe_inputs(model: ModelSpec, hf_cal: dict) -> dict:
    """StepInputs of a transformers MoE model's experts block by its ``experts_implementation`` (catalog
    ``transformers``): ``hf_moe_experts`` 1 for grouped_mm, 2 for eager (0: not a transformers MoE model), the
    block's host seconds per layer and, for eager, per expert hit."""
    if not (model.is_moe and model.implementation is Implementation.TRANSFORMERS):
        return dict(hf_moe_experts=0.0, moe_block_hbm_efficiency=hf_cal.get("moe_block_hbm_efficiency", 1.0),
                    moe_block_host_s=0.0, moe_expert_host_s=0.0)
    eager = model.experts_implementation is ExpertsImpl.EAGER
    return dict(hf_moe_experts=2.0 if eager else 1.0,
                moe_block_hbm_efficiency=hf_cal.get("moe_block_hbm_efficiency", 1.0),
                moe_block_host_s=hf_cal.get("moe_eager_block_host_s" if eager else "moe_block_host_s", 0.0),
                moe_expert_host_s=hf_cal.get("moe_eager_expert_host_s", 0.0) if eager else 0.0)


def fp8_time_inputs(model: ModelSpec, cluster: ClusterSpec, cols: dict, counts) -> dict:
    """The FP8 fields of :class:`workbench.timing.StepInputs` for columns of an FP8 plan (recipe, FP8 parameter
    all-gather, bf16 first/last layers)."""
    from workbench import memory as M
    from workbench import timing as T

    gpu = cluster.gpu
    curve = T.fp8_efficiency_curve(gpu.name)
    recipe = np.asarray(cols["fp8_recipe"], dtype=int)
    fraction = fp8_layer_fraction(model, cols)
    a = M.FP8_ACTIVATION_BYTES[recipe]
    pg = np.greater(cols["fp8_pg"], 0)
    # without --fp8-param-gather each step re-reads the bf16 weight and writes its two FP8 copies; with it the
    # all-gathered FP8 weight is read once to write its transpose
    cast = where(pg, 2.0 * a, 2.0 + M.FP8_WEIGHT_COPY_BYTES[recipe])
    # the parameter all-gather sends the FP8 layers' linear weights in a bytes instead of 2
    linear_share = model.num_layers * fraction * M.fp8_linear_params_per_layer(model, 1) / counts.total
    gather = where(pg, 2.0 - linear_share * (2.0 - a), 2.0)
    delayed = recipe == FP8_RECIPE_CODES["delayed"]
    stage_tensors = model.num_layers / np.asarray(cols["pp"]) * M.fp8_linear_modules_per_layer(model) * 5
    # FP8 on (1.0); the bf16 first/last layers are placed per stage by timing.fp8_stage_shares from these counts
    return dict(fp8_layer_fraction=np.ones_like(fraction, dtype=float) if ndim(fraction) else 1.0,
                fp8_bf16_first=cols.get("fp8_bf16_first", 0), fp8_bf16_last=cols.get("fp8_bf16_last", 0),
                fp8_peak_flops=gpu.peak_flops("fp8"),
                fp8_gemm_efficiency_max=curve["gemm_efficiency_max"], fp8_gemm_half_dim=curve["gemm_half_dim"],
                fp8_activation_bytes=a, fp8_weight_cast_bytes_per_parameter=cast,
                fp8_amax_reductions=where(delayed, 2.0, 0.0), fp8_amax_bytes=4.0 * stage_tensors,
                param_gather_bytes_per_value=gather)
