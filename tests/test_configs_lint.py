"""The lint finds what DeepSpeed silently ignores, using DeepSpeed's own key sets."""
import pytest

pytest.importorskip("deepspeed")

from workbench.configs.lint import ds_schema, lint_ds_config, top_level_keys


def errors(cfg, **kw):
    return [f for f in lint_ds_config(cfg, **kw) if f.severity == "error"]


def test_key_sets_come_from_deepspeed():
    top = top_level_keys()
    assert {"train_batch_size", "zero_optimization", "fp16", "bf16", "optimizer", "scheduler",
            "gradient_clipping", "activation_checkpointing", "steps_per_print"} <= top
    assert "zero_optimisation" not in top and "amp" not in top  # amp is a removed block
    zero = ds_schema().children["zero_optimization"]
    assert {"stage", "reduce_bucket_size", "stage3_prefetch_bucket_size", "prefetch_bucket_size"} <= zero.keys
    assert "device" in zero.children["offload_optimizer"].keys
    assert ds_schema().children["tensorboard"].keys >= {"enabled", "output_path"}


def test_zero_optimisation_typo():
    found = errors({"train_batch_size": 8, "zero_optimisation": {"stage": 3}})
    assert len(found) == 1
    f = found[0]
    assert f.path == "zero_optimisation"
    assert f.message == ("unknown key 'zero_optimisation' (DeepSpeed ignores it and runs ZeRO stage 0); "
                         "did you mean 'zero_optimization'?")
    assert "zero_optimization" in f.suggestion


def test_misspelled_nested_keys():
    cfg = {"train_batch_size": 8,
           "zero_optimization": {"stage": 3, "overlap_com": True,
                                 "offload_optimizer": {"device": "cpu", "pin_memroy": True}},
           "fp16": {"enabled": True, "loss_scale_windw": 500},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "beta": [0.9, 0.95]}},
           "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_step": 100}}}
    paths = {f.path: f for f in errors(cfg)}
    assert set(paths) == {"zero_optimization.overlap_com", "zero_optimization.offload_optimizer.pin_memroy",
                          "fp16.loss_scale_windw", "optimizer.params.beta", "scheduler.params.total_num_step"}
    assert "did you mean 'overlap_comm'" in paths["zero_optimization.overlap_com"].message
    assert "did you mean 'pin_memory'" in paths["zero_optimization.offload_optimizer.pin_memroy"].message
    assert "did you mean 'betas'" in paths["optimizer.params.beta"].message


def test_semantic_checks():
    cfg = {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
           "fp16": {"enabled": True}, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}
    paths = {f.path for f in errors(cfg, world_size=8)}
    assert {"train_batch_size", "fp16.enabled", "zero_optimization.offload_optimizer"} <= paths
    batch = next(f for f in errors(cfg, world_size=8) if f.path == "train_batch_size")
    assert "30 != train_micro_batch_size_per_gpu(2) * gradient_accumulation_steps(2) * data_parallel(8) = 32" \
        in batch.message
    assert any(f.path == "train_batch_size" for f in errors({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                                             "gradient_accumulation_steps": 1}))


def test_enabled_read_as_deepspeed_reads_it():
    """DeepSpeed's config models are pydantic: "yes"/"on"/1 enable a section, anything but a boolean word is refused."""
    for on in (True, "yes", "On", 1, "true"):
        both = errors({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": on}, "bf16": {"enabled": True}})
        assert [f.message for f in both] == ["fp16 and bf16 are both enabled; DeepSpeed refuses this"], on
    for off in (False, "no", 0, "off"):
        assert not errors({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": off}, "bf16": {"enabled": True}})
    bad = errors({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "bogus"}})
    assert [(f.path, f.message) for f in bad] == [
        ("bf16.enabled", "bf16.enabled='bogus' must be true or false (DeepSpeed refuses other values)")]
    assert [f.path for f in errors({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": 2}})] == ["fp16.enabled"]


def test_stage3_options_under_stage2_and_param_offload():
    cfg = {"train_batch_size": 8,
           "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e9, "offload_param": {"device": "cpu"}}}
    found = lint_ds_config(cfg)
    by_path = {f.path: f for f in found}
    assert by_path["zero_optimization.stage3_max_live_parameters"].severity == "warning"
    assert by_path["zero_optimization.offload_param"].severity == "error"


def test_clean_config_has_no_findings():
    cfg = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8}},
           "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_num_steps": 1}}}
    assert lint_ds_config(cfg, world_size=8) == []


def test_removed_blocks_and_auto():
    found = lint_ds_config({"train_batch_size": "auto", "amp": {"enabled": True}})
    assert any(f.path == "amp" and f.severity == "error" for f in found)
    assert any(f.path == "train_batch_size" and f.severity == "warning" and "auto" in f.message for f in found)


def test_finding_lines_group_the_same_finding_at_several_paths():
    from workbench.configs.lint import finding_lines

    found = lint_ds_config({"train_batch_size": "auto", "gradient_clipping": "auto", "amp": {"enabled": True}})
    lines = finding_lines(found)
    auto = [line for line in lines if "'auto'" in line]
    assert len(auto) == 1 and "gradient_clipping, train_batch_size:" in auto[0]
    assert len(lines) == len(found) - 1  # the two 'auto' findings share one line, the others keep theirs
    assert all(any(f.path in line for line in lines) for f in found)


def test_nvme_below_stage3_runs_as_cpu_offload():
    """DeepSpeed's ZeRO-1/2 never swap to NVMe: device 'nvme' there is CPU offload, which the lint says; at ZeRO-3
    it is ZeRO-Infinity and nothing is said beyond the nvme_path it needs."""
    cfg = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {
        "device": "nvme", "nvme_path": "/local_nvme"}}}
    found = [f for f in lint_ds_config(cfg) if f.path == "zero_optimization.offload_optimizer.device"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "ZeRO stage 2" in found[0].message and "CPU offload" in found[0].message
    cfg["zero_optimization"]["stage"] = 3
    assert not [f for f in lint_ds_config(cfg) if f.path.startswith("zero_optimization.offload_optimizer")]
