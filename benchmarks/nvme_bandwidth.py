"""The local disk's read and write rates as DeepSpeed's NVMe offload sees them: one process, DeepSpeed's ``async_io``
handle at the ``aio`` settings a ds_config gets by default (1 MiB blocks, queue depth 8, one thread, overlapped
events), page-locked host tensors written to and read back from files under a directory (O_DIRECT: the page cache
is not in the way).

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
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

AIO_DEFAULTS = dict(block_size=1048576, queue_depth=8, single_submit=False, overlap_events=True,
                    intra_op_parallelism=1)
"""DeepSpeed 0.19's ``aio`` defaults (deepspeed/runtime/swap_tensor/constants.py)."""


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


def rates(handle, torch, directory: Path, gib: float, repeats: int) -> dict:
    """Median write and read GB/s of ``gib`` GiB through ``handle``, and every repeat's."""
    n = int(gib * 2**30)
    buf = torch.empty(n, dtype=torch.uint8).pin_memory()
    buf.random_(0, 255)
    back = torch.empty(n, dtype=torch.uint8).pin_memory()
    path = str(directory / f"nvme_bandwidth_{n}.bin")
    writes, reads = [], []
    try:
        for _ in range(repeats):
            t = time.perf_counter()
            if handle.sync_pwrite(buf, path) < 0:
                raise OSError(f"async_io could not write {path}")
            os.sync()
            writes.append(n / (time.perf_counter() - t) / 1e9)
            t = time.perf_counter()
            if handle.sync_pread(back, path) < 0:
                raise OSError(f"async_io could not read {path}")
            reads.append(n / (time.perf_counter() - t) / 1e9)
        same = bool(torch.equal(buf[: 1 << 20], back[: 1 << 20]))
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {"gib": gib, "write_gb_per_s": statistics.median(writes), "read_gb_per_s": statistics.median(reads),
            "writes": writes, "reads": reads, "read_back_matches": same}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder

    from gpu_provenance import append_record, gpu_provenance

    args.directory.mkdir(parents=True, exist_ok=True)
    handle = AsyncIOBuilder().load(verbose=False).aio_handle(**AIO_DEFAULTS)
    free = os.statvfs(args.directory)
    rec = {"kind": "nvme_bandwidth", "directory": str(args.directory), "aio": AIO_DEFAULTS,
           "mount": mount_of(args.directory.resolve()), "free_bytes": free.f_bavail * free.f_frsize,
           "provenance": gpu_provenance(), "sizes": []}
    for gib in args.gib:
        r = rates(handle, torch, args.directory, gib, args.repeats)
        rec["sizes"].append(r)
        print(f"{gib:g} GiB: write {r['write_gb_per_s']:.2f} GB/s, read {r['read_gb_per_s']:.2f} GB/s "
              f"(writes {', '.join(f'{x:.2f}' for x in r['writes'])}; reads {', '.join(f'{x:.2f}' for x in r['reads'])})"
              f"{'' if r['read_back_matches'] else '  READ BACK DIFFERS'}", flush=True)
    print(f"{rec['mount']}")
    append_record(args.out, rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
