"""Bad input to the command line: one line naming the field and the numbers, exit status 2, before any slow work;
``--json`` keeps stdout the payload."""
import json

import pytest

from workbench.cli import main


def _error(capsys, argv) -> str:
    """Run ``argv``; assert exit status 2, nothing on stdout and one error line on stderr; return that line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench: error: "), err
    assert "unexpected" not in lines[0] and "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_measuring(monkeypatch, tmp_path):
    """``calibrate`` must refuse bad flags before it measures anything (minutes on a GPU node)."""
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))

    def measured(*args, **kwargs):
        raise AssertionError("calibrate started measuring before refusing the flags")

    monkeypatch.setattr("workbench.calibrate.calibrate", measured)


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "nosuch"], "unknown gpu='nosuch'"),
    (["--model", "nosuch"], "unknown model='nosuch'"),
    (["--max-message-mib", "-1"], "--max-message-mib -1 must be a finite size > 0 MiB"),
    (["--max-message-mib", "0"], "--max-message-mib 0 must be a finite size > 0 MiB"),
    (["--max-message-mib", "nan"], "--max-message-mib nan must be a finite size > 0 MiB"),
    (["--max-message-mib", "1e300"], "--max-message-mib 1e+300 is larger than the largest supported value"),
])
def test_calibrate_refuses_bad_flags_before_measuring(capsys, no_measuring, argv, needle):
    assert needle in _error(capsys, ["calibrate", "--json", *argv])


def test_calibrate_refuses_an_unusable_out_path_before_measuring(capsys, no_measuring, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    line = _error(capsys, ["calibrate", "--out", str(a_file / "sub" / "p.json")])
    assert f"--out {a_file / 'sub' / 'p.json'}: {a_file} is a file, not a folder" in line
    line = _error(capsys, ["calibrate", "--out", str(tmp_path)])
    assert f"--out {tmp_path} is a folder" in line


@pytest.mark.parametrize("out,needle", [
    ("/proc/x.json", "--out /proc/x.json is in /proc, the kernel's process file system; a profile cannot be saved"),
    ("/proc/self/comm", "is in /proc, the kernel's process file system"),
    ("/sys/x.json", "--out /sys/x.json is in /sys, the kernel's sysfs file system"),
    ("/sys/kernel/nosuch/p.json", "--out /sys/kernel/nosuch/p.json is in /sys"),
    ("/dev/null", "--out /dev/null is in /dev, the kernel's device file system"),
    ("", "--out '' is empty; give a profile name or a .json file path"),
    ("  ", "--out '  ' is empty"),
])
def test_calibrate_refuses_kernel_file_systems_and_empty_out_before_measuring(capsys, no_measuring, out, needle):
    assert needle in _error(capsys, ["calibrate", "--out", out])


def test_calibrate_refuses_an_out_path_through_a_link_into_proc_or_a_fifo(capsys, no_measuring, tmp_path):
    import os

    (tmp_path / "link").symlink_to("/proc")
    line = _error(capsys, ["calibrate", "--out", str(tmp_path / "link" / "p.json")])
    assert f"--out {tmp_path / 'link' / 'p.json'} (/proc/p.json) is in /proc" in line
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    line = _error(capsys, ["calibrate", "--out", str(fifo)])
    assert f"--out {fifo} is not a regular file (a device, pipe or socket)" in line


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root writes into any folder")
def test_calibrate_refuses_a_folder_it_cannot_write(capsys, no_measuring, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = _error(capsys, ["calibrate", "--out", str(locked / "p.json")])
    assert f"cannot write into the folder {locked}" in line


@pytest.mark.parametrize("value,needle", [
    ("nan", "moe_load_imbalance=nan must be a finite number"),
    ("0.5", "moe_load_imbalance=0.5 must be >= 1"),
    ("2", "moe_load_imbalance=2 needs a mixture-of-experts model (guide-13b has num_experts=None)"),
])
def test_plan_refuses_a_moe_load_imbalance_nothing_prices(capsys, value, needle):
    assert needle in _error(capsys, ["plan", "--model", "guide-13b", "--gbs", "64", "--moe-load-imbalance", value])


@pytest.mark.parametrize("argv,needle", [
    (["--engine", "deepspeed", "--tp-comm-overlap"],
     "--tp-comm-overlap applies to engine megatron only; the engines searched are deepspeed: add --engine megatron "
     "or drop --tp-comm-overlap"),
    (["--engine", "deepspeed", "--engine", "hybrid", "--no-tp-comm-overlap"],
     "--no-tp-comm-overlap applies to engine megatron only; the engines searched are deepspeed, megatron-deepspeed"),
    (["--engine", "deepspeed", "--grad-reduce-in-bf16"], "--grad-reduce-in-bf16 applies to engine megatron only"),
    (["--engine", "hybrid", "--cross-entropy-fusion", "te"],
     "--cross-entropy-fusion te applies to engine megatron only; the engines searched are megatron-deepspeed"),
    (["--engine", "deepspeed", "--cross-node-tp"],
     "--cross-node-tp applies to engine megatron or megatron-deepspeed only; the engines searched are deepspeed"),
    (["--engine", "hybrid", "--max-cp", "4"], "--max-cp 4 applies to engine megatron or deepspeed only"),
    (["--lora-rank", "8", "--grad-reduce-in-bf16"],
     "the engines searched are deepspeed, megatron-deepspeed (--lora-rank 8 searches DeepSpeed engines only): "
     "drop --grad-reduce-in-bf16"),
    (["--engine", "deepspeed", "--tp", "2"],
     "--tp 2: plan searches every tensor-parallel size itself and takes no fixed one; price one plan with "
     "`workbench estimate --tp 2 ...`"),
    (["--pp=4"], "--pp 4: plan searches every pipeline-parallel size itself"),
    (["--engine", "megatron", "--vp", "2"], "--vp 2: plan searches every virtual-pipeline size itself"),
    (["--cp", "2"], "--cp 2: plan searches every context-parallel size itself"),
    (["--ep", "2"], "--ep 2: plan searches every expert-parallel size itself"),
])
def test_plan_refuses_flags_no_searched_engine_reads(capsys, argv, needle):
    assert needle in _error(capsys, ["plan", "--model", "guide-13b", "--gbs", "64", *argv])


def test_plan_refuses_megatron_flags_for_a_hugging_face_model(capsys):
    from pathlib import Path

    config = Path(__file__).parent / "data" / "hf" / "llama3-8b"
    line = _error(capsys, ["plan", "--model", f"hf:{config}", "--gbs", "64", "--grad-reduce-in-bf16"])
    assert "--grad-reduce-in-bf16 applies to engine megatron only; the engines searched are deepspeed (" in line
    assert "is a Hugging Face model, trained under engine deepspeed only)" in line


@pytest.mark.parametrize("argv,needle", [
    (["export", "deepspeed", "--launcher", "slurm"], "--launcher slurm: only 'export launch' writes a launch script"),
    (["export", "megatron", "--hosts", "a,b"], "--hosts a,b: only 'export launch' writes a launch script"),
    (["export", "launch", "--launcher", "torchrun", "--hosts", "a"], "launcher=torchrun takes no host list"),
    (["export", "launch", "--engine", "megatron", "--hosts", "a"], "launcher=torchrun takes no host list"),
    (["export", "deepspeed", "--engine", "megatron"],
     "engine='megatron' is not what 'export deepspeed' writes (engine 'deepspeed' or 'megatron-deepspeed'); use "
     "`workbench export megatron`"),
    (["export", "megatron", "--engine", "hybrid", "--tp", "2"],
     "engine='megatron-deepspeed' is not what 'export megatron' writes (engine 'megatron'); use "
     "`workbench export hybrid`"),
    (["export", "hybrid", "--engine", "deepspeed"],
     "engine='deepspeed' is not what 'export hybrid' writes (engine 'megatron-deepspeed'); use "
     "`workbench export deepspeed`"),
])
def test_export_refuses_flags_its_kind_ignores_and_names_the_export_for_the_engine(capsys, argv, needle):
    assert needle in _error(capsys, argv + ["--model", "guide-13b"])


@pytest.mark.parametrize("hosts,needle", [
    ("", "--hosts '' is empty; give the host names, one per node, separated by commas"),
    ("  ", "--hosts '  ' is empty"),
    (",", "--hosts ',' is empty"),
    ("a,,b", "--hosts 'a,,b': entry 2 of 3 is empty"),
    ("a, ,b,", "--hosts 'a, ,b,': entries 2, 4 of 4 are empty"),
    ("a,b,c", "--hosts a,b,c: hosts has 3 names but num_nodes=2"),
    ("a,a", "--hosts a,a: hosts repeats a name"),
])
def test_export_launch_refuses_empty_hosts_before_writing_anything(capsys, hosts, needle):
    assert needle in _error(capsys, ["export", "launch", "--model", "guide-13b", "--nodes", "2", "--hosts", hosts])


@pytest.mark.parametrize("text,needle", [
    ("[1, 2, 3]", "a ds_config.json holds one JSON object, got an array"),
    ("null", "a ds_config.json holds one JSON object, got null"),
    ("", "is empty; a ds_config.json holds one JSON object"),
])
def test_import_of_a_json_file_that_is_no_object_says_so(capsys, tmp_path, text, needle):
    path = tmp_path / "ds_config.json"
    path.write_text(text)
    line = _error(capsys, ["import", "--json", str(path)])
    assert str(path) in line and needle in line and "pretrain_gpt.py" not in line


def test_abbreviated_json_flag_keeps_stdout_the_payload(capsys, monkeypatch):
    from workbench.cli import print_json
    from workbench.commands import runs

    def chatty(args):
        print("library chatter")  # what a library prints while the command runs
        print_json({"json": args.json})
        return 0

    monkeypatch.setattr(runs, "run", chatty)
    assert main(["runs", "list", "--js"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"json": True}
    assert "library chatter" in err


def test_import_refuses_fp16_with_bf16_and_an_oversized_seq_length(capsys):
    base = "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
    line = _error(capsys, ["import", "--json", base + "--fp16 --bf16"])
    assert "--fp16" in line and "--bf16" in line
    line = _error(capsys, ["import", "--json", base + "--seq-length 1e9"])
    assert "--seq-length 1e9" in line and "67,108,864" in line


@pytest.mark.parametrize("name,text,needle", [
    ("config.json", '{"model_type": "llama", "hidden_size": ', "not valid JSON (Expecting value at line 1"),
    ("llama.json", '{"model_type": "llama", "hidden_size": ', "not valid JSON (Expecting value at line 1"),
    ("llama.json", '{"architectures": ["LlamaForCausalLM"], "hidden_size": ', "not valid JSON"),
    ("config.json", '{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}', "no hidden_size"),
    ("llama.json", '{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}', "no 'model_type' field"),
])
def test_import_of_a_broken_hf_config_file_names_it_as_one(capsys, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    for source in (path, tmp_path):  # the file, and (named config.json) its folder: the same message
        if source == tmp_path and name != "config.json":
            continue
        line = _error(capsys, ["import", "--json", str(source)])
        assert str(path) in line and needle in line and "ds_config" not in line


def test_import_still_reads_an_hjson_ds_config_named_config_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  // DeepSpeed reads hjson\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 2}\n}')
    assert main(["import", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "deepspeed" and data["plan"]["zero_stage"] == 2


def test_import_names_flags_it_keeps_but_does_not_model(capsys):
    command = "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --bogus-flag 7 --data-path x"
    assert main(["import", "--json", command]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["options"]["other_flags"] == ["bogus-flag", "data-path"]  # stdout: the payload only
    notes = [line for line in err.splitlines() if "--bogus-flag" in line]
    assert len(notes) == 1 and "--data-path" in notes[0] and "not modelled" in notes[0]
    assert main(["import", command]) == 0
    out, err = capsys.readouterr()
    assert "other_flags = ['bogus-flag', 'data-path']" in out


@pytest.mark.parametrize("content,needle", [
    (b"not json\n", "is not valid JSON (Expecting value at line 1 column 1)"),
    (b"", "is empty"),
    (b"\xff\xfe", "is not UTF-8 text"),
    (b"[1, 2]", "holds a JSON array, not a notebook object"),
    (b"{}", "is not a Jupyter notebook nbformat can read"),
    (b'{"cells": 3, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "is not a Jupyter notebook"),
])
@pytest.mark.parametrize("action", ["run", "sweep"])
def test_nb_of_a_file_that_is_no_notebook_names_the_file(capsys, monkeypatch, tmp_path, content, needle, action):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    path = tmp_path / "bad.ipynb"
    path.write_bytes(content)
    grid = tmp_path / "grid.yaml"
    grid.write_text("x: [1, 2]\n")
    line = _error(capsys, ["nb", "run", str(path)] if action == "run" else
                  ["nb", "sweep", str(path), "--grid", str(grid)])
    assert f"notebook {path} " in line and needle in line


@pytest.mark.parametrize("cfg,extra,needle", [
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1}, [],
     "train_batch_size=30 is not a multiple of train_micro_batch_size_per_gpu(4) * gradient_accumulation_steps(1) = 4"),
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
     ["--world-size", "4"], "train_batch_size=32 != train_micro_batch_size_per_gpu(2) * gradient_accumulation_steps(2)"
                            " * world_size(4) = 16"),
    ({"train_micro_batch_size_per_gpu": 100000}, [],
     "train_micro_batch_size_per_gpu=100000: micro_batch_size=100000 is larger than the largest supported value"),
    ({"gradient_accumulation_steps": False}, [], "gradient_accumulation_steps=False is not a number"),
])
def test_import_refuses_ds_config_batch_fields_estimate_would_refuse(capsys, tmp_path, cfg, extra, needle):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(cfg))
    assert needle in _error(capsys, ["import", "--json", *extra, str(path)])


def test_import_reads_a_json_file_once(capsys, monkeypatch, tmp_path):
    from pathlib import Path

    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                                "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}))
    reads = []
    read_text = Path.read_text

    def counted(self, *args, **kwargs):
        reads.append(Path(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    assert main(["import", "--json", "--world-size", "8", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["micro_batch_size"] == 4 and data["plan"]["zero_stage"] == 2
    assert reads.count(path) == 1, reads
