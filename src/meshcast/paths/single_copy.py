"""Single-copy calls ("cma"): each rank copies straight from or into its peers' exposed buffers.

Which calls come here: the "cma" answer of
:func:`meshcast.algorithms._select.fast_path`, i.e. ``_select.single_copy``
(``SINGLE_COPY_MIN_BYTES`` per piece) for every collective but all_reduce,
whose rule is ``_select.all_reduce_single_copy``
(``ALL_REDUCE_SINGLE_MIN_BYTES``), and all_to_all, whose is
``_select.all_to_all_single_copy`` (past the one-shot limit), on a host whose
kernel lets members read each other's memory (``MESHCAST_CMA_BYTES`` > 0,
``HostCaps.single_copy``).

Protocol (``ProcessGroup._submit``): every rank exposes one buffer of its
own (address, bytes and a word of its choice, ``Arena.expose``) before
entering; after the entry, where every rank learns every rank's count,
``SingleCopy.fits(counts)`` decides alike on every rank, and :func:`run`
runs the body: ``peers.read(q, dest, offset)`` copies ``dest.nbytes`` bytes
at ``offset`` of rank q's exposed buffer into ``dest`` with
process_vm_readv (one copy, where the arena needs two), ``peers.write`` the
other way. A closing round keeps every rank in until nobody reads any more.
A body that only reads is a :class:`Reads` list, which the compiled helper
runs in one C call. The tiny-call lane (meshcast/lanes.py) runs the same
bodies after its own entry.

broadcast, all_gather, all_reduce, reduce and reduce_scatter have no body here:
they run their registered ``cma`` schedule as a program (:class:`CopyPrograms`,
:func:`run_program`): where the compiled interpreter is built, the exposure, the
entry, the copies, the folds of the peers' exposed buffers (read in chunks into a
bounce buffer) and the closing round in one C call; without it, or for an op no
compiled kernel folds (complex, float16), Python's executor
(``_execute.BoundProgram``) runs the same records after the entry. all_to_all does
too where every rank splits evenly the same way (its program is flattened presuming
every rank's split header is mine and checks it: ``CopyProgram.expects``); its body
below (:func:`read_pieces`) reads uneven splits. gather and scatter run theirs too: a
root's list of pieces is exposed as their table (:func:`piece_table`), which the
interpreter addresses as if the pieces lay back to back, and a root in place splits
(:data:`SPLIT`); gather's body below serves only a root whose uneven pieces lie apart,
or one without a region for their table.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import ops
from ..algorithms import _select as _fast
from ..algorithms._execute import BoundProgram, pack_program
from ..algorithms._program import (
    ENTER,
    EXPECT,
    INPUT,
    NO_BUFFER,
    OUTPUT,
    ROUND,
    WAIT,
    NotFlat,
    NotPresumed,
    as_mapped,
    as_pieces,
)
from ..errors import MismatchError
from ..topology import rotation
from ..transport import cma
from . import flatten_shape

_SEQ = struct.Struct("<Q")  # a packed fingerprint's first field, the call's number

if TYPE_CHECKING:
    from ..algorithms._select import HostCaps
    from ..transport.arena import Arena
    from . import GroupView


class Peers(NamedTuple):
    """Copies from the buffers the peers exposed (see :class:`SingleCopy`):
    ``read(q, dest, offset)``."""

    read: Callable[[int, np.ndarray, int], None]


# One entry of a piece table (piece_table): the piece's address and bytes.
_PIECE = struct.Struct("<QQ")
#: The bytes of one entry of a piece table (a table must fit its owner's one-shot region).
PIECE_BYTES = _PIECE.size
# The exposure word of a rank that published a piece table instead of one buffer.
PIECE_TABLE = 2
#: A bit of the exposure word: this gather or scatter root moves a part of every other
#: rank's piece itself (it has no piece of its own to copy: its out is its own piece),
#: and every other rank runs the schedule's program that leaves those parts to it
#: (``Plan.root_splits``).
SPLIT = 4


def root_splits(arena: Arena, root: int, seq: int) -> bool:
    """Whether the root of a single-copy gather or scatter ``seq`` said in its exposure that
    it splits (:data:`SPLIT`), which every other rank reads after the entry to run the
    program that leaves those parts to it (``Plan.root_splits``)."""
    return bool(arena.exposed(root, seq)[2] & SPLIT)


def piece_table(arena: Arena, pieces: Sequence[np.ndarray], bits: int = 0
                ) -> tuple[tuple[int, int, int], Callable[[int], None]]:
    """A rank's exposure of several buffers apart in memory (a gather or scatter root's
    list): the exposure (its offset and bytes in this rank's one-shot region, and the
    word :data:`PIECE_TABLE` | ``bits``), and ``write(parity)``, which writes every piece's address
    and size there, in the region of the call's parity, before the entry. The region
    is free then: a call that goes single-copy stages nothing (the rule is the
    counts', and a root knows them all)."""
    table = tuple((p.ctypes.data if p.nbytes else 0, p.nbytes) for p in pieces)
    me = arena.rank

    def write(parity: int) -> None:
        region = arena.small[me][parity]
        for i, (address, nbytes) in enumerate(table):
            _PIECE.pack_into(region, i * _PIECE.size, address, nbytes)

    return (0, len(table) * _PIECE.size, PIECE_TABLE | bits), write


Body = Callable[[list[int], Peers], None]


@dataclasses.dataclass(frozen=True)
class SingleCopy:
    """The single-copy form of a collective: every rank exposes one buffer of its own
    (address, bytes, and a word of its choice; see Arena.expose) before entering, and
    after the entry, if ``fits(counts)`` (rank-invariant), the registered schedule's
    program runs (``program(counts)``), or where there is none ``body(counts, peers)``
    moves what this rank needs with ``peers.read(q, dest, offset)``: ``dest.nbytes``
    bytes at ``offset`` in rank q's exposed buffer, straight into ``dest`` (one copy,
    where the arena needs two). Nobody returns before every rank finished.
    """

    expose: tuple[int, int, int]
    fits: Callable[[list[int]], bool]
    body: Body | None  # None: the program runs (a collective whose cma schedule runs)
    # program(counts): the call's registered cma schedule as a program for these counts,
    # with its buffers (CopyPrograms.bound), run in place of body; None: body runs
    program: Callable[[list[int]], tuple | None] | None = None


class Reads:
    """A :class:`SingleCopy` body of reads given as data: ``(q, offset, length, at)``
    copies ``length`` bytes at ``offset`` of rank q's exposed buffer (of ``mine`` when q
    is this rank) into ``dest[at:at + length]``, in list order (an all_to_all of uneven
    splits, whose offsets are known only after the entry). Being data, not code, it
    runs in the compiled helper when that was built (Arena.compiled_reads, one C call
    for the reads and the closing round); calling it runs the same reads in Python,
    which also explains any disagreement about the sizes. Every buffer is bytes (uint8)
    when Python runs it."""

    __slots__ = ("dest", "mine", "me", "_reads")

    def __init__(self, dest: np.ndarray, mine: np.ndarray, me: int,
                 reads: Callable[[], tuple[tuple[int, int, int, int], ...]]) -> None:
        self.dest, self.mine, self.me, self._reads = dest, mine, me, reads

    @property
    def reads(self) -> tuple[tuple[int, int, int, int], ...]:
        """The list, built when the call runs (all_to_all's offsets are known only then)."""
        return self._reads()

    def __call__(self, _: list[int], peers: Peers) -> None:
        dest, mine = self.dest, self.mine
        for q, offset, length, at in self.reads:
            local = dest[at:at + length]
            if local.nbytes != length:
                raise ValueError(f"a copy of {length} bytes at {at} of a buffer of "
                                 f"{dest.nbytes}")
            if q != self.me:
                peers.read(q, local, offset)
            else:
                local[...] = mine[offset:offset + length]


def exposing(arr: np.ndarray | None, meta: int = 0) -> tuple[int, int, int]:
    """What a rank exposes of ``arr`` (address, bytes, ``meta``): nothing for no bytes."""
    if arr is None or not arr.nbytes:
        return (0, 0, meta)
    return (arr.ctypes.data, arr.nbytes, meta)


def fits(caps: HostCaps, itemsize: int) -> Callable[[list[int]], bool]:
    """``fits`` of a :class:`SingleCopy`: the table's ``single_copy`` rule on the largest
    contribution (``counts`` in elements of ``itemsize`` bytes)."""
    return lambda counts: _fast.single_copy(caps, max(counts) * itemsize)


def run(group: GroupView, single: SingleCopy, counts: list[int], what: object) -> None:
    """Run the :class:`SingleCopy` ``single`` after the entry: where ``single.program(counts)``
    gives the call's program and buffers (:meth:`CopyPrograms.bound`), the program's
    records after its entry (:func:`run_program`); else its body (reads straight from
    the peers' exposed buffers), then wait until every rank is done reading before
    anyone may return and reuse its buffer.

    Raises:
        RuntimeError: there is neither (a schedule that does not flatten, or buffers
            not contiguous: a bug of the caller), after aborting the group, so that
            every rank raises.
    """
    arena = group.arena
    body, program = single.body, single.program
    made = None if program is None else program(counts)
    if made is not None:
        group.last_compiled = made[0].packed is not None  # (for the trace)
        run_program(group, arena.seq, what, made[0], None, made[1], made[2], None)
        return
    if body is None:
        message = f"{what}: its single-copy schedule gave no program for these buffers"
        arena.abort(f"rank {group.global_ranks[group._rank]} failed in {message}")
        raise RuntimeError(message)
    fast = arena.compiled_reads
    status = None
    if fast is not None and type(body) is Reads:
        try:
            status = fast(arena.seq, group._pids, body.dest, body.mine, body.reads, 1,
                          arena.spin_ns)
        except OSError:
            status = None  # Python's reads below raise with the whole story
    finish(group, body, counts, what, status)


def run_reads(group: GroupView, seq: int, what: object, dest: np.ndarray, mine: np.ndarray,
              reads: tuple[tuple[int, int, int, int], ...]) -> None:
    """A :class:`Reads` body (``reads`` into ``dest``, from the peers' exposed buffers and
    from ``mine``: any C-contiguous arrays, the offsets in bytes) and its closing round,
    as :func:`run` runs it, for call ``seq`` (named ``what``) after a compiled entry: the
    compiled reads on the arrays as they are, and only when those do not finish (a late
    reader, an abort, a size disagreement) or where nothing was compiled, the call's
    state for Python, which reads, waits or explains (:func:`finish`). The uneven
    all_to_all's lane: a Python frame and byte views fewer than :func:`run`."""
    arena = group.arena
    fast = arena.compiled_reads
    try:
        status = None if fast is None else fast(seq, group._pids, dest, mine, reads, 1,
                                                arena.spin_ns)
    except OSError:
        status = None  # Python's reads raise with the whole story
    if status != 0:
        arena.seq, arena.deadline, arena.what = seq, time.monotonic() + group.timeout, what
        finish(group, Reads(_bytes(dest), _bytes(mine), group._rank, lambda: reads), [], what,
               status)


def _bytes(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes, flat (uint8), for Python's copies."""
    return arr.reshape(-1).view(np.uint8)


def finish(group: GroupView, body: Body, counts: list[int], what: object,
           status: int | None) -> None:
    """:func:`run` after the compiled reads returned ``status`` (None: they did not run,
    or raised): done (0), the closing round waited out (2), or ``body`` in Python, which
    raises what the compiled reads found (3, 4, None)."""
    arena = group.arena
    seq = arena.seq
    pids = group._pids
    if status == 0:
        return
    if status == 2:  # read and signalled; someone is still reading
        arena.wait(range(group._size), 1)
        return
    if status == 3:
        arena.check_abort()

    def read(q: int, dest: np.ndarray, offset: int = 0) -> None:
        if dest.nbytes:
            cma.read(pids[q], _exposed_address(group, seq, what, q, offset, dest.nbytes,
                                               "read"), dest)

    try:
        body(counts, Peers(read))
    except BaseException as exc:
        arena.abort(f"rank {group.global_ranks[group._rank]} failed in {what}: {exc}",
                    mismatch=isinstance(exc, MismatchError))
        raise
    arena.signal(1)
    arena.wait(range(group._size), 1)


def _exposed_address(group: GroupView, seq: int, what: object, q: int, offset: int,
                     length: int, verb: str) -> int:
    """The address of bytes ``[offset, offset + length)`` of the buffer rank q exposed for
    call ``seq``; of its pieces as if laid end to end where it exposed a table of them
    (:func:`piece_table`), the bytes in one piece (as the compiled interpreter finds them).

    Raises:
        MismatchError: those bytes lie outside it (the ranks disagree about the sizes).
    """
    arena = group.arena
    address, nbytes, word = arena.exposed(q, seq)
    if word & ~SPLIT == PIECE_TABLE:  # (address, nbytes: the table's, in q's region)
        region, left = arena.small[q][seq & 1], offset
        for entry in range(address, address + nbytes - _PIECE.size + 1, _PIECE.size):
            at, held = _PIECE.unpack_from(region, entry)
            if left < held or left == held and length == 0:
                if length <= held - left:
                    return at + left
                break
            left -= held
        else:
            if left == 0 and length == 0:
                return 0
        raise MismatchError(
            f"{what}: rank {group.global_ranks[group._rank]} would {verb} bytes "
            f"{offset}..{offset + length} of rank {group.global_ranks[q]}'s pieces, which "
            f"do not hold them in one piece (the ranks disagree about the sizes)")
    if offset + length > nbytes:
        raise MismatchError(
            f"{what}: rank {group.global_ranks[group._rank]} would {verb} bytes "
            f"{offset}..{offset + length} of rank {group.global_ranks[q]}'s buffer, "
            f"which holds {nbytes} (the ranks disagree about the sizes)")
    return address + offset


class _Copies:
    """Python's executor's :class:`~meshcast.algorithms._execute.CopyContext` for call
    ``seq`` of ``group``, after its entry: copies from and into the peers' exposed
    buffers with process_vm_readv/writev."""

    __slots__ = ("group", "seq", "what", "op", "parity")

    def __init__(self, group: GroupView, seq: int, what: object, op: ops.ReduceOp | None
                 ) -> None:
        self.group, self.seq, self.what, self.op, self.parity = group, seq, what, op, seq & 1

    def enter(self) -> None:
        raise AssertionError(f"{self.what}: a single-copy program entered twice")

    def exposed_read(self, rank: int, offset: int, dest: np.ndarray) -> None:
        if dest.nbytes:
            cma.read(self.group._pids[rank], _exposed_address(
                self.group, self.seq, self.what, rank, offset, dest.nbytes, "read"), dest)

    def exposed_write(self, rank: int, offset: int, src: np.ndarray) -> None:
        if src.nbytes:
            cma.write(self.group._pids[rank], _exposed_address(
                self.group, self.seq, self.what, rank, offset, src.nbytes, "write"), src)


# ------------------------------------------------------------------ bodies


def pieces_apart_fit(arena: Arena) -> bool:
    """Whether a root's table of pieces fits its one-shot region: then every root of a
    single-copy gather or scatter on the lane exposes its list in place, as that table,
    and every rank runs the registered schedule's program; the same on every rank, as
    the regions are."""
    return arena.n * PIECE_BYTES <= arena.small_bytes


def gather(arena: Arena, root: int, mine: np.ndarray, outs: list[np.ndarray] | None,
           whole: np.ndarray | None, isz: int, me: int
           ) -> tuple[tuple[int, int, int], Body, Callable[[int], None] | None]:
    """The single-copy gather's exposure, body and, on a root whose pieces lie apart, the
    writer of its piece table (:func:`piece_table`, to run before the entry): the
    root's pieces ``outs`` (None elsewhere), ``whole`` when they lie back to back
    (see ProcessGroup.gather). The body runs where the registered schedule's program
    does not (calls.gather): a root's uneven pieces apart, or a root without one-shot
    regions for their table, which reads every piece itself."""
    # Every rank writes its own piece into the root's, all at once, where the root
    # reading them one after the other made single-copy lose to one-shot up to 1 MiB
    # pieces (stop 49): pieces back to back are exposed as one
    # buffer (the word 1), pieces apart as a table of where each lies. Only a root
    # without one-shot regions for a table (MESHCAST_SLOT_BYTES=0) reads every piece.
    table = None
    if whole is not None:
        exposure = exposing(whole, 1)
    elif me == root and outs is not None and len(outs) * _PIECE.size <= arena.small_bytes:
        exposure, table = piece_table(arena, outs)
    else:
        exposure = exposing(mine)

    def move_pieces(counts: list[int], peers: Peers) -> None:
        # (the root's part: every other rank runs the program, which writes its piece
        # into the root's table, or, where the root exposed none, leaves it to the root)
        if me != root:
            return
        word = arena.exposed(root, arena.seq)[2]
        for q, out in enumerate(outs or ()):
            if q == me:
                out[:] = mine
            elif word == 0:
                peers.read(q, out)

    return exposure, move_pieces, table


def read_pieces(out: np.ndarray, mine: np.ndarray, at: Sequence[int],
                offsets: Sequence[int], me: int, n: int) -> Reads:
    """The body of the single-copy all_to_all with uneven splits (even ones run the
    registered schedule's program) into ``out`` (bytes): the piece from
    rank q goes to ``out[at[q]:at[q + 1]]`` and lies at byte ``offsets[q]`` of q's
    exposed input (of ``mine`` for my own)."""
    return Reads(out, mine, me, lambda: tuple(
        (q, offsets[q], at[q + 1] - at[q], at[q]) for q in rotation(me, n)))


# ------------------------------------------------- as programs


@dataclasses.dataclass(frozen=True)
class CopyProgram:
    """A single-copy call's registered ``cma`` schedule (algorithms/<collective>.py),
    flattened for one call shape and packed for the compiled interpreter
    (``Round.program``, transport/_tiny.c): the exposure, the entry, the copies from and
    into the peers' exposed buffers and the closing round, in one C call; or, without
    that interpreter, bound for Python's (``_execute.BoundProgram``), which runs the
    records after the general path's entry.

    packed: the packed form (``_execute.pack_program``), or None: Python's.
    entered: the record after the entry, where a call whose entry Python finished (the
        general path's, or a late one) goes on.
    waits: for the record after each ``WAIT``, the ranks and phase it awaits (where the
        interpreter returns status 2 there, Python waits, then the program goes on).
    kernel: the code of its folds (``ops.compiled_kernel``), -1 for a program without.
    steps: Python's form, where there is no packed one.
    op: the reduce op its folds apply (AVG already SUM), or None.
    expects: its ``EXPECT`` records (all_to_all's, flattened presuming every rank's
        split header is mine), where the interpreter stops with status 4 when a peer's
        bytes are not what it presumed: that call goes on another way (see
        :func:`run_program`).
    """

    packed: bytes | None
    entered: int
    waits: dict[int, tuple[tuple[int, ...], int]]
    kernel: int = -1
    steps: BoundProgram | None = None
    op: ops.ReduceOp | None = None
    expects: frozenset[int] = frozenset()


class CopyPrograms:
    """A group's single-copy calls as programs (:class:`CopyProgram`), one per call shape
    (collective, dtype, root, input and output lengths, per-rank counts, whether the
    input lies in its place in the output, the reduce op), the last :data:`KEEP` of
    them: packed for the compiled interpreter, or, where there is none, the program
    has a step it does not run or folds with an op no kernel folds (complex,
    float16), bound for Python's executor (``packed`` None). None where neither runs
    it (a schedule that does not flatten): the call then runs its Python body."""

    KEEP = 1024  # (as the lane's plans: see lanes._PLANS_MAX)

    def __init__(self, group: GroupView) -> None:
        self.group = group
        self._kept: dict[tuple, CopyProgram | None] = {}

    def get(self, kind: str, dtype: np.dtype, root: int, n_in: int | None, n_out: int | None,
            counts: tuple[int, ...] | None = None, in_place: bool = False,
            op: ops.ReduceOp | None = None, root_splits: bool = False,
            listed: int = NO_BUFFER, mapped: int = NO_BUFFER) -> CopyProgram | None:
        """The program of a call of this shape (``n_in``/``n_out``: element counts of the
        flat input and output, None where there is none; ``in_place``: the smaller is my
        piece of the other, where its counts put it; ``op``: a reduction's, AVG
        already SUM; ``root_splits``: a gather's or scatter's root moves part of every
        piece, see ``Plan``; ``listed``: the side (``_program.INPUT`` or ``OUTPUT``)
        given as a list of the group's size of pieces, a gather or scatter root's,
        which the entry exposes as their table: ``_program.as_pieces``; ``mapped``: the
        side that lies in a symmetric allocation, given as every rank's part of it: the
        registered ``symmetric`` schedule, ``_program.as_mapped``, paths/symmetric.py)."""
        key = (kind, dtype, root, n_in, n_out, counts, in_place, op, root_splits, listed,
               mapped)
        try:
            return self._kept[key]
        except KeyError:
            pass
        arena = self.group.arena
        made = None
        kernel = -1 if op is None else ops.compiled_kernel(op, dtype)
        try:  # (all_to_all's reads its peers' split headers: presumed to be mine)
            program = flatten_shape(self.group, kind, "cma" if mapped == NO_BUFFER
                                    else "symmetric", dtype, root, n_in, n_out, counts,
                                    in_place=in_place, presume=kind == "all_to_all",
                                    root_splits=root_splits)
            if listed != NO_BUFFER:
                program = as_pieces(program, listed, self.group._size)
            if mapped != NO_BUFFER:
                program = as_mapped(program, mapped, self.group._size, self.group._rank)
                if any(rec[0] not in (ROUND, ENTER) for rec in program.records[
                        :[rec[0] for rec in program.records].index(ENTER)]):
                    # (the group's entry runs in Python, the records after it here)
                    raise NotFlat(f"{kind}/symmetric has steps before its entry")
        except NotFlat:  # (a shape whose schedule names memory of its own: its body)
            program = None
        if program is not None:
            records = program.records
            entered = next(i for i, rec in enumerate(records) if rec[0] == ENTER) + 1
            waits = {i + 1: (program.rank_sets[rec[1]], rec[3])
                     for i, rec in enumerate(records) if rec[0] == WAIT}
            expects = frozenset(i for i, rec in enumerate(records) if rec[0] == EXPECT)
            packed = (None if arena.compiled_program is None or kernel is None
                      else pack_program(program, arena.small_bytes))
            if packed is not None:
                made = CopyProgram(packed, entered, waits, kernel, expects=expects)
            else:
                try:
                    made = CopyProgram(None, entered, waits, steps=BoundProgram(program, arena).bind(),
                                       op=op, expects=expects)
                except NotImplementedError:
                    made = None
        if len(self._kept) >= self.KEEP:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = made
        return made

    def bound(self, kind: str, dtype: np.dtype, root: int, inp: np.ndarray | list | None,
              out: np.ndarray | list | None, counts: tuple[int, ...] | None = None,
              op: ops.ReduceOp | None = None, root_splits: bool = False
              ) -> tuple[CopyProgram, np.ndarray | list | None, np.ndarray | list | None] | None:
        """The general path's call on its flat ``inp`` and ``out`` (one of them may be a
        list of the group's size of equal pieces: a gather or scatter root's, exposed as
        their table): its program (see :meth:`get`; for all_gather, in place where ``inp``
        is my piece of ``out``) and those buffers, C-contiguous; None where there is no
        program or a buffer is not C-contiguous. (Where a reduction's output overlaps its
        input, the program does not change: the interpreter reads my operand before it
        writes over it.)"""
        listed, sizes = NO_BUFFER, []
        for side, a in ((INPUT, inp), (OUTPUT, out)):
            if type(a) is list:
                if (listed != NO_BUFFER or len(a) != self.group._size
                        or any(p.size != a[0].size or not p.flags.c_contiguous for p in a)):
                    return None
                listed = side
                sizes.append(a[0].size * len(a))
            elif a is not None and not a.flags.c_contiguous:
                return None
            else:
                sizes.append(None if a is None else a.size)
        in_place = (kind == "all_gather" and listed == NO_BUFFER and inp is not None
                    and out is not None and counts is not None and inp.size > 0
                    and np.may_share_memory(inp, out)
                    and inp.__array_interface__["data"][0] == out[  # type: ignore[union-attr]
                        sum(counts[:self.group._rank]):].__array_interface__["data"][0])
        copy = self.get(kind, dtype, root, sizes[0], sizes[1], counts, in_place, op,
                        root_splits, listed)
        return None if copy is None else (copy, inp, out)


def run_program(group: GroupView, seq: int, what: object, program: CopyProgram,
                entry: tuple | None,
                inp: np.ndarray | None, out: np.ndarray | None, got: int | None,
                agree: Callable[[int], bool] | None = None,
                unpresumed: Callable[[], None] | None = None) -> bool:
    """Call ``seq`` (named ``what``) as ``program`` on the call's flat ``inp`` and ``out``,
    the interpreter's ``entry`` (a rooted entry: every rank's fingerprint tail, the
    root or -1, no exposure: the program's own; or None); ``got``: what the
    interpreter returned for a run from the start, or None: the entry ran elsewhere
    (the general path's, or a compiled entry alone) and the records after it run now.
    Where the interpreter stops, Python takes its part and the program goes on: the
    rest of a late entry, through ``agree(status)`` (False: the ranks' calls differ
    and ``agree`` handed the call over; this returns False too), or a closing wait. A
    copy outside what its owner exposed (the ranks disagree about the sizes) or one
    the kernel refused aborts the group and raises. Where a peer's bytes are not what
    an ``EXPECT`` presumed (all_to_all: another rank's split header differs from mine;
    nothing was copied yet, on every rank alike), ``unpresumed()`` goes on from the
    entry another way and this returns False (without it, the group aborts and this
    raises MismatchError). True: the call is done."""
    arena = group.arena
    me = group.global_ranks[group._rank]
    if program.packed is None:  # Python's executor, after the general path's entry
        arena.seq, arena.what = seq, what
        arena.deadline = time.monotonic() + group.timeout
        # (the steps address flat arrays, a listed side's pieces after the two)
        flat = tuple(None if a is None or type(a) is list else a.reshape(-1)
                     for a in (inp, out)) + tuple(
            p.reshape(-1) for a in (inp, out) if type(a) is list for p in a)
        try:
            program.steps.run_from(program.entered, _Copies(group, seq, what, program.op),
                                   flat)  # type: ignore[union-attr]
        except NotPresumed as exc:
            if unpresumed is None:
                arena.abort(f"rank {me} failed in {what}: {exc}", mismatch=True)
                raise MismatchError(f"{what}: {exc}") from exc
            done = None
        except BaseException as exc:
            arena.abort(f"rank {me} failed in {what}: {exc}",
                        mismatch=isinstance(exc, MismatchError))
            raise
        else:
            done = True
    else:
        done = _run_packed(group, seq, what, program, entry, inp, out, got, agree,
                           unpresumed is not None)
    if done is None:  # (outside the handlers: its own errors are its own)
        # the call's state for Python, which the compiled entry leaves as it was
        arena.seq, arena.what = seq, what
        arena.deadline = time.monotonic() + group.timeout
        unpresumed()  # type: ignore[misc]
        return False
    return done


def run_rest(group: GroupView, seq: int, what: object, program: CopyProgram, entry: tuple,
             inp: np.ndarray | list | None, out: np.ndarray | list | None, got: int | None,
             differ: Callable[[GroupView, int], None] | None = None) -> bool:
    """The rest of call ``seq``, which the compiled interpreter ran from its start with
    the rooted ``entry`` (every rank's fingerprint tail, the root or -1, the exposure)
    and which returned ``got`` (None: only the entry ran, and finished):
    :func:`run_program` goes on in Python. Where the ranks' fingerprints differ,
    ``differ(group, seq)`` raises the MismatchError or hands the entered call over
    (then this returns False); without ``differ``, the MismatchError
    :meth:`Arena.enter` raises. (The lane's single-copy calls; the symmetric calls,
    the lane's and the general path's.)"""
    arena = group.arena
    packed = _SEQ.pack(seq) + entry[0][group._rank]

    def agree(status: int) -> bool:
        if arena.finish_entry(seq, packed, what, time.monotonic() + group.timeout, status):
            return True
        if differ is None:
            arena.compare_entered(seq, False)  # (raises what enter raises)
            raise AssertionError(f"{what}: fingerprints differ, yet compare alike")
        differ(group, seq)
        return False

    return run_program(group, seq, what, program, entry, inp, out, got, agree,
                       None if differ is None else lambda: differ(group, seq))


def run_after_entry(group: GroupView, seq: int, what: object, program: CopyProgram,
                    inp: np.ndarray | None, out: np.ndarray | None) -> int:
    """Call ``seq``'s records after its entry (every rank in) in one run of the compiled
    interpreter: 0, the call is done; else what the interpreter returned, for
    :func:`run_program` (given it as ``got``) to go on from. (The lane's single-copy
    gather and scatter after their entry, and its async calls whose copies run on the
    worker thread: run_program's frames cost 2% of a 4 MiB all_to_all there.)

    Raises:
        OSError: the kernel refused a copy, after aborting the group.
    """
    arena = group.arena
    try:
        return arena.compiled_program(seq, None, arena.spin_ns, program.packed, inp, out,
                                      program.kernel, program.entered)
    except OSError as exc:
        arena.abort(f"rank {group.global_ranks[group._rank]} failed in {what}: {exc}")
        raise


def _run_packed(group: GroupView, seq: int, what: object, program: CopyProgram,
                entry: tuple | None, inp: np.ndarray | None, out: np.ndarray | None,
                got: int | None, agree: Callable[[int], bool] | None, may_differ: bool
                ) -> bool | None:
    """:func:`run_program` through the compiled interpreter: True, done; False, ``agree``
    handed the call over; None, a peer's bytes were not what an ``EXPECT`` presumed and
    ``may_differ`` (the caller goes on another way)."""
    arena = group.arena
    run = arena.compiled_program
    packed, waits = program.packed, program.waits
    me = group.global_ranks[group._rank]
    try:
        if got is None:  # (an entry that ran elsewhere: the records after it, no entry)
            got = run(seq, None, arena.spin_ns, packed, inp, out, program.kernel,
                      program.entered)
        while got:
            status, at = got & 7, got >> 3
            if status == 4 and at in program.expects:
                if may_differ:  # (nothing copied on any rank: the caller goes on)
                    return None
                raise MismatchError(f"{what}: rank {me} found a peer's bytes other than "
                                    f"its program presumed")
            if status == 4:
                raise MismatchError(
                    f"{what}: rank {me} would copy bytes outside what a peer exposed (the "
                    f"ranks disagree about the sizes)")
            if at in waits:  # a closing round the spin time did not see end
                arena.seq, arena.what = seq, what
                arena.deadline = time.monotonic() + group.timeout
                arena.wait(*waits[at])
            elif at == program.entered:  # the entry, late or differing
                if agree is None or not agree(status):
                    return False
            else:
                raise AssertionError(f"{what}: the program stopped at record {at} with "
                                     f"status {status}")
            got = run(seq, entry, arena.spin_ns, packed, inp, out, program.kernel, at)
    except OSError as exc:
        arena.abort(f"rank {me} failed in {what}: {exc}")
        raise
    except MismatchError as exc:
        arena.abort(str(exc), mismatch=True)
        raise
    return True
