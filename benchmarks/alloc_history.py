"""Which half of the allocator replay a reserve error comes from: the allocator policy or the allocation trace.

``benchmarks/corpus/measure.py`` with ``CORPUS_MEMORY_HISTORY=DIR`` records the caching allocator's real event history
of a run on the GPU (``torch.cuda.memory._record_memory_history``: every block allocated and freed, every segment
cut, no stack traces). This script

1. replays that real history through the workbench's allocator policy (:class:`workbench.allocsim.CachingAllocator`)
   and sets its peak reserved beside the one the GPU measured: equal means the policy is PyTorch's for this run, and
   any error of the replay comes from the trace it is given;
2. sets the replay's own trace of the same configuration (:func:`workbench.allocsim.trace_hf_deepspeed`, or
   :func:`workbench.allocsim.trace_mcore_deepspeed` / :func:`workbench.allocsim.trace_mcore_ddp` in a child process
   without CUDA) beside the real history: the
   reserve each gives, and the request sizes of at least 4 MiB whose counts differ (what the trace misses or adds).

    CORPUS_MEMORY_HISTORY=OUT/hist python benchmarks/corpus/measure.py --per-process --groups alloc-history \\
        --out OUT/x.jsonl                                          # on the GPU machine
    python benchmarks/alloc_history.py benchmarks/results/alloc_history/*.json.gz   # anywhere (torch, transformers,
                                                                                     # megatron-core for the traces)

The histories of the corpus groups ``alloc-history`` to ``alloc-history6`` (fit-split configurations, one H200,
2026-12-02 and 12-03; from ``alloc-history3`` on with each allocation's innermost Python frames) are kept in
``benchmarks/results/alloc_history/``, with the records of the fit shapes measured only with their history
(``alloc-history6``: ``alloc_history6_records.jsonl``); the printout in ``benchmarks/results/alloc_history_h200.txt``.
Those of ``overlap-offload-history`` and ``z3-offload-wide-history`` (one H100, 2026-12-05) are in ``offload_h100/``
with their records, the printout in ``benchmarks/results/alloc_history_offload_h100.txt``. Those of ``trainer-history``
(final59's Trainer runs, one H100, 2026-12-06) are in ``trainer_h100/`` with their records, the printout in
``benchmarks/results/alloc_history_trainer_h100.txt``. Those of ``gelu-fit-history`` (a megatron-core GeLU model with
dropout 0.1, one H100, 2026-12-07) are in ``gelu_fit_h100/`` with their record, the printout in
``benchmarks/results/alloc_history_gelu_fit_h100.txt``.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
HISTORY_RECORDS = ROOT / "benchmarks" / "results" / "alloc_history"
"""Where the histories and the records of runs measured only with their history (``*.jsonl``) are kept."""
MiB, GiB = 2 ** 20, 2 ** 30
SIZE_FLOOR = 4 * MiB
"""Request sizes below this are left out of the size comparison (the small pool's 2 MiB segments)."""


def load_history(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def real_requests(history: dict) -> list:
    """The history as the replay's events: ``("malloc", address, bytes, stream)`` for each block allocated, ``("free",
    address, bytes)`` when the allocator got it back (``free_completed``: a block freed while another stream still
    used it returns later, and ``("release", address, bytes)`` marks the program's free before that, when PyTorch
    already counts it out of the allocated bytes), and ``("empty_cache", 0, 0)`` where the program emptied the cache (a run of
    ``segment_free`` events: ``torch.cuda.empty_cache()`` releasing the wholly free segments)."""
    out, ids = [], {}
    events = history["events"]
    for i, (action, addr, size, stream) in enumerate(events):
        if action == "alloc":  # streams numbered as they first ask (0: the default stream, which asks first)
            out.append(("malloc", addr, size, ids.setdefault(stream, len(ids))))
        elif action == "free_requested" and not (i + 1 < len(events) and events[i + 1][0] == "free_completed"
                                                 and events[i + 1][1] == addr):
            out.append(("release", addr, size))  # still used on another stream: uncounted now, returned later
        elif action == "free_completed":
            out.append(("free", addr, size))
        elif action == "segment_free" and (not out or out[-1][0] != "empty_cache"):
            out.append(("empty_cache", 0, 0))
    return out


def streams(history: dict) -> collections.Counter:
    return collections.Counter(stream for action, _a, _s, stream in history["events"] if action == "alloc")


def source_record(run_id: str) -> dict:
    """The corpus record (H200, else H100) of the configuration a history re-measured (its id without ``/hist``),
    or, for a shape measured only with its history (``alloc-history6``), the history run's own record kept beside the
    histories (:data:`HISTORY_RECORDS`)."""
    want = run_id.replace("/hist", "")
    for corpus in (CORPUS, CORPUS.with_name("h100_runs.jsonl")):  # the H200 corpus first, then the H100 one
        for line in corpus.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("run_id") == want and rec.get("status") == "ok":
                return rec
    for path in sorted(HISTORY_RECORDS.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("run_id") == run_id and rec.get("status") == "ok":
                return rec
    raise KeyError(f"{want}: no completed corpus record to trace")


def replay_trace(rec: dict, sdpa_kernel: str = "cudnn") -> list:
    """The replay's own allocation events of a corpus record: its transformers trace here, or its megatron-core
    trace (under DeepSpeed, ``mcore-ds``, or megatron-core's own DDP, ``mcore-ddp``) in a child process that does not
    see CUDA (:func:`workbench.allocsim.mcore_traces`)."""
    from corpus.describe import HF_STACKS

    if rec["stack"] in HF_STACKS:
        import alloc_sim

        return alloc_sim.trace_hf_deepspeed(rec, sdpa_kernel)
    if rec["stack"] not in ("mcore-ds", "mcore-ddp"):
        raise ValueError(f"{rec['run_id']}: stack {rec['stack']!r} has no trace ({', '.join(HF_STACKS)}, mcore-ds, "
                         f"mcore-ddp)")
    from bench_accuracy import corpus_run
    from workbench.allocsim import mcore_traces

    run = corpus_run(rec)
    (events,) = mcore_traces([(run["model"], run["cluster"], run["plan"])], steps=int(rec.get("steps") or 6))
    if isinstance(events, dict):
        raise RuntimeError(f"{rec['run_id']}: megatron-core trace failed: {events['error']}")
    return events


def request_sizes(events: list) -> collections.Counter:
    """How many requests of each rounded size (bytes) the events make, from :data:`SIZE_FLOOR` up."""
    from workbench.allocsim import round_size

    return collections.Counter(round_size(size) for kind, _key, size, *_stream in events
                               if kind == "malloc" and round_size(size) >= SIZE_FLOOR)


def compare(path: Path, with_trace: bool = True, sdpa_kernel: str = "cudnn") -> list[str]:
    from workbench.allocsim import replay

    hist = load_history(path)
    measured_alloc, measured_res = hist["peak_allocated_bytes"], hist["peak_reserved_bytes"]
    real = real_requests(hist)
    policy = replay(real, capacity_bytes=1 << 62)
    lines = [f"{hist['run_id']}: measured peak allocated {measured_alloc / GiB:.2f} GiB, reserved "
             f"{measured_res / GiB:.2f} GiB (reserve {measured_res / measured_alloc - 1:.1%}); "
             f"{sum(1 for e in real if e[0] == 'malloc')} requests on {len(streams(hist))} stream(s)",
             f"  policy replayed over the real history: allocated {policy.peak_allocated_bytes / GiB:.2f} GiB, "
             f"reserved {policy.peak_reserved_bytes / GiB:.2f} GiB (reserve {policy.reserve_fraction:.1%}, "
             f"{policy.peak_reserved_bytes / measured_res - 1:+.2%} against the GPU)"]
    if not with_trace:
        return lines
    rec = source_record(hist["run_id"])
    events = replay_trace(rec, sdpa_kernel)
    own = replay(events, capacity_bytes=1 << 62)
    lines.append(f"  the replay's own trace: allocated {own.peak_allocated_bytes / GiB:.2f} GiB, reserved "
                 f"{own.peak_reserved_bytes / GiB:.2f} GiB (reserve {own.reserve_fraction:.1%}); "
                 f"{sum(1 for e in events if e[0] == 'malloc')} requests")
    ra, sa = request_sizes(real), request_sizes(events)
    diff = [(s, ra[s], sa[s]) for s in sorted(set(ra) | set(sa), reverse=True) if ra[s] != sa[s]]
    lines.append("  request sizes (MiB) whose counts differ, real / traced: "
                 + (", ".join(f"{s / MiB:g} {r}/{t}" for s, r, t in diff[:16]) or "none")
                 + (f" (+{len(diff) - 16} more)" if len(diff) > 16 else ""))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("histories", nargs="*", type=Path)
    ap.add_argument("--policy-only", action="store_true", help="skip the replay's own traces")
    from workbench.allocsim import SDPA_KERNELS

    ap.add_argument("--sdpa-kernel", default="cudnn", choices=SDPA_KERNELS,
                    help="the kernel the transformers traces put behind sdpa (workbench.allocsim.SDPA_KERNELS)")
    args = ap.parse_args(argv)
    if not args.histories:
        ap.error("give the history files (benchmarks/results/alloc_history/*.json.gz)")
    for path in args.histories:
        for line in compare(path, with_trace=not args.policy_only, sdpa_kernel=args.sdpa_kernel):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
