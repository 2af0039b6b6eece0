"""DeepSpeed ZeRO-3's ``sub_group_size`` as a plan field: checked like the other ZeRO sizes, priced by the memory
model (the optimizer step's flat fp32 gradient on the GPU, the host's per-sub-group buffers), traced by the
allocator replay, written by export, read by import, set by the CLI, and advised on when host memory is tight."""
import dataclasses
import json
from pathlib import Path

import pytest

from workbench import allocsim
from workbench import memory as M
from workbench.advisor import SMALLER_SUB_GROUP_ELEMENTS, sub_group_host_buffers
from workbench.catalog import model
from workbench.cli import main
from workbench.configs.deepspeed import build_ds_config
from workbench.configs.importer import import_ds_config
from workbench.defaults import DEEPSPEED_SUB_GROUP_ELEMENTS
from workbench.estimate import estimate
from workbench.hf import read_config
from workbench.specs import ClusterSpec, ParallelPlan

HF = Path(__file__).resolve().parent / "data" / "hf"


def _plan(**kw):
    base = dict(world_size=1, engine="deepspeed", zero_stage=3, micro_batch_size=1, global_batch_size=1)
    return ParallelPlan(**{**base, **kw})


def test_plan_checks_sub_group_size_like_the_other_zero_sizes():
    assert _plan().sub_group_elements == DEEPSPEED_SUB_GROUP_ELEMENTS
    assert _plan(sub_group_size=1e8).sub_group_size == 100_000_000  # DeepSpeed's float form
    assert _plan(sub_group_size=0).sub_group_elements == 0  # each parameter its own sub-group
    with pytest.raises(ValueError, match=r"sub_group_size=100000000 needs zero_stage >= 3 .*zero_stage=2"):
        _plan(zero_stage=2, sub_group_size=100_000_000)
    with pytest.raises(ValueError, match="sub_group_size=1000 is DeepSpeed's zero_optimization setting"):
        ParallelPlan(world_size=1, engine="megatron", sub_group_size=1000)
    with pytest.raises(ValueError, match="sub_group_size"):
        _plan(sub_group_size=-1)


def test_largest_sub_group_follows_deepspeeds_closing_rule():
    m = model("llama2-7b")
    default = M.zero3_largest_sub_group(m, 1, 1)
    smaller = M.zero3_largest_sub_group(m, 1, 1, 100_000_000)
    # a sub-group closes at the first weight that takes it to the size: past it by less than the largest weight
    largest_weight = max(M.P.weight_tensor_sizes(m, 1))
    assert 100_000_000 <= smaller < 100_000_000 + largest_weight
    assert DEEPSPEED_SUB_GROUP_ELEMENTS <= default < DEEPSPEED_SUB_GROUP_ELEMENTS + largest_weight
    assert M.zero3_largest_sub_group(m, 1, 1, 0) == largest_weight  # each weight alone


def test_nvme_host_buffers_scale_with_the_largest_sub_group():
    """With the optimizer on NVMe the host holds the swapper's fp32 buffers of the largest sub-group, Adam's two
    moments of it at start-up and the 16-bit copy back: (4·buffers + 8 + 2) bytes per element of it."""
    m = model("llama2-7b")
    plan = _plan(offload_optimizer="nvme")
    big = M.host_bytes_with(m, plan)
    small = M.host_bytes_with(m, plan, sub_group_elements=100_000_000)
    per_element = 4.0 * M.DS_NVME_OPTIMIZER_BUFFERS + 8.0 + 2.0
    expected = per_element * (M.zero3_largest_sub_group(m, 1, 1) - M.zero3_largest_sub_group(m, 1, 1, 100_000_000))
    assert big - small == pytest.approx(expected, rel=1e-9)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=500)
    est = estimate(m, cluster, dataclasses.replace(plan, sub_group_size=100_000_000), checks=False)
    assert est.memory.host_bytes_per_gpu == pytest.approx(small, rel=1e-9)


def test_zero3_step_transient_on_the_gpu_is_one_sub_group():
    """Without offload ZeRO-3's step flattens and casts one sub-group at a time: at 1e9 elements for a 7B model on
    one GPU that is the peak; at 1e8 the step's gradients shrink by 6 bytes per element of the difference and the
    peak moves to backward."""
    m = dataclasses.replace(model("llama2-7b"), seq_length=512)
    cluster = ClusterSpec(gpu="H200", gpus_per_node=1)
    big, small = (estimate(m, cluster, _plan(sub_group_size=s), checks=False).memory.stages[0]
                  for s in (None, 100_000_000))
    assert big.peak_phase == "optimizer step" and small.peak_phase == "backward"
    step_big = M.model_state_bytes(m.parameter_counts().total, engine=0, zero_stage=3, data_parallel=1,
                                   param_bytes=2, sub_group_elements=M.zero3_largest_sub_group(m, 1, 1))[4]
    assert step_big == pytest.approx(6.0 * M.zero3_largest_sub_group(m, 1, 1))


def test_replayed_trace_steps_one_sub_group_at_a_time():
    cfg = read_config(HF / "tiny-llama")
    kw = dict(zero_stage=3, micro_batch=1, seq_length=16, steps=1)
    whole = allocsim.replay(allocsim.trace_hf_deepspeed(cfg, **kw), capacity_bytes=1 << 40)
    pieces = allocsim.replay(allocsim.trace_hf_deepspeed(cfg, **kw, sub_group_elements=1000),
                             capacity_bytes=1 << 40)
    # fp32 masters and states are the same bytes either way; the step's flat copy and cast shrink to one piece
    assert pieces.peak_allocated_bytes < whole.peak_allocated_bytes


def test_export_and_import_round_trip_the_sub_group_size():
    m = model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    cfg = build_ds_config(m, cluster, _plan(sub_group_size=100_000_000))
    assert cfg["zero_optimization"]["sub_group_size"] == 100_000_000
    assert build_ds_config(m, cluster, _plan())["zero_optimization"]["sub_group_size"] == DEEPSPEED_SUB_GROUP_ELEMENTS
    imported = import_ds_config(cfg)
    assert imported.plan_fields.get("sub_group_size") == 100_000_000
    default = import_ds_config(build_ds_config(m, cluster, _plan()))
    assert "sub_group_size" not in default.plan_fields  # DeepSpeed's default stays the plan's None
    zero2 = build_ds_config(m, cluster, _plan(zero_stage=2))
    zero2["zero_optimization"]["sub_group_size"] = 100_000_000  # unread below ZeRO-3: not put on the plan
    assert "sub_group_size" not in import_ds_config(zero2).plan_fields


def test_cli_sets_reports_and_refuses_the_sub_group_size(capsys):
    args = ["estimate", "--model", "llama2-7b", "--gpus", "1", "--engine", "deepspeed", "--zero", "3",
            "--offload-optimizer", "nvme", "--nvme-gib", "500", "--mbs", "1", "--gbs", "1"]
    assert main(args + ["--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert main(args + ["--sub-group-size", "1e8", "--json"]) == 0
    smaller = json.loads(capsys.readouterr().out)
    assert smaller["plan"]["sub_group_size"] == 100_000_000
    assert smaller["memory"]["host_bytes_per_gpu"] < default["memory"]["host_bytes_per_gpu"] - 10 * 2**30
    assert main(args + ["--sub-group-size", "1e8"]) == 0
    assert "sub_group_size 1e+08" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(args + ["--sub-group-size", "auto"])
    assert "--sub-group-size 'auto': give a whole number of elements" in capsys.readouterr().err
    assert main(["estimate", "--model", "llama2-7b", "--gpus", "1", "--engine", "deepspeed", "--zero", "2",
                 "--sub-group-size", "1e8"]) != 0
    assert "sub_group_size=100000000 needs zero_stage >= 3" in capsys.readouterr().err


def test_advisor_prices_a_smaller_sub_group_when_host_memory_is_tight():
    m = model("llama2-7b")
    plan = _plan(offload_optimizer="nvme")
    tight = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=500, host_memory_gib_per_node=48)
    memory = estimate(m, tight, plan, checks=False).memory
    found = sub_group_host_buffers(m, plan, memory)
    assert found is not None and found.status == "warn"
    saved = memory.host_bytes_per_gpu - M.host_bytes_with(m, plan, sub_group_elements=SMALLER_SUB_GROUP_ELEMENTS)
    assert f"{saved / 2**30:.1f} GiB per rank more" in found.message
    assert "--sub-group-size 1e8" in found.suggestion and '"sub_group_size": 100000000' in found.suggestion
    roomy = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=500, host_memory_gib_per_node=1024)
    assert sub_group_host_buffers(m, plan, estimate(m, roomy, plan, checks=False).memory) is None
    small = _plan(offload_optimizer="nvme", sub_group_size=SMALLER_SUB_GROUP_ELEMENTS)
    assert sub_group_host_buffers(m, small, estimate(m, tight, small, checks=False).memory) is None
    # CPU offload of a 13B model: smaller sub-groups round more page-locked buffers up, so nothing is offered
    cpu = _plan(offload_optimizer="cpu")
    m13 = model("llama2-13b")
    host = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, host_memory_gib_per_node=256)
    assert sub_group_host_buffers(m13, cpu, estimate(m13, host, cpu, checks=False).memory) is None


def test_planner_prices_every_row_at_the_given_sub_group_size():
    from workbench.planner import search

    m = model("llama2-7b")
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=500, host_memory_gib_per_node=64)
    result = search(m, cluster, global_batch_size=8, top=3, engines=("deepspeed",), sub_group_size=100_000_000)
    assert result.ranked
    for c in result.ranked:
        plan = c.plan
        if int(plan.zero_stage) == 3:
            assert plan.sub_group_size == 100_000_000
            est = estimate(m, cluster, plan, checks=False)
            assert c.host_bytes_per_node == pytest.approx(est.memory.host_bytes_per_node, rel=1e-6)
        else:
            assert plan.sub_group_size is None


def test_planner_says_when_a_smaller_sub_group_makes_host_memory_fit():
    from workbench.planner import search

    m = model("llama2-7b")
    short = ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=500, host_memory_gib_per_node=40)
    with pytest.raises(ValueError) as info:
        search(m, short, global_batch_size=8, top=3, engines=("deepspeed",))
    text = str(info.value)
    assert "no plan fits host memory" in text and "--sub-group-size 1e8" in text
    named = float(text.split("then holds ")[1].split(" GiB")[0])
    found = search(m, short, global_batch_size=8, top=1, engines=("deepspeed",), sub_group_size=100_000_000)
    assert found.ranked[0].host_bytes_per_node / 2**30 == pytest.approx(named, abs=0.05)
    # with no room even at the smaller size, nothing is offered
    with pytest.raises(ValueError) as info:
        search(m, dataclasses.replace(short, host_memory_gib_per_node=8), global_batch_size=8, top=3,
               engines=("deepspeed",))
    assert "--sub-group-size" not in str(info.value)


def test_elements_words_reads_back_as_the_same_count():
    from workbench.advisor import elements_words

    assert elements_words(100_000_000) == "1e8" and elements_words(1_000_000_000) == "1e9"
    assert elements_words(123_456_789) == "123456789"
    for n in (0, 1, 20_000_000, 123_456_789, 10**12):
        assert float(elements_words(n)) == n
