"""Adapts NumPy arrays and PyTorch CPU tensors to flat, contiguous NumPy views, and writes results back.

A :class:`Buffer` gives the engine ``flat``: a 1-D C-contiguous array sharing
memory with the user's object whenever it can (contiguous arrays, contiguous
CPU tensors, including bfloat16 tensors seen as uint16). Otherwise ``flat`` is
a staging copy and :meth:`Buffer.finish` copies the result back into the
user's object; torch tensors are written under ``no_grad`` with ``copy_``.

bfloat16 is carried as its raw 16-bit pattern (``np.uint16``) with
``dtype_name == "bfloat16"``; reductions convert it to float32 and back with
round-to-nearest-even (:func:`bf16_to_f32`, :func:`f32_to_bf16`).
"""

from __future__ import annotations

import ctypes
import importlib
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import usage
from .ops import bf16_to_f32, f32_to_bf16

try:  # the compiled conversions (meshcast/_halves.c), optional like every helper
    _halves: Any = importlib.import_module("meshcast._halves")
except ImportError:  # pragma: no cover - without a C compiler
    _halves = None

SUPPORTED = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
)


def _torch() -> Any:
    return sys.modules.get("torch")


def is_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


class Buffer:
    """A user array or tensor seen as a flat contiguous NumPy array.

    Attributes:
        flat: 1-D contiguous array holding the data (element dtype ``storage``).
        dtype_name: logical dtype name ("float32", "bfloat16", ...).
        shape: the user's shape.
        source: the user's object.
    """

    __slots__ = ("flat", "dtype_name", "shape", "source", "_staged")

    def __init__(self, flat: np.ndarray, dtype_name: str, shape: tuple[int, ...], source: Any,
                 staged: bool) -> None:
        self.flat = flat
        self.dtype_name = dtype_name
        self.shape = shape
        self.source = source
        self._staged = staged

    @property
    def count(self) -> int:
        return self.flat.size

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    def finish(self) -> None:
        """Copy a staged result back into the user's object (no-op when not staged)."""
        if not self._staged:
            return
        src = self.source
        if is_tensor(src):
            torch = _torch()
            data = self.flat.reshape(self.shape)
            if self.dtype_name == "bfloat16":
                staged = torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
            else:
                staged = torch.from_numpy(data)
            with torch.no_grad():
                src.copy_(staged)
        elif self.dtype_name == "bfloat16":  # ml_dtypes: copy the bit patterns, not values
            np.copyto(src.view(np.uint16), self.flat.reshape(self.shape))
        else:
            np.copyto(src, self.flat.reshape(self.shape), casting="unsafe")


_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dt: np.dtype) -> str:
    # numpy builds dtype.name anew on every access (~1 us); this runs on every call.
    name = _NAMES.get(dt)
    if name is None:
        name = _NAMES[dt] = dt.name
    return name


def as_buffer(obj: Any, *, name: str, caller: str, rank: int | None,
              writable: bool = True) -> Buffer:
    """Wrap ``obj`` (numpy.ndarray or CPU torch.Tensor) as a :class:`Buffer`.

    Args:
        obj: the user's array or tensor.
        name: the argument's name, for error messages.
        caller: the public function being called, for error messages.
        rank: the calling rank, for error messages.
        writable: the call writes into ``obj``.

    Raises:
        InvalidUsage: ``obj`` is not an array/tensor, lives off the CPU, has an
            unsupported dtype, or is read-only while the call writes into it.
    """
    if is_tensor(obj):
        return _from_tensor(obj, name=name, caller=caller, rank=rank)
    if not isinstance(obj, np.ndarray):
        raise usage(caller, f"'{name}' must be a NumPy array or a CPU torch.Tensor, "
                            f"got {type(obj).__name__}", rank)
    dtn = _dtype_name(obj.dtype)
    if dtn not in SUPPORTED:
        raise usage(caller, f"'{name}' has unsupported dtype {obj.dtype}; supported: "
                            f"{', '.join(SUPPORTED)}", rank)
    if not obj.dtype.isnative:
        raise usage(caller, f"'{name}' has non-native byte order {obj.dtype.str}; "
                            f"convert it with .astype('{obj.dtype.newbyteorder('=').str}')", rank)
    if writable and not obj.flags.writeable:
        raise usage(caller, f"'{name}' is read-only but {caller} writes its result into it", rank)
    storage = np.dtype(np.uint16) if dtn == "bfloat16" else obj.dtype
    if obj.flags.c_contiguous:
        flat = obj.reshape(-1).view(storage)
        return Buffer(flat, dtn, obj.shape, obj, staged=False)
    flat = np.ascontiguousarray(obj).reshape(-1).view(storage)
    return Buffer(flat, dtn, obj.shape, obj, staged=writable)


def _from_tensor(t: Any, *, name: str, caller: str, rank: int | None) -> Buffer:
    torch = _torch()
    if t.device.type != "cpu":
        raise usage(caller, f"'{name}' is on device {t.device}; meshcast moves CPU tensors "
                            f"only", rank)
    if t.is_sparse or t.layout != torch.strided:
        raise usage(caller, f"'{name}' must be a dense (strided) tensor, got layout "
                            f"{t.layout}", rank)
    dtn = str(t.dtype).removeprefix("torch.")
    if dtn not in SUPPORTED:
        raise usage(caller, f"'{name}' has unsupported dtype {t.dtype}", rank)
    shape = tuple(t.shape)
    d = t.detach()
    staged = not d.is_contiguous()
    if staged:
        d = d.contiguous()
    if dtn == "bfloat16":
        flat = d.view(torch.int16).numpy().reshape(-1).view(np.uint16)
    else:
        if d.is_conj():
            d = d.resolve_conj()
            staged = True
        flat = d.numpy().reshape(-1)
    return Buffer(flat, dtn, shape, t, staged=staged)


def working_copy(flat: np.ndarray, dtype_name: str, work_dtype: np.dtype) -> np.ndarray:
    """Return ``flat`` converted to ``work_dtype`` (float32 for bf16/fp16 reductions)."""
    if _halves is not None and work_dtype == np.float32 and flat.flags.c_contiguous \
            and dtype_name in ("bfloat16", "float16"):
        work = np.empty(flat.size, np.float32)
        _halves.convert(flat, work, dtype_name, True)
        return work
    if dtype_name == "bfloat16":
        return bf16_to_f32(flat)
    return flat.astype(work_dtype)


def store_back(dst: np.ndarray, work: np.ndarray, dtype_name: str) -> None:
    """Write a working (upcast) result into ``dst`` in the user's dtype."""
    if _halves is not None and work.dtype == np.float32 and dtype_name in (
            "bfloat16", "float16") and dst.flags.c_contiguous and work.flags.c_contiguous \
            and dst.size == work.size:
        _halves.convert(work, dst, dtype_name, False)
    elif dtype_name == "bfloat16":
        dst[...] = f32_to_bf16(work)
    else:
        np.copyto(dst, work, casting="unsafe")


def span(flats: Sequence[np.ndarray]) -> np.ndarray | None:
    """One flat array over ``flats`` if they lie back to back in memory, else None.

    The pieces of ``torch.chunk``/``split`` or of slicing one array do: a list
    collective on them then reads or writes them in place instead of
    concatenating them into (or spreading them out of) a staging copy. The
    result keeps the pieces alive; it is writable when they are.
    """
    if not flats:
        return None
    dtype, start = flats[0].dtype, flats[0].ctypes.data
    at = start
    for f in flats:
        if f.dtype != dtype or not f.flags.c_contiguous:
            return None
        if f.size and f.ctypes.data != at:  # an empty piece may sit anywhere
            return None
        at += f.nbytes
    if at == start:
        return None
    raw = (ctypes.c_char * (at - start)).from_address(start)
    raw._pieces = list(flats)  # type: ignore[attr-defined]  # the memory's owners
    view = np.frombuffer(raw, dtype)
    if not all(f.flags.writeable for f in flats):
        view.flags.writeable = False
    return view


class Staging:
    """Staging arrays that a group's synchronous calls reuse, one per role (say the
    input and the output of an all_to_all of lists, which the lane runs on their
    concatenation), each grown to the largest call seen.

    A fresh NumPy array past glibc's mmap threshold faults in every page on each call:
    concatenating two 256 KiB pieces took 192 us, and torch's all_to_all of two 1 MiB
    pieces 1169 us against 102 for all_to_all_single of the same bytes (2 ranks, hot
    buffers). Only synchronous calls may use it: an asynchronous one still reads or
    writes its staging after it returns. What is kept lives as long as the group.
    """

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # per role: the array grown to the largest call, and the last view handed out
        # with its (dtype, shape); a program repeats its calls, and the same array
        # object lets the lane's plan check by identity
        self._kept: dict[str, tuple[np.ndarray, np.dtype, tuple[int, ...], np.ndarray]] = {}

    def get(self, role: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A C-contiguous array of ``dtype`` and ``shape`` for ``role``, whose contents are
        left from an earlier call (the caller overwrites them)."""
        kept = self._kept.get(role)
        if kept is not None and kept[1] is dtype and kept[2] == shape:
            return kept[3]
        nbytes = math.prod(shape) * dtype.itemsize
        held = None if kept is None else kept[0]
        if held is None or held.nbytes < nbytes:
            # (rounded up to 64 KiB, so that calls whose sizes vary a little, as MoE's
            # token exchange does, grow it a few times, not every call)
            held = np.empty(-(-max(nbytes, 1) // 65536) * 65536, np.uint8)
        view = held[:nbytes].view(dtype).reshape(shape)
        self._kept[role] = (held, dtype, shape, view)
        return view
