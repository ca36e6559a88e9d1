"""all_gather: every rank's ``output`` gets all ranks' ``input``, in rank order.

Layout: ``plan.input`` is my piece (``counts[rank]`` elements; it may be the
view of my own place in the output: in place); ``plan.output`` holds
``sum(counts)`` elements, piece ``q`` at ``displs[q]``. Counts may differ
between ranks and may be 0; every rank knows all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import topology
from ._common import copy_steps, displs, others, piece_counts, slot_elems
from ._onehost import closing, enter, piece_fits
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


@register(
    "all_gather",
    "ring",
    description="P-1 rounds around a ring, each forwarding the piece received last (bandwidth-optimal)",
)
def ring(plan: Plan) -> Iterator[Round]:
    """Ring all-gather.

    Steps: ``P-1`` rounds; in round ``s`` rank ``r`` sends piece ``(r-s) % P``
    to ``r+1`` and receives piece ``(r-s-1) % P`` from ``r-1``, straight into
    the output. Round 0 sends from the input and copies it into place.

    Bytes sent per rank: ``S - counts[(r+1) % P]`` (``S (P-1)/P`` for equal counts).

    Requires: nothing; uneven and zero counts allowed.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    out, x = plan.output, plan.input
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    pieces = [out[d[q] : d[q + 1]] for q in range(p)]
    left, right = topology.ring_neighbours(r, p)
    for s in range(p - 1):
        send_i, recv_i = (r - s) % p, (r - s - 1) % p
        comms: list[Send | Recv] = []
        if counts[send_i]:
            comms.append(Send(right, x if s == 0 else pieces[send_i]))
        if counts[recv_i]:
            comms.append(Recv(left, pieces[recv_i]))
        then = copy_steps(pieces[r], x) if s == 0 else []
        yield Round(*comms, then=then)


@register(
    "all_gather",
    "recursive_doubling",
    description="log2(P) exchanges of doubling blocks; non-powers of two fold first (latency-optimal)",
)
def recursive_doubling(plan: Plan) -> Iterator[Round]:
    """Recursive-doubling all-gather with the non-power-of-two fold.

    Steps: one first round (the fold: even ranks below ``2 rem`` send their
    piece to the odd rank above; everyone copies its piece into place),
    ``log2(pof2)`` rounds in which new rank ``i`` swaps its block of new ranks
    ``[i & ~(2**k - 1), +2**k)`` with new rank ``i ^ 2**k``, and, when
    ``rem > 0``, an unfold round in which the odd ranks send everything but
    their partner's piece back. A block of new ranks is a contiguous range of
    absolute ranks (``topology.unfold_range``), so every message is one
    contiguous view of the output.

    Bytes sent per rank: ``S - counts[rank]`` (fold pairs: ``+ S``).

    Requires: nothing; uneven and zero counts allowed.

    Example (P=3: pof2 2, rem 1): round 0: 0 -> 1 (piece 0); round 1: 1 and
    2 swap pieces [0, 2) and [2, 3); round 2: 1 -> 0 (piece 1 and piece 2).
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    out, x = plan.output, plan.input
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    f = topology.fold(r, p)
    place = copy_steps(out[d[r] : d[r + 1]], x)
    steps = topology.ceil_log2(f.pof2)
    if not f.active:
        yield Round(*([Send(f.partner, x)] if counts[r] else []), then=place)
        for _ in range(steps):
            yield Round()
        runs = [(0, d[r]), (d[r + 1], d[p])]  # everything but my own piece
        yield Round(*(Recv(f.partner, out[a:b]) for a, b in runs if b > a))
        return
    if f.partner >= 0:
        fold_in = out[d[f.partner] : d[f.partner + 1]]
        yield Round(*([Recv(f.partner, fold_in)] if len(fold_in) else []), then=place)
    else:
        yield Round(then=place)

    def span(lo: int, hi: int) -> tuple[int, int]:
        a, b = topology.unfold_range(lo, hi, p)
        return d[a], d[b]

    for k, partner in enumerate(topology.doubling_partners(f.newrank, f.pof2)):
        mine = span(*topology.doubling_block(f.newrank, k))
        theirs = span(*topology.doubling_block(partner, k))
        peer = topology.unfold_rank(partner, p)
        comms: list[Send | Recv] = []
        if mine[1] > mine[0]:
            comms.append(Send(peer, out[mine[0] : mine[1]]))
        if theirs[1] > theirs[0]:
            comms.append(Recv(peer, out[theirs[0] : theirs[1]]))
        yield Round(*comms)
    if f.partner >= 0:
        runs = [(0, d[f.partner]), (d[f.partner + 1], d[p])]
        yield Round(*(Send(f.partner, out[a:b]) for a, b in runs if b > a))


@register(
    "all_gather",
    "direct",
    description="every rank sends its piece to every other rank in one round",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct all-gather.

    Steps: 1 round with ``P-1`` sends and ``P-1`` receives per rank.

    Bytes sent per rank: ``(P-1) counts[rank]``.

    Requires: nothing; uneven and zero counts allowed.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    out, x = plan.output, plan.input
    comms: list[Send | Recv] = []
    if counts[r]:
        comms += [Send(q, x) for q in others(r, p)]
    comms += [Recv(q, out[d[q] : d[q + 1]]) for q in others(r, p) if counts[q]]
    yield Round(*comms, then=copy_steps(out[d[r] : d[r + 1]], x))


@register(
    "all_gather",
    "arena",
    description="ranks publish chunks of their piece in their slot, everyone copies all of them out",
    family="arena",
    supports=lambda plan: slot_elems(plan, 2) >= 1,
    requires="a slot of at least 2 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot all-gather.

    Slot layout: two buffers of ``c`` elements; chunk ``k`` of my piece goes
    to buffer ``k % 2``.

    Steps: ``K = ceil(max(counts) / c)`` rounds on every rank; in round
    ``k``: ``Put`` my chunk ``k`` (if I have one), signal ``k+1``, wait for
    every other rank's ``k+1``, ``Get`` their chunks ``k``. One signal per
    chunk is enough for Rule 2: my chunk ``k+2`` overwrites chunk ``k`` only
    after I waited for everyone's ``k+2``, which they signal after reading
    chunk ``k``.

    Bytes sent per rank: ``counts[rank]`` into my slot, ``S - counts[rank]`` copied out.

    Requires: an arena; a slot of at least 2 elements.
    """
    p, r = plan.size, plan.rank
    counts = piece_counts(plan)
    d = displs(counts)
    out, x = plan.output, plan.input
    if p == 1:
        yield Round(then=copy_steps(out, x))
        return
    c = slot_elems(plan, 2)
    isz = plan.itemsize
    rest = others(r, p)
    nchunks = topology.ceil_div(max(counts, default=0), c)
    for k in range(nchunks):
        offset = (k % 2) * c * isz
        lo = k * c
        steps: list[LocalStep] = []
        if lo < counts[r]:
            steps.append(Put(offset, x[lo : min(counts[r], lo + c)]))
        steps += [Signal(k + 1), Wait(rest, k + 1)]
        for q in rest:
            if lo < counts[q]:
                steps.append(Get(q, offset, out[d[q] + lo : d[q] + min(counts[q], lo + c)]))
        if k == 0:
            steps += copy_steps(out[d[r] : d[r + 1]], x)
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "all_gather",
    "oneshot",
    description="every rank's piece through its one-shot region and one entry; each copies all out",
    supports=piece_fits,
    requires="every piece fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot all-gather (paths/oneshot.all_gather; ``_select.oneshot_all_gather``).

    Steps: 1 round: ``Put`` my piece into my one-shot region, ``Enter``, then
    ``Get`` every rank's piece (mine too, from my region) into its place.

    Bytes sent per rank: my piece into my region; the whole output read.

    Requires: every piece fits a one-shot region.
    """
    d, out = displs(piece_counts(plan)), plan.output
    yield Round(then=enter(plan, stage=plan.input)
                + [Get(q, 0, out[d[q]:d[q + 1]], REGION) for q in range(plan.size)
                   if d[q + 1] > d[q]])


@register(
    "all_gather",
    "cma",
    description="single-copy: each rank reads every piece straight from its owner's buffer",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy all-gather (run as a program: paths/single_copy.CopyPrograms; ``_select.oneshot_all_gather``).

    Taken from ``_select.ALL_GATHER_SINGLE_MIN_BYTES`` gathered, with pieces of
    ``SINGLE_COPY_MIN_BYTES``.

    Steps: 1 round: ``Expose`` my piece and ``Enter``; copy my own piece into
    place (unless it is there, in place) and ``Get`` every other piece from its
    owner, starting at the next rank so that readers spread over the owners;
    the closing signal and wait.

    Bytes sent per rank: the other ranks' pieces read once each.

    Requires: a host that lets members read each other's memory.
    """
    d, out, me = displs(piece_counts(plan)), plan.output, plan.rank
    reads = [Get(q, 0, out[d[q]:d[q + 1]], EXPOSED)
             for q in topology.rotation(me, plan.size)[1:] if d[q + 1] > d[q]]
    yield Round(then=enter(plan, expose=plan.input) + copy_steps(out[d[me]:d[me + 1]], plan.input)
                + reads + closing(plan))


@register(
    "all_gather",
    "symmetric",
    description="on a symmetric allocation: each rank writes its piece into every rank's output",
    supports=lambda plan: len(set(piece_counts(plan))) <= 1,
    requires="equal pieces",
    family="symmetric",
)
def symmetric(plan: Plan) -> Iterator[Round]:
    """Symmetric all-gather (run as a program: paths/symmetric.py).

    Steps: 1 round: ``Enter`` (every rank's output is its part of one symmetric
    allocation); copy my piece into my own output and ``Write`` it into every
    other rank's; the closing signal and wait. Nothing is staged. (The copy comes
    after the entry, as every step of a symmetric program does: the group's entry
    runs first, then the records after it; nobody reads my part meanwhile.)

    Bytes sent per rank: my piece written ``P-1`` times.

    Requires: the output in a symmetric allocation; equal pieces.
    """
    d, out, me = displs(piece_counts(plan)), plan.output, plan.rank
    mine = out[d[me]:d[me + 1]]
    spread = [Write(q, d[me] * plan.itemsize, mine)
              for q in topology.rotation(me, plan.size)[1:] if len(mine)]
    yield Round(then=enter(plan, expose=out) + copy_steps(mine, plan.input) + spread
                + closing(plan))
