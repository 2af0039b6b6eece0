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
    (dict(expert_parallel=2, moe_token_dispatcher="allgather"), "moe_token_dispatcher='allgather' is Megatron's"),
    (dict(expert_parallel=2, moe_capacity_factor=1.0, moe_pad_to_capacity=True), "moe_pad_to_capacity=True is "),
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
    assert ds - mega == pytest.approx(4 * s * h + 2 * 2 * s * h)  # fp32 gate input + k copies of the combine
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
