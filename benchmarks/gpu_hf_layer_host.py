"""Host time of one transformers decoder layer, plain and under gradient checkpointing, on a CUDA GPU.

With few tokens the GPU finishes every kernel before the host queues the next, so the wall time of a training step
is the host's. This script builds each non-MoE fit-split Hugging Face shape of benchmarks/accuracy_split.json from
its corpus config (``hf_config`` of benchmarks/corpus/h200_runs.jsonl) at two depths, times forward + loss +
backward at 64 tokens with and without ``gradient_checkpointing_enable()`` (transformers 5: non-reentrant
``torch.utils.checkpoint`` around each ``GradientCheckpointingLayer``), and prints per decoder layer (the difference
between the depths over the layers added, so the embedding, logits and loss drop out):

* ``plain``: host ms of a layer's forward and backward;
* ``ckpt``: the same layer checkpointed (its forward, the recompute in the backward and the backward);
* ``fwd``: host ms of the plain layer's forward alone (the share of ``plain`` the recompute repeats);
* ``saved``: tensors the layer's autograd graph saves in its forward (each one a pack hook in the forward and
  in the recompute, and an unpack in the backward under checkpointing);
* ``ops``: aten operators the layer dispatches in a plain forward + backward.

A GPT-2 shape is timed with its dropout (0.1) and without, to show what the recompute's RNG-state handling costs.
One command on the GPU machine:

    python benchmarks/gpu_hf_layer_host.py
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
SHAPES = ("hf-gpt2-h640", "hf-neox-h1024", "hf-llama-h2048", "hf-smollm2-h960", "hf-qwen3-h1024")
DEPTHS = (2, 8)
TOKENS = 64
STEPS = 30


def corpus_configs() -> dict:
    """The ``hf_config`` of each shape in :data:`SHAPES`, from the first corpus run of that shape."""
    out = {}
    for line in CORPUS.read_text().splitlines():
        run = json.loads(line)
        if run.get("shape_id") in SHAPES and run["shape_id"] not in out and run.get("hf_config"):
            out[run["shape_id"]] = run["hf_config"]
    return out


def build(hf_config: dict, layers: int, dropout: bool):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(hf_config)
    cfg.pop("architectures", None)
    model_type = cfg.pop("model_type")
    key = "n_layer" if "n_layer" in cfg else "num_hidden_layers"
    cfg[key] = layers
    if not dropout:
        for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout"):
            if k in cfg:
                cfg[k] = 0.0
    config = AutoConfig.for_model(model_type, **cfg)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
    return model.cuda().train()


def step_ms(model, ids, *, forward_only=False) -> float:
    """Median wall ms of forward + loss (+ backward) over :data:`STEPS` steps after 5 warm-ups."""
    import torch

    times = []
    for i in range(STEPS + 5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        if forward_only:
            torch.cuda.synchronize()
            t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        if i >= 5:
            times.append((t1 if forward_only else t2) - t0)
    return statistics.median(times) * 1e3


def counts(model, ids) -> tuple:
    """``(saved tensors, aten ops)`` of one plain forward + backward of the model."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    saved = [0]

    def pack(t):
        saved[0] += 1
        return t

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Count():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return saved[0], Count.n


def measure(shape: str, hf_config: dict, dropout: bool) -> dict:
    import torch

    per = {}
    for layers in DEPTHS:
        model = build(hf_config, layers, dropout)
        ids = torch.randint(0, 1000, (1, TOKENS), device="cuda")
        model.gradient_checkpointing_disable()
        plain, fwd = step_ms(model, ids), step_ms(model, ids, forward_only=True)
        saved, ops = counts(model, ids)
        model.gradient_checkpointing_enable()
        ckpt = step_ms(model, ids)
        per[layers] = dict(plain=plain, ckpt=ckpt, fwd=fwd, saved=saved, ops=ops)
        del model
        torch.cuda.empty_cache()
    lo, hi = DEPTHS
    return {k: (per[hi][k] - per[lo][k]) / (hi - lo) for k in per[hi]}


def main() -> int:
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}, "
          f"{TOKENS} tokens, depths {DEPTHS}, median of {STEPS} steps; per decoder layer:")
    print(f"{'shape':<22} {'dropout':>7} {'plain ms':>9} {'ckpt ms':>8} {'fwd ms':>7} {'ckpt/plain':>10} "
          f"{'saved':>6} {'ops':>6}")
    configs = corpus_configs()
    for shape in SHAPES:
        has_dropout = any(float(configs[shape].get(k, 0.0) or 0.0) > 0 for k in ("resid_pdrop", "attn_pdrop"))
        for dropout in ((True, False) if has_dropout else (False,)):
            r = measure(shape, configs[shape], dropout)
            print(f"{shape:<22} {str(dropout):>7} {r['plain']:9.3f} {r['ckpt']:8.3f} {r['fwd']:7.3f} "
                  f"{r['ckpt'] / r['plain']:10.2f} {r['saved']:6.1f} {r['ops']:6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
