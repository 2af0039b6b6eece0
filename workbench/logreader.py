"""Read DeepSpeed and Megatron training logs (text) and match what they show to the advisor's advice.

Line formats recognised (from the sources that print them):

- Megatron-LM ``training_log`` (megatron/training/training.py), one line per ``--log-interval``::

     [2025-08-01 07:19:37] iteration       10/    5000 | consumed samples:     1280 | elapsed time per iteration
     (ms): 12936.1 | throughput per GPU (TFLOP/s/GPU): 118.7 | learning rate: 1.395349E-07 | global batch size:
     128 | lm loss: 1.044022E+01 | loss scale: 1.0 | grad norm: 26.305 | number of skipped iterations:   0 |
     number of nan iterations:   0 |

  (Megatron-DeepSpeed adds ``samples per second: …`` and ``TFLOPs: …`` fields to the same line.)
- Megatron ``report_memory``: ``[Rank 0] (after 10 iterations) memory (MB) | allocated: … | max allocated: … |
  reserved: … | max reserved: …``.
- DeepSpeed (deepspeed/runtime/engine.py, fp16/loss_scaler.py, utils/timer.py, runtime/utils.py
  ``see_memory_usage``): ``step=10, skipped=2, lr=[…], mom=[…]``; ``[deepspeed] OVERFLOW! Rank 0 Skipping step.
  Attempted loss scale: 65536, reducing to 32768``; ``epoch=0/micro_step=40/global_step=10,
  RunningAvgSamplesPerSec=…, CurrSamplesPerSec=…, MemAllocated=…GB, MaxMemAllocated=…GB``; ``MA 1.2 GB  Max_MA 3.4 GB
  CA 3.5 GB  Max_CA 4 GB``.
- PyTorch ``CUDA out of memory. Tried to allocate 2.00 GiB …``; NCCL failures (``NCCL error``, ``NCCL WARN``,
  watchdog collective timeouts). The rest of PyTorch's out-of-memory message is read as the device stood at the
  failure (:class:`OomReport`), in both of its forms (``c10/cuda/CUDACachingAllocator.cpp``, sizes by its
  ``format_size``: bytes, KiB, MiB, GiB)::

     Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.21 GiB is free. Process 4711
     has 3.00 GiB memory in use. Including non-PyTorch memory, this process has 74.89 GiB memory in use. Of the
     allocated memory 71.20 GiB is allocated by PyTorch, and 2.95 GiB is reserved by PyTorch but unallocated.

  (PyTorch 2.1 and later; "Process N" per other process on the GPU, from NVML, and "this process" for its own) and
  ``Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.06 MiB free;
  14.71 GiB reserved in total by PyTorch)`` (earlier releases). A message wrapped over lines, or prefixed per line
  with ``[rankN]:``, is read whole.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from workbench.defaults import GiB

GRAD_NORM_SPIKE_FACTOR = 3.0
"""A gradient norm above this multiple of the running median of the previous norms counts as a spike."""
GRAD_NORM_WINDOW = 20
"""Previous norms the running median looks at (at least 5 are needed before spikes are flagged)."""

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MEG_ITER = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")
_FIELD = re.compile(r"\|\s*([^|:]+?):\s*(" + _NUM + r"|nan|inf)\s*(?=\|)", re.IGNORECASE)
_MEG_MEM = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: (" + _NUM +
                      r") \| max allocated: (" + _NUM + r") \| reserved: (" + _NUM + r") \| max reserved: (" +
                      _NUM + r")")
_DS_STEP = re.compile(r"step=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
_DS_OVERFLOW = re.compile(r"OVERFLOW!.*?Skipping step\.?(?:.*?Attempted loss scale: (" + _NUM +
                          r")(?:, reducing to (" + _NUM + r"))?)?")
_DS_THROUGHPUT = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=(" + _NUM + r"), CurrSamplesPerSec=(" +
                            _NUM + r"), MemAllocated=(" + _NUM + r")GB, MaxMemAllocated=(" + _NUM + r")GB")
_DS_MEM = re.compile(r"MA (" + _NUM + r") GB\s+Max_MA (" + _NUM + r") GB\s+CA (" + _NUM + r") GB\s+Max_CA (" +
                     _NUM + r") GB")
_SIZE = r"(" + _NUM + r")\s*(GiB|MiB|KiB|bytes|B)\b"
_SIZE_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 1024, "bytes": 1, "B": 1}
_OOM = re.compile(r"CUDA out of memory\.?(?: Tried to allocate " + _SIZE + r")?")
_OOM_AT = re.compile(r"CUDA out of memory", re.IGNORECASE)
_OOM_REQUEST = re.compile(r"Tried to allocate " + _SIZE)
_OOM_DEVICE = re.compile(r"GPU (\d+) has a total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_OOM_OTHER = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_OOM_THIS = re.compile(r"this process has " + _SIZE + r" memory in use")
_OOM_ALLOWED = re.compile(_SIZE + r" allowed;")
_OOM_SPLIT = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch,(?: with " + _SIZE +
                        r" allocated in private pools \([^)]*\),)? and " + _SIZE +
                        r" is reserved by PyTorch but unallocated")
_OOM_BEFORE_2_1 = re.compile(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " +
                             _SIZE + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE + r" reserved in total by PyTorch")
_OOM_MESSAGE_CHARS = 2000
"""How far past "CUDA out of memory" one message is read (the longest real ones, with several processes listed,
are under 1,000 characters)."""
_RANK_PREFIX = re.compile(r"\s*\n\s*(?:\[(?:rank|Rank |RANK )?\d+\]:?\s*)?")
_NCCL = re.compile(r"(NCCL error|NCCL WARN|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
                   r"ncclRemoteError|Watchdog caught collective operation timeout|NCCL communicator was aborted)")

MiB = 2**20

OOM_OTHER_PROCESSES_BYTES = GiB
"""Other processes' memory on the failing GPU from which :func:`oom_diagnosis` names them as the cause (also at
least 5 % of the GPU): below it, a monitoring agent's or a stray context's few hundred MiB."""
OOM_CACHED_SHARE = 0.10
"""Cached-but-free memory, as a share of what PyTorch reserved, from which :func:`oom_diagnosis` speaks of
fragmentation even when the failed request was larger than it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OomReport:
    """One PyTorch CUDA out-of-memory message: the failed request and the device as it stood at the failure. Bytes;
    ``None`` where the message did not say."""

    request_bytes: int
    device: Optional[int] = None
    """The GPU index the message names (its process's numbering, after ``CUDA_VISIBLE_DEVICES``)."""
    total_bytes: Optional[int] = None
    """The GPU's total capacity as CUDA reports it."""
    free_bytes: Optional[int] = None
    """Free on the whole GPU (every process) at the failure."""
    allocated_bytes: Optional[int] = None
    """Held by live tensors of this process (``memory_allocated``)."""
    reserved_bytes: Optional[int] = None
    """Held by this process's caching allocator (``memory_reserved``): allocated plus cached but free."""
    this_process_bytes: Optional[int] = None
    """All this process holds on the GPU, by NVML ("Including non-PyTorch memory, this process has …")."""
    processes: tuple = ()
    """``(pid, bytes)`` of the other processes NVML listed ("Process N has …"). Inside a container whose PID
    namespace hides the host's PIDs a process's own entry is listed this way too (:attr:`own_bytes`)."""
    allowed_bytes: Optional[int] = None
    """A per-process cap (``torch.cuda.set_per_process_memory_fraction``), when set."""

    @property
    def cached_free_bytes(self) -> Optional[int]:
        """Reserved by the allocator but not allocated: cached blocks that the allocator, having already freed
        every wholly unused segment before it raised, could not hand out — pieces of split segments."""
        if self.reserved_bytes is None or self.allocated_bytes is None:
            return None
        return max(0, self.reserved_bytes - self.allocated_bytes)

    def _own_listed(self) -> Optional[tuple]:
        """The listed process that is this one when the message has no "this process" entry: the one whose memory
        covers what this process's allocator reserved, the least such (a PID namespace renumbers the process)."""
        if self.this_process_bytes is not None or self.reserved_bytes is None:
            return None
        covering = [p for p in self.processes if p[1] >= self.reserved_bytes]
        return min(covering, key=lambda p: p[1]) if covering else None

    @property
    def own_bytes(self) -> Optional[int]:
        """This process's memory on the GPU: NVML's "this process", else :meth:`_own_listed`'s."""
        if self.this_process_bytes is not None:
            return self.this_process_bytes
        own = self._own_listed()
        return own[1] if own else None

    @property
    def other_processes(self) -> tuple:
        """``(pid, bytes)`` of the processes on the GPU that are not this one."""
        own = self._own_listed()
        return tuple(p for p in self.processes if p != own)

    @property
    def others_bytes(self) -> Optional[int]:
        """Other processes' memory on the GPU: NVML's list less this process, or, where only this process's own
        total is given, the GPU's used memory less it; ``None`` without process information."""
        if self.processes:
            return sum(b for _, b in self.other_processes)
        if self.this_process_bytes is not None and self.total_bytes is not None and self.free_bytes is not None:
            return max(0, self.total_bytes - self.free_bytes - self.this_process_bytes)
        return None

    @property
    def outside_allocator_bytes(self) -> Optional[int]:
        """This process's memory outside its caching allocator (CUDA context, kernels, NCCL's buffers, cuBLAS'
        handles): its NVML total less what the allocator reserved."""
        own = self.own_bytes
        if own is None or self.reserved_bytes is None:
            return None
        return max(0, own - self.reserved_bytes)

    def to_dict(self) -> dict:
        return {"request_bytes": self.request_bytes, "device": self.device, "total_bytes": self.total_bytes,
                "free_bytes": self.free_bytes, "allocated_bytes": self.allocated_bytes,
                "reserved_bytes": self.reserved_bytes, "cached_free_bytes": self.cached_free_bytes,
                "own_bytes": self.own_bytes, "outside_allocator_bytes": self.outside_allocator_bytes,
                "other_processes": [{"pid": pid, "bytes": b} for pid, b in self.other_processes],
                "others_bytes": self.others_bytes, "allowed_bytes": self.allowed_bytes}


def _size(number: str, unit: str) -> int:
    return int(round(float(number) * _SIZE_UNITS[unit]))


def parse_oom_message(text: str) -> Optional[OomReport]:
    """The :class:`OomReport` of one PyTorch out-of-memory message (from "CUDA out of memory" on; lines joined, a
    ``[rankN]:`` prefix per line dropped); ``None`` when it names no request size."""
    text = " ".join(_RANK_PREFIX.sub(" ", text).split())
    req = _OOM_REQUEST.search(text)
    if req is None:
        return None
    fields = dict(request_bytes=_size(*req.groups()))
    old = _OOM_BEFORE_2_1.search(text)
    if old:
        g = old.groups()
        fields.update(device=int(g[0]), total_bytes=_size(g[1], g[2]), allocated_bytes=_size(g[3], g[4]),
                      free_bytes=_size(g[5], g[6]), reserved_bytes=_size(g[9], g[10]))
        if g[7] is not None:
            fields["allowed_bytes"] = _size(g[7], g[8])
        return OomReport(**fields)
    dev = _OOM_DEVICE.search(text)
    if dev:
        g = dev.groups()
        fields.update(device=int(g[0]), total_bytes=_size(g[1], g[2]), free_bytes=_size(g[3], g[4]))
    split = _OOM_SPLIT.search(text)
    if split:
        g = split.groups()
        allocated = _size(g[0], g[1])
        fields.update(allocated_bytes=allocated, reserved_bytes=allocated + _size(g[4], g[5]))
    this = _OOM_THIS.search(text)
    if this:
        fields["this_process_bytes"] = _size(*this.groups())
    fields["processes"] = tuple((int(pid), _size(n, u)) for pid, n, u in _OOM_OTHER.findall(text))
    allowed = _OOM_ALLOWED.search(text)
    if allowed:
        fields["allowed_bytes"] = _size(*allowed.groups())
    return OomReport(**fields)


def oom_reports(text: str) -> tuple:
    """Every distinct :class:`OomReport` in a log, in order of appearance (the same message printed again — by the
    traceback and a logger, or by the exception's re-raise — counts once)."""
    starts = [m.start() for m in _OOM_AT.finditer(text)]
    out = []
    for i, start in enumerate(starts):
        end = min(starts[i + 1] if i + 1 < len(starts) else len(text), start + _OOM_MESSAGE_CHARS)
        report = parse_oom_message(text[start:end])
        if report is not None and report not in out:
            out.append(report)
    return tuple(out)


def _gib(nbytes) -> str:
    return f"{nbytes / GiB:.2f} GiB"


def oom_diagnosis(report: OomReport, memory=None) -> tuple:
    """``(message, suggestion)`` for one out-of-memory message: where the GPU's memory stood at the failure (the
    request, what live tensors held, what the allocator held cached but free, this process's memory outside the
    allocator, other processes') and which of them made the request fail — a single tensor larger than the GPU,
    other processes on it, fragmentation (more cached but free than requested, in no block that fits), or the live
    tensors themselves, compared with ``memory`` (a :class:`~workbench.memory_types.MemoryEstimate` of the plan the
    run is said to be) when given."""
    r = report
    gpu = f"GPU {r.device}" if r.device is not None else "the GPU"
    parts = [f"{gpu} at the failure: request {_gib(r.request_bytes)}"]
    if r.total_bytes is not None:
        parts.append(f"total {_gib(r.total_bytes)}" + (f", free {_gib(r.free_bytes)}" if r.free_bytes is not None
                                                       else ""))
    if r.allocated_bytes is not None:
        parts.append(f"live tensors {_gib(r.allocated_bytes)}")
    cached = r.cached_free_bytes
    if cached is not None:
        parts.append(f"cached but free {_gib(cached)} ({cached / max(1, r.reserved_bytes):.0%} of the "
                     f"{_gib(r.reserved_bytes)} the allocator reserved)")
    outside = r.outside_allocator_bytes
    if outside is not None:
        parts.append(f"this process outside the allocator {_gib(outside)}")
    others = r.others_bytes
    if others is not None:
        pids = ", ".join(f"PID {pid} {_gib(b)}" for pid, b in r.other_processes)
        parts.append(f"other processes {_gib(others)}" + (f" ({pids})" if pids else ""))
    if r.allowed_bytes is not None:
        parts.append(f"capped at {_gib(r.allowed_bytes)} by set_per_process_memory_fraction")
    message = "; ".join(parts)

    notes = []
    if memory is not None and r.total_bytes is not None:
        if abs(memory.capacity_bytes - r.total_bytes) > 0.03 * r.total_bytes:
            notes.append(f"the plan was estimated for a {_gib(memory.capacity_bytes)} GPU and the log's has "
                         f"{_gib(r.total_bytes)}: give --gpu the run's")
    if r.total_bytes is not None and r.request_bytes > r.total_bytes:
        why = (f"one tensor of {_gib(r.request_bytes)} is larger than the whole GPU ({_gib(r.total_bytes)}): no "
               f"allocator setting or freed memory helps; shrink that tensor (micro batch, sequence, the logits of "
               f"a large vocabulary: chunked loss, tensor parallel)")
    elif others is not None and others >= max(OOM_OTHER_PROCESSES_BYTES, 0.05 * (r.total_bytes or 0)):
        why = (f"other processes held {_gib(others)} of this GPU: another job or a notebook kernel still holding a "
               f"model (free it: del the model, gc.collect(), torch.cuda.empty_cache(), or restart that kernel), "
               f"or two ranks on one GPU (check LOCAL_RANK and CUDA_VISIBLE_DEVICES); every estimate here assumes "
               f"a rank has its GPU to itself")
    elif cached is not None and cached >= r.request_bytes:
        why = (f"fragmentation: the allocator held {_gib(cached)} cached but free, more than the "
               f"{_gib(r.request_bytes)} requested, in pieces of segments none of which fits it; run with "
               f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (--expandable-segments, "
               f"ParallelPlan(expandable_segments=True)), which lets a segment grow instead of cutting new ones")
    else:
        needed = (r.allocated_bytes or 0) + r.request_bytes
        why = f"the live tensors: {_gib(r.allocated_bytes or 0)} held + {_gib(r.request_bytes)} requested"
        if memory is not None:
            predicted = memory.per_gpu_peak_bytes - memory.breakdown.overhead
            why += (f" = {_gib(needed)}, {needed / predicted:.0%} of the {_gib(predicted)} allocated peak the "
                    f"memory model gives the plan")
            if needed > 1.05 * predicted:
                why += (" — more than the plan given holds at its peak: check that the flags match the run (micro "
                        "batch, sequence, recompute, ZeRO stage, offload)")
            else:
                why += "; the plan does not leave room for it: follow the out-of-memory ladder"
        if cached is not None and r.reserved_bytes and cached >= OOM_CACHED_SHARE * r.reserved_bytes:
            why += (f"; {_gib(cached)} ({cached / r.reserved_bytes:.0%} of reserved) sat cached but free: "
                    f"expandable_segments would give part of it back")
    return message, "; ".join([why] + notes)


def _steady_median(values) -> Optional[float]:
    """Median of a logged rate after the first progress line (warm-up, when there are more), over the finite
    positive values only (a ``nan`` or ``inf`` a logger prints is not a measurement); ``None`` when none is left."""
    xs = [x for x in (values[1:] if len(values) > 1 else values) if math.isfinite(x) and x > 0]
    return statistics.median(xs) if xs else None


@dataclass(frozen=True, kw_only=True, slots=True)
class GradNormSpike:
    iteration: int
    grad_norm: float
    running_median: float

    def to_dict(self) -> dict:
        return {"iteration": self.iteration, "grad_norm": self.grad_norm, "running_median": self.running_median}


@dataclass(frozen=True, kw_only=True, slots=True)
class LogSummary:
    """What a training log shows."""

    kind: str
    """``megatron``, ``deepspeed``, ``megatron-deepspeed`` or ``unknown`` (no training lines recognised)."""
    iterations: tuple = ()
    """Iteration numbers of the progress lines."""
    losses: tuple = ()
    """Loss per progress line (``lm loss``), when printed."""
    grad_norms: tuple = ()
    loss_scales: tuple = ()
    """Loss-scale values seen (Megatron's column, DeepSpeed's 'Attempted loss scale')."""
    overflow_count: int = 0
    """DeepSpeed 'OVERFLOW! … Skipping step' lines."""
    skipped_iterations: int = 0
    """Steps skipped: DeepSpeed's ``skipped=`` counter (last value), Megatron's per-interval counts summed."""
    nan_iterations: int = 0
    grad_norm_spikes: tuple = ()
    """:class:`GradNormSpike` s."""
    step_seconds: tuple = ()
    """Seconds per iteration from the progress lines."""
    samples_per_second: tuple = ()
    tflops_per_gpu: tuple = ()
    max_allocated_bytes: int = 0
    """Largest 'max allocated' (Megatron) / 'Max_MA' / 'MaxMemAllocated' (DeepSpeed) seen, bytes."""
    max_reserved_bytes: int = 0
    oom_errors: tuple = ()
    """The CUDA out-of-memory lines."""
    oom_request_bytes: int = 0
    """Largest 'Tried to allocate' of those, bytes."""
    nccl_errors: tuple = ()
    """NCCL error / warning / timeout lines."""
    oom_reports: tuple = ()
    """:class:`OomReport` of each distinct out-of-memory message (:func:`oom_reports`)."""

    @property
    def median_step_seconds(self) -> Optional[float]:
        """Median seconds per iteration, skipping the first progress line (warm-up) when there are more."""
        return _steady_median(self.step_seconds)

    @property
    def median_samples_per_second(self) -> Optional[float]:
        return _steady_median(self.samples_per_second)

    @property
    def median_tflops_per_gpu(self) -> Optional[float]:
        return _steady_median(self.tflops_per_gpu)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "progress_lines": len(self.iterations),
            "last_iteration": self.iterations[-1] if self.iterations else None,
            "first_loss": self.losses[0] if self.losses else None, "last_loss": self.losses[-1] if self.losses else None,
            "overflow_count": self.overflow_count, "skipped_iterations": self.skipped_iterations,
            "nan_iterations": self.nan_iterations,
            "loss_scale_min": min(self.loss_scales) if self.loss_scales else None,
            "loss_scale_last": self.loss_scales[-1] if self.loss_scales else None,
            "grad_norm_spikes": [s.to_dict() for s in self.grad_norm_spikes],
            "median_step_seconds": self.median_step_seconds,
            "median_samples_per_second": self.median_samples_per_second,
            "median_tflops_per_gpu": self.median_tflops_per_gpu,
            "max_allocated_bytes": self.max_allocated_bytes, "max_reserved_bytes": self.max_reserved_bytes,
            "oom_errors": list(self.oom_errors), "oom_request_bytes": self.oom_request_bytes,
            "nccl_errors": list(self.nccl_errors),
            "oom_reports": [r.to_dict() for r in self.oom_reports],
        }


def _spikes(iterations, norms, factor, window) -> tuple:
    out = []
    for i, g in enumerate(norms):
        prev = [x for x in norms[max(0, i - window):i] if x == x]  # drop NaN
        if len(prev) < 5:
            continue
        med = statistics.median(prev)
        if med > 0 and g > factor * med:
            out.append(GradNormSpike(iteration=iterations[i], grad_norm=g, running_median=med))
    return tuple(out)


def parse_log(text: str, *, spike_factor: float = GRAD_NORM_SPIKE_FACTOR, window: int = GRAD_NORM_WINDOW) -> LogSummary:
    """Parse a DeepSpeed / Megatron / Megatron-DeepSpeed training log; ``ValueError`` in one line when it holds a
    number no training writes (a size beyond a float, an iteration of thousands of digits)."""
    if spike_factor <= 1:
        raise ValueError(f"spike_factor={spike_factor} must be > 1")
    try:
        return _parse_log(text, spike_factor=spike_factor, window=window)
    except (OverflowError, ValueError) as exc:  # float("1e400") is inf, int() of it overflows; int("9" * 5000)
        raise ValueError(f"the log holds a number too large to read ({str(exc).splitlines()[0][:80]}); "
                         f"paste the log as the run wrote it") from None


def _parse_log(text: str, *, spike_factor: float, window: int) -> LogSummary:
    iters, losses, norms, norm_iters, scales, step_s, sps, tflops = [], [], [], [], [], [], [], []
    overflow = ds_skipped = meg_skipped = nan_iters = 0
    max_alloc = max_res = 0.0
    ooms, nccl = [], []
    oom_req = 0.0
    saw_megatron = saw_ds = False
    for line in text.splitlines():
        m = _MEG_ITER.search(line)
        if m and "|" in line:
            saw_megatron = True
            it = int(m.group(1))
            iters.append(it)
            fields = {k.strip().lower(): v for k, v in _FIELD.findall(line + ("" if line.rstrip().endswith("|")
                                                                              else " |"))}
            if "elapsed time per iteration (ms)" in fields:
                step_s.append(float(fields["elapsed time per iteration (ms)"]) / 1000.0)
            for key in ("lm loss", "loss"):
                if key in fields:
                    losses.append(float(fields[key]))
                    break
            if "loss scale" in fields:
                scales.append(float(fields["loss scale"]))
            if "grad norm" in fields:
                norms.append(float(fields["grad norm"]))
                norm_iters.append(it)
            if "number of skipped iterations" in fields:
                meg_skipped += int(float(fields["number of skipped iterations"]))
            if "number of nan iterations" in fields:
                nan_iters += int(float(fields["number of nan iterations"]))
            if "samples per second" in fields:
                sps.append(float(fields["samples per second"]))
            for key in ("throughput per gpu (tflop/s/gpu)", "tflops"):
                if key in fields:
                    tflops.append(float(fields[key]))
                    break
            if "tflops" in fields:
                saw_ds = True  # Megatron-DeepSpeed's line
            continue
        m = _MEG_MEM.search(line)
        if m:
            saw_megatron = True
            max_alloc = max(max_alloc, float(m.group(4)) * MiB)
            max_res = max(max_res, float(m.group(6)) * MiB)
            continue
        m = _DS_OVERFLOW.search(line)
        if m:
            saw_ds = True
            overflow += 1
            scales += [float(g) for g in m.groups() if g]  # attempted scale, then the reduced one
            continue
        m = _DS_STEP.search(line)
        if m:
            saw_ds = True
            ds_skipped = max(ds_skipped, int(m.group(2)))
            if not saw_megatron:
                iters.append(int(m.group(1)))
            continue
        m = _DS_THROUGHPUT.search(line)
        if m:
            saw_ds = True
            sps.append(float(m.group(3)))
            max_alloc = max(max_alloc, float(m.group(5)) * GiB)
            continue
        m = _DS_MEM.search(line)
        if m:
            saw_ds = True
            max_alloc = max(max_alloc, float(m.group(2)) * GiB)
            max_res = max(max_res, float(m.group(4)) * GiB)
            continue
        m = _OOM.search(line)
        if m:
            ooms.append(line.strip())
            if m.group(1):
                oom_req = max(oom_req, _size(m.group(1), m.group(2)))
            continue
        if _NCCL.search(line):
            nccl.append(line.strip())
    kind = ("megatron-deepspeed" if saw_megatron and saw_ds else "megatron" if saw_megatron
            else "deepspeed" if saw_ds else "unknown")
    return LogSummary(
        kind=kind, iterations=tuple(iters), losses=tuple(losses), grad_norms=tuple(norms), loss_scales=tuple(scales),
        overflow_count=overflow, skipped_iterations=max(ds_skipped, meg_skipped), nan_iterations=nan_iters,
        grad_norm_spikes=_spikes(norm_iters, norms, spike_factor, window), step_seconds=tuple(step_s),
        samples_per_second=tuple(sps), tflops_per_gpu=tuple(tflops), max_allocated_bytes=int(max_alloc),
        max_reserved_bytes=int(max_res), oom_errors=tuple(ooms), oom_request_bytes=int(oom_req),
        nccl_errors=tuple(nccl), oom_reports=oom_reports(text) if ooms else ())


def read_log(path, **kwargs) -> LogSummary:
    """:func:`parse_log` of a file (``OSError`` when unreadable)."""
    return parse_log(Path(path).read_text(errors="replace"), **kwargs)


# ================================================================================================================
# Matching the log to the advice
# ================================================================================================================
def match_advice(summary: LogSummary, *, model, cluster, plan, memory, time, options=None) -> tuple:
    """Findings from what the log shows, each tied to the advisor's rule it confirms or contradicts, with the
    log's numbers against the models' predictions."""
    from workbench.advisor import Finding, diagnostic_commands, oom_ladder
    from workbench.configs.deepspeed import DeepSpeedOptions
    from workbench.specs import Precision

    o = options or DeepSpeedOptions()
    out = []
    steps = max(len(summary.iterations), summary.iterations[-1] if summary.iterations else 0)
    if summary.kind == "unknown" and not (summary.oom_errors or summary.nccl_errors):
        out.append(Finding(id="log_format", status="warn",
                           message="no DeepSpeed or Megatron progress lines recognised in the log",
                           suggestion="pass the rank-0 output (Megatron 'iteration N/M |' lines or DeepSpeed "
                                      "'step=N, skipped=K' lines with steps_per_print)"))
    # -- loss scale / skipped steps ---------------------------------------------------------------------------
    skipped = max(summary.skipped_iterations, summary.overflow_count)
    if skipped:
        low = min(summary.loss_scales) if summary.loss_scales else None
        scale = f"; loss scale fell to {low:g}" if low is not None else ""
        rate = f" of ~{steps} iterations ({skipped / steps:.1%})" if steps else ""
        if plan.precision is Precision.FP16:
            status = "warn" if (not steps or skipped / steps < 0.05) else "fail"
            sugg = (f"the first few skips are the scale searching down from 2^{o.initial_scale_power}; many mean the scale keeps hitting overflow: "
                    f"keep loss_scale_window={o.loss_scale_window}, clip gradients at {o.clipping_for(model):g}, "
                    f"or train in bf16")
        else:
            status = "fail"
            sugg = ("with bf16 a skipped step means non-finite gradients, not a loss-scale search: lower the learning "
                    f"rate, clip at {o.clipping_for(model):g}, check the data for bad batches")
        out.append(Finding(id="log_skipped_steps", status=status,
                           message=f"{skipped} skipped steps (overflow){rate}{scale}", suggestion=sugg))
    elif summary.loss_scales and plan.precision is Precision.FP16:
        out.append(Finding(id="log_skipped_steps", status="pass",
                           message=f"no skipped steps; loss scale {summary.loss_scales[-1]:g} at the end"))
    # the loss and gradient norm printed as nan/inf, whether or not the framework counted the iteration as NaN
    bad = [i for i, x in enumerate(summary.losses) if not math.isfinite(x)]
    bad_norms = sum(1 for x in summary.grad_norms if not math.isfinite(x))
    if summary.nan_iterations or bad or bad_norms:
        parts = [f"{summary.nan_iterations} NaN iterations counted by the framework"] if summary.nan_iterations else []
        if bad:
            at = (f" (first at iteration {summary.iterations[bad[0]]})"
                  if len(summary.iterations) == len(summary.losses) else "")
            parts.append(f"the loss is {summary.losses[bad[0]]} on {len(bad)} of {len(summary.losses)} progress "
                         f"lines{at}")
        if bad_norms:
            parts.append(f"{bad_norms} non-finite gradient norms")
        out.append(Finding(id="log_nan", status="fail", message="; ".join(parts),
                           suggestion="lower the learning rate, check the data, clip gradients"))
    # -- gradient-norm spikes -> clipping advice ------------------------------------------------------------
    if summary.grad_norm_spikes:
        worst = max(summary.grad_norm_spikes, key=lambda s: s.grad_norm / s.running_median)
        clip = o.clipping_for(model)
        out.append(Finding(id="log_grad_norm_spikes", status="warn",
                           message=f"{len(summary.grad_norm_spikes)} gradient-norm spikes above "
                                   f"{GRAD_NORM_SPIKE_FACTOR:g}× the running median; worst at iteration "
                                   f"{worst.iteration}: {worst.grad_norm:g} vs median {worst.running_median:.3g}",
                           suggestion=f"gradient clipping {clip:g} (the guide's 0.5-1.0 for ≥ 13B) bounds the update; "
                                      f"Adam betas {o.betas[0]:g}/{o.betas[1]:g}; if spikes persist lower the learning "
                                      f"rate or skip the offending batches"))
    elif summary.grad_norms:
        out.append(Finding(id="log_grad_norm_spikes", status="pass",
                           message=f"{len(summary.grad_norms)} gradient norms, none above "
                                   f"{GRAD_NORM_SPIKE_FACTOR:g}× the running median"))
    # -- throughput vs the time model -------------------------------------------------------------------------
    measured = summary.median_step_seconds
    if measured is None and summary.median_samples_per_second:
        measured = plan.global_batch_size / summary.median_samples_per_second
    if measured is not None and time is not None:
        predicted = time.step_seconds
        ratio = measured / predicted
        top = max(((k, v) for k, v in time.breakdown.items() if k != "compute"), key=lambda kv: kv[1])
        ok = ratio <= 1.2
        tfl = summary.median_tflops_per_gpu
        extra = f", {tfl:g} TFLOP/s per GPU logged vs {time.model_tflops_per_gpu:.0f} predicted" if tfl else ""
        out.append(Finding(id="log_throughput", status="pass" if ok else "warn",
                           message=f"measured {measured:.3f} s/iteration vs predicted {predicted:.3f} s "
                                   f"({ratio - 1:+.0%}){extra}",
                           suggestion="" if ok else
                           f"the largest exposed term predicted is {top[0]} ({top[1]:.3f} s); "
                           f"{diagnostic_commands(model, cluster, plan)[0].split('#')[0].strip()} and profile with "
                           f"nsys (see the advisor's commands) to find the gap"))
    # -- memory vs the memory model ---------------------------------------------------------------------------
    if summary.max_allocated_bytes and memory is not None:
        predicted = memory.per_gpu_peak_bytes - memory.breakdown.overhead
        ratio = summary.max_allocated_bytes / predicted
        if ratio > 1.1:
            hint = ("more than predicted: check for extra buffers, fragmentation "
                    "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), or a different config")
        elif ratio < 0.7:
            hint = ("far less than predicted for this plan: the log probably ran a different plan (micro batch, "
                    "recompute, ZeRO stage); give the flags the run used")
        else:
            hint = ""
        out.append(Finding(id="log_memory", status="warn" if hint else "pass",
                           message=f"max allocated {summary.max_allocated_bytes / GiB:.1f} GiB logged vs "
                                   f"{predicted / GiB:.1f} GiB predicted by the memory model ({ratio - 1:+.0%})"
                                   + (f"; max reserved {summary.max_reserved_bytes / GiB:.1f} GiB"
                                      if summary.max_reserved_bytes else ""),
                           suggestion=hint))
    # -- OOM -> the ladder ------------------------------------------------------------------------------------
    if summary.oom_errors:
        ladder = oom_ladder(model, cluster, plan)
        first_fit = next((s for s in ladder if s.fits), None)
        req = (f" (tried to allocate {summary.oom_request_bytes / GiB:.2f} GiB)" if summary.oom_request_bytes
               else "")
        if first_fit is not None:
            sugg = (f"guide §5.2 ladder: step {first_fit.step} — {first_fit.action} — peaks at "
                    f"{first_fit.peak_bytes / GiB:.1f} GiB and costs {first_fit.slowdown:+.0%} step time")
        elif ladder:
            sugg = (f"even the last ladder step needs {ladder[-1].peak_bytes / GiB:.1f} GiB: more GPUs or a shorter "
                    f"sequence")
        else:
            sugg = ("the memory model predicts the plan fits; the log ran something larger (micro batch, sequence) "
                    "or fragmentation bit: try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, then the ladder's "
                    "step 1 (smaller micro batch)")
        out.append(Finding(id="log_oom", status="fail",
                           message=f"{len(summary.oom_errors)} CUDA out-of-memory errors{req}; the model predicts "
                                   f"{memory.per_gpu_peak_bytes / GiB:.1f} GiB of {memory.capacity_bytes / GiB:.1f}",
                           suggestion=sugg))
        for report in summary.oom_reports[:1]:  # the first failure; the others are usually the ranks' copies
            message, why = oom_diagnosis(report, memory)
            more = len(summary.oom_reports) - 1
            out.append(Finding(id="log_oom_device", status="fail",
                               message=message + (f" (and {more} other out-of-memory message"
                                                  f"{'s' if more > 1 else ''} with other numbers)" if more else ""),
                               suggestion=why))
    # -- NCCL ------------------------------------------------------------------------------------------------
    if summary.nccl_errors:
        out.append(Finding(id="log_nccl", status="fail",
                           message=f"{len(summary.nccl_errors)} NCCL error lines; first: {summary.nccl_errors[0][:160]}",
                           suggestion="rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the transport "
                                      "and the failing peer; check NCCL_SOCKET_IFNAME / NCCL_IB_HCA and that every "
                                      "node reaches the others"))
    return tuple(out)
