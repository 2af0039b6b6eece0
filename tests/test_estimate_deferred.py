"""``estimate()`` leaves the layout, parallel facts and advisor findings to their first reader: every way of reading
the record sees the same values an eager computation gives."""
import dataclasses
import pickle

from workbench import ClusterSpec, ParallelPlan, catalog
from workbench.advisor import check_plan
from workbench.estimate import estimate
from workbench.layout import build_layout
from workbench.parallel import parallel_facts

MODEL = catalog.model("guide-13b")
CLUSTER = ClusterSpec(gpu="A100-80GB", gpus_per_node=8)
PLAN = ParallelPlan(world_size=8, engine="megatron", tensor_parallel=4, pipeline_parallel=2, global_batch_size=64)


def test_deferred_fields_equal_eager_computation():
    est = estimate(MODEL, CLUSTER, PLAN)
    facts = parallel_facts(MODEL, CLUSTER, PLAN)
    assert est.facts == facts
    assert est.layout == build_layout(CLUSTER, PLAN, model=MODEL)
    eager = check_plan(MODEL, CLUSTER, PLAN, memory=est.memory, time=est.time, facts=facts, counts=est.counts)
    assert isinstance(est.checks, tuple) and est.checks == eager and est.checks
    assert estimate(MODEL, CLUSTER, PLAN, checks=False).checks == ()


def test_deferred_fields_survive_replace_pickle_and_compare():
    est = estimate(MODEL, CLUSTER, PLAN)
    copy = dataclasses.replace(est)  # reads every field: computes the deferred ones
    assert copy == est and copy.checks == est.checks
    assert pickle.loads(pickle.dumps(estimate(MODEL, CLUSTER, PLAN))) == est
    assert estimate(MODEL, CLUSTER, PLAN).to_dict() == est.to_dict()
    assert dataclasses.replace(estimate(MODEL, CLUSTER, PLAN), checks=()).checks == ()
