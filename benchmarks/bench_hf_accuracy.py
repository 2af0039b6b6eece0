"""Accuracy of the workbench on the Hugging Face runs of the H200 corpus (``stack`` ``hf-ds``), by split.

The runs (``benchmarks/corpus/h200_runs.jsonl``) train transformers models built from a config dict under
``deepspeed.initialize``: Llama (TinyLlama width), Qwen2 1.5B width and GPT-2 medium width, sdpa and eager,
ZeRO-0/1/2/3, CPU offload, gradient checkpointing on and off, LoRA. Each is translated with ``workbench.hf.import_hf``
and compared through ``bench_accuracy``'s own mapping, prediction and errors (held-out shapes in
``benchmarks/accuracy_split.json``'s ``test`` list). Prints one line per run and median / worst |error| per split.

    python benchmarks/bench_hf_accuracy.py [--corpus PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_accuracy as B  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=B.CORPUS)
    args = ap.parse_args(argv)
    split = json.loads(B.SPLIT.read_text())
    runs = [r for r in B.corpus_runs(args.corpus) if r["stack"] == "hf-ds" and not r.get("oom")]
    rows = {"fit": [], "test": []}
    print(f"{'run':58s} {'split':5s} {'allocated':>10s} {'device':>8s} {'step':>8s}")
    for run in sorted(runs, key=lambda r: r["run_id"]):
        side = "test" if run["shape_id"] in split["test"] else "fit"
        err = B.errors(run, B.predict(run))
        rows[side].append(err)
        cells = " ".join("       -" if err[q] is None else f"{err[q]:+8.1%}" for q in B.QUANTITIES)
        print(f"{run['run_id']:58s} {side:5s}   {cells}")
    for side, errs in rows.items():
        parts = []
        for q in B.QUANTITIES:
            s = B.summary([e[q] for e in errs])
            parts.append(f"{q} median {s['median']:.1%} worst {s['worst']:.1%}" if s.get("n") else f"{q} -")
        print(f"{side}: {len(errs)} runs; " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
