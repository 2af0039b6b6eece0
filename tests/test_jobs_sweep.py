"""``workbench nb sweep``: grid expansion, one row per run in CSV and Parquet, the worker limit."""
from datetime import datetime

import pandas as pd
import pytest

from workbench.jobs.report import sweep_summary_html
from workbench.jobs.store import JobStore
from workbench.jobs.sweep import combinations_from_grid, sweep_rows
from jobs_support import NB, home, wb  # noqa: F401  (home: autouse fixture)


def test_grid_is_a_cartesian_product_in_file_order():
    assert combinations_from_grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_grid_sections_runs_and_fixed_parameters():
    combos = combinations_from_grid({"grid": {"a": [1, 2]}, "runs": [{"a": 9, "b": 0}], "parameters": {"b": 5}})
    assert combos == [{"b": 5, "a": 1}, {"b": 5, "a": 2}, {"b": 0, "a": 9}]
    with pytest.raises(ValueError, match="a must be a non-empty list"):
        combinations_from_grid({"a": 3})
    with pytest.raises(ValueError, match="unknown section"):
        combinations_from_grid({"grid": {"a": [1]}, "extra": 1})


def test_sweep_of_four_combinations_gives_four_rows(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("x: [1, 2]\nscale: [0.5, 3]\n")
    code = wb("nb", "sweep", NB / "params.ipynb", "--grid", grid, "--workers", "2", "--out", tmp_path / "r")
    assert code == 0, capsys.readouterr()
    (folder,) = (tmp_path / "r" / "params").iterdir()
    csv = pd.read_csv(folder / "sweep.csv")
    parquet = pd.read_parquet(folder / "sweep.parquet")
    for table in (csv, parquet):
        assert len(table) == 4
        assert list(table["status"]) == ["ok"] * 4
        assert list(table["y"]) == [0.5, 3.0, 1.0, 6.0]  # x * scale, recorded by the notebook
        assert list(table["x"]) == [1, 1, 2, 2]
    assert (folder / "sweep.html").read_text().count("<svg") >= 2  # y and duration charts
    rows = JobStore().notebook_runs(sweep=f"params/{folder.name}")
    assert len(rows) == 4
    # The worker limit held: never more than 2 runs overlapped.
    spans = [(datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["finished_at"])) for r in rows]
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2


def test_sweep_rows_and_summary_show_failures():
    class Run:
        def __init__(self, status, params, results, error=None):
            self.status, self.parameters, self.results = status, params, results
            self.duration_seconds, self.html_path = 1.0, None
            self.error = error

    class Err:
        def summary(self):
            return "cell 3: ValueError: bad"

    runs = [Run("ok", {"n": 1}, {"n": 10, "m": [1, 2]}), Run("failed", {"n": 2}, {}, Err())]
    rows = sweep_rows(runs, ["n"])
    assert rows[0]["result_n"] == 10 and rows[0]["m"] == "[1, 2]"
    assert rows[1]["result_n"] is None and rows[1]["error"] == "cell 3: ValueError: bad"
    page = sweep_summary_html(rows, parameter_names=["n"], title="t")
    assert "1 of 2 runs finished ok" in page and ">failed</text>" in page
