"""Add to every corpus record the workbench description of the run: ``{"model", "cluster", "plan"}`` as
:func:`workbench.runs.specio.specs_to_dict` writes them, so ``specs_from_dict`` (or ``workbench estimate``) can be
run on it. Pure CPU; run after the GPU calls:

    python benchmarks/corpus/describe.py RAW.jsonl... > benchmarks/corpus/h200_runs.jsonl

Mapping: megatron-core dims are ModelSpec fields (attention ``unfused``: the local layer spec); a Hugging Face
config goes through :func:`workbench.hf.import_hf` with the run's ``attn_implementation`` and sequence length;
``gradient_checkpointing_enable`` is ``recompute="full"`` (every decoder layer's input kept, the layer recomputed);
DeepSpeed runs use DeepSpeed's FusedAdam / CPUAdam (``fused_kernels=True``), megatron-core's own optimizer without
Apex/Transformer Engine and the launcher runs use torch's Adam (``fused_kernels=False``). A LoRA run's plan has no
field for the adapter: its record's ``lora`` and ``trainable_parameters`` say what differs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def description(r: dict) -> dict:
    from workbench.catalog import model as catalog_model
    from workbench.hf import import_hf
    from workbench.runs.specio import specs_to_dict
    from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    if r["stack"] == "launcher":
        f = dict(r["plan_fields"])
        return specs_to_dict(catalog_model(r["catalog_model"]), cluster,
                             ParallelPlan(world_size=1, precision="bf16", fused_kernels=False, **f))
    o = r["options"]
    mbs, gas = o.get("mbs", 1), o.get("gas", 1)
    if r["stack"] == "hf-ds":
        model = import_hf(dict(r["hf_config"]), seq_length=r["seq_length"], attn_implementation=o["attn"],
                          name=r["shape_id"]).spec
    else:
        model = ModelSpec(name=r["shape_id"], attention="unfused", **r["model_dims"])
    common = dict(world_size=1, micro_batch_size=mbs, global_batch_size=mbs * gas, precision="bf16")
    if r["stack"] == "mcore-ddp":
        plan = ParallelPlan(engine="megatron", distributed_optimizer=o["distributed_optimizer"],
                            recompute=o.get("recompute", "none"), fused_kernels=False, **common)
    else:
        rc = "full" if o.get("ckpt") else o.get("recompute", "none")
        plan = ParallelPlan(engine="deepspeed", zero_stage=o["zero"], offload_optimizer=o.get("offload") or "none",
                            recompute=rc, fused_kernels=True, **common)
    return specs_to_dict(model, cluster, plan)


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
