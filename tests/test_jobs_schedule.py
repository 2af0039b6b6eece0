"""Jobs file, cron fire times, and which jobs ``run-due`` picks at a given time."""
from datetime import datetime, timezone
from pathlib import Path

import pytest

from workbench.jobs.schedule import (cron_trigger, decide, due, latest_fire_time, load_jobs, next_fire_time)
from workbench.jobs.store import JobStore
from jobs_support import NB, home, wb  # noqa: F401  (home: autouse fixture)

UTC = timezone.utc


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


JOBS = f"""
jobs:
  - name: hourly
    notebook: {NB / 'params.ipynb'}
    parameters: {{x: 3}}
    cron: "0 * * * *"
  - name: nightly
    notebook: {NB / 'params.ipynb'}
    cron: "30 2 * * *"
  - name: weekly
    notebook: {NB / 'params.ipynb'}
    cron: "0 6 * * mon"
  - name: weekly-strict
    notebook: {NB / 'params.ipynb'}
    cron: "0 6 * * mon"
    misfire_grace_time: 3600
  - name: never-run
    notebook: {NB / 'params.ipynb'}
    cron: "*/15 * * * *"
"""


def settle(store, job, when, status="ok"):
    run_id = store.claim_fire_time(job, t(when), "schedule", only_if_after_last=False)
    if status != "running":
        store.finish_job_run(run_id, status=status, notebook_run_id=None)


def test_fire_times_from_cron():
    hourly = cron_trigger("0 * * * *")
    assert latest_fire_time(hourly, t("2026-11-04T03:10:00")) == t("2026-11-04T03:00:00")
    assert latest_fire_time(hourly, t("2026-11-04T03:00:00")) == t("2026-11-04T03:00:00")  # inclusive
    assert next_fire_time(hourly, t("2026-11-04T03:00:00")) == t("2026-11-04T04:00:00")  # strictly after
    monday = cron_trigger("0 6 * * mon")
    assert latest_fire_time(monday, t("2026-11-04T03:10:00")) == t("2026-11-02T06:00:00")  # Nov 2 2026 is a Monday
    yearly = cron_trigger("0 0 1 1 *")
    assert latest_fire_time(yearly, t("2026-11-04T03:10:00")) == t("2026-01-01T00:00:00")
    seconds = cron_trigger("*/20 * * * * *")  # six fields: seconds first
    assert latest_fire_time(seconds, t("2026-11-04T03:10:59")) == t("2026-11-04T03:10:40")


def test_cron_errors_are_clear():
    with pytest.raises(ValueError, match="has 3 fields"):
        cron_trigger("* * *")
    with pytest.raises(ValueError, match="day-of-week with names"):
        cron_trigger("0 6 * * 1")
    with pytest.raises(ValueError, match="cron '99 \\* \\* \\* \\*'"):
        cron_trigger("99 * * * *")


def test_run_due_picks_the_right_jobs(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    jobs = load_jobs(path)
    store = JobStore()
    settle(store, "hourly", "2026-11-04T02:00:00")
    settle(store, "hourly", "2026-11-04T03:00:00", status="running")
    store.recover_interrupted()  # this process is alive: its running row stays running
    settle(store, "nightly", "2026-11-04T02:30:00", status="failed")  # failed still settles the fire time
    settle(store, "weekly", "2026-10-26T06:00:00")
    settle(store, "weekly-strict", "2026-10-26T06:00:00")
    at = t("2026-11-04T03:10:00")
    got = {d.job: (d.action, d.fire_time) for d in due(jobs, store, at)}
    assert got == {
        "hourly": ("wait", None),                                  # 03:00 is running
        "nightly": ("wait", None),                                 # 02:30 ran (failed) today
        "weekly": ("run", t("2026-11-02T06:00:00")),               # last Monday's run is late: run it once
        "weekly-strict": ("missed", t("2026-11-02T06:00:00")),     # ... unless later than misfire_grace_time
        "never-run": ("run", t("2026-11-04T03:00:00")),
    }
    # An hour later the hourly job is due again, for 04:00 only (03:xx coalesced).
    assert decide(jobs[0], t("2026-11-04T03:00:00"), t("2026-11-04T04:59:00")).fire_time == t("2026-11-04T04:00:00")


def test_interrupted_does_not_settle_a_fire_time(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    store = JobStore()
    settle(store, "hourly", "2026-11-04T03:00:00", status="interrupted")
    assert store.last_accounted("hourly") is None
    (hourly,) = [d for d in due(load_jobs(path), store, t("2026-11-04T03:10:00")) if d.job == "hourly"]
    assert hourly.action == "run" and hourly.fire_time == t("2026-11-04T03:00:00")


def test_run_due_dry_run_cli(tmp_path, capsys):
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    settle(JobStore(), "nightly", "2026-11-04T02:30:00")
    assert wb("jobs", "run-due", "--jobs", path, "--at", "2026-11-04T03:10:00Z", "--dry-run") == 0
    lines = {line.split()[1]: line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert lines == {"hourly": "due", "nightly": "wait", "weekly": "due", "weekly-strict": "missed",
                     "never-run": "due"}
    assert JobStore().job_runs("hourly") == []  # dry run records nothing


def test_jobs_file_errors(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  - name: a\n    notebook: {NB / 'params.ipynb'}\n    cron: '0 * * * *'\n"
                    f"    parameters: {{x: 1.5}}\n")
    with pytest.raises(ValueError, match="job a: parameter x expects int, got 1.5"):
        load_jobs(path)
    path.write_text("jobs:\n  - name: a\n    notebook: missing.ipynb\n    cron: '0 * * * *'\n")
    with pytest.raises(ValueError, match="job a: notebook missing.ipynb not found"):
        load_jobs(path)
    path.write_text(f"jobs:\n  - name: a\n    notebook: {NB / 'params.ipynb'}\n    cron: '0 * * * *'\n    when: 1\n")
    with pytest.raises(ValueError, match="unknown field"):
        load_jobs(path)


def test_run_due_runs_once_then_waits(tmp_path, capsys):
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  - name: calc\n    notebook: {NB / 'params.ipynb'}\n    parameters: {{x: 4}}\n"
                    f"    cron: '*/5 * * * *'\n")
    at = "2026-11-04T03:12:00Z"
    assert wb("jobs", "run-due", "--jobs", path, "--at", at) == 0
    assert "ok      calc" in capsys.readouterr().out
    assert wb("jobs", "run-due", "--jobs", path, "--at", at) == 0
    assert capsys.readouterr().out.startswith("wait")
    (row,) = JobStore().job_runs("calc")
    assert (row.status, row.scheduled_for, row.trigger) == ("ok", "2026-11-04T03:10:00.000000+00:00", "run-due")
    (nb_row,) = JobStore().notebook_runs()
    assert nb_row["id"] == row.notebook_run_id and nb_row["results"]["y"] == 6.0 and nb_row["job_run_id"] == row.id


def test_manual_run_retries_a_failing_job(tmp_path, capsys):
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  - name: flaky\n    notebook: {NB / 'fail.ipynb'}\n    cron: '0 0 * * *'\n"
                    f"    retries: 1\n")
    assert wb("jobs", "run", "flaky", "--jobs", path) == 1
    rows = JobStore().job_runs("flaky")
    assert [(r.attempt, r.status, r.trigger) for r in rows] == [(1, "failed", "manual"), (2, "failed", "manual")]
    assert "ValueError: bad n=1" in capsys.readouterr().out


def test_example_jobs_file_is_valid():
    jobs = load_jobs(Path(__file__).resolve().parents[1] / "examples" / "jobs.yaml")
    assert [j.name for j in jobs] == ["llama3-8b-params", "weekly-gpt3-sizes"]
    assert jobs[0].parameters["expected_total"] == 8030261248 and jobs[1].misfire_grace_seconds == 86400
