"""Inputs that were accepted and priced as something else, or crashed: each now gets one line naming the field and
the numbers (or, for a replay that fails inside transformers, the plan keeps its constant-reserve rank)."""
import json

import pytest

from workbench.catalog import model
from workbench.cli import main
from workbench.specs import ClusterSpec, ParallelPlan, validate


def _config(tmp_path, **fields):
    data = dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
                intermediate_size=128)
    data.update(fields)
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("fields, message", [
    (dict(num_key_value_heads=0), "num_key_value_heads=0 must be >= 1"),
    (dict(num_attention_heads=0), "num_attention_heads=0 must be >= 1"),
    (dict(model_type="qwen3", head_dim=0), "head_dim=0 must be >= 1"),
    (dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
     "no num_key_value_heads, and MixtralConfig's default 8 does not divide num_attention_heads=4; give "
     "num_key_value_heads"),
])
def test_hf_config_counts_below_one_are_refused_by_name(tmp_path, capsys, fields, message):
    """A 0 read as "not given" took the attention heads' count (num_key_value_heads) or hidden / heads (head_dim):
    a model transformers cannot build was priced as another one."""
    assert main(["import", str(_config(tmp_path, **fields) / "config.json")]) == 2
    assert message in capsys.readouterr().err


def test_lora_on_targets_the_model_lacks_is_refused():
    m, cluster = model("gpt3-125m"), ClusterSpec(gpu="H100-SXM", gpus_per_node=1)
    with pytest.raises(ValueError, match=r"lora_targets=\['gate'\]: gpt3-125m has no gate projection \(activation="
                                         r"'gelu', not gated\), so no adapter would train"):
        validate(m, cluster, ParallelPlan(world_size=1, lora_rank=8, lora_targets=("gate",)))
    validate(m, cluster, ParallelPlan(world_size=1, lora_rank=8, lora_targets=("gate", "up")))  # up trains


def test_deepspeed_pipeline_has_no_interleaving():
    with pytest.raises(ValueError, match=r"virtual_pipeline=2 needs engine 'megatron' or 'megatron-deepspeed'"):
        ParallelPlan(world_size=2, engine="deepspeed", pipeline_parallel=2, virtual_pipeline=2, global_batch_size=16)
    ParallelPlan(world_size=2, engine="megatron-deepspeed", pipeline_parallel=2, virtual_pipeline=2,
                 global_batch_size=16)


def test_bandwidths_below_one_megabyte_per_second_are_refused(capsys):
    assert main(["estimate", "--model", "gpt3-125m", "--intra-gbps", "1e-300", "--no-simulate-allocator"]) == 2
    assert "intra_node_gb_per_s=1e-300 is smaller than the smallest supported value 0.001" in capsys.readouterr().err
    ClusterSpec(gpu="H100-SXM", gpus_per_node=1, nvme_gib_per_node=0.0)  # a size may still be 0


def test_nothing_fits_names_zero_init_and_host_memory(capsys):
    """405B on one GPU: every ZeRO-3 plan ties at the whole-model build on the GPU; the message names the build,
    the plan that needs least once it is solved (full recompute) and the host memory it would need."""
    assert main(["plan", "--model", "llama3-405b", "--gpus-per-node", "1", "--gbs", "8"]) == 2
    err = capsys.readouterr().err
    assert "recompute=full); it also needs" in err and "GiB of host memory per node, of 1024 GiB" in err
    assert "try building the model inside deepspeed.zero.Init (zero_init=True, --zero-init: " in err


def test_plan_keeps_its_rank_when_the_replay_fails(monkeypatch, capsys, tmp_path):
    """The replay runs transformers' own model code; where that raises, ``plan --simulate-allocator`` says so per
    plan, as ``estimate`` does, instead of failing the command."""
    from workbench import estimate as E

    real = E.estimate

    def failing(*args, simulate_allocator=None, **kwargs):
        if simulate_allocator is not None:
            raise ZeroDivisionError("integer division or modulo by zero")
        return real(*args, **kwargs)

    monkeypatch.setattr(E, "estimate", failing)
    path = _config(tmp_path)
    assert main(["plan", "--model", f"hf:{path}", "--gpus-per-node", "1", "--seq", "64", "--gbs", "2",
                 "--simulate-allocator", "--top", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["allocator_replay"]
    assert row["replayed"] is False
    assert row["skipped"] == "the replay failed (ZeroDivisionError: integer division or modulo by zero)"


def test_messages_name_what_was_given(tmp_path, capsys):
    from workbench.runs.data import parse_source

    assert main(["estimate", "--model", "gpt3-125m", "--engine", "megatron", "--gpus-per-node", "8", "--cp", "8",
                 "--cp-comm-type", "a2a+p2p", "--hierarchical-cp", "3", "3", "--no-simulate-allocator"]) == 2
    assert "whose product is context_parallel=8 (a2a size, p2p size); got 3 × 3 = 9" in capsys.readouterr().err
    assert main(["estimate", "--model", "gpt3-125m", "--profile", str(tmp_path), "--no-simulate-allocator"]) == 2
    assert f"profile file {tmp_path} is a directory, not a profile's JSON file" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"text file '.*' is a directory, not a text file"):
        parse_source(f"text:{tmp_path}")


def test_export_warns_when_the_plan_does_not_fit(capsys):
    """The files stay valid (and alone on stdout); stderr says the run would not fit."""
    assert main(["export", "deepspeed", "--model", "llama3-70b", "--gpus-per-node", "1"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert "warning: the estimate says this plan does not fit: " in err and "GiB per GPU (up to " in err
    assert main(["export", "deepspeed", "--model", "gpt3-125m", "--gpus-per-node", "1"]) == 0
    assert "does not fit" not in capsys.readouterr().err


def test_a_cron_that_never_fires_is_refused():
    from workbench.jobs.schedule import cron_trigger

    with pytest.raises(ValueError, match=r"cron '0 0 31 2 \*' never fires \(day 31 of month 2"):
        cron_trigger("0 0 31 2 *")
    cron_trigger("0 0 29 2 *")  # leap years have it


def test_indexed_data_header_is_checked_before_launch(tmp_path):
    """megatron-core's own writer makes an index the check accepts; a garbage .idx is refused before any rank
    starts (rank 0 asserted 'bad header' half a minute into the launch)."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    from workbench.runs.data import parse_source

    prefix = str(tmp_path / "good")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
    builder.add_item(torch.arange(16, dtype=torch.int32))
    builder.end_document()
    builder.finalize(prefix + ".idx")
    assert parse_source(f"indexed:{prefix}").path == prefix
    (tmp_path / "bad.bin").write_bytes(b"\0" * 64)
    (tmp_path / "bad.idx").write_bytes(b"not an index")
    with pytest.raises(ValueError, match=r"bad.idx' is not a megatron-core indexed dataset index \(its header is "):
        parse_source(f"indexed:{tmp_path / 'bad'}")


def test_tiny_and_the_hf_trainer_are_named_together(capsys):
    assert main(["run", "--tiny", "--trainer", "hf"]) == 2
    assert "--tiny trains the package's megatron-core teaching model; --trainer hf trains a Hugging Face model" in \
        capsys.readouterr().err


def test_log_numbers_too_large_are_one_error_in_the_cli_and_the_advisor_view(tmp_path, capsys):
    from workbench.logreader import parse_log

    with pytest.raises(ValueError, match=r"^the log holds a number too large to read \(cannot convert float "):
        parse_log("CUDA out of memory. Tried to allocate 1e400 GiB.")
    with pytest.raises(ValueError, match=r"^the log holds a number too large to read"):
        parse_log(" iteration " + "9" * 5000 + "/ 100 | lm loss: 1.0 |")
    from widgets.app import Workbench

    app = Workbench()
    view = next(v for v in app.views if v.title == "Advisor")
    app.view_tabs.selected_index = app.views.index(view)
    view.read_log("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.35 GiB of which "
                  "1.00 GiB is free.")
    assert view.log_result.value and not view.error.value
    assert view.read_log("CUDA out of memory. Tried to allocate 1e400 GiB.") is None
    assert "the log holds a number too large to read" in view.error.value and view.log_result.value == ""


def test_a_loss_gone_nan_fails_the_log_check_though_the_framework_counted_none():
    from workbench.advisor import advise
    from workbench.logreader import parse_log

    lines = [f" iteration {i}/ 100 | consumed samples: {8 * i} | elapsed time per iteration (ms): 1000.0 | "
             f"lm loss: {'1.0E+01' if i < 6 else 'nan'} | grad norm: 1.0 | number of skipped iterations: 0 | "
             f"number of nan iterations: 0 |" for i in range(1, 11)]
    advice = advise(model("gpt3-125m"), ClusterSpec(gpu="H100-SXM", gpus_per_node=8),
                    ParallelPlan(world_size=8, engine="megatron", global_batch_size=8), log=parse_log("\n".join(lines)))
    (nan,) = [f for f in advice.log_findings if f.id == "log_nan"]
    assert nan.status == "fail" and nan.message == "the loss is nan on 5 of 10 progress lines (first at iteration 6)"


def test_megatron_import_over_a_preset_is_named_and_sized_as_the_launcher_says():
    """A command line that gives another model's sizes is not labelled with the preset it was read over; torchrun
    without --nnodes runs one node (its default), and a process count below 1 is refused."""
    from workbench.configs.importer import import_megatron_args

    flags = ["pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
             "--ffn-hidden-size", "14336", "--micro-batch-size", "1", "--global-batch-size", "8"]
    imported = import_megatron_args(["torchrun", "--nproc_per_node", "8", *flags])
    m, plan = imported.to_specs(model("guide-13b"), ClusterSpec(gpu="A100-80GB", gpus_per_node=8, num_nodes=2))
    assert m.name == "imported" and m.num_layers == 32 and plan.world_size == 8
    same = import_megatron_args(["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--seq-length", "1024"])
    assert same.to_specs(model("guide-13b"))[0].name == "guide-13b"  # only the sequence: still that model
    with pytest.raises(ValueError, match=r"launcher --nproc-per-node 0: must be >= 1"):
        import_megatron_args(["torchrun", "--nproc_per_node", "0", *flags])


@pytest.mark.parametrize("text, message", [
    ('{"train_batch_size": 8, "train_batch_size": 16}',
     "ds_config gives key 'train_batch_size' twice (8 and 16); DeepSpeed refuses a config with duplicate keys"),
    ("{train_batch_size: 8, zero_optimization: {stage: 2, stage: 3}}", "ds_config gives key 'stage' twice"),
    ("[1, 2, 3]", "the source is a JSON array, not a config: a ds_config is a JSON object"),
    ("null", "the source is a JSON null, not a config"),
])
def test_pasted_json_that_deepspeed_would_refuse_is_named(text, message):
    from workbench.configs.importer import import_text

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        import_text(text)


def test_nothing_fits_says_which_switch_to_turn(capsys):
    assert main(["plan", "--model", "llama3-405b", "--gpus-per-node", "1", "--gbs", "8", "--no-offload"]) == 2
    assert "try allowing CPU offload (`workbench plan` without --no-offload" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-405b", "--gpus-per-node", "1", "--gbs", "8"]) == 2
    assert "GiB for this plan, still over the 75.2 GiB limit" in capsys.readouterr().err


def test_uneven_split_messages_count_what_is_there():
    from workbench.specs import pipeline_stage_layers

    with pytest.raises(ValueError, match=r"first_stage_layers=50 and last_stage_layers=None place 50 layers, more "
                                         r"than num_layers=40"):
        pipeline_stage_layers(40, 2, first=50)
    with pytest.raises(ValueError, match=r"leaves 20 layers for no other stage"):
        pipeline_stage_layers(40, 2, first=10, last=10)


def test_launch_button_without_permission_refuses_inline():
    from widgets.app import Workbench
    from widgets.launch_view import LaunchView

    app = Workbench()
    view = LaunchView(app=app)
    view.show(app.state)
    view.button.click()  # no exception out of the click
    assert "launch is disabled in this app; create it with allow_launch=True" in view.error.value
    assert view.run is None
