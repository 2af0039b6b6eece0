"""DeepSpeed ZeRO-3's optimizer step on one CUDA GPU, apart from any model, as ``sub_group_size`` cuts the partition
into more sub-groups: seconds of ``engine.step()`` (and of the backward) against the number of sub-groups ``G``,
the parameter count ``N`` and the number of parameter tensors ``T``.

ZeRO-3 runs its optimizer one sub-group after another (stage3.py ``step``, DeepSpeed 0.19.8): for each it flattens
and up-casts the sub-group's gradients, clears every 16-bit gradient of the model (``zero_grad`` inside
``_prepare_fp32_grad_for_sub_group`` walks all parameters, not the sub-group's), unscales and clips, runs the
optimizer and copies the result back. The bytes moved do not depend on ``G``; the launches, the Python and the walk
over all ``T`` tensors do. This script times it with the model taken away: a module of ``T`` bf16 parameters
holding ``N`` elements in all (each its own direct parameter, so ZeRO-3's forward hook gathers them), whose
"forward" is one reduction per tensor, trained by ``deepspeed.initialize`` with the corpus ds_config
(``benchmarks/corpus/measure.py``: bf16, AdamW → FusedAdam, clipping 1.0) at ZeRO-3 and the case's
``sub_group_size``, one process. Each case: 3 warm-up and 10 timed iterations, each phase synchronised
(``gpu_deepspeed_step.timed_phases``), ``G`` read off the engine (``len(optimizer.fp16_groups)``).

The fit, by least squares over the cases: ``step_s = a + b·N + g·G + h·G·T``, ``g`` seconds per sub-group and
``h`` per sub-group and tensor (the ``zero_grad`` walk). Records (JSON lines, with provenance) go to ``--out``.

    python benchmarks/gpu_zero3_sub_groups.py --out zero3_sub_groups.jsonl
    python benchmarks/gpu_zero3_sub_groups.py --fit results/zero3_sub_groups_h100.jsonl
    python benchmarks/gpu_zero3_sub_groups.py --dry-run   # the same code path on CPU (gloo), tiny cases, no fit

On a CPU-only machine ``--dry-run`` checks the code path (DeepSpeed's CPU accelerator, gloo) on
:data:`DRY_CASES`; its seconds are not the GPU's and it writes no records.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

M = 2**20
# (parameters in Mi, tensors, sub_group_size): G from 1 to about 128 at two tensor counts, and the same G at a
# tenth of the parameters
CASES = ((1024, 64, 10**9), (1024, 64, 2 * 10**8), (1024, 64, 5 * 10**7), (1024, 64, 2 * 10**7),
         (256, 1024, 10**9), (256, 1024, 2 * 10**7), (256, 1024, 2 * 10**6),
         (256, 64, 10**9), (256, 64, 4 * 10**6))
# the dry run's cases, in elements (not Mi): one sub-group, one per tensor, and a few tensors each
DRY_CASES = ((1 << 16, 8, 10**9), (1 << 16, 8, 1 << 13), (1 << 16, 32, 1 << 13))


def build(parameters: int, tensors: int, device: str = "cuda"):
    import torch

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            size = parameters // tensors
            for i in range(tensors):
                self.register_parameter(f"w{i}", torch.nn.Parameter(
                    torch.randn(size, dtype=torch.bfloat16, device=device) * 0.02))

        def forward(self, x):
            return sum((w.float() * x).sum() for w in self.parameters())

    return Flat()


def one(parameters: int, tensors: int, sub_group_size: int, dry: bool = False) -> dict:
    import deepspeed
    import torch
    from gpu_deepspeed_step import timed_phases
    from measure import ds_config

    device = "cpu" if dry else "cuda"
    model = build(parameters, tensors, device)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                           config=ds_config({"zero": 3, "sgs": sub_group_size}))
    x = torch.ones((), device=device)
    times = timed_phases(lambda: engine(x), engine.backward, engine.step, sync=(lambda: None) if dry else None)
    out = dict(stage=3, parameters=parameters // tensors * tensors, tensors=tensors, sub_group_size=sub_group_size,
               sub_groups=len(engine.optimizer.fp16_groups),
               optimizer_class=type(engine.basic_optimizer).__name__ if engine.basic_optimizer else None,
               zero_optimizer_class=type(engine.optimizer).__name__, **times)
    del engine, model
    if not dry:
        torch.cuda.empty_cache()
    return out


def fit(records: list) -> tuple:
    """Least squares of ``step_s = a + b·N + g·G + h·G·T``: ``(a, b, g, h)`` and each record's relative residual."""
    import numpy as np

    A = np.array([[1.0, r["parameters"], r["sub_groups"], r["sub_groups"] * r["tensors"]] for r in records])
    y = np.array([r["step_s"] for r in records])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return tuple(float(c) for c in coef), list((A @ coef - y) / y)


def fit_lines(records: list) -> list[str]:
    (a, b, g, h), resid = fit(records)
    lines = [f"{'N (M)':>8} {'T':>5} {'sub_group_size':>14} {'G':>4} {'backward ms':>12} {'step ms':>9} "
             f"{'fit ms':>8} {'resid':>7}"]
    for r, e in zip(records, resid):
        lines.append(f"{r['parameters'] / 1e6:>8.1f} {r['tensors']:>5} {r['sub_group_size']:>14.0e} "
                     f"{r['sub_groups']:>4} {r['backward_s'] * 1e3:>12.2f} {r['step_s'] * 1e3:>9.2f} "
                     f"{r['step_s'] * (1 + e) * 1e3:>8.2f} {e:>+7.1%}")
    lines.append(f"step_s = a + b·N + g·G + h·G·T: a {a * 1e3:.2f} ms, b {b * 1e9:.4f} ns/param, "
                 f"g {g * 1e6:.1f} us per sub-group, h {h * 1e9:.1f} ns per sub-group and tensor; "
                 f"worst residual {max(abs(e) for e in resid):.1%}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fit", type=Path, help="print the fit of an existing records file and stop")
    ap.add_argument("--dry-run", action="store_true", help="tiny cases on CPU with gloo: checks the code path")
    args = ap.parse_args(argv)
    from gpu_provenance import read_records

    if args.fit:
        print("\n".join(fit_lines(read_records(args.fit))))
        return 0
    import deepspeed
    from gpu_provenance import append_record, gpu_provenance

    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29512"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                       ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    deepspeed.init_distributed(dist_backend="gloo" if args.dry_run else "nccl")
    prov = gpu_provenance(deepspeed=deepspeed.__version__)
    records = []
    for n, tensors, sgs in (DRY_CASES if args.dry_run else ((mi * M, t, s) for mi, t, s in CASES)):
        rec = dict(one(n, tensors, sgs, args.dry_run), provenance=prov)
        records.append(rec)
        print(f"N {rec['parameters'] / 1e6:7.1f} M T {tensors:5d} sub_group_size {sgs:.0e} G {rec['sub_groups']:4d}"
              f"  backward {rec['backward_s'] * 1e3:7.2f} ms  step {rec['step_s'] * 1e3:7.2f} ms", flush=True)
        if not args.dry_run:
            append_record(args.out, rec)
    if not args.dry_run:
        print("\n".join(fit_lines(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
