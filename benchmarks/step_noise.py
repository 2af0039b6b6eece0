"""Step-noise study: why one configuration's step time differs between processes on the same GPU machine.

Reads ``benchmarks/corpus/noise_h200.jsonl`` (measure.py's group ``noise``: three host-bound configurations, each in
7-8 fresh processes with 10 timed steps and the host probe of ``benchmarks/corpus/host_probe.py`` just before and
after the timed steps; reps 11-14 with the next processes importing beside them, ``--ahead 3`` as the corpus was
measured, reps 15-18 alone on the host, ``--ahead 0``) and prints, per configuration and arm, the steady step and
its spread over processes, the host probe's range, the correlation of the step with the probe, and the spread left
when the time model's host inputs (:data:`workbench.timing.HOST_SECONDS_INPUTS`) are scaled by each run's probe.

    python benchmarks/step_noise.py [--records PATH]      # results: benchmarks/results/step_noise_h200.txt
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
RECORDS = ROOT / "benchmarks" / "corpus" / "noise_h200.jsonl"

from corpus.step_stats import spread  # noqa: E402  (slowest / fastest - 1, as the accuracy benchmark reads it)


def correlation(x, y) -> float:
    """Pearson's r of two equally long lists."""
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sx = sum((a - mx) ** 2 for a in x) ** 0.5
    sy = sum((b - my) ** 2 for b in y) ** 0.5
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (sx * sy) if sx and sy else 0.0


def probe(rec: dict, key: str) -> float:
    """The mean of a record's host probe ``key`` before and after its timed steps."""
    return (rec["host_probe_before"][key] + rec["host_probe_after"][key]) / 2


def configuration(rec: dict) -> str:
    return rec["run_id"].split("/rep")[0]


def predicted_with_host_scaled(rec: dict, factor: float) -> float:
    """The estimate's step for the record's configuration with every host input scaled by ``factor``."""
    import bench_accuracy as B

    from workbench import timing

    run = B.corpus_run(rec)
    from workbench.estimate import estimate

    t = estimate(run["model"], run["cluster"], run["plan"], checks=False).time
    return float(timing.step_time_terms(**timing.scale_host_seconds(t.inputs, factor))["step_seconds"])


def report(recs: list) -> list[str]:
    ok = [r for r in recs if r.get("status") == "ok" and r.get("host_probe_before") and r.get("host_probe_after")]
    ref = statistics.median(probe(r, "launch_us") for r in ok)
    lines = [f"{len(ok)} runs of {len({configuration(r) for r in ok})} configurations "
             f"({ok[0]['provenance']['gpu']}, {ok[0]['provenance'].get('cpu_model')}, "
             f"{ok[0]['provenance']['host_cpu_cores']} cores; {min(r['provenance']['date_utc'] for r in ok)} to "
             f"{max(r['provenance']['date_utc'] for r in ok)}; torch {ok[0]['provenance']['torch']}, DeepSpeed "
             f"{ok[0]['provenance']['deepspeed']})", ""]
    py = [r[k]["python_loop_s"] * 1e3 for r in ok for k in ("host_probe_before", "host_probe_after")]
    la = [r[k]["launch_us"] for r in ok for k in ("host_probe_before", "host_probe_after")]
    sm = {r[k].get("gpu_sm_mhz") for r in ok for k in ("host_probe_before", "host_probe_after")}
    load = [r["host_probe_before"]["loadavg"][0] for r in ok]
    jump = [abs(r["host_probe_after"]["python_loop_s"] / r["host_probe_before"]["python_loop_s"] - 1) for r in ok]
    lines += [f"host probe (before and after each run's timed steps): 1M-iteration Python loop {min(py):.1f}-"
              f"{max(py):.1f} ms (median {statistics.median(py):.1f}); tiny CUDA launch {min(la):.2f}-{max(la):.2f} µs "
              f"(median {statistics.median(la):.2f}); the loop's change within one run (before -> after, seconds "
              f"apart): median {statistics.median(jump):.0%}, worst {max(jump):.0%}; GPU SM clock {sorted(sm)} MHz; "
              f"1-min load average {min(load):.1f}-{max(load):.1f}", ""]
    lines.append(f"{'configuration':<44} {'arm':<18} {'n':>2} {'median ms':>9} {'spread':>7} {'steps 4-6 spread':>16} "
                 f"{'within':>7}")
    for cfg in sorted({configuration(r) for r in ok}):
        sel = [r for r in ok if configuration(r) == cfg]
        for arm, ahead in (("imports beside (3)", 3), ("alone (0)", 0), ("all", None)):
            part = [r for r in sel if ahead is None or r.get("processes_started_ahead") == ahead]
            if len(part) < 2:
                continue
            steady = [r["step_seconds_median"] for r in part]
            short = [statistics.median(r["step_seconds"][3:6]) for r in part]  # the corpus protocol: steps 4-6
            within = statistics.median(r["timed_spread"] for r in part)
            lines.append(f"{cfg:<44} {arm:<18} {len(part):>2} {statistics.median(steady) * 1e3:>9.1f} "
                         f"{spread(steady):>7.0%} {spread(short):>16.0%} {within:>7.0%}")
    lines += ["", "step time against the host probe, all runs of a configuration: Pearson r with the launch cost and "
                  "the Python loop; spread of measured / predicted over its processes with the time model as it is "
                  f"and with its host inputs scaled by each run's launch probe / the median probe ({ref:.2f} µs)"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cfg in sorted({configuration(r) for r in ok}):
            sel = [r for r in ok if configuration(r) == cfg]
            steps = [r["step_seconds_median"] for r in sel]
            plain = [s / predicted_with_host_scaled(r, 1.0) for s, r in zip(steps, sel)]
            scaled = [s / predicted_with_host_scaled(r, probe(r, "launch_us") / ref) for s, r in zip(steps, sel)]
            lines.append(f"  {cfg:<44} r(launch) {correlation(steps, [probe(r, 'launch_us') for r in sel]):+.2f}  "
                         f"r(loop) {correlation(steps, [probe(r, 'python_loop_s') for r in sel]):+.2f}  spread of "
                         f"measured/predicted {spread(plain):.0%} as it is, {spread(scaled):.0%} host-scaled")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=Path, default=RECORDS)
    args = ap.parse_args(argv)
    recs = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    print("\n".join(report(recs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
