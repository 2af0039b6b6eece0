"""The GPU benchmarks stamp their records with one shared provenance helper (benchmarks/gpu_provenance.py)."""
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_corpus_and_fp8_records_keep_their_provenance_keys(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    measure = _load("corpus_measure_under_test", BENCH / "corpus" / "measure.py")
    fp8 = _load("gpu_fp8_gemm_under_test", BENCH / "gpu_fp8_gemm.py")
    common = {"date_utc", "host_cpu_cores", "python", "torch", "cuda"}
    # the library versions are their own function (importing DeepSpeed and Megatron takes seconds)
    monkeypatch.setattr(measure, "versions", lambda: {"deepspeed": "0.0", "megatron_core": "0.0"})
    corpus = measure.provenance()
    assert set(corpus) == common | {"platform", "deepspeed", "megatron_core", "env"}
    assert set(corpus["env"]) == set(measure.ENV_KEYS)
    gemm = fp8.provenance()
    assert set(gemm) == common | {"script", "transformer_engine"}
    assert gemm["script"] == "benchmarks/gpu_fp8_gemm.py"
