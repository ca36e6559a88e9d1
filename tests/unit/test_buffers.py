"""Buffers reach the engine without copies when they can, and staged results are written back."""

from __future__ import annotations

import numpy as np
import pytest

from meshcast.buffers import as_buffer


def _wrap(obj, writable: bool = True):
    return as_buffer(obj, name="tensor", caller="test", rank=0, writable=writable)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "complex128", "bool"])
def test_contiguous_numpy_is_not_copied(dtype):
    a = np.zeros((4, 6), dtype)
    buf = _wrap(a)
    assert buf.flat.flags.c_contiguous and buf.flat.ndim == 1
    assert np.shares_memory(buf.flat, a)
    assert buf.flat.ctypes.data == a.ctypes.data and buf.flat.nbytes == a.nbytes
    buf.flat[5] = 1  # the engine writes straight into the user's array
    assert a.reshape(-1)[5] == 1


def test_contiguous_numpy_slice_is_not_copied():
    base = np.arange(20, dtype=np.float64)
    a = base[5:15]  # contiguous, not at the start of its base
    buf = _wrap(a)
    assert buf.flat.ctypes.data == a.ctypes.data


def test_noncontiguous_numpy_is_staged_and_written_back():
    base = np.zeros((3, 4), np.int32)
    view = base[:, ::2]
    buf = _wrap(view)
    assert buf.flat.flags.c_contiguous
    assert not np.shares_memory(buf.flat, base)
    buf.flat[:] = np.arange(6)
    assert (base == 0).all()  # nothing reaches the user's array before finish()
    buf.finish()
    np.testing.assert_array_equal(view, np.arange(6).reshape(3, 2))
    assert (base[:, 1::2] == 0).all()  # the elements in between are untouched


def test_noncontiguous_read_only_use_is_not_written_back():
    base = np.zeros((3, 4), np.int32)
    buf = _wrap(base[:, ::2], writable=False)
    buf.flat[:] = 7
    buf.finish()
    assert (base == 0).all()


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "float16"])
def test_contiguous_torch_tensor_is_not_copied(dtype):
    torch = pytest.importorskip("torch")
    t = torch.zeros(4, 6, dtype=getattr(torch, dtype))
    buf = _wrap(t)
    assert buf.flat.ctypes.data == t.data_ptr()
    assert buf.flat.nbytes == t.numel() * t.element_size()
    buf.flat[3] = 1 if dtype != "bfloat16" else 0x3F80  # bf16 1.0 as its bit pattern
    assert t.reshape(-1)[3].item() == 1


def test_torch_tensor_that_requires_grad_is_not_copied():
    torch = pytest.importorskip("torch")
    t = torch.zeros(8, requires_grad=True)
    assert _wrap(t).flat.ctypes.data == t.data_ptr()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_noncontiguous_torch_tensor_is_staged_and_written_back(dtype):
    torch = pytest.importorskip("torch")
    base = torch.zeros(4, 3, dtype=getattr(torch, dtype))
    t = base.t()  # 3x4, not contiguous
    buf = _wrap(t)
    start, end = base.data_ptr(), base.data_ptr() + base.numel() * base.element_size()
    assert not start <= buf.flat.ctypes.data < end
    values = torch.arange(12, dtype=getattr(torch, dtype)).reshape(3, 4)
    if dtype == "bfloat16":
        buf.flat[:] = values.reshape(-1).view(torch.int16).numpy().view(np.uint16)
    else:
        buf.flat[:] = values.reshape(-1).numpy()
    assert (base == 0).all()
    buf.finish()
    assert torch.equal(t, values)
