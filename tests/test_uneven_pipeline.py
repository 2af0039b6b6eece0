"""Uneven pipeline stages as megatron-core splits them: the split itself (checked against megatron-core's own
``get_num_layers_to_build``), per-stage memory, the slowest stage's pace, export/import and the planner."""
import numpy as np
import pytest

from workbench import encode
from workbench.catalog import model
from workbench.configs.importer import import_megatron_args
from workbench.configs.megatron import megatron_args
from workbench.estimate import estimate
from workbench.schedule import pipeline_schedule
from workbench.specs import ClusterSpec, ParallelPlan, pipeline_stage_layers, validate


def _megatron_split(num_layers, p, v=1, first=None, last=None, embedding=False, loss=False):
    """Layers per pipeline rank as megatron-core builds them (summed over its virtual stages)."""
    tb = pytest.importorskip("megatron.core.transformer.transformer_block")
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(num_layers=num_layers, hidden_size=64, num_attention_heads=4,
                            pipeline_model_parallel_size=p, virtual_pipeline_model_parallel_size=v if v > 1 else None,
                            num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
                            account_for_embedding_in_pipeline_split=embedding,
                            account_for_loss_in_pipeline_split=loss, pipeline_dtype=torch.bfloat16)
    return tuple(sum(tb.get_num_layers_to_build(cfg, vp_stage=(s if v > 1 else None), pp_rank=r)
                     for s in range(v)) for r in range(p))


@pytest.mark.parametrize("case", [
    dict(num_layers=126, p=16, first=7, last=7),
    dict(num_layers=126, p=16, first=6),
    dict(num_layers=30, p=4, last=6),
    dict(num_layers=9, p=2, first=5, last=4),
    dict(num_layers=28, p=4, v=2, first=6, last=6),
    dict(num_layers=31, p=4, embedding=True),
    dict(num_layers=30, p=4, embedding=True, loss=True),
    dict(num_layers=30, p=4, v=2, embedding=True, loss=True),
    dict(num_layers=32, p=4, v=2),
])
def test_split_matches_megatron_core(case):
    c = dict(case)
    args = (c.pop("num_layers"), c.pop("p"), c.pop("v", 1))
    assert pipeline_stage_layers(*args, **c) == _megatron_split(*args, **c)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_layers=126, pipeline_parallel=16), "decoder-first-pipeline-num-layers 7"),
    (dict(num_layers=126, pipeline_parallel=16, first=7, last=8), "111 layers, not divisible by the 14 middle"),
    (dict(num_layers=9, pipeline_parallel=2, first=5, last=5), "place 10 layers, more than num_layers=9"),
    (dict(num_layers=28, pipeline_parallel=4, virtual_pipeline=2, first=7, last=7),
     r"first_stage_layers=7 is not divisible by virtual_pipeline\(2\)"),
    (dict(num_layers=30, pipeline_parallel=4, embedding=True), r"31 is not divisible by pipeline_parallel\(4\)"),
    (dict(num_layers=30, pipeline_parallel=4, first=6, embedding=True), "cannot be combined"),
])
def test_refusals_name_the_numbers(kwargs, match):
    n, p = kwargs.pop("num_layers"), kwargs.pop("pipeline_parallel")
    with pytest.raises(ValueError, match=match):
        pipeline_stage_layers(n, p, **kwargs)


def test_interleaved_split_without_a_middle_stage_is_refused():
    """megatron-core's interleaved layer offset divides by the middle stages: with both ends set at p = 2 its last
    stage cannot be built (ZeroDivisionError), so the workbench refuses the split; one end alone builds."""
    with pytest.raises(ValueError, match="no middle stage.*set only one of the two"):
        pipeline_stage_layers(8, 2, 2, first=6, last=2)
    assert pipeline_stage_layers(8, 2, 2, first=6) == (6, 2)
    assert pipeline_stage_layers(12, 3, 2, first=2, last=2) == (2, 8, 2)
    offset = pytest.importorskip("megatron.core.transformer.transformer_layer").get_transformer_layer_offset
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    def config(**kw):
        return TransformerConfig(num_layers=8, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=2,
                                 virtual_pipeline_model_parallel_size=2, pipeline_dtype=torch.bfloat16, **kw)

    with pytest.raises(ZeroDivisionError):
        offset(config(num_layers_in_first_pipeline_stage=6, num_layers_in_last_pipeline_stage=2), vp_stage=0,
               pp_rank=1)
    assert offset(config(num_layers_in_first_pipeline_stage=6), vp_stage=0, pp_rank=1) == 3


def test_plan_field_rules():
    with pytest.raises(ValueError, match="need pipeline_parallel > 1"):
        ParallelPlan(world_size=8, engine="megatron", first_stage_layers=3)
    with pytest.raises(ValueError, match="engine='megatron'"):
        ParallelPlan(world_size=8, engine="megatron-deepspeed", pipeline_parallel=2, first_stage_layers=3)
    with pytest.raises(ValueError, match="first_stage_layers"):
        ParallelPlan(world_size=8, engine="megatron", pipeline_parallel=2, first_stage_layers=0)


def _405b(**kw):
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=128)
    plan = ParallelPlan(world_size=1024, engine="megatron", tensor_parallel=8, pipeline_parallel=16,
                        sequence_parallel=True, distributed_optimizer=True, recompute="full",
                        global_batch_size=512, **kw)
    return model("llama3-405b"), cluster, plan


def test_405b_uneven_memory_and_time_per_stage():
    m, cluster, plan = _405b(first_stage_layers=7, last_stage_layers=7)
    est = estimate(m, cluster, plan)
    assert [s.num_layers for s in est.memory.stages] == [7] + [8] * 14 + [7]
    # weights follow the layer count: the middle stages hold equal weights, more than the last (7 layers + output)
    w = [s.terms.weights for s in est.memory.stages]
    assert w[1] == w[2] == w[14] and w[15] != w[14]
    # the time model is paced by the slowest stage: an 8-layer middle stage (no logits) or the 7-layer last
    t = est.time
    layer = t.layer_forward_seconds + t.layer_backward_seconds
    assert t.microbatch_forward_seconds + t.microbatch_backward_seconds >= 8 * layer
    # the middle stages (8 layers) pace the pipeline: a lighter last stage (6) leaves the steady work unchanged and
    # idles less while the pipeline fills and drains
    same = estimate(*_405b(first_stage_layers=8, last_stage_layers=6))
    for term in ("compute", "recompute", "tp_comm", "pp_comm"):
        assert same.time.breakdown[term] == pytest.approx(t.breakdown[term])
    assert 0 < same.time.breakdown["bubble"] < t.breakdown["bubble"]
    # ... while the data-parallel traffic and the optimizer follow the stage holding the most parameters: the first
    # stage (embedding) with 8 layers holds more than with 7
    facts = [max(e.facts.parameters_per_rank) for e in (est, same)]
    assert same.time.inputs["stage_parameters"] == pytest.approx(facts[1])
    assert same.time.inputs["stage_parameters"] > t.inputs["stage_parameters"]
    assert t.inputs["stage_parameters"] == pytest.approx(facts[0])
    assert same.time.breakdown["optimizer"] > t.breakdown["optimizer"]


def test_slowest_stage_sets_the_pace_and_the_bubble_follows_the_stages():
    """A heavy first stage paces the pipeline; the bubble is what a 1F1B schedule of the stages as they are idles,
    well under (p-1) x that stage's micro-batch time."""
    m = model("guide-13b")  # 40 layers
    cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, num_nodes=1)
    base = dict(world_size=8, engine="megatron", tensor_parallel=2, pipeline_parallel=4, global_batch_size=32)
    even = estimate(m, cluster, ParallelPlan(**base))
    heavy = estimate(m, cluster, ParallelPlan(**base, first_stage_layers=16, last_stage_layers=8))  # 16, 8, 8, 8
    assert [s.num_layers for s in heavy.memory.stages] == [16, 8, 8, 8]
    t = heavy.time
    mb = t.microbatch_forward_seconds + t.microbatch_backward_seconds
    assert mb == pytest.approx(16 * (t.layer_forward_seconds + t.layer_backward_seconds)
                               + t.breakdown["tp_comm"] / ParallelPlan(**base).num_microbatches, rel=1e-6)
    p, nmb = 4, ParallelPlan(**base).num_microbatches
    simulated = pipeline_schedule("1f1b", p, nmb, forward_seconds=t.microbatch_forward_seconds,
                                  backward_seconds=t.microbatch_backward_seconds,
                                  stage_seconds=t.stage_microbatch_seconds)
    assert simulated.bubble_seconds == pytest.approx(t.breakdown["bubble"], rel=0.05, abs=1e-9)
    assert t.breakdown["bubble"] <= simulated.bubble_seconds * (1 + 1e-9)
    assert t.breakdown["bubble"] < 0.5 * (p - 1) * mb
    assert t.step_seconds > even.time.step_seconds


def test_columns_match_the_split_on_arrays():
    cols = dict(pp=np.array([1, 2, 4, 16, 16, 4]), first_layers=np.array([0, 5, 0, 7, 0, 0]),
                last_layers=np.array([0, 4, 6, 7, 0, 0]), emb_split=np.array([0, 0, 0, 0, 0, 1]),
                loss_split=np.array([0, 0, 0, 0, 0, 1]))
    layers = [9, 9, 30, 126, 128, 30]
    for i, L in enumerate(layers):
        one = {k: int(v[i]) for k, v in cols.items()}
        split = pipeline_stage_layers(L, one["pp"], first=one["first_layers"] or None,
                                      last=one["last_layers"] or None, embedding=bool(one["emb_split"]),
                                      loss=bool(one["loss_split"]))
        f, mid, last = encode.stage_layer_columns(L, one)
        assert (f, last) == (split[0], split[-1])
        assert mid == (split[1] if len(split) > 2 else max(split[0], split[-1]))


@pytest.mark.parametrize("kw", [dict(first_stage_layers=7, last_stage_layers=7), dict(last_stage_layers=6)])
def test_megatron_export_import_round_trip(kw):
    m, cluster, plan = _405b(**kw)
    args = megatron_args(m, cluster, plan)
    if "first_stage_layers" in kw:
        assert args[args.index("--decoder-first-pipeline-num-layers") + 1] == "7"
    assert args[args.index("--decoder-last-pipeline-num-layers") + 1] == str(kw["last_stage_layers"])
    spec, back = import_megatron_args(args).to_specs(cluster=cluster)
    assert (back.first_stage_layers, back.last_stage_layers) == (plan.first_stage_layers, plan.last_stage_layers)
    validate(spec, cluster, back)


def test_embedding_and_loss_account_round_trip_with_interleaving():
    m = model("guide-13b")  # 40 layers + embedding + loss = 42 = 2 x 21 ... needs p | 42 and v | 42/p
    cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, num_nodes=1)
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=4, pipeline_parallel=2, virtual_pipeline=3,
                        embedding_in_pipeline_split=True, loss_in_pipeline_split=True, global_batch_size=16)
    validate(m, cluster, plan)
    assert plan.stage_layers(40) == (20, 20)
    args = megatron_args(m, cluster, plan)
    assert "--account-for-embedding-in-pipeline-split" in args and "--account-for-loss-in-pipeline-split" in args
    assert args[args.index("--num-virtual-stages-per-pipeline-rank") + 1] == "3"
    _, back = import_megatron_args(args).to_specs(cluster=cluster)
    assert back.embedding_in_pipeline_split and back.loss_in_pipeline_split and back.virtual_pipeline == 3


def test_planner_names_the_stages_when_the_bubble_differs_by_the_split():
    """The planner's "where the time goes" gives an uneven split's stages, not the textbook fraction of equal
    stages, which is the same for both plans here."""
    from workbench import planner

    m = model("guide-13b")  # 40 layers
    base = dict(world_size=8, engine="megatron", tensor_parallel=2, pipeline_parallel=4, global_batch_size=32)
    even, heavy = ParallelPlan(**base), ParallelPlan(**base, first_stage_layers=16, last_stage_layers=8)
    cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, num_nodes=1)
    assert planner._term_reason("bubble", heavy, even, cluster, m.num_layers) == (
        "PP=4, v=1, m=32, stages of 16/8/8/8 layers vs PP=4, v=1, m=32: (p−1)/(v·m)=9.4%")
    assert planner._term_reason("bubble", even.replace(global_batch_size=16), even, cluster) == (
        "PP=4, v=1, m=16: (p−1)/(v·m)=18.8% vs 9.4%")
    # the advisor's throughput suggestion says the same
    from workbench.advisor import advise

    bubble = next(s for s in advise(m, cluster, heavy.replace(global_batch_size=8)).throughput if s.term == "bubble")
    assert bubble.message.startswith("pipeline bubble of stages with 16/8/8/8 layers at m=8, v=1")
    # in the explanation: a 10-layer model on 8 GPUs, whose PP 4 plans the planner splits unevenly
    m = model("gpt3-350m", num_layers=10, seq_length=1024)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=1)
    ranked = planner.search(m, cluster, global_batch_size=16, engines=["megatron"], offload=False, top=100000,
                            max_context_parallel=1).ranked
    uneven = next(r for r in ranked if r.plan.uneven_stages)
    even = next(r for r in ranked if r.plan.pipeline_parallel == 2 and not r.plan.uneven_stages)
    layers = "/".join(map(str, uneven.plan.stage_layers(10)))
    text = planner.explain(even, uneven, model=m, cluster=cluster)
    assert f"stages of {layers} layers" in text and "PP=2, v=1" in text  # either plan may be the faster one


def test_planner_splits_where_pp_does_not_divide_the_layers():
    from workbench import planner

    splits = planner.pipeline_splits(126, 16384)
    assert (16, 7, 7, 0, 0) in splits and (16, 0, 0, 1, 1) in splits  # Llama 3 405B's layout, and interleavable
    assert (2, 5, 4, 0, 0) in planner.pipeline_splits(9, 8) and (4, 0, 0, 0, 0) in planner.pipeline_splits(8, 8)
    m = model("gpt3-350m", num_layers=10, seq_length=1024)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=1)
    table = planner.enumerate_candidates(m, cluster, 16, max_context_parallel=1, offload=False)
    uneven = np.flatnonzero((table["first_layers"] > 0) | (table["emb_split"] > 0))
    assert len(uneven) and set(table["pp"][uneven].tolist()) == {4, 8}
    # 10 + 2 = 4 x 3: the embedding and loss in the split, interleaving by 3 only (v=1 is the 2/3/3/2 split)
    accounted = np.flatnonzero(table["emb_split"] > 0)
    assert set(table["vp"][accounted].tolist()) == {3} and set(table["pp"][accounted].tolist()) == {4}
    for i in uneven[:: max(1, len(uneven) // 40)]:  # every row is a plan the specs accept
        validate(m, cluster, planner._plan_at(table, int(i), cluster, 16, "bf16"))
    # array evaluation of uneven rows equals estimate(), the middle stage's peak included
    ev = planner.evaluate(table, m, cluster)
    every = planner.evaluate(table, m, cluster, all_stages=True)
    assert np.allclose(ev["peak_bytes"], every["peak_bytes"])
    for i in uneven[:: max(1, len(uneven) // 10)]:
        plan = planner._plan_at(table, int(i), cluster, 16, "bf16")
        est = estimate(m, cluster, plan)
        assert float(ev["peak_bytes"][i]) == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)
        assert float(ev["step_seconds"][i]) == pytest.approx(est.time.step_seconds, rel=1e-9)


def test_views_draw_unequal_stages():
    from widgets.memory_view import memory_traces
    from widgets.pipeline_view import stage_durations
    from workbench.schedule import pipeline_schedule

    m = model("guide-13b")
    cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, num_nodes=1)
    plan = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=2, pipeline_parallel=4, global_batch_size=32,
                        first_stage_layers=16, last_stage_layers=8)
    est = estimate(m, cluster, plan)
    assert memory_traces(est.memory)["x"][:2] == ["stage 0 (16 layers, emb)", "stage 1 (8 layers)"]

    class State:
        estimate = est

    stages = stage_durations(State, 4)
    t = est.time
    # the slowest stage (16 layers) is the time model's micro-batch; the last adds the output layer to 8 layers
    assert sum(stages[0]) == pytest.approx(t.microbatch_forward_seconds + t.microbatch_backward_seconds, rel=1e-9)
    assert sum(stages[1]) < sum(stages[3]) < sum(stages[0])
    nmb = plan.num_microbatches
    sched = pipeline_schedule("1f1b", 4, nmb, forward_seconds=stages[0][0], backward_seconds=stages[0][1],
                              stage_seconds=stages)
    # 1F1B paced by stage 0 (busy m x its micro-batch time); the lighter stages idle more than it does. The time
    # model's bubble is the schedule's own idle time of stage 0, a few per cent at most below the simulation's
    busy0 = nmb * sum(stages[0])
    assert sched.total_seconds > busy0
    assert t.breakdown["bubble"] <= sched.total_seconds - busy0 + 1e-9
    assert t.breakdown["bubble"] == pytest.approx(sched.total_seconds - busy0, rel=0.05)
    busy3 = sum(e.end_s - e.start_s for e in sched.stage_events(3))
    assert busy3 == pytest.approx(nmb * sum(stages[3]), rel=1e-9)
    # an even split: the stages differ only by the output layer and loss on the last, drawn in seconds; in relative
    # units every stage is alike
    even = estimate(m, cluster, plan.replace(first_stage_layers=None, last_stage_layers=None))
    drawn = stage_durations(type("S", (), {"estimate": even}), 4)
    assert drawn[0] == drawn[1] == drawn[2] and sum(drawn[3]) > sum(drawn[0])
    assert stage_durations(type("S", (), {"estimate": even}), 4, units="relative") is None


def test_cli_estimate_uneven_and_the_hint(capsys):
    import json

    from workbench.cli import main

    base = ["estimate", "--model", "llama3-405b", "--gpu", "H100-SXM", "--nodes", "128", "--engine", "megatron",
            "--tp", "8", "--pp", "16", "--sp", "--distributed-optimizer", "--recompute", "full", "--gbs", "512"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7" in err
    assert "--account-for-embedding-in-pipeline-split" in err
    assert main(base + ["--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
                        "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["num_layers"] for s in out["memory"]["stages"]] == [7] + [8] * 14 + [7]
    per_stage = out["time"]["stage_microbatch_seconds"]
    assert len(per_stage) == 16 and sum(per_stage[1]) > sum(per_stage[0])
    assert main(base + ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]) == 0
    assert "layers per stage: 7 / 8 x 14 / 7" in capsys.readouterr().out


def test_parallel_panel_sets_an_uneven_split():
    from widgets.app import Workbench

    app = Workbench()  # the guide's 13B (40 layers) on 8 GPUs, TP 4 x PP 2
    try:
        par = next(p for p in app.panels if p.title == "Parallelism")
        par.controls["first_stage_layers"].value = 21  # the last stage takes the other 19
        assert app.state.valid and [s.num_layers for s in app.state.estimate.memory.stages] == [21, 19]
        par.controls["last_stage_layers"].value = 20
        assert not app.state.valid and "place 41 layers, more than num_layers=40" in par.error.value
        par.controls["last_stage_layers"].value = 19
        assert app.state.valid and (app.state.plan.first_stage_layers, app.state.plan.last_stage_layers) == (21, 19)
        assert "(layers 21 / 19)" in par.derived.value
        assert list(app.memory.fig.data[0].x) == ["stage 0 (21 layers, emb)", "stage 1 (19 layers, out)"]
        par.controls["first_stage_layers"].value = 0
        par.controls["last_stage_layers"].value = 0
        assert app.state.valid and app.state.plan.first_stage_layers is None
    finally:
        app.close()


def test_launcher_config_carries_the_split():
    tb = pytest.importorskip("megatron.core.transformer.transformer_block")
    from workbench.runs.model import transformer_config

    m = model("gpt3-125m", num_layers=9, seq_length=128)
    plan = ParallelPlan(world_size=2, engine="megatron", pipeline_parallel=2, first_stage_layers=5, global_batch_size=4)
    cfg = transformer_config(m, plan)
    assert [tb.get_num_layers_to_build(cfg, pp_rank=r) for r in range(2)] == list(plan.stage_layers(9)) == [5, 4]
