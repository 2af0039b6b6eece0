"""One name per engine, one-line argument errors, ``run``'s default engine and GPU-name suggestions."""
import argparse

import pytest

from workbench import cli
from workbench.commands import common, run as run_cmd


def _parse(argv):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("command", [["estimate"], ["export", "deepspeed"], ["run"], ["advise"]])
def test_engine_alias_hybrid_is_megatron_deepspeed(command):
    assert _parse(command + ["--engine", "hybrid"]).engine == "megatron-deepspeed"
    assert _parse(command + ["--engine", "megatron-deepspeed"]).engine == "megatron-deepspeed"


def test_plan_engine_alias():
    assert _parse(["plan", "--gbs", "8", "--engine", "hybrid", "--engine", "megatron"]).engine == [
        "megatron-deepspeed", "megatron"]


def test_engine_help_names_the_alias(capsys):
    for command in (["run"], ["estimate"], ["plan"]):
        with pytest.raises(SystemExit):
            _parse(command + ["--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert "megatron-deepspeed" in help_text and "'hybrid'" in help_text


def test_run_without_engine_uses_the_documented_default(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _parse(["run", "--help"])
    assert "(default deepspeed)" in " ".join(capsys.readouterr().out.split())
    monkeypatch.setattr("workbench.runs.launcher.cuda_available", lambda: False)
    args = _parse(["run", "--tiny", "--nproc", "2", "--zero", "1", "--precision", "fp32"])
    assert args.engine is None
    model, cluster, plan, nproc = run_cmd.resolve_specs(args)
    assert plan.engine.value == common.DEFAULT_ENGINE and nproc == 2 and plan.zero_stage == 1


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "--zero", "5"], "argument --zero: invalid choice: 5 (choose from 0, 1, 2, 3)"),
    (["plan", "--gbs", "8", "--engine", "foo"], "invalid engine 'foo'"),
    (["run", "--steps", "x"], "argument --steps: invalid int value: 'x'"),
    (["nosuchcommand"], "invalid choice"),
])
def test_argument_errors_are_one_line(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        _parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "usage:" not in err


def test_gpu_prefix_suggests_the_entries_it_starts():
    from workbench import catalog

    with pytest.raises(ValueError) as exc:
        catalog.gpu("H100")
    first = str(exc.value).split("(known")[0]
    assert "'H100-PCIe'" in first and "'H100-SXM'" in first and "H800" not in first
    with pytest.raises(ValueError, match="did you mean 'H200'"):
        catalog.gpu("h200x")


def test_engine_name_rejects_unknown():
    with pytest.raises(argparse.ArgumentTypeError):
        common.engine_name("megatron-lm")


def test_plan_pareto_list_is_bounded_and_dp1_has_no_distributed_optimizer_twins(capsys):
    from workbench.commands.plan import PARETO_ROWS, pareto_rows

    assert pareto_rows(5) == [0, 1, 2, 3, 4]
    rows = pareto_rows(24)
    assert len(rows) == PARETO_ROWS and rows[0] == 0 and rows[-1] == 23
    assert cli.main(["plan", "--model", "guide-13b", "--gpu", "A100-80GB", "--gbs", "64"]) == 0
    out = capsys.readouterr().out
    ranked = out.split("ranked by step time")[1].split("Pareto front")[0]
    # at DP = 1 a Megatron plan with and without the distributed optimizer is the same plan: listed once
    rows = [line.split() for line in ranked.strip().splitlines()[1:]]
    keys = [" ".join(r[1:8] + r[9:13]) for r in rows if r[1] == "megatron"]  # all but the ZeRO/dist-opt column
    assert len(keys) == len(set(keys))
    pareto = out.split("Pareto front")[1].split("\n\n")[0].strip().splitlines()
    assert len(pareto) - 2 <= PARETO_ROWS


def test_either_or_flags_leave_the_default_and_refuse_both(capsys):
    import argparse

    from workbench.commands.common import add_spec_arguments

    parser = argparse.ArgumentParser(prog="workbench")
    add_spec_arguments(parser)
    none = parser.parse_args([])
    assert (none.tied, none.overlap_comm, none.grad_reduce_fp32) == (None, None, None)
    both = parser.parse_args(["--untied", "--no-overlap-comm", "--accumulate-allreduce-grads-in-fp32"])
    assert (both.tied, both.overlap_comm, both.grad_reduce_fp32) == (False, False, True)
    for pair in (["--tied", "--untied"], ["--overlap-comm", "--no-overlap-comm"],
                 ["--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(pair)
        assert exit_info.value.code == 2
        assert f"argument {pair[1]}: not allowed with argument {pair[0]}" in capsys.readouterr().err
