"""Where the ZeRO-3 host-bound finding's threshold comes from: each step-time configuration of the H200 corpus measured
in more than one fresh process (``bench_accuracy.repeatability``), its spread between processes beside the share
of the predicted step the time model gives to ZeRO-3's exposed hook time (``workbench.advisor.zero3_host_seconds``).

    python benchmarks/zero3_host_share.py [--corpus PATH]

Prints one line per repeated configuration (regime, split, run, spread, host share, predicted and measured steady
steps), largest spread first, then how the configurations fall on either side of
``workbench.advisor.ZERO3_HOST_SHARE_WARN``; then each ZeRO-3 configuration (no offload) measured beside the same
configuration at ZeRO-2, with the finding's priced ZeRO-2 option (the advisor's ``zero3_host_bound``) and whether
the plan is flagged. Reads measurements only; it fits nothing.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_accuracy as B  # noqa: E402

SPREAD_LINE = 0.20
"""The spread between processes the table splits at (the brief of the finding: "spread above ~20 %")."""


def rows(runs: list) -> list[dict]:
    """Every repeated configuration with its spread and, for DeepSpeed ZeRO-3, the model's exposed host share."""
    from workbench.advisor import zero3_host_seconds
    from workbench.estimate import estimate

    by_id = {r["run_id"]: r for r in runs}
    out = []
    for c in B.repeatability(runs)["configurations"]:
        r = by_id[c["run_ids"][0]]
        plan = r["plan"]
        t = estimate(r["model"], r["cluster"], plan, checks=False).time
        share = 0.0
        if str(plan.engine) != "megatron" and int(plan.zero_stage) == 3:
            share = zero3_host_seconds(t)[0] / t.step_seconds
        out.append(dict(regime=c["regime"], run=r, spread=c["spread"], share=share, predicted=t.step_seconds,
                        measured=c["step_seconds"]))
    return sorted(out, key=lambda x: -x["spread"])


def zero2_pairs(runs: list) -> list[dict]:
    """ZeRO-3 configurations without offload whose run id has a ZeRO-2 twin (``/z3/`` → ``/z2/``, repeats pooled
    at their median): measured steps of both, the ZeRO-3 estimate, and the finding (``None`` when not flagged)."""
    from workbench.advisor import zero3_host_bound
    from workbench.estimate import estimate

    by_id = {}
    for r in runs:
        by_id.setdefault(re.sub(r"/rep\d+", "", r["run_id"]), []).append(r)
    out = []
    for run_id, sel in sorted(by_id.items()):
        twin = run_id.replace("/z3/", "/z2/")
        if "/z3/" not in run_id or twin not in by_id or "/off-" in run_id or "/expseg" in run_id:
            continue
        r = sel[0]
        rec = estimate(r["model"], r["cluster"], r["plan"], checks=False)
        out.append(dict(run=r, zero3=statistics.median(x["measured"]["step"] for x in sel),
                        zero2=statistics.median(x["measured"]["step"] for x in by_id[twin]),
                        predicted=rec.time.step_seconds,
                        finding=zero3_host_bound(r["model"], r["cluster"], r["plan"], rec)))
    return out


def main(argv=None) -> int:
    from workbench.advisor import ZERO3_HOST_SHARE_WARN

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=B.CORPUS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    split = json.loads(B.SPLIT.read_text())
    fit, test = set(split["fit"]), set(split["test"])
    runs = [r for r in B.old_runs() + B.corpus_runs(args.corpus)
            if not r.get("oom") and r["shape_id"] in fit | test and r["measured"].get("step")]
    table = rows(runs)
    print("repeated configurations: spread between fresh processes (slowest / fastest - 1) beside the model's "
          "exposed ZeRO-3 host share of the predicted step")
    print(f"  {'regime':<15}{'split':<6}{'run':<58}{'spread':>8}{'host share':>12}{'predicted':>11}  measured (ms)")
    for x in table:
        r = x["run"]
        print(f"  {x['regime']:<15}{'fit' if r['shape_id'] in fit else 'test':<6}{r['run_id'][:57]:<58}"
              f"{x['spread']:>8.1%}{x['share']:>12.1%}{x['predicted'] * 1e3:>9.1f}ms  "
              + " ".join(f"{v * 1e3:.0f}" for v in x["measured"]))
    wide = [x for x in table if x["spread"] > SPREAD_LINE]
    narrow = [x for x in table if x["spread"] <= SPREAD_LINE]
    if wide:
        print(f"spread > {SPREAD_LINE:.0%}: {len(wide)} configurations, host share "
              f"{min(x['share'] for x in wide):.0%}-{max(x['share'] for x in wide):.0%}")
    if narrow:
        print(f"spread <= {SPREAD_LINE:.0%}: {len(narrow)} configurations, host share "
              f"{min(x['share'] for x in narrow):.0%}-{max(x['share'] for x in narrow):.0%}")
    flagged = [x for x in table if x["share"] >= ZERO3_HOST_SHARE_WARN]
    print(f"the advisor's threshold {ZERO3_HOST_SHARE_WARN:.0%}: flags {len(flagged)} configurations "
          f"({sum(x['spread'] > SPREAD_LINE for x in flagged)} of them spread > {SPREAD_LINE:.0%}); of the "
          f"{len(wide)} that spread > {SPREAD_LINE:.0%} it flags {sum(x['share'] >= ZERO3_HOST_SHARE_WARN for x in wide)}")
    print("ZeRO-3 beside the same configuration at ZeRO-2 (measured medians; the finding's ZeRO-2 option as priced)")
    print(f"  {'split':<6}{'run':<50}{'ZeRO-3':>9}{'predicted':>11}{'ZeRO-2':>9}{'option':>9}  flagged")
    for x in zero2_pairs(runs):
        r, f = x["run"], x["finding"]
        alt = {a["option"]: a for a in f.numbers["alternatives"]}["zero2"]["step_seconds"] if f else None
        print(f"  {'fit' if r['shape_id'] in fit else 'test':<6}{r['run_id'][:49]:<50}{x['zero3'] * 1e3:>7.0f}ms"
              f"{x['predicted'] * 1e3:>9.0f}ms{x['zero2'] * 1e3:>7.0f}ms"
              + (f"{alt * 1e3:>7.0f}ms  yes" if f else f"{'-':>9}  no"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
