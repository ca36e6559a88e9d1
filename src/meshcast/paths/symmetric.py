"""Collectives on symmetric buffers: every rank reads and writes the peers' parts in place.

Which calls come here: the "symmetric" answer of
:func:`meshcast.algorithms._select.fast_path`: the call's buffer lies in a
symmetric allocation (:mod:`meshcast.symmetric`, ``meshcast.empty``) at the
same place on every rank, and it is large enough
(``_select.SYMMETRIC_MIN_BYTES``; all_reduce: ``SYMMETRIC_ALL_REDUCE_MIN_BYTES``
where the one-shot path would take it, any size otherwise). The region is
part of the fingerprint, so ranks that disagree get a MismatchError.

Protocol (:func:`job`, see meshcast/symmetric.py for the signal words):
enter (``(s, 0)``: my input is in my part), run the body (each rank writes
only the bytes of its share, in every part), signal ``(s, 1)`` (my share is
written everywhere and I read nothing more), and wait for everyone's
``(s, 1)`` before returning, so the caller may write the array again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ops
from ..symmetric import all_reduce_share
from ..topology import rotation

if TYPE_CHECKING:
    from .._fingerprint import Fingerprint
    from . import GroupView, Job


def job(group: GroupView, fp: Fingerprint, what: str, body: Callable[[], None]) -> Job:
    """Enter, run ``body`` (direct reads/writes of the peers' parts), signal phase 1 and
    wait until every rank is done with its share."""
    arena = group.arena

    def run() -> None:
        arena.enter(fp, what, group._deadline())
        try:
            body()
        except BaseException as exc:
            arena.abort(f"rank {group.global_ranks[group._rank]} failed in {what}: {exc}")
            raise
        arena.signal(1)
        arena.wait(range(group._size), 1)

    return run


def broadcast(group: GroupView, parts: list[np.ndarray], root: int) -> Callable[[], None]:
    """Every rank copies straight from the root's part (bytes) into its own; only the
    root must wait for the readers before its caller may change the data."""
    n, me = group._size, group._rank
    nbytes = parts[root].nbytes
    bounds = [nbytes * k // n for k in range(n + 1)]

    def copy() -> None:
        # As on the single-copy path: reader q's copy is split in n parts, the
        # root copies part q into it while q copies the others, so the root's
        # core works too (2 ranks: each side copies half).
        group.last_algorithm = "broadcast/symmetric"
        src = parts[root]
        if me == root:
            for q in rotation(me, n)[1:]:
                parts[q][bounds[q]:bounds[q + 1]] = src[bounds[q]:bounds[q + 1]]
            return
        for k in rotation(me, n)[1:]:  # every part but mine (part `root` included)
            parts[me][bounds[k]:bounds[k + 1]] = src[bounds[k]:bounds[k + 1]]

    return copy


def all_reduce(group: GroupView, parts: list[np.ndarray], op: ops.ReduceOp, average: bool
               ) -> Callable[[], None]:
    """Each rank reduces its share of every part and writes it into every part."""

    def reduce_share() -> None:
        group.last_algorithm = "all_reduce/symmetric"
        all_reduce_share(parts, group._rank, op, average)

    return reduce_share


def all_gather(group: GroupView, parts: list[np.ndarray], piece: np.ndarray, count: int
               ) -> Callable[[], None]:
    """Each rank writes its ``piece`` (``count`` elements, as every rank's) straight into
    every rank's output: one copy per piece and destination, nothing staged."""
    lo = group._rank * count

    def scatter_piece() -> None:
        group.last_algorithm = "all_gather/symmetric"
        for part in parts:
            part[lo:lo + count] = piece

    return scatter_piece


def reduce_scatter(group: GroupView, srcs: Sequence[np.ndarray], out: np.ndarray,
                   op: ops.ReduceOp, finish: Callable[[Any], None]) -> Callable[[], None]:
    """Each rank reduces its piece straight from every rank's input (``srcs``: my piece
    of every rank's part) into ``out``; ``finish(None)`` after."""

    def reduce_piece() -> None:
        group.last_algorithm = "reduce_scatter/symmetric"
        mine = srcs[group._rank]
        if group._rank > 1 and np.shares_memory(out, mine):
            # reduce_many may not write into a later operand: go through a copy
            tmp = np.empty_like(out)
            ops.reduce_many(op, tmp, srcs)
            out[:] = tmp
        else:
            ops.reduce_many(op, out, srcs)
        finish(None)

    return reduce_piece
