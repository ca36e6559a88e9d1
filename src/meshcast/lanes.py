"""The lane for tiny synchronous calls on NumPy arrays: the one-shot protocol with no general machinery.

A collective of a few bytes costs what Python spends around it: argument
checks, Fingerprint objects, message strings, NumPy scalar accesses (about
13 us for an 8-byte all_reduce through the general path). For the calls a
program repeats (same group, dtype, shape and op or root), this lane caches
what the general path recomputes every time: the packed fingerprint tail,
views of the arena's one-shot regions shaped like the arrays, the reduction
kernel. all_reduce, broadcast, reduce, all_gather (into a tensor or a
list), reduce_scatter (of a tensor or a list) and barrier hold their
collective's registered ``oneshot`` schedule as a packed program (the general
path's, paths.oneshot.Programs; a list's pieces its buffers), and a call is
one run of the compiled interpreter (``Round.program``: copy in, one signal,
the program's reads and folds; broadcast's and reduce's entries one-sided,
as their schedules say: a broadcast root awaits nobody). Those without a
compiled fold for their op (complex) are one round
(:meth:`Arena.tiny_oneshot`), then NumPy's fold of the regions. gather,
scatter and all_to_all run their programs too, their entry the general path's
(a rooted entry: every rank's own fingerprint, phase 0), since they are
decided after it; all_to_all's program is flattened presuming every rank's
split header is mine (equal splits) and checks that it is. Uneven splits and a
gather's or scatter's root whose pieces differ in size have modules of their own
(uneven_all_to_all.py, uneven_rooted.py).

Rule: the lane runs exactly the one-shot path of the ProcessGroup method it
stands for (same fingerprint bytes, same data layout, same operand order),
or, for all_reduce, all_gather, reduce_scatter, all_to_all, gather and
scatter past it, the same single-copy path after its own entry, so one rank
may take the lane while another takes the general path. A call the lane
cannot take (torch tensors, non-contiguous or read-only arrays,
float16/bfloat16 reductions, other sizes outside the one-shot range,
symmetric buffers large enough for their own path, an op invalid for the
dtype) makes its method return False having done nothing, and the front door
falls back to the general path, which validates and raises as usual.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _wait, ops, uneven_all_to_all, uneven_rooted
from ._fingerprint import Fingerprint, counts_hash, path_digest
from .algorithms import _select as _fast
from .algorithms._program import BOTH, INPUT, NO_BUFFER, OUTPUT
from .buffers import SUPPORTED, Staging, as_buffer
from .errors import InvalidUsage
from .paths import GroupView, single_copy
from .paths import symmetric as symmetric_path
from .paths.oneshot import Programs, pack_split_header, resume_program, split_head, split_header
from .transport.shm import KIND_P2P
from .work import P2PWork, Work

_MOVED_MAX = 256  # finished p2p Works a lane keeps (see TinyCallLane.moved)
_SEQ = struct.Struct("<Q")  # the fingerprint's first field (see _fingerprint._STRUCT)
# Call shapes a lane keeps plans for (the oldest goes first). A loop over a model's
# parameters all-reduces one tensor of each shape in turn: a working set of a hundred or
# more shapes, each rebuilt on every visit (about 45 us) once the cache is smaller.
_PLANS_MAX = 1024
# dtypes moved without any conversion, and reduced (float16 and bfloat16 as _folds_here
# says), by ops.dtype_name: bfloat16 is ops.BFLOAT16, which _api._torch_view makes of a
# bfloat16 tensor
_MOVE_DTYPES = ops.FAST_DTYPES | {"float16", "bfloat16"}


def _half(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is float16 or bfloat16 (ops.BFLOAT16)."""
    return dtype == np.float16 or dtype == ops.BFLOAT16


def _folds_here(dtype: np.dtype, op: ops.ReduceOp) -> bool:
    """Whether the lane reduces ``dtype`` with ``op``: float16 and bfloat16 only with SUM
    and PRODUCT, which the programs fold in float32 and round once, the general path's
    result (calls._native); AVG, MIN and MAX go there (a float32 working copy, or
    NumPy)."""
    return not _half(dtype) or op in (ops.ReduceOp.SUM, ops.ReduceOp.PRODUCT)


class _What:
    """Names the group's current call of ``kind`` for messages, formatted only when one
    is needed (while the call runs, so the arena's seq is the call's)."""

    __slots__ = ("group", "kind")

    def __init__(self, group: GroupView, kind: str) -> None:
        self.group, self.kind = group, kind

    def __str__(self) -> str:
        return self.group._what(self.kind, self.group.arena.seq)


class _P2PWhat:
    """Names a point-to-point message for a finished Work, formatted only when shown."""

    __slots__ = ("group", "verb", "peer", "tag")

    def __init__(self, group: GroupView, verb: str, peer: int, tag: int) -> None:
        self.group, self.verb, self.peer, self.tag = group, verb, peer, tag

    def __str__(self) -> str:
        way = "to" if self.verb == "send" else "from"
        return f"{self.verb} {way} rank {self.peer} (tag {self.tag}) on {self.group.group_name}"


class TinyCallLane:
    """A group's tiny-call lane (one per :class:`~meshcast.group.ProcessGroup`)."""

    def __init__(self, group: GroupView, programs: Programs,
                 copies: single_copy.CopyPrograms) -> None:
        self.group = group
        self.plans: dict[tuple, tuple | bool] = {}
        self._last_address: tuple[np.ndarray | None, int] = (None, 0)
        self._last_all_reduce: tuple = (None, None, None, False)
        self._last_broadcast: tuple = (None, None, None, False)
        self._last_reduce: tuple = (None, None, None, None, False)
        self._alike: Callable[[Any, np.ndarray, bool], bool] | None = None  # _alike_check
        self._last_listed: tuple = (None, None, False)  # (dtype, shape, plan): all_to_all's
        self._last_pair: dict[str, tuple] = {kind: (None,) * 7 + (False, False) for kind in (
            "all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven")}
        self._last_rooted: dict[str, tuple] = {kind: (None, None, None, False)
                                               for kind in ("gather", "scatter")}
        self._spec = _wait.spec()  # the process's wait settings (spin time)
        self._spin_ns = int(self._spec.spin_s * 1e9)
        # Per peer of this host (global rank) the compiled send and receive
        # (transport/_rings.c: Port), which take a small message's common case in one
        # C call (the transport makes none for me or without the compiled helper)
        ports = ((g, group.transport.port(g, group.group_id, KIND_P2P))
                 for g in group.global_ranks)
        self._ports = {g: port for g, port in ports if port is not None}
        # Messages this large go single-copy: through a port, send_address and its FIN
        self._copy_bytes = group.transport.port_copy_bytes or (1 << 62)
        # ... and a compiled batch's sends already from a smaller size (see _select)
        self._batch_copy_bytes = min(self._copy_bytes, _fast.BATCH_SINGLE_MIN_BYTES[
            self._spec.oversubscribed])
        self._peers = frozenset(group.global_ranks) - {group.global_ranks[group._rank]}
        self._whats = {kind: _What(group, kind) for kind in (
            "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
            "gather", "scatter", "barrier")}
        # The finished Works of messages that moved as they were posted, one per (verb,
        # peer, tag): such a Work never changes, and making one cost a third of a
        # microsecond, a tenth of an 8 B batch_isend_irecv
        self._moved: dict[tuple[str, int, int], Work] = {}
        # The compiled batch_isend_irecv of this group's P2POps, whole from the ops (see
        # make_batch): False until made, None when there is none or a tracer records
        # this lane's calls (it counts the messages in Python)
        self.batch: Any = False
        # The group's one-shot and single-copy programs (the general path's caches: a
        # call shape is flattened once, whichever path meets it first; see _program)
        self._programs = programs
        self._copy_programs = copies
        self._symmetric_calls = symmetric_path.InlineCalls(group, copies, self._whats)
        self._staging = Staging()  # (synchronous list calls' concatenations)

    # ------------------------------------------------------------------ calls

    def all_reduce(self, arr: np.ndarray, op: Any) -> bool:
        """:meth:`ProcessGroup.all_reduce` on ``arr`` in place; False if it does not qualify."""
        last = self._last_all_reduce  # a program repeats one call: skip hashing the key
        if last[0] is arr.dtype and last[1] == arr.shape and last[2] is op:
            plan = last[3]
        else:
            plan = self._plan(("all_reduce", arr.dtype, arr.shape, op), self._all_reduce_plan,
                              arr, op)
            self._last_all_reduce = (arr.dtype, arr.shape, op, plan)
        flags = arr.flags  # (_writable, inline: this is the hottest call)
        if not (flags.c_contiguous and flags.writeable):
            return bool(plan) and flags.writeable and self._through_copy(self.all_reduce, arr,
                                                                         op)
        if self.group.symmetric.allocations and self._symmetric_all_reduce(arr):
            return self._symmetric_calls.call("all_reduce", arr, None, op)
        if not plan:
            return False
        tail, views, kernel, average, code, prog = plan
        if views is None:
            return self._all_reduce_single(arr, tail, average, prog)
        group = self.group
        fifo = group.fifo
        if prog is not None:  # the registered schedule, run by the compiled interpreter
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("all_reduce", tail, prog, arr, arr, code, average)
                return True
            try:  # the hottest call of all, inline: no closures, no Work, no frame
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, arr, arr, code, 0)
                if status:
                    arena.program_rest(seq, tail, self._whats["all_reduce"],
                                       time.monotonic() + group.timeout, prog, arr, arr, code,
                                       status)
                if average:
                    ops.finish_average(arr, group._size)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "all_reduce/oneshot"
            return True
        # No compiled fold for this op (complex; or no compiled helper): the round,
        # then NumPy's fold
        self._run("all_reduce", tail, arr, _reduce_parity, arr, views, kernel, average)
        return True

    @staticmethod
    def _through_copy(call: Callable[..., bool], arr: np.ndarray, *args: Any) -> bool:
        """An in-place call (``call(arr, *args)``: all_reduce, broadcast, reduce) on a
        writable array that is not C-contiguous (a column, a transposed view): made on a
        C-contiguous copy, whose result is copied back, the copies the general path
        makes, without its frames (8 B all_reduce of a column, 2 ranks: 7.5 -> 1.5 us).
        False, nothing done: the general path."""
        tmp = np.ascontiguousarray(arr)
        if not call(tmp, *args):
            return False
        arr[...] = tmp
        return True

    def _pair_through_copy(self, kind: str, call: Callable[..., bool], out: np.ndarray,
                           inp: np.ndarray, *args: Any) -> bool:
        """A call on ``out`` and ``inp`` (all_gather, reduce_scatter, all_to_all) of a shape
        the lane takes on arrays it cannot (one not C-contiguous, or, for all_to_all,
        the two overlapping: in place): made on C-contiguous copies, the output's
        copied back, as the general path copies them. False, nothing done (refused for
        another reason: the general path)."""
        if not (self._last_pair[kind][8] and out.flags.writeable):
            return False  # (the shape's plan is False: not the lane's call)
        apart = not np.may_share_memory(inp, out)
        if out.flags.c_contiguous and inp.flags.c_contiguous and apart:
            return False
        src = inp if inp.flags.c_contiguous and apart else np.array(inp, order="C")
        dst = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
        if not call(dst, src, *args):
            return False
        if dst is not out:
            out[...] = dst
        return True

    # ------------------------------------------------------------ async calls

    def all_reduce_async(self, arr: np.ndarray, op: Any) -> Work | None:
        """:meth:`ProcessGroup.all_reduce` with ``async_op=True`` on ``arr`` in place (see
        :meth:`_start`); None: the general path."""
        plan = self._plan(("all_reduce", arr.dtype, arr.shape, op), self._all_reduce_plan,
                          arr, op)
        flags = arr.flags
        if not (flags.c_contiguous and flags.writeable):
            return None
        if self.group.symmetric.allocations and self._symmetric_all_reduce(arr):
            return self._symmetric_async("all_reduce", arr, None, op)
        if not plan:
            return None
        tail, views, kernel, average, code, prog = plan
        if views is None:
            return self._all_reduce_single(arr, tail, average, prog, async_op=True)
        if prog is not None:
            return self._start("all_reduce", tail, arr, arr, code, average, _ignore, prog=prog)
        return self._start("all_reduce", tail, arr, None, None, False, _reduce_parity, arr,
                           views, kernel, average)

    def _symmetric_async(self, kind: str, arr: np.ndarray, other: np.ndarray | None,
                         op: Any = None, root: int = -1) -> Work | None:
        """An async ``kind`` on a symmetric array ``arr`` (and ``other``, its flat array
        outside the allocation: see paths.symmetric.InlineCalls.call), as
        :meth:`_copy_call`'s async calls: the whole program in the caller up to
        ``_select.ASYNC_INLINE_MAX_BYTES``, else the entry alone there and the records
        after it on the worker thread. None: the general path."""
        bound = self._symmetric_calls.bound(kind, arr, other, op, root)
        if bound is None:
            return None
        program, inp, out, entry, averaged = bound
        group = self.group
        arena = group.arena
        what = self._whats[kind]
        whole = arr.nbytes <= _fast.ASYNC_INLINE_MAX_BYTES

        def enter(seq: int) -> tuple[int, Callable[[], None]]:
            if whole:
                got = arena.compiled_program(seq, entry, arena.spin_ns, program.packed, inp,
                                             out, program.kernel, 0)
            else:  # the entry alone: the worker runs the rest
                status = arena.compiled_rooted(seq, entry[0], None, arena.spin_ns, None)
                got = program.entered * 8 + status if status else -1

            def finish() -> None:
                group.last_algorithm = f"{kind}/symmetric"
                left = got if got >= 0 else single_copy.run_after_entry(
                    group, seq, what, program, inp, out)
                if left:
                    single_copy.run_rest(group, seq, what, program, entry, inp, out, left)
                if averaged is not None:
                    ops.finish_average(averaged, group._size)

            return max(got, 0), finish

        return self._async_single(enter, what, arr.nbytes)

    def broadcast_async(self, arr: np.ndarray, src: int) -> Work | None:
        """:meth:`ProcessGroup.broadcast` with ``async_op=True`` (see :meth:`_start`)."""
        plan = self._plan(("broadcast", arr.dtype, arr.shape, src), self._broadcast_plan,
                          arr, src)
        flags = arr.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return None
        tail, views, root, prog = plan
        if self.group.symmetric.allocations and self._symmetric_broadcast(arr):
            return self._symmetric_async("broadcast", arr, None, root=root)
        if views is None:
            return self._broadcast_single(arr, tail, prog, async_op=True)
        if prog is None:  # no compiled interpreter: the general path
            return None
        return self._start("broadcast", tail, None, arr, -1, False, _ignore, prog=prog)

    def reduce_async(self, arr: np.ndarray, op: Any, dst: int) -> Work | None:
        """:meth:`ProcessGroup.reduce` with ``async_op=True`` into global rank ``dst`` (see
        :meth:`_start`); None: the general path."""
        plan = self._plan(("reduce", arr.dtype, arr.shape, op, dst), self._reduce_plan,
                          arr, op, dst)
        if not plan or not _writable(arr):
            return None
        tail, views, kernel, average, code, root, prog = plan
        at_root = self.group._rank == root
        if prog is not None:
            return self._start("reduce", tail, arr, arr if at_root else None, code,
                               average and at_root, _ignore, prog=prog)
        if not at_root:  # no compiled interpreter: the general path
            return None
        return self._start("reduce", tail, arr, None, None, False, _reduce_parity, arr, views,
                           kernel, average)

    def barrier_async(self) -> Work | None:
        """:meth:`ProcessGroup.barrier` with ``async_op=True`` (see :meth:`_start`)."""
        plan = self._plan(("barrier",), self._barrier_plan)
        if not plan:
            return None
        if plan[1] is None:  # no compiled interpreter: the general path
            return None
        return self._start("barrier", plan[0], None, None, -1, False, _ignore, prog=plan[1])

    def all_gather_async(self, out: np.ndarray, inp: np.ndarray) -> Work | None:
        """all_gather_into_tensor with ``async_op=True`` (see :meth:`_start`)."""
        plan = self._pair_plan("all_gather", out, inp, self._all_gather_plan)
        if not plan or not out.flags.writeable:
            return None
        if self.group.symmetric.allocations and self._symmetric(out):
            return self._symmetric_async("all_gather", out, inp.reshape(-1))
        tail, views, prog = plan
        if views is None:
            return self._all_gather_single(out, inp, tail, prog, async_op=True)
        if prog is None:  # no compiled interpreter: the general path
            return None
        return self._start("all_gather", tail, inp, out, -1, False, _ignore, prog=prog,
                           per_rank_counts=True)

    def reduce_scatter_async(self, out: np.ndarray, inp: np.ndarray, op: Any) -> Work | None:
        """reduce_scatter_tensor with ``async_op=True`` (see :meth:`_start`)."""
        plan = self._pair_plan("reduce_scatter", out, inp, self._reduce_scatter_plan, op)
        if not plan or not out.flags.writeable:
            return None
        if self.group.symmetric.allocations and self._symmetric(inp):
            return self._symmetric_async("reduce_scatter", inp, out.reshape(-1), op)
        tail, views, pieces, kernel, average, code, prog = plan
        if views is None:
            return self._reduce_scatter_single(out.reshape(-1), inp.reshape(-1), tail, kernel,
                                               average, prog, async_op=True)
        if prog is not None:
            return self._start("reduce_scatter", tail, inp, out, code, average, _ignore,
                               prog=prog, per_rank_counts=True)
        flat_out = out.reshape(-1)
        return self._start("reduce_scatter", tail, inp, None, None, False, _reduce_parity,
                           flat_out, pieces, kernel, average)

    def _start(self, kind: str, tail: bytes, data: Any, out: Any, code: int | None,
               average: bool, combine: Callable[..., None], *args: Any,
               prog: bytes | None = None, per_rank_counts: bool = False) -> Work | None:
        """An ``async_op=True`` call's one-shot round, started here: when every rank is
        in within the spin time the call is done and its Work finished; otherwise the
        worker thread finishes the round (the wait, the checks, the rest; a mismatch
        lands in the Work) ahead of the calls queued behind it. So an async call keeps
        its caller no longer than the spin time, and one whose peers are there costs
        what a synchronous one does. ``prog``: the call's packed program
        (:meth:`_program`) on ``data`` and ``out``, run by the interpreter with kernel
        ``code`` (None: -1), ``average`` if its fold was a SUM to divide; the worker
        finishes a late round with :func:`_run_program`. Without ``prog``, the round of
        :meth:`_run`, then ``combine(parity, *args)`` reads the regions. None (nothing
        done): no compiled helper, or the group is busy; the general path then."""
        group = self.group
        arena = group.arena
        fast = arena.compiled_oneshot
        if fast is None:
            return None
        fifo = group.fifo
        if not fifo.enter_inline():
            return None
        what = self._whats[kind]
        try:
            seq = next(group._seq)
            kernel = -1 if code is None else code
            # (a program's one-sided entry awaits every rank here: what None; an async
            # call's errors belong to its Work, not to the next call)
            status = (fast(seq, tail, data, arena.spin_ns) if prog is None
                      else arena.compiled_program(seq, tail, arena.spin_ns, prog, data, out,
                                                  kernel, 0, None))
            group.last_algorithm = _ONESHOT[kind]
            if status != 0:
                # Not every rank is in yet, or something differs: the worker finishes the
                # round (waits, or raises what every rank raises, into the Work).
                if prog is not None:
                    return fifo.hand_over(lambda: _run_program(
                        group, what, seq, tail, prog, data, out, kernel, average,
                        per_rank_counts, status), Work(what))  # type: ignore[arg-type]
                return fifo.hand_over(lambda: _finish_oneshot(
                    arena, seq, tail, what, group.timeout, data, status, combine, args),
                    Work(what))  # type: ignore[arg-type]
            if prog is None:
                combine(seq & 1, *args)
            elif average:
                ops.finish_average(out, group._size)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return Work.finished(what)

    def _program_call(self, kind: str, tail: bytes, prog: bytes, inp: np.ndarray | None,
                      out: np.ndarray | None, kernel: int, average: bool,
                      per_rank_counts: bool = False) -> None:
        """A synchronous call that runs its packed program (:func:`_run_program`) while
        async work is queued: behind that work, in call order."""
        group = self.group
        seq = next(group._seq)
        group.fifo.call(lambda: _run_program(group, self._whats[kind], seq, tail, prog, inp,
                                             out, kernel, average, per_rank_counts),
                        f"{kind} #{seq}")
        group.last_algorithm = _ONESHOT[kind]

    def barrier(self) -> bool:
        """:meth:`ProcessGroup.barrier`: a one-shot round with no data."""
        plan = self._plan(("barrier",), self._barrier_plan)
        if not plan:
            return False
        group = self.group
        fifo = group.fifo
        tail, prog = plan
        if not fifo.enter_inline():  # queued async work goes first
            if prog is not None:
                self._program_call("barrier", tail, prog, None, None, -1, False)
            else:
                self._run("barrier", tail, None, _ignore)
            return True
        try:  # inline, as all_reduce: entering the round is the barrier
            if prog is not None:
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, None, None, -1,
                                                0)
                if status:
                    arena.program_rest(seq, tail, self._whats["barrier"],
                                       time.monotonic() + group.timeout, prog, None, None, -1,
                                       status)
            else:
                group.arena.tiny_oneshot(next(group._seq), tail, self._whats["barrier"],
                                         group.timeout, None)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        group.last_algorithm = "barrier/oneshot"
        return True

    def _all_reduce_single(self, arr: np.ndarray, tail: bytes, average: bool,
                           program: tuple | None, async_op: bool = False) -> Any:
        """all_reduce past the one-shot sizes: its registered ``cma`` schedule's
        ``program`` through :meth:`_copy_call` (None: the general path). The entry
        compares every field, so ranks that disagree get the general path's
        MismatchError."""
        if program is None:
            return None if async_op else False
        flat = arr.reshape(-1)
        return self._copy_call("all_reduce", tail, program, None, flat, flat, _entry_differs,
                               async_op, average)

    def _single_call(self, kind: str, tail: bytes, exposed: np.ndarray,
                     rest: Callable[[int, bool], None], async_op: bool,
                     header: bytes | None = None) -> Any:
        """A single-copy call (``kind``) as the group's next: its entry, ``exposed``'s memory
        exposed (the compiled entry, which waits no longer than the spin time, where
        built), then ``rest(seq, agreed)``, ``agreed`` whether every rank's fingerprint is
        mine (else rest raises or hands over to the general path), with the call's
        state (seq, deadline, name) the arena's. Synchronous: all inline; True. With
        ``async_op``: :meth:`_async_single`'s Work. False/None (nothing done): a
        synchronous call while async work is queued, or an async one where nothing was
        compiled: the general path. ``header``: bytes staged at the start of my one-shot
        region before the entry (all_to_all's split header)."""
        group = self.group
        arena = group.arena
        fast = arena.compiled_rooted
        fifo = group.fifo
        what = self._whats[kind]

        def enter(seq: int) -> tuple[int, Callable[[], None]]:
            """The compiled entry of call ``seq``: its status, and the rest of the call."""
            status = fast(seq, (tail,) * group._size, header, arena.spin_ns, exposed)

            def finish() -> None:
                deadline = time.monotonic() + group.timeout
                if status == 0:  # (the compiled entry leaves the call's state to Python)
                    arena.seq, arena.deadline, arena.what = seq, deadline, what
                rest(seq, status == 0 or arena.finish_entry(
                    seq, _SEQ.pack(seq) + tail, what, deadline, status))

            return status, finish

        if async_op:
            return None if fast is None else self._async_single(enter, what, exposed.nbytes)
        if not fifo.enter_inline():
            return False
        try:
            seq = next(group._seq)
            if fast is None:
                if header is not None:
                    arena.settle()  # (a one-sided round's readers may still be in my region)
                    memoryview(arena.small[group._rank][seq & 1])[:len(header)] = header
                arena.expose(seq, self._address(exposed), exposed.nbytes, 0)
                rest(seq, arena.packed_enter(seq, _SEQ.pack(seq) + tail, what,
                                             time.monotonic() + group.timeout))
            else:
                enter(seq)[1]()
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def _copy_call(self, kind: str, tail: bytes, program: tuple, inp: np.ndarray | None,
                   out: np.ndarray, exposed: np.ndarray,
                   differ: Callable[[GroupView, int], None], async_op: bool,
                   average: bool = False, header: bytes | None = None) -> Any:
        """A single-copy call (``kind``) as the group's next, run as its registered
        ``cma`` schedule's program (``program``: the paths.single_copy.CopyProgram and
        its rooted entry) on ``inp`` and ``out``: one compiled call exposes
        ``exposed`` (what the program's EXPOSE names), enters, copies and closes;
        where it stops (a late rank, a closing round not over within the spin time),
        :meth:`_copy_rest` goes on. Synchronous: True, or False (nothing done) while
        async work is queued. With ``async_op``: :meth:`_async_single`'s Work; past
        ``_select.ASYNC_INLINE_MAX_BYTES`` exposed, only the entry runs in the caller
        and the copies on the worker thread (overlapping the caller's work), as the
        program's records after the entry. ``average``: ``out`` is divided by the group's
        size once the program ran (AVG), unless the call was handed over. ``header``:
        what the program stages before its entry (all_to_all's split header), for an
        entry that runs without it (:meth:`_single_call`'s). ``differ`` also goes on
        where a peer's bytes are not what the program presumed (all_to_all's headers:
        another rank's split sizes differ)."""
        group = self.group
        arena = group.arena
        copy, entry = program
        if copy.packed is None:  # (no compiled interpreter: Python's executor)
            return self._python_copy(kind, tail, copy, inp, out, exposed, differ, async_op,
                                     average, header)
        if not async_op:  # inline, as all_reduce: no closures, no Work
            fifo = group.fifo
            if not fifo.enter_inline():  # queued async work goes first: the general path
                return False
            try:
                seq = next(group._seq)
                got = arena.compiled_program(seq, entry, arena.spin_ns, copy.packed, inp, out,
                                             copy.kernel, 0)
                group.last_algorithm = _SINGLE[kind]
                if (not got or self._copy_rest(kind, seq, tail, copy, entry, inp, out, got,
                                               differ)) and average:
                    ops.finish_average(out, group._size)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            return True
        whole = exposed.nbytes <= _fast.ASYNC_INLINE_MAX_BYTES

        def enter(seq: int) -> tuple[int, Callable[[], None]]:
            """Call ``seq`` from its start: its status, and the rest of the call."""
            if whole:
                got = arena.compiled_program(seq, entry, arena.spin_ns, copy.packed, inp, out,
                                             copy.kernel, 0)
            else:  # the entry alone: the worker runs the rest
                status = arena.compiled_rooted(seq, entry[0], header, arena.spin_ns, exposed)
                got = copy.entered * 8 + status if status else -1

            def finish() -> None:
                group.last_algorithm = _SINGLE[kind]
                # (every rank in: the records after the entry in one C call, and only where
                # they stop, _copy_rest's frames, as all_to_all_async does)
                left = got if got >= 0 else single_copy.run_after_entry(
                    group, seq, self._whats[kind], copy, inp, out)
                if (not left or self._copy_rest(kind, seq, tail, copy, entry, inp, out, left,
                                                differ)) and average:
                    ops.finish_average(out, group._size)

            return max(got, 0), finish

        return self._async_single(enter, self._whats[kind], exposed.nbytes)

    def _python_copy(self, kind: str, tail: bytes, copy: Any, inp: np.ndarray | None,
                     out: np.ndarray, exposed: np.ndarray,
                     differ: Callable[[GroupView, int], None], async_op: bool,
                     average: bool, header: bytes | None) -> Any:
        """:meth:`_copy_call` without the compiled interpreter: the entry through
        :meth:`_single_call`, exposing ``exposed``, then the program's records after it
        in Python's executor (paths.single_copy.run_program)."""
        group = self.group
        what = self._whats[kind]

        def rest(seq: int, agreed: bool) -> None:
            if not agreed:
                differ(group, seq)  # (raises, or the general path finished the call)
                return
            group.last_algorithm = _SINGLE[kind]
            if single_copy.run_program(group, seq, what, copy, None, inp, out, None,
                                       unpresumed=lambda: differ(group, seq)) and average:
                ops.finish_average(out, group._size)

        return self._single_call(kind, tail, exposed, rest, async_op, header)

    def _copy_rest(self, kind: str, seq: int, tail: bytes, copy: Any, entry: tuple,
                   inp: np.ndarray | None, out: np.ndarray, got: int,
                   differ: Callable[[GroupView, int], None]) -> bool:
        """The rest of :meth:`_copy_call`'s call ``seq`` where the interpreter returned
        ``got`` (-1: only the entry ran, and finished): paths.single_copy.run_program
        goes on in Python; where the ranks' fingerprints differ, ``differ(group, seq)``
        raises the MismatchError or hands the entered call over to the general path
        (False: the general path finished the call)."""
        group = self.group
        arena = group.arena
        what = self._whats[kind]
        if got == 5:  # (the lane checked the buffers: a bug, never a hang)
            arena.abort(f"{what}: the interpreter refused buffers the lane took")
            raise AssertionError(f"{what}: the interpreter refused its buffers")

        return single_copy.run_rest(group, seq, what, copy, entry, inp, out,
                                    None if got < 0 else got, differ)

    def _copy_program(self, kind: str, tail: bytes, dtype: np.dtype, root: int,
                      n_in: int | None, n_out: int | None,
                      counts: tuple[int, ...] | None = None, in_place: bool = False,
                      op: ops.ReduceOp | None = None, listed: int = NO_BUFFER) -> tuple | None:
        """A single-copy call's program (paths.single_copy.CopyPrograms: packed for the
        compiled interpreter, or Python's; ``listed``: the side given as a list of
        pieces) with its rooted entry (every rank's fingerprint tail ``tail``, no root,
        the program's own exposure), or None where its schedule does not flatten (the
        general path then runs it)."""
        copy = self._copy_programs.get(kind, dtype, root, n_in, n_out, counts, in_place, op,
                                       listed=listed)
        return None if copy is None else (copy, ((tail,) * self.group._size, -1, None))

    def _async_single(self, enter: Callable[[int], tuple[int | None, Callable[[], None]]],
                      what: str, nbytes: int) -> Work:
        """An async single-copy call as the group's next: ``enter(seq)`` runs its compiled
        entry and returns its status and the rest of the call. The rest runs inline when
        every rank was in within the spin time and ``nbytes``, what the call moves, is at
        most :data:`_select.ASYNC_INLINE_MAX_BYTES`, else on the worker thread (whose copies
        may overlap the caller's work), ahead of the calls queued behind it; behind
        queued async work, the whole call is queued behind that (in call order: its
        sequence number taken now). Its Work."""
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():
            queued = next(group._seq)
            return fifo.submit(lambda: enter(queued)[1](), Work(what), inline=False)
        try:
            status, finish = enter(next(group._seq))
            if status != 0 or nbytes > _fast.ASYNC_INLINE_MAX_BYTES:
                return fifo.hand_over(finish, Work(what))
            finish()
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return Work.finished(what)

    def reduce(self, arr: np.ndarray, op: Any, dst: int) -> bool:
        """:meth:`ProcessGroup.reduce` of ``arr`` into global rank ``dst`` (in place there)."""
        last = self._last_reduce  # a program repeats one call: skip hashing the key
        if last[0] is arr.dtype and last[1] == arr.shape and last[2] is op and last[3] == dst:
            plan = last[4]
        else:
            plan = self._plan(("reduce", arr.dtype, arr.shape, op, dst), self._reduce_plan,
                              arr, op, dst)
            self._last_reduce = (arr.dtype, arr.shape, op, dst, plan)
        flags = arr.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return bool(plan) and flags.writeable and self._through_copy(self.reduce, arr, op,
                                                                         dst)
        tail, views, kernel, average, code, root, prog = plan
        group = self.group
        at_root = group._rank == root
        fifo = group.fifo
        if prog is not None:  # the registered schedule, one-sided off the root
            out = arr if at_root else None
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("reduce", tail, prog, arr, out, code, average and at_root)
                return True
            try:  # inline, as all_reduce
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, arr, out, code,
                                                0, self._whats["reduce"])
                if status:
                    arena.program_rest(seq, tail, self._whats["reduce"],
                                       time.monotonic() + group.timeout, prog, arr, out, code,
                                       status)
                if average and at_root:
                    ops.finish_average(arr, group._size)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "reduce/oneshot"
            return True
        # Without the compiled interpreter, or at a root whose op it cannot fold: one-shot
        # in Python, the combine from the regions
        self._run("reduce", tail, arr, _reduce_parity if at_root else _ignore, arr, views, kernel,
                  average)
        return True

    def broadcast(self, arr: np.ndarray, src: int) -> bool:
        """:meth:`ProcessGroup.broadcast` of ``arr`` from global rank ``src``."""
        last = self._last_broadcast  # a program repeats one call: skip hashing the key
        if last[0] is arr.dtype and last[1] == arr.shape and last[2] == src:
            plan = last[3]
        else:
            plan = self._plan(("broadcast", arr.dtype, arr.shape, src), self._broadcast_plan,
                              arr, src)
            self._last_broadcast = (arr.dtype, arr.shape, src, plan)
        flags = arr.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return bool(plan) and flags.writeable and self._through_copy(self.broadcast, arr,
                                                                         src)
        tail, views, root, prog = plan
        if self.group.symmetric.allocations and self._symmetric_broadcast(arr):
            return self._symmetric_calls.call("broadcast", arr, None, root=root)
        if views is None:
            return self._broadcast_single(arr, tail, prog)
        group = self.group
        fifo = group.fifo
        if prog is not None:  # the registered schedule: one-sided, the root awaits nobody
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("broadcast", tail, prog, None, arr, -1, False)
                return True
            try:  # inline, as all_reduce
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, None, arr, -1,
                                                0, self._whats["broadcast"])
                if status:
                    arena.program_rest(seq, tail, self._whats["broadcast"],
                                       time.monotonic() + group.timeout, prog, None, arr, -1,
                                       status)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "broadcast/oneshot"
            return True
        # Without the compiled interpreter: one-shot in Python
        if group._rank == root:
            self._run("broadcast", tail, arr, _ignore)
        else:
            self._run("broadcast", tail, None, _copy_root, arr, views, root)
        return True

    def _broadcast_single(self, arr: np.ndarray, tail: bytes, program: tuple | None,
                          async_op: bool = False) -> Any:
        """broadcast where it goes single-copy: its registered ``cma`` schedule's
        ``program`` (and its entry) through :meth:`_copy_call` (None: the general path).
        The ranks can only disagree illegally (the count and the root are in the
        fingerprint): the entry raises that."""
        if program is None:
            return None if async_op else False
        return self._copy_call("broadcast", tail, program, None, arr, arr, _entry_differs,
                               async_op)

    def all_gather(self, out: np.ndarray, inp: np.ndarray) -> bool:
        """:meth:`ProcessGroup.all_gather` of ``inp`` into ``out`` (all_gather_into_tensor)."""
        plan = self._pair_plan("all_gather", out, inp, self._all_gather_plan)
        if not plan or not out.flags.writeable:
            return self._pair_through_copy("all_gather", self.all_gather, out, inp)
        group = self.group
        if group.symmetric.allocations and self._symmetric(out):
            return self._symmetric_calls.call("all_gather", out, inp.reshape(-1))
        tail, views, prog = plan
        if views is None:
            return self._all_gather_single(out, inp, tail, prog)
        fifo = group.fifo
        if prog is not None:  # the registered schedule, run by the compiled interpreter
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("all_gather", tail, prog, inp, out, -1, False, True)
                return True
            try:  # inline, as all_reduce; C takes the arrays as they are (contiguous)
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, inp, out, -1, 0)
                if status:
                    arena.program_rest(seq, tail, self._whats["all_gather"],
                                       time.monotonic() + group.timeout, prog, inp, out, -1,
                                       status, True)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "all_gather/oneshot"
            return True
        # No compiled interpreter: the round, then NumPy's copies
        flat_out = out.reshape(-1)
        self._run("all_gather", tail, inp, _concatenate, views, flat_out)
        return True

    def all_gather_list(self, outs: Any, inp: np.ndarray) -> bool:
        """:meth:`ProcessGroup.all_gather` of ``inp`` into the list ``outs`` (torch's
        all_gather), every piece shaped like ``inp``: the one-shot all_gather of
        :meth:`all_gather` (the same fingerprint and regions, so a rank calling
        all_gather_into_tensor meets it), each rank's region copied into its own piece;
        past the one-shot sizes, its single-copy program, each peer's piece read
        straight into its own output (:meth:`_all_gather_list_single`)."""
        plan = self._plan(("all_gather_list", inp.dtype, inp.shape), self._all_gather_list_plan,
                          inp)
        if not plan or not inp.flags.c_contiguous:
            return False
        tail, alike, prog, single = plan
        if not alike(outs, inp, True):
            return False
        if prog is None and single is not None:
            return self._all_gather_list_single(outs, inp, tail, single, False)
        group = self.group
        fifo = group.fifo
        if prog is not None:  # all_gather's program, its output the list's pieces
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("all_gather", tail, prog, inp, outs, -1, False, True)
                return True
            try:  # inline, as all_gather
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, inp, outs, -1, 0)
                if status:
                    arena.program_rest(seq, tail, self._whats["all_gather"],
                                       time.monotonic() + group.timeout, prog, inp, outs, -1,
                                       status, True)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "all_gather/oneshot"
            return True
        if not _fast.oneshot_all_gather(group.caps, inp.nbytes):
            return False  # (a single-copy schedule that does not flatten: the group's path)
        # No compiled interpreter: the round, then every region into its piece
        self._run("all_gather", tail, inp, _copy_each, group.arena.small, outs)
        return True

    def all_gather_list_async(self, outs: Any, inp: np.ndarray) -> Work | None:
        """:meth:`all_gather_list` with ``async_op=True`` (see :meth:`_start` and
        :meth:`_copy_call`); None: the general path."""
        plan = self._plan(("all_gather_list", inp.dtype, inp.shape), self._all_gather_list_plan,
                          inp)
        if not plan or not inp.flags.c_contiguous:
            return None
        tail, alike, prog, single = plan
        if not alike(outs, inp, True):
            return None
        if single is not None:
            return self._all_gather_list_single(outs, inp, tail, single, True)
        if prog is None:  # (no compiled interpreter)
            return None
        return self._start("all_gather", tail, inp, outs, -1, False, _ignore, prog=prog,
                           per_rank_counts=True)

    def _all_gather_list_single(self, outs: list, inp: np.ndarray, tail: bytes,
                                program: tuple, async_op: bool) -> Any:
        """all_gather into a list past the one-shot sizes: the ``cma`` program whose output
        is the list's pieces, through :meth:`_copy_call`. Ranks that disagree (another
        rank's piece of another size) are handed over after the entry to the general
        path, which gathers into one array and copies it into the pieces."""
        n = self.group._size

        def hand_over(group: GroupView, seq: int) -> None:
            counts = group.arena.compare_entered(seq, True)
            flat = np.empty(inp.size * n, inp.dtype)
            group.all_gather(flat, inp.reshape(-1), [inp.size] * n, ops.dtype_name(inp.dtype),
                             lambda: _copy_each_piece(flat, outs), entered=(seq, counts))

        return self._copy_call("all_gather", tail, program, inp, outs, inp, hand_over, async_op)

    def _all_gather_single(self, out: np.ndarray, inp: np.ndarray, tail: bytes,
                           programs: tuple | None, async_op: bool = False) -> Any:
        """all_gather past the one-shot sizes: its registered ``cma`` schedule's program
        (``programs``: of an input apart, and of one in its place in the output; None:
        the general path) through :meth:`_copy_call`, each rank reading every other
        rank's piece straight from it. Any disagreement is handed over to the general
        path after the entry."""
        group = self.group
        if programs is None:
            return None if async_op else False
        arena, n = group.arena, group._size
        # An input in its place in the output (in place) is not copied: my slot and the
        # input share memory (both contiguous, so their byte ranges meet; checked on the
        # slot only when the arrays' bounds meet, which costs a fifth as much).
        flat_out = out.reshape(-1)
        in_place = np.may_share_memory(out, inp) and np.may_share_memory(
            flat_out[group._rank * inp.size:(group._rank + 1) * inp.size], inp)

        def hand_over(group: GroupView, seq: int) -> None:
            counts = arena.compare_entered(seq, True)
            group.all_gather(flat_out, inp.reshape(-1), [inp.size] * n,
                             ops.dtype_name(inp.dtype), _nothing, entered=(seq, counts))

        return self._copy_call("all_gather", tail, programs[in_place], inp, out, inp,
                               hand_over, async_op)

    def reduce_scatter(self, out: np.ndarray, inp: np.ndarray, op: Any) -> bool:
        """:meth:`ProcessGroup.reduce_scatter` of ``inp`` into ``out`` (reduce_scatter_tensor)."""
        plan = self._pair_plan("reduce_scatter", out, inp, self._reduce_scatter_plan, op)
        if not plan or not out.flags.writeable:
            return self._pair_through_copy("reduce_scatter", self.reduce_scatter, out, inp, op)
        group = self.group
        if group.symmetric.allocations and self._symmetric(inp):
            return self._symmetric_calls.call("reduce_scatter", inp, out.reshape(-1), op)
        tail, views, pieces, kernel, average, code, prog = plan
        if views is None:
            return self._reduce_scatter_single(out.reshape(-1), inp.reshape(-1), tail, kernel,
                                               average, prog)
        fifo = group.fifo
        if prog is not None:  # the registered schedule, run by the compiled interpreter
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("reduce_scatter", tail, prog, inp, out, code, average, True)
                return True
            try:  # inline, as all_gather
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, inp, out, code,
                                                0)
                if status:
                    arena.program_rest(seq, tail, self._whats["reduce_scatter"],
                                       time.monotonic() + group.timeout, prog, inp, out, code,
                                       status, True)
                if average:
                    ops.finish_average(out, group._size)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "reduce_scatter/oneshot"
            return True
        # No compiled fold for this op (complex; or no compiled helper): the round,
        # then NumPy's fold
        self._run("reduce_scatter", tail, inp, _reduce_parity, out.reshape(-1), pieces,
                  kernel, average)
        return True

    def reduce_scatter_list(self, out: np.ndarray, pieces: Any, op: Any) -> bool:
        """:meth:`ProcessGroup.reduce_scatter` of the list ``pieces`` (torch's
        reduce_scatter), every piece shaped like ``out``: the one-shot reduce_scatter of
        :meth:`reduce_scatter` (the same fingerprint and regions), the pieces staged one
        after the other as the tensor form's input is; past the one-shot sizes, the
        single-copy program that reads the pieces where they lie
        (:meth:`_reduce_scatter_list_single`), or, where that program does not flatten,
        the tensor form's call on the pieces' concatenation, in a staging array the
        group keeps. With the compiled helper only; False: the general path."""
        plan = self._plan(("reduce_scatter_list", out.dtype, out.shape, op),
                          self._reduce_scatter_list_plan, out, op)
        flags = out.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return False
        (tail, views, regions, kernel, average, code, prog), alike = plan
        if not alike(pieces, out, False):
            return False
        if views is None:
            if prog is not None and prog[0].packed is not None:
                return self._reduce_scatter_list_single(out, pieces, tail, kernel, average,
                                                        prog)
            # (one copy of the pieces, where the general path made two)
            whole = np.concatenate(pieces, out=self._staging.get(
                "input", out.dtype, (len(pieces) * out.shape[0], *out.shape[1:])))
            return self.reduce_scatter(out, whole, op)
        group = self.group
        fifo = group.fifo
        if prog is not None:  # reduce_scatter's program, its input the list's pieces
            if not fifo.enter_inline():  # queued async work goes first
                self._program_call("reduce_scatter", tail, prog, pieces, out, code, average,
                                   True)
                return True
            try:  # inline, as reduce_scatter
                arena = group.arena
                seq = next(group._seq)
                status = arena.compiled_program(seq, tail, arena.spin_ns, prog, pieces, out,
                                                code, 0)
                if status:
                    arena.program_rest(seq, tail, self._whats["reduce_scatter"],
                                       time.monotonic() + group.timeout, prog, pieces, out,
                                       code, status, True)
                if average:
                    ops.finish_average(out, group._size)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
            group.last_algorithm = "reduce_scatter/oneshot"
            return True
        # No compiled fold for this op (complex): the round (the pieces staged one
        # after the other), then NumPy's fold
        self._run("reduce_scatter", tail, pieces, _reduce_parity, out.reshape(-1), regions,
                  kernel, average)
        return True

    def reduce_scatter_list_async(self, out: np.ndarray, pieces: Any, op: Any) -> Work | None:
        """:meth:`reduce_scatter_list` with ``async_op=True`` (see :meth:`_start`); None:
        the general path."""
        plan = self._plan(("reduce_scatter_list", out.dtype, out.shape, op),
                          self._reduce_scatter_list_plan, out, op)
        flags = out.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return None
        (tail, views, regions, kernel, average, code, prog), alike = plan
        if views is None or not alike(pieces, out, False):  # (past one-shot: the group's)
            return None
        if prog is not None:
            return self._start("reduce_scatter", tail, pieces, out, code, average, _ignore,
                               prog=prog, per_rank_counts=True)
        return self._start("reduce_scatter", tail, pieces, None, None, False, _reduce_parity,
                           out.reshape(-1), regions, kernel, average)

    def _reduce_scatter_list_single(self, out: np.ndarray, pieces: list, tail: bytes,
                                    op: ops.ReduceOp, average: bool, program: tuple) -> bool:
        """reduce_scatter of a list past the one-shot sizes, with no concatenation: the
        compiled entry exposes the table of where the pieces lie (as a scatter root's),
        then the records after it of the ``cma`` program whose input is the pieces
        (``_program.as_pieces``): every rank reads its share of every other rank's list
        where that piece lies. Ranks that disagree are handed over after the entry to
        the general path, on the pieces' concatenation. True, or False (nothing done)
        while async work is queued."""
        group = self.group
        arena, n = group.arena, group._size
        copy, entry = program
        tails, what = entry[0], self._whats["reduce_scatter"]

        def run(seq: int) -> None:
            status = arena.compiled_rooted(seq, tails, None, arena.spin_ns, (pieces, 0))
            counts = [] if status == 0 else arena.rooted_entry(
                seq, tails, what, group.timeout, None, None, status, -1, _ignore)
            if counts:
                _reduce_scatter_entered(group, seq, counts, out,
                                        np.concatenate([p.reshape(-1) for p in pieces]), op,
                                        average, "reduce_scatter")
                return
            group.last_algorithm = "reduce_scatter/cma"
            left = single_copy.run_after_entry(group, seq, what, copy, pieces, out)
            if left != 0:
                single_copy.run_program(group, seq, what, copy, None, pieces, out, left)
            if average:
                ops.finish_average(out, n)

        return self._inline(run)

    def _reduce_scatter_single(self, out: np.ndarray, inp: np.ndarray, tail: bytes,
                               op: ops.ReduceOp, average: bool, program: tuple | None,
                               async_op: bool = False) -> Any:
        """reduce_scatter past the one-shot sizes: its registered ``cma`` schedule's
        ``program`` through :meth:`_copy_call` (None: the general path) when every rank
        agrees; anything else is handed over to the general path after the entry."""
        group = self.group
        if program is None:
            return None if async_op else False
        arena = group.arena

        def hand_over(group: GroupView, seq: int) -> None:
            _reduce_scatter_entered(group, seq, arena.compare_entered(seq, True), out, inp,
                                    op, average, "reduce_scatter_tensor")

        return self._copy_call("reduce_scatter", tail, program, inp, out, inp, hand_over,
                               async_op, average)

    def all_to_all(self, out: np.ndarray, inp: np.ndarray) -> bool:
        """:meth:`ProcessGroup.all_to_all` with equal splits (all_to_all_single without
        split sizes), at any size: the lane does what the general path does up to
        the entry, in the same bytes (split header, staged input, exposed buffer,
        fingerprint). When every rank agrees on a one-shot call it finishes it here,
        and past the one-shot sizes on a single-copy one (its ``cma`` program,
        :meth:`_copy_call`); otherwise (other ranks' uneven splits, a mismatch, no
        compiled helper) it hands the entered call over to the general path."""
        plan = self._pair_plan("all_to_all", out, inp, self._all_to_all_plan, disjoint=True)
        if not plan or not out.flags.writeable:
            return self._pair_through_copy("all_to_all", self.all_to_all, out, inp)
        tail, header, _, _, _, _, _, tails, single, program = plan
        if program is None and single is not None and single[0].packed is None:
            return self._copy_call("all_to_all", tail, single, inp, out, inp,  # (Python's)
                                   self._all_to_all_hand_over(out, inp, plan), False,
                                   header=header)
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():  # queued async work goes first: the general path
            return False
        try:
            seq = next(group._seq)
            arena = group.arena
            if program is not None:
                # One compiled call, the registered schedule: header and input staged
                # (as the general path stages them), the entry, every header checked
                # against mine, my own piece and every rank's piece for me copied out.
                # (Written out here and in all_to_all_async: a helper method cost 0.08
                # us of a 1.7 us call.)
                prog, entry = program
                if group.transport.cma_min_bytes > 0:  # (exposed for a general path)
                    entry = (tails, -1, inp)
                status = arena.compiled_program(seq, entry, arena.spin_ns, prog, inp, out,
                                                -1, 0)
                if status == 0:
                    group.last_algorithm = "all_to_all/oneshot"
                elif status == 5:  # buffers it cannot take, nothing done: the general path
                    self._refused(seq)
                    return False
                else:  # Python finishes the entry and decides, from what is published
                    self._all_to_all_finish(seq, out, inp, plan, status & 7, (entry, status))
            elif single is not None:
                # Past the one-shot sizes, one compiled call: the registered cma schedule
                # (header staged, input exposed, the entry, every header checked against
                # mine, my piece of every rank's input read, the closing round); where
                # it stops, _copy_rest goes on. (Written out, not _copy_call: its frame
                # and the hand-over built for every call cost 3% of a 384 KiB call.)
                copy, entry = single
                got = arena.compiled_program(seq, entry, arena.spin_ns, copy.packed, inp,
                                             out, -1, 0)
                group.last_algorithm = "all_to_all/cma"
                if got:
                    self._copy_rest("all_to_all", seq, tail, copy, entry, inp, out, got,
                                    self._all_to_all_hand_over(out, inp, plan))
            else:
                self._all_to_all_python(seq, out, inp, plan)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def all_to_all_async(self, out: np.ndarray, inp: np.ndarray,
                         then: Callable[[], None] | None = None) -> Work | None:
        """:meth:`all_to_all` with ``async_op=True``: its compiled entry starts here; when
        every rank is in within the spin time and agrees on a one-shot call, the call
        is done and its Work finished; otherwise the worker thread finishes it (the
        rest of the entry, then what :meth:`all_to_all` would do) ahead of the calls
        queued behind it (as :meth:`_start`). ``then``: run once ``out`` holds the
        result, before the Work completes. Past the one-shot sizes, its single-copy
        program (:meth:`_copy_call`): inline once every rank is in, up to
        _select.ASYNC_INLINE_MAX_BYTES of input (larger ones on the worker thread).
        None (nothing done): no compiled helper, an input too large to stage that does
        not go single-copy, or the group busy: the general path."""
        plan = self._pair_plan("all_to_all", out, inp, self._all_to_all_plan, disjoint=True)
        if not plan or not out.flags.writeable:
            return None
        tail, header, _, _, _, _, _, tails, single, program = plan
        group = self.group
        arena = group.arena
        if (program is None and single is None) or (single is not None
                                                     and single[0].packed is None):
            return None  # (Python's entry and executor: the general path)
        fifo = group.fifo
        if not fifo.enter_inline():
            return None
        what = self._whats["all_to_all"]
        try:
            seq = next(group._seq)
            if single is not None:  # its cma program, as all_to_all runs it
                copy, entry = single
                if inp.nbytes <= _fast.ASYNC_INLINE_MAX_BYTES:
                    got = arena.compiled_program(seq, entry, arena.spin_ns, copy.packed, inp,
                                                 out, -1, 0)
                else:  # the entry alone: the worker copies, overlapping the caller's work
                    status = arena.compiled_rooted(seq, tails, header, arena.spin_ns, inp)
                    got = copy.entered * 8 + status if status else -1
                group.last_algorithm = "all_to_all/cma"
                if got:
                    def rest() -> None:
                        # (every rank in: the records after the entry in one C call, and
                        # only where they stop, _copy_rest's frames; they cost 2% at 4 MiB)
                        left = got if got > 0 else single_copy.run_after_entry(
                            group, seq, what, copy, inp, out)
                        if left:
                            self._copy_rest("all_to_all", seq, tail, copy, entry, inp, out,
                                            left, self._all_to_all_hand_over(out, inp, plan))
                        if then is not None:  # (handed over too: the general path finished)
                            then()
                    return fifo.hand_over(rest, Work(what))  # type: ignore[arg-type]
            else:
                prog, entry = program
                if group.transport.cma_min_bytes > 0:
                    entry = (tails, -1, inp)
                status = arena.compiled_program(seq, entry, arena.spin_ns, prog, inp, out, -1,
                                                0)
                if status == 5:  # refused, nothing done: the general path explains
                    self._refused(seq)
                    return None
                resume = None
                if status:  # (the interpreter's: the record to resume from, then this)
                    resume = (entry, status)
                    status &= 7
                group.last_algorithm = "all_to_all/oneshot"
                if status != 0:
                    def finish() -> None:
                        self._all_to_all_finish(seq, out, inp, plan, status, resume)
                        if then is not None:
                            then()
                    return fifo.hand_over(finish, Work(what))  # type: ignore[arg-type]
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        if then is not None:
            then()
        return Work.finished(what)

    def all_to_all_split(self, out: np.ndarray, inp: np.ndarray, out_splits: Any,
                         in_splits: Any) -> bool:
        """all_to_all_single with split sizes: :meth:`all_to_all` when they are the equal
        splits (every rank the same rows of dim 0), as callers that always pass them do;
        else the uneven form (:mod:`meshcast.uneven_all_to_all`). False, nothing done:
        the general path."""
        n = self.group._size
        if _equal_splits(out_splits, out, n) and _equal_splits(in_splits, inp, n):
            return self.all_to_all(out, inp)
        plan = self._uneven_plan(out, inp, out_splits, in_splits)
        return bool(plan) and out.flags.writeable and uneven_all_to_all.run(
            self.group, self._whats["all_to_all"], out, inp, plan)

    def all_to_all_split_async(self, out: np.ndarray, inp: np.ndarray, out_splits: Any,
                               in_splits: Any, then: Callable[[], None] | None = None
                               ) -> Work | None:
        """:meth:`all_to_all_split` with ``async_op=True`` (:meth:`all_to_all_async` for
        equal splits); ``then``: as there. None, nothing done: the general path."""
        n = self.group._size
        if _equal_splits(out_splits, out, n) and _equal_splits(in_splits, inp, n):
            return self.all_to_all_async(out, inp, then)
        plan = self._uneven_plan(out, inp, out_splits, in_splits)
        return (uneven_all_to_all.run_async(self.group, self._whats["all_to_all"], out, inp,
                                            plan, then)
                if plan and out.flags.writeable else None)

    def _uneven_plan(self, out: np.ndarray, inp: np.ndarray, out_splits: Any, in_splits: Any
                     ) -> uneven_all_to_all.UnevenPlan | bool:
        """The plan of an all_to_all_single with uneven splits (see uneven_all_to_all),
        False: the general path."""
        if "all_to_all" in self.group.tuned:  # (MESHCAST_ALGO names schedules)
            return False
        # (lists as tuples, for the plan's key; anything unhashable: the general path)
        return self._pair_plan(
            "all_to_all_uneven", out, inp, self._uneven_build,
            tuple(out_splits) if type(out_splits) is list else out_splits,
            tuple(in_splits) if type(in_splits) is list else in_splits, disjoint=True)

    def _uneven_build(self, out: np.ndarray, inp: np.ndarray, out_splits: Any,
                      in_splits: Any) -> uneven_all_to_all.UnevenPlan | bool:
        dtype, name = inp.dtype, ops.dtype_name(inp.dtype)
        if name not in _MOVE_DTYPES or not dtype.isnative:
            return False
        return uneven_all_to_all.plan(self.group, out, inp, out_splits, in_splits, self._tail(
            "all_to_all", False, dtype=name, count=inp.size))

    def all_to_all_list(self, outs: Any, ins: Any) -> bool:
        """torch's all_to_all of lists: where every piece is alike, the registered
        schedules' programs with both sides given as the lists
        (:meth:`_all_to_all_listed`), or, where those do not run, the :meth:`all_to_all`
        of the pieces' concatenation; else (pieces of different lengths along
        dim 0, MoE's token exchange) its :meth:`all_to_all_split` (a copy in and a copy
        out, into staging arrays the group keeps, which cost far less than the general
        path's checks; the same fingerprint and bytes as all_to_all_single, so the forms
        meet). False, nothing done: the general path."""
        listed = self._all_to_all_listed(outs, ins)
        if listed is not None:
            return listed
        staged = self._list_staged(outs, ins, self._staging)
        if staged is None:
            uneven = _uneven_staged(outs, ins, self.group._size, self._staging)
            if uneven is None or not self.all_to_all_split(*uneven):
                return False
            _pieces_out(uneven[0], outs)
            return True
        if not self.all_to_all(*staged):
            return False
        _rows_out(staged[0], outs)
        return True

    def _all_to_all_listed(self, outs: Any, ins: Any) -> bool | None:
        """An all_to_all of two lists of pieces all alike (NumPy arrays, C-contiguous, the
        outputs writable, none overlapping an input) with no staging copies: the
        registered ``oneshot`` schedule's program (or, past the one-shot sizes, its
        ``cma`` one) with both sides given as the lists (``_program.as_pieces``, BOTH),
        in one compiled call, as :meth:`all_to_all` runs the tensor form (the same
        fingerprint, header and region layout: a rank passing a list meets one passing
        a tensor). The entry exposes the table of my input pieces (a general path
        taking over reads them where they lie). Ranks that disagree (another rank's
        uneven splits, a mismatch) are handed over after the entry to the general
        path, on the pieces' concatenation. True, done; False, nothing done (the
        general path); None, not this path (no compiled interpreter, other pieces)."""
        plan = self._listed_plan(outs, ins)
        if plan is None:
            return None
        flat, prog, table_at, single = plan
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():  # queued async work goes first: the general path
            return False
        try:
            seq = next(group._seq)
            arena = group.arena
            entry = (flat[7], -1, (ins, 0, table_at) if table_at >= 0 else None)
            got = arena.compiled_program(seq, entry, arena.spin_ns,
                                         prog if single is None else single.packed, ins, outs,
                                         -1, 0)
            if got == 5:  # (pieces overlapping an input: the general path stages them)
                self._refused(seq)
                return False
            if single is None:
                group.last_algorithm = "all_to_all/oneshot"
                if got:
                    self._all_to_all_listed_rest(seq, outs, ins, flat, prog, entry, got)
            else:
                group.last_algorithm = "all_to_all/cma"
                if got:
                    self._copy_rest("all_to_all", seq, flat[0], single, entry, ins, outs, got,
                                    self._listed_hand_over(outs, ins, flat))
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def _listed_plan(self, outs: Any, ins: Any) -> tuple | None:
        """:meth:`_all_to_all_listed_plan` for two lists of pieces all like the first
        input piece (a NumPy array: the compiled check), or None."""
        if type(ins) is not list or type(outs) is not list or not ins:
            return None
        like = ins[0]
        if type(like) is not np.ndarray or not like.shape:
            return None
        last = self._last_listed
        if last[0] is like.dtype and last[1] == like.shape:
            plan = last[2]
        else:
            plan = self._plan(("all_to_all_listed", like.dtype, like.shape),
                              self._all_to_all_listed_plan, like)
            self._last_listed = (like.dtype, like.shape, plan)
        if not plan:
            return None
        alike = self._alike_check()
        if not (alike(ins, like, False) and alike(outs, like, True)):
            return None
        return plan

    def _all_to_all_listed_async(self, outs: list, ins: list) -> Work | None:
        """:meth:`_all_to_all_listed` with ``async_op=True`` past the one-shot sizes,
        through :meth:`_async_single`: the single-copy program inline up to
        _select.ASYNC_INLINE_MAX_BYTES a rank, past that wholly on the worker thread
        (its copies overlapping the caller's work). None, nothing done: not this path
        (one-shot sizes, whose staging copies cost less than the check of the pieces'
        overlap that an async call makes first, 2 us at 8 KiB; pieces overlapping an
        input), which the staged way takes."""
        plan = self._listed_plan(outs, ins)
        if plan is None or plan[3] is None or not _lists_apart(outs, ins):
            return None  # (one-shot sizes: the staged way costs less than the check above)
        flat, _, table_at, single = plan
        group = self.group
        arena = group.arena
        entry = (flat[7], -1, (ins, 0, table_at))
        nbytes = ins[0].nbytes * len(ins)

        def single_rest(seq: int, got: int) -> None:
            group.last_algorithm = "all_to_all/cma"
            if got:
                self._copy_rest("all_to_all", seq, flat[0], single, entry, ins, outs, got,
                                self._listed_hand_over(outs, ins, flat))

        def enter(seq: int) -> tuple[int, Callable[[], None]]:
            if nbytes > _fast.ASYNC_INLINE_MAX_BYTES:  # the whole call on the worker
                return 1, lambda: single_rest(seq, arena.compiled_program(
                    seq, entry, arena.spin_ns, single.packed, ins, outs, -1, 0))
            got = arena.compiled_program(seq, entry, arena.spin_ns, single.packed, ins, outs,
                                         -1, 0)
            return got, lambda: single_rest(seq, got)

        return self._async_single(enter, self._whats["all_to_all"], nbytes)

    def _all_to_all_listed_plan(self, like: np.ndarray) -> tuple | bool:
        """(the tensor form's plan (:meth:`_all_to_all_plan`), the one-shot program with
        both sides listed or None, where my region holds the table of my input pieces
        (-1: no table, nothing is exposed), the single-copy program with both sides
        listed or None); False: the lists go the staged way (no compiled interpreter,
        a program that does not flatten, no room in the region for the table)."""
        group = self.group
        n = group.size()
        if "all_to_all" in group.tuned:  # (MESHCAST_ALGO names schedules)
            return False
        shape = (n * like.shape[0], *like.shape[1:])
        whole = np.broadcast_to(np.empty(1, like.dtype), shape)  # (a shape, no memory)
        flat = self._all_to_all_plan(whole, whole)
        if not flat or group.arena.compiled_program is None:
            return False
        head, single, program = flat[3], flat[8], flat[9]
        size, nbytes = whole.size, whole.nbytes
        exposing = group.transport.cma_min_bytes > 0
        prog, copy, table_at = None, None, -1
        if program is not None:  # one-shot: the table past my staged input
            prog = self._program("all_to_all", like.dtype, size, size, listed=BOTH)
            table_at = -(-(head + nbytes) // 64) * 64 if exposing else -1
        elif single is not None and exposing:  # single-copy: the table past my header
            copy = self._copy_programs.get("all_to_all", like.dtype, -1, size, size,
                                           listed=BOTH)
            table_at = head
        if (prog is None and (copy is None or copy.packed is None)
                or table_at + 16 * n > group.arena.small_bytes):
            return False
        return flat, prog, table_at, copy

    def _all_to_all_listed_rest(self, seq: int, outs: list, ins: list, flat: tuple,
                                prog: bytes, entry: tuple, got: int) -> None:
        """:meth:`_all_to_all_listed`'s one-shot call after its compiled entry returned
        ``got`` (the record to resume from, and why): the rest of the entry in Python;
        then, every rank agreeing on equal splits (its split header is mine), the
        program's records after the entry; else the general path from the entry on."""
        group = self.group
        agreed = group.arena.finish_entry(seq, _SEQ.pack(seq) + flat[0],
                                          self._whats["all_to_all"],
                                          time.monotonic() + group.timeout, got & 7)
        if agreed and all(h == flat[1] for h in flat[2][seq & 1]):
            resume_program(seq & 1, group.arena, seq, entry, prog, ins, outs, got)
            return
        self._all_to_all_listed_general(
            seq, outs, ins, flat[6],
            [sum(p.size for p in ins)] * group._size if agreed
            else group.arena.compare_entered(seq, True))

    def _listed_hand_over(self, outs: list, ins: list, flat: tuple
                          ) -> Callable[[GroupView, int], None]:
        """The single-copy listed call's ``differ`` (:meth:`_copy_call`): the entered call
        goes on from its entry on the general path (:meth:`_all_to_all_listed_general`)."""
        return lambda group, seq: self._all_to_all_listed_general(
            seq, outs, ins, flat[6], group.arena.compare_entered(seq, True))

    def _all_to_all_listed_general(self, seq: int, outs: list, ins: list, dtype_name: str,
                                   counts: list) -> None:
        """The general path's all_to_all from the entry of call ``seq`` on (ranks that
        disagree), on the concatenation of ``ins``; its result into ``outs``."""
        inp = np.concatenate(ins)
        out = np.empty_like(inp)
        split = [inp.size // self.group._size] * self.group._size
        self.group.all_to_all(out.reshape(-1), inp.reshape(-1), split, split, dtype_name,
                              lambda: _rows_out(out, outs), entered=(seq, counts))

    def all_to_all_list_async(self, outs: Any, ins: Any) -> Work | None:
        """:meth:`all_to_all_list` with ``async_op=True``: where every piece is alike,
        :meth:`_all_to_all_listed_async`; else the :meth:`all_to_all_async` (or
        :meth:`all_to_all_split_async`) of the pieces' concatenation, copied out into
        ``outs`` once it is done (here, or by the worker thread that finishes it). None,
        nothing done: the general path."""
        work = self._all_to_all_listed_async(outs, ins)
        if work is not None:
            return work
        staged = self._list_staged(outs, ins)
        if staged is None:
            uneven = _uneven_staged(outs, ins, self.group._size)
            if uneven is None:
                return None
            out = uneven[0]
            return self.all_to_all_split_async(*uneven, lambda: _pieces_out(out, outs))
        out = staged[0]
        return self.all_to_all_async(*staged, lambda: _rows_out(out, outs))

    def _list_staged(self, outs: Any, ins: Any, staging: Staging | None = None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
        """(output, input) of the all_to_all that an all_to_all of lists is, when every
        piece of both lists is a NumPy array alike (same shape and dtype, contiguous,
        the outputs writable): the input the pieces' concatenation, both in ``staging``
        (a synchronous call's) or fresh; else None."""
        if type(ins) is not list or not ins:
            return None
        like = ins[0]
        if type(like) is not np.ndarray or not like.shape:
            return None
        alike = self._alike_check()
        if not (alike(ins, like, False) and alike(outs, like, True)):
            return None
        if staging is None:
            inp = np.concatenate(ins)
            return np.empty_like(inp), inp
        shape = (len(ins) * like.shape[0], *like.shape[1:])
        inp = np.concatenate(ins, out=staging.get("input", like.dtype, shape))
        return staging.get("output", like.dtype, shape), inp

    def _refused(self, seq: int) -> None:
        """Call ``seq``, which the compiled interpreter refused (status 5: buffers it cannot
        take, nothing done), goes back to the group: its general path runs it as this same
        number and explains; the lane leaves the group's call queue."""
        group = self.group
        group._seq = itertools.count(seq)
        group.fifo.leave_inline(None)

    def _all_to_all_hand_over(self, out: np.ndarray, inp: np.ndarray, plan: tuple
                              ) -> Callable[[GroupView, int], None]:
        """The single-copy all_to_all's ``differ`` (:meth:`_copy_call`): the entered call
        goes on from its entry on the general path, which reads every rank's split
        header (another rank's splits or count differ: a legal uneven call; or the
        MismatchError)."""
        split = [inp.size // self.group._size] * self.group._size

        def hand_over(group: GroupView, seq: int) -> None:
            group.all_to_all(out.reshape(-1), inp.reshape(-1), split, split, plan[6],
                             _nothing, entered=(seq, group.arena.compare_entered(seq, True)))

        return hand_over

    def _all_to_all_python(self, seq: int, out: np.ndarray, inp: np.ndarray, plan: tuple
                           ) -> None:
        """all_to_all's entry in Python (no compiled helper, or too large to stage), then
        :meth:`_all_to_all_rest`."""
        tail, header, headers, head, limit, _, _, _, _, _ = plan
        group = self.group
        arena = group.arena
        parity = seq & 1
        me, n = group._rank, group._size
        mine = inp.reshape(-1).view(np.uint8)
        nbytes = mine.nbytes
        p = nbytes // n
        arena.settle()  # before my header and pieces go into my region
        mv = headers[parity]
        mv[me][:] = header
        if nbytes <= limit:  # all but my own piece, as the general path stages it
            region = arena.small[me][parity]
            region[head:head + me * p] = mine[:me * p]
            region[head + (me + 1) * p:head + nbytes] = mine[(me + 1) * p:]
        if group.transport.cma_min_bytes > 0:
            arena.expose(seq, self._address(inp), nbytes, 0)
        agreed = arena.packed_enter(seq, _SEQ.pack(seq) + tail, self._whats["all_to_all"],
                                    time.monotonic() + group.timeout)
        self._all_to_all_rest(seq, out, inp, agreed, plan)

    def _all_to_all_finish(self, seq: int, out: np.ndarray, inp: np.ndarray, plan: tuple,
                           status: int, resume: tuple | None = None) -> None:
        """all_to_all after a compiled entry that returned ``status`` (1 to 4): the rest
        of the entry in Python, then :meth:`_all_to_all_rest`. ``resume``: (entry,
        what the interpreter returned) when the entry was its program's."""
        group = self.group
        agreed = group.arena.finish_entry(seq, _SEQ.pack(seq) + plan[0],
                                          self._whats["all_to_all"],
                                          time.monotonic() + group.timeout, status)
        self._all_to_all_rest(seq, out, inp, agreed, plan, resume)

    def _all_to_all_rest(self, seq: int, out: np.ndarray, inp: np.ndarray, agreed: bool,
                         plan: tuple, resume: tuple | None = None) -> None:
        """all_to_all after the entry: one-shot when every rank agreed and splits alike
        (its split header is mine) and the input was staged (``resume``: (entry, status)
        of the program that staged it, whose records after the entry then copy the
        pieces out), else the general path from the entry on. (Past the one-shot sizes a
        single-copy call runs its program: :meth:`all_to_all`.)"""
        _, header, headers, _, limit, pieces, dtype_name, _, _, program = plan
        group = self.group
        me, n = group._rank, group._size
        mine = inp.reshape(-1).view(np.uint8)
        nbytes = mine.nbytes
        p = nbytes // n
        uniform = agreed and all(h == header for h in headers[seq & 1])
        dst = out.reshape(-1).view(np.uint8)
        if uniform and nbytes <= limit and resume is not None:
            # Every rank splits evenly with the same sizes and staged its input: the
            # program's records after its entry (its EXPECTs hold then) copy them out.
            resume_program(seq & 1, group.arena, seq, resume[0], program[0], inp, out,
                           resume[1])
            group.last_algorithm = "all_to_all/oneshot"
        elif uniform and nbytes <= limit:  # (Python's entry: no compiled helper)
            for q, src in enumerate(pieces[seq & 1]):
                dst[q * p:(q + 1) * p] = mine[me * p:(me + 1) * p] if q == me else src
            group.last_algorithm = "all_to_all/oneshot"
        else:
            counts = [inp.size] * n if agreed else group.arena.compare_entered(seq, True)
            split = [inp.size // n] * n
            group.all_to_all(out.reshape(-1), inp.reshape(-1), split, split, dtype_name,
                             _nothing, entered=(seq, counts))

    def gather(self, inp: np.ndarray, outs: Any, dst: int | None) -> bool:
        """:meth:`ProcessGroup.gather` of ``inp`` into the list ``outs`` on global rank
        ``dst`` (None: the group's first rank), every piece shaped like ``inp``.

        A root whose pieces are all alike can only see the one-shot path or a
        MismatchError after the entry (the entry checks every count against its
        pieces). Another rank may see a larger piece of a third rank (a legal
        uneven gather): it hands the entered call over to the general path."""
        last = self._last_rooted["gather"]  # (_rooted's first look, without its frame)
        plan = (last[3] if last[0] is inp.dtype and last[1] == inp.shape and last[2] == dst
                else self._rooted("gather", inp, None, dst))
        if not plan or not inp.flags.c_contiguous:
            return False
        tails, root, _, at_root, cma, alike, _, _, single, program = plan
        # (a root's list is its program's to check, in C: pieces like inp, writable)
        if (not at_root and outs is not None
                or at_root and (program is None or single) and not alike(outs, inp, True)):
            return False
        if single:
            return self._gather_single(inp, outs, plan)
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():  # queued async work goes first: the general path
            return False
        # Inline, as all_reduce: the registered schedule, every other rank's piece
        # through its region into the root's list. Every rank but the root exposes its
        # piece for a general path taking over (a legal uneven gather too large for
        # the regions).
        try:
            seq = next(group._seq)
            arena = group.arena
            outs = outs if at_root else None
            if program is None:  # Python stages (_gather_rest)
                entry = ((0, 0) if at_root else inp) if cma else None
                status = None
            else:
                prog, entry = program
                if cma and not at_root:  # (the array itself: C reads its address cheaply)
                    entry = (tails, root, inp)
                status = arena.compiled_program(seq, entry, arena.spin_ns, prog, inp, outs,
                                                -1, 0)
                if status == 5:  # pieces not like inp: of other sizes (Gatherv), or the
                    # general path explains, as this call's number
                    if not (at_root and uneven_rooted.gather(self, seq, inp, outs, root)):
                        self._refused(seq)
                        return False
                    status = 0  # (the root's pieces of other sizes: done there)
            if status == 0:
                group.last_algorithm = "gather/oneshot"
            else:
                self._gather_rest(seq, inp, outs, plan, entry, status)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def gather_async(self, inp: np.ndarray, outs: Any, dst: int | None) -> Work | None:
        """:meth:`gather` with ``async_op=True``: its compiled entry starts here; when every
        rank is in within the spin time the call is done and its Work finished;
        otherwise the worker thread finishes it (:meth:`_gather_rest`) ahead of the
        calls queued behind it (as :meth:`_start`). None (nothing done): no compiled
        helper, a call the lane does not take, or the group busy: the general path."""
        plan = self._rooted("gather", inp, outs, dst)
        if not plan or not inp.flags.c_contiguous:
            return None
        tails, root, _, at_root, cma, alike = plan[:6]
        if plan[8]:
            if at_root and not alike(outs, inp, True):
                return None
            return self._gather_single(inp, outs, plan, async_op=True)
        if plan[9] is None:
            return None
        prog, entry = plan[9]
        group = self.group
        arena = group.arena
        fifo = group.fifo
        if not fifo.enter_inline():
            return None
        what = self._whats["gather"]
        try:
            seq = next(group._seq)
            if cma and not at_root:
                entry = (tails, root, inp)
            status = arena.compiled_program(seq, entry, arena.spin_ns, prog, inp, outs, -1, 0)
            if status == 5:  # refused, nothing done: the general path explains
                self._refused(seq)
                return None
            group.last_algorithm = "gather/oneshot"
            if status != 0:
                return fifo.hand_over(
                    lambda: self._gather_rest(seq, inp, outs, plan, entry, status),
                    Work(what))  # type: ignore[arg-type]
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return Work.finished(what)

    def _gather_single(self, inp: np.ndarray, outs: list[np.ndarray] | None, plan: tuple,
                       async_op: bool = False) -> Any:
        """gather where it goes single-copy (``_select.gather_oneshot``): its registered
        ``cma`` schedule's program (every rank writes its piece straight into the root's
        list, exposed where it lies as a table of pieces; a root in place reads part of
        each), from the lane's compiled entry on (:meth:`_rooted_single`). Any
        disagreement is handed over to the general path after the entry."""
        tails, root, _, at_root = plan[:4]
        group = self.group
        return self._rooted_single(
            "gather", tails, root, outs if at_root else inp, inp, plan[8], inp.nbytes,
            lambda seq, counts: group.gather(outs, inp.reshape(-1), root,
                                             ops.dtype_name(inp.dtype), _nothing,
                                             entered=(seq, counts)),
            (inp, outs if at_root else None), async_op)

    def _rooted_single(self, kind: str, tails: tuple[bytes, ...], root: int, exposed: Any,
                       mine: np.ndarray, copies: tuple, piece: int,
                       hand_over: Callable[[int, list[int]], None], buffers: tuple,
                       async_op: bool = False) -> Any:
        """The single-copy gather or scatter (``kind``, ``piece`` bytes a rank) as the
        group's next call: the compiled entry with every rank's fingerprint ``tails``,
        exposing ``exposed`` (the root's list of pieces as their table, another rank's
        array), then the records after the entry of one of ``copies``, the registered
        ``cma`` schedule's programs (as is, and with the root splitting:
        ``Plan.root_splits``), on ``buffers`` (the call's input and output, a root's
        list as pieces). A root in place (``mine`` its own piece of ``exposed``,
        :func:`_in_place`) with pieces of ``_select.ROOTED_SPLIT_MIN_BYTES`` or more
        moves a part of every other rank's piece, and says so with the word's SPLIT
        bit, which the other ranks read after the entry. A legal call the lane does not
        finish (uneven pieces) goes to ``hand_over(seq, counts)`` after the entry.
        Synchronous: True, or False (nothing done) while async work is queued. With
        ``async_op``: :meth:`_async_single`'s Work (``piece`` bytes moved), or None
        (nothing done) where nothing was compiled."""
        group = self.group
        arena = group.arena
        fast = arena.compiled_rooted
        what = self._whats[kind]
        at_root = group._rank == root
        split = (at_root and _fast.rooted_split(piece)
                 and _in_place(mine, exposed[root], arena.compiled_same))
        bits = single_copy.SPLIT if split else 0
        inp, out = buffers

        def enter(seq: int) -> tuple[int | None, Callable[[], None]]:
            """The entry of call ``seq``: its status, and the rest of the call."""
            if fast is None:  # Python exposes, as the general path does
                if type(exposed) is list:
                    exposure, table = single_copy.piece_table(arena, exposed, bits)
                    arena.expose(seq, *exposure)
                    table(seq & 1)  # (after expose, which settles any one-sided call first)
                else:
                    arena.expose(seq, *single_copy.exposing(exposed))
                status = None
            else:
                status = fast(seq, tails, None, arena.spin_ns,
                              (exposed, bits) if type(exposed) is list else exposed)

            def finish() -> None:
                counts = [] if status == 0 else arena.rooted_entry(
                    seq, tails, what, group.timeout, None, None, status, root, _ignore)
                if counts:
                    hand_over(seq, counts)
                    return
                group.last_algorithm = f"{kind}/cma"
                copy = copies[split if at_root else single_copy.root_splits(arena, root, seq)]
                left = None
                if copy.packed is not None:  # (most often all that is left: one C call)
                    left = single_copy.run_after_entry(group, seq, what, copy, inp, out)
                if left != 0:
                    single_copy.run_program(group, seq, what, copy, None, inp, out, left)

            return status, finish

        if not async_op:
            return self._inline(lambda seq: enter(seq)[1]())
        return None if fast is None else self._async_single(enter, what, piece)

    def _gather_rest(self, seq: int, inp: np.ndarray, outs: list[np.ndarray] | None,
                     plan: tuple, entry: Any, status: int | None) -> None:
        """gather after its program's rooted entry (``entry``) returned ``status`` (not 0;
        None: nothing compiled ran, and Python stages ``inp`` and exposes ``entry``): the
        rest of the entry in Python, then the program's records after it (or, in
        Python, the root's pieces copied out), or, for a legal uneven gather too large
        for the regions, the general path from the entry on (never on the root: the
        entry checked every count against its pieces)."""
        tails, root, limit, at_root = plan[:4]
        group = self.group
        arena = group.arena
        data: Any = inp
        if status is not None:  # resume the program after its entry
            use: tuple = (resume_program, arena, seq, entry, plan[9][0], inp, outs, status)
            data = entry = None
            status &= 7  # (the interpreter's: the record to resume from, then the status)
        else:
            use = ((_copy_each, arena.small, outs, inp, group._rank) if at_root
                   else (_ignore,))
        counts = arena.rooted_entry(
            seq, tails, self._whats["gather"], group.timeout, data, entry, status, root, *use)
        if counts and max(counts) * inp.dtype.itemsize > limit:
            group.gather(None, inp.reshape(-1), root, ops.dtype_name(inp.dtype), _nothing,
                         entered=(seq, counts))
        else:
            group.last_algorithm = "gather/oneshot"

    def scatter(self, out: np.ndarray, ins: Any, src: int | None) -> bool:
        """:meth:`ProcessGroup.scatter` of the list ``ins`` on global rank ``src`` (None:
        the group's first rank) into ``out``, every piece shaped like ``out``. As in
        :meth:`gather`, only a rank other than the root ever hands a call over."""
        last = self._last_rooted["scatter"]  # (_rooted's first look, without its frame)
        plan = (last[3] if last[0] is out.dtype and last[1] == out.shape and last[2] == src
                else self._rooted("scatter", out, None, src))
        if not plan:
            return False
        _, root, _, at_root, _, alike, _, direct, single, program = plan
        if not at_root and ins is not None:
            return False
        if single:
            if not _scatter_fits(out, ins, at_root, alike):
                return False
            return self._scatter_single(out, ins, plan)
        group = self.group
        if program is None and not _scatter_fits(out, ins, at_root, alike):
            return False  # (else the compiled interpreter checks: see below)
        fifo = group.fifo
        if not fifo.enter_inline():  # queued async work goes first: the general path
            return False
        # Inline, as gather. (Nothing is read from the lane's root by a general path
        # taking over: a root on the lane staged every other piece, and its list's
        # layout is checked against the counts.) The root's own piece goes straight
        # into place, never through its region.
        try:
            arena = group.arena
            seq = next(group._seq)
            if program is None:  # Python stages (_scatter_rest)
                data: Any = ((*ins[:root], out.nbytes, *ins[root + 1:]) if direct
                             else ins if at_root else None)
                status = None
            else:
                # The registered schedule, one-sided: the root awaits nobody, the others
                # only the root. The interpreter itself refuses (status 5, nothing done)
                # an out that is not writable and contiguous, and a root's list not of
                # pieces like out: checking them in Python first cost 0.2 us of a 1.9 us
                # scatter.
                prog, data = program
                status = arena.compiled_program(seq, data, arena.spin_ns, prog, ins, out, -1,
                                                0, self._whats["scatter"])
                if status == 5:  # pieces not like out: of other sizes (Scatterv), or the
                    # general path explains, as this call's number
                    if not (at_root and uneven_rooted.scatter(self, seq, out, ins, root)):
                        self._refused(seq)
                        return False
                    status = 0  # (the root's pieces of other sizes: done there)
            if status == 0:
                group.last_algorithm = "scatter/oneshot"
            else:
                self._scatter_rest(seq, out, ins, data, plan, status)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def scatter_async(self, out: np.ndarray, ins: Any, src: int | None) -> Work | None:
        """:meth:`scatter` with ``async_op=True``, started here as :meth:`gather_async`
        starts a gather; the worker finishes it with :meth:`_scatter_rest`. None
        (nothing done): the general path."""
        plan = self._rooted("scatter", out, ins, src)
        if not plan:
            return None
        at_root, alike = plan[3], plan[5]
        if plan[8]:
            if not _scatter_fits(out, ins, at_root, alike):
                return None
            return self._scatter_single(out, ins, plan, async_op=True)
        if plan[9] is None:
            return None
        prog, data = plan[9]
        group = self.group
        arena = group.arena
        fifo = group.fifo
        if not fifo.enter_inline():
            return None
        what = self._whats["scatter"]
        try:
            seq = next(group._seq)
            # (not one-sided: an async call's errors belong to its Work)
            status = arena.compiled_program(seq, data, arena.spin_ns, prog, ins, out, -1, 0)
            if status == 5:  # refused, nothing done: the general path explains
                self._refused(seq)
                return None
            group.last_algorithm = "scatter/oneshot"
            if status != 0:
                return fifo.hand_over(
                    lambda: self._scatter_rest(seq, out, ins, data, plan, status),
                    Work(what))  # type: ignore[arg-type]
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return Work.finished(what)

    def _scatter_single(self, out: np.ndarray, ins: list[np.ndarray] | None, plan: tuple,
                        async_op: bool = False) -> Any:
        """scatter where it goes single-copy (``_select.scatter_oneshot``): its registered
        ``cma`` schedule's program (the root exposes its list where it lies, as a table
        of pieces, and every other rank reads its piece from there; a root in place
        writes part of each into that rank's out), from the lane's compiled entry on
        (:meth:`_rooted_single`). Any disagreement is handed over to the general path
        after the entry."""
        tails, root, _, at_root = plan[:4]
        group = self.group
        n = group._size

        def hand_over(seq: int, counts: list[int]) -> None:
            # (not on the root, whose pieces are all alike: the entry checked the counts)
            whole = (np.concatenate([p.reshape(-1) for p in ins])  # type: ignore[union-attr]
                     if at_root else None)
            group.scatter(out.reshape(-1), whole, root, ops.dtype_name(out.dtype), _nothing,
                          expected_counts=[out.size] * n if at_root else None,
                          entered=(seq, counts))

        return self._rooted_single("scatter", tails, root, ins if at_root else out, out,
                                   plan[8], out.nbytes, hand_over,
                                   (ins if at_root else None, out), async_op)

    def _scatter_rest(self, seq: int, out: np.ndarray, ins: Any, data: Any, plan: tuple,
                      status: int | None) -> None:
        """scatter after its program's rooted entry (``data``) returned ``status`` (not 0;
        None: nothing compiled ran, and Python stages ``data``): the rest of the entry
        in Python, then the program's records after it (or, in Python, my piece copied
        out), or, for a legal uneven scatter, my piece from the root's region, or the
        general path from the entry on where it is too large for that region (as in
        :meth:`_gather_rest`, never on the root)."""
        tails, root, limit, at_root, cma, _, mine, _, _, program = plan
        group = self.group
        arena = group.arena
        exposure = None
        if status is not None:  # the program's rooted entry ran (data): resume after it
            use: tuple = (resume_program, arena, seq, data, program[0], ins, out, status)
            data = None
            status &= 7  # (the interpreter's: the record to resume from, then the status)
        else:
            exposure = (0, 0) if at_root and cma else None
            # (the root's own piece straight from its list: staged or not, it is the same)
            use = ((_copy_own, out, ins[root]) if at_root
                   else (_copy_piece, out, arena.small[root], mine))
        counts = arena.rooted_entry(
            seq, tails, self._whats["scatter"], group.timeout, data, exposure, status, root,
            *use)
        if counts:  # a legal uneven scatter
            isz = out.dtype.itemsize
            if sum(counts) * isz > limit:
                group.scatter(out.reshape(-1), None, root, ops.dtype_name(out.dtype), _nothing,
                              entered=(seq, counts))
                return
            _copy_piece(seq & 1, out, arena.small[root], sum(counts[:group._rank]) * isz)
        group.last_algorithm = "scatter/oneshot"

    # --------------------------------------------------------- point to point

    def send(self, arr: np.ndarray, dst: int, tag: int) -> bool:
        """The blocking :func:`meshcast.send` of a contiguous array to global rank ``dst``:
        written into the ring at once, no Handle or Work (see ShmTransport.send_now),
        or from ``port_copy_bytes`` on single-copy (its address in the ring, then the
        receiver's FIN awaited); False: the general path."""
        # The common case in one C call (the port checks contiguity and the
        # transport's state itself); a frame less matters here: a small message's
        # round trip is a few microseconds.
        port = self._ports.get(dst)
        if (port is not None and TAGS[0] <= tag < TAGS[1] and _p2p_dtype(arr.dtype)
                and port.send(arr, tag) > 0):
            next(self.group._p2p_seq)  # numbered like any send, for later messages
            return True
        # (past p2p_ok the port, if any, has just said no: not again)
        if not self.p2p_ok(arr, dst, tag):
            return False
        if arr.nbytes >= self._copy_bytes:
            work = self._send_address(arr, dst, tag)
            if work is None:
                return False
            work.wait()
            return True
        return self._send_now(arr, dst, tag, self._spec.spin_s)

    def recv(self, arr: np.ndarray, src: int, tag: int) -> bool:
        """The blocking :func:`meshcast.recv` from global rank ``src`` into a contiguous
        array, when its message is, or within the spin time becomes, the first in the
        ring (see ShmTransport.recv_now); False: the general path."""
        port = self._ports.get(src)  # (as in send)
        if port is not None and TAGS[0] <= tag < TAGS[1] and _p2p_dtype(arr.dtype):
            state = port.recv(arr, tag, self._spin_ns)
            if state > 0:
                next(self.group._p2p_seq)
                return True
            if state == 0:  # nothing came within the spin time: the general path waits
                return False
        return (self.p2p_ok(arr, src, tag, writes=True)  # (the port said no, as in send)
                and self._recv_now(arr, src, tag, self._spec.spin_s))

    def isend(self, arr: np.ndarray, dst: int, tag: int) -> Work | None:
        """:func:`meshcast.isend` of a message :meth:`send` can take: a finished Work (the
        data is in the ring, the caller may reuse its array), or a single-copy send's,
        which the receiver's copy finishes; None: the general path."""
        return self.post_send(arr, dst, tag) if self.p2p_ok(arr, dst, tag) else None

    def irecv(self, arr: np.ndarray, src: int, tag: int) -> Work | None:
        """:func:`meshcast.irecv` of a message already first in the ring from ``src``: a
        finished Work; None: the general path (which posts the receive)."""
        return (self.post_recv(arr, src, tag) if self.p2p_ok(arr, src, tag, writes=True)
                else None)

    def post_send(self, arr: np.ndarray, dst: int, tag: int, wait: bool = False
                  ) -> Work | None:
        """:meth:`isend` of a message :meth:`p2p_ok` already accepted; with ``wait``,
        waiting up to the spin time for room in the ring (batch_isend_irecv, whose
        peer is likely copying out its previous message right now). A message that goes
        single-copy returns the Work its receiver's FIN completes."""
        if arr.nbytes >= self._copy_bytes:
            return self._send_address(arr, dst, tag)
        port = self._ports.get(dst)  # (its common case without a frame more, as in send)
        if port is not None and port.send(arr, tag) > 0:
            next(self.group._p2p_seq)
        elif not self._send_now(arr, dst, tag, self._spec.spin_s if wait else 0.0):
            return None
        return self.moved("send", dst, tag)

    def post_recv(self, arr: np.ndarray, src: int, tag: int, wait: bool = False
                  ) -> Work | None:
        """:meth:`irecv` of a message :meth:`p2p_ok` already accepted; with ``wait``,
        polling for it up to the spin time (batch_isend_irecv, whose peer is likely
        posting it right now)."""
        port = self._ports.get(src)  # (as in post_send)
        state = -1 if port is None else port.recv(arr, tag, self._spin_ns if wait else 0)
        if state > 0:
            next(self.group._p2p_seq)
        elif state == 0 or not self._recv_now(arr, src, tag, self._spec.spin_s if wait else 0.0):
            return None
        return self.moved("recv", src, tag)

    def make_batch(self, op_type: type, default: bool) -> Any:
        """:attr:`batch`, made at the first call: ``batch(ops)`` takes a list of
        ``op_type`` (P2POp) objects of this group (or naming none, when it is the
        ``default`` one) on contiguous NumPy arrays with plain int peers (of this
        host) and tags, and posts them in one C call straight from the ops: the sends
        written in list order as :meth:`post_send` writes one (single-copy already
        from ``_select.BATCH_SINGLE_MIN_BYTES``), then the receives taken in list
        order as :meth:`post_recv` takes one, then the single-copy sends' FINs
        awaited. It returns the ops' Works in op order when every op finished and
        each has its finished Work kept (:meth:`moved`); None: not such a list
        (nothing done); False: no send could be written (nothing done: the general
        batch's turn); or every op's state for :meth:`batch_done`. None: no such call
        here."""
        if self.batch is False:
            group = self.group
            self.batch = group.transport.batch(
                op_type, self._ports, _P2P_DTYPES, self._moved, group._p2p_seq, group, default,
                TAGS, self._batch_copy_bytes, self._spin_ns)
        return self.batch

    def batch_done(self, ops: list, states: tuple[int, ...]) -> list[Work]:
        """The Works of a compiled batch (:meth:`make_batch`) whose ops did not all
        finish in C, in op order, by ``states`` (1 done, -send_id a single-copy send
        whose FIN is still to come, 0 not done): finished ones, registered single-copy
        sends, the general path's receives, then its sends (in their order, after the
        receives: a message streamed in pieces drains what the peers stream to us)."""
        group = self.group
        works: list[Any] = []
        held = []
        for i, (p, state) in enumerate(zip(ops, states)):
            sends = p.kind == "isend"
            if state == 1:
                works.append(self.moved("send" if sends else "recv", p.peer, p.tag))
            elif state < 0:
                handle = group.transport.adopt_address_send(
                    self._ports[p.peer], p.peer, p.tensor, -state,
                    _P2PWhat(group, "send", p.peer, p.tag))
                works.append(P2PWork(handle.describe, handle, group._deadline()))
            elif sends:
                works.append(None)
                held.append(i)
            else:
                buf = as_buffer(p.tensor, name="tensor", caller="batch_isend_irecv", rank=None)
                works.append(group.irecv(buf, group.group_rank(p.peer), p.tag))
        for i in held:
            p = ops[i]
            works[i] = group.isend(p.tensor.reshape(-1), group.group_rank(p.peer), p.tag)
        return works

    def moved(self, verb: str, peer: int, tag: int) -> Work:
        """The finished Work of a message that moved as it was posted (``verb`` "send"
        or "recv", global rank ``peer``): one per (verb, peer, tag), kept while there
        are few (a program that numbers its messages by tag gets a new one each)."""
        key = (verb, peer, tag)
        work = self._moved.get(key)
        if work is None:
            work = Work.finished(_P2PWhat(self.group, verb, peer, tag),
                                 peer if verb == "recv" else None)
            if len(self._moved) < _MOVED_MAX:
                self._moved[key] = work
        return work

    def _send_address(self, arr: np.ndarray, dst: int, tag: int) -> Work | None:
        """Post a single-copy send of a message :meth:`p2p_ok` accepted through its port
        (only the address goes into the ring: ShmTransport.send_address); its Work
        completes when the receiver has copied the data. None: the general path."""
        port = self._ports.get(dst)
        if port is None:
            return None
        group = self.group
        handle = group.transport.send_address(port, dst, arr, tag,
                                              _P2PWhat(group, "send", dst, tag))
        if handle is None:
            return None
        next(group._p2p_seq)  # numbered like any send, for later messages
        return P2PWork(handle.describe, handle, group._deadline())

    def _send_now(self, arr: np.ndarray, dst: int, tag: int, spin_s: float) -> bool:
        """Send a message :meth:`p2p_ok` accepted straight into the ring, when its port
        (tried first by every caller) said no: the transport's own checks and its wait
        for room."""
        group = self.group
        if not group.transport.send_now(dst, group.group_id, KIND_P2P, tag, arr, spin_s):
            return False
        next(group._p2p_seq)  # numbered like any send, for later messages
        return True

    def _recv_now(self, arr: np.ndarray, src: int, tag: int, spin_s: float) -> bool:
        """Receive a message :meth:`p2p_ok` accepted straight out of the ring, when its
        port (tried first by every caller) could not decide (as :meth:`_send_now`)."""
        group = self.group
        if not group.transport.recv_now(src, group.group_id, KIND_P2P, tag, arr, spin_s):
            return False
        next(group._p2p_seq)
        return True

    def p2p_ok(self, arr: np.ndarray, peer: int, tag: int, writes: bool = False) -> bool:
        """Whether a message of ``arr`` (written into if ``writes``) with global rank
        ``peer`` and ``tag`` is one the front door would accept as it is, contiguous
        (anything else: the general path decides, and explains)."""
        flags = arr.flags
        return (flags.c_contiguous and (flags.writeable or not writes)
                and (_P2P_DTYPES.get(arr.dtype) or _p2p_dtype(arr.dtype))
                and peer in self._peers and TAGS[0] <= tag < TAGS[1])

    # -------------------------------------------------------------- machinery

    def _inline(self, run: Callable[[int], None]) -> bool:
        """``run(seq)`` as the group's next call, in this thread; False (nothing done)
        while async work is queued: the general path then queues behind it."""
        fifo = self.group.fifo
        if not fifo.enter_inline():
            return False
        try:
            run(next(self.group._seq))
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def _rooted(self, kind: str, arr: np.ndarray, pieces: Any, root_rank: int | None
                ) -> tuple | bool:
        """gather/scatter's plan when the call qualifies as far as this rank's ``arr``
        and, off the root, ``pieces`` (None) tell; the root's list is the caller's to
        check (the plan's check, or scatter's compiled entry)."""
        last = self._last_rooted[kind]  # a program repeats one call: skip hashing the key
        if last[0] is arr.dtype and last[1] == arr.shape and last[2] == root_rank:
            plan = last[3]
        else:
            plan = self._plan((kind, arr.dtype, arr.shape, root_rank), self._rooted_plan, arr,
                              root_rank, kind)
            self._last_rooted[kind] = (arr.dtype, arr.shape, root_rank, plan)
        if not plan or plan[3]:
            return plan
        return plan if pieces is None else False

    def _run(self, kind: str, tail: bytes, data: Any, combine: Callable[..., None],
             *args: Any) -> None:
        """One call that runs no program (no compiled fold for its op, or no compiled
        helper): my ``data`` into my region and one round (:meth:`Arena.tiny_oneshot`),
        then ``combine(parity, *args)`` reads every rank's region of that parity; behind
        queued async work, if any.

        ``combine`` is a module-level function and its arguments are passed along, not
        bound in a closure: building one per call cost a third of a tiny broadcast."""
        group = self.group
        fifo = group.fifo
        if fifo.enter_inline():  # the group is idle: run it right here
            try:
                seq = next(group._seq)
                group.arena.tiny_oneshot(seq, tail, self._whats[kind], group.timeout, data)
                combine(seq & 1, *args)
            except BaseException as exc:
                fifo.leave_inline(exc)
                raise
            fifo.leave_inline(None)
        else:  # behind queued async work, in call order
            seq = next(group._seq)
            what = self._whats[kind]

            def job() -> None:
                group.arena.tiny_oneshot(seq, tail, what, group.timeout, data)
                combine(seq & 1, *args)

            fifo.call(job, f"{kind} #{seq}")
        group.last_algorithm = _ONESHOT[kind]

    def _plan(self, key: tuple, build: Callable[..., tuple | bool], *args: Any
              ) -> tuple | bool:
        """The cached work of a tiny call, built on first use; False: not tiny."""
        try:
            plan = self.plans.get(key)
        except TypeError:  # an unhashable argument: the general path explains what is wrong
            return False
        if plan is None:
            # MESHCAST_ALGO choices are schedules: a collective it names skips the lane.
            plan = False if key[0] in self.group.tuned else build(*args)
            if len(self.plans) >= _PLANS_MAX:
                del self.plans[next(iter(self.plans))]
            self.plans[key] = plan
        return plan

    def _pair_plan(self, kind: str, out: np.ndarray, inp: np.ndarray,
                   build: Callable[..., tuple | bool], *extra: Any, disjoint: bool = False
                   ) -> tuple | bool:
        """:meth:`_plan` for a call on ``out`` and ``inp`` (``extra``: the rest of its key,
        e.g. the op), False also when either is not C-contiguous, or (``disjoint``)
        when they overlap. Remembered per kind for the last pair of arrays, checked by
        identity: a program repeats one call, and hashing the key and np.may_share_memory
        cost a fifth of an 8-byte call. (An array's memory and contiguity stay its own;
        its shape and dtype may not, so they are compared.) New arrays of the last shape
        (a program that makes its tensors anew, or slices them out of a larger buffer)
        reuse that shape's plan without the key and its lookup, which cost half a
        microsecond of an 8-byte all_gather; only their own checks are made again."""
        last = self._last_pair[kind]
        if (last[2] is inp.dtype and last[3] is out.dtype and last[4] == inp.shape
                and last[5] == out.shape and last[6] == extra):
            if last[0] is inp and last[1] is out:
                return last[7]
            shaped = last[8]
        else:
            shaped = self._plan((kind, inp.dtype, inp.shape, out.dtype, out.shape, *extra),
                                build, out, inp, *extra)
        plan = shaped
        if plan and not (out.flags.c_contiguous and inp.flags.c_contiguous
                         and not (disjoint and np.may_share_memory(inp, out))):
            plan = False
        self._last_pair[kind] = (inp, out, inp.dtype, out.dtype, inp.shape, out.shape, extra,
                                 plan, shaped)
        return plan

    def _alike_check(self) -> Callable[[Any, np.ndarray, bool], bool]:
        """``check(pieces, like, writable)``: whether ``pieces`` is a list of one array per
        rank, each like ``like`` (the compiled Round.alike, else :func:`_alike`), made once."""
        check = self._alike
        if check is None:
            check = self.group.arena.compiled_alike
            if check is None:
                n = self.group._size

                def check(pieces: Any, like: np.ndarray, writable: bool) -> bool:
                    return _alike(pieces, like, n, writable)
            self._alike = check
        return check

    def _views(self, like: np.ndarray) -> list[list[np.ndarray]]:
        """Per parity, every rank's one-shot region seen as an array like ``like``."""
        small = self.group.arena.small
        return [[small[r][p][:like.nbytes].view(like.dtype).reshape(like.shape)
                 for r in range(self.group.size())] for p in (0, 1)]

    def _symmetric_all_reduce(self, arr: np.ndarray) -> bool:
        """Whether an all_reduce of ``arr`` takes the symmetric path: the general path's
        rule (calls.all_reduce: from SYMMETRIC_ALL_REDUCE_MIN_BYTES where one-shot would
        take it, at any size past; never where MESHCAST_ALGO names all_reduce)."""
        return "all_reduce" not in self.group.tuned and self._symmetric(
            arr, _fast.SYMMETRIC_ALL_REDUCE_MIN_BYTES if self._fits(arr.nbytes) else 0)

    def _symmetric_broadcast(self, arr: np.ndarray) -> bool:
        """Whether a broadcast of ``arr`` takes the symmetric path (calls.broadcast's
        rule: ``_select.symmetric_broadcast``)."""
        return (_fast.symmetric_broadcast(self.group.caps, arr.nbytes)
                and self._symmetric(arr, 0))

    def _symmetric(self, arr: np.ndarray, least: int | None = None) -> bool:
        """Whether ``arr`` is large enough for the symmetric path (``least`` bytes, the
        table's SYMMETRIC_MIN_BYTES by default) and lies in a symmetric allocation
        (all_gather's output, reduce_scatter's input, all_reduce's array): that path
        is faster then."""
        heap = self.group.symmetric
        if least is None:
            least = _fast.SYMMETRIC_MIN_BYTES
        return (bool(heap.allocations) and arr.nbytes >= least
                and heap.find(arr.reshape(-1)) is not None)

    def _program(self, kind: str, dtype: np.dtype, n_in: int | None, n_out: int | None,
                 counts: tuple[int, ...] | None = None, root: int = -1,
                 listed: int = NO_BUFFER) -> bytes | None:
        """The packed one-shot program of a call of this shape: its collective's
        registered ``oneshot`` schedule, flattened and packed as the general path's
        (paths.oneshot.Programs), for the compiled interpreter (``Round.program``) to run;
        None without that interpreter, whose place the lane's Python combines take.
        ``listed``: the side the call gives as a list of one array per rank (torch's
        list forms; ``_program.as_pieces``)."""
        if self.group.arena.compiled_program is None:
            return None
        return self._programs.get(kind, dtype, root, n_in, n_out, counts, listed).packed

    def _fits(self, nbytes: int) -> bool:
        return _fast.oneshot(self.group.caps, nbytes)

    @staticmethod
    def _tail(kind: str, oneshot: bool = True, **fields: Any) -> bytes:
        fp = Fingerprint(0, kind, path=path_digest(None, oneshot), **fields)
        return fp.pack()[_SEQ.size:]

    def _address(self, arr: np.ndarray) -> int:
        """``arr.ctypes.data``, which costs about 1 us, remembered for the last array
        (programs pass the same one again and again; holding it keeps it alive, so
        its address cannot be reused by another array)."""
        last = self._last_address
        if last[0] is arr:
            return last[1]
        address = arr.ctypes.data
        self._last_address = (arr, address)
        return address

    @staticmethod
    def _valid_op(op: Any, dtype: np.dtype, caller: str) -> ops.ReduceOp | None:
        try:
            return ops.validate(op, dtype, caller=caller)
        except InvalidUsage:  # the general path raises it, naming the rank
            return None

    # ------------------------------------------------------------------ plans

    def _all_reduce_plan(self, arr: np.ndarray, op: Any, kind: str = "all_reduce",
                         root: int | None = -1) -> tuple | bool:
        """(fingerprint tail, one-shot views, kernel, AVG?, compiled code) in the one-shot
        range; for all_reduce where the single-copy path takes over, (tail, None, op,
        AVG?, None)."""
        dtype, group = arr.dtype, self.group
        name = ops.dtype_name(dtype)
        # (Symmetric arrays take the one-shot path too at the sizes that fit it.)
        oneshot = self._fits(arr.nbytes)
        single = (kind == "all_reduce" and not oneshot
                  and _fast.all_reduce_single_copy(group.caps, arr.nbytes))
        if (root is None or name not in _MOVE_DTYPES or not dtype.isnative
                or not (oneshot or single)):
            return False
        rop = self._valid_op(op, dtype, kind)
        if rop is None or not _folds_here(dtype, rop):
            return False
        tail = self._tail(kind, oneshot, dtype=name, op=rop.name, root=root,
                          count=arr.size)
        sched_op = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
        if single:
            return (tail, None, sched_op, rop is ops.ReduceOp.AVG, None,  # all_reduce/cma
                    self._copy_program(kind, tail, dtype, -1, None, arr.size, op=sched_op))
        code = ops.compiled_kernel(sched_op, dtype)
        prog = (self._program(kind, dtype, arr.size, arr.size)
                if kind == "all_reduce" and code is not None else None)
        if kind == "all_reduce" and prog is None and _half(dtype):
            return False  # (the lane's NumPy combine would round at every step)
        return (tail, self._views(arr), ops.kernel(sched_op, dtype), rop is ops.ReduceOp.AVG,
                code, prog)

    def _barrier_plan(self) -> tuple | bool:
        """(fingerprint tail, packed program or None) in the one-shot range."""
        if not self._fits(0):
            return False
        return self._tail("barrier"), self._program("barrier", np.dtype(np.uint8), None, None)

    def _reduce_plan(self, arr: np.ndarray, op: Any, dst: int) -> tuple | bool:
        """(fingerprint tail, one-shot views, kernel, AVG?, compiled code, root, packed
        program or None) in the one-shot range; False elsewhere. The program is None
        without the compiled interpreter, and at a root whose op it cannot fold."""
        root = self.group._group_rank_of.get(dst)
        plan = self._all_reduce_plan(arr, op, kind="reduce", root=root)
        if not isinstance(plan, tuple):
            return False
        tail, views, kernel, average, code = plan[:5]
        at_root = self.group._rank == root
        if code is None and not at_root:
            code = -1  # (it folds nothing: the program runs without a kernel)
        prog = (None if code is None else
                self._program("reduce", arr.dtype, arr.size, arr.size if at_root else None,
                              root=root))  # type: ignore[arg-type]
        if prog is None and _half(arr.dtype):
            return False  # (the lane's NumPy combine would round at every step)
        return tail, views, kernel, average, code, root, prog

    def _broadcast_plan(self, arr: np.ndarray, src: int) -> tuple | bool:
        """(fingerprint tail, one-shot views, root, packed program or None) in the
        one-shot range; (tail, None, root, its single-copy program and entry, or None)
        where the single-copy path takes over (broadcast/cma: the root writes each
        reader's part, the reader reads the others); False elsewhere (the schedules)."""
        dtype = arr.dtype
        name = ops.dtype_name(dtype)
        group = self.group
        root = group._group_rank_of.get(src)
        if root is None or name not in _MOVE_DTYPES or not dtype.isnative:
            return False
        fields = dict(dtype=name, root=root, count=arr.size)
        path = _fast.fast_path("broadcast", group.caps, arr.nbytes)
        if path == "oneshot":
            return (self._tail("broadcast", **fields), self._views(arr), root,
                    self._program("broadcast", dtype, None, arr.size, root=root))
        if path == "cma":
            tail = self._tail("broadcast", False, **fields)
            return tail, None, root, self._copy_program("broadcast", tail, dtype, root, None,
                                                        arr.size)
        return False

    def _all_gather_plan(self, out: np.ndarray, inp: np.ndarray) -> tuple | bool:
        """(fingerprint tail, one-shot views, packed program or None) in the one-shot
        range; where the single-copy path takes over, (tail, None, its single-copy
        programs with their entry, of an input apart and of one in its place in the
        output, or None); False elsewhere (the schedules)."""
        group = self.group
        dtype, n = inp.dtype, group.size()
        name = ops.dtype_name(dtype)
        if (name not in _MOVE_DTYPES or not dtype.isnative or out.dtype != dtype
                or out.size != inp.size * n or n < 2):
            return False
        fields = dict(dtype=name, count=inp.size,
                      extra=counts_hash((inp.size,) * n))
        if _fast.oneshot_all_gather(group.caps, inp.nbytes):
            return (self._tail("all_gather", **fields), self._views(inp.reshape(-1)),
                    self._program("all_gather", dtype, inp.size, out.size, (inp.size,) * n))
        if _fast.single_copy(group.caps, inp.nbytes):
            # its program (all_gather/cma), of an input apart and of one in its place in
            # the output
            tail = self._tail("all_gather", False, **fields)
            counts = (inp.size,) * n
            programs = tuple(self._copy_program("all_gather", tail, dtype, -1, inp.size,
                                                out.size, counts, in_place)
                             for in_place in (False, True))
            return tail, None, None if None in programs else programs
        return False

    def _all_gather_list_plan(self, inp: np.ndarray) -> tuple | bool:
        """(fingerprint tail, the check of the list, packed program or None, None) in the
        one-shot range; where the single-copy path takes over, (tail, the check, None, its
        single-copy program with its entry, or None: the general path); False elsewhere
        (the schedules take lists through the group). The programs are all_gather's, its
        output the list's pieces, with all_gather_into_tensor's fingerprint: a rank
        passing a list meets one passing a tensor."""
        group = self.group
        dtype, n = inp.dtype, group.size()
        name = ops.dtype_name(dtype)
        if name not in _MOVE_DTYPES or not dtype.isnative or n < 2:
            return False
        fields = dict(dtype=name, count=inp.size,
                      extra=counts_hash((inp.size,) * n))
        if _fast.oneshot_all_gather(group.caps, inp.nbytes):
            return self._tail("all_gather", **fields), self._alike_check(), self._program(
                "all_gather", dtype, inp.size, inp.size * n, (inp.size,) * n,
                listed=OUTPUT), None
        if _fast.single_copy(group.caps, inp.nbytes):
            tail = self._tail("all_gather", False, **fields)
            return tail, self._alike_check(), None, self._copy_program(
                "all_gather", tail, dtype, -1, inp.size, inp.size * n, (inp.size,) * n,
                listed=OUTPUT)
        return False

    def _reduce_scatter_plan(self, out: np.ndarray, inp: np.ndarray, op: Any,
                             listed: int = NO_BUFFER) -> tuple | bool:
        """(tail, one-shot views, my pieces, kernel, AVG?, compiled code, packed program or
        None) in the one-shot range; where the single-copy path takes over, (tail, None,
        None, op, AVG?, None, None). ``listed``: INPUT for the list form, whose program
        takes the input as one array per rank."""
        group = self.group
        dtype, n, me = inp.dtype, group.size(), group.rank()
        name = ops.dtype_name(dtype)
        oneshot = self._fits(inp.nbytes)
        single = not oneshot and n > 1 and _fast.single_copy(group.caps, out.nbytes)
        if (name not in _MOVE_DTYPES or not dtype.isnative or out.dtype != dtype
                or inp.size != out.size * n or not (oneshot or single)):
            return False
        rop = self._valid_op(op, dtype, "reduce_scatter")
        if rop is None or not _folds_here(dtype, rop):
            return False
        tail = self._tail("reduce_scatter", oneshot, dtype=name, op=rop.name,
                          count=out.size, extra=counts_hash((out.size,) * n))
        if single:  # its program (reduce_scatter/cma), or None: the body
            sched = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
            prog = self._copy_program("reduce_scatter", tail, dtype, -1, inp.size, out.size,
                                      (out.size,) * n, op=sched, listed=listed)
            return tail, None, None, sched, rop is ops.ReduceOp.AVG, None, prog
        views = self._views(inp.reshape(-1))
        c = out.size
        pieces = [[region[me * c:(me + 1) * c] for region in views[p]] for p in (0, 1)]
        sched_op = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
        code = ops.compiled_kernel(sched_op, dtype)
        prog = (None if code is None
                else self._program("reduce_scatter", dtype, inp.size, c, (c,) * n, listed=listed))
        if prog is None and _half(dtype):
            return False  # (the lane's NumPy combine would round at every step)
        return (tail, views, pieces, ops.kernel(sched_op, dtype), rop is ops.ReduceOp.AVG,
                code, prog)

    def _reduce_scatter_list_plan(self, out: np.ndarray, op: Any) -> tuple | bool:
        """(the tensor form's plan, the check of the list), with the compiled helper only;
        False elsewhere. Past the one-shot sizes, the plan's views are None."""
        group = self.group
        n = group.size()
        if n < 2 or group.arena.compiled_oneshot is None:
            return False
        plan = self._reduce_scatter_plan(out, np.empty(out.size * n, out.dtype), op, INPUT)
        return plan and (plan, self._alike_check())

    def _all_to_all_plan(self, out: np.ndarray, inp: np.ndarray) -> tuple | bool:
        group = self.group
        dtype, n, me = inp.dtype, group.size(), group.rank()
        name = ops.dtype_name(dtype)
        if (n < 2 or name not in _MOVE_DTYPES or not dtype.isnative
                or out.dtype != dtype or not inp.shape or not out.shape
                or inp.shape[0] % n or out.shape[0] % n or out.size != inp.size):
            return False
        c = inp.size // n
        tail = self._tail("all_to_all", False, dtype=name, count=inp.size)
        layout = split_header(n)
        header = pack_split_header([c] * n, [c] * n)
        head, p = split_head(n), c * dtype.itemsize
        small = group.arena.small
        headers = [[memoryview(small[q][parity])[:layout.size] for q in range(n)]
                   for parity in (0, 1)]
        # what rank q's staged input holds for me, per parity
        pieces = [[small[q][parity][head + me * p:head + (me + 1) * p] for q in range(n)]
                  for parity in (0, 1)]
        limit = _fast.all_to_all_direct_limit(group.caps, head)
        # Past the limit, when the call goes single-copy: the registered cma schedule's
        # program, flattened presuming every rank's split header is mine, as below.
        single = (self._copy_program("all_to_all", tail, dtype, -1, inp.size, inp.size)
                  if _fast.all_to_all_single_copy(group.caps, inp.nbytes, head) else None)
        # Up to the limit, with the compiled interpreter: the registered one-shot
        # schedule's program, flattened presuming every rank's split header is mine
        # (equal splits: its checks, status 4 where one differs), and its entry, the
        # general path's (rooted, without a root; exposing the input per call).
        tails = (tail,) * n
        packed = self._program("all_to_all", dtype, inp.size, inp.size) \
            if inp.nbytes <= limit else None
        program = None if packed is None else (packed, (tails, -1, None))
        return (tail, header, headers, head, limit, pieces, name, tails, single,
                program)

    def _rooted_plan(self, arr: np.ndarray, root_rank: int | None, kind: str
                     ) -> tuple | bool:
        """gather/scatter: every rank's fingerprint tail (the root's names its pieces,
        all like ``arr``), the root's group rank, the one-shot limit, whether I am the
        root, whether pieces are exposed for single-copy reads, the check of the root's
        list (compiled or :func:`_alike`), where my piece starts in the root's,
        whether I am a scatter's root that copies its own piece straight into place,
        when the call goes single-copy (:meth:`_gather_single`,
        :meth:`_scatter_single`) instead of one-shot, its cma schedule's programs
        (paths.single_copy.CopyProgram: as is, and with the root splitting; else None), and the
        one-shot call's packed program (its registered ``oneshot`` schedule, the
        root's side its list of pieces) with its rooted entry (``Round.program``), or
        None without the compiled interpreter."""
        group = self.group
        dtype, n = arr.dtype, group.size()
        name = ops.dtype_name(dtype)
        root = group._group_rank_of.get(group.global_ranks[0] if root_rank is None
                                        else root_rank)
        readers = n if kind == "gather" else 1  # whose pieces one region holds
        limit = _fast.direct_bytes(group.caps, readers)
        # Past the one-shot limit a call goes single-copy where the general path's would
        # (the same rule, _select.single_copy, so that a root on the general path agrees).
        single = not (_fast.gather_oneshot(group.caps, arr.nbytes) if kind == "gather" else
                      _fast.scatter_oneshot(group.caps, arr.nbytes * n, arr.nbytes))
        if (root is None or n < 2 or name not in _MOVE_DTYPES or not dtype.isnative
                or single and not (group.transport.cma_min_bytes > 0
                                   and _fast.single_copy(group.caps, arr.nbytes)
                                   and single_copy.pieces_apart_fit(group.arena))):
            return False
        at_root = group._rank == root
        copies = None
        if single:
            # its registered cma schedule's programs, the root's side its list of pieces
            # (exposed as their table by the entry): as is, and with the root moving a
            # part of every piece itself (a root in place: Plan.root_splits)
            whole, listed = ((arr.size * n, INPUT if kind == "scatter" else OUTPUT) if at_root
                             else (None, NO_BUFFER))
            n_in, n_out = (whole, arr.size) if kind == "scatter" else (arr.size, whole)
            copies = tuple(self._copy_programs.get(kind, dtype, root, n_in, n_out,
                                                   (arr.size,) * n, root_splits=splits,
                                                   listed=listed) for splits in (False, True))
            if None in copies:  # (a schedule that does not flatten: the general path)
                return False
        tails = tuple(self._tail(kind, False, dtype=name, root=root,
                                 count=arr.size,
                                 extra=counts_hash((arr.size,) * n) if q == root else 0)
                      for q in range(n))
        alike = self._alike_check()
        cma = group.transport.cma_min_bytes > 0
        program = None
        if not single:  # its registered schedule, the root's side its list of pieces
            whole, listed = (arr.size * n, INPUT if kind == "scatter" else OUTPUT) if at_root \
                else (None, NO_BUFFER)
            packed = (self._program(kind, dtype, whole, arr.size, root=root, listed=listed)
                      if kind == "scatter" else
                      self._program(kind, dtype, arr.size, whole, root=root, listed=listed))
            # with its rooted entry (Round.program). A root exposes nothing, for a general
            # path taking over (a scatter root staged every other piece; a gather root's
            # are read from, never into); a gather's other rank exposes its input, per
            # call (lanes.gather).
            program = None if packed is None else (
                packed, (tails, root, (0, 0) if at_root and cma else None))
        return (tails, root, limit, at_root, cma, alike,
                group._rank * arr.nbytes,
                kind == "scatter" and at_root and arr.nbytes >= _fast.SCATTER_ROOT_DIRECT_BYTES,
                copies, program)


def _scatter_fits(out: np.ndarray, ins: Any, at_root: bool, alike: Callable[..., bool]
                  ) -> bool:
    """Whether a scatter's ``out`` is C-contiguous and writable and, at the root, its list
    ``ins`` holds pieces like it (the plan's check ``alike``)."""
    flags = out.flags
    return flags.c_contiguous and flags.writeable and (not at_root or alike(ins, out, False))


def _in_place(arr: np.ndarray, piece: np.ndarray,
              same_start: Callable[[np.ndarray, np.ndarray], bool] | None = None) -> bool:
    """Whether a gather's input or a scatter's out is the root's own piece of its list, in
    place: the root then has nothing of its own to copy, and moves a part of every
    other rank's piece instead (paths.single_copy.SPLIT), from
    ``_select.ROOTED_SPLIT_MIN_BYTES``. ``same_start``: the compiled check
    (transport/_tiny.c), 0.06 us; without it, NumPy's array interface costs 2-3 us in
    place, on the root's entry, which every rank waits for. (Asked only from the split
    size: below, the root's copy of its piece onto itself costs nothing in the compiled
    reads, _copy.h's move_bytes.)"""
    if same_start is not None:
        return same_start(arr, piece)
    return (np.may_share_memory(arr, piece)  # (cheap; the addresses only if so)
            and arr.__array_interface__["data"][0] == piece.__array_interface__["data"][0])


def _alike(pieces: Any, like: np.ndarray, n: int, writable: bool) -> bool:
    """Whether ``pieces`` is a list of ``n`` contiguous (and ``writable``) arrays shaped and
    typed like ``like``: the root's list of a lane gather/scatter; anything else takes
    the general path. (A loop, not all() over a generator: half the cost.)"""
    if type(pieces) is not list or len(pieces) != n:
        return False
    dtype, shape = like.dtype, like.shape
    for p in pieces:
        if type(p) is not np.ndarray or p.dtype != dtype or p.shape != shape:
            return False
        flags = p.flags
        if not flags.c_contiguous or (writable and not flags.writeable):
            return False
    return True


def _equal_splits(splits: Any, arr: np.ndarray, n: int) -> bool:
    """Whether ``splits`` (all_to_all_single's split sizes) are ``n`` equal rows of dim 0
    of ``arr``: what no split sizes mean."""
    if type(splits) is not list and type(splits) is not tuple:
        return False
    rows = arr.shape[0] if arr.shape else 0
    return (len(splits) == n and rows % n == 0
            and all(type(s) is int and s == rows // n for s in splits))


def _entry_differs(group: GroupView, seq: int) -> None:
    """Call ``seq``'s entry found fingerprints that differ where no legal call differs
    (a broadcast's: the count and the root are in it): raise the MismatchError."""
    group.arena.compare_entered(seq, False)
    raise AssertionError(f"collective #{seq} on {group.group_name}: the entry disagreed, "
                         f"the fingerprints not")


def _nothing() -> None:
    """The finish of a call whose buffers need no write-back."""


def _ignore(parity: int, *args: Any) -> None:
    """What a barrier (or a broadcast's root) reads from the one-shot regions: nothing."""


# The Python combines of the one-shot lane calls (used where the compiled one did not
# run): module-level, their arguments passed along by TinyCallLane._run.


def _reduce_parity(parity: int, arr: np.ndarray, views: list, kernel: Any,
                   average: bool) -> None:
    _reduce(arr, views[parity], kernel, average)


def _run_program(group: GroupView, what: object, seq: int, tail: bytes, prog: bytes,
                 inp: np.ndarray | None, out: np.ndarray | None, kernel: int, average: bool,
                 per_rank_counts: bool, status: int | None = None) -> None:
    """Call ``seq``'s packed program run by the compiled interpreter (or, with ``status``,
    the rest of a run that returned it): where the round cannot finish in C, the arena
    ends it in Python (``Arena.program_rest``: the wait, the comparison, the errors) and
    the program resumes after it. ``average``: the fold was a SUM to divide. A
    synchronous call's (``status`` None) entry may be one-sided (named by ``what``)."""
    arena = group.arena
    if status is None:
        status = arena.compiled_program(seq, tail, arena.spin_ns, prog, inp, out, kernel, 0,
                                        what)
    if status:
        arena.program_rest(seq, tail, what, time.monotonic() + group.timeout, prog, inp, out,
                           kernel, status, per_rank_counts)
    if average:
        ops.finish_average(out, group._size)


def _finish_oneshot(arena: Any, seq: int, tail: bytes, what: object, timeout: float,
                    data: np.ndarray | None, status: int, combine: Callable[..., None],
                    args: tuple) -> None:
    """The rest of a one-shot call whose compiled round returned ``status``: the arena's
    Python round from there (waits, checks, raises), then ``combine(parity, *args)``
    reads the regions."""
    arena.oneshot_rest(seq, tail, what, timeout, data, status)
    combine(seq & 1, *args)


def _copy_root(parity: int, arr: np.ndarray, views: list, root: int) -> None:
    arr[...] = views[parity][root]


def _concatenate(parity: int, views: list, out: np.ndarray) -> None:
    np.concatenate(views[parity], out=out)


def _copy_each_piece(flat: np.ndarray, outs: list[np.ndarray]) -> None:
    """Consecutive equal pieces of ``flat`` into ``outs`` (an all_gather into a list that
    the general path gathered into one array)."""
    for piece, part in zip(outs, np.split(flat, len(outs))):
        np.copyto(piece, part.reshape(piece.shape))


def _copy_each(parity: int, small: list, outs: list[np.ndarray],
               mine: np.ndarray | None = None, me: int = -1) -> None:
    """Every rank's region into its own piece (all_gather into a list); a gather's root
    passes its own piece ``mine``, which goes straight from its array into piece ``me``
    (the compiled entry does not stage it)."""
    for q, piece in enumerate(outs):
        if q == me and mine is not None:
            np.copyto(piece, mine.reshape(piece.shape))
            continue
        dest = piece.reshape(-1).view(np.uint8)
        dest[:] = small[q][parity][:dest.nbytes]


def _copy_own(parity: int, out: np.ndarray, piece: np.ndarray) -> None:
    """scatter's root: its own piece, straight from its list."""
    np.copyto(out, piece)


def _copy_piece(parity: int, out: np.ndarray, regions: tuple, lo: int) -> None:
    """scatter: my piece of the root's region, from byte ``lo``."""
    nb = out.nbytes
    out.reshape(-1).view(np.uint8)[:] = regions[parity][lo:lo + nb]


_ONESHOT = {kind: f"{kind}/oneshot" for kind in (
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")}
_SINGLE = {kind: f"{kind}/cma"
           for kind in ("broadcast", "all_gather", "all_reduce", "reduce_scatter", "all_to_all")}


def _reduce(arr: np.ndarray, regions: list[np.ndarray], kernel: Any, average: bool) -> None:
    """``arr`` = the reduction of every rank's region, in rank order on every rank, so that
    all ranks end with bitwise identical results; AVG divides once at the end."""
    kernel(regions[0], regions[1], out=arr)
    for region in regions[2:]:
        kernel(arr, region, out=arr)
    if average:
        ops.finish_average(arr, len(regions))


# The tags a send/recv may carry, [lo, hi): _api._tag enforces them, and the p2p lane
# takes only messages the front door would accept. Defined here, not in _api,
# because _api imports this module.
TAGS = (-(1 << 62), 1 << 62)


_P2P_DTYPES: dict[np.dtype, bool] = {}


def _p2p_dtype(dtype: np.dtype) -> bool:
    """Whether the front door would take an array of ``dtype`` for a message as it is
    (remembered: numpy builds ``dtype.name`` anew on every access)."""
    ok = _P2P_DTYPES.get(dtype)
    if ok is None:
        ok = _P2P_DTYPES[dtype] = dtype.isnative and ops.dtype_name(dtype) in SUPPORTED
    return ok


def _writable(arr: np.ndarray) -> bool:
    flags = arr.flags
    return flags.c_contiguous and flags.writeable


def _reduce_scatter_entered(group: GroupView, seq: int, counts: list[int], out: np.ndarray,
                            inp: np.ndarray, op: ops.ReduceOp, average: bool, caller: str
                            ) -> None:
    """A lane's reduce_scatter ``seq`` (``caller``'s), entered, handed over to the general
    path (every rank's ``counts`` from its entry): ``inp`` flat, ``op`` as the lane folds
    it (AVG as SUM, ``average`` saying so)."""
    buf = as_buffer(out, name="output", caller=caller, rank=None)
    group.reduce_scatter(buf, inp, [out.size] * group._size,
                         ops.ReduceOp.AVG if average else op, _nothing,
                         entered=(seq, counts))


def _uneven_staged(outs: Any, ins: Any, n: int, staging: Staging | None = None
                   ) -> tuple[np.ndarray, np.ndarray, list[int], list[int]] | None:
    """(output, input, output rows, input rows) of the all_to_all_single that an
    all_to_all of lists of pieces of different lengths along dim 0 is, when every piece
    of both lists is a C-contiguous NumPy array of one dtype and one shape past dim 0
    (the outputs writable): the input the pieces' concatenation, both in ``staging`` (a
    synchronous call's) or fresh; else None."""
    if type(ins) is not list or type(outs) is not list or len(ins) != n or len(outs) != n:
        return None
    like = ins[0]
    if type(like) is not np.ndarray or not like.shape:
        return None
    dtype, rest = like.dtype, like.shape[1:]
    for pieces, writable in ((ins, False), (outs, True)):
        for p in pieces:
            if type(p) is not np.ndarray or p.dtype != dtype or p.shape[1:] != rest or (
                    not p.shape) or not p.flags.c_contiguous or (
                    writable and not p.flags.writeable):
                return None
    out_rows = [p.shape[0] for p in outs]
    in_rows = [p.shape[0] for p in ins]
    if staging is None:
        return np.empty((sum(out_rows), *rest), dtype), np.concatenate(ins), out_rows, in_rows
    inp = np.concatenate(ins, out=staging.get("input", dtype, (sum(in_rows), *rest)))
    return staging.get("output", dtype, (sum(out_rows), *rest)), inp, out_rows, in_rows


def _lists_apart(outs: list[np.ndarray], ins: list[np.ndarray]) -> bool:
    """Whether no piece of ``outs`` overlaps a piece of ``ins`` (the compiled interpreter
    refuses such lists, status 5: an async call asks first)."""
    spans = sorted((p.__array_interface__["data"][0], p.nbytes, side)
                   for side, pieces in ((0, ins), (1, outs)) for p in pieces if p.nbytes)
    ends = [0, 0]  # the furthest end of the inputs, of the outputs, seen so far
    for start, nbytes, side in spans:
        if start < ends[1 - side]:
            return False
        ends[side] = max(ends[side], start + nbytes)
    return True


def _pieces_out(out: np.ndarray, outs: list[np.ndarray]) -> None:
    """``out``'s rows, piece after piece, into the pieces ``outs``."""
    at = 0
    for piece in outs:
        rows = piece.shape[0]
        piece[...] = out[at:at + rows]
        at += rows


def _rows_out(out: np.ndarray, outs: list[np.ndarray]) -> None:
    """Piece q of ``out`` (its rows in equal parts, one per rank) into ``outs[q]``."""
    rows = out.shape[0] // len(outs)
    for q, piece in enumerate(outs):
        piece[...] = out[q * rows:(q + 1) * rows]
