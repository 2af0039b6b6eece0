from workbench.runs.compare import comparison_rows, relative_error
from workbench.runs.launcher import CPU_MEMORY_NOT_COMPARABLE, predicted_numbers

from runs_support import TINY, cpu_cluster, plan


def _record(predicted):
    return {"predicted": predicted, "measured": {"peak_memory_bytes": {"0": 300 * 2**20, "1": 310 * 2**20},
                                                 "median_step_seconds": 0.5}}


def test_gpu_record_compares_allocated_bytes_and_step_time():
    rows = comparison_rows(_record({"per_gpu_peak_bytes": 400 * 2**20, "allocated_bytes": 341 * 2**20,
                                    "step_seconds": 0.45, "memory_comparable": True}))
    mem, step = rows
    assert mem["predicted"] == 341 * 2**20 and mem["measured"] == 310 * 2**20 and mem["note"] == ""
    assert mem["error"] == relative_error(341, 310) and abs(mem["error"] - 0.1) < 1e-12
    assert abs(step["error"] - (-0.1)) < 1e-12 and step["note"] == ""


def test_cpu_record_marks_memory_not_comparable():
    predicted = predicted_numbers(TINY, cpu_cluster(2), plan(2), on_gpu=False)
    assert predicted["memory_comparable"] is False
    assert predicted["memory_not_comparable_reason"] == CPU_MEMORY_NOT_COMPARABLE
    assert predicted["per_gpu_peak_bytes"] > 0  # the prediction itself is kept
    mem, step = comparison_rows(_record(predicted))
    assert mem["error"] is None and mem["note"].startswith("not comparable: CPU run")
    assert step["note"] == ""
    assert predicted_numbers(TINY, cpu_cluster(2), plan(2), on_gpu=True)["memory_comparable"] is True


def test_records_without_the_flag_still_compare():
    mem, _ = comparison_rows(_record({"per_gpu_peak_bytes": 620 * 2**20, "step_seconds": None}))
    assert mem["note"] == "" and abs(mem["error"] - 1.0) < 1e-12
