"""Bad input at every public entry gets one clear ``ValueError`` naming the field and the value; the CLI turns any
exception into one line and exit status 2; ``--json`` prints only JSON on stdout.

The property-based part (hypothesis) runs with a fixed seed (``derandomize=True``) and a small example budget.
"""
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import catalog, cli
from workbench.estimate import estimate
from workbench.planner import search
from workbench.specs import ClusterSpec, GPUSpec, ModelSpec, ParallelPlan, validate

ROOT = Path(__file__).resolve().parents[1]
H100 = catalog.gpu("H100-SXM")
SMALL = dict(num_layers=4, hidden_size=256, num_attention_heads=4, vocab_size=1000, seq_length=128)

PROPERTY = settings(derandomize=True, max_examples=120, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

BAD_VALUES = [None, True, False, 0, -1, 2.7, 2.0, math.inf, -math.inf, math.nan, 1e308, 2**63, "8", [8]]


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# Specs: named, explicit errors
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", [None, ["H100-SXM"], 3, {"name": "H100-SXM"}])
def test_cluster_gpu_must_be_a_name_or_a_gpuspec(gpu):
    msg = _error(ClusterSpec, gpu=gpu)
    assert msg.startswith("gpu=") and "GPUSpec" in msg


@pytest.mark.parametrize("field", ["num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"])
@pytest.mark.parametrize("value", [math.inf, math.nan, 1e308, 2**63, 2.7, True, "8", None])
def test_model_integer_fields_refuse_non_integers_and_huge_values(field, value):
    msg = _error(ModelSpec, **{**SMALL, field: value})
    assert msg.startswith(f"{field}=")


@pytest.mark.parametrize("field", ["gpus_per_node", "num_nodes"])
@pytest.mark.parametrize("value", [0, 2.0, math.inf, 2**63, False])
def test_cluster_counts(field, value):
    assert _error(ClusterSpec, gpu=H100, **{field: value}).startswith(f"{field}=")


@pytest.mark.parametrize("field", ["intra_node_gb_per_s", "inter_node_gb_per_s", "host_memory_gib_per_node"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e308, 0, -5, True, "100"])
def test_cluster_bandwidths_and_memory_are_finite_and_positive(field, value):
    msg = _error(ClusterSpec, gpu=H100, **{field: value})
    assert msg.startswith(f"{field}=")


def test_gpu_spec_numbers_are_checked():
    fields = {k: getattr(H100, k) for k in ("name", "vendor", "memory_gib", "peak_tflops", "hbm_gb_per_s",
                                            "intra_node_gb_per_s", "inter_node_gb_per_s", "host_link_gb_per_s",
                                            "source")}
    assert _error(GPUSpec, **{**fields, "memory_gib": math.inf}).startswith("memory_gib=inf")
    assert _error(GPUSpec, **{**fields, "hbm_gb_per_s": math.nan}).startswith("hbm_gb_per_s=nan")
    assert "peak_tflops['bf16']" in _error(GPUSpec, **{**fields, "peak_tflops": {"bf16": math.inf}})


@pytest.mark.parametrize("field", ["sequence_parallel", "distributed_optimizer", "fused_kernels", "overlap_comm"])
@pytest.mark.parametrize("value", [2, 1, 0, "yes", None])
def test_plan_booleans_are_type_checked(field, value):
    if value is None and field in ("fused_kernels", "overlap_comm"):  # None: deprecated-unset / engine default
        assert ParallelPlan(world_size=8, **{field: value}).fused_kernels is None
        return
    assert _error(ParallelPlan, world_size=8, **{field: value}) == f"{field}={value!r} must be True or False"


@pytest.mark.parametrize("field", ["add_bias_linear", "tied_embeddings"])
def test_model_booleans_are_type_checked(field):
    assert _error(ModelSpec, **{**SMALL, field: 2}) == f"{field}=2 must be True or False"


@pytest.mark.parametrize("value", [2.7, 2.0, True, "2", -1, 4, None])
def test_zero_stage_is_refused_not_truncated(value):
    assert _error(ParallelPlan, world_size=8, zero_stage=value) == f"zero_stage={value!r} must be 0, 1, 2 or 3"


@pytest.mark.parametrize("field", ["micro_batch_size", "global_batch_size", "tensor_parallel", "world_size"])
@pytest.mark.parametrize("value", [math.inf, 1e308, 2**63, 0, 1.5])
def test_plan_sizes(field, value):
    assert _error(ParallelPlan, **{"world_size": 8, field: value}).startswith(f"{field}=")


@pytest.mark.parametrize("field", ["hidden_dropout", "attention_dropout"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 1.0, -0.1, "0.1", None])
def test_dropouts(field, value):
    assert _error(ModelSpec, **{**SMALL, field: value}).startswith(f"{field}=")


def test_enums_refuse_non_strings():
    assert _error(ParallelPlan, world_size=8, recompute=None).startswith("recompute=None must be one of")
    assert _error(ParallelPlan, world_size=8, engine=3).startswith("engine=3 must be one of")


def test_estimate_and_validate_name_a_wrong_argument():
    model, cluster, plan = ModelSpec(**SMALL), ClusterSpec(gpu=H100), ParallelPlan(world_size=8)
    assert _error(estimate, None, cluster, plan).startswith("model=None must be a ModelSpec")
    assert _error(estimate, model, "H100-SXM", plan).startswith("cluster='H100-SXM' must be a ClusterSpec")
    assert _error(validate, model, cluster, {"world_size": 8}).startswith("plan=")
    assert _error(estimate, model, cluster, plan, overlap_comm=2).startswith("overlap_comm=2")


def test_planner_refuses_bad_specs():
    with pytest.raises(ValueError, match="must be a ModelSpec"):
        search(None, ClusterSpec(gpu=H100), global_batch_size=8)


def test_huge_but_valid_sizes_estimate_to_finite_numbers():
    model = ModelSpec(num_layers=10_000, hidden_size=2**20, num_attention_heads=2**12, vocab_size=2**24,
                      seq_length=2**20)
    cluster = ClusterSpec(gpu=H100, gpus_per_node=8, num_nodes=2**14)
    plan = ParallelPlan(world_size=cluster.world_size, engine="megatron", tensor_parallel=8, pipeline_parallel=16,
                        micro_batch_size=2**10, global_batch_size=2**30)
    est = estimate(model, cluster, plan)
    assert math.isfinite(est.memory.per_gpu_peak_bytes) and math.isfinite(est.time.step_seconds)


# ---------------------------------------------------------------------------------------------------------------
# Property: random field values into the specs and estimate() give a result or one named ValueError
# ---------------------------------------------------------------------------------------------------------------
_ANY = st.one_of(st.sampled_from(BAD_VALUES), st.integers(min_value=-4, max_value=2**70),
                 st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), st.text(max_size=4))
_SMALL_INT = st.integers(min_value=1, max_value=64)
_FIELD = re.compile(r"^(model|cluster|plan|gpu|[a-z_]+(\[[^\]]*\])?\b.*=|.*\b[a-z_]+=)")


def _check_outcome(build):
    try:
        model, cluster, plan = build()
        est = estimate(model, cluster, plan)
    except ValueError as exc:
        msg = str(exc)
        assert msg and "=" in msg, msg  # every error names a field and its value
        assert _FIELD.match(msg), msg
        return None
    assert math.isfinite(est.memory.per_gpu_peak_bytes) and est.memory.per_gpu_peak_bytes > 0
    assert math.isfinite(est.time.step_seconds) and est.time.step_seconds > 0
    return est


@PROPERTY
@given(field=st.sampled_from(["num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "head_dim",
                              "ffn_hidden_size", "vocab_size", "seq_length", "hidden_dropout", "attention_dropout",
                              "num_experts", "moe_top_k", "add_bias_linear", "tied_embeddings", "activation"]),
       value=_ANY)
def test_property_model_fields(field, value):
    _check_outcome(lambda: (ModelSpec(**{**SMALL, field: value}), ClusterSpec(gpu=H100),
                            ParallelPlan(world_size=8)))


@PROPERTY
@given(field=st.sampled_from(["gpu", "gpus_per_node", "num_nodes", "intra_node_gb_per_s", "inter_node_gb_per_s",
                              "host_memory_gib_per_node", "nvme_gib_per_node"]),
       value=_ANY)
def test_property_cluster_fields(field, value):
    def build():
        cluster = ClusterSpec(**{"gpu": H100, field: value})
        return ModelSpec(**SMALL), cluster, ParallelPlan(world_size=cluster.world_size)

    _check_outcome(build)


@PROPERTY
@given(field=st.sampled_from(["tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel",
                              "sequence_parallel", "zero_stage", "distributed_optimizer", "recompute",
                              "recompute_layers", "micro_batch_size", "global_batch_size", "precision",
                              "adam", "overlap_comm", "engine"]),
       value=_ANY)
def test_property_plan_fields(field, value):
    _check_outcome(lambda: (ModelSpec(**SMALL), ClusterSpec(gpu=H100, num_nodes=2),
                            ParallelPlan(**{"world_size": 16, "engine": "megatron", field: value})))


@PROPERTY
@given(layers=_SMALL_INT, heads=st.sampled_from([1, 2, 4, 8]), width=st.integers(1, 64), seq=st.integers(1, 4096),
       nodes=st.integers(1, 64), gpn=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4, 8]),
       pp=st.sampled_from([1, 2, 4]), mbs=st.integers(1, 16), zero=st.integers(0, 3),
       engine=st.sampled_from(["deepspeed", "megatron", "megatron-deepspeed"]),
       bandwidth=st.one_of(st.floats(min_value=1e-3, max_value=1e7), st.just(math.inf), st.just(math.nan)))
def test_property_combinations(layers, heads, width, seq, nodes, gpn, tp, pp, mbs, zero, engine, bandwidth):
    _check_outcome(lambda: (ModelSpec(num_layers=layers, hidden_size=heads * width, num_attention_heads=heads,
                                      seq_length=seq, vocab_size=1000),
                            ClusterSpec(gpu=H100, gpus_per_node=gpn, num_nodes=nodes, inter_node_gb_per_s=bandwidth),
                            ParallelPlan(world_size=gpn * nodes, engine=engine, tensor_parallel=tp,
                                         pipeline_parallel=pp, micro_batch_size=mbs, zero_stage=zero)))


# ---------------------------------------------------------------------------------------------------------------
# CLI: never a traceback; --json is only JSON
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def estimate_only(monkeypatch):
    monkeypatch.setattr(cli, "COMMANDS", ["estimate"])
    monkeypatch.delenv("WORKBENCH_DEBUG", raising=False)
    return cli.main


@pytest.mark.parametrize("argv, expected", [
    (["--nodes", "100000000"], "num_nodes=100000000 is larger than the largest supported value"),
    (["--hidden-dropout", "nan"], "hidden_dropout=nan must be a finite number"),
    (["--inter-gbps", "inf"], "inter_node_gb_per_s=inf must be a finite number"),
    (["--layers", "0"], "num_layers=0 must be >= 1"),
])
def test_cli_bad_numbers_one_line_exit_2(estimate_only, capsys, argv, expected):
    assert estimate_only(["estimate", "--model", "gpt3-1.3b", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and expected in err and err.startswith("workbench: error: ")


def test_cli_topk_keeps_a_catalog_models_experts(estimate_only, capsys):
    assert estimate_only(["estimate", "--model", "mixtral-8x7b", "--topk", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["name"] == "mixtral-8x7b"
    assert estimate_only(["estimate", "--model", "mixtral-8x7b", "--topk", "9"]) == 2
    assert capsys.readouterr().err == "workbench: error: moe_top_k=9 exceeds num_experts=8\n"
    assert estimate_only(["estimate", "--model", "gpt3-1.3b", "--topk", "2"]) == 2
    assert capsys.readouterr().err == "workbench: error: --topk 2 needs --experts (model gpt3-1.3b is dense)\n"


def test_cli_broken_hf_config_names_the_place(estimate_only, capsys, tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text('{"model_type": "llama",\n "hidden_size": }')
    assert estimate_only(["estimate", "--model", f"hf:{broken}"]) == 2
    err = capsys.readouterr().err
    assert err == f"workbench: error: {broken}: not valid JSON (Expecting value at line 2 column 17)\n"


def test_cli_unknown_flag_points_at_the_subcommands_help(estimate_only, capsys):
    with pytest.raises(SystemExit) as exit_info:
        estimate_only(["estimate", "--model", "gpt3-1.3b", "--price", "3"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("workbench estimate: error: unrecognized arguments: --price 3 "
                                       "(see `workbench estimate --help`)\n")


def test_cli_export_out_must_be_a_folder(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "COMMANDS", ["export"])
    afile = tmp_path / "ds_config.json"
    afile.write_text("{}")
    assert cli.main(["export", "deepspeed", "--model", "gpt3-1.3b", "--out", str(afile)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"workbench: error: --out {afile} is a file; export writes its files into a folder\n"


def test_cli_advise_unreadable_log_names_the_flag(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "COMMANDS", ["advise"])
    missing = tmp_path / "train.log"
    assert cli.main(["advise", "--model", "gpt3-1.3b", "--log", str(missing)]) == 2
    assert capsys.readouterr().err == f"workbench: error: --log {missing}: cannot read it (No such file or directory)\n"


def test_cli_unexpected_exception_is_one_line_unless_debugging(estimate_only, capsys, monkeypatch):
    import workbench.commands.estimate as command

    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(command, "run", broken)
    assert estimate_only(["estimate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ZeroDivisionError: division by zero" in err and "WORKBENCH_DEBUG=1" in err
    monkeypatch.setenv("WORKBENCH_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        estimate_only(["estimate"])


def test_cli_deep_recursion_is_one_line(estimate_only, capsys, monkeypatch):
    import workbench.commands.estimate as command

    def recurse(args):
        return recurse(args)

    monkeypatch.setattr(command, "run", recurse)
    assert estimate_only(["estimate"]) == 2
    assert capsys.readouterr().err == "workbench: error: the input is nested too deeply to read\n"


def test_cli_json_payload_only_on_stdout(estimate_only, capsys, monkeypatch):
    import workbench.commands.estimate as command

    real = command.run

    def chatty(args):
        print("a library's chatter")
        return real(args)

    monkeypatch.setattr(command, "run", chatty)
    assert estimate_only(["estimate", "--model", "gpt3-1.3b", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["model"]["name"] == "gpt3-1.3b"
    assert "a library's chatter" in err


def test_import_json_through_a_pipe_is_json(tmp_path):
    """The first DeepSpeed import prints an accelerator warning on file descriptor 1; it must land on stderr."""
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    proc = subprocess.run([sys.executable, "-m", "workbench", "import", str(cfg), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "deepspeed" and data["plan"]["zero_stage"] == 2


@pytest.mark.parametrize("entry", ["workbench", "workbench.cli"])
def test_json_through_a_pipe_whichever_module_runs_the_cli(entry):
    """``python -m workbench.cli`` runs cli.py as ``__main__``, a second copy of the module: its payload stream must
    still be the one the commands print to (it was stderr there)."""
    proc = subprocess.run([sys.executable, "-m", entry, "estimate", "--model", "gpt3-125m", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["name"] == "gpt3-125m"
    assert '"model"' not in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# Exporters
# ---------------------------------------------------------------------------------------------------------------
def test_exporters_name_a_wrong_argument():
    from workbench.configs import (build_ds_config, deepspeed_launch_script, hostfile, hybrid_args,
                                   hybrid_ds_config, megatron_args, slurm_script, torchrun_script)

    model, cluster = ModelSpec(**SMALL), ClusterSpec(gpu=H100)
    for fn in (build_ds_config, megatron_args, hybrid_args, hybrid_ds_config):
        assert _error(fn, model, cluster, None).startswith("plan=None must be a ParallelPlan")
        assert _error(fn, {"num_layers": 2}, cluster, ParallelPlan(world_size=8)).startswith("model=")
    for fn in (deepspeed_launch_script, torchrun_script, slurm_script):
        assert _error(fn, "H100-SXM", ["python", "x.py"]).startswith("cluster='H100-SXM' must be a ClusterSpec")
    assert "must be a list of host names" in _error(hostfile, ClusterSpec(gpu=H100, num_nodes=2), "node0,node1")
    assert "more than a hostfile is written for" in _error(hostfile, ClusterSpec(gpu=H100, num_nodes=2**20))


@pytest.mark.parametrize("field, value, expected", [
    ("betas", 3, "betas=3 must be two numbers"), ("betas", (0.9, math.nan), "betas[1]=nan must be a finite"),
    ("lr", math.inf, "lr=inf must be a finite number"), ("lr", 0, "lr=0 must be > 0"),
    ("train_iters", 1.5, "train_iters=1.5 must be an integer"),
    ("initial_scale_power", 1000, "initial_scale_power=1000 is larger"), ("reduce_bucket_size", 2**70, "larger"),
    ("contiguous_gradients", 1, "contiguous_gradients=1 must be True or False"),
    ("nvme_path", None, "nvme_path=None must be"),
])
def test_deepspeed_options_are_checked(field, value, expected):
    from workbench.configs import DeepSpeedOptions

    assert expected in _error(DeepSpeedOptions, **{field: value})


def test_enum_spellings_share_one_parser():
    from workbench.specs import AttentionImpl, CPCommType

    assert AttentionImpl.parse(" SDPA ", "attention") is AttentionImpl.FLASH
    assert AttentionImpl.parse("Fused", "attention") is AttentionImpl.FUSED_SOFTMAX
    assert CPCommType.parse("Ring", "cp_comm_type") is CPCommType.P2P
    assert CPCommType.parse(" allgather", "cp_comm_type") is CPCommType.ALL_GATHER
    with pytest.raises(ValueError, match=r"cp_comm_type='ring2' is not one of: p2p, a2a, all_gather, a2a\+p2p"):
        CPCommType.parse("ring2", "cp_comm_type")
    with pytest.raises(ValueError, match=r"attention=3 must be one of"):
        AttentionImpl.parse(3, "attention")
