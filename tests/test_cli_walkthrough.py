"""Regressions found by walking through the command line as a user: each test pins one fixed behaviour."""
from __future__ import annotations

import importlib

import pytest

from workbench import catalog, cli
from workbench.specs import ClusterSpec, ParallelPlan

prepare = importlib.import_module("workbench.runs.prepare")

GIB = 2 ** 30


def _main(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_host_memory_check_refuses_states_beyond_available_memory():
    with pytest.raises(ValueError, match=r"x nproc=8 = 80.0 GiB exceed this machine's available memory 20.0 GiB"):
        prepare.check_host_memory(10 * GIB, nproc=8, available_bytes=20 * GIB)
    prepare.check_host_memory(2 * GIB, nproc=8, available_bytes=20 * GIB)  # fits: nothing raised
    prepare.check_host_memory(10 * GIB, nproc=8, available_bytes=None)  # unknown: nothing checked


def test_model_state_bytes_are_the_estimates_weights_gradients_optimizer():
    model = catalog.model("gpt3-125m")
    cluster = ClusterSpec(gpu="cpu", gpus_per_node=2)
    plan = ParallelPlan(world_size=2, engine="deepspeed", global_batch_size=2, precision="fp32")
    per_rank = prepare.model_state_bytes_per_rank(model, cluster, plan)
    assert 12 * 0.1e9 < per_rank < 20 * 0.2e9  # 12-16 bytes per parameter of a 125 M model


def test_run_of_a_model_beyond_host_memory_is_one_line_before_any_process(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr("workbench.runs.launcher.cuda_available", lambda: False)
    monkeypatch.setattr(prepare, "cuda_available", lambda: False)
    monkeypatch.setattr(prepare, "available_host_bytes", lambda: 16 * GIB)
    started = []
    monkeypatch.setattr("workbench.runs.launcher.start", lambda *a, **k: started.append(a))
    rc, out, err = _main(["run", "--model", "llama3-8b", "--nproc", "2", "--steps", "1"], capsys)
    assert rc == 2 and out == "" and not started
    assert len(err.strip().splitlines()) == 1 and "available memory 16.0 GiB" in err


def test_import_of_a_megatron_command_megatron_would_refuse_is_a_lint_error(capsys):
    rc, out, err = _main(["import", "pretrain_gpt.py --num-layers 40 --hidden-size 5120 --num-attention-heads 40 "
                                    "--tensor-model-parallel-size 3"], capsys)
    assert rc == 1 and "--num-attention-heads 40 is not divisible by --tensor-model-parallel-size 3" in out


def test_megatron_lint_names_each_size_rule():
    from workbench.configs.importer import lint_megatron_fields

    found = lint_megatron_fields({"num_attention_heads": 3, "hidden_size": 100, "num_layers": 5,
                                  "num_query_groups": 2},
                                 {"tensor_parallel": 2, "pipeline_parallel": 2, "micro_batch_size": 3,
                                  "global_batch_size": 8})
    assert [f.path for f in found] == ["--hidden-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                       "--global-batch-size"]
    assert not lint_megatron_fields({"num_attention_heads": 40, "hidden_size": 5120, "num_layers": 40},
                                    {"tensor_parallel": 4, "pipeline_parallel": 2, "micro_batch_size": 1,
                                     "global_batch_size": 64})
    uneven = {"tensor_parallel": 1, "pipeline_parallel": 2, "first_stage_layers": 2}
    assert not lint_megatron_fields({"num_layers": 5}, uneven)


@pytest.mark.parametrize("argv, message", [
    (["estimate", "--model", "gpt3-125m", "--lora-targets", "q"], "--lora-targets q needs --lora-rank R > 0"),
    (["estimate", "--model", "gpt3-125m", "--lora-dropout", "0.1"], "--lora-dropout 0.1 needs --lora-rank R > 0"),
    (["estimate", "--model", "gpt3-125m", "--fp8-recipe", "tensorwise"], "--fp8-recipe tensorwise needs --precision fp8"),
    (["plan", "--model", "gpt3-125m", "--gbs", "8", "--fp8-recipe", "delayed"], "--fp8-recipe delayed needs --precision"),
    (["plan", "--model", "gpt3-125m", "--gbs", "8", "--lora-targets", "q"], "--lora-targets q needs --lora-rank"),
])
def test_a_flag_that_needs_another_is_refused_not_ignored(argv, message, capsys):
    rc, out, err = _main(argv, capsys)
    assert rc == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_planner_explanation_names_ulysses_once_not_as_cp_and_kv_exchange():
    from workbench.planner import explain, search

    model = catalog.model("llama3-8b").replace(seq_length=131072)
    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=2)
    ranked = search(model, cluster, global_batch_size=16, top=400).ranked
    ulysses = next(r for r in ranked if r.plan.is_ulysses)
    megatron_cp = next(r for r in ranked if r.plan.context_parallel > 1 and not r.plan.is_ulysses)
    for a, b in ((ulysses, megatron_cp), (megatron_cp, ulysses)):
        text = explain(a, b, model=model, cluster=cluster)
        differs = text.splitlines()[1]
        assert "CP exchange" not in differs and f"Ulysses {a.plan.ulysses} vs {b.plan.ulysses}" in differs
        assert f"CP {a.plan.context_parallel if not a.plan.is_ulysses else 1} vs" in differs
        assert "Ulysses=" not in text or "DeepSpeed-Ulysses all-to-all" in text or "K/V exchange" in text


def test_calibrate_progress_keeps_the_digits_of_small_cpu_rates(monkeypatch):
    from workbench.calibrate import CalibrationSettings, calibrate, measure

    monkeypatch.setattr(measure, "measure_copy_gb_per_s", lambda *a, **k: 0.267)
    monkeypatch.setattr(measure, "measure_cpu_adam", lambda *a, **k: {"implementation": "torch", "threads": 2,
                                                                       "params_per_second": 1.76e6,
                                                                       "params_per_second_per_thread": 0.88e6})
    lines = []
    calibrate(CalibrationSettings(name="t", quick=True, nproc=1, parts=("memory_bandwidth", "cpu_adam")),
              progress=lines.append)
    text = "\n".join(lines)
    assert "device memory copy: 0.267 GB/s" in text and "0.00176 G params/s" in text


def test_import_panel_text_box_fits_inside_its_panel():
    from widgets.import_panel import ImportPanel

    width = ImportPanel().text.layout.width
    assert "%" in width  # a fixed 340 px box overflowed the 370 px panel (its margins and padding) and lost its edge


def test_sweep_with_bad_workers_is_one_line_without_a_progress_bar(capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rc, out, err = _main(["nb", "sweep", str(root / "examples" / "parameter_counts.ipynb"), "--grid",
                          str(root / "examples" / "sweep_grid.yaml"), "--workers", "0"], capsys)
    assert rc == 2 and out == "" and err.strip().splitlines() == ["workbench: error: workers=0 must be >= 1"]


def test_text_commands_send_library_log_lines_to_stderr(capsys):
    import logging
    import sys

    logger = logging.getLogger("workbench-test-chatter")
    logger.propagate = False
    with cli.logs_to_stderr():
        handler = logging.StreamHandler(stream=sys.stdout)  # as DeepSpeed binds its logger at import
        logger.addHandler(handler)
        try:
            logger.warning("Setting accelerator to CPU")
            print("kind: deepspeed")
        finally:
            logger.removeHandler(handler)
    out, err = capsys.readouterr()
    assert out == "kind: deepspeed\n" and "Setting accelerator to CPU" in err


def test_runs_names_its_action_like_nb_and_jobs(capsys):
    rc, out, err = _main(["runs"], capsys)
    assert rc == 2 and "required: ACTION" in err


def test_zero3_small_group_note_counts_the_ulysses_ranks_zero_shards_over():
    from workbench.memory import memory_notes

    model = catalog.model("llama3-8b").replace(seq_length=131072)
    ulysses = ParallelPlan(world_size=16, engine="deepspeed", zero_stage=3, ulysses=8, recompute="full",
                           global_batch_size=16)
    assert ulysses.data_parallel == 2
    assert not any("at data parallel <= 2" in n for n in memory_notes(model, ulysses))  # ZeRO-3 over 16 ranks
    two = ParallelPlan(world_size=2, engine="deepspeed", zero_stage=3, global_batch_size=2)
    assert any("at data parallel <= 2" in n for n in memory_notes(model, two))
    # with the optimizer (and its fp32 gradient partition) on the host that comparison does not hold
    for offload in (dict(offload_optimizer="cpu"), dict(offload_optimizer="cpu", offload_params="cpu")):
        assert not any("at data parallel <= 2" in n for n in memory_notes(model, two.replace(**offload)))


def test_reduce_bucket_note_only_where_the_peak_holds_the_buckets(capsys):
    """ZeRO-1/2's buckets live through the backward: a peak in the optimizer step (an 8B model's Adam states on one
    GPU) holds none, so the CLI gives no "why" about them; a 1.3B model peaking in the backward does."""
    rc, out, _ = _main(["estimate", "--model", "llama3-8b", "--gpu", "H200", "--gpus-per-node", "1", "--zero", "2",
                        "--gbs", "1"], capsys)
    assert "peak in optimizer step" in out and "reduce_bucket_size" not in out
    rc, out, _ = _main(["estimate", "--model", "gpt3-1.3b", "--gpu", "H200", "--gpus-per-node", "1", "--zero", "1",
                        "--gbs", "8"], capsys)
    assert "peak in backward" in out and "why: ZeRO-1 allocates its gradient reduce buckets" in out


def test_estimate_plan_line_says_how_states_are_sharded_and_offloaded(capsys):
    rc, out, _ = _main(["estimate", "--model", "guide-13b", "--zero", "3", "--offload-optimizer", "cpu",
                        "--offload-params", "cpu"], capsys)
    plan_line = next(line for line in out.splitlines() if line.startswith("plan "))
    assert rc == 0 and "ZeRO-3, optimizer offloaded to cpu, parameters offloaded to cpu" in plan_line
    rc, out, _ = _main(["estimate", "--model", "guide-13b", "--engine", "megatron", "--tp", "8",
                        "--distributed-optimizer"], capsys)
    plan_line = next(line for line in out.splitlines() if line.startswith("plan "))
    assert rc == 0 and "distributed optimizer" in plan_line and "ZeRO" not in plan_line


def test_oom_ladder_says_when_host_memory_not_the_gpu_is_what_runs_out(capsys):
    from workbench.advisor import advise

    model = catalog.model("llama3-70b")
    cluster = ClusterSpec(gpu="A100-80GB", gpus_per_node=8, host_memory_gib_per_node=512)
    plan = ParallelPlan(world_size=8, engine="deepspeed", zero_stage=2, micro_batch_size=4, global_batch_size=128)
    last = advise(model, cluster, plan).oom_ladder[-1]
    assert not last.fits and last.limit.startswith("host memory:") and "per node of 512.0 GiB" in last.limit
    rc, out, _ = _main(["advise", "--model", "llama3-70b", "--gpu", "A100-80GB", "--host-mem-gib", "512", "--zero",
                        "2", "--mbs", "4", "--gbs", "128"], capsys)
    assert "runs out of host memory" in out and "does not fit (host memory:" in out


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("machine"), "profile lacks the field machine"),
    (lambda d: d.update(name=5), "name=5 must be a string"),
    (lambda d: d["gemm"]["bf16"].update(peak_tflops="x"), "gemm.bf16.peak_tflops='x' must be a number"),
    (lambda d: d["memory"].update(context_bytes="x"), "memory.context_bytes='x' must be a number"),
    (lambda d: d["collectives"]["intra_node"]["fit"]["all_reduce"].update(gb_per_s=None),
     "collectives.intra_node.fit.all_reduce.gb_per_s=None must be a number"),
])
def test_a_hand_edited_profile_is_one_named_error(edit, message, tmp_path, capsys):
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "workbench" / "catalog" / "profiles" / "h200.json")
                      .read_text())
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    rc, out, err = _main(["estimate", "--model", "gpt3-125m", "--gpu", "H200", "--profile", str(path)], capsys)
    assert rc == 2 and message in err and "unexpected" not in err


@pytest.mark.parametrize("field, value, message", [
    ("timeout", None, "timeout=None must be a number"),
    ("retries", 1.5, "retries=1.5 must be an integer"),
    ("max_concurrency", [], "max_concurrency=[] must be an integer"),
    ("name", 1.5, "name=1.5 must be a string"),
])
def test_jobs_file_with_a_wrong_type_is_one_named_error(field, value, message, tmp_path, capsys):
    import shutil
    from pathlib import Path

    import yaml

    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "parameter_counts.ipynb", tmp_path)
    job = {"name": "j", "notebook": "parameter_counts.ipynb", "cron": "15 2 * * *", field: value}
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump({"jobs": [job]}))
    rc, out, err = _main(["jobs", "list", "--jobs", str(tmp_path / "jobs.yaml")], capsys)
    assert rc == 2 and message in err and "unexpected" not in err


@pytest.mark.parametrize("field, value, message", [
    ("architectures", 5, "architectures=5 must be a list of class names"),
    ("torch_dtype", "x", "LlamaConfig rejects it"),
    ("num_attention_heads", 0, "num_attention_heads=0 must be >= 1"),
    ("num_attention_heads", -4, "num_attention_heads=-4 must be >= 1"),
])
def test_hf_config_with_a_value_transformers_trips_on_is_one_named_error(field, value, message, tmp_path, capsys):
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "hf" / "llama3-8b" / "config.json").read_text())
    data[field] = value
    (tmp_path / "config.json").write_text(json.dumps(data))
    rc, out, err = _main(["estimate", "--model", f"hf:{tmp_path}"], capsys)
    assert rc == 2 and message in err and "unexpected" not in err


@pytest.mark.parametrize("kind", ["deepspeed", "torchrun"])
def test_exported_launch_script_expands_the_megatron_checkout_variable(kind, tmp_path):
    import subprocess

    from workbench.configs import launch

    cluster = ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=2)
    command = ["$MEGATRON_LM/pretrain_gpt.py", "--data-path", "$DATA_PATH", "--num-layers", "2"]
    build = launch.deepspeed_launch_script if kind == "deepspeed" else launch.torchrun_script
    script = tmp_path / "launch.sh"
    script.write_text(build(cluster, command, launcher=["echo"]))  # echo prints what the launcher would get
    env = {"PATH": "/usr/bin:/bin", "MEGATRON_LM": "/opt/megatron", "DATA_PATH": "/data/corpus"}
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, check=True).stdout
    assert "/opt/megatron/pretrain_gpt.py" in out and "--data-path /data/corpus" in out and "$MEGATRON_LM" not in out


def test_configs_view_shows_scripts_in_a_fixed_width_font():
    from widgets.app import Workbench

    app = Workbench()
    view = next(v for v in app.views if type(v).__name__ == "ConfigView")
    view.show(app.state)  # views draw when their tab opens
    assert "<pre" in view.text.value and "monospace" in view.text.value


def test_zero3_hooks_are_their_own_term_in_the_table_the_json_and_advise(capsys):
    """A one-GPU ZeRO-3 plan moves no data-parallel traffic: its per-module hooks show as ``zero3_hooks`` in the
    estimate's time line, ``--json``'s breakdown and advise's throughput list, never as ``dp_comm``."""
    import json

    argv = ["--model", "gpt3-125m", "--attention", "flash", "--gpu", "H200", "--gpus-per-node", "1", "--engine",
            "deepspeed", "--zero", "3", "--gbs", "8"]
    rc, out, _ = _main(["estimate", *argv, "--json"], capsys)
    b = json.loads(out)["time"]["breakdown"]
    assert rc == 0 and b["zero3_hooks"] > 0 and b["dp_comm"] == 0.0
    rc, out, _ = _main(["estimate", *argv], capsys)
    lines = out.splitlines()
    terms_line = lines[next(i for i, x in enumerate(lines) if x.startswith("time ")) + 1]
    assert rc == 0 and f"zero3_hooks {b['zero3_hooks']:.3f}s" in terms_line and "dp_comm" not in terms_line
    rc, out, _ = _main(["advise", *argv], capsys)
    throughput = out[out.index("throughput: exposed time"):out.index("\ndiagnose")]
    assert rc == 0 and "  zero3_hooks " in throughput and "dp_comm" not in throughput
    # ZeRO-2 on the same GPU has no hooks: the key stays, at zero, and the time line leaves it out
    rc, out, _ = _main(["estimate", *argv[:-4], "--zero", "2", "--gbs", "8", "--json"], capsys)
    assert rc == 0 and json.loads(out)["time"]["breakdown"]["zero3_hooks"] == 0.0
