"""A layer's host time from the ATen operators its design dispatches (workbench.layerops, catalog ``layer_ops``)."""
import sys
from pathlib import Path

import pytest

from workbench import layerops, timing
from workbench.catalog import model
from workbench.hf import import_hf

ROOT = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "data" / "hf"


def test_llama_style_megatron_layers_dispatch_more_operators_than_gpt_style_ones_and_cost_more_host():
    gpt = model("gpt3-1_3b", attention="unfused")
    llama = model("llama3-8b", attention="unfused")
    ops_gpt, entry_gpt = layerops.dispatched_ops(gpt)
    ops_llama, entry_llama = layerops.dispatched_ops(llama)
    assert entry_gpt["activation"] == "gelu" and entry_llama["activation"] == "swiglu"
    assert ops_llama > 1.5 * ops_gpt
    cal = timing.calibration()
    for m, ops in ((gpt, ops_gpt), (llama, ops_llama)):
        assert layerops.layer_host_seconds(m) == pytest.approx(
            cal["megatron_core"]["layer_base_host_s"] + cal["layer_ops"]["op_host_s"] * ops)


def test_transformer_engine_layers_get_no_host_floor_and_unknown_designs_take_the_nearest():
    assert layerops.layer_host_seconds(model("llama3-8b", attention="flash")) == 0.0
    fused = model("llama3-8b", attention="fused-softmax")  # never counted: the unfused Llama-style layer is nearest
    ops, entry = layerops.dispatched_ops(fused)
    assert entry["attention"] == "unfused" and entry["activation"] == "swiglu"
    assert ops == layerops.dispatched_ops(model("llama3-8b", attention="unfused"))[0]


def test_hf_families_differ_as_their_layers_do():
    llama = import_hf(HF / "llama3-8b", seq_length=2048, attn_implementation="sdpa").spec
    qwen3 = import_hf(HF / "qwen3-0_6b", seq_length=2048, attn_implementation="sdpa").spec
    eager = import_hf(HF / "llama3-8b", seq_length=2048, attn_implementation="eager").spec
    n_llama, n_qwen3, n_eager = (layerops.dispatched_ops(m)[0] for m in (llama, qwen3, eager))
    assert n_qwen3 > n_llama  # the q and k norms
    assert n_eager > n_llama  # the materialised softmax path
    assert layerops.layer_host_seconds(qwen3) > layerops.layer_host_seconds(llama) > 0


def test_catalog_counts_are_what_the_counting_script_measures():
    """The catalog's Llama sdpa count is what benchmarks/count_layer_ops_cpu.py counts with the installed
    transformers (a stale table fails here)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    import count_layer_ops_cpu as C
    import runs

    cfg = runs.HF_SHAPES["hf-llama-h2048"]["config"]
    one, two = C.count_hf(cfg, 1, "sdpa"), C.count_hf(cfg, 2, "sdpa")
    spec = C.shape_model("hf-llama-h2048", "sdpa")
    ops, entry = layerops.dispatched_ops(spec)
    assert layerops.layer_features(spec) == {k: entry[k] for k in layerops.FEATURES}
    assert (two["ops"] - one["ops"], two["views"] - one["views"]) == (entry["ops"], entry["views"])
    assert ops == entry["ops"] + entry["views"]


def test_estimate_names_the_layer_host_time_and_where_its_count_comes_from(capsys):
    from workbench import cli

    # the allocator replay (the default on one GPU) changes no line this test reads: left out for speed
    assert cli.main(["estimate", "--model", "hf:" + str(HF / "qwen3-0_6b"), "--gpu", "H200", "--gpus", "1",
                     "--zero", "2", "--no-simulate-allocator"]) == 0
    out = capsys.readouterr().out
    host = layerops.layer_host_seconds(import_hf(HF / "qwen3-0_6b", seq_length=4096).spec)
    assert f"host: {host * 1e3:.2f} ms of host time per layer" in out and "counted for this layer design" in out
    # a design never counted says which counted one stands for it
    assert "which differs in attention=fused-softmax" in layerops.host_note(model("llama3-8b",
                                                                                  attention="fused-softmax"))
    # ZeRO-3 prices its hooks instead, Transformer Engine layers have none: no line
    assert cli.main(["estimate", "--model", "llama3-8b", "--attention", "flash", "--gpu", "H200", "--gpus", "8",
                     "--engine", "megatron", "--tp", "2"]) == 0
    assert "host:" not in capsys.readouterr().out
    assert cli.main(["estimate", "--model", "hf:" + str(HF / "qwen3-0_6b"), "--gpu", "H200", "--gpus", "1",
                     "--zero", "3", "--no-simulate-allocator"]) == 0
    assert "host:" not in capsys.readouterr().out


def test_olmo3_design_is_counted_at_fewer_layers():
    """OLMo 3's per-layer ``layer_types`` follows the layer count when a counting script shrinks the model
    (transformers refuses a list of another length), and its design has catalog entries of its own: its norms
    after attention and MLP, in fp32 products, move more bytes than Qwen3's design."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    import count_layer_ops_cpu as C
    import runs

    cfg = runs.HF_SHAPES["hf-olmo3-h4096-l8"]["config"]
    assert runs.hf_config_with_layers(cfg, 2)["layer_types"] == ["sliding_attention"] * 2
    assert runs.hf_config_with_layers(cfg, 10)["layer_types"][8:] == ["sliding_attention"] * 2
    assert runs.hf_config_with_layers(runs.HF_SHAPES["hf-gpt2-h768"]["config"], 3)["n_layer"] == 3
    one, two = C.count_hf(cfg, 1, "sdpa"), C.count_hf(cfg, 2, "sdpa")
    spec = C.shape_model("hf-olmo3-h4096-l8", "sdpa")
    ops, entry = layerops.dispatched_ops(spec)
    assert entry["post_norm"] and layerops.layer_features(spec) == {k: entry[k] for k in layerops.FEATURES}
    assert (two["ops"] - one["ops"], two["views"] - one["views"]) == (entry["ops"], entry["views"])
    qwen3 = spec.replace(post_norm=False, qk_norm_projection=False)
    assert layerops.layer_memory_bytes(spec)[1] > 1.1 * layerops.layer_memory_bytes(qwen3)[1]
