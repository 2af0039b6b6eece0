"""Measurements of the machine the workbench runs on: GEMM throughput, collective time vs message size,
host↔device copies, device memory bandwidth, the host's dispatch speed, CPU Adam step rate, CUDA context size and
allocator reserve.

Every function measures one thing and returns plain numbers (dicts of floats); fitting and applying them lives in
:mod:`workbench.calibrate.profile`. On a machine without CUDA the same functions measure the CPU equivalents
(matmul FLOP/s, gloo collectives between local processes, memcpy bandwidth), so laptop runs can be predicted too.
``torch`` is imported inside the functions: the rest of the workbench does not need it.
"""
from __future__ import annotations

import time
import warnings

GEMM_NAMES = ("qkv", "proj", "fc1", "fc2", "logits")


# ---------------------------------------------------------------------------------------------------------------
# Devices and timing
# ---------------------------------------------------------------------------------------------------------------
def flops_rate_text(tflops: float) -> str:
    """A measured rate with three significant digits in a unit that shows them: TFLOP/s from 1 TFLOP/s, GFLOP/s
    below (a CPU's matmul is tens of GFLOP/s, which ``.1f`` TFLOP/s would print as 0.0)."""
    if tflops >= 1:
        return f"{tflops:,.1f} TFLOP/s"
    return f"{tflops * 1e3:.3g} GFLOP/s"


def device_kind() -> str:
    """``"cuda"`` when a CUDA GPU is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def time_call(fn, *, device: str, repeats: int, warmup: int = 2) -> float:
    """Mean seconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls (CUDA: synchronised)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeats


# ---------------------------------------------------------------------------------------------------------------
# GEMMs
# ---------------------------------------------------------------------------------------------------------------
def model_gemm_shapes(model, *, tensor_parallel_degrees=(1, 2, 4, 8), tokens=(2048,)) -> list[dict]:
    """The (m, n, k) of the weight GEMMs the time model charges for ``model`` (a :class:`ModelSpec`), for each
    tensor-parallel degree that divides the heads and query groups and each token count ``m``:
    QKV n=(q+2·kv)/t k=h; proj n=h k=q/t; fc1 n=f·(2 if gated)/t k=h; fc2 n=h k=f/t; logits n=V/t k=h
    (the shapes of :func:`workbench.timing.step_time_terms`). Duplicate shapes are dropped."""
    from workbench.params import padded_vocab_size

    h, q, kv = model.hidden_size, model.query_projection_size, model.kv_projection_size
    f = model.moe_ffn_hidden_size if model.is_moe else model.ffn_hidden_size
    seen, out = set(), []
    for t in tensor_parallel_degrees:
        if model.num_attention_heads % t or model.num_query_groups % t:
            continue
        vocab = padded_vocab_size(model.vocab_size, t)
        for m in tokens:
            for name, n, k in (("qkv", (q + 2 * kv) // t, h), ("proj", h, q // t),
                               ("fc1", f * (2 if model.is_gated else 1) // t, h), ("fc2", h, f // t),
                               ("logits", vocab // t, h)):
                if (m, n, k) in seen:
                    continue
                seen.add((m, n, k))
                out.append({"name": f"{model.name}/tp{t}/{name}", "m": int(m), "n": int(n), "k": int(k)})
    return out


def gemm_precisions(device: str) -> list[str]:
    """Precisions worth measuring here: bf16/fp16 (+fp8 on GPUs with compute capability >= 8.9) on CUDA;
    fp32 and bf16 on a CPU."""
    if device != "cuda":
        return ["fp32", "bf16"]
    import torch

    out = ["bf16", "fp16"]
    if torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "float8_e4m3fn") \
            and hasattr(torch, "_scaled_mm"):
        out.append("fp8")
    return out


def measure_gemm_tflops(m: int, n: int, k: int, *, precision: str = "bf16", device: str = "cuda",
                        repeats: int = 20) -> float:
    """TFLOP/s of one (m×k)·(k×n) product, 2·m·n·k FLOPs per call. fp8 uses ``torch._scaled_mm`` with e4m3 inputs,
    unit scales and a bf16 output (the way fp8 training libraries call it)."""
    import torch

    if precision == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.ones((), device=device)

        def fn():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)

        def fn():
            return torch.matmul(a, b)
    seconds = time_call(fn, device=device, repeats=repeats)
    return 2.0 * m * n * k / seconds / 1e12


def measure_gemms(shapes: list[dict], *, precision: str, device: str, repeats: int = 20, progress=None) -> list:
    """``[{name, m, n, k, tflops}]`` for each shape; a shape the precision cannot run (fp8 alignment) is skipped."""
    rows = []
    for shape in shapes:
        try:
            tflops = measure_gemm_tflops(shape["m"], shape["n"], shape["k"], precision=precision, device=device,
                                         repeats=repeats)
        except (RuntimeError, TypeError, ValueError) as exc:  # unsupported shape/precision on this device
            if progress:
                progress(f"gemm {precision} {shape['name']}: skipped ({str(exc).splitlines()[0][:80]})")
            continue
        rows.append({**shape, "tflops": float(f"{tflops:.4g}")})
        if progress:
            progress(f"gemm {precision} {shape['name']:>28} m={shape['m']} n={shape['n']} k={shape['k']}: "
                     f"{flops_rate_text(tflops)}")
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Memory bandwidth and host link
# ---------------------------------------------------------------------------------------------------------------
def measure_copy_gb_per_s(nbytes: int, *, device: str, repeats: int = 10) -> float:
    """Device-memory bandwidth of a large copy on ``device`` (HBM on a GPU, DRAM memcpy on a CPU): read + write,
    2·bytes per copy."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = time_call(lambda: dst.copy_(src), device=device, repeats=repeats)
    return 2 * src.numel() * 4 / seconds / 1e9


NVME_AIO_SETTINGS = dict(block_size=1048576, queue_depth=8, single_submit=False, overlap_events=True,
                         intra_op_parallelism=1)
"""DeepSpeed 0.19's ``aio`` defaults (deepspeed/runtime/swap_tensor/constants.py): what a ds_config without an
``aio`` section swaps with."""


def measure_nvme(directory, nbytes: int = 2**30, *, repeats: int = 2) -> dict:
    """Read and write GB/s (1e9 bytes) of the disk under ``directory`` as ZeRO-Infinity's swaps see it: DeepSpeed's
    own async_io handle at its default ``aio`` settings (:data:`NVME_AIO_SETTINGS`; O_DIRECT files, so the page cache
    is not in the way), a page-locked tensor of ``nbytes`` written and read back ``repeats`` times, the medians.
    Raises ``RuntimeError`` naming what is missing when DeepSpeed's async_io op (libaio) cannot be built or loaded,
    and ``OSError`` when the directory cannot take the file. The file is removed afterwards."""
    import os
    import statistics
    import time
    from pathlib import Path

    import torch
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder

        handle = AsyncIOBuilder().load(verbose=False).aio_handle(**NVME_AIO_SETTINGS)
    except Exception as exc:  # ImportError, a failed build: say what is missing
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RuntimeError(f"DeepSpeed's async_io op is not available ({why}): it needs DeepSpeed and libaio's "
                           f"header and library") from exc
    folder = Path(directory).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    buf = torch.empty(int(nbytes), dtype=torch.uint8)
    buf = buf.pin_memory() if torch.cuda.is_available() else buf
    buf.random_(0, 255)
    path = str(folder / f"workbench_nvme_probe_{os.getpid()}.bin")
    writes, reads = [], []
    try:
        for _ in range(repeats):
            t = time.perf_counter()
            if handle.sync_pwrite(buf, path) < 0:
                raise OSError(f"could not write {path} through async_io")
            os.sync()
            writes.append(nbytes / (time.perf_counter() - t) / 1e9)
            t = time.perf_counter()
            if handle.sync_pread(buf, path) < 0:
                raise OSError(f"could not read {path} through async_io")
            reads.append(nbytes / (time.perf_counter() - t) / 1e9)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {"read": statistics.median(reads), "write": statistics.median(writes), "reads": reads, "writes": writes,
            "bytes": int(nbytes), "directory": str(folder)}


def measure_host_link(nbytes: int, *, repeats: int = 5) -> dict:
    """Host↔device copy bandwidth, GB/s: ``{h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable}`` (CUDA only)."""
    import torch

    out = {}
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    for kind, pin in (("pinned", True), ("pageable", False)):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        host.fill_(1)
        out[f"h2d_{kind}"] = nbytes / time_call(lambda: dev.copy_(host, non_blocking=pin), device="cuda",
                                                repeats=repeats, warmup=1) / 1e9
        out[f"d2h_{kind}"] = nbytes / time_call(lambda: host.copy_(dev, non_blocking=pin), device="cuda",
                                                repeats=repeats, warmup=1) / 1e9
        del host
    return out


# ---------------------------------------------------------------------------------------------------------------
# Host dispatch: how fast one CPU core issues work
# ---------------------------------------------------------------------------------------------------------------
PYTHON_LOOP = 1_000_000
"""Iterations of :func:`python_loop_seconds` (about 30-70 ms on a current server core)."""
LAUNCHES = 2000
"""Tiny in-place CUDA adds :func:`launch_microseconds` issues back to back."""
HOST_PROBES = 7
"""Probes :func:`measure_host_dispatch` takes (the median is kept: one host's speed moves from moment to moment)."""


def python_loop_seconds(n: int = PYTHON_LOOP) -> float:
    """Seconds for ``n`` iterations of a Python ``for`` loop adding integers (the interpreter's speed now)."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t0


def launch_microseconds(torch, n: int = LAUNCHES):
    """Host microseconds per tiny CUDA kernel launch (``x.add_(1)`` on one element, ``n`` in a row, one
    synchronize), or ``None`` without CUDA. The GPU finishes each add before the host issues the next, so this is
    the dispatch cost of PyTorch's eager mode on this host: what a host-bound training step pays per operator."""
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def measure_host_dispatch(probes: int = HOST_PROBES) -> dict:
    """The host's single-core speed: ``{"launch_us", "python_loop_s"}``, medians of ``probes`` probes of
    :func:`launch_microseconds` (CUDA only; absent on a CPU) and :func:`python_loop_seconds`, with their range
    (``launch_us_range``, ``python_loop_s_range``) and ``probes``."""
    import torch

    launches, loops = [], []
    for _ in range(probes):
        loops.append(python_loop_seconds())
        us = launch_microseconds(torch)
        if us is not None:
            launches.append(us)
    out = {"probes": probes}
    for key, values in (("python_loop_s", loops), ("launch_us", launches)):
        if values:
            values = sorted(values)
            out[key] = values[len(values) // 2]
            out[f"{key}_range"] = [values[0], values[-1]]
    return out


# ---------------------------------------------------------------------------------------------------------------
# CPU Adam (ZeRO-Offload)
# ---------------------------------------------------------------------------------------------------------------
def measure_cpu_adam(num_params: int, *, steps: int = 3, implementation: str = "torch") -> dict:
    """Parameters per second of an Adam step on fp32 CPU tensors, with all the process's threads:
    ``torch.optim.AdamW`` (``implementation="torch"``) or DeepSpeed's ``DeepSpeedCPUAdam`` (``"deepspeed"``; its
    C++ op compiles on first use)."""
    import torch

    param = torch.nn.Parameter(torch.zeros(num_params, dtype=torch.float32))
    param.grad = torch.full_like(param, 1e-3)
    if implementation == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam([param], lr=1e-3)
    elif implementation == "torch":
        opt = torch.optim.AdamW([param], lr=1e-3)
    else:
        raise ValueError(f"cpu adam implementation={implementation!r}: use 'torch' or 'deepspeed'")
    opt.step()  # state allocation
    seconds = time_call(opt.step, device="cpu", repeats=steps, warmup=1)
    return {"params_per_second": num_params / seconds, "implementation": implementation,
            "threads": torch.get_num_threads(), "num_params": num_params}


# ---------------------------------------------------------------------------------------------------------------
# Memory overhead: context and allocator reserve
# ---------------------------------------------------------------------------------------------------------------
def outside_allocator_bytes() -> int:
    """GPU memory this process holds outside PyTorch's caching allocator: total − free − reserved (CUDA context,
    cuBLAS workspace, kernels; NCCL buffers once communicators exist)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free - torch.cuda.memory_reserved())


def measure_context_bytes() -> int:
    """CUDA: memory outside the allocator after a first matmul (context + cuBLAS handles). CPU: the resident set
    of this process (the interpreter with torch loaded), what a CPU run holds before any tensor."""
    import torch

    if torch.cuda.is_available():
        a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        (a @ a).sum().item()
        torch.cuda.synchronize()
        return outside_allocator_bytes()
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def measure_allocator_reserve(*, hidden: int = 2048, tokens: int = 4096, layers: int = 8, steps: int = 3) -> dict:
    """Caching-allocator reserve for a training-like allocation pattern (CUDA only): parameters and gradients of
    ``layers`` MLP-sized layers; per step a forward that keeps activations of several sizes per layer, a backward
    that frees them in reverse while creating short-lived gradient temporaries, then an optimizer-like pass.
    Returns ``{max_allocated_bytes, max_reserved_bytes, reserve_fraction}`` with
    reserve_fraction = max_reserved / max_allocated − 1."""
    import torch

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dt = torch.bfloat16
    weights = [torch.randn(hidden, 4 * hidden, device="cuda", dtype=dt) for _ in range(layers)]
    grads = [torch.zeros_like(w, dtype=torch.float32) for w in weights]
    for _ in range(steps):
        x = torch.randn(tokens, hidden, device="cuda", dtype=dt)
        saved = []
        for w in weights:  # forward: keep inputs and the wide intermediate
            y = x @ w
            saved.append((x, y, torch.nn.functional.gelu(y)))
            x = (saved[-1][2] @ w.t()) + x
        gy = torch.ones_like(x)
        for w, g, (xi, y, a) in zip(reversed(weights), reversed(grads), reversed(saved)):  # backward
            ga = gy @ w
            g.add_((xi.t() @ ga).float())
            gy = gy + ga @ w.t()
            del xi, y, a, ga
        saved.clear()
        for w, g in zip(weights, grads):  # optimizer-like fp32 temporaries
            w.sub_((g * 1e-6).to(dt))
    torch.cuda.synchronize()
    alloc, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    del weights, grads
    torch.cuda.empty_cache()
    return {"max_allocated_bytes": int(alloc), "max_reserved_bytes": int(reserved),
            "reserve_fraction": reserved / alloc - 1.0}


# ---------------------------------------------------------------------------------------------------------------
# Collectives (inside an initialised process group)
# ---------------------------------------------------------------------------------------------------------------
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "p2p")


def message_sizes(max_bytes: int, *, min_bytes: int = 4096, steps_per_octave: int = 1) -> list[int]:
    """Message sizes from ``min_bytes`` to ``max_bytes``, doubling (×2 per step)."""
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes={max_bytes} is below min_bytes={min_bytes}")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(int(size))
        size *= 2 ** (1 / steps_per_octave) if steps_per_octave > 1 else 2
    return out


def measure_collectives(sizes_bytes, *, kinds=COLLECTIVE_KINDS, iters: int = 5, device: str = "cpu") -> list:
    """Seconds per call of each collective at each message size over the default process group (which the caller
    initialised: NCCL on GPUs, gloo on CPUs). ``bytes`` is the whole tensor (the all-reduced tensor, the
    gathered/scattered whole), as :func:`workbench.timing.collective_seconds` counts it; ``p2p`` is one send from
    rank 0 to rank 1 (half a ping-pong). The time of a call is the slowest rank's. Returns
    ``[{kind, bytes, seconds}]`` on every rank."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # all_gather_into_tensor is renamed in newer torch
        for kind in kinds:
            if kind == "p2p" and world < 2:
                continue
            for nbytes in sizes_bytes:
                numel = max(world, nbytes // elem // world * world)
                full = torch.ones(numel, dtype=dtype, device=device)
                part = torch.ones(numel // world, dtype=dtype, device=device)
                if kind == "all_reduce":
                    def fn():
                        dist.all_reduce(full)
                elif kind == "reduce_scatter":
                    def fn():
                        dist.reduce_scatter_tensor(part, full)
                elif kind == "all_gather":
                    def fn():
                        dist.all_gather_into_tensor(full, part)
                elif kind == "p2p":
                    def fn():  # ping-pong between ranks 0 and 1; the others wait
                        if rank == 0:
                            dist.send(full, 1)
                            dist.recv(full, 1)
                        elif rank == 1:
                            dist.recv(full, 0)
                            dist.send(full, 0)
                else:
                    raise ValueError(f"collective kind={kind!r}: use one of {', '.join(COLLECTIVE_KINDS)}")
                dist.barrier()
                seconds = time_call(fn, device=device, repeats=iters, warmup=1)
                if kind == "p2p":
                    seconds /= 2
                slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                rows.append({"kind": kind, "bytes": int(numel * elem), "seconds": float(slowest.item())})
    return rows
