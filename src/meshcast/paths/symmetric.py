"""Collectives on symmetric buffers: every rank reads and writes the peers' parts in place.

Which calls come here: the "symmetric" answer of
:func:`meshcast.algorithms._select.fast_path`: the call's buffer lies in a
symmetric allocation (:mod:`meshcast.symmetric`, ``meshcast.empty``) at the
same place on every rank, and it is large enough (``_select``'s
``SYMMETRIC_ALL_REDUCE_MIN_BYTES`` where the one-shot path would take it, any size
otherwise; ``SYMMETRIC_BROADCAST_MIN_BYTES``; all_gather and reduce_scatter
``SYMMETRIC_MIN_BYTES``). The region is part of the fingerprint, so
ranks that disagree get a MismatchError. The tiny-call lane runs the synchronous
calls and their async forms itself (:class:`InlineCalls`, lanes.py); the general path's
(:func:`job`, :func:`call`) runs the same program with the same fingerprint.

What runs is the collective's registered ``symmetric`` schedule
(algorithms/<collective>.py), flattened once per call shape into a program
whose side in the allocation is every rank's part of it, all mapped here
(``_program.as_mapped``: a peer's "exposed buffer" is its part, so its copies
are plain ``memmove``\\ s and its folds read the parts where they lie). The
group's entry (``(s, 0)``: my input is in my part) runs in Python; the records
after it, the closing round's signal ``(s, 1)`` (my share is written everywhere
and I read nothing more) and wait included, run in one call of the compiled
interpreter, or in Python's executor without it (``single_copy.run_program``,
which also waits where the interpreter's spin ends). So a rank returns once
everyone is done with the parts, and its caller may write the array again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from .._fingerprint import SYMMETRIC_PATH, Fingerprint, symmetric_extra
from ..algorithms._program import INPUT, OUTPUT
from ..errors import InvalidUsage
from .single_copy import CopyProgram, run_program, run_rest

_SEQ_BYTES = 8  # the packed fingerprint's first field, the call's number (uint64)

if TYPE_CHECKING:
    from . import GroupView, Job
    from .single_copy import CopyPrograms


def job(group: GroupView, fp: Fingerprint, what: str,
        run: Callable[[Fingerprint, str], None]) -> Job:
    """Call ``fp`` (named ``what``): ``run(fp, what)`` (see :func:`call`) enters it and
    runs its program, whose own closing round keeps every rank in until nobody reads or
    writes the parts any more."""

    def symmetric_call() -> None:
        group.last_algorithm = f"{fp.kind}/symmetric"
        run(fp, what)

    return symmetric_call


def call(group: GroupView, program: CopyProgram, inp: np.ndarray | list[np.ndarray] | None,
         out: np.ndarray | list[np.ndarray] | None, finish: Callable[[], None]
         ) -> Callable[[Fingerprint, str], None]:
    """A symmetric call: ``program`` (:func:`program`) on the call's flat ``inp`` and
    ``out``, the side in the allocation given as every rank's part of it, then
    ``finish()``. With the compiled interpreter, one call of it enters (every rank's
    fingerprint must be mine: a symmetric call's names its region, the same on every
    rank) and runs the records; where it stops, :func:`~.single_copy.run_rest` goes
    on in Python (a late rank; fingerprints that differ raise the MismatchError
    :meth:`Arena.enter` raises). Without it, :meth:`Arena.enter`, then Python's
    executor. A copy or fold outside the parts (the ranks disagree about the sizes: the
    fingerprint compares them, so only a bug) aborts the group."""
    arena = group.arena
    size = group._size

    def run(fp: Fingerprint, what: str) -> None:
        group.last_compiled = program.packed is not None  # (for the trace)
        seq = fp.seq
        if program.packed is None:
            arena.enter(fp, what, group._deadline())
            run_program(group, seq, what, program, None, inp, out, None)
            finish()
            return
        packed = fp.pack()
        entry = ((packed[_SEQ_BYTES:],) * size, -1, None)
        got = arena.compiled_program(seq, entry, arena.spin_ns, program.packed, inp, out,
                                     program.kernel, 0)
        if got:
            run_rest(group, seq, what, program, entry, inp, out, got)
        finish()

    return run


class InlineCalls:
    """The tiny-call lane's symmetric calls (meshcast/lanes.py): a synchronous
    all_reduce, broadcast, all_gather_into_tensor or reduce_scatter_tensor (the async
    ones: ``TinyCallLane._symmetric_async``, on these plans) whose array in the
    allocation (``arr``) the lane found, its plan
    (the program, every rank's part, the rooted entry) made once per kind, place,
    size, dtype, op and root, then one compiled call, with none of the general path's
    Fingerprint, closures or Work (which cost a symmetric all_reduce of 512 KiB half
    its time). Only with the compiled interpreter; anything else goes on the general
    path, whose fingerprint is the same."""

    #: Plans kept: one per array place a program calls on (a model's gradient buckets, a
    #: benchmark's rotated windows: 20 a size), each a few small objects. (64, emptied
    #: when full, made the bench rebuild plans inside its timed loops.)
    KEEP = 1024

    def __init__(self, group: GroupView, copies: CopyPrograms, whats: dict[str, object]
                 ) -> None:
        self.group, self.copies, self.whats = group, copies, whats
        self._plans: dict[tuple, tuple | None] = {}

    def plan(self, kind: str, arr: np.ndarray, op: ops.ReduceOp | None = None,
             root: int = -1) -> tuple | None:
        """(program, parts, rooted entry, average, side) of a symmetric ``kind`` on
        ``arr``'s place (with ``op``; a broadcast from group rank ``root``), made on
        first use; None: not one the lane runs."""
        key = (kind, arr.__array_interface__["data"][0], arr.nbytes, arr.dtype, op, root)
        plan = self._plans.get(key, False)
        if plan is False:
            if len(self._plans) >= self.KEEP:  # (the oldest goes: a dict keeps their order)
                del self._plans[next(iter(self._plans))]
            plan = self._plans[key] = self._plan(kind, arr, op, root)
        return plan

    def bound(self, kind: str, arr: np.ndarray, other: np.ndarray | None,
              op: ops.ReduceOp | None = None, root: int = -1) -> tuple | None:
        """(program, inp, out, rooted entry, the array AVG divides or None) of ``kind`` on
        ``arr`` and ``other`` (see :meth:`call`), or None: not one the lane runs."""
        plan = self.plan(kind, arr, op, root)
        if plan is None:
            return None
        program, parts, entry, average, side = plan
        if side == INPUT:
            return program, parts, other, entry, other if average else None
        return program, other, parts, entry, arr if average else None

    def call(self, kind: str, arr: np.ndarray, other: np.ndarray | None,
             op: ops.ReduceOp | None = None, root: int = -1) -> bool:
        """Call ``kind`` on ``arr`` (C-contiguous, writable where written, in a symmetric
        allocation, large enough: the lane checked) and ``other``, the call's flat array
        outside the allocation (all_gather's input, reduce_scatter's output; None); False
        where the general path takes it (no plan here, or async work queued ahead)."""
        bound = self.bound(kind, arr, other, op, root)
        if bound is None:
            return False
        program, inp, out, entry, averaged = bound
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():  # queued async work goes first: the general path
            return False
        try:
            arena = group.arena
            seq = next(group._seq)
            got = arena.compiled_program(seq, entry, arena.spin_ns, program.packed, inp, out,
                                         program.kernel, 0)
            group.last_algorithm = _NAMES[kind]
            if got:
                run_rest(group, seq, self.whats[kind], program, entry, inp, out, got)
            if averaged is not None:
                ops.finish_average(averaged, group._size)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def _plan(self, kind: str, arr: np.ndarray, op: ops.ReduceOp | None, root: int
              ) -> tuple | None:
        group = self.group
        dtype, n = arr.dtype, group._size
        reduces = kind in ("all_reduce", "reduce_scatter")
        name = ops.dtype_name(dtype)
        if not dtype.isnative or reduces and name in ("float16", "bfloat16"):
            return None  # (reduced on the general path: calls._native)
        region = group.symmetric.find(arr.reshape(-1))
        if region is None or kind in ("all_gather", "reduce_scatter") and arr.size % n:
            return None
        fields: dict = {"dtype": name, "count": arr.size}
        sched = None
        if reduces:
            try:
                op = ops.validate(op, dtype, caller=kind)
            except InvalidUsage:  # (the general path raises it, naming the rank)
                return None
            fields["op"] = op.name
            sched = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op
        side, moved = OUTPUT, dtype
        if kind == "all_reduce":
            made = program(self.copies, kind, dtype, None, arr.size, OUTPUT, op=sched)
        elif kind == "broadcast":  # (bytes: the reader-split copy cuts them anywhere)
            moved = np.dtype(np.uint8)
            made = program(self.copies, kind, moved, None, arr.nbytes, OUTPUT, root=root)
            fields["root"] = root
        elif kind == "all_gather":
            fields["count"] = arr.size // n
            made = program(self.copies, kind, dtype, arr.size // n, arr.size, OUTPUT)
        else:
            side, fields["count"] = INPUT, arr.size // n
            made = program(self.copies, kind, dtype, arr.size, arr.size // n, INPUT, op=sched)
        if made is None or made.packed is None:
            return None
        tail = Fingerprint(0, kind, path=SYMMETRIC_PATH, extra=symmetric_extra(*region.key),
                           **fields).pack()[_SEQ_BYTES:]
        return (made, region.views(arr.nbytes, moved), ((tail,) * n, -1, None),
                op is ops.ReduceOp.AVG, side)


_NAMES = {kind: f"{kind}/symmetric"
          for kind in ("all_reduce", "broadcast", "all_gather", "reduce_scatter")}


def program(copies: CopyPrograms, kind: str, dtype: np.dtype, n_in: int | None,
            n_out: int | None, side: int, root: int = -1,
            op: ops.ReduceOp | None = None) -> CopyProgram | None:
    """The registered ``symmetric`` schedule of ``kind`` for a call of ``n_in``/``n_out``
    elements of ``dtype`` (None: no such side) whose ``side`` (``INPUT`` or ``OUTPUT``)
    lies in the allocation, as a program (``CopyPrograms.get``, kept per shape); None
    where it does not flatten (the call then takes its ordinary path, alike on every
    rank: only the shape decides)."""
    counts = None
    if kind in ("all_gather", "reduce_scatter"):
        piece = (n_in if kind == "all_gather" else n_out) or 0
        counts = (piece,) * copies.group._size
    return copies.get(kind, dtype, root, n_in, n_out, counts, op=op, mapped=side)


__all__ = ["InlineCalls", "call", "job", "program"]
