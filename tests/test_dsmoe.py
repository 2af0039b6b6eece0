"""DeepSpeed-MoE (deepspeed.moe.layer.MoE): plan rules, capacity, per-rank expert states, activations, time, export."""
import numpy as np
import pytest

from workbench import dsmoe
from workbench import encode
from workbench import memory as M
from workbench.catalog import gpu, model
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, validate

MIXTRAL = model("mixtral-8x7b").replace(seq_length=4096)


def _cluster(nodes=2, per_node=8):
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=per_node, num_nodes=nodes)


def _plan(world=16, **kw):
    kw.setdefault("engine", "deepspeed")
    kw.setdefault("zero_stage", 2)
    return ParallelPlan(world_size=world, **kw)


@pytest.mark.parametrize("kw, needle", [
    (dict(expert_parallel=8, zero_stage=3), "zero_stage=3 with DeepSpeed-MoE"),
    (dict(moe_capacity_factor=1.0, zero_stage=3), "Native DeepSpeed MoE is not supported with ZeRO Stage 3"),
    (dict(expert_parallel=2, tensor_parallel=2, engine="megatron-deepspeed"), "DeepSpeed-MoE is modelled without tensor parallelism"),
    (dict(expert_parallel=8, pipeline_parallel=4, zero_stage=1), "expert_parallel=8 does not divide world_size(16) / "
                                                   "pipeline_parallel(4) = 4"),
    (dict(expert_parallel=2, expert_tensor_parallel=1), "expert_tensor_parallel=1 is Megatron's"),
    (dict(expert_parallel=2, moe_overlap_alltoall=True), "moe_overlap_alltoall=True is Megatron's"),
    (dict(expert_parallel=16), "expert_parallel=16 does not divide num_experts=8"),
])
def test_deepspeed_refusals_name_the_fields_and_numbers(kw, needle):
    with pytest.raises(ValueError) as err:
        validate(MIXTRAL, _cluster(), _plan(**kw))
    assert needle in str(err.value)


def test_deepspeed_moe_is_selected_by_ep_or_a_capacity_factor():
    assert _plan(expert_parallel=8).deepspeed_moe and _plan(moe_capacity_factor=1.5).deepspeed_moe
    assert not _plan().deepspeed_moe  # the model's own MoE block (e.g. transformers' dropless Mixtral)
    assert not _plan(engine="megatron", zero_stage=0, expert_parallel=8).deepspeed_moe
    p = _plan(expert_parallel=8, pipeline_parallel=2, zero_stage=1)
    # ep consecutive ranks per stage, expert data parallel over the rest (groups._create_expert_and_data_parallel)
    assert (p.expert_tensor_parallel_size, p.expert_data_parallel) == (1, 1)
    assert _plan(expert_parallel=4).expert_data_parallel == 4


def test_capacity_matches_deepspeeds_formula():
    torch = pytest.importorskip("torch")
    from deepspeed.moe.sharded_moe import _capacity

    for tokens, experts, k, factor in [(48, 4, 1, 1.25), (48, 4, 2, 1.25), (4096, 8, 2, 1.0), (10, 64, 1, 1.0),
                                       (8192, 64, 4, 1.1)]:
        want = int(_capacity(torch.zeros(tokens, experts), torch.tensor(factor * k), torch.tensor(4)))
        assert int(dsmoe.expert_capacity(tokens, num_experts=experts, top_k=k, capacity_factor=factor)) == want
    # min_capacity binds for few tokens over many experts: the experts compute padded rows
    tiny = MIXTRAL.replace(seq_length=64, num_experts=64)
    assert dsmoe.token_factor(tiny, _plan(expert_parallel=8)) == pytest.approx(64 * 4 / (2 * 64))


def test_a_real_moe_layer_has_the_counted_parameters_and_capacity_rows():
    """One process, no process group: deepspeed.moe.layer.MoE's parameters and the rows its experts receive."""
    torch = pytest.importorskip("torch")
    from deepspeed.moe.layer import MoE

    tiny = ModelSpec(name="tiny-moe", num_layers=1, hidden_size=16, num_attention_heads=2, ffn_hidden_size=32,
                     vocab_size=64, seq_length=24, num_experts=4, moe_top_k=2, activation="gelu",
                     add_bias_linear=True)
    plan = _plan(world=1, zero_stage=1, micro_batch_size=2, moe_capacity_factor=1.25)
    expert = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    layer = MoE(hidden_size=16, expert=expert, num_experts=4, ep_size=1, k=2, capacity_factor=1.25)
    rows = []
    layer.deepspeed_moe.experts.register_forward_pre_hook(lambda mod, args: rows.append(tuple(args[0].shape)))
    layer(torch.randn(2, 24, 16))
    router = 16 * 4  # the gate's bias-free wg
    assert sum(p.numel() for p in layer.parameters()) == M.expert_params_per_rank(tiny, 1, 1) + router
    assert rows == [(1, 4, dsmoe.expert_capacity_of(tiny, plan), 16)]
    # E·C / (k·S): 4 experts × 30 rows over 2 × 48 routed copies
    assert dsmoe.token_factor(tiny, plan) == pytest.approx(4 * 30 / (2 * 48))
    # the optimizer split the export prints: the MoE group (what ZeRO-1/2 partition over the expert-data-parallel
    # group) holds exactly the expert parameters the memory model shards there; the gate stays with the dense ones
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    groups = split_params_into_different_moe_groups_for_optimizer({"params": list(layer.parameters()),
                                                                   "name": "params"})
    moe = [g for g in groups if g.get("moe")]
    assert [g["name"] for g in moe] == ["ep_size_1"]
    assert sum(p.numel() for g in moe for p in g["params"]) == M.expert_params_per_rank(tiny, 1, 1)
    assert sum(p.numel() for g in groups if not g.get("moe") for p in g["params"]) == router


def test_expert_states_partition_over_the_expert_data_parallel_group():
    cl = _cluster()
    one, ep8 = (estimate(MIXTRAL, cl, _plan(expert_parallel=e, micro_batch_size=1)) for e in (1, 8))
    experts = MIXTRAL.num_layers * M.expert_params_per_rank(MIXTRAL, 1, 1)
    # ZeRO-2: fp32 master + Adam moments (12 bytes) and 16-bit gradients sharded; experts over world/ep = 2 ranks
    # with EP 8 (each holds 1 of 8 experts), over all 16 without
    saved_opt = one.memory.stages[0].terms.optimizer - ep8.memory.stages[0].terms.optimizer
    assert saved_opt == pytest.approx(12 * experts / 16 - 12 * experts / 8 / 2, rel=1e-6)
    saved_w = one.memory.stages[0].terms.weights - ep8.memory.stages[0].terms.weights
    assert saved_w == pytest.approx(2 * experts * (1 - 1 / 8), rel=1e-6)
    assert ep8.time.breakdown["ep_comm"] > 0 and one.time.breakdown["ep_comm"] == 0


def test_activations_add_the_gate_input_and_combine_and_scale_with_capacity():
    cl = _cluster()
    base = _plan(expert_parallel=8, micro_batch_size=1)
    cols = encode.plan_columns(base, MIXTRAL)
    assert cols["moe_ds"] == 1 and cols["moe_tf"] == pytest.approx(1.0)
    kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, recompute=0,
              value_bytes=2, expert_tensor_parallel=1)
    mega = M.layer_activation_bytes(MIXTRAL, **kw)[0]
    ds = M.layer_activation_bytes(MIXTRAL, moe_deepspeed=1, **kw)[0]
    s, h = 4096, MIXTRAL.hidden_size
    # fp32 gate input + k copies of the combine; DeepSpeed-MoE's experts keep the glu's sum and product (2f per
    # copy, the catalog Mixtral's megatron-core experts run the fused kernel) and its gate keeps fp32 logits and
    # probabilities (8·E per token) in place of megatron-core's router and permutation metadata
    f, e = MIXTRAL.moe_ffn_hidden_size, MIXTRAL.num_experts
    router = s * (8 * e - M.moe_router_bytes_per_token(MIXTRAL, value_bytes=2))
    assert ds - mega == pytest.approx(4 * s * h + 2 * 2 * s * h + 2 * 2 * (2 * s) * f + router)
    # a larger capacity factor pads every expert: more activation memory and more all-to-all and GEMM time
    lo, hi = (estimate(MIXTRAL, cl, base.replace(moe_capacity_factor=f)) for f in (1.0, 2.0))
    assert hi.memory.stages[0].terms.activations > lo.memory.stages[0].terms.activations
    assert hi.time.breakdown["ep_comm"] == pytest.approx(2 * lo.time.breakdown["ep_comm"], rel=0.05)
    assert hi.time.breakdown["compute"] > lo.time.breakdown["compute"]
    # the larger of the [E, C, h] dispatch buffer (E·C = k·S·token_factor) and the combine's fp32 product + sum
    assert dsmoe.transient_bytes(MIXTRAL, tokens=s, value_bytes=2, token_factor=1.0) == 4 * (2 + 1) * s * h
    assert dsmoe.transient_bytes(MIXTRAL, tokens=s, value_bytes=2, token_factor=4.0) == 2 * 2 * s * 4 * h


def test_export_prints_the_moe_layer_arguments_and_the_param_group_split():
    snippet = dsmoe.moe_layer_snippet(MIXTRAL, _plan(expert_parallel=8, moe_capacity_factor=1.25))
    assert "MoE(hidden_size=4096" in snippet and "num_experts=8, ep_size=8, k=2" in snippet
    assert "capacity_factor=1.25" in snippet and "min_capacity=4" in snippet
    assert "split_params_into_different_moe_groups_for_optimizer" in snippet
    assert "= 1280 tokens" in snippet and "reduced over 2 ranks" in snippet


def test_megatron_deepspeed_flags_round_trip_and_export_writes_the_layer(tmp_path, capsys):
    from workbench.cli import main
    from workbench.configs.hybrid import hybrid_args
    from workbench.configs.importer import import_megatron_args

    c = _cluster()
    plan = _plan(engine="megatron-deepspeed", zero_stage=1, expert_parallel=4, moe_capacity_factor=1.5)
    args = hybrid_args(MIXTRAL, c, plan)
    assert args[args.index("--moe-expert-parallel-size") + 1] == "4"
    assert args[args.index("--moe-train-capacity-factor") + 1] == "1.5" and "--create-moe-param-group" in args
    imported = import_megatron_args(["pretrain_gpt.py", *args, "--disable-moe-token-dropping"])
    assert imported.plan_fields["expert_parallel"] == 4 and imported.plan_fields["moe_capacity_factor"] == 1.5
    assert any("--disable-moe-token-dropping" in w for w in imported.warnings)
    assert not [w for w in imported.warnings if "create-moe-param-group" in w or "unknown" in w.lower()]
    code = main(["export", "deepspeed", "--model", "mixtral-8x7b", "--gpus-per-node", "8", "--nodes", "2",
                 "--ep", "8", "--zero", "2", "--seq", "4096", "--out", str(tmp_path)])
    assert code == 0 and "ep_size=8" in (tmp_path / "moe_layer.py").read_text()
    assert main(["estimate", "--model", "mixtral-8x7b", "--gpus-per-node", "8", "--nodes", "2", "--engine",
                 "deepspeed", "--ep", "8", "--zero", "3"]) == 2
    assert "Native DeepSpeed MoE is not supported with ZeRO Stage 3" in capsys.readouterr().err


def test_planner_searches_ep_under_deepspeed_and_agrees_with_estimate():
    from workbench import planner

    tiny = ModelSpec(name="tiny-moe", num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024,
                     num_experts=8, moe_top_k=2, seq_length=512, activation="swiglu", attention="flash",
                     add_bias_linear=False)
    c = _cluster(2, 4)
    table = planner.enumerate_candidates(tiny, c, 16, engines=("deepspeed",), offload=False, recompute=("none",))
    rows = {(int(e), int(z)) for e, z in zip(table["ep"], table["zero"])}
    assert {(1, 3), (2, 2), (8, 1)} <= rows and not any(e > 1 and z == 3 for e, z in rows)
    for i in range(0, len(table["tp"]), 11):
        p = planner._plan_at(table, i, c, 16, "bf16")
        validate(tiny, c, p)
        assert p.deepspeed_moe == (p.expert_parallel > 1)
    found = planner.search(tiny, c, global_batch_size=16, engines=("deepspeed",), zero_stages=(1, 2), top=40)
    ds = [r for r in found.ranked if r.plan.expert_parallel > 1][0]
    est = estimate(tiny, c, ds.plan, checks=False)
    assert ds.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    assert ds.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)


def test_oom_ladder_raises_deepspeed_moe_ep_size_before_zero3():
    from workbench.advisor import oom_ladder

    c = _cluster(4)
    ladder = oom_ladder(MIXTRAL, c, _plan(32, recompute="full", zero_stage=1, global_batch_size=32))
    assert ladder[-1].fits and ladder[-1].step == 4 and ladder[-1].plan.expert_parallel > 1
    # ZeRO-1 -> ZeRO-2 came first (step 3) and did not fit; ZeRO-3 waits for the ep_size rung
    assert [(s.step, s.plan.zero_stage) for s in ladder if s.step == 3] == [(3, 2)] and not ladder[-2].fits
    assert ladder[-1].plan.deepspeed_moe and "DeepSpeed-MoE ep_size 1 →" in ladder[-1].action


def test_parallel_panel_names_deepspeed_moe_capacity():
    from widgets.parallel_panel import ParallelPanel
    from widgets.state import initial_state

    state = initial_state(preset="mixtral-8x7b", cluster={"gpus_per_node": 8, "num_nodes": 1},
                          plan={"engine": "deepspeed", "zero_stage": 2, "tensor_parallel": 1,
                                "pipeline_parallel": 1, "expert_parallel": 8, "micro_batch_size": 1},
                          estimator=lambda *a, **k: None)
    panel = ParallelPanel()
    panel.show(state)
    assert "DeepSpeed-MoE: capacity" in panel.derived.value and "EP 8</b> (1 per rank)" in panel.derived.value
    panel.close()


def test_fp32_gate_and_combine_traffic_is_priced():
    c = _cluster()
    plan = _plan(expert_parallel=8, micro_batch_size=1)
    x = encode.time_inputs(MIXTRAL, c, encode.plan_columns(plan, MIXTRAL), plan.precision)
    from workbench import timing as T

    with_ds = T.step_time_terms(**x)["layer_forward_seconds"]
    without = T.step_time_terms(**{**x, "moe_deepspeed": 0})["layer_forward_seconds"]
    s, h = 4096, MIXTRAL.hidden_size
    assert dsmoe.extra_hbm_bytes(tokens=s, hidden_size=h, top_k=2, value_bytes=2) == s * h * (4 + 12 + 2 * 10)
    assert float(with_ds) > float(without)


def test_layout_expert_groups_are_deepspeeds(monkeypatch):
    """The layout's EP and expert-DP groups for a DeepSpeed-MoE plan are the ones DeepSpeed's own
    groups._create_expert_and_data_parallel builds (run with a recording stand-in for the process-group calls)."""
    pytest.importorskip("torch")
    from deepspeed.utils import groups
    from workbench.layout import build_layout

    made = []
    monkeypatch.setattr(groups.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(groups.dist, "get_world_size", lambda group=None: 16)
    monkeypatch.setattr(groups.dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(groups.dist, "new_group", lambda ranks: made.append(list(ranks)))
    for name in ("_EXPERT_PARALLEL_GROUP", "_EXPERT_PARALLEL_GROUP_RANKS", "_EXPERT_DATA_PARALLEL_GROUP",
                 "_EXPERT_DATA_PARALLEL_GROUP_RANKS"):
        monkeypatch.setattr(groups, name, {})
    groups._create_expert_and_data_parallel(4, pp_size=2)
    layout = build_layout(_cluster(), _plan(pipeline_parallel=2, zero_stage=1, expert_parallel=4), model=MIXTRAL)
    ours = {tuple(layout.expert_group_of(r, kind)[1]) for r in range(16) for kind in ("ep", "edp")}
    assert ours == {tuple(g) for g in made}


def test_estimate_json_names_deepspeed_moe_capacity():
    plan = estimate(MIXTRAL, _cluster(), _plan(expert_parallel=8, micro_batch_size=1)).to_dict()["plan"]
    assert plan["deepspeed_moe"] and plan["moe_expert_capacity"] == 1024 and plan["moe_token_factor"] == 1.0
    assert estimate(MIXTRAL, _cluster(), _plan()).to_dict()["plan"]["deepspeed_moe"] is False
