"""What a bias gradient asks of PyTorch's CUDA caching allocator: the sum over the token dimensions that autograd
runs for a bias added to activations (``nn.Linear`` with a bias, transformers' GPT-2 ``Conv1D`` through
``torch.addmm``, megatron-core's ``x + bias`` before its GeLU) and the same sums called directly, in bf16 and fp32,
for the widths and token counts the corpus trains; each allocation with the C++ frames that made it and the CUDA
kernels that ran.

The recorded histories of GeLU models with biases (``benchmarks/alloc_history.py``) show, once per layer and pass,
blocks on autograd's thread with no Python frame that the meta-device trace of :mod:`workbench.allocsim` does not
make (132 MiB for an 8 k x 4096 bf16 gradient); the models without biases have none. This records where they come
from.

    python benchmarks/gpu_bias_grad_memory.py --out bias_grad_memory.json      # on one CUDA GPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MiB = 2 ** 20
# (rows = tokens, width); each summed over the rows
SUMS = ((8192, 4096), (8192, 1024), (8192, 2560), (8192, 640), (8192, 1920), (4096, 4096), (16384, 1024),
        (2048, 4096), (8192, 7168), (8192, 16384))
# (label, tokens, in width, out width)
LAYERS = (("linear", 8192, 1024, 4096), ("linear", 8192, 4096, 1024), ("addmm", 8192, 640, 2560),
          ("addmm", 8192, 2560, 640), ("bias_add", 8192, 1024, 4096), ("bias_add_3d", 8192, 1024, 4096))


def events_of(fn) -> list[dict]:
    """The allocator's allocations and frees during ``fn()``: size, action and, for allocations of 1 MiB and more,
    the innermost C++ / Python frames naming ATen, cuBLAS or autograd."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="all", max_entries=100_000)
    fn()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
    torch.cuda.memory._record_memory_history(enabled=None)
    out = []
    for e in trace:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        row = dict(action=e["action"], bytes=int(e["size"]))
        if e["action"] == "alloc" and e["size"] >= MiB:
            names = [f.get("name", "") for f in e.get("frames", [])]
            keep = [n for n in names if any(k in n for k in ("at::native", "at::_ops", "cublas", "autograd",
                                                               "torch::autograd", "sum", "reduce", "Reduce"))]
            row["frames"] = keep[:12]
        out.append(row)
    return out


def kernels_of(fn) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def one_sum(rows: int, width: int, dtype) -> dict:
    import torch

    g = torch.randn(rows, width, device="cuda", dtype=dtype)
    fn = lambda: g.sum(0)  # noqa: E731
    fn()
    return dict(case="sum0", rows=rows, width=width, dtype=str(dtype).replace("torch.", ""),
                events=events_of(fn), kernels=kernels_of(fn))


def one_layer(label: str, tokens: int, n_in: int, n_out: int) -> dict:
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16
    x = torch.randn(tokens, n_in, device="cuda", dtype=dt, requires_grad=True)
    w = torch.randn(n_out, n_in, device="cuda", dtype=dt, requires_grad=True)
    b = torch.randn(n_out, device="cuda", dtype=dt, requires_grad=True)
    pre = torch.randn(tokens // 4, 4, n_out, device="cuda", dtype=dt, requires_grad=True)

    def run():
        if label == "linear":
            y = F.linear(x, w, b)
        elif label == "addmm":  # transformers' Conv1D: weight (in, out)
            y = torch.addmm(b, x, w.t().contiguous().detach().requires_grad_())
        elif label == "bias_add":
            y = F.gelu(x @ w.t() + b)
        else:  # megatron-core's [s, b, h] activations plus the bias, then GeLU
            y = F.gelu(pre + b)
        y.backward(torch.ones_like(y))
        x.grad = w.grad = b.grad = pre.grad = None

    run()
    return dict(case=label, tokens=tokens, n_in=n_in, n_out=n_out, events=events_of(run), kernels=kernels_of(run))


def measure(out: Path) -> None:
    import torch

    rows = [one_sum(r, w, dt) for r, w in SUMS for dt in (torch.bfloat16, torch.float32)]
    rows += [one_layer(*c) for c in LAYERS]
    provenance = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda)
    out.write_text(json.dumps(dict(provenance=provenance, rows=rows), indent=1) + "\n")
    for r in rows:
        big = [e["bytes"] / MiB for e in r["events"] if e["action"] == "alloc" and e["bytes"] >= MiB]
        print(r["case"], {k: r[k] for k in r if k in ("rows", "width", "dtype", "tokens", "n_in", "n_out")},
              "allocs >= 1 MiB:", [round(v, 3) for v in big])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the recorded events (JSON)")
    args = ap.parse_args(argv)
    measure(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
