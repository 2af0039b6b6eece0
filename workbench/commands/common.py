"""Flags shared by the commands that take a model, a cluster and a plan (``estimate``, ``export``, ...).

``add_spec_arguments(parser)`` adds them; ``specs_from_args(args)`` builds and cross-validates the three specs.
A ``--model`` catalog entry supplies the model fields; explicit flags override them.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from workbench import catalog
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, validate

DEFAULT_GPU = "H100-SXM"
DEFAULT_ENGINE = "deepspeed"

ENGINES = ("deepspeed", "megatron", "megatron-deepspeed")
"""Engine names, as the core spells them (``ParallelPlan.engine``)."""
ENGINE_ALIASES = {"hybrid": "megatron-deepspeed"}
"""Other accepted spellings: ``hybrid`` is Megatron tensor/pipeline parallel with DeepSpeed ZeRO over data parallel,
the core's ``megatron-deepspeed``."""
ENGINE_HELP = ("training framework: deepspeed, megatron, or megatron-deepspeed (Megatron TP/PP with DeepSpeed ZeRO "
               "over data parallel; 'hybrid' is accepted as another name for it)")


def json_kind(value) -> str:
    """The JSON type of a parsed JSON value, for a message naming what a file held instead of an object:
    ``array``, ``string``, ``boolean``, ``null`` or ``number`` (``object`` for a dict)."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value),
                                                                                                   "number")


def engine_name(value: str) -> str:
    """``--engine`` value to the core's engine name; ``hybrid`` is an alias of ``megatron-deepspeed``."""
    key = str(value).strip().lower().replace("_", "-")
    name = ENGINE_ALIASES.get(key, key)
    if name not in ENGINES:
        raise argparse.ArgumentTypeError(f"invalid engine {value!r} (choose from {', '.join(ENGINES)}; "
                                         f"'hybrid' = megatron-deepspeed)")
    return name

# flag dest -> ModelSpec field
_MODEL_FLAGS = {
    "layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads", "kv_heads": "num_query_groups",
    "ffn": "ffn_hidden_size", "vocab": "vocab_size", "head_dim": "head_dim", "seq": "seq_length",
    "activation": "activation", "norm": "normalization", "positions": "position_embedding",
    "attention": "attention", "experts": "num_experts", "topk": "moe_top_k",
    "hidden_dropout": "hidden_dropout", "attention_dropout": "attention_dropout",
    "experts_implementation": "experts_implementation",
}
# flag dest -> ParallelPlan field
_PLAN_FLAGS = {
    "engine": "engine", "tp": "tensor_parallel", "pp": "pipeline_parallel", "vp": "virtual_pipeline",
    "cp": "context_parallel", "zero": "zero_stage", "offload_optimizer": "offload_optimizer",
    "offload_params": "offload_params", "recompute": "recompute", "recompute_layers": "recompute_layers",
    "mbs": "micro_batch_size", "gbs": "global_batch_size", "precision": "precision", "lora_rank": "lora_rank",
    "lora_targets": "lora_targets", "lora_dropout": "lora_dropout", "adam": "adam", "overlap_comm": "overlap_comm",
    "expandable_segments": "expandable_segments", "zero_init": "zero_init", "pin_memory": "pin_memory",
    "first_stage_layers": "first_stage_layers", "last_stage_layers": "last_stage_layers",
    "ep": "expert_parallel", "etp": "expert_tensor_parallel", "moe_capacity_factor": "moe_capacity_factor",
    "moe_load_imbalance": "moe_load_imbalance", "moe_recompute": "moe_recompute",
    "moe_dispatcher": "moe_token_dispatcher",
    "cp_comm_type": "cp_comm_type", "hierarchical_cp": "hierarchical_context_parallel_sizes", "ulysses": "ulysses",
    "fp8_recipe": "fp8_recipe", "fp8_param_gather": "fp8_param_gather", "grad_reduce_fp32": "grad_reduce_fp32",
    "fp8_bf16_first_layers": "fp8_bf16_first_layers", "fp8_bf16_last_layers": "fp8_bf16_last_layers",
    "cross_entropy_fusion": "cross_entropy_fusion",
}


def _add_either(group, dest: str, *flags: tuple[str, bool, str]) -> None:
    """Mutually exclusive flags that set one boolean ``dest`` (``(flag, value, help)`` each); ``None`` when none
    is given, so the spec's default applies."""
    either = group.add_mutually_exclusive_group()
    for flag, value, help_text in flags:
        either.add_argument(flag, dest=dest, action="store_true" if value else "store_false", default=None,
                            help=help_text)


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, cluster and plan flags (all optional; see :func:`specs_from_args` for defaults)."""
    add_model_arguments(parser)
    add_cluster_arguments(parser)
    add_plan_arguments(parser)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model NAME`` or the model's dimensions (read by :func:`model_from_args`)."""
    m = parser.add_argument_group("model")
    m.add_argument("--model", metavar="NAME", help=f"catalog model ({', '.join(catalog.model_names())}) or hf:PATH, "
                   "a Hugging Face config.json or model directory")
    m.add_argument("--layers", type=int, help="transformer layers")
    m.add_argument("--hidden", type=int, help="hidden size")
    m.add_argument("--heads", type=int, help="attention heads")
    m.add_argument("--kv-heads", type=int, help="key/value heads (GQA query groups)")
    m.add_argument("--ffn", type=int, help="MLP inner size")
    m.add_argument("--vocab", type=int, help="vocabulary size")
    m.add_argument("--head-dim", type=int, help="per-head width (kv channels)")
    m.add_argument("--seq", type=int, help="sequence length")
    m.add_argument("--activation", choices=["gelu", "swiglu"])
    m.add_argument("--norm", choices=["layernorm", "rmsnorm"])
    m.add_argument("--no-bias", action="store_true", default=None, help="linear layers without biases")
    _add_either(m, "tied", ("--tied", True, "tie input/output embeddings"),
                ("--untied", False, "separate output layer"))
    m.add_argument("--positions", choices=["learned", "rotary"])
    m.add_argument("--attention", choices=["unfused", "fused-softmax", "flash"],
                   help="attention kernel (default: how the catalog model is trained, else unfused): unfused = "
                        "megatron-core local layer spec / HF eager, torch softmax in fp32; fused-softmax = "
                        "Megatron-LM's fused scale-mask-softmax kernel; flash = FlashAttention via Transformer "
                        "Engine or PyTorch SDPA")
    m.add_argument("--attn-implementation", choices=["eager", "sdpa", "flash_attention_2", "flash_attention_3"],
                   help="Hugging Face attention: eager keeps the scores (= --attention unfused); sdpa and "
                        "flash_attention_2 do not (= flash)")
    m.add_argument("--hidden-dropout", type=float, help="dropout after attention and MLP (default 0.1)")
    m.add_argument("--attention-dropout", type=float, help="dropout on attention probabilities (default 0.1)")
    m.add_argument("--experts", type=int, help="MoE experts per layer")
    m.add_argument("--topk", type=int, help="MoE experts per token")
    m.add_argument("--experts-implementation", choices=["grouped_mm", "eager"],
                   help="Hugging Face MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE): transformers' experts_implementation "
                        "(config._experts_implementation, from_config(..., experts_implementation=...)): grouped_mm "
                        "(transformers' default: two torch._grouped_mm GEMMs over all experts) or eager (a Python "
                        "loop over the experts hit); default: what the config.json names, else grouped_mm")


def add_cluster_arguments(parser: argparse.ArgumentParser, *, profile: bool = True) -> None:
    """GPU, node count and links (read by :func:`cluster_from_args`); ``--profile`` where the command uses it."""
    c = parser.add_argument_group("cluster")
    c.add_argument("--gpu", metavar="NAME", help=f"catalog GPU (default: the --profile's GPU, else {DEFAULT_GPU})"
                   if profile else f"catalog GPU (default {DEFAULT_GPU})")
    if profile:
        c.add_argument("--profile", metavar="NAME_OR_PATH",
                       help="hardware profile from `workbench calibrate`: measured rates replace datasheet numbers")
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--nodes", type=int, default=1)
    c.add_argument("--intra-gbps", type=float, help="per-GPU intra-node bandwidth, GB/s (default: catalog)")
    c.add_argument("--inter-gbps", type=float, help="per-GPU inter-node bandwidth, GB/s (default: catalog)")
    c.add_argument("--host-mem-gib", type=float, help="host memory per node, GiB")
    c.add_argument("--nvme-gib", type=float,
                   help="local NVMe per node for --offload-optimizer/--offload-params nvme (ZeRO-Infinity), GiB "
                        "(default 0: none, so NVMe offload does not fit)")
    c.add_argument("--nvme-read-gbps", type=float,
                   help="read rate of a node's NVMe through DeepSpeed's async_io, GB/s, shared by its GPUs: what "
                        "ZeRO-Infinity's swaps cost (default: a --profile's, measured by `workbench calibrate "
                        "--nvme-dir DIR`, else an assumed single PCIe 4.0 drive, ClusterSpec.nvme_read_gb_per_s)")
    c.add_argument("--nvme-write-gbps", type=float, help="write rate of a node's NVMe, GB/s (as --nvme-read-gbps)")
    c.add_argument("--host-cores", type=int, help="CPU cores per node (default 112); CPU Adam shares them")
    c.add_argument("--cpu-adam-threads", type=int,
                   help="OMP_NUM_THREADS of each rank, the threads of DeepSpeed's CPU Adam with optimizer offload "
                        "(default: host cores / GPUs per node, what `workbench run` sets; torchrun alone sets 1)")


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Engine, parallel sizes, ZeRO, offload, recompute, batch and precision (read by :func:`plan_from_args`)."""
    p = parser.add_argument_group("plan")
    p.add_argument("--engine", type=engine_name, metavar="{" + ",".join(ENGINES) + "}",
                   help=ENGINE_HELP + f" (default {DEFAULT_ENGINE})")
    p.add_argument("--tp", type=int, help="tensor parallel")
    p.add_argument("--pp", type=int, help="pipeline parallel")
    p.add_argument("--vp", type=int, help="virtual pipeline chunks per rank")
    p.add_argument("--decoder-first-pipeline-num-layers", "--first-stage-layers", dest="first_stage_layers",
                   type=int, metavar="N", help="Megatron uneven pipeline: transformer layers on the first stage")
    p.add_argument("--decoder-last-pipeline-num-layers", "--last-stage-layers", dest="last_stage_layers", type=int,
                   metavar="N", help="Megatron uneven pipeline: transformer layers on the last stage")
    p.add_argument("--account-for-embedding-in-pipeline-split", dest="embedding_in_pipeline_split",
                   action="store_true", default=None,
                   help="Megatron: the embedding counts as a layer of the pipeline split (first stage one layer fewer)")
    p.add_argument("--account-for-loss-in-pipeline-split", dest="loss_in_pipeline_split", action="store_true",
                   default=None, help="Megatron: the loss counts as a layer of the split (last stage one layer fewer)")
    p.add_argument("--cp", "--context-parallel-size", dest="cp", type=int, help="context parallel")
    p.add_argument("--cp-comm-type", metavar="{p2p,a2a,all_gather,a2a+p2p}",
                   help="how context-parallel ranks exchange K/V (Megatron --cp-comm-type; default p2p, the ring; "
                        "allgather is read as all_gather)")
    p.add_argument("--hierarchical-context-parallel-sizes", "--hierarchical-cp", dest="hierarchical_cp", type=int,
                   nargs=2, metavar=("A2A", "P2P"),
                   help="with --cp-comm-type a2a+p2p: all-to-all group size and ring size, product = --cp")
    p.add_argument("--ulysses", "--sequence-parallel-size", dest="ulysses", type=int, metavar="N",
                   help="DeepSpeed-Ulysses sequence parallel over N ranks (engine deepspeed; ds_config "
                        "sequence_parallel_size): all-to-all of Q, K, V and O around attention; N divides the heads, "
                        "K/V heads, sequence and world size")
    p.add_argument("--sp", action="store_true", default=None, help="sequence parallel")
    p.add_argument("--ep", "--expert-model-parallel-size", dest="ep", type=int, metavar="N",
                   help="MoE expert parallel: each MoE layer's experts split over N ranks (Megatron "
                        "--expert-model-parallel-size; under a DeepSpeed engine DeepSpeed-MoE's ep_size)")
    p.add_argument("--etp", "--expert-tensor-parallel-size", dest="etp", type=int, metavar="N",
                   help="MoE expert tensor parallel: ranks splitting one expert (default: --tp)")
    p.add_argument("--moe-capacity-factor", "--moe-expert-capacity-factor", dest="moe_capacity_factor", type=float,
                   metavar="F", help="MoE expert capacity factor (tokens beyond F x the average are dropped; "
                                     "default dropless; under a DeepSpeed engine DeepSpeed-MoE's capacity_factor, "
                                     "default 1.0, always padded)")
    p.add_argument("--moe-load-imbalance", dest="moe_load_imbalance", type=float, metavar="F",
                   help="MoE routing load imbalance F: the busiest expert-parallel rank's routed tokens over the mean (default 1.0, balanced); prices that rank's expert activations, expert GEMMs and all-to-all at F x the balanced share. Megatron has no such flag: it is an assumption about the router, not exported")
    p.add_argument("--moe-recompute", dest="moe_recompute", choices=["none", "moe_act", "moe"],
                   help="with --recompute selective: also recompute the experts' activation (moe_act) or the whole "
                        "MoE layer (moe) — Megatron --recompute-modules core_attn moe_act|moe")
    p.add_argument("--moe-pad-to-capacity", "--moe-pad-expert-input-to-capacity", dest="moe_pad_to_capacity",
                   action="store_true", default=None, help="pad every expert's input to its capacity")
    p.add_argument("--overlap-moe-expert-parallel-comm", "--moe-overlap-alltoall", dest="moe_overlap_alltoall",
                   action="store_true", default=None,
                   help="overlap the MoE all-to-alls with another micro-batch's compute (combined 1F1B)")
    p.add_argument("--moe-dispatcher", "--moe-token-dispatcher-type", dest="moe_dispatcher",
                   choices=["alltoall", "allgather"], help="MoE token dispatcher (default alltoall)")
    p.add_argument("--tp-comm-overlap", dest="tp_comm_overlap", action="store_true", default=None,
                   help="Transformer Engine tensor-parallel communication overlap (Megatron-LM --tp-comm-overlap): "
                        "the sequence-parallel all-gathers / reduce-scatters run inside the TP GEMMs through "
                        "userbuffers outside the allocator; needs --engine megatron, --tp > 1 and --sp")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="DeepSpeed ZeRO stage")
    p.add_argument("--offload-optimizer", choices=["none", "cpu", "nvme"])
    p.add_argument("--offload-params", choices=["none", "cpu", "nvme"])
    p.add_argument("--distributed-optimizer", action="store_true", default=None, help="Megatron distributed optimizer")
    p.add_argument("--recompute", choices=["none", "selective", "full"])
    p.add_argument("--recompute-layers", type=int, help="full recompute: layers per stage")
    p.add_argument("--mbs", type=int, help="micro batch size")
    p.add_argument("--gbs", type=int, help="global batch size")
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32", "fp8"],
                   help="training precision (default bf16). fp8 = Transformer Engine FP8 under Megatron-LM "
                        "(--engine megatron, --attention flash; Megatron-LM --bf16 --fp8-format hybrid "
                        "--transformer-impl transformer_engine): the transformer layers' linear GEMMs in FP8, "
                        "everything else in bf16 with fp32 main gradients and optimizer states")
    p.add_argument("--fp8-recipe", choices=["delayed", "tensorwise", "blockwise", "mxfp8"],
                   help="with --precision fp8: Transformer Engine's scaling recipe (Megatron-LM --fp8-recipe, default "
                        "delayed; mxfp8 needs a Blackwell GPU)")
    p.add_argument("--fp8-param-gather", action="store_true", default=None,
                   help="with --precision fp8: keep the linear weights only in FP8 and all-gather them in FP8 "
                        "(Megatron-LM --fp8-param-gather; needs --distributed-optimizer)")
    p.add_argument("--num-layers-at-start-in-bf16", dest="fp8_bf16_first_layers", type=int, metavar="N",
                   help="with --precision fp8: keep the first N layers in bf16 (Megatron-LM --first-last-layers-bf16 "
                        "--num-layers-at-start-in-bf16 N; not with the delayed recipe)")
    p.add_argument("--num-layers-at-end-in-bf16", dest="fp8_bf16_last_layers", type=int, metavar="N",
                   help="with --precision fp8: keep the last N layers in bf16 (--num-layers-at-end-in-bf16 N)")
    p.add_argument("--cross-entropy-fusion", choices=["none", "native", "te"],
                   help="engine megatron: the loss kernels (default none: megatron-core's unfused vocab-parallel "
                        "cross entropy, an fp32 softmax kept beside the 16-bit logits); native = Megatron-LM "
                        "--cross-entropy-loss-fusion --cross-entropy-fusion-impl native (the same tensors, compiled "
                        "kernels); te = --cross-entropy-loss-fusion --cross-entropy-fusion-impl te (Transformer "
                        "Engine's parallel_cross_entropy: only the 16-bit logits, the gradient written over them)")
    p.add_argument("--adam", choices=["fused", "torch"],
                   help="GPU optimizer kernel (default fused): fused = Apex/Transformer Engine FusedAdam (Megatron) or "
                        "DeepSpeed's FusedAdam op; torch = torch.optim.AdamW (megatron-core without Apex/TE, "
                        "DeepSpeed \"torch_adam\": true). CPU Adam follows from --offload-optimizer")
    _add_either(p, "grad_reduce_fp32",
                ("--grad-reduce-in-bf16", False,
                 "engine megatron: 16-bit main gradients, accumulated and reduced in the model dtype (Megatron-LM "
                 "--grad-reduce-in-bf16, megatron-core grad_reduce_in_fp32=False, as NVIDIA's performance recipes "
                 "set); default: fp32 with bf16, Megatron-LM's --bf16 default"),
                ("--accumulate-allreduce-grads-in-fp32", True,
                 "engine megatron: fp32 main gradients (Megatron-LM's default with bf16)"))
    _add_either(p, "overlap_comm",
                ("--overlap-comm", True,
                 "overlap the gradient reduce with backward (DeepSpeed overlap_comm, Megatron --overlap-grad-reduce); "
                 "default: the engine's (DeepSpeed on as exported, Megatron off)"),
                ("--no-overlap-comm", False, "reduce gradients after backward, not overlapped"))
    _add_either(p, "zero_init",
                ("--zero-init", True,
                 "DeepSpeed ZeRO-3: the model is built inside deepspeed.zero.Init, partitioned as it is made (the HF "
                 "Trainer / from_pretrained with a ZeRO-3 config, workbench run); default: on for transformers "
                 "models (--model hf:PATH) at ZeRO-3 and always for megatron-deepspeed at ZeRO-3 (its model_provider "
                 "builds there), off otherwise"),
                ("--no-zero-init", False,
                 "DeepSpeed ZeRO-3: the whole model is built on the GPU, then partitioned by deepspeed.initialize "
                 "(a plain script's from_config on the device)"))
    _add_either(p, "pin_memory",
                ("--pin-memory", True,
                 "DeepSpeed CPU offload with page-locked host buffers (\"pin_memory\": true, DeepSpeed's default and "
                 "this one's)"),
                ("--no-pin-memory", False,
                 "DeepSpeed CPU offload with pageable host buffers (\"pin_memory\": false): less host memory, "
                 "copies to and from the GPU at the host's pageable rate"))
    for flag, dest, what in (("--reduce-bucket-size", "reduce_bucket_size",
                              "DeepSpeed zero_optimization.reduce_bucket_size: the ZeRO-1/2 gradient bucket (two with "
                              "overlap_comm) and ZeRO-3's reduce bucket, allocated whole; default DeepSpeed's 5e8"),
                             ("--prefetch-bucket-size", "prefetch_bucket_size",
                              "DeepSpeed ZeRO-3 stage3_prefetch_bucket_size: parameters gathered ahead; default 5e7"),
                             ("--param-persistence-threshold", "param_persistence_threshold",
                              "DeepSpeed ZeRO-3 stage3_param_persistence_threshold: parameters of at most N elements "
                              "are never partitioned or fetched; default 1e5")):
        p.add_argument(flag, dest=dest, metavar="N|auto", type=elements_type(flag),
                       help=f"{what}. 'auto': what the Hugging Face Trainer and accelerate fill in from the model's "
                            f"hidden size h (h², 0.9·h², 10·h); N as an integer or 5e8")
    p.add_argument("--sub-group-size", dest="sub_group_size", metavar="N",
                   type=elements_type("--sub-group-size", auto=False), help=SUB_GROUP_HELP)
    p.add_argument("--expandable-segments", dest="expandable_segments", action="store_true", default=None,
                   help="the training runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch's caching "
                        "allocator grows its segments in place: less reserved above the allocated peak); default: "
                        "PyTorch's default allocator")
    p.add_argument("--lora-rank", type=int, metavar="R", help="LoRA adapters of rank R, base weights frozen (0: full)")
    p.add_argument("--lora-targets", metavar="LIST",
                   help="projections with adapters, comma-separated from q,k,v,o,gate,up,down (default all)")
    p.add_argument("--lora-dropout", type=float, metavar="P", help="peft lora_dropout (default 0)")


def model_from_args(args) -> ModelSpec:
    fields = {f: getattr(args, d) for d, f in _MODEL_FLAGS.items() if getattr(args, d, None) is not None}
    if getattr(args, "no_bias", None):
        fields["add_bias_linear"] = False
    if getattr(args, "tied", None) is not None:
        fields["tied_embeddings"] = args.tied
    if getattr(args, "attn_implementation", None) is not None:
        from workbench.hf import attention_for

        if "attention" in fields and fields["attention"] != str(attention_for(args.attn_implementation)):
            raise ValueError(f"--attention {fields['attention']} contradicts --attn-implementation "
                             f"{args.attn_implementation}")
        if str(args.model or "").startswith("hf:"):  # checked against what transformers accepts for the family
            fields.pop("attention", None)
            fields["attn_implementation"] = args.attn_implementation
        else:
            fields["attention"] = attention_for(args.attn_implementation)
    if str(args.model or "").startswith("hf:"):
        from workbench.hf import import_hf

        imp = import_hf(args.model[3:], seq_length=fields.pop("seq_length", None),
                        attn_implementation=fields.pop("attn_implementation", None))
        model = imp.spec.replace(**fields) if fields else imp.spec
        if imp.context_warning:  # not a refusal (RoPE scaling trains past the context); stdout stays the payload
            print(f"warning: {imp.context_warning}", file=sys.stderr)
    elif args.model:
        model = catalog.model(args.model, **fields)
    else:
        missing = [f"--{d}" for d in ("layers", "hidden", "heads") if getattr(args, d, None) is None]
        if missing:
            raise ValueError(f"give --model NAME or all of --layers --hidden --heads (missing {' '.join(missing)})")
        model = ModelSpec(**fields)
    if model.num_experts is None and "moe_top_k" in fields:  # a catalog MoE model brings its experts
        raise ValueError(f"--topk {fields['moe_top_k']} needs --experts (model {model.name} is dense)")
    return model


def profile_from_args(args):
    """The :class:`~workbench.calibrate.HardwareProfile` named by ``--profile``, or ``None``."""
    from workbench.calibrate.profile import resolve_profile

    return resolve_profile(getattr(args, "profile", None))


def cluster_from_args(args) -> ClusterSpec:
    profile = profile_from_args(args)
    if getattr(args, "gpu", None) is not None:
        gpu = catalog.gpu(args.gpu)
    else:
        gpu = profile.device_spec() if profile is not None else catalog.gpu(DEFAULT_GPU)
    kwargs = dict(gpu=gpu, gpus_per_node=args.gpus_per_node, num_nodes=args.nodes)
    if args.intra_gbps is not None:
        kwargs["intra_node_gb_per_s"] = args.intra_gbps
    if args.inter_gbps is not None:
        kwargs["inter_node_gb_per_s"] = args.inter_gbps
    if args.host_mem_gib is not None:
        kwargs["host_memory_gib_per_node"] = args.host_mem_gib
    if getattr(args, "nvme_gib", None) is not None:
        kwargs["nvme_gib_per_node"] = args.nvme_gib
    for flag, field, key in (("nvme_read_gbps", "nvme_read_gb_per_s", "read"),
                             ("nvme_write_gbps", "nvme_write_gb_per_s", "write")):
        if getattr(args, flag, None) is not None:
            kwargs[field] = getattr(args, flag)
        elif profile is not None and profile.nvme_gb_per_s.get(key):  # measured by `workbench calibrate --nvme-dir`
            kwargs[field] = profile.nvme_gb_per_s[key]
    if getattr(args, "host_cores", None) is not None:
        kwargs["host_cpu_cores_per_node"] = args.host_cores
    if getattr(args, "cpu_adam_threads", None) is not None:
        kwargs["cpu_adam_threads"] = args.cpu_adam_threads
    return ClusterSpec(**kwargs)


def check_flag_dependencies(args) -> None:
    """``ValueError`` for a flag that only means something with another one, given without it (it would be ignored
    silently): ``--lora-targets`` / ``--lora-dropout`` without ``--lora-rank R > 0``, ``--fp8-recipe`` without
    ``--precision fp8``."""
    rank = getattr(args, "lora_rank", None) or 0
    for dest, flag in (("lora_targets", "--lora-targets"), ("lora_dropout", "--lora-dropout")):
        value = getattr(args, dest, None)
        if value is not None and rank <= 0:
            raise ValueError(f"{flag} {value} needs --lora-rank R > 0 (got lora_rank={rank}: a full fine-tune, "
                             f"which has no adapters)")
    recipe = getattr(args, "fp8_recipe", None)
    precision = getattr(args, "precision", None) or "bf16"
    if recipe is not None and precision != "fp8":
        raise ValueError(f"--fp8-recipe {recipe} needs --precision fp8 (got precision={precision})")


SUB_GROUP_HELP = ("DeepSpeed ZeRO-3 zero_optimization.sub_group_size: the optimizer steps each rank's partition in "
                  "sub-groups of about N elements, so the step's fp32 gradient on the GPU and, with offload, the "
                  "host's buffers per sub-group (NVMe: the swapper's page-locked buffers of the largest) scale with "
                  "it; default DeepSpeed's 1e9")


def elements_type(flag: str, auto: bool = True):
    """An argparse type for a DeepSpeed size: ``auto`` (where ``auto``), or a whole number of elements written as an
    integer or in DeepSpeed's float form (``5e8``); the error names the flag."""
    def convert(text: str):
        if auto and text.strip().lower() == "auto":
            return "auto"
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give a whole number of elements (500000000 or 5e8)"
                                             + (" or 'auto'" if auto else "")) from None
        if not value.is_integer() or value < 0:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give a whole number of elements >= 0")
        return int(value)
    return convert


def zero_sizes_from_args(args, model: Optional[ModelSpec]) -> dict:
    """DeepSpeed's ZeRO sizes the flags give (``--reduce-bucket-size``, ``--prefetch-bucket-size``,
    ``--param-persistence-threshold``, ``--sub-group-size``), as :class:`ParallelPlan` fields; ``auto`` filled from
    ``model``'s hidden size as the Hugging Face Trainer fills it
    (:func:`workbench.configs.deepspeed.hf_auto_zero_sizes`)."""
    from workbench.configs.deepspeed import PLAN_ZERO_SIZES, hf_auto_zero_sizes

    out = {}
    for path, name in PLAN_ZERO_SIZES.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if value == "auto":
            if model is None:
                raise ValueError(f"--{name.replace('_', '-')} auto needs the model (its hidden size)")
            # the size at any stage, so that the plan refuses a stage that does not read it, as for a number
            value = hf_auto_zero_sizes(model.hidden_size, 3)[path]
        out[name] = value
    return out


def plan_from_args(args, cluster: ClusterSpec, *, default_engine: str = DEFAULT_ENGINE,
                   model: Optional[ModelSpec] = None) -> ParallelPlan:
    """The plan the flags describe; ``auto`` DeepSpeed sizes are filled from ``model``'s hidden size as the Hugging
    Face Trainer fills them (:func:`workbench.configs.deepspeed.hf_auto_zero_sizes`)."""
    check_flag_dependencies(args)
    fields = {f: getattr(args, d) for d, f in _PLAN_FLAGS.items() if getattr(args, d, None) is not None}
    fields.setdefault("engine", default_engine)
    fields.update(zero_sizes_from_args(args, model))
    if getattr(args, "sp", None):
        fields["sequence_parallel"] = True
    if getattr(args, "distributed_optimizer", None):
        fields["distributed_optimizer"] = True
    for name in ("embedding_in_pipeline_split", "loss_in_pipeline_split", "moe_pad_to_capacity",
                 "moe_overlap_alltoall", "tp_comm_overlap"):
        if getattr(args, name, None):
            fields[name] = True
    return ParallelPlan(world_size=cluster.world_size, **fields)


def specs_from_args(args, *, default_engine: Optional[str] = None) -> tuple[ModelSpec, ClusterSpec, ParallelPlan]:
    """Build and cross-check (model, cluster, plan) from :func:`add_spec_arguments` flags; ``ValueError`` naming
    the fields and numbers when they do not fit. ``default_engine`` applies when ``--engine`` is not given."""
    model = model_from_args(args)
    cluster = cluster_from_args(args)
    plan = plan_from_args(args, cluster, default_engine=default_engine or DEFAULT_ENGINE, model=model)
    validate(model, cluster, plan)
    return model, cluster, plan


def progress_bar(**kwargs):
    """A tqdm progress bar on stderr (stdout stays the command's result, so ``--json`` and pipes are unaffected).
    Off when ``WORKBENCH_PROGRESS=0``."""
    import os
    import sys

    from tqdm import tqdm

    disable = os.environ.get("WORKBENCH_PROGRESS", "").strip() == "0"
    return tqdm(file=sys.stderr, disable=disable, dynamic_ncols=True, mininterval=0.5, **kwargs)


class working:
    """``with working("plan: searching"):`` — for one long call that cannot report steps: after ``after_seconds``
    a tqdm line on stderr shows the elapsed time until the call returns; a call that ends sooner prints nothing."""

    def __init__(self, desc: str, after_seconds: float = 1.0, interval_seconds: float = 0.5) -> None:
        import threading

        self.desc, self.after, self.interval = desc, after_seconds, interval_seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.shown = False

    def _run(self) -> None:
        if self._done.wait(self.after):
            return
        self.shown = True
        with progress_bar(desc=self.desc, total=None, bar_format="{desc}: {elapsed} elapsed") as bar:
            while not self._done.wait(self.interval):
                bar.refresh()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
