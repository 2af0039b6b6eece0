"""Result types of the memory model (:mod:`workbench.memory`). Bytes everywhere; per GPU unless named otherwise."""
from __future__ import annotations

from dataclasses import dataclass, field

TERMS = ("weights", "gradients", "optimizer", "activations", "buffers", "overhead")
"""The six terms every breakdown has, in drawing order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryTerms:
    """Bytes one GPU holds, by term."""

    weights: int
    """Model parameters resident on the GPU in training precision (ZeRO-3: the shard plus live/prefetched layers)."""
    gradients: int
    """Gradient storage (bf16/fp16 grads, DeepSpeed's fp32 grad partitions, Megatron's grad buffer)."""
    optimizer: int
    """fp32 master weights + Adam moments (0 when offloaded)."""
    activations: int
    """Activations kept for backward over the in-flight micro-batches, plus embeddings, logits and loss."""
    buffers: int
    """Communication buckets and temporary buffers (DeepSpeed reduce/allgather buckets, ZeRO-3 prefetch)."""
    overhead: int
    """CUDA context, cuBLAS workspace and allocator reserve (measured constants)."""

    @property
    def total(self) -> int:
        # the six TERMS, added in their order (this sum is read many times per estimate)
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers + self.overhead

    def as_dict(self) -> dict:
        return {t: int(getattr(self, t)) for t in TERMS}


@dataclass(frozen=True, kw_only=True, slots=True)
class StageMemory:
    """One pipeline stage (every rank of the stage holds the same)."""

    stage: int
    """Pipeline stage index, 0 = first."""
    num_layers: int
    """Transformer layers on this stage (all virtual chunks together)."""
    has_embedding: bool
    has_output: bool
    terms: MemoryTerms
    in_flight_microbatches: float
    """Micro-batches whose activations are alive at the peak (1F1B: p − stage; interleaved adds the chunk term)."""
    peak_phase: str = "backward"
    """When the peak happens: ``backward`` (activations alive) or ``optimizer step`` (fp32 gradient temporaries)."""
    backward_activation_bytes: int = 0
    """Activations alive at the backward-phase peak (equals ``terms.activations`` when the peak is in backward)."""
    releasable_cached_bytes: int = 0
    """Bytes the caching allocator keeps reserved on a GPU with room beyond ``total_bytes`` that it would release,
    not fail, when short (whole free segments: DeepSpeed ZeRO-1/2's parameter blocks left cached by the flatten with
    the optimizer on the CPU, :func:`workbench.memory.deepspeed_init_cached_bytes`); not needed to fit."""

    @property
    def total_bytes(self) -> int:
        return self.terms.total


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """The memory model's answer for one (model, cluster, plan)."""

    stages: tuple
    """:class:`StageMemory` per pipeline stage."""
    capacity_bytes: int
    """GPU memory the framework can allocate."""
    host_bytes_per_gpu: int
    """Host (CPU) memory one rank's process holds at its peak (its resident set): the process itself and, with
    offload, the offloaded states and DeepSpeed's host buffers as they are held (:func:`workbench.memory.
    host_resident_bytes`)."""
    host_bytes_per_node: int
    """Host memory a node needs: host_bytes_per_gpu × GPUs per node."""
    host_capacity_bytes_per_node: int
    nvme_bytes_per_gpu: int
    """NVMe bytes per rank for ZeRO-Infinity offload (0 unless offloading to nvme)."""
    nvme_bytes_per_node: int = 0
    """NVMe bytes a node needs: nvme_bytes_per_gpu × GPUs per node."""
    nvme_capacity_bytes_per_node: int = 0
    """Local NVMe per node (:attr:`workbench.specs.ClusterSpec.nvme_gib_per_node`; 0: none)."""
    offloaded_bytes_per_gpu: int = 0
    """The states one rank offloads (optimizer states, fp32 gradients, parameters: to the host or NVMe); 0 without
    offload, where the host holds only the process itself."""
    formulas: dict = field(default_factory=dict)
    """term → short formula text with its source, for tooltips and docs."""
    band_low_bytes: int = 0
    """How far below ``per_gpu_peak_bytes`` the device total may be: the largest over-estimate on held-out model
    shapes for this engine (:func:`workbench.memory.error_band`); 0 with no band."""
    band_high_bytes: int = 0
    """How far above ``per_gpu_peak_bytes`` the device total may be: the largest under-estimate on held-out model
    shapes for this engine. ``fits_gpu`` requires the peak plus this to fit."""
    band_note: str = ""
    """Where the band comes from (or why there is none)."""

    @property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_bytes)

    @property
    def per_gpu_peak_bytes(self) -> int:
        return self.peak_stage.total_bytes

    @property
    def releasable_cached_bytes(self) -> int:
        """The peak stage's :attr:`StageMemory.releasable_cached_bytes`."""
        return self.peak_stage.releasable_cached_bytes

    @property
    def observed_peak_bytes(self) -> int:
        """What the device shows at its peak on a GPU with room (``max_memory_reserved`` + memory outside the
        allocator): ``per_gpu_peak_bytes`` + ``releasable_cached_bytes``."""
        return self.per_gpu_peak_bytes + self.releasable_cached_bytes

    @property
    def breakdown(self) -> MemoryTerms:
        """Terms of the rank with the peak."""
        return self.peak_stage.terms

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.per_gpu_peak_bytes

    @property
    def fits_gpu(self) -> bool:
        """The peak plus the error band's upper side fits the GPU (an under-estimate is an OOM)."""
        return self.headroom_bytes - self.band_high_bytes >= 0

    @property
    def fits_host(self) -> bool:
        return self.host_bytes_per_node <= self.host_capacity_bytes_per_node

    @property
    def shows_host(self) -> bool:
        """Whether the host figure is worth showing beside the GPU's: something is offloaded, or the ranks'
        processes alone pass the node's memory (otherwise it is only the processes themselves)."""
        return bool(self.offloaded_bytes_per_gpu) or not self.fits_host

    @property
    def fits_nvme(self) -> bool:
        """What the ranks of a node offload to NVMe fits the node's NVMe (True when nothing goes there)."""
        return self.nvme_bytes_per_gpu == 0 or self.nvme_bytes_per_node <= self.nvme_capacity_bytes_per_node

    @property
    def fits(self) -> bool:
        return self.fits_gpu and self.fits_host and self.fits_nvme

    def to_dict(self) -> dict:
        return {
            "per_gpu_peak_bytes": int(self.per_gpu_peak_bytes),
            "observed_peak_bytes": int(self.observed_peak_bytes),
            "releasable_cached_bytes": int(self.releasable_cached_bytes),
            "peak_stage": self.peak_stage.stage,
            "peak_phase": self.peak_stage.peak_phase,
            "allocated_bytes": int(self.per_gpu_peak_bytes - self.breakdown.overhead),
            "breakdown": self.breakdown.as_dict(),
            "stages": [{"stage": s.stage, "num_layers": s.num_layers, "has_embedding": s.has_embedding,
                        "has_output": s.has_output, "in_flight_microbatches": s.in_flight_microbatches,
                        "peak_phase": s.peak_phase, "backward_activation_bytes": s.backward_activation_bytes,
                        "total_bytes": int(s.total_bytes), **s.terms.as_dict()} for s in self.stages],
            "capacity_bytes": int(self.capacity_bytes),
            "headroom_bytes": int(self.headroom_bytes),
            "host_bytes": int(self.host_bytes_per_node),
            "host_bytes_per_gpu": int(self.host_bytes_per_gpu),
            "offloaded_bytes_per_gpu": int(self.offloaded_bytes_per_gpu),
            "host_capacity_bytes_per_node": int(self.host_capacity_bytes_per_node),
            "nvme_bytes_per_gpu": int(self.nvme_bytes_per_gpu),
            "nvme_bytes_per_node": int(self.nvme_bytes_per_node),
            "nvme_capacity_bytes_per_node": int(self.nvme_capacity_bytes_per_node),
            "fits_nvme": bool(self.fits_nvme),
            "band_bytes": {"low": int(self.band_low_bytes), "high": int(self.band_high_bytes),
                           "note": self.band_note},
            "fits": bool(self.fits),
            "fits_gpu": bool(self.fits_gpu),
            "fits_host": bool(self.fits_host),
            "formulas": dict(self.formulas),
        }
