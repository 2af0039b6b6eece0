"""``workbench export`` / ``workbench import`` through cli.main, and one subprocess run for the exit status."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from workbench import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


@pytest.fixture
def main(monkeypatch):
    # Only this branch's commands, so the test does not depend on the others being present.
    monkeypatch.setattr(cli, "COMMANDS", ["export", "import_"])
    return cli.main


def test_export_deepspeed_prints_valid_json(main, capsys):
    assert main(["export", "deepspeed", "--model", "llama3-8b", "--nodes", "2", "--zero", "3",
                 "--offload-optimizer", "cpu", "--mbs", "2", "--gbs", "64"]) == 0
    out, err = capsys.readouterr()
    cfg = json.loads(out)
    assert cfg["train_batch_size"] == 64 and cfg["gradient_accumulation_steps"] == 2
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "validation: OK" in err and "data-parallel size 16" in err


def test_export_writes_files(main, tmp_path, capsys):
    assert main(["export", "hybrid", "--model", "guide-13b", "--tp", "4", "--pp", "2", "--zero", "1",
                 "--mbs", "8", "--gbs", "64", "--nodes", "2", "--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"hybrid.sh", "ds_config.json"}
    assert json.loads((tmp_path / "ds_config.json").read_text())["gradient_accumulation_steps"] == 4
    assert main(["export", "launch", "--launcher", "deepspeed", "--model", "gpt3-1.3b", "--nodes", "2",
                 "--zero", "2", "--hosts", "a,b", "--out", str(tmp_path / "l")]) == 0
    assert (tmp_path / "l" / "hostfile").read_text() == "a slots=8\nb slots=8\n"
    assert "deepspeed --hostfile hostfile" in (tmp_path / "l" / "launch.sh").read_text()
    assert main(["export", "megatron", "--model", "llama3-8b", "--tp", "8", "--sp",
                 "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "megatron_args.sh").read_text().count("--sequence-parallel") == 1
    assert main(["export", "launch", "--launcher", "slurm", "--engine", "megatron", "--model", "llama3-8b",
                 "--tp", "8", "--nodes", "2", "--out", str(tmp_path / "s")]) == 0
    assert "#SBATCH --nodes=2" in (tmp_path / "s" / "launch.sh").read_text()
    capsys.readouterr()


def test_export_writes_the_nvme_path_given(main, tmp_path, capsys):
    argv = ["export", "deepspeed", "--model", "llama2-7b", "--gpus-per-node", "1", "--gbs", "8", "--zero", "3",
            "--offload-optimizer", "nvme", "--offload-params", "nvme", "--nvme-gib", "200"]
    assert main(argv + ["--nvme-path", "/mnt/nvme0/swap"]) == 0
    out, err = capsys.readouterr()
    zero = json.loads(out)["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == zero["offload_param"]["nvme_path"] == "/mnt/nvme0/swap"
    assert "--nvme-path" not in err
    assert main(argv) == 0  # without it: DeepSpeedOptions' folder, and a note naming the flag on stderr
    out, err = capsys.readouterr()
    assert json.loads(out)["zero_optimization"]["offload_optimizer"]["nvme_path"] == "/local_nvme"
    assert "give --nvme-path" in err
    assert main(["export", "launch", "--model", "llama2-7b", "--gpus-per-node", "1", "--gbs", "8", "--zero", "3",
                 "--offload-optimizer", "nvme", "--nvme-gib", "200", "--nvme-path", "/nvme", "--out",
                 str(tmp_path)]) == 0
    assert json.loads((tmp_path / "ds_config.json").read_text())["zero_optimization"]["offload_optimizer"][
        "nvme_path"] == "/nvme"
    capsys.readouterr()


@pytest.mark.parametrize("argv,needle", [
    (["export", "deepspeed", "--model", "llama2-7b", "--zero", "3", "--offload-optimizer", "nvme", "--nvme-path", ""],
     "nvme_path='' must name a folder"),
    (["export", "deepspeed", "--model", "llama3-8b", "--tp", "3"], "does not divide world_size=8"),
    (["export", "deepspeed", "--model", "llama-3-8b"], "did you mean"),
    (["export", "megatron", "--layers", "4", "--hidden", "64"], "--heads"),
    (["export", "deepspeed", "--model", "gpt3-125m", "--engine", "megatron"], "engine='megatron'"),
    (["import", "missing_file.json"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2(main, capsys, argv, needle):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("workbench: error: ") and needle in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_import_guide_configs(main, capsys):
    assert main(["import", str(DATA / "guide_zero3.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "deepspeed" and data["plan"]["zero_stage"] == 3 and data["lint"] == []
    assert main(["import", str(DATA / "guide_megatron_tp4pp2.sh")]) == 0
    out = capsys.readouterr().out
    assert "tensor_parallel = 4" in out and "--batch-size 128" in out
    assert main(["import", "--", "python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64",
                 "--num-attention-heads", "4", "--micro-batch-size", "2"]) == 0
    assert "num_layers = 2" in capsys.readouterr().out


def test_import_shows_lint(main, tmp_path, capsys):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 8, "zero_optimisation": {"stage": 2}}))
    assert main(["import", str(path)]) == 1  # a lint error fails the command, so it can gate CI
    out = capsys.readouterr().out
    assert "did you mean 'zero_optimization'" in out and "1 error (exit status 1)" in out
    assert main(["import", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["lint"][0]["severity"] == "error"


def test_export_accepts_the_engine_name_for_hybrid(main, tmp_path, capsys):
    assert main(["export", "megatron-deepspeed", "--model", "guide-13b", "--tp", "4", "--pp", "2", "--zero", "1",
                 "--mbs", "8", "--gbs", "64", "--nodes", "2", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "hybrid.sh").is_file()
    capsys.readouterr()


def test_subprocess_exit_status():
    code = ("import sys; from workbench import cli; cli.COMMANDS = ['export', 'import_']; "
            "sys.exit(cli.main(sys.argv[1:]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code, "export", "deepspeed", "--model", "gpt3-125m", "--gbs", "7"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("workbench:")]
    assert lines == ["workbench: error: global_batch_size=7 is not divisible by micro_batch_size(1) * "
                     "data_parallel(8) = 8"]
