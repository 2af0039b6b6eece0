"""Every notebook runs headless under papermill with small parameters; the numbers it records are checked.

Notebooks are committed without outputs; each records its key results with ``workbench.nbrecord.record``. A failing
cell fails the test with that cell's error. The kernel is ``python3`` from this environment (the Makefile installs
it with ``ipykernel install --sys-prefix``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench import catalog
from workbench.estimate import estimate
from workbench.nbrecord import read_records
from workbench.specs import ClusterSpec, ParallelPlan

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
GIB = 2**30


def run_notebook_at(path: Path, parameters: dict, tmp_path: Path, monkeypatch) -> dict:
    """Execute a notebook with papermill and return its recorded ``{name: value}``; a failing cell fails the test
    with that cell's number, error and traceback."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"executed-{path.name}"
    try:
        for attempt in (1, 2):
            try:
                papermill.execute_notebook(str(path), str(out), parameters=parameters, kernel_name="python3",
                                           cwd=str(path.parent), progress_bar=False, log_output=False,
                                           execution_timeout=300)
                break
            except RuntimeError as exc:
                # jupyter_client picks free ports, then the kernel binds them: another process can take one in
                # between ("Address already in use"), and the kernel dies before any cell ran. Start it once more.
                if attempt == 2 or "Kernel died before replying to kernel_info" not in str(exc):
                    raise
    except PapermillExecutionError as exc:
        trace = "\n".join(exc.traceback[-12:]) if exc.traceback else ""
        pytest.fail(f"{path.name}: cell {exc.cell_index} (execution {exc.exec_count}) failed: {exc.ename}: "
                    f"{exc.evalue}\n{trace}", pytrace=False)
    return read_records(out)


def run_notebook(name: str, parameters: dict, tmp_path: Path, monkeypatch) -> dict:
    """Execute ``notebooks/<name>``."""
    return run_notebook_at(NOTEBOOKS / name, parameters, tmp_path, monkeypatch)


def test_notebooks_are_committed_without_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, f"{path.name} has outputs"
        ids = [c.get("id") for c in nb["cells"]]  # nbformat 4.5 requires a unique id on every cell
        assert None not in ids and len(set(ids)) == len(ids), f"{path.name}: a cell without an id, or a repeated id"
        tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
        if path.name != "dashboard.ipynb":
            assert len(tagged) == 1, f"{path.name} needs exactly one cell tagged 'parameters'"
            for line in "".join(tagged[0]["source"]).splitlines():
                if line.strip():
                    assert ":" in line and "=" in line and "#" in line, f"{path.name}: '{line}' is not " \
                                                                         "'name: type = default  # help'"


def _estimate(model, gpu, gpus_per_node, nodes, flash=False, **plan):
    cluster = ClusterSpec(gpu=catalog.gpu(gpu), gpus_per_node=gpus_per_node, num_nodes=nodes)
    spec = catalog.model(model, **({"attention": "flash"} if flash else {}))
    return estimate(spec, cluster, ParallelPlan(world_size=cluster.world_size, **plan))


@pytest.mark.slow
def test_quickstart(tmp_path, monkeypatch):
    params = dict(model="gpt3-1.3b", gpu="A100-80GB", gpus_per_node=4, nodes=1, engine="megatron",
                  tensor_parallel=2, pipeline_parallel=2, micro_batch_size=2, global_batch_size=16,
                  precision="bf16")
    rec = run_notebook("quickstart.ipynb", params, tmp_path, monkeypatch)
    expected = _estimate("gpt3-1.3b", "A100-80GB", 4, 1, engine="megatron", tensor_parallel=2, pipeline_parallel=2,
                         micro_batch_size=2, global_batch_size=16, precision="bf16").memory
    assert rec["parameters"] == catalog.model("gpt3-1.3b").num_parameters
    assert rec["data_parallel"] == 1 and rec["num_stages"] == 2
    assert rec["per_gpu_peak_bytes"] == expected.per_gpu_peak_bytes
    assert rec["app_peak_bytes"] == expected.per_gpu_peak_bytes  # the widget app shows the same plan
    assert rec["breakdown"] == expected.breakdown.as_dict()
    assert rec["fits"] is True
    assert 1 * GIB < rec["per_gpu_peak_bytes"] < 80 * GIB
    # the A100 has no FP8 tensor cores: the FP8 section prices the same plan with flash attention on an H100
    assert rec["fp8_gpu"] == "H100-SXM"
    fp8 = _estimate("gpt3-1.3b", "H100-SXM", 4, 1, engine="megatron", tensor_parallel=2, pipeline_parallel=2,
                    micro_batch_size=2, global_batch_size=16, precision="fp8", flash=True)
    assert rec["fp8_step_seconds"] == fp8.time.step_seconds
    assert rec["fp8_peak_bytes"] == fp8.memory.per_gpu_peak_bytes
    assert rec["fp8_step_seconds"] < rec["bf16_flash_step_seconds"]


@pytest.mark.slow
def test_zero_stages(tmp_path, monkeypatch):
    rec = run_notebook("zero_stages.ipynb", dict(model="gpt3-350m", gpu="A100-40GB", dp_values=[1, 4, 16]),
                       tmp_path, monkeypatch)
    assert rec["dp_values"] == [1, 4, 16]
    states = rec["model_state_bytes_by_stage"]
    # With one rank nothing is partitioned; at every N > 1 each stage holds less than the one before.
    for i, dp in enumerate(rec["dp_values"]):
        if dp > 1:
            assert states["0"][i] > states["1"][i] > states["2"][i] > states["3"][i]
    # ZeRO-3 model states shrink about as 1/N (16 -> 4 ranks: about 4x less).
    assert 3.0 < states["3"][1] / states["3"][2] < 4.5
    # ZeRO-0 keeps a full replica: the same model states at every N.
    assert len(set(states["0"])) == 1
    expected = _estimate("gpt3-350m", "A100-40GB", 8, 2, engine="deepspeed", zero_stage=3, recompute="full")
    assert rec["peak_bytes_by_stage"]["3"][2] == expected.memory.per_gpu_peak_bytes
    # offload at ZeRO-3 on one node: the same GPU peak to the CPU or the NVMe; the NVMe's swaps on top of the CPU's
    # step, and states on the drive only then
    step, peak, nvme = rec["offload_step_seconds"], rec["offload_peak_bytes"], rec["offload_nvme_bytes_per_node"]
    assert peak["cpu"] == peak["nvme"]
    assert step["none"] < step["cpu"] < step["nvme"]
    assert nvme["nvme"] > 0 and nvme["cpu"] == nvme["none"] == 0


@pytest.mark.slow
def test_tensor_pipeline(tmp_path, monkeypatch):
    rec = run_notebook("tensor_pipeline.ipynb", dict(model="gpt3-1.3b", tp_values=[1, 2, 4], pipeline_parallel=2,
                                                     num_microbatches=4, virtual_pipeline=2, cp_gpus=4,
                                                     cp_seq_lengths=[8192, 32768], cp_sizes=[1, 4],
                                                     split_seq=32768),
                       tmp_path, monkeypatch)
    per_rank = rec["layer_params_per_rank"]
    # each doubling of t roughly halves a layer's parameters per GPU (norms and row biases stay whole)
    assert 1.9 < per_rank[0] / per_rank[1] < 2.0 and 1.9 < per_rank[1] / per_rank[2] < 2.0
    w = rec["weight_bytes_per_gpu"]
    assert w[0] > w[1] > w[2]
    # bubble: GPipe and 1F1B (p-1)/m = 1/4, interleaved (p-1)/(v*m) = 1/8, simulated = analytic without p2p time
    assert rec["bubble_fraction"]["gpipe"] == pytest.approx(0.25)
    assert rec["bubble_fraction"]["1f1b"] == pytest.approx(0.25)
    assert rec["bubble_fraction"]["interleaved"] == pytest.approx(0.125)
    assert rec["analytic_bubble"] == pytest.approx(rec["bubble_fraction"])
    # 1F1B keeps p micro-batches alive on the first stage, GPipe all m
    assert rec["peak_in_flight_stage0"]["1f1b"] == 2 and rec["peak_in_flight_stage0"]["gpipe"] == 4
    # unequal stages 2/4/4/2 at m = 4 (a layer's forward 1, backward 2): the schedule takes 68, the closed form the
    # same, the textbook (m + p - 1) x the slowest stage 7 x 12 = 84
    steps = rec["uneven_step"]
    assert steps["workbench (stages as they are)"] == pytest.approx(steps["event simulation"])
    assert steps["event simulation"] == pytest.approx(68.0)
    assert steps["textbook (m + p − 1) × slowest stage"] == pytest.approx(84.0)
    # long context: CP=c keeps 1/c of the activations; TP with SP splits them as much but also splits the weights
    act, peak = rec["cp_activations_gib"], rec["cp_peak_gib"]
    assert act["32768/TP1 CP4"] == pytest.approx(act["32768/TP1"] / 4, rel=0.02)
    assert act["8192/TP1"] < act["32768/TP1"] and peak["32768/TP4 SP"] < peak["32768/TP1 CP4"]
    assert rec["cp_exposed_seconds"]["32768/TP1 CP4"] == 0.0  # 8k tokens per rank: the ring hides
    # one sequence split three ways on 16 GPUs: llama3-8b's 8 K/V heads cap Ulysses (and Megatron's a2a) at 8
    errors, peak, exposed = rec["split_errors"], rec["split_peak_gib"], rec["split_exposed_seconds"]
    assert set(errors) == {"Ulysses 16", "CP 16 a2a"}
    assert "num_query_groups=8" in errors["Ulysses 16"] and "largest Ulysses size for llama3-8b is 8" in errors["Ulysses 16"]
    assert peak["Ulysses 8"] < peak["ZeRO-3 + full recompute"]  # 1/8 of the sequence's activations per GPU
    assert peak["Ulysses 8"] < peak["CP 8 p2p"]  # ZeRO-3 shards the weights, Megatron CP does not
    # Ulysses is priced as the all-to-all it is: the same exposed exchange as Megatron's a2a; the ring hides
    assert exposed["Ulysses 8"] == pytest.approx(exposed["CP 8 a2a"]) and exposed["Ulysses 8"] > 0
    assert exposed["CP 8 p2p"] == 0.0 < exposed["CP 8 all_gather"]
    explained = rec["split_planner_explanations"]
    assert "Ulysses" in rec["split_planner_best"]["deepspeed"] and "Long context: " in explained["deepspeed"]
    # with TE's TP overlap a wider TP can win without CP; without it Megatron's best splits the sequence
    assert "CP exchange (same plan, each --cp-comm-type)" in explained["megatron, no TP overlap"]
    assert "CP" in rec["split_planner_best"]["megatron, no TP overlap"]


@pytest.mark.slow
def test_hybrid(tmp_path, monkeypatch):
    rec = run_notebook("hybrid.ipynb", dict(model="gpt3-1.3b", gpu="A100-80GB", gpus_per_node=4, nodes=2,
                                            tensor_parallel=2, pipeline_parallel=2, zero_stage=1,
                                            micro_batch_size=2, gradient_accumulation_steps=2,
                                            run_tensor_parallel=1, run_pipeline_parallel=2, run_data_parallel=1,
                                            run_steps=2),
                       tmp_path, monkeypatch)
    assert rec["world_size"] == 8 and rec["data_parallel"] == 2
    opt = rec["optimizer_bytes"]
    assert opt["hybrid ZeRO-1"] < opt["Megatron DDP"]
    assert opt["Megatron distributed optimizer"] < opt["Megatron DDP"]
    ds = rec["ds_config"]
    assert ds["zero_optimization"]["stage"] == 1
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_accumulation_steps"] == 2
    assert ds["train_batch_size"] == 2 * 2 * 2
    assert rec["command_has_deepspeed"] is True
    expected = _estimate("gpt3-1.3b", "A100-80GB", 4, 2, engine="megatron-deepspeed", zero_stage=1,
                         tensor_parallel=2, pipeline_parallel=2, micro_batch_size=2, global_batch_size=8,
                         precision="bf16", recompute="full")
    assert rec["peak_bytes"]["hybrid ZeRO-1"] == expected.memory.per_gpu_peak_bytes
    # the launched PP2 hybrid (2 CPU processes; the notebook's default is the guide's TP4 x PP2 on 8): groups as
    # the layout predicts, memory for both stages
    assert rec["run_world_size"] == 2 and rec["run_status"] == "completed" and len(rec["run_losses"]) == 2
    assert rec["run_groups_reported"] == 2 and rec["run_groups_match"] == {"tp": True, "pp": True, "dp": True}
    stages = rec["run_stage_memory"]
    assert [s["ranks"] for s in stages] == ["0", "1"]
    assert all(s["measured peak MiB (max over ranks)"] > 0 and s["estimate MiB"] > 0 for s in stages)
    assert rec["run_ds_config"]["zero_optimization"]["stage"] == 1


def test_a_failing_cell_fails_with_its_error(tmp_path, monkeypatch):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("x: int = 1  # a number"), new_code_cell("raise ValueError(f'bad x={x}')")])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "failing.ipynb"
    nbformat.write(nb, str(path))
    with pytest.raises(pytest.fail.Exception) as info:
        run_notebook_at(path, {"x": 3}, tmp_path / "out", monkeypatch)
    message = str(info.value)
    assert "ValueError: bad x=3" in message and "failing.ipynb: cell" in message


@pytest.mark.slow
def test_planner(tmp_path, monkeypatch):
    from workbench.planner import search

    params = dict(model="gpt3-1.3b", gpu="H100-SXM", gpus_per_node=4, nodes=1, global_batch_size=16,
                  precision="bf16", headroom=0.1, top=5)
    rec = run_notebook("planner.ipynb", params, tmp_path, monkeypatch)
    cluster = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=4, num_nodes=1)
    expected = search(catalog.model("gpt3-1.3b"), cluster, global_batch_size=16, precision="bf16", headroom=0.1,
                      top=5)
    best = expected.best
    assert rec["evaluated"] == expected.evaluated and rec["feasible"] == expected.feasible
    assert rec["pareto_count"] == len(expected.pareto)
    assert rec["best_plan"]["plan"] == best.describe()
    assert rec["best_plan"]["tensor_parallel"] == best.plan.tensor_parallel
    assert rec["best_plan"]["data_parallel"] * best.plan.tensor_parallel * best.plan.pipeline_parallel \
        * best.plan.context_parallel == 4
    assert rec["tokens_per_second"] == pytest.approx(best.tokens_per_second)
    assert rec["peak_gib"] == pytest.approx(best.peak_bytes / GIB)
    assert rec["peak_gib"] <= 0.9 * cluster.gpu.memory_bytes / GIB
    assert rec["explanation_first_line"].startswith("Fastest: ")
    # the NVMe section: one H100 with 64 GiB of host memory cannot hold Llama 2 7B's offloaded optimizer; with
    # 200 GiB of NVMe the planner's winner swaps it there, priced as the search prices it
    assert "no plan fits host memory" in rec["nvme_without"] and "--nvme-gib" in rec["nvme_without"]
    one_gpu = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=1, host_memory_gib_per_node=64,
                          nvme_gib_per_node=200)
    nvme = search(catalog.model("llama2-7b"), one_gpu, global_batch_size=8, precision="bf16", top=5).best
    assert rec["nvme_best_plan"] == nvme.describe() and "offload-opt=nvme" in rec["nvme_best_plan"]
    assert rec["nvme_bytes_per_node"] == nvme.nvme_bytes_per_node > 0
    assert rec["nvme_host_bytes_per_node"] == nvme.host_bytes_per_node <= 64 * GIB
    # with 32 GiB of host memory even the NVMe plans fail at DeepSpeed's 1e9 sub-groups; at 1e8 one fits
    assert "no plan fits host memory" in rec["sub_group_default"]
    assert "--sub-group-size 1e8" in rec["sub_group_default"]
    smaller_host = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=1, host_memory_gib_per_node=32,
                               nvme_gib_per_node=200)
    smaller = search(catalog.model("llama2-7b"), smaller_host, global_batch_size=8, precision="bf16", top=5,
                     sub_group_size=100_000_000).best
    assert rec["sub_group_best_plan"] == smaller.describe() and "offload-opt=nvme" in rec["sub_group_best_plan"]
    assert rec["sub_group_host_bytes_per_node"] == smaller.host_bytes_per_node <= 32 * GIB
    # Llama 2 70B on two H100 with 1,600 GiB of host memory: the optimizer stays on the host, the parameters go to
    # NVMe, faster than the best plan with the optimizer on NVMe
    two = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=2, host_memory_gib_per_node=1600,
                      nvme_gib_per_node=4000)
    best = search(catalog.model("llama2-70b"), two, global_batch_size=16, precision="bf16", top=5).best
    assert rec["param_nvme_best_plan"] == best.describe()
    assert "offload-opt=cpu offload-params=nvme" in rec["param_nvme_best_plan"]
    assert rec["param_nvme_step_seconds"] == pytest.approx(best.step_seconds)
    assert rec["param_nvme_optimizer_on_nvme_step_seconds"] > rec["param_nvme_step_seconds"]


@pytest.mark.slow
def test_troubleshooting(tmp_path, monkeypatch):
    from workbench.advisor import oom_ladder

    params = dict(model="gpt3-2.7b", gpu="A100-40GB", gpus_per_node=2, nodes=1, engine="megatron",
                  tensor_parallel=1, pipeline_parallel=1, micro_batch_size=8, global_batch_size=32,
                  precision="fp16", log_iterations=80, spike_at=70)
    rec = run_notebook("troubleshooting.ipynb", params, tmp_path, monkeypatch)
    model = catalog.model("gpt3-2.7b")
    cluster = ClusterSpec(gpu=catalog.gpu("A100-40GB"), gpus_per_node=2, num_nodes=1)
    plan = ParallelPlan(world_size=2, engine="megatron", micro_batch_size=8, global_batch_size=32, precision="fp16")
    est = estimate(model, cluster, plan)
    assert rec["fits"] is False and rec["peak_bytes"] == est.memory.per_gpu_peak_bytes
    ladder = oom_ladder(model, cluster, plan)
    assert [(s["step"], s["peak_bytes"], s["fits"]) for s in rec["ladder"]] == \
        [(s.step, s.peak_bytes, s.fits) for s in ladder]
    assert rec["ladder"][-1]["fits"] is True
    # each applied rung lowers memory and costs time
    peaks = [est.memory.per_gpu_peak_bytes] + [s["peak_bytes"] for s in rec["ladder"]]
    assert all(b < a for a, b in zip(peaks, peaks[1:]))
    assert all(s["slowdown"] >= 0 for s in rec["ladder"])
    assert rec["working_step_seconds"] == pytest.approx(estimate(model, cluster, ladder[-1].plan).time.step_seconds)
    assert rec["convergence"] == {"gradient_clipping": "pass", "loss_scale": "pass", "adam_betas": "pass"}
    # the generated log: 8 progress lines, the spike at 70 found, the step time read back (predicted + 10 %)
    assert rec["log"]["kind"] == "megatron" and rec["log"]["progress_lines"] == 8
    assert rec["log"]["spikes"] == [70]
    assert rec["log"]["median_step_seconds"] == pytest.approx(1.1 * rec["working_step_seconds"], rel=1e-3)
    assert rec["log_findings"]["log_grad_norm_spikes"] == "warn"
    # the example out-of-memory message, read whole
    oom = rec["oom_message"]
    assert oom["request_bytes"] == round(1.95 * 2**30) and oom["cached_free_bytes"] == round(5.95 * 2**30)


def test_fine_tuning(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rec = run_notebook("fine_tuning.ipynb", dict(gpus_per_node=2), tmp_path, monkeypatch)
    assert rec["parameters"] == 8_030_261_248  # what transformers builds from the config
    # 2 x A100-40GB: the full fine-tune fits only with CPU offload, LoRA r=16 without: LoRA is faster
    assert rec["lora_step_seconds"] is not None
    assert rec["full_step_seconds"] is None or rec["lora_step_seconds"] < rec["full_step_seconds"]
    # without recompute eager keeps every layer's scores; checkpointed, at most the recomputed layer's
    assert rec["eager_minus_sdpa_gib"] > 10
    assert 0 <= rec["eager_minus_sdpa_checkpointed_gib"] < rec["eager_minus_sdpa_gib"] / 10
    # the allocator replayed over the LoRA plan's own trace on one GPU: a reserve of its own, within what runs show
    assert 0.0 < rec["replayed_reserve_fraction"] < 0.7


def test_moe(tmp_path, monkeypatch):
    rec = run_notebook("moe.ipynb", dict(gpus_per_node=4, nodes=2, seq_length=2048, ep_values=[1, 2, 8], layout_ep=4,
                                         tensor_parallel=1,
                                         global_batch=8, capacity_factors=[1.0, 1.5]), tmp_path, monkeypatch)
    # EP 4 on 8 GPUs: 2 experts per GPU, EP groups of neighbours, expert DP pairs one node apart
    assert rec["experts_of_rank"][:4] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert rec["ep_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]] and rec["expert_dp_groups"][0] == [0, 4]
    peak, weights = rec["peak_gib"], rec["weights_gib"]
    assert peak[0] > peak[1] > peak[2] and weights[0] > 3 * weights[2]
    # EP 1 sends nothing; EP 8 over 2 nodes of 4 GPUs leaves the node
    assert rec["alltoall_seconds"][0] == 0.0 and rec["ep_link"][2] == "inter-node"
    ms = {int(k): v for k, v in rec["alltoall_ms_by_members_in_node"].items()}
    assert ms[8] < ms[4] < ms[1]  # the more of the group inside the node, the less goes over the network
    cap = rec["capacity_alltoall_seconds"]
    assert cap[1] == pytest.approx(1.5 * cap[0], rel=0.02)
    # routing imbalance: dropless steps grow with it; a capacity factor of 1.25 caps what the busiest rank computes
    # (F 1.2 is under the cap, F 1.5 is priced at 1.25)
    imb, capped = rec["imbalance_step_seconds"], rec["imbalance_capped_step_seconds"]
    assert imb[0] < imb[1] < imb[2] and capped[1] == pytest.approx(imb[1]) and imb[1] < capped[2] < imb[2]
    ds_peak = rec["ds_moe_peak_gib"]  # DeepSpeed-MoE: more EP shards the experts over world / EP
    assert ds_peak[0] > ds_peak[1] > ds_peak[2]
    assert len(rec["fits"]) == 3


def test_moe_lesson_defaults_show_a_plan_that_fits_and_ones_that_do_not():
    """The notebook's default layout (its parameters cell, run as the notebook runs it) is one where the memory
    sweep has both answers: Mixtral 8x7B on 2 x 8 H100 fits at TP 2 x EP 8 only; at TP 1 no EP size fits (the bf16
    weights and fp32 main gradients of a GPU's TP/EP slice are not sharded by the distributed optimizer)."""
    from workbench import catalog
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec, ParallelPlan

    nb = json.loads((NOTEBOOKS / "moe.ipynb").read_text())
    params: dict = {}
    exec("".join(next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))["source"]), params)
    m = catalog.model(params["model"]).replace(seq_length=params["seq_length"])
    cluster = ClusterSpec(gpu=catalog.gpu(params["gpu"]), gpus_per_node=params["gpus_per_node"],
                          num_nodes=params["nodes"])

    def fits(ep, t=params["tensor_parallel"]):
        plan = ParallelPlan(world_size=cluster.world_size, engine="megatron", tensor_parallel=t,
                            sequence_parallel=t > 1, expert_parallel=ep, distributed_optimizer=True,
                            recompute="full", global_batch_size=params["global_batch"])
        return estimate(m, cluster, plan, checks=False).memory.fits

    assert [fits(ep) for ep in params["ep_values"]] == [False, False, False, True]
    assert not any(fits(ep, t=1) for ep in params["ep_values"])
