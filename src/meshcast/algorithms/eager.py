"""The ``eager`` family across hosts: a small call's data ride in its agreement.

Theory of operation
-------------------
Every call of a group that spans hosts begins with the agreement
(``meshcast/spanning.py``): one exchange of rows, a row per rank, after which
every rank holds every rank's fingerprint (kind, dtype, count, op, root) and
piece size. A row has room for data too: up to
:func:`.hierarchical.eager_cap` bytes a rank (the caps and what they were
measured against are beside it). When every rank's data rode in its row (for
broadcast and scatter: the root's; the others carry none), that one exchange
has moved all the call needs, and each rank finishes the call from the rows
alone: one crossing of the hosts' links instead of two (the agreement, then a
family's own exchange). An 8-byte all_reduce across hosts costs one round of
messages so.

The rows travel as :func:`.hierarchical.agreement_route` says: ``flat`` (MPI,
at most :data:`.hierarchical.AGREEMENT_FLAT_MAX` ranks), every row straight to
every rank in the phases of :func:`.hierarchical.agreement_steps`; else
``leaders``, gathered to each host's leader over shared memory, exchanged among
the leaders, broadcast back inside each host. An eager call's steps are the
agreement's.

Each function here is what follows that exchange for one collective, from
``rows`` (every rank's payload bytes, in group-rank order) into this rank's
result. Reductions fold the rows in group-rank order, so every rank's result
is bitwise the same. The checks the agreement makes (fingerprints, counts
against the root's list, an all_to_all's sizes) come first, in spanning.py.
Who runs them:

* the general path of :class:`~meshcast.spanning.HostSpanningGroup` calls them
  once every row carried its data (``_settle``; barrier's has nothing to do);
* its lane for tiny calls (``meshcast/spanning_lane.py``) runs the same
  folds and copies on views it keeps per call shape, or in C inside the
  compiled row exchange (``transport/_mpi_rows.c``), under the rule that it
  writes the same bytes (``tests/runtime/test_host_spanning.py`` and
  ``tests/multihost/`` run both).

A family is never forced: a call runs ``eager`` whenever its data fit, and
forcing any other family (``algorithm=``, ``MESHCAST_ALGO``) keeps the data out
of the rows, so that baselines stay measurable. ``meshcast algorithms`` lists
:data:`ALGORITHMS` beside the families of :mod:`.hierarchical`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..ops import ReduceOp, reduce_many
from ._common import as_bytes

#: The family's name (``last_algorithm`` reports ``KIND/eager``).
EAGER = "eager"
#: A barrier's name: it has no data, so the agreement alone is the call.
AGREEMENT = "agreement"

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``ALGORITHMS[kind]``: (name, function) of the call that finishes from the agreement's
#: rows; the functions' docstrings say their steps and what crosses hosts.
ALGORITHMS: dict[str, tuple[str, Callable[..., Any]]] = {}


def _finishes(kind: str, name: str = EAGER) -> Callable[[_F], _F]:
    """Decorator: ``fn`` finishes ``kind`` from the rows (see :data:`ALGORITHMS`)."""
    def deco(fn: _F) -> _F:
        ALGORITHMS[kind] = (name, fn)
        return fn
    return deco


def names(kind: str) -> tuple[str, ...]:
    """The names this module registers for ``kind`` (``("eager",)``, ``("agreement",)``
    for barrier, or none)."""
    return (ALGORITHMS[kind][0],) if kind in ALGORITHMS else ()


def requires(kind: str) -> str:
    """What a call of ``kind`` needs to run eager, in words."""
    if kind == "barrier":
        return ""
    whose = {"broadcast": "the root's data", "scatter": "the root's list",
             "all_to_all": "every rank's input, in even pieces,"}.get(kind, "every rank's data")
    return f"{whose} within its agreement row (hierarchical.eager_cap); no family forced"


@_finishes("all_reduce")
def all_reduce(rows: Sequence[np.ndarray], w: np.ndarray, op: ReduceOp) -> None:
    """All-reduce folded from every rank's row, on every rank.

    Steps: the agreement's exchange of rows carries every rank's array; every rank
    folds the rows in group-rank order into ``w``.

    Bytes across hosts: each rank's row (its array S) once to each other host, with
    the agreement, where a family sends after it.
    """
    reduce_many(op, w, [row.view(w.dtype) for row in rows])


@_finishes("reduce")
def reduce(rows: Sequence[np.ndarray], w: np.ndarray, op: ReduceOp, at_root: bool) -> None:
    """Reduce folded from every rank's row at the root; the others' arrays stay.

    Steps: the agreement's exchange of rows carries every rank's array; the root folds
    the rows in group-rank order into ``w``.

    Bytes across hosts: each rank's row (its array S) once to each other host: every
    rank learns every row, as the agreement needs.
    """
    if at_root:
        reduce_many(op, w, [row.view(w.dtype) for row in rows])


@_finishes("broadcast")
def broadcast(rows: Sequence[np.ndarray], w: np.ndarray, root: int, me: int) -> None:
    """Broadcast copied from the root's row.

    Steps: the agreement's exchange of rows carries the root's array (the other rows
    carry none); every other rank copies it into ``w``.

    Bytes across hosts: the root's row (S) once to each other host, with the agreement.
    """
    if me != root:
        as_bytes(w)[:] = rows[root]


@_finishes("all_gather")
def all_gather(rows: Sequence[np.ndarray], out: np.ndarray) -> None:
    """All-gather of the rows, end to end in group-rank order, into ``out``.

    Steps: the agreement's exchange of rows carries every rank's piece; every rank
    concatenates the rows into ``out``.

    Bytes across hosts: each rank's piece once to each other host, with the agreement:
    an all-gather's own traffic.
    """
    if rows:
        np.concatenate(rows, out=as_bytes(out))


@_finishes("gather")
def gather(rows: Sequence[np.ndarray], outs: Sequence[np.ndarray] | None) -> None:
    """Gather copied from every rank's row into the root's list (``outs``, None elsewhere).

    Steps: the agreement's exchange of rows carries every rank's piece; the root copies
    row g into piece g.

    Bytes across hosts: each rank's piece once to each other host (every rank learns
    every row, as the agreement needs).
    """
    if outs:
        for piece, row in zip(outs, rows):
            as_bytes(piece)[:] = row


@_finishes("scatter")
def scatter(rows: Sequence[np.ndarray], out: np.ndarray, root: int, start: int) -> None:
    """Scatter copied from the root's row: bytes ``[start, start + out.nbytes)`` of it.

    Steps: the agreement's exchange of rows carries the root's whole list (the other
    rows carry none); every rank copies its piece out of it.

    Bytes across hosts: the root's list (S) once to each other host, with the agreement.
    """
    as_bytes(out)[:] = rows[root][start:start + out.nbytes]


@_finishes("reduce_scatter")
def reduce_scatter(rows: Sequence[np.ndarray], out: np.ndarray, op: ReduceOp, start: int
                   ) -> None:
    """Reduce-scatter: my piece (elements ``[start, start + out.size)``) folded from every row.

    Steps: the agreement's exchange of rows carries every rank's whole input; every rank
    folds its piece of the rows in group-rank order into ``out``.

    Bytes across hosts: each rank's whole input once to each other host, with the
    agreement (a family sends each host only its ranks' pieces, after it).
    """
    n = out.size
    reduce_many(op, out, [row.view(out.dtype)[start:start + n] for row in rows])


@_finishes("all_to_all")
def all_to_all(rows: Sequence[np.ndarray], out: np.ndarray, me: int) -> None:
    """All-to-all in even pieces: piece ``me`` of every rank's row, in group-rank order.

    Steps: the agreement's exchange of rows carries every rank's whole input; every rank
    copies its piece of each row into ``out``.

    Bytes across hosts: each rank's whole input once to each other host, with the
    agreement (a family sends each rank only its piece, after it).
    """
    if not rows or not len(rows[0]):
        return
    piece = len(rows[0]) // len(rows)
    np.concatenate([row[me * piece:(me + 1) * piece] for row in rows], out=as_bytes(out))


@_finishes("barrier", AGREEMENT)
def barrier(rows: Sequence[np.ndarray]) -> None:
    """Barrier: the agreement alone.

    Steps: the agreement's exchange of rows; no rank leaves it before every rank's row
    reached it, so it is a full barrier.

    Bytes across hosts: each rank's row (its fingerprint and two words) once to each
    other host.

    (Nothing is left to do after the agreement, so the runtime does not call this.)
    """


__all__ = ["AGREEMENT", "ALGORITHMS", "EAGER", "all_gather", "all_reduce", "all_to_all",
           "barrier", "broadcast", "gather", "names", "reduce", "reduce_scatter", "requires",
           "scatter"]
