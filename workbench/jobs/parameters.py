"""Notebook parameters: read the ``parameters`` cell's annotations and check values against them.

A workbench notebook declares its inputs in the cell tagged ``parameters``, one per line, written
``name: type = default  # help`` (papermill's ``inspect_notebook`` reads them). Values from the command line are
strings, resolved like papermill's ``-p`` (``True``/``False`` → bool, ``None``, int, float, else str), then checked
against the annotation: an ``int`` parameter refuses ``2.5``, a ``float`` one takes ``2`` as ``2.0``, a ``str`` one
keeps the text as typed. Annotations other than int/float/bool/str (and their ``Optional``) are passed unchecked.
"""
from __future__ import annotations

import re
from pathlib import Path

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def notebook_parameters(notebook) -> dict[str, dict]:
    """``{name: {"type": annotation or None, "default": source text, "help": comment}}`` from the
    ``parameters`` cell; ``{}`` when the notebook has none."""
    import papermill

    path = Path(notebook)
    if not path.is_file():
        raise ValueError(f"notebook {notebook} does not exist")
    found = papermill.inspect_notebook(str(path))
    out = {}
    for name, item in found.items():
        type_name = item.get("inferred_type_name")
        out[name] = {"type": None if type_name in (None, "None") else type_name,
                     "default": item.get("default"), "help": item.get("help") or ""}
    return out


def resolve_text(text: str):
    """A command-line value, typed the way papermill's ``-p`` types it."""
    if text == "True":
        return True
    if text == "False":
        return False
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _optional_inner(type_name: str) -> str | None:
    """``Optional[int]`` / ``int | None`` / ``None | int`` → ``int``; otherwise None."""
    m = re.fullmatch(r"(?:typing\.)?Optional\[\s*(\w+)\s*\]", type_name)
    if m:
        return m.group(1)
    parts = [p.strip() for p in type_name.split("|")]
    if len(parts) == 2 and "None" in parts:
        return parts[0] if parts[1] == "None" else parts[1]
    return None


def check_value(name: str, value, type_name: str | None, *, from_text: bool = False):
    """``value`` converted to the parameter's annotated type, or ValueError naming the parameter and value.

    ``from_text``: ``value`` is the raw command-line string (a ``str`` parameter keeps it verbatim)."""
    if type_name is None:
        return resolve_text(value) if from_text else value
    inner = _optional_inner(type_name)
    if inner is not None:
        resolved = resolve_text(value) if from_text else value
        if resolved is None:
            return None
        return check_value(name, value, inner, from_text=from_text)
    if type_name not in _SCALARS:
        return resolve_text(value) if from_text else value
    if type_name == "str":
        if from_text:
            return value
        if isinstance(value, str):
            return value
        raise ValueError(f"parameter {name} expects str, got {type(value).__name__} {value!r}")
    resolved = resolve_text(value) if from_text else value
    shown = repr(value)
    if type_name == "bool":
        if isinstance(resolved, bool):
            return resolved
        raise ValueError(f"parameter {name} expects bool (True or False), got {shown}")
    if isinstance(resolved, bool) or not isinstance(resolved, (int, float)):
        raise ValueError(f"parameter {name} expects {type_name}, got {shown}")
    if type_name == "int":
        if isinstance(resolved, int):
            return resolved
        raise ValueError(f"parameter {name} expects int, got {shown}")
    return float(resolved)


def check_parameters(notebook, values: dict, *, from_text: bool = False) -> dict:
    """Every value in ``values`` checked against ``notebook``'s parameters cell; returns the typed dict.

    Unknown names and wrong types raise ValueError (one line, naming the parameter)."""
    declared = notebook_parameters(notebook)
    if values and not declared:
        raise ValueError(f"notebook {notebook} has no cell tagged 'parameters', so it takes no parameters "
                         f"(got {', '.join(values)})")
    out = {}
    for name, value in values.items():
        if name not in declared:
            raise ValueError(f"unknown parameter {name!r} for {notebook} (its parameters: {', '.join(declared)})")
        out[name] = check_value(name, value, declared[name]["type"], from_text=from_text)
    return out
