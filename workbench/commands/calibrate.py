"""workbench calibrate: measure this machine (GEMMs at a model's shapes, collectives, host link, the host's dispatch
speed, CPU Adam, CUDA context and allocator reserve) and save a hardware profile that ``workbench estimate
--profile`` uses.

Under a launcher (``torchrun --nnodes N ... -m workbench.cli calibrate``) every rank measures the collectives
across the nodes and rank 0 writes the profile.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path


def add_parser(sub) -> None:
    parser = sub.add_parser("calibrate", help="measure this machine and save a hardware profile",
                            description=__doc__)
    parser.add_argument("--out", metavar="PROFILE", default="local",
                        help="profile name (saved in the workbench data folder's profiles/) or a .json path "
                             "(default: local)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (about 2 minutes on a GPU node)")
    parser.add_argument("--nproc", type=int, help="processes for collectives (default: visible GPUs; 2 on a CPU; "
                                                  "1 skips them)")
    parser.add_argument("--model", metavar="NAME", help="catalog model whose GEMM shapes are measured "
                                                        "(default llama3-8b on GPUs, gpt3-125m on a CPU)")
    parser.add_argument("--tp", default="1,2,4,8", metavar="LIST", help="tensor-parallel degrees of the GEMM "
                                                                        "shapes (default 1,2,4,8)")
    parser.add_argument("--gpu", metavar="NAME", help="catalog GPU (default: matched from the device name)")
    parser.add_argument("--cpu-adam", choices=["torch", "deepspeed"], default="torch",
                        help="CPU Adam to time: torch.optim.AdamW or DeepSpeedCPUAdam (compiles on first use; only "
                             "its rate prices DeepSpeed's optimizer offload)")
    parser.add_argument("--max-message-mib", type=float, help="largest collective message, MiB")
    parser.add_argument("--skip", default="", metavar="LIST",
                        help="measurements to skip: gemm,memory_bandwidth,host_link,host_dispatch,cpu_adam,memory,"
                             "collectives")
    parser.add_argument("--nvme-dir", metavar="DIR",
                        help="a folder on the node's NVMe: measure its read and write rates through DeepSpeed's "
                             "async_io (needs DeepSpeed and libaio), what ZeRO-Infinity's swaps run at; estimates "
                             "with this profile take them as the cluster's NVMe rates")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON instead of the table")
    parser.set_defaults(func=run)


def output_path(out: str) -> Path:
    """``--out``: a path when it ends in .json or names a folder, else a name in the user's profiles folder."""
    from workbench.calibrate.profile import user_profiles_dir

    if out.endswith(".json") or "/" in out or "\\" in out:
        return Path(out).expanduser()
    return user_profiles_dir() / f"{out}.json"


MAX_MESSAGE_MIB = 2.0**20
"""Largest ``--max-message-mib`` accepted (1 TiB)."""


KERNEL_FILE_SYSTEMS = {"/proc": "process", "/sys": "sysfs", "/dev": "device"}
"""Folders of the kernel's pseudo file systems, where no profile can be kept (``os.access`` says yes to root)."""


def kernel_file_system(path: Path):
    """``(folder, kind)`` of the kernel pseudo file system an absolute, resolved ``path`` lies in, else ``None``."""
    for root, kind in KERNEL_FILE_SYSTEMS.items():
        if path == Path(root) or Path(root) in path.parents:
            return root, kind
    return None


def check_output_path(path: Path, out: str) -> None:
    """``ValueError`` naming ``--out`` when the profile could not be saved at ``path``, checked before the
    measurements (minutes) rather than after them: an empty name, a folder, a device, pipe or other file that is
    not a regular one, a path in /proc, /sys or /dev (through links too), a file or folder it cannot write."""
    if not out.strip():
        raise ValueError(f"--out {out!r} is empty; give a profile name or a .json file path")
    if path.is_dir():
        raise ValueError(f"--out {out} is a folder; give a profile name or a .json file path")
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise ValueError(f"--out {out}: cannot resolve the path ({getattr(exc, 'strerror', None) or exc})") from None
    kernel = kernel_file_system(resolved)
    if kernel is not None:
        shown = f" ({resolved})" if str(resolved) != str(path) else ""
        raise ValueError(f"--out {out}{shown} is in {kernel[0]}, the kernel's {kernel[1]} file system; a profile "
                         f"cannot be saved there")
    if path.exists():
        if not path.is_file():
            raise ValueError(f"--out {out} is not a regular file (a device, pipe or socket); give a .json file path")
        if not os.access(path, os.W_OK):
            raise ValueError(f"--out {out}: cannot write the file")
    for parent in path.parents:
        if not parent.exists():
            continue
        if not parent.is_dir():
            raise ValueError(f"--out {out}: {parent} is a file, not a folder")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"--out {out}: cannot write into the folder {parent}")
        return


def check_max_message_mib(value) -> None:
    """``ValueError`` for a ``--max-message-mib`` that is not a finite size of at least one byte, up to 1 TiB."""
    if value is None:
        return
    if not math.isfinite(value) or value * 2**20 < 1:
        raise ValueError(f"--max-message-mib {value:g} must be a finite size > 0 MiB (at least one byte)")
    if value > MAX_MESSAGE_MIB:
        raise ValueError(f"--max-message-mib {value:g} is larger than the largest supported value "
                         f"{MAX_MESSAGE_MIB:,.0f} MiB (1 TiB)")


def _int_list(text: str, flag: str) -> tuple:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{flag}={text!r}: give integers separated by commas") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag}={text!r}: give positive integers")
    return values


def render(profile, path=None) -> str:
    """Summary table: each measured quantity next to the catalog number estimates use without a profile."""
    from workbench.calibrate.profile import compare_with_datasheet, format_value

    lines = [f"profile {profile.label}",
             f"        torch {profile.torch_version}" + (f", CUDA {profile.cuda_version}" if profile.cuda_version else "")
             + (f", NCCL {profile.nccl_version}" if profile.nccl_version else "")
             + (f", driver {profile.driver}" if profile.driver else "")
             + f"; applies to --gpu {profile.device_name()}",
             "", f"{'quantity':<34} {'measured':>12} {'catalog':>12} {'ratio':>7}  unit"]
    for r in compare_with_datasheet(profile):
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        unit = "" if r["unit"] in ("of peak", "of allocated") else r["unit"]
        measured, catalog = format_value(r["measured"], r["unit"]), format_value(r["datasheet"], r["unit"])
        lines.append(f"{r['quantity']:<34} {measured:>12} {catalog:>12} {ratio:>7}  {unit}")
    for note in profile.notes:
        lines.append(f"note: {note}")
    if path is not None:
        lines += ["", f"saved {path}", f"use it: workbench estimate --profile {path} ..."]
    return "\n".join(lines)


def run(args) -> int:
    from workbench.calibrate import CalibrationSettings, calibrate

    path = output_path(args.out)
    name = path.stem if path.suffix == ".json" else args.out
    from workbench.calibrate.runner import PARTS as parts

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(parts)
    if unknown:
        raise ValueError(f"--skip {','.join(sorted(unknown))}: not a measurement (known: {','.join(parts)})")
    if args.nproc is not None and args.nproc < 1:
        raise ValueError(f"--nproc {args.nproc} must be >= 1")
    check_max_message_mib(args.max_message_mib)
    check_output_path(path, args.out)
    from workbench import catalog

    if args.model is not None:  # named before the measurements start, not after the first of them
        catalog.model(args.model)
    if args.gpu is not None:  # a CPU run ignores it, but a name the catalog lacks is still a mistake
        catalog.gpu(args.gpu)
    settings = CalibrationSettings(
        name=name, quick=args.quick, model=args.model, tensor_parallel=_int_list(args.tp, "--tp"),
        nproc=args.nproc, gpu=args.gpu, cpu_adam=args.cpu_adam,
        max_message_bytes=int(args.max_message_mib * 2**20) if args.max_message_mib else None,
        parts=tuple(p for p in parts if p not in skip), nvme_dir=args.nvme_dir)
    from workbench.commands.common import progress_bar

    # progress on stderr: a counter of finished measurements, each measurement's line above it
    with progress_bar(desc="calibrate", unit=" measurements") as bar:
        def say(line: str) -> None:
            bar.write(f"  {line}", file=sys.stderr)
            bar.update(1)

        profile = calibrate(settings, progress=say)
    if profile is None:  # a rank other than 0 of a launched job
        return 0
    try:
        profile.save(path)
    except OSError as exc:
        raise ValueError(f"--out {args.out}: cannot save the profile at {path} "
                         f"({exc.strerror or exc})") from None
    if args.json:
        from workbench.cli import print_json

        print_json(profile.to_dict())
    else:
        print(render(profile, path))
    return 0
