"""The calibration panel, in-process: a tiny CPU calibration fills the figure and the table; save writes a profile
that loads back."""
from widgets.calibrate_panel import CalibratePanel
from workbench.calibrate import load_profile


def test_panel_runs_a_tiny_calibration_and_saves(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    panel = CalibratePanel(name="panel-test", nproc=1, model="gpt3-125m",
                           settings=dict(tensor_parallel=(4,), tokens=(16, 64), gemm_repeats=1, precisions=("fp32",),
                                         copy_bytes=2**20, cpu_adam_params=10_000))
    assert "datasheet" in panel.status.value
    panel.run(blocking=True)
    assert panel.profile is not None and "panel-test" in panel.status.value
    names = [t.name for t in panel.fig.data]
    assert "fp32 measured" in names and "fp32 fitted curve" in names and "fp32 peak (catalog)" in names
    assert "GEMM fp32 best" in panel.table.value and "collectives skipped" in panel.table.value
    assert "gemm fp32" in panel.log.value and not panel.save_button.disabled
    path = panel.save()
    assert load_profile("panel-test") == panel.profile and path.exists()
    panel.name.value = "bad name"
    panel.run(blocking=True)
    assert "error: profile name=" in panel.status.value and "use letters" in panel.status.value
    panel.close()
