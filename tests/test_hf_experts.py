"""transformers' MoE ``experts_implementation`` (grouped_mm, eager) as a stack option, and Phi-3's fused projections:
validation, import, CLI and launch plumbing, and what the eager experts cost in memory (counted on the CPU), host
time (the H200 micro-benchmark) and HBM bytes (the H200 profile)."""
import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workbench import cli, params, timing  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.hf import build_model, import_hf, model_from_hf, run_options  # noqa: E402
from workbench.runs.specio import specs_from_dict, specs_to_dict  # noqa: E402
from workbench.specs import ClusterSpec, ExpertsImpl, ModelSpec, ParallelPlan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "data" / "hf"
sys.path.insert(0, str(ROOT / "benchmarks"))

MOE = HF / "qwen3-moe-tiny"
TOY = dict(num_layers=2, hidden_size=256, num_attention_heads=8, activation="swiglu", normalization="rmsnorm",
           add_bias_linear=False, position_embedding="rotary", implementation="transformers")


def _plan(**kw):
    return ParallelPlan(engine="deepspeed", world_size=1, micro_batch_size=2, global_batch_size=2, zero_stage=2, **kw)


CLUSTER = ClusterSpec(gpu="H200", gpus_per_node=1)


# ---------------------------------------------------------------------------------------------------------------
# The spec field
# ---------------------------------------------------------------------------------------------------------------
def test_transformers_moe_defaults_to_grouped_mm_and_dense_or_megatron_models_have_none():
    moe = ModelSpec(num_experts=16, moe_top_k=4, **TOY)
    assert moe.experts_implementation is ExpertsImpl.GROUPED_MM
    assert ModelSpec(**TOY).experts_implementation is None
    assert moe.replace(implementation="megatron").experts_implementation is None  # the default follows the stack
    assert moe.replace(experts_implementation="eager").experts_implementation is ExpertsImpl.EAGER
    assert moe.replace(experts_implementation="eager").replace(num_experts=32).experts_implementation == "eager"


@pytest.mark.parametrize("change, message", [
    (dict(num_experts=None, experts_implementation="eager"), "experts_implementation='eager' .* a dense model"),
    (dict(implementation="megatron", experts_implementation="grouped_mm"),
     "experts_implementation='grouped_mm' .* a megatron model"),
    (dict(experts_implementation="batched_mm"), "experts_implementation='batched_mm': transformers has it, but the "
                                                "workbench models only grouped_mm, eager"),
    (dict(experts_implementation="fast"), "experts_implementation='fast' is not one of: grouped_mm, eager"),
    (dict(num_experts=None, fused_projections=True, implementation="megatron"),
     "fused_projections=True .* implementation='megatron'"),
    (dict(fused_projections=True), "fused_projections=True .* num_experts=16"),
    (dict(num_experts=None, fused_projections="yes"), "fused_projections='yes' must be True or False"),
])
def test_refusals_name_the_field_and_the_values(change, message):
    with pytest.raises(ValueError, match=message):
        ModelSpec(**{**TOY, "num_experts": 16, "moe_top_k": 4, **change})


def test_fields_round_trip_through_the_run_json():
    model = import_hf(MOE, experts_implementation="eager").spec
    plan = _plan()
    back, _, _ = specs_from_dict(json.loads(json.dumps(specs_to_dict(model, CLUSTER, plan))))
    assert back == model and back.experts_implementation is ExpertsImpl.EAGER
    phi3 = import_hf(HF / "phi3-mini").spec
    assert phi3.fused_projections is True
    back, _, _ = specs_from_dict(json.loads(json.dumps(specs_to_dict(phi3, CLUSTER, plan))))
    assert back == phi3 and back.fused_projections is True
    assert import_hf(HF / "llama2-7b").spec.fused_projections is False


# ---------------------------------------------------------------------------------------------------------------
# Import, CLI and launch
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["experts_implementation", "_experts_implementation"])
def test_a_config_json_that_names_it_is_read(tmp_path, key):
    config = json.loads((MOE / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, key: "eager"}))
    assert import_hf(tmp_path).spec.experts_implementation is ExpertsImpl.EAGER
    assert import_hf(tmp_path, experts_implementation="grouped_mm").spec.experts_implementation == "grouped_mm"
    # a dense family's config may carry it too: transformers ignores it there, and so does the import
    dense = json.loads((HF / "tiny-llama" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**dense, key: "eager"}))
    assert import_hf(tmp_path).spec.experts_implementation is None
    with pytest.raises(ValueError, match="config.json: experts_implementation='eager' .* a dense model"):
        import_hf(tmp_path, experts_implementation="eager")


def test_cli_takes_the_flag_and_json_reports_it(capsys):
    args = ["--model", f"hf:{MOE}", "--gpu", "H200", "--gpus-per-node", "1", "--zero", "2", "--mbs", "2"]
    assert cli.main(["estimate", *args, "--json"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert grouped["plan"]["experts_implementation"] == "grouped_mm"
    assert cli.main(["estimate", *args, "--experts-implementation", "eager", "--json"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert eager["plan"]["experts_implementation"] == "eager"
    assert eager["time"]["step_seconds"] > grouped["time"]["step_seconds"]
    assert eager["memory"]["breakdown"]["activations"] > grouped["memory"]["breakdown"]["activations"]
    for command in (["estimate"], ["plan"], ["advise"], ["export", "deepspeed"]):
        extra = ["--gpus", "8", "--gbs", "64"] if command == ["plan"] else []
        assert cli.main([*command, "--model", "llama3-8b", "--gpu", "H200", *extra, "--experts-implementation",
                         "eager"]) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "experts_implementation='eager'" in err and "dense" in err, command
    with pytest.raises(SystemExit):
        cli.main(["estimate", "--help"])
    out = capsys.readouterr().out
    assert "--experts-implementation" in out and "config._experts_implementation" in out


def test_the_launch_passes_it_to_transformers():
    spec = model_from_hf(str(MOE), experts_implementation="eager")
    assert spec.name == f"hf:{MOE}"
    assert run_options(spec, _plan())["experts_implementation"] == "eager"
    assert run_options(import_hf(str(MOE)).spec, _plan())["experts_implementation"] == "grouped_mm"
    assert run_options(import_hf(str(HF / "tiny-llama")).spec, _plan())["experts_implementation"] is None
    # what transformers builds with it (the launcher's from_config keyword)
    model = build_model(MOE, experts_implementation="eager")
    assert model.config._experts_implementation == "eager"


# ---------------------------------------------------------------------------------------------------------------
# What eager experts cost
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe", "mixtral"])
def test_eager_activation_bytes_match_what_the_eager_block_saves_on_the_cpu(family):
    """benchmarks/hf_moe_saved_tensors_cpu.py --experts-implementation eager: every tensor autograd keeps from the
    eager block's forward (each expert's gathered input, fc1 output, activation, product, down output, weighted
    output, gathered weight and index pair), against workbench.memory.moe_activation_bytes, within 1 %."""
    pytest.importorskip("transformers")
    import hf_moe_saved_tensors_cpu as cpu

    cfg = cpu.config(family)
    got = cpu.count(cfg, 256, "eager")["bytes"]
    grouped = cpu.count(cfg, 256, "grouped_mm")["bytes"]
    assert got > grouped  # the weighted output index_add_ keeps, per copy
    assert cpu.predicted(cfg, 256, "eager") == pytest.approx(got, rel=0.01)


def test_eager_host_constants_are_the_fit_of_the_h200_micro_benchmark():
    import gpu_hf_moe_host as bench

    cal = timing.calibration()["transformers"]
    a, b = bench.eager_fit()
    assert cal["moe_eager_block_host_s"] == pytest.approx(a, rel=0.01)
    assert cal["moe_eager_expert_host_s"] == pytest.approx(b, rel=0.01)
    for (_experts, _top_k, hit), ms in bench.EAGER_HOST_MS.items():
        assert 0.85 < (a + b * hit) * 1e3 / ms < 1.25, hit


def test_eager_block_host_grows_with_the_experts_hit_and_joins_the_step():
    spec = import_hf(MOE, seq_length=1024).spec
    grouped = estimate(spec, CLUSTER, _plan())
    eager = estimate(spec.replace(experts_implementation="eager"), CLUSTER, _plan())
    cal = timing.calibration()["transformers"]
    assert eager.time.inputs["hf_moe_experts"] == 2.0 and grouped.time.inputs["hf_moe_experts"] == 1.0
    assert eager.time.inputs["moe_expert_host_s"] == cal["moe_eager_expert_host_s"]
    assert grouped.time.inputs["moe_expert_host_s"] == 0.0
    x = timing.StepInputs(**eager.time.inputs)
    hit = timing.experts_hit(tokens=2 * 1024, experts=16, top_k=4)
    assert hit == pytest.approx(16.0)  # 2048 tokens x 4 reach every one of 16 experts
    expected = cal["moe_eager_block_host_s"] + 16 * cal["moe_eager_expert_host_s"]
    assert timing.moe_block_host(x, 4) == pytest.approx(4 * expected)
    # at ZeRO-3 the loop's per-expert host remains (the fixed part is the hooks' to price)
    z3 = timing.StepInputs(**{**eager.time.inputs, "zero_stage": 3})
    assert timing.moe_block_host(z3, 4) == pytest.approx(4 * 16 * cal["moe_eager_expert_host_s"])
    # few tokens reach few experts: two tokens top-4 of 16 reach under eight
    assert 4 < timing.experts_hit(tokens=2, experts=16, top_k=4) < 8
    # 4 layers of 16 experts at 1.4 ms a hit: host-bound, the step grows by about the host time
    extra = eager.time.step_seconds - grouped.time.step_seconds
    assert extra == pytest.approx(4 * (expected - cal["moe_block_host_s"]), rel=0.15)


def test_eager_gradient_buffers_match_the_h200_profile():
    """The eager block's backward zero-fills a whole-input and a whole-weight gradient per expert hit and sums them
    (IndexBackward0, SelectBackward0): priced at the Hopper curve's HBM efficiency, within 20 % of the zero-fill
    and sum kernels the profiler measured (benchmarks/gpu_hf_moe_host.py EAGER_KERNEL_MS), O(E²) in the experts."""
    import gpu_hf_moe_host as bench

    for (h, f, experts, top_k, tokens), (_gemm, _other, fills_ms) in bench.EAGER_KERNEL_MS.items():
        hit = timing.experts_hit(tokens=tokens, experts=experts, top_k=top_k)
        counted = timing.hf_eager_experts_bytes(tokens=tokens, experts_hit=hit, num_experts=experts, hidden_size=h,
                                                ffn_hidden_size=f, gated=1, value_bytes=2)
        priced_ms = counted / (4800e9 * 0.8) * 1e3
        assert 0.8 < priced_ms / fills_ms < 1.2, (experts, priced_ms, fills_ms)
    one = dict(tokens=0, hidden_size=768, ffn_hidden_size=384, gated=1, value_bytes=2)
    assert (timing.hf_eager_experts_bytes(experts_hit=64, num_experts=64, **one)
            == 4 * timing.hf_eager_experts_bytes(experts_hit=32, num_experts=32, **one))
    assert timing.hf_eager_experts_bytes(experts_hit=8, num_experts=8, trainable_experts=0.0, **one) == 0.0
    # in the step: the eager layer's GPU time exceeds grouped_mm's by those bytes (the forward's kernels alone: its
    # host share, which would make the eager block's forward wait for the host, at 0)
    spec = import_hf(MOE, seq_length=1024).spec

    def kernels(s):
        x = timing.time_inputs(s, CLUSTER, _plan())
        return timing.step_time_terms(**{**x, "forward_host_share": 0.0})["layer_forward_seconds"]

    g, e = kernels(spec), kernels(spec.replace(experts_implementation="eager"))
    extra = timing.hf_eager_experts_bytes(tokens=2048, experts_hit=16.0, num_experts=16, hidden_size=256,
                                          ffn_hidden_size=128, gated=1, value_bytes=2) / 3 / (4800e9 * 0.8)
    assert e - g == pytest.approx(extra, rel=0.02)


# ---------------------------------------------------------------------------------------------------------------
# Phi-3's fused projections
# ---------------------------------------------------------------------------------------------------------------
def test_phi3_counts_its_four_fused_linears():
    phi3 = import_hf(HF / "phi3-mini").spec
    llama_like = phi3.replace(fused_projections=False)
    assert phi3.num_parameters == llama_like.num_parameters  # the same weights, fused
    assert timing.zero3_modules_per_layer(phi3) == 4 and timing.zero3_modules_per_layer(llama_like) == 7
    assert timing.zero3_hooked_modules_per_layer(phi3) == 12
    assert params.layer_linear_tensors(phi3) == 4 and params.layer_linear_tensors(llama_like) == 7
    model = build_model(HF / "phi3-mini")
    layer = next(m for n, m in model.named_modules() if n.endswith("layers.0"))
    assert params.layer_linear_tensors(phi3) == sum(1 for n, _ in layer.named_parameters() if "proj" in n)
    assert len(list(layer.modules())) == 12
    # peft wraps qkv_proj and gate_up_proj whole: q, k, v one adapter, gate and up one
    assert params.lora_modules_per_layer(phi3, 8, ("q", "k", "v", "o", "gate", "up", "down")) == 4
    assert params.lora_modules_per_layer(phi3, 8, ("q", "k", "v")) == 1
    assert params.lora_modules_per_layer(llama_like, 8, ("q", "k", "v")) == 3
    # fewer hooked tensors: ZeRO-2's per-tensor hook time drops with them
    plan = _plan()
    fused = estimate(phi3.replace(num_layers=4), CLUSTER, plan).time.inputs["parameter_tensors"]
    apart = estimate(llama_like.replace(num_layers=4), CLUSTER, plan).time.inputs["parameter_tensors"]
    assert apart - fused == 4 * 3


# ---------------------------------------------------------------------------------------------------------------
# The model panel
# ---------------------------------------------------------------------------------------------------------------
def test_model_panel_sets_the_experts_implementation_of_a_transformers_moe_model():
    pytest.importorskip("ipywidgets")
    from widgets.app import Workbench
    from widgets.state import LoadSpecs

    app = Workbench()
    try:
        mdl = next(p for p in app.panels if p.title == "Model")
        box = mdl.controls["experts_implementation"]
        assert box.disabled  # the starting example is a dense megatron-core model
        spec = import_hf(MOE, seq_length=1024).spec
        app.dispatch(LoadSpecs(model=spec, cluster=CLUSTER, plan=_plan()))
        assert app.state.valid, app.state.error
        assert app.state.model.experts_implementation is ExpertsImpl.GROUPED_MM
        assert not box.disabled and box.value == "grouped_mm"
        box.value = "eager"
        assert app.state.model.experts_implementation is ExpertsImpl.EAGER
        # the model becoming megatron-core drops transformers' setting instead of being refused
        box.value = "grouped_mm"
        mdl.controls["implementation"].value = "megatron"
        assert app.state.model.experts_implementation is None and box.disabled
    finally:
        app.close()


def test_gpt2_and_neox_fused_qkv_is_one_lora_module():
    """peft wraps GPT-2's c_attn and GPT-NeoX's query_key_value whole: q, k and v targets are one module."""
    for name in ("gpt2", "pythia-160m"):
        spec = import_hf(HF / name).spec
        assert params.hf_fused_qkv(spec)
        assert params.lora_modules_per_layer(spec, 8, ("q", "k", "v")) == 1
        assert params.lora_modules_per_layer(spec, 8, ("q", "v", "o")) == 2
        assert params.lora_modules_per_layer(spec, 0, ("q", "v", "o")) == 0
    assert not params.hf_fused_qkv(import_hf(HF / "phi3-mini").spec.replace(fused_projections=False))
