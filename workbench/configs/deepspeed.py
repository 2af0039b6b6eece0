"""DeepSpeed ``ds_config.json`` export and validation.

:func:`build_ds_config` turns (model, cluster, plan) into a complete, runnable DeepSpeed config; :func:`validate_ds_config`
checks it with DeepSpeed's own ``DeepSpeedConfig`` under the plan's data-parallel world size, without starting
``torch.distributed``, and then with :func:`workbench.configs.lint.lint_ds_config`.

Batch arithmetic (DeepSpeed ``runtime/config.py`` ``_batch_assertion``)::

    train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp

where ``dp`` is the world size DeepSpeed sees: the whole job for plain ZeRO, and the data-parallel group when a model
parallel unit (``mpu``) is passed, as Megatron-DeepSpeed and DeepSpeed's pipeline engine do. Both equal
``plan.data_parallel``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Optional

from workbench.defaults import (DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS, DEEPSPEED_PERSISTENCE_THRESHOLD,
                                DEEPSPEED_PREFETCH_BUCKET_ELEMENTS, DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
                                DEEPSPEED_SUB_GROUP_ELEMENTS)
from workbench.specs import (AdamImpl, ClusterSpec, Engine, Implementation, ModelSpec, Offload, ParallelPlan,
                             Precision, Recompute, ZERO_SIZE_STAGES, ZeroStage, hf_checkpoint_every, validate)

#: Models at or above this many parameters get the tighter clipping default (the DeepSpeed-vs-Megatron
#: practitioner's guide §5.3: "for models of 13B parameters and up (13B以上), max_norm between 0.5 and 1.0 gives
#: better stability"; we take the lower end). The threshold is 12e9 so that
#: "13B-class" models count: the guide's own 13B example (40 x 5120, GPT-3 vocabulary) has 12.85e9 parameters.
LARGE_MODEL_PARAMETERS = 12e9


@dataclass(frozen=True, kw_only=True, slots=True)
class DeepSpeedOptions:
    """Training hyper-parameters and DeepSpeed tunables written into exported configs (DeepSpeed and Megatron).

    Defaults follow the 13B example of the DeepSpeed-vs-Megatron practitioner's guide (lr 6e-5 → 6e-6 cosine,
    weight decay 0.01, Adam betas 0.9/0.95,
    100,000 iterations, fp16 loss-scale window 1000, ZeRO buckets 5e8) unless noted.
    """

    lr: float = 6e-5
    """Peak learning rate (guide §3: ``lr 6e-5``)."""
    min_lr: Optional[float] = None
    """Final learning rate of the cosine decay; ``None`` means lr / 10 (guide §3: ``--min-lr 6e-6``)."""
    betas: tuple = (0.9, 0.95)
    """Adam β1, β2 (guide §3 and §5.3: ``--adam-beta1 0.9 --adam-beta2 0.95``)."""
    eps: float = 1e-8
    """Adam ε (PyTorch and DeepSpeed default)."""
    weight_decay: float = 0.01
    """Decoupled weight decay (guide §3: ``weight_decay 0.01``)."""
    clip: Optional[float] = None
    """Gradient-norm clipping; ``None`` means 1.0, or 0.5 for 13B-class models (>= 12e9 parameters, guide §5.3)."""
    train_iters: int = 100_000
    """Optimizer steps (guide §3: ``--train-iters 100000``)."""
    warmup_iters: Optional[int] = None
    """Learning-rate warm-up steps; ``None`` means 1% of train_iters."""
    reduce_bucket_size: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    """ZeRO gradient reduce bucket, elements (guide §3/§4: ``5e8``) where the plan sets none
    (:attr:`workbench.specs.ParallelPlan.reduce_bucket_size`, which the models price, wins)."""
    allgather_bucket_size: int = DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS
    """ZeRO-1/2 parameter all-gather bucket, elements (guide §3/§4: ``5e8``). Overlap of the gradient reduction is
    the plan's (:attr:`workbench.specs.ParallelPlan.overlap_comm`), so the model prices what the config runs."""
    contiguous_gradients: bool = True
    """Copy gradients into one contiguous buffer as they are produced (avoids fragmentation)."""
    stage3_prefetch_bucket_size: int = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS
    """ZeRO-3 parameter prefetch, elements (DeepSpeed default 5e7) where the plan sets none
    (:attr:`workbench.specs.ParallelPlan.prefetch_bucket_size` wins)."""
    stage3_param_persistence_threshold: int = DEEPSPEED_PERSISTENCE_THRESHOLD
    """ZeRO-3: parameters of at most this many elements stay unpartitioned (DeepSpeed default 1e5) where the plan sets
    none (:attr:`workbench.specs.ParallelPlan.param_persistence_threshold` wins)."""
    stage3_max_live_parameters: int = 1_000_000_000
    """ZeRO-3: parameters kept gathered at once, elements (DeepSpeed default 1e9)."""
    stage3_max_reuse_distance: int = 1_000_000_000
    """ZeRO-3: keep a gathered parameter if it is reused within this many elements (DeepSpeed default 1e9)."""
    sub_group_size: int = DEEPSPEED_SUB_GROUP_ELEMENTS
    """ZeRO-3 optimizer step granularity, elements (DeepSpeed default 1e9) where the plan sets none
    (:attr:`workbench.specs.ParallelPlan.sub_group_size` wins)."""
    param_buffer_size: Optional[int] = None
    """ZeRO-3 ``offload_param.buffer_size`` with the parameters on NVMe, elements: each of the parameter swapper's
    buffers, which must hold the largest parameter partition (DeepSpeed refuses the run at start-up otherwise).
    ``None``: the export writes what the plan needs (:func:`workbench.memory.nvme_param_buffer_elements`); import
    keeps a config's own, which the advisor checks."""
    nvme_path: str = "/local_nvme"
    """ZeRO-Infinity swap folder on a local NVMe drive (used only with offload to nvme; set it to your mount)."""
    loss_scale_window: int = 1000
    """fp16 dynamic loss scaling: steps without overflow before the scale doubles (guide §3: ``1000``)."""
    initial_scale_power: int = 16
    """fp16: the first loss scale is 2**initial_scale_power (DeepSpeed default)."""
    hysteresis: int = 2
    """fp16: overflows tolerated before the scale is lowered (DeepSpeed default)."""
    min_loss_scale: float = 1.0
    """fp16: lower bound of the dynamic loss scale (DeepSpeed default)."""
    cpu_checkpointing: bool = False
    """Activation checkpointing: keep checkpoints in host memory."""
    steps_per_print: int = 10
    """DeepSpeed progress print interval (steps)."""
    wall_clock_breakdown: bool = False
    """DeepSpeed per-phase timers (forward, backward, step)."""
    seed: int = 1234
    """Random seed (Megatron ``--seed``)."""

    def __post_init__(self) -> None:
        from workbench.specs import check_bool, check_float, check_int, check_str

        def put(name, value):
            object.__setattr__(self, name, value)

        if not isinstance(self.betas, (list, tuple)) or len(self.betas) != 2:
            raise ValueError(f"betas={self.betas!r} must be two numbers in [0, 1)")
        put("betas", tuple(check_float(f"betas[{i}]", b, strict=False, below=1.0) for i, b in enumerate(self.betas)))
        for name in ("lr", "eps"):
            put(name, check_float(name, getattr(self, name), maximum=1e6))
        put("weight_decay", check_float("weight_decay", self.weight_decay, strict=False, maximum=1e6))
        put("min_loss_scale", check_float("min_loss_scale", self.min_loss_scale, maximum=1e38))
        for name in ("clip", "min_lr"):
            if getattr(self, name) is not None:
                put(name, check_float(name, getattr(self, name), strict=False, maximum=1e6))
        for name in ("train_iters", "reduce_bucket_size", "loss_scale_window", "steps_per_print",
                     "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
                     "stage3_max_reuse_distance"):
            put(name, check_int(name, getattr(self, name), maximum=2**62))
        for name in ("stage3_param_persistence_threshold", "sub_group_size", "hysteresis", "seed"):
            put(name, check_int(name, getattr(self, name), minimum=0, maximum=2**62))
        put("initial_scale_power", check_int("initial_scale_power", self.initial_scale_power, minimum=0, maximum=127))
        if self.warmup_iters is not None:
            put("warmup_iters", check_int("warmup_iters", self.warmup_iters, maximum=2**62))
        for name in ("contiguous_gradients", "cpu_checkpointing", "wall_clock_breakdown"):
            put(name, check_bool(name, getattr(self, name)))
        if self.param_buffer_size is not None:
            put("param_buffer_size", check_int("param_buffer_size", self.param_buffer_size, maximum=2**62))
        check_str("nvme_path", self.nvme_path)
        if not self.nvme_path.strip():
            raise ValueError(f"nvme_path={self.nvme_path!r} must name a folder: the mount of the node's local NVMe")
        if self.warmup_iters is not None and not 0 < self.warmup_iters <= self.train_iters:
            raise ValueError(f"warmup_iters={self.warmup_iters} must be in 1..train_iters={self.train_iters}")
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"min_lr={self.min_lr} must be in 0..lr={self.lr}")

    # -- resolved values ------------------------------------------------------------------------------------------
    @property
    def final_lr(self) -> float:
        return self.lr / 10 if self.min_lr is None else self.min_lr

    @property
    def warmup_steps(self) -> int:
        return max(1, self.train_iters // 100) if self.warmup_iters is None else self.warmup_iters

    def clipping_for(self, model: ModelSpec, num_parameters: Optional[int] = None) -> float:
        """Gradient clipping for ``model``: the explicit ``clip``, else 1.0, or 0.5 for 13B-class models (>= 12e9).
        ``num_parameters``: the model's count when the caller has it."""
        if self.clip is not None:
            return float(self.clip)
        n = model.num_parameters if num_parameters is None else num_parameters
        return 0.5 if n >= LARGE_MODEL_PARAMETERS else 1.0

    @classmethod
    def field_names(cls) -> tuple:
        return tuple(f.name for f in fields(cls))


PAGEABLE_OFFLOAD_MEASURED = dict(
    twins={"TinyLlama 1.1B ZeRO-2, optimizer on the CPU": (0.226, 0.539),
           "SOLAR 10.7B at 10 layers ZeRO-3, optimizer and parameters on the CPU": (1.626, 3.426)},
    gpu="H100", date="2026-12-05", source="benchmarks/corpus/h100_runs.jsonl (corpus batch fit13)")
"""Steady step seconds (page-locked, pageable) of two DeepSpeed CPU-offload plans measured with ``"pin_memory"`` on
and off, one after the other on one H100 80GB host, through transformers (corpus batch fit13). The time model
prices the pageable copies at ``pageable_copy_gb_per_s`` (``efficiency.json``, fitted on that batch)."""


def pageable_offload_cost() -> str:
    """What ``"pin_memory": false`` cost measured runs, in words (:data:`PAGEABLE_OFFLOAD_MEASURED`)."""
    from workbench.timing import calibration

    ratios = [off / on for on, off in PAGEABLE_OFFLOAD_MEASURED["twins"].values()]
    rate = calibration()["cpu_adam"].get("pageable_copy_gb_per_s")
    return (f"measured steps took {min(ratios):.1f}-{max(ratios):.1f}x those of the same plans with page-locked "
            f"buffers (one {PAGEABLE_OFFLOAD_MEASURED['gpu']} host, {len(ratios)} plans)"
            + (f"; the step-time estimate prices these copies at {rate:g} GB/s" if rate else ""))


def _ds_engine_check(plan: ParallelPlan) -> None:
    if plan.engine is Engine.MEGATRON:
        raise ValueError("engine='megatron' does not use DeepSpeed; export it with megatron_args(), or use "
                         "engine='deepspeed' or 'megatron-deepspeed'")


def nvme_param_buffer_size(model: ModelSpec, plan: ParallelPlan, options: Optional[DeepSpeedOptions] = None) -> int:
    """``offload_param.buffer_size`` for a plan with the parameters on NVMe: the options' own, else what the plan
    needs (:func:`workbench.memory.nvme_param_buffer_elements`: DeepSpeed's 1e8, or the largest parameter partition
    where that is larger)."""
    from workbench.memory import nvme_param_buffer_elements

    own = (options or DeepSpeedOptions()).param_buffer_size
    if own is not None:
        return int(own)
    return int(nvme_param_buffer_elements(model, plan.tensor_parallel, plan.data_parallel * plan.context_parallel))


def _offload_section(device: Offload, options: DeepSpeedOptions, pin_memory: bool) -> dict:
    section = {"device": str(device), "pin_memory": pin_memory}
    if device is Offload.NVME:
        section["nvme_path"] = options.nvme_path
    return section


def build_ds_config(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                    options: Optional[DeepSpeedOptions] = None) -> dict:
    """A complete DeepSpeed config for the plan (engines ``deepspeed`` and ``megatron-deepspeed``).

    The batch fields satisfy DeepSpeed's identity with ``dp = plan.data_parallel`` (for the hybrid DeepSpeed gets the
    data-parallel size from Megatron's ``mpu``). Activation checkpointing is written when ``plan.recompute`` is not
    ``none``; DeepSpeed applies it only where the model code calls ``deepspeed.checkpointing.checkpoint``
    (Megatron-DeepSpeed does with ``--deepspeed-activation-checkpointing``).
    """
    validate(model, cluster, plan)
    _ds_engine_check(plan)
    o = options or DeepSpeedOptions()
    stage = int(plan.zero_stage)
    cfg: dict = {
        # train_batch_size = micro * accumulation * data_parallel
        "train_batch_size": plan.global_batch_size,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.gradient_accumulation_steps,
        "steps_per_print": o.steps_per_print,
        "wall_clock_breakdown": o.wall_clock_breakdown,
        "gradient_clipping": o.clipping_for(model),
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": o.lr, "betas": list(o.betas), "eps": o.eps, "weight_decay": o.weight_decay},
        },
        "scheduler": {
            # Linear warm-up then cosine decay to final_lr, as Megatron's --lr-decay-style cosine.
            "type": "WarmupCosineLR",
            "params": {"total_num_steps": o.train_iters, "warmup_num_steps": o.warmup_steps,
                       "warmup_min_ratio": 0.0, "cos_min_ratio": o.final_lr / o.lr, "warmup_type": "linear"},
        },
    }
    if plan.adam is AdamImpl.TORCH and plan.offload_optimizer is Offload.NONE:
        cfg["optimizer"]["params"]["torch_adam"] = True  # torch.optim.AdamW instead of DeepSpeed's FusedAdam op
    if plan.precision is Precision.FP16:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": o.loss_scale_window,
                       "initial_scale_power": o.initial_scale_power, "hysteresis": o.hysteresis,
                       "min_loss_scale": o.min_loss_scale}
    elif plan.precision is Precision.BF16:
        cfg["bf16"] = {"enabled": True}
    zero: dict = {"stage": stage}
    if stage >= ZeroStage.OPTIMIZER:
        zero.update({
            # DeepSpeed turns overlap_comm off under pipeline parallelism ("Pipeline parallelism does not support
            # overlapped communication, will be disabled", engine._configure_zero_optimizer): write what runs
            "overlap_comm": plan.overlaps_comm and plan.pipeline_parallel == 1,
            "contiguous_gradients": o.contiguous_gradients,
            "reduce_scatter": True,
            "reduce_bucket_size": int(_plan_or(plan.reduce_bucket_size, o.reduce_bucket_size)),
        })
        if stage < ZeroStage.PARAMETERS:
            zero.update({"allgather_partitions": True, "allgather_bucket_size": int(o.allgather_bucket_size)})
        else:
            zero.update({
                "stage3_prefetch_bucket_size": int(_plan_or(plan.prefetch_bucket_size, o.stage3_prefetch_bucket_size)),
                "stage3_param_persistence_threshold": int(_plan_or(plan.param_persistence_threshold,
                                                                   o.stage3_param_persistence_threshold)),
                "stage3_max_live_parameters": int(o.stage3_max_live_parameters),
                "stage3_max_reuse_distance": int(o.stage3_max_reuse_distance),
                "stage3_gather_16bit_weights_on_model_save": True,
                "sub_group_size": int(_plan_or(plan.sub_group_size, o.sub_group_size)),
            })
        if plan.offload_optimizer is not Offload.NONE:
            zero["offload_optimizer"] = _offload_section(plan.offload_optimizer, o, plan.pin_memory)
        if plan.offload_params is not Offload.NONE:
            zero["offload_param"] = _offload_section(plan.offload_params, o, plan.pin_memory)
            if plan.offload_params is Offload.NVME:  # each swap buffer holds the largest parameter partition
                zero["offload_param"]["buffer_size"] = nvme_param_buffer_size(model, plan, o)
    cfg["zero_optimization"] = zero
    if plan.is_ulysses:
        # DeepSpeed-Ulysses: the groups come from the model code's mpu (ulysses_snippet); DeepSpeedConfig reads the
        # key on its no-mpu path (zero.Init before deepspeed.initialize) to count data-parallel ranks
        cfg["sequence_parallel_size"] = plan.ulysses
    # a transformers model checkpoints through torch.utils.checkpoint (activation_checkpointing_enable, set on the
    # model: hf_checkpointing_line), never through DeepSpeed's activation checkpointing API that this section drives
    if plan.recompute is not Recompute.NONE and model.implementation is not Implementation.TRANSFORMERS:
        layers_per_stage = model.num_layers // plan.pipeline_parallel
        cfg["activation_checkpointing"] = {
            # Splitting the checkpoints over the TP group only helps with tensor parallelism.
            "partition_activations": plan.tensor_parallel > 1,
            "contiguous_memory_optimization": True,
            "number_checkpoints": plan.recompute_layers or layers_per_stage,
            "cpu_checkpointing": o.cpu_checkpointing,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    return cfg


class _DataParallelUnit:
    """The one ``mpu`` method ``DeepSpeedConfig`` asks for: the data-parallel world size."""

    def __init__(self, size: int) -> None:
        self._size = size

    def get_data_parallel_world_size(self) -> int:
        return self._size


def _find_auto(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _find_auto(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, str) and obj == "auto":
        yield path


def deepspeed_version() -> str:
    from importlib.metadata import version

    return version("deepspeed")


def check_with_deepspeed(config: dict, data_parallel_size: int):
    """Run DeepSpeed's own ``DeepSpeedConfig`` on ``config`` with the given data-parallel world size.

    ``DeepSpeedConfig.__init__`` (deepspeed 0.19.8 ``runtime/config.py``) calls ``dist.get_rank()`` first — which
    asserts when ``torch.distributed`` is not initialised and makes it fall back to world size 1 — and then asks the
    documented ``mpu`` argument for ``get_data_parallel_world_size()``. We pass such an ``mpu`` and answer
    ``get_rank`` with 0 for the duration of the call only. Returns the ``DeepSpeedConfig``; raises ``ValueError``
    with DeepSpeed's message.
    """
    from unittest import mock

    import deepspeed.runtime.config as ds_config_module

    if data_parallel_size < 1:
        raise ValueError(f"data-parallel world size={data_parallel_size} must be >= 1")
    autos = list(_find_auto(config))
    if autos:
        raise ValueError(f"config has unresolved 'auto' values at {', '.join(autos)}; resolve them "
                         f"(workbench import fills them from specs) before validating")
    try:
        with mock.patch.object(ds_config_module.dist, "get_rank", return_value=0):
            return ds_config_module.DeepSpeedConfig(copy.deepcopy(config), mpu=_DataParallelUnit(data_parallel_size))
    except Exception as exc:  # DeepSpeedConfigError, AssertionError, pydantic ValidationError, TypeError...
        msg = " ".join(str(exc).split()) or exc.__class__.__name__
        raise ValueError(f"DeepSpeed {deepspeed_version()} rejects the config: {msg}") from exc


def validate_ds_config(config: dict, world_size: int, *, model_parallel_size: int = 1) -> None:
    """Validate ``config`` as DeepSpeed would for a job of ``world_size`` GPUs, then lint it.

    ``model_parallel_size`` (tensor × pipeline × context parallel) divides the world size to give the
    data-parallel size DeepSpeed divides the batch by (1 for plain ZeRO data parallelism).
    Raises ``ValueError`` with DeepSpeed's message, or with the lint errors.
    """
    from workbench.configs.lint import lint_ds_config

    if world_size < 1 or model_parallel_size < 1 or world_size % model_parallel_size:
        raise ValueError(f"model_parallel_size={model_parallel_size} does not divide world_size={world_size}")
    dp = world_size // model_parallel_size
    check_with_deepspeed(config, dp)
    errors = [f for f in lint_ds_config(config, world_size=dp) if f.severity == "error"]
    if errors:
        raise ValueError("; ".join(f"{f.path}: {f.message}" for f in errors))


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face Trainer: a ds_config with "auto" values and the TrainingArguments that fill them
# ----------------------------------------------------------------------------------------------------------------
HF_TRAINER_AUTO_PATHS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                         "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas",
                         "optimizer.params.eps", "optimizer.params.weight_decay",
                         "scheduler.params.total_num_steps", "scheduler.params.warmup_num_steps",
                         "bf16.enabled", "fp16.enabled")
"""Keys :func:`hf_trainer_ds_config` writes as ``"auto"`` (where present): the ones transformers' Trainer fills
from ``TrainingArguments`` (``HfTrainerDeepSpeedConfig.trainer_config_process`` / ``trainer_config_finalize`` in
``transformers/integrations/deepspeed.py``). The ZeRO bucket sizes stay written out: their ``"auto"`` would become
hidden_size² elements, and the memory model prices the bucket the config names."""


def _set_path(cfg: dict, path: str, value) -> bool:
    *parents, leaf = path.split(".")
    node = cfg
    for key in parents:
        node = node.get(key)
        if not isinstance(node, dict):
            return False
    if leaf not in node:
        return False
    node[leaf] = value
    return True


def _get_path(cfg: dict, path: str):
    node = cfg
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def hf_checkpointing_line(model: ModelSpec, plan: ParallelPlan) -> str:
    """The call a training script makes on a transformers model for the plan's checkpointing ('' without it):
    ``activation_checkpointing_enable`` with every_n_layers where fewer than every layer are checkpointed."""
    if model.implementation is not Implementation.TRANSFORMERS or plan.recompute is not Recompute.FULL:
        return ""
    every = hf_checkpoint_every(model.num_layers, plan.recompute_layers, name=model.name)
    return ("model.activation_checkpointing_enable(activation_checkpointing_kwargs={'use_reentrant': False}"
            + (f", every_n_layers={every})  # transformers >= 5.24: decoder layers 0, {every}, {2 * every}, ..."
               if every > 1 else ")  # gradient_checkpointing_enable(gradient_checkpointing_kwargs=...) before "
                                  "transformers 5.24"))


def hf_training_arguments(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                          options: Optional[DeepSpeedOptions] = None) -> dict:
    """The ``transformers.TrainingArguments`` keywords that make the Trainer resolve :func:`hf_trainer_ds_config`'s
    ``"auto"`` values to this plan (batch, clipping, AdamW, warm-up and steps, precision, gradient checkpointing,
    seed). Pass them with ``deepspeed="ds_config.json"``; ``output_dir`` and logging are the user's. Names are
    transformers 5's (``activation_checkpointing``; 4.x calls it ``gradient_checkpointing``)."""
    o = options or DeepSpeedOptions()
    args = {"per_device_train_batch_size": plan.micro_batch_size,
            "gradient_accumulation_steps": plan.gradient_accumulation_steps,
            "learning_rate": o.lr, "adam_beta1": o.betas[0], "adam_beta2": o.betas[1], "adam_epsilon": o.eps,
            "weight_decay": o.weight_decay, "max_grad_norm": o.clipping_for(model),
            "max_steps": o.train_iters, "warmup_steps": o.warmup_steps,
            "bf16": plan.precision is Precision.BF16, "fp16": plan.precision is Precision.FP16,
            "activation_checkpointing": plan.recompute is Recompute.FULL, "seed": o.seed}
    if plan.recompute is Recompute.FULL:
        args["activation_checkpointing_kwargs"] = {"use_reentrant": False}
        every = hf_checkpoint_every(model.num_layers, plan.recompute_layers, name=model.name)
        if every > 1:  # the Trainer passes it to activation_checkpointing_enable (transformers >= 5.24)
            args["activation_checkpointing_kwargs"]["every_n_layers"] = every
    return args


def hf_trainer_ds_config(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                         options: Optional[DeepSpeedOptions] = None) -> dict:
    """:func:`build_ds_config` as a Hugging Face Trainer user writes it: ``"auto"`` at
    :data:`HF_TRAINER_AUTO_PATHS` (the Trainer fills them from :func:`hf_training_arguments`), everything else
    (ZeRO stage, buckets, offload, scheduler type and ratios, ``torch_adam``) as the plan says. No
    ``activation_checkpointing`` section: the Trainer checkpoints through ``gradient_checkpointing``."""
    cfg = build_ds_config(model, cluster, plan, options=options)
    cfg.pop("activation_checkpointing", None)
    for path in HF_TRAINER_AUTO_PATHS:
        _set_path(cfg, path, "auto")
    return cfg


def _plan_or(planned, option):
    """A DeepSpeed size the plan sets (the models price it), else the export option's."""
    return option if planned is None else planned


HF_AUTO_ZERO_SIZES = {"zero_optimization.reduce_bucket_size": "reduce_bucket_size",
                      "zero_optimization.stage3_prefetch_bucket_size": "prefetch_bucket_size",
                      "zero_optimization.stage3_param_persistence_threshold": "param_persistence_threshold"}
"""The ds_config sizes the Hugging Face Trainer (and accelerate) fill from the model's hidden size when they are
``"auto"``: path -> the :class:`~workbench.specs.ParallelPlan` field (:data:`workbench.specs.ZERO_SIZE_STAGES`: the
least ZeRO stage that reads it)."""

PLAN_ZERO_SIZES = {**HF_AUTO_ZERO_SIZES, "zero_optimization.sub_group_size": "sub_group_size"}
"""Every ds_config size the models price: path -> the :class:`~workbench.specs.ParallelPlan` field that import fills
(:data:`HF_AUTO_ZERO_SIZES` and ``sub_group_size``, which the Trainer leaves as written)."""


def hf_auto_zero_sizes(hidden_size: int, zero_stage: int) -> dict:
    """What ``"auto"`` becomes at each :data:`HF_AUTO_ZERO_SIZES` path that ZeRO-``zero_stage`` reads, as
    transformers' ``HfTrainerDeepSpeedConfig.trainer_config_finalize`` and accelerate's ``deepspeed_config_process``
    fill them from ``model.config.hidden_size`` h (transformers 5.x ``integrations/deepspeed.py``): h² for
    ``reduce_bucket_size``, int(0.9·h²) for ``stage3_prefetch_bucket_size``, 10·h for
    ``stage3_param_persistence_threshold``."""
    h = int(hidden_size)
    values = {"zero_optimization.reduce_bucket_size": h * h,
              "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * h * h),
              "zero_optimization.stage3_param_persistence_threshold": 10 * h}
    return {path: values[path] for path, name in HF_AUTO_ZERO_SIZES.items()
            if int(zero_stage) >= ZERO_SIZE_STAGES[name]}


def resolve_hf_auto(config: dict, training_args: dict, *, world_size: int, hidden_size: int) -> dict:
    """The config as transformers' Trainer resolves it (``HfTrainerDeepSpeedConfig``, transformers 5.x
    ``integrations/deepspeed.py``): each ``"auto"`` takes its ``TrainingArguments`` value (``train_batch_size`` =
    world size x micro-batch x accumulation, ``warmup_min_lr`` 0, ``warmup_max_lr`` the learning rate,
    ``total_num_steps`` ``max_steps``, ``warmup_num_steps`` max(1, ``warmup_steps``)); the hidden-size keys take
    hidden² (``reduce_bucket_size``), 0.9·hidden² and 10·hidden (ZeRO-3 prefetch and persistence). A value that is
    not ``"auto"`` must equal the argument's, as the Trainer demands: ``ValueError`` naming both otherwise.
    ``world_size``: the data-parallel processes."""
    a = training_args
    mbs, gas = a.get("per_device_train_batch_size", 8), a.get("gradient_accumulation_steps", 1)
    lr = a.get("learning_rate", 5e-5)
    values = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": gas,
              "train_batch_size": world_size * mbs * gas, "gradient_clipping": a.get("max_grad_norm", 1.0),
              "optimizer.params.lr": lr,
              "optimizer.params.betas": [a.get("adam_beta1", 0.9), a.get("adam_beta2", 0.999)],
              "optimizer.params.eps": a.get("adam_epsilon", 1e-8),
              "optimizer.params.weight_decay": a.get("weight_decay", 0.0),
              "scheduler.params.warmup_max_lr": lr, "fp16.enabled": bool(a.get("fp16")),
              "bf16.enabled": bool(a.get("bf16")), "scheduler.params.total_num_steps": a.get("max_steps"),
              "scheduler.params.warmup_num_steps": max(1, int(a.get("warmup_steps", 0) or 0))}
    fill_only = {"scheduler.params.warmup_min_lr": 0,
                 **hf_auto_zero_sizes(hidden_size, int(_get_path(config, "zero_optimization.stage") or 0))}
    out = copy.deepcopy(config)
    mismatches = []
    for path, value in {**values, **fill_only}.items():
        current = _get_path(out, path)
        if current == "auto":
            _set_path(out, path, value)
        elif current is not None and path in values and value is not None and current != value:
            mismatches.append(f"{path}={current!r} but TrainingArguments give {value!r}")
    if mismatches:
        raise ValueError("ds_config values differ from the TrainingArguments (the Trainer refuses them): "
                         + "; ".join(mismatches))
    left = list(_find_auto(out))
    if left:
        raise ValueError(f"ds_config 'auto' at {', '.join(left)}: the Trainer does not fill these")
    return out


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed-Ulysses: the attention wrapper and the groups live in the model code
# ----------------------------------------------------------------------------------------------------------------
def ulysses_snippet(model: ModelSpec, plan: ParallelPlan) -> str:
    """The model-code side of DeepSpeed-Ulysses (DeepSpeed 0.19.8) for ``plan.ulysses`` = N: the sequence-parallel
    groups (``deepspeed.runtime.sequence_parallel.parallel_state_sp``: N consecutive ranks each, ZeRO over all
    ranks), the attention wrapped in ``deepspeed.sequence.layer.DistributedAttention`` (all-to-all of Q, K, V before
    the local attention and of its output after; [batch, seq, heads, head_dim] tensors), the mpu handed to
    ``deepspeed.initialize``; for a Hugging Face model ``UlyssesSPAttentionHF.register_with_transformers`` and the
    data loader adapter that shards each batch's sequence. Python source text."""
    n, s, b = plan.ulysses, model.seq_length, plan.micro_batch_size
    head = (f"# DeepSpeed-Ulysses sequence parallel over {n} ranks ({model.num_attention_heads} heads, "
            f"{model.num_query_groups} K/V heads -> {model.num_attention_heads // n} and {model.num_query_groups // n} "
            f"per rank; {s // n} of {s} tokens per rank outside attention)\n"
            "import deepspeed\n")
    if model.implementation is Implementation.TRANSFORMERS:
        return head + (
            "from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF, UlyssesSPDataLoaderAdapter\n"
            "\n"
            "# before the model is built: registers attn_implementation='ulysses' and builds the groups\n"
            f"mpu = UlyssesSPAttentionHF.register_with_transformers(model_name_or_path=MODEL_PATH,\n"
            f"    core_attn_implementation='sdpa', sequence_parallel_size={n}, micro_batch_size={b},\n"
            f"    seq_length={s}, seq_length_is_variable=True)\n"
            "model = AutoModelForCausalLM.from_pretrained(MODEL_PATH, attn_implementation='ulysses')\n"
            "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),\n"
            "                                               config='ds_config.json', mpu=mpu)\n"
            "# each rank gets its 1/N slice of every batch's sequence (batches need position_ids)\n"
            "loader = UlyssesSPDataLoaderAdapter(loader, sp_rank=mpu.get_sequence_parallel_rank(),\n"
            "    sp_group=mpu.get_sequence_parallel_group(), sp_world_size=mpu.get_sequence_parallel_world_size(),\n"
            "    device=engine.device)\n"
            "# the loss of each rank's tokens is averaged over the sequence-parallel group\n")
    return head + (
        "import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu\n"
        "from deepspeed.sequence.layer import DistributedAttention\n"
        "\n"
        f"deepspeed.init_distributed()\n"
        f"mpu.initialize_sequence_parallel(sequence_parallel_size={n})\n"
        "\n"
        "# in each transformer layer: q, k, v of this rank's s/N tokens, [batch, seq, heads, head_dim]\n"
        "self.attention = DistributedAttention(local_attention, mpu.get_sequence_parallel_group(),\n"
        "                                      scatter_idx=2, gather_idx=1)\n"
        "out = self.attention(q, k, v, batch_dim_idx=0)  # back to [batch, s/N, heads, head_dim]\n"
        "\n"
        "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),\n"
        "                                               config='ds_config.json', mpu=mpu)\n"
        f"# feed each rank tokens [r*{s // n}, (r+1)*{s // n}) of every sequence, r = "
        "mpu.get_sequence_parallel_rank();\n"
        "# average the loss over mpu.get_sequence_parallel_group()\n")
