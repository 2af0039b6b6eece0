"""The workbench against published large training runs, each with its exact layout.

Reads ``benchmarks/published_runs.json`` (every case with its source: paper or document, table, URL, date read, and
what the source leaves unstated and the case had to assume) and prints, per case, the published and the predicted
step time and throughput in the source's own metric (tokens/s per GPU, TFLOP/s per GPU or MFU), their ratio, the MFU
both ways (workbench FLOP count over the BF16/FP16 dense peak), the predicted peak memory (no source reports memory),
and where the published layout ranks among the planner's plans for the same model, cluster, batch and precision.
Cases the workbench cannot express yet (FP8 training, expert parallelism) print ``not modelled: needs ...``.

Published step seconds are recovered from each source's metric with that source's FLOP formula:
``tokens_per_second_per_gpu``: global batch × sequence ÷ (tokens/s/GPU × GPUs);
``hardware_tflops_per_gpu`` (Narayanan et al. 2021, full recompute): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h));
``mfu`` (Megatron-LM / Korthikanti et al. 2022, model FLOPs): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) over the peak;
``model_tflops_per_gpu`` (a source without its formula): the workbench's model FLOPs (:func:`workbench.flops.step_flops`).

    python benchmarks/bench_published.py               # the table, then the summary
    python benchmarks/bench_published.py --no-planner  # without the planner ranks (faster)
    python benchmarks/bench_published.py --markdown    # the table as Markdown
    python benchmarks/bench_published.py --write-readme  # put the table and summary into README.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench import catalog  # noqa: E402
from workbench.defaults import GiB  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.memory import plan_overheads  # noqa: E402
from workbench.planner import DEFAULT_HEADROOM  # noqa: E402
from workbench.flops import flops_per_second_per_gpu, step_flops  # noqa: E402
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, Precision  # noqa: E402

DATA = Path(__file__).with_name("published_runs.json")
README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Checked against published runs"
TARGET = 0.10
"""The accuracy asked of the time model on these cases: predicted step time within 10 % of the published one."""
TOP = 5
"""The published layout should be among the planner's first five plans."""


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text())


def missing_features(case: dict) -> list:
    """What the workbench lacks to express ``case`` (``[]``: it can)."""
    lay = case["layout"]
    out = []
    if lay.get("precision") == "fp8" and "fp8" not in {p.value for p in Precision}:
        out.append("fp8")
    if lay.get("ep", 1) > 1 and "expert_parallel" not in {f.name for f in fields(ParallelPlan)}:
        out.append("ep")
    return out


def specs(case: dict):
    """``(model, cluster, plan)`` of a case."""
    m = case["model"]
    model = catalog.model(m) if isinstance(m, str) else ModelSpec(**m)
    if case.get("seq"):
        model = model.replace(seq_length=case["seq"])
    if case.get("model_overrides"):
        model = model.replace(**case["model_overrides"])
    per_node = min(8, case["gpus"])
    cluster = ClusterSpec(gpu=catalog.gpu(case["gpu"]), gpus_per_node=per_node, num_nodes=case["gpus"] // per_node)
    lay = case["layout"]
    kw = dict(world_size=case["gpus"], engine=lay["engine"], tensor_parallel=lay.get("tp", 1),
              pipeline_parallel=lay.get("pp", 1), virtual_pipeline=lay.get("vp", 1),
              context_parallel=lay.get("cp", 1), sequence_parallel=lay.get("sp", False),
              distributed_optimizer=lay.get("dist_opt", False), recompute=lay["recompute"],
              micro_batch_size=lay["mbs"], global_batch_size=lay["gbs"], precision=lay["precision"],
              embedding_in_pipeline_split=lay.get("emb_split", False), loss_in_pipeline_split=lay.get("loss_split", False))
    if lay.get("cp_comm"):  # how CP exchanges K/V where the source says (Megatron --cp-comm-type)
        kw["cp_comm_type"] = lay["cp_comm"]
    if lay.get("fp8_recipe"):
        kw["fp8_recipe"] = lay["fp8_recipe"]
    if lay.get("fp8_param_gather"):  # the recipe keeps the linear weights only in FP8 (fp8_param_gather / fp8_param)
        kw["fp8_param_gather"] = True
    if lay.get("grad_reduce_fp32") is not None:  # Megatron's main-gradient dtype where the recipe sets it
        kw["grad_reduce_fp32"] = lay["grad_reduce_fp32"]
    if lay.get("cross_entropy_fusion"):  # the recipe's loss kernels (--cross-entropy-fusion-impl)
        kw["cross_entropy_fusion"] = lay["cross_entropy_fusion"]
    if lay.get("ep", 1) > 1:
        kw["expert_parallel"] = lay["ep"]
    if lay.get("tp_comm_overlap"):  # the recipe overlaps the TP collectives with the GEMMs (TE userbuffers)
        kw["tp_comm_overlap"] = True
    if lay.get("moe_a2a_overlap"):  # the recipe overlaps the dispatch/combine all-to-alls (combined 1F1B)
        kw["moe_overlap_alltoall"] = True
    if lay.get("moe_capacity_factor") is not None:  # token drop: each expert takes at most its capacity
        kw["moe_capacity_factor"] = lay["moe_capacity_factor"]
        kw["moe_pad_to_capacity"] = bool(lay.get("moe_pad_to_capacity", False))
    if lay.get("etp") is not None:
        kw["expert_tensor_parallel"] = lay["etp"]
    return model, cluster, ParallelPlan(**kw)


def megatron_flops(model: ModelSpec, plan: ParallelPlan, *, hardware: bool) -> float:
    """FLOPs of one step in Narayanan et al. 2021's closed form (GPT layers, non-causal attention): model FLOPs
    72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)); with ``hardware`` (full recompute) 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    B, s, l, h, V = plan.global_batch_size, model.seq_length, model.num_layers, model.hidden_size, model.vocab_size
    if hardware:
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def published_step_seconds(case: dict, model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> float:
    """The published step time, recovered from the source's metric (see the module docstring)."""
    pub, gpus = case["published"], case["gpus"]
    metric, value = pub["metric"], float(pub["value"])
    if metric == "tokens_per_second_per_gpu":
        return plan.global_batch_size * model.seq_length / (value * gpus)
    if metric == "hardware_tflops_per_gpu":
        return megatron_flops(model, plan, hardware=True) / (value * 1e12 * gpus)
    if metric == "mfu":
        return megatron_flops(model, plan, hardware=False) / (value * cluster.gpu.peak_flops(plan.precision) * gpus)
    if metric == "model_tflops_per_gpu":
        return step_flops(model, plan)["model"] / (value * 1e12 * gpus)
    raise ValueError(f"published metric={metric!r} is not one of tokens_per_second_per_gpu, hardware_tflops_per_gpu, "
                     f"mfu, model_tflops_per_gpu")


@dataclass(frozen=True)
class Row:
    case: dict
    missing: tuple
    published_step_seconds: float = 0.0
    predicted_step_seconds: float = 0.0
    published_mfu: float = 0.0
    predicted_mfu: float = 0.0
    peak_gib: float = 0.0
    capacity_gib: float = 0.0
    memory: Optional[dict] = None
    """Where the predicted peak comes from (:func:`memory_attribution`)."""
    rank: Optional[object] = None
    feature_rank: Optional[object] = None
    """The rank among plans with only the features the run had (``features`` of the case or its source), if given."""

    @property
    def modelled(self) -> bool:
        return not self.missing

    @property
    def ratio(self) -> float:
        """Predicted over published step time (> 1: the workbench predicts a slower step)."""
        return self.predicted_step_seconds / self.published_step_seconds

    @property
    def predicted_metric(self) -> float:
        """The prediction in the source's metric (the published value scaled by the step-time ratio)."""
        return float(self.case["published"]["value"]) / self.ratio


def run_features(case: dict) -> dict:
    """The features the run had, where its case or source limits them (``{}``: the planner's full search applies):
    ``engines``, ``recompute``, ``sequence_parallel``, ``distributed_optimizer`` for :func:`workbench.planner.
    rank_plan`, with a ``label`` and the ``why`` (the source of the limit)."""
    if "features" in case:
        return case["features"]
    return (load().get("sources", {}).get(case["source"]) or {}).get("features", {})


def memory_attribution(plan: ParallelPlan, cluster: ClusterSpec, mem) -> dict:
    """The predicted peak of the rank that peaks (``mem``: a :class:`~workbench.memory_types.MemoryEstimate`) split
    by where each part comes from, in bytes: ``allocated`` (weights, gradients, optimizer, activations, buffers: the
    terms built from the frameworks' sources, what ``torch.cuda.max_memory_allocated`` would report), ``outside``
    (memory outside PyTorch's caching allocator: the engine's one-process median plus its NCCL figure with more than
    one rank, :data:`workbench.memory.OUTSIDE_ALLOCATOR_BYTES` / :data:`~workbench.memory.NCCL_BYTES_BY_ENGINE`,
    measured on H200 with two ranks), ``reserve`` (the caching allocator's reserve above the allocated peak, a
    fraction of it: the median of the H200 fit runs, :data:`workbench.memory.RESERVE_FRACTION`) and ``limit`` (what
    the planner's default headroom leaves of the GPU)."""
    over = mem.breakdown.overhead
    own = plan_overheads(plan)
    outside = float(own["context_bytes"]) + (float(own["nccl_bytes"]) if cluster.world_size > 1 else 0.0)
    return {"allocated": float(mem.per_gpu_peak_bytes - over), "outside": outside, "reserve": float(over) - outside,
            "reserve_fraction": float(own["reserve_fraction"]), "peak": float(mem.per_gpu_peak_bytes),
            "limit": (1.0 - DEFAULT_HEADROOM) * cluster.gpu.memory_bytes, "stage": mem.peak_stage.stage,
            "terms": {k: float(v) for k, v in mem.breakdown.as_dict().items() if k != "overhead"}}


def evaluate_case(case: dict, *, planner: bool = True) -> Row:
    missing = tuple(missing_features(case))
    if missing:
        return Row(case=case, missing=missing)
    model, cluster, plan = specs(case)
    est = estimate(model, cluster, plan, checks=False)
    pub_step = published_step_seconds(case, model, cluster, plan)
    flops = step_flops(model, plan)["model"]
    peak = cluster.gpu.peak_flops("bf16" if plan.precision == "fp8" else plan.precision)
    rank = feature_rank = None
    if planner:
        from workbench.planner import rank_plan

        rank = rank_plan(model, cluster, plan)
        feats = run_features(case)
        if feats:
            feature_rank = rank_plan(model, cluster, plan, **{k: v for k, v in feats.items()
                                                               if k not in ("label", "why")})
    return Row(case=case, missing=(), published_step_seconds=pub_step, predicted_step_seconds=est.time.step_seconds,
               published_mfu=flops_per_second_per_gpu(flops, pub_step, cluster.world_size) / peak,
               predicted_mfu=flops_per_second_per_gpu(flops, est.time.step_seconds, cluster.world_size) / peak,
               peak_gib=est.memory.peak_stage.total_bytes / GiB, capacity_gib=cluster.gpu.memory_bytes / GiB, rank=rank,
               feature_rank=feature_rank, memory=memory_attribution(plan, cluster, est.memory))


_UNITS = {"tokens_per_second_per_gpu": "tok/s/GPU", "hardware_tflops_per_gpu": "TFLOP/s/GPU (hw)",
          "mfu": "MFU", "model_tflops_per_gpu": "TFLOP/s/GPU"}


def _fmt(metric: str, value: float) -> str:
    return f"{value:.1%}" if metric == "mfu" else f"{value:,.0f}"


def layout_text(case: dict) -> str:
    lay = case["layout"]
    bits = [f"{case['gpus']}×{case['gpu']}", f"TP{lay.get('tp', 1)}", f"PP{lay.get('pp', 1)}"]
    bits += [f"{k.upper()}{lay[k]}" for k in ("vp", "cp", "ep") if lay.get(k, 1) > 1]
    bits += [f"mbs{lay['mbs']}", f"gbs{lay['gbs']}", lay["precision"]]
    if lay["recompute"] != "none":
        bits.append(f"rc={lay['recompute']}")
    return " ".join(bits)


def _one_rank(r) -> str:
    if r.rank is not None:
        return f"{r.rank} of {r.feasible}" + (" (risky)" if r.risky else "")
    if not r.in_search_space:
        return "not searched"
    return f"no fit (+{r.result.peak_bytes / GiB - (1 - DEFAULT_HEADROOM) * r.result.capacity_bytes / GiB:.1f} GiB)"


def rank_text(row: Row) -> str:
    if row.rank is None:
        return "-"
    text = _one_rank(row.rank)
    if row.feature_rank is not None:
        text += f"; {run_features(row.case)['label']}: {_one_rank(row.feature_rank)}"
    return text


def table_lines(rows: list, *, markdown: bool = False) -> list:
    head = ["case", "layout", "metric", "published", "predicted", "step pub s", "step pred s", "ratio", "MFU pub",
            "MFU pred", "peak GiB", "plan rank"]
    body = []
    for row in rows:
        c = row.case
        metric = c["published"]["metric"]
        if not row.modelled:
            body.append([c["id"], layout_text(c), _UNITS[metric], _fmt(metric, c["published"]["value"]),
                         f"not modelled: needs {'/'.join(row.missing)}", "", "", "", "", "", "", ""])
            continue
        body.append([c["id"], layout_text(c), _UNITS[metric], _fmt(metric, c["published"]["value"]),
                     _fmt(metric, row.predicted_metric), f"{row.published_step_seconds:.2f}",
                     f"{row.predicted_step_seconds:.2f}", f"{row.ratio:.2f}", f"{row.published_mfu:.1%}",
                     f"{row.predicted_mfu:.1%}", f"{row.peak_gib:.0f}/{row.capacity_gib:.0f}", rank_text(row)])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(b) + " |" for b in body]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in [head] + body]


def summary_lines(rows: list) -> list:
    done = [r for r in rows if r.modelled]
    out = []
    skipped = [r for r in rows if not r.modelled]
    if skipped:
        out.append(f"not modelled: {len(skipped)} of {len(rows)} cases ("
                   + ", ".join(sorted({"/".join(r.missing) for r in skipped})) + ")")
    if not done:
        return out
    errs = [abs(r.ratio - 1) for r in done]
    worst = max(done, key=lambda r: abs(r.ratio - 1))
    within = sum(e <= TARGET for e in errs)
    out.append(f"step time, {len(done)} cases: median |error| {statistics.median(errs):.1%}, worst "
               f"{abs(worst.ratio - 1):.1%} ({worst.case['id']}), within {TARGET:.0%}: {within} of {len(done)}")
    by_source = {}
    for r in done:
        by_source.setdefault(r.case["source"], []).append(abs(r.ratio - 1))
    for src, e in by_source.items():
        out.append(f"  {src}: {len(e)} cases, median {statistics.median(e):.1%}, worst {max(e):.1%}, "
                   f"within {TARGET:.0%}: {sum(x <= TARGET for x in e)}")
    ranked = [r for r in done if r.rank is not None]
    if ranked:
        top = sum(r.rank.rank is not None and r.rank.rank <= TOP for r in ranked)
        strict = sum(r.rank.rank_within_band is not None and r.rank.rank_within_band <= TOP for r in ranked)
        out.append(f"planner: published layout in the top {TOP} for {top} of {len(ranked)} cases (memory judged on the "
                   f"point estimate; {strict} of {len(ranked)} if plans that pass the headroom at the held-out error "
                   f"band's upper side were excluded)")
        limited = [r for r in ranked if r.feature_rank is not None]
        if limited:
            out.append(f"  with only the features the run had ({len(limited)} cases: "
                       + ", ".join(sorted({run_features(r.case)['label'] for r in limited})) + "): top "
                       f"{TOP} for {sum(r.feature_rank.rank is not None and r.feature_rank.rank <= TOP for r in limited)}"
                       f" of {len(limited)}")
        for src in by_source:
            rs = [r for r in ranked if r.case["source"] == src]
            out.append(f"  {src}: top {TOP} {sum(r.rank.rank is not None and r.rank.rank <= TOP for r in rs)} of "
                       f"{len(rs)}; not fitting {sum(r.rank.in_search_space and not r.rank.fits for r in rs)}, ranked "
                       f"below {TOP} {sum(r.rank.rank is not None and r.rank.rank > TOP for r in rs)}, not searched "
                       f"{sum(not r.rank.in_search_space for r in rs)}")
    return out + release_spread_lines(rows)


RECIPE_SWITCHES = ("fp8_param_gather", "tp_comm_overlap", "moe_a2a_overlap", "moe_capacity_factor", "moe_pad_to_capacity")
"""Layout keys that are recipe switches rather than the layout: rows differing only in them are still one run
(model, GPUs, parallel sizes, batch), and the spread line names the switches that changed between releases."""


def _same_run_key(case: dict) -> str:
    """What makes two published rows the same run: the model (by name), the GPUs and the whole layout but its
    :data:`RECIPE_SWITCHES`."""
    m = case["model"]
    layout = {k: v for k, v in case["layout"].items() if k not in RECIPE_SWITCHES}
    return json.dumps([m if isinstance(m, str) else m.get("name"), case.get("seq"), case["gpu"], case["gpus"],
                       layout], sort_keys=True)


def _switches_text(rs: list) -> str:
    """``; recipe differs: moe_a2a_overlap on in bridge-25.11`` where the rows of one run differ in a recipe switch."""
    bits = []
    for k in RECIPE_SWITCHES:
        on = [r.case["source"] for r in rs if r.case["layout"].get(k)]
        if on and len(on) < len(rs):
            bits.append(f"{k} on in {', '.join(on)}")
    return f"; recipe differs: {'; '.join(bits)}" if bits else ""


def release_spread_lines(rows: list) -> list:
    """One line per run that several sources (releases of one table) publish with the same model, GPUs and layout:
    the lowest and highest published step and the predicted one. The spread is how far the published number moved
    with the software alone, a floor under the accuracy any model of the hardware can show on that run."""
    groups = {}
    for r in rows:
        if r.modelled:
            groups.setdefault(_same_run_key(r.case), []).append(r)
    out = []
    for rs in groups.values():
        if len({r.case["source"] for r in rs}) < 2:
            continue
        fast, slow = min(rs, key=lambda r: r.published_step_seconds), max(rs, key=lambda r: r.published_step_seconds)
        metric = fast.case["published"]["metric"]
        m = fast.case["model"]
        out.append(f"  {m if isinstance(m, str) else m.get('name')} {layout_text(fast.case)}: published {_fmt(metric, fast.case['published']['value'])} "
                   f"({fast.case['source']}) to {_fmt(metric, slow.case['published']['value'])} "
                   f"({slow.case['source']}) {_UNITS[metric]}, ×{slow.published_step_seconds / fast.published_step_seconds:.2f} "
                   f"in step time; predicted {_fmt(metric, fast.predicted_metric)}{_switches_text(rs)}")
    if out:
        out.insert(0, "same run published by several releases (the software alone moved it):")
    return out


def why_lines(rows: list) -> list:
    """For each case whose layout the planner does not put in its top 5: the reason, from the planner itself."""
    out = []
    for r in rows:
        if r.rank is None or (r.rank.rank is not None and r.rank.rank <= TOP):
            continue
        lines = [x for x in r.rank.explanation.splitlines() if not x.startswith(("Fastest:", "Memory:"))]
        f = r.feature_rank
        if f is not None:
            label = run_features(r.case)["label"]
            lines.append(f"With {label} only: rank {f.rank}." if f.rank is not None and f.rank <= TOP else
                         f"With {label} only: " + " ".join(x for x in f.explanation.splitlines()
                                                            if not x.startswith(("Fastest:", "Memory:"))))
        out.append(f"{r.case['id']}: " + " ".join(lines))
    return out


def over_limit(row: Row) -> bool:
    """The case's predicted peak passes what the planner's default headroom leaves of the GPU."""
    return row.memory is not None and row.memory["peak"] > row.memory["limit"]


def memory_lines(rows: list) -> list:
    """For each case whose predicted peak passes the headroom: the peak split into the allocated terms (from the
    frameworks' sources), memory outside the allocator and the allocator's reserve (both measured constants), with
    the case's ``memory_note`` (the term-by-term audit against the sources, in ``published_runs.json``); then how
    many of those verdicts the measured constants alone decide."""
    over = [r for r in rows if over_limit(r)]
    if not over:
        return []
    out = []
    for r in over:
        m = {k: r.memory[k] / GiB for k in ("allocated", "outside", "reserve", "peak", "limit")}
        terms = ", ".join(f"{k} {v / GiB:.1f}" for k, v in r.memory["terms"].items() if v >= 0.05 * GiB)
        line = (f"{r.case['id']}: peak {m['peak']:.1f} GiB (stage {r.memory['stage']}) over the {m['limit']:.1f} GiB "
                f"limit = allocated {m['allocated']:.1f} ({terms}) + outside the allocator "
                f"{m['outside']:.1f} + allocator reserve {m['reserve']:.1f} ({r.memory['reserve_fraction']:.1%} of "
                f"allocated); allocated alone "
                + (f"leaves {m['limit'] - m['allocated']:.1f} GiB" if m["allocated"] <= m["limit"]
                   else f"passes it by {m['allocated'] - m['limit']:.1f} GiB"))
        if r.case.get("memory_note"):
            line += ". " + r.case["memory_note"]
        out.append(line)
    alone = sum(r.memory["allocated"] <= r.memory["limit"] for r in over)
    with_outside = sum(r.memory["allocated"] + r.memory["outside"] <= r.memory["limit"] for r in over)
    out.append(f"of the {len(over)} layouts over the limit, the allocated terms alone fit {alone}; with the memory "
               f"outside the allocator {with_outside}: the rest of the verdict is the allocator reserve (a median "
               f"fraction of H200 megatron-core runs without Transformer Engine; a reserve is a requirement, not "
               f"slack: capped-allocator runs of the corpus, group pressure, ran out of memory)")
    return out


def write_readme(rows: list, path: Path = README) -> None:
    """Replace the table and the summary block of README's "Checked against published runs" section with the
    benchmark's current output (the prose around them stays)."""
    text = path.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    section = text[start:end]
    lines = section.split("\n")
    first = next(i for i, ln in enumerate(lines) if ln.startswith("| case |"))
    last = first
    while last + 1 < len(lines) and lines[last + 1].startswith("|"):
        last += 1
    lines[first:last + 1] = table_lines(rows, markdown=True)
    section = "\n".join(lines)
    a = section.index("```\n") + 4
    b = section.index("```", a)
    section = section[:a] + "\n".join(summary_lines(rows)) + "\n" + section[b:]
    path.write_text(text[:start] + section + text[end:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-planner", action="store_true", help="skip the planner ranks")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--case", action="append", help="only these case ids (repeatable)")
    ap.add_argument("--write-readme", action="store_true", help="write the table and summary into README.md")
    args = ap.parse_args(argv)
    data = load()
    cases = [c for c in data["cases"] if not args.case or c["id"] in args.case]
    rows = [evaluate_case(c, planner=not args.no_planner) for c in cases]
    if args.write_readme:
        if args.case or args.no_planner:
            ap.error("--write-readme needs every case and the planner ranks")
        write_readme(rows)
    for line in table_lines(rows, markdown=args.markdown):
        print(line)
    print()
    for line in summary_lines(rows):
        print(line)
    mem = memory_lines(rows)
    if mem:
        print("\nlayouts predicted over the memory limit, where the peak comes from:")
        for line in mem:
            print("  " + line)
    why = why_lines(rows)
    if why:
        print("\nwhy the planner prefers another layout:")
        for line in why:
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
