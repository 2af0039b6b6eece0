"""How a training micro-step's wall time splits between the host and the GPU as the model gets deeper, on one CUDA
GPU: the question the deeper truncations of the corpus (batch ``final13``: a Qwen2 1.5B width at 16 layers, 16-42 %
slower than predicted) raise about the time model's ``max(host, GPU)`` per micro-batch.

For the Qwen2 1.5B width (``mc-h1536-l16`` / ``hf-qwen2-h1536-l16`` of ``benchmarks/corpus/runs.py``: GQA 12/2,
SwiGLU 8960, 152 k vocabulary, tied, 2048 tokens, micro-batch 1) at 2, 8 and 16 layers, built as the corpus builds it
(megatron-core ``GPTModel`` with the local layer spec; transformers ``Qwen2ForCausalLM`` with sdpa), bf16, no
optimizer, it times forward + loss + backward (after 3 warm-ups the median of 8 synchronised steps) and, in one
profiled step, the sum of the CUDA kernels' durations (the GPU's busy time). ``wall - kernels`` is the time the GPU
waited; its growth per layer is the host time per layer that the kernels did not hide.

    python benchmarks/gpu_depth_overlap.py --out depth.jsonl
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

DEPTHS = (2, 8, 16)
WARMUP, TIMED = 3, 8


def timed(step) -> dict:
    """Median wall seconds of ``step`` and the CUDA kernel seconds of one profiled call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    walls = []
    for i in range(WARMUP + TIMED):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= WARMUP:
            walls.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sum(e.device_time_total for e in prof.key_averages()) / 1e6  # µs → s, kernels only (CUDA activity)
    return dict(wall_s=statistics.median(walls), kernel_s=kernels)


def megatron_core(layers: int) -> dict:
    import torch
    from measure import build_mcore
    from runs import MCORE_SHAPES

    dims = dict(MCORE_SHAPES["mc-h1536-l16"], num_layers=layers)
    model, _ = build_mcore(dims, {"recompute": "none"})
    model = model.cuda()
    seq, vocab = dims["seq_length"], dims["vocab_size"]
    mask = torch.triu(torch.ones(seq, seq, device="cuda", dtype=torch.bool), diagonal=1)[None, None]
    pos = torch.arange(seq, device="cuda")[None]
    tokens = torch.randint(0, vocab, (1, seq + 1), device="cuda")

    def step():
        loss = model(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
        loss.backward()

    out = timed(step)
    del model
    torch.cuda.empty_cache()
    return out


def transformers_model(layers: int) -> dict:
    import torch
    from measure import build_hf
    from runs import HF_SHAPES

    shape = HF_SHAPES["hf-qwen2-h1536-l16"]
    shape = dict(shape, config=dict(shape["config"], num_hidden_layers=layers))
    model, _, _ = build_hf(shape, {"attn": "sdpa"})
    model.train()
    ids = torch.randint(0, shape["config"]["vocab_size"], (1, shape["seq_length"]), device="cuda")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    out = timed(step)
    del model
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch.distributed as dist
    from gpu_provenance import append_record, gpu_provenance
    from megatron.core import parallel_state, tensor_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    prov = gpu_provenance()
    rows = []
    for stack, run in (("megatron-core", megatron_core), ("transformers", transformers_model)):
        for layers in DEPTHS:
            rec = dict(stack=stack, layers=layers, **run(layers), provenance=prov)
            rows.append(rec)
            append_record(args.out, rec)
            print(f"{stack:14s} {layers:3d} layers  wall {rec['wall_s'] * 1e3:7.2f} ms  kernels "
                  f"{rec['kernel_s'] * 1e3:7.2f} ms  GPU waiting {(rec['wall_s'] - rec['kernel_s']) * 1e3:7.2f} ms",
                  flush=True)
    for stack in ("megatron-core", "transformers"):
        sel = {r["layers"]: r for r in rows if r["stack"] == stack}
        lo, hi = sel[min(sel)], sel[max(sel)]
        n = max(sel) - min(sel)
        print(f"{stack}: per layer wall {(hi['wall_s'] - lo['wall_s']) / n * 1e3:.2f} ms, kernels "
              f"{(hi['kernel_s'] - lo['kernel_s']) / n * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
