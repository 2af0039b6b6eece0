"""``workbench nb run | sweep``: execute notebooks headless (papermill) and keep their reports."""
from __future__ import annotations

import sys
from pathlib import Path

from workbench.jobs.nbrun import NotebookRun, run_notebook
from workbench.jobs.parameters import check_parameters
from workbench.jobs.store import JobStore
from workbench.jobs.sweep import load_grid, run_sweep


def add_parser(sub) -> None:
    parser = sub.add_parser("nb", help="run notebooks headless (papermill): single runs and parameter sweeps")
    nb_sub = parser.add_subparsers(dest="nb_command", metavar="ACTION")
    nb_sub.required = True

    run_p = nb_sub.add_parser("run", help="execute a notebook, keep the executed notebook and an HTML report")
    run_p.add_argument("notebook")
    run_p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"), default=[],
                       help="set a parameter of the notebook's 'parameters' cell (repeatable)")
    run_p.add_argument("--out", metavar="DIR", help="reports folder (default <data dir>/reports)")
    run_p.add_argument("--timeout", type=float, metavar="S",
                       help="seconds a cell may run; the whole run is killed 10 s after that")
    run_p.add_argument("--json", action="store_true", help="print the run record as JSON")
    run_p.set_defaults(func=run_one)

    sweep_p = nb_sub.add_parser("sweep", help="run a notebook once per parameter combination; one results table")
    sweep_p.add_argument("notebook")
    sweep_p.add_argument("--grid", required=True, metavar="FILE.yaml",
                         help="parameter -> list of values (cartesian product), or grid:/runs:/parameters:")
    sweep_p.add_argument("--workers", type=int, default=2, metavar="N", help="runs at once (default 2)")
    sweep_p.add_argument("--out", metavar="DIR", help="reports folder (default <data dir>/reports)")
    sweep_p.add_argument("--timeout", type=float, metavar="S", help="seconds a cell may run, per run")
    sweep_p.add_argument("--json", action="store_true", help="print the table rows as JSON")
    sweep_p.set_defaults(func=run_many)


def describe(run: NotebookRun) -> list[str]:
    """Human-readable lines for one run."""
    lines = [f"{run.status}  {run.notebook}  {run.duration_seconds:.1f} s  (run {run.run_id})"]
    if run.error is not None:
        lines.append(f"  error: {run.error.summary()}")
        for src in run.error.source_head.splitlines():
            lines.append(f"    | {src}")
    if run.results:
        lines.append("  results: " + ", ".join(f"{k}={v}" for k, v in run.results.items()))
    if run.executed_path:
        partial = "partial notebook" if run.status != "ok" else "notebook"
        lines.append(f"  {partial}: {run.executed_path}")
    if run.html_path:
        lines.append(f"  report: {run.html_path}")
    return lines


def check_notebook(notebook: str) -> None:
    """``ValueError`` naming ``notebook`` when it exists but is not a notebook nbformat can read (not UTF-8, empty,
    not JSON, JSON other than a notebook object), before anything starts; nbformat's own messages do not name the
    file. A missing file is left to the run's own message."""
    import json

    path = Path(notebook)
    if not path.is_file():
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"notebook {notebook} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}); a .ipynb file is the notebook's JSON") from None
    except OSError as exc:
        raise ValueError(f"notebook {notebook} cannot be read: {exc.strerror or exc}") from None
    if not text.strip():
        raise ValueError(f"notebook {notebook} is empty; a .ipynb file is the notebook's JSON")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"notebook {notebook} is nested too deeply to be a notebook") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"notebook {notebook} is not valid JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}); a .ipynb file is the notebook's JSON") from None
    if not isinstance(data, dict):
        from workbench.commands.common import json_kind

        kind = json_kind(data)
        raise ValueError(f"notebook {notebook} holds a JSON {kind}, not a notebook object (with "
                         f"'cells', 'metadata' and 'nbformat')")
    import warnings

    import nbformat

    try:
        with warnings.catch_warnings():  # validation notes (cells without ids) are papermill's to give, not ours
            warnings.simplefilter("ignore")
            nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises ValidationError, NBFormatError, TypeError, ...
        reason = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise ValueError(f"notebook {notebook} is not a Jupyter notebook nbformat can read: {reason:.200}") from None


def run_one(args) -> int:
    check_notebook(args.notebook)
    params = {}
    for name, value in args.parameter:
        if name in params:
            raise ValueError(f"parameter {name} given twice")
        params[name] = value
    JobStore().recover_interrupted()
    run = run_notebook(args.notebook, params, out_dir=args.out, timeout_seconds=args.timeout,
                       parameters_from_text=True)
    if args.json:
        from workbench.cli import print_json

        print_json(run.to_dict())
    else:
        stream = sys.stdout if run.status == "ok" else sys.stderr
        print("\n".join(describe(run)), file=stream)
    return run.exit_code


def run_many(args) -> int:
    from workbench.commands.common import progress_bar

    check_notebook(args.notebook)
    combos = load_grid(args.grid)
    if args.workers < 1:  # checked before the progress bar appears (run_sweep checks again)
        raise ValueError(f"workers={args.workers} must be >= 1")
    for combo in combos:
        check_parameters(Path(args.notebook).resolve(), combo)
    JobStore().recover_interrupted()
    with progress_bar(total=len(combos), desc="sweep", unit="run") as bar:
        def done(run):
            bar.set_postfix_str(f"last: {run.status} {run.duration_seconds:.0f} s", refresh=False)
            bar.update(1)

        result = run_sweep(args.notebook, combos, workers=args.workers, out_dir=args.out,
                           timeout_seconds=args.timeout, on_run_done=done)
    if args.json:
        from workbench.cli import print_json

        print_json(list(result.rows))
    else:
        for row, run in zip(result.rows, result.runs):
            params = ", ".join(f"{k}={v}" for k, v in run.parameters.items())
            extra = f"  {run.error.summary()}" if run.error else ""
            print(f"{row['run']:>3}  {run.status:<8} {run.duration_seconds:6.1f} s  {params}{extra}")
        print(f"{len(result.runs) - result.failed} of {len(result.runs)} runs ok")
        print(f"table: {result.csv_path}\n       {result.parquet_path}\nsummary: {result.html_path}")
    return 1 if result.failed else 0
