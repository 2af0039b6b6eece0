"""Start a prepared run's processes and keep them tied to the process that started them.

:func:`spawn` starts ``launch.sh`` in a session of its own with four variables in its environment, which the
launcher passes on to every rank:

* ``WORKBENCH_RUN_TOKEN`` — a random token naming this run's processes. Nothing is ever signalled on a recorded
  process id alone: :func:`run_processes` finds the processes by this token in ``/proc/PID/environ``
  (``RunStore.reconcile`` and the ranks use it), and :func:`same_process` checks a recorded start time.
* ``WORKBENCH_RUN_OWNER`` — ``PID:START`` of the owner (the process that called ``launch``: a kernel, the
  ``workbench run`` command). Each rank runs :func:`watch_owner`: when the owner is gone (SIGKILL included, which no
  handler sees) the rank records the run ``killed`` with the reason, removes the run's DeepSpeed shared-memory
  buffers and kills every process of the run, within about a second.
* ``WORKBENCH_RUN_ID``, ``WORKBENCH_RUN_STORE`` — where that record goes.

DeepSpeed's CPU all-reduce keeps one ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>`` file per
rank (``deepspeed/ops/csrc/cpu/comm/shm.cpp``, ``shm_initialize``) and never removes it; :func:`remove_shm_buffers`
removes a run's own files (its rendezvous address and port) whatever the outcome.

Light imports only (os, signal, subprocess): the ranks import this module before torch.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional

TOKEN_VAR = "WORKBENCH_RUN_TOKEN"
OWNER_VAR = "WORKBENCH_RUN_OWNER"
RUN_ID_VAR = "WORKBENCH_RUN_ID"
STORE_VAR = "WORKBENCH_RUN_STORE"
OWNER_POLL_SECONDS = 0.5
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"
_START_TOLERANCE_SECONDS = 0.05


# ----------------------------------------------------------------------------------------------------------------
# Process identity
# ----------------------------------------------------------------------------------------------------------------
def process_started(pid: Optional[int]) -> Optional[float]:
    """Start time (epoch seconds, psutil ``create_time``) of a live process; None when it is gone or a zombie."""
    import psutil

    if not pid:
        return None
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def same_process(pid: Optional[int], started: Optional[float]) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (a reused id is another process)."""
    now = process_started(pid)
    return now is not None and started is not None and abs(now - float(started)) < _START_TOLERANCE_SECONDS


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from ``/proc``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def run_processes(token: str) -> list[int]:
    """Live processes whose environment carries ``WORKBENCH_RUN_TOKEN=token`` (the run's launcher and ranks, in
    whatever session or group they put themselves)."""
    if not token:
        return []
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0") and stat[stat.rfind(")") + 2:].split()[:1] != ["Z"]:
            found.append(int(entry))
    return found


def kill_run(token: str, *, sig: int = signal.SIGKILL, spare: int = 0) -> list[int]:
    """Send ``sig`` to every process of the run named by ``token`` (not to ``spare``); returns the pids signalled."""
    signalled = []
    for pid in run_processes(token):
        if pid == spare:
            continue
        try:
            os.kill(pid, sig)
            signalled.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return signalled


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed's shared-memory buffers
# ----------------------------------------------------------------------------------------------------------------
def shm_buffers(master_addr: str, master_port: int, *, uid: Optional[int] = None) -> list[Path]:
    """The run's ``deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>`` files present in ``/dev/shm``."""
    if not master_addr or not master_port:
        return []
    prefix = f"{SHM_PREFIX}_{os.getuid() if uid is None else uid}_{master_addr}_{int(master_port)}_"
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    return sorted(SHM_DIR / n for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())


def remove_shm_buffers(master_addr: str, master_port: int) -> list[str]:
    """Remove the run's DeepSpeed shared-memory buffers; returns the names removed."""
    removed = []
    for path in shm_buffers(master_addr, master_port):
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass
    return removed


# ----------------------------------------------------------------------------------------------------------------
# Starting
# ----------------------------------------------------------------------------------------------------------------
_RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RDZV_ID")
"""Variables ``launch.sh`` gives defaults to; one inherited from the caller (e.g. a SLURM job) would override the
run's own rendezvous."""


def owner_value(pid: Optional[int] = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{process_started(pid) or 0:.3f}"


def spawn(script: Path, *, env: dict, cwd: Path, log_path: Path, run_id: str, store_path: Path,
          token: Optional[str] = None) -> tuple[subprocess.Popen, str]:
    """Start ``bash script`` in its own session with its output appended to ``log_path``; ``(process, token)``."""
    token = token or secrets.token_hex(16)
    full_env = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS_VARS}
    full_env.update(env)
    full_env.update({TOKEN_VAR: token, OWNER_VAR: owner_value(), RUN_ID_VAR: run_id, STORE_VAR: str(store_path)})
    with open(log_path, "ab") as log:
        process = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=str(cwd), env=full_env, start_new_session=True)
    return process, token


# ----------------------------------------------------------------------------------------------------------------
# The ranks' side: die with the owner
# ----------------------------------------------------------------------------------------------------------------
def owner_from_env(environ=None) -> Optional[tuple[int, float]]:
    value = (environ if environ is not None else os.environ).get(OWNER_VAR, "")
    pid, _, started = value.partition(":")
    try:
        return int(pid), float(started)
    except ValueError:
        return None


def owner_gone_reason(pid: int) -> str:
    return f"owner process {pid} died; the run's processes were killed"


def on_owner_death(environ=None) -> None:
    """What a rank does when the owner is gone: record the run ``killed`` (first writer wins), remove the run's
    shared-memory buffers, kill every other process of the run, then itself."""
    environ = environ if environ is not None else os.environ
    owner = owner_from_env(environ)
    run_id, store_path = environ.get(RUN_ID_VAR), environ.get(STORE_VAR)
    try:
        if run_id and store_path:
            from workbench.runs.store import RunStore

            RunStore(store_path).finish(run_id, status="killed",
                                        reason=owner_gone_reason(owner[0] if owner else -1))
    finally:
        remove_shm_buffers(environ.get("MASTER_ADDR", ""), int(environ.get("MASTER_PORT") or 0))
        kill_run(environ.get(TOKEN_VAR, ""), spare=os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)


def watch_owner(*, poll_seconds: float = OWNER_POLL_SECONDS,
                on_death: Callable[[], None] = on_owner_death) -> Optional[threading.Thread]:
    """Start a daemon thread that calls ``on_death`` once the owner named in ``WORKBENCH_RUN_OWNER`` is gone
    (by pid and start time). No thread when the variable is absent (``launch.sh`` run by hand)."""
    owner = owner_from_env()
    if owner is None:
        return None
    pid, started = owner

    def alive() -> bool:
        return same_process(pid, started) if started > 0 else process_started(pid) is not None

    def loop():
        while alive():
            time.sleep(poll_seconds)
        on_death()

    thread = threading.Thread(target=loop, name="workbench-owner-watch", daemon=True)
    thread.start()
    return thread
