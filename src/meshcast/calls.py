"""Each collective's call, in one place: what its fingerprint compares, which path
it takes, the Plan its schedules get and how it finishes.

:class:`~meshcast.group.ProcessGroup` validates nothing more and decides
nothing per collective: its method for a collective resolves the algorithm
(``MESHCAST_ALGO``) and calls the function of the same name here, with the
group's :class:`Machinery`. A function here then, for its collective:

* makes the arrays the call runs on: float32 working copies for float16 and
  bfloat16 reductions (not for a SUM or PRODUCT that goes one-shot or single-copy:
  :func:`_native`), staging where the schedules want one flat array;
* picks the path, as algorithms/_select.py says (every rule reads only the
  group and fingerprint fields, so every rank picks alike): in place in a
  symmetric allocation, one-shot, or the group's call protocol
  (:meth:`ProcessGroup._submit`), which takes single-copy when it fits and a
  schedule otherwise;
* names the fingerprint's fields (dtype, count, op, root, counts' hash);
* builds the Plan the schedules run on (called with every rank's counts);
* finishes: AVG's division, the write-back of working copies and staging,
  the Buffer's own finish (torch tensors), the front door's ``finish``.

Ranks are group ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops
from ._fingerprint import counts_hash
from .algorithms import _select as _fast
from .algorithms._plan import Plan
from .algorithms._program import INPUT, OUTPUT
from .buffers import Buffer, span, store_back, working_copy
from .paths import oneshot, single_copy
from .paths import symmetric as symmetric_path
from .paths.single_copy import SingleCopy, exposing

if TYPE_CHECKING:
    from ._fingerprint import Fingerprint
    from .algorithms._select import HostCaps
    from .paths import GroupView, Job
    from .symmetric import Region
    from .transport.arena import Arena
    from .work import Work

Entered = tuple[int, list[int]]  # (seq, every rank's counts) of a call a lane hands over


class Machinery:
    """What a call uses of its group: the group itself (the paths take it), its
    rank and size, and its call machinery, bound once per group (group.py).

    ``next(kind, algorithm, oneshot=False, seq=None, **fields)`` draws the
    call's fingerprint; ``what(kind, seq)`` names the call for errors;
    ``run(what, job, async_op)`` runs a job in call order; ``submit(...)`` is
    the call protocol (publish, stage, expose, enter, then one path);
    ``region(flat, algorithm, min_bytes)`` finds a symmetric region the call
    may use in place and ``in_place(kind, region, body, async_op, **fields)``
    runs there.
    """

    __slots__ = ("group", "rank", "size", "caps", "arena", "programs", "copies", "next",
                 "what", "run", "submit", "region", "in_place")
    group: GroupView
    rank: int
    size: int
    caps: HostCaps
    arena: Arena
    programs: oneshot.Programs  # the group's one-shot programs, per call shape
    copies: single_copy.CopyPrograms  # ... and its single-copy ones
    next: Callable[..., Fingerprint]  # ProcessGroup._next
    what: Callable[[str, int], str]  # ProcessGroup._what
    run: Callable[[str, Job, bool], Work | None]  # ProcessGroup._run
    submit: Callable[..., Work | None]  # ProcessGroup._submit
    region: Callable[[np.ndarray, str | None, int], Region | None]  # ProcessGroup._region
    in_place: Callable[..., Work | None]  # ProcessGroup._in_place

    def __init__(self, group: GroupView, **machinery: Callable[..., Any]) -> None:
        self.group = group
        self.rank, self.size = group.rank(), group.size()
        self.caps, self.arena = group.caps, group.arena
        self.programs = oneshot.Programs(group)
        self.copies = single_copy.CopyPrograms(group)
        for name, method in machinery.items():
            setattr(self, name, method)

    def plan(self, kind: str, dtype: np.dtype, **kw: Any) -> Plan:
        """The Plan of a call that runs a schedule."""
        return Plan(coll=kind, rank=self.rank, size=self.size, dtype=dtype,
                    slot_bytes=self.arena.slot_bytes if self.size > 1 else 0, **kw)


def _nothing() -> None:
    pass


def _oneshot(m: Machinery, nbytes: int, algorithm: str | None) -> bool:
    """Whether a call of ``nbytes`` takes the one-shot path (same verdict on every rank:
    it depends only on the group and on fields the fingerprint compares)."""
    return algorithm is None and _fast.oneshot(m.caps, nbytes)


def _native(m: Machinery, kind: str, dtype_name: str, op: Any, algorithm: str | None,
            nbytes: int, largest: int | None = None) -> bool:
    """Whether a float16 or bfloat16 reduction runs on its own data, without a float32
    working copy: SUM and PRODUCT where the call (``kind``, of ``nbytes`` per rank;
    ``largest``: reduce_scatter's largest piece) takes the one-shot or the single-copy
    path (every rule reads only the group and fingerprint fields: every rank decides
    alike). Their programs fold every rank's operand at once, widened to float32 in
    rank order and rounded once, in the compiled kernels as in ops.reduce_many: the
    working copy's result, with half the bytes and no copy to make or round back. The
    schedules fold partial sums that travel between ranks (rounded at every step), and
    AVG divides after the fold (rounded twice): those keep the working copy. (Every
    other dtype returns at the first test.)"""
    if (dtype_name not in ("float16", "bfloat16")
            or op not in (ops.ReduceOp.SUM, ops.ReduceOp.PRODUCT)
            or algorithm is not None or m.size < 2):
        return False
    if _fast.oneshot(m.caps, nbytes):
        return True
    if kind == "all_reduce":
        return _fast.all_reduce_single_copy(m.caps, nbytes)
    return _fast.single_copy(m.caps, nbytes if largest is None else largest)


def _working(buf_flat: np.ndarray, dtype_name: str, op: Any, native: bool = False
             ) -> tuple[np.ndarray, bool]:
    """The array the reduction runs on (float32 for float16/bfloat16, unless ``native``:
    see :func:`_native`; bfloat16 then as ops.BFLOAT16)."""
    if native and dtype_name == "bfloat16":
        return buf_flat.view(ops.BFLOAT16), False
    if dtype_name in ("float16", "bfloat16") and not native:
        work_dtype = ops.working_dtype(np.dtype(np.float16), op)
        if dtype_name == "bfloat16" or work_dtype != buf_flat.dtype:
            return working_copy(buf_flat, dtype_name, work_dtype), True
    return buf_flat, False


def _reduced(n: int, op: ops.ReduceOp, result: np.ndarray, copied: bool, buf: Buffer) -> None:
    """Finish a reduction into ``buf``: AVG's division of ``result`` by the group size
    ``n``, then ``result`` rounded back into ``buf`` if it is a copy, then ``buf``'s own
    finish (a torch tensor's write-back)."""
    if op is ops.ReduceOp.AVG:
        ops.finish_average(result, n)
    if copied:
        store_back(buf.flat, result, buf.dtype_name)
    buf.finish()


def barrier(m: Machinery, algorithm: str | None, async_op: bool) -> Work | None:
    small = _oneshot(m, 0, algorithm)
    fp = m.next("barrier", algorithm, small)
    if small:
        what = m.what("barrier", fp.seq)
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "barrier",
                                       np.dtype(np.uint8), None, None, _nothing), async_op)
    return m.submit("barrier", fp, lambda c: m.plan("barrier", np.dtype(np.uint8)),
                    lambda p: None, algorithm=algorithm, async_op=async_op)


def broadcast(m: Machinery, buf: Buffer, root: int, algorithm: str | None, async_op: bool
              ) -> Work | None:
    small = algorithm is None and _fast.oneshot_broadcast(m.caps, buf.nbytes)
    region = (m.region(buf.flat, algorithm, 0) if _fast.symmetric_broadcast(m.caps, buf.nbytes)
              else None)
    # (bytes: the reader-split copy cuts them anywhere)
    program = None if region is None else symmetric_path.program(
        m.copies, "broadcast", np.dtype(np.uint8), None, buf.flat.nbytes, OUTPUT, root=root)
    if region is not None and program is not None:
        parts = region.views(buf.flat.nbytes, np.dtype(np.uint8))
        return m.in_place("broadcast", region, symmetric_path.call(
            m.group, program, None, parts, buf.finish), async_op, dtype=buf.dtype_name,
            root=root, count=buf.count)
    fp = m.next("broadcast", algorithm, small, dtype=buf.dtype_name, root=root, count=buf.count)
    if small:
        what = m.what("broadcast", fp.seq)
        # the root's data are unchanged: nothing to write back into a staged source
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "broadcast",
                                       buf.flat.dtype, None, buf.flat,
                                       _nothing if m.rank == root else buf.finish, root=root,
                                       one_sided=not async_op),
                     async_op)
    data = buf.flat.reshape(-1).view(np.uint8)
    # count and dtype are in the fingerprint, so every rank decides alike
    single = SingleCopy(exposing(data), lambda _: _fast.single_copy(m.caps, data.nbytes),
                        None, program=lambda _: m.copies.bound(
                            "broadcast", buf.flat.dtype, root, None, buf.flat))
    return m.submit("broadcast", fp,
                    lambda c: m.plan("broadcast", buf.flat.dtype, root=root, output=buf.flat),
                    lambda p: buf.finish(), algorithm=algorithm, async_op=async_op,
                    single=single)


def all_reduce(m: Machinery, buf: Buffer, op: ops.ReduceOp, algorithm: str | None,
               async_op: bool) -> Work | None:
    work_arr, upcast = _working(buf.flat, buf.dtype_name, op, _native(
        m, "all_reduce", buf.dtype_name, op, algorithm, buf.nbytes))
    sched_op = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op  # the finish divides

    def finish(plan: Plan | None) -> None:
        _reduced(m.size, op, work_arr, upcast, buf)

    small = _oneshot(m, work_arr.nbytes, algorithm)
    region = None
    if not upcast:
        region = m.region(work_arr, algorithm,
                          _fast.SYMMETRIC_ALL_REDUCE_MIN_BYTES if small else 0)
    program = None if region is None else symmetric_path.program(
        m.copies, "all_reduce", work_arr.dtype, None, work_arr.size, OUTPUT, op=sched_op)
    if region is not None and program is not None:
        parts = region.views(work_arr.nbytes, work_arr.dtype)
        return m.in_place("all_reduce", region, symmetric_path.call(
            m.group, program, None, parts, lambda: finish(None)), async_op,
            dtype=buf.dtype_name, op=op.name, count=buf.count)
    fp = m.next("all_reduce", algorithm, small, dtype=buf.dtype_name, op=op.name,
                count=buf.count)
    if small:
        what = m.what("all_reduce", fp.seq)
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "all_reduce",
                                       work_arr.dtype, work_arr, work_arr,
                                       lambda: finish(None), op=sched_op), async_op)
    # count and dtype are in the fingerprint, so every rank decides alike
    single = SingleCopy(exposing(work_arr),
                        lambda _: _fast.all_reduce_single_copy(m.caps, work_arr.nbytes),
                        None, program=lambda _: m.copies.bound(
                            "all_reduce", work_arr.dtype, -1, None, work_arr, op=sched_op))
    return m.submit("all_reduce", fp,
                    lambda c: m.plan("all_reduce", work_arr.dtype, op=sched_op, input=work_arr,
                                     output=work_arr),
                    finish, algorithm=algorithm, async_op=async_op, single=single)


def reduce(m: Machinery, buf: Buffer, op: ops.ReduceOp, root: int, algorithm: str | None,
           async_op: bool) -> Work | None:
    work_arr, upcast = _working(buf.flat, buf.dtype_name, op, _native(
        m, "reduce", buf.dtype_name, op, algorithm, buf.nbytes))
    # The schedules reduce into a separate output; the one-shot and single-copy
    # paths straight into the root's own array (no fresh pages to fault in).
    out = np.empty_like(work_arr) if m.rank == root else None
    sched_op = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

    def finish(plan: Plan | None) -> None:
        if out is None:
            return
        result = out if plan is not None else work_arr
        _reduced(m.size, op, result, upcast or result is out, buf)

    small = _oneshot(m, work_arr.nbytes, algorithm)
    fp = m.next("reduce", algorithm, small, dtype=buf.dtype_name, op=op.name, root=root,
                count=buf.count)
    if small:
        what = m.what("reduce", fp.seq)
        # the root reduces the regions straight into its own array, now free
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "reduce", work_arr.dtype,
                                       work_arr, None if out is None else work_arr,
                                       lambda: finish(None), op=sched_op, root=root,
                                       one_sided=not async_op),
                     async_op)
    # count and dtype are in the fingerprint, so every rank decides alike
    single = SingleCopy(exposing(work_arr), lambda _: _fast.single_copy(m.caps, work_arr.nbytes),
                        None, program=lambda _: m.copies.bound(  # (into the root's own array)
                            "reduce", work_arr.dtype, root, work_arr,
                            None if out is None else work_arr, op=sched_op))
    return m.submit("reduce", fp,
                    lambda c: m.plan("reduce", work_arr.dtype, op=sched_op, root=root,
                                     input=work_arr, output=out),
                    finish, algorithm=algorithm, async_op=async_op, single=single)


def all_gather(m: Machinery, out_flat: np.ndarray, in_flat: np.ndarray, counts: Sequence[int],
               dtype_name: str, finish: Callable[[], None], algorithm: str | None,
               async_op: bool, entered: Entered | None) -> Work | None:
    counts = tuple(int(c) for c in counts)
    itemsize = in_flat.dtype.itemsize
    region = None
    if len(set(counts)) == 1:
        region = m.region(out_flat, algorithm, _fast.SYMMETRIC_MIN_BYTES)
    program = None if region is None else symmetric_path.program(
        m.copies, "all_gather", in_flat.dtype, in_flat.size, out_flat.size, OUTPUT)
    if region is not None and program is not None:
        parts = region.views(out_flat.nbytes, out_flat.dtype)
        return m.in_place("all_gather", region, symmetric_path.call(
            m.group, program, in_flat.reshape(-1), parts, finish), async_op,
            dtype=dtype_name, count=in_flat.size)
    small = (algorithm is None
             and _fast.oneshot_all_gather(m.caps, max(counts, default=0) * itemsize))
    # a lane hands a call over (entered) only past the one-shot sizes
    fp = m.next("all_gather", algorithm, small, seq=entered[0] if entered else None,
                dtype=dtype_name, count=in_flat.size, extra=counts_hash(counts))
    if small:
        what = m.what("all_gather", fp.seq)
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "all_gather",
                                       in_flat.dtype, in_flat, out_flat, finish,
                                       counts=counts), async_op)
    mine = in_flat.reshape(-1).view(np.uint8)
    single = SingleCopy(exposing(mine), single_copy.fits(m.caps, itemsize), None,
                        program=lambda c: m.copies.bound(
                            "all_gather", in_flat.dtype, -1, in_flat, out_flat, tuple(c)))
    return m.submit("all_gather", fp,
                    lambda c: m.plan("all_gather", in_flat.dtype, input=in_flat,
                                     output=out_flat, counts=counts),
                    lambda p: finish(), algorithm=algorithm, async_op=async_op,
                    per_rank_counts=True, single=single,
                    entered=entered[1] if entered else None)


def gather(m: Machinery, out_pieces: Sequence[np.ndarray] | None, in_flat: np.ndarray,
           root: int, dtype_name: str, finish: Callable[[], None], algorithm: str | None,
           async_op: bool, expected_counts: Sequence[int] | None, entered: Entered | None
           ) -> Work | None:
    fp = m.next("gather", algorithm, dtype=dtype_name, root=root, count=in_flat.size,
                extra=counts_hash(expected_counts), seq=entered[0] if entered else None)
    isz, me = in_flat.dtype.itemsize, m.rank
    mine = in_flat.reshape(-1).view(np.uint8)
    flats = [p.reshape(-1) for p in out_pieces] if out_pieces else None
    outs = [p.view(np.uint8) for p in flats] if flats else None
    # the root's pieces as one array where they lie back to back (exposed whole)
    whole = span(flats) if flats and me == root else None
    staged = oneshot.gather(m.arena, root, me, mine, outs, isz,
                            lambda largest: _fast.gather_oneshot(m.caps, largest))
    exposure, move_pieces, table = single_copy.gather(
        m.arena, root, mine, outs, None if whole is None else whole.view(np.uint8), isz, me)
    if table is not None:  # the root's piece table goes where it stages nothing: its region
        staged = dataclasses.replace(staged, stage=table)
    # The schedules gather into one flat array, spread into the pieces afterwards.
    staging: list[np.ndarray] = []

    def make_plan(counts: list[int]) -> Plan:
        if out_pieces:
            staging.append(np.empty(sum(counts), in_flat.dtype))
        return m.plan("gather", in_flat.dtype, root=root, input=in_flat,
                      output=staging[0] if staging else None, counts=tuple(counts))

    def done(plan: Plan | None) -> None:
        if staging and out_pieces:
            at = 0
            for piece in out_pieces:
                piece[...] = staging[0][at:at + piece.size]
                at += piece.size
        finish()

    def program(counts: list[int]) -> tuple | None:
        # The registered cma schedule, as the root exposed its output (its word, after
        # the entry: whole, or a table of equal pieces apart; split by a root in place on
        # the lane); a root that reads every piece itself (no region for a table) or a
        # table of uneven pieces: the body.
        word = m.arena.exposed(root, fp.seq)[2]
        if word & ~single_copy.SPLIT not in (1, single_copy.PIECE_TABLE):
            return None
        out: Any = None
        if me == root:
            out = whole if whole is not None else flats
        return m.copies.bound("gather", in_flat.dtype, root, in_flat.reshape(-1), out,
                              tuple(counts), root_splits=bool(word & single_copy.SPLIT))

    return m.submit("gather", fp, make_plan, done, algorithm=algorithm, async_op=async_op,
                    per_rank_counts=True, root_layout=root, staged=staged,
                    single=SingleCopy(exposure, single_copy.fits(m.caps, isz), move_pieces,
                                      program=program),
                    entered=entered[1] if entered else None)


def scatter(m: Machinery, out_flat: np.ndarray, in_flat: np.ndarray | None, root: int,
            dtype_name: str, finish: Callable[[], None], algorithm: str | None, async_op: bool,
            expected_counts: Sequence[int] | None, entered: Entered | None) -> Work | None:
    fp = m.next("scatter", algorithm, dtype=dtype_name, root=root, count=out_flat.size,
                extra=counts_hash(expected_counts), seq=entered[0] if entered else None)
    isz, me = out_flat.dtype.itemsize, m.rank
    out = out_flat.reshape(-1).view(np.uint8)
    inp = None if in_flat is None else in_flat.reshape(-1).view(np.uint8)
    # the root's region holds every piece: one reader's worth of bytes
    staged = oneshot.scatter(m.arena, root, me, out, inp, isz,
                             lambda total, largest: _fast.scatter_oneshot(m.caps, total, largest),
                             max(expected_counts) * isz if expected_counts else 0)
    # (the others expose their out: a root in place writes a part of each, splitting: see
    # algorithms/scatter.py::cma, whose program runs; a root on the lane says so in its
    # exposure's word)
    single = SingleCopy(exposing(inp if me == root else out), single_copy.fits(m.caps, isz),
                        None, program=lambda c: m.copies.bound(
                            "scatter", out_flat.dtype, root, None if in_flat is None
                            else in_flat.reshape(-1), out_flat.reshape(-1), tuple(c),
                            root_splits=single_copy.root_splits(m.arena, root, fp.seq)))
    return m.submit("scatter", fp,
                    lambda c: m.plan("scatter", out_flat.dtype, root=root, input=in_flat,
                                     output=out_flat, counts=tuple(c)),
                    lambda p: finish(), algorithm=algorithm, async_op=async_op,
                    per_rank_counts=True, root_layout=root, staged=staged, single=single,
                    entered=entered[1] if entered else None)


def reduce_scatter(m: Machinery, out_buf: Buffer, in_flat: np.ndarray, counts: Sequence[int],
                   op: ops.ReduceOp, finish: Callable[[], None], algorithm: str | None,
                   async_op: bool, entered: Entered | None) -> Work | None:
    counts = tuple(int(c) for c in counts)
    native = _native(m, "reduce_scatter", out_buf.dtype_name, op, algorithm, in_flat.nbytes,
                     max(counts, default=0) * in_flat.itemsize)
    in_work, in_upcast = _working(in_flat, out_buf.dtype_name, op, native)
    out_work, upcast = _working(out_buf.flat, out_buf.dtype_name, op, native)
    sched_op = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

    def done(plan: Plan | None) -> None:
        _reduced(m.size, op, out_work, upcast, out_buf)
        finish()

    region = None
    if len(set(counts)) == 1 and not in_upcast:
        region = m.region(in_work, algorithm, _fast.SYMMETRIC_MIN_BYTES)
    program = None if region is None else symmetric_path.program(
        m.copies, "reduce_scatter", in_work.dtype, in_work.size, out_work.size, INPUT,
        op=sched_op)
    if region is not None and program is not None:
        parts = region.views(in_work.nbytes, in_work.dtype)
        return m.in_place("reduce_scatter", region, symmetric_path.call(
            m.group, program, parts, out_work.reshape(-1), lambda: done(None)), async_op,
            dtype=out_buf.dtype_name, op=op.name, count=out_buf.count)
    small = _oneshot(m, in_work.nbytes, algorithm)
    fp = m.next("reduce_scatter", algorithm, small, seq=entered[0] if entered else None,
                dtype=out_buf.dtype_name, op=op.name, count=out_buf.count,
                extra=counts_hash(counts))
    if small:
        what = m.what("reduce_scatter", fp.seq)
        return m.run(what, oneshot.job(m.group, m.programs, fp, what, "reduce_scatter",
                                       in_work.dtype, in_work, out_work, lambda: done(None),
                                       op=sched_op, counts=counts), async_op)
    single = SingleCopy(exposing(in_work), single_copy.fits(m.caps, in_work.dtype.itemsize),
                        None, program=lambda _: m.copies.bound(
                            "reduce_scatter", in_work.dtype, -1, in_work, out_work,
                            tuple(counts), op=sched_op))

    def schedule_plan(c: Any) -> Plan:
        # The schedules (ring, direct) write their output while they still read the
        # input: an output inside the input (in place, as NCCL allows) gets a copy of
        # the input to read. (One-shot and single-copy read theirs first.)
        src = in_work.copy() if np.may_share_memory(in_work, out_work) else in_work
        return m.plan("reduce_scatter", in_work.dtype, op=sched_op, input=src,
                      output=out_work, counts=counts)

    return m.submit("reduce_scatter", fp, schedule_plan,
                    done, algorithm=algorithm, async_op=async_op, per_rank_counts=True,
                    single=single, entered=entered[1] if entered else None)


def all_to_all(m: Machinery, out_flat: np.ndarray, in_flat: np.ndarray,
               send_counts: Sequence[int], recv_counts: Sequence[int], dtype_name: str,
               finish: Callable[[], None], algorithm: str | None, async_op: bool,
               entered: Entered | None) -> Work | None:
    if np.may_share_memory(in_flat, out_flat):
        # In place (or lists spanning the same memory): the peers must read what I
        # send while I write what I receive, so what I send is staged first.
        in_flat = in_flat.copy()
    fp = m.next("all_to_all", algorithm, dtype=dtype_name, count=in_flat.size,
                seq=entered[0] if entered else None)
    send = tuple(int(c) for c in send_counts)
    recv = tuple(int(c) for c in recv_counts)
    n, isz = m.size, in_flat.dtype.itemsize
    mine = in_flat.reshape(-1).view(np.uint8)
    out = out_flat.reshape(-1).view(np.uint8)
    head = oneshot.split_head(n)
    limit = _fast.all_to_all_direct_limit(m.caps, head)
    layout, staged, offsets, at, alike = oneshot.all_to_all(m.group, fp.seq, out, mine, send,
                                                            recv, isz, limit)
    # Where every rank splits evenly the same way, the registered cma schedule's program
    # (flattened on that presumption, which its EXPECTs check again); else the body.
    single = SingleCopy(exposing(mine), lambda counts: _fast.all_to_all_single_copy(
        m.caps, max(counts) * isz, head),
                        single_copy.read_pieces(out, mine, at, offsets, m.rank, n),
                        program=lambda _: m.copies.bound(
                            "all_to_all", in_flat.dtype, -1, in_flat, out_flat)
                        if alike[0] else None)
    return m.submit("all_to_all", fp,
                    lambda c: m.plan("all_to_all", in_flat.dtype, input=in_flat,
                                     output=out_flat, counts=send, recv_counts=recv),
                    lambda p: finish(), algorithm=algorithm, async_op=async_op,
                    per_rank_counts=True, layout=layout, staged=staged, single=single,
                    entered=entered[1] if entered else None)
