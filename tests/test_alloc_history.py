"""benchmarks/alloc_history.py: a recorded allocator history replayed through the workbench's policy."""
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import pytest  # noqa: E402

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
    assert reqs == [("malloc", 0, 30 * MiB, 0), ("free", 0, 30 * MiB), ("malloc", 0, 30 * MiB, 0)]


def test_policy_line_sets_the_replay_beside_the_measured_peak(tmp_path):
    # two 30 MiB blocks, the first freed before a 50 MiB request that cannot reuse it: 30 + 30 (2 MiB-rounded)
    # then 50 more while 30 stay allocated
    events = [["alloc", 1, 30 * MiB, 0], ["alloc", 2, 30 * MiB, 0], ["free_completed", 1, 30 * MiB, 0],
              ["alloc", 3, 50 * MiB, 0]]
    path = _history(tmp_path, events, 80 * MiB, 110 * MiB)
    lines = alloc_history.compare(path, with_trace=False)
    assert "reserved 0.11 GiB" in lines[1] and "+0.00% against the GPU" in lines[1]
    assert "3 requests on 1 stream(s)" in lines[0]


def test_a_block_still_used_on_another_stream_is_uncounted_when_freed_and_returned_later(tmp_path):
    """PyTorch counts a block freed while another stream uses it (``record_stream``) out of the allocated bytes at
    the program's free (``free_requested``) and returns it to the pool when that stream is done
    (``free_completed``): a request between the two cannot reuse it, and the allocated peak does not count it."""
    events = [["alloc", 1, 30 * MiB, 0], ["free_requested", 1, 30 * MiB, 0], ["alloc", 2, 30 * MiB, 0],
              ["free_completed", 1, 30 * MiB, 0]]
    hist = alloc_history.load_history(_history(tmp_path, events, 30 * MiB, 60 * MiB))
    reqs = alloc_history.real_requests(hist)
    assert reqs == [("malloc", 1, 30 * MiB, 0), ("release", 1, 30 * MiB), ("malloc", 2, 30 * MiB, 0),
                    ("free", 1, 30 * MiB)]
    from workbench.allocsim import replay

    a = replay(reqs)
    assert (a.peak_allocated_bytes, a.peak_reserved_bytes) == (30 * MiB, 60 * MiB)


def test_a_run_of_segment_frees_is_one_empty_cache(tmp_path):
    """``torch.cuda.empty_cache()`` shows in a history as one ``segment_free`` per released segment: the replay
    empties its cache once there, and a 30 MiB block freed before it no longer holds its segment."""
    events = [["alloc", 1, 30 * MiB, 0], ["free_completed", 1, 30 * MiB, 0], ["segment_free", 1, 30 * MiB, 0],
              ["segment_free", 2, 20 * MiB, 0], ["alloc", 3, 50 * MiB, 0]]
    hist = alloc_history.load_history(_history(tmp_path, events, 50 * MiB, 50 * MiB))
    reqs = alloc_history.real_requests(hist)
    assert reqs == [("malloc", 1, 30 * MiB, 0), ("free", 1, 30 * MiB), ("empty_cache", 0, 0),
                    ("malloc", 3, 50 * MiB, 0)]
    from workbench.allocsim import replay

    assert replay(reqs).peak_reserved_bytes == 50 * MiB  # without the empty_cache: 30 + 50


def test_every_recorded_history_replays_to_its_measured_reserve_to_the_byte():
    """The allocator policy of workbench.allocsim over each real history recorded on the H200
    (``benchmarks/results/alloc_history``; the ZeRO-3 ones on two streams): the measured peaks, to the byte."""
    from workbench.allocsim import replay

    paths = sorted((ROOT / "benchmarks" / "results" / "alloc_history").glob("*.json.gz"))
    assert len(paths) >= 11
    for path in paths:
        hist = alloc_history.load_history(path)
        a = replay(alloc_history.real_requests(hist), capacity_bytes=1 << 62)
        assert (a.peak_allocated_bytes, a.peak_reserved_bytes) == (hist["peak_allocated_bytes"],
                                                                   hist["peak_reserved_bytes"]), path.name


def test_a_stack_without_a_trace_is_named():
    with pytest.raises(ValueError, match="stack 'mlm' has no trace"):
        alloc_history.replay_trace({"run_id": "mlm/x", "stack": "mlm"})
