"""Program fragments the one-host fast paths share (one-shot, single-copy "cma", symmetric).

Each collective module writes its fast paths as described schedules (see
``_plan``'s "The one-host fast paths") beside ring, tree and arena; what
several of them do alike lives here, once: the entry with what is staged or
exposed before it, the closing round of the single-copy and symmetric paths
(Rule 4), the reader-split copy of a broadcast, every rank's piece reduced
while reading, and all_to_all's split header. Like the algorithms, it
imports only ``_plan``, rank math and NumPy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..topology import rotation
from ._common import piece_counts
from ._plan import (
    EXPOSED,
    REGION,
    Enter,
    Expose,
    Get,
    LocalStep,
    Plan,
    Put,
    ReduceSlots,
    Signal,
    Wait,
    Write,
)


def buffer_fits(plan: Plan) -> bool:
    """The call's buffer (broadcast, reduce, all_reduce) fits a one-shot region."""
    return plan.count * plan.itemsize <= plan.region_bytes


def piece_fits(plan: Plan) -> bool:
    """The largest rank's piece (gather, all_gather) fits a one-shot region."""
    return max(piece_counts(plan), default=0) * plan.itemsize <= plan.region_bytes


def pieces_fit(plan: Plan) -> bool:
    """All pieces together (the scatter root's input, a reduce_scatter input) fit a region."""
    return sum(piece_counts(plan)) * plan.itemsize <= plan.region_bytes


def enter(plan: Plan, *, stage: np.ndarray | None = None, expose: np.ndarray | None = None,
          before: Sequence[LocalStep] = (), awaits: tuple[int, ...] | None = None
          ) -> list[LocalStep]:
    """Stage ``stage`` in my one-shot region and/or expose ``expose``, then ``Enter``:
    what the runtime does before and in the call's entry (``before``: steps of my own
    that go first, e.g. all_to_all's header; ``awaits``: the ranks a one-sided entry
    waits for, None: every rank)."""
    steps: list[LocalStep] = list(before)
    if stage is not None and stage.nbytes:
        steps.append(Put(0, stage, REGION))
    if expose is not None:
        steps.append(Expose(expose))
    steps.append(Enter(awaits))
    return steps


def closing(plan: Plan, phase: int = 1) -> list[LocalStep]:
    """Signal ``phase`` and wait for every rank's: nobody returns (and reuses its buffer)
    while a peer may still read or write it (Rule 4; paths/single_copy.run's last round)."""
    return [Signal(phase), Wait(tuple(range(plan.size)), phase)]


def split_copy(plan: Plan, data: np.ndarray) -> list[LocalStep]:
    """Broadcast ``data`` (every rank's exposed bytes) from the root, reader-split: reader
    q's copy is cut in P parts; the root writes part q into q while q reads the others
    from the root, so the root's core copies too (broadcast/cma)."""
    n, me, root = plan.size, plan.rank, plan.root
    if me == root:
        return [Write(q, lo, data[lo:lo + length])
                for q in rotation(me, n)[1:] for lo, length in parts(data.nbytes, n, (q,))]
    return [Get(root, lo, data[lo:lo + length], EXPOSED)
            for lo, length in parts(data.nbytes, n, rotation(me, n)[1:])]


def parts(nbytes: int, n: int, which: Sequence[int]) -> list[tuple[int, int]]:
    """``(lo, length)`` of each part k in ``which`` of ``nbytes`` cut in ``n`` parts (part k:
    bytes ``[nbytes * k // n, nbytes * (k + 1) // n)``), empty ones left out: the cut of
    a reader-split copy (:func:`split_copy`, a gather or scatter root that splits)."""
    bounds = [nbytes * k // n for k in range(n + 1)]
    return [(bounds[k], bounds[k + 1] - bounds[k]) for k in which if bounds[k + 1] > bounds[k]]


def reduce_all(plan: Plan, dst: np.ndarray, lo: int, space: str,
               own: np.ndarray | None = None) -> list[LocalStep]:
    """``dst`` = elements ``[lo, lo + len(dst))`` of every rank's region or exposed buffer,
    reduced in rank order (bitwise the same on every rank that reduces them); ``own``, if
    given, is my operand in place of my own region's (see ReduceSlots)."""
    if not len(dst):
        return []
    return [ReduceSlots(dst, tuple(range(plan.size)), lo * plan.itemsize, space, own)]


def split_head(n: int) -> int:
    """Bytes of all_to_all's split header in front of the staged data of a one-shot region
    (``3 n`` int64: offsets of my pieces, send counts, receive counts), padded to a page
    (paths/oneshot.split_header is its layout).

    Why a page: the string move that copies the input in (transport/_copy.h) slows down
    where its destination lies 1-63 bytes past its source modulo 4 KiB, and the header
    used to end there for the commonest sources: 48 bytes at 2 ranks, past a NumPy
    array's 16 (page + 16) and a torch tensor's 0. Copying 128 KiB into a region the other
    core had read took 2.5 us at such a distance against 1.3 (the cores trading a cache
    line in ~100 ns), and 16.4 against 3.0 (~500 ns); a 2-rank all_to_all of 128 KiB ran
    12.3 us against 6.3 (stop 74, /tmp/s74/dist.c, a2a4.py). A page-aligned start meets
    the same page offset as the region's other data (an all_reduce's, at 0): only sources
    1-63 bytes short of a page end still fall in that window."""
    return (24 * n + 4095) // 4096 * 4096


def publish_header(send: Sequence[int], recv: Sequence[int], send_displs: Sequence[int]
                   ) -> Put:
    """My all_to_all split header into my one-shot region (every path of all_to_all
    publishes it, paths/oneshot.all_to_all): where my piece for each rank lies in my
    input, my send counts, my receive counts. (Read-only: a program publishes it as a
    constant, _program.flatten.)"""
    header = np.array([*send_displs[:-1], *send, *recv], dtype=np.int64)
    header.flags.writeable = False
    return Put(0, header, REGION)


def read_headers(plan: Plan, mine: np.ndarray) -> tuple[list[np.ndarray], list[LocalStep]]:
    """Buffers for every rank's split header and the Gets that fill them (after the entry;
    the group checks them against each other, on every path). Until then each holds
    ``mine`` (my header): what a program flattened on a presumption (equal splits)
    expects every rank to have published (_program.flatten)."""
    heads = [np.array(mine) for _ in range(plan.size)]
    return heads, [Get(q, 0, heads[q], REGION) for q in range(plan.size)]


def offsets_of_mine(plan: Plan, heads: Sequence[np.ndarray]) -> list[int]:
    """Where my piece lies in each rank's input (bytes), read from their headers."""
    return [int(h[plan.rank]) * plan.itemsize for h in heads]


__all__ = ["buffer_fits", "closing", "enter", "piece_fits", "pieces_fit", "offsets_of_mine", "read_headers", "reduce_all", "split_copy",
           "publish_header", "split_head"]
