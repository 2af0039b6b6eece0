"""notebooks/calibrate.ipynb runs headless (papermill) with tiny sizes and records the measured profile."""
import os
from pathlib import Path

import pytest

from workbench.nbrecord import read_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_calibrate_notebook_records_a_profile(tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "executed.ipynb"
    profile_path = tmp_path / "nb.json"
    papermill.execute_notebook(str(ROOT / "notebooks" / "calibrate.ipynb"), str(out), cwd=str(ROOT),
                               parameters={"nproc": 1, "out": str(profile_path)}, progress_bar=False)
    rec = read_records(out)
    assert rec["profile_path"] == str(profile_path) and profile_path.exists()
    assert rec["measured"]["GEMM fp32 best"] > 0
    assert any("collectives skipped" in n for n in rec["notes"])
