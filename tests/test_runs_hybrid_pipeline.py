"""The guide's hybrid with a pipeline: Megatron tensor x pipeline parallel with DeepSpeed ZeRO-1 over each stage's
data-parallel group, through the launcher on gloo. benchmarks/guide_13b_layout_cpu.py runs the guide's TP4 x PP2
at tiny width as well."""
import json

import pytest

from runs_support import TINY, cpu_cluster, plan
from workbench.runs import RunStore, launch, prepare

STEPS = 2


def step_records(run_dir, rank):
    lines = (run_dir / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == "step"]


def test_zero2_and_zero3_with_a_pipeline_are_refused_with_deepspeeds_reason(tmp_path):
    for stage in (2, 3):
        with pytest.raises(ValueError, match=f"zero_stage={stage} cannot be combined with pipeline_parallel=2: "
                                             "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"):
            plan(2, engine="megatron-deepspeed", pipeline_parallel=2, zero_stage=stage)
    with pytest.raises(ValueError, match="virtual_pipeline=2 with engine='megatron-deepspeed'"):
        prepare(TINY.replace(num_layers=4), cpu_cluster(2),
                plan(2, engine="megatron-deepspeed", pipeline_parallel=2, virtual_pipeline=2, zero_stage=1,
                     global_batch_size=4), steps=1, nproc=2, run_dir=tmp_path / "v")
    with pytest.raises(ValueError, match="pipeline_parallel=2 with engine='deepspeed'"):
        prepare(TINY, cpu_cluster(2), plan(2, pipeline_parallel=2, zero_stage=1), steps=1, nproc=2,
                run_dir=tmp_path / "d")
    prepared = prepare(TINY, cpu_cluster(8), plan(8, engine="megatron-deepspeed", tensor_parallel=2,
                                                  pipeline_parallel=2, zero_stage=1), steps=1, nproc=8,
                       run_dir=tmp_path / "ok")
    cfg = json.loads((prepared.run_dir / "ds_config.json").read_text())
    # DeepSpeed's batch arithmetic over the data-parallel group; overlap_comm off as DeepSpeed runs pipelines
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["zero_optimization"]["overlap_comm"] is False
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 2


def test_cli_refuses_zero2_with_a_pipeline_in_one_line(capsys, monkeypatch, tmp_path):
    from workbench.cli import main

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    argv = ["run", "--engine", "hybrid", "--tp", "1", "--pp", "2", "--zero", "2", "--tiny", "--nproc", "2",
            "--gbs", "2", "--precision", "fp32"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in err


@pytest.mark.slow
def test_tp2_pp2_dp2_zero1_on_8_processes_equals_world_size_1(tmp_path):
    """8 gloo processes (TP2 x PP2 x DP2, ZeRO-1, 2 micro-batches per data-parallel rank) against ZeRO-1 on one
    process: the same losses and the same gradient norms before clipping (clipping at 1.0 is active: the norms are
    above 2), fp32, within 1e-5 relative."""
    store = RunStore(tmp_path / "runs.sqlite")
    runs = {}
    for name, p in (("one", plan(1, zero_stage=1, global_batch_size=4)),
                    ("hyb", plan(8, engine="megatron-deepspeed", tensor_parallel=2, pipeline_parallel=2,
                                 zero_stage=1, global_batch_size=4))):
        r = launch(TINY, cpu_cluster(p.world_size), p, steps=STEPS, nproc=p.world_size, store=store,
                   run_dir=tmp_path / name, timeout_seconds=400)
        r.wait()
        rec = r.record()
        assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
        runs[name] = (r, rec)
    (one, one_rec), (hyb, hyb_rec) = runs["one"], runs["hyb"]
    assert len(one_rec["losses"]) == STEPS
    assert hyb_rec["losses"] == pytest.approx(one_rec["losses"], rel=1e-5, abs=1e-5)
    ref_norms = [s["grad_norm"] for s in step_records(one.run_dir, 0)]
    assert min(ref_norms) > 1.0
    for rank in range(8):  # every rank's DeepSpeed saw the whole model's norm (all stages, tied copy once)
        assert [s["grad_norm"] for s in step_records(hyb.run_dir, rank)] == pytest.approx(ref_norms, rel=1e-5)
    # megatron's order (tp fastest, pipeline outermost): ranks 4-7 are the last stage, which reports the loss
    assert [s["loss"] is not None for s in step_records(hyb.run_dir, 0)] == [False] * STEPS
    assert set(hyb_rec["measured"]["peak_memory_bytes"]) == {str(r) for r in range(8)}


@pytest.mark.slow
def test_rank_killed_in_a_hybrid_pipeline(tmp_path):
    import os
    import signal
    import time

    from workbench.runs.launcher import group_members

    store = RunStore(tmp_path / "runs.sqlite")
    r = launch(TINY, cpu_cluster(2), plan(2, engine="megatron-deepspeed", pipeline_parallel=2, zero_stage=1,
                                          global_batch_size=2), steps=100000, nproc=2, store=store,
               run_dir=tmp_path / "kill")
    deadline = time.time() + 120
    while time.time() < deadline and not (r.progress()[0] >= 1 and len(r._tail.reports.started) == 2):
        r.metrics()
        time.sleep(0.2)
    assert r.progress()[0] >= 1, r.log_tail(30)
    os.kill(r._tail.reports.started[0], signal.SIGKILL)  # the first stage: the last one waits on it
    assert r.wait(120) == "killed"
    rec = r.record()
    assert "rank 0" in rec["reason"] and "SIGKILL" in rec["reason"], rec["reason"]
    assert rec["measured"]["steps_completed"] >= 1
    assert group_members(r.pgid) == []
    for pid in r._tail.reports.started.values():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
