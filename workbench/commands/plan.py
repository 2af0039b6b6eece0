"""workbench plan: search every valid parallel plan, rank the ones that fit by step time, explain the winner."""
from __future__ import annotations

import argparse

from workbench.commands.common import (ENGINES, SUB_GROUP_HELP, add_cluster_arguments, add_model_arguments,
                                      check_flag_dependencies, cluster_from_args, elements_type, engine_name,
                                      model_from_args, profile_from_args, working, zero_sizes_from_args)
from workbench.defaults import GiB
from workbench.specs import Implementation, check_float

FIXED_SIZE_FLAGS = {"tp": "tensor-parallel size", "pp": "pipeline-parallel size", "vp": "virtual-pipeline size",
                    "cp": "context-parallel size", "ep": "expert-parallel size", "mbs": "micro batch size",
                    "zero": "ZeRO stage"}
"""``estimate``'s one-plan flags that ``plan`` does not take: it searches each of these itself. Parsed (hidden) so
they are refused by name rather than read as an abbreviation (``--tp`` of ``--tp-comm-overlap``)."""


def add_parser(sub) -> None:
    parser = sub.add_parser("plan", help="rank every valid parallel plan by step time", description=__doc__)
    add_model_arguments(parser)
    add_cluster_arguments(parser)  # --profile: measured rates replace datasheet numbers for every plan
    s = parser.add_argument_group("search")
    s.add_argument("--gbs", type=int, required=True, help="global batch size (sequences per step)")
    s.add_argument("--top", type=int, default=10, help="plans to list (default 10)")
    s.add_argument("--engine", action="append", type=engine_name, metavar="{" + ",".join(ENGINES) + "}",
                   help="engines to search (repeatable; default all three; 'hybrid' is another name for "
                        "megatron-deepspeed)")
    s.add_argument("--headroom", type=float, default=0.05, help="fraction of GPU memory kept free (default 0.05)")
    s.add_argument("--fit-on", choices=["point", "band"], default="point",
                   help="judge a plan's fit on the point estimate of its peak (default; plans that pass only there "
                        "are marked !) or at the held-out error band's upper side, as `estimate` and `advise` judge "
                        "one plan (no ! plan is ranked)")
    s.add_argument("--precision", choices=["bf16", "fp16", "fp32", "fp8"], default="bf16",
                   help="fp8: Transformer Engine FP8 under Megatron-LM (engine megatron only)")
    s.add_argument("--fp8-recipe", choices=["delayed", "tensorwise", "blockwise", "mxfp8"], default=None,
                   help="with --precision fp8: Transformer Engine's scaling recipe (Megatron-LM --fp8-recipe, "
                        "default delayed)")
    s.add_argument("--fp8-param-gather", action="store_true",
                   help="with --precision fp8: plans with the distributed optimizer keep the linear weights in FP8 "
                        "and all-gather them in FP8 (Megatron-LM --fp8-param-gather)")
    s.add_argument("--no-offload", action="store_true",
                   help="do not consider offload (to the CPU, or to NVMe where --nvme-gib declares it)")
    s.add_argument("--cross-node-tp", action="store_true", help="allow tensor parallel beyond one node")
    s.add_argument("--max-cp", type=int, default=None,
                   help="largest context-parallel size (default 16; seq/32768 beyond 512k tokens)")
    s.add_argument("--adam", choices=["fused", "torch"], default="fused",
                   help="GPU optimizer kernel of every plan: fused (Apex/TE or DeepSpeed FusedAdam) or torch "
                        "(torch.optim.AdamW)")
    s.add_argument("--grad-reduce-in-bf16", dest="grad_reduce_fp32", action="store_false", default=None,
                   help="Megatron plans with 16-bit main gradients (Megatron-LM --grad-reduce-in-bf16, megatron-core "
                        "grad_reduce_in_fp32=False); default fp32 with bf16")
    s.add_argument("--cross-entropy-fusion", choices=["none", "native", "te"], default="none",
                   help="the loss kernels of every Megatron plan: none (megatron-core's unfused vocab-parallel cross "
                        "entropy, the default), native (Megatron-LM --cross-entropy-loss-fusion "
                        "--cross-entropy-fusion-impl native) or te (--cross-entropy-fusion-impl te, Transformer "
                        "Engine's parallel_cross_entropy)")
    overlap = s.add_mutually_exclusive_group()
    overlap.add_argument("--overlap-comm", dest="overlap_comm", action="store_true", default=None,
                         help="overlap the gradient reduce with backward (default: each engine's)")
    overlap.add_argument("--no-overlap-comm", dest="overlap_comm", action="store_false")
    tpo = s.add_mutually_exclusive_group()
    tpo.add_argument("--tp-comm-overlap", dest="tp_comm_overlap", action="store_true", default=None,
                     help="Megatron plans with TP > 1 and sequence parallel overlap their TP communication with the "
                          "GEMMs (Transformer Engine userbuffers, Megatron-LM --tp-comm-overlap); default: both searched")
    tpo.add_argument("--no-tp-comm-overlap", dest="tp_comm_overlap", action="store_false",
                     help="no plan uses --tp-comm-overlap")
    s.add_argument("--expandable-segments", action="store_true",
                   help="every plan runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (a smaller allocator "
                        "reserve above the allocated peak); default: PyTorch's default allocator")
    s.add_argument("--no-pin-memory", dest="pin_memory", action="store_false", default=True,
                   help="every plan that offloads to the CPU keeps DeepSpeed's buffers pageable (\"pin_memory\": "
                        "false: less host memory, copies at the host's pageable rate); default: page-locked")
    for flag, dest, what in (("--reduce-bucket-size", "reduce_bucket_size", "reduce_bucket_size"),
                             ("--prefetch-bucket-size", "prefetch_bucket_size", "ZeRO-3's stage3_prefetch_bucket_size"),
                             ("--param-persistence-threshold", "param_persistence_threshold",
                              "ZeRO-3's stage3_param_persistence_threshold")):
        s.add_argument(flag, dest=dest, metavar="N|auto", type=elements_type(flag),
                       help=f"every DeepSpeed plan runs with {what} N elements (5e8 accepted; 'auto': what the "
                            f"Hugging Face Trainer fills in from the hidden size); default DeepSpeed's")
    s.add_argument("--sub-group-size", dest="sub_group_size", metavar="N",
                   type=elements_type("--sub-group-size", auto=False),
                   help="every DeepSpeed ZeRO-3 plan runs with sub_group_size N elements. " + SUB_GROUP_HELP)
    s.add_argument("--moe-load-imbalance", type=float, default=1.0, metavar="F",
                   help="MoE routing load imbalance F: the busiest expert-parallel rank's routed tokens over the mean (default 1.0, balanced); prices that rank's expert activations, expert GEMMs and all-to-all at F x the balanced share. Megatron has no such flag: it is an assumption about the router, not exported")
    s.add_argument("--overlap-moe-expert-parallel-comm", "--moe-overlap-alltoall", dest="moe_overlap_alltoall",
                   action="store_true",
                   help="Megatron plans with expert parallel > 1 overlap the MoE all-to-alls with another "
                        "micro-batch's compute (combined 1F1B), where megatron-core allows it (recompute other than "
                        "full, interleaving with a pipeline); default: off, as in megatron-core")
    s.add_argument("--moe-capacity-factor", "--moe-expert-capacity-factor", dest="moe_capacity_factor", type=float,
                   metavar="F", help="Megatron plans drop tokens beyond F x the average per expert (default "
                                     "dropless; DeepSpeed-MoE plans keep DeepSpeed's own capacity)")
    s.add_argument("--moe-pad-to-capacity", "--moe-pad-expert-input-to-capacity", dest="moe_pad_to_capacity",
                   action="store_true", help="with --moe-capacity-factor: pad every expert's input to its capacity")
    s.add_argument("--lora-rank", type=int, default=0, metavar="R",
                   help="search LoRA fine-tunes of rank R (base weights frozen; DeepSpeed engines)")
    s.add_argument("--lora-targets", metavar="LIST", help="projections with adapters (default q,k,v,o,gate,up,down)")
    s.add_argument("--simulate-allocator", action="store_true",
                   help="re-price the ranked plans (--top) that the allocator replay can run (one GPU; --model "
                        "hf:PATH or a megatron-core model with --attention unfused) with PyTorch's caching allocator "
                        "replayed over their traced steps, as `workbench estimate` does by default: seconds a plan; "
                        "the search itself keeps the constant reserve")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    for dest in FIXED_SIZE_FLAGS:
        parser.add_argument(f"--{dest}", dest=f"fixed_{dest}", default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def check_fixed_sizes(args) -> None:
    """``ValueError`` for a one-plan flag of ``estimate`` (``--tp 2``): ``plan`` searches that size itself."""
    for dest, what in FIXED_SIZE_FLAGS.items():
        value = getattr(args, f"fixed_{dest}", None)
        if value is not None:
            raise ValueError(f"--{dest} {value}: plan searches every {what} itself and takes no fixed one; price "
                             f"one plan with `workbench estimate --{dest} {value} ...`, or narrow the search with "
                             f"--engine")


def engine_specific_flags(args) -> list:
    """``(flag as given, engines whose plans it changes)`` for each search flag given that only some engines
    read: Megatron's main-gradient dtype, loss kernels and TP overlap, tensor parallel across nodes (the DeepSpeed
    engine has no tensor parallel), the largest context-parallel size (Megatron's CP, DeepSpeed-Ulysses)."""
    out = []
    if getattr(args, "grad_reduce_fp32", None) is not None:
        out.append(("--grad-reduce-in-bf16", ("megatron",)))
    if getattr(args, "cross_entropy_fusion", "none") != "none":
        out.append((f"--cross-entropy-fusion {args.cross_entropy_fusion}", ("megatron",)))
    if getattr(args, "tp_comm_overlap", None) is not None:
        out.append(("--tp-comm-overlap" if args.tp_comm_overlap else "--no-tp-comm-overlap", ("megatron",)))
    if getattr(args, "cross_node_tp", False):
        out.append(("--cross-node-tp", ("megatron", "megatron-deepspeed")))
    if getattr(args, "max_cp", None) is not None:
        out.append((f"--max-cp {args.max_cp}", ("megatron", "deepspeed")))
    return out


def searched_engines(requested, model, lora_rank: int) -> tuple:
    """``(engines the search keeps, why some asked for are left out)``: ``--engine`` (default all three), less
    what the planner leaves out for a Hugging Face model (engine deepspeed only) and a LoRA search (no megatron)."""
    from workbench.planner import hf_engines, lora_engines

    engines = tuple(requested) if requested else ENGINES
    why = []
    if model.implementation is Implementation.TRANSFORMERS and tuple(hf_engines(engines)) != engines:
        engines = tuple(hf_engines(engines))
        why.append(f"{model.name} is a Hugging Face model, trained under engine deepspeed only")
    if lora_rank and lora_rank > 0 and tuple(lora_engines(engines)) != engines:
        engines = tuple(lora_engines(engines))
        why.append(f"--lora-rank {lora_rank} searches DeepSpeed engines only")
    return engines, "; ".join(why)


def check_engine_flags(args, model) -> None:
    """``ValueError`` naming a search flag that no engine searched reads (it would be ignored silently), the engines
    it applies to and the engines searched."""
    engines, why = searched_engines(getattr(args, "engine", None), model, getattr(args, "lora_rank", 0) or 0)
    if not engines:
        return  # the search names why nothing is left
    left_out = set(getattr(args, "engine", None) or ENGINES) - set(engines)
    for flag, applies in engine_specific_flags(args):
        if not set(applies) & set(engines):
            name = flag.split()[0]
            todo = f"drop {name}" if set(applies) & left_out else f"add --engine {applies[0]} or drop {name}"
            raise ValueError(f"{flag} applies to engine {' or '.join(applies)} only; the engines searched are "
                             f"{', '.join(engines)}{' (' + why + ')' if why else ''}: {todo}")


def replayed_ranks(args, result, profile) -> tuple:
    """``--simulate-allocator``: :func:`workbench.planner.replay_ranked` over the listed plans, the model's
    ``--model hf:PATH`` config imported once (refused when flags changed the model from it)."""
    from workbench.allocsim import check_config_model, is_megatron
    from workbench.planner import replay_ranked

    model = result.model
    hf_path = str(args.model or "").startswith("hf:")
    given = True
    if not is_megatron(model) and hf_path:
        from workbench.hf import import_hf

        given = import_hf(args.model[3:], seq_length=model.seq_length)
        check_config_model(model, given.spec)
    return replay_ranked(result, given, has_config=hf_path, limit=args.top, profile=profile)


def replay_lines(rows: tuple) -> list:
    """The table's section for ``--simulate-allocator``: each listed plan's replayed peak and verdict."""
    lines = ["", "allocator replayed over the ranked plans' traced steps (--simulate-allocator)"]
    for r in rows:
        constant = f"constant reserve: {r.constant_peak_bytes / GiB:.1f} GiB"
        if r.skipped is not None:
            lines.append(f"  #{r.rank:<3} not replayed ({r.skipped}); {constant}")
            continue
        verdict = ("fits" if r.fits and not r.risky else
                   "fits on the replayed peak, not at its band's upper side (+"
                   f"{r.band_high_bytes / GiB:.1f} GiB): keep margin" if r.fits else
                   "DOES NOT FIT within the headroom")
        lines.append(f"  #{r.rank:<3} peak {r.peak_bytes / GiB:.1f} GiB ({constant}): {verdict}")
    return lines


def _offload(p) -> str:
    """The offload column: ``opt`` / ``par`` in host memory, ``optN`` / ``parN`` swapped to NVMe (ZeRO-Infinity)."""
    parts = [name + ("N" if nvme else "") for name, on, nvme in (
        ("opt", str(p.offload_optimizer) != "none", p.nvme_optimizer),
        ("par", str(p.offload_params) != "none", p.nvme_params)) if on]
    return "+".join(parts) or "-"


def _cp(p) -> str:
    """CP size, with the exchange when it is not the ring: ``4a`` all-to-all, ``4g`` all-gather, ``4h`` a2a+p2p."""
    kind = str(p.cp_comm_type)
    if p.is_ulysses:
        return f"{p.context_parallel}u"
    return f"{p.context_parallel}" + ({"a2a": "a", "all_gather": "g", "a2a+p2p": "h"}.get(kind, "")
                                      if p.context_parallel > 1 else "")


def _ep(p) -> str:
    """Expert parallel, with the expert TP after a slash where it differs from TP (``8/1``) and ``+`` where the
    all-to-alls overlap compute (``8+``)."""
    te = p.expert_tensor_parallel_size
    return (f"{p.expert_parallel}" + (f"/{te}" if te != p.tensor_parallel else "")
            + ("+" if p.moe_overlap_alltoall else ""))


def _row(i, r, moe: bool = False) -> str:
    p = r.plan
    return (f"{i:>3}{'!' if r.risky else ' '}{str(p.engine):<18} {p.tensor_parallel:>3} {p.pipeline_parallel:>3} {p.virtual_pipeline:>2} "
            f"{_cp(p):>3}" + (f" {_ep(p):>5}" if moe else "") + f" {p.data_parallel:>6} "
            f"{('y+' if p.tp_comm_overlap else 'y') if p.sequence_parallel else '-':>2} "
            f"{(('do' if p.distributed_optimizer else '-') if p.engine.value == 'megatron' else int(p.zero_stage)):>4} "
            f"{_offload(p):>6} "
            f"{_recompute_text(p):<9} {p.micro_batch_size:>4} {p.gradient_accumulation_steps:>5} "
            f"{r.peak_bytes / GiB:>7.1f} {r.step_seconds:>9.3f} {r.tokens_per_second:>12,.0f} {r.mfu:>6.1%}")


_HEADER = ("  # engine              TP  PP  v  CP     DP SP ZeRO offld  recompute  mbs   acc  GiB/GPU    s/step "
           "    tokens/s    MFU")
_HEADER_MOE = _HEADER.replace("  CP     DP", "  CP    EP     DP")
"""With an MoE model: the expert-parallel column (EP, or EP/expert TP where the expert TP differs from TP)."""


PARETO_ROWS = 8
"""Pareto plans printed at most (the fastest, the one with most memory left, and evenly spaced ones between)."""


def pareto_rows(count: int, limit: int = PARETO_ROWS) -> list:
    """Indices of the Pareto plans to print: all when they fit in ``limit``, else ``limit`` spread evenly from the
    first (fastest) to the last (most memory left)."""
    if count <= limit:
        return list(range(count))
    return sorted({round(k * (count - 1) / (limit - 1)) for k in range(limit)})


def render(result) -> str:
    c, m = result.cluster, result.model
    lines = [f"{m.name} (seq {m.seq_length}, {m.attention} attention) on {c.num_nodes} x {c.gpus_per_node} x {c.gpu.name} "
             f"({c.gpu.memory_gib:.1f} GiB), global batch {result.global_batch_size}: {result.evaluated:,} plans "
             f"evaluated, {result.feasible:,} fit with {result.headroom:.0%} headroom"
             f"{' at the error band' + chr(39) + 's upper side' if result.fit_on == 'band' else ''} "
             f"({result.elapsed_seconds:.2f} s, {result.plans_per_second:,.0f} plans/s)"]
    if result.profile and result.profile.get("name"):
        lines.append(result.profile["note"])
    moe = m.is_moe
    header = _HEADER_MOE if moe else _HEADER
    lines += ["", "ranked by step time",
             header]
    lines += [_row(i + 1, r, moe) for i, r in enumerate(result.ranked)]
    shown = pareto_rows(len(result.pareto))
    more = (f": {len(shown)} of its {len(result.pareto)} plans, spread from fastest to most memory left "
            f"(--json lists all)" if len(shown) < len(result.pareto) else "")
    lines += ["", f"Pareto front (tokens/s vs memory headroom){more}", header]
    lines += [_row(i + 1, result.pareto[i], moe) for i in shown]
    if any(r.risky for r in (*result.ranked, *result.pareto)):
        lines += ["", f"!: fits on the point estimate of memory only ({result.risky:,} of the {result.feasible:,} plans "
                      f"that fit); at the upper side of the held-out error band it passes the {result.headroom:.0%} "
                      f"headroom: keep margin or take the next plan"]
    if any(_cp(r.plan)[-1].isalpha() for r in (*result.ranked, *result.pareto)):
        lines += ["", "CP: the ring (p2p) unless marked a (all-to-all, --cp-comm-type a2a), g (all_gather), "
                      "h (a2a+p2p), u (DeepSpeed-Ulysses, --ulysses)"]
    if any(r.plan.moe_overlap_alltoall for r in (*result.ranked, *result.pareto)):
        lines += ["", "EP 8+: the MoE all-to-alls overlapped with another micro-batch's compute "
                      "(--overlap-moe-expert-parallel-comm)"]
    if any(r.plan.tp_comm_overlap for r in (*result.ranked, *result.pareto)):
        lines += ["", "SP y+: sequence parallel with Transformer Engine's TP communication overlap (--tp-comm-overlap)"]
    offloading = ([(f"#{i + 1}", r) for i, r in enumerate(result.ranked) if _offload(r.plan) != "-"]
                  + [(f"Pareto #{i + 1}", result.pareto[i]) for i in shown if _offload(result.pareto[i].plan) != "-"])
    if offloading:
        lines += ["", f"host memory per node of the offloading rows (the ranks' processes with what they offload, "
                      f"of {c.host_memory_gib_per_node:.0f} GiB): "
                      + ", ".join(f"{label} {r.host_bytes_per_node / GiB:.1f} GiB" for label, r in offloading)]
    on_nvme = [(label, r) for label, r in offloading if r.plan.nvme_optimizer or r.plan.nvme_params]
    if on_nvme:
        lines += ["", f"offld optN / parN: the optimizer / parameters swapped to NVMe (ZeRO-Infinity) at "
                      f"{c.nvme_read_gb_per_s:g} GB/s read, {c.nvme_write_gb_per_s:g} GB/s write per node; NVMe per "
                      f"node of those rows (of {c.nvme_gib_per_node:g} GiB, --nvme-gib): "
                      + ", ".join(f"{label} {r.nvme_bytes_per_node / GiB:.1f} GiB" for label, r in on_nvme)]
    lines += ["", result.explanation]
    return "\n".join(lines)


def run(args) -> int:
    from workbench.cli import print_json
    from workbench.planner import ENGINES, search

    if args.top < 1:
        raise ValueError(f"--top {args.top} must be >= 1")
    check_fixed_sizes(args)
    check_flag_dependencies(args)
    model = model_from_args(args)
    check_engine_flags(args, model)
    check_float("moe_load_imbalance", args.moe_load_imbalance, minimum=1.0, strict=False)
    if not model.is_moe and args.moe_load_imbalance != 1.0:  # as `estimate` refuses it: nothing would price it
        raise ValueError(f"moe_load_imbalance={args.moe_load_imbalance:g} needs a mixture-of-experts model "
                         f"({model.name} has num_experts={model.num_experts})")
    cluster = cluster_from_args(args)
    profile = profile_from_args(args)
    with working(f"plan: searching plans for {cluster.world_size:,} GPUs"):  # stderr, only if it takes > 1 s
        result = search(model, cluster, global_batch_size=args.gbs, top=args.top, headroom=args.headroom,
                        engines=tuple(args.engine) if args.engine else ENGINES, precision=args.precision,
                        offload=not args.no_offload, allow_cross_node_tp=args.cross_node_tp,
                        max_context_parallel=args.max_cp, lora_rank=args.lora_rank,
                        **({"lora_targets": args.lora_targets} if args.lora_targets else {}), adam=args.adam,
                        overlap_comm=args.overlap_comm, profile=profile,
                        fp8_recipe=args.fp8_recipe or "delayed", fp8_param_gather=args.fp8_param_gather,
                        grad_reduce_fp32=args.grad_reduce_fp32, expandable_segments=args.expandable_segments,
                        moe_load_imbalance=args.moe_load_imbalance, tp_comm_overlap=args.tp_comm_overlap,
                        cross_entropy_fusion=args.cross_entropy_fusion, fit_on=args.fit_on,
                        moe_overlap_alltoall=args.moe_overlap_alltoall, moe_capacity_factor=args.moe_capacity_factor,
                        moe_pad_to_capacity=args.moe_pad_to_capacity, pin_memory=args.pin_memory,
                        **zero_sizes_from_args(args, model))
    replayed = replayed_ranks(args, result, profile) if args.simulate_allocator else None
    if args.json:
        out = result.to_dict()
        if replayed is not None:
            out["allocator_replay"] = [r.to_dict() for r in replayed]
        print_json(out)
    else:
        print(render(result) + ("\n" + "\n".join(replay_lines(replayed)) if replayed is not None else ""))
    return 0


def _recompute_text(p) -> str:
    """The recompute column: the mode, and ``/N`` when only N layers per stage are recomputed (a transformers
    model's every_n_layers, Megatron's --recompute-num-layers)."""
    return str(p.recompute) + (f"/{p.recompute_layers}" if p.recompute_layers is not None else "")
