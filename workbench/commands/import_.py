"""``workbench import FILE_OR_COMMAND``: read a ds_config.json, a Megatron command line / script, or a Hugging Face
model's config.json (or model directory) into specs.

Prints the model, plan and option fields found, the warnings, and the lint findings (``--json`` for one JSON
object); a Megatron command's model and plan are checked as ``workbench estimate`` checks them (the plan when the
world size is known: the launcher's ``--nproc_per_node`` × ``--nnodes``, or ``--world-size``). Exit status: 0 when
the lint finds no errors (warnings allowed), 1 when it finds at least one error (so the command can gate CI), 2 when
the input cannot be read. Options go before the file or command: ``workbench import --json ds_config.json`` or
``workbench import --world-size 16 -- python pretrain_gpt.py --num-layers 40 ...``.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from workbench.cli import print_json


def add_parser(sub) -> None:
    parser = sub.add_parser("import", help="read a ds_config.json, Megatron command line or HF config.json into specs"
                            " (exit 1 when the lint finds errors)",
                            description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--world-size", type=int, help="a ds_config's data-parallel size (for its batch fields); a "
                        "Megatron command's number of GPUs when its launcher does not say (checks the layout)")
    parser.add_argument("source", nargs=argparse.REMAINDER, metavar="FILE_OR_COMMAND",
                        help="a ds_config.json, a launch script, or a command line (quoted, or after --)")
    parser.set_defaults(func=run)


def _split_trailing_options(tokens: list, args) -> list:
    """Allow ``workbench import ds_config.json --json`` when the source is a single file, and ``workbench import
    "python pretrain_gpt.py ..." --json`` when it is one quoted command: options after it are the importer's own."""
    from workbench.configs.importer import looks_like_text

    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    if not tokens:
        return tokens
    first = tokens[0]
    quoted_text = looks_like_text(first) and any(c.isspace() for c in first.strip())
    if not quoted_text and not (not looks_like_text(first) and (Path(first).is_file() or Path(first).is_dir())):
        return tokens
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
            what = "the quoted command" if quoted_text else f"the file {first!r}"
            raise ValueError(f"unexpected argument {rest[i]!r} after {what} (options go before it: "
                             f"workbench import [--json] [--world-size N] SOURCE)")
    return tokens[:1]


_HF_KEYS = re.compile(r'"(model_type|architectures)"\s*:')
_DS_KEY_NAMES = frozenset({"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                           "zero_optimization", "fp16", "bf16", "optimizer", "scheduler"})
_DS_KEYS = re.compile(r'"?\b(' + "|".join(sorted(_DS_KEY_NAMES)) + r')\b"?\s*:')


def _is_hf_source(source: str, text=None) -> bool:
    """A model directory with a config.json, or a JSON file whose object names a ``model_type`` or
    ``architectures``. A ``.json`` file that does not parse is a (broken) Hugging Face config when it is named
    config.json or has either key, and no ds_config key (DeepSpeed also reads hjson, so a ds_config with comments
    goes to the ds_config reader): the HF reader then says where it breaks, rather than the ds_config one.
    ``text``: the file's text as :func:`json_file_text` read it (``None``: unreadable or not a ``.json`` file)."""
    import json

    from workbench.hf import is_hf_config

    from workbench.configs.importer import looks_like_text

    if looks_like_text(source):
        return False
    p = Path(source)
    if p.is_dir():
        return (p / "config.json").is_file()
    if text is not None and p.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return (p.name == "config.json" or bool(_HF_KEYS.search(text))) and not _DS_KEYS.search(text)
        return is_hf_config(data) or (isinstance(data, dict) and "architectures" in data
                                      and not _DS_KEY_NAMES.intersection(data))
    return False


def json_file_text(source: str):
    """The text of ``source`` when it names a ``.json`` file, read once for every check and the import; ``None``
    for other sources and for a file that cannot be read as UTF-8 text (the importer names those)."""
    from workbench.configs.importer import looks_like_text

    p = Path(source)
    if looks_like_text(source) or p.suffix.lower() != ".json" or not p.is_file():
        return None
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _check_json_file(source: str, text) -> None:
    """``ValueError`` for a ``.json`` file that cannot be a ds_config (empty, or JSON other than one object), which
    the importer would otherwise read as a Megatron command line and report as one without flags. ``text``: the
    file's text as :func:`json_file_text` read it (``None``: nothing to check)."""
    import json

    if text is None:
        return
    if not text.strip():
        raise ValueError(f"{source} is empty; a ds_config.json holds one JSON object")
    try:
        data = json.loads(text)
    except ValueError:
        return  # not plain JSON: the importer reads it (hjson) or says where it breaks
    if not isinstance(data, dict):
        from workbench.commands.common import json_kind

        kind = json_kind(data)
        kind = kind if kind == "null" else ("an " if kind == "array" else "a ") + kind
        raise ValueError(f"{source}: a ds_config.json holds one JSON object, got {kind} ({text.strip():.40})")


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
    named = "" if imp.attn_implementation else " (transformers default)"
    print(f"attn_implementation: {imp.effective_attn_implementation}{named} -> {spec.attention}")
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
    from workbench.configs.importer import MAX_SOURCE_BYTES, import_any, import_megatron_args, import_text

    tokens = _split_trailing_options(list(args.source), args)
    if not tokens:
        raise ValueError("give a ds_config.json, a script, or a command line to import")
    text = json_file_text(tokens[0]) if len(tokens) == 1 else None  # a .json file is read once
    if len(tokens) == 1 and _is_hf_source(tokens[0], text):
        return _run_hf(tokens[0], args)
    if len(tokens) == 1:  # a file, JSON text, or a whole command line in one quoted argument
        _check_json_file(tokens[0], text)
        if text is not None and Path(tokens[0]).stat().st_size <= MAX_SOURCE_BYTES:
            imp = import_text(text, world_size=args.world_size)
        else:  # not a .json file, or one the importer refuses: it reads it (or names why it cannot)
            imp = import_any(tokens[0], world_size=args.world_size)
    else:
        imp = import_megatron_args(tokens, world_size=args.world_size)
    data = imported_as_dict(imp)
    status = lint_status(imp.lint)
    if args.json:
        other = imp.options.get("other_flags")
        if other:  # the readable output lists them under options; --json keeps stdout the payload
            more = f" (and {len(other) - 12} more)" if len(other) > 12 else ""
            print(f"note: kept in options.other_flags but not modelled: {' '.join('--' + f for f in other[:12])}"
                  f"{more}", file=sys.stderr)
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
        from workbench.configs.lint import finding_lines

        print("lint:")
        for line in finding_lines(imp.lint):
            print(f"  - {line}")
    else:
        print("lint: no findings")
    if status:
        errors = sum(1 for f in imp.lint if f.severity == "error")
        print(f"lint: {errors} error{'s' if errors != 1 else ''} (exit status 1)")
    return status
