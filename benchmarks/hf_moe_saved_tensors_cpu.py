"""What one transformers MoE block keeps for backward, counted on the CPU, against the memory model's MoE terms.

Builds the decoder layer's MoE block (``Qwen3MoeSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock`` with its shared expert,
``MixtralSparseMoeBlock``) from a small config with ``experts_implementation='grouped_mm'`` — what the measured
runs used (``experts_implementation_used`` in the corpus); ``torch._grouped_mm`` runs on the CPU from torch 2.9 —,
in bf16, and records every tensor autograd saves while the block runs its forward
(``torch.autograd.graph.saved_tensors_hooks``), one storage once, leaving out parameters and the block's input (the
norm's output, which the memory model counts with the layer's norms). The printed ratio compares that with
``workbench.memory.moe_activation_bytes`` for the same shape (``tokens`` = s, t = 1, e = 1, balanced)::

    python benchmarks/hf_moe_saved_tensors_cpu.py
    python benchmarks/hf_moe_saved_tensors_cpu.py --experts 32 --topk 4 --hidden 128 --ffn 96 --verbose

Counted (h 64, f 96, 8 experts top-2, 512 tokens; shared expert 160): Qwen3-MoE 2160.06 bytes per token,
Qwen2-MoE 3558.06, Mixtral 2164.06; predicted/counted 1.000, 1.003 (``norm_topk_prob=False`` skips the
normalisation the model counts), 0.998 (Mixtral's fp32 routing weights). Takes ~5 s; the test suite runs the
small default shape (tests/test_hf_moe.py).

``--experts-implementation eager`` counts the experts class's own loop instead (every expert hit keeps its gathered
input, fc1 output, activation, product, down output, weighted output, gathered routing weight and index pair):
Qwen3-MoE 2400.00 bytes per token, Qwen2-MoE 3798.00, Mixtral 2404.00; predicted/counted 1.000, 1.003, 0.998
(tests/test_hf_experts.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral")


def config(family: str, *, hidden=64, ffn=96, experts=8, top_k=2, shared=160) -> dict:
    """A small ``config.json`` dict of one MoE family (one layer, grouped_mm experts)."""
    common = dict(hidden_size=hidden, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                  num_experts_per_tok=top_k, vocab_size=128, max_position_embeddings=4096,
                  output_router_logits=False)
    if family == "qwen3_moe":
        return dict(common, model_type="qwen3_moe", moe_intermediate_size=ffn, intermediate_size=ffn,
                    num_experts=experts, norm_topk_prob=True, head_dim=hidden // 4)
    if family == "qwen2_moe":
        return dict(common, model_type="qwen2_moe", moe_intermediate_size=ffn, intermediate_size=ffn,
                    num_experts=experts, shared_expert_intermediate_size=shared, norm_topk_prob=False)
    if family == "mixtral":
        return dict(common, model_type="mixtral", intermediate_size=ffn, num_local_experts=experts)
    raise ValueError(f"family={family!r}: expected one of {FAMILIES}")


def count(cfg: dict, tokens: int, experts_implementation: str = "grouped_mm") -> dict:
    """``{bytes, tensors}``: bytes autograd keeps from the MoE block's forward (per micro-batch of ``tokens``) and
    ``(bytes, shape, dtype)`` of each saved storage, largest first."""
    import torch
    from transformers import AutoConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    blocks = {"qwen3_moe": Qwen3MoeSparseMoeBlock, "qwen2_moe": Qwen2MoeSparseMoeBlock,
              "mixtral": MixtralSparseMoeBlock}
    data = dict(cfg)
    conf = AutoConfig.for_model(data.pop("model_type"), **data)
    conf._experts_implementation = experts_implementation
    torch.manual_seed(0)
    block = blocks[cfg["model_type"]](conf).to(torch.bfloat16)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.05)
    x = torch.randn(1, tokens, cfg["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = (t.untyped_storage().nbytes(), tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    y.float().sum().backward()  # the saved graph is complete and usable
    tensors = sorted(seen.values(), key=lambda r: -r[0])
    return {"bytes": sum(r[0] for r in tensors), "tensors": tensors}


def predicted(cfg: dict, tokens: int, experts_implementation: str = "grouped_mm") -> float:
    """``workbench.memory.moe_activation_bytes`` for the config's one MoE layer at ``tokens`` (t = e = 1)."""
    from workbench.hf import import_hf
    from workbench.memory import moe_activation_bytes

    spec = import_hf(cfg, seq_length=tokens, experts_implementation=experts_implementation).spec
    return float(moe_activation_bytes(spec, tokens=tokens, tensor_parallel=1, sequence_parallel=False,
                                      expert_tensor_parallel=1, token_factor=1.0, value_bytes=2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--shared", type=int, default=160)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--experts-implementation", choices=["grouped_mm", "eager"], default="grouped_mm")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    for family in FAMILIES:
        cfg = config(family, hidden=a.hidden, ffn=a.ffn, experts=a.experts, top_k=a.topk, shared=a.shared)
        got = count(cfg, a.tokens, a.experts_implementation)
        model = predicted(cfg, a.tokens, a.experts_implementation)
        print(f"{family:10s} counted {got['bytes'] / a.tokens:9.2f} B/token  predicted {model / a.tokens:9.2f}"
              f"  ratio {model / got['bytes']:.4f}")
        if a.verbose:
            for nbytes, shape, dtype in got["tensors"]:
                print(f"    {nbytes / a.tokens:9.2f} {shape} {dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
