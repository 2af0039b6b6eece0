"""The allocator replay with PyTorch's expandable segments (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
:class:`workbench.allocsim.ExpandableAllocator`) beside every corpus run measured with them, and the default
allocator's replay of the same trace beside it.

Each run's allocation trace is the one ``benchmarks/alloc_sim.py`` replays (transformers models through
:func:`alloc_sim.trace_hf_deepspeed`, megatron-core models in a child process through
:func:`workbench.allocsim.mcore_replays`, with the plan's ``expandable_segments`` on); nothing is fitted: the policy is
PyTorch's (pages of 20 MiB in the large pool and 2 MiB in the small one, mapped as requests need them, one address
range per stream). Prints per run the measured peak reserved and its reserve above the allocated peak, and the
error of each replay's peak reserved.

    python benchmarks/alloc_sim_expandable.py [--corpus FILE ...]   # default: both corpora
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

CORPORA = (ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl", ROOT / "benchmarks" / "corpus" / "h100_runs.jsonl")


def expandable_records(paths=CORPORA) -> list:
    """The completed corpus records run with expandable segments on the transformers and megatron-core stacks."""
    from alloc_sim import HF_STACKS, MCORE_STACKS

    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if (rec.get("status") == "ok" and rec.get("peak_reserved_bytes")
                    and "expandable_segments:True" in (rec.get("pytorch_cuda_alloc_conf") or "")
                    and rec.get("stack") in HF_STACKS + MCORE_STACKS and not rec.get("allocator_cap_bytes")):
                out.append(rec)
    return out


def _peak(events: list, capacity: int, expandable: bool):
    """The replay's peak reserved bytes, or ``None`` when it runs out of the card (the run's capacity)."""
    from workbench import allocsim

    try:
        return allocsim.replay(events, capacity, expandable=expandable).peak_reserved_bytes
    except MemoryError:
        return None


def _mcore_peak(result: dict, run_id: str):
    """One :func:`workbench.allocsim.mcore_replays` result as :func:`_peak` gives it: the peak reserved bytes, or
    ``None`` when the replay ran out of the card; any other failure of the megatron-core trace stops the study."""
    if "error" not in result:
        return result["peak_reserved_bytes"]
    if result["error"].startswith("MemoryError"):
        return None
    raise SystemExit(f"{run_id}: the megatron-core trace failed: {result['error']}")


def _error(peak, measured: int):
    """``peak / measured - 1``; ``None`` for a replay that ran out of the card."""
    return None if peak is None else peak / measured - 1


def replayed(recs: list) -> list:
    """Per record ``(expandable, default)``: each replay's peak reserved bytes (``None``: out of memory)."""
    from alloc_sim import HF_STACKS, _capacity_bytes, corpus_runs, trace_hf_deepspeed

    from workbench import allocsim

    runs = corpus_runs(recs)
    out = [None] * len(recs)
    mcore = [i for i, rec in enumerate(recs) if rec["stack"] not in HF_STACKS]
    for i, rec in enumerate(recs):
        if i not in mcore:
            events, cap = trace_hf_deepspeed(rec), _capacity_bytes(runs[i])
            out[i] = tuple(_peak(events, cap, e) for e in (True, False))
    for i in mcore:
        run = runs[i]
        both = [allocsim.mcore_replays([(run["model"], run["cluster"], run["plan"].replace(expandable_segments=e))],
                                       capacity_bytes=_capacity_bytes(run))[0] for e in (True, False)]
        out[i] = tuple(_mcore_peak(o, recs[i]["run_id"]) for o in both)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, nargs="+", default=list(CORPORA),
                    help="corpus files (JSON lines) to read; default: the H200 and H100 corpora")
    args = ap.parse_args(argv)
    split = json.loads((ROOT / "benchmarks" / "accuracy_split.json").read_text())
    fit = set(split["fit"])
    recs = expandable_records(args.corpus)
    rows = []
    print(f"{'split':<5} {'run':<66} {'measured GiB':>12} {'reserve':>8} {'expandable':>11} {'default':>8}")
    for rec, (exp, dflt) in zip(recs, replayed(recs)):
        m, a = rec["peak_reserved_bytes"], rec["peak_allocated_bytes"]
        split_of = "fit" if rec["shape_id"] in fit else "test"
        rows.append((split_of, _error(exp, m), _error(dflt, m)))
        shown = ["OOM" if e is None else f"{e:+.1%}" for e in rows[-1][1:]]
        print(f"{split_of:<5} {rec['run_id'][:66]:<66} {m / 2**30:12.2f} {m / a - 1:+8.1%} {shown[0]:>11} "
              f"{shown[1]:>8}")
    print()
    for which in ("fit", "test"):
        sel = [r for r in rows if r[0] == which]
        if sel:
            for col, name in ((1, "expandable replay"), (2, "default replay")):
                errs = [abs(r[col]) for r in sel if r[col] is not None]
                oom = len(sel) - len(errs)
                said = f"  {oom} out of memory on the card, which ran" if oom else ""
                if errs:
                    print(f"{which:<5} {len(sel):3d} runs  {name:<18} peak reserved: median |error| "
                          f"{statistics.median(errs):5.1%}  worst {max(errs):5.1%}{said}")
                else:
                    print(f"{which:<5} {len(sel):3d} runs  {name:<18}{said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
