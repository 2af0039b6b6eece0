"""Hugging Face config.json import: parameter counts equal transformers' own model, refusals name the field."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workbench import catalog  # noqa: E402
from workbench.hf import attention_for, build_model, import_hf  # noqa: E402
from workbench.specs import AttentionImpl  # noqa: E402

HF = Path(__file__).parent / "data" / "hf"
FAMILIES = sorted(p.name for p in HF.iterdir() if (p / "config.json").is_file())
ROOT = Path(__file__).resolve().parent.parent


def _transformers_count(path) -> int:
    model = build_model(path, device="meta")
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_count_equals_transformers(family):
    imported = import_hf(HF / family)
    assert imported.spec.num_parameters == _transformers_count(HF / family)


def test_all_families_have_a_config():
    types = {json.loads((HF / f / "config.json").read_text())["model_type"] for f in FAMILIES}
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gpt2", "gpt_neox", "phi3", "mixtral",
            "qwen2_moe", "qwen3_moe"} <= types


def test_family_specific_structure():
    qwen2 = import_hf(HF / "qwen2-0_5b").spec
    assert qwen2.qkv_bias and not qwen2.add_bias_linear and qwen2.tied_embeddings
    qwen3 = import_hf(HF / "qwen3-0_6b").spec
    assert qwen3.qk_norm and qwen3.head_dim == 128 and qwen3.query_projection_size != qwen3.hidden_size
    gemma = import_hf(HF / "gemma3-1b").spec
    assert gemma.sandwich_norm and gemma.is_gated
    gpt2 = import_hf(HF / "gpt2").spec
    assert gpt2.seq_length == 1024 and gpt2.max_position_embeddings == 1024 and gpt2.hidden_dropout == 0.1
    moe = import_hf(HF / "qwen1_5-moe-a2_7b").spec
    assert moe.num_experts == 60 and moe.moe_top_k == 4 and moe.shared_expert_ffn_hidden_size == 5632
    llama = import_hf(HF / "llama3-8b").spec
    assert llama.seq_length == 4096 and llama.attention_dropout == 0.0 and llama.hidden_dropout == 0.0


def test_catalog_hf_prefix_and_overrides():
    spec = catalog.model(f"hf:{HF / 'llama3-8b'}", seq_length=2048)
    assert spec.seq_length == 2048 and spec.num_parameters == 8_030_261_248
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=1024"):
        catalog.model(f"hf:{HF / 'gpt2'}", seq_length=2048)


def test_attention_implementations():
    assert attention_for("eager") is AttentionImpl.UNFUSED
    assert attention_for("sdpa") is attention_for(None) is attention_for("flash_attention_2") is AttentionImpl.FLASH
    with pytest.raises(ValueError, match="attn_implementation='flex'"):
        attention_for("flex")
    assert import_hf(HF / "tiny-llama", attn_implementation="eager").spec.attention is AttentionImpl.UNFUSED


@pytest.mark.parametrize("change, message", [
    ({"model_type": "bert"}, "model_type 'bert' is not supported"),
    ({"model_type": "gemma3"}, "multimodal Gemma 3"),
    ({"frobnicate_layers": 3}, "field 'frobnicate_layers' is not a LlamaConfig field"),
    ({"auto_map": {"AutoModel": "x.Y"}}, "field 'auto_map'"),
    ({"quantization_config": {"load_in_4bit": True}}, "quantization_config"),
    ({"attention_bias": True, "mlp_bias": False}, "attention_bias=True with mlp_bias=False"),
])
def test_refusals_name_the_field(change, message, tmp_path):
    data = json.loads((HF / "tiny-llama" / "config.json").read_text())
    data.update(change)
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        import_hf(tmp_path)


def test_mixed_dense_and_moe_layers_refused(tmp_path):
    data = json.loads((HF / "qwen3-moe-tiny" / "config.json").read_text())
    data["mlp_only_layers"] = [0]
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"mlp_only_layers=\[0\]"):
        import_hf(tmp_path)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ValueError, match="no such config.json"):
        import_hf(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        import_hf(tmp_path)


def _cli(*args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def test_cli_import_and_estimate():
    out = _cli("import", str(HF / "qwen3-0_6b"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kind"] == "huggingface" and data["parameters"] == 596_049_920
    out = _cli("estimate", "--model", f"hf:{HF / 'mistral-7b'}", "--gpu", "A100-80GB", "--zero", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"]["parameters"] == 7_248_023_552
    out = _cli("estimate", "--model", "hf:/no/such/dir")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no such config.json" in out.stderr
