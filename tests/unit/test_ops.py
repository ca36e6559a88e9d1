"""meshcast.ops: ReduceOp, the dtype support table, kernels, working dtypes, AVG."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshcast import ops
from meshcast.errors import InvalidUsage
from meshcast.ops import ReduceOp

KINDS = {
    "bool": np.bool_,
    "int8": np.int8,
    "int32": np.int32,
    "uint8": np.uint8,
    "uint64": np.uint64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "bfloat16": "bfloat16",
}

# which (op, dtype kind) pairs are valid: b=bool i=int/uint f=float c=complex
SUPPORT = {
    ReduceOp.SUM: "bifc",
    ReduceOp.PRODUCT: "bifc",
    ReduceOp.MIN: "bif",
    ReduceOp.MAX: "bif",
    ReduceOp.BAND: "bi",
    ReduceOp.BOR: "bi",
    ReduceOp.BXOR: "bi",
    ReduceOp.AVG: "ifc",
}


def _kind(dtype) -> str:
    if dtype == "bfloat16":
        return "f"
    return {"b": "b", "i": "i", "u": "i", "f": "f", "c": "c"}[np.dtype(dtype).kind]


# -------------------------------------------------------------------- coerce


def test_members_are_reachable_torch_style():
    assert ReduceOp.SUM is ReduceOp["SUM"]
    assert repr(ReduceOp.MAX) == "ReduceOp.MAX" == str(ReduceOp.MAX)
    assert [op.name for op in ReduceOp] == [
        "SUM",
        "AVG",
        "PRODUCT",
        "MIN",
        "MAX",
        "BAND",
        "BOR",
        "BXOR",
    ]


@pytest.mark.parametrize(
    "value", ["sum", "SUM", " Sum ", ReduceOp.SUM, SimpleNamespace(name="SUM")]
)
def test_coerce_accepts_members_names_and_named_objects(value):
    assert ReduceOp.coerce(value) is ReduceOp.SUM


def test_coerce_accepts_foreign_enum_members():
    class Foreign(enum.Enum):
        BXOR = 7

    assert ReduceOp.coerce(Foreign.BXOR) is ReduceOp.BXOR


def test_coerce_accepts_torch_reduce_ops():
    dist = pytest.importorskip("torch.distributed")
    for op in ReduceOp:
        assert ReduceOp.coerce(getattr(dist.ReduceOp, op.name)) is op


@pytest.mark.parametrize("value", ["premul_sum", "plus", 3, None, SimpleNamespace(name="UNUSED")])
def test_coerce_rejects_the_rest_naming_the_valid_ones(value):
    with pytest.raises(InvalidUsage, match=r"all_reduce: 'op' must be one of SUM, AVG.*\(rank 3\)"):
        ReduceOp.coerce(value, caller="all_reduce", rank=3)


def test_every_builtin_op_is_commutative():
    assert all(ops.is_commutative(op) and op.commutative for op in ReduceOp)
    assert not ops.is_commutative("sum")


# ------------------------------------------------------------------ validate


@pytest.mark.parametrize("op", list(ReduceOp))
@pytest.mark.parametrize("dtype_name", list(KINDS))
def test_validate_support_table(op, dtype_name):
    dtype = KINDS[dtype_name]
    ok = _kind(dtype) in SUPPORT[op]
    if ok:
        assert ops.validate(op.name.lower(), dtype, caller="reduce", rank=1) is op
    else:
        with pytest.raises(InvalidUsage) as info:
            ops.validate(op, dtype, caller="reduce", rank=1)
        message = str(info.value)
        assert message.startswith("reduce: ")
        assert repr(op) in message and dtype_name in message and message.endswith("(rank 1)")


@pytest.mark.parametrize("dtype", [object, "U3", "datetime64[s]", "V4"])
def test_validate_rejects_dtypes_without_arithmetic(dtype):
    with pytest.raises(InvalidUsage, match="numeric or bool"):
        ops.validate("sum", dtype, caller="all_reduce")


# ------------------------------------------------------------------- kernels

TORCH_BOOL = {  # torch 2.13 + Gloo, all_reduce of [T,F,T,F] and [T,T,F,F]
    ReduceOp.SUM: [True, True, True, False],
    ReduceOp.PRODUCT: [True, False, False, False],
    ReduceOp.MIN: [True, False, False, False],
    ReduceOp.MAX: [True, True, True, False],
    ReduceOp.BAND: [True, False, False, False],
    ReduceOp.BOR: [True, True, True, False],
    ReduceOp.BXOR: [False, True, True, False],
}
TORCH_INT32 = {  # [7,-7,5,-5] and [0,0,-2,2]
    ReduceOp.SUM: [7, -7, 3, -3],
    ReduceOp.PRODUCT: [0, 0, -10, -10],
    ReduceOp.MIN: [0, -7, -2, -5],
    ReduceOp.MAX: [7, 0, 5, 2],
    ReduceOp.BAND: [0, 0, 4, 2],
    ReduceOp.BOR: [7, -7, -1, -5],
    ReduceOp.BXOR: [7, -7, -5, -7],
}


@pytest.mark.parametrize("op", list(TORCH_BOOL))
def test_bool_kernels_match_torch(op):
    dst = np.array([True, False, True, False])
    ops.reduce_into(op, dst, np.array([True, True, False, False]))
    assert dst.tolist() == TORCH_BOOL[op]


@pytest.mark.parametrize("op", list(TORCH_INT32))
def test_int_kernels_match_torch(op):
    dst = np.array([7, -7, 5, -5], dtype=np.int32)
    ops.reduce_into(op, dst, np.array([0, 0, -2, 2], dtype=np.int32))
    assert dst.tolist() == TORCH_INT32[op]
    assert dst.dtype == np.int32


def test_float_kernels_propagate_nan_and_keep_dtype():
    for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
        dst = np.array([1.0, np.nan], dtype=np.float16)
        ops.reduce_into(op, dst, np.array([np.nan, 2.0], dtype=np.float16))
        assert np.isnan(dst).all() and dst.dtype == np.float16


def test_complex_kernels():
    dst = np.array([1 + 1j], dtype=np.complex64)
    ops.reduce_into(ReduceOp.PRODUCT, dst, np.array([2j], dtype=np.complex64))
    assert dst.tolist() == [-2 + 2j]
    ops.reduce_into(ReduceOp.SUM, dst, np.array([1j], dtype=np.complex64))
    assert dst.tolist() == [-2 + 3j]


def test_avg_accumulates_as_sum():
    dst = np.array([1, 2], dtype=np.int64)
    ops.reduce_into(ReduceOp.AVG, dst, np.array([3, 4], dtype=np.int64))
    assert dst.tolist() == [4, 6]


def test_reduce_into_works_in_place_without_allocating_views():
    base = np.arange(8, dtype=np.float32)
    view = base[2:6]
    ops.reduce_into(ReduceOp.SUM, view, np.ones(4, dtype=np.float32))
    assert base.tolist() == [0, 1, 3, 4, 5, 6, 6, 7]


def test_reduce_many_is_left_to_right():
    # float32: (1e8 + 1) - 1e8 == 0 but (1e8 - 1e8) + 1 == 1
    big = np.float32(1e8)
    srcs = [np.array([big]), np.array([1.0], np.float32), np.array([-big])]
    srcs = [s.astype(np.float32) for s in srcs]
    dst = np.empty(1, np.float32)
    ops.reduce_many(ReduceOp.SUM, dst, srcs)
    assert dst[0] == np.float32(np.float32(1e8) + np.float32(1.0)) - big
    ops.reduce_many(ReduceOp.SUM, dst, [srcs[0], srcs[2], srcs[1]])
    assert dst[0] == 1.0


def test_reduce_many_one_operand_copies_and_none_is_an_error():
    dst = np.zeros(3, np.int16)
    ops.reduce_many(ReduceOp.MAX, dst, [np.array([1, 2, 3], np.int16)])
    assert dst.tolist() == [1, 2, 3]
    with pytest.raises(ValueError):
        ops.reduce_many(ReduceOp.MAX, dst, [])


@given(st.lists(st.lists(st.integers(-100, 100), min_size=5, max_size=5), min_size=1, max_size=9))
def test_reduce_many_matches_python(rows):
    srcs = [np.array(r, dtype=np.int64) for r in rows]
    for op, fn in [
        (ReduceOp.SUM, sum),
        (ReduceOp.MIN, min),
        (ReduceOp.MAX, max),
    ]:
        dst = np.empty(5, np.int64)
        ops.reduce_many(op, dst, srcs)
        assert dst.tolist() == [fn(col) for col in zip(*rows)]


# ------------------------------------------------------------ working dtype


def test_working_dtype():
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        assert ops.working_dtype(f16, op) == f32
        assert ops.working_dtype("bfloat16", op) == f32
    for op in (ReduceOp.MIN, ReduceOp.MAX, None):
        assert ops.working_dtype(f16, op) == f16
    for dtype in (np.int8, np.float32, np.complex64, np.bool_):
        assert ops.working_dtype(dtype, ReduceOp.SUM) == np.dtype(dtype)


# ---------------------------------------------------------------------- AVG


def test_finish_average_floats_divide():
    buf = np.array([3.0, -1.0, 1 + 2j], dtype=np.complex128)
    ops.finish_average(buf, 2)
    assert buf.tolist() == [1.5, -0.5, 0.5 + 1j]
    buf = np.array([7.0], dtype=np.float32)
    ops.finish_average(buf, 4)
    assert buf.tolist() == [1.75]


def test_finish_average_integers_truncate_toward_zero():
    buf = np.array([7, -7, 6, -6, 1, -1, 0], dtype=np.int32)
    ops.finish_average(buf, 2)
    assert buf.tolist() == [3, -3, 3, -3, 0, 0, 0]
    buf = np.array([255, 7], dtype=np.uint8)
    ops.finish_average(buf, 4)
    assert buf.tolist() == [63, 1]


def test_finish_average_edges():
    buf = np.array([-128, 127], dtype=np.int8)  # |fmod| < n: no overflow at the extremes
    ops.finish_average(buf, 3)
    assert buf.tolist() == [-42, 42]
    buf = np.array([-128, 127], dtype=np.int8)
    ops.finish_average(buf, 200)  # n does not fit int8: every average truncates to 0
    assert buf.tolist() == [0, 0]
    buf = np.array([5, -5], dtype=np.int16)
    ops.finish_average(buf, 1)
    assert buf.tolist() == [5, -5]
    ops.finish_average(np.empty(0, np.int32), 3)
    with pytest.raises(TypeError):
        ops.finish_average(np.array([True]), 2)


@given(
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=20), st.integers(1, 2**31 - 1)
)
def test_finish_average_is_c_division(values, n):
    buf = np.array(values, dtype=np.int32)
    ops.finish_average(buf, n)
    assert buf.tolist() == [(abs(v) // n) * (1 if v >= 0 else -1) for v in values]


def test_float_min_max_are_compiled_only_where_numpy_picks_as_the_kernels(monkeypatch):
    """The compiled float MIN/MAX pick NaNs and equal zeros as this NumPy is seen to
    pick them; a NumPy that picked otherwise (here: the first of two equal values)
    keeps float MIN/MAX in NumPy's fold, so every rank's result stays the same bits."""
    f32 = np.dtype(np.float32)
    assert ops._numpy_picks_as_compiled(f32)
    assert ops._numpy_picks_as_compiled(np.dtype(np.float64))
    assert ops.compiled_kernel(ReduceOp.MAX, f32) is not None

    def first_of_equals(x, y, out=None):
        pick = np.where(x != x, x, np.where(y != y, y, np.where(x >= y, x, y)))
        if out is None:
            return pick
        out[...] = pick
        return out

    monkeypatch.setattr(np, "maximum", first_of_equals)
    assert not ops._numpy_picks_as_compiled(f32)
    monkeypatch.setattr(ops, "_KERNEL_OF", {})
    assert ops.compiled_kernel(ReduceOp.MAX, f32) is None
    assert ops.compiled_kernel(ReduceOp.SUM, f32) is not None
