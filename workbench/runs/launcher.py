"""Launch a real training run through the ``deepspeed`` launcher or ``torchrun``, without blocking the caller.

``launch(model, cluster, plan, steps=...)`` validates the specs, writes the run directory::

    run.json           resolved specs and options (what every rank reads)
    ds_config.json     DeepSpeed config (engines deepspeed and megatron-deepspeed), from build_ds_config
    megatron_args.json the megatron-core TransformerConfig arguments the ranks build the model with
    launch.sh          the exact launcher command (runnable by hand)
    hostfile           multi-node DeepSpeed runs only (workbench.configs.launch.hostfile)
    deepspeed_env      multi-node DeepSpeed runs: the variables the launcher exports on every node
    log.txt            launcher and rank output
    metrics/rank{R}.jsonl   per-step metrics written by each rank (workbench/runs/train.py)

starts ``launch.sh`` in its own process group (``start_new_session``; the launcher also gets SIGTERM if the
launching process dies) and returns a :class:`Run`. A watcher thread tails the metrics into the run store and, when
the launcher exits, classifies the end (:func:`classify_exit`), records measured numbers and kills whatever is left
of the process group, so no rank is orphaned.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from workbench.runs.specio import specs_to_dict
from workbench.runs.store import RunStore
from workbench.specs import ClusterSpec, Engine, ModelSpec, ParallelPlan, Precision, validate

CHECKOUT_ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = Path(__file__).resolve().parent / "train.py"
LAUNCHERS = ("deepspeed", "torchrun")


# ----------------------------------------------------------------------------------------------------------------
# Validation and files
# ----------------------------------------------------------------------------------------------------------------
def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch is a requirement of the train extra
        return False


def check_launchable(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, nproc: int, steps: int,
                     on_gpu: bool) -> None:
    """``ValueError`` (fields and numbers named) for specs the launcher cannot run, before anything starts."""
    from workbench.runs.model import transformer_config_kwargs

    validate(model, cluster, plan)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    if nproc * cluster.num_nodes != plan.world_size:
        raise ValueError(f"nproc({nproc}) * num_nodes({cluster.num_nodes}) = {nproc * cluster.num_nodes} != "
                         f"plan world_size={plan.world_size}")
    check_pipeline_engine(plan)
    if not on_gpu and plan.precision is Precision.FP16:
        raise ValueError("precision=fp16 on the CPU: DeepSpeed refuses fp16 on CPUs without AVX-512 FP16; use bf16 "
                         "or fp32")
    if plan.engine is Engine.MEGATRON and not on_gpu and plan.precision is Precision.FP16:
        raise ValueError("precision=fp16 needs a GPU")
    transformer_config_kwargs(model, plan)  # MoE / sequence parallel / context parallel are refused there


def check_pipeline_engine(plan: ParallelPlan) -> None:
    """Pipelines run with engine 'megatron' (megatron-core's schedules and optimizer) or the hybrid
    'megatron-deepspeed' with ZeRO-0/1 (megatron-core's 1F1B schedule, DeepSpeed ZeRO over each stage's data-parallel
    group); plain DeepSpeed has no pipeline here. ZeRO-2/3 with a pipeline is refused by ``ParallelPlan`` itself
    with DeepSpeed's reason."""
    if plan.pipeline_parallel == 1 or plan.engine is Engine.MEGATRON:
        return
    if plan.engine is Engine.DEEPSPEED:
        raise ValueError(f"pipeline_parallel={plan.pipeline_parallel} with engine='deepspeed': the launcher runs "
                         f"pipelines with engine='megatron' or the hybrid engine='megatron-deepspeed' (tensor x "
                         f"pipeline parallel with ZeRO-1 over data parallel)")
    if plan.virtual_pipeline > 1:
        raise ValueError(f"virtual_pipeline={plan.virtual_pipeline} with engine='{plan.engine}': DeepSpeed's pipeline "
                         f"engine has no interleaved schedule; use engine='megatron' for interleaved 1F1B")


def check_ds_config(config: dict, plan: ParallelPlan, *, on_gpu: bool) -> None:
    """The batch arithmetic DeepSpeed checks at start-up, with the plan's world size (no distributed needed)."""
    mbs = config.get("train_micro_batch_size_per_gpu")
    gas = config.get("gradient_accumulation_steps", 1)
    tbs = config.get("train_batch_size")
    dp = plan.data_parallel
    if mbs is not None and tbs is not None and tbs != mbs * gas * dp:
        raise ValueError(f"ds_config train_batch_size={tbs} != train_micro_batch_size_per_gpu({mbs}) * "
                         f"gradient_accumulation_steps({gas}) * data_parallel({dp}) = {mbs * gas * dp}")
    if not on_gpu and (config.get("fp16") or {}).get("enabled"):
        raise ValueError("ds_config fp16.enabled=true on the CPU: DeepSpeed refuses fp16 here; use bf16 or fp32")
    stage = (config.get("zero_optimization") or {}).get("stage", 0)
    if int(stage) != int(plan.zero_stage):
        raise ValueError(f"ds_config zero_optimization.stage={stage} != plan zero_stage={int(plan.zero_stage)}")


CPU_MEMORY_NOT_COMPARABLE = (
    "CPU run: the memory model predicts GPU bytes (allocator peak plus CUDA context and workspaces), the CPU run "
    "measures each rank's peak resident set size (Python, torch and the framework's libraries included)")


def predicted_numbers(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                      on_gpu: bool = True) -> Optional[dict]:
    """``{"per_gpu_peak_bytes", "allocated_bytes", "step_seconds", "memory_comparable", ...}`` from
    :func:`workbench.estimate.estimate` (``step_seconds`` is None while the estimate has no time model);
    ``{"error": ...}`` when the estimate refuses the specs. For a run on the CPU (``on_gpu=False``) the memory
    prediction is kept but marked ``memory_comparable=False`` with ``memory_not_comparable_reason``: it counts GPU
    bytes, the run measures peak RSS."""
    from workbench.estimate import estimate

    try:
        est = estimate(model, cluster, plan)
    except ValueError as exc:
        return {"per_gpu_peak_bytes": None, "step_seconds": None, "error": str(exc)}
    time_part = getattr(est, "time", None)
    step_seconds = getattr(time_part, "step_seconds", None) if time_part is not None else None
    out = {"per_gpu_peak_bytes": int(est.memory.per_gpu_peak_bytes),
           "allocated_bytes": int(est.memory.per_gpu_peak_bytes - est.memory.breakdown.overhead),
           "step_seconds": float(step_seconds) if step_seconds is not None else None,
           "memory_comparable": bool(on_gpu)}
    if not on_gpu:
        out["memory_not_comparable_reason"] = CPU_MEMORY_NOT_COMPARABLE
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_run_id() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def launcher_command(*, launcher: str, nproc: int, run_dir: Path, master_port: int) -> list[str]:
    """The single-node launcher invocation (python -m form, so the venv's launcher runs whatever PATH says)."""
    script = [str(TRAIN_SCRIPT), "--run-dir", str(run_dir)]
    if launcher == "deepspeed":
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port", str(master_port),
                "--num_gpus", str(nproc)] + script
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                "--master_addr", "127.0.0.1", "--master_port", str(master_port)] + script
    raise ValueError(f"launcher={launcher!r} is not one of: {', '.join(LAUNCHERS)}")


LAUNCHER_PROGRAMS = {"deepspeed": [sys.executable, "-m", "deepspeed.launcher.runner"],
                     "torchrun": [sys.executable, "-m", "torch.distributed.run"]}
"""The launchers as this interpreter's modules (the ``deepspeed`` / ``torchrun`` programs of its environment)."""


def host_names(hosts, *, nproc: int) -> list[str]:
    """Host names from ``["name", "name slots=N", ...]``; a ``slots`` count must equal ``nproc`` (every node runs
    ``nproc`` ranks)."""
    names = []
    for i, h in enumerate(hosts):
        parts = str(h).split()
        if not parts:
            raise ValueError(f"hosts[{i}]={h!r} is empty")
        for extra in parts[1:]:
            key, _, value = extra.partition("=")
            if key != "slots" or not value.isdigit():
                raise ValueError(f"hosts[{i}]={h!r}: expected 'name' or 'name slots=N'")
            if int(value) != nproc:
                raise ValueError(f"hosts[{i}]={h!r}: slots={value} != nproc={nproc} (every node runs nproc ranks)")
        names.append(parts[0])
    return names


def multi_node_files(*, launcher: str, cluster: ClusterSpec, hosts, nproc: int, run_dir: Path, master_port: int,
                     env: dict, run_id: str) -> dict:
    """``{"launch.sh": text, "hostfile": text (deepspeed), "deepspeed_env": text (deepspeed)}`` for a multi-node
    run, written by the export's script builders (:mod:`workbench.configs.launch`) with this interpreter's
    launcher and the rank script as the command.

    * ``deepspeed``: run ``launch.sh`` on the first host; the launcher starts every node's ranks over ssh from the
      hostfile. The environment the ranks need goes to ``deepspeed_env`` (named by ``DS_ENV_FILE``), which the
      launcher exports on every node.
    * ``torchrun``: the c10d rendezvous on the first host (``--rdzv_id`` = the run id); ``launch.sh`` runs on this
      node and must be started on every other host too (same path, shared file system for the run directory).
    """
    from workbench.configs.launch import checked_hosts, deepspeed_launch_script, hostfile, torchrun_script

    names = host_names(hosts, nproc=nproc)
    checked_hosts(cluster, names)
    command = [str(TRAIN_SCRIPT), "--run-dir", str(run_dir)]
    preamble = [f"cd {shlex.quote(str(CHECKOUT_ROOT))}"] + [f"export {k}={shlex.quote(str(v))}"
                                                           for k, v in sorted(env.items())]
    if launcher == "deepspeed":
        env_file = run_dir / "deepspeed_env"
        script = deepspeed_launch_script(
            cluster, command, hostfile_path=str(run_dir / "hostfile"), master_port=master_port,
            preamble=preamble + [f"export DS_ENV_FILE={shlex.quote(str(env_file))}"],
            launcher=LAUNCHER_PROGRAMS["deepspeed"], exec_launcher=True)
        return {"launch.sh": script, "hostfile": hostfile(cluster, names),
                "deepspeed_env": "".join(f"{k}={v}\n" for k, v in sorted(env.items()))}
    if launcher == "torchrun":
        script = torchrun_script(cluster, command, rdzv=True, master_port=master_port, master_addr=names[0],
                                 rdzv_id=run_id, preamble=preamble, launcher=LAUNCHER_PROGRAMS["torchrun"],
                                 exec_launcher=True)
        checked_hosts(cluster, names)
        return {"launch.sh": script}
    raise ValueError(f"launcher={launcher!r} is not one of: {', '.join(LAUNCHERS)}")


def launch_script(cmd: list[str], env: dict) -> str:
    lines = ["#!/usr/bin/env bash", "# Written by workbench.runs.launch; run it by hand to repeat this run.",
             "set -euo pipefail", f"cd {shlex.quote(str(CHECKOUT_ROOT))}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]
    lines.append("exec " + " ".join(shlex.quote(c) for c in cmd))
    return "\n".join(lines) + "\n"


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


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; the watcher and RunStore.reconcile still clean up
        pass


# ----------------------------------------------------------------------------------------------------------------
# Reading what the ranks reported
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class RankReports:
    """What the ranks' metrics files said so far."""

    started: dict = field(default_factory=dict)  # rank -> pid
    done: dict = field(default_factory=dict)  # rank -> done record
    errors: dict = field(default_factory=dict)  # rank -> error record
    steps: dict = field(default_factory=dict)  # (rank, step) -> step record


class MetricsTail:
    """Incrementally reads ``metrics/rank*.jsonl`` (complete lines only)."""

    def __init__(self, metrics_dir: Path):
        self.dir = metrics_dir
        self.offsets: dict = {}
        self.reports = RankReports()

    def read_new(self) -> list[dict]:
        new_steps = []
        if not self.dir.is_dir():
            return new_steps
        for path in sorted(self.dir.glob("rank*.jsonl")):
            offset = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = offset + end + 1
            for line in chunk[:end].splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                rank, kind = rec.get("rank"), rec.get("type")
                if kind == "start":
                    self.reports.started[rank] = rec.get("pid")
                elif kind == "step":
                    self.reports.steps[(rank, rec["step"])] = rec
                    new_steps.append(rec)
                elif kind == "done":
                    self.reports.done[rank] = rec
                elif kind == "error":
                    self.reports.errors[rank] = rec
        return new_steps


def _signal_in_log(log_text: str, pid=None) -> Optional[int]:
    """The signal that ended a rank, from torchrun's / the deepspeed launcher's failure report (that rank's pid
    first, any rank second)."""
    patterns = []
    if pid:
        patterns += [rf"exitcode\s*:\s*(-\d+)\)?\s*local_rank: \d+ \(pid: {pid}\)",
                     rf"exitcode\s*:\s*(-\d+) \(pid: {pid}\)", rf"Signal (\d+) \(SIG\w+\) received by PID {pid}\b"]
    patterns += [r"exitcode\s*:\s*(-(?!15\b)\d+)", r"return code = (-\d+)"]
    for pattern in patterns:
        m = re.search(pattern, log_text)
        if m:
            return abs(int(m.group(1)))
    return None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


OOM_LOG_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "MemoryError", "can't allocate memory")


def classify_exit(*, returncode: Optional[int], world_size: int, reports: RankReports, log_text: str = "",
                  stopped: bool = False, timed_out: bool = False, timeout_seconds: Optional[float] = None):
    """``(status, reason, warning)`` for a finished launcher, from what the ranks reported first and the launcher's
    exit code second (a launcher may exit non-zero after every rank finished: ZeRO-3 on CPU aborts at exit now and
    then; that run is ``completed`` with a warning)."""
    done = len(reports.done)
    if done >= world_size:
        warning = ""
        if returncode not in (0, None):
            warning = (f"launcher exited with code {returncode} after all {world_size} ranks reported done "
                       f"(an abort at interpreter exit); the results are complete")
        return "completed", "", warning
    progress = f"{done} of {world_size} ranks finished"
    if stopped:
        return "stopped", f"stopped by the user; process group killed ({progress})", ""
    if timed_out:
        return "timeout", f"did not finish within timeout_seconds={timeout_seconds:g}; process group killed " \
                          f"({progress})", ""
    ooms = {r: e for r, e in reports.errors.items() if e.get("kind") == "oom"}
    if ooms:
        rank = min(ooms)
        return "oom", f"rank {rank} ran out of memory: {ooms[rank].get('message', '')[:300]}", ""
    if returncode is not None and returncode < 0:
        return "killed", f"launcher killed by {_signal_name(-returncode)}; process group killed ({progress})", ""
    # a rank that vanished without a record, killed by a signal, is the cause; its peers' errors
    # ("Connection reset by peer") follow from it
    silent = sorted(r for r in reports.started if r not in reports.done and r not in reports.errors)
    sig = _signal_in_log(log_text, reports.started[silent[0]]) if silent else None
    if silent and sig:
        rank = silent[0]
        hint = " (if nobody killed it, the kernel's out-of-memory killer did)" if sig == 9 else ""
        return "killed", (f"rank {rank} (pid {reports.started[rank]}) killed by {_signal_name(sig)}{hint}; "
                          f"{progress}"), ""
    faults = {r: e for r, e in reports.errors.items() if e.get("kind") != "terminated"}
    if faults:
        rank = min(faults)
        return "failed", f"rank {rank} failed: {faults[rank].get('message', '')[:300]}", ""
    if any(marker in log_text for marker in OOM_LOG_MARKERS):
        return "oom", "out of memory (see the log)", ""
    if silent:
        rank = silent[0]
        return "failed", f"rank {rank} (pid {reports.started[rank]}) ended without reporting; {progress}", ""
    if not reports.started:
        last = [line for line in log_text.strip().splitlines() if line.strip()][-1:] or ["(empty log)"]
        return "failed", f"launcher exited with code {returncode} before any rank started: {last[0][:300]}", ""
    return "failed", f"launcher exited with code {returncode} ({progress})", ""


def measured_numbers(reports: RankReports) -> dict:
    """Per-rank peak memory, median step seconds (steps after the first two when there are more than three) and
    tokens/s, from the ranks' records."""
    peak = {}
    for (rank, _step), rec in reports.steps.items():
        peak[rank] = max(peak.get(rank, 0), rec.get("memory_bytes") or 0)
    for rank, rec in reports.done.items():
        peak[rank] = max(peak.get(rank, 0), rec.get("peak_memory_bytes") or 0)
    per_rank_seconds = {}
    for (rank, step), rec in sorted(reports.steps.items()):
        per_rank_seconds.setdefault(rank, []).append(rec["step_seconds"])
    medians = []
    for seconds in per_rank_seconds.values():
        timed = seconds[2:] if len(seconds) > 3 else seconds
        medians.append(statistics.median(timed))
    step_seconds = max(medians) if medians else None  # the slowest rank sets the pace
    steps_done = max((len(v) for v in per_rank_seconds.values()), default=0)
    return {
        "peak_memory_bytes": {str(r): int(v) for r, v in sorted(peak.items())},
        "max_peak_memory_bytes": int(max(peak.values())) if peak else None,
        "median_step_seconds": step_seconds,
        "steps_completed": steps_done,
    }


def losses_of(reports_steps: dict) -> list:
    """Loss per step from the lowest rank that reports losses (with pipelines only the last stage does)."""
    by_rank = {}
    for (rank, step), rec in reports_steps.items():
        if rec.get("loss") is not None:
            by_rank.setdefault(rank, {})[step] = rec["loss"]
    if not by_rank:
        return []
    chosen = by_rank[min(by_rank)]
    return [chosen[s] for s in sorted(chosen)]


# ----------------------------------------------------------------------------------------------------------------
# The handle
# ----------------------------------------------------------------------------------------------------------------
class Run:
    """A launched run. Non-blocking: a watcher thread follows it; methods only read state or signal the group."""

    def __init__(self, *, run_id: str, run_dir: Path, store: RunStore, process: subprocess.Popen, world_size: int,
                 steps: int, timeout_seconds: Optional[float], log_path: Path, poll_seconds: float = 0.25):
        self.run_id, self.run_dir, self.store = run_id, run_dir, store
        self.process, self.world_size, self.steps = process, world_size, steps
        self.timeout_seconds, self.log_path = timeout_seconds, log_path
        self.pgid = process.pid
        self._tail = MetricsTail(run_dir / "metrics")
        self._lock = threading.Lock()
        self._stop_requested = False
        self._timed_out = False
        self._started = time.monotonic()
        self._final: Optional[dict] = None
        self._poll_seconds = poll_seconds
        self._thread = threading.Thread(target=self._watch, name=f"workbench-run-{run_id}", daemon=True)
        self._thread.start()

    # -- watcher ---------------------------------------------------------------------------------------------------
    def _ingest(self) -> None:
        with self._lock:
            rows = self._tail.read_new()
        if rows:
            self.store.add_metrics(self.run_id, rows)

    def _kill_group(self, sig=signal.SIGKILL) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        return bool(group_members(self.pgid))

    def _watch(self) -> None:
        try:
            while self.process.poll() is None:
                self._ingest()
                if (self.timeout_seconds is not None and not self._timed_out
                        and time.monotonic() - self._started > self.timeout_seconds):
                    self._timed_out = True
                    self._terminate()
                time.sleep(self._poll_seconds)
            # the launcher is gone: nothing of its group may outlive it
            deadline = time.monotonic() + 10
            while self._group_alive() and time.monotonic() < deadline:
                self._kill_group(signal.SIGKILL)
                time.sleep(0.1)
            self._ingest()
            self._finish()
        except Exception as exc:  # noqa: BLE001 - the record must still end
            self._kill_group(signal.SIGKILL)
            self.store.finish(self.run_id, status="failed", reason=f"watcher error: {type(exc).__name__}: {exc}")
            self._final = self.store.get(self.run_id)

    def _terminate(self, grace_seconds: float = 5.0) -> None:
        self._kill_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.1)
        self._kill_group(signal.SIGKILL)

    def _finish(self) -> None:
        with self._lock:
            reports = self._tail.reports
        status, reason, warning = classify_exit(
            returncode=self.process.returncode, world_size=self.world_size, reports=reports,
            log_text=self.log_tail(400), stopped=self._stop_requested, timed_out=self._timed_out,
            timeout_seconds=self.timeout_seconds)
        measured = measured_numbers(reports)
        measured["losses"] = losses_of(reports.steps)
        measured["returncode"] = self.process.returncode
        self.store.finish(self.run_id, status=status, reason=reason, warning=warning, measured=measured)
        self._final = self.store.get(self.run_id)

    # -- public --------------------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        if self._final is not None:
            return self._final["status"]
        return self.store.get(self.run_id)["status"]

    @property
    def done(self) -> bool:
        return self._final is not None

    def poll(self) -> str:
        """Current status (``running`` until the watcher has recorded the end)."""
        return self.status

    def wait(self, timeout: Optional[float] = None) -> str:
        """Block until the run ends or ``timeout`` seconds pass; returns the status."""
        self._thread.join(timeout)
        return self.status

    def stop(self) -> None:
        """Kill the whole process group (SIGTERM, then SIGKILL after 5 s); the run ends ``stopped``."""
        if self.done:
            return
        self._stop_requested = True
        threading.Thread(target=self._terminate, daemon=True).start()

    def metrics(self) -> list[dict]:
        """Per-step metrics so far (every rank), from the store."""
        self._ingest()
        return self.store.metrics(self.run_id)

    def progress(self) -> tuple[int, int]:
        """``(steps reported by the slowest reporting rank, steps)``."""
        with self._lock:
            steps = self._tail.reports.steps
            per_rank = {}
            for rank, step in steps:
                per_rank[rank] = max(per_rank.get(rank, -1), step)
        return (min(per_rank.values()) + 1 if per_rank else 0), self.steps

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 200 * max(n, 1)))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def record(self) -> dict:
        """The run's record: store fields plus ``losses``, ``measured``, ``predicted``."""
        rec = self.store.get(self.run_id)
        measured = rec.get("measured") or {}
        if not measured:
            with self._lock:
                measured = measured_numbers(self._tail.reports)
                measured["losses"] = losses_of(self._tail.reports.steps)
        rec["losses"] = measured.get("losses", [])
        rec["measured"] = measured
        return rec

    def __repr__(self) -> str:
        return f"Run(run_id={self.run_id!r}, status={self.status!r}, run_dir='{self.run_dir}')"


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedRun:
    """A written run directory, not started: what :func:`launch` runs, or a multi-node script to inspect."""

    run_id: str
    run_dir: Path
    script: Path
    """``launch.sh``: the exact launcher command, runnable by hand."""
    command: str
    """The launcher command line (what the store records)."""
    env: dict
    """Environment variables ``launch.sh`` exports."""
    predicted: Optional[dict]
    specs: dict
    world_size: int
    steps: int
    engine: str
    hostfile: Optional[Path] = None


def prepare(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, steps: int = 10, data="synthetic",
            nproc: Optional[int] = None, run_dir=None, run_id: Optional[str] = None,
            ds_options: Optional[dict] = None, ds_config: Optional[dict] = None, launcher: Optional[str] = None,
            seed: int = 1234, lr: float = 1e-3, clip_grad: float = 1.0, torch_adam: bool = True,
            memory_limit_bytes: Optional[int] = None, hosts: Optional[list] = None,
            master_port: Optional[int] = None, env: Optional[dict] = None) -> PreparedRun:
    """Validate the specs (``ValueError`` naming fields and numbers) and write the run directory without starting
    anything; :func:`launch` takes the same arguments and starts ``launch.sh``.

    Single node: ``launch.sh`` execs ``deepspeed`` (``--num_gpus``) or ``torchrun`` (``--nproc_per_node``) on
    127.0.0.1. Several nodes (``hosts``, one per node: ``"name"`` or ``"name slots=N"``): the hostfile and
    ``launch.sh`` come from the export's builders in :mod:`workbench.configs.launch` (see
    :func:`multi_node_files`)."""
    from workbench.runs.data import check_vocab, parse_source
    from workbench.runs.model import transformer_config_kwargs

    on_gpu = cuda_available()
    nproc = nproc if nproc is not None else cluster.gpus_per_node
    run_id = run_id or new_run_id()
    run_dir = Path(run_dir) if run_dir is not None else _default_runs_dir() / run_id
    specs = specs_to_dict(model, cluster, plan)
    launcher = launcher or ("torchrun" if plan.engine is Engine.MEGATRON else "deepspeed")
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r} is not one of: {', '.join(LAUNCHERS)}")
    if cluster.num_nodes > 1 and not hosts:
        raise ValueError(f"num_nodes={cluster.num_nodes}: pass hosts=[...] (one per node) for a multi-node run")
    if hosts and len(hosts) != cluster.num_nodes:
        raise ValueError(f"hosts has {len(hosts)} entries but num_nodes={cluster.num_nodes}")
    check_launchable(model, cluster, plan, nproc=nproc, steps=steps, on_gpu=on_gpu)
    source = parse_source(data)
    check_vocab(source, model.vocab_size)
    if plan.engine is not Engine.MEGATRON:
        if ds_config is None:
            from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config

            opts = {"lr": lr, "train_iters": steps, "warmup_iters": 1, "clip": clip_grad, "seed": seed,
                    **(ds_options or {})}
            ds_config = build_ds_config(model, cluster, plan, options=DeepSpeedOptions(**opts))
            if torch_adam and plan.offload_optimizer.value == "none":
                # torch's Adam: no DeepSpeed op to compile (FusedAdam JIT-builds otherwise)
                ds_config["optimizer"].setdefault("params", {})["torch_adam"] = True
        check_ds_config(ds_config, plan, on_gpu=on_gpu)
    port = master_port or free_port()
    run_env = _run_env(nproc=nproc, on_gpu=on_gpu, extra=env)
    if hosts:
        files = multi_node_files(launcher=launcher, cluster=cluster, hosts=hosts, nproc=nproc, run_dir=run_dir,
                                 master_port=port, env=run_env, run_id=run_id)
        script_text = files.pop("launch.sh")
        lines = script_text.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("exec "))
        command = " ".join(line.strip().rstrip("\\").strip() for line in lines[first:])[len("exec "):]
        if launcher == "deepspeed":
            run_env = {**run_env, "DS_ENV_FILE": str(run_dir / "deepspeed_env")}
    else:
        files = {}
        cmd = launcher_command(launcher=launcher, nproc=nproc, run_dir=run_dir, master_port=port)
        script_text = launch_script(cmd, run_env)
        command = " ".join(shlex.quote(c) for c in cmd)

    # what train.py runs: megatron-core's local layer spec (unfused softmax) and, without Apex/Transformer Engine,
    # torch's Adam for the megatron engine; torch's Adam for DeepSpeed when the config asks for it
    unfused = plan.engine is Engine.MEGATRON or bool(
        ds_config is not None and (ds_config.get("optimizer") or {}).get("params", {}).get("torch_adam"))
    predicted = predicted_numbers(model, cluster, plan.replace(fused_kernels=False) if unfused else plan,
                                  on_gpu=on_gpu)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics").mkdir(exist_ok=True)
    options = {"engine": str(plan.engine), "steps": steps, "data": data if isinstance(data, str) else source.kind,
               "seed": seed, "lr": lr, "clip_grad": clip_grad,
               "memory_limit_bytes": memory_limit_bytes, "launcher": launcher,
               "hosts": host_names(hosts, nproc=nproc) if hosts else None}
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "run_dir": str(run_dir), "specs": specs,
                                                  "options": options, "predicted": predicted}, indent=2))
    (run_dir / "megatron_args.json").write_text(json.dumps(transformer_config_kwargs(model, plan),
                                                           indent=2, default=str))
    if ds_config is not None:
        (run_dir / "ds_config.json").write_text(json.dumps(ds_config, indent=2))
    for name, text in files.items():
        (run_dir / name).write_text(text)
    script = run_dir / "launch.sh"
    script.write_text(script_text)
    script.chmod(0o755)
    return PreparedRun(run_id=run_id, run_dir=run_dir, script=script, command=command, env=run_env,
                       predicted=predicted, specs=specs, world_size=plan.world_size, steps=steps,
                       engine=str(plan.engine), hostfile=run_dir / "hostfile" if "hostfile" in files else None)


def launch(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, steps: int = 10, data="synthetic",
           nproc: Optional[int] = None, store: Optional[RunStore] = None, run_dir=None,
           ds_options: Optional[dict] = None, ds_config: Optional[dict] = None, launcher: Optional[str] = None,
           seed: int = 1234, lr: float = 1e-3, clip_grad: float = 1.0, torch_adam: bool = True,
           timeout_seconds: Optional[float] = None, memory_limit_bytes: Optional[int] = None,
           hosts: Optional[list] = None, master_port: Optional[int] = None, env: Optional[dict] = None) -> Run:
    """Validate, write the run directory, start the launcher in the background, return the :class:`Run`.

    ``ds_options`` (``DeepSpeedOptions`` fields) go to :func:`workbench.configs.deepspeed.build_ds_config`, after
    ``lr``, ``train_iters=steps``, one warm-up step, ``clip=clip_grad``; ``torch_adam`` selects torch's Adam (no op build;
    not with optimizer offload, which needs DeepSpeedCPUAdam); ``ds_config`` replaces the built config entirely
    (e.g. an imported one). Dropout comes from the model spec (``hidden_dropout``, ``attention_dropout``).
    ``launcher`` defaults to ``deepspeed`` for the DeepSpeed engines and ``torchrun`` for megatron. ``hosts``
    (``["node1 slots=8", ...]`` or names, one per node) runs multi-node through the scripts the export writes
    (:func:`prepare`): the deepspeed launcher's hostfile, or torchrun's c10d rendezvous (then ``launch.sh`` must also
    be started on the other hosts). ``memory_limit_bytes`` caps each rank's extra address space (on the CPU a
    stand-in for device memory). Bad specs raise ``ValueError`` and are recorded with status ``invalid``.
    """
    store = store if store is not None else RunStore()
    run_id = new_run_id()
    try:
        prepared = prepare(model, cluster, plan, steps=steps, data=data, nproc=nproc, run_dir=run_dir,
                           run_id=run_id, ds_options=ds_options, ds_config=ds_config, launcher=launcher, seed=seed,
                           lr=lr, clip_grad=clip_grad, torch_adam=torch_adam, memory_limit_bytes=memory_limit_bytes,
                           hosts=hosts, master_port=master_port, env=env)
    except ValueError as exc:
        rd = Path(run_dir) if run_dir is not None else _default_runs_dir() / run_id
        store.create(run_id, specs=specs_to_dict(model, cluster, plan), command="", status="invalid",
                     reason=str(exc), run_dir=str(rd), engine=str(plan.engine),
                     steps=steps if isinstance(steps, int) else 0)
        store.finish(run_id, status="invalid", reason=str(exc))
        raise
    return start(prepared, store=store, timeout_seconds=timeout_seconds)


def start(prepared: PreparedRun, *, store: RunStore, timeout_seconds: Optional[float] = None) -> Run:
    """Start a prepared run's ``launch.sh`` in its own process group and return the watched :class:`Run`."""
    run_dir = prepared.run_dir
    log_path = run_dir / "log.txt"
    log = open(log_path, "ab")
    full_env = {**os.environ, **prepared.env}
    process = subprocess.Popen(["bash", str(prepared.script)], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=str(CHECKOUT_ROOT), env=full_env,
                               start_new_session=True, preexec_fn=_set_parent_death_signal)
    log.close()
    store.create(prepared.run_id, specs=prepared.specs, command=prepared.command, status="running",
                 predicted=prepared.predicted, log_path=str(log_path), run_dir=str(run_dir), engine=prepared.engine,
                 steps=prepared.steps, pgid=process.pid)
    return Run(run_id=prepared.run_id, run_dir=run_dir, store=store, process=process,
               world_size=prepared.world_size, steps=prepared.steps, timeout_seconds=timeout_seconds,
               log_path=log_path)


def _default_runs_dir() -> Path:
    from workbench.paths import runs_dir

    return runs_dir()


def _run_env(*, nproc: int, on_gpu: bool, extra: Optional[dict]) -> dict:
    pythonpath = os.pathsep.join(p for p in (str(CHECKOUT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1",
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR") or str(_default_extensions_dir())}
    if on_gpu:
        env["NCCL_NVLS_ENABLE"] = os.environ.get("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    else:
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def _default_extensions_dir() -> Path:
    from workbench.paths import data_dir

    return data_dir() / "torch_extensions"
