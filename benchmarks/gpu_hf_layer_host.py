"""Host time of one transformers decoder layer, plain and under gradient checkpointing, and of one peft LoRA adapter,
on a CUDA GPU.

With few tokens the GPU finishes every kernel before the host queues the next, so the wall time of a training step
is the host's. This script builds the non-MoE fit-split Hugging Face shapes of benchmarks/accuracy_split.json from
their corpus configs (``hf_config`` of benchmarks/corpus/h200_runs.jsonl) at two depths, 2 and 8 layers, and times
forward + loss + backward at 64 tokens (median of 30 steps after 5 warm-ups); the difference between the depths over
the 6 layers added is one layer's, the embedding, logits and loss left out:

* ``plain``: host ms of a layer's forward and backward;
* ``ckpt``: the same layer under ``gradient_checkpointing_enable()`` (transformers 5: non-reentrant
  ``torch.utils.checkpoint`` around each ``GradientCheckpointingLayer``'s forward): its forward, the recompute inside
  the backward, the backward and the checkpoint machinery;
* ``fwd``: host ms of the plain layer's forward alone, synchronised before the backward (the share of ``plain`` a
  recompute repeats).

``--lora`` times three of the shapes with and without peft LoRA adapters (r 16, alpha 32, dropout 0.05, the corpus
runs' targets), plain and checkpointed, and prints the host ms per adapted projection per forward pass (a
checkpointed layer runs its adapters twice).

    python benchmarks/gpu_hf_layer_host.py
    python benchmarks/gpu_hf_layer_host.py --lora

Measured on one H200 (torch 2.11, transformers 5.17, peft as installed there), ms per decoder layer:

    shape               dropout  plain   ckpt    fwd   ckpt/plain  fwd/plain
    hf-gpt2-h640          0.1    1.861   4.149  1.014     2.23       0.55
    hf-gpt2-h640          0      1.005   2.045  1.112     2.04       1.11
    hf-neox-h1024         0      2.055   3.780  1.127     1.84       0.55
    hf-llama-h2048        0      2.835   6.541  1.269     2.31       0.45
    hf-smollm2-h960       0      1.912   6.460  0.874     3.38       0.46
    hf-qwen3-h1024        0      4.021   6.474  0.985     1.61       0.25

The forward's share of a layer's host is 0.46 at the median of the five shapes as the corpus runs them (GPT-2 with
its dropout; the dropout-free GPT-2 row, whose forward alone timed longer than forward and backward, shows how noisy
single timings of a shared host are): catalog ``transformers.layer_forward_host_share``. A checkpointed layer took
1.6-3.4x a plain one here (median 2.1x); what it takes beyond (1 + 0.46) x plain, the checkpoint machinery, was
0.6-3.7 ms. On the corpus' host the fit split gives less (``benchmarks/fit_hf_host.py``: 0.5 ms), the GPT-2 and
GPT-NeoX shapes least: the catalog keeps the fitted value.

LoRA, ms per adapted projection per forward pass (plain / checkpointed layers): hf-gpt2-h640 (c_attn, c_proj) 0.46
/ 0.14, hf-smollm2-h960 (q, k, v, o) 0.51 / 0.51, hf-llama-h2048 (q, k, v, o) 0.67 / 0.73: the same order as the
0.50 ms ``benchmarks/fit_hf_host.py`` fits on the corpus (catalog ``transformers.lora_module_host_s``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
SHAPES = ("hf-gpt2-h640", "hf-neox-h1024", "hf-llama-h2048", "hf-smollm2-h960", "hf-qwen3-h1024")
LORA_TARGETS = {"hf-gpt2-h640": ["c_attn", "c_proj"], "hf-smollm2-h960": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "hf-llama-h2048": ["q_proj", "k_proj", "v_proj", "o_proj"]}
DROPOUT_KEYS = ("resid_pdrop", "embd_pdrop", "attn_pdrop")
DEPTHS = (2, 8)
TOKENS = 64
STEPS = 30
WARMUP = 5


def corpus_configs() -> dict:
    """The ``hf_config`` of each shape in :data:`SHAPES`, from the first corpus run of that shape."""
    out = {}
    for line in CORPUS.read_text().splitlines():
        run = json.loads(line)
        if run.get("shape_id") in SHAPES and run["shape_id"] not in out and run.get("hf_config"):
            out[run["shape_id"]] = run["hf_config"]
    return out


def build(hf_config: dict, layers: int, *, dropout: bool = True, checkpoint: bool = False, lora=None):
    """The shape's model with ``layers`` decoder layers, bf16 on the GPU in training mode (sdpa attention)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(hf_config)
    cfg.pop("architectures", None)
    model_type = cfg.pop("model_type")
    cfg["n_layer" if "n_layer" in cfg else "num_hidden_layers"] = layers
    if not dropout:
        cfg.update({k: 0.0 for k in DROPOUT_KEYS if k in cfg})
    config = AutoConfig.for_model(model_type, **cfg)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda().train()
    if checkpoint:
        model.gradient_checkpointing_enable()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=lora,
                                                 task_type="CAUSAL_LM"))
        if checkpoint:
            model.enable_input_require_grads()
    return model


def step_ms(model, ids, *, forward_only=False) -> float:
    """Median wall ms of forward + loss + backward (``forward_only``: up to the end of the forward) over
    :data:`STEPS` steps after :data:`WARMUP`."""
    import torch

    times = []
    for i in range(STEPS + WARMUP):
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
        if i >= WARMUP:
            times.append((t1 if forward_only else t2) - t0)
    return statistics.median(times) * 1e3


def per_layer(times: dict) -> float:
    """One layer's ms from the times at the two depths of :data:`DEPTHS`."""
    lo, hi = DEPTHS
    return (times[hi] - times[lo]) / (hi - lo)


def layer_host(hf_config: dict, dropout: bool) -> dict:
    import torch

    ids = torch.randint(0, 1000, (1, TOKENS), device="cuda")
    plain, ckpt, fwd = {}, {}, {}
    for layers in DEPTHS:
        model = build(hf_config, layers, dropout=dropout)
        plain[layers], fwd[layers] = step_ms(model, ids), step_ms(model, ids, forward_only=True)
        model.gradient_checkpointing_enable()
        ckpt[layers] = step_ms(model, ids)
        del model
    return dict(plain=per_layer(plain), ckpt=per_layer(ckpt), fwd=per_layer(fwd))


def lora_host(shape: str, hf_config: dict, checkpoint: bool) -> float:
    """Host ms per adapted projection per forward pass."""
    import torch

    ids = torch.randint(0, 1000, (1, TOKENS), device="cuda")
    base, adapted = {}, {}
    for layers in DEPTHS:
        base[layers] = step_ms(build(hf_config, layers, checkpoint=checkpoint), ids)
        adapted[layers] = step_ms(build(hf_config, layers, checkpoint=checkpoint, lora=LORA_TARGETS[shape]), ids)
    one = build(hf_config, 1, lora=LORA_TARGETS[shape])
    modules = sum(1 for name, _ in one.named_modules() if name.endswith("lora_A"))
    return (per_layer(adapted) - per_layer(base)) / modules / (1 + checkpoint)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lora", action="store_true", help="time peft LoRA adapters instead of the layers")
    args = ap.parse_args(argv)
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}, "
          f"{TOKENS} tokens, depths {DEPTHS}, median of {STEPS} steps")
    configs = corpus_configs()
    if args.lora:
        for shape in LORA_TARGETS:
            plain, ckpt = (lora_host(shape, configs[shape], c) for c in (False, True))
            print(f"{shape:<18} LoRA ms per adapted projection per forward pass: {plain:.3f} plain, "
                  f"{ckpt:.3f} checkpointed", flush=True)
        return 0
    print(f"{'shape':<18} {'dropout':>7} {'plain':>7} {'ckpt':>7} {'fwd':>7} {'ckpt/plain':>10} {'fwd/plain':>9}")
    for shape in SHAPES:
        has_dropout = any(float(configs[shape].get(k) or 0.0) > 0 for k in DROPOUT_KEYS)
        for dropout in ((True, False) if has_dropout else (False,)):
            r = layer_host(configs[shape], dropout)
            print(f"{shape:<18} {str(dropout):>7} {r['plain']:7.3f} {r['ckpt']:7.3f} {r['fwd']:7.3f} "
                  f"{r['ckpt'] / r['plain']:10.2f} {r['fwd'] / r['plain']:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
