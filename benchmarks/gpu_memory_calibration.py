"""Measured vs predicted peak memory (and step time) for DeepSpeed ZeRO 0-3 wrapping a megatron-core GPTModel.

On a CUDA machine with 1-2 GPUs:

    python benchmarks/gpu_memory_calibration.py --out results.json            # all runs, then the table
    python benchmarks/gpu_memory_calibration.py --table results.json          # re-print a table from results

Each run is a separate ``torchrun`` job (megatron-core GPTModel with the local layer spec, bf16, FusedAdam,
DeepSpeed ZeRO stage 0-3, with and without megatron-core's full recompute) that trains a few steps on random tokens
and reports ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` after the steps, the memory the CUDA context
holds outside the allocator, and the median step time. Single-GPU runs go two at a time, one per GPU.
The prediction is :func:`workbench.estimate.estimate` for the same model and plan: its allocated part (all terms but
``overhead``) is compared with ``max_memory_allocated``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = dict(name="gpt-1.3b-calib", num_layers=24, hidden_size=2048, num_attention_heads=16, vocab_size=50257,
             seq_length=2048)


def worker(cfg: dict) -> None:
    """One rank of one run (started by torchrun)."""
    import torch
    import deepspeed
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    from workbench.params import padded_vocab_size

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    deepspeed.init_distributed(dist_backend="nccl")
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    m = cfg["model"]
    full = cfg["recompute"] == "full"
    tc = TransformerConfig(num_layers=m["num_layers"], hidden_size=m["hidden_size"],
                           num_attention_heads=m["num_attention_heads"], ffn_hidden_size=4 * m["hidden_size"],
                           bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
                           recompute_granularity="full" if full else None,
                           recompute_method="uniform" if full else None, recompute_num_layers=1 if full else None)
    vocab = padded_vocab_size(m["vocab_size"], 1)
    model = GPTModel(config=tc, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=vocab,
                     max_sequence_length=m["seq_length"], position_embedding_type="learned_absolute",
                     share_embeddings_and_output_weights=True)
    ds_config = {
        "train_micro_batch_size_per_gpu": cfg["micro_batch"],
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.01}},
        "zero_optimization": {"stage": cfg["zero"]},
        "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    s, b = m["seq_length"], cfg["micro_batch"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    mask = torch.triu(torch.ones(s, s, device="cuda", dtype=torch.bool), diagonal=1)[None, None]
    pos = torch.arange(s, device="cuda")[None].expand(b, s)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(cfg["steps"]):
        tokens = torch.randint(0, m["vocab_size"], (b, s + 1), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = engine(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    free, total = torch.cuda.mem_get_info()
    record = dict(cfg, rank=int(os.environ["RANK"]), max_allocated=torch.cuda.max_memory_allocated(),
                  max_reserved=torch.cuda.max_memory_reserved(),
                  outside_allocator=total - free - torch.cuda.memory_reserved(),
                  step_seconds=statistics.median(times[2:]) if len(times) > 2 else times[-1], losses=losses,
                  torch=torch.__version__, deepspeed=deepspeed.__version__,
                  gpu=torch.cuda.get_device_name())
    with open(cfg["result_file"], "a") as fh:
        fh.write(json.dumps(record) + "\n")


def predict(run: dict) -> dict:
    from workbench import ClusterSpec, ModelSpec, ParallelPlan
    from workbench.estimate import estimate

    m = ModelSpec(**run["model"])
    n = run["gpus"]
    c = ClusterSpec(gpu="H200", gpus_per_node=n)
    plan = ParallelPlan(world_size=n, zero_stage=run["zero"], recompute=run["recompute"],
                        micro_batch_size=run["micro_batch"])
    e = estimate(m, c, plan, overlap_comm=int(plan.zero_stage) >= 3)  # DeepSpeed's own overlap_comm default
    terms = e.memory.breakdown
    out = {"allocated": terms.total - terms.overhead, "total": terms.total, "terms": terms.as_dict()}
    if e.time is not None:
        out["step_seconds"] = e.time.step_seconds
    return out


def launch(cfg: dict, devices: str, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=devices, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
               NCCL_NVLS_ENABLE="0", TORCH_CUDA_ARCH_LIST="9.0")
    n = len(devices.split(","))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}", f"--master_port={port}",
           __file__, "--worker", json.dumps(cfg)]
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def run_all(out: Path, steps: int, micro_batch: int, gpus_available: int) -> list:
    result_file = out.with_suffix(".jsonl")
    result_file.unlink(missing_ok=True)
    logs = out.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    grid = list(itertools.product([0, 1, 2, 3], ["none", "full"]))
    jobs = []
    for n in ([1, 2] if gpus_available >= 2 else [1]):
        for zero, rc in grid:
            jobs.append(dict(model=MODEL, gpus=n, zero=zero, recompute=rc, micro_batch=micro_batch, steps=steps,
                             result_file=str(result_file)))
    port = 29600
    singles = [j for j in jobs if j["gpus"] == 1]
    doubles = [j for j in jobs if j["gpus"] == 2]
    # single-GPU runs two at a time
    while singles:
        batch = [singles.pop(0) for _ in range(min(gpus_available, len(singles)))]
        procs = []
        for i, job in enumerate(batch):
            port += 1
            procs.append(launch(job, str(i), port, logs / f"g1_z{job['zero']}_{job['recompute']}.log"))
        for p in procs:
            p.wait()
    for job in doubles:
        port += 1
        launch(job, "0,1", port, logs / f"g2_z{job['zero']}_{job['recompute']}.log").wait()
    records = [json.loads(line) for line in result_file.read_text().splitlines()] if result_file.exists() else []
    out.write_text(json.dumps(records, indent=1))
    return records


def table(records: list) -> str:
    rows, errs = [], []
    seen = set()
    for r in sorted(records, key=lambda r: (r["gpus"], r["zero"], r["recompute"], r["rank"])):
        key = (r["gpus"], r["zero"], r["recompute"])
        if key in seen:
            continue
        seen.add(key)
        pred = predict(r)
        err = pred["allocated"] / r["max_allocated"] - 1
        errs.append(abs(err))
        t = f"{pred['step_seconds']:.3f}" if "step_seconds" in pred else "-"
        rows.append(f"| {r['gpus']} | ZeRO-{r['zero']} | {r['recompute']:<4} | {r['max_allocated'] / 2**30:7.2f} | "
                    f"{pred['allocated'] / 2**30:7.2f} | {err:+6.1%} | {r['max_reserved'] / 2**30:7.2f} | "
                    f"{r['outside_allocator'] / 2**30:5.2f} | {r['step_seconds']:.3f} | {t} |")
    head = ("| GPUs | ZeRO | recompute | measured alloc GiB | predicted GiB | error | reserved GiB | "
            "context GiB | step s | predicted s |\n|---|---|---|---|---|---|---|---|---|---|")
    summary = (f"\nmemory |error|: median {statistics.median(errs):.1%}, worst {max(errs):.1%} over {len(errs)} runs"
               if errs else "\nno runs")
    return head + "\n" + "\n".join(rows) + summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_memory_calibration.json"))
    ap.add_argument("--table", type=Path)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=2)
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    import torch

    args.out.parent.mkdir(parents=True, exist_ok=True)
    records = run_all(args.out, args.steps, args.micro_batch, min(2, torch.cuda.device_count()))
    print(table(records))


if __name__ == "__main__":
    main()
