"""What one transformers decoder layer keeps for backward under LoRA, counted on the CPU, against the memory model.

Builds a two-layer causal LM of one family (GPT-2 with its ``Conv1D`` projections and dropout, or Llama) from a
small config in bf16 with ``attn_implementation='eager'``, optionally wraps it in a peft LoRA adapter as
``benchmarks/corpus/measure.py`` does (r, ``lora_alpha`` 2r, ``lora_dropout`` 0.05; GPT-2 ``c_attn`` + ``c_proj``,
which peft matches in the attention *and* the MLP; Llama q, k, v, o), and records every tensor autograd saves while
the second layer runs its forward (``torch.autograd.graph.saved_tensors_hooks``), one storage once, parameters left
out. The layer's input (the residual stream, kept by its first norm) counts with the layer, as in the memory model.
The printed ratio compares that with what the memory model charges one layer of the same spec and plan
(:func:`predicted`: ``layer_activation_bytes`` without recompute plus the adapters' ``stage_terms`` share)::

    python benchmarks/hf_lora_saved_tensors_cpu.py --recompute
    python benchmarks/hf_lora_saved_tensors_cpu.py --family gpt2 --lora 16 --verbose

``--recompute`` also traces a checkpointed Llama's second layer through its recompute and backward (SDPA) and
compares the peak above what was alive before it with the layer's saved tensors plus
``hf_recomputed_working_bytes_per_token``.

Counted (h 64, 4 heads, s 128, micro-batch 2; B/token): GPT-2 6280 without LoRA, 6632 with (predicted/counted
0.999 both: the layer norms' statistics); Llama 6184 and 6056 (0.993: rotary cos/sin and RMSNorm statistics);
recomputed Llama with LoRA 4248 (0.998), without 3960 (0.974). Takes ~10 s; the test suite runs the same shapes
(tests/test_hf_lora_activations.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAMILIES = ("gpt2", "llama", "phi3")
LORA_DROPOUT = 0.05  # benchmarks/corpus/measure.py


def config(family: str, *, hidden=64, heads=4, seq=128) -> dict:
    """A small ``config.json`` dict of one family: two layers, the family's dropout (GPT-2 0.1 everywhere)."""
    if family == "gpt2":
        return dict(model_type="gpt2", n_embd=hidden, n_layer=2, n_head=heads, vocab_size=256, n_positions=seq,
                    resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, activation_function="gelu_new",
                    tie_word_embeddings=True)
    if family == "llama":
        return dict(model_type="llama", hidden_size=hidden, num_hidden_layers=2, num_attention_heads=heads,
                    num_key_value_heads=heads, intermediate_size=3 * hidden, vocab_size=256,
                    max_position_embeddings=seq, tie_word_embeddings=False)
    if family == "phi3":  # fused qkv_proj and gate_up_proj
        return dict(model_type="phi3", hidden_size=hidden, num_hidden_layers=2, num_attention_heads=heads,
                    num_key_value_heads=heads, intermediate_size=3 * hidden, vocab_size=256,
                    max_position_embeddings=seq, tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0,
                    attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    raise ValueError(f"family={family!r}: expected one of {FAMILIES}")


def peft_targets(model_type: str) -> list:
    """The ``target_modules`` ``benchmarks/corpus/measure.py`` gives peft; Phi-3 (no corpus LoRA run): its fused
    ``qkv_proj`` and ``gate_up_proj`` and ``o_proj``, each one peft module."""
    if model_type == "phi3":
        return ["qkv_proj", "o_proj", "gate_up_proj"]
    return ["c_attn", "c_proj"] if model_type == "gpt2" else ["q_proj", "k_proj", "v_proj", "o_proj"]


def build(cfg: dict, *, lora: int, attn: str = "eager", checkpointing: bool = False):
    """The config's causal LM in bf16, training mode, optionally with decoder-layer checkpointing
    (``use_reentrant=False``, as ``measure.py``) and the corpus's LoRA adapter."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(cfg)
    conf = AutoConfig.for_model(data.pop("model_type"), **data)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(conf, attn_implementation=attn, dtype=torch.bfloat16)
    model.config.use_cache = False
    from workbench.hf import enable_layer_checkpointing, with_lora

    if checkpointing:
        enable_layer_checkpointing(model)
    if lora:
        if checkpointing:
            model.enable_input_require_grads()
        model = with_lora(model, r=lora, lora_alpha=2 * lora, lora_dropout=LORA_DROPOUT,
                          target_modules=peft_targets(cfg["model_type"]), task_type="CAUSAL_LM")
        # DeepSpeed's bf16 engine casts every parameter to bf16, the adapters' fp32 too (engine.py
        # ``_configure_distributed_model``); peft initialises B to zero, any values will do for counting
        model = model.to(torch.bfloat16)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
    return model.train()


def _module(model, suffixes: tuple):
    found = [m for name, m in model.named_modules() if name.endswith(suffixes)]
    if len(found) != 1:
        raise ValueError(f"expected one module named *{suffixes[0]}, found {len(found)}")
    return found[0]


class _GpuDropout:
    """On a GPU dropout is ``torch.native_dropout`` with a 1-byte mask; the CPU's decomposition keeps a mask in the
    input's dtype instead (aten ``Dropout.cpp`` ``is_fused_kernel_acceptable`` asks for CUDA): run it as on a GPU
    while inside."""

    def __enter__(self):
        import torch
        import torch.nn.functional as F

        self.plain = F.dropout
        F.dropout = lambda x, p=0.5, training=True, inplace=False: (torch.native_dropout(x, p, True)[0]
                                                                    if training and p > 0 else x)

    def __exit__(self, *exc):
        import torch.nn.functional as F

        F.dropout = self.plain


def count(cfg: dict, *, seq: int, micro_batch: int, lora: int) -> dict:
    """``{bytes, tensors}``: bytes autograd keeps from the second layer's forward (one micro-batch, eager
    attention) and ``(bytes, shape, dtype)`` of each saved storage, largest first."""
    import torch

    model = build(cfg, lora=lora)
    layer = _module(model, ("h.1", "layers.1"))
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict = {}
    inside = [False]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if inside[0] and ptr not in skip and ptr not in seen:
            seen[ptr] = (t.untyped_storage().nbytes(), tuple(t.shape), t.dtype)
        return t

    layer.register_forward_pre_hook(lambda module, args: inside.__setitem__(0, True))
    layer.register_forward_hook(lambda module, args, output: inside.__setitem__(0, False))
    ids = torch.randint(0, cfg["vocab_size"], (micro_batch, seq))
    with _GpuDropout(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()  # the saved graph is complete and usable
    tensors = sorted(seen.values(), key=lambda r: -r[0])
    return {"bytes": sum(r[0] for r in tensors), "tensors": tensors}


def recomputed_peak(cfg: dict, *, seq: int, micro_batch: int, lora: int, attn: str = "sdpa") -> dict:
    """``{bytes, op}``: with checkpointed decoder layers, the most bytes alive during the second layer's recompute
    and backward above what was alive just before it started (the checkpointed inputs, the incoming gradient),
    and the op at that moment. A ``TorchDispatchMode`` adds each new storage an op returns (parameters and
    buffers left out) and drops it when the storage is freed, as ``benchmarks/trace_activations_cpu.py``; the
    window runs from the second layer's first norm to the first layer's."""
    import torch

    from workbench.storagetrace import live_storage, storage_keys

    config = dict(cfg, **({"n_layer": 3} if cfg["model_type"] == "gpt2" else {"num_hidden_layers": 3}))
    model = build(config, lora=lora, attn=attn, checkpointing=True)
    state = {"window": False, "base": 0, "peak": 0, "op": ""}

    def after_op(live, func):
        if state["window"] and live.current - state["base"] > state["peak"]:
            state["peak"], state["op"] = live.current - state["base"], str(func)

    tracker = live_storage(skip=storage_keys([*model.parameters(), *model.buffers()]), after_op=after_op)
    backward = [False]

    def open_window(module, args):
        if backward[0] and not state["window"]:
            state["window"], state["base"] = True, tracker.current

    def close_window(module, args):
        if backward[0]:
            state["window"] = False

    norms = ("ln_1", "input_layernorm")
    _module(model, tuple(f"{p}.1.{n}" for p in ("h", "layers") for n in norms)).register_forward_pre_hook(open_window)
    _module(model, tuple(f"{p}.0.{n}" for p in ("h", "layers") for n in norms)).register_forward_pre_hook(close_window)
    ids = torch.randint(0, cfg["vocab_size"], (micro_batch, seq))
    with _GpuDropout(), tracker:
        loss = model(input_ids=ids, labels=ids).loss
        backward[0] = True
        loss.backward()
    return {"bytes": state["peak"], "op": state["op"]}


def predicted(cfg: dict, *, seq: int, micro_batch: int, lora: int, attn: str = "eager",
              recomputed: bool = False) -> float:
    """The memory model's bytes for one layer of the config's spec, one rank: ``layer_activation_bytes`` without
    recompute (norm weights frozen under LoRA) plus ``lora_activation_bytes_per_token`` for the run's targets
    (peft's module names mapped as ``benchmarks/bench_accuracy.py`` maps a corpus run's); ``recomputed``: plus the
    working set of a recomputed layer's backward (``hf_recomputed_working_bytes_per_token``)."""
    from workbench.hf import import_hf, targets_from_modules
    from workbench.memory import (hf_recomputed_working_bytes_per_token, layer_activation_bytes,
                                  lora_activation_bytes_per_token, lora_frees_down_input)

    spec = import_hf(cfg, seq_length=seq, attn_implementation=attn).spec
    _, full = layer_activation_bytes(spec, micro_batch=micro_batch, tensor_parallel=1, sequence_parallel=False,
                                     context_parallel=1, recompute=0, value_bytes=2,
                                     frozen_norms=1.0 if lora else 0.0)
    targets = targets_from_modules(cfg["model_type"], peft_targets(cfg["model_type"]))
    per_token = lora_activation_bytes_per_token(spec, rank=lora, targets=targets, dropout=LORA_DROPOUT,
                                                value_bytes=2)
    if recomputed:
        free_down = int(lora_frees_down_input(spec, rank=lora, targets=targets))
        per_token += hf_recomputed_working_bytes_per_token(spec, value_bytes=2, lora_free_down=free_down)
    return float(full + per_token * seq * micro_batch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=FAMILIES, action="append")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--lora", type=int, action="append", help="LoRA rank (0: none); default 0 and 16")
    ap.add_argument("--recompute", action="store_true",
                    help="also the peak of a checkpointed layer's recompute + backward (SDPA; not GPT-2, whose "
                         "attention dropout sends the CPU's SDPA down its fp32 math path, unlike a GPU)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    tokens = a.seq * a.mbs
    for family in a.family or FAMILIES:
        cfg = config(family, hidden=a.hidden, heads=a.heads, seq=a.seq)
        for rank in (0, 16) if a.lora is None else a.lora:
            got = count(cfg, seq=a.seq, micro_batch=a.mbs, lora=rank)
            model = predicted(cfg, seq=a.seq, micro_batch=a.mbs, lora=rank)
            print(f"{family:6s} lora {rank:3d}  saved (eager)      counted {got['bytes'] / tokens:9.2f} B/token  "
                  f"predicted {model / tokens:9.2f}  ratio {model / got['bytes']:.4f}")
            if a.verbose:
                for nbytes, shape, dtype in got["tensors"]:
                    print(f"    {nbytes / tokens:9.2f} {shape} {dtype}")
            if a.recompute and family != "gpt2":  # GPT-2's SDPA with dropout takes the CPU's fp32 math path
                peak = recomputed_peak(cfg, seq=a.seq, micro_batch=a.mbs, lora=rank)
                model = predicted(cfg, seq=a.seq, micro_batch=a.mbs, lora=rank, attn="sdpa", recomputed=True)
                print(f"{family:6s} lora {rank:3d}  recomputed (sdpa)  counted {peak['bytes'] / tokens:9.2f} B/token  "
                      f"predicted {model / tokens:9.2f}  ratio {model / peak['bytes']:.4f}  at {peak['op']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
