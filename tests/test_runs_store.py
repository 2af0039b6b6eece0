import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from workbench.runs.store import RunStore


def _writer(path, prefix, n):
    store = RunStore(path)
    for i in range(n):
        rid = f"{prefix}-{i}"
        store.create(rid, specs={"i": i}, command="x", engine="deepspeed", steps=3)
        store.add_metrics(rid, [{"rank": 0, "step": s, "loss": 1.0 / (s + 1), "step_seconds": 0.1,
                                 "tokens_per_second": 10.0, "memory_bytes": 100} for s in range(3)])
        store.finish(rid, status="completed", measured={"median_step_seconds": 0.1})


def test_create_update_finish_roundtrip(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.create("a", specs={"model": {"num_layers": 2}}, command="deepspeed x", predicted={"per_gpu_peak_bytes": 5},
                 engine="deepspeed", steps=4)
    assert store.get("a")["status"] == "running"
    store.add_metrics("a", [{"rank": 1, "step": 0, "loss": 2.5, "step_seconds": 0.5, "tokens_per_second": 64.0,
                             "memory_bytes": 10}])
    store.finish("a", status="oom", reason="rank 1 ran out of memory", measured={"steps_completed": 1})
    rec = store.get("a")
    assert rec["status"] == "oom" and rec["reason"].startswith("rank 1")
    assert rec["predicted"] == {"per_gpu_peak_bytes": 5} and rec["measured"] == {"steps_completed": 1}
    assert rec["ended"] >= rec["started"]
    # a final status is not overwritten
    store.finish("a", status="completed")
    assert store.get("a")["status"] == "oom"
    assert store.metrics("a") == [{"rank": 1, "step": 0, "loss": 2.5, "step_seconds": 0.5,
                                   "tokens_per_second": 64.0, "memory_bytes": 10}]
    with pytest.raises(ValueError, match="unknown run_id='b'"):
        store.get("b")
    with pytest.raises(ValueError, match="status='weird'"):
        store.finish("a", status="weird")


def test_concurrent_writers_from_processes(tmp_path):
    path = tmp_path / "s.sqlite"
    RunStore(path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, f"p{k}", 15)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = RunStore(path)
    runs = store.list()
    assert len(runs) == 45 and all(r["status"] == "completed" for r in runs)
    assert all(len(store.metrics(r["run_id"])) == 3 for r in runs)


def test_killed_writer_loses_no_committed_record_and_reconcile_closes_orphans(tmp_path):
    path = tmp_path / "s.sqlite"
    store = RunStore(path)
    store.create("done", specs={}, command="c")
    store.finish("done", status="completed", measured={"losses": [1.0]})
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from workbench.runs.store import RunStore\n"
            "s = RunStore(%r); s.create('left', specs={}, command='c', pgid=None)\n"
            "print('ready', flush=True); time.sleep(60)\n") % (os.getcwd(), str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.kill()
    proc.wait()
    assert store.get("left")["status"] == "running"
    assert store.reconcile() == ["left"]
    left = store.get("left")
    assert left["status"] == "killed" and "exited before the run finished" in left["reason"]
    assert store.get("done")["measured"] == {"losses": [1.0]}


def test_runs_list_hides_runs_refused_before_starting_unless_all(tmp_path, monkeypatch, capsys):
    import json

    from workbench import cli

    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "s.sqlite"))
    store = RunStore(tmp_path / "s.sqlite")
    store.create("ok", specs={}, command="x", engine="deepspeed", steps=3)
    store.finish("ok", status="completed")
    for rid in ("typo-1", "typo-2"):  # what launch() records for a plan validation refuses
        store.create(rid, specs={}, command="", status="invalid", reason="tensor_parallel=3 does not divide 8",
                     engine="megatron", steps=3)
    assert [r["run_id"] for r in store.list(invalid=False)] == ["ok"] and store.count("invalid") == 2
    assert cli.main(["runs", "list"]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "typo" not in out and "(2 runs refused before starting not listed; --all lists them)" in out
    assert cli.main(["runs", "list", "--all"]) == 0
    out = capsys.readouterr().out
    assert "typo-1" in out and "typo-2" in out and "not listed" not in out
    assert cli.main(["runs", "list", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["ok"]
    assert cli.main(["runs", "show", "typo-1", "--json"]) == 0  # still kept: its reason can be looked up
    assert json.loads(capsys.readouterr().out)["status"] == "invalid"
