"""The same run launched from a shell (``workbench run ... --json``) and from a notebook cell
(``notebooks/launch_runs.ipynb`` executed by papermill): median step seconds of each and their ratio.

The notebook route keeps a kernel alive beside the ranks and refreshes the live monitor while they train; this
measures what that costs (target: step time within 3%). Runs alternate shell, notebook, notebook, shell, ... so
drift in the machine's load affects both routes alike; each route's figure is the median of its runs' median step
seconds (steps after the first two). Also printed: the spread over runs, and the CPU seconds each route used in all
(ranks, launcher, and the CLI process or the notebook kernel with its live monitor).

    python benchmarks/notebook_vs_shell.py                 # CPU: the notebook's tiny defaults, 2 processes
    python benchmarks/notebook_vs_shell.py --preset gpu    # a 1.3B-sized GPT on 1 GPU (default with CUDA)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRESETS = {
    # the notebook's own defaults (a teaching run on the CPU)
    "cpu": dict(engine="deepspeed", nproc=2, zero_stage=1, precision="bf16", num_layers=2, hidden_size=64,
                num_attention_heads=4, seq_length=32, vocab_size=512, steps=20, global_batch_size=16,
                data="learnable", lr=1e-2, gpu_name="H100-SXM"),
    # a GPT-3 1.3B-shaped model on one GPU: steps long enough that launcher overheads do not dominate
    "gpu": dict(engine="deepspeed", nproc=1, zero_stage=1, precision="bf16", num_layers=24, hidden_size=2048,
                num_attention_heads=16, seq_length=2048, vocab_size=50257, steps=20, global_batch_size=8,
                data="synthetic", lr=1e-4, gpu_name="H200"),
}
TARGET = 0.03


def cli_command(p: dict) -> list[str]:
    """``workbench run`` with the flags that give the notebook's specs."""
    return [sys.executable, "-m", "workbench.cli", "run", "--engine", p["engine"], "--nproc", str(p["nproc"]),
            "--zero", str(p["zero_stage"] if p["engine"] != "megatron" else 0), "--precision", p["precision"],
            "--layers", str(p["num_layers"]), "--hidden", str(p["hidden_size"]),
            "--heads", str(p["num_attention_heads"]), "--seq", str(p["seq_length"]), "--vocab", str(p["vocab_size"]),
            "--gbs", str(p["global_batch_size"]), "--steps", str(p["steps"]), "--data", p["data"],
            "--lr", str(p["lr"]), "--gpu", p["gpu_name"], "--json"]


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its waited-for descendants: the ranks, the launcher, and
    the CLI process or the notebook kernel."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        u = resource.getrusage(who)
        total += u.ru_utime + u.ru_stime
    return total


def run_shell(p: dict, env: dict) -> dict:
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    out = subprocess.run(cli_command(p), cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    try:
        rec = json.loads(out.stdout)
    except ValueError:
        return {"status": "failed", "reason": (out.stderr or out.stdout).strip()[-400:], "wall_seconds": wall}
    return {"status": rec["status"], "reason": rec["reason"], "wall_seconds": wall, "cpu_seconds": cpu,
            "median_step_seconds": rec["measured"]["median_step_seconds"], "losses": rec["losses"]}


def run_notebook(p: dict, work: Path, index: int) -> dict:
    import papermill

    from workbench.nbrecord import read_records

    out = work / f"launch_runs_{index}.ipynb"
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(str(ROOT / "notebooks" / "launch_runs.ipynb"), str(out), cwd=str(ROOT),
                                   parameters=p, kernel_name="python3", progress_bar=False)
    except Exception as exc:  # noqa: BLE001 - report, do not crash the comparison
        return {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[-400:]}",
                "wall_seconds": time.perf_counter() - t0}
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    rec = read_records(out)
    return {"status": rec.get("status"), "reason": "", "wall_seconds": wall, "cpu_seconds": cpu,
            "median_step_seconds": (rec.get("measured") or {}).get("median_step_seconds"),
            "losses": rec.get("losses")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None, help="default: gpu when CUDA is present")
    ap.add_argument("--repeats", type=int, default=2, help="runs per route (alternating)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--nproc", type=int, default=None)
    ap.add_argument("--out", default="", help="write the results as JSON here")
    args = ap.parse_args(argv)
    import torch

    on_gpu = torch.cuda.is_available()
    preset = args.preset or ("gpu" if on_gpu else "cpu")
    p = dict(PRESETS[preset])
    if args.steps:
        p["steps"] = args.steps
    if args.nproc:
        p["nproc"] = args.nproc
    if args.repeats < 1:
        print("notebook_vs_shell: --repeats must be >= 1", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nb-vs-shell-"))
    env = {**os.environ, "WORKBENCH_HOME": str(work / "home"),
           "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x)}
    env.setdefault("TORCH_EXTENSIONS_DIR", "/work/.cache/torch_extensions")
    if env.get("TORCH_CUDA_ARCH_LIST", "").endswith("a"):
        env["TORCH_CUDA_ARCH_LIST"] = env["TORCH_CUDA_ARCH_LIST"].rstrip("a")
    os.environ.update(env)  # the notebook kernel inherits it
    print(f"preset {preset} ({'CUDA' if on_gpu else 'CPU'}): {json.dumps(p)}", flush=True)
    order = []
    for i in range(args.repeats):
        order += ["shell", "notebook"] if i % 2 == 0 else ["notebook", "shell"]
    runs = {"shell": [], "notebook": []}
    for i, route in enumerate(order):
        r = run_shell(p, env) if route == "shell" else run_notebook(p, work, i)
        runs[route].append(r)
        sec = r.get("median_step_seconds")
        print(f"{route:9} {r['status']:10} median step {'-' if sec is None else f'{sec:.4f} s':>10}  "
              f"wall {r['wall_seconds']:.1f} s  CPU {r.get('cpu_seconds', 0):.1f} s  {r.get('reason') or ''}",
              flush=True)
    summary = {}
    for route, rs in runs.items():
        secs = [r["median_step_seconds"] for r in rs if r["status"] == "completed" and r.get("median_step_seconds")]
        summary[route] = statistics.median(secs) if secs else None
    print()
    print(f"{'route':10}{'runs':>6}{'median step s':>15}{'min':>9}{'max':>9}{'CPU s/run':>11}")
    for route, rs in runs.items():
        val = summary[route]
        secs = [r["median_step_seconds"] for r in rs if r.get("median_step_seconds")]
        cpu = statistics.median([r.get("cpu_seconds", 0.0) for r in rs])
        print(f"{route:10}{len(rs):>6}{'-' if val is None else f'{val:.4f}':>15}"
              f"{min(secs, default=0):>9.4f}{max(secs, default=0):>9.4f}{cpu:>11.1f}")
    ok = summary["shell"] and summary["notebook"]
    result = {"preset": preset, "params": p, "runs": runs, "summary": summary}
    if ok:
        ratio = summary["notebook"] / summary["shell"]
        result["ratio"] = ratio
        within = abs(ratio - 1) <= TARGET
        print(f"notebook / shell step time: {ratio:.3f} ({100 * (ratio - 1):+.1f}%; target within "
              f"{100 * TARGET:.0f}%: {'yes' if within else 'no'})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
