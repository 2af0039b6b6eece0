"""``workbench nb run``: reports, run store rows, failures, timeouts, kernels that fail to start (each run starts a
real kernel, ~3-8 s)."""
import json
import sys
import time
from pathlib import Path

import psutil

from workbench.jobs._worker import KERNEL_START_ATTEMPTS, last_exception_line
from workbench.jobs.nbrun import run_notebook
from workbench.jobs.store import JobStore
from jobs_support import NB, home, wb  # noqa: F401  (home: autouse fixture)


def dead(pid: int, within_seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + within_seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_run_keeps_notebook_html_and_records_results(tmp_path, capsys):
    out = tmp_path / "reports"
    code = wb("nb", "run", NB / "params.ipynb", "-p", "x", "3", "-p", "label", "b", "--out", out, "--json")
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "ok"
    assert record["parameters"] == {"x": 3, "label": "b"}
    assert record["results"] == {"y": 4.5, "label_upper": "B", "flag": False}
    folder = Path(record["output_dir"])
    assert folder.parent == out / "params"  # <out>/<stem>/<UTC timestamp>
    assert (folder / "params.ipynb").is_file() and (folder / "run.json").is_file()
    assert "label_upper" in (folder / "params.html").read_text()
    (row,) = JobStore().notebook_runs()
    assert row["status"] == "ok" and row["results"]["y"] == 4.5 and row["html_path"] == record["html_path"]
    assert row["duration_seconds"] > 0


def test_failing_cell_exits_nonzero_and_keeps_partial_output(tmp_path, capsys):
    code = wb("nb", "run", NB / "fail.ipynb", "-p", "n", "7", "--out", tmp_path / "r")
    err = capsys.readouterr().err
    assert code == 1
    assert "ValueError: bad n=7" in err
    assert 'raise ValueError(f"bad n={n}")' in err  # the failing cell's source
    (row,) = JobStore().notebook_runs()
    assert row["status"] == "failed" and "ValueError: bad n=7" in row["error"]
    assert row["results"] == {"before": 7}  # recorded before the failure; "after" never ran
    executed = json.loads(Path(row["executed_path"]).read_text())
    assert any(o.get("ename") == "ValueError" for c in executed["cells"] for o in c.get("outputs", []))
    assert Path(row["html_path"]).is_file()


def test_bad_parameter_is_one_line_and_exit_2(tmp_path, capsys):
    assert wb("nb", "run", NB / "params.ipynb", "-p", "x", "2.5") == 2
    assert capsys.readouterr().err.strip() == "workbench: error: parameter x expects int, got '2.5'"
    assert wb("nb", "run", NB / "params.ipynb", "-p", "nope", "1") == 2
    assert "unknown parameter 'nope'" in capsys.readouterr().err
    assert JobStore().notebook_runs() == []  # nothing ran


def test_cell_timeout_shuts_the_kernel_down(tmp_path):
    pid_file = tmp_path / "kernel.pid"
    run = run_notebook(NB / "sleep.ipynb", {"pid_file": str(pid_file)}, out_dir=tmp_path, timeout_seconds=2)
    assert run.status == "timeout" and run.exit_code == 124
    assert "time.sleep(seconds)" in run.error.source_head or "import os, time" in run.error.source_head
    assert dead(int(pid_file.read_text()))
    assert Path(run.executed_path).is_file()


def test_wall_clock_limit_kills_worker_and_kernel(tmp_path):
    pid_file = tmp_path / "kernel.pid"
    run = run_notebook(NB / "sleep.ipynb", {"pid_file": str(pid_file)}, out_dir=tmp_path, timeout_seconds=120,
                       kill_after_seconds=6)
    assert run.status == "timeout" and run.error.ename == "Killed"
    assert 5.5 < run.duration_seconds < 12
    (row,) = JobStore().notebook_runs()
    assert row["status"] == "timeout" and dead(row["worker_pid"])
    if pid_file.exists():  # the kernel got as far as the sleeping cell
        assert dead(int(pid_file.read_text()))


def test_last_exception_line_is_the_end_of_the_last_traceback():
    log = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n"
           "Traceback (most recent call last):\n  File \"k.py\", line 9, in bind\n    super().bind(addr)\n"
           "    ^^^^^^^^^^^^^^^^^^\nzmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5')\n"
           "Error occurred while starting new kernel client: Kernel died before replying to kernel_info\n")
    assert last_exception_line(log) == "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5')"
    assert last_exception_line("no traceback here\n") == ""


# A python kernel whose first COLLISIONS starts find their shell port taken, as when two workers starting kernels
# at the same moment were handed the same free port: the kernel dies binding it, before it answers.
COLLIDING_KERNEL = """\
import json, socket, sys
from pathlib import Path

starts, collisions, connection_file = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
count = len(starts.read_text().splitlines()) if starts.exists() else 0
starts.open("a").write("start\\n")
if count < collisions:
    info = json.loads(Path(connection_file).read_text())
    taken = socket.socket()
    taken.bind((info["ip"], info["shell_port"]))
    taken.listen()
sys.argv = [sys.argv[0]] + sys.argv[3:]
from ipykernel.kernelapp import launch_new_instance
launch_new_instance()
"""


def colliding_kernel(tmp_path, monkeypatch, collisions: int) -> Path:
    """Installs kernel ``colliding`` (through JUPYTER_PATH, which the worker inherits); returns the file that gets
    one line per kernel start."""
    script, starts = tmp_path / "colliding_kernel.py", tmp_path / "kernel_starts.txt"
    script.write_text(COLLIDING_KERNEL)
    spec = tmp_path / "jupyter" / "kernels" / "colliding"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(script), str(starts), str(collisions), "-f", "{connection_file}"],
        "display_name": "colliding", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return starts


def test_kernel_that_dies_starting_is_started_again(tmp_path, monkeypatch):
    starts = colliding_kernel(tmp_path, monkeypatch, collisions=1)
    run = run_notebook(NB / "params.ipynb", {"x": 3}, out_dir=tmp_path / "r", kernel_name="colliding")
    assert run.status == "ok", run.error
    assert run.results["y"] == 4.5
    assert len(starts.read_text().splitlines()) == 2
    log = (Path(run.output_dir) / "worker.log").read_text()
    assert "Address already in use" in log and f"attempt 1 of {KERNEL_START_ATTEMPTS}" in log


def test_kernel_that_never_starts_fails_and_says_why(tmp_path, monkeypatch):
    starts = colliding_kernel(tmp_path, monkeypatch, collisions=KERNEL_START_ATTEMPTS)
    run = run_notebook(NB / "params.ipynb", out_dir=tmp_path / "r", kernel_name="colliding")
    assert run.status == "failed"
    assert run.error.ename == "KernelStartError"
    assert "Kernel died before replying to kernel_info" in run.error.evalue
    assert "Address already in use" in run.error.evalue  # the kernel's own reason, from its stderr
    assert len(starts.read_text().splitlines()) == KERNEL_START_ATTEMPTS
    (row,) = JobStore().notebook_runs()
    assert "Address already in use" in row["error"]


def test_failing_cell_is_not_run_again(tmp_path, monkeypatch):
    starts = colliding_kernel(tmp_path, monkeypatch, collisions=0)
    run = run_notebook(NB / "fail.ipynb", {"n": 7}, out_dir=tmp_path / "r", kernel_name="colliding")
    assert run.status == "failed" and run.error.summary().endswith("ValueError: bad n=7")
    assert len(starts.read_text().splitlines()) == 1
