"""The caching allocator replayed: PyTorch's CUDA caching-allocator policy run over the allocation trace of a
model's DeepSpeed ZeRO-0/1/2 or megatron-core DDP run, from building it on the meta device through its training
steps, as the peaks ``max_memory_allocated`` and ``max_memory_reserved`` would read (:class:`ReplayedPeaks`); the
estimate takes the peak reserved whole in place of the constant reserve
:data:`workbench.memory.RESERVE_FRACTION` on its allocated terms (``estimate(..., simulate_allocator=...)``,
``workbench estimate --simulate-allocator``).

:class:`CachingAllocator` replays the policy of ``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.11, default
``PYTORCH_CUDA_ALLOC_CONF``, one stream):

- a request is rounded up to a multiple of 512 B (``round_size``);
- requests of at most 1 MiB come from the small pool, whose segments are 2 MiB (``kSmallBuffer``); larger ones from
  the large pool: below 10 MiB (``kMinLargeAlloc``) a new segment is 20 MiB (``kLargeBuffer``), above it the request
  rounded up to 2 MiB (``kRoundLarge``) — ``get_allocation_size``;
- a request takes the smallest cached free block of its pool that fits (``get_free_block``: ``pool.lower_bound``
  over blocks ordered by size, then address; new segments get lower addresses than earlier ones, as the recorded
  histories' ``cudaMalloc`` addresses show, so the newest segment's block wins a tie), else a new segment
  (``alloc_block``);
- a found block is split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool)
  (``should_split``), the request keeping the lower addresses; unsplit, the whole block counts as allocated;
- a freed block merges with free neighbours of its segment and is cached, not returned (``empty_cache`` releases
  the wholly free segments);
- when a new segment would pass the device's capacity, every wholly free segment is released and the request
  retried (``release_cached_blocks``), as before an out-of-memory error.

The traces come from the steps of a model built on the meta device (no memory, the real tensor sizes): a
``TorchDispatchMode`` records each new storage of an operator's output, a weak-reference finalizer its release, in
program order, and the temporaries CUDA kernels take that the meta device does not make (:func:`_cuda_temporaries`:
cuBLAS's workspaces, the softmax backward's product, the embedding backward's partial sums, the split reductions'
staging buffer of a bias gradient); autograd's gradient sums are kept in place where its engine makes them in place
(:class:`_GradientAccumulation`: the dispatch mode alone would make every sum a new block).
Two models: a transformers model built from its config (:func:`trace_hf_deepspeed`; attention as on CUDA:
cuDNN's attention blocks for sdpa as an H200 allocates them, softmax straight to fp32 for eager), and a megatron-core
``GPTModel`` with the local layer spec as the workbench's launcher builds it, under DeepSpeed
(:func:`trace_mcore_deepspeed`) or megatron-core's own ``DistributedDataParallel`` and optimizer
(:func:`trace_mcore_ddp`: its real DDP, optimizer and schedule run on the meta device), in a child process
(:func:`mcore_replays`). Dropout runs as CUDA's fused kernel does (a 1-byte mask). DeepSpeed ZeRO-0/1/2's own buffers
are meta tensors allocated and dropped where its source does (:func:`deepspeed_steps`).
Nothing is fitted; how the replayed reserve compares with the measured one on the H200 corpus is
``benchmarks/alloc_sim.py``'s study (``benchmarks/results/alloc_sim_h200.txt``). Scope (:func:`check_scope`, which
lists it in full): one GPU, bf16, default allocator: DeepSpeed ZeRO-0 to 3 of Hugging Face models imported from a
config and of dense megatron-core models with unfused attention — ZeRO-1/2 with ``overlap_comm`` on or off and with
or without the optimizer on the CPU, ZeRO-3 with its side-stream reductions, the optimizer and the parameters on the
CPU — and megatron-core's DDP with the plain or distributed optimizer (no model parallelism) of those megatron-core
models.

torch, transformers, peft and megatron-core are imported inside the functions that trace: ``workbench`` imports
without them.
"""
from __future__ import annotations

import bisect
import contextlib
import math
from dataclasses import dataclass, field
from typing import Optional

from workbench.defaults import (DEEPSPEED_PERSISTENCE_THRESHOLD, DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
                                DEEPSPEED_REDUCE_BUCKET_ELEMENTS, DEEPSPEED_SUB_GROUP_ELEMENTS,
                                DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS)
from workbench.hf import enable_layer_checkpointing, with_lora
from workbench.specs import builds_in_zero_init, hf_checkpoint_every
from workbench.memory import zero3_sub_groups  # noqa: F401  (DeepSpeed's sub-groups, as the memory model has them)

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_SIZE_BYTES = 1 << 20  # kSmallSize: requests up to this go to the small pool
SMALL_BUFFER_BYTES = 2 << 20  # kSmallBuffer: a small-pool segment
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc
LARGE_BUFFER_BYTES = 20 << 20  # kLargeBuffer: the segment of a 1-10 MiB request
ROUND_LARGE_BYTES = 2 << 20  # kRoundLarge
H200_BYTES = 150_754_820_096  # torch.cuda.mem_get_info total of an H200 (141 GiB HBM3e less the driver's share)


def round_size(size_bytes: int) -> int:
    """A request rounded up to a multiple of :data:`MIN_BLOCK_BYTES` (``round_size``)."""
    return max(MIN_BLOCK_BYTES, -(-size_bytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def segment_bytes(size_bytes: int) -> int:
    """The size of the segment a rounded request that no cached block fits gets (``get_allocation_size``)."""
    if size_bytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    stream: int = 0
    prev: "_Block | None" = None
    next: "_Block | None" = None
    mapped: bool = True  # an expandable segment's address range without physical pages is an unmapped block


@dataclass
class CachingAllocator:
    """The caching allocator's bookkeeping: ``malloc(size) -> handle``, ``free(handle)``; allocated, reserved and
    their peaks in bytes as ``torch.cuda.memory_allocated``/``memory_reserved`` count them."""
    capacity_bytes: int = H200_BYTES
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    _pools: dict = field(default_factory=dict)  # (stream, small?) -> sorted [(size, seg, off, id)]
    _blocks: dict = field(default_factory=dict)  # id -> _Block
    _live: dict = field(default_factory=dict)  # handle -> block id
    _segments: dict = field(default_factory=dict)  # segment -> (size, first block id)
    _next_id: int = 0
    _released: set = field(default_factory=set)  # handles freed by the program, their blocks not yet returned
    flatten_checks: list = field(default_factory=list)
    """``(reserved_bytes, flat_bytes)`` at each of DeepSpeed's free-memory checks before it flattens a parameter
    group (the trace's ``("flatten", 0, flat_bytes)`` events, :func:`flattens_on_device`)."""

    def _key(self, b: _Block):
        # a free block is found by size, then address; a new segment lies below the earlier ones (the recorded
        # histories' cudaMalloc addresses fall as segments are added), so among equal sizes the newest comes first
        return (b.size, -b.segment, b.offset, id(b))

    def _pool(self, stream: int, small: bool) -> list:
        # a cached block serves only requests on the stream its segment was cut for (BlockPool's comparator orders
        # by stream first): a side stream's freed blocks are not the main stream's
        return self._pools.setdefault((stream, small), [])

    def _cache(self, b: _Block):
        b.free = True
        bisect.insort(self._pool(b.stream, b.small), self._key(b))
        self._blocks[id(b)] = b

    def _uncache(self, b: _Block):
        pool = self._pool(b.stream, b.small)
        pool.pop(bisect.bisect_left(pool, self._key(b)))

    def _new_segment(self, size_bytes: int, small: bool, stream: int = 0) -> _Block:
        seg = segment_bytes(size_bytes)
        if self.reserved_bytes + seg > self.capacity_bytes:
            self._release_free_segments()
            if self.reserved_bytes + seg > self.capacity_bytes:
                raise MemoryError(f"simulated out of memory: {size_bytes} B requested with "
                                  f"{self.reserved_bytes} B reserved of {self.capacity_bytes} B")
        self._next_id += 1
        b = _Block(segment=self._next_id, offset=0, size=seg, small=small, stream=stream)
        self._segments[self._next_id] = seg
        self.reserved_bytes += seg
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return b

    def _release_free_segments(self):
        for which, pool in self._pools.items():
            keep = []
            for key in pool:
                b = self._blocks[key[3]]
                if b.prev is None and b.next is None:
                    self.reserved_bytes -= self._segments.pop(b.segment)
                    del self._blocks[key[3]]
                else:
                    keep.append(key)
            self._pools[which] = keep

    def _find(self, size: int, small: bool, stream: int) -> _Block:
        """The free block a rounded request of ``size`` bytes takes, out of the pool: the smallest cached one that
        holds it, else a new segment."""
        pool = self._pool(stream, small)
        i = bisect.bisect_left(pool, (size,))
        if i < len(pool):
            b = self._blocks[pool[i][3]]
            self._uncache(b)
            return b
        return self._new_segment(size, small, stream)

    def malloc(self, size_bytes: int, stream: int = 0) -> int:
        """A block for ``size_bytes`` on ``stream`` (the recorded histories' stream; 0 the default stream)."""
        size = round_size(int(size_bytes))
        small = size <= SMALL_SIZE_BYTES
        b = self._find(size, small, stream)
        rest = b.size - size
        if (rest >= MIN_BLOCK_BYTES) if small else (rest > SMALL_SIZE_BYTES):
            self._cache(self._split(b, size))
        b.free = False
        self._blocks[id(b)] = b
        self.allocated_bytes += b.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        self._next_id += 1
        self._live[self._next_id] = id(b)
        return self._next_id

    @staticmethod
    def _split(b: _Block, size: int) -> _Block:
        """Cut ``b`` after its first ``size`` bytes; returns the rest, linked after it (neither pooled)."""
        r = _Block(segment=b.segment, offset=b.offset + size, size=b.size - size, small=b.small, stream=b.stream,
                   prev=b, next=b.next)
        if b.next is not None:
            b.next.prev = r
        b.next, b.size = r, size
        return r

    def release(self, handle: int) -> None:
        """The program freed ``handle`` while another stream still uses it (``record_stream``): the allocated
        count drops now, as PyTorch's ``free`` counts it; the block returns to the pool at :meth:`free`."""
        if handle not in self._released:
            self._released.add(handle)
            self.allocated_bytes -= self._blocks[self._live[handle]].size

    def free(self, handle: int) -> None:
        b = self._blocks[self._live.pop(handle)]
        if handle in self._released:
            self._released.discard(handle)
        else:
            self.allocated_bytes -= b.size
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._cache(b)

    def _merge(self, b: _Block, nb: "_Block | None") -> None:
        """``nb`` absorbed into its neighbour ``b`` when it is free and, like ``b``, mapped or unmapped (an
        expandable segment's unmapped space merges only with unmapped space)."""
        if nb is None or not nb.free or nb.mapped != b.mapped:
            return
        if not b.mapped:
            self._drop_unmapped(b)  # re-filed below under its new offset
        (self._uncache if nb.mapped else self._drop_unmapped)(nb)
        del self._blocks[id(nb)]
        if nb is b.prev:
            b.offset, b.prev = nb.offset, nb.prev
            if nb.prev is not None:
                nb.prev.next = b
        else:
            b.next = nb.next
            if nb.next is not None:
                nb.next.prev = b
        b.size += nb.size
        if not b.mapped:
            self._add_unmapped(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache``: every wholly free segment is released."""
        self._release_free_segments()

    def reset_peaks(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``."""
        self.peak_allocated_bytes, self.peak_reserved_bytes = self.allocated_bytes, self.reserved_bytes

    @property
    def reserve_fraction(self) -> float:
        return self.peak_reserved_bytes / self.peak_allocated_bytes - 1.0


EXPANDABLE_SEGMENT_BYTES = 1 << 40
"""The address range an expandable segment reserves (PyTorch reserves the device's whole memory per segment; any
size above the device's will do: pages are mapped only as requests need them)."""


@dataclass
class ExpandableAllocator(CachingAllocator):
    """The caching allocator with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (PyTorch's
    ``ExpandableSegment``): one address range per stream and pool, whose pages (:data:`LARGE_BUFFER_BYTES` in the
    large pool, :data:`SMALL_BUFFER_BYTES` in the small one) are mapped as requests need them and stay mapped until
    ``empty_cache``. A request takes the best-fitting free mapped block, preferring one that is not followed by
    unmapped space (``get_free_block``); with none, the lowest address where free and unmapped space together hold
    it, mapping what is missing, rounded up to whole pages (``find_expandable_block``,
    ``try_allocate_expandable_block``). Reserved counts mapped pages, as ``torch.cuda.memory_reserved`` does."""
    _unmapped: dict = field(default_factory=dict)  # (stream, small) -> sorted [(segment, offset, id)]

    def _page(self, small: bool) -> int:
        return SMALL_BUFFER_BYTES if small else LARGE_BUFFER_BYTES

    def _unmapped_list(self, stream: int, small: bool) -> list:
        return self._unmapped.setdefault((stream, small), [])

    def _add_unmapped(self, b: _Block) -> None:
        b.mapped, b.free = False, True
        self._blocks[id(b)] = b
        bisect.insort(self._unmapped_list(b.stream, b.small), (b.segment, b.offset, id(b)))

    def _drop_unmapped(self, b: _Block) -> None:
        lst = self._unmapped_list(b.stream, b.small)
        lst.pop(bisect.bisect_left(lst, (b.segment, b.offset, id(b))))

    @staticmethod
    def _expandable_size(b: _Block) -> int:
        return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

    def _map(self, b: _Block, size: int) -> _Block:
        """Map the first ``size`` bytes of unmapped ``b``, rounded up to whole pages; the rest stays unmapped.
        Returns the mapped block, merged with free mapped neighbours."""
        size = min(b.size, -(-size // self._page(b.small)) * self._page(b.small))
        if self.reserved_bytes + size > self.capacity_bytes:
            raise MemoryError(f"simulated out of memory: {size} B to map with {self.reserved_bytes} B reserved of "
                              f"{self.capacity_bytes} B")
        self._drop_unmapped(b)
        if size < b.size:
            self._add_unmapped(self._split(b, size))
        b.mapped, b.free = True, True
        self.reserved_bytes += size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        self._merge(b, b.prev)
        self._merge(b, b.next)
        return b

    def _expand(self, size: int, small: bool, stream: int) -> _Block:
        """A free mapped block of at least ``size`` bytes from the stream's address range (a new range if none
        has room), out of the pool."""
        def start(u):
            return u.prev if u.prev is not None and u.prev.free and u.prev.mapped else u

        def room(c):
            total = 0
            while c is not None and c.free and total < size:
                total, c = total + c.size, c.next
            return total >= size

        candidate = None
        for _, _, key in self._unmapped_list(stream, small):
            c = start(self._blocks[key])
            if room(c):
                candidate = c
                break
        if candidate is None:
            self._next_id += 1
            whole = _Block(segment=self._next_id, offset=0, size=EXPANDABLE_SEGMENT_BYTES, small=small,
                           stream=stream)
            self._add_unmapped(whole)
            candidate = whole
        if not candidate.mapped:
            candidate = self._map(candidate, size)
        else:
            self._uncache(candidate)
        while candidate.size < size:
            self._cache(candidate)  # _map merges the newly mapped pages into it (out of the pool again)
            candidate = self._map(candidate.next, size - candidate.size)
        return candidate

    def _find(self, size: int, small: bool, stream: int) -> _Block:
        pool = self._pool(stream, small)
        i = bisect.bisect_left(pool, (size,))
        if i < len(pool):
            # best fit, but a block with unmapped space after it only when no other fits as tightly
            while i + 1 < len(pool) and (self._expandable_size(self._blocks[pool[i + 1][3]])
                                         < self._expandable_size(self._blocks[pool[i][3]])):
                i += 1
            b = self._blocks[pool[i][3]]
            self._uncache(b)
            return b
        try:
            return self._expand(size, small, stream)
        except MemoryError:
            self._release_free_segments()
            return self._expand(size, small, stream)

    def _release_free_segments(self):
        """``empty_cache``: the whole pages inside every free mapped block are unmapped."""
        for which in list(self._pools):
            for key in list(self._pools[which]):
                b = self._blocks[key[3]]
                page = self._page(b.small)
                lo = -(-b.offset // page) * page
                hi = (b.offset + b.size) // page * page
                if hi <= lo:
                    continue
                self._uncache(b)
                if lo > b.offset:  # the part of a page before the whole pages stays mapped
                    head, b = b, self._split(b, lo - b.offset)
                    self._cache(head)
                if b.offset + b.size > hi:  # and the part after them
                    self._cache(self._split(b, hi - b.offset))
                self._add_unmapped(b)
                self.reserved_bytes -= b.size
                self._merge(b, b.prev)
                self._merge(b, b.next)


# ================================================================================================================
# The allocation trace of a transformers model's training steps, on the meta device
# ================================================================================================================
def _recorder(events: list):
    """A ``TorchDispatchMode`` (:func:`workbench.storagetrace.live_storage`, meta tensors only) appending
    ``("malloc", key, bytes)`` for each new storage an operator returns and ``("free", key, bytes)`` when the
    storage is released, with the temporaries CUDA kernels take from the caching allocator that the meta device does
    not make (:func:`_cuda_temporaries`). ``Tensor.item()`` (data-dependent, not on meta) answers True / 1: the
    unpacked-sequence branch of transformers' mask code."""
    from workbench.storagetrace import live_storage

    accumulation = _GradientAccumulation(events)
    temporaries = _cuda_temporaries(events)

    def after_call(func, args, kwargs, out):
        accumulation.after_call(func, args, kwargs, out)
        temporaries(func, args, kwargs, out)

    mode = live_storage(device="meta", fake_scalars=True, on_alloc=accumulation.on_alloc,
                        on_free=accumulation.on_free, after_call=after_call)
    # the number the events give a live meta tensor's block (None: not made under this recorder)
    mode.block_of = lambda tensor: accumulation.blocks.get(tensor.untyped_storage()._cdata)
    return mode


class _GradientAccumulation:
    """Autograd's gradient accumulation as CUDA runs it, for :func:`_recorder`.

    When two gradients meet at one input of a node (a residual branch, a tied embedding, q/k/v projections of one
    input) the engine sums them in its ``InputBuffer`` (torch/csrc/autograd/input_buffer.cpp, ``accumulate``): with
    grad mode off, as in a plain backward, it adds the second into the first in place when the engine holds the
    first's last reference (``can_accumulate_inplace``), else out of place. Under any ``TorchDispatchMode`` the first
    counts as a tensor subclass, so the meta trace always sums out of place: one more block the size of the gradient,
    taken before the first is freed. This turns such a sum back into the in-place one: an ``aten.add`` in a backward
    with grad mode off whose first operand is not a view and owns its whole storage, and whose storage is released
    before any other operator runs (the engine held its last reference), takes no new block; the sum lives in the
    first operand's block and frees it when it dies. Block numbers stand for storage keys in the events, since a
    freed storage's key can be reused while the sum still lives in its block."""

    def __init__(self, events: list):
        import torch

        self.torch = torch
        self.add = torch.ops.aten.add.Tensor
        self.events = events
        self.blocks: dict = {}  # a live storage's key -> the number of the block it lives in (keys are reused)
        self.count = 0
        self.pending = None  # (sum's key, first operand's key) of the last out-of-place sum, until the next operator

    def on_alloc(self, key, nbytes, func, tensor):
        self.pending = None
        self.count += 1
        self.blocks[key] = self.count
        self.events.append(("malloc", self.count, nbytes))

    def after_call(self, func, args, kwargs, out):  # runs after every operator: torch resolved once, in __init__
        torch = self.torch
        self.pending = None
        if (func is not self.add or kwargs.get("alpha", 1) != 1 or torch.is_grad_enabled()
                or torch._C._current_graph_task_id() == -1):
            return
        first, second = args[0], args[1]
        # a candidate owns its whole storage: a view (``nn.Linear``'s weight gradient is ``mm(...).t().t()``) shares
        # it with its base, which the view keeps alive, so the storage's use count is not one
        whole = (not first._is_view() and first.storage_offset() == 0
                 and first.untyped_storage().nbytes() == first.numel() * first.element_size())
        if not (isinstance(second, torch.Tensor) and first.shape == second.shape == out.shape
                and first.dtype == out.dtype and whole):
            return
        key = out.untyped_storage()._cdata
        if self.events and self.events[-1][:2] == ("malloc", self.blocks.get(key)):
            self.pending = (key, first.untyped_storage()._cdata)

    def on_free(self, key, nbytes):
        pending, self.pending = self.pending, None
        block = self.blocks.pop(key, None)
        if pending is not None and key == pending[1]:  # the engine dropped the first operand: it was summed in place
            self.events.pop()  # the sum's own block
            self.blocks[pending[0]] = block
            return
        self.events.append(("free", block, nbytes))


CUBLAS_WORKSPACE_BYTES = 32 * 2**20
"""The workspace PyTorch gives each cuBLAS handle from the caching allocator on Hopper (``CUBLAS_WORKSPACE_CONFIG``
default ``:4096:8``, 8 x 4 MiB; aten/src/ATen/cuda/CublasHandlePool.cpp), kept for the process's life: the recorded
histories (``benchmarks/alloc_history.py``) show two, at the first GEMM of the forward and of autograd's thread."""


def _cuda_temporaries(events: list):
    """``after_call`` for :func:`_recorder`: after ``aten._softmax_backward_data`` (its ``grad_input`` already
    allocated), the product ``grad * output`` that PyTorch's CUDA kernel allocates before it runs and frees after
    (``softmax_backward_cuda_out`` in aten/src/ATen/native/cuda/SoftMax.cu: ``Tensor tmp = grad * output``), in the
    promoted dtype of the two — the 4 bytes per score of
    :data:`workbench.memory.UNFUSED_SOFTMAX_BACKWARD_BYTES_PER_SCORE` that a CPU or meta trace does not see; after
    ``aten.embedding_dense_backward`` (its weight gradient allocated), the per-segment partial sums CUDA's kernel
    takes and frees (:func:`embedding_backward_partials_bytes`); after a sum or mean (a bias gradient's sum over the
    tokens above all), the staging buffer of :func:`reduction_staging_bytes` when the reduction splits across
    blocks (its semaphores, 4 bytes a block column, are left out); and at the first GEMM of the forward and of the
    backward, cuBLAS's workspace (:data:`CUBLAS_WORKSPACE_BYTES`), never freed."""
    import torch

    softmax_backward = torch.ops.aten._softmax_backward_data.default
    embedding_backward = torch.ops.aten.embedding_dense_backward.default
    reductions = {torch.ops.aten.sum.dim_IntList, torch.ops.aten.mean.dim, torch.ops.aten.sum.default}
    gemms = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
             torch.ops.aten.baddbmm.default}
    count = [0]
    workspaces = set()

    def after_call(func, args, kwargs, out):
        if func in gemms:  # cuBLAS's workspace, once per handle: the forward's thread and autograd's
            phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            if phase not in workspaces:
                workspaces.add(phase)
                events.append(("malloc", ("cublas_workspace", phase), CUBLAS_WORKSPACE_BYTES))
            return
        if func in reductions:  # the reduction's staging buffer when it splits the inputs across blocks
            data = args[0]
            if not data.is_floating_point():
                return
            dims = args[1] if len(args) > 1 else None
            nbytes = reduction_staging_bytes(data.shape, dims, 8 if data.dtype == torch.float64 else 4, data.stride())
            if not nbytes:
                return
            name = "reduction_staging"
        elif func is embedding_backward:
            grad, indices = args[0], args[1]
            nbytes = embedding_backward_partials_bytes(indices.numel(), grad.shape[-1], grad.dtype.itemsize, args[2])
            if not nbytes:
                return
            name = "embedding_backward_partials"
        elif func is softmax_backward:
            grad, output = args[0], args[1]
            nbytes = grad.numel() * torch.promote_types(grad.dtype, output.dtype).itemsize
            name = "softmax_backward_tmp"
        else:
            return
        count[0] += 1
        key = (name, count[0])
        events.extend((("malloc", key, nbytes), ("free", key, nbytes)))

    return after_call


REDUCE_MAX_THREADS = 512
"""Threads of one block of PyTorch's CUDA reduction kernel (``ReduceConfig``'s limit in
aten/src/ATen/native/cuda/Reduce.cuh; 256 for complex double only)."""
H200_SMS, H200_THREADS_PER_SM = 132, 2048
"""The H200's streaming multiprocessors and resident threads per multiprocessor: the grid the reduction fills."""


def _last_pow2(n: int) -> int:
    return max(1, 1 << (max(int(n), 1).bit_length() - 1))


def reduction_staging_bytes(shape, dims, acc_itemsize: int = 4, strides=None, *, sms: int = H200_SMS,
                            threads_per_sm: int = H200_THREADS_PER_SM) -> int:
    """The staging buffer PyTorch's CUDA reduction (``gpu_reduce_kernel``) takes from the caching allocator when it
    splits each output's inputs across thread blocks (``ReduceConfig::global_memory_size``), for a sum or mean of a
    contiguous tensor of ``shape`` over ``dims`` (``None``: all) accumulated in ``acc_itemsize``-byte values (fp32
    for 16- and 32-bit inputs): 0 when no block split is chosen. This follows ``setReduceConfig`` of
    aten/src/ATen/native/cuda/Reduce.cuh: block width and height from the output and reduction sizes (vectorized
    four-wide along the output when the reduced dimensions are the slow ones, along the input when they are the
    fast ones), then as many blocks per output as fill ``sms`` x ``threads_per_sm`` threads while each thread keeps
    16-256 values. A bias gradient — autograd's sum over the tokens of an ``[tokens, width]`` gradient — is the large
    case: 132 MiB for 8 192 x 4 096 (``benchmarks/gpu_bias_grad_memory.py`` measured ten widths and token counts on
    an H200, all exact). ``strides`` (elements; ``None``: contiguous): a dense tensor in another layout (a transposed
    gradient) is read in its memory order, as ``TensorIterator`` orders it; one with gaps or overlaps, and reductions
    over dimensions interleaved with kept ones, are not modelled (0)."""
    shape = [int(n) for n in shape]
    ndim = len(shape)
    reduced = set(range(ndim)) if dims is None or len(dims) == 0 else {int(d) % ndim for d in dims}
    order = list(range(ndim))
    if strides is not None:  # memory order, slowest first; dense layouts only
        order = sorted((i for i in range(ndim) if shape[i] != 1), key=lambda i: -int(strides[i]))
        expect = 1
        for i in reversed(order):
            if int(strides[i]) != expect:
                return 0
            expect *= shape[i]
    pattern = [i in reduced for i in order if shape[i] != 1]
    n_in = math.prod(shape[i] for i in range(ndim) if i in reduced)
    n_out = math.prod(shape[i] for i in range(ndim) if i not in reduced)
    if n_in <= 1 or n_out == 0:
        return 0
    if all(pattern) or pattern == sorted(pattern):  # the kept dimensions first: the reduction runs along the fast ones
        fastest = True
    elif pattern == sorted(pattern, reverse=True):  # the reduced dimensions are the slow ones (a bias gradient)
        fastest = False
    else:
        return 0
    out_vec = 1
    if fastest:
        dim0, dim1 = n_in, n_out
        if dim0 > 128:  # vectorized along the input
            dim0 //= 4
    else:
        out_vec = 4 if n_out % 4 == 0 else 2 if n_out % 2 == 0 else 1
        dim0, dim1 = n_out // out_vec, n_in
    max_threads = REDUCE_MAX_THREADS // out_vec
    p0 = max_threads if dim0 >= max_threads else _last_pow2(dim0)
    p1 = max_threads if dim1 >= max_threads else _last_pow2(dim1)
    width = min(p0, 32)
    height = min(p1, max_threads // width)
    width = min(p0, max_threads // height)
    step_in = width if fastest else 1
    step_out = 1 if fastest else width
    split_warps = -(-n_in // step_in) >= min(height * 16, 256)
    if split_warps:
        step_in *= height
    else:
        step_out *= height
    target = sms * (threads_per_sm // (width * height))
    grid_x = -(-(n_out // out_vec) // step_out)
    per_thread = -(-n_in // step_in)
    if not (split_warps and per_thread >= 256 and grid_x <= target):
        return 0
    ctas = max(min(-(-target // grid_x), -(-per_thread // 16)), -(-per_thread // 256))
    if ctas <= 1:
        return 0
    return acc_itemsize * n_out * ctas * (1 if fastest else width * out_vec)


EMBEDDING_BACKWARD_DIRECT_MAX_INDICES = 3072
"""aten/src/ATen/native/cuda/Embedding.cu: up to this many indices the embedding backward runs one direct kernel
(no sort, no partial sums)."""
EMBEDDING_BACKWARD_ROWS_PER_THREAD = 10
"""``NROWS_PER_THREAD`` of aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu: how many index rows one partial sum
covers."""


def embedding_backward_partials_bytes(num_indices: int, embedding_dim: int, grad_itemsize: int,
                                     num_weights: Optional[int] = None) -> int:
    """The partial sums CUDA's embedding backward (``embedding_backward_cuda_kernel``) allocates before it knows how
    many segments the indices make: ``min(num_indices, num_weights) + num_indices // 10`` rows of the embedding
    width (``max_partial_segment``: at most one segment per distinct row, plus one per 10 indices), in fp32 for a
    16-bit gradient (``grad_weight_per_segment``). The recorded histories show it once per backward and embedding:
    35.2 MiB for 8 192 tokens of a 1 024-wide word embedding, 11.2 MiB for the 2 048-row position embedding of the
    same run. ``num_weights`` ``None``: more rows than indices. Up to :data:`EMBEDDING_BACKWARD_DIRECT_MAX_INDICES`
    indices (``embedding_dense_backward_cuda``; ``scale_grad_by_freq``, which always sorts, is not modelled) a direct
    kernel sums into the zeroed gradient and allocates none (0): 2 048 tokens of TinyLlama's width show no such
    block."""
    if num_indices <= EMBEDDING_BACKWARD_DIRECT_MAX_INDICES:
        return 0
    rows = num_indices if num_weights is None else min(int(num_indices), int(num_weights))
    rows += num_indices // EMBEDDING_BACKWARD_ROWS_PER_THREAD
    return rows * embedding_dim * max(4, grad_itemsize)


SDPA_KERNELS = ("cudnn", "flash")
"""The fused kernels the trace can put behind ``F.scaled_dot_product_attention``: ``cudnn`` is what PyTorch 2.11
runs for transformers' bf16 causal sdpa calls on Hopper (H100/H200: every case of
``benchmarks/results/sdpa_memory_h200.json``, MHA and GQA, head 64-256, dropout 0 and 0.1), ``flash`` its
FlashAttention-2 kernel (the choice before Hopper)."""


def _flash_sdpa():
    """``F.scaled_dot_product_attention`` as the FlashAttention-2 kernel runs it: forward saves q, k, v, the output
    and the fp32 log-sum-exp; backward allocates FA2's workspaces (``mha_bwd`` in
    aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp: ``dq_accum`` fp32 of q's shape, ``softmax_d``
    fp32 per row, and for fewer K/V heads than query heads ``dk_expanded``/``dv_expanded`` at the query's head
    count) and returns dq, dk, dv. On the meta device PyTorch would take the math path and materialize the
    scores."""
    import torch

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale, bias):
            out, lse, cq, ck, mq, mk, seed, off, _ = torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, True, False, scale=scale)
            ctx.save_for_backward(q, k, v, out, lse, seed, off, *(() if bias is None else (bias,)))
            ctx.rest = (cq, ck, mq, mk, scale)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse, seed, off = ctx.saved_tensors[:7]
            cq, ck, mq, mk, scale = ctx.rest
            b, h, s, d = q.shape
            rows = -(-s // 128) * 128
            work = [q.new_empty((b, rows, h, -(-d // 32) * 32), dtype=torch.float32),  # dq_accum
                    q.new_empty((b, h, rows), dtype=torch.float32)]  # softmax_d
            if k.shape[1] != h:
                work += [k.new_empty((b, k.shape[2], h, d)), v.new_empty((b, v.shape[2], h, d))]
            dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
                dout, q, k, v, out, lse, cq, ck, mq, mk, 0.0, True, seed, off, scale=scale)
            del work
            return dq, dk, dv, None, None

    return _sdpa_over(Flash)


CUDNN_FORWARD_WORKSPACE_BYTES = 256
"""The workspace cuDNN's attention forward takes from the caching allocator and gives back at once (every case of
``benchmarks/results/sdpa_memory_h200.json``); its backward's is :func:`cudnn_backward_workspace_bytes`."""


def cudnn_backward_workspace_bytes(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int) -> int:
    """The workspace cuDNN's attention backward (PyTorch 2.11, cuDNN 9 on an H200) takes from the caching allocator
    and frees before it returns: an fp32 array of the query's shape (the dQ accumulator), a second one when there
    are fewer key/value heads than query heads (grouped-query attention), an fp32 statistic per query row, and 256
    bytes — exact in all fifteen recorded cases (``benchmarks/results/sdpa_memory_h200.json``: MHA and GQA, head
    64-256, batch 1-4, sequence 1-8 k, dropout 0 and 0.1)."""
    rows = batch * heads * seq
    copies = 1 if kv_heads == heads else 2
    return copies * rows * head_dim * 4 + rows * 4 + 256


def _cudnn_sdpa():
    """``F.scaled_dot_product_attention`` as PyTorch 2.11 runs cuDNN's attention on an H200, block for block as the
    allocator saw it (``benchmarks/gpu_sdpa_memory.py``): the forward allocates the philox seed and offset (8 bytes
    each, with or without dropout), the output in the query's layout and an fp32 statistic per query row, and takes
    and frees :data:`CUDNN_FORWARD_WORKSPACE_BYTES`; the backward allocates dQ, dK and dV at their own head counts
    (key/value heads not expanded, each like its input), then takes and frees :func:`cudnn_backward_workspace_bytes`.
    The node keeps q, k, v, the output, the statistic, seed and offset for the backward."""
    import torch

    class CuDNN(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale, bias):
            seed = q.new_empty((1,), dtype=torch.int64)
            offset = q.new_empty((1,), dtype=torch.int64)
            out = torch.empty_like(q)
            b, h, s, _ = q.shape
            stats = q.new_empty((b, h, s, 1), dtype=torch.float32)
            work = q.new_empty((CUDNN_FORWARD_WORKSPACE_BYTES,), dtype=torch.uint8)
            del work
            ctx.save_for_backward(q, k, v, out, stats, seed, offset, *(() if bias is None else (bias,)))
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, stats, seed, offset = ctx.saved_tensors[:7]
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            work = dout.new_empty((cudnn_backward_workspace_bytes(*q.shape[:2], k.shape[1], *q.shape[2:]),),
                                  dtype=torch.uint8)
            del work
            return dq, dk, dv, None, None

    return _sdpa_over(CuDNN)


def sdpa_mask_bias(attn_mask, dtype):
    """The additive bias a fused attention kernel takes for ``attn_mask`` (``None`` without one): PyTorch converts a
    boolean mask (transformers passes one for a sliding-window layer, or wherever it cannot leave the causal mask to
    the kernel) into a new tensor of the mask's shape in the query's dtype (``convert_boolean_attn_mask``,
    aten/src/ATen/native/transformers/attention.cpp), and the kernel keeps it for its backward; a float mask is used
    as it is. Seen in an H200's allocator history (Gemma 3 4B's width, two sliding-window layers at 4 k tokens,
    ``benchmarks/results/alloc_history/replay_miss/``): a 32 MiB bf16 block of 1 x 1 x 4096 x 4096 per layer,
    allocated in the forward's ``scaled_dot_product_attention`` before cuDNN's own blocks and freed in that layer's
    backward."""
    import torch

    if attn_mask is None or attn_mask.dtype != torch.bool:
        return attn_mask
    return torch.empty(attn_mask.shape, dtype=dtype, device=attn_mask.device)


def _sdpa_over(kernel):
    """``F.scaled_dot_product_attention``'s signature over one of the kernels above (causal; a mask as the bias
    :func:`sdpa_mask_bias` makes of it, kept for the backward)."""

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if k.shape[1] != q.shape[1] and not enable_gqa:
            raise ValueError(f"key heads {k.shape[1]} != query heads {q.shape[1]} without enable_gqa")
        return kernel.apply(q, k, v, scale if scale is not None else q.shape[-1] ** -0.5,
                            sdpa_mask_bias(attn_mask, q.dtype))

    return sdpa


def sdpa_kernel_function(kernel: str):
    """The stand-in for ``F.scaled_dot_product_attention`` that traces ``kernel`` (one of :data:`SDPA_KERNELS`)."""
    if kernel not in SDPA_KERNELS:
        raise ValueError(f"sdpa_kernel={kernel!r}: one of {', '.join(SDPA_KERNELS)}")
    return _cudnn_sdpa() if kernel == "cudnn" else _flash_sdpa()


def sdpa_events(kernel: str, batch: int, heads: int, kv_heads: int, seq: int, head_dim: int,
                dropout: float = 0.0) -> dict:
    """The allocation events of one attention call through transformers' ``sdpa_attention_forward`` with the
    stand-in for ``kernel``, as ``{"forward": [[action, bytes], ...], "backward": [...]}`` (``alloc``/``free``):
    what ``benchmarks/gpu_sdpa_memory.py`` records on the GPU, for comparison with it."""
    import torch
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Module(torch.nn.Module):
        is_causal = True
        num_key_value_groups = heads // kv_heads

    def view(n):
        return torch.empty(batch, seq, n, head_dim, device="meta", dtype=torch.bfloat16).transpose(1, 2)

    events: list = []
    real = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = sdpa_kernel_function(kernel)
    try:
        with _recorder(events):  # inputs made under the recorder too, so that it knows their storage
            q, k, v = view(heads).requires_grad_(), view(kv_heads).requires_grad_(), view(kv_heads).requires_grad_()
            grad = torch.empty(batch, seq, heads, head_dim, device="meta", dtype=torch.bfloat16)
            start = len(events)
            out, _ = sdpa_attention_forward(Module().train(), q, k, v, None, dropout=dropout,
                                            scaling=head_dim ** -0.5, is_causal=True)
            mid = len(events)
            out.backward(grad)
    finally:
        F.scaled_dot_product_attention = real
    named = [["alloc" if kind == "malloc" else "free", nbytes] for kind, _key, nbytes in events]
    return {"forward": named[start:mid], "backward": named[mid:]}


def _cuda_softmax():
    """``F.softmax(x, dtype=torch.float32)`` as CUDA runs it: of an fp16 ``x``, one fp32 output
    (``_softmax(x, dim, half_to_float=True)``, aten/src/ATen/native/SoftMax.cpp ``softmax``), where CPU and meta
    cast ``x`` to fp32 first (a second score-sized tensor); of a bf16 ``x`` CUDA casts first too (the fused path is
    fp16's alone: the recorded histories show two fp32 blocks at transformers' eager softmax), so it is left as is."""
    import torch

    real = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and x.dtype == torch.float16 and dim is not None:
            return torch._softmax(x, dim, True)
        return real(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    return real, softmax


def cuda_rms_norm():
    """``(real, rms_norm)``: ``F.rms_norm`` as CUDA runs it (torch's fused RMSNorm kernel: the output in the input's
    dtype and an fp32 statistic per row kept for backward, which returns the input's gradient and the weight's),
    where CPU and meta decompose it into fp32 temporaries of the input's size. megatron-core's norm without Apex
    or Transformer Engine is ``torch.nn.RMSNorm`` (``WrappedTorchNorm``); transformers' RMSNorm modules are Python
    code that CUDA runs op by op, as the meta device does."""
    import torch

    real = torch.nn.functional.rms_norm

    class Fused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            out = torch.empty_like(x)
            rstd = x.new_empty(x.shape[:-1], dtype=torch.float32)
            ctx.save_for_backward(x, weight, rstd)
            return out

        @staticmethod
        def backward(ctx, grad):
            x, weight, rstd = ctx.saved_tensors
            return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else None)

    def rms_norm(input, normalized_shape, weight=None, eps=None):
        if input.device.type == "meta" and weight is not None and len(normalized_shape) == 1:
            return Fused.apply(input, weight)
        return real(input, normalized_shape, weight, eps)

    return real, rms_norm


def cuda_dropout():
    """``(real, dropout)``: ``F.dropout`` as CUDA runs it in training, ``torch.native_dropout`` (the output and a
    1-byte boolean mask kept for backward: ``at::dropout`` takes the fused kernel on CUDA), where CPU and meta build
    the mask as a tensor of the input's dtype (``_dropout_impl``: ``empty_like(input).bernoulli_()``). CUDA's kernel
    (``dropout_cuda`` in aten/src/ATen/native/cuda/Dropout.cu) takes the mask from the allocator before the output;
    meta's ``native_dropout`` the other way round, which leaves the cache cut differently (an allocator history of a
    megatron-core model with dropout 0.1: benchmarks/results/alloc_history/gelu_fit_h100/), so the two are made here
    in CUDA's order."""
    import torch

    real = torch.nn.functional.dropout

    class _Dropout(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, p):
            mask = torch.empty_like(input, dtype=torch.bool)  # first, as dropout_cuda asks
            out = torch.empty_like(input)
            ctx.scale = 1.0 / (1.0 - p)
            if not input.is_meta:
                mask.bernoulli_(1.0 - p)
                torch.mul(input, mask, out=out).mul_(ctx.scale)
            ctx.save_for_backward(mask)
            return out

        @staticmethod
        def backward(ctx, grad):
            (mask,) = ctx.saved_tensors
            return torch.ops.aten.native_dropout_backward(grad, mask, ctx.scale), None

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.numel() > 0:
            out = _Dropout.apply(input, p)
            return input.copy_(out) if inplace else out
        return real(input, p, training, inplace)

    return real, dropout


ALLREDUCE_FALLBACK_ELEMENTS = 500_000_000
"""``MEMORY_OPT_ALLREDUCE_SIZE`` of deepspeed/runtime/engine.py: the bucket of ``buffered_allreduce_fallback``, with
which a run without gradient partitioning (ZeRO-0) reduces its gradients at each accumulation boundary."""


@dataclass(frozen=True)
class DeepSpeedSetup:
    """What of a DeepSpeed run the trace needs."""
    zero_stage: int
    micro_batch: int
    grad_accum: int
    seq_length: int
    reduce_bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    prefetch_bucket_elements: int = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS
    """ZeRO-3 ``stage3_prefetch_bucket_size``: what the coordinator gathers ahead (:class:`_Zero3ParamFetcher`)."""
    persistence_threshold: int = DEEPSPEED_PERSISTENCE_THRESHOLD
    """ZeRO-3 ``stage3_param_persistence_threshold``: parameters of at most this many elements are never released."""
    sub_group_elements: int = DEEPSPEED_SUB_GROUP_ELEMENTS
    """ZeRO-3 ``sub_group_size``: the optimizer's sub-groups (:func:`zero3_sub_groups`)."""
    steps: int = 6
    offload_optimizer: bool = False
    """ZeRO-2 with ``offload_optimizer`` on the CPU: the fp32 master, its gradient and Adam's states live on the
    host; what stays on the GPU is traced as :func:`deepspeed_steps` says."""
    offload_params: bool = False
    """ZeRO-3 with ``offload_param`` on the CPU: the 16-bit partitions live on the host and each module fetch copies
    its parameters in, as :class:`_Zero3ParamFetcher` traces it. With them on NVMe (ZeRO-Infinity) the partitions
    are swapped into page-locked host buffers first: the GPU sees the same fetches."""
    nvme_optimizer: bool = False
    """ZeRO-3 with the optimizer offloaded to NVMe (``offload_optimizer`` then also set): each reduced bucket's fp32
    gradient casts stay on the GPU until the bucket's last slice is handed over and the list is swapped out
    (``stage3.py`` ``partition_grads``, :func:`workbench.memory.zero3_nvme_gradient_list_bytes`); the rest of the
    GPU's side is CPU offload's (the states' swaps go through host buffers)."""
    zero_init: bool = False
    """ZeRO-3 with the model built inside ``deepspeed.zero.Init`` (transformers' ``from_config`` while a ZeRO-3
    ``HfDeepSpeedConfig`` is alive, as the Trainer does): :func:`zero_init_build` in place of partitioning a model
    built whole on the GPU."""
    overlap_comm: bool = False
    """DeepSpeed's ``overlap_comm`` as the run has it; :func:`deepspeed_steps` reads it at ZeRO-1/2 only (the second
    bucket, ZeRO-1's reductions during backward, the gradient partition made on the reduction stream; DeepSpeed's
    default there is off) — ZeRO-3's trace always reduces on its side stream."""
    flatten_on_device: bool = True
    """ZeRO-1/2 flatten the 16-bit parameters on the GPU when its free memory holds the flat buffer, else on the
    CPU (``stage_1_and_2.py``: ``flatten_on_accelerator``); :func:`replay_deepspeed` decides which from the
    replay."""
    side_stream_lags: bool = True
    """ZeRO-3 (``overlap_comm``): each gradient handed to the reduce stream (copied into the bucket, or reduced from
    its own block) is freed with ``record_stream``, so its block returns to the pool only once the GPU has run that
    stream's work. ``False``: at once, as when the host is the bottleneck and the GPU keeps up with it; ``True`` (the
    default): at the host's next wait for the stream — the oldest of more than ``max_param_reduce_events`` (2)
    outstanding reductions, or the end of backward (``independent_gradient_partition_epilogue``) — as when the GPU
    lags behind the host (a GPU-bound run). The recorded histories show both (a Llama 3 70B width's blocks came back
    up to 90 allocations late, a 1.1B model's at once); the later return is the safer side: on the corpus's 122
    ZeRO-3 test runs the replay's whole device is 3.6 % median with one run more than 5 % under (-6.0 %), against
    3.4 % and three (-8.7 %) with the blocks back at once, and its worst over stays +15.3 %
    (``benchmarks/alloc_sim.py --only /z3/``). :func:`side_stream_lags` decides it from the run's settings."""


def optimizer_offloaded(plan) -> bool:
    """Whether DeepSpeed keeps a plan's optimizer off the GPU: in host memory (``cpu``, and ``nvme`` below ZeRO-3,
    which DeepSpeed runs as the CPU) or swapped to NVMe at ZeRO-3 (:attr:`DeepSpeedSetup.nvme_optimizer`): the
    GPU's side is CPU offload's either way, but for the NVMe swap list."""
    return str(plan.offload_optimizer) != "none"


def plan_deepspeed_settings(plan) -> dict:
    """A plan's DeepSpeed settings as the trace takes them, under the names :class:`DeepSpeedSetup` and
    :func:`replayed_peaks` share: its ZeRO sizes, what it offloads (:func:`optimizer_offloaded`), ``overlap_comm``
    and the optimizer on NVMe."""
    return dict(reduce_bucket_elements=plan.reduce_bucket_elements,
                prefetch_bucket_elements=plan.prefetch_bucket_elements,
                persistence_threshold=plan.persistence_threshold, sub_group_elements=plan.sub_group_elements,
                offload_optimizer=optimizer_offloaded(plan), offload_params=str(plan.offload_params) != "none",
                overlap_comm=bool(plan.overlaps_comm), nvme_optimizer=plan.nvme_optimizer)


def side_stream_lags(zero_stage: int, offload_optimizer: bool, pin_memory: bool) -> bool:
    """:attr:`DeepSpeedSetup.side_stream_lags` for a run: ``False`` at ZeRO-3 with the optimizer on the CPU in
    pageable host memory (``offload_optimizer.pin_memory`` false; DeepSpeed's default is true), else ``True``. There
    ``partition_grads`` copies every gradient partition to the host's fp32 gradient with ``copy_(...,
    non_blocking=True)`` on the reduce stream (``_offload_grad_partition_at_boundary``; between boundaries the
    partition goes to the host too); a copy from device memory to pageable host memory returns only once it is done
    (CUDA's documented behaviour of ``cudaMemcpyAsync`` to pageable memory), so the host waits for the reduce
    stream's work after each partition and the blocks freed with ``record_stream`` are back when it next allocates.
    Found on the H100 corpus's five such runs (hf-solar-h4096-l10, hf-codellama-h8192-l2, hf-yicoder-h2048-l24,
    hf-granite3-h2048-l40, hf-qwen15-h2560-l20; none on the H200): peak reserved +0.0 to +37.3 % over with the
    blocks late, -2.8 to +0.0 % with them back at once; with page-locked buffers the late return stays the closer
    side (+0.0 to +20.3 % against -21.6 to -0.2 % over seven runs). Parameter offload changes neither."""
    return not (int(zero_stage) == 3 and bool(offload_optimizer) and not bool(pin_memory))


REPEAT_SETTLED_STEPS = True
"""Whether the traces stop tracing once the training steps have settled (:func:`traced_steps`); ``False`` traces
every step (the tests compare both)."""

_KEYED = ("malloc", "free", "release")


def _allocated_keys(events: list, start: int, end: int) -> dict:
    """The keys ``events[start:end]`` allocate, each mapped to its place among them (0, 1, ...)."""
    keys = (e[1] for e in events[start:end] if e[0] == "malloc")
    return {key: i for i, key in enumerate(keys)}


def _late_names(events: list, start: int, end: int) -> dict:
    """The keys ``events[start:end]`` allocate, each named ``(bytes, -j)``: the j-th last allocation of its size
    there. What a step frees of the step before is made late in it, and the first step makes more than the others
    (cuBLAS's workspaces, Adam's states), so this names such a block alike in each step."""
    allocated = [(e[1], e[2]) for e in events[start:end] if e[0] == "malloc"]
    seen: dict = {}
    names = {}
    for key, size in reversed(allocated):
        seen[size] = seen.get(size, 0) + 1
        names[key] = (size, -seen[size])
    return names


def _step_pattern(events: list, start: int, end: int, before: int) -> list:
    """``events[start:end]`` (one step, the step before it from ``before``) with each block named by where it was
    allocated — ``("own", i)``: the step's i-th allocation, ``("prev", name)``: the step before's, by
    :func:`_late_names`, ``("old", key)``: an earlier one — so that a step repeating the one before it gives the same
    list."""
    own, prev = _allocated_keys(events, start, end), _late_names(events, before, start)

    def name(key):
        return ("own", own[key]) if key in own else ("prev", prev[key]) if key in prev else ("old", key)

    return [(e[0], name(e[1]), *e[2:]) if e[0] in _KEYED else e for e in events[start:end]]


def _repeat_step(events: list, start: int, before: int, steps: int, *, keep_keys: bool = False) -> list:
    """Append ``steps`` copies of the settled step ``events[start:]`` (the step before it from ``before``): each
    copy's allocations get new keys, and what the step freed of the step before's allocations, the copy frees of
    the step before it (the block of the same :func:`_late_names` name). ``keep_keys``: the last copy's allocations
    take the keys of the traced step's (given new ones), so that the events traced after the copies, which free
    blocks the traced step made and its live tensors still name by those keys, free the last copy's. Returns the
    keys of the traced step's allocations and of each copy's, by place (the traced step's as renamed)."""
    step = events[start:]
    own = _allocated_keys(events, start, len(events))
    prev = _late_names(events, before, start)
    place = {name: own[key] for key, name in _late_names(events, start, len(events)).items()}
    last = list(own)  # the keys of the latest step's allocations, by place
    if keep_keys and steps:  # new keys ("repeat", event index): no trace or other copy makes such a key
        renamed = {key: ("repeat", start + i) for i, key in enumerate(own)}
        events[start:] = [(e[0], renamed.get(e[1], e[1]), *e[2:]) if e[0] in _KEYED else e for e in step]
        last = [renamed[key] for key in own]
    made = [last]
    fresh = max((e[1] for e in events if e[0] == "malloc" and isinstance(e[1], int)), default=0)
    for copy in range(steps):
        if keep_keys:
            keys = list(own) if copy == steps - 1 else [("repeat", len(events) + i) for i in range(len(own))]
        else:
            keys = list(range(fresh + 1, fresh + 1 + len(own)))
            fresh += len(own)

        def name(key, keys=keys, last=last):
            return keys[own[key]] if key in own else last[place[prev[key]]] if key in prev else key

        events.extend((e[0], name(e[1]), *e[2:]) if e[0] in _KEYED else e for e in step)
        made.append(keys)
        last = keys
    return made


def _repeats(events: list, starts: list) -> bool:
    """Whether the latest of the spans beginning at ``starts`` (the last one ends at the events' end) repeats the
    one before it, each block named by the span that allocated it (:func:`_step_pattern`)."""
    return (_step_pattern(events, starts[-1], len(events), starts[-2])
            == _step_pattern(events, starts[-2], starts[-1], starts[-3]))


def traced_steps(events: list, steps: int):
    """The step numbers ``0 .. steps-1`` for a trace's training loop (``for _ in traced_steps(events, steps)``),
    stopping early once the trace has settled: when a step's events repeat the step before's exactly — the same
    requests, sizes, streams and frees, each block named by the step that allocated it (:func:`_step_pattern`) —
    every later step is the same program on the same state, so the remaining steps' events are that step's, copied
    with new keys (:func:`_repeat_step`), not traced again: the replay's peaks are those of the full trace
    (:data:`REPEAT_SETTLED_STEPS` turns this off). Checked from the third step on: the first creates the optimizer's
    states. A trace whose steps never repeat (a block living longer than one step) is traced whole."""
    starts = []  # the index of each step's first event
    try:
        for step in range(steps):
            starts.append(len(events))
            yield step
            _free_kept_copies(events, starts[-1])
            if not REPEAT_SETTLED_STEPS or len(starts) < 3 or step == steps - 1:
                continue
            if _repeats(events, starts):
                _repeat_step(events, starts[-1], starts[-2], steps - 1 - step)
                return
    finally:
        _KEPT.pop(id(events), None)


_KEPT: dict = {}
"""Per trace (``id`` of its events), the blocks that copied micro-batches keep beyond the next one
(:func:`_copied_middle`): the traced key whose free is awaited -> ``(index, [(key, bytes), ...])``, the first event
after the copies and the same block in each copy, freed with it (:func:`_free_kept_copies`)."""


def _free_kept_copies(events: list, since: int) -> None:
    """Where ``events[since:]``, after the copies, frees (or releases) a block that copied micro-batches kept
    (:data:`_KEPT`), the same block of each copy is freed right after it, the latest copy's first: as CPython frees a
    list of per-micro-batch blocks, from its end (megatron-core's schedule keeps each micro-batch's loss in a list
    until the step's end)."""
    kept = _KEPT.get(id(events))
    if not kept:
        return
    tail = []
    for i, e in enumerate(events[since:], start=since):
        tail.append(e)
        entry = kept.get(e[1]) if e[0] in ("free", "release") else None
        if entry is not None and i >= entry[0]:
            tail.extend((e[0], key, size, *e[3:]) for key, size in reversed(entry[1]))
            if e[0] == "free":
                del kept[e[1]]
    events[since:] = tail


def traced_micro_batches(events: list, count: int):
    """The micro-batch numbers ``0 .. count-1`` of one optimizer step (``for micro in traced_micro_batches(events,
    count)``), skipping the middle ones once they repeat: when the third micro-batch's events repeat the second's
    (:func:`_repeats`), the micro-batches up to the last but one are the same program on the same state, so their
    events are the third's, copied (:func:`_copied_middle`, the last copy keeping the traced keys), and the loop goes
    on with the last micro-batch, the accumulation boundary, traced as it runs. With gradient accumulation over 16
    micro-batches a step traces four; the events are the same as tracing all of them (:data:`REPEAT_SETTLED_STEPS`
    turns this off too)."""
    starts = []  # the index of each traced micro-batch's first event
    micro = 0
    while micro < count:
        starts.append(len(events))
        yield micro
        micro += 1
        if REPEAT_SETTLED_STEPS and len(starts) == 3 and micro < count - 1 and _copied_middle(events, starts,
                                                                                           count - 1 - micro):
            micro = count - 1


SCHEDULED_MICRO_BATCHES = 4
"""The micro-batches megatron-core's schedule runs in a trace of a step of more (:func:`trace_mcore_ddp`): three
traced, the middle ones copied from the third, and the last (the accumulation boundary) traced."""


class _MicroBatchesDiffer(Exception):
    """A step's middle micro-batches of a megatron-core trace did not repeat: it is traced again, every one run."""


def _copied_middle(events: list, starts: list, copies: int) -> bool:
    """Whether the latest micro-batch (from ``starts[-1]`` to the events' end) repeats the one before it
    (:func:`_repeats`); if so its events are copied ``copies`` times after it, the last copy keeping the traced keys
    (:func:`_repeat_step`). A block the micro-batch before left alive and this one did not free outlives the next
    micro-batch (a list of them freed at the step's end): each copy's is freed with the traced one
    (:func:`_free_kept_copies`, at the step's end)."""
    if not _repeats(events, starts):
        return False
    before, start = starts[-2], starts[-1]
    previous = list(_allocated_keys(events, before, start))
    freed = {e[1] for e in events[before:] if e[0] == "free"}
    kept = [place for place, key in enumerate(previous) if key not in freed]
    own = list(_allocated_keys(events, start, len(events)))
    sizes = {e[1]: e[2] for e in events[start:] if e[0] == "malloc"}
    made = _repeat_step(events, start, before, copies, keep_keys=True)
    if copies:
        pending = _KEPT.setdefault(id(events), {})
        for place in kept:  # the traced (renamed) block and every copy's but the last, which has the traced key
            pending[own[place]] = (len(events), [(keys[place], sizes[own[place]]) for keys in made[:-1]])
    return True


def _fp64_norm(numel: int):
    """DeepSpeed's ``get_norm_dtype`` norm of a gradient of ``numel`` elements: an fp64 copy of it, freed after its
    0-d norm (returned, kept by the caller) is taken."""
    import torch

    wide = torch.empty(numel, dtype=torch.float64, device="meta")
    return torch.linalg.vector_norm(wide)


def deepspeed_steps(model, micro_step, setup: DeepSpeedSetup, events: list) -> None:
    """DeepSpeed ZeRO-``setup.zero_stage`` (0-2, one GPU, bf16; ZeRO-3 is :func:`deepspeed_zero3_steps`) around a
    model already built on the meta device under
    the recorder: its flat buffers, master copy, gradient buckets and Adam states as meta tensors with the lifetimes
    :func:`trace_hf_deepspeed` lists, and ``setup.steps`` optimizer steps of ``setup.grad_accum`` micro-batches each;
    ``micro_step()`` runs one forward and returns the loss (its backward runs here). ``("empty_cache", 0, 0)`` marks
    where DeepSpeed empties the cache, ``("end", 0, 0)`` the end of the last step.

    ZeRO-1/2 with the optimizer offloaded to the CPU (``setup.offload_optimizer``; ``stage_1_and_2.py`` with
    ``cpu_offload``; ZeRO-1 sends its gradients through the bucket at the end of backward, as without offload) keeps
    on the GPU only the flat bf16 parameters, the ``ipg`` bucket and a bf16 staging buffer the size of the largest
    parameter (``temp_grad_buffer_for_gpu_offload``, made in ``__init__``): the fp32 master is cloned
    from the flat buffer on the GPU and moved to the host (``.detach().clone().to(device, fp32)``: a transient bf16
    copy), its gradient and Adam's states are host tensors. Each reduction of the bucket hands every gradient in it to
    the host (``copy_grads_in_partition``'s offload branch, at the accumulation boundary): its norm through an fp64 copy
    (``set_norm_for_param_grad_in_gpu``), then an fp32 copy for the asynchronous copy into the host gradient
    (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``), both freed after use; no ``grads_in_partition``. A
    gradient larger than the bucket bypasses it and, with the optimizer on the CPU, is first cloned, its original
    storage freed (DeepSpeed 0.19's offload gradient safety, ``_offload_gradient_safety_enabled``:
    ``grad_reduc.data = grad_reduc.detach().clone()``; an allocator history of Qwen2.5 14B at 8 layers, final37,
    showed the clone's second block splitting the master clone's cached segment, so the fp64 norm copy that follows
    needed a segment of its own: ``benchmarks/results/alloc_history/final37_miss/``). The step runs on the host and
    copies the new weights into the bf16 buffer (a blocking copy: converted on the host). With gradient accumulation,
    before the boundary each gradient is only added into its host accumulation buffer through the staging buffer
    (``async_accumulate_grad_in_cpu_via_gpu``: an in-place add and two copies, no new block), so the norm and fp32
    copies are the boundary's alone (DeepSpeed 0.19.8, read 2026-12-06; first compared with the four such runs of the
    corpus, two shapes on the H200 and the H100, which no trace had been made of: allocated and reserved exact).

    ZeRO-1/2 with ``overlap_comm`` (``setup.overlap_comm``; no offload): ``setup_buckets`` allocates a second bucket
    beside the first (double buffering: the one being filled and the one being reduced), ZeRO-1 sends each gradient
    through the bucket from its hook at the accumulation boundary as ZeRO-2 does (``process_gradients``:
    ``partition_gradients or overlap_comm``; the engine's ``reduce_gradients`` then reduces nothing more), and
    ``reduce_ipg_grads`` copies into ``grads_in_partition`` under the reduction stream, so that buffer is made on it
    (:data:`SIDE_STREAM`): its freed block serves only that stream's later requests. Found on the allocator
    histories of six fit-split runs (``benchmarks/results/alloc_history/overlap/``: two 953.7 MiB buckets, the
    partition the only request on the second stream). With the optimizer on the CPU as well there is no partition:
    the second bucket, and the offload's fp64 norm and fp32 staging copies made on the reduction stream (DeepSpeed
    0.19.8 ``reduce_ipg_grads`` runs ``copy_grads_in_partition`` under ``reduction_stream`` whenever
    ``overlap_comm``), read from the source before any such run was measured; judged blind on the eight runs of
    the corpus's final49 batch (seven of them with both): traced allocated within -3.0 %, peak reserved from the
    measured allocated within +2.3 %, whole device with the replay's own peak within -2.4 %
    (``benchmarks/results/alloc_sim_final49_h200.txt``)."""
    import torch

    offload = bool(setup.offload_optimizer)
    overlap = bool(setup.overlap_comm) and setup.zero_stage in (1, 2)
    if offload and setup.zero_stage not in (1, 2, 3):
        raise ValueError(f"offload_optimizer with zero_stage={setup.zero_stage}: the trace models DeepSpeed's CPU "
                         f"offload at ZeRO-1 to 3")
    # the engine's _configure_distributed_model casts every parameter to bf16 (peft's fp32 adapters included), buffers
    # as they are, except for a model built inside deepspeed.zero.Init: DeepSpeed 0.19.8's
    # _cast_module_mixed_precision leaves every parameter of such a model as it is ("ZeRO-Init params are already at
    # the configured dtype"), so adapters peft adds after the build stay fp32 and peft runs them in fp32
    if not (setup.zero_init and setup.zero_stage == 3):
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != torch.bfloat16:
                p.data = p.data.to(torch.bfloat16)
    if setup.zero_stage == 3:
        return deepspeed_zero3_steps(model, micro_step, setup, events)
    params = [p for p in model.parameters() if p.requires_grad]
    shapes = [p.shape for p in params]
    n = sum(p.numel() for p in params)
    if setup.zero_stage == 0:  # FP16_Optimizer: flatten clones of the parameters
        clones = [p.detach().clone() for p in params]
        flat = torch.cat([c.reshape(-1) for c in clones])
        del clones
    else:  # DeepSpeedZeroOptimizer: empty_cache(), then flatten the parameters themselves
        events.append(("empty_cache", 0, 0))
        events.append(("flatten", 0, 2 * n))  # the free-memory check (flatten_on_accelerator)
        if setup.flatten_on_device:
            flat = torch.cat([p.detach().reshape(-1) for p in params])
        else:  # the parameters to the host (their GPU storage freed, empty_cache), the flat buffer made there and
            for p in params:  # moved to the GPU
                p.data = torch.empty(1, dtype=p.dtype, device="meta")
            events.append(("empty_cache", 0, 0))
            flat = torch.empty(n, dtype=torch.bfloat16, device="meta")
    offset = 0
    for p, shape in zip(params, shapes):  # the parameters become views of the flat buffer; their own storage is freed
        numel = math.prod(shape)
        p.data = flat[offset:offset + numel].view(shape)
        offset += numel
    if offload:  # the master's bf16 clone on the GPU, then to the host in fp32: nothing of it stays
        master = adam = None
        transient = flat.clone()
        del transient
        # temp_grad_buffer_for_gpu_offload: a bf16 staging buffer of the largest parameter's size, kept on the GPU
        staging = torch.zeros(max(p.numel() for p in params), dtype=torch.bfloat16, device="meta")
    else:
        master = flat.clone().float()  # the fp32 master copy, through a bf16 clone
        # a zero fp32 gradient for the master (both optimizers' initialize_optimizer_states); FP16_Optimizer
        # runs Adam on it once, creating its states
        master_grad = torch.zeros_like(master)
        adam = [torch.zeros_like(master), torch.zeros_like(master)] if setup.zero_stage == 0 else None
        del master_grad
    bucket = {}
    ipg = dict(elements=0, large=[], params=[], partition=None, norms=[], held=[])

    def reduce_bucket():  # reduce_ipg_grads: the bucket's gradients copied into grads_in_partition (made at the first)
        if offload:  # each gradient to the host: its norm through fp64, then an fp32 copy for the async copy
            since = len(events)
            for q in ipg["params"]:
                if state["boundary"]:  # before it the gradient only goes to its host accumulation buffer
                    ipg["norms"].append(_fp64_norm(q.numel()))  # kept until the step
                    staged = torch.empty(q.numel(), dtype=torch.float32, device="meta")
                    del staged
            if overlap:  # copy_grads_in_partition under the reduction stream: the copies come from its blocks
                _on_stream(events, since, SIDE_STREAM)
            # before the boundary an oversized gradient's own clone is not freed once it goes to its host
            # accumulation buffer (async_accumulate_grad_in_cpu_via_gpu leaves the gradient attribute; at the boundary
            # async_inplace_copy_grad_to_fp32_buffer_from_gpu clears it): it stays alive to the end of that backward.
            # Read off the allocator history of a Trainer run whose reduce_bucket_size "auto" (hidden²) made every
            # weight oversized: every MLP and attention weight's gradient alive at the end of the first micro-batch's
            # backward, the run's peak, and all freed together before the next one
            # (benchmarks/results/alloc_history/trainer_h100/); the release point is the history's, not found in
            # the source
            if not state["boundary"]:
                ipg["held"].extend(ipg["large"])
                ipg["large"] = []
        elif ipg["partition"] is None:  # copy_grads_in_partition, under the reduction stream with overlap_comm
            since = len(events)
            ipg["partition"] = torch.empty(n, dtype=torch.bfloat16, device="meta")
            if overlap:
                _on_stream(events, since, SIDE_STREAM)
        for q in ipg["large"]:  # an oversized gradient reduced from its own tensor, then copied and freed
            q.grad = None
        ipg.update(elements=0, large=[], params=[])

    def to_bucket(q):  # reduce_independent_p_g_buckets_and_remove_grads: the gradient copied into the bucket
        if ipg["elements"] + q.numel() > setup.reduce_bucket_elements:
            reduce_bucket()
        if q.numel() > setup.reduce_bucket_elements:  # extra_large_param_to_reduce: bypasses the bucket
            if offload:  # the offload's gradient safety: an independent copy replaces its storage, the original freed
                q.grad = q.grad.detach().clone()
            ipg["large"].append(q)
        else:
            q.grad = None
        ipg["elements"] += q.numel()
        ipg["params"].append(q)

    state = dict(boundary=True)  # is_gradient_accumulation_boundary() of the micro-batch in backward

    def grad_ready(q):  # DeepSpeed's grad hook: process_gradients -> setup_buckets, then (ZeRO-2) the copy
        if "ipg" not in bucket:
            bucket["ipg"] = torch.empty(setup.reduce_bucket_elements, dtype=torch.bfloat16, device="meta")
            if overlap:  # the second buffer of the double-buffered bucket
                bucket["ipg2"] = torch.empty(setup.reduce_bucket_elements, dtype=torch.bfloat16, device="meta")
        if setup.zero_stage >= 2 or (overlap and state["boundary"]):
            to_bucket(q)

    def allreduce_fallback():  # buffered_allreduce_fallback, also on one GPU: flattened buckets, copied back, freed
        grads = {}
        for q in params:  # _get_gradients_for_reduction: a parameter without a gradient gets a zero one
            if q.grad is None:
                q.grad = torch.zeros_like(q)
            grads.setdefault(q.grad.dtype, []).append(q.grad)
        for same_dtype in grads.values():  # allreduce_no_retain: a bucket is flushed once it exceeds the size
            numel = 0
            for i, g in enumerate(same_dtype):
                numel += g.numel()
                if numel > ALLREDUCE_FALLBACK_ELEMENTS or i == len(same_dtype) - 1:
                    flat = torch.empty(numel, dtype=g.dtype, device="meta")
                    del flat
                    numel = 0

    if setup.zero_stage >= 1:
        for p in params:
            p.register_post_accumulate_grad_hook(grad_ready)
    for _ in traced_steps(events, setup.steps):
        for micro in traced_micro_batches(events, setup.grad_accum):
            boundary = state["boundary"] = micro == setup.grad_accum - 1
            loss = micro_step()
            loss.backward()
            if setup.zero_stage == 1 and boundary and not overlap:  # the engine's reduce_gradients: each
                for q in params:  # gradient, in group order, through the bucket as ZeRO-2 does during backward
                    if q.grad is not None:
                        to_bucket(q)
            if setup.zero_stage >= 2 or (setup.zero_stage == 1 and boundary):  # reduce_ipg_grads in the epilogue
                reduce_bucket()
            for q in ipg["held"]:  # (the oversized gradients of a micro-batch before the boundary, above)
                q.grad = None
            ipg["held"].clear()
            if setup.zero_stage != 1 or boundary:
                bucket.clear()  # _release_ipg_buffers
        if setup.zero_stage == 0:  # the engine's allreduce_gradients at the accumulation boundary
            allreduce_fallback()
        grads_in_partition = ipg["partition"]
        if offload:  # the step runs on the host (complete_grad_norm_calculation_for_cpu_offload reads the norms)
            ipg["norms"].clear()
            continue
        if setup.zero_stage == 0:  # fp32 copies of each gradient, flattened, then the bf16 ones freed
            copies = [p.grad.float() for p in params]
            fp32_grad = torch.cat([c.reshape(-1) for c in copies])
            del copies
        else:
            # scaled_global_norm -> get_grad_norm_direct: each gradient cast to fp64 (get_norm_dtype) for
            # its norm, one at a time; the 0-d norms are kept until they are stacked
            norms = [_fp64_norm(p.numel()) for p in params]
            total_norm = torch.stack(norms).pow(2).sum()
            del norms, total_norm
            # the bf16 gradients flattened (self.flatten: a new buffer, of the views into
            # grads_in_partition at ZeRO-2), cast to the fp32 partition, the bf16 ones freed
            if grads_in_partition is not None:
                flat_grad = grads_in_partition.clone()
            else:
                flat_grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                                       for p in params])
            fp32_grad = flat_grad.float()
            del flat_grad
        grads_in_partition = ipg["partition"] = None
        for p in params:
            p.grad = None
        if adam is None:  # Adam's states at the first step
            adam = [torch.zeros_like(master), torch.zeros_like(master)]
        del fp32_grad
    events.append(("end", 0, 0))  # what is freed after this (the teardown) is not the run's


SIDE_STREAM = 1
"""The stream number the traces give ZeRO-3's ``reduce_and_partition_stream`` (``overlap_comm``): its requests are
served from that stream's own cached blocks (:meth:`CachingAllocator.malloc`)."""
ALLGATHER_STREAM = 2
"""The stream number the traces give ZeRO-3's ``allgather_stream``: the coordinator gathers (with ``offload_param``
copies in) parameters there (partitioned_param_coordinator.py ``__all_gather_params_``), so their blocks come from
that stream's cached blocks."""


def _on_stream(events: list, since: int, stream: int) -> None:
    """Tag the requests appended to ``events`` after index ``since`` as made on ``stream``."""
    for i in range(since, len(events)):
        if events[i][0] == "malloc":
            events[i] = (*events[i][:3], stream)


def _zero3_linear():
    """DeepSpeed's ``zero3_linear_wrap`` (deepspeed/runtime/zero/linear.py ``LinearFunctionForZeroStage3``), which
    ZeRO-3 puts in place of ``F.linear``: ``input.matmul(weight.t())`` (``addmm`` for a 2-D input with a bias), saving
    the input and the parameter itself for backward, so a parameter released after its module keeps no block alive
    (aten's ``linear`` saves a transposed view of the weight, which would)."""
    import torch
    import torch.nn.functional as F

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):
            ctx.save_for_backward(input, weight, bias)
            if input.dim() == 2 and bias is not None:
                return torch.addmm(bias, input, weight.t())
            output = input.matmul(weight.t())
            if bias is not None:
                output += bias
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            dim = grad_output.dim()
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.matmul(weight)
            if ctx.needs_input_grad[1]:
                if dim > 2:
                    grad_weight = grad_output.reshape(-1, grad_output.shape[-1]).t().matmul(
                        input.reshape(-1, input.shape[-1]))
                else:
                    grad_weight = grad_output.t().matmul(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(list(range(dim - 1))) if dim > 2 else grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    return lambda input, weight, bias=None: Linear.apply(input, weight, bias)


def _each_tensor(values, wrap):
    """``values`` with ``wrap`` applied to every tensor in it, as DeepSpeed's ``apply_to_tensors_only`` walks a
    module's inputs and outputs: through tuples and lists (rebuilt), dicts and model outputs (in place)."""
    import torch

    if isinstance(values, (tuple, list)):
        items = [_each_tensor(v, wrap) for v in values]
        if isinstance(values, tuple) and hasattr(values, "_fields"):  # a namedtuple
            return values.__class__(*items)
        return values.__class__(items)
    if isinstance(values, dict):
        for key in list(values.keys()):
            values[key] = _each_tensor(values[key], wrap)
        return values
    if isinstance(values, torch.Tensor):
        return wrap(values)
    return values


def _on_backward(values, callback, *, once: bool):
    """``values`` with each tensor passed through an identity autograd function whose backward calls ``callback``
    (DeepSpeed's ``PreBackwardFunctionForModule`` on a module's outputs: every output tensor's gradient fetches
    again, ``once=False``; ``PostBackwardFunctionModule`` on its inputs: the gradients of all inputs that need one
    release once, when the last arrives, ``once=True``). Tensors that need no gradient pass unchanged."""
    import torch

    remaining = [0]

    class Hook(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.detach()

        @staticmethod
        def backward(ctx, grad):
            remaining[0] -= 1
            if not once or remaining[0] == 0:
                callback()
            return grad

    def wrap(t):
        if not t.requires_grad:
            return t
        remaining[0] += 1
        return Hook.apply(t)

    return _each_tensor(values, wrap)


def _external_aware(fetcher, module):
    """``module._parameters`` as DeepSpeed's ``ZeROOrderedDict`` (``parameter_offload.py``) makes it during the
    engine's forward: reading a parameter that is not gathered registers it as an external parameter of the module
    on top of the forward stack and gathers it (:meth:`_Zero3ParamFetcher.external`)."""
    class Params(dict):
        def __getitem__(self, key):
            param = super().__getitem__(key)
            if param is not None:
                fetcher.external(param)
            return param

    return Params(module._parameters)


class _Zero3ParamFetcher:
    """ZeRO-3's module hooks with the parameters on the host (``offload_param``, one GPU): before a module runs
    (forward, or its backward) its parameters are copied in, one block each (``NoGatherHandle``:
    ``param.ds_tensor.data.to(device)``), and after it they are freed. The first forward and backward record the
    trace and free each module's parameters at once; later ones follow DeepSpeed's coordinator
    (:class:`workbench.memory.Zero3Coordinator`: prefetching and keeping parameters used again). Parameters of at
    most ``persistence_threshold`` elements (``stage3_param_persistence_threshold``) are persistent: copied in once,
    never freed; the coordinator prefetches up to ``prefetch`` elements (``stage3_prefetch_bucket_size``).

    A parameter read in the forward of a module that does not own it (megatron-core's tied output layer takes the
    word embedding's weight as an argument: ``shared_embedding_or_output_weight()`` in ``GPTModel``'s forward) is
    registered as an external parameter of the module on top of the forward stack and gathered at once (DeepSpeed's
    ``ZeROOrderedDict.__getitem__`` → ``register_external_parameter``, ``param.all_gather()``); that module fetches
    it from then on, and a parameter is freed only when no module that fetched it is still active
    (``__release_param``: ``ds_active_sub_modules``): the top module's external embedding stays gathered through its
    forward and its backward.

    The blocks the first module backward of a micro-batch releases (the output layer's weight, after its
    vocabulary-wide GEMMs; ``free_param`` frees it with ``record_stream``) come back only at the end of the backward,
    when the host waits for the GPU: an allocator history of an H100 run (InternLM2's width, 2 layers) had that block
    back seven fetches late, each step, where the other 227 of its 238 released blocks were back within one, and the
    embedding's prefetch made a new segment beside it. Returned at once, the replay came out short by about one output
    weight on the corpus's parameter-offload runs (test split: H200 52 runs 1.6 % median, six more than 5 % under, to
    -7.5 %; H100 13 runs 2.9 %, three under, to -6.9 %); seven fetches late, it still was (eight and one under); at
    the end of the backward, 1.5 % with one under (-5.3 %) and 0.9 % with none, worst over +11.3 % (``benchmarks/
    alloc_sim.py``, peak reserved of the replay's own trace; the fit split's 13 runs: worst under -3.8 % -> -2.0 %)."""

    def __init__(self, model, shapes: dict, events: list, *, persistence_threshold=DEEPSPEED_PERSISTENCE_THRESHOLD,
                 prefetch=DEEPSPEED_PREFETCH_BUCKET_ELEMENTS):
        self.events, self.prefetch = events, prefetch

        # parameters by their ds_id (the order the engine converts them), as the coordinator sorts them
        ds_id = {id(p): i for i, p in enumerate(model.parameters())}
        self.shapes = {ds_id[k]: shape for k, shape in shapes.items() if k in ds_id}
        self.by_id, self.params_of, self.numel = {}, {}, {}
        self.persistent = []
        for module in model.modules():  # every module: a container's fetch gathers nothing but prefetches
            own = list(module.parameters(recurse=False))
            key = id(module)
            large = []
            for p in own:
                pid = ds_id[id(p)]
                numel = math.prod(self.shapes[pid])
                self.by_id[pid] = p
                if numel > persistence_threshold:
                    large.append(pid)
                    self.numel[pid] = numel
                elif pid not in self.persistent:
                    self.persistent.append(pid)
            self.params_of[key] = tuple(large)
            module.register_forward_pre_hook(self._pre_forward)
            module.register_forward_hook(self._post_forward)
        self.pid_of = {id(p): pid for pid, p in self.by_id.items()}
        for module in model.modules():
            module._parameters = _external_aware(self, module)
        self.trace, self.coordinator, self.recording = [], None, True
        self.stack, self.active = [], {}
        self.backward_released, self.late = False, []

    def external(self, param) -> None:
        """A parameter read during the forward (:func:`_external_aware`): when it is not gathered, registered with
        the module on top of the forward stack and gathered."""
        pid = self.pid_of.get(id(param))
        if pid is None or param.numel() or not self.stack or pid not in self.numel:
            return
        key = self.stack[-1]
        if pid not in self.params_of[key]:
            self.params_of[key] = tuple(sorted(self.params_of[key] + (pid,)))
        self.active.setdefault(pid, set()).add(key)
        self._copy_in(pid)

    # DeepSpeed's hooks (parameter_offload.py): before a module's forward its parameters are fetched and its inputs
    # wrapped so that their gradient releases the parameters again (PostBackwardFunction); after it they are released
    # and its outputs wrapped so that their gradient fetches the parameters for the module's backward
    # (PreBackwardFunction). A module whose inputs need no gradient (the embedding) is released at the end.
    def _pre_forward(self, module, args):
        self.stack.append(id(module))
        self._fetch(id(module))
        return _on_backward(args, lambda: self._release(id(module), backward=True), once=True)

    def _post_forward(self, module, args, out):
        self.stack.pop()
        self._release(id(module))
        return _on_backward(out, lambda: self._fetch(id(module)), once=False)

    def _copy_in(self, pid) -> None:
        import torch

        p = self.by_id[pid]
        if p.numel() == 0:
            p.data = torch.empty(self.shapes[pid], dtype=torch.bfloat16, device="meta")

    def _free(self, pid) -> None:
        import torch

        p = self.by_id[pid]
        if p.numel():
            p.data = torch.empty(0, dtype=torch.bfloat16, device="meta")

    def start(self) -> None:
        """A micro-batch's forward begins: the persistent parameters are in place; after a recorded trace the
        coordinator starts over it."""
        for pid in self.persistent:
            self._copy_in(pid)
        self.backward_released = False
        if not self.recording:
            from workbench.memory import Zero3Coordinator

            self.coordinator = Zero3Coordinator(self.trace, self.params_of, self.numel, prefetch=self.prefetch)

    def _fetch(self, key) -> None:
        since = len(self.events)
        for pid in self.params_of[key]:
            self.active.setdefault(pid, set()).add(key)
        if self.recording:
            self.trace.append(key)
            gathered = sorted(self.params_of[key])
        else:
            gathered = self.coordinator.fetch(key)
        for pid in gathered:
            self._copy_in(pid)
        _on_stream(self.events, since, ALLGATHER_STREAM)

    def _release(self, key, backward: bool = False) -> None:
        for pid in self.params_of[key]:
            self.active.get(pid, set()).discard(key)
        freed = sorted(self.params_of[key]) if self.recording else self.coordinator.release(key)
        since = len(self.events)
        for pid in freed:
            if not self.active.get(pid):  # no module that fetched it still running
                self._free(pid)
        if backward and not self.backward_released:  # the micro-batch's first module backward: the output layer's
            self.backward_released = True
            for i in range(since, len(self.events)):
                if self.events[i][0] == "free":  # back only when the host waits for the GPU (:meth:`finish`)
                    self.events[i] = ("release", *self.events[i][1:])
                    self.late.append(self.events[i])

    def finish(self) -> None:
        """The end of a micro-batch's backward: the blocks released late are back, whatever is still gathered is
        released, the trace complete."""
        self.events.extend(("free", *e[1:]) for e in self.late)
        self.late = []
        for pid in sorted(self.numel):
            self._free(pid)
        self.active.clear()
        self.recording = False


def _allgather_sequential(numel: int, *, on_host: bool):
    """One parameter of ``numel`` elements gathered on one GPU (``_allgather_params_sequential``): a block of its
    size, and with its partition on the host that partition's GPU copy (``param.ds_tensor.to(device)``) beside it,
    dropped at once. Returns the gathered block (freed when the caller drops it)."""
    import torch

    gathered = torch.empty(numel, dtype=torch.bfloat16, device="meta")
    if on_host:
        copied = torch.empty(numel, dtype=torch.bfloat16, device="meta")
        del copied
    return gathered


def _post_order(module):
    """``module``'s modules in the order their ``__init__`` returns (children first, in registration order)."""
    for child in module.children():
        yield from _post_order(child)
    yield module


def zero_init_build(model, shapes: dict, partitions: dict, *, on_host: bool) -> list:
    """The allocations of building ``model`` (made on the meta device outside the recorder, its parameters of
    ``shapes``) inside ``deepspeed.zero.Init`` on one GPU, then of transformers' ``initialize_weights_zero3``
    (``partition_parameters.py`` and ``transformers/integrations/deepspeed.py``, DeepSpeed 0.19, transformers 5):

    - each module's ``__init__`` makes its parameters on the GPU, in bf16; as it returns (``_post_init_method``)
      each is partitioned (``_partition_param``: its partition made, on the host with ``offload_param``, the whole
      tensor copied in, then freed) and its buffers stay on the GPU; a weight that ``tie_weights`` later replaces
      (a tied output layer's own) is partitioned the same way and its partition dropped when the model is tied;
    - ``initialize_weights_zero3`` walks the modules children first and gathers each one's own parameters with its
      direct children's (``GatheredParameters``): one parameter through ``_allgather_params_sequential`` (a block of
      its size, and with the partition on the host a GPU copy of it freed after), several through
      ``_no_gather_coalesced`` (views of their GPU partitions, or a GPU copy each from the host); all freed as the
      context exits (``free_param``).

    Fills ``partitions`` (parameter id -> its GPU partition, none with ``on_host``) and empties each parameter as
    ZeRO-3 leaves it; returns the buffers' blocks, which live as long as the model."""
    import torch

    size = lambda p: math.prod(shapes[id(p)])  # noqa: E731
    buffers, seen, dropped = [], set(), []
    for module in _post_order(model):
        for p in module.parameters(recurse=False):
            full = torch.empty(size(p), dtype=torch.bfloat16, device="meta")
            part = None if on_host else full.clone()
            del full
            if id(p) in seen:  # tied to an earlier parameter: this module's own weight is replaced later
                if part is not None:
                    dropped.append(part)
                continue
            seen.add(id(p))
            if part is not None:
                partitions[id(p)] = part
            p.data = torch.empty(0, dtype=p.dtype, device="meta")
        buffers.extend(torch.empty_like(b) for b in module.buffers(recurse=False))
    dropped.clear()  # tie_weights: the replaced weights' partitions go

    from transformers import PreTrainedModel

    for module in _post_order(model):  # initialize_weights_zero3's _apply_zero3: children first
        params = list(module.parameters(recurse=False))
        for child in module.children():
            if not isinstance(child, PreTrainedModel):
                params.extend(child.parameters(recurse=False))
        params = list({id(p): p for p in params}.values())
        if len(params) == 1:
            held = [_allgather_sequential(size(params[0]), on_host=on_host)]
        else:  # NoGatherCoalescedHandle: a GPU copy of each host partition (views of GPU partitions: no block)
            held = [torch.empty(size(p), dtype=torch.bfloat16, device="meta") for p in params] if on_host else []
        del held  # GatheredParameters.__exit__: partitioned again, the gathered tensors freed
    return buffers


def deepspeed_zero3_steps(model, micro_step, setup: DeepSpeedSetup, events: list) -> None:
    """DeepSpeed ZeRO-3 (one GPU, bf16, ``overlap_comm`` and ``contiguous_gradients`` on, its defaults) around a
    model built on the meta device under the recorder, in the order of ``deepspeed/runtime/zero/stage3.py`` and
    ``partition_parameters.py`` (0.19) as the recorded histories show them (``benchmarks/alloc_history.py``):

    - initialization: every parameter is partitioned (``_partition_param``: a new tensor of its partition, all of
      it on one rank, then the parameter's own storage freed), the partitions are moved into one flat bf16 buffer
      through the host (``defragment``: freed, ``empty_cache()``, the flat buffer made); the fp32 master of each
      optimizer sub-group (:func:`zero3_sub_groups`) is ``flat.to(fp32).clone()``, the loop variable holding each
      sub-group's converted copy until the next sub-group's is made (with several sub-groups two converted copies
      meet: a 6k-wide model's 2.1 GiB more reserved); ``initialize_optimizer_states``
      gives the masters a zero fp32 gradient of the largest sub-group and drops it; the ``ipg`` bucket
      (``reduce_bucket_size`` bf16 elements) and the gradient partitions' flat buffer (bf16, every trainable
      element) are made and kept; registering the gradient hooks gathers each trainable parameter once (a block of
      its size, freed at once). With the optimizer on the CPU the master, its gradient, Adam's states and the
      gradient partitions live on the host;
    - forward and backward: on one GPU the gathers are views of the flat buffer (no block); each gradient is copied
      into the bucket as autograd makes it and its own block freed (``__add_grad_to_ipg_bucket``; one larger than
      the bucket keeps its block); a full bucket and the end of backward reduce it on the side stream
      (:data:`SIDE_STREAM`): ``reduce_scatter_coalesced`` concatenates the bucket's gradients into a new block
      (none for a single gradient), whose partitions are copied (first micro-batch) or added into the gradient
      partitions, then freed. With the optimizer on the CPU each gradient partition goes to the host through a GPU
      copy of its host buffer, and at the accumulation boundary its norm through fp64 copies of at most
      :data:`~workbench.defaults.DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS` elements and an fp32 copy for the host, all
      on the side stream;
    - step: the gradient norm for clipping casts each gradient partition to fp64 in turn (``get_grad_norm_direct``);
      each sub-group's gradients are flattened (bf16) and cast to its fp32 gradient, the bf16 one freed; Adam's
      two fp32 states are made at the first step; the fp32 gradient is freed before the next sub-group. With the
      optimizer on the CPU the step runs on the host."""
    import torch

    offload = bool(setup.offload_optimizer)
    nvme = offload and bool(setup.nvme_optimizer)
    on_host = bool(setup.offload_params)
    everything = list(model.parameters())  # in bf16 already (deepspeed_steps casts them, as the engine does)
    params = [p for p in everything if p.requires_grad]
    shapes = {id(p): p.shape for p in everything}
    size = lambda q: math.prod(shapes[id(q)])  # noqa: E731  (a parameter's elements, gathered or not)
    n = sum(size(p) for p in params)
    partitions = {}
    if setup.zero_init:  # built and partitioned module by module; the buffers it made stay to the end
        buffers = zero_init_build(model, shapes, partitions, on_host=on_host)  # noqa: F841
    else:
        # _convert_to_zero_parameters -> partition(): each parameter's partition made (on the host with
        # offload_param), then its own storage freed
        for p in everything:
            if not on_host:
                partitions[id(p)] = p.detach().reshape(-1).clone()
            p.data = torch.empty(0, dtype=p.dtype, device="meta")
    if not on_host:
        # _create_fp16_partitions_with_defragmentation -> defragment: the trainable partitions to the host, freed,
        # empty_cache(), one flat buffer back on the device (with offload_param the flat buffers are the host's)
        for p in params:
            del partitions[id(p)]
        events.append(("empty_cache", 0, 0))
        # (in the trainable parameters' dtype: fp32 for the adapters peft adds to a model built inside zero.Init,
        # which the engine leaves uncast, deepspeed_steps)
        flat = torch.empty(n, dtype=params[0].dtype if params else torch.bfloat16, device="meta")
    groups = zero3_sub_groups([size(p) for p in params], setup.sub_group_elements)
    masters, adam = [], None
    if not offload:  # _create_fp32_partitions: converted = flat.to(fp32), its clone kept
        converted = None
        for numel in groups:  # the loop's name keeps each sub-group's converted copy until the next one is made
            converted = torch.empty(numel, dtype=torch.float32, device="meta")
            masters.append(converted.clone())
        del converted
        # initialize_optimizer_states: a zero fp32 gradient of the largest sub-group, dropped after
        scratch = torch.zeros(max(groups), dtype=torch.float32, device="meta")
        del scratch
    bucket = torch.empty(setup.reduce_bucket_elements, dtype=torch.bfloat16, device="meta")
    grad_partitions = None if offload else torch.zeros(n, dtype=torch.bfloat16, device="meta")
    for p in params:  # create_reduce_and_remove_grad_hooks: param.all_gather(), partitioned again at once
        _allgather_sequential(size(p), on_host=on_host)
    fetcher = None
    if on_host:  # each module fetch copies its parameters in, each release frees them (no flat buffer here)
        fetcher = _Zero3ParamFetcher(model, shapes, events, persistence_threshold=setup.persistence_threshold,
                                     prefetch=setup.prefetch_bucket_elements)
    else:  # the gathered parameters are views of the flat buffer (frozen ones of their partition)
        offset = 0
        for p in everything:
            if p.requires_grad:
                p.data = flat[offset:offset + size(p)].view(shapes[id(p)])
                offset += size(p)
            else:
                p.data = partitions[id(p)].view(shapes[id(p)])
    ipg = dict(elements=0, params=[])
    order = {id(p): i for i, p in enumerate(params)}  # ds_id: the parameters as the engine converts them
    state = dict(boundary=False)
    released, reductions = [], []  # blocks freed with record_stream and not yet back; per reduction, how many then

    def record_stream_frees(since: int) -> None:  # the frees after ``since`` wait for the reduce stream
        if not setup.side_stream_lags:
            return
        for i in range(since, len(events)):
            if events[i][0] == "free":
                events[i] = ("release", *events[i][1:])
                released.append(events[i])

    def stream_done(upto: int) -> None:  # the host waited for the reduce stream: what it held returns
        for _, key, size in released[:upto]:
            events.append(("free", key, size))
        del released[:upto]
        reductions[:] = [max(0, n - upto) for n in reductions]

    def reduce_bucket():  # __reduce_and_partition_ipg_grads on the side stream
        if not ipg["params"]:
            return
        if len(reductions) > 2:  # max_param_reduce_events: the host synchronizes on the oldest reduction
            stream_done(reductions.pop(0))
        since = len(events)
        # reduce_scatter (DeepSpeed's default) takes __avg_scatter_grads, which first sorts the bucket's parameters
        # by ds_id (their order in the model): partition_grads then walks them in that order, not the hooks'
        ipg["params"].sort(key=lambda q: order[id(q)])
        if len(ipg["params"]) > 1:  # reduce_scatter_coalesced's interleaved flat buffer
            flat_grads = torch.empty(sum(q.grad.numel() for q in ipg["params"]), dtype=torch.bfloat16, device="meta")
        else:  # a gradient reduced alone (larger than the bucket) from its own block, freed below with record_stream
            flat_grads = None
        swap_list = []  # NVMe: the bucket's fp32 casts, swapped out together after its last slice
        for q in ipg["params"]:  # partition_grads
            if offload:  # the host buffer's GPU copy, the norm (fp64) and fp32 copy at the boundary
                staged = torch.empty(size(q), dtype=torch.bfloat16, device="meta")
                if state["boundary"]:
                    chunk = DEEPSPEED_ZERO3_NORM_CHUNK_ELEMENTS  # _constant_buffered_norm2's pieces
                    for start in range(0, size(q), chunk):
                        wide = torch.empty(min(chunk, size(q) - start), dtype=torch.float64, device="meta")
                        del wide
                    single = torch.empty(size(q), dtype=torch.float32, device="meta")
                    if nvme:
                        swap_list.append(single)
                    del single
                del staged
            freed = len(events)
            q.grad = None  # partition_grads: record_stream, then dropped
            record_stream_frees(freed)
        swap_list.clear()  # _swap_out_offload_fp32_gradients, then partition_grads returns
        del flat_grads
        _on_stream(events, since, SIDE_STREAM)
        reductions.append(len(released))
        ipg.update(elements=0, params=[])

    def grad_ready(q):  # reduce_independent_p_g_buckets_and_remove_grads
        if ipg["elements"] + size(q) > setup.reduce_bucket_elements and ipg["elements"] > 0:
            reduce_bucket()
        if ipg["elements"] + size(q) <= setup.reduce_bucket_elements:
            # the gradient moves into the bucket (param.grad.data = a view of it): its own block is freed, once the
            # reduce stream has copied it (record_stream)
            since = len(events)
            q.grad.data = bucket[ipg["elements"]:ipg["elements"] + size(q)].view(shapes[id(q)])
            record_stream_frees(since)
        ipg["elements"] += size(q)
        ipg["params"].append(q)

    for p in params:
        p.register_post_accumulate_grad_hook(grad_ready)
    for _ in traced_steps(events, setup.steps):
        for micro in traced_micro_batches(events, setup.grad_accum):
            state.update(boundary=micro == setup.grad_accum - 1)
            if fetcher is not None:
                fetcher.start()
            loss = micro_step()
            loss.backward()
            reduce_bucket()  # the epilogue: what is left in the bucket, then the reduce stream synchronized
            stream_done(len(released))
            reductions.clear()
            if fetcher is not None:
                fetcher.finish()
        if offload:  # the step runs on the host
            continue
        norms = [_fp64_norm(size(p)) for p in params]  # get_grad_norm_direct: each gradient partition
        total = torch.stack(norms).pow(2).sum()
        del norms, total
        first = adam is None
        adam = [] if first else adam
        for g, numel in enumerate(groups):  # one sub-group at a time
            flat_grad = torch.empty(numel, dtype=torch.bfloat16, device="meta")
            fp32_grad = flat_grad.float()
            del flat_grad
            if first:  # Adam's states at the first step
                adam.append([torch.zeros_like(masters[g]), torch.zeros_like(masters[g])])
            del fp32_grad
    events.append(("end", 0, 0))


def trace_hf_deepspeed(config: dict, *, zero_stage: int, micro_batch: int, seq_length: int, grad_accum: int = 1,
                       attn_implementation: str = "sdpa", gradient_checkpointing: bool = False,
                       checkpoint_every: int = 1, lora: Optional[dict] = None,
                       reduce_bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
                       prefetch_bucket_elements: int = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
                       persistence_threshold: int = DEEPSPEED_PERSISTENCE_THRESHOLD,
                       sub_group_elements: int = DEEPSPEED_SUB_GROUP_ELEMENTS,
                       steps: int = 6, offload_optimizer: bool = False, sdpa_kernel: str = "cudnn",
                       flatten_on_device: bool = True, side_stream_lags: bool = True,
                       overlap_comm: bool = False, offload_params: bool = False, zero_init: bool = False,
                       nvme_optimizer: bool = False) -> list:
    """The allocation events of a Hugging Face + DeepSpeed ZeRO-0 to 3 run (one GPU, bf16; ZeRO-1 to 3 also with
    ``offload_optimizer`` on the CPU, :func:`deepspeed_steps`; ZeRO-3 as :func:`deepspeed_zero3_steps` traces it) of the model
    ``config`` (a ``config.json`` dict) from building the model to its last of ``steps`` steps, then an
    ``("end", 0, 0)`` marker. ``zero_init`` (ZeRO-3): the model is built inside ``deepspeed.zero.Init``
    (:func:`zero_init_build`) rather than whole on the GPU. ``nvme_optimizer`` (ZeRO-3, with ``offload_optimizer``):
    the optimizer on NVMe, :attr:`DeepSpeedSetup.nvme_optimizer`.
    ``sdpa_kernel``: the kernel behind ``attn_implementation="sdpa"``
    (:data:`SDPA_KERNELS`; cuDNN's, as on an H200). ``lora``: peft ``LoraConfig`` keywords (only the adapters train); ``None``: a full
    fine-tune. ``checkpoint_every``: with ``gradient_checkpointing``, transformers' ``every_n_layers`` (layers 0, k,
    2k, ... checkpointed). ``reduce_bucket_elements``: DeepSpeed's ``reduce_bucket_size``; ``sub_group_elements``:
    its ``sub_group_size``. DeepSpeed's state is made
    of meta tensors with the lifetimes of
    ``deepspeed/runtime/zero/stage_1_and_2.py`` (ZeRO-1/2) and ``fp16/fused_optimizer.py`` (ZeRO-0, bf16):

    - build: each parameter is allocated on the device by ``from_config``; ZeRO-1/2 calls ``empty_cache()`` and
      flattens them into one bf16 buffer (``flatten_on_device=False``: DeepSpeed's free-memory check failed, so the
      parameters go to the host, their GPU storage is freed and the buffer made there arrives whole), ZeRO-0 flattens
      clones of them; the parameters become views of it and their own storage is freed; the fp32 master is ``flat.clone().float()``; ``initialize_optimizer_states``
      gives it a zero fp32 gradient and drops it again; ZeRO-0's ``FP16_Optimizer`` runs Adam once there,
      creating its two fp32 states, ZeRO-1/2 create them at the first step;
    - ZeRO-1/2, each micro-batch's backward: the first parameter gradient's hook (``process_gradients``) calls
      ``setup_buckets``, which allocates the ``ipg`` bucket (``reduce_bucket_size`` bf16 elements); ZeRO-2 copies
      each gradient into it as autograd makes it and frees it (``reduce_independent_p_g_buckets_and_remove_grads``;
      a gradient larger than the bucket bypasses it and is kept until the next reduction); a gradient that would
      overflow the bucket, and the end of backward, reduce it (``reduce_ipg_grads``) into ``grads_in_partition``
      (bf16, all parameters, allocated at the first reduction), and at the end the bucket is freed
      (``_release_ipg_buffers``);
    - ZeRO-1: the gradients stay in ``param.grad`` until the accumulation boundary, where the engine's
      ``reduce_gradients`` sends each, in group order, through the bucket into ``grads_in_partition`` as ZeRO-2 does
      during backward (the bucket is kept over the boundary's micro-batches);
    - ZeRO-0: the gradients stay in ``param.grad`` until the step, and are reduced at each accumulation boundary, one
      GPU included (the engine's ``allreduce_gradients`` -> ``buffered_allreduce_fallback``): in module order,
      flattened into buckets of just over :data:`ALLREDUCE_FALLBACK_ELEMENTS` elements, each copied back and freed;
    - step, ZeRO-1/2: the gradient norm for clipping casts each gradient to fp64, one at a time
      (``get_grad_norm_direct``: ``g.data.to(get_norm_dtype())``, fp64 where the device has it); then the
      gradients are flattened (bf16) and cast to an fp32 partition
      (``flat_grad_partition.to(fp32)``), the bf16 ones freed, Adam runs, the fp32 gradient is freed; ZeRO-0
      (``FP16_Optimizer.step``): each gradient cast to fp32, the copies flattened, then freed with the bf16 ones.
    """
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage}: the trace models DeepSpeed ZeRO-0 to 3")
    setup = DeepSpeedSetup(zero_stage=zero_stage, micro_batch=micro_batch, grad_accum=grad_accum,
                           seq_length=seq_length, reduce_bucket_elements=reduce_bucket_elements, steps=steps,
                           prefetch_bucket_elements=int(prefetch_bucket_elements),
                           persistence_threshold=int(persistence_threshold),
                           sub_group_elements=int(sub_group_elements),
                           offload_optimizer=bool(offload_optimizer), flatten_on_device=bool(flatten_on_device),
                           side_stream_lags=bool(side_stream_lags), overlap_comm=bool(overlap_comm),
                           offload_params=bool(offload_params), zero_init=bool(zero_init),
                           nvme_optimizer=bool(nvme_optimizer))
    if setup.zero_init and zero_stage != 3:
        raise ValueError(f"zero_init with zero_stage={zero_stage}: deepspeed.zero.Init partitions for ZeRO-3 only")
    if setup.offload_params and zero_stage != 3:
        raise ValueError(f"offload_params with zero_stage={zero_stage}: DeepSpeed offloads parameters at ZeRO-3 only")
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    hf_cfg = AutoConfig.for_model(model_type, **cfg)
    attn = attn_implementation
    events: list = []
    real_sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = sdpa_kernel_function(sdpa_kernel)
    real_softmax, F.softmax = _cuda_softmax()
    real_dropout, F.dropout = cuda_dropout()
    real_linear = F.linear
    # ZeRO-3's own linear, which saves the parameter rather than a view of its block, and its input whether or not
    # the weight trains: deepspeed.zero.Init puts it in place of F.linear for the rest of the process
    # (memory_efficient_linear, on by default: partition_parameters.py _enable_mem_efficient_linear, never undone), and
    # the engine's ZeRO-3 calls Init(module=model) on a model built outside it (parameter_offload.py
    # _convert_to_zero_parameters), so every ZeRO-3 run trains with it. A LoRA model's frozen projections then keep
    # their inputs (allocator histories of final57's two LoRA plans without checkpointing,
    # benchmarks/results/alloc_history/lora_z3_h100/: two hidden-size inputs and the down projection's input a layer
    # more than aten's linear keeps)
    if setup.zero_stage == 3:
        F.linear = _zero3_linear()
    try:
        model = None
        if setup.zero_init:  # made outside the recorder: zero_init_build records what zero.Init allocates
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=attn, dtype=torch.bfloat16)
        with _recorder(events):
            if model is None:
                with torch.device("meta"):
                    model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=attn,
                                                             dtype=torch.bfloat16)
            model.config.use_cache = False
            if gradient_checkpointing:
                enable_layer_checkpointing(model, checkpoint_every)
            if lora:  # peft adapters; only they train
                if gradient_checkpointing:
                    model.enable_input_require_grads()
                model = with_lora(model, **lora)

            def micro_step():
                x = torch.zeros(setup.micro_batch, setup.seq_length + 1, dtype=torch.long, device="meta")
                inputs = x[:, :-1]
                loss = model(input_ids=inputs, labels=inputs).loss
                del x, inputs
                return loss

            deepspeed_steps(model, micro_step, setup, events)
    finally:
        F.scaled_dot_product_attention, F.softmax, F.dropout = real_sdpa, real_softmax, real_dropout
        F.linear = real_linear
    del model
    return events


@contextlib.contextmanager
def _mcore_meta(model, plan, events: list):
    """What the megatron-core traces share: one gloo rank of megatron-core (:func:`workbench.runs.train.single_rank_megatron`,
    in a process that does not see CUDA: the CPU adapter applies), a fresh attention workspace, all-reduces over the
    one-rank groups that do nothing on meta tensors, dropout and RMSNorm as CUDA runs them (:func:`cuda_dropout`,
    :func:`cuda_rms_norm`), megatron-core's CUDA-device requests on the meta device
    (:func:`workbench.runs.cpu_adapter.meta_device`) and the recorder on. Yields the ``TransformerConfig`` arguments:
    each parameter allocated in its dtype and not initialised (on a GPU megatron-core initialises them in place; the
    CPU initialisation a process without CUDA takes makes fp32 master weights the GPU never has)."""
    import torch.distributed as dist
    import torch.nn.functional as F

    from workbench.runs import cpu_adapter
    from workbench.runs.model import transformer_config_kwargs
    from workbench.runs.train import single_rank_megatron

    single_rank_megatron(plan)
    from megatron.core import parallel_state

    # megatron-core's attention workspace is process-wide: a fresh one, so that this trace allocates its own
    parallel_state.destroy_global_memory_buffer()
    parallel_state._set_global_memory_buffer()
    real_all_reduce = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):  # one rank: the reduction is the tensor itself
        return None if tensor.device.type == "meta" else real_all_reduce(tensor, *args, **kwargs)

    real_gather_object = dist.all_gather_object

    def all_gather_object(object_list, obj, group=None):  # one rank (the optimizer's parameter-group keys); its
        object_list[0] = obj  # pickled bytes through a meta tensor cannot be read back

    config_kwargs = dict(transformer_config_kwargs(model, plan), perform_initialization=False)
    dist.all_reduce, dist.all_gather_object = all_reduce, all_gather_object
    real_dropout, F.dropout = cuda_dropout()
    real_rms_norm, F.rms_norm = cuda_rms_norm()
    try:
        with cpu_adapter.meta_device(), _recorder(events) as recorder:
            yield config_kwargs, recorder.block_of
    finally:
        dist.all_reduce, dist.all_gather_object = real_all_reduce, real_gather_object
        F.dropout, F.rms_norm = real_dropout, real_rms_norm


def _mcore_batch(net, seq_length: int, micro_batch: int):
    """``(mask, positions, tokens)``: what ``benchmarks/corpus/measure.py`` and the launcher hand megatron-core's
    ``GPTModel``, on the meta device, as a function making each micro-batch's ``seq + 1`` tokens (the mask and
    positions made once, at the first call)."""
    import torch

    from workbench.runs.model import causal_mask

    fixed = {}

    def batch():
        if not fixed:
            fixed.update(mask=causal_mask(seq_length, device="meta"),
                         pos=torch.arange(seq_length, device="meta")[None].expand(micro_batch, seq_length))
        tokens = torch.zeros(micro_batch, seq_length + 1, dtype=torch.long, device="meta")
        return tokens, fixed["pos"], fixed["mask"]

    return batch


def trace_mcore_deepspeed(model, plan, *, steps: int = 6, flatten_on_device: bool = True) -> list:
    """The allocation events of a megatron-core ``GPTModel`` (local layer spec, as the workbench's launcher builds it:
    :func:`workbench.runs.model.build_gpt`) trained under DeepSpeed ZeRO-0 to 3 on one GPU in bf16 (ZeRO-2 and 3
    also with the plan's CPU optimizer offload), from building the model to the last of ``steps`` steps
    (:func:`deepspeed_steps`), in the order ``benchmarks/corpus/measure.py``
    and the launcher run it: the model built (its parameters on the device; the norms' weights in fp32), DeepSpeed's
    engine casting the parameters to bf16 (``_cast_module_mixed_precision``: parameters only), DeepSpeed's optimizer
    state, then the causal mask and positions, and each micro-batch's ``seq + 1`` tokens, forward with the labels,
    the per-token loss's mean. The parameters are allocated in their dtype and not initialised, and torch's RMSNorm
    runs as its fused CUDA kernel (:func:`_mcore_meta`), as the recorded allocator histories show
    (``benchmarks/alloc_history.py``). megatron-core's own workspaces (the scores' global buffer, the rotary
    frequencies) go to the meta device; the cross-entropy's all-reduces over its one-rank group do nothing. Needs
    megatron-core and a process that does not see CUDA."""
    import torch

    from workbench.runs.model import build_gpt

    setup = DeepSpeedSetup(zero_stage=int(plan.zero_stage), micro_batch=plan.micro_batch_size,
                           grad_accum=plan.gradient_accumulation_steps, seq_length=model.seq_length, steps=steps,
                           flatten_on_device=flatten_on_device,
                           side_stream_lags=side_stream_lags(plan.zero_stage, optimizer_offloaded(plan),
                                                             plan.pin_memory),
                           **plan_deepspeed_settings(plan))
    events: list = []
    with _mcore_meta(model, plan, events) as (config_kwargs, block_of):
        net = _built_then_moved(lambda: build_gpt(model, plan, config_kwargs=config_kwargs), events, block_of)
        for p in net.parameters():  # DeepSpeed's engine: parameters to bf16, buffers kept
            if p.dtype != torch.bfloat16:
                p.data = p.data.to(torch.bfloat16)
        batch = _mcore_batch(net, model.seq_length, plan.micro_batch_size)  # made after deepspeed.initialize

        def micro_step():
            tokens, pos, mask = batch()
            return net(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()

        deepspeed_steps(net, micro_step, setup, events)
    del net
    return events


def _built_then_moved(build, events: list, block_of):
    """The megatron-core model of ``build()`` (built on the meta device) with its allocation events in the order
    ``benchmarks/corpus/measure.py`` and the launcher make them: the layers megatron-core places themselves (its
    tensor-parallel weights, on ``torch.cuda.current_device()``, in bf16) allocated as they are built; the plain torch
    modules' fp32 parameters (a learned position embedding, the norms) made on the host and moved by
    ``model.to(device)`` after the whole model is built, in ``Module._apply``'s order (:func:`_apply_order`): a
    recorded history shows an 8k-token model's 48 MiB position table allocated after every layer, not beside the word
    embedding."""
    import torch

    built = len(events)
    with torch.device("meta"):
        net = build()
    # ``block_of``: the events' number of a parameter's block (:func:`_recorder`)
    order = {block_of(p): i for i, p in enumerate(p for p in _apply_order(net)
                                                  if p is not None and p.dtype != torch.bfloat16)}
    order.pop(None, None)
    moved = [e for e in events[built:] if e[0] == "malloc" and e[1] in order]
    events[built:] = [e for e in events[built:] if not (e[0] == "malloc" and e[1] in order)]
    events.extend(sorted(moved, key=lambda e: order[e[1]]))
    return net


def _apply_order(module):
    """The parameters of ``module`` in the order ``Module._apply`` (``.to``, ``.bfloat16``) visits them: each child's
    first, then the module's own."""
    for child in module.children():
        yield from _apply_order(child)
    yield from module._parameters.values()


def trace_mcore_ddp(model, plan, *, steps: int = 6) -> list:
    """:func:`_trace_mcore_ddp` with a step's repeating middle micro-batches copied (megatron-core's schedule then
    runs :data:`SCHEDULED_MICRO_BATCHES` of them, the loss divided by that count: a scalar), or, where they do not
    repeat, with every micro-batch run; the same events either way (:data:`REPEAT_SETTLED_STEPS` off: every one
    run)."""
    try:
        return _trace_mcore_ddp(model, plan, steps=steps, copy_micro_batches=REPEAT_SETTLED_STEPS)
    except _MicroBatchesDiffer:
        return _trace_mcore_ddp(model, plan, steps=steps, copy_micro_batches=False)


def _trace_mcore_ddp(model, plan, *, steps: int = 6, copy_micro_batches: bool = True) -> list:
    """The allocation events of a megatron-core ``GPTModel`` (local layer spec, :func:`workbench.runs.model.build_gpt`)
    trained by megatron-core itself on one GPU in bf16 — ``DistributedDataParallel`` (``grad_reduce_in_fp32``, no
    overlapped reduction), ``get_megatron_optimizer`` (Adam, ``clip_grad`` 1.0, the distributed optimizer as the plan
    says) and the no-pipelining schedule, as ``benchmarks/corpus/measure.py`` (``mcore_ddp``) runs them — from
    building the model to the last of ``steps`` steps, then ``("end", 0, 0)``. megatron-core's own DDP, optimizer and
    schedule run on the meta device (:func:`_mcore_meta`); what differs from CUDA is set as CUDA runs it:

    - build: megatron-core's layers allocate their bf16 parameters on the device; the torch modules among them (the
      norms, the learned position embedding) are made on the host in fp32, moved to the device by ``model.to``
      (``measure.py``'s ``model = model.to(dev)``) and cast to bf16 by ``Float16Module`` (``module.bfloat16()``): their
      allocations are moved from the build to after it;
    - DDP: the contiguous bf16 parameter buffer and fp32 gradient buffer (``param_and_grad_buffer.py``), the
      parameters copied in and their own storage freed; the optimizer: fp32 main parameters (the distributed
      optimizer's shards through a bf16 clone, ``_build_model_and_main_param_groups``; the plain one's
      ``param.detach().clone().float()``), Adam's two fp32 states at the first step;
    - Adam is torch's ``AdamW`` (megatron-core's fallback without Apex or Transformer Engine) with ``foreach`` unset,
      which CUDA resolves to the multi-tensor implementation (``_multi_tensor_adam``: the square roots of the second
      moments as temporaries) and the meta device to the single-tensor one: the trace sets ``foreach=True``;
    - the gradient clipping scales each gradient through a temporary (``local_multi_tensor_scale``:
      ``dst.copy_(src * scale)``, megatron-core's fallback without Apex), where the CPU adapter scales in place; the
      norm (``local_multi_tensor_l2_norm``: a 0-d norm per gradient) is data the meta device does not have, a fake
      scalar of 1, so the trace clips at every step, where the recorded runs clip while the norm is above 1 (the
      first two to six of their six steps): transient blocks that moved none of their peaks;
    - each step: ``zero_grad_buffer``, the micro-batches' forward and backward through megatron-core's schedule
      (``forward_step_calc_loss`` divides the loss by the micro-batch count), the gradients' all-reduce over one rank
      (nothing), the clipping, Adam, and the copy back into the bf16 parameters (in place).

    Left out, all small-pool blocks: the pickled parameter-group keys ``get_megatron_optimizer`` all-gathers (one
    rank: the key itself here) and the CUDA reduction workspaces (up to a few KiB) of the per-gradient norms.
    Needs megatron-core (0.16.1 here; the corpus's GPU ran 0.19.2, whose DDP, optimizer and schedule allocate the
    same large blocks in the same order: the six recorded histories, ``benchmarks/alloc_history.py``, replay to
    their measured peaks within 0.04 %) and a process that does not see CUDA."""
    import torch

    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import param_and_grad_buffer as buffers
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer import clip_grads
    from megatron.core.optimizer import optimizer as mcore_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.module import Float16Module

    from workbench.runs.model import build_gpt

    if str(plan.precision) != "bf16":
        raise ValueError(f"precision={plan.precision}: the trace models megatron-core's bf16 training")
    distopt = bool(plan.distributed_optimizer)
    s, b, gas = model.seq_length, plan.micro_batch_size, plan.gradient_accumulation_steps
    events: list = []

    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
        # megatron/core/optimizer/clip_grads.py clip_grad_by_total_norm_fp32 without Apex: local_multi_tensor_scale
        # (megatron/core/utils.py), dst.copy_(src * scale) per gradient
        attr = "decoupled_grad" if use_decoupled_grad else "grad"
        grads = [getattr(p, attr) for p in parameters if getattr(p, attr, None) is not None]
        if max_norm / (total_norm + 1.0e-6) < 1.0:
            for g in grads:
                g.copy_(g * (max_norm / (total_norm + 1.0e-6)))

    # one rank: the buffers' reduce-scatter / all-gather (and their coalescing) are the data itself; the c10d ops
    # have no meta kernels
    collectives = dict(_coalescing_manager=lambda *a, **k: contextlib.nullcontext(),
                       dist_reduce_scatter_func=lambda *a, **k: None, dist_all_gather_func=lambda *a, **k: None)

    def l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
        # megatron/core/utils.py local_multi_tensor_l2_norm: a 0-d norm per tensor on the device, their norm on the
        # host (torch.tensor(l2): not a meta operation), the total back on the device
        l2 = [torch.norm(t) for tensor_list in tensor_lists for t in tensor_list]
        total = torch.ones(1, dtype=torch.float, device="meta")
        del l2
        return total, None

    with _mcore_meta(model, plan, events) as (config_kwargs, block_of):
        real_clip = mcore_optimizer.clip_grad_by_total_norm_fp32
        real_l2_norm = clip_grads.l2_norm_impl
        clip_grads.l2_norm_impl = l2_norm
        real_collectives = {name: getattr(buffers, name) for name in collectives}
        mcore_optimizer.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32
        for name, fn in collectives.items():
            setattr(buffers, name, fn)
        try:
            # the torch modules' fp32 parameters are made on the host: on the device from model.to(dev)
            net = _built_then_moved(lambda: build_gpt(model, plan, config_kwargs=config_kwargs), events, block_of)
            config = net.config
            net = Float16Module(config, net)  # module.bfloat16(): the fp32 parameters cast, their storage freed
            ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                       use_distributed_optimizer=distopt)
            ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=net)
            optimizer = get_megatron_optimizer(OptimizerConfig(
                optimizer="adam", lr=1e-4, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8,
                clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16, use_distributed_optimizer=distopt), [ddp])
            for part in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
                for group in part.optimizer.param_groups:  # what CUDA resolves foreach=None to
                    group["foreach"] = True
            config.finalize_model_grads_func = finalize_model_grads
            forward_backward = get_forward_backward_func()
            batch = _mcore_batch(net, s, b)
            batch()  # measure.py makes the mask and positions after the optimizer

            # the schedule's micro-batches: all of them, or three and the boundary with the middle ones copied from
            # the third where they repeat (raising _MicroBatchesDiffer where they do not)
            scheduled = SCHEDULED_MICRO_BATCHES if copy_micro_batches and gas > SCHEDULED_MICRO_BATCHES else gas

            def batches():
                starts = []  # each micro-batch's first event: megatron-core asks for its data first
                for i in range(scheduled):
                    if i == SCHEDULED_MICRO_BATCHES - 1 and scheduled < gas and not _copied_middle(
                            events, starts, gas - SCHEDULED_MICRO_BATCHES):
                        raise _MicroBatchesDiffer(f"{model.name}: micro-batch 3 of {gas} differs from micro-batch 2")
                    starts.append(len(events))
                    yield batch()[0]

            def forward_step(it, m):
                tokens = next(it)
                _, pos, mask = batch()
                out = m(tokens[:, :-1], pos, mask, labels=tokens[:, 1:])

                def loss_func(output):
                    loss = output.float().mean()
                    return loss, {"lm loss": loss.detach().clone()}

                return out, loss_func

            for _ in traced_steps(events, steps):
                ddp.zero_grad_buffer()
                optimizer.zero_grad()
                reduced = forward_backward(forward_step_func=forward_step, data_iterator=batches(), model=ddp,
                                           num_microbatches=scheduled, seq_length=s, micro_batch_size=b,
                                           decoder_seq_length=s, forward_only=False)
                optimizer.step()
                del reduced
            events.append(("end", 0, 0))
        finally:
            mcore_optimizer.clip_grad_by_total_norm_fp32, clip_grads.l2_norm_impl = real_clip, real_l2_norm
            for name, fn in real_collectives.items():
                setattr(buffers, name, fn)
    del net, ddp, optimizer
    return events


def trace_mcore(model, plan, *, steps: int = 6, flatten_on_device: bool = True) -> list:
    """The megatron-core trace of a plan: megatron-core's own DDP and optimizer for ``engine='megatron'``
    (:func:`trace_mcore_ddp`), else DeepSpeed's (:func:`trace_mcore_deepspeed`, its parameters flattened on the GPU
    or, ``flatten_on_device=False``, on the CPU)."""
    if str(plan.engine) == "megatron":
        return trace_mcore_ddp(model, plan, steps=steps)
    return trace_mcore_deepspeed(model, plan, steps=steps, flatten_on_device=flatten_on_device)


def replay(events: list, capacity_bytes: Optional[int] = None, *, expandable: bool = False) -> CachingAllocator:
    """The caching allocator after ``events`` (``trace_*``'s ``(kind, key, bytes)``); its peaks count from the
    first event, as the corpus's counters count from the start of a run. ``capacity_bytes``: what the allocator may
    reserve (default an H200 less DeepSpeed's 2.04 GiB outside the allocator,
    :data:`workbench.memory.OUTSIDE_ALLOCATOR_BYTES`). ``expandable``: PyTorch's expandable segments
    (:class:`ExpandableAllocator`)."""
    if capacity_bytes is None:
        from workbench.memory import OUTSIDE_ALLOCATOR_BYTES

        capacity_bytes = H200_BYTES - OUTSIDE_ALLOCATOR_BYTES["deepspeed"]
    alloc = (ExpandableAllocator if expandable else CachingAllocator)(capacity_bytes=int(capacity_bytes))
    handles = {}
    for kind, key, size, *stream in events:  # a fourth field: the request's stream
        if kind == "end":
            break
        if kind == "empty_cache":
            alloc.empty_cache()
        elif kind == "flatten":
            alloc.flatten_checks.append((alloc.reserved_bytes, size))
        elif kind == "malloc":
            handles[key] = alloc.malloc(size, *stream)
        elif kind == "release":  # freed by the program, still in use on another stream
            if key in handles:
                alloc.release(handles[key])
        elif key in handles:
            alloc.free(handles.pop(key))
    return alloc


# ================================================================================================================
# The estimator's entry: a plan's replayed peaks
# ================================================================================================================
@dataclass(frozen=True)
class ReplayedPeaks:
    """What ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` read over one replayed trace
    (:func:`replay`): from building the model through its last traced step, DeepSpeed's initialization (the flat
    16-bit buffer beside the parameters it is made from) included."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int

    @property
    def reserve_fraction(self) -> float:
        """The reserve above the replay's own allocated peak, ``peak reserved / peak allocated − 1``."""
        return self.peak_reserved_bytes / self.peak_allocated_bytes - 1.0

    @classmethod
    def of(cls, alloc: "CachingAllocator") -> "ReplayedPeaks":
        return cls(peak_allocated_bytes=int(alloc.peak_allocated_bytes), peak_reserved_bytes=int(alloc.peak_reserved_bytes))


REPLAY_STUDY = dict(test_runs=730, replayed=(0.000, 0.113), constant=(0.053, 0.365))
"""The estimate's whole-device error (median |error|, worst) on the corpus's in-scope one-GPU runs of the test split
(transformers and megatron-core models under DeepSpeed ZeRO-0 to 3, ZeRO-1 to 3 with CPU offload, megatron-core's
own DDP),
with the allocator replayed (its stack's memory outside the allocator,
:data:`workbench.memory.STACK_OUTSIDE_ALLOCATOR_BYTES`, + the replay's own peak reserved) and with the engine's
constant reserve (``benchmarks/alloc_sim.py``, ``benchmarks/results/alloc_sim_h200.txt``, H200, rerun 2026-12-07 with
dropout's mask taken first, 9c225fe): what the advisor quotes when it names the replay."""

SCOPE = ("--simulate-allocator covers DeepSpeed on one GPU, ZeRO 0-2 with or without overlap_comm and ZeRO-3 with it "
         "(ZeRO-1 to 3 also with the optimizer offloaded to the CPU, ZeRO-3 then without gradient accumulation; "
         "ZeRO-3 also with its parameters offloaded to the CPU), "
         "for Hugging Face models and megatron-core "
         "models with unfused attention (the local layer spec the launcher trains), and megatron-core's own DDP and "
         "optimizer (plain or distributed) on one GPU for those megatron-core models")
"""The opening of every refusal of :func:`check_scope`."""


def is_megatron(model) -> bool:
    """Whether the replay traces ``model`` as a megatron-core ``GPTModel`` (:func:`trace_mcore_deepspeed`,
    :func:`trace_mcore_ddp`) rather than a transformers model built from its config (:func:`trace_hf_deepspeed`)."""
    return str(model.implementation) == "megatron"


def replay_capacity_bytes(model, cluster, plan) -> int:
    """What the caching allocator may reserve in a replay of ``plan``: the GPU's memory less the memory its stack
    holds outside the allocator (:func:`workbench.memory.stack_outside_bytes`, the figure the replayed estimate adds
    to the replay's peak reserved), so that the replay's out-of-memory point and DeepSpeed's free-memory check at
    its flatten see the device the estimate's whole-device figure is measured against."""
    from workbench.memory import stack_outside_bytes

    return int(cluster.gpu.memory_bytes - stack_outside_bytes(model, plan))


def check_scope(model, plan) -> None:
    """``ValueError`` naming why a plan is outside what the replay models (:func:`scope_problems`), opening with
    :data:`SCOPE`."""
    why = scope_problems(model, plan)
    if why:
        raise ValueError(f"{SCOPE}; this plan has {', '.join(why)}")


def scope_problems(model, plan) -> list:
    """What puts a plan outside what the replay models, one phrase each (empty: in scope): on one GPU, in bf16, with
    the default allocator or expandable segments and no parameter offload but ZeRO-3's to the CPU or NVMe, either
    DeepSpeed ZeRO-0 to 3 (no optimizer offload but ZeRO-1's, ZeRO-2's and ZeRO-3's to the CPU or NVMe, ZeRO-3's
    without gradient accumulation; ZeRO-1/2 with or without ``overlap_comm`` (off is DeepSpeed's own default, on the
    workbench export's), with or without the offload; ZeRO-3 with it, its default) of a transformers model
    (``implementation='transformers'``, LoRA included) or a dense megatron-core model with unfused attention
    (the local layer spec the workbench's launcher trains; no LoRA), or
    megatron-core's own DDP and optimizer (``engine='megatron'``, plain or distributed optimizer, torch's Adam, main
    gradients in fp32, no model parallelism, no optimizer offload, no LoRA) of such a megatron-core model — the runs
    the study compared with measurements."""
    why = []
    engine = str(plan.engine)
    if is_megatron(model):
        if str(model.attention) != "unfused":
            why.append(f"attention={model.attention} on a megatron-core model (the trace builds the local layer "
                       f"spec, whose attention is unfused)")
        if model.is_moe:
            why.append(f"num_experts={model.num_experts} (the megatron-core trace builds dense models)")
        if plan.zero_init:
            why.append("zero_init=True on a megatron-core model (its trace builds the model on the GPU, as the "
                       "workbench's launcher does)")
        if plan.lora_rank and engine != "megatron":  # (engine=megatron's own refusal below names it)
            why.append(f"lora_rank={plan.lora_rank} on a megatron-core model (its trace trains every parameter)")
    offload = str(plan.offload_optimizer)
    if engine == "megatron":
        if not is_megatron(model):
            why.append(f"engine=megatron with implementation={model.implementation} (megatron-core's DDP is traced "
                       f"for megatron-core models)")
        for name in ("tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel",
                     "expert_parallel"):
            if getattr(plan, name) != 1:
                why.append(f"{name}={getattr(plan, name)} (the megatron-core trace runs one rank, no model "
                           f"parallelism)")
        if offload != "none":
            why.append(f"offload_optimizer={offload} with engine=megatron")
        if plan.lora_rank:
            why.append(f"lora_rank={plan.lora_rank} with engine=megatron (the trace trains every parameter)")
        if plan.grad_reduce_fp32 is False:
            why.append("grad_reduce_fp32=False (the trace keeps fp32 main gradients, as the launcher runs "
                       "megatron-core's DDP)")
        if str(plan.adam) != "torch":
            why.append(f"adam={plan.adam} with engine=megatron (the trace runs torch's AdamW, megatron-core's "
                       f"optimizer without Apex or Transformer Engine: --adam torch, ParallelPlan(adam='torch'))")
    elif engine != "deepspeed":
        why.append(f"engine={plan.engine}")
    else:
        zero = int(plan.zero_stage)
        # (the optimizer on NVMe: CPU offload's GPU side with ZeRO-3's swap list, DeepSpeedSetup.nvme_optimizer;
        # below ZeRO-3 DeepSpeed runs device nvme as the CPU)
        if offload != "none" and zero < 1:
            why.append(f"offload_optimizer={offload} with zero_stage={zero} (the trace offloads at ZeRO-1 to 3)")
        elif offload != "none" and zero == 3 and plan.gradient_accumulation_steps != 1:
            why.append(f"offload_optimizer={offload} with zero_stage=3, gradient_accumulation_steps="
                       f"{plan.gradient_accumulation_steps} (ZeRO-3's offload is traced without accumulation: a "
                       f"checkpointed run with it traced 8 % over)")
        if zero == 3 and not plan.overlaps_comm:
            why.append("overlap_comm=False at ZeRO-3 (the trace reduces on ZeRO-3's side stream, DeepSpeed's default: "
                       "--overlap-comm, ParallelPlan(overlap_comm=True))")
    if str(plan.offload_params) != "none" and not (engine == "deepspeed" and int(plan.zero_stage) == 3):
        why.append(f"offload_params={plan.offload_params} at zero_stage={plan.zero_stage} (the trace offloads "
                   f"parameters to the CPU or NVMe at ZeRO-3)")
    if plan.world_size != 1:
        why.append(f"world_size={plan.world_size} (the replay traces one GPU)")
    if str(plan.precision) != "bf16":
        why.append(f"precision={plan.precision} (the trace is bf16)")
    return why


NOT_TRACED_FIELDS = ("name", "seq_length", "attention")
"""ModelSpec fields a transformers model may change from its imported config's spec and still be replayed: the trace
takes the sequence and the attention kernel from the model, everything else from the config."""


def check_config_model(model, config_spec) -> None:
    """``ValueError`` when ``model`` differs from ``config_spec`` (the spec :func:`workbench.hf.import_hf` makes of
    the config the replay would build) outside :data:`NOT_TRACED_FIELDS`, naming the fields as
    ``name=value (config: value)``: the replay builds the config's model, so a spec changed in any of them is not what
    it would trace."""
    from dataclasses import fields

    changed = [f"{f.name}={getattr(model, f.name)} (config: {getattr(config_spec, f.name)})" for f in fields(model)
               if f.name not in NOT_TRACED_FIELDS and getattr(model, f.name) != getattr(config_spec, f.name)]
    if changed:
        raise ValueError(f"the model was changed since its config.json was imported ({', '.join(changed[:4])}): the "
                         f"replay builds the model from that config; import the changed config.json to replay this one")


def missing_libraries(model, plan) -> list:
    """The Python packages a replay of ``plan`` for ``model`` imports that this environment lacks: torch, and
    megatron-core for a megatron-core model or transformers (and peft for LoRA) for a transformers model."""
    from importlib.util import find_spec

    wanted = ["torch"] + (["megatron.core"] if is_megatron(model) else
                          ["transformers"] + (["peft"] if plan.lora_rank else []))
    missing = []
    for name in wanted:
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing or broken
            found = False
        if not found:
            missing.append("megatron-core" if name == "megatron.core" else name)
    return missing


def replay_failure(exc: BaseException) -> str:
    """Why a replay that raised was skipped, in one phrase (the trace runs transformers' or megatron-core's own code,
    which may refuse a model the specs accept): ``the replay failed (TypeName: first line)``."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"the replay failed ({exc.__class__.__name__}: {text})"


def auto_replay_skipped(model, plan, has_config: bool) -> Optional[str]:
    """Why ``workbench estimate`` does not replay the allocator for this plan on its own (``None``: it does): outside
    the scope (:func:`scope_problems`), a transformers model without the config.json to build it from
    (``has_config``), or a library the trace imports missing (:func:`missing_libraries`). The library's
    :func:`workbench.estimate.estimate` replays only when asked (``simulate_allocator=``)."""
    why = scope_problems(model, plan)
    if why:
        return "outside the replay's scope: " + ", ".join(why)
    if not is_megatron(model) and not has_config:
        return (f"transformers model {model.name} was not imported from a config.json (--model hf:PATH), which the "
                f"replay builds")
    missing = missing_libraries(model, plan)
    if missing:
        return f"the trace needs {', '.join(missing)}, not importable here"
    return None


def trace_attn_implementation(attention) -> str:
    """The ``attn_implementation`` the trace builds for a :class:`workbench.specs.AttentionImpl`: ``eager`` for
    ``unfused``, else ``sdpa`` (traced as cuDNN's attention kernel, :func:`_cudnn_sdpa`, which is what sdpa runs for
    bf16 causal attention on an H200)."""
    return "eager" if str(attention) == "unfused" else "sdpa"


def replayed_reserve_fraction(config: dict, **kwargs) -> float:
    """The caching allocator's reserve (``peak reserved / peak allocated − 1``) of :func:`replayed_peaks` (the same
    arguments)."""
    return replayed_peaks(config, **kwargs).reserve_fraction


def replayed_peaks(config: dict, *, seq_length: int, micro_batch: int, zero_stage: int,
                   grad_accum: int = 1, attn_implementation: str = "sdpa",
                   gradient_checkpointing: bool = False, checkpoint_every: int = 1, lora_rank: int = 0,
                   lora_targets=(),
                   lora_dropout: float = 0.0, capacity_bytes: Optional[int] = None,
                   steps: int = 6, offload_optimizer: bool = False,
                   sdpa_kernel: str = "cudnn", overlap_comm: bool = False,
                   offload_params: bool = False, zero_init: bool = False,
                   reduce_bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
                   prefetch_bucket_elements: int = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
                   persistence_threshold: int = DEEPSPEED_PERSISTENCE_THRESHOLD,
                   sub_group_elements: int = DEEPSPEED_SUB_GROUP_ELEMENTS,
                   expandable_segments: bool = False, pin_memory: bool = True,
                   nvme_optimizer: bool = False) -> ReplayedPeaks:
    """The caching allocator's peaks (:class:`ReplayedPeaks`) replayed over the trace of building the model
    ``config`` (a Hugging Face ``config.json`` dict) and ``steps`` training steps under DeepSpeed
    ZeRO-``zero_stage`` (0-2) on one GPU (:func:`trace_hf_deepspeed`, :func:`replay`). LoRA: adapters of rank
    ``lora_rank`` on the workbench projection names ``lora_targets`` (peft names from
    :func:`workbench.hf.lora_target_modules`), alpha 2r as the corpus ran them (alpha changes no size).
    ``capacity_bytes``: what the allocator may reserve (default an H200 less DeepSpeed's memory outside it); a
    trace that would pass it is replayed without the limit (the estimate then says the plan does not fit).
    ``expandable_segments``: the allocator with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
    ``pin_memory``: DeepSpeed's offload buffers page-locked (:func:`side_stream_lags`). ``nvme_optimizer``: ZeRO-3
    with the optimizer on NVMe (with ``offload_optimizer``, :attr:`DeepSpeedSetup.nvme_optimizer`)."""
    from workbench.hf import lora_target_modules

    if not isinstance(config, dict) or "model_type" not in config:
        raise ValueError("config must be a Hugging Face config.json dict with a 'model_type' field")
    for name, value in (("seq_length", seq_length), ("micro_batch", micro_batch), ("grad_accum", grad_accum),
                        ("steps", steps)):
        if int(value) < 1:
            raise ValueError(f"{name}={value} must be at least 1")
    lora = None
    if lora_rank:
        lora = dict(r=int(lora_rank), lora_alpha=2 * int(lora_rank), lora_dropout=float(lora_dropout),
                    target_modules=lora_target_modules(config["model_type"], lora_targets), task_type="CAUSAL_LM")
    def trace(flatten_on_device):
        return trace_hf_deepspeed(config, zero_stage=int(zero_stage), micro_batch=int(micro_batch),
                                  seq_length=int(seq_length), grad_accum=int(grad_accum),
                                  attn_implementation=attn_implementation,
                                  gradient_checkpointing=bool(gradient_checkpointing),
                                  checkpoint_every=int(checkpoint_every), lora=lora, steps=int(steps),
                                  offload_optimizer=bool(offload_optimizer), sdpa_kernel=sdpa_kernel,
                                  flatten_on_device=flatten_on_device, overlap_comm=bool(overlap_comm),
                                  offload_params=bool(offload_params), zero_init=bool(zero_init),
                                  reduce_bucket_elements=int(reduce_bucket_elements),
                                  prefetch_bucket_elements=int(prefetch_bucket_elements),
                                  persistence_threshold=int(persistence_threshold),
                                  sub_group_elements=int(sub_group_elements),
                                  side_stream_lags=side_stream_lags(zero_stage, offload_optimizer, pin_memory),
                                  nvme_optimizer=bool(nvme_optimizer))

    return ReplayedPeaks.of(replay_deepspeed(trace, capacity_bytes, expandable=bool(expandable_segments)))


def _replay_within(events: list, capacity_bytes: Optional[int], expandable: bool = False) -> "CachingAllocator":
    """:func:`replay` of ``events`` on ``capacity_bytes``; a trace that would pass it is replayed without the limit
    (the estimate then says the plan does not fit)."""
    try:
        return replay(events, capacity_bytes, expandable=expandable)
    except MemoryError:
        return replay(events, capacity_bytes=1 << 62, expandable=expandable)


def flattens_on_device(alloc: "CachingAllocator", capacity_bytes: int) -> bool:
    """Whether DeepSpeed ZeRO-1/2 found room for every flat buffer on the GPU at its checks (``available_memory()``,
    NVML's free memory: the device less the memory outside the allocator and what is reserved then, after
    ``empty_cache()``) — ``capacity_bytes`` being the device less the memory outside the allocator."""
    return all(capacity_bytes - reserved >= flat for reserved, flat in alloc.flatten_checks)


def replay_deepspeed(trace, capacity_bytes: Optional[int], *, expandable: bool = False) -> "CachingAllocator":
    """A DeepSpeed run replayed as its engine would run it on a device whose allocator may reserve
    ``capacity_bytes`` (``None``: an H200's): ``trace(flatten_on_device)`` gives its events; traced with the flat
    buffer made on the GPU first, and again with it made on the CPU where the replay shows DeepSpeed's free-memory
    check would not pass (a smaller GPU: the initialization's two copies of the parameters then never meet on it).
    ``expandable``: replayed with PyTorch's expandable segments (:class:`ExpandableAllocator`)."""
    if capacity_bytes is None:
        from workbench.memory import OUTSIDE_ALLOCATOR_BYTES

        capacity_bytes = H200_BYTES - OUTSIDE_ALLOCATOR_BYTES["deepspeed"]
    alloc = _replay_within(trace(True), capacity_bytes, expandable)
    if flattens_on_device(alloc, capacity_bytes):
        return alloc
    return _replay_within(trace(False), capacity_bytes, expandable)


def plan_reserve_fraction(model, cluster, plan, config: Optional[dict] = None, *, scope_checked: bool = False) -> float:
    """The reserve above the replay's own allocated peak of :func:`plan_replayed_peaks` (the same arguments)."""
    return plan_replayed_peaks(model, cluster, plan, config, scope_checked=scope_checked).reserve_fraction


def plan_replayed_peaks(model, cluster, plan, config: Optional[dict] = None, *,
                        scope_checked: bool = False) -> ReplayedPeaks:
    """The replayed peaks of a plan (checked by :func:`check_scope`); the allocator may reserve the GPU less its
    stack's memory outside it (:func:`replay_capacity_bytes`). A transformers model is rebuilt from ``config`` (its
    Hugging Face ``config.json`` dict; :func:`replayed_peaks` with the plan's sequence, micro-batch, accumulation,
    attention, ZeRO stage, LoRA and gradient checkpointing, ``recompute='full'``); a megatron-core model from its
    specs, in a child process (:func:`mcore_replays`), and a ``config`` given for it is refused rather than ignored.
    ``scope_checked``: the caller has already run :func:`check_scope` on this very model and plan (``estimate``,
    which checks before it reads what to trace from), so that one estimate checks its plan once."""
    if not scope_checked:
        check_scope(model, plan)
    capacity = replay_capacity_bytes(model, cluster, plan)
    if is_megatron(model):
        if config is not None:
            raise ValueError(f"model {model.name} is a megatron-core model, traced from its specs: it takes no "
                             f"Hugging Face config")
        (out,) = _run_mcore_jobs([_mcore_job(model, cluster, plan, capacity_bytes=capacity, steps=6)])
        if "error" in out:
            raise RuntimeError(f"the megatron-core allocation trace of {model.name} failed: {out['error']}")
        return ReplayedPeaks(peak_allocated_bytes=int(out["peak_allocated_bytes"]),
                             peak_reserved_bytes=int(out["peak_reserved_bytes"]))
    if config is None:
        raise ValueError(f"model {model.name} is a transformers model: give its Hugging Face config (an HFModel from "
                         f"workbench.hf.import_hf, the config.json dict or its path) to trace")
    return replayed_peaks(
        config, seq_length=model.seq_length, micro_batch=plan.micro_batch_size, zero_stage=int(plan.zero_stage),
        grad_accum=plan.gradient_accumulation_steps, attn_implementation=trace_attn_implementation(model.attention),
        gradient_checkpointing=str(plan.recompute) == "full",
        checkpoint_every=hf_checkpoint_every(model.num_layers, plan.recompute_layers, name=model.name),
        lora_rank=plan.lora_rank,
        lora_targets=plan.lora_targets, lora_dropout=plan.lora_dropout, capacity_bytes=capacity,
        zero_init=builds_in_zero_init(model, plan), expandable_segments=bool(plan.expandable_segments),
        pin_memory=bool(plan.pin_memory), **plan_deepspeed_settings(plan))


# ================================================================================================================
# megatron-core traces in a child process
# ================================================================================================================
MCORE_TRACE_TIMEOUT_S = 1800
"""Longest a child process of :func:`mcore_replays` may run (about 1-6 s a plan on two CPU cores)."""


def mcore_replays(jobs: list, *, capacity_bytes: Optional[int] = None, steps: int = 6) -> list:
    """Each job ``(model, cluster, plan)`` (megatron-core models, :func:`check_scope`'s scope) traced
    (:func:`trace_mcore`) and replayed (:func:`replay`) in one child Python process that does not see
    CUDA, so that megatron-core's process-wide state (its gloo group, parallel state, the CPU adapter) stays out of
    the caller. Returns per job ``{reserve_fraction, peak_allocated_bytes, peak_reserved_bytes}``, or ``{error}``
    when that job's trace failed. ``capacity_bytes``: what the allocator may reserve (default each job's GPU less
    its stack's memory outside the allocator, :func:`replay_capacity_bytes`); a trace that would pass it is
    replayed without the limit."""
    return _run_mcore_jobs(_checked_mcore_jobs(jobs, "mcore_replays", capacity_bytes=capacity_bytes, steps=steps))


def mcore_traces(jobs: list, *, steps: int = 6) -> list:
    """Each job ``(model, cluster, plan)`` (as :func:`mcore_replays` takes them) traced
    (:func:`trace_mcore`) in the same kind of child process, not replayed: per job its events as
    ``(kind, key, bytes)`` with the storage keys as strings, or ``{error}`` when that job's trace failed."""
    out = _run_mcore_jobs(_checked_mcore_jobs(jobs, "mcore_traces", capacity_bytes=None, steps=steps, events=True))
    return [[tuple(e) for e in o["events"]] if "events" in o else o for o in out]


def _checked_mcore_jobs(jobs: list, caller: str, **job) -> list:
    """:func:`_mcore_job` of each ``(model, cluster, plan)`` after :func:`check_scope`; a model that is not
    megatron-core's is refused naming ``caller``."""
    payload = []
    for model, cluster, plan in jobs:
        check_scope(model, plan)
        if not is_megatron(model):
            raise ValueError(f"model {model.name} is a {model.implementation} model; {caller} traces "
                             f"megatron-core models")
        payload.append(_mcore_job(model, cluster, plan, **job))
    return payload


def _mcore_job(model, cluster, plan, *, capacity_bytes: Optional[int], steps: int, events: bool = False) -> dict:
    """One job of the child process of :func:`mcore_replays` as JSON-ready data, for a megatron-core model and a plan
    already checked: the specs, what the allocator may reserve (``None``: :func:`replay_capacity_bytes`, the job's GPU
    less its stack's memory outside the allocator), the number of steps, and whether the trace's events come back
    instead of its replay."""
    from workbench.runs.specio import specs_to_dict

    cap = capacity_bytes if capacity_bytes is not None else replay_capacity_bytes(model, cluster, plan)
    return dict(specs=specs_to_dict(model, cluster, plan), capacity_bytes=int(cap), steps=int(steps),
                events=bool(events), repeat_settled_steps=bool(REPEAT_SETTLED_STEPS))


def _run_mcore_jobs(payload: list) -> list:
    """The jobs of :func:`_mcore_job` traced and replayed in one child process (:func:`_replay_jobs`), without
    checking them again: :func:`mcore_replays` and :func:`plan_reserve_fraction` have checked their scope."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    if not payload:
        return []
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        given, result = Path(tmp) / "jobs.json", Path(tmp) / "replays.json"
        given.write_text(json.dumps(payload))
        proc = subprocess.run([sys.executable, "-m", "workbench.allocsim", str(given), str(result)], env=env,
                              capture_output=True, text=True, timeout=MCORE_TRACE_TIMEOUT_S)
        if proc.returncode != 0 or not result.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"the megatron-core allocation trace stopped (exit code {proc.returncode}): {last}")
        return json.loads(result.read_text())


def _replay_jobs(given: str, result: str) -> int:
    """The child process of :func:`mcore_replays` and :func:`mcore_traces`: the jobs in the JSON file ``given``,
    their replays (or their events, for a job that asks for them) written to ``result``."""
    import json
    import traceback

    from workbench.runs.specio import specs_from_dict

    global REPEAT_SETTLED_STEPS
    out = []
    for job in json.loads(open(given).read()):
        REPEAT_SETTLED_STEPS = bool(job.get("repeat_settled_steps", True))  # the parent's setting
        try:
            model, _cluster, plan = specs_from_dict(job["specs"])
            if job.get("events"):
                events = trace_mcore(model, plan, steps=job["steps"])
                out.append(dict(events=[[kind, str(key), int(size), *stream] for kind, key, size, *stream in events]))
                continue
            alloc = replay_deepspeed(lambda on_device: trace_mcore(model, plan, steps=job["steps"],
                                                                   flatten_on_device=on_device),
                                     job["capacity_bytes"], expandable=bool(plan.expandable_segments))
            out.append(dict(reserve_fraction=alloc.reserve_fraction, peak_allocated_bytes=alloc.peak_allocated_bytes,
                            peak_reserved_bytes=alloc.peak_reserved_bytes))
        except Exception as exc:  # one plan's failure is reported in its place, the others still run
            out.append(dict(error=f"{type(exc).__name__}: {exc}",
                            traceback=traceback.format_exc(limit=-3)))
    with open(result, "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_replay_jobs(*sys.argv[1:3]))
