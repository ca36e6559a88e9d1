"""The tiny-call lane's gather and scatter roots whose pieces differ in size (Gatherv, Scatterv).

Theory of operation
-------------------
The lane's gather and scatter (:meth:`meshcast.lanes.TinyCallLane.gather`,
:meth:`~meshcast.lanes.TinyCallLane.scatter`) hold one program per shape of the
rank's own array, whose root takes a list of pieces like that array: the compiled
interpreter refuses any other list (status 5, nothing done). A root whose pieces
differ in size (rank q sends or receives ``sizes[q]`` elements) comes here instead of
the general path, which took 30 us in Python where MPI's Gatherv takes 3:

* The root knows every rank's count (its pieces), so it expects each rank's own
  fingerprint exactly as the general path's would publish it (``count`` its own
  size; the root's ``extra`` the digest of all the sizes): its rooted entry agrees in
  one compiled call when every rank does.
* Its program is the collective's registered ``oneshot`` schedule flattened for those
  counts, on one array of all the pieces back to back (a staging array made per
  call): gather reads every rank's region into it and the root copies it out into
  its pieces; scatter copies the pieces into it and stages them in the root's region.
  The pieces take at most the one-shot limit, so the copies cost little.
* The other ranks need nothing new. Their own plan expects equal pieces, so their
  entry finds the root's fingerprint different and Python reads every rank's count
  (``Arena.rooted_entry``): a legal uneven call, which the lane finishes (a scatter
  rank reads its piece where the counts put it in the root's region), or the
  MismatchError every rank raises.

Sizes too large for the one-shot regions, async calls and roots without the compiled
interpreter keep the general path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops
from ._fingerprint import counts_hash
from .algorithms import _select as _fast
from .paths.oneshot import resume_program

# (the lane is meshcast.lanes.TinyCallLane, which imports this module)
TinyCallLane = Any


@dataclass(frozen=True)
class RootPlan:
    """One shape of an uneven gather's or scatter's root."""

    tails: tuple[bytes, ...]  # every rank's own fingerprint tail, as its general path's
    packed: bytes  # the registered oneshot schedule's program for these counts
    entry: tuple  # its rooted entry (tails, root, exposure)
    bounds: tuple[int, ...]  # where each rank's piece starts, the pieces back to back


def sizes_of(pieces: Any, dtype: np.dtype, n: int, writable: bool) -> tuple[int, ...] | None:
    """The element counts of a root's list of ``n`` C-contiguous arrays of ``dtype``
    (``writable``: every one), or None where the general path must judge the list."""
    if type(pieces) is not list or len(pieces) != n:
        return None
    sizes = []
    for p in pieces:
        if (type(p) is not np.ndarray or p.dtype != dtype or not p.flags.c_contiguous
                or writable and not p.flags.writeable):
            return None
        sizes.append(p.size)
    return tuple(sizes)


def plan(lane: TinyCallLane, kind: str, dtype: np.dtype, sizes: tuple[int, ...], root: int
         ) -> RootPlan | bool:
    """The root plan of a ``kind`` ("gather" or "scatter") whose rank q's piece holds
    ``sizes[q]`` elements, or False: past the one-shot sizes, or no compiled
    interpreter (the general path)."""
    group = lane.group
    isz, n = dtype.itemsize, group._size
    largest, total = max(sizes) * isz, sum(sizes) * isz
    fits = (_fast.gather_oneshot(group.caps, largest) if kind == "gather"
            else _fast.scatter_oneshot(group.caps, total, largest))
    if not fits or group.arena.compiled_program is None:
        return False
    name = ops.dtype_name(dtype)
    tails = tuple(lane._tail(kind, False, dtype=name, root=root, count=sizes[q],
                             extra=counts_hash(sizes) if q == root else 0) for q in range(n))
    whole = sum(sizes)
    n_in, n_out = (sizes[root], whole) if kind == "gather" else (whole, sizes[root])
    packed = lane._program(kind, dtype, n_in, n_out, counts=sizes, root=root)
    if packed is None:
        return False
    # (a root exposes nothing but an empty buffer, for a general path taking over: see
    # TinyCallLane._rooted_plan)
    entry = (tails, root, (0, 0) if group.transport.cma_min_bytes > 0 else None)
    bounds = tuple(sum(sizes[:q]) for q in range(n + 1))
    return RootPlan(tails, packed, entry, bounds)


def gather(lane: TinyCallLane, seq: int, inp: np.ndarray, outs: list[np.ndarray], root: int,
           ) -> bool:
    """Gather call ``seq`` (numbered, the group's queue entered) at its root ``root`` (a
    group rank) into pieces of different sizes, or False having done nothing (the
    caller hands the number back to the general path)."""
    sizes = sizes_of(outs, inp.dtype, lane.group._size, True)
    if sizes is None or sizes[root] != inp.size:
        return False
    made = lane._plan(("gather_uneven", inp.dtype, sizes, root), plan, lane, "gather",
                      inp.dtype, sizes, root)
    if not made:
        return False
    staging = np.empty(made.bounds[-1], inp.dtype)  # (per call: a plan holds no memory)
    ran = _run(lane, seq, "gather", made, inp, staging, root, outs, sizes)
    if ran is None:
        return False
    if ran:
        bounds = made.bounds
        for q, piece in enumerate(outs):
            piece.reshape(-1)[...] = staging[bounds[q]:bounds[q + 1]]
    return True


def scatter(lane: TinyCallLane, seq: int, out: np.ndarray, ins: list[np.ndarray], root: int
            ) -> bool:
    """Scatter call ``seq`` at its root ``root`` from pieces of different sizes, or False
    having done nothing (as :func:`gather`)."""
    sizes = sizes_of(ins, out.dtype, lane.group._size, False)
    if (sizes is None or sizes[root] != out.size or not out.flags.c_contiguous
            or not out.flags.writeable):
        return False
    made = lane._plan(("scatter_uneven", out.dtype, sizes, root), plan, lane, "scatter",
                      out.dtype, sizes, root)
    if not made:
        return False
    staging, bounds = np.empty(made.bounds[-1], out.dtype), made.bounds
    for q, piece in enumerate(ins):
        staging[bounds[q]:bounds[q + 1]] = piece.reshape(-1)
    return _run(lane, seq, "scatter", made, staging, out, root, ins, sizes) is not None


def _run(lane: TinyCallLane, seq: int, kind: str, made: RootPlan, inp: np.ndarray,
         out: np.ndarray, root: int, pieces: list[np.ndarray], sizes: tuple[int, ...]
         ) -> bool | None:
    """The root's program, its entry finished in Python where the compiled call could
    not (a rank late; a fingerprint that differs: the MismatchError every rank raises).
    True: the program ran; None: the interpreter refused the buffers, nothing done;
    False: the general path finished the call from its entry."""
    group = lane.group
    arena = group.arena
    status = arena.compiled_program(seq, made.entry, arena.spin_ns, made.packed, inp, out,
                                    -1, 0)
    if status == 5:
        return None
    if status == 0:
        return True
    counts = arena.rooted_entry(seq, made.tails, lane._whats[kind], group.timeout, None,
                                None, status & 7, root, resume_program, arena, seq,
                                made.entry, made.packed, inp, out, status)
    if not counts:
        return True
    # (every rank's count differing from the root's pieces raises above; whatever else
    # the counts say, the general path from the entry on is right)
    name = ops.dtype_name(out.dtype)
    flats = [p.reshape(-1) for p in pieces]
    if kind == "gather":
        group.gather(flats, inp.reshape(-1), root, name, _nothing, expected_counts=sizes,
                     entered=(seq, counts))
    else:
        group.scatter(out.reshape(-1), inp, root, name, _nothing, expected_counts=sizes,
                      entered=(seq, counts))
    return False


def _nothing() -> None:
    """The finish of a call handed over whose buffers need no write-back."""


__all__ = ["RootPlan", "gather", "plan", "scatter", "sizes_of"]
