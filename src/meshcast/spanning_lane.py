"""The lane for tiny synchronous calls across hosts: the eager agreement with nothing around it.

An 8-byte all_reduce across hosts is one exchange of rows (see
:mod:`meshcast.spanning`): every rank's fingerprint and data, sent straight to
every other rank over MPI, or through the hosts' leaders. What the general
path spends around that exchange (Fingerprint objects, closures, a job for
the group's call queue, parsing every row's words, per-call slicing) is
Python on every rank, and on a machine whose cores the ranks share, every
rank's Python is on every other rank's critical path. For the calls a program
repeats (same group, dtype, shape, op or root), this lane caches what the
general path recomputes: the row's cell (fingerprint less its sequence
number, the piece size, the payload's length), where every rank's row lands
in the exchanged table, and views of their payloads shaped like the array.

Rule, as for :class:`meshcast.lanes.TinyCallLane`: the lane runs exactly the
eager path of the :class:`~meshcast.spanning.HostSpanningGroup` method it
stands for (the same row bytes, the same operand order as
``algorithms/eager.py``'s fold or copy from the rows), so one rank may take
the lane while another takes the general path. A call the lane cannot take
(torch tensors are viewed as arrays by the front door first; non-contiguous or
read-only arrays, float16/bfloat16, data past the eager size, a forced
family, an op invalid for the dtype) makes its method return False having
done nothing, and the front door falls back to the general path, which
validates and raises as usual. When the rows do not all say what this rank's
says, the general reading of the table runs and raises the MismatchError
every rank raises, or, for a legal call the lane did not expect (a gather or
scatter whose pieces differ between ranks), finishes it with the general
path's own steps.

It takes all_reduce, broadcast, reduce, all_gather_into_tensor,
reduce_scatter_tensor, gather, scatter, all_to_all_single in even pieces and
barrier; all_to_all with split sizes and point-to-point calls go the general
way. A synchronous all_reduce, reduce_scatter_tensor or all_to_all_single in
even pieces past the eager size that the group runs ``fused`` (its agreement in
its data's messages) takes the lane too, under the same rule: the same cell,
the same plans and steps as the general path's, only the work around them
cached (at 128 KiB across 2 emulated hosts that work was ~60 us of CPU per call
on every rank).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from . import ops
from ._fingerprint import SIZE as FP_SIZE
from ._fingerprint import Fingerprint, counts_hash
from .agreement_rows import _WORDS, CELL, _row_length
from .algorithms import hierarchical as hier
from .errors import InvalidUsage, MismatchError
from .lanes import _alike, _nothing

_SEQ = struct.Struct("<Q")  # the fingerprint's first field (see _fingerprint._STRUCT)
_PLANS_MAX = 1024  # (as the tiny-call lane's: see lanes._PLANS_MAX)
_MOVE_DTYPES = ops.FAST_DTYPES | {"float16"}  # dtypes a broadcast moves as they are
_COPY_ROW, _COPY_ALL = -1, -2  # the compiled runner's copies (transport/_mpi_rows.c)


class _Combined:
    """What :meth:`AcrossHostsLane._exchange` returns when the compiled runner also
    combined the rows into the caller's array (truthy, as "every row as expected")."""

    def __bool__(self) -> bool:
        return True


_COMBINED = _Combined()


class SpanningView(Protocol):
    """What the lane uses of a :class:`~meshcast.spanning.HostSpanningGroup`.

    spanning.py imports the lane, so the lane names the group by this protocol
    instead of importing it (no import cycle). The underscored members are the
    agreement's buffers and steps, which the lane shares with the general path.
    """

    group_name: str
    fifo: Any  # meshcast._fifo.CallFifo
    timeout: float
    last_algorithm: str | None
    _seq: Iterator[int]
    _forced: dict[str, str]
    _group_rank_of: dict[int, int]
    _slot: np.ndarray
    _slot_view: memoryview
    _table: np.ndarray
    _table_view: memoryview
    _slot_bytes: int
    flat: Any  # the inter-host communicator of the whole group (transport.interhost)

    def eager_cap(self, kind: str) -> int: ...

    def rank(self) -> int: ...

    def size(self) -> int: ...

    def _what(self, kind: str, seq: int) -> str: ...

    def _exchange(self, deadline: float, what: Any, seq: int) -> None: ...

    def _read_rows(self, packed: bytes) -> Any: ...

    def _family(self, kind: str, nbytes: int, algorithm: str | None) -> tuple[str, int]: ...

    def _eager_runners(self) -> Any: ...

    _fused_plans: hier.FusedPlans

    def _fused_ctx(self, deadline: float, what: Any, seq: int) -> Any: ...

    def _fused_refused(self, fp: Fingerprint, mine: int, deadline: float, what: Any) -> None: ...

    def _settle(self, body: Any, eager: Any, counts: list[int], auxes: list[int],
                rows: Any, deadline: float, what: Any, seq: int | None = None) -> None: ...

    def _agree_then_settle(self, fp: Fingerprint, mine: int, aux: int, payload: Any,
                           body: Any, eager: Any, deadline: float, what: Any) -> None: ...

    def _all_to_all_steps(self, *args: Any) -> Any: ...

    def _gather_steps(self, *args: Any) -> Any: ...

    def _scatter_steps(self, *args: Any) -> Any: ...

    def row_offsets(self, carried: list[int]) -> list[int]: ...


class _What:
    """Names the group's current call of ``kind`` for messages, formatted only when one
    is needed."""

    __slots__ = ("group", "kind", "seq")

    def __init__(self, group: SpanningView, kind: str) -> None:
        self.group, self.kind, self.seq = group, kind, 0

    def __str__(self) -> str:
        return self.group._what(self.kind, self.seq)


class AcrossHostsLane:
    """A :class:`~meshcast.spanning.HostSpanningGroup`'s lane for tiny synchronous calls.

    It has the methods of :class:`meshcast.lanes.TinyCallLane` that the front door
    and the torch backend call; those it does not take yet return False (or None for
    the point-to-point ones), which sends the call down the general path.
    """

    def __init__(self, group: SpanningView) -> None:
        self.group = group
        self.plans: dict[tuple, tuple | bool] = {}
        self._last_all_reduce: tuple = (None, None, None, False)
        self._whats = {k: _What(group, k) for k in (
            "all_reduce", "broadcast", "barrier", "reduce", "all_gather", "reduce_scatter",
            "gather", "scatter", "all_to_all")}
        self._slot = group._slot_view
        self._me = group.rank()
        self.batch = None  # (TinyCallLane's compiled batch_isend_irecv: none across hosts)

    @property
    def compiled(self) -> frozenset[str]:
        """The calls this lane runs whole in one C call (the compiled runner's ``eager``,
        when the group's rows go straight between ranks over MPI), for the tracer."""
        if self.group._eager_runners() is None:
            return frozenset()
        return frozenset(("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                          "gather", "scatter", "all_to_all", "barrier"))

    # ------------------------------------------------------------------ calls

    def all_reduce(self, arr: np.ndarray, op: Any) -> bool:
        """:meth:`HostSpanningGroup.all_reduce` on ``arr`` in place; False if it does not
        qualify."""
        last = self._last_all_reduce  # a program repeats one call: skip hashing the key
        if last[0] is arr.dtype and last[1] == arr.shape and last[2] is op:
            plan = last[3]
        else:
            plan = self._plan(("all_reduce", arr.dtype, arr.shape, op), self._all_reduce_plan,
                              arr, op)
            self._last_all_reduce = (arr.dtype, arr.shape, op, plan)
        flags = arr.flags
        if not (flags.c_contiguous and flags.writeable):
            return False
        if not plan:
            fused = self._plan(("all_reduce", arr.dtype, arr.shape, op, "fused"),
                               self._fused_plan, "all_reduce", arr, op)
            return bool(fused) and self._fused("all_reduce", fused, arr, arr)
        mine, slot_in, checks, rows, kernel, average, fast = plan
        done = self._exchange("all_reduce", mine, slot_in, arr, checks, None, fast, arr)
        _reduced(done, kernel, arr, rows, average)
        self.group.last_algorithm = "all_reduce/eager"
        return True

    def broadcast(self, arr: np.ndarray, src: int) -> bool:
        """:meth:`HostSpanningGroup.broadcast` of ``arr`` from global rank ``src``; False if
        it does not qualify."""
        plan = self._plan(("broadcast", arr.dtype, arr.shape, src), self._broadcast_plan,
                          arr, src)
        flags = arr.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return False
        mine, slot_in, checks, row, fast = plan
        done = self._exchange("broadcast", mine, slot_in, arr, checks, None, fast, arr)
        if row is not None and done is not _COMBINED:
            arr[...] = row
        self.group.last_algorithm = "broadcast/eager"
        return True

    def reduce(self, arr: np.ndarray, op: Any, dst: int) -> bool:
        """:meth:`HostSpanningGroup.reduce` of ``arr`` into global rank ``dst`` (in place
        there, the others' arrays unchanged); False if it does not qualify."""
        plan = self._plan(("reduce", arr.dtype, arr.shape, op, dst), self._reduce_plan,
                          arr, op, dst)
        flags = arr.flags
        if not (plan and flags.c_contiguous and flags.writeable):
            return False
        mine, slot_in, checks, rows, kernel, average, fast = plan
        done = self._exchange("reduce", mine, slot_in, arr, checks, None, fast, arr)
        if rows is not None:  # the root
            _reduced(done, kernel, arr, rows, average)
        self.group.last_algorithm = "reduce/eager"
        return True

    def all_gather(self, out: np.ndarray, inp: np.ndarray) -> bool:
        """:meth:`HostSpanningGroup.all_gather` of ``inp`` into ``out``
        (all_gather_into_tensor); False if it does not qualify."""
        plan = self._plan(("all_gather", inp.dtype, inp.shape, out.dtype, out.shape),
                          self._all_gather_plan, out, inp)
        if not (plan and out.flags.c_contiguous and out.flags.writeable
                and inp.flags.c_contiguous):
            return False
        mine, slot_in, checks, rows, fast = plan
        # (rows come from the table, so an input inside the output is no matter)
        if self._exchange("all_gather", mine, slot_in, inp, checks, None, fast,
                          out) is not _COMBINED:
            np.concatenate(rows, out=out.reshape(-1))
        self.group.last_algorithm = "all_gather/eager"
        return True

    def reduce_scatter(self, out: np.ndarray, inp: np.ndarray, op: Any) -> bool:
        """:meth:`HostSpanningGroup.reduce_scatter` of ``inp`` into ``out``
        (reduce_scatter_tensor); False if it does not qualify."""
        plan = self._plan(("reduce_scatter", inp.dtype, inp.shape, out.dtype, out.shape, op),
                          self._reduce_scatter_plan, out, inp, op)
        if not (out.flags.c_contiguous and out.flags.writeable and inp.flags.c_contiguous):
            return False
        if not plan:
            fused = self._plan(("reduce_scatter", inp.dtype, inp.shape, out.dtype, out.shape,
                                op, "fused"), self._fused_plan, "reduce_scatter", inp, op, out)
            return bool(fused) and self._fused("reduce_scatter", fused, inp, out)
        mine, slot_in, checks, rows, kernel, average, fast = plan
        done = self._exchange("reduce_scatter", mine, slot_in, inp, checks, None, fast, out)
        _reduced(done, kernel, out, rows, average)
        self.group.last_algorithm = "reduce_scatter/eager"
        return True

    def all_to_all(self, out: np.ndarray, inp: np.ndarray) -> bool:
        """:meth:`HostSpanningGroup.all_to_all` of ``inp`` into ``out`` in even pieces
        (all_to_all_single without split sizes); False if it does not qualify. Every
        rank's whole input rides in its row, and each rank copies out its piece of
        every row."""
        plan = self._plan(("all_to_all", inp.dtype, inp.shape, out.dtype, out.shape),
                          self._all_to_all_plan, out, inp)
        if not (out.flags.c_contiguous and out.flags.writeable and inp.flags.c_contiguous):
            return False
        if not plan:
            fused = self._plan(("all_to_all", inp.dtype, inp.shape, out.dtype, out.shape,
                                "fused"), self._fused_all_to_all_plan, out, inp)
            return bool(fused) and self._fused("all_to_all", fused, inp, out)
        mine, slot_in, checks, rows, fast = plan
        group = self.group
        flat = inp.reshape(-1)

        def steps(seq: int) -> Any:
            fp = Fingerprint(seq, "all_to_all", dtype=inp.dtype.name)
            family = group._family("all_to_all", inp.nbytes, None)[0]
            even = [inp.size // group.size()] * group.size()
            return group._all_to_all_steps(fp, family, out.reshape(-1), flat, even, even,
                                           _nothing)

        done = self._exchange("all_to_all", mine, slot_in, inp, checks, steps, fast, out)
        if done:
            if done is not _COMBINED:
                np.concatenate(rows, out=out.reshape(-1))
            group.last_algorithm = "all_to_all/eager"
        return True

    def gather(self, inp: np.ndarray, outs: Any, dst: int | None) -> bool:
        """:meth:`HostSpanningGroup.gather` of ``inp`` into the list ``outs`` on global rank
        ``dst`` (None: the group's first rank), every piece shaped like ``inp``; False if
        it does not qualify. A rank whose call turns out to be a legal uneven gather (a
        third rank's piece is larger) finishes it the general way."""
        plan = self._plan(("gather", inp.dtype, inp.shape, dst), self._gather_plan, inp, dst)
        if not plan or not inp.flags.c_contiguous:
            return False
        mine, slot_in, checks, rows, root, fast = plan
        group = self.group
        at_root = group.rank() == root
        if not (_alike(outs, inp, group.size(), writable=True) if at_root else outs is None):
            return False
        flat = inp.reshape(-1)

        def steps(seq: int) -> Any:
            fp = Fingerprint(seq, "gather", dtype=inp.dtype.name, root=root)
            family = group._family("gather", inp.nbytes, None)[0]
            return group._gather_steps(fp, family, outs if at_root else None, flat, root,
                                       _nothing)

        if self._exchange("gather", mine, slot_in, inp, checks, steps, fast):
            if at_root:
                for piece, row in zip(outs, rows):
                    piece[...] = row
            group.last_algorithm = "gather/eager"
        return True

    def scatter(self, out: np.ndarray, ins: Any, src: int | None) -> bool:
        """:meth:`HostSpanningGroup.scatter` of the list ``ins`` on global rank ``src``
        (None: the group's first rank) into ``out``, every piece shaped like ``out``;
        False if it does not qualify. As :meth:`gather`, a legal uneven call the lane
        did not expect is finished the general way."""
        plan = self._plan(("scatter", out.dtype, out.shape, src), self._scatter_plan, out, src)
        if not plan or not (out.flags.c_contiguous and out.flags.writeable):
            return False
        mine, slot_in, checks, row, root, fast = plan
        group = self.group
        at_root = group.rank() == root
        if not (_alike(ins, out, group.size(), writable=False) if at_root else ins is None):
            return False

        def steps(seq: int) -> Any:
            fp = Fingerprint(seq, "scatter", dtype=out.dtype.name, root=root)
            family = group._family("scatter", out.nbytes, None)[0]
            whole = np.concatenate([p.reshape(-1) for p in ins]) if at_root else None
            return group._scatter_steps(fp, family, out.reshape(-1), whole, root, _nothing)

        done = self._exchange("scatter", mine, slot_in, ins, checks, steps, fast, out)
        if done:
            if done is not _COMBINED:
                out[...] = row
            group.last_algorithm = "scatter/eager"
        return True

    def barrier(self) -> bool:
        """:meth:`HostSpanningGroup.barrier`: the agreement alone."""
        plan = self._plan(("barrier",), self._barrier_plan)
        if not plan:
            return False
        mine, checks, fast = plan
        self._exchange("barrier", mine, None, None, checks, None, fast)
        self.group.last_algorithm = "barrier/agreement"
        return True

    def _exchange(self, kind: str, mine: bytes, slot_in: Any, arr: Any,
                  checks: tuple[tuple[int, bytes], ...], steps: Any = None,
                  fast: tuple | None = None, out: Any = None) -> bool:
        """One eager agreement: this rank's row (cell ``mine`` after the sequence number,
        then ``arr`` into ``slot_in``, or each of a list into each of a list) exchanged,
        and every row checked against ``checks`` (offset, cell); inline on the idle
        group, else behind its queued async work, as the general path.

        Returns True when every row is as expected (the caller finishes the call from
        the table), or ``_COMBINED`` when the compiled runner also combined the rows
        into ``out`` (``fast``: see :meth:`_fast`). Rows that are not as expected raise
        the general path's MismatchError, unless they are a legal call the lane did
        not expect (an uneven gather's pieces): ``steps(seq)`` then gives the general
        path's (body, eager), which finish the call, and the result is False.
        """
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():
            return group.fifo.call(
                lambda: self._round(kind, mine, slot_in, arr, checks, steps, fast, out),
                f"{kind} on {group.group_name}")
        try:
            if fast is not None and fast[5] is None:
                # The common case with as little as can be between the caller and C (every
                # rank's interpreter time is on the others' critical path on shared cores):
                # the rest of _round only when the call is not done in the one C call.
                seq = next(group._seq)
                runners, expect, code, row, at, _ = fast
                try:
                    status = runners[seq & 1].eager(
                        seq, self._me, mine, None if slot_in is None else arr, expect,
                        None if code is None else out, 0 if code is None else code, row, at,
                        group.flat.QUICK_POLLS)
                except RuntimeError as exc:  # MPI's error code, from C
                    status = exc
                if status == 0:
                    done = True if code is None else _COMBINED
                else:
                    done = self._round(kind, mine, slot_in, arr, checks, steps, fast, out,
                                       (seq, status))
            else:
                done = self._round(kind, mine, slot_in, arr, checks, steps, fast, out)
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return done

    def _round(self, kind: str, mine: bytes, slot_in: Any, arr: Any,
               checks: tuple[tuple[int, bytes], ...], steps: Any, fast: tuple | None,
               out: Any, started: tuple[int, Any] | None = None) -> bool:
        """One eager agreement (see :meth:`_exchange`); ``started``: (sequence number,
        the compiled call's status or error) when :meth:`_exchange` made the C call."""
        group = self.group
        what = self._whats[kind]
        seq = next(group._seq) if started is None else started[0]
        what.seq = seq
        slot = self._slot
        deadline = time.monotonic() + group.timeout
        if fast is not None:
            # The whole call in one C call: my row written, the program run, every row
            # checked, the rows combined into out.
            runners, expect, code, row, at, table_in = fast
            runner = runners[seq & 1]
            me = self._me
            data = arr if slot_in is not None else None
            if table_in is not None:
                for into, piece in zip(table_in, arr):
                    into[...] = piece
                data = None
            if group.flat.eager_rows(runner, seq, me, mine, data,
                                     expect, None if code is None else out,
                                     0 if code is None else code, row, at, deadline, what,
                                     None if started is None else started[1]):
                return True if code is None else _COMBINED
            # Some row is not as expected: the reading below needs my row in the slot.
            at = me * group._slot_bytes
            used = _row_length(group._table, at)
            slot[:used] = group._table[at:at + used]
        else:
            _SEQ.pack_into(slot, 0, seq)
            slot[_SEQ.size:CELL] = mine
            if type(slot_in) is list:
                for into, piece in zip(slot_in, arr):
                    into[...] = piece
            elif slot_in is not None:
                slot_in[...] = arr
            group._exchange(deadline, what, seq)
        table = group._table_view
        seqb = bytes(slot[:_SEQ.size])
        for at, cell in checks:
            if table[at:at + _SEQ.size] != seqb or table[at + _SEQ.size:at + CELL] != cell:
                counts, auxes, rows = group._read_rows(bytes(slot[:FP_SIZE]))  # may raise
                if steps is None:
                    raise MismatchError(f"{kind} #{seq} on {group.group_name}: the ranks' "
                                        f"agreement rows differ in their sizes")
                body, eager = steps(seq)
                group._settle(body, eager, counts, auxes, rows, deadline, what, seq)
                return False
        return True

    def _fused(self, kind: str, plan: tuple, inp: np.ndarray, out: np.ndarray) -> bool:
        """A mid-size all_reduce (``out`` is ``inp``) or reduce_scatter run as the general
        path runs it (family ``fused``: the agreement in the data's messages, see
        :func:`meshcast.algorithms.hierarchical.all_reduce_fused`) with what it
        recomputes cached: the cell less its sequence number, the fold's code, the
        context. False (nothing done) while async work is queued."""
        group = self.group
        fifo = group.fifo
        if not fifo.enter_inline():
            return False
        tail, fields, combine, kernel, average, counts, mine = plan
        try:
            seq = next(group._seq)
            what = self._whats[kind]
            what.seq = seq
            deadline = time.monotonic() + group.timeout
            cell = _SEQ.pack(seq) + tail
            ctx = group._fused_ctx(deadline, what, seq)
            if kind == "all_to_all":
                done = hier.all_to_all_fused(ctx, out.reshape(-1), inp.reshape(-1), cell,
                                             group._fused_plans)
            elif counts is None:
                done = hier.all_reduce_fused(ctx, out.reshape(-1), combine, cell,
                                             group._fused_plans, kernel)
            else:
                done = hier.reduce_scatter_fused(ctx, out.reshape(-1), inp.reshape(-1), counts,
                                                 combine, cell, group._fused_plans, kernel)
            if done:
                group.last_algorithm = f"{kind}/fused"
            elif kind == "all_to_all":
                # a rank whose pieces are uneven (a legal call) runs the agreement: every
                # rank settles the call from the rows, as the general path's refusal does
                self._all_to_all_refused(Fingerprint(seq, kind, **fields), out, inp,
                                         deadline, what)
            else:
                group._fused_refused(Fingerprint(seq, kind, **fields), mine, deadline, what)
            if average:
                ops.finish_average(out, group.size())
        except BaseException as exc:
            fifo.leave_inline(exc)
            raise
        fifo.leave_inline(None)
        return True

    def _all_to_all_refused(self, fp: Fingerprint, out: np.ndarray, inp: np.ndarray,
                            deadline: float, what: Any) -> None:
        """After a fused all_to_all that some rank did not run: the agreement's rows,
        then the call as they settle it (``HostSpanningGroup.all_to_all``'s refusal)."""
        group = self.group
        n = group.size()
        even = [inp.size // n] * n
        body, eager = group._all_to_all_steps(fp, "fused", out.reshape(-1), inp.reshape(-1),
                                              even, even, _nothing)
        group._agree_then_settle(fp, inp.size, 1, None, body, eager, deadline, what)

    # ------------------------------------------------------------------ plans

    def _plan(self, key: tuple, build: Any, *args: Any) -> tuple | bool:
        """The cached work of a tiny call, built on first use; False: not tiny."""
        try:
            plan = self.plans.get(key)
        except TypeError:  # an unhashable argument: the general path explains what is wrong
            return False
        if plan is None:
            forced = self.group._forced
            plan = False if key[0] in forced else build(*args)
            if len(self.plans) >= _PLANS_MAX:
                del self.plans[next(iter(self.plans))]
            self.plans[key] = plan
        return plan

    @staticmethod
    def _cell(kind: str, piece: int, carried: int, aux: int = 0, **fields: Any) -> bytes:
        """A row's cell less the sequence number: the general path's bytes exactly."""
        return (Fingerprint(0, kind, **fields).pack()[_SEQ.size:]
                + _WORDS.pack(piece, aux, carried))

    def _checks(self, cells: list[bytes], lengths: list[int]
                ) -> tuple[tuple[int, bytes], ...]:
        """(offset, cell) of every group rank's row in the exchanged table, when group rank
        g's row has cell ``cells[g]`` and carries ``lengths[g]`` bytes."""
        return tuple(zip(self.group.row_offsets(lengths), cells))

    def _fast(self, cells: list[bytes], code: int | None, row: int = 0, at: int = 0,
              table_in: list[np.ndarray] | None = None) -> tuple | None:
        """The call in one C call, when the group's rows go straight between ranks over
        MPI and the compiled runner was built (see ``MpiComm.eager_rows``): (runners,
        every rank's cell back to back, the combine's code (None: Python combines, or
        nothing to combine), the row a copy takes, the byte of the payloads it starts
        at, and for a list of pieces (scatter's root) where in this rank's row of the
        table each goes); else None."""
        runners = self.group._eager_runners()
        return None if runners is None else (runners, b"".join(cells), code, row, at,
                                             table_in)

    def _slot_like(self, like: np.ndarray, at: int = 0) -> np.ndarray:
        """This rank's row's payload (from byte ``at`` of it), seen as an array like
        ``like``: where the call's data is copied in."""
        raw = self.group._slot[CELL + at:CELL + at + like.nbytes]
        return raw.view(like.dtype).reshape(like.shape)

    def _payload(self, at: int, like: np.ndarray) -> np.ndarray:
        """The payload of the row at ``at`` in the table, seen as an array like ``like``."""
        raw = self.group._table[at + CELL:at + CELL + like.nbytes]
        return raw.view(like.dtype).reshape(like.shape)

    def _all_reduce_plan(self, arr: np.ndarray, op: Any, kind: str = "all_reduce",
                         root: int = -1) -> tuple | bool:
        group, dtype, n = self.group, arr.dtype, self.group.size()
        if (dtype.name not in ops.FAST_DTYPES or not dtype.isnative
                or arr.nbytes > group.eager_cap(kind) or n < 2):
            return False
        try:
            rop = ops.validate(op, dtype, caller=kind)
        except InvalidUsage:  # the general path raises it, naming the rank
            return False
        mine = self._cell(kind, arr.size, arr.nbytes, dtype=dtype.name, op=rop.name,
                          root=root, count=arr.size)
        checks = self._checks([mine] * n, [arr.nbytes] * n)
        combine = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
        slot_in = self._slot_like(arr)
        rows = [self._payload(at, arr) for at, _ in checks]
        fast = self._fast([mine] * n, ops.compiled_kernel(combine, dtype))
        return (mine, slot_in, checks, rows, ops.kernel(combine, dtype),
                rop is ops.ReduceOp.AVG, fast)

    def _fused_plan(self, kind: str, arr: np.ndarray, op: Any, out: np.ndarray | None = None
                    ) -> tuple | bool:
        """What :meth:`_fused` needs for a call of ``kind`` on input ``arr`` past the eager
        size that the group would run ``fused``; False: the general path runs it."""
        group, dtype, n = self.group, arr.dtype, self.group.size()
        if (dtype.name not in ops.FAST_DTYPES or not dtype.isnative
                or arr.nbytes <= group.eager_cap(kind) or n < 2
                or group._family(kind, arr.nbytes, None)[0] != "fused"):
            return False
        try:
            rop = ops.validate(op, dtype, caller=kind)
        except InvalidUsage:  # the general path raises it, naming the rank
            return False
        combine = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
        if kind == "all_reduce":
            counts, mine = None, arr.size
            fields = {"dtype": dtype.name, "op": rop.name, "count": arr.size}
        else:
            if out is None or out.dtype != dtype or out.size * n != arr.size:
                return False
            counts, mine = [out.size] * n, out.size
            fields = {"dtype": dtype.name, "op": rop.name, "extra": counts_hash(counts)}
        tail = Fingerprint(0, kind, **fields).pack()[_SEQ.size:]
        return (tail, fields, combine, ops.compiled_kernel(combine, dtype),
                rop is ops.ReduceOp.AVG, counts, mine)

    def _reduce_plan(self, arr: np.ndarray, op: Any, dst: Any) -> tuple | bool:
        group = self.group
        root = self._root_of(dst)
        plan = self._all_reduce_plan(arr, op, "reduce", root) if root is not None else False
        if not plan:
            return False
        mine, slot_in, checks, rows, kernel, average, fast = plan
        at_root = group.rank() == root
        if fast is not None and not at_root:
            fast = fast[:2] + (None,) + fast[3:]  # only the root combines
        return mine, slot_in, checks, rows if at_root else None, kernel, average, fast

    def _all_gather_plan(self, out: np.ndarray, inp: np.ndarray) -> tuple | bool:
        group, dtype, n = self.group, inp.dtype, self.group.size()
        if (dtype.name not in _MOVE_DTYPES or not dtype.isnative or out.dtype != dtype
                or out.size != inp.size * n or inp.nbytes > group.eager_cap("all_gather")
                or n < 2):
            return False
        mine = self._cell("all_gather", inp.size, inp.nbytes, dtype=dtype.name,
                          extra=counts_hash([inp.size] * n))
        checks = self._checks([mine] * n, [inp.nbytes] * n)
        slot_in = self._slot_like(inp)
        flat = inp.reshape(-1)
        return (mine, slot_in, checks, [self._payload(at, flat) for at, _ in checks],
                self._fast([mine] * n, _COPY_ALL))

    def _reduce_scatter_plan(self, out: np.ndarray, inp: np.ndarray, op: Any
                             ) -> tuple | bool:
        group, dtype, n = self.group, inp.dtype, self.group.size()
        if (dtype.name not in ops.FAST_DTYPES or not dtype.isnative or out.dtype != dtype
                or inp.size != out.size * n or inp.nbytes > group.eager_cap("reduce_scatter")
                or n < 2):
            return False
        try:
            rop = ops.validate(op, dtype, caller="reduce_scatter")
        except InvalidUsage:
            return False
        mine = self._cell("reduce_scatter", out.size, inp.nbytes, dtype=dtype.name,
                          op=rop.name, extra=counts_hash([out.size] * n))
        checks = self._checks([mine] * n, [inp.nbytes] * n)
        slot_in = self._slot_like(inp)
        piece = slice(group.rank() * out.size, (group.rank() + 1) * out.size)
        whole = inp.reshape(-1)
        rows = [self._payload(at, whole)[piece].reshape(out.shape) for at, _ in checks]
        combine = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
        fast = self._fast([mine] * n, ops.compiled_kernel(combine, dtype),
                          at=piece.start * dtype.itemsize)
        return (mine, slot_in, checks, rows, ops.kernel(combine, dtype),
                rop is ops.ReduceOp.AVG, fast)

    def _all_to_all_plan(self, out: np.ndarray, inp: np.ndarray) -> tuple | bool:
        group, dtype, n = self.group, inp.dtype, self.group.size()
        if (dtype.name not in _MOVE_DTYPES or not dtype.isnative or out.dtype != dtype
                or out.size != inp.size or inp.size % n or n < 2
                or inp.nbytes > group.eager_cap("all_to_all")):
            return False
        # the general path's row: its count, aux 1 (even pieces) and the whole input
        mine = self._cell("all_to_all", inp.size, inp.nbytes, aux=1, dtype=dtype.name)
        checks = self._checks([mine] * n, [inp.nbytes] * n)
        piece = inp.size // n
        mine_at = slice(group.rank() * piece, (group.rank() + 1) * piece)
        whole = inp.reshape(-1)
        rows = [self._payload(at, whole)[mine_at] for at, _ in checks]
        return (mine, self._slot_like(inp), checks, rows,
                self._fast([mine] * n, _COPY_ALL, at=mine_at.start * dtype.itemsize))

    def _fused_all_to_all_plan(self, out: np.ndarray, inp: np.ndarray) -> tuple | bool:
        """What :meth:`_fused` needs for an all_to_all in even pieces past the eager size
        that the group would run ``fused``; False: the general path runs it."""
        group, dtype, n = self.group, inp.dtype, self.group.size()
        # the dtypes the eager lane moves as they are; others (object arrays, byte orders
        # the front door converts) take the general path, which validates them
        if (dtype.name not in _MOVE_DTYPES or not dtype.isnative or out.dtype != dtype
                or out.size != inp.size or inp.size % n or n < 2
                or inp.nbytes <= group.eager_cap("all_to_all")
                or group._family("all_to_all", inp.nbytes, None)[0] != "fused"):
            return False
        fields = {"dtype": dtype.name}
        # the general path's cell: the fingerprint, the input's size, aux 1 (even pieces)
        tail = (Fingerprint(0, "all_to_all", **fields).pack()[_SEQ.size:]
                + _WORDS.pack(inp.size, 1, 0))
        return (tail, fields, None, None, False, None, inp.size)

    def _root_of(self, rank: Any) -> int | None:
        """The group rank of global rank ``rank`` (None: the group's first rank)."""
        group = self.group
        if rank is None:
            return 0
        return group._group_rank_of.get(rank) if type(rank) is int else None

    def _gather_plan(self, inp: np.ndarray, dst: Any) -> tuple | bool:
        group, dtype, n = self.group, inp.dtype, self.group.size()
        root = self._root_of(dst)
        if (root is None or dtype.name not in _MOVE_DTYPES or not dtype.isnative
                or inp.nbytes > group.eager_cap("gather")):
            return False
        # The root's cell names the pieces it expects (all like its input): a rank whose
        # input differs shows in its row, and the root's check decides as the general
        # path's does.
        cells = [self._cell("gather", inp.size, inp.nbytes, dtype=dtype.name, root=root,
                            aux=counts_hash([inp.size] * n) if g == root else 0)
                 for g in range(n)]
        checks = self._checks(cells, [inp.nbytes] * n)
        slot_in = self._slot_like(inp)
        rows = [self._payload(at, inp) for at, _ in checks] if group.rank() == root else None
        return cells[group.rank()], slot_in, checks, rows, root, self._fast(cells, None)

    def _scatter_plan(self, out: np.ndarray, src: Any) -> tuple | bool:
        group, dtype, n = self.group, out.dtype, self.group.size()
        root = self._root_of(src)
        whole = out.nbytes * n
        if (root is None or dtype.name not in _MOVE_DTYPES or not dtype.isnative
                or whole > group.eager_cap("scatter")):
            return False
        # Only the root's row carries data: every rank's piece, back to back.
        lengths = [whole if g == root else 0 for g in range(n)]
        cells = [self._cell("scatter", out.size, lengths[g], dtype=dtype.name, root=root,
                            aux=counts_hash([out.size] * n) if g == root else 0)
                 for g in range(n)]
        checks = self._checks(cells, lengths)
        me = group.rank()
        slot_in = ([self._slot_like(out, i * out.nbytes) for i in range(n)]
                   if me == root else None)
        row = self._payload(checks[root][0] + me * out.nbytes, out)
        # (the root writes its pieces straight into its row of the table for the C call)
        fast = self._fast(cells, None if me == root else _COPY_ROW, row=root,
                          at=me * out.nbytes,
                          table_in=[self._payload(checks[me][0] + i * out.nbytes, out)
                                    for i in range(n)] if me == root else None)
        return cells[me], slot_in, checks, row, root, fast

    def _broadcast_plan(self, arr: np.ndarray, src: Any) -> tuple | bool:
        group, dtype, n = self.group, arr.dtype, self.group.size()
        root = self._root_of(src)
        if (root is None or dtype.name not in _MOVE_DTYPES or not dtype.isnative
                or arr.nbytes > group.eager_cap("broadcast")):
            return False
        # Only the root's row carries the data: its cell says so, the others' say 0 bytes.
        lengths = [arr.nbytes if g == root else 0 for g in range(n)]
        cells = [self._cell("broadcast", arr.size, lengths[g], dtype=dtype.name, root=root,
                            count=arr.size) for g in range(n)]
        checks = self._checks(cells, lengths)
        at_root = group.rank() == root
        slot_in = self._slot_like(arr) if at_root else None
        row = None if at_root else self._payload(checks[root][0], arr)
        fast = self._fast(cells, None if at_root else _COPY_ROW, row=root)
        return cells[group.rank()], slot_in, checks, row, fast

    def _barrier_plan(self) -> tuple | bool:
        n = self.group.size()
        mine = self._cell("barrier", 0, 0)
        return mine, self._checks([mine] * n, [0] * n), self._fast([mine] * n, None)

    # ------------------------------------------------ what the general path takes

    def _declined(self, *args: Any) -> bool:
        """A call the lane does not take (yet): the front door runs the general path."""
        return False

    def _no_work(self, *args: Any) -> None:
        """A point-to-point call the lane does not take: no Work, the general path's."""
        return None

    send = recv = _declined
    isend = irecv = _no_work


def _reduced(done: Any, kernel: Any, dst: np.ndarray, rows: list[np.ndarray],
             average: bool) -> None:
    """Finish a reduction after the exchange: ``dst`` = the rows combined, unless the
    compiled runner already did (``done`` is ``_COMBINED``: then only AVG's division)."""
    if done is not _COMBINED:
        _combine(kernel, dst, rows, average)
    elif average:
        ops.finish_average(dst, len(rows))


def _combine(kernel: Any, dst: np.ndarray, rows: list[np.ndarray], average: bool) -> None:
    """``dst`` = the rows combined left to right in group-rank order, as the general
    path's :func:`meshcast.ops.reduce_many` (bitwise the same result), then AVG's
    division."""
    kernel(rows[0], rows[1], out=dst)
    for row in rows[2:]:
        kernel(dst, row, out=dst)
    if average:
        ops.finish_average(dst, len(rows))


__all__ = ["AcrossHostsLane"]
