"""PyTorch's expandable-segments allocator as a stack option: plan, memory reserve, band, CLI, export, import,
launcher environment."""
import json

import pytest

from workbench import memory as M
from workbench.configs.launch import allocator_lines, expandable_in_conf, with_expandable_segments
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

SMALL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, seq_length=1024)


def _pair(engine="deepspeed", **kw):
    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, engine=engine, **kw)
    return estimate(m, c, plan), estimate(m, c, plan.replace(expandable_segments=True))


@pytest.mark.parametrize("engine,kw", [("deepspeed", dict(zero_stage=2)), ("deepspeed", dict(zero_stage=3)),
                                       ("megatron", {})])
def test_reserve_is_the_expandable_fraction_and_allocated_is_unchanged(engine, kw):
    default, expandable = _pair(engine, **kw)
    alloc = default.memory.to_dict()["allocated_bytes"]
    assert expandable.memory.to_dict()["allocated_bytes"] == alloc
    key = "megatron" if engine == "megatron" else "deepspeed"
    reserve = (expandable.memory.peak_stage.terms.overhead - default.memory.peak_stage.terms.overhead) / alloc
    default_fraction = M.engine_overheads(M.ENGINE_CODES[default.plan.engine], kw.get("zero_stage", 0))
    assert reserve == pytest.approx(M.RESERVE_FRACTION_EXPANDABLE[key] - float(default_fraction["reserve_fraction"]),
                                    abs=1e-6)
    assert expandable.memory.per_gpu_peak_bytes < default.memory.per_gpu_peak_bytes
    assert expandable.time.step_seconds == default.time.step_seconds
    assert "expandable" in expandable.memory.formulas["overhead"]


def test_profile_reserve_gives_way_to_the_expandable_one():
    """A profile's reserve was measured with the default allocator: with expandable segments it is not used."""
    out = M.overhead_bytes(100.0, 1, engine=0, context_bytes=0, nccl_bytes=0, reserve_fraction=0.5,
                           expandable_segments=1)
    assert out == pytest.approx(100.0 * M.RESERVE_FRACTION_EXPANDABLE["deepspeed"])
    assert M.overhead_bytes(100.0, 1, engine=0, context_bytes=0, nccl_bytes=0, reserve_fraction=0.5) == 50.0


def test_band_for_the_allocator_mode(monkeypatch):
    entry = lambda n, hi: {"n": n, "shapes": 3, "low_fraction": 0.01, "high_fraction": hi}  # noqa: E731
    bands = {"device": {"deepspeed": entry(50, 0.15), "deepspeed/expandable-segments": entry(7, 0.04),
                        "megatron": entry(20, 0.12), "megatron/expandable-segments": entry(3, 0.02)}}
    monkeypatch.setattr(M, "_error_bands", lambda: bands)
    assert M.error_band("deepspeed", "device", "none", True)[1] == 0.04
    assert "expandable segments" in M.error_band("deepspeed", "device", None, True)[2]
    assert M.error_band("deepspeed", "device", "none", False)[1] == 0.15
    assert M.error_band("megatron", "device", None, True)[1] == 0.12  # 3 runs: too few, the engine's band
    default, expandable = _pair(zero_stage=2)
    assert expandable.to_dict()["memory"]["band_bytes"]["high"] == round(
        expandable.memory.per_gpu_peak_bytes * 0.04)


def test_cli_estimate_and_plan(capsys):
    from workbench.cli import main

    base = ["estimate", "--model", "llama3-8b", "--gpu", "H200", "--zero", "3", "--json"]
    assert main(base) == 0
    off = json.loads(capsys.readouterr().out)
    assert main(base + ["--expandable-segments"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert (off["plan"]["expandable_segments"], on["plan"]["expandable_segments"]) == (False, True)
    assert on["memory"]["per_gpu_peak_bytes"] < off["memory"]["per_gpu_peak_bytes"]
    assert main(["plan", "--model", "gpt3-350m", "--gpus", "2", "--gbs", "8", "--top", "1", "--engine", "deepspeed",
                 "--expandable-segments", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["ranked"][0]["expandable_segments"] is True


def test_export_and_import_round_trip():
    from workbench import catalog
    from workbench.configs.importer import import_megatron_args
    from workbench.configs.launch import slurm_script
    from workbench.configs.megatron import megatron_command

    m, c = catalog.model("gpt3-1.3b"), ClusterSpec(gpu="H200", gpus_per_node=8)
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=2)
    assert allocator_lines(plan) == [] and "PYTORCH_CUDA_ALLOC_CONF" not in megatron_command(m, c, plan)
    script = megatron_command(m, c, plan.replace(expandable_segments=True))
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in script
    assert import_megatron_args(script).plan_fields["expandable_segments"] is True
    assert "expandable_segments" not in import_megatron_args(megatron_command(m, c, plan)).plan_fields
    commented = "# export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + megatron_command(m, c, plan)
    assert "expandable_segments" not in import_megatron_args(commented).plan_fields
    sbatch = slurm_script(c, ["train.py"], preamble=allocator_lines(plan.replace(expandable_segments=True)))
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in sbatch


def test_alloc_conf_strings():
    assert expandable_in_conf("expandable_segments:True") and expandable_in_conf("max_split_size_mb:64, "
                                                                                 "expandable_segments:true")
    assert not expandable_in_conf(None) and not expandable_in_conf("expandable_segments:False")
    assert with_expandable_segments("") == "expandable_segments:True"
    assert with_expandable_segments("max_split_size_mb:64,expandable_segments:False") == \
        "max_split_size_mb:64,expandable_segments:True"


def test_launcher_environment(monkeypatch):
    from workbench.runs.prepare import run_env_for

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in run_env_for(nproc=1, on_gpu=False, extra=None)
    env = run_env_for(nproc=1, on_gpu=False, extra=None, expandable_segments=True)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6")
    env = run_env_for(nproc=1, on_gpu=False, extra=None, expandable_segments=True)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "garbage_collection_threshold:0.6,expandable_segments:True"


def test_plan_field_is_checked_and_stored():
    from workbench.runs.specio import specs_from_dict, specs_to_dict

    with pytest.raises(ValueError, match="expandable_segments"):
        ParallelPlan(world_size=1, expandable_segments="yes")
    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, expandable_segments=True)
    assert specs_from_dict(json.loads(json.dumps(specs_to_dict(m, c, plan))))[2] == plan


def test_bench_accuracy_scores_expandable_records_apart(monkeypatch):
    """bench_accuracy reads an expseg record as a plan with the option on, fits the expandable reserve per engine
    (pooled under MIN_FIT_RUNS) and writes ENGINE/expandable-segments device band entries."""
    import importlib.util
    import sys
    from pathlib import Path

    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(
        "bench_accuracy_under_test", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_accuracy.py")
    B = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(B)
    dims = dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024, vocab_size=1000,
                seq_length=128)
    rec = dict(run_id="mcore-ds/x/z2/expseg/mbs1", shape_id="x", stack="mcore-ds", status="ok", world_size=1,
               options={"zero": 2, "mbs": 1, "expandable_segments": True}, model_dims=dims,
               optimizer_class="FusedAdam", peak_allocated_bytes=10 * 2**30, peak_reserved_bytes=11 * 2**30,
               outside_allocator_bytes=2**30, step_seconds_median=0.1)
    run = B.corpus_run(rec)
    assert run["plan"].expandable_segments is True
    assert B.corpus_run({**rec, "options": {"zero": 2, "mbs": 1}})["plan"].expandable_segments is False

    def row(engine, reserved, measured_device, predicted_device):
        plan = ParallelPlan(world_size=1, engine=engine, expandable_segments=True)
        r = dict(plan=plan, shape_id=f"s{reserved}", measured=dict(allocated=100, reserved=reserved,
                                                                     device=measured_device),
                 predicted=dict(device=predicted_device))
        return r, {}

    rows = [row("deepspeed", 100 + k, 110, 100) for k in range(1, 6)] + [row("megatron", 102, 95, 100)]
    fitted = B.expandable_reserve_fit(rows)
    assert fitted["deepspeed"]["used"] == pytest.approx(0.03) and fitted["deepspeed"]["n"] == 5
    assert fitted["megatron"]["n"] == 1 and fitted["megatron"]["used"] == fitted["all"]["median"]
    band = B.band([], rows)["device"]
    assert band["deepspeed/expandable-segments"]["high_fraction"] == pytest.approx(0.1)
    assert band["megatron/expandable-segments"]["low_fraction"] == pytest.approx(0.05)


def test_advisor_names_expandable_segments_near_capacity():
    import dataclasses

    from workbench import advisor

    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2)
    peak = estimate(m, c, plan).memory.per_gpu_peak_bytes
    far = estimate(m, c, plan).memory
    assert advisor.expandable_segments_advice(m, c, plan, far) is None  # a small model on a 141 GB card
    tight = c.replace(gpu=dataclasses.replace(c.gpu, memory_gib=peak * 1.02 / 2**30))
    est = estimate(m, tight, plan)
    found = advisor.expandable_segments_advice(m, tight, plan, est.memory)
    assert found.status == "warn" and "33%" in found.suggestion and "12%" in found.suggestion
    saved = est.memory.per_gpu_peak_bytes - estimate(m, tight, plan.replace(expandable_segments=True)) \
        .memory.per_gpu_peak_bytes
    assert saved > 0 and f"drops by {advisor._gb(saved)}" in found.suggestion  # the estimate's own saving
    assert "expandable_segments" in {f.id for f in est.checks}
    on = estimate(m, tight, plan.replace(expandable_segments=True))
    assert advisor.expandable_segments_advice(m, tight, on.plan, on.memory).status == "pass"


def test_near_capacity_advice_names_the_allocator_replay_only_where_it_applies():
    """A transformers model, or a megatron-core model with unfused attention, under ZeRO-2 on one GPU near capacity:
    the advice also names the replay `workbench estimate` runs by default with the study's held-out numbers; a
    megatron-core model with flash attention (outside the replay's scope) does not get it."""
    import dataclasses

    from workbench import advisor, allocsim
    from workbench.specs import Implementation

    c = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, overlap_comm=False)
    for implementation, attention, named in ((Implementation.TRANSFORMERS, "flash", True),
                                             (Implementation.MEGATRON, "unfused", True),
                                             (Implementation.MEGATRON, "flash", False)):
        m = ModelSpec(**SMALL).replace(implementation=implementation, attention=attention)
        peak = estimate(m, c, plan).memory.per_gpu_peak_bytes
        tight = c.replace(gpu=dataclasses.replace(c.gpu, memory_gib=peak * 1.02 / 2**30))
        found = advisor.expandable_segments_advice(m, tight, plan, estimate(m, tight, plan).memory)
        study = allocsim.REPLAY_STUDY
        assert found.status == "warn"
        assert ("replays it by default" in found.suggestion) is named
        assert (f"on {study['test_runs']} held-out H200 runs" in found.suggestion) is named
        # far over capacity the reserve decides nothing: no replay named
        over = c.replace(gpu=dataclasses.replace(c.gpu, memory_gib=peak * 0.5 / 2**30))
        far = advisor.expandable_segments_advice(m, over, plan, estimate(m, over, plan).memory)
        assert far.status == "warn" and "replays it by default" not in far.suggestion
    assert study["replayed"][0] < study["constant"][0] and abs(study["replayed"][1]) < abs(study["constant"][1])


def _small_plan_near_capacity():
    """A small model's ZeRO-2 plan on one H200 shrunk to 1.02x the plan's peak: ``(model, cluster, plan, memory,
    allocated bytes)``."""
    import dataclasses

    m, c = ModelSpec(**SMALL), ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2)
    peak = estimate(m, c, plan).memory.per_gpu_peak_bytes
    tight = c.replace(gpu=dataclasses.replace(c.gpu, memory_gib=peak * 1.02 / 2**30))
    mem = estimate(m, tight, plan).memory
    return m, tight, plan, mem, mem.per_gpu_peak_bytes - mem.peak_stage.terms.overhead


def test_near_capacity_advice_takes_the_replayed_reserve_when_the_plan_was_replayed():
    """With the reserve the allocator replay gave this very plan, the saving of expandable segments is counted from
    it (not the engine's constant) and the advice no longer suggests replaying: a replayed reserve of 30 % saves
    allocated x (30 % - the expandable reserve); one below the expandable reserve saves nothing, no finding."""
    from workbench import advisor
    from workbench.memory import RESERVE_FRACTION_EXPANDABLE, plan_engine_key

    m, tight, plan, mem, allocated = _small_plan_near_capacity()
    found = advisor.expandable_segments_advice(m, tight, plan, mem, reserve_fraction=0.30)
    saved = allocated * (0.30 - RESERVE_FRACTION_EXPANDABLE[plan_engine_key(plan)])
    assert found.status == "warn" and f"drops by {advisor._gb(saved)}" in found.suggestion
    assert "replays it by default" not in found.suggestion
    assert "replays it by default" in advisor.expandable_segments_advice(m, tight, plan, mem).suggestion
    low = RESERVE_FRACTION_EXPANDABLE[plan_engine_key(plan)] / 2
    assert advisor.expandable_segments_advice(m, tight, plan, mem, reserve_fraction=low) is None


def test_near_capacity_advice_takes_the_expandable_replay_of_the_plan_when_given():
    """With both allocators replayed for the plan (the estimate's ``expandable_twin``), the saving is their peaks
    reserved apart, not the expandable constant; an expandable replay that reserves more gives no finding."""
    from types import SimpleNamespace

    from workbench import advisor
    from workbench.allocsim import ReplayedPeaks

    m, tight, plan, mem, allocated = _small_plan_near_capacity()
    reserved = int(allocated * 1.05)  # the expandable replay's peak reserved: 5 % above allocated
    def twin(reserved):  # the estimate's expandable twin: the plan with expandable segments, replayed
        return lambda: SimpleNamespace(replayed_peaks=ReplayedPeaks(int(allocated), int(reserved)))

    found = advisor.expandable_segments_advice(m, tight, plan, mem, reserve_fraction=0.30,
                                               expandable_twin=twin(reserved))
    assert found.status == "warn" and f"drops by {advisor._gb(allocated * 1.30 - reserved)}" in found.suggestion
    assert advisor.expandable_segments_advice(m, tight, plan, mem, reserve_fraction=0.30,
                                              expandable_twin=twin(allocated * 1.40)) is None

def test_plan_panel_checkbox_sets_the_allocator_and_the_estimate_follows():
    from widgets.app import Workbench
    from widgets.parallel_panel import ParallelPanel

    app = Workbench()
    panel = next(p for p in app.panels if isinstance(p, ParallelPanel))
    before = app.state.estimate.memory.per_gpu_peak_bytes
    assert panel.controls["expandable_segments"].value is False
    panel.controls["expandable_segments"].value = True
    assert app.state.plan.expandable_segments is True
    assert app.state.estimate.memory.per_gpu_peak_bytes < before


def test_oom_ladder_prices_its_rungs_with_the_records_replay():
    """A plan estimated with its allocator replayed carries ``replay_for``; the OOM ladder prices its rungs with it
    (rung 0, expandable segments, first) and marks them replayed; a record estimated with the constant does not."""
    import dataclasses

    from workbench import advisor
    from workbench.allocsim import ReplayedPeaks

    m, tight, plan, mem, allocated = _small_plan_near_capacity()
    over = tight.replace(gpu=dataclasses.replace(tight.gpu, memory_gib=tight.gpu.memory_gib * 0.9))
    base = estimate(m, over, plan, checks=False)
    asked = []

    def replay_for(p):  # the plans the ladder asks for, "replayed" (the constant's record, marked so)
        asked.append(p)
        return dataclasses.replace(estimate(m, over, p, checks=False), replayed_peaks=ReplayedPeaks(1, 1))
    ladder = advisor.oom_ladder(m, over, plan, record=dataclasses.replace(base, replay_for=replay_for))
    assert asked[0] == plan.replace(expandable_segments=True) and ladder[0].step == 0
    assert [s.plan for s in ladder if s.replayed] == [s.plan for s in ladder if s.plan is not None]
    assert ladder[0].replayed and ladder[0].to_dict()["replayed"] is True
    plain = advisor.oom_ladder(m, over, plan, record=base)
    assert plain and not any(s.replayed for s in plain)

    def broken(p):
        raise RuntimeError("the trace failed")
    failed = advisor.oom_ladder(m, over, plan, record=dataclasses.replace(base, replay_for=broken))
    assert [s.to_dict() for s in failed] == [s.to_dict() for s in plain]  # the constant's ladder, unmarked
