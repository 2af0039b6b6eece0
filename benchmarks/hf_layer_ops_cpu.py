"""Operators one transformers decoder layer dispatches per training step, per model family (CPU, no GPU needed).

Each operator the layer dispatches is at least one kernel launch on a GPU and one pass through PyTorch's dispatcher
on the host, so the count says how host-bound a thin layer can get. Counted with a ``TorchDispatchMode`` over
``model(input_ids, labels=...)`` and ``loss.backward()`` of tiny bf16 models with 1 and 2 decoder layers built from
their config (random weights); the difference is one layer. View and metadata operators (reshape, transpose,
expand, slice, detach, ...) launch no kernel and are left out. Dropout probabilities are 0.

    python benchmarks/hf_layer_ops_cpu.py

Prints one line per family and attention implementation: the layer's forward and backward operators and those of
the rest of the model (embedding, final norm, logits, loss).
"""
from __future__ import annotations

import sys

NO_KERNEL = frozenset({"view", "_unsafe_view", "reshape", "expand", "transpose", "t", "permute", "slice", "select",
                       "unsqueeze", "squeeze", "split", "split_with_sizes", "as_strided", "alias", "detach", "unbind",
                       "empty", "empty_like", "_reshape_alias", "lift_fresh"})

SMALL = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, vocab_size=1000)
FAMILIES = {
    "llama": dict(SMALL, num_key_value_heads=2),
    "mistral": dict(SMALL, num_key_value_heads=2),
    "qwen2": dict(SMALL, num_key_value_heads=2),
    "qwen3": dict(SMALL, num_key_value_heads=2, head_dim=64),
    "gemma": dict(SMALL, num_key_value_heads=1, head_dim=64),
    "gemma2": dict(SMALL, num_key_value_heads=2, head_dim=64),
    "phi3": dict(SMALL, num_key_value_heads=4, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gpt_neox": dict(SMALL, intermediate_size=1024, rotary_pct=0.25, hidden_dropout=0.0, attention_dropout=0.0),
    "gpt2": dict(n_embd=256, n_head=4, vocab_size=1000, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                 bos_token_id=0, eos_token_id=0),
}
SDPA_REFUSED = {"gemma2"}  # transformers builds Gemma 2 with eager attention only (its soft-capped scores)


def count_ops(model_type: str, config: dict, layers: int, attention: str, tokens: int = 64) -> tuple[int, int]:
    """(forward, backward) operators of a ``layers``-layer model's training step on ``tokens`` tokens."""
    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ not in NO_KERNEL:
                self.n += 1
            return func(*args, **(kwargs or {}))

    layer_key = "n_layer" if model_type == "gpt2" else "num_hidden_layers"
    cfg = transformers.AutoConfig.for_model(model_type, **{**config, layer_key: layers})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention).to(torch.bfloat16)
    model.train()
    ids = torch.randint(0, config["vocab_size"], (1, tokens))
    forward, backward = Count(), Count()
    with forward:
        loss = model(input_ids=ids, labels=ids).loss
    with backward:
        loss.backward()
    return forward.n, backward.n


def main() -> int:
    import transformers

    print(f"transformers {transformers.__version__}: operators per training step (forward / backward)")
    print(f"{'family':10s} {'attention':9s} {'layer fwd':>9s} {'layer bwd':>9s} {'rest fwd':>9s} {'rest bwd':>9s}")
    for family, config in FAMILIES.items():
        for attention in ("sdpa", "eager"):
            if attention == "sdpa" and family in SDPA_REFUSED:
                continue
            one = count_ops(family, config, 1, attention)
            two = count_ops(family, config, 2, attention)
            layer = (two[0] - one[0], two[1] - one[1])
            rest = (one[0] - layer[0], one[1] - layer[1])
            print(f"{family:10s} {attention:9s} {layer[0]:9d} {layer[1]:9d} {rest[0]:9d} {rest[1]:9d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
