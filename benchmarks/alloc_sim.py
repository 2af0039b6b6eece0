"""A study of the caching allocator's reserve: PyTorch's CUDA caching-allocator policy replayed over an allocation
trace of a run's training steps, the simulated reserve beside the measured one of the H200 corpus.

The reserve is ``max_memory_reserved / max_memory_allocated − 1``. :class:`CachingAllocator` replays the policy of
``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.11, default ``PYTORCH_CUDA_ALLOC_CONF``, one stream):

- a request is rounded up to a multiple of 512 B (``round_size``);
- requests of at most 1 MiB come from the small pool, whose segments are 2 MiB (``kSmallBuffer``); larger ones from
  the large pool: below 10 MiB (``kMinLargeAlloc``) a new segment is 20 MiB (``kLargeBuffer``), above it the request
  rounded up to 2 MiB (``kRoundLarge``) — ``get_allocation_size``;
- a request takes the smallest cached free block of its pool that fits (``get_free_block``: ``pool.lower_bound``
  over blocks ordered by size, then address), else a new segment (``alloc_block``);
- a found block is split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool)
  (``should_split``), the request keeping the lower addresses; unsplit, the whole block counts as allocated;
- a freed block merges with free neighbours of its segment and is cached, not returned (``empty_cache`` releases
  the wholly free segments);
- when a new segment would pass the device's capacity, every wholly free segment is released and the request
  retried (``release_cached_blocks``), as before an out-of-memory error.

The trace (:func:`trace_hf_deepspeed`) comes from the steps of a transformers model built from a corpus record's
config on the meta device (no memory, the real tensor sizes): a ``TorchDispatchMode`` records each new storage of an
operator's output, a weak-reference finalizer its release, in program order. Attention runs as on CUDA
(FlashAttention-2 with its backward workspaces for sdpa; softmax straight to fp32 for eager), and DeepSpeed
ZeRO-0/1/2's own buffers are meta tensors allocated and dropped where its source does (see the function). The
simulated reserve replaces nothing in the estimator: it is compared with the measured reserve and with
:data:`workbench.memory.RESERVE_FRACTION`, per run and per split of ``benchmarks/accuracy_split.json``; nothing is
fitted. Scope: Hugging Face + DeepSpeed ZeRO-0/1/2 runs on one GPU, default allocator, no optimizer offload.

Run: ``python benchmarks/alloc_sim.py`` (fit and test split apart; ``--runs`` prints every run; about 5 minutes on two
cores). Its output is kept in ``benchmarks/results/alloc_sim_h200.txt``.
"""
from __future__ import annotations

import argparse
import bisect
import json
import sys
import weakref
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
SPLIT = ROOT / "benchmarks" / "accuracy_split.json"

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
    prev: "_Block | None" = None
    next: "_Block | None" = None


@dataclass
class CachingAllocator:
    """The caching allocator's bookkeeping: ``malloc(size) -> handle``, ``free(handle)``; allocated, reserved and
    their peaks in bytes as ``torch.cuda.memory_allocated``/``memory_reserved`` count them."""
    capacity_bytes: int = H200_BYTES
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    _pools: dict = field(default_factory=lambda: {True: [], False: []})  # small? -> sorted [(size, seg, off, id)]
    _blocks: dict = field(default_factory=dict)  # id -> _Block
    _live: dict = field(default_factory=dict)  # handle -> block id
    _segments: dict = field(default_factory=dict)  # segment -> (size, first block id)
    _next_id: int = 0

    def _key(self, b: _Block):
        return (b.size, b.segment, b.offset, id(b))

    def _cache(self, b: _Block):
        b.free = True
        bisect.insort(self._pools[b.small], self._key(b))
        self._blocks[id(b)] = b

    def _uncache(self, b: _Block):
        pool = self._pools[b.small]
        pool.pop(bisect.bisect_left(pool, self._key(b)))

    def _new_segment(self, size_bytes: int, small: bool) -> _Block:
        seg = segment_bytes(size_bytes)
        if self.reserved_bytes + seg > self.capacity_bytes:
            self._release_free_segments()
            if self.reserved_bytes + seg > self.capacity_bytes:
                raise MemoryError(f"simulated out of memory: {size_bytes} B requested with "
                                  f"{self.reserved_bytes} B reserved of {self.capacity_bytes} B")
        self._next_id += 1
        b = _Block(segment=self._next_id, offset=0, size=seg, small=small)
        self._segments[self._next_id] = seg
        self.reserved_bytes += seg
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return b

    def _release_free_segments(self):
        for small, pool in self._pools.items():
            keep = []
            for key in pool:
                b = self._blocks[key[3]]
                if b.prev is None and b.next is None:
                    self.reserved_bytes -= self._segments.pop(b.segment)
                    del self._blocks[key[3]]
                else:
                    keep.append(key)
            self._pools[small] = keep

    def malloc(self, size_bytes: int) -> int:
        size = round_size(int(size_bytes))
        small = size <= SMALL_SIZE_BYTES
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size,))
        if i < len(pool):
            b = self._blocks[pool[i][3]]
            self._uncache(b)
        else:
            b = self._new_segment(size, small)
        rest = b.size - size
        if (rest >= MIN_BLOCK_BYTES) if small else (rest > SMALL_SIZE_BYTES):
            r = _Block(segment=b.segment, offset=b.offset + size, size=rest, small=small, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = r
            b.next, b.size = r, size
            self._cache(r)
        b.free = False
        self._blocks[id(b)] = b
        self.allocated_bytes += b.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        self._next_id += 1
        self._live[self._next_id] = id(b)
        return self._next_id

    def free(self, handle: int) -> None:
        b = self._blocks[self._live.pop(handle)]
        self.allocated_bytes -= b.size
        for nb in (b.prev, b.next):
            if nb is not None and nb.free:
                self._uncache(nb)
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
        self._cache(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache``: every wholly free segment is released."""
        self._release_free_segments()

    def reset_peaks(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``."""
        self.peak_allocated_bytes, self.peak_reserved_bytes = self.allocated_bytes, self.reserved_bytes

    @property
    def reserve_fraction(self) -> float:
        return self.peak_reserved_bytes / self.peak_allocated_bytes - 1.0


# ================================================================================================================
# The allocation trace of a transformers model's training steps, on the meta device
# ================================================================================================================
def _recorder(events: list):
    """A ``TorchDispatchMode`` appending ``("malloc", key, bytes)`` for each new storage an operator returns and
    ``("free", key, bytes)`` when the storage is released. ``Tensor.item()`` (data-dependent, not on meta) answers
    True / 1: the unpacked-sequence branch of transformers' mask code."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = set()

        def _free(self, key, size):
            self.live.discard(key)
            events.append(("free", key, size))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                return True if args[0].dtype == torch.bool else 1
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type == "meta":
                    st = t.untyped_storage()
                    key = st._cdata
                    if key in self.live or st.nbytes() == 0:
                        continue
                    self.live.add(key)
                    events.append(("malloc", key, st.nbytes()))
                    weakref.finalize(st, self._free, key, st.nbytes())
            return out

    return Recorder()


def _flash_sdpa():
    """``F.scaled_dot_product_attention`` as the FlashAttention-2 kernel runs it on an H200 (what PyTorch picks for
    bf16 causal attention without a mask, grouped-query attention included): forward saves q, k, v, the output and
    the fp32 log-sum-exp; backward allocates FA2's workspaces (``mha_bwd`` in
    aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp: ``dq_accum`` fp32 of q's shape, ``softmax_d``
    fp32 per row, and for fewer K/V heads than query heads ``dk_expanded``/``dv_expanded`` at the query's head
    count) and returns dq, dk, dv. On the meta device PyTorch would take the math path and materialize the
    scores."""
    import torch

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale):
            out, lse, cq, ck, mq, mk, seed, off, _ = torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, True, False, scale=scale)
            ctx.save_for_backward(q, k, v, out, lse, seed, off)
            ctx.rest = (cq, ck, mq, mk, scale)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse, seed, off = ctx.saved_tensors
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
            return dq, dk, dv, None

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if k.shape[1] != q.shape[1] and not enable_gqa:
            raise ValueError(f"key heads {k.shape[1]} != query heads {q.shape[1]} without enable_gqa")
        return Flash.apply(q, k, v, scale if scale is not None else q.shape[-1] ** -0.5)

    return sdpa


def _cuda_softmax():
    """``F.softmax(x, dtype=torch.float32)`` of a bf16/fp16 ``x`` as CUDA runs it: one fp32 output
    (``_softmax(x, dim, half_to_float=True)``, aten/src/ATen/native/SoftMax.cpp ``softmax``), where CPU and meta
    cast ``x`` to fp32 first (a second score-sized tensor)."""
    import torch

    real = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and x.dtype in (torch.bfloat16, torch.float16) and dim is not None:
            return torch._softmax(x, dim, True)
        return real(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    return real, softmax


@dataclass(frozen=True)
class DeepSpeedSetup:
    """What of a corpus run the trace needs."""
    zero_stage: int
    micro_batch: int
    grad_accum: int
    seq_length: int
    reduce_bucket_elements: int = 500_000_000
    steps: int = 6


def _ds_setup(rec: dict) -> DeepSpeedSetup:
    ds = rec["ds_config"]
    zero = ds.get("zero_optimization", {}).get("stage", 0)
    return DeepSpeedSetup(zero_stage=zero, micro_batch=ds["train_micro_batch_size_per_gpu"],
                          grad_accum=ds.get("gradient_accumulation_steps", 1), seq_length=rec["seq_length"],
                          reduce_bucket_elements=int(rec.get("zero_config_resolved", {}).get("reduce_bucket_size",
                                                                                            500_000_000)),
                          steps=rec.get("steps", 6))


def trace_hf_deepspeed(rec: dict) -> list:
    """The allocation events of a corpus Hugging Face + DeepSpeed ZeRO-0/1/2 run (one GPU, bf16, no offload; LoRA
    through peft as the corpus adds it) from building the model to its last step, then an ``("end", 0, 0)``
    marker. DeepSpeed's state is made of meta tensors with the lifetimes of
    ``deepspeed/runtime/zero/stage_1_and_2.py`` (ZeRO-1/2) and ``fp16/fused_optimizer.py`` (ZeRO-0, bf16):

    - build: each parameter is allocated on the device by ``from_config``; ZeRO-1/2 calls ``empty_cache()`` and
      flattens them into one bf16 buffer, ZeRO-0 flattens clones of them; the parameters become views of it and
      their own storage is freed; the fp32 master is ``flat.clone().float()``; ``initialize_optimizer_states``
      gives it a zero fp32 gradient and drops it again; ZeRO-0's ``FP16_Optimizer`` runs Adam once there,
      creating its two fp32 states, ZeRO-1/2 create them at the first step;
    - ZeRO-1/2, each micro-batch's backward: the first parameter gradient's hook (``process_gradients``) calls
      ``setup_buckets``, which allocates the ``ipg`` bucket (``reduce_bucket_size`` bf16 elements); ZeRO-2 copies
      each gradient into it as autograd makes it and frees it (``reduce_independent_p_g_buckets_and_remove_grads``);
      at the end the bucket goes to ``grads_in_partition`` (bf16, all parameters) and the bucket is freed
      (``_release_ipg_buffers``);
    - ZeRO-0/1: the gradients stay in ``param.grad`` until the step;
    - step, ZeRO-1/2: the gradient norm for clipping casts each gradient to fp64, one at a time
      (``get_grad_norm_direct``: ``g.data.to(get_norm_dtype())``, fp64 where the device has it); then the
      gradients are flattened (bf16) and cast to an fp32 partition
      (``flat_grad_partition.to(fp32)``), the bf16 ones freed, Adam runs, the fp32 gradient is freed; ZeRO-0
      (``FP16_Optimizer.step``): each gradient cast to fp32, the copies flattened, then freed with the bf16 ones.
    """
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    setup = _ds_setup(rec)
    cfg = dict(rec["hf_config"])
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    hf_cfg = AutoConfig.for_model(model_type, **cfg)
    attn = rec.get("attn_implementation") or rec["options"].get("attn", "sdpa")
    events: list = []
    real_sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _flash_sdpa()
    real_softmax, F.softmax = _cuda_softmax()
    try:
        with _recorder(events):
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=attn, dtype=torch.bfloat16)
            model.config.use_cache = False
            if rec.get("gradient_checkpointing"):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if rec.get("lora"):  # peft adapters as benchmarks/corpus/measure.py adds them; only they train
                from peft import LoraConfig, get_peft_model

                if rec.get("gradient_checkpointing"):
                    model.enable_input_require_grads()
                model = get_peft_model(model, LoraConfig(**rec["lora"]))
            params = [p for p in model.parameters() if p.requires_grad]
            n = sum(p.numel() for p in params)
            if setup.zero_stage == 0:  # FP16_Optimizer: flatten clones of the parameters
                clones = [p.detach().clone() for p in params]
                flat = torch.cat([c.reshape(-1) for c in clones])
                del clones
            else:  # DeepSpeedZeroOptimizer: empty_cache(), then flatten the parameters themselves
                events.append(("empty_cache", 0, 0))
                flat = torch.cat([p.detach().reshape(-1) for p in params])
            offset = 0
            for p in params:  # the parameters become views of the flat buffer; their own storage is freed
                p.data = flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
            master = flat.clone().float()  # the fp32 master copy, through a bf16 clone
            # a zero fp32 gradient for the master (both optimizers' initialize_optimizer_states); FP16_Optimizer
            # runs Adam on it once, creating its states
            master_grad = torch.zeros_like(master)
            adam = [torch.zeros_like(master), torch.zeros_like(master)] if setup.zero_stage == 0 else None
            del master_grad
            bucket = {}

            def grad_ready(q):  # DeepSpeed's grad hook: process_gradients -> setup_buckets, then (ZeRO-2) the copy
                if "ipg" not in bucket:
                    bucket["ipg"] = torch.empty(setup.reduce_bucket_elements, dtype=torch.bfloat16, device="meta")
                if setup.zero_stage >= 2:
                    q.grad = None

            if setup.zero_stage >= 1:
                for p in params:
                    p.register_post_accumulate_grad_hook(grad_ready)
            loss = None
            for _ in range(setup.steps):
                grads_in_partition = None
                for _ in range(setup.grad_accum):
                    x = torch.zeros(setup.micro_batch, setup.seq_length + 1, dtype=torch.long, device="meta")
                    inputs = x[:, :-1]
                    loss = model(input_ids=inputs, labels=inputs).loss
                    del x, inputs
                    loss.backward()
                    if setup.zero_stage >= 2 and grads_in_partition is None:  # reduce_ipg_grads in the epilogue
                        grads_in_partition = torch.empty(n, dtype=torch.bfloat16, device="meta")
                    bucket.clear()  # _release_ipg_buffers
                if setup.zero_stage == 0:  # fp32 copies of each gradient, flattened, then the bf16 ones freed
                    copies = [p.grad.float() for p in params]
                    fp32_grad = torch.cat([c.reshape(-1) for c in copies])
                    del copies
                else:
                    # scaled_global_norm -> get_grad_norm_direct: each gradient cast to fp64 (get_norm_dtype) for
                    # its norm, one at a time; the 0-d norms are kept until they are stacked
                    norms = []
                    for p in params:
                        wide = torch.empty(p.numel(), dtype=torch.float64, device="meta")
                        norms.append(torch.linalg.vector_norm(wide))
                        del wide
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
                grads_in_partition = None
                for p in params:
                    p.grad = None
                if adam is None:  # Adam's states at the first step
                    adam = [torch.zeros_like(master), torch.zeros_like(master)]
                del fp32_grad
            events.append(("end", 0, 0))  # what the teardown below frees is not the run's
    finally:
        F.scaled_dot_product_attention, F.softmax = real_sdpa, real_softmax
    del model, params, flat, master, adam, loss
    return events


def replay(events: list, capacity_bytes: int = H200_BYTES - int(2.04 * 2**30)) -> CachingAllocator:
    """The caching allocator after ``events`` (``trace_*``'s ``(kind, key, bytes)``); its peaks count from the
    first event, as the corpus's counters count from the start of a run."""
    alloc = CachingAllocator(capacity_bytes=capacity_bytes)
    handles = {}
    for kind, key, size in events:
        if kind == "end":
            break
        if kind == "empty_cache":
            alloc.empty_cache()
        elif kind == "malloc":
            handles[key] = alloc.malloc(size)
        elif key in handles:
            alloc.free(handles.pop(key))
    return alloc


# ================================================================================================================
# Simulated vs measured reserve on the corpus
# ================================================================================================================
def in_scope(rec: dict) -> bool:
    """Corpus runs the trace models: Hugging Face + DeepSpeed ZeRO-0/1/2 on one GPU, finished, default allocator,
    no optimizer offload."""
    zero = rec.get("ds_config", {}).get("zero_optimization", {})
    return (rec.get("stack") == "hf-ds" and rec.get("status") == "ok" and rec.get("world_size", 1) == 1
            and zero.get("stage", 0) <= 2 and not zero.get("offload_optimizer")
            and not rec.get("pytorch_cuda_alloc_conf") and not rec.get("allocator_cap_bytes")
            and bool(rec.get("peak_reserved_bytes")))


@dataclass(frozen=True)
class Row:
    run_id: str
    split: str
    measured_reserve: float
    simulated_reserve: float
    constant_reserve: float
    simulated_allocated_error: float
    device_error: float | None = None
    """The estimator's whole-device error on the run (``benchmarks/bench_accuracy.py``'s), with the constant."""
    device_error_simulated: float | None = None
    """The same with the simulated reserve in place of the constant times the estimate's allocated peak."""

    @property
    def simulated_error(self) -> float:
        """Peak reserved predicted from the measured allocated peak and the simulated reserve, relative error."""
        return (1 + self.simulated_reserve) / (1 + self.measured_reserve) - 1

    @property
    def constant_error(self) -> float:
        return (1 + self.constant_reserve) / (1 + self.measured_reserve) - 1


def simulate(rec: dict, split: str) -> Row:
    """One in-scope corpus record: the simulated reserve beside the measured one and the constant, and the
    estimator's whole-device error with either."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_accuracy import corpus_run, predict
    from workbench.memory import RESERVE_FRACTION

    a = replay(trace_hf_deepspeed(rec))
    constant = RESERVE_FRACTION["deepspeed"]
    device = device_sim = None
    run = corpus_run(rec)
    if run is not None and run["measured"].get("device"):
        p, measured = predict(run), run["measured"]["device"]
        device = p["device"] / measured - 1
        device_sim = (p["device"] + (a.reserve_fraction - constant) * p["allocated"]) / measured - 1
    return Row(run_id=rec["run_id"], split=split,
               measured_reserve=rec["peak_reserved_bytes"] / rec["peak_allocated_bytes"] - 1,
               simulated_reserve=a.reserve_fraction, constant_reserve=constant,
               simulated_allocated_error=a.peak_allocated_bytes / rec["peak_allocated_bytes"] - 1,
               device_error=device, device_error_simulated=device_sim)


def _stats(errs) -> str:
    import statistics

    errs = [e for e in errs if e is not None]
    if not errs:
        return "no runs"
    worst = max(errs, key=abs)
    return (f"median |err| {statistics.median(abs(e) for e in errs):5.1%}  worst {worst:+6.1%}  "
            f"under >5 % {sum(e < -0.05 for e in errs):2d}")


def summary(rows: list) -> list:
    """Two lines: peak reserved (from the measured allocated peak) and the estimator's whole device, each with
    the simulated reserve and with the constant."""
    return [f"n {len(rows):3d}  peak reserved   simulated: {_stats([r.simulated_error for r in rows])}   "
            f"constant {rows[0].constant_reserve:.1%}: {_stats([r.constant_error for r in rows])}",
            f"       whole device    simulated: {_stats([r.device_error_simulated for r in rows])}   "
            f"constant {rows[0].constant_reserve:.1%}: {_stats([r.device_error for r in rows])}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--runs", action="store_true", help="print every run")
    ap.add_argument("--only", default="", help="only run ids containing this")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    split = json.loads(SPLIT.read_text())
    side = {s: "fit" for s in split["fit"]} | {s: "test" for s in split["test"]}
    rows = []
    for line in Path(args.corpus).read_text().splitlines():
        rec = json.loads(line)
        if not in_scope(rec) or args.only not in rec["run_id"] or rec["shape_id"] not in side:
            continue
        row = simulate(rec, side[rec["shape_id"]])
        rows.append(row)
        if args.runs:
            dev = ("" if row.device_error is None else
                   f"  device {row.device_error_simulated:+6.1%} (constant {row.device_error:+6.1%})")
            print(f"{row.split:4s} {row.run_id:52s} reserve measured {row.measured_reserve:6.1%} simulated "
                  f"{row.simulated_reserve:6.1%} (reserved {row.simulated_error:+6.1%}, constant "
                  f"{row.constant_error:+6.1%}){dev}  traced allocated {row.simulated_allocated_error:+5.1%}",
                  flush=True)
    print("error = predicted / measured - 1; peak reserved from the measured allocated peak and the reserve; whole "
          "device: the estimator's, with its reserve term as is (constant) or the simulated fraction")
    for name in ("fit", "test"):
        part = [r for r in rows if r.split == name]
        if part:
            lines = summary(part)
            print(f"{name:4s} {lines[0]}\n{'':4s} {lines[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
