"""Parallel layout against megatron-core's own RankGenerator (order tp-cp-ep-dp-pp)."""
import warnings

import pytest

from workbench.catalog import gpu, model
from workbench.layout import GROUP_KINDS, build_layout, rank_groups
from workbench.specs import ClusterSpec, ParallelPlan

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.parallel_state import RankGenerator

COMBOS = [(2, 1, 2, 2), (2, 2, 2, 2), (4, 1, 2, 3), (1, 2, 3, 2), (8, 1, 4, 2), (2, 3, 1, 2), (1, 1, 8, 1)]


@pytest.mark.parametrize("t,c,d,p", COMBOS)
def test_groups_match_megatron_rank_generator(t, c, d, p):
    gen = RankGenerator(tp=t, ep=1, dp=d, pp=p, cp=c, order="tp-cp-ep-dp-pp")
    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    for kind in GROUP_KINDS:
        assert rank_groups(sizes, kind) == gen.get_ranks(kind), kind


def _layout(t=2, c=1, p=2, gpus_per_node=8, nodes=2, engine="megatron"):
    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=gpus_per_node, num_nodes=nodes)
    plan = ParallelPlan(world_size=cluster.world_size, engine=engine, tensor_parallel=t, context_parallel=c,
                        pipeline_parallel=p)
    return build_layout(cluster, plan), plan


@pytest.mark.parametrize("t,c,p", [(2, 1, 2), (4, 2, 2), (1, 2, 4), (8, 1, 1)])
def test_coords_consistent_with_groups(t, c, p):
    layout, plan = _layout(t=t, c=c, p=p)
    for kind in ("tp", "cp", "dp", "pp"):
        for group in layout.groups(kind):
            coords = [layout.rank(r) for r in group]
            # members differ only along this dimension, which runs 0..size-1
            assert sorted(getattr(x, kind) for x in coords) == list(range(layout.sizes[kind]))
            for other in set(("tp", "cp", "dp", "pp")) - {kind}:
                assert len({getattr(x, other) for x in coords}) == 1
    r = layout.rank(13)
    assert r.rank == 13 and r.node == 1 and r.local_rank == 5
    assert 13 == r.tp + t * (r.cp + c * (r.dp + plan.data_parallel * r.pp))


def test_tp_inside_node_no_warning_and_across_node_warns():
    layout, _ = _layout(t=8, p=1, gpus_per_node=8, nodes=2)
    assert layout.max_nodes_spanned("tp") == 1
    assert not any("tensor-parallel" in w for w in layout.warnings)
    layout, _ = _layout(t=8, p=1, gpus_per_node=4, nodes=4)
    assert layout.max_nodes_spanned("tp") == 2
    assert any("tensor_parallel=8 > gpus_per_node=4" in w for w in layout.warnings)


def test_tp_cp_group_crossing_nodes_warns():
    layout, _ = _layout(t=4, c=4, p=1, gpus_per_node=8, nodes=2)
    assert layout.max_nodes_spanned("tp") == 1
    assert layout.max_nodes_spanned("tp-cp") == 2
    assert any("context-parallel" in w for w in layout.warnings)


def test_pp_boundary_inside_node_is_fine():
    layout, _ = _layout(t=2, p=4, gpus_per_node=8, nodes=1)
    assert layout.warnings == ()
    assert layout.stage_nodes() == [[0], [0], [0], [0]]


def test_uneven_stages_warn():
    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=1)
    plan = ParallelPlan(world_size=8, engine="megatron", pipeline_parallel=8)
    m = model("guide-13b")  # 40 layers over 8 stages: even
    assert not build_layout(cluster, plan, model=m).warnings
    m = m.replace(num_layers=42)
    assert any("uneven pipeline stages" in w for w in build_layout(cluster, plan, model=m).warnings)


def test_to_dict_and_errors():
    layout, _ = _layout(t=2, p=2)
    d = layout.to_dict()
    assert d["order"] == "tp-cp-ep-dp-pp" and len(d["ranks"]) == 16
    assert d["groups"]["tp-pp"] == layout.groups("mp")
    with pytest.raises(ValueError, match="rank=16"):
        layout.rank(16)
    with pytest.raises(ValueError, match="group kind"):
        layout.groups("xp")
    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=1)
    with pytest.raises(ValueError, match="world_size=16"):
        build_layout(cluster, ParallelPlan(world_size=16))


def _brute_nodes_spanned(sizes, kind, n):
    return max(len({r // n for r in g}) for g in rank_groups(sizes, kind))


@pytest.mark.parametrize("t,c,d,p", [(2, 1, 2, 2), (4, 2, 3, 2), (3, 2, 4, 1), (8, 1, 4, 2), (1, 3, 4, 2),
                                     (6, 1, 2, 4), (2, 2, 2, 3)])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8])
def test_nodes_spanned_and_group_of_by_arithmetic_match_enumeration(t, c, d, p, n):
    from workbench.layout import Layout, nodes_spanned

    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    world = t * c * d * p
    if world % n:
        return
    layout = Layout(world_size=world, gpus_per_node=n, tensor_parallel=t, context_parallel=c, data_parallel=d,
                    pipeline_parallel=p)
    for kind in GROUP_KINDS:
        assert nodes_spanned(sizes, kind, n) == _brute_nodes_spanned(sizes, kind, n), kind
        groups = rank_groups(sizes, kind)
        assert layout.group_count(kind) == len(groups)
        for r in range(0, world, max(1, world // 7)):
            index, members = layout.group_of(r, kind)
            assert groups[index] == members and r in members
            assert layout.group_of(r, kind, limit=2)[1] == members[:2]


def test_a_million_gpus_is_summarised_not_enumerated(monkeypatch):
    import time

    import workbench.layout

    from workbench.estimate import estimate

    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=2**17)
    plan = ParallelPlan(world_size=2**20, engine="megatron", tensor_parallel=16, pipeline_parallel=8,
                        global_batch_size=2**16)
    start = time.perf_counter()
    est = estimate(model("gpt3-1.3b").replace(num_layers=32), cluster, plan)
    d = est.to_dict()["layout"]
    assert time.perf_counter() - start < 1.0
    assert "ranks" not in d and d["group_counts"]["tp"] == 2**16 and d["nodes_spanned"]["tp"] == 2
    assert d["nodes_spanned"]["dp"] == 2**13 and d["stage_node_ranges"][1] == [2**14, 2**15 - 1]
    assert any("tensor_parallel=16 > gpus_per_node=8" in w for w in est.layout.warnings)
    r = est.layout.rank(2**20 - 1)
    assert (r.node, r.tp, r.dp, r.pp) == (2**17 - 1, 15, 2**13 - 1, 7)
    monkeypatch.setattr(workbench.layout, "MAX_ENUMERATED", 2**19)
    with pytest.raises(ValueError, match="would list every rank"):
        est.layout.groups("dp")


@pytest.mark.parametrize("te,e,p,nodes", [(1, 4, 1, 1), (2, 4, 2, 2), (2, 2, 1, 2), (1, 8, 2, 2)])
def test_expert_groups_match_megatron_expert_rank_generator(te, e, p, nodes):
    """MoE layers' groups: megatron-core's expert generator (tp=expert TP, ep, dp=expert DP, pp, cp=1)."""
    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=nodes)
    mixtral = model("mixtral-8x7b")
    t = 2 if te == 2 else 1
    plan = ParallelPlan(world_size=cluster.world_size, engine="megatron", tensor_parallel=t, pipeline_parallel=p,
                        sequence_parallel=t > 1, expert_parallel=e, expert_tensor_parallel=te)
    layout = build_layout(cluster, plan, model=mixtral)
    de = cluster.world_size // (te * e * p)
    gen = RankGenerator(tp=te, ep=e, dp=de, pp=p, cp=1, order="tp-cp-ep-dp-pp")
    for kind, token in (("etp", "tp"), ("ep", "ep"), ("edp", "dp"), ("etp-ep", "tp-ep")):
        assert layout.expert_groups(kind) == gen.get_ranks(token), kind
    # the pipeline groups are the same in both orders (megatron-core asserts it)
    assert rank_groups(layout.expert_sizes, "pp", ("etp", "ep", "edp", "pp")) == layout.groups("pp")
    # each rank holds num_experts / e consecutive experts, the same ones across its expert-data-parallel group
    ranks = {r: layout.expert_rank(r) for r in range(cluster.world_size)}
    assert all(len(c["experts"]) == 8 // e for c in ranks.values())
    for group in layout.expert_groups("edp"):
        assert len({tuple(ranks[r]["experts"]) for r in group}) == 1


def test_expert_parallel_across_nodes_is_flagged():
    cluster = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=4, num_nodes=2)
    plan = ParallelPlan(world_size=8, engine="megatron", expert_parallel=8)
    layout = build_layout(cluster, plan, model=model("mixtral-8x7b"))
    assert layout.expert_nodes_spanned("ep") == 2
    assert any("expert-parallel group" in w and "all-to-all" in w for w in layout.warnings)
    assert layout.to_dict()["expert"]["experts_per_rank"] == 1
