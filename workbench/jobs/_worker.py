"""Worker process for one papermill execution: ``python -m workbench.jobs._worker SPEC.json``.

Started by :func:`workbench.jobs.nbrun.run_notebook` in a session of its own, so the parent can kill it (and the
kernel it started) without touching itself. SPEC holds ``input``, ``output``, ``parameters``, ``kernel_name``,
``execution_timeout`` (seconds per cell or null), ``cwd``, ``log`` (this process's stdout and stderr, which the
kernel shares) and ``result`` (where this process writes ``{"status": "ok" | "failed" | "timeout", "error": {...} |
null}``).

A kernel that dies before it answers is started again, with new ports, up to ``KERNEL_START_ATTEMPTS`` times:
jupyter_client picks a kernel's five ports by binding port 0 and closing the socket, and the kernel binds them a
second or two later, so two workers starting kernels at once (a sweep's first runs) can be handed the same port;
the kernel that binds it second dies with ``ZMQError: Address already in use``. Nothing of the notebook has run at
that point. Once the kernel has answered, every failure is the notebook's and is reported as it is.

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

KERNEL_START_ATTEMPTS = 3


class KernelStartError(RuntimeError):
    """The kernel died, or did not answer, before the notebook's first cell, ``KERNEL_START_ATTEMPTS`` times."""


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


def last_exception_line(text: str) -> str:
    """The ``Name: message`` line that ends the last traceback in ``text`` ("" when there is none): in the log a
    kernel shares with its worker, why that kernel died (the client only sees that it did)."""
    lines = text.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("Traceback (most recent call last):"):
            return next((line.strip() for line in lines[start + 1:] if line.strip() and not line[0].isspace()), "")
    return ""


def _log_since(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _execute(spec: dict) -> None:
    """papermill's execution of the spec; a kernel that fails to start is replaced (see the module docstring)."""
    import papermill
    from jupyter_client.kernelspec import NoSuchKernel

    for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
        started = []  # nbclient calls on_notebook_start once the kernel has answered, before the first cell
        log_offset = os.path.getsize(spec["log"]) if os.path.isfile(spec["log"]) else 0
        try:
            papermill.execute_notebook(spec["input"], spec["output"], parameters=spec["parameters"],
                                       kernel_name=spec["kernel_name"], execution_timeout=spec["execution_timeout"],
                                       cwd=spec["cwd"], progress_bar=False, log_output=False,
                                       on_notebook_start=lambda **_: started.append(True))
            return
        except Exception as exc:
            if started or isinstance(exc, NoSuchKernel):
                raise
            why = last_exception_line(_log_since(spec["log"], log_offset))
            failure = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            failure += f" ({why})" if why else ""
            if attempt == KERNEL_START_ATTEMPTS:
                raise KernelStartError(f"the kernel did not start ({attempt} attempts); last: {failure}") from exc
            print(f"workbench: kernel did not start (attempt {attempt} of {KERNEL_START_ATTEMPTS}): {failure}; "
                  f"starting a new one", file=sys.stderr, flush=True)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    threading.Thread(target=_watch_parent, args=(spec["parent_pid"],), daemon=True).start()

    from papermill.exceptions import PapermillExecutionError

    result = {"status": "ok", "error": None}
    try:
        _execute(spec)
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
    except Exception as exc:  # KernelStartError, a kernel that died mid-run, an unreadable notebook, ...
        result = {"status": "failed",
                  "error": {"ename": type(exc).__name__, "evalue": str(exc).strip().splitlines()[0] if str(exc)
                            else "", "cell_index": None, "execution_count": None, "source_head": ""}}
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
