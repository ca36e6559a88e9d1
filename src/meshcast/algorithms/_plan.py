"""The vocabulary of schedules: what an algorithm is given (Plan) and what it yields (Round, steps).

Theory of operation
-------------------
An algorithm is a generator ``def name(plan: Plan) -> Iterator[Round]``. It
never performs I/O. Each yielded :class:`Round` is carried out completely by
whoever runs the schedule (the executor on real channels and arenas, or the
simulator with all ranks in one process) before the generator is resumed, so
a generator may read data that an earlier round delivered (e.g. split sizes
published by a peer) to decide what comes next.

A round is carried out in this order:

1. every ``Send``/``Recv`` in ``round.comms`` is posted at once (so a ring in
   which every rank "sends first" cannot deadlock) and all are waited for;
2. every step in ``round.then`` runs, in order. Local steps (``Reduce``,
   ``Copy``) and arena steps (``Put``, ``Get``, ``ReduceSlots``, ``Signal``,
   ``Wait``) may be mixed freely; a ``Wait`` blocks until its condition holds.

Buffers are flat 1-D NumPy arrays (views into the user's data, the plan's
output, or scratch from ``plan.scratch``). A ``Send`` transmits ``buf``'s bytes;
the matching ``Recv`` on the peer must name a buffer of the same length.
Comm steps between two ranks within one round are matched in posting order:
the k-th ``Send`` to peer p matches the k-th ``Recv`` from this rank on p.

The arena (shared-slot algorithms)
----------------------------------
When ``plan.slot_bytes > 0`` all ranks of the group share one arena: rank r
owns a *slot* of ``plan.slot_bytes`` bytes that every rank can read and only r
writes, and a *signal word*. Signal words hold ``(seq, phase)`` pairs that only
grow: ``Signal(phase)`` sets my word to ``(current seq, phase)``; ``Wait(ranks,
phase)`` returns when every listed rank's word is ``>= (current seq, phase)``.

Rule 1: before the first round of a shared-slot schedule runs, the executor
guarantees that every rank of the group has entered this collective, i.e. has
finished reading every slot for the previous one (the fingerprint exchange
does this). So phase numbers start at 1 in every schedule.

Rule 2: a rank must not overwrite a region of its slot that a peer may still
read; the schedule must ``Wait`` for the peers' phase that says they are done
(e.g. double-buffer by chunk parity and wait for phase ``k-1``).

Rule 3: data written by ``Put`` before a ``Signal`` is visible to any rank
that has seen that signal (the executor provides the ordering).

Offsets are in bytes within a slot; ``Put``/``Get``/``ReduceSlots`` move
``buf.nbytes`` bytes.

The one-host fast paths (entered schedules)
-------------------------------------------
The one-shot, single-copy ("cma") and symmetric paths of paths/*.py are
written in the same vocabulary, with three more memory *spaces* for the
``space`` of ``Put``/``Get``/``ReduceSlots`` and three more steps:

* ``space=REGION``: my *one-shot region* of ``plan.region_bytes`` bytes (the
  arena's region of the call's parity; the executor picks the parity, and
  the entry of the call in between guarantees nobody still reads it).
  Only its owner ``Put``s into it, every rank may read it.
* ``space=EXPOSED``: the buffer a rank published with ``Expose(buf)`` for
  this call (single-copy: its user buffer, read or written by the peers
  with process_vm_readv/writev; symmetric: its part of a symmetric
  allocation, mapped by every rank, so the exposure costs nothing).
  ``Get``/``ReduceSlots`` read a peer's exposed bytes, ``Write(peer, offset,
  src)`` writes into them; the owner changes its own through its buffer.
* ``Enter()``: the call's entry, run by the schedule itself: my fingerprint
  and one signal, then wait until every rank has entered. It is the rule
  that makes reading every region safe: whatever a rank ``Put`` into its
  region or exposed before its ``Enter`` is visible to every rank after
  its own ``Enter``. A schedule that has an ``Enter`` gets no entry from the
  executor before its first round (Rule 1 becomes this step); phases of its
  signals count from 1 after it. ``Enter(awaits=ranks)`` waits only for
  those ranks (a one-sided round, as MPI's eager sends: a broadcast's root
  awaits nobody); the rank finishes the round at its next call.

Rule 4: a rank must not return (or change its exposed buffer) while a peer
may still read or write it: single-copy and symmetric schedules end with a
closing ``Signal``/``Wait`` of every rank, as the runtime does.

These schedules are registered *described* (families ``oneshot``, ``cma``,
``symmetric``, see ``_registry``): the simulator runs them against the NumPy
references with the race checker, the guide animates them and ``meshcast
algorithms`` lists them; the selector never picks them (the fast-path rules
do). The one-shot schedules decided before the call (barrier, broadcast,
reduce, all_reduce, all_gather, reduce_scatter) are what runs: flattened
once per call shape into programs (``_program``) that the executor's
``BoundProgram`` runs on each call's arrays, or the compiled interpreter
(transport/_tiny.c, ``Round.program``) where it is built. The tiny-call lane
runs gather's, scatter's and all_to_all's one-shot schedules as programs too
(all_to_all's flattened on a presumption it checks: ``Expect``). The single-copy
schedules run as programs too (paths/single_copy.py: the interpreter copies from and
into the buffers the peers exposed), and so do the symmetric ones
(paths/symmetric.py: ``_program.as_mapped`` makes a peer's exposed buffer its part
of the allocation, mapped here). What is left as Python bodies: an all_to_all of
uneven splits and a gather root's uneven pieces apart (paths/single_copy.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

# --------------------------------------------------------------------- steps


@dataclass(frozen=True, eq=False)
class Send:
    """Send ``buf``'s bytes to group rank ``peer``."""

    peer: int
    buf: np.ndarray


@dataclass(frozen=True, eq=False)
class Recv:
    """Receive exactly ``buf.nbytes`` bytes from group rank ``peer`` into ``buf``."""

    peer: int
    buf: np.ndarray


@dataclass(frozen=True, eq=False)
class Reduce:
    """``dst = op(dst, src)`` element-wise with the plan's op (local)."""

    dst: np.ndarray
    src: np.ndarray


@dataclass(frozen=True, eq=False)
class Copy:
    """``dst[:] = src`` (local)."""

    dst: np.ndarray
    src: np.ndarray


# The memory a Put/Get/ReduceSlots addresses (see "The one-host fast paths" above).
SLOT, REGION, EXPOSED = "slot", "region", "exposed"
SPACES = (SLOT, REGION, EXPOSED)


@dataclass(frozen=True, eq=False)
class Put:
    """Copy ``src`` into my own arena slot (or one-shot region) at byte ``offset``."""

    offset: int
    src: np.ndarray
    space: str = SLOT  # SLOT or REGION


@dataclass(frozen=True, eq=False)
class Get:
    """Copy ``dst.nbytes`` bytes from ``peer``'s slot (region, exposed buffer) at byte
    ``offset`` into ``dst``."""

    peer: int
    offset: int
    dst: np.ndarray
    space: str = SLOT


@dataclass(frozen=True, eq=False)
class ReduceSlots:
    """``dst = op(slot[ranks[0]], slot[ranks[1]], ...)`` read at byte ``offset``.

    Operands are combined left to right in the order given, so every rank that
    reduces the same region with the same ``ranks`` gets bitwise the same
    result. ``dst`` is overwritten (it may be a view of the caller's data).
    With ``space=REGION`` or ``EXPOSED`` the operands are the ranks' one-shot
    regions or exposed buffers (single-copy: reduce while reading).
    ``own`` (an array of ``dst``'s size), if given, is my own operand in place
    of my slot's bytes: what only I read need not be staged for the others. It
    may overlap ``dst`` (an in-place call): the executors then read it first,
    the compiled one by staging it in those bytes of my slot, which no other
    rank may read.
    """

    dst: np.ndarray
    ranks: tuple[int, ...]
    offset: int
    space: str = SLOT
    own: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Enter:
    """The call's entry (fingerprint exchange and one signal); returns when every rank
    in ``awaits`` entered (None: every rank), after which their earlier region puts and
    exposure are visible to me.

    ``awaits`` short of every rank makes the round *one-sided* (a broadcast root
    needs nobody, a reader only the root): the rest of the round, every rank's entry
    and the fingerprints' comparison, is this rank's to finish at its next call on
    the group, before it writes into the arena. An executor may always await every
    rank instead; a schedule must not rely on anything of a rank it did not await,
    and a rank that exposes a buffer must await every rank (Rule 4).
    """

    awaits: tuple[int, ...] | None = None


@dataclass(frozen=True, eq=False)
class Expose:
    """Publish ``buf`` (before ``Enter``) as my exposed buffer of this call."""

    buf: np.ndarray


@dataclass(frozen=True, eq=False)
class Write:
    """Copy ``src`` into ``peer``'s exposed buffer at byte ``offset`` (process_vm_writev,
    or a store into its symmetric part)."""

    peer: int
    offset: int
    src: np.ndarray


@dataclass(frozen=True, eq=False)
class Signal:
    """Publish ``(seq, phase)`` in my signal word (after all my earlier Puts)."""

    phase: int


@dataclass(frozen=True, eq=False)
class Wait:
    """Block until every rank in ``ranks`` has signalled at least ``phase`` in this seq."""

    ranks: tuple[int, ...]
    phase: int


@dataclass(frozen=True, eq=False)
class Expect:
    """``peer``'s memory of ``space`` holds ``value``'s bytes at byte ``offset``.

    Only programs have this step: it is what a ``Get`` into an array of the
    schedule's own becomes when the schedule is flattened on a presumption of
    what that ``Get`` delivers (``_program.flatten(presume=True)``: all_to_all's
    split headers, presumed equal to mine). Where the bytes differ, the program
    no longer is the schedule: an executor stops it there, and the runtime goes on
    from the entry on the general path (the compiled interpreter's status 4).
    """

    peer: int
    offset: int
    value: np.ndarray
    space: str = REGION


CommStep = Union[Send, Recv]
LocalStep = Union[Reduce, Copy, Put, Get, ReduceSlots, Signal, Wait, Enter, Expose, Write,
                  Expect]


@dataclass(frozen=True, eq=False)
class Round:
    """Comm steps posted together, then local/arena steps run in order."""

    comms: tuple[CommStep, ...] = ()
    then: tuple[LocalStep, ...] = ()

    def __init__(self, *comms: CommStep, then: Sequence[LocalStep] = ()) -> None:
        object.__setattr__(self, "comms", tuple(comms))
        object.__setattr__(self, "then", tuple(then))


# ---------------------------------------------------------------------- plan


@dataclass
class Plan:
    """Everything a schedule may know about one call on one rank.

    Attributes:
        coll: collective name (``"all_reduce"``, ``"broadcast"``, ...).
        rank, size: this rank and the group size (group-local).
        dtype: element dtype of the buffers (already the working dtype).
        op: reduce op (a ``meshcast.ops.ReduceOp``) or None.
        root: group-local root for rooted collectives, else -1.
        input: flat input (see the per-collective layout below) or None.
        output: flat output or None.
        counts: per-rank element counts where they may differ between ranks
            (gather, all_gather, scatter, reduce_scatter); for all_to_all the
            counts this rank *sends* to each peer.
        recv_counts: all_to_all only: counts this rank receives from each peer.
        slot_bytes: bytes of each rank's arena slot (0 when there is no arena).
        region_bytes: bytes of each rank's one-shot region (0: none; ``REGION`` space).
        single_copy: ranks may read and write each other's exposed buffers
            (process_vm_readv; the host allows it).
        symmetric: the call's buffers lie in a symmetric allocation (every rank
            maps every rank's part; ``EXPOSED`` space without system calls).
        root_splits: gather and scatter, single-copy: the root has no piece of its own
            to copy (its own piece is in place) and moves a part of every other rank's
            piece itself, the others the rest, as a broadcast splits (the runtime's
            choice, ``_select.rooted_split``; every rank learns it after the entry from
            the root's exposure, ``paths/single_copy.SPLIT``).
        segment_bytes: preferred size of one piece in flight for pipelining.
        scratch: ``scratch(n)`` returns a fresh flat array of ``n`` elements of
            ``dtype`` (contents undefined).

    Buffer layout per collective (all flat, ``count`` = ``len`` of the data):

    ==================  =========================================  ==================================
    collective          input                                      output
    ==================  =========================================  ==================================
    broadcast           None                                       the data (root: source; others: dest)
    reduce              my contribution (not modified)             root: result; others None
    all_reduce          my contribution (may alias output)         result
    gather              my piece (``counts[rank]`` long)            root: pieces of all ranks in rank order
    all_gather          my piece                                   pieces of all ranks in rank order
    scatter             root: pieces for all ranks, rank order     my piece (``counts[rank]`` long)
    reduce_scatter      pieces for all ranks (``sum(counts)``)       my reduced piece
    all_to_all          pieces to each peer (``counts``)            pieces from each peer (``recv_counts``)
    barrier             None                                       None
    ==================  =========================================  ==================================
    """

    coll: str
    rank: int
    size: int
    dtype: np.dtype
    op: Any = None
    root: int = -1
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    counts: tuple[int, ...] | None = None
    recv_counts: tuple[int, ...] | None = None
    slot_bytes: int = 0
    region_bytes: int = 0
    single_copy: bool = False
    symmetric: bool = False
    root_splits: bool = False
    segment_bytes: int = 1 << 20
    scratch: Callable[[int], np.ndarray] = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.scratch is None:
            dtype = self.dtype
            self.scratch = lambda n: np.empty(n, dtype=dtype)

    @property
    def count(self) -> int:
        """Elements of the per-rank data for equal-size collectives."""
        if self.coll in ("broadcast", "all_reduce"):
            return 0 if self.output is None else len(self.output)
        if self.coll == "reduce":
            return 0 if self.input is None else len(self.input)
        return 0

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """Split ``n`` elements into ``parts`` contiguous (start, length) ranges.

    The first ``n % parts`` ranges are one element longer; ranges may be empty
    when ``n < parts``.
    """
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        length = base + (1 if i < extra else 0)
        out.append((start, length))
        start += length
    return out
