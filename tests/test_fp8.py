"""FP8 training as Transformer Engine runs it under Megatron-LM: validation, memory terms, GEMM time and casts."""
import numpy as np
import pytest

from workbench import catalog, ClusterSpec, ModelSpec, ParallelPlan, validate
from workbench import memory as M
from workbench import timing as T
from workbench.estimate import estimate

TINY = ModelSpec(name="tiny", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024,
                 vocab_size=1000, seq_length=128, attention="flash", hidden_dropout=0.0, attention_dropout=0.0)


def _plan(world=8, **kw):
    kw = {"engine": "megatron", "precision": "fp8", "distributed_optimizer": True, **kw}
    return ParallelPlan(world_size=world, **kw)


def _est(model, gpu="H100-SXM", world=8, **kw):
    return estimate(model, ClusterSpec(gpu=gpu, gpus_per_node=world), _plan(world=world, **kw), checks=False)


@pytest.mark.parametrize("gpu", ["A100-80GB", "V100-32GB"])
def test_gpus_without_fp8_are_refused_by_name(gpu):
    with pytest.raises(ValueError, match=f"precision=fp8 is not supported by gpu={gpu}: it has no FP8 tensor cores"):
        validate(TINY, ClusterSpec(gpu=gpu), _plan())


@pytest.mark.parametrize("kw,message", [
    (dict(engine="deepspeed", distributed_optimizer=False), "modelled as Megatron-LM trains it"),
    (dict(fp8_param_gather=True, distributed_optimizer=False), "fp8_param_gather=True needs distributed_optimizer"),
    (dict(fp8_bf16_first_layers=1), "Delayed scaling does not support first / last layer in BF16"),
    (dict(precision="bf16", fp8_param_gather=True), "need precision='fp8'"),
])
def test_plan_refuses_what_megatron_refuses(kw, message):
    with pytest.raises(ValueError, match=message):
        _plan(**kw)


def test_model_and_gpu_checks():
    c = ClusterSpec(gpu="H100-SXM")
    with pytest.raises(ValueError, match="fp8_recipe='mxfp8' needs a Blackwell GPU"):
        validate(TINY, c, _plan(fp8_recipe="mxfp8"))
    validate(TINY, ClusterSpec(gpu="B200"), _plan(fp8_recipe="mxfp8"))
    with pytest.raises(ValueError, match="set attention='flash'"):
        validate(TINY.replace(attention="unfused"), c, _plan())
    with pytest.raises(ValueError, match="fp8_bf16_last_layers=3 must be at most the layers per pipeline stage"):
        validate(TINY, c, _plan(pipeline_parallel=2, fp8_recipe="tensorwise", fp8_bf16_last_layers=3))


def test_weights_gain_the_fp8_copies_and_param_gather_drops_the_bf16_weight():
    m = catalog.model("llama3-8b")
    bf16 = _est(m, precision="bf16", tensor_parallel=2).memory.breakdown.weights
    fp8 = _est(m, tensor_parallel=2).memory.breakdown.weights
    linear = m.num_layers * M.fp8_linear_params_per_layer(m, 2)
    assert fp8 - bf16 == pytest.approx(2 * linear, rel=1e-6)  # row-wise + column-wise FP8 copy, 1 byte each
    # --fp8-param-gather: the FP8 weight and its transpose replace the bf16 weight (same bytes on Hopper recipes)
    assert _est(m, tensor_parallel=2, fp8_param_gather=True).memory.breakdown.weights == pytest.approx(bf16, rel=1e-6)
    # mxfp8 keeps one 8-bit scale per 32 values in each orientation
    b200 = _est(m, gpu="B200", tensor_parallel=2, fp8_recipe="mxfp8").memory.breakdown.weights
    b200_bf16 = _est(m, gpu="B200", precision="bf16", tensor_parallel=2).memory.breakdown.weights
    assert b200 - b200_bf16 == pytest.approx(2 * (1 + 1 / 32) * linear, rel=1e-6)


def test_linear_inputs_are_saved_in_fp8():
    """QKV, fc1 and fc2 inputs drop from 2 to 1 byte per value; the projection keeps flash's bf16 output plus an FP8
    copy: (1-2)*2*sbh + 1*sbh + (1-2)*sbf = -2sbh + sbh - sbf for h=256, f=1024."""
    s, b, h, f = 128, 1, 256, 1024
    delta = M.fp8_activation_delta_bytes(TINY, micro_batch=b, tensor_parallel=1, sequence_parallel=False,
                                         context_parallel=1, value_bytes=2, recipe=0)
    assert delta == pytest.approx(-2 * s * b * h + s * b * h - s * b * f)
    small_vocab = TINY.replace(vocab_size=128)  # the backward's largest transient is then a layer, not the logits
    bf16 = _est(small_vocab, precision="bf16", world=1).memory.stages[0].backward_activation_bytes
    fp8 = _est(small_vocab, world=1).memory.stages[0].backward_activation_bytes
    # 4 stored layers + the backward's working layer, each smaller by the delta
    assert fp8 - bf16 == pytest.approx(5 * delta)


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_current_scaling_projection_saves_no_fp8_copy(recipe):
    """megatron-core (core_r0.14.0 on, TE >= 2.6) makes linear_proj save its original input for every recipe but
    delayed (attention.py: set_save_original_input(self.linear_proj)): the bf16 attention output flash attention
    already keeps, so the delta loses the a*sb*q FP8 copy that delayed scaling still adds."""
    s, b, h, f = 128, 2, 256, 1024
    kw = dict(micro_batch=b, tensor_parallel=1, sequence_parallel=False, context_parallel=1, value_bytes=2)
    code = M.FP8_RECIPE_CODES[recipe]
    a = float(M.FP8_ACTIVATION_BYTES[code])
    delayed = M.fp8_activation_delta_bytes(TINY, recipe=0, **kw)
    current = M.fp8_activation_delta_bytes(TINY, recipe=code, **kw)
    # QKV, fc1 and fc2 inputs in FP8, nothing for the projection
    assert current == pytest.approx((a - 2) * s * b * (2 * h + f))
    assert delayed - current == pytest.approx(s * b * h + (1 - a) * s * b * (2 * h + f))
    # a MoE layer: the same projection term, the expert inputs unchanged
    moe = TINY.replace(num_experts=8, moe_top_k=2, moe_ffn_hidden_size=128)
    d_moe = M.fp8_activation_delta_bytes(moe, recipe=0, **kw) - M.fp8_activation_delta_bytes(moe, recipe=1, **kw)
    assert d_moe == pytest.approx(s * b * h)
    # through the estimate: every stored layer and the backward's working layer lose the copy
    small_vocab = TINY.replace(vocab_size=128)
    old = _est(small_vocab, world=1, fp8_recipe="delayed").memory.stages[0].backward_activation_bytes
    new = _est(small_vocab, world=1, fp8_recipe="tensorwise").memory.stages[0].backward_activation_bytes
    assert old - new == pytest.approx(5 * s * 1 * h)


def test_delayed_scaling_state_is_counted_per_fp8_module():
    state = M.fp8_scaling_state_bytes(TINY, fp8_layers=4, recipe=0)
    assert state == 4 * 4 * 5 * (M.FP8_AMAX_HISTORY_LEN + 2) * 4
    assert M.fp8_scaling_state_bytes(TINY, fp8_layers=4, recipe=1) == 0


def test_fp8_gemms_use_the_fp8_peak_and_curve():
    m = catalog.model("llama3-70b")
    est = _est(m, world=8, tensor_parallel=8, sequence_parallel=True, global_batch_size=8)
    x = est.time.inputs
    assert x["fp8_peak_flops"] == 1979e12 and x["peak_flops"] == 989e12
    curve = T.fp8_efficiency_curve("H100-SXM")
    assert x["fp8_gemm_efficiency_max"] == curve["gemm_efficiency_max"]
    bf16 = _est(m, world=8, precision="bf16", tensor_parallel=8, sequence_parallel=True, global_batch_size=8)
    speedup = bf16.time.step_seconds / est.time.step_seconds
    assert 1.1 < speedup < 1.7  # GEMMs faster, attention core, element-wise work and communication unchanged
    assert est.time.breakdown["compute"] < bf16.time.breakdown["compute"]
    assert est.time.fp8_cast_seconds > 0 and est.time.fp8_amax_seconds > 0
    # sequence parallel: the norm outputs are all-gathered in FP8, the reduce-scatters stay bf16
    tp8, tp16 = est.time.breakdown["tp_comm"] - est.time.fp8_amax_seconds, bf16.time.breakdown["tp_comm"]
    assert 0.7 * tp16 < tp8 < 0.8 * tp16


def test_cast_bytes_count_every_quantized_tensor():
    fwd, bwd = T.fp8_cast_bytes(tokens=10, hidden_size=8, query_projection_size=8, kv_projection_size=2,
                                ffn_hidden_size=32, gated=0, experts_per_token=1, tensor_parallel=1,
                                sequence_parallel=0, bytes_per_value=2, fp8_bytes=1)
    assert fwd == 10 * (4 * (8 + 32) + 0 * 2 * 8)  # proj and fc2 inputs: read 2, write 1 + 1; fused norm-cast: 2a-v = 0
    assert bwd == 10 * 4 * ((8 + 4) + 8 + 32 + 8)


def test_moe_experts_cast_their_permuted_copies():
    # an MoE layer: the fc1 input is the k copies per token after the permutation, quantized by the grouped linear
    # (read 2, write 1 + 1 per value); only the QKV input keeps the fused norm-and-cast (2a - v = 1 with a = 1.5)
    kw = dict(tokens=10, hidden_size=8, query_projection_size=8, kv_projection_size=2, ffn_hidden_size=32, gated=0,
              experts_per_token=4, tensor_parallel=1, sequence_parallel=0, bytes_per_value=2)
    fwd, _ = T.fp8_cast_bytes(**kw, fp8_bytes=1.5, expert_copies=40)
    assert fwd == 10 * (5 * (8 + 32 * 4) + 1 * 8) + 5 * 40 * 8
    dense, _ = T.fp8_cast_bytes(**kw, fp8_bytes=1.5)
    assert dense == 10 * (5 * (8 + 32 * 4) + 1 * 2 * 8)


def test_current_scaling_has_no_amax_all_reduce_and_param_gather_sends_fp8():
    m = catalog.model("llama3-8b")
    tw = _est(m, tensor_parallel=2, fp8_recipe="tensorwise")
    assert tw.time.fp8_amax_seconds == 0
    pg = _est(m, tensor_parallel=2, fp8_param_gather=True).time.inputs["param_gather_bytes_per_value"]
    assert 1.0 < pg < 1.2  # nearly all of a dense model's parameters are linear weights


def test_bf16_first_and_last_layers_cost_time_and_memory():
    m = catalog.model("llama3-8b")
    plain = _est(m, tensor_parallel=2, fp8_recipe="tensorwise")
    kept = _est(m, tensor_parallel=2, fp8_recipe="tensorwise", fp8_bf16_first_layers=1, fp8_bf16_last_layers=1)
    assert kept.time.step_seconds > plain.time.step_seconds
    assert kept.memory.breakdown.weights < plain.memory.breakdown.weights  # no FP8 copies for the bf16 layers
    # one pipeline stage: it builds both bf16 layers
    shares = T.fp8_stage_shares(T.StepInputs(**kept.time.inputs))
    assert shares == pytest.approx((1 - 2 / m.num_layers,) * 3)


def test_bf16_layers_sit_where_megatron_builds_them():
    """megatron-core's is_first_last_bf16_layer tests the global layer number: [0, F) and [L-B, L)."""
    on = M.bf16_layers_on_stage
    assert [on(80, 4, 1, s, 1, 1) for s in range(4)] == [1, 0, 0, 1]
    assert on(32, 1, 1, 0, 2, 3) == 5
    # interleaved (v = 5, chunks of 4 layers, stage-major inside each virtual row): layers 0-3 on stage 0,
    # 4-7 on stage 1, ...; the last chunk of the last virtual row (layers 76-79) on stage 3
    assert [on(80, 4, 5, s, 6, 2) for s in range(4)] == [4, 2, 0, 2]
    # Llama 3 405B's uneven split (7, 8 x 14, 7): F = 7 fills stage 0, B = 7 stage 15
    split = dict(first_stage_layers=7, middle_stage_layers=8, last_stage_layers=7)
    got = [float(on(126, 16, 1, s, 7, 7, **split)) for s in range(16)]
    assert got[0] == got[15] == 7 and sum(got) == 14
    # arrays (the planner's stages)
    np.testing.assert_array_equal(on(80, 4, 1, np.arange(4), 1, 1), [1, 0, 0, 1])


def test_bf16_layers_price_the_first_and_last_stage_only():
    m = catalog.model("llama3-70b")  # 80 layers on 4 stages: the last (output layer, loss) is the slowest
    kw = dict(world=64, tensor_parallel=8, pipeline_parallel=4, sequence_parallel=True, fp8_recipe="tensorwise",
              global_batch_size=64)
    none, last, both = (_est(m, gpu="H100-SXM", **kw, **extra) for extra in
                        ({}, dict(fp8_bf16_last_layers=1), dict(fp8_bf16_first_layers=1, fp8_bf16_last_layers=1)))
    # the bf16 first layer slows stage 0, not the pace-setting last stage; the bf16 last layer slows that one by one
    # layer's bf16-vs-FP8 difference (not the 1/p share an even spread would give)
    assert both.time.breakdown["compute"] == pytest.approx(last.time.breakdown["compute"])
    terms = T.step_time_terms(**none.time.inputs)
    bf16_in = dict(none.time.inputs, fp8_layer_fraction=0.0)
    bf16 = T.step_time_terms(**bf16_in)
    per_layer = (bf16["layer_forward_seconds"] + bf16["layer_backward_seconds"]
                 - terms["layer_forward_seconds"] - terms["layer_backward_seconds"])
    m_ = none.plan.num_microbatches
    # (less the layer's FP8 weight copy, rebuilt once per step: a few tenths of a percent here)
    assert last.time.breakdown["compute"] - none.time.breakdown["compute"] == pytest.approx(m_ * per_layer, rel=5e-3)
    assert last.time.breakdown["compute"] - none.time.breakdown["compute"] < m_ * per_layer
    # the pipeline view's per-stage times: stage 0 carries one bf16 layer more than a middle stage
    gain = T.step_time_terms(**both.time.inputs)["fp8_layer_forward_gain_seconds"]
    (f0, _), (f1, _), (f2, _), _ = both.time.stage_microbatch_seconds
    assert f1 == pytest.approx(f2) and f0 - f1 == pytest.approx(float(gain)) and gain > 0
    # memory: stage 0 loses one layer's FP8 weight copies, a middle stage none
    s_none, s_both = none.memory.stages, both.memory.stages
    assert s_both[0].terms.weights < s_none[0].terms.weights
    assert s_both[1].terms.weights == pytest.approx(s_none[1].terms.weights)
    copies = [M.fp8_memory_terms(m, e.plan)["weight_copies"] for e in (none, last, both)]  # stage 0's
    assert copies[1] == pytest.approx(copies[0]) and copies[2] == pytest.approx(copies[0] * 19 / 20)


def test_planner_arrays_match_the_single_plan():
    from workbench import encode

    m = catalog.model("llama3-8b")
    c = ClusterSpec(gpu="H100-SXM")
    plans = [_plan(tensor_parallel=t, fp8_param_gather=pg) for t in (1, 2) for pg in (False, True)]
    cols = [encode.plan_columns(p, m) for p in plans]
    scalars = ("lora_rank", "lora_targets", "lora_dropout")
    table = {k: (cols[0][k] if k in scalars else np.array([c_[k] for c_ in cols])) for k in cols[0]}
    batch = T.step_time_terms(**encode.time_inputs(m, c, table, "fp8"))
    for i, p in enumerate(plans):
        one = estimate(m, c, p, checks=False).time.step_seconds
        assert batch["step_seconds"][i] == pytest.approx(one, rel=1e-9)


def test_measured_fp8_gemms_replace_the_provisional_curve(monkeypatch):
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("gpu_gemm", pathlib.Path(__file__).parents[1] / "benchmarks"
                                                  / "gpu_gemm.py")
    gpu_gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_gemm)
    table = {"device": "NVIDIA H200", "rows": [
        {"m": mm, "n": n, "k": k, "bf16_tflops": 700.0,
         "fp8_tflops": 1979 * float(T.gemm_efficiency(mm, n, k, efficiency_max=0.6, half_dim=300))}
        for mm, n, k in [(8192, 8192, 8192), (4096, 512, 4096), (16384, 1024, 8192), (2048, 128, 2048)]]}
    rows = gpu_gemm.fp8_rows(table)
    assert len(rows) == 4 and rows[0]["tflops"] == table["rows"][0]["fp8_tflops"]
    cal = dict(T.calibration(), h200_fp8_measured={"device": "NVIDIA H200", "peak_tflops": 1979.0, "gemms": rows})
    monkeypatch.setattr(T, "calibration", lambda: cal)
    curve = T.fp8_efficiency_curve("H100-SXM")
    assert curve["gemm_efficiency_max"] == pytest.approx(0.6, rel=0.03)
    assert curve["gemm_half_dim"] == pytest.approx(300, rel=0.05)
    assert "4 FP8 GEMMs" in curve["source"]
    assert "provisional" in T.fp8_efficiency_curve("B200")["source"]


def test_run_store_round_trip_and_launcher_refusal():
    import json

    from workbench.runs.prepare import check_launchable
    from workbench.runs.specio import specs_from_dict, specs_to_dict

    m, c = catalog.model("llama3-8b"), ClusterSpec(gpu="H100-SXM")
    p = _plan(fp8_param_gather=True, fp8_recipe="blockwise", fp8_bf16_first_layers=1)
    assert specs_from_dict(json.loads(json.dumps(specs_to_dict(m, c, p))))[2] == p
    with pytest.raises(ValueError, match="export the Megatron-LM command"):
        check_launchable(m, c, p, nproc=8, steps=1, on_gpu=True)


def test_planner_searches_fp8_param_gather_on_distributed_optimizer_rows():
    from workbench.planner import search

    m, c = catalog.model("llama3-8b"), ClusterSpec(gpu="H100-SXM")
    result = search(m, c, global_batch_size=32, precision="fp8", fp8_param_gather=True, top=5)
    for r in result.ranked:
        assert r.plan.fp8_param_gather == r.plan.distributed_optimizer
        again = estimate(m, c, r.plan, checks=False)
        assert again.time.step_seconds == pytest.approx(r.step_seconds, rel=1e-9)
        assert again.memory.per_gpu_peak_bytes == pytest.approx(r.peak_bytes, rel=1e-9)
    with pytest.raises(ValueError, match="fp8_param_gather=True needs precision='fp8'"):
        search(m, c, global_batch_size=32, fp8_param_gather=True)


@pytest.mark.parametrize("case", [
    dict(num_layers=80, p=4, F=1, B=1),
    dict(num_layers=80, p=4, v=5, F=6, B=2),
    dict(num_layers=126, p=16, first=7, last=7, F=7, B=3),
    dict(num_layers=28, p=4, v=2, first=6, last=6, F=3, B=3),
    dict(num_layers=32, p=1, F=2, B=2),
])
def test_bf16_placement_matches_megatron_core(case):
    """bf16 layers per stage as megatron-core decides them: its layer offsets and is_first_last_bf16_layer."""
    pytest.importorskip("megatron.core.fp8_utils")
    import torch
    from megatron.core.fp8_utils import is_first_last_bf16_layer
    from megatron.core.transformer import transformer_block as tb
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    L, p, v = case["num_layers"], case["p"], case.get("v", 1)
    first, last = case.get("first"), case.get("last")
    cfg = TransformerConfig(num_layers=L, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=p,
                            virtual_pipeline_model_parallel_size=v if v > 1 else None,
                            num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
                            pipeline_dtype=torch.bfloat16, first_last_layers_bf16=True,
                            num_layers_at_start_in_bf16=case["F"], num_layers_at_end_in_bf16=case["B"])
    expected = []
    for r in range(p):
        n = 0
        for s in range(v):
            vp = s if v > 1 else None
            offset = get_transformer_layer_offset(cfg, vp_stage=vp, pp_rank=r)
            built = tb.get_num_layers_to_build(cfg, vp_stage=vp, pp_rank=r)
            n += sum(is_first_last_bf16_layer(cfg, offset + i) for i in range(built))
        expected.append(n)
    split = {} if first is None else dict(first_stage_layers=first, middle_stage_layers=(L - first - last) // (p - 2),
                                          last_stage_layers=last)
    got = [int(M.bf16_layers_on_stage(L, p, v, r, case["F"], case["B"], **split)) for r in range(p)]
    assert got == expected
