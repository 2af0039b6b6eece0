"""Sliding-window layers under sdpa: transformers hands each a boolean mask once the sequence reaches the window,
and PyTorch's sdpa keeps it as a bias for the backward (an H200's allocator history, Gemma 3 4B's width)."""
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from workbench.estimate import estimate  # noqa: E402
from workbench.hf import import_hf  # noqa: E402
from workbench.memory import sliding_window_bias_bytes  # noqa: E402
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan  # noqa: E402

HF = Path(__file__).parent / "data" / "hf"


def test_import_reads_the_window_and_its_layers():
    gemma3 = import_hf(HF / "gemma3-1b").spec  # 26 layers, every sixth global
    assert (gemma3.sliding_window, gemma3.sliding_window_layers) == (512, 22)
    olmo3 = import_hf(HF / "olmo3-7b").spec  # layer_types: three sliding, one full
    assert (olmo3.sliding_window, olmo3.sliding_window_layers) == (4096, 24)
    starcoder2 = import_hf(HF / "starcoder2-3b").spec  # every layer, no layer_types
    assert (starcoder2.sliding_window, starcoder2.sliding_window_layers) == (4096, 30)
    for family in ("mistral-7b", "qwen2-0_5b", "smollm3-3b", "llama3-8b"):  # no window, or not used
        assert import_hf(HF / family).spec.sliding_window is None, family
    # FlashAttention applies the window in its kernel: no mask, nothing kept
    assert import_hf(HF / "gemma3-1b", attn_implementation="flash_attention_2").spec.sliding_window is None


def test_the_bias_is_kept_per_sliding_layer_from_the_window_on():
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=2, global_batch_size=2, zero_stage=2)
    base = import_hf(HF / "gemma3-1b", seq_length=4096).spec.replace(num_layers=6)  # 5 sliding, 1 global
    assert base.sliding_window_layers == 5
    flat = base.replace(sliding_window=None)

    def allocated(m, p=plan):
        return estimate(m, cluster, p).memory.to_dict()["allocated_bytes"]

    bias = sliding_window_bias_bytes(base, micro_batch=2, value_bytes=2)
    assert bias == 2 * 4096 ** 2 * 2
    assert allocated(base) - allocated(flat) == pytest.approx(5 * bias, rel=1e-6)
    below = base.replace(seq_length=500)  # shorter than the 512-token window: transformers passes no mask
    assert allocated(below) == allocated(below.replace(sliding_window=None))
    eager = base.replace(attention="unfused")
    assert allocated(eager) == allocated(eager.replace(sliding_window=None))
    ckpt = plan.replace(recompute="full")  # the checkpointed forward keeps none; a recomputed layer holds one
    assert 0 <= allocated(base, ckpt) - allocated(flat, ckpt) <= bias


def test_window_fields_are_checked_and_follow_the_layer_count():
    common = dict(name="w", num_layers=12, hidden_size=1024, num_attention_heads=8, vocab_size=1000,
                  seq_length=4096, implementation="transformers")
    m = ModelSpec(**common, sliding_window=1024, sliding_window_layers=10)
    assert m.replace(num_layers=6).sliding_window_layers == 5
    assert ModelSpec(**common, sliding_window=1024).replace(num_layers=4).sliding_window_layers == 4
    with pytest.raises(ValueError, match="sliding_window_layers=13 exceeds num_layers=12"):
        ModelSpec(**common, sliding_window=1024, sliding_window_layers=13)
    with pytest.raises(ValueError, match="sliding_window_layers=3 without a sliding_window"):
        ModelSpec(**common, sliding_window_layers=3)
    with pytest.raises(ValueError, match="sliding_window=0"):
        ModelSpec(**common, sliding_window=0)
    with pytest.raises(ValueError, match="implementation='megatron'"):
        ModelSpec(**{**common, "implementation": "megatron"}, sliding_window=1024)


def test_the_estimate_says_what_the_windowed_layers_keep(capsys):
    from workbench import cli

    args = ["estimate", "--model", f"hf:{HF / 'gemma3-1b'}", "--gpus-per-node", "1", "--no-simulate-allocator"]
    assert cli.main([*args, "--seq", "8192"]) == 0
    out = capsys.readouterr().out
    assert ("sliding window 512 tokens on 22 of 26 layers (sdpa keeps each one's mask as a bias, 0.12 GiB: 2.75 GiB"
            in out)
    assert cli.main([*args, "--seq", "256"]) == 0
    assert "(no mask below the window)" in capsys.readouterr().out


def test_the_advisor_names_the_kept_masks_and_the_kernel_that_keeps_none():
    from workbench.advisor import sliding_window_masks

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=2)
    long = import_hf(HF / "gemma3-1b", seq_length=16384).spec
    found = sliding_window_masks(long, plan, estimate(long, cluster, plan, checks=False,
                                                      simulate_allocator=False).memory)
    assert found is not None and found.status == "warn"
    assert found.numbers["kept_bytes"] == 22 * 16384 ** 2 * 2 and "flash_attention_2" in found.suggestion
    ckpt = plan.replace(recompute="full")
    assert sliding_window_masks(long, ckpt, estimate(long, cluster, ckpt, checks=False,
                                                     simulate_allocator=False).memory) is None
    short = import_hf(HF / "gemma3-1b", seq_length=2048).spec  # 0.5 % of the peak: not reported
    assert sliding_window_masks(short, plan, estimate(short, cluster, plan, checks=False,
                                                      simulate_allocator=False).memory) is None


def test_grouped_kv_heads_are_repeated_once_the_mask_is_passed():
    """With a mask, transformers' sdpa path repeats K and V to every query head (no ``enable_gqa``) and the kernel
    keeps the copies: StarCoder2 3B's 24 query over 2 kv heads of 128, every layer windowed at 4096 tokens."""
    from workbench.memory import sliding_window_repeat_bytes

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=2, global_batch_size=2, zero_stage=2)
    base = import_hf(HF / "starcoder2-3b", seq_length=4096).spec.replace(num_layers=4)
    flat = base.replace(sliding_window=None)
    sizes = dict(micro_batch=2, value_bytes=2)
    repeat = sliding_window_repeat_bytes(base, **sizes)
    assert repeat == 2 * 4096 * 2 * 2 * (24 - 2) * 128
    bias = sliding_window_bias_bytes(base, **sizes)

    def allocated(m):
        return estimate(m, cluster, plan).memory.to_dict()["allocated_bytes"]

    assert allocated(base) - allocated(flat) == pytest.approx(4 * (bias + repeat), rel=1e-6)
    assert sliding_window_repeat_bytes(base.replace(seq_length=4095), **sizes) == 0  # no mask below the window
    assert sliding_window_repeat_bytes(base.replace(attention="unfused"), **sizes) == 0  # eager: counted elsewhere
    mqa = import_hf(HF / "gemma3-1b", seq_length=4096).spec  # one kv head: the repeat is a view
    assert sliding_window_repeat_bytes(mqa, **sizes) == 0 and sliding_window_bias_bytes(mqa, **sizes) > 0


def test_masked_layers_compute_the_whole_score_matrix():
    """With a mask transformers calls sdpa with ``is_causal=False``: the windowed layers' kernels compute every block
    of the scores, where a causal call skips the upper half; the model FLOPs (MFU's numerator) stay causal."""
    from workbench.memory import sliding_window_masked_share

    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=2)
    base = import_hf(HF / "gemma3-1b", seq_length=8192).spec  # 22 of 26 layers windowed (512 tokens)
    flat = base.replace(sliding_window=None)
    assert sliding_window_masked_share(base) == pytest.approx(22 / 26) and sliding_window_masked_share(flat) == 0
    assert sliding_window_masked_share(base.replace(seq_length=500)) == 0  # below the window: no mask
    assert sliding_window_masked_share(base.replace(attention="unfused")) == 0  # eager computes it all anyway
    masked, causal = (estimate(m, cluster, plan, checks=False).time for m in (base, flat))
    assert masked.breakdown["compute"] > causal.breakdown["compute"]
    assert masked.model_flops_per_step == causal.model_flops_per_step
    assert masked.hardware_flops_per_step > causal.hardware_flops_per_step


def test_the_masked_kernel_is_priced_at_its_measured_slowdown(monkeypatch):
    """cuDNN's fused attention with a mask took 1.51-1.97x the causal call's time per FLOP on an H100
    (benchmarks/results/sdpa_masked_h100.txt): the masked layers' core is priced at that rate."""
    from workbench import timing

    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=2)
    model = import_hf(HF / "gemma3-1b", seq_length=8192).spec

    def compute():
        return estimate(model, cluster, plan, checks=False).time.breakdown["compute"]

    priced = compute()
    monkeypatch.setattr(timing, "MASKED_SDPA_SLOWDOWN", 1.0)
    assert compute() < priced
    flat = estimate(model.replace(sliding_window=None), cluster, plan, checks=False).time.breakdown["compute"]
    monkeypatch.setattr(timing, "MASKED_SDPA_SLOWDOWN", 3.0)
    assert compute() > priced > flat
