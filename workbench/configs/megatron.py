"""Megatron-LM ``pretrain_gpt.py`` command lines for a plan, and their validation by Megatron's own parser.

Flag names follow megatron-core 0.19's ``megatron/training/arguments.py``. Paths the user must supply are shell
variables (``$DATA_PATH``, ``$TOKENIZER_MODEL``, ``$CHECKPOINT_DIR``, ``$MEGATRON_LM``) that
:func:`megatron_command` declares at the top of the script with a ``FILL IN`` mark.
"""
from __future__ import annotations

import argparse
import re
import shlex
from typing import Optional, Sequence

from workbench.configs.deepspeed import DeepSpeedOptions
from workbench.defaults import megatron_recompute_flags
from workbench.specs import (Activation, AttentionImpl, ClusterSpec, CrossEntropyFusion, Engine, Fp8Recipe,
                             ModelSpec, Normalization, ParallelPlan, Positions, Precision, validate)

#: Shell variables the exported scripts leave for the user: name -> (example value, what it is).
PLACEHOLDERS = {
    "MEGATRON_LM": ("/path/to/Megatron-LM", "a Megatron-LM checkout (holds pretrain_gpt.py)"),
    "DATA_PATH": ("/path/to/corpus_text_document", "dataset prefix written by tools/preprocess_data.py "
                                                   "(.bin/.idx)"),
    "TOKENIZER_MODEL": ("/path/to/tokenizer", "Hugging Face tokenizer name or folder"),
    "CHECKPOINT_DIR": ("/path/to/checkpoints", "where checkpoints are saved and loaded"),
}


def _fmt(x) -> str:
    """Numbers as Megatron's argparse reads them back exactly (floats in repr form)."""
    if isinstance(x, bool):
        raise TypeError("booleans are flags, not values")
    return repr(float(x)) if isinstance(x, float) else str(x)


def attention_flags(attention: AttentionImpl, *, dialect: str = "megatron") -> list[str]:
    """The flags that select the attention kernel.

    Megatron-LM: ``flash`` is Transformer Engine's flash attention (``--attention-backend flash``);
    ``fused-softmax`` is megatron-core's own ``DotProductAttention`` (``--transformer-impl local
    --attention-backend local``) with Megatron-LM's fused scale-mask-softmax (``--masked-softmax-fusion`` is on
    by default); ``unfused`` is the same local attention with the torch softmax in fp32
    (``--no-masked-softmax-fusion --attention-softmax-in-fp32``). Megatron-DeepSpeed: ``--use-flash-attn-v2`` for
    flash, ``--no-masked-softmax-fusion`` for unfused."""
    attention = AttentionImpl.parse(attention, "attention")
    if dialect == "megatron-deepspeed":
        return {AttentionImpl.FLASH: ["--use-flash-attn-v2"], AttentionImpl.FUSED_SOFTMAX: [],
                AttentionImpl.UNFUSED: ["--no-masked-softmax-fusion"]}[attention]
    if attention is AttentionImpl.FLASH:
        return ["--attention-backend", "flash"]
    local = ["--transformer-impl", "local", "--attention-backend", "local"]
    if attention is AttentionImpl.FUSED_SOFTMAX:
        return local
    return local + ["--no-masked-softmax-fusion", "--attention-softmax-in-fp32"]


def model_flags(model: ModelSpec, *, dialect: str = "megatron") -> list[str]:
    """Architecture flags. ``dialect`` is ``megatron`` (Megatron-LM / megatron-core 0.19) or ``megatron-deepspeed``
    (Microsoft's Megatron-DeepSpeed fork: ``--num-key-value-heads``, ``--use-rotary-position-embeddings``,
    lower-case ``--normalization``)."""
    mds = dialect == "megatron-deepspeed"
    a: list[str] = [
        "--num-layers", _fmt(model.num_layers),
        "--hidden-size", _fmt(model.hidden_size),
        "--ffn-hidden-size", _fmt(model.ffn_hidden_size),
        "--num-attention-heads", _fmt(model.num_attention_heads),
    ]
    if model.num_query_groups != model.num_attention_heads:
        if mds:
            a += ["--num-key-value-heads", _fmt(model.num_query_groups)]
        else:
            a += ["--group-query-attention", "--num-query-groups", _fmt(model.num_query_groups)]
    if model.head_dim * model.num_attention_heads != model.hidden_size:
        a += ["--kv-channels", _fmt(model.head_dim)]
    positions = max(model.seq_length, model.max_position_embeddings or model.seq_length)  # the position table's rows
    a += ["--seq-length", _fmt(model.seq_length), "--max-position-embeddings", _fmt(positions)]
    if model.position_embedding is Positions.ROTARY:
        a += ["--use-rotary-position-embeddings"] if mds else ["--position-embedding-type", "rope"]
    elif not mds:
        a += ["--position-embedding-type", "learned_absolute"]
    if model.activation is Activation.SWIGLU:
        a += ["--swiglu"]
    if model.normalization is Normalization.RMSNORM:
        a += ["--normalization", "rmsnorm" if mds else "RMSNorm"]
    if not model.add_bias_linear:
        a += ["--disable-bias-linear"]
    if not model.tied_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    a += attention_flags(model.attention, dialect=dialect)
    a += ["--hidden-dropout", _fmt(float(model.hidden_dropout)),
          "--attention-dropout", _fmt(float(model.attention_dropout))]
    if model.is_moe:
        a += ["--num-experts", _fmt(model.num_experts), ("--topk" if mds else "--moe-router-topk"),
              _fmt(model.moe_top_k)]
        if model.moe_ffn_hidden_size != model.ffn_hidden_size and not mds:
            a += ["--moe-ffn-hidden-size", _fmt(model.moe_ffn_hidden_size)]
        if model.shared_expert_ffn_hidden_size is not None and not mds:  # Qwen2-MoE's gated shared expert
            a += ["--moe-shared-expert-intermediate-size", _fmt(model.shared_expert_ffn_hidden_size),
                  "--moe-shared-expert-gate"]
    a += ["--vocab-size", _fmt(model.vocab_size)]
    return a


def moe_flags(plan: ParallelPlan) -> list[str]:
    """Megatron-LM's MoE layout flags for an MoE model: expert parallel, expert tensor parallel (only when it differs
    from TP, Megatron's default), the token dispatcher (always written: Megatron-LM's default is allgather, the
    workbench's alltoall), the capacity factor and padding."""
    a = []
    if plan.expert_parallel > 1:
        a += ["--expert-model-parallel-size", _fmt(plan.expert_parallel)]
    if plan.expert_tensor_parallel_size != plan.tensor_parallel:
        a += ["--expert-tensor-parallel-size", _fmt(plan.expert_tensor_parallel_size)]
    a += ["--moe-token-dispatcher-type", str(plan.moe_token_dispatcher)]
    if plan.moe_capacity_factor is not None:
        a += ["--moe-expert-capacity-factor", _fmt(plan.moe_capacity_factor)]
    if plan.moe_pad_to_capacity:
        a += ["--moe-pad-expert-input-to-capacity"]
    if plan.moe_overlap_alltoall:
        a += ["--overlap-moe-expert-parallel-comm"]
    return a


def parallel_flags(model: ModelSpec, plan: ParallelPlan, *, dialect: str = "megatron") -> list[str]:
    a = ["--tensor-model-parallel-size", _fmt(plan.tensor_parallel),
         "--pipeline-model-parallel-size", _fmt(plan.pipeline_parallel)]
    if plan.virtual_pipeline > 1 and plan.uneven_stages:
        # layers per virtual stage differ between stages: Megatron-LM takes the chunk count instead
        a += ["--num-virtual-stages-per-pipeline-rank", _fmt(plan.virtual_pipeline)]
    elif plan.virtual_pipeline > 1:
        per_stage = model.num_layers // (plan.pipeline_parallel * plan.virtual_pipeline)
        a += ["--num-layers-per-virtual-pipeline-stage", _fmt(per_stage)]
    if plan.first_stage_layers is not None:
        a += ["--decoder-first-pipeline-num-layers", _fmt(plan.first_stage_layers)]
    if plan.last_stage_layers is not None:
        a += ["--decoder-last-pipeline-num-layers", _fmt(plan.last_stage_layers)]
    if plan.embedding_in_pipeline_split:
        a += ["--account-for-embedding-in-pipeline-split"]
    if plan.loss_in_pipeline_split:
        a += ["--account-for-loss-in-pipeline-split"]
    if plan.context_parallel > 1:
        a += ["--context-parallel-size", _fmt(plan.context_parallel)]
        if str(plan.cp_comm_type) != "p2p":  # Megatron's default is p2p; TE takes "all_gather" (not "allgather")
            a += ["--cp-comm-type", str(plan.cp_comm_type)]
        if plan.hierarchical_context_parallel_sizes:
            a += ["--hierarchical-context-parallel-sizes",
                  *(_fmt(x) for x in plan.hierarchical_context_parallel_sizes)]
    if plan.sequence_parallel:
        a += ["--sequence-parallel"]
    if plan.tp_comm_overlap:  # Transformer Engine userbuffers with TE's default per-GEMM methods (no --tp-comm-overlap-cfg)
        a += ["--tp-comm-overlap"]
    if plan.cross_entropy_fusion is not CrossEntropyFusion.NONE:  # megatron-core's fused loss (engine megatron only)
        a += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", str(plan.cross_entropy_fusion)]
    if model.is_moe and dialect != "megatron-deepspeed":
        a += moe_flags(plan)
    if plan.distributed_optimizer:
        a += ["--use-distributed-optimizer"]
    a += megatron_recompute_flags(plan)
    a += ["--micro-batch-size", _fmt(plan.micro_batch_size), "--global-batch-size", _fmt(plan.global_batch_size)]
    return a


def training_flags(model: ModelSpec, plan: ParallelPlan, options: DeepSpeedOptions) -> list[str]:
    o = options
    a: list[str] = []
    if plan.precision is Precision.BF16:
        a += ["--bf16"]
    elif plan.precision is Precision.FP8:
        a += ["--bf16"] + fp8_flags(plan)
    elif plan.precision is Precision.FP16:
        a += ["--fp16", "--initial-loss-scale", _fmt(2 ** o.initial_scale_power),
              "--loss-scale-window", _fmt(o.loss_scale_window), "--hysteresis", _fmt(o.hysteresis),
              "--min-loss-scale", _fmt(float(o.min_loss_scale))]
    a += [
        "--lr", _fmt(float(o.lr)), "--min-lr", _fmt(float(o.final_lr)), "--lr-decay-style", "cosine",
        "--lr-warmup-iters", _fmt(o.warmup_steps), "--lr-decay-iters", _fmt(o.train_iters),
        "--train-iters", _fmt(o.train_iters),
        "--weight-decay", _fmt(float(o.weight_decay)),
        "--adam-beta1", _fmt(float(o.betas[0])), "--adam-beta2", _fmt(float(o.betas[1])),
        "--adam-eps", _fmt(float(o.eps)),
        "--clip-grad", _fmt(float(o.clipping_for(model))),
        "--seed", _fmt(o.seed),
    ]
    return a


def fp8_flags(plan: ParallelPlan) -> list[str]:
    """Transformer Engine FP8 under Megatron-LM (``megatron/training/arguments.py``, Transformer-Engine group): E4M3
    forward and E5M2 gradients (``--fp8-format hybrid``), the plan's recipe, and for the delayed recipe the amax
    history of Megatron-LM's and NeMo's FP8 examples (1024 steps, maximum) that the memory model counts
    (:data:`workbench.memory.FP8_AMAX_HISTORY_LEN`); ``--fp8-param-gather`` and the bf16 first/last layers when the
    plan sets them."""
    from workbench.memory import FP8_AMAX_HISTORY_LEN

    a = ["--transformer-impl", "transformer_engine", "--fp8-format", "hybrid", "--fp8-recipe", str(plan.fp8_recipe)]
    if plan.fp8_recipe is Fp8Recipe.DELAYED:
        a += ["--fp8-amax-history-len", _fmt(FP8_AMAX_HISTORY_LEN), "--fp8-amax-compute-algo", "max"]
    if plan.fp8_param_gather:
        a += ["--fp8-param-gather"]
    if plan.fp8_bf16_first_layers or plan.fp8_bf16_last_layers:
        a += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", _fmt(plan.fp8_bf16_first_layers),
              "--num-layers-at-end-in-bf16", _fmt(plan.fp8_bf16_last_layers)]
    return a


def data_flags() -> list[str]:
    """Data, tokenizer and checkpoint flags; the values are the :data:`PLACEHOLDERS` shell variables."""
    return ["--data-path", "$DATA_PATH", "--split", "949,50,1",
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "$TOKENIZER_MODEL",
            "--save", "$CHECKPOINT_DIR", "--load", "$CHECKPOINT_DIR", "--save-interval", "1000",
            "--log-interval", "10", "--eval-interval", "1000", "--eval-iters", "10"]


def megatron_args(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                  options: Optional[DeepSpeedOptions] = None) -> list[str]:
    """``pretrain_gpt.py`` arguments for an ``engine='megatron'`` plan (megatron-core 0.19 names)."""
    validate(model, cluster, plan)
    if plan.engine is not Engine.MEGATRON:
        raise ValueError(f"engine='{plan.engine}' is not exported as a Megatron-LM command; use engine='megatron' "
                         f"(or hybrid_command for 'megatron-deepspeed')")
    o = options or DeepSpeedOptions()
    return (model_flags(model) + parallel_flags(model, plan) + overlap_flags(plan) + training_flags(model, plan, o)
            + data_flags())


def overlap_flags(plan: ParallelPlan) -> list[str]:
    """Overlap the data-parallel gradient reduce (and, with the distributed optimizer, the parameter all-gather)
    with compute when the plan does (:attr:`ParallelPlan.overlaps_comm`: Megatron's default is off, which is also
    what the time model prices then; the guide asks for overlap on InfiniBand, §4, and the advisor says so)."""
    # the main-gradient dtype where the plan departs from Megatron-LM's (fp32 with --bf16, 16-bit with --fp16)
    grads = ["--grad-reduce-in-bf16"] if plan.grad_reduce_fp32 is False and plan.precision.base is Precision.BF16 \
        else ["--accumulate-allreduce-grads-in-fp32"] if plan.grad_reduce_fp32 and plan.precision is Precision.FP16 \
        else []
    if not plan.overlaps_comm or plan.data_parallel * plan.context_parallel == 1:
        return grads
    return grads + ["--overlap-grad-reduce"] + (["--overlap-param-gather"] if plan.distributed_optimizer else [])


_SHELL_VARIABLE_PATH = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z0-9_./+-]*)?")
"""A script variable, alone or followed by a path (``$DATA_PATH``, ``$MEGATRON_LM/pretrain_gpt.py``)."""


def _quote(token: str) -> str:
    """A shell word for ``token``: a script variable (with a path after it) in double quotes so the shell expands
    it; anything else quoted literally."""
    if _SHELL_VARIABLE_PATH.fullmatch(token):
        return f'"{token}"'
    return shlex.quote(token)


def format_flags(args: Sequence[str], indent: str = "    ") -> list[str]:
    """One ``--flag value`` per line, ready to be joined with `` \\`` continuations."""
    lines, i = [], 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{indent}{tok} {_quote(args[i + 1])}")
            i += 2
        else:
            lines.append(f"{indent}{_quote(tok)}")
            i += 1
    return lines


def placeholder_lines(names: Sequence[str]) -> list[str]:
    out = []
    for name in names:
        example, what = PLACEHOLDERS[name]
        out.append(f'{name}="${{{name}:-{example}}}"  # FILL IN: {what}')
    return out


def plan_summary(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> str:
    return (f"{model.name} on {cluster.num_nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}: "
            f"TP={plan.tensor_parallel} PP={plan.pipeline_parallel} VP={plan.virtual_pipeline} "
            f"CP={plan.context_parallel} DP={plan.data_parallel}; micro batch {plan.micro_batch_size}, "
            f"global batch {plan.global_batch_size} ({plan.gradient_accumulation_steps} accumulation steps), "
            f"{plan.precision}")


def torchrun_prefix(cluster: ClusterSpec) -> str:
    """``torchrun`` with the cluster's shape; node rank and master address come from the environment."""
    return (f"torchrun --nproc_per_node {cluster.gpus_per_node} --nnodes {cluster.num_nodes} "
            f'--node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT"')


def rendezvous_lines(cluster: ClusterSpec) -> list[str]:
    last = cluster.num_nodes - 1
    return [
        f'NODE_RANK="${{NODE_RANK:-0}}"  # 0..{last}: this node\'s index (SLURM: $SLURM_NODEID)',
        'MASTER_ADDR="${MASTER_ADDR:-localhost}"  # FILL IN for several nodes: address of node 0',
        'MASTER_PORT="${MASTER_PORT:-6000}"',
    ]


def megatron_command(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                     options: Optional[DeepSpeedOptions] = None) -> str:
    """A bash script that runs Megatron-LM's ``pretrain_gpt.py`` for the plan with ``torchrun`` on every node."""
    from workbench.configs.launch import allocator_lines  # launch builds on this module's format_flags

    args = megatron_args(model, cluster, plan, options=options)
    lines = [
        "#!/usr/bin/env bash",
        f"# Megatron-LM pretrain_gpt.py: {plan_summary(model, cluster, plan)}",
        "# Run the same script on every node with NODE_RANK set. Fill in the lines marked FILL IN.",
        *([f"# Priced with MoE routing load imbalance {plan.moe_load_imbalance:g} (busiest expert-parallel rank over "
           f"the mean): an assumption about the router, Megatron has no flag for it"]
          if model.is_moe and plan.moe_load_imbalance != 1.0 else []),
        "set -euo pipefail",
        *placeholder_lines(["MEGATRON_LM", "DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"]),
        *rendezvous_lines(cluster),
        "export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron orders TP/SP communication before compute with it",
        *allocator_lines(plan),
        "# export NCCL_DEBUG=INFO  # uncomment to see NCCL's topology and errors "
        "(the DeepSpeed-vs-Megatron practitioner's guide §5.1)",
        "",
        torchrun_prefix(cluster) + " \\",
        '    "$MEGATRON_LM/pretrain_gpt.py" \\',
    ]
    flag_lines = format_flags(args)
    lines += [line + " \\" for line in flag_lines[:-1]] + [flag_lines[-1]]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Validation with Megatron's own parser
# ----------------------------------------------------------------------------------------------------------------
def megatron_core_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("megatron-core")
    except PackageNotFoundError:
        return "(not installed)"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit(2)
        raise ValueError(message)


def megatron_parser():
    """Megatron's own ``pretrain_gpt.py`` argument parser, or ``None`` with the reason when not importable."""
    try:
        from megatron.training.arguments import add_megatron_arguments
    except ImportError:
        return None, (f"megatron.training is not shipped by megatron-core {megatron_core_version()} "
                      f"(needs >= 0.17, Python >= 3.12); flags not validated")
    except Exception as exc:  # importable but broken (missing optional dependency, ...)
        return None, f"megatron.training could not be imported ({exc.__class__.__name__}: {exc}); flags not validated"
    parser = _RaisingParser(description="Megatron-LM Arguments", allow_abbrev=False)
    add_megatron_arguments(parser)
    return parser, ""


def validate_megatron_args(args: Sequence[str]) -> tuple[bool, str]:
    """Parse ``args`` with Megatron's own argument parser (megatron-core >= 0.17).

    Returns ``(True, description)`` when every flag and value is accepted, ``(False, reason)`` when the parser
    rejects one, or when ``megatron.training`` is not importable here (the reason says so). Only parsing is checked:
    Megatron's ``validate_args`` needs the job's distributed environment.
    """
    parser, reason = megatron_parser()
    if parser is None:
        return False, reason
    try:
        parser.parse_args(list(args))
    except ValueError as exc:
        return False, f"megatron-core {megatron_core_version()} argument parser rejects the flags: {exc}"
    return True, f"accepted by megatron-core {megatron_core_version()}'s argument parser ({len(args)} tokens)"
