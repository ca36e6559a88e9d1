"""The tiny-call lane's ``all_to_all_single`` with uneven split sizes (MoE's token exchange).

Theory of operation
-------------------
The lane's even all_to_all (:meth:`meshcast.lanes.TinyCallLane.all_to_all`) finishes a
call in one compiled entry when every rank's split header is its own. Uneven splits
differ from rank to rank by design, and so do the ranks' fingerprints (their ``count``
is their own input's size). So a call here takes two compiled calls (``_tiny.c``):

1. ``rooted`` stages and enters, in the bytes of the general path
   (``calls.all_to_all``): my split header, then my input, in my one-shot region of the
   call's parity, my fingerprint, and my input exposed for single-copy reads;
2. ``splits``, once every rank is in, checks that every fingerprint equals mine but for
   the count, that every rank sends each the count that rank expects, and that every
   input was staged, and copies my piece from every rank's region into the output.

Where step 2 finds something, Python finds out what, as the general path does: the
MismatchError every rank raises (``Arena.compare_entered``,
``paths.oneshot.split_offsets``), or, where some rank's input was too large to stage,
the general path's single-copy reads (one more compiled call, as the even lane's), or,
where the members cannot read each other's memory, the general path from the entry on.

What a call shape needs (header, fingerprint tail, offsets) is made once per shape
(:func:`plan`): the lane's plan cache, keyed by the split sizes too.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops
from .algorithms import _select as _fast
from .paths import GroupView, single_copy
from .paths.oneshot import pack_split_header, split_head, split_offsets
from .topology import rotation
from .transport.arena import _COUNT
from .work import Work

# One int64 of a split header (paths.oneshot.split_header): where a rank's piece for me starts.
_OFFSET = struct.Struct("<q")


@dataclass(frozen=True)
class UnevenPlan:
    """One shape of an uneven all_to_all_single (element counts and byte offsets)."""

    tails: tuple[bytes, ...]  # what the compiled entry expects of each rank: my tail
    header: bytes  # my split header: offsets of my pieces, send counts, receive counts
    pad: int  # bytes between the header and the staged input
    head: int  # where the staged input starts in a region
    limit: int  # the largest input a rank stages
    send: tuple[int, ...]  # elements to each rank
    recv: tuple[int, ...]  # elements from each rank
    itemsize: int
    dtype_name: str
    at: tuple[int, ...]  # where each rank's piece starts in my output (bytes), and its end


def _rows(splits: Any, rows: int, n: int) -> tuple[int, ...] | None:
    """Split sizes (rows of dim 0 per rank; None: equal) as a tuple, or None if the
    general path must judge them (it raises, naming the argument and the rank)."""
    if splits is None or (type(splits) in (list, tuple) and not splits):
        return (rows // n,) * n if rows % n == 0 else None
    if type(splits) not in (list, tuple) or len(splits) != n:
        return None
    if any(type(s) is not int or s < 0 for s in splits) or sum(splits) != rows:
        return None
    return tuple(splits)


def plan(group: GroupView, out: np.ndarray, inp: np.ndarray, out_splits: Any, in_splits: Any,
         tail: bytes) -> UnevenPlan | bool:
    """What :func:`run` needs for this shape, or False: the general path (it also raises
    what is wrong with the call). ``tail``: the general path's fingerprint of the call
    less its sequence number (the forms meet: a rank may take either); the caller
    checked that the lane moves ``inp``'s dtype."""
    n, me = group._size, group._rank
    dtype = inp.dtype
    if (n < 2 or group.arena.compiled_splits is None or out.dtype != dtype
            or not inp.shape or not out.shape or not inp.shape[0] or not out.shape[0]
            or inp.shape[1:] != out.shape[1:]):
        return False
    row = inp.size // inp.shape[0]
    sent = _rows(in_splits, inp.shape[0], n)
    got = _rows(out_splits, out.shape[0], n)
    if sent is None or got is None or sent[me] != got[me]:
        return False
    send = tuple(s * row for s in sent)
    recv = tuple(s * row for s in got)
    isz = dtype.itemsize
    header = pack_split_header(send, recv)
    head = split_head(n)
    return UnevenPlan((tail,) * n, header, head - len(header), head,
                      _fast.all_to_all_direct_limit(group.caps, head), send, recv, isz,
                      ops.dtype_name(dtype),
                      tuple(x * isz for x in itertools.accumulate(recv, initial=0)))


def _enter(group: GroupView, seq: int, inp: np.ndarray, p: UnevenPlan) -> int:
    """Stage, expose and enter call ``seq`` in one compiled call: its status (0 every
    fingerprint is mine, 1 all in but some differs, else see ``_tiny.c``)."""
    arena = group.arena
    data = (p.header, p.pad, inp) if inp.nbytes <= p.limit else p.header
    exposure = inp if group.transport.cma_min_bytes > 0 else None
    return arena.compiled_rooted(seq, p.tails, data, arena.spin_ns, exposure)


def _finish(group: GroupView, what: Any, seq: int, status: int, out: np.ndarray,
            inp: np.ndarray, p: UnevenPlan) -> None:
    """Call ``seq`` after its compiled entry returned ``status``: the rest of the entry,
    then the checks and copies out in one compiled call; where those find something,
    the MismatchError every rank raises, or the general path from the entry on."""
    arena = group.arena
    if status not in (0, 1):  # (0 and 1: every rank is in)
        arena.finish_entry(seq, b"", what, time.monotonic() + group.timeout, status)
    found = arena.compiled_splits(seq, out, p.head, p.itemsize, p.limit, _COUNT)
    if found == 0:
        group.last_algorithm = "all_to_all/oneshot"
        return
    n, me, parity = group._size, group._rank, seq & 1
    if found == 3 and group.caps.single_copy:
        # Every rank agrees on the call and on every split size, and some input was too
        # large to stage (past all_to_all_direct_limit: all_to_all_single_copy's rule):
        # single-copy, as the general path's (calls.all_to_all), my piece read from
        # where each rank's header says it lies in its input.
        group.last_algorithm = "all_to_all/cma"
        isz, at = p.itemsize, p.at
        reads = tuple((q, _OFFSET.unpack_from(arena.small[q][parity], 8 * me)[0] * isz,
                       at[q + 1] - at[q], at[q]) for q in rotation(me, n))
        single_copy.run_reads(group, seq, what, out, inp, reads)
        return
    if status in (0, 1):  # the arena learns the call (its seq, deadline and name)
        arena.finish_entry(seq, b"", what, time.monotonic() + group.timeout, status)
    counts = arena.compare_entered(seq, True)  # a call that differs raises here (1)
    if found == 3:  # (without single-copy reads: the general path, from the entry on)
        group.all_to_all(out.reshape(-1), inp.reshape(-1), p.send, p.recv, p.dtype_name,
                         _nothing, entered=(seq, counts))
        return
    # split sizes that disagree raise here (2)
    split_offsets(group, seq, [arena.small[q][parity] for q in range(n)], p.itemsize)
    raise RuntimeError(f"all_to_all #{seq}: the compiled split check found {found}, "
                       f"which Python does not")


def run(group: GroupView, what: Any, out: np.ndarray, inp: np.ndarray, p: UnevenPlan
        ) -> bool:
    """The call (``what`` names it), inline; False (nothing done) while async work is
    queued."""
    fifo = group.fifo
    if not fifo.enter_inline():
        return False
    try:
        seq = next(group._seq)
        _finish(group, what, seq, _enter(group, seq, inp, p), out, inp, p)
    except BaseException as exc:
        fifo.leave_inline(exc)
        raise
    fifo.leave_inline(None)
    return True


def run_async(group: GroupView, what: Any, out: np.ndarray, inp: np.ndarray, p: UnevenPlan,
              then: Callable[[], None] | None = None) -> Work | None:
    """The call with ``async_op=True``: entered here; finished here when every rank was
    in within the spin time, else by the worker thread, ahead of the calls queued
    behind it. ``then``: run once ``out`` holds the result, before the Work completes.
    None (nothing done) while async work is queued."""
    fifo = group.fifo
    if not fifo.enter_inline():
        return None
    try:
        seq = next(group._seq)
        status = _enter(group, seq, inp, p)
        if status not in (0, 1) or inp.nbytes > _fast.ASYNC_INLINE_MAX_BYTES:
            # the others are not all in yet (the worker waits), or the call moves more
            # than an async call moves inline (_select.ASYNC_INLINE_MAX_BYTES)
            def finish() -> None:
                _finish(group, what, seq, status, out, inp, p)
                if then is not None:
                    then()
            return fifo.hand_over(finish, Work(what))
        _finish(group, what, seq, status, out, inp, p)
    except BaseException as exc:
        fifo.leave_inline(exc)
        raise
    fifo.leave_inline(None)
    if then is not None:
        then()
    return Work.finished(what)


def _nothing() -> None:
    """The finish of a call whose buffers need no write-back."""
