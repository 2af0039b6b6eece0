"""Recording a notebook's key results so headless runs (papermill, tests, sweeps) can read numbers, not only
"it ran".

In a notebook: ``record("per_gpu_peak_gib", 31.2)`` displays nothing visible but writes a display output of MIME type
``application/vnd.workbench.record+json`` holding ``{"name": ..., "value": ...}`` (JSON-serialisable values only).
After execution: ``read_records("executed.ipynb")`` returns ``{name: value}`` (the last value wins).
"""
from __future__ import annotations

import json
from pathlib import Path

MIME = "application/vnd.workbench.record+json"


def _jsonable(value):
    try:
        import numpy as np  # numpy scalars and arrays → plain Python

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:  # pragma: no cover
        pass
    return value


def record(name: str, value) -> None:
    """Record ``value`` under ``name`` in the running notebook's outputs (no-op text outside IPython)."""
    value = _jsonable(value)
    json.dumps(value)  # fail early, in the cell that records, on values that cannot be stored
    try:
        from IPython.display import display
    except ImportError:  # plain Python: nothing to record into
        return
    display({MIME: {"name": name, "value": value}, "text/plain": ""}, raw=True)


def records_from_notebook(nb: dict) -> dict:
    """``{name: value}`` from a notebook's JSON (as loaded by ``json``/``nbformat``)."""
    out = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            if MIME in data:
                item = data[MIME]
                if isinstance(item, str):
                    item = json.loads(item)
                out[item["name"]] = item["value"]
    return out


def read_records(path) -> dict:
    """``{name: value}`` recorded by an executed notebook file."""
    return records_from_notebook(json.loads(Path(path).read_text()))
