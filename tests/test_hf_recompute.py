"""transformers checkpoints whole decoder layers (``gradient_checkpointing_enable``): a Hugging Face model has no
selective recompute and no partial layer count, and neither the validation, the planner nor the advisor offers one."""
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
    with pytest.raises(ValueError, match=r"recompute_layers=4 of num_layers=32"):
        validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="full", recompute_layers=4))
    validate(llama, cluster, ParallelPlan(world_size=1, zero_stage=2, recompute="full"))  # whole layers: fine


def test_planner_searches_full_and_none_only(llama):
    found = search(llama, ClusterSpec(gpu="A100-40GB", gpus_per_node=8), global_batch_size=32, top=50,
                   lora_rank=16)
    modes = {str(r.plan.recompute) for r in found.ranked}
    assert modes and "selective" not in modes and modes <= {"none", "full"}
    with pytest.raises(ValueError, match="recompute lists only 'selective'"):
        search(llama, ClusterSpec(gpu="H200", gpus_per_node=8), global_batch_size=32, recompute=("selective",))


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
