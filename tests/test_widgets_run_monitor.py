import time

import pytest

from runs_support import TINY, cpu_cluster, plan
from workbench.runs import RunStore, launch

@pytest.mark.slow
def test_monitor_follows_a_real_run_and_shows_the_comparison(tmp_path):
    from widgets.run_monitor import RunMonitor

    r = launch(TINY, cpu_cluster(1), plan(1, engine="megatron"), steps=4, nproc=1,
               store=RunStore(tmp_path / "s.sqlite"), run_dir=tmp_path / "run")
    mon = RunMonitor(r, refresh_seconds=0.2)
    assert r.wait(300) == "completed"
    deadline = time.time() + 10
    while not mon._finished_drawn and time.time() < deadline:
        time.sleep(0.1)
    mon.refresh()
    assert mon.progress.value == 4 and mon.stop_button.disabled
    assert "completed" in mon.title.value and mon.error.value == ""
    losses = [t for t in mon.figure.data if t.name == "rank 0"][0]
    assert list(losses.y) == pytest.approx(r.record()["losses"])
    assert "predicted" in mon.result.value and "step seconds" in mon.result.value
    assert len(mon.result_figure.data) == 2
    mon.close()


def test_monitor_shows_errors_inline(tmp_path):
    from widgets.run_monitor import RunMonitor

    class Broken:
        run_id, steps, done = "x", 3, False

        @property
        def status(self):
            raise OSError("store unreadable")

    mon = RunMonitor(Broken(), refresh_seconds=60)
    assert "store unreadable" in mon.error.value
    mon.close()


def test_cpu_run_shows_memory_not_comparable_instead_of_an_error(tmp_path):
    from widgets.run_monitor import RunMonitor
    from workbench.runs.launcher import predicted_numbers

    record = {"run_id": "cpu", "status": "completed", "reason": "", "warning": "",
              "predicted": predicted_numbers(TINY, cpu_cluster(1), plan(1), on_gpu=False),
              "measured": {"peak_memory_bytes": {"0": 400 * 2**20}, "median_step_seconds": 0.1}}

    class Finished:
        run_id, steps, done, status = "cpu", 3, True, "completed"

        def metrics(self):
            return []

        def progress(self):
            return 3, 3

        def log_tail(self, n):
            return ""

        def record(self):
            return record

    mon = RunMonitor(Finished(), refresh_seconds=60)
    assert "not comparable (CPU run)" in mon.result.value and "%" not in mon.result.value.split("step seconds")[0]
    assert "peak resident set size" in mon.result.value
    pred = [b for b in mon.result_figure.data if b.name == "predicted"][0]
    assert pred.y[0] is None
    mon.close()
