"""Live tensor memory through one forward + backward of megatron-core's ``GPTModel`` (local layer spec), on the CPU.

A ``TorchDispatchMode`` counts the storage of every tensor an ATen op creates and drops it when the storage is freed,
so the peak and the tensors alive at that moment are exact for the op sequence (not for CUDA kernels' own
temporaries: PyTorch's CUDA ``softmax_backward`` also allocates ``grad * output``, which this CPU trace cannot see).
Dropout runs as ``torch.native_dropout`` with a 1-byte mask, as on a GPU. The second of two iterations is traced, so
megatron-core's global memory buffer (the attention scores' ``baddbmm`` input) counts as already there.

This is how the memory model's per-score working set of the unfused attention backward
(:data:`workbench.memory.UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE`) and its SwiGLU and repeated-K/V terms were read.

    python benchmarks/trace_activations_cpu.py --recompute full --layers 4 --hidden 64 --heads 4 --seq 2048
"""
from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))


def cpu_megatron_world() -> None:
    """One rank of megatron-core on the CPU over gloo (TP = PP = 1), as ``measure.py``'s dry runs build it: one
    torch thread, CUDA device queries answered with the CPU (the MoE router asks), the workbench's CPU adapter applied
    (:func:`workbench.runs.train.single_rank_megatron`). Does nothing the second time."""
    import torch

    from workbench.runs.train import single_rank_megatron
    from workbench.specs import ParallelPlan

    torch.set_num_threads(1)
    torch.cuda.current_device = lambda: "cpu"
    single_rank_megatron(ParallelPlan(world_size=1))


def cpu_mcore_model(dims: dict, recompute: str = "none"):
    """megatron-core's ``GPTModel`` (local layer spec) of ``dims`` as ``measure.py`` builds it, in bf16 on the CPU
    (:func:`cpu_megatron_world`), with dropout run as CUDA runs it (:func:`workbench.allocsim.cuda_dropout`: a 1-byte
    mask)."""
    import torch
    import torch.nn.functional as F

    from workbench.allocsim import cuda_dropout

    _, F.dropout = cuda_dropout()
    cpu_megatron_world()
    import measure

    model, _ = measure.build_mcore(dims, {"recompute": recompute})
    return model.to(torch.bfloat16)


def mcore_batch(seq: int, vocab: int, micro_batch: int = 1, device=None) -> tuple:
    """``(tokens, position_ids, causal_mask)`` for a ``GPTModel`` step: ``seq + 1`` random tokens per sample (inputs
    and shifted labels), on ``device`` (the CPU by default)."""
    import torch

    mask = torch.triu(torch.ones(seq, seq, device=device, dtype=torch.bool), diagonal=1)[None, None]
    pos = torch.arange(seq, device=device)[None].expand(micro_batch, seq)
    return torch.randint(0, vocab, (micro_batch, seq + 1), device=device), pos, mask


def trace(dims: dict, recompute: str, micro_batch: int = 1) -> dict:
    """``{peak_bytes, peak_op, live}`` for the second forward + backward; ``live``: (bytes, op, shape, dtype) of the
    tensors alive at the peak, largest first."""
    import torch

    from workbench.storagetrace import live_storage

    origin: dict = {}
    peak = {"bytes": 0, "op": None, "live": []}

    def on_alloc(key, nbytes, func, tensor):
        origin[key] = (str(func), tuple(tensor.shape), str(tensor.dtype))

    def after_op(live, func):
        if live.current > peak["bytes"]:
            peak.update(bytes=live.current, op=str(func), live=[(n,) + origin[k] for k, n in live.live.items()])

    model = cpu_mcore_model(dims, recompute)
    tokens, pos, mask = mcore_batch(dims["seq_length"], dims["vocab_size"], micro_batch)
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        gc.collect()
        origin.clear()
        peak.update(bytes=0, op=None, live=[])
        with live_storage(on_alloc=on_alloc, after_op=after_op):
            loss = model(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
            loss.backward()
        del loss
    return dict(peak_bytes=peak["bytes"], peak_op=peak["op"], live=sorted(peak["live"], reverse=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--groups", type=int, default=None, help="query groups (GQA)")
    ap.add_argument("--ffn", type=int, default=None, help="default 4 x hidden")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--swiglu", action="store_true", help="SwiGLU + RMSNorm + rotary, untied (else GeLU/LayerNorm)")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--top", type=int, default=12, help="tensors listed at the peak")
    args = ap.parse_args(argv)
    llama = args.swiglu
    dims = dict(num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                num_query_groups=args.groups, ffn_hidden_size=args.ffn or 4 * args.hidden, vocab_size=args.vocab,
                seq_length=args.seq, activation="swiglu" if llama else "gelu",
                normalization="rmsnorm" if llama else "layernorm", add_bias_linear=not llama,
                tied_embeddings=not llama, position_embedding="rotary" if llama else "learned",
                hidden_dropout=args.dropout, attention_dropout=args.dropout)
    out = trace(dims, args.recompute)
    scores = args.heads * args.seq * args.seq
    print(f"peak {out['peak_bytes']:,} bytes at {out['peak_op']} ({out['peak_bytes'] / scores:.2f} bytes per score "
          f"of one layer)")
    for n, op, shape, dtype in out["live"][:args.top]:
        print(f"  {n:>14,}  {op:<40} {str(shape):<24} {dtype}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
