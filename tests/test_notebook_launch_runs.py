import os
from pathlib import Path

import pytest

from workbench.nbrecord import read_records

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_launch_runs_notebook_trains_on_cpu(tmp_path, monkeypatch):
    """The notebook's defaults (learnable data, bf16, ZeRO-1) over two processes: the loss falls. This is the
    suite's check that a real run learns; tests/test_runs_launcher.py compares layouts on random tokens."""
    import papermill

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", os.environ.get("TORCH_EXTENSIONS_DIR",
                                                              "/work/.cache/torch_extensions"))
    out = tmp_path / "out.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "launch_runs.ipynb"), str(out), cwd=str(ROOT),
                               parameters={"nproc": 2, "steps": 12}, kernel_name="python3", progress_bar=False)
    rec = read_records(out)
    assert rec["status"] == "completed"
    assert len(rec["losses"]) == 12 and rec["losses"][-1] < rec["losses"][0] - 0.3
    assert set(rec["measured"]["peak_memory_bytes"]) == {"0", "1"}
    assert "per_gpu_peak_bytes" in rec["predicted"]
