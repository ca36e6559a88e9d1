"""``ProcessGroup``: a set of ranks, their arena and FIFO, and one method per collective.

A ProcessGroup is the backend in torch's sense. It receives already
validated, flattened buffers from the front door (_api.py), and for each
call it: assigns the next sequence number, builds the fingerprint and the
Plan, picks an algorithm (algorithms/_select.py), and submits a job to its
:class:`~meshcast.engine.Engine`. The job enters the collective on the arena
(fingerprint exchange), runs the schedule with the executor, then finishes
(AVG division, float16/bfloat16 down-conversion, write-back of staged
buffers). Ranks here are group ranks; the global <-> group mapping is
:attr:`global_ranks`.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _sync, config, ops, symmetric
from ._fingerprint import SYMMETRIC_PATH, Fingerprint, counts_hash, path_digest, symmetric_extra
from .algorithms import _execute
from .algorithms._plan import Plan
from .buffers import Buffer, store_back, working_copy
from .engine import Engine
from .errors import GroupAbortedError, InvalidUsage, MismatchError, usage
from .small_calls import SmallCalls
from .transport.arena import Arena
from .transport.shm import KIND_COLL, KIND_P2P, Handle, ShmTransport
from .work import Work

_TAG_ROUNDS = 20


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


class P2PWork(Work):
    """Work of a point-to-point operation: completes when the transport handle does."""

    def __init__(self, describe: str, handle: Handle, deadline: float,
                 finish: Callable[[], None] | None = None) -> None:
        super().__init__(describe)
        self._handle = handle
        self._deadline = deadline
        self._finish = finish

    def _settle(self) -> None:
        if self._finished or not self._handle.test():
            return
        err = self._handle.error
        if err is None and self._finish is not None:
            self._finish()
        self.source_rank = self._handle.source
        self._complete(error=err)

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        deadline = self._deadline if timeout is None else min(self._deadline,
                                                              time.monotonic() + timeout)
        if not self._finished:
            try:
                self._handle.wait(deadline)
            except BaseException as exc:
                if self._handle.test() or time.monotonic() >= self._deadline:
                    self._complete(error=exc)
                raise
            self._settle()
        return super().wait(0)

    def is_completed(self) -> bool:
        self._settle()
        return self._finished

    def is_success(self) -> bool:
        self._settle()
        return super().is_success()

    def exception(self) -> BaseException | None:
        self._settle()
        return super().exception()


class ProcessGroup:
    """A group of ranks that run collectives together.

    Use :func:`meshcast.new_group` to make one; the default group is made by
    :func:`meshcast.init_process_group`. ``rank()``/``size()`` are group-local.
    """

    def __init__(self, *, group_id: int, name: str, global_ranks: Sequence[int], rank: int,
                 transport: ShmTransport, arena: Arena, timeout: float,
                 liveness: _sync.Liveness, store: Any = None) -> None:
        self.group_id = group_id
        self.group_name = name
        self.global_ranks = list(global_ranks)
        self._rank = rank
        self._size = len(self.global_ranks)
        self._group_rank_of = {g: i for i, g in enumerate(self.global_ranks)}
        self.transport = transport
        self.arena = arena
        self.timeout = timeout
        self.liveness = liveness
        self.engine = Engine(name)
        self._seq = itertools.count(1)
        self.last_algorithm: str | None = None
        self.store = store  # where members meet (symmetric allocations use it)
        self.symmetric = symmetric.SymmetricHeap(rank, self._size)
        self.small = SmallCalls(self)  # the cached lane for tiny synchronous calls

    # ------------------------------------------------------------------- ranks

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

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.group_name} rank {self._rank}/{self._size}>"

    # ------------------------------------------------------------- machinery

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _what(self, kind: str, seq: int) -> str:
        return f"{kind} #{seq} on {self.group_name} (rank {self.global_ranks[self._rank]})"

    def _run(self, what: str, job: Callable[[], None], async_op: bool) -> Work | None:
        """Run ``job`` in call order: return a Work (async) or wait for it and return None."""
        if async_op:
            return self.engine.submit(job, Work(what), inline=False)
        self.engine.call(job, what)
        return None

    def _submit(self, kind: str, fp: Fingerprint, make_plan: Callable[[list[int]], Plan],
                finish: Callable[[Plan], None], *, algorithm: str | None, async_op: bool,
                per_rank_counts: bool = False, root_layout: int = -1) -> Work | None:
        what = self._what(kind, fp.seq)

        def job() -> None:
            deadline = self._deadline()
            # A mismatch found here is found by every rank itself: no abort needed.
            counts = self.arena.enter(fp, what, deadline, per_rank_counts=per_rank_counts,
                                      root_layout=root_layout)
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
                _execute.execute(entry.fn(plan), ctx)
            except (GroupAbortedError, MismatchError) as exc:
                # Peers that are still waiting must fail the same way, not time out.
                self.arena.abort(str(exc), mismatch=isinstance(exc, MismatchError))
                raise
            except BaseException as exc:
                self.arena.abort(f"rank {self.global_ranks[self._rank]} failed in {what}: {exc}")
                raise
            finish(plan)

        return self._run(what, job, async_op)

    # One-shot while every rank's work (reading all P contributions) stays under
    # this many bytes. Measured with `meshcast bench --iters 100` (best of both,
    # 2 ranks): one-shot 13-31 us vs arena 53-89 us from 16 KiB to 256 KiB, 49 vs
    # 91 us at 512 KiB, 103 vs 132 us at 1 MiB; at 4 ranks on 2 cores 305 vs 634 us
    # at 512 KiB. The arena schedule's three synchronisations cost ~50 us of Python.
    ONESHOT_WORK_BYTES = 2 << 20

    def _oneshot(self, nbytes: int, algorithm: str | None) -> bool:
        """Whether a call of ``nbytes`` takes the one-shot path (same verdict on every rank:
        it depends only on the group and on fields the fingerprint compares)."""
        return (algorithm is None and 1 < self._size and nbytes <= self.arena.small_bytes
                and nbytes * self._size <= self.ONESHOT_WORK_BYTES)

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
              **fields: Any) -> Fingerprint:
        return Fingerprint(next(self._seq), kind, path=path_digest(algorithm, oneshot), **fields)

    # Where the one-shot path runs (one synchronisation, a copy in), it beats the
    # symmetric all_reduce and broadcast (two synchronisations, no copies): in
    # benchmarks/symmetric, 2 ranks, 42.8 vs 27.8 us at 128 KiB and 74.6 vs 65.0 us at
    # 512 KiB; from 2 MiB on the symmetric path wins (172 vs 310 us). So those two go
    # symmetric only where the one-shot path ends. all_gather / reduce_scatter, whose
    # symmetric forms save a copy of every piece, do from this size on:
    SYMMETRIC_MIN_BYTES = 64 << 10

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
        region = None
        if not self._oneshot(buf.nbytes, algorithm):
            region = self._region(buf.flat, algorithm, 0)
        if region is not None:
            # Every rank copies straight from the root's part; only the root must wait
            # for the readers before its caller may change the data.
            fp = self._symmetric_fp("broadcast", region, dtype=buf.dtype_name, root=root,
                                    count=buf.count)
            parts = region.views(buf.flat.nbytes, np.dtype(np.uint8))

            def copy() -> None:
                self.last_algorithm = "broadcast/symmetric"
                if self._rank != root:
                    parts[self._rank][:] = parts[root]

            return self._run_symmetric(self._what("broadcast", fp.seq), fp, copy,
                                       self._rank == root, async_op)
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
        return self._submit(
            "broadcast", fp,
            lambda c: self._plan("broadcast", buf.flat.dtype, root=root, output=buf.flat),
            lambda p: buf.finish(), algorithm=algorithm, async_op=async_op)

    def all_reduce(self, buf: Buffer, op: ops.ReduceOp, *, algorithm: str | None = None,
                   async_op: bool = False) -> Work | None:
        work_arr, upcast = self._working(buf.flat, buf.dtype_name, op)
        sched_op = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

        def finish(plan: Plan | None) -> None:
            if op is ops.ReduceOp.AVG:
                ops.finish_average(work_arr, self._size)
            if upcast:
                store_back(buf.flat, work_arr, buf.dtype_name)
            buf.finish()

        region = None
        if not upcast and not self._oneshot(work_arr.nbytes, algorithm):
            region = self._region(work_arr, algorithm, 0)
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
        return self._submit(
            "all_reduce", fp,
            lambda c: self._plan("all_reduce", work_arr.dtype, op=sched_op, input=work_arr,
                                 output=work_arr),
            finish, algorithm=algorithm, async_op=async_op)

    def reduce(self, buf: Buffer, op: ops.ReduceOp, root: int, *, algorithm: str | None = None,
               async_op: bool = False) -> Work:
        work_arr, _ = self._working(buf.flat, buf.dtype_name, op)
        out = np.empty_like(work_arr) if self._rank == root else None
        sched_op = ops.ReduceOp.SUM if op == ops.ReduceOp.AVG else op

        def finish(plan: Plan | None) -> None:
            if out is None:
                return
            if op == ops.ReduceOp.AVG:
                ops.finish_average(out, self._size)
            store_back(buf.flat, out, buf.dtype_name)
            buf.finish()

        if self._oneshot(work_arr.nbytes, algorithm):
            fp = self._next("reduce", algorithm, True, dtype=buf.dtype_name, op=op.name,
                            root=root, count=buf.count)
            what = self._what("reduce", fp.seq)
            nbytes, dtype = work_arr.nbytes, work_arr.dtype

            def job() -> None:
                self.last_algorithm = "reduce/oneshot"
                regions = self.arena.oneshot(fp, work_arr.view(np.uint8), what, self._deadline())
                if out is not None:
                    ops.reduce_many(sched_op, out, [r[:nbytes].view(dtype) for r in regions])
                finish(None)

            return self._run(what, job, async_op)
        fp = self._next("reduce", algorithm, dtype=buf.dtype_name, op=op.name, root=root,
                        count=buf.count)
        return self._submit(
            "reduce", fp,
            lambda c: self._plan("reduce", work_arr.dtype, op=sched_op, root=root,
                                 input=work_arr, output=out),
            finish, algorithm=algorithm, async_op=async_op)

    def all_gather(self, out_flat: np.ndarray, in_flat: np.ndarray, counts: Sequence[int],
                   dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False) -> Work:
        counts = tuple(int(c) for c in counts)
        itemsize = in_flat.dtype.itemsize
        region = None
        if len(set(counts)) == 1:
            region = self._region(out_flat, algorithm, self.SYMMETRIC_MIN_BYTES)
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
        if self._oneshot(max(counts, default=0) * itemsize, algorithm):
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
                        extra=counts_hash(counts))
        return self._submit(
            "all_gather", fp,
            lambda c: self._plan("all_gather", in_flat.dtype, input=in_flat, output=out_flat,
                                 counts=counts),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True)

    def gather(self, out_flat: np.ndarray | None, in_flat: np.ndarray, root: int,
               dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
               async_op: bool = False, expected_counts: Sequence[int] | None = None) -> Work:
        fp = self._next("gather", algorithm, dtype=dtype_name, root=root, count=in_flat.size,
                        extra=counts_hash(expected_counts))
        return self._submit(
            "gather", fp,
            lambda c: self._plan("gather", in_flat.dtype, root=root, input=in_flat,
                                 output=out_flat, counts=tuple(c)),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            root_layout=root)

    def scatter(self, out_flat: np.ndarray, in_flat: np.ndarray | None, root: int,
                dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
                async_op: bool = False, expected_counts: Sequence[int] | None = None) -> Work:
        fp = self._next("scatter", algorithm, dtype=dtype_name, root=root, count=out_flat.size,
                        extra=counts_hash(expected_counts))
        return self._submit(
            "scatter", fp,
            lambda c: self._plan("scatter", out_flat.dtype, root=root, input=in_flat,
                                 output=out_flat, counts=tuple(c)),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True,
            root_layout=root)

    def reduce_scatter(self, out_buf: Buffer, in_flat: np.ndarray, counts: Sequence[int],
                       op: ops.ReduceOp, finish: Callable[[], None], *,
                       algorithm: str | None = None, async_op: bool = False) -> Work:
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
            region = self._region(in_work, algorithm, self.SYMMETRIC_MIN_BYTES)
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
                        count=out_buf.count, extra=counts_hash(counts))

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
        return self._submit(
            "reduce_scatter", fp,
            lambda c: self._plan("reduce_scatter", in_work.dtype, op=sched_op, input=in_work,
                                 output=out_work, counts=counts),
            done, algorithm=algorithm, async_op=async_op, per_rank_counts=True)

    def all_to_all(self, out_flat: np.ndarray, in_flat: np.ndarray, send_counts: Sequence[int],
                   recv_counts: Sequence[int], dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False) -> Work:
        fp = self._next("all_to_all", algorithm, dtype=dtype_name, count=in_flat.size)
        send = tuple(int(c) for c in send_counts)
        recv = tuple(int(c) for c in recv_counts)
        return self._submit(
            "all_to_all", fp,
            lambda c: self._plan("all_to_all", in_flat.dtype, input=in_flat, output=out_flat,
                                 counts=send, recv_counts=recv),
            lambda p: finish(), algorithm=algorithm, async_op=async_op, per_rank_counts=True)

    # ---------------------------------------------------------- point to point

    def isend(self, flat: np.ndarray, dst: int, tag: int) -> Work:
        """Post a send to group rank ``dst``; returns at once."""
        what = f"send to rank {self.global_ranks[dst]} (tag {tag}) on {self.group_name}"
        deadline = self._deadline()
        handle = self.transport.isend(self.global_ranks[dst], self.group_id, KIND_P2P, tag,
                                      flat, what)
        return P2PWork(what, handle, deadline)

    def irecv(self, buf: Buffer, src: int | None, tag: int) -> Work:
        """Post a receive from group rank ``src`` (None: any rank); returns at once."""
        peer = None if src is None else self.global_ranks[src]
        who = "any rank" if peer is None else f"rank {peer}"
        what = f"recv from {who} (tag {tag}) on {self.group_name}"
        deadline = self._deadline()
        handle = self.transport.irecv(peer, self.group_id, KIND_P2P, tag, buf.flat, what)
        return P2PWork(what, handle, deadline, finish=buf.finish)

    # ---------------------------------------------------------------- teardown

    def shutdown(self) -> None:
        """Refuse new work and release the symmetric allocations' mappings."""
        self.engine.close()
        self.symmetric.close()


def check_root(root: int, group: ProcessGroup, *, name: str, caller: str, rank: int) -> int:
    """Translate a global root rank to a group rank, or raise InvalidUsage."""
    if not isinstance(root, (int, np.integer)) or isinstance(root, bool):
        raise usage(caller, f"'{name}' must be an int rank, got {type(root).__name__}", rank)
    try:
        return group.group_rank(int(root))
    except ValueError:
        raise usage(caller, f"'{name}'={root} is not a rank of {group.group_name} "
                            f"(ranks {group.global_ranks})", rank) from None
