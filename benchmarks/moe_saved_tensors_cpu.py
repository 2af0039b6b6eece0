"""What one megatron-core MoE layer keeps for backward, counted on the CPU, against the memory model's MoE terms.

Builds a one-layer ``GPTModel`` with MoE (local layer spec, ``SequentialMLP`` experts, allgather dispatcher — the
alltoall dispatcher makes a CUDA stream when it is built —, dropless top-k routing with the aux loss, unfused
activation; world size 1 over gloo) exactly as ``benchmarks/corpus/measure.py`` builds the measured MoE runs, and
records every tensor autograd saves while the MoE block runs its forward
(``torch.autograd.graph.saved_tensors_hooks``), one storage once, leaving out parameters and the block's input
(the norm's output, which the memory model counts with the layer's norms). The printed ratio compares that with
``workbench.memory.moe_activation_bytes`` for the same shape (``tokens`` = s, t = 1, e = 1)::

    python benchmarks/moe_saved_tensors_cpu.py --experts 8 --topk 2
    python benchmarks/moe_saved_tensors_cpu.py --experts 16 --topk 4 --router-dtype fp32 --gelu
    python benchmarks/moe_saved_tensors_cpu.py --dispatcher alltoall --capacity 1.5 --shared 160

Counted (E 8 top-2, h 64, f 96, s 256 unless said): 685,124 bytes, predicted/counted 0.9999 (either dispatcher);
E 16 top-4 0.9999, GeLU 0.9998; fp32 router 0.9925 (the model takes the router in the model dtype, Megatron's
default); a gated shared expert of 160, 0.9999; padded to capacity 1.5, 0.989 (the capacity path's argsort keeps
16 more bytes of int64 indices per routed copy, not modelled).

Takes ~10 s (most of it importing megatron-core); not run by the test suite.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))


class _NoStream:
    """Stands in for the CUDA side stream megatron-core's alltoall dispatcher copies token counts on (CPU run)."""

    def wait_stream(self, other):
        pass

    def synchronize(self):
        pass

    def record_event(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def count(dims: dict, router_dtype: str | None = None, dispatcher: str = "allgather",
          capacity: float | None = None) -> dict:
    """``{bytes, tensors}``: bytes autograd keeps from the MoE block's forward and ``(bytes, shape, dtype)`` of each
    saved storage, largest first."""
    import torch

    from trace_activations_cpu import cpu_megatron_world

    cpu_megatron_world()
    from megatron.core.transformer import TransformerConfig

    import measure

    shared = dims.get("shared_expert_ffn_hidden_size")
    if router_dtype or dispatcher != "allgather" or shared or capacity:
        post_init = TransformerConfig.__post_init__

        def with_router_options(self):
            if router_dtype:
                self.moe_router_dtype = router_dtype
            self.moe_token_dispatcher_type = dispatcher
            if capacity:  # drop above the capacity and pad every expert's input to it
                self.moe_expert_capacity_factor, self.moe_pad_expert_input_to_capacity = capacity, True
            if shared:  # Qwen2-MoE's shared expert with its sigmoid gate
                self.moe_shared_expert_intermediate_size, self.moe_shared_expert_gate = shared, True
            post_init(self)

        TransformerConfig.__post_init__ = with_router_options
    if dispatcher == "alltoall":  # its token counts go to the host on a side stream: no streams on the CPU
        stream = _NoStream()
        torch.cuda.Stream = lambda *a, **k: stream
        torch.cuda.current_stream = lambda *a, **k: stream
        torch.cuda.stream = lambda s: stream
    model, _ = measure.build_mcore(dims, {"recompute": "none"})
    model = model.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    moe = model.decoder.layers[0].mlp
    saved, state = {}, {"on": False, "input": None}

    def pack(t):
        if state["on"]:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in params and key != state["input"]:
                saved.setdefault(key, (storage.nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", "")))
        return t

    def before(module, args):
        state.update(on=True, input=args[0].untyped_storage().data_ptr())

    def after(module, args, out):
        state["on"] = False

    moe.register_forward_pre_hook(before)
    moe.register_forward_hook(after)
    seq, vocab = dims["seq_length"], dims["vocab_size"]
    tokens = torch.randint(0, vocab, (1, seq + 1))
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)[None, None]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens[:, :-1], torch.arange(seq)[None], mask, labels=tokens[:, 1:]).float().mean()
    loss.backward()
    listed = sorted(saved.values(), reverse=True)
    return dict(bytes=sum(n for n, _, _ in listed), tensors=listed)


def predicted(dims: dict, capacity: float | None = None) -> float:
    """``moe_activation_bytes`` of the same layer (one rank, one micro-batch of s tokens)."""
    from workbench import memory as M
    from workbench.specs import ModelSpec

    gated = dims["activation"] == "swiglu"
    m = ModelSpec(name="toy-moe", num_layers=1, hidden_size=dims["hidden_size"],
                  num_attention_heads=dims["num_attention_heads"], ffn_hidden_size=dims["ffn_hidden_size"],
                  vocab_size=dims["vocab_size"], seq_length=dims["seq_length"],
                  activation="swiglu" if gated else "gelu", normalization=dims["normalization"],
                  add_bias_linear=False, position_embedding=dims["position_embedding"],
                  num_experts=dims["num_experts"], moe_top_k=dims["moe_top_k"], hidden_dropout=0.0,
                  attention_dropout=0.0, shared_expert_ffn_hidden_size=dims.get("shared_expert_ffn_hidden_size"))
    return float(M.moe_activation_bytes(m, tokens=dims["seq_length"], tensor_parallel=1, sequence_parallel=False,
                                        expert_tensor_parallel=1, token_factor=capacity or 1.0, value_bytes=2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=96, help="expert MLP width")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--gelu", action="store_true", help="GeLU experts (default SwiGLU)")
    ap.add_argument("--shared", type=int, default=None, metavar="F",
                    help="a shared expert of width F with its sigmoid gate (Qwen2-MoE)")
    ap.add_argument("--router-dtype", choices=("fp32",), default=None, help="moe_router_dtype (default: model dtype)")
    ap.add_argument("--dispatcher", choices=("allgather", "alltoall"), default="allgather",
                    help="megatron-core token dispatcher (alltoall runs with its CUDA side stream stubbed)")
    ap.add_argument("--capacity", type=float, default=None, metavar="C",
                    help="capacity factor C with expert inputs padded to capacity (use with --dispatcher alltoall)")
    ap.add_argument("--top", type=int, default=12, help="saved tensors listed")
    args = ap.parse_args(argv)
    dims = dict(num_layers=1, hidden_size=args.hidden, num_attention_heads=4, num_query_groups=None,
                ffn_hidden_size=args.ffn, vocab_size=256, seq_length=args.seq,
                activation="gelu" if args.gelu else "swiglu", normalization="rmsnorm", add_bias_linear=False,
                tied_embeddings=False, position_embedding="rotary", hidden_dropout=0.0, attention_dropout=0.0,
                num_experts=args.experts, moe_top_k=args.topk, shared_expert_ffn_hidden_size=args.shared)
    out = count(dims, args.router_dtype, args.dispatcher, args.capacity)
    copies = args.seq * args.topk
    by_kind = collections.Counter()
    for n, shape, dtype in out["tensors"]:
        width = shape[-1] if len(shape) > 1 else "1-d"
        by_kind[(width, dtype)] += n
    print(f"MoE block saved {out['bytes']:,} bytes ({out['bytes'] / args.seq:,.1f} per token, "
          f"{len(out['tensors'])} storages); E={args.experts} top-{args.topk}, h={args.hidden}, f={args.ffn}, "
          f"s={args.seq}, {'GeLU' if args.gelu else 'SwiGLU'}, router dtype {args.router_dtype or 'bf16'}, "
          f"{args.dispatcher} dispatcher")
    for (width, dtype), n in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  last dim {str(width):>5} {dtype:<9} {n:>12,} bytes  {n / copies:8.2f} per routed copy  "
              f"{n / args.seq:8.2f} per token")
    model = predicted(dims, args.capacity)
    print(f"memory model (moe_activation_bytes): {model:,.0f} bytes; predicted / counted = {model / out['bytes']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
