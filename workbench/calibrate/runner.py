"""One calibration: run every measurement of :mod:`workbench.calibrate.measure` that this machine supports, fit the
curves, and return a :class:`~workbench.calibrate.profile.HardwareProfile`.

Collectives run in ``torchrun`` child processes (``--nproc_per_node N``) unless this process is itself one rank of a
launched job (``WORLD_SIZE`` > 1 in the environment: the user's launcher across nodes), in which case every rank
measures the collectives together and rank 0 does the rest.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from workbench.calibrate import measure
from workbench.calibrate.profile import HardwareProfile, check_profile_name, fit_collective, fit_gemm
from workbench.defaults import GiB

PARTS = ("gemm", "memory_bandwidth", "host_link", "host_dispatch", "cpu_adam", "memory", "collectives")
"""The measurements, in the order they run (collectives last, or first under a launcher)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationSettings:
    """What to measure and how much. ``quick`` sizes keep a GPU node under about two minutes; tests pass tiny
    explicit sizes."""

    name: str = "local"
    """Profile name."""
    quick: bool = False
    model: Optional[str] = None
    """Catalog model whose GEMM shapes are measured; default llama3-8b on GPUs, gpt3-125m on a CPU."""
    tensor_parallel: tuple = (1, 2, 4, 8)
    """TP degrees whose shard shapes are measured."""
    tokens: Optional[tuple] = None
    """GEMM rows (tokens per micro-batch); default (512, seq) quick, (512, seq, 4·seq) full; CPU (64, 256)."""
    shapes: Optional[tuple] = None
    """Explicit ``({name, m, n, k}, …)`` instead of the model's shapes."""
    precisions: Optional[tuple] = None
    """Default: bf16, fp16 (+fp8 on sm89+) on CUDA; fp32, bf16 on CPU."""
    gemm_repeats: Optional[int] = None
    nproc: Optional[int] = None
    """Processes for collectives; default: the visible GPUs, 2 on a CPU. 1 skips collectives."""
    max_message_bytes: Optional[int] = None
    """Largest collective message; default 256 MiB quick / 1 GiB full on GPUs, 16 MiB on a CPU."""
    collective_iters: Optional[int] = None
    copy_bytes: Optional[int] = None
    """Size of the device-copy and host-link transfers; default 1 GiB on GPUs, 256 MiB on a CPU."""
    cpu_adam_params: Optional[int] = None
    """Parameters of the CPU Adam step; default 1e8 (2e7 quick / CPU)."""
    cpu_adam: str = "torch"
    """``torch`` (torch.optim.AdamW) or ``deepspeed`` (DeepSpeedCPUAdam; compiles on first use)."""
    gpu: Optional[str] = None
    """Catalog GPU name; default: matched from the device name."""
    parts: tuple = PARTS
    """Which measurements to run."""
    nvme_dir: Optional[str] = None
    """A folder on the node's NVMe: its read and write rates are measured through DeepSpeed's async_io (what
    ZeRO-Infinity's swaps run at; ``None``: not measured)."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_profile_name(self.name)
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"parts={sorted(unknown)}: not a measurement (known: {', '.join(PARTS)})")


def catalog_gpu_for(device_name: str) -> str:
    """The catalog GPU a CUDA device name denotes (``NVIDIA H100 80GB HBM3`` → ``H100-SXM``), or ``""``.

    Every catalog name's tokens (split at ``-``) must occur in the device name; the longest such name wins, and the
    SXM variant stands for a device name that does not say PCIe."""
    from workbench import catalog

    text = device_name.upper().replace("-", " ")
    words = set(text.split())
    best = ""
    for name in catalog.gpu_names():
        tokens = name.upper().split("-")
        required = [t for t in tokens if t != "SXM"]
        if not all(t in words or t in text for t in required):
            continue
        if tokens[0] not in words:
            continue
        if "SXM" in tokens and "PCIE" in words:
            continue
        if len(required) > len(best.split("-")) - ("SXM" in best.upper()) or not best:
            best = name
    return best


def environment_info() -> dict:
    """Machine, device and library versions for the profile header."""
    import torch

    info = {"machine": socket.gethostname(), "torch_version": torch.__version__,
            "created": datetime.datetime.now().isoformat(timespec="seconds")}
    try:
        info["host_memory_gib"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    except (ValueError, OSError, AttributeError):
        info["host_memory_gib"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0), device_kind="cuda",
                    devices_per_node=torch.cuda.device_count(), cuda_version=torch.version.cuda or "",
                    device_memory_gib=props.total_memory / GiB)
        try:
            info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, TypeError):
            info["nccl_version"] = ""
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            info["driver"] = ""
    else:
        processor = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    processor = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        info.update(device=f"cpu: {processor} ({os.cpu_count()} cores)", device_kind="cpu", devices_per_node=1)
    return info


def _checkout_root() -> str:
    import workbench

    return str(Path(workbench.__file__).resolve().parents[1])


def launched_world_size() -> int:
    """WORLD_SIZE of the job this process belongs to (1 when not started by a launcher)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def collectives_with_torchrun(nproc: int, *, max_bytes: int, iters: int, timeout_s: float = 600) -> dict:
    """Run :mod:`workbench.calibrate.worker` under ``torchrun --nproc_per_node nproc`` and return its JSON."""
    import socket as _socket

    with _socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "collectives.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = _checkout_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
               "127.0.0.1", "--master_port", str(port), "-m", "workbench.calibrate.worker", "--out", str(out),
               "--max-bytes", str(max_bytes), "--iters", str(iters)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"collective measurement with {nproc} processes failed (exit {proc.returncode}): "
                               f"{tail[0]}")
        return json.loads(out.read_text())


def _defaults(s: CalibrationSettings, kind: str, seq_length: int) -> dict:
    gpu = kind == "cuda"
    return dict(
        tokens=s.tokens or ((512, seq_length) if s.quick else (512, seq_length, 4 * seq_length)) if gpu
        else s.tokens or (64, 256),
        precisions=s.precisions or tuple(measure.gemm_precisions(kind)),
        gemm_repeats=s.gemm_repeats or (3 if not gpu else 10 if s.quick else 30),
        max_message_bytes=s.max_message_bytes or ((256 if s.quick else 1024) * 2**20 if gpu else 16 * 2**20),
        collective_iters=s.collective_iters or (5 if s.quick or not gpu else 20),
        copy_bytes=s.copy_bytes or (GiB if gpu else 256 * 2**20),
        cpu_adam_params=s.cpu_adam_params or (int(2e7) if s.quick or not gpu else int(1e8)),
        nproc=s.nproc if s.nproc is not None else (_gpu_count() if gpu else 2),
    )


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def calibrate(settings: CalibrationSettings = CalibrationSettings(), *,
              progress: Optional[Callable[[str], None]] = None) -> HardwareProfile:
    """Measure this machine and return its profile (see the module docstring for collectives across nodes).
    ``progress`` receives one line per measurement."""
    import torch

    from workbench import catalog

    say = progress or (lambda line: None)
    info = environment_info()
    kind = info["device_kind"]
    model = catalog.model(settings.model or ("llama3-8b" if kind == "cuda" else "gpt3-125m"))
    d = _defaults(settings, kind, model.seq_length)
    notes = []
    gpu_name = ""
    if kind == "cuda":
        gpu_name = settings.gpu or catalog_gpu_for(info["device"])
        if gpu_name:
            gpu_name = catalog.gpu(gpu_name).name  # validates a --gpu given by hand
        else:
            notes.append(f"device {info['device']} is not in the GPU catalog: peaks are the best measured rates")
    device = "cuda" if kind == "cuda" else "cpu"
    world = launched_world_size()
    rank = int(os.environ.get("RANK", "0"))
    parts = set(settings.parts)
    result = dict(gemm={}, collectives={}, host_link_gb_per_s={}, device_memory_gb_per_s=None, cpu_adam={},
                  memory={}, host_dispatch={}, nvme_gb_per_s={})

    # -- collectives first when launched: every rank must take part ------------------------------------------
    if "collectives" in parts and world > 1:
        from workbench.calibrate.worker import run_in_group

        say(f"collectives across the launched job ({world} ranks)")
        raw = run_in_group(max_bytes=d["max_message_bytes"], iters=d["collective_iters"])
        result["collectives"][raw["link"]] = _fit_link(raw)
        if raw.get("nccl_bytes") is not None:
            result["memory"]["nccl_bytes"] = raw["nccl_bytes"]
        if rank != 0:
            return None  # only rank 0 writes the profile

    # -- GEMMs ----------------------------------------------------------------------------------------------------
    if "gemm" in parts:
        shapes = list(settings.shapes) if settings.shapes else measure.model_gemm_shapes(
            model, tensor_parallel_degrees=settings.tensor_parallel, tokens=d["tokens"])
        for prec in d["precisions"]:
            if kind == "cpu" and prec == "fp8":
                continue
            points = measure.measure_gemms(shapes, precision=prec, device=device, repeats=d["gemm_repeats"],
                                           progress=say)
            if len(points) < 2:
                notes.append(f"{prec}: fewer than 2 GEMM shapes ran, no curve")
                continue
            if gpu_name and catalog.gpu(gpu_name).peak_tflops.get(prec):
                peak = float(catalog.gpu(gpu_name).peak_tflops[prec])
            else:
                peak = max(p["tflops"] for p in points)
            result["gemm"][prec] = {"peak_tflops": peak, **fit_gemm(points, peak_tflops=peak), "points": points}
            g = result["gemm"][prec]
            say(f"gemm {prec}: efficiency_max {g['efficiency_max']:.3f} of {measure.flops_rate_text(peak)}, "
                f"half_dim {g['half_dim']:.0f}")

    # -- memory bandwidth, host link ------------------------------------------------------------------------------
    if "memory_bandwidth" in parts:
        result["device_memory_gb_per_s"] = measure.measure_copy_gb_per_s(d["copy_bytes"], device=device)
        say(f"device memory copy: {result['device_memory_gb_per_s']:.3g} GB/s")
    if "host_link" in parts and kind == "cuda":
        result["host_link_gb_per_s"] = measure.measure_host_link(min(d["copy_bytes"], GiB))
        say("host link GB/s: " + ", ".join(f"{k} {v:.1f}" for k, v in result["host_link_gb_per_s"].items()))

    # -- host dispatch (one core issuing work: what host-bound steps run at) ------------------------------------
    if "host_dispatch" in parts:
        result["host_dispatch"] = measure.measure_host_dispatch()
        h = result["host_dispatch"]
        say("host dispatch: " + (f"{h['launch_us']:.2f} us per CUDA launch, " if "launch_us" in h else "")
            + f"Python loop {h['python_loop_s'] * 1e3:.1f} ms")

    # -- the node's NVMe (ZeRO-Infinity's swaps), where a folder on it was given --------------------------------
    if settings.nvme_dir:
        try:
            n = measure.measure_nvme(settings.nvme_dir)
        except (RuntimeError, OSError) as exc:  # keep the other measurements
            notes.append(f"nvme: {exc}")
            say(notes[-1])
        else:
            result["nvme_gb_per_s"] = {"read": n["read"], "write": n["write"]}
            say(f"NVMe under {n['directory']}: read {n['read']:.2f} GB/s, write {n['write']:.2f} GB/s")

    # -- CPU Adam ---------------------------------------------------------------------------------------------
    if "cpu_adam" in parts:
        try:
            result["cpu_adam"] = measure.measure_cpu_adam(d["cpu_adam_params"], implementation=settings.cpu_adam)
        except ImportError as exc:
            notes.append(f"cpu adam {settings.cpu_adam}: {exc}; measured torch.optim.AdamW instead")
            result["cpu_adam"] = measure.measure_cpu_adam(d["cpu_adam_params"], implementation="torch")
        say(f"CPU Adam ({result['cpu_adam']['implementation']}, {result['cpu_adam']['threads']} threads): "
            f"{result['cpu_adam']['params_per_second'] / 1e9:.3g} G params/s")

    # -- memory overhead ------------------------------------------------------------------------------------------
    if "memory" in parts:
        result["memory"]["context_bytes"] = measure.measure_context_bytes()
        if kind == "cuda":
            reserve = measure.measure_allocator_reserve(layers=4 if settings.quick else 8)
            result["memory"].update(reserve_fraction=reserve["reserve_fraction"],
                                    reserve_max_allocated_bytes=reserve["max_allocated_bytes"],
                                    reserve_max_reserved_bytes=reserve["max_reserved_bytes"])
        else:
            # host memory: glibc returns freed blocks, no caching allocator; gloo buffers are small
            result["memory"].update(reserve_fraction=0.0, nccl_bytes=0)
            notes.append("cpu: reserve_fraction 0 (no caching allocator), nccl_bytes 0 (gloo)")
        say(f"context {result['memory']['context_bytes'] / GiB:.2f} GiB, reserve "
            f"{result['memory'].get('reserve_fraction', 0):.1%}")

    # -- collectives in local child processes -------------------------------------------------------------------
    if "collectives" in parts and world <= 1:
        if d["nproc"] >= 2:
            say(f"collectives: torchrun with {d['nproc']} local processes")
            try:
                raw = collectives_with_torchrun(d["nproc"], max_bytes=d["max_message_bytes"],
                                                iters=d["collective_iters"])
            except (RuntimeError, subprocess.TimeoutExpired) as exc:  # keep the other measurements
                notes.append(f"collectives failed: {str(exc).splitlines()[0]}")
                say(notes[-1])
            else:
                result["collectives"][raw["link"]] = _fit_link(raw)
                if raw.get("nccl_bytes") is not None:
                    result["memory"]["nccl_bytes"] = raw["nccl_bytes"]
                for k, fit in result["collectives"][raw["link"]]["fit"].items():
                    say(f"{k}: {fit['gb_per_s']:.3g} GB/s, latency {fit['latency_s'] * 1e6:.1f} us")
        else:
            notes.append(f"collectives skipped: {d['nproc']} process(es) (needs 2)")

    return HardwareProfile(
        name=settings.name, machine=info["machine"], device=info["device"], device_kind=kind, gpu=gpu_name,
        devices_per_node=info["devices_per_node"], driver=info.get("driver", ""),
        torch_version=info["torch_version"], cuda_version=info.get("cuda_version", ""),
        nccl_version=info.get("nccl_version", ""), created=info["created"], gemm=result["gemm"],
        collectives=result["collectives"], host_link_gb_per_s=result["host_link_gb_per_s"],
        device_memory_gb_per_s=result["device_memory_gb_per_s"], cpu_adam=result["cpu_adam"],
        host_dispatch=result["host_dispatch"], nvme_gb_per_s=result["nvme_gb_per_s"],
        memory=result["memory"], host_memory_gib=info.get("host_memory_gib"),
        device_memory_gib=info.get("device_memory_gib"), notes=tuple(notes))


def _fit_link(raw: dict) -> dict:
    fits = {}
    for kind in measure.COLLECTIVE_KINDS:
        pts = [p for p in raw["points"] if p["kind"] == kind]
        if len(pts) >= 2:
            fits[kind] = fit_collective(pts, ranks=raw["ranks"], kind=kind)
    return {"ranks": raw["ranks"], "nodes": raw["nodes"], "backend": raw["backend"], "points": raw["points"],
            "fit": fits}
