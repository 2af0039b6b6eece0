"""Shared by the headless-jobs tests: a private data home and store per test, and ``workbench ARGV`` in-process."""
from pathlib import Path

import pytest

from workbench import cli

NB = Path(__file__).parent / "data" / "notebooks"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "home" / "runs.sqlite"))
    return tmp_path


def wb(*argv) -> int:
    """``workbench ARGV`` in-process; returns the exit status."""
    return cli.main([str(a) for a in argv])
