"""Gloo (through torch.distributed) as meshcast's inter-host engine.

Each communicator is a ``ProcessGroupGloo`` among its members, which meet
through meshcast's own authenticated store (keys under
``meshcast/gloo/<key>/``), so no second, unauthenticated store is opened.
Gloo then connects every pair of members over TCP.

The interface Gloo binds to: ``MESHCAST_IFNAME`` (or Gloo's own
``GLOO_SOCKET_IFNAME``) when set, else the address this host's name
resolves to (torch's default), which on a machine whose name resolves to
127.0.0.1 is loopback: set the variable there.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import os
import queue
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops import ReduceOp
from ..rendezvous.torch_store import for_torch
from .interhost import COLL_TAG, Engine, HostComm, Request, offsets


def _torch() -> Any:
    import torch

    return torch


def _tensor(a: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only inputs: Gloo only reads them
        return _torch().from_numpy(a)


class _GlooRequest(Request):
    """A Gloo collective: its work completes in Gloo's threads, and a timed wait that
    expires leaves it running, so waits block in Gloo's own wait (GIL released, no
    polling: polling from Python costs an oversubscribed host the core Gloo's
    threads need) one liveness interval at a time."""

    __slots__ = ("work", "keep", "after", "block")

    def __init__(self, work: Any, *keep: Any, after: Any = None) -> None:
        self.work, self.keep, self.after = work, keep, after
        self.block = self._block

    def _block(self, seconds: float) -> bool:
        try:
            # Whole milliseconds, at least one: torch reads a timeout of 0 ms as "none".
            self.work.wait(datetime.timedelta(milliseconds=max(int(seconds * 1000), 1)))
        except RuntimeError:
            if not self.work.is_completed():
                return False  # the slice ran out; the work goes on
            # Completed after all: either it failed, or it finished between the slice's
            # end and this check (seen under load: a good broadcast reported "Operation
            # timed out!"). Its own outcome decides.
            return self.test()
        self._finish()
        return True

    def _finish(self) -> None:
        if self.after is not None:
            self.after()
            self.after = None

    def test(self) -> bool:
        if not self.work.is_completed():
            return False
        self.work.wait()  # raises the engine's error, if it failed
        self._finish()
        return True

    def source(self) -> int | None:
        try:
            return int(self.work._source_rank())
        except Exception:  # noqa: BLE001 - only receives from any rank have one
            return None


class _GlooP2P(_GlooRequest):
    """A Gloo send or receive. These complete only inside a blocking wait
    (``is_completed()`` stays False until then), and a timed wait that expires
    closes the pair to the peer for good ("Application timeout caused pair
    closure"), so they cannot be waited on a slice at a time. One helper thread
    blocks in the wait (Gloo's own timeout, the job's); the caller waits for
    that thread, a liveness interval at a time, with the hosts' checks between."""

    __slots__ = ("done", "error")

    def __init__(self, work: Any, *keep: Any) -> None:
        super().__init__(work, *keep)
        self.done = threading.Event()
        self.error: BaseException | None = None
        _WAITERS.submit(self._wait)

    def _wait(self) -> None:
        try:
            self.work.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's wait
            self.error = exc
        self.done.set()

    def _block(self, seconds: float) -> bool:
        return self.done.wait(seconds) and self.test()

    def test(self) -> bool:
        if not self.done.is_set():
            return False
        if self.error is not None:
            raise self.error
        return True


class _Waiters:
    """Daemon threads that run blocking waits: an idle one takes the next, else a new
    one starts, so a wait never queues behind another (a receive that completes only
    after a later one must not wait for it). They stay for the next waits."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads blocked in (or about to block in) _jobs.get()

    def submit(self, job: Any) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread is now promised this job
                self._jobs.put(job)
                return
        threading.Thread(target=self._loop, args=(job,), daemon=True,
                         name="meshcast-gloo-wait").start()

    def _loop(self, job: Any) -> None:
        while True:
            job()
            with self._lock:
                self._idle += 1
            job = self._jobs.get()


_WAITERS = _Waiters()


#: Dtypes Gloo reduces (torch 2.13's ProcessGroupGloo refuses int16 and the unsigned types
#: past uint8 with "Invalid scalar type"); the others stay with meshcast's own combine.
_GLOO_REDUCES = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})
_NATIVE = {"SUM", "PRODUCT", "MIN", "MAX"}


def _rooted(kind: str, root: int) -> Any:
    """torch's options object of a rooted Gloo call (``BroadcastOptions``, ...) for ``root``."""
    opts = getattr(_torch().distributed, f"{kind}Options")()
    opts.rootRank = root
    return opts


class GlooComm(HostComm):
    engine = "gloo"

    def __init__(self, pg: Any, ranks: Sequence[int], rank: int, name: str) -> None:
        super().__init__(ranks, rank, name)
        self.pg = pg

    def _iallgatherv(self, out: np.ndarray, mine: np.ndarray, counts: list[int]) -> Request:
        # Gloo's allgather wants equal pieces: pad to the largest, then unpack.
        most = max(counts)
        if all(c == most for c in counts):
            return _GlooRequest(self.pg._allgather_base(_tensor(out), _tensor(mine)), out, mine)
        padded_in = np.zeros(most, np.uint8)
        padded_in[:mine.size] = mine
        padded_out = np.empty(most * self.size, np.uint8)

        def unpack() -> None:
            at = 0
            for i, c in enumerate(counts):
                out[at:at + c] = padded_out[i * most:i * most + c]
                at += c

        return _GlooRequest(self.pg._allgather_base(_tensor(padded_out), _tensor(padded_in)),
                            padded_out, padded_in, after=unpack)

    def _ialltoallv(self, out: np.ndarray, recv: list[int], inp: np.ndarray,
                    send: list[int], uniform: bool = False) -> Request:
        return _GlooRequest(self.pg.alltoall_base(_tensor(out), _tensor(inp), recv, send),
                            out, inp)

    def _ibcast(self, buf: np.ndarray, root: int) -> Request:
        return _GlooRequest(self.pg.broadcast([_tensor(buf)], _rooted("Broadcast", root)), buf)

    def _isend(self, buf: np.ndarray, peer: int, tag: int) -> Request:
        return _GlooP2P(self.pg.send([_tensor(buf)], peer, tag), buf)

    def _irecv(self, buf: np.ndarray, peer: int | None, tag: int) -> Request:
        if peer is None:
            return _GlooP2P(self.pg.recv_anysource([_tensor(buf)], tag), buf)
        return _GlooP2P(self.pg.recv([_tensor(buf)], peer, tag), buf)

    def _allreduce(self, w: np.ndarray, op: ReduceOp, deadline: float, what: str) -> bool:
        if w.dtype.name not in _GLOO_REDUCES or (op.name not in _NATIVE
                                                 and op is not ReduceOp.AVG):
            return False
        dist = _torch().distributed
        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, "SUM" if op is ReduceOp.AVG else op.name)
        self.run(lambda: _GlooRequest(self.pg.allreduce([_tensor(w)], opts), w), deadline, what)
        return True

    def _reduce(self, w: np.ndarray, op: ReduceOp, root: int, deadline: float,
                what: str) -> bool:
        if w.dtype.name not in _GLOO_REDUCES or (op.name not in _NATIVE
                                                 and op is not ReduceOp.AVG):
            return False  # (as _allreduce)
        dist = _torch().distributed
        opts = _rooted("Reduce", root)
        opts.reduceOp = getattr(dist.ReduceOp, "SUM" if op is ReduceOp.AVG else op.name)
        self.run(lambda: _GlooRequest(self.pg.reduce([_tensor(w)], opts), w), deadline, what)
        return True

    # Gloo's gather and scatter want equal pieces: padded to the largest, then unpacked.
    def _igatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: list[int],
                  root: int) -> Request:
        opts = _rooted("Gather", root)
        most = max(counts)
        padded_in = np.zeros(most, np.uint8)
        padded_in[:mine.size] = mine
        if self.rank != root:
            return _GlooRequest(self.pg.gather([], [_tensor(padded_in)], opts), padded_in)
        padded = [np.empty(most, np.uint8) for _ in counts]

        def unpack() -> None:
            for piece, at, c in zip(padded, offsets(counts), counts):
                out[at:at + c] = piece[:c]

        return _GlooRequest(self.pg.gather([[_tensor(p) for p in padded]],
                                           [_tensor(padded_in)], opts),
                            padded_in, *padded, after=unpack)

    def _iscatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: list[int],
                   root: int) -> Request:
        opts = _rooted("Scatter", root)
        most = max(counts)
        padded_out = np.empty(most, np.uint8)
        pieces = []
        if self.rank == root:
            for at, c in zip(offsets(counts), counts):
                piece = np.zeros(most, np.uint8)
                piece[:c] = ins[at:at + c]
                pieces.append(piece)

        def unpack() -> None:
            out[:] = padded_out[:out.size]

        return _GlooRequest(self.pg.scatter([_tensor(padded_out)],
                                            [[_tensor(p) for p in pieces]] if pieces else [],
                                            opts),
                            padded_out, *pieces, after=unpack)

    def user_tag(self, tag: int) -> int:
        return tag if tag != COLL_TAG else tag + 1

    def in_trouble(self) -> bool:
        """A wait failed here, or the job is failing or lost a host: an operation may be
        in flight."""
        w = self.watch
        return self.failed or (w is not None and (w.failing or w.reason(None) is not None))

    def close(self) -> None:
        if self.pg is not None and self.in_trouble():
            _abandon(self.pg)
        self.pg = None


#: Every open GlooComm, for the exit hook.
_OPEN: weakref.WeakSet[GlooComm] = weakref.WeakSet()


def _abandon(pg: Any) -> None:
    """Make sure ``pg`` is never destroyed.

    ``~ProcessGroupGloo`` joins its worker threads, and a thread inside an operation
    with a lost host returns only at Gloo's own timeout (the job's: minutes), so a
    rank that has just raised "host X is lost" would hang on its way out, its
    launcher would not see it fail, and nothing would be torn down. The process is
    ending anyway; the kernel reclaims what the group holds. One extra reference
    (never released) keeps the destructor from running, also during interpreter
    finalization, which clears module globals.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(pg))


@atexit.register
def _at_exit() -> None:
    # A job whose ranks exit without destroy_process_group after a failure: their
    # groups are freed during finalization, where the join above would block.
    for comm in list(_OPEN):
        if comm.pg is not None and comm.in_trouble():
            _abandon(comm.pg)
            comm.pg = None


class GlooEngine(Engine):
    name = "gloo"

    def __init__(self, store: Any, rank: int, timeout: float) -> None:
        torch = _torch()
        self.store = store
        self.timeout = datetime.timedelta(seconds=timeout)
        gloo = torch.distributed.ProcessGroupGloo
        ifname = os.environ.get("MESHCAST_IFNAME") or os.environ.get("GLOO_SOCKET_IFNAME")
        self.interface = ifname or "(the address of this host's name)"
        self.device = (gloo.create_device(interface=ifname) if ifname
                       else gloo.create_default_device())
        self.version = torch.__version__

    def comm(self, ranks: Sequence[int], me: int, key: str) -> HostComm:
        gloo = _torch().distributed.ProcessGroupGloo
        ranks = list(ranks)
        opts = gloo._Options()
        opts._devices = [self.device]
        opts._timeout = self.timeout
        pg = gloo(for_torch(self.store, f"meshcast/gloo/{key}/"), ranks.index(me), len(ranks),
                  opts)
        comm = GlooComm(pg, ranks, ranks.index(me), key)
        _OPEN.add(comm)
        return comm

    def describe(self) -> str:
        return f"gloo (torch {self.version}, interface {self.interface})"
