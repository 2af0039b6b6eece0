"""Host-bound micro-steps: a micro-step of megatron-core layers lasts max(host, GPU, forward host + backward GPU)."""
import numpy as np
import pytest

from workbench.layerops import layer_host_seconds

from workbench import timing
from workbench.catalog import model
from workbench.specs import ClusterSpec, Implementation, ParallelPlan
from workbench.timing import estimate_time, step_time_terms, time_inputs

H200 = ClusterSpec(gpu="H200", gpus_per_node=1)


def _plan(**kw):
    base = dict(world_size=1, engine="deepspeed", zero_stage=1, micro_batch_size=8, global_batch_size=8,
                precision="bf16")
    base.update(kw)
    return ParallelPlan(**base)


def _terms(m, plan, **override):
    x = time_inputs(m, H200, plan)
    x.update(override)
    return x, step_time_terms(**x)


def _gpu(terms):
    return terms["stage_forward_seconds"] + terms["stage_backward_seconds"] + terms["recompute_microbatch_seconds"]


@pytest.mark.parametrize("engine", ["deepspeed", "megatron"])
def test_exposed_host_is_the_excess_over_the_microbatch_gpu_time_once_per_microbatch(engine):
    m = model("gpt3-125m")
    plan = _plan(engine=engine, zero_stage=1 if engine == "deepspeed" else 0, micro_batch_size=2)  # 4 micro-batches
    x0, none = _terms(m, plan, layer_host_s=0.0)
    gpu = _gpu(none)
    _, host = _terms(m, plan, layer_host_s=2 * gpu / m.num_layers)  # host twice the GPU time of a micro-batch
    assert host["host_microbatch_seconds"] == pytest.approx(2 * gpu)
    assert host["step_seconds"] - none["step_seconds"] == pytest.approx(x0["num_microbatches"] * gpu)
    assert host["compute"] - none["compute"] == pytest.approx(x0["num_microbatches"] * gpu)
    # a host shorter than the GPU's work hides behind it
    _, hidden = _terms(m, plan, layer_host_s=0.5 * gpu / m.num_layers)
    assert hidden["step_seconds"] == pytest.approx(none["step_seconds"])
    assert hidden["host_exposed_seconds"] == 0.0


def test_zero2_pays_its_gradient_hooks_in_every_microbatch_but_the_last():
    m = model("gpt3-125m")
    plan = _plan(zero_stage=2, micro_batch_size=2)
    x, none = _terms(m, plan, layer_host_s=0.0)
    gpu = _gpu(none)
    layer = 2 * gpu / m.num_layers
    _, z2 = _terms(m, plan, layer_host_s=layer)
    _, z1 = _terms(m, plan.replace(zero_stage=1), layer_host_s=layer)
    hooks = x["parameter_tensors"] * x["deepspeed_tensor_seconds"]
    assert hooks > 0
    assert z2["host_microbatch_seconds"] == pytest.approx(2 * gpu + hooks)
    assert z2["host_exposed_seconds"] - z1["host_exposed_seconds"] == pytest.approx(3 * hooks)


def test_equal_tokens_in_more_microbatches_cost_the_host_floor_each():
    m = model("gpt3-125m")  # 12 thin layers: a small micro-batch is host-bound
    per_layer = layer_host_seconds(m)
    assert per_layer > 0
    one = estimate_time(m, H200, _plan(micro_batch_size=8))
    eight = estimate_time(m, H200, _plan(micro_batch_size=1))
    gpu_one = _gpu(_terms(m, _plan(micro_batch_size=8), layer_host_s=0.0)[1])
    gpu_eight = _gpu(_terms(m, _plan(micro_batch_size=1), layer_host_s=0.0)[1])
    host = m.num_layers * per_layer
    assert gpu_eight < host  # the premise: each small micro-step is host-bound
    # the micro-batch's backward carries the wait for the host (what the pipeline view draws)
    assert eight.microbatch_forward_seconds + eight.microbatch_backward_seconds == pytest.approx(host, rel=1e-3)
    assert eight.breakdown["compute"] == pytest.approx(8 * host, rel=1e-3)
    assert one.breakdown["compute"] == pytest.approx(max(gpu_one, host), rel=1e-3)
    # the rest of the step (optimizer, one GPU: no reduction) does not depend on the split
    assert eight.step_seconds - one.step_seconds == pytest.approx(8 * host - max(gpu_one, host), rel=1e-2)


@pytest.mark.parametrize("what", ["zero3", "transformers", "transformer-engine"])
def test_no_host_floor_at_zero3_or_for_unmeasured_layers(what):
    m = model("gpt3-125m")
    plan = _plan(micro_batch_size=1)
    if what == "zero3":
        plan = plan.replace(zero_stage=3)
    elif what == "transformers":  # its own floor (tests/test_hf_host.py), not megatron-core's
        m = m.replace(implementation=Implementation.TRANSFORMERS)
    else:
        m = m.replace(attention="flash")
    x, terms = _terms(m, plan)
    assert (x["layer_host_s"] > 0) == (what == "zero3")  # ZeRO-3 has it from the encoder; its hooks price the host
    assert (terms["host_exposed_seconds"] > 0) == (what == "transformers")


def test_advisor_flags_host_bound_microsteps_and_prices_a_larger_micro_batch_and_zero1():
    from workbench import advisor
    from workbench.estimate import estimate

    m = model("gpt3-125m")
    plan = _plan(zero_stage=2, micro_batch_size=1)  # 8 micro-batches of 1 on 12 thin layers
    f = advisor.microstep_host_bound(m, H200, plan, estimate(m, H200, plan))
    assert f is not None and f.status == "warn" and "host-bound" in f.message
    assert f.numbers["share"] >= advisor.MICROSTEP_HOST_SHARE_WARN
    options = {a["option"]: a for a in f.numbers["alternatives"]}
    assert set(options) == {"micro_batch", "zero1"}
    assert options["micro_batch"]["fits"] and options["micro_batch"]["step_seconds"] < f.numbers["step_seconds"]
    assert 0 < options["zero1"]["speedup"]  # no ZeRO-2 hooks in the accumulated micro-steps
    assert any(x.id == "microstep_host_bound" for x in advisor.advise(m, H200, plan).findings)
    # the host's own speed: the share of the step it decides, and what was measured of it
    assert f.numbers["host_share"] >= 0.5 and f"{f.numbers['host_share']:.0%} of this step does" in f.message
    assert "31-68 ms" in f.message and "step_noise.py" in f.message


def test_advisor_quiet_where_the_gpu_hides_the_host():
    from workbench import advisor
    from workbench.estimate import estimate

    m = model("gpt3-125m")
    for plan in (_plan(micro_batch_size=8), _plan(zero_stage=3, micro_batch_size=1)):
        assert advisor.microstep_host_bound(m, H200, plan, estimate(m, H200, plan)) is None


def test_fit_script_recovers_a_known_per_layer_host_time():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fit_microstep_host as F

    true = 0.0014  # the base; each row's operators add per_op seconds per layer (0.0016 s: 3.0 ms per layer in all)
    rows = [dict(shape_id=s, step0=0.05, m=m, layers=12.0, gpu=g, hooks=h, per_op=0.0016, measured=0.0)
            for s, m, g, h in (("a", 4, 0.010, 0.0), ("a", 2, 0.020, 0.005), ("b", 1, 0.080, 0.0), ("b", 3, 0.015, 0.0))]
    for r in rows:
        r["measured"] = float(F.predicted([r], true)[0, 0])
    assert F.fit(rows) == pytest.approx(true, abs=1e-5)
    # the hooks count only where the host is priced, and only in micro-batches other than the last
    r = rows[1]
    assert F.predicted([r], 0.0, with_ops=False)[0, 0] == r["step0"]
    assert F.predicted([r], true)[0, 0] == pytest.approx(r["step0"] + (0.036 - 0.020) + (0.041 - 0.020))
    # a GPU-bound run says nothing: no host time is the answer
    assert F.fit([dict(rows[2], per_op=0.0)]) == 0.0
    # with the forward's share of the host (timing.host_wait): 0.5 x 36 ms of forward host against 10 ms of forward
    # kernels waits 8 ms although the 36 ms of host hide behind the 80 ms of kernels
    phase = dict(rows[2], gpu_forward=0.010, forward_share=0.5)
    assert F.predicted([phase], true)[0, 0] == pytest.approx(phase["step0"] + 0.5 * 0.036 - 0.010)


def test_host_wait_corners():
    from workbench.timing import host_wait

    # the host hides behind the kernels in both phases: no wait
    assert host_wait(0.030, 0.100, 0.015, 0.040) == 0.0
    # the whole host outlasts the kernels
    assert host_wait(0.120, 0.100, 0.050, 0.040) == pytest.approx(0.020)
    # only the forward is host-bound: its excess, once
    assert host_wait(0.080, 0.100, 0.060, 0.030) == pytest.approx(0.030)
    # arrays broadcast; a zero forward share is the plain max(host - GPU, 0)
    assert list(host_wait(np.array([0.08, 0.12]), 0.100, 0.0, 0.030)) == pytest.approx([0.0, 0.02])


def test_a_host_bound_forward_waits_in_the_step_even_when_the_micro_step_hides_its_host():
    m = model("gpt3-350m")
    plan = _plan(micro_batch_size=4)
    x = time_inputs(m, H200, plan)
    none = step_time_terms(**{**x, "layer_host_s": 0.0})
    gpu = none["stage_forward_seconds"] + none["stage_backward_seconds"] + none["recompute_microbatch_seconds"]
    layers, forward = none["stage_layers"], none["stage_layers"] * none["layer_forward_seconds"]
    host = 0.8 * gpu / layers  # the micro-step's host hides (0.8 of its kernels) ...
    plain = step_time_terms(**{**x, "layer_host_s": host, "forward_host_share": 0.0})
    assert plain["step_seconds"] == pytest.approx(none["step_seconds"])
    phased = step_time_terms(**{**x, "layer_host_s": host, "forward_host_share": 0.6})
    assert 0.6 * 0.8 * gpu > forward  # ... but its forward's share outlasts the forward's kernels
    m_ = x["num_microbatches"]
    assert phased["step_seconds"] - none["step_seconds"] == pytest.approx(m_ * (0.6 * 0.8 * gpu - forward))
    assert phased["host_exposed_seconds"] == pytest.approx(m_ * (0.6 * 0.8 * gpu - forward))
    # the GPU waits in the forward: the pipeline schedule sees a longer forward, not a longer backward
    assert phased["stage_forward_seconds"] - none["stage_forward_seconds"] == pytest.approx(0.6 * 0.8 * gpu - forward)
    assert phased["stage_backward_seconds"] == pytest.approx(none["stage_backward_seconds"])


def test_advisor_says_when_only_the_forward_is_host_bound():
    """A micro-step whose host hides behind its GPU work as a whole but whose forward's share does not: the finding
    says so instead of claiming less GPU work than host time."""
    from workbench import advisor
    from workbench.estimate import estimate

    m = model("gpt3-760m")
    plan = ParallelPlan(world_size=1, engine="deepspeed", zero_stage=0, micro_batch_size=2, global_batch_size=16)
    rec = estimate(m, H200, plan)
    terms = step_time_terms(**rec.time.inputs)
    assert terms["host_microbatch_seconds"] < terms["host_gpu_microbatch_seconds"]
    assert terms["host_exposed_seconds"] > 0
    assert terms["host_forward_wait_seconds"] == pytest.approx(terms["host_exposed_seconds"])
    f = advisor.microstep_host_bound(m, H200, plan, rec)
    assert f is not None and "forward's host outlasts the forward's kernels" in f.message
    assert "against less GPU work" not in f.message
