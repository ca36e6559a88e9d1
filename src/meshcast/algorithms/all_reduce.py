"""all_reduce: every rank's ``output`` gets the op over all ranks' ``input``.

Layout: ``plan.input`` is my contribution and may be the same array as
``plan.output`` (in-place, torch's default); ``plan.output`` gets the result.
Every algorithm leaves bitwise identical results on all ranks: each element
is reduced once by one rank and copied to the others (ring, tree, arena),
or combined in the same order everywhere (direct: rank order;
recursive_doubling: partners combine the same two partials, and IEEE add and
multiply are commutative bit for bit).
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import ops, topology
from ._common import copy_steps, others, same_memory, segment_elems
from ._onehost import buffer_fits, closing, enter, reduce_all
from ._plan import (
    EXPOSED,
    REGION,
    Copy,
    Get,
    LocalStep,
    Plan,
    Recv,
    Reduce,
    Round,
    Send,
    Write,
    split_even,
)
from ._registry import register
from .broadcast import binomial_broadcast
from .reduce import arena_layout, arena_sections, binomial_reduce, has_children


def _commutative(plan: Plan) -> bool:
    return ops.is_commutative(plan.op)


def _trivial(plan: Plan) -> Iterator[Round] | None:
    """Rounds for count 0 or a group of one (a local copy), or None for the general case."""
    out = plan.output
    if out is None or len(out) == 0:
        return iter(())
    if plan.size == 1:
        return iter([Round(then=copy_steps(out, plan.input))])
    return None


@register(
    "all_reduce",
    "ring",
    description="reduce-scatter then all-gather around a ring (bandwidth-optimal)",
    supports=_commutative,
    requires="a commutative op",
)
def ring(plan: Plan) -> Iterator[Round]:
    """Ring all-reduce: reduce-scatter then all-gather around the ring.

    Steps: ``2(P-1)`` rounds. The output is split in ``P`` chunks
    (``split_even``). Reduce-scatter round ``s``: send chunk ``(r-s) % P`` to
    ``r+1``, receive chunk ``(r-s-1) % P`` from ``r-1`` and reduce it into
    mine. Afterwards rank ``r`` owns the fully reduced chunk ``(r+1) % P``.
    All-gather round ``s``: send chunk ``(r-s+1) % P``, receive ``(r-s) % P``.

    Bytes sent per rank: ``2 S (P-1)/P``.

    Requires: a commutative op (each chunk is reduced in ring order).

    Example (P=3, chunks A B C): after round 0 rank 1 holds A0+A1, rank 2
    B1+B2, rank 0 C2+C0; after round 1 rank 0 owns B, rank 1 C, rank 2 A;
    rounds 2-3 circulate the reduced chunks.
    """
    trivial = _trivial(plan)
    if trivial is not None:
        yield from trivial
        return
    out, x, p, r = plan.output, plan.input, plan.size, plan.rank
    chunks = [out[s : s + n] for s, n in split_even(len(out), p)]
    tmp = plan.scratch(
        len(chunks[0])
    )  # reused every round: a round's recv completes before its reduce
    left, right = topology.ring_neighbours(r, p)
    first = [x[s : s + n] for s, n in split_even(len(out), p)]
    for s in range(p - 1):
        # round 0 sends straight from the input and copies it into the output
        # afterwards (before its reduce), so no rank needs a copy-only round:
        # round indices must be the same on every rank, in place or not
        outgoing = (first if s == 0 else chunks)[(r - s) % p]
        target = chunks[(r - s - 1) % p]
        incoming = tmp[: len(target)]
        comms: list[Send | Recv] = []
        if len(outgoing):
            comms.append(Send(right, outgoing))
        then: list[LocalStep] = copy_steps(out, x) if s == 0 else []
        if len(target):
            comms.append(Recv(left, incoming))
            then.append(Reduce(target, incoming))
        yield Round(*comms, then=then)
    for s in range(p - 1):
        outgoing, incoming = chunks[(r - s + 1) % p], chunks[(r - s) % p]
        comms = []
        if len(outgoing):
            comms.append(Send(right, outgoing))
        if len(incoming):
            comms.append(Recv(left, incoming))
        yield Round(*comms)


@register(
    "all_reduce",
    "recursive_doubling",
    description="log2(P) pairwise full exchanges; non-powers of two fold first (latency-optimal)",
    supports=_commutative,
    requires="a commutative op",
)
def recursive_doubling(plan: Plan) -> Iterator[Round]:
    """Recursive-doubling all-reduce with the non-power-of-two fold.

    Steps: with ``pof2 = 2**floor(log2 P)`` and ``rem = P - pof2``: a fold
    round (even ranks below ``2 rem`` send everything to the odd rank above
    them and sit out), ``log2(pof2)`` rounds in which new rank ``i`` swaps its
    partial result with ``i ^ 2**k`` and reduces, and an unfold round (the
    odd ranks send the result back). The fold and unfold rounds are there
    only when ``rem > 0``.

    Bytes sent per rank: ``S log2(pof2)`` (+ ``S`` for fold pairs).

    Requires: a commutative op.

    Example (P=6): fold 0->1, 2->3; participants 1, 3, 4, 5 (new ranks
    0-3) exchange 1<->3, 4<->5, then 1<->4, 3<->5; unfold 1->0, 3->2.
    """
    trivial = _trivial(plan)
    if trivial is not None:
        yield from trivial
        return
    out, x, p, r = plan.output, plan.input, plan.size, plan.rank
    f = topology.fold(r, p)
    if not f.active:  # folded out: hand my data over, wait for the result
        yield Round(Send(f.partner, x))
        for _ in range(topology.ceil_log2(f.pof2)):
            yield Round()
        yield Round(Recv(f.partner, out))
        return
    tmp = plan.scratch(len(out))
    copy = copy_steps(out, x)
    if f.partner >= 0:
        yield Round(Recv(f.partner, tmp), then=[*copy, Reduce(out, tmp)])
    else:
        yield Round(then=copy)
    for partner in topology.doubling_partners(f.newrank, f.pof2):
        peer = topology.unfold_rank(partner, p)
        yield Round(Send(peer, out), Recv(peer, tmp), then=[Reduce(out, tmp)])
    if f.partner >= 0:
        yield Round(Send(f.partner, out))


@register(
    "all_reduce",
    "tree",
    description="binomial-tree reduce to rank 0, then binomial-tree broadcast",
    supports=_commutative,
    requires="a commutative op",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Tree all-reduce: binomial reduce to rank 0 followed by binomial broadcast.

    Steps: ``2 ceil(log2 P)`` rounds (see reduce/tree and broadcast/tree).

    Bytes sent per rank: ``S`` up the tree plus ``S`` per child down it.

    Requires: a commutative op.
    """
    trivial = _trivial(plan)
    if trivial is not None:
        yield from trivial
        return
    out, x, p, r = plan.output, plan.input, plan.size, plan.rank
    if has_children(r, p, 0):
        tmp = plan.scratch(len(out))
        yield from binomial_reduce(r, p, 0, out, tmp, first=copy_steps(out, x))
    else:
        yield from binomial_reduce(r, p, 0, x, None)  # a leaf sends its input as is
    yield from binomial_broadcast(r, p, 0, out)


@register(
    "all_reduce",
    "direct",
    description="every rank sends everything to everyone and reduces in rank order (segmented)",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct all-reduce: all-to-all exchange, then a rank-order reduction everywhere.

    Steps: one round per segment of ``plan.segment_bytes``: post ``P-1``
    sends of my segment and ``P-1`` receives, then compute
    ``x0 op x1 op ... op x(P-1)`` left to right.

    Bytes sent per rank: ``(P-1) S``.

    Requires: nothing (rank order: any op, bitwise identical everywhere).
    """
    trivial = _trivial(plan)
    if trivial is not None:
        yield from trivial
        return
    out, x, p, r = plan.output, plan.input, plan.size, plan.rank
    segs = topology.chunks(len(out), segment_elems(plan))
    width = segs[0][1]
    tmp = plan.scratch(p * width)
    in_place = same_memory(out, x)
    for start, length in segs:
        mine = x[start : start + length]
        operands = [tmp[q * width : q * width + length] for q in range(p)]
        then: list[LocalStep] = []
        if in_place and r != 0:
            then.append(Copy(operands[r], mine))  # saved before out (= x) is rewritten
        else:
            operands[r] = mine
        dst = out[start : start + length]
        then += copy_steps(dst, operands[0])
        then += [Reduce(dst, operands[q]) for q in range(1, p)]
        comms: list[Send | Recv] = [Send(q, mine) for q in others(r, p)]
        comms += [Recv(q, operands[q]) for q in others(r, p)]
        yield Round(*comms, then=then)


@register(
    "all_reduce",
    "arena",
    description="publish chunks in shared slots; each rank reduces 1/P of each chunk, all copy back",
    family="arena",
    supports=lambda plan: arena_layout(plan)[0] >= 1,
    requires="a slot of at least 4 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot all-reduce (the single-host fast path), pipelined over chunks.

    Slot layout: two buffers (chunk parity ``b = k % 2``), each
    ``[input c | share s]`` with ``s = ceil(c/P)`` and ``c`` as large as the slot
    and ``plan.segment_bytes`` allow (``reduce.arena_layout``). Shares of a
    chunk are ``split_even(chunk, P)``.

    Steps: a first round ``Put``s chunk 0 into input region 0 and signals 1.
    Then round ``k`` (``k = 0..K``, ``K`` chunks) on every rank:

    1. wait for every other rank's ``k+1`` (chunk ``k`` published, share
       ``k-1`` reduced);
    2. ``Get`` every other rank's share of chunk ``k-1`` into my output;
    3. ``ReduceSlots`` my share of chunk ``k`` over all ranks in rank order
       straight into my output and ``Put`` it into share region ``k % 2``;
    4. ``Put`` chunk ``k+1`` into input region ``(k+1) % 2``; signal ``k+2``.

    One signal and one wait per chunk, and the copy-in of chunk ``k+1``
    overlaps the other ranks' reduction of chunk ``k``. Rule 2 holds because
    of the two buffers: input region ``(k+1) % 2`` last held chunk ``k-1``,
    which everyone reduced before signalling ``k+1``; share region ``k % 2``
    last held share ``k-2``, which everyone copied out before signalling
    ``k+1``, and round ``k`` starts by waiting for all ``k+1``. Every share
    is reduced once, so all ranks end bitwise identical.

    Bytes sent per rank: ``S`` into the slot, ``S/P`` reduced from ``P`` slots,
    ``S/P`` back into the slot, ``S (P-1)/P`` copied out.

    Requires: an arena; a slot of at least 4 elements.

    Example (P=4, one chunk of 10): shares of 3, 3, 2, 2 elements; rank 2
    reduces elements 6-7 from slots 0, 1, 2, 3 in that order in round 0 and
    copies elements 0-5 and 8-9 from slots 0, 1, 3 in round 1.
    """
    trivial = _trivial(plan)
    if trivial is not None:
        yield from trivial
        return
    yield from arena_sections(plan, plan.input, plan.output, everyone_gets=True)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "all_reduce",
    "oneshot",
    description="every rank's data through its one-shot region and one entry; each reduces all",
    supports=buffer_fits,
    requires="the buffer fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot all-reduce (paths/oneshot.all_reduce; chosen by ``_select.oneshot``).

    Steps: 1 round: ``Put`` my data into my one-shot region, ``Enter`` (the
    fingerprint exchange and one signal: after it every region is complete),
    then ``ReduceSlots`` over every rank's region, in rank order, into my output.
    No closing round: a region is reused two calls later, after the entry of the
    call in between.

    Bytes sent per rank: ``S`` into my region; ``P S`` read from the regions.

    Requires: ``S`` fits a one-shot region (``plan.region_bytes``).
    """
    yield Round(then=enter(plan, stage=plan.input)
                + reduce_all(plan, plan.output, 0, REGION))


@register(
    "all_reduce",
    "cma",
    description="single-copy: reduce my share straight from every rank's buffer, then read "
                "the reduced shares from their owners",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy all-reduce (run as a program: paths/single_copy.CopyPrograms).

    Chosen past the one-shot sizes by ``_select.all_reduce_single_copy``.

    Steps: 1 round: ``Expose`` my buffer (the output, holding my data: the
    runtime's call is in place) and ``Enter``; ``ReduceSlots`` my cache-line
    aligned share (``topology.share``) of every rank's exposed buffer, in rank
    order, into my own buffer; signal 1 and wait for everyone's 1 (every share
    reduced, nobody reads the unreduced data any more); ``Get`` every other
    share from its owner; the closing signal and wait of phase 2.

    Bytes sent per rank: ``P S/P`` read to reduce my share, ``S (P-1)/P`` read
    back (two copies where the arena needs three).

    Requires: a host that lets members read each other's memory.
    """
    out, n, me = plan.output, plan.size, plan.rank
    lo, hi = topology.share(len(out), plan.itemsize, me, n)
    collect = []
    for q in topology.rotation(me, n)[1:]:
        qlo, qhi = topology.share(len(out), plan.itemsize, q, n)
        if qhi > qlo:
            collect.append(Get(q, qlo * plan.itemsize, out[qlo:qhi], EXPOSED))
    yield Round(then=copy_steps(out, plan.input) + enter(plan, expose=out)
                + reduce_all(plan, out[lo:hi], lo, EXPOSED) + closing(plan, 1)
                + collect + closing(plan, 2))


@register(
    "all_reduce",
    "symmetric",
    description="on a symmetric allocation: reduce my share of every part, write it into every part",
    family="symmetric",
)
def symmetric(plan: Plan) -> Iterator[Round]:
    """Symmetric all-reduce (run as a program: paths/symmetric.py).

    Steps: 1 round: ``Enter`` (every rank's buffer is its part of one symmetric
    allocation, mapped by all: its exposure); for each chunk of
    :data:`SYMMETRIC_CHUNK_BYTES` of my cache-line aligned share, ``ReduceSlots``
    it from every part, in rank order, into my own part, then ``Write`` it into
    every other part while it is in the cache; the closing signal and wait.

    Bytes sent per rank: ``P S/P`` read, ``(P-1) S/P`` written; nothing staged.

    Requires: the buffer in a symmetric allocation (``meshcast.empty``).
    """
    out, n, me, size = plan.output, plan.size, plan.rank, plan.itemsize
    lo, hi = topology.share(len(out), size, me, n)
    step = max(1, SYMMETRIC_CHUNK_BYTES // size)
    chunks: list[LocalStep] = []
    for c0 in range(lo, hi, step):
        chunk = out[c0:min(c0 + step, hi)]
        chunks += reduce_all(plan, chunk, c0, EXPOSED)
        chunks += [Write(q, c0 * size, chunk) for q in topology.rotation(me, n)[1:]]
    yield Round(then=copy_steps(out, plan.input) + enter(plan, expose=out) + chunks
                + closing(plan))


#: Bytes of my share the symmetric all-reduce reduces, then writes into every other
#: part, at a time: the result is still in the cache (L2: 512 KiB a core here) when it
#: is copied out, where a whole share of several MiB would be read again from memory.
SYMMETRIC_CHUNK_BYTES = 256 << 10
