"""Programs of row exchanges over MPI: run in C when the helper was built, else through mpi4py.

A program (built by :func:`meshcast.algorithms.hierarchical.agreement_steps`) is a
tuple of phases run one after the other, each a tuple of operations
``(kind, peer, rows)`` on a table of rows ``cap`` bytes apart: kind 0 receives the
rows ``rows`` from ``peer``, kind 1 sends them. A row travels at the length it says
(``base`` bytes plus the int32 at ``word`` in it, when positive, at most ``cap``), so
one forwarded in a later phase travels at the length it arrived with. Several rows to
one peer go as one message when they come to at most :data:`PACK_BYTES` (the first
row, the others after it in the spare room of its place), else one message each; the
receiver tells which from the first message's length (see transport/_mpi_rows.c).

Two runners share one interface, ``run(first, polls) -> phases completed`` and
``test() -> bool`` for the phase ``run`` left active (see transport/_mpi_rows.c):

- the compiled ``_mpi_rows.Rows``: one C call posts and tests a whole exchange
  through MPI_Isend/MPI_Irecv/MPI_Testall of the library mpi4py loaded;
- :class:`PersistentRows`, for installs without a C compiler or with
  ``MESHCAST_COMPILED=0``: persistent requests through mpi4py, made once per
  phase and set of send lengths (a program repeats the same ones call after
  call), which saves building them through mpi4py on every call.

:meth:`meshcast.transport.mpi.MpiComm.exchange_rows` drives either one, with the
general wait (deadline, hosts' heartbeats, failure notices) when a phase outlasts
the quick polls.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from . import compiled_helper


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


#: A program: phases of (kind, peer, rows) operations.
Program = tuple[tuple[tuple[int, int, tuple[int, ...]], ...], ...]

#: The longest message several rows to one peer are packed into. 2 emulated hosts x 2
#: ranks over MPICH (ofi/tcp between hosts), unlimited links, one job, best of 5 rounds,
#: us a call, the second phase's rows one message a row / packed up to 4 KiB / packed up
#: to 64 KiB: 8 B all_reduce 27.6 / 26.4 / 26.1 (MPICH 21.1), broadcast 26.8 / 24.7 /
#: 24.6, all_gather 28.5 / 26.3 / 26.3; 4 KiB all_reduce 41.9 / 42.3 / 42.6; 16 KiB
#: all_reduce 71.6 / 70.5 / 70.1, broadcast 44.9 / 42.7 / 42.3. Past a few KiB the
#: copies eat what the message saved, so the rows longer than this go one message each
#: (all_gather of 128 KiB a rank 330 us either way).
PACK_BYTES = 4096


def runner(comm: Any, tag: int, out: np.ndarray, program: Program, cap: int,
           length: tuple[int, int]) -> Any:
    """A runner of ``program`` on the table ``out`` over the mpi4py communicator ``comm``
    (messages tagged ``tag``): the compiled one when it can be used, else
    :class:`PersistentRows`."""
    functions = _mpi_functions()
    if functions:
        MPI = _mpi()
        *addresses, Rows = functions
        try:
            return Rows(*addresses, MPI._handleof(comm), MPI._handleof(MPI.BYTE), tag, out,
                        cap, *length, PACK_BYTES, MPI._sizeof(MPI.Request),
                        MPI._sizeof(MPI.Status), program)
        except (AttributeError, TypeError, ValueError, OverflowError):
            # an mpi4py without _handleof/_sizeof, or handles that do not fit: the same
            # program through mpi4py sends the same messages
            pass
    return PersistentRows(comm, tag, out, program, cap, length)


def as_mpi_error(exc: BaseException) -> BaseException:
    """A runner's error as MPI's: the compiled runner raises RuntimeError(code, phase)."""
    if type(exc) is RuntimeError and exc.args and type(exc.args[0]) is int:
        return _mpi().Exception(exc.args[0])
    return exc


def _mpi_functions() -> tuple[Any, ...]:
    """(MPI_Isend's address, MPI_Irecv's, MPI_Testall's, MPI_Get_count's, the compiled
    Rows type), or ()
    when programs cannot run compiled here; found on first use."""
    global _found
    if _found is None:
        _found = _find_mpi_functions()
    return _found


_found: tuple[Any, ...] | None = None


def _find_mpi_functions() -> tuple[Any, ...]:
    helper = compiled_helper("_mpi_rows")
    if helper is None:  # built without a C compiler: mpi4py posts and tests
        return ()
    Rows = helper.Rows
    try:
        # MPI's own symbols, looked up through the module mpi4py loaded them for, so they
        # are those of the library mpi4py uses, whichever MPI the site has.
        lib = ctypes.CDLL(_mpi().__file__)
        return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                     for name in ("MPI_Isend", "MPI_Irecv", "MPI_Testall", "MPI_Get_count")) + (Rows,)
    except (OSError, AttributeError):
        return ()


def exchange_functions() -> tuple[Any, ...]:
    """(MPI_Startall's address, MPI_Testall's, MPI_Iprobe's, the compiled ``exchange``
    that waits on persistent requests), or () when that cannot run compiled here."""
    global _found_exchange
    if _found_exchange is None:
        _found_exchange = ()
        if _mpi_functions():  # the helper was built and MPI's symbols are reachable
            from ._mpi_rows import exchange

            lib = ctypes.CDLL(_mpi().__file__)
            _found_exchange = tuple(
                ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                for name in ("MPI_Startall", "MPI_Testall", "MPI_Iprobe")) + (exchange,)
    return _found_exchange


_found_exchange: tuple[Any, ...] | None = None


def fused_function() -> Any:
    """The compiled ``fused`` (see transport/_mpi_rows.c); only after exchange_functions()
    found the helper."""
    from ._mpi_rows import fused

    return fused


def swap_function() -> Any:
    """The compiled ``swap_rows`` (see transport/_mpi_rows.c); only after
    exchange_functions() found the helper."""
    from ._mpi_rows import swap_rows

    return swap_rows


class PersistentRows:
    """A program run through mpi4py on persistent requests (the compiled runner's
    interface; see the module): the same messages, each phase in one batch, or two when
    some receive's rows follow one message each."""

    #: Sets of send lengths a phase keeps requests for (a mismatch or an uneven call
    #: brings new lengths; a program that keeps changing them would otherwise pile up).
    SHAPES = 8

    def __init__(self, comm: Any, tag: int, out: np.ndarray, program: Program, cap: int,
                 length: tuple[int, int]) -> None:
        self.comm, self.tag, self.out, self.program, self.cap = comm, tag, out, program, cap
        self.base, self.word = length
        self.made: list[dict[tuple, tuple]] = [{} for _ in program]
        self.last: list[tuple[Any, Any]] = [(None, None)] * len(program)
        # a receive's rows that follow one message each: (phase, step) -> requests
        self.rest: dict[tuple[int, int], list[Any]] = {}
        self.active: list[Any] | None = None
        # a batch has at most a message a row of its phase (as the compiled runner)
        widest = max((sum(len(rows) for _, _, rows in phase) for phase in program), default=1)
        self.active_phase, self.statuses = -1, [_mpi().Status() for _ in range(widest)]
        self.pending: tuple[list[Any], list[tuple[int, int]]] | None = None

    def run(self, first: int, polls: int) -> int:
        MPI = _mpi()
        for p in range(first, len(self.program)):
            reqs, follow, receives = self._requests(p)
            if not reqs:
                continue
            MPI.Prequest.Startall(reqs + follow)
            self.pending = (follow, receives)
            while True:
                while not MPI.Request.Testall(reqs, self.statuses[:len(reqs)]):
                    if polls <= 0:
                        self.active, self.active_phase = reqs, p
                        return p
                    polls -= 1
                    os.sched_yield()
                reqs = self._finish(p)
                if not reqs:
                    break
        return len(self.program)

    def test(self) -> bool:
        if self.active is None:
            return True
        if not _mpi().Request.Testall(self.active, self.statuses[:len(self.active)]):
            return False
        more = self._finish(self.active_phase)
        if more:
            self.active = more
            return False
        self.active, self.active_phase = None, -1
        return True

    def _finish(self, p: int) -> list[Any]:
        """The phase's batch is done: after the first, copy out the rows that came packed,
        start the receives of those that follow one message each, and return the second
        batch (those and the sends of such rows: see ``post`` in transport/_mpi_rows.c)."""
        if self.pending is None:
            return []
        follow, receives = self.pending
        self.pending = None
        MPI, out, cap, more = _mpi(), self.out, self.cap, []
        for i, at in receives:
            rows = self.program[p][i][2]
            count = self.statuses[at].Get_count(MPI.BYTE)
            first = rows[0] * cap
            edge = self._length(out, first)
            if count > edge:  # the other rows came after the first: into their places
                for row in rows[1:]:
                    if edge + self.base > count:
                        break
                    size = min(self._length(out, first + edge), count - edge)
                    out[row * cap:row * cap + size] = out[first + edge:first + edge + size]
                    edge += size
            else:
                more += self._rest(p, i)
        if more:
            MPI.Prequest.Startall(more)
        return follow + more

    def _rest(self, p: int, i: int) -> list[Any]:
        reqs = self.rest.get((p, i))
        if reqs is None:
            MPI, out, cap = _mpi(), self.out, self.cap
            _, peer, rows = self.program[p][i]
            reqs = self.rest[(p, i)] = [
                self.comm.Recv_init([out[row * cap:(row + 1) * cap], MPI.BYTE], peer, self.tag)
                for row in rows[1:]]
        return reqs

    def _requests(self, p: int) -> tuple[list[Any], list[Any], list[tuple[int, int]]]:
        """Phase ``p``'s first batch (every receive's and every send's first message, the
        short rows of a send packed), the sends of the rows that follow one message each,
        and where each receive of several rows is in the first batch (requests kept per
        set of send lengths)."""
        lengths = self._pack(p)
        last = self.last[p]
        if last[0] == lengths:
            return last[1]
        made = self.made[p]
        got = made.get(lengths)
        if got is None:
            if len(made) >= self.SHAPES:
                _free([r for rs, fs, _ in made.values() for r in rs + fs])
                made.clear()
            got = made[lengths] = self._make(p, lengths)
        self.last[p] = (lengths, got)
        return got

    def _length(self, buf: np.ndarray, at: int) -> int:
        """The length of the row at byte ``at`` of ``buf``, as the row says it."""
        carried = int.from_bytes(buf[at + self.word:at + self.word + 4], "little",
                                 signed=True)
        return min(self.cap, self.base + max(carried, 0))

    def _pack(self, p: int) -> tuple:
        """Pack phase ``p``'s sends of several rows that are short: the lengths of every
        send's messages, in order (one length: one message)."""
        out, cap, sends = self.out, self.cap, []
        packed: dict[tuple[int, ...], tuple[int, ...]] = {}
        for kind, _, rows in self.program[p]:
            if kind != 1:
                continue
            if len(rows) == 1:
                sends.append((self._length(out, rows[0] * cap),))
                continue
            lengths = packed.get(rows)
            if lengths is None:
                lengths = tuple(self._length(out, row * cap) for row in rows)
                total = sum(lengths)
                if total <= min(PACK_BYTES, cap):
                    at = rows[0] * cap + lengths[0]
                    for row, size in zip(rows[1:], lengths[1:]):
                        out[at:at + size] = out[row * cap:row * cap + size]
                        at += size
                    lengths = (total,)
                packed[rows] = lengths
            sends.append(lengths)
        return tuple(sends)

    def _make(self, p: int, lengths: tuple
              ) -> tuple[list[Any], list[Any], list[tuple[int, int]]]:
        MPI, out, cap, tag = _mpi(), self.out, self.cap, self.tag
        reqs: list[Any] = []
        receives: list[tuple[int, int]] = []
        for i, (kind, peer, rows) in enumerate(self.program[p]):
            if kind == 0:
                if len(rows) > 1:
                    receives.append((i, len(reqs)))
                reqs.append(self.comm.Recv_init([out[rows[0] * cap:(rows[0] + 1) * cap],
                                                 MPI.BYTE], peer, tag))
        sends = [(peer, rows) for kind, peer, rows in self.program[p] if kind == 1]
        follow: list[Any] = []
        for (peer, rows), sizes in zip(sends, lengths):
            # (packed: one message from the first row's place)
            for k, (row, n) in enumerate(zip(rows, sizes)):
                (follow if k else reqs).append(
                    self.comm.Send_init([out[row * cap:row * cap + n], MPI.BYTE], peer, tag))
        return reqs, follow, receives

    def free(self) -> None:
        """Free the persistent requests (the communicator is about to go)."""
        _free([r for made in self.made for rs, fs, _ in made.values() for r in rs + fs])
        _free([r for rs in self.rest.values() for r in rs])
        self.made = [{} for _ in self.program]
        self.rest = {}
        self.last = [(None, None)] * len(self.program)


def _free(reqs: list[Any]) -> None:
    for r in reqs:
        try:
            r.Free()
        except Exception:  # noqa: BLE001 - an active or already freed request
            pass


__all__ = ["PersistentRows", "as_mpi_error", "runner"]
