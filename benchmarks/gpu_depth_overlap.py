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
    python benchmarks/gpu_depth_overlap.py --forward-share --out share.jsonl

``--forward-share`` times instead, for each megatron-core layer design of the fit split, the host ms of one layer's
forward + loss + backward and of its forward alone at 64 tokens (2 and 8 layers): the forward's share of the
layer's host, catalog ``megatron_core.layer_forward_host_share`` (:func:`workbench.timing.host_wait`).
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
    from trace_activations_cpu import mcore_batch

    dims = dict(MCORE_SHAPES["mc-h1536-l16"], num_layers=layers)
    model, _ = build_mcore(dims, {"recompute": "none"})
    model = model.cuda()
    seq, vocab = dims["seq_length"], dims["vocab_size"]
    tokens, pos, mask = mcore_batch(seq, vocab, device="cuda")

    def step():
        loss = model(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
        loss.backward()

    out = timed(step)
    del model
    torch.cuda.empty_cache()
    return out


SHARE_SHAPES = ("mc-h768-gelu", "mc-h1024-gelu", "mc-h3072-gqa", "mc-h2560-gqa-fit")
"""The fit split's megatron-core layer designs (GPT-style with and without dropout 0.1 at two widths, Llama-style
GQA at two widths) for ``--forward-share``."""
SHARE_TOKENS, SHARE_DEPTHS = 64, (2, 8)


def megatron_forward_share(shape: str) -> dict:
    """Host ms per megatron-core layer of ``shape`` (:data:`SHARE_SHAPES`), forward + loss + backward and forward
    alone (synchronised before the backward), from the median wall times at :data:`SHARE_DEPTHS` layers with
    :data:`SHARE_TOKENS` tokens, where the GPU finishes each kernel before the host queues the next: the share of
    a layer's host time spent in its forward (catalog ``megatron_core.layer_forward_host_share``)."""
    import torch
    from measure import build_mcore
    from megatron.core.transformer.module import Float16Module
    from runs import MCORE_SHAPES
    from trace_activations_cpu import mcore_batch

    plain, fwd = {}, {}
    for layers in SHARE_DEPTHS:
        dims = dict(MCORE_SHAPES[shape], num_layers=layers, seq_length=SHARE_TOKENS)
        model, _ = build_mcore(dims, {"recompute": "none"})
        model = Float16Module(model.config, model).cuda().train()  # bf16 throughout, as the corpus runs train
        tokens, pos, mask = mcore_batch(SHARE_TOKENS, dims["vocab_size"], device="cuda")
        walls, forwards = [], []
        for i in range(WARMUP + 4 * TIMED):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = model(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            loss.backward()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            if i >= WARMUP:
                walls.append(t2 - t0)
                forwards.append(t1 - t0)
        plain[layers], fwd[layers] = statistics.median(walls), statistics.median(forwards)
        del model
        torch.cuda.empty_cache()
    lo, hi = SHARE_DEPTHS
    per = lambda t: (t[hi] - t[lo]) / (hi - lo) * 1e3  # noqa: E731
    return dict(shape=shape, tokens=SHARE_TOKENS, plain_ms=per(plain), forward_ms=per(fwd),
                forward_share=per(fwd) / per(plain))


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
    ap.add_argument("--forward-share", action="store_true",
                    help="time the forward's share of a megatron-core layer's host time on the fit split's designs")
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
    if args.forward_share:
        shares = []
        for shape in SHARE_SHAPES:
            rec = dict(stack="megatron-core", kind="forward_share", **megatron_forward_share(shape), provenance=prov)
            append_record(args.out, rec)
            shares.append(rec["forward_share"])
            print(f"{shape:18s} host per layer {rec['plain_ms']:6.3f} ms, forward {rec['forward_ms']:6.3f} ms, "
                  f"share {rec['forward_share']:.2f}", flush=True)
        print(f"median forward share {statistics.median(shares):.2f}")
        return 0
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
