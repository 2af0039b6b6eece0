"""The step's host share (workbench.timing.host_share) and the step-time band chosen by it."""
import json
import math
import sys

import pytest

from workbench import ModelSpec, ParallelPlan, catalog, timing
from workbench import memory as M
from workbench.estimate import estimate
from workbench.specs import ClusterSpec

H200 = ClusterSpec(gpu=catalog.gpu("H200"), gpus_per_node=1, num_nodes=1)


def _hf_model(hidden: int, layers: int, seq: int = 2048) -> ModelSpec:
    return ModelSpec(name=f"h{hidden}", hidden_size=hidden, num_layers=layers, num_attention_heads=hidden // 64,
                     seq_length=seq, vocab_size=32000, activation="swiglu", normalization="rmsnorm",
                     add_bias_linear=False, implementation="transformers", attention="flash")


def _plan(mbs: int, zero: int = 2) -> ParallelPlan:
    return ParallelPlan(engine="deepspeed", zero_stage=zero, world_size=1, micro_batch_size=mbs,
                        global_batch_size=mbs)


def test_thin_small_batches_are_host_bound_and_wide_large_batches_gpu_bound():
    thin = estimate(_hf_model(768, 12, 512), H200, _plan(1)).time
    wide = estimate(_hf_model(4096, 4, 4096), H200, _plan(8)).time
    assert 0.0 <= wide.host_share < 0.1 < M.HOST_BOUND_SHARE <= thin.host_share <= 1.0
    assert thin.to_dict()["host_share"] == thin.host_share


def test_host_share_is_the_steps_elasticity_to_the_host_inputs():
    t = estimate(_hf_model(1024, 8, 1024), H200, _plan(2)).time
    inputs = dict(t.inputs)
    slower = {k: v * 1.2 if k in timing.HOST_SECONDS_INPUTS else v for k, v in inputs.items()}
    ratio = float(timing.step_time_terms(**slower)["step_seconds"]) / t.step_seconds
    assert ratio > 1.0
    assert t.host_share == pytest.approx(min(1.0, math.log(ratio) / math.log(1.2)))
    no_host = {k: 0.0 if k in timing.HOST_SECONDS_INPUTS else v for k, v in inputs.items()}
    assert timing.host_share(no_host, float(timing.step_time_terms(**no_host)["step_seconds"])) == 0.0
    assert timing.host_share(inputs, 0.0) == 0.0
    assert all(k in timing.StepInputs.__dataclass_fields__ for k in timing.HOST_SECONDS_INPUTS)


def test_step_band_follows_the_host_share(monkeypatch):
    e = lambda n, lo, hi: {"n": n, "shapes": 4, "low_fraction": lo, "high_fraction": hi}  # noqa: E731
    bands = {"step": {"deepspeed": e(80, 0.13, 0.16), "deepspeed/none": e(40, 0.12, 0.15),
                      "deepspeed/host-bound": e(20, 0.14, 0.38), "deepspeed/gpu-bound": e(60, 0.11, 0.06),
                      "deepspeed/zero3": e(30, 0.18, 0.24), "megatron": e(30, 0.05, 0.09),
                      "megatron/host-bound": e(2, 0.04, 0.13)}}
    monkeypatch.setattr(M, "_error_bands", lambda: bands)
    low, high, note = M.error_band("deepspeed", "step", "none", zero_stage=2, host_share=0.8)
    assert (low, high) == (0.14, 0.38) and "host-bound" in note
    assert M.error_band("deepspeed", "step", "none", zero_stage=1, host_share=0.2)[:2] == (0.11, 0.06)
    assert M.error_band("deepspeed", "step", "none", zero_stage=3, host_share=0.9)[:2] == (0.18, 0.24)  # ZeRO-3's own
    assert M.error_band("deepspeed", "step", "none", zero_stage=2)[:2] == (0.12, 0.15)  # no share: as before
    assert M.error_band("megatron", "step", None, host_share=0.9)[:2] == (0.05, 0.09)  # 2 runs: the engine's band
    assert M.step_regime_suffix(0.5) == "host-bound" and M.step_regime_suffix(0.49) == "gpu-bound"
    assert M.step_regime_suffix(0.9, zero_stage=3) is None and M.step_regime_suffix(None) is None
    record = estimate(_hf_model(768, 12, 512), H200, _plan(1))
    lo_s, hi_s, note = record.step_band_seconds
    assert hi_s == pytest.approx(record.time.step_seconds * 0.38) and "host-bound" in note


def test_bench_writes_host_and_gpu_bound_step_entries_below_zero3(monkeypatch):
    from test_benchmark_helpers import BENCH, _load

    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = _load("bench_accuracy_host_share_under_test", BENCH / "bench_accuracy.py")
    plan = _plan(1)
    row = lambda k, share, m, zero=2: (dict(plan=plan.replace(zero_stage=zero), shape_id=f"s{k}",  # noqa: E731
                                            measured=dict(step=m), predicted=dict(step=1.0, host_share=share)), {})
    rows = ([row(k, 0.9, 1.2 + 0.01 * k) for k in range(5)] + [row(10 + k, 0.05, 1.0) for k in range(5)]
            + [row(20, 0.9, 3.0, zero=3)])
    step = bench.band(rows)["step"]
    assert step["deepspeed/host-bound"]["n"] == 5 and step["deepspeed/gpu-bound"]["n"] == 5  # ZeRO-3 apart
    assert step["deepspeed/gpu-bound"]["high_fraction"] == 0.0
    assert step["deepspeed/host-bound"]["low_fraction"] == 0.0 and step["deepspeed/host-bound"]["high_fraction"] > 0.2
    lines = bench.host_share_lines([(r, {"step": r["measured"]["step"] - 1}) for r, _ in rows], "t")
    assert any("0.7-1.0 host-bound" in line and "  5 " in line for line in lines)
    json.dumps(step)  # what --write-band stores
