"""Long context against published numbers: what the workbench predicts for the published long-sequence runs, and
how it moves from short to long sequence.

The cases are the long-sequence entries of ``benchmarks/published_runs.json`` (each with its source, table and
date read; ``bench_published.py`` prices the whole file): Llama 3 405B pre-training at 8k and at 131k tokens with
CP=16 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4) and NeMo's Llama-2-7B
long-sequence table, 16k to 1M tokens with CP up to 32 (NVIDIA NeMo docs, performance_long_sequence.md).

Two kinds of ratio are printed:

* predicted / published TFLOP/s per GPU of each case (the whole model at once: GEMM curve, bubble, communication);
* the *long-context ratio*: TFLOP/s of a long-sequence case over the same source's short-sequence case, published
  and predicted. Calibration errors common to both cancel, so it checks what the sequence and CP change: the
  attention's share of the FLOPs, the K/V exchange and its overlap, the activations per CP rank.

The Llama 3 paper says its CP all-gathers K/V (§3.3.2: "we first all-gather the key (K) and value (V) tensors, and
then compute attention output for the local query (Q) tensor chunk"); its 128k case is priced with
``cp_comm_type='all_gather'`` and, for comparison, with the ring (``p2p``).

    python benchmarks/bench_long_context.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_published import load, missing_features, published_step_seconds, specs  # noqa: E402

from workbench.defaults import GiB  # noqa: E402
from workbench.estimate import estimate  # noqa: E402

PAIRS = (("llama3-405b-16384-cp16", "llama3-405b-16384-cp1"),
         *((f"nemo-longseq-llama2-7b-{k}", "nemo-longseq-llama2-7b-16k")
           for k in ("32k", "64k", "128k", "256k", "512k", "1024k")))
"""(long-sequence case, the same source's short-sequence reference)."""
ALL_GATHER_CASES = {"llama3-405b-16384-cp16"}
"""Cases whose source says their context parallelism all-gathers K/V (Llama 3 §3.3.2; ``published_runs.json`` writes
it as the case's ``cp_comm``); they are also priced with the ring, to show what the choice costs."""


def priced(case: dict, cp_comm_type=None) -> dict:
    """Published and predicted TFLOP/s per GPU (model FLOPs over the published step time) and the long-context
    terms of the prediction."""
    model, cluster, plan = specs(case)
    if cp_comm_type and plan.context_parallel > 1:
        plan = plan.replace(cp_comm_type=cp_comm_type)
    est = estimate(model, cluster, plan, checks=False)
    t = est.time
    published_s = published_step_seconds(case, model, cluster, plan)
    flops_per_gpu = t.model_flops_per_step / plan.world_size
    return dict(id=case["id"], seq=model.seq_length, cp=plan.context_parallel, comm=str(plan.cp_comm_type),
                published_tflops=flops_per_gpu / published_s / 1e12, predicted_tflops=t.model_tflops_per_gpu,
                cp_exposed=t.breakdown["cp_comm"] / t.step_seconds,
                activations_gib=est.memory.peak_stage.backward_activation_bytes / GiB,
                peak_gib=est.memory.per_gpu_peak_bytes / GiB)


def rows() -> dict:
    cases = {c["id"]: c for c in load()["cases"]}
    out = {}
    for long_id, short_id in PAIRS:
        for cid in (short_id, long_id):
            if cid in out or cid not in cases:
                continue
            case = cases[cid]
            if missing_features(case):
                out[cid] = dict(id=cid, missing=missing_features(case))
                continue
            out[cid] = priced(case)
            if cid in ALL_GATHER_CASES:
                out[cid + " (p2p)"] = {**priced(case, "p2p"), "id": cid + " (p2p)"}
    return out


def main() -> int:
    table = rows()
    print(f"{'case':<34} {'seq':>8} {'CP':>3} {'exchange':>10} {'published':>9} {'predicted':>9} {'ratio':>6} "
          f"{'CP exposed':>10} {'act GiB':>8} {'peak GiB':>8}")
    for r in table.values():
        if "missing" in r:
            print(f"{r['id']:<34} not modelled: needs {', '.join(r['missing'])}")
            continue
        print(f"{r['id']:<34} {r['seq']:>8,} {r['cp']:>3} {r['comm']:>10} {r['published_tflops']:>9.0f} "
              f"{r['predicted_tflops']:>9.0f} {r['predicted_tflops'] / r['published_tflops']:>6.2f} "
              f"{r['cp_exposed']:>10.1%} {r['activations_gib']:>8.1f} {r['peak_gib']:>8.1f}")
    print("\nlong-context ratio (TFLOP/s of the long case / the short case), published vs predicted")
    for long_id, short_id in PAIRS:
        a, b = table.get(long_id), table.get(short_id)
        if not a or not b or "missing" in a or "missing" in b:
            continue
        pub = a["published_tflops"] / b["published_tflops"]
        pred = a["predicted_tflops"] / b["predicted_tflops"]
        print(f"  {long_id:<30} / {short_id:<28} published {pub:5.2f}  predicted {pred:5.2f}  "
              f"(predicted/published {pred / pub:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
