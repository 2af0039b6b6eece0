"""workbench.memory.host_resident_bytes: the host memory a rank's process holds, DeepSpeed's offload buffers as the
host holds them (page-locked ones rounded up to a power of two), against hand arithmetic and measured resident sets."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from workbench import catalog, cli
from workbench.estimate import estimate
from workbench.memory import (DS_NVME_OPTIMIZER_BUFFERS, DS_NVME_PARAM_BUFFER_ELEMENTS, DS_NVME_PARAM_BUFFERS,
                              DS_NVME_PARAMS_IN_CPU, HOST_PROCESS_BYTES, host_tensor_sum,
                              nvme_param_buffer_elements, pinned_bytes)
from workbench.specs import ClusterSpec, ParallelPlan

ROOT = Path(__file__).resolve().parents[1]


def test_pinned_buffers_take_the_next_power_of_two():
    assert [pinned_bytes(x) for x in (0, 1, 3, 4, 2**30, 2**30 + 1)] == [0, 1, 4, 4, 2**30, 2**31]
    assert np.array_equal(pinned_bytes(np.array([5.0, 1000.0])), [8.0, 1024.0])


def _host(plan_kwargs, gpus=1, **cluster):
    m = catalog.model("llama2-7b")
    c = ClusterSpec(gpu="H200", gpus_per_node=gpus, **cluster)
    p = ParallelPlan(world_size=gpus, engine="deepspeed", micro_batch_size=1, global_batch_size=gpus, **plan_kwargs)
    return m, estimate(m, c, p).memory


def test_zero2_offload_by_hand():
    """Llama 2 7B (6,738,415,616 parameters; its largest tensor the 32000 x 4096 embedding) under ZeRO-2 with the
    optimizer on the CPU, one rank: fp32 master and fp32 gradient 27.0 GB each, pinned as 2^35; the 16-bit copy 13.5 GB
    as 2^34; the largest parameter's 16-bit staging 262 MB as 2^28; CPU Adam's moments 8 bytes a parameter, pageable;
    and the process itself."""
    m, mem = _host(dict(zero_stage=2, offload_optimizer="cpu"))
    n = m.parameter_counts().total
    assert n == 6_738_415_616
    assert mem.host_bytes_per_gpu == HOST_PROCESS_BYTES + 2 * 2**35 + 2**34 + 2**28 + 8 * n
    assert mem.offloaded_bytes_per_gpu == 16 * n  # master, moments, fp32 gradient: what the states are
    # sharded over 8 ranks each rank's partitions shrink, the largest parameter's staging does not
    _, eight = _host(dict(zero_stage=2, offload_optimizer="cpu"), gpus=8)
    part = n / 8
    assert eight.host_bytes_per_gpu == pytest.approx(
        HOST_PROCESS_BYTES + 2 * pinned_bytes(4 * part) + pinned_bytes(2 * part) + 2**28 + 8 * part, rel=1e-9)
    assert eight.host_bytes_per_node == 8 * eight.host_bytes_per_gpu


def test_without_offload_the_host_holds_the_process_and_nvme_takes_the_states():
    _, plain = _host(dict(zero_stage=2))
    assert plain.host_bytes_per_gpu == HOST_PROCESS_BYTES and plain.offloaded_bytes_per_gpu == 0
    # ZeRO-1/2 take device "nvme" as the CPU: the states stay in host memory, nothing goes to the drive
    _, z2 = _host(dict(zero_stage=2, offload_optimizer="nvme"), nvme_gib_per_node=4096)
    _, z2_cpu = _host(dict(zero_stage=2, offload_optimizer="cpu"))
    assert z2.nvme_bytes_per_gpu == 0 and z2.host_bytes_per_gpu == z2_cpu.host_bytes_per_gpu
    # ZeRO-3 with the optimizer on NVMe: its fp32 states on the drive, the host holds the swapper's four fp32 buffers
    # of the largest sub-group in their place (less than the states themselves beyond one sub-group)
    m, z3 = _host(dict(zero_stage=3, offload_optimizer="nvme"), nvme_gib_per_node=4096)
    _, z3_cpu = _host(dict(zero_stage=3, offload_optimizer="cpu"))
    assert z3.nvme_bytes_per_gpu == z3.offloaded_bytes_per_gpu > 0
    n = m.parameter_counts().total
    largest = host_tensor_sum(m, 1, 1, "largest_sub_group")
    assert largest <= n
    swap = (DS_NVME_OPTIMIZER_BUFFERS * 4 + 8) * largest  # + Adam's moments of one sub-group at start-up
    cpu_states = 12 * n + host_tensor_sum(m, 1, 1, "fp32_sub_groups")
    assert z3.host_bytes_per_gpu - z3_cpu.host_bytes_per_gpu == pytest.approx(swap - cpu_states, rel=1e-9)
    # with the parameters on NVMe too: up to max_in_cpu of them stay in a page-locked host buffer, beside the
    # parameter swapper's page-locked buffers, and ZeRO-3 makes no per-parameter host partitions
    _, both = _host(dict(zero_stage=3, offload_optimizer="nvme", offload_params="nvme"), nvme_gib_per_node=4096)
    _, both_cpu = _host(dict(zero_stage=3, offload_optimizer="cpu", offload_params="cpu"))
    assert both.nvme_bytes_per_gpu > z3.nvme_bytes_per_gpu
    kept = pinned_bytes(2 * min(n, DS_NVME_PARAMS_IN_CPU))
    # each parameter swap buffer holds the largest parameter partition (this model's is above DeepSpeed's 1e8)
    assert nvme_param_buffer_elements(m, 1, 1) == max(DS_NVME_PARAM_BUFFER_ELEMENTS,
                                                      host_tensor_sum(m, 1, 1, "largest_tensor"))
    buffers = pinned_bytes(2 * DS_NVME_PARAM_BUFFERS * nvme_param_buffer_elements(m, 1, 1))
    cpu_params = pinned_bytes(2 * n) + host_tensor_sum(m, 1, 1, "bf16_partitions")
    assert both.host_bytes_per_gpu - both_cpu.host_bytes_per_gpu == pytest.approx(
        swap - cpu_states + kept + buffers - cpu_params, rel=1e-9)


def test_zero3_transient_follows_which_side_holds_the_master():
    """ZeRO-3 with the optimizer alone on the CPU casts each updated fp32 sub-group to 16 bits on the host before
    the copy to the GPU; with the parameters alone there the GPU's fp32 master is made from a host-side fp32 cast;
    with both on the host no copy crosses with a cast. Each adds its cast of the largest sub-group at the peak."""
    _, opt = _host(dict(zero_stage=3, offload_optimizer="cpu"))
    _, par = _host(dict(zero_stage=3, offload_params="cpu"))
    _, both = _host(dict(zero_stage=3, offload_optimizer="cpu", offload_params="cpu"))
    # both hold the optimizer's buffers and the parameters' without a cast: what the two alone hold beyond it (less
    # the process, counted once) are the casts, 16-bit and fp32 of the largest sub-group
    casts = opt.host_bytes_per_gpu + par.host_bytes_per_gpu - both.host_bytes_per_gpu - HOST_PROCESS_BYTES
    largest = host_tensor_sum(catalog.model("llama2-7b"), 1, 1, "largest_sub_group")
    assert largest > 1e9 and casts == pytest.approx((2 + 4) * largest)


def _bench_accuracy():
    spec = importlib.util.spec_from_file_location("bench_accuracy_host", ROOT / "benchmarks" / "bench_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("run_id", [
    "hf-ds/hf-eurollm-h4096-l8/z2/sdpa/off-cpu-omp16/mbs1",
    "hf-ds/hf-qwen25-h3584-l12/z3/sdpa/off-cpu-omp16/poff-cpu/rep1/mbs2",
    "hf-ds/hf-solar-h4096-l10/z3/sdpa/poff-cpu/mbs1",
    "hf-ds/hf-minitron-h4096-l8/z3/sdpa/off-cpu-omp16/mbs1",
])
def test_measured_resident_sets(run_id):
    """Four corpus runs (H200 host, DeepSpeed 0.19.8): ZeRO-2 with the optimizer on the CPU, ZeRO-3 with both, with
    the parameters alone, with the optimizer alone. Their peak resident set (VmHWM) within 1 %."""
    B = _bench_accuracy()
    with open(ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl") as f:
        rec = next(json.loads(line) for line in f if json.loads(line)["run_id"] == run_id)
    run = B.corpus_run(rec)
    host = estimate(run["model"], run["cluster"], run["plan"], checks=False).memory.host_bytes_per_gpu
    assert host == pytest.approx(rec["host_peak_rss_bytes"], rel=0.01)


def test_cli_names_what_the_host_holds_only_with_offload(capsys):
    base = ["estimate", "--model", "llama2-7b", "--gpu", "H200", "--gpus-per-node", "1", "--zero", "2"]
    assert cli.main(base) == 0
    assert "host memory per node" not in capsys.readouterr().out
    assert cli.main(base + ["--offload-optimizer", "cpu"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "host memory per node" in x)
    assert "resident" in line and "offloaded states" in line and "power of two" in line
    assert cli.main(base + ["--offload-optimizer", "cpu", "--host-mem-gib", "64"]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out  # 104 GiB resident on a 64 GiB host


def test_advisor_prices_pin_memory_where_the_host_is_tight():
    """Llama 2 7B, ZeRO-2 with the optimizer on the CPU, one rank: the page-locked buffers hold, beyond their
    contents, the rounding of the two fp32 partitions (2^35 each for 27.0 GB), of the 16-bit copy (2^34 for 13.5 GB)
    and of the largest parameter's staging (2^28 for 262 MB). On a 150 GiB host (88 % used) the advisor says so and
    what pin_memory false leaves; with room to spare, or without offload, it says nothing."""
    from workbench import advisor

    m, mem = _host(dict(zero_stage=2, offload_optimizer="cpu"), host_memory_gib_per_node=150)
    n, largest = m.parameter_counts().total, 32000 * 4096
    extra = 2 * (2**35 - 4 * n) + (2**34 - 2 * n) + (2**28 - 2 * largest)
    p = ParallelPlan(world_size=1, engine="deepspeed", micro_batch_size=1, global_batch_size=1, zero_stage=2,
                     offload_optimizer="cpu")
    found = advisor.pinned_host_buffers(m, p, mem)
    assert found.status == "warn" and f"hold {extra / 2**30:.1f} GiB per rank" in found.message
    assert '"pin_memory": false in zero_optimization.offload_optimizer' in found.suggestion
    assert f"{(mem.host_bytes_per_node - extra) / 2**30:.1f} GiB per node" in found.suggestion
    _, roomy = _host(dict(zero_stage=2, offload_optimizer="cpu"))
    assert advisor.pinned_host_buffers(m, p, roomy) is None
    plain = p.replace(offload_optimizer="none")
    assert advisor.pinned_host_buffers(m, plain, _host(dict(zero_stage=2), host_memory_gib_per_node=2)[1]) is None


def test_launched_model_dtype_reads_the_ds_config_as_deepspeed_does():
    """The launcher builds a transformers model in the dtype its ds_config trains in, reading the ``enabled`` flags
    as DeepSpeed's pydantic models do (the importer's reader): words and 0/1 count, the deprecated ``bfloat16``
    section too, and ``"auto"`` leaves the dtype to transformers."""
    import torch

    from workbench.runs.train import _ds_dtype

    assert _ds_dtype({"bf16": {"enabled": "yes"}}) is torch.bfloat16
    assert _ds_dtype({"bfloat16": {"enabled": True}}) is torch.bfloat16
    assert _ds_dtype({"fp16": {"enabled": 1}, "bf16": {"enabled": "off"}}) is torch.float16
    assert _ds_dtype({}) is torch.float32 and _ds_dtype({"bf16": {"enabled": "auto"}}) is None
    with pytest.raises(ValueError, match="bf16.enabled"):
        _ds_dtype({"bf16": {"enabled": "maybe"}})


def test_only_zero2_keeps_a_host_accumulation_buffer():
    """With the optimizer on the CPU and gradient accumulation, ZeRO-2 adds each parameter's pinned 16-bit
    accumulation buffer (accumulated_grads_in_cpu: each parameter's 16-bit partition, pinned on its own);
    ZeRO-1 holds the same host memory as without accumulation (its one copy per step comes at the boundary, at
    micro_step_id 0)."""
    def host(stage, gbs):
        m = catalog.model("llama2-7b")
        p = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=stage, offload_optimizer="cpu",
                         micro_batch_size=1, global_batch_size=gbs)
        return estimate(m, ClusterSpec(gpu="H200", gpus_per_node=1), p).memory.host_bytes_per_gpu

    assert host(1, 2) == host(1, 1)
    assert host(2, 2) - host(2, 1) == host_tensor_sum(catalog.model("llama2-7b"), 1, 1, "bf16_partitions") > 0


def test_zero3_on_the_gpu_defragments_its_partition_through_the_host():
    """ZeRO-3 keeping its parameters on the GPU copies each rank's 16-bit partition through one CPU buffer at init
    (DeepSpeed's defragment): with nothing offloaded the host peak is the process and that buffer; ZeRO-2 keeps
    none; with the optimizer on the CPU the steady buffers are the larger and stand; 8 ranks hold an eighth each."""
    m = catalog.model("llama2-7b")
    n = m.parameter_counts().total
    _, z3 = _host(dict(zero_stage=3))
    _, z2 = _host(dict(zero_stage=2))
    assert z3.host_bytes_per_gpu == HOST_PROCESS_BYTES + 2 * n
    assert z2.host_bytes_per_gpu == HOST_PROCESS_BYTES
    _, eight = _host(dict(zero_stage=3), gpus=8)
    assert eight.host_bytes_per_gpu == pytest.approx(HOST_PROCESS_BYTES + 2 * n / 8, rel=1e-9)
    _, opt = _host(dict(zero_stage=3, offload_optimizer="cpu"))
    assert opt.host_bytes_per_gpu > HOST_PROCESS_BYTES + 12 * n  # fp32 master and moments: the steady state wins


def test_advisor_names_zero3_init_when_the_host_does_not_fit_without_offload():
    from workbench.advisor import fits_memory

    m = catalog.model("llama2-70b")
    c = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=4, host_memory_gib_per_node=48)
    p = ParallelPlan(world_size=32, engine="deepspeed", zero_stage=3, recompute="full", global_batch_size=64)
    mem = estimate(m, c, p, checks=False).memory
    assert not mem.fits_host and mem.fits_gpu
    finding = fits_memory(p, mem)
    assert finding.status == "fail" and "defragment" in finding.suggestion


def test_pageable_offload_buffers_are_priced_and_flagged():
    """pin_memory false with CPU offload (ParallelPlan.pin_memory, what an imported ds_config sets): the step prices
    the offload copies at the host's pageable rate (4 + 2 bytes per offloaded parameter each step at ZeRO-2, so the
    step grows by those bytes over the pageable rate less over the link's), the host holds the pageable buffers at
    their own sizes, and the advisor says what page-locked buffers would save; pinned, without offload, or under
    Megatron's own optimizer, nothing. The import lint flags the explicit false."""
    from workbench import advisor, timing
    from workbench.configs.deepspeed import PAGEABLE_OFFLOAD_MEASURED
    from workbench.configs.lint import lint_ds_config
    from workbench.estimate import estimate

    m = catalog.model("llama2-7b")
    c = ClusterSpec(gpu="H200", gpus_per_node=1)
    p = ParallelPlan(world_size=1, engine="deepspeed", micro_batch_size=1, global_batch_size=1, zero_stage=2,
                     offload_optimizer="cpu")
    pinned, pageable = estimate(m, c, p), estimate(m, c, p.replace(pin_memory=False))
    rate = timing.calibration()["cpu_adam"]["pageable_copy_gb_per_s"]
    n, link = m.parameter_counts().total, c.gpu.host_link_gb_per_s
    expected = 6 * n * (1 / rate - 1 / link) / 1e9
    assert pageable.time.step_seconds - pinned.time.step_seconds == pytest.approx(expected, rel=1e-6)
    assert pageable.memory.host_bytes_per_gpu < pinned.memory.host_bytes_per_gpu  # no power-of-two rounding
    assert pageable.to_dict()["plan"]["pin_memory"] is False and pinned.to_dict()["plan"]["pin_memory"] is True
    assert estimate(m, c, p.replace(offload_optimizer="none", pin_memory=False)).time.step_seconds == \
        pytest.approx(estimate(m, c, p.replace(offload_optimizer="none")).time.step_seconds)
    found = advisor.pageable_offload(p.replace(pin_memory=False), pageable.time)
    assert found.status == "warn" and f"{pinned.time.step_seconds:.3f} s with page-locked" in found.message
    assert f"{rate:g} GB/s" in found.message and '"pin_memory": true' in found.suggestion
    ratios = sorted(off / on for on, off in PAGEABLE_OFFLOAD_MEASURED["twins"].values())
    assert f"{ratios[0]:.1f}-{ratios[-1]:.1f}x" in found.message
    assert advisor.pageable_offload(p, pinned.time) is None
    assert advisor.pageable_offload(p.replace(offload_optimizer="none", pin_memory=False), pinned.time) is None
    assert advisor.pageable_offload(p.replace(pin_memory=False)).status == "warn"  # no time estimate: the measured
    ids = {f.id for f in advisor.check_plan(m, c, p.replace(pin_memory=False), memory=pageable.memory,
                                            time=pageable.time)}
    assert "pageable_offload" in ids and "pinned_host_buffers" not in ids

    def warned(section):
        cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, **section}}
        return [f.path for f in lint_ds_config(cfg) if "pin_memory" in f.path]

    assert warned({"offload_param": {"device": "cpu", "pin_memory": False}}) == [
        "zero_optimization.offload_param.pin_memory"]
    assert warned({"offload_optimizer": {"device": "cpu", "pin_memory": "false"}}) == [
        "zero_optimization.offload_optimizer.pin_memory"]
    assert warned({"offload_optimizer": {"device": "cpu"}}) == []  # DeepSpeed's default pins
    assert warned({"offload_optimizer": {"device": "cpu", "pin_memory": True}}) == []


def test_cli_host_line_names_what_an_nvme_rank_holds(capsys):
    """Under NVMe offload the host holds DeepSpeed's swap buffers, not the states (they are on the drive); ZeRO-3
    keeping its parameters on the GPU holds the larger of those and its init defragment, which the line says."""
    base = ["estimate", "--model", "llama2-7b", "--gpu", "H200", "--gpus-per-node", "1", "--nvme-gib", "2000"]
    assert cli.main(base + ["--zero", "3", "--offload-optimizer", "nvme"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "host memory per node" in x)
    assert "the larger of DeepSpeed's page-locked NVMe swap buffers" in line and "defragments" in line
    assert "offloaded states, DeepSpeed's host buffers" not in line
    assert cli.main(base + ["--zero", "3", "--offload-optimizer", "nvme", "--offload-params", "nvme"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "host memory per node" in x)
    assert "NVMe swap buffers" in line and "defragments" not in line and "the larger of" not in line


@pytest.mark.parametrize("zero,per_step", [(2, lambda m: 2 * m - 1), (1, lambda m: 2)])
def test_offload_with_accumulation_moves_the_gradient_sums_over_the_host_link(zero, per_step):
    """ZeRO-1/2 with the optimizer on the CPU and m micro-batches a step keep each gradient's running sum on the host
    (DeepSpeed 0.19.8 async_accumulate_grad_in_cpu_via_gpu): ZeRO-2's hooks copy every micro-batch's 16-bit gradient
    down and, after the first, the sum up again, (2m - 1) x 2 bytes a parameter; ZeRO-1 reduces at the boundary,
    one copy each way. The offload term grows by exactly those bytes over the host link; one micro-batch moves
    none of them, and ZeRO-3 (its own partitioned path) and plans without offload are untouched."""
    m_model = catalog.model("llama2-7b")
    c = ClusterSpec(gpu="H200", gpus_per_node=1)
    p = ParallelPlan(world_size=1, engine="deepspeed", micro_batch_size=1, global_batch_size=1, zero_stage=zero,
                     offload_optimizer="cpu")
    n, link = m_model.parameter_counts().total, c.gpu.host_link_gb_per_s * 1e9
    one = estimate(m_model, c, p).time.breakdown["offload"]
    for m in (2, 4):
        many = estimate(m_model, c, p.replace(global_batch_size=m)).time.breakdown["offload"]
        assert many - one == pytest.approx(per_step(m) * 2 * n / link, rel=1e-9)
    z3 = p.replace(zero_stage=3, overlap_comm=True)
    assert estimate(m_model, c, z3.replace(global_batch_size=4)).time.breakdown["offload"] == pytest.approx(
        estimate(m_model, c, z3).time.breakdown["offload"], rel=1e-12)
    assert estimate(m_model, c, p.replace(offload_optimizer="none", global_batch_size=4)).time.breakdown[
        "offload"] == 0.0
