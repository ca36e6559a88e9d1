"""``ProcessGroup``: a set of ranks, their arena and FIFO, and one method per collective.

A ProcessGroup is the backend in torch's sense. It receives already
validated, flattened buffers from the front door (_api.py), and for each
call it: assigns the next sequence number, builds the fingerprint and the
Plan, picks an algorithm (algorithms/_select.py), and submits a job to its
:class:`~meshcast._fifo.CallFifo`. The job enters the collective on the arena
(fingerprint exchange), runs the schedule with the executor, then finishes
(AVG division, float16/bfloat16 down-conversion, write-back of staged
buffers). Ranks here are group ranks; the global <-> group mapping is
:attr:`global_ranks`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _wait, config, ops, symmetric
from ._fifo import CallFifo
from ._fingerprint import SYMMETRIC_PATH, Fingerprint, counts_hash, path_digest, symmetric_extra
from .algorithms import _execute
from .algorithms import _select as _fast
from .algorithms._plan import Plan
from .buffers import Buffer, span, store_back, working_copy
from .errors import GroupAbortedError, InvalidUsage, MismatchError
from .lanes import TinyCallLane
from .transport import cma
from .transport.arena import Arena
from .transport.shm import KIND_COLL, KIND_P2P, Handle, ShmTransport
from .work import P2PWork, Work

_TAG_ROUNDS = 20
TUNED = ""  # the algorithm of a call MESHCAST_ALGO decides (see ProcessGroup._effective)


def _select(plan: Plan, algorithm: str | None) -> Any:
    from .algorithms import _select as selector

    return selector.select(plan, algorithm, config.get("MESHCAST_ALGO"))


class _CollHandle:
    """A transport handle whose wait also notices that another rank aborted the call."""

    __slots__ = ("handle", "arena")

    def __init__(self, handle: Handle, arena: Arena) -> None:
        self.handle, self.arena = handle, arena

    def wait(self, deadline: float) -> None:
        self.handle.wait(deadline, self.arena.check_abort)


class _Ctx:
    """Executor context for one call (see algorithms/_execute.ExecContext)."""

    __slots__ = ("group", "seq", "op", "deadline", "arena", "what")

    def __init__(self, group: ProcessGroup, seq: int, op: Any, deadline: float, what: str
                 ) -> None:
        self.group, self.seq, self.op, self.deadline = group, seq, op, deadline
        self.arena = group.arena
        self.what = what

    def _tag(self, round_index: int) -> int:
        return (self.seq << _TAG_ROUNDS) | round_index

    def isend(self, peer: int, buf: np.ndarray, round_index: int) -> _CollHandle:
        g = self.group
        return _CollHandle(g.transport.isend(g.global_ranks[peer], g.group_id, KIND_COLL,
                                             self._tag(round_index), buf, self.what), self.arena)

    def irecv(self, peer: int, buf: np.ndarray, round_index: int) -> _CollHandle:
        g = self.group
        return _CollHandle(g.transport.irecv(g.global_ranks[peer], g.group_id, KIND_COLL,
                                             self._tag(round_index), buf, self.what), self.arena)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Per-rank facts of a call that its fingerprint cannot hold (all_to_all's split
    sizes): ``publish(parity)`` writes them into my one-shot region before the entry,
    ``check(parity)`` reads every rank's after it and raises the same MismatchError on
    every rank if they disagree. Runs on every path, forced algorithms included."""

    publish: Callable[[int], None]
    check: Callable[[int], None]


@dataclasses.dataclass(frozen=True)
class _Direct:
    """The one-shot form of a collective whose layout only the entry reveals.

    gather, scatter and all_to_all cannot choose the one-shot path before the
    call, as the others do: a rank does not know the other ranks' sizes. So
    each rank whose own contribution is small stages it in its one-shot region
    (of the call's parity) *before* entering, and after the entry, where every
    rank learns every rank's count, ``fits(counts)`` decides the same way on
    every rank whether all of them staged. If so, ``read`` takes what this rank
    needs straight from the regions and the schedule never runs; if not, the
    staged bytes are ignored. Regions of parity ``p`` are reused two calls
    later, when every rank has entered the call in between, i.e. finished this one.

    stage(parity): write my contribution into my region if it is small enough
        (the same rule ``fits`` applies to every rank's count).
    fits(counts): whether every rank staged (rank-invariant: counts only).
    read(counts, regions): copy this rank's result out of every rank's region.
    """

    stage: Callable[[int], None]
    fits: Callable[[list[int]], bool]
    read: Callable[[list[int], list[np.ndarray]], None]


@dataclasses.dataclass(frozen=True)
class _Single:
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
    body: Callable[[list[int], _Peers], None]
    phases: int = 1  # the body's own barriers (signal/wait of phases 1..) plus the last one


class _Reads:
    """A :class:`_Single` body that only reads: ``(q, offset, length, at)`` copies
    ``length`` bytes at ``offset`` of rank q's exposed buffer (of ``mine`` when q is this
    rank) into ``dest[at:at + length]``, in list order. Being data, not code, it runs in
    the compiled helper when that was built (Arena.compiled_reads, one C call for the
    reads and the closing round); calling it runs the same reads in Python, which also
    explains any disagreement about the sizes."""

    __slots__ = ("dest", "mine", "me", "_reads")

    def __init__(self, dest: np.ndarray, mine: np.ndarray, me: int,
                 reads: Callable[[], tuple[tuple[int, int, int, int], ...]]) -> None:
        self.dest, self.mine, self.me, self._reads = dest, mine, me, reads

    @property
    def reads(self) -> tuple[tuple[int, int, int, int], ...]:
        """The list, built when the call runs (all_to_all's offsets are known only then)."""
        return self._reads()

    def __call__(self, _: list[int], peers: _Peers) -> None:
        dest, mine = self.dest, self.mine
        for q, offset, length, at in self.reads:
            if q == self.me:
                dest[at:at + length] = mine[offset:offset + length]
            else:
                peers.read(q, dest[at:at + length], offset)


class _Peers(NamedTuple):
    """Copies between this rank and the buffers the peers exposed (see :class:`_Single`)."""

    read: Callable[..., None]
    write: Callable[..., None]


def _reduce_from_all(read: Callable[..., None], mine: np.ndarray, lo: int, hi: int,
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


@functools.lru_cache(maxsize=16)
def split_header(n: int) -> struct.Struct:
    """all_to_all's per-rank header: offsets of my pieces, send counts, receive counts."""
    return struct.Struct(f"<{3 * n}q")


def split_head(n: int) -> int:
    """Bytes before all_to_all's staged data in a one-shot region: the header, padded
    so that the data stays 16-byte aligned."""
    return (24 * n + 15) // 16 * 16


def _rotation(me: int, n: int) -> list[int]:
    """``me, me+1, ..., me-1`` (mod n): readers that start at different ranks spread the load."""
    return [(me + i) % n for i in range(n)]


def _exposing(arr: np.ndarray | None, meta: int = 0) -> tuple[int, int, int]:
    if arr is None or not arr.nbytes:
        return (0, 0, meta)
    return (arr.ctypes.data, arr.nbytes, meta)


class GroupRanks:
    """Rank bookkeeping shared by every kind of group."""

    def __init__(self, group_id: int, name: str, global_ranks: Sequence[int], rank: int
                 ) -> None:
        self.group_id = group_id
        self.group_name = name
        self.global_ranks = list(global_ranks)
        self._rank = rank
        self._size = len(self.global_ranks)
        self._group_rank_of = {g: i for i, g in enumerate(self.global_ranks)}

    def rank(self) -> int:
        """This process's rank within the group."""
        return self._rank

    def size(self) -> int:
        """Number of ranks in the group."""
        return self._size

    def group_rank(self, global_rank: int) -> int:
        """Group rank of ``global_rank`` (raises ValueError if it is not a member)."""
        try:
            return self._group_rank_of[global_rank]
        except KeyError:
            raise ValueError(f"rank {global_rank} is not in {self.group_name}") from None

    def global_rank(self, group_rank: int) -> int:
        """Global rank of group rank ``group_rank``."""
        return self.global_ranks[group_rank]


class ProcessGroup(GroupRanks):
    """A group of ranks that run collectives together.

    Use :func:`meshcast.new_group` to make one; the default group is made by
    :func:`meshcast.init_process_group`. ``rank()``/``size()`` are group-local.
    """

    def __init__(self, *, group_id: int, name: str, global_ranks: Sequence[int], rank: int,
                 transport: ShmTransport, arena: Arena, timeout: float,
                 liveness: _wait.Liveness, store: Any = None) -> None:
        super().__init__(group_id, name, global_ranks, rank)
        self.transport = transport
        self.arena = arena
        self.timeout = timeout
        self.liveness = liveness
        # every member's pid, by group rank (single-copy reads; -1: not on this host)
        self._pids = tuple(liveness.pids.get(g, -1) for g in self.global_ranks)
        self.fifo = CallFifo(name)
        self._seq = itertools.count(1)
        # Numbers point-to-point calls for error messages ("recv #3 from rank 1 ..."): one
        # count over sends and receives in call order, as _seq is over collective kinds.
        self._p2p_seq = itertools.count(1)
        self.last_algorithm: str | None = None
        self.tracer: Any = None  # meshcast.trace.recorder.Tracer when MESHCAST_TRACE is set
        self.store = store  # where members meet (symmetric allocations use it)
        self.symmetric = symmetric.SymmetricHeap(rank, self._size)
        # Collectives MESHCAST_ALGO picks for: they skip the fast paths (see _effective).
        from .algorithms._select import tuned_collectives

        self.tuned = tuned_collectives(config.get("MESHCAST_ALGO"))
        # What the fast paths' table (algorithms/_select.py) decides by.
        self.caps = _fast.HostCaps(self._size, arena.small_bytes if self._size > 1 else 0,
                                   transport.cma_min_bytes > 0)
        self.lane = TinyCallLane(self)  # the cached lane for tiny synchronous calls

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.group_name} rank {self._rank}/{self._size}>"

    # ------------------------------------------------------------- machinery

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _effective(self, kind: str, algorithm: str | None) -> str | None:
        """``algorithm``, or :data:`TUNED` when MESHCAST_ALGO picks for ``kind``.

        Every fast path runs only when the algorithm is None, so TUNED sends the
        call to the schedules, where selection reads MESHCAST_ALGO (an empty
        explicit name defers to it). Its path digest differs from None's, so ranks
        whose environments disagree get a MismatchError, not a hang.
        """
        if algorithm is None and kind in self.tuned:
            return TUNED
        return algorithm

    def _what(self, kind: str, seq: int) -> str:
        return f"{kind} #{seq} on {self.group_name} (rank {self.global_ranks[self._rank]})"

    def _run(self, what: str, job: Callable[[], None], async_op: bool) -> Work | None:
        """Run ``job`` in call order: return a Work (async) or wait for it and return None."""
        if async_op:
            return self.fifo.submit(job, Work(what), inline=False)
        self.fifo.call(job, what)
        return None

    def _submit(self, kind: str, fp: Fingerprint, make_plan: Callable[[list[int]], Plan],
                finish: Callable[[Plan | None], None], *, algorithm: str | None,
                async_op: bool, per_rank_counts: bool = False, root_layout: int = -1,
                direct: _Direct | None = None, single: _Single | None = None,
                layout: _Layout | None = None, entered: list[int] | None = None
                ) -> Work | None:
        """Run a call: publish its layout, stage (direct) and expose (single) before
        entering, then take the one-shot, single-copy or schedule path.

        ``entered``: a tiny-call lane already did everything up to and including
        the entry (the same bytes, see lanes) and found every rank's counts,
        which are these; the rest runs here, at once, inside the lane's claim on
        the FIFO.
        """
        what = self._what(kind, fp.seq)

        def job() -> None:
            deadline = self._deadline()
            parity = fp.seq & 1
            multi = self._size > 1
            use_direct = direct is not None and algorithm is None and multi
            use_single = (single is not None and algorithm is None and multi
                          and self.transport.cma_min_bytes > 0)
            if entered is None:
                if layout is not None and multi:
                    layout.publish(parity)
                if use_direct:
                    direct.stage(parity)
                if use_single:
                    self.arena.expose(fp.seq, *single.expose)
                # A mismatch found here is found by every rank itself: no abort needed.
                counts = self.arena.enter(fp, what, deadline, per_rank_counts=per_rank_counts,
                                          root_layout=root_layout)
            else:
                counts = entered
            if layout is not None and multi:
                layout.check(parity)  # every rank sees the same tables: no abort needed
            if use_direct and direct.fits(counts):
                # Every rank staged its data before entering and every rank sees the
                # same counts, so all of them take this branch or none does.
                self.last_algorithm = f"{kind}/oneshot"
                try:
                    direct.read(counts, [s[parity] for s in self.arena.small])
                except BaseException as exc:
                    self.arena.abort(f"rank {self.global_ranks[self._rank]} failed in "
                                     f"{what}: {exc}", mismatch=isinstance(exc, MismatchError))
                    raise
                finish(None)
                return
            if use_single and single.fits(counts):
                self.last_algorithm = f"{kind}/cma"
                self._single_copy(single.body, single.phases, counts, what)
                finish(None)
                return
            plan = make_plan(counts)
            # supports() is rank-invariant and sees the same counts everywhere, so a
            # forced algorithm that cannot run is refused on every rank alike.
            try:
                entry = _select(plan, algorithm)
            except InvalidUsage as exc:
                if kind == "all_to_all" and "bruck" in (algorithm or ""):
                    # The one algorithm whose supports() sees per-rank data (bruck needs
                    # equal splits on every rank): another rank may have accepted it
                    # and be waiting for us, so it must not wait in vain.
                    self.arena.abort(str(exc))
                raise
            self.last_algorithm = f"{kind}/{entry.name}"
            try:
                ctx = _Ctx(self, fp.seq, plan.op, deadline, f"{what} [{entry.name}]")
                _execute.execute(entry.fn(plan), ctx, None if self.tracer is None
                                 else self.tracer.rounds_of(self, fp.seq))
            except (GroupAbortedError, MismatchError) as exc:
                # Peers that are still waiting must fail the same way, not time out.
                self.arena.abort(str(exc), mismatch=isinstance(exc, MismatchError))
                raise
            except BaseException as exc:
                self.arena.abort(f"rank {self.global_ranks[self._rank]} failed in {what}: {exc}")
                raise
            finish(plan)

        if entered is not None:
            job()
            return None
        return self._run(what, job, async_op)

    def _single_copy(self, body: Callable[[list[int], _Peers], None], phases: int,
                     counts: list[int], what: object) -> None:
        """Run ``body`` of a :class:`_Single` (reads straight from the peers' exposed
        buffers; its own barriers use phases 1 .. ``phases - 1``), then wait until every
        rank is done reading before anyone may return and reuse its buffer."""
        arena, seq = self.arena, self.arena.seq
        pids = self._pids
        fast = arena.compiled_reads
        if fast is not None and phases == 1 and type(body) is _Reads:
            try:
                status = fast(seq, pids, body.dest, body.mine, body.reads, 1, arena.spin_ns)
            except OSError:
                status = None  # Python's reads below raise with the whole story
            if status == 0:
                return
            if status == 2:  # read and signalled; someone is still reading
                arena.wait(range(self._size), 1)
                return
            if status == 3:
                arena.check_abort()

        def at(q: int, offset: int, length: int, verb: str) -> int:
            """The address of bytes ``[offset, offset + length)`` of rank q's buffer."""
            address, nbytes, _ = arena.exposed(q, seq)
            if offset < 0 or offset + length > nbytes:
                raise MismatchError(
                    f"{what}: rank {self.global_ranks[self._rank]} would {verb} bytes "
                    f"{offset}..{offset + length} of rank {self.global_ranks[q]}'s buffer, "
                    f"which holds {nbytes} (the ranks disagree about the sizes)")
            return address + offset

        def read(q: int, dest: np.ndarray, offset: int = 0) -> None:
            if dest.nbytes:
                cma.read(pids[q], at(q, offset, dest.nbytes, "read"), dest)

        def write(q: int, src: np.ndarray, offset: int = 0) -> None:
            if src.nbytes:
                cma.write(pids[q], at(q, offset, src.nbytes, "write"), src)

        try:
            body(counts, _Peers(read, write))
        except BaseException as exc:
            arena.abort(f"rank {self.global_ranks[self._rank]} failed in {what}: {exc}",
                        mismatch=isinstance(exc, MismatchError))
            raise
        arena.signal(phases)
        arena.wait(range(self._size), phases)

    def _single_fits(self, itemsize: int, pieces: int = 1) -> Callable[[list[int]], bool]:
        """``fits`` of a :class:`_Single` whose counts hold ``pieces`` pieces per rank."""
        return lambda counts: self.single_copy_fits(max(counts) * itemsize, pieces)

    def single_copy_fits(self, nbytes: int, pieces: int = 1) -> bool:
        """Whether a non-reducing call whose largest contribution is ``nbytes`` (in
        ``pieces`` pieces) takes the single-copy path (see algorithms/_select.py)."""
        return _fast.single_copy(self.caps, nbytes, pieces)

    def _oneshot(self, nbytes: int, algorithm: str | None) -> bool:
        """Whether a call of ``nbytes`` takes the one-shot path (same verdict on every rank:
        it depends only on the group and on fields the fingerprint compares)."""
        return algorithm is None and _fast.oneshot(self.caps, nbytes)

    def _oneshot_gathering(self, nbytes: int, algorithm: str | None) -> bool:
        """all_gather's :meth:`_oneshot` (see algorithms/_select.py)."""
        return algorithm is None and _fast.oneshot_all_gather(self.caps, nbytes)

    def _direct_bytes(self, readers: int) -> int:
        """The largest contribution a rank stages for a :class:`_Direct` call when
        ``readers`` contributions of that size are read by one rank."""
        return _fast.direct_bytes(self.caps, readers)

    def _plan(self, kind: str, dtype: np.dtype, **kw: Any) -> Plan:
        return Plan(coll=kind, rank=self._rank, size=self._size, dtype=dtype,
                    slot_bytes=self.arena.slot_bytes if self._size > 1 else 0, **kw)

    @staticmethod
    def _working(buf_flat: np.ndarray, dtype_name: str, op: Any
                 ) -> tuple[np.ndarray, bool]:
        """The array the reduction runs on (float32 for float16/bfloat16)."""
        if dtype_name in ("float16", "bfloat16"):
            work_dtype = ops.working_dtype(np.dtype(np.float16), op)
            if dtype_name == "bfloat16" or work_dtype != buf_flat.dtype:
                return working_copy(buf_flat, dtype_name, work_dtype), True
        return buf_flat, False

    def _next(self, kind: str, algorithm: str | None, oneshot: bool = False,
              seq: int | None = None, **fields: Any) -> Fingerprint:
        """The fingerprint of the next call (of call ``seq`` when a lane already took it)."""
        if seq is None:
            seq = next(self._seq)
        return Fingerprint(seq, kind, path=path_digest(algorithm, oneshot), **fields)

    def _region(self, flat: np.ndarray, algorithm: str | None,
                min_bytes: int) -> symmetric.Region | None:
        """Where ``flat`` lies in a symmetric allocation, if the call may use it in place.

        Whether ranks agree is checked by the fingerprint (the region is part of it);
        the size rule depends only on compared fields, so all ranks apply it alike."""
        if algorithm is not None or self._size == 1 or flat.nbytes < min_bytes:
            return None
        return self.symmetric.find(flat)

    def _symmetric_fp(self, kind: str, region: symmetric.Region, **fields: Any) -> Fingerprint:
        return Fingerprint(next(self._seq), kind, path=SYMMETRIC_PATH,
                           extra=symmetric_extra(*region.key), **fields)

    def _run_symmetric(self, what: str, fp: Fingerprint, body: Callable[[], None],
                       wait_all: bool, async_op: bool) -> Work | None:
        """Enter, run ``body`` (direct reads/writes of the peers' parts), signal phase 1
        and (if ``wait_all``) wait until every rank is done with its share."""

        def job() -> None:
            self.arena.enter(fp, what, self._deadline())
            try:
                body()
            except BaseException as exc:
                self.arena.abort(f"rank {self.global_ranks[self._rank]} failed in {what}: {exc}")
                raise
            self.arena.signal(1)
            if wait_all:
                self.arena.wait(range(self._size), 1)

        return self._run(what, job, async_op)

    # ------------------------------------------------------------ collectives

    def barrier(self, *, algorithm: str | None = None, async_op: bool = False
                ) -> Work | None:
        """Block until every rank of the group has entered the barrier.

        Args:
            algorithm: a registered barrier algorithm to force (None: the group
                decides; see ``meshcast algorithms barrier``).
            async_op: return a Work instead of waiting.

        Returns:
            A Work when ``async_op``, else None once every rank has arrived.

        Raises:
            InvalidUsage: ``algorithm`` names no algorithm of barrier or cannot run
                this call (every rank sees the same reason, so none is left waiting).
            MismatchError: another rank called a different collective at this
                point of the group's sequence; raised on every rank.
            GroupAbortedError: another rank failed in this call or an earlier one.
            CommTimeout: a peer did not arrive within the group's timeout.

        With ``async_op`` the errors of the exchange come from ``Work.wait()``.
        """
        algorithm = self._effective("barrier", algorithm)
        if self._oneshot(0, algorithm):
            # Entering the call already proves every rank arrived: that is a barrier.
            fp = self._next("barrier", algorithm, True)
            what = self._what("barrier", fp.seq)

            def job() -> None:
                self.last_algorithm = "barrier/oneshot"
                self.arena.oneshot(fp, None, what, self._deadline())

            return self._run(what, job, async_op)
        fp = self._next("barrier", algorithm)
        return self._submit("barrier", fp, lambda c: self._plan("barrier", np.dtype(np.uint8)),
                            lambda p: None, algorithm=algorithm, async_op=async_op)

    def broadcast(self, buf: Buffer, root: int, *, algorithm: str | None = None,
                  async_op: bool = False) -> Work | None:
        """Copy the root's ``buf`` into ``buf`` on every other rank, in place.

        Args:
            buf: the data (read on the root, overwritten elsewhere); every rank
                passes the same dtype and count.
            root: the root's group rank (the front door translates global ranks).
            algorithm: a registered broadcast algorithm to force (None: the group decides).
            async_op: return a Work instead of waiting.

        Returns:
            A Work when ``async_op``, else None once this rank's ``buf`` holds the
            root's data (on the root: once the peers no longer need it).

        Raises:
            InvalidUsage: ``algorithm`` names no algorithm of broadcast or cannot run
                this call (every rank sees the same reason, so none is left waiting).
            MismatchError: the ranks called different collectives, or disagree on
                the fingerprint (dtype, count, root); raised on every rank.
            GroupAbortedError: another rank failed in this call or an earlier one.
            CommTimeout: a peer did not arrive within the group's timeout.

        With ``async_op`` the errors of the exchange come from ``Work.wait()``.
        """
        algorithm = self._effective("broadcast", algorithm)
        region = None
        if not self._oneshot(buf.nbytes, algorithm):
            region = self._region(buf.flat, algorithm, 0)
        if region is not None:
            # Every rank copies straight from the root's part; only the root must wait
            # for the readers before its caller may change the data.
            fp = self._symmetric_fp("broadcast", region, dtype=buf.dtype_name, root=root,
                                    count=buf.count)
            parts = region.views(buf.flat.nbytes, np.dtype(np.uint8))
            n, me = self._size, self._rank
            bounds = [buf.flat.nbytes * k // n for k in range(n + 1)]

            def copy() -> None:
                # As on the single-copy path: reader q's copy is split in n parts, the
                # root copies part q into it while q copies the others, so the root's
                # core works too (2 ranks: each side copies half).
                self.last_algorithm = "broadcast/symmetric"
                src = parts[root]
                if me == root:
                    for q in _rotation(me, n)[1:]:
                        parts[q][bounds[q]:bounds[q + 1]] = src[bounds[q]:bounds[q + 1]]
                    return
                for k in _rotation(me, n)[1:]:  # every part but mine (part `root` included)
                    parts[me][bounds[k]:bounds[k + 1]] = src[bounds[k]:bounds[k + 1]]

            # Everyone waits for everyone: the root writes into the readers' parts.
            return self._run_symmetric(self._what("broadcast", fp.seq), fp, copy, True,
                                       async_op)
        if self._oneshot(buf.nbytes, algorithm):
            fp = self._next("broadcast", algorithm, True, dtype=buf.dtype_name, root=root,
                            count=buf.count)
            what = self._what("broadcast", fp.seq)
            data = buf.flat.reshape(-1).view(np.uint8)

            def job() -> None:
                self.last_algorithm = "broadcast/oneshot"
                regions = self.arena.oneshot(fp, data if self._rank == root else None, what,
                                             self._deadline())
                if self._rank != root:
                    data[:] = regions[root][:data.nbytes]
                    buf.finish()

            return self._run(what, job, async_op)
        fp = self._next("broadcast", algorithm, dtype=buf.dtype_name, root=root, count=buf.count)
        data = buf.flat.reshape(-1).view(np.uint8)

        n, me = self._size, self._rank

        def copy_from_root(_: list[int], peers: _Peers) -> None:
            # Reader q's copy is split in n parts: the root writes part q into it
            # while q reads the others, so the root's core works too (at 2 ranks each
            # side copies half: about twice as fast as the reader copying it all).
            bounds = [data.nbytes * k // n for k in range(n + 1)]
            if me == root:
                for q in _rotation(me, n)[1:]:
                    peers.write(q, data[bounds[q]:bounds[q + 1]], bounds[q])
                return
            for k in _rotation(me, n)[1:]:  # every part but mine (part `root` included)
                peers.read(root, data[bounds[k]:bounds[k + 1]], bounds[k])

        # count and dtype are in the fingerprint, so every rank decides alike
        single = _Single(_exposing(data), lambda _: self.single_copy_fits(data.nbytes),
                         copy_from_root)
        return self._submit(
            "broadcast", fp,
            lambda c: self._plan("broadcast", buf.flat.dtype, root=root, output=buf.flat),
            lambda p: buf.finish(), algorithm=algorithm, async_op=async_op, single=single)

    def all_reduce(self, buf: Buffer, op: ops.ReduceOp, *, algorithm: str | None = None,
                   async_op: bool = False) -> Work | None:
        """Reduce ``buf`` over every rank with ``op`` and leave the result in ``buf``
        on every rank, in place; the results are bitwise identical on all ranks.

        Args:
            buf: this rank's contribution, overwritten by the result; every rank
                passes the same dtype and count.
            op: the reduction (AVG sums, then divides by the group size; float16
                and bfloat16 sums run in float32 and are rounded back once).
            algorithm: a registered all_reduce algorithm to force (None: the group decides).
            async_op: return a Work instead of waiting.

        Returns:
            A Work when ``async_op``, else None once ``buf`` holds the result.

        Raises:
            InvalidUsage: ``algorithm`` names no algorithm of all_reduce or cannot run
                this call (every rank sees the same reason, so none is left waiting).
            MismatchError: the ranks called different collectives, or disagree on
                the fingerprint (dtype, count, op); raised on every rank.
            GroupAbortedError: another rank failed in this call or an earlier one.
            CommTimeout: a peer did not arrive within the group's timeout.

        With ``async_op`` the errors of the exchange come from ``Work.wait()``.
        """
        algorithm = self._effective("all_reduce", algorithm)
        work_arr, upcast = self._working(buf.flat, buf.dtype_name, op)
        sched_op = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

        def finish(plan: Plan | None) -> None:
            if op is ops.ReduceOp.AVG:
                ops.finish_average(work_arr, self._size)
            if upcast:
                store_back(buf.flat, work_arr, buf.dtype_name)
            buf.finish()

        region = None
        if not upcast:
            region = self._region(work_arr, algorithm,
                                  _fast.SYMMETRIC_ALL_REDUCE_MIN_BYTES
                                  if self._oneshot(work_arr.nbytes, algorithm) else 0)
        if region is not None:
            fp = self._symmetric_fp("all_reduce", region, dtype=buf.dtype_name, op=op.name,
                                    count=buf.count)
            parts = region.views(work_arr.nbytes, work_arr.dtype)

            def reduce_share() -> None:
                self.last_algorithm = "all_reduce/symmetric"
                symmetric.all_reduce_share(parts, self._rank, sched_op,
                                           op is ops.ReduceOp.AVG)

            return self._run_symmetric(self._what("all_reduce", fp.seq), fp, reduce_share,
                                       True, async_op)
        if self._oneshot(work_arr.nbytes, algorithm):
            fp = self._next("all_reduce", algorithm, True, dtype=buf.dtype_name, op=op.name,
                            count=buf.count)
            what = self._what("all_reduce", fp.seq)
            nbytes, dtype = work_arr.nbytes, work_arr.dtype

            def job() -> None:
                self.last_algorithm = "all_reduce/oneshot"
                regions = self.arena.oneshot(fp, work_arr.view(np.uint8), what, self._deadline())
                # Every rank reduces all inputs in rank order: bitwise identical results.
                ops.reduce_many(sched_op, work_arr, [r[:nbytes].view(dtype) for r in regions])
                finish(None)

            return self._run(what, job, async_op)
        fp = self._next("all_reduce", algorithm, dtype=buf.dtype_name, op=op.name,
                        count=buf.count)
        # count and dtype are in the fingerprint, so every rank decides alike
        single = _Single(_exposing(work_arr),
                         lambda _: _fast.all_reduce_single_copy(self.caps, work_arr.nbytes),
                         self.reduce_then_collect(work_arr, sched_op), phases=2)
        return self._submit(
            "all_reduce", fp,
            lambda c: self._plan("all_reduce", work_arr.dtype, op=sched_op, input=work_arr,
                                 output=work_arr),
            finish, algorithm=algorithm, async_op=async_op, single=single)

    def reduce_then_collect(self, arr: np.ndarray, op: ops.ReduceOp
                            ) -> Callable[[list[int], _Peers], None]:
        """The body of the single-copy all_reduce of ``arr`` (a :class:`_Single` of two
        phases, every rank exposing its ``arr``):

        1. my share of every rank's array, reduced into my own array;
        2. once every rank is done with 1 (nobody reads my other shares any more),
           every other share, reduced, read straight from its owner.
        """
        me, n, arena = self._rank, self._size, self.arena

        def body(_: list[int], peers: _Peers) -> None:
            isz = arr.dtype.itemsize
            lo, hi = symmetric.share(arr.size, isz, me, n)
            _reduce_from_all(peers.read, arr, lo, hi, arr[lo:hi], op, me, n)
            arena.signal(1)
            arena.wait(range(n), 1)
            for q in _rotation(me, n)[1:]:
                qlo, qhi = symmetric.share(arr.size, isz, q, n)
                peers.read(q, arr[qlo:qhi], qlo * isz)

        return body

    def reduce(self, buf: Buffer, op: ops.ReduceOp, root: int, *, algorithm: str | None = None,
               async_op: bool = False) -> Work:
        """Reduce ``buf`` over every rank with ``op`` into the root's ``buf``, in place.

        Args:
            buf: this rank's contribution; on the root it is overwritten by the
                result, elsewhere it is left unchanged. Every rank passes the same
                dtype and count.
            op: the reduction (AVG: sum, then divide by the group size).
            root: the root's group rank (the front door translates global ranks).
            algorithm: a registered reduce algorithm to force (None: the group decides).
            async_op: return a Work instead of waiting.

        Returns:
            A Work when ``async_op``, else None once this rank's part is done.

        Raises:
            InvalidUsage: ``algorithm`` names no algorithm of reduce or cannot run
                this call (every rank sees the same reason, so none is left waiting).
            MismatchError: the ranks called different collectives, or disagree on
                the fingerprint (dtype, count, op, root); raised on every rank.
            GroupAbortedError: another rank failed in this call or an earlier one.
            CommTimeout: a peer did not arrive within the group's timeout.

        With ``async_op`` the errors of the exchange come from ``Work.wait()``.
        """
        algorithm = self._effective("reduce", algorithm)
        work_arr, upcast = self._working(buf.flat, buf.dtype_name, op)
        # The schedules reduce into a separate output; the one-shot and single-copy
        # paths straight into the root's own array (no fresh pages to fault in).
        out = np.empty_like(work_arr) if self._rank == root else None
        sched_op = ops.ReduceOp.SUM if op == ops.ReduceOp.AVG else op

        def finish(plan: Plan | None) -> None:
            if out is None:
                return
            result = out if plan is not None else work_arr
            if op == ops.ReduceOp.AVG:
                ops.finish_average(result, self._size)
            if upcast or result is out:
                store_back(buf.flat, result, buf.dtype_name)
            buf.finish()

        if self._oneshot(work_arr.nbytes, algorithm):
            fp = self._next("reduce", algorithm, True, dtype=buf.dtype_name, op=op.name,
                            root=root, count=buf.count)
            what = self._what("reduce", fp.seq)
            nbytes, dtype = work_arr.nbytes, work_arr.dtype

            def job() -> None:
                self.last_algorithm = "reduce/oneshot"
                regions = self.arena.oneshot(fp, work_arr.view(np.uint8), what, self._deadline())
                if out is not None:  # the operands are the regions: work_arr is free
                    ops.reduce_many(sched_op, work_arr,
                                    [r[:nbytes].view(dtype) for r in regions])
                finish(None)

            return self._run(what, job, async_op)
        fp = self._next("reduce", algorithm, dtype=buf.dtype_name, op=op.name, root=root,
                        count=buf.count)
        me, n = self._rank, self._size

        def reduce_at_root(_: list[int], peers: _Peers) -> None:
            # The root reads every other rank's array in cache-sized chunks and reduces
            # them in rank order; the others only expose theirs (2 ranks, 8 MiB: about
            # half the arena schedule's time).
            if out is not None:
                _reduce_from_all(peers.read, work_arr, 0, work_arr.size, work_arr, sched_op,
                                 me, n)

        # count and dtype are in the fingerprint, so every rank decides alike
        single = _Single(_exposing(work_arr),
                         lambda _: self.single_copy_fits(work_arr.nbytes), reduce_at_root)
        return self._submit(
            "reduce", fp,
            lambda c: self._plan("reduce", work_arr.dtype, op=sched_op, root=root,
                                 input=work_arr, output=out),
            finish, algorithm=algorithm, async_op=async_op, single=single)

    def all_gather(self, out_flat: np.ndarray, in_flat: np.ndarray, counts: Sequence[int],
                   dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False,
                   entered: tuple[int, list[int]] | None = None) -> Work:
        """Gather every rank's ``in_flat`` (``counts[r]`` elements from rank r) into
        ``out_flat``, in rank order. ``entered``: ``(seq, counts)`` of a call the
        tiny-call lane began and hands over after the entry (past the one-shot sizes)."""
        algorithm = self._effective("all_gather", algorithm)
        counts = tuple(int(c) for c in counts)
        itemsize = in_flat.dtype.itemsize
        region = None
        if len(set(counts)) == 1:
            region = self._region(out_flat, algorithm, _fast.SYMMETRIC_MIN_BYTES)
        if region is not None:
            # Each rank writes its piece straight into every rank's output: one copy
            # per piece and destination, nothing staged.
            fp = self._symmetric_fp("all_gather", region, dtype=dtype_name, count=in_flat.size)
            parts = region.views(out_flat.nbytes, out_flat.dtype)
            lo = self._rank * counts[0]

            def scatter_piece() -> None:
                self.last_algorithm = "all_gather/symmetric"
                for part in parts:
                    part[lo:lo + counts[0]] = in_flat

            return self._run_symmetric(self._what("all_gather", fp.seq), fp, scatter_piece,
                                       True, async_op)
        if self._oneshot_gathering(max(counts, default=0) * itemsize, algorithm):
            fp = self._next("all_gather", algorithm, True, dtype=dtype_name,
                            count=in_flat.size, extra=counts_hash(counts))
            what = self._what("all_gather", fp.seq)
            out_bytes = out_flat.reshape(-1).view(np.uint8)

            def job() -> None:
                self.last_algorithm = "all_gather/oneshot"
                regions = self.arena.oneshot(fp, in_flat.reshape(-1).view(np.uint8), what,
                                             self._deadline(), per_rank_counts=True)
                off = 0
                for region, c in zip(regions, counts):
                    nb = c * itemsize
                    out_bytes[off:off + nb] = region[:nb]
                    off += nb
                finish()

            return self._run(what, job, async_op)
        fp = self._next("all_gather", algorithm, dtype=dtype_name, count=in_flat.size,
                        extra=counts_hash(counts), seq=entered[0] if entered else None)
        mine = in_flat.reshape(-1).view(np.uint8)
        at = [0, *itertools.accumulate(c * itemsize for c in counts)]
        single = _Single(_exposing(mine), self._single_fits(itemsize),
                         self.gather_pieces(out_flat.reshape(-1).view(np.uint8), mine, at))
        return self._submit(
            "all_gather", fp,
            lambda c: self._plan("all_gather", in_flat.dtype, input=in_flat, output=out_flat,
                                 counts=counts),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            single=single, entered=entered[1] if entered else None)

    def gather(self, out_pieces: Sequence[np.ndarray] | None, in_flat: np.ndarray, root: int,
               dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
               async_op: bool = False, expected_counts: Sequence[int] | None = None,
               entered: tuple[int, list[int]] | None = None) -> Work:
        """Gather every rank's ``in_flat`` into ``out_pieces`` (one flat array per rank,
        given on the root only; the one-shot and single-copy paths fill them directly).
        ``entered``: ``(seq, counts)`` of a call the tiny-call lane hands over."""
        algorithm = self._effective("gather", algorithm)
        fp = self._next("gather", algorithm, dtype=dtype_name, root=root, count=in_flat.size,
                        extra=counts_hash(expected_counts), seq=entered[0] if entered else None)
        limit = self._direct_bytes(self._size)
        isz, me = in_flat.dtype.itemsize, self._rank
        mine = in_flat.reshape(-1).view(np.uint8)
        outs = [p.reshape(-1).view(np.uint8) for p in out_pieces] if out_pieces else None

        def stage(parity: int) -> None:
            if me != root and 0 < mine.nbytes <= limit:
                self.arena.small[me][parity][:mine.nbytes] = mine

        def read(counts: list[int], regions: list[np.ndarray]) -> None:
            for q, out in enumerate(outs or ()):
                out[:] = mine if q == me else regions[q][:out.nbytes]

        # When the root's pieces lie back to back it exposes them as one buffer and says
        # so in the exposure's word (1): every rank then writes its own piece into it,
        # all at once, instead of the root reading them one after the other.
        whole = span(outs) if outs and me == root else None
        exposure = _exposing(whole, 1) if whole is not None else _exposing(mine)

        def move_pieces(counts: list[int], peers: _Peers) -> None:
            if self.arena.exposed(root, self.arena.seq)[2] == 1:
                if me != root:
                    peers.write(root, mine, sum(counts[:me]) * isz)
                elif outs:
                    outs[me][:] = mine
                return
            for q, out in enumerate(outs or ()):
                if q == me:
                    out[:] = mine
                else:
                    peers.read(q, out)

        # The schedules gather into one flat array, spread into the pieces afterwards.
        staging: list[np.ndarray] = []

        def make_plan(counts: list[int]) -> Plan:
            if out_pieces:
                staging.append(np.empty(sum(counts), in_flat.dtype))
            return self._plan("gather", in_flat.dtype, root=root, input=in_flat,
                              output=staging[0] if staging else None, counts=tuple(counts))

        def done(plan: Plan | None) -> None:
            if staging and out_pieces:
                at = 0
                for piece in out_pieces:
                    piece[...] = staging[0][at:at + piece.size]
                    at += piece.size
            finish()

        return self._submit(
            "gather", fp, make_plan, done, algorithm=algorithm, async_op=async_op,
            per_rank_counts=True, root_layout=root,
            direct=_Direct(stage, lambda counts: max(counts) * isz <= limit, read),
            single=_Single(exposure, self._single_fits(isz), move_pieces),
            entered=entered[1] if entered else None)

    def scatter(self, out_flat: np.ndarray, in_flat: np.ndarray | None, root: int,
                dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
                async_op: bool = False, expected_counts: Sequence[int] | None = None,
                entered: tuple[int, list[int]] | None = None) -> Work:
        """Scatter the root's ``in_flat`` (every rank's piece, back to back) into each
        rank's ``out_flat``. ``entered``: see :meth:`gather`."""
        algorithm = self._effective("scatter", algorithm)
        fp = self._next("scatter", algorithm, dtype=dtype_name, root=root, count=out_flat.size,
                        extra=counts_hash(expected_counts), seq=entered[0] if entered else None)
        limit = self._direct_bytes(1)  # the root's region holds every piece
        isz, me = out_flat.dtype.itemsize, self._rank

        def stage(parity: int) -> None:
            if in_flat is not None and in_flat.nbytes <= limit:
                self.arena.small[me][parity][:in_flat.nbytes] = in_flat.reshape(-1).view(np.uint8)

        def read(counts: list[int], regions: list[np.ndarray]) -> None:
            lo = sum(counts[:me]) * isz
            src = (regions[root] if in_flat is None else in_flat.reshape(-1).view(np.uint8))
            out_flat.reshape(-1).view(np.uint8)[:] = src[lo:lo + counts[me] * isz]

        direct = _Direct(stage, lambda counts: sum(counts) * isz <= limit, read)

        def read_piece(counts: list[int], peers: _Peers) -> None:
            lo = sum(counts[:me]) * isz
            dest = out_flat.reshape(-1).view(np.uint8)
            if in_flat is not None:
                dest[:] = in_flat.reshape(-1).view(np.uint8)[lo:lo + dest.nbytes]
            else:
                peers.read(root, dest, lo)

        single = _Single(_exposing(in_flat), self._single_fits(isz), read_piece)
        return self._submit(
            "scatter", fp,
            lambda c: self._plan("scatter", out_flat.dtype, root=root, input=in_flat,
                                 output=out_flat, counts=tuple(c)),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            root_layout=root, direct=direct, single=single,
            entered=entered[1] if entered else None)

    def reduce_scatter(self, out_buf: Buffer, in_flat: np.ndarray, counts: Sequence[int],
                       op: ops.ReduceOp, finish: Callable[[], None], *,
                       algorithm: str | None = None, async_op: bool = False,
                       entered: tuple[int, list[int]] | None = None) -> Work:
        """Reduce every rank's ``in_flat`` and leave piece r (``counts[r]`` elements) on
        rank r. ``entered``: ``(seq, counts)`` of a call the tiny-call lane began and
        hands over after the entry (past the one-shot sizes)."""
        algorithm = self._effective("reduce_scatter", algorithm)
        counts = tuple(int(c) for c in counts)
        in_work, in_upcast = self._working(in_flat, out_buf.dtype_name, op)
        out_work, upcast = self._working(out_buf.flat, out_buf.dtype_name, op)
        sched_op = ops.ReduceOp.SUM if op == ops.ReduceOp.AVG else op

        def done(plan: Plan | None) -> None:
            if op == ops.ReduceOp.AVG:
                ops.finish_average(out_work, self._size)
            if upcast:
                store_back(out_buf.flat, out_work, out_buf.dtype_name)
            out_buf.finish()
            finish()

        region = None
        if len(set(counts)) == 1 and not in_upcast:
            region = self._region(in_work, algorithm, _fast.SYMMETRIC_MIN_BYTES)
        if region is not None:
            # Each rank reduces its piece straight from every rank's input.
            fp = self._symmetric_fp("reduce_scatter", region, dtype=out_buf.dtype_name,
                                    op=op.name, count=out_buf.count)
            c = counts[0]
            lo = self._rank * c
            srcs = [p[lo:lo + c] for p in region.views(in_work.nbytes, in_work.dtype)]

            def reduce_piece() -> None:
                self.last_algorithm = "reduce_scatter/symmetric"
                mine = srcs[self._rank]
                if self._rank > 1 and np.shares_memory(out_work, mine):
                    # reduce_many may not write into a later operand: go through a copy
                    tmp = np.empty_like(out_work)
                    ops.reduce_many(sched_op, tmp, srcs)
                    out_work[:] = tmp
                else:
                    ops.reduce_many(sched_op, out_work, srcs)
                done(None)

            return self._run_symmetric(self._what("reduce_scatter", fp.seq), fp, reduce_piece,
                                       True, async_op)
        fp = self._next("reduce_scatter", algorithm, dtype=out_buf.dtype_name, op=op.name,
                        count=out_buf.count, extra=counts_hash(counts),
                        seq=entered[0] if entered else None)

        if self._oneshot(in_work.nbytes, algorithm):
            fp = dataclasses.replace(fp, path=path_digest(None, True))
            what = self._what("reduce_scatter", fp.seq)
            start = sum(counts[:self._rank]) * in_work.dtype.itemsize
            nbytes, dtype = out_work.nbytes, in_work.dtype

            def job() -> None:
                self.last_algorithm = "reduce_scatter/oneshot"
                regions = self.arena.oneshot(fp, in_work.view(np.uint8), what, self._deadline(),
                                             per_rank_counts=True)
                ops.reduce_many(sched_op, out_work,
                                [r[start:start + nbytes].view(dtype) for r in regions])
                done(None)

            return self._run(what, job, async_op)
        single = _Single(_exposing(in_work), self._single_fits(in_work.dtype.itemsize),
                         self.reduce_my_piece(in_work, sum(counts[:self._rank]), out_work,
                                              sched_op))
        return self._submit(
            "reduce_scatter", fp,
            lambda c: self._plan("reduce_scatter", in_work.dtype, op=sched_op, input=in_work,
                                 output=out_work, counts=counts),
            done, algorithm=algorithm, async_op=async_op, per_rank_counts=True, single=single,
            entered=entered[1] if entered else None)

    def gather_pieces(self, out: np.ndarray, mine: np.ndarray, at: Sequence[int]
                      ) -> Callable[[list[int], _Peers], None]:
        """The body of the single-copy all_gather into ``out`` (bytes): rank q's piece
        goes to ``out[at[q]:at[q + 1]]``, mine copied (unless it is there already, in
        place), the others read straight from their owners."""
        me, n = self._rank, self._size

        in_place = np.shares_memory(out[at[me]:at[me + 1]], mine)
        # rank q's piece is read by one rank at a time
        reads = tuple((q, 0, at[q + 1] - at[q], at[q]) for q in _rotation(me, n)
                      if q != me or not in_place)
        return _Reads(out, mine, me, lambda: reads)

    def read_pieces(self, out: np.ndarray, mine: np.ndarray, at: Sequence[int],
                    offsets: Sequence[int]) -> Callable[[list[int], _Peers], None]:
        """The body of the single-copy all_to_all into ``out`` (bytes): the piece from
        rank q goes to ``out[at[q]:at[q + 1]]`` and lies at byte ``offsets[q]`` of q's
        exposed input (of ``mine`` for my own)."""
        me, n = self._rank, self._size

        return _Reads(out, mine, me, lambda: tuple(
            (q, offsets[q], at[q + 1] - at[q], at[q]) for q in _rotation(me, n)))

    def reduce_my_piece(self, inp: np.ndarray, lo: int, out: np.ndarray, op: ops.ReduceOp
                        ) -> Callable[[list[int], _Peers], None]:
        """The body of the single-copy reduce_scatter: ``out`` = elements ``[lo, lo +
        out.size)`` of every rank's exposed ``inp``, reduced in rank order."""
        me, n = self._rank, self._size

        def body(_: list[int], peers: _Peers) -> None:
            _reduce_from_all(peers.read, inp, lo, lo + out.size, out, op, me, n)

        return body

    def all_to_all(self, out_flat: np.ndarray, in_flat: np.ndarray, send_counts: Sequence[int],
                   recv_counts: Sequence[int], dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False,
                   entered: tuple[int, list[int]] | None = None) -> Work:
        """all_to_all of ``in_flat`` split by ``send_counts`` into ``out_flat`` split by
        ``recv_counts`` (element counts per group rank). ``entered``: ``(seq, counts)``
        of a call the tiny-call lane began and hands over after the entry."""
        algorithm = self._effective("all_to_all", algorithm)
        if np.may_share_memory(in_flat, out_flat):
            # In place (or lists spanning the same memory): the peers must read what I
            # send while I write what I receive, so what I send is staged first.
            in_flat = in_flat.copy()
        fp = self._next("all_to_all", algorithm, dtype=dtype_name, count=in_flat.size,
                        seq=entered[0] if entered else None)
        send = tuple(int(c) for c in send_counts)
        recv = tuple(int(c) for c in recv_counts)
        n, me, isz = self._size, self._rank, in_flat.dtype.itemsize
        # Split sizes are per rank and not in the fingerprint, so every rank publishes
        # its own in a header of its one-shot region before entering: [offset of my
        # piece for each rank, send counts, receive counts] (int64), then, for the
        # one-shot path, my input. After the entry every rank checks the whole matrix
        # (the same verdict and message everywhere) and finds its pieces' offsets.
        head = split_head(n)
        limit = self.a2a_direct_limit()
        mine = in_flat.reshape(-1).view(np.uint8)
        # Plain ints and struct, not NumPy: at small sizes these few lines were most of
        # the call's cost.
        sd = list(itertools.accumulate(send, initial=0))
        rd = [x * isz for x in itertools.accumulate(recv, initial=0)]
        layout = split_header(n)
        header = layout.pack(*sd[:-1], *send, *recv)
        uniform = len(set(send) | set(recv)) <= 1
        offsets: list[int] = []  # where my piece lies in each rank's input (after the check)

        def publish(parity: int) -> None:
            memoryview(self.arena.small[me][parity])[:layout.size] = header

        def check(parity: int) -> None:
            regions = [self.arena.small[q][parity] for q in range(n)]
            if uniform and all(memoryview(g)[:layout.size] == header for g in regions):
                # Everyone splits evenly and the same way: nothing to cross-check.
                offsets[:] = [sd[me] * isz] * n
                return
            table = [layout.unpack_from(g) for g in regions]
            bad = [(q, r) for q in range(n) for r in range(n)
                   if table[q][n + r] != table[r][2 * n + q]]
            if bad:
                q, r = bad[0]
                raise MismatchError(
                    f"all_to_all #{fp.seq} on {self.group_name}: rank {self.global_ranks[q]} "
                    f"sends {table[q][n + r]} elements to rank {self.global_ranks[r]}, which "
                    f"expects {table[r][2 * n + q]} from it (check the split sizes; "
                    f"{len(bad)} pair(s) disagree)")
            offsets[:] = [row[me] * isz for row in table]

        def stage(parity: int) -> None:
            if mine.nbytes <= limit:
                # Everything but my own piece, which only I read (from my input): at
                # 2 ranks that halves the copy in.
                region = self.arena.small[me][parity]
                lo, hi = sd[me] * isz, sd[me + 1] * isz
                region[head:head + lo] = mine[:lo]
                region[head + hi:head + mine.nbytes] = mine[hi:]

        def read(counts: list[int], regions: list[np.ndarray]) -> None:
            out = out_flat.reshape(-1).view(np.uint8)
            for q in _rotation(me, n):
                src, at = (mine, offsets[q]) if q == me else (regions[q], head + offsets[q])
                out[rd[q]:rd[q + 1]] = src[at:at + rd[q + 1] - rd[q]]

        return self._submit(
            "all_to_all", fp,
            lambda c: self._plan("all_to_all", in_flat.dtype, input=in_flat, output=out_flat,
                                 counts=send, recv_counts=recv),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            layout=_Layout(publish, check),
            direct=_Direct(stage, lambda counts: max(counts) * isz <= limit, read),
            single=_Single(_exposing(mine), self._single_fits(isz, n),
                           self.read_pieces(out_flat.reshape(-1).view(np.uint8), mine, rd,
                                            offsets)),
            entered=entered[1] if entered else None)

    def a2a_direct_limit(self) -> int:
        """The largest input (bytes) an all_to_all rank stages for the one-shot path
        (see algorithms/_select.py)."""
        return _fast.all_to_all_direct_limit(self.caps, split_head(self._size))

    # ---------------------------------------------------------- point to point

    def isend(self, flat: np.ndarray, dst: int, tag: int) -> Work:
        """Post a send to group rank ``dst``; returns at once."""
        peer = self.global_ranks[dst]
        what = f"send #{next(self._p2p_seq)} to rank {peer} (tag {tag}) on {self.group_name}"
        deadline = self._deadline()
        handle = self.transport.isend(peer, self.group_id, KIND_P2P, tag, flat, what)
        return P2PWork(what, handle, deadline)

    def irecv(self, buf: Buffer, src: int | None, tag: int) -> Work:
        """Post a receive from group rank ``src`` (None: any rank); returns at once.

        A receive from any rank fails with PeerGoneError when any other member
        of the group dies before a message matched it (Gloo's semantics).
        """
        peer = None if src is None else self.global_ranks[src]
        who = "any rank" if peer is None else f"rank {peer}"
        what = f"recv #{next(self._p2p_seq)} from {who} (tag {tag}) on {self.group_name}"
        deadline = self._deadline()
        # peers: the members that could send a receive from any rank (it waits on them all)
        handle = self.transport.irecv(peer, self.group_id, KIND_P2P, tag, buf.flat, what,
                                      peers=self.global_ranks)
        return P2PWork(what, handle, deadline, finish=buf.finish)

    # ---------------------------------------------------------------- teardown

    def shutdown(self) -> None:
        """Refuse new work and release the symmetric allocations' mappings."""
        self.fifo.close()
        self.symmetric.close()
