"""GPU kernel time per decoder layer, by kernel, for training steps of corpus shapes at two depths.

A shape is trained (DeepSpeed, one GPU, as ``benchmarks/corpus/measure.py`` does) at its depth and at half of it;
CUDA kernel time per kernel name is taken with ``torch.profiler`` over two steps after three warm-up steps, and the
difference between the two depths divided by the layers between them is one layer's kernel time per step (forward,
backward and any recompute), apart from the embedding, logits, loss and optimizer, which both depths share. Written
as JSON (``--out``) with provenance; ``--summary FILE`` prints it by kernel class beside the time model's layer time.

    python benchmarks/gpu_layer_kernels.py --out OUT.json [--cases fit|fit-80gb|diagnosis]   # on the GPU machine
    python benchmarks/gpu_layer_kernels.py --summary OUT.json      # anywhere
    python benchmarks/gpu_layer_kernels.py --compare results/layer_kernels_h200_fit.json \
        results/layer_kernels_h200_final19.json                    # beside the time model (results/layer_kernels_h200.txt)
    python benchmarks/gpu_layer_kernels.py --write-calibration results/layer_kernels_h100_fit.json \
        results/layer_kernels_h100_fit80.json                      # a GPU's own constants (catalog gpu_kernels)
    python benchmarks/gpu_layer_kernels.py --phases OUT.json       # forward / backward / engine.step() apart

Records taken since the ``--phases`` reading was added also keep each kernel's part of the step
(``kernels_by_phase``: the forward with the loss, the backward, ``engine.step()``; the profiled steps wait for the
GPU at the end of each part so that its kernels fall in its window).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
sys.path.insert(1, str(ROOT / "benchmarks"))
sys.path.insert(2, str(ROOT))

DIAGNOSIS_CASES = [
    # (stack, shape id, zero, attention, micro-batch, checkpointing)
    ("hf-ds", "hf-qwen3-h2560-l18", 2, "sdpa", 8, False),
    ("hf-ds", "hf-phi3-h3072-l16", 2, "sdpa", 4, False),
]
"""Two deep Hugging Face test shapes of final19 whose GPU-bound steps the time model under-predicted by 15-19 %
(``results/layer_kernels_h200_final19.json``): they showed where (test shapes: nothing is fitted on them)."""

FIT_CASES = [
    ("hf-ds", "hf-llama-h2048-l22", 2, "sdpa", 8, False),
    ("hf-ds", "hf-qwen3-h1024-l28", 2, "sdpa", 8, False),
    ("hf-ds", "hf-smollm2-h960-l32", 2, "sdpa", 8, False),
    ("hf-ds", "hf-llama-h2048-l22", 2, "eager", 4, False),
    ("mcore-ds", "mc-h3072-gqa", 2, None, 4, False),
]
"""Fit-split shapes (``benchmarks/accuracy_split.json``) at GPU-bound micro-batches: what the transformers stack's
per-layer memory-bound kernel time is calibrated on; and one megatron-core fit shape for comparison."""

ZERO3_CASES = [
    ("hf-ds", "hf-llama-h2048-l22", 3, "sdpa", 8, False),
    ("hf-ds", "hf-qwen3-h1024-l28", 3, "sdpa", 8, False),
]
"""Two of :data:`FIT_CASES` under ZeRO-3 (same micro-batch, sdpa): what ZeRO-3 adds to a GPU-bound layer's kernels
and step, set beside their ZeRO-2 records (fit shapes)."""

FIT_80GB_CASES = [
    ("hf-ds", "hf-llama-h2048-l22", 2, "eager", 2, False),
    ("mcore-ds", "mc-h3072-gqa", 2, None, 2, False),
]
"""The two :data:`FIT_CASES` that do not fit an 80 GB card at their micro-batch (eager attention's scores,
megatron-core's unfused core), at half of it: what an H100's eager and megatron-core layers are checked on."""

GELU_FIT_CASES = [
    ("mcore-ds", "mc-h4352-gelu-fit", 1, None, 1, False),
    ("mcore-ds", "mc-h3840-gelu-d01-fit", 1, None, 1, False),
    ("mcore-ds", "mc-h3072-gqa", 0, None, 1, False),
]
"""The two GeLU fit shapes with biases (dropout 0 and 0.1) at one micro-batch, where megatron-core GeLU models' steps
are priced 6-20 % slow on some test shapes, and a SwiGLU fit shape at one micro-batch priced within 1 %: which
kernels the time model prices wrong there."""

CASES = {"diagnosis": DIAGNOSIS_CASES, "fit": FIT_CASES, "fit-80gb": FIT_80GB_CASES, "zero3": ZERO3_CASES,
         "gelu-fit": GELU_FIT_CASES}

WARMUP, PROFILED = 3, 2

H200_FIT_RECORDS = ROOT / "benchmarks" / "results" / "layer_kernels_h200_fit.json"
"""The H200's fit-case records: the catalog's layer constants, and what another GPU's score kernels are set against."""


def _layers_key(shape: dict, hf: bool) -> tuple:
    if hf:
        c = shape["config"]
        key = "num_hidden_layers" if "num_hidden_layers" in c else "n_layer"
        return key, c[key]
    return "num_layers", shape["num_layers"]


def _with_layers(shape: dict, hf: bool, layers: int) -> dict:
    key, _ = _layers_key(shape, hf)
    if hf:
        from runs import hf_config_with_layers

        return dict(shape, config=hf_config_with_layers(shape["config"], layers))
    return dict(shape, **{key: layers})


PHASES = ("forward", "backward", "step")
"""The parts of a training step a profiled record's kernels are told apart by (``kernels_by_phase``): the forward
with the loss, the backward (DeepSpeed's gradient hooks included), and ``engine.step()`` (the optimizer and
DeepSpeed's passes around it)."""


def phase_kernel_times(step, steps: int) -> dict:
    """``{kernel name: [microseconds per step, launches per step]}`` of the CUDA kernels ``steps`` calls of ``step``
    run, from ``torch.profiler``, whole (``"all"``) and by part of the step (each of :data:`PHASES`, and
    ``"unplaced"`` for a kernel no part's window holds). ``step`` takes a ``phase`` callable:
    ``with phase(name): ...`` marks one part; it waits for the GPU at the end of the part, so that a part's kernels
    run inside its window on the profiler's clock (:func:`place_kernels`)."""
    import contextlib

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    @contextlib.contextmanager
    def phase(name):
        with record_function(f"phase:{name}"):
            yield
            torch.cuda.synchronize()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(phase)
        torch.cuda.synchronize()
    windows, kernels, host_names = [], [], set()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if not getattr(e, "is_user_annotation", False):
                kernels.append((e.name, e.time_range.start, e.device_time))
        else:
            host_names.add(e.name)
            if e.name.startswith("phase:"):
                windows.append((e.name.split(":", 1)[1], e.time_range.start, e.time_range.end))
    # a record_function range also shows on the GPU's timeline, spanning its kernels: not a kernel
    kernels = [k for k in kernels if k[0] not in host_names and not is_annotation(k[0])]
    return place_kernels(kernels, windows, steps)


ANNOTATIONS = ("phase:", "Optimizer.step#", "Optimizer.zero_grad#")
"""Names of ``record_function`` ranges (this script's parts of the step, torch's optimizer hooks) that the profiler
also puts on the GPU's timeline, spanning the kernels run inside them."""


def is_annotation(name: str) -> bool:
    """Whether a GPU-timeline event of this name is a range annotation (:data:`ANNOTATIONS`), not a kernel."""
    return name.startswith(ANNOTATIONS)


def place_kernels(kernels: list, windows: list, steps: int) -> dict:
    """``{"all" | phase | "unplaced": {kernel name: [microseconds per step, launches per step]}}`` from profiled
    ``kernels`` (``(name, start µs, duration µs)``) and the parts' ``windows`` (``(phase, start µs, end µs)``): a
    kernel belongs to the window its start falls in."""
    import bisect

    windows = sorted(windows, key=lambda w: w[1])
    starts = [w[1] for w in windows]
    out = {k: {} for k in ("all",) + PHASES + ("unplaced",)}
    for name, start, duration in kernels:
        i = bisect.bisect_right(starts, start) - 1
        where = windows[i][0] if i >= 0 and start <= windows[i][2] else "unplaced"
        for part in ("all", where):
            t = out.setdefault(part, {}).setdefault(name, [0.0, 0])
            t[0] += duration / steps
            t[1] += 1 / steps
    return out


def one_case(stack, shape_id, zero, attn, mbs, ckpt, layers) -> dict:
    import contextlib

    import deepspeed
    import torch
    from measure import HF_SHAPES, MCORE_SHAPES, build_hf, build_mcore, ds_config

    hf = stack == "hf-ds"
    shape = _with_layers((HF_SHAPES if hf else MCORE_SHAPES)[shape_id], hf, layers)
    cfg = dict(stack=stack, shape_id=shape_id, zero=zero, attn=attn, mbs=mbs, ckpt=ckpt)
    dev = torch.device("cuda")
    seq = shape["seq_length"]
    if hf:
        model, _, _ = build_hf(shape, cfg)
        vocab = shape["config"]["vocab_size"]
    else:
        model, _ = build_mcore(shape, cfg)
        model = model.to(dev)
        vocab = shape["vocab_size"]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                           if p.requires_grad], config=ds_config(cfg))
    gen = torch.Generator(device=dev).manual_seed(0)
    mask = None if hf else torch.triu(torch.ones(seq, seq, device=dev, dtype=torch.bool), diagonal=1)[None, None]
    pos = None if hf else torch.arange(seq, device=dev)[None].expand(mbs, seq)

    def step(phase=lambda name: contextlib.nullcontext()):
        tokens = torch.randint(0, vocab, (mbs, seq + 1), device=dev, generator=gen)
        with phase("forward"):
            if hf:
                loss = engine(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
            else:
                loss = engine(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
        with phase("backward"):
            engine.backward(loss)
        with phase("step"):
            engine.step()

    walls = []
    for _ in range(WARMUP + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    timed = phase_kernel_times(step, PROFILED)
    rec = dict(stack=stack, shape_id=shape_id, zero=zero, attn=attn, mbs=mbs, ckpt=ckpt, layers=layers,
               step_seconds=walls, kernels=timed.pop("all"), kernels_by_phase=timed)
    del engine, model
    gc.collect()
    torch.cuda.empty_cache()
    return rec


def measure(out: Path, cases: str) -> None:
    """Every case of ``CASES[cases]`` in its own process (DeepSpeed keeps a finished engine's memory), both depths
    in that process, the records appended to ``out`` as they finish."""
    import subprocess

    for i in range(len(CASES[cases])):
        subprocess.run([sys.executable, __file__, "--out", str(out), "--cases", cases, "--case", str(i)], check=False)


def measure_case(out: Path, case: tuple) -> None:
    import deepspeed
    import torch
    from megatron.core import parallel_state, tensor_parallel

    from gpu_provenance import gpu_provenance

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29611", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                      LOCAL_WORLD_SIZE="1")
    torch.cuda.set_device(0)
    deepspeed.init_distributed(dist_backend="nccl")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    from measure import HF_SHAPES, MCORE_SHAPES

    doc = (json.loads(out.read_text()) if out.exists() else
           {"provenance": gpu_provenance(script="benchmarks/gpu_layer_kernels.py"), "runs": []})
    for stack, shape_id, zero, attn, mbs, ckpt in (case,):
        hf = stack == "hf-ds"
        _, full = _layers_key((HF_SHAPES if hf else MCORE_SHAPES)[shape_id], hf)
        for layers in (full, full // 2):
            try:
                doc["runs"].append(one_case(stack, shape_id, zero, attn, mbs, ckpt, layers))
            except Exception as exc:  # recorded, the next case still runs
                doc["runs"].append(dict(stack=stack, shape_id=shape_id, layers=layers,
                                        error=f"{type(exc).__name__}: {exc}"[:400]))
            out.write_text(json.dumps(doc))
            print(shape_id, layers, "ok" if "error" not in doc["runs"][-1] else doc["runs"][-1]["error"], flush=True)


KERNEL_CLASSES = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "sm90", "splitk", "cublas")),
    ("optimizer", ("multi_tensor", "adam")),
    ("reduction", ("reduce_kernel", "norm", "softmax", "cross_entropy", "nll")),
    ("copy/cast", ("copy", "cat", "memcpy", "memset", "fill")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "index")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def depth_pairs(path: Path) -> list:
    """``(key, deep, half)`` for every case of the records ``path`` measured at both depths; ``key`` is
    ``(stack, shape_id, mbs, ckpt, attn)``."""
    runs = [r for r in json.loads(path.read_text())["runs"] if "error" not in r]
    out = []
    for key in sorted({(r["stack"], r["shape_id"], r["mbs"], r["ckpt"], r["attn"] or "") for r in runs}):
        pair = sorted((r for r in runs if (r["stack"], r["shape_id"], r["mbs"], r["ckpt"], r["attn"] or "") == key),
                      key=lambda r: -r["layers"])
        if len(pair) == 2:
            out.append((key, *pair))
    return out


def per_layer(deep: dict, half: dict, group=kernel_class) -> dict:
    """One layer's kernel time per step from a pair of depths: ``{group(kernel name): [ms, launches]}`` (the deep
    run's kernels less the shallow one's, over the layers between them); ``group`` returning ``None`` leaves a
    kernel out."""
    n = deep["layers"] - half["layers"]
    out = {}
    for r, sign in ((deep, 1), (half, -1)):
        for name, (us, count) in r["kernels"].items():
            g = group(name)
            if g is not None:
                t = out.setdefault(g, [0.0, 0.0])
                t[0] += sign * us / n / 1e3
                t[1] += sign * count / n
    return out


def _wall_ms(rec: dict) -> float:
    import statistics

    return statistics.median(rec["step_seconds"][WARMUP:]) * 1e3


def summary(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    lines = [f"{doc['provenance'].get('gpu')} {doc['provenance'].get('date_utc')} torch {doc['provenance'].get('torch')}"]
    for key, deep, half in depth_pairs(path):
        n = deep["layers"] - half["layers"]
        classes = {c: v[0] for c, v in per_layer(deep, half).items()}
        busy = {r["layers"]: sum(us for us, _ in r["kernels"].values()) / 1e3 for r in (deep, half)}
        wall = {r["layers"]: _wall_ms(r) for r in (deep, half)}
        lines.append(f"{key[0]} {key[1]} {key[4]} mbs {key[2]}{' ckpt' if key[3] else ''}: step {wall[deep['layers']]:.1f} ms "
                     f"({deep['layers']} layers) / {wall[half['layers']]:.1f} ms ({half['layers']}); GPU busy "
                     f"{busy[deep['layers']]:.1f} / {busy[half['layers']]:.1f} ms; per layer: wall "
                     f"{(wall[deep['layers']] - wall[half['layers']]) / n:.2f} ms, kernels "
                     f"{(busy[deep['layers']] - busy[half['layers']]) / n:.2f} ms = "
                     + ", ".join(f"{c} {v:.2f}" for c, v in sorted(classes.items(), key=lambda x: -x[1])))
        top = per_layer(deep, half, group=lambda name: name)
        for name, (ms, cnt) in sorted(top.items(), key=lambda x: -x[1][0])[:12]:
            lines.append(f"    {ms:7.3f} ms {cnt:6.1f}x  {kernel_class(name):<11} {name[:110]}")
    return lines


def _spec(shape_id: str, attn, layers: int):
    """The workbench's ModelSpec of a corpus shape (as the accuracy benchmark describes it,
    ``count_layer_ops_cpu.shape_model``) at ``layers`` layers."""
    from count_layer_ops_cpu import shape_model

    return shape_model(shape_id, attn).replace(num_layers=layers)


def record_gpu(doc: dict):
    """The catalog GPU a record file was measured on: its provenance names the device as a corpus record's does
    (``describe.record_gpu``; the H200 for a record without one)."""
    from describe import record_gpu as catalog_name

    from workbench import catalog

    return catalog.gpu(catalog_name(doc))


def measured_parts(deep: dict, half: dict) -> dict:
    """One layer's measured kernel time per step (ms) by part: ``gemm``, ``attention`` (the fused attention kernel),
    ``optimizer``, ``other`` and ``memory-bound`` (every element-wise, copy/cast and reduction kernel)."""
    return {k: v[0] for k, v in per_layer(deep, half, group=lambda name: (
        kernel_class(name) if kernel_class(name) in ("gemm", "attention", "optimizer", "other")
        else "memory-bound")).items()}


def _case_time(cluster, key: tuple, rec: dict):
    """The time model's estimate for one record of a case ``key`` (``(stack, shape_id, mbs, ckpt, attn)``) at its
    depth: one GPU, DeepSpeed at the record's ZeRO stage, fused Adam, as the case ran."""
    import warnings

    from workbench.estimate import estimate
    from workbench.specs import ParallelPlan

    stack, shape_id, mbs, ckpt, attn = key
    plan = ParallelPlan(engine="deepspeed", zero_stage=rec["zero"], world_size=1, micro_batch_size=mbs,
                        global_batch_size=mbs, recompute="full" if ckpt else "none", adam="fused")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimate(_spec(shape_id, attn or None, rec["layers"]), cluster, plan, checks=False).time


def priced_parts(inputs: dict) -> tuple:
    """What the time model prices for one layer per step (ms), from its step inputs: weight GEMMs (3 x the
    forward's), the attention core (forward + backward), and the rest of the layer's forward + backward (its
    memory-bound kernels)."""
    from workbench import timing

    terms = timing.step_time_terms(**inputs)
    gemm = 3 * float(terms["layer_weight_gemm_seconds"]) * 1e3
    att = (float(terms["core_attention_seconds"]) + float(terms["core_attention_backward_seconds"])) * 1e3
    layer = (float(terms["layer_forward_seconds"]) + float(terms["layer_backward_seconds"])) * 1e3
    return gemm, att, layer - gemm - att


def model_comparison(path: Path) -> list[str]:
    """Per case: one layer's measured kernel time per step by part — GEMMs, the attention kernel, and the
    memory-bound rest (element-wise, copies and casts, reductions) — beside what the time model prices for the same
    layer (weight GEMMs 3 x the forward's, attention core forward + backward, the rest of the layer's forward +
    backward), and the slope of the step over depth, measured and priced."""
    from workbench.specs import ClusterSpec

    doc = json.loads(path.read_text())
    cluster = ClusterSpec(gpu=record_gpu(doc), gpus_per_node=1, num_nodes=1)
    lines = [f"{path.name}: {doc['provenance'].get('gpu')} {doc['provenance'].get('date_utc')}; per layer per step, "
             f"ms: measured / priced"]
    for key, deep, half in depth_pairs(path):
        n = deep["layers"] - half["layers"]
        parts = measured_parts(deep, half)
        stack, shape_id, mbs, ckpt, attn = key
        t_deep, t_half = (_case_time(cluster, key, r) for r in (deep, half))
        gemm, att, rest = priced_parts(t_deep.inputs)
        lines.append(f"  {stack:<8} {shape_id:<22} {attn or 'unfused':<7} mbs {mbs}: step slope "
                     f"{(_wall_ms(deep) - _wall_ms(half)) / n:6.2f} / "
                     f"{(t_deep.step_seconds - t_half.step_seconds) / n * 1e3:6.2f}; GEMMs {parts.get('gemm', 0):5.2f} / "
                     f"{gemm:5.2f}; attention kernel {parts.get('attention', 0):5.2f} / {att:5.2f}; memory-bound "
                     f"{parts.get('memory-bound', 0):5.2f} / {rest:5.2f} (x{parts.get('memory-bound', 0) / rest:.1f})")
    return lines


def step_comparison(path: Path) -> list[str]:
    """Per record (each depth of each case): the whole step's wall time, GPU busy time (the profiled kernels) and
    idle time, its kernel time by class, beside the time model's step and its ``compute``, ``optimizer`` and
    ``dp_comm`` terms; and per case the step extrapolated to no layers (the step less its depth times the slope):
    what the embedding, logits, loss, optimizer and fixed per-step costs take, measured and priced."""
    from workbench.specs import ClusterSpec

    doc = json.loads(path.read_text())
    cluster = ClusterSpec(gpu=record_gpu(doc), gpus_per_node=1, num_nodes=1)
    lines = [f"{path.name}: {doc['provenance'].get('gpu')} {doc['provenance'].get('date_utc')}; whole step, ms"]
    for key, deep, half in depth_pairs(path):
        stack, shape_id, mbs, ckpt, attn = key
        priced = {}
        for rec in (deep, half):
            t = _case_time(cluster, key, rec)
            priced[rec["layers"]] = t.step_seconds * 1e3
            classes = {}
            for name, (us, _) in rec["kernels"].items():
                classes[kernel_class(name)] = classes.get(kernel_class(name), 0.0) + us / 1e3
            busy, wall = sum(classes.values()), _wall_ms(rec)
            b = {k: v * 1e3 for k, v in t.breakdown.items()}
            lines.append(f"  {shape_id:<22} ZeRO-{rec['zero']} mbs {mbs} {rec['layers']} layers: wall {wall:6.1f}, GPU "
                         f"busy {busy:6.1f}, idle {wall - busy:4.1f}; priced {priced[rec['layers']]:6.1f} = compute "
                         f"{b['compute']:5.1f} + optimizer {b['optimizer']:5.1f} + dp_comm {b['dp_comm']:4.1f} + other "
                         f"{priced[rec['layers']] - b['compute'] - b['optimizer'] - b['dp_comm']:4.1f}")
            lines.append("      kernels: " + ", ".join(f"{c} {v:.2f}" for c, v in sorted(classes.items(),
                                                                                          key=lambda x: -x[1])))
        slope_m, at0_m = slope_and_at_none(_wall_ms(deep), _wall_ms(half), deep, half)
        slope_p, at0_p = slope_and_at_none(priced[deep["layers"]], priced[half["layers"]], deep, half)
        lines.append(f"  {shape_id:<22} per layer {slope_m:5.2f} / {slope_p:5.2f} priced; at no layers "
                     f"{at0_m:5.1f} / {at0_p:5.1f} priced ({at0_p - at0_m:+.1f})")
    return lines


def slope_and_at_none(deep_value: float, half_value: float, deep: dict, half: dict) -> tuple:
    """``(per layer, at no layers)`` of a quantity taken at the depths of the records ``deep`` and ``half``: the slope
    over the layers between them, and the shallower depth's value less its layers times that slope (the embedding,
    logits, loss, optimizer over them and the fixed per-step costs: what does not grow with depth)."""
    slope = (deep_value - half_value) / (deep["layers"] - half["layers"])
    return slope, half_value - half["layers"] * slope


def phase_parts(deep: dict, half: dict) -> dict:
    """Measured kernel time per step (ms) of each part of the step (:data:`PHASES`) from a pair of depths with
    ``kernels_by_phase``: ``{phase: (per layer, at no layers)}`` (:func:`slope_and_at_none`)."""
    def busy(rec, phase):
        return sum(us for us, _ in rec["kernels_by_phase"].get(phase, {}).values()) / 1e3

    return {phase: slope_and_at_none(busy(deep, phase), busy(half, phase), deep, half) for phase in PHASES}


def priced_phases(t) -> dict:
    """What the time model prices for each part of one step of a time estimate ``t`` (ms): ``forward`` and
    ``backward`` of the micro-batches (their host waits and any recompute included), and ``step``: the optimizer term
    with the data-parallel communication."""
    m = float(t.inputs["num_microbatches"])
    return {"forward": t.microbatch_forward_seconds * m * 1e3, "backward": t.microbatch_backward_seconds * m * 1e3,
            "step": (t.breakdown["optimizer"] + t.breakdown["dp_comm"]) * 1e3}


def phase_comparison(path: Path) -> list[str]:
    """Per case of records with ``kernels_by_phase``: each part of the step (forward, backward, ``engine.step()``)
    per layer and at no layers, measured GPU kernel time beside what the time model prices for it, and the kernels
    no part's window held (none expected)."""
    from workbench.specs import ClusterSpec

    doc = json.loads(path.read_text())
    cluster = ClusterSpec(gpu=record_gpu(doc), gpus_per_node=1, num_nodes=1)
    lines = [f"{path.name}: {doc['provenance'].get('gpu')} {doc['provenance'].get('date_utc')}; GPU kernel time by "
             f"part of the step, ms: measured / priced"]
    for key, deep, half in depth_pairs(path):
        if "kernels_by_phase" not in deep or "kernels_by_phase" not in half:
            continue
        stack, shape_id, mbs, ckpt, attn = key
        measured = phase_parts(deep, half)
        p_deep, p_half = (priced_phases(_case_time(cluster, key, r)) for r in (deep, half))
        cells = []
        for phase in PHASES:
            slope, at0 = slope_and_at_none(p_deep[phase], p_half[phase], deep, half)
            m_slope, m_at0 = measured[phase]
            cells.append(f"{phase} {m_slope:5.2f} / {slope:5.2f} a layer, {m_at0:5.2f} / {at0:5.2f} at none")
        unplaced = sum(us for r in (deep, half) for us, _ in r["kernels_by_phase"].get("unplaced", {}).values()) / 1e3
        lines.append(f"  {shape_id:<22} ZeRO-{deep['zero']} mbs {mbs}: " + "; ".join(cells)
                     + f"; unplaced {unplaced:.2f}")
    return lines


def memory_bound_ms(deep: dict, half: dict) -> float:
    """One layer's memory-bound kernel time per step (ms) from a pair of depths: element-wise, copy/cast and
    reduction kernels, without DeepSpeed's device-to-device copies of gradients into its reduce bucket (``Memcpy``:
    priced by the time model's gradient-accumulation bytes)."""
    def group(name):
        memory = kernel_class(name) in ("elementwise", "copy/cast", "reduction") and not name.startswith("Memcpy")
        return "memory-bound" if memory else None

    return per_layer(deep, half, group=group).get("memory-bound", [0.0])[0]


def memory_efficiency_rows(path: Path, census: Path) -> list[dict]:
    """Per transformers case of ``path`` (sdpa, no checkpointing: eager's score kernels are priced apart): the bytes
    one layer's memory-bound kernels move per step as ``benchmarks/count_layer_bytes_cpu.py`` counted them
    (``census``: its records) × tokens, their measured time (:func:`memory_bound_ms`) and the fraction of the
    datasheet HBM bandwidth that makes."""
    from count_layer_bytes_cpu import bytes_per_token
    from measure import HF_SHAPES

    counted = {(r["shape_id"], r["attn"]): r for r in map(json.loads, census.read_text().splitlines())}
    hbm = record_gpu(json.loads(path.read_text())).hbm_gb_per_s * 1e9
    out = []
    for (stack, shape_id, mbs, ckpt, attn), deep, half in depth_pairs(path):
        if stack != "hf-ds" or attn != "sdpa" or ckpt:
            continue
        key = (shape_id, mbs, attn)
        rec = counted.get((key[0], key[2])) or counted.get((key[0].rsplit("-l", 1)[0], key[2]))
        if rec is None:
            continue
        shape = HF_SHAPES[key[0]]
        total = sum(bytes_per_token(rec, shape["config"])) * key[1] * shape["seq_length"]
        ms = memory_bound_ms(deep, half)
        out.append(dict(shape_id=key[0], mbs=key[1], counted_gb=total / 1e9, measured_ms=ms,
                        efficiency=total / (ms / 1e3) / hbm))
    return out


def gemm_scale_rows(path: Path) -> list[dict]:
    """Per transformers case of ``path`` (sdpa, no checkpointing): one layer's measured GEMM kernel time per step
    against the weight GEMMs the curve prices for it (3 x the forward's, at a time scale of 1)."""
    from workbench import timing
    from workbench.specs import ClusterSpec

    cluster = ClusterSpec(gpu=record_gpu(json.loads(path.read_text())), gpus_per_node=1, num_nodes=1)
    out = []
    for key, deep, half in depth_pairs(path):
        stack, shape_id, mbs, ckpt, attn = key
        if stack != "hf-ds" or attn != "sdpa" or ckpt:
            continue
        t = _case_time(cluster, key, deep)
        terms = timing.step_time_terms(**dict(t.inputs, weight_gemm_time_scale=1.0))
        priced = 3 * float(terms["layer_weight_gemm_seconds"]) * 1e3
        measured = per_layer(deep, half).get("gemm", [0.0])[0]
        out.append(dict(shape_id=shape_id, mbs=mbs, measured_ms=measured, priced_ms=priced, scale=measured / priced))
    return out


def score_scale_rows(path: Path, reference: Path) -> list[dict]:
    """Per unfused case of ``path`` (transformers eager, megatron-core's local attention) also in ``reference`` (the
    H200's records of the same stack, shape and attention; any micro-batch): how much more of its datasheet
    bandwidth this GPU's materialised-score kernels reach than the H200's. The layer's memory-bound kernel time per
    sample, measured on each GPU, gives their ratio; the time model's memory-bound rest on this GPU is split into
    the score kernels' and the others' by pricing it with the score kernels at the layer's scale and at none; the
    score scale is the one at which the priced ratio to the H200's equals the measured ratio, the others keeping the
    layer's measured scale."""
    from workbench.specs import ClusterSpec

    doc, ref = json.loads(path.read_text()), json.loads(reference.read_text())
    cluster = ClusterSpec(gpu=record_gpu(doc), gpus_per_node=1, num_nodes=1)
    ref_cluster = ClusterSpec(gpu=record_gpu(ref), gpus_per_node=1, num_nodes=1)
    ref_pairs = {(k[0], k[1], k[3], k[4]): (k, deep, half) for k, deep, half in depth_pairs(reference)}
    out = []
    for key, deep, half in depth_pairs(path):
        stack, shape_id, mbs, ckpt, attn = key
        match = ref_pairs.get((stack, shape_id, ckpt, attn))
        if attn not in ("eager", "") or match is None:
            continue
        ref_key, ref_deep, ref_half = match
        measured = measured_parts(deep, half).get("memory-bound", 0.0) / mbs
        ref_measured = measured_parts(ref_deep, ref_half).get("memory-bound", 0.0) / ref_key[2]
        inputs = _case_time(cluster, key, deep).inputs
        layer_scale = float(inputs["layer_hbm_scale"])
        at_layer = priced_parts(dict(inputs, score_hbm_scale=layer_scale))[2]
        unscaled = priced_parts(dict(inputs, score_hbm_scale=1.0))[2]
        scores = (unscaled - at_layer) / (1 - 1 / layer_scale)  # the score kernels' ms at the H200's fraction
        ref_priced = priced_parts(_case_time(ref_cluster, ref_key, ref_deep).inputs)[2] / ref_key[2]
        target = measured / ref_measured * ref_priced * mbs  # this GPU's rest, priced in the measured ratio
        out.append(dict(stack=stack, shape_id=shape_id, attn=attn or "unfused", mbs=mbs, reference_mbs=ref_key[2],
                        measured_ratio=measured / ref_measured, scale=scores / (target - (unscaled - scores))))
    return out


def write_calibration(paths: list, census: Path, reference: Path = H200_FIT_RECORDS) -> dict:
    """From fit-split records ``paths`` (one GPU): the median fraction of the HBM datasheet at which a transformers
    layer's counted memory-bound bytes move (:func:`memory_efficiency_rows`) and the median measured / priced time of
    its weight GEMMs (:func:`gemm_scale_rows`), with their source. Records of the H200 go into catalog
    ``transformers.layer_memory_hbm_efficiency`` and ``transformers.weight_gemm_time_scale`` (the constants every
    GPU takes); records of another GPU into ``gpu_kernels.<its catalog name>``, that GPU's own
    (:func:`workbench.timing.gpu_kernel_constants`), with the median score-kernel scale of its unfused cases against
    the H200's ``reference`` records (:func:`score_scale_rows`) where it has any. Returns the values."""
    import statistics

    gpus = {record_gpu(json.loads(p.read_text())).name for p in paths}
    if len(gpus) != 1:
        raise SystemExit(f"--write-calibration: records of one GPU, got {sorted(gpus)}")
    gpu = record_gpu(json.loads(paths[0].read_text()))
    mem = [r for p in paths for r in memory_efficiency_rows(p, census)]
    gemm = [r for p in paths for r in gemm_scale_rows(p)]
    scores = [] if gpu.name == "H200" else [r for p in paths for r in score_scale_rows(p, reference)]
    out = dict(layer_memory_hbm_efficiency=round(statistics.median(r["efficiency"] for r in mem), 3),
               weight_gemm_time_scale=round(statistics.median(r["scale"] for r in gemm), 3))
    cat = ROOT / "workbench" / "catalog" / "efficiency.json"
    cal = json.loads(cat.read_text())
    names = ", ".join(p.name for p in paths)
    measured = (
        f"transformers layers' GPU time per kernel class, measured by benchmarks/gpu_layer_kernels.py on fit-split "
        f"shapes ({names}: torch.profiler kernel time at two depths, one {gpu.name}, DeepSpeed ZeRO-2, sdpa, 16 k "
        f"tokens per micro-batch). layer_memory_hbm_efficiency: the median fraction of the {gpu.hbm_gb_per_s:.0f} "
        "GB/s datasheet at which the bytes benchmarks/count_layer_bytes_cpu.py counts for a layer's memory-bound "
        "kernels (norms with their fp32 upcast, rotary embedding, activation and gate product, residual adds, casts, "
        "their backwards; layer_memory_bytes, per design) move in the measured time of those kernels: "
        + ", ".join(f"{r['shape_id']} {r['efficiency']:.3f}" for r in mem))
    gemms = ("weight_gemm_time_scale: the median measured / priced time of a layer's weight GEMMs (the isolated-GEMM "
             "curve of h200_measured gives less than the profiler sees in these layers): "
             + ", ".join(f"{r['shape_id']} {r['scale']:.3f}" for r in gemm))
    if gpu.name == "H200":
        cal["transformers"].update(out)
        cal["transformers"]["layer_kernels_source"] = (
            measured + "; they replace the per-layer activation count x memory_passes for transformers layers, which "
            "priced 1.8-3.7x less. " + gemms + "; applied to the weight and logits GEMMs of transformers models. Not "
            "fitted on the corpus.")
    else:
        source = measured + ". " + gemms + "."
        if scores:
            out["score_hbm_scale"] = round(statistics.median(r["scale"] for r in scores), 3)
            source += (
                " score_hbm_scale: how much more of the datasheet unfused attention's score kernels (softmax, mask, "
                "dropout, casts over the scores) reach than the H200's, from the same shapes' unfused cases at a micro-"
                f"batch that fits this GPU against {reference.name} (benchmarks/gpu_layer_kernels.py "
                "score_scale_rows: the measured memory-bound time per sample on the two GPUs, the layer's other "
                "memory-bound kernels at this GPU's layer scale), median of "
                + ", ".join(f"{r['shape_id']} {r['attn']} {r['scale']:.3f} (measured x{r['measured_ratio']:.3f} "
                            f"the H200's per sample)" for r in scores))
        section = cal.setdefault("gpu_kernels", {"about": GPU_KERNELS_ABOUT})
        section["about"] = GPU_KERNELS_ABOUT
        # what other benchmarks measured on this GPU (gpu_hf_moe_host.py's MoE block) stays
        section[gpu.name] = {**section.get(gpu.name, {}), **out, "source": source + " Not fitted on the corpus."}
    cat.write_text(json.dumps(cal, indent=2, ensure_ascii=False) + "\n")
    return out


GPU_KERNELS_ABOUT = (
    "Layer-kernel constants measured on a GPU other than the H200 (benchmarks/gpu_layer_kernels.py --write-calibration "
    "on its fit-case records): its transformers layers' weight_gemm_time_scale replaces the H200's, and its "
    "layer_memory_hbm_efficiency over the H200's (transformers.layer_memory_hbm_efficiency) scales the bandwidth of "
    "every memory-bound kernel of a layer and the loss, in every stack (workbench.timing.gpu_kernel_constants: "
    "layer_hbm_scale), but unfused attention's score kernels, which take its score_hbm_scale where it has one "
    "(measured on the eager and megatron-core fit cases at a micro-batch that fits the GPU). The fused optimizer "
    "step takes its optimizer_hbm_scale where it has one (benchmarks/gpu_deepspeed_step.py --scale, "
    "--write-calibration). Other bandwidths (torch's foreach AdamW, gradient copies, ZeRO-3's) keep the curve's "
    "hbm_efficiency. A GPU not listed takes the H200's constants at its own datasheet bandwidth.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summary", type=Path)
    ap.add_argument("--compare", type=Path, nargs="+", help="records to set beside the time model, per layer")
    ap.add_argument("--steps", type=Path, nargs="+", help="records: the whole step (wall, GPU busy, kernels by class) "
                                                          "beside the time model's terms, and at no layers")
    ap.add_argument("--phases", type=Path, nargs="+", help="records: kernel time of the forward, the backward and "
                                                           "engine.step() per layer and at no layers, beside the "
                                                           "time model's")
    ap.add_argument("--memory", type=Path, nargs="+", help="records: counted bytes (--census) against measured time "
                                                           "per layer")
    ap.add_argument("--census", type=Path, default=ROOT / "benchmarks" / "results" / "layer_bytes_cpu.jsonl",
                    help="benchmarks/count_layer_bytes_cpu.py's records")
    ap.add_argument("--write-calibration", type=Path, nargs="+",
                    help="fit-split records of one GPU: store the transformers layers' memory-bound bandwidth and "
                         "weight-GEMM time scale (and, for a GPU other than the H200, its score kernels' scale)")
    ap.add_argument("--reference", type=Path, default=H200_FIT_RECORDS,
                    help="the H200's fit records the score kernels' scale is measured against")
    ap.add_argument("--cases", choices=sorted(CASES), default="fit")
    ap.add_argument("--case", type=int, help="run only this case of --cases, in this process")
    args = ap.parse_args(argv)
    if args.summary:
        print("\n".join(summary(args.summary)))
        return 0
    if args.write_calibration:
        print(write_calibration(args.write_calibration, args.census, args.reference))
        return 0
    if args.memory:
        for path in args.memory:
            for r in memory_efficiency_rows(path, args.census):
                print(f"{path.name}: {r['shape_id']:<22} mbs {r['mbs']}: counted {r['counted_gb']:6.2f} GB per layer "
                      f"per step, measured {r['measured_ms']:6.2f} ms -> {r['efficiency']:.3f} of the HBM datasheet")
        return 0
    if args.steps:
        for path in args.steps:
            print("\n".join(step_comparison(path)))
        return 0
    if args.phases:
        for path in args.phases:
            print("\n".join(phase_comparison(path)))
        return 0
    if args.compare:
        for path in args.compare:
            print("\n".join(model_comparison(path)))
        return 0
    if not args.out:
        ap.error("--out or --summary")
    if args.case is not None:
        measure_case(args.out, CASES[args.cases][args.case])
    else:
        measure(args.out, args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
