"""The training stack: attention kernel, Adam kernel and gradient-reduce overlap, from spec to CLI, import, export."""
import dataclasses
import json
import warnings

import pytest

from workbench import catalog
from workbench.advisor import cpu_adam_threads
from workbench.configs.deepspeed import build_ds_config
from workbench.configs.importer import import_ds_config, import_megatron_args
from workbench.configs.megatron import attention_flags
from workbench.estimate import estimate
from workbench.memory import layer_activation_bytes
from workbench.specs import AdamImpl, AttentionImpl, ClusterSpec, ModelSpec, ParallelPlan

SMALL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, seq_length=1024)


@pytest.mark.parametrize("spelling,value", [("unfused", "unfused"), ("eager", "unfused"), ("fused", "fused-softmax"),
                                            ("fused_softmax", "fused-softmax"), ("sdpa", "flash"), ("FLASH", "flash")])
def test_attention_spellings(spelling, value):
    assert ModelSpec(**SMALL, attention=spelling).attention is AttentionImpl(value)


def test_fused_kernels_is_deprecated_and_maps_to_adam():
    with pytest.warns(DeprecationWarning, match="adam="):
        plan = ParallelPlan(world_size=1, fused_kernels=False)
    assert plan.adam is AdamImpl.TORCH and plan.fused_kernels is None
    assert plan.replace(adam="fused").adam is AdamImpl.FUSED  # the alias does not stick to replace()


def test_overlap_default_is_the_engines():
    assert ParallelPlan(world_size=2).overlaps_comm is True
    assert ParallelPlan(world_size=2, engine="megatron").overlaps_comm is False
    assert ParallelPlan(world_size=2, engine="megatron", overlap_comm=True).overlaps_comm is True


def test_scores_kept_per_attention_kernel():
    """Bytes per attention score (bf16): unfused 4 (fp32 softmax) + 2 (16-bit probabilities for probs x V)
    without dropout, + 1 mask + 2 dropout output with it; fused-softmax keeps 16-bit probabilities only."""
    def per_score(attention, dropout):
        m = ModelSpec(**SMALL, attention=attention, attention_dropout=dropout, hidden_dropout=0.0)
        flash = m.replace(attention="flash")
        kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, recompute=0,
                  value_bytes=2)
        diff = float(layer_activation_bytes(m, **kw)[1]) - float(layer_activation_bytes(flash, **kw)[1])
        flash_stat = 4.0 * m.num_attention_heads * m.seq_length
        return (diff + flash_stat) / (m.num_attention_heads * m.seq_length ** 2)

    assert per_score("unfused", 0.0) == pytest.approx(6.0)
    assert per_score("unfused", 0.1) == pytest.approx(7.0)
    assert per_score("fused-softmax", 0.0) == pytest.approx(2.0)
    assert per_score("fused-softmax", 0.1) == pytest.approx(5.0)  # Korthikanti et al. 2022's 5as²b


def test_presets_default_to_how_they_are_trained():
    assert catalog.model("llama3-70b").attention is AttentionImpl.FLASH
    assert catalog.model("gpt3-175b").attention is AttentionImpl.FUSED_SOFTMAX


def test_estimate_json_shows_the_stack():
    m = catalog.model("llama2-7b")
    c = ClusterSpec(gpu="A100-40GB", gpus_per_node=8)
    d = estimate(m, c, ParallelPlan(world_size=8, zero_stage=3, global_batch_size=64, adam="torch")).to_dict()
    assert (d["plan"]["attention"], d["plan"]["adam"], d["plan"]["overlap_comm"]) == ("flash", "torch", True)


def test_megatron_flags_round_trip():
    for attention in AttentionImpl:
        args = " ".join(["--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128"]
                        + attention_flags(attention))
        assert import_megatron_args(args).model_fields["attention"] == attention.value
    imp = import_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --transformer-impl local "
                               "--no-gradient-accumulation-fusion --overlap-grad-reduce")
    assert imp.plan_fields["adam"] == "torch" and imp.plan_fields["overlap_comm"] is True
    assert imp.model_fields["attention"] == "fused-softmax"


def test_ds_config_stack_round_trip():
    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H100-SXM", gpus_per_node=2)
    plan = ParallelPlan(world_size=2, zero_stage=2, adam="torch", overlap_comm=False)
    cfg = build_ds_config(m, c, plan)
    assert cfg["optimizer"]["params"]["torch_adam"] is True and cfg["zero_optimization"]["overlap_comm"] is False
    imp = import_ds_config(json.dumps(cfg))
    assert imp.plan_fields["adam"] == "torch" and imp.plan_fields["overlap_comm"] is False
    # no overlap_comm key: DeepSpeed's own default, on for ZeRO-3 only
    assert import_ds_config('{"zero_optimization": {"stage": 1}}').plan_fields["overlap_comm"] is False
    assert import_ds_config('{"zero_optimization": {"stage": 3}}').plan_fields["overlap_comm"] is True


def test_cli_flags(capsys):
    from workbench.cli import main

    assert main(["estimate", "--model", "llama3-8b", "--gpu", "H200", "--zero", "2", "--attention", "unfused",
                 "--adam", "torch", "--no-overlap-comm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["plan"]["attention"], d["plan"]["adam"], d["plan"]["overlap_comm"]) == ("unfused", "torch", False)
    offload = ["estimate", "--model", "llama3-8b", "--gpu", "H200", "--zero", "2", "--offload-optimizer", "cpu",
               "--host-cores", "64", "--json"]
    assert main(offload) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["cluster"]["host_cpu_cores_per_node"], d["cluster"]["cpu_adam_threads"]) == (64, 0)
    assert main(offload + ["--cpu-adam-threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"]["cpu_adam_threads"] == 1
    assert main(offload + ["--cpu-adam-threads", "-2"]) == 2
    assert "cpu_adam_threads=-2" in capsys.readouterr().err


def test_cpu_adam_threads_finding():
    plan = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu")
    assert cpu_adam_threads(plan, "1").status == "warn"
    assert cpu_adam_threads(plan, "").status == "warn"
    assert cpu_adam_threads(plan, "16").status == "pass"
    assert cpu_adam_threads(ParallelPlan(world_size=1, zero_stage=2), "1") is None
    # the cluster's declared threads win over the environment, and the time model prices one thread
    m = catalog.model("llama2-7b")
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1, host_cpu_cores_per_node=16)
    est = estimate(m, cluster, plan.replace(micro_batch_size=1, global_batch_size=1))
    finding = cpu_adam_threads(plan, "16", cluster=cluster.replace(cpu_adam_threads=1), time=est.time)
    assert finding.status == "warn" and "at 16 (the time model)" in finding.message


def test_cpu_adam_time_follows_threads_until_the_node_is_saturated():
    """Offload time: each rank's CPU Adam gets its threads' rate until the node's memory-bound cap; ZeRO-3 adds
    host passes; `workbench run`'s default is the node's cores shared by its GPUs."""
    from workbench.timing import step_time_terms

    m = catalog.model("llama2-7b")
    plan = ParallelPlan(world_size=8, zero_stage=2, offload_optimizer="cpu", micro_batch_size=1, global_batch_size=8)
    inputs = estimate(m, ClusterSpec(gpu="H200"), plan).time.inputs
    rates = dict(cpu_adam_params_per_second_per_thread=1e8, cpu_adam_params_per_second_per_node=4e9,
                 cpu_adam_serial_seconds_per_parameter=0.0)

    def offload(threads, **kw):
        return float(step_time_terms(**{**inputs, **rates, "cpu_adam_threads": threads, **kw})["offload"])

    shard = inputs["stage_parameters"] / 8
    transfer = shard * (4 + 2) / (inputs["host_link_gb_per_s"] * 1e9)  # fp32 gradients down, bf16 parameters up
    assert offload(1) == pytest.approx(transfer + shard / 1e8)
    assert offload(4) == pytest.approx(transfer + shard / 4e8)
    assert offload(64) == pytest.approx(transfer + shard / (4e9 / 8))  # 8 ranks share the node's 4e9 params/s
    assert offload(128) == pytest.approx(offload(64))
    assert offload(4, zero_stage=3, offload_zero3_host_factor=0.5) == pytest.approx(transfer + 1.5 * shard / 4e8)
    # a serial part per parameter that threads do not shorten (Amdahl)
    assert offload(4, cpu_adam_serial_seconds_per_parameter=1e-9) == pytest.approx(transfer + shard * (1 / 4e8 + 1e-9))
    assert ClusterSpec(gpu="H200", host_cpu_cores_per_node=112).cpu_adam_threads_per_rank == 14
    # the node's memory-bound cap follows the host: per core of the cluster's nodes
    caps = [estimate(m, ClusterSpec(gpu="H200", host_cpu_cores_per_node=n), plan).time.inputs[
        "cpu_adam_params_per_second_per_node"] for n in (16, 112)]
    assert caps[1] == pytest.approx(caps[0] * 7)
    assert ClusterSpec(gpu="H200", cpu_adam_threads=3).cpu_adam_threads_per_rank == 3
    assert estimate(m, ClusterSpec(gpu="H200", host_cpu_cores_per_node=32), plan).time.inputs["cpu_adam_threads"] == 4
    with pytest.raises(ValueError, match="cpu_adam_threads"):
        ClusterSpec(gpu="H200", cpu_adam_threads=-1)


def test_error_band_decides_fits(monkeypatch):
    """The upper side of the held-out band must fit: a plan 3 % under capacity with a 5 % band does not fit."""
    from workbench import memory as M

    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=1)
    monkeypatch.setattr(M, "_error_bands", lambda: {})
    peak = estimate(m, c, plan).memory.per_gpu_peak_bytes
    c = c.replace(gpu=dataclasses.replace(c.gpu, memory_gib=peak * 1.03 / 2**30))
    monkeypatch.setattr(M, "_error_bands", lambda: {})
    assert estimate(m, c, plan).memory.fits_gpu
    band = {"device": {"deepspeed": {"n": 5, "shapes": 2, "low_fraction": 0.02, "high_fraction": 0.05}},
            "step": {"deepspeed": {"n": 5, "shapes": 2, "low_fraction": 0.1, "high_fraction": 0.2}}}
    monkeypatch.setattr(M, "_error_bands", lambda: band)
    est = estimate(m, c, plan)
    assert not est.memory.fits_gpu and est.memory.headroom_bytes > 0
    d = est.to_dict()
    assert d["memory"]["band_bytes"]["high"] == round(peak * 0.05)
    assert d["time"]["band_seconds"]["high"] == pytest.approx(0.2 * est.time.step_seconds)
    assert M.error_band("megatron") is None  # no held-out runs of that engine: no band, said so
