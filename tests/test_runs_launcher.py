"""Real DeepSpeed / megatron-core / hybrid runs on the CPU (gloo), tiny model, 3 steps, through the launcher.
Reference runs (one process) are shared between the tests that compare against them.

Shared DeepSpeed ops are compiled once into TORCH_EXTENSIONS_DIR (tests/runs_support.py sets the default)."""
import json
import os
import signal
import time

import pytest

from runs_support import TINY, cpu_cluster, plan
from workbench.runs import RunStore, launch
from workbench.runs.launcher import RankReports, classify_exit, group_members
from workbench.runs.processes import shm_buffers

pytestmark = pytest.mark.slow
STEPS = 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return RunStore(tmp_path_factory.mktemp("store") / "runs.sqlite")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


def run(store, root, name, p, *, model=TINY, steps=STEPS, wait=True, **kw):
    r = launch(model, cpu_cluster(p.world_size), p, steps=steps, nproc=p.world_size, store=store,
               run_dir=root / name, **kw)
    if wait:
        r.wait(600)
    return r


_SHARED: dict = {}


def shared(store, root, name, p, **kw):
    """A finished run that several tests compare against (started once per module: a run costs mostly start-up)."""
    if name not in _SHARED:
        _SHARED[name] = run(store, root, name, p, **kw)
    return _SHARED[name]


def one_process_deepspeed(store, root):
    """DeepSpeed ZeRO-0 on one process, global batch 2 (two accumulated micro-batches): the reference layout."""
    return shared(store, root, "d1", plan(1, zero_stage=0, global_batch_size=2))


FOUR = TINY.replace(num_layers=4)  # two stages x two virtual chunks fit the interleaved schedule


def one_process_megatron(store, root):
    """megatron-core on one process, 4 layers, global batch 4: the reference for TP, PP and interleaved PP."""
    return shared(store, root, "m1", plan(1, engine="megatron", global_batch_size=4), model=FOUR)


def losses(r):
    rec = r.record()
    assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
    assert len(rec["losses"]) == STEPS
    return rec["losses"]


def assert_no_processes_left(r):
    assert group_members(r.pgid) == []
    pids = set()
    for line in (r.run_dir / "metrics").glob("rank*.jsonl"):
        pids |= {rec["pid"] for rec in map(json.loads, line.read_text().splitlines()) if rec["type"] == "start"}
    assert pids
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


# ---------------------------------------------------------------------------------------------------------------
# Equal losses across layouts
# ---------------------------------------------------------------------------------------------------------------
def test_zero_stages_2_3_over_two_processes_equal_one_process(store, runs_root):
    """ZeRO-2 and ZeRO-3 over two processes (ZeRO-1 shares ZeRO-2's optimizer class and runs in the hybrid test)."""
    base = losses(one_process_deepspeed(store, runs_root))
    for stage in (2, 3):
        got = losses(shared(store, runs_root, f"z{stage}", plan(2, zero_stage=stage)))
        assert got == pytest.approx(base, rel=1e-5, abs=1e-5), stage
        addr, _, port = store.get(_SHARED[f"z{stage}"].run_id)["master"].rpartition(":")
        assert shm_buffers(addr, int(port)) == []  # DeepSpeed's CPU all-reduce buffers went with the run
    assert base[-1] < base[0] + 0.05  # it trains (random tokens: the loss hovers near ln V)


def test_megatron_tp2_and_pp2_equal_world_size_1(store, runs_root):
    one = losses(one_process_megatron(store, runs_root))
    tp2 = run(store, runs_root, "tp2", plan(2, engine="megatron", tensor_parallel=2, global_batch_size=4), model=FOUR)
    pp2 = run(store, runs_root, "pp2", plan(2, engine="megatron", pipeline_parallel=2, global_batch_size=4),
              model=FOUR)
    assert losses(tp2) == pytest.approx(one, rel=1e-5, abs=1e-5)
    assert losses(pp2) == pytest.approx(one, rel=1e-5, abs=1e-5)
    rec = pp2.record()
    assert set(rec["measured"]["peak_memory_bytes"]) == {"0", "1"}
    assert rec["measured"]["median_step_seconds"] > 0
    assert (pp2.run_dir / "megatron_args.json").exists() and (pp2.run_dir / "launch.sh").exists()


def test_megatron_interleaved_pp2_vp2_equals_world_size_1(store, runs_root):
    """Interleaved 1F1B (4 layers, 2 stages x 2 virtual chunks, 4 micro-batches): the same losses as one process.
    With 2 stages the previous and the next stage are one peer; the exchange must not mix activations with
    gradients."""
    one = losses(one_process_megatron(store, runs_root))
    vp = run(store, runs_root, "vp2", plan(2, engine="megatron", pipeline_parallel=2, virtual_pipeline=2,
                                            global_batch_size=4), model=FOUR)
    assert losses(vp) == pytest.approx(one, rel=1e-5, abs=1e-5)
    args = json.loads((vp.run_dir / "megatron_args.json").read_text())
    assert args["virtual_pipeline_model_parallel_size"] == 2 and args["batch_p2p_comm"] is False


def test_hybrid_tp2_zero1_over_dp2_equals_world_size_1(store, runs_root):
    """4 processes: tensor parallel 2 × ZeRO-1 over data parallel 2, against DeepSpeed on one process."""
    one = losses(one_process_deepspeed(store, runs_root))
    hyb = run(store, runs_root, "hyb", plan(4, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1))
    assert losses(hyb) == pytest.approx(one, rel=1e-5, abs=1e-5)
    cfg = json.loads((hyb.run_dir / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["optimizer"]["params"]["torch_adam"] is True


def test_zero2_cpu_offload_matches_zero2(store, runs_root):
    """offload_optimizer=cpu (DeepSpeedCPUAdam, compiled once) against ZeRO-2 with torch's Adam."""
    ref = losses(shared(store, runs_root, "z2", plan(2, zero_stage=2)))
    off = losses(run(store, runs_root, "z2off", plan(2, zero_stage=2, offload_optimizer="cpu")))
    assert off == pytest.approx(ref, rel=1e-4, abs=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------------------------
def test_a_timeout_that_would_never_or_at_once_stop_the_run_is_refused(store, runs_root):
    for value, message in ((float("nan"), "timeout_seconds=nan must be a finite number"),
                           (-5, "timeout_seconds=-5 must be > 0")):
        with pytest.raises(ValueError, match=message):
            launch(TINY, cpu_cluster(1), plan(1), steps=1, nproc=1, store=store, run_dir=runs_root / "bad-timeout",
                   timeout_seconds=value)
        rec = store.list(limit=1)[0]
        assert rec["status"] == "invalid" and message in rec["reason"]


def test_cli_nproc_zero_is_refused(capsys):
    from workbench import cli

    assert cli.main(["run", "--tiny", "--steps", "1", "--nproc", "0"]) == 2
    assert capsys.readouterr().err == "workbench: error: --nproc 0 must be >= 1 (processes per node)\n"
    for limit in ("0", "-1"):  # SQL would read -1 as "no limit"
        assert cli.main(["runs", "list", "--limit", limit]) == 2
        assert capsys.readouterr().err == f"workbench: error: --limit {limit} must be >= 1\n"


def test_bad_config_is_refused_before_launch_and_recorded(store, runs_root):
    bad = plan(2, engine="megatron", tensor_parallel=2)
    with pytest.raises(ValueError, match="tensor_parallel=2 does not divide num_attention_heads=3"):
        launch(TINY.replace(num_attention_heads=3, head_dim=16), cpu_cluster(2), bad, steps=2, nproc=2,
               store=store, run_dir=runs_root / "bad")
    rec = store.list(limit=1)[0]
    assert rec["status"] == "invalid" and "num_attention_heads=3" in rec["reason"]
    with pytest.raises(ValueError, match="fp16"):
        launch(TINY, cpu_cluster(1), plan(1, precision="fp16"), steps=2, nproc=1, store=store)
    with pytest.raises(ValueError, match=r"nproc\(3\)"):
        launch(TINY, cpu_cluster(2), plan(2), steps=2, nproc=3, store=store)
    assert not (runs_root / "bad").exists()


def test_oom_on_cpu_memory_limit(store, runs_root):
    big = TINY.replace(vocab_size=50257, hidden_size=1024, num_attention_heads=8)
    r = run(store, runs_root, "oom", plan(1, engine="megatron"), model=big, memory_limit_bytes=64 * 2**20)
    rec = r.record()
    assert rec["status"] == "oom", (rec["reason"], r.log_tail(20))
    assert "rank 0 ran out of memory" in rec["reason"]
    assert "allocate" in r.log_tail(200)  # the log is kept
    assert_no_processes_left(r)


def _wait_for_step(r, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if r.progress()[0] >= 1 and len(r._tail.reports.started) >= r.world_size:
            return
        r.metrics()
        time.sleep(0.2)
    raise AssertionError("no step reported: " + r.log_tail(20))


def test_rank_killed(store, runs_root):
    r = run(store, runs_root, "rankkill", plan(2, engine="megatron"), steps=100000, wait=False)
    _wait_for_step(r)
    os.kill(r._tail.reports.started[1], signal.SIGKILL)
    assert r.wait(120) == "killed"
    rec = r.record()
    assert "rank 1" in rec["reason"] and "SIGKILL" in rec["reason"], rec["reason"]
    assert rec["measured"]["steps_completed"] >= 1
    assert_no_processes_left(r)


def test_timeout_and_stop(store, runs_root):
    r = run(store, runs_root, "timeout", plan(1, engine="megatron"), steps=100000, wait=False, timeout_seconds=8)
    assert r.wait(120) == "timeout"
    assert "timeout_seconds=8" in r.record()["reason"]
    assert_no_processes_left(r)
    s = run(store, runs_root, "stop", plan(1, engine="megatron"), steps=100000, wait=False)
    _wait_for_step(s)
    s.stop()
    assert s.wait(60) == "stopped"
    assert_no_processes_left(s)


def test_launcher_sigkilled_mid_run_keeps_finished_records(store, runs_root):
    finished = {r["run_id"]: r for r in store.list() if r["status"] == "completed"}
    r = run(store, runs_root, "lkill", plan(2, zero_stage=1), steps=100000, wait=False)
    _wait_for_step(r)
    os.kill(r.process.pid, signal.SIGKILL)
    assert r.wait(120) == "killed"
    assert "launcher killed by SIGKILL" in r.record()["reason"]
    assert_no_processes_left(r)
    after = {x["run_id"]: x for x in store.list()}
    for rid, rec in finished.items():
        assert after[rid] == rec
    assert len(store.metrics(r.run_id)) >= 2


# ---------------------------------------------------------------------------------------------------------------
# Exit classification (pure)
# ---------------------------------------------------------------------------------------------------------------
def test_nonzero_exit_after_all_ranks_done_is_completed_with_warning():
    reports = RankReports(started={0: 10, 1: 11}, done={0: {}, 1: {}})
    status, reason, warning = classify_exit(returncode=-6, world_size=2, reports=reports,
                                            log_text="terminate called without an active exception")
    assert (status, reason) == ("completed", "")
    assert "code -6 after all 2 ranks reported done" in warning
    status, reason, _ = classify_exit(returncode=1, world_size=2,
                                      reports=RankReports(started={0: 10, 1: 11}, done={0: {}}),
                                      log_text="exitcode  : -9 (pid: 11)")
    assert status == "killed" and reason.startswith("rank 1 (pid 11) killed by SIGKILL")
    # torchrun SIGTERMs the survivor, which may end before it writes its "terminated" record: the SIGKILLed rank
    # is still the cause, whatever the order of the failure report
    log = ("[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 11)\n"
           "[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 10)\n")
    for text in (log, "\n".join(reversed(log.splitlines()))):
        status, reason, _ = classify_exit(returncode=1, world_size=2,
                                          reports=RankReports(started={0: 10, 1: 11}), log_text=text)
        assert status == "killed" and reason.startswith("rank 1 (pid 11) killed by SIGKILL"), reason
    status, reason, _ = classify_exit(returncode=1, world_size=2, reports=RankReports(started={0: 10, 1: 11}),
                                      log_text="exitcode  : -15 (pid: 10)\nexitcode  : -15 (pid: 11)")
    assert reason.startswith("rank 0 (pid 10) killed by SIGTERM"), reason
    status, reason, _ = classify_exit(returncode=1, world_size=1, reports=RankReports(),
                                      log_text="ModuleNotFoundError: No module named 'x'")
    assert status == "failed" and "before any rank started: ModuleNotFoundError" in reason
