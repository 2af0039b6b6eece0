"""transformers checkpoints whole decoder layers (``activation_checkpointing_enable``): a Hugging Face model has no
selective recompute, and a partial layer count only as transformers' ``every_n_layers`` (5.24) reaches it: layers 0, k,
2k, ... — the validation, the estimate, the replay, the export and the launcher agree on which."""
import json
from pathlib import Path

import pytest

from workbench import advisor
from workbench.hf import import_hf
from workbench.planner import search
from workbench.specs import ClusterSpec, ParallelPlan, validate

HF = Path(__file__).parent / "data" / "hf"


@pytest.fixture(scope="module")
def llama():
    return import_hf(HF / "llama3-8b", seq_length=4096).spec


def test_validation_names_the_field_and_the_alternative(llama):
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    with pytest.raises(ValueError, match=r"recompute='selective' is megatron-core's .* recompute='full' or 'none'"):
        validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="selective"))
    with pytest.raises(ValueError, match=r"recompute_layers=20 of num_layers=32: transformers checkpoints every "
                                         r"k-th decoder layer .* which gives 32, 16, 11, 8, 7, 6, 5, 4, 3, 2, 1 "
                                         r"layers"):
        validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="full", recompute_layers=20))
    validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="full"))  # whole layers: fine
    validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="full", recompute_layers=4))  # k=8


def test_planner_searches_full_and_none_only(llama):
    found = search(llama, ClusterSpec(gpu="A100-40GB", gpus_per_node=8), global_batch_size=32, top=50,
                   lora_rank=16)
    modes = {str(r.plan.recompute) for r in found.ranked}
    assert modes and "selective" not in modes and modes <= {"none", "full"}


def test_planner_searches_the_layer_counts_every_n_layers_reaches(llama):
    """Each full-recompute row also as every ⌈L/k⌉ count, priced as estimate prices the plan, ranked as
    rank_plan ranks it."""
    from workbench.estimate import estimate
    from workbench.planner import rank_plan

    cluster = ClusterSpec(gpu="H200", gpus_per_node=8)
    found = search(llama, cluster, global_batch_size=32, top=5000)
    counts = {r.plan.recompute_layers for r in found.ranked if str(r.plan.recompute) == "full"}
    assert counts == {None, 16, 11, 8, 7, 6, 5, 4, 3, 2, 1}
    partial = [(i, r) for i, r in enumerate(found.ranked) if r.plan.recompute_layers is not None][:3]
    for i, r in partial:
        est = estimate(llama, cluster, r.plan, checks=False)
        assert r.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
        assert r.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)
        assert rank_plan(llama, cluster, r.plan).rank == i + 1
        n = r.plan.recompute_layers
        assert f"recompute=full({n} layer{'s' if n != 1 else ''})" in r.describe()
        assert r.to_dict()["recompute_layers"] == n
    with pytest.raises(ValueError, match="recompute lists only 'selective'"):
        search(llama, ClusterSpec(gpu="H200", gpus_per_node=8), global_batch_size=32, recompute=("selective",))


def test_explanation_names_recomputed_layers_only_between_recomputing_plans(llama):
    """A plan without recompute recomputes no layer: against a partial one the explanation says 'recompute none vs
    full', not 'recomputed layers all vs 1'; between two recomputing plans it names both counts."""
    from workbench.planner import explain

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    found = search(llama, cluster, global_batch_size=8, top=5000)
    key = lambda r: (r.plan.zero_stage, str(r.plan.offload_optimizer), r.plan.micro_batch_size)  # noqa: E731
    none = next(r for r in found.ranked if str(r.plan.recompute) == "none")
    one = next(r for r in found.ranked if r.plan.recompute_layers == 1 and key(r) == key(none))
    every = next(r for r in found.ranked if str(r.plan.recompute) == "full" and r.plan.recompute_layers is None
                 and key(r) == key(none))
    text = explain(none, one, model=llama, cluster=cluster)
    assert "differs in recompute none vs full." in text and "recomputed layers" not in text
    assert "recomputed layers all vs 1" in explain(every, one, model=llama, cluster=cluster)


def test_a_winner_checkpointing_some_layers_names_the_call_that_does_it(llama):
    """When the fastest plan checkpoints only some decoder layers the explanation names transformers' call
    (every_n_layers k, the layers it gives); a winner checkpointing every layer or none says nothing of it."""
    from workbench.planner import explain

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    found = search(llama, cluster, global_batch_size=8, top=5000)
    partial = next(r for r in found.ranked if r.plan.recompute_layers == 8)
    text = explain(partial, None, model=llama, cluster=cluster).splitlines()[0]
    assert ("Its gradient checkpointing is on for decoder layers 0, 4, 8, ... (8 of 32; "
            "activation_checkpointing_enable(every_n_layers=4), transformers >= 5.24)") in text
    for r in (next(r for r in found.ranked if str(r.plan.recompute) == "none"),
              next(r for r in found.ranked if str(r.plan.recompute) == "full" and r.plan.recompute_layers is None)):
        assert "every_n_layers" not in explain(r, None, model=llama, cluster=cluster)


def test_oom_ladder_and_throughput_advice_skip_selective(llama):
    import dataclasses

    from workbench.estimate import estimate

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, lora_rank=16, micro_batch_size=1, global_batch_size=1)
    peak = estimate(llama, cluster, plan).memory.per_gpu_peak_bytes
    tight = cluster.replace(gpu=dataclasses.replace(cluster.gpu, memory_gib=peak * 0.8 / 2**30))
    ladder = advisor.oom_ladder(llama, tight, plan)
    recompute_rungs = [s for s in ladder if s.step == 2]
    assert recompute_rungs and all("selective" not in s.action for s in recompute_rungs)
    assert all(s.settings.get("activation_checkpointing") is True for s in recompute_rungs if s.plan is not None)
    full = plan.replace(recompute="full")
    advice = advisor.throughput_suggestions(llama, cluster, full, estimate(llama, cluster, full).time)
    text = " ".join(" ".join(a.settings) for a in advice if a.term == "recompute")
    assert "selective" not in text and "gradient checkpointing off" in text


@pytest.mark.parametrize("layers", [6, 7])
def test_every_n_layers_checkpoints_the_layers_the_workbench_counts(layers):
    """transformers marks decoder layers 0, k, 2k, ... (its _set_gradient_checkpointing): ⌈L/k⌉ of them, the count
    hf_checkpoint_every maps back to a k that marks as many."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_layers import GradientCheckpointingLayer

    from workbench.hf import enable_layer_checkpointing
    from workbench.specs import hf_checkpoint_every

    data = json.loads((HF / "tiny-llama" / "config.json").read_text())
    data.pop("architectures")
    config = AutoConfig.for_model(data.pop("model_type"), **{**data, "num_hidden_layers": layers})
    for k in range(1, layers + 1):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        enable_layer_checkpointing(model, k)
        decoder = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        marked = [i for i, m in enumerate(decoder) if m.gradient_checkpointing]
        assert len(decoder) == layers and marked == list(range(0, layers, k))
        back = hf_checkpoint_every(layers, len(marked))
        assert back <= k and len(range(0, layers, back)) == len(marked)


def test_partial_checkpointing_through_estimate_replay_export_and_launch():
    """recompute_layers of an HF model = the layers every_n_layers checkpoints: the estimate's activations and step
    time fall between none and every layer, the replayed allocator's traced peak too, the Trainer's arguments carry
    every_n_layers and the launcher's options the same k."""
    from workbench.allocsim import plan_replayed_peaks
    from workbench.configs.deepspeed import hf_training_arguments
    from workbench.estimate import estimate
    from workbench.hf import run_options

    tiny = import_hf(HF / "tiny-llama", seq_length=128).spec
    spec = tiny.replace(num_layers=2)
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    base = ParallelPlan(world_size=1, zero_stage=2, micro_batch_size=2, global_batch_size=2)
    none, every, half = (base, base.replace(recompute="full"), base.replace(recompute="full", recompute_layers=1))
    est = {name: estimate(spec, cluster, p, checks=False) for name, p in
           (("none", none), ("every", every), ("half", half))}
    act = {k: e.memory.breakdown.activations for k, e in est.items()}
    assert act["every"] < act["half"] < act["none"]
    assert est["none"].time.step_seconds < est["half"].time.step_seconds < est["every"].time.step_seconds
    config = json.loads((HF / "tiny-llama" / "config.json").read_text())
    peaks = {k: plan_replayed_peaks(spec, cluster, p, config).peak_allocated_bytes
             for k, p in (("none", none), ("every", every), ("half", half))}
    assert peaks["every"] < peaks["half"] < peaks["none"]
    args = hf_training_arguments(spec, cluster, half)
    assert args["activation_checkpointing"] and args["activation_checkpointing_kwargs"] == {
        "use_reentrant": False, "every_n_layers": 2}
    assert "every_n_layers" not in hf_training_arguments(spec, cluster, every)["activation_checkpointing_kwargs"]
    # the non-Trainer export: no DeepSpeed activation_checkpointing section (an HF model checkpoints through
    # torch.utils.checkpoint), the model's call in the launch script instead
    from workbench.configs.deepspeed import build_ds_config, hf_checkpointing_line

    assert "activation_checkpointing" not in build_ds_config(spec, cluster, half)
    assert hf_checkpointing_line(spec, half).startswith(
        "model.activation_checkpointing_enable(activation_checkpointing_kwargs={'use_reentrant': False}, "
        "every_n_layers=2)")
    assert "every_n_layers" not in hf_checkpointing_line(spec, every) and hf_checkpointing_line(spec, none) == ""
    tiny_spec = import_hf(HF / "tiny-llama", seq_length=128).spec
    options = run_options(tiny_spec, half)
    assert options["gradient_checkpointing"] and options["checkpoint_every"] == 2
    assert run_options(tiny_spec, every)["checkpoint_every"] == 1


def test_oom_ladder_checkpoints_the_fewest_layers_that_fit():
    """For a transformers model the ladder's checkpointing step tries every_n_layers from the fewest checkpointed
    layers up (each recomputes only those layers), and keeps the first that fits: cheaper than every layer."""
    import dataclasses

    from workbench.estimate import estimate

    llama = import_hf(HF / "llama3-8b", seq_length=8192).spec
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, lora_rank=16, micro_batch_size=1, global_batch_size=1)
    peak = estimate(llama, cluster, plan).memory.per_gpu_peak_bytes
    tight = cluster.replace(gpu=dataclasses.replace(cluster.gpu, memory_gib=peak * 0.8 / 2**30))
    ladder = [s for s in advisor.oom_ladder(llama, tight, plan) if s.plan is not None]
    last = ladder[-1]
    assert last.fits and last.step == 2 and str(last.plan.recompute) == "full"
    n = last.plan.recompute_layers
    assert n is not None and n < llama.num_layers and "every 2nd decoder layer (16 of 32" in last.action
    assert last.settings["activation_checkpointing_kwargs"] == {"use_reentrant": False, "every_n_layers": 2}
    every = estimate(llama, tight, last.plan.replace(recompute_layers=None), checks=False)
    assert last.step_seconds < every.time.step_seconds  # fewer layers recomputed
    fewer = last.plan.replace(recompute_layers=11)  # every 3rd layer: does not fit
    mem = estimate(llama, tight, fewer, checks=False).memory
    assert not mem.fits_gpu


def test_throughput_advice_checkpoints_fewer_layers_when_none_does_not_fit():
    """Checkpointing every layer costs a forward; where turning it off does not fit, the advice prices the fewest
    layers every_n_layers checkpoints that still fit."""
    import dataclasses

    from workbench.estimate import estimate

    llama = import_hf(HF / "llama3-8b", seq_length=8192).spec
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, lora_rank=16, micro_batch_size=1, global_batch_size=1,
                        recompute="full")
    def on(gib):
        return cluster.replace(gpu=dataclasses.replace(cluster.gpu, memory_gib=gib))

    # the smallest GPU (in 1 % steps) on which 16 checkpointed layers fit, judged as the estimate judges (its error
    # band's upper side), so the test does not hang on the band's width
    gib = estimate(llama, cluster, plan.replace(recompute_layers=16)).memory.per_gpu_peak_bytes / 2**30
    while not estimate(llama, on(gib), plan.replace(recompute_layers=16)).memory.fits:
        gib *= 1.01
    tight = on(gib)
    assert not estimate(llama, tight, plan.replace(recompute="none")).memory.fits
    full = estimate(llama, tight, plan)
    advice = next(a for a in advisor.throughput_suggestions(llama, tight, plan, full.time) if a.term == "recompute")
    assert "every 2nd decoder layer only (16 of 32)" in " ".join(advice.settings)
    assert "'every_n_layers': 2" in " ".join(advice.settings) and "(fits)" in advice.message
    half = estimate(llama, tight, plan.replace(recompute_layers=16))
    assert half.memory.fits and advice.predicted_step_seconds == pytest.approx(half.time.step_seconds)
    assert not estimate(llama, tight, plan.replace(recompute_layers=11)).memory.fits  # every 3rd: too much


def test_the_trainer_checkpoints_the_layers_the_exported_arguments_name(tmp_path):
    """The exported TrainingArguments' checkpointing keys, given to transformers' Trainer as they are, checkpoint
    decoder layers 0, k, 2k, ... and no others (the Trainer takes every_n_layers out of the kwargs)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments
    from transformers.modeling_layers import GradientCheckpointingLayer

    from workbench.configs.deepspeed import hf_training_arguments

    spec = import_hf(HF / "tiny-llama", seq_length=16).spec.replace(num_layers=4)
    plan = ParallelPlan(world_size=1, zero_stage=2, micro_batch_size=1, global_batch_size=1, recompute="full",
                        recompute_layers=2)
    exported = hf_training_arguments(spec, ClusterSpec(gpu="H200", gpus_per_node=1), plan)
    keys = {k: exported[k] for k in ("activation_checkpointing", "activation_checkpointing_kwargs")}
    config = AutoConfig.from_pretrained(HF / "tiny-llama")
    config.num_hidden_layers = 4
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.randint(0, config.vocab_size, (2, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=1,
                             report_to="none", save_strategy="no", disable_tqdm=True, **keys)
    Trainer(model=model, args=args, train_dataset=data).train()
    flags = [m.gradient_checkpointing for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    assert flags == [True, False, True, False]
