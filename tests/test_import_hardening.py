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
