"""reduce: combine every rank's ``input`` with the op; the root's ``output`` gets the result.

Layout: ``plan.input`` is my contribution (never modified, except that the
root may pass ``input`` and ``output`` as the same array: in-place reduce);
``plan.output`` is the result on the root and None elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

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
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
    split_even,
)
from ._registry import register


def _commutative(plan: Plan) -> bool:
    return ops.is_commutative(plan.op)


def binomial_reduce(
    rank: int,
    size: int,
    root: int,
    acc: np.ndarray,
    tmp: np.ndarray | None,
    first: Sequence[LocalStep] = (),
) -> Iterator[Round]:
    """Rounds of a binomial-tree reduce of ``acc`` to ``root`` (``ceil_log2(size)`` rounds).

    In round ``k`` (mask ``m = 2**k``) relative rank ``v`` with ``v % 2m == m``
    sends its partial result to ``v - m``, which receives it into ``tmp`` and
    reduces it into ``acc``. ``acc`` must hold this rank's contribution before
    its first send; ``first`` are local steps run at the start of round 0's
    local part (e.g. copying the input into ``acc``; safe because a node with
    children never sends in round 0). Leaves may pass ``tmp=None``.
    Reused by all_reduce/tree.
    """
    v = topology.relative(rank, root, size)
    for k in range(topology.ceil_log2(size)):
        m = 1 << k
        then: list[LocalStep] = list(first) if k == 0 else []
        if v % (2 * m) == m:
            yield Round(Send(topology.absolute(v - m, root, size), acc), then=then)
        elif v % (2 * m) == 0 and v + m < size:
            assert tmp is not None
            then.append(Reduce(acc, tmp))
            yield Round(Recv(topology.absolute(v + m, root, size), tmp), then=then)
        else:
            yield Round(then=then)


def has_children(rank: int, size: int, root: int) -> bool:
    """Whether ``rank`` receives anything in a binomial tree rooted at ``root``."""
    return bool(topology.binomial_children(topology.relative(rank, root, size), size))


@register(
    "reduce",
    "tree",
    description="binomial tree toward the root: ceil(log2 P) rounds (latency-optimal)",
    supports=_commutative,
    requires="a commutative op",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Binomial-tree reduce.

    Steps: ``ceil(log2 P)`` rounds; in round ``k`` relative rank ``v`` with
    ``v % 2**(k+1) == 2**k`` sends its partial result to ``v - 2**k``, which
    reduces it into its own. Partial results combine subtrees in relative
    rank order, so the root's result is the same for any interleaving.

    Bytes sent per rank: ``S`` (root 0).

    Requires: a commutative op (operands are combined in root-relative order).

    Example (P=5, root 0): round 0: 1->0, 3->2; round 1: 2->0; round 2: 4->0.
    """
    x = plan.input
    p, r = plan.size, plan.rank
    if x is None or len(x) == 0:
        return
    is_root = r == plan.root
    if p == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    if not has_children(r, p, plan.root):
        yield from binomial_reduce(r, p, plan.root, x, None)  # a leaf sends its input as is
        return
    acc = plan.output if is_root else plan.scratch(len(x))
    assert acc is not None
    tmp = plan.scratch(len(x))
    yield from binomial_reduce(r, p, plan.root, acc, tmp, first=copy_steps(acc, x))


@register(
    "reduce",
    "direct",
    description="every rank sends to the root, which reduces in rank order (segmented)",
)
def direct(plan: Plan) -> Iterator[Round]:
    """Direct (all-to-one) reduce in rank order.

    Steps: one round per segment of ``plan.segment_bytes``; the root posts
    ``P-1`` receives and then reduces ``x0 op x1 op ... op x(P-1)`` left to
    right, so the result does not depend on arrival order.

    Bytes sent per rank: ``S`` (root 0; the root receives ``(P-1) S``).

    Requires: nothing (rank order works for any op).
    """
    x = plan.input
    p, r, root = plan.size, plan.rank, plan.root
    if x is None or len(x) == 0:
        return
    if p == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    segs = topology.chunks(len(x), segment_elems(plan))
    if r != root:
        for start, length in segs:
            yield Round(Send(root, x[start : start + length]))
        return
    out = plan.output
    assert out is not None
    width = segs[0][1]
    tmp = plan.scratch(p * width)
    in_place = same_memory(out, x)
    for start, length in segs:
        operands = [tmp[q * width : q * width + length] for q in range(p)]
        then: list[LocalStep] = []
        if in_place and r != 0:
            then.append(
                Copy(operands[r], x[start : start + length])
            )  # saved before out is rewritten
        else:
            operands[r] = x[start : start + length]
        dst = out[start : start + length]
        then += copy_steps(dst, operands[0])
        then += [Reduce(dst, operands[q]) for q in range(1, p)]
        recvs = [Recv(q, operands[q]) for q in others(r, p)]
        yield Round(*recvs, then=then)


@register(
    "reduce",
    "ring",
    description="ring reduce-scatter, then every rank sends its reduced chunk to the root",
    supports=_commutative,
    requires="a commutative op",
)
def ring(plan: Plan) -> Iterator[Round]:
    """Ring reduce (reduce-scatter around the ring + gather of the chunks at the root).

    Steps: ``P-1`` ring rounds, then 1 gather round. The data is split in
    ``P`` chunks; in ring round ``s`` rank ``r`` sends chunk ``(r-s) % P`` to
    ``r+1`` and receives chunk ``(r-s-1) % P`` from ``r-1``, reducing its
    own contribution into it. Afterwards rank ``r`` holds the fully reduced
    chunk ``(r+1) % P`` and sends it to the root.

    Bytes sent per rank: ``S (P-1)/P + S/P`` = ``S`` (bandwidth-optimal; the
    root sends ``S (P-1)/P``).

    Requires: a commutative op (chunks are combined in ring order).

    Example (P=3): after 2 rounds rank 0 holds chunk 1, rank 1 chunk 2,
    rank 2 chunk 0; all of them go to the root in round 2.
    """
    x = plan.input
    p, r, root = plan.size, plan.rank, plan.root
    if x is None or len(x) == 0:
        return
    if p == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    chunks = [x[s : s + n] for s, n in split_even(len(x), p)]
    acc_buf = plan.output if r == root else plan.scratch(len(x))
    assert acc_buf is not None
    acc = [acc_buf[s : s + n] for s, n in split_even(len(x), p)]
    in_place = same_memory(acc_buf, x)
    tmp = plan.scratch(len(chunks[0])) if in_place else None
    left, right = topology.ring_neighbours(r, p)
    for s in range(p - 1):
        send_i, target = (r - s) % p, (r - s - 1) % p
        # round 0 sends my untouched input chunk; later rounds forward what the
        # previous round reduced into acc
        outgoing = chunks[send_i] if s == 0 else acc[send_i]
        comms: list[Send | Recv] = []
        then: list[LocalStep] = []
        if len(outgoing):
            comms.append(Send(right, outgoing))
        if len(acc[target]):
            if in_place:  # acc[target] already holds my contribution
                incoming = tmp[: len(acc[target])]
                comms.append(Recv(left, incoming))
                then.append(Reduce(acc[target], incoming))
            else:  # receive straight into acc, then fold my input in
                comms.append(Recv(left, acc[target]))
                then.append(Reduce(acc[target], chunks[target]))
        yield Round(*comms, then=then)
    mine = (r + 1) % p
    if r != root:
        yield Round(*([Send(root, acc[mine])] if len(acc[mine]) else []))
    else:
        recvs = [Recv(q, acc[(q + 1) % p]) for q in others(r, p) if len(acc[(q + 1) % p])]
        yield Round(*recvs)


def arena_layout(plan: Plan) -> tuple[int, int]:
    """``(c, s)`` for the all-reduce/reduce slot: chunks of ``c`` elements, shares of ``s``.

    Each of the two buffers holds an input region of ``c`` and an output
    region of ``s = ceil(c / P)`` elements (one rank's share of a chunk), so
    ``2 (c + s) <= slot`` elements.
    """
    p = plan.size
    room = plan.slot_bytes // (2 * plan.itemsize)  # elements per buffer
    c = min(room * p // (p + 1), segment_elems(plan))
    while c > 0 and c + topology.ceil_div(c, p) > room:
        c -= 1
    return c, topology.ceil_div(c, p) if c else 0


@register(
    "reduce",
    "arena",
    description="ranks publish chunks, each reduces 1/P of every chunk from all slots, root collects",
    family="arena",
    supports=lambda plan: arena_layout(plan)[0] >= 1,
    requires="a slot of at least 4 elements",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-slot reduce: every rank reduces 1/P of each chunk, the root collects the shares.

    Slot layout: as all_reduce/arena, two buffers of ``[input c | share s]``.

    Steps: as all_reduce/arena (round ``k`` waits for all ``k+1``, reduces
    share ``k`` in rank order, publishes it with chunk ``k+1`` and signals
    ``k+2``), except that only the root ``Get``s the shares, and non-roots
    reduce theirs into scratch and skip the last round. Rule 2 holds as
    there: a share region is rewritten after the root's ``k+1``, which it
    signals after its Gets of share ``k-2``.

    Bytes sent per rank: ``S`` into the slot, ``S/P`` reduced from ``P`` slots
    and put back; the root copies out ``S (P-1)/P``.

    Requires: an arena; a slot of at least 4 elements.
    """
    x = plan.input
    if x is None or len(x) == 0:
        return
    if plan.size == 1:
        yield Round(then=copy_steps(plan.output, x))
        return
    out = plan.output if plan.rank == plan.root else None
    yield from arena_sections(plan, x, out, everyone_gets=False)


def arena_sections(
    plan: Plan, x: np.ndarray, mine_into: np.ndarray | None, *, everyone_gets: bool
) -> Iterator[Round]:
    """The rounds of all_reduce/arena and reduce/arena (see all_reduce.arena's docstring).

    ``mine_into`` is where my reduced shares go (my output; scratch-backed
    when None: a non-root of reduce); ``everyone_gets`` says whether every
    rank copies the others' shares out (all_reduce) or only the root (reduce).
    """
    p, r, root = plan.size, plan.rank, plan.root
    c, s = arena_layout(plan)
    isz = plan.itemsize
    everyone = tuple(range(p))
    rest = others(r, p)
    parts = topology.chunks(len(x), c)
    getter = everyone_gets or r == root
    tmp = plan.scratch(s) if mine_into is None else None

    def in_off(k: int) -> int:
        return (k % 2) * (c + s) * isz

    def shares(k: int) -> list[tuple[int, int]]:
        start, length = parts[k]
        return [(start + a, n) for a, n in split_even(length, p)]

    start, length = parts[0]
    yield Round(then=[Put(in_off(0), x[start : start + length]), Signal(1)])
    for k in range(len(parts) + 1):
        if k == len(parts) and not getter:
            return  # nothing left to read; nobody waits for more from me
        steps: list[LocalStep] = [Wait(rest, k + 1)]
        if k >= 1 and getter:
            for q, (a, n) in enumerate(shares(k - 1)):
                if q != r and n:
                    steps.append(Get(q, in_off(k - 1) + c * isz, mine_into[a : a + n]))
        if k < len(parts):
            a, n = shares(k)[r]
            if n:
                dst = tmp[:n] if mine_into is None else mine_into[a : a + n]
                offset = in_off(k) + (a - parts[k][0]) * isz
                steps.append(ReduceSlots(dst, everyone, offset))
                if everyone_gets or r != root:  # nobody reads the root's share of a reduce
                    steps.append(Put(in_off(k) + c * isz, dst))
            if k + 1 < len(parts):
                start, length = parts[k + 1]
                steps.append(Put(in_off(k + 1), x[start : start + length]))
            steps.append(Signal(k + 2))
        yield Round(then=steps)


# ------------------------------------------- one-host fast paths (described schedules)


@register(
    "reduce",
    "oneshot",
    description="every rank's data through its one-shot region and one entry; the root reduces all",
    supports=buffer_fits,
    requires="the buffer fits a one-shot region",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot reduce (paths/oneshot.reduce; chosen by ``_select.oneshot``).

    Steps: 1 round: every rank ``Put``s its data into its one-shot region and
    ``Enter``s (one-sided off the root, which awaits every rank: the others
    await nobody); the root ``ReduceSlots`` every region, in rank order, into
    its output.

    Bytes sent per rank: ``S`` into my region; the root reads ``P S``.

    Requires: ``S`` fits a one-shot region.
    """
    at_root = plan.rank == plan.root
    yield Round(then=enter(plan, stage=plan.input, awaits=None if at_root else ())
                + (reduce_all(plan, plan.output, 0, REGION) if at_root else []))


@register(
    "reduce",
    "cma",
    description="single-copy: the root reduces straight from every rank's exposed buffer",
    family="cma",
)
def cma(plan: Plan) -> Iterator[Round]:
    """Single-copy reduce (run as a program: paths/single_copy.CopyPrograms; ``_select.single_copy``).

    Steps: 1 round: every rank ``Expose``s its data and ``Enter``s; the root
    ``ReduceSlots`` every rank's exposed buffer, in rank order, into its output
    (the runtime reads it in cache-sized chunks and reduces each while it is
    hot; the bytes are these); the closing signal and wait.

    Bytes sent per rank: the root reads ``(P-1) S``; the others nothing.

    Requires: a host that lets members read each other's memory.
    """
    at_root = plan.rank == plan.root
    yield Round(then=enter(plan, expose=plan.input)
                + (reduce_all(plan, plan.output, 0, EXPOSED) if at_root else [])
                + closing(plan))
