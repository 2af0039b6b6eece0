"""Import an existing DeepSpeed config or Megatron command line into workbench specs.

``import_ds_config`` reads ``ds_config.json`` (a dict, JSON text, or a path; hjson as DeepSpeed itself accepts),
``import_megatron_args`` reads a ``pretrain_gpt.py`` command line or launch script (Megatron-LM or Megatron-DeepSpeed
flags, ``--foo-bar`` or ``--foo_bar``, deprecated names with a warning; a script's shell variables and bash arrays
expanded as bash does), and ``import_any`` tells them apart.
The result, :class:`Imported`, holds what the source says; :meth:`Imported.to_specs` fills the rest from defaults.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from workbench.configs.deepspeed import HF_AUTO_ZERO_SIZES, PLAN_ZERO_SIZES, DeepSpeedOptions, hf_auto_zero_sizes
from workbench.defaults import DEEPSPEED_NVME_PARAM_BUFFER_ELEMENTS, DEEPSPEED_ZERO_SIZES
from workbench.specs import MAX_COUNT, ZERO_SIZE_STAGES, ClusterSpec, Engine, ModelSpec, ParallelPlan, check_int

_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)}
_PLAN_FIELDS = {f.name for f in dataclasses.fields(ParallelPlan)}


IMPORTED_MODEL_NAME = "imported"
"""The name of a model whose sizes an import changed from the model it was read over (not that model's name)."""

_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                 "vocab_size", "num_experts")
"""The fields that make a model another model (the sequence length and dropouts do not)."""


@dataclass(frozen=True, kw_only=True)
class Imported:
    """What an imported config or command says about the model, the plan and the training options."""

    kind: str
    """``deepspeed`` (a ds_config), ``megatron`` or ``megatron-deepspeed`` (a command line)."""
    model_fields: dict = field(default_factory=dict)
    """:class:`~workbench.specs.ModelSpec` keyword arguments found in the source."""
    plan_fields: dict = field(default_factory=dict)
    """:class:`~workbench.specs.ParallelPlan` keyword arguments found in the source."""
    options: dict = field(default_factory=dict)
    """:class:`~workbench.configs.deepspeed.DeepSpeedOptions` fields found, plus extra facts (``data_parallel``,
    ``gpus_per_node``, ``num_nodes``, ``auto`` paths, ``deepspeed_config`` path, ``other_flags``)."""
    warnings: list = field(default_factory=list)
    """Things the reader should know: deprecated flags, unresolved ``auto`` values, guesses."""
    lint: list = field(default_factory=list)
    """:class:`~workbench.configs.lint.LintFinding` list (DeepSpeed configs; for a command line, the sizes Megatron
    refuses and what ``workbench estimate`` refuses in its model and plan)."""

    def merge(self, other: "Imported") -> "Imported":
        """Combine a command line with its ds_config (or any two imports); ``other`` fills what ``self`` lacks.
        Conflicting values keep ``self``'s and add a warning."""
        warnings = list(self.warnings) + list(other.warnings)
        merged = []
        for mine, theirs, label in ((self.model_fields, other.model_fields, "model"),
                                    (self.plan_fields, other.plan_fields, "plan"),
                                    (self.options, other.options, "option")):
            out = dict(theirs)
            for k, v in mine.items():
                if k in theirs and theirs[k] != v and k not in ("other_flags", "engine"):
                    warnings.append(f"{label} {k}: {self.kind} says {v!r}, {other.kind} says {theirs[k]!r}; "
                                    f"keeping {v!r}")
                out[k] = v
            merged.append(out)
        kind = self.kind if self.kind != "deepspeed" else other.kind
        return Imported(kind=kind, model_fields=merged[0], plan_fields=merged[1], options=merged[2],
                        warnings=warnings, lint=list(self.lint) + list(other.lint))

    def deepspeed_options(self) -> DeepSpeedOptions:
        """The imported training options over :class:`DeepSpeedOptions`' defaults."""
        known = {k: v for k, v in self.options.items() if k in DeepSpeedOptions.field_names()}
        return DeepSpeedOptions(**known)

    def to_specs(self, model: Optional[ModelSpec] = None,
                 cluster: Optional[ClusterSpec] = None) -> tuple[ModelSpec, ParallelPlan]:
        """``(ModelSpec, ParallelPlan)`` from what was imported, the rest from ``model`` and ``cluster``.

        Without ``model`` the source must name layers, hidden size and heads. The world size comes from the source
        (launcher flags), else from ``cluster``, else from the data-parallel size the batch fields imply.
        """
        if model is not None:
            spec = model
            if self.model_fields:
                try:
                    spec = model.replace(**self.model_fields)
                except ValueError:
                    # ModelSpec.replace re-derives defaults and fails for models whose head_dim is not
                    # hidden/heads (gpt3-13b: 5140/40); the imported fields are explicit, so apply them directly.
                    values = {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.init}
                    spec = ModelSpec(**{**values, **self.model_fields})
                if "name" not in self.model_fields and any(
                        getattr(spec, k) != getattr(model, k) for k in _SHAPE_FIELDS):
                    spec = spec.replace(name=IMPORTED_MODEL_NAME)  # not the preset it was read over
        else:
            missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads") if k not in self.model_fields]
            if missing:
                raise ValueError(f"the {self.kind} source does not give {', '.join(missing)}; pass a model "
                                 f"(e.g. --model NAME) to fill them")
            spec = ModelSpec(**self.model_fields)
        fields_ = dict(self.plan_fields)
        # ZeRO sizes left "auto": the Hugging Face Trainer (or accelerate) fills them from the model's hidden size
        autos = set(self.options.get("auto") or ())
        for path, value in hf_auto_zero_sizes(spec.hidden_size, int(fields_.get("zero_stage") or 0)).items():
            if path in autos:
                fields_.setdefault(HF_AUTO_ZERO_SIZES[path], value)
        if "world_size" not in fields_:
            mp = (fields_.get("tensor_parallel", 1) * fields_.get("pipeline_parallel", 1)
                  * fields_.get("context_parallel", 1))
            if _launched_world(self.options) is not None:
                fields_["world_size"] = _launched_world(self.options)
            elif cluster is not None:
                fields_["world_size"] = cluster.world_size
            elif self.options.get("data_parallel"):
                fields_["world_size"] = self.options["data_parallel"] * mp
            else:
                raise ValueError(f"the {self.kind} source does not give the world size; pass a cluster "
                                 f"(--gpus-per-node/--nodes)")
        # Batch fields the source left out, resolved as DeepSpeed does (micro × accumulation × dp = global).
        gas = self.options.get("gradient_accumulation_steps")
        if isinstance(gas, int) and gas > 0:
            mp = (fields_.get("tensor_parallel", 1) * fields_.get("pipeline_parallel", 1)
                  * fields_.get("context_parallel", 1))
            dp = fields_["world_size"] // mp if fields_["world_size"] % mp == 0 else None
            if dp:
                if "micro_batch_size" not in fields_ and "global_batch_size" in fields_:
                    if fields_["global_batch_size"] % (gas * dp):
                        raise ValueError(f"train_batch_size={fields_['global_batch_size']} is not divisible by "
                                         f"gradient_accumulation_steps({gas}) * data_parallel({dp}) = {gas * dp}")
                    fields_["micro_batch_size"] = fields_["global_batch_size"] // (gas * dp)
                elif "global_batch_size" not in fields_:
                    fields_["global_batch_size"] = fields_.get("micro_batch_size", 1) * gas * dp
        number_checkpoints = self.options.get("number_checkpoints")
        if (fields_.get("recompute") == "full" and "recompute_layers" not in fields_
                and isinstance(number_checkpoints, int)):
            per_stage = spec.num_layers // fields_.get("pipeline_parallel", 1)
            if 0 < number_checkpoints < per_stage:
                fields_["recompute_layers"] = number_checkpoints
        return spec, ParallelPlan(**fields_)


# ----------------------------------------------------------------------------------------------------------------
# Numbers
# ----------------------------------------------------------------------------------------------------------------
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _named(path: str, value) -> str:
    """``--flag VALUE`` for command-line flags, ``key=VALUE`` (repr) for config keys."""
    return f"{path} {value}" if path.startswith("--") else f"{path}={value!r}"


def to_number(value, path: str = "value"):
    """``5e8`` / ``"5e8"`` / ``"1_000"`` → 500000000 (int when integral), floats kept; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{_named(path, value)} is not a number")
    if isinstance(value, (int, float)):
        x = value
    elif isinstance(value, str) and _NUMBER.match(value.strip().replace("_", "")):
        x = float(value.strip().replace("_", ""))
    else:
        raise ValueError(f"{_named(path, value)} is not a number")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{_named(path, value)} is not a finite number")
    if abs(x) >= 2**63:
        raise ValueError(f"{_named(path, value)} is out of range (at most {2**63 - 1:,})")
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _int(value, path: str, minimum: Optional[int] = None) -> int:
    x = to_number(value, path)
    if not isinstance(x, int):
        raise ValueError(f"{_named(path, value)} must be a whole number")
    if minimum is not None and x < minimum:
        raise ValueError(f"{_named(path, value)} must be >= {minimum}")
    return x


def _positive(value, path: str) -> int:
    return _int(value, path, minimum=1)


def _sized(field_name: str):
    """A converter for a flag that sets the spec field ``field_name``: a whole number >= 1 that the spec accepts
    (:func:`workbench.specs.check_int` with its :data:`~workbench.specs.MAX_COUNT` bound, as ``workbench estimate``
    applies it), so ``--seq-length 1e9`` is refused at import rather than later."""
    def convert(value, path: str) -> int:
        x = _positive(value, path)
        try:
            return check_int(field_name, x)
        except ValueError as exc:
            raise ValueError(f"{_named(path, value)}: {exc}") from None

    return convert


# ----------------------------------------------------------------------------------------------------------------
# Path or text
# ----------------------------------------------------------------------------------------------------------------
MAX_SOURCE_BYTES = 4 * 2**20
"""Largest config file or script read (4 MiB); real ones are a few KiB."""

MAX_NESTING = 32
"""Deepest nesting accepted in a ds_config (DeepSpeed's own are at most 4 levels deep)."""


def looks_like_text(source: str) -> bool:
    """Whether ``source`` is config text or a command line rather than a file name, decided from the string alone
    (no ``open()``): text has a line break, starts with ``{`` or ``-``, or has a space between words and is not an
    existing file; names longer than the file system allows are text."""
    stripped = source.strip()
    if not stripped or "\n" in stripped or stripped.startswith(("{", "-")) or len(source) > 4096:
        return True
    if " " in stripped or "\t" in stripped:
        return not _is_file(source)
    return False


def _is_file(source) -> bool:
    try:
        return Path(source).is_file()
    except (OSError, ValueError):  # name too long, embedded NUL
        return False


def read_source(path: Union[str, Path], what: str) -> str:
    """The text of a config file or script; ``ValueError`` naming the path when it is missing, a directory, too
    large, unreadable or not text."""
    path = Path(path)
    shown = str(path) if len(str(path)) <= 120 else str(path)[:100] + "..."
    try:
        if path.is_dir():
            raise ValueError(f"{what} {shown!r} is a directory; give a file (or the text itself)")
        if not path.exists():
            raise ValueError(f"{what} file {shown!r} does not exist (give a ds_config.json, a script, or a "
                             f"quoted command line)")
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            raise ValueError(f"{what} file {shown!r} is {size:,} bytes; a config or launch script is at most "
                             f"{MAX_SOURCE_BYTES:,}")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} file {shown!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"{what} {shown!r} cannot be read: {exc.strerror or exc}") from None


def _depth(obj) -> int:
    """Nesting depth of JSON data, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_NESTING:
            break
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed configs
# ----------------------------------------------------------------------------------------------------------------
def _unique_keys(pairs: list) -> dict:
    """A JSON object's pairs as a dict; ``ValueError`` naming a key given twice, as DeepSpeed's own loader
    (``dict_raise_error_on_duplicate_keys``) refuses the file rather than keep the last value."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"ds_config gives key {key!r} twice ({out[key]!r:.40} and {value!r:.40}); DeepSpeed "
                                f"refuses a config with duplicate keys")
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object (not a syntax error: the hjson fallback must not take it)."""


def _load_json(source) -> dict:
    if isinstance(source, dict):
        data = source
    else:
        if isinstance(source, Path) or (isinstance(source, str) and not looks_like_text(source)):
            text = read_source(source, "ds_config")
        elif isinstance(source, (str, bytes)):
            text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
        else:
            raise ValueError(f"ds_config={source!r:.80} must be a dict, JSON text or a path "
                             f"(got {type(source).__name__})")
        _refuse_other_formats(text)
        try:
            data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
        except RecursionError:
            raise ValueError(f"ds_config is nested too deeply (more than {MAX_NESTING} levels)") from None
        except json.JSONDecodeError as exc:
            try:  # DeepSpeed reads its config files with hjson (comments, unquoted keys)
                import hjson

                data = hjson.loads(text, object_pairs_hook=_unique_keys)
            except RecursionError:
                raise ValueError(f"ds_config is nested too deeply (more than {MAX_NESTING} levels)") from None
            except _DuplicateKey:
                raise
            except Exception:
                raise ValueError(f"ds_config is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"ds_config must be a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_NESTING:
        raise ValueError(f"ds_config is nested too deeply (more than {MAX_NESTING} levels)")
    try:
        return json.loads(json.dumps(data, default=str))  # plain dicts (hjson returns OrderedDicts)
    except ValueError as exc:  # NaN/Infinity given in a dict, circular references
        raise ValueError(f"ds_config holds values JSON cannot carry: {exc}") from None


def _refuse_constant(name: str):
    raise ValueError(f"ds_config holds {name}, which is not a number DeepSpeed can use")


_NEOX_KEYS = ("pipe-parallel-size", "model-parallel-size", "num-layers", "hidden-size", "num-attention-heads",
              "seq-length", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization")


def _refuse_other_formats(text: str) -> None:
    """A clear message for configs of other frameworks: a GPT-NeoX YAML (hyphenated Megatron keys in a YAML/JSON
    mapping) says what it is and gives the ``workbench estimate`` flags for its numbers."""
    stripped = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")).strip()
    if not re.search(r'^\s*"?(pipe-parallel-size|model-parallel-size|num-layers|hidden-size)"?\s*:', stripped,
                     re.MULTILINE):
        return
    import yaml

    try:
        data = yaml.safe_load(stripped)
    except (yaml.YAMLError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise ValueError("this looks like a GPT-NeoX YAML config (keys such as 'num-layers:'), but it does not parse "
                         "as YAML; the importer reads DeepSpeed ds_config.json files and Megatron command lines")
    flags = []
    for key, flag in (("num-layers", "--layers"), ("hidden-size", "--hidden"), ("num-attention-heads", "--heads"),
                      ("seq-length", "--seq"), ("model-parallel-size", "--tp"), ("pipe-parallel-size", "--pp"),
                      ("train_micro_batch_size_per_gpu", "--mbs")):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            flags.append(f"{flag} {value}")
    zero = data.get("zero_optimization")
    if isinstance(zero, dict) and isinstance(zero.get("stage"), int):
        flags.append(f"--zero {zero['stage']}")
    hint = (f"workbench estimate --engine megatron-deepspeed {' '.join(flags)}" if flags
            else "workbench estimate with --layers/--hidden/--heads/--tp/--pp")
    raise ValueError(f"this is a GPT-NeoX YAML config (NeoX's own format: Megatron-style keys such as "
                     f"'num-layers' with DeepSpeed sections), not a ds_config.json or a Megatron command line; "
                     f"the importer does not read it. Enter its numbers as flags instead: {hint}")


def _accumulation(value, path: str) -> int:
    """``gradient_accumulation_steps``: a whole number >= 1, at most the largest global batch the specs accept
    (:func:`workbench.specs.check_int` with :data:`~workbench.specs.MAX_COUNT`'s ``global_batch_size`` bound: the
    global batch is micro x accumulation x data parallel, so no larger accumulation can be estimated)."""
    x = _positive(value, path)
    try:
        return check_int(path, x, maximum=MAX_COUNT["global_batch_size"])
    except ValueError as exc:
        raise ValueError(f"{exc} (the largest global batch)") from None


def batch_data_parallel(tbs: Optional[int], mbs: Optional[int], gas: Optional[int]) -> Optional[int]:
    """The data-parallel size DeepSpeed's identity ``train_batch_size = train_micro_batch_size_per_gpu *
    gradient_accumulation_steps * data parallel`` gives for the fields a ds_config sets (``None`` for one not
    given or ``"auto"``): ``None`` unless all three are given; ``ValueError`` naming the fields and numbers when
    ``train_batch_size`` is no multiple of those given beside it (no data-parallel size makes them agree)."""
    if tbs is None:
        return None
    given = [(name, v) for name, v in (("train_micro_batch_size_per_gpu", mbs), ("gradient_accumulation_steps", gas))
             if v is not None]
    per_rank = math.prod(v for _, v in given)
    if tbs % per_rank:
        factors = " * ".join(f"{name}({v})" for name, v in given)
        raise ValueError(f"train_batch_size={tbs} is not a multiple of {factors} = {per_rank} (DeepSpeed requires "
                         f"train_batch_size = micro * accumulation * data-parallel size)")
    return tbs // per_rank if len(given) == 2 else None


def _dp_label(dp: int, world: Optional[int], sp: Optional[int]) -> str:
    """How a message names the data-parallel size: the world size, or its share under DeepSpeed-Ulysses."""
    if world is None or world == dp:
        return f"world_size({dp})"
    return f"data_parallel({dp} = world_size {world} / sequence_parallel_size {sp})"


def _derived(name: str, spec_field: str, value: int, how: str) -> int:
    """A batch field the importer works out from the others, held to the limit the specs apply to it."""
    try:
        return check_int(spec_field, value)
    except ValueError as exc:
        raise ValueError(f"{name} = {how} = {value:,}: {exc}") from None


_ZERO_MINIMUM = {"reduce_bucket_size": 1}
"""Smallest value DeepSpeed's ``DeepSpeedZeroConfig`` accepts for a ZeRO count (``Field(gt=0)``); the others are
``Field(ge=0)``."""

_ZERO_ZERO_OK = frozenset({"stage3_param_persistence_threshold", "sub_group_size"})
"""ZeRO counts the workbench also models at 0; for the other buckets and limits its options need at least 1."""


def _zero_count(key: str):
    """A converter for the ZeRO count ``key`` (bucket sizes, stage-3 limits, ``sub_group_size``): a whole number at
    least DeepSpeed's minimum (``DeepSpeedZeroConfig``: ``reduce_bucket_size`` > 0, the others >= 0), and at least 1
    where :class:`~workbench.configs.deepspeed.DeepSpeedOptions` needs it."""
    def convert(value, path: str) -> int:
        x = _int(value, path)
        least = _ZERO_MINIMUM.get(key, 0)
        if x < least:
            raise ValueError(f"{_named(path, value)} must be >= {least} (DeepSpeed's config refuses it)")
        if x == 0 and key not in _ZERO_ZERO_OK:
            raise ValueError(f"{_named(path, value)}: DeepSpeed accepts 0 here, but the workbench models this "
                             f"setting only from 1 (give a size >= 1)")
        return x

    return convert


_OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""DeepSpeed's ``OffloadDeviceEnum`` (``runtime/zero/offload_config.py``)."""


def _offload_section(section, path: str) -> Optional[dict]:
    """A ``zero_optimization.offload_optimizer`` / ``offload_param`` block as DeepSpeed's pydantic model reads it:
    ``None`` when absent or null; ``ValueError`` naming the path when it is not an object or its ``device`` is not
    one of :data:`_OFFLOAD_DEVICES` (``"auto"`` passes, for the Hugging Face Trainer to fill)."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ValueError(f'{path}={section!r:.60} must be an object like {{"device": "cpu"}}')
    device = section.get("device", "none")
    if device is not None and device != "auto" and device not in _OFFLOAD_DEVICES:
        raise ValueError(f"{path}.device={device!r:.60} must be one of {', '.join(map(repr, _OFFLOAD_DEVICES))} "
                         f"(DeepSpeed's offload devices)")
    return section


def _offload_ratio(value, path: str) -> float:
    """``offload_optimizer.ratio``: the share of the optimizer offloaded, in [0, 1] (DeepSpeed's ``Field(ge=0.0,
    le=1.0)``)."""
    x = to_number(value, path)
    if not 0 <= x <= 1:
        raise ValueError(f"{_named(path, value)} must be in [0, 1] (the share of the optimizer offloaded)")
    return float(x)


def _scale_power(value, path: str) -> int:
    """``fp16.initial_scale_power``: a whole number in [0, :data:`workbench.configs.lint.MAX_SCALE_POWER`] (the lint
    warns above 32)."""
    from workbench.configs.lint import MAX_SCALE_POWER

    x = _int(value, path, minimum=0)
    if x > MAX_SCALE_POWER:
        raise ValueError(f"{_named(path, value)} must be at most {MAX_SCALE_POWER}: the first loss scale 2**{x} "
                         f"does not fit the 64-bit int torch multiplies the loss by (the first backward fails)")
    return x


def _loss_scale(value, path: str):
    """``fp16.loss_scale``: 0 (dynamic) or a positive static scale; DeepSpeed's ``DeepSpeedFP16Config`` refuses
    negative ones."""
    x = to_number(value, path)
    if x < 0:
        raise ValueError(f"{_named(path, value)} must be >= 0 (0 is dynamic loss scaling; DeepSpeed refuses "
                         f"negative values)")
    return x


def import_ds_config(source: Union[dict, str, Path], *, world_size: Optional[int] = None) -> Imported:
    """Read a DeepSpeed config. ``world_size`` is the data-parallel size the job runs with (needed to resolve a
    missing batch field); ``"auto"`` values stay unresolved with a warning and are filled from defaults."""
    from workbench.configs.lint import lint_ds_config

    cfg = _load_json(source)
    if world_size is not None:
        world_size = _positive(world_size, "world_size")
    plan: dict = {"engine": "deepspeed"}
    opts: dict = {}
    warnings: list[str] = []
    autos: list[str] = []

    def get(section: dict, key: str, path: str, kind=to_number):
        if key not in section:
            return None
        value = section[key]
        if value is None:  # JSON null: DeepSpeed treats it as not given
            return None
        if isinstance(value, str) and value == "auto":
            autos.append(path)
            return None
        return kind(value, path)

    # DeepSpeed-Ulysses: the batch identity then counts data-parallel ranks, world ÷ sequence_parallel_size
    full_world = world_size
    sp = get(cfg, "sequence_parallel_size", "sequence_parallel_size", _positive)
    if sp is not None and sp > 1:
        plan["ulysses"] = sp
        if world_size is not None:
            if world_size % sp:
                raise ValueError(f"sequence_parallel_size={sp} does not divide world_size={world_size}")
            world_size //= sp
    tbs = get(cfg, "train_batch_size", "train_batch_size", _sized("global_batch_size"))
    mbs = get(cfg, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu", _sized("micro_batch_size"))
    gas = get(cfg, "gradient_accumulation_steps", "gradient_accumulation_steps", _accumulation)
    # DeepSpeed's _set_batch_related_parameters, with world size = data-parallel size.
    implied = batch_data_parallel(tbs, mbs, gas)
    if implied is not None:
        opts["data_parallel"] = implied
        if world_size is not None and implied != world_size:
            raise ValueError(f"train_batch_size={tbs} != train_micro_batch_size_per_gpu({mbs}) * "
                             f"gradient_accumulation_steps({gas}) * {_dp_label(world_size, full_world, sp)} = "
                             f"{mbs * gas * world_size} (DeepSpeed refuses it)")
    elif world_size is not None:
        dp = _dp_label(world_size, full_world, sp)
        if tbs is not None and mbs is not None:
            if tbs % (mbs * world_size):
                raise ValueError(f"train_batch_size={tbs} is not divisible by train_micro_batch_size_per_gpu({mbs})"
                                 f" * {dp} = {mbs * world_size}")
            gas = tbs // (mbs * world_size)
        elif tbs is not None and gas is not None:
            if tbs % (gas * world_size):
                raise ValueError(f"train_batch_size={tbs} is not divisible by gradient_accumulation_steps({gas})"
                                 f" * {dp} = {gas * world_size}")
            mbs = _derived("train_micro_batch_size_per_gpu", "micro_batch_size", tbs // (gas * world_size),
                           f"train_batch_size({tbs}) / (gradient_accumulation_steps({gas}) * {dp})")
        elif mbs is not None:
            gas = gas or 1
            tbs = _derived("train_batch_size", "global_batch_size", mbs * gas * world_size,
                           f"train_micro_batch_size_per_gpu({mbs}) * gradient_accumulation_steps({gas}) * {dp}")
        elif tbs is not None:
            if tbs % world_size:
                raise ValueError(f"train_batch_size={tbs} is not divisible by world_size={world_size}")
            gas = 1
            mbs = _derived("train_micro_batch_size_per_gpu", "micro_batch_size", tbs // world_size,
                           f"train_batch_size({tbs}) / {dp}")
        if mbs is not None and gas is not None:
            opts["data_parallel"] = world_size
    if mbs is not None:
        plan["micro_batch_size"] = mbs
    if tbs is not None:
        plan["global_batch_size"] = tbs
    if gas is not None:
        opts["gradient_accumulation_steps"] = gas
    if full_world is not None:
        plan["world_size"] = full_world

    # precision
    for key in ("fp16", "bf16", "bfloat16", "zero_optimization", "optimizer", "scheduler",
                "activation_checkpointing"):
        if key in cfg and cfg[key] is not None and not isinstance(cfg[key], dict):
            raise ValueError(f"{key}={cfg[key]!r:.60} must be a JSON object (a {{...}} section)")
    fp16 = cfg.get("fp16") if isinstance(cfg.get("fp16"), dict) else {}
    bf16 = cfg.get("bf16", cfg.get("bfloat16"))
    bf16 = bf16 if isinstance(bf16, dict) else {}
    if "bfloat16" in cfg and "bf16" not in cfg:
        warnings.append("'bfloat16' is the deprecated name of the 'bf16' section (DeepSpeed still reads it); "
                        "read as bf16")
    fp16_on = read_ds_bool(fp16.get("enabled"), "fp16.enabled")
    bf16_on = read_ds_bool(bf16.get("enabled"), "bf16.enabled")
    if fp16_on == "auto" or bf16_on == "auto":
        autos += [p for p, v in (("fp16.enabled", fp16_on), ("bf16.enabled", bf16_on)) if v == "auto"]
    if fp16_on is True and bf16_on is True:
        warnings.append("fp16 and bf16 are both enabled (DeepSpeed refuses this); reading bf16")
    if bf16_on is True:
        plan["precision"] = "bf16"
    elif fp16_on is True:
        plan["precision"] = "fp16"
    elif fp16_on in (None, False) and bf16_on in (None, False):
        plan["precision"] = "fp32"
    for key, name in (("loss_scale_window", "loss_scale_window"), ("hysteresis", "hysteresis"),
                      ("min_loss_scale", "min_loss_scale")):
        value = get(fp16, key, f"fp16.{key}")
        if value is not None:
            opts[name] = value
    power = get(fp16, "initial_scale_power", "fp16.initial_scale_power", _scale_power)
    if power is not None:
        opts["initial_scale_power"] = power
    get(fp16, "loss_scale", "fp16.loss_scale", _loss_scale)

    # ZeRO
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    stage = get(zero, "stage", "zero_optimization.stage", _int)
    if stage is not None and not 0 <= stage <= 3:
        raise ValueError(f"zero_optimization.stage={stage} must be 0, 1, 2 or 3")
    plan["zero_stage"] = stage if stage is not None else 0
    for key in ("offload_optimizer", "offload_param"):
        section = _offload_section(zero.get(key), f"zero_optimization.{key}")
        if section is not None:
            device = section.get("device", "none")
            if device == "auto":
                autos.append(f"zero_optimization.{key}.device")
                continue
            plan["offload_optimizer" if key == "offload_optimizer" else "offload_params"] = str(device or "none")
            if section.get("nvme_path"):
                opts["nvme_path"] = str(section["nvme_path"])
            if key == "offload_param" and device == "nvme":  # the swap buffers the config runs with (DeepSpeed's
                # default 1e8 where it sets none), which the advisor holds against the largest parameter partition
                size = get(section, "buffer_size", "zero_optimization.offload_param.buffer_size",
                           _zero_count("buffer_size"))
                opts["param_buffer_size"] = DEEPSPEED_NVME_PARAM_BUFFER_ELEMENTS if size is None else size
            pin = read_ds_bool(section.get("pin_memory"), f"zero_optimization.{key}.pin_memory")
            if pin is False and device not in (None, "none"):  # pageable if either section says so (true: default)
                plan["pin_memory"] = False
            ratio = get(section, "ratio", f"zero_optimization.{key}.ratio", _offload_ratio) \
                if key == "offload_optimizer" else None
            if ratio is not None and ratio < 1 and plan["zero_stage"] != 3:
                raise ValueError(f"zero_optimization.{key}.ratio={ratio:g} needs zero_optimization.stage 3 (got "
                                 f"{plan['zero_stage']}; DeepSpeed: 'Partial offloading only supported for ZeRO "
                                 f"Stage 3')")
            if ratio is not None and ratio < 1 and device not in (None, "none"):
                warnings.append(f"zero_optimization.{key}.ratio={ratio:g}: partial offload (DeepSpeed keeps "
                                f"{1 - ratio:.0%} of the optimizer on the GPU) is not modelled; priced as offloading "
                                f"all of it")
    # legacy boolean forms (DeepSpeed still accepts them, deprecated)
    if zero.get("cpu_offload") is True and "offload_optimizer" not in plan:
        plan["offload_optimizer"] = "cpu"
        warnings.append("zero_optimization.cpu_offload is deprecated; read as offload_optimizer.device=cpu")
    if zero.get("cpu_offload_param") is True and "offload_params" not in plan:
        plan["offload_params"] = "cpu"
        warnings.append("zero_optimization.cpu_offload_param is deprecated; read as offload_param.device=cpu")
    for key, name in (("reduce_bucket_size", "reduce_bucket_size"), ("allgather_bucket_size", "allgather_bucket_size"),
                      ("stage3_prefetch_bucket_size", "stage3_prefetch_bucket_size"),
                      ("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
                      ("stage3_param_persistence_threshold", "stage3_param_persistence_threshold"),
                      ("stage3_max_live_parameters", "stage3_max_live_parameters"),
                      ("stage3_max_reuse_distance", "stage3_max_reuse_distance"),
                      ("sub_group_size", "sub_group_size")):
        value = get(zero, key, f"zero_optimization.{key}", _zero_count(key))
        if value is not None:
            opts[name] = value
    # the sizes the models price go on the plan too, where the stage reads them and they differ from DeepSpeed's
    # default (PLAN_ZERO_SIZES: path -> field); "auto" ones are filled from the model's hidden size by
    # Imported.to_specs, as the Trainer does
    for path, plan_name in PLAN_ZERO_SIZES.items():
        key = path.split(".", 1)[1]
        if (int(plan.get("zero_stage") or 0) >= ZERO_SIZE_STAGES[plan_name] and key in opts
                and opts[key] != DEEPSPEED_ZERO_SIZES[plan_name]):
            plan[plan_name] = opts[key]
    contiguous = read_ds_bool(zero.get("contiguous_gradients"), "zero_optimization.contiguous_gradients")
    if isinstance(contiguous, bool):
        opts["contiguous_gradients"] = contiguous
    stage_read = plan.get("zero_stage")
    overlap = read_ds_bool(zero.get("overlap_comm"), "zero_optimization.overlap_comm")
    if overlap == "auto":
        autos.append("zero_optimization.overlap_comm")
    if isinstance(overlap, bool):
        plan["overlap_comm"] = overlap
    elif stage_read is not None and int(stage_read) >= 1:
        plan["overlap_comm"] = int(stage_read) >= 3  # DeepSpeed's own default: on for ZeRO-3 only

    # optimizer and schedule
    opt = cfg.get("optimizer") if isinstance(cfg.get("optimizer"), dict) else {}
    params = opt.get("params") if isinstance(opt.get("params"), dict) else {}
    if params.get("torch_adam") is True:
        plan["adam"] = "torch"  # torch.optim.AdamW instead of DeepSpeed's FusedAdam (adam="fused", the default)
    if opt.get("type") and str(opt["type"]).lower() not in ("adam", "adamw"):
        warnings.append(f"optimizer.type={opt['type']!r}: the memory model assumes Adam-style states (12 bytes per "
                        f"parameter)")
    for key in ("lr", "eps", "weight_decay"):
        value = get(params, key, f"optimizer.params.{key}")
        if value is not None:
            opts[key] = float(value)
    if params.get("betas") is not None:
        betas = params["betas"]
        if isinstance(betas, str) and betas == "auto":
            autos.append("optimizer.params.betas")
        elif not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ValueError(f"optimizer.params.betas={betas!r:.60} must be a list of two numbers, e.g. [0.9, 0.95]")
        else:
            opts["betas"] = tuple(float(to_number(b, f"optimizer.params.betas[{i}]")) for i, b in enumerate(betas))
    sched = cfg.get("scheduler") if isinstance(cfg.get("scheduler"), dict) else {}
    sparams = sched.get("params") if isinstance(sched.get("params"), dict) else {}
    total = get(sparams, "total_num_steps", "scheduler.params.total_num_steps")
    warm = get(sparams, "warmup_num_steps", "scheduler.params.warmup_num_steps")
    if total is not None:
        opts["train_iters"] = int(total)
    if warm is not None:
        opts["warmup_iters"] = int(warm)
    ratio = get(sparams, "cos_min_ratio", "scheduler.params.cos_min_ratio")
    if ratio is not None and "lr" in opts:
        opts["min_lr"] = opts["lr"] * float(ratio)
    max_lr = get(sparams, "warmup_max_lr", "scheduler.params.warmup_max_lr")
    if max_lr is not None and "lr" not in opts:
        opts["lr"] = float(max_lr)
    clip = get(cfg, "gradient_clipping", "gradient_clipping")
    if clip is not None and clip < 0:
        raise ValueError(f"gradient_clipping={cfg['gradient_clipping']!r} must be >= 0 (DeepSpeed clips only when it "
                         f"is > 0, so a negative value turns clipping off silently; write 0 for no clipping)")
    if clip is not None:
        opts["clip"] = float(clip)
    for key in ("steps_per_print",):
        value = get(cfg, key, key)
        if value is not None:
            opts[key] = int(value)
    if isinstance(cfg.get("wall_clock_breakdown"), bool):
        opts["wall_clock_breakdown"] = cfg["wall_clock_breakdown"]

    # activation checkpointing
    ac = cfg.get("activation_checkpointing")
    if isinstance(ac, dict):
        plan["recompute"] = "full"
        warnings.append("activation_checkpointing is present: read as full recompute (DeepSpeed checkpoints only "
                        "where the model calls deepspeed.checkpointing.checkpoint)")
        n = get(ac, "number_checkpoints", "activation_checkpointing.number_checkpoints", _positive)
        if n is not None:
            opts["number_checkpoints"] = n
        if isinstance(ac.get("cpu_checkpointing"), bool):
            opts["cpu_checkpointing"] = ac["cpu_checkpointing"]

    if autos:
        opts["auto"] = autos
        stage = int(plan.get("zero_stage") or 0)
        sized = [p for p in autos if p in HF_AUTO_ZERO_SIZES and stage >= ZERO_SIZE_STAGES[HF_AUTO_ZERO_SIZES[p]]]
        rest = [p for p in autos if p not in HF_AUTO_ZERO_SIZES]  # (a stage-3 size at a lower stage is unread)
        if rest:
            warnings.append(f"unresolved 'auto' values (Hugging Face Trainer style) at {', '.join(rest)}: taken from "
                            f"the defaults / your specs")
        if sized:
            warnings.append(f"'auto' at {', '.join(sized)}: filled from the model's hidden size h as the Hugging Face "
                            f"Trainer and accelerate fill them (reduce_bucket_size h², stage3_prefetch_bucket_size "
                            f"0.9·h², stage3_param_persistence_threshold 10·h)")
    lint = lint_ds_config(cfg, world_size=world_size)
    return Imported(kind="deepspeed", plan_fields=plan, options=opts, warnings=warnings, lint=lint)


# ----------------------------------------------------------------------------------------------------------------
# Megatron command lines
# ----------------------------------------------------------------------------------------------------------------
_LAUNCHERS = {"torchrun", "python", "python3", "deepspeed", "srun", "mpirun", "accelerate", "env"}


_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*\+?=")
_WORD = re.compile(r"\S*")
_PLAIN = re.compile(r"[^\s'\"\\$]*")
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})
_EXPANSION = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?P<index>\[[@*]\])?(?::?-(?P<default>[^}]*))?\}"
                        r"|(?P<plain>[A-Za-z_]\w*))")
_ARRAY_START = re.compile(r"^\s*(?:(?:export|declare|typeset|local|readonly)\s+(?:-\w+\s+)*)?"
                          r"(?P<name>[A-Za-z_]\w*)(?P<append>\+?)=\(")


def _expansion(m: re.Match, env: dict, quote: Optional[str], assigning: bool) -> Optional[str]:
    """The shell text that stands for ``$NAME`` / ``${NAME}`` / ``${NAME:-default}`` / ``${NAME[@]}`` (``None``
    when the variable is not set and has no default), quoted so that :func:`shlex.split` gives the words bash does:
    an unquoted scalar splits at blanks, an array with ``[@]`` gives one word per element (unquoted: each split
    again), a double-quoted scalar or an assignment's value stays one word."""
    name = m.group("braced") or m.group("plain")
    value = env.get(name)
    if value is None or value == "":
        default = m.group("default")
        if default is None:
            return None if value is None else ""
        value = re.sub(_EXPANSION, lambda d: _plain_value(env.get(d.group("braced") or d.group("plain")),
                                                          d.group(0)), default)
    if isinstance(value, list) and not m.group("index"):
        value = value[0] if value else ""  # $NAME of an array is its first element
    if isinstance(value, list) and (assigning or m.group("index") == "[*]"):
        value = " ".join(value)
    if isinstance(value, list):
        if quote == '"':
            return '"' + " ".join(shlex.quote(v) for v in value) + '"'
        return " ".join(shlex.quote(w) for v in value for w in v.split())
    if quote == '"':
        return value.replace("\\", "\\\\").replace('"', '\\"')
    if assigning:
        return shlex.quote(value)
    return " ".join(shlex.quote(w) for w in value.split())


def _plain_value(value, raw: str) -> str:
    if value is None:
        return raw
    return " ".join(value) if isinstance(value, list) else value


def _expand(text: str, env: dict, *, assignments: bool = True) -> str:
    """``text`` (one command, or an array's body) with the shell variables ``env`` knows expanded as bash would
    (word splitting of unquoted values, arrays element by element; no expansion inside single quotes); unknown
    variables stay as written. ``assignments``: leading ``NAME=value`` words keep their value as one word."""
    out: list[str] = []
    i, n = 0, len(text)
    quote: Optional[str] = None
    word_start, leading, assigning, declared = True, assignments, False, False
    while i < n:
        c = text[i]
        if quote == "'":  # literal to the closing quote
            end = text.find("'", i)
            end, quote = (n, quote) if end < 0 else (end + 1, None)
            out.append(text[i:end])
            i = end
            continue
        if c == "\\" and i + 1 < n:
            out.append(text[i:i + 2])
            i += 2
            continue
        if quote is None and c in " \t\r\n":
            word_start = True
            out.append(c)
            i += 1
            continue
        if quote is None and word_start:
            word_start = False
            if c == "#":  # a comment, to the end of the line
                end = text.find("\n", i)
                out.append(text[i:] if end < 0 else text[i:end])
                i = n if end < 0 else end
                continue
            word = _WORD.match(text, i).group(0)
            assigning = leading and bool(_ASSIGNMENT.match(word))
            leading = leading and (assigning or word in _DECLARERS or (declared and word.startswith("-")))
            declared = declared or word in _DECLARERS
        if c in "'\"":
            quote = None if quote == c else (c if quote is None else quote)
            out.append(c)
            i += 1
            continue
        m = _EXPANSION.match(text, i) if c == "$" else None
        if m:
            value = _expansion(m, env, quote, assigning)
            out.append(m.group(0) if value is None else value)
            i = m.end()
            continue
        run = _PLAIN.match(text, i + 1)  # the ordinary characters after c, in one step
        out.append(text[i:run.end()])
        i = run.end()
    return "".join(out)


def _array_end(text: str, start: int) -> int:
    """The index of the ``)`` that closes a bash array opened just before ``start`` (quotes and comments skipped),
    or -1."""
    i, quote = start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == start or text[i - 1].isspace()):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif c == ")":
            return i
        i += 1
    return -1


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        raise ValueError(f"cannot split the command line: {exc}") from None


def _shell_tokens(text: str) -> tuple[list[str], list[str]]:
    """(command tokens, launcher tokens) from a command or a small bash script.

    Joins ``\\`` continuations, drops comments, reads ``NAME=value`` assignments and bash arrays
    ``NAME=( ... )`` (over several lines too) in order, and expands ``$NAME`` / ``${NAME}`` /
    ``${NAME:-default}`` / ``"${NAME[@]}"`` as bash does (an unquoted value holding several words gives those
    words); unknown variables stay as written. Picks the line that runs a ``.py`` script.
    """
    text = re.sub(r"\\\r?\n", " ", text)
    env: dict = {}
    chosen: Optional[list[str]] = None
    pos, arrays = 0, True
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        line, start = text[pos:end], pos
        pos = end
        array = _ARRAY_START.match(line) if arrays else None
        if array:
            close = _array_end(text, start + array.end())
            arrays = close >= 0  # one array left open: the rest is read line by line
            if close >= 0:
                items = _split(_expand(text[start + array.end():close], env, assignments=False))
                name = array.group("name")
                old = env.get(name) if array.group("append") else None
                env[name] = ([] if old is None else [old] if isinstance(old, str) else old) + items
                end = text.find("\n", close)
                pos = len(text) if end < 0 else end + 1
                continue
        toks = _split(_expand(line, env))
        if toks and toks[0] in _DECLARERS:
            toks = [t for t in toks[1:] if not t.startswith("-")]
        if toks and all(_ASSIGNMENT.match(t) for t in toks):
            for t in toks:
                name, value = t.split("=", 1)
                if name.endswith("+"):
                    name, old = name[:-1], env.get(name[:-1], "")
                    value = old + [value] if isinstance(old, list) else old + value
                env[name] = value
            continue
        if any(t.endswith(".py") for t in toks) or any(t.startswith("--") for t in toks):
            if chosen is None or any(t.endswith(".py") for t in toks):
                chosen = toks
    if chosen is None:
        raise ValueError("no command found: expected pretrain_gpt.py flags such as --num-layers")
    chosen = [t for t in chosen if t]  # "${EMPTY[@]}" is no word in bash
    script_at = next((i for i, t in enumerate(chosen) if t.endswith(".py")), None)
    if script_at is None:
        return chosen, []
    return chosen[script_at + 1:], chosen[:script_at]


_TRUE_WORDS = frozenset({"true", "yes", "on", "t", "y", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "f", "n", "0"})


def read_ds_bool(value, where: str):
    """A section's ``enabled`` as DeepSpeed reads it: its config models are pydantic, whose booleans also accept
    0/1 and the words true/false, yes/no, on/off, t/f, y/n (any case); ``None`` (absent) and ``"auto"`` (filled in
    by the HF Trainer) stay as they are. Anything else DeepSpeed refuses, and so does this."""
    if value is None or isinstance(value, bool) or value == "auto":
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError(f"{where}={value!r:.60} must be true or false (DeepSpeed refuses other values)")


def _flag_dict(tokens: list[str]) -> tuple[dict, list[str]]:
    """``--foo_bar 1 --baz --x=y`` → {"foo-bar": ["1"], "baz": [], "x": ["y"]} and stray tokens."""
    flags: dict = {}
    stray = []
    current = None
    for tok in tokens:
        if tok.startswith("--") and len(tok) > 2:
            name, _, value = tok[2:].partition("=")
            name = name.replace("_", "-")
            current = name
            flags[name] = [value] if value else []
            if value:
                current = None
        elif tok.startswith("-") and len(tok) > 1 and not _NUMBER.match(tok):
            current = None
            stray.append(tok)
        elif current is not None:
            flags[current].append(tok)
        else:
            stray.append(tok)
    return flags, stray


def _launcher_shape(tokens: list[str]) -> dict:
    """``gpus_per_node`` and ``num_nodes`` from a ``torchrun`` / ``deepspeed`` launcher's flags. ``--nproc_per_node``
    words (``gpu``, ``auto``) leave the count to the machine; a count below 1 is refused. With processes per node and
    no node count, one node: torchrun's ``--nnodes`` default, and the DeepSpeed launcher's without a hostfile."""
    out: dict = {}
    flags, _ = _flag_dict(tokens)
    for names, key in ((("nproc-per-node", "num-gpus"), "gpus_per_node"), (("nnodes", "num-nodes"), "num_nodes")):
        for n in names:
            if flags.get(n):
                value = flags[n][0]
                if ":" in value:  # elastic min:max
                    value = value.split(":")[-1]
                try:
                    count = _int(value, f"--{n}")
                except ValueError:
                    continue  # a word torchrun resolves on the machine (gpu, cpu, auto)
                if count < 1:
                    raise ValueError(f"launcher --{n} {value}: must be >= 1")
                out[key] = count
    if "gpus_per_node" in out and "num_nodes" not in out and not flags.get("hostfile"):
        out["num_nodes"] = 1
    return out


_KNOWN = {
    # model
    "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "group-query-attention",
    "num-query-groups", "num-key-value-heads", "kv-channels", "seq-length", "max-position-embeddings",
    "position-embedding-type", "use-rotary-position-embeddings", "no-position-embedding", "swiglu", "normalization",
    "disable-bias-linear", "untie-embeddings-and-output-weights", "attention-backend", "use-flash-attn",
    "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton", "transformer-impl", "num-experts",
    "moe-router-topk", "topk", "moe-ffn-hidden-size", "vocab-size", "expert-interval", "hidden-dropout",
    "attention-dropout",
    "no-masked-softmax-fusion", "masked-softmax-fusion", "attention-softmax-in-fp32",
    "no-gradient-accumulation-fusion", "overlap-grad-reduce", "grad-reduce-in-bf16",
    "accumulate-allreduce-grads-in-fp32",
    # parallel / batch
    "tensor-model-parallel-size", "model-parallel-size", "pipeline-model-parallel-size",
    "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank", "context-parallel-size",
    "cp-comm-type", "hierarchical-context-parallel-sizes",
    "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
    "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split",
    "cross-entropy-loss-fusion", "cross-entropy-fusion-impl",
    "sequence-parallel", "tp-comm-overlap", "tp-comm-overlap-cfg", "use-distributed-optimizer", "recompute-granularity", "recompute-method", "recompute-modules",
    "recompute-num-layers", "recompute-activations", "checkpoint-activations", "checkpoint-num-layers",
    "deepspeed-activation-checkpointing", "micro-batch-size", "global-batch-size", "batch-size",
    "no-pipeline-parallel", "zero-stage", "deepspeed", "use-deepspeed", "deepspeed-config",
    "activations-checkpoint-method", "activations-checkpoint-num-layers", "expert-model-parallel-size",
    # training
    "bf16", "fp16", "lr", "min-lr", "lr-decay-style", "lr-warmup-iters", "lr-decay-iters", "train-iters",
    "weight-decay", "adam-beta1", "adam-beta2", "adam-eps", "clip-grad", "seed", "loss-scale-window", "hysteresis",
    "min-loss-scale", "initial-loss-scale",
}


_MOE_FLAGS = {"moe-shared-expert-intermediate-size", "moe-shared-expert-gate", "expert-model-parallel-size", "expert-tensor-parallel-size", "moe-token-dispatcher-type",
              "moe-expert-parallel-size", "moe-train-capacity-factor", "moe-eval-capacity-factor",
              "moe-min-capacity", "disable-moe-token-dropping", "create-moe-param-group",
              "moe-expert-capacity-factor", "moe-pad-expert-input-to-capacity", "overlap-moe-expert-parallel-comm"}
_KNOWN |= _MOE_FLAGS


def _read_moe(one, has, num, kind: str, model: dict, plan: dict, warnings: list) -> None:
    """Megatron-LM's MoE layout flags (``megatron/training/arguments.py``, ``_add_moe_args`` and the parallel group):
    ``--expert-model-parallel-size``, ``--expert-tensor-parallel-size`` (unset: the TP size),
    ``--moe-token-dispatcher-type`` (default ``allgather``; ``flex`` is read as ``alltoall``, the volume it moves),
    ``--moe-expert-capacity-factor`` (negative or unset: dropless) and ``--moe-pad-expert-input-to-capacity``.
    Megatron-DeepSpeed's MoE (DeepSpeed-MoE's ``ep_size``) is not the megatron-core layer: its expert parallelism is
    named in a warning and left out."""
    present = sorted(f for f in _MOE_FLAGS if has(f))
    if kind == "megatron-deepspeed":
        _read_deepspeed_moe(has, num, model, plan, warnings, present)
        return
    ds_moe = [f for f in ("moe-expert-parallel-size", "moe-train-capacity-factor", "moe-eval-capacity-factor",
                          "moe-min-capacity", "create-moe-param-group",
                          "disable-moe-token-dropping") if has(f)]
    if ds_moe:
        warnings.append(f"{', '.join('--' + f for f in ds_moe)}: Megatron-DeepSpeed's (DeepSpeed-MoE) flags, "
                        f"ignored by Megatron-LM; its expert parallelism is --expert-model-parallel-size")
        present = [f for f in present if f not in ds_moe]
    if "num_experts" not in model:
        if present:
            warnings.append(f"{', '.join('--' + f for f in present)} without --num-experts: a dense model, ignored")
        return
    if has("expert-model-parallel-size"):
        plan["expert_parallel"] = num("expert-model-parallel-size", _sized("expert_parallel"))
    if has("expert-tensor-parallel-size"):
        plan["expert_tensor_parallel"] = num("expert-tensor-parallel-size", _sized("expert_tensor_parallel"))
    dispatcher = one("moe-token-dispatcher-type") or "allgather"  # Megatron-LM's default
    if dispatcher == "flex":
        warnings.append("--moe-token-dispatcher-type flex (DeepEP / HybridEP): priced as alltoall, the same tokens "
                        "moved by other kernels")
        dispatcher = "alltoall"
    plan["moe_token_dispatcher"] = dispatcher
    if has("moe-expert-capacity-factor"):
        factor = num("moe-expert-capacity-factor")
        if factor is not None and float(factor) >= 0:
            plan["moe_capacity_factor"] = float(factor)
    if has("moe-pad-expert-input-to-capacity"):
        plan["moe_pad_to_capacity"] = True
    if has("overlap-moe-expert-parallel-comm"):
        plan["moe_overlap_alltoall"] = True


def _read_deepspeed_moe(has, num, model: dict, plan: dict, warnings: list, present: list) -> None:
    """Megatron-DeepSpeed's MoE flags, its DeepSpeed-MoE layers' arguments: ``--moe-expert-parallel-size`` (ep_size)
    and ``--moe-train-capacity-factor`` (capacity_factor) are read; ``--moe-min-capacity`` other than DeepSpeed's 4
    and ``--disable-moe-token-dropping`` (capacity = the busiest expert's load) are named as not modelled;
    megatron-core's expert flags do not apply."""
    from workbench import dsmoe

    core = [f for f in present if f not in ("moe-expert-parallel-size", "moe-train-capacity-factor",
                                            "moe-eval-capacity-factor", "moe-min-capacity",
                                            "disable-moe-token-dropping", "create-moe-param-group")]
    if core:
        warnings.append(f"{', '.join('--' + f for f in core)}: megatron-core's MoE flags, not Megatron-DeepSpeed's "
                        f"(its experts are DeepSpeed-MoE layers: --moe-expert-parallel-size); ignored")
    if "num_experts" not in model:
        return
    if has("moe-expert-parallel-size"):
        plan["expert_parallel"] = num("moe-expert-parallel-size", _sized("expert_parallel"))
    if has("moe-train-capacity-factor"):
        plan["moe_capacity_factor"] = float(num("moe-train-capacity-factor"))
    if has("moe-min-capacity") and int(num("moe-min-capacity")) != dsmoe.MIN_CAPACITY:
        warnings.append(f"--moe-min-capacity {num('moe-min-capacity')}: priced with DeepSpeed's default "
                        f"{dsmoe.MIN_CAPACITY} (it matters only when tokens·top-k / experts is below it)")
    if has("disable-moe-token-dropping"):
        warnings.append("--disable-moe-token-dropping: each expert's capacity becomes the busiest expert's load "
                        "(all-reduced max), which the workbench cannot know; priced at the capacity factor instead")


_FP8_FLAGS = {"fp8-format", "fp8-recipe", "fp8-margin", "fp8-interval", "fp8-amax-history-len",
              "fp8-amax-compute-algo", "fp8-param-gather", "first-last-layers-bf16", "num-layers-at-start-in-bf16",
              "num-layers-at-end-in-bf16", "no-fp8-wgrad", "fp8-dot-product-attention", "fp8-multi-head-attention"}
_KNOWN |= _FP8_FLAGS
_KNOWN.add("ds-sequence-parallel-size")


def _read_fp8(flags, one, has, num, plan: dict, opts: dict, warnings: list) -> None:
    """Megatron-LM's Transformer Engine FP8 flags (``megatron/training/arguments.py``, ``_add_transformer_engine_args``):
    ``--fp8-format e4m3|hybrid`` turns FP8 on (precision ``fp8``), ``--fp8-recipe`` (default ``delayed``),
    ``--fp8-param-gather``, ``--first-last-layers-bf16`` with ``--num-layers-at-start/end-in-bf16`` (default 1
    each). The delayed recipe's history and margin are kept as options; what the models do not price is said."""
    fp8_flags = sorted(f for f in flags if f in _FP8_FLAGS or f.startswith("fp8"))
    if not has("fp8-format"):
        if fp8_flags:
            warnings.append(f"{', '.join('--' + f for f in fp8_flags)} without --fp8-format: Megatron trains in "
                            f"{plan['precision']} (FP8 is off); ignored")
        return
    fmt = one("fp8-format")
    if fmt not in ("e4m3", "hybrid"):
        raise ValueError(f"--fp8-format {fmt!r} must be 'e4m3' or 'hybrid'")
    if plan.get("precision") == "fp16":
        warnings.append("--fp8-format with --fp16: read as FP8 over bf16 (the workbench models Transformer Engine's "
                        "FP8 with bf16 weights and activations)")
    elif plan.get("precision") == "fp32":
        warnings.append("--fp8-format without --bf16: read as FP8 over bf16 (Megatron-LM's FP8 examples pass --bf16)")
    plan["precision"] = "fp8"
    opts["fp8_format"] = fmt
    recipe = one("fp8-recipe") or "delayed"
    if recipe == "custom":
        warnings.append("--fp8-recipe custom: its quantizers are unknown here; read as 'tensorwise' (per-tensor "
                        "current scaling)")
        recipe = "tensorwise"
    if recipe not in ("delayed", "tensorwise", "blockwise", "mxfp8"):
        raise ValueError(f"--fp8-recipe {recipe!r} must be one of delayed, tensorwise, blockwise, mxfp8")
    plan["fp8_recipe"] = recipe
    if has("fp8-param-gather"):
        plan["fp8_param_gather"] = True
    if has("first-last-layers-bf16"):
        for flag, field in (("num-layers-at-start-in-bf16", "fp8_bf16_first_layers"),
                            ("num-layers-at-end-in-bf16", "fp8_bf16_last_layers")):
            plan[field] = num(flag, lambda v, path: _int(v, path, minimum=0)) if has(flag) else 1  # Megatron's default
    for flag, key in (("fp8-amax-history-len", "fp8_amax_history_len"), ("fp8-margin", "fp8_margin")):
        if has(flag):
            opts[key] = num(flag, _int)
    if has("fp8-amax-compute-algo"):
        opts["fp8_amax_compute_algo"] = one("fp8-amax-compute-algo")
    if one("transformer-impl") == "local":
        warnings.append("--fp8-format with --transformer-impl local: Megatron's FP8 needs Transformer Engine's "
                        "layers (--transformer-impl transformer_engine)")
    for flag, what in (("no-fp8-wgrad", "weight-gradient GEMMs in bf16"),
                       ("fp8-dot-product-attention", "FP8 attention"), ("fp8-multi-head-attention", "FP8 attention")):
        if has(flag):
            warnings.append(f"--{flag} ({what}) is not modelled: the estimate runs every linear GEMM of the FP8 "
                            f"layers in FP8 and attention in bf16")


def _megatron_attention(backend, impl, has, kind: str) -> str:
    """The attention kernel a Megatron command line runs (:class:`workbench.specs.AttentionImpl`).

    Megatron-LM: Transformer Engine (``--transformer-impl transformer_engine``, the default) with
    ``--attention-backend auto|flash|fused`` (or the legacy ``--use-flash-attn``) is flash attention;
    ``--attention-backend unfused`` is the s×s path. megatron-core's own ``DotProductAttention``
    (``--transformer-impl local`` or ``--attention-backend local``) runs Megatron's fused scale-mask-softmax unless
    ``--no-masked-softmax-fusion``. Megatron-DeepSpeed: local attention unless ``--use-flash-attn[-v2]``."""
    if any(has(f) for f in ("use-flash-attn", "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton")):
        return "flash"
    if backend == "unfused":
        return "unfused"
    local = backend == "local" or impl == "local" or kind == "megatron-deepspeed"
    if local:
        return "unfused" if has("no-masked-softmax-fusion") else "fused-softmax"
    return "flash"


def _expandable_in_script(text: str) -> bool:
    """Whether a launch script sets ``PYTORCH_CUDA_ALLOC_CONF`` with ``expandable_segments:True`` (an ``export`` or
    a ``NAME=value`` prefix on a line that is not a comment)."""
    from workbench.configs.launch import ALLOC_CONF_VAR, expandable_in_conf

    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        try:
            toks = shlex.split(line, comments=True)
        except ValueError:
            continue
        for t in toks:
            if t.startswith(ALLOC_CONF_VAR + "=") and expandable_in_conf(t.split("=", 1)[1]):
                return True
    return False


def import_megatron_args(command: Union[str, list], *, world_size: Optional[int] = None) -> Imported:
    """Read a Megatron-LM or Megatron-DeepSpeed ``pretrain_gpt.py`` command line (or a launch script; one that
    exports ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` gives ``expandable_segments``).

    ``world_size``: the number of GPUs (ranks) the command runs on, for a command without a launcher that says it
    (``torchrun --nproc_per_node N --nnodes M``); one that disagrees with the launcher is refused. With a world size
    the plan is checked as ``workbench estimate`` checks it (:func:`lint_megatron_specs`)."""
    if isinstance(command, (list, tuple)):
        text = " ".join(shlex.quote(str(t)) for t in command)
    else:
        text = str(command)
    tokens, launcher = _shell_tokens(text)
    flags, stray = _flag_dict(tokens)
    m: dict = {}
    plan: dict = {}
    if _expandable_in_script(text):
        plan["expandable_segments"] = True
    opts: dict = _launcher_shape(launcher)
    warnings: list[str] = []
    launched = _launched_world(opts)
    if world_size is not None:
        world_size = _positive(world_size, "world_size")
        if launched is not None and launched != world_size:
            raise ValueError(f"world_size={world_size} != the launcher's gpus_per_node({opts['gpus_per_node']}) * "
                             f"num_nodes({opts['num_nodes']}) = {launched} ranks")

    def one(name: str):
        values = flags.get(name)
        if values is None:
            return None
        if not values:
            raise ValueError(f"--{name} needs a value")
        return values[0]

    def num(name: str, kind=to_number):
        value = one(name)
        if isinstance(value, str) and value.startswith("$"):
            raise ValueError(f"--{name} {value}: the shell variable is not set in the script (set it before the "
                             f"command, or give the number)")
        return None if value is None else kind(value, f"--{name}")

    def has(name: str) -> bool:
        return name in flags

    def _read_recompute_method(method, method_flag: str, count_flag: str) -> None:
        """Full recompute: ``block`` recomputes the first N layers of each pipeline stage; ``uniform`` recomputes
        every layer, in chunks of N layers (only each chunk's input is kept)."""
        if method is None:
            return
        n = num(count_flag, _positive) if has(count_flag) else 1
        if method == "block":
            if has(count_flag):
                plan["recompute_layers"] = n
        elif method == "uniform":
            opts["recompute_uniform_chunk_layers"] = n
            if n > 1:
                warnings.append(f"--{method_flag} uniform with --{count_flag} {n}: every layer is recomputed, one "
                                f"checkpoint per {n} layers; the memory model keeps one checkpoint per layer (a "
                                f"little more memory than Megatron stores, and the {n}-layer recompute working set "
                                f"is counted as one layer's)")
        else:
            raise ValueError(f"--{method_flag} {method!r} must be 'uniform' or 'block'")

    is_hybrid = has("deepspeed") or has("use-deepspeed") or has("deepspeed-config")
    if has("use-deepspeed"):
        warnings.append("--use-deepspeed is not a Megatron-DeepSpeed flag (it is --deepspeed); read as --deepspeed")
    kind = "megatron-deepspeed" if is_hybrid else "megatron"
    plan["engine"] = kind

    # model
    for flag, key in (("num-layers", "num_layers"), ("hidden-size", "hidden_size"),
                      ("ffn-hidden-size", "ffn_hidden_size"), ("num-attention-heads", "num_attention_heads"),
                      ("kv-channels", "head_dim"), ("seq-length", "seq_length"), ("vocab-size", "vocab_size"),
                      ("moe-ffn-hidden-size", "moe_ffn_hidden_size")):
        value = num(flag, _sized(key))
        if value is not None:
            m[key] = value
    for flag, key in (("hidden-dropout", "hidden_dropout"), ("attention-dropout", "attention_dropout")):
        value = num(flag)
        m[key] = 0.1 if value is None else float(value)  # Megatron's default when the flag is absent
    if "seq_length" not in m and has("max-position-embeddings"):
        m["seq_length"] = num("max-position-embeddings", _sized("seq_length"))
        warnings.append("no --seq-length: took --max-position-embeddings as the sequence length")
    if has("num-query-groups"):
        m["num_query_groups"] = num("num-query-groups", _sized("num_query_groups"))
        if not has("group-query-attention"):
            warnings.append("--num-query-groups without --group-query-attention: Megatron ignores it; read anyway")
    if has("num-key-value-heads"):
        m["num_query_groups"] = num("num-key-value-heads", _sized("num_query_groups"))
    pos = one("position-embedding-type")
    if has("use-rotary-position-embeddings") or pos in ("rope", "yarn", "mrope"):
        m["position_embedding"] = "rotary"
    elif pos in (None, "learned_absolute") and not has("no-position-embedding"):
        m["position_embedding"] = "learned"
    else:
        warnings.append(f"position embedding {pos or 'none'!r} has no workbench equivalent; read as rotary "
                        f"(no parameters)")
        m["position_embedding"] = "rotary"
    m["activation"] = "swiglu" if has("swiglu") else "gelu"
    norm = (one("normalization") or "layernorm").lower()
    m["normalization"] = "rmsnorm" if norm == "rmsnorm" else "layernorm"
    m["add_bias_linear"] = not has("disable-bias-linear")
    m["tied_embeddings"] = not has("untie-embeddings-and-output-weights")
    m["attention"] = _megatron_attention(one("attention-backend"), one("transformer-impl"), has, kind)
    # the optimizer kernel: Megatron takes Transformer Engine's or Apex's FusedAdam when installed and falls back to
    # torch.optim.AdamW; --no-gradient-accumulation-fusion with the local implementation is the sign of neither
    if has("no-gradient-accumulation-fusion") and one("transformer-impl") == "local":
        plan["adam"] = "torch"
        warnings.append("--no-gradient-accumulation-fusion with --transformer-impl local: read as a stack without "
                        "Apex/Transformer Engine (torch.optim.AdamW, adam=torch)")
    if not is_hybrid:  # the hybrid's gradient reduce is DeepSpeed's (ds_config overlap_comm)
        plan["overlap_comm"] = has("overlap-grad-reduce")
        # Megatron's main-gradient dtype where the script sets it (default: fp32 with --bf16, 16-bit with --fp16)
        if has("grad-reduce-in-bf16"):
            plan["grad_reduce_fp32"] = False
        elif has("accumulate-allreduce-grads-in-fp32"):
            plan["grad_reduce_fp32"] = True
    if has("num-experts"):
        experts = num("num-experts", _int)
        if experts and experts > 1:
            m["num_experts"] = num("num-experts", _sized("num_experts"))
            topk = (num("moe-router-topk", _sized("moe_top_k")) if has("moe-router-topk")
                    else num("topk", _sized("moe_top_k")))
            if topk is not None:
                m["moe_top_k"] = topk
            if has("moe-shared-expert-intermediate-size"):
                m["shared_expert_ffn_hidden_size"] = num("moe-shared-expert-intermediate-size",
                                                         _sized("shared_expert_ffn_hidden_size"))
                if not has("moe-shared-expert-gate"):
                    warnings.append("--moe-shared-expert-intermediate-size without --moe-shared-expert-gate: the "
                                    "workbench counts the shared expert's h-wide gate (Qwen2-MoE's); h parameters "
                                    "per layer too many")
            elif kind == "megatron-deepspeed":
                m["moe_top_k"] = 1  # Megatron-DeepSpeed's --topk default
            if has("expert-interval") and num("expert-interval", _int) != 1:
                warnings.append(f"--expert-interval {one('expert-interval')}: experts in every "
                                f"{one('expert-interval')}th layer only; the workbench models experts in every layer")
            elif kind == "megatron-deepspeed" and not has("expert-interval"):
                warnings.append("Megatron-DeepSpeed puts experts in every 2nd layer by default (--expert-interval 2);"
                                " the workbench models experts in every layer")

    # parallel layout
    tp = num("tensor-model-parallel-size", _sized("tensor_parallel"))
    if has("model-parallel-size"):
        old = num("model-parallel-size", _sized("tensor_parallel"))
        warnings.append(f"--model-parallel-size {old} is deprecated (Megatron: use --tensor-model-parallel-size); "
                        f"read as tensor parallel {old}")
        tp = tp or old
    if tp is not None:
        plan["tensor_parallel"] = tp
    pp = num("pipeline-model-parallel-size", _sized("pipeline_parallel"))
    if pp is not None:
        plan["pipeline_parallel"] = pp
    if has("num-virtual-stages-per-pipeline-rank"):
        plan["virtual_pipeline"] = num("num-virtual-stages-per-pipeline-rank", _sized("virtual_pipeline"))
    elif has("num-layers-per-virtual-pipeline-stage"):
        per = num("num-layers-per-virtual-pipeline-stage", _positive)
        layers, p = m.get("num_layers"), plan.get("pipeline_parallel", 1)
        if layers is None or layers % (p * per):
            raise ValueError(f"--num-layers-per-virtual-pipeline-stage {per} does not divide num_layers={layers} / "
                             f"pipeline_parallel={p}")
        plan["virtual_pipeline"] = layers // (p * per)
    # uneven pipeline stages (megatron-core num_layers_in_first/last_pipeline_stage, account_for_*_in_pipeline_split)
    for flag, field in (("decoder-first-pipeline-num-layers", "first_stage_layers"),
                        ("decoder-last-pipeline-num-layers", "last_stage_layers")):
        if has(flag):
            plan[field] = num(flag, _positive)
    for flag, field in (("account-for-embedding-in-pipeline-split", "embedding_in_pipeline_split"),
                        ("account-for-loss-in-pipeline-split", "loss_in_pipeline_split")):
        if has(flag):
            plan[field] = True
    cp = num("context-parallel-size", _sized("context_parallel"))
    if cp is not None:
        plan["context_parallel"] = cp
    if has("cp-comm-type"):
        kinds = flags["cp-comm-type"]
        if not kinds:
            raise ValueError("--cp-comm-type needs a value")
        if len(set(kinds)) > 1:  # one per layer: the workbench prices one kind for every layer
            common = max(dict.fromkeys(kinds), key=kinds.count)
            warnings.append(f"--cp-comm-type {' '.join(kinds)}: one kind per layer; read as {common} for every "
                            f"layer (the most common)")
            kinds = [common]
        if kinds[0].lower() == "allgather":
            warnings.append("--cp-comm-type allgather: Transformer Engine names it all_gather (Megatron passes the "
                            "string on); read as all_gather")
        plan["cp_comm_type"] = kinds[0]
    if has("hierarchical-context-parallel-sizes"):
        plan["hierarchical_context_parallel_sizes"] = tuple(
            _positive(v, "--hierarchical-context-parallel-sizes") for v in flags["hierarchical-context-parallel-sizes"])
    if has("sequence-parallel"):
        if plan.get("tensor_parallel", 1) == 1:
            warnings.append("--sequence-parallel with tensor parallel 1: Megatron turns sequence parallelism off "
                            "(there is no tensor-parallel group to split over); read as off")
        else:
            plan["sequence_parallel"] = True
    if has("tp-comm-overlap"):
        if not plan.get("sequence_parallel"):
            warnings.append("--tp-comm-overlap without --sequence-parallel and tensor parallel > 1: Megatron-LM "
                            "refuses it ('Tensor parallel communication/GEMM overlap can happen only when sequence "
                            "parallelism is enabled'); read as off")
        else:
            plan["tp_comm_overlap"] = True
            if has("tp-comm-overlap-cfg"):
                warnings.append("--tp-comm-overlap-cfg: the per-GEMM userbuffer methods and SM counts of that file "
                                "are not read; priced with Transformer Engine's defaults")
    # the loss kernels (megatron-core ModelParallelConfig.cross_entropy_loss_fusion, cross_entropy_fusion_impl
    # with Megatron-LM's default 'native'); Megatron-DeepSpeed has neither flag
    if has("cross-entropy-loss-fusion") and not is_hybrid:
        plan["cross_entropy_fusion"] = one("cross-entropy-fusion-impl") or "native"
    elif has("cross-entropy-loss-fusion") or has("cross-entropy-fusion-impl"):
        warnings.append("--cross-entropy-fusion-impl without --cross-entropy-loss-fusion" if not is_hybrid else
                        "--cross-entropy-loss-fusion/--cross-entropy-fusion-impl with Megatron-DeepSpeed, which has "
                        "neither flag")
        warnings[-1] += ": the unfused vocab-parallel cross entropy runs; read as cross_entropy_fusion=none"
    if has("use-distributed-optimizer"):
        plan["distributed_optimizer"] = True
    if is_hybrid:
        if has("zero-stage"):
            plan["zero_stage"] = num("zero-stage", _int)
            if not 0 <= plan["zero_stage"] <= 3:
                raise ValueError(f"--zero-stage {plan['zero_stage']} must be 0, 1, 2 or 3")
        else:
            warnings.append("no --zero-stage: the ZeRO stage is in the ds_config (import it and merge: "
                            "import_megatron_args(cmd).merge(import_ds_config(path)))")
        if has("deepspeed-config"):
            opts["deepspeed_config"] = one("deepspeed-config")

    granularity = one("recompute-granularity")
    if granularity in ("full", "selective"):
        plan["recompute"] = granularity
        modules = flags.get("recompute-modules") or []
        if granularity == "selective" and modules:
            moe = [v for v in ("moe", "moe_act") if v in modules]
            if moe:
                plan["moe_recompute"] = moe[0]  # the whole layer covers its activation
            other = sorted(set(modules) - {"core_attn", "moe", "moe_act"})
            if other or "core_attn" not in modules:
                warnings.append(f"--recompute-modules {' '.join(modules)}: the workbench models core_attn with "
                                f"moe or moe_act; read as selective recompute of the attention core"
                                + (f" and {moe[0]}" if moe else "") + (f" ({', '.join(other)} not modelled)"
                                                                          if other else ""))
        if granularity == "full":
            _read_recompute_method(one("recompute-method"), "recompute-method", "recompute-num-layers")
    elif has("recompute-activations"):
        plan["recompute"] = "selective"
    if has("checkpoint-activations"):
        warnings.append("--checkpoint-activations is deprecated (Megatron: --recompute-granularity full "
                        "--recompute-method uniform); read as full recompute")
        plan.setdefault("recompute", "full")
        if plan["recompute"] == "full" and not granularity:
            # Megatron-LM before 2022 and Megatron-DeepSpeed: --activations-checkpoint-method uniform|block with
            # --activations-checkpoint-num-layers (older still: --checkpoint-num-layers, uniform chunks)
            method = one("activations-checkpoint-method") or "uniform"
            count = ("activations-checkpoint-num-layers" if has("activations-checkpoint-num-layers")
                     else "checkpoint-num-layers")
            _read_recompute_method(method, "activations-checkpoint-method", count)
    elif has("activations-checkpoint-method") and "recompute" not in plan:
        warnings.append(f"--activations-checkpoint-method {one('activations-checkpoint-method')} without "
                        f"--checkpoint-activations: Megatron does not recompute; ignored")
    if has("deepspeed-activation-checkpointing"):
        plan.setdefault("recompute", "full")

    # batch
    mbs = num("micro-batch-size", _sized("micro_batch_size"))
    gbs = num("global-batch-size", _sized("global_batch_size"))
    if mbs is not None:
        plan["micro_batch_size"] = mbs
    if has("batch-size"):
        # Megatron-LM before the micro/global split (2020) and the Megatron-DeepSpeed examples built on it: the
        # batch one model replica runs per forward/backward, i.e. today's micro batch (Megatron now refuses the flag:
        # "use --micro-batch-size instead"); the global batch came from the ds_config or was batch x data parallel.
        old = num("batch-size", _sized("micro_batch_size"))
        if mbs is None:
            plan["micro_batch_size"] = old
            warnings.append(f"--batch-size {old} is the old per-replica batch (Megatron now refuses it: use "
                            f"--micro-batch-size); read as micro batch {old}")
        else:
            warnings.append(f"--batch-size {old} is the old name of --micro-batch-size; ignored next to "
                            f"--micro-batch-size {mbs}")
    if gbs is not None:
        plan["global_batch_size"] = gbs

    # precision and training options
    if has("bf16") and has("fp16"):
        # Megatron-LM and Megatron-DeepSpeed validate_args: `if args.fp16: assert not args.bf16`
        raise ValueError("--fp16 and --bf16 are both given; Megatron refuses them together (its validate_args "
                         "asserts not both): keep one")
    if has("bf16"):
        plan["precision"] = "bf16"
    elif has("fp16"):
        plan["precision"] = "fp16"
    else:
        plan["precision"] = "fp32"
    for flag, key, conv in (("lr", "lr", float), ("min-lr", "min_lr", float), ("weight-decay", "weight_decay", float),
                            ("adam-eps", "eps", float), ("clip-grad", "clip", float), ("train-iters", "train_iters",
                                                                                       int),
                            ("lr-warmup-iters", "warmup_iters", int), ("seed", "seed", int),
                            ("loss-scale-window", "loss_scale_window", int), ("hysteresis", "hysteresis", int),
                            ("min-loss-scale", "min_loss_scale", float)):
        value = num(flag)
        if value is not None:
            opts[key] = conv(value)
    if has("adam-beta1") or has("adam-beta2"):
        b1 = num("adam-beta1")
        b2 = num("adam-beta2")
        opts["betas"] = (float(0.9 if b1 is None else b1), float(0.999 if b2 is None else b2))
    if has("initial-loss-scale"):
        scale = num("initial-loss-scale")
        power = scale.bit_length() - 1 if isinstance(scale, int) and scale > 0 else None
        if power is not None and 2 ** power == scale:
            opts["initial_scale_power"] = power
    if has("lr-decay-style") and one("lr-decay-style") != "cosine":
        warnings.append(f"--lr-decay-style {one('lr-decay-style')}: exports write cosine decay")
    if has("lr-decay-iters") and has("train-iters") and num("lr-decay-iters") != num("train-iters"):
        opts["lr_decay_iters"] = num("lr-decay-iters", _int)

    _read_fp8(flags, one, has, num, plan, opts, warnings)
    _read_moe(one, has, num, kind, m, plan, warnings)
    if has("ds-sequence-parallel-size") and num("ds-sequence-parallel-size", _positive) > 1:
        warnings.append(f"--ds-sequence-parallel-size {num('ds-sequence-parallel-size')}: Megatron-DeepSpeed's "
                        f"DeepSpeed-Ulysses is modelled for engine 'deepspeed' only (--ulysses N, ds_config "
                        f"sequence_parallel_size); ignored, so data parallel here counts those ranks too")

    other = sorted(f for f in flags if f not in _KNOWN)
    if other:
        opts["other_flags"] = other
    # an argument list is what a shell has already expanded: a "$NAME" left in it is a literal value
    unset = [] if isinstance(command, (list, tuple)) else list(dict.fromkeys(t for t in tokens
                                                                           if _UNSET_VARIABLE.match(t)))
    if unset:
        warnings.append(f"shell variables not set in the script: {' '.join(unset[:6])} (flags they hold are not "
                        f"read; a value stays as written)")
    stray = [t for t in stray if not _UNSET_VARIABLE.match(t)]
    if stray:
        warnings.append(f"ignored tokens that are not flags: {' '.join(stray[:6])}")
    if world_size is not None and launched is None:
        plan["world_size"] = world_size
    positions = num("max-position-embeddings", _sized("max_position_embeddings"))
    if positions is not None and positions != m.get("seq_length"):  # a position table other than the sequence
        m["max_position_embeddings"] = positions
    imported = Imported(kind=kind, model_fields=m, plan_fields=plan, options=opts, warnings=warnings)
    lint = lint_megatron_fields(m, plan)
    if not any(f.severity == "error" for f in lint):
        lint += lint_megatron_specs(imported)
    if _has_model(m) and _world(imported) is None:
        warnings.append("no world size (the launcher gives no --nproc_per_node with --nnodes, and none was "
                        "passed): the parallel layout is not checked; pass --world-size N (world_size=N)")
    return dataclasses.replace(imported, lint=lint)


_UNSET_VARIABLE = re.compile(r"^\$(\{[A-Za-z_]\w*(\[[@*]\])?\}|[A-Za-z_]\w*)$")
"""A whole word that is a shell variable :func:`_shell_tokens` could not expand (not set in the script)."""

_MODEL_SIZES = ("num_layers", "hidden_size", "num_attention_heads")


def _has_model(model: dict) -> bool:
    """Whether imported model fields give the sizes a :class:`~workbench.specs.ModelSpec` needs."""
    return all(k in model for k in _MODEL_SIZES)


def _launched_world(opts: dict) -> Optional[int]:
    """The ranks a launcher starts (``--nproc_per_node`` × ``--nnodes``), ``None`` unless it gives both."""
    if opts.get("gpus_per_node") and opts.get("num_nodes"):
        return opts["gpus_per_node"] * opts["num_nodes"]
    return None


def _world(imported: Imported) -> Optional[int]:
    """The world size an imported command runs on: the plan's (``world_size``), else the launcher's."""
    return imported.plan_fields.get("world_size") or _launched_world(imported.options)


def _cluster_for(world: int, gpus_per_node: Optional[int]) -> ClusterSpec:
    """A cluster of ``world`` GPUs of ``workbench estimate``'s default kind, in nodes of the launcher's
    ``gpus_per_node`` when it divides the world, else of 8, 4, 2 or 1."""
    from workbench import catalog
    from workbench.commands.common import DEFAULT_GPU

    per_node = next(g for g in (gpus_per_node or 1, 8, 4, 2, 1) if world % g == 0 and g <= MAX_COUNT["gpus_per_node"])
    return ClusterSpec(gpu=catalog.gpu(DEFAULT_GPU), gpus_per_node=per_node, num_nodes=world // per_node)


def lint_megatron_specs(imported: Imported) -> list:
    """What ``workbench estimate`` refuses in an imported command, as :class:`~workbench.configs.lint.LintFinding`
    errors: the model as :class:`~workbench.specs.ModelSpec` builds it (with ``--max-position-embeddings`` where it
    differs from the sequence, whose learned position table must hold it), then, when the world size is known (:func:`_world`), the plan as
    :meth:`Imported.to_specs` builds it and :func:`workbench.specs.validate` checks it on estimate's default GPU.
    The first refusal of each (path ``model`` or ``plan``); nothing when the command does not give the model's
    sizes."""
    from workbench.configs.lint import LintFinding
    from workbench.specs import validate

    if not _has_model(imported.model_fields):
        return []
    try:
        ModelSpec(**imported.model_fields)
    except ValueError as exc:
        return [LintFinding(path="model", severity="error", message=str(exc))]
    world = _world(imported)
    if world is None:
        return []
    try:
        cluster = _cluster_for(world, imported.options.get("gpus_per_node"))
        model, plan = imported.to_specs(cluster=cluster)
        validate(model, cluster, plan)
    except ValueError as exc:
        return [LintFinding(path="plan", severity="error", message=str(exc))]
    return []


def lint_megatron_fields(model: dict, plan: dict) -> list:
    """Errors Megatron-LM raises at start-up for a command's sizes, before the world size is known: its
    ``validate_args`` (``hidden_size`` divisible by the heads when ``--kv-channels`` is not given, the layers by the
    pipeline stages without an uneven split, the global batch by the micro batch) and ``TransformerConfig``
    (heads and query groups divisible by the tensor-parallel size). Each a
    :class:`~workbench.configs.lint.LintFinding` of severity ``error`` naming the flags and numbers."""
    from workbench.configs.lint import LintFinding

    out = []

    def need(path: str, ok: bool, message: str, suggestion: str = "") -> None:
        if not ok:
            out.append(LintFinding(path=path, severity="error", message=message, suggestion=suggestion))

    heads, hidden = model.get("num_attention_heads"), model.get("hidden_size")
    groups, layers = model.get("num_query_groups"), model.get("num_layers")
    tp, pp = plan.get("tensor_parallel", 1), plan.get("pipeline_parallel", 1)
    if heads and hidden and model.get("head_dim") is None:
        need("--hidden-size", hidden % heads == 0,
             f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads} (Megatron asserts it when "
             f"--kv-channels is not given)", "give --kv-channels, or heads that divide the hidden size")
    if heads and tp:
        need("--tensor-model-parallel-size", heads % tp == 0,
             f"--num-attention-heads {heads} is not divisible by --tensor-model-parallel-size {tp} (megatron-core's "
             f"TransformerConfig refuses it)")
    if groups and tp:
        need("--num-query-groups", groups % tp == 0,
             f"--num-query-groups {groups} is not divisible by --tensor-model-parallel-size {tp} (megatron-core's "
             f"TransformerConfig refuses it)")
    uneven = any(plan.get(k) for k in ("first_stage_layers", "last_stage_layers", "embedding_in_pipeline_split",
                                        "loss_in_pipeline_split"))
    if layers and pp and pp > 1 and not uneven:
        need("--pipeline-model-parallel-size", layers % pp == 0,
             f"--num-layers {layers} is not divisible by --pipeline-model-parallel-size {pp} (Megatron asserts it "
             f"without an uneven split)", "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers")
    mbs, gbs = plan.get("micro_batch_size"), plan.get("global_batch_size")
    if mbs and gbs:
        need("--global-batch-size", gbs % mbs == 0,
             f"--global-batch-size {gbs} is not divisible by --micro-batch-size {mbs}")
    return out


def import_any(text_or_path: Union[str, Path, dict], *, world_size: Optional[int] = None) -> Imported:
    """Import a ds_config (dict, JSON text or ``.json`` file) or a Megatron command line / launch script.

    A string is a file name only when it looks like one (see :func:`looks_like_text`; nothing is opened to decide),
    so a long quoted command line is read as a command. ``world_size`` goes to :func:`import_ds_config` for a
    ds_config (its data-parallel size) and to :func:`import_megatron_args` for a command (its number of GPUs). Bad
    input of any shape raises ``ValueError``."""
    if isinstance(text_or_path, dict):
        return import_ds_config(text_or_path, world_size=world_size)
    if isinstance(text_or_path, (list, tuple)):
        return import_megatron_args(list(text_or_path), world_size=world_size)
    if not isinstance(text_or_path, (str, Path)):
        raise ValueError(f"source={text_or_path!r:.80} must be a dict, a path or text (got "
                         f"{type(text_or_path).__name__})")
    if isinstance(text_or_path, Path) or not looks_like_text(text_or_path):
        return import_text(read_source(text_or_path, "source"), world_size=world_size)
    return import_text(text_or_path, world_size=world_size)


def import_text(text: str, *, world_size: Optional[int] = None) -> Imported:
    """Import config text: a ds_config (JSON/hjson object) or a Megatron command line / launch script."""
    if not isinstance(text, str):
        raise ValueError(f"text={text!r:.80} must be a string (got {type(text).__name__})")
    try:
        _refuse_other_formats(text)
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
        if body.lstrip().startswith("{"):
            return import_ds_config(text, world_size=world_size)
        try:
            kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number",
                    type(None): "null"}[type(json.loads(body))]
        except ValueError:  # not JSON: a command line or a script
            kind = None
        if kind is None:
            return import_megatron_args(text, world_size=world_size)
        raise ValueError(f"the source is a JSON {kind}, not a config: a ds_config is a JSON object ({{...}}), a "
                         f"Hugging Face config.json too; a Megatron source is a command line")
    except RecursionError:
        raise ValueError(f"the source is nested too deeply to read (more than {MAX_NESTING} levels)") from None
