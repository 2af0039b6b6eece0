"""The scalar fast paths of ``npscalar.asarray`` / ``any_true`` / ``ndim`` give numpy's own results."""
import numpy as np
import pytest

from workbench import npscalar

VALUES = [0, 1, -3, 2**62, 2**70, True, False, np.int64(5), np.bool_(True), 0.0, -0.0, 2.5, np.float64(-1.5),
          float("inf"), float("nan"), np.array([1.5, -0.0]), np.array([1, 2]), np.array([True, False]),
          np.array(3.0), [1, 2]]


def _same(expected, got):
    expected, got = np.asarray(expected), np.asarray(got)
    if expected.dtype == object:  # a Python int beyond int64
        return got.dtype == object and expected.shape == got.shape and np.array_equal(expected, got)
    return (expected.dtype == got.dtype and expected.shape == got.shape
            and np.array_equal(expected, got, equal_nan=True) and np.array_equal(np.signbit(expected), np.signbit(got)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_asarray_gives_numpys_dtype_and_value(value):
    fast, slow = npscalar.asarray(value), np.asarray(value)
    assert _same(slow, fast)
    for other in (0, 1, 2.5, True):  # what the models do with it: ufuncs give the same value and dtype
        assert _same(slow > other, fast > other) and _same(slow == other, fast == other)
        if slow.dtype != object:
            assert _same(slow * other, fast * other) and _same(slow + other, fast + other)
    if slow.dtype == bool:
        assert _same(~slow, ~fast)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_any_true_and_ndim(value):
    assert npscalar.any_true(value) is bool(np.any(value))
    assert npscalar.ndim(value) == np.ndim(value)
