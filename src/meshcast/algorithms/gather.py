"""gather: the root's ``output`` gets every rank's ``input``, in rank order.

Layout: ``plan.input`` is my piece (``counts[rank]`` elements); on the root
``plan.output`` holds ``sum(counts)`` elements (piece ``q`` at
``displs[q]``), elsewhere it is None. Counts may differ between ranks and may
be 0; every rank knows all of them (``plan.counts``). The root may pass its
input as the view of its own place in the output (in place).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import topology
from ._common import copy_steps, displs, others, piece_counts, slot_elems
from ._onehost import closing, enter, parts, piece_fits
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


def root_runs(lo: int, hi: int, root: int, size: int) -> list[tuple[int, int]]:
    """Absolute rank ranges covered by the relative range ``[lo, hi)``, in relative order.

    A subtree is contiguous in relative ranks but may wrap past rank
    ``size-1`` in absolute ranks. The root's buffer is in absolute order, so
    a message between a subtree and the root is split there into one message
    per run (both ends compute the same split; comms match in posting order).

    Example (P=5, root 3): relative ``[1, 3)`` is absolute 4, 0, so
    ``root_runs(1, 3, 3, 5) == [(4, 5), (0, 1)]``; relative ``[2, 4)`` is
    absolute 0, 1: ``[(0, 2)]``.
    """
    start = (root + lo) % size
    return topology.wrap_split(start, start + (hi - lo), size)


def relative_displs(size: int, root: int, counts: tuple[int, ...]) -> list[int]:
    """Element offsets of relative ranks ``0..size`` in a relative-order concatenation."""
    return displs([counts[topology.absolute(v, root, size)] for v in range(size)])


def subtree_views(
    buf: np.ndarray,
    owner: int,
    lo: int,
    hi: int,
    *,
    root: int,
    size: int,
    counts: tuple[int, ...],
    split: bool,
) -> list[np.ndarray]:
    """Views of ``buf`` holding the data of relative ranks ``[lo, hi)``.

    ``owner`` is the relative rank whose buffer ``buf`` is: the root's
    (``owner == 0``) is in absolute rank order and always split at the wrap
    (see :func:`root_runs`); anybody else's holds its subtree in relative
    order, split the same way when ``split`` (talking to the root). Empty
    views are left out: no 0-byte messages, and both ends drop the same ones.
    """
    if owner == 0:
        d = displs(counts)
        views = [buf[d[a] : d[b]] for a, b in root_runs(lo, hi, root, size)]
    else:
        rd = relative_displs(size, root, counts)
        base = rd[owner]
        ranges = [(lo, hi)]
        if split:
            ranges, at = [], lo
            for a, b in root_runs(lo, hi, root, size):
                ranges.append((at, at + b - a))
                at += b - a
        views = [buf[rd[a] - base : rd[b] - base] for a, b in ranges]
    return [view for view in views if len(view)]


@register("gather", "direct", description="every rank sends its piece straight to the root")
def direct(plan: Plan) -> Iterator[Round]:
    """Direct (all-to-one) gather.

    Steps: 1 round; the root posts ``P-1`` receives straight into its output.

    Bytes sent per rank: ``counts[rank]`` (root 0).

    Requires: nothing; uneven and zero counts allowed.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    if r != root:
        if counts[r]:
            yield Round(Send(root, plan.input))
        return
    d = displs(counts)
    out = plan.output
    recvs = [Recv(q, out[d[q] : d[q + 1]]) for q in others(r, p) if counts[q]]
    yield Round(*recvs, then=copy_steps(out[d[r] : d[r + 1]], plan.input))


@register(
    "gather",
    "tree",
    description="binomial tree toward the root; subtrees forward their pieces in one message",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Binomial-tree gather with uneven counts.

    Relative rank ``v`` collects its subtree (relative ranks ``[v, v +
    lowbit(v))``) in a scratch buffer in relative order and sends it to its
    parent in one message (two when the parent is the root and the subtree
    wraps past rank ``P-1``, so the root receives straight into its output).

    Steps: ``ceil(log2 P)`` rounds; in round ``k`` relative rank ``v`` with
    ``v % 2**(k+1) == 2**k`` sends to ``v - 2**k``.

    Bytes sent per rank: the sum of its subtree's counts (at most ``S/2``
    for equal counts; leaves only their piece).

    Requires: nothing; uneven and zero counts allowed.

    Example (P=5, root 3, relative 0..4 = ranks 3 4 0 1 2): round 0: 4 -> 3,
    1 -> 0; round 1: 0 sends pieces of ranks 0, 1 to 3; round 2: 2 -> 3.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    x = plan.input
    if p == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    v = topology.relative(r, root, p)
    lo, hi = topology.binomial_subtree(v, p)
    if v == 0:
        d = displs(counts)
        buf = plan.output
        first = copy_steps(buf[d[r] : d[r + 1]], x)
    elif hi - lo == 1:
        buf, first = x, []  # a leaf sends its input as is
    else:
        rd = relative_displs(p, root, counts)
        buf = plan.scratch(rd[hi] - rd[lo])
        first = copy_steps(buf[: counts[r]], x)
    layout = {"root": root, "size": p, "counts": counts}
    for k in range(topology.ceil_log2(p)):
        m = 1 << k
        then: list[LocalStep] = list(first) if k == 0 else []
        comms: list[Send | Recv] = []
        if v % (2 * m) == m:
            parent = topology.absolute(v - m, root, p)
            views = subtree_views(buf, v, lo, hi, split=v == m, **layout)
            comms += [Send(parent, view) for view in views]
        elif v % (2 * m) == 0 and v + m < p:
            c_lo, c_hi = topology.binomial_subtree(v + m, p)
            child = topology.absolute(v + m, root, p)
            views = subtree_views(buf, v, c_lo, c_hi, split=v == 0, **layout)
            comms += [Recv(child, view) for view in views]
        yield Round(*comms, then=then)


@register(
    "gather",
    "arena",
    description="ranks publish their piece in chunks in their own slot, the root copies them out",
    family="arena",
    supports=lambda plan: slot_elems(plan, 2) >= 1,
    requires="a slot of at least 2 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot gather.

    Slot layout (non-roots): two buffers of ``c`` elements; chunk ``k`` of my
    piece goes to buffer ``k % 2``.

    Steps: rank ``q`` (``K_q = ceil(counts[q]/c)`` chunks) puts chunk ``k``
    and signals ``k+1``; before chunk ``k >= 2`` it waits for the root's
    ``k-1`` (the root signals ``j+1`` once it has read everybody's chunk
    ``j``). The root, for each ``k``, waits for the ranks that have a chunk
    ``k``, ``Get``s them, and signals ``k+1`` if anyone still has a chunk
    ``k+2``. The root copies its own piece locally.

    Bytes sent per rank: ``counts[q]`` into my slot; the root copies out ``S``.

    Requires: an arena; a slot of at least 2 elements.
    """
    p, r, root = plan.size, plan.rank, plan.root
    counts = piece_counts(plan)
    x = plan.input
    if p == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    c = slot_elems(plan, 2)
    isz = plan.itemsize
    nchunks = [topology.ceil_div(n, c) for n in counts]
    if r != root:
        for k, (start, length) in enumerate(topology.chunks(counts[r], c)):
            steps: list[LocalStep] = [Wait((root,), k - 1)] if k >= 2 else []
            steps += [Put((k % 2) * c * isz, x[start : start + length]), Signal(k + 1)]
            yield Round(then=steps)
        return
    d = displs(counts)
    out = plan.output
    yield Round(then=copy_steps(out[d[r] : d[r + 1]], x))
    rest = others(r, p)
    for k in range(max((nchunks[q] for q in rest), default=0)):
        senders = tuple(q for q in rest if nchunks[q] > k)
        steps = [Wait(senders, k + 1)]
        for q in senders:
            start = d[q] + k * c
            stop = min(d[q + 1], start + c)
            steps.append(Get(q, (k % 2) * c * isz, out[start:stop]))
        if any(nchunks[q] > k + 2 for q in rest):
            steps.append(Signal(k + 1))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "gather",
    "oneshot",
    description="every piece through its owner's one-shot region and one entry; the root copies them out",
    supports=piece_fits,
    requires="every piece fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot gather (paths/oneshot.gather, decided after the entry: ``_select.gather_oneshot``).

    Steps: 1 round: every rank but the root ``Put``s its piece into its
    one-shot region (before the entry: the runtime stages it when its own piece
    is small and, after the entry, takes this path if every rank did);
    ``Enter``; the root copies its own piece and ``Get``s every other from its
    owner's region.

    Bytes sent per rank: my piece into my region; the root reads ``P-1`` pieces.

    Requires: every piece fits a one-shot region.
    """
    me, root = plan.rank, plan.root
    steps = enter(plan, stage=None if me == root else plan.input)
    if me == root:
        d, out = displs(piece_counts(plan)), plan.output
        steps += copy_steps(out[d[me]:d[me + 1]], plan.input)
        steps += [Get(q, 0, out[d[q]:d[q + 1]], REGION) for q in range(plan.size)
                  if q != me and d[q + 1] > d[q]]
    yield Round(then=steps)


@register(
    "gather",
    "cma",
    description="single-copy: every rank writes its piece straight into the root's exposed output",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy gather (``_select.gather_oneshot``, ``single_copy``).

    Steps: 1 round: the root ``Expose``s its output (its pieces lie back to
    back), the others their piece, and all ``Enter``; every rank but the root
    ``Write``s its piece into the root's output, all at once; the root copies
    its own; the closing signal and wait.

    With ``plan.root_splits`` (a root whose input is its own piece of the output,
    in place, so it has nothing of its own to copy): rank q's piece is cut in
    ``P`` parts; the root ``Get``s part q of each rank q's piece from q's exposed
    input while q ``Write``s the other parts, so the root's core copies too.

    Bytes sent per rank: my piece written once (with ``root_splits``, all but one
    ``P``-th of it); the root copies only its own (or one ``P``-th of each other's).

    Requires: a host that lets members read each other's memory.

    When the root's gather_list pieces do not lie back to back (the plan's
    output always does), the runtime's root exposes a table of where each lies
    (``single_copy.piece_table``), which addresses them as if back to back: the
    same bytes, the same copies.
    """
    me, root, n, isz = plan.rank, plan.root, plan.size, plan.itemsize
    counts = piece_counts(plan)
    d = displs(counts)
    if me == root:
        exposed = plan.output
        out = plan.output.view(np.uint8)
        moves: list[LocalStep] = (
            [Get(q, lo, out[d[q] * isz + lo:d[q] * isz + lo + length], EXPOSED)
             for q in topology.rotation(me, n)[1:]
             for lo, length in parts(counts[q] * isz, n, (q,))] if plan.root_splits
            else copy_steps(plan.output[d[me]:d[me + 1]], plan.input))
    else:
        exposed = plan.input
        mine = plan.input.view(np.uint8)
        moves = ([Write(root, d[me] * isz + lo, mine[lo:lo + length])
                  for lo, length in parts(mine.nbytes, n, topology.rotation(me, n)[1:])]
                 if plan.root_splits else
                 [Write(root, d[me] * isz, plan.input)] if len(plan.input) else [])
    yield Round(then=enter(plan, expose=exposed) + moves + closing(plan))
