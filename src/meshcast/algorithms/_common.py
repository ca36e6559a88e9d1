"""Small helpers shared by the collective modules: buffer views, copies, counts, arena chunking.

Nothing here performs I/O; like the algorithms, it imports only ``_plan`` and NumPy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._plan import Copy, Plan


def as_bytes(a: np.ndarray) -> np.ndarray:
    """A contiguous array's bytes, as a flat uint8 view."""
    return a.reshape(-1).view(np.uint8)


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """True if ``a`` and ``b`` are the very same bytes (so copying one to the other is a no-op).

    Raises:
        AssertionError: they overlap without being identical; no schedule
            supports that layout (the group stages such calls).
    """
    if a.nbytes == 0 or b.nbytes == 0:
        return a.nbytes == b.nbytes
    if not np.may_share_memory(a, b):
        return False
    same = (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.nbytes == b.nbytes
    )
    assert same, "buffers overlap partially; stage one of them first"
    return same


def copy_steps(dst: np.ndarray | None, src: np.ndarray | None) -> list[Copy]:
    """``[Copy(dst, src)]``, or ``[]`` when there is nothing to move (empty or same memory)."""
    if dst is None or src is None or len(dst) == 0 or same_memory(dst, src):
        return []
    return [Copy(dst, src)]


def split(buf: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    """Consecutive views of ``buf`` with the given lengths."""
    out, start = [], 0
    for c in counts:
        out.append(buf[start : start + c])
        start += c
    return out


def displs(counts: Sequence[int]) -> list[int]:
    """Exclusive prefix sums of ``counts``, plus the total as a last element."""
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


def piece_counts(plan: Plan) -> tuple[int, ...]:
    """Per-rank counts of gather/all_gather/scatter/reduce_scatter.

    ``plan.counts`` when given; otherwise equal pieces derived from this
    rank's own buffer (the group always passes counts; this keeps simple
    callers and the CLI simulator short).
    """
    if plan.counts is not None:
        return tuple(plan.counts)
    if plan.coll in ("gather", "all_gather"):
        n = 0 if plan.input is None else len(plan.input)
    elif plan.coll in ("scatter", "reduce_scatter"):
        n = 0 if plan.output is None else len(plan.output)
    else:
        raise ValueError(f"{plan.coll} has no per-rank counts")
    return (n,) * plan.size


def segment_elems(plan: Plan) -> int:
    """Elements in one pipelined segment (at least 1)."""
    return max(1, plan.segment_bytes // plan.itemsize)


def slot_elems(plan: Plan, parts: int) -> int:
    """Elements per part when a slot holds ``parts`` equal parts, capped by the segment size.

    Double-buffered layouts pass ``parts = 2 * k`` for ``k`` parts per buffer.
    Returns 0 when even one element per part does not fit.
    """
    per = plan.slot_bytes // (parts * plan.itemsize)
    cap = max(1, plan.segment_bytes // ((parts // 2 or 1) * plan.itemsize))
    return min(per, cap)


def others(rank: int, size: int) -> tuple[int, ...]:
    """Every rank but ``rank``, ascending."""
    return tuple(q for q in range(size) if q != rank)


def empty(dtype: np.dtype) -> np.ndarray:
    """A zero-length array (the payload of a 0-byte message)."""
    return np.empty(0, dtype=dtype)


__all__ = [
    "copy_steps",
    "displs",
    "empty",
    "others",
    "piece_counts",
    "same_memory",
    "segment_elems",
    "slot_elems",
    "split",
]
