"""How sure the estimate says it is, checked: how often a measured run fell inside the held-out error band that
``workbench estimate`` prints beside its figures, below it, or above it.

The band (catalog ``error_band.json``, written by ``bench_accuracy.py --write-band``) is the 10th and 90th percentile
of the H200 test split's residuals per engine and regime, so on those runs it holds about 80 % by construction. On any
other corpus (the H100's, whose runs never wrote it) it is a prediction like the estimate itself: this script says
whether it holds there. Each run is estimated as the CLI estimates it (:func:`bench_fits.cli_estimate`: the
caching allocator replayed where the plan is in the replay's scope, else the constant reserve). The device's upper side
is the one ``fits`` is judged on: a run above it is an under-estimate larger than the band allowed.

Run: ``python benchmarks/band_coverage.py`` (the H100 corpus, a few minutes on two cores: each run in the replay's
scope is traced and replayed); ``--corpus FILE ...`` for others; ``--split fit|test|all`` (default test). Nothing is
fitted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

DEFAULT_CORPUS = ROOT / "benchmarks" / "corpus" / "h100_runs.jsonl"


def coverage_row(rec: dict) -> dict | None:
    """One completed corpus record beside its estimate and band: device bytes and step seconds, measured, estimated,
    and the band's low and high sides (absolute, as the estimate carries them); ``None`` for a run that did not
    complete or measured neither."""
    from bench_accuracy import steady_step_seconds
    from bench_fits import cli_estimate, device_bytes, split_of

    if rec.get("status") != "ok":
        return None
    est, replayed = cli_estimate(rec)
    mem = est.memory
    step = steady_step_seconds(rec)
    low, high, _ = est.step_band_seconds
    return dict(run_id=rec["run_id"], split=split_of(rec), gpu=est.cluster.gpu.name, replayed=replayed,
                device=dict(measured=device_bytes(rec) or None, estimate=mem.per_gpu_peak_bytes,
                            low=mem.band_low_bytes, high=mem.band_high_bytes),
                step=dict(measured=step or None, estimate=est.time.step_seconds if est.time else None, low=low,
                          high=high))


def side(q: dict) -> str | None:
    """``below``, ``inside`` or ``above`` the band for one quantity of a :func:`coverage_row`; ``None`` unmeasured or
    without a band (both sides 0)."""
    if not q["measured"] or q["estimate"] is None or not (q["low"] or q["high"]):
        return None
    if q["measured"] > q["estimate"] + q["high"]:
        return "above"
    if q["measured"] < q["estimate"] - q["low"]:
        return "below"
    return "inside"


def summary_lines(rows: list, title: str) -> list[str]:
    """Per quantity and GPU: runs with a band, and the share below, inside and above it; the runs above the device
    band (under-estimates past it) by how far."""
    out = [title, f"  {'quantity':<9}{'GPU':<10}{'runs':>5}{'below':>8}{'inside':>8}{'above':>8}   runs above: "
                  f"median and worst distance past the band, as a share of the measured value"]
    for q in ("device", "step"):
        for gpu in sorted({r["gpu"] for r in rows}):
            sides = [(r, side(r[q])) for r in rows if r["gpu"] == gpu]
            sides = [(r, s) for r, s in sides if s]
            if not sides:
                continue
            n = len(sides)
            share = {k: sum(s == k for _, s in sides) / n for k in ("below", "inside", "above")}
            past = [(r[q]["measured"] - r[q]["estimate"] - r[q]["high"]) / r[q]["measured"] for r, s in sides
                    if s == "above"]
            tail = f"{statistics.median(past):.1%}, {max(past):.1%}" if past else "-"
            out.append(f"  {q:<9}{gpu:<10}{n:>5}{share['below']:>8.1%}{share['inside']:>8.1%}{share['above']:>8.1%}"
                       f"   {tail}")
    above = [r for r in rows if side(r["device"]) == "above"]
    if above:
        out.append("  device above its band's upper side (estimate + band high, measured, GiB):")
        for r in sorted(above, key=lambda r: r["run_id"]):
            d = r["device"]
            upper = (d["estimate"] + d["high"]) / 2**30
            out.append(f"    {r['run_id'][:70]:<71}{upper:7.2f} {d['measured'] / 2**30:7.2f}"
                       f"{' replayed' if r['replayed'] else ' constant reserve'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, nargs="+", default=[DEFAULT_CORPUS])
    ap.add_argument("--split", choices=("fit", "test", "all"), default="test")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import logging

    logging.disable(logging.WARNING)
    rows = []
    for path in args.corpus:
        for line in path.read_text().splitlines():
            row = coverage_row(json.loads(line)) if line.strip() else None
            if row and (args.split == "all" or row["split"] == args.split):
                rows.append(row)
    names = ", ".join(p.name for p in args.corpus)
    print("\n".join(summary_lines(rows, f"ERROR BAND coverage, {args.split} split of {names}: the measured value "
                                        "below, inside or above the band workbench estimate prints (the band: the "
                                        "10th / 90th percentile residuals per engine and regime of the H200 test "
                                        "split, or of the GPU's own where error_band.json has them)")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
