"""The guide's 13B layout (TP4 x PP2, interleaved) at tiny width on 8 CPU processes: the same losses as one process.
benchmarks/guide_13b_layout_cpu.py runs the other layouts.

Eight processes on a 2-core CI machine take about a minute; the default suite already runs an 8-process pipeline with
tensor parallelism (tests/test_runs_hybrid_pipeline.py) and interleaved stages on 2 processes
(tests/test_runs_launcher.py), so this one runs with ``WORKBENCH_LONG_TESTS=1`` (``make test-long``)."""
import os

import pytest

from runs_support import cpu_cluster, plan
from workbench.catalog import model
from workbench.runs import RunStore, launch

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("WORKBENCH_LONG_TESTS") != "1",
                                 reason="8-process layout test: set WORKBENCH_LONG_TESTS=1 (make test-long)")]

# 40 heads of head_dim 2: TP4 splits them 10 per rank; 8 layers: PP2 x 2 virtual chunks of 2 layers
TINY_13B = model("gpt3-13b").replace(num_layers=8, hidden_size=80, head_dim=2, ffn_hidden_size=320, vocab_size=512,
                                     seq_length=32, hidden_dropout=0.0, attention_dropout=0.0)


def test_tp4_pp2_interleaved_on_8_processes_equals_world_size_1(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    records = {}
    for name, p in (("one", plan(1, engine="megatron", global_batch_size=4)),
                    ("tp4pp2vp2", plan(8, engine="megatron", tensor_parallel=4, pipeline_parallel=2,
                                       virtual_pipeline=2, global_batch_size=4))):
        r = launch(TINY_13B, cpu_cluster(p.world_size), p, steps=2, nproc=p.world_size, store=store,
                   run_dir=tmp_path / name, timeout_seconds=300)
        r.wait()
        records[name] = rec = r.record()
        assert rec["status"] == "completed", (rec["reason"], r.log_tail(30))
    assert len(records["one"]["losses"]) == 2
    assert records["tp4pp2vp2"]["losses"] == pytest.approx(records["one"]["losses"], rel=1e-5, abs=1e-5)
    assert set(records["tp4pp2vp2"]["measured"]["peak_memory_bytes"]) == {str(r) for r in range(8)}
