"""``workbench import FILE_OR_COMMAND``: read a ds_config.json, a Megatron command line / script, or a Hugging Face
model's config.json (or model directory) into specs.

Prints the model, plan and option fields found, the warnings, and the lint findings (``--json`` for one JSON
object). Exit status: 0 when the lint finds no errors (warnings allowed), 1 when it finds at least one error (so the
command can gate CI), 2 when the input cannot be read. Options go before the file or command: ``workbench import --json ds_config.json`` or
``workbench import --world-size 16 -- python pretrain_gpt.py --num-layers 40 ...``.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from workbench.cli import print_json


def add_parser(sub) -> None:
    parser = sub.add_parser("import", help="read a ds_config.json, Megatron command line or HF config.json into specs"
                            " (exit 1 when the lint finds errors)",
                            description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--world-size", type=int, help="data-parallel world size for a ds_config's batch fields")
    parser.add_argument("source", nargs=argparse.REMAINDER, metavar="FILE_OR_COMMAND",
                        help="a ds_config.json, a launch script, or a command line (quoted, or after --)")
    parser.set_defaults(func=run)


def _split_trailing_options(tokens: list, args) -> list:
    """Allow ``workbench import ds_config.json --json`` when the source is a single file."""
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    if tokens and (Path(tokens[0]).is_file() or Path(tokens[0]).is_dir()):
        rest = tokens[1:]
        i = 0
        while i < len(rest):
            if rest[i] == "--json":
                args.json = True
                i += 1
            elif rest[i] == "--world-size" and i + 1 < len(rest):
                try:
                    args.world_size = int(rest[i + 1])
                except ValueError:
                    raise ValueError(f"--world-size {rest[i + 1]!r} must be an integer") from None
                i += 2
            else:
                raise ValueError(f"unexpected argument {rest[i]!r} after the file {tokens[0]!r}")
        return tokens[:1]
    return tokens


def _is_hf_source(source: str) -> bool:
    """A model directory with a config.json, or a JSON file whose object names a ``model_type``."""
    import json

    from workbench.hf import is_hf_config

    p = Path(source)
    if p.is_dir():
        return (p / "config.json").is_file()
    if p.is_file() and p.suffix == ".json":
        try:
            return is_hf_config(json.loads(p.read_text()))
        except ValueError:
            return False
    return False


def _run_hf(source: str, args) -> int:
    from workbench.hf import import_hf

    imp = import_hf(source)
    data = imp.to_dict()
    if args.json:
        print_json(data)
        return 0
    spec = imp.spec
    print(f"kind: huggingface ({imp.model_type}, {imp.architecture})")
    print(f"parameters: {spec.num_parameters:,} ({spec.num_parameters / 1e9:.2f} B)")
    print(f"weights: {'in the directory' if imp.has_weights else 'none (random initialisation from the config)'}")
    print(f"attn_implementation: {imp.attn_implementation or 'sdpa (transformers default)'} -> {spec.attention}")
    print("model:")
    for k, v in data["model"].items():
        print(f"  {k} = {v}")
    if imp.notes:
        print("notes:")
        for n in imp.notes:
            print(f"  - {n}")
    print(f"use it: workbench estimate --model hf:{source} ...")
    return 0


def imported_as_dict(imp) -> dict:
    return {
        "kind": imp.kind,
        "model": dict(imp.model_fields),
        "plan": dict(imp.plan_fields),
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in imp.options.items()},
        "warnings": list(imp.warnings),
        "lint": [dataclasses.asdict(f) for f in imp.lint],
    }


def lint_status(findings) -> int:
    """1 when any lint finding is an error, else 0."""
    return 1 if any(f.severity == "error" for f in findings) else 0


def run(args) -> int:
    from workbench.configs.importer import import_any, import_ds_config

    tokens = _split_trailing_options(list(args.source), args)
    if not tokens:
        raise ValueError("give a ds_config.json, a script, or a command line to import")
    if len(tokens) == 1 and _is_hf_source(tokens[0]):
        return _run_hf(tokens[0], args)
    if len(tokens) == 1:
        source = tokens[0]
        is_json = source.lstrip().startswith("{") or (Path(source).is_file()
                                                      and Path(source).read_text().lstrip().startswith("{"))
        if is_json:
            text = Path(source).read_text() if Path(source).is_file() else source
            imp = import_ds_config(text, world_size=args.world_size)
        else:
            imp = import_any(Path(source) if Path(source).is_file() else source)
    else:
        imp = import_any(" ".join(__import__("shlex").quote(t) for t in tokens))
    data = imported_as_dict(imp)
    status = lint_status(imp.lint)
    if args.json:
        print_json(data)
        return status
    print(f"kind: {imp.kind}")
    for title, section in (("model", data["model"]), ("plan", data["plan"]), ("options", data["options"])):
        print(f"{title}:" + ("" if section else " (nothing)"))
        for k, v in section.items():
            print(f"  {k} = {v}")
    if imp.warnings:
        print("warnings:")
        for w in imp.warnings:
            print(f"  - {w}")
    if imp.lint:
        print("lint:")
        for f in imp.lint:
            print(f"  - {f}")
    elif imp.kind == "deepspeed":
        print("lint: no findings")
    if status:
        errors = sum(1 for f in imp.lint if f.severity == "error")
        print(f"lint: {errors} error{'s' if errors != 1 else ''} (exit status 1)")
    return status
