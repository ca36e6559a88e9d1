"""broadcast: the root's ``output`` is copied into every rank's ``output``.

Layout: ``plan.output`` is the data on every rank (source on the root,
destination elsewhere); ``plan.input`` is None. Every rank knows the count
(its own output length), so a count of 0 yields no rounds at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import topology
from ._common import others, segment_elems, slot_elems
from ._onehost import buffer_fits, closing, enter, split_copy
from ._plan import REGION, Get, Plan, Put, Recv, Round, Send, Signal, Wait
from ._registry import register


def binomial_broadcast(rank: int, size: int, root: int, buf: np.ndarray) -> Iterator[Round]:
    """Rounds of a binomial-tree broadcast of ``buf`` from ``root`` (``ceil_log2(size)`` rounds).

    Every rank yields every round (idle ranks an empty one) so round indices
    line up across ranks. Reused by all_reduce/tree.
    """
    v = topology.relative(rank, root, size)
    levels = topology.ceil_log2(size)
    for k in range(levels):
        m = 1 << (levels - 1 - k)
        if v % (2 * m) == 0 and v + m < size:
            yield Round(Send(topology.absolute(v + m, root, size), buf))
        elif v % (2 * m) == m:
            yield Round(Recv(topology.absolute(v - m, root, size), buf))
        else:
            yield Round()


@register(
    "broadcast",
    "tree",
    description="binomial tree from the root: ceil(log2 P) rounds (latency-optimal)",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Binomial-tree broadcast.

    Steps: ``L = ceil(log2 P)`` rounds. In round ``k`` every rank that already
    holds the data sends all of it to the rank ``2**(L-1-k)`` further along
    (ranks relative to the root).

    Bytes sent per rank: ``S`` per child; the root sends ``L * S``, leaves 0.

    Requires: nothing.

    Example (P=5, root 2; relative ranks in brackets): round 0: 2[0] -> 1[4];
    round 1: 2[0] -> 4[2]; round 2: 2[0] -> 3[1], 4[2] -> 0[3].
    """
    if plan.size == 1 or plan.output is None or len(plan.output) == 0:
        return
    yield from binomial_broadcast(plan.rank, plan.size, plan.root, plan.output)


@register(
    "broadcast",
    "direct",
    description="the root sends the whole buffer to every rank in one round",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct (one-to-all) broadcast.

    Steps: 1 round; the root posts ``P-1`` sends at once.

    Bytes sent per rank: root ``(P-1) S``; others 0.

    Requires: nothing (best for small ``P`` or tiny messages).
    """
    out = plan.output
    if plan.size == 1 or out is None or len(out) == 0:
        return
    if plan.rank == plan.root:
        yield Round(*(Send(q, out) for q in others(plan.rank, plan.size)))
    else:
        yield Round(Recv(plan.root, out))


@register(
    "broadcast",
    "ring",
    description="pipelined chain root -> root+1 -> ... in segments (bandwidth-optimal for large data)",
)
def ring(plan: Plan) -> Iterator[Round]:
    """Pipelined chain broadcast.

    The data is cut into segments of ``plan.segment_bytes``; relative rank
    ``v`` receives segment ``s`` from ``v-1`` in round ``s + v - 1`` and
    forwards it to ``v+1`` in round ``s + v``, so all links are busy at once.

    Steps: ``nseg + P - 2`` rounds.

    Bytes sent per rank: ``S`` (the last rank of the chain sends nothing).

    Requires: nothing.

    Example (P=3, 2 segments): round 0: 0 sends s0 -> 1; round 1: 0 sends
    s1 -> 1 while 1 sends s0 -> 2; round 2: 1 sends s1 -> 2.
    """
    out = plan.output
    p = plan.size
    if p == 1 or out is None or len(out) == 0:
        return
    segs = topology.chunks(len(out), segment_elems(plan))
    v = topology.relative(plan.rank, plan.root, p)
    prev = topology.absolute(v - 1, plan.root, p)
    nxt = topology.absolute(v + 1, plan.root, p)
    for t in range(len(segs) + p - 2):
        comms = []
        s_send, s_recv = t - v, t - v + 1
        if v < p - 1 and 0 <= s_send < len(segs):
            start, length = segs[s_send]
            comms.append(Send(nxt, out[start : start + length]))
        if v > 0 and 0 <= s_recv < len(segs):
            start, length = segs[s_recv]
            comms.append(Recv(prev, out[start : start + length]))
        yield Round(*comms)


def _arena_chunk(plan: Plan) -> int:
    return slot_elems(plan, 2)


@register(
    "broadcast",
    "arena",
    description="root publishes chunks in its slot, every rank copies them out (double-buffered)",
    family="arena",
    supports=lambda plan: _arena_chunk(plan) >= 1,
    requires="a slot of at least 2 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot broadcast.

    Slot layout (root only): two buffers of ``c`` elements, chunk ``k`` in
    buffer ``k % 2``; ``c = min(slot/2, segment)``.

    Steps per chunk ``k``: the root ``Put``s it and signals ``k+1``; every
    other rank waits for the root's ``k+1``, ``Get``s it and signals ``k+1``
    ("done reading chunk k"). Before writing chunk ``k+2`` over chunk ``k``
    the root waits for every reader's ``k+1`` (Rule 2). Readers skip the
    signals nobody waits for.

    Bytes sent per rank: root copies ``S`` into its slot; each reader copies ``S`` out.

    Requires: an arena (ranks on one host) and a slot of at least 2 elements.
    """
    out = plan.output
    p = plan.size
    if p == 1 or out is None or len(out) == 0:
        return
    c = _arena_chunk(plan)
    segs = topology.chunks(len(out), c)
    nchunks = len(segs)
    readers = others(plan.root, p)
    for k, (start, length) in enumerate(segs):
        offset = (k % 2) * c * plan.itemsize
        view = out[start : start + length]
        if plan.rank == plan.root:
            steps = [Wait(readers, k - 1)] if k >= 2 else []
            steps += [Put(offset, view), Signal(k + 1)]
        else:
            steps = [Wait((plan.root,), k + 1), Get(plan.root, offset, view)]
            if k + 2 < nchunks:  # the root waits for this before reusing the buffer
                steps.append(Signal(k + 1))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "broadcast",
    "oneshot",
    description="the root's data through its one-shot region and one entry; the others copy it out",
    supports=buffer_fits,
    requires="the buffer fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot broadcast (paths/oneshot.broadcast; chosen by ``_select.oneshot``).

    Steps: 1 round: the root ``Put``s its data into its one-shot region; every
    rank ``Enter``s, one-sided: the root awaits nobody, every other rank the
    root only; every other rank ``Get``s the data from the root's region (the
    interpreter copies it as the root stages it, if large).

    Bytes sent per rank: root ``S`` into its region; every other rank reads ``S``.

    Requires: ``S`` fits a one-shot region.
    """
    root = plan.root == plan.rank
    yield Round(then=enter(plan, stage=plan.output if root else None,
                           awaits=() if root else (plan.root,))
                + ([] if root or not len(plan.output) else [Get(plan.root, 0, plan.output, REGION)]))


def _reader_split(plan: Plan) -> Iterator[Round]:
    """Expose my buffer, enter, copy reader-split (``_onehost.split_copy``), close."""
    data = plan.output.reshape(-1).view(np.uint8)
    yield Round(then=enter(plan, expose=data) + split_copy(plan, data) + closing(plan))


@register(
    "broadcast",
    "cma",
    description="single-copy: each reader copies the root's buffer straight, the root writes "
                "a part of each reader's",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy broadcast (run as a program: paths/single_copy.CopyPrograms; ``_select.single_copy``).

    Steps: 1 round: every rank ``Expose``s its buffer and ``Enter``s. Reader
    ``q``'s copy is cut in ``P`` parts: the root ``Write``s part ``q`` into
    it while ``q`` ``Get``s the other parts from the root, so the root's core
    copies too; the closing signal and wait.

    Bytes sent per rank: root ``S (P-1)/P`` written; reader ``S (P-1)/P`` read.

    Requires: a host that lets members read each other's memory.
    """
    yield from _reader_split(plan)


@register(
    "broadcast",
    "symmetric",
    description="on a symmetric allocation: the single-copy program, with plain loads and stores",
    family="symmetric",
)
def symmetric(plan: Plan) -> Iterator[Round]:
    """Symmetric broadcast (run as a program: paths/symmetric.py).

    Steps: the single-copy broadcast's (see broadcast/cma): enter, the root
    writes part ``q`` of reader ``q``'s part while ``q`` copies the others from
    the root's part, close; every part is mapped by every rank, so no system
    call and no exposure beyond the allocation.

    Bytes sent per rank: as broadcast/cma.

    Requires: the buffer in a symmetric allocation (``meshcast.empty``).
    """
    yield from _reader_split(plan)
