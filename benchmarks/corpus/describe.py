"""Add to every corpus record the workbench description of the run: ``{"model", "cluster", "plan"}`` as
:func:`workbench.runs.specio.specs_to_dict` writes them, so ``specs_from_dict`` (or ``workbench estimate``) can be
run on it. Pure CPU; run after the GPU calls:

    python benchmarks/corpus/describe.py RAW.jsonl... > benchmarks/corpus/h200_runs.jsonl

Mapping (:func:`scored_specs`: the specs ``benchmarks/bench_accuracy.py`` scores the record with, read in one place;
a workbench launcher run keeps the plan fields its launcher recorded): megatron-core dims are ModelSpec fields
(attention ``unfused``: the local layer spec); a Hugging Face config goes through :func:`workbench.hf.import_hf`
with the run's ``attn_implementation`` and sequence length; ``gradient_checkpointing_enable`` (or the Trainer's
checkpointing argument) is ``recompute="full"`` (every decoder layer's input kept, the layer recomputed; with
``every_n_layers`` k, ⌈L/k⌉ ``recompute_layers``); an ``hf-trainer`` run (``transformers.Trainer``) is described as
an ``hf-ds`` one plus the ZeRO settings the Trainer resolved (:func:`zero_plan_fields`: overlap, bucket sizes,
ZeRO-3 persistence threshold and ``zero.Init``); torchrun runs (``world_size`` > 1) carry their tensor, pipeline and
expert parallel degrees (data parallel is what is left of the world size);
DeepSpeed runs use DeepSpeed's FusedAdam / CPUAdam (``adam="fused"``), megatron-core's own optimizer without
Apex/Transformer Engine and the launcher runs use torch's Adam (``adam="torch"``). A LoRA run's plan carries
``lora_rank``, ``lora_targets`` and ``lora_dropout`` from the peft ``LoraConfig`` it trained with. A run with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` has ``expandable_segments`` on its plan.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HF_STACKS = ("hf-ds", "hf-trainer")
"""The corpus stacks of a transformers model under DeepSpeed: measure.py's own loop over ``deepspeed.initialize``
(``hf-ds``) and ``transformers.Trainer`` with an ``"auto"`` ds_config (``hf-trainer``)."""


def record_gpu(r: dict) -> str:
    """The catalog GPU a record ran on, from its provenance's CUDA device name (``NVIDIA H100 80GB HBM3`` ->
    ``H100-SXM``); ``H200`` for the records measured before the name was kept, all of which ran on an H200."""
    from workbench.calibrate.runner import catalog_gpu_for

    name = (r.get("provenance") or {}).get("gpu")
    return (catalog_gpu_for(name) if name else "") or "H200"


def record_host(r: dict) -> dict:
    """The host a record's run had, as :class:`workbench.specs.ClusterSpec` fields: its cores (112 for the records
    from before provenance kept them) and the threads its CPU Adam ran on (``OMP_NUM_THREADS`` as recorded; 0 when
    unset, the cluster's default then) and, for a run that offloaded to NVMe, the disk's read and write rates
    measured beside it (``nvme_gb_per_s``, benchmarks/nvme_bandwidth.py)."""
    o = r.get("options") or {}
    out = dict(host_cpu_cores_per_node=int((r.get("provenance") or {}).get("host_cpu_cores") or 112),
               cpu_adam_threads=int(r.get("omp_num_threads") or o.get("omp_threads") or 0))
    rates = r.get("nvme_gb_per_s") or {}
    if rates.get("read") and rates.get("write"):
        out.update(nvme_read_gb_per_s=float(rates["read"]), nvme_write_gb_per_s=float(rates["write"]))
    return out


def checkpointed_layers(options: dict, num_layers: int) -> dict:
    """``{"recompute_layers": n}`` for a transformers run that checkpointed every k-th decoder layer (``ckpt_every``
    k > 1: transformers' ``every_n_layers``, layers 0, k, 2k, ..., n = ⌈L/k⌉ of them); ``{}`` for every layer or
    none."""
    every = int(options.get("ckpt_every") or 1) if options.get("ckpt") else 1
    return {"recompute_layers": -(-num_layers // every)} if every > 1 else {}


def zero_plan_fields(r: dict) -> dict:
    """The :class:`workbench.specs.ParallelPlan` fields of an ``hf-trainer`` record's ZeRO settings as its run
    resolved them (``zero_config_resolved``, else the engine's ``ds_config["zero_optimization"]``): ``overlap_comm``
    (ZeRO-1 to 3; DeepSpeed all-reduces after the backward at ZeRO-0), ``reduce_bucket_size`` (ZeRO-1 to 3),
    ``prefetch_bucket_size`` and ``param_persistence_threshold`` (ZeRO-3; the Trainer's ``"auto"``: hidden²,
    0.9·hidden², 10·hidden), ``sub_group_size`` (ZeRO-3), and at ZeRO-3 ``zero_init``: whether the model was built
    inside ``deepspeed.zero.Init`` (``built_in_zero_init``). A field the installed ParallelPlan lacks is left out."""
    from workbench.configs.deepspeed import PLAN_ZERO_SIZES
    from workbench.specs import ZERO_SIZE_STAGES, ParallelPlan

    zero = r.get("zero_config_resolved") or {}
    if not zero or "unavailable" in zero:
        zero = (r.get("ds_config") or {}).get("zero_optimization") or {}
    stage = int(zero.get("stage", (r.get("options") or {}).get("zero", 0)))
    have = ParallelPlan.__dataclass_fields__
    out = {"overlap_comm": bool(zero.get("overlap_comm")) if stage >= 1 else False}
    if stage == 3:
        out["zero_init"] = bool(r.get("built_in_zero_init"))
    for path, name in PLAN_ZERO_SIZES.items():  # each size where the stage reads it, under its ds_config key
        value = zero.get(path.split(".", 1)[1])
        if stage >= ZERO_SIZE_STAGES[name] and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = int(value)
    return {k: v for k, v in out.items() if k in have}


def description(r: dict) -> dict:
    from workbench.runs.specio import specs_to_dict

    if r["stack"] != "launcher":
        return specs_to_dict(*scored_specs(r))
    from workbench.catalog import model as catalog_model
    from workbench.configs.launch import expandable_in_conf
    from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

    n = r.get("gpus") or r.get("world_size") or 1
    cluster = ClusterSpec(gpu=record_gpu(r), gpus_per_node=n, **record_host(r))
    # the allocator the run had: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (group expseg)
    expandable = bool((r.get("options") or {}).get("expandable_segments")
                      or expandable_in_conf(r.get("pytorch_cuda_alloc_conf")))
    f = dict(r["plan_fields"])  # the workbench launcher's run: its plan fields as the launcher recorded them
    f.setdefault("expandable_segments", expandable)
    model = (catalog_model(r["catalog_model"]) if r.get("catalog_model")
             else ModelSpec(name=r["shape_id"], attention="unfused", **r["model_dims"]))
    return specs_to_dict(model, cluster, ParallelPlan(world_size=n, precision="bf16", adam="torch", **f))


def scored_specs(r: dict) -> tuple:
    """``(model, cluster, plan)`` of a corpus record as ``benchmarks/bench_accuracy.py`` scores it
    (:func:`bench_accuracy.corpus_run`, the one reading of a record: the overlap, ``zero.Init``, page-locked buffers,
    LoRA targets and ZeRO sizes the run resolved), whatever its outcome (a failed or out-of-memory record is described
    as if it had run; ``bench_fits.py`` judges those). A record of group ``pressure``, whose allocator was capped, is
    described without the cap (the cap is no plan field)."""
    bench = str(Path(__file__).resolve().parents[1])
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from bench_accuracy import corpus_run

    options = {k: v for k, v in (r.get("options") or {}).items() if k not in ("cap_bytes", "cap_over_allocated")}
    # the plan needs no measurement: stand-ins where a record (or a record being built) has none
    run = corpus_run(dict(r, options=options, status="ok", peak_allocated_bytes=r.get("peak_allocated_bytes") or 1))
    if run is None:
        raise ValueError(f"{r.get('run_id')}: stack={r.get('stack')!r} is not one describe.py knows")
    return run["model"], run["cluster"], run["plan"]


def main(paths) -> int:
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("status") == "ok":
                r["workbench"] = description(r)
            print(json.dumps(r, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
