"""Transformer Engine tensor-parallel communication overlap (``ParallelPlan.tp_comm_overlap``, ``--tp-comm-overlap``):
refusals, userbuffer bytes, the exposed-communication formula, the step and memory it changes, export / import,
CLI, run store, planner column and advisor finding."""
import numpy as np
import pytest

from workbench import advisor, planner
from workbench import memory as M
from workbench import timing as T
from workbench.catalog import gpu, model
from workbench.commands.common import plan_from_args
from workbench.configs.importer import import_megatron_args
from workbench.configs.megatron import megatron_args
from workbench.estimate import estimate
from workbench.runs.specio import specs_from_dict, specs_to_dict
from workbench.specs import ClusterSpec, ParallelPlan

GiB = 2**30
H100 = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=2)
LLAMA = model("llama3-8b")  # hidden 4096, seq 8192


def _plan(**kw):
    base = dict(world_size=16, engine="megatron", tensor_parallel=4, pipeline_parallel=2, sequence_parallel=True,
                distributed_optimizer=True, micro_batch_size=1, global_batch_size=32)
    return ParallelPlan(**{**base, **kw})


@pytest.mark.parametrize("kw", [dict(tensor_parallel=1, sequence_parallel=False),
                                dict(sequence_parallel=False),
                                dict(engine="megatron-deepspeed", distributed_optimizer=False)])
def test_refused_without_tp_and_sequence_parallel(kw):
    with pytest.raises(ValueError, match="tp_comm_overlap=True needs engine='megatron', tensor_parallel > 1 and "
                                         "sequence_parallel=True"):
        _plan(tp_comm_overlap=True, **kw)
    with pytest.raises(ValueError, match="tp_comm_overlap"):
        _plan(tp_comm_overlap="yes")


def test_userbuffer_bytes_per_dtype():
    """12 buffers of the whole (s·b/c) × h shape: 24 bytes per element in bf16, 8·1 + 4·2 in FP8, both sets with
    FP8 and bf16 first/last layers (TE initialize_ub; Megatron-LM _initialize_tp_communicators)."""
    kw = dict(seq_length=8192, micro_batch=2, hidden_size=4096, context_parallel=2, value_bytes=2)
    elements = 8192 * 2 / 2 * 4096
    assert M.userbuffer_bytes(**kw, tp_comm_overlap=1) == 24 * elements
    assert M.userbuffer_bytes(**kw, fp8=1, tp_comm_overlap=1) == 16 * elements
    assert M.userbuffer_bytes(**kw, fp8=1, fp8_bf16=2, tp_comm_overlap=1) == 40 * elements
    assert M.userbuffer_bytes(**kw, tp_comm_overlap=0) == 0


def test_exposed_seconds_formula():
    # comm shorter than the GEMM: hidden; ring exchange takes no SM margin
    assert T.tp_overlap_exposed_seconds(1.0, 3.0) == 0.0
    assert T.tp_overlap_exposed_seconds(5.0, 3.0) == pytest.approx(2.0)
    # 16 of 128 SMs given away: the GEMM takes 8/7 as long, the rest of the comm is exposed
    assert T.tp_overlap_exposed_seconds(1.0, 3.5, sm_fraction=0.125) == pytest.approx(0.5)
    assert T.tp_overlap_exposed_seconds(6.0, 3.5, sm_fraction=0.125) == pytest.approx(0.5 + 2.0)
    assert T.gpu_sm_count("H100-SXM") == 132 and T.gpu_sm_count("A100-80GB") == 108


def test_estimate_moves_tp_comm_and_overhead_only():
    off = estimate(LLAMA, H100, _plan(), checks=False)
    on = estimate(LLAMA, H100, _plan(tp_comm_overlap=True), checks=False)
    t_off, t_on = off.time.breakdown, on.time.breakdown
    assert t_on["tp_comm"] < t_off["tp_comm"]
    assert t_on["compute"] == pytest.approx(t_off["compute"])
    assert on.time.step_seconds < off.time.step_seconds
    ub = 24 * 8192 * 4096
    for a, b in zip(off.memory.stages, on.memory.stages):
        assert b.terms.overhead - a.terms.overhead == pytest.approx(ub, abs=1)
        assert (b.terms.weights, b.terms.activations) == (a.terms.weights, a.terms.activations)
    assert "userbuffers" in on.memory.to_dict()["formulas"]["overhead"]
    assert on.to_dict()["plan"]["tp_comm_overlap"] is True


def test_slow_link_leaves_comm_exposed_and_margin_costs_time():
    """The overlap hides part of the plan's TP communication; on an infinitely fast link nothing is left to hide
    but the SMs the pipelined / bulk reduce-scatters take from their GEMMs still cost time."""
    x = T.step_time_terms(**estimate(LLAMA, H100, _plan(), checks=False).time.inputs)
    inputs = dict(estimate(LLAMA, H100, _plan(), checks=False).time.inputs, tp_comm_overlap=1)
    y = T.step_time_terms(**inputs)
    assert 0 < float(y["tp_overlap_hidden_seconds"]) <= float(x["tp_comm"])
    fast = T.step_time_terms(**dict(inputs, intra_node_gb_per_s=1e6, intra_node_latency_s=0.0))
    # an infinitely fast link: nothing to hide, only the SM margin of the two reduce-scatter overlaps remains
    assert float(fast["tp_comm"]) > 0


def test_megatron_export_import_round_trip():
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=2)
    args = megatron_args(LLAMA, c, _plan(tp_comm_overlap=True))
    assert "--tp-comm-overlap" in args
    assert "--tp-comm-overlap" not in megatron_args(LLAMA, c, _plan())
    _, plan = import_megatron_args(args).to_specs(LLAMA, c)
    assert plan.tp_comm_overlap
    imp = import_megatron_args(["pretrain_gpt.py", "--tensor-model-parallel-size", "2", "--tp-comm-overlap"])
    assert "tp_comm_overlap" not in imp.plan_fields
    assert any("--tp-comm-overlap without --sequence-parallel" in w for w in imp.warnings)


def test_cli_flag_and_run_store():
    class Args:
        engine, tp, pp, sp, distributed_optimizer, mbs, gbs, tp_comm_overlap = ("megatron", 4, 2, True, True, 1, 32,
                                                                              True)
    plan = plan_from_args(Args(), H100)
    assert plan.tp_comm_overlap
    _, _, back = specs_from_dict(specs_to_dict(LLAMA, H100, plan))
    assert back == plan


def test_planner_column():
    table = {k: np.array(v) for k, v in dict(engine=[1, 1, 1, 0], tp=[4, 4, 1, 4], sp=[1, 0, 0, 0]).items()}
    both = planner.with_tp_comm_overlap(table)
    assert both["tp_ov"].tolist() == [0, 0, 0, 0, 1] and both["tp"].tolist() == [4, 4, 1, 4, 4]
    assert planner.with_tp_comm_overlap(table, True)["tp_ov"].tolist() == [1, 0, 0, 0]
    assert planner.with_tp_comm_overlap(table, False)["tp_ov"].tolist() == [0, 0, 0, 0]
    plan = planner._plan_at({**{k: np.array([v]) for k, v in dict(
        engine=1, tp=4, pp=2, vp=1, cp=1, sp=1, zero=0, off_opt=0, off_par=0, dist_opt=1, recompute=0, mbs=1,
        tp_ov=1).items()}}, 0, H100, 32, "bf16")
    assert plan.tp_comm_overlap and "TP-overlap" in planner.describe_plan(plan)


def test_advisor_says_when_it_pays():
    off = estimate(LLAMA, H100, _plan(), checks=False)
    found = advisor.tp_comm_overlap_payoff(LLAMA, H100, _plan(), off.time, off.memory)
    assert found.id == "tp_comm_overlap" and "GiB of Transformer Engine userbuffers" in found.message
    on = estimate(LLAMA, H100, _plan(tp_comm_overlap=True), checks=False)
    found_on = advisor.tp_comm_overlap_payoff(LLAMA, H100, _plan(tp_comm_overlap=True), on.time, on.memory)
    assert found_on.status == "pass" and found_on.message.startswith("--tp-comm-overlap pays")
    if found.status == "warn":
        assert "--tp-comm-overlap" in found.suggestion
    assert advisor.tp_comm_overlap_payoff(LLAMA, H100, _plan(sequence_parallel=False), off.time, off.memory) is None


def test_launcher_refuses_it():
    from workbench.runs.prepare import check_launchable

    with pytest.raises(ValueError, match="tp_comm_overlap=True runs Transformer Engine's userbuffer overlap"):
        check_launchable(LLAMA, H100, _plan(tp_comm_overlap=True), nproc=8, steps=2, on_gpu=True)


def test_refused_without_transformer_engine_layers():
    from workbench.specs import validate

    local = LLAMA.replace(attention="fused-softmax")
    with pytest.raises(ValueError, match="tp_comm_overlap=True overlaps inside Transformer Engine's linear layers"):
        validate(local, H100, _plan(tp_comm_overlap=True))
    table = planner.enumerate_candidates(local.replace(num_layers=4), H100, 32, engines=("megatron",),
                                         recompute=("none",), max_context_parallel=1)
    assert not table["tp_ov"].any()


def test_plan_table_marks_overlapped_rows():
    from workbench.commands.plan import _row

    class R:
        plan, risky, peak_bytes, step_seconds, tokens_per_second, mfu = _plan(tp_comm_overlap=True), False, 1, 1, 1, 0.5
    assert " y+ " in _row(1, R())


def test_planner_explains_the_overlap_difference():
    on, off = _plan(tp_comm_overlap=True), _plan()
    assert planner._term_reason("tp_comm", off, on, H100) == "--tp-comm-overlap hides the collectives behind the GEMMs"
    assert "cost more than it hides" in planner._term_reason("tp_comm", on, off, H100)


def test_published_recipes_with_the_overlap_are_priced_with_it():
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import bench_published as B

    cases = json.loads((root / "benchmarks" / "published_runs.json").read_text())["cases"]
    marked = [c for c in cases if c["layout"].get("tp_comm_overlap")]
    assert len(marked) == 6
    for case in marked:
        assert any("TP communication overlap" in r for r in case["recipe"]), case["id"]
        assert B.specs(case)[2].tp_comm_overlap
