"""Frozen specifications: the model, the cluster and the parallel plan.

Every face of the workbench (CLI, widgets, importers, planner, launcher) builds these three objects and hands them
to :func:`workbench.estimate.estimate`. Each spec validates itself on construction; checks that need two specs at once
(tensor parallel against attention heads, plan world size against the cluster) live in :func:`validate`.

Errors are ``ValueError`` whose message names the field(s) and the numbers, e.g.
``tensor_parallel=3 does not divide num_attention_heads=40``.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np


# ----------------------------------------------------------------------------------------------------------------
# Ordered enums
# ----------------------------------------------------------------------------------------------------------------
class ZeroStage(enum.IntEnum):
    """DeepSpeed ZeRO stage; ordered so that ``stage >= ZeroStage.GRADIENTS`` reads naturally."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    PARAMETERS = 3


class _StrEnum(str, enum.Enum):
    def __str__(self) -> str:  # so f-strings and JSON show the plain value
        return self.value

    @classmethod
    def _aliases(cls) -> dict:
        """Other spellings users write for a value (lower case) -> the value."""
        return {}

    @classmethod
    def parse(cls, value, field_name: str):
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"{field_name}={value!r} must be one of: {allowed}")
        key = value.strip().lower()
        try:
            return cls(cls._aliases().get(key, key))
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"{field_name}={value!r} is not one of: {allowed}") from None


class Recompute(_StrEnum):
    """Activation recomputation (checkpointing). Ordered by how much memory it saves."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    @property
    def rank(self) -> int:
        return ["none", "selective", "full"].index(self.value)


class Engine(_StrEnum):
    """Which training framework runs the plan."""

    DEEPSPEED = "deepspeed"  # DeepSpeed ZeRO data parallel (optionally DeepSpeed's pipeline engine)
    MEGATRON = "megatron"  # Megatron-LM / megatron-core: TP, PP, CP, DDP or distributed optimizer
    MEGATRON_DEEPSPEED = "megatron-deepspeed"  # the hybrid: Megatron TP/PP with DeepSpeed ZeRO over data parallel


class Precision(_StrEnum):
    """Training precision of parameters and activations.

    ``fp8`` is FP8 training as Transformer Engine does it under Megatron-LM (``--bf16 --fp8-format hybrid
    --transformer-impl transformer_engine``): bf16 weights, activations and non-GEMM work, fp32 main gradients,
    master weights and Adam states as in bf16 training; the transformer layers' linear GEMMs run in FP8 on FP8
    copies of their inputs and weights (:class:`Fp8Recipe` says how they are scaled)."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8 = "fp8"

    @property
    def bytes_per_value(self) -> int:
        """Bytes of a weight or activation value outside the FP8 GEMMs (FP8 training keeps them in bf16)."""
        return 4 if self is Precision.FP32 else 2

    @property
    def is_fp8(self) -> bool:
        return self is Precision.FP8

    @property
    def base(self) -> "Precision":
        """The 16-bit precision everything but the FP8 GEMMs runs in (bf16 under FP8; itself otherwise)."""
        return Precision.BF16 if self is Precision.FP8 else self


class Fp8Recipe(_StrEnum):
    """Transformer Engine's FP8 scaling recipe, as Megatron-LM's ``--fp8-recipe`` names it:

    * ``delayed`` — one scale per tensor from an amax history of past steps (``DelayedScaling``; Megatron's default,
      Hopper and later);
    * ``tensorwise`` — one scale per tensor from the current tensor's amax (``Float8CurrentScaling``);
    * ``blockwise`` — 1×128 tiles of activations and gradients and 128×128 blocks of weights, one fp32 scale each
      (``Float8BlockScaling``, DeepSeek-V3's recipe; Hopper);
    * ``mxfp8`` — 32-element blocks with an 8-bit power-of-two scale (``MXFP8BlockScaling``; Blackwell only)."""

    DELAYED = "delayed"
    TENSORWISE = "tensorwise"
    BLOCKWISE = "blockwise"
    MXFP8 = "mxfp8"


class Offload(_StrEnum):
    """Where DeepSpeed ZeRO-Offload / ZeRO-Infinity keeps offloaded tensors."""

    NONE = "none"
    CPU = "cpu"
    NVME = "nvme"


class Activation(_StrEnum):
    GELU = "gelu"
    SWIGLU = "swiglu"


class Normalization(_StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Positions(_StrEnum):
    LEARNED = "learned"
    ROTARY = "rotary"


class AttentionImpl(_StrEnum):
    """The attention kernel the training stack runs, named after what users set:

    * ``unfused`` — softmax in torch over the materialised s×s scores, in fp32 (megatron-core's local layer spec
      without Transformer Engine, Megatron ``--attention-backend unfused`` without ``--masked-softmax-fusion``,
      Hugging Face ``attn_implementation="eager"``);
    * ``fused-softmax`` — Megatron-LM's fused scale-mask-softmax CUDA kernel (``--masked-softmax-fusion``, on by
      default in Megatron-LM): the s×s scores still exist but the softmax is one 16-bit kernel;
    * ``flash`` — FlashAttention: Transformer Engine's fused attention (``--attention-backend flash|fused|auto``,
      ``--use-flash-attn``), PyTorch SDPA (Hugging Face ``"sdpa"``/``"flash_attention_2"``); no s×s tensor.

    Old spellings are still accepted: ``fused``/``fused_softmax`` (= ``fused-softmax``), ``sdpa``/``te``
    (= ``flash``), ``eager``/``local`` (= ``unfused``)."""

    UNFUSED = "unfused"
    FUSED_SOFTMAX = "fused-softmax"
    FLASH = "flash"

    @classmethod
    def _aliases(cls) -> dict:
        return _ATTENTION_ALIASES

    @property
    def materialises_scores(self) -> bool:
        """Whether the s×s score matrix exists (unfused and fused-softmax)."""
        return self is not AttentionImpl.FLASH


_ATTENTION_ALIASES = {"fused": "fused-softmax", "fused_softmax": "fused-softmax", "softmax-fusion": "fused-softmax",
                      "sdpa": "flash", "te": "flash", "flash_attention_2": "flash", "flash-attn": "flash",
                      "eager": "unfused", "local": "unfused"}


class AdamImpl(_StrEnum):
    """The optimizer kernel on the GPU: ``fused`` — a fused multi-tensor Adam (Apex/Transformer Engine ``FusedAdam``
    under Megatron-LM, DeepSpeed's ``FusedAdam`` op, ``torch.optim.AdamW(fused=True)``); ``torch`` —
    ``torch.optim.AdamW`` with its default foreach implementation (megatron-core without Apex/TE, DeepSpeed
    ``"torch_adam": true``). With optimizer offload DeepSpeed runs its CPU Adam whatever this says."""

    FUSED = "fused"
    TORCH = "torch"


class MoEDispatcher(_StrEnum):
    """megatron-core's MoE token dispatcher (``--moe-token-dispatcher-type``): ``alltoall`` — each rank permutes its
    tokens and exchanges them with the expert-parallel group in one all-to-all (then all-gathers them over the
    expert-tensor-parallel group); ``allgather`` — every rank all-gathers the hidden states of the whole
    tensor×expert-parallel group and keeps the tokens of its own experts (megatron-core's default)."""

    ALLTOALL = "alltoall"
    ALLGATHER = "allgather"


class MoERecompute(_StrEnum):
    """What selective recompute also recomputes in MoE layers (Megatron ``--recompute-modules``, megatron-core 0.16
    ``TransformerConfig.recompute_modules``, with ``core_attn``): ``none``; ``moe_act`` — the experts' activation
    (``TEGroupedMLP``/``GroupedMLP``: output-discarding ``CheckpointWithoutOutput`` around the activation, needs the
    grouped GEMM); ``moe`` — the whole MoE layer, router, dispatch all-to-all, experts and combine
    (``MoELayer.forward`` under ``tensor_parallel.checkpoint``)."""

    NONE = "none"
    MOE_ACT = "moe_act"
    MOE = "moe"


MOE_RECOMPUTE_CODES = {MoERecompute.NONE: 0, MoERecompute.MOE_ACT: 1, MoERecompute.MOE: 2}


class CrossEntropyFusion(_StrEnum):
    """Which cross-entropy kernels megatron-core runs for the language-model loss
    (``LanguageModule.compute_language_model_loss``, models/common/language_module/language_module.py):

    * ``none`` — the unfused ``tensor_parallel.vocab_parallel_cross_entropy``: the 16-bit logits cast to fp32, the
      fp32 softmax built in place and kept for backward (Megatron-LM without ``--cross-entropy-loss-fusion``);
    * ``native`` — ``--cross-entropy-loss-fusion --cross-entropy-fusion-impl native``: megatron-core's
      ``fused_vocab_parallel_cross_entropy`` (fusions/fused_cross_entropy.py), the same tensors in fewer, compiled
      element-wise kernels (``jit_fuser``);
    * ``te`` — ``--cross-entropy-fusion-impl te``: Transformer Engine's ``parallel_cross_entropy`` (Triton kernels,
      transformer_engine/pytorch/triton/cross_entropy.py), an online softmax that keeps only the 16-bit logits and
      writes the gradient over them in place.

    See :func:`workbench.memory.megatron_loss_bytes_per_logit` and :func:`workbench.timing.cross_entropy_bytes`."""

    NONE = "none"
    NATIVE = "native"
    TE = "te"


CROSS_ENTROPY_FUSION_CODES = {CrossEntropyFusion.NONE: 0, CrossEntropyFusion.NATIVE: 1, CrossEntropyFusion.TE: 2}


class CPCommType(_StrEnum):
    """How context-parallel ranks exchange keys and values inside attention (megatron-core
    ``TransformerConfig.cp_comm_type``, Megatron-LM ``--cp-comm-type``, passed to Transformer Engine's
    ``DotProductAttention``):

    * ``p2p`` — ring attention: each rank passes its K/V chunk to the next rank in c − 1 steps, each send overlapped
      with the attention of the chunk already received (the default);
    * ``a2a`` — DeepSpeed-Ulysses style: all-to-all of Q, K and V turns "all heads, s/c tokens" into "heads/c, all
      tokens" before attention and back after it; heads (and query groups) per TP rank must divide by c;
    * ``all_gather`` — all-gather the whole sequence's K/V before attention, reduce-scatter their gradients after
      (Llama 3, arXiv 2407.21783 §3.3.2); not overlapped. Megatron's help text spells it ``allgather``, Transformer
      Engine accepts ``all_gather``;
    * ``a2a+p2p`` — hierarchical: all-to-all inside the first of ``hierarchical_context_parallel_sizes`` (inner,
      e.g. NVLink), ring P2P across the second."""

    P2P = "p2p"
    A2A = "a2a"
    ALL_GATHER = "all_gather"
    A2A_P2P = "a2a+p2p"

    @classmethod
    def _aliases(cls) -> dict:
        return {"allgather": "all_gather", "all-gather": "all_gather", "ulysses": "a2a", "ring": "p2p"}


class ExpertsImpl(_StrEnum):
    """How transformers 5 runs a Mixtral / Qwen2-MoE / Qwen3-MoE layer's experts (``config._experts_implementation``,
    ``from_config(..., experts_implementation=...)``; transformers/integrations/moe.py ``ExpertsInterface``):

    * ``grouped_mm`` — ``grouped_mm_experts_forward``: the routed copies sorted by expert, two
      ``torch._grouped_mm`` GEMMs over all experts at once (transformers' default where torch has ``_grouped_mm``;
      every measured MoE run used it);
    * ``eager`` — the experts class's own ``forward``: a Python loop over the experts hit, per expert a gather of its
      tokens, two ``F.linear`` on ``gate_up_proj[e]`` and ``down_proj[e]``, the weighting and an ``index_add_``.

    transformers 5.24 also registers ``batched_mm``, ``deepgemm`` and ``sonicmoe``; they are refused as not
    modelled. Which implementation ran is the model config's ``_experts_implementation`` after loading (the corpus
    records it as ``experts_implementation_used``)."""

    GROUPED_MM = "grouped_mm"
    EAGER = "eager"

    @classmethod
    def parse(cls, value, field_name: str):
        if isinstance(value, str) and value.strip().lower() in _UNMODELLED_EXPERTS:
            raise ValueError(f"{field_name}={value!r}: transformers has it, but the workbench models only "
                             f"{', '.join(m.value for m in cls)}")
        return super().parse(value, field_name)


_UNMODELLED_EXPERTS = ("batched_mm", "deepgemm", "sonicmoe")


class Implementation(_StrEnum):
    """Which code builds the model: megatron-core's ``GPTModel`` or a Hugging Face ``transformers`` causal LM."""

    MEGATRON = "megatron"
    TRANSFORMERS = "transformers"


LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
"""Projections a LoRA adapter can sit on: query, key, value, attention output, and the MLP's gate, up (fc1) and
down (fc2) projections (peft's ``q_proj`` … ``down_proj``; ``gate`` exists only in gated MLPs)."""


# Upper bounds far beyond any real transformer or cluster. They keep every product the memory and time models
# form inside 64-bit integers and finite floats, so absurd input gets a clear error instead of an overflow.
ZERO_SIZE_STAGES = {"reduce_bucket_size": 1, "prefetch_bucket_size": 3, "param_persistence_threshold": 3,
                    "sub_group_size": 3}
"""DeepSpeed's ZeRO sizes a :class:`ParallelPlan` may set (fields of those names, in elements), each with the least
ZeRO stage that reads it; DeepSpeed's defaults are :data:`workbench.defaults.DEEPSPEED_ZERO_SIZES`."""

MAX_COUNT = {
    "num_layers": 10_000, "hidden_size": 2**20, "num_attention_heads": 2**16, "num_query_groups": 2**16,
    "head_dim": 2**16, "ffn_hidden_size": 2**22, "moe_ffn_hidden_size": 2**22, "vocab_size": 2**24,
    "seq_length": 2**26, "num_experts": 2**14, "moe_top_k": 2**14, "shared_expert_ffn_hidden_size": 2**22,
    "max_position_embeddings": 2**26, "lora_rank": 2**16,
    "gpus_per_node": 1024, "num_nodes": 2**24,
    "host_cpu_cores_per_node": 2**16, "world_size": 2**34, "tensor_parallel": 2**16, "pipeline_parallel": 2**14,
    "virtual_pipeline": 2**14, "context_parallel": 2**16, "expert_parallel": 2**14, "expert_tensor_parallel": 2**16,
    "micro_batch_size": 2**16, "global_batch_size": 2**40, "recompute_layers": 10_000, "bucket_elements": 2**40,
}
"""Largest value accepted for each integer field."""

MAX_FLOAT = {
    "memory_gib": 2.0**20, "hbm_gb_per_s": 1e7, "intra_node_gb_per_s": 1e7, "inter_node_gb_per_s": 1e7,
    "host_link_gb_per_s": 1e7, "host_memory_gib_per_node": 2.0**30, "nvme_gib_per_node": 2.0**40,
    "nvme_read_gb_per_s": 1e5, "nvme_write_gb_per_s": 1e5,
    "peak_tflops": 1e9,
}
"""Largest value accepted for each real-valued field (GiB, GB/s, TFLOP/s)."""

MIN_FLOAT = {
    "memory_gib": 2.0**-10, "hbm_gb_per_s": 1e-3, "intra_node_gb_per_s": 1e-3, "inter_node_gb_per_s": 1e-3,
    "host_link_gb_per_s": 1e-3, "peak_tflops": 1e-3, "nvme_read_gb_per_s": 1e-3, "nvme_write_gb_per_s": 1e-3,
}
"""Smallest positive value accepted for a GPU's memory, a link's bandwidth or a peak rate (1 MiB, 1 MB/s, 1 GFLOP/s):
below these the step times and capacities run to hundreds of digits and mean nothing."""

NVME_READ_GB_PER_S = 6.0
NVME_WRITE_GB_PER_S = 3.0
"""A node's NVMe read and write rates through DeepSpeed's async_io, GB/s, when none is given: an assumption for a node
with one PCIe 4.0 NVMe drive, whose ×4 link carries at most 7.9 GB/s (16 GT/s per lane, 128b/130b encoding), with
writes at about half the reads. Not a measurement of any node: give yours (``--nvme-read-gbps`` /
``--nvme-write-gbps``, measured with ``benchmarks/nvme_bandwidth.py``); the advisor says when an NVMe plan is priced
with these."""


def check_int(name: str, value, *, minimum: int = 1, maximum: Optional[int] = None) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``; ``ValueError`` naming ``name`` otherwise. Booleans, floats
    (``2.7`` and also ``2.0``) and strings are refused rather than converted."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}={value!r} must be an integer")
    value = int(value)
    if maximum is None:
        maximum = MAX_COUNT.get(name)
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}={value} is larger than the largest supported value {maximum:,}")
    return value


def check_float(name: str, value, *, minimum: float = 0.0, strict: bool = True,
                maximum: Optional[float] = None, below: Optional[float] = None) -> float:
    """``value`` as a finite ``float`` above ``minimum`` (``>`` when ``strict``, else ``>=``) and at most
    ``maximum`` (or strictly ``below``); ``ValueError`` naming ``name`` for NaN, infinities, booleans and non-numbers."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} must be a finite number")
    if strict and value <= minimum:
        raise ValueError(f"{name}={value:g} must be > {minimum:g}")
    if not strict and value < minimum:
        raise ValueError(f"{name}={value:g} must be >= {minimum:g}")
    if value < MIN_FLOAT.get(name, -math.inf) and not (value == 0 and not strict):
        raise ValueError(f"{name}={value:g} is smaller than the smallest supported value {MIN_FLOAT[name]:g}")
    if maximum is None:
        maximum = MAX_FLOAT.get(name)
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}={value:g} is larger than the largest supported value {maximum:g}")
    if below is not None and value >= below:
        raise ValueError(f"{name}={value:g} must be < {below:g}")
    return value


def check_bool(name: str, value) -> bool:
    """``value`` as a ``bool``; ``ValueError`` naming ``name`` for anything else (``2``, ``"yes"``, ``None``)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name}={value!r} must be True or False")


def check_str(name: str, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} must be a string")
    return value


def _positive_int(obj, *names: str) -> None:
    for name in names:
        _set(obj, name, check_int(name, getattr(obj, name)))


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer as megatron-core's ``GPTModel`` builds it."""

    name: str = "custom"
    """Display name (catalog key for catalog models)."""
    num_layers: int
    """Transformer layers L."""
    hidden_size: int
    """Model width h."""
    num_attention_heads: int
    """Attention heads a."""
    num_query_groups: Optional[int] = None
    """Key/value heads for grouped-query attention (GQA); ``None`` means multi-head attention (= heads)."""
    head_dim: Optional[int] = None
    """Per-head width (Megatron ``--kv-channels``); ``None`` means hidden_size / num_attention_heads."""
    ffn_hidden_size: Optional[int] = None
    """MLP inner width; ``None`` means 4h for GeLU and Llama's round(8h/3, 256) for SwiGLU."""
    vocab_size: int = 50257
    """Tokenizer vocabulary V (before Megatron pads it to a multiple of 128·tp)."""
    seq_length: int = 2048
    """Training sequence length s in tokens."""
    activation: Activation = Activation.GELU
    """MLP activation: ``gelu`` (two matrices) or ``swiglu`` (three matrices)."""
    normalization: Normalization = Normalization.LAYERNORM
    """LayerNorm (weight and bias) or RMSNorm (weight only)."""
    add_bias_linear: bool = True
    """Linear layers carry biases (GPT-3/Megatron default) or not (Llama, Mistral)."""
    tied_embeddings: bool = True
    """The output layer shares the input embedding matrix (Megatron default) or has its own."""
    position_embedding: Positions = Positions.LEARNED
    """Learned absolute position table (s·h parameters) or rotary (no parameters)."""
    attention: AttentionImpl = AttentionImpl.UNFUSED
    """Attention kernel of the training stack (:class:`AttentionImpl`: ``unfused``, ``fused-softmax``, ``flash``).
    It lives on the model because the code that builds the model picks it (megatron-core's layer spec, Hugging
    Face's ``attn_implementation``); catalog presets say how those models are trained, ``--attention`` overrides.
    unfused keeps the s×s scores in fp32 and 16 bits, fused-softmax in 16 bits, flash keeps none."""
    hidden_dropout: float = 0.1
    """Dropout after attention and MLP (megatron-core default 0.1); when > 0 its 1-byte masks are kept."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities (megatron-core default 0.1); with unfused attention its mask and output
    are kept (the 5·a·s/h term of Korthikanti et al. 2022 becomes 2·a·s/h without it)."""
    num_experts: Optional[int] = None
    """Mixture-of-experts: experts per MoE layer (``None`` for a dense model)."""
    moe_top_k: int = 2
    """Experts each token is routed to."""
    moe_ffn_hidden_size: Optional[int] = None
    """Expert MLP width; ``None`` means ffn_hidden_size."""
    shared_expert_ffn_hidden_size: Optional[int] = None
    """MoE with an always-on shared expert (Qwen2-MoE): its MLP width; it comes with a bias-free h→1 sigmoid gate.
    ``None``: no shared expert."""
    qkv_bias: Optional[bool] = None
    """Biases on the query/key/value projections; ``None`` follows ``add_bias_linear`` (Qwen2 has them while its
    other linear layers have none)."""
    qk_norm: bool = False
    """A norm over each query and key head (head_dim weights each; Qwen3, Gemma 3)."""
    sandwich_norm: bool = False
    """Extra norms on the attention and MLP outputs, four per layer (Gemma 2 and 3)."""
    post_norm: bool = False
    """The layer's two norms follow the attention and the MLP, on their outputs before each residual sum, and none
    precede them (OLMo 2 and 3: ``post_attention_layernorm``, ``post_feedforward_layernorm``); transformers models
    only."""
    qk_norm_projection: bool = False
    """With ``qk_norm``: each of the two norms spans the whole query or key projection (a·d and g·d weights, OLMo 2
    and 3) rather than one head (d weights, Qwen3, Gemma 3); transformers models only."""
    max_position_embeddings: Optional[int] = None
    """Rows of the learned position table (GPT-2's ``n_positions``); ``None`` means seq_length. Only used with
    learned positions, where seq_length may not exceed it."""
    implementation: Implementation = Implementation.MEGATRON
    """The code that builds and runs the model: ``megatron`` (megatron-core GPTModel: vocabulary padded to 128·t,
    vocab-parallel cross entropy) or ``transformers`` (a Hugging Face model: exact vocabulary, the logits up-cast to
    fp32 for ``ForCausalLMLoss``, eager attention keeping fp32 softmax and 16-bit probabilities)."""
    experts_implementation: Optional[ExpertsImpl] = None
    """transformers MoE models only: how the experts run (:class:`ExpertsImpl`, transformers'
    ``experts_implementation``): ``grouped_mm`` or ``eager``. ``None`` is transformers' default, ``grouped_mm`` (set
    on a transformers MoE model, left ``None`` on others); naming one on a dense or megatron-core model is refused."""
    fused_projections: bool = False
    """transformers models whose attention and gated MLP each hold ONE fused linear (Phi-3: ``qkv_proj`` [q+2kv, h]
    and ``gate_up_proj`` [2f, h] beside ``o_proj`` and ``down_proj``) instead of Llama's seven; the same parameters,
    fewer modules and tensors (ZeRO-3 fetches, ZeRO-2 gradient hooks). Needs a dense, gated, RMSNorm transformers
    model."""
    gelu_unfused: Optional[bool] = None
    """A transformers model's GELU runs op by op (transformers' ``gelu_new``/``gelu_fast``: ``NewGELUActivation``,
    ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``), each op keeping its input: three f-wide tensors a layer more
    than one fused ``F.gelu`` (``gelu``, ``gelu_pytorch_tanh``). ``None``: GPT-2's default, ``gelu_new``, for a
    transformers model with learned positions, else fused; :func:`workbench.hf.import_hf` reads it from the
    config's ``activation_function``."""
    separate_qkv: bool = False
    """transformers LayerNorm models that keep ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` apart (StarCoder2,
    transformers/models/starcoder2) where GPT-2 (``c_attn``) and GPT-NeoX (``query_key_value``) fuse q, k and v into
    one projection: the same parameters, more modules and tensors. Needs a dense LayerNorm transformers model."""
    sliding_window: Optional[int] = None
    """transformers models whose layers (``sliding_window_layers`` of them) attend over a sliding window of this
    many tokens, as sdpa runs them (``sliding_window`` and ``layer_types`` of the config: Mistral, Gemma 2/3,
    StarCoder2, OLMo 3, ...). Attention FLOPs are still counted as full causal attention; what the window changes is
    memory: once the sequence reaches the window transformers hands each such layer a boolean mask, which sdpa turns
    into a bias kept for the backward (:func:`workbench.memory.sliding_window_bias_bytes`). ``None``: no window, or a
    kernel that applies the window itself (``flash_attention_2/3``: :func:`workbench.hf.import_hf` leaves it
    ``None``)."""
    sliding_window_layers: Optional[int] = None
    """How many of the ``num_layers`` layers use ``sliding_window`` (``None`` with a window: every layer, as
    Mistral's; Gemma 3: five of every six). Changing ``num_layers`` with :meth:`replace` keeps the share."""

    def __post_init__(self) -> None:
        for name, enum_cls in (("activation", Activation), ("normalization", Normalization),
                               ("position_embedding", Positions), ("attention", AttentionImpl),
                               ("implementation", Implementation)):
            _set(self, name, enum_cls.parse(getattr(self, name), name))
        check_str("name", self.name)
        _positive_int(self, "num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length")
        for name in ("hidden_dropout", "attention_dropout"):
            _set(self, name, check_float(name, getattr(self, name), strict=False, below=1.0))
        for name in ("add_bias_linear", "tied_embeddings", "qk_norm", "sandwich_norm", "post_norm",
                     "qk_norm_projection"):
            _set(self, name, check_bool(name, getattr(self, name)))
        if self.qk_norm_projection and not self.qk_norm:
            raise ValueError("qk_norm_projection=True sizes the query/key norms; it needs qk_norm=True")
        if self.post_norm and self.sandwich_norm:
            raise ValueError("post_norm=True and sandwich_norm=True: a layer has its norms after attention and MLP "
                             "only (OLMo 2) or before and after them (Gemma 2/3), not both")
        if self.num_query_groups is None:
            _set(self, "num_query_groups", self.num_attention_heads)
        _positive_int(self, "num_query_groups")
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError(f"num_query_groups={self.num_query_groups} does not divide "
                             f"num_attention_heads={self.num_attention_heads}")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"num_attention_heads={self.num_attention_heads} does not divide "
                                 f"hidden_size={self.hidden_size}; set head_dim explicitly")
            _set(self, "head_dim", self.hidden_size // self.num_attention_heads)
        _positive_int(self, "head_dim")
        if self.ffn_hidden_size is None:
            if self.activation is Activation.SWIGLU:
                ffn = int(8 * self.hidden_size / 3)
                ffn = 256 * ((ffn + 255) // 256)
            else:
                ffn = 4 * self.hidden_size
            _set(self, "ffn_hidden_size", ffn)
        _positive_int(self, "ffn_hidden_size")
        _set(self, "qkv_bias", bool(self.add_bias_linear) if self.qkv_bias is None
             else check_bool("qkv_bias", self.qkv_bias))
        if self.max_position_embeddings is not None:
            _positive_int(self, "max_position_embeddings")
            if self.position_embedding is Positions.LEARNED and self.seq_length > self.max_position_embeddings:
                raise ValueError(f"seq_length={self.seq_length} exceeds max_position_embeddings="
                                 f"{self.max_position_embeddings} (the learned position table)")
        if self.shared_expert_ffn_hidden_size is not None:
            _positive_int(self, "shared_expert_ffn_hidden_size")
            if self.num_experts is None:
                raise ValueError(f"shared_expert_ffn_hidden_size={self.shared_expert_ffn_hidden_size} needs "
                                 f"num_experts (a mixture-of-experts model)")
        _positive_int(self, "moe_top_k")
        if self.num_experts is not None:
            _positive_int(self, "num_experts")
            if self.moe_top_k > self.num_experts:
                raise ValueError(f"moe_top_k={self.moe_top_k} exceeds num_experts={self.num_experts}")
            if self.moe_ffn_hidden_size is None:
                _set(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
            _positive_int(self, "moe_ffn_hidden_size")
        self._check_transformers_stack()
        self._check_sliding_window()

    def _check_transformers_stack(self) -> None:
        """``experts_implementation``, ``fused_projections`` and ``separate_qkv`` against the model (run after the
        sizes)."""
        _set(self, "fused_projections", check_bool("fused_projections", self.fused_projections))
        _set(self, "separate_qkv", check_bool("separate_qkv", self.separate_qkv))
        hf_gelu = self.implementation is Implementation.TRANSFORMERS and self.activation is Activation.GELU
        if self.gelu_unfused is None:
            _set(self, "gelu_unfused", hf_gelu and self.position_embedding is Positions.LEARNED)
        elif check_bool("gelu_unfused", self.gelu_unfused) and not hf_gelu:
            raise ValueError(f"gelu_unfused=True (transformers' op-by-op gelu_new) needs a transformers model with "
                             f"activation='gelu'; got implementation='{self.implementation}', "
                             f"activation='{self.activation}'")
        if self.separate_qkv and (self.implementation is not Implementation.TRANSFORMERS
                                  or self.num_experts is not None
                                  or self.normalization is not Normalization.LAYERNORM):
            raise ValueError(f"separate_qkv=True (StarCoder2's q_proj, k_proj, v_proj beside LayerNorm) needs a dense "
                             f"LayerNorm transformers model; got implementation='{self.implementation}', "
                             f"num_experts={self.num_experts}, normalization='{self.normalization}'")
        hf_moe = self.implementation is Implementation.TRANSFORMERS and self.num_experts is not None
        if self.experts_implementation is None:
            if hf_moe:
                _set(self, "experts_implementation", ExpertsImpl.GROUPED_MM)
        else:
            impl = ExpertsImpl.parse(self.experts_implementation, "experts_implementation")
            if not hf_moe:
                what = ("a dense model (num_experts=None)" if self.num_experts is None
                        else f"a {self.implementation} model")
                raise ValueError(f"experts_implementation='{impl}' is transformers' MoE experts setting "
                                 f"(config._experts_implementation); {self.name} is {what}: it needs "
                                 f"implementation='transformers' and num_experts")
            _set(self, "experts_implementation", impl)
        olmo = [f"{name}=True" for name in ("post_norm", "qk_norm_projection") if getattr(self, name)]
        if olmo and self.implementation is not Implementation.TRANSFORMERS:
            raise ValueError(f"{' and '.join(olmo)} (OLMo 2's layer) needs implementation='transformers'; "
                             f"megatron-core's layer puts its norms before attention and MLP and norms q and k "
                             f"per head (--qk-layernorm)")
        if self.fused_projections and (self.implementation is not Implementation.TRANSFORMERS
                                       or self.num_experts is not None or self.activation is not Activation.SWIGLU
                                       or self.normalization is not Normalization.RMSNORM):
            raise ValueError(f"fused_projections=True (Phi-3's qkv_proj and gate_up_proj) needs a dense, gated, "
                             f"RMSNorm transformers model; got implementation='{self.implementation}', num_experts="
                             f"{self.num_experts}, activation='{self.activation}', normalization="
                             f"'{self.normalization}'")

    def _check_sliding_window(self) -> None:
        """``sliding_window`` a positive token count on a transformers model, ``sliding_window_layers`` (default
        every layer) between 1 and ``num_layers``, and no layer count without a window."""
        if self.sliding_window is None:
            if self.sliding_window_layers is not None:
                raise ValueError(f"sliding_window_layers={self.sliding_window_layers} without a sliding_window "
                                 f"(give the window in tokens)")
            return
        _positive_int(self, "sliding_window")
        if self.implementation is not Implementation.TRANSFORMERS:
            raise ValueError(f"sliding_window={self.sliding_window} is a transformers model's setting (its sdpa "
                             f"mask); implementation='{self.implementation}' trains full causal attention")
        if self.sliding_window_layers is None:
            _set(self, "sliding_window_layers", self.num_layers)
        _positive_int(self, "sliding_window_layers")
        if self.sliding_window_layers > self.num_layers:
            raise ValueError(f"sliding_window_layers={self.sliding_window_layers} exceeds num_layers="
                             f"{self.num_layers}")

    # -- derived sizes -------------------------------------------------------------------------------------------
    @property
    def query_projection_size(self) -> int:
        """Width of the concatenated query heads, a·d."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_projection_size(self) -> int:
        """Width of the key (or value) heads, g·d."""
        return self.num_query_groups * self.head_dim

    @property
    def position_table_size(self) -> int:
        """Rows of the learned position table (0 with rotary positions)."""
        if self.position_embedding is not Positions.LEARNED:
            return 0
        return self.max_position_embeddings or self.seq_length

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def is_gated(self) -> bool:
        return self.activation is Activation.SWIGLU

    def replace(self, **changes) -> "ModelSpec":
        """A copy with some fields changed (re-validated); derived defaults are recomputed when their inputs change.
        A new ``num_layers`` keeps the share of sliding-window layers (rounded, at least one); ``sliding_window=None``
        drops their count too."""
        if "sliding_window" in changes and changes["sliding_window"] is None:
            changes = {"sliding_window_layers": None, **changes}
        if ("num_layers" in changes and "sliding_window_layers" not in changes and self.sliding_window is not None
                and changes.get("sliding_window", self.sliding_window) is not None
                and self.sliding_window_layers != self.num_layers and isinstance(changes["num_layers"], int)):
            share = self.sliding_window_layers / self.num_layers
            changes = {**changes, "sliding_window_layers": max(1, round(share * changes["num_layers"]))}
        return _replace_with_defaults(self, changes, derived=("num_query_groups", "head_dim", "ffn_hidden_size",
                                                              "moe_ffn_hidden_size", "qkv_bias",
                                                              "experts_implementation", "gelu_unfused",
                                                              "sliding_window_layers"))

    # -- parameter counts (megatron-core GPTModel, local layer spec) ---------------------------------------------
    def parameter_counts(self) -> "ParameterCounts":
        from workbench.params import parameter_counts

        return parameter_counts(self)

    @property
    def num_parameters(self) -> int:
        return self.parameter_counts().total


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterCounts:
    """Parameter counts by component, as megatron-core's GPTModel holds them (unpadded vocabulary)."""

    embedding: int
    """Word embedding V·h plus the learned position table s·h when present."""
    attention_per_layer: int
    """The attention block of one layer: its norm, QKV and output projections with biases."""
    mlp_per_layer: int
    """The MLP block of one layer with its norm (router and all experts for MoE)."""
    final_norm: int
    """The final LayerNorm/RMSNorm."""
    output: int
    """The untied output layer V·h (0 when tied)."""
    num_layers: int
    """Transformer layers."""
    active_mlp_per_layer: int
    """MLP parameters one token passes through (top-k experts for MoE; = mlp_per_layer when dense)."""

    @property
    def per_layer(self) -> int:
        return self.attention_per_layer + self.mlp_per_layer

    @property
    def total(self) -> int:
        return self.embedding + self.num_layers * self.per_layer + self.final_norm + self.output

    @property
    def active(self) -> int:
        """Parameters used per token (differs from total only for MoE)."""
        return (self.embedding + self.num_layers * (self.attention_per_layer + self.active_mlp_per_layer)
                + self.final_norm + self.output)


def _replace_with_defaults(obj, changes: dict, derived: tuple):
    """``dataclasses.replace`` that recomputes derived fields still at their default for the old inputs."""
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    for k in derived:
        if k in changes:
            continue
        try:
            at_default = getattr(type(obj)(**{**values, k: None}), k) == values[k]
        except ValueError:  # no default exists for the old inputs (e.g. head_dim when h % a != 0): keep it
            at_default = False
        if at_default:
            values[k] = None
    return type(obj)(**{**values, **changes})


# ----------------------------------------------------------------------------------------------------------------
# Hardware
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator model, as a catalog entry (``workbench/catalog/gpus/*.json``)."""

    name: str
    """Catalog key, e.g. ``H100-SXM``."""
    vendor: str
    """``nvidia`` or ``amd``."""
    memory_gib: float
    """Device memory the framework can allocate from, GiB (nvidia-smi total where known)."""
    peak_tflops: dict
    """Dense (non-sparse) tensor-core peak TFLOP/s by precision: ``bf16``, ``fp16``, ``tf32``, ``fp8``, ``fp32``
    (0 or missing when unsupported)."""
    hbm_gb_per_s: float
    """Device memory bandwidth, GB/s."""
    intra_node_gb_per_s: float
    """Per-GPU unidirectional bandwidth to peers in the node (NVLink / Infinity Fabric / PCIe), GB/s."""
    inter_node_gb_per_s: float
    """Typical per-GPU network bandwidth between nodes in clusters built on this GPU, GB/s."""
    host_link_gb_per_s: float
    """Host↔device link (PCIe) unidirectional bandwidth, GB/s — what ZeRO-Offload traffic crosses."""
    source: str
    """Where the numbers come from (datasheet)."""
    notes: str = ""

    def __post_init__(self) -> None:
        for name in ("name", "vendor", "source", "notes"):
            check_str(name, getattr(self, name))
        for name in ("memory_gib", "hbm_gb_per_s", "intra_node_gb_per_s", "inter_node_gb_per_s",
                     "host_link_gb_per_s"):
            _set(self, name, check_float(name, getattr(self, name)))
        if not isinstance(self.peak_tflops, dict):
            raise ValueError(f"peak_tflops={self.peak_tflops!r} must be a mapping of precision to TFLOP/s")
        peaks = {}
        for key, value in self.peak_tflops.items():
            peaks[str(key)] = 0.0 if value is None else check_float(f"peak_tflops[{key!r}]", value, strict=False,
                                                                      maximum=MAX_FLOAT["peak_tflops"])
        _set(self, "peak_tflops", peaks)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    def peak_flops(self, precision: "Precision | str") -> float:
        """Dense peak FLOP/s for the precision (fp32 training uses TF32 tensor cores where present)."""
        p = str(precision)
        key = "tf32" if p == "fp32" else p
        tflops = self.peak_tflops.get(key) or 0.0
        if not tflops and p == "fp32":
            tflops = self.peak_tflops.get("fp32") or 0.0
        if not tflops:
            raise ValueError(f"precision={p} is not supported by gpu={self.name}")
        return tflops * 1e12


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """The machines a job runs on: identical nodes of identical GPUs."""

    gpu: GPUSpec
    """The accelerator (a catalog entry; use :func:`workbench.catalog.gpu` to look one up by name)."""
    gpus_per_node: int = 8
    """GPUs in one node."""
    num_nodes: int = 1
    """Nodes."""
    intra_node_gb_per_s: Optional[float] = None
    """Per-GPU bandwidth inside a node, GB/s; ``None`` takes the catalog's value."""
    inter_node_gb_per_s: Optional[float] = None
    """Per-GPU bandwidth between nodes, GB/s; ``None`` takes the catalog's value."""
    host_memory_gib_per_node: float = 1024.0
    """CPU memory per node, GiB (bounds ZeRO-Offload)."""
    nvme_gib_per_node: float = 0.0
    """Local NVMe capacity per node for ZeRO-Infinity, GiB (0: none)."""
    nvme_read_gb_per_s: float = NVME_READ_GB_PER_S
    """Read rate of a node's NVMe through DeepSpeed's async_io, GB/s, shared by the node's ranks (ZeRO-Infinity's
    swaps; default :data:`NVME_READ_GB_PER_S`, measure yours with ``benchmarks/nvme_bandwidth.py``)."""
    nvme_write_gb_per_s: float = NVME_WRITE_GB_PER_S
    """Write rate of a node's NVMe, GB/s (default :data:`NVME_WRITE_GB_PER_S`)."""
    host_cpu_cores_per_node: int = 112
    """CPU cores per node (default: an 8-GPU DGX H100/H200 node's two 56-core Xeon 8480C, NVIDIA DGX H100 datasheet).
    With optimizer offload, each rank's CPU Adam shares them."""
    cpu_adam_threads: int = 0
    """Threads each rank's CPU optimizer runs on (``OMP_NUM_THREADS`` of the rank; optimizer offload only).
    0: the node's cores shared by its GPUs, ``host_cpu_cores_per_node // gpus_per_node``, which ``workbench run``
    sets; ``torchrun`` alone sets 1, about 3x slower."""

    def __post_init__(self) -> None:
        if isinstance(self.gpu, str):
            from workbench.catalog import gpu as lookup

            _set(self, "gpu", lookup(self.gpu))
        if not isinstance(self.gpu, GPUSpec):
            raise ValueError(f"gpu={self.gpu!r} must be a GPU name such as 'H100-SXM' or a GPUSpec "
                             f"(got {type(self.gpu).__name__})")
        _positive_int(self, "gpus_per_node", "num_nodes", "host_cpu_cores_per_node")
        _set(self, "cpu_adam_threads", check_int("cpu_adam_threads", self.cpu_adam_threads, minimum=0,
                                                 maximum=4096))
        if self.intra_node_gb_per_s is None:
            _set(self, "intra_node_gb_per_s", float(self.gpu.intra_node_gb_per_s))
        if self.inter_node_gb_per_s is None:
            _set(self, "inter_node_gb_per_s", float(self.gpu.inter_node_gb_per_s))
        for name in ("intra_node_gb_per_s", "inter_node_gb_per_s", "host_memory_gib_per_node"):
            _set(self, name, check_float(name, getattr(self, name)))
        _set(self, "nvme_gib_per_node", check_float("nvme_gib_per_node", self.nvme_gib_per_node, strict=False))
        for name in ("nvme_read_gb_per_s", "nvme_write_gb_per_s"):
            _set(self, name, check_float(name, getattr(self, name)))
        if self.world_size > MAX_COUNT["world_size"]:
            raise ValueError(f"gpus_per_node({self.gpus_per_node}) * num_nodes({self.num_nodes}) = "
                             f"{self.world_size:,} GPUs is larger than the largest supported world size "
                             f"{MAX_COUNT['world_size']:,}")

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def nvme_rates_assumed(self) -> bool:
        """Whether the NVMe rates are the assumed defaults (:data:`NVME_READ_GB_PER_S`, :data:`NVME_WRITE_GB_PER_S`)
        rather than the node's own."""
        return (self.nvme_read_gb_per_s, self.nvme_write_gb_per_s) == (NVME_READ_GB_PER_S, NVME_WRITE_GB_PER_S)

    @property
    def cpu_adam_threads_per_rank(self) -> int:
        """Threads of each rank's CPU optimizer: ``cpu_adam_threads``, or the node's cores shared by its GPUs."""
        return self.cpu_adam_threads or max(1, self.host_cpu_cores_per_node // self.gpus_per_node)

    def replace(self, **changes) -> "ClusterSpec":
        return dataclasses.replace(self, **changes)


# ----------------------------------------------------------------------------------------------------------------
# Parallel plan
# ----------------------------------------------------------------------------------------------------------------

NO_PIPELINE = dict(pipeline_parallel=1, virtual_pipeline=1, first_stage_layers=None, last_stage_layers=None,
                   embedding_in_pipeline_split=False, loss_in_pipeline_split=False)
"""The :class:`ParallelPlan` fields of a plan folded onto one pipeline stage (``plan.replace(**NO_PIPELINE)``):
no pipeline, no interleaving, and none of the uneven-stage settings, which need more than one stage."""

@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelPlan:
    """How the job is split over GPUs and which memory savers are on.

    Data parallel is derived: ``world_size ÷ (tensor_parallel · pipeline_parallel · context_parallel)``.
    Gradient accumulation is derived: ``global_batch_size ÷ (micro_batch_size · data_parallel)``.
    """

    world_size: int
    """GPUs in the job (normally the cluster's ``gpus_per_node × num_nodes``)."""
    engine: Engine = Engine.DEEPSPEED
    """Framework: ``deepspeed``, ``megatron`` or the hybrid ``megatron-deepspeed``."""
    tensor_parallel: int = 1
    """Megatron tensor-model-parallel size t."""
    pipeline_parallel: int = 1
    """Pipeline-model-parallel size p."""
    virtual_pipeline: int = 1
    """Model chunks per pipeline rank v (interleaved 1F1B when > 1)."""
    context_parallel: int = 1
    """Context-parallel size c (Megatron ``--context-parallel-size``): every layer sees s/c tokens per rank, split
    into 2c chunks so causal attention work is balanced; attention exchanges K/V as ``cp_comm_type`` says."""
    cp_comm_type: CPCommType = CPCommType.P2P
    """Megatron ``--cp-comm-type``: ``p2p`` (ring, default), ``a2a`` (Ulysses), ``all_gather`` or ``a2a+p2p``
    (:class:`CPCommType`)."""
    hierarchical_context_parallel_sizes: Optional[tuple] = None
    """With ``cp_comm_type='a2a+p2p'``: ``(a2a_size, p2p_size)``, their product = context_parallel (Megatron
    ``--hierarchical-context-parallel-sizes``; the all-to-all group is the inner one, consecutive CP ranks)."""
    ulysses: int = 1
    """DeepSpeed-Ulysses sequence-parallel size N (ds_config ``sequence_parallel_size``; the model's attention wrapped
    in ``deepspeed.sequence.layer.DistributedAttention``, or ``UlyssesSPAttentionHF`` for a Hugging Face model), engine
    ``deepspeed`` only: each rank keeps s/N tokens for the whole layer, and an all-to-all of Q, K, V before attention
    and of its output after turns "all heads, s/N tokens" into "heads/N, all tokens"; ZeRO shards over all the ranks
    (DeepSpeed's sequence-data-parallel group). The plan then has ``context_parallel=N`` with ``cp_comm_type='a2a'``:
    the models price it as that all-to-all (:attr:`is_ulysses`)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism inside the TP group (needs tensor_parallel > 1)."""
    zero_stage: ZeroStage = ZeroStage.NONE
    """DeepSpeed ZeRO stage 0-3 (engines ``deepspeed`` and ``megatron-deepspeed``)."""
    offload_optimizer: Offload = Offload.NONE
    """ZeRO-Offload of optimizer states (and fp32 master weights): ``none``, ``cpu`` or ``nvme``."""
    offload_params: Offload = Offload.NONE
    """ZeRO-3 parameter offload (ZeRO-Infinity): ``none``, ``cpu`` or ``nvme``."""
    distributed_optimizer: bool = False
    """Megatron distributed optimizer (shards fp32 master weights and Adam states over data parallel)."""
    recompute: Recompute = Recompute.NONE
    """Activation recomputation: ``none``, ``selective`` (attention core only) or ``full`` (layer inputs only)."""
    recompute_layers: Optional[int] = None
    """With full recompute: how many layers per pipeline stage are recomputed (``None`` = all)."""
    micro_batch_size: int = 1
    """Sequences per GPU per forward/backward (``train_micro_batch_size_per_gpu``)."""
    global_batch_size: Optional[int] = None
    """Sequences per optimizer step over the whole job; ``None`` means micro_batch_size × data_parallel."""
    precision: Precision = Precision.BF16
    """Training precision."""
    lora_rank: int = 0
    """LoRA adapters of this rank on ``lora_targets`` with every base weight frozen (0: full fine-tune). Frozen
    weights stay in 16 bits without gradients or optimizer states; ZeRO-3 still partitions them, ZeRO-1/2 only
    partition what trains (DeepSpeed builds its flat groups from ``requires_grad`` parameters)."""
    lora_targets: tuple = LORA_TARGETS
    """Projections carrying adapters (a subset of :data:`LORA_TARGETS`; default all of them, peft's
    ``"all-linear"``)."""
    lora_dropout: float = 0.0
    """peft's ``lora_dropout`` (default 0): above 0 every adapter keeps a dropped copy of its input and the mask."""
    adam: AdamImpl = AdamImpl.FUSED
    """GPU optimizer kernel: ``fused`` (Apex/TE or DeepSpeed ``FusedAdam``) or ``torch`` (``torch.optim.AdamW``,
    foreach; what megatron-core without Apex/TE and ``workbench.runs.launch`` train with). CPU Adam follows from
    ``offload_optimizer``."""
    overlap_comm: Optional[bool] = None
    """Gradient reduction overlapped with backward: DeepSpeed ``zero_optimization.overlap_comm``, Megatron
    ``--overlap-grad-reduce`` (megatron-core ``DistributedDataParallelConfig.overlap_grad_reduce``). ``None``: the
    engine's default as the workbench configures it, :func:`default_overlap_comm` (on for DeepSpeed, off for
    Megatron)."""
    zero_init: Optional[bool] = None
    """DeepSpeed ZeRO-3: the model is built inside ``deepspeed.zero.Init``, each module's parameters partitioned as
    it is made (what transformers does in ``from_pretrained``/``from_config`` while a ZeRO-3 ``HfDeepSpeedConfig`` or
    the Trainer's ``TrainingArguments(deepspeed=...)`` is alive, and what ``workbench run`` does for a transformers
    model); ``False``: the whole model is built on the GPU first and partitioned by ``deepspeed.initialize`` (a plain
    script's ``from_config`` on the device). ``None``: :func:`builds_in_zero_init` (on for transformers models at
    ZeRO-3, off otherwise). It changes what the allocator has cached when training starts, so the whole-device peak
    the allocator replay finds."""
    expandable_segments: bool = False
    """The training processes run with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``: PyTorch's caching
    allocator grows one segment per stream by mapping more physical pages instead of cutting new fixed-size segments,
    so less memory stays reserved above the allocated peak (:data:`workbench.memory.RESERVE_FRACTION_EXPANDABLE`).
    ``False``: PyTorch's default allocator. Allocated memory and step time are the same either way."""
    pin_memory: bool = True
    """DeepSpeed CPU offload: the host buffers page-locked (``"pin_memory"`` in ``zero_optimization.offload_optimizer``
    / ``offload_param``; DeepSpeed's default). ``False``: pageable buffers at their own sizes (less host memory,
    :func:`workbench.memory.host_resident_bytes`) whose copies to and from the GPU the driver stages through its own
    page-locked memory, at the host's pageable copy rate (:func:`workbench.timing.optimizer_terms`). Nothing changes
    without offload."""
    reduce_bucket_size: Optional[int] = None
    """DeepSpeed ``zero_optimization.reduce_bucket_size``, in elements: the contiguous bucket ZeRO-1/2 gather
    gradients in before each reduction (two with ``overlap_comm``) and ZeRO-3's reduce bucket, allocated whole in the
    model dtype. ``None``: DeepSpeed's default, 5e8 (:data:`workbench.defaults.DEEPSPEED_REDUCE_BUCKET_ELEMENTS`).
    The Hugging Face Trainer and accelerate resolve ``"auto"`` to hidden_size²
    (:func:`workbench.configs.deepspeed.hf_auto_zero_sizes`)."""
    prefetch_bucket_size: Optional[int] = None
    """DeepSpeed ZeRO-3 ``stage3_prefetch_bucket_size``, in elements: how many parameters the coordinator gathers
    ahead of the module that needs them. ``None``: DeepSpeed's default, 5e7; ``"auto"``: 0.9 x hidden_size²."""
    param_persistence_threshold: Optional[int] = None
    """DeepSpeed ZeRO-3 ``stage3_param_persistence_threshold``, in elements: a parameter of at most this many
    elements is never partitioned (kept whole on every rank, fetched by no hook). ``None``: DeepSpeed's default,
    1e5; ``"auto"``: 10 x hidden_size (LoRA adapters of rank r on a width h, r·h elements, then fetched from
    r = 11)."""
    sub_group_size: Optional[int] = None
    """DeepSpeed ZeRO-3 ``zero_optimization.sub_group_size``, in elements: the optimizer steps a rank's partition one
    sub-group at a time (``stage3.py`` ``_create_fp16_sub_groups`` closes a sub-group at the first parameter that
    takes it to this size), so the step's flat fp32 gradient on the GPU, and with offload the host's per-sub-group
    buffers (NVMe: the swapper's page-locked buffers of the largest sub-group), scale with it. ``None``: DeepSpeed's
    default, 1e9; 0 makes each parameter its own sub-group."""
    grad_reduce_fp32: Optional[bool] = None
    """Engine ``megatron``: accumulate and reduce the main gradients in fp32 (4 bytes per parameter) or in the
    16-bit model dtype. ``None``: Megatron-LM's default — fp32 with bf16 (``--bf16`` turns
    ``--accumulate-allreduce-grads-in-fp32`` on, megatron/training/arguments.py, unless ``--grad-reduce-in-bf16``),
    16-bit with fp16. ``False`` is megatron-core's ``DistributedDataParallelConfig(grad_reduce_in_fp32=False)``, what
    NVIDIA's Megatron-Bridge and NeMo performance recipes set; with 16-bit main gradients the optimizer builds its
    fp32 gradient copy at the step (Megatron-LM's fp16 path)."""
    first_stage_layers: Optional[int] = None
    """Transformer layers on the first pipeline stage (Megatron ``--decoder-first-pipeline-num-layers``,
    ``TransformerConfig.num_layers_in_first_pipeline_stage``); ``None``: an even share. See
    :func:`pipeline_stage_layers`."""
    last_stage_layers: Optional[int] = None
    """Transformer layers on the last pipeline stage (``--decoder-last-pipeline-num-layers``); ``None``: an even
    share."""
    embedding_in_pipeline_split: bool = False
    """Megatron ``--account-for-embedding-in-pipeline-split``: the embedding counts as one layer of the split, so
    the first stage builds one transformer layer fewer."""
    loss_in_pipeline_split: bool = False
    """Megatron ``--account-for-loss-in-pipeline-split``: the output layer and loss count as one layer of the split,
    so the last stage builds one transformer layer fewer."""
    fp8_recipe: Fp8Recipe = Fp8Recipe.DELAYED
    """With ``precision='fp8'``: Transformer Engine's scaling recipe (Megatron-LM ``--fp8-recipe``, default
    ``delayed``); ignored otherwise."""
    fp8_param_gather: bool = False
    """With ``precision='fp8'``: keep the linear weights only in FP8 (no bf16 copy) and all-gather them in FP8
    after the optimizer step (Megatron-LM ``--fp8-param-gather``; needs the distributed optimizer)."""
    fp8_bf16_first_layers: int = 0
    """With ``precision='fp8'``: transformer layers at the start of the model kept in bf16 (Megatron-LM
    ``--first-last-layers-bf16 --num-layers-at-start-in-bf16 N``; not with the delayed recipe)."""
    fp8_bf16_last_layers: int = 0
    """Layers at the end kept in bf16 (``--num-layers-at-end-in-bf16 N``)."""
    expert_parallel: int = 1
    """Expert-model-parallel size e (Megatron ``--expert-model-parallel-size``): each MoE layer's experts are split
    over e ranks, num_experts / e on each, and tokens travel to their experts by all-to-all (or all-gather). Needs an
    MoE model and engine ``megatron``; e must divide num_experts and tp_e·e·p the world size."""
    expert_tensor_parallel: Optional[int] = None
    """Expert-tensor-parallel size (``--expert-tensor-parallel-size``): how many ranks split one expert's weights;
    ``None``: the dense tensor-parallel size, as megatron-core defaults it. See :attr:`expert_tensor_parallel_size`."""
    moe_capacity_factor: Optional[float] = None
    """``--moe-expert-capacity-factor``: each expert takes at most factor × (tokens·top-k / experts) tokens and drops
    the rest; ``None``: dropless (every routed token is computed)."""
    moe_pad_to_capacity: bool = False
    """``--moe-pad-expert-input-to-capacity``: every expert's input is padded to its capacity (fixed shapes: compute
    and all-to-all volume grow by the capacity factor). Needs ``moe_capacity_factor``."""
    moe_load_imbalance: float = 1.0
    """Routing load imbalance: the busiest expert-parallel rank's routed token copies over the average rank's
    (max / mean, >= 1; 1: balanced routing, the default). Megatron has no such flag — it is what the router does,
    readable from its tokens-per-expert counts — so it is an assumption of the estimate, not a setting. It scales that
    rank's expert activations, permutation buffers, expert GEMMs and all-to-all volume (every rank waits for the
    busiest), capped by what routing can do (:func:`workbench.encode.moe_rank_load`) and by the capacity factor when
    tokens above it are dropped. No effect with expert_parallel 1 (one rank holds every expert) or when expert inputs
    are padded to capacity (megatron-core's pad, DeepSpeed-MoE)."""
    moe_recompute: MoERecompute = MoERecompute.NONE
    """MoE modules selective recompute also recomputes (Megatron ``--recompute-modules core_attn moe_act`` or
    ``... moe``; see :class:`MoERecompute`): ``moe_act`` keeps only fc1's output of each routed copy (its activation
    and fc2 input are recomputed in the backward), ``moe`` keeps nothing of the MoE block but its input and runs its
    forward — router, all-to-alls, expert GEMMs — again in the backward. Needs recompute='selective', an MoE model and
    engine 'megatron'."""
    moe_token_dispatcher: MoEDispatcher = MoEDispatcher.ALLTOALL
    """``--moe-token-dispatcher-type``: ``alltoall`` (the workbench's default, what expert-parallel recipes use) or
    ``allgather`` (megatron-core's own default; an imported command line without the flag gets it)."""
    moe_overlap_alltoall: bool = False
    """Megatron ``--overlap-moe-expert-parallel-comm`` (megatron-core ``overlap_moe_expert_parallel_comm``, the
    combined 1F1B schedule): one micro-batch's dispatch/combine all-to-alls run while another micro-batch computes,
    so only what outlasts that compute is exposed. Needs expert_parallel > 1, the alltoall dispatcher, no full
    recompute, and interleaving (virtual_pipeline > 1) with pipeline parallel."""
    tp_comm_overlap: bool = False
    """Transformer Engine's tensor-parallel communication overlap (Megatron-LM ``--tp-comm-overlap``, megatron-core
    ``ModelParallelConfig.tp_comm_overlap``): each sequence-parallel all-gather / reduce-scatter runs inside the
    linear GEMM it feeds or follows, through userbuffers that ``transformer_engine.pytorch.module.base.initialize_ub``
    allocates outside PyTorch's allocator (:func:`workbench.memory.userbuffer_bytes`), so only what outlasts its GEMM
    is exposed (:func:`workbench.timing.tp_overlap_exposed_seconds`). Needs tensor_parallel > 1, sequence parallel
    and engine ``megatron`` (Megatron-LM: 'Tensor parallel communication/GEMM overlap can happen only when sequence
    parallelism is enabled')."""
    cross_entropy_fusion: CrossEntropyFusion = CrossEntropyFusion.NONE
    """Megatron's loss kernels (:class:`CrossEntropyFusion`): ``none`` (the unfused vocab-parallel cross entropy,
    Megatron-LM's default), ``native`` (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl native``) or
    ``te`` (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``, what NVIDIA's Megatron-Bridge
    performance recipes run). Engine ``megatron`` only: DeepSpeed engines and Hugging Face models compute their
    own loss."""
    fused_kernels: Optional[bool] = None
    """Deprecated: ``fused_kernels=False`` is ``adam='torch'`` (and the unfused softmax is
    ``ModelSpec.attention='unfused'``); ``True`` is ``adam='fused'``. Read back as ``None``."""

    def __post_init__(self) -> None:
        if self.fused_kernels is not None:
            fused = check_bool("fused_kernels", self.fused_kernels)
            warnings.warn("ParallelPlan(fused_kernels=...) is deprecated: use adam='fused'|'torch' (and "
                          "ModelSpec.attention='unfused'|'fused-softmax'|'flash' for the softmax)",
                          DeprecationWarning, stacklevel=3)
            _set(self, "adam", AdamImpl.FUSED if fused else AdamImpl.TORCH)
            _set(self, "fused_kernels", None)
        for name in ("sequence_parallel", "distributed_optimizer", "embedding_in_pipeline_split",
                     "loss_in_pipeline_split", "moe_pad_to_capacity", "expandable_segments", "pin_memory"):
            _set(self, name, check_bool(name, getattr(self, name)))
        if self.overlap_comm is not None:
            _set(self, "overlap_comm", check_bool("overlap_comm", self.overlap_comm))
        if self.zero_init is not None:
            _set(self, "zero_init", check_bool("zero_init", self.zero_init))
        for name, enum_cls in (("engine", Engine), ("recompute", Recompute), ("precision", Precision),
                               ("offload_optimizer", Offload), ("offload_params", Offload), ("adam", AdamImpl),
                               ("cp_comm_type", CPCommType), ("fp8_recipe", Fp8Recipe),
                               ("moe_token_dispatcher", MoEDispatcher), ("moe_recompute", MoERecompute),
                               ("cross_entropy_fusion", CrossEntropyFusion)):
            _set(self, name, enum_cls.parse(getattr(self, name), name))
        if (isinstance(self.zero_stage, (bool, np.bool_)) or not isinstance(self.zero_stage, numbers.Integral)
                or not 0 <= int(self.zero_stage) <= 3):
            raise ValueError(f"zero_stage={self.zero_stage!r} must be 0, 1, 2 or 3")
        _set(self, "zero_stage", ZeroStage(int(self.zero_stage)))
        _positive_int(self, "world_size", "tensor_parallel", "pipeline_parallel", "virtual_pipeline",
                      "context_parallel", "micro_batch_size", "ulysses")
        self._check_ulysses()
        model_parallel = self.tensor_parallel * self.pipeline_parallel * self.context_parallel
        if self.world_size % model_parallel:
            raise ValueError(
                f"tensor_parallel({self.tensor_parallel}) * pipeline_parallel({self.pipeline_parallel}) * "
                f"context_parallel({self.context_parallel}) = {model_parallel} does not divide "
                f"world_size={self.world_size}")
        dp = self.world_size // model_parallel
        if self.global_batch_size is None:
            _set(self, "global_batch_size", self.micro_batch_size * dp)
        _positive_int(self, "global_batch_size")
        if self.global_batch_size % (self.micro_batch_size * dp):
            raise ValueError(
                f"global_batch_size={self.global_batch_size} is not divisible by micro_batch_size("
                f"{self.micro_batch_size}) * data_parallel({dp}) = {self.micro_batch_size * dp}")
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise ValueError("sequence_parallel=True needs tensor_parallel > 1 (got tensor_parallel=1)")
        if self.virtual_pipeline > 1 and self.pipeline_parallel == 1:
            raise ValueError(f"virtual_pipeline={self.virtual_pipeline} needs pipeline_parallel > 1 "
                             f"(got pipeline_parallel=1)")
        if self.recompute_layers is not None:
            _positive_int(self, "recompute_layers")
            if self.recompute is not Recompute.FULL:
                raise ValueError(f"recompute_layers={self.recompute_layers} needs recompute='full' "
                                 f"(got recompute='{self.recompute}')")
        for name in ("first_stage_layers", "last_stage_layers"):
            if getattr(self, name) is not None:
                _positive_int(self, name)
        self._check_stage_split()
        self._check_context_parallel()
        self._check_lora()
        self._check_engine()
        self._check_buckets()
        self._check_fp8()
        self._check_experts()
        self._check_tp_comm_overlap()

    def _check_buckets(self) -> None:
        """DeepSpeed's ZeRO sizes: whole numbers of elements (the persistence threshold and the sub-group size may
        be 0), set only where DeepSpeed reads them (a ZeRO stage on a DeepSpeed engine; the stage-3 sizes at
        ZeRO-3)."""
        for name, stage in ZERO_SIZE_STAGES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, float) and value.is_integer():  # 5e8 as DeepSpeed configs write it
                value = int(value)
            least = 1 if name == "reduce_bucket_size" else 0  # (DeepSpeed: reduce_bucket_size > 0, the others >= 0)
            _set(self, name, check_int(name, value, minimum=least, maximum=MAX_COUNT["bucket_elements"]))
            if self.engine is Engine.MEGATRON:
                raise ValueError(f"{name}={value} is DeepSpeed's zero_optimization setting; engine='megatron' "
                                 f"buckets its gradients with --ddp-bucket-size (leave {name} None)")
            if int(self.zero_stage) < stage:
                raise ValueError(f"{name}={value} needs zero_stage >= {stage} (DeepSpeed reads it only there; got "
                                 f"zero_stage={int(self.zero_stage)})")

    def zero_size(self, name: str) -> int:
        """The ZeRO size ``name`` (one of :data:`ZERO_SIZE_STAGES`) the plan runs with: its own, else DeepSpeed's
        default."""
        from workbench.defaults import DEEPSPEED_ZERO_SIZES

        value = getattr(self, name)
        return DEEPSPEED_ZERO_SIZES[name] if value is None else value

    @property
    def reduce_bucket_elements(self) -> int:
        """:attr:`reduce_bucket_size`, DeepSpeed's default where the plan leaves it."""
        return self.zero_size("reduce_bucket_size")

    @property
    def prefetch_bucket_elements(self) -> int:
        """:attr:`prefetch_bucket_size`, DeepSpeed's default where the plan leaves it."""
        return self.zero_size("prefetch_bucket_size")

    @property
    def persistence_threshold(self) -> int:
        """:attr:`param_persistence_threshold`, DeepSpeed's default where the plan leaves it."""
        return self.zero_size("param_persistence_threshold")

    @property
    def sub_group_elements(self) -> int:
        """:attr:`sub_group_size`, DeepSpeed's default where the plan leaves it."""
        return self.zero_size("sub_group_size")

    def _check_tp_comm_overlap(self) -> None:
        _set(self, "tp_comm_overlap", check_bool("tp_comm_overlap", self.tp_comm_overlap))
        if not self.tp_comm_overlap:
            return
        if self.engine is not Engine.MEGATRON or self.tensor_parallel == 1 or not self.sequence_parallel:
            raise ValueError(f"tp_comm_overlap=True needs engine='megatron', tensor_parallel > 1 and "
                             f"sequence_parallel=True (Transformer Engine userbuffers overlap the sequence-parallel "
                             f"all-gather/reduce-scatter with the TP GEMMs; got engine='{self.engine}', "
                             f"tensor_parallel={self.tensor_parallel}, sequence_parallel={self.sequence_parallel})")

    def _check_fp8(self) -> None:
        _set(self, "fp8_param_gather", check_bool("fp8_param_gather", self.fp8_param_gather))
        for name in ("fp8_bf16_first_layers", "fp8_bf16_last_layers"):
            _set(self, name, check_int(name, getattr(self, name), minimum=0, maximum=MAX_COUNT["recompute_layers"]))
        bf16_layers = self.fp8_bf16_first_layers + self.fp8_bf16_last_layers
        if not self.precision.is_fp8:
            if self.fp8_param_gather or bf16_layers:
                raise ValueError(f"fp8_param_gather={self.fp8_param_gather}, fp8_bf16_first_layers="
                                 f"{self.fp8_bf16_first_layers}, fp8_bf16_last_layers={self.fp8_bf16_last_layers} "
                                 f"need precision='fp8' (got precision='{self.precision}')")
            return
        if self.engine is not Engine.MEGATRON:
            raise ValueError(f"precision='fp8' is modelled as Megatron-LM trains it with Transformer Engine (engine="
                             f"'megatron'); got engine='{self.engine}' (DeepSpeed has no FP8 training mode of its own; "
                             f"FP8 under DeepSpeed comes from the model's layers — Transformer Engine through Hugging "
                             f"Face Accelerate, or MS-AMP — and is not modelled)")
        if self.fp8_param_gather and not self.distributed_optimizer:
            raise ValueError("fp8_param_gather=True needs distributed_optimizer=True (Megatron-LM: '--fp8-param-gather "
                             "only supported with distributed optimizer')")
        if bf16_layers and self.fp8_recipe is Fp8Recipe.DELAYED:
            raise ValueError(f"fp8_bf16_first_layers={self.fp8_bf16_first_layers}, fp8_bf16_last_layers="
                             f"{self.fp8_bf16_last_layers} cannot be used with fp8_recipe='delayed' (megatron-core: "
                             f"'Delayed scaling does not support first / last layer in BF16')")


    def _check_experts(self) -> None:
        """Expert-parallel rules megatron-core and Megatron-LM enforce that need only the plan (those that need the
        model are in :func:`validate`)."""
        _positive_int(self, "expert_parallel")
        if self.expert_tensor_parallel is not None:
            _positive_int(self, "expert_tensor_parallel")
        if self.moe_capacity_factor is not None:
            _set(self, "moe_capacity_factor", check_float("moe_capacity_factor", self.moe_capacity_factor,
                                                          maximum=float(MAX_COUNT["num_experts"])))
        _set(self, "moe_load_imbalance", check_float("moe_load_imbalance", self.moe_load_imbalance, minimum=1.0,
                                                     strict=False, maximum=float(MAX_COUNT["num_experts"])))
        if self.moe_recompute is not MoERecompute.NONE and (self.recompute is not Recompute.SELECTIVE
                                                            or self.engine is not Engine.MEGATRON):
            raise ValueError(f"moe_recompute='{self.moe_recompute}' needs recompute='selective' and engine='megatron' "
                             f"(Megatron's --recompute-modules apply under --recompute-granularity selective; got "
                             f"recompute='{self.recompute}', engine='{self.engine}')")
        if self.moe_pad_to_capacity and self.moe_capacity_factor is None:
            raise ValueError("moe_pad_to_capacity=True needs moe_capacity_factor (megatron-core: "
                             "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity)")
        e, te = self.expert_parallel, self.expert_tensor_parallel_size
        if self.engine is not Engine.MEGATRON:
            self._check_deepspeed_moe()
            return
        block = te * e * self.pipeline_parallel
        if self.world_size % block:
            raise ValueError(f"expert_tensor_parallel({te}) * expert_parallel({e}) * pipeline_parallel("
                             f"{self.pipeline_parallel}) = {block} does not divide world_size={self.world_size} "
                             f"(megatron-core's expert rank generator)")
        _set(self, "moe_overlap_alltoall", check_bool("moe_overlap_alltoall", self.moe_overlap_alltoall))
        if self.moe_overlap_alltoall:
            why = ("expert_parallel > 1" if e == 1 else
                   "moe_token_dispatcher='alltoall'" if self.moe_token_dispatcher is not MoEDispatcher.ALLTOALL else
                   "recompute other than 'full'" if self.recompute is Recompute.FULL else
                   "virtual_pipeline > 1 with pipeline_parallel > 1"
                   if self.pipeline_parallel > 1 and self.virtual_pipeline == 1 else "")
            if why:
                raise ValueError(f"moe_overlap_alltoall=True needs {why} (megatron-core's checks for "
                                 f"overlap_moe_expert_parallel_comm; got expert_parallel={e}, moe_token_dispatcher="
                                 f"'{self.moe_token_dispatcher}', recompute='{self.recompute}', pipeline_parallel="
                                 f"{self.pipeline_parallel}, virtual_pipeline={self.virtual_pipeline})")
        if e > 1 and self.tensor_parallel > 1 and not self.sequence_parallel:
            raise ValueError(f"expert_parallel={e} with tensor_parallel={self.tensor_parallel} needs "
                             f"sequence_parallel=True (Megatron-LM: 'When using expert parallelism and tensor "
                             f"parallelism, sequence parallelism must be used')")

    def _check_deepspeed_moe(self) -> None:
        """What DeepSpeed 0.19.8 refuses for ``deepspeed.moe.layer.MoE`` (see :attr:`deepspeed_moe`): its knobs are
        ep_size, k, capacity_factor, min_capacity, drop_tokens — no expert tensor parallelism in the modelled
        layout and no overlap schedule. Megatron's ``moe_token_dispatcher`` and ``moe_pad_to_capacity`` do not apply
        (DeepSpeed-MoE dispatches by all-to-all and always pads to capacity) and are ignored."""
        e = self.expert_parallel
        megatron_only = {"expert_tensor_parallel": (self.expert_tensor_parallel, None),
                         "moe_overlap_alltoall": (self.moe_overlap_alltoall, False)}
        for name, (value, default) in megatron_only.items():
            if value != default:
                raise ValueError(f"{name}={value!r} is Megatron's (--expert-tensor-parallel-size, "
                                 f"--overlap-moe-expert-parallel-comm); engine='{self.engine}' trains MoE with "
                                 f"deepspeed.moe.layer.MoE (ep_size, capacity_factor; experts whole on each rank): "
                                 f"leave {name}={default!r}")
        if not self.deepspeed_moe:
            return
        if self.zero_stage == ZeroStage.PARAMETERS:
            raise ValueError(f"zero_stage=3 with DeepSpeed-MoE (expert_parallel={e}, moe_capacity_factor="
                             f"{self.moe_capacity_factor}): DeepSpeed 0.19.8 refuses it ('Native DeepSpeed MoE is "
                             f"not supported with ZeRO Stage 3'); use zero_stage 1 or 2")
        if self.tensor_parallel > 1:
            raise ValueError(f"expert_parallel={e} with tensor_parallel={self.tensor_parallel} under engine="
                             f"'{self.engine}': DeepSpeed-MoE is modelled without tensor parallelism (its MoE layer "
                             f"builds expert groups of consecutive ranks unless the model passes an mpu and "
                             f"enable_expert_tensor_parallelism); use tensor_parallel=1 or engine='megatron'")
        stride = self.world_size // self.pipeline_parallel
        if stride % e:
            raise ValueError(f"expert_parallel={e} does not divide world_size({self.world_size}) / pipeline_parallel("
                             f"{self.pipeline_parallel}) = {stride} (DeepSpeed: groups._create_expert_and_data_parallel"
                             f" needs the ranks of one pipeline stage divisible by ep_size)")

    @property
    def deepspeed_moe(self) -> bool:
        """MoE layers are DeepSpeed-MoE's ``deepspeed.moe.layer.MoE`` (capacity-padded, expert parallel over ep_size
        ranks): a DeepSpeed engine with ``expert_parallel > 1`` or a ``moe_capacity_factor``. Otherwise, under
        DeepSpeed, the model's own MoE block (e.g. transformers' dropless Mixtral block) keeps every expert on every
        rank. Meaningful only for an MoE model."""
        return self.engine is not Engine.MEGATRON and (self.expert_parallel > 1 or self.moe_capacity_factor is not None)

    @property
    def expert_tensor_parallel_size(self) -> int:
        """Ranks splitting one expert: ``expert_tensor_parallel``, or the dense tensor-parallel size when unset
        (DeepSpeed-MoE: 1, its experts are whole on each rank)."""
        if self.deepspeed_moe:
            return 1
        return self.expert_tensor_parallel if self.expert_tensor_parallel is not None else self.tensor_parallel

    @property
    def expert_data_parallel(self) -> int:
        """Expert-data-parallel size: world ÷ (expert TP · EP · PP), the group expert gradients are reduced over
        and the distributed optimizer shards expert states over (megatron-core ``expert_data_parallel_size``)."""
        return self.world_size // (self.expert_tensor_parallel_size * self.expert_parallel * self.pipeline_parallel)

    def _check_stage_split(self) -> None:
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        accounted = self.embedding_in_pipeline_split or self.loss_in_pipeline_split
        if (uneven or accounted) and self.pipeline_parallel == 1:
            raise ValueError(f"first_stage_layers={self.first_stage_layers}, last_stage_layers="
                             f"{self.last_stage_layers}, embedding_in_pipeline_split="
                             f"{self.embedding_in_pipeline_split}, loss_in_pipeline_split={self.loss_in_pipeline_split}"
                             f" shape pipeline stages and need pipeline_parallel > 1")
        if uneven and accounted:
            raise ValueError("first_stage_layers/last_stage_layers cannot be combined with embedding_in_pipeline_split"
                             "/loss_in_pipeline_split (megatron-core's TransformerConfig refuses both at once)")
        if uneven and self.engine is not Engine.MEGATRON:
            raise ValueError(f"first_stage_layers/last_stage_layers are Megatron's uneven pipeline split (engine="
                             f"'megatron'); engine='{self.engine}' splits layers evenly")
        if accounted and self.engine is not Engine.MEGATRON:
            raise ValueError(f"embedding_in_pipeline_split/loss_in_pipeline_split are Megatron's (engine='megatron');"
                             f" got engine='{self.engine}'")

    def _check_ulysses(self) -> None:
        """DeepSpeed-Ulysses (``ulysses`` = N) is stored as ``context_parallel=N, cp_comm_type='a2a'`` on engine
        ``deepspeed``; a DeepSpeed plan with ``context_parallel`` > 1 and the all-to-all is read as Ulysses."""
        n, c, e = self.ulysses, self.context_parallel, self.engine
        if n == 1 and not (e is Engine.DEEPSPEED and c > 1 and self.cp_comm_type is CPCommType.A2A):
            return
        if n == 1:  # engine deepspeed, context_parallel > 1 with the all-to-all: that is Ulysses
            n = c
            _set(self, "ulysses", c)
        if self.world_size % n:
            raise ValueError(f"ulysses={n} does not divide world_size={self.world_size} (DeepSpeed: world_size is "
                             f"not divisible by sequence_parallel_size)")
        if e is not Engine.DEEPSPEED:
            raise ValueError(f"ulysses={n} is DeepSpeed-Ulysses (ds_config sequence_parallel_size) and needs engine "
                             f"'deepspeed' (got engine='{e}'); Megatron's all-to-all context parallelism is "
                             f"context_parallel={n}, cp_comm_type='a2a' with engine 'megatron'")
        if c not in (1, n):
            raise ValueError(f"ulysses={n} and context_parallel={c}: DeepSpeed-Ulysses is the plan's context-parallel "
                             f"split (set one of them, or both to {n})")
        if self.cp_comm_type not in (CPCommType.P2P, CPCommType.A2A) or self.hierarchical_context_parallel_sizes:
            raise ValueError(f"ulysses={n}: DeepSpeed-Ulysses exchanges by all-to-all only (got cp_comm_type="
                             f"'{self.cp_comm_type}')")
        if self.pipeline_parallel > 1:
            raise ValueError(f"ulysses={n} with pipeline_parallel={self.pipeline_parallel}: DeepSpeed-Ulysses is "
                             f"modelled with ZeRO data parallel (pipeline_parallel=1)")
        if self.expert_parallel > 1:
            raise ValueError(f"ulysses={n} with expert_parallel={self.expert_parallel}: DeepSpeed-MoE under "
                             f"DeepSpeed-Ulysses is not modelled")
        _set(self, "context_parallel", n)
        _set(self, "cp_comm_type", CPCommType.A2A)

    @property
    def is_ulysses(self) -> bool:
        """Whether the plan's context-parallel split is DeepSpeed-Ulysses (engine ``deepspeed``)."""
        return self.ulysses > 1

    def _check_context_parallel(self) -> None:
        c, kind, sizes = self.context_parallel, self.cp_comm_type, self.hierarchical_context_parallel_sizes
        if c == 1 and sizes is None:  # no context parallelism: how it would communicate does not matter
            _set(self, "cp_comm_type", CPCommType.P2P)
            return
        if sizes is not None:
            if isinstance(sizes, str):
                sizes = sizes.replace(",", " ").split()
            try:
                sizes = tuple(check_int("hierarchical_context_parallel_sizes", int(x) if isinstance(x, str) else x)
                              for x in sizes)
            except (TypeError, ValueError):
                raise ValueError(f"hierarchical_context_parallel_sizes={self.hierarchical_context_parallel_sizes!r} "
                                 f"must be two positive integers (a2a size, p2p size)") from None
            _set(self, "hierarchical_context_parallel_sizes", sizes)
            if kind is not CPCommType.A2A_P2P:
                raise ValueError(f"hierarchical_context_parallel_sizes={list(sizes)} needs cp_comm_type='a2a+p2p' "
                                 f"(got cp_comm_type='{kind}')")
            if len(sizes) != 2 or math.prod(sizes) != c:
                got = (f"{len(sizes)} sizes" if len(sizes) != 2 else
                       f"{sizes[0]} × {sizes[1]} = {math.prod(sizes)}")
                raise ValueError(f"hierarchical_context_parallel_sizes={list(sizes)}: two sizes whose product is "
                                 f"context_parallel={c} (a2a size, p2p size); got {got}")
        elif kind is CPCommType.A2A_P2P:
            raise ValueError(f"cp_comm_type='a2a+p2p' needs hierarchical_context_parallel_sizes=(a2a, p2p) with "
                             f"a2a * p2p = context_parallel={c}")

    @property
    def cp_a2a_size(self) -> int:
        """Ranks of the all-to-all part of context parallelism: c for ``a2a``, the first hierarchical size for
        ``a2a+p2p``, 1 for ``p2p`` and ``all_gather``."""
        if self.cp_comm_type is CPCommType.A2A:
            return self.context_parallel
        if self.cp_comm_type is CPCommType.A2A_P2P:
            return self.hierarchical_context_parallel_sizes[0]
        return 1

    def stage_layers(self, num_layers: int) -> tuple:
        """Transformer layers on each pipeline stage for a model of ``num_layers`` (:func:`pipeline_stage_layers`)."""
        return pipeline_stage_layers(num_layers, self.pipeline_parallel, self.virtual_pipeline,
                                     first=self.first_stage_layers, last=self.last_stage_layers,
                                     embedding=self.embedding_in_pipeline_split, loss=self.loss_in_pipeline_split)

    @property
    def uneven_stages(self) -> bool:
        """Whether the plan sets Megatron's uneven split (first/last stage layers or the embedding/loss account)."""
        return (self.first_stage_layers is not None or self.last_stage_layers is not None
                or self.embedding_in_pipeline_split or self.loss_in_pipeline_split)

    def _check_lora(self) -> None:
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, numbers.Integral) \
                or not 0 <= self.lora_rank <= MAX_COUNT["lora_rank"]:
            raise ValueError(f"lora_rank={self.lora_rank!r} must be an integer in [0, {MAX_COUNT['lora_rank']}] "
                             f"(0: full fine-tune)")
        _set(self, "lora_rank", int(self.lora_rank))
        targets = self.lora_targets
        if isinstance(targets, str):
            targets = [t for t in targets.replace(",", " ").split() if t]
        try:
            targets = tuple(dict.fromkeys(str(t).lower() for t in targets))
        except TypeError:
            raise ValueError(f"lora_targets={self.lora_targets!r} must be a list of {', '.join(LORA_TARGETS)}") \
                from None
        unknown = [t for t in targets if t not in LORA_TARGETS]
        if unknown or not targets:
            raise ValueError(f"lora_targets={list(targets)!r}: {unknown[0] if unknown else 'empty'} is not one of "
                             f"{', '.join(LORA_TARGETS)}")
        _set(self, "lora_targets", tuple(t for t in LORA_TARGETS if t in targets))
        _set(self, "lora_dropout", check_float("lora_dropout", self.lora_dropout, strict=False, below=1.0))
        if self.lora_rank and self.engine is Engine.MEGATRON:
            raise ValueError(f"lora_rank={self.lora_rank} needs engine 'deepspeed' (LoRA is modelled for DeepSpeed "
                             f"and Hugging Face models; got engine='megatron')")

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0

    def _check_engine(self) -> None:
        e = self.engine
        if self.cross_entropy_fusion is not CrossEntropyFusion.NONE and e is not Engine.MEGATRON:
            raise ValueError(f"cross_entropy_fusion='{self.cross_entropy_fusion}' is megatron-core's fused loss "
                             f"(--cross-entropy-loss-fusion --cross-entropy-fusion-impl "
                             f"{self.cross_entropy_fusion}) and needs engine 'megatron'; engine='{e}' computes "
                             f"its own loss (leave it 'none')")
        if self.grad_reduce_fp32 is not None:
            _set(self, "grad_reduce_fp32", check_bool("grad_reduce_fp32", self.grad_reduce_fp32))
            if e is not Engine.MEGATRON:
                raise ValueError(f"grad_reduce_fp32={self.grad_reduce_fp32} is Megatron's main-gradient dtype "
                                 f"(--accumulate-allreduce-grads-in-fp32 / --grad-reduce-in-bf16); engine='{e}' "
                                 f"keeps 16-bit gradients and an fp32 partition (leave it None)")
        if e is Engine.MEGATRON:
            if self.zero_stage != ZeroStage.NONE:
                raise ValueError(f"zero_stage={int(self.zero_stage)} needs engine 'deepspeed' or "
                                 f"'megatron-deepspeed'; engine='megatron' shards with distributed_optimizer=True")
            if self.offload_optimizer is not Offload.NONE or self.offload_params is not Offload.NONE:
                raise ValueError("offload_optimizer/offload_params need a DeepSpeed engine (engine='megatron')")
        else:
            if self.distributed_optimizer:
                raise ValueError(f"distributed_optimizer=True is Megatron's; with engine='{e}' use zero_stage >= 1")
        if e is Engine.DEEPSPEED and self.context_parallel > 1 and self.tensor_parallel == 1 \
                and not self.sequence_parallel and not self.is_ulysses:
            raise ValueError(f"context_parallel={self.context_parallel} with engine 'deepspeed': DeepSpeed's sequence "
                             f"parallelism is Ulysses' all-to-all: set ulysses={self.context_parallel} (ds_config "
                             f"sequence_parallel_size), or engine 'megatron' for Megatron context parallelism")
        if e is Engine.DEEPSPEED:
            if self.tensor_parallel > 1 or (self.context_parallel > 1 and not self.is_ulysses) \
                    or self.sequence_parallel:
                raise ValueError(f"tensor_parallel={self.tensor_parallel}, context_parallel={self.context_parallel}"
                                 f", sequence_parallel={self.sequence_parallel} need engine 'megatron' or "
                                 f"'megatron-deepspeed' (engine='deepspeed' is data + pipeline parallel only)")
        if e is Engine.DEEPSPEED and self.virtual_pipeline > 1:
            raise ValueError(f"virtual_pipeline={self.virtual_pipeline} needs engine 'megatron' or "
                             f"'megatron-deepspeed': DeepSpeed's PipelineEngine runs one model chunk per stage (no "
                             f"interleaved schedule)")
        if e is Engine.MEGATRON_DEEPSPEED and self.context_parallel > 1:
            raise ValueError(f"context_parallel={self.context_parallel} needs engine 'megatron': Megatron-DeepSpeed has "
                             f"no Megatron context parallelism (DeepSpeed-Ulysses is modelled on engine 'deepspeed': "
                             f"ulysses=N)")
        if e is not Engine.MEGATRON and self.pipeline_parallel > 1 and self.zero_stage >= ZeroStage.GRADIENTS:
            raise ValueError(f"zero_stage={int(self.zero_stage)} cannot be combined with pipeline_parallel="
                             f"{self.pipeline_parallel}: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism "
                             f"(DeepSpeed's PipelineEngine asserts it); use zero_stage 0 or 1")
        if self.offload_params is not Offload.NONE and self.zero_stage != ZeroStage.PARAMETERS:
            raise ValueError(f"offload_params='{self.offload_params}' needs zero_stage=3 "
                             f"(got zero_stage={int(self.zero_stage)})")
        if self.offload_optimizer is not Offload.NONE and self.zero_stage == ZeroStage.NONE:
            raise ValueError(f"offload_optimizer='{self.offload_optimizer}' needs zero_stage >= 1 (got 0)")
        if self.zero_init and (e is Engine.MEGATRON or self.zero_stage != ZeroStage.PARAMETERS):
            raise ValueError(f"zero_init=True needs engine 'deepspeed' with zero_stage=3 (deepspeed.zero.Init "
                             f"partitions parameters for ZeRO-3 only; got engine '{e}', zero_stage="
                             f"{int(self.zero_stage)})")
        if self.zero_init is False and e is Engine.MEGATRON_DEEPSPEED and self.zero_stage == ZeroStage.PARAMETERS:
            raise ValueError("zero_init=False with engine 'megatron-deepspeed' at zero_stage=3: Megatron-DeepSpeed "
                             "always builds its model inside deepspeed.zero.Init at ZeRO-3 (pretrain_gpt.py "
                             "model_provider, enabled=args.zero_stage == 3)")

    # -- derived ------------------------------------------------------------------------------------------------
    @property
    def model_parallel_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def data_parallel(self) -> int:
        return self.world_size // self.model_parallel_size

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.data_parallel)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step per pipeline (= gradient accumulation steps)."""
        return self.gradient_accumulation_steps

    @property
    def reduces_grads_in_fp32(self) -> bool:
        """Megatron's main gradients in fp32: ``grad_reduce_fp32`` with ``None`` resolved to Megatron-LM's default
        (fp32 with bf16 and FP8's bf16 base, 16-bit with fp16); ``False`` for the DeepSpeed engines."""
        if self.grad_reduce_fp32 is not None:
            return self.grad_reduce_fp32
        return self.engine is Engine.MEGATRON and self.precision.base is Precision.BF16

    @property
    def offloads_to_cpu(self) -> bool:
        """Whether DeepSpeed keeps the optimizer or the parameters in CPU memory: the host buffers
        :attr:`pin_memory` makes page-locked or pageable. ZeRO-1/2 with the optimizer offloaded to ``nvme`` keep it
        in CPU memory too (they take device ``nvme`` as the CPU, :attr:`nvme_optimizer`)."""
        return self.engine is not Engine.MEGATRON and (self.optimizer_in_host_memory
                                                       or self.offload_params is Offload.CPU)

    @property
    def optimizer_in_host_memory(self) -> bool:
        """Whether DeepSpeed keeps the offloaded optimizer in CPU memory: ``offload_optimizer`` ``cpu``, or ``nvme``
        below ZeRO-3, which DeepSpeed takes as the CPU (:attr:`nvme_optimizer`)."""
        return self.offload_optimizer is Offload.CPU or (self.offload_optimizer is Offload.NVME
                                                         and not self.nvme_optimizer)

    @property
    def nvme_optimizer(self) -> bool:
        """Whether DeepSpeed swaps the optimizer states to NVMe (ZeRO-Infinity): ``offload_optimizer`` ``nvme`` at
        ZeRO-3. ZeRO-1/2 take device ``nvme`` as the CPU (stage_1_and_2.py swaps nothing)."""
        return self.offload_optimizer is Offload.NVME and int(self.zero_stage) == 3

    @property
    def nvme_params(self) -> bool:
        """Whether DeepSpeed swaps the parameters to NVMe: ``offload_params`` ``nvme`` (ZeRO-3)."""
        return self.offload_params is Offload.NVME and int(self.zero_stage) == 3

    @property
    def overlaps_comm(self) -> bool:
        """``overlap_comm`` with ``None`` resolved to the engine's default (:func:`default_overlap_comm`); DeepSpeed
        turns it off under its pipeline engine ("Pipeline parallelism does not support overlap_comm"), so a DeepSpeed
        or hybrid plan with pipeline_parallel > 1 does not overlap by default."""
        if self.overlap_comm is not None:
            return self.overlap_comm
        if self.engine is not Engine.MEGATRON and self.pipeline_parallel > 1:
            return False
        return default_overlap_comm(self.engine)

    def replace(self, **changes) -> "ParallelPlan":
        return dataclasses.replace(self, **changes)


def pipeline_stage_layers(num_layers: int, pipeline_parallel: int, virtual_pipeline: int = 1, *, first=None,
                          last=None, embedding: bool = False, loss: bool = False) -> tuple:
    """Transformer layers each pipeline stage builds, as megatron-core assigns them, or a ``ValueError`` where
    megatron-core refuses the split.

    Read in megatron-core 0.16 ``transformer/transformer_block.py`` (``get_num_layers_to_build``) and
    ``transformer/transformer_config.py`` (``__post_init__``, "Uneven PP"):

    * ``first`` / ``last`` (``num_layers_in_first/last_pipeline_stage``, Megatron-LM
      ``--decoder-first/last-pipeline-num-layers``): those stages get exactly that many layers; the layers left
      are split evenly over the middle stages, which must divide them (and with no middle stage none may be left).
      With interleaving, the first, last and middle counts must each divide by ``virtual_pipeline`` (every model
      chunk of a stage gets count / v layers).
    * ``embedding`` / ``loss`` (``--account-for-embedding/loss-in-pipeline-split``): the embedding (loss) counts as
      one more layer, ``num_layers + embedding + loss`` must divide by ``pipeline_parallel`` (and each stage's share
      by ``virtual_pipeline``); the first (last) stage then builds one transformer layer fewer.
    * Neither: ``num_layers`` must divide by ``pipeline_parallel × virtual_pipeline``.

    The two kinds cannot be combined (megatron-core raises)."""
    L, p, v = int(num_layers), int(pipeline_parallel), int(virtual_pipeline)
    uneven = first is not None or last is not None
    if uneven and (embedding or loss):
        raise ValueError("first_stage_layers/last_stage_layers cannot be combined with embedding_in_pipeline_split/"
                         "loss_in_pipeline_split (megatron-core's TransformerConfig refuses both at once)")
    if p == 1:
        if uneven:
            raise ValueError(f"first_stage_layers={first}, last_stage_layers={last} need pipeline_parallel > 1")
        return (L,)
    if uneven:
        rest, middle = L, p
        for name, count in (("first_stage_layers", first), ("last_stage_layers", last)):
            if count is None:
                continue
            if count <= 0:
                raise ValueError(f"{name}={count} must be larger than 0")
            if count % v:
                raise ValueError(f"{name}={count} is not divisible by virtual_pipeline({v}) (every model chunk of "
                                 f"the stage gets the same number of layers)")
            rest -= count
            middle -= 1
        if rest < 0:
            raise ValueError(f"first_stage_layers={first} and last_stage_layers={last} place {L - rest} layers, more "
                             f"than num_layers={L}")
        if bool(rest) != bool(middle):
            stages = f"{middle} other pipeline stage{'s' if middle != 1 else ''}" if middle else "no other stage"
            raise ValueError(f"num_layers={L} minus first_stage_layers={first} and last_stage_layers={last} leaves "
                             f"{rest} layers for {stages}")
        if v > 1 and not middle:
            raise ValueError(f"first_stage_layers={first} and last_stage_layers={last} with virtual_pipeline({v}) "
                             f"at pipeline_parallel={p} leave no middle stage, and megatron-core cannot build that "
                             f"model: its layer offset for the interleaved schedule divides by the middle stages "
                             f"(transformer_layer.get_transformer_layer_offset raises ZeroDivisionError on the last "
                             f"stage, megatron-core 0.16.1 and 0.19.2); set only one of the two")
        per = rest // middle if middle else 0
        if middle and rest % middle:
            raise ValueError(f"num_layers={L} minus first_stage_layers={first} and last_stage_layers={last} leaves "
                             f"{rest} layers, not divisible by the {middle} middle pipeline stages")
        if middle and per % v:
            raise ValueError(f"{per} layers on each middle pipeline stage is not divisible by virtual_pipeline({v})")
        layers = [per] * p
        if first is not None:
            layers[0] = int(first)
        if last is not None:
            layers[-1] = int(last)
        return tuple(layers)
    total = L + int(bool(embedding)) + int(bool(loss))
    if embedding or loss:
        if total % p:
            raise ValueError(f"num_layers={L} + embedding({int(bool(embedding))}) + loss({int(bool(loss))}) = "
                             f"{total} is not divisible by pipeline_parallel({p})")
        if (total // p) % v:
            raise ValueError(f"{total // p} layers per pipeline stage (embedding/loss counted) is not divisible by "
                             f"virtual_pipeline({v})")
    elif L % (p * v):
        raise ValueError(f"num_layers={L} is not divisible by pipeline_parallel({p}) * virtual_pipeline({v}) = "
                         f"{p * v}{_uneven_hint(L, p, v)}")
    per = total // p
    layers = [per] * p
    layers[0] -= int(bool(embedding))
    layers[-1] -= int(bool(loss))
    if min(layers) < 1:
        raise ValueError(f"num_layers={L} over pipeline_parallel({p}) leaves a stage without transformer layers")
    return tuple(layers)


def _uneven_hint(L: int, p: int, v: int) -> str:
    """What to set for an uneven split Megatron accepts (the error of a plain uneven split suggests it)."""
    hints = []
    if p > 2:
        for k in sorted({-(-L // p), L // p}):  # middle stages of ceil / floor L/p layers
            rest = L - (p - 2) * k
            a, b = rest // 2, rest - rest // 2
            if k > 0 and k % v == 0 and a >= 1 and a % v == 0 and b % v == 0 and max(a, b) <= k + v:
                hints.append(f"first_stage_layers={a}, last_stage_layers={b} (Megatron --decoder-first-pipeline-"
                             f"num-layers {a} --decoder-last-pipeline-num-layers {b}; {k} on each of the {p - 2} "
                             f"middle stages)")
                break
    elif p == 2 and L >= 2:
        a, b = -(-L // 2), L // 2
        if a % v == 0 and b % v == 0:
            hints.append(f"first_stage_layers={a}, last_stage_layers={b} (Megatron --decoder-first-pipeline-num-layers"
                         f" {a} --decoder-last-pipeline-num-layers {b})")
    for e, l_ in ((1, 0), (1, 1)):
        if (L + e + l_) % p == 0 and ((L + e + l_) // p) % v == 0:
            flags = "embedding_in_pipeline_split=True" + (", loss_in_pipeline_split=True" if l_ else "")
            hints.append(f"{flags} (Megatron --account-for-embedding-in-pipeline-split"
                         f"{' --account-for-loss-in-pipeline-split' if l_ else ''})")
            break
    return "; for an uneven split set " + " or ".join(hints) if hints else ""


def builds_in_zero_init(model: ModelSpec, plan: "ParallelPlan") -> bool:
    """Whether the plan's model is built inside ``deepspeed.zero.Init`` (:attr:`ParallelPlan.zero_init`); unless
    told, yes for a transformers model under DeepSpeed ZeRO-3 (the Trainer and ``from_pretrained`` with a ZeRO-3
    config alive, and ``workbench run``, build it so) and no otherwise (megatron-core models are built on the GPU and
    handed to ``deepspeed.initialize``, as the workbench's launcher does). Megatron-DeepSpeed at ZeRO-3 always: its
    ``model_provider`` builds inside ``deepspeed.zero.Init(enabled=args.zero_stage == 3)`` (pretrain_gpt.py)."""
    if plan.zero_stage != ZeroStage.PARAMETERS:
        return False
    if plan.engine is Engine.MEGATRON_DEEPSPEED:
        return True
    if plan.engine is not Engine.DEEPSPEED:
        return False
    if plan.zero_init is not None:
        return plan.zero_init
    return builds_in_zero_init_by_default(model)


def builds_in_zero_init_by_default(model: ModelSpec) -> bool:
    """Whether a ZeRO-3 plan that does not say (``zero_init=None``) builds ``model`` inside ``deepspeed.zero.Init``:
    a transformers model, as the Trainer builds it (:func:`builds_in_zero_init`, and the planner's columns through
    :func:`workbench.encode.default_zero_init_column`)."""
    return model.implementation is Implementation.TRANSFORMERS


def default_overlap_comm(engine: Engine) -> bool:
    """Whether gradient reduction overlaps backward unless told: DeepSpeed on, as the workbench's ds_config export
    writes it (``overlap_comm: true``; DeepSpeed's own default is on for ZeRO-3 only, so an imported ds_config
    without the key says so explicitly); Megatron off, as megatron-core's ``DistributedDataParallelConfig`` and
    Megatron-LM's ``--overlap-grad-reduce`` default."""
    return Engine.parse(engine, "engine") is not Engine.MEGATRON


# ----------------------------------------------------------------------------------------------------------------
# Cross-spec validation
# ----------------------------------------------------------------------------------------------------------------
def tp_comm_overlap_possible(model: ModelSpec) -> bool:
    """Whether ``--tp-comm-overlap`` applies to ``model``'s layers: Transformer Engine's (a megatron-core model with
    attention='flash', exported with ``--transformer-impl transformer_engine``); the local layer spec that the other
    attention kernels export has no userbuffers."""
    return model.attention is AttentionImpl.FLASH and model.implementation is Implementation.MEGATRON


def hf_checkpoint_counts(num_layers: int) -> tuple:
    """The decoder-layer counts transformers' ``every_n_layers=k`` checkpoints (⌈L/k⌉ for k = 1 .. L), fewest first."""
    return tuple(sorted({-(-num_layers // k) for k in range(1, num_layers + 1)}))


def hf_checkpoint_every(num_layers: int, recompute_layers: Optional[int], *, name: str = "model") -> int:
    """transformers' ``activation_checkpointing_enable(every_n_layers=k)`` (5.24) checkpoints decoder layers 0, k,
    2k, ... — ⌈L/k⌉ of the L — and leaves the others keeping their activations (``_set_gradient_checkpointing``,
    modeling_utils.py). The ``k`` that checkpoints ``recompute_layers`` of ``num_layers`` layers (the smallest when
    several do; ``None`` or L: 1, every layer); ``ValueError`` naming the counts k can give otherwise."""
    if recompute_layers is None or recompute_layers >= num_layers:
        return 1
    for k in range(1, num_layers + 1):
        if -(-num_layers // k) == recompute_layers:
            return k
    reachable = reversed(hf_checkpoint_counts(num_layers))
    raise ValueError(f"{name}: recompute_layers={recompute_layers} of num_layers={num_layers}: transformers "
                     f"checkpoints every k-th decoder layer (activation_checkpointing_enable(every_n_layers=k), "
                     f"⌈{num_layers}/k⌉ layers), which gives {', '.join(map(str, reachable))} layers")


def hf_checkpointing_words(model: "ModelSpec", plan: "ParallelPlan") -> str:
    """A transformers model's checkpointing under ``plan`` in words: 'off', 'on' (every decoder layer) or which
    layers transformers' ``every_n_layers`` checkpoints and the call that does it (:func:`hf_checkpoint_every`)."""
    if str(plan.recompute) != "full":
        return "off"
    every = hf_checkpoint_every(model.num_layers, plan.recompute_layers, name=model.name)
    if every == 1:
        return "on"
    return (f"on for decoder layers 0, {every}, {2 * every}, ... ({-(-model.num_layers // every)} of "
            f"{model.num_layers}; activation_checkpointing_enable(every_n_layers={every}), transformers >= 5.24)")


def validate(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> None:
    """Raise ``ValueError`` (fields and numbers named) when the three specs do not fit together."""
    check_spec_types(model=model, cluster=cluster, plan=plan)
    t, p, v, c = plan.tensor_parallel, plan.pipeline_parallel, plan.virtual_pipeline, plan.context_parallel
    if plan.world_size != cluster.world_size:
        raise ValueError(f"plan world_size={plan.world_size} != cluster gpus_per_node({cluster.gpus_per_node}) * "
                         f"num_nodes({cluster.num_nodes}) = {cluster.world_size}")
    if model.implementation is Implementation.TRANSFORMERS and model.attention is AttentionImpl.FUSED_SOFTMAX:
        raise ValueError(f"{model.name}: attention='fused-softmax' is Megatron's kernel; a Hugging Face model runs "
                         f"'unfused' (attn_implementation eager) or 'flash' (sdpa, flash_attention_2)")
    if model.implementation is Implementation.TRANSFORMERS and plan.recompute is Recompute.SELECTIVE:
        raise ValueError(f"{model.name}: recompute='selective' is megatron-core's recompute of the attention core; "
                         f"a Hugging Face model checkpoints whole decoder layers (gradient_checkpointing_enable): "
                         f"recompute='full' or 'none'")
    if (model.implementation is Implementation.TRANSFORMERS and plan.recompute_layers is not None
            and plan.recompute_layers < model.num_layers):
        hf_checkpoint_every(model.num_layers, plan.recompute_layers, name=model.name)  # raises when unreachable
    if model.implementation is Implementation.TRANSFORMERS and (plan.engine is not Engine.DEEPSPEED or p > 1):
        raise ValueError(f"{model.name}: a Hugging Face model trains under DeepSpeed ZeRO data parallel (engine="
                         f"'deepspeed', pipeline_parallel=1); got engine='{plan.engine}', pipeline_parallel={p}")
    if plan.lora_rank and not model.is_gated and set(plan.lora_targets) <= {"gate"}:
        # peft refuses target modules none of which the model has ("Target modules ... not found")
        raise ValueError(f"lora_targets={list(plan.lora_targets)}: {model.name} has no gate projection (activation="
                         f"'{model.activation}', not gated), so no adapter would train; target q, k, v, o, up or "
                         f"down")
    if model.num_attention_heads % t:
        raise ValueError(f"tensor_parallel={t} does not divide num_attention_heads={model.num_attention_heads}")
    if model.num_query_groups % t:
        raise ValueError(f"tensor_parallel={t} does not divide num_query_groups={model.num_query_groups}")
    if model.ffn_hidden_size % t:
        raise ValueError(f"tensor_parallel={t} does not divide ffn_hidden_size={model.ffn_hidden_size}")
    stage_layers = plan.stage_layers(model.num_layers)  # megatron-core's split, or its refusal
    if plan.is_ulysses:
        _validate_ulysses(model, plan)
    elif model.seq_length % (2 * c) and c > 1:
        raise ValueError(f"seq_length={model.seq_length} is not divisible by 2 * context_parallel({c}) = {2 * c}")
    if c > 1 and model.attention is not AttentionImpl.FLASH and not (
            plan.is_ulysses and model.implementation is not Implementation.TRANSFORMERS):
        raise ValueError(f"context_parallel={c} needs attention='flash' (Transformer Engine's DotProductAttention; "
                         f"megatron-core's local attention refuses context parallelism); {model.name} has "
                         f"attention='{model.attention}'")
    a2a = plan.cp_a2a_size
    if a2a > 1 and (model.num_attention_heads // t % a2a or model.num_query_groups // t % a2a):
        raise ValueError(f"cp_comm_type='{plan.cp_comm_type}': the all-to-all over {a2a} context-parallel ranks "
                         f"splits attention heads, so num_attention_heads={model.num_attention_heads} and "
                         f"num_query_groups={model.num_query_groups} divided by tensor_parallel={t} must divide by "
                         f"{a2a}")
    if plan.sequence_parallel and model.seq_length % t:
        raise ValueError(f"sequence_parallel: tensor_parallel={t} does not divide seq_length={model.seq_length}")
    if plan.tp_comm_overlap and not tp_comm_overlap_possible(model):
        raise ValueError(f"tp_comm_overlap=True overlaps inside Transformer Engine's linear layers (--transformer-impl "
                         f"transformer_engine, attention='flash' here); {model.name} has attention='{model.attention}' "
                         f"({model.implementation} implementation), whose layers have no userbuffers")
    if plan.recompute_layers is not None and plan.recompute_layers > max(stage_layers):
        raise ValueError(f"recompute_layers={plan.recompute_layers} exceeds the layers of the largest pipeline stage "
                         f"({max(stage_layers)}; num_layers={model.num_layers}, pipeline_parallel={p})")
    if plan.virtual_pipeline > 1 and plan.num_microbatches % p:
        raise ValueError(f"interleaved schedule: num_microbatches={plan.num_microbatches} must be a multiple of "
                         f"pipeline_parallel={p}")
    if plan.precision is Precision.BF16 and not cluster.gpu.peak_tflops.get("bf16"):
        raise ValueError(f"precision=bf16 is not supported by gpu={cluster.gpu.name}; use fp16")
    _validate_experts(model, plan)
    if plan.precision.is_fp8:
        _validate_fp8(model, cluster, plan)


def _validate_ulysses(model: ModelSpec, plan: ParallelPlan) -> None:
    """DeepSpeed-Ulysses against the model, as DeepSpeed 0.19.8 checks it: the sequence splits into N equal shares
    (``UlyssesSPDataLoaderAdapter``: seqlen divisible by sp-size); the all-to-all gives each rank heads/N query heads
    (``DistributedAttention`` asserts num_heads % N == 0) and kv/N K/V heads — with GQA, fewer K/V heads than N are
    replicated by ``UlyssesSPAttentionHF`` (N a multiple of kv) and refused by ``DistributedAttention`` (kv ≥ N),
    more that do not divide are split unevenly by ``DistributedAttention``; neither is priced here, so kv must
    divide by N. A Hugging Face model needs flash attention (sdpa / flash_attention_2: eager is refused)."""
    n, h, kv, s = plan.ulysses, model.num_attention_heads, model.num_query_groups, model.seq_length
    if s % n:
        raise ValueError(f"ulysses={n} does not divide seq_length={s} (each rank keeps s/N tokens)")
    if h % n:
        raise ValueError(f"ulysses={n} does not divide num_attention_heads={h}: the all-to-all gives each rank "
                         f"heads/N attention heads; the largest Ulysses size for {model.name} is "
                         f"{ulysses_head_limit(model)}")
    if kv % n:
        raise ValueError(f"ulysses={n} does not divide num_query_groups={kv} (K/V heads): DeepSpeed replicates K/V "
                         f"heads when N is a multiple of them (UlyssesSPAttentionHF) or splits them unevenly "
                         f"(DistributedAttention), neither modelled; the largest Ulysses size for {model.name} is "
                         f"{ulysses_head_limit(model)}")
    if model.implementation is Implementation.TRANSFORMERS and model.attention is not AttentionImpl.FLASH:
        raise ValueError(f"ulysses={n} with a Hugging Face model needs attention='flash' (sdpa or "
                         f"flash_attention_2): DeepSpeed's UlyssesSPAttentionHF refuses eager attention")


def ulysses_head_limit(model: ModelSpec) -> int:
    """The largest DeepSpeed-Ulysses size the heads allow: gcd(attention heads, K/V heads) (both must divide)."""
    return math.gcd(model.num_attention_heads, model.num_query_groups)


def _validate_experts(model: ModelSpec, plan: ParallelPlan) -> None:
    """MoE plan fields against the model (megatron-core ``MoELayer``: ``num_moe_experts % ep_size == 0``)."""
    e, te = plan.expert_parallel, plan.expert_tensor_parallel_size
    moe_fields = (e > 1 or plan.expert_tensor_parallel is not None or plan.moe_capacity_factor is not None
                  or plan.moe_pad_to_capacity or plan.moe_load_imbalance != 1.0
                  or plan.moe_recompute is not MoERecompute.NONE)
    if not model.is_moe:
        if moe_fields:
            given = [text for text, on in (
                (f"expert_parallel={e}", e > 1),
                (f"expert_tensor_parallel={plan.expert_tensor_parallel}", plan.expert_tensor_parallel is not None),
                (f"moe_capacity_factor={plan.moe_capacity_factor}", plan.moe_capacity_factor is not None),
                ("moe_pad_to_capacity=True", plan.moe_pad_to_capacity),
                (f"moe_load_imbalance={plan.moe_load_imbalance:g}", plan.moe_load_imbalance != 1.0),
                (f"moe_recompute='{plan.moe_recompute}'", plan.moe_recompute is not MoERecompute.NONE)) if on]
            raise ValueError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} a mixture-of-experts model "
                             f"({model.name} has num_experts=None)")
        return
    if model.num_experts % e:
        raise ValueError(f"expert_parallel={e} does not divide num_experts={model.num_experts}")
    most = model.num_experts / model.moe_top_k
    if plan.moe_load_imbalance > most:
        raise ValueError(f"moe_load_imbalance={plan.moe_load_imbalance:g} exceeds num_experts / moe_top_k = "
                         f"{model.num_experts} / {model.moe_top_k} = {most:g}: no routing puts more than that many "
                         f"times the average on one rank (each token picks {model.moe_top_k} distinct experts)")
    if model.moe_ffn_hidden_size % te:
        raise ValueError(f"expert_tensor_parallel={te} does not divide moe_ffn_hidden_size="
                         f"{model.moe_ffn_hidden_size}")
    if model.add_bias_linear and te > 1 and plan.engine is Engine.MEGATRON:
        raise ValueError(f"{model.name} has biases on its linear layers (add_bias_linear=True): megatron-core supports "
                         f"them in MoE layers only with expert_tensor_parallel=1 (got {te}"
                         f"{', the TP size, its default' if plan.expert_tensor_parallel is None else ''}); set "
                         f"expert_tensor_parallel=1")


def _validate_fp8(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> None:
    """FP8 checks that need the model or the GPU (Transformer Engine's and megatron-core's own refusals)."""
    gpu = cluster.gpu
    if not gpu.peak_tflops.get("fp8") or not gpu.peak_tflops.get("bf16"):
        raise ValueError(f"precision=fp8 is not supported by gpu={gpu.name}: it has no FP8 tensor cores (FP8 training "
                         f"needs Hopper, Ada or Blackwell GPUs, e.g. H100, H200, L40S, B200); use bf16")
    from workbench.timing import gpu_generation

    if plan.fp8_recipe is Fp8Recipe.MXFP8 and gpu_generation(gpu.name) != "blackwell":
        raise ValueError(f"fp8_recipe='mxfp8' needs a Blackwell GPU (Transformer Engine's MXFP8 kernels); "
                         f"gpu={gpu.name} is {gpu_generation(gpu.name)}: use 'delayed', 'tensorwise' or 'blockwise'")
    if model.attention is not AttentionImpl.FLASH:
        raise ValueError(f"precision=fp8 trains with Transformer Engine's layers (--transformer-impl "
                         f"transformer_engine), whose attention is fused/flash: set attention='flash' (got "
                         f"attention='{model.attention}')")
    if model.implementation is not Implementation.MEGATRON:
        raise ValueError(f"{model.name}: precision=fp8 is modelled for megatron-core models (Transformer Engine "
                         f"layers), not Hugging Face ones")
    per_stage = model.num_layers // plan.pipeline_parallel
    for name in ("fp8_bf16_first_layers", "fp8_bf16_last_layers"):
        if getattr(plan, name) > per_stage:
            raise ValueError(f"{name}={getattr(plan, name)} must be at most the layers per pipeline stage "
                             f"(num_layers={model.num_layers} // pipeline_parallel={plan.pipeline_parallel} = "
                             f"{per_stage}; megatron-core checks the same)")


_SPEC_CLASSES = {"model": ModelSpec, "cluster": ClusterSpec, "plan": ParallelPlan, "gpu": GPUSpec}


def check_spec_types(**specs) -> None:
    """``ValueError`` naming the argument when a spec (``model=``, ``cluster=``, ``plan=``, ``gpu=``) is not the
    dataclass it should be (``None``, a dict, a name...)."""
    for name, value in specs.items():
        cls = _SPEC_CLASSES[name]
        if not isinstance(value, cls):
            raise ValueError(f"{name}={value!r:.80} must be a {cls.__name__} (got {type(value).__name__})")


def closest_name(name: str, choices) -> str:
    """A 'did you mean' hint for an unknown catalog name ('' when nothing is close)."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[hits[0]] if hits else ""
