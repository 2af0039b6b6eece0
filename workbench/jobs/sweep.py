"""Parameter sweeps: one notebook run per combination, at most ``workers`` at a time, one results table.

Grid file (YAML), either form or both:

.. code-block:: yaml

    grid:                 # cartesian product, keys in file order (a bare mapping of lists means the same)
      micro_batch: [1, 2]
      zero_stage: [1, 3]
    runs:                 # explicit combinations, appended after the grid's
      - {micro_batch: 8, zero_stage: 3}
    parameters:           # fixed values given to every run (optional)
      model: llama3-8b

Output folder ``<out>/<stem>/sweep-<UTC timestamp>/``: ``runs/NNN/`` (each run's notebook, HTML, run.json),
``sweep.csv`` and ``sweep.parquet`` (one row per run: ``run``, ``status``, ``duration_seconds``, the parameters,
the recorded results, ``error``, ``report``), and ``sweep.html`` — a static summary with inline SVG bar charts
(no plotting library involved).
"""
from __future__ import annotations

import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from workbench.jobs.nbrun import NotebookRun, new_run_dir, reports_dir, run_notebook
from workbench.jobs.parameters import check_parameters
from workbench.jobs.report import sweep_summary_html
from workbench.jobs.store import JobStore
from workbench.jobs.yamlfile import read_yaml


def combinations_from_grid(grid: dict) -> list[dict]:
    """Expand a grid document (see module docstring) into a list of parameter dicts."""
    if not isinstance(grid, dict) or not grid:
        raise ValueError("grid file must be a mapping: parameter -> list of values, or grid:/runs: sections")
    sections = {"grid", "runs", "parameters"}
    if sections & set(grid):
        unknown = set(grid) - sections
        if unknown:
            raise ValueError(f"grid file: unknown section(s) {', '.join(sorted(unknown))} "
                             f"(expected grid, runs, parameters)")
        product_part, explicit, fixed = grid.get("grid") or {}, grid.get("runs") or [], grid.get("parameters") or {}
    else:
        product_part, explicit, fixed = grid, [], {}
    if not isinstance(product_part, dict):
        raise ValueError("grid: must map each parameter to a list of values")
    if not isinstance(explicit, list) or not all(isinstance(r, dict) for r in explicit):
        raise ValueError("runs: must be a list of mappings parameter -> value")
    if not isinstance(fixed, dict):
        raise ValueError("parameters: must map parameter -> value")
    for name, values in product_part.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"grid: {name} must be a non-empty list of values, got {values!r}")
    combos = []
    if product_part:
        names = list(product_part)
        for values in itertools.product(*(product_part[n] for n in names)):
            combos.append({**fixed, **dict(zip(names, values))})
    combos += [{**fixed, **run} for run in explicit]
    if not combos:
        raise ValueError("grid file gives no combinations")
    return combos


def load_grid(path) -> list[dict]:
    return combinations_from_grid(read_yaml(path, "grid file"))


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepResult:
    sweep: str
    """Sweep id (also the ``sweep`` column of ``notebook_runs``)."""
    folder: str
    runs: tuple[NotebookRun, ...]
    rows: tuple[dict, ...]
    csv_path: str
    parquet_path: str
    html_path: str

    @property
    def failed(self) -> int:
        return sum(r.status != "ok" for r in self.runs)


def _cell(value):
    """Table cells hold scalars; lists and dicts are stored as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)


def _uniform_columns(rows: list[dict]) -> list[dict]:
    """Columns whose values mix types (other than int with float) become text, so Parquet can store them."""
    columns = {key for row in rows for key in row}
    mixed = set()
    for key in columns:
        kinds = {type(row.get(key)) for row in rows if row.get(key) is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            mixed.add(key)
    return [{k: (json.dumps(v) if k in mixed and v is not None and not isinstance(v, str) else v)
             for k, v in row.items()} for row in rows]


def sweep_rows(runs, parameter_names: list[str]) -> list[dict]:
    """One row per run: run, status, duration_seconds, parameters, recorded results (``result_`` prefix when a
    result shares a parameter's name), error, report."""
    result_names: list[str] = []
    for run in runs:
        for name in run.results:
            if name not in result_names:
                result_names.append(name)
    rows = []
    for index, run in enumerate(runs):
        row = {"run": index, "status": run.status, "duration_seconds": run.duration_seconds}
        for name in parameter_names:
            row[name] = _cell(run.parameters.get(name))
        for name in result_names:
            key = f"result_{name}" if name in parameter_names or name in row else name
            row[key] = _cell(run.results.get(name))
        row["error"] = run.error.summary() if run.error else None
        row["report"] = run.html_path
        rows.append(row)
    return rows


def run_sweep(notebook, combos: list[dict], *, workers: int = 2, out_dir=None, timeout_seconds=None,
              store: JobStore | None = None, stop_event: threading.Event | None = None,
              on_run_done=None) -> SweepResult:
    """Run ``notebook`` once per combination, at most ``workers`` at once; write the table and the summary.
    ``on_run_done(run)`` is called (from a worker thread) as each run ends, e.g. to show progress."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    nb_path = Path(notebook).resolve()
    typed = [check_parameters(nb_path, combo) for combo in combos]  # all checked before any run starts
    store = store or JobStore()
    folder = new_run_dir(out_dir or reports_dir(), nb_path.stem)
    folder = folder.rename(folder.with_name("sweep-" + folder.name))
    sweep_id = f"{nb_path.stem}/{folder.name}"

    def one(index: int) -> NotebookRun:
        run = run_notebook(nb_path, typed[index], run_dir=folder / "runs" / f"{index:03d}",
                           timeout_seconds=timeout_seconds, store=store, sweep=sweep_id, stop_event=stop_event)
        if on_run_done is not None:
            on_run_done(run)
        return run

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sweep") as pool:
        runs = tuple(pool.map(one, range(len(typed))))

    names: list[str] = []
    for combo in typed:
        names += [n for n in combo if n not in names]
    rows = sweep_rows(runs, names)
    import pandas as pd

    table = pd.DataFrame(_uniform_columns(rows))
    csv_path, parquet_path, html_path = folder / "sweep.csv", folder / "sweep.parquet", folder / "sweep.html"
    table.to_csv(csv_path, index=False)
    table.to_parquet(parquet_path, index=False)
    html_path.write_text(sweep_summary_html(rows, parameter_names=names, title=f"Sweep of {nb_path.name}"),
                         encoding="utf-8")
    return SweepResult(sweep=sweep_id, folder=str(folder), runs=runs, rows=tuple(rows), csv_path=str(csv_path),
                       parquet_path=str(parquet_path), html_path=str(html_path))
