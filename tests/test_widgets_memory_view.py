"""The Memory view's summary line: what offload keeps on the host and on the node's NVMe, and whether it fits."""


def test_summary_says_whether_nvme_offload_fits_the_nodes_nvme():
    from widgets.memory_view import summary_html
    from workbench import memory as M
    from workbench.catalog import model
    from workbench.specs import ClusterSpec, ParallelPlan

    plan = ParallelPlan(world_size=8, engine="deepspeed", zero_stage=3, offload_optimizer="nvme",
                        offload_params="nvme", recompute="full", global_batch_size=64)
    none = M.estimate_memory(model("llama2-7b"), ClusterSpec(gpu="A100-80GB", gpus_per_node=8), plan)
    assert "exceeds the node's NVMe" in summary_html(none)
    roomy = M.estimate_memory(model("llama2-7b"), ClusterSpec(gpu="A100-80GB", gpus_per_node=8,
                                                              nvme_gib_per_node=4096), plan)
    assert "of 4096 GiB — fits" in summary_html(roomy)
