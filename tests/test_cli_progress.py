"""Progress on stderr: ``run`` prints its run id first then per-step progress; ``nb sweep`` counts runs;
``calibrate`` counts measurements; a CPU's GEMM rate is not printed as 0.0 TFLOP/s. stdout stays the result."""
import json
import types

import pytest

from workbench import cli
from workbench.calibrate.measure import flops_rate_text


def test_cpu_gemm_rates_keep_their_digits():
    assert flops_rate_text(0.0123) == "12.3 GFLOP/s"
    assert flops_rate_text(0.0004) == "0.4 GFLOP/s"
    assert flops_rate_text(312.4) == "312.4 TFLOP/s"


class FakeRun:
    """A launched run that reports one step per wait."""

    run_id = "20261130-000000-abcd"
    log_path = "/tmp/log.txt"

    def __init__(self, steps):
        self.steps, self.n = steps, 0

    @property
    def done(self):
        return self.n >= self.steps

    def wait(self, timeout=None):
        self.n = min(self.steps, self.n + 1)
        return "completed" if self.done else "running"

    def progress(self):
        return self.n, self.steps

    def record(self):
        return {"run_id": self.run_id, "status": "completed", "losses": [6.2, 6.1, 6.0],
                "measured": {"peak_memory_bytes": {"0": 2**20}, "median_step_seconds": 0.1},
                "predicted": {"per_gpu_peak_bytes": 2**20, "allocated_bytes": 2**19, "step_seconds": 0.01},
                "run_dir": "/tmp/run", "log_path": self.log_path}


def test_run_prints_its_id_first_then_progress_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr("workbench.runs.launcher.cuda_available", lambda: False)
    monkeypatch.setattr("workbench.runs.launch", lambda *a, **k: FakeRun(k["steps"]))
    assert cli.main(["run", "--tiny", "--nproc", "2", "--steps", "3", "--precision", "fp32", "--json"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)  # stdout: the record only
    assert record["run_id"] == FakeRun.run_id and record["predicted"]["allocated_bytes"] == 2**19
    first = err.strip().splitlines()[0]
    assert first.startswith(f"run {FakeRun.run_id}: started") and "3 steps" in first
    assert "3/3" in err  # the progress bar reached the last step


def test_sweep_and_calibrate_progress(monkeypatch, capsys, tmp_path):
    from workbench.commands import calibrate as cal_cmd
    from workbench.commands import nb as nb_cmd

    def fake_sweep(notebook, combos, *, on_run_done=None, **kw):
        for _ in combos:
            on_run_done(types.SimpleNamespace(status="ok", duration_seconds=1.0))
        return types.SimpleNamespace(rows=(), runs=(), failed=0, csv_path="a", parquet_path="b", html_path="c")

    monkeypatch.setattr(nb_cmd, "run_sweep", fake_sweep)
    monkeypatch.setattr(nb_cmd, "load_grid", lambda path: [{"a": 1}, {"a": 2}])
    monkeypatch.setattr(nb_cmd.JobStore, "recover_interrupted", lambda self: None)
    monkeypatch.setattr(nb_cmd, "check_parameters", lambda notebook, combo: combo)  # no notebook on disk here
    assert cli.main(["nb", "sweep", "x.ipynb", "--grid", "g.yaml"]) == 0
    err = capsys.readouterr().err
    assert "sweep" in err and "2/2" in err

    def fake_calibrate(settings, progress):
        progress("gemm bf16 qkv: 12.3 GFLOP/s")
        progress("memcpy: 5 GB/s")
        return None  # as a non-zero rank: nothing saved

    monkeypatch.setattr("workbench.calibrate.calibrate", fake_calibrate)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    assert cli.main(["calibrate", "--out", "t"]) == 0
    out, err = capsys.readouterr()
    assert "gemm bf16 qkv: 12.3 GFLOP/s" in err and "2 measurements" in err and out == ""


def test_cpu_run_explains_predicted_vs_measured_step(capsys):
    from workbench.commands.run import print_summary, summary
    from workbench.runs.compare import CPU_STEP_NOTE

    record = FakeRun(1).record()
    record["predicted"]["memory_comparable"] = False
    print_summary(summary(record))
    out = capsys.readouterr().out
    assert f"note: {CPU_STEP_NOTE}" in out and "per-operation overhead" in out


def test_long_single_calls_show_elapsed_time_only_when_slow(capsys):
    import time

    from workbench.commands.common import working

    with working("quick", after_seconds=0.5) as w:
        pass
    assert not w.shown and capsys.readouterr().err == ""
    with working("plan: searching", after_seconds=0.05, interval_seconds=0.02) as w:
        time.sleep(0.3)
    assert w.shown and "plan: searching" in capsys.readouterr().err
