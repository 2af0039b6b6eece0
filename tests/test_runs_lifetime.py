"""A run's processes live no longer than its owner; reconcile signals only the run's own processes; DeepSpeed's
shared-memory buffers go with the run."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.runs import RunStore
from workbench.runs.processes import (SHM_DIR, TOKEN_VAR, kill_run, process_started, remove_shm_buffers,
                                      run_processes, same_process, shm_buffers)

TESTS = Path(__file__).resolve().parent


def _sleeper(env_extra=None):
    """A sleeping child with ``env_extra`` in its environment, returned once it has exec'd (before that its
    /proc/PID/environ is still the parent's, and a scan for its token would miss it)."""
    env = {**os.environ, **(env_extra or {})}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if b"time.sleep(120)" in Path(f"/proc/{p.pid}/cmdline").read_bytes():
                break
        except OSError:
            pass
        time.sleep(0.01)
    return p


def _dead_record(store, run_id, **kw):
    """A ``running`` record whose watcher (a finished child) is gone."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    store.create(run_id, specs={}, command="c", **kw)
    store.update(run_id, watcher_pid=child.pid, watcher_started=1.0)


def test_reconcile_never_signals_a_process_it_did_not_start(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    stranger = _sleeper()  # holds the recorded launcher pid, but carries no run token: a reused pid
    ours = _sleeper({TOKEN_VAR: "tok-ours"})
    try:
        _dead_record(store, "legacy", pgid=stranger.pid)  # no token recorded
        _dead_record(store, "tokened", pgid=stranger.pid, token="tok-ours")
        assert sorted(store.reconcile()) == ["legacy", "tokened"]
        assert ours.wait(10) == -signal.SIGKILL
        assert stranger.poll() is None  # untouched, though its pid is the recorded process group
        assert "not signalled" in store.get("legacy")["reason"]
        assert "1 remaining process(es) were killed" in store.get("tokened")["reason"]
    finally:
        stranger.kill()
        ours.kill()


def test_a_live_watcher_keeps_its_run_and_a_reused_watcher_pid_does_not():
    me = os.getpid()
    assert same_process(me, process_started(me))
    assert not same_process(me, process_started(me) - 5.0)  # same pid, other start time: another process
    assert not same_process(None, 1.0)


def test_run_processes_are_found_by_token_only():
    p = _sleeper({TOKEN_VAR: "tok-find"})
    try:
        assert run_processes("tok-find") == [p.pid]
        assert run_processes("tok-fin") == [] and run_processes("") == []
        assert kill_run("tok-find") == [p.pid]
        assert p.wait(10) == -signal.SIGKILL
    finally:
        p.kill()


def test_remove_shm_buffers_takes_only_the_runs_own_files():
    port = 1 + os.getpid() % 60000
    uid = os.getuid()
    mine = [SHM_DIR / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_{r}" for r in (0, 1)]
    others = [SHM_DIR / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}0_0",
              SHM_DIR / f"deepspeed_allreduce_buffer_{uid}_10.0.0.1_{port}_0",
              SHM_DIR / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_x"]
    for path in mine + others:
        path.write_bytes(b"")
    try:
        assert shm_buffers("127.0.0.1", port) == mine
        assert remove_shm_buffers("127.0.0.1", port) == [p.name for p in mine]
        assert not any(p.exists() for p in mine) and all(p.exists() for p in others)
        assert remove_shm_buffers("", 0) == []
    finally:
        for path in mine + others:
            path.unlink(missing_ok=True)


OWNER = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from runs_support import TINY, cpu_cluster, plan
from workbench.runs import RunStore, launch
r = launch(TINY, cpu_cluster(2), plan(2, zero_stage=1), steps=100000, nproc=2, store=RunStore({store!r}),
           run_dir={run_dir!r})
while r.progress()[0] < 1:
    time.sleep(0.2)
print(r.run_id, r.token, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_sigkilled_owner_takes_the_run_with_it(tmp_path):
    """SIGKILL the process that launched a DeepSpeed run: its launcher and ranks stop within seconds, the record
    says why, and the run's /dev/shm buffers are gone."""
    store_path = tmp_path / "s.sqlite"
    code = OWNER.format(root=str(TESTS.parent), tests=str(TESTS), store=str(store_path),
                        run_dir=str(tmp_path / "run"))
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        run_id, token = owner.stdout.readline().split()
        rec = RunStore(store_path).get(run_id)
        addr, _, port = rec["master"].rpartition(":")
        assert len(run_processes(token)) >= 3  # the launcher(s) and two ranks
        assert len(shm_buffers(addr, int(port))) == 2
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 15
        while run_processes(token) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert run_processes(token) == []
        assert time.monotonic() < deadline
        rec = RunStore(store_path).get(run_id)
        assert rec["status"] == "killed" and rec["reason"].startswith(f"owner process {owner.pid} died"), rec
        assert shm_buffers(addr, int(port)) == []
    finally:
        owner.kill()
        if "token" in locals():
            kill_run(token)
