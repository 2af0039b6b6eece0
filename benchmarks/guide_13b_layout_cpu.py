"""The seed guide's 13B layout (TP 4 x PP 2, 40 layers, 40 heads) at tiny width, on 8 CPU processes (gloo).

The headline example of the guide is a GPT-3-like 13B model on 8 GPUs with Megatron tensor parallel 4 x pipeline
parallel 2, and the hybrid with DeepSpeed ZeRO-1 over data parallel. Here the same architecture (GELU, LayerNorm,
biases, tied embeddings, learned positions) keeps the layout's divisibility at tiny width — 40 heads of head_dim 2
(hidden 80) so TP4 splits the heads 10 per rank, 8 layers so PP2 (and PP2 x 2 virtual chunks) split them evenly —
and trains through ``workbench.runs.launch``, 3 steps each:

* megatron-core TP4 x PP2, 1F1B and interleaved (virtual pipeline 2)
* megatron-core TP2 x PP2 x DP2 with the distributed optimizer
* the hybrid (megatron-core tensor/pipeline stages, DeepSpeed ZeRO-1 over each stage's data-parallel group):
  the guide's TP4 x PP2 + ZeRO-1, TP2 x PP2 + ZeRO-1 over DP2, and TP2 x DP2 + ZeRO-1 without a pipeline

Each layout's losses must equal its engine's world-size-1 run (fp32; the layouts change only reduction order); the
DeepSpeed layouts' gradient norms before clipping (DeepSpeed's ``get_global_grad_norm``) must equal the one-process
ZeRO-1 run's too. Prints per-rank peak RSS and the losses, writes the table to --md.

    python benchmarks/guide_13b_layout_cpu.py [--md benchmarks/results/guide_13b_layout_cpu.md]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/work/.cache/torch_extensions")

from workbench.catalog import gpu as catalog_gpu  # noqa: E402
from workbench.catalog import model as catalog_model  # noqa: E402
from workbench.runs import RunStore, launch, prepare  # noqa: E402
from workbench.specs import ClusterSpec, ParallelPlan  # noqa: E402

STEPS = 3
GLOBAL_BATCH = 4
TOLERANCE = 1e-4  # relative and absolute, fp32 losses


def tiny_13b():
    """The catalog's GPT-3 13B with 8 layers and 40 heads of head_dim 2."""
    return catalog_model("gpt3-13b").replace(name="gpt3-13b-tiny", num_layers=8, hidden_size=80, head_dim=2,
                                             ffn_hidden_size=320, vocab_size=512, seq_length=32,
                                             hidden_dropout=0.0, attention_dropout=0.0)


def cpu_cluster(n: int) -> ClusterSpec:
    return ClusterSpec(gpu=catalog_gpu("cpu"), gpus_per_node=n, host_memory_gib_per_node=24)


def layout(name, world, reference, **plan):
    plan.setdefault("precision", "fp32")
    plan.setdefault("global_batch_size", GLOBAL_BATCH)
    return {"name": name, "reference": reference, "plan": ParallelPlan(world_size=world, **plan)}


REFERENCES = [
    layout("world size 1 (megatron-core)", 1, None, engine="megatron"),
    layout("world size 1 (DeepSpeed ZeRO-1)", 1, None, engine="deepspeed", zero_stage=1),
]
LAYOUTS = [
    layout("TP4 x PP2, 1F1B", 8, "world size 1 (megatron-core)", engine="megatron", tensor_parallel=4,
           pipeline_parallel=2),
    layout("TP4 x PP2, interleaved v=2", 8, "world size 1 (megatron-core)", engine="megatron", tensor_parallel=4,
           pipeline_parallel=2, virtual_pipeline=2),
    layout("TP2 x PP2 x DP2, distributed optimizer", 8, "world size 1 (megatron-core)", engine="megatron",
           tensor_parallel=2, pipeline_parallel=2, distributed_optimizer=True),
]
DS_REF = "world size 1 (DeepSpeed ZeRO-1)"
HYBRIDS = [
    layout("TP4 x PP2 + ZeRO-1 (hybrid, the guide's layout)", 8, DS_REF, engine="megatron-deepspeed",
           tensor_parallel=4, pipeline_parallel=2, zero_stage=1),
    layout("TP2 x PP2 + ZeRO-1 over DP2 (hybrid)", 8, DS_REF, engine="megatron-deepspeed", tensor_parallel=2,
           pipeline_parallel=2, zero_stage=1),
    layout("TP2 x DP2 + ZeRO-1 (hybrid)", 4, DS_REF, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1),
]


def run_layout(case, model, store, root) -> dict:
    p = case["plan"]
    t0 = time.perf_counter()
    r = launch(model, cpu_cluster(p.world_size), p, steps=STEPS, nproc=p.world_size, store=store,
               run_dir=root / case["name"].replace(" ", "_").replace("/", "_"), timeout_seconds=600)
    r.wait()
    rec = r.record()
    out = {"name": case["name"], "reference": case["reference"], "world": p.world_size, "status": rec["status"],
           "reason": rec["reason"], "losses": rec["losses"], "wall_seconds": time.perf_counter() - t0,
           "peak_rss_bytes": {int(k): v for k, v in (rec["measured"].get("peak_memory_bytes") or {}).items()},
           "step_seconds": rec["measured"].get("median_step_seconds"), "plan": p,
           "grad_norms": grad_norms(r.run_dir, p.world_size)}
    if rec["status"] != "completed":
        out["log"] = r.log_tail(20)
    return out


def grad_norms(run_dir: Path, world: int):
    """DeepSpeed's gradient norm per step (the same on every rank; checked), None for megatron-core runs."""
    per_rank = []
    for rank in range(world):
        path = run_dir / "metrics" / f"rank{rank}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        per_rank.append([r.get("grad_norm") for r in records if r["type"] == "step"])
    if not per_rank or not per_rank[0] or any(n is None for n in per_rank[0]):
        return None
    first = per_rank[0]
    for other in per_rank[1:]:
        if len(other) != len(first) or max(abs(a - b) for a, b in zip(first, other)) > 1e-6 * max(first):
            return "differ between ranks"
    return first


def stage_of(rank: int, p: ParallelPlan) -> int:
    """Pipeline stage of a global rank (megatron-core's default order puts pipeline outermost)."""
    return rank // (p.world_size // p.pipeline_parallel)


def markdown(rows, refused: str, seconds: float) -> str:
    lines = ["# The guide's 13B layout at tiny width on 8 CPU processes", "",
             "`python benchmarks/guide_13b_layout_cpu.py` — GPT-3 13B architecture with 8 layers, 40 heads of "
             "head_dim 2 "
             "(hidden 80, FFN 320), vocab 512, seq 32; fp32, global batch 4 (micro-batch 1), 3 steps, gloo, through "
             "`workbench.runs.launch`. Peak RSS is each rank's `ru_maxrss` (the whole process: torch, megatron-core, "
             "gloo buffers), so it measures the framework more than the model at this size. Median step seconds of 3 "
             "steps include the first (warm-up) steps on a shared 2-core machine: a sanity figure, not a speed.", "",
             "| layout | procs | status | losses (3 steps) | max abs diff vs world size 1 | grad norms (DeepSpeed) | "
             "median step s | peak RSS per rank, MiB (first stage / last stage) |",
             "|---|---:|---|---|---:|---|---:|---|"]
    for r in rows:
        losses = " ".join(f"{x:.5f}" for x in r["losses"])
        diff = "-" if r.get("max_diff") is None else f"{r['max_diff']:.1e}"
        rss = r["peak_rss_bytes"]
        p = r["plan"]
        if p.pipeline_parallel > 1:
            first = [rss[k] / 2**20 for k in sorted(rss) if stage_of(k, p) == 0]
            last = [rss[k] / 2**20 for k in sorted(rss) if stage_of(k, p) == p.pipeline_parallel - 1]
            mem = f"{min(first):.0f}-{max(first):.0f} / {min(last):.0f}-{max(last):.0f}"
        else:
            mem = " ".join(f"{rss[k] / 2**20:.0f}" for k in sorted(rss))
        step = "-" if r["step_seconds"] is None else f"{r['step_seconds']:.3f}"
        norms = r.get("grad_norms")
        norms = "-" if norms is None else norms if isinstance(norms, str) else " ".join(f"{x:.5f}" for x in norms)
        lines.append(f"| {r['name']} | {r['world']} | {r['status']} | {losses} | {diff} | {norms} | {step} | {mem} |")
    lines += ["", f"Refused by the launcher: {refused}", "",
              "The hybrid rows with a pipeline run megatron-core's 1F1B schedule over the tensor-parallel stages and "
              "DeepSpeed ZeRO-1 over each stage's data-parallel group (`workbench/runs/train.py`, "
              "`train_hybrid_pipeline`).", "",
              f"Total wall time {seconds:.0f} s on this machine ({os.cpu_count()} cores)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", default="", help="write the results table (markdown) here")
    ap.add_argument("--work", default="", help="run directories go here (default: a temporary directory)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    root = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="guide13b-"))
    root.mkdir(parents=True, exist_ok=True)
    store = RunStore(root / "runs.sqlite")
    model = tiny_13b()
    # what the launcher refuses, before anything starts: ZeRO-2 with a pipeline (DeepSpeed's reason)
    try:
        bad = ParallelPlan(world_size=8, engine="megatron-deepspeed", tensor_parallel=4, pipeline_parallel=2,
                           zero_stage=2, precision="fp32", global_batch_size=GLOBAL_BATCH)
        prepare(model, cpu_cluster(8), bad, steps=STEPS, nproc=8, run_dir=root / "hybrid-zero2")
        refused = "nothing (TP4 x PP2 + ZeRO-2 was accepted)"
    except ValueError as exc:
        refused = f"TP4 x PP2 + ZeRO-2 (hybrid): {exc}"
        print(f"refused: {refused}", flush=True)
    cases = REFERENCES + LAYOUTS + HYBRIDS
    rows, refs = [], {}
    for case in cases:
        row = run_layout(case, model, store, root)
        rows.append(row)
        if case["reference"] is None:
            refs[case["name"]] = row
        else:
            ref = (refs.get(case["reference"]) or {}).get("losses") or []
            if len(ref) == len(row["losses"]) == STEPS:
                row["max_diff"] = max(abs(a - b) for a, b in zip(row["losses"], ref))
            ref_norms = (refs.get(case["reference"]) or {}).get("grad_norms")
            if isinstance(ref_norms, list):
                norms = row["grad_norms"]
                row["norms_equal"] = isinstance(norms, list) and len(norms) == len(ref_norms) and all(
                    abs(a - b) <= TOLERANCE * abs(b) for a, b in zip(norms, ref_norms))
        rss = " ".join(f"r{k}:{v / 2**20:.0f}" for k, v in sorted(row["peak_rss_bytes"].items()))
        print(f"{row['name']:42} {row['status']:9} {row['wall_seconds']:6.1f} s  losses "
              f"{' '.join(f'{x:.5f}' for x in row['losses'])}  peak RSS MiB {rss}", flush=True)
        if row["status"] != "completed":
            print(row["reason"], "\n", row.get("log", ""), flush=True)
    seconds = time.perf_counter() - t_start
    text = markdown(rows, refused, seconds)
    print()
    print(text)
    if args.md:
        Path(args.md).write_text(text)
        print(f"wrote {args.md}")
    failures = [r["name"] for r in rows if r["status"] != "completed"]
    failures += [r["name"] for r in rows if r["reference"] and (r.get("max_diff") is None or r["max_diff"] > TOLERANCE
                                                                 * max(1.0, max(map(abs, r["losses"]))))]
    failures += [f"{r['name']} (gradient norms)" for r in rows if r.get("norms_equal") is False]
    if refused.startswith("nothing"):
        failures.append(refused)
    first = {round(r["losses"][0], 4) for r in rows if r["losses"]}
    if len(first) != 1:  # the first loss is computed before any update: the same for every engine and layout
        failures.append(f"first-step losses differ: {sorted(first)}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print(f"all layouts equal world size 1 within {TOLERANCE:g} (relative)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
