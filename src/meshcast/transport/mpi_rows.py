"""Programs of row exchanges over MPI: run in C when the helper was built, else through mpi4py.

A program (built by :func:`meshcast.algorithms.hierarchical.agreement_steps`) is a
tuple of phases run one after the other, each a tuple of operations
``(kind, peer, row)`` on a table of rows ``cap`` bytes apart: kind 0 receives row
``row`` from ``peer`` (at most ``cap`` bytes), kind 1 sends it at the length the
row says (``base`` bytes plus the int32 at ``word`` in it, when positive). A row
forwarded in a later phase travels at the length it arrived with.

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

from .. import config


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


#: A program: phases of (kind, peer, row) operations.
Program = tuple[tuple[tuple[int, int, int], ...], ...]


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
                        cap, *length, MPI._sizeof(MPI.Request), MPI._sizeof(MPI.Status),
                        program)
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
    """(MPI_Isend's address, MPI_Irecv's, MPI_Testall's, the compiled Rows type), or ()
    when programs cannot run compiled here; found on first use."""
    global _found
    if _found is None:
        _found = _find_mpi_functions()
    return _found


_found: tuple[Any, ...] | None = None


def _find_mpi_functions() -> tuple[Any, ...]:
    if not config.get("MESHCAST_COMPILED"):
        return ()
    try:
        from ._mpi_rows import Rows
    except ImportError:  # built without a C compiler: mpi4py posts and tests
        return ()
    try:
        # MPI's own symbols, looked up through the module mpi4py loaded them for, so they
        # are those of the library mpi4py uses, whichever MPI the site has.
        lib = ctypes.CDLL(_mpi().__file__)
        return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                     for name in ("MPI_Isend", "MPI_Irecv", "MPI_Testall")) + (Rows,)
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
    interface; see the module)."""

    #: Sets of send lengths a phase keeps requests for (a mismatch or an uneven call
    #: brings new lengths; a program that keeps changing them would otherwise pile up).
    SHAPES = 8

    def __init__(self, comm: Any, tag: int, out: np.ndarray, program: Program, cap: int,
                 length: tuple[int, int]) -> None:
        self.comm, self.tag, self.out, self.program, self.cap = comm, tag, out, program, cap
        self.base, self.word = length
        self.sent = [tuple(row for kind, _, row in phase if kind == 1) for phase in program]
        self.made: list[dict[tuple[int, ...], list[Any]]] = [{} for _ in program]
        self.last: list[tuple[Any, Any]] = [(None, None)] * len(program)
        self.active: list[Any] | None = None

    def run(self, first: int, polls: int) -> int:
        MPI = _mpi()
        for p in range(first, len(self.program)):
            reqs = self._requests(p)
            if not reqs:
                continue
            MPI.Prequest.Startall(reqs)
            while not MPI.Request.Testall(reqs):
                if polls <= 0:
                    self.active = reqs
                    return p
                polls -= 1
                os.sched_yield()
        return len(self.program)

    def test(self) -> bool:
        if self.active is None or _mpi().Request.Testall(self.active):
            self.active = None
            return True
        return False

    def _requests(self, p: int) -> list[Any]:
        lengths = tuple(self._length(row) for row in self.sent[p])
        last = self.last[p]
        if last[0] == lengths:
            return last[1]
        made = self.made[p]
        reqs = made.get(lengths)
        if reqs is None:
            if len(made) >= self.SHAPES:
                _free([r for rs in made.values() for r in rs])
                made.clear()
            reqs = made[lengths] = self._make(p, lengths)
        self.last[p] = (lengths, reqs)
        return reqs

    def _length(self, row: int) -> int:
        at = row * self.cap + self.word
        carried = int.from_bytes(self.out[at:at + 4], "little", signed=True)
        return min(self.cap, self.base + max(carried, 0))

    def _make(self, p: int, lengths: tuple[int, ...]) -> list[Any]:
        MPI, out, cap = _mpi(), self.out, self.cap
        sizes = iter(lengths)
        reqs = []
        for kind, peer, row in self.program[p]:
            at = row * cap
            if kind == 0:
                reqs.append(self.comm.Recv_init([out[at:at + cap], MPI.BYTE], peer, self.tag))
            else:
                n = next(sizes)
                reqs.append(self.comm.Send_init([out[at:at + n], MPI.BYTE], peer, self.tag))
        return reqs

    def free(self) -> None:
        """Free the persistent requests (the communicator is about to go)."""
        _free([r for made in self.made for rs in made.values() for r in rs])
        self.made = [{} for _ in self.program]
        self.last = [(None, None)] * len(self.program)


def _free(reqs: list[Any]) -> None:
    for r in reqs:
        try:
            r.Free()
        except Exception:  # noqa: BLE001 - an active or already freed request
            pass


__all__ = ["PersistentRows", "as_mpi_error", "runner"]
