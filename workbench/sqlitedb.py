"""The SQLite plumbing shared by the run store (:mod:`workbench.runs.store`) and the job tables
(:mod:`workbench.jobs.store`), which live in one file.

Every connection is WAL-journalled with a 30 s busy timeout, and every write is one short ``BEGIN IMMEDIATE``
transaction taken before reading, so several processes (kernels, ``serve``, cron's ``run-due``, the CLI) can write
the same file and a killed writer loses no committed record.
"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

BUSY_TIMEOUT_SECONDS = 30.0


def connect(path: Path, *, row_factory: Optional[type] = None) -> sqlite3.Connection:
    """An autocommit connection (transactions are explicit: :func:`transaction`) in WAL mode."""
    con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
    except BaseException:
        con.close()
        raise
    if row_factory is not None:
        con.row_factory = row_factory
    return con


@contextmanager
def reading(path: Path, *, row_factory: Optional[type] = None) -> Iterator[sqlite3.Connection]:
    """A connection for reads, closed on exit."""
    con = connect(path, row_factory=row_factory)
    try:
        yield con
    finally:
        con.close()


@contextmanager
def transaction(path: Path, *, row_factory: Optional[type] = None) -> Iterator[sqlite3.Connection]:
    """One write transaction (``BEGIN IMMEDIATE``: the write lock is taken before the first read, so
    check-then-write is atomic across processes); committed on exit, rolled back on any exception."""
    with reading(path, row_factory=row_factory) as con:
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
