"""What the Hugging Face Trainer's way of training changes in memory (final59's allocator histories): LoRA adapters
left in fp32 by a model built inside deepspeed.zero.Init, GPT-2's Conv1D projections that DeepSpeed's ZeRO-3 linear
does not touch, GPT-2's fused or op-by-op GELU, and ZeRO-2 offload's oversized gradients held before the
accumulation boundary."""
from pathlib import Path

import pytest

from workbench import memory as M
from workbench.catalog import model
from workbench.estimate import estimate
from workbench.hf import import_hf, read_config
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan

HF = Path(__file__).parent / "data" / "hf"
ONE = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)


def gpt2(activation="gelu_new"):
    cfg = dict(read_config(HF / "gpt2"), activation_function=activation)
    return import_hf(cfg, seq_length=512).spec


def test_gelu_variants():
    assert gpt2("gelu_new").gelu_unfused and not gpt2("gelu").gelu_unfused
    assert not gpt2("gelu_pytorch_tanh").gelu_unfused
    extra = M.hf_layer_extra_bytes_per_token(gpt2("gelu_new"), value_bytes=2) - M.hf_layer_extra_bytes_per_token(
        gpt2("gelu"), value_bytes=2)
    assert extra == 3 * 2 * gpt2().ffn_hidden_size  # three f-wide tensors of the op-by-op tanh GELU
    assert not ModelSpec(name="m", num_layers=2, hidden_size=64, num_attention_heads=4).gelu_unfused
    with pytest.raises(ValueError, match="gelu_unfused=True .* needs a transformers model"):
        ModelSpec(name="m", num_layers=2, hidden_size=64, num_attention_heads=4, gelu_unfused=True)


def test_zero3_linear_leaves_gpt2_conv1d_alone():
    assert not M.zero3_linear_keeps_inputs(gpt2())
    assert M.zero3_linear_keeps_inputs(import_hf(HF / "llama2-7b").spec)
    assert M.zero3_linear_keeps_inputs(model("llama2-7b"))


def test_adapters_in_fp32_only_inside_zero_init():
    hf = import_hf(HF / "llama2-7b").spec
    assert M.lora_adapters_in_fp32(hf, zero_stage=3, zero_init=1)
    assert not M.lora_adapters_in_fp32(hf, zero_stage=3, zero_init=0)
    assert not M.lora_adapters_in_fp32(hf, zero_stage=2, zero_init=0)
    assert not M.lora_adapters_in_fp32(model("llama2-7b"), zero_stage=3, zero_init=1)
    kw = dict(rank=16, targets=("q", "k", "v", "o"), dropout=0.05, value_bytes=2, inputs_kept=True)
    h, q = hf.hidden_size, hf.query_projection_size
    # per adapter module its dropped input and r outputs at 4 bytes instead of 2: q, k, v (width h) and o (width q)
    more = M.lora_activation_bytes_per_token(hf, adapter_bytes=4, **kw) - M.lora_activation_bytes_per_token(hf, **kw)
    assert more == 3 * 2 * h + 2 * q + 4 * 16 * 2
    # the estimate follows the build: inside zero.Init (the default for a transformers model at ZeRO-3) or not
    plan = ParallelPlan(world_size=1, zero_stage=3, lora_rank=16, lora_targets=("q", "k", "v", "o"))
    inside, outside = (estimate(hf, ONE, plan.replace(zero_init=z), checks=False, simulate_allocator=False)
                       for z in (True, False))
    assert inside.memory.peak_stage.terms.activations > outside.memory.peak_stage.terms.activations


def test_offload_accumulation_holds_the_oversized_gradients():
    hf = import_hf(HF / "llama2-7b").spec
    kw = dict(engine=0, zero_stage=2, offload_optimizer=1, tensor_parallel=1, value_bytes=2, lora=False)
    h2 = hf.hidden_size ** 2
    from workbench.params import weight_tensor_sizes

    over = sum(n for n in weight_tensor_sizes(hf) if n > h2)
    held = M.offload_accumulation_held_bytes(hf, num_microbatches=2, reduce_bucket_elements=h2, **kw)
    assert held == 2 * (over + hf.vocab_size * hf.hidden_size)  # and the embedding's original beside its clone
    assert M.offload_accumulation_held_bytes(hf, num_microbatches=1, reduce_bucket_elements=h2, **kw) == 0
    assert M.offload_accumulation_held_bytes(hf, num_microbatches=2, reduce_bucket_elements=h2,
                                             **dict(kw, zero_stage=1)) == 0
    assert M.offload_accumulation_held_bytes(hf, num_microbatches=2, **kw) == 0  # nothing above DeepSpeed's 5e8
    # while the last layer is back-propagated, its own oversized gradients and the embedding's are still to come
    pending = M.offload_accumulation_pending_bytes(hf, value_bytes=2, reduce_bucket_elements=h2)
    layer_over = sum(n for n in weight_tensor_sizes(hf) if h2 < n < hf.vocab_size * hf.hidden_size)
    assert pending == 2 * (layer_over / hf.num_layers + hf.vocab_size * hf.hidden_size)
    tied = hf.replace(tied_embeddings=True)  # the input buffer's sum of the two contributions: one more copy
    tied_over = sum(n for n in weight_tensor_sizes(tied) if n > h2)
    assert M.offload_accumulation_held_bytes(tied, num_microbatches=2, reduce_bucket_elements=h2, **kw) == \
        2 * (tied_over + 2 * hf.vocab_size * hf.hidden_size)


def test_traces_follow_the_trainers_runs():
    """The replay's trace: adapters kept fp32 inside zero.Init make the traced peak larger (the held oversized
    gradients are checked against the real allocator history, benchmarks/results/alloc_history_trainer_h100.txt: a
    model small enough for a test peaks at DeepSpeed's initialization instead)."""
    from workbench import allocsim

    cfg = read_config(HF / "tiny-llama")
    kw = dict(seq_length=128, micro_batch=2, steps=2)
    lora = dict(lora_rank=8, lora_targets=("q", "k", "v", "o"), **kw)
    fp32 = allocsim.replayed_peaks(cfg, zero_stage=3, zero_init=True, **lora).peak_allocated_bytes
    bf16 = allocsim.replayed_peaks(cfg, zero_stage=3, zero_init=False, **lora).peak_allocated_bytes
    assert fp32 > bf16


def test_advisor_names_the_held_gradients_and_the_bucket_that_avoids_them():
    from workbench.advisor import offload_held_gradients

    hf = import_hf(HF / "llama2-7b", seq_length=512).spec
    plan = ParallelPlan(world_size=1, zero_stage=2, offload_optimizer="cpu", global_batch_size=2,
                        reduce_bucket_size=hf.hidden_size ** 2)
    est = estimate(hf, ONE, plan, checks=False, simulate_allocator=False)
    found = offload_held_gradients(hf, plan, est.memory)
    assert found.status == "warn" and "reduce_bucket_size=1.68e+07" in found.message
    assert found.numbers["largest_weight_elements"] == hf.vocab_size * hf.hidden_size
    assert "GiB at once" in found.message and "Traceback" not in found.message
    for quiet in (plan.replace(global_batch_size=1), plan.replace(reduce_bucket_size=None),
                  plan.replace(offload_optimizer="none"), plan.replace(lora_rank=16)):
        assert offload_held_gradients(hf, quiet, estimate(hf, ONE, quiet, checks=False,
                                                          simulate_allocator=False).memory) is None
