"""Runs one rank's schedule for real: comm steps on the transport, arena steps on the group's arena.

This is the only place where schedules meet I/O. The executor knows nothing
of particular algorithms; it carries out rounds exactly as algorithms/_plan.py
specifies (post all comms of a round, wait for them, then run the round's
local and arena steps in order). The simulator (_simulate.py) is the
reference for these semantics and the tests hold both to the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from .. import ops
from ._common import as_bytes
from ._plan import Copy, Get, Put, Recv, Reduce, ReduceSlots, Round, Send, Signal, Wait


class CommHandle(Protocol):
    def wait(self, deadline: float) -> None: ...


class ExecContext(Protocol):
    """What the group gives the executor for one call."""

    op: Any
    deadline: float
    arena: Any  # transport.arena.Arena or None

    def isend(self, peer: int, buf: np.ndarray, round_index: int) -> CommHandle: ...
    def irecv(self, peer: int, buf: np.ndarray, round_index: int) -> CommHandle: ...



def _reduce(ctx: ExecContext, step: Reduce) -> None:
    ops.reduce_into(ctx.op, step.dst, step.src)


def _copy(ctx: ExecContext, step: Copy) -> None:
    np.copyto(step.dst, step.src)


def _put(ctx: ExecContext, step: Put) -> None:
    src = as_bytes(step.src)
    ctx.arena.slots[ctx.arena.rank][step.offset:step.offset + src.nbytes] = src


def _get(ctx: ExecContext, step: Get) -> None:
    dst = as_bytes(step.dst)
    dst[:] = ctx.arena.slots[step.peer][step.offset:step.offset + dst.nbytes]


def _reduce_slots(ctx: ExecContext, step: ReduceSlots) -> None:
    dst = step.dst
    nbytes = dst.nbytes
    slots = ctx.arena.slots
    srcs = [slots[r][step.offset:step.offset + nbytes].view(dst.dtype) for r in step.ranks]
    if len(srcs) == 1:
        np.copyto(dst, srcs[0])
    else:
        ops.reduce_many(ctx.op, dst, srcs)


def _signal(ctx: ExecContext, step: Signal) -> None:
    ctx.arena.signal(step.phase)


def _wait(ctx: ExecContext, step: Wait) -> None:
    ctx.arena.wait(step.ranks, step.phase)


_LOCAL: dict[type, Callable[[ExecContext, Any], None]] = {
    Reduce: _reduce, Copy: _copy, Put: _put, Get: _get, ReduceSlots: _reduce_slots,
    Signal: _signal, Wait: _wait,
}


def execute(schedule: Iterator[Round], ctx: ExecContext,
            rounds: list[dict[str, Any]] | None = None) -> int:
    """Run every round of ``schedule``; return the number of rounds.

    ``rounds``: when tracing (meshcast.trace), a list that gets one record per
    round (peers as the schedule's group ranks, bytes, begin, time waited).

    Raises whatever the transport or the arena raises (CommTimeout,
    PeerGoneError, MismatchError, GroupAbortedError); the group then aborts.
    """
    if rounds is not None:
        return _execute_recorded(schedule, ctx, rounds)
    index = -1
    for index, rnd in enumerate(schedule):
        if rnd.comms:
            handles = []
            for step in rnd.comms:
                if type(step) is Send:
                    handles.append(ctx.isend(step.peer, step.buf, index))
                else:
                    assert type(step) is Recv
                    handles.append(ctx.irecv(step.peer, step.buf, index))
            for handle in handles:
                handle.wait(ctx.deadline)
        for step in rnd.then:
            _LOCAL[type(step)](ctx, step)
    return index + 1


def _execute_recorded(schedule: Iterator[Round], ctx: ExecContext,
                      rounds: list[dict[str, Any]]) -> int:
    """:func:`execute`, noting each round (kept apart so the plain loop stays plain).

    A round is noted as it starts (``wait_ns`` and ``end`` null until it ends), so
    a call that fails or is stopped inside a round shows which one and on whom."""
    index = -1
    for index, rnd in enumerate(schedule):
        note: dict[str, Any] = {"round": index, "send": [], "recv": [],
                                "begin": time.time_ns(), "wait_ns": None, "end": None}
        rounds.append(note)
        waited = 0
        if rnd.comms:
            handles = []
            for step in rnd.comms:
                if type(step) is Send:
                    note["send"].append([step.peer, step.buf.nbytes])
                    handles.append(ctx.isend(step.peer, step.buf, index))
                else:
                    note["recv"].append([step.peer, step.buf.nbytes])
                    handles.append(ctx.irecv(step.peer, step.buf, index))
            posted = time.time_ns()
            for handle in handles:
                handle.wait(ctx.deadline)
            waited = time.time_ns() - posted
        for step in rnd.then:
            if type(step) is Wait:
                t = time.time_ns()
                _wait(ctx, step)
                waited += time.time_ns() - t
            else:
                _LOCAL[type(step)](ctx, step)
        note["wait_ns"] = waited
        note["end"] = time.time_ns()
    return index + 1
