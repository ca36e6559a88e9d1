"""meshcast's exception hierarchy, split by whose fault a failure is.

Every class subclasses the stdlib type a user already catches (``ValueError``
for bad arguments, ``TimeoutError`` for deadlines, ``ConnectionError`` for
broken links), so code written for torch.distributed or plain Python keeps
working::

    MeshcastError(RuntimeError)
    ├── InvalidUsage(MeshcastError, ValueError)      bad argument; raised before anything is sent
    ├── MismatchError(MeshcastError)                 ranks disagree (collective, count, dtype, op, root)
    ├── TransportError(MeshcastError, ConnectionError)  link broken; the group is poisoned
    │   ├── PeerGoneError                            the peer closed or died (names the peer rank)
    │   └── ShmError                                 shared memory could not be created or attached
    ├── CommTimeout(MeshcastError, TimeoutError)     deadline passed (names op, seq, ranks not heard from)
    ├── GroupAbortedError(MeshcastError)             group unusable after an earlier failure
    └── RendezvousError(MeshcastError)               store / URL / bring-up problems
        └── AuthenticationError                      a peer could not prove the job secret

Messages always name the operation, the argument and the rank, e.g.
``all_reduce: 'tensor' must be a NumPy array or CPU tensor (rank 2 got list)``.
"""

from __future__ import annotations

from collections.abc import Iterable


class MeshcastError(RuntimeError):
    """Base class of every error meshcast raises on purpose."""


class InvalidUsage(MeshcastError, ValueError):
    """A bad argument, detected on the calling rank before anything was sent."""


class MismatchError(MeshcastError):
    """Ranks of one group disagree about the same call (kind, count, dtype, op or root).

    Raised on every rank of the call with the same explanation.
    """


class TransportError(MeshcastError, ConnectionError):
    """A link to a peer broke; the group that used it is no longer usable."""


class PeerGoneError(TransportError):
    """A peer process exited or closed its end while we were waiting on it.

    Attributes:
        peer: global rank of the peer that is gone.
    """

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class ShmError(TransportError):
    """Shared memory could not be created, sized or attached."""


class CommTimeout(MeshcastError, TimeoutError):
    """A deadline passed while waiting on peers.

    Attributes:
        waiting_on: global ranks not heard from when the deadline passed.
    """

    def __init__(self, message: str, waiting_on: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.waiting_on = tuple(waiting_on)


class GroupAbortedError(MeshcastError):
    """The group failed earlier (timeout, dead peer, mismatch) and cannot be used again."""


class RendezvousError(MeshcastError):
    """The store, the init URL or the bring-up of the group failed."""


class AuthenticationError(RendezvousError):
    """A connection could not prove that it holds the job's secret."""


def usage(caller: str, message: str, rank: int | None = None) -> InvalidUsage:
    """Build an ``InvalidUsage`` in the house format ``caller: message (rank r)``."""
    where = f" (rank {rank})" if rank is not None else ""
    return InvalidUsage(f"{caller}: {message}{where}")


__all__ = [
    "AuthenticationError",
    "CommTimeout",
    "GroupAbortedError",
    "InvalidUsage",
    "MeshcastError",
    "MismatchError",
    "PeerGoneError",
    "RendezvousError",
    "ShmError",
    "TransportError",
    "usage",
]
