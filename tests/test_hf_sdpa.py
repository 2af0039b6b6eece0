"""The attention core of transformers models with sdpa on Hopper: priced at PyTorch SDPA's measured rate per head
width (catalog ``flash_attention.hopper_sdpa``, :func:`workbench.encode.flash_attention_inputs`), not on the GEMM
curve; eager attention, megatron-core's local spec and GPUs without an entry keep the GEMM curve."""
import pytest

from workbench import timing
from workbench.catalog import gpu, model
from workbench.encode import flash_attention_inputs, sdpa_efficiency
from workbench.estimate import estimate
from workbench.specs import AttentionImpl, ClusterSpec, Implementation, ParallelPlan

TABLE = {"64": {"forward_efficiency_max": 0.4, "backward_efficiency_max": 0.3},
         "128": {"forward_efficiency_max": 0.6, "backward_efficiency_max": 0.5}}


def _hf(attention=AttentionImpl.FLASH, **kw):
    return model("llama3-8b").replace(implementation=Implementation.TRANSFORMERS, attention=attention, **kw)


def test_measured_widths_exact_between_linear_outside_clamped():
    assert sdpa_efficiency(TABLE, 64) == (0.4, 0.3)
    assert sdpa_efficiency(TABLE, 128) == (0.6, 0.5)
    f, b = sdpa_efficiency(TABLE, 96)
    assert f == pytest.approx(0.5) and b == pytest.approx(0.4)
    assert sdpa_efficiency(TABLE, 32) == (0.4, 0.3) and sdpa_efficiency(TABLE, 512) == (0.6, 0.5)


def test_catalog_entry_is_measured_per_head_width_and_used_only_for_transformers_flash():
    entry = timing.calibration()["flash_attention"]["hopper_sdpa"]
    assert {"64", "128", "256"} <= set(entry["by_head_dim"]) and "gpu_sdpa.py" in entry["source"]
    h200 = gpu("H200")
    hf = flash_attention_inputs(_hf(), h200)
    want = entry["by_head_dim"]["128"]  # Llama 3 8B: head 128
    assert hf["flash_forward_efficiency_max"] == want["forward_efficiency_max"]
    assert hf["flash_backward_efficiency_max"] == want["backward_efficiency_max"]
    assert hf["flash_half_seq"] == entry["half_seq"]
    assert flash_attention_inputs(_hf(AttentionImpl.UNFUSED), h200)["flash_forward_efficiency_max"] == 0.0
    local = model("llama3-8b", attention="unfused")  # megatron-core local spec: GEMM curve
    assert flash_attention_inputs(local, h200)["flash_forward_efficiency_max"] == 0.0
    te = flash_attention_inputs(model("llama3-8b", attention="flash"), h200)  # Transformer Engine: its own entry
    assert te["flash_forward_efficiency_max"] == timing.calibration()["flash_attention"]["hopper"][
        "forward_efficiency_max"]
    assert flash_attention_inputs(_hf(), gpu("A100-80GB"))["flash_forward_efficiency_max"] == 0.0


def test_long_sequence_sdpa_step_is_faster_than_on_the_gemm_curve_and_gains_grow_with_length():
    """Head 64 at 16 k tokens: the GEMM curve's small inner dimension priced the core far below what cuDNN runs."""
    plan = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=2, micro_batch_size=1, global_batch_size=1,
                        precision="bf16")
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    ratios = []
    for seq in (2048, 16384):
        m = _hf(num_layers=4, hidden_size=2048, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=8192,
                vocab_size=128256, seq_length=seq)
        sdpa = estimate(m, cluster, plan, checks=False).time.step_seconds
        eager = estimate(m.replace(attention=AttentionImpl.UNFUSED), cluster, plan, checks=False).time.step_seconds
        ratios.append(sdpa / eager)
    assert ratios[1] < ratios[0] < 1.0
