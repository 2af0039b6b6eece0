"""``workbench calibrate`` writes a profile to --out and prints a summary; ``estimate --profile`` uses it."""
import json

import pytest

from workbench.cli import main


@pytest.mark.slow
def test_calibrate_then_estimate_with_the_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    out = tmp_path / "laptop.json"
    rc = main(["calibrate", "--out", str(out), "--quick", "--model", "gpt3-125m", "--tp", "4", "--nproc", "2",
               "--max-message-mib", "0.02", "--skip", "cpu_adam"])
    text = capsys.readouterr().out
    assert rc == 0 and out.exists()
    assert "GEMM fp32 best" in text and "all_reduce intra-node bandwidth" in text and f"saved {out}" in text
    prof = json.loads(out.read_text())
    assert prof["name"] == "laptop" and prof["collectives"]["intra_node"]["fit"]["all_reduce"]["gb_per_s"] > 0

    rc = main(["estimate", "--model", "gpt3-125m", "--gpus-per-node", "2", "--precision", "fp32",
               "--profile", str(out), "--json"])
    est = json.loads(capsys.readouterr().out)
    assert rc == 0 and est["profile"]["name"] == "laptop" and est["cluster"]["gpu"] == "cpu"


def test_estimate_prints_the_no_profile_note_and_profile_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    assert main(["estimate", "--model", "gpt3-125m", "--gpus-per-node", "1"]) == 0
    assert "note: no hardware profile loaded" in capsys.readouterr().out
    assert main(["estimate", "--model", "gpt3-125m", "--profile", "nosuch"]) == 2
    assert "unknown profile='nosuch'" in capsys.readouterr().err
    assert main(["calibrate", "--skip", "bogus"]) == 2
    assert "--skip bogus: not a measurement" in capsys.readouterr().err
