"""Hardware profiles: what ``workbench calibrate`` measured on one machine, saved as a JSON data file, loaded by name,
and applied to the time and memory models.

A profile is looked up by name in ``workbench.paths.data_dir()/profiles/<name>.json`` (the user's own), then in the
catalog's ``workbench/catalog/profiles/`` (shipped), or read from a path. Applying it
(:meth:`HardwareProfile.time_overrides`, :meth:`HardwareProfile.memory_overheads`) replaces datasheet-derived
inputs of :func:`workbench.timing.step_time_terms` and the memory model's overhead constants by the measured ones;
anything the profile did not measure keeps the catalog's value, and the returned notes say which is which.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

PROFILE_VERSION = 1

NO_PROFILE_NOTE = ("no hardware profile loaded: datasheet peaks, catalog efficiency curves and the memory model's "
                   "H200 overhead constants (run `workbench calibrate` and pass --profile)")


# ---------------------------------------------------------------------------------------------------------------
# Fits
# ---------------------------------------------------------------------------------------------------------------
_COLLECTIVE_FACTOR = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}


def fit_collective(points: list, *, ranks: int, kind: str) -> dict:
    """Bandwidth and latency of :func:`workbench.timing.collective_seconds` (or :func:`~workbench.timing.p2p_seconds`
    for ``kind="p2p"``) fitted to measured ``[{bytes, seconds}]``.

    The model is linear in the message size, ``seconds = a + b·bytes``, with
    all-reduce ``a = 2·log2(n)·latency``, ``b = 2·(n−1)/n / bandwidth`` (reduce-scatter/all-gather: factor 1),
    p2p ``a = latency``, ``b = 1 / bandwidth``. Least squares on relative error (weights 1/seconds), so small and
    large messages count alike. Returns ``{"gb_per_s", "latency_s", "rms_relative_error"}``."""
    x = np.array([p["bytes"] for p in points], float)
    y = np.array([p["seconds"] for p in points], float)
    if len(x) < 2:
        raise ValueError(f"fit_collective needs >= 2 message sizes, got {len(x)} for kind={kind}")
    w = 1.0 / y
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    if b <= 0:  # flat curve (latency bound everywhere): bandwidth from the largest message alone
        b = y[-1] / x[-1]
    a = max(float(a), float(y.min()) * 1e-3)
    if kind == "p2p":
        bw, lat = 1.0 / b, a
    else:
        factor = _COLLECTIVE_FACTOR[kind]
        n = max(int(ranks), 2)
        bw = factor * (n - 1) / n / b
        lat = a / (factor * math.log2(n))
    pred = a + b * x
    return {"gb_per_s": float(bw / 1e9), "latency_s": float(lat),
            "rms_relative_error": float(np.sqrt(np.mean((pred / y - 1) ** 2)))}


def fit_gemm(points: list, *, peak_tflops: float) -> dict:
    """The time model's GEMM-efficiency curve (:func:`workbench.timing.gemm_efficiency`) fitted to measured GEMMs,
    relative to ``peak_tflops``: ``{"efficiency_max", "half_dim"}`` (via :func:`workbench.timing.fit_gemm_curve`)."""
    from workbench.timing import fit_gemm_curve

    fitted = fit_gemm_curve(points, peak_tflops=peak_tflops)
    return {"efficiency_max": fitted["gemm_efficiency_max"], "half_dim": fitted["gemm_half_dim"]}


def check_profile_name(name: str) -> None:
    """``ValueError`` unless ``name`` can be a file stem: letters, digits, '.', '_', '+', '-'."""
    if not name or not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
        raise ValueError(f"profile name={name!r}: use letters, digits, '.', '_', '+', '-'")


# ---------------------------------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareProfile:
    """Measured rates of one machine (one GPU model, or a CPU). Units in the keys of the nested dicts."""

    name: str
    """Profile name (file stem)."""
    machine: str
    """Host name the measurements ran on."""
    device: str
    """Device as the runtime names it, e.g. ``NVIDIA H200``, or ``cpu: <processor>``."""
    device_kind: str
    """``cuda`` or ``cpu``."""
    gpu: str = ""
    """Catalog GPU name the profile applies to (``H200``); empty for a CPU profile."""
    devices_per_node: int = 1
    """GPUs (or collective processes) per node seen while measuring."""
    driver: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    nccl_version: str = ""
    created: str = ""
    """ISO date and time of the measurement."""
    gemm: dict = field(default_factory=dict)
    """precision → ``{"peak_tflops": reference peak of the fit, "efficiency_max", "half_dim",
    "points": [{name, m, n, k, tflops}]}``."""
    collectives: dict = field(default_factory=dict)
    """link (``intra_node`` / ``inter_node``) → ``{"ranks", "backend", "points": [{kind, bytes, seconds}],
    "fit": {kind: {"gb_per_s", "latency_s", "rms_relative_error"}}}``."""
    host_link_gb_per_s: dict = field(default_factory=dict)
    """``{h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable}`` GB/s (CUDA only)."""
    device_memory_gb_per_s: Optional[float] = None
    """Large-copy bandwidth of device memory (HBM; DRAM memcpy on a CPU), read + write bytes per second / 1e9."""
    cpu_adam: dict = field(default_factory=dict)
    """``{"params_per_second", "implementation", "threads", "num_params"}`` for one node."""
    host_dispatch: dict = field(default_factory=dict)
    """``{"launch_us", "python_loop_s", "probes", ...}``: the host's single-core speed, medians of
    :func:`workbench.calibrate.measure.measure_host_dispatch`'s probes (``launch_us`` on CUDA only)."""
    memory: dict = field(default_factory=dict)
    """``{"context_bytes", "nccl_bytes", "reserve_fraction", ...}``: overhead outside the allocator and the
    caching allocator's reserve."""
    nvme_gb_per_s: dict = field(default_factory=dict)
    """``{"read", "write"}``: the node's NVMe through DeepSpeed's async_io, GB/s (``workbench calibrate --nvme-dir``;
    empty when not measured). Clusters built with this profile take them as their NVMe rates."""
    host_memory_gib: Optional[float] = None
    """Physical memory of the host, GiB."""
    device_memory_gib: Optional[float] = None
    """Memory of one GPU as the runtime reports it, GiB (CUDA only)."""
    notes: tuple = ()
    """What was skipped or assumed while measuring."""

    def __post_init__(self) -> None:
        for name in ("name", "machine", "device", "device_kind", "gpu", "driver", "torch_version", "cuda_version",
                     "nccl_version", "created"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name}={getattr(self, name)!r:.60} must be a string")
        if not isinstance(self.notes, (list, tuple)) or not all(isinstance(n, str) for n in self.notes):
            raise ValueError(f"notes={self.notes!r:.60} must be a list of strings")
        check_profile_name(self.name)
        if self.device_kind not in ("cuda", "cpu"):
            raise ValueError(f"device_kind={self.device_kind!r}: must be 'cuda' or 'cpu'")
        from workbench.specs import check_float, check_int

        check_int("devices_per_node", self.devices_per_node)
        for name in ("device_memory_gb_per_s", "host_memory_gib", "device_memory_gib"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name))
        for name in ("gemm", "collectives", "host_link_gb_per_s", "cpu_adam", "memory", "host_dispatch",
                     "nvme_gb_per_s"):
            section = getattr(self, name)
            if not isinstance(section, dict):
                raise ValueError(f"{name}={section!r:.60} must be a JSON object (a {{...}} section)")
            if name in ("gemm", "collectives"):  # one object per precision / per link
                for key, entry in section.items():
                    if not isinstance(entry, dict):
                        raise ValueError(f"{name}.{key}={entry!r:.60} must be a JSON object (a {{...}} section)")
        self._check_measurements(check_float)
        object.__setattr__(self, "notes", tuple(self.notes))

    def _check_measurements(self, check_float) -> None:
        """The measured numbers the estimates read: finite and >= 0, each named by its path (a hand-edited profile
        with a string or a null there is one clear error, not a failure inside the time model)."""
        def numbers(prefix: str, mapping: dict, skip=(), optional: bool = False) -> None:
            for key, value in mapping.items():
                if key in skip or (optional and value is None):
                    continue
                check_float(f"{prefix}.{key}", value, strict=False)

        for prec, entry in self.gemm.items():
            numbers(f"gemm.{prec}", entry, skip=("points",))
        for link, entry in self.collectives.items():
            numbers(f"collectives.{link}", {k: entry[k] for k in ("ranks", "nodes") if k in entry})
            fit = entry.get("fit", {})
            if not isinstance(fit, dict):
                raise ValueError(f"collectives.{link}.fit={fit!r:.60} must be a JSON object (a {{...}} section)")
            for kind, values in fit.items():
                if not isinstance(values, dict):
                    raise ValueError(f"collectives.{link}.fit.{kind}={values!r:.60} must be a JSON object")
                numbers(f"collectives.{link}.fit.{kind}", values)
        numbers("host_link_gb_per_s", self.host_link_gb_per_s, optional=True)
        numbers("cpu_adam", self.cpu_adam, skip=("implementation",), optional=True)
        numbers("memory", self.memory, optional=True)
        numbers("host_dispatch", self.host_dispatch, skip=("launch_us_range", "python_loop_s_range"), optional=True)
        unknown = sorted(set(self.nvme_gb_per_s) - {"read", "write"})
        if unknown:
            raise ValueError(f"nvme_gb_per_s: unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                             f"(read, write)")
        for key, value in self.nvme_gb_per_s.items():
            check_float(f"nvme_gb_per_s.{key}", value)

    # -- data file -----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {"profile_version": PROFILE_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "HardwareProfile":
        version = data.get("profile_version", PROFILE_VERSION)
        if version != PROFILE_VERSION:
            raise ValueError(f"profile_version={version} is not supported (this workbench reads {PROFILE_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - {"profile_version"})
        if unknown:
            raise ValueError(f"unknown profile fields: {', '.join(unknown)}")
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING and f.name not in data]
        if required:
            raise ValueError(f"profile lacks the field{'s' if len(required) > 1 else ''} {', '.join(required)} "
                             f"(a profile is what `workbench calibrate` writes)")
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    def replace(self, **changes) -> "HardwareProfile":
        return dataclasses.replace(self, **changes)

    # -- summary -------------------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """One line naming the profile: ``h200 (NVIDIA H200 on node7, 2026-11-20)``."""
        return f"{self.name} ({self.device} on {self.machine}, {self.created[:10]})"

    def link_fit(self, link: str = "intra_node", kind: str = "all_reduce") -> Optional[dict]:
        return ((self.collectives.get(link) or {}).get("fit") or {}).get(kind)

    # -- apply ---------------------------------------------------------------------------------------------------
    def device_name(self) -> str:
        """The GPU name estimates with this profile must use: the catalog GPU, ``cpu`` for a CPU profile (the
        catalog's CPU device), ``cuda:<profile>`` for a GPU the catalog lacks."""
        return self.gpu or ("cpu" if self.device_kind == "cpu" else f"cuda:{self.name}")

    def device_spec(self):
        """The :class:`~workbench.specs.GPUSpec` to estimate with: the catalog entry of ``gpu``; for a CPU profile the
        catalog's ``cpu`` device with the measured numbers in place of its nominal ones (peak = best measured matmul
        rate per precision, memory = host memory, bandwidths measured); for a GPU the catalog lacks, a spec built
        from the measurements alone."""
        from workbench import catalog
        from workbench.specs import GPUSpec

        if self.gpu:
            return catalog.gpu(self.gpu)
        peaks = {p: g["peak_tflops"] for p, g in self.gemm.items()}
        if not peaks:
            raise ValueError(f"profile {self.name} measured no matmul rate: it cannot describe its device")
        copy = self.device_memory_gb_per_s or 10.0
        intra = self.link_fit("intra_node")
        memory = self.device_memory_gib if self.device_kind == "cuda" else self.host_memory_gib
        fields = dict(name=self.device_name(), vendor=self.device_kind, memory_gib=float(memory or 16.0),
                      peak_tflops=peaks, hbm_gb_per_s=copy,
                      intra_node_gb_per_s=intra["gb_per_s"] if intra else copy / 2,
                      inter_node_gb_per_s=(self.link_fit("inter_node") or {}).get("gb_per_s", 1.0),
                      host_link_gb_per_s=copy / 2, source=f"measured by workbench calibrate: profile {self.label}")
        if self.device_kind == "cpu" and "cpu" in [n.lower() for n in catalog.gpu_names()]:
            base = catalog.gpu("cpu")
            fields["peak_tflops"] = {**base.peak_tflops, **peaks}
            return dataclasses.replace(base, **fields)
        return GPUSpec(**fields)

    def check_applies(self, gpu) -> None:
        """``ValueError`` when the profile was measured on another GPU model than ``gpu`` (a GPUSpec)."""
        expected = self.device_name()
        if gpu.name.lower() != expected.lower():
            fix = f"use --gpu {expected}" if self.gpu or self.device_kind == "cpu" else "leave out --gpu"
            raise ValueError(f"profile {self.name} was measured on {expected}, the cluster uses gpu={gpu.name}; "
                             f"{fix} or drop the profile")

    def time_overrides(self, cluster, precision) -> tuple[dict, list]:
        """Inputs of :func:`workbench.timing.step_time_terms` the profile replaces for ``cluster`` and ``precision``,
        and notes saying what was used (measured or, where missing, the catalog's value)."""
        self.check_applies(cluster.gpu)
        gpu, prec = cluster.gpu, str(precision)
        out, notes = {}, []
        g = self.gemm.get(prec)
        if g:
            # the fit is relative to g["peak_tflops"]; the time model divides by the catalog peak of the precision
            scale = g["peak_tflops"] * 1e12 / gpu.peak_flops(prec)
            out.update(gemm_efficiency_max=g["efficiency_max"] * scale, gemm_half_dim=g["half_dim"])
            notes.append(f"GEMM curve measured ({prec}, {len(g.get('points', []))} shapes)")
        else:
            notes.append(f"GEMM curve: catalog (no {prec} GEMMs in the profile)")
        if self.device_memory_gb_per_s:
            # a device copy's bandwidth bounds what training's memory-bound kernels (softmax, dropout, norms,
            # optimizer) reach from above: it lowers the curve's fraction of the datasheet figure, never raises it
            from workbench.timing import efficiency_curve

            measured = min(1.0, self.device_memory_gb_per_s / gpu.hbm_gb_per_s)
            curve = efficiency_curve(gpu.name)["hbm_efficiency"]
            out["hbm_efficiency"] = min(measured, curve)
            score = efficiency_curve(gpu.name).get("score_hbm_efficiency", curve)
            out["score_hbm_efficiency"] = min(measured, score)
            notes.append("memory bandwidth measured" if measured < curve else
                         f"memory bandwidth: measured copy rate {measured:.0%} of datasheet bounds the kernels' "
                         f"{curve:.0%} from above")
        for link in ("intra_node", "inter_node"):
            fit = self.link_fit(link)
            if fit:
                out[f"{link}_gb_per_s"] = fit["gb_per_s"]
                out[f"{link}_latency_s"] = fit["latency_s"]
                notes.append(f"{link.replace('_', '-')} all-reduce measured "
                             f"({self.collectives[link].get('ranks')} ranks)")
            else:
                notes.append(f"{link.replace('_', '-')} link: catalog")
        h = self.host_link_gb_per_s
        if h.get("h2d_pinned") and h.get("d2h_pinned"):
            out["host_link_gb_per_s"] = (h["h2d_pinned"] + h["d2h_pinned"]) / 2
            notes.append("host link measured (pinned)")
        elif self.device_kind == "cpu" and self.device_memory_gb_per_s:
            out["host_link_gb_per_s"] = self.device_memory_gb_per_s / 2
        if h.get("h2d_pageable") and h.get("d2h_pageable"):
            # DeepSpeed's offload copies with pin_memory off: the slower direction's pageable rate (on the corpus
            # host the fitted pageable_copy_gb_per_s, 8.24 GB/s, was its pageable copy to the GPU, 8.2 GB/s)
            out["pageable_copy_gb_per_s"] = min(h["h2d_pageable"], h["d2h_pageable"])
            notes.append("pageable host copies measured")
        scale = self.host_seconds_scale
        if scale is not None:
            from workbench.timing import HOST_REFERENCE_LAUNCH_US

            notes.append(f"host dispatch measured ({self.host_dispatch['launch_us']:.2f} us per CUDA launch against "
                         f"the catalog host's {HOST_REFERENCE_LAUNCH_US:.2f}): host work x {scale:.2f}")
        elif self.device_kind == "cuda":
            notes.append("host dispatch: catalog host")
        ratio = self.cpu_adam_speed_ratio
        if ratio is not None:
            # the catalog's fitted decomposition (per-thread rate, serial part, node cap per core), scaled by how
            # much faster this host runs the same micro-benchmark than the fit host
            from workbench.timing import calibration

            c = calibration()["cpu_adam"]
            out["cpu_adam_params_per_second_per_thread"] = c["params_per_second_per_thread"] * ratio
            out["cpu_adam_serial_seconds_per_parameter"] = c.get("serial_seconds_per_parameter", 0.0) / ratio
            out["cpu_adam_params_per_second_per_node"] = (c["params_per_second_per_core"]
                                                          * cluster.host_cpu_cores_per_node * ratio)
            ref = c["calibrate_reference"]
            notes.append(f"CPU Adam measured (deepspeed, {self.cpu_adam['params_per_second'] / 1e9:.2f} G params/s "
                         f"on {self.cpu_adam.get('threads') or 1} threads against the fit host's "
                         f"{ref['params_per_second'] / 1e9:.2f} on {ref['threads']}): CPU Adam x {ratio:.2f}")
        elif self.cpu_adam.get("params_per_second"):
            notes.append(f"CPU Adam measured with {self.cpu_adam.get('implementation', 'torch')}, not "
                         "DeepSpeedCPUAdam: not applied (workbench calibrate --cpu-adam deepspeed)")
        return out, notes

    def memory_overheads(self) -> tuple[dict, list]:
        """``{context_bytes, nccl_bytes, reserve_fraction, floor}`` for :func:`workbench.memory.overhead_bytes`, and
        notes. A figure the profile did not measure is left out (the engine's training-run constant is used).

        ``workbench calibrate`` measures the context and the NCCL buffers in a bare torch process (one matmul, one
        communicator). A DeepSpeed or megatron-core training process holds more outside the allocator — their
        kernels, cuBLAS workspaces for many shapes, one NCCL communicator per process group: 2.04 GiB (DeepSpeed)
        and 2.93 GiB (megatron-core) on one H200 and 8.23 GiB with DeepSpeed on two, against 0.67 and 0.67 + 1.45 GiB
        in the bare process on the same machine (``benchmarks/bench_calibration.py``). So on a GPU the profile's
        figures are lower bounds (``floor``): each overhead is the larger of the profile's and the training-run
        constant of the plan's engine (:func:`workbench.memory.engine_overheads`); so is the allocator reserve,
        which calibrate measures on a small synthetic allocation pattern (5.5% on H200, against 4-60% in the
        training runs; medians 16.6% DeepSpeed ZeRO-0/1/2, 24.9% ZeRO-3, 25-35% with offload, 10.9% megatron-core:
        :data:`workbench.memory.RESERVE_FRACTION`). On a CPU profile the
        measured figures are used as they are."""
        from workbench import memory as M

        mem = self.memory
        gpu_like = self.device_kind == "cuda"
        own = {"context_bytes": M.OUTSIDE_ALLOCATOR_BYTES, "nccl_bytes": M.NCCL_BYTES_BY_ENGINE,
               "reserve_fraction": M.RESERVE_FRACTION}
        out, notes = {}, []
        for key, table in own.items():
            value = mem.get(key)
            fmt = (lambda b: f"{b:.1%}") if key == "reserve_fraction" else (lambda b: f"{b / 2**30:.2f} GiB")
            per_engine = " / ".join(f"{e} {fmt(v)}" for e, v in table.items())
            if value is None:
                notes.append(f"{key}: memory model constant ({per_engine})")
                continue
            out[key] = value
            if gpu_like and value < min(table.values()):
                notes.append(f"{key}: training-run constant of the engine ({per_engine}; bare-process measurement "
                             f"{fmt(value)} is a lower bound)")
            elif gpu_like:
                notes.append(f"{key} measured {fmt(value)} (used where above the engine's {per_engine})")
            else:
                notes.append(f"{key} measured")
        if gpu_like:
            out["floor"] = True
        return out, notes

    @property
    def host_seconds_scale(self) -> Optional[float]:
        """Factor on the time model's host seconds (:data:`workbench.timing.HOST_SECONDS_INPUTS`: Python, kernel
        launches, DeepSpeed's and ZeRO-3's hooks, all fitted on one host) for this profile's host: its measured cost
        of one CUDA launch over the fit host's, :data:`workbench.timing.HOST_REFERENCE_LAUNCH_US`. ``None`` where
        the profile did not measure it (a CPU profile, or one written before ``host_dispatch`` was measured): the
        catalog host's seconds stand."""
        from workbench.timing import HOST_REFERENCE_LAUNCH_US

        launch = self.host_dispatch.get("launch_us")
        if self.device_kind != "cuda" or not launch:
            return None
        return float(launch) / HOST_REFERENCE_LAUNCH_US

    @property
    def cpu_adam_speed_ratio(self) -> Optional[float]:
        """How much faster this profile's host runs DeepSpeedCPUAdam than the host the catalog's ``cpu_adam``
        constants were fitted on, per thread: the profile's micro-benchmark rate (``workbench calibrate --cpu-adam
        deepspeed``, one fp32 tensor, all the process's threads) over the same micro-benchmark on the fit host (the
        catalog's ``cpu_adam.calibrate_reference``), each divided by its threads. The time model scales the catalog's
        fitted per-thread rate, serial part and node cap by it: a raw micro-benchmark rate is not the rate a training
        step's CPU Adam reaches (its gradients come off the host link, its threads share the host with the
        engine's), which the fitted constants carry. ``None`` where the profile has no DeepSpeedCPUAdam timing
        (:attr:`applies_cpu_adam`)."""
        if not self.applies_cpu_adam:
            return None
        from workbench.timing import calibration

        ref = calibration()["cpu_adam"]["calibrate_reference"]
        mine = self.cpu_adam["params_per_second"] / (self.cpu_adam.get("threads") or 1)
        return float(mine / (ref["params_per_second"] / ref["threads"]))

    @property
    def applies_cpu_adam(self) -> bool:
        """Whether the time model takes this profile's CPU Adam rate (relative to the fit host's,
        :attr:`cpu_adam_speed_ratio`): only a DeepSpeedCPUAdam timing
        (``workbench calibrate --cpu-adam deepspeed``), what DeepSpeed's offloaded optimizer runs. A rate of
        ``torch.optim.AdamW`` (calibrate's default, which needs no compiled op) is kept but not applied: on the H200
        machine torch's ran 0.83 G parameters/s on 32 threads, 3.3x slower than the catalog's DeepSpeedCPUAdam step
        priced the corpus's offload runs."""
        return bool(self.cpu_adam.get("params_per_second")) and self.cpu_adam.get("implementation") == "deepspeed"

    def applied(self, cluster, precision) -> dict:
        """What :func:`workbench.estimate.estimate` records under ``"profile"``."""
        _, tnotes = self.time_overrides(cluster, precision)
        _, mnotes = self.memory_overheads()
        return {"name": self.name, "label": self.label, "device": self.device, "created": self.created,
                "note": f"hardware profile {self.label}: " + "; ".join(tnotes + mnotes)}


def no_profile_record(gpu_name: str = "") -> dict:
    """The ``"profile"`` entry of an estimate made without a profile, on ``gpu_name``: its note says when that GPU's
    layer kernels were measured on it (:func:`workbench.timing.gpu_kernel_constants`), not taken from the H200's."""
    from workbench.timing import calibration

    note = NO_PROFILE_NOTE
    own = (calibration().get("gpu_kernels") or {}).get(gpu_name)
    if own:
        parts = ["memory-bound bandwidth"] + [name for key, name in (
            ("score_hbm_scale", "unfused attention's score kernels"),
            ("moe_block_hbm_efficiency", "transformers' MoE blocks")) if key in own]
        optimizer = ", and its fused optimizer step" if "optimizer_hbm_scale" in own else ""
        note += (f"; the {gpu_name}'s own layer kernels ({', '.join(parts)} and weight-GEMM scale measured on it"
                 f"{optimizer}, catalog gpu_kernels)")
    return {"name": None, "note": note}


# ---------------------------------------------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------------------------------------------
def user_profiles_dir() -> Path:
    from workbench.paths import data_dir

    return data_dir() / "profiles"


def _catalog_profiles() -> dict:
    folder = resources.files("workbench.catalog").joinpath("profiles")
    out = {}
    if folder.is_dir():
        for item in folder.iterdir():
            if item.name.endswith(".json"):
                out[item.name[:-5].lower()] = item
    return out


def profile_names() -> list[str]:
    """Names loadable by :func:`load_profile`: the user's profiles and the catalog's."""
    names = set(_catalog_profiles())
    folder = user_profiles_dir()
    if folder.is_dir():
        names.update(p.stem.lower() for p in folder.glob("*.json"))
    return sorted(names)


def _read_profile(path) -> HardwareProfile:
    """The profile stored in one JSON file; ``ValueError`` naming the file when it is not a profile's JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"profile file {path} is not UTF-8 text (a profile is the JSON `workbench calibrate` "
                         f"writes)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"profile file {path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") \
            from None
    if not isinstance(data, dict):
        raise ValueError(f"profile file {path} holds a JSON {type(data).__name__}, not a profile's object")
    try:
        return HardwareProfile.from_dict(data)
    except ValueError as e:
        raise ValueError(f"profile file {path}: {e}") from None


def load_profile(name_or_path) -> HardwareProfile:
    """A profile from a path (``*.json``), or by name from the user's profiles folder, then the catalog's."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise ValueError(f"profile file {text} " + ("is a directory, not a profile's JSON file" if path.is_dir()
                                                        else "does not exist"))
        return _read_profile(path)
    user = user_profiles_dir() / f"{text}.json"
    if user.is_file():
        return _read_profile(user)
    shipped = _catalog_profiles().get(text.lower())
    if shipped is not None:
        return _read_profile(shipped)
    known = profile_names()
    listed = ", ".join(known) if known else "none yet; run `workbench calibrate --out NAME`"
    raise ValueError(f"unknown profile={text!r} (known: {listed})")


def resolve_profile(profile) -> Optional[HardwareProfile]:
    """``None`` stays ``None``; a name or path is loaded; a profile passes through."""
    return None if profile is None else load_profile(profile)


# ---------------------------------------------------------------------------------------------------------------
# Measured vs datasheet
# ---------------------------------------------------------------------------------------------------------------
def compare_with_datasheet(profile: HardwareProfile) -> list[dict]:
    """Rows ``{quantity, measured, datasheet, unit, ratio}`` putting each measured rate next to the number the
    estimates use without a profile (the GPU catalog entry and ``catalog/efficiency.json``; ``datasheet`` is
    ``None`` where there is none, e.g. for a CPU)."""
    from workbench import catalog
    from workbench import memory as M
    from workbench.timing import calibration

    try:  # a CPU profile compares with the catalog's nominal cpu device
        gpu = catalog.gpu(profile.device_name()) if profile.gpu or profile.device_kind == "cpu" else None
    except ValueError:
        gpu = None
    curve_known = gpu is not None and profile.device_kind == "cuda"  # the catalog has no CPU GEMM curve
    cal = calibration()
    rows = []

    def row(quantity, measured, datasheet, unit):
        if measured is None:
            return
        ratio = measured / datasheet if datasheet else None
        rows.append({"quantity": quantity, "measured": float(measured),
                     "datasheet": None if datasheet is None else float(datasheet), "unit": unit, "ratio": ratio})

    for prec, g in profile.gemm.items():
        best = max(p["tflops"] for p in g["points"])
        row(f"GEMM {prec} best", best, gpu.peak_tflops.get(prec) if gpu else None, "TFLOP/s")
        catalog_peak = (gpu.peak_tflops.get(prec) if gpu else None) or g["peak_tflops"]
        row(f"GEMM {prec} efficiency_max", g["efficiency_max"] * g["peak_tflops"] / catalog_peak,
            _catalog_curve(gpu)["gemm_efficiency_max"] if curve_known else None, "of peak")
        row(f"GEMM {prec} half_dim", g["half_dim"], _catalog_curve(gpu)["gemm_half_dim"] if curve_known else None,
            "")
    row("device memory copy", profile.device_memory_gb_per_s,
        gpu.hbm_gb_per_s * (_catalog_curve(gpu)["hbm_efficiency"] if curve_known else 1.0) if gpu else None, "GB/s")
    net = cal["network"]
    for link in ("intra_node", "inter_node"):
        for kind, fit in ((profile.collectives.get(link) or {}).get("fit") or {}).items():
            datasheet_bw = None
            if gpu is not None and kind != "p2p":
                datasheet_bw = getattr(gpu, f"{link}_gb_per_s") * net[f"{link}_bandwidth_efficiency"]
            row(f"{kind} {link.replace('_', '-')} bandwidth", fit["gb_per_s"], datasheet_bw, "GB/s")
            row(f"{kind} {link.replace('_', '-')} latency", fit["latency_s"] * 1e6,
                net[f"{link}_latency_s"] * 1e6 if curve_known else None, "us")
    from workbench.specs import NVME_READ_GB_PER_S, NVME_WRITE_GB_PER_S

    for key, assumed in (("read", NVME_READ_GB_PER_S), ("write", NVME_WRITE_GB_PER_S)):
        if key in profile.nvme_gb_per_s:
            row(f"NVMe {key} (async_io)", profile.nvme_gb_per_s[key], assumed, "GB/s")
    for key, value in profile.host_link_gb_per_s.items():  # CUDA only
        row(f"host link {key.replace('_', ' ')}", value, gpu.host_link_gb_per_s if gpu else None, "GB/s")
    if profile.cpu_adam.get("params_per_second"):
        # against the same micro-benchmark on the fit host, per thread (for DeepSpeedCPUAdam the ratio is the factor
        # the time model applies: HardwareProfile.cpu_adam_speed_ratio)
        threads = profile.cpu_adam.get("threads") or 1
        measured = profile.cpu_adam["params_per_second"]
        ratio = profile.cpu_adam_speed_ratio
        row(f"CPU Adam ({profile.cpu_adam.get('implementation', 'torch')}, {threads} threads)", measured / 1e9,
            measured / ratio / 1e9 if ratio else None, "G params/s")
    if profile.host_dispatch.get("launch_us"):
        from workbench.timing import HOST_REFERENCE_LAUNCH_US

        row("host CUDA launch", profile.host_dispatch["launch_us"],
            HOST_REFERENCE_LAUNCH_US if profile.device_kind == "cuda" else None, "us")
    mem = profile.memory
    gpu_like = profile.device_kind == "cuda"
    if mem.get("context_bytes") is not None:
        row("context (outside allocator)", mem["context_bytes"] / 2**30,
            min(M.OUTSIDE_ALLOCATOR_BYTES.values()) / 2**30 if gpu_like else None, "GiB")
    if mem.get("nccl_bytes") is not None:
        row("NCCL buffers", mem["nccl_bytes"] / 2**30, min(M.NCCL_BYTES_BY_ENGINE.values()) / 2**30 if gpu_like else None,
            "GiB")
    if mem.get("reserve_fraction") is not None:
        row("allocator reserve", mem["reserve_fraction"], min(M.RESERVE_FRACTION.values()) if gpu_like else None,
            "of allocated")
    return rows


def format_value(value, unit: str) -> str:
    """A number of :func:`compare_with_datasheet` as text: fractions as percentages, 3 significant digits."""
    if value is None:
        return "-"
    if unit in ("of peak", "of allocated"):
        return f"{value:.1%}"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def _catalog_curve(gpu) -> dict:
    from workbench.timing import efficiency_curve

    return efficiency_curve(gpu.name)


def fitted_vs_measured(profile: HardwareProfile) -> dict:
    """Measured points next to the fitted model, for plots: ``{"gemm": {precision: {"names", "measured_tflops",
    "fitted_tflops", "peak_tflops"}}, "collectives": {"<link>/<kind>": {"bytes", "measured_s", "fitted_s"}}}``
    (GEMMs sorted by measured rate)."""
    from workbench.timing import collective_seconds, gemm_efficiency, p2p_seconds

    out = {"gemm": {}, "collectives": {}}
    for prec, g in profile.gemm.items():
        pts = sorted(g["points"], key=lambda p: p["tflops"])
        m, n, k = (np.array([p[x] for p in pts], float) for x in "mnk")
        fitted = g["peak_tflops"] * gemm_efficiency(m, n, k, efficiency_max=g["efficiency_max"],
                                                     half_dim=g["half_dim"])
        out["gemm"][prec] = {"names": [p.get("name", f"{p['m']}x{p['n']}x{p['k']}") for p in pts],
                             "measured_tflops": [p["tflops"] for p in pts], "fitted_tflops": fitted.tolist(),
                             "peak_tflops": g["peak_tflops"]}
    for link, data in profile.collectives.items():
        for kind, fit in (data.get("fit") or {}).items():
            pts = sorted((p for p in data["points"] if p["kind"] == kind), key=lambda p: p["bytes"])
            x = np.array([p["bytes"] for p in pts], float)
            if kind == "p2p":
                fitted = p2p_seconds(x, gb_per_s=fit["gb_per_s"], latency_s=fit["latency_s"])
            else:
                fitted = collective_seconds(x, data["ranks"], gb_per_s=fit["gb_per_s"], latency_s=fit["latency_s"],
                                            kind=kind)
            out["collectives"][f"{link}/{kind}"] = {"bytes": x.tolist(), "measured_s": [p["seconds"] for p in pts],
                                                    "fitted_s": np.asarray(fitted, float).tolist()}
    return out
