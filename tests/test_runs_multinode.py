"""Multi-node launches: the run directory's hostfile and launch.sh come from the export's script builders
(workbench.configs.launch); checked by expanding launch.sh in bash and parsing the launcher's arguments with the
launchers' own parsers (no second node here, so nothing is started)."""
import json
import shlex
import subprocess

import pytest

from runs_support import TINY, plan
from workbench.catalog import gpu
from workbench.configs.launch import deepspeed_launch_script, hostfile, torchrun_script
from workbench.runs import RunStore, launch, prepare
from workbench.runs.launcher import LAUNCHER_PROGRAMS, TRAIN_SCRIPT
from workbench.specs import ClusterSpec

TWO_NODES = ClusterSpec(gpu=gpu("cpu"), gpus_per_node=2, num_nodes=2, host_memory_gib_per_node=24)


def expanded_argv(script_text: str) -> list[str]:
    """The words the script's ``exec`` line runs, after bash has expanded them (the launcher is not run)."""
    text = script_text.replace("\nexec ", "\nprintf '%s\\n' ", 1)
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_deepspeed_two_nodes_uses_the_export_hostfile_and_script(tmp_path):
    pytest.importorskip("deepspeed")
    from deepspeed.launcher.runner import parse_args

    p = plan(4, zero_stage=1)
    prep = prepare(TINY, TWO_NODES, p, steps=2, nproc=2, run_dir=tmp_path / "ds", hosts=["gpu-a", "gpu-b slots=2"],
                   master_port=29555)
    assert prep.hostfile == tmp_path / "ds" / "hostfile"
    assert prep.hostfile.read_text() == hostfile(TWO_NODES, ["gpu-a", "gpu-b"]) == "gpu-a slots=2\ngpu-b slots=2\n"
    text = prep.script.read_text()
    command = [str(TRAIN_SCRIPT), "--run-dir", str(tmp_path / "ds")]
    env_file = tmp_path / "ds" / "deepspeed_env"
    preamble = [f"cd {TRAIN_SCRIPT.parents[2]}"] + [f"export {k}={shlex.quote(v)}" for k, v in sorted(prep.env.items())
                                                    if k != "DS_ENV_FILE"] + [f"export DS_ENV_FILE={env_file}"]
    assert text == deepspeed_launch_script(TWO_NODES, command, hostfile_path=str(prep.hostfile), master_port=29555,
                                           preamble=preamble, launcher=LAUNCHER_PROGRAMS["deepspeed"],
                                           exec_launcher=True)
    argv = expanded_argv(text)
    assert argv[:3] == LAUNCHER_PROGRAMS["deepspeed"]
    args = parse_args(argv[3:])
    assert (args.hostfile, args.num_nodes, args.num_gpus, args.master_port) == (str(prep.hostfile), 2, 2, 29555)
    assert args.user_script == str(TRAIN_SCRIPT) and args.user_args == ["--run-dir", str(tmp_path / "ds")]
    # what the launcher exports on every node (PYTHON* it exports by itself; the rest through DS_ENV_FILE)
    exported = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert exported["TORCH_EXTENSIONS_DIR"] == prep.env["TORCH_EXTENSIONS_DIR"]
    assert exported["PYTHONPATH"].split(":")[0] == str(TRAIN_SCRIPT.parents[2])
    assert prep.command.startswith(" ".join(LAUNCHER_PROGRAMS["deepspeed"]) + " --hostfile ")
    assert prep.command.endswith(f"--run-dir {tmp_path / 'ds'}")
    run = json.loads((tmp_path / "ds" / "run.json").read_text())
    assert run["options"]["hosts"] == ["gpu-a", "gpu-b"] and run["specs"]["cluster"]["num_nodes"] == 2


def test_torchrun_two_nodes_uses_the_export_rendezvous_script(tmp_path):
    from torch.distributed.run import get_args_parser

    p = plan(4, engine="megatron", tensor_parallel=2)
    prep = prepare(TINY, TWO_NODES, p, steps=2, nproc=2, run_dir=tmp_path / "tr", hosts=["gpu-a", "gpu-b"],
                   master_port=29556)
    assert prep.hostfile is None and not (tmp_path / "tr" / "hostfile").exists()
    text = prep.script.read_text()
    preamble = [f"cd {TRAIN_SCRIPT.parents[2]}"] + [f"export {k}={shlex.quote(v)}" for k, v in sorted(prep.env.items())]
    assert text == torchrun_script(TWO_NODES, [str(TRAIN_SCRIPT), "--run-dir", str(tmp_path / "tr")], rdzv=True,
                                   master_port=29556, master_addr="gpu-a", rdzv_id=prep.run_id, preamble=preamble,
                                   launcher=LAUNCHER_PROGRAMS["torchrun"], exec_launcher=True)
    argv = expanded_argv(text)
    assert argv[:3] == LAUNCHER_PROGRAMS["torchrun"]
    args = get_args_parser().parse_args(argv[3:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "2", "c10d")
    assert args.rdzv_endpoint == "gpu-a:29556" and args.rdzv_id == prep.run_id
    assert args.training_script == str(TRAIN_SCRIPT)
    assert args.training_script_args == ["--run-dir", str(tmp_path / "tr")]


def test_bad_hosts_are_refused_and_recorded(tmp_path):
    p = plan(4, zero_stage=1)
    with pytest.raises(ValueError, match=r"hosts\[1\]='gpu-b slots=8': slots=8 != nproc=2"):
        prepare(TINY, TWO_NODES, p, steps=2, nproc=2, run_dir=tmp_path / "a", hosts=["gpu-a", "gpu-b slots=8"])
    with pytest.raises(ValueError, match="hosts has 1 entries but num_nodes=2"):
        prepare(TINY, TWO_NODES, p, steps=2, nproc=2, run_dir=tmp_path / "b", hosts=["gpu-a"])
    with pytest.raises(ValueError, match="hosts repeats a name"):
        prepare(TINY, TWO_NODES, p, steps=2, nproc=2, run_dir=tmp_path / "c", hosts=["gpu-a", "gpu-a"])
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(ValueError, match="num_nodes=2: pass hosts"):
        launch(TINY, TWO_NODES, p, steps=2, nproc=2, store=store, run_dir=tmp_path / "d")
    assert store.list(limit=1)[0]["status"] == "invalid"
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_cpu_adam_threads_reach_the_ranks_and_the_prediction(tmp_path):
    """A declared cpu_adam_threads is what launch.sh exports as OMP_NUM_THREADS (CPU Adam's threads), the run
    records it, and the predicted step is priced on it."""
    p = plan(4, zero_stage=2, offload_optimizer="cpu")
    cluster = TWO_NODES.replace(cpu_adam_threads=3)
    prep = prepare(TINY, cluster, p, steps=2, nproc=2, run_dir=tmp_path / "t", hosts=["gpu-a", "gpu-b"],
                   master_port=29557)
    assert prep.env["OMP_NUM_THREADS"] == "3" and "export OMP_NUM_THREADS=3" in prep.script.read_text()
    run = json.loads((tmp_path / "t" / "run.json").read_text())
    assert run["options"]["omp_num_threads"] == "3"
