"""Schedules: a call's registered algorithm (algorithms/), run by the executor on the channels.

Which calls come here: every call the fast-path rules of
:func:`meshcast.algorithms._select.fast_path` leave (or that names an
algorithm, explicitly or through ``MESHCAST_ALGO``): after the entry,
:func:`meshcast.algorithms._select.select` picks the algorithm (explicit >
``MESHCAST_ALGO`` > the decision table ``TABLE``, arena first when the
group has one) and :func:`meshcast.algorithms._execute.execute` runs its
rounds with a :class:`Channels` context: point-to-point messages on the
shm transport, tagged by the call's sequence number and round, and the
arena's shared slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import config
from ..algorithms import _execute
from ..algorithms import _select as _fast
from ..errors import GroupAbortedError, InvalidUsage, MismatchError
from ..transport.shm import KIND_COLL

if TYPE_CHECKING:
    from .._fingerprint import Fingerprint
    from ..algorithms._plan import Plan
    from ..transport.arena import Arena
    from ..transport.shm import Handle
    from . import GroupView

_TAG_ROUNDS = 20  # a message's tag: the call's seq above these bits, its round below


class _CollHandle:
    """A transport handle whose wait also notices that another rank aborted the call."""

    __slots__ = ("handle", "arena")

    def __init__(self, handle: Handle, arena: Arena) -> None:
        self.handle, self.arena = handle, arena

    def wait(self, deadline: float) -> None:
        self.handle.wait(deadline, self.arena.check_abort)


class Channels:
    """Executor context for one call (see algorithms/_execute.ExecContext)."""

    __slots__ = ("group", "seq", "op", "deadline", "arena", "what")

    def __init__(self, group: GroupView, seq: int, op: Any, deadline: float, what: str
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


def run(group: GroupView, kind: str, fp: Fingerprint, plan: Plan, algorithm: str | None,
        deadline: float, what: str) -> None:
    """Select the algorithm of an entered call and run its schedule; on a failure, abort
    the call so that the peers still waiting fail the same way instead of timing out."""
    # supports() is rank-invariant and sees the same counts everywhere, so a
    # forced algorithm that cannot run is refused on every rank alike.
    try:
        entry = _fast.select(plan, algorithm, config.get("MESHCAST_ALGO"))
    except InvalidUsage as exc:
        if kind == "all_to_all" and "bruck" in (algorithm or ""):
            # The one algorithm whose supports() sees per-rank data (bruck needs
            # equal splits on every rank): another rank may have accepted it
            # and be waiting for us, so it must not wait in vain.
            group.arena.abort(str(exc))
        raise
    group.last_algorithm = f"{kind}/{entry.name}"
    try:
        ctx = Channels(group, fp.seq, plan.op, deadline, f"{what} [{entry.name}]")
        _execute.execute(entry.fn(plan), ctx, None if group.tracer is None
                         else group.tracer.rounds_of(group, fp.seq))
    except (GroupAbortedError, MismatchError) as exc:
        # Peers that are still waiting must fail the same way, not time out.
        group.arena.abort(str(exc), mismatch=isinstance(exc, MismatchError))
        raise
    except BaseException as exc:
        group.arena.abort(f"rank {group.global_ranks[group._rank]} failed in {what}: {exc}")
        raise
