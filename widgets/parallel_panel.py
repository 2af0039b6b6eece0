"""ParallelPanel: engine, ZeRO, offload, TP/PP/VP/CP/SP, recompute, batch sizes, precision and the stack (Adam
kernel, communication overlap; the attention kernel is in the model panel), in sections (:data:`GROUPS`).

Invalid combinations (e.g. ZeRO-2 with DeepSpeed pipeline parallelism, TP not dividing the heads) are shown inline
with the core's own message; the figures keep the last valid plan.
"""
from __future__ import annotations

import ipywidgets as ipw

from widgets.common import Panel, checkbox, dropdown, float_text, int_text
from widgets.state import SetPlan, resolved
from workbench.specs import (AdamImpl, CPCommType, CrossEntropyFusion, Engine, Fp8Recipe, MoEDispatcher, Offload,
                             Precision, Recompute)

_INTS = (
    ("tensor_parallel", "tensor parallel (TP)"),
    ("pipeline_parallel", "pipeline parallel (PP)"),
    ("virtual_pipeline", "virtual pipeline (VP)"),
    ("context_parallel", "context parallel (CP)"),
    ("micro_batch_size", "micro batch"),
    ("global_batch_size", "global batch"),
)


GROUPS = (
    ("Parallelism", ("engine", "zero_stage", "tensor_parallel", "pipeline_parallel", "virtual_pipeline",
                     "sequence_parallel", "tp_comm_overlap", "micro_batch_size", "global_batch_size")),
    ("Pipeline split", ("first_stage_layers", "last_stage_layers", "embedding_in_pipeline_split",
                        "loss_in_pipeline_split")),
    ("Long context", ("context_parallel", "cp_comm_type", "cp_a2a_group", "ulysses")),
    ("MoE", ("expert_parallel", "expert_tensor_parallel", "moe_token_dispatcher", "moe_capacity_factor",
             "moe_load_imbalance", "moe_recompute", "moe_pad_to_capacity", "moe_overlap_alltoall")),
    ("Memory & recompute", ("recompute", "recompute_layers", "distributed_optimizer", "offload_optimizer",
                            "offload_params", "pin_memory", "zero_init", "expandable_segments", "lora_rank")),
    ("DeepSpeed ZeRO sizes", ("reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold",
                              "sub_group_size")),
    ("Precision & kernels", ("precision", "fp8_recipe", "fp8_param_gather", "fp8_bf16_first_layers",
                             "fp8_bf16_last_layers", "grad_reduce_fp32", "cross_entropy_fusion", "adam",
                             "overlap_comm")),
)
"""The panel's sections (an accordion, the first open), each control in exactly one; the derived sizes and the
error stay below them, visible whichever section is open."""

_ZERO_IS_NONE = ("recompute_layers", "first_stage_layers", "last_stage_layers", "expert_tensor_parallel",
                 "moe_capacity_factor", "reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold",
                 "sub_group_size")
"""Integer boxes where 0 stands for the plan's ``None``."""
_ENGINE_DEFAULT = "default"  # the overlap_comm choice that leaves it to the engine (None in the plan)


def _hierarchical_sizes(a2a_group, context_parallel):
    """``(a2a, p2p)`` for Megatron's ``--hierarchical-context-parallel-sizes`` from the typed all-to-all group and CP
    size (``None`` when the group is 0: not hierarchical)."""
    if not a2a_group:
        return None
    return int(a2a_group), max(int(context_parallel or 1) // int(a2a_group), 1)


class ParallelPanel(Panel):
    """Plan inputs; shows the derived data-parallel size and gradient accumulation of the valid plan."""

    title = "Parallelism"
    parts = ("plan", "estimate")

    def __init__(self, dispatch=None) -> None:
        super().__init__(dispatch)
        c = {
            "engine": dropdown("engine", [e.value for e in Engine]),
            "zero_stage": dropdown("ZeRO stage", [("0 (off)", 0), ("1 optimizer", 1), ("2 + gradients", 2),
                                                  ("3 + parameters", 3)]),
            "offload_optimizer": dropdown("offload optimizer", [o.value for o in Offload]),
            "offload_params": dropdown("offload parameters", [o.value for o in Offload]),
            "distributed_optimizer": checkbox("Megatron distributed optimizer"),
        }
        for name, label in _INTS:
            c[name] = int_text(label, minimum=1)
        # Megatron's uneven pipeline split (--decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split)
        c["first_stage_layers"] = int_text("first stage layers", minimum=0,
                                           tooltip="Megatron --decoder-first-pipeline-num-layers (0: an even split)")
        c["last_stage_layers"] = int_text("last stage layers", minimum=0,
                                          tooltip="Megatron --decoder-last-pipeline-num-layers (0: an even split)")
        c["embedding_in_pipeline_split"] = checkbox("embedding counts as a stage layer")
        c["loss_in_pipeline_split"] = checkbox("loss counts as a stage layer")
        c["cp_comm_type"] = dropdown("CP exchange", [k.value for k in CPCommType],
                                     tooltip="Megatron --cp-comm-type: p2p ring (overlapped with attention), a2a "
                                             "(Ulysses: heads split over CP), all_gather (K/V gathered, not "
                                             "overlapped), a2a+p2p (all-to-all inside the a2a group, ring across)")
        c["cp_a2a_group"] = int_text("CP a2a group (a2a+p2p)", minimum=0,
                                     tooltip="--hierarchical-context-parallel-sizes A CP/A: the all-to-all group "
                                             "size A (0: not hierarchical)")
        c["ulysses"] = int_text("DeepSpeed-Ulysses N", minimum=1,
                                tooltip="engine deepspeed: ds_config sequence_parallel_size N, all-to-all of Q, K, V "
                                        "and O around attention; N divides heads, K/V heads and the sequence")
        c["sequence_parallel"] = checkbox("sequence parallel (SP)")
        c["tp_comm_overlap"] = checkbox("TP comm overlap",
                                        tooltip="Megatron-LM --tp-comm-overlap: Transformer Engine runs the "
                                                "sequence-parallel all-gathers / reduce-scatters inside the TP GEMMs "
                                                "(userbuffers outside the allocator); needs TP > 1 and SP")
        # MoE: expert parallelism (Megatron --expert-model-parallel-size and friends)
        c["expert_parallel"] = int_text("expert parallel (EP)", minimum=1,
                                        tooltip="MoE: each layer's experts split over EP ranks (Megatron "
                                                "--expert-model-parallel-size; DeepSpeed engines: DeepSpeed-MoE's "
                                                "ep_size, TP 1, ZeRO-1/2)")
        c["expert_tensor_parallel"] = int_text("expert TP (0 = TP)", minimum=0,
                                               tooltip="--expert-tensor-parallel-size: ranks splitting one expert "
                                                       "(0: the dense TP size, Megatron's default)")
        c["moe_token_dispatcher"] = dropdown("MoE dispatcher", [d.value for d in MoEDispatcher],
                                             tooltip="--moe-token-dispatcher-type: alltoall over the EP group, or "
                                                     "allgather of the TP×EP group's tokens")
        c["moe_capacity_factor"] = float_text("capacity (0: dropless)",
                                              tooltip="--moe-expert-capacity-factor: tokens above factor × an "
                                                      "expert's average are dropped (0: dropless; DeepSpeed-MoE: "
                                                      "its capacity_factor, 0 = its default 1.0, always padded)")
        c["moe_load_imbalance"] = float_text("load imbalance",
                                             tooltip="routing load imbalance: the busiest expert-parallel rank's "
                                                     "tokens over the mean (1: balanced); prices that rank's expert "
                                                     "activations, GEMMs and all-to-all. No Megatron flag: an "
                                                     "assumption about the router, not exported")
        c["moe_recompute"] = dropdown("MoE recompute", ["none", "moe_act", "moe"],
                                      tooltip="with recompute selective: --recompute-modules core_attn moe_act "
                                              "(the experts' activation) or moe (the whole MoE layer)")
        c["moe_overlap_alltoall"] = checkbox("overlap MoE all-to-all",
                                             tooltip="--overlap-moe-expert-parallel-comm: dispatch/combine run "
                                                     "beside another micro-batch's compute")
        c["moe_pad_to_capacity"] = checkbox("pad experts to capacity",
                                            tooltip="--moe-pad-expert-input-to-capacity: every expert computes "
                                                    "factor × its average")
        c["recompute"] = dropdown("recompute", [r.value for r in Recompute])
        c["recompute_layers"] = int_text("recompute layers (0 = all)", minimum=0)
        c["precision"] = dropdown("precision", [p.value for p in Precision],
                                  tooltip="fp8: Transformer Engine FP8 under Megatron-LM (engine megatron, flash "
                                          "attention): linear GEMMs in FP8, the rest in bf16")
        c["fp8_recipe"] = dropdown("FP8 recipe", [r.value for r in Fp8Recipe],
                                   tooltip="Megatron-LM --fp8-recipe (Transformer Engine scaling; mxfp8: Blackwell)")
        c["fp8_param_gather"] = checkbox("FP8 parameter all-gather",
                                         tooltip="Megatron-LM --fp8-param-gather: linear weights kept only in FP8, "
                                                 "all-gathered in FP8 (needs the distributed optimizer)")
        c["fp8_bf16_first_layers"] = int_text("FP8: first layers in bf16", minimum=0,
                                              tooltip="Megatron-LM --num-layers-at-start-in-bf16 (0: none)")
        c["fp8_bf16_last_layers"] = int_text("FP8: last layers in bf16", minimum=0,
                                             tooltip="Megatron-LM --num-layers-at-end-in-bf16 (0: none)")
        c["cross_entropy_fusion"] = dropdown("loss kernels", [x.value for x in CrossEntropyFusion],
                                             tooltip="engine megatron: none = unfused vocab-parallel cross entropy; "
                                                     "native / te = --cross-entropy-loss-fusion "
                                                     "--cross-entropy-fusion-impl native|te")
        c["adam"] = dropdown("Adam kernel", [a.value for a in AdamImpl],
                             tooltip="fused: Apex/Transformer Engine or DeepSpeed FusedAdam; torch: torch.optim.AdamW "
                                     "(CPU Adam follows from optimizer offload)")
        # ipywidgets reads a Dropdown value of None as "nothing selected" (a blank box), so the engine default is a
        # string here and None in the plan
        c["overlap_comm"] = dropdown("overlap comm", [("engine default", _ENGINE_DEFAULT), ("on", True),
                                                      ("off", False)],
                                     tooltip="gradient reduce overlapped with backward (DeepSpeed overlap_comm, "
                                             "Megatron --overlap-grad-reduce)")
        c["grad_reduce_fp32"] = dropdown("main grads", [("engine default", _ENGINE_DEFAULT), ("fp32", True),
                                                        ("16-bit", False)],
                                         tooltip="Megatron's main-gradient dtype: fp32 (--accumulate-allreduce-"
                                                 "grads-in-fp32, Megatron-LM's default with bf16) or 16-bit "
                                                 "(--grad-reduce-in-bf16, what NVIDIA's performance recipes set)")
        c["zero_init"] = dropdown("ZeRO-3 build", [("default", _ENGINE_DEFAULT), ("inside zero.Init", True),
                                                   ("on the GPU first", False)],
                                  tooltip="DeepSpeed ZeRO-3: the model built inside deepspeed.zero.Init (the HF "
                                          "Trainer, from_pretrained with a ZeRO-3 config, workbench run) or whole "
                                          "on the GPU, then partitioned; default: zero.Init for transformers "
                                          "models")
        c["expandable_segments"] = checkbox("expandable segments",
                                            tooltip="the training runs with PYTORCH_CUDA_ALLOC_CONF="
                                                    "expandable_segments:True (less reserved above the allocated "
                                                    "peak); off: PyTorch's default allocator")
        c["pin_memory"] = checkbox("pin memory",
                                   tooltip="DeepSpeed CPU offload: page-locked host buffers (\"pin_memory\": true, "
                                           "DeepSpeed's default); off: pageable buffers, less host memory, copies "
                                           "to and from the GPU at the host's pageable rate")
        c["lora_rank"] = int_text("LoRA rank", minimum=0, tooltip="LoRA adapter rank (0: full fine-tune)")
        c["lora_rank"].add_class("wb-lora-rank")
        for name, label, what in (
                ("reduce_bucket_size", "reduce bucket", "zero_optimization.reduce_bucket_size: the ZeRO-1/2 "
                 "gradient bucket (two with overlap_comm) and ZeRO-3's reduce bucket, allocated whole; 0: "
                 "DeepSpeed's 5e8. The HF Trainer's 'auto' is hidden²"),
                ("prefetch_bucket_size", "ZeRO-3 prefetch", "stage3_prefetch_bucket_size: parameters gathered "
                 "ahead; 0: DeepSpeed's 5e7. The HF Trainer's 'auto' is 0.9 x hidden²"),
                ("param_persistence_threshold", "ZeRO-3 persistence", "stage3_param_persistence_threshold: "
                 "parameters of at most this many elements are never partitioned; 0: DeepSpeed's 1e5. The HF "
                 "Trainer's 'auto' is 10 x hidden"),
                ("sub_group_size", "ZeRO-3 sub-group", "zero_optimization.sub_group_size: the optimizer steps the "
                 "partition in sub-groups of about this many elements; the step's fp32 gradient and, with offload, "
                 "the host's buffers per sub-group (NVMe: its swap buffers) scale with it; 0: DeepSpeed's 1e9")):
            c[name] = int_text(label + " (elements)", minimum=0, tooltip=what)
        self.controls = c
        for name, w in c.items():
            w.observe(lambda change, name=name: self._on_field(name, change["new"]), names="value")
        self.controls["zero_stage"].add_class("wb-zero-stage")
        self.controls["tensor_parallel"].add_class("wb-tp")
        self.controls["ulysses"].add_class("wb-ulysses")
        self.derived = ipw.HTML()
        self.derived.add_class("wb-plan-derived")
        placed = [n for _, names in GROUPS for n in names]
        if sorted(placed) != sorted(c):  # every control in exactly one group: a new one must be placed
            repeated = sorted(n for n in set(placed) if placed.count(n) > 1 or n not in c)
            raise RuntimeError(f"parallel panel GROUPS: unplaced {sorted(set(c) - set(placed))}, "
                               f"unknown or repeated {repeated}")
        self.groups = ipw.Accordion(children=[ipw.VBox([c[n] for n in names]) for _, names in GROUPS],
                                    titles=tuple(title for title, _ in GROUPS), selected_index=0)
        self.groups.add_class("wb-plan-groups")
        self.widget = ipw.VBox([self.groups, self.derived, self.error])

    def _on_field(self, name: str, value) -> None:
        if name == "cp_a2a_group":  # (a2a, p2p) sizes from the a2a group and the plan's CP
            sizes = _hierarchical_sizes(value, self.controls["context_parallel"].value)
            self.send(SetPlan(changes={"hierarchical_context_parallel_sizes": sizes}))
            return
        if name == "context_parallel" and self.controls["cp_a2a_group"].value:
            # the typed a2a group stays; its p2p size follows the new CP
            sizes = _hierarchical_sizes(self.controls["cp_a2a_group"].value, value)
            self.send(SetPlan(changes={"context_parallel": value, "hierarchical_context_parallel_sizes": sizes}))
            return
        if name == "ulysses":  # Ulysses is the plan's CP split with the all-to-all: set (or clear) both
            n = int(value or 1)
            self.send(SetPlan(changes={"ulysses": n, "context_parallel": n, "cp_comm_type": "a2a" if n > 1 else "p2p",
                                       "hierarchical_context_parallel_sizes": None}))
            return
        if name in _ZERO_IS_NONE:
            value = value or None  # 0: every layer of the stage / an even share
        elif value == _ENGINE_DEFAULT:
            value = None
        self.send(SetPlan(changes={name: value}))

    def show(self, state) -> None:
        with self.syncing():
            for name, w in self.controls.items():
                if name == "cp_a2a_group":  # what the user typed, also while it is refused
                    key = "hierarchical_context_parallel_sizes"
                    sizes = state.plan_inputs[key] if key in state.plan_inputs else getattr(state.plan, key)
                    self.set_value(w, sizes[0] if sizes else 0)
                    continue
                value = resolved(state, "plan", name)
                if name in _ZERO_IS_NONE:
                    value = value or 0
                elif name == "zero_stage":
                    value = int(value)
                elif name in ("overlap_comm", "grad_reduce_fp32", "zero_init") and value is None:
                    value = _ENGINE_DEFAULT
                else:
                    value = value.value if hasattr(value, "value") else value
                self.set_value(w, value)
        p = state.plan
        split = ""
        if p.uneven_stages and state.model is not None:
            try:
                layers = p.stage_layers(state.model.num_layers)
                split = f" (layers {layers[0]}" + (f" / {layers[1]}×{len(layers) - 2}" if len(layers) > 2 else "") \
                    + f" / {layers[-1]})"
            except ValueError:
                split = ""
        text = (f"world {p.world_size} = TP {p.tensor_parallel} × PP {p.pipeline_parallel}{split} × "
                + (f"Ulysses {p.ulysses} (all-to-all)" if p.is_ulysses else f"CP {p.context_parallel}")
                + (f" ({p.cp_comm_type})" if p.context_parallel > 1 and str(p.cp_comm_type) != "p2p"
                   and not p.is_ulysses else "")
                + f" × <b>DP {p.data_parallel}</b> · "
                f"{p.num_microbatches} micro-batches of {p.micro_batch_size} per step")
        if state.model is not None and state.model.is_moe:
            text += (f" · experts: <b>EP {p.expert_parallel}</b> ({state.model.num_experts // p.expert_parallel} per "
                     f"rank) × expert TP {p.expert_tensor_parallel_size} × expert DP {p.expert_data_parallel}")
            if p.deepspeed_moe:
                from workbench import dsmoe

                text += (f" · DeepSpeed-MoE: capacity {dsmoe.expert_capacity_of(state.model, p)} tokens per expert "
                         f"(factor {dsmoe.capacity_factor(p):g}, padded)")
            elif p.moe_load_imbalance != 1.0:
                from workbench.encode import moe_token_factor

                text += (f" · busiest EP rank priced at {moe_token_factor(p, state.model):.2f} × the balanced share "
                         f"(load imbalance {p.moe_load_imbalance:g})")
        if p.lora_rank:
            text += f" · LoRA r={p.lora_rank} on {','.join(p.lora_targets)} (base weights frozen)"
        if self.derived.value != text:
            self.derived.value = text
        self.show_error(state)
