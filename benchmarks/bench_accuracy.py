"""Held-out accuracy of the memory and time models on measured runs (the H200 corpus unless --corpus names another).

Reads every measured run — the measurement corpus (``benchmarks/corpus/h200_runs.jsonl``: a plain user-style
training script and the launcher, megatron-core under DeepSpeed and under its own DDP, Hugging Face models under
DeepSpeed) and the older runs of ``benchmarks/h200_runs.py`` — and splits them BY MODEL SHAPE with the committed
``benchmarks/accuracy_split.json``: constants may only be fitted on ``fit`` shapes; accuracy is what the ``test``
shapes give. For each run the workbench's own ``estimate`` is compared with what was measured:

* allocated   ``memory.allocated_bytes`` vs ``torch.cuda.max_memory_allocated`` (less what a previous run in the
              same process still held when this one started);
* device      ``memory.per_gpu_peak_bytes`` vs ``max_memory_reserved`` + memory outside the allocator
              (``total − free − reserved``): what ``nvidia-smi`` shows and what decides an OOM;
* step        ``time.step_seconds`` vs the median timed step.

Errors are (predicted − measured) / measured. Printed per split and per engine: runs, median |error|, worst |error|,
how many runs are under-estimated and the worst under-estimate (an under-estimated device total is an OOM).
Runs with PyTorch's expandable-segments allocator (corpus group ``expseg``, ``PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True``) are scored with the plan's ``expandable_segments`` on, in tables of their own beside the
same configurations with the default allocator; ``--overheads`` also prints their fitted allocator reserve, and how
much memory other processes held on the GPU when each one-GPU run started (counted outside the allocator).
``--loso`` also prints, for the fit split, leave-one-shape-out errors of the constants this benchmark fits
(``workbench.memory.fit_overheads``: memory outside the allocator per engine, allocator reserve).

    python benchmarks/bench_accuracy.py [--runs] [--loso] [--zero3-host] [--regimes] [--corpus PATH] [--markdown PATH]
    python benchmarks/bench_accuracy.py --refit-time [--refit-only PREFIX,...] [--with-hf-zero3] [--write]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SPLIT = ROOT / "benchmarks" / "accuracy_split.json"
CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
QUANTITIES = ("allocated", "device", "step")
BAND_QUANTILE = 0.9
"""The error band spans the 10th to 90th percentile of measured / predicted on the test split (the worst is kept
beside it in the band file)."""
GiB = 2**30
FRESH_AFTER = "2026-11-30T21:00"
"""Test shapes first measured after this time (UTC, the runs' ``provenance.date_utc``) are also reported on their own
as "fresh shapes": the main memory fixes of that evening (attention working set, tied-embedding gradient, DeepSpeed
buffer timing, ZeRO-3 gradient dtype) were designed before they existed, so they are held out from those terms'
design as well as from the constants. Two later terms (ZeRO-1/2's offload staging buffer, the per-engine NCCL figure)
were chosen on the code and the fit split after these runs had been seen."""


# ----------------------------------------------------------------------------------------------------------------
# Runs as (model, cluster, plan, measured)
# ----------------------------------------------------------------------------------------------------------------
def shape_id_of(model) -> str:
    """The shape id of a run that does not carry one (older runs, launcher runs): its dimensions."""
    return f"gpt-h{model.hidden_size}-l{model.num_layers}-s{model.seq_length}"


def old_runs() -> list[dict]:
    """``benchmarks/h200_runs.py``'s 32 runs (one 24-layer h2048 shape; reserved/outside only for 16 of them)."""
    from h200_runs import all_runs

    out = []
    for r in all_runs():
        device = (r["reserved_bytes"] + r["outside_bytes"]) if r.get("reserved_bytes") is not None else None
        out.append(dict(source="h200_runs", stack=r["group"], run_id=r["name"], shape_id=shape_id_of(r["model"]),
                        model=r["model"], cluster=r["cluster"], plan=r["plan"],
                        measured=dict(allocated=r["allocated_bytes"], device=device, step=r["step_seconds"],
                                      reserved=r.get("reserved_bytes"), outside=r.get("outside_bytes"))))
    return out


def _model_fields(dims: dict) -> dict:
    from dataclasses import fields

    from workbench.specs import ModelSpec

    names = {f.name for f in fields(ModelSpec) if f.init}
    return {k: v for k, v in dims.items() if k in names}


def mcore_shape_spec(shape_id: str, dims: dict):
    """The ``ModelSpec`` of a megatron-core corpus shape: its dimensions, the local spec's unfused attention."""
    from workbench.specs import ModelSpec

    return ModelSpec(name=shape_id, attention="unfused", **_model_fields(dims))


def hf_shape_spec(shape_id: str, config: dict, seq_length: int, attn):
    """The ``ModelSpec`` of a transformers corpus shape: its config imported at ``seq_length`` with ``attn``."""
    from workbench.hf import import_hf

    return import_hf(config, seq_length=int(seq_length), attn_implementation=attn, name=shape_id).spec


def _adam_from_class(name) -> str:
    return "torch" if name in ("AdamW", "Adam") else "fused"


def step_traces(rec: dict) -> list:
    """Each rank's per-step wall times (warm-up included) of a corpus record: ``per_rank`` of a torchrun run, else
    the record's own ``step_seconds``; ``[]`` for records without them (launcher runs keep only their median)."""
    ranks = [p.get("step_seconds") for p in rec.get("per_rank") or []]
    lists = [s for s in ranks if s] or ([rec["step_seconds"]] if rec.get("step_seconds") else [])
    return [list(map(float, s)) for s in lists]


def steady_step_seconds(rec: dict):
    """The measured steady-state step time of a corpus record, the one statistic every score and fit reads: the
    median of each rank's last ``timed_steps`` steps (the steps measure.py times after its warm-up; the record
    says how many: 3 of 6 in every record so far, 6 of 12 for later ZeRO-3 runs, ``benchmarks/corpus/step_stats.py``
    says why), the slowest rank's for a multi-rank run. Records without per-step lists (launcher runs) keep their
    recorded ``step_seconds_median``. The traces alone justify no other statistic of the existing 6-step lists: the
    fastest timed step, the last step or the median of the last 2 leave the spread of the repeated configurations
    where it is (median 16-20 %, worst 72-74 %, against 17 % / 74 %); the median of the last 4 lowers it (13 % /
    55 %) only by taking in the third step, still warming up in the faster processes (hf-llama-h2048 ZeRO-3: 146 ms
    beside 115). That spread is between processes, not between steps."""
    from corpus.step_stats import steady_seconds

    traces = step_traces(rec)
    timed = int(rec.get("timed_steps") or 0)
    if not traces or timed < 1:
        return rec.get("step_seconds_median")
    return max(steady_seconds(s, timed) for s in traces)


def corpus_run(rec: dict):
    """One corpus record as a run dict, or ``None`` when it did not complete or cannot be described."""
    from corpus.describe import HF_STACKS, checkpointed_layers, record_gpu, record_host, zero_plan_fields
    from workbench import catalog
    from workbench.specs import ClusterSpec, ParallelPlan

    oom = rec.get("status") == "oom"
    if not oom and (rec.get("status") not in ("ok", "completed") or not rec.get("peak_allocated_bytes")):
        return None
    o = rec.get("options") or {}
    if o.get("cap_bytes"):  # allocator capped below its free reserve (group pressure): not a default-allocator run
        return None
    from workbench.configs.launch import expandable_in_conf

    # PyTorch's expandable-segments allocator (group expseg): scored with the plan's option on, in tables of its own
    expandable = bool(o.get("expandable_segments") or expandable_in_conf(rec.get("pytorch_cuda_alloc_conf")))
    world = int(rec.get("world_size") or o.get("world_size") or 1)
    mbs = int(rec.get("micro_batch_size") or o.get("mbs") or 1)
    gas = int(rec.get("gradient_accumulation_steps") or o.get("gas") or 1)
    stack = rec.get("stack") or ("launcher" if rec.get("catalog_model") else "?")
    offload = o.get("offload") or "none"
    offload_params = o.get("offload_params") or "none"
    tp, pp, ep = int(o.get("tp", 1)), int(o.get("pp", 1)), int(o.get("ep", 1))  # torchrun runs of measure.py
    common = dict(world_size=world, micro_batch_size=mbs, global_batch_size=mbs * gas * (world // (tp * pp)),
                  precision="bf16", expandable_segments=expandable)
    common.update({k: v for k, v in (("tensor_parallel", tp), ("pipeline_parallel", pp), ("expert_parallel", ep))
                   if v > 1})
    if stack in ("mcore-ds", "mcore-ddp"):
        model = mcore_shape_spec(rec["shape_id"], rec["model_dims"])
        if stack == "mcore-ds":
            zero = int(o.get("zero", 0))
            resolved = rec.get("zero_config_resolved") or {}
            overlap = resolved.get("overlap_comm", zero >= 3)
            plan = ParallelPlan(engine="deepspeed", zero_stage=zero, offload_optimizer=offload,
                                offload_params=offload_params, recompute=o.get("recompute", "none"),
                                adam=_adam_from_class(rec.get("optimizer_class")), overlap_comm=bool(overlap),
                                **common)
        else:
            plan = ParallelPlan(engine="megatron", distributed_optimizer=bool(o.get("distributed_optimizer")),
                                recompute=o.get("recompute", "none"), overlap_comm=False,
                                adam=_adam_from_class(rec.get("inner_optimizer_class")), **common)
    elif stack in HF_STACKS:  # measure.py's own loop (hf-ds) or transformers.Trainer (hf-trainer)
        model = hf_shape_spec(rec["shape_id"], rec["hf_config"], rec["seq_length"],
                              rec.get("attn_implementation") or o.get("attn"))
        used = (rec.get("hf_config_resolved") or {}).get("experts_implementation_used")
        if model.is_moe and used:  # the experts kernel transformers ran (dense models record one they never use)
            model = model.replace(experts_implementation=used)
        zero = int(o.get("zero", 0))
        resolved = rec.get("zero_config_resolved") or {}
        lora = o.get("lora") or 0
        lora_cfg = rec.get("lora") or {}
        if lora and lora_cfg.get("target_modules"):  # the adapters the run really had (peft's module names)
            from workbench.hf import targets_from_modules

            common.update(lora_targets=targets_from_modules(rec["hf_config"]["model_type"],
                                                            lora_cfg["target_modules"]),
                          lora_dropout=float(lora_cfg.get("lora_dropout") or 0.0))
        zero_kw = dict(overlap_comm=bool(resolved.get("overlap_comm", zero >= 3)),
                       # ZeRO-3: built inside deepspeed.zero.Init (zero_init runs) or whole on the GPU first
                       zero_init=bool(o.get("zero_init")) if zero == 3 else None)
        if stack == "hf-trainer":  # the ZeRO sizes the Trainer resolved ("auto"), zero.Init as the model was built
            zero_kw.update(zero_plan_fields(rec))
        common.update(checkpointed_layers(o, model.num_layers))  # every k-th layer checkpointed (every_n_layers)
        plan = ParallelPlan(engine="deepspeed", zero_stage=zero, offload_optimizer=offload,
                            offload_params=offload_params, recompute="full" if o.get("ckpt") else "none",
                            adam=_adam_from_class(rec.get("optimizer_class")), lora_rank=int(lora), **zero_kw,
                            **common)
    elif stack == "launcher" and rec.get("workbench") and not rec.get("catalog_model"):
        # a launcher run of a corpus shape: the record's own workbench description (specs_to_dict)
        from workbench.runs.specio import specs_from_dict

        model, cluster, plan = specs_from_dict(rec["workbench"])
        plan = plan.replace(expandable_segments=expandable) if expandable else plan
        world = plan.world_size
    elif rec.get("catalog_model"):
        # workbench.runs.launch: megatron-core local spec; torch Adam; DeepSpeed overlap as the export writes it
        stack = "launcher"
        model = catalog.model(rec["catalog_model"], attention="unfused")
        fields = dict(rec.get("plan_fields") or {})
        fields.setdefault("expandable_segments", expandable)
        mbs = int(fields.pop("micro_batch_size", mbs))
        engine = fields.get("engine", "deepspeed")
        plan = ParallelPlan(world_size=world, micro_batch_size=mbs, precision="bf16",
                            adam="fused" if offload != "none" else "torch",
                            overlap_comm=engine != "megatron", **fields)
    else:
        return None
    from workbench.configs.importer import read_ds_bool

    zero_cfg = (rec.get("ds_config") or {}).get("zero_optimization") or {}
    # the offload buffers page-locked: pin_memory read as DeepSpeed 0.19 reads it, whose default is on
    pinned = all(read_ds_bool(zero_cfg[key].get("pin_memory"), f"zero_optimization.{key}.pin_memory") is not False
                 for key in ("offload_optimizer", "offload_param")
                 if isinstance(zero_cfg.get(key), dict) and zero_cfg[key].get("device") not in (None, "none"))
    plan = plan.replace(pin_memory=pinned)
    if o.get("rbs") and plan.engine.value == "deepspeed":  # a reduce bucket the run's ds_config set
        plan = plan.replace(reduce_bucket_size=int(zero_cfg.get("reduce_bucket_size", o["rbs"])))
    if o.get("sgs") is not None and plan.engine.value == "deepspeed":  # ZeRO-3 sub-groups the ds_config set
        plan = plan.replace(sub_group_size=int(zero_cfg.get("sub_group_size", o["sgs"])))
    host = record_host(rec)  # the host the run had: its cores and its CPU Adam's threads
    gpu = record_gpu(rec)
    start = rec.get("allocated_at_start_bytes") or 0
    reserved, outside = rec.get("peak_reserved_bytes"), rec.get("outside_allocator_bytes")
    device = reserved + outside if reserved is not None and outside is not None else None
    if oom:
        return dict(source="corpus", stack=stack, run_id=rec.get("run_id"), shape_id=rec.get("shape_id"),
                    model=model, cluster=ClusterSpec(gpu=gpu, gpus_per_node=world, **host), plan=plan, oom=True,
                    measured={})
    return dict(source="corpus", stack=stack, run_id=rec.get("run_id") or rec.get("name"),
                shape_id=rec.get("shape_id") or shape_id_of(model), model=model,
                date=(rec.get("provenance") or {}).get("date_utc"),
                gpu_total_bytes=(rec.get("provenance") or {}).get("gpu_total_bytes"),
                cluster=ClusterSpec(gpu=gpu, gpus_per_node=plan.world_size, **host), plan=plan,
                omp_threads=rec.get("omp_num_threads"), step_traces=step_traces(rec), copy_probe=rec.get("copy_probe"),
                launch_us=probed_launch_us(rec), timed_steps=int(rec.get("timed_steps") or 0),
                measured=dict(allocated=rec["peak_allocated_bytes"] - start, device=device,
                              step=steady_step_seconds(rec), reserved=reserved, outside=outside,
                              used_at_start=rec.get("device_used_at_start_bytes"),
                              host_rss=rec.get("host_rss_at_end_bytes"), host_peak_rss=rec.get("host_peak_rss_bytes"),
                              host_total=rec.get("host_total_at_end_bytes")))


def probed_launch_us(rec: dict):
    """The host's cost of one tiny CUDA launch around the run's timed steps (``host_probe.py``): the mean of the
    probes before and after them, or None for records before 2026-12-02 04:00 UTC (no probes)."""
    values = [p["launch_us"] for p in (rec.get("host_probe_before"), rec.get("host_probe_after"))
              if isinstance(p, dict) and p.get("launch_us")]
    return sum(values) / len(values) if values else None


def corpus_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            run = corpus_run(json.loads(line))
        except ValueError as exc:  # a record the specs refuse: say so rather than drop it silently
            print(f"skipped corpus record: {exc}", file=sys.stderr)
            continue
        if run is not None:
            out.append(run)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Prediction and errors
# ----------------------------------------------------------------------------------------------------------------
def engine_of(run) -> str:
    return str(run["plan"].engine)


def fresh_shapes(runs: list, test: set) -> set:
    """Test shapes whose every run is dated at or after :data:`FRESH_AFTER`."""
    first = {}
    for r in runs:
        date = r.get("date") or ""
        first[r["shape_id"]] = min(first.get(r["shape_id"], date), date)
    return {s for s, d in first.items() if s in test and d and d[:16] >= FRESH_AFTER}


PROFILE = None
"""The hardware profile every run is priced with (``--profile``: ``workbench calibrate``'s, of the machine the runs
were measured on); None: the catalog's constants."""


def predict(run) -> dict:
    from workbench.estimate import estimate

    est = estimate(run["model"], run["cluster"], run["plan"], PROFILE)
    mem = est.memory.to_dict()
    # the device as measured on the H200, whose room leaves releasable cached segments reserved
    return dict(allocated=mem["allocated_bytes"], device=mem["observed_peak_bytes"], host=mem["host_bytes_per_gpu"],
                step=est.time.step_seconds if est.time is not None else None,
                host_share=est.time.host_share if est.time is not None else None)


def errors(run, predicted) -> dict:
    out = {}
    for q in QUANTITIES:
        m, p = run["measured"].get(q), predicted.get(q)
        out[q] = None if not m or p is None else (p - m) / m
    return out


def summary(values: list) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return dict(n=0)
    under = [v for v in vals if v < 0]
    return dict(n=len(vals), median=statistics.median(abs(v) for v in vals), worst=max(abs(v) for v in vals),
                under=len(under), worst_under=min(under) if under else 0.0)


def fmt(s: dict) -> str:
    if not s.get("n"):
        return f"{'-':>38}"
    return (f"{s['n']:>3} {s['median']:>6.1%} {s['worst']:>6.1%}  under {s['under']:>2}/{s['n']:<3}"
            f" worst {s['worst_under']:>+6.1%}")


def table(rows: list, title: str) -> list[str]:
    """Per engine (and all): median / worst |error| and the under-estimates for each quantity."""
    lines = [title, f"  {'engine':<20}" + "".join(f"{q:^40}" for q in QUANTITIES),
             f"  {'':<20}" + "".join(f"{'n  median  worst':<40}" for _ in QUANTITIES)]
    groups = sorted({engine_of(r) for r, _ in rows}) + ["all"]
    for g in groups:
        sel = [e for r, e in rows if g == "all" or engine_of(r) == g]
        lines.append(f"  {g:<20}" + "".join(f"{fmt(summary([e[q] for e in sel])):<40}" for q in QUANTITIES))
    return lines


def step_regime_of(run) -> str:
    """The regime a run's step time is reported under by ``--regimes``: the engine, DeepSpeed's ZeRO stage with
    optimizer offload apart, one rank or more, and the stack for Hugging Face models."""
    from corpus.describe import HF_STACKS

    plan = run["plan"]
    if plan.engine != "deepspeed":
        return str(plan.engine)
    ranks = "1 rank" if plan.world_size == 1 else f"{plan.world_size} ranks"
    offload = " offload" if plan.offload_optimizer != "none" else ""
    hf = "hf " if run["stack"] in HF_STACKS else ""
    return f"deepspeed {hf}z{int(plan.zero_stage)}{offload} {ranks}"


def regime_lines(rows: list, title: str) -> list[str]:
    """Step time per :func:`step_regime_of`: runs, median and worst |error|, under-estimates."""
    lines = [title]
    for g in sorted({step_regime_of(r) for r, _ in rows}):
        sel = [e["step"] for r, e in rows if step_regime_of(r) == g]
        lines.append(f"  {g:<34}{fmt(summary(sel))}")
    return lines


HOST_SHARE_BINS = ((0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.01))
"""Bins of the predicted host share (:func:`workbench.timing.host_share`) for :func:`host_share_lines`."""


def host_share_lines(rows: list, title: str) -> list[str]:
    """Step time by the predicted host share of the step, ZeRO-3 apart (its own band): how the error grows with
    the part of the step the host's speed decides."""
    from workbench.memory import HOST_BOUND_SHARE

    lines = [title]
    for label, z3 in (("ZeRO-0/1/2 and megatron-core", False), ("ZeRO-3", True)):
        for lo, hi in HOST_SHARE_BINS:
            sel = [e["step"] for r, e in rows if (int(r["plan"].zero_stage) >= 3) == z3
                   and r["predicted"].get("host_share") is not None and lo <= r["predicted"]["host_share"] < hi]
            if sel:
                mark = "host-bound" if lo >= HOST_BOUND_SHARE else "GPU-bound"
                lines.append(f"  {label:<29} share {lo:.1f}-{min(hi, 1.0):.1f} {mark:<10}{fmt(summary(sel))}")
    return lines


def band_entry(sel: list, q: str):
    """The band entry of runs ``sel`` for quantity ``q`` (``None`` without a measured and predicted value)."""
    import numpy as np

    ratios = [r["measured"][q] / r["predicted"][q] for r in sel if r["measured"].get(q) and r["predicted"].get(q)]
    if not ratios:
        return None
    lo, hi = np.quantile(ratios, [1 - BAND_QUANTILE, BAND_QUANTILE])
    return dict(n=len(ratios), shapes=len({r["shape_id"] for r in sel}),
                low_fraction=round(max(0.0, 1 - float(lo)), 4), high_fraction=round(max(0.0, float(hi) - 1), 4),
                worst_low_fraction=round(max(0.0, 1 - min(ratios)), 4),
                worst_high_fraction=round(max(0.0, max(ratios) - 1), 4))


def noise_band(configurations: list):
    """How far one run's steady step fell below and above its configuration's median over separate processes
    (:func:`repeatability`'s ``configurations``), as fractions: the 10th-90th percentile band a perfect model would
    still need (``None`` without repeated configurations)."""
    import numpy as np

    ratios = [v / statistics.median(c["step_seconds"]) for c in configurations for v in c["step_seconds"]]
    if not ratios:
        return None
    lo, hi = np.quantile(ratios, [1 - BAND_QUANTILE, BAND_QUANTILE])
    return dict(runs=len(ratios), configurations=len(configurations),
                low_fraction=round(max(0.0, 1 - float(lo)), 4), high_fraction=round(max(0.0, float(hi) - 1), 4))


def band(rows: list, expandable_rows: list = (), noise: dict | None = None) -> dict:
    """Per engine and quantity, how far the measured value went below and above the prediction, as fractions of
    the prediction (what :func:`workbench.memory.error_band` reads); the engine's and its recompute modes' entries
    leave out the runs whose offload regime has its own entry for that quantity (the parameters on the host: every
    quantity; the optimizer there: the whole device), which plans of that regime read first. ``expandable_rows``
    (runs with PyTorch's
    expandable-segments allocator) add ``ENGINE/expandable-segments`` device entries. ``noise``
    (:func:`repeatability` of every run, fit and test alike: it measures the measurement, not the model) adds the
    step entry
    ``deepspeed/zero3``: the held-out ZeRO-3 runs' band, each side at least their configurations' process-to-process
    :func:`noise_band`. Below ZeRO-3 each engine's runs also get a step entry by their predicted host share
    (``ENGINE/host-bound``, ``ENGINE/gpu-bound``: :func:`workbench.memory.step_regime_suffix`)."""
    from workbench.memory import (EXPANDABLE_BAND_SUFFIX, GPU_BOUND_SUFFIX, HOST_BOUND_SUFFIX,
                                  OPTIMIZER_OFFLOAD_BAND_SUFFIX, PARAM_OFFLOAD_BAND_SUFFIX, ZERO3_BAND_SUFFIX,
                                  step_regime_suffix)

    out = {}
    keys = {engine_of(r) for r, _ in rows} | {f"{engine_of(r)}/{r['plan'].recompute}" for r, _ in rows}

    def own_regime(r, q):  # a run whose offload regime has a band of its own for q (error_band reads that first)
        return r["plan"].offload_params != "none" or (q == "device" and r["plan"].offload_optimizer != "none")

    for q in QUANTITIES:
        out[q] = {}
        for key in sorted(keys):  # per engine, and per engine and recompute mode (the terms that differ most)
            entry = band_entry([r for r, _ in rows if key in (engine_of(r), f"{engine_of(r)}/{r['plan'].recompute}")
                                and not own_regime(r, q)], q)
            if entry:
                out[q][key] = entry
    for engine in sorted({engine_of(r) for r, _ in expandable_rows}):  # the allocator's reserve is the device's
        entry = band_entry([r for r, _ in expandable_rows if engine_of(r) == engine], "device")
        if entry:
            out["device"][f"{engine}/{EXPANDABLE_BAND_SUFFIX}"] = entry
    zero3 = [r for r, _ in rows if engine_of(r) == "deepspeed" and int(r["plan"].zero_stage) >= 3]
    entry = band_entry(zero3, "step")
    floor = noise_band([c for c in (noise or {}).get("configurations", ()) if c["regime"] == "deepspeed z3"])
    if entry and floor:
        entry.update(model_low_fraction=entry["low_fraction"], model_high_fraction=entry["high_fraction"],
                     noise_low_fraction=floor["low_fraction"], noise_high_fraction=floor["high_fraction"],
                     noise_runs=floor["runs"], noise_configurations=floor["configurations"],
                     low_fraction=max(entry["low_fraction"], floor["low_fraction"]),
                     high_fraction=max(entry["high_fraction"], floor["high_fraction"]))
        out["step"][f"deepspeed/{ZERO3_BAND_SUFFIX}"] = entry
    for q in QUANTITIES:  # ZeRO-3 with the parameters on the host: its own band for every quantity
        entry = band_entry([r for r, _ in rows if r["plan"].offload_params != "none"], q)
        if entry:
            out[q][f"deepspeed/{PARAM_OFFLOAD_BAND_SUFFIX}"] = entry
    # DeepSpeed with the optimizer on the host and the parameters on the GPU: their own whole-device band
    entry = band_entry([r for r, _ in rows if engine_of(r) != "megatron" and r["plan"].offload_optimizer != "none"
                        and r["plan"].offload_params == "none"], "device")
    if entry:
        out["device"][f"deepspeed/{OPTIMIZER_OFFLOAD_BAND_SUFFIX}"] = entry
    for engine in sorted({engine_of(r) for r, _ in rows}):  # below ZeRO-3: host-bound and GPU-bound steps apart
        for suffix in (HOST_BOUND_SUFFIX, GPU_BOUND_SUFFIX):
            sel = [r for r, _ in rows if engine_of(r) == engine
                   and step_regime_suffix(r["predicted"].get("host_share"), r["plan"].zero_stage) == suffix]
            entry = band_entry(sel, "step")
            if entry:
                out["step"][f"{engine}/{suffix}"] = entry
    return out


def replayed_band_entries(device: dict) -> dict:
    """The whole-device entries of ``device`` (an error_band.json's) that ``benchmarks/alloc_sim.py --write-band``
    writes, ``ENGINE/replayed-allocator`` and its offload regimes' ``ENGINE/replayed-allocator/REGIME``: kept when
    this script rewrites the file."""
    from workbench.memory import REPLAYED_BAND_SUFFIX

    return {key: entry for key, entry in device.items()
            if key.endswith(f"/{REPLAYED_BAND_SUFFIX}") or f"/{REPLAYED_BAND_SUFFIX}/" in key}


GPU_BAND_ABOUT = (
    "Step-time bands of a GPU other than the H200, from its own test-split runs (benchmarks/bench_accuracy.py --corpus "
    "FILE --write-gpu-band): the same entries as the step section above (engine, recompute mode, deepspeed/zero3 with "
    "the process-to-process noise of the corpus given, host-bound and GPU-bound, param-offload), which "
    "workbench.memory.error_band reads first for an estimate on that GPU; an entry it lacks falls back to the H200's. "
    "Written because the H200's step band held only 64 % of the H100's test runs (benchmarks/band_coverage.py).")


def write_gpu_band(rows: list, noise: dict) -> dict:
    """The step entries of :func:`band` over each non-H200 GPU's own test runs of ``rows``, written into
    ``error_band.json``'s ``gpus`` section (the rest of the file unchanged); returns ``{gpu: entries}``."""
    from workbench.memory import ERROR_BAND_FILE

    doc = json.loads(ERROR_BAND_FILE.read_text())
    written = {}
    for gpu in sorted({r["cluster"].gpu.name for r, _ in rows} - {doc.get("gpu", "H200")}):
        entries = band([(r, e) for r, e in rows if r["cluster"].gpu.name == gpu], noise=noise)["step"]
        if entries:
            doc.setdefault("gpus", {})[gpu] = {"about": GPU_BAND_ABOUT, "step": entries}
            written[gpu] = entries
    ERROR_BAND_FILE.write_text(json.dumps(doc, indent=2) + "\n")
    return written


def reserve_base(run) -> float:
    """What a run's regime takes its allocator reserve on, for its measured allocated peak: the allocated peak, or
    under ZeRO-3 with offload the streams' caches together (:func:`workbench.memory.zero3_offload_reserve_base`)."""
    from workbench.memory import ZERO3_STREAM_RESERVE_REGIMES, plan_reserve_key, plan_zero3_offload_reserve_base

    allocated = run["measured"]["allocated"] or 1
    if plan_reserve_key(run["plan"]) in ZERO3_STREAM_RESERVE_REGIMES and not run["plan"].expandable_segments:
        return plan_zero3_offload_reserve_base(run["model"], run["plan"], allocated)
    return allocated


def p90(sorted_values: list):
    """The 90th percentile the overhead fits quote: the value at index ``int(0.9 n)`` of the sorted values."""
    return sorted_values[min(len(sorted_values) - 1, int(0.9 * len(sorted_values)))]


BESIDE_BYTES = 0.25 * GiB
"""Device memory beyond a lone process's context at a run's start that counts it as started beside other
processes (:func:`outside_beside_other_processes`, :func:`outside_by_stack`)."""


def overhead_fit(rows: list) -> dict:
    """Per engine: memory outside the allocator of one process (median over runs) and the allocator reserve above
    the allocated peak (``max_memory_reserved / max_memory_allocated − 1``: median and 90th percentile; and per
    regime, :func:`workbench.memory.plan_reserve_key`, ZeRO-3 offload's above :func:`reserve_base`)."""
    from workbench.memory import RESERVE_FRACTION, plan_reserve_key

    out = {}
    for engine in sorted({engine_of(r) for r, _ in rows}):
        sel = [r for r, _ in rows if engine_of(r) == engine and r["measured"].get("outside") is not None
               and r["cluster"].world_size == 1]
        if not sel:
            continue
        outside = [r["measured"]["outside"] for r in sel]
        reserve = sorted(r["measured"]["reserved"] / (r["measured"]["allocated"] or 1) - 1 for r in sel)
        out[engine] = dict(n=len(sel), outside_gib=statistics.median(outside) / GiB,
                           outside_max_gib=max(outside) / GiB, reserve_median=statistics.median(reserve),
                           reserve_p90=p90(reserve),
                           reserve_max=reserve[-1])
        multi = [r["measured"]["outside"] for r, _ in rows if engine_of(r) == engine
                 and r["measured"].get("outside") is not None and r["cluster"].world_size > 1]
        if multi:  # NCCL's communicators: what a multi-rank process holds outside the allocator beyond one rank's
            out[engine].update(nccl_n=len(multi), nccl_gib=statistics.median(multi) / GiB - out[engine]["outside_gib"])
        for name in RESERVE_FRACTION:  # the reserve per regime (plan_reserve_key's keys)
            part = sorted(r["measured"]["reserved"] / reserve_base(r) - 1 for r in sel
                          if plan_reserve_key(r["plan"]) == name)
            if part:
                out[engine].setdefault("reserve_regimes", {})[name] = dict(
                    n=len(part), median=statistics.median(part), p90=p90(part))
    return out


def outside_beside_other_processes(runs: list) -> dict:
    """How much of the memory measured outside the allocator other processes held. ``used_at_start`` is the GPU's
    ``total − free`` right after this process's CUDA initialisation (measure.py); the least of it over the one-GPU
    runs is a lone process's own context, anything above was held by other processes on the same GPU when the run
    started. Per stack: one-GPU runs, how many started beside other processes (and the most those held), and the
    median outside the allocator as measured and less that memory."""
    one = [r for r in runs if r["cluster"].world_size == 1 and r["measured"].get("outside") is not None
           and r["measured"].get("used_at_start") is not None]
    if not one:
        return {}
    lone = min(r["measured"]["used_at_start"] for r in one)
    out = {}
    for stack in sorted({r["stack"] for r in one}):
        sel = [r for r in one if r["stack"] == stack]
        others = [r["measured"]["used_at_start"] - lone for r in sel]
        outside = [r["measured"]["outside"] for r in sel]
        out[stack] = dict(n=len(sel), beside=sum(o > BESIDE_BYTES for o in others), others_max_gib=max(others) / GiB,
                          outside_gib=statistics.median(outside) / GiB,
                          own_outside_gib=statistics.median(o - x for o, x in zip(outside, others)) / GiB)
    return dict(lone_context_gib=lone / GiB, stacks=out)


def outside_by_stack(rows: list, lone: float) -> dict:
    """Per :func:`workbench.memory.stack_outside_key` (the model's implementation and the engine's regime): the
    memory outside the allocator of the one-GPU runs, less what other processes held at the start (``used_at_start``
    beyond ``lone``, a lone process's context): ``{key: dict(n, median_gib, p10_gib, p90_gib, beside)}``, what
    :data:`workbench.memory.STACK_OUTSIDE_ALLOCATOR_BYTES` holds for the fit split's rows."""
    from workbench.memory import stack_outside_key

    groups = {}
    for r, _ in rows:
        m = r["measured"]
        if r["cluster"].world_size != 1 or m.get("outside") is None or m.get("used_at_start") is None:
            continue
        others = max(0.0, m["used_at_start"] - lone)
        groups.setdefault(stack_outside_key(r["model"], r["plan"]), []).append((m["outside"] - others, others))
    out = {}
    for key, vals in sorted(groups.items()):
        own = sorted(v for v, _ in vals)
        out[key] = dict(n=len(own), median_gib=statistics.median(own) / GiB, p10_gib=own[len(own) // 10] / GiB,
                        p90_gib=p90(own) / GiB,
                        beside=sum(o > BESIDE_BYTES for _, o in vals))
    return out


def expandable_reserve_fit(rows: list) -> dict:
    """The allocator reserve above the allocated peak (``max_memory_reserved / max_memory_allocated − 1``) of the
    runs with expandable segments, per engine and over all of them (``"all"``): n, median, 90th percentile, range,
    and ``used``, what :data:`workbench.memory.RESERVE_FRACTION_EXPANDABLE` takes (an engine's own median with at
    least :data:`workbench.memory.MIN_FIT_RUNS` runs, else the pooled median)."""
    from workbench.memory import MIN_FIT_RUNS

    def stats(sel):
        vals = sorted(r["measured"]["reserved"] / (r["measured"]["allocated"] or 1) - 1 for r in sel)
        return dict(n=len(vals), median=statistics.median(vals), p90=p90(vals),
                    min=vals[0], max=vals[-1])

    sel = [r for r, _ in rows if r["measured"].get("reserved") and r["measured"].get("allocated")]
    if not sel:
        return {}
    out = {"all": stats(sel)}
    for engine in sorted({engine_of(r) for r in sel}):
        out[engine] = stats([r for r in sel if engine_of(r) == engine])
        out[engine]["used"] = out[engine]["median"] if out[engine]["n"] >= MIN_FIT_RUNS else out["all"]["median"]
    return out


def host_dispatch_profile(run):
    """A hardware profile that measured nothing but the run's own host dispatch speed (what ``workbench calibrate``
    records under ``host_dispatch``), for the GPU the run had."""
    from workbench.calibrate.profile import HardwareProfile

    gpu = run["cluster"].gpu.name
    return HardwareProfile(name="run-host", machine="corpus", device=gpu, device_kind="cuda", gpu=gpu,
                           host_dispatch={"launch_us": run["launch_us"], "probes": 2})


def host_dispatch_lines(runs: list, fit: set) -> list[str]:
    """Step time priced with the catalog host against priced with each run's own host probe (its launch cost scaling
    the time model's host seconds, as a profile from ``workbench calibrate`` does), per GPU and split; and the fit
    split's median launch cost, the reference :data:`workbench.timing.HOST_REFERENCE_LAUNCH_US` states."""
    from workbench.estimate import estimate
    from workbench.timing import HOST_REFERENCE_LAUNCH_US

    probed = [r for r in runs if r.get("launch_us") and r["measured"].get("step") and r.get("predicted")
              and r["predicted"].get("step")]
    ref = [r["launch_us"] for r in probed if r["shape_id"] in fit and r["cluster"].gpu.name == "H200"]
    where = (f"a tiny CUDA launch cost {statistics.median(ref):.2f} us in the median of the {len(ref)} fit-split "
             f"H200 runs here that carry host probes" if ref else "no fit-split H200 run here carries host probes")
    out = [f"HOST DISPATCH: {where} (workbench.timing.HOST_REFERENCE_LAUNCH_US {HOST_REFERENCE_LAUNCH_US}); step "
           f"|error| with the catalog host, then with each run's own probe scaling the host seconds (n, median, p90, "
           f"worst)"]
    for gpu in sorted({r["cluster"].gpu.name for r in probed}):
        for side in ("test", "fit"):
            rows = [r for r in probed if r["cluster"].gpu.name == gpu and (r["shape_id"] in fit) == (side == "fit")]
            if not rows:
                continue
            cols = []
            for scaled in (False, True):
                errs = []
                for r in rows:
                    step = (estimate(r["model"], r["cluster"], r["plan"], host_dispatch_profile(r)).time.step_seconds
                            if scaled else r["predicted"]["step"])
                    errs.append(abs(step - r["measured"]["step"]) / r["measured"]["step"])
                errs.sort()
                cols.append(f"{statistics.median(errs):6.1%} {p90(errs):6.1%} {errs[-1]:6.1%}")
            out.append(f"  {gpu:10s} {side:4s} n={len(rows):4d}  catalog host {cols[0]}  | own probe {cols[1]}")
    return out


def regime_of(run) -> str:
    """The regime a run's repeatability is reported under: the engine, and DeepSpeed's ZeRO stage."""
    plan = run["plan"]
    return f"{plan.engine} z{int(plan.zero_stage)}" if plan.engine == "deepspeed" else str(plan.engine)


def spread(values) -> float:
    """How far apart measurements of one thing fall (``benchmarks/corpus/step_stats.py``)."""
    from corpus.step_stats import spread as spread_

    return spread_(values)


def configuration_key(run) -> tuple:
    """What makes two runs the same configuration: the stack, the model, the plan and the GPUs; the threads of the
    host's CPU Adam only where the optimizer runs on the host (as it ran: OMP_NUM_THREADS, else the node's cores
    per GPU). Run id, group and measurement time do not count."""
    c, plan = run["cluster"], run["plan"]
    host = (c.cpu_adam_threads_per_rank,) if plan.offload_optimizer != "none" else ()
    return run["stack"], repr(run["model"]), repr(plan), repr(c.gpu), c.gpus_per_node, host


def floor_error(values) -> float:
    """The smallest worst-case relative error any single prediction can have against all of ``values``:
    ``(max − min) / (max + min)``, reached at ``2·max·min / (max + min)``."""
    return (max(values) - min(values)) / (max(values) + min(values))


def repeatability(runs: list) -> dict:
    """The step-time noise floor of the corpus. ``configurations``: every configuration (:func:`configuration_key`)
    measured in more than one process (the ``repeat`` group, and the same configuration in different groups), with
    its runs' steady step times (:func:`steady_step_seconds`), their :func:`spread` and :func:`floor_error`.
    ``across``: per regime (:func:`regime_of`), those configurations' median and worst spread and worst floor error.
    ``within``: per regime, the spread of each run's timed steps (one process, the steps the statistic reads):
    runs, median, 90th percentile, worst, and how many runs had not settled (spread above
    ``step_stats.SETTLED_SPREAD``)."""
    import numpy as np

    from corpus.step_stats import SETTLED_SPREAD

    groups = {}
    for r in runs:
        if r["measured"].get("step"):
            groups.setdefault(configuration_key(r), []).append(r)
    configs = []
    for sel in groups.values():
        if len(sel) < 2:
            continue
        sel = sorted(sel, key=lambda r: (r.get("date") or "", r["run_id"]))
        steps = [r["measured"]["step"] for r in sel]
        configs.append(dict(regime=regime_of(sel[0]), run_id=sel[0]["run_id"], run_ids=[r["run_id"] for r in sel],
                            step_seconds=steps, spread=spread(steps), floor_error=floor_error(steps)))
    configs.sort(key=lambda c: (c["regime"], -c["spread"]))
    across = {}
    for g in sorted({c["regime"] for c in configs}):
        sel = [c for c in configs if c["regime"] == g]
        across[g] = dict(configurations=len(sel), runs=sum(len(c["step_seconds"]) for c in sel),
                         median=statistics.median(c["spread"] for c in sel), worst=max(c["spread"] for c in sel),
                         floor_error=max(c["floor_error"] for c in sel))
    within = {}
    for g in sorted({regime_of(r) for r in runs}):
        vals = [max(spread(s[-r["timed_steps"]:]) for s in r["step_traces"]) for r in runs
                if regime_of(r) == g and r.get("step_traces") and r.get("timed_steps", 0) > 1]
        if vals:
            within[g] = dict(runs=len(vals), median=float(np.median(vals)), p90=float(np.quantile(vals, 0.9)),
                             worst=max(vals), unsettled=sum(v > SETTLED_SPREAD for v in vals))
    return dict(configurations=configs, across=across, within=within)


def repeatability_lines(rep: dict) -> list[str]:
    """:func:`repeatability` as the short table the README quotes, then the repeated configurations."""
    lines = ["REPEATABILITY (the step-time noise floor): one configuration measured in separate processes; spread = "
             "slowest / fastest - 1 of their steady steps; floor = the least worst-case |error| any single prediction "
             "can have on them",
             f"  {'regime':<20}{'configs':>8}{'runs':>6}{'median spread':>15}{'worst spread':>14}{'floor':>8}"
             f"    {'within one process (timed steps):':<34}{'runs':>5}{'median':>8}{'p90':>8}{'worst':>8}"
             f"{'unsettled':>10}"]
    for g in sorted(set(rep["across"]) | set(rep["within"])):
        a, w = rep["across"].get(g), rep["within"].get(g)
        left = (f"{a['configurations']:>8}{a['runs']:>6}{a['median']:>15.1%}{a['worst']:>14.1%}"
                f"{a['floor_error']:>8.1%}" if a else f"{'-':>8}{'':>6}{'':>15}{'':>14}{'':>8}")
        right = (f"{w['runs']:>5}{w['median']:>8.1%}{w['p90']:>8.1%}{w['worst']:>8.1%}{w['unsettled']:>10}"
                 if w else "")
        lines.append(f"  {g:<20}{left}    {'':<34}{right}")
    for c in rep["configurations"]:
        ms = " ".join(f"{v * 1e3:.1f}" for v in c["step_seconds"])
        lines.append(f"    {c['regime']:<14}{c['run_id'][:60]:<61} {ms:<26} ms  spread {c['spread']:>6.1%}  "
                     f"floor {c['floor_error']:>5.1%}")
    return lines


ZERO3_HOST_CONSTANTS = ("zero3_fetch_latency_s", "zero3_reduce_latency_s", "zero3_collective_call_s")


@contextlib.contextmanager
def _calibration_section(section: str):
    """The catalog's calibration dict ``section`` (``deepspeed``, ``cpu_adam``) to change inside the block: every
    key is restored after it, a key the catalog did not have removed again."""
    from workbench import timing

    cal = timing.calibration()[section]
    saved = dict(cal)
    try:
        yield cal
    finally:
        cal.clear()
        cal.update(saved)


@contextlib.contextmanager
def _deepspeed_constants_zeroed(keys):
    """The DeepSpeed time constants ``keys`` at 0 inside the block (:func:`_calibration_section`)."""
    with _calibration_section("deepspeed") as cal:
        cal.update(dict.fromkeys(keys, 0.0))
        yield


def _zero3_step_parts(r: dict) -> dict:
    """A measured ZeRO-3 run's step as the model prices it now (``base_seconds``; inside
    :func:`_deepspeed_constants_zeroed` that is without the host hooks), the modules fetched per pass and the
    fetches of a step (forward, backward, and the recomputed forward with full recompute) over its micro-batches, the
    hook calls of those passes (every submodule's, :func:`workbench.timing.zero3_hooked_modules_per_layer`), and the
    micro-batches' GPU kernel seconds."""
    from workbench import timing
    from workbench.estimate import estimate

    plan, model = r["plan"], r["model"]
    t = estimate(model, r["cluster"], plan).time
    m = plan.global_batch_size // (plan.micro_batch_size * plan.world_size)
    modules = m * (model.num_layers * timing.zero3_modules_per_layer(model, plan.persistence_threshold) + 1)
    passes = 2 + (plan.recompute == "full")
    hooks = m * (model.num_layers * timing.zero3_hooked_modules_per_layer(model) + 1) * passes
    return dict(base_seconds=t.step_seconds, modules=modules, fetches=modules * passes, hooks=hooks,
                kernel_seconds=m * (t.microbatch_forward_seconds + t.microbatch_backward_seconds))


def zero3_host_rows(runs: list) -> list[dict]:
    """For each measured ZeRO-3 run without optimizer offload: the step time the model gives with its ZeRO-3 host
    constants (:data:`ZERO3_HOST_CONSTANTS`) at zero, what the measured step spends beyond that (``exposed``:
    the hooks' host time the GPU's kernels did not hide, plus the model's other errors), the module fetches of a step
    (forward, backward and recomputed forward) and the GPU kernel time per fetch."""
    out = []
    with _deepspeed_constants_zeroed(ZERO3_HOST_CONSTANTS):
        for r in runs:
            plan = r["plan"]
            if int(plan.zero_stage) != 3 or plan.offload_optimizer != "none" or not r["measured"].get("step"):
                continue
            x = _zero3_step_parts(r)
            exposed = r["measured"]["step"] - x["base_seconds"]
            out.append(dict(run=r, exposed_seconds=exposed, fetches=x["fetches"],
                            exposed_per_fetch_seconds=exposed / x["fetches"],
                            kernel_per_fetch_seconds=x["kernel_seconds"] / x["fetches"]))
    return out


def zero3_host_lines(runs: list, fit: set) -> list[str]:
    """The table of :func:`zero3_host_rows` by measurement date, then the configurations measured twice (the same
    run with PyTorch's expandable-segments allocator, which does not change the kernels)."""
    rows = sorted(zero3_host_rows(runs), key=lambda x: (x["run"].get("date") or "", x["run"]["run_id"]))
    lines = ["ZeRO-3 host time (no optimizer offload): measured step - the model's step with its ZeRO-3 host "
             "constants at 0, per module fetch",
             f"  {'measured (UTC)':<17}{'split':<6}{'run':<58}{'ranks':>5}{'exposed':>10}{'fetches':>8}"
             f"{'per fetch':>11}{'GPU per fetch':>15}"]
    for x in rows:
        r = x["run"]
        lines.append(f"  {(r.get('date') or 'older')[:16]:<17}{'fit' if r['shape_id'] in fit else 'test':<6}"
                     f"{r['run_id'][:57]:<58}{r['plan'].world_size:>5}{x['exposed_seconds'] * 1e3:>8.1f}ms"
                     f"{x['fetches']:>8}{x['exposed_per_fetch_seconds'] * 1e3:>9.2f}ms"
                     f"{x['kernel_per_fetch_seconds'] * 1e3:>13.2f}ms")
    by_id = {x["run"]["run_id"]: x for x in rows}
    pairs = [(by_id[i.replace("/expseg", "")], x) for i, x in by_id.items()
             if "/expseg" in i and i.replace("/expseg", "") in by_id]
    if pairs:
        lines.append("  the same configuration measured twice (default allocator / expandable segments): "
                     "step, exposed")
        for a, b in pairs:
            lines.append(f"    {a['run']['run_id'][:57]:<58} {a['run']['measured']['step'] * 1e3:6.1f} / "
                         f"{b['run']['measured']['step'] * 1e3:6.1f} ms   {a['exposed_seconds'] * 1e3:6.1f} / "
                         f"{b['exposed_seconds'] * 1e3:6.1f} ms")
    return lines


ZERO3_FIT_GRID = dict(zero3_fetch_latency_s=[i * 1e-4 for i in range(1, 31)],
                      zero3_collective_call_s=[i * 1e-4 for i in range(0, 11)],
                      zero3_host_spread=[0.0, 0.25, 0.5, 0.75, 1.0])
"""The candidates :func:`zero3_refit` searches (seconds per fetch, per collective call; log-spread of host speed)."""


def zero3_fit_rows(runs: list) -> list[dict]:
    """For every measured ZeRO-3 run (optimizer offload included): the model's step with its ZeRO-3 host hooks left
    out (``base_seconds``), and what the hook term is priced on: fetches and modules of a step, whether the group has
    more than one rank, and the stage's GPU kernel seconds (``workbench.timing.communication_terms``)."""
    out = []
    with _deepspeed_constants_zeroed((*ZERO3_HOST_CONSTANTS, "zero3_host_spread")):
        for r in runs:
            plan = r["plan"]
            if plan.engine != "deepspeed" or int(plan.zero_stage) != 3 or not r["measured"].get("step"):
                continue
            out.append(dict(run=r, multi=float(plan.world_size > 1), **_zero3_step_parts(r)))
    return out


def zero3_predict(row: dict, consts: dict) -> float:
    """The step time of :func:`zero3_fit_rows`' ``row`` with ZeRO-3 host constants ``consts``."""
    from workbench import timing

    hook = timing.zero3_hook_seconds(row["fetches"], row["modules"], row["multi"],
                                     fetch_latency_s=consts["zero3_fetch_latency_s"],
                                     reduce_latency_s=consts["zero3_reduce_latency_s"],
                                     collective_call_s=consts["zero3_collective_call_s"], hooks=row.get("hooks"))
    return row["base_seconds"] + float(timing.expected_excess_seconds(
        hook, consts.get("zero3_hook_overlap", 1.0) * row["kernel_seconds"], consts.get("zero3_host_spread", 0.0)))


def zero3_refit(rows: list, start: dict, grid: dict) -> dict:
    """The grid point of ``grid`` (other constants as in ``start``) with the least mean relative step error over
    ``rows``, each model shape weighted alike."""
    import itertools

    shapes = sorted({x["run"]["shape_id"] for x in rows})
    by_shape = [[x for x in rows if x["run"]["shape_id"] == sh] for sh in shapes]
    best = None
    for values in itertools.product(*grid.values()):
        consts = {**start, **dict(zip(grid, values))}
        loss = statistics.fmean(statistics.fmean(abs(zero3_predict(x, consts) / x["run"]["measured"]["step"] - 1)
                                                 for x in sel) for sel in by_shape)
        if best is None or loss < best[0]:
            best = (loss, consts)
    return best[1]


def zero3_refit_lines(runs: list, fit: set) -> list[str]:
    """Refit the ZeRO-3 host constants on the fit split's ZeRO-3 runs (Hugging Face and offload runs included; the
    reduce latency and hook overlap kept): once with the host's speed fixed (spread 0) and once with its spread
    between processes free (:func:`workbench.timing.expected_excess_seconds`). Prints the constants, their
    leave-one-shape-out error on the fit split, and the test split's ZeRO-3 rows (one rank, two ranks, offload)
    with the catalog's and each refit's constants. Nothing is written."""
    from workbench import timing

    cal = timing.calibration()["deepspeed"]
    catalog = {k: cal.get(k, d) for k, d in (*((k, 0.0) for k in ZERO3_HOST_CONSTANTS),
                                             ("zero3_hook_overlap", 1.0), ("zero3_host_spread", 0.0))}
    rows = zero3_fit_rows(runs)
    fit_rows = [x for x in rows if x["run"]["shape_id"] in fit]
    test_rows = [x for x in rows if x["run"]["shape_id"] not in fit]
    variants = {"catalog": catalog,
                "refit, spread 0": zero3_refit(fit_rows, catalog, {**ZERO3_FIT_GRID, "zero3_host_spread": [0.0]}),
                "refit, spread free": zero3_refit(fit_rows, catalog, ZERO3_FIT_GRID)}

    def stats(sel, consts):
        errs = [abs(zero3_predict(x, consts) / x["run"]["measured"]["step"] - 1) for x in sel]
        return (f"{len(errs):>3} {statistics.median(errs):>6.1%} {max(errs):>6.1%} {statistics.fmean(errs):>6.1%}"
                if errs else f"{'-':>24}")

    shapes = sorted({x["run"]["shape_id"] for x in fit_rows})
    lines = [f"ZeRO-3 host constants refitted on the fit split's {len(fit_rows)} ZeRO-3 runs ({len(shapes)} shapes; "
             f"the test split is never used), n / median / worst / mean |step error|"]
    offload = [x["run"]["plan"].offload_optimizer != "none" for x in test_rows]
    parts = {"test, one rank": [x for x, off in zip(test_rows, offload) if not x["multi"] and not off],
             "test, two ranks": [x for x, off in zip(test_rows, offload) if x["multi"] and not off],
             "test, offload": [x for x, off in zip(test_rows, offload) if off],
             "test, all": test_rows, "fit, all": fit_rows}
    for name, consts in variants.items():
        lines.append(f"  {name}: fetch {consts['zero3_fetch_latency_s'] * 1e3:.2f} ms, collective call "
                     f"{consts['zero3_collective_call_s'] * 1e3:.2f} ms, reduce "
                     f"{consts['zero3_reduce_latency_s'] * 1e3:.2f} ms, overlap {consts['zero3_hook_overlap']:g}, "
                     f"spread {consts['zero3_host_spread']:g}")
        for part, sel in parts.items():
            lines.append(f"    {part:<18}{stats(sel, consts)}")
        if name != "catalog":
            grid = {**ZERO3_FIT_GRID, **({"zero3_host_spread": [0.0]} if "spread 0" in name else {})}
            loso = []
            for sh in shapes:
                held = [x for x in fit_rows if x["run"]["shape_id"] == sh]
                c = zero3_refit([x for x in fit_rows if x["run"]["shape_id"] != sh], catalog, grid)
                loso += [abs(zero3_predict(x, c) / x["run"]["measured"]["step"] - 1) for x in held]
            lines.append(f"    {'fit, one shape out':<18}{len(loso):>3} {statistics.median(loso):>6.1%} "
                         f"{max(loso):>6.1%} {statistics.fmean(loso):>6.1%}")
    return lines


LORA_HOOK_SHARES = (1.0, 0.75, 0.5, 0.25, 0.0)
"""The shares of a ZeRO-3 hook call at which :func:`lora_zero3_lines` prices the hooks of LoRA's modules."""


@contextlib.contextmanager
def _lora_hook_share(share: float):
    """Inside the block the hooks of LoRA's own modules (:func:`workbench.timing.zero3_lora_modules_per_layer`'s
    second figure) count ``share`` of a ZeRO-3 hook call each."""
    from workbench import timing

    orig = timing.zero3_lora_modules_per_layer

    def scaled(*args, **kwargs):
        fetched, hooked = orig(*args, **kwargs)
        return fetched, hooked * share

    timing.zero3_lora_modules_per_layer = scaled
    try:
        yield
    finally:
        timing.zero3_lora_modules_per_layer = orig


def lora_zero3_lines(runs: list, fit: set) -> list[str]:
    """LoRA at ZeRO-3 without optimizer offload: the step-time error with the hooks of LoRA's modules (four per
    adapted projection, :data:`workbench.timing.LORA_CALLED_MODULES`) priced at each of :data:`LORA_HOOK_SHARES` of
    a ZeRO-3 hook call (1: the catalog's pricing), on the fit and the test split, priced with the catalog's host and
    with each run's own host probe (:func:`host_dispatch_profile`, where the run carries one). Whether those small
    modules' hooks cost less than a weight's, read on the fit split and checked on the test split; nothing is
    written."""
    from workbench.estimate import estimate

    sel = [r for r in runs if int(r["plan"].zero_stage) == 3 and r["plan"].lora_rank
           and r["plan"].offload_optimizer == "none" and r["measured"].get("step")]
    if not sel:
        return ["LoRA at ZeRO-3: no such run in this corpus"]
    lines = [f"LoRA at ZeRO-3 (no optimizer offload, {len(sel)} runs): step error with the hooks of LoRA's modules at "
             f"a share of a ZeRO-3 hook call; n, median error, median |error|, worst"]
    for share in LORA_HOOK_SHARES:
        cols = []
        with _lora_hook_share(share):
            for probe in (False, True):
                for side in ("fit", "test"):
                    errs = []
                    for r in sel:
                        if (r["shape_id"] in fit) != (side == "fit") or (probe and not r.get("launch_us")):
                            continue
                        step = estimate(r["model"], r["cluster"], r["plan"],
                                        host_dispatch_profile(r) if probe else PROFILE).time.step_seconds
                        errs.append(step / r["measured"]["step"] - 1)
                    cols.append(f"{'probe' if probe else 'catalog'} {side:<4} " + (
                        f"{len(errs):>3} {statistics.median(errs):+6.1%} "
                        f"{statistics.median(abs(e) for e in errs):6.1%} {max(errs, key=abs):+6.1%}"
                        if errs else f"{'-':>27}"))
        lines.append(f"  share {share:4.2f}  " + "  |  ".join(cols))
    return lines


OFFLOAD_HOST_CONSTANTS = {
    "zero3_param_offload_host_factor": ("ZeRO-3, the optimizer and the parameters on the CPU", 1.0,
                                        lambda p: p.offload_optimizer != "none" and p.offload_params != "none"),
    "param_offload_copy_back_seconds_per_parameter": ("ZeRO-3, the parameters on the CPU, the optimizer on the GPU",
                                                      1e-9, lambda p: p.offload_optimizer == "none"
                                                      and p.offload_params != "none"),
}
"""The host-time constants of ZeRO-3's parameter-offload regimes (``efficiency.json`` ``cpu_adam``, read by
:func:`workbench.timing.optimizer_terms`): what each prices, the unit it is fitted in, and which DeepSpeed ZeRO-3
plans it applies to. The step time is linear in each, so :func:`offload_host_refit` fits them in closed form.
(ZeRO-3's host factor with the optimizer alone on the CPU, ``zero3_host_factor``, is fitted with the other time
constants: ``--refit-time --refit-only offload_zero3 --with-hf-zero3``.)"""

MIN_REFIT_SHAPES = 3
"""``--refit-offload --write`` stores a constant refitted on at least this many fit-split shapes."""


def _offload_host_rows(runs: list, key: str) -> list[dict]:
    """For every measured one-rank DeepSpeed ZeRO-3 run of ``key``'s regime: the model's step with the constant at 0
    (``a``) and what one unit of it adds (``d``): the step is ``a + value / unit · d``."""
    from workbench.estimate import estimate

    _, unit, applies = OFFLOAD_HOST_CONSTANTS[key]
    out = []
    with _calibration_section("cpu_adam") as cal:
        for r in runs:
            plan = r["plan"]
            if (plan.engine != "deepspeed" or int(plan.zero_stage) != 3 or not applies(plan)
                    or not r["measured"].get("step")):
                continue
            steps = []
            for value in (0.0, unit):
                cal[key] = value
                steps.append(estimate(r["model"], r["cluster"], plan).time.step_seconds)
            out.append(dict(run=r, a=steps[0], d=steps[1] - steps[0], m=r["measured"]["step"]))
    return out


def offload_host_refit(rows: list) -> float:
    """The value (in the constant's unit) that minimises the mean squared relative step error over ``rows``
    (:func:`_offload_host_rows`), each model shape weighted alike: closed form, the step being linear in it."""
    count = {}
    for x in rows:
        count[x["run"]["shape_id"]] = count.get(x["run"]["shape_id"], 0) + 1
    num = sum((x["d"] / x["m"]) * (1 - x["a"] / x["m"]) / count[x["run"]["shape_id"]] for x in rows)
    den = sum((x["d"] / x["m"]) ** 2 / count[x["run"]["shape_id"]] for x in rows)
    return max(num / den, 0.0) if den > 0 else 0.0


PAGEABLE_KEY = "pageable_copy_gb_per_s"
"""The host's rate for DeepSpeed's offload copies with ``pin_memory`` off (``efficiency.json`` ``cpu_adam``, read by
:func:`workbench.timing.optimizer_terms`)."""


def _pageable_rows(runs: list) -> list[dict]:
    """For every measured DeepSpeed CPU-offload run with ``pin_memory`` off: the step is ``a + d / rate`` (``rate``
    the pageable copy GB/s, below the host link's), ``a`` and ``d`` read off the model at two rates."""
    from workbench.estimate import estimate

    out = []
    with _calibration_section("cpu_adam") as cal:
        for r in runs:
            plan = r["plan"]
            if plan.pin_memory or not plan.offloads_to_cpu or not r["measured"].get("step"):
                continue
            steps = []
            for rate in (4.0, 8.0):
                cal[PAGEABLE_KEY] = rate
                steps.append(estimate(r["model"], r["cluster"], plan).time.step_seconds)
            d = (steps[0] - steps[1]) / (1 / 4.0 - 1 / 8.0)
            out.append(dict(run=r, a=steps[1] - d / 8.0, d=d, m=r["measured"]["step"]))
    return out


def pageable_lines(runs: list, fit: set, write: bool = False) -> list[str]:
    """Fit the pageable copy rate on the fit split's ``pin_memory``-off runs only (closed form in 1 / rate, shapes
    weighted alike, :func:`offload_host_refit`); print the fit split's leave-one-shape-out errors, the test split's
    with the catalog's and the refitted rate, and beside them the pageable copy rates the runs' hosts measured
    (``copy_probe``). With ``write`` (at least :data:`MIN_REFIT_SHAPES` fit shapes) store the rate."""
    from workbench import timing

    now = float(timing.calibration()["cpu_adam"].get(PAGEABLE_KEY, float("inf")))
    rows = _pageable_rows(runs)
    fit_rows = [x for x in rows if x["run"]["shape_id"] in fit]
    test_rows = [x for x in rows if x["run"]["shape_id"] not in fit]
    shapes = sorted({x["run"]["shape_id"] for x in fit_rows})
    lines = ["PAGEABLE offload copies (pin_memory false) fitted on the fit split only, n / median / worst |step error|"]
    if len(shapes) < 2:
        return lines + [f"  {len(shapes)} fit shape(s): not fitted (catalog {now:.4g} GB/s)"]

    def err(x, rate):
        return (x["a"] + x["d"] / rate) / x["m"] - 1

    def stats(errs):
        return (f"{len(errs):>3} {statistics.median(map(abs, errs)):>6.1%} {max(errs, key=abs):>+7.1%}"
                if errs else f"{'-':>18}")

    new = 1 / offload_host_refit(fit_rows)
    loso = []
    for sh in shapes:
        rate = 1 / offload_host_refit([x for x in fit_rows if x["run"]["shape_id"] != sh])
        loso += [err(x, rate) for x in fit_rows if x["run"]["shape_id"] == sh]
    probes = [x["run"].get("copy_probe") or {} for x in rows]
    h2d = [p["h2d_pageable_gbps"] for p in probes if "h2d_pageable_gbps" in p]
    d2h = [p["d2h_pageable_gbps"] for p in probes if "d2h_pageable_gbps" in p]
    lines += [f"  {PAGEABLE_KEY}: catalog {now:.4g}, refitted {new:.4g} GB/s on {len(fit_rows)} fit runs "
              f"({len(shapes)} shapes)",
              f"    fit, one shape out    {stats(loso)}",
              f"    fit, refitted         {stats([err(x, new) for x in fit_rows])}",
              f"    test, catalog         {stats([err(x, now) for x in test_rows])}",
              f"    test, refitted        {stats([err(x, new) for x in test_rows])}"]
    if h2d:
        lines.append(f"    the hosts' own pageable copies of 64 MiB (copy_probe, {len(h2d)} runs): to the GPU "
                     f"{statistics.median(h2d):.1f} GB/s, from it {statistics.median(d2h):.1f} GB/s (medians)")
    for x in sorted(rows, key=lambda x: x["run"]["run_id"]):
        side = "fit" if x["run"]["shape_id"] in fit else "test"
        lines.append(f"    {x['run']['run_id'][:72]:<73}{x['run']['cluster'].gpu.name:>9} {side:>4}  measured "
                     f"{x['m']:.3f} s  refitted {err(x, new):+.1%}  catalog {err(x, now):+.1%}")
    if write and len(shapes) >= MIN_REFIT_SHAPES:
        path = ROOT / "workbench" / "catalog" / "efficiency.json"
        data = json.loads(path.read_text())
        data["cpu_adam"][PAGEABLE_KEY] = float(f"{new:.3g}")
        data["cpu_adam"]["source"] += (
            f" {PAGEABLE_KEY} (DeepSpeed's offload copies with pin_memory false, staged by the driver through its "
            "own page-locked memory) fitted " + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
            + f" by benchmarks/bench_accuracy.py --refit-pageable on the fit split's pin_memory-false runs only "
            f"({len(fit_rows)} runs, {len(shapes)} shapes; closed form in 1/rate, shapes weighted alike): "
            f"{float(f'{new:.3g}')} GB/s.")
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        timing.calibration.cache_clear()
        lines.append(f"wrote {PAGEABLE_KEY} to {path.relative_to(ROOT)}")
    elif write:
        lines.append(f"    kept: fewer than {MIN_REFIT_SHAPES} fit shapes")
    return lines


def offload_host_lines(runs: list, fit: set, write: bool = False) -> list[str]:
    """Refit each of :data:`OFFLOAD_HOST_CONSTANTS` on the fit split's runs of its regime only; print the catalog
    and refitted values, the fit split's leave-one-shape-out errors and the test split's errors with either value.
    With ``write`` the refitted values of constants fitted on at least :data:`MIN_REFIT_SHAPES` shapes go to
    ``efficiency.json``; the others keep their catalog values."""
    from workbench import timing

    cal = timing.calibration()["cpu_adam"]
    lines = ["ZeRO-3 offload host constants refitted on the fit split only (the test split is never used), "
             "n / median / worst |step error|"]
    written = {}

    def err(x, value, unit):
        return abs((x["a"] + value / unit * x["d"]) / x["m"] - 1)

    def stats(errs):
        return (f"{len(errs):>3} {statistics.median(errs):>6.1%} {max(errs):>6.1%}" if errs else f"{'-':>17}")

    for key, (what, unit, _) in OFFLOAD_HOST_CONSTANTS.items():
        rows = _offload_host_rows(runs, key)
        fit_rows = [x for x in rows if x["run"]["shape_id"] in fit]
        test_rows = [x for x in rows if x["run"]["shape_id"] not in fit]
        shapes = sorted({x["run"]["shape_id"] for x in fit_rows})
        now = float(cal.get(key, 0.0))
        if len(shapes) < 2:
            lines.append(f"  {key} ({what}): {len(shapes)} fit shape(s), not refitted (catalog {now:.4g})")
            continue
        new = offload_host_refit(fit_rows) * unit
        loso = []
        for sh in shapes:
            value = offload_host_refit([x for x in fit_rows if x["run"]["shape_id"] != sh]) * unit
            loso += [err(x, value, unit) for x in fit_rows if x["run"]["shape_id"] == sh]
        lines += [f"  {key} ({what}): catalog {now:.4g}, refitted {new:.4g} on {len(fit_rows)} fit runs "
                  f"({len(shapes)} shapes)",
                  f"    fit, one shape out    {stats(loso)}",
                  f"    fit, catalog          {stats([err(x, now, unit) for x in fit_rows])}",
                  f"    fit, refitted         {stats([err(x, new, unit) for x in fit_rows])}",
                  f"    test, catalog         {stats([err(x, now, unit) for x in test_rows])}",
                  f"    test, refitted        {stats([err(x, new, unit) for x in test_rows])}"]
        if len(shapes) >= MIN_REFIT_SHAPES:
            written[key] = (now, float(f"{new:.4g}"), len(fit_rows), len(shapes))
        else:
            lines.append(f"    kept: fewer than {MIN_REFIT_SHAPES} fit shapes")
    if write and written:
        path = ROOT / "workbench" / "catalog" / "efficiency.json"
        data = json.loads(path.read_text())
        for key, (_, new, _, _) in written.items():
            data["cpu_adam"][key] = new
        data["cpu_adam"]["source"] += (
            " Refitted " + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
            + " by benchmarks/bench_accuracy.py --refit-offload on the fit split's ZeRO-3 offload runs only "
            "(closed-form least squares on relative step error, shapes weighted alike): "
            + "; ".join(f"{k} {old:.4g} -> {new:.4g} ({n} runs, {sh} shapes)"
                        for k, (old, new, n, sh) in written.items()) + ".")
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        timing.calibration.cache_clear()
        lines.append(f"wrote {', '.join(written)} to {path.relative_to(ROOT)}")
    return lines


def host_memory_lines(runs: list, fit: set) -> list[str]:
    """Runs whose record has the process's resident set (``measure.py`` ``host_now``): the estimate's host memory
    per GPU (:attr:`workbench.memory_types.MemoryEstimate.host_bytes_per_gpu`,
    :func:`workbench.memory.host_resident_bytes`) beside the measured resident set at the end of the steps and at its
    peak (``VmHWM``), and the error on the peak, per split (``fit``: the fit split's shapes, where
    :data:`workbench.memory.HOST_PROCESS_BYTES` was taken)."""
    rows = [r for r in runs if r["measured"].get("host_rss")]
    if not rows:
        return []
    lines = ["HOST memory: the estimate's host memory per GPU beside the process's resident set (GiB; one rank); error "
             "= (estimate - peak) / peak",
             f"  {'run':<66}{'split':>6}{'estimate':>9}{'at end':>8}{'peak':>8}{'error':>8}{'node':>7}"]
    errors = {"fit": [], "test": []}
    for r in sorted(rows, key=lambda r: r["run_id"]):
        est = r["predicted"]["host"]  # the plan's pin_memory: pageable buffers at their own sizes when off
        m = r["measured"]
        side = "fit" if r["shape_id"] in fit else "test"
        err = (est - m["host_peak_rss"]) / m["host_peak_rss"]
        errors[side].append(err)
        lines.append(f"  {r['run_id'][:65]:<66}{side:>6}{est / GiB:>9.1f}{m['host_rss'] / GiB:>8.1f}"
                     f"{m['host_peak_rss'] / GiB:>8.1f}{err:>+8.1%}{(m.get('host_total') or 0) / GiB:>7.0f}")
    for side, errs in errors.items():
        if errs:
            worst = max(errs, key=abs)
            lines.append(f"  {side} split: {len(errs)} runs, median |error| {statistics.median(map(abs, errs)):.1%}, "
                         f"worst {worst:+.1%}, under by more than 1 %: {sum(e < -0.01 for e in errs)}")
    lines.append("  (the form of the estimate was read off DeepSpeed's and PyTorch's sources and checked on these "
                 "runs, both splits: not blind)")
    return lines


def configuration_medians(runs: list) -> list[dict]:
    """One row per configuration (:func:`configuration_key`): a configuration measured in several processes (the
    ZeRO-3 repeats, up to 1.8x apart) becomes its first run with the median of the runs' step times, so a fit
    targets what the configuration typically runs at and a configuration counts once however often it was run."""
    groups = {}
    for r in runs:
        groups.setdefault(configuration_key(r), []).append(r)
    out = []
    for sel in groups.values():
        first = sel[0]
        if len(sel) > 1:
            first = {**first, "measured": {**first["measured"],
                                           "step": statistics.median(r["measured"]["step"] for r in sel)},
                     "repeats": len(sel)}
        out.append(first)
    return out


def refit_time(fit_rows: list, *, write: bool, only: tuple = (), hf_zero3: bool = False) -> None:
    """Fit the time model's H200 constants on the fit split (``benchmarks/calibrate_h200_time.py``: relative
    step-time error, each shape weighted alike, Hugging Face runs left out, a configuration measured in several
    processes fitted once at the median of its step times: :func:`configuration_medians`) and print
    leave-one-shape-out errors. ``only``: fit just the constants whose names start with one of these (the others
    keep their catalog values). ``hf_zero3``: also fit on the Hugging Face stack's ZeRO-3 runs (DeepSpeed's
    per-module hooks are the same whatever code defines the modules; their other terms are the stack's own).
    Without ``write`` the constants are applied for this run only."""
    import numpy as np

    import calibrate_h200_time as C
    from corpus.describe import HF_STACKS

    rows = configuration_medians([r for r in fit_rows if r["measured"].get("step") and (
        r["stack"] not in HF_STACKS or (hf_zero3 and int(r["plan"].zero_stage) == 3))])
    inputs, measured, shapes, names = C.prepare(rows)
    if only:
        unknown = [o for o in only if not any(n.startswith(o) for n in names)]
        if unknown:
            raise ValueError(f"--refit-only: {', '.join(unknown)} names none of the fitted constants "
                             f"({', '.join(names)})")
        names = [n for n in names if n.startswith(tuple(only))]
    everyone = np.ones(len(rows), bool)
    before = C.current_values(names)
    x = C.fit(inputs, measured, shapes, everyone, names, before)
    hf = "Hugging Face runs other than ZeRO-3 left out" if hf_zero3 else "Hugging Face runs left out"
    print(f"time constants refitted on {len(rows)} fit-split configurations ({len(set(shapes))} shapes, "
          f"{sum(r.get('repeats', 1) > 1 for r in rows)} of them repeated and fitted at their median step, {hf}): "
          f"refitted (catalog now, change)")
    for n, v, old in zip(names, x, before):
        change = f"{v / old - 1:+.0%}" if old else ("+0%" if v == old else "was 0")
        print(f"  {n:40s} {v:<11.4g} ({old:.4g}, {change})")
    loso = []
    for s in sorted(set(shapes)):
        keep = shapes != s
        xs = C.fit(inputs, measured, shapes, keep, names, x, iters=25)
        loso += list(np.abs(C.predict(inputs, dict(zip(names, xs)))[~keep] / measured[~keep] - 1))
    print(f"  leave-one-shape-out step error over the fit split: median {np.median(loso):.1%}, "
          f"worst {np.max(loso):.1%} ({len(loso)} runs)")
    if write:
        what = (f"{len(rows)} H200 configurations over {len(set(shapes))} model shapes, a configuration measured in "
                f"several processes at its median step, "
                + ("Hugging Face runs other than ZeRO-3 left out" if hf_zero3 else "Hugging Face runs left out"))
        C.write_constants(names, x, source=(
            "fitted with the Hopper curve's layer_pass_overhead_s and step_overhead_s and the cpu_adam rates on the "
            "fit split of benchmarks/accuracy_split.json (benchmarks/h200_runs.py and the corpus "
            "benchmarks/corpus/h200_runs.jsonl) by benchmarks/bench_accuracy.py --refit-time (Levenberg-Marquardt "
            "on relative step-time error, shapes weighted alike; the test split is never used)"
            + (f"; latest refit of {', '.join(names)} only ({what}), the other constants kept from the refit "
               f"before. " if only else f": {what}. ")
            + "step_bytes_per_parameter: HBM bytes per optimizer-shard parameter on top of the optimizer's own; "
            "tensor_seconds: per parameter tensor per step; zero3_*: host seconds per ZeRO-3 hook call (every "
            "submodule, each pass), per module gradient reduce-and-partition, and extra per gathering fetch or "
            "reduce when the group has >1 rank (overlapped with the GPU's kernels, zero3_hook_overlap). Not used for "
            "the Megatron engine."))
    else:
        C.apply_constants(names, x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, nargs="+", default=[CORPUS],
                    help="corpus files (default the H200 corpus; e.g. also benchmarks/corpus/h100_runs.jsonl)")
    ap.add_argument("--runs", action="store_true", help="print every run's errors")
    ap.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    ap.add_argument("--write-band", action="store_true",
                    help="write the test split's per-engine error band to workbench/catalog/error_band.json")
    ap.add_argument("--write-gpu-band", action="store_true",
                    help="write the test split's step-time band of each GPU other than the H200 in the corpus (its "
                         "own runs only) to error_band.json's gpus section, which estimates on that GPU read first")
    ap.add_argument("--refit-time", action="store_true",
                    help="refit the H200 time constants on the fit split only (calibrate_h200_time's fit), "
                         "print leave-one-shape-out errors, and evaluate with them")
    ap.add_argument("--write", action="store_true",
                    help="with --refit-time, --refit-offload or --refit-pageable: store the constants in the catalog")
    ap.add_argument("--refit-only", default="",
                    help="with --refit-time: comma-separated prefixes of the constants to fit (e.g. zero3_,"
                         "deepspeed_); the others keep their catalog values")
    ap.add_argument("--zero3-host", action="store_true",
                    help="print each ZeRO-3 run's step time beyond the model's without its ZeRO-3 host term, per "
                         "module fetch, beside the GPU kernel time per fetch")
    ap.add_argument("--lora-zero3", action="store_true",
                    help="LoRA at ZeRO-3: the step error with the hooks of LoRA's modules priced at shares of a "
                         "ZeRO-3 hook call, fit and test split, catalog host and each run's own probe (nothing is "
                         "written)")
    ap.add_argument("--refit-zero3", action="store_true",
                    help="refit the ZeRO-3 host constants on the fit split's ZeRO-3 runs, with and without a spread "
                         "of host speed between processes; print leave-one-shape-out and test-split ZeRO-3 errors "
                         "(nothing is written)")
    ap.add_argument("--refit-offload", action="store_true",
                    help="refit ZeRO-3's offload host-time constants on the fit split's runs of each regime; print "
                         "leave-one-shape-out and test-split errors (with --write: store them in the catalog)")
    ap.add_argument("--refit-pageable", action="store_true",
                    help="fit the host's pageable copy rate (pin_memory false) on the fit split's runs; print "
                         "leave-one-shape-out and test-split errors (with --write: store it in the catalog)")
    ap.add_argument("--host", action="store_true",
                    help="print the host-memory estimate beside the measured resident set of the runs that have it")
    ap.add_argument("--host-dispatch", action="store_true",
                    help="print step-time errors with each run's own host probe scaling the host seconds (what a "
                         "profile's host_dispatch does) beside the catalog host's")
    ap.add_argument("--overheads", action="store_true",
                    help="print the fit split's memory outside the allocator and allocator reserve per engine")
    ap.add_argument("--with-hf-zero3", action="store_true",
                    help="with --refit-time: also fit on the Hugging Face stack's ZeRO-3 fit runs")
    ap.add_argument("--regimes", action="store_true",
                    help="also print step-time errors per regime (ZeRO stage, offload, ranks, Hugging Face stack)")
    ap.add_argument("--profile", metavar="NAME_OR_PATH",
                    help="price every run with this hardware profile (workbench calibrate's, taken on the machine "
                         "the runs were measured on) instead of the catalog's constants")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    if args.profile:
        from workbench.calibrate.profile import load_profile

        global PROFILE
        try:
            PROFILE = load_profile(args.profile)
        except (OSError, ValueError) as exc:
            ap.error(f"--profile {args.profile}: {exc}")

    split = json.loads(SPLIT.read_text())
    fit, test = set(split["fit"]), set(split["test"])
    missing = [str(path) for path in args.corpus if not Path(path).is_file()]
    if missing:  # a mistyped path would otherwise score the old runs alone and look like a result
        ap.error(f"--corpus: no such file: {', '.join(missing)}")
    runs = old_runs() + [r for path in args.corpus for r in corpus_runs(path)]
    unknown = sorted({r["shape_id"] for r in runs} - fit - test)
    if unknown:
        print(f"shapes in neither split (left out; add them to {SPLIT.name}): {', '.join(unknown)}")
    ooms = [r for r in runs if r.get("oom")]
    runs = [r for r in runs if not r.get("oom")]
    scored = {"fit": [], "test": []}
    expandable = {"fit": [], "test": []}  # runs with PyTorch's expandable-segments allocator: tables of their own
    for r in runs:
        side = "fit" if r["shape_id"] in fit else "test" if r["shape_id"] in test else None
        if side is None:
            continue
        try:
            p = predict(r)
        except ValueError as exc:
            print(f"  {r['run_id']}: not estimated ({exc})")
            continue
        (expandable if r["plan"].expandable_segments else scored)[side].append((r, errors(r, p)))
        r["predicted"] = p
    runs = [r for r in runs if not r["plan"].expandable_segments]
    if args.refit_time:
        try:
            refit_time([r for r, _ in scored["fit"]], write=args.write,
                       only=tuple(o.strip() for o in args.refit_only.split(",") if o.strip()),
                       hf_zero3=args.with_hf_zero3)
        except ValueError as exc:
            ap.error(str(exc))
        for group in (scored, expandable):  # predict again with the refitted constants
            for side in group:
                group[side] = [(r, errors(r, r.update(predicted=predict(r)) or r["predicted"]))
                               for r, _ in group[side]]
    n_shapes = {k: len({r['shape_id'] for r, _ in v}) for k, v in scored.items()}
    gpus = {k: collections.Counter(r["cluster"].gpu.name for r, _ in v) for k, v in scored.items()}
    on = {k: ", ".join(f"{n} on {g}" for g, n in sorted(c.items())) for k, c in gpus.items()}
    print(f"{len(runs)} runs: fit split {len(scored['fit'])} runs over {n_shapes['fit']} shapes ({on['fit']}), test "
          f"split {len(scored['test'])} runs over {n_shapes['test']} shapes ({on['test']}) "
          f"(corpus: {', '.join(map(str, args.corpus))})")
    out = []
    out += table(scored["test"], "TEST split (shapes never fitted on) — error = (predicted - measured) / measured")
    fresh = fresh_shapes(runs, test)
    if fresh:
        rows = [(r, e) for r, e in scored["test"] if r["shape_id"] in fresh]
        out += [""] + table(rows, f"FRESH test shapes (first measured after {FRESH_AFTER} UTC, after the memory "
                                  f"model's main fixes were designed: {', '.join(sorted(fresh))})")
    split = json.loads(SPLIT.read_text())
    for key in sorted(k for k in split if k.startswith("final") and isinstance(split[k], list)):
        final = set(split[key]) & {r["shape_id"] for r, _ in scored["test"]}
        if final:
            rows = [(r, e) for r, e in scored["test"] if r["shape_id"] in final]
            out += [""] + table(rows, f"{key.upper()} held-out shapes (declared before they were run; their data was "
                                      f"kept out of sight until the models were frozen: {', '.join(sorted(final))})")
    out += [""] + table(scored["fit"], "fit split (in-sample: constants were fitted on these shapes)")
    out += [""] + host_share_lines(scored["test"], "TEST split step time by the predicted host share of the step "
                                                   "(workbench.timing.host_share): n, median, worst |error|, "
                                                   "under-estimates")
    if args.regimes:
        out += [""] + regime_lines(scored["test"], "TEST split step time per regime: n, median, worst |error|, "
                                                   "under-estimates")
        out += [""] + regime_lines(scored["fit"], "fit split step time per regime (in-sample)")
    if expandable["test"]:
        # the same configurations with the default allocator, for the comparison run by run
        by_id = {r["run_id"]: (r, e) for r, e in scored["test"]}
        paired = [by_id[r["run_id"].replace("/expseg", "")] for r, _ in expandable["test"]
                  if r["run_id"].replace("/expseg", "") in by_id]
        out += [""] + table(expandable["test"], "expandable segments, test shapes (PYTORCH_CUDA_ALLOC_CONF="
                                                "expandable_segments:True; plans with expandable_segments on)")
        out += [""] + table(paired, "the same test configurations with the default allocator")
    if expandable["fit"]:
        out += [""] + table(expandable["fit"], "expandable segments, fit shapes (in-sample: the expandable reserve "
                                               "was fitted on these runs)")
    if args.host_dispatch:
        out += [""] + host_dispatch_lines([r for rows in scored.values() for r, _ in rows], fit)
    noise = repeatability([r for group in (scored, expandable) for rows in group.values() for r, _ in rows])
    out += [""] + repeatability_lines(noise)
    zero3_band = band(scored["test"], noise=noise)["step"].get("deepspeed/zero3")
    if zero3_band:
        out.append(f"  ZeRO-3 step band (--write-band, deepspeed/zero3): held-out runs "
                   f"-{zero3_band['model_low_fraction']:.1%} / +{zero3_band['model_high_fraction']:.1%} "
                   f"({zero3_band['n']} runs), one configuration over "
                   f"processes -{zero3_band['noise_low_fraction']:.1%} / +{zero3_band['noise_high_fraction']:.1%} "
                   f"({zero3_band['noise_runs']} runs): written -{zero3_band['low_fraction']:.1%} / "
                   f"+{zero3_band['high_fraction']:.1%}")
    print("\n".join(out))
    if args.write_gpu_band:
        for gpu, entries in write_gpu_band(scored["test"], noise).items():
            print(f"\nwrote the {gpu} step band: " + "; ".join(
                f"{k} -{e['low_fraction']:.1%} / +{e['high_fraction']:.1%} ({e['n']} runs)"
                for k, e in entries.items()))
    if ooms:
        from workbench.estimate import estimate

        said_fits = [r["run_id"] for r in ooms if estimate(r["model"], r["cluster"], r["plan"]).memory.fits_gpu]
        gpus = " and ".join(sorted({r["cluster"].gpu.name for r in ooms}))
        print(f"\n{len(ooms)} runs ran out of memory on the {gpus}; the estimate said 'fits' for {len(said_fits)}"
              + (f": {', '.join(said_fits)}" if said_fits else ""))
    if args.runs:
        for side, rows in (("test", scored["test"]), ("fit", scored["fit"]),
                           ("expandable segments test", expandable["test"]),
                           ("expandable segments fit", expandable["fit"])):
            if not rows:
                continue
            print(f"\n{side} runs")
            for r, e in sorted(rows, key=lambda x: x[0]["run_id"]):
                cells = "  ".join(f"{q} {e[q]:+7.1%}" if e[q] is not None else f"{q} {'-':>7}" for q in QUANTITIES)
                print(f"  {r['stack']:<10} {r['run_id']:<64} {cells}")
    if args.zero3_host:
        print()
        print("\n".join(zero3_host_lines([r for _, rows in (*scored.items(), *expandable.items())
                                            for r, _ in rows], fit)))
    if args.lora_zero3:
        print()
        print("\n".join(lora_zero3_lines([r for _, rows in scored.items() for r, _ in rows], fit)))
    if args.refit_zero3:
        print()
        print("\n".join(zero3_refit_lines([r for _, rows in scored.items() for r, _ in rows], fit)))
    if args.host:
        print()
        print("\n".join(host_memory_lines([r for _, rows in scored.items() for r, _ in rows], fit) or
                        ["HOST memory: no run of the corpus records its resident set"]))
    if args.refit_offload:
        print()
        print("\n".join(offload_host_lines([r for _, rows in scored.items() for r, _ in rows], fit,
                                           write=args.write)))
    if args.refit_pageable:
        print()
        print("\n".join(pageable_lines([r for _, rows in scored.items() for r, _ in rows], fit, write=args.write)))
    if args.overheads:
        print("\nfit split, one process per GPU: outside the allocator and allocator reserve")
        for engine, f in overhead_fit(scored["fit"]).items():
            print(f"  {engine:<20} n {f['n']:>3}  outside median {f['outside_gib']:.2f} GiB (max "
                  f"{f['outside_max_gib']:.2f})  reserve median {f['reserve_median']:.1%} p90 {f['reserve_p90']:.1%} "
                  f"max {f['reserve_max']:.1%}"
                  + (f"  NCCL (multi-rank runs, n {f['nccl_n']}) +{f['nccl_gib']:.2f} GiB" if "nccl_n" in f else ""))
            for name, g in f.get("reserve_regimes", {}).items():
                print(f"  {'':<20} {name:<30} n {g['n']:>3}  reserve median {g['median']:.1%} p90 {g['p90']:.1%}")
        beside = outside_beside_other_processes([r for _, rows in scored.items() for r, _ in rows])
        if beside:
            print(f"all splits, one process per GPU: memory other processes held on the GPU at a run's start "
                  f"(device used beyond a lone process's CUDA context, {beside['lone_context_gib']:.2f} GiB), "
                  f"counted in 'outside the allocator' and so in the measured device total")
            for stack, f in beside["stacks"].items():
                print(f"  {stack:<20} n {f['n']:>3}  beside other processes {f['beside']:>3} (up to "
                      f"{f['others_max_gib']:.2f} GiB)  outside median {f['outside_gib']:.2f} GiB, less theirs "
                      f"{f['own_outside_gib']:.2f} GiB")
        if beside:
            print("fit split, one process per GPU: outside the allocator by stack, less other processes' memory "
                  "(workbench.memory.STACK_OUTSIDE_ALLOCATOR_BYTES)")
            for key, f in outside_by_stack(scored["fit"], beside["lone_context_gib"] * GiB).items():
                print(f"  {'/'.join(key):<38} n {f['n']:>3}  median {f['median_gib']:.2f} GiB  p10 {f['p10_gib']:.2f} "
                      f"p90 {f['p90_gib']:.2f}  beside other processes {f['beside']}")
        fitted = expandable_reserve_fit(expandable["fit"])
        if fitted:
            print("fit split, expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): allocator reserve")
            for engine, f in fitted.items():
                print(f"  {engine:<20} n {f['n']:>3}  reserve median {f['median']:.1%} p90 {f['p90']:.1%} range "
                      f"{f['min']:.1%}-{f['max']:.1%}"
                      + (f"  -> RESERVE_FRACTION_EXPANDABLE {f['used']:.2%}" if "used" in f else ""))
    if args.write_band:
        path = ROOT / "workbench" / "catalog" / "error_band.json"
        doc = {"about": "Held-out error band: for each engine (and engine/recompute mode), how far measured values went "
                        "below (low_fraction, 10th percentile) and above (high_fraction, 90th percentile) the "
                        "workbench's estimate, as fractions of the estimate, on the model shapes of the test split of "
                        "benchmarks/accuracy_split.json; worst_* are the extremes. Written by "
                        "benchmarks/bench_accuracy.py --write-band. ENGINE/expandable-segments: the runs with "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. step deepspeed/zero3: the ZeRO-3 runs, "
                        "each side at least the spread of one ZeRO-3 configuration measured in separate processes "
                        "(noise_*, from every repeated configuration; model_*: the runs' own band). device "
                        "ENGINE/replayed-allocator: the engine's one-GPU runs in the replay's scope (DeepSpeed "
                        "ZeRO-0/1/2 of transformers and megatron-core models; megatron-core's own DDP) scored with "
                        "the caching allocator replayed (benchmarks/alloc_sim.py --write-band). step ENGINE/host-bound "
                        "and ENGINE/gpu-bound: the engine's runs below ZeRO-3 whose predicted step is at least / "
                        "less than half host work (workbench.timing.host_share). deepspeed/param-offload (every "
                        "quantity): the ZeRO-3 runs with the parameters on the host (offload_param). device "
                        "deepspeed/optimizer-offload: the DeepSpeed runs with the optimizer on the host and the "
                        "parameters on the GPU. Those two regimes' runs are left out of the engine's and its "
                        "recompute modes' entries for the quantities they have their own entry for.", "gpu": "H200",
               **band(scored["test"], expandable["test"], noise)}
        old = json.loads(path.read_text()) if path.exists() else {}
        doc["device"].update(replayed_band_entries(old.get("device") or {}))
        if old.get("gpus"):  # other GPUs' own bands (--write-gpu-band) stay
            doc["gpus"] = old["gpus"]
        path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {path.relative_to(ROOT)}")
    if args.markdown:
        args.markdown.write_text("```\n" + "\n".join(out) + "\n```\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
