"""What the host and the GPU were doing around a measured run's timed steps.

Host-bound training steps (thin models, small micro-batches, ZeRO-3's hooks, Hugging Face's Python) run at the
speed of one CPU core issuing kernels. Two processes running the same configuration on the same machine minutes
apart were measured up to 40 % apart (``bench_accuracy.py``'s REPEATABILITY table), with each process's own
steps within 1-2 %. :func:`host_probe` records, just before and after a run's timed steps, how fast the host was
at that moment by two fixed workloads (``workbench calibrate``'s, :mod:`workbench.calibrate.measure`) — a
pure-Python loop and a burst of tiny CUDA launches (the per-op dispatch cost a host-bound step pays thousands of
times) — beside the load average, the cores' clock and the GPU's clocks, so a slow run can be told from a slow host.
"""
from __future__ import annotations

import os
import time

from workbench.calibrate.measure import launch_microseconds, python_loop_seconds

COPY_MIB = 64
"""Size of each host<->GPU copy :func:`copy_probe` times (small enough to find room beside a run near capacity)."""
COPY_REPEATS = 5
"""Copies timed per direction and kind of host memory (the median is kept)."""


def copy_probe(torch, mib: int = COPY_MIB, repeats: int = COPY_REPEATS) -> dict:
    """GB/s of one ``copy_`` of ``mib`` MiB between the GPU and host memory, each way, into and out of
    page-locked memory (what DeepSpeed's offload buffers are with ``"pin_memory": true``) and pageable memory
    (``false``: the driver stages every copy through its own page-locked buffer and the host waits for it):
    ``h2d_pinned_gbps``, ``d2h_pinned_gbps``, ``h2d_pageable_gbps``, ``d2h_pageable_gbps`` (medians of
    ``repeats``), or ``{"copy_probe": "<why not>"}`` without CUDA or room. Taken after a run's memory has been read,
    so its buffers touch none of the peaks the record keeps."""
    if not torch.cuda.is_available():
        return {"copy_probe": "no CUDA"}
    try:
        n = mib * 2**20
        gpu = torch.empty(n, dtype=torch.uint8, device="cuda")
        out = {}
        for kind, pin in (("pinned", True), ("pageable", False)):
            host = torch.ones(n, dtype=torch.uint8, pin_memory=pin)  # written once: its pages are resident
            for name, dst, src in (("h2d", gpu, host), ("d2h", host, gpu)):
                dst.copy_(src, non_blocking=True)  # first copy: the driver's staging buffers are set up
                torch.cuda.synchronize()
                seconds = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    dst.copy_(src, non_blocking=True)
                    torch.cuda.synchronize()
                    seconds.append(time.perf_counter() - t0)
                out[f"{name}_{kind}_gbps"] = n / sorted(seconds)[len(seconds) // 2] / 1e9
            del host
        del gpu
        return out
    except Exception as exc:  # recorded, not fatal: the run's own numbers are already taken
        return {"copy_probe": f"{type(exc).__name__}: {exc}"[:200]}


def cpu_mhz() -> list[float]:
    """Each core's current clock from ``/proc/cpuinfo`` (empty where the kernel does not report it)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return [float(line.split(":")[1]) for line in fh if line.startswith("cpu MHz")]
    except OSError:
        return []


def cpu_model() -> str | None:
    """The host CPU's model name from ``/proc/cpuinfo``."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        return None


def gpu_state() -> dict:
    """GPU 0's SM and memory clocks (MHz), temperature (C), power draw (W) and utilization (%) from NVML, or
    ``{"nvml": "<why not>"}``."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("LOCAL_RANK", "0")))
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        return dict(gpu_sm_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    gpu_mem_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                    gpu_temp_c=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                    gpu_power_w=pynvml.nvmlDeviceGetPowerUsage(h) / 1000, gpu_util_pct=util.gpu)
    except Exception as exc:  # recorded, not fatal
        return {"nvml": f"{type(exc).__name__}: {exc}"[:200]}


def host_probe(torch) -> dict:
    """One snapshot: ``python_loop_s``, ``launch_us``, ``loadavg`` (1, 5, 15 min), ``cpu_mhz_mean`` /
    ``cpu_mhz_max``, the :func:`gpu_state` fields, and ``epoch`` (``time.time()`` when it was taken)."""
    mhz = cpu_mhz()
    return dict(epoch=time.time(), python_loop_s=python_loop_seconds(), launch_us=launch_microseconds(torch),
                loadavg=list(os.getloadavg()), cpu_mhz_mean=sum(mhz) / len(mhz) if mhz else None,
                cpu_mhz_max=max(mhz) if mhz else None, **gpu_state())
