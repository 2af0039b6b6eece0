"""DeepSpeed ZeRO-3 with the parameters on the host, the model built whole on the GPU first: the initialization,
where the whole 16-bit model and the parameter being partitioned are alive at once, can be the allocated peak."""
from pathlib import Path

import pytest

from workbench import memory as M
from workbench.estimate import estimate
from workbench.encode import ENGINE_CODES
from workbench.hf import import_hf
from workbench.specs import ClusterSpec, Engine, ParallelPlan

DATA = Path(__file__).parent / "data" / "hf"
GiB = 2**30


def _plan(**changes):
    fields = dict(engine="deepspeed", world_size=1, micro_batch_size=1, global_batch_size=1, zero_stage=3,
                  offload_optimizer="cpu", offload_params="cpu", recompute="full", zero_init=False)
    return ParallelPlan(**{**fields, **changes})


def test_starcoder2_built_on_the_gpu_peaks_at_its_partitioning():
    """StarCoder2 3B (30 layers, tied 49k embedding), both offloads, checkpointed: its 16-bit weights and the
    embedding (the largest tensor) at once — measured 5.93 GiB on an H100 (corpus final52), where training needs
    less; built inside zero.Init it never holds the whole model."""
    m = import_hf(DATA / "starcoder2-3b", seq_length=2048, attn_implementation="sdpa").spec
    c = ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    mem = estimate(m, c, _plan()).memory
    n = m.parameter_counts().total
    embedding = m.vocab_size * m.hidden_size
    assert mem.to_dict()["allocated_bytes"] == pytest.approx(2 * (n + embedding))
    assert mem.peak_stage.peak_phase == "initialization"
    assert 5.9 * GiB < mem.to_dict()["allocated_bytes"] < 5.95 * GiB
    inside = estimate(m, c, _plan(zero_init=True)).memory
    assert inside.to_dict()["allocated_bytes"] < 5.3 * GiB and inside.peak_stage.peak_phase != "initialization"
    # the parameters on the GPU, ZeRO-2 or Megatron: no such moment
    ds, mg = ENGINE_CODES[Engine.DEEPSPEED], ENGINE_CODES[Engine.MEGATRON]
    for engine, zero, off in ((ds, 3, 0), (ds, 2, 1), (mg, 3, 1)):
        assert float(M.zero3_build_bytes(m, engine=engine, zero_stage=zero, offload_params=off, zero_init=0,
                                         weights_whole=1.0, value_bytes=2)) == 0.0


def test_advisor_says_to_build_inside_zero_init_and_the_ladder_does():
    """Llama 3 70B under ZeRO-3 with both offloads, built on each GPU first (megatron-core's default, as the
    workbench's launcher builds it): the 141 GB model does not fit an 80 GB GPU before DeepSpeed partitions it, which
    fits_memory says with the fix; built inside zero.Init the same plan fits, and the OOM ladder's parameter-offload
    rung is priced so. Megatron-DeepSpeed, which builds inside zero.Init at ZeRO-3, has no such moment."""
    from workbench import catalog
    from workbench.advisor import advise

    m = catalog.model("llama3-70b")
    c = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, host_memory_gib_per_node=2048)
    p = ParallelPlan(world_size=8, engine="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="cpu",
                     micro_batch_size=1, global_batch_size=8, recompute="full")
    found = {f.id: f for f in advise(m, c, p).findings}["fits_memory"]
    assert found.status == "fail" and "(initialization)" in found.message
    assert "build it inside deepspeed.zero.Init (--zero-init" in found.suggestion
    assert {f.id: f for f in advise(m, c, p.replace(zero_init=True)).findings}["fits_memory"].status == "pass"
    assert estimate(m, c, p.replace(engine="megatron-deepspeed")).memory.peak_stage.peak_phase != "initialization"
    # on two GPUs only the parameters' offload fits: the ladder gets there, built inside zero.Init
    two = ClusterSpec(gpu="A100-80GB", gpus_per_node=2, host_memory_gib_per_node=4096)
    start = p.replace(world_size=2, global_batch_size=2, zero_stage=2, offload_optimizer="none", offload_params="none")
    rung = advise(m, two, start).oom_ladder[-1]
    assert str(rung.plan.offload_params) == "cpu" and rung.fits
    assert rung.plan.zero_init is True and "built inside deepspeed.zero.Init" in rung.action


def test_megatron_deepspeed_builds_inside_zero_init_at_zero3():
    """Megatron-DeepSpeed's model_provider builds inside deepspeed.zero.Init whenever ZeRO-3 is on: the plan says so
    (the planner's columns too), the stream reserve of ZeRO-3 with the parameters on the host keeps no whole-model
    build for it (as for DeepSpeed's engine with zero_init), and zero_init=False is refused there by name."""
    from workbench import catalog
    from workbench.encode import default_zero_init_column, plan_columns
    from workbench.specs import builds_in_zero_init

    m = catalog.model("llama2-7b")
    c = ClusterSpec(gpu="A100-80GB", gpus_per_node=1)
    mds = _plan(engine="megatron-deepspeed", zero_init=None)
    assert builds_in_zero_init(m, mds) and not builds_in_zero_init(m, mds.replace(zero_stage=2, offload_params="none"))
    cols = plan_columns(mds, m)
    assert cols["zinit"] == 1 and default_zero_init_column(m, {k: v for k, v in cols.items() if k != "zinit"}) == 1
    assert default_zero_init_column(m, {**cols, "engine": ENGINE_CODES[Engine.DEEPSPEED]}) == 0
    # the same plan on DeepSpeed's engine built inside zero.Init: the same memory, the engine's own terms aside
    ds_inside = estimate(m, c, _plan(zero_init=True)).memory.to_dict()
    ds_whole = estimate(m, c, _plan(zero_init=False)).memory.to_dict()
    mine = estimate(m, c, mds).memory.to_dict()
    assert mine["allocated_bytes"] == pytest.approx(ds_inside["allocated_bytes"])
    assert mine["per_gpu_peak_bytes"] < ds_whole["per_gpu_peak_bytes"]
    with pytest.raises(ValueError, match=r"zero_init=False with engine 'megatron-deepspeed' at zero_stage=3"):
        _plan(engine="megatron-deepspeed", zero_init=False)
