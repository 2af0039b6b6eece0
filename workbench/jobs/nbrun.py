"""Run one notebook headless: papermill in a worker process, an HTML report, a row in the run store.

Each run gets a folder (default ``<data_dir>/reports/<notebook stem>/<UTC timestamp>``) holding the executed
notebook ``<stem>.ipynb`` (kept, partial, when a cell fails), its HTML rendering ``<stem>.html`` (nbconvert),
``run.json`` (what the store holds) and ``worker.log`` (the worker's and kernel's stderr).

Timeouts, two layers: ``timeout_seconds`` is papermill's per-cell ``execution_timeout`` (the cell is interrupted
and the kernel shut down); the whole run is also killed at ``kill_after_seconds`` wall-clock (default
``timeout_seconds + 10``): SIGKILL to the worker and every process under it, the kernel included.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import workbench
from workbench import paths
from workbench.jobs._worker import kill_tree
from workbench.jobs.parameters import check_parameters
from workbench.jobs.store import JobStore, iso, utc_now
from workbench.nbrecord import read_records

KILL_GRACE_SECONDS = 10.0
EXIT_CODES = {"ok": 0, "failed": 1, "timeout": 124, "interrupted": 130}


@dataclass(frozen=True, kw_only=True, slots=True)
class CellError:
    """Where and how a run stopped."""
    ename: str
    """Exception class name (``ValueError``, ``CellTimeoutError``, ``Killed``)."""
    evalue: str
    """Exception message."""
    source_head: str = ""
    """First lines of the failing cell's source."""
    cell_index: int | None = None
    """Index of the cell in the executed notebook (which has papermill's injected-parameters cell)."""
    execution_count: int | None = None

    def summary(self) -> str:
        where = f"cell {self.execution_count}: " if self.execution_count is not None else ""
        return f"{where}{self.ename}: {self.evalue}" if self.evalue else f"{where}{self.ename}"


@dataclass(frozen=True, kw_only=True, slots=True)
class NotebookRun:
    run_id: int
    """Row id in the store's ``notebook_runs`` table."""
    notebook: str
    parameters: dict
    status: str
    """``ok``, ``failed`` (a cell raised), ``timeout`` or ``interrupted`` (stopped by the caller)."""
    started_at: str
    finished_at: str
    duration_seconds: float
    output_dir: str
    executed_path: str | None
    """The executed (possibly partial) notebook; None only if the run died before papermill wrote it."""
    html_path: str | None
    results: dict = field(default_factory=dict)
    """What the notebook recorded with ``workbench.nbrecord.record``."""
    error: CellError | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict:
        return asdict(self)


def reports_dir() -> Path:
    return paths.data_dir() / "reports"


def new_run_dir(base, stem: str, now: datetime | None = None) -> Path:
    """``base/<stem>/<UTC timestamp>``, suffixed ``-2``, ``-3``… when that folder already exists."""
    stamp = (now or utc_now()).strftime("%Y%m%dT%H%M%SZ")
    parent = Path(base) / stem
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise OSError(f"no free run folder under {parent}")


def failing_cell(nb: dict) -> CellError | None:
    """The first code cell with an error output (papermill's own markdown error banner is skipped)."""
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", []) or []:
            if output.get("output_type") == "error":
                source = cell.get("source", "")
                source = "".join(source) if isinstance(source, list) else source
                return CellError(ename=output.get("ename", ""), evalue=output.get("evalue", ""),
                                 source_head="\n".join(source.strip().splitlines()[:3]), cell_index=index,
                                 execution_count=cell.get("execution_count"))
    return None


def running_cell(nb: dict) -> CellError | None:
    """The cell papermill marked ``running`` when the run was killed (None when none was)."""
    for index, cell in enumerate(nb.get("cells", [])):
        if (cell.get("metadata", {}).get("papermill", {}) or {}).get("status") == "running":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            return CellError(ename="", evalue="", source_head="\n".join(source.strip().splitlines()[:3]),
                             cell_index=index, execution_count=cell.get("execution_count"))
    return None


def report_title(stem: str, parameters: dict) -> str:
    """The HTML report's title: the notebook and the parameters it ran with (headings in the notebook describe its
    defaults, so the title says what was overridden)."""
    if not parameters:
        return f"{stem} (default parameters)"
    return f"{stem}: " + ", ".join(f"{k}={v}" for k, v in parameters.items())


def export_html(notebook_path: Path, html_path: Path, parameters: dict | None = None) -> None:
    """Render an executed notebook to a standalone HTML file (nbconvert's lab template), titled by
    :func:`report_title`; with overridden parameters a note at the top lists them."""
    import nbconvert
    import nbformat

    nb = nbformat.read(str(notebook_path), as_version=4)
    title = report_title(Path(notebook_path).stem, dict(parameters or {}))
    nb.metadata["title"] = title
    if parameters:
        listed = ", ".join(f"`{k}` = `{v!r}`" for k, v in parameters.items())
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**Ran with parameters** {listed}; headings and text below describe the notebook's defaults, the "
            f"numbers follow these parameters."))
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    html_path.write_text(body, encoding="utf-8")


def _worker_env() -> dict:
    env = dict(os.environ)
    root = str(Path(workbench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_notebook(notebook, parameters: dict | None = None, *, out_dir=None, run_dir=None,
                 timeout_seconds: float | None = None, kill_after_seconds: float | None = None,
                 kernel_name: str = "python3", store: JobStore | None = None, sweep: str | None = None,
                 job_run_id: int | None = None, parameters_from_text: bool = False,
                 stop_event: threading.Event | None = None, on_start=None) -> NotebookRun:
    """Execute ``notebook`` with ``parameters`` through papermill and record the run.

    Parameters
    ----------
    out_dir : folder under which ``<stem>/<timestamp>/`` is made (default ``<data_dir>/reports``).
    run_dir : the exact folder to use instead (sweeps pass one per combination).
    timeout_seconds : per-cell limit (papermill ``execution_timeout``); also sets the wall-clock kill.
    kill_after_seconds : wall-clock limit for the whole run (default ``timeout_seconds + 10``; None: no limit).
    parameters_from_text : values are command-line strings (see ``workbench.jobs.parameters``).
    stop_event : when set, the run is killed and recorded ``interrupted``.
    on_start : called with the store's run id once the row exists.

    Bad parameters raise ValueError before anything runs. A failing notebook does not raise: the returned
    ``NotebookRun`` has ``status="failed"`` and ``error``.
    """
    nb_path = Path(notebook).resolve()
    if not nb_path.is_file():
        raise ValueError(f"notebook {notebook} does not exist")
    if timeout_seconds is not None and timeout_seconds <= 0:
        raise ValueError(f"timeout={timeout_seconds} must be > 0 seconds")
    typed = check_parameters(nb_path, dict(parameters or {}), from_text=parameters_from_text)
    if kill_after_seconds is None and timeout_seconds is not None:
        kill_after_seconds = timeout_seconds + KILL_GRACE_SECONDS
    store = store or JobStore()
    started = utc_now()
    folder = Path(run_dir) if run_dir is not None else new_run_dir(out_dir or reports_dir(), nb_path.stem, started)
    folder.mkdir(parents=True, exist_ok=True)
    executed = folder / f"{nb_path.stem}.ipynb"
    html = folder / f"{nb_path.stem}.html"
    run_id = store.start_notebook_run(notebook=str(nb_path), parameters=typed, started_at=started,
                                      output_dir=str(folder), sweep=sweep, job_run_id=job_run_id)
    if on_start is not None:
        on_start(run_id)

    spec_path, result_path = folder / ".spec.json", folder / ".result.json"
    spec_path.write_text(json.dumps({
        "input": str(nb_path), "output": str(executed), "parameters": typed, "kernel_name": kernel_name,
        "execution_timeout": timeout_seconds, "cwd": str(nb_path.parent), "log": str(folder / "worker.log"),
        "result": str(result_path), "parent_pid": os.getpid()}))
    t0 = time.monotonic()
    killed = None
    with open(folder / "worker.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "workbench.jobs._worker", str(spec_path)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_worker_env(), start_new_session=True)
        store.set_worker_pid(run_id, proc.pid)
        while proc.poll() is None:
            if stop_event is not None and stop_event.is_set():
                killed = "interrupted"
            elif kill_after_seconds is not None and time.monotonic() - t0 > kill_after_seconds:
                killed = "timeout"
            if killed:
                kill_tree(proc.pid)
                proc.wait()
                break
            time.sleep(0.1)
    duration = time.monotonic() - t0

    outcome = {"status": "failed", "error": {"ename": "WorkerExited",
                                             "evalue": f"worker exited with code {proc.returncode}"}}
    if killed is None and result_path.is_file():
        outcome = json.loads(result_path.read_text())
    for p in (spec_path, result_path):
        p.unlink(missing_ok=True)

    nb_json = json.loads(executed.read_text()) if executed.is_file() else None
    error = None
    if killed is not None:
        cell = running_cell(nb_json) if nb_json else None
        reason = (f"stopped after {duration:.1f} s (wall-clock limit {kill_after_seconds:g} s)"
                  if killed == "timeout" else "stopped before it finished")
        error = CellError(ename="Killed", evalue=reason, source_head=cell.source_head if cell else "",
                          cell_index=cell.cell_index if cell else None,
                          execution_count=cell.execution_count if cell else None)
        status = killed
    else:
        status = outcome["status"]
        if status != "ok":
            found = failing_cell(nb_json) if nb_json else None
            worker_err = outcome.get("error") or {}
            if found is not None and status == "failed":
                error = found
            else:
                error = CellError(ename=worker_err.get("ename", ""), evalue=worker_err.get("evalue", ""),
                                  source_head=worker_err.get("source_head") or (found.source_head if found else ""),
                                  cell_index=worker_err.get("cell_index", found.cell_index if found else None),
                                  execution_count=(worker_err.get("execution_count")
                                                   or (found.execution_count if found else None)))

    results = {}
    html_path = None
    if nb_json is not None:
        results = read_records(executed)
        try:
            export_html(executed, html, typed)
            html_path = str(html)
        except Exception as exc:  # a report that cannot render must not hide the run's status
            (folder / "worker.log").open("a").write(f"\nHTML export failed: {type(exc).__name__}: {exc}\n")
    finished = utc_now()
    run = NotebookRun(run_id=run_id, notebook=str(nb_path), parameters=typed, status=status,
                      started_at=iso(started), finished_at=iso(finished), duration_seconds=round(duration, 3),
                      output_dir=str(folder), executed_path=str(executed) if nb_json is not None else None,
                      html_path=html_path, results=results, error=error)
    (folder / "run.json").write_text(json.dumps(run.to_dict(), indent=2, default=str))
    store.finish_notebook_run(run_id, status=status, finished_at=finished, duration_seconds=run.duration_seconds,
                              executed_path=run.executed_path, html_path=html_path, results=results,
                              error=error.summary() if error else None)
    return run
