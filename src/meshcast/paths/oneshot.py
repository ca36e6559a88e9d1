"""One-shot calls: every rank's data through the arena's one-shot regions and a single signal.

Which calls come here: the "oneshot" answer of
:func:`meshcast.algorithms._select.fast_path`, i.e. ``_select.oneshot``
(the call's bytes fit a region, ``SMALL_BYTES`` of transport/arena.py, and
reading every rank's stays under ``ONESHOT_WORK_BYTES``), for all_gather
``_select.oneshot_all_gather``, and for the calls whose layout only the
entry reveals ``_select.direct_bytes`` / ``all_to_all_direct_limit``.
Every rank decides alike: the rules read the group and fields the
fingerprint compares (counts, after the entry).

Two forms:

* Decided before the call (barrier, broadcast, all_reduce, reduce,
  all_gather, reduce_scatter): :func:`job` runs the collective's registered
  ``oneshot`` schedule (algorithms/<collective>.py) as a program: flattened
  once per call shape and bound to the group's arena (:class:`Programs`),
  then run on the call's arrays. Its steps put my data into my region of
  the call's parity, enter (``Arena.oneshot``: fingerprint exchange and
  the one signal), and read or reduce every rank's region. With the compiled
  helper the program runs in its interpreter, one C call (``Arena.run_program``),
  where its fold has a compiled kernel and its buffers are contiguous.
* Decided after the entry (gather, scatter, all_to_all: a rank does not
  know the other ranks' sizes): :class:`Staged`. Each rank stages its data
  before entering if its own part is small enough, and
  ``ProcessGroup._submit`` reads the regions if every rank did.

Plus all_to_all's split header (:class:`Layout`, :func:`split_header`),
published on every path of all_to_all, schedules included. The tiny-call
lane (meshcast/lanes.py) runs the same protocol in the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ops
from ..algorithms._execute import BoundProgram
from ..algorithms._onehost import split_head  # the header's size: one rule for both
from ..algorithms._program import NO_BUFFER, as_pieces
from ..errors import MismatchError
from ..topology import rotation
from . import flatten_shape

if TYPE_CHECKING:
    from .._fingerprint import Fingerprint
    from ..transport.arena import Arena
    from . import GroupView, Job


@dataclasses.dataclass(frozen=True)
class Layout:
    """Per-rank facts of a call that its fingerprint cannot hold (all_to_all's split
    sizes): ``publish(parity)`` writes them into my one-shot region before the entry,
    ``check(parity)`` reads every rank's after it and raises the same MismatchError on
    every rank if they disagree. Runs on every path, forced algorithms included."""

    publish: Callable[[int], None]
    check: Callable[[int], None]


@dataclasses.dataclass(frozen=True)
class Staged:
    """The one-shot form of a collective whose layout only the entry reveals.

    gather, scatter and all_to_all cannot choose the one-shot path before the
    call, as the others do: a rank does not know the other ranks' sizes. So
    each rank whose own contribution is small stages it in its one-shot region
    (of the call's parity) *before* entering, and after the entry, where every
    rank learns every rank's count, ``fits(counts)`` decides the same way on
    every rank whether all of them staged. If so, ``read`` takes what this rank
    needs straight from the regions and the schedule never runs; if not, the
    staged bytes are ignored. Regions of parity ``p`` are reused two calls
    later, when every rank has entered the call in between, i.e. finished this one.

    stage(parity): write my contribution into my region if it is small enough
        (the same rule ``fits`` applies to every rank's count).
    fits(counts): whether every rank staged (rank-invariant: counts only).
    read(counts, regions): copy this rank's result out of every rank's region.
    """

    stage: Callable[[int], None]
    fits: Callable[[list[int]], bool]
    read: Callable[[list[int], list[np.ndarray]], None]


@functools.lru_cache(maxsize=16)
def split_header(n: int) -> struct.Struct:
    """all_to_all's per-rank header: offsets of my pieces, send counts, receive counts."""
    return struct.Struct(f"<{3 * n}q")


def pack_split_header(send: Sequence[int], recv: Sequence[int]) -> bytes:
    """My all_to_all split header (:func:`split_header`) for element counts ``send`` to
    and ``recv`` from each rank: where each piece starts in my input, then the counts."""
    starts = itertools.accumulate(send[:-1], initial=0)
    return split_header(len(send)).pack(*starts, *send, *recv)


def split_offsets(group: GroupView, seq: int, regions: Sequence[np.ndarray], isz: int
                  ) -> list[int]:
    """After all_to_all ``seq``'s entry: where my piece lies (bytes) in each rank's
    input, read from the split headers in every rank's one-shot region (``regions``, of
    the call's parity). Every rank reads the same headers, so every rank raises the
    same MismatchError when a rank sends another a count it does not expect."""
    n, me = group._size, group._rank
    layout = split_header(n)
    table = [layout.unpack_from(g) for g in regions]
    bad = [(q, r) for q in range(n) for r in range(n)
           if table[q][n + r] != table[r][2 * n + q]]
    if bad:
        q, r = bad[0]
        raise MismatchError(
            f"all_to_all #{seq} on {group.group_name}: rank {group.global_ranks[q]} "
            f"sends {table[q][n + r]} elements to rank {group.global_ranks[r]}, which "
            f"expects {table[r][2 * n + q]} from it (check the split sizes; "
            f"{len(bad)} pair(s) disagree)")
    return [row[me] * isz for row in table]


def resume_program(parity: int, arena: Any, seq: int, entry: tuple, prog: bytes, inp: Any,
                   out: Any, status: int) -> None:
    """The records after the rooted entry ``entry`` of call ``seq``'s program ``prog``,
    once Python finished that entry (``status``: what the compiled interpreter returned,
    the record to resume from and why it stopped) and every rank agreed. The records
    left hold no round, so anything but 0 is a bug: it raises, never leaves out unwritten."""
    left = arena.compiled_program(seq, entry, arena.spin_ns, prog, inp, out, -1, status >> 3)
    if left:
        raise AssertionError(f"collective #{seq}: the program's records after its entry "
                             f"returned {left}")


# ------------------------------------------------- decided before the call


class Programs:
    """A group's one-shot calls decided before the call, as programs.

    Each is its collective's registered ``oneshot`` schedule (algorithms/),
    flattened once per call shape (``_program.flatten``: collective, working
    dtype, root, input and output lengths, per-rank counts) and bound to the
    group's arena (``_execute.BoundProgram``); a call then binds the program to
    its own arrays and runs it. The last :data:`KEEP` shapes are kept.
    """

    KEEP = 1024  # (as the lane's plans: see lanes._PLANS_MAX)

    def __init__(self, group: GroupView) -> None:
        self.group = group
        self._bound: dict[tuple, BoundProgram] = {}

    def get(self, kind: str, dtype: np.dtype, root: int, n_in: int | None, n_out: int | None,
            counts: tuple[int, ...] | None, listed: int = NO_BUFFER) -> BoundProgram:
        """The bound program of a call of this shape (``n_in``/``n_out``: element counts
        of the flat input and output, None where the call has none). ``listed``: the side
        (``_program.INPUT`` or ``OUTPUT``) the call gives as a list of one array per rank
        (``_program.as_pieces``)."""
        key = (kind, dtype, root, n_in, n_out, counts, listed)
        bound = self._bound.get(key)
        if bound is None:
            g = self.group
            # (all_to_all's reads every rank's split header: flattened presuming each
            # is mine, equal splits, which the program checks)
            program = flatten_shape(g, kind, "oneshot", dtype, root, n_in, n_out, counts,
                                    presume=kind == "all_to_all")
            if listed != NO_BUFFER:
                program = as_pieces(program, listed, g._size)
            bound = BoundProgram(program, g.arena)
            if len(self._bound) >= self.KEEP:
                del self._bound[next(iter(self._bound))]
            self._bound[key] = bound
        return bound


class _OneShot:
    """One one-shot call: the job run in call order, and its program's context
    (``_execute.ProgramContext``)."""

    __slots__ = ("group", "bound", "buffers", "fp", "what", "finish", "op", "parity",
                 "per_rank_counts", "one_sided", "deadline")

    def __init__(self, group: GroupView, bound: BoundProgram, buffers: tuple, fp: Fingerprint,
                 what: str, finish: Callable[[], None], op: Any, per_rank_counts: bool,
                 one_sided: bool) -> None:
        self.group, self.bound, self.buffers, self.fp = group, bound, buffers, fp
        self.what, self.finish, self.op = what, finish, op
        self.parity, self.per_rank_counts = fp.seq & 1, per_rank_counts
        self.one_sided = one_sided

    def __call__(self) -> None:
        group = self.group
        bound = self.bound
        group.last_algorithm = bound.program.name
        self.deadline = group._deadline()
        kernel = self._compiled_kernel()
        if kernel is not None:
            group.last_compiled = True
            group.arena.run_program(bound.packed, self.fp, self.what, self.deadline,
                                    self.buffers, kernel, self.per_rank_counts, self.one_sided)
        else:
            group.last_compiled = False
            group.arena.settle()  # the program writes my region before it enters
            bound(self, self.buffers)
        self.finish()

    def _compiled_kernel(self) -> int | None:
        """The fold code the compiled interpreter runs this call with (-1: it folds
        nothing), or None when Python's steps run it: the program or the arena has
        no compiled form, a buffer is not C-contiguous, or no kernel folds this op."""
        bound = self.bound
        if bound.packed is None or not all(
                b is None or b.flags.c_contiguous for b in self.buffers):
            return None
        if not bound.folds:
            return -1
        return ops.compiled_kernel(self.op, bound.program.dtype)

    def enter(self) -> None:
        self.group.arena.oneshot(self.fp, self.what, self.deadline, self.per_rank_counts)


def job(group: GroupView, programs: Programs, fp: Fingerprint, what: str, kind: str,
        dtype: np.dtype, inp: np.ndarray | None, out: np.ndarray | None,
        finish: Callable[[], None], *, op: ops.ReduceOp | None = None, root: int = -1,
        counts: Sequence[int] | None = None, one_sided: bool = False) -> Job:
    """A one-shot call as a job: its collective's ``oneshot`` program (see
    :class:`Programs`) run on ``inp`` and ``out`` (flat arrays of ``dtype``, or None as
    in the Plan's table of buffers), then ``finish()``.

    ``counts``: every rank's element count (all_gather, reduce_scatter), whose
    fingerprints compare per-rank counts. ``one_sided``: the compiled interpreter
    may run the program's entry one-sided (a synchronous call: see ``_plan.Enter``);
    an async call's awaits every rank, so its errors land in its Work."""
    shape = None if counts is None else tuple(counts)
    if inp is not None and inp.ndim != 1:  # the program addresses flat arrays
        inp = inp.reshape(-1)
    if out is not None and out.ndim != 1:
        out = out.reshape(-1)
    bound = programs.get(kind, dtype, root, None if inp is None else inp.size,
                         None if out is None else out.size, shape)
    return _OneShot(group, bound, (inp, out), fp, what, finish, op, shape is not None,
                    one_sided)


# ------------------------------------------------- decided after the entry


def gather(arena: Arena, root: int, me: int, mine: np.ndarray,
           outs: list[np.ndarray] | None, isz: int, fits: Callable[[int], bool]) -> Staged:
    """gather's :class:`Staged`: every rank but the root stages ``mine`` (bytes) when
    ``fits(its bytes)`` (the rule on the largest piece, ``_select.gather_oneshot``);
    the root copies every region into its ``outs``."""

    def stage(parity: int) -> None:
        if me != root and mine.nbytes and fits(mine.nbytes):
            arena.small[me][parity][:mine.nbytes] = mine

    def read(counts: list[int], regions: list[np.ndarray]) -> None:
        for q, out in enumerate(outs or ()):
            out[:] = mine if q == me else regions[q][:out.nbytes]

    return Staged(stage, lambda counts: fits(max(counts) * isz), read)


def scatter(arena: Arena, root: int, me: int, out: np.ndarray, inp: np.ndarray | None,
            isz: int, fits: Callable[[int, int], bool], largest: int) -> Staged:
    """scatter's :class:`Staged`: the root stages its whole ``inp`` (bytes, every rank's
    piece) when ``fits(total bytes, largest piece's bytes)`` (``largest``: the root's
    largest piece, 0 when unknown: then it stages whatever the counts say); every
    rank copies its piece to ``out``."""

    def stage(parity: int) -> None:
        if inp is not None and fits(inp.nbytes, largest):
            arena.small[me][parity][:inp.nbytes] = inp

    def read(counts: list[int], regions: list[np.ndarray]) -> None:
        lo = sum(counts[:me]) * isz
        src = regions[root] if inp is None else inp
        out[:] = src[lo:lo + counts[me] * isz]

    return Staged(stage, lambda counts: fits(sum(counts) * isz, max(counts) * isz), read)


def all_to_all(group: GroupView, seq: int, out: np.ndarray, mine: np.ndarray,
               send: Sequence[int], recv: Sequence[int], isz: int, limit: int
               ) -> tuple[Layout, Staged, list[int], list[int], list[bool]]:
    """all_to_all's split header and :class:`Staged` form, for ``mine`` (my input, bytes)
    split by ``send`` and ``out`` (bytes) split by ``recv`` (element counts per rank).

    Returns ``(layout, staged, offsets, at, alike)``: ``offsets[q]`` is where my piece
    lies in rank q's input (filled by ``layout.check``), ``at[q]`` where q's piece goes
    in ``out``; the single-copy body reads by them too. ``alike[0]`` (set by the
    check): every rank's header is mine, so every rank splits evenly the same way (the
    single-copy program's presumption).
    """
    arena, n, me = group.arena, group._size, group._rank
    # Split sizes are per rank and not in the fingerprint, so every rank publishes
    # its own in a header of its one-shot region before entering: [offset of my
    # piece for each rank, send counts, receive counts] (int64), then, for the
    # one-shot path, my input. After the entry every rank checks the whole matrix
    # (the same verdict and message everywhere) and finds its pieces' offsets.
    head = split_head(n)
    # Plain ints and struct, not NumPy: at small sizes these few lines were most of
    # the call's cost.
    sd = list(itertools.accumulate(send, initial=0))
    rd = [x * isz for x in itertools.accumulate(recv, initial=0)]
    layout = split_header(n)
    header = pack_split_header(send, recv)
    uniform = len(set(send) | set(recv)) <= 1
    offsets: list[int] = []  # where my piece lies in each rank's input (after the check)
    alike = [False]

    def publish(parity: int) -> None:
        memoryview(arena.small[me][parity])[:layout.size] = header

    def check(parity: int) -> None:
        regions = [arena.small[q][parity] for q in range(n)]
        alike[0] = uniform and all(memoryview(g)[:layout.size] == header for g in regions)
        if alike[0]:  # everyone splits evenly and the same way: nothing to cross-check
            offsets[:] = [sd[me] * isz] * n
            return
        offsets[:] = split_offsets(group, seq, regions, isz)

    def stage(parity: int) -> None:
        if mine.nbytes <= limit:
            # Everything but my own piece, which only I read (from my input): at
            # 2 ranks that halves the copy in.
            region = arena.small[me][parity]
            lo, hi = sd[me] * isz, sd[me + 1] * isz
            region[head:head + lo] = mine[:lo]
            region[head + hi:head + mine.nbytes] = mine[hi:]

    def read(counts: list[int], regions: list[np.ndarray]) -> None:
        for q in rotation(me, n):
            src, at = (mine, offsets[q]) if q == me else (regions[q], head + offsets[q])
            out[rd[q]:rd[q + 1]] = src[at:at + rd[q + 1] - rd[q]]

    return (Layout(publish, check),
            Staged(stage, lambda counts: max(counts) * isz <= limit, read), offsets, rd,
            alike)
