"""``workbench jobs serve``: APScheduler with a persistent SQLite job store; killed mid-job and restarted; the
per-job concurrency limit."""
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest

from workbench.jobs import schedule
from workbench.jobs.store import JobStore

NB = Path(__file__).parent / "data" / "notebooks"
ROOT = Path(__file__).resolve().parents[1]
# ``workbench ARGV`` with the subcommands this checkout has.
CLI = ("import sys, importlib.util; from workbench import cli; "
       "cli.COMMANDS[:] = [c for c in cli.COMMANDS if importlib.util.find_spec('workbench.commands.' + c)]; "
       "sys.exit(cli.main(sys.argv[1:]))")

pytestmark = pytest.mark.slow


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "home" / "runs.sqlite"))
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    return e


def wait_for(predicate, timeout_seconds: float, what: str):
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_seconds} s waiting for {what}")


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_serve(jobs_file, env, log):
    return subprocess.Popen([sys.executable, "-c", CLI, "jobs", "serve", "--jobs", str(jobs_file)], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_killed_serve_restarts_consistent_and_runs_the_interrupted_fire_time_once(tmp_path, env):
    pid_file = tmp_path / "kernel.pid"
    # Fires once a minute, at a second a few seconds from now (6-field cron, seconds first).
    second = (datetime.now(timezone.utc).second + 8) % 60
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(f"jobs:\n  - name: tick\n    notebook: {NB / 'sleep.ipynb'}\n"
                         f"    parameters: {{seconds: 2.0, pid_file: '{pid_file}'}}\n"
                         f"    cron: '{second} * * * * *'\n    timeout: 60\n")
    store = JobStore()
    log = open(tmp_path / "serve.log", "wb")
    first = start_serve(jobs_file, env, log)
    try:
        wait_for(pid_file.exists, 90, "the job's kernel to start")
        kernel_pid = int(pid_file.read_text())
        (running,) = store.job_runs("tick")
        assert running.status == "running"
        os.killpg(first.pid, signal.SIGKILL)  # kill serve's whole process group mid-job
        first.wait()
        (nb_row,) = store.notebook_runs()
        wait_for(lambda: dead(kernel_pid) and dead(nb_row["worker_pid"]), 10, "worker and kernel to exit")
        assert [r.status for r in store.job_runs("tick")] == ["running"]  # left behind by the killed serve
        pid_file.unlink()

        second_serve = start_serve(jobs_file, env, log)
        try:
            wait_for(lambda: any(r.status == "ok" for r in store.job_runs("tick")), 60, "the re-run to finish")
        finally:
            second_serve.send_signal(signal.SIGTERM)
            assert second_serve.wait(30) == 0
    finally:
        for proc in (first,):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()

    rows = store.job_runs("tick")
    assert [(r.status, r.trigger, r.scheduled_for) for r in rows] == [
        ("interrupted", "schedule", running.scheduled_for),
        ("ok", "recovery", running.scheduled_for),  # the same fire time, run once more, not twice
    ]
    assert [r["status"] for r in store.notebook_runs()] == ["interrupted", "ok"]
    con = sqlite3.connect(store.path)
    stored = [r[0] for r in con.execute("SELECT id FROM apscheduler_jobs")]
    (next_run,) = [r[0] for r in con.execute("SELECT next_run_time FROM apscheduler_jobs WHERE id = 'tick'")]
    con.close()
    assert stored == ["tick"]  # the one-off recovery job is gone; the cron job persists
    assert next_run > datetime.fromisoformat(running.scheduled_for).timestamp()


def test_concurrency_limit_holds_and_extra_fires_are_recorded(tmp_path, env):
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(f"jobs:\n  - name: busy\n    notebook: {NB / 'sleep.ipynb'}\n"
                         f"    parameters: {{seconds: 3.0}}\n    cron: '* * * * * *'\n    max_concurrency: 1\n")
    store = JobStore()
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=schedule.serve, args=(jobs_file,),
                              kwargs=dict(workers=2, store=store, stop_event=stop, ready=ready))
    thread.start()
    try:
        wait_for(lambda: any(r.status == "ok" for r in store.job_runs("busy")), 60, "one run to finish")
    finally:
        stop.set()
        thread.join(60)
    rows = store.job_runs("busy")
    assert not [r for r in rows if r.status == "running"]
    assert any(r.status == "skipped" for r in rows)  # fires while busy were recorded, not queued or lost
    runs = store.notebook_runs()
    spans = sorted((r["started_at"], r["finished_at"]) for r in runs)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start  # never two at once


def serve_in_thread(jobs_file, store):
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=schedule.serve, args=(jobs_file,),
                              kwargs=dict(workers=2, store=store, stop_event=stop, ready=ready))
    thread.start()
    wait_for(lambda: ready.is_set() or not thread.is_alive(), 30, "serve to start")
    assert ready.is_set(), "serve stopped while starting"
    return stop, thread


def test_fire_time_missed_while_down_runs_once_or_is_recorded_missed(tmp_path, env):
    now = datetime.now(timezone.utc)
    second = (now.second + 6) % 60
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(
        f"jobs:\n  - name: late\n    notebook: {NB / 'params.ipynb'}\n    cron: '{second} * * * * *'\n"
        f"  - name: strict\n    notebook: {NB / 'params.ipynb'}\n    cron: '{second} * * * * *'\n"
        f"    misfire_grace_time: 1\n")
    store = JobStore()
    stop, thread = serve_in_thread(jobs_file, store)  # registers both jobs in the persistent job store
    stop.set()
    thread.join(30)
    fire_at = schedule.next_fire_time(schedule.cron_trigger(f"{second} * * * * *"), now)
    time.sleep(max(0.0, (fire_at - datetime.now(timezone.utc)).total_seconds()) + 3)  # down over the fire time
    assert store.job_runs() == []

    stop, thread = serve_in_thread(jobs_file, store)
    try:
        wait_for(lambda: any(r.status == "ok" for r in store.job_runs("late")), 60, "the catch-up run")
    finally:
        stop.set()
        thread.join(60)
    stop, thread = serve_in_thread(jobs_file, store)  # a further restart repeats nothing
    time.sleep(1.5)
    stop.set()
    thread.join(60)
    assert [(r.status, r.scheduled_for) for r in store.job_runs("late")] == [("ok", schedule.iso(fire_at))]
    assert [(r.status, r.scheduled_for) for r in store.job_runs("strict")] == [("missed", schedule.iso(fire_at))]
