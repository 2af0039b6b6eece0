"""The app's single state and the pure functions that update it.

Every panel turns a user change into an *action*; :func:`reduce` returns a new :class:`AppState`. The state keeps
two things apart:

* the *inputs* — exactly what the panels show (possibly an invalid combination, e.g. ``tensor_parallel=3``), and
* the last *valid* ``ModelSpec`` / ``ClusterSpec`` / ``ParallelPlan`` and their :class:`~workbench.estimate.Estimate`.

When the inputs do not make valid specs, the core's ``ValueError`` text goes to ``error`` (with ``error_source``
naming the panel it belongs to) and the specs and estimate stay at their last valid values, so the figures keep
showing something true while the panel shows what is wrong. No traceback ever reaches the user.

Input fields set to ``None`` mean "the core's default" (e.g. ``ffn_hidden_size`` = 4h, bandwidths from the GPU
catalog, ``global_batch_size`` = micro × data parallel); panels show the resolved value from the valid spec.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from workbench import catalog
from workbench.specs import (NVME_READ_GB_PER_S, NVME_WRITE_GB_PER_S, ClusterSpec, ModelSpec, ParallelPlan,
                             validate)

MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec))
"""Every ``ModelSpec`` field; all are editable in :class:`widgets.model_panel.ModelPanel`."""
CLUSTER_FIELDS = ("gpu", "gpus_per_node", "num_nodes", "intra_node_gb_per_s", "inter_node_gb_per_s",
                  "host_memory_gib_per_node", "nvme_gib_per_node", "nvme_read_gb_per_s", "nvme_write_gb_per_s",
                  "host_cpu_cores_per_node", "cpu_adam_threads")
"""``ClusterSpec`` fields as inputs; ``gpu`` is a catalog name here."""
PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(ParallelPlan) if f.name != "world_size")
"""``ParallelPlan`` fields as inputs; the world size always comes from the cluster."""

SOURCES = ("model", "cluster", "plan", "estimate")

GUIDE_EXAMPLE = {
    "preset": "guide-13b",
    "cluster": {"gpu": "A100-80GB", "gpus_per_node": 8, "num_nodes": 1},
    "plan": {"engine": "megatron", "tensor_parallel": 4, "pipeline_parallel": 2, "micro_batch_size": 1,
             "global_batch_size": 128, "precision": "fp16"},
}
"""The guide's Megatron example: GPT-3-like 13B, ``--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2
--batch-size 128 --fp16`` on one node of 8 A100-80GB."""


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


# ----------------------------------------------------------------------------------------------------------------
# Actions
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class SetModel:
    """Change model inputs, e.g. ``SetModel(changes={"num_layers": 48})``."""

    changes: Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadPreset:
    """Replace the model inputs with a catalog model, e.g. ``LoadPreset(name="llama3-8b")``."""

    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SetCluster:
    """Change cluster inputs; ``gpu`` is a catalog name. A new GPU resets bandwidths to its catalog values."""

    changes: Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class SetPlan:
    """Change plan inputs, e.g. ``SetPlan(changes={"zero_stage": 3})``."""

    changes: Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadSpecs:
    """Load whole specs (from an imported config or a planner row); ``None`` keeps that part as it is."""

    model: Optional[ModelSpec] = None
    cluster: Optional[ClusterSpec] = None
    plan: Optional[ParallelPlan] = None
    options: Any = None
    """Training options (``workbench.configs.DeepSpeedOptions``) the exports use; ``None`` keeps the current ones."""
    hf_model: Any = None
    """The :class:`workbench.hf.HFModel` the model was imported from (its config.json is what the allocator replay
    builds a transformers model from); with a ``model`` and no ``hf_model`` the state's is dropped."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SetProfile:
    """Estimate with a measured hardware profile: a :class:`workbench.calibrate.HardwareProfile`, or the name of a
    saved or shipped one (``workbench.calibrate.profile.profile_names()``); ``None`` goes back to datasheet numbers."""

    profile: Any = None


# ----------------------------------------------------------------------------------------------------------------
# State
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class AppState:
    """What the whole app shows. Immutable; build new ones with :func:`reduce`."""

    preset: str
    """Catalog model the model inputs started from (``custom`` once none matches)."""
    model_inputs: Mapping
    """Model panel values by ``ModelSpec`` field (``None``: the core's default)."""
    cluster_inputs: Mapping
    """Hardware panel values by :data:`CLUSTER_FIELDS`."""
    plan_inputs: Mapping
    """Parallel panel values by :data:`PLAN_FIELDS`."""
    model: ModelSpec
    """Last valid model."""
    cluster: ClusterSpec
    """Last valid cluster."""
    plan: ParallelPlan
    """Last valid plan."""
    estimate: Any = None
    """``workbench.estimate.Estimate`` of the last valid specs."""
    options: Any = None
    """Training options for the exported configs (``workbench.configs.DeepSpeedOptions``; ``None``: defaults)."""
    profile: Any = None
    """The measured :class:`workbench.calibrate.HardwareProfile` estimates use (``None``: datasheet numbers)."""
    hf_model: Any = None
    """The :class:`workbench.hf.HFModel` the model was imported from (``None`` for catalog and typed models): the
    config.json the allocator replay builds a transformers model from. A new preset or loaded model drops it."""
    error: str = ""
    """The core's message for the current inputs ('' when they are valid)."""
    error_source: str = ""
    """Which part the error belongs to: ``model``, ``cluster``, ``plan`` or ``estimate`` ('' when valid)."""
    revision: int = 0
    """Counts accepted changes (valid or not), so views can tell a new state from an old one cheaply."""

    @property
    def valid(self) -> bool:
        return not self.error


def _default_estimator(model, cluster, plan, profile=None):
    from workbench.estimate import estimate

    return estimate(model, cluster, plan, profile=profile)


Estimator = Callable[[ModelSpec, ClusterSpec, ParallelPlan], Any]


def model_inputs_of(name: str) -> dict:
    """The inputs a catalog model gives (derived fields it does not set stay ``None``)."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelSpec)
                if f.default is not dataclasses.MISSING}
    spec = catalog.model(name)
    out = {}
    for f in MODEL_FIELDS:
        value = getattr(spec, f)
        out[f] = value.value if hasattr(value, "value") else value
    # Keep derived fields automatic where the catalog leaves them to the core's default.
    raw = catalog._lookup("model", name, catalog._models(), catalog.model_names())
    for f in ("num_query_groups", "head_dim", "ffn_hidden_size", "moe_ffn_hidden_size"):
        if f not in raw:
            out[f] = defaults.get(f)
    return out


def model_inputs_from_spec(spec: ModelSpec) -> dict:
    out = {f: (getattr(spec, f).value if hasattr(getattr(spec, f), "value") else getattr(spec, f))
           for f in MODEL_FIELDS}
    if out["experts_implementation"] == "grouped_mm":  # transformers' default: stays automatic (None), so the
        out["experts_implementation"] = None           # model can become dense or megatron-core without a refusal
    return out


def cluster_inputs_from_spec(spec: ClusterSpec) -> dict:
    return {"gpu": spec.gpu.name, "gpus_per_node": spec.gpus_per_node, "num_nodes": spec.num_nodes,
            "intra_node_gb_per_s": spec.intra_node_gb_per_s, "inter_node_gb_per_s": spec.inter_node_gb_per_s,
            "host_memory_gib_per_node": spec.host_memory_gib_per_node,
            "nvme_gib_per_node": spec.nvme_gib_per_node, "nvme_read_gb_per_s": spec.nvme_read_gb_per_s,
            "nvme_write_gb_per_s": spec.nvme_write_gb_per_s, "host_cpu_cores_per_node": spec.host_cpu_cores_per_node,
            "cpu_adam_threads": spec.cpu_adam_threads}


def plan_inputs_from_spec(spec: ParallelPlan) -> dict:
    out = {}
    for f in PLAN_FIELDS:
        value = getattr(spec, f)
        out[f] = int(value) if f == "zero_stage" else (value.value if hasattr(value, "value") else value)
    return out


def build_model(inputs: Mapping) -> ModelSpec:
    return ModelSpec(**{k: v for k, v in inputs.items() if k in MODEL_FIELDS})


def build_cluster(inputs: Mapping) -> ClusterSpec:
    values = dict(inputs)
    values["gpu"] = catalog.gpu(values["gpu"])
    return ClusterSpec(**values)


def build_plan(inputs: Mapping, world_size: int) -> ParallelPlan:
    return ParallelPlan(world_size=world_size, **{k: v for k, v in inputs.items() if k in PLAN_FIELDS})


DASHBOARD_MAX_NODES = 65_536
DASHBOARD_MAX_GPUS_PER_NODE = 64
DASHBOARD_MAX_GPUS = 2**19
"""Cluster sizes the widgets accept (every view stays interactive up to here); the core and the CLI go further."""


def check_dashboard_size(cluster: ClusterSpec) -> None:
    """``ValueError`` naming the field when a cluster is larger than the widgets accept."""
    for name, value, cap in (("num_nodes", cluster.num_nodes, DASHBOARD_MAX_NODES),
                             ("gpus_per_node", cluster.gpus_per_node, DASHBOARD_MAX_GPUS_PER_NODE),
                             ("world size", cluster.world_size, DASHBOARD_MAX_GPUS)):
        if value > cap:
            raise ValueError(f"{name}={value:,} is above the workbench app's limit of {cap:,} (the command line "
                             f"and the Python API take larger clusters)")


def _settle(state: AppState, estimator: Estimator) -> AppState:
    """Try to build specs and the estimate from the state's inputs; on ``ValueError`` keep the last valid ones."""
    revision = state.revision + 1
    source = "model"
    try:
        model = build_model(state.model_inputs)
        source = "cluster"
        cluster = build_cluster(state.cluster_inputs)
        check_dashboard_size(cluster)
        source = "plan"
        plan = build_plan(state.plan_inputs, cluster.world_size)
        validate(model, cluster, plan)
        source = "estimate"
        est = (estimator(model, cluster, plan) if state.profile is None
               else estimator(model, cluster, plan, profile=state.profile))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the red message of the panel that caused it
        text = str(exc).strip()
        message = text.splitlines()[0] if text else type(exc).__name__
        if not isinstance(exc, ValueError):
            message = f"{type(exc).__name__}: {message}"
        return dataclasses.replace(state, error=message, error_source=source, revision=revision)
    return dataclasses.replace(state, model=model, cluster=cluster, plan=plan, estimate=est, error="",
                               error_source="", revision=revision)


def initial_state(*, preset: str = GUIDE_EXAMPLE["preset"], cluster: Optional[Mapping] = None,
                  plan: Optional[Mapping] = None, estimator: Estimator = _default_estimator) -> AppState:
    """The app's first state (the guide's 13B example by default). Raises ``ValueError`` if it is invalid."""
    model_inputs = model_inputs_of(preset)
    cluster_inputs = {"gpu": "A100-80GB", "gpus_per_node": 8, "num_nodes": 1, "intra_node_gb_per_s": None,
                      "inter_node_gb_per_s": None, "host_memory_gib_per_node": 1024.0, "nvme_gib_per_node": 0.0,
                      "nvme_read_gb_per_s": NVME_READ_GB_PER_S, "nvme_write_gb_per_s": NVME_WRITE_GB_PER_S,
                      "host_cpu_cores_per_node": 112, "cpu_adam_threads": 0}
    cluster_inputs.update(GUIDE_EXAMPLE["cluster"] if cluster is None else cluster)
    plan_defaults = plan_inputs_from_spec(ParallelPlan(world_size=1))
    plan_defaults["global_batch_size"] = None
    plan_inputs = {**plan_defaults, **(GUIDE_EXAMPLE["plan"] if plan is None else plan)}
    m = build_model(model_inputs)
    c = build_cluster(cluster_inputs)
    p = build_plan(plan_inputs, c.world_size)
    validate(m, c, p)
    return AppState(preset=catalog.model(preset).name, model_inputs=_frozen(model_inputs),
                    cluster_inputs=_frozen(cluster_inputs), plan_inputs=_frozen(plan_inputs), model=m, cluster=c,
                    plan=p, estimate=estimator(m, c, p))


def _check_keys(changes: Mapping, allowed, what: str) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise KeyError(f"unknown {what} field(s): {', '.join(unknown)}")


MOE_PLAN_FIELDS = ("expert_parallel", "expert_tensor_parallel", "moe_token_dispatcher", "moe_capacity_factor",
                   "moe_load_imbalance", "moe_recompute", "moe_pad_to_capacity", "moe_overlap_alltoall")
"""Plan fields only an MoE model reads: a model made dense (``num_experts`` 0 or ``None``) puts them back at
:class:`~workbench.specs.ParallelPlan`'s defaults, which a dense model accepts."""


def dense_plan_inputs(plan_inputs: Mapping) -> dict:
    """``plan_inputs`` with :data:`MOE_PLAN_FIELDS` at ParallelPlan's defaults."""
    defaults = {f.name: f.default for f in dataclasses.fields(ParallelPlan) if f.name in MOE_PLAN_FIELDS}
    return {**plan_inputs, **defaults}


def reduce(state: AppState, action, estimator: Estimator = _default_estimator) -> AppState:
    """The one update function: ``(state, action) -> new state``. Pure apart from calling the estimator."""
    if isinstance(action, SetModel):
        _check_keys(action.changes, MODEL_FIELDS, "model")
        plan_inputs = state.plan_inputs
        if "num_experts" in action.changes and not action.changes["num_experts"]:
            plan_inputs = _frozen(dense_plan_inputs(plan_inputs))
        new = dataclasses.replace(state, model_inputs=_frozen({**state.model_inputs, **action.changes}),
                                  plan_inputs=plan_inputs, preset="custom" if action.changes else state.preset)
    elif isinstance(action, LoadPreset):
        try:
            inputs = model_inputs_of(action.name)
        except ValueError as exc:
            return dataclasses.replace(state, error=str(exc), error_source="model", revision=state.revision + 1)
        new = dataclasses.replace(state, model_inputs=_frozen(inputs), preset=catalog.model(action.name).name,
                                  hf_model=None)
    elif isinstance(action, SetCluster):
        _check_keys(action.changes, CLUSTER_FIELDS, "cluster")
        changes = dict(action.changes)
        if "gpu" in changes and changes["gpu"] != state.cluster_inputs.get("gpu"):
            changes.setdefault("intra_node_gb_per_s", None)
            changes.setdefault("inter_node_gb_per_s", None)
        new = dataclasses.replace(state, cluster_inputs=_frozen({**state.cluster_inputs, **changes}))
    elif isinstance(action, SetPlan):
        _check_keys(action.changes, PLAN_FIELDS, "plan")
        new = dataclasses.replace(state, plan_inputs=_frozen({**state.plan_inputs, **action.changes}))
    elif isinstance(action, LoadSpecs):
        new = state
        if action.model is not None:
            new = dataclasses.replace(new, model_inputs=_frozen(model_inputs_from_spec(action.model)),
                                      preset=action.model.name, hf_model=action.hf_model)
        if action.cluster is not None:
            new = dataclasses.replace(new, cluster_inputs=_frozen(cluster_inputs_from_spec(action.cluster)))
        if action.plan is not None:
            new = dataclasses.replace(new, plan_inputs=_frozen(plan_inputs_from_spec(action.plan)))
        if action.options is not None:
            new = dataclasses.replace(new, options=action.options)
    elif isinstance(action, SetProfile):
        profile = action.profile
        if profile is not None:
            from workbench.calibrate.profile import load_profile

            try:
                profile = load_profile(profile)
            except ValueError as exc:
                return dataclasses.replace(state, error=str(exc), error_source="estimate",
                                           revision=state.revision + 1)
        new = dataclasses.replace(state, profile=profile)
    else:
        raise TypeError(f"unknown action {action!r}")
    return _settle(new, estimator)


def resolved(state: AppState, part: str, name: str):
    """What a panel should show for a field: the input, or the valid spec's value where the input is ``None``."""
    inputs = {"model": state.model_inputs, "cluster": state.cluster_inputs, "plan": state.plan_inputs}[part]
    value = inputs.get(name)
    if value is not None:
        return value
    spec = {"model": state.model, "cluster": state.cluster, "plan": state.plan}[part]
    return getattr(spec, name)
