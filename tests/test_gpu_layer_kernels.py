"""The layer-kernel constants of a GPU other than the H200, read back from the stored H100 records."""
import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

from workbench import timing
from workbench.specs import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def lk():
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("gpu_layer_kernels_under_test",
                                                  ROOT / "benchmarks" / "gpu_layer_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.path[:] = saved


@pytest.fixture(scope="module")
def rows(lk):
    return lk.score_scale_rows(RESULTS / "layer_kernels_h100_fit80.json", RESULTS / "layer_kernels_h200_fit.json")


def test_score_kernels_are_measured_apart_on_both_unfused_cases(rows):
    assert sorted((r["stack"], r["attn"]) for r in rows) == [("hf-ds", "eager"), ("mcore-ds", "unfused")]
    layer = timing.gpu_kernel_constants("H100-SXM")["layer_hbm_scale"]
    for r in rows:
        # the H100 took less than the datasheets' 4800 / 3350 more time per sample, and its score kernels gained
        # less than the layer's other memory-bound kernels
        assert 1.1 < r["measured_ratio"] < 4800 / 3350
        assert 1.0 < r["scale"] < layer
    stored = timing.gpu_kernel_constants("H100-SXM")["score_hbm_scale"]
    assert stored == round(statistics.median(r["scale"] for r in rows), 3)


def test_each_case_priced_at_its_own_scale_reproduces_the_measured_ratio(lk, rows):
    h100 = ClusterSpec(gpu=lk.record_gpu({"provenance": {"gpu": "NVIDIA H100 80GB HBM3"}}), gpus_per_node=1,
                       num_nodes=1)
    h200 = ClusterSpec(gpu=lk.record_gpu({"provenance": {"gpu": "NVIDIA H200"}}), gpus_per_node=1, num_nodes=1)
    pairs = {(k[0], k[1]): (k, deep) for k, deep, _ in lk.depth_pairs(RESULTS / "layer_kernels_h100_fit80.json")}
    ref = {(k[0], k[1]): (k, deep) for k, deep, _ in lk.depth_pairs(RESULTS / "layer_kernels_h200_fit.json")
           if k[4] != "sdpa"}
    for r in rows:
        key, deep = pairs[(r["stack"], r["shape_id"])]
        ref_key, ref_deep = ref[(r["stack"], r["shape_id"])]
        mine = lk.priced_parts(dict(lk._case_time(h100, key, deep).inputs, score_hbm_scale=r["scale"]))[2] / key[2]
        theirs = lk.priced_parts(lk._case_time(h200, ref_key, ref_deep).inputs)[2] / ref_key[2]
        assert mine / theirs == pytest.approx(r["measured_ratio"], rel=1e-9)


def test_a_gpu_without_its_own_kernels_takes_the_h200s():
    assert timing.gpu_kernel_constants("A100-80GB") == {}
    h100 = timing.gpu_kernel_constants("H100-SXM")
    assert set(h100) == {"weight_gemm_time_scale", "layer_hbm_scale", "score_hbm_scale", "moe_block_hbm_scale",
                         "optimizer_hbm_scale"}


def test_the_h100s_moe_block_efficiency_is_its_stored_micro_benchmarks():
    spec = importlib.util.spec_from_file_location("gpu_hf_moe_host_under_test",
                                                  ROOT / "benchmarks" / "gpu_hf_moe_host.py")
    moe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(moe)
    table = moe.gpu_time_table(RESULTS / "moe_gpu_time_h100.txt")
    assert set(table) == set(moe.GPU_KERNEL_MS)  # the same twelve block shapes as the H200's
    stored = timing.calibration()["gpu_kernels"]["H100-SXM"]["moe_block_hbm_efficiency"]
    assert stored == round(moe.block_efficiency(table, "H100-SXM"), 3)
    assert round(moe.block_efficiency(), 3) == timing.calibration()["transformers"]["moe_block_hbm_efficiency"]
    assert timing.gpu_kernel_constants("H100-SXM")["moe_block_hbm_scale"] == pytest.approx(stored / 0.198)


def test_the_h100s_optimizer_scale_is_its_stored_step_records():
    spec = importlib.util.spec_from_file_location("gpu_deepspeed_step_under_test",
                                                  ROOT / "benchmarks" / "gpu_deepspeed_step.py")
    ds = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    spec.loader.exec_module(ds)
    from gpu_provenance import read_records

    sys.path[:] = saved
    h200 = read_records(RESULTS / "deepspeed_step_h200.jsonl")
    h100 = read_records(RESULTS / "deepspeed_step_h100.jsonl")
    lines, median = ds.scale_lines(h200, "H200", h100, "H100-SXM")
    assert timing.gpu_kernel_constants("H100-SXM")["optimizer_hbm_scale"] == round(median, 3)
    # each stage: the H100 took more time per parameter than the H200, less than the datasheets' 4800 / 3350 more
    b100, b200 = ds.slopes(h100), ds.slopes(h200)
    for stage in (0, 1, 2):
        assert 1.0 < b100[stage] / b200[stage] < 4800 / 3350
    # the H200's own step is what the catalog prices there (fused Adam's and DeepSpeed's bytes at the curve's 0.8)
    cal = timing.calibration()
    per_param = (cal["gpu_optimizer"]["bytes_per_parameter"] + cal["deepspeed"]["step_bytes_per_parameter"]) / (
        4800e9 * cal["curves"]["hopper"]["hbm_efficiency"])
    assert per_param == pytest.approx(statistics.median(b200[s] for s in (1, 2)), rel=0.03)
    assert "torch AdamW" in lines[-1]
    # ZeRO-0's step moves fewer bytes than ZeRO-1/2's on both GPUs, the same count on each at its own bandwidth
    b200, b100 = ds.stage_bytes(h200, "H200"), ds.stage_bytes(h100, "H100-SXM")
    assert cal["deepspeed"]["zero0_step_bytes_per_parameter"] == round(
        b200[0] - cal["gpu_optimizer"]["bytes_per_parameter"], 1)
    assert b200[0] == pytest.approx(b100[0], abs=1.0)
    assert b200[0] < 0.9 * min(b200[1], b200[2]) and b100[0] < 0.9 * min(b100[1], b100[2])


def test_the_scale_prices_the_fused_step_and_leaves_torch_adam(capsys, monkeypatch):
    import json

    from workbench import cli

    def optimizer(adam):
        assert cli.main(["estimate", "--model", "gpt3-1.3b", "--gpu", "H100-SXM", "--nodes", "1", "--gpus-per-node",
                         "1", "--engine", "deepspeed", "--zero", "2", "--gbs", "8", "--adam", adam, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["time"]["breakdown"]["optimizer"]

    scale = timing.gpu_kernel_constants("H100-SXM")["optimizer_hbm_scale"]
    fused, torch_adam = optimizer("fused"), optimizer("torch")
    monkeypatch.delitem(timing.calibration()["gpu_kernels"]["H100-SXM"], "optimizer_hbm_scale")
    assert "optimizer_hbm_scale" not in timing.calibration()["gpu_kernels"]["H100-SXM"]
    assert timing.gpu_kernel_constants("H100-SXM")["optimizer_hbm_scale"] == 1.0
    unscaled = optimizer("fused")
    assert optimizer("torch") == torch_adam  # torch's foreach AdamW keeps the curve's bandwidth
    # the step's bandwidth-bound part (the rest is fixed: step_overhead_s and per-tensor seconds) shrinks by the scale
    cal = timing.calibration()
    params = 1.3e9
    per_param = (cal["gpu_optimizer"]["bytes_per_parameter"] + cal["deepspeed"]["step_bytes_per_parameter"]) / (
        3350e9 * cal["curves"]["hopper"]["hbm_efficiency"])
    assert unscaled - fused == pytest.approx(params * per_param * (1 - 1 / scale), rel=0.1)


def test_zero0_prices_its_own_measured_step_bytes(capsys):
    import json

    from workbench import cli

    def optimizer(zero):
        assert cli.main(["estimate", "--model", "gpt3-1.3b", "--gpu", "H200", "--nodes", "1", "--gpus-per-node", "1",
                         "--engine", "deepspeed", "--zero", str(zero), "--gbs", "8", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["time"]["breakdown"]["optimizer"]

    ds = timing.calibration()["deepspeed"]
    per_param = (ds["step_bytes_per_parameter"] - ds["zero0_step_bytes_per_parameter"]) / (
        4800e9 * timing.calibration()["curves"]["hopper"]["hbm_efficiency"])
    # one GPU: ZeRO-1 and ZeRO-0 hold the same shard; only the step's bytes differ
    assert optimizer(1) - optimizer(0) == pytest.approx(1.3e9 * per_param, rel=0.1)


def test_the_whole_step_set_beside_the_time_model_adds_up(lk):
    """--steps: each record's wall time is its GPU busy time plus idle, its priced step the sum of the printed
    terms, and the step at no layers the shallower depth less its layers times the slope."""
    import re

    lines = lk.step_comparison(RESULTS / "layer_kernels_h100_gelu_fit.json")
    record = re.compile(r"wall +([\d.]+), GPU busy +([\d.]+), idle +([\d.-]+); priced +([\d.]+) = compute +([\d.]+) "
                        r"\+ optimizer +([\d.]+) \+ dp_comm +([\d.]+) \+ other +([\d.-]+)")
    rows = [tuple(map(float, m.groups())) for m in map(record.search, lines) if m]
    assert len(rows) == 6  # three cases at two depths
    for wall, busy, idle, priced, *terms in rows:
        assert wall == pytest.approx(busy + idle, abs=0.11)
        assert priced == pytest.approx(sum(terms), abs=0.25)
        assert 0 < idle < 0.2 * wall  # these steps keep the GPU busy
    at_zero = [re.search(r"per layer +([\d.]+) / +([\d.]+) priced; at no layers +([\d.]+) / +([\d.]+)", ln)
               for ln in lines]
    at_zero = [tuple(map(float, m.groups())) for m in at_zero if m]
    assert len(at_zero) == 3
    walls = [r[0] for r in rows]
    for (slope_m, _, at0_m, _), deep, half, (deep_layers, half_layers) in zip(
            at_zero, walls[0::2], walls[1::2], [(4, 2), (2, 1), (2, 1)]):  # mc-h3072-gqa, then the two GeLU shapes
        assert slope_m == pytest.approx((deep - half) / (deep_layers - half_layers), abs=0.1)
        assert at0_m == pytest.approx(half - half_layers * slope_m, abs=0.15)


def test_kernels_fall_in_the_part_of_the_step_whose_window_holds_their_start(lk):
    placed = lk.place_kernels([("gemm", 5.0, 2.0), ("adam", 30.0, 4.0), ("copy", 12.0, 3.0), ("early", 1.0, 1.0)],
                              [("backward", 11.0, 20.0), ("forward", 4.0, 10.0), ("step", 25.0, 40.0)], steps=2)
    assert placed["forward"] == {"gemm": [1.0, 0.5]}
    assert placed["backward"] == {"copy": [1.5, 0.5]}
    assert placed["step"] == {"adam": [2.0, 0.5]}
    assert placed["unplaced"] == {"early": [0.5, 0.5]}  # launched before any part's window
    assert sum(us for us, _ in placed["all"].values()) == pytest.approx(5.0)


def test_the_parts_of_the_step_add_up_to_the_whole(lk, tmp_path):
    """--phases: measured, the parts' per-layer kernel times add up to the whole step's kernel slope; priced, the
    forward, backward and step add up to the time model's step, per layer and at no layers."""
    import json
    import re

    doc = json.loads((RESULTS / "layer_kernels_h100_gelu_fit.json").read_text())
    for rec in doc["runs"]:  # the stored records' kernels dealt to parts by class: the arithmetic is what is tested
        parts = {p: {} for p in lk.PHASES}
        for name, v in rec.get("kernels", {}).items():
            cls = lk.kernel_class(name)
            parts["step" if cls == "optimizer" else "forward" if cls == "gemm" else "backward"][name] = v
        rec["kernels_by_phase"] = parts
    path = tmp_path / "phased.json"
    path.write_text(json.dumps(doc))
    lines = lk.phase_comparison(path)
    cell = re.compile(r"(forward|backward|step) +([\d.-]+) / +([\d.-]+) a layer, +([\d.-]+) / +([\d.-]+) at none")
    cluster = ClusterSpec(gpu=lk.record_gpu(doc), gpus_per_node=1, num_nodes=1)
    pairs = {key[1]: (key, deep, half) for key, deep, half in lk.depth_pairs(path)}
    assert len(lines) == 4  # the header and three cases
    for line in lines[1:]:
        shape = line.split()[0]
        cells = {m.group(1): tuple(map(float, m.groups()[1:])) for m in cell.finditer(line)}
        assert set(cells) == set(lk.PHASES) and "unplaced 0.00" in line
        key, deep, half = pairs[shape]
        busy_slope = sum(lk.per_layer(deep, half, group=lk.kernel_class)[c][0]
                         for c in lk.per_layer(deep, half, group=lk.kernel_class))
        assert sum(c[0] for c in cells.values()) == pytest.approx(busy_slope, abs=0.03)
        n = deep["layers"] - half["layers"]
        t_deep, t_half = (lk._case_time(cluster, key, r) for r in (deep, half))
        priced_slope = (t_deep.step_seconds - t_half.step_seconds) / n * 1e3
        assert sum(c[1] for c in cells.values()) == pytest.approx(priced_slope, abs=0.03)
        priced_at0 = t_half.step_seconds * 1e3 - half["layers"] * priced_slope
        assert sum(c[3] for c in cells.values()) == pytest.approx(priced_at0, abs=0.05)


def test_range_annotations_on_the_gpu_timeline_are_not_kernels(lk):
    import json

    for name in ("phase:forward", "phase:step", "Optimizer.step#FusedAdam.step", "Optimizer.zero_grad#AdamW.zero_grad"):
        assert lk.is_annotation(name)
    stored = json.loads((RESULTS / "layer_kernels_h100_gelu_fit.json").read_text())["runs"]
    assert not any(lk.is_annotation(name) for rec in stored for name in rec.get("kernels", {}))
