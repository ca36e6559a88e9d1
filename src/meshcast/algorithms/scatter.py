"""scatter: rank ``q``'s ``output`` gets piece ``q`` of the root's ``input``.

Layout: on the root ``plan.input`` holds ``sum(counts)`` elements (piece ``q``
at ``displs[q]``), elsewhere None; ``plan.output`` is my piece
(``counts[rank]`` elements). Counts may differ and may be 0. The root may
pass its output as the view of its own piece of the input (in place).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import topology
from ._common import copy_steps, displs, others, piece_counts, slot_elems
from ._onehost import closing, enter, parts, pieces_fit
from ._plan import (
    EXPOSED,
    REGION,
    Get,
    LocalStep,
    Plan,
    Put,
    Recv,
    Round,
    Send,
    Signal,
    Wait,
    Write,
)
from ._registry import register
from .gather import relative_displs, subtree_views


@register("scatter", "direct", description="the root sends every rank its piece in one round")
def direct(plan: Plan) -> Iterator[Round]:
    """Direct (one-to-all) scatter.

    Steps: 1 round; the root posts ``P-1`` sends straight from its input.

    Bytes sent per rank: root ``S - counts[root]``; others 0.

    Requires: nothing; uneven and zero counts allowed.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    if r != root:
        if counts[r]:
            yield Round(Recv(root, plan.output))
        return
    d = displs(counts)
    x = plan.input
    sends = [Send(q, x[d[q] : d[q + 1]]) for q in others(r, p) if counts[q]]
    yield Round(*sends, then=copy_steps(plan.output, x[d[r] : d[r + 1]]))


@register(
    "scatter",
    "tree",
    description="binomial tree from the root; each subtree's pieces travel as one message",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Binomial-tree scatter with uneven counts (the mirror of gather/tree).

    Relative rank ``v`` receives its whole subtree's pieces (relative ranks
    ``[v, v + lowbit(v))``, in relative order) from its parent, keeps its own
    and forwards the children's subtrees. Messages from the root are split
    where the subtree wraps past rank ``P-1`` (the root's input is in
    absolute order).

    Steps: ``ceil(log2 P)`` rounds; in round ``k`` every holder ``v`` with
    ``v % 2m == 0`` sends to ``v + m``, ``m = 2**(L-1-k)``.

    Bytes sent per rank: the sum of its children's subtrees (the root
    ``S - counts[root]``; leaves 0).

    Requires: nothing; uneven and zero counts allowed.

    Example (P=4, root 0): round 0: 0 sends pieces 2, 3 to 2; round 1: 0
    sends piece 1 to 1 and 2 sends piece 3 to 3.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    out = plan.output
    if p == 1:
        yield Round(then=copy_steps(out, plan.input))
        return
    v = topology.relative(r, root, p)
    lo, hi = topology.binomial_subtree(v, p)
    if v == 0:
        d = displs(counts)
        buf = plan.input
        keep = copy_steps(out, buf[d[r] : d[r + 1]])
    elif hi - lo == 1:
        buf, keep = out, []  # a leaf receives its piece straight into its output
    else:
        rd = relative_displs(p, root, counts)
        buf = plan.scratch(rd[hi] - rd[lo])
        keep = copy_steps(out, buf[: counts[r]])
    layout = {"root": root, "size": p, "counts": counts}
    levels = topology.ceil_log2(p)
    for k in range(levels):
        m = 1 << (levels - 1 - k)
        comms: list[Send | Recv] = []
        then: list[LocalStep] = []
        if v % (2 * m) == 0 and v + m < p:
            c_lo, c_hi = topology.binomial_subtree(v + m, p)
            child = topology.absolute(v + m, root, p)
            views = subtree_views(buf, v, c_lo, c_hi, split=v == 0, **layout)
            comms += [Send(child, view) for view in views]
        elif v % (2 * m) == m:
            parent = topology.absolute(v - m, root, p)
            views = subtree_views(buf, v, lo, hi, split=v == m, **layout)
            comms += [Recv(parent, view) for view in views]
            then += keep
        if v == 0 and k == 0:
            then += keep
        yield Round(*comms, then=then)


def _arena_stride(plan: Plan) -> int:
    """Elements per rank per buffer: two buffers of ``P`` columns each."""
    counts = piece_counts(plan)
    return min(slot_elems(plan, 2 * plan.size), max(counts, default=0))


@register(
    "scatter",
    "arena",
    description="root publishes chunks of every piece in its slot, each rank copies its own out",
    family="arena",
    supports=lambda plan: slot_elems(plan, 2 * plan.size) >= 1,
    requires="a slot of at least 2 elements per rank",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot scatter.

    Slot layout (root only): two buffers (chunk parity) of ``P`` columns of
    ``c`` elements; column ``q`` of buffer ``k % 2`` holds elements
    ``[k c, (k+1) c)`` of piece ``q``, so every rank copies in parallel.

    Steps: for each chunk ``k`` the root ``Put``s the chunk of every piece
    that has one and signals ``k+1``; rank ``q`` waits for the root's ``k+1``,
    ``Get``s its column and, if it has a chunk ``k+2`` coming, signals
    ``k+1``; the root waits for exactly those signals before it rewrites the
    columns of chunk ``k+2`` (Rule 2). The root copies its own piece
    locally. With equal counts that fit one chunk the root's whole input is
    one ``Put``.

    Bytes sent per rank: root ``S`` into its slot; rank ``q`` copies out ``counts[q]``.

    Requires: an arena; a slot of at least ``2 P`` elements.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    out = plan.output
    if p == 1:
        yield Round(then=copy_steps(out, plan.input))
        return
    c = _arena_stride(plan)
    if c == 0:
        return  # every piece is empty
    isz = plan.itemsize
    nchunks = [topology.ceil_div(n, c) for n in counts]
    if r != root:
        for k, (start, length) in enumerate(topology.chunks(counts[r], c)):
            offset = ((k % 2) * p + r) * c * isz
            steps: list[LocalStep] = [
                Wait((root,), k + 1),
                Get(root, offset, out[start : start + length]),
            ]
            if k + 2 < nchunks[r]:
                steps.append(Signal(k + 1))
            yield Round(then=steps)
        return
    x = plan.input
    d = displs(counts)
    yield Round(then=copy_steps(out, x[d[r] : d[r + 1]]))
    rest = others(r, p)
    whole = len(set(counts)) == 1 and nchunks[0] == 1  # columns are then exactly the input
    for k in range(max((nchunks[q] for q in rest), default=0)):
        writers = tuple(q for q in rest if nchunks[q] > k)
        steps = [Wait(writers, k - 1)] if k >= 2 else []
        if whole:
            steps.append(Put(0, x))
        for q in () if whole else writers:
            start = d[q] + k * c
            stop = min(d[q + 1], start + c)
            steps.append(Put(((k % 2) * p + q) * c * isz, x[start:stop]))
        steps.append(Signal(k + 1))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "scatter",
    "oneshot",
    description="the root's pieces through its one-shot region and one entry; each copies its own out",
    supports=pieces_fit,
    requires="the root's input fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot scatter (paths/oneshot.scatter, decided after the entry: ``_select.scatter_oneshot``).

    Steps: 1 round: the root ``Put``s every other rank's piece into its one-shot
    region, each where it lies in its input (staged before the entry); every rank
    ``Enter``s, one-sided: the root awaits nobody, every other rank the root
    only; every other rank ``Get``s its piece from the root's region (the
    interpreter copies it as the root stages it, if large), the root copies its
    own straight from its input.

    Bytes sent per rank: the root's input but its own piece into its region;
    every rank reads its piece.

    Requires: the root's input fits a one-shot region.
    """
    me, root = plan.rank, plan.root
    d = displs(piece_counts(plan))
    if me == root:
        inp, isz = plan.input, plan.itemsize
        puts = [Put(lo * isz, inp[lo:hi], REGION) for lo, hi in ((0, d[me]), (d[me + 1], d[-1]))
                if hi > lo]
        steps = (enter(plan, before=puts, awaits=())
                 + copy_steps(plan.output, inp[d[me]:d[me + 1]]))
    else:
        steps = enter(plan, awaits=(root,)) + (
            [Get(root, d[me] * plan.itemsize, plan.output, REGION)] if len(plan.output) else [])
    yield Round(then=steps)


@register(
    "scatter",
    "cma",
    description="single-copy: each rank reads its piece straight from the root's exposed input",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy scatter (``_select.scatter_oneshot``, ``single_copy``).

    Steps: 1 round: the root ``Expose``s its input, the others their output;
    every rank ``Enter``s; every other rank ``Get``s its piece straight from the
    root's input, the root copies its own; the closing signal and wait.

    With ``plan.root_splits`` (a root whose output is its own piece of the input, in
    place, so it has nothing of its own to copy): rank q's piece is cut in ``P``
    parts; the root ``Write``s part q of each rank q's piece into q's exposed output
    while q ``Get``s the other parts, so the root's core copies too.

    Bytes sent per rank: every rank reads its piece once (with ``root_splits``, all
    but one ``P``-th of it, which the root writes).

    Requires: a host that lets members read each other's memory.

    When the root's scatter_list pieces do not lie back to back (the plan's input
    always does), the runtime's root exposes a table of where each lies
    (``single_copy.piece_table``), which addresses them as if back to back.
    """
    me, root, n, isz = plan.rank, plan.root, plan.size, plan.itemsize
    counts = piece_counts(plan)
    d = displs(counts)
    if me == root:
        exposed = plan.input
        inp = plan.input.view(np.uint8)
        moves: list[LocalStep] = (
            [Write(q, lo, inp[d[q] * isz + lo:d[q] * isz + lo + length])
             for q in topology.rotation(me, n)[1:]
             for lo, length in parts(counts[q] * isz, n, (q,))] if plan.root_splits
            else copy_steps(plan.output, plan.input[d[me]:d[me + 1]]))
    else:
        exposed = plan.output
        out = plan.output.view(np.uint8)
        moves = ([Get(root, d[me] * isz + lo, out[lo:lo + length], EXPOSED)
                  for lo, length in parts(out.nbytes, n, topology.rotation(me, n)[1:])]
                 if plan.root_splits else
                 [Get(root, d[me] * isz, plan.output, EXPOSED)] if len(plan.output) else [])
    yield Round(then=enter(plan, expose=exposed) + moves + closing(plan))
