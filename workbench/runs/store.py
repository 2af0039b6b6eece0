"""The run store: an embedded SQLite database of launched runs and their per-step metrics.

Default path :func:`workbench.paths.store_path` (``WORKBENCH_STORE`` overrides). WAL journal, one short transaction
per write, a fresh connection per call with a busy timeout: several watcher threads and several processes (kernels,
CLI) write concurrently without corrupting it, and a killed writer loses no committed record.

Tables::

    runs(run_id, specs, command, status, reason, warning, started, ended, predicted, measured,
         log_path, run_dir, engine, steps, pgid, watcher_pid, watcher_started, token, master)
    metrics(run_id, rank, step, loss, step_seconds, tokens_per_second, memory_bytes)

``specs``, ``predicted`` and ``measured`` hold JSON text. ``status`` is one of :data:`STATUSES`. ``watcher_pid`` /
``watcher_started`` name the process following the run (pid and start time), ``token`` the run's processes
(:mod:`workbench.runs.processes`), ``master`` its rendezvous ``addr:port`` (which names its shared-memory buffers).
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Optional

from workbench import sqlitedb

STATUSES = ("running", "completed", "failed", "oom", "killed", "timeout", "stopped", "invalid")
FINAL = tuple(s for s in STATUSES if s != "running")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    specs       TEXT NOT NULL,
    command     TEXT,
    status      TEXT NOT NULL,
    reason      TEXT,
    warning     TEXT,
    started     REAL,
    ended       REAL,
    predicted   TEXT,
    measured    TEXT,
    log_path    TEXT,
    run_dir     TEXT,
    engine      TEXT,
    steps       INTEGER,
    pgid        INTEGER,
    watcher_pid INTEGER,
    watcher_started REAL,
    token       TEXT,
    master      TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id            TEXT NOT NULL,
    rank              INTEGER NOT NULL,
    step              INTEGER NOT NULL,
    loss              REAL,
    step_seconds      REAL,
    tokens_per_second REAL,
    memory_bytes      INTEGER,
    PRIMARY KEY (run_id, rank, step)
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started);
"""

_JSON_COLUMNS = ("specs", "predicted", "measured")
_RUN_COLUMNS = ("run_id", "specs", "command", "status", "reason", "warning", "started", "ended", "predicted",
                "measured", "log_path", "run_dir", "engine", "steps", "pgid", "watcher_pid", "watcher_started", "token",
                "master")
_ADDED_COLUMNS = {"watcher_started": "REAL", "token": "TEXT", "master": "TEXT"}
"""Columns later than the first schema, added to an older store file when it is opened."""
METRIC_COLUMNS = ("rank", "step", "loss", "step_seconds", "tokens_per_second", "memory_bytes")


class RunStore:
    """A handle on one store file (cheap: it holds only the path)."""

    def __init__(self, path=None):
        if path is None:
            from workbench.paths import store_path

            path = store_path()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with sqlitedb.reading(self.path) as conn:
            conn.executescript(_SCHEMA)
            have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
            for name, kind in _ADDED_COLUMNS.items():
                if name not in have:
                    with contextlib.suppress(sqlite3.OperationalError):  # another process added it first
                        conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")

    def _connect(self):
        return sqlitedb.reading(self.path)

    def _transaction(self):
        return sqlitedb.transaction(self.path)

    # -- writes ---------------------------------------------------------------------------------------------------
    def create(self, run_id: str, *, specs: dict, command: str, status: str = "running", reason: str = "",
               predicted: Optional[dict] = None, log_path: str = "", run_dir: str = "", engine: str = "",
               steps: int = 0, pgid: Optional[int] = None, started: Optional[float] = None, token: str = "",
               master: str = "") -> None:
        """A new record, watched by this process (its pid and start time are recorded)."""
        from workbench.runs.processes import process_started

        if status not in STATUSES:
            raise ValueError(f"status={status!r} is not one of {', '.join(STATUSES)}")
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, specs, command, status, reason, started, predicted, log_path, run_dir,"
                " engine, steps, pgid, watcher_pid, watcher_started, token, master)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, json.dumps(specs), command, status, reason, started or time.time(),
                 json.dumps(predicted) if predicted is not None else None, log_path, run_dir, engine, steps, pgid,
                 os.getpid(), process_started(os.getpid()), token or None, master or None))

    def update(self, run_id: str, **fields) -> None:
        unknown = set(fields) - set(_RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run field(s): {', '.join(sorted(unknown))}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"status={fields['status']!r} is not one of {', '.join(STATUSES)}")
        values = [json.dumps(v) if k in _JSON_COLUMNS and v is not None else v for k, v in fields.items()]
        with self._transaction() as conn:
            conn.execute(f"UPDATE runs SET {', '.join(k + '=?' for k in fields)} WHERE run_id=?",
                         (*values, run_id))

    def finish(self, run_id: str, *, status: str, reason: str = "", warning: str = "",
               measured: Optional[dict] = None) -> None:
        """Final status; a run already final keeps its first final status."""
        if status not in FINAL:
            raise ValueError(f"status={status!r} is not a final status ({', '.join(FINAL)})")
        with self._transaction() as conn:
            conn.execute("UPDATE runs SET status=?, reason=?, warning=?, ended=?, measured=? "
                         "WHERE run_id=? AND status='running'",
                         (status, reason, warning, time.time(),
                          json.dumps(measured) if measured is not None else None, run_id))

    def add_metrics(self, run_id: str, rows: Iterable[dict]) -> int:
        rows = [tuple(r.get(c) for c in METRIC_COLUMNS) for r in rows]
        if not rows:
            return 0
        with self._transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO metrics (run_id, rank, step, loss, step_seconds, "
                             "tokens_per_second, memory_bytes) VALUES (?,?,?,?,?,?,?)",
                             [(run_id, *r) for r in rows])
        return len(rows)

    # -- reads ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _row(cursor, row) -> dict:
        out = {d[0]: v for d, v in zip(cursor.description, row)}
        for k in _JSON_COLUMNS:
            if k in out and out[k] is not None:
                out[k] = json.loads(out[k])
        return out

    def get(self, run_id: str) -> dict:
        """The run's record (``ValueError`` when unknown)."""
        with self._connect() as conn:
            cur = conn.execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE run_id=?", (run_id,))
            row = cur.fetchone()
            if row is None:
                raise ValueError(f"unknown run_id={run_id!r} in run store {self.path}")
            return self._row(cur, row)

    def list(self, limit: Optional[int] = None, *, invalid: bool = True) -> list[dict]:
        """All runs, newest first; ``invalid=False`` leaves out runs refused before anything started."""
        with self._connect() as conn:
            where = "" if invalid else " WHERE status != 'invalid'"
            sql = f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs{where} ORDER BY started DESC"
            cur = conn.execute(sql + (f" LIMIT {int(limit)}" if limit else ""))
            return [self._row(cur, r) for r in cur.fetchall()]

    def count(self, status: str) -> int:
        """How many runs ended (or are) ``status``."""
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM runs WHERE status=?", (status,)).fetchone()[0]

    def metrics(self, run_id: str) -> list[dict]:
        """Per-step metrics, ordered by step then rank."""
        with self._connect() as conn:
            cur = conn.execute(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics WHERE run_id=? "
                               "ORDER BY step, rank", (run_id,))
            return [dict(zip(METRIC_COLUMNS, r)) for r in cur.fetchall()]

    def reconcile(self) -> list[str]:
        """Close runs left ``running`` by a watcher that no longer exists (a killed kernel; a reused pid does not
        count as alive: its start time differs). The run's own processes, found by the token in their environment
        (never by a recorded process id alone), are killed, its DeepSpeed shared-memory buffers removed, and the
        record ends ``killed`` with the reason. Returns the run ids closed."""
        from workbench.runs.processes import kill_run, process_started, remove_shm_buffers, same_process

        closed = []
        for rec in self.list():
            if rec["status"] != "running":
                continue
            watcher, watcher_started = rec.get("watcher_pid"), rec.get("watcher_started")
            if (same_process(watcher, watcher_started) if watcher_started is not None
                    else process_started(watcher) is not None):
                continue
            signalled = kill_run(rec.get("token") or "")
            addr, _, port = (rec.get("master") or "").rpartition(":")
            remove_shm_buffers(addr, int(port) if port.isdigit() else 0)
            if signalled:
                what = f"its {len(signalled)} remaining process(es) were killed"
            elif rec.get("token"):
                what = "none of its processes was left"
            else:
                what = "its processes were not signalled (the record predates process tokens)"
            self.finish(rec["run_id"], status="killed",
                        reason=f"the process watching this run (pid {watcher}) exited before the run finished; "
                               f"{what}")
            closed.append(rec["run_id"])
        return closed
