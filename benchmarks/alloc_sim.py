"""A study of the caching allocator's reserve: PyTorch's CUDA caching-allocator policy replayed over an allocation
trace of a run's training steps, the simulated reserve beside the measured one of the H200 corpus.

The reserve is ``max_memory_reserved / max_memory_allocated − 1``. The allocator policy
(:class:`~workbench.allocsim.CachingAllocator`, PyTorch's ``c10/cuda/CUDACachingAllocator.cpp``, each stream's
cached blocks its own) and the meta-device traces of DeepSpeed ZeRO-0 to 3 steps — of a transformers model (:func:`workbench.allocsim.trace_hf_deepspeed`) and
of a megatron-core ``GPTModel`` with the local layer spec (:func:`workbench.allocsim.trace_mcore_deepspeed`, run in a
child process) — and of that ``GPTModel`` under megatron-core's own DDP and optimizer
(:func:`workbench.allocsim.trace_mcore_ddp`) live in :mod:`workbench.allocsim`, where ``workbench estimate
--simulate-allocator`` uses them in place of the constant; this script traces each corpus record's own model and
engine settings and compares the simulated reserve with the measured one and with its engine's
:data:`workbench.memory.RESERVE_FRACTION`, per run, per stack and per split of ``benchmarks/accuracy_split.json``;
nothing is fitted. Scope: on one GPU with the default allocator, Hugging Face and dense megatron-core models under
DeepSpeed ZeRO-0 to 3 (no optimizer offload but ZeRO-1's, ZeRO-2's and ZeRO-3's to the CPU, ZeRO-3's without
accumulation), dense megatron-core models under megatron-core's DDP (``mcore-ddp``: plain or distributed optimizer).

Run: ``python benchmarks/alloc_sim.py`` (fit and test split apart; ``--runs`` prints every run; 21 minutes on two
busy cores for the 887 in-scope runs through final49, where tracing every step took 53 and copying settled steps 26:
the traces copy settled steps, :func:`workbench.allocsim.traced_steps`, and a step's repeating micro-batches,
:func:`workbench.allocsim.traced_micro_batches`, with the same output). Its output is kept in
``benchmarks/results/alloc_sim_h200.txt``.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from workbench import allocsim  # noqa: E402
from workbench.allocsim import (CachingAllocator, DeepSpeedSetup, H200_BYTES, replay, round_size,  # noqa: E402,F401
                                segment_bytes)

CORPUS = ROOT / "benchmarks" / "corpus" / "h200_runs.jsonl"
SPLIT = ROOT / "benchmarks" / "accuracy_split.json"

def _ds_setup(rec: dict) -> DeepSpeedSetup:
    """The trace's DeepSpeed settings as the run had them: its ds_config (as resolved: a Trainer's ``"auto"`` filled)
    and the ZeRO sizes DeepSpeed resolved, DeepSpeed's defaults where the record has none."""
    from workbench.configs.importer import read_ds_bool

    ds = rec["ds_config"]
    zero = ds.get("zero_optimization", {}).get("stage", 0)
    resolved = rec.get("zero_config_resolved") or {}
    sizes = {name: int(resolved[key]) for key, name in (("reduce_bucket_size", "reduce_bucket_elements"),
                                                         ("stage3_prefetch_bucket_size", "prefetch_bucket_elements"),
                                                         ("stage3_param_persistence_threshold",
                                                          "persistence_threshold"),
                                                         ("sub_group_size", "sub_group_elements"))
             if resolved.get(key) is not None}
    offload = ds.get("zero_optimization", {}).get("offload_optimizer") or {}
    return DeepSpeedSetup(zero_stage=zero, micro_batch=ds["train_micro_batch_size_per_gpu"],
                          grad_accum=ds.get("gradient_accumulation_steps", 1), seq_length=rec["seq_length"],
                          **sizes, steps=rec.get("steps", 6),
                          offload_optimizer=bool(ds.get("zero_optimization", {}).get("offload_optimizer")),
                          # ZeRO-3 swapping the optimizer to NVMe (below ZeRO-3 DeepSpeed runs nvme as the CPU)
                          nvme_optimizer=zero == 3 and offload.get("device") == "nvme",
                          offload_params=bool(ds.get("zero_optimization", {}).get("offload_param")),
                          overlap_comm=bool(rec.get("zero_config_resolved", {}).get("overlap_comm")),
                          # built inside deepspeed.zero.Init (measure.py's zero_init, the Trainer at ZeRO-3), else
                          # whole on the GPU
                          zero_init=bool((rec.get("options") or {}).get("zero_init") or rec.get("built_in_zero_init")),
                          # pin_memory read as DeepSpeed 0.19 reads it (default on), as bench_accuracy.corpus_run does
                          side_stream_lags=allocsim.side_stream_lags(zero, bool(offload), read_ds_bool(
                              offload.get("pin_memory"), "zero_optimization.offload_optimizer.pin_memory")
                              is not False))


def trace_hf_deepspeed(rec: dict, sdpa_kernel: str = "cudnn") -> list:
    """The allocation events of a corpus Hugging Face + DeepSpeed ZeRO-0 to 3 run (one GPU, bf16; LoRA
    through peft as ``benchmarks/corpus/measure.py`` adds it): :func:`workbench.allocsim.trace_hf_deepspeed` on the
    record's config and DeepSpeed settings, sdpa traced as ``sdpa_kernel``."""
    s = _ds_setup(rec)
    return allocsim.trace_hf_deepspeed(
        rec["hf_config"], zero_stage=s.zero_stage, micro_batch=s.micro_batch, seq_length=s.seq_length,
        grad_accum=s.grad_accum, attn_implementation=rec.get("attn_implementation") or rec["options"].get("attn", "sdpa"),
        gradient_checkpointing=bool(rec.get("gradient_checkpointing")), lora=rec.get("lora") or None,
        checkpoint_every=int(rec.get("checkpoint_every_n_layers") or 1),  # transformers' every_n_layers
        reduce_bucket_elements=s.reduce_bucket_elements, prefetch_bucket_elements=s.prefetch_bucket_elements,
        persistence_threshold=s.persistence_threshold, sub_group_elements=s.sub_group_elements, steps=s.steps,
        offload_optimizer=s.offload_optimizer,
        sdpa_kernel=sdpa_kernel, overlap_comm=s.overlap_comm, offload_params=s.offload_params,
        zero_init=s.zero_init, side_stream_lags=s.side_stream_lags, nvme_optimizer=s.nvme_optimizer)


# ================================================================================================================
# Simulated vs measured reserve on the corpus
# ================================================================================================================
MCORE_STACKS = ("mcore-ds", "mcore-ddp")
"""The corpus stacks of megatron-core models, traced in a child process (:func:`workbench.allocsim.mcore_replays`)."""
sys.path.insert(0, str(ROOT / "benchmarks"))
from corpus.describe import HF_STACKS  # noqa: E402  (the transformers stacks, traced here: trace_hf_deepspeed)


def engine_of_stack(stack: str) -> str:
    """The key of :data:`workbench.memory.RESERVE_FRACTION` / ``OUTSIDE_ALLOCATOR_BYTES`` of a corpus stack's
    engine: ``megatron`` for megatron-core's own DDP (``mcore-ddp``), else ``deepspeed`` (a plan's own engine is
    :func:`workbench.allocsim.outside_allocator_engine`)."""
    return "megatron" if stack == "mcore-ddp" else "deepspeed"


def engine_of(rec: dict) -> str:
    """:func:`engine_of_stack` of a corpus record."""
    return engine_of_stack(rec.get("stack", ""))


def in_scope(rec: dict) -> bool:
    """Corpus runs the replay can be compared with: finished with both peaks recorded, on the default allocator
    without a cap, whose plan is in the replay's scope as ``workbench estimate`` judges it
    (:func:`workbench.allocsim.scope_problems`, the one definition: one GPU, DeepSpeed ZeRO-0 to 3 or megatron-core's
    DDP, the offload and LoRA regimes it traces)."""
    if (rec.get("status") != "ok" or not rec.get("peak_reserved_bytes") or rec.get("allocator_cap_bytes")
            or rec.get("pytorch_cuda_alloc_conf") or rec.get("stack") not in HF_STACKS + MCORE_STACKS):
        return False
    from bench_accuracy import corpus_run

    run = corpus_run(rec)
    return run is not None and not allocsim.scope_problems(run["model"], run["plan"])


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
    device_error_replay_peak: float | None = None
    """The same with the replay's own peak reserved in place of the estimate's allocated peak and its reserve: what
    an estimate that took the traced peaks whole (DeepSpeed's initialization flatten included) would say."""
    device_error_own: float | None = None
    """:attr:`device_error_replay_peak` against the run's own device: the measured whole device less what other
    processes held on the GPU when the run started (its ``device_used_at_start_bytes`` beyond a lone process's
    context, the least of it over the corpus's one-GPU runs), as ``benchmarks/bench_accuracy.py`` takes the memory
    outside the allocator that the constants are fitted on."""
    offload: str = ""
    """The run's offload regime as the error band names it (:func:`offload_regime`): ``param-offload``,
    ``zero3-optimizer-offload``, ``optimizer-offload`` or ``""``."""

    @property
    def simulated_error(self) -> float:
        """Peak reserved predicted from the measured allocated peak and the simulated reserve, relative error."""
        return (1 + self.simulated_reserve) / (1 + self.measured_reserve) - 1

    @property
    def constant_error(self) -> float:
        return (1 + self.constant_reserve) / (1 + self.measured_reserve) - 1


def offload_regime(plan) -> str:
    """The offload regime of a plan's replayed band (:func:`workbench.memory.replayed_offload_regime`), ``""``
    without offload."""
    from workbench.memory import replayed_offload_regime

    return replayed_offload_regime(plan.offload_params, plan.offload_optimizer, plan.zero_stage) or ""


def simulate(rec: dict, split: str, replayed: dict | None = None, run: dict | None = None,
             lone_bytes: float | None = None) -> Row:
    """One in-scope corpus record: the simulated reserve beside the measured one and the constant, and the
    estimator's whole-device error with either. ``replayed``: the record's replay already made (a megatron-core
    record's, from :func:`workbench.allocsim.mcore_replays`); else its transformers trace is replayed here.
    ``run``: the record's run already described (:func:`corpus_runs`, a megatron-core record's, whose specs its
    replay was traced from), so that its specs are built once; else described here. ``lone_bytes``: a lone
    process's GPU memory in use after its CUDA initialisation (:func:`lone_context_bytes`), for
    :attr:`Row.device_error_own`."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_accuracy import corpus_run, predict, reserve_base
    from workbench.memory import RESERVE_FRACTION, plan_overheads, stack_outside_bytes

    run = corpus_run(rec) if run is None else run
    if replayed is None:  # the allocator may reserve the H200 less the stack's memory outside it, as the estimate's
        a = replay(trace_hf_deepspeed(rec), capacity_bytes=None if run is None else _capacity_bytes(run))
        replayed = dict(reserve_fraction=a.reserve_fraction, peak_allocated_bytes=a.peak_allocated_bytes,
                        peak_reserved_bytes=a.peak_reserved_bytes)
    # the estimate's own constants for the run: its reserve (DeepSpeed's ZeRO-3 has its own) and its memory outside
    # the allocator (one process)
    own = (plan_overheads(run["plan"], 0) if run is not None
           else {"reserve_fraction": RESERVE_FRACTION[engine_of(rec)]})
    constant = float(own["reserve_fraction"])
    if run is not None and run["measured"].get("allocated"):  # parameter offload: taken on the streams' caches
        constant = (1 + constant) * reserve_base(run) / run["measured"]["allocated"] - 1
    device = device_sim = device_peak = device_own = None
    if run is not None and run["measured"].get("device"):
        p, measured = predict(run), run["measured"]["device"]
        # taken from the constants, not backed out of the estimate's device figure, which may hold more than the
        # reserve above the allocated peak (DeepSpeed's initialization segments); the replay replaces that reserve,
        # and the estimate that replays it takes its stack's own memory outside the allocator
        outside = float(stack_outside_bytes(run["model"], run["plan"]))
        device = p["device"] / measured - 1
        device_sim = (outside + (1 + replayed["reserve_fraction"]) * p["allocated"]) / measured - 1
        device_peak = (outside + replayed["peak_reserved_bytes"]) / measured - 1
        at_start = rec.get("device_used_at_start_bytes")
        others = max(0.0, at_start - lone_bytes) if at_start is not None and lone_bytes is not None else 0.0
        device_own = (outside + replayed["peak_reserved_bytes"]) / (measured - others) - 1
    return Row(run_id=rec["run_id"], split=split,
               measured_reserve=rec["peak_reserved_bytes"] / rec["peak_allocated_bytes"] - 1,
               simulated_reserve=replayed["reserve_fraction"], constant_reserve=constant,
               simulated_allocated_error=replayed["peak_allocated_bytes"] / rec["peak_allocated_bytes"] - 1,
               device_error=device, device_error_simulated=device_sim, device_error_replay_peak=device_peak,
               device_error_own=device_own,
               offload=offload_regime(run["plan"]) if run is not None else "")


def lone_context_bytes(recs: list) -> float | None:
    """A lone process's GPU memory in use right after its CUDA initialisation: the least
    ``device_used_at_start_bytes`` over the one-GPU records (as ``benchmarks/bench_accuracy.py``'s
    ``outside_beside_other_processes`` takes it);
    anything above it in a record was held by other processes on the same GPU when that run started."""
    at_start = [r["device_used_at_start_bytes"] for r in recs
                if r.get("device_used_at_start_bytes") is not None and int(r.get("world_size") or 1) == 1]
    return min(at_start) if at_start else None


def corpus_runs(recs: list) -> list:
    """The records' runs as ``benchmarks/bench_accuracy.py`` describes them (``corpus_run``: the model, cluster and
    plan specs, the measured peaks), built once so that a megatron-core record's replay and its estimate read the
    same specs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_accuracy import corpus_run

    return [corpus_run(rec) for rec in recs]


def mcore_replays(recs: list, runs: list) -> list:
    """The megatron-core records' replays, in one child process per memory outside the allocator
    (:func:`workbench.allocsim.mcore_replays`: the allocator may reserve the H200 less the stack's memory outside
    it, :func:`_capacity_bytes`), each traced from the specs of the record's run (:func:`corpus_runs`)."""
    out = [None] * len(runs)
    capacity = [_capacity_bytes(run) for run in runs]
    for cap in sorted(set(capacity)):
        idx = [i for i in range(len(runs)) if capacity[i] == cap]
        jobs = [(runs[i]["model"], runs[i]["cluster"], runs[i]["plan"]) for i in idx]
        for i, o in zip(idx, allocsim.mcore_replays(jobs, capacity_bytes=cap)):
            out[i] = o
    failed = [(run["run_id"], o["error"]) for run, o in zip(runs, out) if "error" in o]
    if failed:
        raise SystemExit("megatron-core traces failed: " + "; ".join(f"{r}: {e}" for r, e in failed))
    return out


def _capacity_bytes(run: dict) -> int:
    """What the allocator may reserve in a corpus run's replay: its GPU's memory (``torch.cuda.mem_get_info``'s
    total, as the record kept it; an H200's for the records from before it was kept) less the run's stack's memory
    outside the allocator (:func:`workbench.memory.stack_outside_bytes`), as
    :func:`workbench.allocsim.replay_capacity_bytes` gives a plan's on its GPU."""
    from workbench.memory import stack_outside_bytes

    return int((run.get("gpu_total_bytes") or H200_BYTES) - stack_outside_bytes(run["model"], run["plan"]))


def _stats(errs) -> str:
    import statistics

    errs = [e for e in errs if e is not None]
    if not errs:
        return "no runs"
    worst = max(errs, key=abs)
    return (f"median |err| {statistics.median(abs(e) for e in errs):5.1%}  worst {worst:+6.1%}  "
            f"under >5 % {sum(e < -0.05 for e in errs):2d}")


def summary(rows: list) -> list:
    """Three lines: peak reserved (from the measured allocated peak) and the estimator's whole device, each with
    the simulated reserve and with the constant (each run's engine's: "per engine" where the rows mix them), and the
    whole device as the estimate with the allocator replayed gives it (the replay's own peak reserved)."""
    constants = {r.constant_reserve for r in rows}
    constant = f"{constants.pop():.1%}" if len(constants) == 1 else "per engine"
    return [f"n {len(rows):3d}  peak reserved   simulated: {_stats([r.simulated_error for r in rows])}   "
            f"constant {constant}: {_stats([r.constant_error for r in rows])}",
            f"       whole device    simulated: {_stats([r.device_error_simulated for r in rows])}   "
            f"constant {constant}: {_stats([r.device_error for r in rows])}",
            f"       whole device    the replay's own peak reserved (the estimate's): "
            f"{_stats([r.device_error_replay_peak for r in rows])}",
            f"       the run's own   the same, less other processes' memory at the run's start: "
            f"{_stats([r.device_error_own for r in rows])}"]


def band_of(rows: list) -> dict:
    """The whole-device band entry of ``rows`` scored as the estimate with the allocator replayed predicts the device
    (its memory outside the allocator + the replay's own peak reserved, :attr:`Row.device_error_replay_peak`)."""
    import numpy as np

    from bench_accuracy import BAND_QUANTILE

    ratios = [1 / (1 + r.device_error_replay_peak) for r in rows if r.device_error_replay_peak is not None]
    lo, hi = np.quantile(ratios, [1 - BAND_QUANTILE, BAND_QUANTILE])
    return dict(n=len(ratios), shapes=len({r.run_id.split("/")[1] for r in rows}),
                low_fraction=round(max(0.0, 1 - float(lo)), 4), high_fraction=round(max(0.0, float(hi) - 1), 4),
                worst_low_fraction=round(max(0.0, 1 - min(ratios)), 4),
                worst_high_fraction=round(max(0.0, max(ratios) - 1), 4))


def write_band(rows: list, engine: str = "deepspeed") -> dict:
    """Write the whole-device band of ``rows`` (the test split's runs of ``engine``, :func:`band_of`) into
    ``workbench/catalog/error_band.json`` as ``device`` / ``ENGINE/replayed-allocator`` (what
    :func:`workbench.memory.error_band` gives an estimate of that engine whose allocator was replayed), and each
    offload regime's own (``ENGINE/replayed-allocator/param-offload``, ``.../zero3-optimizer-offload``,
    ``.../optimizer-offload``, where it has
    :data:`workbench.memory.MIN_BAND_RUNS` runs: their reserves run further from the replay's), leaving the rest of
    the file as ``benchmarks/bench_accuracy.py --write-band`` wrote it; returns ``{key: entry}``."""
    from workbench.memory import ERROR_BAND_FILE, MIN_BAND_RUNS, REPLAYED_BAND_SUFFIX

    doc = json.loads(ERROR_BAND_FILE.read_text())
    key = f"{engine}/{REPLAYED_BAND_SUFFIX}"
    written = {key: band_of(rows)}
    for regime in sorted({r.offload for r in rows if r.offload}):
        part = [r for r in rows if r.offload == regime and r.device_error_replay_peak is not None]
        if len(part) >= MIN_BAND_RUNS:
            written[f"{key}/{regime}"] = band_of(part)
    for k in [k for k in doc["device"] if k.startswith(key + "/")]:
        del doc["device"][k]  # a regime entry is rewritten from this corpus, or goes
    doc["device"].update(written)
    ERROR_BAND_FILE.write_text(json.dumps(doc, indent=2) + "\n")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--runs", action="store_true", help="print every run")
    ap.add_argument("--only", default="", help="only run ids containing this")
    ap.add_argument("--write-band", action="store_true",
                    help="write the test split's whole-device bands with the replay's own peak reserved, one per engine, to "
                         "workbench/catalog/error_band.json (device, ENGINE/replayed-allocator)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    split = json.loads(SPLIT.read_text())
    side = {s: "fit" for s in split["fit"]} | {s: "test" for s in split["test"]}
    recs, every = [], []
    for line in Path(args.corpus).read_text().splitlines():
        rec = json.loads(line)
        every.append(rec)
        if in_scope(rec) and args.only in rec["run_id"] and rec["shape_id"] in side:
            recs.append(rec)
    lone = lone_context_bytes(every)
    mcore = [r for r in recs if r["stack"] in MCORE_STACKS]
    runs = corpus_runs(mcore)  # their specs, built once: traced from, then estimated
    done = dict(zip((r["run_id"] for r in mcore), zip(runs, mcore_replays(mcore, runs))))
    rows = []
    for rec in recs:
        run, replayed = done.get(rec["run_id"], (None, None))
        row = simulate(rec, side[rec["shape_id"]], replayed, run, lone)
        rows.append(row)
        if args.runs:
            dev = ("" if row.device_error is None else
                   f"  device {row.device_error_simulated:+6.1%} (constant {row.device_error:+6.1%}, own peak "
                   f"{row.device_error_replay_peak:+6.1%}, run's own {row.device_error_own:+6.1%})")
            print(f"{row.split:4s} {row.run_id:52s} reserve measured {row.measured_reserve:6.1%} simulated "
                  f"{row.simulated_reserve:6.1%} (reserved {row.simulated_error:+6.1%}, constant "
                  f"{row.constant_error:+6.1%}){dev}  traced allocated {row.simulated_allocated_error:+5.1%}",
                  flush=True)
    print("error = predicted / measured - 1; peak reserved from the measured allocated peak and the reserve; whole "
          "device: the estimator's, with its reserve term as is (constant) or the simulated fraction")
    hf_ids = tuple(f"{s}/" for s in HF_STACKS)  # (run ids start with their stack)
    for stack, label in (("", "all"), (hf_ids, "transformers"), ("mcore-ds/", "megatron-core"),
                         ("mcore-ddp/", "mcore DDP")):
        for name in ("fit", "test"):
            part = [r for r in rows if r.split == name and r.run_id.startswith(stack)]
            if part:
                lines = summary(part)
                print(f"{label:13s} {name:4s} {lines[0]}\n" + "".join(f"{'':18s} {line}\n" for line in lines[1:]), end="")
    if args.write_band:
        if args.only:
            raise SystemExit("--write-band scores every in-scope test run: leave --only out")
        for engine in ("deepspeed", "megatron"):
            test = [r for r in rows if r.split == "test" and engine_of_stack(r.run_id.split("/")[0]) == engine]
            if not test:
                continue
            for key, entry in write_band(test, engine).items():
                print(f"wrote the whole-device band {key}: {entry['n']} test runs, "
                      f"-{entry['low_fraction']:.1%} / +{entry['high_fraction']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
