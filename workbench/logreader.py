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
  watchdog collective timeouts).
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
_OOM = re.compile(r"CUDA out of memory\.?(?: Tried to allocate (" + _NUM + r") (GiB|MiB|KiB|B))?")
_NCCL = re.compile(r"(NCCL error|NCCL WARN|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
                   r"ncclRemoteError|Watchdog caught collective operation timeout|NCCL communicator was aborted)")

MiB = 2**20


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
    """Parse a DeepSpeed / Megatron / Megatron-DeepSpeed training log."""
    if spike_factor <= 1:
        raise ValueError(f"spike_factor={spike_factor} must be > 1")
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
                unit = {"GiB": GiB, "MiB": MiB, "KiB": 1024, "B": 1}[m.group(2)]
                oom_req = max(oom_req, float(m.group(1)) * unit)
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
        nccl_errors=tuple(nccl))


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
    if summary.nan_iterations:
        out.append(Finding(id="log_nan", status="fail", message=f"{summary.nan_iterations} NaN iterations",
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
    # -- NCCL ------------------------------------------------------------------------------------------------
    if summary.nccl_errors:
        out.append(Finding(id="log_nccl", status="fail",
                           message=f"{len(summary.nccl_errors)} NCCL error lines; first: {summary.nccl_errors[0][:160]}",
                           suggestion="rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the transport "
                                      "and the failing peer; check NCCL_SOCKET_IFNAME / NCCL_IB_HCA and that every "
                                      "node reaches the others"))
    return tuple(out)
