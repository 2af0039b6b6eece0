"""Planner speed: plans evaluated per second, the full Llama-3-405B search on 16,384 H100, agreement of the array
evaluation with scalar ``estimate()``, and a side-by-side with llm-analysis evaluating the same plans.

Run from the checkout root::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_planner.py [--compare N]

llm-analysis (PyPI ``llm-analysis``) is only needed for the last part; without it that part is skipped with a
message. It is not a dependency of the workbench.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench import planner  # noqa: E402
from workbench.catalog import gpu, model  # noqa: E402
from workbench.estimate import estimate  # noqa: E402
from workbench.specs import ClusterSpec, Recompute  # noqa: E402

GiB = 2**30


def _best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def throughput(repeat: int) -> None:
    m = model("llama3-70b")
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=64)
    table = planner.enumerate_candidates(m, c, 1024, allow_cross_node_tp=True, max_context_parallel=64)
    n = len(table["tp"])
    t_enum, _ = _best_of(lambda: planner.enumerate_candidates(m, c, 1024, allow_cross_node_tp=True,
                                                              max_context_parallel=64), repeat)
    t_eval, _ = _best_of(lambda: planner.evaluate(table, m, c), repeat)
    t_all, _ = _best_of(lambda: planner.evaluate(table, m, c, all_stages=True), repeat)
    t_search, res = _best_of(lambda: planner.search(m, c, global_batch_size=1024, allow_cross_node_tp=True,
                                                    max_context_parallel=64), repeat)
    print(f"[1] plans per second — llama3-70b on 64 x 8 H100, global batch 1024 ({n:,} candidate plans; "
          f"threads: OMP={os.environ.get('OMP_NUM_THREADS', 'unset')}, cores={os.cpu_count()})")
    print(f"    enumerate                {t_enum * 1e3:8.1f} ms   {n / t_enum:12,.0f} plans/s")
    print(f"    evaluate (first+last)    {t_eval * 1e3:8.1f} ms   {n / t_eval:12,.0f} plans/s")
    print(f"    evaluate (every stage)   {t_all * 1e3:8.1f} ms   {n / t_all:12,.0f} plans/s")
    print(f"    full search              {t_search * 1e3:8.1f} ms   {n / t_search:12,.0f} plans/s "
          f"({res.feasible:,} feasible)")


def search_405b(repeat: int) -> None:
    m = model("llama3-405b")
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=2048)
    t, res = _best_of(lambda: planner.search(m, c, global_batch_size=2048, seq_length=8192, top=10), repeat)
    print(f"\n[2] Llama-3-405B on 2,048 x 8 H100 (16,384 GPUs), global batch 2048 x 8192 tokens: "
          f"{res.evaluated:,} plans, {res.feasible:,} fit, best of {repeat}: {t:.3f} s (target < 2 s)")
    for i, r in enumerate(res.ranked[:5], 1):
        print(f"    {i}. {r.describe():<80} {r.step_seconds:7.3f} s/step  {r.peak_bytes / GiB:5.1f} GiB  "
              f"MFU {r.mfu:5.1%}")
    # verify with the scalar path
    worst_mem, worst_time = 0.0, 0.0
    for r in res.ranked + res.pareto:
        e = estimate(m, c, r.plan)
        worst_mem = max(worst_mem, abs(e.memory.per_gpu_peak_bytes - r.peak_bytes))
        worst_time = max(worst_time, abs(e.time.step_seconds / r.step_seconds - 1))
    print(f"    scalar estimate() on the {len(res.ranked) + len(res.pareto)} ranked + Pareto plans: max |Δ memory| "
          f"{worst_mem:.0f} bytes, max |Δ step time| {worst_time:.1e} (relative)")
    print("    " + res.explanation.replace("\n", "\n    "))


def _llm_analysis_inputs(m, c, plan):
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO
    from llm_analysis.config import ModelConfig, ParallelismConfig

    cfg = ModelConfig(name=m.name, num_layers=m.num_layers, n_head=m.num_attention_heads, hidden_dim=m.hidden_size,
                      vocab_size=m.vocab_size, max_seq_len=m.seq_length, num_key_value_heads=m.num_query_groups,
                      ffn_embed_dim=m.ffn_hidden_size)
    par = ParallelismConfig(tp_size=plan.tensor_parallel, pp_size=plan.pipeline_parallel,
                            dp_size=plan.data_parallel, sp_size=plan.tensor_parallel if plan.sequence_parallel else 1)
    rc = {Recompute.NONE: ActivationRecomputation.NONE, Recompute.SELECTIVE: ActivationRecomputation.SELECTIVE,
          Recompute.FULL: ActivationRecomputation.FULL}[plan.recompute]
    zero = DSZeRO(int(plan.zero_stage))
    return cfg, par, rc, zero


def compare_llm_analysis(count: int) -> None:
    try:
        import llm_analysis  # noqa: F401
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import get_dtype_config_by_name, get_gpu_config_by_name
    except ImportError:
        print("\n[3] llm-analysis is not installed: side-by-side skipped "
              "(`.venv/bin/pip install llm-analysis` to run it; it is not a workbench dependency)")
        return
    from llm_analysis.logger import logger as la_logger

    la_logger.setLevel(logging.ERROR)  # it warns on every plan that does not fit
    # llm-analysis needs ffn divisible by hidden (no Llama-style SwiGLU widths): GPT-3 175B, as in its examples
    m = model("gpt3-175b", attention="flash")
    c = ClusterSpec(gpu=gpu("H100-SXM"), gpus_per_node=8, num_nodes=16)
    gbs = 512
    # plans both tools can express: Megatron TP/PP (+SP) with DeepSpeed ZeRO 0-3 data parallel, no CP, no offload,
    # no interleaving
    table = planner.enumerate_candidates(m, c, gbs, engines=["megatron-deepspeed"], offload=False,
                                         max_context_parallel=1)
    # plans the workbench says fit (so the side-by-side compares trainable plans)
    fits = np.flatnonzero(planner.evaluate(table, m, c)["peak_bytes"] <= c.gpu.memory_bytes)
    rng = np.random.default_rng(0)
    idx = rng.choice(fits, size=min(count, len(fits)), replace=False)
    sub = {k: v[idx] for k, v in table.items()}
    plans = [planner._plan_at(sub, i, c, gbs, planner.Precision.BF16) for i in range(len(idx))]
    gpu_cfg = get_gpu_config_by_name("h100-sxm-80gb")
    dtype_cfg = get_dtype_config_by_name("w16a16e16")

    # workbench: the array path on exactly these plans, and the scalar estimate() per plan
    t_arr, ev = _best_of(lambda: planner.evaluate(sub, m, c), 3)
    t0 = time.perf_counter()
    for p in plans:
        estimate(m, c, p)
    t_scalar = time.perf_counter() - t0

    import contextlib
    import io

    t_la, la_steps, la_mem, failures = 0.0, [], [], 0
    for p in plans:
        cfg, par, rc, zero = _llm_analysis_inputs(m, c, p)
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                la = LLMAnalysis(cfg, gpu_cfg, dtype_config=dtype_cfg, parallelism_config=par)
                out = la.training(batch_size_per_gpu=p.micro_batch_size, global_batch_size=gbs,
                                  seq_len=m.seq_length, activation_recomputation=rc, ds_zero=zero,
                                  flash_attn=True, mlp_gated_linear_units=m.is_gated)
            la_steps.append(float(out["latency_per_iter"]))
            la_mem.append(float(out["total_memory_per_gpu"] if "total_memory_per_gpu" in out
                                else out.get("(weight+op_state+grad+act)_memory_per_gpu", float("nan"))))
        except Exception:  # noqa: BLE001 - count what the other tool refuses
            failures += 1
            la_steps.append(float("nan"))
            la_mem.append(float("nan"))
        t_la += time.perf_counter() - start
    n = len(plans)
    print(f"\n[3] side by side with llm-analysis {llm_analysis.__version__ if hasattr(llm_analysis, '__version__') else ''}"
          f"— the same {n} plans ({m.name}, 16 x 8 H100, global batch {gbs}; megatron-deepspeed TP/PP/SP x ZeRO "
          f"0-3 x recompute x micro batch)")
    print(f"    workbench array evaluate   {t_arr / n * 1e6:10.2f} µs/plan   ({n / t_arr:12,.0f} plans/s)")
    print(f"    workbench scalar estimate  {t_scalar / n * 1e6:10.2f} µs/plan   ({n / t_scalar:12,.0f} plans/s)")
    print(f"    llm-analysis training()    {t_la / n * 1e6:10.2f} µs/plan   ({n / t_la:12,.0f} plans/s)"
          + (f", {failures} plans raised" if failures else ""))
    print(f"    ratio llm-analysis / workbench array:  {t_la / t_arr:8.0f}x")
    print(f"    ratio llm-analysis / workbench scalar: {t_la / t_scalar:8.1f}x")
    ok = np.isfinite(la_steps)
    if ok.any():
        wb = np.asarray(ev["step_seconds"])[ok]
        la_s = np.asarray(la_steps)[ok]
        r = la_s / wb
        print(f"    step time llm-analysis / workbench over {int(ok.sum())} plans: median {np.median(r):.2f}, "
              f"min {r.min():.2f}, max {r.max():.2f} (different models: llm-analysis uses a flat FLOPs efficiency)")
        order = np.argsort(wb)[:5]
        print("    fastest five by the workbench:")
        for j in order:
            k = np.flatnonzero(ok)[j]
            print(f"      {planner.describe_plan(plans[k]):<72} workbench {wb[j]:7.3f} s "
                  f"{ev['peak_bytes'][k] / GiB:6.1f} GiB | llm-analysis {la_s[j]:7.3f} s "
                  f"{la_mem[k] / GiB:6.1f} GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", type=int, default=300, help="plans for the llm-analysis side-by-side")
    args = ap.parse_args()
    throughput(args.repeat)
    search_405b(args.repeat)
    compare_llm_analysis(args.compare)


if __name__ == "__main__":
    main()
