"""Planner: ZeRO-Infinity's offload to NVMe is searched where the cluster declares NVMe, priced as estimate() prices
the same plan, and named wherever a row becomes a plan, a table row, JSON or an explanation."""
import json
import re

import numpy as np
import pytest

from workbench import encode, planner
from workbench.catalog import gpu, model
from workbench.defaults import GiB
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ParallelPlan, validate

_KEYS = ("off_opt", "off_par", "nvme_opt", "nvme_par")


def _cluster(gpus_per_node=1, nodes=1, host=64.0, nvme=0.0, **kw):
    return ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=gpus_per_node, num_nodes=nodes,
                       host_memory_gib_per_node=host, nvme_gib_per_node=nvme, **kw)


def _offloads(table):
    return np.stack([table[k] for k in _KEYS], axis=1)


def test_without_nvme_the_table_is_the_cpu_offload_one():
    """No NVMe declared (or offload not allowed): no NVMe row; with NVMe, the rows without it are the same rows in
    the same order, and the NVMe rows are ZeRO-3 DeepSpeed rows with the optimizer, the parameters or both on NVMe."""
    m = model("gpt3-350m", seq_length=1024)
    plain = planner.enumerate_candidates(m, _cluster(gpus_per_node=4, nodes=2, host=1024), 16, max_context_parallel=4)
    assert not plain["nvme_opt"].any() and not plain["nvme_par"].any()
    nvme_c = _cluster(gpus_per_node=4, nodes=2, host=1024, nvme=2000)
    with_nvme = planner.enumerate_candidates(m, nvme_c, 16, max_context_parallel=4)
    on = (with_nvme["nvme_opt"] > 0) | (with_nvme["nvme_par"] > 0)
    assert on.any()
    for k in plain:
        np.testing.assert_array_equal(with_nvme[k][~on], plain[k], err_msg=k)
    assert (with_nvme["zero"][on] == 3).all()
    assert (with_nvme["engine"][on] != planner.ENGINE_CODES[planner.Engine.MEGATRON]).all()
    assert {tuple(r) for r in _offloads(with_nvme)[on]} == set(planner.NVME_OFFLOADS)
    # every ZeRO-3 row with the optimizer on the CPU alone has its four NVMe twins
    cpu_opt = ((with_nvme["zero"] == 3) & (with_nvme["off_opt"] == 1) & (with_nvme["off_par"] == 0) & ~on)
    assert on.sum() == 4 * cpu_opt.sum() == len(planner.NVME_OFFLOADS) * cpu_opt.sum()
    off = planner.enumerate_candidates(m, nvme_c, 16, max_context_parallel=4, offload=False)
    assert not off["off_opt"].any() and not off["nvme_opt"].any()


def test_nvme_rows_are_plans_the_specs_accept_with_the_same_columns():
    m = model("gpt3-350m", seq_length=1024)
    c = _cluster(gpus_per_node=4, nodes=2, host=1024, nvme=2000)
    table = planner.enumerate_candidates(m, c, 16, max_context_parallel=4)
    rows = np.flatnonzero((table["nvme_opt"] > 0) | (table["nvme_par"] > 0))
    assert ((table["nvme_opt"][rows] == 0) & (table["nvme_par"][rows] == 1)).any()
    for i in rows[:: max(1, len(rows) // 40)]:
        plan = planner._plan_at(table, int(i), c, 16, planner.Precision.BF16)
        validate(m, c, plan)
        assert str(plan.offload_optimizer) == ("nvme" if table["nvme_opt"][i] else "cpu")
        assert plan.nvme_optimizer == bool(table["nvme_opt"][i]) and plan.nvme_params == bool(table["nvme_par"][i])
        assert str(plan.offload_params) == {0: "none", 1: "nvme" if table["nvme_par"][i] else "cpu"}[
            int(table["off_par"][i])]
        cols = encode.plan_columns(plan, m)
        assert all(cols[k] == int(table[k][i]) for k in _KEYS)
        assert f"offload-opt={plan.offload_optimizer}" in planner.describe_plan(plan)


@pytest.mark.parametrize("name,gpus_per_node,nodes,gbs", [("llama2-7b", 1, 1, 8), ("llama2-7b", 2, 2, 8),
                                                          ("gpt3-1.3b", 4, 1, 16)])
def test_nvme_rows_the_planner_returns_match_scalar_estimate(name, gpus_per_node, nodes, gbs):
    """GPU peak, host and NVMe bytes per node, step time and its terms, the band and the risky mark of every NVMe
    plan the planner returns, against estimate() of the same plan."""
    m = model(name)
    c = _cluster(gpus_per_node=gpus_per_node, nodes=nodes, host=512, nvme=4000)
    res = planner.search(m, c, global_batch_size=gbs, top=100_000)
    nvme = [r for r in res.ranked if r.nvme_bytes_per_node]
    assert len(nvme) >= 6
    assert {(str(r.plan.offload_optimizer), str(r.plan.offload_params)) for r in nvme} == {
        ("nvme", "none"), ("nvme", "cpu"), ("cpu", "nvme"), ("nvme", "nvme")}
    for r in nvme[:: max(1, len(nvme) // 12)] + [r for r in res.pareto if r.nvme_bytes_per_node]:
        est = estimate(m, c, r.plan, checks=False)
        assert r.peak_bytes == pytest.approx(est.memory.per_gpu_peak_bytes, abs=8)
        assert r.host_bytes_per_node == pytest.approx(est.memory.host_bytes_per_node, abs=8 * gpus_per_node)
        assert r.nvme_bytes_per_node == pytest.approx(est.memory.nvme_bytes_per_node, abs=8 * gpus_per_node)
        assert est.memory.nvme_bytes_per_node > 0 and est.memory.fits_nvme and est.memory.fits_host
        assert r.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
        assert r.time_breakdown == pytest.approx(est.time.breakdown, rel=1e-9)
        assert r.mfu == pytest.approx(est.time.mfu, rel=1e-9)
        assert r.band_high_bytes == pytest.approx(est.memory.band_high_bytes, abs=8)
        assert r.risky == (r.peak_bytes + r.band_high_bytes > 0.95 * c.gpu.memory_bytes)
        # the swaps are in the step: the same plan in host memory is faster (with the parameters alone on NVMe, not
        # slower: a partition within offload_param.max_in_cpu stays in host memory)
        cpu = r.plan.replace(offload_optimizer="cpu", offload_params="cpu" if r.plan.nvme_params else
                             r.plan.offload_params)
        in_host = estimate(m, c, cpu, checks=False).time.breakdown["offload"]
        assert (r.time_breakdown["offload"] > in_host if r.plan.nvme_optimizer else
                r.time_breakdown["offload"] >= in_host)
    # the table's NVMe bytes per node are the same with every stage priced
    table = planner.enumerate_candidates(m, c, gbs)
    a = planner.evaluate(table, m, c)
    b = planner.evaluate(table, m, c, all_stages=True)
    np.testing.assert_allclose(a["nvme_bytes_per_node"], b["nvme_bytes_per_node"], rtol=1e-12)
    assert (a["nvme_bytes_per_node"][(table["nvme_opt"] == 0) & (table["nvme_par"] == 0)] == 0).all()


def test_nvme_capacity_decides_like_host_memory():
    """A row whose NVMe bytes pass the node's NVMe does not fit; rank_plan says NVMe is what fails."""
    m, gbs = model("llama2-7b"), 8
    plan = ParallelPlan(world_size=1, zero_stage=3, offload_optimizer="nvme", micro_batch_size=1,
                        global_batch_size=gbs, recompute="full")
    need = estimate(m, _cluster(nvme=4000), plan, checks=False).memory.nvme_bytes_per_node
    enough, short = _cluster(nvme=np.ceil(need / GiB)), _cluster(nvme=np.floor(need / GiB) - 1)
    fits = planner.rank_plan(m, enough, plan)
    assert fits.in_search_space and fits.fits and fits.result.nvme_bytes_per_node == pytest.approx(need, abs=8)
    short_rank = planner.rank_plan(m, short, plan)
    assert short_rank.in_search_space and not short_rank.fits
    assert re.search(r"swap to NVMe \([\d.]+ GiB per node\) does not fit the node's \d+ GiB of NVMe \(--nvme-gib\)",
                     short_rank.explanation)
    # without NVMe on the cluster the plan is not searched, and the reason names the flag
    none = planner.rank_plan(m, _cluster(nvme=0), plan)
    assert not none.in_search_space and "--nvme-gib" in none.explanation


def test_full_fine_tune_that_fits_host_memory_only_with_nvme():
    """Llama 2 7B on one H100 with 64 GiB of host memory: its full fine-tune needs offload (16 bytes a parameter do
    not fit 80 GB), CPU offload needs more host memory than the node has, the optimizer on NVMe fits it. Without
    NVMe the planner says so, with the NVMe to give; with that much it finds the NVMe plan; with less it says NVMe is
    what fails."""
    m, gbs = model("llama2-7b"), 8
    with pytest.raises(ValueError) as no_nvme:
        planner.search(m, _cluster(nvme=0), global_batch_size=gbs)
    text = str(no_nvme.value)
    assert text.startswith("no plan fits host memory")
    assert re.search(r"need at least [\d.]+ GiB of host memory per node \(deepspeed .*offload-opt=cpu", text)
    found = re.search(r"offload the optimizer to NVMe \(ZeRO-Infinity\), which the cluster does not declare "
                      r"\(nvme_gib_per_node=0\): (deepspeed [^:]*offload-opt=nvme[^:]*) holds ([\d.]+) GiB of host "
                      r"memory per node and swaps ([\d.]+) GiB per node to NVMe at [\d.]+ s/step; give the node's "
                      r"local NVMe \(--nvme-gib (\d+) or more\)", text)
    assert found, text
    host_gib, nvme_gib, flag = float(found[2]), float(found[3]), int(found[4])
    assert host_gib <= 64 and nvme_gib <= flag < nvme_gib + 1
    res = planner.search(m, _cluster(nvme=flag), global_batch_size=gbs)
    best = res.best
    assert best.plan.nvme_optimizer and str(best.plan.offload_optimizer) == "nvme"
    assert 0 < best.nvme_bytes_per_node <= flag * GiB and best.host_bytes_per_node <= 64 * GiB
    assert all(r.plan.nvme_optimizer for r in res.ranked)  # nothing else fits
    est = estimate(m, _cluster(nvme=flag), best.plan, checks=False)
    assert est.memory.fits and best.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    # the explanation says why: what goes to NVMe, and the host memory keeping it on the CPU would take
    why = re.search(r"\nNVMe: the winner swaps ([\d.]+) GiB per node to NVMe \(of (\d+) GiB; .* the fastest plan "
                    r"that fits the GPU with its offload in host memory \(deepspeed .*offload-opt=cpu.*\) needs "
                    r"([\d.]+) GiB of host memory per node, over the node's 64 GiB\.", res.explanation)
    assert why and float(why[1]) == pytest.approx(best.nvme_bytes_per_node / GiB, abs=0.05) and int(why[2]) == flag
    assert float(why[3]) > 64
    with pytest.raises(ValueError, match=rf"no plan fits the node's NVMe: .* need at least {nvme_gib:.1f} GiB of it "
                                         rf"per node .*the nodes have {flag - 1} GiB of NVMe; give more "
                                         rf"\(--nvme-gib {flag} if the node has it\)"):
        planner.search(m, _cluster(nvme=flag - 1), global_batch_size=gbs)
    # offload not allowed: no NVMe suggested
    with pytest.raises(ValueError) as no_offload:
        planner.search(m, _cluster(nvme=0), global_batch_size=gbs, offload=False)
    assert "NVMe" not in str(no_offload.value).split(". The full fine-tune")[0]


def test_explanation_names_the_nvme_swaps():
    m, c = model("llama2-7b"), _cluster(host=512, nvme=4000)
    res = planner.search(m, c, global_batch_size=8, top=100_000)
    cpu = next(r for r in res.ranked if str(r.plan.offload_optimizer) == "cpu")
    nvme = next(r for r in res.ranked if r.plan.nvme_optimizer and r.plan.recompute == cpu.plan.recompute
                and r.plan.micro_batch_size == cpu.plan.micro_batch_size
                and r.plan.offload_params == cpu.plan.offload_params)
    text = planner.explain(cpu, nvme, model=m, cluster=c)
    assert "offload optimizer cpu vs nvme" in text
    assert re.search(r"optimizer swapped to NVMe at the node's 6 GB/s read, 3 GB/s write, shared by its 1 GPUs: "
                     r"runner-up \+[\d.]+ s", text)
    assert nvme.to_dict()["offload_optimizer"] == "nvme" and nvme.to_dict()["nvme_bytes_per_node"] > 0


def test_cli_plan_takes_nvme_gib(capsys):
    from workbench.cli import main

    base = ["plan", "--model", "llama2-7b", "--gpus-per-node", "1", "--gbs", "8", "--host-mem-gib", "64", "--top", "3"]
    assert main(base + ["--nvme-gib", "500", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranked"][0]["offload_optimizer"] == "nvme"
    assert 0 < out["ranked"][0]["nvme_bytes_per_node"] <= 500 * GiB
    assert main(base + ["--nvme-gib", "500", "--nvme-read-gbps", "12", "--nvme-write-gbps", "6"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"\s3\s+optN\s", text)
    assert "optN / parN: the optimizer / parameters swapped to NVMe (ZeRO-Infinity) at 12 GB/s read, 6 GB/s write" \
           in text and "(of 500 GiB, --nvme-gib): #1 " in text
    assert main(base) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error: no plan fits host memory") and "--nvme-gib" in err


def test_optimizer_in_host_memory_with_the_parameters_on_nvme():
    """Llama 2 70B on two H100 (TP 2) with 1,600 GiB of host memory: CPU offload of both needs more host memory than
    the node has; the parameters on NVMe with the optimizer kept in host memory fit it and swap far less than the
    optimizer on NVMe does, so that plan wins, priced as estimate() prices it, and the explanation says why."""
    m, c = model("llama2-70b"), _cluster(gpus_per_node=2, host=1600, nvme=4000)
    res = planner.search(m, c, global_batch_size=16, top=100_000)
    best = res.best
    assert (str(best.plan.offload_optimizer), str(best.plan.offload_params)) == ("cpu", "nvme")
    assert best.plan.nvme_params and not best.plan.nvme_optimizer
    est = estimate(m, c, best.plan, checks=False)
    assert best.step_seconds == pytest.approx(est.time.step_seconds, rel=1e-9)
    assert best.host_bytes_per_node == pytest.approx(est.memory.host_bytes_per_node, abs=16)
    assert 0 < best.nvme_bytes_per_node == pytest.approx(est.memory.nvme_bytes_per_node, abs=16)
    both_cpu = estimate(m, c, best.plan.replace(offload_params="cpu"), checks=False)
    assert not both_cpu.memory.fits_host and both_cpu.memory.host_bytes_per_node > 1600 * GiB
    opt_nvme = [r for r in res.ranked if r.plan.nvme_optimizer]
    assert opt_nvme and min(r.step_seconds for r in opt_nvme) > best.step_seconds
    assert re.search(r"\nNVMe: the winner swaps [\d.]+ GiB per node to NVMe .* the fastest plan that fits the GPU "
                     r"with its offload in host memory \(.*offload-opt=cpu offload-params=cpu.*\) needs [\d.]+ GiB of "
                     r"host memory per node, over the node's 1600 GiB\.", res.explanation), res.explanation
