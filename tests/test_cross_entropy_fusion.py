"""Megatron's fused cross entropy (``ParallelPlan.cross_entropy_fusion``, ``--cross-entropy-fusion``): bytes per logit
kept and moved by each implementation, refusals, the last stage's memory and the loss time it changes, export /
import, CLI, run store, planner column and the published recipes that run it."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import planner
from workbench import memory as M
from workbench import timing as T
from workbench.commands.common import plan_from_args
from workbench.configs.importer import import_megatron_args
from workbench.configs.megatron import megatron_args
from workbench.estimate import estimate
from workbench.runs.specio import specs_from_dict, specs_to_dict
from workbench.specs import CrossEntropyFusion, ParallelPlan

from test_tp_overlap import H100, LLAMA, _plan  # the same 16 x H100 Llama-3-8B Megatron plan (seq 8192, vocab 128256)


def test_bytes_per_logit_kept_by_each_implementation():
    # none / native: the 16-bit logits beside the fp32 softmax; te: only the 16-bit logits (gradient in place)
    assert [float(M.megatron_loss_bytes_per_logit(c, 2)) for c in (0, 1, 2)] == [6.0, 6.0, 2.0]
    assert [float(M.megatron_loss_bytes_per_logit(c, 4)) for c in (0, 1, 2)] == [8.0, 8.0, 4.0]
    assert M.megatron_loss_bytes_per_logit(np.array([0, 2, 1]), 2).tolist() == [6, 2, 6]


def test_hbm_bytes_per_logit_of_each_implementation():
    got = [tuple(float(x) for x in T.cross_entropy_bytes(bytes_per_value=2, cross_entropy_fusion=c)) for c in (0, 1, 2)]
    assert got == [(40.0, 18.0), (24.0, 14.0), (8.0, 8.0)]
    assert tuple(float(x) for x in T.cross_entropy_bytes(bytes_per_value=2)) == (40.0, 18.0)  # default: unfused


def test_parse_and_refusals():
    assert _plan(cross_entropy_fusion="TE").cross_entropy_fusion is CrossEntropyFusion.TE
    assert _plan().cross_entropy_fusion is CrossEntropyFusion.NONE
    with pytest.raises(ValueError, match=r"cross_entropy_fusion='fused' is not one of: none, native, te"):
        _plan(cross_entropy_fusion="fused")
    with pytest.raises(ValueError, match=r"cross_entropy_fusion='te' is megatron-core's fused loss .* needs engine "
                                         r"'megatron'; engine='deepspeed' computes its own loss"):
        ParallelPlan(world_size=8, engine="deepspeed", zero_stage=2, cross_entropy_fusion="te")
    with pytest.raises(ValueError, match="engine='megatron-deepspeed'"):
        ParallelPlan(world_size=8, engine="megatron-deepspeed", cross_entropy_fusion="native")


def test_te_lowers_only_the_last_stage_by_four_bytes_per_logit():
    off = estimate(LLAMA, H100, _plan(), checks=False)
    native = estimate(LLAMA, H100, _plan(cross_entropy_fusion="native"), checks=False)
    te = estimate(LLAMA, H100, _plan(cross_entropy_fusion="te"), checks=False)
    logits = 8192 * 1 * 128512 / 4  # s·b·V/t of one micro-batch, V padded to a multiple of 128·t = 512
    first_off, last_off = off.memory.stages
    first_te, last_te = te.memory.stages
    assert first_te.terms == first_off.terms
    assert last_off.terms.activations - last_te.terms.activations == pytest.approx(4 * logits, rel=1e-9)
    assert [s.terms for s in native.memory.stages] == [s.terms for s in off.memory.stages]
    # time: only the loss's memory-bound passes change, te < native < none
    assert te.time.step_seconds < native.time.step_seconds < off.time.step_seconds
    assert te.to_dict()["plan"]["cross_entropy_fusion"] == "te"
    assert off.to_dict()["plan"]["cross_entropy_fusion"] == "none"


def test_megatron_export_import_round_trip():
    for impl in ("native", "te"):
        args = megatron_args(LLAMA, H100, _plan(cross_entropy_fusion=impl))
        i = args.index("--cross-entropy-loss-fusion")
        assert args[i + 1:i + 3] == ["--cross-entropy-fusion-impl", impl]
        _, plan = import_megatron_args(args).to_specs(LLAMA, H100)
        assert plan.cross_entropy_fusion == impl
    assert "--cross-entropy-loss-fusion" not in megatron_args(LLAMA, H100, _plan())
    # Megatron-LM's default implementation is native
    imp = import_megatron_args(["pretrain_gpt.py", "--cross-entropy-loss-fusion"])
    assert imp.plan_fields["cross_entropy_fusion"] == "native"
    imp = import_megatron_args(["pretrain_gpt.py", "--cross-entropy-fusion-impl", "te"])
    assert "cross_entropy_fusion" not in imp.plan_fields
    assert any("--cross-entropy-fusion-impl without --cross-entropy-loss-fusion" in w for w in imp.warnings)


def test_cli_flag_and_run_store():
    class Args:
        engine, tp, pp, sp, distributed_optimizer, mbs, gbs, cross_entropy_fusion = ("megatron", 4, 2, True, True, 1,
                                                                                     32, "te")
    plan = plan_from_args(Args(), H100)
    assert plan.cross_entropy_fusion is CrossEntropyFusion.TE
    _, _, back = specs_from_dict(specs_to_dict(LLAMA, H100, plan))
    assert back == plan


def test_planner_keeps_the_plans_loss_kernels():
    row = dict(engine=1, tp=4, pp=2, vp=1, cp=1, sp=1, zero=0, off_opt=0, off_par=0, dist_opt=1, recompute=0, mbs=1)
    plan = planner._plan_at({k: np.array([v]) for k, v in dict(row, xent=2).items()}, 0, H100, 32, "bf16")
    assert plan.cross_entropy_fusion is CrossEntropyFusion.TE
    plan = planner._plan_at({k: np.array([v]) for k, v in row.items()}, 0, H100, 32, "bf16")
    assert plan.cross_entropy_fusion is CrossEntropyFusion.NONE


def test_published_recipes_with_the_fused_loss_are_priced_with_it():
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import bench_published as B

    cases = json.loads((root / "benchmarks" / "published_runs.json").read_text())["cases"]
    marked = [c for c in cases if c["layout"].get("cross_entropy_fusion")]
    assert {c["id"] for c in marked} == {c["id"] for c in cases if c["id"].startswith("bridge-")}
    for case in marked:
        assert any("cross_entropy_fusion_impl='te'" in r for r in case["recipe"]), case["id"]
        assert B.specs(case)[2].cross_entropy_fusion is CrossEntropyFusion.TE


def test_planner_search_prices_every_megatron_row_with_the_loss_kernels():
    kw = dict(global_batch_size=32, engines=("megatron",), top=1)
    off, te = planner.search(LLAMA, H100, **kw), planner.search(LLAMA, H100, cross_entropy_fusion="te", **kw)
    assert te.ranked[0].plan.cross_entropy_fusion is CrossEntropyFusion.TE
    assert off.ranked[0].plan.cross_entropy_fusion is CrossEntropyFusion.NONE
    assert te.ranked[0].step_seconds <= off.ranked[0].step_seconds
    with pytest.raises(ValueError, match="cross_entropy_fusion='x' is not one of: none, native, te"):
        planner.search(LLAMA, H100, cross_entropy_fusion="x", **kw)


def test_planner_rows_report_the_loss_kernels_and_match_estimate():
    kw = dict(global_batch_size=32, engines=("megatron",), top=2)
    te = planner.search(LLAMA, H100, cross_entropy_fusion="te", **kw)
    for row in te.ranked:
        assert "CE-fusion=te" in row.describe() and row.to_dict()["cross_entropy_fusion"] == "te"
        e = estimate(LLAMA, H100, row.plan, checks=False)
        assert (row.peak_bytes, row.step_seconds) == (e.memory.per_gpu_peak_bytes, e.time.step_seconds)
    off = planner.search(LLAMA, H100, **kw).ranked[0]
    assert "CE-fusion" not in off.describe() and off.to_dict()["cross_entropy_fusion"] == "none"
