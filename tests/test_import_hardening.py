"""The importer on real-world config shapes (tests/data/import: written for these tests after the shapes public
projects use) and on broken or hostile input: every case is read right or refused with one named ``ValueError``.
The property-based part (hypothesis) mutates real-shaped configs and command lines with a fixed seed."""
import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("deepspeed")

from workbench import catalog, cli
from workbench.configs.importer import import_any, import_ds_config, import_megatron_args, import_text
from workbench.specs import ClusterSpec

DATA = Path(__file__).parent / "data" / "import"
PROPERTY = settings(derandomize=True, max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# Real-world shapes
# ---------------------------------------------------------------------------------------------------------------
def test_hf_trainer_zero3_with_null_number_checkpoints():
    imp = import_any(DATA / "hf_trainer_zero3_auto.json")
    assert imp.plan_fields["zero_stage"] == 3 and imp.plan_fields["recompute"] == "full"
    assert "number_checkpoints" not in imp.options  # null is DeepSpeed's "not given"
    assert "train_micro_batch_size_per_gpu" in imp.options["auto"]
    deprecated = [f for f in imp.lint if f.path.endswith("stage3_gather_fp16_weights_on_model_save")]
    assert deprecated and "stage3_gather_16bit_weights_on_model_save" in deprecated[0].suggestion
    model, plan = imp.to_specs(model=catalog.model("llama3-8b"), cluster=ClusterSpec(gpu="H100-SXM", num_nodes=2))
    assert int(plan.zero_stage) == 3 and plan.world_size == 16


def test_old_bfloat16_section_is_read_and_linted():
    imp = import_any(DATA / "bf16_old_section_zero1.json")
    assert imp.plan_fields["precision"] == "bf16" and imp.plan_fields["zero_stage"] == 1
    assert any("'bfloat16' is the deprecated name" in w for w in imp.warnings)
    lint = {f.path: f for f in imp.lint}
    assert lint["bfloat16"].severity == "warning" and "'bf16'" in lint["bfloat16"].suggestion
    assert "offload_optimizer" in lint["zero_optimization.cpu_offload"].suggestion


def test_megatron_deepspeed_legacy_script():
    imp = import_any(DATA / "megatron_deepspeed_legacy.sh")
    assert imp.kind == "megatron-deepspeed"
    plan = imp.plan_fields
    # --batch-size was Megatron's per-replica batch, today's --micro-batch-size
    assert plan["micro_batch_size"] == 4 and "global_batch_size" not in plan
    assert any("--batch-size 4" in w and "micro batch 4" in w for w in imp.warnings)
    # --checkpoint-activations --activations-checkpoint-method uniform --activations-checkpoint-num-layers 2
    assert plan["recompute"] == "full" and "recompute_layers" not in plan
    assert imp.options["recompute_uniform_chunk_layers"] == 2
    assert any("one checkpoint per 2 layers" in w for w in imp.warnings)
    assert "activations-checkpoint-method" not in imp.options.get("other_flags", [])
    assert (imp.options["gpus_per_node"], imp.options["num_nodes"]) == (8, 4) and plan["zero_stage"] == 1
    model, p = imp.to_specs()
    assert p.world_size == 32 and p.data_parallel == 4 and p.micro_batch_size == 4 and p.global_batch_size == 16


def test_block_method_reads_layer_count():
    imp = import_megatron_args("pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 "
                               "--checkpoint-activations --activations-checkpoint-method block "
                               "--activations-checkpoint-num-layers 3 --pipeline-model-parallel-size 2")
    assert imp.plan_fields["recompute"] == "full" and imp.plan_fields["recompute_layers"] == 3
    imp = import_megatron_args("pretrain_gpt.py --num-layers 24 --recompute-granularity full "
                               "--recompute-method uniform --recompute-num-layers 4")
    assert imp.options["recompute_uniform_chunk_layers"] == 4 and "recompute_layers" not in imp.plan_fields
    assert "must be 'uniform' or 'block'" in _error(
        import_megatron_args, "pretrain_gpt.py --recompute-granularity full --recompute-method diagonal")


def test_megatron_lm_moe_fp8_script_reads_fp8_and_expert_parallel():
    imp = import_any(DATA / "megatron_lm_moe_fp8.sh")
    assert imp.model_fields["num_experts"] == 8 and imp.model_fields["num_query_groups"] == 8
    assert "sequence_parallel" not in imp.plan_fields  # TP 1: Megatron turns it off
    text = " | ".join(imp.warnings)
    assert "--sequence-parallel with tensor parallel 1" in text
    assert "--fp8-format" not in text  # FP8 is modelled: read as precision fp8, delayed recipe
    assert imp.plan_fields["precision"] == "fp8" and imp.plan_fields["fp8_recipe"] == "delayed"
    assert imp.options["fp8_amax_history_len"] == 1024
    assert "expert" not in text  # expert parallelism is modelled: read into the plan
    assert imp.plan_fields["expert_parallel"] == 8 and imp.plan_fields["moe_token_dispatcher"]
    model, plan = imp.to_specs()
    assert plan.world_size == 64 and not plan.sequence_parallel and plan.pipeline_parallel == 4


def test_sequence_parallel_kept_with_tensor_parallel():
    imp = import_megatron_args("pretrain_gpt.py --tensor-model-parallel-size 2 --sequence-parallel")
    assert imp.plan_fields["sequence_parallel"] is True and not imp.warnings


def test_gpt_neox_yaml_says_what_it_is_and_what_to_do():
    for source in (DATA / "gpt_neox_20b.yml", (DATA / "gpt_neox_20b.yml").read_text()):
        msg = _error(import_any, source)
        assert "GPT-NeoX YAML config" in msg
        assert "workbench estimate --engine megatron-deepspeed --layers 44 --hidden 6144 --heads 64" in msg
        assert "--tp 2 --pp 4 --mbs 4 --zero 1" in msg
    assert "GPT-NeoX" in _error(import_ds_config, (DATA / "gpt_neox_20b.yml").read_text())


# ---------------------------------------------------------------------------------------------------------------
# Broken input: one clear error each
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('{"train_micro_batch_size_per_gpu": 1e999}', "train_micro_batch_size_per_gpu=inf is not a finite number"),
    ('{"train_batch_size": 1e30}', "train_batch_size=1e+30 is out of range"),
    ('{"train_micro_batch_size_per_gpu": 0, "gradient_accumulation_steps": 4, "train_batch_size": 8}',
     "train_micro_batch_size_per_gpu=0 must be >= 1"),
    ('{"optimizer": {"type": "AdamW", "params": {"betas": 3}}}', "optimizer.params.betas=3 must be a list of two"),
    ('{"optimizer": {"type": "AdamW", "params": {"betas": [0.9, "x"]}}}', "optimizer.params.betas[1]='x'"),
    ('{"zero_optimization": {"stage": 7}}', "zero_optimization.stage=7 must be 0, 1, 2 or 3"),
    ('{"zero_optimization": {"stage": 2.5}}', "zero_optimization.stage=2.5 must be a whole number"),
    ('{"zero_optimization": 3}', "zero_optimization=3 must be a JSON object"),
    ('{"zero_optimization": {"offload_optimizer": {"device": 1}}}', "offload_optimizer.device=1"),
    ('{"gradient_clipping": NaN}', "NaN"),
    ('[1, 2]', "ds_config must be a JSON object, got list"),
    ('{"a": ' * 200 + '1' + '}' * 200, "nested too deeply"),
    ('{"a": ' * 100000 + '1' + '}' * 100000, "nested too deeply"),
])
def test_broken_ds_configs(text, expected):
    assert expected in _error(import_ds_config, text)


def test_world_size_and_batch_arithmetic_errors():
    assert "world_size=0 must be >= 1" in _error(import_ds_config, {"train_batch_size": 8}, world_size=0)
    assert "not divisible by world_size=3" in _error(import_ds_config, {"train_batch_size": 8}, world_size=3)


@pytest.mark.parametrize("command, expected", [
    ("pretrain_gpt.py --num-layers 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0",
     "--num-layers-per-virtual-pipeline-stage 0 must be >= 1"),
    ("pretrain_gpt.py --micro-batch-size 0", "--micro-batch-size 0 must be >= 1"),
    ("pretrain_gpt.py --num-layers 1e999", "--num-layers 1e999 is not a finite number"),
    ("pretrain_gpt.py --hidden-size 99999999999999999999999", "--hidden-size 99999999999999999999999 is out of"),
    ("pretrain_gpt.py --deepspeed --zero-stage 5", "--zero-stage 5 must be 0, 1, 2 or 3"),
    ("pretrain_gpt.py --num-layers", "--num-layers needs a value"),
    ("pretrain_gpt.py --lr 'unterminated", "cannot split the command line"),
])
def test_broken_command_lines(command, expected):
    assert expected in _error(import_megatron_args, command)


def test_text_and_paths_are_told_apart_without_opening(tmp_path):
    long_command = "python pretrain_gpt.py " + " ".join(f"--num-layers {i % 40 + 1}" for i in range(600)) + \
        " --hidden-size 1024 --num-attention-heads 16"
    assert len(long_command) > 4096
    assert import_any(long_command).model_fields["hidden_size"] == 1024  # no "File name too long"
    one_line = "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4"
    assert import_any(one_line).model_fields["num_layers"] == 4
    assert "is a directory" in _error(import_any, str(tmp_path))
    assert "does not exist" in _error(import_any, str(tmp_path / "missing.json"))
    msg = _error(import_any, "x" * 300)  # a name too long for the file system: a named error, no OSError
    assert msg.startswith("source 'xxxx") and "..." in msg and "File name too long" in msg and len(msg) < 200
    binary = tmp_path / "blob.json"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert "is not UTF-8 text" in _error(import_any, binary)
    assert "must be a dict, a path or text" in _error(import_any, 42)
    spaced = tmp_path / "my config.json"
    spaced.write_text('{"zero_optimization": {"stage": 2}}')
    assert import_any(str(spaced)).plan_fields["zero_stage"] == 2


def test_cli_long_quoted_command_and_bad_inputs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "COMMANDS", ["import_"])
    monkeypatch.delenv("WORKBENCH_DEBUG", raising=False)
    command = "python pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 " + "--seed 1 " * 800
    assert cli.main(["import", command, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["num_layers"] == 4
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' * 50000 + '1' + '}' * 50000)
    for source in (str(deep), str(tmp_path), str(DATA / "gpt_neox_20b.yml")):
        assert cli.main(["import", source]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("workbench: error: ") and err.count("\n") == 1


# ---------------------------------------------------------------------------------------------------------------
# Property: mutated real-shaped configs and command lines
# ---------------------------------------------------------------------------------------------------------------
_JUNK = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                  st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                  st.sampled_from(["auto", "1e999", "-1", "0", "cpu", "nvme", "1_000", [], {}, [1], [0.9, 0.95, 1]]))
_DS_BASES = [json.loads((DATA / name).read_text()) for name in ("hf_trainer_zero3_auto.json",
                                                                 "bf16_old_section_zero1.json")]


def _leaf_paths(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaf_paths(v, path + (k,))
    yield path


def _check_import(fn):
    try:
        imp = fn()
    except ValueError as exc:
        assert str(exc).strip()
        return
    try:
        model, plan = imp.to_specs(model=catalog.model("gpt3-1.3b"), cluster=ClusterSpec(gpu="H100-SXM"))
    except ValueError as exc:
        assert str(exc).strip()


@PROPERTY
@given(base=st.sampled_from(range(len(_DS_BASES))), picks=st.lists(st.tuples(st.integers(0, 10**6), _JUNK),
                                                                   min_size=1, max_size=4))
def test_property_mutated_ds_configs(base, picks):
    cfg = copy.deepcopy(_DS_BASES[base])
    paths = [p for p in _leaf_paths(cfg) if p]
    for index, junk in picks:
        path = paths[index % len(paths)]
        node = cfg
        for key in path[:-1]:
            node = node[key] if isinstance(node, dict) and isinstance(node.get(key), dict) else None
            if node is None:
                break
        if node is not None:
            node[path[-1]] = junk
    _check_import(lambda: import_ds_config(cfg))
    _check_import(lambda: import_text(json.dumps(cfg)))


_FLAGS = ["--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--tensor-model-parallel-size",
          "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage", "--micro-batch-size",
          "--global-batch-size", "--batch-size", "--zero-stage", "--num-query-groups", "--ffn-hidden-size",
          "--kv-channels", "--context-parallel-size", "--recompute-num-layers", "--num-experts", "--lr",
          "--hidden-dropout", "--expert-model-parallel-size", "--activations-checkpoint-num-layers"]
_SWITCHES = ["--sequence-parallel", "--deepspeed", "--checkpoint-activations", "--bf16", "--fp16", "--swiglu",
             "--use-distributed-optimizer", "--fp8-format hybrid", "--recompute-granularity full",
             "--recompute-method uniform", "--recompute-method block", "--activations-checkpoint-method uniform",
             "--group-query-attention", "--untie-embeddings-and-output-weights"]
_VALUES = st.one_of(st.integers(min_value=-3, max_value=2**64).map(str),
                    st.sampled_from(["0", "1", "2", "4", "8", "1e999", "nan", "-inf", "2.5", "x", "1_0", "''"]))


@PROPERTY
@given(values=st.lists(st.tuples(st.sampled_from(_FLAGS), _VALUES), max_size=8),
       switches=st.lists(st.sampled_from(_SWITCHES), max_size=4), nproc=st.sampled_from(["", "torchrun --nproc_per_node 8 --nnodes 2 ", "deepspeed --num_gpus 0 "]))
def test_property_mutated_command_lines(values, switches, nproc):
    base = {"--num-layers": "8", "--hidden-size": "256", "--num-attention-heads": "8"}
    base.update(dict(values))
    command = nproc + "pretrain_gpt.py " + " ".join(f"{k} {v}" for k, v in base.items()) + " " + " ".join(switches)
    _check_import(lambda: import_megatron_args(command))


# ---------------------------------------------------------------------------------------------------------------
# Command lines Megatron refuses, and sizes past what the specs accept
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("launcher", ["", "--deepspeed --zero-stage 1 "])
def test_fp16_with_bf16_is_refused_as_megatron_refuses_it(launcher):
    msg = _error(import_megatron_args, "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
                 + launcher + "--fp16 --bf16")
    assert "--fp16" in msg and "--bf16" in msg and "Megatron" in msg and len(msg.splitlines()) == 1


@pytest.mark.parametrize("flags, expected", [
    ("--seq-length 1e9", "--seq-length 1e9: seq_length=1000000000 is larger than the largest supported value "
                         "67,108,864"),
    ("--seq-length 67108865", "--seq-length 67108865: seq_length=67108865 is larger than the largest supported"),
    ("--max-position-embeddings 1e9", "--max-position-embeddings 1e9: seq_length=1000000000 is larger"),
    ("--num-layers 20000", "--num-layers 20000: num_layers=20000 is larger than the largest supported value 10,000"),
    ("--num-query-groups 1e6", "--num-query-groups 1e6: num_query_groups=1000000 is larger"),
    ("--tensor-model-parallel-size 1e6", "--tensor-model-parallel-size 1e6: tensor_parallel=1000000 is larger"),
    ("--micro-batch-size 1e6", "--micro-batch-size 1e6: micro_batch_size=1000000 is larger"),
])
def test_command_line_sizes_get_the_limits_estimate_applies(flags, expected):
    command = "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 " + flags
    assert expected in _error(import_megatron_args, command)


def test_command_line_sizes_at_the_limit_are_read():
    from workbench.specs import MAX_COUNT

    imp = import_megatron_args(f"pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
                               f"--seq-length {MAX_COUNT['seq_length']} --position-embedding-type rope")
    assert imp.model_fields["seq_length"] == MAX_COUNT["seq_length"]


# ---------------------------------------------------------------------------------------------------------------
# ds_config batch fields: the limits estimate applies, and DeepSpeed's batch identity
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg, world_size, expected", [
    ({"train_micro_batch_size_per_gpu": 1e6},
     None, "train_micro_batch_size_per_gpu=1000000.0: micro_batch_size=1000000 is larger than the largest supported "
           "value 65,536"),
    ({"train_batch_size": 2**41},
     None, "train_batch_size=2199023255552: global_batch_size=2199023255552 is larger than the largest supported "
           "value 1,099,511,627,776"),
    ({"gradient_accumulation_steps": 2**41},
     None, "gradient_accumulation_steps=2199023255552 is larger than the largest supported value 1,099,511,627,776"),
    ({"gradient_accumulation_steps": -2}, None, "gradient_accumulation_steps=-2 must be >= 1"),
    ({"gradient_accumulation_steps": 0}, None, "gradient_accumulation_steps=0 must be >= 1"),
    ({"train_micro_batch_size_per_gpu": 2.5}, None, "train_micro_batch_size_per_gpu=2.5 must be a whole number"),
    ({"train_batch_size": True}, None, "train_batch_size=True is not a number"),
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
     None, "train_batch_size=30 is not a multiple of train_micro_batch_size_per_gpu(4) * "
           "gradient_accumulation_steps(1) = 4"),
    ({"train_batch_size": 30, "gradient_accumulation_steps": 4},
     None, "train_batch_size=30 is not a multiple of gradient_accumulation_steps(4) = 4"),
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
     4, "train_batch_size=32 != train_micro_batch_size_per_gpu(2) * gradient_accumulation_steps(2) * world_size(4) "
        "= 16"),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
      "sequence_parallel_size": 2},
     32, "* data_parallel(16 = world_size 32 / sequence_parallel_size 2) = 128"),
    ({"train_batch_size": 2**20},
     1, "train_micro_batch_size_per_gpu = train_batch_size(1048576) / world_size(1) = 1,048,576: "
        "micro_batch_size=1048576 is larger than the largest supported value 65,536"),
    ({"train_micro_batch_size_per_gpu": 2**16, "gradient_accumulation_steps": 2**30},
     1024, "train_batch_size = train_micro_batch_size_per_gpu(65536) * gradient_accumulation_steps(1073741824) * "
           "world_size(1024) = 72,057,594,037,927,936: global_batch_size=72057594037927936 is larger"),
])
def test_ds_config_batch_fields_get_the_limits_estimate_applies(cfg, world_size, expected):
    msg = _error(import_ds_config, cfg, world_size=world_size)
    assert expected in msg and len(msg.splitlines()) == 1


def test_ds_config_batch_fields_at_the_limit_and_auto_are_read():
    from workbench.specs import MAX_COUNT

    imp = import_ds_config({"train_batch_size": MAX_COUNT["global_batch_size"],
                            "train_micro_batch_size_per_gpu": MAX_COUNT["micro_batch_size"],
                            "gradient_accumulation_steps": 1})
    assert imp.options["data_parallel"] == MAX_COUNT["global_batch_size"] // MAX_COUNT["micro_batch_size"]
    imp = import_ds_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                            "gradient_accumulation_steps": "auto"}, world_size=8)
    assert imp.plan_fields["micro_batch_size"] == 8 and imp.options["gradient_accumulation_steps"] == 1
    assert {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps"} <= set(imp.options["auto"])
    imp = import_ds_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                            "gradient_accumulation_steps": "auto"})
    assert "micro_batch_size" not in imp.plan_fields and "data_parallel" not in imp.options
    model, plan = imp.to_specs(model=catalog.model("gpt3-1.3b"), cluster=ClusterSpec(gpu="H100-SXM"))
    assert plan.micro_batch_size == 1 and plan.world_size == 8


# ---------------------------------------------------------------------------------------------------------------
# ds_config values DeepSpeed coerces or refuses
# ---------------------------------------------------------------------------------------------------------------
def _zero(stage: int, **fields) -> dict:
    return {"train_batch_size": 8, "zero_optimization": {"stage": stage, **fields}}


@pytest.mark.parametrize("stage, value, expected", [
    (1, "true", True), (1, "True", True), (1, 1, True), (3, "false", False), (3, 0, False), (3, "off", False),
    (2, True, True), (3, None, True), (1, None, False),
])
def test_overlap_comm_words_and_numbers_are_read_as_deepspeed_reads_them(stage, value, expected):
    fields = {} if value is None else {"overlap_comm": value}
    assert import_ds_config(_zero(stage, **fields)).plan_fields["overlap_comm"] is expected


@pytest.mark.parametrize("value", ["maybe", 2, 0.5, [True]])
def test_overlap_comm_other_values_are_refused(value):
    msg = _error(import_ds_config, _zero(3, overlap_comm=value))
    assert msg.startswith(f"zero_optimization.overlap_comm={value!r}") and "must be true or false" in msg


def test_overlap_comm_auto_is_left_to_the_stage_default():
    imp = import_ds_config(_zero(3, overlap_comm="auto"))
    assert imp.plan_fields["overlap_comm"] is True and "zero_optimization.overlap_comm" in imp.options["auto"]


@pytest.mark.parametrize("cfg, expected", [
    (_zero(2, reduce_bucket_size=-5), "zero_optimization.reduce_bucket_size=-5 must be >= 1 (DeepSpeed's config"),
    (_zero(2, reduce_bucket_size=0), "zero_optimization.reduce_bucket_size=0 must be >= 1"),
    (_zero(2, reduce_bucket_size=5.5), "zero_optimization.reduce_bucket_size=5.5 must be a whole number"),
    (_zero(2, allgather_bucket_size=-1), "zero_optimization.allgather_bucket_size=-1 must be >= 0"),
    (_zero(3, stage3_max_live_parameters=-1), "zero_optimization.stage3_max_live_parameters=-1 must be >= 0"),
    (_zero(3, stage3_prefetch_bucket_size=-3), "zero_optimization.stage3_prefetch_bucket_size=-3 must be >= 0"),
    (_zero(3, stage3_param_persistence_threshold=-1),
     "zero_optimization.stage3_param_persistence_threshold=-1 must be >= 0"),
    (_zero(3, stage3_max_live_parameters=0), "zero_optimization.stage3_max_live_parameters=0: DeepSpeed accepts 0 "
                                             "here, but the workbench models this setting only from 1"),
    (_zero(3, sub_group_size=-1), "zero_optimization.sub_group_size=-1 must be >= 0"),
    ({"train_batch_size": 8, "gradient_clipping": -1}, "gradient_clipping=-1 must be >= 0 (DeepSpeed clips only "
                                                       "when it is > 0"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "initial_scale_power": 1000}},
     "fp16.initial_scale_power=1000 must be at most 63: the first loss scale 2**1000"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "initial_scale_power": -1}},
     "fp16.initial_scale_power=-1 must be >= 0"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": -2}},
     "fp16.loss_scale=-2 must be >= 0 (0 is dynamic loss scaling; DeepSpeed refuses negative values)"),
    (_zero(3, offload_optimizer={"device": "gpu"}),
     "zero_optimization.offload_optimizer.device='gpu' must be one of 'none', 'cpu', 'nvme'"),
    (_zero(3, offload_param={"device": "CPU"}),
     "zero_optimization.offload_param.device='CPU' must be one of 'none', 'cpu', 'nvme'"),
    (_zero(3, offload_optimizer="cpu"),
     'zero_optimization.offload_optimizer=\'cpu\' must be an object like {"device": "cpu"}'),
    (_zero(3, offload_param=["cpu"]), "zero_optimization.offload_param=['cpu'] must be an object"),
    (_zero(3, offload_optimizer={"device": "cpu", "ratio": 5}),
     "zero_optimization.offload_optimizer.ratio=5 must be in [0, 1]"),
    (_zero(3, offload_optimizer={"device": "cpu", "ratio": -0.1}),
     "zero_optimization.offload_optimizer.ratio=-0.1 must be in [0, 1]"),
    (_zero(2, offload_optimizer={"device": "cpu", "ratio": 0.3}),
     "zero_optimization.offload_optimizer.ratio=0.3 needs zero_optimization.stage 3 (got 2"),
    (_zero(3, offload_optimizer={"device": "cpu", "pin_memory": "sometimes"}),
     "zero_optimization.offload_optimizer.pin_memory='sometimes' must be true or false"),
])
def test_ds_config_values_deepspeed_refuses_are_named(cfg, expected):
    msg = _error(import_ds_config, cfg)
    assert expected in msg and len(msg.splitlines()) == 1


def test_ds_config_values_at_deepspeeds_limits_are_read():
    imp = import_ds_config({"train_batch_size": 8, "gradient_clipping": 0,
                            "fp16": {"enabled": True, "initial_scale_power": 63, "loss_scale": 0},
                            "zero_optimization": {"stage": 3, "reduce_bucket_size": "5e8",
                                                  "stage3_param_persistence_threshold": 0,
                                                  "offload_optimizer": {"device": "cpu", "ratio": 1,
                                                                        "pin_memory": "false"}}})
    assert imp.options["clip"] == 0.0 and imp.options["initial_scale_power"] == 63
    assert imp.options["reduce_bucket_size"] == 500_000_000 and imp.options["stage3_param_persistence_threshold"] == 0
    assert imp.plan_fields["offload_optimizer"] == "cpu" and imp.plan_fields["pin_memory"] is False
    assert not imp.warnings


def test_partial_optimizer_offload_is_read_with_a_warning():
    imp = import_ds_config(_zero(3, offload_optimizer={"device": "cpu", "ratio": 0.3}))
    assert imp.plan_fields["offload_optimizer"] == "cpu"
    assert any("offload_optimizer.ratio=0.3" in w and "not modelled" in w for w in imp.warnings)


@pytest.mark.parametrize("power, severity, fragment", [
    (16, None, None), (32, None, None),
    (40, "warning", "initial_scale_power=40: the dynamic loss scale starts at 2**40, far above fp16's range "
                    "(65504, about 2**16); about 24 steps overflow"),
])
def test_initial_scale_power_far_above_fp16_is_a_lint_warning(power, severity, fragment):
    imp = import_ds_config({"train_batch_size": 8, "fp16": {"enabled": True, "initial_scale_power": power}})
    assert imp.options["initial_scale_power"] == power
    found = [f for f in imp.lint if f.path == "fp16.initial_scale_power"]
    if severity is None:
        assert not found
    else:
        assert len(found) == 1 and found[0].severity == severity and fragment in found[0].message


@pytest.mark.parametrize("cfg, path, fragment", [
    ({"fp16": {"enabled": True, "initial_scale_power": 1000}}, "fp16.initial_scale_power",
     "the first loss scale 2**1000 does not fit the 64-bit int"),
    ({"fp16": {"enabled": True, "loss_scale": -2}}, "fp16.loss_scale", "loss_scale=-2 is negative; DeepSpeed "
                                                                       "refuses it"),
    ({"gradient_clipping": -1}, "gradient_clipping", "gradient_clipping=-1 is negative: DeepSpeed clips only when "
                                                     "it is > 0"),
])
def test_lint_names_values_deepspeed_refuses_or_ignores(cfg, path, fragment):
    from workbench.configs.lint import lint_ds_config

    found = [f for f in lint_ds_config({"train_batch_size": 8, **cfg}) if f.path == path]
    assert len(found) == 1 and found[0].severity == "error" and fragment in found[0].message


def test_cli_ds_config_overlap_word_and_bad_offload(capsys, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(_zero(3, overlap_comm="false")))
    assert cli.main(["import", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["overlap_comm"] is False
    path.write_text(json.dumps(_zero(3, offload_optimizer={"device": "gpu"})))
    assert cli.main(["import", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "workbench: error: zero_optimization.offload_optimizer.device='gpu' must be one of" in err


# ---------------------------------------------------------------------------------------------------------------
# Megatron command lines checked as workbench estimate checks them
# ---------------------------------------------------------------------------------------------------------------
_BASE = ("python pretrain_gpt.py --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048 "
         "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64")


def _cli(capsys, argv) -> tuple:
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command, expected", [
    (_BASE + " --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 50",
     "error: plan: first_stage_layers=50 and last_stage_layers=None place 50 layers, more than num_layers=40"),
    (_BASE.replace("--seq-length 2048", "--seq-length 4096"),
     "error: model: seq_length=4096 exceeds max_position_embeddings=2048 (the learned position table)"),
    (_BASE + " --context-parallel-size 3", "error: plan: tensor_parallel(1) * pipeline_parallel(1) * "
                                           "context_parallel(3) = 3 does not divide world_size=8"),
    (_BASE + " --num-experts 8 --expert-model-parallel-size 16", "error: plan: expert_tensor_parallel(1) * "
                                                                 "expert_parallel(16) * pipeline_parallel(1) = 16 "
                                                                 "does not divide world_size=8"),
    (_BASE.replace("--global-batch-size 64", "--global-batch-size 63"),
     "error: plan: global_batch_size=63 is not divisible by micro_batch_size(1) * data_parallel(8) = 8"),
    (_BASE + " --group-query-attention --num-query-groups 7",
     "error: model: num_query_groups=7 does not divide num_attention_heads=40"),
    (_BASE + " --num-query-groups 7", "error: model: num_query_groups=7 does not divide num_attention_heads=40"),
])
def test_cli_megatron_import_refuses_what_estimate_refuses(capsys, command, expected):
    rc, out, _ = _cli(capsys, ["import", "--world-size", "8", "--", *command.split()])
    assert rc == 1 and expected in out and "lint: 1 error (exit status 1)" in out


def test_cli_megatron_launcher_shape_is_the_world_size(capsys):
    command = "torchrun --nproc_per_node 8 --nnodes 1 " + _BASE.removeprefix("python ") + \
        " --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4"
    rc, out, _ = _cli(capsys, ["import", "--world-size", "8", "--", *command.split()])
    assert rc == 1 and ("error: plan: tensor_parallel(4) * pipeline_parallel(4) * context_parallel(1) = 16 does not "
                        "divide world_size=8") in out
    rc, out, _ = _cli(capsys, ["import", "--json", command])  # the quoted command: the launcher alone
    data = json.loads(out)
    assert rc == 1 and [f["path"] for f in data["lint"]] == ["plan"] and "world_size=8" in data["lint"][0]["message"]


def test_cli_megatron_world_size_must_agree_with_the_launcher(capsys):
    command = "torchrun --nproc_per_node 8 --nnodes 2 " + _BASE.removeprefix("python ")
    rc, out, err = _cli(capsys, ["import", "--world-size", "8", "--", *command.split()])
    assert rc == 2 and out == ""
    assert "workbench: error: world_size=8 != the launcher's gpus_per_node(8) * num_nodes(2) = 16 ranks" in err


def test_cli_megatron_import_without_findings_says_so(capsys):
    rc, out, _ = _cli(capsys, ["import", "--world-size", "8", "--", *_BASE.split()])
    assert rc == 0 and "lint: no findings" in out and "world_size = 8" in out and "no world size" not in out
    rc, out, _ = _cli(capsys, ["import", "--", *_BASE.split()])
    assert rc == 0 and "lint: no findings" in out and "no world size (the launcher gives no" in out


def test_megatron_world_size_argument_and_its_checks():
    imp = import_megatron_args(_BASE, world_size=8)
    assert imp.plan_fields["world_size"] == 8 and imp.lint == []
    model, plan = imp.to_specs()
    assert plan.world_size == 8 and plan.data_parallel == 8
    imp = import_any(_BASE + " --global-batch-size 12", world_size=8)
    assert [str(f) for f in imp.lint] == ["error: plan: global_batch_size=12 is not divisible by micro_batch_size(1) "
                                          "* data_parallel(8) = 8"]
    # Megatron's own size rules come first and are not repeated by the estimate check
    imp = import_megatron_args(_BASE + " --tensor-model-parallel-size 3", world_size=6)
    assert [f.path for f in imp.lint] == ["--tensor-model-parallel-size"]
    assert "world_size=0 must be >= 1" in _error(import_megatron_args, _BASE, world_size=0)


# ---------------------------------------------------------------------------------------------------------------
# Launch scripts: shell variables holding flag groups, and bash arrays
# ---------------------------------------------------------------------------------------------------------------
_STRING_SCRIPT = """#!/bin/bash
TP=4
PP=2
GPT_ARGS="--num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048"
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    $GPT_ARGS \\
    --tensor-model-parallel-size $TP \\
    --pipeline-model-parallel-size ${PP} \\
    --micro-batch-size 1 --global-batch-size 64 --bf16
"""

# after the shape of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh
_ARRAY_SCRIPT = """#!/bin/bash
GPUS_PER_NODE=8
NUM_NODES=1
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1 #<Specify path>

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
GPT_MODEL_ARGS=(
    --num-layers 40
    --hidden-size 5120
    --num-attention-heads 40
    --seq-length 2048 --max-position-embeddings 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 64
    --bf16
)
MODEL_PARALLEL_ARGS=(
\t--tensor-model-parallel-size 4
\t--pipeline-model-parallel-size 2
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\
    "${GPT_MODEL_ARGS[@]}" \\
    ${TRAINING_ARGS[@]} \\
    ${MODEL_PARALLEL_ARGS[@]} \\
    --save $CHECKPOINT_PATH
"""


def test_script_flag_group_in_a_string_variable_is_word_split(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(_STRING_SCRIPT)
    imp = import_any(path)
    assert (imp.model_fields["num_layers"], imp.model_fields["hidden_size"], imp.model_fields["seq_length"]) == \
        (40, 5120, 2048)
    assert (imp.plan_fields["tensor_parallel"], imp.plan_fields["pipeline_parallel"]) == (4, 2)
    assert "other_flags" not in imp.options and not [w for w in imp.warnings if "ignored tokens" in w]


def test_script_bash_arrays_are_expanded_element_by_element():
    imp = import_any(_ARRAY_SCRIPT)
    assert (imp.model_fields["num_layers"], imp.model_fields["num_attention_heads"]) == (40, 40)
    assert (imp.plan_fields["tensor_parallel"], imp.plan_fields["pipeline_parallel"]) == (4, 2)
    assert (imp.options["gpus_per_node"], imp.options["num_nodes"]) == (8, 1)
    assert imp.plan_fields["precision"] == "bf16" and imp.options["other_flags"] == ["save"]
    assert not imp.warnings and imp.lint == []
    # the launcher's 8 GPUs are the world size the plan is checked against
    imp = import_any(_ARRAY_SCRIPT.replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 4"))
    assert [str(f) for f in imp.lint] == ["error: plan: tensor_parallel(4) * pipeline_parallel(4) * "
                                          "context_parallel(1) = 16 does not divide world_size=8"]


@pytest.mark.parametrize("script, expected", [
    ('A="--num-layers 2 --hidden-size 64"\nB=$A\npython p.py $B', ["--num-layers", "2", "--hidden-size", "64"]),
    ('A="--x 1 --y 2"\npython p.py "$A"', ["--x 1 --y 2"]),  # quoted: one word, as bash passes it
    ("A='--x $B'\nB=3\npython p.py $A --z $B", ["--x", "$B", "--z", "3"]),  # no expansion in single quotes
    ('TP=${TP:-4}\npython p.py --t $TP --u ${UNSET:-7}', ["--t", "4", "--u", "7"]),
    ('A=(--x 1 "two words")\nA+=(--z 3)\npython p.py "${A[@]}" --s "${A[*]}" --f $A',
     ["--x", "1", "two words", "--z", "3", "--s", "--x 1 two words --z 3", "--f", "--x"]),
    ("E=()\npython p.py \"${E[@]}\" --a 1", ["--a", "1"]),
    ('export X="--x 1"\ndeclare -a ARR=(\n  --l 1 # note (x)\n  $X\n)\npython p.py ${ARR[@]}',
     ["--l", "1", "--x", "1"]),
])
def test_shell_expansion_follows_bash(script, expected):
    from workbench.configs.importer import _shell_tokens

    assert _shell_tokens(script)[0] == expected


def test_unset_shell_variables_are_named():
    imp = import_megatron_args("python pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
                               "$GPT_ARGS ${MORE[@]}")
    assert any(w.startswith("shell variables not set in the script: $GPT_ARGS ${MORE[@]}") for w in imp.warnings)
    assert not [w for w in imp.warnings if "ignored tokens" in w]
    msg = _error(import_megatron_args, "python pretrain_gpt.py --num-layers 4 --tensor-model-parallel-size $TP")
    assert msg == ("--tensor-model-parallel-size $TP: the shell variable is not set in the script (set it before "
                   "the command, or give the number)")


def test_learned_position_table_round_trips_through_the_megatron_command():
    """A learned position table larger than the sequence is exported as --max-position-embeddings and read back:
    the parameter count survives the round trip (the export wrote the sequence length before)."""
    from workbench.catalog import model
    from workbench.configs.megatron import megatron_args
    from workbench.specs import ClusterSpec, ParallelPlan

    m = model("gpt3-125m").replace(max_position_embeddings=4096, seq_length=1024)
    args = megatron_args(m, ClusterSpec(gpu="H100-SXM", gpus_per_node=8),
                         ParallelPlan(world_size=8, engine="megatron", global_batch_size=8))
    assert args[args.index("--max-position-embeddings") + 1] == "4096"
    imported = import_megatron_args(args, world_size=8)
    assert imported.model_fields["max_position_embeddings"] == 4096 and not imported.warnings
    assert imported.to_specs()[0].num_parameters == m.num_parameters
