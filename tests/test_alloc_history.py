"""benchmarks/alloc_history.py: a recorded allocator history replayed through the workbench's policy."""
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import alloc_history  # noqa: E402

MiB = 2**20


def _history(tmp_path, events, peak_allocated, peak_reserved):
    path = tmp_path / "h.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"run_id": "hf-ds/x/z2/sdpa/hist/mbs1", "peak_allocated_bytes": peak_allocated,
                   "peak_reserved_bytes": peak_reserved, "events": events, "segments": []}, fh)
    return path


def test_real_requests_follow_completed_frees_only(tmp_path):
    events = [["segment_alloc", 0, 40 * MiB, 0], ["alloc", 0, 30 * MiB, 0], ["free_requested", 0, 30 * MiB, 0],
              ["free_completed", 0, 30 * MiB, 0], ["alloc", 0, 30 * MiB, 0]]
    reqs = alloc_history.real_requests(alloc_history.load_history(_history(tmp_path, events, 30 * MiB, 40 * MiB)))
    assert reqs == [("malloc", 0, 30 * MiB), ("free", 0, 30 * MiB), ("malloc", 0, 30 * MiB)]


def test_policy_line_sets_the_replay_beside_the_measured_peak(tmp_path):
    # two 30 MiB blocks, the first freed before a 50 MiB request that cannot reuse it: 30 + 30 (2 MiB-rounded)
    # then 50 more while 30 stay allocated
    events = [["alloc", 1, 30 * MiB, 0], ["alloc", 2, 30 * MiB, 0], ["free_completed", 1, 30 * MiB, 0],
              ["alloc", 3, 50 * MiB, 0]]
    path = _history(tmp_path, events, 80 * MiB, 110 * MiB)
    lines = alloc_history.compare(path, with_trace=False)
    assert "reserved 0.11 GiB" in lines[1] and "+0.00% against the GPU" in lines[1]
    assert "3 requests on 1 stream(s)" in lines[0]
