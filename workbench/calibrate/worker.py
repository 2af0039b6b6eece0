"""Collective measurements inside a process group: ``python -m workbench.calibrate.worker --out FILE`` under
``torchrun`` (one node: ``--nproc_per_node N``; several nodes: the user's launcher with ``--nnodes``).

Each rank takes its GPU (``LOCAL_RANK``) and NCCL, or gloo on CPUs, runs
:func:`workbench.calibrate.measure.measure_collectives` and rank 0 writes one JSON object:
``{ranks, local_ranks, nodes, backend, link, points: [{kind, bytes, seconds}], nccl_bytes}``.
``link`` is ``inter_node`` when the group spans more than one node, else ``intra_node``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def run_in_group(*, max_bytes: int, iters: int, kinds=None) -> dict:
    """Initialise the default process group from the launcher's environment (unless it already is), measure, and
    return the result on every rank."""
    import torch
    import torch.distributed as dist

    from workbench.calibrate import measure

    device = "cuda" if torch.cuda.is_available() else "cpu"
    outside_before = None
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        outside_before = measure.measure_context_bytes()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    world = dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    points = measure.measure_collectives(measure.message_sizes(max_bytes), iters=iters, device=device,
                                         kinds=kinds or measure.COLLECTIVE_KINDS)
    nccl_bytes = None
    if device == "cuda":
        torch.cuda.synchronize()
        nccl_bytes = max(0, measure.outside_allocator_bytes() - outside_before)
    nodes = max(1, world // max(local, 1))
    return {"ranks": world, "local_ranks": local, "nodes": nodes, "backend": dist.get_backend(),
            "link": "inter_node" if nodes > 1 else "intra_node", "points": points, "nccl_bytes": nccl_bytes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes")
    parser.add_argument("--max-bytes", type=int, default=2**28, help="largest message, bytes")
    parser.add_argument("--iters", type=int, default=5, help="timed calls per size")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    result = run_in_group(max_bytes=args.max_bytes, iters=args.iters)
    if dist.get_rank() == 0:
        with open(args.out, "w") as fh:
            json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
