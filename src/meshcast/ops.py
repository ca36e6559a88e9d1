"""Reduce ops: the ``ReduceOp`` enum, its NumPy kernels, and which dtypes each op supports.

Theory of operation
-------------------
Every op is an element-wise NumPy ufunc applied with ``out=`` so reductions
never allocate per step. Supported (op, dtype) pairs follow torch.distributed
on Gloo, checked against torch 2.13:

===========  =======================  ===========================================
op           dtypes                   notes
===========  =======================  ===========================================
SUM          bool, int, float, complex  bool: logical OR (torch/Gloo, NCCL: MAX)
PRODUCT      bool, int, float, complex  bool: logical AND
MIN, MAX     bool, int, float           not complex (no order); NaN propagates
BAND/BOR/    bool, int                  bitwise; on bool the logical forms
BXOR
AVG          int, float, complex        SUM then :func:`finish_average`; not bool
===========  =======================  ===========================================

Two deliberate differences from torch's front end: integer AVG is allowed
(torch refuses it; meshcast truncates toward zero as C and NCCL do) and
complex PRODUCT is allowed (torch refuses it only because its backends see
complex tensors as pairs of floats; NumPy multiplies complex numbers
correctly). The torch backend shim never sees either, torch rejects them
first.

Schedules never see AVG: the group reduces with SUM in the working dtype and
then calls :func:`finish_average` once. ``float16`` is reduced in ``float32``
(:func:`working_dtype`) so long sums do not lose precision at every step;
``bfloat16`` (which NumPy lacks) is upcast by the group before it gets here.

Every built-in op is commutative, so any algorithm may combine operands in any
order; floating-point sums still depend on that order, which is why every
algorithm documents who combines what (and all ranks of one call end up with
bitwise identical results).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import usage

DTypeLike = Any  # a np.dtype, anything np.dtype() accepts, or the string "bfloat16"


class ReduceOp(enum.Enum):
    """Element-wise reduction of a collective, spelled like ``torch.distributed.ReduceOp``.

    Members are reachable torch-style (``ReduceOp.SUM``) and print as such.
    :meth:`coerce` also accepts names (``"sum"``, any case) and foreign enum
    members with a ``.name`` (e.g. ``torch.distributed.ReduceOp.SUM``).
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __repr__(self) -> str:
        return f"ReduceOp.{self.name}"

    __str__ = __repr__

    @property
    def commutative(self) -> bool:
        """True for every built-in op (see :func:`is_commutative`)."""
        return is_commutative(self)

    @classmethod
    def coerce(cls, value: Any, *, caller: str = "reduce", rank: int | None = None) -> ReduceOp:
        """Return the member meant by ``value``.

        Args:
            value: a ``ReduceOp``, a name such as ``"SUM"`` or ``"max"`` (any case),
                or an object with a ``.name`` attribute naming a member (torch's
                ``ReduceOp.RedOpType`` members).
            caller: operation named in the error message.
            rank: rank named in the error message.

        Raises:
            InvalidUsage: ``value`` names no member (e.g. torch's ``PREMUL_SUM``).
        """
        if isinstance(value, cls):
            return value
        name = value if isinstance(value, str) else getattr(value, "name", None)
        if isinstance(name, str):
            member = cls.__members__.get(name.strip().upper())
            if member is not None:
                return member
        valid = ", ".join(cls.__members__)
        raise usage(caller, f"'op' must be one of {valid}; got {value!r}", rank)


def is_commutative(op: ReduceOp) -> bool:
    """Whether ``op(a, b) == op(b, a)``; every built-in op is.

    Algorithms that combine operands in ring or tree order (not rank order)
    declare ``supports=lambda plan: is_commutative(plan.op)`` so a future
    non-commutative op (a user op, PREMUL_SUM) is steered to a rank-order one.
    """
    return isinstance(op, ReduceOp)


# ------------------------------------------------------------- dtype support

_BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def _kind(dtype: DTypeLike) -> str:
    """NumPy kind letter of ``dtype``; bfloat16 (``"bfloat16"``, :data:`BFLOAT16`) counts
    as a float."""
    if (isinstance(dtype, str) and dtype == "bfloat16"
            or isinstance(dtype, np.dtype) and dtype == BFLOAT16):
        return "f"
    return np.dtype(dtype).kind


def _dtype_name(dtype: DTypeLike) -> str:
    return dtype if isinstance(dtype, str) else dtype_name(np.dtype(dtype))


def dtype_name(dtype: np.dtype) -> str:
    """``dtype``'s name as fingerprints and errors give it: ``"bfloat16"`` for
    :data:`BFLOAT16`, else NumPy's."""
    return "bfloat16" if dtype.kind == "V" and dtype == BFLOAT16 else dtype.name


def validate(op: Any, dtype: DTypeLike, *, caller: str, rank: int | None = None) -> ReduceOp:
    """Coerce ``op`` and check that it is defined for ``dtype``.

    Args:
        op: anything :meth:`ReduceOp.coerce` accepts.
        dtype: element dtype of the data (a NumPy dtype or ``"bfloat16"``).
        caller: collective named in the error (``"all_reduce"``).
        rank: rank named in the error.

    Returns:
        The ``ReduceOp`` member.

    Raises:
        InvalidUsage: unknown op, a dtype with no arithmetic (object, str,
            datetime, ...), or an unsupported pair: bitwise ops on non-integers,
            MIN/MAX on complex, AVG on bool.
    """
    member = ReduceOp.coerce(op, caller=caller, rank=rank)
    kind = _kind(dtype)
    name = _dtype_name(dtype)
    if kind not in "biufc":
        raise usage(caller, f"{member!r} needs a numeric or bool dtype; got dtype={name}", rank)
    if member in _BITWISE and kind not in "biu":
        why = "bitwise ops need an integer or bool dtype"
        raise usage(caller, f"{member!r} is not supported for dtype={name} ({why})", rank)
    if member in (ReduceOp.MIN, ReduceOp.MAX) and kind == "c":
        why = "complex numbers have no order"
        raise usage(caller, f"{member!r} is not supported for dtype={name} ({why})", rank)
    if member is ReduceOp.AVG and kind == "b":
        why = "the average of bools is not a bool"
        raise usage(caller, f"{member!r} is not supported for dtype={name} ({why})", rank)
    return member


def working_dtype(dtype: DTypeLike, op: ReduceOp | None) -> np.dtype:
    """Dtype a reduction with ``op`` accumulates in.

    ``float16`` (and ``"bfloat16"``) accumulate in ``float32`` for SUM, AVG and
    PRODUCT, so a sum over many ranks rounds once at the end instead of at
    every step. MIN/MAX/bitwise ops are exact and keep the dtype, as does
    ``op=None`` (collectives that do not reduce).
    """
    if isinstance(dtype, str) and dtype == "bfloat16":
        return np.dtype(np.float32)
    dtype = np.dtype(dtype)
    if dtype == np.float16 and op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        return np.dtype(np.float32)
    return dtype


#: NumPy dtypes whose reductions run in the data's own dtype, whatever the op.
FAST_DTYPES = frozenset((
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float32", "float64", "complex64", "complex128",
))


# ------------------------------------------------------------------ kernels

Kernel = Callable[..., Any]  # a binary ufunc called as kernel(a, b, out=dst)

_KERNELS: dict[ReduceOp, Kernel] = {
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,  # AVG accumulates as SUM; finish_average divides once
    ReduceOp.PRODUCT: np.multiply,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or,
    ReduceOp.BXOR: np.bitwise_xor,
}

# np.add/np.multiply on bool arrays already behave as OR/AND; the logical
# ufuncs say so explicitly and skip the casting checks.
_BOOL_KERNELS: dict[ReduceOp, Kernel] = {
    ReduceOp.SUM: np.logical_or,
    ReduceOp.PRODUCT: np.logical_and,
    ReduceOp.MIN: np.logical_and,
    ReduceOp.MAX: np.logical_or,
    ReduceOp.BAND: np.logical_and,
    ReduceOp.BOR: np.logical_or,
    ReduceOp.BXOR: np.logical_xor,
}


def kernel(op: ReduceOp, dtype: np.dtype) -> Kernel:
    """The binary ufunc that implements ``op`` on ``dtype`` (call it with ``out=``)."""
    if dtype.kind == "b":
        return _BOOL_KERNELS.get(op, _KERNELS[op])
    return _KERNELS[op]


def reduce_into(op: ReduceOp, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst = op(dst, src)`` element-wise, in place (AVG accumulates as SUM).

    ``dst`` and ``src`` must have the same length and dtype.
    """
    kernel(op, dst.dtype)(dst, src, out=dst)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns with round-to-nearest-even; NaN stays NaN."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def reduce_many(op: ReduceOp, dst: np.ndarray, srcs: Sequence[np.ndarray]) -> None:
    """``dst = op(...op(op(srcs[0], srcs[1]), srcs[2])..., srcs[-1])``, left to right.

    The fixed order is what makes every rank that reduces the same operands
    get bitwise the same result. ``dst`` must not alias any of ``srcs``
    (``srcs[0]`` is read after ``dst`` is first written only when there is
    one operand, which is a plain copy).
    """
    if not srcs:
        raise ValueError("reduce_many needs at least one operand")
    if len(srcs) == 1:
        np.copyto(dst, srcs[0])
        return
    if (dst.dtype == np.float16 or dst.dtype == BFLOAT16) and op in _WIDENED:
        # what a float32 working copy gives (working_dtype), as the compiled kernel does:
        # each operand widened, folded in float32 in this order, rounded back once
        brain = dst.dtype == BFLOAT16

        def widened(a: np.ndarray) -> np.ndarray:
            flat = np.ascontiguousarray(a).reshape(-1)
            return bf16_to_f32(flat.view(np.uint16)) if brain else flat.astype(np.float32)

        fn = kernel(op, np.dtype(np.float32))
        acc = widened(srcs[0])
        for src in srcs[1:]:
            fn(acc, widened(src), out=acc)
        if brain:
            dst.view(np.uint16)[...] = f32_to_bf16(acc).reshape(dst.shape)
        else:
            with np.errstate(over="ignore"):  # (past float16's range: infinity, as IEEE says)
                np.copyto(dst, acc.reshape(dst.shape), casting="unsafe")
        return
    fn = kernel(op, dst.dtype)
    fn(srcs[0], srcs[1], out=dst)
    for src in srcs[2:]:
        fn(dst, src, out=dst)


def finish_average(buf: np.ndarray, n: int) -> None:
    """Turn the SUM of ``n`` contributions in ``buf`` into their average, in place.

    Floating-point and complex data are divided by ``n``. Integer data are
    divided with truncation toward zero (``-7 / 2 == -3``), as C and NCCL do,
    after a sum that wraps around on overflow like any integer sum; torch's
    own front end refuses integer AVG, meshcast allows it with these rules.
    """
    if n == 1 or buf.size == 0:
        return
    kind = buf.dtype.kind
    if kind in "fc":
        np.divide(buf, n, out=buf)
        return
    if kind not in "iu":
        raise TypeError(f"cannot average dtype={buf.dtype.name}")
    if n > np.iinfo(buf.dtype).max:
        # n does not fit the dtype; every |sum| < n then, so the average truncates to 0
        buf[...] = 0
        return
    if kind == "u":
        np.floor_divide(buf, n, out=buf)
        return
    # fmod has the sign of the dividend (C semantics), so buf - fmod(buf, n) is
    # the multiple of n toward zero and the floor division below is exact; it
    # also cannot overflow (|fmod| < n and has buf's sign).
    np.subtract(buf, np.fmod(buf, n), out=buf)
    np.floor_divide(buf, n, out=buf)


# The compiled helpers' fold kernels (transport/_fold.h, shared by _tiny.c and
# _mpi_rows.c): code = type * 8 + op, only where the result is bitwise NumPy's.
_C_TYPES = {name: i for i, name in enumerate(
    ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32",
     "float64", "bool", "float16", "bfloat16"))}  # (bfloat16: BFLOAT16)
# The reductions a float32 working copy carries for float16 and bfloat16
# (working_dtype): their compiled kernels fold those in float32 and round once
# (transport/_fold.h), as reduce_many does; MIN and MAX stay with NumPy.
_WIDENED = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT)
#: bfloat16 data (NumPy has none) where a reduction folds it as such (calls._native) or
#: the tiny-call lane takes it: its bit patterns as a one-field record, which no ufunc
#: takes for an integer and no cache confuses with uint16 (the carrier of bfloat16
#: elsewhere, buffers.py) or with a plain 2-byte void a user might pass.
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])
_C_OPS = {op: i for i, op in enumerate(
    (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND, ReduceOp.BOR,
     ReduceOp.BXOR))}
_C_FLOAT_ORDER = (_C_OPS[ReduceOp.MIN], _C_OPS[ReduceOp.MAX])
_KERNEL_OF: dict[tuple[ReduceOp, np.dtype], int | None] = {}


def _numpy_picks_as_compiled(dtype: np.dtype) -> bool:
    """Whether this NumPy's ``maximum``/``minimum`` on ``dtype`` pick what _fold.h's
    ORDER_PICKS pick: a NaN over a number, the first of two NaNs (payload
    kept), the second of two equal values (-0.0 and 0.0). NumPy documents none of
    these choices and its SIMD and scalar loops could differ, so they are tried on
    this install (every length up to 80, aligned or not, in place or not) before
    the compiled kernels fold float MIN/MAX: a rank whose call ends in NumPy's fold
    must get the same bits as one whose call ended in the kernel."""
    bits = np.dtype(f"u{dtype.itemsize}")
    quiet = 1 << (dtype.itemsize * 8 - 10 if dtype.itemsize == 4 else 51)
    nan = (np.array([0x7F800000 if dtype.itemsize == 4 else 0x7FF0 << 48], bits) | quiet)
    nans = np.concatenate([nan | 1, nan | 2, nan | 3 | (1 << (dtype.itemsize * 8 - 1))]
                          ).view(dtype)
    values = np.concatenate([nans, np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf], dtype)])
    a, b = (g.ravel() for g in np.meshgrid(values, values))
    a, b = np.tile(a, 2), np.tile(b, 2)
    for ufunc, order in ((np.maximum, np.greater), (np.minimum, np.less)):
        want = np.where(a != a, a, np.where(b != b, b, np.where(order(a, b), a, b)))
        for start in (0, 1):
            for n in range(1, 81):
                x, y = a[start:start + n], b[start:start + n]
                got = ufunc(x, y)
                again = x.copy()
                ufunc(again, y, out=again)
                expect = want[start:start + n].view(bits)
                if not (np.array_equal(got.view(bits), expect)
                        and np.array_equal(again.view(bits), expect)):
                    return False
    return True


def compiled_kernel(op: ReduceOp, dtype: np.dtype) -> int | None:
    """The compiled helpers' fold code for ``op`` (AVG already turned into SUM) on
    ``dtype``, or None where NumPy folds (complex, float16 MIN/MAX, AVG, PREMUL_SUM,
    and float MIN/MAX where this NumPy picks NaNs or zeros otherwise than the kernels:
    :func:`_numpy_picks_as_compiled`): a fold with this code gives bitwise
    :func:`reduce_many`'s result."""
    try:
        return _KERNEL_OF[op, dtype]
    except KeyError:  # (a dtype's name costs ~3 us: looked up once per op and dtype)
        name = dtype_name(dtype)
        t, o = _C_TYPES.get(name), _C_OPS.get(op)
        code = None if t is None or o is None or (
            name in ("float16", "bfloat16") and op not in _WIDENED) or (
            dtype.kind == "f" and o in _C_FLOAT_ORDER and not _numpy_picks_as_compiled(dtype)
        ) else t * 8 + o
        if len(_KERNEL_OF) < 1024:
            _KERNEL_OF[op, dtype] = code
        return code


__all__ = [
    "BFLOAT16",
    "ReduceOp",
    "bf16_to_f32",
    "compiled_kernel",
    "dtype_name",
    "f32_to_bf16",
    "finish_average",
    "is_commutative",
    "kernel",
    "reduce_into",
    "reduce_many",
    "validate",
    "working_dtype",
]
