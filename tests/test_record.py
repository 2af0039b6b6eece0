"""The evaluated-plan record: one validation and one parameter count per estimate, the record's numbers are the ones
the models computed, the advisor reads them instead of pricing the plan again, and the one node-crossing rule."""
import numpy as np
import pytest

from workbench import advisor, estimate as E, params
from workbench.catalog import gpu, model
from workbench.layout import build_layout
from workbench.parallel import group_crosses_nodes, parallel_facts
from workbench.specs import ClusterSpec, ParallelPlan


def _setup(nodes=2, **kw):
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=nodes)
    base = dict(world_size=c.world_size, engine="megatron", tensor_parallel=4, pipeline_parallel=2,
                global_batch_size=64)
    base.update(kw)
    return model("llama3-8b", attention="flash"), c, ParallelPlan(**base)


def test_one_validation_and_one_parameter_count_per_estimate(monkeypatch):
    m, c, p = _setup()
    calls = {"validate": 0, "counts": 0}
    real_validate, real_counts = E.validate, params.parameter_counts

    def validate(*a, **k):
        calls["validate"] += 1
        return real_validate(*a, **k)

    def counts(*a, **k):
        calls["counts"] += 1
        return real_counts(*a, **k)

    monkeypatch.setattr(E, "validate", validate)
    monkeypatch.setattr(params, "parameter_counts", counts)
    est = E.estimate(m, c, p)
    assert calls == {"validate": 1, "counts": 1}
    assert est.to_dict()["model"]["parameters"] == est.counts.total


def test_record_keeps_what_the_models_computed():
    m, c, p = _setup()
    est = E.estimate(m, c, p)
    t = est.time
    layers = m.num_layers / p.pipeline_parallel
    assert 0 < t.layer_forward_seconds < t.layer_backward_seconds
    assert layers * (t.layer_forward_seconds + t.layer_backward_seconds) < (t.microbatch_forward_seconds
                                                                            + t.microbatch_backward_seconds)
    assert t.links["tp"] == {"group_size": 4, "link": "intra-node", "gb_per_s": pytest.approx(t.inputs[
        "intra_node_gb_per_s"]), "latency_s": t.inputs["intra_node_latency_s"]}
    # ranks tp-cp-dp-pp: the dp pair (4 apart) shares a node, the two pipeline stages (8 apart) do not
    assert t.links["dp"]["link"] == "intra-node" and t.links["dp"]["group_size"] == 2
    assert t.links["pp"]["link"] == "inter-node" and t.links["pp"]["group_size"] == 2
    assert len(est.memory.stages) == 2 and len(est.facts.parameters_per_rank) == 2
    d = est.to_dict()
    assert d["parallel"]["crosses_nodes"]["pp"] is True and d["parallel"]["crosses_nodes"]["dp"] is False


def test_advise_reads_the_record_instead_of_pricing_the_plan_again(monkeypatch):
    m, c, p = _setup(nodes=1, engine="deepspeed", tensor_parallel=1, pipeline_parallel=1, zero_stage=1)
    est = E.estimate(m, c, p)
    priced = []
    real = advisor._evaluated
    monkeypatch.setattr(advisor, "_evaluated", lambda mm, cc, pp, profile=None: priced.append(pp) or real(mm, cc, pp))
    a = advisor.advise(m, c, p, record=est)
    assert p not in priced  # alternatives are priced, the plan itself is not
    b = advisor.advise(m, c, p)
    assert priced.count(p) == 1
    assert [f.message for f in a.findings] == [f.message for f in b.findings]


@pytest.mark.parametrize("n", [2, 4, 6, 8])
@pytest.mark.parametrize("sizes", [(1, 1, 4, 3), (2, 1, 3, 2), (3, 2, 2, 1), (6, 1, 2, 2), (4, 2, 3, 1),
                                   (1, 3, 1, 4), (8, 1, 2, 3)])
def test_the_one_crossing_rule_matches_the_enumerated_layout(n, sizes):
    t, cp, d, pp = sizes
    world = t * cp * d * pp
    if world % n:
        return
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=n, num_nodes=world // n)
    plan = ParallelPlan(world_size=world, engine="megatron", tensor_parallel=t, context_parallel=cp,
                        pipeline_parallel=pp, global_batch_size=d)
    facts = parallel_facts(model("llama3-8b"), c, plan)
    layout = build_layout(c, plan)
    for kind in ("tp", "cp", "dp", "pp", "tp-cp", "dp-cp"):
        groups = layout.groups(kind) if hasattr(layout, "groups") else None
        if groups is None:
            continue
        enumerated = any(len({r // n for r in g}) > 1 for g in groups)
        assert facts.crosses_nodes[kind] == enumerated, (kind, sizes, n)
    assert np.array_equal(group_crosses_nodes(np.array([1, 1]), np.array([3, 4]), 8), [True, False])


@pytest.mark.parametrize("kw", [dict(), dict(pipeline_parallel=1), dict(pipeline_parallel=4, tensor_parallel=1),
                                dict(pipeline_parallel=4, tensor_parallel=2, first_stage_layers=6,
                                     last_stage_layers=10)])
def test_time_model_prices_the_largest_stage_of_the_facts(kw):
    """Data-parallel bytes and the optimizer step are priced on the parameters of the stage that holds the most of
    them — the record's ParallelFacts, not total ÷ (t·p) (the embedding sits on the first stage, the untied output
    layer on the last)."""
    m, c, p = _setup(**kw)
    est = E.estimate(m, c, p)
    assert est.time.inputs["stage_parameters"] == pytest.approx(max(est.facts.parameters_per_rank))
    if p.pipeline_parallel > 1:
        assert max(est.facts.parameters_per_rank) > est.parameter_counts.total / (p.tensor_parallel
                                                                                   * p.pipeline_parallel)
