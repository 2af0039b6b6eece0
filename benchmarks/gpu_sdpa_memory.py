"""What the attention kernel behind Hugging Face transformers' ``sdpa`` implementation asks of PyTorch's CUDA caching
allocator, block by block, in a training step: the requests and releases of a forward and a backward of
``transformers.integrations.sdpa_attention.sdpa_attention_forward`` (causal, no mask, grouped-query heads passed as
``enable_gqa`` where transformers passes them), for MHA and GQA, head widths 64-256, micro-batches 1-4, sequences
1-8 k, dropout 0 and 0.1, with the CUDA kernels that ran (which of cuDNN's, FlashAttention-2's or the memory-efficient
kernel PyTorch chose).

The allocator replay (:mod:`workbench.allocsim`) builds its traces on the meta device, where these kernels do not
run; this is what it has to reproduce. ``--check FILE`` compares the replay's attention trace with a recorded file
(``tests/test_alloc_sim.py`` does the same).

    python benchmarks/gpu_sdpa_memory.py --out sdpa_memory.json      # on one CUDA GPU
    python benchmarks/gpu_sdpa_memory.py --check benchmarks/results/sdpa_memory_h200.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (micro-batch, query heads, key/value heads, sequence, head width, attention dropout)
CASES = (
    (1, 16, 16, 2048, 64, 0.0), (4, 16, 16, 2048, 64, 0.0), (1, 10, 10, 1024, 64, 0.1), (2, 32, 32, 4096, 128, 0.0),
    (1, 32, 32, 1024, 128, 0.1), (1, 32, 4, 2048, 64, 0.0), (4, 16, 8, 2048, 128, 0.0), (1, 15, 5, 2048, 64, 0.0),
    (1, 32, 8, 4096, 128, 0.0), (1, 16, 8, 4096, 256, 0.0), (2, 16, 2, 4096, 128, 0.0), (1, 32, 8, 8192, 128, 0.0),
    (1, 32, 8, 2048, 128, 0.1), (2, 12, 2, 3072, 128, 0.0), (1, 8, 4, 2048, 256, 0.1),
)


def kernels_of(fn) -> list[str]:
    """Names of the CUDA kernels ``fn()`` launches (the profiler's device events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def backend(names: list[str]) -> str:
    text = " ".join(names).lower()
    for key, label in (("cudnn", "cudnn"), ("flash", "flash"), ("fmha", "efficient"), ("efficient", "efficient")):
        if key in text:
            return label
    return "math"


def events_of(fn) -> list[list]:
    """The allocator's ``[action, block number, bytes]`` events of ``fn()`` (one stream; block numbers count the
    addresses in order of first use within the call)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100_000)
    fn()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
    torch.cuda.memory._record_memory_history(enabled=None)
    ids, out = {}, []
    for e in trace:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        out.append(["alloc" if e["action"] == "alloc" else "free", ids.setdefault(e["addr"], len(ids)), e["size"]])
    return out


def one(case) -> dict:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, kv, s, d, p = case

    class Module(torch.nn.Module):
        is_causal = True
        num_key_value_groups = h // kv

    module = Module().train()

    def qkv():
        # transformers hands sdpa (b, heads, s, d) views of (b, s, heads, d) projections
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        k = torch.randn(b, s, kv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        v = torch.randn(b, s, kv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        return q, k, v

    def forward(q, k, v):
        out, _ = sdpa_attention_forward(module, q, k, v, None, dropout=p, scaling=d ** -0.5, is_causal=True)
        return out

    q, k, v = qkv()
    grad = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    names = kernels_of(lambda: forward(q, k, v).backward(grad))
    rec = dict(batch=b, heads=h, kv_heads=kv, seq=s, head_dim=d, dropout=p, kernels=names, backend=backend(names))
    for it in range(2):
        q, k, v = qkv()
        box = {}
        rec[f"forward{it}"] = events_of(lambda: box.__setitem__("out", forward(q, k, v)))
        rec[f"backward{it}"] = events_of(lambda: box["out"].backward(grad))
        del box
    return rec


def measure(out: Path) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_provenance import gpu_provenance

    records = []
    for case in CASES:
        try:
            records.append(one(case))
        except Exception as exc:  # a case the kernels refuse is a result too
            records.append(dict(zip(("batch", "heads", "kv_heads", "seq", "head_dim", "dropout"), case),
                                error=f"{type(exc).__name__}: {exc}"[:400]))
        torch.cuda.empty_cache()
        r = records[-1]
        print(case, r.get("backend", r.get("error")), len(r.get("backward1", [])), flush=True)
    out.write_text(json.dumps(dict(provenance=gpu_provenance(), cases=records), indent=0) + "\n")


def check(path: Path) -> int:
    from workbench import allocsim

    doc = json.loads(path.read_text())
    bad = 0
    for rec in doc["cases"]:
        if "error" in rec:
            continue
        traced = allocsim.sdpa_events(rec["backend"], rec["batch"], rec["heads"], rec["kv_heads"], rec["seq"],
                                      rec["head_dim"], rec["dropout"])
        for phase in ("forward1", "backward1"):
            real = [[a, n] for a, _, n in rec[phase]]
            mine = traced[phase[:-1]]
            ok = real == mine
            bad += not ok
            print(f"{rec['backend']:6} b{rec['batch']} h{rec['heads']}/{rec['kv_heads']} s{rec['seq']} d{rec['head_dim']}"
                  f" p{rec['dropout']} {phase[:-1]:8} {'same' if ok else 'DIFFERENT'}: real {real} traced {mine}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--check", type=Path)
    args = ap.parse_args(argv)
    if args.check:
        return check(args.check)
    measure(args.out or Path("sdpa_memory.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
