"""``np.where``, ``np.maximum``, ``np.minimum``, ``np.isin``, ``np.asarray``, ``np.any`` and ``np.ndim`` with a fast
path for one plan.

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
_BOOL = frozenset({bool, np.bool_})
_INTEGER = frozenset({int, np.int64})


def _float_pair(a, b) -> bool:
    """Both scalars and at least one a float: numpy's result is float64 (integers convert exactly as numpy does)."""
    ta, tb = type(a), type(b)
    return (ta in _FLOAT and (tb in _FLOAT or tb in _INT)) or (tb in _FLOAT and ta in _INT)


def _int64(value) -> bool:
    """A Python int numpy would hold in int64 (a numpy integer or bool always is)."""
    return type(value) is not int or -2**63 <= value < 2**63


def _int_pair(a, b) -> bool:
    """Two integers (no bool) numpy holds in int64: numpy's result is int64."""
    return type(a) in _INTEGER and type(b) in _INTEGER and _int64(a) and _int64(b)


def _fits(other, shape) -> bool:
    """``other`` is a number, or an array of ``shape`` with a dtype float64 holds: where a float64 array of that
    shape is picked, numpy's result is that array."""
    t = type(other)
    if t is np.ndarray:
        return other.shape == shape and other.dtype in _ARRAY_DTYPES
    return t in _FLOAT or (t in _INT and _int64(other))


_ARRAY_DTYPES = frozenset({np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)})


def where(cond, a, b):
    """``np.where(cond, a, b)``; for a scalar condition and scalar values, ``a if cond else b`` as numpy's dtype
    (float64; int64 for two integers; bool for two booleans); for a scalar condition picking a float64 array that
    the other side broadcasts into, a copy of that array."""
    ta, tb = type(a), type(b)
    if (ta is _F64 or ta is float) and (tb is _F64 or tb is float) and type(cond) in _COND:  # the common case first
        pick = a if cond else b
        return pick if type(pick) is _F64 else _F64(pick)
    if type(cond) in _COND:
        ka, kb = _KIND.get(ta, 0), _KIND.get(tb, 0)
        if ka and kb:
            if ka == 1 or kb == 1:
                pick = a if cond else b
                return pick if type(pick) is _F64 else _F64(pick)
            if _int64(a) and _int64(b):
                return np.bool_(a if cond else b) if ka == kb == 3 else np.int64(a if cond else b)
        else:
            pick, other = (a, b) if cond else (b, a)
            if type(pick) is np.ndarray and pick.dtype == np.float64 and _fits(other, pick.shape):
                return pick.copy()  # numpy's result: the picked float64 array, the other side broadcast into it
    return np.where(cond, a, b)


_F64 = np.float64
_KIND = {float: 1, np.float64: 1, int: 2, np.int64: 2, bool: 3, np.bool_: 3}
"""Scalar types the fast paths take: 1 float, 2 integer, 3 boolean."""


def maximum(a, b):
    """``np.maximum(a, b)``; for float scalars (no NaN), the larger as float64 (numpy's scalar loop:
    ``a if a > b else b``; int64 for two integers)."""
    ta, tb = type(a), type(b)
    if (ta is _F64 or ta is float) and (tb is _F64 or tb is float) and a == a and b == b:  # the common case first
        pick = a if a > b else b
        return pick if type(pick) is _F64 else _F64(pick)
    ka, kb = _KIND.get(ta, 0), _KIND.get(tb, 0)
    if ka and kb and (ka == 1 or kb == 1) and a == a and b == b:
        pick = a if a > b else b
        return pick if type(pick) is _F64 else _F64(pick)
    if _int_pair(a, b):
        return np.int64(a if a > b else b)
    return np.maximum(a, b)


def minimum(a, b):
    """``np.minimum(a, b)``; for float scalars (no NaN), the smaller as float64 (``a if a < b else b``;
    int64 for two integers)."""
    ta, tb = type(a), type(b)
    if (ta is _F64 or ta is float) and (tb is _F64 or tb is float) and a == a and b == b:  # the common case first
        pick = a if a < b else b
        return pick if type(pick) is _F64 else _F64(pick)
    ka, kb = _KIND.get(ta, 0), _KIND.get(tb, 0)
    if ka and kb and (ka == 1 or kb == 1) and a == a and b == b:
        pick = a if a < b else b
        return pick if type(pick) is _F64 else _F64(pick)
    if _int_pair(a, b):
        return np.int64(a if a < b else b)
    return np.minimum(a, b)


def where_item(cond, a, b):
    """``np.where(cond, a, b)`` as a Python number for a scalar result (``.item()``), the array otherwise."""
    if type(cond) in _COND:
        ta, tb = type(a), type(b)
        if _float_pair(a, b):
            return float(a if cond else b)
        if ta in _INT and tb in _INT:
            pick = a if cond else b
            if not (_int64(a) and _int64(b)):
                return np.where(cond, a, b).item()
            if (ta is bool or ta is np.bool_) and (tb is bool or tb is np.bool_):
                return bool(pick)
            return int(pick)
    out = np.where(cond, a, b)
    return out.item() if np.ndim(out) == 0 else out


def isin(element, values: tuple):
    """``np.isin(element, values)`` for a tuple of numbers; for a scalar element, ``element in values`` as a numpy
    bool."""
    if type(element) in _COND:
        return np.bool_(element in values)
    return np.isin(element, values)


def asarray(value):
    """``np.asarray(value)``, except that a plain number becomes the numpy scalar of the dtype numpy would give it
    (float64, int64, bool) instead of a 0-d array: every ufunc gives the same value and type on either (a numpy
    scalar), at a fraction of a 0-d array's cost. Arrays and anything else go to ``np.asarray``."""
    t = type(value)
    if t is np.ndarray or t is np.float64 or t is np.int64 or t is np.bool_:
        return value
    if t is float:
        return _F64(value)
    if t is bool:
        return np.bool_(value)
    if t is int and -2**63 <= value < 2**63:
        return np.int64(value)
    return np.asarray(value)


def any_true(value) -> bool:
    """``bool(np.any(value))``; for a scalar, ``bool(value)``."""
    if type(value) in _COND:
        return bool(value)
    return bool(np.any(value))


def ndim(value) -> int:
    """``np.ndim(value)``; 0 for a scalar."""
    if type(value) in _COND:
        return 0
    return np.ndim(value)
