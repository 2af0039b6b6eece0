"""The attention core of Hugging Face transformers' ``sdpa`` implementation on one CUDA GPU: forward and backward
seconds of ``transformers.integrations.sdpa_attention.sdpa_attention_forward`` (PyTorch's
``scaled_dot_product_attention``, causal, no mask, grouped-query heads through ``enable_gqa`` as transformers passes
them) over sequence lengths and head widths, and the fused-attention curve they give.

The time model prices a fused attention kernel as ``efficiency_max · n / (n + half_seq)`` of the dense bf16 peak for
``n`` key/value tokens (:func:`workbench.timing.flash_attention_seconds`, forward FLOPs ``2·s²·heads·d`` causal, the
backward 2.5x them). This script measures that for the kernel transformers' sdpa path runs, per head width, and
fits ``efficiency_max`` and ``half_seq`` of the forward and the backward (least squares of relative time error over
the sequence lengths). Batch 1, bf16, 16 query heads of width d (8 of 256) and 4 or 8 key/value heads, after 3
warm-ups the median of 10 timed calls (CUDA events).

    python benchmarks/gpu_sdpa.py --out sdpa.jsonl
    python benchmarks/gpu_sdpa.py --fit sdpa.jsonl
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
# (head width, query heads, key/value heads)
HEADS = ((64, 32, 8), (128, 32, 8), (128, 32, 32), (256, 8, 4))
WARMUP, TIMED = 3, 10
MASKED_SHAPES = ((128, 36, 4, 4096, 4096), (128, 32, 8, 8192, 4096), (256, 8, 4, 8192, 1024))
"""(head width, query heads, key/value heads, sequence, window) of ``--masked``: StarCoder2 7B's attention at its
window, Mistral 7B v0.1's at twice its window, Gemma 3 4B's at eight times its window."""
LONG_SEQS = (8192, 16384, 32768, 65536, 131072)
LONG_HEADS = ((128, 32, 32), (128, 32, 8), (64, 32, 8))
"""``--long``: the kernel at long-context lengths, 8 k-128 k tokens in one call (what one context-parallel rank's
chunks or an unsplit long sequence give it), MHA at head 128 (Llama 2 7B), GQA at 128 and 64."""
BACKWARD_FLOPS_RATIO = 2.5


def forward_flops(seq: int, heads: int, head_dim: int, batch: int = 1) -> float:
    """Causal attention core forward FLOPs: QKᵀ and PV, each 2·s²·d per head, half of them under the mask."""
    return batch * heads * 2 * 2 * seq * seq * head_dim / 2


def window_mask(seq: int, window: int):
    """The boolean mask transformers hands a sliding-window layer (``True``: attend): key j for query i where
    ``0 <= i - j < window``, shaped ``1 x 1 x s x s``."""
    import torch

    i = torch.arange(seq, device="cuda")
    d = i[:, None] - i[None, :]
    return ((d >= 0) & (d < window))[None, None]


def one(seq: int, head_dim: int, heads: int, kv_heads: int, *, window: int | None = None,
        dropout: float = 0.0) -> dict:
    """One shape timed. ``window``: the call gets a sliding-window boolean mask as transformers passes it once the
    sequence reaches the window (then ``is_causal=False`` and K/V repeated to every head, transformers' own path);
    ``dropout``: the attention dropout probability."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Module(torch.nn.Module):
        is_causal = True
        num_key_value_groups = heads // kv_heads

    module = Module().train()
    q = torch.randn(1, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(1, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    mask = window_mask(seq, window) if window else None

    def call():  # transformers' own sdpa path, as its attention modules call it
        return sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=head_dim ** -0.5,
                                      is_causal=True)[0]

    fwd, total = [], []
    for i in range(WARMUP + TIMED):
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        out = call()
        mid.record()
        out.backward(grad)
        end.record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            fwd.append(start.elapsed_time(mid) / 1e3)
            total.append(start.elapsed_time(end) / 1e3)
        q.grad = k.grad = v.grad = None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # which kernels the sdpa call dispatched to
        call().backward(grad)
        torch.cuda.synchronize()
    kernels = sorted({e.name[:80] for e in prof.events() if e.device_type.name == "CUDA"
                      and any(w in e.name.lower() for w in ("flash", "fmha", "attn", "attention", "cudnn"))})
    f, t = statistics.median(fwd), statistics.median(total)
    flops = forward_flops(seq, heads, head_dim)
    return dict(seq=seq, head_dim=head_dim, heads=heads, kv_heads=kv_heads, window=window, dropout=dropout,
                forward_s=f, backward_s=t - f,
                kernels=kernels, forward_tflops=flops / f / 1e12, backward_tflops=BACKWARD_FLOPS_RATIO * flops / (t - f) / 1e12)


HALF_SEQ = 380.0
"""The curve's half-rate key/value length, held at the catalog's cuDNN value (``flash_attention.hopper``, read off
FlashAttention-3's cuDNN series): below about 8 k tokens one call on an idle GPU lasts as long as the host takes to
launch its kernels (0.1-0.4 ms here), so these timings cannot place it."""
FIT_FROM_SEQ = 8192
"""Only calls at least this long enter the fit (kernel-bound; the shorter ones time the host)."""


def efficiency(records: list, phase: str, peak_tflops: float) -> tuple:
    """Median of ``rate / (peak · n / (n + HALF_SEQ))`` over the kernel-bound points, and its spread (min, max)."""
    vals = [r[f"{phase}_tflops"] / (peak_tflops * r["seq"] / (r["seq"] + HALF_SEQ))
            for r in records if r["seq"] >= FIT_FROM_SEQ]
    return statistics.median(vals), min(vals), max(vals)


def fit(records: list, peak_tflops: float = 989.0) -> list[str]:
    lines = [f"dense bf16 peak {peak_tflops:.0f} TFLOP/s; rate = peak x efficiency_max x n / (n + {HALF_SEQ:.0f}); "
             f"efficiency_max = median over n >= {FIT_FROM_SEQ}",
             f"{'head':>5} {'q/kv':>6} {'phase':<9} {'eff_max':>8} {'range':>13}   TFLOP/s by seq"]
    for key in sorted({(r["head_dim"], r["heads"], r["kv_heads"]) for r in records}):
        sel = sorted((r for r in records if (r["head_dim"], r["heads"], r["kv_heads"]) == key), key=lambda r: r["seq"])
        for phase in ("forward", "backward"):
            e, lo, hi = efficiency(sel, phase, peak_tflops)
            lines.append(f"{key[0]:>5} {key[1]:>3}/{key[2]:<2} {phase:<9} {e:>8.3f} {lo:>6.3f}-{hi:<6.3f}   "
                         + " ".join(f"{r['seq']}:{r[f'{phase}_tflops']:.0f}" for r in sel))
    for head_dim in sorted({r["head_dim"] for r in records}):
        sel = [r for r in records if r["head_dim"] == head_dim]
        lines.append(f"head {head_dim}, all its runs: forward {efficiency(sel, 'forward', peak_tflops)[0]:.3f}, "
                     f"backward {efficiency(sel, 'backward', peak_tflops)[0]:.3f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fit", type=Path, help="print the fit of an existing records file and stop")
    ap.add_argument("--masked", action="store_true",
                    help="the sliding-window case instead: each shape of MASKED_SHAPES causal without a mask, then "
                         "with the window's mask (is_causal=False, K/V repeated), each with dropout 0 and 0.1")
    ap.add_argument("--long", action="store_true",
                    help="the long-context lengths instead: LONG_SEQS (8k-128k tokens) for each of LONG_HEADS")
    args = ap.parse_args(argv)
    if args.fit:
        from gpu_provenance import read_records

        print("\n".join(fit(read_records(args.fit))))
        return 0
    import transformers
    from gpu_provenance import append_record, gpu_provenance

    prov = gpu_provenance(transformers=transformers.__version__)
    records = []
    if args.masked:
        for head_dim, heads, kv, seq, window in MASKED_SHAPES:
            for win in (None, window):
                for dropout in (0.0, 0.1):
                    rec = dict(one(seq, head_dim, heads, kv, window=win, dropout=dropout), provenance=prov)
                    print(f"d {head_dim:3d} q/kv {heads}/{kv} s {seq:6d} window {win} dropout {dropout}  fwd "
                          f"{rec['forward_s'] * 1e3:8.3f} ms  bwd {rec['backward_s'] * 1e3:8.3f} ms  "
                          f"{' | '.join(rec['kernels'])}", flush=True)
                    append_record(args.out, rec)
        return 0
    for head_dim, heads, kv in (LONG_HEADS if args.long else HEADS):
        for seq in (LONG_SEQS if args.long else SEQS):
            rec = dict(one(seq, head_dim, heads, kv), provenance=prov)
            records.append(rec)
            print(f"d {head_dim:3d} q/kv {heads}/{kv} s {seq:6d}  fwd {rec['forward_s'] * 1e3:8.3f} ms "
                  f"{rec['forward_tflops']:6.0f} TF  bwd {rec['backward_s'] * 1e3:8.3f} ms "
                  f"{rec['backward_tflops']:6.0f} TF", flush=True)
            append_record(args.out, rec)
    print("\n".join(fit(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
