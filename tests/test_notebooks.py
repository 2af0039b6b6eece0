"""Every notebook runs headless under papermill with small parameters; the numbers it records are checked.

Notebooks are committed without outputs; each records its key results with ``workbench.nbrecord.record``. A failing
cell fails the test with that cell's error. The kernel is ``python3`` from this environment (the Makefile installs
it with ``ipykernel install --sys-prefix``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench import catalog
from workbench.estimate import estimate
from workbench.nbrecord import read_records
from workbench.specs import ClusterSpec, ParallelPlan

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
GIB = 2**30


def run_notebook(name: str, parameters: dict, tmp_path: Path, monkeypatch) -> dict:
    """Execute ``notebooks/<name>`` with papermill and return its recorded ``{name: value}``."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    out = tmp_path / name
    try:
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters, kernel_name="python3",
                                   cwd=str(NOTEBOOKS), progress_bar=False, log_output=False,
                                   execution_timeout=300)
    except PapermillExecutionError as exc:
        trace = "\n".join(exc.traceback[-12:]) if exc.traceback else ""
        pytest.fail(f"{name}: cell {exc.cell_index} (execution {exc.exec_count}) failed: {exc.ename}: {exc.evalue}"
                    f"\n{trace}", pytrace=False)
    return read_records(out)


def test_notebooks_are_committed_without_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, f"{path.name} has outputs"
        tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
        if path.name != "dashboard.ipynb":
            assert len(tagged) == 1, f"{path.name} needs exactly one cell tagged 'parameters'"
            for line in "".join(tagged[0]["source"]).splitlines():
                if line.strip():
                    assert ":" in line and "=" in line and "#" in line, f"{path.name}: '{line}' is not " \
                                                                         "'name: type = default  # help'"


def _estimate(model, gpu, gpus_per_node, nodes, **plan):
    cluster = ClusterSpec(gpu=catalog.gpu(gpu), gpus_per_node=gpus_per_node, num_nodes=nodes)
    return estimate(catalog.model(model), cluster, ParallelPlan(world_size=cluster.world_size, **plan))


@pytest.mark.slow
def test_quickstart(tmp_path, monkeypatch):
    params = dict(model="gpt3-1.3b", gpu="H100-SXM", gpus_per_node=4, nodes=1, engine="megatron",
                  tensor_parallel=2, pipeline_parallel=2, micro_batch_size=2, global_batch_size=16,
                  precision="bf16")
    rec = run_notebook("quickstart.ipynb", params, tmp_path, monkeypatch)
    expected = _estimate("gpt3-1.3b", "H100-SXM", 4, 1, engine="megatron", tensor_parallel=2, pipeline_parallel=2,
                         micro_batch_size=2, global_batch_size=16, precision="bf16").memory
    assert rec["parameters"] == catalog.model("gpt3-1.3b").num_parameters
    assert rec["data_parallel"] == 1 and rec["num_stages"] == 2
    assert rec["per_gpu_peak_bytes"] == expected.per_gpu_peak_bytes
    assert rec["app_peak_bytes"] == expected.per_gpu_peak_bytes  # the widget app shows the same plan
    assert rec["breakdown"] == expected.breakdown.as_dict()
    assert rec["fits"] is True
    assert 1 * GIB < rec["per_gpu_peak_bytes"] < 80 * GIB


@pytest.mark.slow
def test_zero_stages(tmp_path, monkeypatch):
    rec = run_notebook("zero_stages.ipynb", dict(model="gpt3-350m", gpu="A100-40GB", dp_values=[1, 4, 16]),
                       tmp_path, monkeypatch)
    assert rec["dp_values"] == [1, 4, 16]
    states = rec["model_state_bytes_by_stage"]
    # With one rank nothing is partitioned; at every N > 1 each stage holds less than the one before.
    for i, dp in enumerate(rec["dp_values"]):
        if dp > 1:
            assert states["0"][i] > states["1"][i] > states["2"][i] > states["3"][i]
    # ZeRO-3 model states shrink about as 1/N (16 -> 4 ranks: about 4x less).
    assert 3.0 < states["3"][1] / states["3"][2] < 4.5
    # ZeRO-0 keeps a full replica: the same model states at every N.
    assert len(set(states["0"])) == 1
    expected = _estimate("gpt3-350m", "A100-40GB", 8, 2, engine="deepspeed", zero_stage=3, recompute="full")
    assert rec["peak_bytes_by_stage"]["3"][2] == expected.memory.per_gpu_peak_bytes
