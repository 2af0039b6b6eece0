"""Host time of one transformers MoE block, forward + backward, against a dense MLP of the same width, on a CUDA GPU.

transformers 5 runs a Mixtral / Qwen2-MoE / Qwen3-MoE layer's experts with ``grouped_mm_experts_forward``
(transformers/integrations/moe.py): router GEMM, fp32 softmax and top-k, a sort by expert, a gather, two grouped
GEMMs, the weighted combine and its un-permute, ~150 kernels forward and backward whatever the expert count;
``eager`` loops over the experts hit. With few tokens the GPU finishes every kernel before the host queues the next,
so the wall time of a step is the host's: this script times each block at 128 tokens (host) and at 8192 (to show it
stays host-bound at training sizes) and a dense ``Qwen3MoeMLP`` (gate, up, down) of intermediate width 2048.

The catalog's ``transformers.moe_block_host_s`` is the grouped_mm block's host time beyond the dense MLP's at the
two fit-split MoE shapes of benchmarks/accuracy_split.json (hf-qwen3moe-h768: h 768, 32 experts top-4 of width 384;
hf-qwen2moe-h1024: h 1024, 16 experts top-4 of width 512 and a shared expert of 2048); 8- and 128-expert variants
of the first show that it does not grow with the expert count. One command on the GPU machine:

    python benchmarks/gpu_hf_moe_host.py

Measured on one H200 (torch 2.11, transformers 5.17), ms per forward + backward:

    block                         host (128 tokens)   8192 tokens   dense MLP (128 / 8192)
    qwen3-moe  32 experts, grouped_mm      3.25            3.33          0.99 / 1.00
    qwen3-moe  32 experts, eager           6.77            7.44
    qwen3-moe   8 experts, grouped_mm      3.08            3.42          0.97 / 1.17
    qwen3-moe   8 experts, eager           4.00            4.34
    qwen3-moe 128 experts, grouped_mm      3.22            3.79          1.02 / 0.98
    qwen3-moe 128 experts, eager          12.38           11.86
    qwen2-moe  16 experts, grouped_mm      3.41            3.99          0.99 / 0.82
    qwen2-moe  16 experts, eager           7.39            7.64

The blocks are built by their constructors, whose weights are ``torch.empty``: the router came out all zeros, so
every token went to the first top-k experts and the eager rows above hit 2, 4, 8 and 4 experts, not all of them.
``--eager`` draws every weight from N(0, 0.02) so that the tokens reach every expert (:data:`EAGER_HOST_MS` holds
both; :func:`eager_fit` fits the catalog's ``transformers.moe_eager_block_host_s`` and
``moe_eager_expert_host_s`` to them: a + b × experts hit, least squares of relative error)::

    python benchmarks/gpu_hf_moe_host.py --eager
    python benchmarks/gpu_hf_moe_host.py --eager-fit

grouped_mm beyond the dense MLP at the two fit shapes: 3.25 - 0.99 = 2.26 ms and 3.41 - 0.99 = 2.42 ms (the
latter with the shared expert, itself a dense MLP); the catalog takes 2.26 ms for the routed experts and prices a
shared expert's host with the dense layer's.

``--gpu-time`` times the block's kernels at training sizes instead (8192 and 32768 tokens, six shapes from 8 top-2
to 128 top-8 experts, h 768 to 2048): the torch profiler's device time per kernel, the host's gaps left out, split
into the grouped and router GEMMs and every other kernel (:data:`GPU_KERNEL_MS`). The GEMMs take 0.69-1.15x what
the GEMM curve prices at M = tokens·top-k/experts rows per expert (the curve is mostly above); the other kernels take
1.7-2.4x the GEMMs' time and run at about a fifth of HBM bandwidth over the bytes
``workbench.timing.hf_moe_block_bytes`` counts. ``--fit`` prints that efficiency (catalog
``transformers.moe_block_hbm_efficiency``)::

    python benchmarks/gpu_hf_moe_host.py --gpu-time
    python benchmarks/gpu_hf_moe_host.py --fit
    python benchmarks/gpu_hf_moe_host.py --fit results/moe_gpu_time_h100.txt H100-SXM   # another GPU's own

On one H100 with transformers 5.24 (``results/moe_gpu_time_h100.txt``) the GEMMs took 1.03-1.06x the H200's time
above and the other kernels 0.65-0.81x, 0.405 of the H100's 3350 GB/s: the H200's table was measured with
transformers 5.17, so that gain mixes the GPU and the library's newer MoE code.
"""
from __future__ import annotations

import time


def _config(name: str):
    from transformers.models.qwen2_moe.configuration_qwen2_moe import Qwen2MoeConfig
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig

    if name == "qwen2-moe e16":
        return Qwen2MoeConfig(hidden_size=1024, intermediate_size=2048, moe_intermediate_size=512,
                              shared_expert_intermediate_size=2048, num_experts=16, num_experts_per_tok=4)
    experts, top_k = {"qwen3-moe e32": (32, 4), "qwen3-moe e8": (8, 2), "qwen3-moe e128": (128, 8)}[name]
    return Qwen3MoeConfig(hidden_size=768, intermediate_size=2048, moe_intermediate_size=384, num_experts=experts,
                          num_experts_per_tok=top_k, norm_topk_prob=True)


def step_ms(module, hidden_size: int, tokens: int, repeats: int = 30) -> float:
    """Mean wall milliseconds of forward + backward (a sum as the loss) after five warm-up steps."""
    import torch

    x = torch.randn(1, tokens, hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step():
        y = module(x)
        (y[0] if isinstance(y, tuple) else y).sum().backward()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    from transformers.models.qwen2_moe import modeling_qwen2_moe
    from transformers.models.qwen3_moe import modeling_qwen3_moe
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig

    for name in ("qwen3-moe e32", "qwen3-moe e8", "qwen3-moe e128", "qwen2-moe e16"):
        cfg = _config(name)
        block = (modeling_qwen2_moe.Qwen2MoeSparseMoeBlock if name.startswith("qwen2")
                 else modeling_qwen3_moe.Qwen3MoeSparseMoeBlock)
        for impl in ("grouped_mm", "eager"):
            cfg._experts_implementation = impl
            m = block(cfg).cuda().bfloat16()
            print(f"{name:16s} {impl:11s} host(128 tokens) {step_ms(m, cfg.hidden_size, 128):6.2f} ms   "
                  f"8192 tokens {step_ms(m, cfg.hidden_size, 8192):6.2f} ms", flush=True)
        mlp = modeling_qwen3_moe.Qwen3MoeMLP(Qwen3MoeConfig(hidden_size=cfg.hidden_size, intermediate_size=2048))
        mlp = mlp.cuda().bfloat16()
        print(f"{name:16s} {'dense MLP':11s} host(128 tokens) {step_ms(mlp, cfg.hidden_size, 128):6.2f} ms   "
              f"8192 tokens {step_ms(mlp, cfg.hidden_size, 8192):6.2f} ms", flush=True)


# Measured on one H200 (torch 2.11, transformers 5.17) by ``--gpu-time``: the profiler's device time of every
# kernel of Qwen3MoeSparseMoeBlock forward + backward (grouped_mm experts, bf16, a float sum as the loss), mean of 5
GPU_KERNEL_MS = {  # (h, f, experts, top-k, tokens): (GEMM kernels, other kernels) ms, forward + backward
    (768, 384, 32, 4, 8192): (0.426, 1.569),
    (768, 384, 32, 4, 32768): (1.263, 5.362),
    (768, 384, 8, 2, 8192): (0.266, 0.878),
    (768, 384, 8, 2, 32768): (0.753, 2.976),
    (768, 384, 128, 8, 8192): (0.847, 2.883),
    (768, 384, 128, 8, 32768): (2.486, 10.283),
    (1024, 512, 16, 4, 8192): (0.581, 1.97),
    (1024, 512, 16, 4, 32768): (1.862, 6.996),
    (2048, 768, 128, 8, 8192): (3.308, 6.97),
    (2048, 768, 128, 8, 32768): (10.667, 24.792),
    (2048, 1408, 8, 2, 8192): (1.315, 2.318),
    (2048, 1408, 8, 2, 32768): (4.661, 8.062),
}


def gpu_time_table(path) -> dict:
    """``--gpu-time``'s output as :data:`GPU_KERNEL_MS` holds it: ``{(h, f, experts, top-k, tokens): (GEMM ms,
    other ms)}`` from its ``GPU ...`` lines."""
    import re
    from pathlib import Path

    out = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"GPU h(\d+) e(\d+) k(\d+) f(\d+)\s+tokens\s+(\d+)\s+gemm\s+([\d.]+) ms\s+other\s+([\d.]+) ms",
                     line)
        if m:
            h, experts, top_k, f, tokens = map(int, m.groups()[:5])
            out[(h, f, experts, top_k, tokens)] = (float(m.group(6)), float(m.group(7)))
    return out


def block_efficiency(measured: dict = GPU_KERNEL_MS, gpu_name: str = "H200") -> float:
    """The fraction of the catalog HBM bandwidth of GPU ``gpu_name`` at which the block's non-GEMM kernels move the
    bytes ``workbench.timing.hf_moe_block_bytes`` counts: geometric mean over ``measured`` (the H200's
    :data:`GPU_KERNEL_MS`: catalog ``transformers.moe_block_hbm_efficiency``; another GPU's ``--gpu-time`` output,
    :func:`gpu_time_table`: its ``gpu_kernels`` entry)."""
    import math
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from workbench import catalog
    from workbench.timing import hf_moe_block_bytes

    hbm = catalog.gpu(gpu_name).hbm_gb_per_s * 1e9
    logs = [math.log(hf_moe_block_bytes(copies=tokens * top_k, hidden_size=h, ffn_hidden_size=f, gated=1,
                                        value_bytes=2) / (hbm * other_ms * 1e-3))
            for (h, f, _experts, top_k, tokens), (_gemm_ms, other_ms) in measured.items()]
    return math.exp(sum(logs) / len(logs))


# Eager experts, host ms per forward + backward at 128 tokens on one H200 (torch 2.11, transformers 5.17), less the
# dense MLP's (0.97-1.02 ms), by experts hit: Qwen3MoeSparseMoeBlock h 768, f 384. The first three as the module's
# constructor leaves the router (zeros: the top-k experts hit; the default table above), the last three with every
# weight drawn from N(0, 0.02), every expert hit (measured as ``--eager`` builds the blocks, by a condensed copy of it
# timing 20 steps after 3 warm-ups; the profile below likewise).
EAGER_HOST_MS = {  # (experts, top-k, experts hit): host ms beyond the dense MLP
    (8, 2, 2): 4.00 - 0.97,
    (32, 4, 4): 6.77 - 0.99,
    (128, 8, 8): 12.38 - 1.02,
    (8, 2, 8): 10.27 - 1.0,
    (32, 4, 32): 51.14 - 1.0,
    (128, 8, 128): 201.75 - 1.0,
}
# ``--eager`` at 8192 tokens, all experts hit: the profiler's device ms of the eager block's kernels, (GEMMs, others);
# of the others, the gradient zero-fills and their sums (two vectorized elementwise kernels, 4 launches per expert)
EAGER_KERNEL_MS = {  # (h, f, experts, top-k, tokens): (GEMM kernels, other kernels, zero-fills and sums)
    (768, 384, 8, 2, 8192): (0.322, 1.372, 0.261),
    (768, 384, 32, 4, 8192): (0.971, 5.901, 2.339),
    (768, 384, 128, 8, 8192): (3.293, 44.229, 31.138),
}


def eager_fit() -> tuple:
    """``(a, b)`` seconds: host time of the eager experts block beyond the dense MLP = a + b × experts hit, least
    squares of relative error over :data:`EAGER_HOST_MS` (catalog ``transformers.moe_eager_block_host_s``,
    ``moe_eager_expert_host_s``)."""
    import numpy as np

    hits = np.array([k[2] for k in EAGER_HOST_MS], dtype=float)
    ms = np.array(list(EAGER_HOST_MS.values()))
    a, b = np.linalg.lstsq(np.c_[np.ones_like(hits), hits] / ms[:, None], np.ones_like(ms), rcond=None)[0]
    return a * 1e-3, b * 1e-3


# --- GPU kernel time of the block at training sizes (profiler: each kernel's device time, the host gaps left out)
GPU_SHAPES = (  # (name, hidden, moe width, experts, top-k)
    ("h768 e32 k4 f384", 768, 384, 32, 4),
    ("h768 e8 k2 f384", 768, 384, 8, 2),
    ("h768 e128 k8 f384", 768, 384, 128, 8),
    ("h1024 e16 k4 f512", 1024, 512, 16, 4),
    ("h2048 e128 k8 f768", 2048, 768, 128, 8),
    ("h2048 e8 k2 f1408", 2048, 1408, 8, 2),
)
GEMM_KERNEL = ("gemm", "cutlass", "nvjet", "xmma", "grouped", "sm90_")


def kernel_ms(module, hidden_size: int, tokens: int, repeats: int = 5) -> dict:
    """Device milliseconds per forward + backward of ``module`` by kind of kernel (``gemm``: names with
    :data:`GEMM_KERNEL`'s words; ``other``), summed from the profiler's per-kernel device times."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1, tokens, hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step():
        y = module(x)
        (y[0] if isinstance(y, tuple) else y).float().sum().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            step()
        torch.cuda.synchronize()
    out = {"gemm": 0.0, "other": 0.0, "kernels": []}
    for ev in prof.key_averages():
        us = float(getattr(ev, "self_device_time_total", 0.0) or 0.0)
        if us <= 0:
            continue
        kind = "gemm" if any(w in ev.key.lower() for w in GEMM_KERNEL) else "other"
        out[kind] += us / 1e3 / repeats
        out["kernels"].append((us / 1e3 / repeats, ev.count // repeats, kind, ev.key[:90]))
    out["kernels"].sort(reverse=True)
    return out


def gpu_main() -> None:
    import torch
    from transformers.models.qwen3_moe import modeling_qwen3_moe
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig

    for name, h, f, experts, top_k in GPU_SHAPES:
        cfg = Qwen3MoeConfig(hidden_size=h, intermediate_size=2048, moe_intermediate_size=f, num_experts=experts,
                             num_experts_per_tok=top_k, norm_topk_prob=True)
        cfg._experts_implementation = "grouped_mm"
        block = modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg).cuda().bfloat16()
        with torch.no_grad():
            for p in block.parameters():
                p.normal_(0.0, 0.02)
        for tokens in (8192, 32768):
            got = kernel_ms(block, h, tokens)
            print(f"GPU {name:20s} tokens {tokens:6d}  gemm {got['gemm']:7.3f} ms  other {got['other']:7.3f} ms",
                  flush=True)
            for ms, n, kind, key in got["kernels"][:14]:
                print(f"      {ms:7.3f} ms x{n:3d} {kind:5s} {key}")


def experts_hit(block, hidden_size: int, tokens: int) -> int:
    """Distinct experts the block's router sends ``tokens`` random tokens to."""
    import torch

    x = torch.randn(tokens, hidden_size, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        out = block.gate(x)
    index = out[-1] if isinstance(out, tuple) else out
    return int(torch.unique(index).numel())


def eager_main() -> None:
    """``--eager``: host time (128 tokens) and wall time (8192) of eager and grouped_mm experts with the router as
    built (``nn.Parameter(torch.empty(...))``: all zeros when the allocator hands out fresh pages, so every token
    goes to the same top-k experts) and with every weight drawn from N(0, 0.02) (the tokens spread over the
    experts), the experts hit printed beside each; then the eager block's kernels at 8192 tokens, split as
    :func:`kernel_ms` does."""
    import torch

    for name in ("qwen3-moe e8", "qwen3-moe e32", "qwen3-moe e128", "qwen2-moe e16"):
        cfg = _config(name)
        block = (modeling_block(name))
        for init in ("as built", "normal"):
            for impl in ("grouped_mm", "eager"):
                cfg._experts_implementation = impl
                torch.manual_seed(0)
                m = block(cfg).cuda().bfloat16()
                if init == "normal":
                    with torch.no_grad():
                        for p in m.parameters():
                            p.normal_(0.0, 0.02)
                hits = (experts_hit(m, cfg.hidden_size, 128), experts_hit(m, cfg.hidden_size, 8192))
                print(f"EAGER {name:16s} {init:8s} {impl:11s} hits {hits[0]:3d}/{hits[1]:3d}  host(128 tokens) "
                      f"{step_ms(m, cfg.hidden_size, 128):6.2f} ms   8192 tokens "
                      f"{step_ms(m, cfg.hidden_size, 8192):6.2f} ms", flush=True)
                if init == "normal" and impl == "eager":
                    got = kernel_ms(m, cfg.hidden_size, 8192)
                    print(f"KERNELS {name:16s} eager 8192 gemm {got['gemm']:7.3f} ms other {got['other']:7.3f} ms",
                          flush=True)
                    for ms, n, kind, key in got["kernels"][:12]:
                        print(f"      {ms:7.3f} ms x{n:4d} {kind:5s} {key}")


def modeling_block(name: str):
    from transformers.models.qwen2_moe import modeling_qwen2_moe
    from transformers.models.qwen3_moe import modeling_qwen3_moe

    return (modeling_qwen2_moe.Qwen2MoeSparseMoeBlock if name.startswith("qwen2")
            else modeling_qwen3_moe.Qwen3MoeSparseMoeBlock)


if __name__ == "__main__":
    import sys

    if "--eager-fit" in sys.argv:
        print("moe_eager_block_host_s %.4g  moe_eager_expert_host_s %.4g" % eager_fit())
    elif "--eager" in sys.argv:
        eager_main()
    elif "--gpu-time" in sys.argv:
        gpu_main()
    elif "--fit" in sys.argv:
        # --fit: the H200's table above; --fit FILE GPU: another GPU's --gpu-time output at its catalog bandwidth
        rest = sys.argv[sys.argv.index("--fit") + 1:]
        efficiency = block_efficiency(gpu_time_table(rest[0]), rest[1]) if rest else block_efficiency()
        print(f"moe_block_hbm_efficiency {efficiency:.4f}")
    else:
        main()
