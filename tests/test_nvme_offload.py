"""ZeRO-Infinity's offload to NVMe: the swaps' time, the node's NVMe rates on the cluster, the advisor's finding."""
import argparse
import json
import subprocess
import sys

import pytest

from workbench import catalog, timing
from workbench.advisor import nvme_swaps
from workbench.estimate import estimate
from workbench.specs import NVME_READ_GB_PER_S, NVME_WRITE_GB_PER_S, ClusterSpec, ParallelPlan


def _plan(optimizer="nvme", params="none", **kw):
    return ParallelPlan(engine="deepspeed", world_size=kw.pop("world_size", 1), micro_batch_size=1,
                        global_batch_size=kw.pop("global_batch_size", 1), zero_stage=3, offload_optimizer=optimizer,
                        offload_params=params, **kw)


def _step(model, cluster, plan):
    return estimate(model, cluster, plan, checks=False, simulate_allocator=False).time


def test_optimizer_on_nvme_adds_its_reads_and_writes_at_the_node_rates():
    model = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=1000, nvme_read_gb_per_s=8.0,
                          nvme_write_gb_per_s=4.0)
    cpu, nvme = _step(model, cluster, _plan("cpu")), _step(model, cluster, _plan("nvme"))
    shard = float(nvme.inputs["stage_parameters"])  # one rank, ZeRO-3 over one: the whole model is its partition
    expected = shard * (timing.NVME_OPTIMIZER_READ_BYTES / 8e9 + timing.NVME_OPTIMIZER_WRITE_BYTES / 4e9)
    assert nvme.step_seconds - cpu.step_seconds == pytest.approx(expected, rel=1e-9)
    # twice the rates, half the swaps
    faster = _step(model, cluster.replace(nvme_read_gb_per_s=16.0, nvme_write_gb_per_s=8.0), _plan("nvme"))
    assert faster.step_seconds - cpu.step_seconds == pytest.approx(expected / 2, rel=1e-9)


def test_ranks_of_a_node_share_its_nvme():
    model = catalog.model("llama2-7b")
    one = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_read_gb_per_s=8.0, nvme_write_gb_per_s=4.0)
    eight = one.replace(gpus_per_node=8)
    t1 = _step(model, one, _plan("nvme")).inputs
    t8 = _step(model, eight, _plan("nvme", world_size=8, global_batch_size=8)).inputs
    s1 = timing.nvme_swap_seconds(timing.StepInputs(**t1), 1e9, 0.0, 1)
    s8 = timing.nvme_swap_seconds(timing.StepInputs(**t8), 1e9, 0.0, 8)
    assert float(s8) == pytest.approx(8 * float(s1))


def test_parameters_under_max_in_cpu_stay_in_host_memory():
    """ZeRO-3 keeps up to offload_param.max_in_cpu elements of a rank's 16-bit partition in host memory even with
    the parameters offloaded to NVMe: a 0.76 B model on one rank swaps none of them, a 7 B one the rest."""
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=1000)
    small = catalog.model("gpt3-760m")
    model = catalog.model("llama2-7b")
    cpu = _step(model, cluster, _plan("cpu", "cpu"))
    nvme_params = _step(model, cluster, _plan("cpu", "nvme"))
    partition = float(cpu.inputs["num_parameters"])
    beyond = (partition - timing.NVME_PARAMS_IN_CPU) * 2
    per_step = beyond * (2 / (NVME_READ_GB_PER_S * 1e9) + 1 / (NVME_WRITE_GB_PER_S * 1e9))
    assert nvme_params.step_seconds - cpu.step_seconds == pytest.approx(per_step, rel=1e-6)
    assert _step(small, cluster, _plan("cpu", "nvme")).step_seconds == pytest.approx(
        _step(small, cluster, _plan("cpu", "cpu")).step_seconds, rel=1e-12)


@pytest.mark.parametrize("field", ["nvme_read_gb_per_s", "nvme_write_gb_per_s"])
def test_bad_rates_are_refused_by_name(field):
    for bad in (0, -1.0, float("nan"), "fast"):
        with pytest.raises(ValueError, match=field):
            ClusterSpec(gpu="H100-SXM", **{field: bad})


def test_cli_takes_the_rates_and_refuses_bad_ones():
    base = [sys.executable, "-m", "workbench", "estimate", "--model", "llama2-7b", "--gpus-per-node", "1",
            "--zero", "3", "--offload-optimizer", "nvme", "--nvme-gib", "1000", "--mbs", "1", "--gbs", "1"]
    bad = subprocess.run(base + ["--nvme-read-gbps", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nvme_read_gb_per_s=0 must be > 0" in bad.stderr and "Traceback" not in bad.stderr
    slow = subprocess.run(base + ["--nvme-read-gbps", "1", "--nvme-write-gbps", "1"], capture_output=True, text=True)
    fast = subprocess.run(base + ["--nvme-read-gbps", "50", "--nvme-write-gbps", "50"], capture_output=True, text=True)
    assert slow.returncode == 0 and fast.returncode == 0
    assert "nvme_swaps" not in slow.stderr
    assert "1 GB/s read, 1 GB/s write per node" in slow.stdout and "50 GB/s read" in fast.stdout


def test_advisor_prices_the_swaps_and_says_when_the_rates_are_the_default():
    model = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=1000)
    plan = _plan("nvme")
    t = _step(model, cluster, plan)
    f = nvme_swaps(cluster, plan, t)
    assert f.status == "warn" and "the default rates" in f.message
    given = cluster.replace(nvme_read_gb_per_s=400.0, nvme_write_gb_per_s=400.0)
    g = nvme_swaps(given, plan, _step(model, given, plan))
    assert g.status == "pass" and "default" not in g.message
    assert nvme_swaps(cluster, _plan("cpu"), _step(model, cluster, _plan("cpu"))) is None


def test_nvme_below_zero3_is_cpu_offload_and_the_advisor_says_so():
    """DeepSpeed's ZeRO-1/2 take offload_optimizer.device "nvme" as the CPU: no swaps, the states in host memory."""
    model = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=1000)
    plans = {d: ParallelPlan(engine="deepspeed", world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=2,
                             offload_optimizer=d) for d in ("cpu", "nvme")}
    est = {d: estimate(model, cluster, p, checks=False, simulate_allocator=False) for d, p in plans.items()}
    assert est["nvme"].time.step_seconds == est["cpu"].time.step_seconds
    assert est["nvme"].memory.nvme_bytes_per_gpu == 0
    assert est["nvme"].memory.host_bytes_per_gpu == est["cpu"].memory.host_bytes_per_gpu
    f = nvme_swaps(cluster, plans["nvme"], est["nvme"].time)
    assert f.status == "warn" and "ZeRO-2" in f.message and "as CPU offload" in f.message


# ---- the node's NVMe measured by `workbench calibrate --nvme-dir` and taken from the profile -----------------------
def _h200_profile(**nvme):
    from test_calibrate_profile import h200_profile

    return h200_profile().replace(**nvme)


@pytest.fixture
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))


def test_profile_nvme_rates_are_checked_by_name(_home):
    ok = _h200_profile(nvme_gb_per_s={"read": 5.5, "write": 2.5})
    again = type(ok).from_dict(json.loads(json.dumps(ok.to_dict())))
    assert again.nvme_gb_per_s == {"read": 5.5, "write": 2.5}
    with pytest.raises(ValueError, match=r"nvme_gb_per_s\.read"):
        _h200_profile(nvme_gb_per_s={"read": -1.0, "write": 2.0})
    with pytest.raises(ValueError, match="nvme_gb_per_s: unknown field speed"):
        _h200_profile(nvme_gb_per_s={"speed": 3.0})


def test_a_profile_gives_the_cluster_its_measured_nvme_rates_unless_flags_do(_home, tmp_path):
    from workbench.commands.common import cluster_from_args

    path = tmp_path / "p.json"
    _h200_profile(nvme_gb_per_s={"read": 5.5, "write": 2.5}).save(path)
    args = argparse.Namespace(profile=str(path), gpu=None, gpus_per_node=1, nodes=1, intra_gbps=None,
                              inter_gbps=None, host_mem_gib=None, nvme_gib=100.0, host_cores=None,
                              cpu_adam_threads=None, nvme_read_gbps=None, nvme_write_gbps=None)
    c = cluster_from_args(args)
    assert (c.nvme_read_gb_per_s, c.nvme_write_gb_per_s) == (5.5, 2.5)
    c = cluster_from_args(argparse.Namespace(**{**vars(args), "nvme_write_gbps": 7.0}))
    assert (c.nvme_read_gb_per_s, c.nvme_write_gb_per_s) == (5.5, 7.0)
    c = cluster_from_args(argparse.Namespace(**{**vars(args), "profile": None}))
    assert (c.nvme_read_gb_per_s, c.nvme_write_gb_per_s) == (NVME_READ_GB_PER_S, NVME_WRITE_GB_PER_S)


def test_calibrate_measures_the_nvme_folder_and_keeps_going_without_async_io(_home, tmp_path, monkeypatch):
    from workbench.calibrate import CalibrationSettings, calibrate
    from workbench.calibrate import measure

    calls = []

    def fake(directory, nbytes=2**30, *, repeats=2):
        calls.append(directory)
        return {"read": 3.25, "write": 1.5, "reads": [3.25], "writes": [1.5], "bytes": nbytes,
                "directory": str(directory)}

    monkeypatch.setattr(measure, "measure_nvme", fake)
    settings = CalibrationSettings(name="nvme-test", parts=(), nvme_dir=str(tmp_path / "nvme"))
    profile = calibrate(settings)
    assert calls == [str(tmp_path / "nvme")] and profile.nvme_gb_per_s == {"read": 3.25, "write": 1.5}

    def missing(directory, nbytes=2**30, *, repeats=2):
        raise RuntimeError("DeepSpeed's async_io op is not available (no libaio)")

    monkeypatch.setattr(measure, "measure_nvme", missing)
    profile = calibrate(settings)
    assert profile.nvme_gb_per_s == {} and any("async_io op is not available" in n for n in profile.notes)
    assert calibrate(CalibrationSettings(name="nvme-test", parts=())).nvme_gb_per_s == {}


def test_nvme_below_zero3_keeps_the_optimizer_in_cpu_memory():
    from workbench.advisor import pageable_offload

    z2 = ParallelPlan(engine="deepspeed", world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=2,
                      offload_optimizer="nvme", pin_memory=False)
    assert z2.offloads_to_cpu and not z2.nvme_optimizer
    finding = pageable_offload(z2)  # its host buffers are pageable, as CPU offload's are
    assert finding is not None and finding.id == "pageable_offload"
    z3 = _plan("nvme", pin_memory=False)
    assert z3.nvme_optimizer and not z3.offloads_to_cpu and pageable_offload(z3) is None
    assert _plan("nvme", "cpu").offloads_to_cpu


def test_nvme_holds_a_bucket_of_fp32_gradient_casts_on_the_gpu():
    from workbench import memory as M
    from workbench.specs import ModelSpec

    # the list: every slice but the one counted beside its copies (the untied output layer, the bucket's last), or,
    # counted first (a tied embedding), the whole list once the embedding's copies are gone
    assert float(M.zero3_nvme_gradient_list_bytes(400e6, 100e6, nvme_optimizer=1)) == 4 * 300e6
    assert float(M.zero3_nvme_gradient_list_bytes(400e6, 100e6, data_parallel=4, nvme_optimizer=1)) == 0.0
    first = 4 * 400e6 - float(M.zero3_offload_copy_bytes(100e6, 2))
    assert float(M.zero3_nvme_gradient_list_bytes(400e6, 100e6, nvme_optimizer=1, counted_first=True)) == first
    assert float(M.zero3_nvme_gradient_list_bytes(400e6, 100e6, nvme_optimizer=0)) == 0.0
    # a small untied model at micro-batch 1: its whole gradient is one bucket reduced after backward, the peak;
    # with the optimizer on NVMe the fp32 casts of all but the output layer's slice wait beside it
    model = ModelSpec(name="t", num_layers=4, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
                      vocab_size=50304, seq_length=512, tied_embeddings=False)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=1000)
    mem = {o: estimate(model, cluster, _plan(o), checks=False, simulate_allocator=False).memory
           for o in ("cpu", "nvme")}
    output = 50304 * 2048
    params = float(mem["nvme"].breakdown.weights) / 2  # one rank holds the whole 16-bit model
    added = mem["nvme"].to_dict()["allocated_bytes"] - mem["cpu"].to_dict()["allocated_bytes"]
    assert added == pytest.approx(4 * (params - output), rel=0.02)
    # and the buffers' formula says so (the CLI's and the Memory view's term text)
    assert "swapped out together" in mem["nvme"].formulas["buffers"]
    assert "swapped out together" not in mem["cpu"].formulas["buffers"]


@pytest.mark.parametrize("optimizer, params, bytes_per_param", [
    ("nvme", "none", 16), ("nvme", "cpu", 16), ("nvme", "nvme", 18), ("cpu", "nvme", 2)])
def test_the_drive_holds_what_goes_there(optimizer, params, bytes_per_param):
    # the fp32 master, the two Adam moments and the fp32 gradient partition when the optimizer goes to NVMe, the
    # 16-bit parameters when they do; what stays in host memory is not on the drive
    model = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, nvme_gib_per_node=8000)
    plan = _plan(optimizer, params, world_size=8, global_batch_size=8)
    mem = estimate(model, cluster, plan, checks=False, simulate_allocator=False).memory
    assert mem.nvme_bytes_per_gpu == pytest.approx(bytes_per_param * model.num_parameters / 8, rel=1e-6)
    assert mem.nvme_bytes_per_node == 8 * mem.nvme_bytes_per_gpu
    both_there = params in ("none", optimizer)
    assert (mem.nvme_bytes_per_gpu == mem.offloaded_bytes_per_gpu) == both_there


def test_advisor_prices_the_optimizer_on_nvme_when_host_memory_is_what_fails():
    from workbench.advisor import nvme_option

    model = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, host_memory_gib_per_node=64)
    plan = _plan("cpu", global_batch_size=8)
    finding = nvme_option(model, cluster, plan)
    nvme_plan = plan.replace(offload_optimizer="nvme")
    est = estimate(model, cluster.replace(nvme_gib_per_node=1e9), nvme_plan, checks=False)
    assert finding.id == "nvme_option" and "the cluster declares none" in finding.message
    assert f"{est.time.step_seconds:.3f} s/step" in finding.message
    need = -(-est.memory.nvme_bytes_per_node // 2**30)
    assert f"--offload-optimizer nvme --nvme-gib {need} " in finding.suggestion and "--offload-params" not in \
        finding.suggestion
    # the plan the suggestion names fits that cluster once it declares the NVMe
    assert estimate(model, cluster.replace(nvme_gib_per_node=need), nvme_plan, checks=False).memory.fits
    # nothing to say where host memory holds the CPU offload, or where the plan already swaps to NVMe
    assert nvme_option(model, cluster.replace(host_memory_gib_per_node=256), plan) is None
    assert nvme_option(model, cluster.replace(nvme_gib_per_node=200), nvme_plan) is None
    # with the parameters in host memory too and too little of it even then, they go to NVMe as well
    both = _plan("cpu", "cpu", global_batch_size=8)
    small = cluster.replace(host_memory_gib_per_node=48)  # CPU 155 GiB, optimizer on NVMe 74, both 44
    finding = nvme_option(model, small, both)
    assert finding is not None and "--offload-params nvme" in finding.suggestion
    assert "the parameters too" in finding.message
    # and `workbench advise` lists it
    out = subprocess.run([sys.executable, "-m", "workbench", "advise", "--model", "llama2-7b", "--gpus-per-node", "1",
                          "--gbs", "8", "--mbs", "1", "--zero", "3", "--offload-optimizer", "cpu", "--host-mem-gib",
                          "64", "--no-simulate-allocator"], capture_output=True, text=True, check=True).stdout
    assert "nvme_option" in out and f"--nvme-gib {need}" in out


def test_advisor_keeps_the_optimizer_in_host_memory_when_the_parameters_on_nvme_are_enough():
    """Llama 2 70B on two H100 (TP 2) with both offloaded to the host needs 1,824 GiB of host memory per node; with
    1,600 the parameters alone on NVMe fit it, and swapping 16-bit parameters is faster than swapping the optimizer:
    the finding names that plan, priced as estimate() prices it."""
    from workbench.advisor import nvme_option

    model = catalog.model("llama2-70b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=2, host_memory_gib_per_node=1600)
    plan = ParallelPlan(engine="megatron-deepspeed", world_size=2, tensor_parallel=2, sequence_parallel=True,
                        zero_stage=3, offload_optimizer="cpu", offload_params="cpu", micro_batch_size=8,
                        global_batch_size=16, recompute="full")
    assert not estimate(model, cluster, plan, checks=False, simulate_allocator=False).memory.fits_host
    finding = nvme_option(model, cluster, plan)
    assert finding is not None and "the parameters swapped to NVMe" in finding.message
    assert "the optimizer kept in host memory" in finding.message
    chosen = plan.replace(offload_params="nvme")
    roomy = cluster.replace(nvme_gib_per_node=1e9)
    est = estimate(model, roomy, chosen, checks=False)
    assert f"{est.time.step_seconds:.3f} s/step" in finding.message
    need = -(-est.memory.nvme_bytes_per_node // 2**30)
    assert finding.suggestion.startswith(f"--zero 3 --offload-optimizer cpu --offload-params nvme --nvme-gib {need} ")
    opt_nvme = estimate(model, roomy, plan.replace(offload_optimizer="nvme"), checks=False)
    assert opt_nvme.memory.fits_host and opt_nvme.time.step_seconds > est.time.step_seconds
    assert estimate(model, cluster.replace(nvme_gib_per_node=need), chosen, checks=False).memory.fits


def test_run_writes_the_nvme_path_into_the_runs_ds_config(monkeypatch):
    import workbench.runs as runs
    from workbench import cli

    seen = {}

    def launch(*args, **kwargs):  # stands in for the launcher: what `workbench run` hands it
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "launch", launch)
    argv = ["run", "--tiny", "--engine", "deepspeed", "--zero", "3", "--offload-optimizer", "nvme", "--nproc", "1",
            "--gpu", "CPU", "--steps", "1"]
    try:
        cli.main(argv + ["--nvme-path", "/mnt/nvme0"])
    except KeyboardInterrupt:
        pass
    assert seen["ds_options"] == {"nvme_path": "/mnt/nvme0"}
    seen.clear()
    try:
        cli.main(argv)
    except KeyboardInterrupt:
        pass
    assert seen["ds_options"] is None


def test_the_nvme_gradient_list_holds_a_ranks_slices():
    # over 8 ranks each holds an eighth of every gradient of the bucket: the list is an eighth too, not zero
    model = catalog.model("llama2-7b").replace(num_layers=2, seq_length=256)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, nvme_gib_per_node=8000)
    mem = {o: estimate(model, cluster, _plan(o, world_size=8, global_batch_size=8), checks=False,
                       simulate_allocator=False).memory.to_dict()["allocated_bytes"] for o in ("cpu", "nvme")}
    one = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=8000)
    mem1 = {o: estimate(model, one, _plan(o), checks=False, simulate_allocator=False).memory.to_dict()[
        "allocated_bytes"] for o in ("cpu", "nvme")}
    added, added1 = mem["nvme"] - mem["cpu"], mem1["nvme"] - mem1["cpu"]
    assert 0 < added < added1


def _neox_h2048():
    """GPT-NeoX h2048 as the corpus ran it with the parameters on NVMe (nvme80): its 50,304 x 2,048 input embedding
    is 103,022,592 elements, above DeepSpeed's default offload_param.buffer_size."""
    from workbench.specs import ModelSpec

    return ModelSpec(name="neox-h2048", num_layers=4, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
                     vocab_size=50304, seq_length=2048)


def test_parameter_swap_buffers_hold_the_largest_partition():
    from workbench import memory as M

    m = _neox_h2048()
    assert M.largest_param_partition(m, 1, 1) == 50304 * 2048 == 103_022_592
    assert M.nvme_param_buffer_elements(m, 1, 1) == 103_022_592
    assert M.largest_param_partition(m, 1, 2) == 51_511_296  # ZeRO-3 splits it over two ranks
    assert M.nvme_param_buffer_elements(m, 1, 2) == M.DS_NVME_PARAM_BUFFER_ELEMENTS  # DeepSpeed's default holds it


def test_export_writes_a_parameter_buffer_that_deepspeed_accepts():
    from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config
    from workbench.specs import ClusterSpec, ParallelPlan

    m = _neox_h2048()
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=100)
    plan = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=3, offload_optimizer="nvme",
                        offload_params="nvme", micro_batch_size=1, global_batch_size=1)
    zero = build_ds_config(m, cluster, plan)["zero_optimization"]
    assert zero["offload_param"]["buffer_size"] == 103_022_592
    assert "buffer_size" not in zero["offload_optimizer"]
    own = build_ds_config(m, cluster, plan, options=DeepSpeedOptions(param_buffer_size=2 * 10**8))
    assert own["zero_optimization"]["offload_param"]["buffer_size"] == 2 * 10**8
    cpu = build_ds_config(m, cluster, plan.replace(offload_params="cpu"))["zero_optimization"]["offload_param"]
    assert "buffer_size" not in cpu


def test_advisor_fails_a_parameter_buffer_deepspeed_refuses():
    from workbench.advisor import nvme_param_buffer
    from workbench.configs.deepspeed import DeepSpeedOptions
    from workbench.configs.importer import import_ds_config
    from workbench.specs import ParallelPlan

    m = _neox_h2048()
    plan = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=3, offload_optimizer="nvme",
                        offload_params="nvme", micro_batch_size=1, global_batch_size=1)
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"},
                                 "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}}
    imported = import_ds_config(cfg)
    assert imported.options["param_buffer_size"] == 100_000_000  # DeepSpeed's default where the config sets none
    found = nvme_param_buffer(m, plan, DeepSpeedOptions(param_buffer_size=imported.options["param_buffer_size"]))
    assert found.status == "fail"
    assert "More elements 103022592 than buffer size 100000000" in found.message
    assert '"buffer_size": 103022592' in found.suggestion
    cfg["zero_optimization"]["offload_param"]["buffer_size"] = 2e8
    assert import_ds_config(cfg).options["param_buffer_size"] == 200_000_000
    assert nvme_param_buffer(m, plan, DeepSpeedOptions(param_buffer_size=200_000_000)) is None
    written = nvme_param_buffer(m, plan)  # no config of the user's: the export's own buffer
    assert written.status == "pass" and "buffer_size 103022592" in written.message
    assert nvme_param_buffer(m, plan.replace(offload_params="cpu")) is None
