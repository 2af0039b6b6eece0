"""GPU validation of the memory and time models with real runs through workbench.runs.launch.

One command on a CUDA machine with 1 or 2 GPUs (H200 intended):

    TORCH_CUDA_ARCH_LIST=9.0 python benchmarks/gpu_validation.py --out results/gpu_validation.json

Runs, a few steps each: DeepSpeed ZeRO 0-3 × {no recompute, full recompute} on GPT-3 1.3B (catalog ``gpt3-1_3b``)
on 1 GPU and on 2 GPUs; megatron-core TP=2 and PP=2 (2 GPUs); the hybrid (TP=2 with ZeRO-1; 2 GPUs). Single-GPU
runs go two at a time, one per GPU, when two GPUs are present. Prints predicted vs measured peak memory
(``torch.cuda.max_memory_allocated``, largest rank) and median step seconds, with median / max |error|, the bf16
matmul rate measured on GPU 0 and the model-FLOPs utilisation of the fastest run against it; writes everything as
JSON to --out. DeepSpeed uses torch's Adam (launch's ``torch_adam``) so no op is compiled.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.catalog import gpu as catalog_gpu  # noqa: E402
from workbench.catalog import model as catalog_model  # noqa: E402
from workbench.runs import RunStore, launch  # noqa: E402
from workbench.runs.compare import relative_error  # noqa: E402
from workbench.specs import ClusterSpec, ParallelPlan  # noqa: E402


def cases(num_gpus: int, mbs: int) -> list[dict]:
    out = []
    for n in (1, 2):
        if n > num_gpus:
            continue
        for zero in (0, 1, 2, 3):
            for recompute in ("none", "full"):
                out.append(dict(name=f"ds-z{zero}-{recompute}-{n}gpu", n=n,
                                plan=dict(engine="deepspeed", zero_stage=zero, recompute=recompute)))
    # megatron-core's own DDP + optimizer on one GPU, with and without full recompute
    out.append(dict(name="megatron-1gpu", n=1, plan=dict(engine="megatron")))
    out.append(dict(name="megatron-1gpu-full", n=1, plan=dict(engine="megatron", recompute="full")))
    out.append(dict(name="megatron-1gpu-gbs4", n=1, plan=dict(engine="megatron", global_batch_size=4 * mbs)))
    if num_gpus >= 2:
        out.append(dict(name="megatron-dp2-distopt", n=2, plan=dict(engine="megatron", distributed_optimizer=True)))
        out.append(dict(name="megatron-dp2", n=2, plan=dict(engine="megatron")))
        out.append(dict(name="megatron-tp2-full", n=2, plan=dict(engine="megatron", tensor_parallel=2,
                                                                   recompute="full")))
        out.append(dict(name="megatron-pp2-vp2", n=2, plan=dict(engine="megatron", pipeline_parallel=2,
                                                                  virtual_pipeline=2, global_batch_size=4 * mbs)))
        out.append(dict(name="megatron-pp2-full", n=2, plan=dict(engine="megatron", pipeline_parallel=2,
                                                                   recompute="full", global_batch_size=4 * mbs)))
        out.append(dict(name="hybrid-tp2-zero1-full", n=2, plan=dict(engine="megatron-deepspeed",
                                                                       tensor_parallel=2, zero_stage=1,
                                                                       recompute="full")))
        out.append(dict(name="megatron-tp2", n=2, plan=dict(engine="megatron", tensor_parallel=2)))
        out.append(dict(name="megatron-pp2", n=2, plan=dict(engine="megatron", pipeline_parallel=2,
                                                              global_batch_size=4 * mbs)))
        out.append(dict(name="hybrid-tp2-zero1", n=2, plan=dict(engine="megatron-deepspeed", tensor_parallel=2,
                                                                  zero_stage=1)))
    for c in out:
        c["plan"].setdefault("micro_batch_size", mbs)
    return out


GUIDE_13B_LAYERS = 8


def guide13b_model(num_layers: int = GUIDE_13B_LAYERS):
    """The seed guide's GPT-3-like 13B (hidden 5120, 40 heads of 128, FFN 4h, seq 2048, vocab 50257; GELU,
    LayerNorm, biases, tied embeddings, learned positions) with fewer layers so its TP2 or PP2 slice fits 2 GPUs."""
    return catalog_model("gpt3-13b").replace(name=f"guide-13b-{num_layers}layers", num_layers=num_layers,
                                             hidden_size=5120, head_dim=128, ffn_hidden_size=4 * 5120)


def guide13b_cases(num_gpus: int, num_layers: int = GUIDE_13B_LAYERS) -> list[dict]:
    """The guide's 13B layout (TP4 x PP2 on 8 GPUs) cut to what 2 GPUs take: its tensor-parallel half and its
    pipeline half, through the same launcher path; micro-batch 1 as in the guide. Only run when named in --only."""
    if num_gpus < 2:
        return []
    m, tag = guide13b_model(num_layers), f"{num_layers}layers"
    out = [dict(name=f"guide13b-tp2-pp1-{tag}", n=2, model=m, plan=dict(engine="megatron", tensor_parallel=2,
                                                                         global_batch_size=4)),
           dict(name=f"guide13b-tp1-pp2-{tag}", n=2, model=m, plan=dict(engine="megatron", pipeline_parallel=2,
                                                                         global_batch_size=8)),
           dict(name=f"guide13b-tp1-pp2-vp2-{tag}", n=2, model=m, plan=dict(engine="megatron", pipeline_parallel=2,
                                                                             virtual_pipeline=2, global_batch_size=8)),
           dict(name=f"guide13b-tp2-hybrid-zero1-{tag}", n=2, model=m,
                plan=dict(engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1, global_batch_size=4))]
    for c in out:
        c["plan"].setdefault("micro_batch_size", 1)
    return out


def selected(all_cases: list[dict], default: list[dict], only: str) -> list[dict]:
    """--only: comma-separated names or shell patterns (``guide13b-*``); without it, the default cases."""
    import fnmatch

    if not only:
        return default
    patterns = [x.strip() for x in only.split(",") if x.strip()]
    unknown = [pat for pat in patterns if not any(fnmatch.fnmatchcase(c["name"], pat) for c in all_cases)]
    if unknown:
        raise ValueError(f"--only {', '.join(unknown)}: no such case; known: "
                         f"{', '.join(c['name'] for c in all_cases)}")
    return [c for c in all_cases if any(fnmatch.fnmatchcase(c["name"], pat) for pat in patterns)]


def matmul_tflops(seconds: float = 3.0, size: int = 8192) -> float:
    """Measured dense bf16 matmul rate on GPU 0, TFLOP/s (2·n³ FLOPs per product)."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ b
        n += 10
        torch.cuda.synchronize()
    return 2 * size**3 * n / (time.perf_counter() - t0) / 1e12


def model_flops_per_step(model, plan) -> float:
    """Model FLOPs of one step, 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) (Narayanan et al., SC'21, eq. 3, without the
    recompute forward: model FLOPs, not hardware FLOPs)."""
    B, s, L, h, V = plan.global_batch_size, model.seq_length, model.num_layers, model.hidden_size, model.vocab_size
    return 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON results path")
    ap.add_argument("--model", default="gpt3-1_3b")
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--gpu", default="H200", help="catalog GPU entry")
    ap.add_argument("--only", default="", help="comma-separated case names or patterns to run (e.g. "
                                               "guide13b-tp2-pp1-8layers or 'guide13b-*'; the guide13b cases run only "
                                               "when named)")
    ap.add_argument("--list", action="store_true", help="print the case names for 2 GPUs and exit")
    ap.add_argument("--run-timeout", type=float, default=240)
    args = ap.parse_args(argv)
    if args.list:
        for c in cases(2, args.micro_batch_size) + guide13b_cases(2):
            print(c["name"])
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_validation: no CUDA device", file=sys.stderr)
        return 2
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if os.environ.get("TORCH_CUDA_ARCH_LIST", "").endswith("a"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ["TORCH_CUDA_ARCH_LIST"].rstrip("a")
    num_gpus = torch.cuda.device_count()
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = out_path.with_suffix("") .parent / (out_path.stem + "_runs")
    work.mkdir(parents=True, exist_ok=True)
    store = RunStore(work / "runs.sqlite")
    model = catalog_model(args.model)
    gpu = catalog_gpu(args.gpu)
    rate = matmul_tflops()
    print(f"bf16 matmul on GPU 0: {rate:.0f} TFLOP/s", flush=True)
    default = cases(num_gpus, args.micro_batch_size)
    try:
        todo = selected(default + guide13b_cases(num_gpus), default, args.only)
    except ValueError as exc:
        print(f"gpu_validation: {exc}", file=sys.stderr)
        return 2
    results = []
    t_start = time.time()

    def start(case, device_ids):
        plan = ParallelPlan(world_size=case["n"], precision="bf16", **case["plan"])
        cluster = ClusterSpec(gpu=gpu, gpus_per_node=case["n"])
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, device_ids))}
        r = launch(case.get("model", model), cluster, plan, steps=args.steps, nproc=case["n"], store=store,
                   run_dir=work / case["name"],
                   launcher="torchrun", timeout_seconds=args.run_timeout, env=env)
        return r, plan

    queue = list(todo)
    while queue:
        batch = [queue.pop(0)]
        if batch[0]["n"] == 1 and num_gpus >= 2 and queue and queue[0]["n"] == 1:
            batch.append(queue.pop(0))
        used, running = 0, []
        for case in batch:
            ids = list(range(used, used + case["n"]))
            used += case["n"]
            try:
                running.append((case, *start(case, ids)))
            except ValueError as exc:
                results.append({"name": case["name"], "status": "invalid", "reason": str(exc)})
        for case, r, plan in running:
            r.wait()
            rec = r.record()
            mem = rec["measured"].get("peak_memory_bytes") or {}
            row = {"name": case["name"], "gpus": case["n"], "status": rec["status"], "reason": rec["reason"],
                   "warning": rec["warning"], "plan": case["plan"],
                   "predicted_peak_bytes": (rec["predicted"] or {}).get("allocated_bytes"),
                   "measured_peak_bytes": max(mem.values()) if mem else None,
                   "predicted_step_seconds": (rec["predicted"] or {}).get("step_seconds"),
                   "measured_step_seconds": rec["measured"].get("median_step_seconds"),
                   "losses": rec["losses"], "run_dir": str(r.run_dir),
                   "model": case.get("model", model).name,
                   "model_flops_per_step": model_flops_per_step(case.get("model", model), plan)}
            row["memory_error"] = relative_error(row["predicted_peak_bytes"], row["measured_peak_bytes"])
            row["time_error"] = relative_error(row["predicted_step_seconds"], row["measured_step_seconds"])
            if row["measured_step_seconds"]:
                row["mfu"] = row["model_flops_per_step"] / row["measured_step_seconds"] / case["n"] / (rate * 1e12)
            results.append(row)
            print(f"{row['name']:24} {row['status']:9} mem pred "
                  f"{(row['predicted_peak_bytes'] or 0) / 2**30:7.2f} GiB meas "
                  f"{(row['measured_peak_bytes'] or 0) / 2**30:7.2f} GiB  step meas "
                  f"{row['measured_step_seconds'] or 0:.3f} s  {row['reason'][:80]}", flush=True)

    def fmt_err(e):
        return "     -" if e is None else f"{100 * e:+6.1f}%"

    print()
    print(f"{'run':24}{'gpus':>5}{'pred GiB':>10}{'meas GiB':>10}{'err':>8}{'pred s':>9}{'meas s':>9}{'err':>8}"
          f"{'MFU':>7}")
    for r in results:
        if r.get("status") != "completed":
            print(f"{r['name']:24} {r.get('status')}: {r.get('reason', '')[:90]}")
            continue
        ps = r["predicted_step_seconds"]
        print(f"{r['name']:24}{r['gpus']:>5}{(r['predicted_peak_bytes'] or 0) / 2**30:>10.2f}"
              f"{r['measured_peak_bytes'] / 2**30:>10.2f}{fmt_err(r['memory_error']):>8}"
              f"{'-' if ps is None else f'{ps:.3f}':>9}{r['measured_step_seconds']:>9.3f}{fmt_err(r['time_error']):>8}"
              f"{100 * r.get('mfu', 0):>6.1f}%")
    summary = {}
    for key in ("memory_error", "time_error"):
        errs = [abs(r[key]) for r in results if r.get(key) is not None]
        summary[key] = {"n": len(errs), "median_abs": statistics.median(errs) if errs else None,
                        "max_abs": max(errs) if errs else None}
        if errs:
            print(f"{key}: median |error| {100 * summary[key]['median_abs']:.1f}%, max {100 * summary[key]['max_abs']:.1f}%"
                  f" over {len(errs)} runs")
        else:
            print(f"{key}: no predictions to compare")
    done = [r for r in results if r.get("mfu")]
    if done:
        best = max(done, key=lambda r: r["mfu"] * r["gpus"])
        summary["largest_run_mfu"] = {"name": best["name"], "mfu": best["mfu"]}
        print(f"MFU of the fastest run ({best['name']}): {100 * best['mfu']:.1f}% of {rate:.0f} TFLOP/s measured")
    summary["bf16_matmul_tflops"] = rate
    summary["wall_seconds"] = time.time() - t_start
    out_path.write_text(json.dumps({"model": args.model, "gpu": args.gpu, "num_gpus": num_gpus,
                                    "steps": args.steps, "summary": summary, "runs": results}, indent=2))
    print(f"wrote {out_path} ({summary['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
