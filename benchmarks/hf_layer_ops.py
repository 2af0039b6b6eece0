"""Count the PyTorch operators one decoder layer of each transformers family dispatches, forward and backward.

A Hugging Face model runs its layers op by op in eager PyTorch: RMSNorm is eight operators (up-cast, pow, mean, add,
rsqrt, mul, down-cast, scale), rotary embedding ten more, SiLU and the gate product two, the residual adds, the
views and transposes between them; backward replays each as autograd nodes. Each operator costs host time
(Python, the dispatcher, autograd bookkeeping) whatever the tensor sizes, so a layer whose kernels are short is
bound by its operator count, not by its FLOPs. ``workbench/timing.py`` prices that host time as the operator count
below times a fitted seconds-per-operator (``transformers.op_host_seconds``).

The counts are a property of the installed transformers code, not of the model's size: each family's config is
shrunk (hidden 64, 4 heads, GQA kept), built on the CPU in bf16 with 1 and 2 decoder layers, and every operator
reaching the dispatcher (``TorchDispatchMode``) in one training forward and one backward is counted; the
difference is one layer. Per family and attention implementation:

* ``fwd``, ``bwd``: operators of one layer's forward and backward;
* ``ckpt``: forward + backward with ``gradient_checkpointing_enable()`` (non-reentrant, the backward holds the
  recomputed forward);
* ``saved``: tensors one layer saves for backward (each a pack/unpack call of checkpointing's saved-tensor hooks);
* ``lora_fwd``, ``lora_bwd``: what peft LoRA adapters on every projection (``all-linear``, r=4) add to fwd/bwd
  per adapted module (peft's dropout is ``Identity`` at p=0);
* ``model_fwd``, ``model_bwd``: the rest of the model (embedding, final norm, output layer, loss).

    python benchmarks/hf_layer_ops.py            # print the table
    python benchmarks/hf_layer_ops.py --write    # write it to workbench/catalog/efficiency.json transformers.layer_ops
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIGS = ROOT / "tests" / "data" / "hf"
FAMILIES = {"llama": "tiny-llama", "qwen2": "qwen2-0_5b", "qwen3": "qwen3-0_6b", "gemma2": "gemma2-2b",
            "gemma3_text": "gemma3-1b", "gpt2": "gpt2", "gpt_neox": "pythia-160m", "phi3": "phi3-mini"}
"""model_type -> a config of that family under tests/data/hf (mistral and gemma run llama's code path)."""
LORA_MODULES = {"gpt2": 4, "gpt_neox": 4, "phi3": 4}
"""Modules peft's all-linear wraps per layer where projections are fused (else 7: q, k, v, o, gate, up, down)."""


def shrink(cfg: dict) -> dict:
    """The same structure at toy width (GQA kept where the family has it)."""
    c = dict(cfg)
    heads = c.get("num_attention_heads") or c.get("n_head")
    gqa = (c.get("num_key_value_heads") or heads) < heads
    for key, value in (("hidden_size", 64), ("n_embd", 64), ("num_attention_heads", 4), ("n_head", 4),
                       ("intermediate_size", 128), ("head_dim", 16)):
        if key in c:
            c[key] = value
    if "num_key_value_heads" in c:
        c["num_key_value_heads"] = 2 if gqa else 4
    if c.get("model_type") == "gpt2":
        c["n_inner"] = None
    c["vocab_size"] = 256
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        c[key] = 0  # inside the toy vocabulary (Phi-3 defaults pad_token_id to 32000)
    return c


def _run(cfg: dict, layers: int, attn: str, *, ckpt=False, lora=False) -> tuple:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from workbench.hf import build_model

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    cfg = dict(cfg)
    cfg["num_hidden_layers" if "num_hidden_layers" in cfg else "n_layer"] = layers
    torch.manual_seed(0)
    model = build_model(cfg, device="cpu", attn_implementation=attn).to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    model.train()
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, 256, (1, 32))
    model(input_ids=ids, labels=ids).loss.backward()  # warm-up (lazy initialisation)
    fwd, bwd = Count(), Count()
    with fwd:
        loss = model(input_ids=ids, labels=ids).loss
    with bwd:
        loss.backward()
    saved = [0]

    def pack(t):
        saved[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return fwd.n, bwd.n, saved[0]


def layer_ops(model_type: str, attn: str) -> dict:
    """One layer's operator counts (and the rest of the model's) for a family and attention implementation."""
    from workbench.hf import read_config

    cfg = shrink(read_config(CONFIGS / FAMILIES[model_type]))
    (f1, b1, s1), (f2, b2, s2) = _run(cfg, 1, attn), _run(cfg, 2, attn)
    (cf1, cb1, _), (cf2, cb2, _) = _run(cfg, 1, attn, ckpt=True), _run(cfg, 2, attn, ckpt=True)
    (lf1, lb1, _), (lf2, lb2, _) = _run(cfg, 1, attn, lora=True), _run(cfg, 2, attn, lora=True)
    modules = LORA_MODULES.get(model_type, 7)
    fwd, bwd = f2 - f1, b2 - b1
    return {"fwd": fwd, "bwd": bwd, "ckpt": (cf2 - cf1) + (cb2 - cb1), "saved": s2 - s1,
            "lora_fwd": round((lf2 - lf1 - fwd) / modules, 2), "lora_bwd": round((lb2 - lb1 - bwd) / modules, 2),
            "model_fwd": f1 - fwd, "model_bwd": b1 - bwd}


def table() -> dict:
    import torch
    import transformers

    out = {}
    for model_type in FAMILIES:
        out[model_type] = {}
        for attn in ("sdpa", "eager"):
            if attn == "sdpa" and model_type == "gemma2":
                continue  # transformers refuses sdpa for Gemma 2; its flash path is not countable on a CPU
            out[model_type][attn] = layer_ops(model_type, attn)
    out["source"] = (f"benchmarks/hf_layer_ops.py: operators reaching the dispatcher per decoder layer, transformers "
                     f"{transformers.__version__}, torch {torch.__version__.split('+')[0]} (CPU, bf16)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the table into the catalog")
    args = ap.parse_args(argv)
    ops = table()
    for model_type, by_attn in ops.items():
        if model_type != "source":
            for attn, row in by_attn.items():
                print(f"{model_type:12s} {attn:6s} " + " ".join(f"{k}={v}" for k, v in row.items()))
    if args.write:
        path = ROOT / "workbench" / "catalog" / "efficiency.json"
        data = json.loads(path.read_text())
        data.setdefault("transformers", {})["layer_ops"] = ops
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)} transformers.layer_ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
