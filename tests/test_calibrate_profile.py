"""Hardware profiles: fits recover known parameters, the data file round-trips, lookup by name, and a profile moves
estimates in the expected direction (plus the visible note when none is loaded)."""
import json

import numpy as np
import pytest

from workbench import ClusterSpec, ParallelPlan
from workbench import memory as M
from workbench.calibrate import (NO_PROFILE_NOTE, HardwareProfile, fit_collective, fit_gemm, load_profile,
                                 profile_names)
from workbench.calibrate.profile import compare_with_datasheet
from workbench.catalog import gpu, model
from workbench.estimate import estimate
from workbench.timing import calibration, collective_seconds, efficiency_curve, gemm_efficiency, p2p_seconds


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))


def _gemm_points(emax, half, peak):
    pts = []
    for m in (256, 1024, 4096):
        for n, k in ((512, 4096), (4096, 1024), (14336, 4096)):
            pts.append({"name": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
                        "tflops": peak * float(gemm_efficiency(m, n, k, efficiency_max=emax, half_dim=half))})
    return pts


def h200_profile(*, emax=0.7, context_gib=1.0, reserve=0.1, name="h200-test") -> HardwareProfile:
    sizes = [2**k for k in range(12, 28, 2)]
    pts = [{"kind": "all_reduce", "bytes": b,
            "seconds": float(collective_seconds(b, 2, gb_per_s=300, latency_s=8e-6, kind="all_reduce"))}
           for b in sizes]
    ar = fit_collective(pts, ranks=2, kind="all_reduce")
    return HardwareProfile(
        name=name, machine="node1", device="NVIDIA H200", device_kind="cuda", gpu="H200", devices_per_node=2,
        driver="570.00", torch_version="2.11.0", cuda_version="13.0", nccl_version="2.27.3",
        created="2026-11-30T10:00:00",
        gemm={"bf16": {"peak_tflops": 989.0, "efficiency_max": emax, "half_dim": 100.0,
                       "points": _gemm_points(emax, 100.0, 989.0)}},
        collectives={"intra_node": {"ranks": 2, "nodes": 1, "backend": "nccl", "points": pts,
                                    "fit": {"all_reduce": ar}}},
        host_link_gb_per_s={"h2d_pinned": 50.0, "d2h_pinned": 52.0, "h2d_pageable": 20.0, "d2h_pageable": 18.0},
        device_memory_gb_per_s=4000.0,
        cpu_adam={"params_per_second": 1.5e9, "implementation": "torch", "threads": 16, "num_params": 10**8},
        memory={"context_bytes": int(context_gib * 2**30), "nccl_bytes": int(5 * 2**30), "reserve_fraction": reserve},
        host_memory_gib=1024.0, device_memory_gib=139.8, notes=("synthetic",))


def test_fit_collective_recovers_bandwidth_and_latency():
    for kind, n in (("all_reduce", 8), ("reduce_scatter", 4), ("all_gather", 2)):
        pts = [{"bytes": b, "seconds": float(collective_seconds(b, n, gb_per_s=120, latency_s=1.2e-5, kind=kind))}
               for b in [2**k for k in range(10, 30)]]
        fit = fit_collective(pts, ranks=n, kind=kind)
        assert fit["gb_per_s"] == pytest.approx(120, rel=1e-6)
        assert fit["latency_s"] == pytest.approx(1.2e-5, rel=1e-6)
        assert fit["rms_relative_error"] < 1e-9
    pts = [{"bytes": b, "seconds": p2p_seconds(b, gb_per_s=40, latency_s=3e-6)} for b in (1e3, 1e5, 1e7, 1e9)]
    fit = fit_collective(pts, ranks=2, kind="p2p")
    assert fit["gb_per_s"] == pytest.approx(40, rel=1e-6) and fit["latency_s"] == pytest.approx(3e-6, rel=1e-6)
    with pytest.raises(ValueError, match="2 message sizes"):
        fit_collective(pts[:1], ranks=2, kind="p2p")


def test_fit_gemm_recovers_the_curve():
    fit = fit_gemm(_gemm_points(0.72, 100.0, 989.0), peak_tflops=989.0)
    assert fit["efficiency_max"] == pytest.approx(0.72, rel=0.03)
    assert fit["half_dim"] == pytest.approx(100.0, rel=0.05)


def test_profile_round_trips_and_loads_by_name(tmp_path):
    p = h200_profile()
    path = p.save(tmp_path / "h200.json")
    again = load_profile(path)
    assert again == p
    assert HardwareProfile.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    # by name from the user's folder
    p.replace(name="mine").save(tmp_path / "home" / "profiles" / "mine.json")
    assert load_profile("mine").name == "mine"
    assert "mine" in profile_names()
    with pytest.raises(ValueError, match="unknown profile='nosuch'"):
        load_profile("nosuch")
    with pytest.raises(ValueError, match="unknown profile fields: bogus"):
        HardwareProfile.from_dict({**p.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="profile name"):
        p.replace(name="a b")


def _specs(n=2, **plan):
    m = model("gpt3-1.3b").replace(seq_length=2048)
    c = ClusterSpec(gpu=gpu("H200"), gpus_per_node=n)
    return m, c, ParallelPlan(world_size=n, micro_batch_size=2, global_batch_size=2 * n, **plan)


def test_estimate_without_profile_carries_the_note():
    est = estimate(*_specs())
    assert est.to_dict()["profile"] == {"name": None, "note": NO_PROFILE_NOTE}
    # a GPU whose layer kernels were measured on it says so (the H100: catalog gpu_kernels)
    m, c, p = _specs()
    note = estimate(m, c.replace(gpu=gpu("H100-SXM")), p).to_dict()["profile"]["note"]
    assert note.startswith(NO_PROFILE_NOTE) and "H100-SXM's own layer kernels" in note
    assert "score kernels" in note  # measured apart on the H100 (gpu_kernels score_hbm_scale)
    assert "MoE blocks" in note  # measured on the H100 too (gpu_kernels moe_block_hbm_efficiency)
    assert "fused optimizer step" in note  # and its optimizer step (gpu_kernels optimizer_hbm_scale)


def test_lower_gemm_efficiency_gives_a_longer_step():
    m, c, plan = _specs()
    base_emax = efficiency_curve("H200")["gemm_efficiency_max"]
    slow = estimate(m, c, plan, profile=h200_profile(emax=base_emax * 0.5))
    fast = estimate(m, c, plan, profile=h200_profile(emax=base_emax * 0.9))
    assert slow.time.breakdown["compute"] > 1.2 * fast.time.breakdown["compute"]  # GEMMs and memory-bound work
    assert slow.time.step_seconds > fast.time.step_seconds
    d = slow.to_dict()["profile"]
    assert d["name"] == "h200-test" and "GEMM curve measured (bf16" in d["note"]
    assert "h200-test" in slow.time.calibration_source


def test_profile_applies_measured_links_and_overheads():
    m, c, plan = _specs(zero_stage=1)
    prof = h200_profile()
    inputs, notes = prof.time_overrides(c, plan.precision)
    assert inputs["intra_node_gb_per_s"] == pytest.approx(300, rel=1e-6)
    assert inputs["intra_node_latency_s"] == pytest.approx(8e-6, rel=1e-6)
    assert inputs["host_link_gb_per_s"] == pytest.approx(51.0)
    assert inputs["pageable_copy_gb_per_s"] == 18.0  # the slower pageable direction (pin_memory off)
    assert "pageable host copies measured" in notes
    pageable = plan.replace(offload_optimizer="cpu", pin_memory=False)
    pinned_only = prof.replace(host_link_gb_per_s={"h2d_pinned": 50.0, "d2h_pinned": 52.0})
    catalog_rate = estimate(m, c, pageable, profile=pinned_only).time  # the catalog's 8.24 GB/s
    measured = estimate(m, c, pageable, profile=prof).time
    assert measured.step_seconds < catalog_rate.step_seconds
    assert measured.breakdown["offload"] < catalog_rate.breakdown["offload"]
    # the synthetic profile timed torch.optim.AdamW: not DeepSpeed's CPU Adam, which the time model prices
    assert "cpu_adam_params_per_second_per_node" not in inputs
    assert any("not DeepSpeedCPUAdam: not applied" in n for n in notes)
    ds = prof.replace(cpu_adam={**prof.cpu_adam, "implementation": "deepspeed"})
    ds_inputs, ds_notes = ds.time_overrides(c, plan.precision)
    # DeepSpeedCPUAdam: the catalog's fitted decomposition scaled by the per-thread speed of the same
    # micro-benchmark against the fit host's
    cal = calibration()["cpu_adam"]
    ref = cal["calibrate_reference"]
    ratio = (1.5e9 / 16) / (ref["params_per_second"] / ref["threads"])
    assert ds.cpu_adam_speed_ratio == pytest.approx(ratio) and prof.cpu_adam_speed_ratio is None
    assert ds_inputs["cpu_adam_params_per_second_per_thread"] == pytest.approx(cal["params_per_second_per_thread"]
                                                                              * ratio)
    assert ds_inputs["cpu_adam_serial_seconds_per_parameter"] == pytest.approx(cal["serial_seconds_per_parameter"]
                                                                              / ratio)
    assert ds_inputs["cpu_adam_params_per_second_per_node"] == pytest.approx(
        cal["params_per_second_per_core"] * c.host_cpu_cores_per_node * ratio)
    assert any(n.startswith("CPU Adam measured (deepspeed, 1.50 G params/s on 16 threads") for n in ds_notes)
    # the fit host's own timing leaves the catalog's rates as they are
    same = prof.replace(cpu_adam={"params_per_second": ref["params_per_second"], "threads": ref["threads"],
                                  "implementation": "deepspeed"})
    assert same.cpu_adam_speed_ratio == pytest.approx(1.0)
    off = plan.replace(offload_optimizer="cpu")
    assert estimate(m, c, off, profile=same).time.breakdown["offload"] == pytest.approx(
        estimate(m, c, off, profile=prof).time.breakdown["offload"])  # (prof's torch timing: not applied)
    # a copy rate above the curve's kernel fraction bounds it from above only; a slower one lowers it
    assert inputs["hbm_efficiency"] == pytest.approx(min(4000 / 4800, efficiency_curve("H200")["hbm_efficiency"]))
    slow = prof.replace(device_memory_gb_per_s=3000.0).time_overrides(c, plan.precision)[0]
    assert slow["hbm_efficiency"] == pytest.approx(3000 / 4800)
    assert "inter-node link: catalog" in notes
    # contexts above the engine's own training-run figure (DeepSpeed 2.17 GiB), which is the floor on a GPU
    small = estimate(m, c, plan, profile=h200_profile(context_gib=3.0, reserve=0.05))
    large = estimate(m, c, plan, profile=h200_profile(context_gib=5.0, reserve=0.05))
    more_reserve = estimate(m, c, plan, profile=h200_profile(context_gib=3.0, reserve=0.30))
    gib = 2**30
    assert large.memory.per_gpu_peak_bytes - small.memory.per_gpu_peak_bytes == pytest.approx(2 * gib, abs=2)
    assert more_reserve.memory.per_gpu_peak_bytes > small.memory.per_gpu_peak_bytes
    assert "profile h200-test" in small.memory.formulas["overhead"]
    # a plan in a precision the profile did not measure keeps the catalog curve, and says so
    fp16 = prof.time_overrides(c, "fp16")
    assert "gemm_efficiency_max" not in fp16[0] and any("catalog (no fp16" in n for n in fp16[1])


def test_bare_process_context_is_a_lower_bound_on_a_gpu():
    m, c, plan = _specs(zero_stage=1)
    bare = h200_profile(context_gib=0.5, reserve=0.05)
    at_constant = h200_profile(context_gib=M.OUTSIDE_ALLOCATOR_BYTES["deepspeed"] / 2**30, reserve=0.05)
    assert (estimate(m, c, plan, profile=bare).memory.per_gpu_peak_bytes
            == estimate(m, c, plan, profile=at_constant).memory.per_gpu_peak_bytes
            == estimate(m, c, plan).memory.per_gpu_peak_bytes)  # the engine's own constants: as without a profile
    assert any("lower bound" in n for n in bare.memory_overheads()[1])
    # a CPU profile's own figures are used as they are
    cpu = bare.replace(device_kind="cpu")
    assert cpu.memory_overheads()[0]["context_bytes"] == int(0.5 * 2**30)


def test_profile_for_another_gpu_is_refused():
    m, _, plan = _specs()
    other = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=2)
    with pytest.raises(ValueError, match="measured on H200, the cluster uses gpu=H100-SXM"):
        estimate(m, other, plan, profile=h200_profile())


def test_cpu_profile_describes_its_own_device():
    prof = h200_profile().replace(gpu="", device_kind="cpu", device="cpu: test", name="laptop",
                                  gemm={"fp32": {"peak_tflops": 0.2, "efficiency_max": 0.8, "half_dim": 30.0,
                                                 "points": [{"m": 64, "n": 64, "k": 64, "tflops": 0.1}]}},
                                  device_memory_gb_per_s=20.0, host_memory_gib=16.0)
    spec = prof.device_spec()
    assert spec.name == "cpu" and spec.peak_tflops["fp32"] == 0.2 and spec.memory_gib == 16.0
    m = model("gpt3-125m")
    c = ClusterSpec(gpu=spec, gpus_per_node=2)
    est = estimate(m, c, ParallelPlan(world_size=2, precision="fp32", micro_batch_size=1, global_batch_size=2),
                   profile=prof)
    assert est.time.step_seconds > 0 and est.to_dict()["profile"]["name"] == "laptop"
    rows = {r["quantity"]: r for r in compare_with_datasheet(prof)}
    assert rows["GEMM fp32 best"]["datasheet"] == gpu("cpu").peak_tflops["fp32"]  # the nominal cpu device
    assert rows["GEMM fp32 efficiency_max"]["datasheet"] is None
    # the catalog's nominal cpu device works too: the GEMM curve is rescaled to its peak
    nominal = ClusterSpec(gpu=gpu("cpu"), gpus_per_node=2)
    plan = ParallelPlan(world_size=2, precision="fp32", micro_batch_size=1, global_batch_size=2)
    a = estimate(m, nominal, plan, profile=prof).time.breakdown["compute"]
    assert a == pytest.approx(est.time.breakdown["compute"], rel=0.35)


def test_compare_with_datasheet_rows():
    rows = {r["quantity"]: r for r in compare_with_datasheet(h200_profile())}
    assert rows["GEMM bf16 best"]["datasheet"] == 989
    assert rows["all_reduce intra-node bandwidth"]["measured"] == pytest.approx(300, rel=1e-6)
    assert rows["all_reduce intra-node bandwidth"]["datasheet"] == pytest.approx(450 * 0.8)
    assert rows["context (outside allocator)"]["measured"] == pytest.approx(1.0)
    assert np.isfinite(rows["host link h2d pinned"]["ratio"])


def test_a_file_that_is_not_a_profile_is_named(tmp_path):
    from workbench.calibrate.profile import load_profile

    cases = {"list.json": (b"[1, 2]", "holds a JSON list, not a profile's object"),
             "broken.json": (b'{"a":', r"not valid JSON \(Expecting value at line 1 column 6\)"),
             "binary.json": (b"\xff\xfe{}", "is not UTF-8 text"),
             "fields.json": (b'{"bogus": 1}', "unknown profile fields: bogus"),
             "gemm.json": (b'{"name": "x", "machine": "m", "device": "d", "device_kind": "cuda", "gemm": {"bf16": 1}}',
                           r"gemm.bf16=1 must be a JSON object"),
             "gpus.json": (b'{"name": "x", "machine": "m", "device": "d", "device_kind": "cuda", '
                           b'"devices_per_node": "eight"}', "devices_per_node='eight' must be an integer")}
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"^profile file {tmp_path / name}:? {message}"):
            load_profile(tmp_path / name)


def test_cpu_profile_host_link_is_its_memory_copy_rate_beside_pageable_copies():
    """A CPU profile without pinned copies takes half its memory copy rate as the host link, also when it measured
    pageable copies (their rate is the pageable copies' own); a GPU profile's pinned copies set the link."""
    m, c, plan = _specs()
    cpu = h200_profile().replace(device_kind="cpu", device_memory_gb_per_s=100.0,
                                 host_link_gb_per_s={"h2d_pageable": 5.0, "d2h_pageable": 6.0})
    inputs, notes = cpu.time_overrides(c, plan.precision)
    assert inputs["host_link_gb_per_s"] == pytest.approx(50.0)
    assert inputs["pageable_copy_gb_per_s"] == 5.0 and "host link measured (pinned)" not in notes
    gpu_inputs, _ = h200_profile().time_overrides(c, plan.precision)
    assert gpu_inputs["host_link_gb_per_s"] == pytest.approx(51.0)


def test_measured_host_dispatch_scales_the_host_seconds():
    """A profile that timed its host's CUDA launches scales every host-seconds input of the time model by the ratio
    to the fit host's; without that measurement (older profiles, CPU profiles) the catalog host stands."""
    from workbench import encode
    from workbench.timing import HOST_REFERENCE_LAUNCH_US, HOST_SECONDS_INPUTS

    m, c, plan = _specs(zero_stage=3)
    prof = h200_profile()
    assert prof.host_seconds_scale is None
    assert "host dispatch: catalog host" in prof.time_overrides(c, plan.precision)[1]
    fast = prof.replace(host_dispatch={"launch_us": HOST_REFERENCE_LAUNCH_US / 2, "python_loop_s": 0.03,
                                       "probes": 7, "launch_us_range": [4.0, 4.4]})
    assert fast.host_seconds_scale == pytest.approx(0.5)
    assert any("host work x 0.50" in n for n in fast.time_overrides(c, plan.precision)[1])
    cols = encode.plan_columns(plan, m)
    base = encode.time_inputs(m, c, cols, plan.precision, profile=prof)
    halved = encode.time_inputs(m, c, cols, plan.precision, profile=fast)
    moved = [k for k in HOST_SECONDS_INPUTS if base[k]]
    assert "zero3_fetch_latency_s" in moved
    for key in moved:
        assert halved[key] == pytest.approx(base[key] / 2)
    assert estimate(m, c, plan, profile=fast).time.step_seconds < estimate(m, c, plan, profile=prof).time.step_seconds
    assert fast.replace(device_kind="cpu").host_seconds_scale is None  # no CUDA launches on a CPU profile
    launch = [r for r in compare_with_datasheet(fast) if r["quantity"] == "host CUDA launch"]
    assert launch and launch[0]["datasheet"] == HOST_REFERENCE_LAUNCH_US and launch[0]["ratio"] == pytest.approx(0.5)
    back = HardwareProfile.from_dict(json.loads(json.dumps(fast.to_dict())))
    assert back.host_dispatch == fast.host_dispatch
    with pytest.raises(ValueError, match=r"host_dispatch\.launch_us"):
        prof.replace(host_dispatch={"launch_us": "fast"})
