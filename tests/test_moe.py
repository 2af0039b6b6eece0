"""Expert parallelism: validation, per-rank expert memory, MoE activations, all-to-all time, planner search."""
import numpy as np
import pytest

from workbench import memory as M
from workbench import timing as T
from workbench.catalog import gpu, model
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, validate

MIXTRAL = model("mixtral-8x7b").replace(seq_length=4096)
GiB = 2**30


def _cluster(nodes=1, per_node=8):
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=per_node, num_nodes=nodes)


def _plan(world=8, **kw):
    kw.setdefault("engine", "megatron")
    return ParallelPlan(world_size=world, **kw)


@pytest.mark.parametrize("kw, needle", [
    (dict(expert_parallel=8, pipeline_parallel=2), "does not divide world_size=8"),
    (dict(expert_parallel=2, tensor_parallel=2), "needs sequence_parallel=True"),
    (dict(expert_parallel=2, expert_tensor_parallel=1, engine="deepspeed"), "expert_tensor_parallel=1 is Megatron's"),
    (dict(moe_pad_to_capacity=True), "needs moe_capacity_factor"),
    (dict(moe_capacity_factor=0.0), "moe_capacity_factor=0 must be > 0"),
    (dict(expert_parallel=2, expert_tensor_parallel=3), "does not divide world_size"),
    (dict(moe_overlap_alltoall=True), "moe_overlap_alltoall=True needs expert_parallel > 1"),
    (dict(moe_overlap_alltoall=True, expert_parallel=2, recompute="full"), "needs recompute other than 'full'"),
    (dict(moe_overlap_alltoall=True, expert_parallel=2, pipeline_parallel=2), "needs virtual_pipeline > 1"),
])
def test_invalid_expert_plans_name_the_fields(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        validate(MIXTRAL, _cluster(), _plan(**kw))


def test_moe_biases_need_expert_tp_1_and_the_planner_follows():
    from workbench import planner

    biased = MIXTRAL.replace(add_bias_linear=True)
    with pytest.raises(ValueError, match="only with expert_tensor_parallel=1 .got 2, the TP size, its default"):
        validate(biased, _cluster(), _plan(tensor_parallel=2, sequence_parallel=True))
    validate(biased, _cluster(), _plan(tensor_parallel=2, sequence_parallel=True, expert_tensor_parallel=1))
    table = planner.enumerate_candidates(biased.replace(num_layers=2), _cluster(), 8, recompute=("none",),
                                         offload=False)
    megatron = table["engine"] == 1
    assert not ((table["etp"] > 1) & megatron).any() and ((table["etp"] > 1) & ~megatron).any()


def test_expert_parallel_must_divide_the_experts():
    with pytest.raises(ValueError, match="expert_parallel=4 does not divide num_experts=6"):
        validate(MIXTRAL.replace(num_experts=6), _cluster(), _plan(expert_parallel=4))


def test_expert_fields_need_an_moe_model():
    dense = model("llama3-8b")
    with pytest.raises(ValueError, match=r"^expert_parallel=2 needs a mixture-of-experts model \(llama3-8b has "):
        validate(dense, _cluster(), _plan(expert_parallel=2))  # only what was set is named
    with pytest.raises(ValueError, match=r"^expert_parallel=2, moe_capacity_factor=1.25 need a mixture-of-experts"):
        validate(dense, _cluster(), _plan(expert_parallel=2, moe_capacity_factor=1.25))


def test_expert_weights_shard_over_ep_and_etp():
    """Expert parameters per rank fall as 1/(e·tp_e); with e = 1 and tp_e = t the count is the old one."""
    full = M.expert_params_per_rank(MIXTRAL, 1, 1)
    assert full == 8 * 3 * 4096 * 14336  # 8 SwiGLU experts, no biases
    assert M.expert_params_per_rank(MIXTRAL, 4, 2) == full / 8
    dense_part = M.layer_params_per_rank(MIXTRAL, 2) - M.expert_params_per_rank(MIXTRAL, 1, 2)
    assert M.layer_params_per_rank(MIXTRAL, 2, 8, 1) == pytest.approx(dense_part + full / 8)


def test_memory_falls_with_expert_parallel_and_states_shard_over_expert_dp():
    c = _cluster()
    base = dict(distributed_optimizer=True, recompute="full", global_batch_size=8)
    peaks = []
    for e in (1, 2, 4, 8):
        est = estimate(MIXTRAL, c, _plan(expert_parallel=e, **base), checks=False)
        peaks.append(est.memory.peak_stage.total_bytes)
    assert peaks == sorted(peaks, reverse=True) and peaks[0] > 2 * peaks[-1]
    # bf16 weights: 2 bytes per local parameter; optimizer 12 bytes sharded: dense over dp=8, experts over
    # expert dp = 8 / e
    est = estimate(MIXTRAL, c, _plan(expert_parallel=8, **base), checks=False)
    counts = MIXTRAL.parameter_counts()
    experts = MIXTRAL.num_layers * M.expert_params_per_rank(MIXTRAL, 1, 1)
    local = (counts.total - experts) + experts / 8
    assert est.memory.peak_stage.terms.weights == pytest.approx(2 * local, rel=1e-6)
    assert est.memory.peak_stage.terms.optimizer == pytest.approx(12 * (counts.total - experts) / 8 + 12 * experts / 8,
                                                                  rel=1e-6)


def test_capacity_padding_grows_expert_activations_by_the_factor():
    kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, recompute=0,
              value_bytes=2)
    _, dropless = M.layer_activation_bytes(MIXTRAL, **kw)
    _, padded = M.layer_activation_bytes(MIXTRAL, **kw, moe_token_factor=1.5)
    x = M.moe_expert_tokens(4096, top_k=2, tensor_parallel=1, expert_tensor_parallel=1)
    # fc1 out (2f) + fc2 in (f) + fc1 input, 16-bit: the catalog Mixtral runs the fused stack, whose weighted
    # SwiGLU kernel keeps nothing more (memory.moe_expert_intermediates)
    per_copy = 2 * (3 * 14336 + 4096)
    assert padded - dropless == pytest.approx(0.5 * x * per_copy)


def test_alltoall_time_and_its_link():
    """2 dispatch + 2 combine all-to-alls per MoE layer and micro-batch (forward + backward); a group spanning
    nodes is priced on the network."""
    one = estimate(MIXTRAL, _cluster(), _plan(expert_parallel=1, global_batch_size=8), checks=False)
    assert one.time.breakdown["ep_comm"] == 0.0
    intra = estimate(MIXTRAL, _cluster(), _plan(expert_parallel=8, global_batch_size=8), checks=False)
    copies_bytes = 4096 * 2 * 4096 * 2  # tokens × top-k × h × bf16
    net = T.calibration()["network"]
    bw = 450 * net["intra_node_bandwidth_efficiency"] * 1e9
    a2a = 7 / 8 * copies_bytes / bw + net["intra_node_latency_s"]
    assert intra.time.breakdown["ep_comm"] == pytest.approx(32 * 4 * a2a, rel=1e-6)
    assert intra.time.links["ep"]["link"] == "intra-node"
    cross = estimate(MIXTRAL, _cluster(2, 4), _plan(expert_parallel=8, global_batch_size=8), checks=False)
    assert cross.time.links["ep"]["link"] == "inter-node"
    assert cross.time.breakdown["ep_comm"] > 3 * intra.time.breakdown["ep_comm"]


def test_overlapped_alltoall_hides_behind_compute():
    c = _cluster(2, 4)
    plain = estimate(MIXTRAL, c, _plan(expert_parallel=8, global_batch_size=16), checks=False)
    over = estimate(MIXTRAL, c, _plan(expert_parallel=8, global_batch_size=16, moe_overlap_alltoall=True),
                    checks=False)
    assert plain.time.breakdown["ep_comm"] > 0 and over.time.breakdown["ep_comm"] < plain.time.breakdown["ep_comm"]
    x = plain.time.inputs
    terms = T.step_time_terms(**{**x, "moe_overlap_alltoall": 1})
    compute = terms["stage_forward_seconds"] + terms["stage_backward_seconds"]
    raw = plain.time.microbatch_forward_seconds + plain.time.microbatch_backward_seconds - compute
    assert over.time.breakdown["ep_comm"] == pytest.approx(plain.plan.num_microbatches * max(0.0, raw - compute),
                                                           rel=1e-6)


def test_alltoall_seconds_splits_intra_and_inter_traffic():
    s = T.alltoall_seconds(8e9, 8, 4, intra_gb_per_s=400, inter_gb_per_s=50, latency_s=0.0)
    assert s == pytest.approx(4 / 8 * 8e9 / 50e9)  # the 4 off-node peers over the network dominate
    assert T.alltoall_seconds(8e9, 1, 1, intra_gb_per_s=400, inter_gb_per_s=50, latency_s=1e-5) == 0.0


def test_dense_models_price_no_expert_terms():
    llama = model("llama3-8b").replace(seq_length=2048)
    est = estimate(llama, _cluster(), _plan(global_batch_size=8), checks=False)
    assert est.time.breakdown["ep_comm"] == 0.0 and "ep" not in est.time.links
    assert "etp" not in est.facts.group_sizes


def test_planner_searches_expert_parallel_with_the_spec_rules():
    """Every expert layout the planner lists is one ParallelPlan + validate accept, and the estimate of the best
    plan agrees with the planner's array evaluation."""
    from workbench import planner

    tiny = ModelSpec(name="tiny-moe", num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024,
                     num_experts=8, moe_top_k=2, seq_length=512, activation="swiglu", attention="flash",
                     add_bias_linear=False)
    c = _cluster(2, 4)
    table = planner.enumerate_candidates(tiny, c, 16, engines=("megatron",), offload=False, recompute=("none",))
    pairs = {(int(t), int(e), int(te)) for t, e, te in zip(table["tp"], table["ep"], table["etp"])}
    assert {(1, 8, 1), (2, 4, 1), (2, 4, 2), (1, 1, 1)} <= pairs
    assert all(e * te <= 8 for _, e, te in pairs) and all(8 % e == 0 for _, e, _ in pairs)
    for i in range(0, len(table["tp"]), 37):
        validate(tiny, c, planner._plan_at(table, i, c, 16, "bf16"))
    found = planner.search(tiny, c, global_batch_size=16, engines=("megatron",), top=3)
    best = found.ranked[0]
    est = estimate(tiny, c, best.plan, checks=False)
    assert best.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    assert best.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)


def test_megatron_export_and_import_round_trip_the_expert_layout():
    from workbench.configs.importer import import_megatron_args
    from workbench.configs.megatron import megatron_args

    c = _cluster(2)
    plan = _plan(16, tensor_parallel=2, sequence_parallel=True, expert_parallel=4, expert_tensor_parallel=1,
                 moe_capacity_factor=1.25, moe_pad_to_capacity=True, distributed_optimizer=True,
                 global_batch_size=16, moe_overlap_alltoall=True)
    args = megatron_args(MIXTRAL, c, plan)
    at = args.index("--expert-model-parallel-size")
    assert args[at + 1] == "4" and args[args.index("--expert-tensor-parallel-size") + 1] == "1"
    assert args[args.index("--moe-token-dispatcher-type") + 1] == "alltoall"
    imported = import_megatron_args(args)
    assert not [w for w in imported.warnings if "expert" in w]
    _, back = imported.to_specs(cluster=c)
    assert back == plan.replace(overlap_comm=False)  # the import reads Megatron's default explicitly
    # without the dispatcher flag Megatron-LM runs allgather; a dense script's EP flags are named and ignored
    default = import_megatron_args([a for a in args if a not in ("--moe-token-dispatcher-type", "alltoall")])
    assert default.plan_fields["moe_token_dispatcher"] == "allgather"
    dense = import_megatron_args(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                  "--expert-model-parallel-size", "2"])
    assert "expert_parallel" not in dense.plan_fields and any("dense model" in w for w in dense.warnings)


def test_cli_flags_and_advisor_notes(capsys):
    from workbench.cli import main

    code = main(["estimate", "--model", "mixtral-8x7b", "--seq", "4096", "--gpus-per-node", "4", "--nodes", "2",
                 "--engine", "megatron", "--ep", "8", "--distributed-optimizer", "--gbs", "8",
                 "--moe-capacity-factor", "0.8"])
    out = capsys.readouterr().out
    assert code == 0
    assert "EP 8 (1 per rank) x expert TP 1 x expert DP 1" in out and "ep_comm" in out
    assert "expert-parallel group crosses nodes" in out and "drops 20% of the token copies" in out
    assert main(["estimate", "--model", "mixtral-8x7b", "--engine", "megatron", "--ep", "3"]) == 2
    assert "expert_parallel" in capsys.readouterr().err


def test_layout_view_colours_expert_groups_and_the_panel_sends_expert_fields():
    from widgets.layout_view import layout_grid, legend_html
    from widgets.parallel_panel import ParallelPanel
    from widgets.state import SetPlan
    from workbench.layout import build_layout

    layout = build_layout(_cluster(2, 4), _plan(8, expert_parallel=4), model=MIXTRAL)
    grid = layout_grid(layout, "ep")
    assert grid["z"] == [[0, 0, 0, 0], [1, 1, 1, 1]]  # one EP group per node
    assert "experts 2–3" in grid["hover"][0][1] and "e1" in grid["text"][0][1]
    assert "expert-data-parallel group" in legend_html(layout, "edp")
    with pytest.raises(ValueError, match="needs an MoE model"):
        layout_grid(build_layout(_cluster(), _plan(8)), "ep")
    sent = []
    panel = ParallelPanel(dispatch=sent.append)
    panel.controls["expert_parallel"].value = 4
    panel.controls["expert_tensor_parallel"].value = 0
    panel.controls["moe_capacity_factor"].value = 1.5
    changes = {k: v for a in sent if isinstance(a, SetPlan) for k, v in a.changes.items()}
    assert changes["expert_parallel"] == 4 and changes["moe_capacity_factor"] == 1.5
    panel.close()


def test_oom_ladder_raises_expert_parallel_before_zero3():
    from workbench.advisor import oom_ladder

    plan = _plan(32, recompute="full", distributed_optimizer=True, global_batch_size=32)
    ladder = oom_ladder(MIXTRAL, _cluster(4), plan)  # 32 H100: EP 8 shards the experts' states over 4
    ep = [s for s in ladder if s.step == 4]
    assert len(ep) == 1 and ep[0].plan.expert_parallel == 8 and ep[0].plan.engine == "megatron"
    assert ep[0].peak_bytes < 0.5 * ladder[0].peak_bytes  # 73.6 GiB: the point estimate fits, the band's side not
    # then ZeRO-3 under Megatron-DeepSpeed with nothing offloaded (step 5) fits
    assert ladder[-1].fits and ladder[-1].step == 5 and "nothing offloaded" in ladder[-1].action
    # on 8 GPUs EP 8 leaves the experts' optimizer states unsharded: still too large, ZeRO-3 (step 5) follows and
    # needs the optimizer on the CPU
    small = oom_ladder(MIXTRAL, _cluster(), _plan(recompute="full", distributed_optimizer=True, global_batch_size=8))
    assert [s.step for s in small if s.plan is not None][-3:] == [4, 5, 5] and not small[-3].fits
    assert small[-1].fits and small[-1].plan.expert_parallel == 1 and small[-1].plan.zero_stage == 3
    assert str(small[-1].plan.offload_optimizer) == "cpu"


def test_shared_expert_round_trips_through_megatron_flags():
    from workbench.configs.importer import import_megatron_args
    from workbench.configs.megatron import megatron_args

    qwen = ModelSpec(name="qwen-moe-tiny", num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024,
                     num_experts=8, moe_top_k=2, moe_ffn_hidden_size=256, shared_expert_ffn_hidden_size=768,
                     activation="swiglu", attention="flash")
    args = megatron_args(qwen, _cluster(), _plan(expert_parallel=8, global_batch_size=8))
    assert args[args.index("--moe-shared-expert-intermediate-size") + 1] == "768"
    model, plan = import_megatron_args(args).to_specs(cluster=_cluster())
    assert model.shared_expert_ffn_hidden_size == 768 and model.num_parameters == qwen.num_parameters
    assert plan.expert_parallel == 8
