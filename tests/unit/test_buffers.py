"""Buffers reach the engine without copies when they can, and staged results are written back."""

from __future__ import annotations

import numpy as np
import pytest

from meshcast import buffers
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


def _float32_patterns() -> np.ndarray:
    """Random float32 bit patterns (NaNs, infinities, subnormals among them) plus the
    edges of both roundings: halfway cases, the largest finite values, the smallest
    subnormals, signed zeros."""
    rng = np.random.default_rng(7)
    edges = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF,
                      0x00000001, 0x80000000, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x33000000,
                      0x33000001, 0x477FF000, 0x477FEFFF, 0x387FC000], np.uint32)
    return np.concatenate([rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32),
                           edges]).view(np.float32)


@pytest.mark.skipif(buffers._halves is None, reason="built without the compiled conversions")
@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 1 << 16])
def test_compiled_half_conversions_are_numpys_bit_for_bit(count):
    # bfloat16 and float16 to float32 (every bit pattern) and back (random patterns and
    # the rounding edges), at lengths around the 8-wide loop: what buffers' NumPy
    # conversions give; a NaN stays a NaN of its sign (float16 payloads may differ)
    halves = np.arange(1 << 16, dtype=np.uint16)[:count]
    wide = np.empty(count, np.float32)
    buffers._halves.convert(halves, wide, "bfloat16", True)
    assert np.array_equal(wide.view(np.uint32), buffers.bf16_to_f32(halves).view(np.uint32))
    buffers._halves.convert(halves.view(np.float16), wide, "float16", True)
    want = halves.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(wide[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(wide[nan]).all()
    singles = _float32_patterns()[:count] if count < (1 << 16) else _float32_patterns()
    narrow = np.empty(singles.size, np.uint16)
    buffers._halves.convert(singles, narrow, "bfloat16", False)
    assert np.array_equal(narrow, buffers.f32_to_bf16(singles))
    buffers._halves.convert(singles, narrow.view(np.float16), "float16", False)
    with np.errstate(all="ignore"):
        want16 = singles.astype(np.float16)
    got16 = narrow.view(np.float16)
    nan = np.isnan(want16)
    assert np.array_equal(got16[~nan].view(np.uint16), want16[~nan].view(np.uint16))
    assert np.isnan(got16[nan]).all()
    assert (np.signbit(got16[nan]) == np.signbit(want16[nan])).all()


@pytest.mark.skipif(buffers._halves is None, reason="built without the compiled conversions")
def test_compiled_half_conversions_refuse_mismatched_buffers():
    with pytest.raises(ValueError, match="as many elements"):
        buffers._halves.convert(np.zeros(4, np.uint16), np.zeros(3, np.float32), "bfloat16",
                                True)
    with pytest.raises(ValueError, match="kind"):
        buffers._halves.convert(np.zeros(4, np.uint16), np.zeros(4, np.float32), "int16", True)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("compiled", [True, False])
def test_working_copies_round_trip_with_or_without_the_compiled_conversions(
        dtype_name, compiled, monkeypatch):
    if compiled and buffers._halves is None:
        pytest.skip("built without the compiled conversions")
    if not compiled:
        monkeypatch.setattr(buffers, "_halves", None)
    singles = _float32_patterns()
    singles = singles[np.isfinite(singles)]
    halves = np.empty(singles.size, np.uint16 if dtype_name == "bfloat16" else np.float16)
    with np.errstate(over="ignore"):  # (float32 values past float16's range: infinities)
        buffers.store_back(halves, singles, dtype_name)
        want = (buffers.f32_to_bf16(singles) if dtype_name == "bfloat16"
                else singles.astype(np.float16))
    assert np.array_equal(halves.view(np.uint16), want.view(np.uint16))
    wide = buffers.working_copy(halves, dtype_name, np.dtype(np.float32))
    back = np.empty_like(halves)
    buffers.store_back(back, wide, dtype_name)
    assert np.array_equal(back.view(np.uint16), halves.view(np.uint16))
