"""Granite, StarCoder2, SmolLM3, OLMo 2 and OLMo 3 through the Hugging Face import.

Fixtures (tests/data/hf/, the published sizes): granite-3-2b is ibm-granite/granite-3.0-2b-base, starcoder2-3b is
bigcode/starcoder2-3b, smollm3-3b is HuggingFaceTB/SmolLM3-3B, olmo2-1b is allenai/OLMo-2-0425-1B, olmo3-7b is
allenai/Olmo-3-1025-7B. Their parameter counts against transformers' own models are checked by
tests/test_hf.py::test_parameter_count_equals_transformers (every fixture folder)."""
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workbench import memory as M  # noqa: E402
from workbench.hf import build_model, import_hf, lora_target_modules, targets_from_modules  # noqa: E402
from workbench.specs import AttentionImpl  # noqa: E402
from test_hf import _kept_after_forward_bytes  # noqa: E402  (one counting of kept bytes for every family)

HF = Path(__file__).parent / "data" / "hf"


def test_granite_sizes_and_structure():
    granite = import_hf(HF / "granite-3-2b")
    g = granite.spec
    assert g.num_parameters == 2_533_531_648 and len(granite.notes) == 1
    assert granite.notes[0].startswith("residual_multiplier=0.22: two scalar products per layer, keeping nothing")
    assert str(g.normalization) == "rmsnorm" and g.is_gated and not g.add_bias_linear and not g.qkv_bias
    assert g.tied_embeddings and g.num_query_groups == 8 and g.head_dim == 64 and not g.qk_norm
    assert g.attention_dropout == 0.1 and g.hidden_dropout == 0.0 and g.seq_length == 4096


def test_starcoder2_sizes_and_structure():
    starcoder = import_hf(HF / "starcoder2-3b")
    s = starcoder.spec
    assert s.num_parameters == 3_030_371_328
    assert str(s.normalization) == "layernorm" and str(s.activation) == "gelu" and not s.is_gated
    assert s.add_bias_linear and s.qkv_bias and s.tied_embeddings and str(s.position_embedding) == "rotary"
    assert s.num_query_groups == 2 and s.head_dim == 128 and s.ffn_hidden_size == 12288
    assert s.hidden_dropout == s.attention_dropout == 0.1
    assert any("sliding-window attention (4096 tokens)" in n for n in starcoder.notes)


def test_smollm3_sizes_and_structure():
    smol = import_hf(HF / "smollm3-3b")
    m = smol.spec
    assert m.num_parameters == 3_075_098_624 and m.is_gated and m.tied_embeddings and not m.add_bias_linear
    assert m.num_query_groups == 4 and m.head_dim == 128 and m.seq_length == 4096
    assert smol.max_position_embeddings == 65536
    assert [n for n in smol.notes if "9 of 36 layers without rotary (no_rope_layers, NoPE)" in n]


def test_granite_multipliers_change_no_parameter_or_memory():
    """embedding_multiplier, residual_multiplier, attention_multiplier and logits_scaling are scalars: a Granite
    config equals the same Llama config in parameters and in every memory term."""
    data = json.loads((HF / "granite-3-2b" / "config.json").read_text())
    llama = {k: v for k, v in data.items() if k not in ("embedding_multiplier", "residual_multiplier",
                                                        "attention_multiplier", "logits_scaling", "architectures")}
    g, ll = import_hf(data).spec, import_hf(dict(llama, model_type="llama")).spec
    assert g.replace(name=ll.name) == ll


def test_starcoder2_lora_modules_equal_peft():
    from peft import LoraConfig, get_peft_model

    from workbench.params import lora_params_per_layer

    config = dict(model_type="starcoder2", hidden_size=64, intermediate_size=256, num_attention_heads=4,
                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=256, bos_token_id=0, eos_token_id=0)
    spec = import_hf(config).spec
    everything = ("q", "k", "v", "o", "gate", "up", "down")
    modules = lora_target_modules("starcoder2", everything)
    assert modules == ["q_proj", "k_proj", "v_proj", "o_proj", "c_fc", "c_proj"]
    assert targets_from_modules("starcoder2", modules) == ("q", "k", "v", "o", "up", "down")
    net = get_peft_model(build_model(config, device="meta"), LoraConfig(r=8, target_modules=modules))
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == 2 * lora_params_per_layer(spec, 8, everything)


def test_starcoder2_keeps_q_k_v_apart_where_gpt2_and_neox_fuse_them():
    """StarCoder2 is a LayerNorm family like GPT-2 and GPT-NeoX but builds q_proj, k_proj, v_proj: peft wraps three
    modules for q, k, v (one c_attn / query_key_value in GPT-2 / NeoX), ZeRO-3 fetches six per layer, and every
    projection has its own weight and bias; the flag is refused off a dense LayerNorm transformers model."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    from workbench import params, timing
    from workbench.specs import ModelSpec

    config = dict(model_type="starcoder2", hidden_size=64, intermediate_size=256, num_attention_heads=4,
                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=256, bos_token_id=0, eos_token_id=0)
    spec = import_hf(config).spec
    assert spec.separate_qkv and not params.hf_fused_qkv(spec)
    net = get_peft_model(build_model(config, device="meta"),
                         LoraConfig(r=4, target_modules=lora_target_modules("starcoder2", ("q", "k", "v"))))
    wrapped = sum(isinstance(m, LoraLayer) for m in net.modules())
    assert wrapped == 2 * params.lora_modules_per_layer(spec, 4, ("q", "k", "v")) == 6
    assert timing.zero3_modules_per_layer(spec.replace(hidden_size=2048, num_attention_heads=16,
                                                       num_query_groups=2, ffn_hidden_size=8192)) == 6
    assert params.layer_linear_tensors(spec) == 12  # q, k, v, o, c_fc, c_proj: weight and bias each
    gpt2 = import_hf(HF / "gpt2").spec
    assert not gpt2.separate_qkv and params.hf_fused_qkv(gpt2)
    with pytest.raises(ValueError, match="separate_qkv=True .* needs a dense LayerNorm transformers model; got "
                                         "implementation='megatron'"):
        ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, separate_qkv=True)


def test_llama_style_lora_module_names():
    assert lora_target_modules("granite", ("q", "gate")) == ["q_proj", "gate_proj"]
    assert lora_target_modules("smollm3", ("q", "gate")) == ["q_proj", "gate_proj"]


_TINY = dict(hidden_size=64, intermediate_size=176, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
_GRANITE = dict(_TINY, model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22,
                attention_multiplier=0.015625, logits_scaling=8.0)
_STARCODER2 = dict(_TINY, model_type="starcoder2", intermediate_size=256, use_bias=True)
_SMOLLM3 = dict(_TINY, model_type="smollm3")
_OLMO2 = dict(_TINY, model_type="olmo2")
_OLMO3 = dict(_TINY, model_type="olmo3", sliding_window=4096)
_KW = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2, recompute=0)


@pytest.mark.parametrize("name, config, two, one", [
    ("granite", _GRANITE, {}, {}),
    ("starcoder2", _STARCODER2, {}, {}),
    ("starcoder2 without biases", dict(_STARCODER2, use_bias=False), {}, {}),
    ("smollm3 rotary layer", _SMOLLM3, dict(no_rope_layers=[1, 1]), dict(no_rope_layers=[1])),
    ("smollm3 NoPE layer", _SMOLLM3, dict(no_rope_layers=[1, 0]), dict(no_rope_layers=[1])),
    ("olmo2", _OLMO2, {}, {}),
    ("olmo3 sliding layer", _OLMO3, dict(layer_types=["sliding_attention"] * 2),
     dict(layer_types=["sliding_attention"])),
    ("olmo3 full layer", _OLMO3, dict(layer_types=["full_attention"] * 2), dict(layer_types=["full_attention"])),
])
def test_layer_keeps_what_the_memory_model_counts(name, config, two, one):
    """One decoder layer's kept bytes (2 layers less 1, sdpa, as tests/test_hf.py counts Llama's) equal the memory
    model's within 1 %: Granite's scalar multipliers keep nothing (a Llama layer's bytes exactly), StarCoder2's
    LayerNorm and GeLU MLP keep what GPT-NeoX's do, a SmolLM3 NoPE layer keeps what a rotary one does (its q and
    k unrotated views instead of the rotated copies), and an OLMo 2/3 layer, whose norms follow attention and MLP and
    whose q/k norms span the projections, keeps what a Qwen3 layer keeps with its norms' products in fp32."""
    seq = 128
    measured = _kept_after_forward_bytes({**config, **two}, 2, seq) - _kept_after_forward_bytes({**config, **one}, 1,
                                                                                                 seq)
    spec = import_hf(dict(config, num_hidden_layers=2, **two), seq_length=seq).spec
    assert spec.attention is AttentionImpl.FLASH
    _, modelled = M.layer_activation_bytes(spec, **_KW)
    assert abs(modelled - measured) <= 0.01 * measured, (name, modelled, measured)
    if name == "granite":
        llama = dict(config, model_type="llama")
        for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            llama.pop(key)
        assert measured == _kept_after_forward_bytes(llama, 2, seq) - _kept_after_forward_bytes(llama, 1, seq)


@pytest.mark.parametrize("name, config", [
    ("granite", dict(_GRANITE, num_key_value_heads=4, attention_dropout=0.1)),
    ("starcoder2", dict(_STARCODER2, num_key_value_heads=4, residual_dropout=0.1, embedding_dropout=0.1,
                        attention_dropout=0.1)),
    ("smollm3", dict(_SMOLLM3, num_key_value_heads=4)),
    ("olmo2", dict(_OLMO2, attention_dropout=0.1)),
])
def test_eager_layer_with_dropout_keeps_what_the_memory_model_counts(name, config):
    """Eager attention (the fp32 softmax, the 16-bit probabilities, the dropout mask and output) and StarCoder2's
    residual dropout. On the CPU ``F.dropout`` keeps its mask as a 16-bit tensor (``input * mask``), where the GPU's
    fused dropout keeps a 1-byte one, as the memory model counts: the CPU count adds the byte per masked element."""
    seq = 128
    measured = _kept_after_forward_bytes(config, 2, seq, "eager") - _kept_after_forward_bytes(config, 1, seq, "eager")
    spec = import_hf(dict(config, num_hidden_layers=2), seq_length=seq, attn_implementation="eager").spec
    _, modelled = M.layer_activation_bytes(spec, **_KW)
    cpu_masks = ((spec.num_attention_heads * seq * seq if spec.attention_dropout else 0)
                 + (2 * seq * spec.hidden_size if spec.hidden_dropout else 0))
    assert abs(modelled + cpu_masks - measured) <= 0.01 * measured, (name, modelled, cpu_masks, measured)


def test_olmo_sizes_and_structure():
    """OLMo 2 and 3: RMSNorm after attention and MLP only, q/k norms over the whole projections (a·d and g·d
    weights where Qwen3's are d each), untied embeddings; OLMo 3's sliding layers are noted."""
    from workbench import params as P

    olmo2 = import_hf(HF / "olmo2-1b")
    o = olmo2.spec
    assert o.num_parameters == 1_484_916_736 and olmo2.notes == ()
    assert o.post_norm and o.qk_norm and o.qk_norm_projection and not o.sandwich_norm and not o.tied_embeddings
    assert P.qk_norm_widths(o) == (2048, 2048) and P.qk_norm_params(o) == 4096
    assert P.qk_norm_widths(o.replace(qk_norm_projection=False)) == (128, 128)
    olmo3 = import_hf(HF / "olmo3-7b")
    assert olmo3.spec.num_parameters == 7_298_011_136 and olmo3.spec.post_norm and olmo3.spec.seq_length == 4096
    assert olmo3.notes == ("sliding-window attention (4096 tokens) counted as full causal attention",)
    # every layer full: nothing to note
    data = json.loads((HF / "olmo3-7b" / "config.json").read_text())
    assert import_hf(dict(data, layer_types=["full_attention"] * 32)).notes == ()


def test_olmo_fields_are_checked():
    from workbench.specs import ModelSpec

    base = dict(name="m", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=128)
    with pytest.raises(ValueError, match=r"qk_norm_projection=True sizes the query/key norms; it needs qk_norm=True"):
        ModelSpec(**base, implementation="transformers", qk_norm_projection=True)
    with pytest.raises(ValueError, match=r"post_norm=True and qk_norm_projection=True \(OLMo 2's layer\) needs "
                                         r"implementation='transformers'"):
        ModelSpec(**base, qk_norm=True, qk_norm_projection=True, post_norm=True)
    with pytest.raises(ValueError, match=r"post_norm=True and sandwich_norm=True"):
        ModelSpec(**base, implementation="transformers", post_norm=True, sandwich_norm=True)


@pytest.mark.parametrize("family, change, message", [
    ("granite-3-2b", {"attention_bias": True}, "attention_bias=True with mlp_bias=False"),
    ("smollm3-3b", {"mlp_bias": True}, "attention_bias=False with mlp_bias=True"),
    ("starcoder2-3b", {"hidden_act": "silu"}, "activation 'silu' is not modelled"),
    ("starcoder2-3b", {"frobnicate": 1}, "field 'frobnicate' is not a Starcoder2Config field"),
    ("olmo2-1b", {"attention_bias": True}, "attention_bias=True puts a bias on the output projection"),
])
def test_refusals_name_the_field(family, change, message, tmp_path):
    data = json.loads((HF / family / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, **change}))
    with pytest.raises(ValueError, match=message):
        import_hf(tmp_path)


def test_starcoder2_release_keys_and_dropout_note():
    """The BigCode release files' mlp_type / norm_type / activation_function / layer_norm_epsilon are read by
    nothing in transformers: accepted, the model unchanged; an embedding dropout without residual dropout is
    noted. ``workbench import`` prints nothing on stderr (Starcoder2Config's own defaults warn about their token
    ids when built bare)."""
    import subprocess
    import sys

    data = json.loads((HF / "starcoder2-3b" / "config.json").read_text())
    plain = import_hf(data).spec
    released = import_hf(dict(data, mlp_type="default", norm_type="layer_norm", activation_function="gelu",
                              layer_norm_epsilon=1e-5)).spec
    assert released == plain
    noted = import_hf(dict(data, residual_dropout=0.0))
    assert noted.spec.hidden_dropout == 0.0
    assert [n for n in noted.notes if n.startswith("embedding_dropout=0.1 counted as residual_dropout=0.0")]
    run = subprocess.run([sys.executable, "-m", "workbench", "import", str(HF / "starcoder2-3b"), "--json"],
                         capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"), check=True)
    assert run.stderr == "" and json.loads(run.stdout)["parameters"] == 3_030_371_328
