"""The front door for symmetric buffers: ``meshcast.empty`` and ``meshcast.zeros``.

The mechanism (one shared segment per allocation, every rank's part visible
to all) is in symmetric.py; the collectives that use it in place are in
paths/symmetric.py. This module validates the request, makes every member agree on it,
and hands back a NumPy array or a torch tensor over the caller's part.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _api, _world
from .errors import MismatchError, usage
from .group import ProcessGroup


def _dtypes(dtype: Any, caller: str, rank: int | None) -> tuple[np.dtype, Any]:
    """(NumPy storage dtype, torch dtype or None) for a NumPy or torch ``dtype``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        if dtype == torch.bfloat16:
            return np.dtype(np.uint16), dtype
        try:
            return np.dtype(torch.empty(0, dtype=dtype).numpy().dtype), dtype
        except TypeError:
            raise usage(caller, f"'dtype'={dtype} is not supported", rank) from None
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise usage(caller, f"'dtype'={dtype!r} is not a NumPy or torch dtype", rank) from None
    if np_dtype.hasobject:  # pointers into one process's heap mean nothing to the others
        raise usage(caller, f"'dtype'={np_dtype} cannot live in shared memory", rank)
    return np_dtype, None


def _shape(shape: int | Sequence[int], caller: str, rank: int | None) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise usage(caller, f"'shape' must be an int or a sequence of ints, got {shape!r}",
                    rank) from None
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise usage(caller, f"'shape'={shape!r} must hold non-negative ints", rank)
    return tuple(int(d) for d in dims)


def empty(shape: int | Sequence[int], dtype: Any = np.float32, *,
          group: _api.GroupLike = None) -> Any:
    """Allocate an array in shared memory that collectives use in place (symmetric memory).

    Collective over ``group``: every member must call it, in the same order as
    its other collectives, with the same size in bytes. Each member gets its
    own array; all of them live in one shared segment, so a collective on such
    arrays (``all_reduce``, ``broadcast``) reads and writes the peers' arrays
    directly instead of copying through the arena. Any contiguous slice works,
    as long as every rank passes the same slice. With ordinary arrays on some
    ranks and symmetric ones on others the call raises ``MismatchError``.

    The memory stays mapped until the group is destroyed (freeing the array
    does not release it), and it starts zeroed.

    Args:
        shape (int or sequence of int): the array's shape.
        dtype: a NumPy dtype (default float32), or a torch dtype to get a
            torch tensor sharing the memory (bfloat16 included).
        group (ProcessGroup, optional): the default group if None.

    Returns:
        numpy.ndarray (or torch.Tensor for a torch dtype) of ``shape``.

    Raises:
        InvalidUsage: bad shape or dtype, or not a member of ``group``.
        MismatchError: members asked for different sizes (raised on every member).
        ShmError: not enough shared memory.
    """
    caller = "empty"
    pg = _api._resolve(group, caller)
    rank = _api._rank()
    if not isinstance(pg, ProcessGroup):
        raise usage(caller, "this rank is not a member of 'group'", rank)
    dims = _shape(shape, caller, rank)
    np_dtype, torch_dtype = _dtypes(dtype, caller, rank)
    nbytes = math.prod(dims) * np_dtype.itemsize
    if pg.size() > 1:
        mine = np.array([nbytes], np.int64)
        sizes = np.zeros(pg.size(), np.int64)
        _api.all_gather_into_tensor(sizes, mine, group=pg)
        if (sizes != nbytes).any():
            raise MismatchError(
                f"{caller} on {pg.group_name}: ranks asked for different sizes (bytes by "
                f"rank: {dict(zip(pg.global_ranks, sizes.tolist()))}); every member must "
                f"allocate the same size")
    w = _world.current
    assert w is not None  # _resolve succeeded

    def barrier(key: str) -> None:
        # per-rank keys: a member that died before arriving is named, not waited for
        _world.rank_barrier(pg.store if pg.store is not None else w.store, key,
                            pg.global_ranks[pg.rank()], pg.global_ranks, w.timeout,
                            f"{caller} on {pg.group_name}: attaching the memory", w.liveness)

    store = pg.store if pg.store is not None else w.store
    alloc = pg.symmetric.allocate(nbytes, store, f"meshcast/group/{pg.group_id}", barrier)
    array = alloc.part(alloc.rank)[:nbytes].view(np_dtype).reshape(dims)
    if torch_dtype is None:
        return array
    import torch

    return torch.from_numpy(array).view(torch_dtype)


def zeros(shape: int | Sequence[int], dtype: Any = np.float32, *,
          group: _api.GroupLike = None) -> Any:
    """Like :func:`empty`, spelled for code that relies on the zero fill.

    A new allocation is always zero (fresh shared pages), so no pass over the
    memory is needed.
    """
    return empty(shape, dtype, group=group)


def is_symmetric(array: Any, group: _api.GroupLike = None) -> bool:
    """Whether ``array`` lies in a symmetric allocation of ``group`` (so collectives on it
    run in place)."""
    pg = _api._resolve(group, "is_symmetric")
    if not isinstance(pg, ProcessGroup):
        return False
    from .buffers import as_buffer

    buf = as_buffer(array, name="array", caller="is_symmetric", rank=_api._rank(),
                    writable=False)
    return pg.symmetric.find(buf.flat) is not None
