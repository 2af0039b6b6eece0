"""Worker process for one papermill execution: ``python -m workbench.jobs._worker SPEC.json``.

Started by :func:`workbench.jobs.nbrun.run_notebook` in a session of its own, so the parent can kill it (and the
kernel it started) without touching itself. SPEC holds ``input``, ``output``, ``parameters``, ``kernel_name``,
``execution_timeout`` (seconds per cell or null), ``cwd`` and ``result`` (where this process writes
``{"status": "ok" | "failed" | "timeout", "error": {...} | null}``).

A watchdog thread ends this process and its kernel when the parent disappears (a killed ``workbench jobs serve``),
so no notebook keeps running unaccounted for.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time


def kill_tree(pid: int, include_self: bool = True) -> None:
    """SIGKILL every descendant of ``pid`` (kernels live in sessions of their own) and, optionally, ``pid``."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + ([root] if include_self else [])
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            kill_tree(os.getpid(), include_self=False)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.5)


def _source_head(source: str, lines: int = 3) -> str:
    head = source.strip().splitlines()[:lines]
    return "\n".join(head)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    threading.Thread(target=_watch_parent, args=(spec["parent_pid"],), daemon=True).start()

    import papermill
    from papermill.exceptions import PapermillExecutionError

    result = {"status": "ok", "error": None}
    try:
        papermill.execute_notebook(spec["input"], spec["output"], parameters=spec["parameters"],
                                   kernel_name=spec["kernel_name"], execution_timeout=spec["execution_timeout"],
                                   cwd=spec["cwd"], progress_bar=False, log_output=False)
    except PapermillExecutionError as exc:
        result = {"status": "failed",
                  "error": {"ename": exc.ename, "evalue": exc.evalue, "cell_index": exc.cell_index,
                            "execution_count": exc.exec_count, "source_head": _source_head(exc.source)}}
    except TimeoutError as exc:  # nbclient's CellTimeoutError: the kernel was interrupted and shut down
        result = {"status": "timeout",
                  "error": {"ename": type(exc).__name__,
                            "evalue": f"a cell ran longer than {spec['execution_timeout']} s",
                            "cell_index": None, "execution_count": None,
                            "source_head": _source_head(str(exc).split("-------------------")[-1]
                                                        .split("----------------")[0])}}
    except Exception as exc:  # kernel failed to start, notebook unreadable, ...
        result = {"status": "failed",
                  "error": {"ename": type(exc).__name__, "evalue": str(exc).strip().splitlines()[0] if str(exc)
                            else "", "cell_index": None, "execution_count": None, "source_head": ""}}
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
