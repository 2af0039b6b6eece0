"""Lint for DeepSpeed configs: unknown or misspelled keys at every level, and settings DeepSpeed silently ignores.

DeepSpeed ignores unknown top-level keys: a config with ``zero_optimisation`` trains at ZeRO stage 0 without a word.
The key sets are read from the installed DeepSpeed, not written down here:

- top level: the keys ``DeepSpeedConfig`` looks up while it parses a config (recorded by handing it a dict that notes
  every key asked for), minus the blocks DeepSpeed lists as removed;
- sections parsed by pydantic models (``zero_optimization``, ``fp16``, ``bf16``, offload blocks, monitors, ...): the
  model's field names and aliases, recursively; the model is found by asking DeepSpeed to parse a probe key in the
  section and reading which model rejects it;
- sections parsed by hand (``activation_checkpointing``, ``optimizer``, ``flops_profiler``, ...): the keys looked up;
- ``optimizer.params`` for Adam/AdamW: the keyword arguments of DeepSpeed's Adam implementations and
  ``torch.optim.AdamW``; ``scheduler.params``: the scheduler class's constructor arguments.
"""
from __future__ import annotations

import difflib
import functools
import inspect
import typing
from dataclasses import dataclass
from typing import Optional

from workbench.configs.importer import read_ds_bool

_PROBE = "__workbench_probe__"


@dataclass(frozen=True, kw_only=True, slots=True)
class LintFinding:
    """One problem in a DeepSpeed config."""

    path: str
    """Dotted location, e.g. ``zero_optimization.offload_optimizer.device``."""
    severity: str
    """``error`` (DeepSpeed ignores or rejects it, or the run is wrong) or ``warning``."""
    message: str
    """What is wrong, with the numbers."""
    suggestion: str = ""
    """What to write instead ('' when there is nothing specific)."""

    def __str__(self) -> str:
        tail = f" — {self.suggestion}" if self.suggestion else ""
        return f"{self.severity}: {self.path}: {self.message}{tail}"


def finding_lines(findings) -> list[str]:
    """The findings as lines to show, in order, those that say the same thing (severity, message and suggestion)
    at several paths once with every path: a Trainer config's eight ``"auto"`` values make one line, not eight."""
    groups: dict = {}
    for f in findings:
        groups.setdefault((f.severity, f.message, f.suggestion), []).append(f.path)
    lines = []
    for (severity, message, suggestion), paths in groups.items():
        tail = f" — {suggestion}" if suggestion else ""
        lines.append(f"{severity}: {', '.join(paths)}: {message}{tail}")
    return lines


# ----------------------------------------------------------------------------------------------------------------
# Key sets from the installed DeepSpeed
# ----------------------------------------------------------------------------------------------------------------
class _RecordingDict(dict):
    """A dict that records every key asked for (``[]``, ``get``, ``in``, ``keys() in``)."""

    def __init__(self, *args, seen: set, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen = seen

    def __getitem__(self, key):
        self._seen.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._seen.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._seen.add(key)
        return super().__contains__(key)

    def pop(self, key, *default):
        self._seen.add(key)
        return super().pop(key, *default)

    def setdefault(self, key, default=None):
        self._seen.add(key)
        return super().setdefault(key, default)

    def keys(self):
        outer = self

        class _Keys:
            def __contains__(self, key):
                outer._seen.add(key)
                return dict.__contains__(outer, key)

            def __iter__(self):
                return iter(dict.keys(outer))

            def __len__(self):
                return dict.__len__(outer)

        return _Keys()

    def __copy__(self):
        return _RecordingDict(dict(self), seen=self._seen)


def _parse(config: dict):
    """``DeepSpeedConfig(config)`` for world size 1 without distributed (see deepspeed.check_with_deepspeed)."""
    from workbench.configs.deepspeed import _DataParallelUnit
    from unittest import mock

    import deepspeed.runtime.config as ds_config_module

    with mock.patch.object(ds_config_module.dist, "get_rank", return_value=0):
        return ds_config_module.DeepSpeedConfig(config, mpu=_DataParallelUnit(1))


def _removed_keys() -> dict:
    import deepspeed.runtime.config as ds_config_module

    return dict(getattr(ds_config_module, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {}))


def _removed_zero_keys() -> dict:
    import deepspeed.runtime.config as ds_config_module

    return dict(getattr(ds_config_module, "_REMOVED_ZERO_CONFIG_KEYS", {}))


@functools.cache
def top_level_keys() -> frozenset:
    """Top-level keys DeepSpeed's config parser reads (removed blocks excluded)."""
    seen: set = set()
    _parse(_RecordingDict({"train_batch_size": 1}, seen=seen))
    # "sequence_parallel_size" is read only on the no-mpu path of DeepSpeedConfig.__init__.
    import deepspeed.runtime.config as ds_config_module

    source = inspect.getsource(ds_config_module.DeepSpeedConfig.__init__)
    if '"sequence_parallel_size"' in source or "'sequence_parallel_size'" in source:
        seen.add("sequence_parallel_size")
    return frozenset(k for k in seen if isinstance(k, str) and k not in _removed_keys())


@dataclass(frozen=True)
class _Schema:
    keys: frozenset
    children: dict  # key -> _Schema
    open_keys: frozenset = frozenset()  # keys whose values are free-form (not checked)
    strict: bool = True  # whether DeepSpeed itself rejects unknown keys here


def _unwrap_model(annotation):
    from pydantic import BaseModel

    candidates = [annotation, *typing.get_args(annotation)]
    for c in candidates:
        if inspect.isclass(c) and issubclass(c, BaseModel):
            return c
    return None


def _model_schema(model_cls) -> _Schema:
    keys, children = set(), {}
    for name, info in model_cls.model_fields.items():
        names = {name} | ({info.alias} if info.alias else set())
        keys |= names
        nested = _unwrap_model(info.annotation)
        if nested is not None:
            child = _model_schema(nested)
            for n in names:
                children[n] = child
    extra = model_cls.model_config.get("extra")
    return _Schema(frozenset(keys), children, strict=extra == "forbid")


def _all_subclasses(cls):
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        for s in c.__subclasses__():
            out.append(s)
            todo.append(s)
    return out


def _section_schema(key: str) -> Optional[_Schema]:
    """The schema of top-level section ``key`` (None for scalars / free-form values)."""
    from pydantic import BaseModel, ValidationError

    try:
        _parse({"train_batch_size": 1, key: {_PROBE: 1}})
    except ValidationError as exc:
        by_name = {c.__name__: c for c in _all_subclasses(BaseModel)}
        if exc.title in by_name:
            schema = _model_schema(by_name[exc.title])
            # The probe's location says where the section sits inside that model (the monitor model, for
            # example, holds tensorboard, wandb, csv_monitor and comet side by side).
            locs = [e.get("loc", ()) for e in exc.errors() if e.get("loc") and e["loc"][-1] == _PROBE]
            for part in (locs[0][:-1] if locs else ()):
                schema = schema.children.get(part, schema)
            return schema
    except Exception:
        pass
    seen: set = set()
    try:
        _parse({"train_batch_size": 1, key: _RecordingDict({}, seen=seen)})
    except Exception:
        pass
    seen.discard(_PROBE)
    keys = frozenset(k for k in seen if isinstance(k, str))
    if not keys:
        return None
    return _Schema(keys, {}, strict=False)


@functools.cache
def ds_schema() -> _Schema:
    """The key tree of the installed DeepSpeed's config, discovered once per process."""
    top = top_level_keys()
    children = {}
    for key in sorted(top):
        schema = _section_schema(key)
        if schema is not None:
            children[key] = schema
    if "optimizer" in children:
        opt = children["optimizer"]
        children["optimizer"] = _Schema(opt.keys | {"type", "params"}, {}, open_keys=frozenset({"params"}),
                                        strict=False)
    if "scheduler" in children:
        children["scheduler"] = _Schema(children["scheduler"].keys | {"type", "params"}, {},
                                        open_keys=frozenset({"params"}), strict=False)
    return _Schema(top, children, strict=False)


@functools.cache
def adam_param_keys() -> frozenset:
    """Keyword arguments DeepSpeed accepts in ``optimizer.params`` for ``Adam``/``AdamW``."""
    import torch

    keys = set(inspect.signature(torch.optim.AdamW.__init__).parameters)
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam

        for cls in (FusedAdam, DeepSpeedCPUAdam):
            keys |= set(inspect.signature(cls.__init__).parameters)
    except Exception:  # ops not importable on this machine: torch's AdamW still names the common ones
        pass
    from deepspeed.runtime import config as ds_config_module

    keys |= {getattr(ds_config_module, "ADAM_W_MODE", "adam_w_mode"), "torch_adam", "fp32_optimizer_states"}
    return frozenset(keys - {"self", "params", "model_params", "args", "kwargs"})


def scheduler_param_keys(name: str) -> Optional[frozenset]:
    """Constructor arguments of DeepSpeed scheduler ``name`` (None if DeepSpeed has no such scheduler)."""
    from deepspeed.runtime import lr_schedules

    cls = getattr(lr_schedules, str(name), None)
    if cls is None or not inspect.isclass(cls) or name not in getattr(lr_schedules, "VALID_LR_SCHEDULES", [name]):
        return None
    return frozenset(set(inspect.signature(cls.__init__).parameters) - {"self", "optimizer"})


# ----------------------------------------------------------------------------------------------------------------
# The lint
# ----------------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def deprecated_keys() -> dict:
    """``{dotted path: modern name}`` for the config keys the installed DeepSpeed still reads but marks deprecated:
    the old top-level ``bfloat16`` section (``runtime.constants.BFLOAT16_OLD``) and the ZeRO fields its pydantic model
    flags ``deprecated`` (``cpu_offload``, ``stage3_gather_fp16_weights_on_model_save``, ...), each with the key
    that replaces it as a config file spells it (the field's alias when it has one)."""
    out = {}
    from deepspeed.runtime import constants

    old_bf16 = getattr(constants, "BFLOAT16_OLD", None)
    if old_bf16:
        out[old_bf16] = getattr(constants, "BFLOAT16", "bf16")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    fields = DeepSpeedZeroConfig.model_fields
    for name, f in fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if not extra.get("deprecated"):
            continue
        new = str(extra.get("new_param", ""))
        target = fields.get(new)
        modern = (target.alias or new) if target is not None else new
        out[f"zero_optimization.{f.alias or name}"] = f"zero_optimization.{modern}" if target is not None else modern
    return out


def _closest(key: str, allowed) -> str:
    hits = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.6)
    return hits[0] if hits else ""


def _unknown(path: str, key: str, allowed, *, ignored_note: str) -> LintFinding:
    hint = _closest(key, allowed)
    where = f"{path}.{key}" if path else key
    message = f"unknown key '{key}' ({ignored_note})"
    if hint:
        message += f"; did you mean '{hint}'?"
    return LintFinding(path=where, severity="error", message=message,
                       suggestion=f"rename '{key}' to '{hint}'" if hint else "remove it")


def _walk(node: dict, schema: _Schema, path: str, out: list) -> None:
    for key, value in node.items():
        if key not in schema.keys:
            if not path:
                note = "DeepSpeed ignores unknown top-level keys"
                hint = _closest(key, schema.keys)
                if hint == "zero_optimization" and "zero_optimization" not in node:
                    note = "DeepSpeed ignores it and runs ZeRO stage 0"
                elif hint:
                    note = f"DeepSpeed ignores it, so '{hint}' keeps its default"
            elif schema.strict:
                note = "DeepSpeed rejects it"
            else:
                note = "DeepSpeed ignores it"
            out.append(_unknown(path, key, schema.keys, ignored_note=note))
            continue
        child = schema.children.get(key)
        if child is not None and isinstance(value, dict) and key not in schema.open_keys:
            _walk(value, child, f"{path}.{key}" if path else key, out)


def _number(value) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _enabled(section) -> bool:
    """A section's ``enabled`` is on as DeepSpeed reads it (:func:`~workbench.configs.importer.read_ds_bool`: true,
    1, "yes", "on" ...); "auto" and a value DeepSpeed refuses count as off here (the importer names the latter)."""
    if not isinstance(section, dict):
        return False
    try:
        return read_ds_bool(section.get("enabled"), "enabled") is True
    except ValueError:
        return False


MAX_SCALE_POWER = 63
"""Largest ``fp16.initial_scale_power``: DeepSpeed's first loss scale is the Python int ``2**power``, and torch
cannot multiply the loss by an int of 64 bits or more (``OverflowError`` at the first backward)."""

SCALE_POWER_WARNING = 32
"""``fp16.initial_scale_power`` above this draws a warning: the dynamic loss scale starts at ``2**power`` and fp16's
largest value is 65504 (about 2**16, DeepSpeed's default power), so the first steps overflow and are skipped while
the scaler halves it, about one step per power above 16."""


def _scale_power_findings(power) -> list:
    """Findings for ``fp16.initial_scale_power`` under dynamic loss scaling: an error above :data:`MAX_SCALE_POWER`
    (torch cannot multiply the loss by the int ``2**power``: the first backward fails), a warning above
    :data:`SCALE_POWER_WARNING`."""
    n = _number(power)
    if n is None or n <= SCALE_POWER_WARNING:
        return []
    if n >= MAX_SCALE_POWER + 1:
        return [LintFinding(path="fp16.initial_scale_power", severity="error",
                            message=f"initial_scale_power={power!r}: the first loss scale 2**{n:g} does not fit the "
                                    f"64-bit int torch multiplies the loss by; the first backward fails",
                            suggestion="use 16 (DeepSpeed's default)")]
    return [LintFinding(path="fp16.initial_scale_power", severity="warning",
                        message=f"initial_scale_power={power!r}: the dynamic loss scale starts at 2**{n:g}, far "
                                f"above fp16's range (65504, about 2**16); about {n - 16:g} steps overflow and are "
                                f"skipped while DeepSpeed halves it",
                        suggestion="use 16 (DeepSpeed's default)")]


def lint_ds_config(config: dict, *, world_size: Optional[int] = None) -> list[LintFinding]:
    """Findings for a DeepSpeed config, errors first.

    ``world_size`` is the data-parallel size DeepSpeed divides the batch by; without it the batch check only asks
    that ``train_batch_size`` be a multiple of ``micro × accumulation``.
    """
    if not isinstance(config, dict):
        raise ValueError(f"a DeepSpeed config must be a JSON object, got {type(config).__name__}")
    out: list[LintFinding] = []
    schema = ds_schema()
    removed = _removed_keys()
    for key in config:
        if key in removed:
            out.append(LintFinding(path=key, severity="error", message=" ".join(removed[key].split()),
                                   suggestion="remove it"))
    _walk({k: v for k, v in config.items() if k not in removed}, schema, "", out)

    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    for path, modern in deprecated_keys().items():
        section, _, key = path.rpartition(".")
        node = config if not section else config.get(section)
        if isinstance(node, dict) and key in node:
            out.append(LintFinding(path=path, severity="warning",
                                   message=f"'{key}' is deprecated (DeepSpeed still reads it)",
                                   suggestion=f"use '{modern}'"))
    for key, message in _removed_zero_keys().items():
        if key in zero:
            out.append(LintFinding(path=f"zero_optimization.{key}", severity="error",
                                   message=" ".join(message.split()), suggestion="remove it"))

    # optimizer / scheduler parameters
    opt = config.get("optimizer")
    if isinstance(opt, dict) and isinstance(opt.get("params"), dict) \
            and str(opt.get("type", "")).lower() in ("adam", "adamw"):
        allowed = adam_param_keys()
        for key in opt["params"]:
            if key == "max_grad_norm":
                out.append(LintFinding(path="optimizer.params.max_grad_norm", severity="error",
                                       message="DeepSpeed refuses 'max_grad_norm' as an optimizer parameter",
                                       suggestion="use the top-level 'gradient_clipping'"))
            elif key not in allowed:
                out.append(_unknown("optimizer.params", key, allowed,
                                    ignored_note=f"not an argument of DeepSpeed's {opt.get('type')}; "
                                                 f"the optimizer fails to build"))
    sched = config.get("scheduler")
    if isinstance(sched, dict) and "type" in sched:
        allowed = scheduler_param_keys(sched["type"])
        if allowed is None:
            from deepspeed.runtime import lr_schedules

            valid = getattr(lr_schedules, "VALID_LR_SCHEDULES", [])
            hint = _closest(sched["type"], valid)
            out.append(LintFinding(path="scheduler.type", severity="error",
                                   message=f"DeepSpeed has no scheduler '{sched['type']}'"
                                           + (f"; did you mean '{hint}'?" if hint else ""),
                                   suggestion=f"one of {', '.join(valid)}" if valid else ""))
        elif isinstance(sched.get("params"), dict):
            for key in sched["params"]:
                if key not in allowed:
                    out.append(_unknown("scheduler.params", key, allowed,
                                        ignored_note=f"not an argument of {sched['type']}; the scheduler fails "
                                                     f"to build"))

    # unresolved "auto"
    from workbench.configs.deepspeed import _find_auto

    for path in _find_auto(config):
        out.append(LintFinding(path=path, severity="warning",
                               message="value 'auto' is filled only by the Hugging Face Trainer integration; "
                                       "plain deepspeed.initialize rejects it",
                               suggestion="write the number (workbench import resolves it from the plan)"))

    # batch arithmetic
    tbs = _number(config.get("train_batch_size"))
    mbs = _number(config.get("train_micro_batch_size_per_gpu"))
    gas = _number(config.get("gradient_accumulation_steps"))
    if tbs is not None and mbs is not None and gas is not None:
        if world_size is not None and tbs != mbs * gas * world_size:
            out.append(LintFinding(
                path="train_batch_size", severity="error",
                message=f"train_batch_size={tbs:g} != train_micro_batch_size_per_gpu({mbs:g}) * "
                        f"gradient_accumulation_steps({gas:g}) * data_parallel({world_size}) = "
                        f"{mbs * gas * world_size:g}",
                suggestion=f"set train_batch_size to {mbs * gas * world_size:g}"))
        elif world_size is None and mbs * gas and tbs % (mbs * gas):
            out.append(LintFinding(
                path="train_batch_size", severity="error",
                message=f"train_batch_size={tbs:g} is not a multiple of train_micro_batch_size_per_gpu({mbs:g}) "
                        f"* gradient_accumulation_steps({gas:g}) = {mbs * gas:g}",
                suggestion="make it micro × accumulation × data-parallel size"))

    # precision
    bf16 = config.get("bf16", config.get("bfloat16"))
    for key in ("fp16", "bf16", "bfloat16"):
        section = config.get(key)
        if isinstance(section, dict):
            try:
                read_ds_bool(section.get("enabled"), f"{key}.enabled")
            except ValueError as exc:
                out.append(LintFinding(path=f"{key}.enabled", severity="error", message=str(exc),
                                       suggestion="write true or false"))
    if _enabled(config.get("fp16")) and _enabled(bf16):
        out.append(LintFinding(path="fp16.enabled", severity="error",
                               message="fp16 and bf16 are both enabled; DeepSpeed refuses this",
                               suggestion="enable one of them"))
    fp16 = config.get("fp16")
    loss_scale = _number(fp16.get("loss_scale", 0)) if isinstance(fp16, dict) else None
    if loss_scale is not None and loss_scale < 0:
        out.append(LintFinding(path="fp16.loss_scale", severity="error",
                               message=f"loss_scale={fp16['loss_scale']!r} is negative; DeepSpeed refuses it "
                                       f"(0 means dynamic loss scaling)",
                               suggestion="use 0 (dynamic) or a positive static scale"))
    elif _enabled(fp16) and loss_scale not in (None, 0.0):
        out.append(LintFinding(path="fp16.loss_scale", severity="warning",
                               message=f"static loss scale {fp16['loss_scale']} (0 means dynamic)",
                               suggestion="use loss_scale 0 with loss_scale_window unless you know the range"))
    elif _enabled(fp16):
        out.extend(_scale_power_findings(fp16.get("initial_scale_power")))
    clip = _number(config.get("gradient_clipping"))
    if clip is not None and clip < 0:
        out.append(LintFinding(path="gradient_clipping", severity="error",
                               message=f"gradient_clipping={config['gradient_clipping']!r} is negative: DeepSpeed "
                                       f"clips only when it is > 0, so clipping is silently off",
                               suggestion="write 0 for no clipping, or the max gradient norm (e.g. 1.0)"))

    # ZeRO stage-dependent settings
    stage = _number(zero.get("stage", 0)) if zero else 0.0
    stage = 0.0 if stage is None else stage
    for key in ("offload_optimizer", "offload_param"):
        section = zero.get(key)
        device = section.get("device", "none") if isinstance(section, dict) else "none"
        if device in (None, "none"):
            continue
        need = 3 if key == "offload_param" else 1
        if stage < need:
            out.append(LintFinding(
                path=f"zero_optimization.{key}", severity="error",
                message=f"{key} to '{device}' needs ZeRO stage >= {need} (stage is {stage:g}); DeepSpeed does "
                        f"not offload here",
                suggestion=f"set zero_optimization.stage to {max(need, 2) if need == 1 else 3} or remove {key}"))
        if device == "cpu" and read_ds_bool(section.get("pin_memory"), f"zero_optimization.{key}.pin_memory") \
                is False:
            from workbench.configs.deepspeed import pageable_offload_cost

            out.append(LintFinding(path=f"zero_optimization.{key}.pin_memory", severity="warning",
                                   message=f"pageable offload buffers: every copy between host and GPU is staged "
                                           f"by the driver; {pageable_offload_cost()}",
                                   suggestion="set it to true (DeepSpeed's default) when the host has room for "
                                              "page-locked buffers"))
        if device == "nvme" and not section.get("nvme_path"):
            out.append(LintFinding(path=f"zero_optimization.{key}.nvme_path", severity="error",
                                   message="offload to nvme needs nvme_path", suggestion="set it to a local NVMe "
                                                                                       "mount"))
        if device == "nvme" and 1 <= stage < 3:
            out.append(LintFinding(path=f"zero_optimization.{key}.device", severity="warning",
                                   message=f"'nvme' at ZeRO stage {stage:g}: DeepSpeed's ZeRO-1/2 keep the offloaded "
                                           "states in host memory whatever the device says (stage_1_and_2.py; only "
                                           "ZeRO-3 swaps to NVMe), so this runs as CPU offload",
                                   suggestion="write 'cpu' to say what runs, or use stage 3 to put the states on "
                                              "the NVMe"))
    if zero and stage < 3:
        stage3 = sorted(k for k in zero if k.startswith("stage3_") or k in ("sub_group_size",
                                                                         "prefetch_bucket_size",
                                                                         "param_persistence_threshold",
                                                                         "max_live_parameters",
                                                                         "max_reuse_distance"))
        for key in stage3:
            out.append(LintFinding(path=f"zero_optimization.{key}", severity="warning",
                                   message=f"'{key}' applies to ZeRO stage 3 only (stage is {stage:g}); ignored",
                                   suggestion="remove it or use stage 3"))
    out.sort(key=lambda f: (f.severity != "error", f.path))
    return out
