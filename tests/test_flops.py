"""FLOPs per step against Narayanan et al. 2021 (arXiv 2104.04473) and Megatron's num_floating_point_operations."""
import numpy as np
import pytest

from workbench.catalog import model
from workbench.flops import (attention_core_flops_per_token, layer_gemm_flops_per_token, logits_flops_per_token,
                             model_flops_per_step, recompute_flops_per_step, step_flops)
from workbench.specs import ModelSpec, ParallelPlan

# Narayanan et al. 2021 Table 1 models (heads, hidden, layers, global batch): s=2048, V=51200
TABLE1 = [(24, 2304, 24, 512), (32, 3072, 30, 512), (32, 4096, 36, 512), (48, 6144, 40, 1024),
          (64, 8192, 48, 1536), (96, 12288, 96, 1536)]


@pytest.mark.parametrize("heads,h,l,B", TABLE1)
def test_golden_narayanan_full_recompute(heads, h, l, B):
    s, V = 2048, 51200
    m = ModelSpec(num_layers=l, hidden_size=h, num_attention_heads=heads, vocab_size=V, seq_length=s)
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=8, global_batch_size=B,
                        recompute="full")
    got = step_flops(m, plan, causal=False)
    # Narayanan et al. 2021 §5.1: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full recompute; 72 and V/(12lh) without
    assert got["hardware"] == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-12)
    assert got["model"] == pytest.approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-12)


def _megatron_formula(m: ModelSpec, batch, padded_vocab, causal):
    """Megatron-LM num_floating_point_operations (training.py), transcribed term by term."""
    q_ratio = m.query_projection_size / m.hidden_size
    gated = 1.5 if m.is_gated else 1.0
    ffn = m.moe_ffn_hidden_size * m.moe_top_k if m.is_moe else m.ffn_hidden_size
    seq_term = m.seq_length / m.hidden_size / (2 if causal else 1)
    return (12 * batch * m.seq_length * m.num_layers * m.hidden_size ** 2
            * ((1 + m.num_query_groups / m.num_attention_heads + seq_term) * q_ratio
               + ffn * gated / m.hidden_size + padded_vocab / (2 * m.num_layers * m.hidden_size)))


@pytest.mark.parametrize("name", ["llama3-8b", "llama2-70b", "mixtral-8x7b", "gpt3-175b"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_megatron_formula_gqa_swiglu_moe(name, causal):
    m = model(name)
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=8, global_batch_size=64)
    from workbench.params import padded_vocab_size
    expected = _megatron_formula(m, 64, padded_vocab_size(m.vocab_size, 8), causal)
    assert step_flops(m, plan, causal=causal)["model"] == pytest.approx(expected, rel=1e-12)


def test_selective_recompute_adds_attention_core_only():
    m = model("llama3-8b")
    base = ParallelPlan(world_size=8, engine="megatron", global_batch_size=8)
    none = step_flops(m, base, causal=False)
    sel = step_flops(m, base.replace(recompute="selective"), causal=False)
    full = step_flops(m, base.replace(recompute="full"), causal=False)
    tokens = 8 * m.seq_length
    assert sel["model"] == none["model"] == full["model"]
    assert sel["recompute"] == pytest.approx(tokens * m.num_layers * 4 * m.seq_length * m.query_projection_size)
    assert none["recompute"] == 0 < sel["recompute"] < full["recompute"]
    # full recompute of half the layers per stage costs half of the full extra forward
    half = step_flops(m, base.replace(recompute="full", recompute_layers=16, pipeline_parallel=1), causal=False)
    assert half["recompute"] == pytest.approx(full["recompute"] / 2)


def test_array_and_scalar_agree():
    kw = dict(hidden_size=np.array([4096, 8192]), query_projection_size=np.array([4096, 8192]),
              kv_projection_size=np.array([1024, 1024]), ffn_hidden_size=np.array([14336, 28672]),
              gated=np.array([1, 1]))
    arr = layer_gemm_flops_per_token(**kw)
    for i in range(2):
        assert arr[i] == layer_gemm_flops_per_token(**{k: int(v[i]) for k, v in kw.items()})
    core = attention_core_flops_per_token(seq_length=np.array([2048, 8192]), query_projection_size=4096,
                                          causal=np.array([0, 1]))
    assert core.tolist() == [4 * 2048 * 4096, 2 * 8192 * 4096]
    # large int arrays must not overflow (405B-class step: > 2**63 FLOPs)
    big = model_flops_per_step(tokens=np.array([16_777_216]), num_layers=np.array([126]),
                               layer_gemm_per_token=np.array([6_400_000_000]), attention_core_per_token=0,
                               logits_per_token=logits_flops_per_token(hidden_size=16384, vocab_size=128256))
    assert big[0] > 2 ** 63 and big[0] == pytest.approx(3 * 16_777_216 * (126 * 6.4e9 + 2 * 16384 * 128256))
    rec = recompute_flops_per_step(tokens=np.array([10, 10, 10]), num_layers=4, layer_gemm_per_token=100,
                                   attention_core_per_token=10, recompute=np.array([0, 1, 2]))
    assert rec.tolist() == [0, 400, 4400]
