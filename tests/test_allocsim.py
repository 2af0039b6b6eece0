"""workbench.allocsim: the replayed allocator reserve on tiny Hugging Face configs, and ``estimate
--simulate-allocator`` / ``estimate(..., simulate_allocator=...)`` against the constant reserve."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import allocsim
from workbench.cli import main
from workbench.hf import import_hf, read_config
from workbench.defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from workbench.memory import OUTSIDE_ALLOCATOR_BYTES, STACK_OUTSIDE_ALLOCATOR_BYTES

HF = Path(__file__).resolve().parent / "data" / "hf"
TINY = dict(seq_length=128, micro_batch=2, steps=2)


@pytest.mark.parametrize("name,zero,attn", [("tiny-llama", 2, "sdpa"), ("tiny-llama", 0, "eager"),
                                            ("tiny-gpt2", 1, "sdpa")])
def test_replayed_fraction_is_sane_and_deterministic(name, zero, attn):
    cfg = read_config(HF / name)
    first = allocsim.replayed_reserve_fraction(cfg, zero_stage=zero, attn_implementation=attn, **TINY)
    again = allocsim.replayed_reserve_fraction(cfg, zero_stage=zero, attn_implementation=attn, **TINY)
    assert first == again
    assert 0.0 <= first < 1.0


def test_lora_and_checkpointing_are_traced():
    cfg = read_config(HF / "tiny-llama")
    full = allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=2, seq_length=128, steps=1)
    lora = allocsim.trace_hf_deepspeed(
        cfg, zero_stage=2, micro_batch=2, seq_length=128, steps=1, gradient_checkpointing=True,
        lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    # the fp32 master and Adam's states are the adapters' only: the replayed peak is far below the full fine-tune's
    assert allocsim.replay(lora).peak_allocated_bytes < allocsim.replay(full).peak_allocated_bytes


def test_bad_arguments_are_named():
    cfg = read_config(HF / "tiny-llama")
    with pytest.raises(ValueError, match="micro_batch=0"):
        allocsim.replayed_reserve_fraction(cfg, seq_length=128, micro_batch=0, zero_stage=2)
    with pytest.raises(ValueError, match="zero_stage=4"):
        allocsim.trace_hf_deepspeed(cfg, zero_stage=4, micro_batch=1, seq_length=128)
    with pytest.raises(ValueError, match="model_type"):
        allocsim.replayed_reserve_fraction({"hidden_size": 8}, seq_length=128, micro_batch=1, zero_stage=2)


def _estimate(capsys, *extra):
    argv = ["estimate", "--model", f"hf:{HF / 'tiny-llama'}", "--gpu", "H200", "--gpus-per-node", "1",
            "--seq", "128", "--mbs", "2", *([] if "--overlap-comm" in extra else ["--no-overlap-comm"]), *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_flag_changes_only_the_overhead_line(capsys):
    _, plain, _ = _estimate(capsys, "--no-simulate-allocator")
    code, replayed, _ = _estimate(capsys, "--simulate-allocator")
    assert code == 0
    from workbench.estimate import estimate

    est = estimate(*_specs(), checks=False, simulate_allocator=read_config(HF / "tiny-llama"))
    reserved = est.replayed_peaks.peak_reserved_bytes
    changed = [(a, b) for a, b in zip(plain.splitlines(), replayed.splitlines()) if a != b]
    assert len(plain.splitlines()) == len(replayed.splitlines())
    overhead = [(a, b) for a, b in changed if a.lstrip().startswith("overhead")]
    assert len(overhead) == 1
    assert overhead[0][1].endswith(f"(allocator reserve {100 * est.reserve_fraction:.1f} % (replayed): the replay's "
                                   f"peak reserved {reserved / 2**30:.2f} GiB, "
                                   f"{reserved * est.reserve_fraction / (1 + est.reserve_fraction) / 2**30:+.2f} GiB "
                                   f"above the allocated terms; outside the allocator "
                                   f"{STACK_OUTSIDE_ALLOCATOR_BYTES[('transformers', 'deepspeed')] / 2**30:.2f} GiB)")
    # the rest that may move is what the overhead term feeds: total, peak, headroom and the checks quoting them,
    # and the error band, now the replay's own
    # and the line saying where the reserve came from
    for a, b in changed:
        assert a.lstrip().startswith(("overhead", "total", "peak", "check", "error band", "allocator:")), (a, b)
    band = [b for a, b in changed if a.lstrip().startswith("error band")]
    assert len(band) == 1 and band[0].endswith("with the caching allocator replayed")
    source = [(a.strip(), b.strip()) for a, b in changed if a.lstrip().startswith("allocator:")]
    assert source == [("allocator: constant reserve by engine (not replayed: --no-simulate-allocator)",
                       "allocator: replayed over the traced steps (asked for)")]


def test_cli_replays_by_default_where_it_can(capsys, monkeypatch):
    """Without either flag a one-GPU plan in the replay's scope is replayed (the same figures as
    --simulate-allocator, stderr saying so); out of scope, with a spec changed from its config, without the trace's
    libraries or when the trace itself fails, the estimate keeps the constant reserve and says why, stdout still the
    payload only."""
    code, auto, err = _estimate(capsys, "--json")
    _, asked, _ = _estimate(capsys, "--json", "--simulate-allocator")
    assert code == 0 and "replaying the caching allocator" in err
    auto, asked = json.loads(auto), json.loads(asked)
    assert auto["memory"] == asked["memory"] and auto["memory"]["reserve_source"] == "replayed"
    assert auto["allocator_replay"] == {"mode": "auto", "replayed": True, "skipped": None}
    assert asked["allocator_replay"] == {"mode": "on", "replayed": True, "skipped": None}
    _, text, _ = _estimate(capsys)
    assert "  allocator: replayed over the traced steps (automatic for this one-GPU plan; " in text

    def skipped(*extra):
        code, out, err = _estimate(capsys, "--json", *extra)
        record = json.loads(out)
        assert code == 0 and "reserve_source" not in record["memory"]
        assert record["allocator_replay"]["mode"] == "auto" and record["allocator_replay"]["replayed"] is False
        return record["allocator_replay"]["skipped"], err

    why, err = skipped("--zero", "3")
    assert why == ("outside the replay's scope: overlap_comm=False at ZeRO-3 (the trace reduces on ZeRO-3's side "
                   "stream, DeepSpeed's default: --overlap-comm, ParallelPlan(overlap_comm=True))")
    assert "replaying" not in err and "warning" not in err
    why, _ = skipped("--layers", "1")
    assert why.startswith("the model was changed since its config.json was imported (num_layers=1 (config: ")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else object())
    why, _ = skipped()
    assert why == "the trace needs transformers, not importable here"
    monkeypatch.undo()

    def broken(*args, **kwargs):
        raise RuntimeError("trace broke\nsecond line")

    monkeypatch.setattr(allocsim, "plan_replayed_peaks", broken)
    why, err = skipped()
    assert why == "the replay failed (RuntimeError: trace broke)"
    assert "warning: the replay failed (RuntimeError: trace broke); the constant reserve is used" in err
    code, out, err = _estimate(capsys, "--simulate-allocator")  # asked for: a failure is an error, not a fallback
    assert code != 0 and out == "" and "trace broke" in err and "Traceback" not in err


def test_cli_advise_judges_the_plan_as_estimate_does(capsys):
    """`workbench advise` prices the plan as `workbench estimate` does: replayed by default where it can run (the
    same peak in its fits check, allocator_replay in its JSON), the constant with --no-simulate-allocator."""
    def run(command, *extra):
        argv = [command, "--model", f"hf:{HF / 'tiny-llama'}", "--gpu", "H200", "--gpus-per-node", "1", "--seq", "128",
                "--mbs", "2", "--no-overlap-comm", "--json", *extra]
        assert main(argv) == 0
        return json.loads(capsys.readouterr().out)

    est, adv = run("estimate"), run("advise")
    assert adv["allocator_replay"] == est["allocator_replay"] == {"mode": "auto", "replayed": True, "skipped": None}
    fits = next(f for f in adv["findings"] if f["id"] == "fits_memory")
    assert f"peak {est['memory']['per_gpu_peak_bytes'] / 2**30:.1f} GiB per GPU" in fits["message"]
    plain_est, plain_adv = run("estimate", "--no-simulate-allocator"), run("advise", "--no-simulate-allocator")
    assert plain_adv["allocator_replay"]["replayed"] is False
    plain_fits = next(f for f in plain_adv["findings"] if f["id"] == "fits_memory")
    assert f"peak {plain_est['memory']['per_gpu_peak_bytes'] / 2**30:.1f} GiB per GPU" in plain_fits["message"]
    assert plain_est["memory"]["per_gpu_peak_bytes"] != est["memory"]["per_gpu_peak_bytes"]


def test_plan_simulate_allocator_re_prices_the_ranked_plans(capsys):
    """`workbench plan --simulate-allocator` re-prices each listed plan with the replay, as `estimate` prices one
    (the same peak), judges it against the search's headroom, and says why where it cannot replay; without a config
    a transformers model's plans are skipped, saying so."""
    from workbench import catalog
    from workbench.estimate import estimate
    from workbench.planner import replay_ranked, search
    from workbench.specs import ClusterSpec

    argv = ["plan", "--model", f"hf:{HF / 'tiny-llama'}", "--gpu", "H200", "--gpus-per-node", "1", "--seq", "128",
            "--gbs", "2", "--top", "2", "--simulate-allocator"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["allocator_replay"]
    assert [r["rank"] for r in rows] == [1, 2] and all(r["replayed"] and r["skipped"] is None for r in rows)
    assert all(r["fits"] is True and r["peak_bytes"] > 0 for r in rows)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "allocator replayed over the ranked plans' traced steps (--simulate-allocator)" in text
    assert "  #1   peak " in text and "(constant reserve: " in text

    hf = import_hf(HF / "tiny-llama", seq_length=128)
    result = search(hf.spec, ClusterSpec(gpu=catalog.gpu("H200"), gpus_per_node=1), global_batch_size=2, top=2)
    (first,) = replay_ranked(result, hf, has_config=True, limit=1)
    alone = estimate(hf.spec, result.cluster, result.ranked[0].plan, simulate_allocator=hf).memory
    assert first.peak_bytes == int(alone.per_gpu_peak_bytes) and first.constant_peak_bytes == result.ranked[0].peak_bytes
    (blind,) = replay_ranked(result, None, has_config=False, limit=1)
    assert blind.peak_bytes is None and blind.fits is None and "config" in blind.skipped


def _specs():
    from workbench.specs import ClusterSpec, ParallelPlan
    from workbench import catalog

    model = import_hf(HF / "tiny-llama", seq_length=128).spec
    cluster = ClusterSpec(gpu=catalog.gpu("H200"), gpus_per_node=1, num_nodes=1)
    return model, cluster, ParallelPlan(world_size=1, engine="deepspeed", micro_batch_size=2, global_batch_size=2,
                                        overlap_comm=False)


def test_cli_json_carries_the_replayed_reserve(capsys):
    _, plain, _ = _estimate(capsys, "--json", "--no-simulate-allocator")
    code, replayed, _ = _estimate(capsys, "--json", "--simulate-allocator")
    assert code == 0
    a, b = json.loads(plain)["memory"], json.loads(replayed)["memory"]  # stdout is the payload only
    assert "reserve_source" not in a and b["reserve_source"] == "replayed"
    assert b["replayed_peak_reserved_bytes"] >= b["replayed_peak_allocated_bytes"] > 0
    assert "replayed_peak_reserved_bytes" not in a
    # the device is the stack's own memory outside the allocator (a transformers model under ZeRO-0/1/2) + the
    # replay's own peak reserved, taken whole; the constant-reserve estimate keeps its engine's figure
    stack = STACK_OUTSIDE_ALLOCATOR_BYTES[("transformers", "deepspeed")]
    assert stack < OUTSIDE_ALLOCATOR_BYTES["deepspeed"]
    assert b["per_gpu_peak_bytes"] == pytest.approx(stack + b["replayed_peak_reserved_bytes"], abs=8)
    assert "(replayed)" in b["formulas"]["overhead"] and "taken whole" in b["formulas"]["overhead"]
    assert "transformers/deepspeed" in b["formulas"]["overhead"]
    allocated = b["allocated_bytes"]
    assert allocated == a["allocated_bytes"]  # the allocated terms are untouched
    assert b["breakdown"]["overhead"] - stack == pytest.approx(b["reserve_fraction"] * allocated, abs=4)
    assert "allocator replayed" in b["band_bytes"]["note"] and "replayed" not in a["band_bytes"]["note"]


def test_cli_replays_overlap_comm_with_the_offload(capsys):
    """ZeRO-1/2 with overlap_comm and the optimizer on the CPU (the workbench export's ds_config) is replayed since
    the final49 batch judged its trace blind; the replay's peak differs from the trace without overlap_comm's."""
    peaks = {}
    for overlap in ("--overlap-comm", "--no-overlap-comm"):
        code, out, err = _estimate(capsys, "--simulate-allocator", "--zero", "2", "--offload-optimizer", "cpu",
                                   overlap, "--json")
        assert code == 0, err
        memory = json.loads(out)["memory"]
        assert memory["replayed_peak_reserved_bytes"] > memory["allocated_bytes"] > 0
        peaks[overlap] = memory["replayed_peak_reserved_bytes"]
    assert peaks["--overlap-comm"] != peaks["--no-overlap-comm"]


@pytest.mark.parametrize("extra,why", [(["--zero", "3"], "overlap_comm=False at ZeRO-3"),
                                        (["--zero", "3", "--overlap-comm", "--offload-optimizer", "cpu", "--gbs",
                                          "4"], "offload_optimizer=cpu with zero_stage=3, "
                                                "gradient_accumulation_steps=2")])
def test_cli_refuses_plans_outside_the_study(capsys, extra, why):
    code, out, err = _estimate(capsys, "--simulate-allocator", *extra)
    assert code == 2 and out == ""
    line = err.strip()
    assert line.startswith(f"workbench: error: {allocsim.SCOPE}") and why in line and "\n" not in line


def test_cli_refuses_a_megatron_core_model_without_unfused_attention(capsys):
    code, out, err = main(["estimate", "--model", "llama3-8b", "--gpus-per-node", "1", "--no-overlap-comm",
                           "--simulate-allocator"]), \
        *capsys.readouterr()
    assert code == 2 and out == ""
    assert allocsim.SCOPE in err and "attention=flash on a megatron-core model" in err and "\n" not in err.strip()


TINY_MCORE = ["--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "512", "--seq", "256", "--gpu", "H200",
              "--gpus-per-node", "1", "--mbs", "2", "--attention", "unfused", "--no-overlap-comm"]


def test_megatron_core_model_is_traced_in_a_child_process(capsys):
    """A megatron-core model with unfused attention (the launcher's local layer spec) is traced from its specs in a
    child process: the CLI's overhead line and ``estimate(..., simulate_allocator=True)`` carry the replayed reserve;
    ``mcore_traces`` returns the traces themselves (two plans in one child), which replayed here give the reserve of
    ``mcore_replays`` and of the estimate; a model of another implementation is refused by name."""
    from workbench.cli import build_parser
    from workbench.commands.common import specs_from_args
    from workbench.estimate import estimate

    code = main(["estimate", *TINY_MCORE, "--simulate-allocator", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    memory = json.loads(out)["memory"]  # stdout is the payload only: megatron-core's warnings go elsewhere
    assert memory["reserve_source"] == "replayed"
    assert memory["per_gpu_peak_bytes"] == pytest.approx(
        STACK_OUTSIDE_ALLOCATOR_BYTES[("megatron", "deepspeed")] + memory["replayed_peak_reserved_bytes"],
        abs=8)  # a megatron-core model under DeepSpeed ZeRO-0/1/2: that stack's memory outside the allocator
    main(["estimate", *TINY_MCORE, "--json", "--no-simulate-allocator"])
    plain = json.loads(capsys.readouterr()[0])["memory"]
    assert plain["allocated_bytes"] == memory["allocated_bytes"] and "reserve_source" not in plain

    model, cluster, plan = specs_from_args(build_parser().parse_args(["estimate", *TINY_MCORE]))
    jobs = [(model, cluster, plan.replace(zero_stage=z)) for z in (1, 2)]
    traces = allocsim.mcore_traces(jobs)
    for events in traces:
        assert ("end", "0", 0) in events and any(kind == "malloc" for kind, _key, _size in events)
    zero1 = allocsim.replay(traces[0])
    assert zero1.peak_reserved_bytes >= zero1.peak_allocated_bytes > 14 * model.parameter_counts().total
    est = estimate(model, cluster, jobs[0][2], checks=False, simulate_allocator=True)  # mcore_replays' child
    assert est.replayed_peaks == allocsim.ReplayedPeaks.of(zero1)
    with pytest.raises(ValueError, match="mcore_traces traces megatron-core models"):
        allocsim.mcore_traces([(model.replace(implementation="transformers"), cluster, plan)])


def test_estimate_keyword_takes_the_hf_model():
    from workbench.estimate import estimate

    model, cluster, plan = _specs()
    hf = import_hf(HF / "tiny-llama", seq_length=128)
    plain = estimate(model, cluster, plan, checks=False)
    replayed = estimate(model, cluster, plan, checks=False, simulate_allocator=hf)
    assert plain.reserve_fraction is None and "reserve_source" not in plain.to_dict()["memory"]
    assert replayed.replayed_peaks == allocsim.plan_replayed_peaks(model, cluster, plan, hf.config)
    assert replayed.memory.peak_stage.terms.activations == plain.memory.peak_stage.terms.activations
    # "fits" is judged on the replay's own held-out band (benchmarks/alloc_sim.py --write-band)
    from workbench.memory import REPLAYED_BAND_SUFFIX, _error_bands

    entry = _error_bands()["device"][f"deepspeed/{REPLAYED_BAND_SUFFIX}"]
    peak = replayed.memory.per_gpu_peak_bytes
    assert replayed.memory.band_high_bytes == int(round(peak * entry["high_fraction"]))
    assert "allocator replayed" in replayed.memory.band_note and "replayed" not in plain.memory.band_note
    with pytest.raises(ValueError, match="give the Hugging Face config"):
        estimate(model, cluster, plan, simulate_allocator=True)
    accumulated = plan.replace(zero_stage=3, overlap_comm=True, offload_optimizer="cpu",
                               global_batch_size=2 * plan.global_batch_size)
    with pytest.raises(ValueError, match="offload_optimizer=cpu with zero_stage=3, gradient_accumulation_steps=2"):
        estimate(model, cluster, accumulated, simulate_allocator=hf)


def test_zero1_offload_keeps_every_gradient_until_the_end_of_backward():
    """ZeRO-1 with the optimizer on the CPU sends its gradients through the bucket only after backward (the engine's
    ``reduce_gradients``), ZeRO-2 as autograd makes them: on the same model ZeRO-1 holds every 16-bit gradient at
    once and peaks higher; both hand the gradients to the host, so neither keeps a gradient partition after the
    step. (On the H200 corpus's two ZeRO-1 offload runs the trace gives the measured peaks to the byte.)"""
    cfg = read_config(HF / "tiny-llama")
    peaks = {z: allocsim.replayed_peaks(cfg, zero_stage=z, offload_optimizer=True, **TINY) for z in (1, 2)}
    grads = 2 * import_hf(HF / "tiny-llama", seq_length=128).spec.parameter_counts().total
    assert peaks[1].peak_allocated_bytes > peaks[2].peak_allocated_bytes
    assert peaks[1].peak_allocated_bytes - peaks[2].peak_allocated_bytes < grads
    assert peaks[1].peak_reserved_bytes >= peaks[1].peak_allocated_bytes


def test_zero3_offload_hands_a_buckets_gradients_to_the_host_in_model_order():
    """DeepSpeed's ZeRO-3 reduces a bucket through ``__avg_scatter_grads`` (``reduce_scatter``, on by default), which
    sorts the bucket's parameters by ``ds_id`` first, so ``partition_grads`` copies them to the host in the model's
    parameter order, not the hooks' (backward) order. With a 20 k-element bucket on tiny-llama one bucket holds the
    layer's k, v and o projections, its MLP gate and its second norm (arriving as gate, norm, o, v, k): their staged
    16-bit copies come as k, v, o, gate, norm. (Replayed on a Llama 2 7B-width megatron-core model's ZeRO-3 offload
    history, this order took the trace's peak reserved from -2.4 % to the byte.)"""
    cfg = read_config(HF / "tiny-llama")
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=16, steps=1,
                                         offload_optimizer=True, reduce_bucket_elements=20_000)
    side = [size for kind, _key, size, *stream in events if kind == "malloc" and stream == [allocsim.SIDE_STREAM]]
    k, v, o, gate, norm = 2048, 2048, 4096, 11264, 64  # elements
    start = side.index(2 * (k + v + o + gate + norm)) + 1  # reduce_scatter_coalesced's flat buffer, then the copies
    assert side[start:start + 15:3] == [2 * n for n in (k, v, o, gate, norm)]


def _tiny_mcore_specs():
    from workbench.cli import build_parser
    from workbench.commands.common import specs_from_args

    return specs_from_args(build_parser().parse_args(["estimate", *TINY_MCORE]))


def test_simulate_allocator_is_read_alike_for_both_kinds_of_model(monkeypatch):
    """``estimate(..., simulate_allocator=...)`` hands the replay what the caller gave by one rule for transformers
    and megatron-core models: a megatron-core model is traced from its specs (``True``); a config given for it is
    refused, as ``True`` is for a transformers model, instead of being dropped. The replay itself is stubbed."""
    from workbench.estimate import estimate

    hf = import_hf(HF / "tiny-llama", seq_length=128)
    mcore = _tiny_mcore_specs()
    with pytest.raises(ValueError, match="megatron-core model, traced from its specs"):
        allocsim.plan_reserve_fraction(*mcore, hf.config)  # refused before anything is traced
    given = []
    peaks = allocsim.ReplayedPeaks(peak_allocated_bytes=2**30, peak_reserved_bytes=2**31)

    def replay(model, cluster, plan, config=None, **kwargs):
        given.append((model, config))
        return peaks

    monkeypatch.setattr(allocsim, "plan_replayed_peaks", replay)
    assert estimate(*mcore, checks=False, simulate_allocator=True).replayed_peaks == peaks
    assert given == [(mcore[0], None)]
    for config in (hf, hf.config, str(HF / "tiny-llama")):
        with pytest.raises(ValueError, match="is traced from its specs, not from a config: pass "
                                             "simulate_allocator=True"):
            estimate(*mcore, checks=False, simulate_allocator=config)
    assert len(given) == 1  # nothing was replayed without the caller's value
    model, cluster, plan = _specs()
    for config in (hf, hf.config, str(HF / "tiny-llama")):
        assert estimate(model, cluster, plan, checks=False, simulate_allocator=config).replayed_peaks == peaks
        assert given[-1] == (model, hf.config)


def test_one_scope_check_per_cli_estimate(monkeypatch, capsys):
    """``workbench estimate --simulate-allocator`` checks the plan's scope once (in the estimate) before it replays,
    for both kinds of model; the replays are stubbed and count the checks made before them."""
    real = allocsim.check_scope
    checks, seen = [], []

    def check_scope(model, plan):
        checks.append(model.name)
        return real(model, plan)

    monkeypatch.setattr(allocsim, "check_scope", check_scope)
    peaks = allocsim.ReplayedPeaks(peak_allocated_bytes=2**30, peak_reserved_bytes=2**31)
    monkeypatch.setattr(allocsim, "replayed_peaks", lambda *a, **k: seen.append(len(checks)) or peaks)
    monkeypatch.setattr(allocsim, "_run_mcore_jobs",
                        lambda payload: seen.append(len(checks)) or [dict(peak_allocated_bytes=2**30,
                                                                          peak_reserved_bytes=2**31)] * len(payload))
    code, _, _ = _estimate(capsys, "--simulate-allocator", "--json")
    assert code == 0 and seen == [1]
    checks.clear()
    assert main(["estimate", *TINY_MCORE, "--simulate-allocator", "--json"]) == 0
    capsys.readouterr()
    assert seen == [1, 1]


def test_cli_refuses_a_transformers_model_without_its_config_after_the_scope_check():
    """A transformers model not imported from a config (no ``--model hf:PATH``) is refused by the CLI with the scope
    sentence; a plan outside the scope is named first."""
    from argparse import Namespace

    from workbench.commands.estimate import _replay_given

    model, _, plan = _specs()
    with pytest.raises(ValueError, match="offload_optimizer=cpu with zero_stage=3, gradient_accumulation_steps=2"):
        _replay_given(Namespace(model=None), model, plan.replace(zero_stage=3, overlap_comm=True,
                                                                 offload_optimizer="cpu",
                                                                 global_batch_size=2 * plan.global_batch_size))
    with pytest.raises(ValueError) as refused:
        _replay_given(Namespace(model=None), model, plan)
    assert str(refused.value) == (f"{allocsim.SCOPE}; this plan's transformers model {model.name} is not imported "
                                  f"from a config (--model hf:PATH)")
    assert _replay_given(Namespace(model=f"hf:{HF / 'tiny-llama'}"), model, plan) == str(HF / "tiny-llama")
    assert _replay_given(Namespace(model=None), _tiny_mcore_specs()[0], plan) is True


def test_workbench_imports_without_torch():
    code = ("import sys, workbench, workbench.allocsim, workbench.estimate, workbench.commands.estimate; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip() == "[]"


def test_replayed_reserve_replaces_a_bare_process_profiles_floor():
    """A GPU profile's figures are lower bounds (``floor``): its reserve would be raised to the constant; the replayed
    one is used as it is, the context still the larger of the profile's and the engine's."""
    from workbench import encode
    from workbench.memory import OUTSIDE_ALLOCATOR_BYTES, memory_estimate_from

    class Profile:
        name = "bare"

        def memory_overheads(self):
            return {"context_bytes": 2**29, "reserve_fraction": 0.055, "floor": True}, []

    model, cluster, plan = _specs()
    codes = encode.memory_inputs(model, encode.plan_columns(plan, model), plan.precision)
    plain = memory_estimate_from(model, cluster, plan, codes)
    allocated = plain.per_gpu_peak_bytes - plain.peak_stage.terms.overhead  # one stage
    peaks = allocsim.ReplayedPeaks(peak_allocated_bytes=allocated, peak_reserved_bytes=round(1.01 * allocated))
    mem = memory_estimate_from(model, cluster, plan, codes, profile=Profile(), replayed_peaks=peaks)
    terms = mem.peak_stage.terms
    assert terms.overhead == pytest.approx(OUTSIDE_ALLOCATOR_BYTES["deepspeed"] + 0.01 * allocated, abs=2)
    assert "allocator reserve 1.0% (replayed)" in mem.formulas["overhead"]


def test_replayed_band_is_the_replays_own_and_falls_back_without_one(monkeypatch):
    """Each engine in the replay's scope (DeepSpeed; megatron-core's own DDP) has its own replayed band, written by
    ``benchmarks/alloc_sim.py --write-band``; an engine without one gets its usual band."""
    import copy

    from workbench import memory
    from workbench.memory import REPLAYED_BAND_SUFFIX, _error_bands, error_band

    for engine in ("deepspeed", "megatron"):
        entry = _error_bands()["device"][f"{engine}/{REPLAYED_BAND_SUFFIX}"]
        assert entry["n"] >= 5 and entry["shapes"] >= 2
        low, high, note = error_band(engine, "device", "none", replayed=True)
        assert (low, high) == (entry["low_fraction"], entry["high_fraction"]) and "replayed" in note
        assert "replayed" not in error_band(engine, "device", "none")[2]
    # DeepSpeed's offload regimes have their own replayed band (the parameters' offload buffers leave the replay's
    # reserve further from the measured one), taken before the engine's replayed band and the regime's constant one
    for flags, regime, what in ((dict(offload_params="cpu", offload_optimizer="cpu"), "param-offload", "parameters"),
                                (dict(offload_optimizer="cpu", zero_stage=2), "optimizer-offload", "optimizer"),
                                (dict(offload_optimizer="cpu", zero_stage=3), "zero3-optimizer-offload", "optimizer")):
        entry = _error_bands()["device"][f"deepspeed/{REPLAYED_BAND_SUFFIX}/{regime}"]
        assert entry["n"] >= 5
        low, high, note = error_band("deepspeed", "device", "none", replayed=True, **flags)
        assert (low, high) == (entry["low_fraction"], entry["high_fraction"])
        assert "replayed" in note and f"with the {what} on the host" in note
        assert error_band("deepspeed", "device", "none", **flags)[2] != note
    without = copy.deepcopy(_error_bands())
    del without["device"][f"megatron/{REPLAYED_BAND_SUFFIX}"]
    monkeypatch.setattr(memory, "_error_bands", lambda: without)
    assert error_band("megatron", "device", "none", replayed=True) == error_band("megatron", "device", "none")


def test_cpu_adapter_sends_cuda_requests_to_meta_only_inside_its_context():
    """The megatron-core trace builds megatron-core's own workspaces on the meta device; outside the context the
    adapter keeps putting CUDA requests on the CPU (the launcher's CPU runs), also after an error inside it."""
    from workbench.runs import cpu_adapter

    assert cpu_adapter._to_cpu_device("cuda") == "cpu" and cpu_adapter._to_cpu_device(0) == "cpu"
    with pytest.raises(RuntimeError):
        with cpu_adapter.meta_device():
            assert cpu_adapter._to_cpu_device("cuda:0") == "meta" == cpu_adapter._CpuCuda.current_device()
            assert cpu_adapter._to_cpu_device("cpu") == "cpu"
            raise RuntimeError("inside")
    assert cpu_adapter._to_cpu_device("cuda") == "cpu" == cpu_adapter._CpuCuda.current_device()


def test_trace_takes_cublas_workspaces_once_per_pass_and_keeps_them():
    cfg = read_config(HF / "tiny-llama")
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=2, seq_length=128, steps=2)
    workspaces = [e for e in events if isinstance(e[1], tuple) and e[1][0] == "cublas_workspace"]
    # one for the forward's GEMMs, one for autograd's, each allocated once in the whole run and never freed
    assert [(kind, key[1], size) for kind, key, size in workspaces] == [
        ("malloc", "forward", allocsim.CUBLAS_WORKSPACE_BYTES), ("malloc", "backward", allocsim.CUBLAS_WORKSPACE_BYTES)]
    assert allocsim.CUBLAS_WORKSPACE_BYTES == 32 * 2**20


def test_fused_rms_norm_keeps_the_output_and_a_row_statistic_only():
    import torch

    real, fused = allocsim.cuda_rms_norm()
    events = []
    x = torch.empty(4, 16, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.empty(64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with allocsim._recorder(events):
        out = fused(x, (64,), w, 1e-6)
        out.sum().backward()
    sizes = sorted(size for kind, _key, size in events if kind == "malloc")
    # forward: the bf16 output (4·16·64·2) and an fp32 statistic per row (4·16·4); no fp32 copy of the input
    assert 4 * 16 * 64 * 4 not in sizes
    assert 4 * 16 * 64 * 2 in sizes and 4 * 16 * 4 in sizes
    assert out.dtype == torch.bfloat16 and x.grad.shape == x.shape and w.grad.shape == w.shape
    # other inputs keep torch's own rms_norm
    y = torch.ones(2, 8)
    assert torch.equal(fused(y, (8,), None, 1e-6), real(y, (8,), None, 1e-6))


def _tiny_mcore_ddp_specs():
    """The tiny megatron-core model under megatron-core's own DDP and torch's AdamW on one GPU."""
    from workbench.cli import build_parser
    from workbench.commands.common import specs_from_args

    return specs_from_args(build_parser().parse_args(["estimate", *TINY_MCORE, "--engine", "megatron", "--adam",
                                                      "torch"]))


def _live_bytes(events) -> int:
    live = {}
    for kind, key, size in events:
        if kind == "end":
            break
        if kind == "malloc":
            live[key] = size
        elif kind == "free":
            live.pop(key, None)
    return sum(live.values())


def test_megatron_core_ddp_trace_keeps_the_training_state():
    """After the steps of megatron-core's DDP (``trace_mcore_ddp``, one child process for both plans) what stays is
    the training state — bf16 parameters, the fp32 gradient buffer, fp32 main parameters and Adam's two fp32 states,
    18 bytes a parameter with the plain optimizer and the distributed one alike on one GPU — with cuBLAS's two
    workspaces, megatron-core's attention-score workspace, the causal mask and the positions; during each step
    torch's multi-tensor Adam takes the square roots of the second moments as temporaries."""
    model, cluster, plan = _tiny_mcore_ddp_specs()
    assert str(plan.engine) == "megatron" and str(plan.adam) == "torch"
    allocsim.check_scope(model, plan)
    n, b, s = model.parameter_counts().total, plan.micro_batch_size, model.seq_length
    plans = [plan.replace(distributed_optimizer=False), plan.replace(distributed_optimizer=True)]
    traces = allocsim.mcore_traces([(model, cluster, p) for p in plans], steps=2)
    scores, mask, positions = b * model.num_attention_heads * s * s * 2, s * s, s * 8
    for events in traces:
        assert not isinstance(events, dict), events
        assert _live_bytes(events) == 18 * n + 2 * allocsim.CUBLAS_WORKSPACE_BYTES + scores + mask + positions
        embedding = model.vocab_size * model.hidden_size * 4  # the fp32 word embedding: main parameter, states
        assert sum(1 for kind, _k, size in events if kind == "malloc" and size == embedding) >= 3 + 2


def test_megatron_core_ddp_scope_names_fields_and_values():
    """``check_scope`` takes megatron-core's DDP on one GPU for a dense megatron-core model with unfused attention
    and names each field outside it; ``plan_reserve_fraction`` leaves megatron-core's memory outside the allocator
    (not DeepSpeed's) to the replay: the allocator may reserve the GPU less the stack's memory outside it."""
    model, cluster, plan = _tiny_mcore_ddp_specs()
    allocsim.check_scope(model, plan)
    allocsim.check_scope(model, plan.replace(distributed_optimizer=True, recompute="full"))
    for change, why in ((dict(adam="fused"), "adam=fused with engine=megatron"),
                        (dict(tensor_parallel=2, world_size=2), "tensor_parallel=2 (the megatron-core trace runs one "
                                                                "rank"),
                        (dict(world_size=2), "world_size=2 (the replay traces one GPU)"),
                        (dict(offload_optimizer="cpu"), "offload_optimizer=cpu with engine=megatron"),
                        (dict(grad_reduce_fp32=False), "grad_reduce_fp32=False")):
        try:
            changed = plan.replace(**change)
        except ValueError:  # a combination the plan itself refuses
            continue
        with pytest.raises(ValueError) as refused:
            allocsim.check_scope(model, changed)
        assert str(refused.value).startswith(allocsim.SCOPE) and why in str(refused.value)
    with pytest.raises(ValueError, match="engine=megatron with implementation=transformers"):
        allocsim.check_scope(model.replace(implementation="transformers"), plan)
    job = allocsim._mcore_job(model, cluster, plan, capacity_bytes=None, steps=1)
    assert job["capacity_bytes"] == cluster.gpu.memory_bytes - STACK_OUTSIDE_ALLOCATOR_BYTES[("megatron", "megatron")]
    under_deepspeed = plan.replace(engine="deepspeed")
    assert (allocsim.replay_capacity_bytes(model, cluster, under_deepspeed)
            == cluster.gpu.memory_bytes - STACK_OUTSIDE_ALLOCATOR_BYTES[("megatron", "deepspeed")])


def _backward_sums_on_cpu(build):
    """How many gradient sums PyTorch's engine makes in place (``aten::add_``) and out of place (``aten::add``) in
    the backward of ``build()``'s loss on real CPU tensors: the ground truth the trace's sums are checked against."""
    from torch.profiler import ProfilerActivity, profile

    loss = build("cpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss.backward()
    names = [e.name for e in prof.events()]
    return names.count("aten::add_"), names.count("aten::add")


def _backward_sums_in_trace(build):
    """The same counts in the trace: a sum the recorder turned into an in-place one takes no block, an out-of-place
    one takes a block the size of its operands."""
    import torch

    events, sums = [], []
    real_after = allocsim._GradientAccumulation.after_call

    def counting(self, func, args, kwargs, out):
        if func is torch.ops.aten.add.Tensor and torch._C._current_graph_task_id() != -1:
            sums.append(self.blocks.get(out.untyped_storage()._cdata))
        real_after(self, func, args, kwargs, out)

    allocsim._GradientAccumulation.after_call = counting
    try:
        with allocsim._recorder(events):
            build("meta").backward()
    finally:
        allocsim._GradientAccumulation.after_call = real_after
    made = {key for kind, key, _size in events if kind == "malloc"}
    out_of_place = sum(1 for block in sums if block in made)
    return len(sums) - out_of_place, out_of_place


def test_gradient_sums_are_in_place_where_autograd_makes_them_in_place():
    """A GeLU-tanh MLP with a residual and a tied output weight through ``F.linear``: autograd sums the activation's
    three gradients in place (it holds the last reference), the residual's two out of place (the first is still the
    other branch's input when the second arrives), and the tied weight's two out of place (``F.linear``'s weight
    gradient is a view). The trace's sums match the CPU engine's one for one."""
    import math

    import torch
    import torch.nn.functional as F

    def build(device):
        torch.manual_seed(0)
        w = torch.randn(50, 16, device=device, requires_grad=True)
        fc = torch.randn(16, 64, device=device, requires_grad=True)
        ids = torch.zeros(2, 8, dtype=torch.long, device=device)
        h = F.embedding(ids, w)
        u = h @ fc
        act = 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * torch.pow(u, 3.0))))
        h = h + torch.tanh(act @ fc.t())
        return F.linear(h, w).float().sum()

    on_cpu = _backward_sums_on_cpu(build)
    assert on_cpu[0] >= 2 and on_cpu[1] >= 2  # both kinds occur in this model
    assert _backward_sums_in_trace(build) == on_cpu


def test_zero0_reduces_gradients_in_flattened_buckets_at_each_boundary(monkeypatch):
    """DeepSpeed ZeRO-0 reduces the gradients through ``buffered_allreduce_fallback`` at every accumulation
    boundary, one GPU included: parameters in module order are flattened into a bucket until it holds more than
    ``MEMORY_OPT_ALLREDUCE_SIZE`` elements, each bucket freed after it is copied back. With the bucket shrunk the
    trace's flat buffers are those partial sums, once per step and not per micro-batch."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = read_config(HF / "tiny-llama")
    fields = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg["model_type"], **fields))
    sizes = [p.numel() for p in model.parameters() if p.requires_grad]
    limit = sum(sizes) // 3
    monkeypatch.setattr(allocsim, "ALLREDUCE_FALLBACK_ELEMENTS", limit)
    buckets, numel = [], 0
    for i, n in enumerate(sizes):
        numel += n
        if numel > limit or i == len(sizes) - 1:
            buckets.append(numel * 2)  # bf16
            numel = 0
    assert len(buckets) >= 3
    steps, accum = 2, 2
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=0, micro_batch=1, seq_length=32, steps=steps,
                                         grad_accum=accum)
    # each flat bucket is allocated and freed at once; find the runs of such pairs of exactly the bucket sizes
    pairs = [events[i][2] for i in range(len(events) - 1)
             if events[i][0] == "malloc" and events[i + 1][:2] == ("free", events[i][1])]
    runs = [pairs[i:i + len(buckets)] for i in range(len(pairs)) if pairs[i:i + len(buckets)] == buckets]
    assert len(runs) == steps
    stage2 = allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=1, seq_length=32, steps=steps)
    pairs2 = [stage2[i][2] for i in range(len(stage2) - 1)
              if stage2[i][0] == "malloc" and stage2[i + 1][:2] == ("free", stage2[i][1])]
    assert not any(pairs2[i:i + len(buckets)] == buckets for i in range(len(pairs2)))


def test_deepspeed_flattens_on_the_cpu_where_the_gpu_lacks_room():
    """ZeRO-1/2 check the GPU's free memory before they flatten the 16-bit parameters (``flatten_on_accelerator``):
    with room the flat buffer is made beside the parameters on the GPU, without it on the host and then moved, so
    the two copies never meet on the GPU. The replay takes the engine's branch from its own reserve at that check."""
    cfg = read_config(HF / "tiny-llama")

    def trace(on_device):
        return allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=2, seq_length=128, steps=1,
                                           flatten_on_device=on_device)

    roomy = allocsim.replay(trace(True), capacity_bytes=1 << 62)
    ((reserved, flat),) = roomy.flatten_checks
    n = sum(size for kind, _key, size in trace(True) if kind == "flatten") // 2
    assert flat == 2 * n > 0
    on_cpu = allocsim.replay(trace(False), capacity_bytes=1 << 62)
    assert on_cpu.flatten_checks == roomy.flatten_checks
    assert allocsim.flattens_on_device(roomy, reserved + flat) and not allocsim.flattens_on_device(roomy,
                                                                                                  reserved + flat - 1)
    # the engine's branch follows the room: on the GPU with it, on the CPU one byte short
    tight = allocsim.replay_deepspeed(trace, reserved + flat - 1)
    assert (tight.peak_allocated_bytes, tight.peak_reserved_bytes) == (on_cpu.peak_allocated_bytes,
                                                                        on_cpu.peak_reserved_bytes)
    wide = allocsim.replay_deepspeed(trace, reserved + flat)
    assert (wide.peak_allocated_bytes, wide.peak_reserved_bytes) == (roomy.peak_allocated_bytes,
                                                                      roomy.peak_reserved_bytes)
    # on the CPU the parameters' own storage is gone before the flat buffer arrives: never more allocated at init
    assert on_cpu.peak_allocated_bytes <= roomy.peak_allocated_bytes


def test_zero3_sub_groups_close_at_the_size_or_the_last_parameter():
    """DeepSpeed's _create_fp16_sub_groups: one group when everything fits, else a group closes once it reaches the
    size (the parameter that crosses it included) and at the last parameter."""
    assert allocsim.zero3_sub_groups([3, 4], 10) == [7]
    assert allocsim.zero3_sub_groups([6, 6, 6, 1], 10) == [12, 7]
    assert allocsim.zero3_sub_groups([10, 1, 2], 10) == [10, 3]
    assert allocsim.zero3_sub_groups([]) == []


def test_a_side_stream_block_is_not_reused_by_the_default_stream():
    """PyTorch's caching allocator keeps each stream's freed blocks for that stream: a block freed on the side
    stream does not serve the default stream's request of the same size, which cuts a segment of its own."""
    alloc = allocsim.CachingAllocator(capacity_bytes=1 << 40)
    side = alloc.malloc(64 << 20, 1)
    alloc.free(side)
    alloc.malloc(64 << 20, 0)
    assert alloc.reserved_bytes == 2 * (64 << 20)
    again = allocsim.CachingAllocator(capacity_bytes=1 << 40)
    again.free(again.malloc(64 << 20, 0))
    again.malloc(64 << 20, 0)
    assert again.reserved_bytes == 64 << 20


def test_zero3_trace_holds_deepspeeds_buffers_and_reduces_on_the_side_stream():
    """ZeRO-3 on one GPU: the flat bf16 partition, the fp32 master, the bf16 gradient partitions and the bucket are
    held through the steps; a bucket smaller than the model is reduced more than once in backward, each time into
    a block on the side stream; with the optimizer on the CPU the master and gradient partitions leave the GPU."""
    cfg = read_config(HF / "tiny-llama")
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64, steps=2,
                                         reduce_bucket_elements=40_000)
    side = [e for e in events if e[0] == "malloc" and e[3:] == (allocsim.SIDE_STREAM,)]
    assert len(side) >= 4  # at least two reductions a step over two steps
    peaks = allocsim.replay(events, capacity_bytes=1 << 40)
    from transformers import AutoConfig, AutoModelForCausalLM
    import torch

    c = dict(cfg)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(
            AutoConfig.for_model(c.pop("model_type"), **{k: v for k, v in c.items() if k != "architectures"}))
            .parameters())
    held = n * (2 + 4 + 2 + 8) + 40_000 * 2  # flat bf16, fp32 master, bf16 gradient partitions, Adam, bucket
    slack = 2 * allocsim.CUBLAS_WORKSPACE_BYTES + (8 << 20)  # cuBLAS's two workspaces and the tiny activations
    assert held < peaks.peak_allocated_bytes < held + slack
    offloaded = allocsim.replay(allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64,
                                                            steps=2, offload_optimizer=True),
                                capacity_bytes=1 << 40)
    # the flat bf16 partition and DeepSpeed's default 500M-element bucket stay; no master, gradients or Adam
    assert 500_000_000 * 2 < offloaded.peak_allocated_bytes < n * 2 + 500_000_000 * 2 + slack
    assert offloaded.peak_allocated_bytes < peaks.peak_allocated_bytes - 40_000 * 2 + 500_000_000 * 2


def test_zero3_gradients_wait_for_the_reduce_stream():
    """ZeRO-3 frees each gradient it hands to the reduce stream with record_stream: with ``side_stream_lags`` (the
    default) the program's free only drops the allocated count ("release") and the block returns at the host's next
    wait for that stream, so the allocated peak is the same and the reserved one no lower; without it, at once."""
    cfg = read_config(HF / "tiny-llama")
    kw = dict(zero_stage=3, micro_batch=1, seq_length=64, steps=2, reduce_bucket_elements=40_000)
    lagging = allocsim.trace_hf_deepspeed(cfg, **kw)
    prompt = allocsim.trace_hf_deepspeed(cfg, **kw, side_stream_lags=False)
    released = [e for e in lagging if e[0] == "release"]
    assert released and not [e for e in prompt if e[0] == "release"]
    # every released block comes back, after its release
    back = {e[1]: i for i, e in enumerate(lagging) if e[0] == "free"}
    assert all(back.get(e[1], -1) > lagging.index(e) for e in released)
    a, b = (allocsim.replay(ev, capacity_bytes=1 << 40) for ev in (lagging, prompt))
    assert a.peak_allocated_bytes == b.peak_allocated_bytes
    assert a.peak_reserved_bytes >= b.peak_reserved_bytes


def test_pageable_zero3_offload_gets_its_gradients_back_at_once():
    """ZeRO-3 with the optimizer's buffers in pageable host memory: each gradient partition's copy to the host waits
    for the reduce stream, so nothing lags (:func:`workbench.allocsim.side_stream_lags`); page-locked, or without
    offload, the blocks come back late. A plan's replay follows its ``pin_memory``."""
    from workbench.estimate import estimate
    from workbench.specs import ParallelPlan

    assert allocsim.side_stream_lags(3, True, True) and allocsim.side_stream_lags(3, False, False)
    assert not allocsim.side_stream_lags(3, True, False) and allocsim.side_stream_lags(2, True, False)
    cfg = read_config(HF / "tiny-llama")
    model, cluster, _ = _specs()
    plan = ParallelPlan(world_size=1, zero_stage=3, micro_batch_size=1, global_batch_size=1,
                        offload_optimizer="cpu", pin_memory=False)
    kw = dict(seq_length=model.seq_length, micro_batch=1, zero_stage=3, offload_optimizer=True)
    pageable = estimate(model, cluster, plan, checks=False, simulate_allocator=cfg).replayed_peaks
    assert pageable == allocsim.replayed_peaks(cfg, **kw, pin_memory=False)
    pinned = estimate(model, cluster, plan.replace(pin_memory=True), checks=False, simulate_allocator=cfg)
    assert pinned.replayed_peaks == allocsim.replayed_peaks(cfg, **kw)
    assert pinned.replayed_peaks.peak_reserved_bytes >= pageable.peak_reserved_bytes


def test_zero3_gradient_reduced_alone_waits_for_the_reduce_stream_too():
    """A gradient larger than the bucket (tiny-llama's untied 512 x 64 output layer and embedding, over a 20 k-element
    bucket) is reduced from its own block, which partition_grads frees with record_stream as it does the bucket's
    gradients: released, back at the host's next wait for the reduce stream (the allocator histories of InternLM2
    20B's and Baichuan 2 13B's widths under ZeRO-3 with the optimizer on the CPU, one H100: the output layer's
    gradient came back only after the embedding's had been allocated, one more segment of its size)."""
    cfg = read_config(HF / "tiny-llama")
    big = 2 * cfg["vocab_size"] * cfg["hidden_size"]  # bf16 bytes of either
    for offload in (False, True):
        events = allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64, steps=2,
                                             reduce_bucket_elements=20_000, offload_optimizer=offload)
        released = [e for e in events if e[0] == "release" and e[2] == big]
        assert len(released) >= 2 * 2, offload  # both weights' gradients, in each of two steps
        back = {e[1]: i for i, e in enumerate(events) if e[0] == "free"}
        assert all(back.get(e[1], -1) > events.index(e) for e in released)


def test_zero3_converted_copies_meet_across_sub_groups(monkeypatch):
    """DeepSpeed's _create_fp32_partitions keeps each sub-group's fp32 converted copy in its loop variable until
    the next one is made: with two sub-groups, the first converted copy is freed only after the second is made."""
    from workbench import memory

    cfg = read_config(HF / "tiny-llama")
    sizes, totals = [], []

    def spy(numels, sub_group_elements):
        groups = memory.zero3_sub_groups(numels, sub_group_elements)
        sizes.extend(groups)
        totals.append(sum(numels))
        return groups

    monkeypatch.setattr(allocsim, "zero3_sub_groups", spy)
    allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64, steps=1)
    assert len(sizes) == 1  # DeepSpeed's 1e9 holds the tiny model in one sub-group
    sizes.clear()
    # the plan's sub_group_size at half the model: two sub-groups
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64, steps=1,
                                         sub_group_elements=totals[0] // 2)
    assert len(sizes) == 2
    first, second = (4 * g for g in sizes)
    made = [i for i, e in enumerate(events) if e[0] == "malloc" and e[2] in (first, second)][:4]
    keys = [events[i][1] for i in made]
    # converted 1, its clone, converted 2, its clone; converted 1 freed after converted 2 was made
    assert [events[i][2] for i in made] == [first, first, second, second]
    freed_first = next(i for i, e in enumerate(events) if e[0] == "free" and e[1] == keys[0])
    assert made[2] < freed_first


def test_zero3_plan_is_replayed_with_overlap_comm(capsys):
    code, out, _ = _estimate(capsys, "--zero", "3", "--overlap-comm", "--simulate-allocator")
    assert code == 0 and "(replayed)" in out


def test_overlap_comm_at_zero_1_and_2_is_traced():
    """overlap_comm at ZeRO-1/2 (the allocator histories of benchmarks/results/alloc_history/overlap/): a second
    bucket beside the first, the gradient partition made on the reduction stream (its only request there), and
    ZeRO-1 reducing from its hooks during backward as ZeRO-2 does."""
    cfg = read_config(HF / "tiny-llama")
    bucket = 1 << 20  # elements: larger than the tiny model, so each buffer is one request of its own size
    kw = dict(micro_batch=2, seq_length=128, steps=1, reduce_bucket_elements=bucket)

    def on_side(events):
        return [e for e in events if e[0] == "malloc" and len(e) > 3 and e[3] == allocsim.SIDE_STREAM]

    for zero in (1, 2):
        plain = allocsim.trace_hf_deepspeed(cfg, zero_stage=zero, **kw)
        overlap = allocsim.trace_hf_deepspeed(cfg, zero_stage=zero, overlap_comm=True, **kw)
        buckets = [sum(1 for e in ev if e[0] == "malloc" and e[2] == 2 * bucket) for ev in (plain, overlap)]
        assert buckets == [1, 2]
        assert len(on_side(overlap)) == 1 and not on_side(plain)  # grads_in_partition, under the reduction stream
    # ZeRO-1 with overlap_comm hands each gradient to the bucket during backward (as ZeRO-2): a different peak from
    # ZeRO-1 without it, whose gradients all wait for the end of backward
    z1 = allocsim.replay(allocsim.trace_hf_deepspeed(cfg, zero_stage=1, **kw)).peak_allocated_bytes
    z1_overlap = allocsim.replay(allocsim.trace_hf_deepspeed(cfg, zero_stage=1, overlap_comm=True,
                                                             **kw)).peak_allocated_bytes
    assert z1_overlap != z1


def test_overlap_comm_with_cpu_offload_makes_the_offload_copies_on_the_reduction_stream():
    """ZeRO-1/2 with the optimizer on the CPU and overlap_comm (DeepSpeed 0.19.8 reduce_ipg_grads runs
    copy_grads_in_partition under its reduction stream): two buckets, no gradient partition, and every fp64 norm
    copy and fp32 staging copy of the offload requested on the side stream, the same bytes as without overlap_comm
    where they come from the default stream's blocks. The replay's scope still leaves the plan out (not measured)."""
    cfg = read_config(HF / "tiny-llama")
    bucket = 1 << 20
    kw = dict(micro_batch=2, seq_length=128, steps=1, reduce_bucket_elements=bucket, offload_optimizer=True)

    def side(events):
        return sorted(e[2] for e in events if e[0] == "malloc" and len(e) > 3 and e[3] == allocsim.SIDE_STREAM)

    for zero in (1, 2):
        plain = allocsim.trace_hf_deepspeed(cfg, zero_stage=zero, **kw)
        overlap = allocsim.trace_hf_deepspeed(cfg, zero_stage=zero, overlap_comm=True, **kw)
        assert [sum(1 for e in ev if e[0] == "malloc" and e[2] == 2 * bucket) for ev in (plain, overlap)] == [1, 2]
        assert not side(plain)
        copies = [e[2] for e in overlap if e[0] == "malloc" and len(e) > 3 and e[3] == allocsim.SIDE_STREAM
                  and e[2] > 8]  # beside the 0-d norms, kept until the step
        assert copies and all(c % 4 == 0 for c in copies)
        # the same requests as without overlap_comm, less the second bucket: only their stream moved
        moved = sorted(e[2] for e in plain if e[0] == "malloc") + [2 * bucket]
        assert sorted(e[2] for e in overlap if e[0] == "malloc") == sorted(moved)


def test_zero3_parameter_offload_copies_parameters_in_on_the_allgather_stream():
    """ZeRO-3 with offload_param: no flat 16-bit partition on the GPU; each module fetch copies its parameters in on
    the allgather stream, one block each, and the coordinator frees them after use (the first step) or keeps what
    backward uses again (later steps); the GPU optimizer's master, gradient partitions and Adam stay on the GPU,
    and with the optimizer on the CPU too they leave it."""
    # wide enough that the projections pass ZeRO-3's persistence threshold (100 k elements), so they are fetched
    cfg = dict(read_config(HF / "tiny-llama"), hidden_size=512, intermediate_size=1024, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=1024)
    kw = dict(zero_stage=3, micro_batch=1, seq_length=64, steps=3)
    plain = allocsim.trace_hf_deepspeed(cfg, **kw)
    on_host = allocsim.trace_hf_deepspeed(cfg, **kw, offload_params=True)
    both = allocsim.trace_hf_deepspeed(cfg, **kw, offload_params=True, offload_optimizer=True)
    gathered = [e for e in on_host if e[0] == "malloc" and e[3:] == (allocsim.ALLGATHER_STREAM,)]
    assert gathered and not [e for e in plain if e[0] == "malloc" and e[3:] == (allocsim.ALLGATHER_STREAM,)]
    keys = {e[1] for e in gathered}
    assert {e[1] for e in on_host if e[0] == "free"} >= keys  # every copy is freed again
    a, b, c = (allocsim.replay(ev, capacity_bytes=1 << 40) for ev in (plain, on_host, both))
    assert b.peak_allocated_bytes <= a.peak_allocated_bytes  # the flat partition is gone, copies come and go
    assert c.peak_allocated_bytes < b.peak_allocated_bytes  # no master, gradient partitions or Adam
    with pytest.raises(ValueError, match="ZeRO-3 only"):
        allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=1, seq_length=64, steps=1, offload_params=True)


def test_zero3_parameter_offload_returns_the_output_layers_block_at_the_end_of_backward():
    """With the parameters on the host, the output layer's weight copy, released after the first module backward of
    each micro-batch (freed with record_stream behind its vocabulary-wide GEMMs), comes back only when the backward
    ends: the later layers' copies are made while it is held, and the next micro-batch's are made after."""
    cfg = dict(read_config(HF / "tiny-llama"), hidden_size=512, intermediate_size=1024, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=4096, num_hidden_layers=3, tie_word_embeddings=False)
    out_bytes = 2 * cfg["vocab_size"] * cfg["hidden_size"]
    events = allocsim.trace_hf_deepspeed(cfg, zero_stage=3, micro_batch=1, seq_length=64, steps=3, grad_accum=2,
                                         offload_params=True, offload_optimizer=True)
    copies = [i for i, e in enumerate(events) if e[0] == "malloc" and e[3:] == (allocsim.ALLGATHER_STREAM,)]
    copied = {events[i][1] for i in copies}
    late = [i for i, e in enumerate(events) if e[0] == "release" and e[1] in copied]
    assert len(late) >= 2 and all(events[i][2] == out_bytes for i in late)  # one a micro-batch, the output weight's
    backs = [next(j for j in range(i + 1, len(events)) if events[j][0] == "free" and events[j][1] == events[i][1])
             for i in late]
    # the recorded micro-batch copies every decoder layer's seven projections in again for its backward while the
    # block is held (later ones keep this small model gathered: ZeRO-3's reuse distance)
    assert len([j for j in copies if late[0] < j < backs[0]]) >= 7 * cfg["num_hidden_layers"]
    # back within its micro-batch: before the next micro-batch's output weight is copied in
    for back, following in zip(backs, late[1:]):
        assert back < max(j for j in copies if j < following and events[j][2] == out_bytes)


def test_zero3_built_inside_zero_init_never_holds_the_whole_model_on_the_gpu():
    """With zero_init the model is built inside deepspeed.zero.Init: with the parameters on the host each module's
    parameters are partitioned as they are made, so the build never holds the whole 16-bit model (built on the GPU
    first, it does); transformers' initialize_weights_zero3 then gathers each module's parameters once. The replay
    caches less with it, never more."""
    cfg = dict(read_config(HF / "tiny-llama"), hidden_size=512, intermediate_size=1024, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=1024, num_hidden_layers=4)
    kw = dict(zero_stage=3, micro_batch=1, seq_length=64, steps=2, offload_params=True, offload_optimizer=True)
    whole = allocsim.trace_hf_deepspeed(cfg, **kw)
    inside = allocsim.trace_hf_deepspeed(cfg, **kw, zero_init=True)
    model_bytes = 2 * import_hf(cfg, seq_length=64).spec.num_parameters
    largest = 2 * max(cfg["vocab_size"] * cfg["hidden_size"], cfg["hidden_size"] * cfg["intermediate_size"])

    bucket = 2 * DEEPSPEED_REDUCE_BUCKET_ELEMENTS

    def build_peak(events):  # live bytes while the model is built, up to ZeRO-3's reduce bucket
        live, peak = {}, 0
        for kind, key, size, *_ in events:
            if kind == "malloc":
                if size == bucket:
                    return peak
                live[key] = size
                peak = max(peak, sum(live.values()))
            elif kind in ("free", "release"):
                live.pop(key, None)
        return peak

    assert build_peak(whole) >= model_bytes
    # at most the MLP's three weights gathered together by initialize_weights_zero3, and the rotary buffers
    assert build_peak(inside) <= 3 * largest + 64 * 1024 < model_bytes
    a, b = (allocsim.replay(ev, capacity_bytes=1 << 40) for ev in (whole, inside))
    assert b.peak_reserved_bytes <= a.peak_reserved_bytes
    assert b.peak_allocated_bytes <= a.peak_allocated_bytes
    with pytest.raises(ValueError, match="ZeRO-3 only"):
        allocsim.trace_hf_deepspeed(cfg, zero_stage=2, micro_batch=1, seq_length=64, steps=1, zero_init=True)


def test_zero_init_defaults_on_for_transformers_models_at_zero3_and_is_refused_elsewhere():
    """ParallelPlan.zero_init: None resolves to deepspeed.zero.Init for a transformers model at ZeRO-3 (the
    Trainer's and workbench run's path), to a model built on the GPU for megatron-core models; True is refused off
    ZeRO-3 and by the megatron-core trace, which builds on the GPU."""
    from workbench import catalog
    from workbench.specs import ParallelPlan, builds_in_zero_init

    z3 = ParallelPlan(engine="deepspeed", zero_stage=3, world_size=1, micro_batch_size=1, global_batch_size=1)
    hf = import_hf(read_config(HF / "tiny-llama"), seq_length=64).spec
    mc = catalog.model("gpt3-1_3b", attention="unfused")
    assert builds_in_zero_init(hf, z3) and not builds_in_zero_init(mc, z3)
    assert not builds_in_zero_init(hf, z3.replace(zero_init=False))
    assert not builds_in_zero_init(hf, z3.replace(zero_stage=2))
    with pytest.raises(ValueError, match=r"zero_init=True needs engine 'deepspeed' with zero_stage=3.*zero_stage=2"):
        z3.replace(zero_stage=2, zero_init=True)
    assert any("zero_init=True on a megatron-core model" in why
               for why in allocsim.scope_problems(mc, z3.replace(zero_init=True)))


def test_zero3_offload_is_in_the_replays_scope_to_the_cpu_and_to_nvme():
    """The replay takes ZeRO-3 with its parameters and optimizer offloaded to the CPU or to NVMe (the GPU's side of
    NVMe offload is CPU offload's but for the swap list, below)."""
    from workbench.specs import ParallelPlan

    ok = ParallelPlan(engine="deepspeed", zero_stage=3, offload_params="cpu", offload_optimizer="cpu", world_size=1,
                      micro_batch_size=1, global_batch_size=1, precision="bf16", overlap_comm=True)
    hf = import_hf(read_config(HF / "tiny-llama"), seq_length=64).spec
    allocsim.check_scope(hf, ok)
    allocsim.check_scope(hf, ok.replace(offload_params="nvme", offload_optimizer="nvme"))
    allocsim.check_scope(hf, ok.replace(offload_optimizer="nvme"))
    with pytest.raises(ValueError, match="offload_optimizer=nvme with zero_stage=3, gradient_accumulation_steps=2"):
        allocsim.check_scope(hf, ok.replace(offload_optimizer="nvme", global_batch_size=2))


def test_zero3_optimizer_on_nvme_holds_each_buckets_fp32_casts_until_its_swap_out():
    """With the optimizer on NVMe, ZeRO-3's partition_grads keeps the fp32 cast of every gradient slice of a reduced
    bucket until the bucket's last slice (the untied output layer here) is handed over: at micro-batch 1 and 16 tokens
    the whole gradient is one bucket reduced after backward, and the replayed peak grows by 4 bytes an element of all
    but the output layer, as the memory model counts it (memory.zero3_nvme_gradient_list_bytes)."""
    from workbench import memory as M

    config = read_config(HF / "tiny-llama")
    spec = import_hf(config, seq_length=16).spec
    peaks = {nvme: allocsim.replayed_peaks(config, seq_length=16, micro_batch=1, zero_stage=3, offload_optimizer=True,
                                           overlap_comm=True, nvme_optimizer=nvme).peak_allocated_bytes
             for nvme in (False, True)}
    output = spec.vocab_size * spec.hidden_size
    expected = float(M.zero3_nvme_gradient_list_bytes(spec.num_parameters, output, nvme_optimizer=1))
    assert expected == 4 * (spec.num_parameters - output)
    assert peaks[True] - peaks[False] == pytest.approx(expected, rel=0.01)


def test_zero3_parameter_offload_gathers_a_weight_read_outside_its_module_as_an_external_parameter():
    """A weight another module takes as an argument (megatron-core's tied output layer reads the word embedding's
    weight in ``GPTModel``'s forward) is not gathered by its own module's fetch there: as DeepSpeed's
    ``ZeROOrderedDict`` does, reading it registers it with the module on top of the forward stack and gathers it, and
    it stays gathered while that module runs (forward and backward), released at the end of the step."""
    import torch

    class Out(torch.nn.Module):
        def forward(self, x, weight):
            return x @ weight.t()

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.proj, self.out = torch.nn.Embedding(1024, 512), torch.nn.Linear(512, 512), Out()

        def forward(self, tokens):
            return self.out(self.proj(self.embed(tokens)), self.embed.weight).float().mean()

    with torch.device("meta"):
        net = Tied().to(torch.bfloat16)
    shapes = {id(p): p.shape for p in net.parameters()}
    for p in net.parameters():
        p.data = torch.empty(0, dtype=p.dtype, device="meta")
    events = []
    with allocsim._recorder(events):
        fetcher = allocsim._Zero3ParamFetcher(net, shapes, events)
        for _ in range(3):  # the recorded step, then two with the coordinator
            fetcher.start()
            net(torch.zeros(2, 8, dtype=torch.long, device="meta")).backward()
            fetcher.finish()
    embed = 0  # the embedding's weight: the first parameter
    assert embed in fetcher.params_of[id(net)]  # registered with the top module
    assert net.embed.weight.numel() == 0 and net.proj.weight.numel() == 0  # all released at the end of the step
    copies = [e for e in events if e[0] == "malloc" and e[2] == 1024 * 512 * 2]
    assert len(copies) >= 3  # gathered in every step


def test_zero12_offload_clones_a_gradient_larger_than_the_bucket():
    """With the optimizer on the CPU, DeepSpeed 0.19 clones a gradient that bypasses the bucket (its offload gradient
    safety) before reducing it: the trace allocates that gradient's size once more per step, only with offload and
    only for a gradient larger than the bucket (the allocator history of final37's Qwen2.5 14B run matched by it)."""
    cfg = dict(read_config(HF / "tiny-llama"), vocab_size=4096)
    embedding = 4096 * cfg["hidden_size"]  # the embedding and the untied output layer, the largest weights
    kw = dict(zero_stage=2, micro_batch=1, seq_length=32, steps=2)

    def count(events):
        return sum(1 for e in events if e[0] == "malloc" and e[2] == 2 * embedding)

    small_bucket = embedding - 1
    with_offload = allocsim.trace_hf_deepspeed(cfg, offload_optimizer=True, reduce_bucket_elements=small_bucket, **kw)
    in_bucket = allocsim.trace_hf_deepspeed(cfg, offload_optimizer=True, **kw)
    no_offload = allocsim.trace_hf_deepspeed(cfg, reduce_bucket_elements=small_bucket, **kw)
    assert count(with_offload) == count(in_bucket) + 2 * 2  # both weights' gradients cloned, in each of two steps
    assert count(no_offload) <= count(in_bucket)


def test_expandable_segments_map_pages_as_requests_need_them():
    """With expandable segments a request no free block holds maps whole pages (20 MiB in the large pool, 2 MiB in
    the small one) at the end of its stream's range; freed space is reused before more is mapped; a block followed by
    unmapped space is taken only when nothing else fits; ``empty_cache`` unmaps the whole pages of free blocks."""
    mib = 1 << 20
    a = allocsim.ExpandableAllocator(capacity_bytes=1 << 40)
    x = a.malloc(30 * mib)
    assert a.reserved_bytes == 40 * mib and a.allocated_bytes == 30 * mib
    y = a.malloc(8 * mib)  # the 10 MiB left mapped after x holds it: nothing more is mapped
    assert a.reserved_bytes == 40 * mib
    z = a.malloc(5 * mib)  # 2 MiB left is too small: 3 MiB more needed, one more page
    assert a.reserved_bytes == 60 * mib
    a.free(x)
    w = a.malloc(25 * mib)  # x's 30 MiB hole takes it: no new page although the tail has 17 MiB mapped free
    assert a.reserved_bytes == 60 * mib and a.peak_reserved_bytes == 60 * mib
    s = a.malloc(1000)  # the small pool: its own range, 2 MiB pages
    assert a.reserved_bytes == 62 * mib
    o = a.malloc(4 * mib, stream=1)  # another stream: its own range
    assert a.reserved_bytes == 82 * mib
    for h in (w, y, z, s, o):
        a.free(h)
    a.empty_cache()
    assert a.allocated_bytes == 0 and a.reserved_bytes == 0
    # after empty_cache the unmapped pages are mapped again where a request needs them
    a.malloc(50 * mib)
    assert a.reserved_bytes == 60 * mib


def test_expandable_segments_in_the_replay_scope():
    """A one-GPU plan with expandable segments is replayed with them, not refused; the default allocator's replay
    of the same plan differs."""
    model, cluster, plan = _tiny_mcore_ddp_specs()
    allocsim.check_scope(model, plan.replace(expandable_segments=True))
    events = [("malloc", i, (30 + 7 * i) << 20) for i in range(6)] + [("free", i, 0) for i in (1, 3)] + [
        ("malloc", 9, 33 << 20)]
    default, expandable = allocsim.replay(events), allocsim.replay(events, expandable=True)
    # the default allocator's segments of 10 MiB and more round to 2 MiB and keep a remainder of 1 MiB or less in
    # the block (counted allocated); the expandable range cuts each request to its own size
    assert default.peak_allocated_bytes == 288 << 20 and expandable.peak_allocated_bytes == 285 << 20
    assert expandable.peak_reserved_bytes == 300 << 20  # 15 pages of 20 MiB
    assert expandable.peak_reserved_bytes != default.peak_reserved_bytes


def test_oom_ladder_replays_each_rung_of_a_replayed_plan():
    """tiny-llama at 1,024 tokens, micro batch 8, on a card of 1.43 GiB: replayed, micro batch 4 (1.44 GiB) does not
    fit and micro batch 2 (1.40 GiB) does, so the ladder stops there; with the constant reserve (above 2 GiB)
    neither does. Each replayed rung is what ``estimate(..., simulate_allocator=...)`` gives its plan."""
    import dataclasses

    from workbench import advisor, catalog
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec, ParallelPlan

    cfg = read_config(HF / "tiny-llama")
    model = import_hf(HF / "tiny-llama", seq_length=1024).spec
    h200 = catalog.gpu("H200")
    cluster = ClusterSpec(gpu=dataclasses.replace(h200, memory_gib=1.43), gpus_per_node=1)
    plan = ParallelPlan(world_size=1, micro_batch_size=8, global_batch_size=8, overlap_comm=False)
    record = estimate(model, cluster, plan, checks=False, simulate_allocator=cfg)
    ladder = advisor.oom_ladder(model, cluster, plan, record=record)
    assert [(s.step, s.plan.micro_batch_size, s.replayed, s.fits) for s in ladder] == [
        (0, 8, True, False), (1, 2, True, True)]
    again = estimate(model, cluster, ladder[-1].plan, checks=False, simulate_allocator=cfg)
    assert ladder[-1].peak_bytes == int(again.memory.per_gpu_peak_bytes)
    assert record.replay_for(ladder[-1].plan) is record.replay_for(ladder[-1].plan)  # made once, kept
    constant = advisor.oom_ladder(model, cluster, plan, record=estimate(model, cluster, plan, checks=False))
    assert not any(s.replayed for s in constant) and constant[-1].plan.micro_batch_size != 2


def test_lora_option_replays_its_plans_when_the_plan_was_replayed():
    """A 15 M-parameter Llama at 256 tokens, ZeRO-2 full fine-tune at micro-batch 2 on a card of 2.93 GiB: replayed,
    it does not fit (3.4 GiB) and the fastest LoRA plan does (2.4 GiB, its price the replay's); with the constant
    reserve no LoRA plan fits (3.2 GiB). Each verdict has about half a GiB to spare, well beyond the bands."""
    import dataclasses

    from workbench import advisor, catalog
    from workbench.estimate import estimate
    from workbench.specs import ClusterSpec, ParallelPlan

    cfg = dict(read_config(HF / "tiny-llama"), hidden_size=512, intermediate_size=1024, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=4096, num_hidden_layers=4)
    model = import_hf(cfg, seq_length=256).spec
    cluster = ClusterSpec(gpu=dataclasses.replace(catalog.gpu("H200"), memory_gib=2.93), gpus_per_node=1)
    plan = ParallelPlan(world_size=1, zero_stage=2, micro_batch_size=2, global_batch_size=2, overlap_comm=False)
    record = estimate(model, cluster, plan, checks=False, simulate_allocator=cfg)
    assert not record.memory.fits
    found = advisor.lora_option(model, cluster, plan, record=record)
    assert "LoRA r=16 does, with ZeRO-2" in found.message and "(allocator replayed)" in found.message
    lora = record.replay_for(plan.replace(lora_rank=advisor.LORA_LADDER_RANK))
    assert f"{advisor._gb(lora.memory.per_gpu_peak_bytes)} per GPU (allocator replayed)" in found.message
    constant = advisor.lora_option(model, cluster, plan, record=estimate(model, cluster, plan, checks=False))
    assert "does not fit either" in constant.message
