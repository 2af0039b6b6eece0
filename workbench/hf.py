"""Hugging Face Transformers models: a ``config.json`` (or a model directory) as a :class:`ModelSpec`.

``import_hf(path)`` reads the config through the installed ``transformers`` configuration class of its
``model_type`` (so missing keys take transformers' own defaults) and translates it into a ModelSpec whose
parameter count equals what ``AutoModelForCausalLM.from_config`` builds from the same file. ``--model hf:PATH``
on the command line and ``catalog.model("hf:PATH")`` go through :func:`model_from_hf`.

Supported ``model_type`` values (decoder-only causal LMs): llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text,
gpt2, gpt_neox, phi3, mixtral, qwen2_moe, qwen3_moe, granite, starcoder2, smollm3, olmo2, olmo3. Anything else, a key
the configuration class does not know, or a value the ModelSpec cannot express (dense and MoE layers mixed, quantised
weights, remote code) is refused with one line naming it. Everything runs offline: the file is local and nothing is
downloaded.

The attention implementation (``attn_implementation``: ``eager``, ``sdpa``, ``flash_attention_2``) is a choice of
the training stack: :func:`attention_for` maps it onto the ModelSpec's attention kernel. So is the MoE families'
``experts_implementation`` (``grouped_mm``, ``eager``), kept as the ModelSpec's ``experts_implementation``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from workbench.specs import AttentionImpl, ModelSpec, hf_checkpoint_every

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "gpt2",
                         "gpt_neox", "phi3", "mixtral", "qwen2_moe", "qwen3_moe", "granite", "starcoder2", "smollm3",
                         "olmo2", "olmo3")

ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3")

DEFAULT_MAX_SEQ_LENGTH = 4096
"""Training sequence length when none is given: the model's context window, capped at 4096 tokens (a common
fine-tuning length; pass ``seq_length``/``--seq`` for another)."""

# keys real config.json files carry that older transformers versions wrote and the current classes fold into
# their own fields (rope_scaling/rope_theta -> rope_parameters, torch_dtype -> dtype) or that only name the
# attention kernel to load; none changes the parameters
_LEGACY_KEYS = frozenset({"rope_scaling", "rope_theta", "torch_dtype", "attn_implementation",
                          "_attn_implementation", "use_bfloat16", "tokenizer_class", "partial_rotary_factor",
                          # generation and cache settings, positional-encoding constants, GPT-2's n_ctx (= n_positions)
                          "cache_implementation", "task_specific_params", "n_ctx", "rotary_emb_base",
                          "rope_local_base_freq", "sliding_window_pattern", "original_max_position_embeddings",
                          "max_window_layers", "use_sliding_window", "sliding_window", "rotary_pct",
                          "torchscript", "bos_token_id", "eos_token_id", "pad_token_id",
                          # the MoE experts kernel to run (read into ModelSpec.experts_implementation)
                          "experts_implementation", "_experts_implementation"})
# keys a family's modelling code reads with getattr although its configuration class does not declare them
_MODELLING_KEYS = {"qwen3_moe": frozenset({"head_dim"}), "mixtral": frozenset({"head_dim"}),
                   "qwen2_moe": frozenset({"head_dim"}),
                   # Gemma's files repeat the activation as hidden_act; the model uses hidden_activation
                   "gemma": frozenset({"hidden_act"}), "gemma2": frozenset({"hidden_act"}),
                   "gemma3_text": frozenset({"hidden_act"}),
                   # StarCoder2's release files name the MLP and norm kinds and repeat the activation and epsilon
                   # under older names; Starcoder2Config declares none of them and the model reads none (it always
                   # builds LayerNorm and the c_fc/c_proj MLP with hidden_act and norm_epsilon)
                   "starcoder2": frozenset({"mlp_type", "norm_type", "activation_function", "layer_norm_epsilon"})}

# the fields that size a model, per family (a config.json without them would silently take the configuration
# class's defaults: transformers' LlamaConfig() is Llama-2 7B); each entry lists the names accepted for it
_SIZE_FIELDS = {
    "gpt2": (("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
             ("vocab_size",)),
    "mixtral": (("num_local_experts", "num_experts"), ("num_experts_per_tok",)),
    "qwen2_moe": (("num_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "qwen3_moe": (("num_experts", "num_local_experts"), ("num_experts_per_tok",), ("moe_intermediate_size",)),
}
_DENSE_SIZE_FIELDS = (("hidden_size",), ("num_hidden_layers",), ("num_attention_heads",), ("vocab_size",),
                      ("intermediate_size",))


_COUNT_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "intermediate_size", "vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "num_local_experts",
                 "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                 "max_position_embeddings", "n_positions")
"""Size fields that count something: an integer below 1 is refused by name (``null`` keeps its meaning: not set)."""


def missing_size_fields(data: dict) -> list:
    """The size fields of ``data``'s family that ``data`` does not give (by their first accepted name).

    Every family needs width, depth, heads and vocabulary; the Llama-style families and GPT-NeoX also the MLP
    width (GPT-2's defaults to 4h by the architecture); the MoE families the expert count, top-k and (Qwen-MoE)
    the expert width."""
    model_type = data.get("model_type")
    if model_type == "gpt2":
        need = _SIZE_FIELDS["gpt2"]
    else:
        need = _DENSE_SIZE_FIELDS + _SIZE_FIELDS.get(model_type, ())
    return [names[0] for names in need if not any(n in data for n in names)]


_GATED_ACTIVATIONS = {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"}


@dataclass(frozen=True)
class HFModel:
    """An imported Hugging Face config: the spec and what else the file says."""

    spec: ModelSpec
    model_type: str
    architecture: str
    """The ``architectures[0]`` entry, or the causal-LM class transformers would build."""
    path: str
    """The config.json read."""
    config: dict = field(repr=False)
    """The config.json as read (for building the model with transformers)."""
    attn_implementation: Optional[str] = None
    """What the config names (``None`` when it names nothing: transformers then picks sdpa, or eager where the
    family refuses sdpa; :attr:`effective_attn_implementation`)."""
    has_weights: bool = False
    """A ``*.safetensors`` or ``pytorch_model*.bin`` file sits next to the config."""
    notes: tuple = ()
    """What the translation approximates (e.g. GeGLU counted as a gated MLP like SwiGLU)."""
    max_position_embeddings: Optional[int] = None
    """The context the model was trained for (``max_position_embeddings``; GPT-2's ``n_positions``)."""

    @property
    def context_warning(self) -> Optional[str]:
        """One line when the training sequence runs past the model's context (see :func:`context_warning`)."""
        return context_warning(self.spec.seq_length, self.max_position_embeddings)

    @property
    def effective_attn_implementation(self) -> str:
        """The kernel transformers runs: the one named, else its default for the family."""
        return self.attn_implementation or default_attn_implementation(self.model_type)

    def to_dict(self) -> dict:
        from workbench.runs.specio import _plain

        return {"kind": "huggingface", "model_type": self.model_type, "architecture": self.architecture,
                "path": self.path, "parameters": self.spec.num_parameters, "model": _plain(self.spec),
                "attn_implementation": self.effective_attn_implementation, "has_weights": self.has_weights,
                "notes": list(self.notes)}


def config_path(source: Union[str, os.PathLike]) -> Path:
    """The config.json of ``source`` (the file itself or a model directory holding one)."""
    p = Path(source).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ValueError(f"hf model {str(source)!r}: the folder has no config.json")
        p = p / "config.json"
    if not p.is_file():
        raise ValueError(f"hf model {str(source)!r}: no such config.json or model directory")
    return p


def read_config(source) -> dict:
    """The config.json of a path (file or directory) as a dict; a dict is returned as is."""
    if isinstance(source, dict):
        return dict(source)
    p = config_path(source)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); a config.json "
                         f"is JSON text") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e.msg.removesuffix(' at')} at line {e.lineno} column {e.colno})") \
            from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a config.json holds one JSON object, got {type(data).__name__}")
    return data


def is_hf_config(data: dict) -> bool:
    """Whether a JSON object looks like a Hugging Face model config (rather than a ds_config)."""
    return isinstance(data, dict) and "model_type" in data and "train_micro_batch_size_per_gpu" not in data \
        and "zero_optimization" not in data


def _default_config(cls):
    """``cls()``, without the warning transformers' own defaults raise for some families (Starcoder2Config's
    bos/eos token 50256 lies outside its default 49152-token vocabulary): only its field names are read."""
    import logging

    log = logging.getLogger("transformers.configuration_utils")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return cls()
    finally:
        log.setLevel(level)


def _config_object(data: dict, where: str):
    """The transformers configuration object for ``data`` (offline; refuses unknown types and keys)."""
    model_type = data.get("model_type")
    if model_type is None:
        raise ValueError(f"{where}: no 'model_type' field; not a Hugging Face model config")
    if model_type == "gemma3":
        raise ValueError(f"{where}: model_type 'gemma3' is the multimodal Gemma 3 (with a vision tower); the "
                         f"workbench models its language model: use a config with model_type 'gemma3_text'")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{where}: model_type {model_type!r} is not supported (supported: "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)})")
    if "auto_map" in data:
        raise ValueError(f"{where}: field 'auto_map' names remote modelling code, which the workbench does not run")
    if "quantization_config" in data:
        raise ValueError(f"{where}: field 'quantization_config': quantised weights are not modelled")
    missing = missing_size_fields(data)
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)} (model_type {model_type!r}); a config.json must give "
                         f"the model's sizes, else transformers' defaults for the family would be priced")
    for key in _COUNT_FIELDS:  # before transformers divides by them, and before a 0 reads as "not given"
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"{where}: {key}={value} must be >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    known = set(_default_config(cls).to_dict()) | set(getattr(cls, "attribute_map", {}))  # + the aliases it accepts
    extra = _MODELLING_KEYS.get(model_type, frozenset())
    unknown = sorted(k for k in data if k not in known and k not in _LEGACY_KEYS and k not in extra)
    if unknown:
        raise ValueError(f"{where}: field {unknown[0]!r} is not a {cls.__name__} field in this transformers "
                         f"version; refusing to guess what it changes")
    kwargs = {k: v for k, v in data.items() if k not in ("attn_implementation", "_attn_implementation",
                                                          "experts_implementation", "_experts_implementation")}
    try:
        return cls.from_dict(kwargs)
    except Exception as e:  # noqa: BLE001 - only the rejections below; anything else is re-raised
        # transformers 5 validates its configs as huggingface_hub strict dataclasses, whose errors wrap the
        # TypeError/ValueError that names the field and the numbers
        cause = e.__cause__ if type(e).__name__.startswith("StrictDataclass") and e.__cause__ is not None else e
        # a field the config class computes with (heads 0: ZeroDivisionError; torch_dtype "x": AttributeError;
        # an empty list where it indexes: IndexError) is the file's fault too
        if not isinstance(cause, (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError)):
            raise
        raise ValueError(f"{where}: transformers' {cls.__name__} rejects it: {' '.join(str(cause).split())}") \
            from None


def _activation(act: str, gated: bool, where: str, notes: list) -> str:
    if gated:
        if act not in _GATED_ACTIVATIONS:
            raise ValueError(f"{where}: hidden activation {act!r} is not modelled")
        if act.startswith("gelu"):
            notes.append(f"gated {act} MLP (GeGLU) counted as the gated MLP of SwiGLU: same matrices and FLOPs")
        return "swiglu"
    if not act.startswith("gelu"):
        raise ValueError(f"{where}: activation {act!r} is not modelled (gelu variants only without a gate)")
    return "gelu"


# Attention kernels transformers refuses per family: the model classes' ``_supports_sdpa`` /
# ``_supports_flash_attn`` flags (transformers 5.24; tests/test_hf.py checks this table against the installed
# classes). Gemma 2: ``_supports_sdpa = False`` because SDPA has no attention-logit soft-capping
# (models/gemma2/modeling_gemma2.py, Gemma2PreTrainedModel); FlashAttention 2/3 take a softcap argument.
_NO_SDPA = {"gemma2": "SDPA has no attention-logit soft-capping"}
_NO_FLASH: dict = {}


def default_attn_implementation(model_type: Optional[str]) -> str:
    """What transformers runs when nothing is named: sdpa, or eager for a family whose class refuses sdpa
    (``PreTrainedModel.get_correct_attn_implementation`` falls back to eager only when sdpa was not asked for)."""
    return "eager" if model_type in _NO_SDPA else "sdpa"


def check_attn_implementation(model_type: Optional[str], attn_implementation: Optional[str],
                              field: str = "attn_implementation") -> None:
    """``ValueError`` in one line when transformers refuses ``attn_implementation`` for ``model_type`` (it raises
    at ``from_config``/``from_pretrained``), naming the field, the family and what works instead."""
    impl = attn_implementation
    if impl is None or model_type is None:
        return
    refused = _NO_SDPA if impl == "sdpa" else _NO_FLASH if impl.startswith("flash_attention") else {}
    if model_type in refused:
        works = [i for i in ATTN_IMPLEMENTATIONS if i == "eager" or (
            i == "sdpa" and model_type not in _NO_SDPA) or (i.startswith("flash") and model_type not in _NO_FLASH)]
        raise ValueError(f"{field}={impl!r}: transformers refuses it for model_type {model_type!r} "
                         f"({refused[model_type]}); use {' or '.join(works)}")


def attention_for(attn_implementation: Optional[str], model_type: Optional[str] = None) -> AttentionImpl:
    """The ModelSpec attention kernel an ``attn_implementation`` runs: ``eager`` materialises the s×s scores,
    the fp32 softmax cast back to the model dtype and the dropout mask (transformers' ``eager_attention_forward``)
    like the unfused kernel; ``sdpa`` (torch's flash / memory-efficient kernels) and ``flash_attention_2/3`` keep
    only the output and the log-sum-exp, like flash. ``None`` is transformers' default: sdpa, or eager for a
    ``model_type`` whose class refuses sdpa (Gemma 2). A kernel transformers refuses for ``model_type`` is refused."""
    impl = attn_implementation or default_attn_implementation(model_type)
    if impl not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation={impl!r} is not one of: {', '.join(ATTN_IMPLEMENTATIONS)}")
    check_attn_implementation(model_type, attn_implementation)
    return AttentionImpl.UNFUSED if impl == "eager" else AttentionImpl.FLASH


def context_warning(seq_length: int, max_position_embeddings: Optional[int]) -> Optional[str]:
    """A warning when a rotary model trains on sequences longer than its ``max_position_embeddings``, else ``None``.

    Not a refusal: rotary positions have no table to run out of, and RoPE scaling (position interpolation, YaRN)
    trains a model past its context on purpose; without it the positions beyond the context are unseen. (A learned
    position table is a refusal: ModelSpec checks ``seq_length`` against it.)"""
    if max_position_embeddings and seq_length > max_position_embeddings:
        return (f"seq_length={seq_length} exceeds the model's max_position_embeddings={max_position_embeddings} "
                f"(rotary positions beyond it are unseen unless the run uses RoPE scaling)")
    return None


def _note_sliding_window(cfg, model_type: str, notes: list) -> None:
    """Note a sliding window the family's attention uses (Mistral, Mixtral, Gemma 2/3, StarCoder2, Phi-3 with a
    ``sliding_window``; SmolLM3 only with ``use_sliding_window`` and sliding layers in ``layer_types``; OLMo 3 with
    sliding layers in ``layer_types``): the ModelSpec counts full causal attention."""
    if sliding_window_layers(cfg, model_type):
        notes.append(f"sliding-window attention ({cfg.sliding_window} tokens) counted as full causal attention")


def sliding_window_layers(cfg, model_type: str) -> int:
    """How many decoder layers transformers builds with a sliding window (0 for none): the ``sliding_attention``
    entries of the config's ``layer_types`` where it has them (Gemma 2/3, OLMo 3, Qwen2 with
    ``use_sliding_window``, SmolLM3), else every layer of a family whose model masks every layer with
    ``create_sliding_window_causal_mask`` when ``sliding_window`` is set (Mistral, Mixtral, StarCoder2, Phi-3)."""
    if not getattr(cfg, "sliding_window", None):
        return 0
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, (list, tuple)):
        return sum(1 for t in types[:cfg.num_hidden_layers] if t == "sliding_attention")
    return cfg.num_hidden_layers if model_type in ("mistral", "mixtral", "starcoder2", "phi3") else 0


def _spec_fields(cfg, model_type: str, where: str, notes: list) -> dict:
    g = lambda name, default=None: getattr(cfg, name, default)  # noqa: E731
    if model_type == "gpt2":
        h = cfg.n_embd
        return dict(num_layers=cfg.n_layer, hidden_size=h, num_attention_heads=cfg.n_head,
                    ffn_hidden_size=cfg.n_inner or 4 * h, vocab_size=cfg.vocab_size,
                    max_position_embeddings=cfg.n_positions, position_embedding="learned",
                    normalization="layernorm", add_bias_linear=True,
                    activation=_activation(cfg.activation_function, False, where, notes),
                    # transformers' NewGELUActivation / FastGELUActivation run op by op; gelu and
                    # gelu_pytorch_tanh are one F.gelu (Cerebras-GPT sets gelu; GPT-2's default is gelu_new)
                    gelu_unfused=cfg.activation_function in ("gelu_new", "gelu_fast"),
                    tied_embeddings=bool(cfg.tie_word_embeddings), hidden_dropout=float(cfg.resid_pdrop),
                    attention_dropout=float(cfg.attn_pdrop))
    if model_type == "gpt_neox":
        if not g("attention_bias", True):
            raise ValueError(f"{where}: attention_bias=False leaves the MLP's biases but drops the attention's; "
                             f"not modelled")
        return dict(num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
                    num_attention_heads=cfg.num_attention_heads, ffn_hidden_size=cfg.intermediate_size,
                    vocab_size=cfg.vocab_size, position_embedding="rotary", normalization="layernorm",
                    add_bias_linear=True, activation=_activation(cfg.hidden_act, False, where, notes),
                    tied_embeddings=bool(cfg.tie_word_embeddings), hidden_dropout=float(g("hidden_dropout", 0.0)),
                    attention_dropout=float(g("attention_dropout", 0.0)))
    if model_type == "starcoder2":  # transformers/models/starcoder2: LayerNorm, c_fc/c_proj GeLU MLP, GQA, rotary
        _note_sliding_window(cfg, model_type, notes)
        residual, embedding = float(g("residual_dropout", 0.0) or 0.0), float(g("embedding_dropout", 0.0) or 0.0)
        if (embedding > 0) != (residual > 0):  # the ModelSpec keeps the embedding's mask with the hidden dropout
            notes.append(f"embedding_dropout={embedding} counted as residual_dropout={residual}: the embedding's "
                         f"dropout mask (1 byte per token and hidden unit) only "
                         f"{'without' if residual > 0 else 'with'} it")
        return dict(num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
                    num_attention_heads=cfg.num_attention_heads,
                    num_query_groups=g("num_key_value_heads") or cfg.num_attention_heads,
                    ffn_hidden_size=cfg.intermediate_size, vocab_size=cfg.vocab_size, position_embedding="rotary",
                    normalization="layernorm", add_bias_linear=bool(cfg.use_bias),
                    activation=_activation(cfg.hidden_act, False, where, notes),
                    tied_embeddings=bool(cfg.tie_word_embeddings), hidden_dropout=residual,
                    attention_dropout=float(g("attention_dropout", 0.0) or 0.0), separate_qkv=True)
    # the Llama-style families: RMSNorm, rotary, gated MLP, optional GQA
    if model_type in ("llama", "granite", "smollm3") and bool(g("attention_bias")) != bool(g("mlp_bias")):
        raise ValueError(f"{where}: attention_bias={cfg.attention_bias} with mlp_bias={cfg.mlp_bias} is not "
                         f"modelled (biases on all linear layers or on none)")
    bias = bool(g("attention_bias", False))
    qkv_bias = {"qwen2": True, "qwen2_moe": bool(g("qkv_bias", True))}.get(model_type, bias)
    if model_type in ("qwen3", "gemma", "gemma2", "gemma3_text", "qwen3_moe", "olmo2", "olmo3") and bias:
        raise ValueError(f"{where}: attention_bias=True puts a bias on the output projection but none on the MLP; "
                         f"not modelled")
    act = g("hidden_activation") or g("hidden_act")
    fields = dict(num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
                  num_attention_heads=cfg.num_attention_heads,
                  num_query_groups=g("num_key_value_heads") or cfg.num_attention_heads,
                  head_dim=g("head_dim") or cfg.hidden_size // cfg.num_attention_heads,
                  ffn_hidden_size=cfg.intermediate_size, vocab_size=cfg.vocab_size, position_embedding="rotary",
                  normalization="rmsnorm", add_bias_linear=bias, qkv_bias=qkv_bias,
                  activation=_activation(act, True, where, notes), tied_embeddings=bool(cfg.tie_word_embeddings),
                  hidden_dropout=0.0, attention_dropout=float(g("attention_dropout", 0.0) or 0.0),
                  qk_norm=model_type in ("qwen3", "gemma3_text", "qwen3_moe", "olmo2", "olmo3"),
                  sandwich_norm=model_type in ("gemma2", "gemma3_text"))
    if model_type in ("olmo2", "olmo3"):  # Olmo2Attention's q_norm/k_norm over a·d and g·d, Olmo2DecoderLayer's norms
        fields.update(qk_norm_projection=True, post_norm=True)  # on the attention and MLP outputs only
    if model_type == "phi3":  # Phi3Attention.qkv_proj and Phi3MLP.gate_up_proj (transformers/models/phi3)
        fields["hidden_dropout"] = float(g("resid_pdrop", 0.0) or 0.0)
        fields["fused_projections"] = True
    if model_type == "mixtral":
        fields.update(num_experts=cfg.num_local_experts, moe_top_k=cfg.num_experts_per_tok,
                      moe_ffn_hidden_size=cfg.intermediate_size)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step, dense = g("decoder_sparse_step", 1), list(g("mlp_only_layers") or [])
        if dense or step != 1:
            name = "mlp_only_layers" if dense else "decoder_sparse_step"
            raise ValueError(f"{where}: {name}={dense or step} mixes dense and MoE layers, which is not modelled "
                             f"(every layer must be MoE: decoder_sparse_step=1, mlp_only_layers=[])")
        fields.update(num_experts=cfg.num_experts, moe_top_k=cfg.num_experts_per_tok,
                      moe_ffn_hidden_size=cfg.moe_intermediate_size)
        if model_type == "qwen2_moe" and g("shared_expert_intermediate_size"):
            fields["shared_expert_ffn_hidden_size"] = cfg.shared_expert_intermediate_size
    _note_sliding_window(cfg, model_type, notes)
    if model_type == "granite" and g("residual_multiplier", 1.0) != 1.0:  # GraniteDecoderLayer.forward
        notes.append(f"residual_multiplier={cfg.residual_multiplier}: two scalar products per layer, keeping nothing "
                     f"for backward (as the embedding/attention/logits multipliers); their passes over the hidden "
                     f"states are timed as a Llama layer's, which has none")
    if model_type == "smollm3":  # SmolLM3Attention.use_rope = config.no_rope_layers[layer_idx]
        nope = sum(1 for r in (g("no_rope_layers") or ())[:cfg.num_hidden_layers] if not r)
        if nope:
            notes.append(f"{nope} of {cfg.num_hidden_layers} layers without rotary (no_rope_layers, NoPE): the same "
                         f"parameters and kept activations (rotary keeps only the shared cos/sin tables); their "
                         f"host time and memory traffic priced as a rotary layer's")
    return fields


def import_hf(source, *, seq_length: Optional[int] = None, attn_implementation: Optional[str] = None,
              name: Optional[str] = None, experts_implementation: Optional[str] = None) -> HFModel:
    """Translate a Hugging Face ``config.json`` (path to the file or its directory, or the dict) into a ModelSpec.

    ``seq_length``: training sequence length (default: the context window capped at
    :data:`DEFAULT_MAX_SEQ_LENGTH`). ``attn_implementation`` and ``experts_implementation`` override what the
    config names (``experts_implementation`` / ``_experts_implementation``; MoE families only).
    """
    where = "config.json" if isinstance(source, dict) else str(config_path(source))
    data = read_config(source)
    cfg = _config_object(data, where)
    model_type = data["model_type"]
    notes: list = []
    heads = getattr(cfg, "num_attention_heads", None)
    kv = getattr(cfg, "num_key_value_heads", None)
    if "num_key_value_heads" not in data and isinstance(heads, int) and isinstance(kv, int) and kv > 0 \
            and heads % kv:
        raise ValueError(f"{where}: no num_key_value_heads, and {type(cfg).__name__}'s default {kv} does not divide "
                         f"num_attention_heads={heads}; give num_key_value_heads")
    fields = _spec_fields(cfg, model_type, where, notes)
    context = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if seq_length is None:
        seq_length = min(context or DEFAULT_MAX_SEQ_LENGTH, DEFAULT_MAX_SEQ_LENGTH)
    elif model_type != "gpt2" and context_warning(seq_length, context):  # GPT-2's learned table: ModelSpec refuses
        notes.append(context_warning(seq_length, context))
    impl = attn_implementation or data.get("attn_implementation") or data.get("_attn_implementation")
    try:
        fields["attention"] = attention_for(impl, model_type)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    fields["implementation"] = "transformers"
    # sdpa (and eager) take the window as a mask; FlashAttention applies it in the kernel (no mask, nothing kept)
    windowed = sliding_window_layers(cfg, model_type)
    if windowed and not str(impl or "").startswith("flash"):
        fields.update(sliding_window=int(cfg.sliding_window), sliding_window_layers=windowed)
    # a dense family's config may name it too; transformers ignores it there, and so does the import (an explicit
    # ``experts_implementation`` for a dense model is refused by the ModelSpec)
    experts = experts_implementation or (data.get("experts_implementation") or data.get("_experts_implementation")
                                         if "num_experts" in fields else None)
    if experts is not None:
        fields["experts_implementation"] = experts
    if name is None:
        name = "hf:" + (str(source) if not isinstance(source, dict) else model_type)
    try:
        spec = ModelSpec(name=name, seq_length=seq_length, **fields)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    archs = data.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"{where}: architectures={archs!r:.60} must be a list of class names")
    has_weights = False
    if not isinstance(source, dict):
        d = config_path(source).parent
        has_weights = any(d.glob("*.safetensors")) or any(d.glob("pytorch_model*.bin"))
    return HFModel(spec=spec, model_type=model_type, architecture=archs[0] if archs else f"{model_type} causal LM",
                   path=where, config=data, attn_implementation=impl, has_weights=has_weights, notes=tuple(notes),
                   max_position_embeddings=context)


def model_from_hf(source, **overrides) -> ModelSpec:
    """The ModelSpec of an HF config path; ``overrides`` are ModelSpec fields (``seq_length`` is applied before
    the translation so the position table is checked against it) or ``attn_implementation`` (checked against what
    transformers accepts for the family, then mapped onto ``attention``)."""
    seq = overrides.pop("seq_length", None)
    impl = overrides.pop("attn_implementation", None)
    experts = overrides.pop("experts_implementation", None)
    spec = import_hf(source, seq_length=seq, attn_implementation=impl, experts_implementation=experts).spec
    return spec.replace(**overrides) if overrides else spec


def build_model(config: Union[dict, str, os.PathLike], *, device: str = "meta",
                attn_implementation: Optional[str] = None, experts_implementation: Optional[str] = None):
    """The ``transformers`` causal-LM module a config describes, randomly initialised on ``device`` (``meta``
    allocates nothing: for counting parameters); ``experts_implementation`` for the MoE families."""
    import torch
    from transformers import AutoModelForCausalLM

    data = read_config(config)
    where = "config.json" if isinstance(config, dict) else str(config_path(config))
    cfg = _config_object(data, where)
    impl = attn_implementation or data.get("attn_implementation") or data.get("_attn_implementation")
    kwargs = {"attn_implementation": impl} if impl else {}
    experts = experts_implementation or data.get("experts_implementation") or data.get("_experts_implementation")
    if experts:
        kwargs["experts_implementation"] = experts
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Training: the module names LoRA targets map to, and the run options a launched HF run reads
# ----------------------------------------------------------------------------------------------------------------
_FUSED_QKV = {"gpt2": "c_attn", "gpt_neox": "query_key_value", "phi3": "qkv_proj"}
_NAMED = {
    "gpt2": {"o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj"},
    "gpt_neox": {"o": "attention.dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "phi3": {"o": "o_proj", "down": "down_proj"},
}
_LLAMA_STYLE = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
                "down": "down_proj"}
# Llama's attention names around a GeLU MLP (Starcoder2MLP: c_fc, c_proj)
_SEPARATE_QKV_GELU = {"starcoder2": {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "up": "c_fc",
                                     "down": "c_proj"}}


def lora_target_modules(model_type: str, targets) -> list:
    """peft ``target_modules`` for the workbench's projection names in one family. Fused projections take all
    their parts or none (GPT-2 ``c_attn``, GPT-NeoX ``query_key_value``, Phi-3 ``qkv_proj`` hold q, k and v; Phi-3's
    ``gate_up_proj`` holds gate and up); MoE experts are fused 3-D weights in transformers, so MLP targets are
    refused for MoE families. A GeLU MLP has no gate: ``gate`` targets nothing there."""
    targets = set(targets)
    out = []
    if model_type in _SEPARATE_QKV_GELU:
        names = _SEPARATE_QKV_GELU[model_type]
        return [names[t] for t in ("q", "k", "v", "o", "up", "down") if t in targets]
    if model_type in _FUSED_QKV:
        qkv = targets & {"q", "k", "v"}
        if qkv and qkv != {"q", "k", "v"}:
            raise ValueError(f"lora_targets={sorted(targets)}: {model_type} fuses q, k and v into "
                             f"{_FUSED_QKV[model_type]}; target all three or none")
        if qkv:
            out.append(_FUSED_QKV[model_type])
        names = _NAMED[model_type]
        if model_type == "phi3":
            gu = targets & {"gate", "up"}
            if gu and gu != {"gate", "up"}:
                raise ValueError(f"lora_targets={sorted(targets)}: phi3 fuses gate and up into gate_up_proj; "
                                 f"target both or neither")
            if gu:
                out.append("gate_up_proj")
        elif "gate" in targets:
            targets = targets - {"gate"}  # no gate in a GeLU MLP
        out += [names[t] for t in ("o", "up", "down") if t in targets and t in names]
        return out
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe") and targets & {"gate", "up", "down"}:
        raise ValueError(f"lora_targets={sorted(targets)}: {model_type} keeps its experts as fused 3-D weights "
                         f"that peft's LoRA layers do not wrap; use q,k,v,o")
    return [_LLAMA_STYLE[t] for t in ("q", "k", "v", "o", "gate", "up", "down") if t in targets]


def targets_from_modules(model_type: str, modules) -> tuple:
    """The workbench's projection names for peft ``target_modules`` (the inverse of :func:`lora_target_modules`;
    a bare GPT-2 ``c_proj`` matches both the attention output and the MLP's down projection, as in peft)."""
    names = {v: k for k, v in _SEPARATE_QKV_GELU.get(model_type, _LLAMA_STYLE).items()}
    if model_type in _FUSED_QKV:
        names = {_FUSED_QKV[model_type]: ("q", "k", "v"), "gate_up_proj": ("gate", "up")}
        names.update({v: (k,) for k, v in _NAMED[model_type].items()})
        names.update({v.split(".")[-1]: () for v in _NAMED[model_type].values() if "." in v})
        if model_type == "gpt2":
            names["c_proj"] = ("o", "down")
            names["c_fc"] = ("up",)
        if model_type == "gpt_neox":
            names["dense"] = ("o",)
    out = []
    for mod in ([modules] if isinstance(modules, str) else modules):
        if mod == "all-linear":
            return tuple(("q", "k", "v", "o", "gate", "up", "down"))
        hit = names.get(mod)
        if hit is None:
            raise ValueError(f"LoRA target module {mod!r} is not a projection the workbench knows in {model_type}")
        out += [hit] if isinstance(hit, str) else list(hit)
    return tuple(dict.fromkeys(out))


def _launch_attn_implementation(model_type: str, attention: AttentionImpl) -> str:
    """The ``attn_implementation`` a launched run asks for: eager for unfused attention; for flash, sdpa, or
    flash_attention_2 where transformers refuses sdpa for the family (which needs the ``flash-attn`` package)."""
    if attention is AttentionImpl.UNFUSED:
        return "eager"
    if model_type not in _NO_SDPA:
        return "sdpa"
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        raise ValueError(f"attention='flash' for model_type {model_type!r} runs flash_attention_2 (transformers "
                         f"refuses sdpa for it: {_NO_SDPA[model_type]}), which needs the flash-attn package, not "
                         f"installed here; use attention 'unfused' (eager)")
    return "flash_attention_2"


def run_options(spec: ModelSpec, plan) -> dict:
    """What a launched run of an HF model needs beyond the specs (``run.json`` ``options["hf"]``), checked:
    the config path, whether weights are there, the attention implementation, gradient checkpointing and LoRA.
    ``ValueError`` when the spec no longer matches its config.json or asks for what the HF stack does not do."""
    from workbench.specs import Recompute

    if not spec.name.startswith("hf:"):
        raise ValueError(f"model {spec.name!r} is a transformers model without a config path: launch it as "
                         f"hf:PATH (a config.json or model directory)")
    imported = import_hf(spec.name[3:], seq_length=spec.seq_length)
    if imported.spec.parameter_counts() != spec.parameter_counts():
        raise ValueError(f"{spec.name}: the model fields were changed from its config.json "
                         f"({spec.num_parameters:,} vs {imported.spec.num_parameters:,} parameters); the run trains "
                         f"the config as written")
    if plan.recompute is Recompute.SELECTIVE:
        raise ValueError(f"recompute='{plan.recompute}' with a Hugging Face model: activation_checkpointing_enable() "
                         f"checkpoints whole decoder layers; use recompute 'none' or 'full'")
    every = hf_checkpoint_every(spec.num_layers, plan.recompute_layers, name=spec.name)
    lora = None
    if plan.lora_rank:
        lora = {"r": plan.lora_rank, "lora_alpha": 2 * plan.lora_rank, "lora_dropout": plan.lora_dropout,
                "target_modules": lora_target_modules(imported.model_type, plan.lora_targets)}
    return {"path": str(config_path(spec.name[3:]).parent.resolve()), "model_type": imported.model_type,
            "weights": imported.has_weights,
            "attn_implementation": _launch_attn_implementation(imported.model_type, spec.attention),
            # transformers' from_config/from_pretrained(experts_implementation=...) for the MoE families
            "experts_implementation": (str(spec.experts_implementation) if spec.experts_implementation is not None
                                       else None),
            "gradient_checkpointing": plan.recompute is Recompute.FULL, "checkpoint_every": every, "lora": lora}


def soft_capped(spec: ModelSpec) -> bool:
    """Whether a transformers model soft-caps its attention scores and final logits, ``tanh(x / cap) · cap``:
    Gemma 2 (``attn_logit_softcapping`` 50, ``final_logit_softcapping`` 30 in its configs; the structure with
    sandwich norms and no per-head Q/K norms; Gemma 3 replaced the caps by Q/K norms)."""
    from workbench.specs import Implementation

    return spec.implementation is Implementation.TRANSFORMERS and spec.sandwich_norm and not spec.qk_norm


def enable_layer_checkpointing(model, every_n_layers: int = 1) -> None:
    """transformers' activation checkpointing of decoder layers, non-reentrant, on a built ``model``: every layer, or
    with ``every_n_layers`` k layers 0, k, 2k, ... (:func:`workbench.specs.hf_checkpoint_every`). Through
    ``activation_checkpointing_enable`` where transformers has it (5.24 renamed it and added ``every_n_layers``; the
    old name warns there), ``gradient_checkpointing_enable`` before, which checkpoints every layer only."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=int(every_n_layers))
    elif every_n_layers != 1:
        import transformers

        raise ValueError(f"every_n_layers={every_n_layers}: checkpointing every k-th decoder layer needs transformers "
                         f">= 5.24 (activation_checkpointing_enable); this is {transformers.__version__}")
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def with_lora(model, **lora_config):
    """``peft.get_peft_model(model, LoraConfig(**lora_config))``, without the FutureWarning that peft's own read of
    transformers' renamed ``is_gradient_checkpointing`` raises (peft's code, nothing the caller can change)."""
    import warnings

    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, LoraConfig(**lora_config))
