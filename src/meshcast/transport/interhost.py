"""The inter-host engine contract, and which engine carries a job's bytes between hosts.

Theory of operation
-------------------
meshcast moves bytes inside a host itself (shared memory) and leaves the
wire between hosts to an existing, well-kept engine: MPI through mpi4py
(:mod:`.mpi`), or Gloo through torch.distributed (:mod:`.gloo`). Both are
seen through one small contract, :class:`HostComm`: a communicator over a
fixed list of global ranks that moves *bytes* (collective exchanges with
per-member counts, a broadcast, tagged point-to-point). Reductions are not
the engine's business: the hierarchical algorithms combine what arrives with
meshcast's own kernels, so every dtype and op works on every engine, and the
result is bitwise the same whichever engine carried it.

Every exchange is non-blocking underneath and waited for through
:func:`meshcast._wait.wait_until` (spin, yield, then short sleeps): a call
has a deadline and names what it waits for, and a waiting rank does not
hold a core that an oversubscribed host needs.

Which engine (:func:`choose`): ``MESHCAST_INTERNODE`` or the
``internode=`` keyword of ``init_process_group`` (``mpi`` | ``gloo``), else
MPI when the job was started by an MPI launcher and mpi4py imports, else
Gloo when torch imports; otherwise :class:`~meshcast.errors.TransportError`
says what to install.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _wait
from ..errors import CommTimeout, InvalidUsage, PeerGoneError, TransportError
from ..ops import ReduceOp

ENGINES = ("mpi", "gloo")

#: Tag of the point-to-point messages collectives exchange on a group's communicator.
#: Calls of one group run one at a time and both engines keep messages between a pair
#: in order, so one tag serves every call.
COLL_TAG = 32000
#: Tag of the agreement's exchange among the hosts' leaders (HostComm.allgather_sized).
AGREE_TAG = COLL_TAG + 1
#: Tags of the agreement's rows sent straight between members, by the parity of the
#: call's sequence number: a member at most one call ahead sends the next call's rows
#: under the other tag, so a member still in an exchange that carries the agreement
#: (algorithm 'fused') can tell that a member started *this* call's rows instead.
AGREE_TAGS = (AGREE_TAG, AGREE_TAG + 1)


class Request:
    """A pending non-blocking operation of an engine."""

    def test(self) -> bool:  # pragma: no cover - contract
        raise NotImplementedError

    def source(self) -> int | None:
        """Member index of the sender of a completed receive from any member."""
        return None

    #: Engines whose requests only progress inside a blocking wait (Gloo) set this to
    #: ``block(seconds) -> bool``: wait at most ``seconds``, True once complete (then
    #: as :meth:`test` would), False if not yet; raises the engine's error on failure.
    #: It is called again and again, a liveness interval at a time.
    block: Callable[[float], bool] | None = None


class Exchange(Request):
    """A set of sends and receives posted together (:meth:`HostComm._prepare`).

    After completion, :attr:`refused` says why the exchange did not finish as posted:
    ``"truncated"`` (a message was longer than its receive buffer: its sender's call
    differs), ``"diverted"`` (a member started the agreement's exchange of rows instead:
    its call differs), or None.
    """

    refused: str | None = None


class HostComm:
    """A communicator over ``ranks`` (global ranks; member i is ``ranks[i]``).

    Subclasses implement the ``_i*`` primitives on uint8 arrays; the public
    methods take typed flat arrays with counts in elements, skip exchanges of
    zero bytes (every member knows the counts, so all skip alike), and wait
    with a deadline.
    """

    engine = "?"
    #: The job's :class:`~meshcast._hostwatch.HostWatch` when the job spans hosts (the
    #: world sets it on every communicator it makes): waits check the hosts' heartbeats.
    watch: Any = None
    #: A wait on this communicator raised: its operation may still be in flight (on a
    #: lost host, until the engine's own timeout), which engines heed when closing.
    failed = False
    #: How long a wait polls (yielding the core between polls) before it sleeps between
    #: polls; None: the process's setting (see meshcast._wait.wait_until).
    poll_s: float | None = None

    def __init__(self, ranks: Sequence[int], rank: int, name: str) -> None:
        self.ranks = tuple(ranks)
        self.rank = rank
        self.size = len(self.ranks)
        self.name = name

    # -- engine primitives (bytes) ----------------------------------------------
    def _iallgatherv(self, out: np.ndarray, mine: np.ndarray, counts: list[int]) -> Request:
        raise NotImplementedError

    def _iallgatherv_at(self, out: np.ndarray, mine: np.ndarray, counts: list[int],
                        displs: list[int]) -> Request:
        """Member i's bytes land at ``out[displs[i]:displs[i] + counts[i]]``. Engines without
        displacements (Gloo) gather back to back into scratch and place on completion."""
        if displs == offsets(counts):
            return self._iallgatherv(out[:sum(counts)], mine, counts)
        packed = np.empty(sum(counts), np.uint8)
        return _Placed(self._iallgatherv(packed, mine, counts), packed, out, counts, displs)

    def _ialltoallv(self, out: np.ndarray, recv: list[int], inp: np.ndarray,
                    send: list[int], uniform: bool = False) -> Request:
        raise NotImplementedError

    def _iallgather(self, out: np.ndarray, mine: np.ndarray) -> Request:
        return self._iallgatherv(out, mine, [mine.nbytes] * self.size)

    def _ibcast(self, buf: np.ndarray, root: int) -> Request:
        raise NotImplementedError

    def _isend(self, buf: np.ndarray, peer: int, tag: int) -> Request:
        raise NotImplementedError

    def _irecv(self, buf: np.ndarray, peer: int | None, tag: int) -> Request:
        raise NotImplementedError

    def _allreduce(self, w: np.ndarray, op: ReduceOp, deadline: float, what: str) -> bool:
        return False  # the engine has no native reduction for this (dtype, op)

    def _reduce(self, w: np.ndarray, op: ReduceOp, root: int, deadline: float,
                what: str) -> bool:
        return False  # as _allreduce

    def _igatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: list[int],
                  root: int) -> Request:
        """Member i's ``counts[i]`` bytes land back to back in ``out`` on ``root`` (None on
        the others)."""
        raise NotImplementedError

    def _iscatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: list[int],
                   root: int) -> Request:
        """Member i's ``out`` gets its ``counts[i]`` bytes of ``root``'s ``ins`` (pieces back
        to back; None on the others)."""
        raise NotImplementedError

    def _run_fused(self, steps: Sequence[Any], buffers: Sequence[np.ndarray],
                   geometry: Sequence[int], code: int, probe: int | None,
                   times: np.ndarray | None = None) -> tuple[int, Exchange | None] | None:
        """See :meth:`Bound.run_fused`; None: this engine has no compiled steps."""
        return None

    def _prepare(self, recvs: list[tuple[int, np.ndarray]],
                 sends: list[tuple[int, np.ndarray]]) -> Callable[[int | None], Exchange]:
        """:meth:`Bound.prepare`'s exchange on bytes: a function that posts it (taking
        ``probe``: while it waits, a member's message under that tag, when not None,
        ends it, refused as ``"diverted"``) and returns its :class:`Exchange`."""
        raise TransportError(f"the {self.engine} engine does not run exchanges that carry "
                             f"the call's agreement (algorithm 'fused')")

    def user_tag(self, tag: int) -> int:
        """The engine's tag for a user's point-to-point ``tag`` (never :data:`COLL_TAG`)."""
        return tag

    def close(self) -> None:
        pass

    # -- waiting ----------------------------------------------------------------
    def wait(self, req: Request, deadline: float, what: str,
             peers: Callable[[], Sequence[int]] | None = None) -> None:
        """Wait for ``req``; raise instead of hanging.

        With a :attr:`watch` (the job spans hosts), every liveness interval the
        wait also checks the hosts it waits on: a lost host, or a failure
        another rank announced, ends it within ``MESHCAST_LIVENESS_S``-scale
        time, where the engine alone would wait out the deadline (a host whose
        link is down resets no connection).

        Args:
            req: the engine's request.
            deadline: ``time.monotonic()`` by which it must complete.
            what: the call, for messages.
            peers: the global ranks not heard from yet (default: every member).

        Raises:
            CommTimeout: ``deadline`` passed.
            PeerGoneError: a member's host is lost, or the job's failure notice is out
                (names the host and its ranks).
            TransportError: the engine failed; it names the lost host when the watch
                finds one soon after (a killed host's resets arrive before its heartbeat
                is missed).
        """
        describe = lambda: f"{what} [{self.engine} {self.name}]"  # noqa: E731
        pending = peers or (lambda: [g for i, g in enumerate(self.ranks) if i != self.rank])
        if self.watch is not None:
            # The watch reads the other hosts' heartbeats while waits go on, so that it
            # already knows when each last moved if this wait turns out to be the long one.
            self.watch.asked = time.monotonic()
        try:
            if req.block is not None:
                self._block(req, deadline, describe, pending)
            else:
                _wait.wait_until(req.test, deadline=deadline, describe=describe,
                                 pending=pending, liveness=self.watch, yield_s=self.poll_s)
        except (CommTimeout, TransportError):
            self.failed = True
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's own error, made ours
            raise self._failed(what, exc) from exc

    def _block(self, req: Request, deadline: float, describe: Callable[[], str],
               pending: Callable[[], Sequence[int]]) -> None:
        """Wait on an engine that progresses only inside its own blocking wait (Gloo), in
        slices of one liveness interval with the hosts' checks between them."""
        assert req.block is not None
        step = _wait.spec().liveness_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                waiting_on = sorted(pending())
                raise CommTimeout(f"{describe()}: timed out; not heard from rank(s) "
                                  f"{waiting_on}", waiting_on=waiting_on)
            if req.block(min(left, step)):
                return
            if self.watch is not None:
                self.watch.check(pending(), describe())

    def _failed(self, what: str, exc: BaseException) -> TransportError:
        """A wait or run on this communicator raised ``exc``: mark it failed (its operation
        may still be in flight) and return the error :meth:`_explained`, to raise."""
        self.failed = True
        return self._explained(what, exc)

    def _explained(self, what: str, exc: BaseException) -> TransportError:
        """The engine's error ``exc``, made ours. A lost host resets its connections
        before its heartbeat is missed, so the watch gets ``lost_after`` seconds to say
        which host is gone; without an answer, the failure is announced to the other
        hosts (they may not see it themselves)."""
        watch = self.watch
        if watch is None:
            return self.failure(what, exc)
        found = watch.explain(self.ranks, watch.lost_after + 3 * watch.interval)
        if found is not None:
            text, peer = found
            return PeerGoneError(f"{what} [{self.engine} {self.name}]: {text} (the "
                                 f"{self.engine} engine said: {exc})", peer=peer)
        error = self.failure(what, exc)
        watch.publish(f"rank {self.ranks[self.rank]} on host {watch.names[watch.me]} failed: "
                      f"{error}", None)
        return error

    def failure(self, what: str, exc: BaseException) -> TransportError:
        return TransportError(f"{what}: the {self.engine} engine between hosts failed on "
                              f"{self.name} (ranks {list(self.ranks)}): {exc}")

    def start(self, make: Callable[[], Request], what: str) -> Request:
        """Post an operation (``make()``); the engine's errors become ours."""
        try:
            return make()
        except (TransportError, InvalidUsage):
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.failure(what, exc) from exc

    def run(self, make: Callable[[], Request], deadline: float, what: str) -> None:
        self.wait(self.start(make, what), deadline, what)

    #: How many times :meth:`wait_soon` tests a request, yielding the core between tests,
    #: before the general wait (engines whose messages progress inside tests set it).
    QUICK_POLLS = 0

    #: hierarchical.Across.pipeline_chunk for this engine (0: large data in one piece)
    PIPELINE_CHUNK_BYTES = 0

    def wait_soon(self, req: Request, deadline: float, what: str) -> None:
        """:meth:`wait` for a request that usually completes within a few yields: the
        general wait's bookkeeping (heartbeats, deadline) costs a core that ranks share."""
        try:
            for _ in range(self.QUICK_POLLS):
                if req.test():
                    return
                os.sched_yield()
        except Exception as exc:  # noqa: BLE001 - as the general wait: the lost host named
            raise self._failed(what, exc) from exc
        self.wait(req, deadline, what)

    def allgather_sized(self, out: np.ndarray, n: int, cap: int, deadline: float,
                        what: str) -> None:
        """Member i's first ``n_i`` bytes of ``out[i * cap:]`` to every member's ``out``, where
        each member's ``n_i <= cap`` may differ and nobody knows the others'.

        The caller has written its own ``n`` bytes at ``out[rank * cap:]``; what follows
        each member's bytes in its row is unspecified, so they must say their own length
        (the agreement's rows do). Engines that receive a message of unknown size (MPI)
        move only the ``n_i`` bytes; this default moves ``cap`` bytes per member.
        """
        mine = np.empty(cap, np.uint8)  # a send buffer apart from out: MPI refuses overlap
        mine[:n] = out[self.rank * cap:self.rank * cap + n]
        self.run(lambda: self._iallgather(out[:self.size * cap], mine), deadline, what)

    def bind(self, deadline: float, what: str) -> Bound:
        """This communicator for one call (see algorithms.hierarchical.Across)."""
        return Bound(self, deadline, what)


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


_ORDER = (ReduceOp.MIN, ReduceOp.MAX)


def _engine_folds(w: np.ndarray, op: ReduceOp) -> bool:
    """Whether a reduction may be left to the engine's own op, as far as meshcast's
    results go: not float MIN/MAX. MPICH's and Gloo's each drop a NaN met in one order
    of the operands (MPICH's MAX of NaN and 1 is 1, Gloo's of 1 and NaN is 1, measured
    against MPICH 5.0.2 and torch 2.13's Gloo), where NumPy's ``maximum`` (and so
    meshcast on one host) gives NaN; the fold in rank order then runs in meshcast."""
    return not (op in _ORDER and w.dtype.kind == "f")


def offsets(counts: Sequence[int]) -> list[int]:
    """Offsets of pieces of ``counts`` laid back to back."""
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def place(out: np.ndarray, packed: np.ndarray, counts: Sequence[int],
          displs: Sequence[int]) -> None:
    """Copy the back-to-back pieces of ``packed`` (``counts`` long) to ``out[displs[i]:]``."""
    at = 0
    for n, d in zip(counts, displs):
        out[d:d + n] = packed[at:at + n]
        at += n


class _Placed(Request):
    """An all-gather into scratch whose pieces are copied to their places once it is done."""

    def __init__(self, req: Request, packed: np.ndarray, out: np.ndarray,
                 counts: Sequence[int], displs: Sequence[int]) -> None:
        self.req, self.packed, self.out = req, packed, out
        self.counts, self.displs = counts, displs
        if req.block is not None:
            self.block = lambda seconds: req.block(seconds) and self._place()

    def _place(self) -> bool:
        place(self.out, self.packed, self.counts, self.displs)
        return True

    def test(self) -> bool:
        return self.req.test() and self._place()


class Posted:
    """An exchange posted on a :class:`Bound` communicator; :meth:`wait` finishes it."""

    __slots__ = ("bound", "req")

    def __init__(self, bound: Bound, req: Request | None) -> None:
        self.bound, self.req = bound, req

    def wait(self) -> None:
        if self.req is not None:
            b = self.bound
            b.comm.wait(self.req, b.deadline, b.what)
            self.req = None


class Bound:
    """A :class:`HostComm` with one call's deadline and name: typed arrays, element counts."""

    __slots__ = ("comm", "deadline", "what", "size", "rank", "probe", "pipeline_chunk")

    def __init__(self, comm: HostComm, deadline: float, what: str) -> None:
        self.comm, self.deadline, self.what = comm, deadline, what
        self.size, self.rank = comm.size, comm.rank
        self.pipeline_chunk = comm.PIPELINE_CHUNK_BYTES
        #: The tag of this call's agreement rows (``AGREE_TAGS``), set by a call whose
        #: exchanges carry the agreement: see :meth:`exchange`.
        self.probe: int | None = None

    def allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        self.start_allgatherv(out, mine, counts, offsets(counts)).wait()

    def start_allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int],
                         displs: Sequence[int]) -> Posted:
        """Post an all-gather whose member i's piece lands at ``out[displs[i]:]`` (counts
        and displacements in elements); the returned :class:`Posted` waits for it."""
        if not sum(counts):
            return Posted(self, None)
        if np.may_share_memory(out, mine):
            mine = mine.copy()  # an in-place all_gather: engines want two distinct buffers
        isz = out.itemsize
        c = self.comm
        return Posted(self, c.start(lambda: c._iallgatherv_at(
            _bytes(out), _bytes(mine), [n * isz for n in counts], [d * isz for d in displs]),
            self.what))

    def alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                  send_counts: Sequence[int], uniform: bool = False) -> None:
        self.start_alltoallv(out, recv_counts, inp, send_counts, uniform).wait()

    def start_alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                        send_counts: Sequence[int], uniform: bool = False) -> Posted:
        """Post :meth:`alltoallv`; the returned :class:`Posted` waits for it.

        ``uniform``: every member's counts are one and the same even split (the caller
        knows it from data all members agreed on), so the engine may run its plain
        all-to-all; every member must pass the same value.
        """
        isz = out.itemsize
        c = self.comm
        recv = [n * isz for n in recv_counts]
        send = [n * isz for n in send_counts]
        return Posted(self, c.start(
            lambda: c._ialltoallv(_bytes(out), recv, _bytes(inp), send, uniform), self.what))

    def bcast(self, w: np.ndarray, root: int) -> None:
        if not w.size:
            return
        c = self.comm
        c.run(lambda: c._ibcast(_bytes(w), root), self.deadline, self.what)

    def start_bcast(self, w: np.ndarray, root: int) -> Posted:
        """Post :meth:`bcast`; the returned :class:`Posted` waits for it."""
        if not w.size:
            return Posted(self, None)
        c = self.comm
        return Posted(self, c.start(lambda: c._ibcast(_bytes(w), root), self.what))

    def send(self, w: np.ndarray, peer: int) -> None:
        c = self.comm
        c.run(lambda: c._isend(_bytes(np.ascontiguousarray(w)), peer, COLL_TAG),
              self.deadline, self.what)

    def recv(self, w: np.ndarray, peer: int) -> None:
        c = self.comm
        c.run(lambda: c._irecv(_bytes(w), peer, COLL_TAG), self.deadline, self.what)

    def allreduce(self, w: np.ndarray, op: ReduceOp) -> bool:
        """The engine's own all-reduce of every member's ``w`` into ``w``; False, with
        nothing sent, where the engine has no such op for the dtype or would not give
        NumPy's result (:func:`_engine_folds`)."""
        if not w.size:
            return True
        return _engine_folds(w, op) and self.comm._allreduce(w, op, self.deadline, self.what)

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> bool:
        """The engine's own reduce: ``root``'s ``w`` becomes the reduction of every member's
        (the others' ``w`` may serve the engine as scratch, as ``hierarchical.reduce``
        allows: its caller reduces a copy where the data must stay); False, with nothing
        sent, where the engine has no such op for the dtype (as :meth:`allreduce`)."""
        if not w.size:
            return True
        return _engine_folds(w, op) and self.comm._reduce(w, op, root, self.deadline,
                                                          self.what)

    def gatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: Sequence[int],
                root: int) -> None:
        """The engine's own gather: member i's ``mine`` (``counts[i]`` elements) lands back
        to back in ``root``'s ``out`` (None on the others)."""
        if not sum(counts):
            return
        isz = mine.itemsize
        c = self.comm
        c.run(lambda: c._igatherv(None if out is None else _bytes(out), _bytes(mine),
                                  [n * isz for n in counts], root), self.deadline, self.what)

    def scatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: Sequence[int],
                 root: int) -> None:
        """The engine's own scatter: member i's ``out`` gets piece i (``counts[i]``
        elements) of ``root``'s ``ins`` (pieces back to back; None on the others)."""
        if not sum(counts):
            return
        isz = out.itemsize
        c = self.comm
        c.run(lambda: c._iscatterv(_bytes(out), None if ins is None else _bytes(ins),
                                   [n * isz for n in counts], root), self.deadline, self.what)

    def prepare(self, recvs: Sequence[tuple[int, np.ndarray]],
                sends: Sequence[tuple[int, np.ndarray]]) -> Callable[[int | None], Exchange]:
        """Receives into and sends from contiguous arrays, ``(member, array)`` each, made
        once to :meth:`run` in this call and later ones (the arrays must live as long).

        When run, all are posted at once and waited for. Between two members, messages
        match in the order listed; a message shorter than its receive array fills only
        its start. These exchanges carry the call's agreement
        (``algorithms.hierarchical.all_reduce_fused``), so a member whose call differs
        may send other lengths, or no such message at all: it runs the agreement's
        exchange of rows instead, and unless the run is ``settled`` (every member is
        known to run this call), a row of it under :attr:`probe` ends the wait."""
        c = self.comm
        try:
            return c._prepare([(p, _bytes(a)) for p, a in recvs],
                              [(p, _bytes(a)) for p, a in sends])
        except (TransportError, InvalidUsage):
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's error, made ours
            raise c.failure(self.what, exc) from exc

    def run(self, prepared: Callable[[int | None], Exchange], settled: bool = False,
            started: Exchange | None = None) -> bool:
        """Run an exchange made by :meth:`prepare` (or wait for it, ``started``).

        Returns:
            True when every message arrived whole; False when one was longer than its
            array, or a member is in the agreement's exchange of rows instead (its call
            is not this one): the arrays are then unspecified, and the call's agreement
            must settle what differs."""
        c = self.comm
        req = started or c.start(lambda: prepared(None if settled else self.probe), self.what)
        c.wait_soon(req, self.deadline, self.what)
        return req.refused is None

    def swap_runner(self, prepared: Callable[[int | None], Exchange]
                    ) -> Callable[[Sequence[np.ndarray], int],
                                  tuple[int, Exchange | None]] | None:
        """A runner of an exchange made by :meth:`prepare` of one row per member, each a
        head then a piece, compiled from packing to unpacking (``algorithms.
        hierarchical._FusedAllToAllPlan``), or None when the engine cannot run it so.

        ``runner(buffers, me)`` (``buffers``: head, source, send rows, receive rows,
        destination) returns (0, None) done, (2, None) some head differs, or (1, the
        exchange, started, for :meth:`run`). It reads this binding's probe, deadline and
        name at each call, so a plan keeps it from call to call; made once because each
        call's few microseconds of lookups outside MPI cost the ranks sharing a core
        twice over (2 emulated hosts x 2 ranks, unlimited links, all_to_all, best of 4
        alternating jobs of 3000 calls, us: 64 KiB 117 -> 107, 128 KiB 165 -> 149,
        256 KiB 291 -> 274, 512 KiB 451 -> 432)."""
        c = self.comm
        make = getattr(c, "_swap_runner", None)
        run = make(prepared) if make is not None else None
        if run is None:
            return None

        def runner(buffers: Sequence[np.ndarray], me: int) -> tuple[int, Exchange | None]:
            try:
                return run(buffers, me, self.probe)
            except (TransportError, InvalidUsage):
                raise
            except Exception as exc:  # noqa: BLE001 - as the general wait: the lost host named
                raise c._failed(self.what, exc) from exc

        return runner

    def run_fused(self, steps: Sequence[Any], buffers: Sequence[np.ndarray],
                  geometry: Sequence[int], code: int, times: np.ndarray | None = None
                  ) -> tuple[int, Exchange | None] | None:
        """A fused call's prepared ``steps`` (all_reduce, reduce_scatter) run compiled as
        far as they go without a difference (``algorithms.hierarchical._FusedPlan``):
        (steps done with their checks and folds, the next step's exchange if it was
        started, for :meth:`run`), or None when the engine cannot. ``times``: a traced
        call's 6 int64, which get each step's begin and end as the engine saw them
        (``time.time_ns()``; 0: not begun, or not ended, there)."""
        c = self.comm
        try:
            return c._run_fused(steps, buffers, geometry, code, self.probe, times)
        except (TransportError, InvalidUsage):
            raise
        except Exception as exc:  # noqa: BLE001 - as the general wait: the lost host named
            raise c._failed(self.what, exc) from exc


class Engine:
    """An inter-host engine: makes communicators over subsets of the job's ranks."""

    name = "?"

    def comm(self, ranks: Sequence[int], me: int, key: str) -> HostComm:
        """A communicator over global ``ranks`` (collective over them; ``me`` is this
        process's global rank; ``key`` is the same on every member and unique per comm)."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def close(self) -> None:
        pass


def available(name: str) -> bool:
    """Whether engine ``name``'s Python package imports here (without importing it)."""
    module = {"mpi": "mpi4py", "gloo": "torch"}[name]
    return importlib.util.find_spec(module) is not None


def choose(requested: str | None, launcher: str) -> str:
    """The engine a multi-host job uses.

    Args:
        requested: ``internode=`` of init_process_group, or None.
        launcher: the detected launcher (``meshcast.launch_env().launcher``).

    Raises:
        InvalidUsage: an unknown engine name.
        TransportError: the requested engine, or every engine, is missing here.
    """
    from ..rendezvous.env import MPI_LAUNCHERS

    name = (requested or os.environ.get("MESHCAST_INTERNODE", "") or "").strip().lower()
    if name and name not in ENGINES:
        raise InvalidUsage(f"init_process_group: unknown inter-host engine {name!r} "
                           f"(MESHCAST_INTERNODE / internode=): choose one of {', '.join(ENGINES)}")
    if name:
        if not available(name):
            raise TransportError(_missing(name))
        if name == "mpi" and launcher not in MPI_LAUNCHERS:
            raise TransportError(
                f"init_process_group: MESHCAST_INTERNODE=mpi needs a job started by an MPI "
                f"launcher (mpiexec, srun); this job was started by {launcher!r}. Start it with "
                f"mpiexec, or use MESHCAST_INTERNODE=gloo")
        return name
    if launcher in MPI_LAUNCHERS and available("mpi"):
        return "mpi"
    if available("gloo"):
        return "gloo"
    raise TransportError(
        "init_process_group: the ranks run on several hosts and no inter-host engine is "
        "installed. Install one: pip install 'meshcast[mpi]' (MPI through mpi4py; start the "
        "job with mpiexec or srun) or pip install 'meshcast[torch]' (Gloo through torch)")


def _missing(name: str) -> str:
    extra = {"mpi": "pip install 'meshcast[mpi]' (mpi4py and the mpich wheel)",
             "gloo": "pip install 'meshcast[torch]' (torch, whose Gloo moves the bytes)"}[name]
    return f"init_process_group: inter-host engine {name!r} is not installed: {extra}"


def open_engine(name: str, *, store: Any, rank: int, size: int, timeout: float,
                watch: Any = None) -> Engine:
    """Start engine ``name`` for this process (collective over every rank of the job).

    ``watch``: the job's :class:`~meshcast._hostwatch.HostWatch`; with MPI, a rank that
    leaves after the watch saw a failure aborts the job instead of finalizing MPI
    (see :func:`_abort_mpi_at_exit`).
    """
    if name == "mpi":
        from .mpi import MpiEngine

        engine = MpiEngine(rank, size)
        if watch is not None:
            atexit.register(_abort_mpi_at_exit, weakref.ref(watch), rank)
        return engine
    from .gloo import GlooEngine

    return GlooEngine(store, rank, timeout)


def _abort_mpi_at_exit(watch_ref: Callable[[], Any], rank: int) -> None:
    """At exit, after the job lost a host or announced a failure: ``MPI_Abort`` instead
    of the ``MPI_Finalize`` mpi4py would run next.

    Measured with MPICH's Hydra on emulated hosts: when a host's link is down, ranks
    that raise "host X is lost" and exit normally leave ``mpiexec`` waiting for the
    unreachable host's proxy forever (its connection never closes), so the user's
    launcher never returns; after ``MPI_Abort`` it exits at once, non-zero, with
    Hydra's own summary. (A rank killed outright needs none of this: Hydra then
    kills the whole job itself.)
    """
    watch = watch_ref()
    if watch is None or not watch.failing:
        return
    # The job's other ranks see the same loss within an interval or two; the abort (as
    # any rank's failed exit) makes Hydra kill them, so first give them time to raise
    # their own error, as meshcast run's launcher does with its drain.
    time.sleep(6 * watch.interval)
    print(f"meshcast: rank {rank} leaves a job that lost a host or failed across hosts: "
          f"MPI_Abort instead of MPI_Finalize (which could wait for the lost host)",
          file=sys.stderr, flush=True)
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(1)


def remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)
