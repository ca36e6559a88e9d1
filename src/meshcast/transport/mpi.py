"""MPI (through mpi4py) as meshcast's inter-host engine.

The job must have been started by an MPI launcher (mpiexec, srun with PMI):
meshcast's global rank is then the rank in ``MPI.COMM_WORLD`` (checked).
Communicators over subsets are made with ``MPI_Comm_create_group``, which
only the members call, so ``new_group`` of ranks spread over hosts costs the
other ranks nothing. mpi4py initializes MPI with ``MPI_THREAD_MULTIPLE``: an
async collective on a group's worker thread and a point-to-point call of the
user's thread may run at once.

Interface selection is MPI's own (``mpiexec -iface eth0``, ``FI_TCP_IFACE``,
``UCX_NET_DEVICES``, Open MPI's ``btl_tcp_if_include``); the README's
"Several machines" section lists them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import TransportError
from ..ops import ReduceOp
from . import mpi_rows
from .interhost import AGREE_TAG, COLL_TAG, Engine, Exchange, HostComm, Request, offsets


def _mpi() -> Any:
    """mpi4py's MPI module, imported on first use (meshcast imports without mpi4py)."""
    global _MPI
    if _MPI is None:
        from mpi4py import MPI

        _MPI = MPI
    return _MPI


_MPI: Any = None


def _startall(reqs: list[Any]) -> None:
    """``MPI.Prequest.Startall``, bound on first use."""
    global _startall
    _startall = _mpi().Prequest.Startall
    _startall(reqs)


class _MpiRequest(Request):
    __slots__ = ("req", "keep", "status", "expect")

    def __init__(self, req: Any, *keep: Any, expect: int = -1) -> None:
        self.req, self.keep = req, keep  # the buffers must outlive the operation
        # A status only where it is read (a receive's size and source).
        self.status = _mpi().Status() if expect >= 0 else None
        self.expect = expect  # a receive's size: MPI accepts shorter messages silently

    def test(self) -> bool:
        if not self.req.Test(self.status):
            return False
        if self.expect >= 0:
            got = self.status.Get_count(_mpi().BYTE)
            if got != self.expect:
                raise TransportError(
                    f"received {got} bytes from rank {self.status.Get_source()} into a buffer "
                    f"of {self.expect}: the sender's and receiver's sizes differ")
        return True

    def source(self) -> int | None:
        return self.status.Get_source() if self.status is not None else None


class _MpiAll(Request):
    """Several requests that complete together (their buffers kept alive by the caller)."""

    __slots__ = ("reqs",)

    def __init__(self, reqs: list[Any]) -> None:
        self.reqs = reqs

    def test(self) -> bool:
        return bool(_testall(self.reqs))


class _MpiExchange(Exchange):
    """Started sends and receives of ``Bound.prepare``'s exchange (the receives first)."""

    __slots__ = ("comm", "reqs", "receives", "probe")

    def __init__(self, comm: Any, reqs: list[Any], receives: int, probe: int | None) -> None:
        self.comm, self.reqs, self.receives, self.probe = comm, reqs, receives, probe

    def test(self) -> bool:
        MPI = _mpi()
        try:
            if _testall(self.reqs):
                return True
        except MPI.Exception as exc:
            # A message longer than its receive: that request completed with the error,
            # the others go on (the next test waits for them). Without statuses (they
            # cost every poll) another request's error reads the same; the agreement
            # that follows a refusal then meets that error itself and explains it.
            if exc.Get_error_class() not in (MPI.ERR_IN_STATUS, MPI.ERR_TRUNCATE):
                raise
            self.refused = "truncated"
            return False
        if self.probe is not None and self.comm.Iprobe(MPI.ANY_SOURCE, self.probe):
            _abandon(self)
            return True
        return False


def _abandon(ex: Any) -> None:
    """A member is in this call's agreement instead: what ``ex`` posted will not all be
    matched. Receives are cancelled (a matched one completes); sends that cannot be
    cancelled stay with MPI (the group is unusable after the mismatch anyway)."""
    MPI = _mpi()
    ex.refused = "diverted"
    for i, req in enumerate(ex.reqs):
        if req == MPI.REQUEST_NULL:
            continue
        try:
            req.Cancel()
            if i < ex.receives:
                req.Wait()
        except MPI.Exception:  # a truncated or finished receive: settled anyway
            pass


def _persistent(comm: Any, recvs: list[tuple[int, np.ndarray]],
                sends: list[tuple[int, np.ndarray]], polls: int) -> Any:
    """Persistent requests of an exchange, started by the returned function (probe); in
    C when the helper was built (``exchange`` in transport/_mpi_rows.c), which starts
    them and polls up to ``polls`` times before the caller's general wait."""
    MPI = _mpi()
    reqs = ([comm.Recv_init([a, MPI.BYTE], p, COLL_TAG) for p, a in recvs]
            + [comm.Send_init([a, MPI.BYTE], p, COLL_TAG) for p, a in sends])
    receives = len(recvs)
    compiled = _compiled_requests(comm, reqs)

    def start(probe: int | None) -> Exchange:
        if compiled is not None:
            return _CompiledExchange(compiled, comm, reqs, receives, probe, polls)
        if reqs:
            _startall(reqs)
        return _MpiExchange(comm, reqs, receives, probe)

    def free() -> None:
        for r in reqs:
            try:
                r.Free()
            except Exception:  # noqa: BLE001 - MPI may already be finalized at exit
                pass

    start.keep = (recvs, sends)  # type: ignore[attr-defined] - the buffers outlive the requests
    start.free = free  # type: ignore[attr-defined]
    start.parts = (compiled, comm, reqs, receives)  # type: ignore[attr-defined] - run_fused's
    return start


def _compiled_requests(comm: Any, reqs: list[Any]) -> tuple | None:
    """What the compiled ``exchange`` needs for ``reqs`` (persistent: their handles stay
    the same from start to start), or None (no helper, or handles it cannot take)."""
    functions = mpi_rows.exchange_functions()
    if not functions:
        return None
    MPI = _mpi()
    try:
        size = MPI._sizeof(MPI.Request)
        mask = (1 << (8 * size)) - 1  # mpi4py gives MPICH's int handles sign-extended
        handles = np.array([MPI._handleof(r) & mask for r in reqs],
                           {4: np.uint32, 8: np.uint64}[size])
        statuses = bytearray((len(reqs) + 1) * MPI._sizeof(MPI.Status))
        return (*functions[:3], handles, statuses, MPI._handleof(comm), functions[3])
    except (AttributeError, KeyError, OverflowError, TypeError):
        return None


class _CompiledExchange(Exchange):
    """Persistent requests started and polled by the compiled helper (see _persistent)."""

    __slots__ = ("args", "run", "comm", "reqs", "receives", "probe", "state", "rest")

    def __init__(self, compiled: tuple, comm: Any, reqs: list[Any], receives: int,
                 probe: int | None, polls: int, state: int | None = None) -> None:
        *self.args, self.run = compiled
        self.comm, self.reqs, self.receives, self.probe = comm, reqs, receives, probe
        self.rest: _MpiExchange | None = None
        # state: 0 done, 1 pending, 2 a member's row under probe waits; None: start now
        self.state = self._poll(True, polls) if state is None else state

    def _poll(self, start: bool, polls: int) -> int:
        try:
            return self.run(*self.args, -1 if self.probe is None else self.probe,
                            _mpi().ANY_SOURCE, start, polls)
        except RuntimeError as exc:
            self.failed_with(mpi_rows.as_mpi_error(exc))
            return 1

    def failed_with(self, error: BaseException) -> None:
        """An MPI error while testing: a message longer than its receive leaves mpi4py to
        wait for the others, as _MpiExchange does (the compiled test would meet the error
        again); any other error is raised."""
        MPI = _mpi()
        if not (isinstance(error, MPI.Exception) and error.Get_error_class() in (
                MPI.ERR_IN_STATUS, MPI.ERR_TRUNCATE)):
            raise error
        self.rest = _MpiExchange(self.comm, self.reqs, self.receives, self.probe)
        self.rest.refused = self.refused = "truncated"

    def test(self) -> bool:
        if self.rest is not None:
            done = self.rest.test()
            self.refused = self.rest.refused
            return done
        if self.state == 1:
            self.state = self._poll(False, 0)
        if self.state == 2:
            _abandon(self)
            self.state = 0
        return self.state == 0


def _testall(reqs: list[Any]) -> bool:
    """``MPI.Request.Testall``, bound on first use (waits call it thousands of times)."""
    global _testall
    _testall = _mpi().Request.Testall
    return _testall(reqs)


class _ActivePhase(Request):
    """The phase of a row exchange that outlasted its quick polls (see mpi_rows)."""

    __slots__ = ("runner",)

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    def test(self) -> bool:
        try:
            return bool(self.runner.test())
        except RuntimeError as exc:  # the compiled runner's MPI error code
            raise mpi_rows.as_mpi_error(exc) from None


_NATIVE_OPS = {"SUM": "SUM", "PRODUCT": "PROD", "MIN": "MIN", "MAX": "MAX", "BAND": "BAND",
               "BOR": "BOR", "BXOR": "BXOR", "AVG": "SUM"}


class MpiComm(HostComm):
    engine = "mpi"
    # MPI progresses only inside MPI calls: a non-blocking all-to-all of 16 MiB between
    # two emulated hosts took 345 ms when its waiter slept 0.2 ms between tests and
    # 42 ms when it yielded (the blocking call: 39 ms). So waits keep polling (yielding
    # the core each time) for a whole second before they start to sleep.
    poll_s = 1.0

    def __init__(self, comm: Any, ranks: Sequence[int], rank: int, name: str) -> None:
        super().__init__(ranks, rank, name)
        self.comm = comm
        self._sized: dict[tuple[int, int, int], tuple[np.ndarray, list[Any]]] = {}
        self._sized_last: tuple[Any, int, int, list[Any]] = (None, 0, 0, [])
        # (table id, program, cap, tag) -> (table, its runner: see mpi_rows)
        self._runners: dict[tuple[int, tuple, int, int], tuple[np.ndarray, Any]] = {}
        # tag -> (table, program, runner) of the last exchange_rows under that tag
        self._rows_last: dict[int, tuple[Any, Any, Any]] = {}

    def _iallgatherv(self, out: np.ndarray, mine: np.ndarray, counts: list[int]) -> Request:
        return self._iallgatherv_at(out, mine, counts, offsets(counts))

    def _iallgatherv_at(self, out: np.ndarray, mine: np.ndarray, counts: list[int],
                        displs: list[int]) -> Request:
        MPI = _mpi()
        return _MpiRequest(self.comm.Iallgatherv([mine, MPI.BYTE], [out, (counts, displs),
                                                                   MPI.BYTE]), out, mine)

    #: Members up to which allgather_sized sends each member its bytes directly (n - 1
    #: messages per member); past it, padded pieces in one all-gather (log n steps).
    DIRECT_MEMBERS = 8

    def allgather_sized(self, out: np.ndarray, n: int, cap: int, deadline: float,
                        what: str) -> None:
        # A receive may be longer than its message, so each member's bytes travel as they
        # are: an 8 B all_reduce's agreement at 2 hosts x 2 ranks sends the other leader
        # 112 B, where padded slots sent 2 KiB. MPICH over TCP sends up to 128 B without
        # waiting for completion (libfabric's inject size); 2 KiB took ~50 us more a call.
        if self.size > self.DIRECT_MEMBERS:
            return super().allgather_sized(out, n, cap, deadline, what)
        last = self._sized_last  # the agreement passes one buffer, call after call
        if last[0] is out and last[1] == n and last[2] == cap:
            reqs = last[3]
        else:
            reqs = None
        try:
            if reqs is None:
                kept = self._sized.get((id(out), n, cap))
                reqs = kept[1] if kept else self._sized_requests(out, n, cap)
                self._sized_last = (out, n, cap, reqs)
            _startall(reqs)
        except Exception as exc:  # noqa: BLE001 - MPI's error, made ours
            raise self.failure(what, exc) from exc
        self.wait_soon(_MpiAll(reqs), deadline, what)

    def exchange_rows(self, out: np.ndarray, program: tuple, cap: int,
                      length: tuple[int, int], deadline: float, what: Any,
                      tag: int = AGREE_TAG) -> None:
        """Run a program of row exchanges on the rows of ``out`` (row r at ``r * cap``).

        Args:
            out: the table of rows, every member's alike.
            program: phases, run one after the other, each a tuple of operations
                ``(kind, peer, row)``: kind 0 receives row ``row`` from member ``peer``
                (at most ``cap`` bytes), kind 1 sends it, at the length the row says.
                Every member's program must post its sends and receives between a pair
                in the same order (MPI matches them in order).
            cap: the bytes between rows (their largest length).
            length: ``(base, word)``: a row is ``base`` bytes plus the int32 at ``word``
                in it (when positive), at most ``cap``.
            deadline, what: as for :meth:`wait`.
            tag: the messages' tag (see ``interhost.AGREE_TAGS``).

        The compiled helper runs the program when it was built (one C call, see
        transport/_mpi_rows.c); else mpi4py runs it on persistent requests
        (:mod:`meshcast.transport.mpi_rows`).
        """
        last = self._rows_last.get(tag)  # one table and program, call after call
        if last is None or not (last[0] is out and last[1] is program):
            last = self._rows_last[tag] = (out, program,
                                           self.rows_runner(out, program, cap, length, tag))
        runner = last[2]
        self._finish_phases(runner, self._run_phases(runner, 0, what), len(program), deadline,
                            what)

    def eager_rows(self, runner: Any, seq: int, mine: int, head: bytes, data: Any,
                   expect: bytes, out: Any, code: int, row: int, at: int, deadline: float,
                   what: Any, started: Any = None) -> bool:
        """A tiny call whose data rides in the rows, on a compiled runner (see
        :meth:`rows_runner` and ``eager`` in transport/_mpi_rows.c): write my row (the
        sequence number ``seq``, the rest of my cell ``head``, my payload ``data``) as
        row ``mine``, run the program, check that rows 0 .. n-1 hold ``seq`` and the
        cells ``expect`` (back to back), then combine them into ``out`` (None: none) by
        ``code`` from byte ``at`` of their payloads (``row``: the one a copy takes).

        Returns True when every row was as expected (``out`` then holds the result),
        False when some row was not: the table holds every row, for the caller to read.
        ``started``: the status (or RuntimeError) of ``runner.eager`` when the caller
        already made that call with these arguments; this goes on from there.

        Raises:
            as :meth:`wait`, and the engine's errors explained.
        """
        status = started
        try:
            if status is None:
                status = runner.eager(seq, mine, head, data, expect, out, code, row, at,
                                      self.QUICK_POLLS)
            elif isinstance(status, BaseException):
                raise status
        except RuntimeError as exc:  # MPI's error code, from C
            raise self._runner_failed(what, exc) from exc
        if status < 2:
            return status == 0
        self._finish_phases(runner, status - 2, runner.phases(), deadline, what)
        if runner.check(seq, expect):
            return False
        if out is not None:
            runner.combine(len(expect) // len(head), out, code, row, at)
        return True

    def _finish_phases(self, runner: Any, done: int, phases: int, deadline: float,
                       what: Any) -> None:
        """Wait for the phase a runner left active (``done``), then run the rest."""
        while done < phases:  # a phase outlasted the quick polls
            self.wait(_ActivePhase(runner), deadline, what)
            done = self._run_phases(runner, done + 1, what)

    def _run_phases(self, runner: Any, first: int, what: Any) -> int:
        try:
            return runner.run(first, self.QUICK_POLLS)
        except Exception as exc:  # noqa: BLE001 - as the general wait: the lost host named
            raise self._runner_failed(what, exc) from exc

    def _runner_failed(self, what: Any, exc: BaseException) -> BaseException:
        """A runner's error (the compiled one's MPI error code, or mpi4py's), explained as
        the general wait explains the engine's: the lost host named when there is one."""
        return self._failed(what, mpi_rows.as_mpi_error(exc))

    def rows_runner(self, out: np.ndarray, program: tuple, cap: int,
                    length: tuple[int, int], tag: int = AGREE_TAG) -> Any:
        """The runner of ``program`` on the table ``out`` with messages tagged ``tag``
        (cached by the table's identity; see :mod:`meshcast.transport.mpi_rows`): the
        compiled one, which also runs :meth:`eager_rows`, or
        :class:`~meshcast.transport.mpi_rows.PersistentRows`."""
        key = (id(out), program, cap, tag)
        kept = self._runners.get(key)
        if kept is None:
            if len(self._runners) >= self.SIZED_SHAPES:
                self._free_runners()
            kept = self._runners[key] = (out, mpi_rows.runner(self.comm, tag, out, program,
                                                              cap, length))
        return kept[1]  # (the table is kept with it: its id stays its own)

    def _free_runners(self) -> None:
        self._rows_last = {}
        for _, runner in self._runners.values():
            if isinstance(runner, mpi_rows.PersistentRows):
                runner.free()
        self._runners.clear()

    #: Yields of a quick poll (``wait_soon``, the compiled runners) before the general
    #: wait takes over (with its deadline, hosts' heartbeats and failure notices): ~1 us
    #: each when the core is free, a peer's time slice when it is not, so a lost host is
    #: still noticed in time.
    QUICK_POLLS = 64

    # MPI progresses posted exchanges side by side while the host works (see hierarchical's
    # _broadcast_leader_pipelined and _reduce_scatter_rails_by_host for the measurements)
    PIPELINE_CHUNK_BYTES = 1 << 20

    #: How many (buffer, length) shapes of allgather_sized keep their persistent requests.
    SIZED_SHAPES = 16

    def _sized_requests(self, out: np.ndarray, n: int, cap: int) -> list[Any]:
        """Persistent requests of one allgather_sized shape: the agreement repeats the
        same buffers and lengths call after call, and starting ready requests saves
        building 2(n - 1) of them through mpi4py on every call (~10 us at 2 leaders)."""
        MPI = _mpi()
        if len(self._sized) >= self.SIZED_SHAPES:
            self._free_sized()
        me = self.rank
        mine = [out[me * cap:me * cap + n], MPI.BYTE]
        reqs = [self.comm.Recv_init([out[i * cap:(i + 1) * cap], MPI.BYTE], i, AGREE_TAG)
                for i in range(self.size) if i != me]
        reqs += [self.comm.Send_init(mine, i, AGREE_TAG) for i in range(self.size) if i != me]
        # (kept with its requests: the buffer must outlive them, and its id stays its own)
        self._sized[(id(out), n, cap)] = (out, reqs)
        return reqs

    def _free_sized(self) -> None:
        for _, reqs in self._sized.values():
            for r in reqs:
                try:
                    r.Free()
                except Exception:  # noqa: BLE001 - an active or already freed request
                    pass
        self._sized.clear()
        self._sized_last = (None, 0, 0, [])

    def _ialltoallv(self, out: np.ndarray, recv: list[int], inp: np.ndarray,
                    send: list[int], uniform: bool = False) -> Request:
        MPI = _mpi()
        if uniform:
            # even pieces: MPICH's Ialltoall beat its Ialltoallv by 10-15% (2 emulated hosts
            # x 2 ranks, unlimited, 512 KiB-8 MiB: 8 MiB 7.6-8.1 against 8.3-10.4 ms). Only
            # when every member's pieces are even: the caller knows that from agreed data,
            # this rank's counts alone do not (a rank with even pieces beside one with
            # uneven ones would post Ialltoall against Ialltoallv: MPI then hangs).
            return _MpiRequest(self.comm.Ialltoall([inp, send[0], MPI.BYTE],
                                                   [out, recv[0], MPI.BYTE]), out, inp)
        return _MpiRequest(self.comm.Ialltoallv(
            [inp, (send, offsets(send)), MPI.BYTE], [out, (recv, offsets(recv)), MPI.BYTE]),
            out, inp)

    def _ibcast(self, buf: np.ndarray, root: int) -> Request:
        return _MpiRequest(self.comm.Ibcast([buf, _mpi().BYTE], root), buf)

    def _isend(self, buf: np.ndarray, peer: int, tag: int) -> Request:
        return _MpiRequest(self.comm.Isend([buf, _mpi().BYTE], peer, tag), buf)

    def _irecv(self, buf: np.ndarray, peer: int | None, tag: int) -> Request:
        MPI = _mpi()
        return _MpiRequest(self.comm.Irecv([buf, MPI.BYTE],
                                           MPI.ANY_SOURCE if peer is None else peer, tag), buf,
                           expect=buf.nbytes)

    def _allreduce(self, w: np.ndarray, op: ReduceOp, deadline: float, what: str) -> bool:
        # MPI's predefined ops on its basic types; bool (logical ops), complex MIN/MAX and
        # float bitwise ops stay with meshcast's own combine (float MIN/MAX never get
        # here: interhost._engine_folds).
        if w.dtype.kind not in "iuf" or (w.dtype.kind == "f" and op.name.startswith("B")):
            return False
        MPI = _mpi()
        mpiop = getattr(MPI, _NATIVE_OPS[op.name])
        self.run(lambda: _MpiRequest(self.comm.Iallreduce(MPI.IN_PLACE, w, mpiop), w),
                 deadline, what)
        return True

    def _reduce(self, w: np.ndarray, op: ReduceOp, root: int, deadline: float,
                what: str) -> bool:
        if w.dtype.kind not in "iuf" or (w.dtype.kind == "f" and op.name.startswith("B")):
            return False  # (as _allreduce)
        MPI = _mpi()
        mpiop = getattr(MPI, _NATIVE_OPS[op.name])
        mine = self.rank == root
        self.run(lambda: _MpiRequest(self.comm.Ireduce(MPI.IN_PLACE if mine else w,
                                                       w if mine else None, mpiop, root), w),
                 deadline, what)
        return True

    def _igatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: list[int],
                  root: int) -> Request:
        MPI = _mpi()
        into = [out, (counts, offsets(counts)), MPI.BYTE] if self.rank == root else None
        return _MpiRequest(self.comm.Igatherv([mine, MPI.BYTE], into, root), out, mine)

    def _iscatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: list[int],
                   root: int) -> Request:
        MPI = _mpi()
        pieces = [ins, (counts, offsets(counts)), MPI.BYTE] if self.rank == root else None
        return _MpiRequest(self.comm.Iscatterv(pieces, [out, MPI.BYTE], root), out, ins)

    def _run_fused(self, steps: Sequence[Any], buffers: Sequence[np.ndarray],
                   geometry: Sequence[int], code: int, probe: int | None,
                   times: np.ndarray | None = None) -> tuple[int, Exchange | None] | None:
        """A fused call's three prepared steps, their checks and folds in one C
        call (``fused`` in transport/_mpi_rows.c), when the helper runs them: (steps
        done, the next step's exchange, already started, or None when not started);
        None when it cannot run compiled. ``times``: a traced call's 6 int64, which get
        each step's begin and end (``time.time_ns()``), 0 where it did not happen here."""
        # what does not change from call to call, kept on the first step (a plan's steps
        # are made once): False when the steps cannot run compiled
        kept = getattr(steps[0], "fused_call", None)
        if kept is None:
            parts = [getattr(step, "parts", None) for step in steps]
            if any(p is None or p[0] is None for p in parts):
                kept = False
            else:
                compiled = parts[0][0]  # (startall, testall, iprobe, handles, statuses, comm, run)
                kept = (mpi_rows.fused_function(),
                        (*compiled[:3], compiled[5], _mpi().ANY_SOURCE),
                        (*(p[0][3] for p in parts), max((p[0][4] for p in parts), key=len)),
                        parts)
            steps[0].fused_call = kept
        if kept is False:
            return None
        fused, head, requests, parts = kept
        done, state, error = fused(*head, -1 if probe is None else probe, self.QUICK_POLLS,
                                   *requests, *buffers, *geometry, code, times)
        if done == 3 or state == 0:
            return done, None
        c, comm, reqs, receives = parts[done]
        ex = _CompiledExchange(c, comm, reqs, receives, probe if done < 2 else None, 0,
                               state={1: 1, 2: 0, 3: 2, 4: 1}[state])
        if state == 4:
            ex.failed_with(_mpi().Exception(error))
        return done, ex

    def _swap_runner(self, step: Any) -> Callable[[Sequence[np.ndarray], int, int | None],
                                                  tuple[int, Exchange | None]] | None:
        """A prepared exchange of rows with heads, packed, run, checked and unpacked in one
        C call (``swap_rows`` in transport/_mpi_rows.c): ``run(buffers, me, probe)`` ->
        (0, None) done, (2, None) some head differs, (1, the exchange, started) to wait
        for as usual; None when the helper cannot run it. The call's arguments are bound
        here once, not looked up per call."""
        parts = getattr(step, "parts", None)
        if parts is None or parts[0] is None:
            return None
        compiled, comm, reqs, receives = parts
        swap, head = mpi_rows.swap_function(), compiled[:6]
        any_source, polls, mpi_exception = _mpi().ANY_SOURCE, self.QUICK_POLLS, _mpi().Exception

        def run(buffers: Sequence[np.ndarray], me: int, probe: int | None
                ) -> tuple[int, Exchange | None]:
            state, error = swap(*head, -1 if probe is None else probe, any_source, polls,
                                *buffers, me)
            if state == 0 or state == 2:
                return state, None
            ex = _CompiledExchange(compiled, comm, reqs, receives, probe, 0,
                                   state={1: 1, 3: 2, 4: 1}[state])
            if state == 4:
                ex.failed_with(mpi_exception(error))
            return 1, ex

        return run

    def _prepare(self, recvs: list[tuple[int, np.ndarray]],
                 sends: list[tuple[int, np.ndarray]]) -> Any:
        # persistent requests: a fused all_reduce repeats the same exchanges call after
        # call, and making 10 requests through mpi4py costs every rank ~20 us of a core
        # that ranks share
        return _persistent(self.comm, recvs, sends, self.QUICK_POLLS)

    def user_tag(self, tag: int) -> int:
        """torch tags are any int; MPI's stop at MPI_TAG_UB (>= 32767)."""
        return tag % COLL_TAG

    def close(self) -> None:
        try:
            self._free_runners()
            self._free_sized()
            self.comm.Free()
        except Exception:  # noqa: BLE001 - MPI may already be finalized at exit
            pass


class MpiEngine(Engine):
    name = "mpi"

    def __init__(self, rank: int, size: int) -> None:
        MPI = _mpi()
        world = MPI.COMM_WORLD
        if world.Get_rank() != rank or world.Get_size() != size:
            raise TransportError(
                f"init_process_group: MPI's COMM_WORLD says rank {world.Get_rank()} of "
                f"{world.Get_size()}, the launcher's environment rank {rank} of {size}; "
                f"meshcast's MPI engine needs them equal (start every rank with one mpiexec)")
        self.world = world
        self.version = MPI.Get_library_version().splitlines()[0].strip()

    def comm(self, ranks: Sequence[int], me: int, key: str) -> HostComm:
        MPI = _mpi()
        ranks = list(ranks)
        group = self.world.Get_group().Incl(ranks)
        try:
            comm = self.world.Create_group(group, zlib.crc32(key.encode()) % 32767)
        finally:
            group.Free()
        if comm == MPI.COMM_NULL:
            raise TransportError(f"MPI_Comm_create_group for {key} gave no communicator")
        return MpiComm(comm, ranks, ranks.index(me), key)

    def describe(self) -> str:
        return f"mpi ({self.version})"


__all__ = ["MpiComm", "MpiEngine"]
