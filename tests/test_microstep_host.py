"""DeepSpeed ZeRO-0/1/2 micro-step host floor: a micro-step of megatron-core layers lasts max(host, GPU)."""
import pytest

from workbench import timing
from workbench.catalog import model
from workbench.specs import ClusterSpec, Implementation, ParallelPlan
from workbench.timing import estimate_time, step_time_terms, time_inputs

H200 = ClusterSpec(gpu="H200", gpus_per_node=1)


def _plan(**kw):
    base = dict(world_size=1, engine="deepspeed", zero_stage=2, micro_batch_size=8, global_batch_size=8,
                precision="bf16")
    base.update(kw)
    return ParallelPlan(**base)


def _terms(m, plan, **override):
    x = time_inputs(m, H200, plan)
    x.update(override)
    return x, step_time_terms(**x)


def test_exposed_host_is_the_excess_over_the_microbatch_gpu_time_once_per_microbatch():
    m = model("gpt3-125m")
    plan = _plan(micro_batch_size=2, global_batch_size=8)  # 4 micro-batches
    x0, none = _terms(m, plan, deepspeed_layer_host_s=0.0)
    gpu = (none["stage_forward_seconds"] + none["stage_backward_seconds"] + none["recompute_microbatch_seconds"])
    per_layer = 2 * gpu / m.num_layers  # host twice the GPU time of a micro-batch
    _, host = _terms(m, plan, deepspeed_layer_host_s=per_layer)
    assert host["deepspeed_host_microbatch_seconds"] == pytest.approx(2 * gpu)
    assert host["step_seconds"] - none["step_seconds"] == pytest.approx(x0["num_microbatches"] * gpu)
    assert host["compute"] - none["compute"] == pytest.approx(x0["num_microbatches"] * gpu)
    # a host shorter than the GPU's work hides behind it
    _, hidden = _terms(m, plan, deepspeed_layer_host_s=0.5 * gpu / m.num_layers)
    assert hidden["step_seconds"] == pytest.approx(none["step_seconds"])
    assert hidden["deepspeed_host_exposed_microbatch_seconds"] == 0.0


def test_equal_tokens_in_more_microbatches_cost_the_host_floor_each():
    m = model("gpt3-125m")  # 12 thin layers: a small micro-batch is host-bound
    per_layer = timing.calibration()["deepspeed"]["microstep_layer_host_s"]
    assert per_layer > 0
    one = estimate_time(m, H200, _plan(micro_batch_size=8, global_batch_size=8))
    eight = estimate_time(m, H200, _plan(micro_batch_size=1, global_batch_size=8))
    gpu_one = one.microbatch_forward_seconds + one.microbatch_backward_seconds
    gpu_eight = eight.microbatch_forward_seconds + eight.microbatch_backward_seconds
    host = m.num_layers * per_layer
    assert gpu_eight < host  # the premise: each small micro-step is host-bound
    assert eight.breakdown["compute"] == pytest.approx(8 * host, rel=1e-3)
    assert one.breakdown["compute"] == pytest.approx(max(gpu_one, host), rel=1e-3)
    # the rest of the step (optimizer, one GPU: no reduction) does not depend on the split
    assert eight.step_seconds - one.step_seconds == pytest.approx(8 * host - max(gpu_one, host), rel=1e-2)


@pytest.mark.parametrize("what", ["megatron", "zero3", "transformers"])
def test_no_deepspeed_host_floor_for_megatron_zero3_or_transformers_models(what):
    m = model("gpt3-125m")
    plan = _plan(micro_batch_size=1)
    if what == "megatron":
        plan = plan.replace(engine="megatron", zero_stage=0)
    elif what == "zero3":
        plan = plan.replace(zero_stage=3)
    else:
        m = m.replace(implementation=Implementation.TRANSFORMERS)
    x, terms = _terms(m, plan)
    if what == "zero3":
        assert x["deepspeed_layer_host_s"] > 0  # the encoder gives it; the term leaves ZeRO-3 to its hooks
    else:
        assert x["deepspeed_layer_host_s"] == 0.0
    assert terms["deepspeed_host_exposed_microbatch_seconds"] == 0.0
