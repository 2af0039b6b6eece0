"""Where the ZeRO-3 host-bound finding's threshold comes from: each step-time configuration of the H200 corpus measured
in more than one fresh process (``bench_accuracy.repeatability``), its spread between processes beside the share
of the predicted step the time model gives to ZeRO-3's exposed hook time (``workbench.advisor.zero3_host_seconds``).

    python benchmarks/zero3_host_share.py [--corpus PATH]

Prints one line per repeated configuration (regime, split, run, spread, host share, predicted and measured steady
steps), largest spread first, then how the configurations fall on either side of
``workbench.advisor.ZERO3_HOST_SHARE_WARN``. Reads measurements only; it fits nothing.
"""
from __future__ import annotations

import argparse
import json
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


def main(argv=None) -> int:
    from workbench.advisor import ZERO3_HOST_SHARE_WARN

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=B.CORPUS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    split = json.loads(B.SPLIT.read_text())
    fit, test = set(split["fit"]), set(split["test"])
    runs = [r for r in B.old_runs() + B.corpus_runs(args.corpus)
            if not r.get("oom") and r["shape_id"] in fit | test]
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
