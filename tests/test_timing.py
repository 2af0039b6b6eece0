"""Time model: directional checks, scalar/array agreement, and the TimeEstimate API."""
import numpy as np
import pytest

from workbench import timing
from workbench.catalog import gpu, model
from workbench.specs import AttentionImpl, ClusterSpec, ParallelPlan
from workbench.timing import TERMS, collective_seconds, estimate_time, step_time_terms, time_inputs


def _cluster(name="H100-SXM", gpus_per_node=8, nodes=2):
    return ClusterSpec(gpu=gpu(name), gpus_per_node=gpus_per_node, num_nodes=nodes)


def _plan(cluster, **kw):
    base = dict(world_size=cluster.world_size, engine="megatron", micro_batch_size=1, global_batch_size=64)
    base.update(kw)
    return ParallelPlan(**base)


def test_breakdown_sums_to_step_and_derived_figures():
    m, c = model("guide-13b"), _cluster()
    est = estimate_time(m, c, _plan(c, tensor_parallel=4, pipeline_parallel=2, recompute="full"))
    assert set(est.breakdown) == set(TERMS)
    assert sum(est.breakdown.values()) == pytest.approx(est.step_seconds)
    assert est.tokens_per_second == pytest.approx(64 * 2048 / est.step_seconds)
    assert est.samples_per_second == pytest.approx(64 / est.step_seconds)
    assert est.hardware_tflops_per_gpu > est.model_tflops_per_gpu
    assert 0 < est.mfu < est.hfu < 1
    assert est.breakdown["recompute"] > 0 and est.breakdown["bubble"] > 0 and est.breakdown["tp_comm"] > 0
    tokens = 1e12
    assert est.train_seconds(tokens) == pytest.approx(tokens / est.tokens_per_second)
    assert est.gpu_hours(tokens) == pytest.approx(est.train_seconds(tokens) * 16 / 3600)
    assert est.cost(tokens, 2.5) == pytest.approx(est.gpu_hours(tokens) * 2.5)
    d = est.to_dict()
    for key in ("step_seconds", "tokens_per_second", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu"):
        assert d[key] > 0
    with pytest.raises(ValueError, match="price_per_gpu_hour"):
        est.cost(tokens, -1)


def test_tp_across_nodes_is_slower():
    m = model("guide-13b")
    inside = _cluster(gpus_per_node=8, nodes=2)
    across = _cluster(gpus_per_node=4, nodes=4)
    a = estimate_time(m, inside, _plan(inside, tensor_parallel=8))
    b = estimate_time(m, across, _plan(across, tensor_parallel=8))
    assert b.breakdown["tp_comm"] > 5 * a.breakdown["tp_comm"]
    assert b.step_seconds > a.step_seconds


def test_more_microbatches_shrink_the_bubble():
    m, c = model("guide-13b"), _cluster()
    fractions = []
    for gbs in (8, 32, 128):
        est = estimate_time(m, c, _plan(c, tensor_parallel=4, pipeline_parallel=4, global_batch_size=gbs))
        fractions.append(est.breakdown["bubble"] / est.step_seconds)
    assert fractions[0] > fractions[1] > fractions[2] > 0
    inter = estimate_time(m, c, _plan(c, tensor_parallel=4, pipeline_parallel=4, virtual_pipeline=2,
                                      global_batch_size=32))
    plain = estimate_time(m, c, _plan(c, tensor_parallel=4, pipeline_parallel=4, global_batch_size=32))
    assert inter.breakdown["bubble"] == pytest.approx(plain.breakdown["bubble"] / 2, rel=1e-9)


def test_zero3_adds_parameter_gathers():
    m, c = model("llama2-7b"), _cluster(nodes=2)
    est = {z: estimate_time(m, c, _plan(c, engine="deepspeed", zero_stage=z, global_batch_size=32),
                            overlap_comm=False)
           for z in (0, 1, 2, 3)}
    # without overlap: ZeRO-0 all-reduce == ZeRO-1 reduce-scatter + all-gather (+ ZeRO-1's copy of every
    # micro-batch's gradients into its bucket and in-place average, 4v per parameter through HBM); ZeRO-2
    # reduce-scatters every micro-batch; ZeRO-3 adds the forward and backward parameter all-gathers on top
    hbm0 = est[1].inputs["hbm_gb_per_s"] * 1e9 * est[1].inputs["hbm_efficiency"]
    bucket1 = 2 * 4 * 2 * est[1].inputs["stage_parameters"] / hbm0
    assert est[1].breakdown["dp_comm"] == pytest.approx(est[0].breakdown["dp_comm"] + bucket1, rel=1e-9)
    assert est[3].breakdown["dp_comm"] > est[2].breakdown["dp_comm"] >= est[1].breakdown["dp_comm"]
    assert [est[z].breakdown["zero3_hooks"] for z in (0, 1, 2)] == [0.0, 0.0, 0.0] and est[3].breakdown[
        "zero3_hooks"] > 0
    m_steps = 2  # 32 / (1 × 16)
    ag = collective_seconds(m.num_parameters * 2, 16, gb_per_s=c.inter_node_gb_per_s * 0.9,
                            latency_s=2e-5, kind="all_gather")
    # ZeRO-3: m × (2 gathers + reduce-scatter); ZeRO-2: m × reduce-scatter + 1 gather after the step
    # plus the ZeRO-3 hook calls: per micro-batch 2 fetches and 1 reduce per partitioned module, each with a
    # collective call on more than one rank, on the host: only what the layers' kernels do not cover is exposed;
    # plus the counted HBM bytes of the gathers (2v per parameter per fetch) and the gradient copies (5v + 4)
    ds = timing.calibration()["deepspeed"]
    modules = m.num_layers * timing.zero3_modules_per_layer(m) + 1
    hooked = m.num_layers * timing.zero3_hooked_modules_per_layer(m) + 1  # every submodule's hooks run
    hooks = m_steps * (2 * hooked * ds["zero3_fetch_latency_s"] + 2 * modules * ds["zero3_collective_call_s"]
                       + modules * (ds["zero3_reduce_latency_s"] + ds["zero3_collective_call_s"]))
    kernels = m_steps * (est[3].microbatch_forward_seconds + est[3].microbatch_backward_seconds)
    params = est[3].inputs["stage_parameters"]
    hbm = est[3].inputs["hbm_gb_per_s"] * 1e9 * est[3].inputs["hbm_efficiency"]
    copies = m_steps * (2 * 2 * 2 + 5 * 2 + 4) * params / hbm
    # ZeRO-2 accumulates each micro-batch's gradients into its bucket (copy + in-place average, 4v per parameter)
    bucket = m_steps * 4 * 2 * params / hbm
    assert est[2].inputs["grad_accumulate_bytes_per_parameter"] == 8 and est[3].inputs[
        "grad_accumulate_bytes_per_parameter"] == 0
    # the gathers' transfers are data-parallel traffic; the hooks' host time and their HBM copies are their own term
    assert est[3].breakdown["dp_comm"] - est[2].breakdown["dp_comm"] == pytest.approx(
        (2 * m_steps - 1) * float(ag) - bucket)
    assert est[3].breakdown["zero3_hooks"] == pytest.approx(max(0.0, hooks - kernels) + copies)
    fast_host = timing.step_time_terms(**{**est[3].inputs, "zero3_fetch_latency_s": 0.0,
                                          "zero3_reduce_latency_s": 0.0, "zero3_collective_call_s": 0.0})
    assert float(fast_host["dp_comm"]) == pytest.approx(est[3].breakdown["dp_comm"])
    assert float(fast_host["zero3_hooks"]) == pytest.approx(copies)
    overlapped = estimate_time(m, c, _plan(c, engine="deepspeed", zero_stage=3, global_batch_size=32))
    assert overlapped.breakdown["dp_comm"] < est[3].breakdown["dp_comm"]


def test_zero3_fetch_on_one_rank_copies_nothing_unless_parameters_are_offloaded():
    # DeepSpeed's one-rank fetch points each parameter at its own partition (_no_gather_coalesced): no HBM bytes
    assert float(timing.zero3_fetch_bytes_per_parameter(2, 1, 0)) == 0.0
    assert float(timing.zero3_fetch_bytes_per_parameter(2, 2, 0)) == 4.0
    assert float(timing.zero3_fetch_bytes_per_parameter(2, 1, 1)) == 4.0  # the host partition is copied in
    m, c = model("llama2-7b"), _cluster(gpus_per_node=1, nodes=1)
    plan = _plan(c, engine="deepspeed", zero_stage=3, global_batch_size=4)
    one = estimate_time(m, c, plan)
    fast = dict(zero3_fetch_latency_s=0.0, zero3_reduce_latency_s=0.0, zero3_collective_call_s=0.0)
    terms = timing.step_time_terms(**{**one.inputs, **fast})
    hbm = one.inputs["hbm_gb_per_s"] * 1e9 * one.inputs["hbm_efficiency"]
    params, m_steps = one.inputs["stage_parameters"], 4
    # only the gradient copies remain (5v + 4 per trainable parameter and micro-batch), and no traffic: one rank
    assert float(terms["zero3_hooks"]) == pytest.approx(m_steps * (5 * 2 + 4) * params / hbm)
    assert float(terms["dp_comm"]) == 0.0 and one.breakdown["dp_comm"] == 0.0


def test_offload_and_recompute_cost_time():
    m, c = model("llama2-7b"), _cluster(nodes=1)
    base = _plan(c, engine="deepspeed", zero_stage=2, global_batch_size=8)
    off = estimate_time(m, c, base.replace(offload_optimizer="cpu"))
    on = estimate_time(m, c, base)
    assert off.breakdown["offload"] > 0 == on.breakdown["offload"]
    # offloaded, the GPU keeps only the step's fixed cost (launches, DeepSpeed's per-tensor work)
    fixed = off.inputs["step_overhead_s"] + off.inputs["parameter_tensors"] * off.inputs["deepspeed_tensor_seconds"]
    assert off.breakdown["optimizer"] == pytest.approx(fixed) and fixed < on.breakdown["optimizer"]
    sel = estimate_time(m, c, base.replace(recompute="selective"))
    full = estimate_time(m, c, base.replace(recompute="full"))
    assert 0 == on.breakdown["recompute"] < sel.breakdown["recompute"] < full.breakdown["recompute"]
    assert full.model_tflops_per_gpu < on.model_tflops_per_gpu


def test_context_parallel_and_sequence_parallel_terms():
    m, c = model("llama3-8b"), _cluster()
    cp = estimate_time(m, c, _plan(c, tensor_parallel=2, context_parallel=2, global_batch_size=8))
    assert cp.breakdown["cp_comm"] >= 0
    nosp = estimate_time(m, c, _plan(c, tensor_parallel=4, global_batch_size=16))
    sp = estimate_time(m, c, _plan(c, tensor_parallel=4, sequence_parallel=True, global_batch_size=16))
    assert sp.breakdown["compute"] < nosp.breakdown["compute"]  # norms/dropout no longer replicated
    # an all-reduce is a reduce-scatter + all-gather: sequence parallel moves the same bytes
    assert sp.breakdown["tp_comm"] == pytest.approx(nosp.breakdown["tp_comm"], rel=1e-12)


def test_smaller_gemms_reach_less_of_peak():
    eff = timing.gemm_efficiency(np.array([8192, 8192, 512]), np.array([8192, 512, 8192]), 8192,
                                 efficiency_max=0.75, half_dim=64)
    assert eff[0] > eff[1] and eff[0] > eff[2] and eff[0] < 0.75
    m, c = model("guide-13b"), _cluster()
    t1 = estimate_time(m, c, _plan(c, tensor_parallel=1, pipeline_parallel=2, global_batch_size=64))
    t8 = estimate_time(m, c, _plan(c, tensor_parallel=8, pipeline_parallel=2, global_batch_size=64))
    assert t8.gemm_efficiency < t1.gemm_efficiency


PLANS = [dict(tensor_parallel=1), dict(tensor_parallel=4, pipeline_parallel=2, recompute="full"),
         dict(tensor_parallel=2, pipeline_parallel=4, virtual_pipeline=2, sequence_parallel=True,
              recompute="selective"),
         dict(tensor_parallel=2, context_parallel=2, distributed_optimizer=True),
         dict(engine="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="cpu"),
         dict(engine="deepspeed", zero_stage=2, micro_batch_size=2)]


def test_scalar_and_array_evaluations_agree_exactly():
    m, c = model("guide-13b"), _cluster()
    inputs = [time_inputs(m, c, _plan(c, **kw)) for kw in PLANS]
    scalar = [step_time_terms(**kw) for kw in inputs]
    arrays = {k: np.array([kw[k] for kw in inputs]) for k in inputs[0]}
    for k in ("tensor_parallel", "pipeline_parallel", "zero_stage", "recompute", "num_parameters"):
        assert arrays[k].dtype.kind == "i"  # integer-valued plan fields arrive as int arrays
    vector = step_time_terms(**arrays)
    for key in (*TERMS, "step_seconds", "model_flops", "hardware_flops"):
        for i, s in enumerate(scalar):
            assert float(vector[key][i]) == float(s[key]), (key, i)


def test_large_model_int_arrays_do_not_overflow():
    m, c = model("llama3-405b"), _cluster(nodes=128)
    kw = time_inputs(m, c, _plan(c, tensor_parallel=8, pipeline_parallel=16, global_batch_size=2048))
    scalar = step_time_terms(**kw)
    arrays = step_time_terms(**{k: np.array([v, v]) for k, v in kw.items()})
    assert scalar["model_flops"] > 2 ** 63
    assert float(arrays["model_flops"][1]) == float(scalar["model_flops"])


def test_calibration_curve_and_fallback():
    a100 = timing.efficiency_curve("A100-80GB")
    assert "Narayanan" in a100["source"]
    mi = timing.efficiency_curve("MI300X")
    assert "uncalibrated" in mi["source"]
    fitted = timing.fit_gemm_curve(
        [{"m": mm, "n": n, "k": k,
          "tflops": 989 * float(timing.gemm_efficiency(mm, n, k, efficiency_max=0.7, half_dim=100))}
         for mm, n, k in [(8192, 8192, 8192), (4096, 512, 4096), (16384, 1024, 8192), (2048, 128, 2048)]],
        peak_tflops=989)
    assert fitted["gemm_efficiency_max"] == pytest.approx(0.7, rel=0.03)
    assert fitted["gemm_half_dim"] == pytest.approx(100, rel=0.05)


def test_invalid_plan_is_rejected():
    m, c = model("guide-13b"), _cluster()
    with pytest.raises(ValueError, match="tensor_parallel=16 does not divide num_attention_heads=40"):
        estimate_time(m, c, _plan(c, tensor_parallel=16))


def test_step_time_terms_takes_exactly_the_step_inputs():
    """The inputs are listed once (StepInputs); a missing or unknown one is refused by name."""
    m, c = model("guide-13b"), _cluster()
    kw = time_inputs(m, c, _plan(c, tensor_parallel=8, global_batch_size=64))
    assert set(kw) == set(timing._STEP_ARGS)
    with pytest.raises(TypeError, match="overlap_comm"):
        step_time_terms(**{k: v for k, v in kw.items() if k != "overlap_comm"})
    with pytest.raises(TypeError, match="bogus"):
        step_time_terms(**kw, bogus=1)


def test_attention_score_bytes_are_counted_per_kernel():
    fwd, bwd = timing.attention_score_bytes(bytes_per_value=2, softmax_fusion=0, attention_dropout=0.1)
    assert (fwd, bwd) == (37, 45)
    no_drop = timing.attention_score_bytes(bytes_per_value=2, softmax_fusion=0, attention_dropout=0.0)
    assert (fwd - no_drop[0], bwd - no_drop[1]) == (5, 5)  # 16-bit output + 1-byte mask, each way
    fused = timing.attention_score_bytes(bytes_per_value=2, softmax_fusion=1, attention_dropout=0.1)
    assert fused == (13, 19)
    arr = timing.attention_score_bytes(bytes_per_value=np.array([2, 2]), softmax_fusion=np.array([0, 1]),
                                       attention_dropout=np.array([0.1, 0.1]))
    assert list(arr[0]) == [37, 13] and list(arr[1]) == [45, 19]
    assert timing.cross_entropy_bytes(bytes_per_value=2) == (40, 18)


def test_unfused_minus_flash_is_the_score_traffic():
    m, c = model("guide-13b"), _cluster(nodes=1)
    kw = time_inputs(m, c, _plan(c, engine="deepspeed", zero_stage=2, global_batch_size=16, recompute="full"))
    kw.update(unfused_attention=1, causal_attention=0, softmax_fusion=0, attention_dropout=0.1)
    unfused = step_time_terms(**kw)
    flash = step_time_terms(**{**kw, "unfused_attention": 0})
    layers, mb = m.num_layers, kw["num_microbatches"]
    elements = kw["micro_batch_size"] * m.seq_length * m.num_attention_heads * m.seq_length
    # the score kernels' own fraction of HBM bandwidth, on this GPU (their own measured scale, not the layer's)
    assert kw["score_hbm_scale"] != kw["layer_hbm_scale"]
    bps = kw["hbm_gb_per_s"] * 1e9 * kw["score_hbm_efficiency"] * kw["score_hbm_scale"]
    assert unfused["compute"] - flash["compute"] == pytest.approx(mb * layers * elements * (37 + 45) / bps)
    assert unfused["recompute"] - flash["recompute"] == pytest.approx(mb * layers * elements * 37 / bps)
    # the spec level: flash attention models get no score traffic at all
    est_flash = estimate_time(m.replace(attention="flash"), c, _plan(c, engine="deepspeed", global_batch_size=16))
    est_unf = estimate_time(m, c, _plan(c, engine="deepspeed", global_batch_size=16))
    assert est_flash.breakdown["compute"] < est_unf.breakdown["compute"]


def test_zero3_hooks_grow_with_recompute_and_deepspeed_step_costs_more():
    m, c = model("llama2-7b"), _cluster(nodes=1)
    base = _plan(c, engine="deepspeed", zero_stage=3, global_batch_size=8)
    none = estimate_time(m, c, base)
    full = estimate_time(m, c, base.replace(recompute="full"))
    ds = timing.calibration()["deepspeed"]
    # full recompute: one more fetch of every module: its gather bytes (2v per parameter) and its host call
    hbm = none.inputs["hbm_gb_per_s"] * 1e9 * none.inputs["hbm_efficiency"]
    gather = 2 * 2 * none.inputs["stage_parameters"] / hbm
    fast = dict(zero3_fetch_latency_s=0.0, zero3_reduce_latency_s=0.0, zero3_collective_call_s=0.0)
    assert (float(step_time_terms(**{**full.inputs, **fast})["zero3_hooks"])
            - float(step_time_terms(**{**none.inputs, **fast})["zero3_hooks"])) == pytest.approx(gather)
    slow = dict(zero3_fetch_latency_s=1.0)  # a host slower than the kernels: every call is exposed, less the kernels
    extra = (float(step_time_terms(**{**full.inputs, **slow})["zero3_hooks"])
             - float(step_time_terms(**{**none.inputs, **slow})["zero3_hooks"]))
    modules = m.num_layers * timing.zero3_modules_per_layer(m) + 1
    hooked = m.num_layers * timing.zero3_hooked_modules_per_layer(m) + 1
    assert extra == pytest.approx(hooked * 1.0 + modules * ds["zero3_collective_call_s"] - full.breakdown["recompute"]
                                  + gather)
    meg = estimate_time(m, c, _plan(c, engine="megatron", distributed_optimizer=True, global_batch_size=8))
    dsp = estimate_time(m, c, _plan(c, engine="deepspeed", zero_stage=1, global_batch_size=8))
    fixed = meg.inputs["step_overhead_s"]
    tensors = dsp.inputs["parameter_tensors"] * ds["tensor_seconds"]
    assert dsp.breakdown["optimizer"] - fixed - tensors == pytest.approx(
        (meg.breakdown["optimizer"] - fixed) * (32 + ds["step_bytes_per_parameter"]) / 32)


@pytest.mark.parametrize("kind,pp,v,recompute", [("1f1b", 4, 1, "full"), ("interleaved", 4, 2, "selective"),
                                                 ("1f1b", 2, 1, "none")])
def test_microbatch_phase_seconds_reproduce_the_bubble_term(kind, pp, v, recompute):
    from workbench.schedule import pipeline_schedule

    # Transformer Engine layers (flash attention): GPU-bound phases, no layer host time in either
    m, c = model("guide-13b").replace(attention=AttentionImpl.FLASH), _cluster()
    plan = _plan(c, tensor_parallel=4, pipeline_parallel=pp, virtual_pipeline=v, recompute=recompute,
                 global_batch_size=8 * c.world_size // (4 * pp))
    est = estimate_time(m, c, plan)
    b = est.breakdown
    fwd, bwd = est.microbatch_forward_seconds, est.microbatch_backward_seconds
    # the backward runs twice the forward's GEMMs (per-pass overheads — about 1 ms per layer pass on H200 as fitted —
    # and the loss are not doubled) plus the recomputed forward: between the forward and three times it
    assert 1.2 * fwd < bwd < 3 * fwd
    assert plan.num_microbatches * (fwd + bwd) == pytest.approx(b["compute"] + b["recompute"] + b["tp_comm"]
                                                                + b["cp_comm"])
    sched = pipeline_schedule(kind, pp, plan.num_microbatches, v, forward_seconds=fwd, backward_seconds=bwd,
                              stage_seconds=est.stage_microbatch_seconds)
    # idle time of the slowest stage in the simulated schedule of the stages as priced = the time model's bubble term
    # (1F1B: exact; interleaved: within the few per cent of schedule.bubble_seconds)
    close = 1e-6 if kind == "1f1b" else 0.08
    assert sched.total_seconds - plan.num_microbatches * (fwd + bwd) == pytest.approx(b["bubble"], rel=close)
    # the per-layer figures are the ones the stage is made of
    layers = m.num_layers / pp
    assert layers * (est.layer_forward_seconds + est.layer_backward_seconds) < fwd + bwd
    # megatron-core's local spec at t = 4: the layers' host outlasts their kernels, the forward's share in the
    # forward; the phases still add up to the terms and the schedule still gives the bubble
    local = estimate_time(model("guide-13b"), c, plan)
    lf, lb = local.microbatch_forward_seconds, local.microbatch_backward_seconds
    assert lf > fwd and lb >= bwd
    assert plan.num_microbatches * (lf + lb) == pytest.approx(sum(local.breakdown[k] for k in (
        "compute", "recompute", "tp_comm", "cp_comm")))
    sched = pipeline_schedule(kind, pp, plan.num_microbatches, v, forward_seconds=lf, backward_seconds=lb,
                              stage_seconds=local.stage_microbatch_seconds)
    assert sched.total_seconds - plan.num_microbatches * (lf + lb) == pytest.approx(local.breakdown["bubble"],
                                                                                    rel=close)

def test_gradient_accumulation_bytes_per_engine():
    """Each micro-batch's gradients reach the reduce buffer through HBM: Megatron DDP's fp32 main_grad.add_ without
    Apex/TE (4 + 4 + 2 bytes with bf16), nothing with gradient-accumulation fusion; DeepSpeed ZeRO-1/2's bucket copy
    and in-place average (4v); ZeRO-0 and ZeRO-3 (counted with its own terms) nothing."""
    from workbench.encode import grad_accumulate_bytes
    from workbench.specs import Precision

    bf16 = Precision.BF16
    assert grad_accumulate_bytes(True, 0, False, bf16) == 10 and grad_accumulate_bytes(True, 0, True, bf16) == 0
    assert [grad_accumulate_bytes(False, z, True, bf16) for z in (0, 1, 2, 3)] == [0, 8, 8, 0]
    assert grad_accumulate_bytes(True, 0, False, Precision.FP16) == 6
    arrays = grad_accumulate_bytes(np.array([True, False, False]), np.array([0, 2, 3]), np.array([False, True, True]),
                                   bf16)
    assert list(arrays) == [10, 8, 0]
    m, c = model("llama2-7b"), _cluster(nodes=1)
    one, two = (estimate_time(m, c, _plan(c, adam="torch", global_batch_size=g)) for g in (8, 16))
    grad = two.inputs["stage_parameters"] * 10 / (one.inputs["hbm_gb_per_s"] * 1e9 * one.inputs["hbm_efficiency"])
    assert two.breakdown["dp_comm"] - one.breakdown["dp_comm"] == pytest.approx(grad)


def test_rotary_embedding_bytes():
    """Unfused rotary embedding (megatron-core local spec, transformers): 12v forward and 10v backward per query
    and key element; Transformer Engine's fused kernel 2v each; learned positions none."""
    from workbench.timing import rope_bytes

    assert rope_bytes(bytes_per_value=2, fused=0) == (24, 20) and rope_bytes(bytes_per_value=2, fused=1) == (4, 4)
    c = _cluster(nodes=1)
    plan = _plan(c, global_batch_size=8)
    llama = model("llama2-7b", attention="unfused")
    est = estimate_time(llama, c, plan)
    assert (est.inputs["rope_forward_bytes"], est.inputs["rope_backward_bytes"]) == (24, 20)
    assert estimate_time(model("llama2-7b", attention="flash"), c, plan).inputs["rope_forward_bytes"] == 4
    assert estimate_time(model("gpt3-1_3b"), c, plan).inputs["rope_forward_bytes"] == 0
    none = step_time_terms(**{**est.inputs, "rope_forward_bytes": 0.0, "rope_backward_bytes": 0.0})
    tokens = 4096 * 1  # seq × micro-batch
    per_layer = tokens * (llama.query_projection_size + llama.kv_projection_size)  # TP 1
    hbm = est.inputs["hbm_gb_per_s"] * 1e9 * est.inputs["hbm_efficiency"] * est.inputs["layer_hbm_scale"]
    assert est.layer_forward_seconds - float(none["layer_forward_seconds"]) == pytest.approx(per_layer * 24 / hbm)


def test_parameter_offload_prices_the_copy_back_where_it_happens():
    """ZeRO-3 with its parameters on the host: with the optimizer on the CPU too, CPU Adam's update is cast into the
    host's 16-bit partition (no upload of the updated parameters, a smaller host factor than the blocking host-cast
    upload of optimizer offload alone); with the optimizer on the GPU each step casts the updated fp32 partition
    back into host memory (``param_offload_copy_back_seconds_per_parameter`` per parameter), which costs more than
    the GPU's Adam itself."""
    from workbench import params as P
    from workbench.estimate import estimate
    from workbench.timing import calibration

    m = model("llama2-7b")
    c = ClusterSpec(gpu="H200", gpus_per_node=1, host_cpu_cores_per_node=16, cpu_adam_threads=16)
    base = dict(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1,
                precision="bf16")
    both = estimate(m, c, ParallelPlan(offload_optimizer="cpu", offload_params="cpu", **base)).time.breakdown
    opt_only = estimate(m, c, ParallelPlan(offload_optimizer="cpu", **base)).time.breakdown
    par_only = estimate(m, c, ParallelPlan(offload_params="cpu", **base)).time.breakdown
    on_gpu = estimate(m, c, ParallelPlan(**base)).time.breakdown
    assert both["offload"] < opt_only["offload"]
    n = sum(P.weight_tensor_sizes(m, 1))
    copy_back = calibration()["cpu_adam"]["param_offload_copy_back_seconds_per_parameter"]
    assert par_only["offload"] == pytest.approx(n * copy_back + n * 2 / (gpu("H200").host_link_gb_per_s * 1e9), rel=0.02)
    assert par_only["offload"] > on_gpu["optimizer"]
    assert par_only["optimizer"] == pytest.approx(on_gpu["optimizer"])
