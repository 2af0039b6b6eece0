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
