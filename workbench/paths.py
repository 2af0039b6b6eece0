"""Where the workbench keeps user data: the run store, run directories, notebook reports.

``WORKBENCH_HOME`` overrides the default ``$XDG_DATA_HOME/workbench`` (``~/.local/share/workbench``). Looking a path up
creates nothing (a served dashboard without write permission leaves the disk alone); code that writes creates the
folder it writes into (:func:`runs_dir`, :func:`exports_dir`, the run store, ``Profile.save``).
"""
from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """The data directory (not created here)."""
    env = os.environ.get("WORKBENCH_HOME")
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        path = Path(base) / "workbench"
    return path


def store_path() -> Path:
    """The SQLite run store (``WORKBENCH_STORE`` overrides)."""
    env = os.environ.get("WORKBENCH_STORE")
    return Path(env).expanduser() if env else data_dir() / "runs.sqlite"


def runs_dir() -> Path:
    path = data_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def exports_dir() -> Path:
    """Where the dashboard writes config files (``<data_dir>/exports``); not created here."""
    return data_dir() / "exports"


def confined(base: Path, folder: str) -> Path:
    """``base / folder`` when it stays inside ``base`` after resolving ``..`` and links; ``ValueError`` naming the
    folder otherwise (an absolute path, ``../..``, a link leading out)."""
    text = str(folder).strip()
    if not text:
        raise ValueError("folder is empty: give a folder name under the export directory")
    if "\x00" in text:
        raise ValueError(f"folder={text!r} contains a NUL character")
    candidate = Path(text).expanduser() if text.startswith("~") else Path(text)
    target = (base / candidate).resolve()
    root = base.resolve()
    if candidate.is_absolute() or not target.is_relative_to(root):
        raise ValueError(f"folder={text!r} is outside the export directory {root}; give a folder name inside it "
                         f"(e.g. 'my-run')")
    return target
