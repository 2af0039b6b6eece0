"""transformers layers' GPU time: memory-bound bytes counted from the real modules, the weight GEMMs' measured scale."""
import pytest

from workbench import ModelSpec, ParallelPlan, catalog, encode, layerops, timing
from workbench.estimate import estimate
from workbench.specs import ClusterSpec

H200 = ClusterSpec(gpu=catalog.gpu("H200"), gpus_per_node=1, num_nodes=1)
PLAN = ParallelPlan(engine="deepspeed", zero_stage=2, world_size=1, micro_batch_size=4, global_batch_size=4)


def _llama(implementation="transformers", **kw) -> ModelSpec:
    dims = dict(name="l", hidden_size=2048, num_layers=8, num_attention_heads=32, num_query_groups=4,
                ffn_hidden_size=5632, seq_length=2048, vocab_size=32000, activation="swiglu", normalization="rmsnorm",
                add_bias_linear=False, position_embedding="rotary", implementation=implementation, attention="flash")
    return ModelSpec(**{**dims, **kw})


def test_counted_bytes_follow_the_design_and_only_transformers_dense_layers_have_them():
    fwd, bwd = layerops.layer_memory_bytes(_llama())
    assert 0 < fwd < bwd  # the backward moves more (recomputed norms, their fp32 gradients)
    wider = layerops.layer_memory_bytes(_llama(ffn_hidden_size=2 * 5632))
    entry = layerops._memory_match(tuple(layerops.layer_features(_llama())[f] for f in layerops.FEATURES))
    assert wider[0] - fwd == pytest.approx(entry["forward"]["f"] * 5632)  # linear in the MLP width
    assert layerops.layer_memory_bytes(_llama("megatron")) == (0.0, 0.0)
    moe = _llama(num_experts=8, moe_top_k=2, moe_ffn_hidden_size=1024)
    assert layerops.layer_memory_bytes(moe) == (0.0, 0.0)


def test_time_inputs_carry_them_for_transformers_only():
    hf = estimate(_llama(), H200, PLAN).time.inputs
    mg = estimate(_llama("megatron"), H200, PLAN).time.inputs
    cal = timing.calibration()["transformers"]
    assert hf["layer_memory_bytes_forward"] > 0 and mg["layer_memory_bytes_forward"] == 0.0
    assert hf["weight_gemm_time_scale"] == cal["weight_gemm_time_scale"] < 1 and mg["weight_gemm_time_scale"] == 1.0
    assert hf["layer_memory_hbm_efficiency"] == cal["layer_memory_hbm_efficiency"]
    fp32 = encode.layer_memory_inputs(_llama(), PLAN.replace(precision="fp32").precision, cal)
    assert fp32["layer_memory_bytes_forward"] == 0.0  # counted in bf16: 16-bit training only


def test_counted_bytes_and_the_gemm_scale_price_the_layer():
    t = estimate(_llama(), H200, PLAN).time
    x = dict(t.inputs)
    base = timing.step_time_terms(**x)
    tokens = PLAN.micro_batch_size * 2048
    hbm = x["hbm_gb_per_s"] * 1e9 * x["layer_memory_hbm_efficiency"]
    more = timing.step_time_terms(**dict(x, layer_memory_bytes_forward=x["layer_memory_bytes_forward"] + 100.0,
                                         layer_memory_bytes_backward=x["layer_memory_bytes_backward"] + 300.0))
    assert float(more["layer_forward_seconds"] - base["layer_forward_seconds"]) == pytest.approx(tokens * 100 / hbm)
    assert float(more["layer_backward_seconds"] - base["layer_backward_seconds"]) == pytest.approx(tokens * 300 / hbm)
    slower = timing.step_time_terms(**dict(x, weight_gemm_time_scale=2 * x["weight_gemm_time_scale"]))
    assert float(slower["layer_weight_gemm_seconds"]) == pytest.approx(2 * float(base["layer_weight_gemm_seconds"]))
    # without counted bytes the per-layer activation count prices the layer again (the megatron-core way)
    plain = timing.step_time_terms(**dict(x, layer_memory_bytes_forward=0.0, layer_memory_bytes_backward=0.0))
    assert float(plain["layer_forward_seconds"]) < float(base["layer_forward_seconds"])
