"""GPU and model catalogs: one JSON data file per entry, each with its ``source``.

``gpu("H100-SXM")`` and ``model("llama3-8b")`` look entries up case-insensitively; an unknown name raises
``ValueError`` with the closest known name. ``gpu_names()`` / ``model_names()`` list them.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from workbench.specs import GPUSpec, ModelSpec, closest_name

_MODEL_FIELDS = {f for f in ModelSpec.__dataclass_fields__}


def _entries(folder: str) -> dict:
    out = {}
    for item in resources.files(__package__).joinpath(folder).iterdir():
        if item.name.endswith(".json"):
            data = json.loads(item.read_text())
            out[data["name"].lower()] = data
    return out


@functools.cache
def _gpus() -> dict:
    return _entries("gpus")


@functools.cache
def _models() -> dict:
    return _entries("models")


def gpu_names() -> list[str]:
    return sorted(d["name"] for d in _gpus().values())


def model_names() -> list[str]:
    return sorted(d["name"] for d in _models().values())


def _did_you_mean(name: str, names: list[str]) -> str:
    """Names that start with what was typed (``H100`` -> ``H100-PCIe``, ``H100-SXM``) come first; otherwise the
    closest spelling."""
    key = name.strip().lower().replace("_", "-")
    prefixed = [n for n in names if key and n.lower().startswith(key)]
    if prefixed:
        listed = " or ".join(f"'{n}'" for n in prefixed)
        return f"; did you mean {listed}?"
    hint = closest_name(name, names)
    return f"; did you mean '{hint}'?" if hint else ""


def _lookup(kind: str, name: str, table: dict, names: list[str]) -> dict:
    key = str(name).strip().lower()
    aliases = {key, key.replace("_", "-"), key.replace(" ", "-"), key.replace("_", ".")}
    for k in aliases:
        if k in table:
            return table[k]
    did_you_mean = _did_you_mean(str(name), names)
    raise ValueError(f"unknown {kind}={name!r}{did_you_mean} (known: {', '.join(names)})")


def gpu(name: str) -> GPUSpec:
    """The catalog entry for a GPU, e.g. ``gpu("A100-80GB")``."""
    data = _lookup("gpu", name, _gpus(), gpu_names())
    return GPUSpec(**data)


def model(name: str, **overrides) -> ModelSpec:
    """The catalog entry for a model, optionally with fields changed, e.g. ``model("llama3-8b", seq_length=4096)``.
    ``hf:PATH`` reads a Hugging Face config.json (or model directory) instead (:func:`workbench.hf.model_from_hf`)."""
    if str(name).startswith("hf:"):
        from workbench.hf import model_from_hf

        return model_from_hf(str(name)[3:], **overrides)
    data = dict(_lookup("model", name, _models(), model_names()))
    fields = {k: v for k, v in data.items() if k in _MODEL_FIELDS}
    spec = ModelSpec(**fields)
    return spec.replace(**overrides) if overrides else spec

