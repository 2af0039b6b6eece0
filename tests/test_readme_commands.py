"""Every ``workbench`` command printed in README.md, run as printed (in-process, through ``cli.main``, in a scratch
directory with its own data home).

Fast commands run fully and must exit 0. Long-running ones (real training, notebook execution, calibration, the
scheduler) go through argument parsing and the checks that run before the slow work: spec building for ``run``,
the notebook's parameter types for ``nb run`` / ``nb sweep``, the jobs file for ``jobs``. ``RUN_ID`` is the one
placeholder; README's ``path/to/...`` model files are made from the test data before the commands run.
"""
from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from workbench import cli

ROOT = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "data" / "hf"
# README path -> test-data model directory holding a config.json
HF_PATHS = {"path/to/Meta-Llama-3-8B": "llama3-8b", "path/to/Qwen3-0.6B": "qwen3-0_6b"}
SLOW = {("run",), ("nb", "run"), ("nb", "sweep"), ("calibrate",), ("jobs", "run"), ("jobs", "serve")}


def readme_commands() -> list[str]:
    """``workbench ...`` lines of README.md's code blocks (indented or fenced), continuations joined, comments and
    the leading prompt-less ``workbench`` kept as printed."""
    lines = (ROOT / "README.md").read_text().splitlines()
    out, fenced, i = [], False, 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            fenced = not fenced
        in_block = fenced or line.startswith("    ")
        text = line.strip()
        if in_block and text.startswith("workbench "):
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            out.append(text)
        i += 1
    return out


COMMANDS = readme_commands()


def test_readme_has_commands():
    assert len(COMMANDS) >= 20
    assert not [c for c in COMMANDS if re.search(r"\[--", c)], "optional [--flag] syntax is not runnable as printed"


def _argv(command: str) -> tuple[list, str]:
    """(argv after 'workbench', redirect target or '')."""
    tokens = shlex.split(command, comments=True)
    redirect = ""
    if ">" in tokens:
        k = tokens.index(">")
        redirect, tokens = tokens[k + 1], tokens[:k]
    assert tokens[0] == "workbench"
    return tokens[1:], redirect


def _slow(argv: list) -> bool:
    return tuple(argv[:1]) in SLOW or tuple(argv[:2]) in SLOW


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKBENCH_STORE", raising=False)
    for readme_path, data in HF_PATHS.items():
        shutil.copytree(HF / data, tmp_path / readme_path)
    for folder in ("examples", "notebooks"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _check_slow(argv: list, args) -> None:
    """What the slow command checks before its slow part."""
    if args.command == "run":
        from workbench.commands import run as run_cmd

        run_cmd.resolve_specs(args)
    elif args.command == "nb":
        from workbench.jobs.parameters import check_parameters

        params = dict(args.parameter) if args.nb_command == "run" else {}
        check_parameters(args.notebook, params, from_text=True)
        if args.nb_command == "sweep":
            from workbench.jobs.sweep import load_grid

            for combo in load_grid(args.grid):
                check_parameters(args.notebook, combo)
    elif args.command == "jobs":
        from workbench.jobs.schedule import load_jobs

        jobs = load_jobs(args.jobs)
        if args.jobs_command == "run":
            assert args.name in {j.name for j in jobs}, args.name


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs_as_printed(command, scratch, capsys):
    argv, redirect = _argv(command)
    if "RUN_ID" in argv:  # a placeholder for the id `workbench run` printed: parse only (tests/test_runs_* show runs)
        cli.build_parser().parse_args(argv)
        return
    if _slow(argv):
        args = cli.build_parser().parse_args(argv)
        _check_slow(argv, args)
        return
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{command}\n{err[-2000:]}"
    if redirect:
        Path(redirect).write_text(out)
        assert out.strip()
    if "--json" in argv:
        import json

        json.loads(out)


def test_run_json_has_the_fields_the_readme_lists():
    from workbench.commands.run import summary

    text = (ROOT / "README.md").read_text()
    listed = re.search(r"`run --json` prints the run record: (.*?)\n\n", text, re.S).group(1)
    record = {"run_id": "r", "status": "completed", "measured": {"peak_memory_bytes": {"0": 1},
                                                                  "median_step_seconds": 0.1},
              "predicted": {"per_gpu_peak_bytes": 2, "allocated_bytes": 1, "step_seconds": 0.01}}
    s = summary(record)
    for key in ("run_id", "status", "losses", "measured", "predicted"):
        assert f"`{key}`" in listed and key in s
    for key in ("per_gpu_peak_bytes", "allocated_bytes", "step_seconds"):
        assert f"`{key}`" in listed and s["predicted"][key] is not None
