"""Context parallelism at long sequence: the K/V exchange by cp_comm_type, its overlap, memory per CP rank, the
rules Megatron / Transformer Engine impose, and the planner's CP axis."""
import numpy as np
import pytest

from workbench import memory as M
from workbench import planner
from workbench import timing as T
from workbench.catalog import model
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ParallelPlan, validate


def _h100(nodes=1):
    return ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=nodes)


def _plan(world, **kw):
    kw.setdefault("distributed_optimizer", True)
    return ParallelPlan(world_size=world, engine="megatron", global_batch_size=kw.pop("gbs", None), **kw)


def _links(gb_per_s=100.0, latency_s=1e-5):
    return {f"{g}_{k}": v for g in ("cp", "cp_ring", "cp_a2a")
            for k, v in (("gb_per_s", gb_per_s), ("latency_s", latency_s))}


def _inputs(m, c, plan):
    return T.time_inputs(m, c, plan)


def test_ring_step_is_exposed_only_by_what_its_transfer_exceeds_its_compute():
    m, c = model("llama3-8b", seq_length=8192), _h100()
    x = T.StepInputs(**{k: np.asarray(v, dtype=float) for k, v in _inputs(m, c, _plan(8, context_parallel=8)).items()
                        if v is not None})
    tokens = 8192 / 8
    kv_bytes = 2 * tokens * m.kv_projection_size * 2
    hop = T.p2p_seconds(kv_bytes, gb_per_s=100.0, latency_s=1e-5)
    slow = T.context_parallel_seconds(x, hop * 8 / 2, tokens, _links())  # each step's compute = half a send
    assert float(slow["cp_layer_forward_seconds"]) == pytest.approx(7 * hop / 2)
    fast = T.context_parallel_seconds(x, hop * 8 * 3, tokens, _links())  # compute 3x the send: hidden
    assert float(fast["cp_layer_forward_seconds"]) == 0.0
    assert float(fast["cp_layer_transfer_seconds"]) > 0.0


def test_long_sequence_hides_the_ring_and_the_all_gather_stays_exposed():
    m, c = model("llama3-8b", seq_length=131072), _h100()
    ring = estimate(m, c, _plan(8, context_parallel=8, recompute="full"))
    gather = estimate(m, c, _plan(8, context_parallel=8, recompute="full", cp_comm_type="all_gather"))
    assert ring.time.breakdown["cp_comm"] == 0.0  # 16k tokens per rank: attention outlasts every K/V send
    assert gather.time.breakdown["cp_comm"] > 0.0
    # the same attention work per rank whatever the exchange (2c chunks balance the causal mask)
    assert gather.time.breakdown["compute"] == pytest.approx(ring.time.breakdown["compute"], rel=1e-12)
    # a short sequence over a network hop: the ring can no longer hide
    short = model("llama3-8b", seq_length=8192)
    cross = estimate(short, _h100(2), _plan(16, tensor_parallel=8, context_parallel=2, sequence_parallel=True))
    assert cross.time.links["cp"]["link"] == "inter-node"


def test_causal_attention_flops_are_half_the_square_and_split_evenly_over_cp():
    m, c = model("llama3-8b", seq_length=32768), _h100()
    one = estimate(m, c, _plan(8, context_parallel=1, gbs=8, recompute="full"))
    eight = estimate(m, c, _plan(8, context_parallel=8, gbs=1, recompute="full"))
    assert eight.time.model_flops_per_step * 8 == pytest.approx(one.time.model_flops_per_step, rel=1e-12)
    s, q, L = 32768, m.query_projection_size, m.num_layers
    core = 3 * s * L * 4 * s * q * 0.5  # causal: half of the s x s products, 3 passes
    assert T.attention_core_flops_per_token(seq_length=s, query_projection_size=q, causal=1) * s * L * 3 == core


def test_memory_per_cp_rank_and_the_exchange_buffers():
    m, c = model("llama3-8b", seq_length=131072), _h100()
    one = estimate(m, c, _plan(8, context_parallel=1, gbs=8, recompute="full"))
    cp8 = estimate(m, c, _plan(8, context_parallel=8, recompute="full"))
    gather = estimate(m, c, _plan(8, context_parallel=8, recompute="full", cp_comm_type="all_gather"))
    a1, a8 = (e.memory.peak_stage.backward_activation_bytes for e in (one, cp8))
    assert a8 == pytest.approx(a1 / 8, rel=0.02)  # s/c tokens per rank, logits included
    # Megatron's distributed optimizer shards over data parallel x context parallel
    assert cp8.memory.peak_stage.terms.optimizer == pytest.approx(one.memory.peak_stage.terms.optimizer, rel=1e-9)
    buf = M.context_parallel_buffer_bytes
    kw = dict(micro_batch=1, tensor_parallel=1, context_parallel=8, value_bytes=2)
    assert buf(m, cp_comm_type=2, **kw) > buf(m, cp_comm_type=0, **kw) > 0 == buf(m, **{**kw, "context_parallel": 1})
    assert gather.memory.peak_stage.terms.buffers > cp8.memory.peak_stage.terms.buffers


def test_the_rules_of_context_parallelism():
    c = _h100()
    with pytest.raises(ValueError, match="needs attention='flash'"):
        validate(model("guide-13b", seq_length=8192), c, _plan(8, context_parallel=2))
    with pytest.raises(ValueError, match=r"num_query_groups=8 .* must divide by 16"):
        validate(model("llama3-8b"), _h100(2), _plan(16, context_parallel=16, cp_comm_type="a2a"))
    with pytest.raises(ValueError, match="product is context_parallel=8"):
        _plan(8, context_parallel=8, cp_comm_type="a2a+p2p", hierarchical_context_parallel_sizes=(2, 2))
    with pytest.raises(ValueError, match="needs engine 'megatron'"):
        ParallelPlan(world_size=8, engine="megatron-deepspeed", context_parallel=2)
    p = _plan(8, context_parallel=8, cp_comm_type="allgather")
    assert str(p.cp_comm_type) == "all_gather" and p.cp_a2a_size == 1
    h = _plan(8, context_parallel=8, cp_comm_type="a2a+p2p", hierarchical_context_parallel_sizes=[4, 2])
    assert h.hierarchical_context_parallel_sizes == (4, 2) and h.cp_a2a_size == 4
    assert str(_plan(8, cp_comm_type="a2a").cp_comm_type) == "p2p"  # without CP the exchange does not exist


def test_planner_searches_cp_where_it_can_run():
    c = _h100()
    flash = model("llama3-8b", seq_length=32768)
    table = planner.enumerate_candidates(flash, c, 8, engines=("megatron",), zero_stages=(0,), offload=False)
    cps = set(zip(table["cp"].tolist(), table["cp_comm"].tolist()))
    assert {(1, 0), (2, 0), (8, 0), (2, 1), (8, 1)} <= cps  # ring, and all-to-all (32 heads, 8 groups)
    fused = model("guide-13b", seq_length=32768)
    assert set(planner.enumerate_candidates(fused, c, 8, engines=("megatron",), zero_stages=(0,),
                                            offload=False)["cp"].tolist()) == {1}
    short = model("llama3-8b", seq_length=2048)  # 2048 / 8 = 256 tokens per rank: pruned
    assert 8 not in set(planner.enumerate_candidates(short, c, 8, engines=("megatron",), zero_stages=(0,),
                                                     offload=False)["cp"].tolist())


def test_advisor_on_long_context():
    from workbench import advisor

    c = _h100()
    fused = model("guide-13b", seq_length=32768)
    est = estimate(fused, c, _plan(8, tensor_parallel=8, sequence_parallel=True, recompute="full"))
    found = {f.id: f for f in est.checks}["long_context_attention"]
    assert found.status == "fail" and "32,768 x 32,768 score matrix" in found.message and "flash" in found.suggestion
    m = model("llama3-8b", seq_length=131072)
    plan = _plan(8, context_parallel=8, recompute="full")
    rec = estimate(m, c, plan, checks=False)
    choice = advisor.context_parallel_choice(m, c, plan, rec)
    assert choice.status == "warn" and "TP=8 + SP" in choice.message and "CP=8 keeps" in choice.message
    assert advisor.context_parallel_choice(model("llama3-8b"), c, plan, rec) is None  # 8k tokens: not long


def test_parallel_panel_sets_the_cp_exchange():
    from widgets.parallel_panel import ParallelPanel
    from widgets.state import SetModel, SetPlan, initial_state, reduce

    box = {"state": initial_state(plan={"engine": "megatron", "pipeline_parallel": 1, "tensor_parallel": 2})}  # the guide's 13B
    panel = ParallelPanel()

    def dispatch(action):
        box["state"] = reduce(box["state"], action)
        panel.show(box["state"])

    panel.set_dispatch(dispatch)
    try:
        panel.show(box["state"])
        panel.controls["context_parallel"].value = 4  # Megatron's fused softmax has no context parallelism
        assert not box["state"].valid and "needs attention='flash'" in panel.error.value
        dispatch(SetModel(changes={"attention": "flash"}))
        panel.controls["cp_comm_type"].value = "a2a+p2p"
        panel.controls["cp_a2a_group"].value = 2
        state = box["state"]
        assert state.valid and state.plan.hierarchical_context_parallel_sizes == (2, 2)
        assert "CP 4 (a2a+p2p)" in panel.derived.value and state.estimate.time.breakdown["cp_comm"] > 0
        dispatch(SetPlan(changes={"context_parallel": 1, "cp_comm_type": "p2p",
                                  "hierarchical_context_parallel_sizes": None}))
        assert box["state"].valid
    finally:
        panel.close()


def test_sweep_compares_cp_with_tp_on_the_same_gpus():
    from workbench.longcontext import context_parallel_sweep

    rows = context_parallel_sweep(model("llama3-8b"), _h100(), seq_lengths=[131072], cp_sizes=[1, 8])
    by = {(r["tp"], r["cp"]): r for r in rows}
    assert set(by) == {(1, 1), (1, 8), (8, 1)}
    assert by[(1, 8)]["tokens_per_gpu"] == 16384 and by[(1, 8)]["cp_transfer_seconds"] > 0
    assert by[(1, 8)]["cp_exposed_seconds"] == 0.0 and by[(8, 1)]["tp_comm_seconds"] > 0
    assert by[(8, 1)]["fits"] and not by[(1, 8)]["fits"]  # CP leaves the weights whole


def test_planner_explains_long_context_and_names_flash_when_nothing_fits():
    res = planner.search(model("llama3-8b", seq_length=65536), _h100(2), global_batch_size=4, engines=("megatron",),
                         top=3)
    assert "Long context: at 65,536 tokens" in res.explanation
    with pytest.raises(ValueError, match="attention='flash'"):
        planner.search(model("guide-13b", seq_length=65536), _h100(), global_batch_size=8, top=1)


def test_layout_warns_when_the_all_to_all_leaves_the_node_and_the_run_store_keeps_the_exchange():
    import json

    from workbench.layout import build_layout
    from workbench.runs.specio import specs_from_dict, specs_to_dict

    c = _h100(2)
    a2a = build_layout(c, _plan(16, tensor_parallel=2, context_parallel=8, cp_comm_type="a2a"))
    assert any("all-to-all group (stride" in w for w in a2a.warnings)
    plan = _plan(16, tensor_parallel=2, context_parallel=8, cp_comm_type="a2a+p2p",
                 hierarchical_context_parallel_sizes=(4, 2))
    assert not any("all-to-all group (stride" in w for w in build_layout(c, plan).warnings)
    data = json.loads(json.dumps(specs_to_dict(model("llama3-8b"), c, plan)))
    assert specs_from_dict(data)[2] == plan


def test_fused_attention_runs_at_its_measured_rate():
    # FlashAttention-3 (arXiv 2407.08608) Figures 5-6, cuDNN on H100 SXM5, BF16, head dim 128: causal forward
    # 315 TFLOP/s at 512 tokens and 539 at 16k; backward (2.5x the forward FLOPs) 305 and 516
    peak = 989e12
    kw = dict(peak_flops=peak, forward_efficiency_max=0.556, backward_efficiency_max=0.531, half_seq=380.0,
              backward_flops_ratio=2.5)
    for n, fwd_tflops, bwd_tflops in ((512, 315, 305), (16384, 539, 516)):
        fwd, bwd = T.flash_attention_seconds(1e12, n, **kw)
        assert 1e12 / fwd / 1e12 == pytest.approx(fwd_tflops, rel=0.03)
        assert 2.5e12 / bwd / 1e12 == pytest.approx(bwd_tflops, rel=0.03)
    # Megatron (Transformer Engine) gets the fused rate; a Hugging Face model (SDPA) its own measured one
    # (tests/test_hf_sdpa.py), and the GEMM curve with eager attention
    c = _h100()
    te = T.time_inputs(model("llama3-8b"), c, _plan(8))
    assert te["flash_forward_efficiency_max"] == 0.556
    hf = model("llama3-8b").replace(implementation="transformers")
    sdpa = T.calibration()["flash_attention"]["hopper_sdpa"]["by_head_dim"]["128"]["forward_efficiency_max"]
    assert T.time_inputs(hf, c, ParallelPlan(world_size=8, zero_stage=3))["flash_forward_efficiency_max"] == sdpa
    eager = hf.replace(attention="unfused")
    assert T.time_inputs(eager, c, ParallelPlan(world_size=8, zero_stage=3))["flash_forward_efficiency_max"] == 0


def test_default_largest_cp_grows_beyond_half_a_million_tokens():
    assert planner.default_max_context_parallel(131072) == 16
    assert planner.default_max_context_parallel(1048576) == 32  # NeMo's 1M-token run: CP=32


def test_throughput_advice_names_the_exchange():
    from workbench import advisor

    m, c = model("llama3-8b", seq_length=131072), _h100()
    plan = _plan(8, context_parallel=8, cp_comm_type="all_gather", recompute="full")
    rec = estimate(m, c, plan, checks=False)
    cp = next(s for s in advisor.throughput_suggestions(m, c, plan, rec.time) if s.term == "cp_comm")
    assert "all-gather" in cp.message and cp.settings == ("--cp-comm-type p2p",)
    assert cp.predicted_step_seconds < rec.time.step_seconds


def test_planner_searches_every_cp_exchange_and_says_why_one_wins():
    c = _h100(2)
    m = model("llama3-8b", seq_length=65536)  # 32 heads, 8 query groups
    assert planner.context_parallel_exchanges(m, 1, 1) == [(0, 1)]
    # CP=8 at TP=1: ring, all-gather, the hierarchical 2x4 and 4x2, and the all-to-all over 8
    assert planner.context_parallel_exchanges(m, 1, 8) == [(0, 1), (2, 1), (3, 2), (3, 4), (1, 8)]
    # TP=4 leaves 2 query groups per rank: no all-to-all over 4 ranks, hierarchical only with a = 2
    assert planner.context_parallel_exchanges(m, 4, 4) == [(0, 1), (2, 1), (3, 2)]
    table = planner.enumerate_candidates(m, c, 4, engines=("megatron",), zero_stages=(0,), offload=False)
    i = int(np.flatnonzero((table["cp_comm"] == 3) & (table["cp"] == 8) & (table["cp_a2a"] == 2))[0])
    plan = planner._plan_at(table, i, c, 4, "bf16")
    assert plan.hierarchical_context_parallel_sizes == (2, 4) and plan.cp_a2a_size == 2
    res = planner.search(m, c, global_batch_size=4, engines=("megatron",), top=3)
    note = [ln for ln in res.explanation.splitlines() if ln.startswith("CP exchange")]
    assert len(note) == 1 and "all_gather" in note[0] and "p2p" in note[0] and " wins: " in note[0]


def test_cp_exchange_note_compares_one_plan_only():
    """A transformers model's table also searches how many layers are checkpointed (``recompute_layers``): the note
    compares the winner with its exchanges alone, not with the same exchange at other checkpoint counts; a
    DeepSpeed-Ulysses winner has no other exchange, so no note."""
    from pathlib import Path

    hf = model(f"hf:{Path(__file__).parent / 'data' / 'hf' / 'llama3-8b'}", seq_length=4096)
    c = ClusterSpec(gpu="A100-40GB", gpus_per_node=8)
    res = planner.search(hf, c, global_batch_size=64, top=3)
    assert res.ranked[0].plan.is_ulysses, "the fixture's winner changed: pick a case whose winner uses Ulysses"
    assert not [ln for ln in res.explanation.splitlines() if ln.startswith("CP exchange")]
    table = planner.with_hf_checkpoint_counts({"tp": np.array([1, 1, 1]), "cp": np.array([2, 2, 4]),
                                               "cp_comm": np.array([0, 2, 0]), "cp_a2a": np.array([1, 1, 1]),
                                               "recompute": np.full(3, M.RECOMPUTE_CODES["full"])}, 4)
    n = len(table["tp"])
    ev = {"step_seconds": np.arange(n, dtype=float) + 1, "peak_bytes": np.full(n, 1e9), "terms": {"cp_comm": 0.0}}
    note = planner.cp_exchange_note(table, ev, 0, range(n))
    assert note.count(" s (exchange exposed") == 2 and "p2p 1.000 s" in note and "all_gather 2.000 s" in note


def test_one_sequence_split_three_ways_on_the_same_gpus():
    from workbench.longcontext import sequence_split_comparison

    m, c = model("llama3-8b", seq_length=32768), _h100(2)
    rows = sequence_split_comparison(m, c, sizes=[8, 16, 3])
    by = {r["layout"]: r for r in rows}
    assert [r["layout"] for r in rows[:6]] == ["ZeRO-3 + full recompute", "Ulysses 8", "CP 8 p2p", "CP 8 all_gather",
                                               "CP 8 a2a", "CP 8 a2a+p2p 4x2"]
    # the heads cap Ulysses and Megatron's a2a at gcd(32, 8) = 8; 3 does not divide the 16 GPUs
    assert {r["layout"] for r in rows if r["error"]} == {"Ulysses 16", "CP 16 a2a", "size 3"}
    assert "largest Ulysses size for llama3-8b is 8" in by["Ulysses 16"]["error"]
    assert by["Ulysses 16"]["peak_gib"] is None and "world_size=16" in by["size 3"]["error"]
    # each row is estimate() of its plan, the same global batch everywhere
    u = estimate(m, c, ParallelPlan(world_size=16, engine="deepspeed", zero_stage=3, ulysses=8, global_batch_size=16,
                                    recompute="full"), checks=False)
    assert by["Ulysses 8"]["step_seconds"] == u.time.step_seconds
    assert by["Ulysses 8"]["cp_exposed_seconds"] == pytest.approx(by["CP 8 a2a"]["cp_exposed_seconds"])
    assert by["Ulysses 8"]["tokens_per_gpu"] == by["CP 16 p2p"]["tokens_per_gpu"] * 2 == 4096
    # Ulysses keeps 1/8 of ZeRO-3's activations; Megatron CP the same activations but whole weights
    assert by["Ulysses 8"]["activations_gib"] == pytest.approx(by["ZeRO-3 + full recompute"]["activations_gib"] / 8,
                                                               rel=0.05)
    assert by["Ulysses 8"]["peak_gib"] < min(by["CP 8 p2p"]["peak_gib"], by["ZeRO-3 + full recompute"]["peak_gib"])
    assert by["CP 8 p2p"]["cp_exposed_seconds"] == 0.0 < by["CP 8 all_gather"]["cp_exposed_seconds"]
