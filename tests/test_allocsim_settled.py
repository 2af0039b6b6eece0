"""workbench.allocsim.traced_steps: a trace stops tracing once its steps repeat, and the events it copies in their
place are those a trace of every step records (the replay's peaks then are the same by construction)."""
from pathlib import Path

import pytest

from workbench import allocsim
from workbench.hf import read_config

HF = Path(__file__).resolve().parent / "data" / "hf"


def _canonical(events: list, end=("end", 0, 0)) -> list:
    """The events up to ``end`` with each block named by the order of its allocation (the keys themselves differ)."""
    names, out = {}, []
    for e in events[:events.index(end) + 1]:
        if e[0] in ("malloc", "free", "release"):
            if e[0] == "malloc":
                names[e[1]] = len(names)
            e = (e[0], names.get(e[1], ("unallocated", e[1])), *e[2:])
        out.append(e)
    return out


def _both(monkeypatch, trace):
    """``trace()`` with every step traced, then with the settled steps copied; and how many steps were copied."""
    copied = []
    real = allocsim._repeat_step
    def counted(events, start, before, steps, keep_keys=False):
        copied.append((steps, keep_keys) if keep_keys else steps)
        return real(events, start, before, steps, keep_keys=keep_keys)

    monkeypatch.setattr(allocsim, "_repeat_step", counted)
    monkeypatch.setattr(allocsim, "REPEAT_SETTLED_STEPS", False)
    whole = trace()
    assert copied == []
    monkeypatch.setattr(allocsim, "REPEAT_SETTLED_STEPS", True)
    return whole, trace(), copied


@pytest.mark.parametrize("kwargs", [
    dict(zero_stage=0, grad_accum=2),
    dict(zero_stage=1, grad_accum=2, attn_implementation="eager"),
    dict(zero_stage=2, overlap_comm=True, gradient_checkpointing=True),
    dict(zero_stage=2, offload_optimizer=True),
    dict(zero_stage=2, lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")),
    dict(zero_stage=3, grad_accum=2),
    dict(zero_stage=3, offload_optimizer=True, offload_params=True, zero_init=True),
])
def test_copied_steps_are_the_traced_ones(monkeypatch, kwargs):
    cfg = read_config(HF / "tiny-llama")
    whole, short, copied = _both(monkeypatch, lambda: allocsim.trace_hf_deepspeed(
        cfg, micro_batch=2, seq_length=128, steps=6, **kwargs))
    assert copied == [3]  # steps 1-3 traced (the third repeats the second), 4-6 copied
    assert _canonical(short) == _canonical(whole)
    assert allocsim.ReplayedPeaks.of(allocsim.replay(short)) == allocsim.ReplayedPeaks.of(allocsim.replay(whole))


def _loop(events: list, steps: int, lifetime: int) -> None:
    """A training loop whose step allocates a block kept ``lifetime`` steps, and a temporary."""
    held = []
    count = iter(range(1, 10**6))
    for step in allocsim.traced_steps(events, steps):
        key = next(count)
        events.append(("malloc", key, 1024))
        held.append(key)
        if len(held) > lifetime:
            events.append(("free", held.pop(0), 1024))
        tmp = next(count)
        events.extend([("malloc", tmp, 512), ("free", tmp, 512)])
        if step == 0:  # the first step makes the optimizer's state
            events.append(("malloc", next(count), 8192))
    events.append(("end", 0, 0))


@pytest.mark.parametrize("lifetime,copies", [(1, [2]), (2, [])])
def test_a_block_living_longer_than_a_step_is_traced_whole(monkeypatch, lifetime, copies):
    """A block freed by the step after its own settles after three steps; one kept two steps never repeats the step
    before's pattern (it frees a block two steps old), so every step is traced."""
    whole, short, copied = _both(monkeypatch, lambda: [] if _loop(ev := [], 5, lifetime) else ev)
    assert copied == copies
    assert _canonical(short) == _canonical(whole)
    # the optimizer's state, the blocks alive at once (the new one before the oldest is freed)
    assert allocsim.replay(short).peak_allocated_bytes == 8192 + 1024 * (lifetime + 1)


def test_fewer_than_four_steps_are_all_traced(monkeypatch):
    whole, short, copied = _both(monkeypatch, lambda: [] if _loop(ev := [], 3, 1) else ev)
    assert copied == [] and short == whole


def test_megatron_core_traces_copy_settled_steps_too(monkeypatch):
    """megatron-core under DeepSpeed ZeRO-2 and under its own DDP, traced in one child process with every step
    traced and with the settled steps copied (the child takes the parent's setting per job): the same events."""
    from workbench.cli import build_parser
    from workbench.commands.common import specs_from_args

    argv = ["estimate", "--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "512", "--seq", "256",
            "--gpu", "H200", "--gpus-per-node", "1", "--mbs", "2", "--gbs", "4", "--attention", "unfused"]
    jobs = [specs_from_args(build_parser().parse_args(argv + extra))
            for extra in (["--zero", "2", "--no-overlap-comm"], ["--engine", "megatron", "--adam", "torch"])]
    payload = []
    for repeat in (False, True):
        monkeypatch.setattr(allocsim, "REPEAT_SETTLED_STEPS", repeat)
        payload += allocsim._checked_mcore_jobs(jobs, "test", capacity_bytes=None, steps=6, events=True)
    out = [[tuple(e) for e in o["events"]] for o in allocsim._run_mcore_jobs(payload)]
    for whole, short in zip(out[:2], out[2:]):
        assert _canonical(short, end=("end", "0", 0)) == _canonical(whole, end=("end", "0", 0))


@pytest.mark.parametrize("kwargs", [
    dict(zero_stage=0),
    dict(zero_stage=1),
    dict(zero_stage=1, overlap_comm=True, gradient_checkpointing=True),
    dict(zero_stage=2, overlap_comm=True),
    dict(zero_stage=3),
])
def test_copied_micro_batches_are_the_traced_ones(monkeypatch, kwargs):
    """Accumulating over 7 micro-batches: each step traces micro-batches 1-3 and the boundary, copies 4-6 (the last
    copy keeps the keys the boundary's frees name), and the events are those of tracing every micro-batch."""
    cfg = read_config(HF / "tiny-llama")
    whole, short, copied = _both(monkeypatch, lambda: allocsim.trace_hf_deepspeed(
        cfg, micro_batch=1, seq_length=64, steps=4, grad_accum=7, **kwargs))
    assert copied == [(3, True)] * 3 + [1]  # three steps traced, the third repeats the second, the fourth copied
    assert _canonical(short) == _canonical(whole)
    assert allocsim.ReplayedPeaks.of(allocsim.replay(short)) == allocsim.ReplayedPeaks.of(allocsim.replay(whole))


def _accumulating(events: list, count: int, keep_to_step_end: bool) -> None:
    """Two steps of ``count`` micro-batches, each making a block the next frees, or one kept to the step's end."""
    keys = iter(range(100, 1000))
    for _ in allocsim.traced_steps(events, 2):
        kept, held = [], None  # the program's references: the blocks it keeps, the block the last micro-batch left
        for _ in allocsim.traced_micro_batches(events, count):
            key = next(keys)
            events.append(("malloc", key, 1024))
            if keep_to_step_end:
                kept.append(key)
            elif held is not None:
                events.append(("free", held, 1024))
            held = key
        events.extend(("free", key, 1024) for key in reversed(kept or [held]))  # a list frees from its end
    events.append(("end", 0, 0))


@pytest.mark.parametrize("keep,peak", [(False, 2048), (True, 8 * 1024)])
def test_copied_micro_batches_free_what_they_keep_as_the_traced_ones(monkeypatch, keep, peak):
    """Blocks handed from one micro-batch to the next, and blocks each micro-batch keeps to the step's end (a list of
    losses): the copies free them as tracing every micro-batch does, the kept ones beside the traced one's free."""
    whole, short, copied = _both(monkeypatch, lambda: [] if _accumulating(ev := [], 8, keep) else ev)
    assert copied == [(4, True)] * 2
    assert _canonical(short) == _canonical(whole)
    assert allocsim.replay(short).peak_allocated_bytes == peak


_MCORE_MICRO_BATCHES = r"""
import json, sys
from workbench import allocsim
from workbench.cli import build_parser
from workbench.commands.common import specs_from_args

model, _, plan = specs_from_args(build_parser().parse_args(sys.argv[1:]))
copied = []
real = allocsim._copied_middle
allocsim._copied_middle = lambda events, starts, copies: copied.append(real(events, starts, copies)) or copied[-1]
out = {}
for repeat in (False, True):
    allocsim.REPEAT_SETTLED_STEPS = repeat
    out[str(repeat)] = [[e[0], str(e[1]), int(e[2]), *e[3:]] for e in allocsim.trace_mcore(model, plan, steps=5)]
print(json.dumps(dict(copied=copied, **out)))
"""


def test_megatron_core_schedule_runs_four_micro_batches_and_copies_the_middle_ones():
    """megatron-core's own DDP accumulating over 7 micro-batches: with the copies its schedule runs four a step
    (three traced, the boundary traced, 3 copied in between; each micro-batch's loss, which the schedule keeps to the
    step's end, freed with the traced ones) and the events are those of running all seven."""
    import json
    import os
    import subprocess
    import sys

    argv = ["estimate", "--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "512", "--seq", "128",
            "--gpu", "H200", "--gpus-per-node", "1", "--mbs", "1", "--gbs", "7", "--attention", "unfused",
            "--engine", "megatron", "--adam", "torch"]
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", _MCORE_MICRO_BATCHES, *argv], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["copied"] and all(out["copied"])  # every traced step copied its micro-batches 4-6
    whole, short = ([tuple(e) for e in out[k]] for k in ("False", "True"))
    assert _canonical(short, end=("end", "0", 0)) == _canonical(whole, end=("end", "0", 0))
    assert allocsim.ReplayedPeaks.of(allocsim.replay(short)) == allocsim.ReplayedPeaks.of(allocsim.replay(whole))


_MCORE_RELEASES = r"""
import json, sys
from workbench import allocsim
from workbench.cli import build_parser
from workbench.commands.common import specs_from_args

model, _, plan = specs_from_args(build_parser().parse_args(sys.argv[1:]))
print(json.dumps({str(pin): sum(e[0] == "release" for e in allocsim.trace_mcore(model, plan.replace(pin_memory=pin),
                                                                                 steps=2))
                  for pin in (True, False)}))
"""


def test_megatron_core_zero3_pageable_offload_gets_its_gradients_back_at_once():
    """The rule of :func:`workbench.allocsim.side_stream_lags` holds for a megatron-core model under DeepSpeed as for
    a transformers one: ZeRO-3 with the optimizer's buffers pageable releases no gradient block to the reduce
    stream (each is back at once); page-locked, some are."""
    import json
    import os
    import subprocess
    import sys

    argv = ["estimate", "--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "512", "--seq", "128",
            "--gpu", "H200", "--gpus-per-node", "1", "--mbs", "1", "--gbs", "1", "--attention", "unfused",
            "--engine", "deepspeed", "--zero", "3", "--offload-optimizer", "cpu"]
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", _MCORE_RELEASES, *argv], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    released = json.loads(proc.stdout.strip().splitlines()[-1])
    assert released["True"] > 0 and released["False"] == 0
