"""Planner: the candidate table matches the specs' own rules, array evaluation equals scalar estimate(), ranking,
Pareto front, explanation and errors."""
import itertools
import re

import numpy as np
import pytest

from workbench import memory as M
from workbench import planner, timing as T
from workbench.catalog import gpu, model
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ParallelPlan, validate


def _cluster(name="H100-SXM", gpus_per_node=8, nodes=1, **kw):
    return ClusterSpec(gpu=gpu(name), gpus_per_node=gpus_per_node, num_nodes=nodes, **kw)


def _rows(table):
    keys = planner._COLUMNS
    return {tuple(int(table[k][i]) for k in keys) for i in range(len(table["tp"]))}


def _row_of(plan, m):
    return (M.ENGINE_CODES[plan.engine], plan.tensor_parallel, plan.pipeline_parallel, plan.virtual_pipeline,
            plan.context_parallel, plan.data_parallel, int(plan.sequence_parallel), int(plan.zero_stage),
            int(str(plan.offload_optimizer) != "none"), int(str(plan.offload_params) != "none"),
            int(plan.distributed_optimizer), M.RECOMPUTE_CODES[plan.recompute], plan.micro_batch_size,
            plan.num_microbatches, plan.first_stage_layers or 0, plan.last_stage_layers or 0,
            int(plan.embedding_in_pipeline_split), int(plan.loss_in_pipeline_split),
            T.CP_COMM_CODES[str(plan.cp_comm_type)], plan.cp_a2a_size, plan.expert_parallel,
            plan.expert_tensor_parallel_size, int(plan.tp_comm_overlap))


def test_candidates_equal_brute_force_over_the_spec_rules():
    """Every row is a plan ParallelPlan + validate accept, and every accepted plan on the axes is a row."""
    m = model("gpt3-350m", seq_length=1024)  # 16 heads, 24 layers
    c = _cluster(gpus_per_node=4, nodes=2)
    gbs = 16
    table = planner.enumerate_candidates(m, c, gbs, max_context_parallel=4)
    expected = set()
    for e, t, p, v, cp, sp, z, oo, op, do, rc, b in itertools.product(
            ("deepspeed", "megatron", "megatron-deepspeed"), (1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 3, 4, 6, 8, 12, 24),
            (1, 2, 4), (False, True), (0, 1, 2, 3), ("none", "cpu"), ("none", "cpu"), (False, True),
            ("none", "selective", "full"), (1, 2, 4, 8, 16)):
        if v > 1 and e != "megatron":  # documented restriction: DeepSpeed's pipeline engine does not interleave
            continue
        if t > c.gpus_per_node:
            continue
        if do and 8 // (t * p * cp) == 1:  # documented: at DP = 1 the distributed optimizer is the plain plan
            continue
        if e == "megatron-deepspeed" and t == p == cp == 1:  # documented: then it is the deepspeed plan
            continue
        if cp > 1 and m.seq_length // cp < planner.MIN_CONTEXT_PARALLEL_TOKENS:  # documented token floor
            continue
        # the model's attention is not flash: no Megatron CP; DeepSpeed-Ulysses is the all-to-all
        for comm in (("p2p", "a2a") if cp > 1 else ("p2p",)):
            try:
                plan = ParallelPlan(world_size=8, engine=e, tensor_parallel=t, pipeline_parallel=p,
                                    virtual_pipeline=v, context_parallel=cp, cp_comm_type=comm, sequence_parallel=sp,
                                    zero_stage=z, offload_optimizer=oo, offload_params=op, distributed_optimizer=do,
                                    recompute=rc, micro_batch_size=b, global_batch_size=gbs)
                validate(m, c, plan)
            except ValueError:
                continue
            expected.add(_row_of(plan, m))
    # the model's attention is not flash: no Transformer Engine layers, so no TP-communication-overlap rows
    # (tests/test_tp_overlap.py covers that column)
    got = _rows(table)
    assert got == expected
    assert len(got) == len(table["tp"])  # no duplicates


@pytest.mark.parametrize("name,nodes,gbs", [("llama3-8b", 2, 64), ("guide-13b", 1, 32), ("gpt3-1.3b", 1, 16)])
def test_top_and_pareto_plans_match_scalar_estimate(name, nodes, gbs):
    m, c = model(name), _cluster(nodes=nodes)
    res = planner.search(m, c, global_batch_size=gbs, top=15)
    for r in res.ranked + res.pareto:
        est = estimate(m, c, r.plan)
        assert r.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)
        assert r.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
        assert r.mfu == pytest.approx(est.time.mfu, rel=1e-9)
        assert r.tokens_per_second == pytest.approx(est.time.tokens_per_second, rel=1e-9)
        assert r.time_breakdown == pytest.approx(est.time.breakdown, rel=1e-9)
        # the point estimate decides; the held-out band only marks a plan risky, with the estimate's own band
        assert r.peak_bytes <= 0.95 * c.gpu.memory_bytes
        assert r.band_high_bytes == pytest.approx(est.memory.band_high_bytes, abs=8)
        assert r.risky == (r.peak_bytes + r.band_high_bytes > 0.95 * c.gpu.memory_bytes)
        assert est.memory.fits_gpu or r.risky


def test_all_stages_gives_the_same_peaks_as_the_two_ends():
    m, c = model("llama3-8b"), _cluster(nodes=2)
    table = planner.enumerate_candidates(m, c, 64)
    a = planner.evaluate(table, m, c)
    b = planner.evaluate(table, m, c, all_stages=True)
    assert (table["pp"] > 2).any()
    np.testing.assert_allclose(a["peak_bytes"], b["peak_bytes"], rtol=1e-12)
    # and the scalar model agrees on the stage holding the peak for a deep pipeline
    i = int(np.flatnonzero(table["pp"] == 8)[0])
    plan = planner._plan_at(table, i, c, 64, planner.Precision.BF16)
    mem = M.estimate_memory(m, c, plan)
    assert a["peak_bytes"][i] == pytest.approx(mem.per_gpu_peak_bytes, abs=8)


def test_ranked_by_step_time_and_pareto_is_non_dominated():
    m, c = model("llama3-8b"), _cluster(nodes=4)
    res = planner.search(m, c, global_batch_size=256, top=20)
    steps = [r.step_seconds for r in res.ranked]
    assert steps == sorted(steps)
    assert res.pareto[0].step_seconds == res.ranked[0].step_seconds
    for a in res.pareto:
        for b in res.pareto:
            if a is not b:
                assert not (b.step_seconds <= a.step_seconds and b.peak_bytes <= a.peak_bytes
                            and (b.step_seconds, b.peak_bytes) != (a.step_seconds, a.peak_bytes))
    peaks = [r.peak_bytes for r in res.pareto]
    assert peaks == sorted(peaks, reverse=True)
    assert res.evaluated > res.feasible > 0


def test_headroom_filters():
    m, c = model("llama3-8b"), _cluster(nodes=1)
    loose = planner.search(m, c, global_batch_size=32, headroom=0.0)
    tight = planner.search(m, c, global_batch_size=32, headroom=0.5)
    assert tight.feasible < loose.feasible
    assert all(r.peak_bytes <= 0.5 * c.gpu.memory_bytes for r in tight.ranked)


def test_explanation_names_differences_with_numbers():
    m, c = model("llama3-8b"), _cluster(nodes=4)
    res = planner.search(m, c, global_batch_size=256)
    text = res.explanation
    w, r = res.ranked[0], res.ranked[1]
    assert f"{w.step_seconds:.3f} s/step" in text and f"{r.step_seconds:.3f} s/step" in text
    assert "Runner-up" in text and "GiB" in text


def test_explanation_cross_node_tp():
    m, c = model("llama3-8b", seq_length=2048), _cluster(gpus_per_node=4, nodes=4)
    res = planner.search(m, c, global_batch_size=64, engines=["megatron"], allow_cross_node_tp=True,
                         recompute=["none"], offload=False, max_context_parallel=1)
    fast = next(x for x in res.ranked if x.plan.tensor_parallel <= 4)
    slow = planner.search(m, c, global_batch_size=64, engines=["megatron"], allow_cross_node_tp=True,
                          recompute=["none"], offload=False, max_context_parallel=1, top=100000).ranked
    cross = next(x for x in slow if x.plan.tensor_parallel == 8)
    text = planner.explain(fast, cross, model=m, cluster=c)
    assert "TP=8 crosses nodes" in text and "tensor-parallel all-reduce" in text


def test_tp_limited_to_a_node_unless_allowed():
    m, c = model("llama3-8b"), _cluster(gpus_per_node=4, nodes=4)
    t = planner.enumerate_candidates(m, c, 64)
    assert t["tp"].max() == 4
    t = planner.enumerate_candidates(m, c, 64, allow_cross_node_tp=True)
    assert t["tp"].max() == 8


def test_nothing_fits_names_the_constraint():
    m, c = model("llama3-405b"), _cluster(nodes=1)
    with pytest.raises(ValueError, match=r"smallest plan needs [\d.]+ GiB per GPU.*H100-SXM has 79.2 GiB.*try"):
        planner.search(m, c, global_batch_size=8, offload=False)


def test_host_memory_constraint_reported():
    m, c = model("llama3-70b"), _cluster(nodes=1, host_memory_gib_per_node=64)
    with pytest.raises(ValueError, match="host memory"):
        planner.search(m, c, global_batch_size=8, engines=["deepspeed"], recompute=["full"])


def test_bad_input():
    m, c = model("llama3-8b"), _cluster()
    with pytest.raises(ValueError, match="global_batch_size=0"):
        planner.search(m, c, global_batch_size=0)
    with pytest.raises(ValueError, match="headroom=1.5"):
        planner.search(m, c, global_batch_size=8, headroom=1.5)
    with pytest.raises(ValueError, match="engine='tpu'"):
        planner.search(m, c, global_batch_size=8, engines=["tpu"])
    with pytest.raises(ValueError, match="no valid plan: global_batch_size=3"):
        planner.search(model("gpt3-125m"), _cluster(nodes=4), global_batch_size=3, max_context_parallel=1)


def test_seq_override_and_405b_full_search_is_fast():
    m, c = model("llama3-405b"), _cluster(nodes=2048)
    res = planner.search(m, c, global_batch_size=2048, seq_length=8192)
    assert res.elapsed_seconds < 2.0
    assert res.model.seq_length == 8192 and res.best.plan.world_size == 16384


def test_to_dict_round_numbers():
    m, c = model("gpt3-1.3b"), _cluster()
    d = planner.search(m, c, global_batch_size=16, top=3).to_dict()
    assert len(d["ranked"]) == 3 and d["ranked"][0]["step_seconds"] > 0 and d["explanation"]
    assert set(d["ranked"][0]["time_breakdown"]) == set(T.TERMS)


def test_cli_plan_json_and_table(capsys):
    import json

    from workbench.cli import main

    assert main(["plan", "--model", "gpt3-1.3b", "--gpus-per-node", "8", "--nodes", "1", "--gbs", "16", "--seq",
                 "2048", "--top", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ranked"]) == 3 and out["pareto"] and out["explanation"]
    assert main(["plan", "--model", "gpt3-1.3b", "--gbs", "16", "--top", "2", "--engine", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "ranked by step time" in text and "Pareto front" in text and "megatron" in text
    assert main(["plan", "--model", "llama3-405b", "--gbs", "8", "--no-offload"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error: no plan fits") and err.count("\n") == 1


def test_time_inputs_per_row_equal_the_scalar_time_inputs():
    """Every key step_time_terms takes, row by row, equals time_inputs() of that row's plan."""
    m, c = model("llama3-8b"), _cluster(nodes=2)
    table = planner.enumerate_candidates(m, c, 64)
    arrays = planner.time_codes(table, m, c, planner.Precision.BF16)
    assert set(arrays) == set(T._STEP_ARGS)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(table["tp"]), size=40, replace=False):
        plan = planner._plan_at(table, int(i), c, 64, planner.Precision.BF16)
        ref = T.time_inputs(m, c, plan)
        for k, v in ref.items():
            got = np.asarray(arrays[k])
            got = got[i] if got.ndim else got
            assert float(got) == pytest.approx(float(v), rel=1e-12), (k, planner.describe_plan(plan))


def test_memory_codes_have_the_keys_of_plan_codes():
    m, c = model("llama3-8b"), _cluster()
    table = planner.enumerate_candidates(m, c, 16)
    plan = planner._plan_at(table, 0, c, 16, planner.Precision.BF16)
    assert set(planner.memory_codes(table, m, planner.Precision.BF16)) == set(M.plan_codes(plan, m))


def test_plan_with_a_profile_prices_every_row_as_estimate_does():
    """`plan --profile`: the planner and estimate go through one encoder, so the ranked plans carry exactly the
    numbers estimate prints for them with the same profile."""
    from workbench.estimate import estimate

    m = model("llama3-8b", attention="flash")
    c = ClusterSpec(gpu=gpu("H200"), gpus_per_node=8, num_nodes=1)
    with_profile = planner.search(m, c, global_batch_size=32, top=3, profile="h200")
    assert with_profile.profile["name"] == "h200"
    plain = planner.search(m, c, global_batch_size=32, top=3)
    assert plain.profile["name"] is None
    assert [r.step_seconds for r in with_profile.ranked] != [r.step_seconds for r in plain.ranked]
    for r in with_profile.ranked:
        e = estimate(m, c, r.plan, profile="h200", checks=False)
        assert r.step_seconds == pytest.approx(e.time.step_seconds, rel=1e-12)
        assert r.peak_bytes == pytest.approx(e.memory.per_gpu_peak_bytes, abs=2)


def test_cli_plan_takes_a_profile(capsys):
    import json

    from workbench.cli import main

    assert main(["plan", "--model", "llama3-8b", "--profile", "h200", "--gbs", "16", "--top", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"]["name"] == "h200" and out["gpu"] == "H200"
    assert main(["plan", "--model", "llama3-8b", "--profile", "nosuch", "--gbs", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuch" in err[0]


def test_error_band_marks_plans_risky_without_excluding_them(monkeypatch):
    """The held-out band's upper side marks a plan (planner, rank_plan, CLI) but the point estimate decides whether it
    fits: with a band so wide that every plan passes the headroom at its upper side, the same plans fit and rank."""
    from workbench.commands.plan import render

    m, c = model("gpt3-1.3b"), _cluster(nodes=1)
    monkeypatch.setattr(M, "_error_bands", lambda: {})
    plain = planner.search(m, c, global_batch_size=16, top=5)
    assert plain.risky == 0 and not any(r.risky for r in plain.ranked)
    wide = {"device": {e: {"n": 5, "shapes": 2, "low_fraction": 0.0, "high_fraction": 10.0}
                       for e in ("deepspeed", "megatron", "megatron-deepspeed")}}
    monkeypatch.setattr(M, "_error_bands", lambda: wide)
    banded = planner.search(m, c, global_batch_size=16, top=5)
    assert banded.feasible == plain.feasible == banded.risky
    assert [r.plan for r in banded.ranked] == [r.plan for r in plain.ranked]
    best = banded.ranked[0]
    assert best.risky and best.band_high_bytes == pytest.approx(10.0 * best.peak_bytes, abs=8)
    assert "Memory margin: the winner fits on the point estimate only" in banded.explanation
    text = render(banded)
    assert "  1!" in text and "!: fits on the point estimate of memory only" in text
    r = planner.rank_plan(m, c, best.plan)
    assert r.rank == 1 and r.fits and r.risky and r.rank_within_band is None
    assert "Memory margin" in r.explanation and r.to_dict()["risky"]


def test_fit_on_band_ranks_only_plans_that_fit_at_the_bands_upper_side(monkeypatch, capsys):
    """fit_on='band' (--fit-on band, the Planner's checkbox) judges every plan as estimate and advise judge one: the
    point estimate's feasible plans less the risky ones, none marked; when the band excludes them all, the refusal
    says how many fit on the point estimate and which plan came closest."""
    from workbench import cli

    # A100-40GB: some plans fit on the point estimate and not at the band's upper side (on an H100 none since the
    # ZeRO-3 offload reserve went onto the streams' caches and the bands were rewritten)
    m, c = model("gpt3-1.3b"), _cluster("A100-40GB", nodes=1)
    point = planner.search(m, c, global_batch_size=16, top=5000)
    band = planner.search(m, c, global_batch_size=16, top=5000, fit_on="band")
    assert band.fit_on == "band" and band.to_dict()["fit_on"] == "band" and band.risky == 0
    assert point.risky > 0 and band.feasible == point.feasible - point.risky > 0
    assert {r.plan for r in band.ranked} == {r.plan for r in point.ranked if not r.risky}
    for r in band.ranked[:20]:
        mem = M.estimate_memory(m, c, r.plan)
        assert mem.per_gpu_peak_bytes + mem.band_high_bytes <= 0.95 * mem.capacity_bytes + 8
    wide = {"device": {e: {"n": 5, "shapes": 2, "low_fraction": 0.0, "high_fraction": 10.0}
                       for e in ("deepspeed", "megatron", "megatron-deepspeed")}}
    monkeypatch.setattr(M, "_error_bands", lambda: wide)
    with pytest.raises(ValueError, match=r"no plan fits at the error band's upper side: [\d,]+ fit on the point "
                                         r"estimate of memory; the closest \("):
        planner.search(m, c, global_batch_size=16, fit_on="band")
    with pytest.raises(ValueError, match="fit_on='upper' must be one of point, band"):
        planner.search(m, c, global_batch_size=16, fit_on="upper")
    monkeypatch.undo()
    assert cli.main(["plan", "--model", "gpt3-1.3b", "--gpu", "A100-40GB", "--gpus", "8", "--gbs", "16",
                     "--fit-on", "band"]) == 0
    out = capsys.readouterr().out
    assert "fit with 5% headroom at the error band's upper side" in out and "!: fits on the point" not in out


def test_megatron_main_gradient_dtype_option(capsys):
    """grad_reduce_fp32=False (Megatron-LM --grad-reduce-in-bf16, megatron-core grad_reduce_in_fp32=False, NVIDIA's
    performance recipes): 2 bytes of gradient per parameter instead of 4, the distributed optimizer's fp32 copy of
    its shard only at the step, half the gradient bytes on the wire; export, import, the CLI and the planner carry
    it; None keeps Megatron-LM's default (fp32 with bf16)."""
    from workbench.cli import main
    from workbench.configs.importer import import_megatron_args
    from workbench.configs.megatron import megatron_args

    m, c = model("llama3-8b"), _cluster(nodes=1)
    kw = dict(world_size=8, engine="megatron", tensor_parallel=2, pipeline_parallel=2, distributed_optimizer=True,
              sequence_parallel=True, global_batch_size=32)
    fp32, bf16 = estimate(m, c, ParallelPlan(**kw)), estimate(m, c, ParallelPlan(**kw, grad_reduce_fp32=False))
    assert estimate(m, c, ParallelPlan(**kw, grad_reduce_fp32=True)).memory.per_gpu_peak_bytes \
        == fp32.memory.per_gpu_peak_bytes
    n = m.parameter_counts().total / 4  # about a quarter of the model per rank (TP 2 x PP 2)
    saved = fp32.memory.stages[0].terms.gradients - bf16.memory.stages[0].terms.gradients
    assert saved == pytest.approx(2 * n, rel=0.1)
    assert fp32.time.inputs["grad_reduce_bytes_per_value"] == 4.0
    assert bf16.time.inputs["grad_reduce_bytes_per_value"] == 2.0
    assert bf16.time.breakdown["dp_comm"] <= fp32.time.breakdown["dp_comm"]
    plan = ParallelPlan(**kw, grad_reduce_fp32=False)
    args = megatron_args(m, c, plan)
    assert "--grad-reduce-in-bf16" in args and "--grad-reduce-in-bf16" not in megatron_args(m, c, ParallelPlan(**kw))
    assert import_megatron_args(args).plan_fields["grad_reduce_fp32"] is False
    with pytest.raises(ValueError, match="grad_reduce_fp32=False is Megatron's"):
        ParallelPlan(world_size=8, grad_reduce_fp32=False)
    assert main(["estimate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus-per-node", "8", "--engine",
                 "megatron", "--tp", "2", "--pp", "2", "--distributed-optimizer", "--gbs", "32",
                 "--grad-reduce-in-bf16", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["grad_reduce_fp32"] is False
    assert out["memory"]["stages"][0]["gradients"] == bf16.memory.stages[0].terms.gradients
    res = planner.search(m, c, global_batch_size=32, engines=("megatron",), top=3, grad_reduce_fp32=False)
    assert all(r.plan.grad_reduce_fp32 is False for r in res.ranked)
    r = res.ranked[0]
    assert r.peak_bytes == pytest.approx(estimate(m, c, r.plan).memory.per_gpu_peak_bytes, abs=8)


def test_rank_plan_says_which_setting_the_search_lacks():
    """A layout outside the search space names the first setting the enumeration never pairs with the rest."""
    m, c = model("llama3-8b").replace(seq_length=2048), _cluster(nodes=2)
    plan = ParallelPlan(world_size=16, engine="megatron", tensor_parallel=2, context_parallel=8,
                        cp_comm_type="all_gather", sequence_parallel=True, global_batch_size=32)
    r = planner.rank_plan(m, c, plan)  # 2048 / 8 = 256 tokens per CP rank: below the search's floor
    assert not r.in_search_space and r.rank is None
    assert "cp 8 is not searched" in r.explanation and "cp 1, 2, 4" in r.explanation
    # every --cp-comm-type is searched: the all-gather plan at CP=2 is ranked
    assert planner.rank_plan(m.replace(seq_length=8192), c, plan.replace(context_parallel=2)).in_search_space


def test_planner_books_zero3_hooks_apart_and_explains_them():
    """The planner's array evaluation carries ZeRO-3's hooks as their own term (equal to the estimate's), and its
    explanation names them rather than data-parallel traffic on one GPU."""
    m, c = model("gpt3-125m", attention="flash"), _cluster("H200", gpus_per_node=1)
    ranked = planner.search(m, c, global_batch_size=8, engines=["deepspeed"], zero_stages=(2, 3), offload=False,
                            recompute=["none"], top=1000).ranked
    z3 = next(r for r in ranked if int(r.plan.zero_stage) == 3 and r.plan.micro_batch_size == 1)
    z2 = next(r for r in ranked if int(r.plan.zero_stage) == 2 and r.plan.micro_batch_size == 1)
    assert set(z3.time_breakdown) == set(T.TERMS)
    assert z3.time_breakdown["zero3_hooks"] > 0 and z3.time_breakdown["dp_comm"] == 0.0
    assert z2.time_breakdown["zero3_hooks"] == 0.0
    assert z3.time_breakdown["zero3_hooks"] == pytest.approx(
        estimate(m, c, z3.plan, checks=False).time.breakdown["zero3_hooks"], rel=1e-9)
    text = planner.explain(z2, z3, model=m, cluster=c)
    assert f"ZeRO-3 vs ZeRO-2 (only ZeRO-3 fetches each module): runner-up +" in text
    assert f"runner-up +{z3.time_breakdown['zero3_hooks']:.3f} s {T.TERM_WORDS['zero3_hooks']}" in text
    assert not re.search(r"runner-up \+[0-9.]+ s " + T.TERM_WORDS["dp_comm"], text)  # one GPU: no such traffic


def test_moe_switches_of_a_plan_are_ranked_and_searched_with_it():
    """megatron-core's all-to-all overlap and token drop: rank_plan prices the given layout with its own switches
    (the rank's result equals estimate()), and search() applies them to every Megatron row that can take them."""
    m, c = model("mixtral-8x7b").replace(seq_length=4096), _cluster(nodes=2)
    plan = ParallelPlan(world_size=16, engine="megatron", tensor_parallel=1, pipeline_parallel=4, virtual_pipeline=2,
                        expert_parallel=4, distributed_optimizer=True, global_batch_size=64,
                        moe_overlap_alltoall=True, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    r = planner.rank_plan(m, c, plan)
    assert r.in_search_space and r.result.plan.moe_overlap_alltoall and r.result.plan.moe_pad_to_capacity
    est = estimate(m, c, plan, checks=False)
    assert r.result.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    assert r.result.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)
    plain = planner.rank_plan(m, c, plan.replace(moe_overlap_alltoall=False, moe_capacity_factor=None,
                                                 moe_pad_to_capacity=False))
    assert plain.result.step_seconds != pytest.approx(r.result.step_seconds, rel=1e-6)
    res = planner.search(m, c, global_batch_size=64, engines=("megatron",), top=200, moe_overlap_alltoall=True,
                         moe_capacity_factor=1.25)
    overlapped = [x for x in res.ranked if x.plan.moe_overlap_alltoall]
    assert overlapped and all(x.plan.moe_capacity_factor == 1.25 for x in res.ranked)
    for x in res.ranked:  # on exactly the rows megatron-core accepts it for
        p = x.plan
        assert p.moe_overlap_alltoall == (p.expert_parallel > 1 and str(p.recompute) != "full"
                                          and (p.pipeline_parallel == 1 or p.virtual_pipeline > 1))
    x = overlapped[0]
    assert x.step_seconds == pytest.approx(estimate(m, c, x.plan, checks=False).time.step_seconds, rel=1e-9)
    with pytest.raises(ValueError, match=r"moe_overlap_alltoall=True needs a mixture-of-experts model"):
        planner.search(model("llama3-8b"), c, global_batch_size=64, moe_overlap_alltoall=True)
    with pytest.raises(ValueError, match=r"moe_pad_to_capacity=True needs moe_capacity_factor"):
        planner.search(m, c, global_batch_size=64, moe_pad_to_capacity=True)
