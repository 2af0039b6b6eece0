"""Log reader: DeepSpeed and Megatron log lines (fixtures in tests/data/logs modelled on the real format strings),
spike detection, and matching to the advice."""
import json
from pathlib import Path

import pytest

from workbench import memory as M, timing as T
from workbench.catalog import gpu, model
from workbench.logreader import match_advice, parse_log, read_log
from workbench.specs import ClusterSpec, ParallelPlan

LOGS = Path(__file__).parent / "data" / "logs"
GiB = 2**30


def _ctx(plan_kw, nodes=2, name="guide-13b"):
    m = model(name)
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=nodes)
    p = ParallelPlan(world_size=c.world_size, **plan_kw)
    return dict(model=m, cluster=c, plan=p, memory=M.estimate_memory(m, c, p), time=T.estimate_time(m, c, p))


def test_megatron_log():
    s = read_log(LOGS / "megatron_bf16_tp4pp2.log")
    assert s.kind == "megatron"
    assert len(s.iterations) == 30 and s.iterations[-1] == 300
    assert s.losses[0] == pytest.approx(10.7365) and s.losses[-1] < s.losses[0]
    assert s.loss_scales[-1] == 1.0 and s.skipped_iterations == 0
    assert [x.iteration for x in s.grad_norm_spikes] == [150, 220]
    assert s.step_seconds[0] == pytest.approx(15.8124)
    assert 13.0 < s.median_step_seconds < 13.2  # warm-up line skipped
    assert s.max_allocated_bytes == int(45872.25 * 2**20)  # largest 'max allocated' over ranks, MB → bytes
    assert s.max_reserved_bytes == int(48214.0 * 2**20)


def test_deepspeed_log():
    s = read_log(LOGS / "deepspeed_fp16_zero2.log")
    assert s.kind == "deepspeed"
    assert s.overflow_count == 6 and s.skipped_iterations == 6
    assert s.loss_scales[0] == 65536 and min(s.loss_scales) == 1024
    assert s.iterations == (10, 20, 30, 40, 50, 60)
    assert 7.7 < s.median_samples_per_second < 8.1
    assert s.max_allocated_bytes == int(38.61 * GiB)  # MaxMemAllocated beats see_memory_usage's Max_MA 16.22
    assert s.max_reserved_bytes == int(17 * GiB)


def test_failure_log():
    s = read_log(LOGS / "failed_oom_nccl.log")
    assert len(s.oom_errors) == 1 and s.oom_request_bytes == 4 * GiB
    assert len(s.nccl_errors) == 2 and "Watchdog" in s.nccl_errors[0]


def test_megatron_deepspeed_line_and_nan():
    line = (" iteration      100/    1000 | consumed samples:        6400 | consumed tokens:     13107200 | elapsed "
            "time per iteration (ms): 2200.5 | learning rate: 5.000E-05 | global batch size:    64 | lm loss: "
            "4.500000E+00 | loss scale: 4096.0 | grad norm: nan | actual seqlen:  2048 | number of skipped iterations:"
            "   1 | number of nan iterations:   1 | samples per second: 29.084 | TFLOPs: 151.23 |")
    s = parse_log(line + "\n[Rank 0] step=100, skipped=1, lr=[5e-05], mom=[(0.9, 0.95)]\n")
    assert s.kind == "megatron-deepspeed"
    assert s.tflops_per_gpu == (151.23,) and s.samples_per_second == (29.084,)
    assert s.nan_iterations == 1 and s.skipped_iterations == 1 and s.loss_scales == (4096.0,)


def test_spike_needs_history_and_factor():
    lines = [f" iteration {i:8d}/ 100 | lm loss: 2.0 | grad norm: {g} |" for i, g in
             enumerate([1.0, 1.1, 0.9, 5.0, 1.0, 1.0, 1.0, 1.0, 2.9, 3.5], start=1)]
    s = parse_log("\n".join(lines))
    assert [x.iteration for x in s.grad_norm_spikes] == [10]  # 5.0 at 4 has too little history; 2.9 < 3x
    with pytest.raises(ValueError, match="spike_factor=1"):
        parse_log("", spike_factor=1)


def test_unknown_log():
    s = parse_log("hello\nworld\n")
    assert s.kind == "unknown"
    f = match_advice(s, **_ctx(dict(engine="megatron", tensor_parallel=4, pipeline_parallel=2, global_batch_size=128)))
    assert [x.id for x in f] == ["log_format"]


def test_match_megatron_log_to_advice():
    ctx = _ctx(dict(engine="megatron", tensor_parallel=4, pipeline_parallel=2, global_batch_size=128))
    f = {x.id: x for x in match_advice(read_log(LOGS / "megatron_bf16_tp4pp2.log"), **ctx)}
    assert f["log_grad_norm_spikes"].status == "warn" and "clipping 0.5" in f["log_grad_norm_spikes"].suggestion
    thr = f["log_throughput"]
    assert f"predicted {ctx['time'].step_seconds:.3f} s" in thr.message
    assert thr.status == ("pass" if 13.11 / ctx["time"].step_seconds <= 1.2 else "warn")
    assert "GiB predicted" in f["log_memory"].message


def test_match_deepspeed_fp16_overflows():
    ctx = _ctx(dict(engine="deepspeed", zero_stage=2, micro_batch_size=1, global_batch_size=128,
                    precision="fp16", recompute="full"), nodes=1)
    f = {x.id: x for x in match_advice(read_log(LOGS / "deepspeed_fp16_zero2.log"), **ctx)}
    sk = f["log_skipped_steps"]
    assert sk.status == "fail" and "6 skipped steps" in sk.message and "1024" in sk.message
    assert "loss_scale_window=1000" in sk.suggestion
    # measured step = global batch / samples per second
    assert "s/iteration" in f["log_throughput"].message


def test_match_oom_points_to_the_ladder():
    ctx = _ctx(dict(engine="deepspeed", zero_stage=2, micro_batch_size=8, global_batch_size=64), nodes=1)
    f = {x.id: x for x in match_advice(read_log(LOGS / "failed_oom_nccl.log"), **ctx)}
    assert f["log_oom"].status == "fail" and "4.00 GiB" in f["log_oom"].message
    assert "ladder: step" in f["log_oom"].suggestion
    assert f["log_nccl"].status == "fail" and "NCCL_DEBUG=INFO" in f["log_nccl"].suggestion


def test_advise_cli_with_log(capsys):
    from workbench.cli import main

    assert main(["advise", "--model", "guide-13b", "--nodes", "2", "--engine", "megatron", "--tp", "4", "--pp", "2",
                 "--gbs", "128", "--log", str(LOGS / "megatron_bf16_tp4pp2.log"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["log"]["kind"] == "megatron" and len(out["log"]["grad_norm_spikes"]) == 2
    assert any(f["id"] == "log_grad_norm_spikes" for f in out["log_findings"])


def test_non_finite_rates_are_not_measurements():
    line = "iteration {i}/ 10 | elapsed time per iteration (ms): {ms} | TFLOPs: {tf} |"
    s = parse_log("\n".join(line.format(i=i, ms=ms, tf=tf) for i, (ms, tf) in
                            enumerate([("900.0", "50.0"), ("nan", "inf"), ("500.0", "120.0"), ("700.0", "nan")], 1)))
    assert s.median_step_seconds == 0.6 and s.median_tflops_per_gpu == 120.0
    only_nan = parse_log(line.format(i=1, ms="nan", tf="inf") + "\n" + line.format(i=2, ms="nan", tf="inf"))
    assert only_nan.median_step_seconds is None and only_nan.median_tflops_per_gpu is None


# ----------------------------------------------------------------------------------------------------------------
# PyTorch's out-of-memory message, read whole (c10/cuda/CUDACachingAllocator.cpp's two forms)
# ----------------------------------------------------------------------------------------------------------------
from workbench.logreader import OomReport, oom_diagnosis, parse_oom_message  # noqa: E402

MiB = 2**20
FRAGMENTED = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
              "79.11 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in "
              "use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and 5.95 GiB is reserved by PyTorch but "
              "unallocated. If reserved but unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def test_oom_message_gives_the_device_at_the_failure():
    r = parse_oom_message(FRAGMENTED)
    assert r.request_bytes == round(1.95 * GiB) and r.device == 0 and r.total_bytes == round(79.11 * GiB)
    assert r.allocated_bytes == round(71.20 * GiB) and r.cached_free_bytes == round(5.95 * GiB)
    assert r.own_bytes == round(77.89 * GiB)
    assert r.outside_allocator_bytes == pytest.approx(0.74 * GiB, abs=0.01 * GiB)
    assert r.others_bytes == pytest.approx(0.01 * GiB, abs=0.01 * GiB)  # total - free - this process


def test_other_processes_and_private_pools_are_read():
    text = ("CUDA out of memory. Tried to allocate 25.96 GiB. GPU 4 has a total capacity of 79.18 GiB of which "
            "23.04 GiB is free. Process 7478 has 4.08 GiB memory in use. Including non-PyTorch memory, this process "
            "has 52.02 GiB memory in use. Of the allocated memory 45.89 GiB is allocated by PyTorch, with 1.38 MiB "
            "allocated in private pools (e.g., CUDA Graphs), and 3.01 GiB is reserved by PyTorch but unallocated.")
    r = parse_oom_message(text)
    assert r.device == 4 and r.other_processes == ((7478, round(4.08 * GiB)),)
    assert r.others_bytes == round(4.08 * GiB) and r.cached_free_bytes == round(3.01 * GiB)
    message, why = oom_diagnosis(r)
    assert "other processes 4.08 GiB (PID 7478 4.08 GiB)" in message
    assert why.startswith("other processes held 4.08 GiB") and "LOCAL_RANK" in why


def test_a_container_lists_its_own_process_by_pid():
    """Inside a PID namespace NVML's PIDs are the host's: the process is listed as "Process N", not "this
    process"; the one whose memory covers what the allocator reserved is taken as this one."""
    text = ("CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 "
            "GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the allocated memory 90.63 GiB is "
            "allocated by PyTorch, and 120.54 MiB is reserved by PyTorch but unallocated.")
    r = parse_oom_message(text)
    assert r.own_bytes == round(91.82 * GiB) and r.other_processes == () and r.others_bytes == 0
    message, why = oom_diagnosis(r)
    assert "other processes 0.00 GiB" in message and why.startswith("the live tensors: 90.63 GiB held")


def test_wrapped_rank_prefixed_and_repeated_messages_count_once():
    wrapped = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
               "[rank3]: GPU 3 has a total capacity of 79.15 GiB of which 1.91 GiB is free.\n"
               "[rank3]: Including non-PyTorch memory, this process has 77.23 GiB memory in use.\n"
               "[rank3]: Of the allocated memory 51.75 GiB is allocated by PyTorch, and 6.05 GiB is reserved\n"
               "[rank3]: by PyTorch but unallocated.\n")
    s = parse_log("step 1\n" + wrapped + "Traceback (most recent call last):\n" + wrapped)
    assert len(s.oom_reports) == 1
    r = s.oom_reports[0]
    assert r.device == 3 and r.reserved_bytes == round(51.75 * GiB) + round(6.05 * GiB)
    assert r.others_bytes == pytest.approx(0.01 * GiB, abs=0.01 * GiB)
    assert s.to_dict()["oom_reports"][0]["cached_free_bytes"] == round(6.05 * GiB)


def test_the_message_before_pytorch_2_1_is_read():
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB "
            "already allocated; 3.06 MiB free; 14.71 GiB reserved in total by PyTorch) If reserved memory is >> "
            "allocated memory try setting max_split_size_mb to avoid fragmentation.")
    r = parse_oom_message(text)
    assert r == OomReport(request_bytes=20 * MiB, device=0, total_bytes=round(15.78 * GiB),
                          free_bytes=round(3.06 * MiB), allocated_bytes=round(14.56 * GiB),
                          reserved_bytes=round(14.71 * GiB))
    assert r.cached_free_bytes == round(14.71 * GiB) - round(14.56 * GiB)
    assert r.own_bytes is None and r.others_bytes is None  # no process information in that form
    assert "expandable_segments" in oom_diagnosis(r)[1]  # 150 MiB cached but free > the 20 MiB asked


def test_diagnosis_names_the_cause_in_order():
    """Larger than the GPU, then other processes, then fragmentation, then the live tensors."""
    huge = OomReport(request_bytes=100 * GiB, total_bytes=80 * GiB, free_bytes=70 * GiB, allocated_bytes=GiB,
                     reserved_bytes=2 * GiB, this_process_bytes=3 * GiB)
    assert oom_diagnosis(huge)[1].startswith("one tensor of 100.00 GiB is larger than the whole GPU")
    fragmented = parse_oom_message(FRAGMENTED)
    assert oom_diagnosis(fragmented)[1].startswith("fragmentation: the allocator held 5.95 GiB cached but free")
    tight = OomReport(request_bytes=4 * GiB, total_bytes=80 * GiB, free_bytes=2 * GiB, allocated_bytes=70 * GiB,
                      reserved_bytes=72 * GiB, this_process_bytes=78 * GiB)
    why = oom_diagnosis(tight)[1]
    assert why.startswith("the live tensors: 70.00 GiB held + 4.00 GiB requested")
    assert "sat cached but free" not in why  # 2 GiB, 3 % of reserved: below OOM_CACHED_SHARE, not called out
    loose = OomReport(request_bytes=12 * GiB, total_bytes=80 * GiB, free_bytes=2 * GiB, allocated_bytes=62 * GiB,
                      reserved_bytes=72 * GiB, this_process_bytes=78 * GiB)
    assert "10.00 GiB (14% of reserved) sat cached but free" in oom_diagnosis(loose)[1]


def test_oom_diagnosis_compares_with_the_plans_estimate():
    ctx = _ctx(dict(engine="deepspeed", zero_stage=2, micro_batch_size=1, global_batch_size=16), nodes=1,
               name="llama2-7b")
    mem = ctx["memory"]
    allocated = mem.per_gpu_peak_bytes - mem.breakdown.overhead
    held = int(1.5 * allocated) + GiB
    far_more = OomReport(request_bytes=GiB, total_bytes=mem.capacity_bytes, free_bytes=mem.capacity_bytes - held,
                         allocated_bytes=int(1.5 * allocated), reserved_bytes=int(1.5 * allocated) + GiB // 2,
                         this_process_bytes=held)
    why = oom_diagnosis(far_more, mem)[1]
    assert "allocated peak the memory model gives the plan" in why and "check that the flags match the run" in why
    other_gpu = OomReport(request_bytes=GiB, total_bytes=40 * GiB, allocated_bytes=30 * GiB, reserved_bytes=31 * GiB)
    assert "give --gpu the run's" in oom_diagnosis(other_gpu, mem)[1]


def test_match_advice_adds_the_device_finding_after_the_ladder():
    ctx = _ctx(dict(engine="deepspeed", zero_stage=2, micro_batch_size=4, global_batch_size=64), nodes=1,
               name="llama2-7b")
    f = match_advice(parse_log(FRAGMENTED), **ctx)
    ids = [x.id for x in f]
    assert ids[ids.index("log_oom") + 1] == "log_oom_device"
    device = f[ids.index("log_oom_device")]
    assert device.status == "fail" and "cached but free 5.95 GiB" in device.message
    assert "expandable_segments:True" in device.suggestion


def test_advise_reads_a_log_from_standard_input(monkeypatch, capsys):
    """``advise --log -``: a message piped in (``... 2>&1 | tail | workbench advise ... --log -``) is read as a file."""
    import io

    from workbench.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(FRAGMENTED + "\n"))
    assert main(["advise", "--model", "llama2-7b", "--gpu", "A100-80GB", "--zero", "2", "--gbs", "64", "--log", "-",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    found = {f["id"]: f for f in out["log_findings"]}
    assert "fragmentation" in found["log_oom_device"]["suggestion"]
    assert out["log"]["oom_reports"][0]["cached_free_bytes"] == round(5.95 * GiB)
