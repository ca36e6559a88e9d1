"""Programs: a schedule flattened once per call shape into records of integers.

Theory of operation
-------------------
A schedule is a generator over the call's own arrays (see ``_plan``), so
running one costs a Plan, a generator and a step object per step, every
call: microseconds that a one-shot call of a few kilobytes cannot afford.
A *program* is the schedule run once, on probe arrays shaped like the
call's, with every array a step names replaced by where it lies in the
call's buffers. It is then valid for every call of the same shape (the
cache key: collective, group, dtype, root, the input's and output's lengths
and the per-rank counts), whatever arrays that call brings; the executor
(``_execute.BoundProgram``) binds it to them.

A record is a tuple of nine integers, the form a compiled interpreter
reads as well as Python::

    (opcode, peer, space, offset, nbytes, buf, at, src_buf, src_at)

* ``opcode``: one of this module's opcodes, one per step type (``PUT``,
  ``GET``, ...; a ``ROUND`` record opens each round, its comm steps first,
  as in a Round).
* ``peer``: the group rank a step addresses; for ``REDUCE_SLOTS`` and
  ``WAIT`` an index into :attr:`Program.rank_sets` instead, and for ``ENTER``
  the ranks it awaits there (``-1``: every rank).
* ``space``: :data:`SPACE_CODES` of the step's arena space (slot, one-shot
  region, exposed buffer), ``-1`` where it has none.
* ``offset``: bytes into that space; for ``SIGNAL`` and ``WAIT`` the phase.
* ``nbytes``: bytes the step moves (the destination's, for reductions).
* ``buf``, ``at``: the call buffer the step reads or writes and the byte
  offset in it: :data:`INPUT` (the plan's input), :data:`OUTPUT` (its
  output), :data:`PIECES` + i (piece i of a side the call gives as a list,
  see :func:`as_pieces`), :data:`CONSTANT` (bytes of
  :attr:`Program.constants`: a read-only array of the schedule's own, such as
  all_to_all's split header, which a ``Put`` publishes and an ``EXPECT``
  compares), or :data:`NO_BUFFER` for an empty array.
* ``src_buf``, ``src_at``: the source of a local ``COPY`` or ``REDUCE``
  (``buf`` is then the destination); for ``REDUCE_SLOTS``, where its ``own``
  operand lies (:data:`NO_BUFFER`: it has none).

Flattening runs the whole generator without delivering any data, so only a
schedule whose steps do not depend on what earlier rounds delivered can be
flattened as it is. all_to_all's one-shot schedule reads every rank's split
header and takes its offsets from them: it is flattened on a *presumption*
(``flatten(presume=True)``). Its arrays of its own hold, before it reads into
them, what it presumes they will get (every rank's header is mine: equal
splits, the common call); each such ``Get`` becomes an ``EXPECT`` record, which
an executor checks and, where the bytes differ, stops the program there (the
runtime then goes on from the entry on the general path, which reads the
headers). The one-shot schedules run as programs so, and
``tests/unit/test_programs.py`` proves each program equal to its generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._plan import (
    EXPOSED,
    REGION,
    SLOT,
    Copy,
    Enter,
    Expect,
    Expose,
    Get,
    Plan,
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
    Write,
)

# opcodes: one per step type, plus ROUND, which opens a round
(ROUND, SEND, RECV, PUT, GET, REDUCE_SLOTS, ENTER, EXPOSE, WRITE, SIGNAL, WAIT, COPY,
 REDUCE, EXPECT) = range(14)
SPACE_CODES = {SLOT: 0, REGION: 1, EXPOSED: 2}
SPACES = {code: name for name, code in SPACE_CODES.items()}
NO_BUFFER, INPUT, OUTPUT = -1, 0, 1
CONSTANT = -2  # the program's own bytes (Program.constants), never written
PIECES = 2  # buffer index of the first piece of a side given as a list (as_pieces)
BOTH = 2  # Program.listed's side where both are lists: the input's pieces, then the output's

Record = tuple[int, int, int, int, int, int, int, int, int]


class NotFlat(ValueError):
    """A schedule names an array that is not part of the call's input or output (scratch,
    or a buffer of its own), so it cannot be run as a program of that call's buffers."""


class NotPresumed(RuntimeError):
    """An ``EXPECT`` record found other bytes than the program was flattened on: the
    program no longer is its schedule for this call (the runtime goes on from the
    entry on the general path)."""


@dataclass(frozen=True)
class Program:
    """One rank's schedule for one call shape, flattened (see the module docstring).

    Attributes:
        name: the algorithm (``"all_reduce/oneshot"``).
        dtype: the element type reductions run in.
        records: the steps, in order, as tuples of nine ints.
        rank_sets: the rank tuples ``REDUCE_SLOTS``, ``WAIT`` and ``ENTER`` records index.
        sizes: bytes of the input and of the output it was flattened for.
        listed: (side, count): the side (:data:`INPUT` or :data:`OUTPUT`) that calls
            give as a list of ``count`` arrays of equal length, which the records
            address as buffers ``PIECES + i`` (see :func:`as_pieces`); :data:`BOTH`:
            both sides are such lists, the input's pieces ``PIECES + i``, the output's
            ``PIECES + count + i`` (torch's all_to_all of lists); ``(NO_BUFFER, 0)``:
            both sides are one array.
        constants: the bytes records address as :data:`CONSTANT` (each array
            8-byte aligned).
        mapped: the listed side's pieces are every rank's whole buffer of that side,
            mapped here (a symmetric allocation's parts, :func:`as_mapped`), not one
            buffer cut in ``count``.
    """

    name: str
    dtype: np.dtype
    records: tuple[Record, ...]
    rank_sets: tuple[tuple[int, ...], ...]
    sizes: tuple[int, int]
    listed: tuple[int, int] = (NO_BUFFER, 0)
    constants: bytes = b""
    mapped: bool = False

    @property
    def rounds(self) -> int:
        return sum(1 for rec in self.records if rec[0] == ROUND)

    def buffer_bytes(self, buf: int) -> int:
        """Bytes of call buffer ``buf`` (:data:`INPUT`, :data:`OUTPUT` or a piece)."""
        if buf < PIECES:
            return self.sizes[buf]
        side, count = self.listed
        if side == BOTH:
            side = INPUT if buf < PIECES + count else OUTPUT
        return self.sizes[side] if self.mapped else self.sizes[side] // count

    @property
    def buffers(self) -> int:
        """How many call buffers the records address: the input, the output, then the
        pieces of each listed side."""
        side, count = self.listed
        return PIECES + (2 * count if side == BOTH else count)

    def is_listed(self, buf: int) -> bool:
        """Whether call buffer ``buf`` is a side the call gives as a list (the records
        address its pieces instead)."""
        side = self.listed[0]
        return buf in (INPUT, OUTPUT) and side in (buf, BOTH)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class _Locator:
    """Where an array of the schedule lies in the probe buffers, or, for a read-only
    array of the schedule's own that a step reads (``constant``), in the program's
    constants."""

    def __init__(self, buffers: dict[int, np.ndarray | None]) -> None:
        self._spans = [(index, _address(b), b.nbytes) for index, b in buffers.items()
                       if b is not None and b.nbytes]
        self.constants = bytearray()
        self._placed: dict[bytes, int] = {}  # (the same bytes once: a header and its checks)

    def __call__(self, a: np.ndarray, constant: bool = False) -> tuple[int, int]:
        if a.nbytes == 0:
            return NO_BUFFER, 0
        if not a.flags.c_contiguous:
            raise NotFlat("a step names a non-contiguous array")
        start = _address(a)
        for index, base, nbytes in self._spans:
            if base <= start and start + a.nbytes <= base + nbytes:
                return index, start - base
        if constant:
            return self.constant(a)
        raise NotFlat("a step names an array outside the call's input and output")

    def constant(self, a: np.ndarray) -> tuple[int, int]:
        """``a``'s bytes as they are now, among the constants."""
        value = a.tobytes()
        at = self._placed.get(value)
        if at is None:
            at = self._placed[value] = len(self.constants)
            self.constants += value + bytes(-len(value) % 8)
        return CONSTANT, at


def flatten(schedule: Callable[[Plan], Iterator[Round]], plan: Plan, name: str,
            presume: bool = False) -> Program:
    """Run ``schedule(plan)`` to the end and pack its steps as a program.

    ``plan``'s input and output must be probe arrays of the call's shape that
    share no memory (fresh allocations): every step's array is located in them.
    A ``Put`` of a read-only array of the schedule's own publishes a constant
    (its bytes go into the program). With ``presume``, a ``Get`` into an array of
    the schedule's own becomes an ``EXPECT`` of what that array holds when the
    step is yielded: the schedule must have filled it with what it presumes the
    ``Get`` delivers (see the module docstring).

    Raises:
        NotFlat: a step names an array that is neither (scratch, or the
            schedule's own); run such a schedule through ``_execute.execute``.
    """
    locate = _Locator({INPUT: plan.input, OUTPUT: plan.output})
    records: list[Record] = []
    rank_sets: list[tuple[int, ...]] = []

    def ranks_index(ranks: tuple[int, ...]) -> int:
        if ranks not in rank_sets:
            rank_sets.append(ranks)
        return rank_sets.index(ranks)

    for rnd in schedule(plan):
        records.append((ROUND, -1, -1, 0, 0, NO_BUFFER, 0, NO_BUFFER, 0))
        for step in (*rnd.comms, *rnd.then):
            if type(step) is Enter and step.awaits is not None and set(step.awaits) >= set(
                    range(plan.size)):
                step = Enter()  # awaiting every rank is the whole round
            records.append(_record(step, locate, ranks_index, presume))
    sizes = tuple(0 if a is None else a.nbytes for a in (plan.input, plan.output))
    return Program(name, plan.dtype, tuple(records), tuple(rank_sets),
                   sizes, constants=bytes(locate.constants))  # type: ignore[arg-type]


def _record(step: Any, locate: _Locator, ranks_index: Callable[[tuple[int, ...]], int],
            presume: bool = False) -> Record:
    kind = type(step)
    if kind is Enter:
        awaits = -1 if step.awaits is None else ranks_index(tuple(step.awaits))
        return (ENTER, awaits, -1, 0, 0, NO_BUFFER, 0, NO_BUFFER, 0)
    if kind is Signal:
        return (SIGNAL, -1, -1, step.phase, 0, NO_BUFFER, 0, NO_BUFFER, 0)
    if kind is Wait:
        return (WAIT, ranks_index(tuple(step.ranks)), -1, step.phase, 0, NO_BUFFER, 0,
                NO_BUFFER, 0)
    if kind in (Send, Recv):
        return ((SEND if kind is Send else RECV), step.peer, -1, 0, step.buf.nbytes,
                *locate(step.buf), NO_BUFFER, 0)
    if kind is Put:
        return (PUT, -1, SPACE_CODES[step.space], step.offset, step.src.nbytes,
                *locate(step.src, constant=not step.src.flags.writeable), NO_BUFFER, 0)
    if kind is Get:
        try:
            where = locate(step.dst)
        except NotFlat:
            if not presume or step.dst.nbytes == 0:
                raise
            return (EXPECT, step.peer, SPACE_CODES[step.space], step.offset, step.dst.nbytes,
                    *locate.constant(step.dst), NO_BUFFER, 0)
        return (GET, step.peer, SPACE_CODES[step.space], step.offset, step.dst.nbytes,
                *where, NO_BUFFER, 0)
    if kind is ReduceSlots:
        own = (NO_BUFFER, 0) if step.own is None else locate(step.own)
        if step.own is not None and step.own.nbytes != step.dst.nbytes:
            raise NotFlat("a ReduceSlots step whose own operand is not its destination's size")
        return (REDUCE_SLOTS, ranks_index(tuple(step.ranks)), SPACE_CODES[step.space],
                step.offset, step.dst.nbytes, *locate(step.dst), *own)
    if kind is Expose:
        return (EXPOSE, -1, SPACE_CODES[EXPOSED], 0, step.buf.nbytes, *locate(step.buf),
                NO_BUFFER, 0)
    if kind is Write:
        return (WRITE, step.peer, SPACE_CODES[EXPOSED], step.offset, step.src.nbytes,
                NO_BUFFER, 0, *locate(step.src))
    if kind in (Copy, Reduce):
        if step.dst.nbytes != step.src.nbytes:
            raise NotFlat(f"a {kind.__name__} step between arrays of different sizes")
        return ((COPY if kind is Copy else REDUCE), -1, -1, 0, step.dst.nbytes,
                *locate(step.dst), *locate(step.src))
    raise NotFlat(f"no record for a {kind.__name__} step")


# the records whose byte ranges as_pieces may cut: moves and folds, element by element
_CUTTABLE = frozenset((PUT, GET, REDUCE_SLOTS, COPY, REDUCE, WRITE))


def as_pieces(program: Program, side: int, count: int) -> Program:
    """``program`` for calls that give ``side`` (:data:`INPUT`, :data:`OUTPUT` or
    :data:`BOTH`) as a list of ``count`` arrays of equal length (torch's list forms:
    all_gather into a list, reduce_scatter of a list, a gather root's list; both sides:
    all_to_all of lists): what the schedule, run on the pieces back to back, does, with
    every record that touches a listed side re-addressed to the piece it touches
    (buffer ``PIECES + i``, the output's after the input's where both are listed, bytes
    from that piece's start), and cut at the pieces' edges where it spans several (a Put
    of three pieces becomes three Puts, each into its place in the region). An exposure
    of a listed side is left out: a list is exposed as a table of where its pieces lie,
    which the call's entry writes (``Round.rooted``, or a program's rooted entry; peers
    address it as if the pieces lay back to back).

    Raises:
        NotFlat: a listed side's length is not ``count`` equal pieces of whole elements,
            or a record that cannot be cut (a message) touches it.
    """
    sides = (INPUT, OUTPUT) if side == BOTH else (side,)
    itemsize = program.dtype.itemsize
    if side not in (INPUT, OUTPUT, BOTH) or count < 1 or any(
            program.sizes[s] % (count * itemsize) for s in sides):
        raise NotFlat(f"{[program.sizes[s] for s in sides if s in (INPUT, OUTPUT)]} bytes are "
                      f"not {count} pieces of whole {program.dtype} elements")
    piece = {s: program.sizes[s] // count for s in sides}
    first = {s: PIECES + (count if side == BOTH and s == OUTPUT else 0) for s in sides}

    def place(buf: int, at: int) -> tuple[int, int]:
        if buf not in piece:
            return buf, at
        return first[buf] + at // piece[buf], at % piece[buf]

    records: list[Record] = []
    for rec in program.records:
        op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
        starts = [(b, a) for b, a in ((buf, at), (src_buf, src_at)) if b in piece and nbytes]
        if op == EXPOSE and buf in piece:
            continue  # (a list is exposed as its table of pieces, by the call's entry)
        if not starts:
            records.append(rec)
            continue
        if op not in _CUTTABLE or any(piece[b] == 0 for b, _ in starts):
            raise NotFlat(f"a record with opcode {op} touches a side given as pieces")
        # cut [0, nbytes) wherever either of its byte ranges crosses a piece's edge
        cuts = {0, nbytes}
        for b, a in starts:
            cuts.update(range(piece[b] - a % piece[b], nbytes, piece[b]))
        edges = sorted(cuts)
        # (their offset in the region or a peer's exposed buffer moves along)
        moves_space = op in (PUT, GET, REDUCE_SLOTS, WRITE)
        for lo, hi in zip(edges, edges[1:]):
            records.append((op, peer, space, offset + lo if moves_space else offset, hi - lo,
                            *place(buf, at + lo), *place(src_buf, src_at + lo)))
    return Program(program.name, program.dtype, tuple(records), program.rank_sets,
                   program.sizes, (side, count), program.constants)


def as_mapped(program: Program, side: int, count: int, me: int) -> Program:
    """``program`` (a ``symmetric`` schedule's, flattened for rank ``me``) for calls
    whose ``side`` (:data:`INPUT` or :data:`OUTPUT`) lies in a symmetric allocation
    mapped by every rank (meshcast/symmetric.py): the call gives that side as the list
    of the ``count`` ranks' parts of it, in rank order (buffer ``PIECES + q``: rank q's,
    mine among them), and what the schedule exposes is that side, so a peer's exposed
    buffer is its part, here in my memory. A ``GET`` from a peer's exposed buffer and a
    ``WRITE`` into it become ``COPY`` records between parts; a fold of the exposed
    buffers (``REDUCE_SLOTS`` of space exposed) stays, its operands the parts (the
    executors resolve them: ``Program.mapped``); the ``EXPOSE`` goes (nothing is
    published: the allocation is the exposure, and the call's fingerprint names it).

    Raises:
        NotFlat: ``side`` is not what the schedule exposes, or a step the mapping
            cannot carry (a message, a copy of my own exposed buffer's bytes that the
            side does not hold) touches it.
    """
    exposed = [rec for rec in program.records if rec[0] == EXPOSE]
    if (side not in (INPUT, OUTPUT) or len(exposed) != 1
            or exposed[0][4] != program.sizes[side]
            or exposed[0][4] and (exposed[0][5] != side or exposed[0][6] != 0)):
        raise NotFlat("a symmetric program exposes its mapped side, whole, once")
    mine = PIECES + me

    def place(buf: int, at: int) -> tuple[int, int]:
        return (mine, at) if buf == side else (buf, at)

    records: list[Record] = []
    for rec in program.records:
        op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
        if op == EXPOSE:
            continue
        if op in (SEND, RECV) and side in (buf, src_buf):
            raise NotFlat("a message of a side given as mapped parts")
        if op == GET and space == SPACE_CODES[EXPOSED]:
            rec = (COPY, -1, -1, 0, nbytes, *place(buf, at), PIECES + peer, offset)
        elif op == WRITE:
            rec = (COPY, -1, -1, 0, nbytes, PIECES + peer, offset, *place(src_buf, src_at))
        else:
            rec = (op, peer, space, offset, nbytes, *place(buf, at), *place(src_buf, src_at))
        if rec[0] == COPY and rec[4] == 0:
            continue  # (an empty piece)
        records.append(rec)
    return Program(program.name, program.dtype, tuple(records), program.rank_sets,
                   program.sizes, (side, count), program.constants, mapped=True)


def constant(program: Program, at: int, nbytes: int) -> np.ndarray:
    """The program's constant bytes ``[at, at + nbytes)``, read-only."""
    return np.frombuffer(program.constants, np.uint8, nbytes, at)


def _view(buffers: tuple[np.ndarray | None, ...], buf: int, at: int, nbytes: int
         ) -> np.ndarray:
    """The bytes ``[at, at + nbytes)`` of call buffer ``buf`` (flat uint8 views; a
    listed program's pieces after the input and output)."""
    if buf == NO_BUFFER:
        return np.empty(0, np.uint8)
    b = buffers[buf]
    assert b is not None
    return b[at:at + nbytes]


def expand(program: Program, buffers: tuple[np.ndarray | None, ...]) -> list[Round]:
    """The program as Rounds of steps on ``buffers`` (flat uint8 views of the input and
    output, then, for a program of :func:`as_pieces`, of each piece), typed like the
    plan's arrays where a step reduces: what the generator yields for a call on those
    buffers (the equivalence test compares the two)."""
    dtype = program.dtype
    rounds: list[tuple[list[Any], list[Any]]] = []

    def typed(buf: int, at: int, nbytes: int) -> np.ndarray:
        if buf == CONSTANT:  # (raw bytes: a header is no array of the call's dtype)
            return constant(program, at, nbytes)
        return _view(buffers, buf, at, nbytes).view(dtype)

    for op, peer, space, offset, nbytes, buf, at, src_buf, src_at in program.records:
        if op == ROUND:
            rounds.append(([], []))
            continue
        comms, then = rounds[-1]
        sp = SPACES.get(space, SLOT)
        if op in (SEND, RECV):
            comms.append((Send if op == SEND else Recv)(peer, typed(buf, at, nbytes)))
        elif op == PUT:
            then.append(Put(offset, typed(buf, at, nbytes), sp))
        elif op == GET:
            then.append(Get(peer, offset, typed(buf, at, nbytes), sp))
        elif op == EXPECT:
            then.append(Expect(peer, offset, typed(buf, at, nbytes), sp))
        elif op == REDUCE_SLOTS:
            own = None if src_buf == NO_BUFFER else typed(src_buf, src_at, nbytes)
            then.append(ReduceSlots(typed(buf, at, nbytes), program.rank_sets[peer], offset, sp,
                                    own))
        elif op == ENTER:
            then.append(Enter(None if peer < 0 else program.rank_sets[peer]))
        elif op == EXPOSE:
            then.append(Expose(typed(buf, at, nbytes)))
        elif op == WRITE:
            then.append(Write(peer, offset, typed(src_buf, src_at, nbytes)))
        elif op == SIGNAL:
            then.append(Signal(offset))
        elif op == WAIT:
            then.append(Wait(program.rank_sets[peer], offset))
        else:
            step = Copy if op == COPY else Reduce
            then.append(step(typed(buf, at, nbytes), typed(src_buf, src_at, nbytes)))
    return [Round(*comms, then=then) for comms, then in rounds]


__all__ = ["BOTH", "CONSTANT", "INPUT", "NO_BUFFER", "NotFlat", "NotPresumed", "OUTPUT", "PIECES",
           "Program", "Record", "SPACE_CODES", "as_mapped", "as_pieces", "constant", "expand", "flatten"]
