"""``ProcessGroup``: a set of ranks, their arena and FIFO, and one method per collective.

A ProcessGroup is the backend in torch's sense: it receives validated, flattened
buffers from the front door (_api.py). Ranks here are group ranks; the global
<-> group mapping is :attr:`global_ranks`. This module keeps the machinery every
call shares: sequence numbers and fingerprints, ``MESHCAST_ALGO``
(:meth:`ProcessGroup._effective`), the call protocol (:meth:`ProcessGroup._submit`:
publish, stage, expose, enter on the arena (the fingerprint exchange), then one
path; abort on failure) and running jobs in call order on its
:class:`~meshcast._fifo.CallFifo`. What differs per collective (the fingerprint's
fields, the path, the Plan, the finish: AVG, float16/bfloat16 working copies,
write-back) is in calls.py; which path runs is decided by algorithms/_select.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _wait, calls, config, ops, symmetric
from ._fifo import call_fifo
from ._fingerprint import SYMMETRIC_PATH, Fingerprint, path_digest, symmetric_extra
from .algorithms import _select as _fast
from .algorithms._plan import Plan
from .buffers import Buffer
from .errors import MismatchError
from .lanes import TinyCallLane
from .paths import Job, schedule, single_copy
from .paths import symmetric as symmetric_path
from .paths.oneshot import Layout, Staged
from .paths.single_copy import SingleCopy
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

    Every collective raises, on every rank alike (with ``async_op``: from
    ``Work.wait()``):

    * InvalidUsage: ``algorithm`` names no algorithm of the collective or cannot
      run this call (every rank sees the same reason, so none is left waiting);
    * MismatchError: the ranks called different collectives at this point of the
      group's sequence, or disagree on the fields of its fingerprint;
    * GroupAbortedError: another rank failed in this call or an earlier one;
    * CommTimeout: a peer did not arrive within the group's timeout.
    """

    def __init__(self, *, group_id: int, name: str, global_ranks: Sequence[int], rank: int,
                 transport: ShmTransport, arena: Arena, timeout: float,
                 liveness: _wait.Liveness, store: Any = None) -> None:
        super().__init__(group_id, name, global_ranks, rank)
        self.transport = transport
        self.arena = arena
        self.timeout = timeout
        self.liveness = liveness
        # every member's pid, by group rank (single-copy copies; -1: not on this host)
        self._pids = tuple(liveness.pids.get(g, -1) for g in self.global_ranks)
        arena.set_pids(self._pids)
        self.fifo = call_fifo(name)
        self._where = f" on {name} (rank {self.global_ranks[rank]})"  # ends each call's name
        self._seq = itertools.count(1)
        # Numbers p2p calls for messages ("recv #3 from rank 1"), as _seq does collectives
        self._p2p_seq = itertools.count(1)
        self.last_algorithm: str | None = None
        self.last_compiled = False  # its one-shot program ran compiled (for the trace)
        self.tracer: Any = None  # meshcast.trace.recorder.Tracer when MESHCAST_TRACE is set
        self.store = store  # where members meet (symmetric allocations use it)
        self.symmetric = symmetric.SymmetricHeap(rank, self._size)
        # Collectives MESHCAST_ALGO picks for: they skip the fast paths (see _effective).
        self.tuned = _fast.tuned_collectives(config.get("MESHCAST_ALGO"))
        # What the fast paths' table (algorithms/_select.py) decides by.
        self.caps = _fast.HostCaps(self._size, arena.small_bytes if self._size > 1 else 0,
                                   transport.cma_min_bytes > 0, _wait.spec().oversubscribed)
        # what each collective's call (calls.py) uses of the group, bound once
        self._calls = calls.Machinery(self, next=self._next, what=self._what, run=self._run,
                                      submit=self._submit, region=self._region,
                                      in_place=self._in_place)
        self.lane = TinyCallLane(self, self._calls.programs, self._calls.copies)  # tiny calls

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.group_name} rank {self._rank}/{self._size}>"

    # ------------------------------------------------------------- machinery

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _effective(self, kind: str, algorithm: str | None) -> str | None:
        """``algorithm``, or :data:`TUNED` when MESHCAST_ALGO picks for ``kind``: the fast
        paths run only for None, so TUNED sends the call to the schedules, whose selection
        reads MESHCAST_ALGO. Its path digest differs from None's, so ranks whose
        environments disagree get a MismatchError, not a hang."""
        if algorithm is None and kind in self.tuned:
            return TUNED
        return algorithm

    def _what(self, kind: str, seq: int) -> str:
        return f"{kind} #{seq}{self._where}"

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
        """The call protocol: publish the call's layout, stage (one-shot) and expose
        (single-copy) before entering, then take the one-shot, single-copy or schedule path.

        ``entered``: a tiny-call lane already did everything up to and including the
        entry (the same bytes, see lanes) and found every rank's counts, which are
        these; the rest runs here, at once, inside the lane's claim on the FIFO."""
        what = self._what(kind, fp.seq)

        def job() -> None:
            deadline, parity = self._deadline(), fp.seq & 1
            self.arena.settle()  # before the staging below writes into the arena
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
                # Every rank staged before entering and sees the same counts: all or none.
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
                single_copy.run(self, single, counts, what)
                finish(None)
                return
            plan = make_plan(counts)
            schedule.run(self, kind, fp, plan, algorithm, deadline, what)
            finish(plan)

        if entered is not None:
            job()
            return None
        return self._run(what, job, async_op)

    def _next(self, kind: str, algorithm: str | None, oneshot: bool = False,
              seq: int | None = None, **fields: Any) -> Fingerprint:
        """The fingerprint of the next call (of call ``seq`` when a lane already took it)."""
        if seq is None:
            seq = next(self._seq)
        return Fingerprint(seq, kind, path=path_digest(algorithm, oneshot), **fields)

    def _region(self, flat: np.ndarray, algorithm: str | None,
                min_bytes: int) -> symmetric.Region | None:
        """Where ``flat`` lies in a symmetric allocation, if the call may use it in place:
        whether ranks agree is checked by the fingerprint (the region is part of it);
        the size rule depends only on compared fields, so all ranks apply it alike."""
        if algorithm is not None or self._size == 1 or flat.nbytes < min_bytes:
            return None
        return self.symmetric.find(flat)

    def _in_place(self, kind: str, region: symmetric.Region, body: Callable[..., None],
                  async_op: bool, **fields: Any) -> Work | None:
        """``body(fp, what)`` on the symmetric ``region`` (paths/symmetric.py)."""
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

        Raises the errors of every collective (see the class).
        """
        return calls.barrier(self._calls, self._effective("barrier", algorithm), async_op)

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

        Raises the errors of every collective (see the class); the fingerprint
        compares dtype, count, root.
        """
        return calls.broadcast(self._calls, buf, root, self._effective("broadcast", algorithm),
                               async_op)

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

        Raises the errors of every collective (see the class); the fingerprint
        compares dtype, count, op.
        """
        return calls.all_reduce(self._calls, buf, op, self._effective("all_reduce", algorithm),
                                async_op)

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

        Raises the errors of every collective (see the class); the fingerprint
        compares dtype, count, op, root.
        """
        return calls.reduce(self._calls, buf, op, root, self._effective("reduce", algorithm),
                            async_op)

    def all_gather(self, out_flat: np.ndarray, in_flat: np.ndarray, counts: Sequence[int],
                   dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
                   async_op: bool = False, entered: calls.Entered | None = None) -> Work:
        """Gather every rank's ``in_flat`` (``counts[r]`` elements from rank r) into
        ``out_flat``, in rank order. ``entered``: ``(seq, counts)`` of a call the
        tiny-call lane began and hands over after the entry (past the one-shot sizes)."""
        return calls.all_gather(self._calls, out_flat, in_flat, counts, dtype_name, finish,
                                self._effective("all_gather", algorithm), async_op, entered)

    def gather(self, out_pieces: Sequence[np.ndarray] | None, in_flat: np.ndarray, root: int,
               dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
               async_op: bool = False, expected_counts: Sequence[int] | None = None,
               entered: calls.Entered | None = None) -> Work:
        """Gather every rank's ``in_flat`` into ``out_pieces`` (one flat array per rank,
        given on the root only; the one-shot and single-copy paths fill them directly).
        ``entered``: ``(seq, counts)`` of a call the tiny-call lane hands over."""
        return calls.gather(self._calls, out_pieces, in_flat, root, dtype_name, finish,
                            self._effective("gather", algorithm), async_op, expected_counts,
                            entered)

    def scatter(self, out_flat: np.ndarray, in_flat: np.ndarray | None, root: int,
                dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
                async_op: bool = False, expected_counts: Sequence[int] | None = None,
                entered: calls.Entered | None = None) -> Work:
        """Scatter the root's ``in_flat`` (every rank's piece, back to back) into each
        rank's ``out_flat``. ``entered``: see :meth:`gather`."""
        return calls.scatter(self._calls, out_flat, in_flat, root, dtype_name, finish,
                             self._effective("scatter", algorithm), async_op,
                             expected_counts, entered)

    def reduce_scatter(self, out_buf: Buffer, in_flat: np.ndarray, counts: Sequence[int],
                       op: ops.ReduceOp, finish: Callable[[], None], *,
                       algorithm: str | None = None, async_op: bool = False,
                       entered: calls.Entered | None = None) -> Work:
        """Reduce every rank's ``in_flat`` and leave piece r (``counts[r]`` elements) on
        rank r. ``entered``: ``(seq, counts)`` of a call the tiny-call lane began and
        hands over after the entry (past the one-shot sizes)."""
        return calls.reduce_scatter(self._calls, out_buf, in_flat, counts, op, finish,
                                    self._effective("reduce_scatter", algorithm),
                                    async_op, entered)

    def all_to_all(self, out_flat: np.ndarray, in_flat: np.ndarray, send_counts: Sequence[int],
                   recv_counts: Sequence[int], dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False,
                   entered: calls.Entered | None = None) -> Work:
        """all_to_all of ``in_flat`` split by ``send_counts`` into ``out_flat`` split by
        ``recv_counts`` (element counts per group rank). ``entered``: ``(seq, counts)``
        of a call the tiny-call lane began and hands over after the entry."""
        return calls.all_to_all(self._calls, out_flat, in_flat, send_counts, recv_counts,
                                dtype_name, finish, self._effective("all_to_all", algorithm),
                                async_op, entered)

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
