"""Reading the jobs and grid YAML files with one-line errors that name the file."""
from __future__ import annotations

from pathlib import Path

import yaml


def read_yaml(path, kind: str):
    """The parsed document of ``path``; ``ValueError`` naming ``kind`` and the path when it is missing or invalid."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{kind} {path} does not exist")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{kind} {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
