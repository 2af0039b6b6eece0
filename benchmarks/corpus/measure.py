"""Measure the corpus runs (benchmarks/corpus/runs.py) on one CUDA GPU; a plain user-style training script.

This is deliberately not ``workbench/runs/train.py``: it trains the way people write their own scripts.

* ``hf-ds``: a Hugging Face ``transformers`` model built from a config dict (``AutoModelForCausalLM.from_config``,
  ``attn_implementation`` eager or sdpa, optional ``gradient_checkpointing_enable`` and a peft LoRA adapter) under
  ``deepspeed.initialize`` (on the GPU, or with ``zero_init`` at ZeRO-3 inside ``deepspeed.zero.Init`` as the HF
  Trainer builds it) with a hand-written ds_config (bf16, ``AdamW`` -> DeepSpeed's FusedAdam, or
  DeepSpeedCPUAdam with ``offload_optimizer``), loss from the model's own ``labels`` path;
* ``hf-trainer``: the same model trained the way most fine-tuning users do it, through ``transformers.Trainer`` with
  ``TrainingArguments(deepspeed=<ds_config>)`` and a ds_config after the Hugging Face docs' examples, its batch sizes,
  clipping, precision, AdamW hyper-parameters and bucket sizes ``"auto"`` (the Trainer resolves them; the record
  keeps both); the arguments made before the model, so at ZeRO-3 it is built inside ``deepspeed.zero.Init``;
  gradient checkpointing by the Trainer; a callback times each optimizer step;
* ``mcore-ds``: megatron-core ``GPTModel`` (local layer spec) under DeepSpeed the same way;
* ``mcore-ddp``: the same GPTModel under megatron-core's ``DistributedDataParallel`` + ``get_megatron_optimizer``
  (plain or distributed optimizer) and its forward/backward schedule.

Usage on the GPU machine (world size 1)::

    python benchmarks/corpus/measure.py --out OUT.jsonl [--groups hf-llama,mcore-ds-a] [--budget-seconds 500]
    python benchmarks/corpus/measure.py --launcher --out OUT.jsonl     # the runs through workbench.runs.launch

Each group runs in one process (several configurations per process: peak statistics are reset and the cache
emptied between runs, and every record carries the memory still allocated when it started and how many runs came
before it in its process). A crashed process is restarted with the rest of its group; an out-of-memory run is
recorded as ``status: "oom"``. Every record is appended to OUT as one JSON line as soon as it finishes.
On a CPU-only machine ``--dry-run`` runs the same code path on tiny shapes with gloo (no timing, no CUDA memory).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from gpu_provenance import gpu_provenance  # noqa: E402

from runs import (GROUPS, HF_SHAPES, LAUNCHER_RUNS, LAUNCHER_RUNS_2GPU, LAUNCHER_SHAPE_2GPU, MCORE_SHAPES,  # noqa: E402
                  all_runs, hf_config_with_layers)  # noqa: E402

from step_stats import step_protocol, steady_seconds, timed_summary  # noqa: E402

from describe import HF_STACKS  # noqa: E402

from host_probe import copy_probe, cpu_model, host_probe  # noqa: E402

PROCESS_STARTED = time.time()
"""When this process started (its imports of torch, DeepSpeed, megatron-core and transformers follow)."""

RUN_TIMEOUT_SECONDS = int(os.environ.get("CORPUS_RUN_TIMEOUT", 150))  # a per-process run that takes longer is killed
# (and recorded as crashed)
ENV_KEYS = ("OMP_NUM_THREADS", "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_MAX_CONNECTIONS",
            "NCCL_NVLS_ENABLE", "TORCH_EXTENSIONS_DIR", "CUDA_VISIBLE_DEVICES")


def versions() -> dict:
    """Versions of the training libraries beside Python, torch and CUDA (those come from ``gpu_provenance``)."""
    out = {}
    for mod in ("deepspeed", "megatron.core", "transformers", "peft", "accelerate", "pydantic"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            out[mod.replace(".", "_")] = getattr(m, "__version__", None)
        except Exception as exc:  # recorded, not fatal
            out[mod.replace(".", "_")] = f"unavailable: {type(exc).__name__}"
    return out


def provenance() -> dict:
    return gpu_provenance(platform=platform.platform(), cpu_model=cpu_model(), **versions(),
                          env={k: os.environ.get(k) for k in ENV_KEYS})


# ----------------------------------------------------------------------------------------------------------------
def offload_section(cfg: dict, key: str) -> dict | None:
    """The ``zero_optimization`` offload sub-dict a run asks for, as HF's ZeRO-2 / ZeRO-3 offload examples write
    it: ``key`` ``"offload"`` -> ``offload_optimizer``, ``"offload_params"`` -> ``offload_param`` (ZeRO-3 parameter
    offload); ``None`` when the run offloads nothing there. ``pin``: page-locked offload buffers (DeepSpeed 0.19's
    default); False: pageable."""
    if not cfg.get(key):
        return None
    section = {"device": cfg[key], "pin_memory": bool(cfg.get("pin", True))}
    if cfg[key] == "nvme":  # ZeRO-Infinity: the states swapped to files under nvme_path (DeepSpeed's aio defaults)
        section["nvme_path"] = os.environ.get("CORPUS_NVME_PATH", "/tmp/corpus_nvme")
        if key == "offload_params" and cfg.get("pbuf"):  # parameter swap buffers other than DeepSpeed's 1e8
            section["buffer_size"] = int(cfg["pbuf"])
    return section


def ds_config(cfg: dict) -> dict:
    """The hand-written ds_config of one run (what a user puts in ds_config.json)."""
    zero = {"stage": cfg["zero"]}
    if offload_section(cfg, "offload"):
        zero["offload_optimizer"] = offload_section(cfg, "offload")
    if cfg.get("overlap"):  # overlap_comm on at ZeRO-1/2 (DeepSpeed's default there is off), as HF's ZeRO-2 examples
        zero["overlap_comm"] = True
    if offload_section(cfg, "offload_params"):
        zero["offload_param"] = offload_section(cfg, "offload_params")
    if cfg.get("rbs"):  # a reduce bucket other than DeepSpeed's 500 M elements
        zero["reduce_bucket_size"] = int(cfg["rbs"])
    if cfg.get("sgs") is not None:  # ZeRO-3 optimizer sub-groups other than DeepSpeed's 1e9 elements
        zero["sub_group_size"] = int(cfg["sgs"])
    return {
        "train_micro_batch_size_per_gpu": cfg.get("mbs", 1),
        "gradient_accumulation_steps": cfg.get("gas", 1),
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.01}},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def ds_config_trainer(cfg: dict) -> dict:
    """The ds_config a ``transformers.Trainer`` user writes for the run, after the Hugging Face DeepSpeed docs'
    ZeRO-2 / ZeRO-3 examples: ``"auto"`` wherever the Trainer fills a value in (batch sizes, clipping, bf16, AdamW's
    hyper-parameters from ``TrainingArguments``; the reduce bucket hidden², ZeRO-3's prefetch bucket 0.9·hidden² and
    persistence threshold 10·hidden from the model's config), ``overlap_comm`` and ``contiguous_gradients`` on, the
    run's offload as :func:`ds_config` writes it. No ``scheduler``: the Trainer's own (``lr_scheduler_type``)."""
    zero = {"stage": cfg["zero"], "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": "auto"}
    if int(cfg["zero"]) == 3:
        zero.update({"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                     "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9})
    for key, section in (("offload", "offload_optimizer"), ("offload_params", "offload_param")):
        if offload_section(cfg, key):
            zero[section] = offload_section(cfg, key)
    return {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                  "weight_decay": "auto"}},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def plain_json(value):
    """``value`` as strict JSON data: tuples as lists, other objects as their ``str``, non-finite floats (a DeepSpeed
    engine's config may hold some) as strings."""
    return json.loads(json.dumps(value, default=str), parse_constant=str)


def tiny(cfg_shape: dict, hf: bool) -> dict:
    """The CPU dry-run version of a shape: same structure, tiny sizes."""
    if hf:
        c = dict(cfg_shape["config"])
        for k in ("hidden_size", "n_embd"):
            if k in c:
                c[k] = 64
        for k in ("intermediate_size",):
            if k in c:
                c[k] = 128
        c = hf_config_with_layers(c, 2)
        heads_key = "num_attention_heads" if "num_attention_heads" in c else "n_head"
        c[heads_key] = 4
        if "num_key_value_heads" in c:
            c["num_key_value_heads"] = 2
        c["vocab_size"] = 512
        if "head_dim" in c:
            c["head_dim"] = 32
        return dict(cfg_shape, config=c, seq_length=32)
    d = dict(cfg_shape, num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=512,
             seq_length=32)
    if d.get("num_query_groups"):
        d["num_query_groups"] = 2
    if d.get("head_dim"):
        d["head_dim"] = 32
    return d


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def mem_now() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    reserved = torch.cuda.memory_reserved()
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "reserved_at_end_bytes": reserved, "allocated_at_end_bytes": torch.cuda.memory_allocated(),
            "device_used_at_end_bytes": total - free,
            "outside_allocator_bytes": total - free - reserved}


def host_now() -> dict:
    """The run's host memory (Linux ``/proc``): the process's resident set now and at its peak (``VmRSS``,
    ``VmHWM``: pinned buffers count, memory the kernel only reserved does not), and the node's total and available
    memory, for the host-memory estimate of offloaded plans."""
    out = {}
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        meminfo = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return out
    fields = {"VmRSS": "host_rss_at_end_bytes", "VmHWM": "host_peak_rss_bytes"}
    for line in status:
        key, _, value = line.partition(":")
        if key in fields:
            out[fields[key]] = int(value.split()[0]) * 1024
    for line in meminfo:
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[f"host_{key[3:].lower()}_at_end_bytes"] = int(value.split()[0]) * 1024
    return out


MEMORY_HISTORY = os.environ.get("CORPUS_MEMORY_HISTORY")
"""A folder: with it set, every run records the caching allocator's event history
(``torch.cuda.memory._record_memory_history``, no stack traces) from its start to the end of its steps and writes
it there as ``<run id>.json.gz`` (``benchmarks/alloc_history.py`` reads it). The run's record is unchanged."""
MEMORY_HISTORY_FRAMES = int(os.environ.get("CORPUS_MEMORY_HISTORY_FRAMES") or 0)
"""With ``CORPUS_MEMORY_HISTORY``: keep the innermost this many Python frames of each allocation (``"frames"``: one
index list per event into ``"frame_table"``), to tell which code asked for a block; slows the steps."""


def start_memory_history(torch) -> bool:
    if not (MEMORY_HISTORY and torch.cuda.is_available()):
        return False
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc" if MEMORY_HISTORY_FRAMES else None,
                                             stacks="python", max_entries=8_000_000)
    return True


def _frames(event: dict, table: dict) -> list:
    """The innermost :data:`MEMORY_HISTORY_FRAMES` Python frames of a recorded event, as indices into ``table``
    (``"<last two path parts>:<line> <function>"`` -> index)."""
    out = []
    for f in (event.get("frames") or [])[:MEMORY_HISTORY_FRAMES]:
        key = f"{'/'.join(str(f.get('filename', '?')).split('/')[-2:])}:{f.get('line')} {f.get('name')}"
        out.append(table.setdefault(key, len(table)))
    return out


def write_memory_history(torch, rec: dict) -> None:
    """The recorded events of the current device as ``{"run_id", "events": [[action, addr, size, stream], ...],
    "segments": [[address, total_size, stream, segment_type], ...]}``, gzipped; recording stops."""
    import gzip

    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][torch.cuda.current_device()]
    doc = {"run_id": rec["run_id"], "peak_allocated_bytes": rec.get("peak_allocated_bytes"),
           "peak_reserved_bytes": rec.get("peak_reserved_bytes"),
           "events": [[e["action"], e["addr"], e["size"], e["stream"]] for e in trace],
           "segments": [[g["address"], g["total_size"], g["stream"], g.get("segment_type")] for g in snap["segments"]]}
    if MEMORY_HISTORY_FRAMES:
        table: dict = {}
        doc["frames"] = [_frames(e, table) for e in trace]
        doc["frame_table"] = sorted(table, key=table.get)
    folder = Path(MEMORY_HISTORY)
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / (rec["run_id"].replace("/", "_") + ".json.gz"), "wt") as fh:
        json.dump(doc, fh)


def build_mcore(dims: dict, cfg: dict):
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron.core import parallel_state

    rc = cfg.get("recompute", "none")
    tp, pp, ep = cfg.get("tp", 1), cfg.get("pp", 1), cfg.get("ep", 1)
    kw = dict(num_layers=dims["num_layers"], hidden_size=dims["hidden_size"],
              num_attention_heads=dims["num_attention_heads"], num_query_groups=dims.get("num_query_groups"),
              ffn_hidden_size=dims["ffn_hidden_size"], add_bias_linear=dims["add_bias_linear"],
              gated_linear_unit=dims["activation"] == "swiglu",
              activation_func=F.silu if dims["activation"] == "swiglu" else F.gelu,
              normalization="RMSNorm" if dims["normalization"] == "rmsnorm" else "LayerNorm",
              hidden_dropout=dims["hidden_dropout"], attention_dropout=dims["attention_dropout"],
              bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
              use_cpu_initialization=not torch.cuda.is_available(),
              masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
              gradient_accumulation_fusion=False, apply_rope_fusion=False)
    if dims.get("head_dim"):  # Megatron --kv-channels: a head width other than hidden / heads (Gemma: 256)
        kw["kv_channels"] = dims["head_dim"]
    if dims.get("qkv_bias") is not None and dims["qkv_bias"] != dims["add_bias_linear"]:  # Qwen2: QKV biases only
        kw["add_qkv_bias"] = bool(dims["qkv_bias"])
    if tp > 1 or pp > 1 or ep > 1:
        kw.update(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, expert_model_parallel_size=ep)
    if dims.get("num_experts"):  # dropless MoE: SequentialMLP experts (no grouped GEMM without TE), alltoall dispatch
        kw.update(num_moe_experts=dims["num_experts"], moe_router_topk=dims.get("moe_top_k", 2),
                  # the CPU dry run takes allgather: the alltoall dispatcher makes a CUDA stream when it is built
                  moe_token_dispatcher_type="alltoall" if torch.cuda.is_available() else "allgather",
                  moe_grouped_gemm=False,
                  moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2)
        from megatron.core.transformer.moe import moe_utils

        if not hasattr(moe_utils, "te_general_gemm"):  # megatron-core 0.16 leaves it undefined without TE
            moe_utils.te_general_gemm = None            # (0.19 sets it to None): the torch router GEMM
        if dims.get("moe_ffn_hidden_size"):
            kw["moe_ffn_hidden_size"] = dims["moe_ffn_hidden_size"]
    if rc == "full":
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif rc == "selective":
        kw.update(recompute_granularity="selective")
    tc = TransformerConfig(**kw)
    pad = 128 * tp  # Megatron pads the vocabulary to a multiple of 128 x tensor parallel
    vocab = -(-dims["vocab_size"] // pad) * pad
    spec = get_gpt_layer_local_spec(num_experts=dims.get("num_experts"), moe_grouped_gemm=False,
                                    normalization="RMSNorm" if dims["normalization"] == "rmsnorm" else "LayerNorm")
    model = GPTModel(config=tc, transformer_layer_spec=spec, vocab_size=vocab, max_sequence_length=dims["seq_length"],
                     position_embedding_type="rope" if dims["position_embedding"] == "rotary" else "learned_absolute",
                     share_embeddings_and_output_weights=dims["tied_embeddings"],
                     pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    recorded = {k: v for k, v in kw.items() if k not in ("activation_func", "params_dtype", "pipeline_dtype")}
    recorded.update(activation_func="silu" if dims["activation"] == "swiglu" else "gelu", params_dtype="bfloat16",
                    padded_vocab_size=vocab)
    return model, recorded


_ZERO_INIT: list = []  # the live HfDeepSpeedConfig of a zero_init run (transformers holds only a weak reference)


def drop_zero_init() -> None:
    """End a zero_init run's HfDeepSpeedConfig, so that the next run in the process builds its model plainly."""
    _ZERO_INIT.clear()
    gc.collect()


def build_hf(shape: dict, cfg: dict, trainer: bool = False):
    """The run's transformers model (bf16, on the device, or inside ``deepspeed.zero.Init``), its resolved config
    dict and its peft LoRA keywords. ``trainer``: built for ``transformers.Trainer`` after the run's
    ``TrainingArguments``: at ZeRO-3 their HfDeepSpeedConfig (none of this function's own) builds it inside
    ``deepspeed.zero.Init``, and the Trainer, not this function, turns gradient checkpointing on."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    c = dict(shape["config"])
    model_type = c.pop("model_type")
    c.pop("architectures", None)
    hf_cfg = AutoConfig.for_model(model_type, **c)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    zero3 = int(cfg.get("zero", 0)) == 3
    if cfg.get("zero_init") and not zero3:
        raise ValueError(f"{cfg.get('run_id')}: zero_init needs ZeRO-3, not zero={cfg.get('zero')}")
    if cfg.get("zero_init") or (trainer and zero3):
        # the Trainer's ZeRO-3 path: while an HfDeepSpeedConfig of the run's ds_config is alive, from_config builds
        # the model inside deepspeed.zero.Init (each module's parameters partitioned as it is made, never the whole
        # model on the GPU); kept alive through deepspeed.initialize, dropped by drop_zero_init() (an hf-trainer
        # run's lives in its TrainingArguments, dropped by drop_trainer())
        from transformers.integrations import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

        if not trainer:
            _ZERO_INIT.append(HfDeepSpeedConfig(ds_config(cfg)))
        elif not is_deepspeed_zero3_enabled():
            raise RuntimeError(f"{cfg.get('run_id')}: no live ZeRO-3 TrainingArguments to build the model in")
        model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=cfg["attn"], dtype=torch.bfloat16)
    else:
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=cfg["attn"],
                                                     dtype=torch.bfloat16)
    model.config.use_cache = False
    if cfg.get("ckpt") and not trainer:  # every decoder layer, or every k-th (transformers >= 5.24)
        from workbench.hf import enable_layer_checkpointing

        enable_layer_checkpointing(model, cfg.get("ckpt_every", 1))
    lora = None
    if cfg.get("lora"):
        from peft import LoraConfig, get_peft_model

        # the attention projections under each family's own names (GPT-2's c_proj also matches its MLP's c_proj)
        targets = {"gpt2": ["c_attn", "c_proj"], "gpt_neox": ["query_key_value", "dense"],
                   "phi3": ["qkv_proj", "o_proj"]}.get(model_type, ["q_proj", "k_proj", "v_proj", "o_proj"])
        lora = dict(r=cfg["lora"], lora_alpha=2 * cfg["lora"], lora_dropout=0.05, target_modules=targets,
                    task_type="CAUSAL_LM")
        if cfg.get("ckpt"):
            model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(**lora))
    resolved = hf_cfg.to_dict()
    # transformers' MoE experts kernel as resolved at build time (grouped_mm or eager; None for dense models)
    resolved["experts_implementation_used"] = getattr(model.config, "_experts_implementation", None)
    return model, resolved, lora


def zero_resolved(engine) -> dict:
    """The engine's ZeRO settings as DeepSpeed resolved them. The ZeRO-3 sizes under their ds_config names
    (``stage3_prefetch_bucket_size``, ...: pydantic's aliases of DeepSpeed's field names), at ZeRO-3 only."""
    try:
        z = engine._config.zero_config
        if hasattr(z, "model_dump"):
            d = z.model_dump(mode="json")
            d.update({k: v for k, v in z.model_dump(mode="json", by_alias=True).items()
                      if k.startswith("stage3_") and d.get("stage") == 3})
        else:
            d = dict(z)
        keep = ("stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size",
                "reduce_scatter", "allgather_partitions", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                "round_robin_gradients", "offload_optimizer", "offload_param")
        return {k: d.get(k) for k in keep if k in d}
    except Exception as exc:
        return {"unavailable": repr(exc)}


def record_engine(rec: dict, engine) -> None:
    """What a DeepSpeed engine resolved: its optimizer classes and ZeRO settings."""
    rec["optimizer_class"] = type(engine.basic_optimizer).__name__ if engine.basic_optimizer else None
    rec["zero_optimizer_class"] = type(engine.optimizer).__name__
    rec["zero_config_resolved"] = zero_resolved(engine)


def record_hf_model(rec: dict, shape: dict, cfg: dict, model, hf_dict: dict, lora) -> None:
    """A transformers run's model as built (before DeepSpeed takes it)."""
    import torch

    cuda = torch.cuda.is_available()
    rec.update(hf_config=shape["config"], hf_config_resolved=hf_dict, seq_length=shape["seq_length"], lora=lora,
               attn_implementation=cfg["attn"], gradient_checkpointing=bool(cfg.get("ckpt")),
               checkpoint_every_n_layers=cfg.get("ckpt_every", 1) if cfg.get("ckpt") else None,
               checkpointed_layers=checkpointed_layer_count(model),
               # built inside deepspeed.zero.Init: every parameter transformers made already a ZeRO-3 parameter
               # (peft's LoRA adapters, added after the model was built, are plain until DeepSpeed takes them)
               built_in_zero_init=all(hasattr(p, "ds_id") for n, p in model.named_parameters()
                                      if not (lora and "lora_" in n)),
               allocated_after_build_bytes=torch.cuda.memory_allocated() if cuda else None)


def checkpointed_layer_count(model):
    """How many of the model's decoder layers transformers set to recompute (``GradientCheckpointingLayer`` with
    ``gradient_checkpointing`` on), or None where transformers has no such class."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:
        return None
    return sum(1 for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing)


def record_parameters(rec: dict, shape: dict, model) -> None:
    rec["like"] = shape.get("like")
    numel = lambda p: getattr(p, "ds_numel", None) or p.numel()  # noqa: E731  (zero.Init's partitioned ones)
    rec["parameters"] = sum(numel(p) for p in model.parameters())
    rec["trainable_parameters"] = sum(numel(p) for p in model.parameters() if p.requires_grad)


def record_init(rec: dict, t_start: float, dry: bool) -> None:
    """The run's memory and seconds when its engine is ready, before the first step, and the host probe then."""
    import torch

    rec["allocated_after_init_bytes"] = mem_now().get("allocated_at_end_bytes")
    rec["init_seconds"] = time.perf_counter() - t_start
    if not dry:
        rec["host_probe_before"] = host_probe(torch)


class StepClock:
    """Per-step wall times of a run: :meth:`begin` and :meth:`end` around each optimizer step (CUDA synchronised;
    with several ranks every rank's clock starts after a barrier), the epoch when the timed steps start and end, and
    each step as it ends in ``CORPUS_PROGRESS_DIR`` (what a run killed midway had done); ``ended``: the epoch when
    the last step ended."""

    def __init__(self, rec: dict, cfg: dict, steps: int, timed: int, t_start: float):
        self.rec, self.cfg, self.steps, self.timed, self.t_start = rec, cfg, steps, timed, t_start
        self.times: list = []
        self.t0 = self.ended = None

    def begin(self, i: int) -> None:
        import torch.distributed as dist

        if i == self.steps - self.timed:
            self.rec["timed_started_epoch"] = time.time()
        sync()
        if dist.get_world_size() > 1:  # start every rank's clock together
            dist.barrier()
            sync()
        self.t0 = time.perf_counter()

    def end(self, i: int) -> None:
        sync()
        self.times.append(time.perf_counter() - self.t0)
        if os.environ.get("CORPUS_PROGRESS_DIR"):
            with open(Path(os.environ["CORPUS_PROGRESS_DIR"]) / (self.cfg["run_id"].replace("/", "_") + ".txt"),
                      "a") as fh:
                fh.write(f"step {i} {self.times[-1]:.3f} s, {time.perf_counter() - self.t_start:.1f} s since start\n")
        self.ended = time.time()


def one_run(cfg: dict, dry: bool, index_in_process: int) -> dict:
    import torch

    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    world = dist.get_world_size()
    rec = {"run_id": cfg["run_id"], "shape_id": cfg["shape_id"], "group": cfg["group"], "stack": cfg["stack"],
           "script": "benchmarks/corpus/measure.py" + (" under torchrun" if world > 1 else ""),
           "world_size": world, "rank": dist.get_rank(), "runs_before_in_process": index_in_process,
           "options": {k: v for k, v in cfg.items() if k not in ("run_id", "shape_id", "group", "stack")}}
    if cfg.get("omp_threads"):
        torch.set_num_threads(cfg["omp_threads"])
        os.environ["OMP_NUM_THREADS"] = str(cfg["omp_threads"])
    rec["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    if "nvme" in (cfg.get("offload"), cfg.get("offload_params")) and os.environ.get("CORPUS_NVME_RATES"):
        # the disk's read and write GB/s measured before the batch (benchmarks/nvme_bandwidth.py), "read,write"
        read, write = (float(v) for v in os.environ["CORPUS_NVME_RATES"].split(","))
        rec["nvme_gb_per_s"] = {"read": read, "write": write}
    rec["torch_num_threads"] = torch.get_num_threads()
    rec["pytorch_cuda_alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if cfg.get("expandable_segments") and "expandable_segments:True" not in (rec["pytorch_cuda_alloc_conf"] or ""):
        raise RuntimeError(f"{cfg['run_id']}: expandable segments need PYTORCH_CUDA_ALLOC_CONF set before the process "
                           f"starts: run it with --per-process")
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rec["allocated_at_start_bytes"] = torch.cuda.memory_allocated()
        free, total = torch.cuda.mem_get_info()
        rec["device_used_at_start_bytes"] = total - free
        if cfg.get("cap_bytes"):  # the caching allocator may reserve at most this: under it, it frees cache and retries
            torch.cuda.set_per_process_memory_fraction(min(1.0, cfg["cap_bytes"] / total))
            rec["allocator_cap_bytes"] = cfg["cap_bytes"]
    recording = start_memory_history(torch)
    mbs, gas = cfg.get("mbs", 1), cfg.get("gas", 1)
    step = None  # the run's training step (it holds the engine, the model, the optimizer) until the run ends
    t_start = time.perf_counter()
    try:
        hf = cfg["stack"] in HF_STACKS
        shape = (HF_SHAPES if hf else MCORE_SHAPES)[cfg["shape_id"]]
        if dry:
            shape = tiny(shape, hf)
        seq = shape["seq_length"]
        # steps and timed steps per step_stats.step_protocol (ZeRO-3 warms up longer), recorded in the record
        # (a configuration may set its own ``protocol``: [steps, timed], e.g. the step-noise study's longer runs)
        steps, timed = cfg.get("protocol") or step_protocol(cfg.get("zero", 0) if cfg["stack"] != "mcore-ddp" else 0)
        if dry:
            steps, timed = 2, 1
        clock = StepClock(rec, cfg, steps, timed, t_start)
        if cfg["stack"] == "hf-trainer":
            losses = trainer_steps(cfg, shape, rec, clock, dry)
        else:
            losses = []
            step = own_loop_step(cfg, shape, rec, mbs, gas)
            record_init(rec, t_start, dry)
            for i in range(steps):
                clock.begin(i)
                loss = step()
                clock.end(i)
                losses.append(loss)
        times = clock.times
        rec["timed_ended_epoch"] = clock.ended
        if not dry:
            rec["host_probe_after"] = host_probe(torch)
        rec.update(mem_now())
        rec.update(host_now())
        if recording:
            write_memory_history(torch, rec)
        if not dry:  # after every peak is read: its buffers move none of them
            rec["copy_probe"] = copy_probe(torch)
        rec.update(status="ok", steps=len(times), warmup_steps=len(times) - timed, timed_steps=timed,
                   step_seconds=times, losses=losses, step_seconds_median=steady_seconds(times, timed),
                   **timed_summary(times, timed),
                   tokens_per_step=mbs * gas * seq, micro_batch_size=mbs, gradient_accumulation_steps=gas)
    except torch.OutOfMemoryError as exc:
        rec.update(mem_now())
        rec.update(host_now())
        rec.update(status="oom", error=str(exc).splitlines()[0][:400])
    except Exception as exc:
        rec.update(status="error", error=f"{type(exc).__name__}: {exc}"[:600],
                   traceback=traceback.format_exc()[-2000:])
    finally:
        step = None  # noqa: F841
        drop_trainer()
        drop_zero_init()
        if cuda:
            torch.cuda.empty_cache()
    rec["wall_seconds"] = time.perf_counter() - t_start
    return rec


def own_loop_step(cfg: dict, shape: dict, rec: dict, mbs: int, gas: int):
    """The model of an ``hf-ds``, ``mcore-ds`` or ``mcore-ddp`` run under its engine, and the function that trains
    one optimizer step of it (``gas`` micro-batches of random tokens) and returns the step's mean loss."""
    import torch

    cuda = torch.cuda.is_available()
    hf = cfg["stack"] == "hf-ds"
    seq = shape["seq_length"]
    dev = torch.device("cuda" if cuda else "cpu")
    if hf:
        model, hf_dict, lora = build_hf(shape, cfg)
        vocab = shape["config"]["vocab_size"]
        record_hf_model(rec, shape, cfg, model, hf_dict, lora)
    else:
        model, mc_cfg = build_mcore(shape, cfg)
        vocab = shape["vocab_size"]
        rec.update(model_dims={k: v for k, v in shape.items() if k != "like"}, mcore_config=mc_cfg,
                   seq_length=seq)
        if cuda:
            model = model.to(dev)
    record_parameters(rec, shape, model)
    gen = torch.Generator(device=dev).manual_seed(0)
    if cfg["stack"] == "mcore-ddp":
        step, extra = mcore_ddp(model, cfg, seq, vocab, mbs, gas, dev, gen)
        rec.update(extra)
        return step
    import deepspeed

    dsc = ds_config(cfg)
    rec["ds_config"] = dsc
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=dsc)
    record_engine(rec, engine)
    if not hf:
        mask = torch.triu(torch.ones(seq, seq, device=dev, dtype=torch.bool), diagonal=1)[None, None]
        pos = torch.arange(seq, device=dev)[None].expand(mbs, seq)

    def step():
        losses = []
        for _ in range(gas):
            tokens = torch.randint(0, vocab, (mbs, seq + 1), device=dev, generator=gen)
            if hf:
                x = tokens[:, :-1]
                loss = engine(input_ids=x, labels=x).loss
            else:
                loss = engine(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
            engine.backward(loss)
            engine.step()
            losses.append(float(loss))
        return sum(losses) / len(losses)
    return step


# ----------------------------------------------------------------------------------------------------------------
# hf-trainer: the same transformers model through transformers.Trainer
# ----------------------------------------------------------------------------------------------------------------
_TRAINER: list = []
"""The live objects of an hf-trainer run: its Trainer, its TrainingArguments (which hold the run's
HfTrainerDeepSpeedConfig: at ZeRO-3, the one transformers builds models inside ``deepspeed.zero.Init`` by) and its
output folder; :func:`drop_trainer` ends them."""


def drop_trainer() -> None:
    """End an hf-trainer run's Trainer, arguments and output folder, and accelerate's process-wide state of it (its
    DeepSpeed plugin), so that the next run in the process starts afresh. Nothing to do after any other run."""
    if not _TRAINER:
        return
    for obj in _TRAINER:
        if hasattr(obj, "cleanup"):  # the output folder (tempfile.TemporaryDirectory)
            obj.cleanup()
    _TRAINER.clear()
    from accelerate.state import AcceleratorState, GradientState
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    AcceleratorState._reset_state()
    GradientState._reset_state()
    gc.collect()


class RandomTokens:
    """``n`` samples of ``seq`` token ids drawn below ``vocab`` by a fixed generator, as a map-style dataset for
    ``transformers.Trainer``: item ``i`` is ``{"input_ids": ids, "labels": ids}`` (the model shifts the labels)."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int = 0):
        import torch

        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer_arguments(cfg: dict, steps: int, output_dir: str) -> dict:
    """The ``TrainingArguments`` keywords of an hf-trainer run (beside ``deepspeed=``): the hyper-parameters
    :func:`ds_config` writes by hand (the Trainer fills :func:`ds_config_trainer`'s ``"auto"`` values from them), a
    constant learning rate, a log line every step, nothing saved or reported. Gradient checkpointing (``ckpt``) by
    the Trainer under the name the installed transformers has (``activation_checkpointing`` from 5.24, which keeps
    ``gradient_checkpointing`` as a deprecated alias; ``gradient_checkpointing`` before, as in 5.17)."""
    import dataclasses

    import torch
    from transformers import TrainingArguments

    kw = dict(output_dir=output_dir, per_device_train_batch_size=cfg.get("mbs", 1),
              gradient_accumulation_steps=cfg.get("gas", 1), max_steps=steps, learning_rate=1e-4, adam_beta1=0.9,
              adam_beta2=0.95, adam_epsilon=1e-8, weight_decay=0.01, max_grad_norm=1.0, bf16=True,
              lr_scheduler_type="constant", warmup_steps=0, logging_steps=1, save_strategy="no", report_to="none",
              disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0, seed=0)
    if not torch.cuda.is_available():
        kw["use_cpu"] = True
    if cfg.get("ckpt"):
        fields = {f.name for f in dataclasses.fields(TrainingArguments)}
        name = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
        kw.update({name: True, f"{name}_kwargs": {"use_reentrant": False}})
        if cfg.get("ckpt_every", 1) > 1:  # the Trainer pops it from the kwargs (transformers >= 5.24)
            kw[f"{name}_kwargs"]["every_n_layers"] = cfg["ckpt_every"]
    return kw


def trainer_steps(cfg: dict, shape: dict, rec: dict, clock: StepClock, dry: bool) -> list:
    """Train an hf-trainer run as most fine-tuning users do: ``TrainingArguments(deepspeed=<ds_config with
    "auto">)`` first (at ZeRO-3 transformers then builds the model inside ``deepspeed.zero.Init``), the model,
    ``Trainer(...).train()`` for ``clock.steps`` optimizer steps. A callback times each optimizer step on ``clock``
    (``on_step_begin`` to ``on_step_end``: every micro-batch's forward and backward, clipping, the optimizer) and
    keeps the Trainer's logged losses (returned) and gradient norms. The record gets the ds_config as written
    (``ds_config_written``) and as the engine took it, every ``"auto"`` resolved (``ds_config``)."""
    import copy
    import tempfile

    import torch.distributed as dist
    from transformers import Trainer, TrainerCallback, TrainingArguments

    mbs, gas, seq = cfg.get("mbs", 1), cfg.get("gas", 1), shape["seq_length"]
    written = ds_config_trainer(cfg)
    rec["ds_config_written"] = copy.deepcopy(written)
    out = tempfile.TemporaryDirectory(prefix="corpus_trainer_")
    _TRAINER.append(out)
    kw = trainer_arguments(cfg, clock.steps, out.name)
    rec["training_args"] = {k: v for k, v in kw.items() if k != "output_dir"}
    args = TrainingArguments(deepspeed=written, **kw)
    _TRAINER.append(args)
    model, hf_dict, lora = build_hf(shape, cfg, trainer=True)
    record_hf_model(rec, shape, cfg, model, hf_dict, lora)
    record_parameters(rec, shape, model)
    data = RandomTokens(clock.steps * mbs * gas * dist.get_world_size(), seq, shape["config"]["vocab_size"])
    losses, grad_norms = [], []
    rec["grad_norms"] = grad_norms

    class Steps(TrainerCallback):
        def on_train_begin(self, args_, state, control, **kw_):
            engine = trainer.model_wrapped  # the DeepSpeed engine the Trainer (through accelerate) initialised
            resolved = getattr(engine, "config", None)
            if not isinstance(resolved, dict):
                resolved = args_.hf_deepspeed_config.config
            rec["ds_config"] = plain_json(resolved)
            record_engine(rec, engine)
            rec["engine_class"] = type(engine).__name__
            # checkpointing as the Trainer turned it on (transformers 5.24 renamed the flag)
            net = trainer.model
            flag = "is_activation_checkpointing" if hasattr(net, "is_activation_checkpointing") else \
                "is_gradient_checkpointing"
            rec["trainer_checkpointing"] = getattr(net, flag, None)
            record_init(rec, clock.t_start, dry)

        def on_step_begin(self, args_, state, control, **kw_):
            clock.begin(state.global_step)

        def on_step_end(self, args_, state, control, **kw_):
            clock.end(state.global_step - 1)

        def on_log(self, args_, state, control, logs=None, **kw_):
            if logs and "loss" in logs:  # (the summary at the end logs train_loss)
                losses.append(float(logs["loss"]))
                grad_norms.append(float(logs["grad_norm"]) if logs.get("grad_norm") is not None else None)

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Steps()])
    _TRAINER.append(trainer)
    del model
    trainer.train()
    if len(clock.times) != clock.steps or len(losses) != clock.steps:
        raise RuntimeError(f"{cfg['run_id']}: the Trainer ran {len(clock.times)} timed steps and logged "
                           f"{len(losses)} losses, not {clock.steps}")
    return losses


def mcore_ddp(model, cfg, seq, vocab, mbs, gas, dev, gen):
    """megatron-core's DistributedDataParallel + get_megatron_optimizer + its no-pipelining schedule."""
    import torch
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.module import Float16Module

    config = model.config
    model = Float16Module(config, model)
    ddp_kw = dict(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                  use_distributed_optimizer=cfg["distributed_optimizer"])
    ddp = DistributedDataParallel(config=config, ddp_config=DistributedDataParallelConfig(**ddp_kw), module=model)
    opt_kw = dict(optimizer="adam", lr=1e-4, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8,
                  clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
                  use_distributed_optimizer=cfg["distributed_optimizer"])
    optimizer = get_megatron_optimizer(OptimizerConfig(**opt_kw), [ddp])
    config.finalize_model_grads_func = finalize_model_grads
    fb = get_forward_backward_func()
    mask = torch.triu(torch.ones(seq, seq, device=dev, dtype=torch.bool), diagonal=1)[None, None]
    pos = torch.arange(seq, device=dev)[None].expand(mbs, seq)

    def batches():
        for _ in range(gas):
            yield torch.randint(0, vocab, (mbs, seq + 1), device=dev, generator=gen)

    def forward_step(it, m):
        tokens = next(it)
        out = m(tokens[:, :-1], pos, mask, labels=tokens[:, 1:])

        def loss_func(output):
            loss = output.float().mean()
            return loss, {"lm loss": loss.detach().clone()}
        return out, loss_func

    def step():
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        red = fb(forward_step_func=forward_step, data_iterator=batches(), model=ddp, num_microbatches=gas,
                 seq_length=seq, micro_batch_size=mbs, decoder_seq_length=seq, forward_only=False)
        optimizer.step()
        if not red:  # a pipeline stage before the last computes no loss
            return None
        return float(torch.stack([r["lm loss"] for r in red]).float().mean())

    # expert parameters (MoE with expert parallel) get an optimizer of their own inside a ChainedOptimizer
    parts = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    inner = getattr(parts[0], "optimizer", None)
    extra = {"ddp_config": ddp_kw, "optimizer_config": opt_kw, "optimizer_class": type(optimizer).__name__,
             "chained_optimizer_classes": [type(o).__name__ for o in parts] if len(parts) > 1 else None,
             "inner_optimizer_class": type(inner).__name__ if inner is not None else None,
             "inner_optimizer_defaults": {k: (v if isinstance(v, (int, float, bool, str, type(None))) else repr(v))
                                          for k, v in getattr(inner, "defaults", {}).items()}}
    return step, extra


DRY_EXTRA_CPU_MODULES = (
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.transformer.moe.moe_utils", "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.token_dispatcher", "megatron.core.transformer.moe.experts",
    "megatron.core.transformer.moe.moe_layer",
)
"""Dry run only: megatron-core modules beyond the CPU adapter's that ask for ``torch.cuda.current_device()``
(rotary tables, MoE routing); their global ``torch`` gets the adapter's CPU view too."""


def worker(group: str, skip: set, out: Path, dry: bool, deadline: float, go_file=None) -> None:
    """Run one group (or one run id) in this process. Under torchrun (``WORLD_SIZE`` > 1) every rank runs the same
    single configuration and writes its own record to ``OUT.rank<r>``; the driver merges them."""
    import torch

    cfgs = [c for c in all_runs() if (c["group"] == group or c["run_id"] == group) and c["run_id"] not in skip]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    elif len(cfgs) != 1 or cfgs[0].get("world", 1) != world:
        raise SystemExit(f"worker: under torchrun (world {world}) give exactly one run id of that world size")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    import deepspeed
    from megatron.core import parallel_state, tensor_parallel

    imports_done = time.time()
    if go_file is not None:  # one run per process: imports are done; touch no GPU before it is ours
        while not go_file.exists():
            time.sleep(0.05)
    process_times = dict(process_started_epoch=PROCESS_STARTED, imports_done_epoch=imports_done, go_epoch=time.time(),
                         processes_started_ahead=int(os.environ.get("CORPUS_AHEAD", "-1")))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    elif dry:  # megatron-core's DDP and optimizers allocate on "cuda" unconditionally: the CPU dry run adapts them
        sys.path.insert(0, str(HERE.parents[1]))
        import importlib

        from workbench.runs import cpu_adapter

        cpu_adapter.apply()
        for name in DRY_EXTRA_CPU_MODULES:
            try:
                mod = importlib.import_module(name)
            except ImportError:
                continue
            if getattr(mod, "torch", None) is torch:
                mod.torch = cpu_adapter._CpuTorch(torch)
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    first = cfgs[0] if cfgs else {}
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=first.get("tp", 1),
                                             pipeline_model_parallel_size=first.get("pp", 1),
                                             expert_model_parallel_size=first.get("ep", 1))
    if torch.cuda.is_available() or dry:
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    prov = provenance()
    prov["world_size"] = world
    target = out if world == 1 else Path(f"{out}.rank{rank}")
    for i, cfg in enumerate(cfgs):
        if time.time() > deadline:
            print(f"[{group}] budget reached; {len(cfgs) - i} runs not started", flush=True)
            break
        if rank == 0:
            with open(out.with_suffix(".started"), "a") as fh:
                fh.write(cfg["run_id"] + "\n")
        rec = one_run(cfg, dry, i)
        rec.update(process_times if i == 0 else {})
        rec["provenance"] = dict(prov, omp_num_threads_at_run=rec.get("omp_num_threads"))
        with open(target, "a") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")
        gib = (rec.get("peak_allocated_bytes") or 0) / 2**30
        print(f"[{group}{'' if world == 1 else f' r{rank}'}] {rec['status']:5} {cfg['run_id']:60} alloc {gib:7.2f} "
              f"GiB step {rec.get('step_seconds_median') or 0:.3f} s  wall {rec['wall_seconds']:.1f} s "
              f"{rec.get('error', '')[:200]}", flush=True)


PER_RANK_KEYS = ("rank", "status", "error", "peak_allocated_bytes", "peak_reserved_bytes", "outside_allocator_bytes",
                 "reserved_at_end_bytes", "allocated_at_end_bytes", "device_used_at_end_bytes",
                 "device_used_at_start_bytes", "allocated_at_start_bytes", "allocated_after_init_bytes",
                 "step_seconds", "step_seconds_median", "timed_spread", "settled", "parameters",
                 "trainable_parameters", "losses", "init_seconds", "wall_seconds")


def merge_ranks(rid: str, out: Path, world: int, rc: int):
    """One record of a torchrun run from its ranks' records: ``per_rank`` keeps each rank's figures; the top level
    holds the largest allocated peak, the reserved peak and outside-allocator memory of the rank with the largest
    device total (reserved + outside; ``device_rank``), the slowest rank's median step, rank 0's configuration."""
    recs = {}
    for r in range(world):
        p = Path(f"{out}.rank{r}")
        for line in (p.read_text().splitlines() if p.exists() else []):
            d = json.loads(line)
            if d.get("run_id") == rid:
                recs[r] = d
    cfg = next(c for c in all_runs() if c["run_id"] == rid)
    if not recs:
        return {"run_id": rid, "shape_id": cfg["shape_id"], "group": cfg["group"], "stack": cfg["stack"],
                "world_size": world, "status": "crashed", "error": f"torchrun exit code {rc}; no rank reported"}
    base = dict(recs.get(0) or next(iter(recs.values())))
    base.pop("rank", None)
    base["per_rank"] = [{k: recs[r].get(k) for k in PER_RANK_KEYS if k in recs[r]} for r in sorted(recs)]
    bad = [d for d in recs.values() if d.get("status") != "ok"]
    if len(recs) < world or bad:
        base["status"] = bad[0]["status"] if bad else "crashed"
        base["error"] = (bad[0].get("error") if bad else None) or f"torchrun exit code {rc}; ranks reported: " \
                                                                  f"{sorted(recs)}"
        return base
    if all(d.get("peak_reserved_bytes") is not None for d in recs.values()):  # (a CPU dry run has none)
        dev = max(recs, key=lambda r: recs[r]["peak_reserved_bytes"] + recs[r]["outside_allocator_bytes"])
        base.update(peak_allocated_bytes=max(d["peak_allocated_bytes"] for d in recs.values()),
                    allocated_at_start_bytes=max(d.get("allocated_at_start_bytes") or 0 for d in recs.values()),
                    peak_reserved_bytes=recs[dev]["peak_reserved_bytes"],
                    outside_allocator_bytes=recs[dev]["outside_allocator_bytes"], device_rank=dev)
    base.update(step_seconds_median=max(d["step_seconds_median"] for d in recs.values()),
                timed_spread=max(d.get("timed_spread") or 0.0 for d in recs.values()),
                settled=all(d.get("settled", True) for d in recs.values()),
                losses=next((d["losses"] for d in recs.values() if d.get("losses") and d["losses"][0] is not None),
                            base.get("losses")),
                torchrun_exit_code=rc)
    return base


def done_ids(out: Path) -> set:
    if not out.exists():
        return set()
    return {json.loads(line)["run_id"] for line in out.read_text().splitlines() if line.strip()}


def driver(groups: list, out: Path, dry: bool, budget: float) -> None:
    deadline = time.time() + budget
    for group in groups:
        for attempt in range(4):
            if time.time() > deadline:
                break
            skip = done_ids(out)
            started = out.with_suffix(".started")
            todo = [c for c in all_runs() if c["group"] == group and c["run_id"] not in skip]
            if not todo:
                break
            cmd = [sys.executable, __file__, "--worker", group, "--out", str(out), "--deadline", str(deadline)]
            if dry:
                cmd.append("--dry-run")
            rc = subprocess.run(cmd).returncode
            if rc != 0:  # the process died inside a run: record that run as crashed, go on with the rest
                lines = started.read_text().split() if started.exists() else []
                last = lines[-1] if lines else None
                if last and last not in done_ids(out):
                    cfg = next(c for c in all_runs() if c["run_id"] == last)
                    with open(out, "a") as fh:
                        fh.write(json.dumps({"run_id": last, "shape_id": cfg["shape_id"], "group": group,
                                             "stack": cfg["stack"], "status": "crashed",
                                             "error": f"process exit code {rc}"}) + "\n")
                    print(f"[{group}] crashed in {last} (exit {rc})", flush=True)


def kill_group(proc) -> None:
    """End a process this script started and its children: SIGTERM first (torchrun then stops its ranks, which run
    in process groups of their own), then SIGKILL to the process group."""
    import signal

    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def driver_one_per_process(run_ids: list, out: Path, dry: bool, budget: float, ahead: int = 3) -> None:
    """Every run in a fresh process (clean allocator, context and DeepSpeed state). To hide the ~15 s of imports
    per process, ``ahead`` next processes are started early and wait, imports done and CUDA untouched, for a go
    file; only one process at a time touches the GPU. With ``ahead`` 0 the next process starts only after the
    run before it ended, so no import runs beside a measured run (slower; the step-noise study compares both). Every
    record says which (``processes_started_ahead``) and when its process started, finished its imports and got the
    GPU, so a run's timed steps can be set beside other processes' imports."""
    slots = max(ahead, 1)
    deadline = time.time() + budget
    gate = Path(os.environ.get("TMPDIR", "/tmp")) / f"corpus_gates_{os.getpid()}"
    gate.mkdir(parents=True, exist_ok=True)
    todo = [r for r in run_ids if r not in done_ids(out)]

    def spawn(rid, i):
        go = gate / f"go{i}"
        go.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--worker", rid, "--out", str(out), "--deadline", str(deadline),
               "--go-file", str(go)] + (["--dry-run"] if dry else [])
        cfg = next(c for c in all_runs() if c["run_id"] == rid)
        env = dict(os.environ, CORPUS_AHEAD=str(ahead))
        if cfg.get("omp_threads"):  # the OpenMP runtime (CPU Adam's threads) reads it when it loads
            env["OMP_NUM_THREADS"] = str(cfg["omp_threads"])  # torchrun keeps a value that is set
        if cfg.get("expandable_segments"):  # read by the CUDA caching allocator when it starts
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if cfg.get("world", 1) > 1:  # the user-style script under torchrun, one process per GPU
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={cfg['world']}"] + cmd[1:]
        return rid, go, subprocess.Popen(cmd, env=env, start_new_session=True)  # killable as a process group

    pending = [spawn(rid, i) for i, rid in enumerate(todo[:slots])]
    nxt = len(pending)
    try:
        while pending:
            rid, go, proc = pending.pop(0)
            if time.time() > deadline:
                kill_group(proc)
                continue
            # start the next process's imports now, unless this run's timing depends on the host CPUs (CPU Adam)
            early = "/off-" not in rid and ahead > 0
            if early and nxt < len(todo) and time.time() < deadline:
                pending.append(spawn(todo[nxt], nxt))
                nxt += 1
            go.touch()
            try:
                rc = proc.wait(timeout=RUN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:  # a rank stuck in a collective after the other failed
                kill_group(proc)
                rc = proc.wait()
            cfg = next(c for c in all_runs() if c["run_id"] == rid)
            if cfg.get("world", 1) > 1:
                rec = merge_ranks(rid, out, cfg["world"], rc)
                with open(out, "a") as fh:
                    fh.write(json.dumps(rec, default=str) + "\n")
                print(f"[{rid}] merged {len(rec.get('per_rank', []))} ranks: {rec['status']} "
                      f"alloc {(rec.get('peak_allocated_bytes') or 0) / 2**30:.2f} GiB "
                      f"step {rec.get('step_seconds_median') or 0:.3f} s {str(rec.get('error') or '')[:200]}", flush=True)
            if rc != 0 and rid not in done_ids(out):
                cfg = next(c for c in all_runs() if c["run_id"] == rid)
                with open(out, "a") as fh:
                    fh.write(json.dumps({"run_id": rid, "shape_id": cfg["shape_id"], "group": cfg["group"],
                                         "stack": cfg["stack"], "status": "crashed",
                                         "error": f"process exit code {rc}"}) + "\n")
                print(f"[{rid}] crashed (exit {rc})", flush=True)
            while nxt < len(todo) and time.time() < deadline and len(pending) < slots:
                pending.append(spawn(todo[nxt], nxt))
                nxt += 1
    finally:  # also when this driver fails: no waiting process is left behind
        for _, go, proc in pending:
            kill_group(proc)


def launcher_runs(out: Path, steps: int, work: Path, gpus: int = 1, only: str = "") -> None:
    """A few runs through workbench.runs.launch (torchrun, workbench/runs/train.py) for comparison."""
    sys.path.insert(0, str(HERE.parents[1]))
    from workbench.catalog import model as catalog_model
    from workbench.runs import RunStore, launch
    from workbench.specs import ClusterSpec, ParallelPlan

    work.mkdir(parents=True, exist_ok=True)
    store = RunStore(work / "runs.sqlite")
    prov = provenance()
    from workbench.specs import ModelSpec

    dims = {k: v for k, v in LAUNCHER_SHAPE_2GPU.items() if k != "like"}
    keep = [w for w in only.split(",") if w]
    for case in (LAUNCHER_RUNS if gpus == 1 else LAUNCHER_RUNS_2GPU):
        if keep and not any(w in case["name"] for w in keep):
            continue
        if "model" in case:
            model = catalog_model(case["model"])
        else:
            model = ModelSpec(name="mc-h4096-mha-8l", attention="unfused", **dims)
        plan = ParallelPlan(world_size=gpus, micro_batch_size=case["mbs"], precision="bf16", **case["plan"])
        t0 = time.perf_counter()
        try:
            r = launch(model, ClusterSpec(gpu="H200", gpus_per_node=gpus), plan, steps=steps, nproc=gpus, store=store,
                       run_dir=work / case["name"], launcher="torchrun", timeout_seconds=240)
            r.wait()
            m = r.record()
        except Exception as exc:
            m = {"status": "error", "reason": f"{type(exc).__name__}: {exc}", "measured": {}}
        mem = (m.get("measured") or {}).get("peak_memory_bytes") or {}
        rec = {"run_id": f"launcher/{case['name']}", "group": "launcher", "gpus": gpus,
               "shape_id": f"catalog:{case['model']}" if "model" in case else "mc-h4096-mha-8l",
               "model_dims": None if "model" in case else dims,
               "stack": "launcher", "script": "workbench/runs/train.py via workbench.runs.launch (torchrun)",
               "status": "ok" if m.get("status") == "completed" else m.get("status"), "error": m.get("reason"),
               "catalog_model": case.get("model"), "plan_fields": dict(case["plan"], micro_batch_size=case["mbs"]),
               "peak_allocated_bytes": max(mem.values()) if mem else None,
               "step_seconds_median": (m.get("measured") or {}).get("median_step_seconds"),
               "losses": m.get("losses"), "launcher_measured": m.get("measured"),
               "launcher_predicted": m.get("predicted"), "wall_seconds": time.perf_counter() - t0,
               "provenance": prov}
        with open(out, "a") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")
        print(f"[launcher] {rec['status']} {rec['run_id']} alloc {(rec['peak_allocated_bytes'] or 0) / 2**30:.2f} "
              f"GiB step {rec['step_seconds_median']}", flush=True)


def build_ops(aio: bool = False) -> None:
    """Build DeepSpeed's FusedAdam and CPUAdam once (JIT) into TORCH_EXTENSIONS_DIR, all at once; with ``aio`` also
    its async_io op (NVMe offload; needs libaio's header and library where the compiler finds them, e.g. CPATH and
    LIBRARY_PATH)."""
    code = "import sys; from deepspeed.ops.op_builder import {b}; {b}().load(); print('{b} ready', flush=True)"
    builders = ("FusedAdamBuilder", "CPUAdamBuilder") + (("AsyncIOBuilder",) if aio else ())
    procs = [subprocess.Popen([sys.executable, "-c", code.format(b=b)]) for b in builders]
    for p in procs:
        p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=False)
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--budget-seconds", type=float, default=520)
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU with gloo: checks the code path")
    ap.add_argument("--worker")
    ap.add_argument("--deadline", type=float)
    ap.add_argument("--launcher", action="store_true", help="the workbench.runs.launch comparison runs")
    ap.add_argument("--launcher-steps", type=int, default=6)
    ap.add_argument("--launcher-gpus", type=int, default=1, choices=(1, 2))
    ap.add_argument("--launcher-work", type=Path, default=Path("/tmp/corpus_launcher"),
                    help="run directories and run store of the launcher runs")
    ap.add_argument("--build-ops", action="store_true")
    ap.add_argument("--aio", action="store_true", help="with --build-ops: also DeepSpeed's async_io (NVMe offload)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--go-file", type=Path)
    ap.add_argument("--per-process", action="store_true", help="every run in its own process (the default way)")
    ap.add_argument("--only", default="", help="comma-separated substrings of run ids to keep")
    ap.add_argument("--ahead", type=int, default=3,
                    help="with --per-process: processes started early to hide their imports (0: none, each run alone "
                         "on the host)")
    args = ap.parse_args(argv)
    if args.list:
        runs = all_runs()
        for r in runs:
            print(r["run_id"])
        print(f"{len(runs)} runs + {len(LAUNCHER_RUNS)} launcher runs over "
              f"{len({r['shape_id'] for r in runs})} shapes")
        return 0
    if args.build_ops:
        build_ops(aio=args.aio)
        return 0
    if args.worker:
        worker(args.worker, done_ids(args.out), args.out, args.dry_run, args.deadline, args.go_file)
        return 0
    if args.launcher:
        launcher_runs(args.out, args.launcher_steps, args.launcher_work, args.launcher_gpus, args.only)
        return 0
    groups = [g for g in args.groups.split(",") if g]
    if args.per_process:
        ids = [r["run_id"] for g in groups for r in all_runs() if r["group"] == g
               and (not args.only or any(o in r["run_id"] for o in args.only.split(",")))]
        driver_one_per_process(ids, args.out, args.dry_run, args.budget_seconds, args.ahead)
    else:
        driver(groups, args.out, args.dry_run, args.budget_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
