"""Helpers shared inside the benchmarks: one provenance stamp, one way to place fitted time constants."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_corpus_and_fp8_records_keep_their_provenance_keys(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    measure = _load("corpus_measure_under_test", BENCH / "corpus" / "measure.py")
    fp8 = _load("gpu_fp8_gemm_under_test", BENCH / "gpu_fp8_gemm.py")
    common = {"date_utc", "host_cpu_cores", "python", "torch", "cuda"}
    # the library versions are their own function (importing DeepSpeed and Megatron takes seconds)
    monkeypatch.setattr(measure, "versions", lambda: {"deepspeed": "0.0", "megatron_core": "0.0"})
    corpus = measure.provenance()
    assert set(corpus) == common | {"platform", "cpu_model", "deepspeed", "megatron_core", "env"}
    assert set(corpus["env"]) == set(measure.ENV_KEYS)
    gemm = fp8.provenance()
    assert set(gemm) == common | {"script", "transformer_engine"}
    assert gemm["script"] == "benchmarks/gpu_fp8_gemm.py"


def test_host_probe_times_the_host_and_says_why_a_part_is_missing(monkeypatch):
    import torch

    monkeypatch.setattr(sys, "path", list(sys.path))
    hp = _load("corpus_host_probe_under_test", BENCH / "corpus" / "host_probe.py")
    snap = hp.host_probe(torch)
    assert 0 < snap["python_loop_s"] < 10 and len(snap["loadavg"]) == 3
    assert snap["launch_us"] is None or snap["launch_us"] > 0  # None without CUDA
    assert "gpu_sm_mhz" in snap or snap["nvml"]  # NVML's clocks, or why not
    assert hp.python_loop_seconds(10) < hp.python_loop_seconds(10**6)
    copies = hp.copy_probe(torch, mib=1, repeats=1)
    if torch.cuda.is_available():
        assert all(copies[f"{d}_{k}_gbps"] > 0 for d in ("h2d", "d2h") for k in ("pinned", "pageable"))
    else:
        assert copies == {"copy_probe": "no CUDA"}


def test_time_calibration_writes_and_applies_constants_at_the_same_places(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", list(sys.path))
    cal = _load("calibrate_h200_time_under_test", BENCH / "calibrate_h200_time.py")
    names = [n for n, *_ in cal.CONSTANTS][:3]
    values = [1.234567, 2.5e-9, 0.75]
    catalog = tmp_path / "workbench" / "catalog"
    catalog.mkdir(parents=True)
    (catalog / "efficiency.json").write_text((cal.ROOT / "workbench" / "catalog" / "efficiency.json").read_text())
    monkeypatch.setattr(cal, "ROOT", tmp_path)
    try:
        cal.write_constants(names, values, source="test")
        written = cal.json.loads((catalog / "efficiency.json").read_text())
        cal.apply_constants(names, values)
        applied = cal.timing.calibration()
        for (n, sec, key, _), v in zip(cal.CONSTANTS[:3], values):
            w, a = written, applied
            for part in sec.split("."):
                w, a = w[part], a[part]
            assert w[key] == float(f"{v:.4g}") and a[key] == v, n
        assert cal.current_values(names) == values
    finally:
        cal.timing.calibration.cache_clear()


def test_zero3_host_rows_measure_beyond_the_model_without_its_host_term_and_restore_the_constants(monkeypatch):
    from workbench import ModelSpec, ParallelPlan, timing
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_zero3_under_test", BENCH / "bench_accuracy.py")
    model = ModelSpec(name="z3", hidden_size=1024, num_layers=8, num_attention_heads=16, seq_length=1024,
                      vocab_size=32000)
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=2, global_batch_size=4,
                        precision="bf16", recompute="full")
    cal = timing.calibration()["deepspeed"]
    before = {k: cal[k] for k in bench.ZERO3_HOST_CONSTANTS}
    with_host = estimate(model, cluster, plan).time.step_seconds
    runs = [dict(run_id="z3", shape_id="z3", model=model, cluster=cluster, plan=plan, measured=dict(step=0.5)),
            dict(run_id="z2", shape_id="z3", model=model, cluster=cluster, plan=plan.replace(zero_stage=2),
                 measured=dict(step=0.5))]
    (row,) = bench.zero3_host_rows(runs)  # ZeRO-2 runs are left out
    assert {k: cal[k] for k in bench.ZERO3_HOST_CONSTANTS} == before
    assert row["fetches"] == 2 * (8 * timing.zero3_modules_per_layer(model) + 1) * 3  # fwd, recompute, bwd
    without_host = 0.5 - row["exposed_seconds"]
    assert 0 < without_host < with_host
    assert row["exposed_per_fetch_seconds"] * row["fetches"] == pytest.approx(row["exposed_seconds"])


def test_pageable_rate_is_fitted_back_from_steps_priced_at_a_known_rate(monkeypatch):
    """bench_accuracy's pageable-offload fit: runs whose measured steps are the model's at 5.5 GB/s give 5.5 back
    (leaving the catalog as it was), pinned runs and runs without offload are left out, and the lines say the rate
    the hosts' own copy probes measured."""
    from workbench import ModelSpec, ParallelPlan, timing
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_pageable_under_test", BENCH / "bench_accuracy.py")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    plan = ParallelPlan(engine="deepspeed", zero_stage=2, world_size=1, micro_batch_size=1, global_batch_size=1,
                        offload_optimizer="cpu", pin_memory=False)
    cal = timing.calibration()["cpu_adam"]
    before = dict(cal)
    runs = []
    for i, hidden in enumerate((1024, 2048, 3072)):
        model = ModelSpec(name=f"p{i}", hidden_size=hidden, num_layers=8, num_attention_heads=16, seq_length=1024,
                          vocab_size=32000)
        cal[bench.PAGEABLE_KEY] = 5.5
        step = estimate(model, cluster, plan).time.step_seconds
        cal.clear()
        cal.update(before)
        runs += [dict(run_id=f"p{i}", shape_id=f"p{i}", model=model, cluster=cluster, plan=plan,
                      measured=dict(step=step), copy_probe={"h2d_pageable_gbps": 8.0, "d2h_pageable_gbps": 12.0}),
                 dict(run_id=f"p{i}-pinned", shape_id=f"p{i}", model=model, cluster=cluster,
                      plan=plan.replace(pin_memory=True), measured=dict(step=step))]
    rows = bench._pageable_rows(runs)
    assert [r["run"]["run_id"] for r in rows] == ["p0", "p1", "p2"] and cal == before
    assert 1 / bench.offload_host_refit(rows) == pytest.approx(5.5, rel=1e-6)
    lines = bench.pageable_lines(runs, fit={"p0", "p1", "p2"})
    assert "refitted 5.5 GB/s on 3 fit runs (3 shapes)" in lines[1]
    assert "to the GPU 8.0 GB/s, from it 12.0 GB/s" in "\n".join(lines)


def test_steady_step_and_repeatability_read_one_statistic_and_group_by_configuration(monkeypatch):
    from workbench import ModelSpec, ParallelPlan
    from workbench.specs import ClusterSpec

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_repeat_under_test", BENCH / "bench_accuracy.py")
    # the median of the last timed_steps; a torchrun record: the slowest rank's; no lists: the recorded median
    assert bench.steady_step_seconds(dict(step_seconds=[5, 2, 1.0, 3.0, 2.0], timed_steps=3)) == 2.0
    assert bench.steady_step_seconds(dict(step_seconds=[9, 1, 1], timed_steps=2, per_rank=[
        dict(step_seconds=[9, 1, 1]), dict(step_seconds=[9, 2, 4])])) == 3.0
    assert bench.steady_step_seconds(dict(step_seconds_median=0.4)) == 0.4
    model = ModelSpec(name="r", hidden_size=512, num_layers=2, num_attention_heads=8, seq_length=256, vocab_size=1000)
    plan = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1)

    def run(rid, step, threads=0, zero=3, traces=((1.0, 1.0, 1.0),)):
        return dict(run_id=rid, stack="mcore-ds", model=model, plan=plan.replace(zero_stage=zero),
                    cluster=ClusterSpec(gpu="H200", gpus_per_node=1, cpu_adam_threads=threads),
                    measured=dict(step=step), step_traces=[list(t) for t in traces], timed_steps=3)

    rep = bench.repeatability([run("a", 0.1), run("a/rep1", 0.2, threads=16, traces=[(9, 1.0, 1.5, 1.2)]),
                               run("b", 0.3, zero=2), run("a/rep2", 0.15)])
    (config,) = rep["configurations"]  # CPU threads do not split a configuration without optimizer offload
    assert config["step_seconds"] == [0.1, 0.2, 0.15] and config["spread"] == pytest.approx(1.0)
    assert config["floor_error"] == pytest.approx(1 / 3)  # 0.1333 s is 1/3 off both ends
    assert rep["across"]["deepspeed z3"]["configurations"] == 1 and "deepspeed z2" not in rep["across"]
    assert rep["within"]["deepspeed z3"]["worst"] == pytest.approx(0.5)  # the timed steps only, not the warm-up
    assert rep["within"]["deepspeed z2"]["runs"] == 1
    assert any("deepspeed z3" in line for line in bench.repeatability_lines(rep))
    # a refit sees one row per configuration, at the median of its processes' steps
    rows = bench.configuration_medians([run("a", 0.1), run("a/rep1", 0.3), run("b", 0.3, zero=2), run("a/r2", 0.15)])
    assert [(r["run_id"], r["measured"]["step"], r.get("repeats", 1)) for r in rows] == [("a", 0.15, 3), ("b", 0.3, 1)]
    assert bench.step_regime_of(run("a", 0.1)) == "deepspeed z3 1 rank"


def test_step_protocol_gives_zero3_a_longer_warm_up_and_records_whether_the_timed_steps_settled(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    st = _load("step_stats_under_test", BENCH / "corpus" / "step_stats.py")
    steps, timed = st.step_protocol(3)
    assert (steps, timed) == (st.ZERO3_STEPS, st.ZERO3_TIMED) and steps - timed > st.STEPS - st.TIMED
    assert st.step_protocol(0) == st.step_protocol(2) == (st.STEPS, st.TIMED)
    trace = [0.6, 0.27, 0.149, 0.118, 0.123, 0.119]
    assert st.steady_seconds(trace, 3) == 0.119
    assert st.timed_summary(trace, 3) == dict(timed_spread=pytest.approx(0.123 / 0.118 - 1), settled=True)
    assert st.timed_summary([0.6, 0.2, 0.206, 0.2, 0.156], 3)["settled"] is False  # still speeding up
    with pytest.raises(ValueError, match="timed=0"):
        st.steady_seconds(trace, 0)


def test_zero3_step_band_is_its_own_and_at_least_the_process_to_process_noise(monkeypatch):
    from workbench import ModelSpec, ParallelPlan
    from workbench import memory as M

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_band_under_test", BENCH / "bench_accuracy.py")
    model = ModelSpec(name="b", hidden_size=512, num_layers=2, num_attention_heads=8, seq_length=256, vocab_size=1000)
    plan = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1)
    rows = [(dict(plan=plan, shape_id=f"s{k}", measured=dict(step=1.0 + 0.01 * k), predicted=dict(step=1.0)), {})
            for k in range(6)] + [(dict(plan=plan.replace(zero_stage=2), shape_id="z2", measured=dict(step=2.0),
                                        predicted=dict(step=1.0)), {})]
    noise = dict(configurations=[dict(regime="deepspeed z3", step_seconds=[0.8, 1.0, 1.2]),
                                 dict(regime="deepspeed z2", step_seconds=[1.0, 3.0])])
    entry = bench.band(rows, noise=noise)["step"]["deepspeed/zero3"]
    assert entry["n"] == 6 and entry["noise_runs"] == 3  # ZeRO-3 runs and ZeRO-3 repeats only
    assert entry["model_low_fraction"] == 0.0 and entry["model_high_fraction"] == pytest.approx(0.045)
    assert entry["low_fraction"] == entry["noise_low_fraction"] == pytest.approx(0.16)  # the noise is wider
    assert entry["high_fraction"] == pytest.approx(0.16)
    assert "deepspeed/zero3" not in bench.band(rows)["step"]  # no repeats: no ZeRO-3 entry
    bands = {"step": {"deepspeed": {"n": 50, "shapes": 9, "low_fraction": 0.1, "high_fraction": 0.05},
                      "deepspeed/none": {"n": 20, "shapes": 9, "low_fraction": 0.12, "high_fraction": 0.07},
                      "deepspeed/zero3": {**entry, "shapes": 6}}}
    monkeypatch.setattr(M, "_error_bands", lambda: bands)
    low, high, note = M.error_band("deepspeed", "step", "none", zero_stage=3)
    assert (low, high) == (entry["low_fraction"], entry["high_fraction"]) and "ZeRO-3" in note
    assert M.error_band("deepspeed", "step", "none", zero_stage=2)[:2] == (0.12, 0.07)
    bands["step"]["deepspeed/zero3"]["n"] = 4  # too few runs: the recompute mode's band
    assert M.error_band("deepspeed", "step", "none", zero_stage=3)[:2] == (0.12, 0.07)


def test_zero3_host_spread_prices_the_expected_excess_and_the_refit_finds_planted_constants(monkeypatch):
    import numpy as np

    from workbench import ModelSpec, ParallelPlan, timing
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec

    f = timing.expected_excess_seconds
    assert f(2.0, 1.0, 0.0) == 1.0 and f(1.0, 2.0, 0.0) == 0.0
    assert f(1.0, 0.0, 0.5) == pytest.approx(np.exp(0.125))  # nothing hides it: the lognormal's mean
    # E[max(0, Z - 1)] for Z lognormal(0, 0.5): the closed form, checked against a fine quadrature of the density
    z = np.linspace(1e-6, 20, 400001)
    density = np.exp(-np.log(z) ** 2 / 0.5) / (z * 0.5 * np.sqrt(2 * np.pi))
    assert f(1.0, 1.0, 0.5) == pytest.approx(np.sum(np.maximum(0, z - 1) * density) * (z[1] - z[0]), rel=1e-4)
    assert list(f(np.array([1.0, 3.0]), np.array([2.0, 2.0]), 0.3)) == [f(1.0, 2.0, 0.3), f(3.0, 2.0, 0.3)]
    model = ModelSpec(name="thin", hidden_size=512, num_layers=12, num_attention_heads=8, seq_length=512,
                      vocab_size=1000)
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1)
    before = [estimate(model, cluster, p).time.step_seconds for p in (plan, plan.replace(zero_stage=2))]
    monkeypatch.setitem(timing.calibration()["deepspeed"], "zero3_host_spread", 0.5)
    after = [estimate(model, cluster, p).time.step_seconds for p in (plan, plan.replace(zero_stage=2))]
    assert after[0] > before[0] and after[1] == before[1]  # the spread only adds ZeRO-3 host time

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_zero3_refit_under_test", BENCH / "bench_accuracy.py")
    planted = dict(zero3_fetch_latency_s=1e-3, zero3_reduce_latency_s=1e-4, zero3_collective_call_s=2e-4,
                   zero3_hook_overlap=1.0, zero3_host_spread=0.0)
    rows = [dict(run=dict(shape_id=f"s{k % 3}", measured={}), base_seconds=0.05, fetches=f, modules=f // 2,
                 multi=float(k % 2), kernel_seconds=kern) for k, (f, kern) in
            enumerate([(50, 0.01), (100, 0.02), (150, 0.2), (60, 0.03), (90, 0.05), (200, 0.1)])]
    for x in rows:
        x["run"]["measured"]["step"] = bench.zero3_predict(x, planted)
    grid = dict(zero3_fetch_latency_s=[5e-4, 1e-3, 2e-3], zero3_collective_call_s=[0.0, 2e-4, 4e-4])
    found = bench.zero3_refit(rows, {**planted, "zero3_fetch_latency_s": 0.0, "zero3_collective_call_s": 0.0}, grid)
    assert found == planted


def test_outside_the_allocator_less_what_other_processes_held_at_the_start(monkeypatch):
    """A run that started beside another process's CUDA context counts that memory outside the allocator: the
    helper finds the lone process's context as the least memory in use at a start and takes the rest away."""
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_under_test", BENCH / "bench_accuracy.py")
    gib = bench.GiB

    def run(stack, outside, at_start, world=1):
        return dict(stack=stack, cluster=SimpleNamespace(world_size=world),
                    measured=dict(outside=outside * gib, used_at_start=at_start * gib))

    runs = [run("mcore-ds", 1.66, 0.51), run("mcore-ds", 2.17, 1.02), run("mcore-ds", 2.68, 1.53),
            run("hf-ds", 1.30, 0.51), run("mcore-ds", 9.0, 7.0, world=2)]
    out = bench.outside_beside_other_processes(runs)
    assert out["lone_context_gib"] == pytest.approx(0.51)
    ds = out["stacks"]["mcore-ds"]
    assert (ds["n"], ds["beside"]) == (3, 2) and ds["others_max_gib"] == pytest.approx(1.02)
    assert ds["outside_gib"] == pytest.approx(2.17) and ds["own_outside_gib"] == pytest.approx(1.66)
    assert out["stacks"]["hf-ds"]["beside"] == 0


def test_layer_byte_census_is_linear_in_the_widths_and_skips_gemms_and_scores(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    census = _load("count_layer_bytes_under_test", BENCH / "count_layer_bytes_cpu.py")
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=160,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                  max_position_embeddings=256, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
    one = census.layer_bytes(config, "sdpa")
    assert one["forward"] > 0 and one["backward"] > one["forward"]  # the backward moves more
    wider = census.layer_bytes(dict(config, intermediate_size=320), "sdpa")
    # the SwiGLU gate product and activation scale with the MLP width: about 18 bytes per unit of it, forward
    assert 10 < (wider["forward"] - one["forward"]) / 160 < 30
    coef = census.coefficients(config, "sdpa")
    assert coef["residual"] < 0.03  # on the plane (0.03 % at the corpus widths; reductions' outputs at tiny ones)
    assert census.bytes_per_token(coef, config)[0] == pytest.approx(one["forward"], rel=0.03)
    # attention scores (4-D, SEQ x SEQ) and GEMMs are not counted; an element-wise op over activations is, in and out
    import torch

    scores, x, w = (torch.zeros(1, 2, census.SEQ, census.SEQ, device="meta"), torch.zeros(census.SEQ, 8, device="meta"),
                    torch.zeros(8, 8, device="meta"))
    act = torch.zeros(census.SEQ, 8, device="meta", dtype=torch.bfloat16)
    mode, totals = census.census_mode()
    with mode:
        torch.softmax(scores, -1)
        x @ w
        assert totals["forward"] == 0
        act.mul(2.0)
    assert totals["forward"] == 2 * census.SEQ * 8 * 2


def test_corpus_runs_are_estimated_for_the_gpu_their_provenance_names(monkeypatch):
    """A record names its GPU in provenance.gpu (torch's device name); the accuracy bench, the replay study and
    describe.py estimate it for that catalog GPU and replay it under that GPU's memory; older records say nothing
    and ran on an H200."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    B = _load("bench_accuracy_gpu_under_test", BENCH / "bench_accuracy.py")
    spec = importlib.util.spec_from_file_location("alloc_sim_gpu_under_test", BENCH / "alloc_sim.py")
    S = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, S)  # its dataclasses look their module up while being made
    spec.loader.exec_module(S)
    D = _load("corpus_describe_gpu_under_test", BENCH / "corpus" / "describe.py")
    dims = dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024, vocab_size=1000,
                seq_length=128)
    rec = dict(run_id="mcore-ds/x/z2/mbs1", shape_id="x", stack="mcore-ds", status="ok", world_size=1,
               options={"zero": 2, "mbs": 1}, model_dims=dims, optimizer_class="FusedAdam",
               peak_allocated_bytes=10 * 2**30, peak_reserved_bytes=11 * 2**30, outside_allocator_bytes=2**30,
               step_seconds_median=0.1)
    h100 = {**rec, "omp_num_threads": "16",
            "provenance": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_total_bytes": 85_017_493_504, "host_cpu_cores": 16}}
    assert D.record_gpu(rec) == "H200" and D.record_gpu(h100) == "H100-SXM"
    old, new = B.corpus_run(rec), B.corpus_run(h100)
    assert old["cluster"].gpu.name == "H200" and new["cluster"].gpu.name == "H100-SXM"
    described = D.description(h100)["cluster"]
    assert described["gpu"]["name"] == "H100-SXM"
    # the host as the accuracy bench scores it: the run's cores and its CPU Adam's threads
    assert described["host_cpu_cores_per_node"] == new["cluster"].host_cpu_cores_per_node == 16
    assert described["cpu_adam_threads"] == new["cluster"].cpu_adam_threads == 16
    # the replay may reserve the GPU the run had, less the same memory outside the allocator
    assert S._capacity_bytes(old) - S._capacity_bytes(new) == S.H200_BYTES - 85_017_493_504
    # the H100's lower bandwidth and same peak: never a faster step than the H200's for one plan
    assert B.predict(new)["step"] > B.predict(old)["step"]


def test_host_dispatch_lines_price_each_run_with_its_own_probe(monkeypatch):
    """bench_accuracy --host-dispatch: a run whose host launched at half the fit host's cost is priced with the
    host seconds halved (a host-bound ZeRO-3 step comes out shorter), and a corpus without probed fit-split H200
    runs says so instead of failing."""
    from workbench import ModelSpec, ParallelPlan
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec
    from workbench.timing import HOST_REFERENCE_LAUNCH_US

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_dispatch_under_test", BENCH / "bench_accuracy.py")
    model = ModelSpec(name="d", hidden_size=1024, num_layers=8, num_attention_heads=16, seq_length=1024,
                      vocab_size=32000)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    plan = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1)
    step = estimate(model, cluster, plan).time.step_seconds
    run = dict(run_id="d", shape_id="d", model=model, cluster=cluster, plan=plan, measured=dict(step=step),
               predicted=dict(step=step), launch_us=HOST_REFERENCE_LAUNCH_US / 2)
    faster = estimate(model, cluster, plan, bench.host_dispatch_profile(run)).time.step_seconds
    assert faster < step
    lines = bench.host_dispatch_lines([run], fit=set())
    assert "no fit-split H200 run here carries host probes" in lines[0]
    assert lines[1].startswith("  H100-SXM   test n=   1  catalog host   0.0%")
    own = f"{abs(faster - step) / step:6.1%}"
    assert lines[1].endswith(f"own probe {own} {own} {own}")  # one run: median, p90 and worst alike
    assert own.strip() != "0.0%"  # the probe moved the estimate


def test_bench_accuracy_band_rewrite_keeps_every_replayed_entry(monkeypatch):
    """bench_accuracy --write-band rewrites error_band.json but keeps what alloc_sim.py --write-band wrote: the
    engine's replayed band and each offload regime's under it; its own entries are rewritten."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_replayed_under_test", BENCH / "bench_accuracy.py")
    device = {"deepspeed": 1, "deepspeed/full": 2, "deepspeed/replayed-allocator": 3,
              "deepspeed/replayed-allocator/param-offload": 4, "megatron/replayed-allocator": 5,
              "deepspeed/param-offload": 6}
    assert bench.replayed_band_entries(device) == {
        "deepspeed/replayed-allocator": 3, "deepspeed/replayed-allocator/param-offload": 4,
        "megatron/replayed-allocator": 5}


def test_bench_fits_picks_the_runs_at_the_edge(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    fits = _load("bench_fits_under_test", BENCH / "bench_fits.py")
    gib, total = 2**30, 85017493504  # an H100's total, as a record keeps it
    ran = dict(status="ok", provenance={"gpu_total_bytes": total}, peak_reserved_bytes=int(70 * gib),
               outside_allocator_bytes=int(1.3 * gib))
    assert fits.device_bytes(ran) == int(70 * gib) + int(1.3 * gib) and fits.total_bytes(ran) == total
    assert fits.at_edge(ran, 0.9) and not fits.at_edge(ran, 0.95)
    assert not fits.at_edge(dict(ran, options={"cap_bytes": 1}), 0.5)  # a capped allocator is not a card's edge
    nccl = dict(status="error", error="DistBackendError: NCCL error\nLast error:\nFailed to CUDA calloc async 24 bytes")
    assert fits.failed_for_memory(nccl) and fits.failed_for_memory({"status": "oom"})
    assert fits.failure_line(nccl) == "Failed to CUDA calloc async 24 bytes"
    assert not fits.failed_for_memory({"status": "error", "error": "ValueError: bad config"})
    assert not fits.at_edge({"status": "error", "error": "timeout"}, 0.9)


def test_expandable_study_reports_a_replay_that_runs_out_of_the_card(monkeypatch):
    """alloc_sim_expandable.py: a replay that runs out of the run's capacity (the default allocator on the plan that
    ran out of memory with it) is reported as out of memory, not a crash; one that fits gives its peak reserved."""
    monkeypatch.setattr(sys, "path", [str(BENCH)] + list(sys.path))
    study = _load("alloc_sim_expandable_under_test", BENCH / "alloc_sim_expandable.py")
    mib = 1 << 20
    events = [("malloc", 1, 600 * mib), ("malloc", 2, 600 * mib), ("free", 1, 600 * mib), ("free", 2, 600 * mib)]
    assert study._peak(events, 1000 * mib, expandable=False) is None
    assert study._peak(events, 1000 * mib, expandable=True) is None
    assert study._peak(events, 2000 * mib, expandable=False) == 1200 * mib
    # a megatron-core model's replay comes back from its child process: out of memory there is reported the same way
    assert study._mcore_peak({"peak_reserved_bytes": 5}, "r") == 5
    assert study._mcore_peak({"error": "MemoryError: simulated out of memory: 1 B requested"}, "r") is None
    with pytest.raises(SystemExit, match="r: the megatron-core trace failed: RuntimeError: broken"):
        study._mcore_peak({"error": "RuntimeError: broken"}, "r")


def test_a_run_checkpointing_every_kth_layer_is_described_and_scored_with_those_layers(monkeypatch):
    """measure.py's ``ckpt_every`` k (transformers' every_n_layers): decoder layers 0, k, 2k, ... are checkpointed,
    ⌈L/k⌉ of them; describe.py and the accuracy bench both give the plan that many recomputed layers, the run id says
    k, and a run of every layer keeps its old id and plan."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    B = _load("bench_accuracy_ckpt_under_test", BENCH / "bench_accuracy.py")
    D = _load("corpus_describe_ckpt_under_test", BENCH / "corpus" / "describe.py")
    R = _load("corpus_runs_ckpt_under_test", BENCH / "corpus" / "runs.py")
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256, intermediate_size=512,
                  num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                  max_position_embeddings=512, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
    base = dict(shape_id="tiny", stack="hf-ds", status="ok", hf_config=config, seq_length=256,
                attn_implementation="sdpa", optimizer_class="FusedAdam", peak_allocated_bytes=2**30,
                peak_reserved_bytes=2**30, outside_allocator_bytes=2**29, step_seconds_median=0.1)
    layers = {}
    for every in (1, 2, 3, 7):
        cfg = R._hf("tiny", 2, "sdpa", ckpt=True, ckpt_every=every)
        rec = dict(base, run_id=R.run_id(cfg), options={k: v for k, v in cfg.items() if k not in ("shape_id", "stack")})
        plan = D.description(rec)["plan"]
        assert B.corpus_run(rec)["plan"].recompute_layers == plan.get("recompute_layers")
        assert plan["recompute"] == "full"
        layers[every] = (rec["run_id"].split("/")[4], plan.get("recompute_layers"))
    assert layers == {1: ("ckpt", None), 2: ("ckpt-e2", 4), 3: ("ckpt-e3", 3), 7: ("ckpt-e7", 1)}
    assert D.checkpointed_layers({"ckpt_every": 2}, 7) == {}  # no checkpointing at all: nothing recomputed


def test_describe_writes_the_plan_the_accuracy_bench_scores(monkeypatch):
    """describe.py's workbench block of a measure.py record is the plan bench_accuracy.corpus_run scores: the
    pageable offload buffers the run's ds_config asked for and the overlap DeepSpeed resolved, not the defaults."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    B = _load("bench_accuracy_describe_under_test", BENCH / "bench_accuracy.py")
    D = _load("corpus_describe_scored_under_test", BENCH / "corpus" / "describe.py")
    from workbench.runs.specio import specs_from_dict

    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256, intermediate_size=512,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                  max_position_embeddings=512, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
    rec = dict(run_id="hf-ds/tiny/z2/sdpa/off-cpu-omp16/nopin/ovl/mbs1", shape_id="tiny", stack="hf-ds",
               status="ok", hf_config=config, seq_length=256, attn_implementation="sdpa",
               options={"zero": 2, "attn": "sdpa", "offload": "cpu", "omp_threads": 16, "pin": False, "overlap": True},
               ds_config={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                                  "pin_memory": False}}},
               zero_config_resolved={"stage": 2, "overlap_comm": True}, optimizer_class="DeepSpeedCPUAdam",
               peak_allocated_bytes=2**30, peak_reserved_bytes=2**30, outside_allocator_bytes=2**29)
    _, _, plan = specs_from_dict(D.description(rec))
    assert plan == B.corpus_run(rec)["plan"]
    assert plan.pin_memory is False and plan.overlap_comm is True and str(plan.offload_optimizer) == "cpu"
    # a record without its measurements (a plan being declared) is described the same way
    bare = {k: v for k, v in rec.items() if not k.endswith("_bytes")}
    assert specs_from_dict(D.description(bare))[2] == plan


def test_band_coverage_places_each_measured_value_against_the_band_the_estimate_prints(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    C = _load("band_coverage_under_test", BENCH / "band_coverage.py")
    q = dict(measured=110.0, estimate=100.0, low=5.0, high=10.0)
    assert C.side(q) == "inside"  # on the upper edge: estimate + high
    assert C.side(dict(q, measured=110.5)) == "above" and C.side(dict(q, measured=94.0)) == "below"
    assert C.side(dict(q, low=0.0, high=0.0)) is None and C.side(dict(q, measured=None)) is None
    # a real record, estimated as the CLI estimates it: a megatron-core plan under DeepSpeed on an H100
    dims = dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024, vocab_size=1000,
                seq_length=128)
    rec = dict(run_id="mcore-ds/x/z2/mbs1", shape_id="x", stack="mcore-ds", status="ok", world_size=1,
               options={"zero": 2, "mbs": 1}, model_dims=dims, optimizer_class="FusedAdam",
               peak_allocated_bytes=2**30, peak_reserved_bytes=2**31, outside_allocator_bytes=2**29,
               step_seconds_median=0.1, omp_num_threads="16",
               provenance={"gpu": "NVIDIA H100 80GB HBM3", "gpu_total_bytes": 85_017_493_504, "host_cpu_cores": 16})
    row = C.coverage_row(rec)
    assert row["gpu"] == "H100-SXM" and row["split"] == "test"
    assert row["device"]["measured"] == 2**31 + 2**29 and row["step"]["measured"] == 0.1
    assert row["device"]["high"] > 0 and row["step"]["high"] > 0  # the engine's held-out band, in absolute units
    assert C.coverage_row(dict(rec, status="oom")) is None
    rows = [dict(row, device=dict(row["device"], measured=row["device"]["estimate"] + row["device"]["high"] * 2))]
    lines = C.summary_lines(rows, "t")
    assert any(line.split()[:2] == ["device", "H100-SXM"] and line.split()[5] == "100.0%" for line in lines)
    assert any("mcore-ds/x/z2/mbs1" in line for line in lines)  # the run past the device band's upper side, named


def test_zero3_sub_group_fit_recovers_per_sub_group_and_per_tensor_costs(monkeypatch):
    """gpu_zero3_sub_groups.py's fit: steps built from known constants (a fixed cost, bytes per parameter, seconds
    per sub-group and per sub-group and tensor) come back from the script's own cases, and its table marks each
    case's residual; a step that does not grow with G gives g = h = 0."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    sg = _load("gpu_zero3_sub_groups_under_test", BENCH / "gpu_zero3_sub_groups.py")
    a, b, g, h = 0.004, 1.1e-11, 3e-4, 2e-6
    records = []
    for mi, tensors, sgs in sg.CASES:
        n = mi * sg.M
        groups = max(1, -(-n // sgs))  # the script's records carry the engine's count; any spread of G will do
        records.append(dict(parameters=n, tensors=tensors, sub_group_size=sgs, sub_groups=groups, backward_s=0.01,
                            step_s=a + b * n + g * groups + h * groups * tensors))
    coef, resid = sg.fit(records)
    assert coef == pytest.approx((a, b, g, h), rel=1e-6)
    assert max(abs(e) for e in resid) < 1e-9
    lines = sg.fit_lines(records)
    assert len(lines) == len(records) + 2
    assert "g 300.0 us per sub-group, h 2000.0 ns per sub-group and tensor" in lines[-1]
    flat = [dict(r, step_s=a + b * r["parameters"]) for r in records]
    coef, _ = sg.fit(flat)
    assert coef[2] == pytest.approx(0, abs=1e-12) and coef[3] == pytest.approx(0, abs=1e-14)
