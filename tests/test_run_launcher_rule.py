"""One default-launcher rule for ``workbench run`` / ``launch(...)`` and ``workbench export launch``: a plan started
from a notebook and the same plan exported and started by hand get the same launcher with the same command shape
(the hybrid megatron-deepspeed engine under torchrun). Checked on the written scripts; nothing is started."""
import importlib
import json

import pytest

from runs_support import TINY, cpu_cluster, plan
from workbench import cli
from workbench.configs.launch import default_launcher
from workbench.runs import RunStore, launch, prepare
from workbench.runs.launcher import LAUNCHER_PROGRAMS, LAUNCHERS, TRAIN_SCRIPT, run_launcher
from workbench.specs import Engine

prepare_mod = importlib.import_module("workbench.runs.prepare")  # the module (workbench.runs.prepare: the function)

TINY_FLAGS = ["--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "512", "--seq", "32",
              "--precision", "fp32", "--gpu", "cpu", "--gpus-per-node", "2", "--gbs", "4"]
HYBRID_FLAGS = ["--engine", "megatron-deepspeed", "--tp", "2", "--zero", "1"]


@pytest.fixture
def on_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("workbench.runs.launcher.cuda_available", lambda: False)
    monkeypatch.setattr(prepare_mod, "cuda_available", lambda: False)


def launch_line(script: str) -> tuple[str, list[str]]:
    """(the program, the launcher's own arguments as written) of a launch script's launcher line."""
    line = next(ln for ln in script.splitlines() if ln.startswith(("exec ", "torchrun ", "deepspeed ")))
    words = line.removeprefix("exec ").removesuffix(" \\").split()
    first_flag = next(i for i, w in enumerate(words) if w.startswith("--"))
    return " ".join(words[:first_flag]), words[first_flag:]


@pytest.mark.parametrize("engine", list(Engine))
def test_the_run_default_is_the_export_rule(engine):
    p = plan(2, engine=engine, tensor_parallel=2 if engine is not Engine.DEEPSPEED else 1)
    assert run_launcher(p) == default_launcher(engine) == default_launcher(str(engine))
    assert run_launcher(p, "deepspeed") == "deepspeed" and run_launcher(p, "torchrun") == "torchrun"


def test_hybrid_run_starts_torchrun_as_its_export_does(on_cpu, tmp_path):
    p = plan(2, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1, global_batch_size=4)
    prep = prepare(TINY, cpu_cluster(2), p, steps=2, nproc=2, run_dir=tmp_path / "run", master_port=29561)
    text = prep.script.read_text()
    assert prep.command.startswith(" ".join(LAUNCHER_PROGRAMS["torchrun"]) + " --nnodes 1 --nproc_per_node 2 ")
    assert prep.command.endswith(f"{TRAIN_SCRIPT} --run-dir {tmp_path / 'run'}")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["options"]["launcher"] == "torchrun"
    assert prep.hostfile is None and not (tmp_path / "run" / "hostfile").exists()

    out = tmp_path / "export"
    assert cli.main(["export", "launch", *TINY_FLAGS, *HYBRID_FLAGS, "--out", str(out)]) == 0
    exported = (out / "launch.sh").read_text()
    assert not (out / "hostfile").exists()
    # the same launcher, with the same header and the same launcher arguments; only the program's path differs
    header = "# torchrun: 1 node(s) x 2 cpu; run this script on every node"
    assert text.splitlines()[1] == exported.splitlines()[1] == header
    run_program, run_words = launch_line(text)
    export_program, export_words = launch_line(exported)
    assert (run_program, export_program) == (" ".join(LAUNCHER_PROGRAMS["torchrun"]), "torchrun")
    assert run_words == export_words == ["--nnodes", "1", "--nproc_per_node", "2", "--node_rank", '"$NODE_RANK"',
                                         "--master_addr", '"$MASTER_ADDR"', "--master_port", '"$MASTER_PORT"']


def test_deepspeed_engine_still_runs_and_exports_the_deepspeed_launcher(on_cpu, tmp_path):
    p = plan(2, zero_stage=1, global_batch_size=4)
    prep = prepare(TINY, cpu_cluster(2), p, steps=2, nproc=2, run_dir=tmp_path / "run", master_port=29562)
    out = tmp_path / "export"
    assert cli.main(["export", "launch", *TINY_FLAGS, "--zero", "1", "--out", str(out)]) == 0
    run_program, run_words = launch_line(prep.script.read_text())
    export_program, export_words = launch_line((out / "launch.sh").read_text())
    assert (run_program, export_program) == (" ".join(LAUNCHER_PROGRAMS["deepspeed"]), "deepspeed")
    assert run_words[:2] == export_words[:2] == ["--num_gpus", "2"]


def test_workbench_run_launches_the_hybrid_under_torchrun_and_says_so(on_cpu, monkeypatch, capsys):
    """`workbench run` through launch() and prepare(), with the start replaced: the run directory is written."""
    from test_cli_progress import FakeRun

    started = []

    def fake_start(prepared, **kw):
        started.append(prepared)
        return FakeRun(prepared.steps)

    monkeypatch.setattr("workbench.runs.launcher.start", fake_start)
    assert cli.main(["run", "--tiny", "--nproc", "2", "--steps", "3", "--precision", "fp32", "--gbs", "4",
                     "--json", *HYBRID_FLAGS]) == 0
    (prepared,) = started
    assert prepared.engine == "megatron-deepspeed"
    assert prepared.command.startswith(" ".join(LAUNCHER_PROGRAMS["torchrun"]) + " --nnodes 1 --nproc_per_node 2 ")
    assert prepared.script.read_text().splitlines()[1].startswith("# torchrun: 1 node(s) x 2 cpu")
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert "started — megatron-deepspeed under torchrun, 2 processes on cpu" in first
    # --launcher picks the other one, as launch(launcher=...) does
    assert cli.main(["run", "--tiny", "--nproc", "2", "--steps", "3", "--precision", "fp32", "--gbs", "4",
                     "--json", "--launcher", "deepspeed", *HYBRID_FLAGS]) == 0
    assert started[-1].command.startswith(" ".join(LAUNCHER_PROGRAMS["deepspeed"]))
    assert "under deepspeed" in capsys.readouterr().err.strip().splitlines()[0]


def test_a_launcher_a_run_cannot_start_is_refused_and_recorded(on_cpu, tmp_path):
    p = plan(2, engine="megatron-deepspeed", tensor_parallel=2, zero_stage=1)
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(ValueError, match=r"launcher='slurm' is not one a run starts .*export launch --launcher slurm"):
        launch(TINY, cpu_cluster(2), p, steps=2, nproc=2, store=store, run_dir=tmp_path / "a", launcher="slurm")
    assert store.list(limit=1)[0]["status"] == "invalid"
    for bad in ("", "mpirun", "DeepSpeed"):
        with pytest.raises(ValueError, match="is not one a run starts"):
            prepare(TINY, cpu_cluster(2), p, steps=2, nproc=2, run_dir=tmp_path / "b", launcher=bad)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_run_launchers_are_the_export_choices_a_run_can_start():
    """export accepts deepspeed|torchrun|slurm; a run starts the first two (slurm is an sbatch script)."""
    from workbench.cli import build_parser

    export = next(a for a in build_parser()._subparsers._group_actions[0].choices["export"]._actions
                  if a.dest == "launcher")
    assert set(LAUNCHERS) == set(export.choices) - {"slurm"}
