"""Specs ⇄ plain JSON-able dicts, for the run directory's ``run.json`` and the run store."""
from __future__ import annotations

import dataclasses
import enum

from workbench.specs import ClusterSpec, GPUSpec, ModelSpec, ParallelPlan


def _plain(value):
    if isinstance(value, enum.IntEnum):
        return int(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def specs_to_dict(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> dict:
    return {"model": _plain(model), "cluster": _plain(cluster), "plan": _plain(plan)}


def specs_from_dict(data: dict):
    """``(model, cluster, plan)`` from :func:`specs_to_dict`'s output."""
    model = ModelSpec(**data["model"])
    cluster_fields = dict(data["cluster"])
    cluster_fields["gpu"] = GPUSpec(**cluster_fields["gpu"])
    cluster = ClusterSpec(**cluster_fields)
    plan = ParallelPlan(**data["plan"])
    return model, cluster, plan
