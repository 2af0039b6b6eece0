"""Provenance of a GPU measurement: when, on what device and driver, with which Python and torch.

Every benchmark that writes GPU numbers into the repository stamps them with :func:`gpu_provenance`, so a record
says where it came from (``date_utc``, ``host_cpu_cores``, ``python``, ``torch``, ``cuda`` and, when a CUDA device
is visible, ``gpu``, ``gpu_total_bytes``, ``gpu_capability``, ``driver``).
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess


def gpu_provenance(**extra) -> dict:
    """The provenance fields of a measurement made now on CUDA device 0, plus ``extra`` fields.

    ``driver`` is what ``nvidia-smi --query-gpu=driver_version`` prints; when that cannot run the field says why
    (recorded, not fatal).
    """
    import torch

    out = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host_cpu_cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, **extra}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=torch.cuda.get_device_name(0), gpu_total_bytes=p.total_memory,
                   gpu_capability=f"{p.major}.{p.minor}")
        try:
            out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception as exc:  # recorded, not fatal
            out["driver"] = f"unknown: {exc}"
    return out


def append_record(path, record: dict) -> None:
    """Append ``record`` as one JSON line to ``path`` (a :class:`pathlib.Path`; nothing when ``None``), at once, so
    that a measurement cut short by a time limit keeps what it finished."""
    if path is None:
        return
    import json

    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def read_records(path) -> list:
    """The records :func:`append_record` wrote to ``path``, one per non-empty line."""
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
