"""benchmarks/alloc_sim.py: the caching-allocator policy on hand-worked cases, and the meta-device trace of a
small transformers model."""
import functools
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import alloc_sim as A  # noqa: E402

MiB = 2**20
CUBLAS = 32 * MiB  # workbench.allocsim.CUBLAS_WORKSPACE_BYTES: cuBLAS's workspace per handle on Hopper


def test_rounding_and_segment_sizes():
    assert A.round_size(1) == 512
    assert A.round_size(513) == 1024
    assert A.segment_bytes(512) == 2 * MiB  # small pool
    assert A.segment_bytes(1 * MiB) == 2 * MiB
    assert A.segment_bytes(1 * MiB + 512) == 20 * MiB  # 1-10 MiB: a 20 MiB segment
    assert A.segment_bytes(10 * MiB - 512) == 20 * MiB
    assert A.segment_bytes(10 * MiB) == 10 * MiB  # from 10 MiB: rounded up to 2 MiB
    assert A.segment_bytes(11 * MiB) == 12 * MiB


def test_small_request_carved_from_a_new_20_mib_segment():
    a = A.CachingAllocator()
    h = a.malloc(5 * MiB)
    assert (a.allocated_bytes, a.reserved_bytes) == (5 * MiB, 20 * MiB)
    a.malloc(5 * MiB)  # the 15 MiB rest of the segment serves the next one
    assert (a.allocated_bytes, a.reserved_bytes) == (10 * MiB, 20 * MiB)
    a.free(h)
    assert (a.allocated_bytes, a.reserved_bytes) == (5 * MiB, 20 * MiB)


def test_freed_30_mib_block_reused_by_a_20_mib_request_with_a_split():
    a = A.CachingAllocator()
    big = a.malloc(30 * MiB)
    a.free(big)
    h = a.malloc(20 * MiB)  # best fit: the cached 30 MiB block, split into 20 + 10
    assert (a.allocated_bytes, a.reserved_bytes) == (20 * MiB, 30 * MiB)
    a.malloc(10 * MiB)  # the 10 MiB rest fits exactly
    assert (a.allocated_bytes, a.reserved_bytes) == (30 * MiB, 30 * MiB)
    a.malloc(12 * MiB)  # nothing cached fits: a new segment
    assert a.reserved_bytes == 42 * MiB
    a.free(h)
    assert a.peak_allocated_bytes == 42 * MiB and a.reserve_fraction == pytest.approx(0.0)


def test_no_split_when_the_rest_is_at_most_1_mib():
    a = A.CachingAllocator()
    a.free(a.malloc(21 * MiB))  # a 22 MiB segment
    a.malloc(21 * MiB)  # the 1 MiB rest is not split off: the whole block counts as allocated
    assert (a.allocated_bytes, a.reserved_bytes) == (22 * MiB, 22 * MiB)


def test_freed_neighbours_merge_and_best_fit_takes_the_smallest_block():
    a = A.CachingAllocator()
    first, second = a.malloc(30 * MiB), a.malloc(40 * MiB)
    x, y = a.malloc(8 * MiB), a.malloc(8 * MiB)  # both from one 20 MiB segment
    a.free(x)
    a.free(y)  # merged with x and with the free 4 MiB tail: one free 20 MiB block
    a.free(first)
    h = a.malloc(16 * MiB)  # the 20 MiB block fits best, not the 30 MiB one
    assert a.reserved_bytes == 90 * MiB
    a.malloc(30 * MiB)  # the 30 MiB block is still whole
    assert a.reserved_bytes == 90 * MiB
    a.free(h)
    a.free(second)
    assert a.allocated_bytes == 30 * MiB


def test_fragmentation_leaves_a_reserve():
    """Two 12 MiB blocks freed apart by a live one: a 24 MiB request fits neither and takes a new segment."""
    a = A.CachingAllocator()
    hs = [a.malloc(12 * MiB) for _ in range(3)]
    a.free(hs[0])
    a.free(hs[2])
    a.malloc(24 * MiB)
    assert a.reserved_bytes == 60 * MiB and a.allocated_bytes == 36 * MiB
    assert a.reserve_fraction == pytest.approx(60 / 36 - 1)


def test_empty_cache_and_capacity_release_only_wholly_free_segments():
    a = A.CachingAllocator(capacity_bytes=90 * MiB)
    keep, gone = a.malloc(30 * MiB), a.malloc(30 * MiB)
    part = a.malloc(4 * MiB)  # a 20 MiB segment, partly in use
    a.free(gone)
    a.malloc(32 * MiB)  # no cached block fits; 80 + 32 > 90: the free 30 MiB segment goes, then 82 fits
    assert a.reserved_bytes == 82 * MiB
    a.free(keep)
    a.empty_cache()
    assert a.reserved_bytes == 52 * MiB  # the 20 MiB segment of `part` and the 32 MiB one stay
    a.free(part)
    a.empty_cache()
    assert a.reserved_bytes == 32 * MiB and a.peak_reserved_bytes == 82 * MiB


def test_capacity_error_names_the_numbers():
    a = A.CachingAllocator(capacity_bytes=64 * MiB)
    a.malloc(40 * MiB)
    with pytest.raises(MemoryError, match="requested"):
        a.malloc(40 * MiB)


def test_small_and_large_pools_do_not_share_blocks():
    a = A.CachingAllocator()
    a.free(a.malloc(4 * MiB))  # a free 20 MiB large-pool block
    a.malloc(1000)  # a small request gets its own 2 MiB segment
    assert a.reserved_bytes == 22 * MiB


def test_replay_of_a_trace():
    events = [("malloc", 1, 30 * MiB), ("free", 1, 30 * MiB), ("malloc", 2, 20 * MiB), ("malloc", 3, 12 * MiB),
              ("empty_cache", 0, 0)]
    a = A.replay(events)
    assert (a.allocated_bytes, a.reserved_bytes, a.peak_reserved_bytes) == (32 * MiB, 42 * MiB, 42 * MiB)


def _record(attn="sdpa", zero=2, ckpt=False):
    cfg = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1024, max_position_embeddings=512, tie_word_embeddings=False)
    return dict(run_id="t", hf_config=cfg, seq_length=512, attn_implementation=attn, gradient_checkpointing=ckpt,
                lora=None, options={}, steps=2,
                ds_config=dict(train_micro_batch_size_per_gpu=2, zero_optimization=dict(stage=zero)),
                zero_config_resolved=dict(reduce_bucket_size=5_000_000))


@functools.lru_cache(maxsize=None)
def _trace(attn="sdpa", zero=2, ckpt=False):
    return A.trace_hf_deepspeed(_record(attn, zero, ckpt))


def _params(rec):
    c = rec["hf_config"]
    h, f, v, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    return 2 * v * h + h + layers * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h)


def _live_at_end(events) -> dict:
    """Storage key -> bytes of what a trace holds at its ``end`` marker."""
    live = {}
    for kind, key, size in events[:events.index(("end", 0, 0))]:
        if kind == "malloc":
            live[key] = size
        elif kind == "free":
            live.pop(key, None)
    return live


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_trace_leaves_deepspeed_state_after_the_steps(zero):
    """After the steps only the bf16 parameters, the fp32 master and Adam's two fp32 states (2 + 3·4 bytes a
    parameter), the last loss and cuBLAS's two workspaces (forward and autograd's handles, kept for the process's
    life) are live; the peak holds more. The allocator counts whole blocks it did not split (a rest of at most 1 MiB),
    so it may count a little more than the live tensors."""
    rec = _record(zero=zero)
    events = _trace(zero=zero)
    live = _live_at_end(events)
    n = _params(rec)
    assert 14 * n + 2 * CUBLAS <= sum(live.values()) <= 14 * n + 2 * CUBLAS + 1024
    a = A.replay(events)
    assert sum(live.values()) <= a.allocated_bytes <= sum(live.values()) + 4 * MiB
    assert a.peak_allocated_bytes > 14 * n + 2 * 512 * 1024 * 4  # the fp32 logits at least
    assert a.peak_reserved_bytes >= a.peak_allocated_bytes


def test_fused_attention_trace_holds_no_score_matrix():
    """Eager attention keeps the fp32 and bf16 probabilities of every layer for backward (b·heads·s² · 6 bytes);
    cuDNN's and FlashAttention-2's kernels keep only a statistic per row."""
    eager = A.replay(_trace("eager")).peak_allocated_bytes
    scores = 2 * 4 * 512 * 512
    for kernel in ("cudnn", "flash"):
        sdpa = A.replay(A.trace_hf_deepspeed(_record("sdpa"), kernel)).peak_allocated_bytes
        assert eager - sdpa >= 2 * scores * 6 * 0.9


SDPA_MEMORY = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "sdpa_memory_h200.json"


def _sdpa_cases():
    import json

    return [c for c in json.loads(SDPA_MEMORY.read_text())["cases"] if "error" not in c]


@pytest.mark.parametrize("case", _sdpa_cases(), ids=lambda c: "b{batch}-h{heads}-kv{kv_heads}-s{seq}-d{head_dim}-p{dropout}".format(**c))
def test_cudnn_attention_trace_is_what_the_h200_allocated(case):
    """Each recorded attention call (transformers' sdpa on an H200, ``benchmarks/gpu_sdpa_memory.py``): the trace's
    forward and backward make the same requests and releases, in the same order, as cuDNN's kernel did (the second
    call, after the kernel was built)."""
    traced = A.allocsim.sdpa_events(case["backend"], case["batch"], case["heads"], case["kv_heads"], case["seq"],
                                    case["head_dim"], case["dropout"])
    assert case["backend"] == "cudnn"
    assert traced["forward"] == [[a, n] for a, _block, n in case["forward1"]]
    assert traced["backward"] == [[a, n] for a, _block, n in case["backward1"]]


def test_cudnn_backward_workspace_doubles_for_grouped_query_heads():
    ws = A.allocsim.cudnn_backward_workspace_bytes
    rows, d = 2 * 16 * 1024, 128
    assert ws(2, 16, 16, 1024, d) == rows * d * 4 + rows * 4 + 256  # MHA: the fp32 dQ accumulator and a row statistic
    assert ws(2, 16, 4, 1024, d) == 2 * rows * d * 4 + rows * 4 + 256  # GQA: a second array of the query's shape
    with pytest.raises(ValueError, match="sdpa_kernel='math'"):
        A.allocsim.sdpa_kernel_function("math")


def test_a_boolean_mask_becomes_a_bias_kept_for_the_backward():
    """A sliding-window layer's boolean mask (what an H200's history showed for Gemma 3's width): the stand-in
    allocates the mask as a bias in the query's dtype in the forward, before cuDNN's blocks, and frees it in the
    backward; a float mask and no mask allocate nothing for it."""
    import torch

    from workbench.allocsim import _recorder, sdpa_kernel_function, sdpa_mask_bias

    b, h, s, d = 1, 4, 256, 64
    assert sdpa_mask_bias(None, torch.bfloat16) is None
    fmask = torch.empty(b, 1, s, s, device="meta", dtype=torch.bfloat16)
    assert sdpa_mask_bias(fmask, torch.bfloat16) is fmask
    events: list = []
    sdpa = sdpa_kernel_function("cudnn")
    with _recorder(events):
        q, k, v = (torch.empty(b, h, s, d, device="meta", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        mask = torch.empty(b, 1, s, s, device="meta", dtype=torch.bool)
        start = len(events)
        out = sdpa(q, k, v, attn_mask=mask)
        mid = len(events)
        out.backward(torch.empty_like(out))
    bias = s * s * 2
    forward, backward = events[start:mid], events[mid:]
    assert forward[0][0] == "malloc" and forward[0][2] == bias  # the bias first, then the kernel's seed and output
    assert not any(kind == "free" and n == bias for kind, _key, n in forward)
    assert any(kind == "free" and key == forward[0][1] for kind, key, _n in backward)


def test_checkpointing_lowers_the_traced_peak():
    plain = A.replay(_trace()).peak_allocated_bytes
    ckpt = A.replay(_trace(ckpt=True)).peak_allocated_bytes
    assert ckpt < plain


def _scoped(stack="hf-ds", zero=2, offload=None, gas=1, **options):
    """A finished one-GPU corpus record the benchmark's corpus reader can describe (``bench_accuracy.corpus_run``)."""
    rec = _record(zero=zero) | dict(stack=stack, shape_id="t", status="ok", world_size=1, peak_reserved_bytes=1,
                                    peak_allocated_bytes=1, optimizer_class="FusedAdam",
                                    options=dict(zero=zero, attn="sdpa", mbs=2, gas=gas, **options))
    rec["ds_config"]["gradient_accumulation_steps"] = gas
    if offload:
        rec["options"]["offload"] = offload
        rec["ds_config"]["zero_optimization"]["offload_optimizer"] = {"device": offload}
    if stack.startswith("mcore"):
        rec["model_dims"] = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1024,
                                 seq_length=512, **rec["options"].pop("dims", {}))
    if stack == "mcore-ddp":
        del rec["ds_config"]
        rec["inner_optimizer_class"] = "AdamW"
    return rec


def test_scope_is_the_estimates():
    """The corpus runs the replay is scored on are the ones :func:`workbench.allocsim.scope_problems` admits (the
    scope ``workbench estimate`` applies): one GPU on the default allocator, ZeRO-1 to 3 with the optimizer on the
    CPU (ZeRO-3's without accumulation), LoRA on transformers models, dense megatron-core models under DeepSpeed or
    their own DDP; finished runs with both peaks recorded."""
    assert A.in_scope(_scoped())
    assert A.in_scope(_scoped(zero=3))
    assert A.in_scope(_scoped(zero=3, offload="cpu"))
    assert A.in_scope(_scoped(zero=3, lora=16))
    assert A.in_scope(_scoped(zero=2, offload="cpu"))
    assert A.in_scope(_scoped(zero=1, offload="cpu"))
    assert A.in_scope(_scoped(zero=2, offload="cpu", gas=2))
    assert not A.in_scope(_scoped(zero=3, offload="cpu", gas=2))
    assert not A.in_scope(_scoped() | dict(world_size=2))
    assert not A.in_scope(_scoped() | dict(status="oom"))
    assert not A.in_scope(_scoped() | dict(pytorch_cuda_alloc_conf="expandable_segments:True"))
    assert not A.in_scope(_scoped() | dict(allocator_cap_bytes=1 << 30))
    assert A.in_scope(_scoped("mcore-ds"))
    assert not A.in_scope(_scoped("mcore-ds", dims=dict(num_experts=8)))  # the trace is dense
    assert A.in_scope(_scoped("mcore-ddp", zero=0))  # megatron-core's own DDP on one GPU
    assert not A.in_scope(_scoped("mcore-ddp", zero=0, dims=dict(num_experts=8)))
    assert not A.in_scope(_scoped("mcore-ddp", zero=0) | dict(world_size=2))


def test_row_errors_are_of_peak_reserved():
    row = A.Row(run_id="r", split="fit", measured_reserve=0.25, simulated_reserve=0.20, constant_reserve=0.171,
                simulated_allocated_error=0.0)
    assert row.simulated_error == pytest.approx(1.20 / 1.25 - 1)
    assert row.constant_error == pytest.approx(1.171 / 1.25 - 1)
    assert "under >5 %  0" in A.summary([row, row])[0]


def test_write_band_gives_each_offload_regime_its_own_replayed_band(tmp_path, monkeypatch):
    """--write-band writes the engine's replayed whole-device band and, where a DeepSpeed offload regime has enough
    held-out runs, that regime's own: measured 10 % above the estimate on the parameter-offload runs widens their
    band's upper side to 10 %, while the engine's stays narrower; a regime with too few runs gets none."""
    from workbench import memory
    from workbench.specs import ParallelPlan

    band_file = tmp_path / "error_band.json"
    band_file.write_text(json.dumps({"device": {"deepspeed/replayed-allocator/stale": {"n": 9}}}))
    monkeypatch.setattr(memory, "ERROR_BAND_FILE", band_file)

    def row(i, offload, err):
        return A.Row(run_id=f"hf-ds/shape{i}/z3", split="test", measured_reserve=0.2, simulated_reserve=0.2,
                     constant_reserve=0.2, simulated_allocated_error=0.0, device_error_replay_peak=err,
                     offload=offload)

    rows = ([row(i, "", 0.0) for i in range(60)] + [row(i, "param-offload", 1 / 1.1 - 1) for i in range(6)]
            + [row(i, "optimizer-offload", 0.0) for i in range(3)])
    written = A.write_band(rows)
    doc = json.loads(band_file.read_text())["device"]
    assert set(written) == set(doc) == {"deepspeed/replayed-allocator", "deepspeed/replayed-allocator/param-offload"}
    assert doc["deepspeed/replayed-allocator/param-offload"]["high_fraction"] == pytest.approx(0.1, abs=1e-4)
    assert doc["deepspeed/replayed-allocator/param-offload"]["n"] == 6
    assert doc["deepspeed/replayed-allocator"]["n"] == 69
    assert doc["deepspeed/replayed-allocator"]["high_fraction"] < 0.1
    both = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="cpu")
    assert A.offload_regime(both) == "param-offload"
    assert A.offload_regime(both.replace(offload_params="none")) == "zero3-optimizer-offload"
    assert A.offload_regime(both.replace(offload_params="none", zero_stage=2)) == "optimizer-offload"
    assert A.offload_regime(both.replace(offload_params="none", offload_optimizer="none")) == ""


def test_megatron_core_ddp_records_take_megatron_cores_constants():
    """A ``mcore-ddp`` record is compared with megatron-core's constant reserve; a summary mixing engines names no
    single constant."""
    from workbench.memory import RESERVE_FRACTION

    assert A.engine_of({"stack": "mcore-ddp"}) == "megatron"
    assert A.engine_of({"stack": "mcore-ds"}) == A.engine_of({"stack": "hf-ds"}) == "deepspeed"
    rows = [A.Row(run_id=f"{stack}/x", split="test", measured_reserve=0.1, simulated_reserve=0.1,
                  constant_reserve=RESERVE_FRACTION[A.engine_of({"stack": stack})], simulated_allocated_error=0.0)
            for stack in ("mcore-ds", "mcore-ddp")]
    assert f"constant {RESERVE_FRACTION['megatron']:.1%}" in A.summary(rows[1:])[0]
    assert "constant per engine" in A.summary(rows)[0]


def test_the_runs_own_device_leaves_out_other_processes_memory_at_its_start():
    """A lone process's context is the least memory in use at the start over the one-GPU records (a two-GPU record
    does not count); the summary's last line scores the replay against the run's own device."""
    recs = [{"device_used_at_start_bytes": 3 << 29, "world_size": 1}, {"device_used_at_start_bytes": 1 << 29},
            {"device_used_at_start_bytes": 1 << 20, "world_size": 2}, {"world_size": 1}]
    assert A.lone_context_bytes(recs) == 1 << 29
    assert A.lone_context_bytes([{"world_size": 1}]) is None
    rows = [A.Row(run_id="hf-ds/x", split="test", measured_reserve=0.1, simulated_reserve=0.1, constant_reserve=0.1,
                  simulated_allocated_error=0.0, device_error=-0.08, device_error_simulated=-0.08,
                  device_error_replay_peak=-0.08, device_error_own=-0.01)]
    lines = A.summary(rows)
    assert "under >5 %  1" in lines[2] and "other processes" in lines[3] and "under >5 %  0" in lines[3]


def _mlp_events(bucket_elements: int, marks: list):
    """A 3-layer bf16 MLP on the meta device through ZeRO-2's steps (:func:`workbench.allocsim.deepspeed_steps`),
    and a ``("mark", "last gradient", 0)`` event where the first layer's gradient (the last of backward) arrives."""
    import torch

    from workbench.allocsim import DeepSpeedSetup, _recorder, deepspeed_steps

    events: list = []
    with _recorder(events):
        with torch.device("meta"):
            net = torch.nn.Sequential(*(torch.nn.Linear(256, 256, bias=False) for _ in range(3))).bfloat16()
        # fires before DeepSpeed's hook on the same parameter (hooks run in the order they were registered)
        net[0].weight.register_post_accumulate_grad_hook(lambda p: events.append(("mark", "last gradient", 0)))

        def micro_step():
            return net(torch.zeros(64, 256, dtype=torch.bfloat16, device="meta")).float().sum()

        deepspeed_steps(net, micro_step, DeepSpeedSetup(zero_stage=2, micro_batch=1, grad_accum=1, seq_length=64,
                                                        reduce_bucket_elements=bucket_elements, steps=1), events)
    marks.append(events.index(("mark", "last gradient", 0)))
    return events


def test_zero2_reduces_a_full_bucket_into_the_gradient_partition_during_backward():
    """DeepSpeed ZeRO-2 reduces the ipg bucket when the next gradient would overflow it: ``grads_in_partition``
    (all parameters, bf16) then exists before backward ends; with a bucket that holds every gradient it is made at
    the end of backward."""
    n = 3 * 256 * 256
    for bucket, during in ((256 * 256 + 1, True), (4 * n, False)):
        marks: list = []
        events = _mlp_events(bucket, marks)
        # bf16 buffers of all parameters: the flat parameters, the master's bf16 clone, grads_in_partition, then
        # the step's flattened gradients
        flats = [i for i, (kind, _key, size) in enumerate(events) if kind == "malloc" and size == 2 * n]
        assert len(flats) == 4, f"{len(flats)} bf16 buffers of every parameter with a {bucket}-element bucket"
        assert (flats[2] < marks[0]) is during, bucket


def test_oversized_gradient_bypasses_the_bucket_until_the_next_reduction():
    """A gradient larger than the bucket is not copied into it (``extra_large_param_to_reduce``): it stays alive
    until the next reduction copies it into the gradient partition."""
    marks: list = []
    events = _mlp_events(1000, marks)  # every 256x256 gradient is larger than the bucket
    grads = [(i, key) for i, (kind, key, size) in enumerate(events) if kind == "malloc" and size == 2 * 256 * 256]
    freed = {key: i for i, (kind, key, _size) in enumerate(events) if kind == "free"}
    # the first two gradients of backward live until a later one's arrival triggers the reduction
    assert len(grads) >= 3
    for i, key in grads[:2]:
        assert freed[key] > grads[2][0], (i, key)


def test_cuda_softmax_backward_temporary_is_traced():
    """``_softmax_backward_data`` on CUDA allocates ``grad * output`` before its kernel and frees it after: the
    recorder adds it after the gradient, in the promoted dtype (4 bytes a score for fp32 probabilities)."""
    import torch

    from workbench.allocsim import _recorder

    events: list = []
    with _recorder(events):
        x = torch.zeros(2, 4, 128, 128, device="meta", dtype=torch.float32, requires_grad=True)
        torch.softmax(x, dim=-1).sum().backward()
    temps = [(k, key, size) for k, key, size in events if isinstance(key, tuple) and key[0] == "softmax_backward_tmp"]
    assert [k for k, _key, _size in temps] == ["malloc", "free"]
    assert temps[0][2] == 2 * 4 * 128 * 128 * 4


def test_dropout_keeps_a_one_byte_mask_as_on_cuda():
    """CUDA's fused dropout keeps a boolean mask for backward; the trace's dropout does too (CPU and meta would build
    a mask of the input's dtype)."""
    import torch
    import torch.nn.functional as F

    from workbench.allocsim import _recorder, cuda_dropout

    real, dropout = cuda_dropout()
    events: list = []
    x = torch.zeros(1024, 1024, device="meta", dtype=torch.bfloat16, requires_grad=True)
    with _recorder(events):
        y = dropout(x, 0.1, True)
    sizes = [size for kind, _key, size in events if kind == "malloc"]
    assert sizes == [1024 * 1024, 2 * 1024 * 1024]  # the mask (bool) first, then the output (bf16), as CUDA asks
    assert F.dropout is real and y.shape == x.shape
    grad, backward = torch.ones_like(y), []
    with _recorder(backward):
        y.backward(grad)
    # the backward scales the gradient by the kept mask: one bf16 gradient, nothing of the input's size besides
    assert [size for kind, _key, size in backward if kind == "malloc"] == [2 * 1024 * 1024]


def test_the_traced_dropout_computes_dropout_off_the_meta_device():
    """Off the meta device the trace's dropout is dropout: kept values scaled by 1 / (1 - p), dropped ones 0, and the
    gradient through the same mask."""
    import torch

    from workbench.allocsim import cuda_dropout

    torch.manual_seed(0)
    _real, dropout = cuda_dropout()
    x = torch.full((256, 256), 2.0, requires_grad=True)
    y = dropout(x, 0.25, True)
    kept = y != 0
    assert 0.70 < kept.float().mean().item() < 0.80
    assert torch.allclose(y[kept], torch.full_like(y[kept], 2.0 / 0.75))
    y.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.75)
    assert torch.equal(dropout(x, 0.25, False), x)  # evaluation: unchanged


def test_zero2_cpu_offload_keeps_only_the_bf16_parameters_on_the_gpu():
    """ZeRO-2 with the optimizer on the CPU: after the steps the GPU holds the flat bf16 parameters (2 bytes a
    parameter), DeepSpeed's bf16 staging buffer of the largest parameter's size (``temp_grad_buffer_for_gpu_offload``)
    and cuBLAS's two workspaces, no fp32 master or Adam state; each reduced gradient passes through an fp64 copy (its
    norm) and an fp32 copy (the asynchronous copy to the host), both freed, so the traced peak holds one of them at
    least."""
    rec = _record(zero=2)
    rec["ds_config"]["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    assert A.in_scope(_scoped(zero=2, offload="cpu"))
    events = A.trace_hf_deepspeed(rec)
    live = _live_at_end(events)
    n = _params(rec)
    largest = 1024 * 256  # the embedding and the output layer
    kept = 2 * n + 2 * largest + 2 * CUBLAS
    assert kept <= sum(live.values()) <= kept + 1024
    sizes = [size for kind, _key, size in events if kind == "malloc"]
    assert 8 * largest in sizes and 4 * largest in sizes
    assert A.replay(events).peak_allocated_bytes < A.replay(_trace(zero=2)).peak_allocated_bytes


def test_offload_outside_zero1_to_3_and_zero3s_with_accumulation_are_refused():
    from workbench.allocsim import DeepSpeedSetup, check_scope, deepspeed_steps
    from workbench.specs import ModelSpec, ParallelPlan

    with pytest.raises(ValueError, match="offload_optimizer with zero_stage=0"):
        deepspeed_steps(None, None, DeepSpeedSetup(zero_stage=0, micro_batch=1, grad_accum=1, seq_length=8,
                                                   offload_optimizer=True), [])
    m = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=128)
    base = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu", overlap_comm=False)
    check_scope(m, base)
    check_scope(m, base.replace(zero_stage=3, overlap_comm=True))
    check_scope(m, base.replace(zero_stage=1))  # ZeRO-1's offload: the ZeRO-1/2 trace, its reductions at the end
    accumulated = dict(global_batch_size=2 * base.global_batch_size)
    check_scope(m, base.replace(**accumulated))  # ZeRO-1/2's offload with accumulation (final56, blind)
    with pytest.raises(ValueError, match="zero_stage=3, gradient_accumulation_steps=2"):
        check_scope(m, base.replace(zero_stage=3, overlap_comm=True, **accumulated))
    megatron = m.replace(implementation="megatron", attention="unfused")
    with pytest.raises(ValueError, match="lora_rank=8 on a megatron-core model"):
        check_scope(megatron, base.replace(lora_rank=8))
    check_scope(m, base.replace(offload_optimizer="none", overlap_comm=True))  # overlap_comm traced without offload
    check_scope(m, base.replace(overlap_comm=True))  # and with it (the offload's copies on the reduction stream)
    check_scope(m, base.replace(zero_stage=1, overlap_comm=True))
    for plan, why in ((base.replace(zero_stage=3), "overlap_comm=False at ZeRO-3"),
                      (base.replace(zero_stage=3, overlap_comm=True, micro_batch_size=1, global_batch_size=2),
                       "gradient_accumulation_steps=2")):
        with pytest.raises(ValueError, match=why):
            check_scope(m, plan)
    check_scope(m, base.replace(offload_optimizer="nvme"))  # below ZeRO-3 DeepSpeed runs it as CPU offload


def test_cublas_constant_matches_the_trace_module():
    from workbench.allocsim import CUBLAS_WORKSPACE_BYTES

    assert CUBLAS == CUBLAS_WORKSPACE_BYTES


def test_a_tie_between_equal_free_blocks_goes_to_the_newest_segment():
    """cudaMalloc hands out falling addresses, and the allocator takes the lowest-addressed of equal free blocks:
    the block of the segment made last (the recorded smollm2 eager history replays exactly only so)."""
    a = A.CachingAllocator()
    first, second = a.malloc(30 * MiB), a.malloc(30 * MiB)
    seg = lambda h: a._blocks[a._live[h]].segment  # noqa: E731
    old, new = seg(first), seg(second)
    a.free(first)
    a.free(second)
    assert seg(a.malloc(30 * MiB)) == new and new != old


def test_embedding_backward_partial_sums_as_the_h200_allocated_them():
    """8 192 tokens of a 1 024-wide bf16 embedding: 35.1992 MiB, the block the recorded histories show once per
    backward ((8 192 + 819) rows x 1 024 x fp32); none for 2 048 tokens (TinyLlama's histories)."""
    assert A.allocsim.embedding_backward_partials_bytes(8192, 1024, 2) == 36_909_056
    # the 2 048-row position embedding of the same megatron-core run: at most one segment per row (11.1992 MiB)
    assert A.allocsim.embedding_backward_partials_bytes(8192, 1024, 2, num_weights=2048) == 11_743_232
    events = _trace("sdpa")
    sizes = [size for kind, key, size in events if kind == "malloc" and isinstance(key, tuple)
             and key[0] == "embedding_backward_partials"]
    # 2 x 512 tokens: CUDA's direct kernel (at most 3 072 indices) takes no partial sums; one index more sorts
    assert sizes == [] and A.allocsim.embedding_backward_partials_bytes(3072, 256, 2) == 0
    assert A.allocsim.embedding_backward_partials_bytes(3073, 256, 2) == (3073 + 307) * 256 * 4


def test_bf16_eager_softmax_casts_before_it_normalises():
    """transformers' eager ``softmax(scores, dtype=float32)`` of bf16 scores: on CUDA a cast then the softmax (two
    fp32 score-sized blocks; only fp16 takes the one-output path), as the recorded eager histories show."""
    import torch

    real, softmax = A.allocsim._cuda_softmax()
    events = []
    with A.allocsim._recorder(events):
        x = torch.empty(2, 4, 8, 8, device="meta", dtype=torch.bfloat16)
        start = len(events)
        softmax(x, dim=-1, dtype=torch.float32)
    fp32 = 2 * 4 * 8 * 8 * 4
    assert [size for kind, _k, size in events[start:] if kind == "malloc"].count(fp32) == 2
    with A.allocsim._recorder(events):
        h = torch.empty(2, 4, 8, 8, device="meta", dtype=torch.float16)
        start = len(events)
        softmax(h, dim=-1, dtype=torch.float32)
    assert [size for kind, _k, size in events[start:] if kind == "malloc"].count(fp32) == 1


def test_reduction_staging_buffer_as_the_h200_allocated_it():
    """A bias gradient's sum over the tokens on the H200 (``benchmarks/gpu_bias_grad_memory.py``): the staging
    buffer of PyTorch's split reduction, ten widths and token counts in bf16 and fp32, each to the byte; inside a
    traced ``nn.Linear`` backward, the same block right after the bias gradient."""
    import torch
    import torch.nn.functional as F

    rec = json.loads((ROOT / "benchmarks" / "results" / "bias_grad_memory_h200.json").read_text())
    sums = [r for r in rec["rows"] if r["case"] == "sum0"]
    assert len(sums) == 20
    for r in sums:
        measured = [e["bytes"] for e in r["events"] if e["action"] == "alloc" and e["bytes"] >= 2**20]
        assert measured == [A.allocsim.reduction_staging_bytes((r["rows"], r["width"]), [0])], r
    # reductions along the fast dimension, or small ones, stay inside one block
    assert A.allocsim.reduction_staging_bytes((8192, 4096), [1]) == 0
    assert A.allocsim.reduction_staging_bytes((64, 64), [0]) == 0
    assert A.allocsim.reduction_staging_bytes((2048, 4, 4096), [0, 1]) == 138_412_032
    # a transposed gradient (Qwen3's per-head norm weight: [b, s, heads, 128] laid out as [b, heads, s, 128]) is
    # read in memory order: the kept 128 are still the fast dimension; a layout with gaps is left out
    q = (4, 2048, 16, 128)
    assert (A.allocsim.reduction_staging_bytes(q, [0, 1, 2], 4, (2048 * 16 * 128, 128, 2048 * 128, 1))
            == A.allocsim.reduction_staging_bytes(q, [0, 1, 2]) == 134_217_728)
    assert A.allocsim.reduction_staging_bytes(q, [0, 1, 2], 4, (2048 * 16 * 256, 256, 2048 * 256, 1)) == 0
    events = []
    x = torch.empty(8192, 1024, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.empty(4096, 1024, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.empty(4096, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with A.allocsim._recorder(events):
        y = F.linear(x, w, b)
        y.backward(torch.ones_like(y))
    staging = [size for kind, key, size in events if kind == "malloc" and isinstance(key, tuple)
               and key[0] == "reduction_staging"]
    assert staging == [138_412_032]


@pytest.mark.parametrize("zero", [1, 2])
def test_offload_with_accumulation_hands_gradients_to_the_host_norms_only_at_the_boundary(zero, monkeypatch):
    """ZeRO-1/2 with the optimizer on the CPU and gradient accumulation (stage_1_and_2.py copy_grads_in_partition,
    DeepSpeed 0.19.8): before the boundary each gradient is added into its host accumulation buffer through the
    preallocated bf16 staging buffer (async_accumulate_grad_in_cpu_via_gpu: no new GPU block); only the boundary's
    micro-batch makes each gradient's fp64 norm copy and fp32 staging copy. So four micro-batches a step make as many
    norm copies as one, and ZeRO-2's reserve stays that of one micro-batch."""
    from workbench import allocsim
    from workbench.hf import read_config

    cfg = read_config(Path(__file__).resolve().parent / "data" / "hf" / "tiny-llama")
    real, calls = allocsim._fp64_norm, []
    monkeypatch.setattr(allocsim, "_fp64_norm", lambda numel: calls.append(numel) or real(numel))
    monkeypatch.setattr(allocsim, "REPEAT_SETTLED_STEPS", False)  # every step traced, none copied

    def trace(gas):
        calls.clear()
        events = allocsim.trace_hf_deepspeed(cfg, zero_stage=zero, micro_batch=1, seq_length=64, grad_accum=gas,
                                             steps=3, offload_optimizer=True)
        return events, sorted(calls)

    (one, norms_one), (four, norms_four) = trace(1), trace(4)
    assert norms_four == norms_one and len(norms_one) == 3 * sum(1 for _ in _param_numels(cfg))
    if zero == 2:  # ZeRO-1 keeps four micro-batches' gradients no longer than one's, but its epilogue differs
        assert allocsim.replay(four).peak_reserved_bytes == allocsim.replay(one).peak_reserved_bytes


def _param_numels(cfg) -> list:
    """The trainable parameters of a Llama config, one entry each."""
    h, f, v, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    return [v * h, v * h, h] + layers * [h * h, h * kv, h * kv, h * h, h * f, h * f, h * f, h, h]


def test_a_record_checkpointing_every_kth_layer_is_traced_with_that_k(monkeypatch):
    """A corpus record of transformers' every_n_layers=k (``checkpoint_every_n_layers``) is traced with k, so the
    study replays the layers that run kept; records without the field trace every checkpointed layer (k=1)."""
    seen = []
    monkeypatch.setattr(A.allocsim, "trace_hf_deepspeed", lambda config, **kw: seen.append(kw) or [])
    rec = dict(hf_config={"model_type": "llama"}, seq_length=128, options={"attn": "sdpa"},
               gradient_checkpointing=True, ds_config={"train_micro_batch_size_per_gpu": 1,
                                                       "zero_optimization": {"stage": 2}})
    A.trace_hf_deepspeed(dict(rec, checkpoint_every_n_layers=4))
    A.trace_hf_deepspeed(rec)
    assert [(kw["gradient_checkpointing"], kw["checkpoint_every"]) for kw in seen] == [(True, 4), (True, 1)]
