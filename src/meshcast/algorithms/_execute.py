"""Runs one rank's schedule for real: comm steps on the transport, arena steps on the group's arena.

This is the only place where schedules meet I/O. The executor knows nothing
of particular algorithms; it carries out rounds exactly as algorithms/_plan.py
specifies (post all comms of a round, wait for them, then run the round's
local and arena steps in order). The simulator (_simulate.py) is the
reference for these semantics and the tests hold both to the same results.

Two forms of the same thing: :func:`execute` runs a schedule's generator
(Round objects made per call); :class:`BoundProgram` takes a schedule
flattened once per call shape (a :class:`~meshcast.algorithms._program.Program`)
and makes it a runner for one group's arena, whose per-call work is one pass over
prepared steps on the call's buffers (the one-shot calls run this way). Where
the compiled helper is built, the same program also has a packed form
(:func:`pack_program`) that transport/_tiny.c interprets in one C call, its
entry round included (``Arena.run_program``); the Python steps run it when
there is no compiler, or a step or fold the interpreter lacks.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from .. import ops
from . import _program as prog
from ._common import as_bytes
from ._plan import Copy, Get, Put, Recv, Reduce, ReduceSlots, Round, Send, Signal, Wait


class CommHandle(Protocol):
    def wait(self, deadline: float) -> None: ...


class ExecContext(Protocol):
    """What the group gives the executor for one call."""

    op: Any
    deadline: float
    arena: Any  # transport.arena.Arena or None

    def isend(self, peer: int, buf: np.ndarray, round_index: int) -> CommHandle: ...
    def irecv(self, peer: int, buf: np.ndarray, round_index: int) -> CommHandle: ...



def _reduce(ctx: ExecContext, step: Reduce) -> None:
    ops.reduce_into(ctx.op, step.dst, step.src)


def _copy(ctx: ExecContext, step: Copy) -> None:
    np.copyto(step.dst, step.src)


def _put(ctx: ExecContext, step: Put) -> None:
    src = as_bytes(step.src)
    ctx.arena.slots[ctx.arena.rank][step.offset:step.offset + src.nbytes] = src


def _get(ctx: ExecContext, step: Get) -> None:
    dst = as_bytes(step.dst)
    dst[:] = ctx.arena.slots[step.peer][step.offset:step.offset + dst.nbytes]


def _reduce_slots(ctx: ExecContext, step: ReduceSlots) -> None:
    dst = step.dst
    nbytes = dst.nbytes
    slots = ctx.arena.slots
    own = step.own
    if own is not None and np.may_share_memory(own, dst):
        own = own.copy()  # (in place: read it before it is written)
    srcs = [own if r == ctx.arena.rank and own is not None
            else slots[r][step.offset:step.offset + nbytes].view(dst.dtype) for r in step.ranks]
    if len(srcs) == 1:
        np.copyto(dst, srcs[0])
    else:
        ops.reduce_many(ctx.op, dst, srcs)


def _signal(ctx: ExecContext, step: Signal) -> None:
    ctx.arena.signal(step.phase)


def _wait(ctx: ExecContext, step: Wait) -> None:
    ctx.arena.wait(step.ranks, step.phase)


_LOCAL: dict[type, Callable[[ExecContext, Any], None]] = {
    Reduce: _reduce, Copy: _copy, Put: _put, Get: _get, ReduceSlots: _reduce_slots,
    Signal: _signal, Wait: _wait,
}


def execute(schedule: Iterator[Round], ctx: ExecContext,
            rounds: list[dict[str, Any]] | None = None) -> int:
    """Run every round of ``schedule``; return the number of rounds.

    ``rounds``: when tracing (meshcast.trace), a list that gets one record per
    round (peers as the schedule's group ranks, bytes, begin, time waited).

    Raises whatever the transport or the arena raises (CommTimeout,
    PeerGoneError, MismatchError, GroupAbortedError); the group then aborts.
    """
    if rounds is not None:
        return _execute_recorded(schedule, ctx, rounds)
    index = -1
    for index, rnd in enumerate(schedule):
        if rnd.comms:
            handles = []
            for step in rnd.comms:
                if type(step) is Send:
                    handles.append(ctx.isend(step.peer, step.buf, index))
                else:
                    assert type(step) is Recv
                    handles.append(ctx.irecv(step.peer, step.buf, index))
            for handle in handles:
                handle.wait(ctx.deadline)
        for step in rnd.then:
            _LOCAL[type(step)](ctx, step)
    return index + 1


def _execute_recorded(schedule: Iterator[Round], ctx: ExecContext,
                      rounds: list[dict[str, Any]]) -> int:
    """:func:`execute`, noting each round (kept apart so the plain loop stays plain).

    A round is noted as it starts (``wait_ns`` and ``end`` null until it ends), so
    a call that fails or is stopped inside a round shows which one and on whom."""
    index = -1
    for index, rnd in enumerate(schedule):
        note: dict[str, Any] = {"round": index, "send": [], "recv": [],
                                "begin": time.time_ns(), "wait_ns": None, "end": None}
        rounds.append(note)
        waited = 0
        if rnd.comms:
            handles = []
            for step in rnd.comms:
                if type(step) is Send:
                    note["send"].append([step.peer, step.buf.nbytes])
                    handles.append(ctx.isend(step.peer, step.buf, index))
                else:
                    note["recv"].append([step.peer, step.buf.nbytes])
                    handles.append(ctx.irecv(step.peer, step.buf, index))
            posted = time.time_ns()
            for handle in handles:
                handle.wait(ctx.deadline)
            waited = time.time_ns() - posted
        for step in rnd.then:
            if type(step) is Wait:
                t = time.time_ns()
                _wait(ctx, step)
                waited += time.time_ns() - t
            else:
                _LOCAL[type(step)](ctx, step)
        note["wait_ns"] = waited
        note["end"] = time.time_ns()
    return index + 1


# ------------------------------------------------------------------ programs


class ProgramContext(Protocol):
    """What a bound program needs of one call besides its buffers."""

    op: Any  # the reduce op (a meshcast.ops.ReduceOp) or None
    parity: int  # the call's one-shot regions: seq & 1

    def enter(self) -> None: ...  # the call's entry (fingerprint exchange, one signal)


class CopyContext(ProgramContext, Protocol):
    """... and of a single-copy call, after its entry: copies between the call's memory
    and the buffer a peer exposed at the entry (paths/single_copy.py: process_vm_readv
    and process_vm_writev), ``nbytes`` bytes at byte ``offset`` of the peer's buffer.
    Both raise MismatchError where those bytes lie outside what the peer exposed (the
    ranks disagree about the sizes), OSError where the kernel refuses."""

    def exposed_read(self, rank: int, offset: int, dest: np.ndarray) -> None: ...
    def exposed_write(self, rank: int, offset: int, src: np.ndarray) -> None: ...


#: The bytes of each operand's chunk in Python's fold of exposed buffers
#: (:func:`fold_exposed`): read with one system call, then reduced while in the cache.
FOLD_CHUNK_BYTES = 256 << 10


def fold_exposed(op: Any, read: Callable[[int, np.ndarray, int], None], ranks: tuple[int, ...],
                 me: int, own: np.ndarray | None, dst: np.ndarray, offset: int) -> None:
    """``dst`` = the elements at byte ``offset`` of the buffer each of ``ranks`` exposed,
    reduced with ``op`` in the order of ``ranks``: ``read(q, dest, byte_offset)`` reads
    a peer's, in chunks of :data:`FOLD_CHUNK_BYTES` so each is reduced while it is in
    the cache; mine is ``own`` (the same elements of my exposed buffer, which may be
    ``dst`` itself: an in-place call)."""
    count = len(dst)
    if not count:
        return
    size = dst.dtype.itemsize
    step = max(1, FOLD_CHUNK_BYTES // size)
    width = min(step, count)
    peers = {q: np.empty(width, dst.dtype) for q in ranks if q != me}
    # reduce_many may write into its first two operands only: my operand later in the
    # order, where it is dst, is read from a copy
    tmp = (np.empty(width, dst.dtype) if own is not None and me in ranks[2:]
           and np.shares_memory(dst, own) else None)
    for c0 in range(0, count, step):
        c1 = min(c0 + step, count)
        operands = []
        for q in ranks:
            if q == me and own is not None:
                operands.append(own[c0:c1])
            else:
                read(q, peers[q][:c1 - c0], offset + c0 * size)
                operands.append(peers[q][:c1 - c0])
        out = dst[c0:c1]
        ops.reduce_many(op, out if tmp is None else tmp[:c1 - c0], operands)
        if tmp is not None:
            out[...] = tmp[:c1 - c0]


# the call's input and output: flat arrays of the program's dtype (None where absent),
# then, for a program of _program.as_pieces, the pieces of its listed side
Buffers = tuple["np.ndarray | None", ...]
BoundStep = Callable[[ProgramContext, Buffers], None]


# What the compiled interpreter (transport/_tiny.c, Round.program) runs: a one-shot
# program's records, and a single-copy one's (the exposure, the copies from and into
# the peers' exposed buffers, the closing signal and wait); anything else stays with
# the Python steps below.
_COMPILED_OPS = frozenset((prog.ROUND, prog.PUT, prog.GET, prog.REDUCE_SLOTS, prog.ENTER,
                           prog.COPY, prog.EXPECT, prog.EXPOSE, prog.WRITE, prog.SIGNAL,
                           prog.WAIT))
_REGION, _EXPOSED = prog.SPACE_CODES["region"], prog.SPACE_CODES["exposed"]
# records that only make sense once the call entered (what they read or await is
# there from then on), and records that touch no call buffer
_AFTER_ENTRY = frozenset((prog.EXPECT, prog.SIGNAL, prog.WAIT, prog.WRITE))
_NO_BUFFER_OPS = frozenset((prog.ROUND, prog.ENTER, prog.SIGNAL, prog.WAIT))
PROGRAM_HEADER = 6  # the packed form's header words (_tiny.c: PROGRAM_HEADER)
RECORD_WORDS = 9  # (_tiny.c: RECORD_WORDS)
# The header's flags (_tiny.c: the same names): a step writes the call's input; the
# PUTs into my region ascend without overlapping, so the interpreter may publish
# how far it staged for readers that copy as it goes (_tiny.c's pipelined copies).
WRITES_INPUT, PUTS_ASCEND = 1, 2
# ... and the program signals and awaits phases of its own after its entry (a
# single-copy program's closing round): its entry must then be the general path's,
# phase 0 (a rooted entry), so that those phases come after it.
SIGNALS = 4
# ... and its listed side's pieces are every rank's whole part of a symmetric allocation,
# mapped here (_program.as_mapped): its folds of exposed buffers read those parts.
MAPPED = 8


# Reserved, never-touched address space the probes of calls up to this size are cut
# from (one mapping per side, so that an input's and an output's probes never share
# memory): a fresh mapping per probe cost half of flattening a small program (two
# mmap and munmap calls), which a program whose sizes change from call to call paid on
# every call. Untouched pages of an anonymous mapping take no memory.
_PROBE_POOL_BYTES = 1 << 26
_probe_pools: list[mmap.mmap] = []


def probe(count: int | None, dtype: np.dtype, side: int = 0) -> np.ndarray | None:
    """An array of ``count`` elements (None: None) to flatten a schedule on
    (``_program.flatten``) in place of a call's: anonymous memory that nothing touches
    (flattening only asks where each step's array lies). ``side`` (0 or 1): probes of
    different sides never share memory, so a call's input and output can be told apart.
    So a large call's probe never goes through malloc, whose dynamic mmap threshold
    would then put the caller's next arrays of that size in the heap, where copies run
    slower (measured: +40% for an 8 MiB single-copy all_gather at 2 ranks after its
    probes came from malloc)."""
    if count is None:
        return None
    nbytes = count * dtype.itemsize
    if nbytes > _PROBE_POOL_BYTES:
        return np.frombuffer(mmap.mmap(-1, nbytes), dtype, count)
    if not _probe_pools:
        _probe_pools.extend(mmap.mmap(-1, _PROBE_POOL_BYTES) for _ in range(2))
    return np.frombuffer(_probe_pools[side], dtype, count)


def pack_program(program: prog.Program, region_bytes: int) -> bytes | None:
    """``program`` in the compiled interpreter's form (``Round.program`` in
    transport/_tiny.c), or None when it has a step that interpreter does not run
    (messages, a peer's slot, a local reduction), more than one entry or exposure,
    an exposure after the entry, or a step that needs the entry (``EXPECT``,
    ``WRITE``, ``SIGNAL``, ``WAIT``, a fold of exposed buffers) before it.

    The form is int64 words: a header (the input's and output's byte sizes, the flags
    :data:`WRITES_INPUT` and :data:`PUTS_ASCEND`, the number of records, the side given as a list of
    pieces (``_program.BOTH``: both) or -1, and their number: ``Program.listed``; the flags also say
    :data:`SIGNALS` and :data:`MAPPED`), the records as they are, then
    the rank sets, each its length then its ranks, a ``REDUCE_SLOTS`` record's peer
    (and a one-sided ``ENTER``'s, whose set is one rank or none) becoming where its
    set starts, then the program's constants, a :data:`~._program.CONSTANT` record's
    ``at`` becoming their byte offset from the form's start. Every step's bytes are
    checked here to lie inside its buffer and inside a one-shot region of
    ``region_bytes``, so that a call only checks its buffers' sizes; a copy from or
    into a peer's exposed buffer (``GET``/``WRITE`` of space ``exposed``), and a fold
    of those buffers (``REDUCE_SLOTS`` of space ``exposed``, every operand exposed:
    the interpreter reads the peers' in chunks), is checked against what each peer
    exposed when it runs. A ``WAIT``'s ranks become where
    their set starts, as a ``REDUCE_SLOTS``'s.
    """
    records, sets, starts = [], [], {}
    writes_input = 0
    puts_end = 0  # where my region's PUTs so far end, -1 once one goes back
    sizes = program.sizes
    side, count = program.listed
    buffers = program.buffers
    if (sum(1 for rec in program.records if rec[0] == prog.ENTER) > 1
            or sum(1 for rec in program.records if rec[0] == prog.EXPOSE) > 1):
        return None
    entered = False
    constants = []  # the indices of records that address the constants
    for rec in program.records:
        op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
        if (op not in _COMPILED_OPS or not entered and op in _AFTER_ENTRY
                or entered and op == prog.EXPOSE):
            return None
        entered = entered or op == prog.ENTER
        if buf == prog.CONSTANT:  # (the constants' bounds instead of a call buffer's)
            if op not in (prog.PUT, prog.EXPECT) or not (
                    0 <= at and at % 8 == 0 and at + nbytes <= len(program.constants)):
                return None
            constants.append(len(records))
        if op in (prog.GET, prog.WRITE, prog.REDUCE_SLOTS) and space == _EXPOSED:
            # (a peer's exposed buffer: its bounds are the peer's, checked as it copies;
            # a fold's operands are all exposed, mine too: no operand of the call's own)
            if offset < 0 or buf == prog.CONSTANT or (
                    op == prog.REDUCE_SLOTS and (src_buf != prog.NO_BUFFER or not entered)):
                return None
        elif op == prog.WRITE:
            return None  # (a write goes into a peer's exposed buffer, nowhere else)
        elif op in (prog.PUT, prog.GET, prog.REDUCE_SLOTS, prog.EXPECT):
            if space != _REGION or not 0 <= offset <= region_bytes - nbytes:
                return None
        two = op == prog.COPY or (op == prog.REDUCE_SLOTS and src_buf != prog.NO_BUFFER)
        touched = (((buf, at), (src_buf, src_at)) if two else
                   ((src_buf, src_at),) if op == prog.WRITE else ((buf, at),))
        if op not in _NO_BUFFER_OPS and nbytes and buf != prog.CONSTANT and not all(
                prog.INPUT <= b < buffers and not program.is_listed(b)  # (its pieces only)
                and 0 <= a <= program.buffer_bytes(b) - nbytes for b, a in touched):
            return None
        if op == prog.PUT and nbytes:
            puts_end = offset + nbytes if 0 <= puts_end <= offset else -1
        if op in (prog.GET, prog.COPY, prog.REDUCE_SLOTS) and nbytes and (
                buf == prog.INPUT or side in (prog.INPUT, prog.BOTH)
                and prog.PIECES <= buf < prog.PIECES + count):
            writes_input = 1
        if op == prog.ENTER and peer >= 0 and len(program.rank_sets[peer]) > 1:
            return None  # a one-sided round awaits one rank or none in the interpreter
        if op in (prog.REDUCE_SLOTS, prog.ENTER, prog.WAIT) and peer >= 0:
            ranks = program.rank_sets[peer]
            if ranks not in starts:
                starts[ranks] = len(sets)
                sets.extend((len(ranks), *ranks))
            rec = (op, starts[ranks], *rec[2:])
        records.append(rec)
    flags = (writes_input * WRITES_INPUT | (PUTS_ASCEND if puts_end >= 0 else 0)
             | (SIGNALS if any(rec[0] in (prog.SIGNAL, prog.WAIT) for rec in records) else 0)
             | (MAPPED if program.mapped else 0))
    base = 8 * (PROGRAM_HEADER + len(records) * RECORD_WORDS + len(sets))
    for i in constants:  # (their place in the form: after everything else)
        rec = records[i]
        records[i] = (*rec[:6], base + rec[6], *rec[7:])
    words = [sizes[0], sizes[1], flags, len(records), side, count]
    for rec in records:
        words.extend(rec)
    words.extend(sets)
    return np.array(words, np.int64).tobytes() + program.constants


class BoundProgram:
    """A :class:`~meshcast.algorithms._program.Program` bound to one group's arena.

    Binding does once what does not change between calls of the program's
    shape: the views of the arena's slots and one-shot regions (both parities)
    each step touches, typed like the program's buffers so that a step is one
    NumPy copy or reduction, and whether a step covers a whole buffer (then it
    takes the call's array as it is, without slicing). Calling it runs the
    steps on the call's input and output (flat arrays of the program's dtype;
    for a program of ``_program.as_pieces``, the pieces of its listed side after
    them), in order. ``packed`` is the same program for the compiled interpreter
    (:func:`pack_program`), or None where the arena has none or the program
    needs these steps.

    A single-copy program (a ``cma`` schedule: its exposure, copies from and into
    the peers' exposed buffers, folds of them, its own signals and waits) runs from
    the record after its entry (:meth:`run_from`: the general path ran the entry,
    which exposed the buffer its ``EXPOSE`` names), with a :class:`CopyContext`.

    Args:
        program: the flattened schedule.
        arena: the group's arena (transport.arena.Arena).

    Raises:
        NotImplementedError: (from :meth:`bind` or the first run) the program has a
            step this interpreter does not run (messages, bytes that are not whole
            elements): run the schedule through :func:`execute` instead.
    """

    __slots__ = ("program", "packed", "folds", "_arena", "_bound")

    def __init__(self, program: prog.Program, arena: Any) -> None:
        self.program = program
        # the compiled interpreter's form, where the arena has that interpreter
        self.packed = (None if getattr(arena, "_compiled", None) is None
                       else pack_program(program, arena.small_bytes))
        # whether a step folds ranks' data (the interpreter then needs a kernel)
        self.folds = any(rec[0] == prog.REDUCE_SLOTS and len(program.rank_sets[rec[1]]) > 1
                         for rec in program.records)
        self._arena = arena
        # (Python's steps are bound on first use: where the compiled interpreter runs
        # every call, binding them cost a third of making the program)
        self._bound: tuple[tuple[BoundStep, ...], list[int]] | None = None

    def bind(self) -> BoundProgram:
        """Bind Python's steps now (they are bound on first use otherwise); returns self.

        Raises:
            NotImplementedError: as the class says.
        """
        self._bind_steps()
        return self

    def _bind_steps(self) -> tuple[tuple[BoundStep, ...], list[int]]:
        """(every record's step but the rounds', the index of each record's step (of the
        next one where a record has none)), bound once."""
        if self._bound is None:
            program = self.program
            kept = [i for i, rec in enumerate(program.records) if rec[0] != prog.ROUND]
            steps = tuple(_bind(program, program.records[i], self._arena) for i in kept)
            first = [sum(1 for i in kept if i < r) for r in range(len(program.records) + 1)]
            self._bound = (steps, first)
        return self._bound

    def __call__(self, ctx: ProgramContext, buffers: Buffers) -> None:
        for step in self._bind_steps()[0]:
            step(ctx, buffers)

    def run_from(self, record: int, ctx: ProgramContext, buffers: Buffers) -> None:
        """The steps of the records from ``record`` on (a single-copy call's after its
        entry, which the general path ran)."""
        steps, first = self._bind_steps()
        for step in steps[first[record]:]:
            step(ctx, buffers)


def _bind_exposed(program: prog.Program, rec: prog.Record, arena: Any) -> BoundStep:
    """A record of a single-copy program after its entry: a copy from (``GET``) or into
    (``WRITE``) a peer's exposed buffer, or a fold of every listed rank's
    (``REDUCE_SLOTS``), through the call's :class:`CopyContext`. My own exposed buffer is
    the call's memory the ``EXPOSE`` record names: read where it lies."""
    op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
    size = program.dtype.itemsize
    me = arena.rank
    # (a program without one exposes a list, as its table: Round.rooted; it only copies
    # between the peers' exposed buffers and its pieces)
    expose = next((r for r in program.records if r[0] == prog.EXPOSE), None)
    if offset < 0 or expose is None and (peer == me or op == prog.REDUCE_SLOTS):
        raise NotImplementedError(f"{program.name}: a step of my own exposed buffer in a "
                                  f"program that exposes none, or before a buffer's start")

    def mine(bufs: Buffers, at_byte: int, length: int) -> np.ndarray:
        """Bytes [at_byte, + length) of my exposed buffer (uint8), which must hold them."""
        if not 0 <= at_byte <= expose[4] - length:
            raise ValueError(f"{program.name}: bytes {at_byte}..{at_byte + length} of my "
                             f"exposed buffer, which holds {expose[4]}")
        start = expose[6] + at_byte  # type: ignore[index]
        return bufs[expose[5]].view(np.uint8)[start:start + length]  # type: ignore[index,union-attr]

    # (copies move bytes: a reader-split broadcast cuts its bytes anywhere)
    if op == prog.GET:
        if peer == me:
            def get_mine(ctx: Any, bufs: Buffers) -> None:
                bufs[buf].view(np.uint8)[at:at + nbytes] = mine(  # type: ignore[union-attr]
                    bufs, offset, nbytes)
            return get_mine

        def get_exposed(ctx: Any, bufs: Buffers) -> None:
            ctx.exposed_read(peer, offset, bufs[buf].view(np.uint8)[  # type: ignore[union-attr]
                at:at + nbytes])
        return get_exposed
    if op == prog.WRITE:
        if peer == me:
            def write_mine(ctx: Any, bufs: Buffers) -> None:
                mine(bufs, offset, nbytes)[...] = bufs[src_buf].view(  # type: ignore[union-attr]
                    np.uint8)[src_at:src_at + nbytes]
            return write_mine

        def write_exposed(ctx: Any, bufs: Buffers) -> None:
            ctx.exposed_write(peer, offset, bufs[src_buf].view(  # type: ignore[union-attr]
                np.uint8)[src_at:src_at + nbytes])
        return write_exposed
    if op == prog.REDUCE_SLOTS and src_buf == prog.NO_BUFFER and not (
            offset | nbytes | at | expose[6]) % size:
        ranks = program.rank_sets[peer]
        lo, hi = at // size, (at + nbytes) // size

        def fold(ctx: Any, bufs: Buffers) -> None:
            own = mine(bufs, offset, nbytes).view(program.dtype) if me in ranks else None
            fold_exposed(ctx.op, lambda q, dest, byte: ctx.exposed_read(q, byte, dest), ranks,
                         me, own, bufs[buf][lo:hi], offset)  # type: ignore[index]
        return fold
    raise NotImplementedError(f"{program.name}: opcode {op} of a peer's exposed buffer, or a "
                              f"fold of bytes that are not whole elements")


def _bind_mapped_fold(program: prog.Program, rec: prog.Record) -> BoundStep:
    """A fold of a symmetric program (``_program.as_mapped``): the same elements of every
    listed rank's part (buffers ``PIECES + q``, all mapped here), reduced in the ranks'
    order into the call's buffer, where they lie."""
    op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
    size = program.dtype.itemsize
    if (offset | nbytes | at) % size:
        raise NotImplementedError(f"{program.name}: a fold of bytes that are not whole "
                                  f"elements")
    ranks = program.rank_sets[peer]
    lo, hi, olo, ohi = at // size, (at + nbytes) // size, offset // size, (offset + nbytes) // size

    def fold(ctx: Any, bufs: Buffers) -> None:
        dst = bufs[buf][lo:hi]  # type: ignore[index]
        operands = [bufs[prog.PIECES + q][olo:ohi] for q in ranks]  # type: ignore[index]
        # reduce_many writes into its first two operands only where they are dst itself:
        # an operand that overlaps dst otherwise (mine, in place) is read before dst is
        # written, through a copy
        if any(np.shares_memory(dst, a) and not (j < 2 and prog._address(a) == prog._address(dst))
               for j, a in enumerate(operands)):
            tmp = np.empty_like(dst)
            ops.reduce_many(ctx.op, tmp, operands)
            dst[...] = tmp
        elif len(operands) == 1:
            dst[...] = operands[0]
        else:
            ops.reduce_many(ctx.op, dst, operands)
    return fold


def _spaces(arena: Any, space: int, peer: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``peer``'s memory of ``space`` for parity 0 and 1 (a slot has no parity)."""
    if space == prog.SPACE_CODES["slot"]:
        return arena.slots[peer], arena.slots[peer]
    if space == prog.SPACE_CODES["region"]:
        return arena.small[peer][0], arena.small[peer][1]
    raise NotImplementedError("a program's step reads a peer's exposed buffer")


def _bind_constant(program: prog.Program, rec: prog.Record, arena: Any) -> BoundStep:
    """A record of the program's constant bytes: a ``PUT`` of them into my memory, or an
    ``EXPECT`` that a peer's holds them (raising NotPresumed where it does not)."""
    op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
    value = prog.constant(program, at, nbytes)
    if op == prog.PUT:
        mine = tuple(m[offset:offset + nbytes] for m in _spaces(arena, space, arena.rank))

        def put_constant(ctx: ProgramContext, bufs: Buffers) -> None:
            mine[ctx.parity][:] = value
        return put_constant
    if op == prog.EXPECT:
        theirs = tuple(m[offset:offset + nbytes] for m in _spaces(arena, space, peer))

        def expect(ctx: ProgramContext, bufs: Buffers) -> None:
            if not np.array_equal(theirs[ctx.parity], value):
                raise prog.NotPresumed(f"{program.name}: rank {peer}'s bytes at {offset} "
                                       f"are not what the program presumes")
        return expect
    raise NotImplementedError(f"{program.name}: opcode {op} does not read constants")


def _bind(program: prog.Program, rec: prog.Record, arena: Any) -> BoundStep:
    op, peer, space, offset, nbytes, buf, at, src_buf, src_at = rec
    if buf == prog.CONSTANT:
        return _bind_constant(program, rec, arena)
    if space == _EXPOSED and program.mapped and op == prog.REDUCE_SLOTS:
        return _bind_mapped_fold(program, rec) if nbytes else lambda ctx, bufs: None
    if space == _EXPOSED and op != prog.EXPOSE:
        return (_bind_exposed(program, rec, arena) if nbytes
                else lambda ctx, bufs: None)  # (an empty piece: nothing to move)
    if op == prog.SIGNAL:  # (offset: the phase)
        return lambda ctx, bufs: arena.signal(offset)
    if op == prog.WAIT:
        ranks = program.rank_sets[peer]
        return lambda ctx, bufs: arena.wait(ranks, offset)
    dtype = program.dtype
    size = dtype.itemsize
    if (offset | nbytes | at | src_at) % size:
        raise NotImplementedError(f"{program.name}: a step moves bytes that are not whole "
                                  f"elements of {dtype}")
    if nbytes == 0 and op in (prog.PUT, prog.GET, prog.REDUCE_SLOTS, prog.COPY, prog.REDUCE):
        return lambda ctx, bufs: None  # an empty piece: nothing to move
    if op == prog.ENTER:  # (one-sided or not: awaiting every rank is always right)
        return lambda ctx, bufs: ctx.enter()
    if op == prog.EXPOSE:  # (what the entry exposes: the general path's, see run_from)
        return lambda ctx, bufs: None
    # elements [lo, hi) of the call's buffer; whole: the step covers all of it
    lo, hi, whole = (at // size, (at + nbytes) // size,
                     at == 0 and nbytes == program.buffer_bytes(buf))

    def memory(rank: int) -> tuple[np.ndarray, ...]:
        return tuple(m[offset:offset + nbytes].view(dtype) for m in _spaces(arena, space, rank))

    if op == prog.PUT:
        mine = memory(arena.rank)
        if whole:
            def put_whole(ctx: ProgramContext, bufs: Buffers) -> None:
                mine[ctx.parity][:] = bufs[buf]
            return put_whole

        def put(ctx: ProgramContext, bufs: Buffers) -> None:
            mine[ctx.parity][:] = bufs[buf][lo:hi]  # type: ignore[index]
        return put
    if op == prog.GET:
        theirs = memory(peer)
        if whole:
            def get_whole(ctx: ProgramContext, bufs: Buffers) -> None:
                bufs[buf][:] = theirs[ctx.parity]  # type: ignore[index]
            return get_whole

        def get(ctx: ProgramContext, bufs: Buffers) -> None:
            bufs[buf][lo:hi] = theirs[ctx.parity]  # type: ignore[index]
        return get
    if op == prog.REDUCE_SLOTS:
        ranks = program.rank_sets[peer]
        if src_buf != prog.NO_BUFFER and arena.rank in ranks:  # my operand: the call's own
            me = ranks.index(arena.rank)
            slots = [memory(r) for r in ranks]  # (mine unread: replaced per call)
            olo, ohi = src_at // size, (src_at + nbytes) // size

            def reduce_own(ctx: ProgramContext, bufs: Buffers) -> None:
                operands = [m[ctx.parity] for m in slots]
                own, dst = bufs[src_buf][olo:ohi], bufs[buf][lo:hi]  # type: ignore[index]
                # (in place, the output inside the input: read it before it is written)
                operands[me] = own.copy() if np.may_share_memory(own, dst) else own
                ops.reduce_many(ctx.op, dst, operands)
            return reduce_own
        by_rank = [memory(r) for r in ranks]
        operands = tuple([m[p] for m in by_rank] for p in (0, 1))
        if whole:
            def reduce_whole(ctx: ProgramContext, bufs: Buffers) -> None:
                ops.reduce_many(ctx.op, bufs[buf], operands[ctx.parity])  # type: ignore[arg-type]
            return reduce_whole

        def reduce_slots(ctx: ProgramContext, bufs: Buffers) -> None:
            ops.reduce_many(ctx.op, bufs[buf][lo:hi], operands[ctx.parity])  # type: ignore[index]
        return reduce_slots
    slo, shi = src_at // size, (src_at + nbytes) // size
    if op == prog.COPY:
        def copy(ctx: ProgramContext, bufs: Buffers) -> None:
            bufs[buf][lo:hi] = bufs[src_buf][slo:shi]  # type: ignore[index]
        return copy
    if op == prog.REDUCE:
        def reduce(ctx: ProgramContext, bufs: Buffers) -> None:
            ops.reduce_into(ctx.op, bufs[buf][lo:hi], bufs[src_buf][slo:shi])  # type: ignore[index]
        return reduce
    raise NotImplementedError(f"{program.name}: the program interpreter does not run "
                              f"opcode {op}; run the schedule through execute()")
