"""``ProcessGroup``: a set of ranks, their arena and FIFO, and one method per collective.

A ProcessGroup is the backend in torch's sense. It receives already
validated, flattened buffers from the front door (_api.py), and for each
call it: assigns the next sequence number, builds the fingerprint and the
Plan, and submits a job to its :class:`~meshcast._fifo.CallFifo`. The job
enters the collective on the arena (fingerprint exchange), then runs one
path, then finishes (AVG division, float16/bfloat16 down-conversion,
write-back of staged buffers). Ranks here are group ranks; the global <->
group mapping is :attr:`global_ranks`.

Which path runs is decided by algorithms/_select.py alone: its fast-path
rules send a call to one of the fast paths meshcast/paths/ builds (one-shot,
single-copy, symmetric), the rest to a schedule of algorithms/ that
paths/schedule.py runs. This module keeps the call protocol
that every path shares (:meth:`ProcessGroup._submit`: publish, stage,
expose, enter, then one path; abort on failure) and the per-collective
methods that build the pieces.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _wait, config, ops, symmetric
from ._fifo import CallFifo
from ._fingerprint import SYMMETRIC_PATH, Fingerprint, counts_hash, path_digest, symmetric_extra
from .algorithms import _select as _fast
from .algorithms._plan import Plan
from .buffers import Buffer, span, store_back, working_copy
from .errors import MismatchError
from .lanes import TinyCallLane
from .paths import Job, oneshot, schedule, single_copy
from .paths import symmetric as symmetric_path
from .paths.oneshot import Layout, Staged
from .paths.single_copy import SingleCopy, exposing
from .transport.arena import Arena
from .transport.shm import KIND_P2P, ShmTransport
from .work import P2PWork, Work

TUNED = ""  # the algorithm of a call MESHCAST_ALGO decides (see ProcessGroup._effective)


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
        self.tuned = _fast.tuned_collectives(config.get("MESHCAST_ALGO"))
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

    def _run(self, what: str, job: Job, async_op: bool) -> Work | None:
        """Run ``job`` in call order: return a Work (async) or wait for it and return None."""
        if async_op:
            return self.fifo.submit(job, Work(what), inline=False)
        self.fifo.call(job, what)
        return None

    def _submit(self, kind: str, fp: Fingerprint, make_plan: Callable[[list[int]], Plan],
                finish: Callable[[Plan | None], None], *, algorithm: str | None,
                async_op: bool, per_rank_counts: bool = False, root_layout: int = -1,
                staged: Staged | None = None, single: SingleCopy | None = None,
                layout: Layout | None = None, entered: list[int] | None = None
                ) -> Work | None:
        """Run a call: publish its layout, stage (one-shot) and expose (single-copy)
        before entering, then take the one-shot, single-copy or schedule path.

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
            use_staged = staged is not None and algorithm is None and multi
            use_single = (single is not None and algorithm is None and multi
                          and self.transport.cma_min_bytes > 0)
            if entered is None:
                if layout is not None and multi:
                    layout.publish(parity)
                if use_staged:
                    staged.stage(parity)
                if use_single:
                    self.arena.expose(fp.seq, *single.expose)
                # A mismatch found here is found by every rank itself: no abort needed.
                counts = self.arena.enter(fp, what, deadline, per_rank_counts=per_rank_counts,
                                          root_layout=root_layout)
            else:
                counts = entered
            if layout is not None and multi:
                layout.check(parity)  # every rank sees the same tables: no abort needed
            if use_staged and staged.fits(counts):
                # Every rank staged its data before entering and every rank sees the
                # same counts, so all of them take this branch or none does.
                self.last_algorithm = f"{kind}/oneshot"
                try:
                    staged.read(counts, [s[parity] for s in self.arena.small])
                except BaseException as exc:
                    self.arena.abort(f"rank {self.global_ranks[self._rank]} failed in "
                                     f"{what}: {exc}", mismatch=isinstance(exc, MismatchError))
                    raise
                finish(None)
                return
            if use_single and single.fits(counts):
                self.last_algorithm = f"{kind}/cma"
                single_copy.run(self, single.body, single.phases, counts, what)
                finish(None)
                return
            plan = make_plan(counts)
            schedule.run(self, kind, fp, plan, algorithm, deadline, what)
            finish(plan)

        if entered is not None:
            job()
            return None
        return self._run(what, job, async_op)

    def _oneshot(self, nbytes: int, algorithm: str | None) -> bool:
        """Whether a call of ``nbytes`` takes the one-shot path (same verdict on every rank:
        it depends only on the group and on fields the fingerprint compares)."""
        return algorithm is None and _fast.oneshot(self.caps, nbytes)

    def _oneshot_gathering(self, nbytes: int, algorithm: str | None) -> bool:
        """all_gather's :meth:`_oneshot` (see algorithms/_select.py)."""
        return algorithm is None and _fast.oneshot_all_gather(self.caps, nbytes)

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

    def _in_place(self, kind: str, region: symmetric.Region, body: Callable[[], None],
                  async_op: bool, **fields: Any) -> Work | None:
        """Run ``body`` on the symmetric ``region`` (see paths/symmetric.py)."""
        fp = Fingerprint(next(self._seq), kind, path=SYMMETRIC_PATH,
                         extra=symmetric_extra(*region.key), **fields)
        what = self._what(kind, fp.seq)
        return self._run(what, symmetric_path.job(self, fp, what, body), async_op)

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
            fp = self._next("barrier", algorithm, True)
            what = self._what("barrier", fp.seq)
            return self._run(what, oneshot.barrier(self, fp, what), async_op)
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
            parts = region.views(buf.flat.nbytes, np.dtype(np.uint8))
            body = symmetric_path.broadcast(self, parts, root)
            return self._in_place("broadcast", region, body, async_op, dtype=buf.dtype_name,
                                  root=root, count=buf.count)
        if self._oneshot(buf.nbytes, algorithm):
            fp = self._next("broadcast", algorithm, True, dtype=buf.dtype_name, root=root,
                            count=buf.count)
            what = self._what("broadcast", fp.seq)
            return self._run(what, oneshot.broadcast(self, fp, what, buf, root), async_op)
        fp = self._next("broadcast", algorithm, dtype=buf.dtype_name, root=root, count=buf.count)
        data = buf.flat.reshape(-1).view(np.uint8)
        # count and dtype are in the fingerprint, so every rank decides alike
        single = SingleCopy(exposing(data), lambda _: _fast.single_copy(self.caps, data.nbytes),
                            single_copy.broadcast(data, root, self._rank, self._size))
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
            parts = region.views(work_arr.nbytes, work_arr.dtype)
            body = symmetric_path.all_reduce(self, parts, sched_op, op is ops.ReduceOp.AVG)
            return self._in_place("all_reduce", region, body, async_op, dtype=buf.dtype_name,
                                  op=op.name, count=buf.count)
        if self._oneshot(work_arr.nbytes, algorithm):
            fp = self._next("all_reduce", algorithm, True, dtype=buf.dtype_name, op=op.name,
                            count=buf.count)
            what = self._what("all_reduce", fp.seq)
            return self._run(what, oneshot.all_reduce(self, fp, what, work_arr, sched_op, finish),
                             async_op)
        fp = self._next("all_reduce", algorithm, dtype=buf.dtype_name, op=op.name,
                        count=buf.count)
        # count and dtype are in the fingerprint, so every rank decides alike
        single = SingleCopy(exposing(work_arr),
                            lambda _: _fast.all_reduce_single_copy(self.caps, work_arr.nbytes),
                            single_copy.reduce_then_collect(self.arena, work_arr, sched_op,
                                                            self._rank, self._size), phases=2)
        return self._submit(
            "all_reduce", fp,
            lambda c: self._plan("all_reduce", work_arr.dtype, op=sched_op, input=work_arr,
                                 output=work_arr),
            finish, algorithm=algorithm, async_op=async_op, single=single)

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
            return self._run(what, oneshot.reduce(self, fp, what, work_arr, sched_op,
                                                  out is not None, finish), async_op)
        fp = self._next("reduce", algorithm, dtype=buf.dtype_name, op=op.name, root=root,
                        count=buf.count)
        # count and dtype are in the fingerprint, so every rank decides alike
        single = SingleCopy(exposing(work_arr),
                            lambda _: _fast.single_copy(self.caps, work_arr.nbytes),
                            single_copy.reduce(work_arr, sched_op, out is not None, self._rank,
                                               self._size))
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
            parts = region.views(out_flat.nbytes, out_flat.dtype)
            body = symmetric_path.all_gather(self, parts, in_flat, counts[0])
            return self._in_place("all_gather", region, body, async_op, dtype=dtype_name,
                                  count=in_flat.size)
        if self._oneshot_gathering(max(counts, default=0) * itemsize, algorithm):
            fp = self._next("all_gather", algorithm, True, dtype=dtype_name,
                            count=in_flat.size, extra=counts_hash(counts))
            what = self._what("all_gather", fp.seq)
            return self._run(what, oneshot.all_gather(self, fp, what, out_flat, in_flat, counts,
                                                      finish), async_op)
        fp = self._next("all_gather", algorithm, dtype=dtype_name, count=in_flat.size,
                        extra=counts_hash(counts), seq=entered[0] if entered else None)
        mine = in_flat.reshape(-1).view(np.uint8)
        at = [0, *itertools.accumulate(c * itemsize for c in counts)]
        single = SingleCopy(exposing(mine), single_copy.fits(self.caps, itemsize),
                            single_copy.gather_pieces(out_flat.reshape(-1).view(np.uint8), mine,
                                                      at, self._rank, self._size))
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
        isz, me = in_flat.dtype.itemsize, self._rank
        mine = in_flat.reshape(-1).view(np.uint8)
        outs = [p.reshape(-1).view(np.uint8) for p in out_pieces] if out_pieces else None
        staged = oneshot.gather(self.arena, root, me, mine, outs, isz,
                                _fast.direct_bytes(self.caps, self._size))
        exposure, move_pieces = single_copy.gather(
            self.arena, root, mine, outs, span(outs) if outs and me == root else None, isz, me)
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
            per_rank_counts=True, root_layout=root, staged=staged,
            single=SingleCopy(exposure, single_copy.fits(self.caps, isz), move_pieces),
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
        isz, me = out_flat.dtype.itemsize, self._rank
        out = out_flat.reshape(-1).view(np.uint8)
        inp = None if in_flat is None else in_flat.reshape(-1).view(np.uint8)
        # the root's region holds every piece: one reader's worth of bytes
        staged = oneshot.scatter(self.arena, root, me, out, inp, isz,
                                 _fast.direct_bytes(self.caps, 1))
        single = SingleCopy(exposing(in_flat), single_copy.fits(self.caps, isz),
                            single_copy.scatter(out, inp, root, isz, me))
        return self._submit(
            "scatter", fp,
            lambda c: self._plan("scatter", out_flat.dtype, root=root, input=in_flat,
                                 output=out_flat, counts=tuple(c)),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            root_layout=root, staged=staged, single=single,
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
            c = counts[0]
            lo = self._rank * c
            srcs = [p[lo:lo + c] for p in region.views(in_work.nbytes, in_work.dtype)]
            body = symmetric_path.reduce_scatter(self, srcs, out_work, sched_op, done)
            return self._in_place("reduce_scatter", region, body, async_op,
                                  dtype=out_buf.dtype_name, op=op.name, count=out_buf.count)
        fp = self._next("reduce_scatter", algorithm, dtype=out_buf.dtype_name, op=op.name,
                        count=out_buf.count, extra=counts_hash(counts),
                        seq=entered[0] if entered else None)
        if self._oneshot(in_work.nbytes, algorithm):
            fp = dataclasses.replace(fp, path=path_digest(None, True))
            what = self._what("reduce_scatter", fp.seq)
            return self._run(what, oneshot.reduce_scatter(self, fp, what, out_work, in_work,
                                                          counts, sched_op, done), async_op)
        single = SingleCopy(exposing(in_work), single_copy.fits(self.caps, in_work.dtype.itemsize),
                            single_copy.reduce_my_piece(in_work, sum(counts[:self._rank]),
                                                        out_work, sched_op, self._rank,
                                                        self._size))
        return self._submit(
            "reduce_scatter", fp,
            lambda c: self._plan("reduce_scatter", in_work.dtype, op=sched_op, input=in_work,
                                 output=out_work, counts=counts),
            done, algorithm=algorithm, async_op=async_op, per_rank_counts=True, single=single,
            entered=entered[1] if entered else None)

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
        n, isz = self._size, in_flat.dtype.itemsize
        mine = in_flat.reshape(-1).view(np.uint8)
        out = out_flat.reshape(-1).view(np.uint8)
        limit = _fast.all_to_all_direct_limit(self.caps, oneshot.split_head(n))
        layout, staged, offsets, at = oneshot.all_to_all(self, fp.seq, out, mine, send, recv,
                                                         isz, limit)
        single = SingleCopy(exposing(mine), single_copy.fits(self.caps, isz, n),
                            single_copy.read_pieces(out, mine, at, offsets, self._rank, n))
        return self._submit(
            "all_to_all", fp,
            lambda c: self._plan("all_to_all", in_flat.dtype, input=in_flat, output=out_flat,
                                 counts=send, recv_counts=recv),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            layout=layout, staged=staged, single=single, entered=entered[1] if entered else None)

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
