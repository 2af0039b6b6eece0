"""MoE activation terms as megatron-core keeps them, and the routing load imbalance option."""
import json

import numpy as np
import pytest

from workbench import encode as E
from workbench import memory as M
from workbench.catalog import gpu, model
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, validate

MIXTRAL = model("mixtral-8x7b").replace(seq_length=4096)
# the toy layer benchmarks/moe_saved_tensors_cpu.py builds (local spec, unfused stack, SwiGLU experts)
TOY = ModelSpec(name="toy-moe", num_layers=1, hidden_size=64, num_attention_heads=4, ffn_hidden_size=96,
                vocab_size=256, seq_length=256, activation="swiglu", normalization="rmsnorm", add_bias_linear=False,
                position_embedding="rotary", num_experts=8, moe_top_k=2, hidden_dropout=0.0, attention_dropout=0.0)


def _cluster(nodes=1, per_node=8):
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=per_node, num_nodes=nodes)


def _plan(world=8, **kw):
    kw.setdefault("engine", "megatron")
    return ParallelPlan(world_size=world, **kw)


def _toy_bytes(m):
    return float(M.moe_activation_bytes(m, tokens=m.seq_length, tensor_parallel=1, sequence_parallel=False,
                                        expert_tensor_parallel=1, token_factor=1.0, value_bytes=2))


def test_moe_layer_terms_match_the_cpu_count_of_megatron_core():
    """benchmarks/moe_saved_tensors_cpu.py counted 685,124 bytes (E 8, top-2; the same with --dispatcher alltoall),
    1,370,244 (E 16, top-4) and 780,420 (E 16, top-4, GeLU) saved by megatron-core 0.16's MoE block on the toy
    layer; the terms give the same less 68-132 bytes of scalars and per-expert counts."""
    assert M.moe_router_bytes_per_token(TOY, value_bytes=2) == 7 * 8 + 30 * 2
    assert _toy_bytes(TOY) == pytest.approx(685_124, rel=2e-4)
    wide = TOY.replace(num_experts=16, moe_top_k=4)
    assert _toy_bytes(wide) == pytest.approx(1_370_244, rel=2e-4)
    assert _toy_bytes(wide.replace(activation="gelu")) == pytest.approx(780_420, rel=3e-4)
    # a Qwen2-MoE shared expert (width 160, sigmoid gate): counted 1,128,004 (--shared 160)
    assert _toy_bytes(TOY.replace(shared_expert_ffn_hidden_size=160)) == pytest.approx(1_128_004, rel=2e-4)


def test_fused_experts_keep_fc1_output_and_fc2_input_only():
    """The weighted SwiGLU kernel (TEGroupedMLP or MLP with bias_activation_fusion) keeps fc1's output and the
    probabilities; the unfused stack keeps the activation, the glu's sum and the probability product too."""
    unfused, fused = TOY, TOY.replace(attention="flash")
    x, f = 256 * 2, 96
    assert _toy_bytes(unfused) - _toy_bytes(fused) == pytest.approx(3 * 2 * x * f)
    assert M.moe_expert_intermediates(fused) == 0 and M.moe_expert_intermediates(unfused) == 3
    assert M.moe_expert_intermediates(fused.replace(activation="gelu")) == 1
    assert M.moe_expert_intermediates(fused, deepspeed=1) == 2


def test_rank_load_is_capped_by_what_routing_can_do():
    assert E.moe_rank_load(1.3, expert_parallel=1, num_experts=8, top_k=2) == 1.0  # one rank, every expert
    assert E.moe_rank_load(1.3, expert_parallel=8, num_experts=8, top_k=2) == pytest.approx(1.3)
    assert E.moe_rank_load(3.0, expert_parallel=2, num_experts=8, top_k=2) == pytest.approx(2.0)  # all on one rank
    rows = E.moe_rank_load(np.array([1.5, 1.5]), expert_parallel=np.array([1, 4]), num_experts=8, top_k=2)
    assert rows.tolist() == [1.0, 1.5]


@pytest.mark.parametrize("kw, needle", [
    (dict(moe_load_imbalance=0.9), "moe_load_imbalance=0.9 must be >= 1"),
    (dict(moe_load_imbalance=5.0), "moe_load_imbalance=5 exceeds num_experts / moe_top_k = 8 / 2 = 4"),
    (dict(moe_load_imbalance=float("nan")), "moe_load_imbalance=nan must be a finite number"),
])
def test_invalid_imbalance_names_the_field(kw, needle):
    with pytest.raises(ValueError, match=needle):
        validate(MIXTRAL, _cluster(), _plan(**kw))


def test_dense_model_refuses_an_imbalance():
    with pytest.raises(ValueError, match="^moe_load_imbalance=1.2 needs a mixture-of-experts"):
        validate(model("llama2-7b"), _cluster(), _plan(moe_load_imbalance=1.2))


def test_imbalance_prices_the_busiest_rank_and_a_capacity_factor_caps_it():
    c = _cluster()
    base = _plan(expert_parallel=8, distributed_optimizer=True, global_batch_size=8)
    even = estimate(MIXTRAL, c, base, checks=False)
    skew = estimate(MIXTRAL, c, base.replace(moe_load_imbalance=1.5), checks=False)
    assert E.plan_columns(base.replace(moe_load_imbalance=1.5), MIXTRAL)["moe_tf"] == pytest.approx(1.5)
    assert skew.memory.per_gpu_peak_bytes > even.memory.per_gpu_peak_bytes
    assert skew.time.step_seconds > even.time.step_seconds
    assert skew.time.breakdown["ep_comm"] > even.time.breakdown["ep_comm"]
    capped = base.replace(moe_load_imbalance=1.5, moe_capacity_factor=1.2)
    assert E.moe_token_factor(capped, MIXTRAL) == pytest.approx(1.2)
    padded = capped.replace(moe_pad_to_capacity=True)
    assert E.moe_token_factor(padded, MIXTRAL) == pytest.approx(1.2)
    one_rank = _plan(distributed_optimizer=True, global_batch_size=8)
    assert (estimate(MIXTRAL, c, one_rank.replace(moe_load_imbalance=1.5), checks=False).memory.per_gpu_peak_bytes
            == estimate(MIXTRAL, c, one_rank, checks=False).memory.per_gpu_peak_bytes)


def test_advisor_names_the_cost_and_the_knobs():
    from workbench.advisor import moe_capacity

    c = _cluster()
    plan = _plan(expert_parallel=8, distributed_optimizer=True, global_batch_size=8, moe_load_imbalance=1.5)
    found = moe_capacity(MIXTRAL, plan, c)
    assert found.status == "warn" and "load imbalance 1.5" in found.message and "s/step" in found.message
    assert "--moe-expert-capacity-factor" in found.suggestion and "--moe-aux-loss-coeff" in found.suggestion
    balanced = moe_capacity(MIXTRAL, plan.replace(moe_load_imbalance=1.0), c)
    assert balanced.status == "pass" and "--moe-load-imbalance" in balanced.suggestion
    dropped = moe_capacity(MIXTRAL, plan.replace(moe_capacity_factor=1.25), c)
    assert dropped.status == "warn" and "drops the copies above it" in dropped.message


def test_cli_json_export_and_run_store_carry_it(capsys):
    from workbench.cli import main
    from workbench.configs.megatron import megatron_args, megatron_command
    from workbench.runs.specio import specs_from_dict, specs_to_dict

    args = ["--model", "mixtral-8x7b", "--seq", "4096", "--engine", "megatron", "--ep", "8",
            "--distributed-optimizer", "--gbs", "8", "--moe-load-imbalance", "1.25"]
    assert main(["estimate", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["moe_load_imbalance"] == 1.25 and out["plan"]["moe_token_factor"] == pytest.approx(1.25)
    assert main(["estimate", *args[:-1], "0.5"]) == 2
    assert "moe_load_imbalance=0.5 must be >= 1" in capsys.readouterr().err
    c = _cluster()
    plan = _plan(expert_parallel=8, distributed_optimizer=True, global_batch_size=8, moe_load_imbalance=1.25)
    assert "--moe-load-imbalance" not in " ".join(megatron_args(MIXTRAL, c, plan))  # Megatron has no such flag
    assert "load imbalance 1.25" in megatron_command(MIXTRAL, c, plan)
    assert specs_from_dict(json.loads(json.dumps(specs_to_dict(MIXTRAL, c, plan))))[2] == plan


def test_planner_prices_every_row_with_the_imbalance():
    from workbench import planner

    tiny = ModelSpec(name="tiny-moe", num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024,
                     num_experts=8, moe_top_k=2, seq_length=512, activation="swiglu", attention="flash",
                     add_bias_linear=False)
    c = _cluster(1, 8)
    found = planner.search(tiny, c, global_batch_size=16, engines=("megatron",), top=3, moe_load_imbalance=1.4)
    best = found.ranked[0]
    assert best.plan.moe_load_imbalance == 1.4
    est = estimate(tiny, c, best.plan, checks=False)
    assert best.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    assert best.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)


def test_parallel_panel_sends_the_imbalance_and_moe_recompute():
    from widgets.parallel_panel import ParallelPanel
    from widgets.state import SetPlan

    sent = []
    panel = ParallelPanel(dispatch=sent.append)
    panel.controls["moe_load_imbalance"].value = 1.3
    panel.controls["moe_recompute"].value = "moe"
    changes = {k: v for a in sent if isinstance(a, SetPlan) for k, v in a.changes.items()}
    assert changes["moe_load_imbalance"] == 1.3 and changes["moe_recompute"] == "moe"
    panel.close()


def test_selective_recompute_of_moe_modules_drops_what_megatron_core_recomputes():
    kw = dict(micro_batch=1, tensor_parallel=1, sequence_parallel=False, context_parallel=1, recompute=1,
              value_bytes=2, expert_tensor_parallel=1)
    plain = M.layer_activation_bytes(MIXTRAL, **kw)[0]
    whole = M.moe_activation_bytes(MIXTRAL, tokens=4096, tensor_parallel=1, sequence_parallel=False,
                                   expert_tensor_parallel=1, token_factor=1.0, value_bytes=2)
    assert M.layer_activation_bytes(MIXTRAL, **kw, moe_recompute=2)[0] == pytest.approx(plain - whole)
    # moe_act: fc2's input (the fused stack keeps nothing else of the activation), X = 4096·2 copies
    assert M.layer_activation_bytes(MIXTRAL, **kw, moe_recompute=1)[0] == pytest.approx(
        plain - 2 * 4096 * 2 * MIXTRAL.moe_ffn_hidden_size)


def test_moe_recompute_costs_a_forward_and_its_alltoalls_and_round_trips():
    from workbench.configs.importer import import_megatron_args
    from workbench.configs.megatron import megatron_args

    c = _cluster()
    base = _plan(expert_parallel=8, distributed_optimizer=True, global_batch_size=8, recompute="selective")
    runs = {rc: estimate(MIXTRAL, c, base.replace(moe_recompute=rc), checks=False) for rc in ("none", "moe_act", "moe")}
    peaks = [runs[rc].memory.per_gpu_peak_bytes for rc in ("none", "moe_act", "moe")]
    assert peaks[0] > peaks[1] > peaks[2]
    rcs = [runs[rc].time.breakdown["recompute"] for rc in ("none", "moe_act", "moe")]
    assert rcs[0] < rcs[1] < rcs[2]
    assert runs["moe"].time.breakdown["ep_comm"] == pytest.approx(1.5 * runs["none"].time.breakdown["ep_comm"])
    with pytest.raises(ValueError, match="moe_recompute='moe' needs recompute='selective'"):
        base.replace(recompute="full", moe_recompute="moe")
    args = megatron_args(MIXTRAL, c, base.replace(moe_recompute="moe"))
    at = args.index("--recompute-modules")
    assert args[at + 1:at + 3] == ["core_attn", "moe"]
    imported = import_megatron_args(args, world_size=c.world_size)
    assert imported.plan_fields["moe_recompute"] == "moe" and not imported.warnings and not imported.lint
    only = import_megatron_args(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                 "--recompute-granularity", "selective", "--recompute-modules", "moe_act", "mlp"])
    assert only.plan_fields["moe_recompute"] == "moe_act" and any("mlp not modelled" in w for w in only.warnings)
