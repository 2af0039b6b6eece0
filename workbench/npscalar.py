"""``np.where``, ``np.maximum`` and ``np.minimum`` with a fast path for one plan.

The memory and time models are written once, on columns that are numpy arrays (the planner: one element per
plan) or plain numbers (``estimate``: a batch of one). On plain numbers numpy's ufunc machinery costs about a
microsecond per call, most of a single estimate's time. These functions give numpy's own result — same value, same
dtype (a ``numpy.float64`` where numpy gives a 0-d float64 array) — and take a plain ``if`` when every argument is a
float or float-and-integer scalar; anything else (arrays, integer pairs, NaN in a max/min) goes to numpy itself.
"""
from __future__ import annotations

import numpy as np

_FLOAT = frozenset({float, np.float64})
_INT = frozenset({int, bool, np.int64, np.bool_})
_COND = _FLOAT | _INT


def _float_pair(a, b) -> bool:
    """Both scalars and at least one a float: numpy's result is float64 (integers convert exactly as numpy does)."""
    ta, tb = type(a), type(b)
    return (ta in _FLOAT and (tb in _FLOAT or tb in _INT)) or (tb in _FLOAT and ta in _INT)


def where(cond, a, b):
    """``np.where(cond, a, b)``; for a scalar condition and float scalars, ``a if cond else b`` as float64."""
    if type(cond) in _COND and _float_pair(a, b):
        return np.float64(a if cond else b)
    return np.where(cond, a, b)


def maximum(a, b):
    """``np.maximum(a, b)``; for float scalars (no NaN), the larger as float64 (numpy's scalar loop:
    ``a if a >= b else b``)."""
    if _float_pair(a, b) and a == a and b == b:
        return np.float64(a if a >= b else b)
    return np.maximum(a, b)


def minimum(a, b):
    """``np.minimum(a, b)``; for float scalars (no NaN), the smaller as float64 (``a if a <= b else b``)."""
    if _float_pair(a, b) and a == a and b == b:
        return np.float64(a if a <= b else b)
    return np.minimum(a, b)


def where_item(cond, a, b):
    """``np.where(cond, a, b)`` as a Python number for a scalar result (``.item()``), the array otherwise."""
    if type(cond) in _COND:
        ta, tb = type(a), type(b)
        if _float_pair(a, b):
            return float(a if cond else b)
        if ta in _INT and tb in _INT:
            pick = a if cond else b
            if not -2**63 <= pick < 2**63:
                return np.where(cond, a, b).item()
            if (ta is bool or ta is np.bool_) and (tb is bool or tb is np.bool_):
                return bool(pick)
            return int(pick)
    out = np.where(cond, a, b)
    return out.item() if np.ndim(out) == 0 else out
