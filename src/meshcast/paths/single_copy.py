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
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import ops, symmetric
from ..algorithms import _select as _fast
from ..errors import MismatchError
from ..topology import rotation
from ..transport import cma

if TYPE_CHECKING:
    from ..algorithms._select import HostCaps
    from ..transport.arena import Arena
    from . import GroupView


class Peers(NamedTuple):
    """Copies between this rank and the buffers the peers exposed (see :class:`SingleCopy`):
    ``read(q, dest, offset)``, ``write(q, src, offset)``, and ``write_piece(q, i, src)``,
    which writes ``src`` into piece ``i`` of the table of pieces rank q published
    (:func:`piece_table`). A negative ``offset`` ``-1 - i`` reads q's piece ``i`` of
    ``dest.nbytes`` bytes: where its table says, or at ``i * dest.nbytes`` of a buffer
    exposed whole (as the compiled reads do)."""

    read: Callable[..., None]
    write: Callable[..., None]
    write_piece: Callable[..., None]


# One entry of a piece table (piece_table): the piece's address and bytes.
_PIECE = struct.Struct("<QQ")
#: The bytes of one entry of a piece table (a table must fit its owner's one-shot region).
PIECE_BYTES = _PIECE.size
# The exposure word of a rank that published a piece table instead of one buffer.
PIECE_TABLE = 2


def piece_table(arena: Arena, pieces: Sequence[np.ndarray]) -> tuple[tuple[int, int, int],
                                                                     Callable[[int], None]]:
    """A rank's exposure of several buffers apart in memory (a gather or scatter root's
    list): the exposure (its offset and bytes in this rank's one-shot region, and the
    word :data:`PIECE_TABLE`), and ``write(parity)``, which writes every piece's address
    and size there, in the region of the call's parity, before the entry. The region
    is free then: a call that goes single-copy stages nothing (the rule is the
    counts', and a root knows them all)."""
    table = tuple((p.ctypes.data if p.nbytes else 0, p.nbytes) for p in pieces)
    me = arena.rank

    def write(parity: int) -> None:
        region = arena.small[me][parity]
        for i, (address, nbytes) in enumerate(table):
            _PIECE.pack_into(region, i * _PIECE.size, address, nbytes)

    return (0, len(table) * _PIECE.size, PIECE_TABLE), write


Body = Callable[[list[int], Peers], None]


@dataclasses.dataclass(frozen=True)
class SingleCopy:
    """The single-copy form of a collective: every rank exposes one buffer of its own
    (address, bytes, and a word of its choice; see Arena.expose) before entering, and
    after the entry, if ``fits(counts)`` (rank-invariant), ``body(counts, peers)`` moves
    what this rank needs with ``peers.read(q, dest, offset)``: ``dest.nbytes`` bytes at
    ``offset`` in rank q's exposed buffer, straight into ``dest`` (one copy, where the
    arena needs two), or ``peers.write(q, src, offset)``, the other way. Nobody
    returns before every rank finished.
    """

    expose: tuple[int, int, int]
    fits: Callable[[list[int]], bool]
    body: Body
    phases: int = 1  # the body's own barriers (signal/wait of phases 1..) plus the last one


#: The last field of a :class:`Reads` entry that writes instead of reading.
WRITE = 1


class Reads:
    """A :class:`SingleCopy` body of copies given as data: ``(q, offset, length, at)``
    copies ``length`` bytes at ``offset`` of rank q's exposed buffer (of ``mine`` when q
    is this rank) into ``dest[at:at + length]``; ``(q, offset, length, at, WRITE)`` the
    other way, ``dest[at:at + length]`` into another rank q's exposed buffer at
    ``offset``; in list order. Being data, not code, it runs in the compiled helper when
    that was built (Arena.compiled_reads, one C call for the copies and the closing
    round); calling it runs the same copies in Python, which also explains any
    disagreement about the sizes."""

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
        for q, offset, length, at, *write in self.reads:
            if write:
                peers.write(q, dest[at:at + length], offset)
            elif q == self.me:
                dest[at:at + length] = mine[offset:offset + length]
            else:
                peers.read(q, dest[at:at + length], offset)


def exposing(arr: np.ndarray | None, meta: int = 0) -> tuple[int, int, int]:
    """What a rank exposes of ``arr`` (address, bytes, ``meta``): nothing for no bytes."""
    if arr is None or not arr.nbytes:
        return (0, 0, meta)
    return (arr.ctypes.data, arr.nbytes, meta)


def fits(caps: HostCaps, itemsize: int) -> Callable[[list[int]], bool]:
    """``fits`` of a :class:`SingleCopy`: the table's ``single_copy`` rule on the largest
    contribution (``counts`` in elements of ``itemsize`` bytes)."""
    return lambda counts: _fast.single_copy(caps, max(counts) * itemsize)


def run(group: GroupView, body: Body, phases: int, counts: list[int], what: object) -> None:
    """Run ``body`` of a :class:`SingleCopy` (reads straight from the peers' exposed
    buffers; its own barriers use phases 1 .. ``phases - 1``), then wait until every
    rank is done reading before anyone may return and reuse its buffer."""
    arena = group.arena
    fast = arena.compiled_reads
    status = None
    if fast is not None and phases == 1 and type(body) is Reads:
        try:
            status = fast(arena.seq, group._pids, body.dest, body.mine, body.reads, 1,
                          arena.spin_ns)
        except OSError:
            status = None  # Python's reads below raise with the whole story
    finish(group, body, phases, counts, what, status)


def run_reads(group: GroupView, seq: int, what: object, dest: np.ndarray, mine: np.ndarray,
              reads: tuple[tuple[int, int, int, int], ...]) -> None:
    """A :class:`Reads` body (``reads`` into ``dest``, from the peers' exposed buffers and
    from ``mine``: any C-contiguous arrays, the offsets in bytes) and its closing round,
    as :func:`run` runs it, for call ``seq`` (named ``what``) after a compiled entry: the
    compiled reads on the arrays as they are, and only when those do not finish (a late
    reader, an abort, a size disagreement) or where nothing was compiled, the call's
    state for Python, which reads, waits or explains (:func:`finish`). The lanes'
    single-copy all_gather and all_to_all: a Python frame and byte views fewer than
    :func:`run`, a fifth of a tiny call's cost."""
    arena = group.arena
    fast = arena.compiled_reads
    try:
        status = None if fast is None else fast(seq, group._pids, dest, mine, reads, 1,
                                                arena.spin_ns)
    except OSError:
        status = None  # Python's reads raise with the whole story
    if status != 0:
        arena.seq, arena.deadline, arena.what = seq, time.monotonic() + group.timeout, what
        finish(group, Reads(dest.reshape(-1).view(np.uint8), mine.reshape(-1).view(np.uint8),
                            group._rank, lambda: reads), 1, [], what, status)


def finish(group: GroupView, body: Body, phases: int, counts: list[int], what: object,
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

    def at(q: int, offset: int, length: int, verb: str) -> int:
        """The address of bytes ``[offset, offset + length)`` of rank q's buffer."""
        address, nbytes, _ = arena.exposed(q, seq)
        if offset < 0 or offset + length > nbytes:
            raise MismatchError(
                f"{what}: rank {group.global_ranks[group._rank]} would {verb} bytes "
                f"{offset}..{offset + length} of rank {group.global_ranks[q]}'s buffer, "
                f"which holds {nbytes} (the ranks disagree about the sizes)")
        return address + offset

    def piece(q: int, i: int, nbytes: int, verb: str) -> int:
        """The address of rank q's piece ``i``, which must hold ``nbytes``."""
        at_table, table_bytes, word = arena.exposed(q, seq)
        if word != PIECE_TABLE:
            return at(q, i * nbytes, nbytes, verb)
        address, held = ((0, -1) if (i + 1) * _PIECE.size > table_bytes else
                         _PIECE.unpack_from(arena.small[q][seq & 1], at_table + i * _PIECE.size))
        if held != nbytes:
            raise MismatchError(
                f"{what}: rank {group.global_ranks[group._rank]} would {verb} {nbytes} "
                f"bytes of piece {i} of rank {group.global_ranks[q]}, which holds {held} "
                f"(the ranks disagree about the sizes)")
        return address

    def read(q: int, dest: np.ndarray, offset: int = 0) -> None:
        if dest.nbytes:
            address = (piece(q, -1 - offset, dest.nbytes, "read") if offset < 0
                       else at(q, offset, dest.nbytes, "read"))
            cma.read(pids[q], address, dest)

    def write(q: int, src: np.ndarray, offset: int = 0) -> None:
        if src.nbytes:
            cma.write(pids[q], at(q, offset, src.nbytes, "write"), src)

    def write_piece(q: int, i: int, src: np.ndarray) -> None:
        address = piece(q, i, src.nbytes, "write")  # (checked even when src is empty)
        if src.nbytes:
            cma.write(pids[q], address, src)

    try:
        body(counts, Peers(read, write, write_piece))
    except BaseException as exc:
        arena.abort(f"rank {group.global_ranks[group._rank]} failed in {what}: {exc}",
                    mismatch=isinstance(exc, MismatchError))
        raise
    arena.signal(phases)
    arena.wait(range(group._size), phases)


def reduce_from_all(read: Callable[..., None], mine: np.ndarray, lo: int, hi: int,
                    dst: np.ndarray, op: ops.ReduceOp, me: int, n: int) -> None:
    """``dst`` = elements ``[lo, hi)`` of every rank's exposed array reduced in rank order
    (my own operand is ``mine[lo:hi]``), read in cache-sized chunks so each is reduced
    while it is still in the cache."""
    if hi <= lo:
        return
    step = max(1, symmetric.CHUNK_BYTES // mine.dtype.itemsize)
    width = min(step, hi - lo)
    peers = {q: np.empty(width, mine.dtype) for q in range(n) if q != me}
    # reduce_many may write into its first two operands only (see all_reduce_share)
    tmp = (np.empty(width, mine.dtype) if me > 1 and np.shares_memory(dst, mine[lo:hi])
           else None)
    isz = mine.dtype.itemsize
    for c0 in range(lo, hi, step):
        c1 = min(c0 + step, hi)
        operands = []
        for q in range(n):
            if q == me:
                operands.append(mine[c0:c1])
            else:
                read(q, peers[q][:c1 - c0], c0 * isz)
                operands.append(peers[q][:c1 - c0])
        out = dst[c0 - lo:c1 - lo]
        ops.reduce_many(op, out if tmp is None else tmp[:c1 - c0], operands)
        if tmp is not None:
            out[...] = tmp[:c1 - c0]


# ------------------------------------------------------------------ bodies


def broadcast(data: np.ndarray, root: int, me: int, n: int) -> Reads:
    """The body of the single-copy broadcast of ``data`` (bytes, exposed by every rank)."""
    copies = broadcast_copies(data.nbytes, root, me, n)
    return Reads(data, data, me, lambda: copies)


def broadcast_copies(nbytes: int, root: int, me: int, n: int) -> tuple[tuple[int, ...], ...]:
    """My copies (a :class:`Reads` list) in the single-copy broadcast of ``nbytes``."""
    # Reader q's copy is split in n parts: the root writes part q into it while q
    # reads the others, so the root's core works too (at 2 ranks each side copies
    # half: about twice as fast as the reader copying it all).
    bounds = [nbytes * k // n for k in range(n + 1)]
    if me == root:
        return tuple((q, bounds[q], bounds[q + 1] - bounds[q], bounds[q], WRITE)
                     for q in rotation(me, n)[1:] if bounds[q + 1] > bounds[q])
    # every part but mine (part `root` included)
    return tuple((root, bounds[k], bounds[k + 1] - bounds[k], bounds[k])
                 for k in rotation(me, n)[1:] if bounds[k + 1] > bounds[k])


def reduce_then_collect(arena: Arena, arr: np.ndarray, op: ops.ReduceOp, me: int, n: int
                        ) -> Body:
    """The body of the single-copy all_reduce of ``arr`` (a :class:`SingleCopy` of two
    phases, every rank exposing its ``arr``):

    1. my share of every rank's array, reduced into my own array;
    2. once every rank is done with 1 (nobody reads my other shares any more),
       every other share, reduced, read straight from its owner.
    """

    def body(_: list[int], peers: Peers) -> None:
        isz = arr.dtype.itemsize
        lo, hi = symmetric.share(arr.size, isz, me, n)
        reduce_from_all(peers.read, arr, lo, hi, arr[lo:hi], op, me, n)
        arena.signal(1)
        arena.wait(range(n), 1)
        for q in rotation(me, n)[1:]:
            qlo, qhi = symmetric.share(arr.size, isz, q, n)
            peers.read(q, arr[qlo:qhi], qlo * isz)

    return body


def reduce(arr: np.ndarray, op: ops.ReduceOp, at_root: bool, me: int, n: int) -> Body:
    """The body of the single-copy reduce of ``arr`` into the root's own ``arr``."""

    def reduce_at_root(_: list[int], peers: Peers) -> None:
        # The root reads every other rank's array in cache-sized chunks and reduces
        # them in rank order; the others only expose theirs (2 ranks, 8 MiB: about
        # half the arena schedule's time).
        if at_root:
            reduce_from_all(peers.read, arr, 0, arr.size, arr, op, me, n)

    return reduce_at_root


def gather_pieces(out: np.ndarray, mine: np.ndarray, at: Sequence[int], me: int, n: int
                  ) -> Reads:
    """The body of the single-copy all_gather into ``out`` (bytes): rank q's piece
    goes to ``out[at[q]:at[q + 1]]``, mine copied (unless it is there already, in
    place), the others read straight from their owners."""
    in_place = np.shares_memory(out[at[me]:at[me + 1]], mine)
    # rank q's piece is read by one rank at a time
    reads = tuple((q, 0, at[q + 1] - at[q], at[q]) for q in rotation(me, n)
                  if q != me or not in_place)
    return Reads(out, mine, me, lambda: reads)


def gather(arena: Arena, root: int, mine: np.ndarray, outs: list[np.ndarray] | None,
           whole: np.ndarray | None, isz: int, me: int
           ) -> tuple[tuple[int, int, int], Body, Callable[[int], None] | None]:
    """The single-copy gather's exposure, body and, on a root whose pieces lie apart, the
    writer of its piece table (:func:`piece_table`, to run before the entry): the
    root's pieces ``outs`` (None elsewhere), ``whole`` when they lie back to back
    (see ProcessGroup.gather)."""
    # Every rank writes its own piece into the root's, all at once, where the root
    # reading them one after the other made single-copy lose to one-shot up to 1 MiB
    # pieces (_select.ROOTED_SINGLE_MIN_BYTES): pieces back to back are exposed as one
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
        word = arena.exposed(root, arena.seq)[2]
        if me == root:
            for q, out in enumerate(outs or ()):
                if q == me:
                    out[:] = mine
                elif word == 0:
                    peers.read(q, out)
        elif word == PIECE_TABLE:
            peers.write_piece(root, me, mine)
        elif word == 1:
            peers.write(root, mine, sum(counts[:me]) * isz)

    return exposure, move_pieces, table


def scatter(arena: Arena, out: np.ndarray, inp: np.ndarray | None, root: int, isz: int,
            me: int) -> Body:
    """The body of the single-copy scatter: my piece of the root's ``inp`` (bytes; None
    but on the root) into ``out`` (bytes), from the buffer the root exposed, or from
    where its table of pieces says (a root on the lane whose list lies apart in memory
    publishes one: see ``TinyCallLane._scatter_single``)."""

    def read_piece(counts: list[int], peers: Peers) -> None:
        lo = sum(counts[:me]) * isz
        if inp is not None:
            out[:] = inp[lo:lo + out.nbytes]
        elif arena.exposed(root, arena.seq)[2] == PIECE_TABLE:
            peers.read(root, out, -1 - me)
        else:
            peers.read(root, out, lo)

    return read_piece


def reduce_my_piece(inp: np.ndarray, lo: int, out: np.ndarray, op: ops.ReduceOp, me: int,
                    n: int) -> Body:
    """The body of the single-copy reduce_scatter: ``out`` = elements ``[lo, lo +
    out.size)`` of every rank's exposed ``inp``, reduced in rank order."""

    def body(_: list[int], peers: Peers) -> None:
        reduce_from_all(peers.read, inp, lo, lo + out.size, out, op, me, n)

    return body


def read_pieces(out: np.ndarray, mine: np.ndarray, at: Sequence[int],
                offsets: Sequence[int], me: int, n: int) -> Reads:
    """The body of the single-copy all_to_all into ``out`` (bytes): the piece from
    rank q goes to ``out[at[q]:at[q + 1]]`` and lies at byte ``offsets[q]`` of q's
    exposed input (of ``mine`` for my own)."""
    return Reads(out, mine, me, lambda: tuple(
        (q, offsets[q], at[q + 1] - at[q], at[q]) for q in rotation(me, n)))
