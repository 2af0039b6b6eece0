"""Live tensor storage of PyTorch operators, as a memory allocator sees it: one ``TorchDispatchMode`` that notes each
new storage an ATen operator returns and its release.

Autograd, checkpointing and views make "what is alive" hard to read off a model's code; at the dispatcher every
operator's outputs pass by, and a storage (not a tensor: views share one) is freed when its last reference goes, which
a weak-reference finalizer on the storage reports. :func:`live_storage` is what the workbench's traces share: the
allocator replay's allocation trace on the meta device (:mod:`workbench.allocsim`), the CPU counts of what a layer
keeps for backward (``benchmarks/trace_activations_cpu.py``, ``benchmarks/hf_lora_saved_tensors_cpu.py``,
``tests/test_hf.py``).

torch is imported inside the function: ``workbench`` imports without it.
"""
from __future__ import annotations

import weakref


def live_storage(*, skip=(), device=None, on_alloc=None, on_free=None, after_op=None, after_call=None,
                 fake_scalars=False):
    """A ``TorchDispatchMode`` (use it as a context manager) with ``live`` (storage key → bytes) and ``current``
    (their sum) kept up to date through every ATen operator run inside it.

    A storage is keyed by its data pointer, or on the meta device (no data) by its ``StorageImpl``'s address; empty
    storages and the keys in ``skip`` (e.g. the model's parameters and buffers) are left out. ``device``: only
    tensors of that device type (``"meta"``, ``"cpu"``); ``None``: any. Callbacks: ``on_alloc(key, nbytes, func,
    tensor)`` for a new storage, ``on_free(key, nbytes)`` at its release, ``after_op(mode, func)`` after each
    operator (the live set then includes its outputs), ``after_call(func, args, kwargs, out)`` after each operator
    with what it was called with and returned. ``fake_scalars``: answer ``Tensor.item()`` (data-dependent,
    impossible on meta tensors) with True / 1 instead of failing."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class LiveStorage(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict = {}
            self.current = 0

        def _freed(self, key):
            nbytes = self.live.pop(key, 0)
            self.current -= nbytes
            if on_free is not None:
                on_free(key, nbytes)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if fake_scalars and func is torch.ops.aten._local_scalar_dense.default:
                return True if args[0].dtype == torch.bool else 1
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor) or (device is not None and t.device.type != device):
                    continue
                st = t.untyped_storage()
                key = st._cdata if t.device.type == "meta" else st.data_ptr()
                nbytes = st.nbytes()
                if key in self.live or key in skip or nbytes == 0:
                    continue
                self.live[key] = nbytes
                self.current += nbytes
                if on_alloc is not None:
                    on_alloc(key, nbytes, func, t)
                weakref.finalize(st, self._freed, key)
            if after_op is not None:
                after_op(self, func)
            if after_call is not None:
                after_call(func, args, kwargs or {}, out)
            return out

    return LiveStorage()


def storage_keys(tensors) -> set:
    """The :func:`live_storage` keys of ``tensors``' storages (e.g. a model's parameters and buffers, to skip)."""
    return {t.untyped_storage()._cdata if t.device.type == "meta" else t.untyped_storage().data_ptr()
            for t in tensors}
