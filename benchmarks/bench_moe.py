"""MoE / expert parallelism: the workbench's estimates against measured and published MoE runs, as ratios.

Two sources, nothing fitted on either:

* measured — megatron-core MoE runs on H200 in the measurement corpus (``benchmarks/corpus/h200_runs.jsonl``, read
  through ``benchmarks/bench_accuracy.py``'s loader; each record carries its provenance). Their split side in
  ``benchmarks/accuracy_split.json`` is printed with each run: no constant of the MoE terms is fitted on any run;
  the step-time constants the estimate uses were fitted on the dense fit-split shapes only;
* published — the Megatron-Bridge H100 tables' Qwen3 MoE rows (expert parallel 8 and 32, FP8) from
  ``benchmarks/published_runs.json``, each with its source, table and URL.

For each run: predicted / measured peak allocated memory and step time, and the predicted all-to-all share of the
step. Run from the checkout root::

    python benchmarks/bench_moe.py
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GiB = 2**30


def _split_side(shape_id: str) -> str:
    split = json.loads((ROOT / "benchmarks" / "accuracy_split.json").read_text())
    for side in ("fit", "test"):
        if shape_id in split.get(side, []):
            return side
    return "undeclared"


def _layout(plan) -> str:
    return (f"{plan.world_size} GPU TP{plan.tensor_parallel} EP{plan.expert_parallel} "
            f"ETP{plan.expert_tensor_parallel_size} DP{plan.data_parallel} {plan.moe_token_dispatcher}")


def measured_rows() -> list:
    """Corpus MoE runs with predicted / measured ratios."""
    import bench_accuracy as A

    from workbench.estimate import estimate

    rows = []
    for run in A.corpus_runs(A.CORPUS):
        if not run["model"].is_moe or run.get("oom"):
            continue
        est = estimate(run["model"], run["cluster"], run["plan"], checks=False)
        m = run["measured"]
        mem = est.memory.to_dict()
        alloc = mem["allocated_bytes"]
        rows.append(dict(run_id=run["run_id"], shape_id=run["shape_id"], side=_split_side(run["shape_id"]),
                         layout=_layout(run["plan"]), measured_gib=m["allocated"] / GiB, predicted_gib=alloc / GiB,
                         memory_ratio=alloc / m["allocated"] if m.get("allocated") else None,
                         device_ratio=mem["per_gpu_peak_bytes"] / m["device"] if m.get("device") else None,
                         measured_s=m.get("step"), predicted_s=est.time.step_seconds,
                         step_ratio=est.time.step_seconds / m["step"] if m.get("step") else None,
                         alltoall_share=est.time.breakdown["ep_comm"] / est.time.step_seconds))
    return rows


def published_rows() -> list:
    """The published MoE cases (expert parallel > 1) of ``bench_published``."""
    import bench_published as B

    data = B.load()
    rows = []
    for case in data["cases"]:
        if case["layout"].get("ep", 1) <= 1:
            continue
        row = B.evaluate_case(case, planner=False)
        src = data["sources"][case["source"]]
        model, cluster, plan = B.specs(case)
        from workbench.estimate import estimate

        est = estimate(model, cluster, plan, checks=False)
        rows.append(dict(case=case["id"], layout=_layout(plan), published_s=row.published_step_seconds,
                         predicted_s=row.predicted_step_seconds,
                         step_ratio=row.predicted_step_seconds / row.published_step_seconds,
                         alltoall_share=est.time.breakdown["ep_comm"] / est.time.step_seconds,
                         peak_gib=est.memory.peak_stage.total_bytes / GiB,
                         source=f"{src['title']}, {src['where']} ({src['url']}, read {src['read']})"))
    return rows


def main() -> int:
    print("measured: megatron-core MoE runs on H200 (benchmarks/corpus/h200_runs.jsonl)")
    rows = measured_rows()
    if not rows:
        print("  no MoE runs in the corpus yet")
    for r in rows:
        mem = f"{r['memory_ratio']:.2f}" if r["memory_ratio"] else "-"
        step = f"{r['step_ratio']:.2f}" if r["step_ratio"] else "-"
        print(f"  {r['run_id']:44} [{r['side']:4}] {r['layout']:38} allocated {r['predicted_gib']:6.2f} / "
              f"{r['measured_gib']:6.2f} GiB = {mem}   step {r['predicted_s']:.3f} / "
              f"{r['measured_s'] or 0:.3f} s = {step}   all-to-all {r['alltoall_share']:.1%} of the step")
    for what in ("memory_ratio", "device_ratio", "step_ratio"):
        vals = [r[what] for r in rows if r[what]]
        if vals:
            print(f"  {what.replace('_', ' ')}: median {statistics.median(vals):.2f} over {len(vals)} runs "
                  f"(predicted / measured), range {min(vals):.2f}-{max(vals):.2f}")
    # expert parallel against data parallel on the same GPUs: the speed-up measured and predicted
    by = {r["layout"].split(" alltoall")[0]: r for r in rows if r["run_id"].startswith("mcore-ddp/")}
    ep, dp = by.get("2 GPU TP1 EP2 ETP1 DP2"), by.get("2 GPU TP1 EP1 ETP1 DP2")
    if ep and dp and ep["measured_s"] and dp["measured_s"]:
        print(f"  EP2 / DP2 step (same 2 GPUs): measured {ep['measured_s'] / dp['measured_s']:.3f}, predicted "
              f"{ep['predicted_s'] / dp['predicted_s']:.3f}; memory: measured "
              f"{ep['measured_gib'] / dp['measured_gib']:.3f}, predicted "
              f"{ep['predicted_gib'] / dp['predicted_gib']:.3f}")
    print()
    print("published: Megatron-Bridge H100 tables, Qwen3 MoE (FP8) — predicted / published step time")
    for r in published_rows():
        print(f"  {r['case']:36} {r['layout']:38} step {r['predicted_s']:.2f} / {r['published_s']:.2f} s = "
              f"{r['step_ratio']:.2f}   all-to-all {r['alltoall_share']:.1%}   peak {r['peak_gib']:.0f} GiB")
        print(f"      source: {r['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
