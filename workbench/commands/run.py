"""``workbench run``: launch a real training run (DeepSpeed, megatron-core or the hybrid), wait, print its record.

On a machine without CUDA the run goes to the CPU (gloo): the cluster becomes one node of ``--nproc`` "cpu"
devices (catalog entry ``cpu``) whatever the GPU flags say.
"""
from __future__ import annotations

import sys


def add_parser(sub):
    from workbench.commands.common import add_spec_arguments

    p = sub.add_parser("run", help="launch a real training run and print its record",
                       description=__doc__.strip().splitlines()[0])
    add_spec_arguments(p)
    p.add_argument("--nproc", type=int, default=None, help="processes (GPUs, or CPU ranks) per node")
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--data", default="synthetic", help="synthetic | learnable | text:PATH | indexed:PREFIX")
    p.add_argument("--tiny", action="store_true", help="train the package's tiny teaching model "
                                                      "(2 layers, hidden 64, seq 32, vocab 512)")
    p.add_argument("--timeout", type=float, default=None, help="seconds before the run is stopped")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--nvme-path", metavar="DIR", default=None,
                   help="with offload to nvme: ZeRO-Infinity's swap folder on the node's local NVMe (default "
                        "/local_nvme), written into the run's ds_config")
    p.add_argument("--trainer", choices=["engine", "hf"], default="engine",
                   help="hf: train a --model hf:PATH through transformers' Trainer with the Trainer's \"auto\" "
                        "ds_config (default: the DeepSpeed engine directly)")
    p.add_argument("--launcher", choices=["deepspeed", "torchrun"], default=None,
                   help="the launcher that starts the ranks (default: the one `workbench export launch` writes for "
                        "the plan: DeepSpeed's for engine deepspeed, torchrun for megatron and the hybrid)")
    p.add_argument("--json", action="store_true", help="print the run record as JSON")
    p.set_defaults(func=run)
    return p


def resolve_specs(args):
    """(model, cluster, plan, nproc) from the flags; CPU cluster when CUDA is absent."""
    from workbench.commands.common import specs_from_args
    from workbench.runs.launcher import cuda_available

    if args.nproc is not None:
        if args.nproc < 1:
            raise ValueError(f"--nproc {args.nproc} must be >= 1 (processes per node)")
        args.gpus_per_node = args.nproc
    if not cuda_available():  # the CPU: one node of nproc "cpu" devices, gloo
        args.gpu, args.nodes = "cpu", 1
    if args.tiny and getattr(args, "trainer", "engine") == "hf":
        raise ValueError("--tiny trains the package's megatron-core teaching model; --trainer hf trains a Hugging "
                         "Face model: give --model hf:PATH (a config.json or model directory) instead of --tiny")
    if args.tiny:
        for flag, value in (("layers", 2), ("hidden", 64), ("heads", 4), ("vocab", 512), ("seq", 32)):
            if getattr(args, flag, None) is None:
                setattr(args, flag, value)
    model, cluster, plan = specs_from_args(args)
    return model, cluster, plan, cluster.gpus_per_node


def summary(record: dict) -> dict:
    measured = record.get("measured") or {}
    predicted = record.get("predicted") or {}
    return {
        "run_id": record["run_id"],
        "status": record["status"],
        "reason": record.get("reason") or "",
        "warning": record.get("warning") or "",
        "losses": record.get("losses", measured.get("losses", [])),
        "measured": {"peak_memory_bytes": measured.get("peak_memory_bytes", {}),
                     "median_step_seconds": measured.get("median_step_seconds")},
        "predicted": {"per_gpu_peak_bytes": predicted.get("per_gpu_peak_bytes"),
                      "allocated_bytes": predicted.get("allocated_bytes"),
                      "step_seconds": predicted.get("step_seconds"),
                      "memory_comparable": predicted.get("memory_comparable", True),
                      **({"memory_not_comparable_reason": predicted["memory_not_comparable_reason"]}
                         if predicted.get("memory_not_comparable_reason") else {})},
        "run_dir": record.get("run_dir"),
        "log_path": record.get("log_path"),
    }


def print_summary(s: dict, out=None) -> None:
    out = sys.stdout if out is None else out
    def gib(b):
        return "-" if b is None else f"{b / 2**30:.3f} GiB"

    print(f"run {s['run_id']}: {s['status']}" + (f" — {s['reason']}" if s["reason"] else ""), file=out)
    if s["warning"]:
        print(f"warning: {s['warning']}", file=out)
    if s["losses"]:
        print("losses: " + " ".join(f"{x:.4f}" for x in s["losses"]), file=out)
    mem = s["measured"]["peak_memory_bytes"]
    peak = max(mem.values()) if mem else None
    sec = s["measured"]["median_step_seconds"]
    print(f"{'':22}{'measured':>14}{'predicted':>14}", file=out)
    print(f"{'peak memory per rank':22}{gib(peak):>14}{gib(s['predicted']['per_gpu_peak_bytes']):>14}"
          + ("  (not comparable: CPU RSS vs GPU bytes)" if s["predicted"].get("memory_comparable") is False else ""),
          file=out)
    p_sec = s["predicted"]["step_seconds"]
    print(f"{'step seconds':22}{'-' if sec is None else f'{sec:.4f}':>14}"
          f"{'-' if p_sec is None else f'{p_sec:.4f}':>14}", file=out)
    if s["predicted"].get("memory_comparable") is False and p_sec is not None:
        from workbench.runs.compare import CPU_STEP_NOTE

        print(f"note: {CPU_STEP_NOTE}", file=out)
    print(f"run directory: {s['run_dir']}", file=out)


def run(args) -> int:
    from workbench.cli import print_json
    from workbench.runs import launch
    from workbench.runs.prepare import run_launcher

    from workbench.commands.common import progress_bar

    model, cluster, plan, nproc = resolve_specs(args)
    launcher = run_launcher(plan, getattr(args, "launcher", None))  # default: what `export launch` writes
    handle = launch(model, cluster, plan, steps=args.steps, nproc=nproc, data=args.data, lr=args.lr,
                    timeout_seconds=args.timeout, trainer=args.trainer, launcher=launcher,
                    ds_options={"nvme_path": args.nvme_path} if args.nvme_path else None)
    # the run id first, then per-step progress, both on stderr (stdout stays the record)
    processes = f"{nproc} process{'es' if nproc != 1 else ''}"
    print(f"run {handle.run_id}: started — {plan.engine} under {launcher}, {processes} on {cluster.gpu.name}, "
          f"{args.steps} steps; log {handle.log_path}", file=sys.stderr, flush=True)
    try:
        with progress_bar(total=args.steps, desc=f"run {handle.run_id}", unit="step") as bar:
            while True:
                handle.wait(0.5)
                done_steps = handle.progress()[0]
                if done_steps > bar.n:
                    bar.update(done_steps - bar.n)
                if handle.done:
                    break
    except KeyboardInterrupt:
        handle.stop()
        handle.wait(30)
    s = summary(handle.record())
    if args.json:
        print_json(s)
    else:
        print_summary(s)
    return 0 if s["status"] == "completed" else 1
