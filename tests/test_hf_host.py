"""Host time of transformers models: a micro-step lasts max(host, GPU), with the host's work per decoder layer, what a
checkpointed layer adds (its forward's share again in the recompute, and the checkpoint machinery) and per
LoRA-adapted projection (catalog ``transformers``)."""
import sys
from pathlib import Path

import pytest

from workbench import timing
from workbench.catalog import model
from workbench.hf import import_hf
from workbench.layerops import layer_host_seconds
from workbench.params import lora_modules_per_layer
from workbench.specs import ClusterSpec, Implementation, ParallelPlan
from workbench.timing import StepInputs, microstep_host, time_inputs

from test_microstep_host import H200, _gpu, _terms  # the same max(host, GPU) helpers as megatron-core's floor
HF = Path(__file__).parent / "data" / "hf"


def _plan(**kw):
    base = dict(world_size=1, engine="deepspeed", zero_stage=1, micro_batch_size=1, global_batch_size=4,
                precision="bf16")
    base.update(kw)
    return ParallelPlan(**base)


def _hf(**kw):
    return model("gpt3-125m").replace(implementation=Implementation.TRANSFORMERS, **kw)


def test_catalog_constants_are_positive_where_measured_and_megatron_core_gets_none_of_them():
    cal = timing.calibration()["transformers"]
    assert cal["layer_base_host_s"] >= 0 and cal["recompute_layer_overhead_s"] >= 0
    assert timing.calibration()["layer_ops"]["op_host_s"] > 0
    assert 0 < cal["layer_forward_host_share"] < 1  # the recompute repeats the forward, not the backward
    assert cal["lora_module_host_s"] >= 0
    hf = time_inputs(_hf(), H200, _plan(lora_rank=8))
    # a LayerNorm transformers model is GPT-2-like: c_attn wraps q, k and v as one module; not gated: no gate
    assert hf["hf_layer_host_s"] == layer_host_seconds(_hf()) > 0 and hf["lora_modules_per_layer"] == 4
    assert hf["forward_host_share"] == cal["layer_forward_host_share"]
    mc = time_inputs(model("gpt3-125m"), H200, _plan(lora_rank=8))
    assert mc["hf_layer_host_s"] == mc["hf_recompute_layer_s"] == mc["hf_lora_module_host_s"] == 0.0
    # megatron-core layers have their own measured forward share (the forward phase of timing.host_wait)
    assert mc["forward_host_share"] == timing.calibration()["megatron_core"]["layer_forward_host_share"]


def test_host_grows_with_layers_and_lora_targets():
    per_layer, per_module = 0.004, 0.0001
    base = dict(hf_layer_host_s=per_layer, hf_lora_module_host_s=per_module)
    x = time_inputs(_hf(), H200, _plan(lora_rank=8, lora_targets=("q", "o")))
    x.update(base)
    s = StepInputs(**x)
    last8, _ = microstep_host(s, 8.0)
    last16, _ = microstep_host(s, 16.0)
    assert last8 == pytest.approx(8 * (per_layer + 2 * per_module))  # the fused QKV module and o
    assert last16 == pytest.approx(2 * last8)
    every = time_inputs(_hf(), H200, _plan(lora_rank=8))
    every.update(base)
    assert microstep_host(StepInputs(**every), 8.0)[0] == pytest.approx(8 * (per_layer + 4 * per_module))
    # a checkpointed layer keeps its own host time here and runs its adapters again in the recompute; the rest of
    # what checkpointing adds is the checkpoint term's
    full = time_inputs(_hf(), H200, _plan(lora_rank=8, recompute="full"))
    full.update(base)
    assert microstep_host(StepInputs(**full), 8.0)[0] == pytest.approx(8 * (per_layer + 2 * 4 * per_module))


def test_lora_modules_count_each_adapted_projection_and_each_expert():
    llama = import_hf(HF / "llama3-8b").spec
    assert lora_modules_per_layer(llama, 0, ("q", "v")) == 0
    assert lora_modules_per_layer(llama, 16, ("q", "k", "v", "o", "gate", "up", "down")) == 7
    moe = llama.replace(num_experts=8, moe_top_k=2, moe_ffn_hidden_size=1024)
    assert lora_modules_per_layer(moe, 16, ("q", "up", "down")) == 1 + 2 * 8


def test_exposed_host_is_the_excess_over_the_microbatch_gpu_time_once_per_microbatch():
    m, plan = _hf(), _plan()  # 4 micro-batches of one sequence
    x0, none = _terms(m, plan, hf_layer_host_s=0.0)
    gpu = _gpu(none)
    _, host = _terms(m, plan, hf_layer_host_s=2 * gpu / m.num_layers)
    assert host["host_microbatch_seconds"] == pytest.approx(2 * gpu)
    assert host["step_seconds"] - none["step_seconds"] == pytest.approx(x0["num_microbatches"] * gpu)
    assert host["compute"] - none["compute"] == pytest.approx(x0["num_microbatches"] * gpu)
    _, hidden = _terms(m, plan, hf_layer_host_s=0.5 * gpu / m.num_layers)  # shorter than the GPU's work: hidden
    assert hidden["step_seconds"] == pytest.approx(none["step_seconds"])
    assert hidden["host_exposed_seconds"] == 0.0


def test_a_checkpointed_layer_adds_its_forward_share_and_the_machinery_and_the_terms_meet_the_gpu_once():
    m = _hf()
    plan = _plan(recompute="full", recompute_layers=6)  # half of the 12 layers checkpointed
    zero = dict(hf_layer_host_s=0.0, hf_recompute_layer_s=0.0, forward_host_share=0.0)
    x, none = _terms(m, plan, **zero)
    gpu = _gpu(none)
    share, layer, machinery = 0.4, 0.7 * gpu / 12, 0.05 * gpu / 6
    # what the 6 checkpointed layers add: the recompute's forward share of their host, and the machinery
    added = timing.hf_checkpoint_host(StepInputs(**{**x, "hf_layer_host_s": layer, "hf_recompute_layer_s": machinery,
                                                    "forward_host_share": share}), 12.0)
    assert added == pytest.approx(6 * (share * layer + machinery))
    # the floor (every layer, 0.7 of the GPU time) and the checkpoint term (0.8 of it) each hide behind the GPU's
    # work, but not together: the micro-step waits for their sum
    _, floor_only = _terms(m, plan, **{**zero, "hf_layer_host_s": layer})
    _, ckpt_only = _terms(m, plan, **{**zero, "hf_recompute_layer_s": 0.8 * gpu / 6})
    assert floor_only["step_seconds"] == pytest.approx(none["step_seconds"])
    assert ckpt_only["step_seconds"] == pytest.approx(none["step_seconds"])
    share = 0.9
    _, both = _terms(m, plan, hf_layer_host_s=layer, hf_recompute_layer_s=machinery, forward_host_share=share)
    # the wait (timing.host_wait): the sum against the micro-batch's kernels, or the layers' forward host (the
    # share of the floor) against their forward kernels
    gpu_forward = 12 * none["layer_forward_seconds"]
    wait = lambda host: timing.host_wait(host, gpu, share * 12 * layer, gpu_forward)  # noqa: E731
    extra = x["num_microbatches"] * wait(12 * layer + 6 * (share * layer + machinery))
    assert extra > 0 and 12 * layer + 6 * (share * layer + machinery) > gpu
    assert both["step_seconds"] - none["step_seconds"] == pytest.approx(extra)
    # what the floor's own wait leaves is the checkpointed layers': the recompute's
    assert both["recompute"] - none["recompute"] == pytest.approx(extra - x["num_microbatches"] * wait(12 * layer))
    # a checkpointed MoE layer's recompute runs its experts block's forward again (ZeRO 0-2, where that term is priced)
    moe = dict(x, hf_layer_host_s=layer, forward_host_share=share, moe_block_host_s=0.002)
    assert timing.hf_checkpoint_host(StepInputs(**moe), 12.0) - timing.hf_checkpoint_host(
        StepInputs(**{**moe, "moe_block_host_s": 0.0}), 12.0) == pytest.approx(6 * share * 0.002)
    assert timing.hf_checkpoint_host(StepInputs(**{**moe, "zero_stage": 3}), 12.0) == pytest.approx(
        6 * (share * layer + x["hf_recompute_layer_s"]))
    # no layer checkpointed: no checkpoint term, whatever the constants
    plain = time_inputs(m, H200, _plan())
    assert timing.hf_checkpoint_host(StepInputs(**{**plain, "hf_recompute_layer_s": 1.0}), 12.0) == 0.0


def test_no_layer_floor_at_zero3_but_the_checkpoint_term_stays():
    m = _hf()
    x, z3 = _terms(m, _plan(zero_stage=3), hf_layer_host_s=1.0)
    assert z3["host_exposed_seconds"] == 0.0
    _, ckpt = _terms(m, _plan(zero_stage=3, recompute="full"), hf_recompute_layer_s=1.0)
    assert ckpt["recompute"] > 4 * 12 * 1.0 * 0.9  # 4 micro-batches of 12 host-bound checkpointed layers


def test_zero2_hooks_count_the_trainable_tensors():
    m = _hf()
    x = time_inputs(m, H200, _plan(zero_stage=2))
    lora = time_inputs(m, H200, _plan(zero_stage=2, lora_rank=8))
    assert timing.zero2_hook_seconds(StepInputs(**x), 12) == pytest.approx(
        x["parameter_tensors"] * x["deepspeed_tensor_seconds"])
    assert timing.zero2_hook_seconds(StepInputs(**lora), 12) == pytest.approx(
        2 * 4 * 12 * lora["deepspeed_tensor_seconds"])  # A and B of 4 adapted modules (fused QKV, o, up, down) x 12


def test_ulysses_lora_recompute_is_priced_against_a_host_floor_without_recompute_too():
    """Qwen3-0.6B, LoRA, Ulysses over 8 GPUs and 64 micro-batches of one 4k sequence (512 tokens per GPU): every
    micro-step is host-bound with or without recompute, so full recompute costs the checkpointed layers' host time
    over the plain layers' (a checkpointed layer's host, (1 + layer_forward_host_share) x its layer host +
    recompute_layer_overhead_s with its adapters twice, over a plain one's), not the 20x a floorless plain step would
    show."""
    from workbench.estimate import estimate

    m = import_hf(HF / "qwen3-0_6b", seq_length=4096, attn_implementation="sdpa").spec
    cluster = ClusterSpec(gpu="H200", gpus_per_node=8)
    cal = timing.calibration()["transformers"]
    steps, host = {}, {}
    for rc in ("none", "full"):
        plan = ParallelPlan(world_size=8, engine="deepspeed", zero_stage=2, ulysses=8, recompute=rc, lora_rank=16,
                            micro_batch_size=1, global_batch_size=64)
        t = estimate(m, cluster, plan).time
        steps[rc] = t.step_seconds
        lora = lora_modules_per_layer(m, 16, plan.lora_targets) * cal["lora_module_host_s"]
        layer = layer_host_seconds(m)
        host[rc] = (layer + lora if rc == "none" else
                    (1 + cal["layer_forward_host_share"]) * layer + cal["recompute_layer_overhead_s"] + 2 * lora)
        assert t.step_seconds >= 64 * m.num_layers * host[rc]  # each micro-step at least its host time
    ratio = steps["full"] / steps["none"]
    assert 1.5 < ratio < host["full"] / host["none"]


def test_fit_script_recovers_known_constants():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fit_hf_host as F

    true = (0.0005, 12e-6, 0.0002, 0.0012)  # layer base, per operator, LoRA projection, checkpoint machinery
    ops = {"a": 150.0, "b": 208.0, "c": 300.0, "d": 250.0}  # operators per layer of each shape's design
    rows = [dict(shape_id=s, step0=0.04, m=m, layers=8.0, f=f, lora=n, gpu=g, hooks=h, moe=e, share=0.5,
                 gpu_forward=g / 3, ops=ops[s], measured=0.0)
            for s, m, f, n, g, h, e in (("a", 1, 0.0, 0.0, 0.010, 0.0, 0.0), ("a", 2, 0.0, 0.0, 0.012, 0.004, 0.0),
                                        ("b", 1, 1.0, 0.0, 0.030, 0.0, 0.0), ("b", 1, 1.0, 4.0, 0.030, 0.0, 0.0),
                                        ("c", 1, 0.0, 7.0, 0.008, 0.0, 0.0), ("c", 1, 0.0, 0.0, 0.100, 0.0, 0.0),
                                        ("d", 1, 1.0, 0.0, 0.030, 0.0, 0.002))]
    for r in rows:
        r["measured"] = float(F.predicted([r], *true)[0, 0])
    # a checkpointed layer's host: (1 + share) x the layer's (its MoE block's too) + the machinery
    layer_b = 0.0005 + 12e-6 * 208  # 3.0 ms
    assert rows[2]["measured"] - rows[2]["step0"] == pytest.approx(8 * (1.5 * layer_b + 0.0012) - 0.030)
    assert rows[6]["measured"] - rows[2]["measured"] == pytest.approx(
        8 * 1.5 * (0.002 + 12e-6 * (250 - 208)), rel=1e-9)
    assert F.fit(rows, recompute_s=0.0012) == pytest.approx(true, abs=1e-6)
    # a forward whose host outlasts its kernels waits even when the micro-step's host hides (timing.host_wait)
    phase = dict(rows[5], gpu=0.100, gpu_forward=0.010)
    assert F.predicted([phase], *true)[0, 0] - phase["step0"] == pytest.approx(0.5 * 8 * (0.0005 + 12e-6 * 300) - 0.010)
    # a GPU-bound run says nothing: no host time is the answer
    assert F.fit([rows[5]], recompute_s=0.0) == (0.0, 0.0, 0.0, 0.0)
