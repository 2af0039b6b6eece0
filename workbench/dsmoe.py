"""DeepSpeed-MoE (``deepspeed.moe.layer.MoE``, DeepSpeed 0.19.8) where it differs from megatron-core's MoE layer.

A plan trains its MoE layers with DeepSpeed-MoE when :attr:`workbench.specs.ParallelPlan.deepspeed_moe` holds (a
DeepSpeed engine with ``expert_parallel > 1`` — DeepSpeed's ``ep_size`` — or a ``moe_capacity_factor``). What the
installed sources do (``deepspeed/moe/layer.py``, ``sharded_moe.py``, ``utils/groups.py``):

* ``TopKGate`` runs the gate in fp32 (``input.float()`` through an fp32 ``wg`` linear), top-k over a softmax; every
  expert has a fixed capacity C = max(⌈S/E · capacity_factor · k⌉, min_capacity) (``_capacity``; top-2 passes
  ``capacity_factor * 2``, top-k ``capacity_factor * k``) for the S tokens of the rank's micro-batch; tokens beyond
  it are dropped (``drop_tokens=True``, the default; ``use_rts`` picks the kept ones at random);
* ``MOELayer`` places the routed tokens in an [E, C, h] buffer (``_sparse_encode``: one gather, no dense
  [S, E, C] one-hot masks in 0.19.8), exchanges it by one all-to-all over the expert-parallel group, runs the
  E/ep local experts on ep·C rows each — padded rows cost compute like real ones —, sends the [E, C, h] output
  back by a second all-to-all, and gathers each token's k results, weighted by the fp32 gate values
  (``_sparse_decode``);
* the expert-parallel groups are ep consecutive ranks of a pipeline stage; expert parameters are reduced and
  (ZeRO-1/2) partitioned over the expert-data-parallel group, world ÷ (pp · ep)
  (``groups._create_expert_and_data_parallel``, the optimizer's MoE param groups from
  ``split_params_into_different_moe_groups_for_optimizer``); ZeRO-3 is refused.

Every expert GEMM therefore sees E·C/(k·S) times the routed tokens (:func:`token_factor`), which the shared memory
and time terms take as their ``moe_token_factor``; what DeepSpeed-MoE keeps beyond megatron-core's layer is
:func:`extra_activation_bytes` and :func:`transient_bytes`.
"""
from __future__ import annotations

import numpy as np

from workbench.specs import ModelSpec, ParallelPlan

CAPACITY_FACTOR = 1.0
"""``MoE(capacity_factor=1.0)``: DeepSpeed's default training capacity factor (also its ``eval_capacity_factor``)."""
MIN_CAPACITY = 4
"""``MoE(min_capacity=4)``: no expert's capacity is below this many tokens (``TopKGate``'s own default is 8, but the
``MoE`` layer passes 4)."""


def capacity_factor(plan: ParallelPlan) -> float:
    """The plan's capacity factor, DeepSpeed's default 1.0 when it sets none."""
    return CAPACITY_FACTOR if plan.moe_capacity_factor is None else float(plan.moe_capacity_factor)


def expert_capacity(tokens, *, num_experts, top_k, capacity_factor=CAPACITY_FACTOR, min_capacity=MIN_CAPACITY):
    """Tokens each expert takes from one rank's micro-batch of ``tokens`` (S): DeepSpeed's
    ``_capacity(gates, capacity_factor * k, min_capacity)`` = max(⌈S/E · factor · k⌉, min_capacity)."""
    capacity = np.ceil(np.asarray(tokens, dtype=float) / num_experts * (capacity_factor * top_k))
    return np.maximum(capacity, min_capacity)


def rank_tokens(model: ModelSpec, plan: ParallelPlan) -> float:
    """S, the tokens one rank's gate sees per micro-batch: micro_batch · seq_length / context_parallel."""
    return plan.micro_batch_size * model.seq_length / plan.context_parallel


def token_factor(model: ModelSpec, plan: ParallelPlan) -> float:
    """Rows the experts compute (and the all-to-alls carry) over the routed token copies: E·C / (k·S) — about the
    capacity factor, more where ``min_capacity`` or the ceiling bind (small micro-batches, many experts)."""
    return float(token_factor_of(model, micro_batch=plan.micro_batch_size, context_parallel=plan.context_parallel,
                                 capacity_factor=capacity_factor(plan)))


def token_factor_of(model: ModelSpec, *, micro_batch, context_parallel, capacity_factor=CAPACITY_FACTOR):
    """:func:`token_factor` from columns (numpy arrays in the planner's table)."""
    s = np.asarray(micro_batch, dtype=float) * model.seq_length / np.asarray(context_parallel, dtype=float)
    c = expert_capacity(s, num_experts=model.num_experts, top_k=model.moe_top_k, capacity_factor=capacity_factor)
    return model.num_experts * c / (model.moe_top_k * s)


def extra_activation_bytes(m: ModelSpec, *, tokens, value_bytes):
    """What one DeepSpeed-MoE layer keeps for backward, per micro-batch on one rank, beyond megatron-core's layer
    (:func:`workbench.memory.moe_activation_bytes`, whose router and expert terms — the latter at the capacity rows
    of :func:`token_factor` — hold as they are):

    * the gate's fp32 copy of its input, 4·S·h, kept by the fp32 ``wg`` linear (none when training in fp32, where
      ``input.float()`` is the input itself);
    * the combine: ``_sparse_decode`` multiplies the k gathered expert outputs [k, S, h] (model dtype) by the fp32
      gate values, and the product keeps them for the gate's gradient, v·k·S·h.

    ``tokens`` = S (s·b/cp); every argument may be a numpy array."""
    gate_input = np.where(np.asarray(value_bytes) < 4, 4.0, 0.0) * tokens * m.hidden_size
    return gate_input + value_bytes * m.moe_top_k * tokens * m.hidden_size


def transient_bytes(m: ModelSpec, *, tokens, value_bytes, token_factor):
    """The largest short-lived tensor of one DeepSpeed-MoE layer on one rank: the [E, C, h] dispatch buffer beside
    its all-to-all output (v·E·C·h each, E·C = k·S·token_factor), or the combine's fp32 product [k, S, h] and its
    fp32 sum over the routes [S, h], whichever is larger."""
    rows = m.moe_top_k * tokens * token_factor
    dispatch = value_bytes * rows * m.hidden_size
    combine = 4.0 * (m.moe_top_k + 1) * tokens * m.hidden_size
    return np.maximum(dispatch, combine)


def extra_hbm_bytes(*, tokens, hidden_size, top_k, value_bytes):
    """HBM bytes one DeepSpeed-MoE layer's forward moves on one rank beyond the token permutation both layers do
    (the gathers into and out of the [E, C, h] buffer, priced as megatron-core's permute/unpermute): the gate's
    ``input.float()`` (read v, write 4 per value of the S·h input), the combine's fp32 product of the k gathered
    outputs (read v·k·S·h, write 4·k·S·h), its sum over the routes (read 4·k·S·h, write 4·S·h) and the cast back
    (read 4·S·h, write v·S·h): S·h·(2v + 12 + k·(v + 8)). Counted, not measured."""
    v = np.asarray(value_bytes, dtype=float)
    return tokens * hidden_size * (2 * v + 12 + top_k * (v + 8))


def moe_layer_snippet(model: ModelSpec, plan: ParallelPlan) -> str:
    """The model-code side of a DeepSpeed-MoE plan: each MoE layer's ``deepspeed.moe.layer.MoE(...)`` arguments and
    the optimizer param-group split DeepSpeed needs for expert parameters (ZeRO-1/2 partition them over the
    expert-data-parallel group only when they are in their own MoE param group)."""
    factor = capacity_factor(plan)
    s, c = rank_tokens(model, plan), expert_capacity_of(model, plan)
    edp = plan.world_size // (plan.pipeline_parallel * plan.expert_parallel)
    return "\n".join([
        "# DeepSpeed-MoE: the model builds each MoE layer as",
        "from deepspeed.moe.layer import MoE",
        "from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer",
        f"moe = MoE(hidden_size={model.hidden_size}, expert=expert_mlp,  # one expert: {model.hidden_size} -> "
        f"{model.moe_ffn_hidden_size}{' (gated, ' + str(model.activation) + ')' if model.is_gated else ''} -> "
        f"{model.hidden_size}",
        f"          num_experts={model.num_experts}, ep_size={plan.expert_parallel}, k={model.moe_top_k},",
        f"          capacity_factor={factor:g}, eval_capacity_factor={factor:g}, min_capacity={MIN_CAPACITY},",
        "          drop_tokens=True, use_rts=True)",
        "# forward returns (output, l_aux, exp_counts): add l_aux (times a small coefficient) to the loss",
        "params = split_params_into_different_moe_groups_for_optimizer(",
        "    {'params': [p for p in model.parameters() if p.requires_grad], 'name': 'params'})",
        "# deepspeed.initialize(model=model, model_parameters=params, config=ds_config)",
        f"# per rank: {model.num_experts // plan.expert_parallel} local experts; expert capacity "
        f"C = max(ceil({s:g} / {model.num_experts} * {factor:g} * {model.moe_top_k}), {MIN_CAPACITY}) = {c} tokens; "
        f"expert parameters reduced over {edp} ranks (world / (pp * ep))",
    ])


def expert_capacity_of(model: ModelSpec, plan: ParallelPlan) -> int:
    """C for the plan's micro-batch (see :func:`expert_capacity`)."""
    return int(expert_capacity(rank_tokens(model, plan), num_experts=model.num_experts, top_k=model.moe_top_k,
                               capacity_factor=capacity_factor(plan)))
