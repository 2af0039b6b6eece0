"""Run megatron-core on the CPU: a small, explicit device adapter, applied only when CUDA is absent.

megatron-core allocates a few tensors on ``"cuda"`` unconditionally (no configuration flag avoids them):

* ``GlobalMemoryBuffer.get_tensor`` (attention workspace), ``device=torch.cuda.current_device()``
* the model-parallel RNG tracker (``model_parallel_cuda_manual_seed``, ``CudaRNGStatesTracker``, ``_set_cuda_rng_state``)
  which attention dropout forks
* ``torch.zeros(..., device="cuda")`` in the pipeline schedules and ``torch.cuda.current_device()`` /
  ``torch.cuda.synchronize()`` in p2p communication
* buffers of the DDP grad buffer, the optimizer wrappers and the tensor-parallel mappings
* ``inv_freq.to(device=torch.cuda.current_device())`` at the rotary embedding's first forward
* ``weight.data.cuda()`` on the tied embedding with pipeline parallel > 1 (``setup_embeddings_and_output_layer``)
* ``clip_grad_by_total_norm_fp32`` asserts ``param.grad.type() == 'torch.cuda.FloatTensor'``
* the mixed-precision and distributed optimizers dispatch on ``param.type()`` strings ``'torch.cuda.*Tensor'``

What the adapter changes (and nothing else):

1. In each module of :data:`PATCHED_MODULES` the module-global name ``torch`` is rebound to :class:`_CpuTorch`, a
   view of ``torch`` whose tensor factories map a CUDA device (``"cuda"``, an int) to ``"cpu"`` and whose ``cuda``
   namespace answers ``current_device/synchronize/get_rng_state/manual_seed/...`` with CPU equivalents.
2. ``random._get_cuda_rng_state`` / ``random._set_cuda_rng_state`` read and set the CPU generator's state.
3. ``LanguageModule.setup_embeddings_and_output_layer`` runs with ``Tensor.cuda`` as the identity.
4. ``clip_grad_by_total_norm_fp32`` (as imported by ``optimizer.optimizer``) is replaced by a CPU version.
5. Constructors of ``Float16OptimizerWithFloat16Params`` and ``DistributedOptimizer`` run with ``Tensor.type()``
   reporting CPU tensors (and meta tensors, for an allocation trace) by their CUDA type names, so their dtype
   dispatch takes the same branches as on a GPU.

Checked against megatron-core 0.16.1 (run) and 0.19.2 (sources read): every patched attribute exists in both.
Other versions raise ``RuntimeError`` naming the version, unless ``WORKBENCH_CPU_ADAPTER_ANY_VERSION=1``.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import types

SUPPORTED_VERSIONS = ("0.16", "0.19")
"""megatron-core ``major.minor`` versions whose sources this adapter was checked against."""

PATCHED_MODULES = (
    "megatron.core.utils",
    "megatron.core.tensor_parallel.random",
    "megatron.core.tensor_parallel.layers",
    "megatron.core.tensor_parallel.mappings",
    "megatron.core.tensor_parallel.cross_entropy",
    "megatron.core.pipeline_parallel.schedules",
    "megatron.core.pipeline_parallel.p2p_communication",
    "megatron.core.models.common.language_module.language_module",
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.dot_product_attention",
    "megatron.core.transformer.module",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.distributed.distributed_data_parallel",
    "megatron.core.distributed.finalize_model_grads",
    "megatron.core.optimizer.optimizer",
    "megatron.core.optimizer.distrib_optimizer",
    "megatron.core.optimizer.clip_grads",
)
"""Modules whose global ``torch`` is rebound to the CPU view."""

_applied = False
_target = ["cpu"]
"""Where CUDA-device requests go: ``"cpu"``, or ``"meta"`` inside :func:`meta_device` (an allocation trace)."""


def _to_cpu_device(device):
    if device is None:
        return None
    if isinstance(device, int):
        return _target[0]
    text = str(device)
    return _target[0] if text.startswith("cuda") else device


@contextlib.contextmanager
def meta_device():
    """Inside it, the patched modules' CUDA-device requests (factories and ``torch.cuda.current_device()``) go to
    the ``meta`` device instead of the CPU: megatron-core's own workspaces (the attention scores' global buffer, the
    rotary frequencies) then live beside a model built on the meta device (:mod:`workbench.allocsim`)."""
    _target[0] = "meta"
    try:
        yield
    finally:
        _target[0] = "cpu"


class _CpuCuda:
    """Stands in for ``torch.cuda`` inside the patched modules."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def current_device():
        return _target[0]

    @staticmethod
    def device_count():
        return 0

    @staticmethod
    def synchronize(*_args, **_kwargs):
        return None

    @staticmethod
    def empty_cache():
        return None

    @staticmethod
    def get_rng_state(*_args, **_kwargs):
        import torch

        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *_args, **_kwargs):
        import torch

        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed):
        import torch

        torch.manual_seed(seed)

    @staticmethod
    def nvtx_range_push(*_a, **_k):
        return None

    @staticmethod
    def nvtx_range_pop(*_a, **_k):
        return None


_FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "arange", "rand", "randn", "randint", "zeros_like",
              "ones_like", "empty_like", "full_like", "as_tensor")


class _CpuTorch(types.ModuleType):
    """A view of the ``torch`` module whose factories put CUDA-device requests on the CPU."""

    def __init__(self, real):
        super().__init__("torch")
        self._real = real
        self.cuda = _CpuCuda(real.cuda)
        for name in _FACTORIES:
            setattr(self, name, self._wrap(getattr(real, name)))

    @staticmethod
    def _wrap(fn):
        @functools.wraps(fn)
        def factory(*args, **kwargs):
            if "device" in kwargs:
                kwargs["device"] = _to_cpu_device(kwargs["device"])
            return fn(*args, **kwargs)

        return factory

    def __getattr__(self, name):
        return getattr(self._real, name)


def _clip_grad_by_total_norm_cpu(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """Scale gradients by ``max_norm / (total_norm + 1e-6)`` when that is below 1 (megatron's rule)."""
    import torch

    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    attr = "decoupled_grad" if use_decoupled_grad else "grad"
    grads = [getattr(p, attr) for p in parameters if getattr(p, attr, None) is not None]
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0 and grads:
        torch._foreach_mul_(grads, clip_coeff)


_CUDA_TYPE_NAMES = {f"torch{device}.{name}": f"torch.cuda.{name}" for device in ("", ".meta")
                    for name in ("FloatTensor", "HalfTensor", "BFloat16Tensor")}
"""CPU tensors' and meta tensors' (an allocation trace, :func:`meta_device`) type names -> their CUDA names."""


@contextlib.contextmanager
def _cuda_type_names():
    """``Tensor.type()`` (no arguments) reports CPU and meta float tensors under their CUDA names."""
    import torch

    real_type = torch.Tensor.type

    def type_(self, *args, **kwargs):
        out = real_type(self, *args, **kwargs)
        if not args and not kwargs:
            return _CUDA_TYPE_NAMES.get(out, out)
        return out

    torch.Tensor.type = type_
    try:
        yield
    finally:
        torch.Tensor.type = real_type


@contextlib.contextmanager
def _tensor_cuda_is_identity():
    import torch

    real_cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = real_cuda


def _wrap_method(cls, name, context):
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        with context():
            return original(*args, **kwargs)

    wrapped.__workbench_cpu_adapter__ = True
    setattr(cls, name, wrapped)


def megatron_version() -> str:
    from importlib.metadata import version

    return version("megatron-core")


def check_version(version: str) -> None:
    major_minor = ".".join(version.split(".")[:2])
    if major_minor not in SUPPORTED_VERSIONS and os.environ.get("WORKBENCH_CPU_ADAPTER_ANY_VERSION") != "1":
        raise RuntimeError(
            f"megatron-core {version} is not a version the CPU adapter was checked against "
            f"({', '.join(v + '.x' for v in SUPPORTED_VERSIONS)}); set WORKBENCH_CPU_ADAPTER_ANY_VERSION=1 to try")


def needed() -> bool:
    import torch

    return not torch.cuda.is_available()


def apply() -> bool:
    """Apply the adapter when CUDA is absent (idempotent). Returns True when it is active."""
    global _applied
    if _applied:
        return True
    if not needed():
        return False
    check_version(megatron_version())
    import torch

    missing = []
    modules = {}
    for name in PATCHED_MODULES:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    random = modules.get("megatron.core.tensor_parallel.random")
    lm = modules.get("megatron.core.models.common.language_module.language_module")
    opt = modules.get("megatron.core.optimizer.optimizer")
    dopt = modules.get("megatron.core.optimizer.distrib_optimizer")
    for mod, attr in ((random, "_get_cuda_rng_state"), (random, "_set_cuda_rng_state"), (lm, "LanguageModule"), (opt, "clip_grad_by_total_norm_fp32"),
                      (opt, "Float16OptimizerWithFloat16Params"), (dopt, "DistributedOptimizer")):
        if mod is None or not hasattr(mod, attr):
            missing.append(f"{getattr(mod, '__name__', '?')}.{attr}")
    if missing:
        raise RuntimeError("CPU adapter: megatron-core " + megatron_version() + " lacks " + ", ".join(missing))

    view = _CpuTorch(torch)
    for mod in modules.values():
        if getattr(mod, "torch", None) is torch:
            mod.torch = view
    random._get_cuda_rng_state = lambda *_a, **_k: torch.get_rng_state()
    random._set_cuda_rng_state = lambda new_state, *_a, **_k: torch.set_rng_state(new_state)
    _wrap_method(lm.LanguageModule, "setup_embeddings_and_output_layer", _tensor_cuda_is_identity)
    opt.clip_grad_by_total_norm_fp32 = _clip_grad_by_total_norm_cpu
    _wrap_method(opt.Float16OptimizerWithFloat16Params, "__init__", _cuda_type_names)
    _wrap_method(dopt.DistributedOptimizer, "__init__", _cuda_type_names)
    _applied = True
    return True
