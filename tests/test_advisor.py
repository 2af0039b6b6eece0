"""Advisor: each guide rule passes and fails on plans built for it, with the models' numbers; OOM ladder order;
throughput ranking; estimate() carries the checks; the advise command."""
import json
import time

import pytest

from workbench import advisor, memory as M, timing as T
from workbench.catalog import gpu, model
from workbench.configs.deepspeed import DeepSpeedOptions
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ParallelPlan

GiB = 2**30


def _cluster(name="H100-SXM", gpus_per_node=8, nodes=1, **kw):
    return ClusterSpec(gpu=gpu(name), gpus_per_node=gpus_per_node, num_nodes=nodes, **kw)


def _plan(c, **kw):
    base = dict(world_size=c.world_size, micro_batch_size=1, global_batch_size=64)
    base.update(kw)
    return ParallelPlan(**base)


def _checks(m, c, p, **kw):
    mem, t = M.estimate_memory(m, c, p), T.estimate_time(m, c, p)
    return {f.id: f for f in advisor.check_plan(m, c, p, memory=mem, time=t, **kw)}, mem, t


def test_strategy_tiers():
    m = model("llama3-8b", attention="flash")
    c8 = _cluster()
    f, *_ = _checks(m, c8, _plan(c8, engine="deepspeed", zero_stage=3))
    assert f["strategy_tier"].status == "pass" and "1-8 GPUs" in f["strategy_tier"].message
    f, *_ = _checks(m, c8, _plan(c8, engine="megatron", tensor_parallel=8))
    assert f["strategy_tier"].status == "warn" and "ZeRO-2 or ZeRO-3" in f["strategy_tier"].message
    c16 = _cluster(nodes=2)
    f, *_ = _checks(m, c16, _plan(c16, engine="megatron-deepspeed", tensor_parallel=4, zero_stage=1))
    assert f["strategy_tier"].status == "pass" and "8-32 GPUs" in f["strategy_tier"].message
    c64 = _cluster(nodes=8)
    f, *_ = _checks(m, c64, _plan(c64, engine="deepspeed", zero_stage=2))
    assert f["strategy_tier"].status == "warn" and "32+ GPUs" in f["strategy_tier"].message
    f, *_ = _checks(m, c64, _plan(c64, engine="megatron", tensor_parallel=8, pipeline_parallel=2))
    assert f["strategy_tier"].status == "pass"
    # one GPU: ZeRO has no data-parallel ranks to split over; the tier's ZeRO-2/3 advice would change nothing
    c1 = _cluster(gpus_per_node=1)
    f, *_ = _checks(m, c1, _plan(c1, engine="deepspeed", zero_stage=0))
    assert f["strategy_tier"].status == "pass" and "on one GPU ZeRO splits nothing" in f["strategy_tier"].message
    assert f["strategy_tier"].suggestion == ""


def test_zero3_layer_room_uses_layer_bytes():
    m = model("llama3-8b", attention="flash")
    c = _cluster()
    f, mem, _ = _checks(m, c, _plan(c, engine="deepspeed", zero_stage=3))
    layer = M.layer_params_per_rank(m, 1) * 2
    assert f["zero3_layer_fits"].status == "pass"
    assert f"{layer / GiB:.1f} GiB" in f["zero3_layer_fits"].message
    f, *_ = _checks(m, c, _plan(c, engine="deepspeed", zero_stage=2))
    assert "zero3_layer_fits" not in f
    # a card too small for one layer of a wide model
    big = model("llama3-405b", attention="flash")
    small = _cluster("RTX-4090")
    f, *_ = _checks(big, small, _plan(small, engine="deepspeed", zero_stage=3))
    assert f["zero3_layer_fits"].status == "fail"


def test_card_size_rule():
    m = model("llama2-7b", attention="flash")
    for name, status in (("A100-80GB", "pass"), ("RTX-4090", "warn"), ("V100-32GB", "warn")):
        c = _cluster(name)
        f, *_ = _checks(m, c, _plan(c, engine="deepspeed", zero_stage=3, precision="fp16"))
        assert f["card_size"].status == status, name
    small = model("gpt3-1.3b")
    c = _cluster()
    f, *_ = _checks(small, c, _plan(c, engine="deepspeed", zero_stage=2))
    assert "card_size" not in f


def test_tp_within_node_reports_tp_seconds():
    m = model("llama3-8b", seq_length=2048, attention="flash")
    c = _cluster(gpus_per_node=4, nodes=2)
    f, _, t = _checks(m, c, _plan(c, engine="megatron", tensor_parallel=8))
    assert f["tp_within_node"].status == "fail"
    assert f"{t.breakdown['tp_comm']:.3f} s/step" in f["tp_within_node"].message
    f, *_ = _checks(m, c, _plan(c, engine="megatron", tensor_parallel=4))
    assert f["tp_within_node"].status == "pass"


def test_bucket_sizes_flag_tiny_buckets_and_recommend_from_bandwidth():
    m = model("llama3-8b", attention="flash")
    c = _cluster(nodes=2)
    p = _plan(c, engine="deepspeed", zero_stage=1)
    tiny = DeepSpeedOptions(reduce_bucket_size=100_000, allgather_bucket_size=100_000)
    f, *_ = _checks(m, c, p, options=tiny)
    assert f["bucket_sizes"].status == "warn" and "reduce_bucket_size ≈" in f["bucket_sizes"].suggestion
    f, *_ = _checks(m, c, p)
    assert f["bucket_sizes"].status == "pass" and "inter-node" in f["bucket_sizes"].message


def test_overlap_comm_multi_node():
    m = model("llama3-8b", attention="flash")
    c = _cluster(nodes=2)
    p = _plan(c, engine="deepspeed", zero_stage=1)
    f, *_ = _checks(m, c, p.replace(overlap_comm=False), detailed=True)
    assert f["overlap_comm"].status == "fail" and "crosses nodes" in f["overlap_comm"].message
    assert "without overlap" in f["overlap_comm"].message and "to gain" in f["overlap_comm"].message
    f, *_ = _checks(m, c, p)
    assert f["overlap_comm"].status == "pass"


def test_megatron_overlap_is_decided_once():
    """Megatron's default (no --overlap-grad-reduce) is what the time model prices, the export writes and the
    advisor reports; overlap_comm=True turns all three on together."""
    from workbench.configs.megatron import megatron_args

    m = model("llama3-8b", attention="flash")
    c = _cluster(nodes=2)
    off = _plan(c, engine="megatron", tensor_parallel=8, global_batch_size=64)
    on = off.replace(overlap_comm=True)
    f_off, _, t_off = _checks(m, c, off)
    f_on, _, t_on = _checks(m, c, on)
    assert "--overlap-grad-reduce" not in megatron_args(m, c, off)
    assert "--overlap-grad-reduce" in megatron_args(m, c, on)
    assert t_off.inputs["overlap_comm"] == 0 and t_on.inputs["overlap_comm"] == 1
    assert t_on.breakdown["dp_comm"] < t_off.breakdown["dp_comm"]
    assert f_off["overlap_comm"].status == "fail" and "off (Megatron's default)" in f_off["overlap_comm"].message
    assert f_on["overlap_comm"].status == "pass"


def test_convergence_checks_read_options():
    m13 = model("guide-13b")
    c = _cluster(nodes=2)
    p = _plan(c, engine="megatron", tensor_parallel=4, pipeline_parallel=2, precision="fp16")
    f, *_ = _checks(m13, c, p)
    assert f["gradient_clipping"].status == "pass" and "gradient_clipping=0.5" in f["gradient_clipping"].message
    assert f["adam_betas"].status == "pass" and f["loss_scale"].status == "pass"
    assert "2^16" in f["loss_scale"].message and "1000 steps" in f["loss_scale"].message
    bad = DeepSpeedOptions(clip=2.0, betas=(0.9, 0.999), loss_scale_window=100)
    f, *_ = _checks(m13, c, p, options=bad)
    assert f["gradient_clipping"].status == "warn"
    assert f["adam_betas"].status == "warn" and "~1000 steps" in f["adam_betas"].message
    assert f["loss_scale"].status == "warn"


def test_oom_ladder_follows_the_guide_order_and_stops_at_first_fit():
    m = model("guide-13b")
    c = _cluster()
    p = _plan(c, engine="deepspeed", zero_stage=2, micro_batch_size=8, global_batch_size=64)
    assert not M.estimate_memory(m, c, p).fits
    ladder = advisor.oom_ladder(m, c, p)
    steps = [s.step for s in ladder]
    assert steps == sorted(steps) and ladder[-1].fits and not any(s.fits for s in ladder[:-1])
    for s in ladder:
        if s.plan is not None:
            mem = M.estimate_memory(m, c, s.plan)
            assert s.peak_bytes == mem.per_gpu_peak_bytes
            assert s.step_seconds == pytest.approx(T.estimate_time(m, c, s.plan).step_seconds)
            assert s.plan.global_batch_size == 64
    # step 0: the expandable-segments allocator (no step-time cost), kept by every later rung
    assert ladder[0].step == 0 and ladder[0].plan.expandable_segments and ladder[0].slowdown == 0
    assert all(s.plan.expandable_segments for s in ladder if s.plan is not None)
    assert ladder[1].plan.micro_batch_size < 8  # step 1 keeps the global batch with more accumulation
    # a plan that fits needs no ladder
    assert advisor.oom_ladder(m, c, _plan(c, engine="deepspeed", zero_stage=3, recompute="full")) == ()


def test_oom_ladder_reaches_zero3_offload():
    m = model("llama2-70b", attention="flash")
    c = _cluster()
    p = _plan(c, engine="megatron", tensor_parallel=8, global_batch_size=8)
    ladder = advisor.oom_ladder(m, c, p)
    assert ladder[-1].step == 4 and ladder[-1].plan.zero_stage == 3
    assert "offload" in ladder[-1].action and ladder[-1].slowdown > 0
    # TP 8 leaves data parallel 1: no distributed-optimizer rung; ZeRO-3 through Megatron-DeepSpeed with nothing
    # offloaded comes before the offloads and does not fit
    assert not [s for s in ladder if s.step == 3]
    first = next(s for s in ladder if s.step == 4)
    assert "nothing offloaded" in first.action and not first.fits
    assert str(first.plan.offload_optimizer) == "none" and first.peak_bytes > ladder[-1].peak_bytes


def test_oom_ladder_shards_states_on_the_gpu_before_offloading_them():
    # 7B under DeepSpeed ZeRO-0 on 8 x A100-40GB: the guide's ladder would go from checkpointing to ZeRO-3 with the
    # optimizer on the CPU; ZeRO-3 with nothing offloaded fits and costs far less step time
    m, c = model("llama2-7b"), _cluster("A100-40GB")
    p = _plan(c, engine="deepspeed", zero_stage=0, global_batch_size=8)
    ladder = advisor.oom_ladder(m, c, p)
    last = ladder[-1]
    assert last.step == 3 and last.fits and last.plan.zero_stage == 3
    assert str(last.plan.offload_optimizer) == "none" and str(last.plan.offload_params) == "none"
    assert last.settings == {"zero_optimization": {"stage": 3}} and "ZeRO-0 → ZeRO-3" in last.action
    offload = p.replace(zero_stage=3, offload_optimizer="cpu", expandable_segments=True,
                        recompute=last.plan.recompute)
    assert last.step_seconds < estimate(m, c, offload, checks=False).time.step_seconds
    # Megatron: the distributed optimizer is the shard rung, then ZeRO-3 with nothing offloaded, then the offloads
    mg = advisor.oom_ladder(model("gpt3-2.7b"), _cluster("A100-40GB", gpus_per_node=2),
                            ParallelPlan(world_size=2, engine="megatron", micro_batch_size=1, global_batch_size=32,
                                         precision="fp16", recompute="full", expandable_segments=True))
    mg = [s for s in mg if s.plan is not None]  # micro batch 1 and full recompute: steps 1-2 skipped
    assert [s.step for s in mg] == [3, 4, 4] and mg[0].plan.distributed_optimizer and mg[0].plan.engine == "megatron"
    assert "nothing offloaded" in mg[1].action and str(mg[2].plan.offload_optimizer) == "cpu" and mg[2].fits


def test_oom_ladder_recomputes_the_fewest_layers_that_fit_with_megatrons_block_method():
    # Llama 2 13B, TP1 PP4 on 8 x A100-80GB: selective recompute does not fit; full recompute of every layer does,
    # and so does the block method on the first 3 of each stage's 10 layers, at a fraction of the recompute time
    m, c = model("llama2-13b"), _cluster("A100-80GB")
    p = _plan(c, engine="megatron", pipeline_parallel=4, distributed_optimizer=True, global_batch_size=8)
    ladder = advisor.oom_ladder(m, c, p)
    last = ladder[-1]
    assert last.fits and last.step == 2 and last.plan.recompute_layers == 3 and "first 3 of 10 layers" in last.action
    assert last.settings == {"--recompute-granularity": "full", "--recompute-method": "block",
                             "--recompute-num-layers": "3"}
    every = estimate(m, c, last.plan.replace(recompute_layers=None), checks=False)
    assert every.memory.fits and last.step_seconds < every.time.step_seconds
    assert not estimate(m, c, last.plan.replace(recompute_layers=2), checks=False).memory.fits
    # the throughput advice on that plan with every layer recomputed: selective does not fit, the block method does
    full = last.plan.replace(recompute_layers=None)
    advice = next(a for a in advisor.throughput_suggestions(m, c, full, estimate(m, c, full).time)
                  if a.term == "recompute")
    assert "--recompute-method block --recompute-num-layers 3" in advice.settings[0] and "(fits)" in advice.message
    assert advice.predicted_step_seconds == pytest.approx(last.step_seconds)


def test_advice_names_the_planners_faster_plan_beside_the_ladder():
    # GPT-3 6.7B, Megatron TP2 on 8 x A100-40GB does not fit: the ladder keeps TP2 and ends on ZeRO-3 with full
    # recompute; the planner's fastest plan that fits, judged the same way, takes far less time per step
    from workbench.planner import describe_plan, search

    m, c = model("gpt3-6.7b"), _cluster("A100-40GB")
    p = _plan(c, engine="megatron", tensor_parallel=2, sequence_parallel=True)
    advice = advisor.advise(m, c, p)
    end = advice.oom_ladder[-1]
    best = search(m, c, global_batch_size=64, top=1, headroom=0.0, expandable_segments=True, fit_on="band").best
    assert end.fits and best.step_seconds < (1 - advisor.PLANNER_GAP) * end.step_seconds
    f = {x.id: x for x in advice.findings}["planner_alternative"]
    assert f.status == "warn" and describe_plan(best.plan) in f.message and f"{best.step_seconds:.3f} s/step" in f.message
    assert f"{1 - best.step_seconds / end.step_seconds:.0%} less time per step" in f.message
    assert "--fit-on band" in f.suggestion
    # a plan that fits has no ladder and no such finding
    fits = advisor.advise(m, c, best.plan)
    assert not fits.oom_ladder and "planner_alternative" not in {x.id for x in fits.findings}


def test_ladder_judges_fit_as_the_fits_memory_check_does():
    # a plan whose point estimate fits but whose band's upper side does not: the check fails and the ladder starts
    m, c = model("llama2-13b"), _cluster("A100-80GB")
    p = _plan(c, engine="deepspeed", zero_stage=3)
    mem = M.estimate_memory(m, c, p)
    assert mem.per_gpu_peak_bytes <= mem.capacity_bytes < mem.per_gpu_peak_bytes + mem.band_high_bytes
    assert not mem.fits_gpu
    assert advisor.fits_memory(p, mem).status == "fail"
    ladder = advisor.oom_ladder(m, c, p)
    assert ladder and ladder[-1].fits and not any(s.fits for s in ladder[:-1])
    for s in ladder:
        if s.plan is not None:
            assert s.fits == M.estimate_memory(m, c, s.plan).fits


def test_throughput_suggestions_ranked_by_exposed_time():
    m = model("llama3-8b", seq_length=2048, attention="flash")
    c = _cluster(gpus_per_node=4, nodes=2)
    p = _plan(c, engine="megatron", tensor_parallel=8, pipeline_parallel=1)
    t = T.estimate_time(m, c, p)
    s = advisor.throughput_suggestions(m, c, p, t)
    assert [x.exposed_seconds for x in s] == sorted((x.exposed_seconds for x in s), reverse=True)
    assert s[0].term == "tp_comm" and "crosses nodes" in s[0].message
    assert s[0].exposed_seconds == pytest.approx(t.breakdown["tp_comm"])


def test_diagnostic_commands_for_this_run():
    m, c = model("guide-13b"), _cluster(nodes=2)
    p = _plan(c, engine="megatron", tensor_parallel=4, pipeline_parallel=2)
    cmds = advisor.diagnostic_commands(m, c, p)
    assert any("NCCL_DEBUG=INFO" in x for x in cmds)
    nsys = next(x for x in cmds if x.startswith("nsys profile -t cuda,nvtx"))
    assert "--nnodes 2" in nsys and "--tensor-model-parallel-size 4" in nsys
    assert "-o profile_guide-13b_tp4_pp2_dp2 " in nsys
    # an imported model's name is a path: the capture file gets the directory's last part, no separators
    hf = m.replace(name="hf:path/to/Qwen3-0.6B/")
    nsys = next(x for x in advisor.diagnostic_commands(hf, c, p) if x.startswith("nsys profile"))
    assert "-o profile_Qwen3-0.6B_tp4_pp2_dp2 " in nsys


def test_estimate_carries_checks_cheaply():
    m, c = model("llama3-8b"), _cluster(nodes=2)
    p = _plan(c, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1)
    est = estimate(m, c, p)
    ids = {f.id for f in est.checks}
    assert {"fits_memory", "strategy_tier", "tp_within_node", "overlap_comm", "adam_betas"} <= ids
    assert est.to_dict()["checks"][0]["status"] in ("pass", "warn", "fail")
    start = time.perf_counter()
    for _ in range(50):
        advisor.check_plan(m, c, p, memory=est.memory, time=est.time)
    assert (time.perf_counter() - start) / 50 < 2e-3  # the target is < 1 ms; slack for a loaded machine


def test_finding_rejects_bad_status():
    with pytest.raises(ValueError, match="status='ok'"):
        advisor.Finding(id="x", status="ok", message="m")


def test_advise_command(capsys, tmp_path):
    from workbench.cli import main

    args = ["advise", "--model", "guide-13b", "--engine", "deepspeed", "--zero", "2", "--mbs", "8", "--gbs", "64"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["oom_ladder"] and out["findings"] and out["commands"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "out of memory: the guide's ladder" in text and "nsys profile" in text
    assert main(args + ["--log", str(tmp_path / "missing.log")]) == 2
    assert capsys.readouterr().err.startswith("workbench: error:")


def test_a_rung_that_fits_only_on_the_point_estimate_says_so(capsys):
    """The ladder judges a rung at the error band's upper side: one whose point estimate fits but whose upper side
    does not is named that way in the CLI and the JSON, not a bare 'does not fit' beside a peak under the card."""
    from pathlib import Path

    from workbench.cli import main

    args = ["advise", "--model", f"hf:{Path(__file__).parent / 'data' / 'hf' / 'llama3-8b'}", "--gpu", "A100-40GB",
            "--gpus-per-node", "8", "--zero", "2", "--mbs", "4", "--gbs", "64", "--seq", "4096",
            "--no-simulate-allocator"]
    assert main(args + ["--json"]) == 0
    rungs = json.loads(capsys.readouterr().out)["oom_ladder"]
    between = [r for r in rungs if r["fits_point_estimate"] and not r["fits"]]
    assert between, "the fixture no longer has a rung between the point estimate and the band's upper side"
    assert all(r["peak_gib"] <= 39.6 and "at the error band's upper side" in r["limit"] for r in between)
    assert all(not r["fits_point_estimate"] for r in rungs if r["peak_gib"] > 39.6)
    assert main(args) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "fits on the point estimate only (GPU memory: " in ln]
    assert len(lines) == len(between) and f"peak {between[0]['peak_gib']:.1f} GiB" in lines[0]


@pytest.fixture(scope="module")
def thin_zero3():
    """GPT-3 125M (hidden 768) under ZeRO-3 on one H200, eight micro-batches of one: the hooks dominate."""
    m, c = model("gpt3-125m", attention="flash"), _cluster("H200", gpus_per_node=1)
    p = _plan(c, engine="deepspeed", zero_stage=3, global_batch_size=8)
    return m, c, p, estimate(m, c, p, checks=False)


def test_zero3_host_bound_for_thin_layers(thin_zero3):
    m, c, p, rec = thin_zero3
    f = advisor.zero3_host_bound(m, c, p, rec)
    assert f is not None and f.status == "warn" and f.id == "zero3_host_bound"
    exposed, host = advisor.zero3_host_seconds(rec.time)
    assert 0 < exposed <= host and f.numbers["share"] == pytest.approx(exposed / rec.time.step_seconds)
    assert f.numbers["share"] >= advisor.ZERO3_HOST_SHARE_WARN
    # the measured spread with its provenance, and the options
    assert "155-280 ms" in f.message and "repeat, z3long" in f.message and "H200" in f.message
    for words in ("ZeRO-2", "micro batch 1 → ", "stage3_param_persistence_threshold", "stage3_prefetch_bucket_size"):
        assert words in f.suggestion
    alts = {a["option"]: a for a in f.numbers["alternatives"]}
    # the ZeRO-2 alternative is estimate() of that plan
    z2 = estimate(m, c, p.replace(zero_stage=2), checks=False)
    assert alts["zero2"]["step_seconds"] == pytest.approx(z2.time.step_seconds)
    assert alts["zero2"]["peak_bytes"] == int(z2.memory.per_gpu_peak_bytes) and alts["zero2"]["fits"]
    assert f"{z2.time.step_seconds * 1e3:.0f} ms/step" in f.suggestion
    # a larger micro batch at the same global batch: fewer micro-batches, each fetching every module once per pass
    mb = estimate(m, c, p.replace(micro_batch_size=8), checks=False)
    assert alts["micro_batch"]["step_seconds"] == pytest.approx(mb.time.step_seconds)
    assert mb.time.step_seconds < rec.time.step_seconds
    # persistence: attention projections kept gathered; one rank adds no memory (its gather is a view)
    per = alts["persistence_threshold"]
    assert per["threshold_elements"] == 768 * 3 * 768 and per["modules_per_layer"] == 2 and per["persistent_bytes"] == 0
    assert rec.time.step_seconds > per["step_seconds"] > z2.time.step_seconds * 0.5
    assert json.loads(json.dumps(f.to_dict()))["numbers"]["alternatives"][0]["option"] == "zero2"


def test_throughput_names_zero3_hooks_not_nccl_on_one_rank(thin_zero3):
    m, c, p, rec = thin_zero3
    suggestions = advisor.throughput_suggestions(m, c, p, rec.time)
    # one rank moves no data: the hooks are their own term, and nothing is booked as data-parallel traffic
    assert rec.time.breakdown["dp_comm"] == 0.0 and "dp_comm" not in [x.term for x in suggestions]
    hooks = next(x for x in suggestions if x.term == "zero3_hooks")
    assert hooks.exposed_seconds == rec.time.breakdown["zero3_hooks"] > 0
    assert "hooks" in hooks.message and "NCCL" not in hooks.message and "NCCL_DEBUG=INFO" not in hooks.settings
    # its priced remedy is ZeRO-2 (no per-module hooks), as in zero3_host_bound
    z2 = estimate(m, c, p.replace(zero_stage=2), checks=False)
    assert hooks.predicted_step_seconds == pytest.approx(z2.time.step_seconds)
    assert advisor.zero3_host_bound(m, c, p, rec) is not None  # the host finding still fires


def test_throughput_keeps_zero3_traffic_and_hooks_apart_on_many_ranks():
    m, c = model("gpt3-125m", attention="flash"), _cluster("H200", nodes=2)
    p = _plan(c, engine="deepspeed", zero_stage=3, global_batch_size=64)
    rec = estimate(m, c, p, checks=False)
    b = rec.time.breakdown
    assert b["dp_comm"] > 0 and b["zero3_hooks"] > 0
    by_term = {x.term: x for x in advisor.throughput_suggestions(m, c, p, rec.time, min_fraction=0.0)}
    assert "hooks" not in by_term["dp_comm"].message and "NCCL_DEBUG=INFO" in by_term["dp_comm"].settings
    assert by_term["zero3_hooks"].exposed_seconds == b["zero3_hooks"]


def test_zero3_host_bound_absent_for_wide_layers_and_other_stages():
    m, c = model("llama3-8b", attention="flash"), _cluster("H200")
    p = _plan(c, engine="deepspeed", zero_stage=3)
    rec = estimate(m, c, p, checks=False)
    assert advisor.zero3_host_seconds(rec.time)[0] < advisor.ZERO3_HOST_SHARE_WARN * rec.time.step_seconds
    assert advisor.zero3_host_bound(m, c, p, rec) is None
    small = model("gpt3-125m", attention="flash")
    for q in (_plan(c, engine="deepspeed", zero_stage=2), _plan(c, engine="megatron")):
        assert advisor.zero3_host_bound(small, c, q, estimate(small, c, q, checks=False)) is None


def test_zero3_persistent_bytes():
    c = _cluster("H200")
    p = _plan(c, engine="deepspeed", zero_stage=3)
    assert advisor.zero3_persistent_bytes(1000, 10, p) == 1000 * 10 * 2  # the whole bf16 parameter on each rank
    off = p.replace(offload_params="cpu", offload_optimizer="cpu")
    assert advisor.zero3_persistent_bytes(1000, 10, off) == pytest.approx(20000 * (1 + 1 / 8))
    one = _plan(_cluster("H200", gpus_per_node=1), engine="deepspeed", zero_stage=3)
    assert advisor.zero3_persistent_bytes(1000, 10, one) == 0.0
    m = model("llama3-8b")
    w = dict(advisor.zero3_module_weights(m, 2))
    assert w["QKV"] == (4096 * (4096 + 2 * 1024) // 2,) and w["fc1"] == (4096 * 2 * 14336 // 2,)
    hf = m.replace(implementation="transformers")
    w = dict(advisor.zero3_module_weights(hf))  # q, k, v and gate, up apart: one entry per fetched module
    assert (w["q projection"], w["k projection"], w["v projection"]) == ((4096 * 4096,), (4096 * 1024,),
                                                                         (4096 * 1024,))
    assert w["gate projection"] == w["up projection"] == (4096 * 14336,)
    assert len(w) == T.zero3_modules_per_layer(hf) == 7
    phi3 = hf.replace(fused_projections=True)  # Phi-3: qkv_proj and gate_up_proj, four fetched modules
    w = dict(advisor.zero3_module_weights(phi3))
    assert w["QKV"] == (4096 * (4096 + 2 * 1024),) and w["fc1"] == (4096 * 2 * 14336,)
    assert len(w) == T.zero3_modules_per_layer(phi3) == 4


def test_advise_lists_zero3_host_bound(thin_zero3):
    m, c, p, rec = thin_zero3
    a = advisor.advise(m, c, p, record=rec)
    assert [f.id for f in a.findings].count("zero3_host_bound") == 1
    d = a.to_dict()
    found = [f for f in d["findings"] if f["id"] == "zero3_host_bound"][0]
    assert found["numbers"]["threshold"] == advisor.ZERO3_HOST_SHARE_WARN
    assert all("numbers" not in f for f in d["findings"] if f["id"] != "zero3_host_bound")


# -- Transformer Engine's fused cross entropy (cross_entropy_fusion_advice) ------------------------------------------
def _xent(vocab=152064, **kw):
    m = model("llama3-8b", vocab_size=vocab)  # seq 8192
    c = _cluster()
    p = _plan(c, engine="megatron", distributed_optimizer=True, **{"tensor_parallel": 2, **kw})
    record = estimate(m, c, p, checks=False)
    return m, c, p, record, advisor.cross_entropy_fusion_advice(m, c, p, record)


def test_fused_cross_entropy_advised_for_a_152k_vocabulary_with_the_re_estimated_savings():
    from workbench.configs.megatron import megatron_args

    m, c, p, record, f = _xent()
    assert f is not None and f.status == "warn"
    te = estimate(m, c, p.replace(cross_entropy_fusion="te"), checks=False)
    # the unfused loss keeps 6 bytes per logit, te 2: 4 bytes × s·b·V/t (152,064 is already a multiple of 128·t)
    logits = 8192 * 1 * 152064 / 2
    assert f.numbers["saves_allocated_bytes"] == 4 * logits
    saved = record.memory.per_gpu_peak_bytes - te.memory.per_gpu_peak_bytes
    assert f.numbers["saves_bytes"] == int(saved) and saved > 4 * logits  # the allocator reserve shrinks too
    assert f.numbers["te_step_seconds"] == te.time.step_seconds < record.time.step_seconds
    assert f"({saved / GiB:.1f} GiB, {saved / record.memory.per_gpu_peak_bytes:.1%} saved; allocated 2.3 GiB)" \
        in f.message
    assert "keeps 6 bytes per logit" in f.message and "keeps 2." in f.message
    # the flags are the ones the Megatron export writes for the option
    assert f.suggestion.startswith(f"add {advisor.XENT_TE_FLAGS} ")
    args = " ".join(megatron_args(m, c, p.replace(cross_entropy_fusion="te")))
    assert advisor.XENT_TE_FLAGS in args and advisor.XENT_TE_FLAGS not in " ".join(megatron_args(m, c, p))
    # from the native fused loss only the implementation changes (same memory, less traffic)
    *_, native = _xent(cross_entropy_fusion="native")
    assert native.numbers["saves_bytes"] == f.numbers["saves_bytes"]
    assert native.suggestion.startswith("change --cross-entropy-fusion-impl native to te")


def test_fused_cross_entropy_not_advised_below_the_threshold_when_on_or_without_the_flag():
    *_, small = _xent(vocab=32000)  # 0.3 % of the peak, 0.5 % of the step: below XENT_TE_MIN_GAIN
    assert small is None
    *_, on = _xent(cross_entropy_fusion="te")
    assert on is None
    m = model("llama3-8b", vocab_size=152064)
    c = _cluster()
    for mm, p in ((m, _plan(c, engine="deepspeed", zero_stage=3)),
                  (m.replace(implementation="transformers"), _plan(c, engine="deepspeed", zero_stage=3)),
                  (m, _plan(c, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1))):
        assert advisor.cross_entropy_fusion_advice(mm, c, p, estimate(mm, c, p, checks=False)) is None


def test_fused_cross_entropy_when_the_peak_is_elsewhere_or_the_plan_does_not_fit():
    # PP=2: the peak is on stage 0, the loss on stage 1 — no memory saved, the slowest (last) stage gets faster
    _, _, _, record, f = _xent(pipeline_parallel=2)
    assert f.numbers["saves_bytes"] == 0 and "the peak is on pipeline stage 0, not the last" in f.message
    assert 1 - f.numbers["te_step_seconds"] / f.numbers["step_seconds"] >= advisor.XENT_TE_MIN_GAIN
    # TP=1 with full recompute does not fit an 80 GB card; te's 4 bytes per logit less make it fit
    _, _, p, record, f = _xent(tensor_parallel=1, recompute="full")
    assert not record.memory.fits_gpu and f.numbers["te_fits"] and not f.numbers["fits"]
    assert f.suggestion.endswith("then the plan fits")
    found = {x.id: x for x in advisor.advise(*_xent(tensor_parallel=1, recompute="full")[:3]).findings}
    assert found["cross_entropy_fusion"].numbers == f.numbers
    # the cheap checks estimate() carries do not re-estimate it
    checks = {x.id for x in estimate(*_xent(tensor_parallel=1, recompute="full")[:3]).checks}
    assert "fits_memory" in checks and "cross_entropy_fusion" not in checks


def test_a_plan_that_peaks_at_deepspeed_initialization_is_told_why():
    """ZeRO-2 with the optimizer on the CPU on a 24 GB card: the fp32 master's GPU clone beside the flat buffer is the
    peak; the failing check says so and what shrinks it, and expandable segments (no reserve above that peak) are not
    offered."""
    from pathlib import Path

    from workbench.estimate import estimate
    from workbench.hf import import_hf

    model = import_hf(Path(__file__).parent / "data" / "hf" / "mistral-7b", seq_length=2048).spec
    cluster = ClusterSpec(gpu="RTX-4090", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu", recompute="full")
    est = estimate(model, cluster, plan)
    assert est.memory.peak_stage.peak_phase == "initialization"
    found = {f.id: f for f in est.checks}
    assert found["fits_memory"].status == "fail"
    assert "initialization" in found["fits_memory"].suggestion and "clone" in found["fits_memory"].suggestion
    assert "expandable_segments" not in found


def test_parameter_offload_with_the_optimizer_on_the_gpu_is_flagged_with_both_plans_priced():
    """ZeRO-3 with the parameters on the host and the optimizer on the GPU (measured 4x slower per token on H200 than
    with both offloaded): the advisor warns, prices the plan with the optimizer offloaded too, and says what to add
    to the ds_config; plans with both offloaded, or with neither, get no such finding."""
    from workbench.advisor import advise

    m = model("llama2-7b")
    c = ClusterSpec(gpu="H200", gpus_per_node=1)
    base = dict(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1,
                precision="bf16")
    found = {f.id: f for f in advise(m, c, ParallelPlan(offload_params="cpu", **base)).findings}
    f = found["param_offload_optimizer"]
    assert f.status == "warn" and '"offload_optimizer": {"device": "cpu"' in f.suggestion
    assert f.numbers["both_step_seconds"] < f.numbers["step_seconds"] / 2
    assert f.numbers["both_peak_bytes"] < f.numbers["peak_bytes"] / 2
    for plan in (ParallelPlan(offload_params="cpu", offload_optimizer="cpu", **base), ParallelPlan(**base)):
        assert "param_offload_optimizer" not in {x.id for x in advise(m, c, plan).findings}


def test_host_memory_margin_warns_past_the_measured_share_of_the_hosts_memory():
    """With states on the CPU the advisor warns once the host estimate (the ranks' resident sets) passes 85 % of the
    node's memory (a 126 GiB host ran ZeRO-3 offload runs estimated at up to 83 % and killed three at 102-103 %);
    below it passes, and without offload it says nothing."""
    m = model("llama3-8b")
    p = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="cpu",
                     micro_batch_size=1, global_batch_size=1, recompute="full")
    first = estimate(m, ClusterSpec(gpu="H200", gpus_per_node=1), p).memory
    need = first.host_bytes_per_node / GiB
    assert first.host_bytes_per_gpu > first.offloaded_bytes_per_gpu + M.HOST_PROCESS_BYTES
    host = {}
    for share in (0.8, 0.9):
        c = ClusterSpec(gpu="H200", gpus_per_node=1, host_memory_gib_per_node=need / share)
        mem = estimate(m, c, p).memory
        host[share] = (mem.host_bytes_per_node / mem.host_capacity_bytes_per_node, advisor.host_memory_margin(p, mem))
    share, found = host[0.8]
    assert share <= advisor.HOST_MEMORY_WARN_FRACTION and found.status == "pass"
    share, found = host[0.9]
    assert share > advisor.HOST_MEMORY_WARN_FRACTION and found.status == "warn"
    assert f"({share:.0%})" in found.message and "killed by the kernel" in found.message and found.suggestion
    assert f"{first.offloaded_bytes_per_gpu / GiB:.1f} GiB of offloaded states" in found.message
    c = ClusterSpec(gpu="H200", gpus_per_node=1)
    p = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=2, micro_batch_size=1, global_batch_size=1)
    assert advisor.host_memory_margin(p, estimate(m, c, p).memory) is None


def test_ladder_folds_an_uneven_pipeline_onto_one_stage():
    """A plan with uneven stages (Megatron --decoder-first/last-pipeline-num-layers) whose ladder reaches ZeRO-3
    folds the pipeline whole: the uneven-stage settings go with it (they need more than one stage)."""
    from workbench.specs import NO_PIPELINE

    m = model("guide-13b")
    c = ClusterSpec(gpu=gpu("A100-80GB"), gpus_per_node=8)
    p = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=2, pipeline_parallel=4, first_stage_layers=18,
                     last_stage_layers=6, embedding_in_pipeline_split=False, global_batch_size=128, precision="fp16")
    ladder = advisor.advise(m, c, p).oom_ladder
    folded = [s for s in ladder if s.plan is not None and s.plan.zero_stage == 3]
    assert folded and "pipeline 4 → 1" in folded[0].action
    assert all(getattr(folded[0].plan, k) == v for k, v in NO_PIPELINE.items())


def test_host_dependent_step_asks_for_a_profile_of_the_machine():
    """A CPU-offload step that is mostly the host's work follows the machine: without a profile the advice says so,
    with the two H100 machines' measured spread, and asks for `workbench calibrate`; a profile that timed
    DeepSpeedCPUAdam passes, one that timed torch's AdamW (not what DeepSpeed runs) still warns; a GPU-bound plan
    gets no such finding."""
    from workbench.calibrate.profile import load_profile

    m = model("llama2-7b")
    plan = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu", micro_batch_size=1, global_batch_size=1,
                        recompute="full")
    found = {f.id: f for f in advisor.advise(m, ClusterSpec(gpu="H100-SXM", gpus_per_node=1), plan).findings}
    host = found["host_dependent_step"]
    assert host.status == "warn" and "workbench calibrate" in host.suggestion
    assert host.numbers["host_work_share"] >= advisor.HOST_WORK_SHARE_WARN
    assert "-6.7% / +10.1%" in host.message and "25%-55% over" in host.message
    assert "5.9 against 8-15 µs" in host.message
    h200 = ClusterSpec(gpu="H200", gpus_per_node=1)
    torch_timed = load_profile("h200")
    assert torch_timed.cpu_adam["implementation"] == "torch"
    found = {f.id: f for f in advisor.advise(m, h200, plan, profile=torch_timed).findings}
    assert found["host_dependent_step"].status == "warn"
    assert "--cpu-adam deepspeed" in found["host_dependent_step"].suggestion
    ds_timed = torch_timed.replace(cpu_adam={**torch_timed.cpu_adam, "implementation": "deepspeed"})
    found = {f.id: f for f in advisor.advise(m, h200, plan, profile=ds_timed).findings}
    assert found["host_dependent_step"].status == "pass" and "CPU Adam" in found["host_dependent_step"].message
    gpu_bound = ParallelPlan(world_size=8, zero_stage=1, micro_batch_size=4, global_batch_size=32)
    found = {f.id for f in advisor.advise(m, ClusterSpec(gpu="H100-SXM", gpus_per_node=8), gpu_bound).findings}
    assert "host_dependent_step" not in found


def test_lora_dropout_memory_prices_the_dropped_copies_against_peft_default():
    """lora_dropout > 0 keeps a dropped copy of each adapter's input: the finding gives the peak with and without it
    (the difference the memory model's LoRA term makes), warns when it passes 5 % of the peak, and says nothing
    for a full fine-tune or dropout 0; checkpointing every layer recomputes the copies."""
    from pathlib import Path

    from workbench.hf import import_hf

    llama = import_hf(Path(__file__).parent / "data" / "hf" / "llama3-8b", seq_length=4096).spec.replace(num_layers=8)
    c = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    p = ParallelPlan(world_size=1, zero_stage=2, micro_batch_size=2, global_batch_size=2, lora_rank=16,
                     lora_targets=("q", "k", "v", "o"), lora_dropout=0.05)
    f = advisor.lora_dropout_memory(llama, c, p)
    peak, without = f.numbers["peak_bytes"], f.numbers["peak_without_dropout_bytes"]
    assert peak == estimate(llama, c, p, checks=False).memory.per_gpu_peak_bytes
    assert without == estimate(llama, c, p.replace(lora_dropout=0.0), checks=False).memory.per_gpu_peak_bytes
    assert f.status == "warn" and peak - without > 0.05 * peak and "--lora-dropout 0" in f.suggestion
    assert _checks(llama, c, p)[0]["lora_dropout_memory"].status == "warn"
    assert advisor.lora_dropout_memory(llama, c, p.replace(lora_dropout=0.0)) is None
    assert advisor.lora_dropout_memory(llama, c, p.replace(lora_rank=0)) is None
    ckpt = advisor.lora_dropout_memory(llama, c, p.replace(recompute="full"))
    assert (ckpt.numbers["peak_bytes"] - ckpt.numbers["peak_without_dropout_bytes"]) < peak - without
