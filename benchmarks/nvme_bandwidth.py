"""The local disk's read and write rates as DeepSpeed's NVMe offload sees them: one process, DeepSpeed's ``async_io``
handle at the ``aio`` settings a ds_config gets by default (1 MiB blocks, queue depth 8, one thread, overlapped
events), a page-locked host tensor written to and read back from a file under a directory (O_DIRECT: the page cache
is not in the way) by :func:`workbench.calibrate.measure.measure_nvme`, the measurement
``workbench calibrate --nvme-dir`` stores in a profile.

ZeRO-Infinity's swappers move every offloaded optimizer state and parameter through such a handle, so these are the
rates the time model's NVMe terms take (``ClusterSpec.nvme_read_gb_per_s`` / ``nvme_write_gb_per_s``, per node).
Each size is written and read ``--repeats`` times; the median GB/s (1e9 bytes) of each is printed and, with
``--out``, appended as one JSON record with its provenance (the filesystem and block device of the directory).

    python benchmarks/nvme_bandwidth.py /local/nvme/dir [--gib 1 4] [--repeats 3] [--out results/nvme.jsonl]

Needs DeepSpeed's async_io op (libaio): ``python -c "from deepspeed.ops.op_builder import AsyncIOBuilder;
AsyncIOBuilder().load()"`` builds it.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def mount_of(path: Path) -> dict:
    """The mount (device, mount point, filesystem type) that holds ``path``: the longest mount point above it."""
    best = {}
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, point, fstype = line.split()[:3]
            if str(path).startswith(point.rstrip("/") + "/") or str(path) == point or point == "/":
                if len(point) >= len(best.get("mount_point", "")):
                    best = {"device": dev, "mount_point": point, "fstype": fstype}
    except OSError:
        pass
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from gpu_provenance import append_record, gpu_provenance
    from workbench.calibrate.measure import NVME_AIO_SETTINGS, measure_nvme

    args.directory.mkdir(parents=True, exist_ok=True)
    free = os.statvfs(args.directory)
    rec = {"kind": "nvme_bandwidth", "directory": str(args.directory), "aio": NVME_AIO_SETTINGS,
           "mount": mount_of(args.directory.resolve()), "free_bytes": free.f_bavail * free.f_frsize,
           "provenance": gpu_provenance(), "sizes": []}
    for gib in args.gib:
        r = measure_nvme(args.directory, int(gib * 2**30), repeats=args.repeats)
        rec["sizes"].append({"gib": gib, "write_gb_per_s": r["write"], "read_gb_per_s": r["read"],
                             "writes": r["writes"], "reads": r["reads"]})
        each = "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in r[k])}" for k in ("writes", "reads"))
        print(f"{gib:g} GiB: write {r['write']:.2f} GB/s, read {r['read']:.2f} GB/s ({each})", flush=True)
    print(f"{rec['mount']}")
    append_record(args.out, rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
