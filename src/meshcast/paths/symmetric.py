"""Collectives on symmetric buffers: every rank reads and writes the peers' parts in place.

Which calls come here: the "symmetric" answer of
:func:`meshcast.algorithms._select.fast_path`: the call's buffer lies in a
symmetric allocation (:mod:`meshcast.symmetric`, ``meshcast.empty``) at the
same place on every rank, and it is large enough
(``_select.SYMMETRIC_MIN_BYTES``; all_reduce: ``SYMMETRIC_ALL_REDUCE_MIN_BYTES``
where the one-shot path would take it, any size otherwise). The region is
part of the fingerprint, so ranks that disagree get a MismatchError.

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
from .single_copy import CopyProgram, run_program

_SEQ_BYTES = 8  # the packed fingerprint's first field, the call's sequence number

if TYPE_CHECKING:
    from .._fingerprint import Fingerprint
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
    rank) and runs the records; where it stops, :func:`~.single_copy.run_program` goes
    on in Python (a late rank; fingerprints that differ raise the MismatchError
    :meth:`Arena.enter` raises). Without it, :meth:`Arena.enter`, then Python's
    executor. A copy or fold outside the parts (the ranks disagree about the sizes: the
    fingerprint compares them, so only a bug) aborts the group."""
    arena = group.arena
    others = group._size

    def run(fp: Fingerprint, what: str) -> None:
        group.last_compiled = program.packed is not None  # (for the trace)
        seq = fp.seq
        if program.packed is None:
            arena.enter(fp, what, group._deadline())
            run_program(group, seq, what, program, None, inp, out, None)
            finish()
            return
        packed = fp.pack()
        entry = ((packed[_SEQ_BYTES:],) * others, -1, None)
        got = arena.compiled_program(seq, entry, arena.spin_ns, program.packed, inp, out,
                                     program.kernel, 0)
        if got:
            deadline = group._deadline()

            def agree(status: int) -> bool:
                if not arena.finish_entry(seq, packed, what, deadline, status):
                    arena.compare_entered(seq, False)  # (raises what enter raises)
                    raise AssertionError(f"{what}: fingerprints differ, yet compare alike")
                return True

            run_program(group, seq, what, program, entry, inp, out, got, agree)
        finish()

    return run


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


__all__ = ["call", "job", "program"]
