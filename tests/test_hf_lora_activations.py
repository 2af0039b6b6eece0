"""LoRA on a transformers model: what one decoder layer keeps for backward, counted on the CPU against the memory
model (``benchmarks/hf_lora_saved_tensors_cpu.py``), and the per-module rules of
:func:`workbench.memory.lora_activation_bytes_per_token`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench import memory as M
from workbench.hf import import_hf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hf_lora_saved_tensors_cpu as B  # noqa: E402

SEQ, MBS = 128, 2
V = 2


@pytest.mark.parametrize("family", B.FAMILIES)
@pytest.mark.parametrize("lora", (0, 16))
def test_layer_bytes_equal_what_autograd_saves(family, lora):
    """GPT-2 (Conv1D projections, dropout 0.1, ``c_attn`` + ``c_proj`` adapters, peft matching the MLP's c_proj
    too) and Llama (q, k, v, o adapters), eager attention, lora_dropout 0.05: the model's bytes for one layer equal
    the saved storages within 1 %, and LoRA's difference exactly."""
    cfg = B.config(family, seq=SEQ)
    counted = B.count(cfg, seq=SEQ, micro_batch=MBS, lora=lora)["bytes"]
    modelled = B.predicted(cfg, seq=SEQ, micro_batch=MBS, lora=lora)
    assert abs(modelled - counted) <= 0.01 * counted, (modelled, counted)
    if lora:
        base = B.count(cfg, seq=SEQ, micro_batch=MBS, lora=0)["bytes"]
        assert modelled - B.predicted(cfg, seq=SEQ, micro_batch=MBS, lora=0) == counted - base


def test_recomputed_layer_under_lora_holds_the_mlp_gradients():
    """A checkpointed Llama layer with q, k, v, o adapters (SDPA): the peak of its recompute + backward is its
    saved tensors plus three f-wide gradients, nothing of the frozen down projection's input having been kept."""
    cfg = B.config("llama", seq=SEQ)
    peak = B.recomputed_peak(cfg, seq=SEQ, micro_batch=MBS, lora=16)["bytes"]
    modelled = B.predicted(cfg, seq=SEQ, micro_batch=MBS, lora=16, attn="sdpa", recomputed=True)
    assert abs(modelled - peak) <= 0.01 * peak, (modelled, peak)
    spec = import_hf(cfg, seq_length=SEQ).spec
    f = spec.ffn_hidden_size
    assert M.hf_recomputed_working_bytes_per_token(spec, value_bytes=V, lora_free_down=1) == 3 * V * f
    assert M.hf_recomputed_working_bytes_per_token(spec, value_bytes=V) == 2 * V * f


def _gpt2(attn="eager"):
    return import_hf(B.config("gpt2"), seq_length=SEQ, attn_implementation=attn).spec


def _llama(attn="eager"):
    return import_hf(B.config("llama"), seq_length=SEQ, attn_implementation=attn).spec


def test_lora_bytes_per_module():
    """Per projection group: the frozen projection's input goes; each adapter module keeps its dropped copy and
    mask (v + 1 per input value) and r values; GPT-2's fused c_attn is one module where Llama's q, k, v are
    three; without dropout the adapters share the one input."""
    per = lambda spec, targets, dropout=0.05, rank=16: M.lora_activation_bytes_per_token(  # noqa: E731
        spec, rank=rank, targets=targets, dropout=dropout, value_bytes=V)
    g, ll = _gpt2(), _llama()
    h, f = g.hidden_size, g.ffn_hidden_size
    frozen = -V * (2 * h + h + f)  # qkv, o, fc1 and down inputs of a layer with no adapter
    assert per(g, ("q", "k", "v")) == frozen + (V + 1) * h + 16 * V
    lf = ll.ffn_hidden_size
    assert per(ll, ("q", "k", "v")) == -V * (2 * h + h + lf) + 3 * (V + 1) * h + 3 * 16 * V
    assert per(g, ("q", "k", "v"), dropout=0.0) == frozen + V * h + 16 * V
    assert per(g, ("o", "down")) == frozen + (V + 1) * (h + f) + 2 * 16 * V
    assert per(g, ("q",), rank=0) == 0.0
    # SDPA keeps its output, which is o's input: nothing of it goes; an adapter's dropped copy comes beside it
    gs = _gpt2("sdpa")
    assert per(gs, ("o",)) - per(g, ("o",)) == V * h
    assert per(gs, ("o",), dropout=0.0) == -V * (2 * h + f) + 16 * V
    # megatron-core keeps its linears' inputs: only the adapters' tensors, v + 1 bytes per value
    mg = ll.replace(implementation="megatron")
    assert per(mg, ("q", "v")) == (2 * 16 + 2 * h) * (V + 1)
    assert per(mg, ("q", "v"), dropout=0.0) == 2 * 16 * (V + 1)


def test_down_projection_input_is_freed_only_without_an_adapter_on_it():
    ll = _llama()
    assert M.lora_frees_down_input(ll, rank=16, targets=("q", "k", "v", "o"))
    assert not M.lora_frees_down_input(ll, rank=16, targets=("q", "down"))
    assert not M.lora_frees_down_input(ll, rank=0, targets=("q",))
    assert not M.lora_frees_down_input(ll.replace(implementation="megatron"), rank=16, targets=("q",))


def test_plan_codes_carry_the_lora_terms():
    """The plan's targets and dropout reach :func:`workbench.memory.stage_terms` through the one encoder."""
    from workbench.specs import ParallelPlan

    g = _gpt2()
    plan = ParallelPlan(world_size=1, zero_stage=2, lora_rank=16, lora_targets=("q", "k", "v", "o", "down"),
                        lora_dropout=0.05)
    codes = M.plan_codes(plan, g)
    assert codes["lora_bytes_per_token"] == M.lora_activation_bytes_per_token(
        g, rank=16, targets=plan.lora_targets, dropout=0.05, value_bytes=V)
    assert codes["lora_free_down"] == 0
    attention_only = M.plan_codes(plan.replace(lora_targets=("q", "k", "v", "o")), g)
    assert attention_only["lora_free_down"] == 1
    full = M.plan_codes(plan.replace(lora_rank=0), g)
    assert full["lora_bytes_per_token"] == 0.0 and full["lora_free_down"] == 0


def test_phi3_sdpa_keeps_the_fused_qkv_storage():
    """Phi-3's fused qkv_proj under SDPA: the kernel keeps v, a view of the fused output, so its q and k parts stay
    alive too (v·(q + kv) bytes per token more than separate projections); eager attention's matmuls copy v."""
    import dataclasses

    cfg = B.config("phi3", seq=SEQ)
    for attn, more in (("sdpa", True), ("eager", False)):
        fused = import_hf(cfg, seq_length=SEQ, attn_implementation=attn).spec
        assert fused.fused_projections
        plain = dataclasses.replace(fused, fused_projections=False)
        diff = (M.hf_layer_extra_bytes_per_token(fused, value_bytes=V)
                - M.hf_layer_extra_bytes_per_token(plain, value_bytes=V))
        assert diff == (V * (fused.query_projection_size + fused.kv_projection_size) if more else 0.0)


def test_zero3_linear_keeps_the_frozen_projections_inputs():
    """DeepSpeed ZeRO-3 trains with its own linear in place of ``F.linear`` (``LinearFunctionForZeroStage3``, which
    saves its input whether the weight trains or not): under LoRA a transformers layer then keeps the full
    fine-tune's inputs of q/k/v, the MLP's first projections and down (SDPA keeps o's anyway) and adds only the
    adapters' tensors: 2h + f values a layer more than aten's linear keeps (the allocator histories of final57's two
    LoRA plans without checkpointing held exactly two h-wide and one f-wide input a layer more than the trace with
    aten's linear). The estimate applies it to DeepSpeed ZeRO-3 plans only."""
    from workbench.specs import ParallelPlan

    ll = _llama("sdpa")
    h, f = ll.hidden_size, ll.ffn_hidden_size
    targets = ("q", "k", "v", "o")
    per = lambda kept: M.lora_activation_bytes_per_token(  # noqa: E731
        ll, rank=16, targets=targets, dropout=0.05, value_bytes=V, inputs_kept=kept)
    assert per(True) - per(False) == V * (2 * h + f)
    assert not M.lora_frees_down_input(ll, rank=16, targets=targets, inputs_kept=True)
    plan = ParallelPlan(engine="deepspeed", world_size=1, micro_batch_size=2, global_batch_size=2, lora_rank=16,
                        lora_targets=targets, lora_dropout=0.05)
    from workbench.encode import memory_inputs, plan_columns

    def lora_inputs(p):
        got = memory_inputs(ll, plan_columns(p, ll), "bf16")
        return got["lora_bytes_per_token"], got["lora_free_down"]

    assert lora_inputs(plan.replace(zero_stage=3, zero_init=False)) == (per(True), 0)
    assert lora_inputs(plan.replace(zero_stage=2)) == (per(False), 1)
    # built inside zero.Init (a transformers model's default at ZeRO-3) its adapters train in fp32
    fp32 = M.lora_activation_bytes_per_token(ll, rank=16, targets=targets, dropout=0.05, value_bytes=V,
                                             inputs_kept=True, adapter_bytes=4)
    assert lora_inputs(plan.replace(zero_stage=3)) == (fp32, 0) and fp32 > per(True)
