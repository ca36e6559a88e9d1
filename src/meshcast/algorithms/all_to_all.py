"""all_to_all: piece ``q`` of my ``input`` goes to rank ``q``; piece ``q`` of my ``output`` comes from ``q``.

Layout: ``plan.input`` holds ``sum(plan.counts)`` elements, the piece for
rank ``q`` (``counts[q]`` long) at ``displs(counts)[q]``; ``plan.output``
holds ``sum(plan.recv_counts)``, the piece from ``q`` at
``displs(recv_counts)[q]``. Split counts are arbitrary and per rank: a rank
knows what it sends and receives, not what other pairs exchange. Input and
output must not overlap (the group stages in-place calls).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import topology
from ._common import displs, others, segment_elems
from ._onehost import closing, enter, offsets_of_mine, publish_header, read_headers, split_head
from ._plan import EXPOSED, REGION, Copy, Get, LocalStep, Plan, Put, Recv, Round, Send, Signal, Wait
from ._registry import register


def _layout(plan: Plan) -> tuple[tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """``(send_counts, recv_counts, send_displs, recv_displs)``; equal splits when not given."""
    p = plan.size
    sc = plan.counts
    if sc is None:
        sc = (0 if plan.input is None else len(plan.input) // p,) * p
    rc = plan.recv_counts if plan.recv_counts is not None else tuple(sc)
    return tuple(sc), tuple(rc), displs(sc), displs(rc)


def _own(plan: Plan) -> list[LocalStep]:
    """Copy the piece I send to myself into place."""
    sc, rc, sd, rd = _layout(plan)
    r = plan.rank
    if not sc[r]:
        return []
    return [Copy(plan.output[rd[r] : rd[r + 1]], plan.input[sd[r] : sd[r + 1]])]


@register(
    "all_to_all",
    "direct",
    description="every rank posts all its sends and receives in one round",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct all-to-all.

    Steps: 1 round with up to ``P-1`` sends and ``P-1`` receives per rank
    (zero-length pieces are skipped on both ends).

    Bytes sent per rank: ``sum(counts) - counts[rank]``.

    Requires: nothing; arbitrary split counts.
    """
    sc, rc, sd, rd = _layout(plan)
    p, r = plan.size, plan.rank
    x, out = plan.input, plan.output
    comms: list[Send | Recv] = [Send(q, x[sd[q] : sd[q + 1]]) for q in others(r, p) if sc[q]]
    comms += [Recv(q, out[rd[q] : rd[q + 1]]) for q in others(r, p) if rc[q]]
    yield Round(*comms, then=_own(plan))


@register(
    "all_to_all",
    "pairwise",
    description="P-1 rounds; in round s send to rank+s and receive from rank-s (bounded in flight)",
)
def pairwise(plan: Plan) -> Iterator[Round]:
    """Pairwise-exchange all-to-all.

    Steps: ``P-1`` rounds; in round ``s`` rank ``r`` sends its piece for
    ``(r+s) % P`` and receives the piece from ``(r-s) % P``, so each rank
    has one send and one receive in flight. The own piece is copied locally
    in the first round.

    Bytes sent per rank: ``sum(counts) - counts[rank]``.

    Requires: nothing; arbitrary split counts.
    """
    sc, rc, sd, rd = _layout(plan)
    p, r = plan.size, plan.rank
    x, out = plan.input, plan.output
    if p == 1:
        yield Round(then=_own(plan))
        return
    for s in range(1, p):
        to, frm = (r + s) % p, (r - s) % p
        comms: list[Send | Recv] = []
        if sc[to]:
            comms.append(Send(to, x[sd[to] : sd[to + 1]]))
        if rc[frm]:
            comms.append(Recv(frm, out[rd[frm] : rd[frm + 1]]))
        yield Round(*comms, then=_own(plan) if s == 1 else [])


def _equal(plan: Plan) -> bool:
    sc, rc, _, _ = _layout(plan)
    return len(set(sc) | set(rc)) <= 1


@register(
    "all_to_all",
    "bruck",
    description="Bruck's algorithm: ceil(log2 P) rounds of packed blocks (latency-optimal, equal splits)",
    supports=_equal,
    requires="equal split counts on every rank",
)
def bruck(plan: Plan) -> Iterator[Round]:
    """Bruck all-to-all for equal split counts ``c``.

    Steps: a local rotation (block ``i`` of scratch = my block for rank
    ``(r+i) % P``), then ``ceil(log2 P)`` rounds: in round ``k`` every block
    ``i`` with bit ``k`` set is packed and sent to ``(r + 2**k) % P``, and the
    same block positions are refilled from ``(r - 2**k) % P``; a block at
    position ``i`` travels distance ``i`` in total. Finally block ``i`` holds
    the data from rank ``(r-i) % P`` and is copied to its place in the output.

    Bytes sent per rank: about ``c P/2 ceil(log2 P)`` (more than direct, in
    ``log2 P`` messages instead of ``P-1``).

    Requires: equal split counts.

    Example (P=4): rank 3's block 3 (its data for rank 2) moves to rank 0
    in round 0 (distance 1) and on to rank 2 in round 1 (distance 2), always
    at position 3; rank 2 then copies position 3 to the output slot of rank
    ``(2 - 3) % 4 = 3``.
    """
    sc, _, _, _ = _layout(plan)
    p, r = plan.size, plan.rank
    x, out = plan.input, plan.output
    c = sc[0] if sc else 0
    if p == 1:
        yield Round(then=_own(plan))
        return
    if c == 0:
        return
    levels = topology.ceil_log2(p)
    tmp = plan.scratch(p * c)
    blocks = [topology.bruck_blocks(p, k) for k in range(levels)]
    width = max(sum(b - a for a, b in runs) for runs in blocks) * c
    send_pack, recv_pack = plan.scratch(width), plan.scratch(width)

    def packing(k: int, into_pack: bool) -> list[LocalStep]:
        steps: list[LocalStep] = []
        at = 0
        pack = send_pack if into_pack else recv_pack
        for a, b in blocks[k]:
            n = (b - a) * c
            view = tmp[a * c : b * c]
            steps.append(
                Copy(pack[at : at + n], view) if into_pack else Copy(view, pack[at : at + n])
            )
            at += n
        return steps

    # rotation: tmp block i = x block (r + i) % p, i.e. x[r:] then x[:r]
    first: list[LocalStep] = [Copy(tmp[: (p - r) * c], x[r * c :])]
    if r:
        first.append(Copy(tmp[(p - r) * c :], x[: r * c]))
    yield Round(then=first + packing(0, True))
    for k in range(levels):
        to, frm = topology.bruck_peers(r, p, k)
        n = sum(b - a for a, b in blocks[k]) * c
        then = packing(k, False)
        if k + 1 < levels:
            then += packing(k + 1, True)
        else:  # block i came from rank (r - i) % p
            then += [
                Copy(out[((r - i) % p) * c : ((r - i) % p + 1) * c], tmp[i * c : (i + 1) * c])
                for i in range(p)
            ]
        yield Round(Send(to, send_pack[:n]), Recv(frm, recv_pack[:n]), then=then)


_HEADER_ALIGN = 16  # keeps the data region aligned for every NumPy dtype (complex128)


def _header_bytes(p: int) -> int:
    """``[K, off_0 .. off_{P-1}]`` as int64, rounded up to :data:`_HEADER_ALIGN`."""
    return topology.ceil_div(8 * (p + 1), _HEADER_ALIGN) * _HEADER_ALIGN


def _arena_chunk(plan: Plan) -> int:
    room = (plan.slot_bytes - _header_bytes(plan.size)) // (2 * plan.itemsize)
    return max(0, min(room, segment_elems(plan)))


@register(
    "all_to_all",
    "arena",
    description="ranks stream their input through their slot with an offsets header; peers copy their pieces out",
    family="arena",
    supports=lambda plan: _arena_chunk(plan) >= 1,
    requires="a slot of at least 8 (P+1) bytes rounded to 16 plus 2 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot all-to-all with an offsets header.

    Every rank streams its input, rotated so that it starts with the piece
    for ``r+1`` (pieces ``r+1, ..., P-1, 0, ..., r-1``: the tail
    ``input[displs[r+1]:]`` followed by ``input[:displs[r]]``), through two
    buffers of ``c`` elements in its slot. Rotation spreads the readers: in
    round ``t`` different senders serve different readers.

    Slot layout: header ``[K_r, off_0, ..., off_{P-1}]`` (int64: my number of
    chunks and where the piece for each rank starts in my stream), then
    buffer 0 and buffer 1 (chunk ``t`` in buffer ``t % 2``).

    Steps:

    * first round: ``Put`` the header and chunk 0, signal 1, wait for all 1,
      ``Get`` every peer's ``K`` and my offset in its stream (the generator
      reads them once the round is done: ``T = max K``).
    * round ``t < T``: for each peer whose chunk ``t`` holds part of my piece,
      wait for its ``t+1`` and ``Get`` that part; then, if I have a chunk
      ``t+1``, wait until the readers of my chunk ``t-1`` signalled ``t+1``
      (Rule 2) and ``Put`` it; signal ``t+2`` (skipped in the last round).
      Chunk ``t`` is always announced by phase ``t+1``.

    Bytes sent per rank: ``sum(counts) - counts[rank]`` into my slot and
    ``sum(recv_counts) - recv_counts[rank]`` copied out.

    Requires: an arena; room for the header and two elements.
    """
    sc, rc, sd, rd = _layout(plan)
    p, r = plan.size, plan.rank
    x, out = plan.input, plan.output
    if p == 1:
        yield Round(then=_own(plan))
        return
    c = _arena_chunk(plan)
    isz = plan.itemsize
    hbytes = _header_bytes(p)
    rest = others(r, p)
    tail, head = x[sd[r + 1] :], x[: sd[r]]
    length = len(tail) + len(head)
    offs = [0] * p  # where the piece for q starts in my stream
    for q in rest:
        offs[q] = sd[q] - sd[r + 1] if q > r else len(tail) + sd[q]
    my_chunks = topology.ceil_div(length, c)
    header = np.array([my_chunks, *offs], dtype=np.int64)

    def put_chunk(t: int) -> list[LocalStep]:
        lo, hi = t * c, min(length, (t + 1) * c)
        base = hbytes + (t % 2) * c * isz
        steps: list[LocalStep] = []
        a, b = topology.intersect(lo, hi, 0, len(tail))
        if b > a:
            steps.append(Put(base + (a - lo) * isz, tail[a:b]))
        a, b = topology.intersect(lo, hi, len(tail), length)
        if b > a:
            steps.append(Put(base + (a - lo) * isz, head[a - len(tail) : b - len(tail)]))
        return steps

    def readers(t: int) -> tuple[int, ...]:
        """Peers whose piece overlaps my chunk ``t``."""
        found = []
        for q in rest:
            a, b = topology.intersect(t * c, (t + 1) * c, offs[q], offs[q] + sc[q])
            if b > a:
                found.append(q)
        return tuple(found)

    their_k = np.zeros(p, dtype=np.int64)
    my_off = np.zeros(p, dtype=np.int64)  # where my piece starts in each peer's stream
    first: list[LocalStep] = [Put(0, header)]
    if my_chunks:
        first += put_chunk(0)
    first += [Signal(1), Wait(rest, 1)]
    for q in rest:
        first += [Get(q, 0, their_k[q : q + 1]), Get(q, 8 * (1 + r), my_off[q : q + 1])]
    first += _own(plan)
    yield Round(then=first)
    # the round above is complete: the peers' headers are in their_k/my_off now
    total = max(my_chunks, int(their_k.max()))
    for t in range(total):
        lo, hi = t * c, (t + 1) * c
        base = hbytes + (t % 2) * c * isz
        steps: list[LocalStep] = []
        for q in rest:
            start = int(my_off[q])
            a, b = topology.intersect(lo, hi, start, start + rc[q])
            if b > a:
                dst = out[rd[q] + a - start : rd[q] + b - start]
                steps += [Wait((q,), t + 1), Get(q, base + (a - lo) * isz, dst)]
        if t + 1 < my_chunks:
            waiting = readers(t - 1) if t >= 1 else ()
            if waiting:
                steps.append(Wait(waiting, t + 1))
            steps += put_chunk(t + 1)
        if t + 1 < total:
            steps.append(Signal(t + 2))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


def _fits_region(plan: Plan) -> bool:
    # per rank, as bruck's rule: the split sizes are not shared before the entry,
    # and the runtime decides after it, from every rank's header
    inp = 0 if plan.input is None else plan.input.nbytes
    return split_head(plan.size) + inp <= plan.region_bytes


@register(
    "all_to_all",
    "oneshot",
    description="split header and every piece through the one-shot regions and one entry",
    supports=_fits_region,
    requires="the split header and this rank's input fit a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot all-to-all (paths/oneshot.all_to_all).

    Decided after the entry, by ``_select.all_to_all_direct_limit``.

    Steps: 2 rounds. Round 0: ``Put`` my split header (where my piece for each
    rank lies, send and receive counts) and every piece of my input but my own
    into my one-shot region; ``Enter``; ``Get`` every rank's header. Round 1:
    copy my own piece; ``Get`` the piece from each other rank at the offset its
    header gives, starting at the next rank.

    Bytes sent per rank: ``3 P`` int64 of header and my input but my own piece
    into my region; every rank's header and my pieces read.

    Requires: the header and my input fit a one-shot region (a per-rank rule,
    as bruck's: the runtime decides after the entry, from every header).

    The tiny-call lane runs it as a program (``Round.program``) flattened on the
    presumption that every rank's header is mine (equal splits): its header
    ``Get``s become ``Expect``s, and a header that differs sends the call on from
    the entry on the general path, which reads them (``_program.flatten``).
    """
    sc, rc, sd, rd = _layout(plan)
    me, n, isz, x = plan.rank, plan.size, plan.itemsize, plan.input
    head = split_head(n)
    header = publish_header(sc, rc, sd)
    stage = [header]
    stage += [Put(head + sd[a] * isz, x[sd[a]:sd[b]], REGION)
              for a, b in ((0, me), (me + 1, n)) if sd[b] > sd[a]]
    heads, gets = read_headers(plan, header.src)
    yield Round(then=enter(plan, before=stage) + gets)
    at = offsets_of_mine(plan, heads)
    yield Round(then=_own(plan) + [
        Get(q, head + at[q], plan.output[rd[q]:rd[q + 1]], REGION)
        for q in topology.rotation(me, n)[1:] if rc[q]])


@register(
    "all_to_all",
    "cma",
    description="single-copy: each rank reads its piece straight from every rank's exposed input",
    supports=lambda plan: split_head(plan.size) <= plan.region_bytes,
    requires="a one-shot region for the split header",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy all-to-all (``_select.all_to_all_single_copy``; paths/single_copy.read_pieces for uneven splits).

    Steps: 2 rounds. Round 0: ``Put`` my split header into my one-shot region,
    ``Expose`` my input, ``Enter``, ``Get`` every rank's header. Round 1: copy
    my own piece; ``Get`` the piece from each other rank straight from its
    exposed input at the offset its header gives; the closing signal and wait.

    Bytes sent per rank: ``3 P`` int64 of header; my pieces read once each.

    Requires: a host that lets members read each other's memory; a one-shot
    region for the header.

    The runtime runs it as a program (paths/single_copy.CopyPrograms) flattened on the
    presumption that every rank's header is mine (equal splits), as the one-shot
    schedule's: its header ``Get``s become ``Expect``s, and a header that differs
    sends the call on from the entry on the general path, whose body reads uneven
    splits.
    """
    sc, rc, sd, rd = _layout(plan)
    me, n = plan.rank, plan.size
    header = publish_header(sc, rc, sd)
    heads, gets = read_headers(plan, header.src)
    yield Round(then=enter(plan, expose=plan.input, before=[header]) + gets)
    at = offsets_of_mine(plan, heads)
    yield Round(then=_own(plan) + [
        Get(q, at[q], plan.output[rd[q]:rd[q + 1]], EXPOSED)
        for q in topology.rotation(me, n)[1:] if rc[q]] + closing(plan))
