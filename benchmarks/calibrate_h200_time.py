"""Fit the time model's H200 constants to measured step times (the fit split of
``benchmarks/accuracy_split.json``, called by ``benchmarks/bench_accuracy.py --refit-time``).

Fixed before the fit: the GEMM curve (fitted to the 270 GEMMs of results/gemm_h200.json), the HBM efficiency
(0.8), the counted bytes of the attention scores, the loss, the optimizers (fused Adam, torch's foreach Adam) and
the ZeRO-3 gathers and gradient copies, the collectives. Fitted (each per call, per byte or per thread, never per
model shape):

    layer_pass_overhead_s      fixed seconds per layer forward, backward or recomputed forward (kernel launches,
                               framework work), every engine; the Hopper curve
    step_overhead_s            fixed seconds per optimizer step, every engine; the Hopper curve
    score_hbm_efficiency       fraction of HBM bandwidth the materialised attention-score kernels reach (their
                               bytes are counted kernel by kernel); the Hopper curve
    step_bytes_per_parameter   DeepSpeed's HBM passes over gradients/parameters around the optimizer
    tensor_seconds             DeepSpeed's per-parameter-tensor work per step (gradient hooks, per-tensor norms)
    zero3_fetch_latency_s      ZeRO-3 host seconds per module fetch (forward, backward, recomputed forward)
    zero3_reduce_latency_s     ZeRO-3 host seconds per module gradient reduce-and-partition (backward)
    zero3_collective_call_s    extra host seconds per ZeRO-3 fetch/reduce call when the group has > 1 rank
    cpu_adam params_per_second_per_thread / params_per_second_per_core / serial / zero3_host_factor
                               CPU Adam with optimizer offload: one thread's rate, the node's memory-bound cap
                               (per host core, params_per_second_per_core, so it follows the host's size),
                               ZeRO-3's extra host passes (fitted only on offload runs)

The fit minimises the squared relative step-time error (Levenberg-Marquardt on all runs at once, through the
vectorised :func:`workbench.timing.step_time_terms`, constants kept >= 0), each model shape weighted 1/sqrt(runs)
so the one shape with 32 older runs does not outvote the others. Hugging Face runs are left out of the fit: their
per-module overheads are not in these terms.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import timing  # noqa: E402
from workbench.timing import step_time_terms, time_inputs  # noqa: E402

# (step_time_terms input, catalog section, catalog key, starting value)
CONSTANTS = (
    ("layer_pass_overhead_s", "curves.hopper", "layer_pass_overhead_s", 3e-4),
    ("step_overhead_s", "curves.hopper", "step_overhead_s", 1e-2),
    ("score_hbm_efficiency", "curves.hopper", "score_hbm_efficiency", 0.8),
    ("deepspeed_step_bytes_per_parameter", "deepspeed", "step_bytes_per_parameter", 40.0),
    ("deepspeed_tensor_seconds", "deepspeed", "tensor_seconds", 1e-4),
    ("zero3_fetch_latency_s", "deepspeed", "zero3_fetch_latency_s", 1e-3),
    ("zero3_reduce_latency_s", "deepspeed", "zero3_reduce_latency_s", 1e-3),
    ("zero3_collective_call_s", "deepspeed", "zero3_collective_call_s", 5e-4),
    ("cpu_adam_params_per_second_per_thread", "cpu_adam", "params_per_second_per_thread", 1e8),
    ("cpu_adam_params_per_second_per_core", "cpu_adam", "params_per_second_per_core", 1.4e8),
    ("cpu_adam_serial_seconds_per_parameter", "cpu_adam", "serial_seconds_per_parameter", 1e-10),
    ("offload_zero3_host_factor", "cpu_adam", "zero3_host_factor", 0.5),
)
DEEPSPEED_ONLY = {"deepspeed_step_bytes_per_parameter", "deepspeed_tensor_seconds"}
"""Inputs the encoder sets to 0 for the Megatron engine: the fit keeps them 0 there."""


def batch_inputs(rows) -> dict:
    """Every run's :func:`step_time_terms` inputs as arrays (one element per run)."""
    ins = [time_inputs(r["model"], r["cluster"], r["plan"]) for r in rows]
    return {k: np.array([np.nan if i[k] is None else float(i[k]) for i in ins]) for k in ins[0]}


HELPERS = ("engine_is_deepspeed", "host_cpu_cores")
"""Columns :func:`prepare` adds beside the step-time inputs."""


def predict(inputs: dict, values: dict) -> np.ndarray:
    """Step seconds of every run with the constants ``values`` (input name → value); the CPU Adam cap per host core
    becomes each run's node cap (× its host's cores, as :func:`workbench.encode.time_inputs` does)."""
    deepspeed = inputs["engine_is_deepspeed"]
    over = {k: np.where(deepspeed, v, 0.0) if k in DEEPSPEED_ONLY else np.full(deepspeed.shape, float(v))
            for k, v in values.items()}
    if "cpu_adam_params_per_second_per_core" in over:
        over["cpu_adam_params_per_second_per_node"] = (over.pop("cpu_adam_params_per_second_per_core")
                                                       * inputs["host_cpu_cores"])
    kw = {k: v for k, v in inputs.items() if k not in HELPERS}
    return step_time_terms(**{**kw, **over})["step_seconds"]


def shape_weights(shapes, keep) -> np.ndarray:
    w = np.zeros(len(shapes))
    for s in set(shapes[keep]):
        sel = keep & (shapes == s)
        w[sel] = 1 / np.sqrt(sel.sum())
    return w


def fit(inputs, measured, shapes, keep, names, start, iters=60) -> np.ndarray:
    """Levenberg-Marquardt on the weighted relative errors of the runs where ``keep``; constants stay >= 0."""
    w = np.sqrt(shape_weights(shapes, keep)[keep])
    x = np.array(start, float)

    def residual(x):
        return (predict(inputs, dict(zip(names, x)))[keep] / measured[keep] - 1) * w

    r, lam = residual(x), 1e-3
    for _ in range(iters):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = max(abs(x[j]) * 1e-4, 1e-12)
            xp = x.copy()
            xp[j] += h
            jac[:, j] = (residual(xp) - r) / h
        scale = np.maximum(np.abs(jac).max(axis=0), 1e-30)
        js = jac / scale
        step = np.linalg.solve(js.T @ js + lam * np.eye(x.size), -js.T @ r) / scale
        xn = np.maximum(x + step, 0.0)
        rn = residual(xn)
        if rn @ rn < r @ r:
            x, r, lam = xn, rn, lam / 3
        else:
            lam *= 5
    return x


def prepare(rows):
    """Inputs, measured seconds and shape ids of the runs; which constants the runs can identify."""
    inputs = batch_inputs(rows)
    inputs["engine_is_deepspeed"] = np.array([str(r["plan"].engine) != "megatron" for r in rows])
    inputs["host_cpu_cores"] = np.array([float(r["cluster"].host_cpu_cores_per_node) for r in rows])
    measured = np.array([r["measured"]["step"] for r in rows])
    shapes = np.array([r["shape_id"] for r in rows])
    offload = inputs["offload_optimizer"] > 0
    threads = set(inputs["cpu_adam_threads"][offload])
    zero3_offload = (offload & (inputs["zero_stage"] == 3)).any()
    names = [n for n, *_ in CONSTANTS
             if not n.startswith(("cpu_adam", "offload_")) or offload.any()]
    if len(threads) < 2:  # one thread count: the per-thread rate cannot be told from the node's cap
        names = [n for n in names if n not in ("cpu_adam_params_per_second_per_thread",
                                               "cpu_adam_serial_seconds_per_parameter")]
    if not zero3_offload:
        names = [n for n in names if n != "offload_zero3_host_factor"]
    return inputs, measured, shapes, names


def _set_constants(data: dict, names, values) -> None:
    """Put each named constant's value at its place (``section.sub`` path, key) in the calibration dict ``data``."""
    where = {n: (sec, key) for n, sec, key, _ in CONSTANTS}
    for n, v in zip(names, values):
        sec, key = where[n]
        node = data
        for part in sec.split("."):
            node = node[part]
        node[key] = v


def write_constants(names, x, source: str) -> None:
    """Store fitted constants in workbench/catalog/efficiency.json (``source`` goes to the deepspeed note)."""
    path = ROOT / "workbench" / "catalog" / "efficiency.json"
    data = json.loads(path.read_text())
    _set_constants(data, names, [float(f"{v:.4g}") for v in x])
    data["deepspeed"].pop("zero3_hbm_bytes_per_parameter", None)  # now counted in the model
    if "params_per_second_per_core" in data["cpu_adam"]:  # the node cap follows the host's cores
        data["cpu_adam"].pop("params_per_second_per_node", None)
    data["deepspeed"]["source"] = source
    path.write_text(json.dumps(data, indent=2) + "\n")
    timing.calibration.cache_clear()
    print(f"wrote {path.relative_to(ROOT)}")


def apply_constants(names, x) -> None:
    """Use fitted constants in this process only (the catalog file is not touched)."""
    _set_constants(timing.calibration(), names, [float(v) for v in x])


def current_values(names) -> list:
    data = timing.calibration()
    out = []
    for n, sec, key, start in CONSTANTS:
        if n not in names:
            continue
        node = data
        for part in sec.split("."):
            node = node.get(part, {})
        value = node.get(key, start)
        out.append(start if not np.isfinite(value) else value)
    return out


if __name__ == "__main__":
    print("run benchmarks/bench_accuracy.py --refit-time: it fits these constants on the fit split")
