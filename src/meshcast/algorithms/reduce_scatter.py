"""reduce_scatter: rank ``q``'s ``output`` gets piece ``q`` of the op over all ranks' ``input``.

Layout: ``plan.input`` holds ``sum(counts)`` elements, piece ``q`` at
``displs[q]``, and is not modified; ``plan.output`` is my reduced piece
(``counts[rank]`` elements) and must not overlap the input (the group stages
in-place calls). Counts may differ and may be 0.
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import ops, topology
from ._common import copy_steps, displs, others, piece_counts, slot_elems
from ._onehost import closing, enter, pieces_fit, reduce_all
from ._plan import (
    EXPOSED,
    REGION,
    Copy,
    LocalStep,
    Plan,
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
)
from ._registry import register


def _commutative(plan: Plan) -> bool:
    return ops.is_commutative(plan.op)


@register(
    "reduce_scatter",
    "ring",
    description="P-1 rounds around a ring, each reducing one incoming piece (bandwidth-optimal)",
    supports=_commutative,
    requires="a commutative op",
)
def ring(plan: Plan) -> Iterator[Round]:
    """Ring reduce-scatter.

    Steps: ``P-1`` rounds. In round ``s`` rank ``r`` sends its partial of
    piece ``(r-s-1) % P`` to ``r+1`` and receives the left neighbour's
    partial of piece ``(r-s-2) % P``, reducing its own input into it; in the
    last round that piece is ``r`` and it lands in the output. Two scratch
    buffers alternate so a round never receives into what it sends.

    Bytes sent per rank: ``S - counts[rank]`` (``S (P-1)/P`` for equal counts).

    Requires: a commutative op (pieces are reduced in ring order).

    Example (P=3, rank 0): round 0 sends piece 2 (its own input), receives
    rank 2's piece 1 and adds its own; round 1 sends that, receives rank 2's
    partial of piece 0 (ranks 1 and 2) into the output and adds its own.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    x, out = plan.input, plan.output
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    if d[p] == 0:
        return
    pieces = [x[d[q] : d[q + 1]] for q in range(p)]
    width = max(counts)
    bufs = [plan.scratch(width), plan.scratch(width)]
    left, right = topology.ring_neighbours(r, p)
    prev = pieces[(r - 1) % p]
    for s in range(p - 1):
        send_i, target = (r - s - 1) % p, (r - s - 2) % p
        incoming = out if s == p - 2 else bufs[s % 2][: counts[target]]
        comms: list[Send | Recv] = []
        then: list[LocalStep] = []
        if counts[send_i]:
            comms.append(Send(right, prev))
        if counts[target]:
            comms.append(Recv(left, incoming))
            then.append(Reduce(incoming, pieces[target]))
        yield Round(*comms, then=then)
        prev = incoming


@register(
    "reduce_scatter",
    "recursive_halving",
    description="log2(P) exchanges of halves; non-powers of two fold first (latency-optimal)",
    supports=_commutative,
    requires="a commutative op",
)
def recursive_halving(plan: Plan) -> Iterator[Round]:
    """Recursive-halving reduce-scatter with the non-power-of-two fold.

    Steps: a first round (fold: even ranks below ``2 rem`` send their whole
    input to the odd rank above, which reduces it into a copy of its own;
    everyone else copies its input into scratch), ``log2(pof2)`` rounds in
    which new rank ``i`` keeps the half of its current range that contains
    ``i``, sends the other half to its partner and reduces the partner's
    half into its own, and, when ``rem > 0``, an unfold round in which the odd
    ranks send the even partner its reduced piece. Ranges of new ranks map
    to contiguous pieces (``topology.unfold_range``).

    Bytes sent per rank: about ``S (pof2-1)/pof2`` (fold pairs: ``+ S``).

    Requires: a commutative op.

    Example (P=4, rank 1): round 1 sends pieces 2-3 to rank 3 and reduces
    rank 3's pieces 0-1; round 2 sends piece 0 to rank 0 and reduces rank 0's
    piece 1, which is then rank 1's result.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    x, out = plan.input, plan.output
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    if d[p] == 0:
        return
    f = topology.fold(r, p)
    steps = topology.halving_steps(f.newrank, f.pof2) if f.active else []
    if not f.active:
        yield Round(Send(f.partner, x))
        for _ in range(topology.ceil_log2(f.pof2)):
            yield Round()
        yield Round(*([Recv(f.partner, out)] if counts[r] else []))
        return

    def span(lo: int, hi: int) -> tuple[int, int]:
        a, b = topology.unfold_range(lo, hi, p)
        return d[a], d[b]

    keeps = [span(st.keep_lo, st.keep_hi) for st in steps]
    acc = plan.scratch(d[p])
    tmp = plan.scratch(max((hi - lo for lo, hi in keeps), default=0))  # reused: recv, then reduce
    if f.partner >= 0:  # receive the even rank's input into acc, then fold mine in
        yield Round(Recv(f.partner, acc), then=[Reduce(acc, x)])
    else:
        yield Round(then=[Copy(acc, x)])
    for st, (keep_lo, keep_hi) in zip(steps, keeps):
        send_lo, send_hi = span(st.send_lo, st.send_hi)
        peer = topology.unfold_rank(st.partner, p)
        incoming = tmp[: keep_hi - keep_lo]
        comms: list[Send | Recv] = []
        then: list[LocalStep] = []
        if send_hi > send_lo:
            comms.append(Send(peer, acc[send_lo:send_hi]))
        if keep_hi > keep_lo:
            comms.append(Recv(peer, incoming))
            then.append(Reduce(acc[keep_lo:keep_hi], incoming))
        yield Round(*comms, then=then)
    mine = copy_steps(out, acc[d[r] : d[r + 1]])
    if f.partner >= 0:
        theirs = acc[d[f.partner] : d[f.partner + 1]]
        yield Round(*([Send(f.partner, theirs)] if len(theirs) else []), then=mine)
    else:
        yield Round(then=mine)


@register(
    "reduce_scatter",
    "direct",
    description="every rank sends each piece to its owner, owners reduce in rank order",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct reduce-scatter in rank order.

    Steps: 1 round: send piece ``q`` to rank ``q`` and receive ``P-1``
    contributions to my piece, then reduce ``x0 op x1 op ... op x(P-1)``
    left to right.

    Bytes sent per rank: ``S - counts[rank]``.

    Requires: nothing (rank order works for any op).
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    x, out = plan.input, plan.output
    n = counts[r]
    tmp = plan.scratch(p * n)
    operands = [tmp[q * n : (q + 1) * n] for q in range(p)]
    operands[r] = x[d[r] : d[r + 1]]
    comms: list[Send | Recv] = [Send(q, x[d[q] : d[q + 1]]) for q in others(r, p) if counts[q]]
    then: list[LocalStep] = []
    if n:
        comms += [Recv(q, operands[q]) for q in others(r, p)]
        then = [*copy_steps(out, operands[0]), *(Reduce(out, operands[q]) for q in range(1, p))]
    yield Round(*comms, then=then)


def _arena_stride(plan: Plan) -> int:
    """Elements per rank per buffer: two buffers of ``P`` columns each."""
    return min(slot_elems(plan, 2 * plan.size), max(piece_counts(plan), default=0))


@register(
    "reduce_scatter",
    "arena",
    description="ranks publish chunks of every piece; each rank reduces its column from all slots",
    family="arena",
    supports=lambda plan: slot_elems(plan, 2 * plan.size) >= 1,
    requires="a slot of at least 2 elements per rank",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot reduce-scatter.

    Slot layout: two buffers (chunk parity) of ``P`` columns of ``c``
    elements; column ``q`` of buffer ``k % 2`` holds elements ``[k c, (k+1)
    c)`` of piece ``q``, so in every round every rank reduces at once.

    Steps: ``K = ceil(max(counts) / c)`` rounds; in round ``k`` every rank
    ``Put``s chunk ``k`` of each piece, signals ``k+1``, waits for all
    ``k+1`` and ``ReduceSlots`` its own column over all ranks in rank order
    straight into its output. Rule 2 needs no extra wait: buffer ``k % 2``
    is rewritten after everyone's ``k+2``, signalled after their reduction
    of chunk ``k``. With equal counts that fit one chunk the input is one
    ``Put``.

    Bytes sent per rank: ``S`` into my slot, ``counts[rank]`` reduced from ``P`` slots.

    Requires: an arena; a slot of at least ``2 P`` elements.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    x, out = plan.input, plan.output
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    c = _arena_stride(plan)
    if c == 0:
        return
    isz = plan.itemsize
    everyone = tuple(range(p))
    rest = others(r, p)
    nchunks = topology.ceil_div(max(counts), c)
    whole = len(set(counts)) == 1 and nchunks == 1  # the columns are then exactly the input
    for k in range(nchunks):
        base = (k % 2) * p * c
        lo = k * c
        steps: list[LocalStep] = []
        if whole:
            steps.append(Put(0, x))
        else:
            for q in everyone:
                if lo < counts[q]:
                    piece = x[d[q] + lo : d[q] + min(counts[q], lo + c)]
                    steps.append(Put((base + q * c) * isz, piece))
        steps += [Signal(k + 1), Wait(rest, k + 1)]
        if lo < counts[r]:
            mine = out[lo : min(counts[r], lo + c)]
            steps.append(ReduceSlots(mine, everyone, (base + r * c) * isz))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "reduce_scatter",
    "oneshot",
    description="every rank's input but its own piece through its one-shot region and one "
                "entry; each reduces its piece",
    supports=pieces_fit,
    requires="the input fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot reduce-scatter (paths/oneshot.reduce_scatter; ``_select.oneshot``).

    Steps: 1 round: ``Put`` my input but my own piece into my one-shot region
    (in place: every piece at its input offset), ``Enter``, then
    ``ReduceSlots`` my piece of every region, in rank order, into my output, my
    own operand straight from my input (nobody else reads it).

    Bytes sent per rank: ``(P-1)/P S`` of the input into my region; ``P`` times
    my piece read.

    Requires: the input fits a one-shot region.
    """
    d = displs(piece_counts(plan))
    me, inp = plan.rank, plan.input
    lo, hi = d[me], d[me + 1]
    puts = [Put(start * plan.itemsize, part, REGION)
            for start, part in ((0, inp[:lo]), (hi, inp[hi:])) if len(part)]
    yield Round(then=enter(plan, before=puts)
                + reduce_all(plan, plan.output, lo, REGION, own=inp[lo:hi]))


def _reduce_my_piece(plan: Plan) -> Iterator[Round]:
    """Expose my input, enter, reduce my piece of every exposed input, close."""
    d = displs(piece_counts(plan))
    yield Round(then=enter(plan, expose=plan.input)
                + reduce_all(plan, plan.output, d[plan.rank], EXPOSED) + closing(plan))


@register(
    "reduce_scatter",
    "cma",
    description="single-copy: each rank reduces its piece straight from every rank's input",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy reduce-scatter (run as a program: paths/single_copy.CopyPrograms; ``_select.single_copy``).

    Steps: 1 round: ``Expose`` my input and ``Enter``; ``ReduceSlots`` my piece
    of every rank's exposed input, in rank order, into my output (read in
    cache-sized chunks at run time); the closing signal and wait.

    Bytes sent per rank: my piece read from each of the ``P-1`` others.

    Requires: a host that lets members read each other's memory.
    """
    yield from _reduce_my_piece(plan)


@register(
    "reduce_scatter",
    "symmetric",
    description="on a symmetric allocation: the single-copy program, with plain loads",
    family="symmetric",
)
def symmetric(plan: Plan) -> Iterator[Round]:
    """Symmetric reduce-scatter (run as a program: paths/symmetric.py).

    Steps: the single-copy reduce-scatter's (see reduce_scatter/cma) on the
    parts of a symmetric allocation: enter, reduce my piece of every rank's
    input into my output, close; no system calls.

    Bytes sent per rank: as reduce_scatter/cma.

    Requires: the input in a symmetric allocation (``meshcast.empty``).
    """
    yield from _reduce_my_piece(plan)
