"""Hugging Face config.json import: parameter counts equal transformers' own model, refusals name the field."""
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workbench import catalog  # noqa: E402
from workbench.hf import attention_for, build_model, import_hf  # noqa: E402
from workbench.specs import AttentionImpl, Implementation  # noqa: E402

HF = Path(__file__).parent / "data" / "hf"
FAMILIES = sorted(p.name for p in HF.iterdir() if (p / "config.json").is_file())


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


def test_attention_kernels_transformers_refuses(capsys, tmp_path):
    """Gemma 2's class refuses sdpa (no soft-capping): refused by name in import, the CLI and the launch options;
    with nothing named transformers runs eager. The refusal table matches the installed classes' flags."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from workbench import cli, hf

    for model_type in hf.SUPPORTED_MODEL_TYPES:
        cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
        assert (model_type not in hf._NO_SDPA) == bool(cls._supports_sdpa), model_type
        assert (model_type not in hf._NO_FLASH) == bool(cls._supports_flash_attn), model_type
    gemma2 = import_hf(HF / "gemma2-2b")
    assert gemma2.attn_implementation is None and gemma2.effective_attn_implementation == "eager"
    assert gemma2.spec.attention is AttentionImpl.UNFUSED
    assert import_hf(HF / "gemma2-2b", attn_implementation="flash_attention_2").spec.attention is AttentionImpl.FLASH
    with pytest.raises(ValueError, match="attn_implementation='sdpa': transformers refuses it for model_type "
                                         "'gemma2' .*; use eager or flash_attention_2 or flash_attention_3"):
        import_hf(HF / "gemma2-2b", attn_implementation="sdpa")
    config = json.loads((HF / "gemma2-2b" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "attn_implementation": "sdpa"}))
    with pytest.raises(ValueError, match="config.json: attn_implementation='sdpa'"):
        import_hf(tmp_path)
    for command in ("estimate", "plan", "advise"):
        assert cli.main([command, "--model", f"hf:{HF / 'gemma2-2b'}", "--gpu", "H100-80GB", "--gpus", "8",
                         "--gbs", "64", "--attn-implementation", "sdpa"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "transformers refuses it for model_type 'gemma2'" in err, command
    assert import_hf(HF / "qwen3-0_6b", attn_implementation="sdpa").spec.attention is AttentionImpl.FLASH
    flash = gemma2.spec.replace(attention="flash")
    assert hf._launch_attn_implementation("gemma2", AttentionImpl.UNFUSED) == "eager"
    assert hf._launch_attn_implementation("llama", flash.attention) == "sdpa"
    import importlib.util
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ValueError, match="runs flash_attention_2 .* flash-attn package"):
            hf._launch_attn_implementation("gemma2", flash.attention)


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
    with pytest.raises(ValueError, match="the folder has no config.json"):
        import_hf(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        import_hf(tmp_path)
    (tmp_path / "config.json").write_bytes(b'{"model_type": "llama\xff"}')
    with pytest.raises(ValueError, match=r"config.json: not UTF-8 text \(byte 0xff at offset 21\)"):
        import_hf(tmp_path)


def test_config_values_transformers_refuses_are_named():
    """transformers 5 wraps these in huggingface_hub's strict-dataclass errors; the message names field and numbers."""
    with pytest.raises(ValueError, match=r"LlamaConfig rejects it: The hidden size \(4096\) is not a multiple of "
                                         r"the number of attention heads \(7\)"):
        import_hf(dict(_SIZES, hidden_size=4096, num_attention_heads=7))
    with pytest.raises(ValueError, match=r"LlamaConfig rejects it: .*'hidden_size' expected int, got str"):
        import_hf(dict(_SIZES, hidden_size="wide"))


_SIZES = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "vocab_size": 512, "intermediate_size": 176}


@pytest.mark.parametrize("data, missing", [
    ({"model_type": "llama"}, "hidden_size, num_hidden_layers, num_attention_heads, vocab_size, intermediate_size"),
    ({k: v for k, v in _SIZES.items() if k != "intermediate_size"}, "intermediate_size"),
    (dict(_SIZES, model_type="mixtral"), "num_local_experts, num_experts_per_tok"),
    ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "vocab_size": 99}, "n_head"),
])
def test_a_config_without_its_sizes_is_refused_naming_them(data, missing):
    """transformers would fill them with the family's defaults (LlamaConfig() is a 7B model) and price that."""
    with pytest.raises(ValueError, match=f"config.json: no {missing} \\(model_type "):
        import_hf(data)
    # GPT-2 accepts its aliases (hidden_size for n_embd ...), as transformers does
    assert import_hf({"model_type": "gpt2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "vocab_size": 99}).spec.hidden_size == 64


def test_seq_beyond_a_rotary_context_warns_naming_both_numbers(capsys):
    from workbench import cli
    from workbench.hf import context_warning

    assert context_warning(4096, 4096) is None and context_warning(4096, None) is None
    assert "seq_length=8192 exceeds the model's max_position_embeddings=4096" in context_warning(8192, 4096)
    imp = import_hf(HF / "tiny-llama", seq_length=512)  # max_position_embeddings 256
    assert imp.max_position_embeddings == 256 and "seq_length=512" in imp.context_warning
    assert cli.main(["estimate", "--model", f"hf:{HF / 'tiny-llama'}", "--seq", "512", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["model"]["parameters"] == 158_016  # an estimate, not a refusal; stdout only the payload
    assert err.count("\n") == 1 and "warning: seq_length=512 exceeds the model's max_position_embeddings=256" in err
    assert cli.main(["estimate", "--model", f"hf:{HF / 'tiny-llama'}", "--seq", "256", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_import_and_estimate(capsys):
    from workbench import cli

    assert cli.main(["import", str(HF / "qwen3-0_6b"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "huggingface" and data["parameters"] == 596_049_920
    assert cli.main(["estimate", "--model", f"hf:{HF / 'mistral-7b'}", "--gpu", "A100-80GB", "--zero", "2",
                     "--attn-implementation", "eager", "--lora-rank", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["parameters"] == 7_248_023_552
    assert cli.main(["estimate", "--model", "hf:/no/such/dir"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such config.json" in err
    assert cli.main(["estimate", "--model", f"hf:{HF / 'tiny-llama'}", "--engine", "megatron"]) == 2
    assert "trains under DeepSpeed ZeRO data parallel" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# LoRA and the Hugging Face stack in the memory and time models
# ---------------------------------------------------------------------------------------------------------------
from workbench import memory as M  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.params import lora_params_per_layer  # noqa: E402
from workbench.specs import ClusterSpec, ParallelPlan  # noqa: E402


def test_lora_parameter_count_equals_peft():
    from peft import LoraConfig, get_peft_model

    spec = import_hf(HF / "tiny-llama").spec
    for targets, modules in ((("q", "k", "v", "o", "gate", "up", "down"),
                              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                             (("q", "v"), ["q_proj", "v_proj"])):
        net = get_peft_model(build_model(HF / "tiny-llama", device="meta"), LoraConfig(r=8, target_modules=modules))
        trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
        assert trainable == spec.num_layers * lora_params_per_layer(spec, 8, targets)


def _terms(spec, **plan):
    cluster = ClusterSpec(gpu="A100-40GB", gpus_per_node=8)
    return estimate(spec, cluster, ParallelPlan(world_size=8, **plan)).memory.stages[0].terms


def test_lora_frozen_weights_and_zero_partitioning():
    spec = import_hf(HF / "llama3-8b", seq_length=2048).spec
    n = spec.num_parameters
    full = _terms(spec, zero_stage=2)
    lora2 = _terms(spec, zero_stage=2, lora_rank=16)
    lora3 = _terms(spec, zero_stage=3, lora_rank=16)
    adapters = spec.num_layers * lora_params_per_layer(spec, 16, ("q", "k", "v", "o", "gate", "up", "down"))
    # ZeRO-2 leaves frozen weights whole on every rank (DeepSpeed's flat groups hold trainable parameters only)
    assert lora2.weights == pytest.approx(2 * (n + adapters), rel=1e-6)
    # ZeRO-3 partitions every parameter, frozen or not
    assert lora3.weights == pytest.approx(2 * (n + adapters) / 8, rel=1e-6)
    # optimizer states only for the adapters: 12 bytes / 8 ranks each
    assert lora2.optimizer == pytest.approx(12 * adapters / 8, rel=1e-6)
    assert full.optimizer == pytest.approx(12 * n / 8, rel=1e-6)
    assert lora2.optimizer < 0.01 * full.optimizer


def test_lora_backward_skips_weight_gradients(monkeypatch):
    from workbench import timing

    # the GPU's passes alone: without the transformers host floor, which LoRA's adapters raise past the GPU time here
    for key in ("layer_base_host_s", "lora_module_host_s"):
        monkeypatch.setitem(timing.calibration()["transformers"], key, 0.0)
    monkeypatch.setitem(timing.calibration()["layer_ops"], "op_host_s", 0.0)
    spec = import_hf(HF / "llama3-8b", seq_length=2048).spec
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8)
    full = estimate(spec, cluster, ParallelPlan(world_size=8, zero_stage=2)).time
    lora = estimate(spec, cluster, ParallelPlan(world_size=8, zero_stage=2, lora_rank=16)).time
    assert 0.6 < lora.breakdown["compute"] / full.breakdown["compute"] < 0.85  # 4 of 6 GEMM passes + the rest
    assert lora.breakdown["dp_comm"] < 0.05 * full.breakdown["dp_comm"]


def test_transformers_loss_and_eager_attention_memory():
    hf = import_hf(HF / "llama3-8b", seq_length=2048).spec
    mg = hf.replace(implementation="megatron")
    kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2)
    logits = lambda m: M.output_activation_bytes(m, **kw) - 2 * 2 * 2048 * 4096  # noqa: E731
    assert logits(hf) == 12 * 2048 * 128256  # fp32 log-softmax + two fp32 gradients per logit
    assert logits(mg) == 6 * 2048 * 128256
    eager = hf.replace(attention="unfused")
    _, eager_layer = M.layer_activation_bytes(eager, recompute=0, **kw)
    _, mg_layer = M.layer_activation_bytes(eager.replace(implementation="megatron"), recompute=0, **kw)
    # without dropout both keep the fp32 softmax and the 16-bit probabilities the P @ V matmul saves (6 bytes/score);
    # megatron-core's layer keeps its glu's (x_linear + offset) copy and the product (2·v·s·f); both keep K and V
    # repeated to all 32 heads for their two matmuls (transformers' repeat_kv, megatron-core's expand); transformers'
    # unfused ops keep, per RMSNorm, the fp32 input and the 16-bit down-cast beside the output (4 + v more per
    # element, two norms: 8·s·h), and SiLU × up one f-wide tensor more than a fused SwiGLU (v·s·f)
    s, h, f = 2048, 4096, 14336
    assert mg_layer - eager_layer == 2 * 2 * s * f - (8 * s * h + 2 * s * f)
    _, flash_layer = M.layer_activation_bytes(eager.replace(attention="flash"), recompute=0, **kw)
    # (and eager keeps K and V repeated to the 32 query heads: 2·v·s·(q − kv))
    assert eager_layer - flash_layer == 6 * 32 * 2048 * 2048 - 4 * 32 * 2048 + 2 * 2 * 2048 * (4096 - 1024)
    # GPT-2's eager softmax stays in bf16: softmax output 2 + dropout mask 1 + dropped probabilities 2 per score, and
    # no megatron-core scores buffer; eager's matmuls keep the q, k, v copies the generic count has, SDPA keeps
    # contiguous copies of q and k besides (2·v·s·h)
    gpt2 = import_hf(HF / "gpt2", seq_length=1024, attn_implementation="eager").spec
    assert gpt2.attention_dropout > 0
    kw1 = dict(kw, value_bytes=2)
    _, g_eager = M.layer_activation_bytes(gpt2, recompute=0, **kw1)
    _, g_flash = M.layer_activation_bytes(gpt2.replace(attention="flash"), recompute=0, **kw1)
    assert g_eager - g_flash == 5 * 12 * 1024 * 1024 - 4 * 12 * 1024 - 2 * 2 * 1024 * 768
    buffers = dict(engine=0, zero_stage=0, tensor_parallel=1, micro_batch=1, context_parallel=1, value_bytes=2)
    assert M.buffer_bytes(gpt2, **buffers) == 0 < M.buffer_bytes(gpt2.replace(implementation="megatron"), **buffers)


def test_hf_checkpointing_and_lora_bucket_timing(monkeypatch):
    """Checkpointed decoder layers: the recomputed layer and the loss are never alive together; LoRA under
    ZeRO-1/2: the reduce buckets appear after the loss backward (frozen head), so the backward peak is the larger of
    the two phases, not their sum; ZeRO-3 keeps the sum. Step time: each checkpointed transformers layer's host
    work (its own, the recompute's forward share again and the checkpoint machinery) shows where it outlasts the
    GPU's, a megatron-core layer has none of it."""
    from workbench import timing

    spec = import_hf(HF / "llama3-8b", seq_length=2048).spec
    kw = dict(stage=0, engine=0, tensor_parallel=1, pipeline_parallel=1, virtual_pipeline=1, context_parallel=1,
              sequence_parallel=0, data_parallel=8, micro_batch=1, num_microbatches=1, recompute_layers=32,
              value_bytes=2)
    out = M.output_activation_bytes(spec, micro_batch=1, tensor_parallel=1, sequence_parallel=False,
                                    context_parallel=1, value_bytes=2)
    full_layer = M.layer_activation_bytes(spec, recompute=0, micro_batch=1, tensor_parallel=1,
                                          sequence_parallel=False, context_parallel=1, value_bytes=2)[1]
    inputs = 32 * 2 * 2048 * 4096  # each checkpointed layer keeps its 16-bit input
    hf = M.stage_terms(spec, zero_stage=3, recompute=2, **kw)
    assert hf["backward_activations"] == pytest.approx(inputs + max(out, full_layer))
    lora = M.stage_terms(spec, zero_stage=2, recompute=2, lora_params_per_layer=1e5, **kw)
    buckets = M.buffer_bytes(spec, engine=0, zero_stage=2, tensor_parallel=1, micro_batch=1, context_parallel=1,
                             value_bytes=2)
    assert lora["activations"] + lora["buffers"] == pytest.approx(inputs + max(out, full_layer + buckets))
    zero3 = M.stage_terms(spec, zero_stage=3, recompute=2, lora_params_per_layer=1e5, **kw)
    assert zero3["activations"] + zero3["buffers"] == pytest.approx(inputs + max(out, full_layer) + zero3["buffers"])
    # time: the checkpointed layers' host work shows where it outlasts the GPU work of the whole micro-batch
    # (every layer's forward, recompute and backward, the logits and the loss), only for a transformers model
    from workbench import encode, layerops

    cal = timing.calibration()["transformers"]
    # both implementations price the attention core alike only off Transformer Engine's fused attention (a
    # megatron-core model with flash attention on Hopper runs it at its own measured rate): eager attention here
    small = import_hf(HF / "qwen2-0_5b", seq_length=512).spec.replace(attention="unfused")
    layer = layerops.layer_host_seconds(small)  # a plain layer's host seconds
    per_layer = ((1 + cal["layer_forward_host_share"]) * layer  # a checkpointed layer's host seconds
                 + cal["recompute_layer_overhead_s"])
    # the megatron-core twin stands for the GPU work alone: without its local-spec micro-step host floor
    monkeypatch.setattr(encode, "layer_host_seconds",
                        lambda m: 0.0 if m.implementation is Implementation.MEGATRON else layerops.layer_host_seconds(m))
    # ... and the transformers layers' GPU work priced as the twin's (counted bytes and the GEMM time scale apart)
    monkeypatch.setattr(encode, "layer_memory_inputs", lambda m, precision, constants, gpu_name="": dict(
        layer_memory_bytes_forward=0.0, layer_memory_bytes_backward=0.0, layer_memory_hbm_efficiency=1.0,
        weight_gemm_time_scale=1.0))
    cluster, plan = ClusterSpec(gpu="H200", gpus_per_node=1), ParallelPlan(world_size=1, zero_stage=2,
                                                                         recompute="full")
    hf_t = estimate(small, cluster, plan).time
    mg_t = estimate(small.replace(implementation="megatron"), cluster, plan).time
    gpu = mg_t.breakdown["compute"] + mg_t.breakdown["recompute"]
    assert 2 * hf_t.layer_forward_seconds + hf_t.layer_backward_seconds < per_layer
    assert 0 < gpu < small.num_layers * per_layer
    hf_both = hf_t.breakdown["compute"] + hf_t.breakdown["recompute"]
    assert hf_both - gpu == pytest.approx(small.num_layers * per_layer - gpu)
    # the plain host floor (every layer's own host time) outlasts the GPU here: the rest, what checkpointing adds,
    # is the recompute's
    assert small.num_layers * layer > gpu
    assert hf_t.breakdown["recompute"] - mg_t.breakdown["recompute"] == pytest.approx(
        small.num_layers * (per_layer - layer))
    # the same layers with a 24x larger micro-batch: the GPU's queue outlasts the host work, nothing is added
    # although each layer's own kernels still take less than the per-layer host time
    long = plan.replace(micro_batch_size=24, global_batch_size=24)
    hf_long = estimate(small, cluster, long).time
    mg_long = estimate(small.replace(implementation="megatron"), cluster, long).time
    assert 2 * hf_long.layer_forward_seconds + hf_long.layer_backward_seconds < per_layer
    assert hf_long.breakdown["recompute"] == pytest.approx(mg_long.breakdown["recompute"])
    big = estimate(spec, ClusterSpec(gpu="H200", gpus_per_node=8),
                   ParallelPlan(world_size=8, zero_stage=2, recompute="full", micro_batch_size=4)).time
    assert big.breakdown["recompute"] == pytest.approx(32 * big.layer_forward_seconds)  # hidden: nothing added


def test_planner_and_advisor_offer_lora():
    from workbench.advisor import advise
    from workbench.planner import search

    spec = import_hf(HF / "llama3-8b", seq_length=2048).spec
    cluster = ClusterSpec(gpu="A100-40GB", gpus_per_node=8)
    advice = advise(spec, cluster, ParallelPlan(world_size=8, zero_stage=2, micro_batch_size=2, global_batch_size=64))
    finding = next(f for f in advice.findings if f.id == "lora_option")
    assert "full fine-tune does not fit on 8 x A100-40GB" in finding.message and "LoRA r=16 does" in finding.message
    two = ClusterSpec(gpu="A100-40GB", gpus_per_node=2)
    with pytest.raises(ValueError, match="LoRA r=16 does, with deepspeed"):
        search(spec, two, global_batch_size=64, offload=False)
    found = search(spec, two, global_batch_size=64, offload=False, lora_rank=16)
    assert found.best.plan.lora_rank == 16 and str(found.best.plan.engine) == "deepspeed"


def test_prepare_hf_run_writes_options_and_refuses_what_the_stack_cannot_run(tmp_path):
    from workbench.hf import lora_target_modules
    from workbench.runs.launcher import prepare

    cluster = ClusterSpec(gpu="cpu", gpus_per_node=2, host_memory_gib_per_node=24)
    gpt2 = catalog.model(f"hf:{HF / 'tiny-gpt2'}", seq_length=32)
    prepared = prepare(gpt2, cluster, ParallelPlan(world_size=2, zero_stage=3, lora_rank=4, precision="fp32"),
                       steps=1, nproc=2, run_dir=tmp_path / "r")
    hf = json.loads((prepared.run_dir / "run.json").read_text())["options"]["hf"]
    assert hf["lora"]["target_modules"] == ["c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
    assert (prepared.run_dir / "hf_config.json").is_file() and not (prepared.run_dir / "megatron_args.json").exists()
    with pytest.raises(ValueError, match="fuses q, k and v into c_attn"):
        lora_target_modules("gpt2", ("q", "v"))
    with pytest.raises(ValueError, match="fused 3-D weights"):
        lora_target_modules("mixtral", ("q", "up"))
    with pytest.raises(ValueError, match="gradient_checkpointing_enable"):
        prepare(gpt2, cluster, ParallelPlan(world_size=2, recompute="selective", precision="fp32"), steps=1, nproc=2,
                run_dir=tmp_path / "s")
    with pytest.raises(ValueError, match="changed from its config.json"):
        prepare(gpt2.replace(num_layers=3), cluster, ParallelPlan(world_size=2, precision="fp32"), steps=1, nproc=2,
                run_dir=tmp_path / "t")


def test_lora_dropout_keeps_a_copy_of_each_adapter_input():
    spec = import_hf(HF / "llama3-8b", seq_length=2048).spec
    base = dict(zero_stage=2, lora_rank=16, lora_targets="q,k,v,o")
    plain = _terms(spec, **base).activations
    dropped = _terms(spec, **base, lora_dropout=0.05).activations
    # per layer and token: a dropped copy (2 bytes + a 1-byte mask) for each of q, k and v (h each), where without
    # dropout their adapters kept the norm's output once (2h), and one for o (a·d) beside SDPA's output, which the
    # attention kernel keeps either way
    h = q = 4096
    expected = 32 * 2048 * (3 * 3 * h - 2 * h + 3 * q)
    assert dropped - plain == pytest.approx(expected, rel=0.02)


def _kept_after_forward_bytes(config: dict, layers: int, seq: int, attn=None) -> int:
    """Bytes of every tensor alive after a training forward of a transformers model on the CPU (bf16), parameters
    excluded: what autograd keeps for backward, counted storage by storage (``attn``: the attn_implementation to
    build with, else the config's)."""
    import torch

    from workbench.storagetrace import live_storage, storage_keys

    torch.manual_seed(0)
    model = build_model(dict(config, num_hidden_layers=layers), device="cpu", attn_implementation=attn)
    model = model.to(torch.bfloat16).train()
    skip = storage_keys([*model.parameters(), *model.buffers()])
    ids = torch.randint(0, config["vocab_size"], (1, seq))
    with live_storage(skip=skip) as live:
        loss = model(input_ids=ids, labels=ids).loss
        kept = live.current
    del loss
    return kept


def _one_layer_kept_and_modelled(config: dict, seq: int) -> tuple:
    """``(measured, modelled)``: one decoder layer's kept bytes (2 layers less 1, :func:`_kept_after_forward_bytes`)
    and :func:`workbench.memory.layer_activation_bytes` of the imported spec, micro batch 1, bf16."""
    measured = _kept_after_forward_bytes(config, 2, seq) - _kept_after_forward_bytes(config, 1, seq)
    spec = import_hf(dict(config, num_hidden_layers=2), seq_length=seq).spec
    _, modelled = M.layer_activation_bytes(spec, micro_batch=1, tensor_parallel=1, sequence_parallel=False,
                                           context_parallel=1, value_bytes=2, recompute=0)
    return measured, modelled


def test_transformers_layer_keeps_what_its_unfused_ops_save():
    """One Llama decoder layer's kept bytes, counted tensor by tensor on the CPU (2 layers less 1), equal the
    memory model's: RMSNorm's fp32 input, down-cast and output, SiLU × up's four f-wide tensors, Q, K, V and the
    SDPA output and statistics. Under LoRA the frozen norm weights keep no down-cast."""
    config = dict(model_type="llama", hidden_size=64, intermediate_size=176, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=512, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0, pad_token_id=0)
    seq = 128
    measured = _kept_after_forward_bytes(config, 2, seq) - _kept_after_forward_bytes(config, 1, seq)
    spec = import_hf(dict(config, num_hidden_layers=2), seq_length=seq).spec
    kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2,
              recompute=0)
    _, modelled = M.layer_activation_bytes(spec, **kw)
    assert abs(modelled - measured) <= 0.01 * measured, (modelled, measured)
    h = spec.hidden_size
    assert M.hf_layer_extra_bytes_per_token(spec, value_bytes=2) == 2 * h * 4 + 176 * 2
    assert M.hf_layer_extra_bytes_per_token(spec, value_bytes=2, frozen_norms=1.0) == 2 * h * 2 + 176 * 2
    gemma2 = import_hf(HF / "gemma2-2b", seq_length=1024).spec  # fp32 weight products, 4 norms, soft-capped scores
    g = gemma2.hidden_size
    assert M.hf_layer_extra_bytes_per_token(gemma2, value_bytes=2) == (
        4 * g * 6 + 2 * gemma2.ffn_hidden_size + 2 * gemma2.num_attention_heads * 1024
        + 2 * 2 * (gemma2.query_projection_size - gemma2.kv_projection_size))  # eager's K, V repeated to 8 heads
    mg = spec.replace(implementation="megatron")
    assert M.layer_activation_bytes(mg, **kw)[1] < modelled
    # Gemma 2's final logit soft-capping: tanh keeps its 16-bit output beside the loss's 12 bytes per logit
    out = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2)
    logits = 1024 * gemma2.vocab_size
    capped = M.output_activation_bytes(gemma2, **out)
    assert capped - M.output_activation_bytes(gemma2.replace(sandwich_norm=False), **out) == 2 * logits


def test_hf_full_fine_tune_buckets_after_the_loss():
    """ZeRO-2: the reduce buckets appear at the first gradient hook, after the loss backward has freed the fp32
    logits gradients, so the backward peak holds the buckets or the loss, never both — a transformers model and a
    megatron-core model alike."""
    spec = import_hf(HF / "llama3-8b", seq_length=8192).spec
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    # two sequences a micro-batch: the steps' peak passes initialization's (the flat buffer and its clone, 30 GiB)
    plan = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu", recompute="full", micro_batch_size=2,
                        global_batch_size=2)
    kw = dict(micro_batch=2, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2)
    hf = estimate(spec, cluster, plan).memory.stages[0]
    mg_spec = spec.replace(implementation="megatron")
    mg = estimate(mg_spec, cluster, plan).memory.stages[0]
    assert hf.peak_phase == mg.peak_phase == "backward"
    assert hf.terms.activations > M.output_activation_bytes(spec, **kw)  # the loss phase is the larger one
    assert mg.terms.activations > M.output_activation_bytes(mg_spec, **kw)
    # the two reduce buckets (overlap_comm, 5e8 16-bit elements each) are not allocated yet; the offload staging
    # buffer (the largest weight, 16-bit) is
    staging = 2 * M.largest_param_tensor(spec, 1)
    assert hf.terms.buffers == pytest.approx(staging) and mg.terms.buffers == pytest.approx(staging)


def test_gemma2_soft_capping_time():
    """Gemma 2 soft-caps its eager scores and its logits with three unfused passes each (12 bytes forward, 14
    backward per bf16 element): the step pays exactly those bytes at the HBM rate; other families pay nothing."""
    from workbench import timing as T

    spec = import_hf(HF / "gemma2-2b", seq_length=1024).spec
    plan = ParallelPlan(world_size=1, zero_stage=2)
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    # the GPU's bytes alone: without the host floor, which 26 layers of one 1k sequence would outlast
    inputs = dict(T.time_inputs(spec, cluster, plan), hf_layer_host_s=0.0)
    assert inputs["soft_cap"] == 1.0 and spec.attention is AttentionImpl.UNFUSED
    assert T.time_inputs(import_hf(HF / "gemma3-1b").spec, cluster, plan)["soft_cap"] == 0.0
    capped = T.step_time_terms(**inputs)
    plain = T.step_time_terms(**dict(inputs, soft_cap=0.0))
    assert T.soft_cap_bytes(bytes_per_value=2) == (12, 14)
    scores = spec.num_layers * spec.num_attention_heads * 1024 * 1024 * 26 / (
        inputs["hbm_gb_per_s"] * 1e9 * inputs["score_hbm_efficiency"])
    logits = 1024 * spec.vocab_size * 26 / (inputs["hbm_gb_per_s"] * 1e9 * inputs["hbm_efficiency"])
    assert capped["compute"] - plain["compute"] == pytest.approx(scores + logits, rel=1e-9)


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_eager_attention_keeps_the_expanded_grouped_keys_and_values(kv_heads):
    """transformers' eager attention repeats K and V to every query head (``repeat_kv``) before its matmuls, which
    keep those copies: with 2 kv heads for 4 query heads the layer keeps 2·v·(q − kv) per token more than SDPA's
    grouped kernel would; with one kv head the expansion is a view and keeps nothing new."""
    config = dict(model_type="llama", hidden_size=64, intermediate_size=176, num_attention_heads=4,
                  num_key_value_heads=kv_heads, vocab_size=256, max_position_embeddings=512,
                  tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                  attn_implementation="eager", attention_dropout=0.0)
    measured, modelled = _one_layer_kept_and_modelled(config, 128)
    assert abs(modelled - measured) <= 0.005 * measured, (modelled, measured)
