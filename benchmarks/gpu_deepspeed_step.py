"""DeepSpeed's optimizer step on one CUDA GPU, apart from any model: seconds of ``engine.step()`` and of the
backward's gradient work, as the parameter count and the number of parameter tensors grow.

The corpus' DeepSpeed step times carry DeepSpeed's step inside them, beside the model's kernels; a fitted constant
there cannot tell bytes per parameter from cost per tensor from a fixed cost. This script takes the model away: a
module of ``T`` bf16 parameter tensors holding ``N`` parameters in all, whose "forward" is one reduction per tensor,
trained by ``deepspeed.initialize`` with the ds_config of ``benchmarks/corpus/measure.py`` (bf16, AdamW → DeepSpeed's
FusedAdam, gradient clipping 1.0, ZeRO stage 0, 1 or 2, one process). For each (stage, N, T) it times, after 3
warm-up steps, 10 steps of

* ``backward``: ``engine.backward(loss)`` (autograd's gradient kernels and, at ZeRO-1/2, DeepSpeed's gradient hooks:
  copy into the contiguous bucket, reduce, partition);
* ``step``: ``engine.step()`` (the fp32 gradient flatten and norm, clipping, FusedAdam over the fp32 master, the
  copy back to 16 bits and the per-tensor bookkeeping);

each synchronised, and fits ``seconds = a + b·N + c·T`` per stage and phase by least squares. Stage ``torch``
times the step megatron-core takes without Apex or Transformer Engine instead: fp32 main parameters and
gradients, ``clip_grad_norm_`` (foreach), ``torch.optim.AdamW(foreach=True)`` and the copy back into the bf16
weights. ``b`` times the HBM
bandwidth is the bytes DeepSpeed moves per parameter in that phase; ``c`` the host seconds per tensor where the GPU
does not hide them. Records (JSON lines, with provenance) go to ``--out``; the fit is printed.

    python benchmarks/gpu_deepspeed_step.py --out deepspeed_step.jsonl
    python benchmarks/gpu_deepspeed_step.py --fit deepspeed_step.jsonl   # the fit again, on any machine
    python benchmarks/gpu_deepspeed_step.py --scale results/deepspeed_step_h200.jsonl H200 \
        results/deepspeed_step_h100.jsonl H100-SXM   # how much more of its bandwidth one GPU's step reaches
    python benchmarks/gpu_deepspeed_step.py --zero0-bytes results/deepspeed_step_h200.jsonl H200   # bytes per stage

``--scale`` compares the per-parameter slope ``b`` of each stage's step on two GPUs at their catalog bandwidths:
(b_ref × bandwidth_ref) / (b × bandwidth) is how much more of its datasheet bandwidth the second GPU's optimizer
kernels reach (the catalog's ``gpu_kernels.<GPU>.optimizer_hbm_scale`` is the median over the DeepSpeed stages).
For stage ``torch`` it prints the measured slope beside the one the catalog prices
(``torch_foreach_bytes_per_parameter`` at the Hopper curve's ``hbm_efficiency``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

M = 2**20
# (parameters, tensors): parameter count at a fixed tensor count, and tensor count at a fixed parameter count
CASES = ((64 * M, 64), (1024 * M, 64), (2048 * M, 64), (256 * M, 8), (256 * M, 1024))
WARMUP, TIMED = 3, 10


def build(parameters: int, tensors: int):
    import torch

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            size = parameters // tensors
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.randn(size, dtype=torch.bfloat16, device="cuda") * 0.02)
                for _ in range(tensors))

        def forward(self, x):
            return sum((w.float() * x).sum() for w in self.weights)

    return Flat()


def timed_phases(forward, backward, step, sync=None) -> dict:
    """Seconds of ``backward(forward())`` and ``step()``, each synchronised (``sync``, default
    ``torch.cuda.synchronize``), over :data:`TIMED` iterations after :data:`WARMUP`: ``{"backward_s", "step_s"}``
    (medians) and every iteration's (``backward_all_s``, ``step_all_s``)."""
    import torch

    sync = sync or torch.cuda.synchronize
    times = {"backward": [], "step": []}
    for i in range(WARMUP + TIMED):
        loss = forward()
        sync()
        t0 = time.perf_counter()
        backward(loss)
        sync()
        t1 = time.perf_counter()
        step()
        sync()
        t2 = time.perf_counter()
        if i >= WARMUP:
            times["backward"].append(t1 - t0)
            times["step"].append(t2 - t1)
    return dict(backward_s=statistics.median(times["backward"]), step_s=statistics.median(times["step"]),
                backward_all_s=times["backward"], step_all_s=times["step"])


def one_torch(parameters: int, tensors: int) -> dict:
    """The ``torch`` stage: megatron-core's optimizer step without fused kernels, apart from any model."""
    import torch

    model = build(parameters, tensors)
    main = [p.detach().float().requires_grad_(True) for p in model.parameters()]
    opt = torch.optim.AdamW(main, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01, foreach=True)
    x = torch.ones((), device="cuda")

    def backward(loss):
        loss.backward()
        for p, q in zip(model.parameters(), main):  # the fp32 main-gradient buffer
            q.grad = p.grad.float() if q.grad is None else q.grad.copy_(p.grad)
            p.grad = None

    def step():
        torch.nn.utils.clip_grad_norm_(main, 1.0, foreach=True)
        opt.step()
        with torch.no_grad():
            torch._foreach_copy_(list(model.parameters()), main)

    times = timed_phases(lambda: model(x), backward, step)
    out = dict(stage="torch", parameters=sum(p.numel() for p in model.parameters()), tensors=tensors,
               optimizer_class="AdamW(foreach)", zero_optimizer_class=None, **times)
    del opt, main, model
    torch.cuda.empty_cache()
    return out


def one(stage, parameters: int, tensors: int) -> dict:
    if stage == "torch":
        return one_torch(parameters, tensors)
    import deepspeed
    import torch
    from measure import ds_config

    model = build(parameters, tensors)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                           config=ds_config({"zero": stage}))
    x = torch.ones((), device="cuda")
    times = timed_phases(lambda: engine(x), engine.backward, engine.step)
    out = dict(stage=stage, parameters=sum(p.numel() for p in model.parameters()), tensors=tensors,
               optimizer_class=type(engine.basic_optimizer).__name__ if engine.basic_optimizer else None,
               zero_optimizer_class=type(engine.optimizer).__name__, **times)
    del engine, model
    torch.cuda.empty_cache()
    return out


def stage_fit(records: list, stage, phase: str) -> tuple:
    """Least squares of ``{phase}_s = a + b·N + c·T`` over one stage's records: ``(a, b, c)`` and the worst relative
    residual."""
    import numpy as np

    sel = [r for r in records if r["stage"] == stage]
    A = np.array([[1.0, r["parameters"], r["tensors"]] for r in sel])
    y = np.array([r[f"{phase}_s"] for r in sel])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return tuple(coef), float(np.abs((A @ coef - y) / y).max())


def fit(records: list) -> list[str]:
    """Least squares of seconds = a + b·N + c·T per stage and phase; bytes per parameter at the H200's 4.8 TB/s."""
    lines = [f"{'stage':>5} {'phase':<9} {'a (ms)':>8} {'b (ns/param)':>13} {'B/param @4.8TB/s':>17} "
             f"{'c (us/tensor)':>14} {'worst resid':>12}"]
    for stage in sorted({r["stage"] for r in records}, key=str):
        for phase in ("backward", "step"):
            (a, b, c), worst = stage_fit(records, stage, phase)
            lines.append(f"{stage!s:>5} {phase:<9} {a * 1e3:>8.2f} {b * 1e9:>13.4f} "
                         f"{b * 4.8e12:>17.1f} {c * 1e6:>14.1f} {worst:>11.1%}")
    return lines


def slopes(records: list) -> dict:
    """``b`` (seconds per parameter of the step phase) per stage (:func:`stage_fit`)."""
    return {stage: float(stage_fit(records, stage, "step")[0][1]) for stage in {r["stage"] for r in records}}


def scale_lines(ref: list, ref_gpu: str, records: list, gpu: str) -> tuple[list[str], float]:
    """Per DeepSpeed stage, how much more of its datasheet bandwidth ``gpu``'s optimizer step reaches than
    ``ref_gpu``'s, and their median; the ``torch`` stage's measured slope beside the catalog's price."""
    from workbench import catalog
    from workbench.timing import calibration

    bw_ref, bw = catalog.gpu(ref_gpu).hbm_gb_per_s * 1e9, catalog.gpu(gpu).hbm_gb_per_s * 1e9
    b_ref, b = slopes(ref), slopes(records)
    lines, scales = [f"{'stage':>5} {ref_gpu + ' ns/param':>16} {gpu + ' ns/param':>18} {'bandwidth scale':>16}"], []
    for stage in sorted(set(b_ref) & set(b) - {"torch"}, key=str):
        scales.append(b_ref[stage] * bw_ref / (b[stage] * bw))
        lines.append(f"{stage!s:>5} {b_ref[stage] * 1e9:>16.4f} {b[stage] * 1e9:>18.4f} {scales[-1]:>16.3f}")
    median = statistics.median(scales)
    lines.append(f"median over the DeepSpeed stages: {median:.3f}")
    if "torch" in b:
        cal = calibration()
        priced = (cal["gpu_optimizer"]["torch_foreach_bytes_per_parameter"]
                  / (bw * cal["curves"]["hopper"]["hbm_efficiency"]))
        lines.append(f"torch AdamW (foreach) on {gpu}: measured {b['torch'] * 1e9:.4f} ns/param, priced "
                     f"{priced * 1e9:.4f} at the curve's bandwidth ({priced / b['torch'] - 1:+.1%})")
    return lines, median


def stage_bytes(records: list, gpu: str) -> dict:
    """HBM bytes per parameter of each DeepSpeed stage's step on ``gpu``: the per-parameter slope (:func:`slopes`) at
    the bandwidth the time model gives that GPU's fused optimizer step (its datasheet × the Hopper curve's
    ``hbm_efficiency`` × its ``optimizer_hbm_scale``), what fused Adam's and DeepSpeed's step bytes must add up to."""
    from workbench import catalog
    from workbench.timing import calibration, gpu_kernel_constants

    bw = (catalog.gpu(gpu).hbm_gb_per_s * 1e9 * calibration()["curves"]["hopper"]["hbm_efficiency"]
          * gpu_kernel_constants(gpu).get("optimizer_hbm_scale", 1.0))
    return {stage: b * bw for stage, b in slopes(records).items() if stage != "torch"}


def write_zero0_bytes(records: list, gpu: str, path: Path) -> float:
    """Store ZeRO-0's DeepSpeed step bytes (stage 0's :func:`stage_bytes` less fused Adam's) as the catalog's
    ``deepspeed.zero0_step_bytes_per_parameter``, with its source; returns it."""
    import json

    cat = ROOT / "workbench" / "catalog" / "efficiency.json"
    cal = json.loads(cat.read_text())
    per_stage = stage_bytes(records, gpu)
    fused = cal["gpu_optimizer"]["bytes_per_parameter"]
    value = round(per_stage[0] - fused, 1)
    prov = records[0]["provenance"]
    cal["deepspeed"]["zero0_step_bytes_per_parameter"] = value
    cal["deepspeed"]["zero0_step_source"] = (
        "ZeRO-0's DeepSpeed step bytes per parameter beside fused Adam's: DeepSpeed's engine.step() apart from any "
        f"model (benchmarks/gpu_deepspeed_step.py --zero0-bytes, {path.name}: bf16 FusedAdam over 64 M-2 G parameters, "
        f"one {prov['gpu']}, DeepSpeed {prov['deepspeed']}, {prov['date_utc'][:10]}) moves "
        + ", ".join(f"{b:.1f} B at ZeRO-{st}" for st, b in sorted(per_stage.items()))
        + f" per parameter at the bandwidth the time model gives its optimizer: ZeRO-0's step (the bf16 engine's "
        f"FP16_Optimizer, no flattened partition) {value} B beside fused Adam's {fused}, where ZeRO-1/2 take the "
        "fitted step_bytes_per_parameter (which their micro-benchmark matches). The H100's records give the same "
        "within 1 B at its own optimizer scale. Not fitted on the corpus.")
    cat.write_text(json.dumps(cal, indent=2, ensure_ascii=False) + "\n")
    return value


def write_calibration(gpu: str, scale: float, lines: list, path: Path, ref: Path) -> None:
    """Store ``scale`` as the catalog's ``gpu_kernels.<gpu>.optimizer_hbm_scale`` with its source (the other
    constants of that GPU stay)."""
    import json

    from gpu_provenance import read_records

    prov = read_records(path)[0]["provenance"]
    cat = ROOT / "workbench" / "catalog" / "efficiency.json"
    cal = json.loads(cat.read_text())
    entry = cal.setdefault("gpu_kernels", {}).setdefault(gpu, {})
    stages = "; ".join(" ".join(line.split()) for line in lines[1:-2] if not line.startswith("torch"))
    entry["optimizer_hbm_scale"] = scale
    entry["optimizer_source"] = (
        f"DeepSpeed's optimizer step apart from any model (benchmarks/gpu_deepspeed_step.py: engine.step() of bf16 "
        f"FusedAdam over 64 M-2 G parameters in 8-1024 tensors, ZeRO-0/1/2, one {prov['gpu']}, torch "
        f"{prov['torch']}, DeepSpeed {prov['deepspeed']}, {prov['date_utc'][:10]}, {path.name}) against the same on "
        f"the H200 ({ref.name}): the per-parameter slope of each stage at the two GPUs' catalog bandwidths "
        f"(stage, H200 ns/param, this GPU's ns/param, scale: {stages}), median {scale}; it multiplies the bandwidth "
        "of the fused optimizer step (fused Adam's and DeepSpeed's step bytes). " + lines[-1] + ": torch's foreach "
        "AdamW keeps the curve's bandwidth. Not fitted on the corpus.")
    cat.write_text(json.dumps(cal, indent=2, ensure_ascii=False) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fit", type=Path, help="print the fit of an existing records file and stop")
    ap.add_argument("--stages", default="2,1,0", help="DeepSpeed ZeRO stages, and 'torch' for torch's AdamW")
    ap.add_argument("--cases", help="N:T pairs, comma-separated (parameters in Mi); default: the script's CASES")
    ap.add_argument("--scale", nargs=4, metavar=("REF_FILE", "REF_GPU", "FILE", "GPU"),
                    help="compare two GPUs' step slopes at their catalog bandwidths and stop")
    ap.add_argument("--zero0-bytes", nargs=2, metavar=("FILE", "GPU"),
                    help="print each stage's step bytes per parameter at the bandwidth the time model gives GPU and "
                         "stop")
    ap.add_argument("--write-calibration", action="store_true",
                    help="with --scale: store the median as the catalog's gpu_kernels.<GPU>.optimizer_hbm_scale; "
                         "with --zero0-bytes: store ZeRO-0's step bytes as deepspeed.zero0_step_bytes_per_parameter")
    args = ap.parse_args(argv)
    if args.zero0_bytes:
        from gpu_provenance import read_records

        path, gpu = Path(args.zero0_bytes[0]), args.zero0_bytes[1]
        records = read_records(path)
        for stage, b in sorted(stage_bytes(records, gpu).items()):
            print(f"ZeRO-{stage}: {b:.1f} B per parameter on {gpu}")
        if args.write_calibration:
            print(f"stored deepspeed.zero0_step_bytes_per_parameter {write_zero0_bytes(records, gpu, path)}")
        return 0
    if args.scale:
        from gpu_provenance import read_records

        ref, gpu = Path(args.scale[0]), args.scale[3]
        lines, median = scale_lines(read_records(ref), args.scale[1], read_records(Path(args.scale[2])), gpu)
        print("\n".join(lines))
        if args.write_calibration:
            write_calibration(gpu, round(median, 3), lines, Path(args.scale[2]), ref)
        return 0
    if args.fit:
        from gpu_provenance import read_records

        print("\n".join(fit(read_records(args.fit))))
        return 0
    import deepspeed
    from gpu_provenance import append_record, gpu_provenance

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    deepspeed.init_distributed(dist_backend="nccl")
    prov = gpu_provenance(deepspeed=deepspeed.__version__)
    records = []
    for stage in (s if s == "torch" else int(s) for s in args.stages.split(",")):
        cases = ([tuple(int(v) for v in c.split(":")) for c in args.cases.split(",")] if args.cases else
                 [(n // M, t) for n, t in CASES])
        for mi, tensors in cases:
            parameters = mi * M
            rec = dict(one(stage, parameters, tensors), provenance=prov)
            records.append(rec)
            print(f"stage {stage} N {rec['parameters'] / 1e6:7.1f} M T {tensors:5d}  backward "
                  f"{rec['backward_s'] * 1e3:7.2f} ms  step {rec['step_s'] * 1e3:7.2f} ms", flush=True)
            append_record(args.out, rec)
    print("\n".join(fit(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
