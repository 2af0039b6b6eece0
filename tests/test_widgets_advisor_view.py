"""AdvisorView in-process: checks as rows, the OOM ladder as a waterfall against capacity, throughput suggestions,
diagnostic commands, and a pasted log read by the log reader."""
import html
from pathlib import Path

import pytest

from widgets.advisor_view import AdvisorView, ladder_bars
from widgets.state import SetPlan, initial_state, reduce
from workbench.advisor import advise
from workbench.logreader import parse_log

GIB = 2**30
LOGS = Path(__file__).resolve().parent / "data" / "logs"


@pytest.fixture(scope="module")
def too_big():
    """The guide's 13B with no model parallel and micro batch 4 on 8 A100-80GB: about 520 GiB per GPU."""
    s = reduce(initial_state(), SetPlan(changes={"tensor_parallel": 1, "pipeline_parallel": 1,
                                                 "micro_batch_size": 4}))
    assert s.valid and not s.estimate.memory.fits
    return s


def test_checks_rows_and_commands_for_the_guide_example():
    s = initial_state()
    view = AdvisorView()
    view.show(s)
    expected = advise(s.model, s.cluster, s.plan)
    assert view.checks.value.count("<tr class='wb-check") == len(expected.findings)
    for f in expected.findings:
        assert f"wb-check-{f.status}" in view.checks.value and f.id in view.checks.value
    assert "fits, no step of the ladder" in view.ladder_note.value
    assert list(view.fig.data[0].x) == ["current plan"]
    assert "nsys profile" in view.commands.value and "NCCL_DEBUG=INFO" in view.commands.value
    for sug in expected.throughput:
        assert sug.term in view.throughput.value
    view.close()


def test_zero3_on_one_gpu_lists_its_hooks_not_data_parallel_traffic():
    from widgets.state import SetCluster

    s = reduce(initial_state(), SetCluster(changes={"gpu": "H200", "gpus_per_node": 1, "num_nodes": 1}))
    s = reduce(s, SetPlan(changes={"engine": "deepspeed", "zero_stage": 3, "tensor_parallel": 1,
                                   "pipeline_parallel": 1, "micro_batch_size": 1, "global_batch_size": 8}))
    assert s.valid
    view = AdvisorView()
    view.show(s)
    assert "<b>zero3_hooks</b>" in view.throughput.value and "<b>dp_comm</b>" not in view.throughput.value
    assert "zero3_host_bound" in view.checks.value  # the host finding fires beside it
    view.close()


def test_oom_ladder_waterfall(too_big):
    s = too_big
    view = AdvisorView()
    view.show(s)
    ladder = view.advice.oom_ladder
    assert ladder and ladder[-1].fits
    w = view.fig.data[0]
    assert w.measure[0] == "absolute" and all(m == "relative" for m in w.measure[1:])
    assert len(w.x) == len(ladder) + 1
    # the bars add up to the memory after each step
    running = 0.0
    for i, y in enumerate(w.y):
        running += y
        expected = s.estimate.memory.per_gpu_peak_bytes if i == 0 else ladder[i - 1].peak_bytes
        assert running == pytest.approx(expected / GIB)
    assert view.fig.layout.shapes[0].y0 == pytest.approx(s.estimate.memory.capacity_bytes / GIB)
    assert "fits" in w.text[-1] and "step time +" in w.text[-1]
    assert all(r.action.split(":")[0][:20] in view.ladder_note.value for r in ladder)
    # each rung with the ladder's own step number, and why a rung that does not fit falls short
    assert all(f"<b>{r.step}.</b> " in view.ladder_note.value for r in ladder)
    assert all(html.escape(r.limit) in view.ladder_note.value for r in ladder if r.plan is not None and not r.fits)
    view.close()


def test_ladder_bars_for_a_rung_that_cannot_apply():
    class Rung:
        step, action, plan, peak_bytes, fits, slowdown = 1, "micro batch is already 1", None, 0, False, 0.0

    bars = ladder_bars(10 * GIB, [Rung()])
    assert bars["y"] == [10.0, 0.0] and bars["text"][1] == "not applicable"


def test_pasted_log_is_read_and_matched(too_big):
    view = AdvisorView()
    view.show(initial_state())
    text = (LOGS / "megatron_bf16_tp4pp2.log").read_text()
    summary = view.read_log(text)
    assert summary == parse_log(text)
    assert f"{summary.to_dict()['progress_lines']} progress lines" in view.log_result.value
    assert view.advice.log_findings and "wb-advisor-log-findings" in view.log_result.value
    for f in view.advice.log_findings:
        assert f.id in view.log_result.value
    # an OOM log: the finding points at the ladder
    view.read_log((LOGS / "failed_oom_nccl.log").read_text())
    assert "out-of-memory errors" in view.log_result.value
    # clearing the box clears the log part
    view.read_log("")
    assert view.log_result.value == "" and view.advice.log_findings == ()
    view.close()


def test_oom_waterfall_is_readable():
    """Savings green, labels wrapped and whole, each step's text above its bar, capacity label off the bars."""
    from widgets.state import SetPlan, initial_state, reduce

    state = reduce(initial_state(), SetPlan(changes={"tensor_parallel": 1, "pipeline_parallel": 1,
                                                     "micro_batch_size": 4}))
    view = AdvisorView()
    view.show(state)
    trace = view.fig.data[0]
    assert trace.decreasing.marker.color == "#2ca02c" and trace.textposition == "none"
    last = view.advice.oom_ladder[-1]
    assert "".join(trace.x[-1].split("<br>")).replace(" ", "") == f"{last.step}. {last.action}".replace(" ", "")
    texts = [a.text for a in view.fig.layout.annotations]
    assert all(t in texts for t in trace.text)
    capacity = [a for a in view.fig.layout.annotations if "capacity" in (a.text or "")]
    assert capacity and capacity[0].xref == "paper" and capacity[0].x > 1
    view.close()


def test_host_bound_zero3_row():
    """A thin-layer ZeRO-3 plan: the advisor's host-bound finding is a warn row with its options."""
    s = initial_state(preset="gpt3-125m", cluster={"gpu": "H200", "gpus_per_node": 1, "num_nodes": 1},
                      plan={"engine": "deepspeed", "zero_stage": 3, "tensor_parallel": 1, "pipeline_parallel": 1,
                            "micro_batch_size": 1, "global_batch_size": 8})
    view = AdvisorView()
    view.show(s)
    row = [r for r in view.checks.value.split("<tr ") if "zero3_host_bound" in r]
    assert len(row) == 1 and "wb-check-warn" in row[0]
    assert "host-bound" in row[0] and "stage3_param_persistence_threshold" in row[0]
    view.close()


def test_a_pasted_out_of_memory_message_is_read_whole(too_big):
    """The log box reads a CUDA out-of-memory message as the device stood at the failure and names its cause."""
    view = AdvisorView()
    view.show(too_big)
    view.log_text.value = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has "
                           "a total capacity of 79.11 GiB of which 1.21 GiB is free. Process 4711 has 6.00 GiB memory "
                           "in use. Including non-PyTorch memory, this process has 71.89 GiB memory in use. Of the "
                           "allocated memory 69.20 GiB is allocated by PyTorch, and 1.95 GiB is reserved by PyTorch "
                           "but unallocated.")
    view.read_log()
    text = html.unescape(view.log_result.value)
    assert "log_oom_device" in text and "other processes 6.00 GiB (PID 4711 6.00 GiB)" in text
    assert "other processes held 6.00 GiB of this GPU" in text
    view.close()
