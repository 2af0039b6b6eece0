"""Measuring code on a CPU with tiny sizes: GEMM shapes of a model, matmul/copy/Adam rates, gloo collectives
between two local processes (torchrun), and a whole tiny calibration."""
import pytest

from workbench.calibrate import CalibrationSettings, calibrate, catalog_gpu_for
from workbench.calibrate import measure
from workbench.calibrate.runner import collectives_with_torchrun
from workbench.catalog import model


def test_model_gemm_shapes_follow_the_time_model():
    m = model("llama3-8b")  # h=4096, 32 heads, 8 query groups, d=128, f=14336, gated
    shapes = measure.model_gemm_shapes(m, tensor_parallel_degrees=(1, 8), tokens=(4096,))
    by = {s["name"].split("/", 1)[1]: (s["m"], s["n"], s["k"]) for s in shapes}
    assert by["tp1/qkv"] == (4096, 4096 + 2 * 1024, 4096)
    assert by["tp8/fc1"] == (4096, 2 * 14336 // 8, 4096)
    assert by["tp8/fc2"] == (4096, 4096, 14336 // 8)
    assert by["tp8/proj"] == (4096, 4096, 512)
    assert len(shapes) == 10
    # a TP degree that does not divide the query groups is skipped
    assert not any("tp16" in s["name"] for s in measure.model_gemm_shapes(m, tensor_parallel_degrees=(16,)))


def test_cpu_rates_are_positive():
    assert measure.measure_gemm_tflops(64, 64, 64, precision="fp32", device="cpu", repeats=2) > 0
    assert measure.measure_copy_gb_per_s(2**20, device="cpu", repeats=2) > 0
    adam = measure.measure_cpu_adam(10_000, steps=2)
    assert adam["params_per_second"] > 0 and adam["implementation"] == "torch"
    assert measure.measure_context_bytes() > 0
    assert measure.message_sizes(2**14) == [4096, 8192, 16384]
    with pytest.raises(ValueError, match="cpu adam implementation='x'"):
        measure.measure_cpu_adam(10, implementation="x")


def test_catalog_gpu_names_from_device_names():
    assert catalog_gpu_for("NVIDIA H200") == "H200"
    assert catalog_gpu_for("NVIDIA H100 80GB HBM3") == "H100-SXM"
    assert catalog_gpu_for("NVIDIA H100 PCIe") == "H100-PCIe"
    assert catalog_gpu_for("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert catalog_gpu_for("Some Accelerator") == ""


@pytest.mark.slow
def test_gloo_collectives_with_two_processes():
    raw = collectives_with_torchrun(2, max_bytes=2**14, iters=1, timeout_s=300)
    assert raw["ranks"] == 2 and raw["backend"] == "gloo" and raw["link"] == "intra_node"
    kinds = {p["kind"] for p in raw["points"]}
    assert kinds == set(measure.COLLECTIVE_KINDS)
    assert all(p["seconds"] > 0 for p in raw["points"])
    assert len([p for p in raw["points"] if p["kind"] == "all_reduce"]) == 3


def test_tiny_calibration_without_collectives():
    s = CalibrationSettings(name="tiny", model="gpt3-125m", tensor_parallel=(4,), tokens=(16, 64), gemm_repeats=1,
                            precisions=("fp32",), copy_bytes=2**20, cpu_adam_params=10_000,
                            parts=("gemm", "memory_bandwidth", "host_dispatch", "cpu_adam", "memory", "collectives"),
                            nproc=1)
    lines = []
    prof = calibrate(s, progress=lines.append)
    assert prof.device_kind == "cpu" and prof.gpu == ""
    g = prof.gemm["fp32"]
    # gpt3-125m at TP 4: fc1 and fc2 are both 768x768 (f = 4h), kept once → 4 shapes × 2 token counts
    assert len(g["points"]) == 8 and 0 < g["efficiency_max"] <= 1 and g["half_dim"] > 0
    assert g["peak_tflops"] == max(p["tflops"] for p in g["points"])
    assert prof.device_memory_gb_per_s > 0 and prof.cpu_adam["params_per_second"] > 0
    assert prof.memory["context_bytes"] > 0 and prof.memory["reserve_fraction"] == 0.0
    assert any("collectives skipped" in n for n in prof.notes)
    assert any(line.startswith("gemm fp32") for line in lines)
    # a CPU host: the Python loop's speed, no CUDA launches, and the time model keeps the catalog host's seconds
    h = prof.host_dispatch
    assert h["probes"] >= 3 and 0 < h["python_loop_s"] < 5 and "launch_us" not in h
    assert h["python_loop_s_range"][0] <= h["python_loop_s"] <= h["python_loop_s_range"][1]
    assert prof.host_seconds_scale is None
    assert any(line.startswith("host dispatch: Python loop") for line in lines)
