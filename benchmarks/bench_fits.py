"""The verdict users act on, checked: for every measured run at the edge of its GPU, what ``workbench estimate``
says ("fits" or not, judged on the held-out error band's upper side) beside what happened on the GPU.

A run is at the edge when it ran out of memory, failed for want of device memory (a CUDA or NCCL allocation failure),
or filled at least ``--edge`` (default 90 %) of what CUDA lets a process use (the record's own
``torch.cuda.mem_get_info`` total). Each is estimated as the CLI estimates it: with the caching allocator replayed
where the plan is in the replay's scope (:func:`workbench.allocsim.auto_replay_skipped`: one GPU, DeepSpeed ZeRO-0 to
3 of a transformers model from its config, or a dense megatron-core model; megatron-core's DDP), else with the
constant reserve. Plans judged "fits" that then failed are the dangerous cell (an OOM the planner sent a user into);
plans judged "does not fit" that ran are the conservative one (a plan the planner kept a user from).

Run: ``python benchmarks/bench_fits.py`` (both corpora, a minute or two on two cores: each edge run is traced and
replayed); ``--corpus FILE ...`` for others. Nothing is fitted.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CORPORA = (ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl", ROOT / "benchmarks" / "corpus" / "h100_runs.jsonl")
GiB = 2**30
MEMORY_FAILURES = ("out of memory", "calloc", "cudaerrormemoryallocation")
"""Lower-case pieces of a failed run's error that mean it wanted device memory it could not have: PyTorch's
``CUDA out of memory``, NCCL's ``Failed to CUDA calloc`` (``ncclUnhandledCudaError`` when a collective or a
communicator cannot get memory outside the caching allocator), CUDA's ``cudaErrorMemoryAllocation``."""


def failed_for_memory(rec: dict) -> bool:
    """Whether a record ran out of device memory: ``status`` ``"oom"``, or another failure whose error names a device
    allocation that failed (:data:`MEMORY_FAILURES`)."""
    if rec.get("status") == "oom":
        return True
    if rec.get("status") in ("ok", "completed"):
        return False
    return any(piece in (rec.get("error") or "").lower() for piece in MEMORY_FAILURES)


def device_bytes(rec: dict) -> int:
    """The whole device a record's run held at its peak: peak reserved plus memory outside the allocator (0 when a
    failed run recorded neither)."""
    return int((rec.get("peak_reserved_bytes") or 0) + (rec.get("outside_allocator_bytes") or 0))


def total_bytes(rec: dict) -> int:
    """What CUDA let the record's process use (its ``torch.cuda.mem_get_info`` total; an H200's for records from
    before it was kept)."""
    from workbench.allocsim import H200_BYTES

    return int((rec.get("provenance") or {}).get("gpu_total_bytes") or H200_BYTES)


def at_edge(rec: dict, edge: float) -> bool:
    """A default-allocator record (no ``cap_bytes``) that failed for memory or filled ``edge`` of its GPU."""
    if (rec.get("options") or {}).get("cap_bytes"):
        return False
    return failed_for_memory(rec) or device_bytes(rec) >= edge * total_bytes(rec)


def cli_estimate(rec: dict) -> tuple:
    """``(estimate, replayed)``: the record's plan on its GPU estimated as ``workbench estimate`` does, with the caching
    allocator replayed where the plan is in the replay's scope (:func:`workbench.allocsim.auto_replay_skipped`), else
    the constant reserve. A failed record is described as if it had run: its specs only."""
    from corpus.describe import scored_specs
    from workbench.allocsim import auto_replay_skipped, is_megatron
    from workbench.estimate import estimate

    model, cluster, plan = scored_specs(rec)
    config = rec.get("hf_config")
    skipped = auto_replay_skipped(model, plan, has_config=bool(config))
    simulate = None if skipped else (True if is_megatron(model) else config)
    return estimate(model, cluster, plan, simulate_allocator=simulate), simulate is not None


def verdict(rec: dict) -> dict:
    """What ``workbench estimate`` says of the record's plan on its GPU, beside what the GPU did."""
    est, replayed = cli_estimate(rec)
    memory = est.memory
    failed = failed_for_memory(rec)
    return dict(run_id=rec["run_id"], split=split_of(rec), gpu=est.cluster.gpu.name, replayed=replayed,
                estimate=memory.per_gpu_peak_bytes, band_high=memory.band_high_bytes,
                capacity=memory.capacity_bytes, point_fits=memory.per_gpu_peak_bytes <= memory.capacity_bytes,
                fits=bool(memory.fits_gpu), failed=failed, measured=device_bytes(rec),
                outcome="ran" if not failed else "out of memory" if rec.get("status") == "oom" else failure_line(rec))


def failure_line(rec: dict) -> str:
    """The line of a failed record's error that names the allocation that failed (else its first line), short."""
    text = (rec.get("error") or "").splitlines() or [""]
    line = next((ln for ln in text if any(piece in ln.lower() for piece in MEMORY_FAILURES)), text[0])
    return line.strip()[:70]


@functools.lru_cache(maxsize=1)
def fit_shapes() -> frozenset:
    """The fit split's model shapes (``benchmarks/accuracy_split.json``), read once."""
    return frozenset(json.loads((ROOT / "benchmarks" / "accuracy_split.json").read_text())["fit"])


def split_of(rec: dict) -> str:
    """``fit`` when the record's model shape is in the fit split, else ``test``."""
    return "fit" if rec.get("shape_id") in fit_shapes() else "test"


def lines(rows: list) -> list:
    """The table and its two-by-two summary."""
    out = [f"{'run':62s} {'split':5s} {'GPU':9s} {'estimate (+band)':>17s} {'verdict':>13s} {'measured':>9s} {'of':>7s}  what happened"]
    for r in rows:
        said = "fits" if r["fits"] else ("point only" if r["point_fits"] else "does not fit")
        measured = f"{r['measured'] / GiB:9.2f}" if r["measured"] else f"{'-':>9s}"
        out.append(f"{r['run_id'][:62]:62s} {r['split']:5s} {r['gpu']:9s} {r['estimate'] / GiB:8.2f} (+{r['band_high'] / GiB:4.2f}) "
                   f"{said:>13s} {measured} {r['capacity'] / GiB:7.2f}  {r['outcome']}"
                   + ("" if r["replayed"] else "  [constant reserve]"))
    cell = lambda fits, failed: sum(1 for r in rows if r["fits"] == fits and r["failed"] == failed)  # noqa: E731
    out += ["", f"{len(rows)} runs at the edge: said fits and ran {cell(True, False)}, said fits and failed "
                f"{cell(True, True)} (the dangerous cell), said does not fit and failed {cell(False, True)}, said does "
                f"not fit and ran {cell(False, False)} (conservative; "
                f"{sum(1 for r in rows if not r['fits'] and not r['failed'] and r['point_fits'])} of them fit on the "
                f"point estimate and were turned down by the band's upper side)"]
    ran = [r for r in rows if not r["failed"] and r["measured"]]
    if ran:
        errs = sorted(r["estimate"] / r["measured"] - 1 for r in ran)
        out.append(f"whole device of the {len(ran)} that ran: median |error| "
                   f"{statistics.median(abs(e) for e in errs):.1%}, from {errs[0]:+.1%} to {errs[-1]:+.1%}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="+", type=Path, default=list(CORPORA), help="corpus files (default both)")
    ap.add_argument("--edge", type=float, default=0.9,
                    help="a run that held at least this fraction of its GPU counts as at the edge (default 0.9)")
    args = ap.parse_args(argv)
    if not 0 < args.edge <= 1:
        ap.error(f"--edge={args.edge} must be in (0, 1]")
    recs = [json.loads(line) for path in args.corpus for line in path.read_text().splitlines() if line.strip()]
    edge = [r for r in recs if r.get("run_id") and at_edge(r, args.edge)]
    print("\n".join(lines([verdict(r) for r in edge])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
