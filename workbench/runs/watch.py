"""Follow a started run: tail the ranks' metrics into the run store, classify how it ended, record it.

:class:`Run` is the handle :func:`workbench.runs.launch` returns. Its watcher thread tails
``metrics/rank{R}.jsonl`` (:class:`MetricsTail`), enforces ``timeout_seconds`` and, when the launcher exits,
kills whatever is left of the run (by its token, :func:`workbench.runs.processes.kill_run`), removes the run's
DeepSpeed shared-memory buffers, classifies the end (:func:`classify_exit`) and records measured numbers. A new
end state is one more branch of :func:`classify_exit`; a new measured number one more key of
:func:`measured_numbers`.
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from workbench.runs.processes import group_members, kill_run, remove_shm_buffers, run_processes
from workbench.runs.store import RunStore


@dataclass
class RankReports:
    """What the ranks' metrics files said so far."""

    started: dict = field(default_factory=dict)  # rank -> pid
    done: dict = field(default_factory=dict)  # rank -> done record
    errors: dict = field(default_factory=dict)  # rank -> error record
    steps: dict = field(default_factory=dict)  # (rank, step) -> step record
    ds_config: Optional[dict] = None  # the config the DeepSpeed engine ran with, as rank 0 read it back


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
                elif kind == "ds_config":
                    self.reports.ds_config = rec.get("config")
        return new_steps


def _signal_in_log(log_text: str, pid=None) -> Optional[int]:
    """The signal that ended a rank, from torchrun's / the deepspeed launcher's failure report: that rank's pid when
    ``pid`` is given, else any rank's (SIGTERM, which launchers send the survivors, last)."""
    if pid:
        patterns = [rf"exitcode\s*:\s*(-\d+)\)?\s*local_rank: \d+ \(pid: {pid}\)",
                    rf"exitcode\s*:\s*(-\d+) \(pid: {pid}\)", rf"Signal (\d+) \(SIG\w+\) received by PID {pid}\b"]
    else:
        patterns = [r"exitcode\s*:\s*(-(?!15\b)\d+)", r"return code = (-\d+)"]
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
    # ("Connection reset by peer") follow from it. When one rank dies, torchrun SIGTERMs the others, and a survivor
    # may end before it writes its "terminated" record: a rank ended by another signal comes first
    silent = sorted(r for r in reports.started if r not in reports.done and r not in reports.errors)
    signals = {r: _signal_in_log(log_text, reports.started[r]) for r in silent}
    by_pid = sorted((r for r in silent if signals[r]), key=lambda r: (signals[r] == signal.SIGTERM, r))
    if by_pid:
        rank, sig = by_pid[0], signals[by_pid[0]]
    else:
        rank, sig = (silent[0], _signal_in_log(log_text)) if silent else (None, None)
    if silent and sig:
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
class Run:
    """A launched run. Non-blocking: a watcher thread follows it; methods only read state or signal the group."""

    def __init__(self, *, run_id: str, run_dir: Path, store: RunStore, process: subprocess.Popen, world_size: int,
                 steps: int, timeout_seconds: Optional[float], log_path: Path, poll_seconds: float = 0.25,
                 token: str = "", master_addr: str = "", master_port: int = 0):
        self.run_id, self.run_dir, self.store = run_id, run_dir, store
        self.process, self.world_size, self.steps = process, world_size, steps
        self.timeout_seconds, self.log_path = timeout_seconds, log_path
        self.pgid = process.pid
        self.token, self.master_addr, self.master_port = token, master_addr, master_port
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
        """Signal the launcher's process group and every process carrying the run's token (torchrun starts each
        rank in a session of its own)."""
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        kill_run(self.token, sig=sig)

    def _group_alive(self) -> bool:
        return bool(group_members(self.pgid)) or bool(self.token and run_processes(self.token))

    def _release(self) -> None:
        """What a run leaves outside its directory: DeepSpeed's shared-memory buffers."""
        remove_shm_buffers(self.master_addr, self.master_port)

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
            self._release()
            self._ingest()
            self._finish()
        except Exception as exc:  # noqa: BLE001 - the record must still end
            self._kill_group(signal.SIGKILL)
            self._release()
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
        if reports.ds_config is not None:  # e.g. the Trainer's resolution of an "auto" ds_config
            measured["ds_config"] = reports.ds_config
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


