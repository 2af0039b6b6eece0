"""Where the workbench keeps user data: the run store, run directories, notebook reports.

``WORKBENCH_HOME`` overrides the default ``$XDG_DATA_HOME/workbench`` (``~/.local/share/workbench``).
"""
from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    env = os.environ.get("WORKBENCH_HOME")
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        path = Path(base) / "workbench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def store_path() -> Path:
    """The SQLite run store (``WORKBENCH_STORE`` overrides)."""
    env = os.environ.get("WORKBENCH_STORE")
    return Path(env).expanduser() if env else data_dir() / "runs.sqlite"


def runs_dir() -> Path:
    path = data_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path
