"""Run store tables for headless notebook runs and scheduled jobs.

They live in the workbench's SQLite run store (``workbench.paths.store_path()``), next to the training-run tables,
in two tables of their own:

- ``notebook_runs``: one row per papermill execution (parameters, status, duration, recorded results, report paths).
- ``job_runs``: one row per attempt of a scheduled job at one fire time (``scheduled_for``), pointing at the
  ``notebook_runs`` row that carried it out. ``missed`` and ``skipped`` rows have no notebook run.

Every write is one short transaction (``BEGIN IMMEDIATE``) on a WAL-mode database, so several processes (``serve``,
``run-due`` from cron, ``nb run``) can share the file. A row is ``running`` only while the process named in
``owner_pid`` (with its start time ``owner_started``) is alive; :meth:`JobStore.recover_interrupted` turns rows
whose owner has died (a killed ``serve``) into ``interrupted``.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from workbench import paths, sqlitedb

NOTEBOOK_STATUSES = ("running", "ok", "failed", "timeout", "interrupted")
JOB_STATUSES = ("running", "ok", "failed", "timeout", "interrupted", "missed", "skipped")
# Statuses that settle a fire time: it is not run again by ``run-due`` or the scheduler. ``interrupted`` does not.
ACCOUNTED_STATUSES = ("running", "ok", "failed", "timeout", "missed", "skipped")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS notebook_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notebook TEXT NOT NULL,
    parameters_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {NOTEBOOK_STATUSES}),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    duration_seconds REAL,
    output_dir TEXT,
    executed_path TEXT,
    html_path TEXT,
    results_json TEXT,
    error TEXT,
    sweep TEXT,
    job_run_id INTEGER,
    worker_pid INTEGER,
    owner_pid INTEGER NOT NULL,
    owner_started REAL NOT NULL,
    owner_host TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS notebook_runs_sweep ON notebook_runs (sweep);
CREATE TABLE IF NOT EXISTS job_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    scheduled_for TEXT NOT NULL,
    trigger TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN {JOB_STATUSES}),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    notebook_run_id INTEGER REFERENCES notebook_runs (id),
    error TEXT,
    owner_pid INTEGER NOT NULL,
    owner_started REAL NOT NULL,
    owner_host TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_runs_job_time ON job_runs (job, scheduled_for);
"""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    """Fixed-width ISO 8601 in UTC (sorts as text): ``2026-11-01T02:00:00.000000+00:00``."""
    if t.tzinfo is None:
        raise ValueError(f"time {t} has no time zone")
    return t.astimezone(timezone.utc).isoformat(timespec="microseconds")


def parse_time(text: str) -> datetime:
    """ISO 8601 → aware UTC datetime; a time without zone is taken as UTC (``Z`` suffix accepted)."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time {text!r} is not ISO 8601 (e.g. 2026-11-01T02:00:00Z)") from None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _process_started(pid: int) -> float | None:
    """Start time (epoch seconds) of process ``pid``, or None when it does not exist (zombies count as gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _owner() -> tuple[int, float, str]:
    pid = os.getpid()
    return pid, _process_started(pid) or time.time(), socket.gethostname()


def owner_alive(pid: int, started: float, host: str) -> bool:
    """Whether the process that wrote a row still runs. Rows from other hosts are assumed alive."""
    if host != socket.gethostname():
        return True
    now_started = _process_started(pid)
    return now_started is not None and abs(now_started - started) < 1.0


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRunRow:
    id: int
    job: str
    scheduled_for: str
    trigger: str
    attempt: int
    status: str
    started_at: str
    finished_at: str | None
    notebook_run_id: int | None
    error: str | None


class JobStore:
    """The ``notebook_runs`` and ``job_runs`` tables in the run store at ``path`` (default ``store_path()``)."""

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else paths.store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with sqlitedb.reading(self.path) as con:
            con.executescript(_SCHEMA)

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        return sqlitedb.connect(self.path, row_factory=sqlite3.Row)

    def _write(self):
        """One write transaction, taken before reading so check-then-insert is atomic across processes."""
        return sqlitedb.transaction(self.path, row_factory=sqlite3.Row)

    def _read(self, sql: str, args=()) -> list[sqlite3.Row]:
        with sqlitedb.reading(self.path, row_factory=sqlite3.Row) as con:
            return con.execute(sql, args).fetchall()

    # -- notebook runs -----------------------------------------------------------------------------------------
    def start_notebook_run(self, *, notebook: str, parameters: dict, started_at: datetime, output_dir: str,
                           sweep: str | None = None, job_run_id: int | None = None) -> int:
        pid, started, host = _owner()
        with self._write() as con:
            cur = con.execute(
                "INSERT INTO notebook_runs (notebook, parameters_json, status, started_at, output_dir, sweep,"
                " job_run_id, owner_pid, owner_started, owner_host) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (notebook, json.dumps(parameters), iso(started_at), output_dir, sweep, job_run_id, pid, started, host))
            return int(cur.lastrowid)

    def set_worker_pid(self, run_id: int, worker_pid: int) -> None:
        with self._write() as con:
            con.execute("UPDATE notebook_runs SET worker_pid = ? WHERE id = ?", (worker_pid, run_id))

    def finish_notebook_run(self, run_id: int, *, status: str, finished_at: datetime, duration_seconds: float,
                            executed_path: str | None, html_path: str | None, results: dict,
                            error: str | None) -> None:
        if status not in NOTEBOOK_STATUSES[1:]:
            raise ValueError(f"status={status!r} is not one of {NOTEBOOK_STATUSES[1:]}")
        with self._write() as con:
            con.execute(
                "UPDATE notebook_runs SET status = ?, finished_at = ?, duration_seconds = ?, executed_path = ?,"
                " html_path = ?, results_json = ?, error = ? WHERE id = ?",
                (status, iso(finished_at), duration_seconds, executed_path, html_path, json.dumps(results), error,
                 run_id))

    def notebook_runs(self, *, sweep: str | None = None, run_ids=None) -> list[dict]:
        """Notebook runs as dicts (``parameters`` and ``results`` decoded), oldest first."""
        sql, args = "SELECT * FROM notebook_runs", []
        if sweep is not None:
            sql, args = sql + " WHERE sweep = ?", [sweep]
        elif run_ids is not None:
            ids = [int(i) for i in run_ids]
            sql, args = sql + f" WHERE id IN ({','.join('?' * len(ids))})", ids
        out = []
        for row in self._read(sql + " ORDER BY id", args):
            item = dict(row)
            item["parameters"] = json.loads(item.pop("parameters_json"))
            item["results"] = json.loads(item.pop("results_json") or "{}")
            out.append(item)
        return out

    # -- job runs ----------------------------------------------------------------------------------------------
    def claim_fire_time(self, job: str, scheduled_for: datetime, trigger: str, *,
                        only_if_after_last: bool = True) -> int | None:
        """Insert a ``running`` attempt-1 row for ``job`` at ``scheduled_for`` and return its id — or None when
        that fire time is already settled (a run at or after it is running, finished, missed or skipped). The
        check and the insert are one transaction, so two schedulers never both run one fire time."""
        pid, started, host = _owner()
        with self._write() as con:
            if only_if_after_last:
                last = self._last_accounted(con, job)
                if last is not None and last >= iso(scheduled_for):
                    return None
            cur = con.execute(
                "INSERT INTO job_runs (job, scheduled_for, trigger, attempt, status, started_at, owner_pid,"
                " owner_started, owner_host) VALUES (?, ?, ?, 1, 'running', ?, ?, ?, ?)",
                (job, iso(scheduled_for), trigger, iso(utc_now()), pid, started, host))
            return int(cur.lastrowid)

    def add_attempt(self, job: str, scheduled_for: str, trigger: str, attempt: int) -> int:
        pid, started, host = _owner()
        with self._write() as con:
            cur = con.execute(
                "INSERT INTO job_runs (job, scheduled_for, trigger, attempt, status, started_at, owner_pid,"
                " owner_started, owner_host) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (job, scheduled_for, trigger, attempt, iso(utc_now()), pid, started, host))
            return int(cur.lastrowid)

    def finish_job_run(self, job_run_id: int, *, status: str, notebook_run_id: int | None,
                       error: str | None = None) -> None:
        if status not in JOB_STATUSES[1:]:
            raise ValueError(f"status={status!r} is not one of {JOB_STATUSES[1:]}")
        with self._write() as con:
            con.execute("UPDATE job_runs SET status = ?, finished_at = ?, notebook_run_id = ?, error = ?"
                        " WHERE id = ?", (status, iso(utc_now()), notebook_run_id, error, job_run_id))

    def record_unrun(self, job: str, scheduled_for: datetime, status: str, reason: str, trigger: str) -> int | None:
        """Record a fire time that was not run (``missed``: later than the misfire grace; ``skipped``: the job's
        concurrency limit was reached). Returns None when that fire time is already settled."""
        if status not in ("missed", "skipped"):
            raise ValueError(f"status={status!r} must be 'missed' or 'skipped'")
        pid, started, host = _owner()
        now = iso(utc_now())
        with self._write() as con:
            exists = con.execute(
                f"SELECT 1 FROM job_runs WHERE job = ? AND scheduled_for = ? AND status IN {ACCOUNTED_STATUSES}",
                (job, iso(scheduled_for))).fetchone()
            if exists:
                return None
            cur = con.execute(
                "INSERT INTO job_runs (job, scheduled_for, trigger, attempt, status, started_at, finished_at, error,"
                " owner_pid, owner_started, owner_host) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)",
                (job, iso(scheduled_for), trigger, status, now, now, reason, pid, started, host))
            return int(cur.lastrowid)

    @staticmethod
    def _last_accounted(con, job: str) -> str | None:
        row = con.execute(f"SELECT MAX(scheduled_for) FROM job_runs WHERE job = ? AND status IN {ACCOUNTED_STATUSES}",
                          (job,)).fetchone()
        return row[0]

    def last_accounted(self, job: str) -> datetime | None:
        """The latest fire time of ``job`` that is settled (see ``ACCOUNTED_STATUSES``)."""
        con = self._connect()
        try:
            text = self._last_accounted(con, job)
        finally:
            con.close()
        return parse_time(text) if text else None

    def job_runs(self, job: str | None = None) -> list[JobRunRow]:
        sql, args = "SELECT * FROM job_runs", ()
        if job is not None:
            sql, args = sql + " WHERE job = ?", (job,)
        return [JobRunRow(**{k: row[k] for k in JobRunRow.__slots__}) for row in self._read(sql + " ORDER BY id", args)]

    # -- recovery ----------------------------------------------------------------------------------------------
    def recover_interrupted(self) -> list[JobRunRow]:
        """Mark ``running`` rows whose owner process has exited as ``interrupted`` (both tables). Returns the job
        rows so marked."""
        now = iso(utc_now())
        marked = []
        with self._write() as con:
            for table in ("notebook_runs", "job_runs"):
                rows = con.execute(f"SELECT * FROM {table} WHERE status = 'running'").fetchall()
                for row in rows:
                    if owner_alive(row["owner_pid"], row["owner_started"], row["owner_host"]):
                        continue
                    con.execute(f"UPDATE {table} SET status = 'interrupted', finished_at = ?, error = ? WHERE id = ?",
                                (now, f"the process that ran it (pid {row['owner_pid']}) exited", row["id"]))
                    if table == "job_runs":
                        marked.append(row["id"])
        return [r for r in self.job_runs() if r.id in set(marked)]
