"""The run store: an embedded SQLite database of launched runs and their per-step metrics.

Default path :func:`workbench.paths.store_path` (``WORKBENCH_STORE`` overrides). WAL journal, one short transaction
per write, a fresh connection per call with a busy timeout: several watcher threads and several processes (kernels,
CLI) write concurrently without corrupting it, and a killed writer loses no committed record.

Tables::

    runs(run_id, specs, command, status, reason, warning, started, ended, predicted, measured,
         log_path, run_dir, engine, steps, pgid, watcher_pid)
    metrics(run_id, rank, step, loss, step_seconds, tokens_per_second, memory_bytes)

``specs``, ``predicted`` and ``measured`` hold JSON text. ``status`` is one of :data:`STATUSES`.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Optional

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
    watcher_pid INTEGER
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
                "measured", "log_path", "run_dir", "engine", "steps", "pgid", "watcher_pid")
METRIC_COLUMNS = ("rank", "step", "loss", "step_seconds", "tokens_per_second", "memory_bytes")


def _pid_alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunStore:
    """A handle on one store file (cheap: it holds only the path)."""

    def __init__(self, path=None):
        if path is None:
            from workbench.paths import store_path

            path = store_path()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self):
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _transaction(self):
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- writes ---------------------------------------------------------------------------------------------------
    def create(self, run_id: str, *, specs: dict, command: str, status: str = "running", reason: str = "",
               predicted: Optional[dict] = None, log_path: str = "", run_dir: str = "", engine: str = "",
               steps: int = 0, pgid: Optional[int] = None, started: Optional[float] = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"status={status!r} is not one of {', '.join(STATUSES)}")
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, specs, command, status, reason, started, predicted, log_path, run_dir,"
                " engine, steps, pgid, watcher_pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, json.dumps(specs), command, status, reason, started or time.time(),
                 json.dumps(predicted) if predicted is not None else None, log_path, run_dir, engine, steps, pgid,
                 os.getpid()))

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

    def list(self, limit: Optional[int] = None) -> list[dict]:
        """All runs, newest first."""
        with self._connect() as conn:
            sql = f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY started DESC"
            cur = conn.execute(sql + (f" LIMIT {int(limit)}" if limit else ""))
            return [self._row(cur, r) for r in cur.fetchall()]

    def metrics(self, run_id: str) -> list[dict]:
        """Per-step metrics, ordered by step then rank."""
        with self._connect() as conn:
            cur = conn.execute(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics WHERE run_id=? "
                               "ORDER BY step, rank", (run_id,))
            return [dict(zip(METRIC_COLUMNS, r)) for r in cur.fetchall()]

    def reconcile(self) -> list[str]:
        """Close runs left ``running`` by a watcher that no longer exists (a killed kernel): their launcher's
        process group is killed and the record ends ``killed`` with the reason. Returns the run ids closed."""
        closed = []
        for rec in self.list():
            if rec["status"] != "running" or _pid_alive(rec.get("watcher_pid")):
                continue
            pgid = rec.get("pgid")
            if pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, 9)
            self.finish(rec["run_id"], status="killed",
                        reason=f"the process watching this run (pid {rec.get('watcher_pid')}) exited before the "
                               f"run finished; its launcher process group was killed")
            closed.append(rec["run_id"])
        return closed
